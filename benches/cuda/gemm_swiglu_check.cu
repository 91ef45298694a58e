// CUDA-side check and benchmark of the gate+up GEMM with SwiGLU in its epilogue (gemm_bf16_ts_body's
// SWIGLU form, kernels/cuda/matmul/gemm_bf16_ts.cuh) beside the two launches it replaces, on the GPU
// machine. hopper-kernels.md section 5 names fused epilogues (SwiGLU, residual) as what cuBLAS cannot do
// in one call; this is that technique's figure. CUDA and cuBLAS are the harness's; Omega never uses them.
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels/cuda/matmul -Ikernels/cuda \
//        -o /tmp/gemm_swiglu_check benches/cuda/gemm_swiglu_check.cu -lcublas -lcuda
//   /tmp/gemm_swiglu_check [--check]
//
// x [M, K] and the fused gate+up weight W [2I, K] (gate rows first, then up) are bf16 from a seeded
// generator; y = silu(x . Wg^T) * (x . Wu^T) is [M, I]. Variants:
//   fused32_n<BN>, fused16_n<BN>  one launch, f32 or bf16 y, BN accumulator columns a tile (BN / 2 of y)
//   omega32   the library's path today: the 192-column TMA-store GEMM writing the f32 product [M, 2I], then
//             omega_swiglu_f32_bf16 (elementwise/swiglu.cuh) into a bf16 y
//   omega16   the same GEMM's bf16-output form (`_y16`), then omega_swiglu_bf16
//   cublas16  cuBLAS writing the bf16 product (as F.linear does), then omega_swiglu_bf16: torch's two calls
//             with Omega's SwiGLU kernel in place of torch's silu and mul (two more launches there)
//   cublas_gemm  cuBLAS's bf16-output GEMM alone: the floor a fused launch is measured against
//   gemm16, gemm16_stm  the 192-column bf16-output GEMM alone, its y staged by st.shared or by stmatrix
//             (fused16_*_stm are the fused forms with stmatrix; both are checked through the fused forms)
// Checks: every fused variant's y poisoned (all-ones bits), then compared on the device element by element
// with omega32's path over cuBLAS's f32 product (cuBLAS GEMM + omega_swiglu_f32 / _f32_bf16), and at 4096
// sampled elements (all of them on small shapes) with an f64 CPU reference.
// Output lines:
//   check M I K VARIANT max_rel_vs_ref E max_rel_vs_two_launches D PASS|FAIL
//   swiglu.<M>x<I>x<K>.<variant>_us T / .<variant>_vs_omega32 R (omega32's time over the variant's)
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define OMEGA_GEMM_NO_Y16_ENTRIES
#include "gemm_bf16_ts.cuh"
#include "elementwise/swiglu.cuh"

#include "check_common.cuh"
#include "tma_encode.cuh"

template <int STAGES, int BN, bool Y16, bool STM = false>
__global__ void __launch_bounds__(GEMM_THREADS, 1)
    fused_kernel(const void* ta, const void* tb, const void* ty, float* y, uint32_t M, uint32_t N, uint32_t K) {
  gemm_bf16_ts_body<STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF, 1, BN, omega_gemm::GroupedOrder, Y16, true, STM>(ta, tb, ty, y,
                                                                                                         M, N, K);
}

// The module's 192-column TMA-store entry in either output type (its _y16 form is left out of this build).
// STM: its bf16 staging by stmatrix.
template <bool Y16, bool STM = false>
__global__ void __launch_bounds__(GEMM_THREADS, 1)
    n192_kernel(const void* ta, const void* tb, const void* ty, float* y, uint32_t M, uint32_t N, uint32_t K) {
  gemm_bf16_ts_body<GEMM_N192_STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF, 1, 192, omega_gemm::GroupedOrder, Y16, false, STM>(
      ta, tb, ty, y, M, N, K);
}

typedef void (*Entry)(const void*, const void*, const void*, float*, uint32_t, uint32_t, uint32_t);

struct Fused {
  const char* name;
  Entry entry;
  int smem, bn;
  bool y16;
};

