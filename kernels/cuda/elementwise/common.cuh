// What the elementwise kernels share: bf16 <-> f32, 16-byte (or 8-byte) vector loads and stores of
// V elements widened to f32, and warp / block sums.
//
// bf16 travels as its bit pattern (uint16_t). Every kernel computes in f32 and rounds once per stored
// value (nearest even, as omega_convert_f32_bf16 does).
#pragma once
#include <stdint.h>

__device__ __forceinline__ float ew_to_f32(float v) { return v; }
__device__ __forceinline__ float ew_to_f32(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

__device__ __forceinline__ uint16_t ew_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ void ew_from_f32(float f, float* out) { *out = f; }
__device__ __forceinline__ void ew_from_f32(float f, uint16_t* out) { *out = ew_bf16_bits(f); }

// `f` as a stored T would hold it (the bf16 residual stream is rounded before it is normalised).
template <typename T>
__device__ __forceinline__ float ew_round(float f) {
  T t;
  ew_from_f32(f, &t);
  return ew_to_f32(t);
}

// The raw vector of V elements of T: 16 or 8 bytes, or one element (the scalar path).
template <typename T, int V>
struct EwRaw {
  using type = T;
};
template <> struct EwRaw<float, 4> { using type = uint4; };
template <> struct EwRaw<uint16_t, 8> { using type = uint4; };
template <> struct EwRaw<uint16_t, 4> { using type = uint2; };
// 8 f32 (bf16 RoPE's table rows): two 16-byte loads.
struct alignas(16) EwRaw32 {
  uint4 lo, hi;
};
template <> struct EwRaw<float, 8> { using type = EwRaw32; };

// A raw vector's 32-bit words, by value. Unpacking through an element pointer into the loaded vector let
// the front end replace the one vector load by a load per element (PTX of every kernel here: ld.global.u16
// and .f32 only), eight instructions for one; taken from the words, the vector load stays.
__device__ __forceinline__ void ew_words(const uint4& r, uint32_t (&w)[4]) {
  w[0] = r.x, w[1] = r.y, w[2] = r.z, w[3] = r.w;
}
__device__ __forceinline__ void ew_words(const uint2& r, uint32_t (&w)[2]) { w[0] = r.x, w[1] = r.y; }
__device__ __forceinline__ void ew_words(const EwRaw32& r, uint32_t (&w)[8]) {
  w[0] = r.lo.x, w[1] = r.lo.y, w[2] = r.lo.z, w[3] = r.lo.w;
  w[4] = r.hi.x, w[5] = r.hi.y, w[6] = r.hi.z, w[7] = r.hi.w;
}

// The V elements of T in a raw vector, widened to f32, and back (rounded once per element).
template <typename T, int V>
__device__ __forceinline__ void ew_unpack(const typename EwRaw<T, V>::type& raw, float (&v)[V]) {
  if constexpr (V == 1) {
    v[0] = ew_to_f32(raw);
  } else {
    uint32_t w[sizeof(raw) / 4];
    ew_words(raw, w);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if constexpr (sizeof(T) == 4)
        v[j] = __uint_as_float(w[j]);
      else
        v[j] = __uint_as_float(j % 2 ? w[j / 2] & 0xffff0000u : w[j / 2] << 16);
    }
  }
}

// ew_unpack through an element pointer, which NVVM turns into a load per element of the vector it came
// from. Only the QK-norm + RoPE forms take it: with 16-byte loads their rows kept in registers spill 16
// bytes at the 64 registers that hold 4 CTAs an SM, and the f32 form ran at 0.70 of copy against 0.77
// (docs/perf/2026-12-04-s12-qwen3-step.md).
template <typename T, int V>
__device__ __forceinline__ void ew_unpack_elems(const typename EwRaw<T, V>::type& raw, float (&v)[V]) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int j = 0; j < V; ++j) v[j] = ew_to_f32(e[j]);
}

template <typename T, int V>
__device__ __forceinline__ typename EwRaw<T, V>::type ew_pack(const float (&v)[V]) {
  typename EwRaw<T, V>::type raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int j = 0; j < V; ++j) ew_from_f32(v[j], &e[j]);
  return raw;
}

// Loads V elements at p (aligned to the whole vector, which the kernels check before they take a
// vector path) as f32; ELEMS through ew_unpack_elems.
template <int V, typename T, bool ELEMS = false>
__device__ __forceinline__ void ew_load(const T* p, float (&v)[V]) {
  if constexpr (ELEMS)
    ew_unpack_elems<T, V>(*reinterpret_cast<const typename EwRaw<T, V>::type*>(p), v);
  else
    ew_unpack<T, V>(*reinterpret_cast<const typename EwRaw<T, V>::type*>(p), v);
}

template <int V, typename T>
__device__ __forceinline__ void ew_store(T* p, const float (&v)[V]) {
  *reinterpret_cast<typename EwRaw<T, V>::type*>(p) = ew_pack<T, V>(v);
}

__device__ __forceinline__ bool ew_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
__device__ __forceinline__ bool ew_aligned8(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 7u) == 0; }

__device__ __forceinline__ float ew_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The sum of `v` over the block (blockDim.x a multiple of 32, at most 1024), in every thread. `red` is 32
// floats of shared memory; the leading barrier keeps a previous call's readers ahead of this call's
// writers, so one buffer serves every row a CTA walks.
__device__ __forceinline__ float ew_block_sum(float v, float* red) {
  v = ew_warp_sum(v);
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  return ew_warp_sum(lane < (blockDim.x >> 5) ? red[lane] : 0.0f);
}
