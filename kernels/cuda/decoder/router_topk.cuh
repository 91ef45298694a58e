// The router's top k of one token by one warp, as device code both the decoder's router kernel and the
// matmul module's fused router (matmul/moe_router.cuh) run.
#pragma once
#include <stdint.h>

// The router's most experts a token chooses (Qwen3-30B-A3B takes 8).
#define DEC_TOPK_MAX 8
// Up to 32 * DEC_ROUTER_PER_LANE experts a lane keeps its logits in registers (loaded once).
#define DEC_ROUTER_PER_LANE 8

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

// One token's top k by one warp (every lane calls it; `logit(e)` reads expert e's logit): k rounds, each a
// warp maximum of the router keys (dec_router_key) below the previous round's choice (every lane over its
// strided experts, then a shuffle reduction), so the k largest logits come out in descending order, the
// lower expert first on a tie. The keys are a strict total order, so "below the last chosen" is exactly
// "not chosen yet" and no chosen set is kept. Then their softmax weights renormalised over the k (softmax
// over all, divided by the chosen ones' sum: the same numbers as a softmax over the chosen logits,
// computed that way, `expf(l - top)` summed in order). topk[j] is the expert, weights[j] its weight; lane
// j keeps choice j. k is at most DEC_TOPK_MAX and at most experts (the callers check).
//
// The code is kept small on purpose: at decode a launch is one or two blocks that run it once, so every
// instruction is fetched cold, and the fully unrolled form (85 KB of code) took 8 us a launch whatever the
// batch (docs/perf/2026-12-03-s7-qwen3-step.md); the round loop is rolled.
template <typename Logit>
__device__ __forceinline__ void dec_router_topk_token(Logit logit, uint32_t experts, uint32_t k,
                                                      uint32_t* __restrict__ topk, float* __restrict__ weights) {
  const uint32_t lane = threadIdx.x % 32;
  const bool in_registers = experts <= 32 * DEC_ROUTER_PER_LANE;
  float vals[DEC_ROUTER_PER_LANE];
  if (in_registers) {
#pragma unroll
    for (int j = 0; j < DEC_ROUTER_PER_LANE; ++j) {
      const uint32_t e = lane + 32 * j;
      vals[j] = e < experts ? logit(e) : 0.f;
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
        const uint64_t key = dec_router_key(logit(e), e);
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
    topk[lane] = mine_i;
    weights[lane] = mine_e / sum;
  }
}
