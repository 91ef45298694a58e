// Skinny bf16 GEMM (M = 1..64) for Hopper: y[M,N] = x[M,K] (bf16) . W[N,K]^T (bf16), f32 accumulation,
// f32 or bf16 output. Issue 12's weight-streaming path, built for W to leave HBM at the copy rate.
//
// Why not the GEMV (gemv_bf16.cuh): its W fragments come straight from global loads (16 rows x 64 bytes a
// warp instruction) and every MMA re-reads x through L1, so past M = 8 the x loads, not the W stream,
// set its pace (qkv 5120x2048 at M = 32: 30.8 us, 0.7 TB/s). Here W and x both go through a cp.async
// ring in shared memory and the fragments come from ldmatrix:
//
// - a CTA (4 warps, 128 threads) owns a tile of SK_ROWS = 128 W rows (32 per warp: two m16 MMA tiles that
//   share each x fragment, so shared-memory reads per W byte stay at 1 + MB / 4);
// - a stage is the tile's 128 rows x 64 K (16 KiB of W) plus the 8 * MB x rows x 64 K, SK_STAGES = 4
//   stages deep: up to three stages (48+ KiB) in flight per CTA, two CTAs per SM;
// - mma.sync m16n8k16 with W as the row operand (N on the MMA's 16 side) and x as the column operand (M
//   on its 8 side, MB blocks of 8 rows: M = 1..8 one block, 64 eight), so an M of 1 costs what 8 does
//   in MMAs but the MMAs are never the limit;
// - work units are (tile, K slice): unit u takes tile u / splits over K slice u % splits (k_per_split
//   elements, a multiple of 64), and the grid is persistent (CTA b takes units b, b + gridDim.x, ...).
//
// With splits > 1 each unit writes its accumulators, in fragment order (float4 per thread, coalesced), to
// `work`; the unit that takes a tile's ticket last adds the slices in split order (its own from
// registers), so the result does not depend on which CTA finished last, and puts the ticket back to 0.
//
// Shared-memory rows are 128 bytes (eight 16-byte chunks); chunk c of row r lies at chunk c ^ (r & 7), so
// the eight row addresses of an ldmatrix phase fall in distinct banks.
//
// Requirements: 1 <= M <= 8 * MB, K % 8 == 0, x and W 16-byte aligned, k_per_split % 64 == 0,
// splits = ceil(K / k_per_split); y 4-byte aligned (f32) or 2-byte (bf16); work holds
// ceil(N / 128) * splits * 128 * 8 * MB floats and tickets ceil(N / 128) zeroed words when splits > 1.
#pragma once
#include <stdint.h>

#include "convert.cuh"

#define SK_ROWS 128    // W rows per tile
#define SK_THREADS 128 // 4 warps x 32 rows
#define SK_KC 64       // K per stage
#define SK_STAGES 4
#define SK_ROW_BYTES (SK_KC * 2)

