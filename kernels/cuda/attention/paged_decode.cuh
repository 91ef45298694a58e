// Paged decode attention over a bf16 KV pool: split-KV partials, then a log-sum-exp combine.
//
// One CTA per (split, kv head, sequence): grid [splits, kv_heads, batch], 128 threads (4 warps). The
// sequence's tokens go in 16-token tiles (a page of 16 tokens is one tile, a page of 64 four); split s takes
// tiles [s * tiles_per_split, (s + 1) * tiles_per_split) and warp w of its CTA every fourth of them.
//
// The `group` (<= 16) query heads of the KV head are the rows of one mma.sync m16n8k16 (rows past the group
// are zero): S = Q . K^T takes head_dim / 16 MMAs per 8 tokens, with Q's fragments held in registers (bf16,
// nearest even) for the whole CTA; P (bf16) . V takes the S accumulators as its A fragments directly, as
// FlashAttention-2 does. Each warp streams its tiles into shared memory with 16-byte cp.async (a tile's K
// and V rows are contiguous in the page, so a page is read whole), STAGES deep (2, or DECODE_DEEP_STAGES in
// the `_deep` entries, whose 139 KB at head_dim 128 leave one CTA an SM; taken only when asked for: on the
// H100 three tiles in flight a warp ran no faster than one, src/libs/attention/plan.rs); rows past the sequence's
// length are zero-filled, never read, so stale pool bytes cannot reach the sums. K fragments are read as
// 32-bit words of a row padded by 16 bytes (no bank conflicts); V's, transposed, with ldmatrix.x4.trans.
//
// The softmax is online, in base 2 (scores times scale * log2 e): each warp keeps a running max and sum per
// row; the 4 warps merge through shared memory, and the CTA writes its split's normalized partial output
// part_o[((b * q_heads + h) * splits + s) * head_dim + d] and its log2-sum-exp part_lse[...] (-inf for a
// split with no tokens). omega_attn_combine merges the splits: out = sum_s 2^(lse_s - M) o_s / sum_s
// 2^(lse_s - M), M = max lse_s, and writes f32 or bf16; a sequence of length 0 gets zeros.
//
// Three forms merge the splits (omega_attn::Merge): a second launch (omega_attn_combine), the cluster of a
// (sequence, KV head)'s splits through distributed shared memory, or a ticket: each CTA publishes its
// partial, takes a ticket on its (sequence, KV head)'s counter, and the CTA drawing the last one merges
// the pair's partials from L2 into `out` and puts the counter back to zero for the next launch.
//
// The page table and lengths are device memory the library cannot check: a length is clamped to [0,
// max_pages * page_tokens] and a page index outside [0, pages) skips its tile, each flagged in *status.
#pragma once
#include "common.cuh"

#define DECODE_THREADS 128
#define DECODE_WARPS 4
#define DECODE_TILE 16
#define DECODE_STAGES 2
#define DECODE_DEEP_STAGES 4
#define ATTN_Q_BF16 1u    // flags: q is bf16 (else f32)
#define ATTN_OUT_BF16 1u  // combine flags: out is bf16 (else f32)
#define COMBINE_THREADS 256
#define COMBINE_MAX_SPLITS 256
#define COMBINE_EARLY 4  // partials a combine thread loads before the weights

