// CUDA-side study of the elementwise kernels that miss issue 13's bandwidth goal, on the GPU machine: the
// RMSNorm forms (one CTA a row, one warp a row, and the warp form with w in registers and 1, 2 or 4 rows
// a warp in flight) and QK-norm + RoPE under other load widths and register
// caps, each timed beside cudaMemcpy's device-to-device copy in the same process. This program uses CUDA;
// Omega never does. It answers, in one run, which form of each kernel the library should take.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -Ikernels/cuda -o /tmp/ew_variants benches/cuda/ew_variants.cu
//   /tmp/ew_variants
//
// Shapes: issue 13's, 16384 rows of 2048 (RMSNorm) and 16384 tokens x 16 heads x 128 (QK-norm + RoPE).
// Each variant runs on fresh random inputs with its output poisoned (all-ones bits). 64 sampled rows are
// checked against an f64 reference on the host, within the suite's bounds (f32: (cols + 16) * 2^-23
// relative to the row's RMS-scaled magnitude; bf16 outputs: one bf16 rounding more). Then it is timed:
// 20 calls in a CUDA graph, best of 5. The grid is what the library gives: the SMs times the CTAs an SM
// holds (cudaOccupancyMaxActiveBlocksPerMultiprocessor), or fewer when there are fewer rows. Output lines:
//   variant NAME regs R local L ctas_per_sm C
//   ew.<variant>_us T / _gbps G / _of_copy F        (bytes as the library's Info counts them)
//   check NAME max_err E bound B PASS|FAIL
//   ew_variants failed N
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "check_common.cuh"
#include "elementwise/rmsnorm.cuh"
#include "elementwise/rope.cuh"

// QK-norm + RoPE with every load 16 bytes wide (x, w and the tables), under three register caps: the
// module's entry keeps element loads for w and the tables because 16-byte ones spilled at 4 CTAs an SM.
#define NORM_ROPE_VEC(NAME, T, MIN_BLOCKS)                                                                   \
  __global__ void __launch_bounds__(256, MIN_BLOCKS) NAME(const T* x, const T* w, const float* cs,           \
                                                         const float* sn, T* y, uint32_t tokens,             \
                                                         uint32_t heads, uint32_t dim, float eps) {          \
    rope_rows<T, true, 16 / sizeof(T), false>(x, w, cs, sn, y, tokens, heads, dim, eps);                     \
  }
NORM_ROPE_VEC(nr_vec_b4_f32, float, 4)
NORM_ROPE_VEC(nr_vec_b3_f32, float, 3)
NORM_ROPE_VEC(nr_vec_b2_f32, float, 2)
NORM_ROPE_VEC(nr_vec_b4_bf16, uint16_t, 4)
NORM_ROPE_VEC(nr_vec_b3_bf16, uint16_t, 3)
NORM_ROPE_VEC(nr_vec_b2_bf16, uint16_t, 2)

