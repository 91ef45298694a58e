// Helpers the CUDA-side kernel checks share (benches/cuda/gemm_check.cu, gemv_check.cu): the error check,
// the seeded generator and bf16 conversions.
#pragma once
#include <cuda_runtime.h>

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
