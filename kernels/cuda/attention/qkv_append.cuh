// A decode step's fused QKV projection turned into attention's inputs in one launch: Qwen3's QK-norm and
// RoPE on the q and k heads, q stored for the decode kernel, k and v appended into the paged pool.
//
// qkv is bf16 [batch][q_heads + 2 kv_heads][head_dim]: one row of the product x · [Wq; Wk; Wv]ᵀ per
// sequence (q heads, then k heads, then v heads). A q or k head is RMS-normalised over its head_dim values
// with its weight (q_norm or k_norm, bf16 [head_dim]) and rotated with the sequence's table row (f32 cos,
// sin [batch][head_dim / 2], the rotate_half pairing: i with i + head_dim / 2) in f32, then rounded to bf16
// once — the arithmetic of omega_norm_rope_bf16 (elementwise/rope.cuh). q goes to q_out [batch][q_heads]
// [head_dim]; k and v (v copied as it is) go to the pool at position lens[b], as omega_kv_append_bf16 puts
// them (kv_append.cuh: page table, pool layout, status bits, ATTN_APPEND_ADVANCE), and the same rules hold:
// a length or page the tables cannot hold sets a status bit and the sequence writes nothing, q included.
//
// Grid: batch (one CTA per sequence, so thread 0 may advance lens[b] once every thread has read it);
// block: QKV_APPEND_THREADS, a warp per head at a time (1024: Qwen3's 40 heads a sequence take two rounds of
// warps; 256 threads took five rounds of dependent loads, 7 us a launch at batch 1). head_dim even, at most
// 2 * 32 * 8 (the library takes the decode kernels' 32, 64 and 128).
#pragma once
#include "common.cuh"
#include "kv_append.cuh"

#define QKV_APPEND_THREADS 1024

extern "C" __global__ void __launch_bounds__(QKV_APPEND_THREADS)
    omega_qkv_rope_append_bf16(const uint16_t* __restrict__ qkv, const uint16_t* __restrict__ q_norm,
                               const uint16_t* __restrict__ k_norm, const float* __restrict__ cs,
                               const float* __restrict__ sn, uint16_t* __restrict__ q_out,
                               uint16_t* __restrict__ pool, const int* __restrict__ table, int* lens,
                               unsigned* status, uint64_t head_stride, uint64_t v_offset, uint64_t page_stride,
                               uint32_t page_tokens, uint32_t pages, uint32_t max_pages, uint32_t q_heads,
                               uint32_t kv_heads, uint32_t head_dim, uint32_t flags, float eps) {
  using omega_attn::bf16_bits_to_f32;
  const uint32_t b = blockIdx.x;
  const int len = lens[b];
  __syncthreads();  // every thread has its length before thread 0 may advance it
  const int page = append_page(table, status, b, len, page_tokens, pages, max_pages);
  if (page < 0) return;
  const uint64_t slot = (uint64_t)page * page_stride + (uint64_t)((uint32_t)len % page_tokens) * head_dim;
  const uint32_t heads = q_heads + 2 * kv_heads, half = head_dim / 2;
  const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
  const float* c = cs + (uint64_t)b * half;
  const float* s = sn + (uint64_t)b * half;
  for (uint32_t h = warp; h < heads; h += QKV_APPEND_THREADS / 32) {
    const uint16_t* x = qkv + ((uint64_t)b * heads + h) * head_dim;
    if (h >= q_heads + kv_heads) {
      uint16_t* v = pool + slot + (uint64_t)(h - q_heads - kv_heads) * head_stride + v_offset;
      for (uint32_t i = lane; i < head_dim; i += 32) v[i] = x[i];
      continue;
    }
    const bool is_q = h < q_heads;
    const uint16_t* w = is_q ? q_norm : k_norm;
    float ss = 0.f;
    for (uint32_t i = lane; i < half; i += 32) {
      const float a = bf16_bits_to_f32(x[i]), bb = bf16_bits_to_f32(x[half + i]);
      ss = fmaf(a, a, fmaf(bb, bb, ss));
    }
    for (uint32_t o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = rsqrtf(ss / static_cast<float>(head_dim) + eps);
    uint16_t* y = is_q ? q_out + ((uint64_t)b * q_heads + h) * head_dim
                       : pool + slot + (uint64_t)(h - q_heads) * head_stride;
    for (uint32_t i = lane; i < half; i += 32) {
      const float a = bf16_bits_to_f32(x[i]) * inv * bf16_bits_to_f32(w[i]);
      const float bb = bf16_bits_to_f32(x[half + i]) * inv * bf16_bits_to_f32(w[half + i]);
      const uint32_t pair = omega_attn::pack_bf16x2(a * c[i] - bb * s[i], bb * c[i] + a * s[i]);
      y[i] = static_cast<uint16_t>(pair);
      y[half + i] = static_cast<uint16_t>(pair >> 16);
    }
  }
  if ((flags & ATTN_APPEND_ADVANCE) && threadIdx.x == 0) lens[b] = len + 1;
}
