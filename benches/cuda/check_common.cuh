// Helpers the CUDA-side kernel checks share (benches/cuda/gemm_check.cu, gemv_check.cu, skinny_check.cu): the
// error check, the seeded generator, bf16 conversions, graph timing and the copy rate.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e = (x);                                                                      \
    if (e != cudaSuccess) {                                                                   \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e));       \
      exit(2);                                                                                \
    }                                                                                         \
  } while (0)

static inline uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Round to nearest even, as the tensor cores' inputs are stored.
static inline uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

static inline float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// A uniform value in [-1, 1) from the generator, as bf16.
static inline uint16_t random_bf16(uint64_t& s) {
  return to_bf16((float)((splitmix(s) >> 40) / (double)(1 << 24)) * 2.0f - 1.0f);
}

// Microseconds per call of `body(copy)` over `calls` back-to-back calls in one graph, best of 5.
template <typename F>
static double graph_us(cudaStream_t st, int calls, int copies, F&& body) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < calls; ++i) body(i % copies);
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, st));
  CK(cudaStreamSynchronize(st));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float best = 1e30f;
  for (int rep = 0; rep < 5; ++rep) {
    CK(cudaEventRecord(e0, st));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    best = std::min(best, ms);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return best * 1e3 / calls;
}

// Microseconds per launch of `body()` over `reps` back-to-back launches on the default stream, after
// three to warm up (cudaEvent, no graph: each launch's own cost counted, as a caller's loop pays it).
template <typename F>
static double launches_us(int reps, F&& body) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) body();
  CK(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i) body();
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return ms * 1e3 / reps;
}

// A 1 GiB device-to-device copy's (read + write) GB/s.
static double copy_gbps(cudaStream_t st) {
  const size_t bytes = 1ull << 30;
  void *a, *b;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  const double us = graph_us(st, 10, 1, [&](int) { CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st)); });
  CK(cudaFree(a));
  CK(cudaFree(b));
  return 2.0 * bytes / (us * 1e-6) / 1e9;
}
