// Selections: the MoE router's top k and greedy decoding's argmax.
#pragma once
#include <stdint.h>

// The router's most experts a token chooses (Qwen3-30B-A3B takes 8).
#define DEC_TOPK_MAX 8
// The argmax block (a block per row): 1024 threads with four 16-byte loads each in flight keep 64 KB of a
// row moving through one SM (256 threads of dependent scalar loads took 131 us for a 151936-wide row).
#define DEC_ARGMAX_THREADS 1024

// The router's order as one 64-bit key, larger ranking above: the value's bits made monotonic (-0 read as
// +0, since the order calls them equal; every NaN 0, below every number) over the complement of the index
// (the lower expert above among equals). Two keys are equal only for the same expert, and no key is 0
// except a NaN at index 0xffffffff, which no row has: 0 stands for "no candidate".
__device__ __forceinline__ uint64_t dec_router_key(float v, uint32_t i) {
  const uint32_t u = __float_as_uint(v == 0.f ? 0.f : v);
  const uint32_t mono = v != v ? 0u : (u & 0x80000000u ? ~u : u | 0x80000000u);
  return (static_cast<uint64_t>(mono) << 32) | ~i;
}

// The value a key was made from (a NaN for the NaN class, +0 for either zero).
__device__ __forceinline__ float dec_router_key_value(uint64_t key) {
  const uint32_t mono = static_cast<uint32_t>(key >> 32);
  if (mono == 0) return __uint_as_float(0x7fc00000u);
  return __uint_as_float(mono & 0x80000000u ? mono & 0x7fffffffu : ~mono);
}

// One warp per token (DEC_ROUTER_WARPS tokens a block): k rounds, each a warp maximum of the router keys
// (dec_router_key) below the previous round's choice (every lane over its strided experts, then a shuffle
// reduction), so the k largest logits come out in descending order, the lower expert first on a tie. The
// keys are a strict total order, so "below the last chosen" is exactly "not chosen yet" and no chosen set
// is kept. Then their softmax weights renormalised over the k (softmax over all, divided by the chosen
// ones' sum: the same numbers as a softmax over the chosen logits, computed that way, `expf(l - top)`
// summed in order). topk[t * k + j] is the expert, weights[t * k + j] its weight; lane j keeps choice j.
// k is at most DEC_TOPK_MAX and at most experts; the library refuses other calls. Up to
// 32 * DEC_ROUTER_PER_LANE experts a lane keeps its logits in registers (loaded once).
//
// The code is kept small on purpose: at decode a launch is one or two blocks that run it once, so every
// instruction is fetched cold, and the fully unrolled form (85 KB of code) took 8 us a launch whatever the
// batch (docs/perf/2026-12-03-s7-qwen3-step.md); the round loop is rolled.
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
    if (in_registers) {
#pragma unroll
      for (int j = 0; j < DEC_ROUTER_PER_LANE; ++j) {
        const uint32_t e = lane + 32 * j;
        vals[j] = e < experts ? row[e] : 0.f;
      }
    }
    // Each round takes the largest key below the previous round's (every key is below the first bound).
    uint64_t bound = ~0ull, mine = 0;
#pragma unroll 1
    for (uint32_t r = 0; r < k; ++r) {
      uint64_t best = 0;
      if (in_registers) {
#pragma unroll
        for (int j = 0; j < DEC_ROUTER_PER_LANE; ++j) {
          const uint64_t key = dec_router_key(vals[j], lane + 32 * j);
          if (lane + 32 * j < experts && key < bound && key > best) best = key;
        }
      } else {
#pragma unroll 1
        for (uint32_t e = lane; e < experts; e += 32) {
          const uint64_t key = dec_router_key(row[e], e);
          if (key < bound && key > best) best = key;
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const uint64_t other = __shfl_xor_sync(0xffffffffu, best, o);
        best = other > best ? other : best;
      }
      if (lane == r) mine = best;
      bound = best;
    }
    const float mine_v = dec_router_key_value(mine);
    const uint32_t mine_i = ~static_cast<uint32_t>(mine);
    const float top = __shfl_sync(0xffffffffu, mine_v, 0);
    const float mine_e = lane < k ? expf(mine_v - top) : 0.f;
    float sum = 0.f;
#pragma unroll 1
    for (uint32_t j = 0; j < k; ++j) sum += __shfl_sync(0xffffffffu, mine_e, j);
    if (lane < k) {
      topk[static_cast<uint64_t>(t) * k + lane] = mine_i;
      weights[static_cast<uint64_t>(t) * k + lane] = mine_e / sum;
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
