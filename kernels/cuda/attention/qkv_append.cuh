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
// block: QKV_APPEND_THREADS, half a warp per head (64 heads a round: Qwen3's 40 heads a sequence take one),
// lane l of the half taking the pairs l, l + 16, .. of its head. head_dim is 32, 64 or 128 (the decode
// kernels' dims, which the library's layout check enforces), so a lane holds at most QKV_APPEND_PAIRS
// pairs. At decode the launch is latency-bound, so every load that does not depend on the sequence's
// page (the head's values, its norm weight, the rotation) is issued before the length and the page table
// are read; a warp per head in two rounds with the page resolved first took 5.2 us a launch at batch 1
// (docs/perf/2026-12-03-s7-qwen3-step.md).
#pragma once
#include "common.cuh"
#include "kv_append.cuh"

#define QKV_APPEND_THREADS 1024
#define QKV_APPEND_LANES 16
#define QKV_APPEND_PAIRS 4

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
  const uint32_t heads = q_heads + 2 * kv_heads, half = head_dim / 2;
  const uint32_t group = threadIdx.x / QKV_APPEND_LANES, sub = threadIdx.x % QKV_APPEND_LANES;
  const uint32_t per_round = QKV_APPEND_THREADS / QKV_APPEND_LANES;
  const float* c = cs + (uint64_t)b * half;
  const float* s = sn + (uint64_t)b * half;
  float cj[QKV_APPEND_PAIRS], sj[QKV_APPEND_PAIRS];
#pragma unroll
  for (int j = 0; j < QKV_APPEND_PAIRS; ++j) {
    const uint32_t i = sub + QKV_APPEND_LANES * j;
    cj[j] = i < half ? c[i] : 0.f;
    sj[j] = i < half ? s[i] : 0.f;
  }
  const int len = lens[b];
  int page = -1;
  uint64_t slot = 0;
  for (uint32_t h0 = 0; h0 < heads; h0 += per_round) {
    const uint32_t h = h0 + group;
    const bool live = h < heads, is_v = h >= q_heads + kv_heads, is_q = h < q_heads;
    const uint16_t* x = qkv + ((uint64_t)b * heads + (live ? h : 0)) * head_dim;
    const uint16_t* w = is_q ? q_norm : k_norm;
    // The head's bits are read once: a v head is stored from them as it came.
    uint16_t ra[QKV_APPEND_PAIRS], rb[QKV_APPEND_PAIRS];
    float a[QKV_APPEND_PAIRS], bb[QKV_APPEND_PAIRS], wa[QKV_APPEND_PAIRS], wb[QKV_APPEND_PAIRS];
#pragma unroll
    for (int j = 0; j < QKV_APPEND_PAIRS; ++j) {
      const uint32_t i = sub + QKV_APPEND_LANES * j;
      const bool in = live && i < half;
      ra[j] = in ? x[i] : 0;
      rb[j] = in ? x[half + i] : 0;
      a[j] = bf16_bits_to_f32(ra[j]);
      bb[j] = bf16_bits_to_f32(rb[j]);
      wa[j] = in && !is_v ? bf16_bits_to_f32(w[i]) : 0.f;
      wb[j] = in && !is_v ? bf16_bits_to_f32(w[half + i]) : 0.f;
    }
    if (h0 == 0) {
      // Uniform over the block: every thread returns, or none does.
      page = append_page(table, status, b, len, page_tokens, pages, max_pages);
      if (page < 0) return;
      slot = (uint64_t)page * page_stride + (uint64_t)((uint32_t)len % page_tokens) * head_dim;
    }
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < QKV_APPEND_PAIRS; ++j) ss = fmaf(a[j], a[j], fmaf(bb[j], bb[j], ss));
    // Every lane shuffles (a v head's sum is unused), so the half-warps of one warp never diverge here.
#pragma unroll
    for (uint32_t o = QKV_APPEND_LANES / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (!live) continue;
    if (is_v) {
      uint16_t* v = pool + slot + (uint64_t)(h - q_heads - kv_heads) * head_stride + v_offset;
#pragma unroll
      for (int j = 0; j < QKV_APPEND_PAIRS; ++j) {
        const uint32_t i = sub + QKV_APPEND_LANES * j;
        if (i < half) {
          v[i] = ra[j];
          v[half + i] = rb[j];
        }
      }
      continue;
    }
    const float inv = rsqrtf(ss / static_cast<float>(head_dim) + eps);
    uint16_t* y = is_q ? q_out + ((uint64_t)b * q_heads + h) * head_dim
                       : pool + slot + (uint64_t)(h - q_heads) * head_stride;
#pragma unroll
    for (int j = 0; j < QKV_APPEND_PAIRS; ++j) {
      const uint32_t i = sub + QKV_APPEND_LANES * j;
      if (i < half) {
        const float p = a[j] * inv * wa[j], q = bb[j] * inv * wb[j];
        const uint32_t pair = omega_attn::pack_bf16x2(p * cj[j] - q * sj[j], q * cj[j] + p * sj[j]);
        y[i] = static_cast<uint16_t>(pair);
        y[half + i] = static_cast<uint16_t>(pair >> 16);
      }
    }
  }
  // Every thread has read its length (at the top) before thread 0 advances it.
  __syncthreads();
  if ((flags & ATTN_APPEND_ADVANCE) && threadIdx.x == 0) lens[b] = len + 1;
}