// QK-norm + RoPE where each lane holds one 16-byte vector of each half-row (dim = 2 * 16 / sizeof(T) *
// lanes: 128 in both types), w in registers for the whole kernel, and U rows a group at a time: every
// row's x loads (and with HOIST its cos / sin loads) are issued before the first row's reduction, so a warp
// has U rows in flight where the module's entry has one, and the tables no longer wait for the norm.
template <typename T, int U, bool HOIST>
__device__ __forceinline__ void nr_rows(const T* x, const T* __restrict__ w, const float* __restrict__ cs,
                                        const float* __restrict__ sn, T* y, uint32_t tokens, uint32_t heads,
                                        uint32_t dim, float eps) {
  constexpr int V = 16 / sizeof(T);
  using R = typename EwRaw<T, V>::type;
  const uint32_t half = dim / 2, lanes = half / V, per_warp = 32 / lanes;
  const unsigned lane = (threadIdx.x & 31u) % lanes, group = (threadIdx.x & 31u) / lanes;
  const uint64_t rows = static_cast<uint64_t>(tokens) * heads;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * (blockDim.x >> 5) * per_warp;
  const uint32_t i = lane * V;
  const R wra = *reinterpret_cast<const R*>(w + i), wrb = *reinterpret_cast<const R*>(w + half + i);
  for (uint64_t first = (static_cast<uint64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5)) * per_warp;
       first < rows; first += stride * U) {
    R a[U], b[U];
    float c[U][V], sv[U][V];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint64_t r = first + u * stride + group;
      if (r < rows) {
        a[u] = *reinterpret_cast<const R*>(x + r * dim + i);
        b[u] = *reinterpret_cast<const R*>(x + r * dim + half + i);
        if (HOIST) {
          const size_t t = static_cast<size_t>(r / heads) * half;
          ew_load<V, float>(cs + t + i, c[u]);
          ew_load<V, float>(sn + t + i, sv[u]);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint64_t r = first + u * stride + group;
      const bool live = r < rows;
      float pa[V], pb[V];
      ew_unpack<T, V>(a[u], pa);
      ew_unpack<T, V>(b[u], pb);
      float ss = 0.0f;
#pragma unroll
      for (int j = 0; j < V; ++j) ss = fmaf(pa[j], pa[j], fmaf(pb[j], pb[j], ss));
      const float inv = rsqrtf(rope_group_sum(live ? ss : 0.0f, lanes) / static_cast<float>(dim) + eps);
      if (!live) continue;
      if (!HOIST) {
        const size_t t = static_cast<size_t>(r / heads) * half;
        ew_load<V, float>(cs + t + i, c[u]);
        ew_load<V, float>(sn + t + i, sv[u]);
      }
      float ya[V], yb[V], wa[V], wb[V];
      ew_unpack<T, V>(wra, wa);
      ew_unpack<T, V>(wrb, wb);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float xa = pa[j] * inv * wa[j], xb = pb[j] * inv * wb[j];
        ya[j] = xa * c[u][j] - xb * sv[u][j];
        yb[j] = xb * c[u][j] + xa * sv[u][j];
      }
      ew_store<V>(y + r * dim + i, ya);
      ew_store<V>(y + r * dim + half + i, yb);
    }
  }
}
#define NORM_ROPE_ROWS(NAME, T, U, HOIST, MIN_BLOCKS)                                                        \
  __global__ void __launch_bounds__(256, MIN_BLOCKS) NAME(const T* x, const T* w, const float* cs,           \
                                                         const float* sn, T* y, uint32_t tokens,             \
                                                         uint32_t heads, uint32_t dim, float eps) {          \
    nr_rows<T, U, HOIST>(x, w, cs, sn, y, tokens, heads, dim, eps);                                          \
  }
NORM_ROPE_ROWS(nr_u1_hoist_b4_f32, float, 1, true, 4)
NORM_ROPE_ROWS(nr_u2_b4_f32, float, 2, false, 4)
NORM_ROPE_ROWS(nr_u2_hoist_b4_f32, float, 2, true, 4)
NORM_ROPE_ROWS(nr_u2_hoist_b3_f32, float, 2, true, 3)
NORM_ROPE_ROWS(nr_u4_b3_f32, float, 4, false, 3)
NORM_ROPE_ROWS(nr_u1_hoist_b4_bf16, uint16_t, 1, true, 4)
NORM_ROPE_ROWS(nr_u2_b4_bf16, uint16_t, 2, false, 4)
NORM_ROPE_ROWS(nr_u2_b3_bf16, uint16_t, 2, false, 3)
NORM_ROPE_ROWS(nr_u2_hoist_b3_bf16, uint16_t, 2, true, 3)
NORM_ROPE_ROWS(nr_u2_hoist_b2_bf16, uint16_t, 2, true, 2)
NORM_ROPE_ROWS(nr_u4_b3_bf16, uint16_t, 4, false, 3)

