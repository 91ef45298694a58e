// f32 GEMM with f32 accuracy (issue 12): y[M,N] (f32) = x[M,K] . W[N,K]^T, f32 operands, one fmaf chain per
// output in increasing k from +0 (no TF32, no split of K), so the result is bit for bit what
// omega_gemm_f32_tn computes and what the simulator's reference repeats. Any M, N, K >= 1, any 4-byte
// aligned operands.
//
// The recipe of the fast SIMT SGEMMs, with the tile, the K slice and the pipeline as template parameters
// (Cfg) so one GPU run can time several:
//   - a BM x BN output tile per CTA, each thread a TM x TN block split in 4 x 4 quadrants spaced BM / (TM / 4)
//     rows and BN / (TN / 4) columns apart, so a warp's float4 fragment reads are consecutive 16-byte words
//     (no bank conflicts) and the stores of a quadrant row are one float4;
//   - a warp is WR x (32 / WR) threads over (M, N): its reads of a k row touch WR and 32 / WR distinct
//     float4s, one shared-memory wavefront each for WR = 4;
//   - both operands are K-major in global memory and stored transposed ([k][row], rows padded by 4 floats)
//     so the inner loop reads float4s of 4 rows (or columns) at one k from both;
//   - the K slices either go through registers (loaded while the previous slice is multiplied, stored to
//     the other of two shared buffers after it: one barrier a slice), or (ASYNC) straight into STAGES
//     shared buffers with 4-byte cp.async (the copy engine transposes element by element; no staging
//     registers, loads several slices ahead).
// The register-staged form loads 16-byte vectors when every row starts 16-byte aligned (K % 4 == 0 and
// both bases aligned, decided once per launch so the main loop has no branch), otherwise bounds-checked
// scalars. Out-of-range rows and k read as zero, which leave an fmaf chain unchanged (0 * 0 + acc == acc
// for the +0-started acc, which is never -0).
#pragma once
#include <stdint.h>

namespace omega_sgemm {

template <int BM_, int BN_, int BK_, int TM_, int TN_, int WR_, int STAGES_, bool ASYNC_, int MIN_CTAS_,
          bool PIPE_ = false, bool DEEP_ = false, int ORDER_ = 0>
struct Cfg {
  static constexpr int ORDER = ORDER_;
  static constexpr bool PIPE = PIPE_;
  static constexpr bool DEEP = DEEP_;
  static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_;
  static constexpr int WR = WR_, WC = 32 / WR_;
  static constexpr int STAGES = STAGES_;
  static constexpr bool ASYNC = ASYNC_;
  static constexpr int MIN_CTAS = MIN_CTAS_;
  static constexpr int THREADS = (BM / TM) * (BN / TN);
  static constexpr int PAD = 4;
  static constexpr int QM = TM / 4, QN = TN / 4;
  static constexpr int LDX = BM + PAD, LDW = BN + PAD;
  static constexpr int XS = BK * LDX, WS = BK * LDW;  // floats of one stage of each operand
  static constexpr int SMEM_BYTES = STAGES * (XS + WS) * 4;
  // Elements of one slice of each operand a thread moves.
  static constexpr int XE = BM * BK / THREADS, WE = BN * BK / THREADS;
  static_assert(TM % 4 == 0 && TN % 4 == 0, "quadrants of 4 x 4");
  static_assert(32 % WR == 0 && (BM / TM) % WR == 0 && (BN / TN) % WC == 0, "whole warps");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "a block of whole warps");
  static_assert(BK % 4 == 0 && XE % 4 == 0 && WE % 4 == 0 && XE >= 4 && WE >= 4, "whole vectors a thread");
  static_assert(THREADS % BK == 0, "the scalar loads' k is fixed per thread");
  static_assert(ASYNC ? STAGES >= 2 : STAGES == 2, "register staging double-buffers");
  // Past 48 KiB the stages are dynamic shared memory (the launch passes SMEM_BYTES and the kernel's
  // attribute allows it); below, static.
  static constexpr bool DYNAMIC_SMEM = SMEM_BYTES > 48 * 1024;
};

template <int P>
struct Parity {
  static constexpr int value = P;
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One 4-byte element into shared memory, or zeros where `ok` is false (src-size 0 reads nothing).
__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(ok ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// One operand's K slices as thread t moves them. Vector f = t + THREADS * i is row f / (BK / 4), k offset
// 4 * (f % (BK / 4)) (consecutive threads read consecutive 16-byte words of a row); scalar e = t +
// THREADS * i is row e / BK, k offset e % BK (consecutive threads, consecutive k). Both are stored to
// [k][row]. The row pointers are 64-bit and fixed per thread; only k moves.
template <class C, int ROWS>
struct Operand {
  static constexpr int E = ROWS * C::BK / C::THREADS;  // elements a thread moves per slice
  static constexpr int V = E / 4;                      // of which vectors on the vector path
  static constexpr int LD = ROWS + C::PAD;

  // Vector path. `k0` is a multiple of 4 and K % 4 == 0, so a vector is wholly in or out of range.
  __device__ __forceinline__ static void load_vec(const float* __restrict__ src, uint32_t rows, uint32_t K,
                                                  uint32_t row0, uint32_t k0, float (&v)[E]) {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const uint32_t f = threadIdx.x + C::THREADS * i;
      const uint32_t r = row0 + f / (C::BK / 4), k = k0 + 4 * (f % (C::BK / 4));
      float4 q = make_float4(0.f, 0.f, 0.f, 0.f);
      if (r < rows && k < K) q = __ldg(reinterpret_cast<const float4*>(src + (size_t)r * K + k));
      v[4 * i] = q.x;
      v[4 * i + 1] = q.y;
      v[4 * i + 2] = q.z;
      v[4 * i + 3] = q.w;
    }
  }
  __device__ __forceinline__ static void store_vec(float* dst, const float (&v)[E]) {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const uint32_t f = threadIdx.x + C::THREADS * i;
      const uint32_t r = f / (C::BK / 4), k = 4 * (f % (C::BK / 4));
#pragma unroll
      for (int j = 0; j < 4; ++j) dst[(k + j) * LD + r] = v[4 * i + j];
    }
  }

