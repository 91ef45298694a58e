// RMSNorm over the rows of x [rows, cols]: y = x * rsqrt(mean(x^2) + eps) * w, w [cols]; with ADD the
// residual form: h = x + h (h [rows, cols], updated in place), y = rmsnorm(h) * w.
//
// One CTA per row, grid-stride over the rows (the grid is sized for the SMs, not the rows). Each thread
// keeps its part of the row in registers (RmsCfg::ITEMS = 2 vectors of 16 bytes, kept packed as T)
// between the sum of squares and the scaling, so each byte of x (and h) is read once; a row wider than
// blockDim.x * ITEMS vectors (8192 f32 or 16384 bf16 columns at 1024 threads) is read again for the
// scaling. Two vectors a thread in bf16 as in f32: one (a 4 KiB row at 256 threads) left an SM half the
// bytes in flight of f32 and held the kernel to 0.75 of copy. 32 registers a thread (no
// spills, `__launch_bounds__(1024, 2)`), so an SM holds 2048 threads of it: every thread's loads in
// flight at once. The vector path (16-byte loads: 4 f32 or 8 bf16) needs cols % V == 0 and every
// pointer 16-byte aligned; the kernel checks and takes the scalar path otherwise.
//
// block: a multiple of 32, at most 1024 (the library picks ceil(cols / (V * ITEMS)) rounded up to a warp).
#pragma once
#include "common.cuh"

template <typename T> struct RmsCfg;
template <> struct RmsCfg<float> { static constexpr int V = 4, ITEMS = 2; };
template <> struct RmsCfg<uint16_t> { static constexpr int V = 8, ITEMS = 2; };

template <typename T, bool ADD, int V, int ITEMS>
__device__ __forceinline__ void rmsnorm_rows(const T* __restrict__ x, T* h, const T* __restrict__ w, T* y,
                                             uint32_t rows, uint32_t cols, float eps, float* red) {
  const uint32_t nv = cols / V, per_pass = blockDim.x * ITEMS;
  const bool cached = nv <= per_pass;
  for (uint32_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const size_t base = static_cast<size_t>(r) * cols;
    // The row's part as T (bf16 packed two to a register), widened again for the scaling: rounding
    // to T loses nothing (x is T; with ADD the sum is rounded to T before it is normalised).
    typename EwRaw<T, V>::type keep[ITEMS];
    // A row the registers hold has its weights fetched into L1 before the reduction, not after it: at
    // decode the launch is one block, latency-bound, and the weights' load was a dependent trip to memory
    // of its own. (Holding them in registers spills at the 32 registers that keep 2048 threads an SM.)
    if (cached) {
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) {
        const uint32_t k = i * blockDim.x + threadIdx.x;
        if (k < nv) asm volatile("prefetch.global.L1 [%0];" ::"l"(w + static_cast<size_t>(k) * V));
      }
    }
    float ss = 0.0f;
    for (uint32_t p0 = 0; p0 < nv; p0 += per_pass) {
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) {
        const uint32_t k = p0 + i * blockDim.x + threadIdx.x;
        if (k < nv) {
          const size_t at = base + static_cast<size_t>(k) * V;
          float v[V];
          ew_load<V>(x + at, v);
          if constexpr (ADD) {
            float hv[V];
            ew_load<V>(h + at, hv);
#pragma unroll
            for (int j = 0; j < V; ++j) v[j] = ew_round<T>(v[j] + hv[j]);
            ew_store<V>(h + at, v);
          }
#pragma unroll
          for (int j = 0; j < V; ++j) ss = fmaf(v[j], v[j], ss);
          keep[i] = ew_pack<T, V>(v);
        }
      }
    }
    const float inv = rsqrtf(ew_block_sum(ss, red) / static_cast<float>(cols) + eps);
    if (cached) {
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) {
        const uint32_t k = i * blockDim.x + threadIdx.x;
        if (k < nv) {
          float v[V], wv[V];
          ew_unpack<T, V>(keep[i], v);
          ew_load<V>(w + static_cast<size_t>(k) * V, wv);
#pragma unroll
          for (int j = 0; j < V; ++j) v[j] = v[j] * inv * wv[j];
          ew_store<V>(y + base + static_cast<size_t>(k) * V, v);
        }
      }
    } else {
      // Each thread reads back only the vectors it loaded (and, with ADD, stored) itself.
      for (uint32_t k = threadIdx.x; k < nv; k += blockDim.x) {
        const size_t at = base + static_cast<size_t>(k) * V;
        float xv[V], wv[V];
        ew_load<V>(ADD ? static_cast<const T*>(h) + at : x + at, xv);
        ew_load<V>(w + static_cast<size_t>(k) * V, wv);
#pragma unroll
        for (int j = 0; j < V; ++j) xv[j] = xv[j] * inv * wv[j];
        ew_store<V>(y + at, xv);
      }
    }
  }
}

