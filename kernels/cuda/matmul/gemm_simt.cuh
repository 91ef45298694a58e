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
// shared-memory buffers, one barrier per slice), two CTAs per SM. Both operands are K-major, so each is
// stored transposed ([k][row], rows padded by 4 so the transposing stores spread over the banks).
//
// Loads: when every row starts 16-byte aligned (K a multiple of 16 bytes' worth of elements and both base
// pointers aligned, decided once per launch), each thread loads two 16-byte vectors per operand and slice;
// otherwise eight bounds-checked scalars.
#pragma once
#include <stdint.h>

#define SIMT_BM 128
#define SIMT_BN 128
#define SIMT_BK 16
#define SIMT_THREADS 256
#define SIMT_PAD 4

namespace omega_simt {

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(uint16_t v) { return __uint_as_float(static_cast<uint32_t>(v) << 16); }

template <typename T>
struct Vec16;  // 16 bytes of T
template <>
struct Vec16<float> {
  static constexpr int N = 4;
};
template <>
struct Vec16<uint16_t> {
  static constexpr int N = 8;
};

// The scalar path: thread t loads, for each of 8 rows r = t / 16 + 16 * i of a 128-row tile, the element
// at K offset t % 16 (consecutive threads read consecutive K, 64 bytes per row and operand).
template <typename T>
__device__ __forceinline__ void load_scalar(const T* __restrict__ src, uint32_t rows, uint32_t K, uint32_t row0,
                                            uint32_t k0, float (&v)[8]) {
  const uint32_t t = threadIdx.x;
  const uint32_t k = k0 + t % 16;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t r = row0 + t / 16 + 16 * i;
    v[i] = (r < rows && k < K) ? widen(__ldg(&src[(size_t)r * K + k])) : 0.f;
  }
}

__device__ __forceinline__ void store_scalar(float (*dst)[SIMT_BM + SIMT_PAD], const float (&v)[8]) {
  const uint32_t t = threadIdx.x;
#pragma unroll
  for (int i = 0; i < 8; ++i) dst[t % 16][t / 16 + 16 * i] = v[i];
}

// The vector path, f32: the slice is 128 rows x 4 vectors of 4; thread t takes vectors t and t + 256
// (row f / 4, K offset 4 * (f % 4)). Rows are whole vectors (K % 4 == 0), so a vector is in or out.
__device__ __forceinline__ void load_vec(const float* __restrict__ src, uint32_t rows, uint32_t K, uint32_t row0,
                                         uint32_t k0, float (&v)[8]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint32_t f = threadIdx.x + 256 * i;
    const uint32_t r = row0 + f / 4, k = k0 + 4 * (f % 4);
    float4 q = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < rows && k < K) q = __ldg(reinterpret_cast<const float4*>(&src[(size_t)r * K + k]));
    v[4 * i] = q.x;
    v[4 * i + 1] = q.y;
    v[4 * i + 2] = q.z;
    v[4 * i + 3] = q.w;
  }
}

// bf16: the slice is 128 rows x 2 vectors of 8; thread t takes vector t (row t / 2, K offset 8 * (t % 2)).
__device__ __forceinline__ void load_vec(const uint16_t* __restrict__ src, uint32_t rows, uint32_t K, uint32_t row0,
                                         uint32_t k0, float (&v)[8]) {
  const uint32_t r = row0 + threadIdx.x / 2, k = k0 + 8 * (threadIdx.x % 2);
  uint4 q = make_uint4(0, 0, 0, 0);
  if (r < rows && k < K) q = __ldg(reinterpret_cast<const uint4*>(&src[(size_t)r * K + k]));
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(w[i] << 16);
    v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ void store_vec(float* /* f32 */, float (*dst)[SIMT_BM + SIMT_PAD], const float (&v)[8]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint32_t f = threadIdx.x + 256 * i;
#pragma unroll
    for (int j = 0; j < 4; ++j) dst[4 * (f % 4) + j][f / 4] = v[4 * i + j];
  }
}

__device__ __forceinline__ void store_vec(uint16_t* /* bf16 */, float (*dst)[SIMT_BM + SIMT_PAD], const float (&v)[8]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) dst[8 * (threadIdx.x % 2) + j][threadIdx.x / 2] = v[j];
}

}  // namespace omega_simt

// grid (ceil(N / 128), ceil(M / 128)), block 256.
template <typename T>
__device__ __forceinline__ void gemm_simt_tn(const T* __restrict__ x, const T* __restrict__ w, float* __restrict__ y,
                                             uint32_t M, uint32_t N, uint32_t K) {
  using namespace omega_simt;
  __shared__ __align__(16) float xs[2][SIMT_BK][SIMT_BM + SIMT_PAD];
  __shared__ __align__(16) float ws[2][SIMT_BK][SIMT_BN + SIMT_PAD];
  // One choice per launch, so every thread takes the same path.
  const bool vec = K % Vec16<T>::N == 0 && (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w)) % 16 == 0;
  const uint32_t m0 = blockIdx.y * SIMT_BM, n0 = blockIdx.x * SIMT_BN;
  const uint32_t tx = threadIdx.x % 16, ty = threadIdx.x / 16;

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

  float xv[8], wv[8];
  auto load = [&](uint32_t k0) {
    if (vec) {
      load_vec(x, M, K, m0, k0, xv);
      load_vec(w, N, K, n0, k0, wv);
    } else {
      load_scalar(x, M, K, m0, k0, xv);
      load_scalar(w, N, K, n0, k0, wv);
    }
  };
  auto store = [&](uint32_t buf) {
    if (vec) {
      store_vec(static_cast<T*>(nullptr), xs[buf], xv);
      store_vec(static_cast<T*>(nullptr), ws[buf], wv);
    } else {
      store_scalar(xs[buf], xv);
      store_scalar(ws[buf], wv);
    }
  };
  load(0);
  store(0);
  __syncthreads();

  const uint32_t slices = (K + SIMT_BK - 1) / SIMT_BK;
  for (uint32_t s = 0; s < slices; ++s) {
    const uint32_t cur = s & 1;
    const bool more = s + 1 < slices;
    if (more) load((s + 1) * SIMT_BK);
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
    // The other buffer was last read before the previous slice's barrier, so it is free to fill.
    if (more) store(cur ^ 1);
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

extern "C" __global__ void __launch_bounds__(SIMT_THREADS, 2) omega_gemm_f32_tn(const float* x, const float* w, float* y,
                                                                            uint32_t M, uint32_t N, uint32_t K) {
  gemm_simt_tn<float>(x, w, y, M, N, K);
}

extern "C" __global__ void __launch_bounds__(SIMT_THREADS, 2) omega_gemm_bf16_simt_tn(const uint16_t* x, const uint16_t* w,
                                                                                  float* y, uint32_t M, uint32_t N,
                                                                                  uint32_t K) {
  gemm_simt_tn<uint16_t>(x, w, y, M, N, K);
}
