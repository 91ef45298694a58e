// The large-M bf16 GEMM of gemm_bf16.cuh with the two techniques of hopper-kernels.md section 5 it lacks:
//
// - a TMA-store epilogue (`omega_gemm_bf16_tn_ts`). The base kernel's consumers store their 64 x 256 f32
//   halves (64 KB each) straight from registers, and the tensor cores idle until the last store has
//   issued: ~3-4 us a tile against a 9 us mainloop at K = 768. Here each consumer writes its
//   accumulators into a shared-memory staging ring (NBUF buffers of CHUNK columns), one thread of the
//   consumer hands each buffer to the TMA unit (`cp.async.bulk.tensor` through y's descriptor) and the
//   warpgroup goes on; a buffer is written again only once the TMA unit has read it
//   (`cp.async.bulk.wait_group.read`). The ring carries over from tile to tile, so the first NBUF chunks
//   of a tile reuse buffers whose stores drained during the mainloop: the larger the ring, the more of
//   the store overlaps the next tile's wgmma. Shared memory is what bounds the ring (227 KiB): the
//   stages and the ring are template parameters so the CUDA-side harness can time several splits.
// - 2-CTA clusters with TMA multicast (`omega_gemm_bf16_tn_mc`): the two CTAs of a cluster take the
//   tiles (2 pm, tn) and (2 pm + 1, tn), which read the same 256 W rows. Each CTA loads its own 128 x 64
//   slice of x and half (128 rows) of the shared W slice, multicast into both CTAs' stages, so W's L2
//   traffic halves (32 of 48 KB per stage per CTA become 16). W rather than x is shared because its box
//   is the larger (256 rows against 128). A stage is refilled only once the consumers of both CTAs have
//   released it: its `empty` barrier counts four arrivals, two of them remote.
//
// y's descriptor (f32 {N, M}, row stride N * 4, box {32, 64}, 128B swizzle): a 32-float inner box is one
// 128-byte swizzle span. Only 128B-swizzled boxes have worked under Omega's launches so far (unswizzled
// ones faulted with Xid 13 in the bring-up probe), so the staging buffers are written in the 128B
// layout: 16-byte chunk c of row r at chunk c ^ (r % 8), which also spreads a warp's stores over all
// banks. The TMA store clips rows >= M and columns >= N itself; it needs the row stride a multiple of
// 16 bytes (N % 4 == 0). Other N take the base kernel's direct stores (a runtime branch; tmap_y is then
// not read and may be 0).
//
// The `_y16` entries store a bf16 y (the f32 accumulators rounded to nearest even, as
// omega_convert_f32_bf16 rounds them) through a bf16 descriptor ({N, M}, row stride N * 2, box {64, 64},
// 128B swizzle; N % 8 == 0, so no direct-store branch): half the bytes of the f32 store, and no f32
// product in a workspace converted by a second launch. A bf16 box row is the same 128 bytes as an f32
// one, so the staging ring, its swizzle and the shared memory are the f32 entries'; a buffer holds 64
// columns. A tile width that is no multiple of 64 (160, 96) ends with a chunk of the tile's last 64
// columns, which stores 32 columns the chunk before stored too, with the same values.
//
// Everything else (tile shape, warp roles, register split, the ring of stages, K-major 128B-swizzled
// operand boxes, the grouped tile order) is gemm_bf16.cuh's.
#pragma once
#include <stdint.h>

#include "../elementwise/silu.cuh"
#include "gemm_bf16.cuh"

// Stages and staging ring of the module's entries (the harness instantiates others).
#define GEMM_TS_STAGES 4
#define GEMM_TS_CHUNK 32
#define GEMM_TS_NBUF 2
#define GEMM_MC_STAGES 4
#define GEMM_MC_CHUNK 32
#define GEMM_MC_NBUF 2
// The narrow tile (128 x 128, B's box 128 rows) in both forms: a stage is 32 KiB, so six fit beside the
// same staging ring, and 4096x1536 makes 384 tiles (2.9 waves of 132) instead of 192 (1.45 waves).
#define GEMM_TS_N128_STAGES 6
#define GEMM_MC_N128_STAGES 6
// Tile widths fitted to whole waves of 132 SMs for the Qwen3 shapes (160: 512 x 5120 in 128 tiles; 192:
// 4096 x 1536 in 256; 96: 256 x 5120 in 108; 64: 512 x 2048 in 128), each with the deepest ring that fits
// beside the staging ring (36, 40, 28 and 24 KiB stages).
#define GEMM_N160_STAGES 5
#define GEMM_N192_STAGES 4
#define GEMM_N96_STAGES 6
#define GEMM_N64_STAGES 8
// y's TMA box: 32 floats (one 128-byte swizzle span) by a consumer's 64 rows; a bf16 y's: 64 elements.
#define GEMM_Y_BOX_COLS 32
#define GEMM_Y16_BOX_COLS 64
#define GEMM_Y_BOX_ROWS 64
#define GEMM_Y_BOX_BYTES (GEMM_Y_BOX_COLS * GEMM_Y_BOX_ROWS * 4)
// The stages, the two consumers' staging rings, then the 2 * STAGES mbarriers, and the slack to align the
// dynamic window's start to 1024 bytes.
#define GEMM_TS_SMEM_FOR_BN(bn, stages, chunk, nbuf)                                                          \
  ((stages) * (GEMM_A_STAGE_BYTES + (bn) * GEMM_BK * 2) + 2 * (nbuf) * (chunk) * GEMM_Y_BOX_ROWS * 4 + \
   2 * (stages) * 8 + 1024)
