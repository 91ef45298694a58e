// Small-M bf16 GEMM (decode, M = 1..64) for Hopper: y[M,N] (f32) = x[M,K] (bf16) . W[N,K]^T (bf16).
//
// At small M the product is bound by streaming W once from HBM, so the kernel is built around the W
// loads: every SM streams a share of every matrix (N split in 64-row blocks, K split until there are
// enough CTAs to fill 132 SMs a few times over), each thread keeps several 16-byte loads of W in flight,
// and the tensor cores (mma.sync m16n8k16, W rows as the MMA's M side, x rows as its N side) do the
// arithmetic so it never limits the loads.
//
// The K order inside an MMA is free as long as W and x agree on it, so each thread loads 16 contiguous
// bytes (8 K elements) of a W row and of an x row, and the fragments are read straight from those
// registers: for the 32-element K chunk c, thread (g = lane / 4, t = lane % 4) holds W[g][32c + 8t ..+7]
// and W[g + 8][...], and the chunk's two k16 MMAs take elements {0,1,2,3} and {4,5,6,7} of them. x rows
// are read through L1 (they are small and every warp of the CTA reads the same ones).
//
// For M <= 4 (decode) over K slices of at least 1024 each warp streams whole row slices instead
// (gemv_rows_partial below): 512 contiguous bytes per warp instruction, f32 FMA dot products, a shuffle
// reduction per row.
//
// A K split writes partial sums to a workspace; the CTA that finishes a 64-row block last (an atomic
// ticket per block) adds the partials in split order, so the result does not depend on timing.
// Requirements: K % 32 == 0, x and W 16-byte aligned (this path).
#pragma once
#include <stdint.h>

#include "convert.cuh"

#define GEMV_ROWS 64      // W rows per CTA (4 warps x 16)
#define GEMV_THREADS 128
#define GEMV_UNROLL 4     // 32-element K chunks in flight per thread (8 x 16-byte W loads)

