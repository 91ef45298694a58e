// Causal (or full) prefill attention for Hopper (sm_90a), FlashAttention-3's recipe at head dim 128:
//   out[s, h, :] = softmax_j(scale * q[s, h, :] . k[j, g, :]) . v[j, g, :],  g = h / (q_heads / kv_heads),
// j over 0..seq (causal: 0..s). q, k, v are bf16 [seq, heads, 128] row-major; f32 accumulation; out is
// bf16 or f32 [seq, q_heads, 128].
//
// - One CTA per (q head, 128-row query block): blockIdx.x the head (so the q heads of one kv head, which
//   read the same K/V, run side by side and share L2), blockIdx.y the block counted from the last, so the
//   longest causal blocks start first.
// - Warp specialisation: warpgroup 0 is the producer (one thread issues the TMA loads: Q once, then K and
//   V blocks of 128 rows into a PREFILL_STAGES-deep ring, each with its own `full` mbarrier so S = Q K^T
//   starts before V lands); warpgroups 1 and 2 are consumers, each owning 64 query rows. setmaxnreg moves
//   registers from the producer (24) to the consumers (240): a consumer thread holds O (64 f32), S (64
//   f32) and P (32 bf16x2).
// - S = Q K^T: wgmma m64n128k16, both operands K-major in 128B-swizzled shared memory (a 64-element box
//   is one swizzle span; head dim 128 is two boxes). O += P V: P from registers (the S accumulator's
//   layout is the A fragment's, pairs packed to bf16), V MN-major (its rows are kv positions with the
//   head dim contiguous), the transpose bit set.
// - Intra-warpgroup overlap: the S GEMM of block i and the PV GEMM of block i - 1 are issued together, and
//   the softmax of block i runs while the PV GEMM is in flight. Ping-pong between the two consumers:
//   named barriers make them take turns issuing their GEMMs, so one's softmax overlaps the other's GEMMs.
// - Blocks are walked from the last to the first: only the first one walked (the diagonal block of a
//   causal row block, or the ragged last block) needs the mask; causal blocks past the diagonal are
//   never loaded. Online softmax in the log2 domain, row max and sum reduced over the 4 lanes of a quad.
//
// Ragged seq: the TMA unit reads zeros past seq (rows of Q and K/V), the mask drops those kv columns, and
// the epilogue stores only rows below seq.
//
// Descriptors (128-byte CUtensorMap in global memory, passed by pointer), all three the same form:
//   3-D bf16 {128, heads, seq}, strides {256, heads * 256} bytes, box {64, 1, 128}, 128B swizzle, zero fill.
#pragma once
#include <stdint.h>

#include <cuda_bf16.h>

// The GEMM's mbarrier, TMA and descriptor helpers, without its entries.
#define OMEGA_GEMM_HELPERS_ONLY
#include "../matmul/gemm_bf16.cuh"
#include "wgmma_m64n128k16_rs.cuh"

#define PREFILL_D 128
#define PREFILL_BM 128
#define PREFILL_BN 128
#define PREFILL_THREADS 384
#define PREFILL_STAGES 2
// One 64-column box of 128 rows (16 KiB); a Q, K or V block is two of them.
#define PREFILL_BOX_BYTES (PREFILL_BN * 64 * 2)
#define PREFILL_TILE_BYTES (2 * PREFILL_BOX_BYTES)
// Q, then the K stages, the V stages, then 3 * STAGES + 1 mbarriers and the 1 KiB alignment slack.
#define PREFILL_SMEM_FOR(stages) ((1 + 2 * (stages)) * PREFILL_TILE_BYTES + (3 * (stages) + 1) * 8 + 1024)
#define PREFILL_SMEM_BYTES PREFILL_SMEM_FOR(PREFILL_STAGES)
// Named barriers of the ping-pong (0 is __syncthreads): consumer c waits on PREFILL_BAR0 + c.
#define PREFILL_BAR0 1