  __device__ __forceinline__ static void load_scalar(const float* __restrict__ src, uint32_t rows, uint32_t K,
                                                     uint32_t row0, uint32_t k0, float (&v)[E]) {
    const uint32_t k = k0 + threadIdx.x % C::BK;
#pragma unroll
    for (int i = 0; i < E; ++i) {
      const uint32_t r = row0 + (threadIdx.x + C::THREADS * i) / C::BK;
      v[i] = (r < rows && k < K) ? __ldg(src + (size_t)r * K + k) : 0.f;
    }
  }
  __device__ __forceinline__ static void store_scalar(float* dst, const float (&v)[E]) {
    const uint32_t k = threadIdx.x % C::BK;
#pragma unroll
    for (int i = 0; i < E; ++i) dst[k * LD + (threadIdx.x + C::THREADS * i) / C::BK] = v[i];
  }

  // The asynchronous form: the scalar mapping, each element its own 4-byte copy.
  __device__ __forceinline__ static void issue(const float* __restrict__ src, uint32_t rows, uint32_t K,
                                               uint32_t row0, uint32_t k0, float* dst) {
    const uint32_t kk = threadIdx.x % C::BK, k = k0 + kk;
#pragma unroll
    for (int i = 0; i < E; ++i) {
      const uint32_t rr = (threadIdx.x + C::THREADS * i) / C::BK, r = row0 + rr;
      const bool ok = r < rows && k < K;
      cp_async4(dst + kk * LD + rr, ok ? src + (size_t)r * K + k : src, ok);
    }
  }
};

// Thread (tm, tn)'s fragments at row kk of a stage: its TM x's and TN w's, one float4 per quadrant.
template <class C>
__device__ __forceinline__ void fragments(const float* xs, const float* ws, int kk, uint32_t tm, uint32_t tn,
                                          float (&a)[C::TM], float (&b)[C::TN]) {
#pragma unroll
  for (int q = 0; q < C::QM; ++q) {
    const float4 v = *reinterpret_cast<const float4*>(xs + kk * C::LDX + q * (C::BM / C::QM) + tm * 4);
    a[4 * q] = v.x;
    a[4 * q + 1] = v.y;
    a[4 * q + 2] = v.z;
    a[4 * q + 3] = v.w;
  }
#pragma unroll
  for (int q = 0; q < C::QN; ++q) {
    const float4 v = *reinterpret_cast<const float4*>(ws + kk * C::LDW + q * (C::BN / C::QN) + tn * 4);
    b[4 * q] = v.x;
    b[4 * q + 1] = v.y;
    b[4 * q + 2] = v.z;
    b[4 * q + 3] = v.w;
  }
}

// The order of the TM x TN FMAs decides which operand ptxas can keep in its reuse cache and so which
// register-bank conflicts remain (ORDER 0: rows outer, an x value reused; 1: columns outer, a w value
// reused; 2: rows outer with the columns alternating direction, so the w value at a row's turn is reused
// too). Each output's chain is the same whatever the order.
template <class C>
__device__ __forceinline__ void outer(const float (&a)[C::TM], const float (&b)[C::TN], float (&acc)[C::TM][C::TN]) {
  if constexpr (C::ORDER == 1) {
#pragma unroll
    for (int j = 0; j < C::TN; ++j)
#pragma unroll
      for (int i = 0; i < C::TM; ++i) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  } else {
#pragma unroll
    for (int i = 0; i < C::TM; ++i)
#pragma unroll
      for (int jj = 0; jj < C::TN; ++jj) {
        const int j = C::ORDER == 2 && i % 2 == 1 ? C::TN - 1 - jj : jj;
        acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
      }
  }
}

// The TM x TN outer products of one slice held in `xs` / `ws` ([BK][LD]), k ascending.
template <class C>
__device__ __forceinline__ void multiply(const float* xs, const float* ws, uint32_t tm, uint32_t tn,
                                         float (&acc)[C::TM][C::TN]) {
#pragma unroll
  for (int kk = 0; kk < C::BK; ++kk) {
    float a[C::TM], b[C::TN];
#pragma unroll
    for (int q = 0; q < C::QM; ++q) {
      const float4 v = *reinterpret_cast<const float4*>(xs + kk * C::LDX + q * (C::BM / C::QM) + tm * 4);
      a[4 * q] = v.x;
      a[4 * q + 1] = v.y;
      a[4 * q + 2] = v.z;
      a[4 * q + 3] = v.w;
    }
#pragma unroll
    for (int q = 0; q < C::QN; ++q) {
      const float4 v = *reinterpret_cast<const float4*>(ws + kk * C::LDW + q * (C::BN / C::QN) + tn * 4);
      b[4 * q] = v.x;
      b[4 * q + 1] = v.y;
      b[4 * q + 2] = v.z;
      b[4 * q + 3] = v.w;
    }
    outer<C>(a, b, acc);
  }
}

// Register staging: slice s + 1 is loaded before slice s is multiplied and stored to the other buffer
// after; that buffer was last read before the previous slice's barrier.
template <class C, bool VEC>
__device__ __forceinline__ void mainloop_staged(const float* __restrict__ x, const float* __restrict__ w, uint32_t M,
                                                uint32_t N, uint32_t K, uint32_t m0, uint32_t n0, float* smem,
                                                uint32_t tm, uint32_t tn, float (&acc)[C::TM][C::TN]) {
  using X = Operand<C, C::BM>;
  using W = Operand<C, C::BN>;
  float* xs = smem;
  float* ws = smem + C::STAGES * C::XS;
  float xv[X::E], wv[W::E];
  auto load = [&](uint32_t k0) {
    if constexpr (VEC) {
      X::load_vec(x, M, K, m0, k0, xv);
      W::load_vec(w, N, K, n0, k0, wv);
    } else {
      X::load_scalar(x, M, K, m0, k0, xv);
      W::load_scalar(w, N, K, n0, k0, wv);
    }
  };
  auto store = [&](uint32_t buf) {
    if constexpr (VEC) {
      X::store_vec(xs + buf * C::XS, xv);
      W::store_vec(ws + buf * C::WS, wv);
    } else {
      X::store_scalar(xs + buf * C::XS, xv);
      W::store_scalar(ws + buf * C::WS, wv);
    }
  };
  load(0);
  store(0);
  __syncthreads();
  const uint32_t slices = (K + C::BK - 1) / C::BK;
  for (uint32_t s = 0; s < slices; ++s) {
    const uint32_t cur = s & 1;
    const bool more = s + 1 < slices;
    if (more) load((s + 1) * C::BK);
    multiply<C>(xs + cur * C::XS, ws + cur * C::WS, tm, tn, acc);
    if (more) store(cur ^ 1);
    __syncthreads();
  }
}

