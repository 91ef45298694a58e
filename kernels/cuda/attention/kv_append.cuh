// One decode step's K and V rows appended into the paged pool, on the GPU.
//
// k_new and v_new are [batch][kv_heads][head_dim] (bf16, or f32 with ATTN_APPEND_F32, rounded to bf16
// nearest even). Sequence b's new token goes at position lens[b] (the tokens it holds before the step): page
// table[b * max_pages + pos / page_tokens], row pos % page_tokens. With ATTN_APPEND_ADVANCE the kernel then
// stores lens[b] + 1, so the next attention call sees the token; every thread of the CTA has read lens[b]
// before thread 0 stores it (one CTA per sequence: no other CTA reads it).
//
// Device tables are never trusted: a length < 0, a position past the table's capacity or a page index
// outside the pool sets a status bit and the sequence writes nothing (nor advances).
// Block: 128 threads, 16-byte stores; grid: batch. head_dim % 8 == 0, 16-byte aligned rows.
#pragma once
#include "common.cuh"

#define APPEND_THREADS 128
#define ATTN_APPEND_F32 1u
#define ATTN_APPEND_ADVANCE 2u

// The page sequence b's token at position `len` goes to, or -1 with the status flagged (by thread 0) for a
// length or a page the tables cannot hold. Shared by every append kernel, so they refuse alike.
__device__ __forceinline__ int append_page(const int* __restrict__ table, unsigned* status, uint32_t b, int len,
                                           uint32_t page_tokens, uint32_t pages, uint32_t max_pages) {
  const uint64_t cap = (uint64_t)max_pages * page_tokens;
  if (len < 0 || (uint64_t)len >= cap) {
    if (threadIdx.x == 0) atomicOr(status, len < 0 ? ATTN_STATUS_NEGATIVE : ATTN_STATUS_LONG);
    return -1;
  }
  const int page = table[(uint64_t)b * max_pages + (uint32_t)len / page_tokens];
  if (page < 0 || (uint32_t)page >= pages) {
    if (threadIdx.x == 0) atomicOr(status, ATTN_STATUS_BAD_PAGE);
    return -1;
  }
  return page;
}

extern "C" __global__ void __launch_bounds__(APPEND_THREADS)
    omega_kv_append_bf16(uint16_t* __restrict__ pool, const void* __restrict__ k_new, const void* __restrict__ v_new,
                         const int* __restrict__ table, int* lens, unsigned* status, uint64_t head_stride,
                         uint64_t v_offset, uint64_t page_stride, uint32_t page_tokens, uint32_t pages,
                         uint32_t max_pages, uint32_t kv_heads, uint32_t head_dim, uint32_t flags) {
  const uint32_t b = blockIdx.x;
  const int len = lens[b];
  __syncthreads();  // every thread has its length before thread 0 may advance it
  const int page = append_page(table, status, b, len, page_tokens, pages, max_pages);
  if (page < 0) return;
  const uint32_t row = (uint32_t)len % page_tokens;
  const uint32_t chunks = head_dim / 8;
  for (uint32_t c = threadIdx.x; c < kv_heads * chunks; c += APPEND_THREADS) {
    const uint32_t h = c / chunks, e = (c % chunks) * 8;
    const uint64_t src = ((uint64_t)b * kv_heads + h) * head_dim + e;
    const uint64_t dst = (uint64_t)page * page_stride + h * head_stride + (uint64_t)row * head_dim + e;
    uint4 kw, vw;
    if (flags & ATTN_APPEND_F32) {
      const float4* kf = reinterpret_cast<const float4*>(static_cast<const float*>(k_new) + src);
      const float4* vf = reinterpret_cast<const float4*>(static_cast<const float*>(v_new) + src);
      float4 k0 = kf[0], k1 = kf[1], v0 = vf[0], v1 = vf[1];
      kw = make_uint4(omega_attn::pack_bf16x2(k0.x, k0.y), omega_attn::pack_bf16x2(k0.z, k0.w),
                      omega_attn::pack_bf16x2(k1.x, k1.y), omega_attn::pack_bf16x2(k1.z, k1.w));
      vw = make_uint4(omega_attn::pack_bf16x2(v0.x, v0.y), omega_attn::pack_bf16x2(v0.z, v0.w),
                      omega_attn::pack_bf16x2(v1.x, v1.y), omega_attn::pack_bf16x2(v1.z, v1.w));
    } else {
      kw = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(k_new) + src);
      vw = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(v_new) + src);
    }
    *reinterpret_cast<uint4*>(pool + dst) = kw;
    *reinterpret_cast<uint4*>(pool + dst + v_offset) = vw;
  }
  if ((flags & ATTN_APPEND_ADVANCE) && threadIdx.x == 0) lens[b] = len + 1;
}