namespace omega_skinny {

// Dynamic shared memory of the MB entry: the stages of W and x (the ticket word is static).
__host__ __device__ constexpr uint32_t smem_bytes(int mb) {
  return SK_STAGES * (SK_ROWS + 8 * mb) * SK_ROW_BYTES;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, L2 only; `bytes` 0 fills the chunk with zeros and reads nothing.
__device__ __forceinline__ void cp16(uint32_t dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}

__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Byte offset of chunk c of row r in a stage's swizzled rows.
__device__ __forceinline__ uint32_t swz(uint32_t r, uint32_t c) { return r * SK_ROW_BYTES + ((c ^ (r & 7)) << 4); }

// One stage: the tile's W rows and the x rows over K [k, k + 64) into `w_s` / `x_s` (shared addresses).
// Rows past N (M) read row N - 1 (M - 1), whose products the store drops; chunks at or past k1 are zeros.
template <int MB>
__device__ __forceinline__ void load_stage(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                                           uint32_t w_s, uint32_t x_s, uint32_t M, uint32_t N, uint32_t K,
                                           uint32_t n0, uint32_t k, uint32_t k1) {
  const uint32_t c = threadIdx.x % 8, kc = k + 8 * c;
  const uint32_t bytes = kc < k1 ? 16 : 0;
  const uint32_t kk = kc < k1 ? kc : 0;
#pragma unroll
  for (int i = 0; i < SK_ROWS * 8 / SK_THREADS; ++i) {
    const uint32_t r = threadIdx.x / 8 + 16 * i;
    cp16(w_s + swz(r, c), w + (size_t)min(n0 + r, N - 1) * K + kk, bytes);
  }
#pragma unroll
  for (int i = 0; i < (8 * MB * 8 + SK_THREADS - 1) / SK_THREADS; ++i) {
    const uint32_t r = threadIdx.x / 8 + 16 * i;
    if (r < 8 * MB) cp16(x_s + swz(r, c), x + (size_t)min(r, M - 1) * K + kk, bytes);
  }
}

// The tile's product over K [k0, k1) into acc[i][nb] (W rows warp * 32 + 16 i .., x rows 8 nb ..).
template <int MB>
__device__ __forceinline__ void mainloop(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                                         uint8_t* smem, float (&acc)[2][MB][4], uint32_t M, uint32_t N, uint32_t K,
                                         uint32_t n0, uint32_t k0, uint32_t k1) {
  constexpr uint32_t W_BYTES = SK_ROWS * SK_ROW_BYTES, STAGE = (SK_ROWS + 8 * MB) * SK_ROW_BYTES;
  const uint32_t base = smem_addr(smem);
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t nk = k1 > k0 ? (k1 - k0 + SK_KC - 1) / SK_KC : 0;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int nb = 0; nb < MB; ++nb) acc[i][nb][0] = acc[i][nb][1] = acc[i][nb][2] = acc[i][nb][3] = 0.f;

#pragma unroll
  for (uint32_t st = 0; st < SK_STAGES - 1; ++st) {
    if (st < nk) load_stage<MB>(x, w, base + st * STAGE, base + st * STAGE + W_BYTES, M, N, K, n0, k0 + st * SK_KC, k1);
    cp_commit();
  }
  // ldmatrix lanes: A (W) rows lane % 16 of the m16 tile, chunk + lane / 16; B (x) rows lane % 8 (+ 8 for
  // lanes 16..31, the second n8 block), chunk + (lane / 8) % 2.
  const uint32_t a_row = warp * 32 + lane % 16, a_c = lane / 16;
  const uint32_t b_row = lane % 8 + (lane / 16) * 8, b_c = (lane / 8) % 2;
  for (uint32_t kb = 0; kb < nk; ++kb) {
    cp_wait<SK_STAGES - 2>();
    __syncthreads();
    // The slot of kb - 1: every warp finished reading it before the barrier above.
    const uint32_t next = kb + SK_STAGES - 1;
    if (next < nk) {
      const uint32_t slot = base + (next % SK_STAGES) * STAGE;
      load_stage<MB>(x, w, slot, slot + W_BYTES, M, N, K, n0, k0 + next * SK_KC, k1);
    }
    cp_commit();
    const uint32_t w_s = base + (kb % SK_STAGES) * STAGE, x_s = w_s + W_BYTES;
#pragma unroll
    for (uint32_t kk = 0; kk < SK_KC / 16; ++kk) {
      uint32_t a[2][4];
      ldsm_x4(a[0], w_s + swz(a_row, 2 * kk + a_c));
      ldsm_x4(a[1], w_s + swz(a_row + 16, 2 * kk + a_c));
      if (MB == 1) {
        uint32_t b[2];
        ldsm_x2(b, x_s + swz(lane % 8, 2 * kk + b_c));
        mma(acc[0][0], a[0], b[0], b[1]);
        mma(acc[1][0], a[1], b[0], b[1]);
      } else {
#pragma unroll
        for (int j = 0; j < MB / 2; ++j) {
          uint32_t b[4];
          ldsm_x4(b, x_s + swz(16 * j + b_row, 2 * kk + b_c));
          mma(acc[0][2 * j], a[0], b[0], b[1]);
          mma(acc[1][2 * j], a[1], b[0], b[1]);
          mma(acc[0][2 * j + 1], a[0], b[2], b[3]);
          mma(acc[1][2 * j + 1], a[1], b[2], b[3]);
        }
      }
    }
  }
  cp_wait<0>();
  // The next unit's prologue overwrites the slots.
  __syncthreads();
}

// C fragment: acc[i][nb][r] is W row warp * 32 + 16 i + lane / 4 + 8 (r / 2), x row 8 nb + 2 (lane % 4) + r % 2.
template <int MB>
__device__ __forceinline__ void store(const float (&acc)[2][MB][4], void* y, uint32_t y_bf16, uint32_t M,
                                      uint32_t N, uint32_t n0) {
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int nb = 0; nb < MB; ++nb)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const uint32_t n = n0 + warp * 32 + 16 * i + lane / 4 + 8 * (r / 2);
        const uint32_t m = 8 * nb + 2 * (lane % 4) + r % 2;
        if (m < M && n < N) {
          const size_t at = (size_t)m * N + n;
          if (y_bf16)
            static_cast<uint16_t*>(y)[at] = omega_f32_to_bf16(acc[i][nb][r]);
          else
            static_cast<float*>(y)[at] = acc[i][nb][r];
        }
      }
}

