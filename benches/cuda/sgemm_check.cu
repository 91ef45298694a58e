// CUDA-side check and benchmark of Omega's f32 GEMMs (kernels/cuda/matmul/gemm_sgemm.cuh, gemm_simt.cuh)
// beside cublasSgemm, on the GPU machine (issue 12: f32 8192^3 without TF32 at >= 1.0x cuBLAS). This
// program uses CUDA and cuBLAS; Omega never does.
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels/cuda/matmul \
//        -o /tmp/sgemm_check benches/cuda/sgemm_check.cu -lcublas
//   /tmp/sgemm_check            # the check shapes, then the benchmark shapes
//   /tmp/sgemm_check --check    # the check shapes only
//   /tmp/sgemm_check --one M N K   # one shape's checks, each variant launched once (for ncu)
//
// For each shape: x [M,K] and W [N,K] f32 uniform in [-1, 1) from a seeded generator (fresh per shape), y
// poisoned with a NaN before every run; every variant (Omega's exported entries, omega_gemm_f32_tn, and
// configurations only this program instantiates) and cublasSgemm under CUBLAS_DEFAULT_MATH and
// CUBLAS_PEDANTIC_MATH run. Checks:
//   - every Omega variant is bit for bit omega_gemm_f32_tn's output (they all compute one fmaf chain per
//     output, k ascending), and no element is left poisoned;
//   - on 4096 sampled elements (all on small shapes) against an f64 reference: each error within the
//     recursive-summation bound K * 2^-24 * sum|x*w|, and the norm-wise error ||y - ref|| / ||ref|| within
//     16 * 2^-24 * sqrt(K) (f32 lands near 2^-24 * sqrt(K); TF32's 10-bit operands near 3e-4, so this
//     also tells whether a cuBLAS mode used TF32).
// Output lines:
//   check <variant> MxNxK norm_rel R max_bound_frac F bitexact yes|no|- PASS|FAIL
//   sgemm.<MxNxK>.<variant>_tflops T   (best of two interleaved rounds)
//   sgemm.<MxNxK>.cublas_tflops T / .cublas_pedantic_tflops T / .<variant>_ratio R (over the faster cuBLAS)
//   N passed, M failed
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gemm_sgemm.cuh"
#include "gemm_simt.cuh"

#include "check_common.cuh"

using Fn = void (*)(const float*, const float*, float*, uint32_t, uint32_t, uint32_t);

template <class C>
__global__ void __launch_bounds__(C::THREADS, C::MIN_CTAS)
    probe(const float* x, const float* w, float* y, uint32_t M, uint32_t N, uint32_t K) {
  sgemm_tn<C>(x, w, y, M, N, K);
}

struct Variant {
  const char* name;
  Fn fn;
  uint32_t bm, bn, threads, dyn_smem;
  uint32_t persistent_per_sm;  // 0: the 2-D tile grid; else a grid of min(tiles, this * SMs) CTAs
};

template <class C>
__global__ void __maxnreg__(248)
    kprobe(const float* x, const float* w, float* y, uint32_t M, uint32_t N, uint32_t K) {
  sgemm_tn_kmajor<C>(x, w, y, M, N, K);
}

template <class C>
static Variant of(const char* name, Fn fn) {
  const uint32_t dyn = C::DYNAMIC_SMEM ? C::SMEM_BYTES : 0;
  if (dyn) CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn));
  return {name, fn, C::BM, C::BN, C::THREADS, dyn};
}

