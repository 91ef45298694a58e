// RoPE over x [tokens, heads, dim] with explicit tables cos, sin [tokens, dim / 2] (f32, the token's
// position's angles: table row t holds cos(p_t * theta^(-2i/dim)) for i < dim / 2). The "rotate_half"
// pairing of Qwen / Hugging Face: element i pairs with i + dim / 2,
//   y[i]         = x[i] * cos[i] - x[i + dim/2] * sin[i]
//   y[i + dim/2] = x[i + dim/2] * cos[i] + x[i] * sin[i]        (i < dim / 2).
// With NORM (Qwen3's QK-norm) each head's row is first RMS-normalised over its dim values with the
// weight w [dim]: x <- x * rsqrt(mean(x^2) + eps) * w, then rotated; without it w and eps are not read.
//
// One row per L lanes of a warp, grid-stride: L the smallest power of two (at most 32) whose lanes cover a
// half-row in V-element steps, so a head dim of 128 takes 16 lanes in f32 and 8 in bf16 and each warp
// carries two or four rows at once (every lane loading). Each lane takes V elements of each half per step
// (16-byte loads: V = 4 f32 or 8 bf16; the tables' V floats in 16-byte loads) and keeps up to ROPE_ITEMS
// steps in registers for the norm, as loaded (rows of dim <= 2 * V * lanes * ROPE_ITEMS, 512 f32 or 1024
// bf16 at 32 lanes, stay resident), reading wider ones again. The vector path needs dim % (2 V) == 0 and
// x, y, cos, sin, w 16-byte aligned; the kernel checks and takes the scalar path otherwise. dim is even
// (the library refuses odd ones).
//
// block: a multiple of 32 (the library uses 256); `__launch_bounds__(256, 4)` keeps the norm form with
// 16-byte bf16 loads at 64 registers without spills (128 unbounded; 5 or 6 CTAs an SM spill 116-256 bytes).
#pragma once
#include "common.cuh"

constexpr int ROPE_ITEMS = 2;

// The sum of `v` over the aligned group of `lanes` lanes (a power of two) this lane belongs to; every lane
// of the warp takes part.
__device__ __forceinline__ float rope_group_sum(float v, uint32_t lanes) {
  for (uint32_t o = lanes / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename T, bool NORM, int V, bool ELEMS = NORM>
__device__ __forceinline__ void rope_rows(const T* x, const T* __restrict__ w, const float* __restrict__ cs,
                                          const float* __restrict__ sn, T* y, uint32_t tokens, uint32_t heads,
                                          uint32_t dim, float eps) {
  const uint32_t half = dim / 2, need = (half + V - 1) / V;
  uint32_t lanes = 32;
  while (lanes > 1 && lanes / 2 >= need) lanes /= 2;
  const uint32_t per_warp = 32 / lanes, steps = (need + lanes - 1) / lanes;
  const unsigned lane = (threadIdx.x & 31u) % lanes, group = (threadIdx.x & 31u) / lanes;
  const uint64_t rows = static_cast<uint64_t>(tokens) * heads;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * (blockDim.x >> 5) * per_warp;
  // The loop is uniform across the warp (the groups' sums shuffle over all 32 lanes): a group past the
  // last row computes nothing and stores nothing.
  for (uint64_t first = (static_cast<uint64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5)) * per_warp;
       first < rows; first += stride) {
    const uint64_t r = first + group;
    const bool live = r < rows;
    const T* xr = x + r * dim;
    T* yr = y + r * dim;
    const size_t t = static_cast<size_t>(r / heads) * half;
    // The row's vectors as loaded (bf16 stays packed, two to a register) between the norm and the rotation.
    using R = typename EwRaw<T, V>::type;
    R a[ROPE_ITEMS], b[ROPE_ITEMS];
    float inv = 1.0f;
    if constexpr (NORM) {
      float ss = 0.0f;
      for (uint32_t s = 0; s < steps; ++s) {
        const uint32_t i = (s * lanes + lane) * V;
        if (live && i < half) {
          const R ra = *reinterpret_cast<const R*>(xr + i), rb = *reinterpret_cast<const R*>(xr + half + i);
          float pa[V], pb[V];
          ELEMS ? ew_unpack_elems<T, V>(ra, pa) : ew_unpack<T, V>(ra, pa);
          ELEMS ? ew_unpack_elems<T, V>(rb, pb) : ew_unpack<T, V>(rb, pb);
#pragma unroll
          for (int j = 0; j < V; ++j) ss = fmaf(pa[j], pa[j], fmaf(pb[j], pb[j], ss));
#pragma unroll
          for (int k = 0; k < ROPE_ITEMS; ++k)
            if (k == static_cast<int>(s)) a[k] = ra, b[k] = rb;
        }
      }
      inv = rsqrtf(rope_group_sum(ss, lanes) / static_cast<float>(dim) + eps);
    }
    if (!live) continue;
    for (uint32_t s = 0; s < steps; ++s) {
      const uint32_t i = (s * lanes + lane) * V;
      if (i >= half) continue;
      float pa[V], pb[V], c[V], sv[V];
      if (NORM && s < ROPE_ITEMS) {
#pragma unroll
        for (int k = 0; k < ROPE_ITEMS; ++k)
          if (k == static_cast<int>(s)) {
            ELEMS ? ew_unpack_elems<T, V>(a[k], pa) : ew_unpack<T, V>(a[k], pa);
            ELEMS ? ew_unpack_elems<T, V>(b[k], pb) : ew_unpack<T, V>(b[k], pb);
          }
      } else {
        ew_load<V, T, ELEMS>(xr + i, pa);
        ew_load<V, T, ELEMS>(xr + half + i, pb);
      }
      if constexpr (NORM) {
        float wa[V], wb[V];
        ew_load<V, T, ELEMS>(w + i, wa);
        ew_load<V, T, ELEMS>(w + half + i, wb);
#pragma unroll
        for (int j = 0; j < V; ++j) pa[j] = pa[j] * inv * wa[j], pb[j] = pb[j] * inv * wb[j];
      }
      ew_load<V, float, ELEMS>(cs + t + i, c);
      ew_load<V, float, ELEMS>(sn + t + i, sv);
      float ya[V], yb[V];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        ya[j] = pa[j] * c[j] - pb[j] * sv[j];
        yb[j] = pb[j] * c[j] + pa[j] * sv[j];
      }
      ew_store<V>(yr + i, ya);
      ew_store<V>(yr + half + i, yb);
    }
  }
}

