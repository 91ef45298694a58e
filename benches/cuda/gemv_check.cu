// CUDA-side check and benchmark of Omega's small-M bf16 kernel (kernels/cuda/matmul/gemv_bf16.cuh) beside
// cuBLAS, on the GPU machine (CUDA and cuBLAS here; Omega never uses them).
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels/cuda/matmul \
//        -o /tmp/gemv_check benches/cuda/gemv_check.cu -lcublas
//   /tmp/gemv_check
//
// For each Qwen3-30B-A3B matrix (N x K) and M in 1..64: x and W from a seeded generator, y poisoned,
// checked element by element against cuBLAS and an f64 CPU reference; then device time per call, each
// side captured in a CUDA graph of back-to-back calls that cycle through enough copies of W (>= 256 MiB)
// that no call finds its weights in L2. Bandwidth = W bytes / device time, beside a D2D cudaMemcpy's
// (read + write) / time measured in the same run. Output:
//   check M N K ... PASS|FAIL
//   gemv.<M>x<N>x<K>.omega_us / .cublas_us / .omega_gbps / .frac_copy / .speedup
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gemv_bf16.cuh"

#include "check_common.cuh"

typedef void (*Entry)(const uint16_t*, const uint16_t*, float*, float*, uint32_t*, uint32_t, uint32_t, uint32_t,
                      uint32_t);

struct Plan {
  Entry entry;
  dim3 grid;
  uint32_t k_per_split;
};

// The split the library will use: 64-row blocks, K split until about 4 CTAs per SM.
static uint32_t ctas_per_sm() {
  const char* v = getenv("GEMV_CTAS_PER_SM");  // tuning experiments: the split's target
  return v ? (uint32_t)atoi(v) : 4u;
}

static Plan plan(uint32_t M, uint32_t N, uint32_t K, int sms) {
  Plan p;
  p.entry = M <= 8 ? omega_gemv_bf16_tn_m1 : M <= 16 ? omega_gemv_bf16_tn_m2 : M <= 32 ? omega_gemv_bf16_tn_m4
                                                                                        : omega_gemv_bf16_tn_m8;
  uint32_t blocks = (N + GEMV_ROWS - 1) / GEMV_ROWS;
  uint32_t want = (ctas_per_sm() * sms + blocks - 1) / blocks;
  uint32_t split = std::max(1u, std::min(want, K / 128));
  p.k_per_split = ((K + split - 1) / split + 31) / 32 * 32;
  split = (K + p.k_per_split - 1) / p.k_per_split;
  p.grid = dim3(blocks, split);
  return p;
}