#define GEMM_TS_SMEM_FOR(stages, chunk, nbuf) GEMM_TS_SMEM_FOR_BN(GEMM_BN, stages, chunk, nbuf)
#define GEMM_TS_SMEM_BYTES GEMM_TS_SMEM_FOR(GEMM_TS_STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF)
#define GEMM_MC_SMEM_BYTES GEMM_TS_SMEM_FOR(GEMM_MC_STAGES, GEMM_MC_CHUNK, GEMM_MC_NBUF)
#define GEMM_TS_N128_SMEM_BYTES GEMM_TS_SMEM_FOR_BN(128, GEMM_TS_N128_STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF)
#define GEMM_MC_N128_SMEM_BYTES GEMM_TS_SMEM_FOR_BN(128, GEMM_MC_N128_STAGES, GEMM_MC_CHUNK, GEMM_MC_NBUF)
#define GEMM_N160_SMEM_BYTES GEMM_TS_SMEM_FOR_BN(160, GEMM_N160_STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF)
#define GEMM_N192_SMEM_BYTES GEMM_TS_SMEM_FOR_BN(192, GEMM_N192_STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF)
#define GEMM_N96_SMEM_BYTES GEMM_TS_SMEM_FOR_BN(96, GEMM_N96_STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF)
#define GEMM_N64_SMEM_BYTES GEMM_TS_SMEM_FOR_BN(64, GEMM_N64_STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF)
// Named barriers of the two consumer warpgroups' epilogues (0 is __syncthreads, 1 the split-K ticket's).
#define GEMM_TS_BAR0 2

namespace omega_gemm {

// tma_load_2d, written into the same offset of every CTA in `mask` and completing `bytes` on the barrier
// at the same offset in each.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const void* tmap, uint64_t* bar, int c0, int c1,
                                                      uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(dst)),
      "l"(tmap), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}

// The box of y's descriptor at (c0 = column, c1 = row) from shared memory, as one bulk async-group member.
__device__ __forceinline__ void tma_store_2d(const void* tmap, const void* src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(tmap),
               "r"(smem_addr(src)), "r"(c0), "r"(c1)
               : "memory");
}

__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Waits until at most N of this thread's bulk groups still read shared memory.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// Waits until all of this thread's bulk groups are complete (their writes performed).
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

__device__ __forceinline__ void st_shared_f32x2(uint32_t addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(a), "f"(b) : "memory");
}

// The pair (lo, hi) rounded to bf16 (nearest even) as one word, lo in the low half (the lower address).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
}

__device__ __forceinline__ void st_shared_bf16x2(uint32_t addr, float lo, float hi) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(pack_bf16x2(lo, hi)) : "memory");
}

