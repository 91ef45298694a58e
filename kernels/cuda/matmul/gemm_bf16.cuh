// Large-M bf16 GEMM for Hopper (sm_90a): y[M,N] (f32) = x[M,K] (bf16) . W[N,K]^T (bf16), f32 accumulation.
//
// Both operands are K-major (row-major x, and W as a linear layer stores it), which is what wgmma reads
// from shared memory without a transpose. The recipe (shared/docs/hopper-kernels.md section 5):
//
// - a persistent grid (one CTA per SM) walking 128x256 output tiles in a grouped order (GEMM_GROUP_M
//   tile rows at a time, so the CTAs running at once share A rows and B columns in L2);
// - warp specialisation: warpgroup 0 is the producer (one thread issues TMA loads of 64-wide K slices of
//   A and B into a GEMM_STAGES-deep ring of shared-memory stages), warpgroups 1 and 2 are consumers
//   (each owns 64 of the tile's 128 rows and runs wgmma m64n256k16 over the stage); `setmaxnreg` moves
//   registers from the producer (40) to the consumers (232), which hold 128 f32 accumulators each;
// - mbarrier pipelines: a `full` barrier per stage (the producer's expect_tx, completed by the TMA
//   bytes) and an `empty` barrier per stage (one arrival per consumer warpgroup once its wgmma that
//   read the stage has retired: `wgmma.wait_group 1` keeps one group in flight);
// - 128-byte swizzled tiles (a 64-element bf16 K slice is exactly one 128-byte swizzle span), so the
//   wgmma descriptors use the 128B layout with an 8-row (1024-byte) stride;
// - the epilogue stores each consumer's accumulators straight to global memory, bounds-checked, while the
//   producer already loads the CTA's next tile.
//
// Ragged M, N and K are the TMA unit's business: it fills out-of-bounds elements with zeros, so a partial
// tile accumulates zeros and the epilogue's bounds check drops what lies outside y. TMA needs the row
// stride (K * 2 bytes) to be a multiple of 16: K % 8 == 0. Other K take another path.
//
// The two TMA descriptors are 128-byte CUtensorMap objects in global memory (built on the device by
// Omega, or by cuTensorMapEncodeTiled in the CUDA-side check), passed by pointer:
//   A: 2-D bf16 {K, M}, strides {K*2}, box {64, 128}, 128B swizzle
//   B: 2-D bf16 {K, N}, strides {K*2}, box {64, 256}, 128B swizzle
#pragma once
#include <stdint.h>

#include "wgmma_ss.cuh"

#define GEMM_BM 128
#define GEMM_BN 256
#define GEMM_BK 64
#define GEMM_STAGES 4
#define GEMM_GROUP_M 16
#define GEMM_THREADS 384
#define GEMM_A_STAGE_BYTES (GEMM_BM * GEMM_BK * 2)
#define GEMM_B_STAGE_BYTES (GEMM_BN * GEMM_BK * 2)
#define GEMM_STAGE_BYTES (GEMM_A_STAGE_BYTES + GEMM_B_STAGE_BYTES)
// The narrow form (128x128 tiles, six stages) for shapes with few 128x256 tiles (M = 512 of the Qwen
// matrices): twice the tiles, the same shared memory.
#define GEMM_N128_STAGES 6
#define GEMM_N128_SMEM_BYTES GEMM_SMEM_FOR_BN(128, GEMM_N128_STAGES)
// The stages (1024-byte aligned for the 128B swizzle), then 2 * GEMM_STAGES mbarriers, plus the slack
// the kernel needs to align the dynamic shared window's start.
#define GEMM_SMEM_FOR_BN(bn, stages) ((stages) * (GEMM_A_STAGE_BYTES + (bn) * GEMM_BK * 2) + 2 * (stages) * 8 + 1024)
#define GEMM_SMEM_BYTES GEMM_SMEM_FOR_BN(GEMM_BN, GEMM_STAGES)