int main() {
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cublasHandle_t h;
  cublasCreate(&h);
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  cublasSetStream(h, st);

  // Copy bandwidth (read + write), the denominator.
  const double copy = copy_gbps(st);
  printf("copy_d2d_gbps %.0f\n", copy);

  const uint32_t mats[][2] = {{5120, 2048}, {2048, 4096}, {128, 2048}, {1536, 2048}, {2048, 768}, {151936, 2048}};
  const uint32_t ms_list[] = {1, 2, 4, 8, 16, 32, 64};
  int passed = 0, failed = 0;
  for (auto& mk : mats) {
    const uint32_t N = mk[0], K = mk[1];
    const size_t wbytes = (size_t)N * K * 2;
    const int copies = (int)std::max<size_t>(1, std::min<size_t>(64, (256ull << 20) / wbytes + 1));
    std::vector<uint16_t> hw((size_t)N * K);
    uint64_t s = 99 + N + K;
    for (auto& v : hw) v = random_bf16(s);
    uint16_t* dw;
    CK(cudaMalloc(&dw, wbytes * copies));
    for (int c = 0; c < copies; ++c) CK(cudaMemcpy(dw + (size_t)c * N * K, hw.data(), wbytes, cudaMemcpyHostToDevice));
    for (uint32_t M : ms_list) {
      std::vector<uint16_t> hx((size_t)M * K);
      for (auto& v : hx) v = random_bf16(s);
      uint16_t* dx;
      float *dy, *dref, *work;
      uint32_t* tickets;
      Plan p = plan(M, N, K, sms);
      CK(cudaMalloc(&dx, hx.size() * 2));
      CK(cudaMalloc(&dy, (size_t)M * N * 4));
      CK(cudaMalloc(&dref, (size_t)M * N * 4));
      CK(cudaMalloc(&work, std::max<size_t>(4, (size_t)p.grid.y * M * N * 4)));
      CK(cudaMalloc(&tickets, p.grid.x * 4));
      CK(cudaMemset(tickets, 0, p.grid.x * 4));
      CK(cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
      CK(cudaMemset(dy, 0xFF, (size_t)M * N * 4));
      auto omega = [&](int c, cudaStream_t q) {
        p.entry<<<p.grid, GEMV_THREADS, 0, q>>>(dx, dw + (size_t)c * N * K, dy, work, tickets, M, N, K, p.k_per_split);
      };
      const float one_f = 1.0f, zero_f = 0.0f;
      auto cublas = [&](int c) {
        cublasStatus_t r = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one_f, dw + (size_t)c * N * K,
                                        CUDA_R_16BF, K, dx, CUDA_R_16BF, K, &zero_f, dref, CUDA_R_32F, N,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (r != CUBLAS_STATUS_SUCCESS) {
          fprintf(stderr, "cublasGemmEx %d\n", (int)r);
          exit(2);
        }
      };
      omega(0, st);
      CK(cudaGetLastError());
      cublas(0);
      CK(cudaStreamSynchronize(st));
      std::vector<float> hy((size_t)M * N), href((size_t)M * N);
      CK(cudaMemcpy(hy.data(), dy, hy.size() * 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(href.data(), dref, href.size() * 4, cudaMemcpyDeviceToHost));
      double max_rel = 0, max_abs_cublas = 0;
      size_t samples = std::min<size_t>((size_t)M * N, 8192);
      uint64_t r = 5;
      for (size_t i = 0; i < (size_t)M * N; ++i) {
        double d = fabs((double)hy[i] - href[i]);
        if (!(d <= 1e30)) d = INFINITY;
        max_abs_cublas = std::max(max_abs_cublas, d);
      }
      for (size_t i = 0; i < samples; ++i) {
        size_t idx = samples == (size_t)M * N ? i : splitmix(r) % ((size_t)M * N);
        size_t m = idx / N, n = idx % N;
        double acc = 0, mag = 0;
        for (uint32_t k = 0; k < K; ++k) {
          double pr = (double)from_bf16(hx[m * K + k]) * from_bf16(hw[n * K + k]);
          acc += pr;
          mag += fabs(pr);
        }
        double e = fabs(hy[idx] - acc);
        if (!(e <= 1e30)) e = INFINITY;
        max_rel = std::max(max_rel, e / (mag + 1e-30));
      }
      bool ok = max_rel <= 1e-6 * sqrt((double)K) + 1e-6;
      printf("check %u %u %u split %u max_rel_vs_ref %.3g max_abs_vs_cublas %.3g %s\n", M, N, K, p.grid.y, max_rel,
             max_abs_cublas, ok ? "PASS" : "FAIL");
      (ok ? passed : failed)++;

      // Device time per call: a graph of `calls` back-to-back calls cycling through the W copies.
      const int calls = std::max(copies, 20);
      double to = graph_us(st, calls, copies, [&](int c) { omega(c, st); });
      double tc = graph_us(st, calls, copies, [&](int c) { cublas(c); });
      double gbps = wbytes / (to * 1e-6) / 1e9;
      printf("gemv.%ux%ux%u.omega_us %.2f\ngemv.%ux%ux%u.cublas_us %.2f\ngemv.%ux%ux%u.omega_gbps %.0f\n"
             "gemv.%ux%ux%u.frac_copy %.3f\ngemv.%ux%ux%u.speedup %.2f\n",
             M, N, K, to, M, N, K, tc, M, N, K, gbps, M, N, K, gbps / copy, M, N, K, tc / to);
      CK(cudaFree(dx));
      CK(cudaFree(dy));
      CK(cudaFree(dref));
      CK(cudaFree(work));
      CK(cudaFree(tickets));
    }
    CK(cudaFree(dw));
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
