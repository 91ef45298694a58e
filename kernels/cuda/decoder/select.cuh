// Selections: the MoE router's top k and greedy decoding's argmax.
#pragma once
#include <stdint.h>

// The router's most experts a token chooses (Qwen3-30B-A3B takes 8).
#define DEC_TOPK_MAX 8
// The argmax block (a block per row): 1024 threads with four 16-byte loads each in flight keep 64 KB of a
// row moving through one SM (256 threads of dependent scalar loads took 131 us for a 151936-wide row).
#define DEC_ARGMAX_THREADS 1024

// Whether (v, i) ranks above (w, j) in the router's order: the larger value first, NaN below every number,
// the lower expert first among equals (NaN equal to NaN); an index of 0xffffffff (no candidate) never.
__device__ __forceinline__ bool dec_ranks_above(float v, uint32_t i, float w, uint32_t j) {
  if (i == 0xffffffffu) return false;
  if (j == 0xffffffffu) return true;
  const bool vn = v != v, wn = w != w;
  if (vn != wn) return wn;
  if (!vn && v != w) return v > w;
  return i < j;
}

// One warp per token (DEC_ROUTER_WARPS tokens a block): k rounds, each a warp arg-max (every lane over
// its strided experts, skipping those already chosen, then a shuffle reduction), so the k largest logits
// come out in descending order, the lower expert first on a tie; then their softmax weights
// renormalised over the k (softmax over all, divided by the chosen ones' sum: the same numbers as a
// softmax over the chosen logits, computed that way, `expf(l - top)` summed in order). topk[t * k + j]
// is the expert, weights[t * k + j] its weight. k is at most DEC_TOPK_MAX and at most experts; the library
// refuses other calls. The round loop is unrolled to DEC_TOPK_MAX so the chosen list stays in registers,
// and up to 32 * DEC_ROUTER_PER_LANE experts a lane keeps its logits in registers too (loaded once; a
// bit per value marks the chosen), so a round is register work and shuffles. (A thread per token with an
// insertion sort in local memory took 20 us a launch at batch 1 and 66 at 32; the warp re-reading the
// row every round, 8.3.)
#define DEC_ROUTER_WARPS 4
#define DEC_ROUTER_PER_LANE 8
extern "C" __global__ void __launch_bounds__(32 * DEC_ROUTER_WARPS)
    omega_router_topk(const float* __restrict__ logits, uint32_t* __restrict__ topk, float* __restrict__ weights,
                      uint32_t tokens, uint32_t experts, uint32_t k) {
  if (k == 0 || k > DEC_TOPK_MAX || k > experts) return;
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t warps = gridDim.x * DEC_ROUTER_WARPS;
  const bool in_registers = experts <= 32 * DEC_ROUTER_PER_LANE;
  for (uint32_t t = blockIdx.x * DEC_ROUTER_WARPS + threadIdx.x / 32; t < tokens; t += warps) {
    const float* row = logits + static_cast<uint64_t>(t) * experts;
    float vals[DEC_ROUTER_PER_LANE];
    uint32_t chosen_here = 0;  // bit j: this lane's value j was chosen
    if (in_registers) {
#pragma unroll
      for (int j = 0; j < DEC_ROUTER_PER_LANE; ++j) {
        const uint32_t e = lane + 32 * j;
        vals[j] = e < experts ? row[e] : 0.f;
      }
    }
    float best[DEC_TOPK_MAX];
    uint32_t idx[DEC_TOPK_MAX];
#pragma unroll
    for (int r = 0; r < DEC_TOPK_MAX; ++r) {
      best[r] = 0.f;
      idx[r] = 0xffffffffu;
      if (r < static_cast<int>(k)) {
        float v = 0.f;
        uint32_t i = 0xffffffffu;
        if (in_registers) {
#pragma unroll
          for (int j = 0; j < DEC_ROUTER_PER_LANE; ++j) {
            const uint32_t e = lane + 32 * j;
            if (e < experts && !((chosen_here >> j) & 1u) && dec_ranks_above(vals[j], e, v, i)) {
              v = vals[j];
              i = e;
            }
          }
        } else {
          for (uint32_t e = lane; e < experts; e += 32) {
            bool taken = false;
#pragma unroll
            for (int j = 0; j < r; ++j) taken |= idx[j] == e;
            const float x = row[e];
            if (!taken && dec_ranks_above(x, e, v, i)) {
              v = x;
              i = e;
            }
          }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
          const float ov = __shfl_xor_sync(0xffffffffu, v, o);
          const uint32_t oi = __shfl_xor_sync(0xffffffffu, i, o);
          if (dec_ranks_above(ov, oi, v, i)) {
            v = ov;
            i = oi;
          }
        }
        best[r] = v;
        idx[r] = i;
        if (i != 0xffffffffu && i % 32 == lane) chosen_here |= 1u << (i / 32);
      }
    }
    const float top = best[0];
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < DEC_TOPK_MAX; ++j) {
      if (j < static_cast<int>(k)) {
        best[j] = expf(best[j] - top);
        sum += best[j];
      }
    }
#pragma unroll
    for (int j = 0; j < DEC_TOPK_MAX; ++j) {
      if (j < static_cast<int>(k) && lane == static_cast<uint32_t>(j)) {
        topk[static_cast<uint64_t>(t) * k + j] = idx[j];
        weights[static_cast<uint64_t>(t) * k + j] = best[j] / sum;
      }
    }
  }
}

