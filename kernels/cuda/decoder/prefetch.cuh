// L2 prefetch: the L2 fetches up to two ranges ahead of the kernels that read them, while the kernels in
// between (a decode step's norms, attention, routing: latency-bound, HBM nearly idle) run. Nothing waits
// on a prefetch (it has no completion), so the kernel ends once its prefetches are issued, and a range
// never read again costs only HBM time.
//
// Range r is [base_r, base_r + bytes_r): cut in DEC_PREFETCH_CHUNK-byte chunks dealt round-robin over the
// grid's CTAs (chunk c to CTA c % grid, so every SM's share is alike), one chunk per lane at a time.
// `lines` picks the instruction: 0 is one cp.async.bulk.prefetch.L2 per chunk (the TMA unit walks it;
// base and bytes multiples of 16), 1 is prefetch.global.L2 per 128-byte line of the chunk from the lane
// (any alignment). block: 32 (one warp), grid: any.
#pragma once
#include <stdint.h>

#define DEC_PREFETCH_CHUNK 16384u

__device__ __forceinline__ void dec_prefetch_range(const uint8_t* base, uint64_t bytes, uint32_t lines) {
  const uint64_t chunks = (bytes + DEC_PREFETCH_CHUNK - 1) / DEC_PREFETCH_CHUNK;
  for (uint64_t c = static_cast<uint64_t>(threadIdx.x) * gridDim.x + blockIdx.x; c < chunks;
       c += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint64_t off = c * DEC_PREFETCH_CHUNK;
    const uint32_t n = static_cast<uint32_t>(min(static_cast<uint64_t>(DEC_PREFETCH_CHUNK), bytes - off));
    if (lines) {
      for (uint32_t i = 0; i < n; i += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(base + off + i));
    } else {
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + off), "r"(n) : "memory");
    }
  }
}

extern "C" __global__ void __launch_bounds__(32)
    omega_l2_prefetch(const uint8_t* a, uint64_t a_bytes, const uint8_t* b, uint64_t b_bytes, uint32_t lines) {
  dec_prefetch_range(a, a_bytes, lines);
  dec_prefetch_range(b, b_bytes, lines);
}