// Register staging, software-pipelined (PIPE): the fragments of step kk + 1 are read while step kk is
// multiplied, across the slice boundary too. The next slice's registers go to the other buffer before the
// last step of the current one, then the barrier, then the next slice's first fragments, then the last
// step's products, so the barrier and the first reads' latency hide behind TM x TN FMAs. The buffer
// written at slice s was last read by the fragment reads of slice s - 1, all before slice s - 1's
// barrier.
template <class C, bool VEC>
__device__ __forceinline__ void mainloop_piped(const float* __restrict__ x, const float* __restrict__ w, uint32_t M,
                                               uint32_t N, uint32_t K, uint32_t m0, uint32_t n0, float* smem,
                                               uint32_t tm, uint32_t tn, float (&acc)[C::TM][C::TN]) {
  using X = Operand<C, C::BM>;
  using W = Operand<C, C::BN>;
  float* xs = smem;
  float* ws = smem + C::STAGES * C::XS;
  float xv[X::E], wv[W::E];
  auto load = [&](uint32_t k0) {
    if constexpr (VEC) {
      X::load_vec(x, M, K, m0, k0, xv);
      W::load_vec(w, N, K, n0, k0, wv);
    } else {
      X::load_scalar(x, M, K, m0, k0, xv);
      W::load_scalar(w, N, K, n0, k0, wv);
    }
  };
  auto store = [&](uint32_t buf) {
    if constexpr (VEC) {
      X::store_vec(xs + buf * C::XS, xv);
      W::store_vec(ws + buf * C::WS, wv);
    } else {
      X::store_scalar(xs + buf * C::XS, xv);
      W::store_scalar(ws + buf * C::WS, wv);
    }
  };
  load(0);
  store(0);
  __syncthreads();
  float a[2][C::TM], b[2][C::TN];
  fragments<C>(xs, ws, 0, tm, tn, a[0], b[0]);
  const uint32_t slices = (K + C::BK - 1) / C::BK;
  for (uint32_t s = 0; s < slices; ++s) {
    const uint32_t cur = s & 1;
    const bool more = s + 1 < slices;
    if (more) load((s + 1) * C::BK);
    const float* xc = xs + cur * C::XS;
    const float* wc = ws + cur * C::WS;
#pragma unroll
    for (int kk = 0; kk < C::BK - 1; ++kk) {
      fragments<C>(xc, wc, kk + 1, tm, tn, a[(kk + 1) & 1], b[(kk + 1) & 1]);
      outer<C>(a[kk & 1], b[kk & 1], acc);
    }
    if (more) {
      store(cur ^ 1);
      __syncthreads();
      fragments<C>(xs + (cur ^ 1) * C::XS, ws + (cur ^ 1) * C::WS, 0, tm, tn, a[C::BK & 1], b[C::BK & 1]);
    }
    outer<C>(a[(C::BK - 1) & 1], b[(C::BK - 1) & 1], acc);
  }
}

// The pipelined form with the global loads two slices ahead (DEEP): register set P holds slice s + 1 while
// set P ^ 1's slice s + 2 is in flight, so a load has two slices' products to land before its store needs
// it. The slice loop is unrolled by two so each set is named at compile time.
template <class C, bool VEC>
__device__ __forceinline__ void mainloop_deep(const float* __restrict__ x, const float* __restrict__ w, uint32_t M,
                                              uint32_t N, uint32_t K, uint32_t m0, uint32_t n0, float* smem,
                                              uint32_t tm, uint32_t tn, float (&acc)[C::TM][C::TN]) {
  using X = Operand<C, C::BM>;
  using W = Operand<C, C::BN>;
  float* xs = smem;
  float* ws = smem + C::STAGES * C::XS;
  float xv[2][X::E], wv[2][W::E];
  auto load = [&](uint32_t k0, float(&xr)[X::E], float(&wr)[W::E]) {
    if constexpr (VEC) {
      X::load_vec(x, M, K, m0, k0, xr);
      W::load_vec(w, N, K, n0, k0, wr);
    } else {
      X::load_scalar(x, M, K, m0, k0, xr);
      W::load_scalar(w, N, K, n0, k0, wr);
    }
  };
  auto store = [&](uint32_t buf, const float(&xr)[X::E], const float(&wr)[W::E]) {
    if constexpr (VEC) {
      X::store_vec(xs + buf * C::XS, xr);
      W::store_vec(ws + buf * C::WS, wr);
    } else {
      X::store_scalar(xs + buf * C::XS, xr);
      W::store_scalar(ws + buf * C::WS, wr);
    }
  };
  const uint32_t slices = (K + C::BK - 1) / C::BK;
  load(0, xv[0], wv[0]);
  store(0, xv[0], wv[0]);
  if (slices > 1) load(C::BK, xv[1], wv[1]);
  __syncthreads();
  float a[2][C::TM], b[2][C::TN];
  fragments<C>(xs, ws, 0, tm, tn, a[0], b[0]);
  // Slice s (parity P): set P is free (its slice went to shared memory at s - 1), set P ^ 1 holds s + 1.
  auto slice = [&](uint32_t s, auto parity) {
    constexpr int P = decltype(parity)::value;
    if (s + 2 < slices) load((s + 2) * C::BK, xv[P], wv[P]);
    const float* xc = xs + P * C::XS;
    const float* wc = ws + P * C::WS;
#pragma unroll
    for (int kk = 0; kk < C::BK - 1; ++kk) {
      fragments<C>(xc, wc, kk + 1, tm, tn, a[(kk + 1) & 1], b[(kk + 1) & 1]);
      outer<C>(a[kk & 1], b[kk & 1], acc);
    }
    if (s + 1 < slices) {
      store(P ^ 1, xv[P ^ 1], wv[P ^ 1]);
      __syncthreads();
      fragments<C>(xs + (P ^ 1) * C::XS, ws + (P ^ 1) * C::WS, 0, tm, tn, a[0], b[0]);
    }
    outer<C>(a[1], b[1], acc);
  };
  for (uint32_t s = 0; s < slices; s += 2) {
    slice(s, Parity<0>{});
    if (s + 1 < slices) slice(s + 1, Parity<1>{});
  }
}