namespace omega_attn {

// Dynamic shared memory of the decode kernel for head_dim D and STAGES pipeline stages: the stages (K and V
// tiles of 16 rows of D + 8 elements per warp and stage) or the merge's per-warp accumulators, whichever is
// larger.
template <int D, int STAGES = DECODE_STAGES>
struct DecodeSmem {
  static constexpr int ROW = D + 8;
  static constexpr int STAGE_ELEMS = 2 * DECODE_TILE * ROW;  // K then V
  static constexpr int PIPE_BYTES = DECODE_WARPS * STAGES * STAGE_ELEMS * 2;
  static constexpr int MERGE_BYTES = DECODE_WARPS * 16 * (D + 2) * 4;
  static constexpr int BYTES = PIPE_BYTES > MERGE_BYTES ? PIPE_BYTES : MERGE_BYTES;
};

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// How a decode's splits become its output (the file's header).
enum class Merge { Launch, Cluster, Ticket };

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; `bytes` 0 stores zeros without reading.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// Where one tile's rows come from, or that it is skipped.
struct TileSrc {
  const uint16_t* k;  // row 0 of the tile's K (V is v_offset further)
  int rows;           // valid rows (0: skipped or past the length)
};

struct DecodeArgs {
  const void* q;
  const uint16_t* pool;
  const int* table;
  const int* lens;
  float* part_o;
  float* part_lse;
  unsigned* status;
  uint64_t head_stride, v_offset, page_stride;
  uint32_t page_tokens, pages, max_pages, q_heads, group, splits, tiles_per_split;
  float scale_log2;
  uint32_t flags;
};

// The page-table entry of sequence b's tile `tile`, or -1 past the table's row (tiles_in_row of them).
__device__ __forceinline__ int page_of(const DecodeArgs& a, uint32_t b, uint32_t tile, uint32_t tiles_in_row) {
  return tile < tiles_in_row ? a.table[(uint64_t)b * a.max_pages + tile * DECODE_TILE / a.page_tokens] : -1;
}

// Tile `tile` (below the length) of KV head kvh, whose page-table entry is `page`.
template <int D>
__device__ __forceinline__ TileSrc tile_src(const DecodeArgs& a, uint32_t kvh, uint32_t tile, int page, int len) {
  const uint32_t token0 = tile * DECODE_TILE;
  if (page < 0 || (uint32_t)page >= a.pages) {
    if ((threadIdx.x & 31) == 0) atomicOr(a.status, ATTN_STATUS_BAD_PAGE);
    return TileSrc{a.pool, 0};
  }
  const uint16_t* k = a.pool + (uint64_t)page * a.page_stride + kvh * a.head_stride +
                      (uint64_t)(token0 % a.page_tokens) * D;
  const int rows = len - (int)token0;
  return TileSrc{k, rows < DECODE_TILE ? rows : DECODE_TILE};
}

// The warp's copies of one tile into stage `st` (K rows then V rows, each D + 8 elements apart).
template <int D>
__device__ __forceinline__ void load_tile(const DecodeArgs& a, TileSrc t, uint16_t* st) {
  constexpr int CHUNKS = D / 8;  // 16-byte chunks per row
  constexpr int ROW = DecodeSmem<D>::ROW;
  const uint32_t lane = threadIdx.x & 31;
#pragma unroll
  for (int c = lane; c < DECODE_TILE * CHUNKS; c += 32) {
    const int row = c / CHUNKS, col = (c % CHUNKS) * 8;
    const bool ok = row < t.rows;
    const uint16_t* src = ok ? t.k + (uint64_t)row * D + col : a.pool;
    cp_async16(st + row * ROW + col, src, ok ? 16 : 0);
    cp_async16(st + (DECODE_TILE + row) * ROW + col, ok ? src + a.v_offset : a.pool, ok ? 16 : 0);
  }
}

// The cluster form's per-CTA partial after the merge: its normalized output rows and log2-sum-exps, placed
// past the merge's accumulators (inside the pipeline's bytes, so the dynamic shared memory is the same).
template <int D>
struct ClusterPart {
  static constexpr int O_FLOATS = DecodeSmem<D>::MERGE_BYTES / 4;
  static constexpr int LSE_FLOATS = O_FLOATS + 16 * D;
  static_assert((LSE_FLOATS + 16) * 4 <= DecodeSmem<D>::BYTES, "the partial fits the kernel's shared memory");
};

__device__ __forceinline__ void cluster_barrier() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The f32 at `local` in the shared memory of cluster rank `rank`.
__device__ __forceinline__ float ld_cluster_f32(const float* local, uint32_t rank) {
  uint32_t remote;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(local)), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

// Four output elements at `at`, `v` times `k`, as f32 or (ATTN_OUT_BF16 in `flags`) bf16; element-wise
// stores, as `out` is aligned to its element only.
__device__ __forceinline__ void store_quad(void* out, uint64_t at, float4 v, float k, uint32_t flags) {
  const float vals[4] = {v.x * k, v.y * k, v.z * k, v.w * k};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (flags & ATTN_OUT_BF16)
      static_cast<__nv_bfloat16*>(out)[at + j] = __float2bfloat16_rn(vals[j]);
    else
      static_cast<float*>(out)[at + j] = vals[j];
  }
}