namespace omega_prefill {
using omega_gemm::mbar_arrive;
using omega_gemm::mbar_expect_tx;
using omega_gemm::mbar_init;
using omega_gemm::mbar_wait;
using omega_gemm::smem_addr;
using omega_gemm::wgmma_desc;

__device__ __forceinline__ void tma_load_3d(void* dst, const void* tmap, uint64_t* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::
          "r"(smem_addr(dst)),
      "l"(tmap), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// Both boxes (head dims 0..63 and 64..127) of the 128-row block at `row` of head `head`.
__device__ __forceinline__ void load_tile(uint8_t* dst, const void* tmap, uint64_t* bar, int head, int row) {
  tma_load_3d(dst, tmap, bar, 0, head, row);
  tma_load_3d(dst + PREFILL_BOX_BYTES, tmap, bar, 64, head, row);
}

// The descriptor of an MN-major 128B-swizzled operand (V: rows of 64 head-dim elements, one row per kv
// position): 8-row groups 1024 bytes apart along K (stride byte offset), the second 64 columns of N one
// box (16 KiB) further (leading byte offset).
__device__ __forceinline__ uint64_t wgmma_desc_mn(const void* p) {
  uint64_t addr = smem_addr(p);
  uint64_t d = 0;
  d |= (addr & 0x3FFFF) >> 4;
  d |= (uint64_t)(PREFILL_BOX_BYTES >> 4) << 16;
  d |= (uint64_t)(1024 >> 4) << 32;
  d |= (uint64_t)1 << 62;
  return d;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ void named_sync(int id) { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }
__device__ __forceinline__ void named_arrive(int id) { asm volatile("bar.arrive %0, 256;" ::"r"(id) : "memory"); }

// 2^x on the special-function unit, flushing subnormal results to zero (a probability below 2^-126 of the
// row's maximum adds nothing at f32): one MUFU.EX2, where exp2f adds a range fix-up around it.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The running softmax of a thread's two rows (r and r + 8 of its warp's 16): max and sum, log2 domain.
struct RowState {
  float m[2];
  float l[2];
};

// Masks S (first block walked only), scales it to the log2 domain, updates the row state and leaves
// exp2(s - m) in S; `corr` gets the factor the old O and l are scaled by.
template <bool MASK>
__device__ __forceinline__ void softmax_step(float (&s)[64], RowState& st, float (&corr)[2], float scale_log2,
                                             int q_row0, int kv0, int seq, bool causal, bool first) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int q = q_row0 + 8 * h;
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float v = s[4 * j + 2 * h + e] * scale_log2;
        if (MASK) {
          const int kv = kv0 + 8 * j + 2 * (lane % 4) + e;
          if (kv >= seq || (causal && kv > q)) v = -INFINITY;
        }
        s[4 * j + 2 * h + e] = v;
        mx = fmaxf(mx, v);
      }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
    const float m_new = first ? mx : fmaxf(st.m[h], mx);
    corr[h] = first ? 0.f : ex2(st.m[h] - m_new);
    st.m[h] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = ex2(s[4 * j + 2 * h + e] - m_new);
        s[4 * j + 2 * h + e] = p;
        sum += p;
      }
    }
    // The quad's partial sums are added at the end (each lane keeps its own share of l).
    st.l[h] = first ? sum : st.l[h] * corr[h] + sum;
  }
}

// S's exp values as the PV GEMM's A fragments: k16 step kk takes column groups 2kk and 2kk + 1.
__device__ __forceinline__ void to_p(const float (&s)[64], uint32_t (&p)[32]) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    const int j0 = 2 * kk, j1 = 2 * kk + 1;
    p[4 * kk + 0] = pack_bf16(s[4 * j0 + 0], s[4 * j0 + 1]);
    p[4 * kk + 1] = pack_bf16(s[4 * j0 + 2], s[4 * j0 + 3]);
    p[4 * kk + 2] = pack_bf16(s[4 * j1 + 0], s[4 * j1 + 1]);
    p[4 * kk + 3] = pack_bf16(s[4 * j1 + 2], s[4 * j1 + 3]);
  }
}

__device__ __forceinline__ void rescale(float (&o)[64], const float (&corr)[2]) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    o[4 * j + 0] *= corr[0];
    o[4 * j + 1] *= corr[0];
    o[4 * j + 2] *= corr[1];
    o[4 * j + 3] *= corr[1];
  }
}