template <typename T, bool ADD>
__device__ __forceinline__ void rmsnorm(const T* x, T* h, const T* w, T* y, uint32_t rows, uint32_t cols,
                                        float eps) {
  __shared__ float red[32];
  constexpr int V = RmsCfg<T>::V, ITEMS = RmsCfg<T>::ITEMS;
  const bool vec = cols % V == 0 && ew_aligned16(x) && ew_aligned16(w) && ew_aligned16(y) &&
                   (!ADD || ew_aligned16(h));
  if (vec)
    rmsnorm_rows<T, ADD, V, ITEMS>(x, h, w, y, rows, cols, eps, red);
  else
    rmsnorm_rows<T, ADD, 1, ITEMS * V>(x, h, w, y, rows, cols, eps, red);
}

// The warp-per-row form, for many rows of at most RMS_WARP_COLS columns (the library takes it at
// 16384 tokens, where the one-CTA-per-row form above reached 0.72 (f32) and 0.55 (bf16) of copy while its
// residual form, with twice a row's bytes in flight between the same barriers, reached 0.97): each warp
// owns whole rows (warp w of the grid takes rows w, w + warps in the grid, ...), a lane keeps the vectors
// lane, lane + 32, ... of its row in registers, and the row's sum is a warp's shuffles, with no block
// barrier between one row's loads and the next's. 32 warps an SM keep a row's 8 KiB (f32) or 4 KiB (bf16)
// each in flight. The vector path only: a row past RMS_WARP_COLS, cols % V != 0 or a pointer off 16
// bytes takes the block form above (the library does not send those here).
template <typename T> struct RmsWarpCfg;
template <> struct RmsWarpCfg<float> { static constexpr int V = 4, ITEMS = 16; };
template <> struct RmsWarpCfg<uint16_t> { static constexpr int V = 8, ITEMS = 8; };
#define RMS_WARP_COLS 2048

// A lane's vectors lane, lane + 32, ... (those below nv) of the row at `row`, as loaded.
template <typename T, int V, int ITEMS>
__device__ __forceinline__ void rms_warp_load(const T* row, uint32_t lane, uint32_t nv,
                                              typename EwRaw<T, V>::type (&raw)[ITEMS]) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const uint32_t k = lane + 32 * i;
    if (k < nv) raw[i] = *reinterpret_cast<const typename EwRaw<T, V>::type*>(row + static_cast<size_t>(k) * V);
  }
}

// 1 / RMS of the row a warp holds in `keep` (a lane's vectors lane, lane + 32, ... below nv), + eps.
template <typename T, int V, int ITEMS>
__device__ __forceinline__ float rms_warp_inv(const typename EwRaw<T, V>::type (&keep)[ITEMS], uint32_t lane,
                                              uint32_t nv, uint32_t cols, float eps) {
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    if (lane + 32 * i < nv) {
      float v[V];
      ew_unpack<T, V>(keep[i], v);
#pragma unroll
      for (int j = 0; j < V; ++j) ss = fmaf(v[j], v[j], ss);
    }
  }
  return rsqrtf(ew_warp_sum(ss) / static_cast<float>(cols) + eps);
}

// y_row = keep * inv * w for the row a warp holds; `weight(i, k, wv)` gives the lane's i-th vector of w
// (vector k of the row) as floats.
template <typename T, int V, int ITEMS, typename W>
__device__ __forceinline__ void rms_warp_scale_store(const typename EwRaw<T, V>::type (&keep)[ITEMS], float inv,
                                                     uint32_t lane, uint32_t nv, T* y_row, W&& weight) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const uint32_t k = lane + 32 * i;
    if (k < nv) {
      float v[V], wv[V];
      ew_unpack<T, V>(keep[i], v);
      weight(i, k, wv);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = v[j] * inv * wv[j];
      ew_store<V>(y_row + static_cast<size_t>(k) * V, v);
    }
  }
}

