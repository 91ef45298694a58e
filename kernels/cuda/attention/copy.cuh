// The bandwidth denominator of examples/attn_bench.rs: a grid-stride copy of n16 16-byte chunks (one read
// and one write of each), measured in the same run as the decode kernels it is the ratio for.
#pragma once
#include <stdint.h>

#define COPY_THREADS 256

extern "C" __global__ void __launch_bounds__(COPY_THREADS)
    omega_attn_copy16(const uint4* __restrict__ src, uint4* __restrict__ dst, uint64_t n16) {
  const uint64_t stride = (uint64_t)gridDim.x * COPY_THREADS;
  for (uint64_t i = (uint64_t)blockIdx.x * COPY_THREADS + threadIdx.x; i < n16; i += stride) dst[i] = src[i];
}