// Configurations only this program instantiates, to place the exported ones: the existing kernel's shape
// (8 x 8 a thread, 256 threads, K slices of 16; it spills a little at 128 registers) in two FMA orders, the
// 8 x 16 form columns-first (the most register-bank conflicts) and with cuBLAS's 8 x 4 warp.
using Probe8x8K16 = omega_sgemm::Cfg<128, 128, 16, 8, 8, 4, 2, false, 2>;
using Probe8x8K16Zigzag = omega_sgemm::Cfg<128, 128, 16, 8, 8, 4, 2, false, 2, false, false, 2>;
using Probe8x16K8Cols = omega_sgemm::Cfg<128, 128, 8, 8, 16, 4, 2, false, 2, true, false, 1>;
using Probe8x16K8Wr8Zigzag = omega_sgemm::Cfg<128, 128, 8, 8, 16, 8, 2, false, 2, true, false, 2>;
// The cp.async K-major form's neighbours, each one change from omega_gemm_f32_tn_v2_8x16k8_cp3 (248
// registers here, as the entries' cap, so ptxas's choices are the entries'): the hybrid (W register-staged
// and transposed, rows first: its W registers' bank is the column's, not the k step's), cuBLAS's 8 x 4
// warp (2 x 2 warps of 64 x 64), the 16 columns in two halves of 8 (fewer live fragment registers).
using ProbeCpHybrid = omega_sgemm::KCfg<128, 128, 8, 8, 16, 4, 3, false, 0>;
using ProbeCpWr8 = omega_sgemm::KCfg<128, 128, 8, 8, 16, 8, 3, true, 2>;
using ProbeCpSplit = omega_sgemm::KCfg<128, 128, 8, 8, 16, 4, 3, true, 2, 2>;

static std::vector<Variant> variants() {
  return {
      {"simt_f32", omega_gemm_f32_tn, SIMT_BM, SIMT_BN, SIMT_THREADS, 0},
      of<SgemmT8x16K8>("v2_8x16k8", omega_gemm_f32_tn_v2_8x16k8),
      of<SgemmT8x16K8Zigzag>("v2_8x16k8_zigzag", omega_gemm_f32_tn_v2_8x16k8_zigzag),
      // The library's f32 kernel: the zigzag form, persistent, as the planner launches it (2 CTAs an SM).
      {"v2_8x16k8_zigzag_p", omega_gemm_f32_tn_v2_8x16k8_zigzag_p, 128, 128, 128, 0, 2},
      of<Probe8x8K16>("probe_8x8k16", probe<Probe8x8K16>),
      of<Probe8x8K16Zigzag>("probe_8x8k16_zigzag", probe<Probe8x8K16Zigzag>),
      of<Probe8x16K8Cols>("probe_8x16k8_cols", probe<Probe8x16K8Cols>),
      of<Probe8x16K8Wr8Zigzag>("probe_8x16k8_wr8_zigzag", probe<Probe8x16K8Wr8Zigzag>),
      of<SgemmK8x16K8S3>("v2_8x16k8_cp3", omega_gemm_f32_tn_v2_8x16k8_cp3),
      of<SgemmK8x16K8S4>("v2_8x16k8_cp4", omega_gemm_f32_tn_v2_8x16k8_cp4),
      of<SgemmK8x16K16S3>("v2_8x16k16_cp3", omega_gemm_f32_tn_v2_8x16k16_cp3),
      of<ProbeCpHybrid>("probe_cp3_hybrid", kprobe<ProbeCpHybrid>),
      of<ProbeCpWr8>("probe_cp3_wr8", kprobe<ProbeCpWr8>),
      of<ProbeCpSplit>("probe_cp3_split", kprobe<ProbeCpSplit>),
  };
}

static float random_f32(uint64_t& s) { return (float)((splitmix(s) >> 40) / (double)(1 << 24)) * 2.0f - 1.0f; }

struct Ctx {
  cublasHandle_t h;
  std::vector<Variant> vs;
  int passed = 0, failed = 0;
};

struct Shape {
  uint32_t M, N, K;
  uint32_t offset;  // floats the operands start past their allocation (1: not 16-byte aligned)
  bool bench;
};

