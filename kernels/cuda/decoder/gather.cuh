// Row gather and the f32 -> bf16 cast: grid-stride loops, any launch shape covers every element.
#pragma once
#include <stdint.h>

__device__ __forceinline__ uint16_t dec_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  // A NaN stays a (quiet) NaN; everything else rounds to nearest even.
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// out[t, c] = table[ids[t], c] for t < tokens, c < hidden. The ids live in device memory (the previous
// step's argmax wrote them), so an id is checked here: one at or past `vocab` reads nothing and writes a
// row of zeros, which the step's logits then show, instead of reading past the table.
extern "C" __global__ void __launch_bounds__(256)
    omega_embed_bf16(const uint16_t* __restrict__ table, const uint32_t* __restrict__ ids,
                     uint16_t* __restrict__ out, uint32_t tokens, uint32_t hidden, uint32_t vocab) {
  const uint64_t n = static_cast<uint64_t>(tokens) * hidden;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint64_t t = i / hidden, c = i % hidden;
    const uint32_t id = ids[t];
    out[i] = id < vocab ? table[static_cast<uint64_t>(id) * hidden + c] : static_cast<uint16_t>(0);
  }
}

// dst[i] = bf16(src[i]) for i < n.
extern "C" __global__ void __launch_bounds__(256)
    omega_cast_f32_bf16(const float* __restrict__ src, uint16_t* __restrict__ dst, uint64_t n) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = dec_bf16_bits(src[i]);
  }
}