// Where unit (tile, s)'s accumulator block q (= i * MB + nb) of this thread lies in `work`.
template <int MB>
__device__ __forceinline__ float4* work_at(float* work, uint32_t tile, uint32_t s, uint32_t splits, int q) {
  return reinterpret_cast<float4*>(work) + ((size_t)(tile * splits + s) * (2 * MB) + q) * SK_THREADS + threadIdx.x;
}

}  // namespace omega_skinny

// grid: persistent, any size (CTA b takes units b, b + gridDim.x, ... below ceil(N / 128) * splits);
// block SK_THREADS; dynamic shared memory omega_skinny::smem_bytes(MB).
template <int MB>
__device__ __forceinline__ void skinny_bf16_tn(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                                               void* y, float* __restrict__ work, uint32_t* __restrict__ tickets,
                                               uint32_t M, uint32_t N, uint32_t K, uint32_t k_per_split,
                                               uint32_t splits, uint32_t y_bf16) {
  using namespace omega_skinny;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint32_t last;
  const uint32_t tiles = (N + SK_ROWS - 1) / SK_ROWS;
  const uint32_t units = tiles * splits;
  for (uint32_t u = blockIdx.x; u < units; u += gridDim.x) {
    const uint32_t tile = u / splits, s = u % splits;
    const uint32_t n0 = tile * SK_ROWS, k0 = s * k_per_split;
    const uint32_t k1 = min(K, k0 + k_per_split);
    float acc[2][MB][4];
    mainloop<MB>(x, w, smem, acc, M, N, K, n0, k0, k1);
    if (splits > 1) {
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int nb = 0; nb < MB; ++nb)
          *work_at<MB>(work, tile, s, splits, i * MB + nb) =
              make_float4(acc[i][nb][0], acc[i][nb][1], acc[i][nb][2], acc[i][nb][3]);
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) {
        const uint32_t taken = atomicAdd(&tickets[tile], 1u);
        last = taken == splits - 1;
        if (last) tickets[tile] = 0;
      }
      __syncthreads();
      if (!last) continue;
      __threadfence();
      // Split order, this unit's slice from registers: the sum is the same whichever unit is last. Each
      // slice's MB vectors of a half are loaded before any is added, so MB loads are in flight at once:
      // one dependent load at a time held the reduction to ~15 GB/s (9 us for qkv's 131 KiB at M = 64).
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float4 sum[MB];
#pragma unroll
        for (int nb = 0; nb < MB; ++nb) sum[nb] = make_float4(0.f, 0.f, 0.f, 0.f);
        for (uint32_t p = 0; p < splits; ++p) {
          float4 v[MB];
#pragma unroll
          for (int nb = 0; nb < MB; ++nb)
            v[nb] = p == s ? make_float4(acc[i][nb][0], acc[i][nb][1], acc[i][nb][2], acc[i][nb][3])
                           : __ldcg(work_at<MB>(work, tile, p, splits, i * MB + nb));
#pragma unroll
          for (int nb = 0; nb < MB; ++nb) {
            sum[nb].x += v[nb].x;
            sum[nb].y += v[nb].y;
            sum[nb].z += v[nb].z;
            sum[nb].w += v[nb].w;
          }
        }
#pragma unroll
        for (int nb = 0; nb < MB; ++nb) {
          acc[i][nb][0] = sum[nb].x;
          acc[i][nb][1] = sum[nb].y;
          acc[i][nb][2] = sum[nb].z;
          acc[i][nb][3] = sum[nb].w;
        }
      }
    }
    store<MB>(acc, y, y_bf16, M, N, n0);
  }
}

