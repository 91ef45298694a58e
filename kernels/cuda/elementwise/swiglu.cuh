// SwiGLU: y[r, c] = silu(g[r, c]) * u[r, c] with silu(g) = g / (1 + e^-g), over rows x cols. Row r of the
// gate starts at gate + r * in_stride, of up at up + r * in_stride, of y at y + r * cols: the plain form
// passes in_stride = cols; the fused one reads the gate+up projection's output [rows, 2 * cols] (gate
// columns first, then up) with up = gate + cols and in_stride = 2 * cols.
//
// omega_swiglu_f32_bf16 reads f32 and stores bf16 (nearest even): the MoE's f32 gate+up output becomes
// the down product's bf16 input in one launch, rounded where a cast after the f32 kernel would round.
//
// Grid-stride in both directions: blockIdx.x walks a row's column chunks of blockDim.x * V, blockIdx.y
// the rows. The vector path (16-byte loads: 4 f32 or 8 bf16) needs cols and in_stride multiples of V,
// gate and up 16-byte aligned and y aligned to its V elements (16 bytes, or 8 for f32 -> bf16); the kernel
// checks and takes the scalar path otherwise.
//
// silu is silu.cuh's (its fast quotient is what lets the kernel fit 8 CTAs an SM).
//
// block: 256 (`__launch_bounds__(256, 8)`).
#pragma once
#include "common.cuh"
#include "silu.cuh"

template <typename T, typename Y, int V>
__device__ __forceinline__ void swiglu_rows(const T* __restrict__ g, const T* __restrict__ u, Y* __restrict__ y,
                                            uint32_t rows, uint32_t cols, uint32_t in_stride) {
  const uint32_t step = gridDim.x * blockDim.x * V;
  for (uint32_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const size_t in = static_cast<size_t>(r) * in_stride, out = static_cast<size_t>(r) * cols;
    for (uint32_t c = (blockIdx.x * blockDim.x + threadIdx.x) * V; c < cols; c += step) {
      float gv[V], uv[V];
      ew_load<V>(g + in + c, gv);
      ew_load<V>(u + in + c, uv);
#pragma unroll
      for (int j = 0; j < V; ++j) gv[j] = omega_silu(gv[j]) * uv[j];
      ew_store<V>(y + out + c, gv);
    }
  }
}

template <typename T, typename Y>
__device__ __forceinline__ void swiglu(const T* g, const T* u, Y* y, uint32_t rows, uint32_t cols,
                                       uint32_t in_stride) {
  constexpr int V = 16 / sizeof(T);
  const bool y_aligned = V * sizeof(Y) == 16 ? ew_aligned16(y) : ew_aligned8(y);
  const bool vec = cols % V == 0 && in_stride % V == 0 && ew_aligned16(g) && ew_aligned16(u) && y_aligned;
  if (vec)
    swiglu_rows<T, Y, V>(g, u, y, rows, cols, in_stride);
  else
    swiglu_rows<T, Y, 1>(g, u, y, rows, cols, in_stride);
}

// (gate, up, y, rows, cols, in_stride).
#define OMEGA_SWIGLU_ENTRY(NAME, T, Y)                                                                      \
  extern "C" __global__ void __launch_bounds__(256, 8)                                                      \
      NAME(const T* g, const T* u, Y* y, uint32_t rows, uint32_t cols, uint32_t in_stride) {                 \
    swiglu<T, Y>(g, u, y, rows, cols, in_stride);                                                            \
  }
OMEGA_SWIGLU_ENTRY(omega_swiglu_f32, float, float)
OMEGA_SWIGLU_ENTRY(omega_swiglu_bf16, uint16_t, uint16_t)
OMEGA_SWIGLU_ENTRY(omega_swiglu_f32_bf16, float, uint16_t)

// The benchmarks' bandwidth denominator: dst[i] = src[i] for n 16-byte words, grid-stride, the same
// 16-byte loads and stores as the kernels above. block: any (the library uses 256).
extern "C" __global__ void __launch_bounds__(256) omega_ew_copy16(const uint4* __restrict__ src,
                                                                  uint4* __restrict__ dst, uint64_t n) {
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}