// The ticket form's merge, by the (sequence, KV head)'s last CTA: the group's rows `row0 ..`, of a.splits
// splits each, read from L2 (ld.global.cg: the partials were written by other SMs, whose stores this
// SM's L1 has not seen). `wts` (shared, group * splits + 16 floats) takes the log2-sum-exps, then the
// weights; each warp reduces rows warp, warp + 4, ..; then each thread sums float4s of the rows' outputs
// over the splits, eight loads in flight.
template <int D>
__device__ void ticket_merge(const DecodeArgs& a, uint64_t row0, float* wts, void* out, uint32_t out_flags) {
  static_assert((4 + 16 * COMBINE_MAX_SPLITS + 16) * 4 <= DecodeSmem<D>::BYTES, "the weights fit the smem");
  const uint32_t splits = a.splits, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* inv = wts + a.group * splits;
  const float* lse = a.part_lse + row0 * splits;  // the group's rows are consecutive
  for (uint32_t i = threadIdx.x; i < a.group * splits; i += DECODE_THREADS) wts[i] = __ldcg(lse + i);
  __syncthreads();
  for (uint32_t r = warp; r < a.group; r += DECODE_WARPS) {
    float* w = wts + r * splits;
    float mx = -INFINITY;
    for (uint32_t s = lane; s < splits; s += 32) mx = fmaxf(mx, w[s]);
    mx = warp_max(mx);
    float total = 0.0f;
    for (uint32_t s = lane; s < splits; s += 32) {
      const float e = mx == -INFINITY ? 0.0f : exp2f(w[s] - mx);
      w[s] = e;
      total += e;
    }
    total = warp_sum(total);
    if (lane == 0) inv[r] = total > 0.0f ? 1.0f / total : 0.0f;
  }
  __syncthreads();
  constexpr uint32_t QUADS = D / 4;
  for (uint32_t i = threadIdx.x; i < a.group * QUADS; i += DECODE_THREADS) {
    const uint32_t r = i / QUADS, qd = i % QUADS;
    const float* w = wts + r * splits;
    const float4* po = reinterpret_cast<const float4*>(a.part_o + (row0 + r) * splits * D) + qd;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
    for (uint32_t s = 0; s < splits; ++s) {
      const float4 v = __ldcg(po + (uint64_t)s * QUADS);
      acc.x += w[s] * v.x;
      acc.y += w[s] * v.y;
      acc.z += w[s] * v.z;
      acc.w += w[s] * v.w;
    }
    store_quad(out, (row0 + r) * D + 4 * qd, acc, inv[r], out_flags);
  }
}

