// tma_check: Omega's device-built TMA descriptors against the driver's encoder, byte for byte.
//
// Runs on the GPU machine only (tools/gpu/run_features.sh builds it with
//   /usr/local/cuda/bin/nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I kernels/cuda/probes \
//       -o tma_check benches/cuda/tma_check.cu -lcuda
// ). It is a test harness that uses CUDA; Omega itself never does.
//
//   tma_check [SHAPES [SEED]]    (default 200 shapes, seed from the clock)
//
// For SHAPES random 2-D and 3-D bf16 and f32 tensors (dimensions, strides multiples of 16 bytes, boxes of
// at most 256 per side, element strides, swizzle none / 32 / 64 / 128 B, zero or NaN fill) it encodes a
// descriptor with cuTensorMapEncodeTiled and builds the same one with omega_tma_build, the kernel the
// probes use (kernels/cuda/probes/tma_desc.cuh, included here), and compares the 128 bytes. A mismatch is
// printed byte range by byte range, each range named by the descriptor fields it belongs to; that map is
// derived at start from the driver alone (one field of a base shape changed at a time, the bytes that
// change recorded), since the layout is not published. The last line is "N shapes, M mismatches".
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tma_desc.cuh"

#define CHECK_RT(x)                                                                        \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

struct Shape {
  bool f32;
  unsigned rank;
  uint64_t address;
  uint64_t dims[3];
  uint64_t strides[2];  // bytes, dimensions 1 and 2
  uint32_t box[3];
  uint32_t estride[3];
  unsigned swizzle;  // 0 none, 1 32 B, 2 64 B, 3 128 B (CUDA and PTX agree)
  unsigned fill;     // 0 none (zeros), 1 NaN request zero FMA (CUDA and PTX agree)
};

static unsigned elem_bytes(const Shape& s) { return s.f32 ? 4 : 2; }

