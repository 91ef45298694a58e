// CUDA-side check and benchmark of Omega's prefill attention (kernels/cuda/prefill.cu,
// kernels/cuda/attention/prefill_bf16.cuh) on the GPU machine. This program uses CUDA; Omega never does.
// It loads the module's cubin through the driver API (the very bytes build.rs makes, compiled the same
// way), encodes the TMA descriptors with the driver's encoder, and checks every output element against a
// plain reference kernel (one warp per query row, f32 online softmax, no tensor cores):
//
//   nvcc -cubin -arch=sm_90a -O3 -std=c++17 -Ikernels/cuda -o /tmp/prefill.cubin kernels/cuda/prefill.cu
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/prefill_check \
//        benches/cuda/prefill_check.cu -lcuda
//   /tmp/prefill_check [--cubin /tmp/prefill.cubin] [--check-only]
//
// Inputs: q, k, v bf16 uniform in [-1, 1) from a seeded generator, out poisoned (all-ones bits, a NaN)
// before each launch. Pass: |out - ref| <= 2^-7 * mag + 1e-5 everywhere, mag = sum_j p_j |v_j| / l (the
// kernel rounds P to bf16, 2^-8 relative each; the factor 2 is margin), and the bf16 entry's output
// within 2^-8 |ref| more. Timing: GQA 32/4/128, batch 1, causal, seq 1K/4K/16K, cudaEvent over repeated
// launches after warm-up, the best of two rounds; FLOPs as FlashAttention counts them (4 * d per attended
// (query, kv) pair: seq (seq + 1) / 2 pairs a head when causal). Output lines:
//   kernel NAME regs R smem S
//   check SEQ QH/KVH causal|full max_err_over_tol E PASS|FAIL      (bf16 entry: check ... bf16 ...)
//   prefill.<seq>.causal.omega_ms T / prefill.<seq>.causal.omega_tflops T
#include <cuda.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check_common.cuh"

#define D 128
#define PREFILL_THREADS 384
// PREFILL_SMEM_BYTES of prefill_bf16.cuh (two stages).
#define PREFILL_SMEM_BYTES ((1 + 2 * 2) * 32768 + (3 * 2 + 1) * 8 + 1024)

#define CU(x)                                                                \
  do {                                                                       \
    CUresult r = (x);                                                        \
    if (r != CUDA_SUCCESS) {                                                 \
      const char* s = "?";                                                   \
      cuGetErrorString(r, &s);                                               \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s);         \
      exit(2);                                                               \
    }                                                                        \
  } while (0)

// One warp per (query row, head): lanes hold 4 head-dim elements each; f32 online softmax over the kv rows
// the row attends. out and mag: [seq, q_heads, 128].
__global__ void reference_kernel(const uint16_t* q, const uint16_t* k, const uint16_t* v, float* out, float* mag,
                                 int seq, int qh, int kvh, int causal, float scale) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (warp >= seq * qh) return;
  const int r = warp / qh, h = warp % qh, g = h / (qh / kvh);
  auto f = [](uint16_t b) { return __uint_as_float((uint32_t)b << 16); };
  float qv[4], acc[4] = {0, 0, 0, 0}, am[4] = {0, 0, 0, 0};
  for (int i = 0; i < 4; ++i) qv[i] = f(q[((size_t)r * qh + h) * D + lane * 4 + i]);
  float m = -INFINITY, l = 0.f;
  const int n = causal ? r + 1 : seq;
  for (int j = 0; j < n; ++j) {
    const uint16_t* kr = k + ((size_t)j * kvh + g) * D + lane * 4;
    const uint16_t* vr = v + ((size_t)j * kvh + g) * D + lane * 4;
    float s = 0.f;
    for (int i = 0; i < 4; ++i) s += qv[i] * f(kr[i]);
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffff, s, o);
    s *= scale;
    const float mn = fmaxf(m, s), c = expf(m - mn), p = expf(s - mn);
    l = l * c + p;
    for (int i = 0; i < 4; ++i) {
      const float x = f(vr[i]);
      acc[i] = acc[i] * c + p * x;
      am[i] = am[i] * c + p * fabsf(x);
    }
    m = mn;
  }
  for (int i = 0; i < 4; ++i) {
    out[((size_t)r * qh + h) * D + lane * 4 + i] = acc[i] / l;
    mag[((size_t)r * qh + h) * D + lane * 4 + i] = am[i] / l;
  }
}

