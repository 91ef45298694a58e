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
// choices for expert e.
#pragma once
#include <stdint.h>

#define ROUTE_THREADS 1024

extern "C" __global__ void __launch_bounds__(ROUTE_THREADS) omega_moe_route(const uint32_t* topk, uint32_t T,
                                                                           uint32_t top_k, uint32_t E,
                                                                           uint32_t* offsets, uint32_t* rows,
                                                                           uint32_t* pairs, uint32_t* dropped,
                                                                           uint32_t* active) {
  // counts[ROUTE_THREADS] is the drop count's accumulator.
  __shared__ uint32_t counts[ROUTE_THREADS + 1];
  const uint32_t P = T * top_k;
  // Thread 0's running count of touched experts, carried across passes.
  uint32_t touched = 0;
  // Counts per expert; experts past 1024 are folded into passes of 1024.
  for (uint32_t base = 0; base < E; base += ROUTE_THREADS) {
    const uint32_t e = base + threadIdx.x;
    uint32_t c = 0;
    if (e < E)
      for (uint32_t p = 0; p < P; ++p) c += __ldg(&topk[p]) == e;
    counts[threadIdx.x] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t run = base == 0 ? 0 : offsets[base];
      for (uint32_t i = 0; i < ROUTE_THREADS && base + i < E; ++i) {
        offsets[base + i] = run;
        run += counts[i];
        if (counts[i]) active[1 + touched++] = base + i;
      }
      offsets[min(E, base + ROUTE_THREADS)] = run;
    }
    __syncthreads();
    if (e < E) {
      uint32_t at = offsets[e];
      for (uint32_t p = 0; p < P; ++p)
        if (__ldg(&topk[p]) == e) {
          rows[at] = p / top_k;
          pairs[at] = p;
          ++at;
        }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) counts[ROUTE_THREADS] = 0;
  __syncthreads();
  uint32_t bad = 0;
  for (uint32_t p = threadIdx.x; p < P; p += ROUTE_THREADS) bad += __ldg(&topk[p]) >= E;
  if (bad) atomicAdd(&counts[ROUTE_THREADS], bad);
  __syncthreads();
  if (threadIdx.x == 0) {
    *dropped = counts[ROUTE_THREADS];
    active[0] = touched;
  }
}
