// Dense GQA attention in f32 (the host-pointer C entries' kernel; f32 accuracy, not speed).
//
// q and out are [q_rows][q_heads][head_dim], k and v [kv_len][kv_heads][head_dim], row-major f32. Query row
// i sits at position kv_len - q_rows + i; with `causal` it attends keys 0 ..= its position, otherwise all
// kv_len keys. Query head h reads KV head h / (q_heads / kv_heads).
//
// One warp per (row, head): lane l holds elements l, l + 32, ... of q and of the output accumulator (at
// most 8 each, head_dim <= 256), each key's dot product is a shuffle reduction, and the softmax is online
// (running max m, running sum l, the accumulator rescaled by exp(m_old - m_new)), in f32 with expf.
// Block: 128 threads (4 warps); grid: ceil(q_rows * q_heads / 4).
#pragma once
#include "common.cuh"

#define GQA_THREADS 128
#define GQA_MAX_CHUNKS 8

extern "C" __global__ void __launch_bounds__(GQA_THREADS)
    omega_gqa_attention_f32(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                            float* __restrict__ out, uint32_t q_heads, uint32_t kv_heads, uint32_t head_dim,
                            uint32_t kv_len, uint32_t q_rows, uint32_t causal, float scale) {
  const uint32_t lane = threadIdx.x & 31;
  const uint64_t w = (uint64_t)blockIdx.x * (GQA_THREADS / 32) + (threadIdx.x >> 5);
  if (w >= (uint64_t)q_rows * q_heads) return;
  const uint32_t row = (uint32_t)(w / q_heads), h = (uint32_t)(w % q_heads);
  const uint32_t kvh = h / (q_heads / kv_heads);
  const uint32_t pos = kv_len - q_rows + row;
  const uint32_t limit = causal ? pos + 1 : kv_len;
  const float* qr = q + w * head_dim;
  float qv[GQA_MAX_CHUNKS], acc[GQA_MAX_CHUNKS];
#pragma unroll
  for (int j = 0; j < GQA_MAX_CHUNKS; ++j) {
    uint32_t d = lane + 32 * j;
    qv[j] = d < head_dim ? qr[d] : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const uint64_t kv_row = (uint64_t)kv_heads * head_dim;
  for (uint32_t i = 0; i < limit; ++i) {
    const float* kr = k + i * kv_row + (uint64_t)kvh * head_dim;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < GQA_MAX_CHUNKS; ++j) {
      uint32_t d = lane + 32 * j;
      if (d < head_dim) s = fmaf(qv[j], kr[d], s);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    s *= scale;
    const float m_new = fmaxf(m, s);
    const float alpha = expf(m - m_new), p = expf(s - m_new);
    l = l * alpha + p;
    const float* vr = v + i * kv_row + (uint64_t)kvh * head_dim;
#pragma unroll
    for (int j = 0; j < GQA_MAX_CHUNKS; ++j) {
      uint32_t d = lane + 32 * j;
      if (d < head_dim) acc[j] = fmaf(p, vr[d], acc[j] * alpha);
    }
    m = m_new;
  }
  float* orow = out + w * head_dim;
#pragma unroll
  for (int j = 0; j < GQA_MAX_CHUNKS; ++j) {
    uint32_t d = lane + 32 * j;
    if (d < head_dim) orow[d] = acc[j] / l;
  }
}