// CLUSTER: the grid runs in clusters of gridDim.x CTAs (the splits of one sequence's KV head, at most 8),
// so split s is cluster rank s, and split s takes tiles [s * ceil(tiles / splits), +ceil(tiles / splits))
// of the sequence's own length (`tiles_per_split` is not read). Each CTA leaves its partial in its own
// shared memory, the cluster meets at a barrier, and the splits' CTAs merge the partials through
// distributed shared memory into `out` (as omega_attn_combine merges them: out = sum_s 2^(lse_s - M) o_s
// / sum_s 2^(lse_s - M), in split order), CTA s taking every gridDim.x-th of the group's head_dim-wide
// rows' elements; a second barrier keeps each
// CTA's shared memory until its neighbours have read it. One launch where the split form takes two (the
// decode and omega_attn_combine): in the Qwen3 step at 1K tokens 9.3 us a layer against 10.1 at batch 1,
// 30.3 against 31.5 at batch 32 (docs/perf/2026-12-04-s12-qwen3-step.md).
//
// TICKET (the split form's slices and partials): after its partial is written and fenced, each CTA adds
// one to tickets[b * kv_heads + kvh]; the CTA that finds gridDim.x - 1 there is the pair's last, so every
// other split's partial is visible to it (their fences came before their increments), and it merges them
// (ticket_merge) and zeroes the counter, which no other CTA of this launch touches again.
template <int D, Merge MERGE, int STAGES>
__device__ void paged_decode(const DecodeArgs& a, void* out, uint32_t out_flags, unsigned* tickets) {
  constexpr bool CLUSTER = MERGE == Merge::Cluster;
  constexpr int KS = D / 16;  // k16 steps of S = Q K^T
  constexpr int DN = D / 8;   // n8 tiles of the output
  constexpr int ROW = DecodeSmem<D>::ROW;
  constexpr int STAGE_ELEMS = DecodeSmem<D>::STAGE_ELEMS;
  static_assert(STAGES >= 2, "a stage computes while the next ones land");
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint16_t* smem = reinterpret_cast<uint16_t*>(smem_raw);
  const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t g = lane >> 2, t4 = lane & 3;
  const uint32_t split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int cap = (int)min((uint64_t)a.max_pages * a.page_tokens, (uint64_t)0x7fffffff);
  const uint32_t tiles_in_row = (uint32_t)(((uint64_t)a.max_pages * a.page_tokens) / DECODE_TILE);

  // The page-table entries of the warp's first STAGES tiles. The split forms' slices do not depend on the
  // length, so theirs (and Q, below) are read while the length is, not after it: the CTA's start is then
  // two dependent loads (these, then the tiles) where it was four (length, Q, table, tiles).
  int pages_ahead[STAGES];
  if constexpr (!CLUSTER) {
#pragma unroll
    for (int k = 0; k < STAGES; ++k)
      pages_ahead[k] = page_of(a, b, split * a.tiles_per_split + warp + k * DECODE_WARPS, tiles_in_row);
  }

  // Q's A fragments: rows g and g + 8 of the group, columns 16 ks + 2 t4 (+1, +8, +9).
  uint32_t qa[KS][4];
  {
    const uint32_t h0 = kvh * a.group;
    const bool r0 = g < a.group, r1 = g + 8 < a.group;
    const uint64_t base0 = ((uint64_t)b * a.q_heads + h0 + g) * D, base1 = base0 + 8 * (uint64_t)D;
    auto qv = [&](bool ok, uint64_t i) -> float {
      if (!ok) return 0.0f;
      if (a.flags & ATTN_Q_BF16) return bf16_bits_to_f32(static_cast<const uint16_t*>(a.q)[i]);
      return static_cast<const float*>(a.q)[i];
    };
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      const uint32_t c = ks * 16 + 2 * t4;
      qa[ks][0] = pack_bf16x2(qv(r0, base0 + c), qv(r0, base0 + c + 1));
      qa[ks][1] = pack_bf16x2(qv(r1, base1 + c), qv(r1, base1 + c + 1));
      qa[ks][2] = pack_bf16x2(qv(r0, base0 + c + 8), qv(r0, base0 + c + 9));
      qa[ks][3] = pack_bf16x2(qv(r1, base1 + c + 8), qv(r1, base1 + c + 9));
    }
  }

  const int len = clamped_len(a.lens, b, cap, a.status, split == 0 && kvh == 0 && threadIdx.x == 0);
  const uint32_t tiles = ((uint32_t)len + DECODE_TILE - 1) / DECODE_TILE;
  // The cluster form divides the sequence's own tiles among its splits (a launch planned for the table's
  // capacity decodes shorter sequences with every split busy); the split form keeps the planned slices.
  const uint32_t per_split = CLUSTER ? (tiles + gridDim.x - 1) / gridDim.x : a.tiles_per_split;
  const uint32_t first = split * per_split;
  const uint32_t last = min(tiles, first + per_split);
  if constexpr (CLUSTER) {
#pragma unroll
    for (int k = 0; k < STAGES; ++k) pages_ahead[k] = page_of(a, b, first + warp + k * DECODE_WARPS, tiles_in_row);
  }

  float o[DN][4];