namespace omega_gemv {

__device__ __forceinline__ uint4 ldg_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ uint4 ldg_cached(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace omega_gemv

// The row-streaming form for M <= ROWS_MAX_M (decode): each warp takes its 16 W rows two at a time and
// reads each row's K slice contiguously, 512 bytes per warp instruction (lane l at 8 * l + 256 * i), the
// way the DRAM pages lie; each lane keeps M dot products per row in f32, reduced across the warp with
// shuffles at the end of the row. The MMA form reads 16 rows x 64 bytes per instruction, which left
// lm_head's stream at 58% of copy bandwidth (docs/perf/2026-12-02-matmul-bringup.md).
#define ROWS_MAX_M 4
#define ROWS_UNROLL 4

__device__ __forceinline__ void dot8(float& acc, uint4 a, uint4 b) {
  const uint32_t wa[4] = {a.x, a.y, a.z, a.w}, wb[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = fmaf(__uint_as_float(wa[i] << 16), __uint_as_float(wb[i] << 16), acc);
    acc = fmaf(__uint_as_float(wa[i] & 0xffff0000u), __uint_as_float(wb[i] & 0xffff0000u), acc);
  }
}

template <int RP, int RU>
__device__ __forceinline__ void gemv_rows_partial(const uint16_t* __restrict__ x, const uint32_t* __restrict__ x_rows,
                                                  const uint16_t* __restrict__ w, float* __restrict__ out, uint32_t M,
                                                  uint32_t N, uint32_t K, uint32_t k0, uint32_t k1, uint32_t nblock) {
  using namespace omega_gemv;
  static_assert(16 % RP == 0, "a warp's 16 rows go RP at a time");
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint16_t* xr[ROWS_MAX_M];
#pragma unroll
  for (int m = 0; m < ROWS_MAX_M; ++m) {
    const uint32_t r = min((uint32_t)m, M - 1);
    xr[m] = x + (size_t)(x_rows ? x_rows[r] : r) * K;
  }
  for (uint32_t r = 0; r < 16; r += RP) {
    const uint32_t n0 = nblock * GEMV_ROWS + warp * 16 + r;
    if (n0 >= N) break;
    const uint16_t* wr[RP];
    float a[RP][ROWS_MAX_M];
#pragma unroll
    for (int j = 0; j < RP; ++j) wr[j] = w + (size_t)(j == 0 ? n0 : min(n0 + j, N - 1)) * K;
#pragma unroll
    for (int m = 0; m < ROWS_MAX_M; ++m)
#pragma unroll
      for (int j = 0; j < RP; ++j) a[j][m] = 0.f;
    uint32_t k = k0 + 8 * lane;
    for (; k + 256 * (RU - 1) < k1; k += 256 * RU) {
      uint4 p[RP][RU];
#pragma unroll
      for (int u = 0; u < RU; ++u)
#pragma unroll
        for (int j = 0; j < RP; ++j) p[j][u] = ldg_stream(wr[j] + k + 256 * u);
#pragma unroll
      for (int u = 0; u < RU; ++u)
#pragma unroll
        for (int m = 0; m < ROWS_MAX_M; ++m)
          if (m < M) {
            const uint4 b = ldg_cached(xr[m] + k + 256 * u);
#pragma unroll
            for (int j = 0; j < RP; ++j) dot8(a[j][m], p[j][u], b);
          }
    }
    for (; k < k1; k += 256) {
      uint4 p[RP];
#pragma unroll
      for (int j = 0; j < RP; ++j) p[j] = ldg_stream(wr[j] + k);
#pragma unroll
      for (int m = 0; m < ROWS_MAX_M; ++m)
        if (m < M) {
          const uint4 b = ldg_cached(xr[m] + k);
#pragma unroll
          for (int j = 0; j < RP; ++j) dot8(a[j][m], p[j], b);
        }
    }
#pragma unroll
    for (int m = 0; m < ROWS_MAX_M; ++m)
#pragma unroll
      for (int o = 16; o > 0; o /= 2)
#pragma unroll
        for (int j = 0; j < RP; ++j) a[j][m] += __shfl_xor_sync(0xffffffffu, a[j][m], o);
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < ROWS_MAX_M; ++m)
        if (m < M) {
#pragma unroll
          for (int j = 0; j < RP; ++j)
            if (j == 0 || n0 + j < N) out[(size_t)m * N + n0 + j] = a[j][m];
        }
    }
  }
}

// The GEMV's tuning, a class of constants (C++17 takes no struct as a template value): `U` 32-element
// chunks of K a round of the MMA form (2 * U 16-byte W loads a thread), `PIPE` the next round's loads
// issued before this round's MMAs (two rounds in flight), `RP` W rows a round of the row-streaming form
// and `RU` 16-byte loads of each a lane issues a round (RP * RU in flight).
// Each keeps the order of every sum, so every tuning gives the same bits; none of the others measured
// faster beyond the spread of identical code (benches/cuda/gemv_variants.cu,
// docs/perf/2026-12-04-s10-gemv-variants.md).
struct GemvTuned {
  static constexpr int U = GEMV_UNROLL;
  static constexpr bool PIPE = false;
  static constexpr int RP = 2;
  static constexpr int RU = ROWS_UNROLL;
};

