// A model's own small kernels: the step start (RoPE tables and attention lengths from the device
// positions) and the seeded weight generator (weights made on the device, no host upload).
#pragma once
#include <stdint.h>

#include "gather.cuh"

// Step start. pos[b] is sequence b's new token's index (the KV append writes there and advances it);
// for i < half (head_dim / 2):
//   cos[b, i] = f32(cos(pos[b] * theta^(-2i / head_dim))), sin likewise,
// with theta^(-2i/head_dim) = exp2(-(2i / head_dim) * log2(theta)), the product and the cos/sin in f64,
// one rounding to f32 at the end: an angle reaches max_seq radians (10^5 and more), where f32 would lose
// about 1e-2 of it, so the tables are the f64 values rounded (what the host reference computes); the
// table is B * half values, the f64 cost is nothing. lens[b] = pos[b] + 1 (what attention reads: the new
// token attends itself). One thread per (b, i), grid-stride.
extern "C" __global__ void __launch_bounds__(256)
    omega_rope_step(const int32_t* __restrict__ pos, float* __restrict__ cos_t, float* __restrict__ sin_t,
                    int32_t* __restrict__ lens, uint32_t batch, uint32_t half, float theta) {
  const uint64_t n = static_cast<uint64_t>(batch) * half;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const double l2 = log2(static_cast<double>(theta));
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += stride) {
    const uint64_t b = j / half, i = j % half;
    const int32_t p = pos[b];
    const double inv = exp2(-(static_cast<double>(2 * i) / static_cast<double>(2 * half)) * l2);
    const double angle = static_cast<double>(p) * inv;
    cos_t[j] = static_cast<float>(cos(angle));
    sin_t[j] = static_cast<float>(sin(angle));
    if (i == 0) lens[b] = p + 1;
  }
}

__device__ __forceinline__ uint64_t dec_splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The seeded generator of src/libs/serving/weights.rs, element by element: out[i] = bf16(center +
// (u * 2^-23 - 1) * a) with u the top 24 bits of splitmix64(base ^ (start + i)), base =
// splitmix64(splitmix64(seed) ^ tensor) (the host computes it). Each step is one IEEE f32 operation,
// rounded to nearest (the _rn intrinsics: no contraction into an fma, which would round once where the
// host rounds twice), so the bits are the host's. i < n, grid-stride.
extern "C" __global__ void __launch_bounds__(256)
    omega_fill_bf16_hash(uint16_t* __restrict__ out, uint64_t n, uint64_t base, uint64_t start, float center,
                         float a) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float u = static_cast<float>(dec_splitmix64(base ^ (start + i)) >> 40);
    const float v = __fmul_rn(__fadd_rn(__fmul_rn(u, 1.0f / 8388608.0f), -1.0f), a);
    out[i] = dec_bf16_bits(__fadd_rn(center, v));
  }
}
