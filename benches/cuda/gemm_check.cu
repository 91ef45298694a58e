// CUDA-side check and benchmark of Omega's large-M bf16 GEMM kernel (kernels/cuda/matmul/gemm_bf16.cuh)
// beside cuBLAS, on the GPU machine. This program uses CUDA and cuBLAS; Omega never does: it is how the
// kernel's correctness and speed are established before (and beside) Omega launching it.
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels/cuda/matmul \
//        -o /tmp/gemm_check benches/cuda/gemm_check.cu -lcublas -lcuda
//   /tmp/gemm_check            # correctness shapes, then the benchmark shapes
//
// For each shape: x [M,K] and W [N,K] bf16 from a seeded generator, y poisoned (all-ones bits, a NaN),
// Omega's kernel and cublasGemmEx (bf16 in, f32 out, f32 compute) run; every element of y is compared
// with cuBLAS's and 4096 sampled elements (all of them on small shapes) with an f64 CPU reference; then
// each is timed (cudaEvent over repeated launches after warm-up). Output lines:
//   check M N K max_rel_vs_ref max_abs_vs_cublas PASS|FAIL
//   gemm.<M>x<N>x<K>.omega_tflops T / .cublas_tflops T / .ratio R
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gemm_bf16.cuh"

#include "check_common.cuh"

static void encode(CUtensorMap* m, void* base, uint64_t inner, uint64_t outer, uint32_t box_inner, uint32_t box_outer) {
  cuuint64_t dims[2] = {inner, outer};
  cuuint64_t strides[1] = {inner * 2};
  cuuint32_t box[2] = {box_inner, box_outer};
  cuuint32_t estr[2] = {1, 1};
  CUresult r = cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, dims, strides, box, estr,
                                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", (int)r);
    exit(2);
  }
}

struct Run {
  int sms;
  cublasHandle_t h;
};