// One CTA's share of a group of rows: W rows [64 * nblock, +64) over K slice `s` of `split`, for the M
// rows of x that `x_rows` names (NULL: rows 0..M-1), into rows 0..M-1 of `y` (split == 1) or of slice s
// of `work` (slice stride `work_slice` floats); more than 8 * MB rows are taken 8 * MB at a time, each
// chunk streaming the CTA's W slice again (L2 keeps it for the next chunk). With split > 1 the CTA that
// takes `*ticket` last adds the slices in split order into y and puts the ticket back to zero. With Y16,
// y is bf16 (`uint16_t`, passed as float*): every slice goes to `work`, a split of 1 included, and the last
// CTA stores the rounded sum, so a bf16 product is one launch (no conversion kernel after it).
template <int MB, bool Y16 = false, class T = GemvTuned>
__device__ __forceinline__ void gemv_bf16_group(const uint16_t* __restrict__ x, const uint32_t* __restrict__ x_rows,
                                                const uint16_t* __restrict__ w, float* __restrict__ y,
                                                float* __restrict__ work, uint32_t* __restrict__ ticket, uint32_t M,
                                                uint32_t N, uint32_t K, uint32_t k_per_split, uint32_t nblock,
                                                uint32_t s, uint32_t split, size_t work_slice) {
  using namespace omega_gemv;
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t g = lane / 4, t = lane % 4;
  const uint32_t n_base = nblock * GEMV_ROWS + warp * 16;
  const uint32_t k0 = s * k_per_split;
  const uint32_t k1 = min(K, k0 + k_per_split);
  // Rows past N read row N-1 (any valid row) and are dropped at the store.
  const uint16_t* w_lo = w + (size_t)min(n_base + g, N - 1) * K + 8 * t;
  const uint16_t* w_hi = w + (size_t)min(n_base + g + 8, N - 1) * K + 8 * t;
  float* out = split == 1 && !Y16 ? y : work + (size_t)s * work_slice;

  // Streaming rows pays when each lane has whole 256-element strides to walk; a short K slice (a fine
  // split) leaves it latency-bound (4x1536x2048 with 128-element slices: 139 GB/s), so those take MMAs.
  if (MB == 1 && M <= ROWS_MAX_M && k1 - k0 >= 1024) {
    gemv_rows_partial<T::RP, T::RU>(x, x_rows, w, out, M, N, K, k0, k1, nblock);
  } else
  for (uint32_t m0 = 0; m0 < M; m0 += 8 * MB) {
    const uint16_t* x_row[MB];
    bool x_live[MB];
#pragma unroll
    for (int nb = 0; nb < MB; ++nb) {
      const uint32_t m = m0 + nb * 8 + g;
      x_live[nb] = m < M;
      const uint32_t r = min(m, M - 1);
      x_row[nb] = x + (size_t)(x_rows ? x_rows[r] : r) * K + 8 * t;
    }
    float acc[MB][4];
#pragma unroll
    for (int nb = 0; nb < MB; ++nb) acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.f;

    constexpr int U = T::U;
    uint32_t k = k0;
    if constexpr (T::PIPE) {
      // One round: the MMAs of U chunks from lo / hi at `at` (x read through L1 as they go).
      auto round = [&](const uint4 (&lo)[U], const uint4 (&hi)[U], uint32_t at) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
#pragma unroll
          for (int nb = 0; nb < MB; ++nb) {
            uint4 b = x_live[nb] ? ldg_cached(x_row[nb] + at + 32 * u) : make_uint4(0, 0, 0, 0);
            mma_bf16(acc[nb], lo[u].x, hi[u].x, lo[u].y, hi[u].y, b.x, b.y);
            mma_bf16(acc[nb], lo[u].z, hi[u].z, lo[u].w, hi[u].w, b.z, b.w);
          }
        }
      };
      auto load = [&](uint4 (&lo)[U], uint4 (&hi)[U], uint32_t at) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          lo[u] = ldg_stream(w_lo + at + 32 * u);
          hi[u] = ldg_stream(w_hi + at + 32 * u);
        }
      };
      uint4 lo[U], hi[U];
      bool have = k + 32 * U <= k1;
      if (have) load(lo, hi, k);
      while (have) {
        const uint32_t kn = k + 32 * U;
        const bool next = kn + 32 * U <= k1;
        uint4 nlo[U], nhi[U];
        if (next) load(nlo, nhi, kn);
        round(lo, hi, k);
        if (next) {
#pragma unroll
          for (int u = 0; u < U; ++u) {
            lo[u] = nlo[u];
            hi[u] = nhi[u];
          }
        }
        k = kn;
        have = next;
      }
    } else {
      // Spelled out rather than through the lambdas: this is the library's form, and written so it
      // compiles to the same SASS as before the tuning surface existed (the lambdas' form did not).
      for (; k + 32 * U <= k1; k += 32 * U) {
        uint4 lo[U], hi[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          lo[u] = ldg_stream(w_lo + k + 32 * u);
          hi[u] = ldg_stream(w_hi + k + 32 * u);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
#pragma unroll
          for (int nb = 0; nb < MB; ++nb) {
            uint4 b = x_live[nb] ? ldg_cached(x_row[nb] + k + 32 * u) : make_uint4(0, 0, 0, 0);
            mma_bf16(acc[nb], lo[u].x, hi[u].x, lo[u].y, hi[u].y, b.x, b.y);
            mma_bf16(acc[nb], lo[u].z, hi[u].z, lo[u].w, hi[u].w, b.z, b.w);
          }
        }
      }
    }
    for (; k < k1; k += 32) {
      uint4 lo = ldg_stream(w_lo + k), hi = ldg_stream(w_hi + k);
#pragma unroll
      for (int nb = 0; nb < MB; ++nb) {
        uint4 b = x_live[nb] ? ldg_cached(x_row[nb] + k) : make_uint4(0, 0, 0, 0);
        mma_bf16(acc[nb], lo.x, hi.x, lo.y, hi.y, b.x, b.y);
        mma_bf16(acc[nb], lo.z, hi.z, lo.w, hi.w, b.z, b.w);
      }
    }

    // C fragment: c0, c1 at (W row g, x rows 2t, 2t+1), c2, c3 at W row g + 8.