namespace omega_gemm {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// A 2-D tile load of the descriptor's box at (c0, c1) into `dst`, completing `bytes` on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const void* tmap, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
          smem_addr(dst)),
      "l"(tmap), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}

// A wgmma shared-memory descriptor for a K-major tile of 128-byte rows, 128B swizzle, 8-row groups
// 1024 bytes apart (the stride byte offset); the leading byte offset is unused by swizzled K-major.
__device__ __forceinline__ uint64_t wgmma_desc(const void* p) {
  uint64_t addr = smem_addr(p);
  uint64_t d = 0;
  d |= (addr & 0x3FFFF) >> 4;          // start address, bits 0-13
  d |= (uint64_t)1 << 16;              // leading byte offset (>>4), bits 16-29
  d |= (uint64_t)(1024 >> 4) << 32;    // stride byte offset (>>4), bits 32-45
  d |= (uint64_t)1 << 62;              // layout: 128B swizzle, bits 62-63
  return d;
}

// The tile a persistent CTA computes at step `t`: GEMM_GROUP_M tile rows at a time, column by column.
__device__ __forceinline__ void tile_of(int t, int tiles_m, int tiles_n, int* tm, int* tn) {
  int per_group = GEMM_GROUP_M * tiles_n;
  int group = t / per_group;
  int first_m = group * GEMM_GROUP_M;
  int rows = min(tiles_m - first_m, GEMM_GROUP_M);
  int in_group = t - group * per_group;
  *tm = first_m + in_group % rows;
  *tn = in_group / rows;
}

// Stores a consumer thread's accumulators (wgmma m64nBN layout: register 4j+{0,1} at row row0, columns
// col0 + 8j + {0,1}; 4j+{2,3} eight rows further down) into the row-major [M, N] matrix `out`, dropping
// what lies outside it; float2 stores when the tile's columns are all inside and rows even-aligned.
template <int BN>
__device__ __forceinline__ void store_acc(const float (&acc)[BN / 2], float* out, uint32_t M, uint32_t N,
                                          uint32_t row0, uint32_t col0, bool full_cols) {
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const uint32_t col = col0 + 8 * j;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t row = row0 + 8 * h;
      if (row >= M) continue;
      float* dst = out + (size_t)row * N + col;
      if (full_cols) {
        *reinterpret_cast<float2*>(dst) = make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      } else {
        if (col < N) dst[0] = acc[4 * j + 2 * h];
        if (col + 1 < N) dst[1] = acc[4 * j + 2 * h + 1];
      }
    }
  }
}

// store_acc for the swapped product of the small-M entries (gemm_swapab.cuh): the accumulators' rows are
// y's columns and their columns y's rows, so element (row, col) goes to y[col][row] of the [cols, rows]
// matrix `out` (float, or uint16_t: bf16 rounded to nearest even). A warp's store instruction covers
// 8 consecutive rows (32 or 16 contiguous bytes) of four columns: y is small beside W at these shapes.
template <int BN, typename T>
__device__ __forceinline__ void store_acc_swapped(const float (&acc)[BN / 2], T* out, uint32_t rows, uint32_t cols,
                                                  uint32_t row0, uint32_t col0) {
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t row = row0 + 8 * (e / 2), col = col0 + 8 * j + e % 2;
      if (row >= rows || col >= cols) continue;
      if constexpr (sizeof(T) == 2) {
        uint16_t h;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(acc[4 * j + e]));
        out[(size_t)col * rows + row] = h;
      } else
        out[(size_t)col * rows + row] = acc[4 * j + e];
    }
  }
}

// The mbarrier at `bar` in the shared memory of the cluster's CTA `rank` (a shared::cluster address).
__device__ __forceinline__ uint32_t mbar_in_cta(uint64_t* bar, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(bar)), "r"(rank));
  return remote;
}