__device__ __forceinline__ void named_bar(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The epilogue's staging ring of one consumer warpgroup: NBUF buffers of CHUNK columns by 64 rows, each
// CHUNK / 32 boxes of y's descriptor, 128B-swizzled. `seq` counts the chunks the warpgroup has staged in
// this launch, so the ring's position carries from tile to tile.
template <int CHUNK, int NBUF>
struct StagingRing {
  static constexpr int BOXES = CHUNK / GEMM_Y_BOX_COLS;
  static constexpr int BUF_BYTES = BOXES * GEMM_Y_BOX_BYTES;
  static constexpr int BYTES = NBUF * BUF_BYTES;
  uint8_t* base;  // 1024-byte aligned
  uint32_t seq;
};

// Stages a consumer's 64 x BN accumulators (wgmma m64nBN layout, as store_acc reads it) through its ring
// into y's descriptor at rows row_base.., columns col_base... `leader` (thread 0 of the warpgroup) issues
// the stores and owns the bulk groups; `bar` is the warpgroup's named barrier. Boxes that start at or past
// M or N are not issued (the TMA unit would clip them whole).
template <int BN, int CHUNK, int NBUF>
__device__ __forceinline__ void store_acc_tma(const float (&acc)[BN / 2], StagingRing<CHUNK, NBUF>& ring,
                                              const void* tmap_y, uint32_t M, uint32_t N, uint32_t row_base,
                                              uint32_t col_base, int t128, int bar) {
  using Ring = StagingRing<CHUNK, NBUF>;
  static_assert(CHUNK % GEMM_Y_BOX_COLS == 0 && BN % CHUNK == 0, "chunks are whole boxes dividing the tile");
  const bool leader = t128 == 0;
  const int warp = t128 / 32, lane = t128 % 32;
  // This thread's two rows inside the 64-row box; both are r0 % 8 == lane / 4 modulo 8.
  const uint32_t r0 = warp * 16 + lane / 4;
  const uint32_t swz = (lane / 4) & 7;
  const uint32_t half = (lane & 1) * 8;  // the float2's byte offset inside its 16-byte chunk
#pragma unroll
  for (int c = 0; c < BN / CHUNK; ++c) {
    uint8_t* buf = ring.base + (ring.seq % NBUF) * Ring::BUF_BYTES;
    // The buffer's last store must have read it; the barrier tells the whole warpgroup.
    if (leader) bulk_wait_read<NBUF - 1>();
    named_bar(bar, 128);
#pragma unroll
    for (int jj = 0; jj < CHUNK / 8; ++jj) {
      const int j = c * (CHUNK / 8) + jj;  // accumulator column group: columns 8j .. 8j+7 of the tile
      const int box = jj / 4;
      // Column inside the box: 8 (jj % 4) + 2 (lane % 4); its 16-byte chunk 2 (jj % 4) + (lane % 4) / 2.
      const uint32_t chunk = 2 * (jj % 4) + (lane % 4) / 2;
      // Shared-window stores (STS), not generic ones through the pointer.
      const uint32_t p = smem_addr(buf) + box * GEMM_Y_BOX_BYTES + r0 * 128 + ((chunk ^ swz) * 16) + half;
      st_shared_f32x2(p, acc[4 * j], acc[4 * j + 1]);
      st_shared_f32x2(p + 8 * 128, acc[4 * j + 2], acc[4 * j + 3]);
    }
    // The generic-proxy writes above must be visible to the TMA unit (the async proxy) before it reads.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    named_bar(bar, 128);
    if (leader) {
#pragma unroll
      for (int b = 0; b < Ring::BOXES; ++b) {
        const uint32_t col = col_base + c * CHUNK + b * GEMM_Y_BOX_COLS;
        if (col < N && row_base < M) tma_store_2d(tmap_y, buf + b * GEMM_Y_BOX_BYTES, col, row_base);
      }
      bulk_commit();
    }
    ++ring.seq;
  }
}

// store_acc_tma for a bf16 y: each buffer of the ring takes one 64-column box (BN / 64 chunks, then the
// tile's last 64 columns where BN % 64 == 32), the accumulator pairs rounded to bf16.
// STM: the pairs are staged by `stmatrix` (fast.cu's epilogue) instead of one `st.shared.u32` each: a
// warp's m16n8 accumulator fragment is two 8 x 8 b16 matrices, so one `stmatrix.x4` stores two column
// groups of its 16 rows, each lane naming one 16-byte row of one matrix (its swizzled chunk).
template <int BN, int CHUNK, int NBUF, bool STM = false>
__device__ __forceinline__ void store_acc_tma_y16(const float (&acc)[BN / 2], StagingRing<CHUNK, NBUF>& ring,
                                                  const void* tmap_y, uint32_t M, uint32_t N, uint32_t row_base,
                                                  uint32_t col_base, int t128, int bar) {
  using Ring = StagingRing<CHUNK, NBUF>;
  static_assert(Ring::BUF_BYTES == GEMM_Y16_BOX_COLS * GEMM_Y_BOX_ROWS * 2, "a buffer is one bf16 box");
  static_assert(BN % 32 == 0 && BN >= GEMM_Y16_BOX_COLS, "the last chunk lies inside the tile");
  constexpr int CHUNKS = (BN + GEMM_Y16_BOX_COLS - 1) / GEMM_Y16_BOX_COLS;
  const bool leader = t128 == 0;
  const int warp = t128 / 32, lane = t128 % 32;
  const uint32_t r0 = warp * 16 + lane / 4;
  const uint32_t swz = (lane / 4) & 7;
  const uint32_t word = (lane % 4) * 4;  // the bf16 pair's byte offset inside its 16-byte chunk
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    // First column of the chunk: whole boxes, the last one pulled back inside the tile.
    const int first = c * GEMM_Y16_BOX_COLS < BN - GEMM_Y16_BOX_COLS ? c * GEMM_Y16_BOX_COLS : BN - GEMM_Y16_BOX_COLS;
    uint8_t* buf = ring.base + (ring.seq % NBUF) * Ring::BUF_BYTES;
    if (leader) bulk_wait_read<NBUF - 1>();
    named_bar(bar, 128);
    if constexpr (STM) {
      // Lanes 8i .. 8i + 7 address matrix i's rows: matrices 0, 1 are group jj's rows 0-7 and 8-15 of the
      // warp's 16, matrices 2, 3 group jj + 1's.
      const uint32_t row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
      for (int jj = 0; jj < GEMM_Y16_BOX_COLS / 8; jj += 2) {
        const int j = first / 8 + jj;
        const uint32_t p = smem_addr(buf) + row * 128 + (((jj + (lane >> 4)) ^ (lane & 7)) * 16);
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(p),
                     "r"(pack_bf16x2(acc[4 * j], acc[4 * j + 1])), "r"(pack_bf16x2(acc[4 * j + 2], acc[4 * j + 3])),
                     "r"(pack_bf16x2(acc[4 * j + 4], acc[4 * j + 5])), "r"(pack_bf16x2(acc[4 * j + 6], acc[4 * j + 7]))
                     : "memory");
      }
    } else {
#pragma unroll
      for (int jj = 0; jj < GEMM_Y16_BOX_COLS / 8; ++jj) {
        const int j = first / 8 + jj;  // accumulator column group: columns 8j .. 8j+7 of the tile
        const uint32_t p = smem_addr(buf) + r0 * 128 + ((jj ^ swz) * 16) + word;
        st_shared_bf16x2(p, acc[4 * j], acc[4 * j + 1]);
        st_shared_bf16x2(p + 8 * 128, acc[4 * j + 2], acc[4 * j + 3]);
      }
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    named_bar(bar, 128);
    if (leader) {
      const uint32_t col = col_base + first;
      if (col < N && row_base < M) tma_store_2d(tmap_y, buf, col, row_base);
      bulk_commit();
    }
    ++ring.seq;
  }
}