#pragma unroll
    for (int nb = 0; nb < MB; ++nb) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t m = m0 + nb * 8 + 2 * t + (i & 1);
        const uint32_t n = n_base + g + 8 * (i >> 1);
        if (m < M && n < N) out[(size_t)m * N + n] = acc[nb][i];
      }
    }
  }
  if (split == 1 && !Y16) return;

  // The last CTA of this 64-row block adds the partials in split order.
  __shared__ uint32_t last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t taken = atomicAdd(ticket, 1u);
    last = taken == split - 1;
    if (last) *ticket = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const uint32_t rows = min(GEMV_ROWS, N - nblock * GEMV_ROWS);
  for (uint32_t i = threadIdx.x; i < rows * M; i += GEMV_THREADS) {
    const uint32_t m = i / rows, n = nblock * GEMV_ROWS + i % rows;
    float sum = 0.f;
    for (uint32_t p = 0; p < split; ++p) sum += __ldcg(&work[p * work_slice + (size_t)m * N + n]);
    if (Y16)
      reinterpret_cast<uint16_t*>(y)[(size_t)m * N + n] = omega_f32_to_bf16(sum);
    else
      y[(size_t)m * N + n] = sum;
  }
}

// Dense: grid (at most ceil(N / 64), split), block 128, any M (8 * MB rows per pass over W). CTA x takes
// the 64-row blocks x, x + gridDim.x, ... so a grid capped by a CTA budget still covers N (lm_head's 2374
// blocks in 1024 CTAs). `work` holds split * M * N floats and `tickets` ceil(N / 64) zeroed words when
// split > 1 (the last CTA of a block puts its ticket back to zero, so the words stay zero between
// launches).
template <int MB, bool Y16 = false, class T = GemvTuned>
__device__ __forceinline__ void gemv_bf16_tn(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                                             float* __restrict__ y, float* __restrict__ work,
                                             uint32_t* __restrict__ tickets, uint32_t M, uint32_t N, uint32_t K,
                                             uint32_t k_per_split) {
  const uint32_t nblocks = (N + GEMV_ROWS - 1) / GEMV_ROWS;
  for (uint32_t nb = blockIdx.x; nb < nblocks; nb += gridDim.x)
    gemv_bf16_group<MB, Y16, T>(x, nullptr, w, y, work, tickets + nb, M, N, K, k_per_split, nb, blockIdx.y, gridDim.y,
                             (size_t)M * N);
}