// cp.async: STAGES - 1 slices in flight. Every iteration commits one group (empty past the last slice),
// so waiting until STAGES - 2 groups are pending means slice s has landed; the barrier after it also
// means every thread is done with the stage the next issue overwrites (slice s - 1's).
template <class C>
__device__ __forceinline__ void mainloop_async(const float* __restrict__ x, const float* __restrict__ w, uint32_t M,
                                               uint32_t N, uint32_t K, uint32_t m0, uint32_t n0, float* smem,
                                               uint32_t tm, uint32_t tn, float (&acc)[C::TM][C::TN]) {
  using X = Operand<C, C::BM>;
  using W = Operand<C, C::BN>;
  float* xs = smem;
  float* ws = smem + C::STAGES * C::XS;
  const uint32_t slices = (K + C::BK - 1) / C::BK;
  auto issue = [&](uint32_t s) {
    if (s < slices) {
      const uint32_t st = s % C::STAGES;
      X::issue(x, M, K, m0, s * C::BK, xs + st * C::XS);
      W::issue(w, N, K, n0, s * C::BK, ws + st * C::WS);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int p = 0; p < C::STAGES - 1; ++p) issue(p);
  for (uint32_t s = 0; s < slices; ++s) {
    cp_async_wait<C::STAGES - 2>();
    __syncthreads();
    issue(s + C::STAGES - 1);
    const uint32_t st = s % C::STAGES;
    multiply<C>(xs + st * C::XS, ws + st * C::WS, tm, tn, acc);
  }
}

}  // namespace omega_sgemm

// The C::BM x C::BN tile of y at (m0, n0), its stages in `smem`.
template <class C>
__device__ __forceinline__ void sgemm_tile(const float* __restrict__ x, const float* __restrict__ w,
                                           float* __restrict__ y, uint32_t M, uint32_t N, uint32_t K, uint32_t m0,
                                           uint32_t n0, float* smem) {
  using namespace omega_sgemm;
  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  constexpr uint32_t warps_n = (C::BN / C::TN) / C::WC;
  const uint32_t tm = (warp / warps_n) * C::WR + lane / C::WC;
  const uint32_t tn = (warp % warps_n) * C::WC + lane % C::WC;

  float acc[C::TM][C::TN];
#pragma unroll
  for (int i = 0; i < C::TM; ++i)
#pragma unroll
    for (int j = 0; j < C::TN; ++j) acc[i][j] = 0.f;

  if constexpr (C::ASYNC) {
    mainloop_async<C>(x, w, M, N, K, m0, n0, smem, tm, tn, acc);
  } else {
    // One choice per launch, so every thread takes the same loop.
    const bool vec = K % 4 == 0 && (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w)) % 16 == 0;
    if constexpr (C::DEEP) {
      if (vec)
        mainloop_deep<C, true>(x, w, M, N, K, m0, n0, smem, tm, tn, acc);
      else
        mainloop_deep<C, false>(x, w, M, N, K, m0, n0, smem, tm, tn, acc);
    } else if constexpr (C::PIPE) {
      if (vec)
        mainloop_piped<C, true>(x, w, M, N, K, m0, n0, smem, tm, tn, acc);
      else
        mainloop_piped<C, false>(x, w, M, N, K, m0, n0, smem, tm, tn, acc);
    } else {
      if (vec)
        mainloop_staged<C, true>(x, w, M, N, K, m0, n0, smem, tm, tn, acc);
      else
        mainloop_staged<C, false>(x, w, M, N, K, m0, n0, smem, tm, tn, acc);
    }
  }

  const bool vec_y = N % 4 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
#pragma unroll
  for (int i = 0; i < C::TM; ++i) {
    const uint32_t m = m0 + (i / 4) * (C::BM / C::QM) + tm * 4 + i % 4;
    if (m >= M) continue;
    float* row = y + (size_t)m * N;
#pragma unroll
    for (int q = 0; q < C::QN; ++q) {
      const uint32_t n = n0 + q * (C::BN / C::QN) + tn * 4;
      if (vec_y && n + 3 < N) {
        *reinterpret_cast<float4*>(row + n) =
            make_float4(acc[i][4 * q], acc[i][4 * q + 1], acc[i][4 * q + 2], acc[i][4 * q + 3]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (n + j < N) row[n + j] = acc[i][4 * q + j];
      }
    }
  }
}

template <class C>
__device__ __forceinline__ float* sgemm_smem() {
  if constexpr (C::DYNAMIC_SMEM) {
    extern __shared__ __align__(16) float sgemm_dynamic_smem[];
    return sgemm_dynamic_smem;
  } else {
    __shared__ __align__(16) float sgemm_static_smem[C::SMEM_BYTES / 4];
    return sgemm_static_smem;
  }
}

// grid (ceil(N / BN), ceil(M / BM)), block C::THREADS.
template <class C>
__device__ __forceinline__ void sgemm_tn(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                                         uint32_t M, uint32_t N, uint32_t K) {
  sgemm_tile<C>(x, w, y, M, N, K, blockIdx.y * C::BM, blockIdx.x * C::BN, sgemm_smem<C>());
}

