// tma_dump: what the driver's encoder writes, for Omega's host TMA encoder and its fixture.
//
// Runs on the GPU machine only; it is a harness that uses CUDA (Omega itself never does):
//   /usr/local/cuda/bin/nvcc -O2 -std=c++17 -o tma_dump benches/cuda/tma_dump.cu -lcuda
//   tma_dump layout            one base shape, then each field varied over several values (layout study)
//   tma_dump random N [SEED]   N random tiled shapes over every element type, rank, interleave, swizzle,
//                              L2 promotion and fill, including shapes the driver refuses
//
// Each line is one call: the parameters, then `=` and the 128 descriptor bytes in hex, or `! <CUresult>`
// when the driver refused. tests/tma_fixture.rs (through hal/tests/data/tma_driver.txt) checks Omega's
// encoder against these lines on every platform, so the driver is consulted once, here.
//
//   line := elemtype rank interleave swizzle l2 fill address  d0..d4  s0..s3  b0..b4  e0..e4  (= hex | ! rc)
//   elemtype, interleave, swizzle, l2, fill: CUDA's enum values; strides s_i are bytes of dimension i+1.
#include <cuda.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

struct Spec {
  unsigned elemtype, rank, interleave, swizzle, l2, fill;
  uint64_t address;
  uint64_t dims[5];
  uint64_t strides[4];
  uint32_t box[5];
  uint32_t estride[5];
};

static const unsigned kElemBytes[13] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};

static void emit(const Spec& s) {
  CUtensorMap t;
  std::memset(&t, 0, sizeof(t));
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], estride[5];
  for (int i = 0; i < 5; ++i) {
    dims[i] = s.dims[i];
    box[i] = s.box[i];
    estride[i] = s.estride[i];
  }
  for (int i = 0; i < 4; ++i) strides[i] = s.strides[i];
  CUresult r = cuTensorMapEncodeTiled(&t, static_cast<CUtensorMapDataType>(s.elemtype), s.rank,
                                      reinterpret_cast<void*>(s.address), dims, strides, box, estride,
                                      static_cast<CUtensorMapInterleave>(s.interleave),
                                      static_cast<CUtensorMapSwizzle>(s.swizzle),
                                      static_cast<CUtensorMapL2promotion>(s.l2),
                                      static_cast<CUtensorMapFloatOOBfill>(s.fill));
  std::printf("%u %u %u %u %u %u %#llx", s.elemtype, s.rank, s.interleave, s.swizzle, s.l2, s.fill,
              (unsigned long long)s.address);
  for (int i = 0; i < 5; ++i) std::printf(" %llu", (unsigned long long)s.dims[i]);
  for (int i = 0; i < 4; ++i) std::printf(" %llu", (unsigned long long)s.strides[i]);
  for (int i = 0; i < 5; ++i) std::printf(" %u", s.box[i]);
  for (int i = 0; i < 5; ++i) std::printf(" %u", s.estride[i]);
  if (r != CUDA_SUCCESS) {
    std::printf(" ! %d\n", (int)r);
    return;
  }
  std::printf(" =");
  const unsigned char* p = reinterpret_cast<const unsigned char*>(&t);
  std::printf(" ");
  for (int i = 0; i < 128; ++i) std::printf("%02x", p[i]);
  std::printf("\n");
}

static Spec base() {
  Spec s;
  std::memset(&s, 0, sizeof(s));
  s.elemtype = 7;  // f32
  s.rank = 5;
  s.address = 0x7f1234560000ull;
  const uint64_t d[5] = {1000, 300, 20, 7, 3};
  const uint32_t b[5] = {16, 8, 2, 3, 1};
  for (int i = 0; i < 5; ++i) {
    s.dims[i] = d[i];
    s.box[i] = b[i];
    s.estride[i] = 1;
  }
  s.strides[0] = 4096;
  for (int i = 1; i < 4; ++i) s.strides[i] = s.strides[i - 1] * d[i] + 64;
  return s;
}