// Grouped (mixture of experts): grid (ceil(N / 64), split, Z), block 128, ONE launch over the experts the
// routing touched. active[0] is their count and active[1 ..] their list (omega_moe_route writes both);
// CTA z takes list entries z, z + Z, ... below the count (Z at most the list's room, min(E, max_slots);
// a z past the count exits at once, and a grid that the CTA budget caps below the count walks the rest).
// For entry i naming expert e: W[e] = w + e * N * K ([N, K], as a linear layer stores it), its rows are
// the slots offsets[e] .. offsets[e + 1] - 1 (offsets has E + 1 words, read on the device), slot s taking
// x row rows[s] and writing y row s: y[s, :] = x[rows[s], :] . W[e]^T; a null `rows` reads x row s
// instead (x [slots, K], a product over the routing an earlier product made). `work` holds
// split * max_slots * N floats and `tickets` Z_max * ceil(N / 64) zeroed words (entry i's block b at
// i * ceil(N / 64) + b) when split > 1.
template <int MB, class T = GemvTuned>
__device__ __forceinline__ void moe_gemv_bf16(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                                              float* __restrict__ y, float* __restrict__ work,
                                              uint32_t* __restrict__ tickets, const uint32_t* __restrict__ offsets,
                                              const uint32_t* __restrict__ rows, const uint32_t* __restrict__ active,
                                              uint32_t N, uint32_t K, uint32_t k_per_split, uint32_t max_slots) {
  const uint32_t count_active = active[0];
  // Every thread of the CTA takes the same entries, so the group's barriers are reached by all.
  for (uint32_t i = blockIdx.z; i < count_active; i += gridDim.z) {
    const uint32_t e = active[1 + i];
    const uint32_t first = offsets[e], count = offsets[e + 1] - first;
    if (count == 0) continue;
    const uint16_t* we = w + (size_t)e * N * K;
    uint32_t* ticket = tickets + (size_t)i * gridDim.x + blockIdx.x;
    // A null `rows` is the flag of a product over an existing routing: x holds one row per slot. Two
    // calls, each with its x rows known at compile time (a runtime choice inside the group costs the m8
    // form registers it does not have, and it spills).
    if (rows)
      gemv_bf16_group<MB, false, T>(x, rows + first, we, y + (size_t)first * N, work + (size_t)first * N, ticket, count, N, K,
                          k_per_split, blockIdx.x, blockIdx.y, gridDim.y, (size_t)max_slots * N);
    else
      gemv_bf16_group<MB, false, T>(x + (size_t)first * K, nullptr, we, y + (size_t)first * N, work + (size_t)first * N, ticket,
                          count, N, K, k_per_split, blockIdx.x, blockIdx.y, gridDim.y, (size_t)max_slots * N);
  }
}

#define OMEGA_GEMV_ENTRY(MB)                                                                              \
  extern "C" __global__ void __launch_bounds__(GEMV_THREADS) omega_gemv_bf16_tn_m##MB(                    \
      const uint16_t* x, const uint16_t* w, float* y, float* work, uint32_t* tickets, uint32_t M, uint32_t N, \
      uint32_t K, uint32_t k_per_split) {                                                                   \
    gemv_bf16_tn<MB>(x, w, y, work, tickets, M, N, K, k_per_split);                                       \
  }
OMEGA_GEMV_ENTRY(1)
OMEGA_GEMV_ENTRY(2)
OMEGA_GEMV_ENTRY(4)
OMEGA_GEMV_ENTRY(8)

// The dense entry for one row of x streamed unsplit (lm_head, 151936 x 2048, at batch 1: the planner's
// choice): the m1 entry with 4 W rows a round in the row-streaming form, the same sums. Three runs of
// benches/cuda/gemv_variants.cu (`rp4`, this entry's SASS): 142.7-144.3 us against the m1 entry's
// 152.0-155.0; in the decode step 143 against 154-155 (docs/perf/2026-12-04-s10-gemv-variants.md). The
// m1 entry keeps RP = 2: with RP = 4 its registers (80 to 125) cost the split MMA form of q/k/v a second
// wave (10.65 us against 9.29).
struct GemvDenseRowsTuned {
  static constexpr int U = GEMV_UNROLL;
  static constexpr bool PIPE = false;
  static constexpr int RP = 4;
  static constexpr int RU = ROWS_UNROLL;
};
extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
    omega_gemv_bf16_tn_m1_rows(const uint16_t* x, const uint16_t* w, float* y, float* work, uint32_t* tickets,
                               uint32_t M, uint32_t N, uint32_t K, uint32_t k_per_split) {
  gemv_bf16_tn<1, false, GemvDenseRowsTuned>(x, w, y, work, tickets, M, N, K, k_per_split);
}

