// Routing for the grouped GEMM, on the device: a decode step's top-k expert choices become the CSR
// layout `omega_moe_gemv_bf16_*` reads, so the choices never travel to the host.
//
// topk[t * top_k + j] is token t's j-th expert (< E). Out: offsets[E + 1] (expert e's slots are
// offsets[e] .. offsets[e + 1] - 1), rows[slot] the token of each slot and pairs[slot] its choice
// index t * top_k + j. Slots of one expert are in increasing choice order, so the result depends on
// the choices alone, never on timing. active[0] is the count of touched experts (at least one slot) and
// active[1 ..] lists them in increasing order (room for min(E, T * top_k)): the grouped GEMM's grid walks
// that list, so an untouched expert costs it nothing. A choice naming an expert >= E is dropped and
// counted: *dropped is STORED (not added to), so a replayed launch counts afresh with no zeroing launch
// before it, and a second CTA stores the same values again. One CTA of 1024 threads; thread e scans the
// choices for expert e; the block's offsets and touched-expert list come from a block-wide scan (thread
// 0 walking 128 experts in turn, its offsets stored and read back through global memory, took 4.7 us a
// launch at batch 1 and 8.3 at batch 8: docs/perf/2026-12-03-s7-qwen3-step.md).
#pragma once
#include <stdint.h>

#define ROUTE_THREADS 1024

// The inclusive prefix sums of a and b over the warp's lanes (every lane of the warp calls it).
__device__ __forceinline__ void route_warp_scan(uint32_t& a, uint32_t& b) {
  const uint32_t lane = threadIdx.x % 32;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t ya = __shfl_up_sync(0xffffffffu, a, o), yb = __shfl_up_sync(0xffffffffu, b, o);
    if (lane >= static_cast<uint32_t>(o)) {
      a += ya;
      b += yb;
    }
  }
}

// The exclusive prefix sums over the block of a and b (every thread passes its own), and their totals.
// Two barriers; `sa` and `sb` are 32-word shared arrays.
__device__ __forceinline__ void route_block_scan(uint32_t& a, uint32_t& b, uint32_t& total_a, uint32_t& total_b,
                                                 uint32_t* sa, uint32_t* sb) {
  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint32_t ia = a, ib = b;
  route_warp_scan(ia, ib);
  if (lane == 31) {
    sa[warp] = ia;
    sb[warp] = ib;
  }
  __syncthreads();
  if (warp == 0) {
    uint32_t wa = lane < ROUTE_THREADS / 32 ? sa[lane] : 0, wb = lane < ROUTE_THREADS / 32 ? sb[lane] : 0;
    route_warp_scan(wa, wb);
    sa[lane] = wa;
    sb[lane] = wb;
  }
  __syncthreads();
  const uint32_t before_a = warp ? sa[warp - 1] : 0, before_b = warp ? sb[warp - 1] : 0;
  a = before_a + ia - a;
  b = before_b + ib - b;
  total_a = sa[ROUTE_THREADS / 32 - 1];
  total_b = sb[ROUTE_THREADS / 32 - 1];
}

extern "C" __global__ void __launch_bounds__(ROUTE_THREADS) omega_moe_route(const uint32_t* topk, uint32_t T,
                                                                           uint32_t top_k, uint32_t E,
                                                                           uint32_t* offsets, uint32_t* rows,
                                                                           uint32_t* pairs, uint32_t* dropped,
                                                                           uint32_t* active) {
  __shared__ uint32_t scan_a[32], scan_b[32];
  __shared__ uint32_t bad_total;
  const uint32_t P = T * top_k;
  // The slots and touched experts of the passes before this one (every thread keeps the same totals).
  uint32_t run = 0, touched = 0;
  if (threadIdx.x == 0) bad_total = 0;
  __syncthreads();
  // Experts past 1024 are folded into passes of 1024.
  for (uint32_t base = 0; base < E; base += ROUTE_THREADS) {
    const uint32_t e = base + threadIdx.x;
    uint32_t c = 0;
    if (e < E)
      for (uint32_t p = 0; p < P; ++p) c += __ldg(&topk[p]) == e;
    uint32_t at = c, slot = c != 0, slots, hit;
    route_block_scan(at, slot, slots, hit, scan_a, scan_b);
    if (e < E) {
      at += run;
      offsets[e] = at;
      if (c) active[1 + touched + slot] = e;
      for (uint32_t p = 0; p < P && c; ++p)
        if (__ldg(&topk[p]) == e) {
          rows[at] = p / top_k;
          pairs[at] = p;
          ++at;
          --c;
        }
    }
    run += slots;
    touched += hit;
    // The scan's shared words are rewritten by the next pass: every thread has read them first.
    __syncthreads();
  }
  uint32_t bad = 0;
  for (uint32_t p = threadIdx.x; p < P; p += ROUTE_THREADS) bad += __ldg(&topk[p]) >= E;
  if (bad) atomicAdd(&bad_total, bad);
  __syncthreads();
  if (threadIdx.x == 0) {
    offsets[E] = run;
    *dropped = bad_total;
    active[0] = touched;
  }
}