#define OMEGA_SKINNY_ENTRY(MB)                                                                              \
  extern "C" __global__ void __launch_bounds__(SK_THREADS) omega_skinny_bf16_tn_m##MB(                      \
      const uint16_t* x, const uint16_t* w, void* y, float* work, uint32_t* tickets, uint32_t M, uint32_t N,  \
      uint32_t K, uint32_t k_per_split, uint32_t splits, uint32_t y_bf16) {                                 \
    skinny_bf16_tn<MB>(x, w, y, work, tickets, M, N, K, k_per_split, splits, y_bf16);                       \
  }
OMEGA_SKINNY_ENTRY(1)
OMEGA_SKINNY_ENTRY(2)
OMEGA_SKINNY_ENTRY(4)
OMEGA_SKINNY_ENTRY(8)

// The launch the library's planner makes (src/libs/matmul/plan.rs, `skinny_plan`, which a Rust test
// holds to these numbers): the split of K in whole 64-element blocks, at most SK_MAX_SPLITS, that costs
// least in bytes through the busiest CTA slot, on a persistent grid of min(units, SK_CTAS_PER_SM * SMs,
// budget) CTAs. A unit costs its stages (W and x) plus, split, its slice of partial sums and the last
// unit's reads of the others (counted once per unit); ties keep fewer splits.
#define SK_CTAS_PER_SM 2
#define SK_MAX_SPLITS 8

struct SkinnyPlan {
  uint32_t mb;           // the entry: 8 * mb x rows
  uint32_t splits;       // K slices
  uint32_t k_per_split;  // a multiple of SK_KC
  uint32_t grid;         // persistent CTAs
  uint32_t tiles;        // ceil(N / SK_ROWS): tickets when split
};

static inline uint32_t skinny_mb(uint32_t M) { return M <= 8 ? 1 : M <= 16 ? 2 : M <= 32 ? 4 : 8; }

static inline SkinnyPlan skinny_plan(uint32_t M, uint32_t N, uint32_t K, uint32_t sms, uint32_t budget) {
  SkinnyPlan p{};
  p.mb = skinny_mb(M);
  p.tiles = (N + SK_ROWS - 1) / SK_ROWS;
  const uint32_t kblocks = (K + SK_KC - 1) / SK_KC;
  const uint64_t cap = budget > 0 ? budget : 1, slots = (uint64_t)SK_CTAS_PER_SM * sms < cap ? (uint64_t)SK_CTAS_PER_SM * sms : cap;
  const uint64_t stage = (uint64_t)(SK_ROWS + 8 * p.mb) * SK_ROW_BYTES, slice = (uint64_t)SK_ROWS * 8 * p.mb * 4;
  uint64_t best = ~0ull;
  for (uint32_t s = 1; s <= SK_MAX_SPLITS && s <= kblocks; ++s) {
    const uint32_t per = (kblocks + s - 1) / s;
    if ((kblocks + per - 1) / per != s) continue;
    const uint64_t units = (uint64_t)p.tiles * s, grid = units < slots ? units : slots;
    const uint64_t cost = (units + grid - 1) / grid * (per * stage + (s > 1 ? s * slice : 0));
    if (cost < best) {
      best = cost;
      p.splits = s;
      p.k_per_split = per * SK_KC;
      p.grid = (uint32_t)grid;
    }
  }
  return p;
}