// One arrival on a barrier of any CTA of the cluster. No .release.cluster: ptxas makes that a
// MEMBAR.ALL.GPU per arrival, inside the mainloop; what the peer's producer must not overtake is this
// warpgroup's reading of the stage, and wgmma.wait_group has already retired those reads (CUTLASS's
// ClusterBarrier::arrive is the same plain form).
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t cluster_bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(cluster_bar) : "memory");
}

// A consumer's release of a stage (its empty barrier) to the producers of every CTA of the cluster.
template <int CLUSTER>
__device__ __forceinline__ void release_stage(uint64_t* empty_s) {
  if constexpr (CLUSTER == 1)
    mbar_arrive(empty_s);
  else
    for (uint32_t r = 0; r < CLUSTER; ++r) mbar_arrive_cluster(mbar_in_cta(empty_s, r));
}

// A consumer warpgroup's mainloop over K blocks kb0 .. kb1 of a tile into `acc` (overwritten by the first
// block): each stage's wgmmas once its full barrier completes, one wgmma group kept in flight, and the
// stage before released as soon as its group retires; the last stage is released after the final wait.
// `it` counts the stages this warpgroup has consumed in the launch (the ring's position and parity).
template <int BN, int STAGES, int CLUSTER>
__device__ __forceinline__ void consume_kblocks(float (&acc)[BN / 2], const uint8_t* stages, uint64_t* full,
                                                uint64_t* empty, int consumer, int t128, uint32_t& it, int kb0,
                                                int kb1) {
  constexpr int STAGE_BYTES = GEMM_A_STAGE_BYTES + BN * GEMM_BK * 2;
  for (int kb = kb0; kb < kb1; ++kb, ++it) {
    uint32_t s = it % STAGES;
    mbar_wait(&full[s], (it / STAGES) & 1);
    const uint8_t* a = stages + s * STAGE_BYTES + consumer * (64 * GEMM_BK * 2);
    const uint8_t* b = stages + s * STAGE_BYTES + GEMM_A_STAGE_BYTES;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int k = 0; k < GEMM_BK / 16; ++k) {
      const int accumulate = (kb > kb0 || k > 0) ? 1 : 0;
      wgmma_bf16_ss<BN>(acc, wgmma_desc(a + k * 32), wgmma_desc(b + k * 32), accumulate);
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
    if (kb > kb0 && t128 == 0) release_stage<CLUSTER>(&empty[(it + STAGES - 1) % STAGES]);
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  if (t128 == 0) release_stage<CLUSTER>(&empty[(it + STAGES - 1) % STAGES]);
}

}  // namespace omega_gemm