// The tile order of a cluster of CLUSTER CTAs along M: unit t is the group of CLUSTER vertically adjacent
// tiles (CLUSTER tm, tn) .. (CLUSTER tm + CLUSTER - 1, tn), in tile_of's grouped order over units.
template <int CLUSTER>
__device__ __forceinline__ void unit_of(int t, int tiles_m, int tiles_n, int* tm, int* tn) {
  if constexpr (CLUSTER == 1) {
    tile_of(t, tiles_m, tiles_n, tm, tn);
  } else {
    constexpr int GROUP = GEMM_GROUP_M / CLUSTER;
    const int units_m = (tiles_m + CLUSTER - 1) / CLUSTER;
    int per_group = GROUP * tiles_n;
    int group = t / per_group;
    int first_m = group * GROUP;
    int rows = min(units_m - first_m, GROUP);
    int in_group = t - group * per_group;
    *tm = first_m + in_group % rows;
    *tn = in_group / rows;
  }
}

// The shared memory of the TMA-store bodies (and the stream-K one): STAGES stages of x's and W's boxes,
// 1024-byte aligned for the 128B swizzle, then the two consumers' staging rings, then the full and empty
// barriers of every stage.
template <int STAGES, int CHUNK, int NBUF, int BN>
struct TsSmem {
  static constexpr int STAGE_BYTES = GEMM_A_STAGE_BYTES + BN * GEMM_BK * 2;
  uint8_t* stages;
  uint8_t* staging;
  uint64_t* full;
  uint64_t* empty;
  __device__ __forceinline__ explicit TsSmem(uint8_t* raw) {
    stages = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
    staging = stages + STAGES * STAGE_BYTES;
    full = reinterpret_cast<uint64_t*>(staging + 2 * StagingRing<CHUNK, NBUF>::BYTES);
    empty = full + STAGES;
  }
};

// Thread 0's setup: each stage's full barrier (the producer's expect_tx) and empty barrier (`releases`
// arrivals: every consumer warpgroup that reads the stage), made visible to the cluster, and the
// descriptors' tensormap-proxy acquire (y's only where it is stored through).
template <int STAGES>
__device__ __forceinline__ void ts_init(uint64_t* full, uint64_t* empty, uint32_t releases, const void* tmap_a,
                                        const void* tmap_b, const void* tmap_y, bool tma_y) {
  for (int s = 0; s < STAGES; ++s) {
    mbar_init(&full[s], 1);
    mbar_init(&empty[s], releases);
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(tmap_a) : "memory");
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(tmap_b) : "memory");
  if (tma_y) asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(tmap_y) : "memory");
}