static bool one(Run& run, uint32_t M, uint32_t N, uint32_t K, bool bench, uint64_t seed) {
  std::vector<uint16_t> hx((size_t)M * K), hw((size_t)N * K);
  uint64_t s = seed;
  for (auto& v : hx) v = random_bf16(s);
  for (auto& v : hw) v = random_bf16(s);
  void *dx, *dw;
  float *dy, *dref;
  CUtensorMap* dmaps;
  CK(cudaMalloc(&dx, hx.size() * 2));
  CK(cudaMalloc(&dw, hw.size() * 2));
  CK(cudaMalloc(&dy, (size_t)M * N * 4));
  CK(cudaMalloc(&dref, (size_t)M * N * 4));
  CK(cudaMalloc(&dmaps, 2 * sizeof(CUtensorMap)));
  CK(cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dw, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemset(dy, 0xFF, (size_t)M * N * 4));
  CUtensorMap maps[2];
  encode(&maps[0], dx, K, M, GEMM_BK, GEMM_BM);
  encode(&maps[1], dw, K, N, GEMM_BK, GEMM_BN);
  CK(cudaMemcpy(dmaps, maps, sizeof(maps), cudaMemcpyHostToDevice));

  const int tiles = ((M + GEMM_BM - 1) / GEMM_BM) * ((N + GEMM_BN - 1) / GEMM_BN);
  const int grid = tiles < run.sms ? tiles : run.sms;
  auto launch = [&] {
    omega_gemm_bf16_tn<<<grid, GEMM_THREADS, GEMM_SMEM_BYTES>>>(&dmaps[0], &dmaps[1], dy, M, N, K);
  };
  const float one_f = 1.0f, zero_f = 0.0f;
  auto cublas = [&] {
    cublasStatus_t st = cublasGemmEx(run.h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one_f, dw, CUDA_R_16BF, K, dx,
                                     CUDA_R_16BF, K, &zero_f, dref, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
      fprintf(stderr, "cublasGemmEx: %d\n", (int)st);
      exit(2);
    }
  };
  launch();
  CK(cudaGetLastError());
  cublas();
  CK(cudaDeviceSynchronize());

  std::vector<float> hy((size_t)M * N), href((size_t)M * N);
  CK(cudaMemcpy(hy.data(), dy, hy.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(href.data(), dref, href.size() * 4, cudaMemcpyDeviceToHost));
  double max_abs_cublas = 0;
  bool ok = true;
  for (size_t i = 0; i < hy.size(); ++i) {
    double d = fabs((double)hy[i] - (double)href[i]);
    if (!(d <= 1e30)) d = INFINITY;  // NaN: poison left behind
    if (d > max_abs_cublas) max_abs_cublas = d;
  }
  // f64 reference on samples; tolerance scales with K (f32 accumulation of K products of magnitude <= 1).
  size_t samples = (size_t)M * N <= 65536 ? (size_t)M * N : 4096;
  double max_rel = 0;
  uint64_t r = seed ^ 0xabcdef;
  for (size_t i = 0; i < samples; ++i) {
    size_t idx = samples == (size_t)M * N ? i : splitmix(r) % ((size_t)M * N);
    size_t m = idx / N, n = idx % N;
    double acc = 0, mag = 0;
    for (uint32_t k = 0; k < K; ++k) {
      double p = (double)from_bf16(hx[m * K + k]) * (double)from_bf16(hw[n * K + k]);
      acc += p;
      mag += fabs(p);
    }
    double err = fabs((double)hy[idx] - acc);
    if (!(err <= 1e30)) err = INFINITY;
    double rel = err / (mag + 1e-30);
    if (rel > max_rel) max_rel = rel;
  }
  const double tol = 1e-6 * sqrt((double)K) + 1e-6;
  ok = max_rel <= tol && max_abs_cublas <= 1e-2 * sqrt((double)K);
  printf("check %u %u %u max_rel_vs_ref %.3g max_abs_vs_cublas %.3g %s\n", M, N, K, max_rel, max_abs_cublas,
         ok ? "PASS" : "FAIL");

  if (bench) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const double flops = 2.0 * M * N * K;
    int reps = (int)fmax(5.0, fmin(200.0, 2e13 / flops));
    auto time = [&](auto&& f) {
      for (int i = 0; i < 3; ++i) f();
      CK(cudaEventRecord(e0));
      for (int i = 0; i < reps; ++i) f();
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      return flops * reps / (ms * 1e-3) / 1e12;
    };
    double to = time(launch), tc = time(cublas);
    double to2 = time(launch), tc2 = time(cublas);  // interleaved twice: the clock drifts with heat
    to = fmax(to, to2);
    tc = fmax(tc, tc2);
    printf("gemm.%ux%ux%u.omega_tflops %.1f\ngemm.%ux%ux%u.cublas_tflops %.1f\ngemm.%ux%ux%u.ratio %.3f\n", M, N, K,
           to, M, N, K, tc, M, N, K, to / tc);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
  }
  CK(cudaFree(dx));
  CK(cudaFree(dw));
  CK(cudaFree(dy));
  CK(cudaFree(dref));
  CK(cudaFree(dmaps));
  return ok;
}

int main(int argc, char** argv) {
  Run run;
  CK(cudaDeviceGetAttribute(&run.sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaFuncSetAttribute(omega_gemm_bf16_tn, cudaFuncAttributeMaxDynamicSharedMemorySize, GEMM_SMEM_BYTES));
  cublasCreate(&run.h);
  int failed = 0, passed = 0;
  const uint32_t checks[][3] = {{1, 1, 8},     {7, 33, 1000},  {129, 257, 72},  {128, 256, 64},
                                {300, 520, 4096}, {1000, 4095, 1000}, {513, 2048, 768}};
  for (auto& c : checks) (one(run, c[0], c[1], c[2], false, 1 + c[0] * 31 + c[1]) ? passed : failed)++;
  if (argc > 1 && strcmp(argv[1], "--check") == 0) {
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
  }
  const uint32_t benches[][3] = {{8192, 8192, 8192}, {4096, 4096, 4096}, {4096, 5120, 2048}, {4096, 2048, 4096},
                                 {4096, 1536, 2048}, {4096, 2048, 768},  {4096, 151936, 2048}, {512, 5120, 2048},
                                 {512, 2048, 4096},  {512, 1536, 2048},  {512, 2048, 768},   {512, 151936, 2048}};
  for (auto& b : benches) (one(run, b[0], b[1], b[2], true, 7 + b[0] + b[1]) ? passed : failed)++;
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