// The body of every entry. A work unit is (tile, K split): tile u / splits of the grouped order over
// K blocks [s * per, min(kblocks, (s + 1) * per)), per = ceil(kblocks / splits) (splits past what K
// needs are dropped). With one split a unit stores its tile into y; with more it stores its partial sums
// into slice s of `work` ([splits][M][N] f32), and the unit that takes the tile's ticket last adds the
// slices in split order into y and puts the ticket back to zero, so y does not depend on timing.
//
// SWAPPED computes the product with its operands' roles exchanged (gemm_swapab.cuh): A is W, B is x, so
// M and N here are y's N and M, and every store, partial slices included, goes to the transposed
// position; `y` is then f32, or bf16 when Y_BF16 (a template parameter: with the choice made at run time
// ptxas serialises the wgmmas). Unswapped, y is f32.
//
// B_COPIES > 1 (a harness's diagnostic, benches/cuda/skinny_check.cu): tmap_b is that many descriptors,
// 128 bytes apart, of copies of the same B; tile row tm loads through copy tm % B_COPIES, so that at
// small M the CTAs do not all read the same lines of x from L2 at once.
template <int BN, int STAGES, bool SWAPPED = false, bool Y_BF16 = false, int B_COPIES = 1>
__device__ __forceinline__ void gemm_bf16_body(const void* tmap_a, const void* tmap_b, void* y, float* work,
                                               uint32_t* tickets, uint32_t M, uint32_t N, uint32_t K,
                                               uint32_t splits_asked) {
  static_assert(SWAPPED || !Y_BF16, "the unswapped body stores f32");
  using namespace omega_gemm;
  constexpr int STAGE_BYTES = GEMM_A_STAGE_BYTES + BN * GEMM_BK * 2;
  constexpr int ACC = BN / 2;  // f32 accumulators per consumer thread: 64 rows x BN / 128 threads
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + STAGES * STAGE_BYTES);
  uint64_t* empty = full + STAGES;

  const int wg = threadIdx.x / 128;
  const int tiles_m = (M + GEMM_BM - 1) / GEMM_BM;
  const int tiles_n = (N + BN - 1) / BN;
  const int tiles = tiles_m * tiles_n;
  const int kblocks = (K + GEMM_BK - 1) / GEMM_BK;
  const int per = (kblocks + (int)max(splits_asked, 1u) - 1) / (int)max(splits_asked, 1u);
  const int splits = (kblocks + per - 1) / per;
  const int units = tiles * splits;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 2);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    // The descriptors were written before this launch; the acquire orders the tensormap proxy's reads
    // after any generic-proxy writes of them (Omega builds them on the device in an earlier launch).
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(tmap_a) : "memory");
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(tmap_b) : "memory");
  }
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      uint32_t it = 0;
      for (int u = blockIdx.x; u < units; u += gridDim.x) {
        int tm, tn;
        tile_of(u / splits, tiles_m, tiles_n, &tm, &tn);
        const int kb0 = (u % splits) * per, kb1 = min(kblocks, kb0 + per);
        for (int kb = kb0; kb < kb1; ++kb, ++it) {
          uint32_t s = it % STAGES;
          // A fresh barrier's "previous" phase counts as complete, so the first pass through the ring
          // does not wait (parity 1 on phase 0).
          mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
          uint8_t* a = smem + s * STAGE_BYTES;
          uint8_t* b = a + GEMM_A_STAGE_BYTES;
          mbar_expect_tx(&full[s], STAGE_BYTES);
          tma_load_2d(a, tmap_a, &full[s], kb * GEMM_BK, tm * GEMM_BM);
          const void* tb = static_cast<const uint8_t*>(tmap_b) + (tm % B_COPIES) * 128;
          tma_load_2d(b, tb, &full[s], kb * GEMM_BK, tn * BN);
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int consumer = wg - 1;  // rows consumer*64 .. +63 of the tile
  const int t128 = threadIdx.x % 128;
  const int warp = t128 / 32, lane = t128 % 32;
  float acc[ACC];
  uint32_t it = 0;
  // The same walk over tiles and K blocks as the producer's: the ring's stage and phase are a function of
  // the step count `it`, so both sides must take exactly the same steps.
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    int tm, tn;
    const int tile = u / splits, split = u % splits;
    tile_of(tile, tiles_m, tiles_n, &tm, &tn);
    const int kb0 = split * per, kb1 = min(kblocks, kb0 + per);
    consume_kblocks<BN, STAGES, 1>(acc, smem, full, empty, consumer, t128, it, kb0, kb1);

    // Accumulator layout of wgmma m64nN (f32): register 4j+{0,1} holds row warp*16 + lane/4, columns
    // 8j + 2*(lane%4) + {0,1}; register 4j+{2,3} the same columns 8 rows further down.
    const uint32_t row0 = tm * GEMM_BM + consumer * 64 + warp * 16 + lane / 4;
    const uint32_t col0 = tn * BN + 2 * (lane % 4);
    const bool full_cols = !SWAPPED && tn * BN + BN <= N && (N % 2 == 0);
    // Where element (row, col) of this product lies in y and in a partial slice.
    auto at = [&](uint32_t row, uint32_t col) { return SWAPPED ? (size_t)col * M + row : (size_t)row * N + col; };
    auto store_y = [&]() {
      if constexpr (!SWAPPED)
        store_acc<BN>(acc, static_cast<float*>(y), M, N, row0, col0, full_cols);
      else if constexpr (Y_BF16)
        store_acc_swapped<BN>(acc, static_cast<uint16_t*>(y), M, N, row0, col0);
      else
        store_acc_swapped<BN>(acc, static_cast<float*>(y), M, N, row0, col0);
    };
    if (splits == 1) {
      store_y();
      continue;
    }
    float* slice = work + (size_t)split * M * N;
    if constexpr (SWAPPED)
      store_acc_swapped<BN>(acc, slice, M, N, row0, col0);
    else
      store_acc<BN>(acc, slice, M, N, row0, col0, full_cols);

    // Both consumer warpgroups have stored their halves; one thread takes the tile's ticket.
    __shared__ uint32_t last_unit;
    __threadfence();
    asm volatile("bar.sync 1, 256;" ::: "memory");
    if (consumer == 0 && t128 == 0) {
      const uint32_t taken = atomicAdd(&tickets[tile], 1u);
      last_unit = taken == (uint32_t)splits - 1;
      if (last_unit) tickets[tile] = 0;
    }
    asm volatile("bar.sync 1, 256;" ::: "memory");
    if (!last_unit) continue;
    __threadfence();
    // The last unit adds the slices in split order (its own from memory too, so the order never depends
    // on which unit came last), each thread at the positions it stored, into its accumulator registers:
    // per slice 64 independent loads in flight per thread.
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] = 0.f;
    for (int p = 0; p < splits; ++p) {
      const float* src = work + (size_t)p * M * N;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const uint32_t col = col0 + 8 * j;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t row = row0 + 8 * h;
          if (row >= M) continue;
          if (full_cols) {
            const float2 v = __ldcg(reinterpret_cast<const float2*>(src + at(row, col)));
            acc[4 * j + 2 * h] += v.x;
            acc[4 * j + 2 * h + 1] += v.y;
          } else {
            if (col < N) acc[4 * j + 2 * h] += __ldcg(src + at(row, col));
            if (col + 1 < N) acc[4 * j + 2 * h + 1] += __ldcg(src + at(row, col + 1));
          }
        }
      }
    }
    store_y();
  }
}

