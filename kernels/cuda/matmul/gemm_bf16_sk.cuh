// Stream-K form of the TMA-store GEMM (gemm_bf16_ts.cuh): the persistent grid splits the product's
// tiles x K blocks iterations evenly among its CTAs, instead of giving each CTA whole tiles.
//
// Why: a product with few tiles or a last wave mostly empty leaves SMs idle. M = 512 of the fused QKV
// is 160 narrow tiles, 1.2 waves of 132 SMs, so the second wave runs 28 tiles while 104 SMs wait; the
// expert gate+up at M = 4096 is 1.45 waves of wide tiles. The split-K entries fix the count, but every
// split writes a whole [M, N] slice and the last unit reads them all back. Here CTA c takes iterations
// [begin(c), begin(c + 1)) of the T = tiles * kblocks, begin(c) = c q + min(c, r) with T = q G + r (the
// first r CTAs take one more), walking tiles in the grouped order and each tile's K blocks in order, so
// every CTA does the same work within one K block and only the tiles cut by a range boundary need a
// fix-up (Osama et al., "Stream-K", PPoPP 2023; CUTLASS's stream-K scheduler).
//
// A CTA's range starts inside a tile (its first segment: the tile's K blocks from kb0 > 0), then covers
// whole tiles, then ends inside a tile (its last segment: K blocks 0 .. kb1 < kblocks). Roles, per
// segment:
// - whole tile: stored as the TMA-store entry stores it;
// - kb0 > 0 (only ever a CTA's first segment, so at most one per CTA): a contributor. Each consumer
//   warpgroup writes its accumulators to its own slot of `partials`, in register order (float4 j of
//   thread t at j * 128 + t, so a warp's stores are contiguous), then releases its flag;
// - kb0 == 0, kb1 < kblocks (only ever a CTA's last segment): the finisher. It waits for the flags of
//   the CTAs after it whose ranges start inside the tile, adds their slots to its accumulators in CTA
//   order (so y does not depend on timing, only on the grid), puts each flag back to zero and stores.
// A contributor does its part first and a finisher waits only on CTAs after it, so the waits cannot
// close a cycle: with CTAs dispatched in index order, the lowest waiting CTA's contributors are running
// or done. Flags are zero before every launch and left zero after it.
//
// A consumer whose 64 rows lie wholly past M (a last tile row of M % 128 <= 64) neither writes nor
// waits: both sides of a fix-up see the same tile and skip the same half.
#pragma once
#include <stdint.h>

#include "gemm_bf16_ts.cuh"

// The stream-K entries' stages and staging ring: the TMA-store entries' (the fix-up adds no shared memory).
#define GEMM_SK_STAGES GEMM_TS_STAGES
#define GEMM_SK_N128_STAGES GEMM_TS_N128_STAGES
#define GEMM_SK_SMEM_BYTES GEMM_TS_SMEM_BYTES
#define GEMM_SK_N128_SMEM_BYTES GEMM_TS_N128_SMEM_BYTES
// f32 of one CTA's partials slot: both consumers' 64 x BN accumulators.
#define GEMM_SK_SLOT_FLOATS(bn) (2 * 64 * (bn))