static void run_one(Ctx& c, const Shape& sh, uint64_t seed) {
  const uint32_t M = sh.M, N = sh.N, K = sh.K;
  char shape[64];
  snprintf(shape, sizeof shape, "%ux%ux%u%s", M, N, K, sh.offset ? "u" : "");
  std::vector<float> hx((size_t)M * K), hw((size_t)N * K);
  uint64_t s = seed;
  for (auto& v : hx) v = random_f32(s);
  for (auto& v : hw) v = random_f32(s);
  float *bx, *bw, *dy;
  CK(cudaMalloc(&bx, (hx.size() + 4) * 4));
  CK(cudaMalloc(&bw, (hw.size() + 4) * 4));
  CK(cudaMalloc(&dy, (size_t)M * N * 4));
  float *dx = bx + sh.offset, *dw = bw + sh.offset;
  CK(cudaMemcpy(dx, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dw, hw.data(), hw.size() * 4, cudaMemcpyHostToDevice));

  // The f64 reference on samples.
  const size_t total = (size_t)M * N;
  const size_t samples = total <= 65536 ? total : 4096;
  std::vector<size_t> idx(samples);
  std::vector<double> ref(samples), mag(samples);
  uint64_t r = seed ^ 0xabcdef;
  for (size_t i = 0; i < samples; ++i) {
    idx[i] = samples == total ? i : splitmix(r) % total;
    const size_t m = idx[i] / N, n = idx[i] % N;
    double acc = 0, a = 0;
    for (uint32_t k = 0; k < K; ++k) {
      const double p = (double)hx[m * K + k] * (double)hw[n * K + k];
      acc += p;
      a += fabs(p);
    }
    ref[i] = acc;
    mag[i] = a;
  }
  const double u = ldexp(1.0, -24);
  const double norm_tol = 16 * u * sqrt((double)K);

  std::vector<float> hy(total), base(total);
  const float one_f = 1.0f, zero_f = 0.0f;
  auto cublas = [&](cublasMath_t mode) {
    return [&, mode] {
      if (cublasSetMathMode(c.h, mode) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasSetMathMode failed\n");
        exit(2);
      }
      cublasStatus_t st = cublasSgemm(c.h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one_f, dw, K, dx, K, &zero_f, dy, N);
      if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasSgemm: %d\n", (int)st);
        exit(2);
      }
    };
  };
  auto omega = [&](const Variant& v) {
    return [&, v] {
      dim3 grid((N + v.bn - 1) / v.bn, (M + v.bm - 1) / v.bm);
      if (v.persistent_per_sm) {
        int sms;
        CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
        grid = dim3(std::min<uint64_t>((uint64_t)grid.x * grid.y, (uint64_t)v.persistent_per_sm * sms));
      }
      v.fn<<<grid, v.threads, v.dyn_smem>>>(dx, dw, dy, M, N, K);
    };
  };
  // Runs `f` on a poisoned y and checks what it wrote; `exact` compares with `base` bit for bit.
  auto check = [&](const char* name, auto&& f, bool exact, bool keep) {
    CK(cudaMemset(dy, 0xFF, total * 4));
    f();
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(hy.data(), dy, total * 4, cudaMemcpyDeviceToHost));
    bool ok = true;
    for (size_t i = 0; i < total; ++i)
      if (std::isnan(hy[i])) {
        ok = false;
        break;
      }
    bool bitexact = true;
    if (exact) bitexact = memcmp(hy.data(), base.data(), total * 4) == 0;
    double e2 = 0, r2 = 0, worst = 0;
    for (size_t i = 0; i < samples; ++i) {
      const double err = fabs((double)hy[idx[i]] - ref[i]);
      e2 += err * err;
      r2 += ref[i] * ref[i];
      const double frac = err / (K * u * mag[i] + 1e-300);
      worst = std::isnan(err) ? INFINITY : std::max(worst, frac);
    }
    const double norm_rel = sqrt(e2 / (r2 + 1e-300));
    ok = ok && worst <= 1.0 && norm_rel <= norm_tol && bitexact;
    printf("check %s %s norm_rel %.3g max_bound_frac %.3g bitexact %s %s\n", name, shape, norm_rel, worst,
           exact ? (bitexact ? "yes" : "no") : "-", ok ? "PASS" : "FAIL");
    (ok ? c.passed : c.failed)++;
    if (keep) base = hy;
  };
  check("simt_f32", omega(c.vs[0]), false, true);
  for (size_t i = 1; i < c.vs.size(); ++i) check(c.vs[i].name, omega(c.vs[i]), true, false);
  check("cublas", cublas(CUBLAS_DEFAULT_MATH), false, false);
  check("cublas_pedantic", cublas(CUBLAS_PEDANTIC_MATH), false, false);

  if (sh.bench) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const double flops = 2.0 * M * N * K;
    const int reps = (int)std::max(3.0, std::min(200.0, 3e13 / flops));
    auto time = [&](auto&& f) {
      for (int i = 0; i < 2; ++i) f();
      CK(cudaEventRecord(e0));
      for (int i = 0; i < reps; ++i) f();
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaGetLastError());
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      return flops * reps / (ms * 1e-3) / 1e12;
    };
    const size_t nv = c.vs.size();
    std::vector<double> t(nv + 2, 0.0);
    // Two rounds, each over every variant: the clock drifts with heat, so the best of each is kept.
    for (int round = 0; round < 2; ++round) {
      for (size_t i = 0; i < nv; ++i) t[i] = std::max(t[i], time(omega(c.vs[i])));
      t[nv] = std::max(t[nv], time(cublas(CUBLAS_DEFAULT_MATH)));
      t[nv + 1] = std::max(t[nv + 1], time(cublas(CUBLAS_PEDANTIC_MATH)));
    }
    const double best_cublas = std::max(t[nv], t[nv + 1]);
    for (size_t i = 0; i < nv; ++i) printf("sgemm.%s.%s_tflops %.2f\n", shape, c.vs[i].name, t[i]);
    printf("sgemm.%s.cublas_tflops %.2f\nsgemm.%s.cublas_pedantic_tflops %.2f\n", shape, t[nv], shape, t[nv + 1]);
    for (size_t i = 0; i < nv; ++i) printf("sgemm.%s.%s_ratio %.3f\n", shape, c.vs[i].name, t[i] / best_cublas);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
  }
  CK(cudaFree(bx));
  CK(cudaFree(bw));
  CK(cudaFree(dy));
}