// RMSNorm a warp a row (the module's warp form, rmsnorm_warp_rows) with w held in registers for the whole
// kernel (loaded once, not once a row after the reduction) and U rows a warp in flight: every row's x loads
// are issued before the first row's reduction. bf16 rows are half an f32 row's bytes, so what a row costs
// beyond its bytes (the reduction, w's loads behind it) weighs twice as much: the bf16 miss on the H200
// (0.869 of copy against f32's 0.986, s21).
template <typename T, int U>
__device__ __forceinline__ void rms_warp_wreg(const T* __restrict__ x, const T* __restrict__ w, T* y, uint32_t rows,
                                              uint32_t cols, float eps) {
  constexpr int V = RmsWarpCfg<T>::V, ITEMS = RmsWarpCfg<T>::ITEMS;
  using R = typename EwRaw<T, V>::type;
  const uint32_t lane = threadIdx.x % 32, warps = blockDim.x / 32, nv = cols / V;
  const uint32_t stride = gridDim.x * warps;
  R wr[ITEMS];
  rms_warp_load<T, V, ITEMS>(w, lane, nv, wr);
  for (uint32_t r0 = blockIdx.x * warps + threadIdx.x / 32; r0 < rows; r0 += U * stride) {
    R keep[U][ITEMS];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (r0 + u * stride < rows)
        rms_warp_load<T, V, ITEMS>(x + static_cast<size_t>(r0 + u * stride) * cols, lane, nv, keep[u]);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint32_t r = r0 + u * stride;
      if (r >= rows) break;
      const float inv = rms_warp_inv<T, V, ITEMS>(keep[u], lane, nv, cols, eps);
      rms_warp_scale_store<T, V, ITEMS>(keep[u], inv, lane, nv, y + static_cast<size_t>(r) * cols,
                                        [&](int i, uint32_t, float (&wv)[V]) { ew_unpack<T, V>(wr[i], wv); });
    }
  }
}
#define RMS_WREG(NAME, T, U)                                                                                 \
  __global__ void __launch_bounds__(256) NAME(const T* x, T*, const T* w, T* y, uint32_t rows, uint32_t cols, \
                                              float eps) {                                                   \
    rms_warp_wreg<T, U>(x, w, y, rows, cols, eps);                                                           \
  }
RMS_WREG(rms_wreg_u1_f32, float, 1)
RMS_WREG(rms_wreg_u1_bf16, uint16_t, 1)
RMS_WREG(rms_wreg_u2_bf16, uint16_t, 2)
RMS_WREG(rms_wreg_u4_bf16, uint16_t, 4)

typedef void (*RmsFn)(const void*, void*, const void*, void*, uint32_t, uint32_t, float);
typedef void (*RopeFn)(const void*, const void*, const float*, const float*, void*, uint32_t, uint32_t, uint32_t,
                       float);

struct Variant {
  const char* name;
  const void* fn;
  int block;  // threads a CTA
  int rows_per_cta;  // rows a CTA takes at once (the grid's cap: rows / this)
  bool bf16;
  int kind;  // 0 rmsnorm, 1 residual rmsnorm, 2 QK-norm + RoPE
};

static const Variant VARIANTS[] = {
    {"rmsnorm_block_f32", (const void*)omega_rmsnorm_f32, 256, 1, false, 0},
    {"rmsnorm_warp_f32", (const void*)omega_rmsnorm_warp_f32, 256, 8, false, 0},
    {"rmsnorm_block_bf16", (const void*)omega_rmsnorm_bf16, 128, 1, true, 0},
    {"rmsnorm_warp_bf16", (const void*)omega_rmsnorm_warp_bf16, 256, 8, true, 0},
    {"rms_wreg_u1_f32", (const void*)rms_wreg_u1_f32, 256, 8, false, 0},
    {"rms_wreg_u1_bf16", (const void*)rms_wreg_u1_bf16, 256, 8, true, 0},
    {"rms_wreg_u2_bf16", (const void*)rms_wreg_u2_bf16, 256, 8, true, 0},
    {"rms_wreg_u4_bf16", (const void*)rms_wreg_u4_bf16, 256, 8, true, 0},
    {"add_rmsnorm_block_bf16", (const void*)omega_add_rmsnorm_bf16, 128, 1, true, 1},
    {"add_rmsnorm_warp_bf16", (const void*)omega_add_rmsnorm_warp_bf16, 256, 8, true, 1},
    {"norm_rope_f32", (const void*)omega_norm_rope_f32, 256, 16, false, 2},
    {"nr_vec_b4_f32", (const void*)nr_vec_b4_f32, 256, 16, false, 2},
    {"nr_vec_b3_f32", (const void*)nr_vec_b3_f32, 256, 16, false, 2},
    {"nr_vec_b2_f32", (const void*)nr_vec_b2_f32, 256, 16, false, 2},
    {"nr_u1_hoist_b4_f32", (const void*)nr_u1_hoist_b4_f32, 256, 16, false, 2},
    {"nr_u2_b4_f32", (const void*)nr_u2_b4_f32, 256, 16, false, 2},
    {"nr_u2_hoist_b4_f32", (const void*)nr_u2_hoist_b4_f32, 256, 16, false, 2},
    {"nr_u2_hoist_b3_f32", (const void*)nr_u2_hoist_b3_f32, 256, 16, false, 2},
    {"nr_u4_b3_f32", (const void*)nr_u4_b3_f32, 256, 16, false, 2},
    {"norm_rope_bf16", (const void*)omega_norm_rope_bf16, 256, 32, true, 2},
    {"nr_vec_b4_bf16", (const void*)nr_vec_b4_bf16, 256, 32, true, 2},
    {"nr_vec_b3_bf16", (const void*)nr_vec_b3_bf16, 256, 32, true, 2},
    {"nr_vec_b2_bf16", (const void*)nr_vec_b2_bf16, 256, 32, true, 2},
    {"nr_u1_hoist_b4_bf16", (const void*)nr_u1_hoist_b4_bf16, 256, 32, true, 2},
    {"nr_u2_b4_bf16", (const void*)nr_u2_b4_bf16, 256, 32, true, 2},
    {"nr_u2_b3_bf16", (const void*)nr_u2_b3_bf16, 256, 32, true, 2},
    {"nr_u2_hoist_b3_bf16", (const void*)nr_u2_hoist_b3_bf16, 256, 32, true, 2},
    {"nr_u2_hoist_b2_bf16", (const void*)nr_u2_hoist_b2_bf16, 256, 32, true, 2},
    {"nr_u4_b3_bf16", (const void*)nr_u4_b3_bf16, 256, 32, true, 2},
};