// The module's unit order: unit_of's grouped order. The body takes the order as a type so the CUDA-side
// harness can time others (a Hilbert curve over the units) without touching the entries' code.
struct GroupedOrder {
  template <int CLUSTER>
  __device__ __forceinline__ static void of(int t, int tiles_m, int tiles_n, int* um, int* tn) {
    unit_of<CLUSTER>(t, tiles_m, tiles_n, um, tn);
  }
};

}  // namespace omega_gemm

// The body of the TMA-store entries: 128 x BN tiles (BN a multiple of 32 up to 256; B's box BN / CLUSTER
// rows), no K split. CLUSTER 1: one CTA per tile. CLUSTER 2: launched as 2-CTA clusters along x (grid
// even); the cluster walks pairs of tiles (2 pm + rank, tn) and W's stage slice is loaded half by each
// CTA, multicast to both.
// Y16: y is bf16 and stored only through its descriptor (the caller guarantees N % 8 == 0; a launch with
// another N traps rather than store the f32 pairs of the direct path).
// SWIGLU: y = silu(x . Wg^T) * (x . Wu^T), the gate+up projection's SwiGLU in its epilogue. W is the fused
// gate+up weight [2N, K] (gate rows first, then up: the layout the elementwise library's fused SwiGLU
// reads the product in) and y is [M, N]. A tile's BN accumulator columns are BN / 2 gate rows and the
// same BN / 2 up rows (two boxes of BN / 2 rows into one stage, tmap_b's box {64, BN / 2}), so a thread
// holds each output's gate and up values itself (accumulator groups j and j + BN / 16) and the tile
// stores BN / 2 columns through y's descriptor only (f32: N % 4 == 0, else a trap). silu is the
// elementwise SwiGLU's (elementwise/silu.cuh). One CTA a tile; a gate box of the last
// column tile that runs past N reads up rows, whose columns the store clips.
template <int STAGES, int CHUNK, int NBUF, int CLUSTER, int BN = GEMM_BN, class Order = omega_gemm::GroupedOrder,
          bool Y16 = false, bool SWIGLU = false, bool STM = false>