// The driver's descriptor, or the CUresult that refused it.
static CUresult encode(const Shape& s, CUtensorMap* out) {
  static const CUtensorMapSwizzle swz[4] = {CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_SWIZZLE_32B,
                                            CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_SWIZZLE_128B};
  cuuint64_t dims[3] = {s.dims[0], s.dims[1], s.dims[2]};
  cuuint64_t strides[2] = {s.strides[0], s.strides[1]};
  cuuint32_t box[3] = {s.box[0], s.box[1], s.box[2]};
  cuuint32_t estride[3] = {s.estride[0], s.estride[1], s.estride[2]};
  std::memset(out, 0, sizeof(*out));
  return cuTensorMapEncodeTiled(out, s.f32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                s.rank, reinterpret_cast<void*>(s.address), dims, strides, box, estride,
                                CU_TENSOR_MAP_INTERLEAVE_NONE, swz[s.swizzle], CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                s.fill ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
                                       : CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

// The builder's arguments for `s`, in PTX's encodings (elemtype: f32 7, bf16 10).
static OmegaTmaArgs to_args(const Shape& s) {
  OmegaTmaArgs a;
  std::memset(&a, 0, sizeof(a));
  a.global_address = s.address;
  for (unsigned i = 0; i < 3; ++i) {
    a.global_dim[i] = static_cast<unsigned>(s.dims[i]);
    a.box_dim[i] = s.box[i];
    a.element_stride[i] = s.estride[i];
  }
  a.global_stride[0] = s.strides[0];
  a.global_stride[1] = s.strides[1];
  a.rank = s.rank;
  a.elemtype = s.f32 ? 7 : 10;
  a.swizzle = s.swizzle;
  a.interleave = 0;
  a.fill = s.fill;
  return a;
}

static Shape random_shape(std::mt19937_64& rng, uint64_t base) {
  auto below = [&](uint64_t n) { return n ? rng() % n : 0; };
  Shape s;
  std::memset(&s, 0, sizeof(s));
  s.f32 = below(2);
  s.rank = 2 + static_cast<unsigned>(below(2));
  s.swizzle = static_cast<unsigned>(below(4));
  s.fill = s.f32 ? static_cast<unsigned>(below(2)) : 0;
  const unsigned esz = elem_bytes(s);
  const unsigned per16 = 16 / esz;  // elements per 16 bytes
  s.address = base + 16 * below(4096);
  s.dims[0] = 64 + below(4000);
  s.dims[1] = 1 + below(2048);
  s.dims[2] = s.rank > 2 ? 1 + below(64) : 1;
  s.strides[0] = (s.dims[0] * esz + 15) / 16 * 16 + 16 * below(4);
  s.strides[1] = s.strides[0] * s.dims[1] + 16 * below(4);
  // The inner box is whole 16-byte units, and within the swizzle span when swizzled.
  const unsigned span = s.swizzle ? (16u << s.swizzle) : 256u * esz;
  const unsigned max_inner = std::min(256u, span / esz);
  s.box[0] = per16 * (1 + static_cast<unsigned>(below(max_inner / per16)));
  for (unsigned i = 1; i < 3; ++i) s.box[i] = 1 + static_cast<unsigned>(below(std::min<uint64_t>(256, s.dims[i])));
  if (s.rank < 3) s.box[2] = 1;
  for (unsigned i = 0; i < 3; ++i) s.estride[i] = below(4) == 0 ? 1 + static_cast<unsigned>(below(std::min(8u, s.box[i]))) : 1;
  if (s.rank < 3) s.estride[2] = 1;
  return s;
}

static void print_shape(const Shape& s) {
  std::printf("  %s rank %u addr %#llx dims [%llu %llu %llu] strides [%llu %llu] box [%u %u %u] estride [%u %u %u] "
              "swizzle %u fill %u\n",
              s.f32 ? "f32" : "bf16", s.rank, (unsigned long long)s.address, (unsigned long long)s.dims[0],
              (unsigned long long)s.dims[1], (unsigned long long)s.dims[2], (unsigned long long)s.strides[0],
              (unsigned long long)s.strides[1], s.box[0], s.box[1], s.box[2], s.estride[0], s.estride[1],
              s.estride[2], s.swizzle, s.fill);
}

// Which descriptor bytes each field moves, from the driver: a base 3-D f32 shape, then one field changed
// at a time.
static std::vector<std::string> field_map(uint64_t base) {
  std::vector<std::string> owner(128);
  Shape b;
  std::memset(&b, 0, sizeof(b));
  b.f32 = true;
  b.rank = 3;
  b.address = base + 0x1000;
  b.dims[0] = 1000; b.dims[1] = 300; b.dims[2] = 20;
  b.strides[0] = 4096; b.strides[1] = 4096 * 320;
  b.box[0] = 16; b.box[1] = 8; b.box[2] = 2;
  b.estride[0] = b.estride[1] = b.estride[2] = 1;
  CUtensorMap t0;
  if (encode(b, &t0) != CUDA_SUCCESS) {
    std::printf("# field map: the driver refused the base shape\n");
    return owner;
  }
  struct Variant { const char* name; void (*apply)(Shape&); };
  const Variant variants[] = {
      {"global_address", [](Shape& s) { s.address ^= 0x0000123456780ull << 4; }},
      {"global_dim[0]", [](Shape& s) { s.dims[0] = 0x12345; }},
      {"global_dim[1]", [](Shape& s) { s.dims[1] = 0x2345; }},
      {"global_dim[2]", [](Shape& s) { s.dims[2] = 0x345; }},
      {"global_stride[0]", [](Shape& s) { s.strides[0] = 0x123450; s.strides[1] = 0x123450ull * 0x400; }},
      {"global_stride[1]", [](Shape& s) { s.strides[1] = 4096ull * 0x12345; }},
      {"box_dim[0]", [](Shape& s) { s.box[0] = 32; }},
      {"box_dim[1]", [](Shape& s) { s.box[1] = 0xa5; }},
      {"box_dim[2]", [](Shape& s) { s.box[2] = 0x5a; }},
      {"element_stride[0]", [](Shape& s) { s.estride[0] = 2; }},
      {"element_stride[1]", [](Shape& s) { s.estride[1] = 7; }},
      {"element_stride[2]", [](Shape& s) { s.estride[2] = 5; }},
      {"elemtype", [](Shape& s) { s.f32 = false; s.box[0] = 32; }},
      {"swizzle", [](Shape& s) { s.swizzle = 3; }},
      {"fill", [](Shape& s) { s.fill = 1; }},
      {"rank", [](Shape& s) { s.rank = 2; s.dims[2] = 1; s.box[2] = 1; }},
  };
  for (const Variant& v : variants) {
    Shape s = b;
    v.apply(s);
    CUtensorMap t1;
    CUresult r = encode(s, &t1);
    if (r != CUDA_SUCCESS) {
      std::printf("# field map: the driver refused the %s variant (%d)\n", v.name, (int)r);
      continue;
    }
    const unsigned char* p0 = reinterpret_cast<const unsigned char*>(&t0);
    const unsigned char* p1 = reinterpret_cast<const unsigned char*>(&t1);
    for (int i = 0; i < 128; ++i)
      if (p0[i] != p1[i]) owner[i] += owner[i].empty() ? v.name : std::string("/") + v.name;
  }
  std::printf("# field map (bytes each field moves):");
  for (int i = 0; i < 128;) {
    int j = i;
    while (j + 1 < 128 && owner[j + 1] == owner[i]) ++j;
    if (!owner[i].empty()) std::printf(" [%d..%d] %s;", i, j, owner[i].c_str());
    i = j + 1;
  }
  std::printf("\n");
  return owner;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 200;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 0)
                                 : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::printf("# tma_check: %d shapes, seed %#llx\n", n, (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  CHECK_RT(cudaFree(nullptr));
  void* tensor = nullptr;
  CHECK_RT(cudaMalloc(&tensor, 1 << 20));
  const uint64_t base = reinterpret_cast<uint64_t>(tensor);
  const std::vector<std::string> owner = field_map(base);

  std::vector<Shape> shapes;
  std::vector<CUtensorMap> want;
  int refused = 0;
  for (int tries = 0; static_cast<int>(shapes.size()) < n && tries < 20 * n; ++tries) {
    Shape s = random_shape(rng, base);
    CUtensorMap t;
    CUresult r = encode(s, &t);
    if (r != CUDA_SUCCESS) {
      if (refused++ < 3) {
        std::printf("# the driver refused a shape (%d):\n", (int)r);
        print_shape(s);
      }
      continue;
    }
    shapes.push_back(s);
    want.push_back(t);
  }
  const unsigned count = static_cast<unsigned>(shapes.size());
  std::vector<OmegaTmaArgs> args(count);
  for (unsigned i = 0; i < count; ++i) args[i] = to_args(shapes[i]);
  OmegaTmaArgs* d_args = nullptr;
  unsigned char* d_out = nullptr;
  unsigned int* d_status = nullptr;
  CHECK_RT(cudaMalloc(&d_args, sizeof(OmegaTmaArgs) * count));
  CHECK_RT(cudaMalloc(&d_out, 128ull * count));
  CHECK_RT(cudaMalloc(&d_status, 4ull * count));
  CHECK_RT(cudaMemcpy(d_args, args.data(), sizeof(OmegaTmaArgs) * count, cudaMemcpyHostToDevice));
  CHECK_RT(cudaMemset(d_out, 0xa5, 128ull * count));
  CHECK_RT(cudaMemset(d_status, 0, 4ull * count));
  omega_tma_build<<<count, 32>>>(d_args, d_out, d_status, count);
  CHECK_RT(cudaGetLastError());
  CHECK_RT(cudaDeviceSynchronize());
  std::vector<unsigned char> got(128ull * count);
  std::vector<unsigned int> status(count);
  CHECK_RT(cudaMemcpy(got.data(), d_out, got.size(), cudaMemcpyDeviceToHost));
  CHECK_RT(cudaMemcpy(status.data(), d_status, 4ull * count, cudaMemcpyDeviceToHost));

  unsigned mismatches = 0, printed = 0;
  for (unsigned i = 0; i < count; ++i) {
    const unsigned char* w = reinterpret_cast<const unsigned char*>(&want[i]);
    const unsigned char* g = got.data() + 128ull * i;
    if (status[i] == 1 && std::memcmp(w, g, 128) == 0) continue;
    ++mismatches;
    if (printed++ >= 20) continue;
    std::printf("MISMATCH shape %u (builder status %u):\n", i, status[i]);
    print_shape(shapes[i]);
    for (int b = 0; b < 128;) {
      if (w[b] == g[b]) {
        ++b;
        continue;
      }
      int e = b;
      while (e + 1 < 128 && w[e + 1] != g[e + 1]) ++e;
      std::printf("  bytes [%d..%d] (%s): driver", b, e, owner[b].empty() ? "no field seen to move them" : owner[b].c_str());
      for (int k = b; k <= e; ++k) std::printf(" %02x", w[k]);
      std::printf(", omega");
      for (int k = b; k <= e; ++k) std::printf(" %02x", g[k]);
      std::printf("\n");
      b = e + 1;
    }
  }
  std::printf("# %d shapes the driver refused were replaced by others\n", refused);
  std::printf("%u shapes, %u mismatches\n", count, mismatches);
  cudaFree(d_args);
  cudaFree(d_out);
  cudaFree(d_status);
  cudaFree(tensor);
  return mismatches == 0 && static_cast<int>(count) == n ? 0 : 1;
}