static void layout() {
  std::printf("# base\n");
  emit(base());
  std::printf("# address\n");
  for (int bit = 4; bit < 57; ++bit) {
    Spec s = base();
    s.address ^= 1ull << bit;
    emit(s);
  }
  for (int i = 0; i < 5; ++i) {
    std::printf("# dim %d\n", i);
    const uint64_t vs[] = {1, 2, 3, 255, 256, 257, 65535, 65536, 1ull << 20, (1ull << 31), (1ull << 32) - 1, 1ull << 32};
    for (uint64_t v : vs) {
      Spec s = base();
      s.dims[i] = v;
      if (s.box[i] > v) s.box[i] = static_cast<uint32_t>(v);
      emit(s);
    }
  }
  for (int i = 0; i < 4; ++i) {
    std::printf("# stride %d\n", i);
    for (int bit = 4; bit < 41; ++bit) {
      Spec s = base();
      s.strides[i] = (1ull << bit) | 16;
      emit(s);
    }
    Spec s = base();
    s.strides[i] = (1ull << 40) - 16;
    emit(s);
  }
  for (int i = 0; i < 5; ++i) {
    std::printf("# box %d\n", i);
    for (uint32_t v = 1; v <= 256; v = v < 8 ? v + 1 : v * 2) {
      Spec s = base();
      s.box[i] = v;
      if (s.dims[i] < v) s.dims[i] = v;
      emit(s);
    }
    for (uint32_t v : {5u, 17u, 100u, 129u, 255u}) {
      Spec s = base();
      s.box[i] = v;
      if (s.dims[i] < v) s.dims[i] = v;
      emit(s);
    }
  }
  for (int i = 0; i < 5; ++i) {
    std::printf("# estride %d\n", i);
    for (uint32_t v = 1; v <= 8; ++v) {
      Spec s = base();
      s.estride[i] = v;
      if (s.box[i] < v) s.box[i] = v;
      if (s.dims[i] < v) s.dims[i] = v;
      emit(s);
    }
  }
  std::printf("# elemtype\n");
  for (unsigned e = 0; e < 13; ++e) {
    Spec s = base();
    s.elemtype = e;
    s.box[0] = 16 / kElemBytes[e] * 2;
    emit(s);
  }
  std::printf("# swizzle\n");
  for (unsigned z = 0; z < 4; ++z) {
    Spec s = base();
    s.swizzle = z;
    emit(s);
  }
  std::printf("# interleave\n");
  for (unsigned v = 0; v < 3; ++v) {
    for (unsigned z = 0; z < 4; ++z) {
      Spec s = base();
      s.interleave = v;
      s.swizzle = z;
      s.address &= ~0xffull;
      emit(s);
    }
  }
  std::printf("# l2\n");
  for (unsigned v = 0; v < 4; ++v) {
    Spec s = base();
    s.l2 = v;
    emit(s);
  }
  std::printf("# fill\n");
  for (unsigned v = 0; v < 2; ++v) {
    Spec s = base();
    s.fill = v;
    emit(s);
  }
  std::printf("# rank\n");
  for (unsigned r = 1; r <= 5; ++r) {
    Spec s = base();
    s.rank = r;
    for (unsigned i = r; i < 5; ++i) {
      s.dims[i] = 0;
      s.box[i] = 0;
      s.estride[i] = 0;
      if (i >= 1) s.strides[i - 1] = 0;
    }
    emit(s);
  }
}

static void random_specs(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto below = [&](uint64_t k) { return k ? rng() % k : 0; };
  std::printf("# random %d seed %#llx\n", n, (unsigned long long)seed);
  for (int c = 0; c < n; ++c) {
    Spec s;
    std::memset(&s, 0, sizeof(s));
    s.elemtype = static_cast<unsigned>(below(13));
    const unsigned esz = kElemBytes[s.elemtype];
    s.rank = 1 + static_cast<unsigned>(below(5));
    s.interleave = below(6) == 0 ? static_cast<unsigned>(below(3)) : 0;
    s.swizzle = static_cast<unsigned>(below(4));
    s.l2 = static_cast<unsigned>(below(4));
    s.fill = below(3) == 0 ? 1 : 0;
    // Mostly valid addresses (16-byte, sometimes 32-byte aligned), now and then a misaligned one.
    s.address = (0x7f0000000000ull + (below(1ull << 34) << 4)) & ~(below(2) ? 0x1full : 0xfull);
    if (below(40) == 0) s.address |= 1 + below(15);
    for (unsigned i = 0; i < s.rank; ++i) {
      const unsigned kind = static_cast<unsigned>(below(10));
      s.dims[i] = kind == 0 ? 1 + below(4) : kind < 8 ? 1 + below(4096) : 1 + below(1ull << 24);
      if (below(60) == 0) s.dims[i] = (1ull << 32) + below(8);  // past the driver's limit
    }
    uint64_t row = s.dims[0] * esz;
    for (unsigned i = 1; i < s.rank; ++i) {
      uint64_t st = (row + 15) / 16 * 16 + 16 * below(8);
      if (below(50) == 0) st += 1 + below(15);  // not a multiple of 16
      if (below(80) == 0) st = 1ull << (40 + below(2));
      s.strides[i - 1] = st;
      row = st * s.dims[i];
    }
    for (unsigned i = 0; i < s.rank; ++i) {
      uint64_t cap = s.dims[i] < 256 ? s.dims[i] : 256;
      s.box[i] = static_cast<uint32_t>(1 + below(cap));
      if (i == 0 && below(2)) {  // an inner box of whole 16-byte units, within the swizzle span
        const unsigned span = s.swizzle ? (16u << s.swizzle) : 256u * esz;
        unsigned units = span / 16;
        s.box[0] = static_cast<uint32_t>((1 + below(units)) * 16 / esz);
        if (s.box[0] == 0) s.box[0] = 1;
        if (s.box[0] > 256) s.box[0] = 256;
      }
      if (below(100) == 0) s.box[i] = 257;
      s.estride[i] = below(4) == 0 ? static_cast<uint32_t>(1 + below(8)) : 1;
      if (below(100) == 0) s.estride[i] = 9;
    }
    emit(s);
  }
}

int main(int argc, char** argv) {
  // The encoder wants a current context (CUDA_ERROR_INVALID_CONTEXT, 201, without one).
  CUdevice dev;
  CUcontext ctx;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    std::fprintf(stderr, "no CUDA context\n");
    return 2;
  }
  if (argc > 1 && std::strcmp(argv[1], "layout") == 0) {
    layout();
    return 0;
  }
  if (argc > 2 && std::strcmp(argv[1], "random") == 0) {
    const uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 0)
                                   : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    random_specs(std::atoi(argv[2]), seed);
    return 0;
  }
  std::fprintf(stderr, "usage: tma_dump layout | random N [SEED]\n");
  return 2;
}