__device__ __forceinline__ void gemm_bf16_ts_body(const void* tmap_a, const void* tmap_b, const void* tmap_y, float* y,
                                                  uint32_t M, uint32_t N, uint32_t K) {
  using namespace omega_gemm;
  using Ring = StagingRing<CHUNK, NBUF>;
  static_assert(CLUSTER == 1 || CLUSTER == 2, "pairs at most: fast.cu saw larger clusters lose");
  static_assert(BN % GEMM_Y_BOX_COLS == 0 && BN <= 256, "whole y boxes a tile, one wgmma wide");
  static_assert(!SWIGLU || (CLUSTER == 1 && BN % 64 == 0), "SwiGLU: whole y boxes of BN / 2 columns, no cluster");
  // y's columns a tile stores.
  constexpr int BN_OUT = SWIGLU ? BN / 2 : BN;
  using Smem = TsSmem<STAGES, CHUNK, NBUF, BN>;
  constexpr int STAGE_BYTES = Smem::STAGE_BYTES;
  // The part of W's box each CTA of the cluster loads (and multicasts): BN / CLUSTER rows.
  constexpr int B_PART_BYTES = BN * GEMM_BK * 2 / CLUSTER;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const Smem sm(smem_raw);
  uint8_t* smem = sm.stages;
  uint64_t *full = sm.full, *empty = sm.empty;

  const int wg = threadIdx.x / 128;
  const uint32_t rank = CLUSTER == 1 ? 0 : cluster_rank();
  const int tiles_m = (M + GEMM_BM - 1) / GEMM_BM;
  const int tiles_n = (N + BN_OUT - 1) / BN_OUT;
  const int units = ((tiles_m + CLUSTER - 1) / CLUSTER) * tiles_n;
  const int kblocks = (K + GEMM_BK - 1) / GEMM_BK;
  const int first_unit = blockIdx.x / CLUSTER, unit_step = gridDim.x / CLUSTER;
  const bool tma_y = Y16 || SWIGLU || N % 4 == 0;
  if ((Y16 && N % 8 != 0) || (SWIGLU && N % 4 != 0)) __trap();

  // Every consumer warpgroup of the cluster reads every stage (W's part from each CTA).
  if (threadIdx.x == 0) ts_init<STAGES>(full, empty, 2 * CLUSTER, tmap_a, tmap_b, tmap_y, tma_y);
  // The peer's barriers must be initialised before this CTA's multicast or remote arrival reaches them.
  if constexpr (CLUSTER == 1)
    __syncthreads();
  else
    cluster_sync();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      uint32_t it = 0;
      for (int u = first_unit; u < units; u += unit_step) {
        int um, tn;
        Order::template of<CLUSTER>(u, tiles_m, tiles_n, &um, &tn);
        const int tm = um * CLUSTER + (int)rank;
        for (int kb = 0; kb < kblocks; ++kb, ++it) {
          uint32_t s = it % STAGES;
          // The plain (CTA-scope) wait for the peer's arrivals too: the producer only orders its TMA
          // writes after them, and an acquire.cluster would add an L1 invalidation per stage.
          mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
          uint8_t* a = smem + s * STAGE_BYTES;
          uint8_t* b = a + GEMM_A_STAGE_BYTES;
          // The whole stage lands here: x's box from this CTA, W's parts from every CTA of the cluster.
          mbar_expect_tx(&full[s], STAGE_BYTES);
          // A tile row past M (the odd last row of pairs) reads zeros: the TMA unit fills them.
          tma_load_2d(a, tmap_a, &full[s], kb * GEMM_BK, tm * GEMM_BM);
          if constexpr (SWIGLU) {
            tma_load_2d(b, tmap_b, &full[s], kb * GEMM_BK, tn * BN_OUT);
            tma_load_2d(b + BN_OUT * GEMM_BK * 2, tmap_b, &full[s], kb * GEMM_BK, (int)N + tn * BN_OUT);
          } else if constexpr (CLUSTER == 1)
            tma_load_2d(b, tmap_b, &full[s], kb * GEMM_BK, tn * BN);
          else
            tma_load_2d_multicast(b + rank * B_PART_BYTES, tmap_b, &full[s], kb * GEMM_BK,
                                  tn * BN + (int)rank * (BN / CLUSTER), (uint16_t)((1u << CLUSTER) - 1));
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
    float acc[BN / 2];
    uint32_t it = 0;
    for (int u = first_unit; u < units; u += unit_step) {
      int um, tn;
      Order::template of<CLUSTER>(u, tiles_m, tiles_n, &um, &tn);
      const int tm = um * CLUSTER + (int)rank;
      consume_kblocks<BN, STAGES, CLUSTER>(acc, smem, full, empty, consumer, t128, it, 0, kblocks);

      const uint32_t row_base = tm * GEMM_BM + consumer * 64;
      if constexpr (SWIGLU) {
        // Group j of the output is gate group j and up group j + BN / 16 (BN / 2 columns on).
        float h[BN_OUT / 2];
#pragma unroll
        for (int i = 0; i < BN_OUT / 2; ++i) {
          const float g = acc[i], u = acc[i + BN_OUT / 2];
          h[i] = omega_silu(g) * u;
        }
        if constexpr (Y16)
          store_acc_tma_y16<BN_OUT, CHUNK, NBUF, STM>(h, ring, tmap_y, M, N, row_base, tn * BN_OUT, t128,
                                                 GEMM_TS_BAR0 + consumer);
        else
          store_acc_tma<BN_OUT, CHUNK, NBUF>(h, ring, tmap_y, M, N, row_base, tn * BN_OUT, t128,
                                             GEMM_TS_BAR0 + consumer);
      } else if constexpr (Y16) {
        store_acc_tma_y16<BN, CHUNK, NBUF, STM>(acc, ring, tmap_y, M, N, row_base, tn * BN, t128,
                                                GEMM_TS_BAR0 + consumer);
      } else if (tma_y) {
        store_acc_tma<BN, CHUNK, NBUF>(acc, ring, tmap_y, M, N, row_base, tn * BN, t128, GEMM_TS_BAR0 + consumer);
      } else {
        const uint32_t row0 = row_base + warp * 16 + lane / 4;
        const uint32_t col0 = tn * BN + 2 * (lane % 4);
        store_acc<BN>(acc, y, M, N, row0, col0, tn * BN + BN <= N && (N % 2 == 0));
      }
    }
    // The ring must be read out before the CTA's shared memory goes, and y written before the grid ends.
    if (tma_y && t128 == 0) bulk_wait_all();
  }
  // A CTA must not leave while its peer may still multicast into it or arrive on its barriers.
  if constexpr (CLUSTER == 2) {
    __syncwarp();
    cluster_sync();
  }
}

// y = x . W^T through y's descriptor (tmap_y; N % 4 == 0) or, for other N, direct stores into y.
// Grid [min(tiles, SMs), 1, 1], block 384, dynamic shared GEMM_TS_SMEM_BYTES.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1)
    omega_gemm_bf16_tn_ts(const void* tmap_a, const void* tmap_b, const void* tmap_y, float* y, uint32_t M,
                          uint32_t N, uint32_t K) {
  gemm_bf16_ts_body<GEMM_TS_STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF, 1>(tmap_a, tmap_b, tmap_y, y, M, N, K);
}

// The 2-CTA cluster form: grid an even number of CTAs (2 * (SMs / 2) when there are enough tile pairs),
// tmap_b's box {64, 128} (half of W's 256-row slice), dynamic shared GEMM_MC_SMEM_BYTES.
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(GEMM_THREADS, 1)
    omega_gemm_bf16_tn_mc(const void* tmap_a, const void* tmap_b, const void* tmap_y, float* y, uint32_t M,
                          uint32_t N, uint32_t K) {
  gemm_bf16_ts_body<GEMM_MC_STAGES, GEMM_MC_CHUNK, GEMM_MC_NBUF, 2>(tmap_a, tmap_b, tmap_y, y, M, N, K);
}

// The narrow tile (128 x 128) with the TMA-store epilogue: tmap_b's box {64, 128}, grid
// [min(tiles, SMs), 1, 1] with tiles = ceil(M/128) * ceil(N/128), dynamic shared GEMM_TS_N128_SMEM_BYTES.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1)
    omega_gemm_bf16_tn_ts_n128(const void* tmap_a, const void* tmap_b, const void* tmap_y, float* y, uint32_t M,
                               uint32_t N, uint32_t K) {
  gemm_bf16_ts_body<GEMM_TS_N128_STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF, 1, 128>(tmap_a, tmap_b, tmap_y, y, M, N, K);
}

// The narrow tile in 2-CTA clusters: tmap_b's box {64, 64} (half of the pair's 128 W rows), grid as the
// wide cluster entry's with pairs = ceil(tiles_m / 2) * ceil(N/128), dynamic shared GEMM_MC_N128_SMEM_BYTES.
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(GEMM_THREADS, 1)
    omega_gemm_bf16_tn_mc_n128(const void* tmap_a, const void* tmap_b, const void* tmap_y, float* y, uint32_t M,
                               uint32_t N, uint32_t K) {
  gemm_bf16_ts_body<GEMM_MC_N128_STAGES, GEMM_MC_CHUNK, GEMM_MC_NBUF, 2, 128>(tmap_a, tmap_b, tmap_y, y, M, N, K);
}

// The fitted widths, each in both forms: tmap_b's box {64, W} one CTA a tile, {64, W / 2} in 2-CTA
// clusters; grids as the wide entries' with W-column tiles, dynamic shared GEMM_N<W>_SMEM_BYTES.
#define OMEGA_GEMM_TS_FITTED(W)                                                                                \
  extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1) omega_gemm_bf16_tn_ts_n##W(                     \
      const void* tmap_a, const void* tmap_b, const void* tmap_y, float* y, uint32_t M, uint32_t N, uint32_t K) { \
    gemm_bf16_ts_body<GEMM_N##W##_STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF, 1, W>(tmap_a, tmap_b, tmap_y, y, M, N, K); \
  }                                                                                                           \
  extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(GEMM_THREADS, 1)                     \
      omega_gemm_bf16_tn_mc_n##W(const void* tmap_a, const void* tmap_b, const void* tmap_y, float* y,         \
                                 uint32_t M, uint32_t N, uint32_t K) {                                          \
    gemm_bf16_ts_body<GEMM_N##W##_STAGES, GEMM_MC_CHUNK, GEMM_MC_NBUF, 2, W>(tmap_a, tmap_b, tmap_y, y, M, N, K); \
  }
