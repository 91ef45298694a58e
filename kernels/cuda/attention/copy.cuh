// The bandwidth denominator of examples/attn_bench.rs: a grid-stride copy of n16 16-byte chunks (one read
// and one write of each), measured in the same run as the decode kernels it is the ratio for.
//
// Why four chunks a thread and step: with one 16-byte load per iteration a thread has one read in flight
// (the store waits on it), and the copy reached 3942 GB/s where torch's reached 4262 on the same H200. Four
// independent loads issued before their stores keep four times the bytes in flight per thread, so the ratio
// is taken against what the memory system gives, not against the copy's own latency. The chunks of one step
// are a grid stride apart, so a warp's accesses stay coalesced 512-byte runs.
#pragma once
#include <stdint.h>

#define COPY_THREADS 256
#define COPY_UNROLL 4

extern "C" __global__ void __launch_bounds__(COPY_THREADS)
    omega_attn_copy16(const uint4* __restrict__ src, uint4* __restrict__ dst, uint64_t n16) {
  const uint64_t stride = (uint64_t)gridDim.x * COPY_THREADS;
  uint64_t i = (uint64_t)blockIdx.x * COPY_THREADS + threadIdx.x;
  for (; i + (COPY_UNROLL - 1) * stride < n16; i += COPY_UNROLL * stride) {
    uint4 v[COPY_UNROLL];
#pragma unroll
    for (int u = 0; u < COPY_UNROLL; ++u) v[u] = __ldcs(src + i + u * stride);
#pragma unroll
    for (int u = 0; u < COPY_UNROLL; ++u) __stcs(dst + i + u * stride, v[u]);
  }
  for (; i < n16; i += stride) dst[i] = src[i];
}