namespace omega_gemm {

// The first iteration of CTA c when each of `grid` CTAs takes q iterations and the first r one more.
__device__ __forceinline__ uint32_t sk_begin(uint32_t c, uint32_t q, uint32_t r) { return c * q + min(c, r); }

__device__ __forceinline__ void st_release_gpu(uint32_t* p, uint32_t v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t ld_acquire_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// One segment of a CTA's range: tile `tile`, K blocks kb0 .. kb1.
struct SkSegment {
  int tile, kb0, kb1;
};

__device__ __forceinline__ SkSegment sk_segment(uint32_t pos, uint32_t end, uint32_t kblocks) {
  SkSegment s;
  s.tile = (int)(pos / kblocks);
  s.kb0 = (int)(pos % kblocks);
  s.kb1 = (int)min(kblocks, (uint32_t)s.kb0 + (end - pos));
  return s;
}

}  // namespace omega_gemm

// The body of the stream-K entries: 128 x BN tiles, one CTA per SM at most (the grid is G <= SMs; any
// G >= 1 computes the same y up to the fix-up's addition order; CTAs past T have nothing to do),
// `partials` G slots of GEMM_SK_SLOT_FLOATS(BN) f32, `flags` 2 G zeroed words. T = tiles * kblocks must
// be below 2^31 (the library plans another entry past it).
template <int STAGES, int CHUNK, int NBUF, int BN>
__device__ __forceinline__ void gemm_bf16_sk_body(const void* tmap_a, const void* tmap_b, const void* tmap_y,
                                                  float* y, float* partials, uint32_t* flags, uint32_t M,
                                                  uint32_t N, uint32_t K) {
  using namespace omega_gemm;
  using Ring = StagingRing<CHUNK, NBUF>;
  using Smem = TsSmem<STAGES, CHUNK, NBUF, BN>;
  static_assert(BN == 256 || BN == 128, "the two wgmma widths the module instantiates");
  constexpr int STAGE_BYTES = Smem::STAGE_BYTES;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const Smem sm(smem_raw);
  uint8_t* smem = sm.stages;
  uint64_t *full = sm.full, *empty = sm.empty;

  const int wg = threadIdx.x / 128;
  const int tiles_m = (M + GEMM_BM - 1) / GEMM_BM;
  const int tiles_n = (N + BN - 1) / BN;
  const uint32_t kblocks = (K + GEMM_BK - 1) / GEMM_BK;
  const uint32_t total = (uint32_t)tiles_m * (uint32_t)tiles_n * (uint32_t)kblocks;
  const uint32_t grid = gridDim.x, cta = blockIdx.x;
  const uint32_t q = total / grid, r = total % grid;
  const uint32_t begin = sk_begin(cta, q, r), end = sk_begin(cta + 1, q, r);
  const bool tma_y = N % 4 == 0;

  if (threadIdx.x == 0) ts_init<STAGES>(full, empty, 2, tmap_a, tmap_b, tmap_y, tma_y);
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      uint32_t it = 0;
      for (uint32_t pos = begin; pos < end;) {
        const SkSegment seg = sk_segment(pos, end, kblocks);
        int tm, tn;
        tile_of(seg.tile, tiles_m, tiles_n, &tm, &tn);
        for (int kb = seg.kb0; kb < seg.kb1; ++kb, ++it) {
          uint32_t s = it % STAGES;
          mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
          uint8_t* a = smem + s * STAGE_BYTES;
          mbar_expect_tx(&full[s], STAGE_BYTES);
          tma_load_2d(a, tmap_a, &full[s], kb * GEMM_BK, tm * GEMM_BM);
          tma_load_2d(a + GEMM_A_STAGE_BYTES, tmap_b, &full[s], kb * GEMM_BK, tn * BN);
        }
        pos += (uint32_t)(seg.kb1 - seg.kb0);
      }
    }
    __syncwarp();
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int consumer = wg - 1;
    const int t128 = threadIdx.x % 128;
    const int warp = t128 / 32, lane = t128 % 32;
    const int bar = GEMM_TS_BAR0 + consumer;
    Ring ring{sm.staging + consumer * Ring::BYTES, 0};
    float acc[BN / 2];
    uint32_t it = 0;
    for (uint32_t pos = begin; pos < end;) {
      const SkSegment seg = sk_segment(pos, end, kblocks);
      pos += (uint32_t)(seg.kb1 - seg.kb0);
      int tm, tn;
      tile_of(seg.tile, tiles_m, tiles_n, &tm, &tn);
      consume_kblocks<BN, STAGES, 1>(acc, smem, full, empty, consumer, t128, it, seg.kb0, seg.kb1);

      const uint32_t row_base = tm * GEMM_BM + consumer * 64;
      const bool rows_live = row_base < M;
      float4* slots = reinterpret_cast<float4*>(partials);
      if (seg.kb0 > 0) {
        // Contributor: its part of the tile to its slot, then the flag, released after every thread's
        // stores (each thread's fence orders its own stores; the barrier orders them before the release).
        if (rows_live) {
          float4* slot = slots + (size_t)(cta * 2 + consumer) * (BN / 8) * 128;
#pragma unroll
          for (int j = 0; j < BN / 8; ++j)
            __stcg(&slot[j * 128 + t128], make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]));
          __threadfence();
          named_bar(bar, 128);
          if (t128 == 0) st_release_gpu(&flags[cta * 2 + consumer], 1u);
        }
        continue;
      }
      if (seg.kb1 < (int)kblocks && rows_live) {
        // Finisher: the parts of the CTAs after this one whose ranges start inside the tile, in CTA order.
        const uint32_t tile_end = (uint32_t)(seg.tile + 1) * (uint32_t)kblocks;
        // Each CTA after this one that starts inside the tile contributes: an empty range (a grid past T)
        // starts at T, past every tile.
        for (uint32_t c = cta + 1; c < grid && sk_begin(c, q, r) < tile_end; ++c) {
          uint32_t* flag = &flags[c * 2 + consumer];
          if (t128 == 0) {
            while (ld_acquire_gpu(flag) == 0u) {
            }
            *reinterpret_cast<volatile uint32_t*>(flag) = 0u;
          }
          named_bar(bar, 128);
          const float4* slot = slots + (size_t)(c * 2 + consumer) * (BN / 8) * 128;
#pragma unroll
          for (int j = 0; j < BN / 8; ++j) {
            const float4 v = __ldcg(&slot[j * 128 + t128]);
            acc[4 * j] += v.x;
            acc[4 * j + 1] += v.y;
            acc[4 * j + 2] += v.z;
            acc[4 * j + 3] += v.w;
          }
        }
      }
      if (tma_y) {
        store_acc_tma<BN, CHUNK, NBUF>(acc, ring, tmap_y, M, N, row_base, tn * BN, t128, bar);
      } else {
        const uint32_t row0 = row_base + warp * 16 + lane / 4;
        const uint32_t col0 = tn * BN + 2 * (lane % 4);
        store_acc<BN>(acc, y, M, N, row0, col0, tn * BN + BN <= N && (N % 2 == 0));
      }
    }
    if (tma_y && t128 == 0) bulk_wait_all();
  }
}