#pragma unroll
  for (int i = 0; i < DN; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  // The warp's tiles are first + warp, + DECODE_WARPS, ...; STAGES - 1 of them in flight ahead of the one
  // computed. `rows[k]` is the valid rows of the k-th oldest tile in flight (rows[0]: the one computed next).
  // A tile's page-table entry is read an iteration before its copies are issued (`next_page`), so the
  // copies never wait on the table.
  uint16_t* stages = smem + warp * STAGES * STAGE_ELEMS;
  int rows[STAGES - 1];
#pragma unroll
  for (int k = 0; k < STAGES - 1; ++k) {
    const uint32_t t = first + warp + k * DECODE_WARPS;
    const TileSrc src = t < last ? tile_src<D>(a, kvh, t, pages_ahead[k], len) : TileSrc{a.pool, 0};
    if (t < last) load_tile<D>(a, src, stages + k * STAGE_ELEMS);
    cp_async_commit();
    rows[k] = src.rows;
  }
  int next_page = pages_ahead[STAGES - 1];
  for (uint32_t it = 0, tile = first + warp; tile < last; ++it, tile += DECODE_WARPS) {
    uint16_t* st = stages + (it % STAGES) * STAGE_ELEMS;
    const uint32_t next = tile + (STAGES - 1) * DECODE_WARPS;
    const TileSrc nsrc = next < last ? tile_src<D>(a, kvh, next, next_page, len) : TileSrc{a.pool, 0};
    next_page = page_of(a, b, next + DECODE_WARPS, next + DECODE_WARPS < last ? tiles_in_row : 0);
    // Its stage was computed an iteration ago, and the __syncwarp closing that iteration ordered the reads.
    if (next < last) load_tile<D>(a, nsrc, stages + ((it + STAGES - 1) % STAGES) * STAGE_ELEMS);
    cp_async_commit();
    cp_async_wait<STAGES - 1>();
    __syncwarp();

    // S = Q K^T for tokens 8 nt + 2 t4 (+1) of the tile, rows g and g + 8.
    float s[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
      const uint16_t* krow = st + (nt * 8 + g) * ROW + 2 * t4;
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(krow + ks * 16);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(krow + ks * 16 + 8);
        mma_bf16(s[nt], qa[ks], b0, b1);
      }
    }
    const int valid = rows[0];
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int tok = nt * 8 + 2 * t4 + (j & 1);
        s[nt][j] = tok < valid ? s[nt][j] * a.scale_log2 : -INFINITY;
        mx[j >> 1] = fmaxf(mx[j >> 1], s[nt][j]);
      }
    uint32_t pa[4];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(m[r], mx[r]);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2f(m[r] - m_use);
      m[r] = m_new;
      l[r] *= alpha;
#pragma unroll
      for (int i = 0; i < DN; ++i) {
        o[i][2 * r] *= alpha;
        o[i][2 * r + 1] *= alpha;
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        s[nt][2 * r] = exp2f(s[nt][2 * r] - m_use);
        s[nt][2 * r + 1] = exp2f(s[nt][2 * r + 1] - m_use);
        l[r] += s[nt][2 * r] + s[nt][2 * r + 1];
      }
    }
    pa[0] = pack_bf16x2(s[0][0], s[0][1]);
    pa[1] = pack_bf16x2(s[0][2], s[0][3]);
    pa[2] = pack_bf16x2(s[1][0], s[1][1]);
    pa[3] = pack_bf16x2(s[1][2], s[1][3]);

    // O += P V: V^T fragments by ldmatrix.trans, two n8 tiles of the output per x4.
    const uint16_t* vt = st + DECODE_TILE * ROW;
#pragma unroll
    for (int dn = 0; dn < DN; dn += 2) {
      uint32_t vb[4];
      ldmatrix_x4_trans(vb, vt + (lane & 15) * ROW + (dn + (lane >> 4)) * 8);
      mma_bf16(o[dn], pa, vb[0], vb[1]);
      mma_bf16(o[dn + 1], pa, vb[2], vb[3]);
    }
    __syncwarp();
#pragma unroll
    for (int k = 0; k + 1 < STAGES - 1; ++k) rows[k] = rows[k + 1];
    rows[STAGES - 2] = nsrc.rows;
  }
  cp_async_wait<0>();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  __syncthreads();  // every warp is done with the stages: the merge reuses them

  // The merge: per warp 16 rows of D accumulators, then its max and sum per row.
  constexpr int MROW = D + 2;
  float* mw = reinterpret_cast<float*>(smem_raw) + warp * 16 * MROW;