int main(int argc, char** argv) {
  Ctx c;
  c.vs = variants();
  if (cublasCreate(&c.h) != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "cublasCreate failed\n");
    return 2;
  }
  const bool check_only = argc > 1 && strcmp(argv[1], "--check") == 0;
  // `--one M N K`: that shape's checks alone, each variant launched once (for a profiler).
  if (argc == 5 && strcmp(argv[1], "--one") == 0) {
    const Shape sh{(uint32_t)atoi(argv[2]), (uint32_t)atoi(argv[3]), (uint32_t)atoi(argv[4]), 0, false};
    run_one(c, sh, 1 + sh.M * 31 + sh.N * 7 + sh.K);
    printf("%d passed, %d failed\n", c.passed, c.failed);
    return c.failed != 0;
  }
  const Shape shapes[] = {
      {1, 1, 1, 0, false},          {7, 33, 1000, 0, false},      {129, 257, 71, 0, false},
      {1000, 4095, 1000, 0, false}, {129, 257, 1000, 1, false},   {33, 130, 4095, 0, false},
      {8192, 8192, 8192, 0, true},  {4096, 4096, 4096, 0, true},  {4096, 2048, 768, 0, true},
  };
  for (const Shape& sh : shapes) {
    if (check_only && sh.bench) continue;
    run_one(c, sh, 1 + sh.M * 31 + sh.N * 7 + sh.K);
  }
  printf("%d passed, %d failed\n", c.passed, c.failed);
  return c.failed != 0;
}