// The bf16-output forms: y is bf16 [M, N]; `work` holds split * M * N floats and `tickets` ceil(N / 64)
// zeroed words whatever the split (a split of 1 goes through them too).
#define OMEGA_GEMV_Y16_ENTRY(MB)                                                                          \
  extern "C" __global__ void __launch_bounds__(GEMV_THREADS) omega_gemv_bf16_tn_m##MB##_y16(              \
      const uint16_t* x, const uint16_t* w, uint16_t* y, float* work, uint32_t* tickets, uint32_t M,          \
      uint32_t N, uint32_t K, uint32_t k_per_split) {                                                        \
    gemv_bf16_tn<MB, true>(x, w, reinterpret_cast<float*>(y), work, tickets, M, N, K, k_per_split);         \
  }
OMEGA_GEMV_Y16_ENTRY(1)
OMEGA_GEMV_Y16_ENTRY(2)
OMEGA_GEMV_Y16_ENTRY(4)
OMEGA_GEMV_Y16_ENTRY(8)

#define OMEGA_MOE_GEMV_ENTRY(MB)                                                                          \
  extern "C" __global__ void __launch_bounds__(GEMV_THREADS) omega_moe_gemv_bf16_m##MB(                   \
      const uint16_t* x, const uint16_t* w, float* y, float* work, uint32_t* tickets, const uint32_t* offsets, \
      const uint32_t* rows, const uint32_t* active, uint32_t N, uint32_t K, uint32_t k_per_split,              \
      uint32_t max_slots) {                                                                               \
    moe_gemv_bf16<MB>(x, w, y, work, tickets, offsets, rows, active, N, K, k_per_split, max_slots);         \
  }
OMEGA_MOE_GEMV_ENTRY(1)
OMEGA_MOE_GEMV_ENTRY(2)
OMEGA_MOE_GEMV_ENTRY(4)
OMEGA_MOE_GEMV_ENTRY(8)

// The grouped entry for products whose experts' rows (at most 2 expected) stream unsplit: decode's
// gate_up, 1536 x 2048 an expert, at batch 1 to 16 (the planner's choice). Same arguments and sums as the
// m1 entry. Under its tuning (4 W rows a round, the MMA form pipelined; 255 registers) ptxas issues all
// 16 W loads of a lane's round before the round's first FMA; with 4 rows alone (`rp4`, 168 registers) it
// issues 8 and the rest after FMAs that wait on them. Measured in four runs of
// benches/cuda/gemv_variants.cu (`pipe_u4_rp4`, this entry's SASS): batch 1's gate_up 16.66-16.77 us
// unsplit against the m1 entry's 18.0-18.1 at its best split (2), batch 4's 49.4-49.9 against 53.1-54.3.
// In the decode step: gate_up 836 us at batch 1 and 3995 at batch 8 against the m1 entry's 896 and 4145,
// but 8826 at batch 32 (4 rows an expert) against 8683, so the planner keeps m1 there
// (docs/perf/2026-12-04-s10-gemv-variants.md). The m1 entry keeps GemvTuned: this tuning's MMA form is
// 13 % slower on batch 4's down product.
struct GemvRowsTuned {
  static constexpr int U = 4;
  static constexpr bool PIPE = true;
  static constexpr int RP = 4;
  static constexpr int RU = ROWS_UNROLL;
};
extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
    omega_moe_gemv_bf16_m1_rows(const uint16_t* x, const uint16_t* w, float* y, float* work, uint32_t* tickets,
                                const uint32_t* offsets, const uint32_t* rows, const uint32_t* active, uint32_t N,
                                uint32_t K, uint32_t k_per_split, uint32_t max_slots) {
  moe_gemv_bf16<1, GemvRowsTuned>(x, w, y, work, tickets, offsets, rows, active, N, K, k_per_split, max_slots);
}