// The norm form where one V-vector of each half a lane covers the row (dim <= 64 V: 256 f32, 512 bf16;
// Qwen3's 128 in both), for the library where the vector path's conditions hold (dim % (2 V) == 0, every
// pointer 16-byte aligned). Each row's cos and sin load with its x, before the norm's reduction, so a
// row's loads all wait together instead of the tables waiting for the shuffles. An entry of its own
// (omega_norm_rope_whole_*): inline beside rope_rows' loops in one entry, the bf16 form spilled 80 bytes
// at 64 registers; alone neither spills. Measured beside rope_rows in one run on the H100
// (benches/cuda/ew_variants.cu, session 18): 1.128 / 1.133 of cudaMemcpy's copy against 1.008 / 0.983
// (f32 / bf16); two rows a group at a time gained less (1.110 / 1.076) at the same registers.
template <typename T, int V>
__device__ __forceinline__ void norm_rope_rows_whole(const T* x, const T* __restrict__ w,
                                                     const float* __restrict__ cs, const float* __restrict__ sn,
                                                     T* y, uint32_t tokens, uint32_t heads, uint32_t dim,
                                                     float eps) {
  using R = typename EwRaw<T, V>::type;
  const uint32_t half = dim / 2, need = half / V;
  uint32_t lanes = 32;
  while (lanes > 1 && lanes / 2 >= need) lanes /= 2;
  const uint32_t per_warp = 32 / lanes;
  const unsigned lane = (threadIdx.x & 31u) % lanes, group = (threadIdx.x & 31u) / lanes;
  const uint64_t rows = static_cast<uint64_t>(tokens) * heads;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * (blockDim.x >> 5) * per_warp;
  const uint32_t i = lane * V;
  const bool mine = i < half;  // lanes past a half-row that is not a power of two of vectors idle
  // w, every row's, stays in registers in f32; bf16 reads it again a row (an L1 hit): held, its entry
  // spilled 40 bytes at 64 registers.
  constexpr bool HOLD_W = sizeof(T) == 4;
  R wra{}, wrb{};
  if (HOLD_W && mine) wra = *reinterpret_cast<const R*>(w + i), wrb = *reinterpret_cast<const R*>(w + half + i);
  for (uint64_t first = (static_cast<uint64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5)) * per_warp;
       first < rows; first += stride) {
    const uint64_t r = first + group;
    const bool live = r < rows && mine;
    float pa[V], pb[V], c[V], sv[V];
    float ss = 0.0f;
    if (live) {
      const size_t t = static_cast<size_t>(r / heads) * half;
      ew_load<V, T>(x + r * dim + i, pa);
      ew_load<V, T>(x + r * dim + half + i, pb);
      ew_load<V, float>(cs + t + i, c);
      ew_load<V, float>(sn + t + i, sv);
#pragma unroll
      for (int j = 0; j < V; ++j) ss = fmaf(pa[j], pa[j], fmaf(pb[j], pb[j], ss));
    }
    // Uniform across the warp: every lane shuffles, live or not.
    const float inv = rsqrtf(rope_group_sum(ss, lanes) / static_cast<float>(dim) + eps);
    if (!live) continue;
    float wa[V], wb[V], ya[V], yb[V];
    ew_unpack<T, V>(HOLD_W ? wra : *reinterpret_cast<const R*>(w + i), wa);
    ew_unpack<T, V>(HOLD_W ? wrb : *reinterpret_cast<const R*>(w + half + i), wb);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float xa = pa[j] * inv * wa[j], xb = pb[j] * inv * wb[j];
      ya[j] = xa * c[j] - xb * sv[j];
      yb[j] = xb * c[j] + xa * sv[j];
    }
    ew_store<V>(y + r * dim + i, ya);
    ew_store<V>(y + r * dim + half + i, yb);
  }
}

