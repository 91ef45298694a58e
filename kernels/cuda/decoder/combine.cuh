// The mixture-of-experts combine: the grouped GEMM's output rows (one per routed choice, in the routing's
// slot order) weighted by the router's weights and summed back into each token's row of the residual.
#pragma once
#include <stdint.h>

#include "gather.cuh"
#include "select.cuh"

#define DEC_COMBINE_THREADS 256

// y: f32 [slots, n], the grouped GEMM's rows; pairs[slot] = t * top_k + j, the choice a row is (the
// routing's `pairs`), and *slots the filled slots (the routing's offsets[E]: a choice naming no expert
// has none, and its term is left out); weights: f32 [tokens, top_k], choice-indexed as the router wrote
// them. out[t, c] = bf16(res[t, c] + sum_j weights[t, j] * y[slot(t, j), c]), the sum an fmaf chain in
// j order; out may be res (in place). A CTA takes a unit of one token's DEC_COMBINE_THREADS columns (a
// column a thread; grid-stride over tokens x column chunks), so a batch-1 step spreads its token over
// n / 256 SMs (a CTA per token took 8.5 us at batch 1); each thread loads its top_k terms before the fma
// chain so the loads are in flight together. top_k at most DEC_TOPK_MAX (the library refuses more).
extern "C" __global__ void __launch_bounds__(DEC_COMBINE_THREADS)
    omega_moe_combine_bf16(const float* __restrict__ y, const uint32_t* __restrict__ pairs,
                           const uint32_t* __restrict__ slots, const float* __restrict__ weights,
                           const uint16_t* res, uint16_t* out, uint32_t tokens, uint32_t top_k, uint32_t n) {
  __shared__ uint32_t slot_of[DEC_TOPK_MAX];
  if (top_k == 0 || top_k > DEC_TOPK_MAX) return;
  const uint32_t filled = *slots;
  const uint32_t chunks = (n + DEC_COMBINE_THREADS - 1) / DEC_COMBINE_THREADS;
  const uint64_t units = static_cast<uint64_t>(tokens) * chunks;
  for (uint64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const uint32_t t = static_cast<uint32_t>(u / chunks);
    const uint32_t c = static_cast<uint32_t>(u % chunks) * DEC_COMBINE_THREADS + threadIdx.x;
    if (threadIdx.x < top_k) slot_of[threadIdx.x] = 0xffffffffu;
    __syncthreads();
    for (uint32_t s = threadIdx.x; s < filled; s += blockDim.x) {
      const uint32_t p = pairs[s];
      if (p / top_k == t) slot_of[p % top_k] = s;
    }
    __syncthreads();
    if (c < n) {
      float w[DEC_TOPK_MAX], v[DEC_TOPK_MAX];
#pragma unroll
      for (int j = 0; j < DEC_TOPK_MAX; ++j) {
        const uint32_t s = j < static_cast<int>(top_k) ? slot_of[j] : 0xffffffffu;
        w[j] = 0.f;
        v[j] = 0.f;
        if (s != 0xffffffffu) {
          w[j] = weights[static_cast<uint64_t>(t) * top_k + j];
          v[j] = y[static_cast<uint64_t>(s) * n + c];
        }
      }
      float acc = 0.f;
#pragma unroll
      for (int j = 0; j < DEC_TOPK_MAX; ++j) {
        // A missing term is left out (not added as 0 * 0, which would turn a -0 sum into +0).
        const uint32_t s = j < static_cast<int>(top_k) ? slot_of[j] : 0xffffffffu;
        if (s != 0xffffffffu) acc = fmaf(w[j], v[j], acc);
      }
      const uint64_t at = static_cast<uint64_t>(t) * n + c;
      out[at] = dec_bf16_bits(__uint_as_float(static_cast<uint32_t>(res[at]) << 16) + acc);
    }
    __syncthreads();
  }
}
