// Shared pieces of the attention kernels: the status bits the device-resident tables set, bf16 helpers.
#pragma once
#include <stdint.h>
#include <cuda_bf16.h>

// Bits of the status word the kernels OR into (the library clears it before a call and reads it after).
#define ATTN_STATUS_BAD_PAGE 1u   // a page index < 0 or >= the pool's pages: that tile is skipped
#define ATTN_STATUS_LONG 2u       // a length past the page table's capacity: clamped to it
#define ATTN_STATUS_NEGATIVE 4u   // a negative length: taken as 0

namespace omega_attn {

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t b) { return __uint_as_float(((uint32_t)b) << 16); }

// Two floats as a bf16x2 word, `lo` in the low half (the lower k of an MMA fragment), nearest even.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// The sequence length of table row `b`, clamped to [0, cap] with the clamp flagged.
__device__ __forceinline__ int clamped_len(const int* lens, uint32_t b, int cap, unsigned* status, bool flag) {
  int len = lens[b];
  if (len < 0) {
    if (flag) atomicOr(status, ATTN_STATUS_NEGATIVE);
    len = 0;
  } else if (len > cap) {
    if (flag) atomicOr(status, ATTN_STATUS_LONG);
    len = cap;
  }
  return len;
}

}  // namespace omega_attn