static Fused fused[] = {
    {"fused32_n256", fused_kernel<GEMM_TS_STAGES, 256, false>, GEMM_TS_SMEM_BYTES, 256, false},
    {"fused32_n192", fused_kernel<GEMM_N192_STAGES, 192, false>, GEMM_N192_SMEM_BYTES, 192, false},
    {"fused32_n128", fused_kernel<GEMM_TS_N128_STAGES, 128, false>, GEMM_TS_N128_SMEM_BYTES, 128, false},
    {"fused16_n256", fused_kernel<GEMM_TS_STAGES, 256, true>, GEMM_TS_SMEM_BYTES, 256, true},
    {"fused16_n192", fused_kernel<GEMM_N192_STAGES, 192, true>, GEMM_N192_SMEM_BYTES, 192, true},
    {"fused16_n128", fused_kernel<GEMM_TS_N128_STAGES, 128, true>, GEMM_TS_N128_SMEM_BYTES, 128, true},
    // hopper-kernels.md section 5's stmatrix staging of the bf16 y.
    {"fused16_n192_stm", fused_kernel<GEMM_N192_STAGES, 192, true, true>, GEMM_N192_SMEM_BYTES, 192, true},
    {"fused16_n128_stm", fused_kernel<GEMM_TS_N128_STAGES, 128, true, true>, GEMM_TS_N128_SMEM_BYTES, 128, true},
};
#define FUSED ((int)(sizeof(fused) / sizeof(fused[0])))

__device__ __forceinline__ float load_y(const float* y, size_t i) { return y[i]; }
__device__ __forceinline__ float load_y(const uint16_t* y, size_t i) { return __uint_as_float((uint32_t)y[i] << 16); }

// max |a - b| / (|b| + floor) over n elements into *out (a non-negative float's bits; a NaN counts as +inf).
template <typename T>
__global__ void max_rel_diff(const T* a, const T* b, size_t n, float floor, unsigned int* out) {
  float m = 0.f;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const float bv = load_y(b, i);
    float d = fabsf(load_y(a, i) - bv) / (fabsf(bv) + floor);
    if (!(d <= 3.0e38f)) d = INFINITY;
    m = fmaxf(m, d);
  }
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0) atomicMax(out, __float_as_uint(m));
}

template <typename T>
__global__ void gather(const T* y, const size_t* idx, size_t n, float* out) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = load_y(y, idx[i]);
}

struct Run {
  int sms;
  cublasHandle_t h;
};

static double silu(double g) { return g / (1.0 + exp(-g)); }