// Persistent: grid (G, 1, 1) of any G >= 1, block C::THREADS. CTA b takes the tiles b, b + G, ... of the
// ceil(M / BM) * ceil(N / BN) in row-major order (tile t at tile row t / tiles_n, column t % tiles_n: the
// order the 2-D grid's CTAs start in), so one launch of at most a CTA budget covers any shape.
template <class C>
__device__ __forceinline__ void sgemm_tn_persistent(const float* __restrict__ x, const float* __restrict__ w,
                                                    float* __restrict__ y, uint32_t M, uint32_t N, uint32_t K) {
  float* smem = sgemm_smem<C>();
  const uint32_t tiles_n = (N + C::BN - 1) / C::BN;
  const uint64_t tiles = (uint64_t)((M + C::BM - 1) / C::BM) * tiles_n;
  for (uint64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    // The last tile's stages are read to the end of its mainloop before this one's first copies.
    __syncthreads();
    sgemm_tile<C>(x, w, y, M, N, K, (uint32_t)(t / tiles_n) * C::BM, (uint32_t)(t % tiles_n) * C::BN, smem);
  }
}

// ----- the cp.async K-major form (issue 12, after the 2026-12-02 record) -----------------------------------
//
// Both operands are K-major in global memory, so a 16-byte cp.async.cg copies four consecutive k of one row
// verbatim: the stages keep that layout ([row][BK], no staging registers, no transposing store), STAGES - 1
// slices in flight. A thread reads a row's four k with one LDS.128, so its fragments come a chunk of four k
// at a time: TM x-rows and TN w-rows (or TN / 2, W_SPLIT) of four k, 4 x TM x TN FMAs. The same 24
// LDS.128 per 512 FMAs as the transposed layout reads one k at a time, without the 16 STS and their
// address arithmetic per slice. A thread owns rows (and columns) WR (WC) apart, so a warp's WR (WC) reads
// of one LDS are consecutive rows.
//
// Against bank conflicts the 16-byte chunk c of row r sits at chunk c ^ s(r), s(r) = (r / G) % P, G = 32 /
// BK rows spanning the 32 banks and P = BK / 4 chunks a row: any 8 consecutive rows starting at a multiple
// of 8 read their chunk c from 8 distinct 4-bank groups (one wavefront for 8 distinct 16-byte words), and
// the copies of 8 consecutive threads (consecutive chunks of consecutive rows) write 8 distinct groups.
//
// W_KMAJOR false is the hybrid: x as above, W through registers and stored transposed ([k][column], rows
// of BN + 4) as the register-staged form does, read one k at a time in float4s of four columns. Why: in
// the K-major form both operands of an FMA at k step kk come from registers of parity kk % 2 (LDS.128
// fills an aligned quad), so whichever is not in the reuse cache shares its bank with every accumulator of
// that parity: about half the FMAs have two register-file reads of one bank, against 36% in the zigzag
// order today. Transposed, W's register of column j has parity j % 2 whatever k, which the allocation can
// keep away from the accumulators of column j, and the x operand sits in the reuse cache across a row.
// W's global loads are issued two slices before their store is read (a slice of FMAs to land) and stored at
// the top of the next slice.
namespace omega_sgemm {

template <int BM_, int BN_, int BK_, int TM_, int TN_, int WR_, int STAGES_, bool W_KMAJOR_, int ORDER_,
          int W_SPLIT_ = 1>
struct KCfg {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_;
  static constexpr int WR = WR_, WC = 32 / WR_;
  static constexpr int STAGES = STAGES_;
  static constexpr bool W_KMAJOR = W_KMAJOR_;
  static constexpr int ORDER = ORDER_;
  static constexpr int W_SPLIT = W_SPLIT_;
  static constexpr int MIN_CTAS = 2;
  static constexpr int THREADS = (BM / TM) * (BN / TN);
  static constexpr int P = BK / 4;   // 16-byte chunks a row of a stage
  static constexpr int G = 32 / BK;  // rows that span the 32 banks
  static constexpr int WARPS_N = (BN / TN) / WC;
  static constexpr int LDW_T = BN + 4;  // the transposed W's row
  static constexpr int XS = BM * BK;
  static constexpr int WS = W_KMAJOR ? BN * BK : BK * LDW_T;
  static constexpr int SMEM_BYTES = STAGES * (XS + WS) * 4;
  static constexpr bool DYNAMIC_SMEM = false;
  static_assert(SMEM_BYTES <= 48 * 1024, "static shared memory");
  static_assert(BK == 8 || BK == 16, "two or four chunks a row; G rows of a stage span the banks");
  static_assert(WR % G == 0 && (!W_KMAJOR || WC % G == 0), "a thread's swizzle is one xor for all its rows");
  static_assert((BM / TM) % WR == 0 && (BN / TN) % WC == 0 && THREADS == 128, "four whole warps");
  static_assert(STAGES >= 2 && TN % (4 * W_SPLIT) == 0 && TM % 4 == 0, "whole float4s");
  static_assert(THREADS % P == 0 && (BM * P) % THREADS == 0 && (BN * P) % THREADS == 0, "whole chunks a thread");
  static_assert(W_KMAJOR || (BN * BK) % (4 * THREADS) == 0, "whole float4s of W a thread");
};

// One 16-byte chunk, or zeros where `ok` is false; .cg: the chunks are read once per CTA, so past L1.
__device__ __forceinline__ void cp_async16(uint32_t dst, const float* src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async4s(uint32_t dst, const float* src, bool ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 4 : 0) : "memory");
}
__device__ __forceinline__ float4 lds128(const float* stage, uint32_t at) {
  return *reinterpret_cast<const float4*>(stage + at);
}

// One K-major operand's copies as thread t issues them: chunk c = t % P of rows t / P + (THREADS / P) * n.
// The rows a thread copies differ by a multiple of G * P = 8, so one swizzle serves all of them.
template <class C, int ROWS>
struct KOperand {
  static constexpr int N = ROWS * C::P / C::THREADS;  // chunks a thread copies per slice
  static constexpr int STEP = C::THREADS / C::P;      // rows between them
  static_assert(STEP % (C::G * C::P) == 0, "one swizzle a thread");
  const float* base;  // the operand: what a zero-filling copy names (it reads nothing), a valid address
  const float* src;   // row t / P's chunk c at k = 0
  uint32_t dst;      // its place in stage 0 (bytes)
  uint32_t live;     // bit n: row n is inside the operand