// y = x . W^T in stream-K order on 128 x 256 tiles: the TMA-store entry's descriptors (tmap_b's box
// {64, 256}) and its direct stores for N % 4 != 0; grid [G, 1, 1] with 1 <= G <= SMs, partials G *
// GEMM_SK_SLOT_FLOATS(256) f32, flags 2 G zeroed words (left zero); dynamic shared GEMM_SK_SMEM_BYTES.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1)
    omega_gemm_bf16_tn_sk(const void* tmap_a, const void* tmap_b, const void* tmap_y, float* y, float* partials,
                          uint32_t* flags, uint32_t M, uint32_t N, uint32_t K) {
  gemm_bf16_sk_body<GEMM_SK_STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF, GEMM_BN>(tmap_a, tmap_b, tmap_y, y, partials, flags,
                                                                         M, N, K);
}

// The same on 128 x 128 tiles: tmap_b's box {64, 128}, partials G * GEMM_SK_SLOT_FLOATS(128) f32, dynamic
// shared GEMM_SK_N128_SMEM_BYTES.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1)
    omega_gemm_bf16_tn_sk_n128(const void* tmap_a, const void* tmap_b, const void* tmap_y, float* y,
                               float* partials, uint32_t* flags, uint32_t M, uint32_t N, uint32_t K) {
  gemm_bf16_sk_body<GEMM_SK_N128_STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF, 128>(tmap_a, tmap_b, tmap_y, y, partials,
                                                                          flags, M, N, K);
}