#pragma unroll
  for (int i = 0; i < DN; ++i) {
    const int c = i * 8 + 2 * t4;
    mw[g * MROW + c] = o[i][0];
    mw[g * MROW + c + 1] = o[i][1];
    mw[(g + 8) * MROW + c] = o[i][2];
    mw[(g + 8) * MROW + c + 1] = o[i][3];
  }
  if (t4 == 0) {
    mw[g * MROW + D] = m[0];
    mw[g * MROW + D + 1] = l[0];
    mw[(g + 8) * MROW + D] = m[1];
    mw[(g + 8) * MROW + D + 1] = l[1];
  }
  __syncthreads();
  const float* mall = reinterpret_cast<const float*>(smem_raw);
  for (uint32_t i = threadIdx.x; i < a.group * D; i += DECODE_THREADS) {
    const uint32_t r = i / D, d = i % D;
    float mmax = -INFINITY;
#pragma unroll
    for (int w = 0; w < DECODE_WARPS; ++w) mmax = fmaxf(mmax, mall[(w * 16 + r) * MROW + D]);
    float sum = 0.0f, acc = 0.0f;
    if (mmax != -INFINITY) {
#pragma unroll
      for (int w = 0; w < DECODE_WARPS; ++w) {
        const float* wr = mall + (w * 16 + r) * MROW;
        const float f = exp2f(wr[D] - mmax);
        sum += wr[D + 1] * f;
        acc += wr[d] * f;
      }
    }
    if constexpr (CLUSTER) {
      float* part = reinterpret_cast<float*>(smem_raw);
      part[ClusterPart<D>::O_FLOATS + r * D + d] = sum > 0.0f ? acc / sum : 0.0f;
      if (d == 0) part[ClusterPart<D>::LSE_FLOATS + r] = sum > 0.0f ? mmax + log2f(sum) : -INFINITY;
    } else {
      const uint64_t part = ((uint64_t)b * a.q_heads + kvh * a.group + r) * a.splits + split;
      a.part_o[part * D + d] = sum > 0.0f ? acc / sum : 0.0f;
      if (d == 0) a.part_lse[part] = sum > 0.0f ? mmax + log2f(sum) : -INFINITY;
    }
  }
  if constexpr (MERGE == Merge::Ticket) {
    __threadfence();  // this thread's partial stores before the CTA's ticket
    __syncthreads();  // every thread's, and the reads of the merge's accumulators, are done
    uint32_t* last = reinterpret_cast<uint32_t*>(smem_raw);
    if (threadIdx.x == 0) {
      unsigned* counter = tickets + (uint64_t)b * gridDim.y + kvh;
      const bool is_last = atomicAdd(counter, 1u) == gridDim.x - 1;
      if (is_last) *counter = 0;
      *last = is_last;
    }
    __syncthreads();
    if (*last == 0) return;
    __threadfence();  // the other splits' partials, published before their tickets, are read after ours
    ticket_merge<D>(a, b * a.q_heads + kvh * a.group, reinterpret_cast<float*>(smem_raw) + 4, out, out_flags);
  }
  if constexpr (CLUSTER) {
    cluster_barrier();
    const float* part = reinterpret_cast<const float*>(smem_raw);
    const uint32_t ranks = gridDim.x;
    for (uint32_t i = split * DECODE_THREADS + threadIdx.x; i < a.group * D; i += ranks * DECODE_THREADS) {
      const uint32_t r = i / D;
      float lse[8], mmax = -INFINITY;
#pragma unroll
      for (uint32_t s = 0; s < 8; ++s) {
        lse[s] = s < ranks ? ld_cluster_f32(part + ClusterPart<D>::LSE_FLOATS + r, s) : -INFINITY;
        mmax = fmaxf(mmax, lse[s]);
      }
      float total = 0.0f, acc = 0.0f;
      if (mmax != -INFINITY) {
#pragma unroll
        for (uint32_t s = 0; s < 8; ++s) {
          if (s < ranks) {
            const float w = exp2f(lse[s] - mmax);
            total += w;
            acc += w * ld_cluster_f32(part + ClusterPart<D>::O_FLOATS + i, s);
          }
        }
      }
      const float v = total > 0.0f ? acc / total : 0.0f;
      const uint64_t at = ((uint64_t)b * a.q_heads + kvh * a.group) * D + i;
      if (out_flags & ATTN_OUT_BF16)
        static_cast<__nv_bfloat16*>(out)[at] = __float2bfloat16_rn(v);
      else
        static_cast<float*>(out)[at] = v;
    }
    cluster_barrier();
  }
}

}  // namespace omega_attn

