// Selections: the MoE router's top k and greedy decoding's argmax.
#pragma once
#include <stdint.h>

// The router's most experts a token chooses (Qwen3-30B-A3B takes 8).
#define DEC_TOPK_MAX 8
// The argmax block (a block per row).
#define DEC_ARGMAX_THREADS 256

// One thread per token (decode has few tokens; a token's row of 128 logits is 512 bytes): the k largest
// logits in descending order, the lower expert first on a tie, then their softmax weights renormalised
// over the k (softmax over all, divided by the chosen ones' sum: the same numbers as a softmax over the
// chosen logits, computed that way). topk[t * k + j] is the expert, weights[t * k + j] its weight.
// k is at most DEC_TOPK_MAX and at most experts; the library refuses other calls.
extern "C" __global__ void __launch_bounds__(128)
    omega_router_topk(const float* __restrict__ logits, uint32_t* __restrict__ topk, float* __restrict__ weights,
                      uint32_t tokens, uint32_t experts, uint32_t k) {
  if (k == 0 || k > DEC_TOPK_MAX || k > experts) return;
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < tokens; t += stride) {
    const float* row = logits + static_cast<uint64_t>(t) * experts;
    float best[DEC_TOPK_MAX];
    uint32_t idx[DEC_TOPK_MAX];
    uint32_t have = 0;
    for (uint32_t e = 0; e < experts; ++e) {
      const float v = row[e];
      // Insertion into the sorted list: strictly greater moves past, so an earlier expert stays first.
      if (have == k && !(v > best[k - 1])) continue;
      uint32_t j = have < k ? have++ : k - 1;
      while (j > 0 && v > best[j - 1]) {
        best[j] = best[j - 1];
        idx[j] = idx[j - 1];
        --j;
      }
      best[j] = v;
      idx[j] = e;
    }
    const float top = best[0];
    float sum = 0.f;
    for (uint32_t j = 0; j < k; ++j) {
      best[j] = expf(best[j] - top);
      sum += best[j];
    }
    for (uint32_t j = 0; j < k; ++j) {
      topk[static_cast<uint64_t>(t) * k + j] = idx[j];
      weights[static_cast<uint64_t>(t) * k + j] = best[j] / sum;
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
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float x = row[c];
      if (x > v || (i == 0xffffffffu && !(x != x))) {
        v = x;
        i = c;
      }
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