struct Module {
  CUfunction f32_out, bf16_out;
};

static void encode(CUtensorMap* m, void* base, int seq, int heads) {
  cuuint64_t dims[3] = {D, (cuuint64_t)heads, (cuuint64_t)seq};
  cuuint64_t strides[2] = {D * 2, (cuuint64_t)heads * D * 2};
  cuuint32_t box[3] = {64, 1, 128};
  cuuint32_t estr[3] = {1, 1, 1};
  CU(cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, base, dims, strides, box, estr,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
}

// One prefill's device buffers: inputs, descriptors (in global memory, as Omega passes them), outputs.
struct Case {
  int seq, qh, kvh, causal;
  float scale;
  uint16_t *q, *k, *v;
  CUtensorMap* maps;  // device: q's, k's, v's
  void* out;          // f32 (or bf16) [seq, qh, 128]
  size_t nq() const { return (size_t)seq * qh * D; }
  size_t nkv() const { return (size_t)seq * kvh * D; }
  double flops() const {
    const double s = seq, pairs = causal ? s * (s + 1) / 2 : s * s;
    return 4.0 * D * pairs * qh;
  }
};

static Case make_case(int seq, int qh, int kvh, int causal, uint64_t seed) {
  Case c{seq, qh, kvh, causal, 1.0f / sqrtf((float)D)};
  std::vector<uint16_t> h(c.nq());
  auto upload = [&](uint16_t** dst, size_t n) {
    h.resize(n);
    for (auto& x : h) x = random_bf16(seed);
    CK(cudaMalloc(dst, n * 2));
    CK(cudaMemcpy(*dst, h.data(), n * 2, cudaMemcpyHostToDevice));
  };
  upload(&c.q, c.nq());
  upload(&c.k, c.nkv());
  upload(&c.v, c.nkv());
  CUtensorMap maps[3];
  encode(&maps[0], c.q, seq, qh);
  encode(&maps[1], c.k, seq, kvh);
  encode(&maps[2], c.v, seq, kvh);
  CK(cudaMalloc(&c.maps, sizeof(maps)));
  CK(cudaMemcpy(c.maps, maps, sizeof(maps), cudaMemcpyHostToDevice));
  CK(cudaMalloc(&c.out, c.nq() * 4));
  return c;
}

static void free_case(Case& c) {
  CK(cudaFree(c.q));
  CK(cudaFree(c.k));
  CK(cudaFree(c.v));
  CK(cudaFree(c.maps));
  CK(cudaFree(c.out));
}

static void launch(CUfunction f, Case& c) {
  CUtensorMap *mq = c.maps, *mk = c.maps + 1, *mv = c.maps + 2;
  uint32_t seq = c.seq, qh = c.qh, kvh = c.kvh, causal = c.causal;
  void* args[] = {&mq, &mk, &mv, &c.out, &seq, &qh, &kvh, &causal, &c.scale};
  CU(cuLaunchKernel(f, c.qh, (c.seq + 127) / 128, 1, PREFILL_THREADS, 1, 1, PREFILL_SMEM_BYTES, 0, args, nullptr));
}

// Runs entry `f` (bf16 output when `bf16`) and compares with the reference; prints a check line.
static bool check(CUfunction f, bool bf16, Case& c, const std::vector<float>& ref, const std::vector<float>& mag) {
  CK(cudaMemset(c.out, 0xFF, c.nq() * 4));
  launch(f, c);
  CK(cudaDeviceSynchronize());
  std::vector<float> got(c.nq());
  if (bf16) {
    std::vector<uint16_t> b(c.nq());
    CK(cudaMemcpy(b.data(), c.out, b.size() * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < b.size(); ++i) got[i] = from_bf16(b[i]);
  } else {
    CK(cudaMemcpy(got.data(), c.out, got.size() * 4, cudaMemcpyDeviceToHost));
  }
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = mag[i] / 128.0 + (bf16 ? fabs(ref[i]) / 256.0 : 0.0) + 1e-5;
    const double e = std::isfinite(got[i]) ? fabs((double)got[i] - ref[i]) / tol : INFINITY;
    if (!(e <= worst)) worst = e, at = i;
  }
  const bool pass = worst <= 1.0;
  printf("check %d %d/%d %s %smax_err_over_tol %.3f %s", c.seq, c.qh, c.kvh, c.causal ? "causal" : "full",
         bf16 ? "bf16 " : "", worst, pass ? "PASS" : "FAIL");
  if (!pass)
    printf(" (row %zu head %zu dim %zu: %g against %g)", at / D / c.qh, at / D % c.qh, at % D, got[at], ref[at]);
  printf("\n");
  return pass;
}

static bool check_case(const Module& m, int seq, int qh, int kvh, int causal, uint64_t seed) {
  Case c = make_case(seq, qh, kvh, causal, seed);
  float *ref, *mag;
  CK(cudaMalloc(&ref, c.nq() * 4));
  CK(cudaMalloc(&mag, c.nq() * 4));
  const int warps = seq * qh;
  reference_kernel<<<(warps + 7) / 8, 256>>>(c.q, c.k, c.v, ref, mag, seq, qh, kvh, causal, c.scale);
  CK(cudaGetLastError());
  std::vector<float> r(c.nq()), g(c.nq());
  CK(cudaMemcpy(r.data(), ref, r.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(g.data(), mag, g.size() * 4, cudaMemcpyDeviceToHost));
  bool ok = check(m.f32_out, false, c, r, g);
  ok = check(m.bf16_out, true, c, r, g) && ok;
  CK(cudaFree(ref));
  CK(cudaFree(mag));
  free_case(c);
  return ok;
}

static void bench(const Module& m, int seq, uint64_t seed) {
  Case c = make_case(seq, 32, 4, 1, seed);
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  const int reps = seq <= 1024 ? 200 : seq <= 4096 ? 50 : 10;
  for (int i = 0; i < 3; ++i) launch(m.f32_out, c);
  float best = 1e30f;
  for (int round = 0; round < 2; ++round) {
    CK(cudaEventRecord(a));
    for (int i = 0; i < reps; ++i) launch(m.bf16_out, c);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    best = fminf(best, ms / reps);
  }
  printf("prefill.%d.causal.omega_ms %.4f\n", seq, best);
  printf("prefill.%d.causal.omega_tflops %.1f\n", seq, c.flops() / (best * 1e-3) / 1e12);
  free_case(c);
}

int main(int argc, char** argv) {
  const char* cubin = "/tmp/prefill.cubin";
  bool check_only = false;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--cubin") && i + 1 < argc) cubin = argv[++i];
    else if (!strcmp(argv[i], "--check-only")) check_only = true;
    else {
      fprintf(stderr, "usage: %s [--cubin PATH] [--check-only]\n", argv[0]);
      return 2;
    }
  }
  CK(cudaFree(0));  // the primary context, which the driver-API module then shares
  CUmodule mod;
  CU(cuModuleLoad(&mod, cubin));
  Module m;
  CU(cuModuleGetFunction(&m.f32_out, mod, "omega_attn_prefill_bf16_f32"));
  CU(cuModuleGetFunction(&m.bf16_out, mod, "omega_attn_prefill_bf16"));
  for (CUfunction f : {m.f32_out, m.bf16_out}) {
    CU(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, PREFILL_SMEM_BYTES));
    int regs;
    CU(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
    printf("kernel %s regs %d smem %d\n", f == m.f32_out ? "f32_out" : "bf16_out", regs, PREFILL_SMEM_BYTES);
  }
  uint64_t seed = 0x5eed;
  struct Shape {
    int seq, qh, kvh, causal;
  } shapes[] = {{1, 32, 4, 1},    {7, 32, 4, 1},    {100, 32, 4, 0}, {128, 32, 4, 1},  {129, 3, 1, 1},
                {257, 2, 2, 0},   {1000, 32, 4, 1}, {1000, 32, 4, 0}, {1024, 32, 4, 1}, {4096, 32, 4, 1},
                {4095, 8, 1, 0},  {16384, 32, 4, 1}};
  int failed = 0, passed = 0;
  for (const Shape& s : shapes) (check_case(m, s.seq, s.qh, s.kvh, s.causal, seed++) ? passed : failed) += 1;
  printf("checks %d passed, %d failed\n", passed, failed);
  if (!check_only)
    for (int seq : {1024, 4096, 16384}) bench(m, seq, seed++);
  return failed ? 1 : 0;
}