__device__ __forceinline__ void issue_s(float (&s)[64], const uint8_t* q, const uint8_t* k) {
#pragma unroll
  for (int kk = 0; kk < PREFILL_D / 16; ++kk) {
    const int box = kk / 4, off = (kk % 4) * 32;
    wgmma_m64n128k16_bf16(s, wgmma_desc(q + box * PREFILL_BOX_BYTES + off),
                          wgmma_desc(k + box * PREFILL_BOX_BYTES + off), kk > 0 ? 1 : 0);
  }
}

__device__ __forceinline__ void issue_pv(float (&o)[64], const uint32_t (&p)[32], const uint8_t* v) {
#pragma unroll
  for (int kk = 0; kk < PREFILL_BN / 16; ++kk)
    wgmma_m64n128k16_bf16_rs_tb(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3],
                                wgmma_desc_mn(v + kk * 16 * 128));
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Pins registers a wgmma writes asynchronously at this point of the program: the compiler sees them
// read and written here, so it moves no arithmetic on them across the wait before (or the issue after).
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// O / l into out rows q_row0 and q_row0 + 8 (those below seq) of head `head`.
template <typename Out>
__device__ __forceinline__ void store_o(const float (&o)[64], const RowState& st, Out* out, int q_row0, int seq,
                                        int head, int q_heads) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = st.l[h];
    l += __shfl_xor_sync(0xffffffff, l, 1);
    l += __shfl_xor_sync(0xffffffff, l, 2);
    const float inv = 1.f / l;
    const int q = q_row0 + 8 * h;
    if (q >= seq) continue;
    Out* row = out + ((size_t)q * q_heads + head) * PREFILL_D + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const float a = o[4 * j + 2 * h] * inv, b = o[4 * j + 2 * h + 1] * inv;
      if constexpr (sizeof(Out) == 4) {
        *reinterpret_cast<float2*>(row + 8 * j) = make_float2(a, b);
      } else {
        *reinterpret_cast<uint32_t*>(row + 8 * j) = pack_bf16(a, b);
      }
    }
  }
}

}  // namespace omega_prefill

