// The TMA-store GEMM with its two consumer warpgroups in ping-pong (CUTLASS's
// KernelTmaWarpSpecializedPingpong schedule) instead of sharing each tile: `omega_gemm_bf16_tn_pp_n128`
// and its bf16-output form `_pp_n128_y16`.
//
// In gemm_bf16_ts.cuh's body both consumers take one 128 x BN tile (64 rows each), so they reach the
// epilogue together and the tensor cores idle while both stage and store. At short K (down: K = 768 is 12
// K blocks) a tile's f32 store takes about as long as its mainloop. Here each consumer owns whole tiles
// (128 x BN, both 64-row halves: 2 x BN / 2 accumulators a thread, so BN <= 128), the CTA's tiles
// alternating between them. The producer fills the stage ring in tile order, so the consumer of tile j + 1
// starts its mainloop as the consumer of tile j drains the stages of its last K blocks, and runs it while
// that one stages and stores: one consumer's epilogue hides under the other's MMAs. Each stage is read by
// one consumer, so its empty barrier counts one arrival. Stages, staging ring, barriers, descriptors and
// tile order are the TMA-store body's; one CTA a tile (no cluster form). On the H200 (gemm_check `pp`,
// docs/perf/2026-12-07-s21-h200-pingpong-swiglu.md) it beat every other entry where a CTA gets two or more
// narrow tiles at K <= 2048 (down 4096 x 2048 x 768 1.10x cuBLAS against the cluster entry's 1.00x) and
// lost at K = 4096, where the mainloop hides the shared epilogue anyway.
//
// The two mainloops take turns (CUTLASS's ordered math barrier): tile j + 1's consumer starts waiting on
// the full barriers only once tile j's consumer has passed all of its own. A full barrier's wait is by
// parity, so a waiter must be less than one phase ahead of the producer; without the turn, tile j + 1's
// consumer waits two or more phases ahead at a short K (tile 1 starts at K block 16 of a 6-stage ring at
// K = 1000, while the producer is about 6 blocks in), passes an older phase of the same parity, reads a
// stage not yet loaded and arrives on empty barriers out of order. That hung session 20's harness run at
// the first shape that gave a CTA two tiles (1000 x 4095 x 1000).
//
// Y16: y is bf16 and stored only through its descriptor (the _y16 entries of gemm_bf16_ts.cuh: N % 8 ==
// 0, else a trap), each 64-row half by store_acc_tma_y16.
#pragma once
#include <stdint.h>

#include "gemm_bf16_ts.cuh"

// Named barriers 1 to 3 are the TMA-store body's (the split-K ticket's and GEMM_TS_BAR0 + consumer).
#define GEMM_PP_TURN0 4  // consumer 0's mainloop has passed its full barriers: consumer 1's turn
#define GEMM_PP_TURN1 5  // and consumer 1's: consumer 0's turn

namespace omega_gemm {
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
}  // namespace omega_gemm