static bool one(Run& run, uint32_t M, uint32_t I, uint32_t K, bool bench, uint64_t seed) {
  const uint32_t N2 = 2 * I;
  std::vector<uint16_t> hx((size_t)M * K), hw((size_t)N2 * K);
  uint64_t s = seed;
  for (auto& v : hx) v = random_bf16(s);
  for (auto& v : hw) v = random_bf16(s);
  const size_t MI = (size_t)M * I, MN2 = (size_t)M * N2;
  void *dx, *dw, *dy, *dgu, *dgu16;
  float *dsamp, *dref32;
  uint16_t* dref16;
  size_t* didx;
  unsigned int* ddiff;
  CUtensorMap* dmaps;
  CK(cudaMalloc(&dx, hx.size() * 2));
  CK(cudaMalloc(&dw, hw.size() * 2));
  CK(cudaMalloc(&dy, MI * 4));
  CK(cudaMalloc(&dref32, MI * 4));
  CK(cudaMalloc(&dgu, MN2 * 4));
  CK(cudaMalloc(&dgu16, MN2 * 2));
  CK(cudaMalloc(&ddiff, 4));
  CK(cudaMalloc(&dref16, MI * 2));
  CK(cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dw, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
  // 0: x; 1-3: W with boxes of 128, 96 and 64 rows (a fused tile's gate or up half); 4: W with 192 rows
  // (the unfused GEMM); 5, 6: y f32 / bf16 [M, I]; 7, 8: the product f32 / bf16 [M, 2I].
  CUtensorMap maps[9];
  memset(maps, 0, sizeof(maps));
  encode(&maps[0], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dx, K, M, GEMM_BK, GEMM_BM);
  const uint32_t halves[3] = {128, 96, 64};
  for (int i = 0; i < 3; ++i) encode(&maps[1 + i], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dw, K, N2, GEMM_BK, halves[i]);
  encode(&maps[4], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dw, K, N2, GEMM_BK, 192);
  encode(&maps[5], CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, dy, I, M, GEMM_Y_BOX_COLS, GEMM_Y_BOX_ROWS);
  encode(&maps[6], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dy, I, M, GEMM_Y16_BOX_COLS, GEMM_Y_BOX_ROWS);
  encode(&maps[7], CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, dgu, N2, M, GEMM_Y_BOX_COLS, GEMM_Y_BOX_ROWS);
  encode(&maps[8], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dgu16, N2, M, GEMM_Y16_BOX_COLS, GEMM_Y_BOX_ROWS);
  CK(cudaMalloc(&dmaps, sizeof(maps)));
  CK(cudaMemcpy(dmaps, maps, sizeof(maps), cudaMemcpyHostToDevice));

  const int tiles_m = (M + GEMM_BM - 1) / GEMM_BM;
  auto grid_of = [&](int cols, int bn) {
    const int tiles = tiles_m * ((cols + bn - 1) / bn);
    return tiles < run.sms ? tiles : run.sms;
  };
  auto launch_fused = [&](const Fused& f) {
    const int half = f.bn / 2;
    const CUtensorMap* tb = &dmaps[half == 128 ? 1 : half == 96 ? 2 : 3];
    f.entry<<<grid_of(I, half), GEMM_THREADS, f.smem>>>(&dmaps[0], tb, &dmaps[f.y16 ? 6 : 5], (float*)dy, M, I, K);
  };
  // SwiGLU over the fused product [M, 2I] (gate columns first), in the elementwise library's launch shape
  // (plan_swiglu): chunks of 256 threads x V inputs (V = 4 f32, 8 bf16) across, rows down, one wave of
  // 8 CTAs an SM in all.
  auto swiglu_grid = [&](uint32_t v) {
    const uint32_t wave = 8 * run.sms, chunks = (I + 256 * v - 1) / (256 * v);
    const uint32_t x = chunks < wave ? chunks : wave, rows = wave / x > 1 ? wave / x : 1;
    return dim3(x, std::min({M, 65535u, rows}));
  };
  const float one_f = 1.0f, zero_f = 0.0f;
  auto cublas = [&](void* out, cudaDataType t) {
    cublasStatus_t st = cublasGemmEx(run.h, CUBLAS_OP_T, CUBLAS_OP_N, N2, M, K, &one_f, dw, CUDA_R_16BF, K, dx,
                                     CUDA_R_16BF, K, &zero_f, out, t, N2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
      fprintf(stderr, "cublasGemmEx: %d\n", (int)st);
      exit(2);
    }
  };
  auto omega32 = [&] {
    n192_kernel<false><<<grid_of(N2, 192), GEMM_THREADS, GEMM_N192_SMEM_BYTES>>>(&dmaps[0], &dmaps[4], &dmaps[7],
                                                                                 (float*)dgu, M, N2, K);
    omega_swiglu_f32_bf16<<<swiglu_grid(4), 256>>>((float*)dgu, (float*)dgu + I, (uint16_t*)dy, M, I, N2);
  };
  auto omega16 = [&] {
    n192_kernel<true><<<grid_of(N2, 192), GEMM_THREADS, GEMM_N192_SMEM_BYTES>>>(&dmaps[0], &dmaps[4], &dmaps[8],
                                                                                (float*)dgu16, M, N2, K);
    omega_swiglu_bf16<<<swiglu_grid(8), 256>>>((uint16_t*)dgu16, (uint16_t*)dgu16 + I, (uint16_t*)dy, M, I, N2);
  };
  auto cublas16 = [&] {
    cublas(dgu16, CUDA_R_16BF);
    omega_swiglu_bf16<<<swiglu_grid(8), 256>>>((uint16_t*)dgu16, (uint16_t*)dgu16 + I, (uint16_t*)dy, M, I, N2);
  };

  // The two-launch references over cuBLAS's f32 product: f32 and bf16 y.
  cublas(dgu, CUDA_R_32F);
  omega_swiglu_f32<<<swiglu_grid(4), 256>>>((float*)dgu, (float*)dgu + I, dref32, M, I, N2);
  omega_swiglu_f32_bf16<<<swiglu_grid(4), 256>>>((float*)dgu, (float*)dgu + I, dref16, M, I, N2);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());

  // The f64 reference at the samples: the gate and up dot products, silu, their product, and a bound on
  // the error the f32 sums can carry (each product's magnitude summed).
  const size_t samples = MI <= 65536 ? MI : 4096;
  std::vector<size_t> idx(samples);
  std::vector<double> ref(samples), bound(samples);
  uint64_t r = seed ^ 0xabcdef;
  for (size_t i = 0; i < samples; ++i) {
    idx[i] = samples == MI ? i : splitmix(r) % MI;
    const size_t m = idx[i] / I, n = idx[i] % I;
    double g = 0, u = 0, mg = 0, mu = 0;
    for (uint32_t k = 0; k < K; ++k) {
      const double xv = from_bf16(hx[m * K + k]);
      const double pg = xv * from_bf16(hw[n * K + k]), pu = xv * from_bf16(hw[(I + n) * K + k]);
      g += pg, u += pu, mg += fabs(pg), mu += fabs(pu);
    }
    ref[i] = silu(g) * u;
    // |d silu / dg| <= 1.1: an error e_g in g and e_u in u move y by at most 1.1 e_g |u| + |silu(g)| e_u.
    bound[i] = 1.1 * mg * fabs(u) + fabs(silu(g)) * mu + 1e-30;
  }
  CK(cudaMalloc(&didx, samples * sizeof(size_t)));
  CK(cudaMalloc(&dsamp, samples * 4));
  CK(cudaMemcpy(didx, idx.data(), samples * sizeof(size_t), cudaMemcpyHostToDevice));

  bool all_ok = true;
  std::vector<float> got(samples);
  for (int fi = 0; fi < FUSED; ++fi) {
    const Fused& f = fused[fi];
    CK(cudaMemset(dy, 0xFF, MI * 4));
    launch_fused(f);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemset(ddiff, 0, 4));
    // Relative to the two-launch y, with a floor of y's typical magnitude: gate and up are sums of K
    // products of variance 1/9, so |y| is of order K / 9 (an output near 0 keeps its neighbours' scale).
    const float floor = K / 9.0f;
    if (f.y16) {
      max_rel_diff<<<4 * run.sms, 256>>>((const uint16_t*)dy, dref16, MI, floor, ddiff);
      gather<<<(unsigned)((samples + 255) / 256), 256>>>((const uint16_t*)dy, didx, samples, dsamp);
    } else {
      max_rel_diff<<<4 * run.sms, 256>>>((const float*)dy, dref32, MI, floor, ddiff);
      gather<<<(unsigned)((samples + 255) / 256), 256>>>((const float*)dy, didx, samples, dsamp);
    }
    CK(cudaGetLastError());
    unsigned int diff_bits;
    CK(cudaMemcpy(&diff_bits, ddiff, 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(got.data(), dsamp, samples * 4, cudaMemcpyDeviceToHost));
    float vs_two;
    memcpy(&vs_two, &diff_bits, 4);
    // Against f64: the f32 sums' error (scaled with K, as gemm_check's), silu's fast division and
    // exponential (__expf's error grows with |g|: up to 128 ulp of y here), and for a bf16 y its rounding
    // (half an ulp of 8 significant bits: 2^-8 of |y|).
    double max_rel = 0;
    const double sum_tol = 1e-6 * sqrt((double)K) + 1e-6;
    const double y_ulps = f.y16 ? 1.0 / 256 + 128.0 / (1 << 24) : 128.0 / (1 << 24);
    bool ok = true;
    for (size_t i = 0; i < samples; ++i) {
      double err = fabs((double)got[i] - ref[i]);
      if (!(err <= 1e30)) err = INFINITY;
      const double allowed = sum_tol * bound[i] + y_ulps * fabs(ref[i]) * 1.01 + 1e-30;
      if (ok && !(err <= allowed))
        printf("  %s: y[%zu] = %.9g, f64 %.9g, allowed error %.3g\n", f.name, idx[i], got[i], ref[i], allowed);
      ok = ok && err <= allowed;
      max_rel = fmax(max_rel, err / (bound[i] + fabs(ref[i])));
    }
    // The two-launch path sums in another order (cuBLAS), and a bf16 y may round to the next value.
    ok = ok && vs_two <= (f.y16 ? 2.0f / 128 : 1e-4f);
    printf("check %u %u %u %s max_rel_vs_ref %.3g max_rel_vs_two_launches %.3g %s\n", M, I, K, f.name, max_rel,
           (double)vs_two, ok ? "PASS" : "FAIL");
    fflush(stdout);
    all_ok = all_ok && ok;
  }

  if (bench) {
    const double flops = 2.0 * M * N2 * K;
    const int reps = (int)fmax(5.0, fmin(200.0, 2e13 / flops));
    auto time = [&](auto&& body) { return launches_us(reps, body); };
    // Best of two rounds of every path, in turn (the clock drifts with heat).
    const char* names[6] = {"omega32", "omega16", "cublas16", "cublas_gemm", "gemm16", "gemm16_stm"};
    double base[6] = {1e30, 1e30, 1e30, 1e30, 1e30, 1e30};
    const dim3 grid192(grid_of(N2, 192));
    std::vector<double> best(FUSED, 1e30);
    for (int round = 0; round < 2; ++round) {
      base[0] = fmin(base[0], time(omega32));
      base[1] = fmin(base[1], time(omega16));
      base[2] = fmin(base[2], time(cublas16));
      base[3] = fmin(base[3], time([&] { cublas(dgu16, CUDA_R_16BF); }));
      base[4] = fmin(base[4], time([&] {
        n192_kernel<true><<<grid192, GEMM_THREADS, GEMM_N192_SMEM_BYTES>>>(&dmaps[0], &dmaps[4], &dmaps[8],
                                                                           (float*)dgu16, M, N2, K);
      }));
      base[5] = fmin(base[5], time([&] {
        n192_kernel<true, true><<<grid192, GEMM_THREADS, GEMM_N192_SMEM_BYTES>>>(&dmaps[0], &dmaps[4], &dmaps[8],
                                                                                 (float*)dgu16, M, N2, K);
      }));
      for (int fi = 0; fi < FUSED; ++fi) best[fi] = fmin(best[fi], time([&] { launch_fused(fused[fi]); }));
    }
    CK(cudaGetLastError());
    for (int i = 0; i < 6; ++i)
      printf("swiglu.%ux%ux%u.%s_us %.2f\nswiglu.%ux%ux%u.%s_vs_omega32 %.3f\n", M, I, K, names[i], base[i], M, I, K,
             names[i], base[0] / base[i]);
    for (int fi = 0; fi < FUSED; ++fi)
      printf("swiglu.%ux%ux%u.%s_us %.2f\nswiglu.%ux%ux%u.%s_vs_omega32 %.3f\n", M, I, K, fused[fi].name, best[fi], M,
             I, K, fused[fi].name, base[0] / best[fi]);
    fflush(stdout);
  }
  for (void* p : {dx, dw, dy, (void*)dref32, dgu, dgu16, (void*)dref16, (void*)didx, (void*)dsamp, (void*)ddiff, (void*)dmaps})
    CK(cudaFree(p));
  return all_ok;
}