static int failed = 0;

static float val(const std::vector<uint16_t>& v16, const std::vector<float>& v32, bool bf16, size_t i) {
  return bf16 ? from_bf16(v16[i]) : v32[i];
}

int main() {
  const uint32_t rows = 16384, cols = 2048, heads = 16, dim = 128, half = dim / 2;
  const float eps = 1e-6f;
  const size_t n = (size_t)rows * cols;  // QK-norm + RoPE: tokens * heads * dim is the same count
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const double copy = copy_gbps(st);
  printf("ew.copy_gbps %.1f\n", copy);

  // Inputs: x (and h) uniform in [-1, 1), w in [0, 2), tables of angles of positions near 40960.
  uint64_t s = 0x5eed;
  auto uni = [&] { return (float)((splitmix(s) >> 40) / (double)(1 << 24)) * 2.0f - 1.0f; };
  std::vector<float> x32(n), h32(n), w32(cols), cs(rows * half), sn(rows * half);
  std::vector<uint16_t> x16(n), h16(n), w16(cols);
  for (size_t i = 0; i < n; ++i) x32[i] = uni(), h32[i] = uni(), x16[i] = to_bf16(x32[i]), h16[i] = to_bf16(h32[i]);
  for (uint32_t i = 0; i < cols; ++i) w32[i] = uni() + 1.0f, w16[i] = to_bf16(w32[i]);
  for (uint32_t t = 0; t < rows; ++t)
    for (uint32_t i = 0; i < half; ++i) {
      const double a = (40960.0 - rows + t) * pow(1e6, -2.0 * i / dim);
      cs[(size_t)t * half + i] = (float)cos(a), sn[(size_t)t * half + i] = (float)sin(a);
    }
  void *dx, *dh, *dw, *dy;
  float *dcs, *dsn;
  CK(cudaMalloc(&dx, n * 4));
  CK(cudaMalloc(&dh, n * 4));
  CK(cudaMalloc(&dw, cols * 4));
  CK(cudaMalloc(&dy, n * 4));
  CK(cudaMalloc(&dcs, cs.size() * 4));
  CK(cudaMalloc(&dsn, sn.size() * 4));
  CK(cudaMemcpy(dcs, cs.data(), cs.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dsn, sn.data(), sn.size() * 4, cudaMemcpyHostToDevice));

  for (const Variant& v : VARIANTS) {
    // (Not `e`: CK's own variable would shadow it inside the macro.)
    const size_t elem = v.bf16 ? 2 : 4;
    CK(cudaMemcpy(dx, v.bf16 ? (const void*)x16.data() : (const void*)x32.data(), n * elem, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dh, v.bf16 ? (const void*)h16.data() : (const void*)h32.data(), n * elem, cudaMemcpyHostToDevice));
    // The norm's weight: RMSNorm's is [cols], QK-norm's [dim] (its first dim values).
    CK(cudaMemcpy(dw, v.bf16 ? (const void*)w16.data() : (const void*)w32.data(), cols * elem, cudaMemcpyHostToDevice));
    CK(cudaMemset(dy, 0xFF, n * elem));
    cudaFuncAttributes a;
    CK(cudaFuncGetAttributes(&a, v.fn));
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, v.fn, v.block, 0));
    const uint32_t units = v.kind == 2 ? rows * heads : rows;
    const uint32_t want = (units + v.rows_per_cta - 1) / v.rows_per_cta;
    const uint32_t grid = std::min<uint32_t>(want, (uint32_t)(sms * per_sm));
    printf("variant %s regs %d local %zu ctas_per_sm %d grid %u\n", v.name, a.numRegs, a.localSizeBytes, per_sm, grid);
    auto launch = [&] {
      if (v.kind == 2)
        ((RopeFn)v.fn)<<<grid, v.block, 0, st>>>(dx, dw, dcs, dsn, dy, rows, heads, dim, eps);
      else
        ((RmsFn)v.fn)<<<grid, v.block, 0, st>>>(dx, dh, dw, dy, rows, cols, eps);
    };
    launch();
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(st));

    // The check: 64 sampled rows (RMSNorm) or (token, head) rows against f64.
    std::vector<uint16_t> y16(v.bf16 ? n : 0), hb16(v.kind == 1 ? n : 0);
    std::vector<float> y32(v.bf16 ? 0 : n);
    CK(cudaMemcpy(v.bf16 ? (void*)y16.data() : (void*)y32.data(), dy, n * elem, cudaMemcpyDeviceToHost));
    double worst = 0, bound = 0;
    uint64_t r = 0xc0ffee;
    const uint32_t width = v.kind == 2 ? dim : cols;
    for (int sample = 0; sample < 64; ++sample) {
      const size_t row = splitmix(r) % units, base = row * width;
      std::vector<double> in(width);
      double ss = 0;
      for (uint32_t c = 0; c < width; ++c) {
        double xv = val(x16, x32, v.bf16, base + c);
        if (v.kind == 1) {
          const float sum = (float)(xv + val(h16, h32, v.bf16, base + c));
          xv = v.bf16 ? from_bf16(to_bf16(sum)) : sum;
        }
        in[c] = xv;
        ss += xv * xv;
      }
      const double inv = 1.0 / sqrt(ss / width + eps);
      std::vector<double> want_row(width), mag(width);
      for (uint32_t c = 0; c < width; ++c) {
        const double wv = v.bf16 ? from_bf16(w16[c]) : w32[c];
        want_row[c] = in[c] * inv * wv;
        mag[c] = fabs(want_row[c]) + fabs(inv * wv) * 1e-3;
      }
      if (v.kind == 2) {
        const size_t t = (row / heads) * half;
        std::vector<double> rot(width);
        for (uint32_t i = 0; i < half; ++i) {
          const double c = cs[t + i], sv = sn[t + i], p = want_row[i], q = want_row[half + i];
          rot[i] = p * c - q * sv, rot[half + i] = q * c + p * sv;
          mag[i] = mag[half + i] = fabs(p) + fabs(q) + 1e-6;
        }
        want_row = rot;
      }
      for (uint32_t c = 0; c < width; ++c) {
        const double got = v.bf16 ? from_bf16(y16[base + c]) : y32[base + c];
        double err = fabs(got - want_row[c]);
        if (!(err <= 1e30)) err = INFINITY;
        const double b = (width + 16.0) * ldexp(1.0, -23) * mag[c] + (v.bf16 ? ldexp(1.0, -8) * mag[c] : 0.0);
        worst = std::max(worst, err / b);
      }
    }
    bound = 1.0;
    const bool ok = worst <= bound;
    failed += ok ? 0 : 1;
    printf("check %s max_err %.3g bound %.3g %s\n", v.name, worst, bound, ok ? "PASS" : "FAIL");

    // Bytes as the library's Info counts them.
    const double bytes = v.kind == 0   ? (double)n * elem * 2 + cols * elem
                         : v.kind == 1 ? (double)n * elem * 4 + cols * elem
                                       : (double)n * elem * 2 + (double)rows * half * 8 + dim * elem;
    const double us = graph_us(st, 20, 1, [&](int) { launch(); });
    const double gbps = bytes / (us * 1e-6) / 1e9;
    printf("ew.%s_us %.3f\new.%s_gbps %.1f\new.%s_of_copy %.3f\n", v.name, us, v.name, gbps, v.name, gbps / copy);
    fflush(stdout);
  }
  printf("ew_variants failed %d\n", failed);
  return failed != 0;
}
