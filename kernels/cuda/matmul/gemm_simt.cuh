// SIMT GEMM for any shape: y[M,N] (f32) = x[M,K] . W[N,K]^T with f32 multiply-adds (no TF32), operands
// f32 or bf16 (widened to f32 exactly), accumulation in f32.
//
// It is the f32 path, and the bf16 path for shapes the tensor-core kernels cannot take (K not a multiple
// of 8, so rows are not 16-byte aligned for TMA, or unaligned pointers). Every load is a bounds-checked
// scalar, so any M, N, K >= 1 and any alignment works; out-of-range elements read as zero.
//
// Tile: 128 x 128 outputs per 256-thread CTA over K slices of 16, each thread an 8 x 8 block (rows
// ty*4 + {0..3} and 64 + ty*4 + {0..3}, columns likewise from tx, so a warp's shared-memory reads hit
// distinct banks), the next slice loaded into registers while the current one is multiplied (two
// shared-memory buffers, one barrier per slice). Both operands are K-major, so each is stored transposed
// ([k][row]) for the outer products.
#pragma once
#include <stdint.h>

#define SIMT_BM 128
#define SIMT_BN 128
#define SIMT_BK 16
#define SIMT_THREADS 256

namespace omega_simt {

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(uint16_t v) { return __uint_as_float(static_cast<uint32_t>(v) << 16); }

// Thread t loads, for each of 8 rows r = t / 16 + 16 * i of a 128-row tile, the element at K offset t % 16:
// consecutive threads read consecutive K, 64 bytes per row and operand.
template <typename T>
__device__ __forceinline__ void load_tile(const T* __restrict__ src, uint32_t rows, uint32_t K, uint32_t row0,
                                          uint32_t k0, float (&v)[8]) {
  const uint32_t t = threadIdx.x;
  const uint32_t k = k0 + t % 16;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t r = row0 + t / 16 + 16 * i;
    v[i] = (r < rows && k < K) ? widen(__ldg(&src[(size_t)r * K + k])) : 0.f;
  }
}

__device__ __forceinline__ void store_tile(float (*dst)[SIMT_BM], const float (&v)[8]) {
  const uint32_t t = threadIdx.x;
#pragma unroll
  for (int i = 0; i < 8; ++i) dst[t % 16][t / 16 + 16 * i] = v[i];
}

}  // namespace omega_simt

// grid (ceil(N / 128), ceil(M / 128)), block 256.
template <typename T>
__device__ __forceinline__ void gemm_simt_tn(const T* __restrict__ x, const T* __restrict__ w, float* __restrict__ y,
                                             uint32_t M, uint32_t N, uint32_t K) {
  using namespace omega_simt;
  __shared__ __align__(16) float xs[2][SIMT_BK][SIMT_BM];
  __shared__ __align__(16) float ws[2][SIMT_BK][SIMT_BN];
  const uint32_t m0 = blockIdx.y * SIMT_BM, n0 = blockIdx.x * SIMT_BN;
  const uint32_t tx = threadIdx.x % 16, ty = threadIdx.x / 16;

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

  float xv[8], wv[8];
  load_tile(x, M, K, m0, 0, xv);
  load_tile(w, N, K, n0, 0, wv);
  store_tile(xs[0], xv);
  store_tile(ws[0], wv);
  __syncthreads();

  const uint32_t slices = (K + SIMT_BK - 1) / SIMT_BK;
  for (uint32_t s = 0; s < slices; ++s) {
    const uint32_t cur = s & 1;
    const bool more = s + 1 < slices;
    if (more) {
      load_tile(x, M, K, m0, (s + 1) * SIMT_BK, xv);
      load_tile(w, N, K, n0, (s + 1) * SIMT_BK, wv);
    }
#pragma unroll
    for (int kk = 0; kk < SIMT_BK; ++kk) {
      float a[8], b[8];
      const float4 a0 = *reinterpret_cast<const float4*>(&xs[cur][kk][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&xs[cur][kk][64 + ty * 4]);
      const float4 b0 = *reinterpret_cast<const float4*>(&ws[cur][kk][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4*>(&ws[cur][kk][64 + tx * 4]);
      a[0] = a0.x; a[1] = a0.y; a[2] = a0.z; a[3] = a0.w; a[4] = a1.x; a[5] = a1.y; a[6] = a1.z; a[7] = a1.w;
      b[0] = b0.x; b[1] = b0.y; b[2] = b0.z; b[3] = b0.w; b[4] = b1.x; b[5] = b1.y; b[6] = b1.z; b[7] = b1.w;
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    if (more) {
      // The other buffer was last read before the previous slice's barrier, so it is free to fill.
      store_tile(xs[cur ^ 1], xv);
      store_tile(ws[cur ^ 1], wv);
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t m = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t n = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + (j - 4));
      if (n < N) y[(size_t)m * N + n] = acc[i][j];
    }
  }
}

extern "C" __global__ void __launch_bounds__(SIMT_THREADS) omega_gemm_f32_tn(const float* x, const float* w, float* y,
                                                                            uint32_t M, uint32_t N, uint32_t K) {
  gemm_simt_tn<float>(x, w, y, M, N, K);
}

extern "C" __global__ void __launch_bounds__(SIMT_THREADS) omega_gemm_bf16_simt_tn(const uint16_t* x, const uint16_t* w,
                                                                                  float* y, uint32_t M, uint32_t N,
                                                                                  uint32_t K) {
  gemm_simt_tn<uint16_t>(x, w, y, M, N, K);
}