template <typename T, bool ADD>
__device__ __forceinline__ void rmsnorm_warp_rows(const T* __restrict__ x, T* h, const T* __restrict__ w, T* y,
                                                  uint32_t rows, uint32_t cols, float eps) {
  constexpr int V = RmsWarpCfg<T>::V, ITEMS = RmsWarpCfg<T>::ITEMS;
  static_assert(32 * V * ITEMS == RMS_WARP_COLS, "a warp's registers hold a whole row");
  const uint32_t lane = threadIdx.x % 32, warps = blockDim.x / 32, nv = cols / V;
  for (uint32_t r = blockIdx.x * warps + threadIdx.x / 32; r < rows; r += gridDim.x * warps) {
    const size_t base = static_cast<size_t>(r) * cols;
    typename EwRaw<T, V>::type keep[ITEMS];
    // Every load of the row first (x and, with ADD, h: the stores into h below may alias neither), so a
    // lane has all its vectors in flight at once.
    rms_warp_load<T, V, ITEMS>(x + base, lane, nv, keep);
    if constexpr (ADD) {
      typename EwRaw<T, V>::type res[ITEMS];
      rms_warp_load<T, V, ITEMS>(h + base, lane, nv, res);
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) {
        const uint32_t k = lane + 32 * i;
        if (k < nv) {
          float v[V], hv[V];
          ew_unpack<T, V>(keep[i], v);
          ew_unpack<T, V>(res[i], hv);
#pragma unroll
          for (int j = 0; j < V; ++j) v[j] = ew_round<T>(v[j] + hv[j]);
          keep[i] = ew_pack<T, V>(v);
          *reinterpret_cast<typename EwRaw<T, V>::type*>(h + base + static_cast<size_t>(k) * V) = keep[i];
        }
      }
    }
    const float inv = rms_warp_inv<T, V, ITEMS>(keep, lane, nv, cols, eps);
    rms_warp_scale_store<T, V, ITEMS>(keep, inv, lane, nv, y + base, [&](int, uint32_t k, float (&wv)[V]) {
      ew_load<V>(w + static_cast<size_t>(k) * V, wv);
    });
  }
}

template <typename T, bool ADD>
__device__ __forceinline__ void rmsnorm_warp(const T* x, T* h, const T* w, T* y, uint32_t rows, uint32_t cols,
                                             float eps) {
  constexpr int V = RmsWarpCfg<T>::V;
  const bool vec = cols % V == 0 && cols <= RMS_WARP_COLS && ew_aligned16(x) && ew_aligned16(w) &&
                   ew_aligned16(y) && (!ADD || ew_aligned16(h));
  if (vec)
    rmsnorm_warp_rows<T, ADD>(x, h, w, y, rows, cols, eps);
  else
    rmsnorm<T, ADD>(x, h, w, y, rows, cols, eps);
}

// (x, h, w, y, rows, cols, eps): h is not read by the plain forms.
#define OMEGA_RMSNORM_ENTRY(NAME, T, ADD)                                                                   \
  extern "C" __global__ void __launch_bounds__(1024, 2)                                                     \
      NAME(const T* x, T* h, const T* w, T* y, uint32_t rows, uint32_t cols, float eps) {                  \
    rmsnorm<T, ADD>(x, h, w, y, rows, cols, eps);                                                            \
  }
OMEGA_RMSNORM_ENTRY(omega_rmsnorm_f32, float, false)
OMEGA_RMSNORM_ENTRY(omega_rmsnorm_bf16, uint16_t, false)
OMEGA_RMSNORM_ENTRY(omega_add_rmsnorm_f32, float, true)
OMEGA_RMSNORM_ENTRY(omega_add_rmsnorm_bf16, uint16_t, true)

// The warp-per-row entries: the same parameters; block a multiple of 32 (the library: 256), any grid. No
// f32 residual form: its x and h rows (128 registers) spill, and the block form already reaches 0.97.
#define OMEGA_RMSNORM_WARP_ENTRY(NAME, T, ADD)                                                              \
  extern "C" __global__ void __launch_bounds__(256, 2)                                                      \
      NAME(const T* x, T* h, const T* w, T* y, uint32_t rows, uint32_t cols, float eps) {                  \
    rmsnorm_warp<T, ADD>(x, h, w, y, rows, cols, eps);                                                       \
  }
OMEGA_RMSNORM_WARP_ENTRY(omega_rmsnorm_warp_f32, float, false)
OMEGA_RMSNORM_WARP_ENTRY(omega_rmsnorm_warp_bf16, uint16_t, false)
OMEGA_RMSNORM_WARP_ENTRY(omega_add_rmsnorm_warp_bf16, uint16_t, true)