// The body of the entries. `Out` is float or __nv_bfloat16 (stored as its bits).
template <typename Out, int STAGES>
__device__ __forceinline__ void prefill_bf16_body(const void* tmap_q, const void* tmap_k, const void* tmap_v,
                                                  Out* out, uint32_t seq, uint32_t q_heads, uint32_t kv_heads,
                                                  uint32_t causal, float scale) {
  using namespace omega_prefill;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* sq = smem;
  uint8_t* sk = sq + PREFILL_TILE_BYTES;
  uint8_t* sv = sk + STAGES * PREFILL_TILE_BYTES;
  uint64_t* k_full = reinterpret_cast<uint64_t*>(sv + STAGES * PREFILL_TILE_BYTES);
  uint64_t* v_full = k_full + STAGES;
  uint64_t* empty = v_full + STAGES;
  uint64_t* q_full = empty + STAGES;

  const int head = blockIdx.x;
  const int m_blocks = (int)((seq + PREFILL_BM - 1) / PREFILL_BM);
  const int m_block = m_blocks - 1 - (int)blockIdx.y;
  const int kv_head = head / (int)(q_heads / kv_heads);
  const int n_all = (int)((seq + PREFILL_BN - 1) / PREFILL_BN);
  const int n_blocks = causal ? min(n_all, m_block + 1) : n_all;
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&k_full[s], 1);
      mbar_init(&v_full[s], 1);
      mbar_init(&empty[s], 2);
    }
    mbar_init(q_full, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(tmap_q) : "memory");
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(tmap_k) : "memory");
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(tmap_v) : "memory");
  }
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
    if (threadIdx.x == 0) {
      mbar_expect_tx(q_full, PREFILL_TILE_BYTES);
      load_tile(sq, tmap_q, q_full, head, m_block * PREFILL_BM);
      for (int i = 0; i < n_blocks; ++i) {
        const int s = i % STAGES, n = n_blocks - 1 - i;
        // A fresh barrier's previous phase counts as complete: the first pass does not wait.
        mbar_wait(&empty[s], ((i / STAGES) & 1) ^ 1);
        mbar_expect_tx(&k_full[s], PREFILL_TILE_BYTES);
        load_tile(sk + s * PREFILL_TILE_BYTES, tmap_k, &k_full[s], kv_head, n * PREFILL_BN);
        mbar_expect_tx(&v_full[s], PREFILL_TILE_BYTES);
        load_tile(sv + s * PREFILL_TILE_BYTES, tmap_v, &v_full[s], kv_head, n * PREFILL_BN);
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
  const int consumer = wg - 1;
  const int t128 = threadIdx.x % 128;
  const int warp = t128 / 32, lane = t128 % 32;
  const int q_row0 = m_block * PREFILL_BM + consumer * 64 + warp * 16 + lane / 4;
  const float scale_log2 = scale * 1.4426950408889634f;
  const uint8_t* q = sq + consumer * 64 * 128;  // this consumer's 64 rows of each box
  const int my_bar = PREFILL_BAR0 + consumer, other_bar = PREFILL_BAR0 + (1 - consumer);
  // The first consumer lets itself through its first turn; the second skips its last hand-over, so
  // both barriers end with every arrival matched.
  if (consumer == 0) named_arrive(my_bar);

  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  float s[64];
  uint32_t p[32];
  float corr[2];
  RowState st;

  mbar_wait(q_full, 0);
  // Block 0 walked (the last kv block): S alone, masked.
  mbar_wait(&k_full[0], 0);
  named_sync(my_bar);
  wg_fence();
  issue_s(s, q, sk);
  wg_commit();
  if (consumer == 0 || n_blocks > 1) named_arrive(other_bar);
  wg_wait<0>();
  fence_regs(s);
  softmax_step<true>(s, st, corr, scale_log2, q_row0, (n_blocks - 1) * PREFILL_BN, (int)seq, causal != 0, true);
  to_p(s, p);

  for (int i = 1; i < n_blocks; ++i) {
    const int si = i % STAGES, sp = (i - 1) % STAGES;
    mbar_wait(&k_full[si], (i / STAGES) & 1);
    named_sync(my_bar);
    wg_fence();
    issue_s(s, q, sk + si * PREFILL_TILE_BYTES);
    wg_commit();
    fence_regs(o);
    rescale(o, corr);
    fence_regs(o);
    mbar_wait(&v_full[sp], ((i - 1) / STAGES) & 1);
    wg_fence();
    issue_pv(o, p, sv + sp * PREFILL_TILE_BYTES);
    wg_commit();
    if (consumer == 0 || i < n_blocks - 1) named_arrive(other_bar);
    wg_wait<1>();
    fence_regs(s);
    softmax_step<false>(s, st, corr, scale_log2, q_row0, 0, (int)seq, false, false);
    wg_wait<0>();
    fence_regs(o);
    if (t128 == 0) mbar_arrive(&empty[sp]);
    to_p(s, p);
  }

  const int sl = (n_blocks - 1) % STAGES;
  rescale(o, corr);
  mbar_wait(&v_full[sl], ((n_blocks - 1) / STAGES) & 1);
  wg_fence();
  issue_pv(o, p, sv + sl * PREFILL_TILE_BYTES);
  wg_commit();
  wg_wait<0>();
  fence_regs(o);
  store_o(o, st, out, q_row0, (int)seq, head, (int)q_heads);
}

// out (f32): grid [q_heads, ceil(seq / 128), 1], block 384, dynamic shared PREFILL_SMEM_BYTES.
// q_heads a multiple of kv_heads; scale the softmax's (1 / sqrt(128) for the usual attention).
extern "C" __global__ void __launch_bounds__(PREFILL_THREADS, 1)
    omega_attn_prefill_bf16_f32(const void* tmap_q, const void* tmap_k, const void* tmap_v, float* out,
                                uint32_t seq, uint32_t q_heads, uint32_t kv_heads, uint32_t causal, float scale) {
  prefill_bf16_body<float, PREFILL_STAGES>(tmap_q, tmap_k, tmap_v, out, seq, q_heads, kv_heads, causal, scale);
}

// The same with a bf16 output (round to nearest even).
extern "C" __global__ void __launch_bounds__(PREFILL_THREADS, 1)
    omega_attn_prefill_bf16(const void* tmap_q, const void* tmap_k, const void* tmap_v, uint16_t* out,
                            uint32_t seq, uint32_t q_heads, uint32_t kv_heads, uint32_t causal, float scale) {
  prefill_bf16_body<uint16_t, PREFILL_STAGES>(tmap_q, tmap_k, tmap_v, out, seq, q_heads, kv_heads, causal,
                                              scale);
}