// Another module that includes this header for its helpers alone defines OMEGA_GEMM_HELPERS_ONLY.
#ifndef OMEGA_GEMM_HELPERS_ONLY
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1)
    omega_gemm_bf16_tn(const void* tmap_a, const void* tmap_b, float* y, uint32_t M, uint32_t N, uint32_t K) {
  gemm_bf16_body<GEMM_BN, GEMM_STAGES>(tmap_a, tmap_b, y, nullptr, nullptr, M, N, K, 1);
}

// Split K for shapes with fewer tiles than SMs (M = 512 of the Qwen matrices: 4 x 8 tiles for 132 SMs).
// work: splits * M * N f32 (scratch); tickets: one zeroed word per tile, left zero.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1)
    omega_gemm_bf16_tn_splitk(const void* tmap_a, const void* tmap_b, float* y, float* work, uint32_t* tickets,
                              uint32_t M, uint32_t N, uint32_t K, uint32_t splits) {
  gemm_bf16_body<GEMM_BN, GEMM_STAGES>(tmap_a, tmap_b, y, work, tickets, M, N, K, splits);
}

// The narrow form: 128x128 tiles (B's descriptor box is {64, 128}), six stages, dynamic shared
// GEMM_N128_SMEM_BYTES; the split-K arguments as above (splits 1: work and tickets unused).
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1)
    omega_gemm_bf16_tn_n128(const void* tmap_a, const void* tmap_b, float* y, float* work, uint32_t* tickets,
                            uint32_t M, uint32_t N, uint32_t K, uint32_t splits) {
  gemm_bf16_body<128, GEMM_N128_STAGES>(tmap_a, tmap_b, y, work, tickets, M, N, K, splits);
}
#endif  // OMEGA_GEMM_HELPERS_ONLY
