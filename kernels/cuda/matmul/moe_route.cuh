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
// before it, and a second CTA stores the same values again.
//
// One CTA of 1024 threads, in passes of 1024 experts. Thread p takes choice p (and p + 1024...): the
// expert counts are shared-memory atomics, the offsets and the touched-expert list a block-wide scan over
// the experts, and the slots are handed out in choice order one warp of choices at a time (a warp ranks
// its equal choices with __match_any_sync, then advances each expert's next slot; a barrier passes the
// turn to the next warp), so no thread walks every choice. Thread e walking all P choices for expert e,
// twice, took 8.4 us a launch at batch 8 (docs/perf/2026-12-03-s7-qwen3-step.md); before it, thread 0
// walking the experts in turn took 4.7 us at batch 1 and 8.3 at batch 8.
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

// The routing of P = T * top_k choices by the whole block (ROUTE_THREADS threads, every one calls it);
// `choice(p)` reads choice p (each call site picks the load its choices need).
template <typename Choice>
__device__ __forceinline__ void moe_route_block(Choice choice, uint32_t T, uint32_t top_k, uint32_t E,
                                                uint32_t* offsets, uint32_t* rows, uint32_t* pairs,
                                                uint32_t* dropped, uint32_t* active) {
  __shared__ uint32_t scan_a[32], scan_b[32];
  // Per expert of the pass: its count, then the next slot it hands out.
  __shared__ uint32_t next[ROUTE_THREADS];
  __shared__ uint32_t bad_total;
  const uint32_t P = T * top_k, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // The slots and touched experts of the passes before this one (every thread keeps the same totals).
  uint32_t run = 0, touched = 0, bad = 0;
  if (threadIdx.x == 0) bad_total = 0;
  for (uint32_t base = 0; base < E; base += ROUTE_THREADS) {
    const uint32_t here = min(E - base, ROUTE_THREADS);
    next[threadIdx.x] = 0;
    __syncthreads();
    for (uint32_t p = threadIdx.x; p < P; p += ROUTE_THREADS) {
      const uint32_t e = choice(p);
      // An expert below the pass wraps to a large index and is not counted.
      if (e - base < here) atomicAdd(&next[e - base], 1u);
      bad += base == 0 && e >= E;
    }
    __syncthreads();
    const uint32_t c = threadIdx.x < here ? next[threadIdx.x] : 0;
    uint32_t at = c, slot = c != 0, slots, hit;
    route_block_scan(at, slot, slots, hit, scan_a, scan_b);
    at += run;
    if (threadIdx.x < here) {
      offsets[base + threadIdx.x] = at;
      if (c) active[1 + touched + slot] = base + threadIdx.x;
    }
    // Each thread read only its own word before the scan's barriers.
    next[threadIdx.x] = at;
    __syncthreads();
    for (uint32_t p0 = 0; p0 < P; p0 += ROUTE_THREADS) {
      const uint32_t p = p0 + threadIdx.x;
      const uint32_t e = p < P ? choice(p) - base : ~0u;
      const bool mine = e < here;
      // Lanes without a choice of this pass share one key whose group is never used.
      const uint32_t same = __match_any_sync(0xffffffffu, mine ? e : ~0u);
      const uint32_t rank = __popc(same & ((1u << lane) - 1u));
      const bool last = (same >> lane) == 1u;
      const uint32_t turns = min(ROUTE_THREADS, P - p0 + 31) / 32;
      for (uint32_t w = 0; w < turns; ++w) {
        if (warp == w && mine) {
          const uint32_t s = next[e] + rank;
          rows[s] = p / top_k;
          pairs[s] = p;
          __syncwarp(same);
          if (last) next[e] = s + 1;
        }
        __syncthreads();
      }
    }
    run += slots;
    touched += hit;
  }
  if (bad) atomicAdd(&bad_total, bad);
  __syncthreads();
  if (threadIdx.x == 0) {
    offsets[E] = run;
    *dropped = bad_total;
    active[0] = touched;
  }
}

extern "C" __global__ void __launch_bounds__(ROUTE_THREADS) omega_moe_route(const uint32_t* __restrict__ topk,
                                                                           uint32_t T, uint32_t top_k, uint32_t E,
                                                                           uint32_t* offsets, uint32_t* rows,
                                                                           uint32_t* pairs, uint32_t* dropped,
                                                                           uint32_t* active) {
  moe_route_block([topk](uint32_t p) { return __ldg(&topk[p]); }, T, top_k, E, offsets, rows, pairs, dropped,
                  active);
}