OMEGA_GEMM_TS_FITTED(160)
OMEGA_GEMM_TS_FITTED(192)
OMEGA_GEMM_TS_FITTED(96)
OMEGA_GEMM_TS_FITTED(64)

// Every TMA-store entry above with a bf16 y (`_y16`): the same grid, B box and shared memory; tmap_y is
// y's bf16 descriptor (N % 8 == 0) and y is not read. A harness that times other instantiations defines
// OMEGA_GEMM_NO_Y16_ENTRIES to leave these twelve out of its build (nvcc takes minutes over them).
#ifndef OMEGA_GEMM_NO_Y16_ENTRIES
#define OMEGA_GEMM_TS_Y16(NAME, STAGES, CHUNK, NBUF, CLUSTER, BN, DIMS)                                        \
  extern "C" __global__ void DIMS __launch_bounds__(GEMM_THREADS, 1)                                          \
      NAME(const void* tmap_a, const void* tmap_b, const void* tmap_y, float* y, uint32_t M, uint32_t N,         \
           uint32_t K) {                                                                                        \
    gemm_bf16_ts_body<STAGES, CHUNK, NBUF, CLUSTER, BN, omega_gemm::GroupedOrder, true>(tmap_a, tmap_b, tmap_y, \
                                                                                        y, M, N, K);            \
  }
