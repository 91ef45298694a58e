// The mixture-of-experts combine: the grouped GEMM's output rows (one per routed choice, in the routing's
// slot order) weighted by the router's weights and summed back into each token's row of the residual.
#pragma once
#include <stdint.h>

#include "elementwise/common.cuh"
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

// The combine and the RMSNorm after it in one launch (a decode step's combine and the next layer's input
// norm, or the final norm): h[t, :] = the combine above (bits for bits: the same fma chain and rounding),
// stored, then x[t, :] = rmsnorm(h[t, :]) * nw as omega_rmsnorm_bf16 computes it at n columns, bits for
// bits, so folding the norm into the combine changes no value of the step. One launch where two were
// latency-bound ones at decode: 4.1 us a layer at batch 1 against 2.2 + 2.8 (docs/perf/2026-12-04-s12-qwen3-step.md).
//
// Block 2R threads, R = the RMSNorm's block at n columns (ceil(n / 16) rounded up to a warp, at least 32:
// thread t of it holds vectors t and t + R of 8 columns). Here thread u combines vector u alone, so a
// token's loads (top_k rows of 8 f32 a vector) are spread over twice the threads; the sum of squares then
// runs in the RMSNorm's order: thread t < R continues its chain over vector t + R, which thread t + R left
// in shared memory, and the first R threads' warps add as ew_block_sum adds over R threads. One CTA a
// token, grid-stride. Spreading a token over a cluster of a CTA per warp of the norm (the sum through
// distributed shared memory) took 5.1 us a layer: its two cluster barriers cost more than the loads it
// spread. Needs n % 8 == 0, n <= 4096 (R <= 256) and y, res, h, nw, x 16-byte aligned (the library
// checks); h may be res (in place: each thread reads its vector before it stores it). At most 512 threads
// leave a thread 128 registers for its top_k rows' 64 values in flight (at 1024 threads' 64 it spilled).
#define DEC_COMBINE_NORM_MAX_HALF 256

extern "C" __global__ void __launch_bounds__(2 * DEC_COMBINE_NORM_MAX_HALF)
    omega_moe_combine_rmsnorm_bf16(const float* __restrict__ y, const uint32_t* __restrict__ pairs,
                                   const uint32_t* __restrict__ slots, const float* __restrict__ weights,
                                   const uint16_t* res, uint16_t* h, const uint16_t* __restrict__ nw,
                                   uint16_t* __restrict__ x, uint32_t tokens, uint32_t top_k, uint32_t n, float eps) {
  __shared__ uint32_t slot_of[DEC_TOPK_MAX];
  __shared__ float red[32];
  __shared__ uint4 upper[DEC_COMBINE_NORM_MAX_HALF];
  if (top_k == 0 || top_k > DEC_TOPK_MAX) return;
  const uint32_t filled = *slots;
  const uint32_t u = threadIdx.x, lane = u % 32, warp = u / 32;
  const uint32_t nv = n / 8, half = blockDim.x / 2;
  const bool mine = u < nv;
  if (mine) asm volatile("prefetch.global.L1 [%0];" ::"l"(nw + static_cast<size_t>(u) * 8));
  for (uint32_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    if (u < top_k) slot_of[u] = 0xffffffffu;
    __syncthreads();
    for (uint32_t s = u; s < filled; s += blockDim.x) {
      const uint32_t p = pairs[s];
      if (p / top_k == t) slot_of[p % top_k] = s;
    }
    __syncthreads();
    const size_t at = static_cast<size_t>(t) * n + static_cast<size_t>(u) * 8;
    float hv[8];
    if (mine) {
      uint32_t sl[DEC_TOPK_MAX];
      float w[DEC_TOPK_MAX], v[DEC_TOPK_MAX][8], r[8];
#pragma unroll
      for (int j = 0; j < DEC_TOPK_MAX; ++j) {
        sl[j] = j < static_cast<int>(top_k) ? slot_of[j] : 0xffffffffu;
        w[j] = 0.f;
#pragma unroll
        for (int e = 0; e < 8; ++e) v[j][e] = 0.f;
        if (sl[j] != 0xffffffffu) {
          w[j] = weights[static_cast<uint64_t>(t) * top_k + j];
          ew_load<8>(y + static_cast<uint64_t>(sl[j]) * n + static_cast<size_t>(u) * 8, v[j]);
        }
      }
      ew_load<8>(res + at, r);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < DEC_TOPK_MAX; ++j)
          if (sl[j] != 0xffffffffu) acc = fmaf(w[j], v[j][e], acc);
        hv[e] = ew_round<uint16_t>(r[e] + acc);
      }
      ew_store<8>(h + at, hv);
      if (u >= half) upper[u - half] = ew_pack<uint16_t, 8>(hv);
    }
    __syncthreads();
    float ss = 0.f;
    if (u < half) {
      if (mine) {
#pragma unroll
        for (int e = 0; e < 8; ++e) ss = fmaf(hv[e], hv[e], ss);
      }
      if (u + half < nv) {
        float o[8];
        ew_unpack<uint16_t, 8>(upper[u], o);
#pragma unroll
        for (int e = 0; e < 8; ++e) ss = fmaf(o[e], o[e], ss);
      }
    }
    ss = ew_warp_sum(ss);
    if (lane == 0 && warp < half / 32) red[warp] = ss;
    __syncthreads();
    const float inv = rsqrtf(ew_warp_sum(lane < half / 32 ? red[lane] : 0.f) / static_cast<float>(n) + eps);
    if (mine) {
      float wv[8];
      ew_load<8>(nw + static_cast<size_t>(u) * 8, wv);
#pragma unroll
      for (int e = 0; e < 8; ++e) hv[e] = hv[e] * inv * wv[e];
      ew_store<8>(x + at, hv);
    }
    __syncthreads();  // slot_of, upper and red serve the next token
  }
}