// Every entry of a form: both depths at each compiled head dim, named omega_paged_decode_<form>[deep_]bf16_d<D>
// (src/core/kernels/attention.rs's PAGED_DECODE spells them out).
#define OMEGA_PAGED_DECODE_EVERY(MACRO, FORM)                                     \
  MACRO(omega_paged_decode_##FORM##bf16_d32, 32, DECODE_STAGES)                   \
  MACRO(omega_paged_decode_##FORM##bf16_d64, 64, DECODE_STAGES)                   \
  MACRO(omega_paged_decode_##FORM##bf16_d128, 128, DECODE_STAGES)                 \
  MACRO(omega_paged_decode_##FORM##deep_bf16_d32, 32, DECODE_DEEP_STAGES)         \
  MACRO(omega_paged_decode_##FORM##deep_bf16_d64, 64, DECODE_DEEP_STAGES)         \
  MACRO(omega_paged_decode_##FORM##deep_bf16_d128, 128, DECODE_DEEP_STAGES)

#define OMEGA_PAGED_DECODE(NAME, D, STAGES)                                                                     \
  extern "C" __global__ void __launch_bounds__(DECODE_THREADS) NAME(                                            \
      const void* q, const uint16_t* pool, const int* table, const int* lens, float* part_o, float* part_lse,   \
      unsigned* status, uint64_t head_stride, uint64_t v_offset, uint64_t page_stride, uint32_t page_tokens,    \
      uint32_t pages, uint32_t max_pages, uint32_t q_heads, uint32_t group, uint32_t splits,                    \
      uint32_t tiles_per_split, float scale_log2, uint32_t flags) {                                             \
    omega_attn::DecodeArgs a{q,           pool,     table,      lens,  part_o,    part_lse,        status,     \
                             head_stride, v_offset, page_stride, page_tokens, pages, max_pages, q_heads, group, \
                             splits,      tiles_per_split, scale_log2, flags};                                 \
    omega_attn::paged_decode<D, omega_attn::Merge::Launch, STAGES>(a, nullptr, 0, nullptr);                    \
  }
OMEGA_PAGED_DECODE_EVERY(OMEGA_PAGED_DECODE, )

// The cluster form (omega_attn::paged_decode's CLUSTER): the decode's arguments but the partials' buffers,
// then the combine's output and flags; clusters of gridDim.x <= 8 CTAs set by the launch.
#define OMEGA_PAGED_DECODE_CLUSTER(NAME, D, STAGES)                                                            \
  extern "C" __global__ void __launch_bounds__(DECODE_THREADS) NAME(                                            \
      const void* q, const uint16_t* pool, const int* table, const int* lens, unsigned* status,                 \
      uint64_t head_stride, uint64_t v_offset, uint64_t page_stride, uint32_t page_tokens, uint32_t pages,      \
      uint32_t max_pages, uint32_t q_heads, uint32_t group, uint32_t splits, uint32_t tiles_per_split,          \
      float scale_log2, uint32_t flags, void* out, uint32_t out_flags) {                                        \
    omega_attn::DecodeArgs a{q,           pool,     table,       lens,        nullptr, nullptr,   status,     \
                             head_stride, v_offset, page_stride, page_tokens, pages,   max_pages, q_heads,    \
                             group,       splits,   tiles_per_split, scale_log2, flags};                      \
    omega_attn::paged_decode<D, omega_attn::Merge::Cluster, STAGES>(a, out, out_flags, nullptr);               \
  }
OMEGA_PAGED_DECODE_EVERY(OMEGA_PAGED_DECODE_CLUSTER, cluster_)

// The ticket form (omega_attn::paged_decode's TICKET): the decode's arguments, then the pairs' counters
// (batch * kv_heads words, zero before the launch and after it), the output and its flags.
#define OMEGA_PAGED_DECODE_TICKET(NAME, D, STAGES)                                                             \
  extern "C" __global__ void __launch_bounds__(DECODE_THREADS) NAME(                                            \
      const void* q, const uint16_t* pool, const int* table, const int* lens, float* part_o, float* part_lse,   \
      unsigned* status, uint64_t head_stride, uint64_t v_offset, uint64_t page_stride, uint32_t page_tokens,    \
      uint32_t pages, uint32_t max_pages, uint32_t q_heads, uint32_t group, uint32_t splits,                    \
      uint32_t tiles_per_split, float scale_log2, uint32_t flags, unsigned* tickets, void* out,                 \
      uint32_t out_flags) {                                                                                     \
    omega_attn::DecodeArgs a{q,           pool,     table,      lens,  part_o,    part_lse,        status,     \
                             head_stride, v_offset, page_stride, page_tokens, pages, max_pages, q_heads, group, \
                             splits,      tiles_per_split, scale_log2, flags};                                 \
    omega_attn::paged_decode<D, omega_attn::Merge::Ticket, STAGES>(a, out, out_flags, tickets);                \
  }
OMEGA_PAGED_DECODE_EVERY(OMEGA_PAGED_DECODE_TICKET, ticket_)

// The combine: grid [q_heads, batch], 256 threads; out[(b * q_heads + h) * head_dim + d], f32 or bf16.
// head_dim must be a multiple of 4, at most 4 * COMBINE_THREADS (the decode kernels' 32, 64 and 128 are).
//
// Why this shape: the merge is a chain of dependent L2 reads when one thread walks every split (a split
// count near 100 at batch 1 made the combine, not the decode, most of the call). Here the max and the sum
// of the weights are block reductions, and the partials are read as float4s by teams of head_dim / 4
// threads, team j summing splits j, j + teams, ... with eight reads in flight a thread, then the teams'
// sums add through shared memory.
namespace omega_attn {

// The block's max (or with `sum` its sum) of one value a thread; `red` holds a value a warp.
__device__ __forceinline__ float block_reduce(float v, bool sum, float* red) {
  constexpr int WARPS = COMBINE_THREADS / 32;
  v = sum ? warp_sum(v) : warp_max(v);
  __syncthreads();  // an earlier reduction's readers are done with `red`
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = red[0];
#pragma unroll
  for (int w = 1; w < WARPS; ++w) r = sum ? r + red[w] : fmaxf(r, red[w]);
  return r;
}

}  // namespace omega_attn

extern "C" __global__ void __launch_bounds__(COMBINE_THREADS)
    omega_attn_combine(const float* __restrict__ part_o, const float* __restrict__ part_lse, void* out,
                       uint32_t head_dim, uint32_t splits, uint32_t q_heads, uint32_t flags) {
  __shared__ float wts[COMBINE_MAX_SPLITS];
  __shared__ float red[COMBINE_THREADS / 32];
  __shared__ float4 team_acc[COMBINE_THREADS];
  const uint64_t row = (uint64_t)blockIdx.y * q_heads + blockIdx.x;
  const float* lse = part_lse + row * splits;
  const uint32_t quads = head_dim / 4, teams = COMBINE_THREADS / quads;
  const uint32_t qd = threadIdx.x % quads, team = threadIdx.x / quads;
  const float4* po = reinterpret_cast<const float4*>(part_o + row * splits * head_dim) + qd;
  // A team's first COMBINE_EARLY splits' partials are loaded with the log-sum-exps, before the weights
  // they wait for, so the call is one dependent L2 read, not two, for splits <= COMBINE_EARLY * teams.
  float4 early[COMBINE_EARLY];
#pragma unroll
  for (int k = 0; k < COMBINE_EARLY; ++k) {
    const uint32_t s = team + k * teams;
    early[k] = team < teams && s < splits ? po[(uint64_t)s * quads] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  float mx = -INFINITY;
  for (uint32_t s = threadIdx.x; s < splits; s += COMBINE_THREADS) mx = fmaxf(mx, lse[s]);
  const float mmax = omega_attn::block_reduce(mx, false, red);
  float t = 0.0f;
  for (uint32_t s = threadIdx.x; s < splits; s += COMBINE_THREADS) {
    const float w = mmax == -INFINITY ? 0.0f : exp2f(lse[s] - mmax);
    wts[s] = w;
    t += w;
  }
  const float total = omega_attn::block_reduce(t, true, red);  // its barriers publish wts too

  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (team < teams) {
#pragma unroll
    for (int k = 0; k < COMBINE_EARLY; ++k) {
      const uint32_t s = team + k * teams;
      const float w = s < splits ? wts[s] : 0.0f;
      acc.x += w * early[k].x;
      acc.y += w * early[k].y;
      acc.z += w * early[k].z;
      acc.w += w * early[k].w;
    }
#pragma unroll 8
    for (uint32_t s = team + COMBINE_EARLY * teams; s < splits; s += teams) {
      const float w = wts[s];
      const float4 v = po[(uint64_t)s * quads];
      acc.x += w * v.x;
      acc.y += w * v.y;
      acc.z += w * v.z;
      acc.w += w * v.w;
    }
  }
  team_acc[threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.x < quads) {
    float4 r = team_acc[threadIdx.x];
    for (uint32_t j = 1; j < teams; ++j) {
      const float4 v = team_acc[j * quads + threadIdx.x];
      r.x += v.x;
      r.y += v.y;
      r.z += v.z;
      r.w += v.w;
    }
    omega_attn::store_quad(out, row * head_dim + 4 * threadIdx.x, r, total > 0.0f ? 1.0f / total : 0.0f, flags);
  }
}