  __device__ __forceinline__ KOperand(const float* b, uint32_t rows, uint32_t K, uint32_t row0, uint32_t smem) {
    const uint32_t r = threadIdx.x / C::P, c = threadIdx.x % C::P;
    const uint32_t s = (r / C::G) % C::P;
    base = b;
    src = b + (size_t)(row0 + r) * K + 4 * c;
    dst = smem + 4 * (r * C::BK + 4 * (c ^ s));
    live = 0;
#pragma unroll
    for (int n = 0; n < N; ++n) live |= (row0 + r + STEP * n < rows ? 1u : 0u) << n;
  }
  // Slice k0's chunks into the stage at byte offset `stage`. VEC: K % 4 == 0 and the base 16-byte
  // aligned, so a chunk is wholly in or out of range; otherwise each element is its own 4-byte copy.
  template <bool VEC>
  __device__ __forceinline__ void issue(uint32_t K, uint32_t k0, uint32_t stage) const {
    const uint32_t k = k0 + 4 * (threadIdx.x % C::P);
#pragma unroll
    for (int n = 0; n < N; ++n) {
      const float* p = src + (size_t)STEP * n * K + k0;
      const uint32_t d = dst + stage + 4 * STEP * n * C::BK;
      const bool row_ok = (live >> n) & 1;
      if constexpr (VEC) {
        const bool ok = row_ok && k < K;
        cp_async16(d, ok ? p : base, ok);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool ok = row_ok && k + e < K;
          cp_async4s(d + 4 * e, ok ? p + e : base, ok);
        }
      }
    }
  }
};

// Float offsets, from a stage's start, of a thread's rows r0 + STRIDE * i (i < COUNT) at chunk c: the
// swizzle of row r0 + STRIDE * i is u ^ v_i, u = (r0 / G) % P the thread's and v_i = ((STRIDE / G) * i) % P
// known at compile time (no carry: r0 % STRIDE < STRIDE), so a chunk is one of P per-thread bases plus a
// constant.
template <class C, int STRIDE>
struct KRows {
  static_assert((STRIDE / C::G) % (C::P / 2) == 0, "adding (STRIDE / G) * i to the swizzle is an xor");
  uint32_t row, u;
  __device__ __forceinline__ explicit KRows(uint32_t r0) : row(r0 * C::BK), u((r0 / C::G) % C::P) {}
  // With i and c constants, 4 * (v ^ u) is one of P loop invariants.
  __device__ __forceinline__ uint32_t at(int i, int c) const {
    const uint32_t v = c ^ (((STRIDE / C::G) * i) % C::P);
    return row + 4 * (v ^ u) + STRIDE * i * C::BK;
  }
};

// f(Parity<0>{}) .. f(Parity<N - 1>{}): a loop nvvm leaves rolled despite `#pragma unroll` (it kept the
// chunk loop of a slice as a loop), unrolled so the next chunk's reads can be scheduled among this one's
// FMAs.
template <int N, int I = 0, class F>
__device__ __forceinline__ void unrolled(F&& f) {
  if constexpr (I < N) {
    f(Parity<I>{});
    unrolled<N, I + 1>(f);
  }
}

// acc[i][J0 + j] += a[i][kk] * b[j][kk] for the TM x NB block, in C::ORDER (0: rows first; 2: zigzag).
template <class C, int NB, int J0>
__device__ __forceinline__ void outer4(const float4 (&a)[C::TM], const float4 (&b)[NB], int kk,
                                       float (&acc)[C::TM][C::TN]) {
  auto lane = [](const float4& v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; };
#pragma unroll
  for (int i = 0; i < C::TM; ++i)
#pragma unroll
    for (int jj = 0; jj < NB; ++jj) {
      const int j = C::ORDER == 2 && i % 2 == 1 ? NB - 1 - jj : jj;
      acc[i][J0 + j] = fmaf(lane(a[i], kk), lane(b[j], kk), acc[i][J0 + j]);
    }
}

// acc[i][j] += a[i][kk] * b[j] (the hybrid: b one k of TN columns).
template <class C>
__device__ __forceinline__ void outer_t(const float4 (&a)[C::TM], const float (&b)[C::TN], int kk,
                                        float (&acc)[C::TM][C::TN]) {
  auto lane = [](const float4& v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; };
#pragma unroll
  for (int i = 0; i < C::TM; ++i)
#pragma unroll
    for (int jj = 0; jj < C::TN; ++jj) {
      const int j = C::ORDER == 2 && i % 2 == 1 ? C::TN - 1 - jj : jj;
      acc[i][j] = fmaf(lane(a[i], kk), b[j], acc[i][j]);
    }
}

template <class C, int J0, int NB>
__device__ __forceinline__ void chunk_w(const float* ws, const KRows<C, C::WC>& wr, int c, const float4 (&a)[C::TM],
                                        float (&acc)[C::TM][C::TN]) {
  float4 b[NB];
#pragma unroll
  for (int j = 0; j < NB; ++j) b[j] = lds128(ws, wr.at(J0 + j, c));
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) outer4<C, NB, J0>(a, b, kk, acc);
}

