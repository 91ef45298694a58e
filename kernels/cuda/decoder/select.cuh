// Selections: the MoE router's top k and greedy decoding's argmax.
#pragma once
#include <stdint.h>

#include "router_topk.cuh"
// The argmax block (a block per row): 1024 threads with four 16-byte loads each in flight keep 64 KB of a
// row moving through one SM (256 threads of dependent scalar loads took 131 us for a 151936-wide row).
#define DEC_ARGMAX_THREADS 1024

// One warp per token (DEC_ROUTER_WARPS tokens a block), each running dec_router_topk_token over its row:
// topk[t * k + j] is token t's j-th expert, weights[t * k + j] its weight. The library refuses a k past
// DEC_TOPK_MAX or the experts; the kernel does nothing for one.
#define DEC_ROUTER_WARPS 4
extern "C" __global__ void __launch_bounds__(32 * DEC_ROUTER_WARPS)
    omega_router_topk(const float* __restrict__ logits, uint32_t* __restrict__ topk, float* __restrict__ weights,
                      uint32_t tokens, uint32_t experts, uint32_t k) {
  if (k == 0 || k > DEC_TOPK_MAX || k > experts) return;
  const uint32_t warps = gridDim.x * DEC_ROUTER_WARPS;
  for (uint32_t t = blockIdx.x * DEC_ROUTER_WARPS + threadIdx.x / 32; t < tokens; t += warps) {
    const float* row = logits + static_cast<uint64_t>(t) * experts;
    dec_router_topk_token([row](uint32_t e) { return row[e]; }, experts, k, topk + static_cast<uint64_t>(t) * k,
                          weights + static_cast<uint64_t>(t) * k);
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