template <int STAGES, int CHUNK, int NBUF, int BN, bool Y16 = false>
__device__ __forceinline__ void gemm_bf16_pp_body(const void* tmap_a, const void* tmap_b, const void* tmap_y, float* y,
                                                  uint32_t M, uint32_t N, uint32_t K) {
  using namespace omega_gemm;
  using Ring = StagingRing<CHUNK, NBUF>;
  static_assert(BN % GEMM_Y_BOX_COLS == 0 && BN <= 128, "two 64-row halves of accumulators a thread");
  using Smem = TsSmem<STAGES, CHUNK, NBUF, BN>;
  constexpr int STAGE_BYTES = Smem::STAGE_BYTES;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const Smem sm(smem_raw);
  uint8_t* smem = sm.stages;
  uint64_t *full = sm.full, *empty = sm.empty;

  const int wg = threadIdx.x / 128;
  const int tiles_m = (M + GEMM_BM - 1) / GEMM_BM;
  const int tiles_n = (N + BN - 1) / BN;
  const int tiles = tiles_m * tiles_n;
  const int kblocks = (K + GEMM_BK - 1) / GEMM_BK;
  const bool tma_y = Y16 || N % 4 == 0;
  if (Y16 && N % 8 != 0) __trap();

  // One consumer reads each stage.
  if (threadIdx.x == 0) ts_init<STAGES>(full, empty, 1, tmap_a, tmap_b, tmap_y, tma_y);
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      uint32_t it = 0;
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int tm, tn;
        tile_of(t, tiles_m, tiles_n, &tm, &tn);
        for (int kb = 0; kb < kblocks; ++kb, ++it) {
          const uint32_t s = it % STAGES;
          mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
          uint8_t* a = smem + s * STAGE_BYTES;
          mbar_expect_tx(&full[s], STAGE_BYTES);
          tma_load_2d(a, tmap_a, &full[s], kb * GEMM_BK, tm * GEMM_BM);
          tma_load_2d(a + GEMM_A_STAGE_BYTES, tmap_b, &full[s], kb * GEMM_BK, tn * BN);
        }
      }
    }
    __syncwarp();
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int consumer = wg - 1;
    const int t128 = threadIdx.x % 128;
    const int warp = t128 / 32, lane = t128 % 32;
    Ring ring{sm.staging + consumer * Ring::BYTES, 0};
    float acc0[BN / 2], acc1[BN / 2];
    // The CTA's j-th tile is blockIdx.x + j * gridDim.x; this consumer takes j = consumer, consumer + 2, ..
    for (int j = consumer, t = blockIdx.x + consumer * gridDim.x; t < tiles; j += 2, t += 2 * gridDim.x) {
      int tm, tn;
      tile_of(t, tiles_m, tiles_n, &tm, &tn);
      uint32_t it = (uint32_t)j * kblocks;
      // Wait for the turn only where the other consumer had the tile before this one.
      if (j > 0) named_bar(consumer == 0 ? GEMM_PP_TURN1 : GEMM_PP_TURN0, 256);
      for (int kb = 0; kb < kblocks; ++kb, ++it) {
        const uint32_t s = it % STAGES;
        mbar_wait(&full[s], (it / STAGES) & 1);
        const uint8_t* a = smem + s * STAGE_BYTES;
        const uint8_t* b = a + GEMM_A_STAGE_BYTES;
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int k = 0; k < GEMM_BK / 16; ++k) {
          const int accumulate = (kb > 0 || k > 0) ? 1 : 0;
          wgmma_bf16_ss<BN>(acc0, wgmma_desc(a + k * 32), wgmma_desc(b + k * 32), accumulate);
          wgmma_bf16_ss<BN>(acc1, wgmma_desc(a + 64 * GEMM_BK * 2 + k * 32), wgmma_desc(b + k * 32), accumulate);
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        if (kb > 0 && t128 == 0) mbar_arrive(&empty[(it + STAGES - 1) % STAGES]);
      }
      // Every full barrier of this tile has been passed: hand the turn over, where a next tile exists
      // (an arrival nobody waits for would be left on the barrier at exit).
      if (t + gridDim.x < tiles) named_bar_arrive(consumer == 0 ? GEMM_PP_TURN0 : GEMM_PP_TURN1, 256);
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
      if (t128 == 0) mbar_arrive(&empty[(it + STAGES - 1) % STAGES]);

      const uint32_t row_base = tm * GEMM_BM;
      const int bar = GEMM_TS_BAR0 + consumer;
      if constexpr (Y16) {
        store_acc_tma_y16<BN, CHUNK, NBUF>(acc0, ring, tmap_y, M, N, row_base, tn * BN, t128, bar);
        store_acc_tma_y16<BN, CHUNK, NBUF>(acc1, ring, tmap_y, M, N, row_base + 64, tn * BN, t128, bar);
      } else if (tma_y) {
        store_acc_tma<BN, CHUNK, NBUF>(acc0, ring, tmap_y, M, N, row_base, tn * BN, t128, bar);
        store_acc_tma<BN, CHUNK, NBUF>(acc1, ring, tmap_y, M, N, row_base + 64, tn * BN, t128, bar);
      } else {
        const uint32_t col0 = tn * BN + 2 * (lane % 4);
        const bool full_cols = tn * BN + BN <= N && (N % 2 == 0);
        store_acc<BN>(acc0, y, M, N, row_base + warp * 16 + lane / 4, col0, full_cols);
        store_acc<BN>(acc1, y, M, N, row_base + 64 + warp * 16 + lane / 4, col0, full_cols);
      }
    }
    if (tma_y && t128 == 0) bulk_wait_all();
  }
}

// The narrow tile (128 x 128) in ping-pong: the parameters, grid ([min(tiles, SMs), 1, 1]), B box {64,
// 128} and dynamic shared memory (GEMM_TS_N128_SMEM_BYTES) of omega_gemm_bf16_tn_ts_n128.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1)
    omega_gemm_bf16_tn_pp_n128(const void* tmap_a, const void* tmap_b, const void* tmap_y, float* y, uint32_t M,
                               uint32_t N, uint32_t K) {
  gemm_bf16_pp_body<GEMM_TS_N128_STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF, 128>(tmap_a, tmap_b, tmap_y, y, M, N, K);
}

#ifndef OMEGA_GEMM_NO_Y16_ENTRIES
// Its bf16-output form: tmap_y is y's bf16 descriptor (N % 8 == 0) and y is not read.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1)
    omega_gemm_bf16_tn_pp_n128_y16(const void* tmap_a, const void* tmap_b, const void* tmap_y, float* y,
                                   uint32_t M, uint32_t N, uint32_t K) {
  gemm_bf16_pp_body<GEMM_TS_N128_STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF, 128, true>(tmap_a, tmap_b, tmap_y, y, M, N,
                                                                                 K);
}
#endif  // OMEGA_GEMM_NO_Y16_ENTRIES
