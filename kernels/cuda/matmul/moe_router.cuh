// The MoE router of a decode step in one launch: the router product, each token's top k, and the routing
// the grouped GEMM reads, so a step's routing costs one launch where three (router GEMV, top-k, route)
// cost about three round trips (docs/perf/2026-12-03-s8-qwen3-step.md).
//
// logits[t, e] = x[t, :] . w[e, :] (f32, x [T, K] and w [E, K] bf16); then topk[t, :] and weights[t, :]
// (f32) as omega_router_topk writes them (decoder/router_topk.cuh), then offsets, rows, pairs, dropped and
// active as omega_moe_route writes them (moe_route.cuh).
//
// Grid ceil(E / ROUTER_ROWS) CTAs of ROUTE_THREADS: CTA c takes experts c * ROUTER_ROWS .. +ROUTER_ROWS,
// ROUTER_WARPS_PER_ROW warps per expert, warp w the tokens t = w % 16, w % 16 + 16, ..; a lane reads 16
// bytes of the row and of x at a time (512 bytes per warp instruction, four in flight), f32 FMA in
// increasing K, and the warp's shuffle sum is the logit. Eight experts a CTA with four warps each left a
// warp eight tokens in turn at batch 32, each a memory latency: 28.8 us a layer against the three
// launches' 19.6 (docs/perf/2026-12-03-s8-qwen3-step.md); two a CTA spread the tokens over 16 warps. The CTA
// that takes `*ticket` last (every CTA's logits stored and fenced before its ticket) goes on alone: its
// warps take a token each for the top k, reading the logits through L2 (`ld.global.cg`: other SMs wrote
// them in this grid), then the whole CTA routes, reading the choices it just stored the same way. It puts
// the ticket back to zero, so the word stays zero between launches. Requirements: K % 8 == 0, x and w
// 16-byte aligned, top_k <= DEC_TOPK_MAX and <= E (the library checks).
#pragma once
#include <stdint.h>

#include "decoder/router_topk.cuh"
#include "gemv_bf16.cuh"
#include "moe_route.cuh"

#define ROUTER_ROWS 2
#define ROUTER_WARPS_PER_ROW (ROUTE_THREADS / 32 / ROUTER_ROWS)
#define ROUTER_UNROLL 4

extern "C" __global__ void __launch_bounds__(ROUTE_THREADS)
    omega_moe_router_route(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w, float* logits,
                           uint32_t* ticket, uint32_t T, uint32_t K, uint32_t E, uint32_t top_k, uint32_t* topk,
                           float* weights, uint32_t* offsets, uint32_t* rows, uint32_t* pairs, uint32_t* dropped,
                           uint32_t* active) {
  using namespace omega_gemv;
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t e = blockIdx.x * ROUTER_ROWS + warp / ROUTER_WARPS_PER_ROW;
  if (e < E) {
    const uint16_t* wr = w + static_cast<size_t>(e) * K;
    for (uint32_t t = warp % ROUTER_WARPS_PER_ROW; t < T; t += ROUTER_WARPS_PER_ROW) {
      const uint16_t* xr = x + static_cast<size_t>(t) * K;
      float acc = 0.f;
      for (uint32_t k0 = 8 * lane; k0 < K; k0 += 256 * ROUTER_UNROLL) {
        uint4 a[ROUTER_UNROLL], b[ROUTER_UNROLL];
#pragma unroll
        for (int u = 0; u < ROUTER_UNROLL; ++u) {
          const uint32_t k = k0 + 256 * u;
          a[u] = k < K ? ldg_cached(wr + k) : make_uint4(0, 0, 0, 0);
          b[u] = k < K ? ldg_cached(xr + k) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < ROUTER_UNROLL; ++u)
          if (k0 + 256 * u < K) dot8(acc, a[u], b[u]);
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (lane == 0) logits[static_cast<size_t>(t) * E + e] = acc;
    }
  }
  __shared__ uint32_t last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t taken = atomicAdd(ticket, 1u);
    last = taken == gridDim.x - 1;
    if (last) *ticket = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (uint32_t t = warp; t < T; t += ROUTE_THREADS / 32) {
    const float* row = logits + static_cast<size_t>(t) * E;
    dec_router_topk_token([row](uint32_t j) { return __ldcg(&row[j]); }, E, top_k,
                          topk + static_cast<size_t>(t) * top_k, weights + static_cast<size_t>(t) * top_k);
  }
  __threadfence_block();
  __syncthreads();
  moe_route_block([topk](uint32_t p) { return __ldcg(&topk[p]); }, T, top_k, E, offsets, rows, pairs, dropped,
                  active);
}