template <class C, bool VEC>
__device__ __forceinline__ void mainloop_kmajor(const float* __restrict__ x, const float* __restrict__ w, uint32_t M,
                                                uint32_t N, uint32_t K, uint32_t m0, uint32_t n0, float* smem,
                                                float (&acc)[C::TM][C::TN]) {
  const uint32_t xs0 = smem_addr(smem), ws0 = xs0 + C::STAGES * C::XS * 4;
  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint32_t wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;
  const KRows<C, C::WR> xr(wm * (C::WR * C::TM) + lane / C::WC);
  const KOperand<C, C::BM> xo(x, M, K, m0, xs0);
  const uint32_t slices = (K + C::BK - 1) / C::BK;

  if constexpr (C::W_KMAJOR) {
    const KRows<C, C::WC> wr(wn * (C::WC * C::TN) + lane % C::WC);
    const KOperand<C, C::BN> wo(w, N, K, n0, ws0);
    auto issue = [&](uint32_t s) {
      if (s < slices) {
        const uint32_t st = s % C::STAGES;
        xo.template issue<VEC>(K, s * C::BK, st * C::XS * 4);
        wo.template issue<VEC>(K, s * C::BK, st * C::WS * 4);
      }
      cp_async_commit();
    };
#pragma unroll
    for (int p = 0; p < C::STAGES - 1; ++p) issue(p);
    for (uint32_t s = 0; s < slices; ++s) {
      cp_async_wait<C::STAGES - 2>();
      __syncthreads();
      issue(s + C::STAGES - 1);
      const uint32_t st = s % C::STAGES;
      const float* xs = smem + st * C::XS;
      const float* ws = smem + C::STAGES * C::XS + st * C::WS;
      unrolled<C::P>([&](auto chunk) {
        constexpr int c = decltype(chunk)::value;
        float4 a[C::TM];
#pragma unroll
        for (int i = 0; i < C::TM; ++i) a[i] = lds128(xs, xr.at(i, c));
        constexpr int NB = C::TN / C::W_SPLIT;
        chunk_w<C, 0, NB>(ws, wr, c, a, acc);
        if constexpr (C::W_SPLIT == 2) chunk_w<C, NB, NB>(ws, wr, c, a, acc);
      });
    }
  } else {
    // W register-staged, transposed: vector f = t + THREADS * n is row f / P, chunk f % P.
    constexpr int WV = C::BN * C::BK / (4 * C::THREADS);
    const uint32_t tn = wn * C::WC + lane % C::WC;
    const uint32_t wc = threadIdx.x % C::P, wrow = threadIdx.x / C::P;
    constexpr uint32_t WSTEP = C::THREADS / C::P;
    float4 wv[WV];
    auto load = [&](uint32_t k0) {
      const uint32_t k = k0 + 4 * wc;
#pragma unroll
      for (int n = 0; n < WV; ++n) {
        const uint32_t r = n0 + wrow + WSTEP * n;
        if constexpr (VEC) {
          wv[n] = make_float4(0.f, 0.f, 0.f, 0.f);
          if (r < N && k < K) wv[n] = __ldg(reinterpret_cast<const float4*>(w + (size_t)r * K + k));
        } else {
          const float* p = w + (size_t)r * K + k;
          wv[n].x = r < N && k < K ? __ldg(p) : 0.f;
          wv[n].y = r < N && k + 1 < K ? __ldg(p + 1) : 0.f;
          wv[n].z = r < N && k + 2 < K ? __ldg(p + 2) : 0.f;
          wv[n].w = r < N && k + 3 < K ? __ldg(p + 3) : 0.f;
        }
      }
    };
    float* wsp = smem + C::STAGES * C::XS;
    auto store = [&](uint32_t st) {
      float* d = wsp + st * C::WS + 4 * wc * C::LDW_T + wrow;
#pragma unroll
      for (int n = 0; n < WV; ++n) {
        d[WSTEP * n] = wv[n].x;
        d[WSTEP * n + C::LDW_T] = wv[n].y;
        d[WSTEP * n + 2 * C::LDW_T] = wv[n].z;
        d[WSTEP * n + 3 * C::LDW_T] = wv[n].w;
      }
    };
    auto issue = [&](uint32_t s) {
      if (s < slices) xo.template issue<VEC>(K, s * C::BK, (s % C::STAGES) * C::XS * 4);
      cp_async_commit();
    };
#pragma unroll
    for (int p = 0; p < C::STAGES - 1; ++p) issue(p);
    load(0);
    store(0);
    if (slices > 1) load(C::BK);
    constexpr int QN = C::TN / 4;
    for (uint32_t s = 0; s < slices; ++s) {
      cp_async_wait<C::STAGES - 2>();
      __syncthreads();
      issue(s + C::STAGES - 1);
      // Slice s + 1's stage was last read at slice s + 1 - STAGES <= s - 1, before the barrier.
      if (s + 1 < slices) {
        store((s + 1) % C::STAGES);
        if (s + 2 < slices) load((s + 2) * C::BK);
      }
      const uint32_t st = s % C::STAGES;
      const float* xs = smem + st * C::XS;
      const float* wsl = wsp + st * C::WS + tn * 4;
      unrolled<C::P>([&](auto chunk) {
        constexpr int c = decltype(chunk)::value;
        float4 a[C::TM];
#pragma unroll
        for (int i = 0; i < C::TM; ++i) a[i] = lds128(xs, xr.at(i, c));
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          float b[C::TN];
#pragma unroll
          for (int q = 0; q < QN; ++q) {
            const float4 v = *reinterpret_cast<const float4*>(wsl + (4 * c + kk) * C::LDW_T + q * (C::BN / QN));
            b[4 * q] = v.x;
            b[4 * q + 1] = v.y;
            b[4 * q + 2] = v.z;
            b[4 * q + 3] = v.w;
          }
          outer_t<C>(a, b, kk, acc);
        }
      });
    }
  }
}

}  // namespace omega_sgemm

// grid (ceil(N / BN), ceil(M / BM)), block C::THREADS. Thread rows: wm * WR * TM + lane / WC + WR * i;
// columns: K-major W, wn * WC * TN + lane % WC + WC * j (scalar stores, each warp store whole 32-byte
// sectors); transposed W, the register-staged form's quadrants (float4 stores).
template <class C>
__device__ __forceinline__ void sgemm_tn_kmajor(const float* __restrict__ x, const float* __restrict__ w,
                                                float* __restrict__ y, uint32_t M, uint32_t N, uint32_t K) {
  using namespace omega_sgemm;
  __shared__ __align__(16) float smem[C::SMEM_BYTES / 4];
  const uint32_t m0 = blockIdx.y * C::BM, n0 = blockIdx.x * C::BN;
  float acc[C::TM][C::TN];
#pragma unroll
  for (int i = 0; i < C::TM; ++i)
#pragma unroll
    for (int j = 0; j < C::TN; ++j) acc[i][j] = 0.f;
  const bool vec = K % 4 == 0 && (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w)) % 16 == 0;
  if (vec)
    mainloop_kmajor<C, true>(x, w, M, N, K, m0, n0, smem, acc);
  else
    mainloop_kmajor<C, false>(x, w, M, N, K, m0, n0, smem, acc);
  // Copies past the last slice were empty groups; none is outstanding into memory this CTA still owns.
  cp_async_wait<0>();

  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint32_t wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;
  const uint32_t r0 = m0 + wm * (C::WR * C::TM) + lane / C::WC;
  const bool vec_y = N % 4 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
