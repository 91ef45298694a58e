// RoPE over x [tokens, heads, dim] with explicit tables cos, sin [tokens, dim / 2] (f32, the token's
// position's angles: table row t holds cos(p_t * theta^(-2i/dim)) for i < dim / 2). The "rotate_half"
// pairing of Qwen / Hugging Face: element i pairs with i + dim / 2,
//   y[i]         = x[i] * cos[i] - x[i + dim/2] * sin[i]
//   y[i + dim/2] = x[i + dim/2] * cos[i] + x[i] * sin[i]        (i < dim / 2).
// With NORM (Qwen3's QK-norm) each head's row is first RMS-normalised over its dim values with the
// weight w [dim]: x <- x * rsqrt(mean(x^2) + eps) * w, then rotated; without it w and eps are not read.
//
// One warp per (token, head) row, grid-stride; each lane takes V = 4 elements of each half per step
// (16-byte f32 or 8-byte bf16 loads, 16-byte table loads) and keeps up to ROPE_ITEMS steps in registers
// for the norm (a row of dim <= 1024), reading wider rows again. The vector path needs dim % 8 == 0 and
// x, y, cos, sin, w aligned to their vectors; the kernel checks and takes the scalar path otherwise.
// dim is even (the library refuses odd ones).
//
// block: a multiple of 32 (the library uses 256: eight rows per CTA).
#pragma once
#include "common.cuh"

constexpr int ROPE_ITEMS = 4;

template <typename T, bool NORM, int V>
__device__ __forceinline__ void rope_rows(const T* x, const T* __restrict__ w, const float* __restrict__ cs,
                                          const float* __restrict__ sn, T* y, uint32_t tokens, uint32_t heads,
                                          uint32_t dim, float eps) {
  const uint32_t half = dim / 2, steps = (half / V + 31) / 32;
  const unsigned lane = threadIdx.x & 31u;
  const uint64_t rows = static_cast<uint64_t>(tokens) * heads;
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * (blockDim.x >> 5);
  for (uint64_t r = static_cast<uint64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows;
       r += warps) {
    const T* xr = x + r * dim;
    T* yr = y + r * dim;
    const size_t t = static_cast<size_t>(r / heads) * half;
    float a[ROPE_ITEMS][V], b[ROPE_ITEMS][V];
    float inv = 1.0f;
    if constexpr (NORM) {
      float ss = 0.0f;
      for (uint32_t s = 0; s < steps; ++s) {
        const uint32_t i = (s * 32 + lane) * V;
        if (i < half) {
          float pa[V], pb[V];
          ew_load<V>(xr + i, pa);
          ew_load<V>(xr + half + i, pb);
#pragma unroll
          for (int j = 0; j < V; ++j) ss = fmaf(pa[j], pa[j], fmaf(pb[j], pb[j], ss));
#pragma unroll
          for (int k = 0; k < ROPE_ITEMS; ++k)
            if (k == static_cast<int>(s))
#pragma unroll
              for (int j = 0; j < V; ++j) a[k][j] = pa[j], b[k][j] = pb[j];
        }
      }
      inv = rsqrtf(ew_warp_sum(ss) / static_cast<float>(dim) + eps);
    }
    for (uint32_t s = 0; s < steps; ++s) {
      const uint32_t i = (s * 32 + lane) * V;
      if (i >= half) continue;
      float pa[V], pb[V], c[V], sv[V];
      if (NORM && s < ROPE_ITEMS) {
#pragma unroll
        for (int k = 0; k < ROPE_ITEMS; ++k)
          if (k == static_cast<int>(s))
#pragma unroll
            for (int j = 0; j < V; ++j) pa[j] = a[k][j], pb[j] = b[k][j];
      } else {
        ew_load<V>(xr + i, pa);
        ew_load<V>(xr + half + i, pb);
      }
      if constexpr (NORM) {
        float wa[V], wb[V];
        ew_load<V>(w + i, wa);
        ew_load<V>(w + half + i, wb);
#pragma unroll
        for (int j = 0; j < V; ++j) pa[j] = pa[j] * inv * wa[j], pb[j] = pb[j] * inv * wb[j];
      }
      ew_load<V>(cs + t + i, c);
      ew_load<V>(sn + t + i, sv);
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

template <typename T, bool NORM>
__device__ __forceinline__ void rope(const T* x, const T* w, const float* cs, const float* sn, T* y,
                                     uint32_t tokens, uint32_t heads, uint32_t dim, float eps) {
  constexpr int V = 4;
  const bool vec = dim % (2 * V) == 0 && ew_aligned16(cs) && ew_aligned16(sn) &&
                   (sizeof(T) == 4 ? ew_aligned16(x) && ew_aligned16(y) && (!NORM || ew_aligned16(w))
                                   : ew_aligned8(x) && ew_aligned8(y) && (!NORM || ew_aligned8(w)));
  if (vec)
    rope_rows<T, NORM, V>(x, w, cs, sn, y, tokens, heads, dim, eps);
  else
    rope_rows<T, NORM, 1>(x, w, cs, sn, y, tokens, heads, dim, eps);
}

// (x, w, cos, sin, y, tokens, heads, dim, eps): w and eps are read by the norm forms only.
#define OMEGA_ROPE_ENTRY(NAME, T, NORM)                                                                     \
  extern "C" __global__ void __launch_bounds__(256) NAME(const T* x, const T* w, const float* cs,           \
                                                         const float* sn, T* y, uint32_t tokens,             \
                                                         uint32_t heads, uint32_t dim, float eps) {          \
    rope<T, NORM>(x, w, cs, sn, y, tokens, heads, dim, eps);                                                 \
  }
OMEGA_ROPE_ENTRY(omega_rope_f32, float, false)
OMEGA_ROPE_ENTRY(omega_rope_bf16, uint16_t, false)
OMEGA_ROPE_ENTRY(omega_norm_rope_f32, float, true)
OMEGA_ROPE_ENTRY(omega_norm_rope_bf16, uint16_t, true)