template <typename T, bool NORM>
__device__ __forceinline__ void rope(const T* x, const T* w, const float* cs, const float* sn, T* y,
                                     uint32_t tokens, uint32_t heads, uint32_t dim, float eps) {
  // 16 bytes of x a load: 4 f32 or 8 bf16 (8-byte bf16 loads held the bf16 forms to 0.47-0.82 of copy).
  constexpr int V = 16 / sizeof(T);
  const bool vec = dim % (2 * V) == 0 && ew_aligned16(cs) && ew_aligned16(sn) && ew_aligned16(x) &&
                   ew_aligned16(y) && (!NORM || ew_aligned16(w));
  if (vec)
    rope_rows<T, NORM, V>(x, w, cs, sn, y, tokens, heads, dim, eps);
  else
    rope_rows<T, NORM, 1>(x, w, cs, sn, y, tokens, heads, dim, eps);
}

// (x, w, cos, sin, y, tokens, heads, dim, eps): w and eps are read by the norm forms only.
#define OMEGA_ROPE_ENTRY(NAME, T, NORM)                                                                     \
  extern "C" __global__ void __launch_bounds__(256, 4) NAME(const T* x, const T* w, const float* cs,         \
                                                         const float* sn, T* y, uint32_t tokens,             \
                                                         uint32_t heads, uint32_t dim, float eps) {          \
    rope<T, NORM>(x, w, cs, sn, y, tokens, heads, dim, eps);                                                 \
  }
OMEGA_ROPE_ENTRY(omega_rope_f32, float, false)
OMEGA_ROPE_ENTRY(omega_rope_bf16, uint16_t, false)
OMEGA_ROPE_ENTRY(omega_norm_rope_f32, float, true)
OMEGA_ROPE_ENTRY(omega_norm_rope_bf16, uint16_t, true)

#define OMEGA_NORM_ROPE_WHOLE_ENTRY(NAME, T)                                                                 \
  extern "C" __global__ void __launch_bounds__(256, 4) NAME(const T* x, const T* w, const float* cs,         \
                                                         const float* sn, T* y, uint32_t tokens,             \
                                                         uint32_t heads, uint32_t dim, float eps) {          \
    norm_rope_rows_whole<T, 16 / sizeof(T)>(x, w, cs, sn, y, tokens, heads, dim, eps);                       \
  }
OMEGA_NORM_ROPE_WHOLE_ENTRY(omega_norm_rope_whole_f32, float)
OMEGA_NORM_ROPE_WHOLE_ENTRY(omega_norm_rope_whole_bf16, uint16_t)