#define OMEGA_CLUSTER_PAIR __cluster_dims__(2, 1, 1)
#define OMEGA_NO_CLUSTER
OMEGA_GEMM_TS_Y16(omega_gemm_bf16_tn_ts_y16, GEMM_TS_STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF, 1, GEMM_BN, OMEGA_NO_CLUSTER)
OMEGA_GEMM_TS_Y16(omega_gemm_bf16_tn_mc_y16, GEMM_MC_STAGES, GEMM_MC_CHUNK, GEMM_MC_NBUF, 2, GEMM_BN, OMEGA_CLUSTER_PAIR)
OMEGA_GEMM_TS_Y16(omega_gemm_bf16_tn_ts_n128_y16, GEMM_TS_N128_STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF, 1, 128,
                  OMEGA_NO_CLUSTER)
OMEGA_GEMM_TS_Y16(omega_gemm_bf16_tn_mc_n128_y16, GEMM_MC_N128_STAGES, GEMM_MC_CHUNK, GEMM_MC_NBUF, 2, 128,
                  OMEGA_CLUSTER_PAIR)
#define OMEGA_GEMM_TS_FITTED_Y16(W)                                                                          \
  OMEGA_GEMM_TS_Y16(omega_gemm_bf16_tn_ts_n##W##_y16, GEMM_N##W##_STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF, 1, W,  \
                    OMEGA_NO_CLUSTER)                                                                        \
  OMEGA_GEMM_TS_Y16(omega_gemm_bf16_tn_mc_n##W##_y16, GEMM_N##W##_STAGES, GEMM_MC_CHUNK, GEMM_MC_NBUF, 2, W,  \
                    OMEGA_CLUSTER_PAIR)
OMEGA_GEMM_TS_FITTED_Y16(160)
OMEGA_GEMM_TS_FITTED_Y16(192)
OMEGA_GEMM_TS_FITTED_Y16(96)
OMEGA_GEMM_TS_FITTED_Y16(64)
#endif  // OMEGA_GEMM_NO_Y16_ENTRIES

// The gate+up GEMM with SwiGLU in its epilogue (the body's SWIGLU form), on BN accumulator columns a tile
// (BN / 2 gate and BN / 2 up rows of W, BN / 2 columns of y): W is the fused gate+up weight [2N, K]
// (gate rows first), tmap_b's box {64, BN / 2}, y [M, N]; N is y's width. Grid [min(tiles, SMs), 1, 1]
// with tiles = ceil(M/128) * ceil(N / (BN/2)), dynamic shared that of the TMA-store entry of width BN
// (GEMM_TS_SMEM_BYTES, GEMM_N192_SMEM_BYTES, GEMM_TS_N128_SMEM_BYTES). f32 y: tmap_y is y's f32 descriptor
// (N % 4 == 0, else a trap); `_y16`: y's bf16 descriptor (N % 8 == 0). `y` is not read.
#define OMEGA_GEMM_SWIGLU(NAME, STAGES, BN, Y16)                                                             \
  extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1)                                              \
      NAME(const void* tmap_a, const void* tmap_b, const void* tmap_y, float* y, uint32_t M, uint32_t N,         \
           uint32_t K) {                                                                                        \
    gemm_bf16_ts_body<STAGES, GEMM_TS_CHUNK, GEMM_TS_NBUF, 1, BN, omega_gemm::GroupedOrder, Y16, true>(        \
        tmap_a, tmap_b, tmap_y, y, M, N, K);                                                                   \
  }
OMEGA_GEMM_SWIGLU(omega_gemm_bf16_tn_swiglu_n256, GEMM_TS_STAGES, 256, false)
OMEGA_GEMM_SWIGLU(omega_gemm_bf16_tn_swiglu_n192, GEMM_N192_STAGES, 192, false)
OMEGA_GEMM_SWIGLU(omega_gemm_bf16_tn_swiglu_n128, GEMM_TS_N128_STAGES, 128, false)
#ifndef OMEGA_GEMM_NO_Y16_ENTRIES
OMEGA_GEMM_SWIGLU(omega_gemm_bf16_tn_swiglu_n256_y16, GEMM_TS_STAGES, 256, true)
OMEGA_GEMM_SWIGLU(omega_gemm_bf16_tn_swiglu_n192_y16, GEMM_N192_STAGES, 192, true)
OMEGA_GEMM_SWIGLU(omega_gemm_bf16_tn_swiglu_n128_y16, GEMM_TS_N128_STAGES, 128, true)
#endif  // OMEGA_GEMM_NO_Y16_ENTRIES