#pragma unroll
  for (int i = 0; i < C::TM; ++i) {
    const uint32_t m = r0 + C::WR * i;
    if (m >= M) continue;
    float* row = y + (size_t)m * N;
    if constexpr (C::W_KMAJOR) {
      const uint32_t c0 = n0 + wn * (C::WC * C::TN) + lane % C::WC;
#pragma unroll
      for (int j = 0; j < C::TN; ++j)
        if (c0 + C::WC * j < N) row[c0 + C::WC * j] = acc[i][j];
    } else {
      constexpr int QN = C::TN / 4;
      const uint32_t tn = wn * C::WC + lane % C::WC;
#pragma unroll
      for (int q = 0; q < QN; ++q) {
        const uint32_t n = n0 + q * (C::BN / QN) + tn * 4;
        if (vec_y && n + 3 < N) {
          *reinterpret_cast<float4*>(row + n) =
              make_float4(acc[i][4 * q], acc[i][4 * q + 1], acc[i][4 * q + 2], acc[i][4 * q + 3]);
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (n + j < N) row[n + j] = acc[i][4 * q + j];
        }
      }
    }
  }
}

// The candidates (issue 12), timed together by benches/cuda/sgemm_check.cu: cuBLAS's shape as its kernel
// name and ncu give it (128 x 128 x 8 tiles, four warps of 64 x 64, 8 x 16 a thread, two CTAs an SM),
// register-staged and software-pipelined, rows-first or zigzag FMA order, K slices of 8. No spills (ptxas -v:
// 247 and 238 registers). K slices of 16 spill at 248 registers and ran slower (39.5 TFLOP/s at 255).
using SgemmT8x16K8 = omega_sgemm::Cfg<128, 128, 8, 8, 16, 4, 2, false, 2, true>;
using SgemmT8x16K8Zigzag = omega_sgemm::Cfg<128, 128, 8, 8, 16, 4, 2, false, 2, true, false, 2>;

// At most 248 registers (__maxnreg__, which nvcc takes only without __launch_bounds__): Omega's launch
// rounds a kernel's count up to a multiple of 8 and refuses past the 255 a thread can have, so the
// 255-register kernel that __launch_bounds__(128, 2) lets ptxas build would not launch. 248 still leaves
// two 128-thread CTAs an SM (2 x 128 x 248 <= 65536).
#define OMEGA_SGEMM_ENTRY(name, C)                                                                           \
  static_assert(C::THREADS * C::MIN_CTAS * 248 <= 65536, "the CTAs an SM at 248 registers");                 \
  extern "C" __global__ void __maxnreg__(248)                                                                \
      name(const float* x, const float* w, float* y, uint32_t M, uint32_t N, uint32_t K) {                  \
    sgemm_tn<C>(x, w, y, M, N, K);                                                                           \
  }

OMEGA_SGEMM_ENTRY(omega_gemm_f32_tn_v2_8x16k8, SgemmT8x16K8)
OMEGA_SGEMM_ENTRY(omega_gemm_f32_tn_v2_8x16k8_zigzag, SgemmT8x16K8Zigzag)

// The zigzag candidate, persistent (sgemm_tn_persistent): the library's f32 path, one launch within the
// CTA budget where the 2-D grid took one launch per band of rows (8192^3: four launches of 1024 CTAs).
extern "C" __global__ void __maxnreg__(248) omega_gemm_f32_tn_v2_8x16k8_zigzag_p(const float* x, const float* w,
                                                                                   float* y, uint32_t M, uint32_t N,
                                                                                   uint32_t K) {
  sgemm_tn_persistent<SgemmT8x16K8Zigzag>(x, w, y, M, N, K);
}

// The cp.async K-major candidates (16-byte copies, no staging registers, zigzag order): 3 stages of K = 8
// (cuBLAS's "stage3"), 4 stages of K = 8, 3 stages of K = 16 (48 KiB, half the barriers). ptxas -v: 227,
// 231 and 248 registers, no spills; their loops are 91% FFMA against the zigzag form's 88%
// (tools/sgemm_sass.py).
using SgemmK8x16K8S3 = omega_sgemm::KCfg<128, 128, 8, 8, 16, 4, 3, true, 2>;
using SgemmK8x16K8S4 = omega_sgemm::KCfg<128, 128, 8, 8, 16, 4, 4, true, 2>;
using SgemmK8x16K16S3 = omega_sgemm::KCfg<128, 128, 16, 8, 16, 4, 3, true, 2>;

#define OMEGA_SGEMM_KENTRY(name, C)                                                                          \
  static_assert(C::THREADS * C::MIN_CTAS * 248 <= 65536, "the CTAs an SM at 248 registers");                 \
  extern "C" __global__ void __maxnreg__(248)                                                                \
      name(const float* x, const float* w, float* y, uint32_t M, uint32_t N, uint32_t K) {                  \
    sgemm_tn_kmajor<C>(x, w, y, M, N, K);                                                                    \
  }

OMEGA_SGEMM_KENTRY(omega_gemm_f32_tn_v2_8x16k8_cp3, SgemmK8x16K8S3)
OMEGA_SGEMM_KENTRY(omega_gemm_f32_tn_v2_8x16k8_cp4, SgemmK8x16K8S4)
OMEGA_SGEMM_KENTRY(omega_gemm_f32_tn_v2_8x16k16_cp3, SgemmK8x16K16S3)