// out[r] = the lowest c of row r (cols f32) holding its largest value; NaN is never the largest (a row of
// NaN gives 0). Blocks of DEC_ARGMAX_THREADS, grid-stride over rows.
extern "C" __global__ void __launch_bounds__(DEC_ARGMAX_THREADS)
    omega_argmax_f32(const float* __restrict__ logits, uint32_t* __restrict__ out, uint32_t rows, uint32_t cols) {
  __shared__ float sv[DEC_ARGMAX_THREADS / 32];
  __shared__ uint32_t si[DEC_ARGMAX_THREADS / 32];
  for (uint32_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = logits + static_cast<uint64_t>(r) * cols;
    float v = -INFINITY;
    uint32_t i = 0xffffffffu;
    // A thread's elements in increasing index order, so `x > v` keeps its lowest index of a value.
    auto see = [&](float x, uint32_t c) {
      if (x > v || (i == 0xffffffffu && !(x != x))) {
        v = x;
        i = c;
      }
    };
    if (cols % 4 == 0 && (reinterpret_cast<uintptr_t>(row) & 15) == 0) {
      const float4* row4 = reinterpret_cast<const float4*>(row);
      const uint32_t n4 = cols / 4, step = blockDim.x;
      uint32_t c = threadIdx.x;
      for (; c + 3 * step < n4; c += 4 * step) {
        float4 q[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) q[u] = __ldg(row4 + c + u * step);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const uint32_t at = 4 * (c + u * step);
          see(q[u].x, at);
          see(q[u].y, at + 1);
          see(q[u].z, at + 2);
          see(q[u].w, at + 3);
        }
      }
      for (; c < n4; c += step) {
        const float4 q = __ldg(row4 + c);
        see(q.x, 4 * c);
        see(q.y, 4 * c + 1);
        see(q.z, 4 * c + 2);
        see(q.w, 4 * c + 3);
      }
    } else {
      for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) see(row[c], c);
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const uint32_t oi = __shfl_xor_sync(0xffffffffu, i, o);
      if (oi != 0xffffffffu && (i == 0xffffffffu || ov > v || (ov == v && oi < i))) {
        v = ov;
        i = oi;
      }
    }
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
      sv[warp] = v;
      si[warp] = i;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (uint32_t w = 1; w < blockDim.x / 32; ++w) {
        if (si[w] != 0xffffffffu && (i == 0xffffffffu || sv[w] > v || (sv[w] == v && si[w] < i))) {
          v = sv[w];
          i = si[w];
        }
      }
      out[r] = i == 0xffffffffu ? 0u : i;
    }
    __syncthreads();
  }
}