int main(int argc, char** argv) {
  Run run;
  bool check_only = false;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--check") == 0) {
      check_only = true;
    } else {
      fprintf(stderr, "usage: %s [--check]\n", argv[0]);
      return 2;
    }
  }
  CK(cudaDeviceGetAttribute(&run.sms, cudaDevAttrMultiProcessorCount, 0));
  for (auto& f : fused) CK(cudaFuncSetAttribute(f.entry, cudaFuncAttributeMaxDynamicSharedMemorySize, f.smem));
  CK(cudaFuncSetAttribute(n192_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, GEMM_N192_SMEM_BYTES));
  CK(cudaFuncSetAttribute(n192_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, GEMM_N192_SMEM_BYTES));
  CK(cudaFuncSetAttribute(n192_kernel<true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          GEMM_N192_SMEM_BYTES));
  cublasCreate(&run.h);
  int passed = 0, failed = 0;
  // I % 8 == 0 (a bf16 y's descriptor); ragged M, I past a tile's width and K past a K block.
  const uint32_t checks[][3] = {{1, 8, 8}, {7, 40, 1000}, {129, 200, 72}, {300, 776, 520}, {1000, 1032, 1000}};
  for (auto& c : checks) (one(run, c[0], c[1], c[2], false, 1 + c[0] * 31 + c[1]) ? passed : failed)++;
  if (!check_only) {
    // Qwen3-30B-A3B's expert gate+up (I = 768, K = 2048), and a dense FFN's width (I = 6144).
    const uint32_t benches[][3] = {{4096, 768, 2048}, {512, 768, 2048}, {4096, 6144, 2048}, {8192, 768, 2048}};
    for (auto& b : benches) (one(run, b[0], b[1], b[2], true, 7 + b[0] + b[1]) ? passed : failed)++;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
