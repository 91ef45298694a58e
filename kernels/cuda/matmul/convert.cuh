// f32 -> bf16, round to nearest even (NaN stays a quiet NaN), for the bf16-output GEMMs.
#pragma once
#include <stdint.h>

__device__ __forceinline__ uint16_t omega_f32_to_bf16(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// grid (any), block 256: a grid-stride loop over n elements.
extern "C" __global__ void __launch_bounds__(256) omega_convert_f32_bf16(const float* in, uint16_t* out, uint64_t n) {
  for (uint64_t i = blockIdx.x * 256ull + threadIdx.x; i < n; i += (uint64_t)gridDim.x * 256ull)
    out[i] = omega_f32_to_bf16(in[i]);
}
