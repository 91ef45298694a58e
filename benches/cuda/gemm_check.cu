// CUDA-side check and benchmark of Omega's large-M bf16 GEMM kernels (kernels/cuda/matmul/gemm_bf16.cuh,
// gemm_bf16_ts.cuh) beside cuBLAS, on the GPU machine. This program uses CUDA and cuBLAS; Omega never does:
// it is how the kernels' correctness and speed are established before (and beside) Omega launching them.
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels/cuda/matmul \
//        -o /tmp/gemm_check benches/cuda/gemm_check.cu -lcublas -lcuda
//   /tmp/gemm_check [--check] [--variant base|ts|mc|n128|hilbert|sk|fit|pp|all|<name>]
//
// Variants: `base` (omega_gemm_bf16_tn), `ts` (omega_gemm_bf16_tn_ts and other stage/staging splits of its
// template: ts_s<stages>c<chunk columns>x<buffers>), `mc` (omega_gemm_bf16_tn_mc, 2-CTA clusters with W
// multicast, and its template's other splits), `n128` (the narrow 128 x 128 tile in both forms:
// omega_gemm_bf16_tn_ts_n128, omega_gemm_bf16_tn_mc_n128, and a five-stage, four-buffer split of each);
// `hilbert` (the TMA-store entry and the wide and narrow cluster entries with the units in Hilbert-curve
// order, from a table the harness writes per shape: hopper-kernels.md section 5's last step); `sk` (the
// stream-K entries omega_gemm_bf16_tn_sk and omega_gemm_bf16_tn_sk_n128 on min(SMs, tiles x K blocks / n)
// CTAs for n = 1, 4 (the library's grid) and 16; their flags are checked to be left zero after every
// launch); `fit` (tile widths that make the Qwen3 shapes' tile counts whole waves of 132 SMs, each
// `<form>_n<width>` in the TMA-store form, the cluster form or, for 48, the direct one: n160 is
// 512 x 5120 in 128 tiles, n192 4096 x 1536 in 256, n64 512 x 2048 in 128, n48 512 x 1536 in 128, n32
// 4096 x 128 in 128); `pp` (gemm_bf16_pp.cuh: the two consumers on alternate whole tiles, so one's
// epilogue overlaps the other's mainloop: the module's omega_gemm_bf16_tn_pp_n128, and its body at widths
// 96 and 64 and with a deeper staging ring); `all` (the default) runs every one;
// a variant's full name runs that one alone.
// For each shape: x [M,K] and W [N,K] bf16 from a seeded generator; cuBLAS
// (cublasGemmEx, bf16 in, f32 out, f32 compute) runs once; then for every variant y is poisoned (all-ones
// bits, a NaN), the kernel runs, every element is compared with cuBLAS's on the device and 4096 sampled
// elements (all of them on small shapes) with an f64 CPU reference. Benchmark shapes are then timed
// (cudaEvent over repeated launches after warm-up), each variant beside cuBLAS in rounds, the best of two
// rounds kept (the clock drifts with heat). Output lines:
//   variant NAME regs R local L smem S [max_active_clusters C]
//   check M N K VARIANT max_rel_vs_ref E max_abs_vs_cublas D PASS|FAIL
//   gemm.<M>x<N>x<K>.<variant>_tflops T / .cublas_tflops T / .<variant>_ratio R
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// The module's bf16-output entries are checked under Omega (the suite's library case), not here.
#define OMEGA_GEMM_NO_Y16_ENTRIES
#include "gemm_bf16_sk.cuh"
#include "gemm_bf16_pp.cuh"

#include "check_common.cuh"
#include "tma_encode.cuh"

// The template's other splits of shared memory between stages and the staging ring (the module's entries
// are ts_s4c32x2 and mc_s4c32x2).
template <int S, int C, int B, int BN = GEMM_BN>
__global__ void __launch_bounds__(GEMM_THREADS, 1)
    ts_kernel(const void* ta, const void* tb, const void* ty, float* y, uint32_t M, uint32_t N, uint32_t K) {
  gemm_bf16_ts_body<S, C, B, 1, BN>(ta, tb, ty, y, M, N, K);
}

template <int S, int C, int B, int BN = GEMM_BN>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(GEMM_THREADS, 1)
    mc_kernel(const void* ta, const void* tb, const void* ty, float* y, uint32_t M, uint32_t N, uint32_t K) {
  gemm_bf16_ts_body<S, C, B, 2, BN>(ta, tb, ty, y, M, N, K);
}

// The ping-pong body at other stages, staging rings and widths than the module's entry.
template <int S, int C, int B, int BN>
__global__ void __launch_bounds__(GEMM_THREADS, 1)
    pp_kernel(const void* ta, const void* tb, const void* ty, float* y, uint32_t M, uint32_t N, uint32_t K) {
  gemm_bf16_pp_body<S, C, B, BN>(ta, tb, ty, y, M, N, K);
}

// The base kernel's direct-store body at another tile width (widths the staging ring's 32-column chunks do
// not divide); y's descriptor unused.
template <int BN, int S>
__global__ void __launch_bounds__(GEMM_THREADS, 1)
    direct_kernel(const void* ta, const void* tb, const void*, float* y, uint32_t M, uint32_t N, uint32_t K) {
  gemm_bf16_body<BN, S>(ta, tb, y, nullptr, nullptr, M, N, K, 1);
}

// The Hilbert-order variants read their unit order from this table, which one() fills for each shape
// (hopper-kernels.md section 5: fast.cu's last step, Hilbert order + TMA store, 799 -> 808 TFLOP/s).
#define HILBERT_MAX_UNITS 65536
__device__ int2 g_hilbert[HILBERT_MAX_UNITS];

struct HilbertOrder {
  template <int CLUSTER>
  __device__ __forceinline__ static void of(int t, int, int, int* um, int* tn) {
    const int2 v = g_hilbert[t];
    *um = v.x;
    *tn = v.y;
  }
};

template <int S, int C, int B, int CLUSTER, int BN = GEMM_BN>
__global__ void __launch_bounds__(GEMM_THREADS, 1)
    hilbert_kernel(const void* ta, const void* tb, const void* ty, float* y, uint32_t M, uint32_t N, uint32_t K) {
  gemm_bf16_ts_body<S, C, B, CLUSTER, BN, HilbertOrder>(ta, tb, ty, y, M, N, K);
}

template <int S, int C, int B, int BN = GEMM_BN>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(GEMM_THREADS, 1)
    hilbert_mc_kernel(const void* ta, const void* tb, const void* ty, float* y, uint32_t M, uint32_t N, uint32_t K) {
  gemm_bf16_ts_body<S, C, B, 2, BN, HilbertOrder>(ta, tb, ty, y, M, N, K);
}

// (x, y) of position d along the Hilbert curve of a side x side square (side a power of 2).
static void hilbert_d2xy(int side, int d, int* x, int* y) {
  int rx, ry, t = d;
  *x = *y = 0;
  for (int s = 1; s < side; s *= 2) {
    rx = 1 & (t / 2);
    ry = 1 & (t ^ rx);
    if (ry == 0) {
      if (rx == 1) {
        *x = s - 1 - *x;
        *y = s - 1 - *y;
      }
      int tmp = *x;
      *x = *y;
      *y = tmp;
    }
    *x += s * rx;
    *y += s * ry;
    t /= 4;
  }
}

// The units (um, tn) of a units_m x tiles_n grid in the order a Hilbert curve over the smallest covering
// power-of-2 square visits them (positions outside the grid skipped).
static std::vector<int2> hilbert_order(int units_m, int tiles_n) {
  int side = 1;
  while (side < units_m || side < tiles_n) side *= 2;
  std::vector<int2> out;
  for (long d = 0; d < (long)side * side; ++d) {
    int x, y;
    hilbert_d2xy(side, (int)d, &x, &y);
    if (x < units_m && y < tiles_n) out.push_back(make_int2(x, y));
  }
  return out;
}

typedef void (*TsEntry)(const void*, const void*, const void*, float*, uint32_t, uint32_t, uint32_t);
typedef void (*SkEntry)(const void*, const void*, const void*, float*, float*, uint32_t*, uint32_t, uint32_t,
                        uint32_t);

struct Variant {
  const char* name;
  const char* family;  // base, ts, mc
  TsEntry entry;       // null: the base entry
  int smem;
  int cluster;
  int max_clusters;  // co-resident 2-CTA clusters (cudaOccupancyMaxActiveClusters), mc only
  int bn;            // tile columns: 256 (wide), 128 (narrow) or a fitted width
  SkEntry sk;        // a stream-K entry (entry is then null)
  int sk_min_iters;  // its grid: min(SMs, max(1, iterations / sk_min_iters))
};

static Variant variants[] = {
    {"base", "base", nullptr, GEMM_SMEM_BYTES, 1, 0, 256},
    {"ts", "ts", omega_gemm_bf16_tn_ts, GEMM_TS_SMEM_BYTES, 1, 0, 256},
    {"ts_s3c32x5", "ts", ts_kernel<3, 32, 5>, GEMM_TS_SMEM_FOR(3, 32, 5), 1, 0, 256},
    {"ts_s3c64x2", "ts", ts_kernel<3, 64, 2>, GEMM_TS_SMEM_FOR(3, 64, 2), 1, 0, 256},
    {"ts_s2c256x1", "ts", ts_kernel<2, 256, 1>, GEMM_TS_SMEM_FOR(2, 256, 1), 1, 0, 256},
    {"mc", "mc", omega_gemm_bf16_tn_mc, GEMM_MC_SMEM_BYTES, 2, 0, 256},
    {"mc_s3c32x5", "mc", mc_kernel<3, 32, 5>, GEMM_TS_SMEM_FOR(3, 32, 5), 2, 0, 256},
    {"mc_s2c256x1", "mc", mc_kernel<2, 256, 1>, GEMM_TS_SMEM_FOR(2, 256, 1), 2, 0, 256},
    // The narrow tile (128 x 128) in both forms: the module's entries and a deeper-ring split of each.
    {"ts_n128", "n128", omega_gemm_bf16_tn_ts_n128, GEMM_TS_N128_SMEM_BYTES, 1, 0, 128},
    {"ts_n128_s5c32x4", "n128", ts_kernel<5, 32, 4, 128>, GEMM_TS_SMEM_FOR_BN(128, 5, 32, 4), 1, 0, 128},
    {"mc_n128", "n128", omega_gemm_bf16_tn_mc_n128, GEMM_MC_N128_SMEM_BYTES, 2, 0, 128},
    {"mc_n128_s5c32x4", "n128", mc_kernel<5, 32, 4, 128>, GEMM_TS_SMEM_FOR_BN(128, 5, 32, 4), 2, 0, 128},
    // The module's TMA-store and cluster entries' configurations in Hilbert unit order.
    {"ts_hilbert", "hilbert", hilbert_kernel<4, 32, 2, 1>, GEMM_TS_SMEM_BYTES, 1, 0, 256},
    {"mc_hilbert", "hilbert", hilbert_mc_kernel<4, 32, 2>, GEMM_MC_SMEM_BYTES, 2, 0, 256},
    {"mc_n128_hilbert", "hilbert", hilbert_mc_kernel<6, 32, 2, 128>, GEMM_MC_N128_SMEM_BYTES, 2, 0, 128},
    // Stream-K on either tile, on grids of at least 1, 4 (the library's) and 16 iterations a CTA.
    {"sk", "sk", nullptr, GEMM_SK_SMEM_BYTES, 1, 0, 256, omega_gemm_bf16_tn_sk, 1},
    {"sk_i4", "sk", nullptr, GEMM_SK_SMEM_BYTES, 1, 0, 256, omega_gemm_bf16_tn_sk, 4},
    {"sk_n128", "sk", nullptr, GEMM_SK_N128_SMEM_BYTES, 1, 0, 128, omega_gemm_bf16_tn_sk_n128, 1},
    {"sk_n128_i4", "sk", nullptr, GEMM_SK_N128_SMEM_BYTES, 1, 0, 128, omega_gemm_bf16_tn_sk_n128, 4},
    {"sk_n128_i16", "sk", nullptr, GEMM_SK_N128_SMEM_BYTES, 1, 0, 128, omega_gemm_bf16_tn_sk_n128, 16},
    // Tile widths fitted to whole waves (the module's n160, n192, n96 and n64 entries, and others), each with the
    // deepest ring that fits beside its staging.
    {"ts_n192", "fit", omega_gemm_bf16_tn_ts_n192, GEMM_N192_SMEM_BYTES, 1, 0, 192},
    {"ts_n192_s5c32x1", "fit", ts_kernel<5, 32, 1, 192>, GEMM_TS_SMEM_FOR_BN(192, 5, 32, 1), 1, 0, 192},
    {"mc_n192", "fit", omega_gemm_bf16_tn_mc_n192, GEMM_N192_SMEM_BYTES, 2, 0, 192},
    {"ts_n160", "fit", omega_gemm_bf16_tn_ts_n160, GEMM_N160_SMEM_BYTES, 1, 0, 160},
    {"mc_n160", "fit", omega_gemm_bf16_tn_mc_n160, GEMM_N160_SMEM_BYTES, 2, 0, 160},
    {"ts_n96", "fit", omega_gemm_bf16_tn_ts_n96, GEMM_N96_SMEM_BYTES, 1, 0, 96},
    {"ts_n64", "fit", omega_gemm_bf16_tn_ts_n64, GEMM_N64_SMEM_BYTES, 1, 0, 64},
    {"mc_n64", "fit", omega_gemm_bf16_tn_mc_n64, GEMM_N64_SMEM_BYTES, 2, 0, 64},
    {"direct_n48", "fit", direct_kernel<48, 8>, GEMM_SMEM_FOR_BN(48, 8), 1, 0, 48},
    {"ts_n32", "fit", ts_kernel<8, 32, 2, 32>, GEMM_TS_SMEM_FOR_BN(32, 8, 32, 2), 1, 0, 32},
    // Ping-pong consumers (each on whole 128 x BN tiles): the module's entry, the narrow width with a deeper
    // staging ring, and the other widths with the TMA-store staging of the entries of their width.
    {"pp_n128", "pp", omega_gemm_bf16_tn_pp_n128, GEMM_TS_N128_SMEM_BYTES, 1, 0, 128},
    {"pp_n128_s5c32x4", "pp", pp_kernel<5, 32, 4, 128>, GEMM_TS_SMEM_FOR_BN(128, 5, 32, 4), 1, 0, 128},
    {"pp_n96", "pp", pp_kernel<6, 32, 2, 96>, GEMM_TS_SMEM_FOR_BN(96, 6, 32, 2), 1, 0, 96},
    {"pp_n64", "pp", pp_kernel<8, 32, 2, 64>, GEMM_TS_SMEM_FOR_BN(64, 8, 32, 2), 1, 0, 64},
};

// max |a - b| over n floats into *out (as the bits of a non-negative float; a NaN counts as +inf).
__global__ void max_abs_diff(const float* a, const float* b, size_t n, unsigned int* out) {
  float m = 0.f;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float d = fabsf(a[i] - b[i]);
    if (!(d <= 3.0e38f)) d = INFINITY;
    m = fmaxf(m, d);
  }
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0) atomicMax(out, __float_as_uint(m));
}

__global__ void gather(const float* y, const size_t* idx, size_t n, float* out) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = y[idx[i]];
}

// Every B box height a variant loads: its tile width over its cluster size.
static const int b_box_rows[] = {256, 192, 160, 128, 96, 80, 64, 48, 32};
#define B_BOXES ((int)(sizeof(b_box_rows) / sizeof(b_box_rows[0])))

struct Run {
  int sms;
  float* partials;    // the stream-K entries' slots: SMs * GEMM_SK_SLOT_FLOATS(256)
  uint32_t* flags;    // their 2 * SMs flags, zeroed once and left zero by every launch
  cublasHandle_t h;
  std::string want;  // --variant
};

static bool selected(const Run& run, const Variant& v) {
  return run.want == "all" || run.want == v.family || run.want == v.name;
}

static bool one(Run& run, uint32_t M, uint32_t N, uint32_t K, bool bench, uint64_t seed) {
  std::vector<uint16_t> hx((size_t)M * K), hw((size_t)N * K);
  uint64_t s = seed;
  for (auto& v : hx) v = random_bf16(s);
  for (auto& v : hw) v = random_bf16(s);
  const size_t MN = (size_t)M * N;
  void *dx, *dw;
  float *dy, *dref, *dsamp;
  size_t* didx;
  unsigned int* ddiff;
  CUtensorMap* dmaps;
  CK(cudaMalloc(&dx, hx.size() * 2));
  CK(cudaMalloc(&dw, hw.size() * 2));
  CK(cudaMalloc(&dy, MN * 4));
  CK(cudaMalloc(&dref, MN * 4));
  CK(cudaMalloc(&dmaps, (4 + B_BOXES) * sizeof(CUtensorMap)));
  CK(cudaMalloc(&ddiff, 4));
  CK(cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dw, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
  // 0: A, 3: y (N % 4 == 0 only), 4 + i: B with a box of b_box_rows[i] rows (a tile's columns divided
  // among the CTAs of its cluster).
  CUtensorMap maps[4 + B_BOXES];
  memset(maps, 0, sizeof(maps));
  encode(&maps[0], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dx, K, M, GEMM_BK, GEMM_BM);
  for (int i = 0; i < B_BOXES; ++i)
    encode(&maps[4 + i], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dw, K, N, GEMM_BK, b_box_rows[i]);
  const bool tma_y = N % 4 == 0;
  if (tma_y) encode(&maps[3], CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, dy, N, M, GEMM_Y_BOX_COLS, GEMM_Y_BOX_ROWS);
  CK(cudaMemcpy(dmaps, maps, sizeof(maps), cudaMemcpyHostToDevice));
  const void* tmap_y = tma_y ? (const void*)&dmaps[3] : nullptr;

  // The samples of the f64 check and the reference values at them.
  const size_t samples = MN <= 65536 ? MN : 4096;
  std::vector<size_t> idx(samples);
  std::vector<double> ref(samples), mag(samples);
  uint64_t r = seed ^ 0xabcdef;
  for (size_t i = 0; i < samples; ++i) {
    idx[i] = samples == MN ? i : splitmix(r) % MN;
    size_t m = idx[i] / N, n = idx[i] % N;
    double acc = 0, a = 0;
    for (uint32_t k = 0; k < K; ++k) {
      double p = (double)from_bf16(hx[m * K + k]) * (double)from_bf16(hw[n * K + k]);
      acc += p;
      a += fabs(p);
    }
    ref[i] = acc;
    mag[i] = a;
  }
  CK(cudaMalloc(&didx, samples * sizeof(size_t)));
  CK(cudaMalloc(&dsamp, samples * 4));
  CK(cudaMemcpy(didx, idx.data(), samples * sizeof(size_t), cudaMemcpyHostToDevice));

  const int tiles_m = (M + GEMM_BM - 1) / GEMM_BM;
  // The Hilbert table is per unit grid; the variants of one (tile width, cluster) share it, so it is
  // written before each such variant runs (its launches are stream-ordered after the copy).
  auto hilbert_table = [&](const Variant& v) {
    const int units_m = (tiles_m + v.cluster - 1) / v.cluster, tiles_n = (N + v.bn - 1) / v.bn;
    std::vector<int2> order = hilbert_order(units_m, tiles_n);
    if (order.size() > HILBERT_MAX_UNITS) {
      fprintf(stderr, "%u x %u: %zu units past the Hilbert table's %d\n", M, N, order.size(), HILBERT_MAX_UNITS);
      exit(2);
    }
    CK(cudaMemcpyToSymbol(g_hilbert, order.data(), order.size() * sizeof(int2)));
  };
  auto launch = [&](const Variant& v) {
    const int tiles_n = (N + v.bn - 1) / v.bn;
    const int tiles = tiles_m * tiles_n, pairs = ((tiles_m + 1) / 2) * tiles_n;
    // W's box is the tile's columns divided among the CTAs of a cluster.
    const int b_rows = v.bn / v.cluster;
    const CUtensorMap* tb = nullptr;
    for (int i = 0; i < B_BOXES; ++i)
      if (b_box_rows[i] == b_rows) tb = &dmaps[4 + i];
    if (!tb) {
      fprintf(stderr, "variant %s: no B descriptor of %d rows\n", v.name, b_rows);
      exit(2);
    }
    if (v.sk) {
      const uint64_t iters = (uint64_t)tiles * ((K + GEMM_BK - 1) / GEMM_BK);
      const uint64_t want = iters / v.sk_min_iters > 0 ? iters / v.sk_min_iters : 1;
      const int grid = want < (uint64_t)run.sms ? (int)want : run.sms;
      v.sk<<<grid, GEMM_THREADS, v.smem>>>(&dmaps[0], tb, tmap_y, dy, run.partials, run.flags, M, N, K);
    } else if (!v.entry) {
      const int grid = tiles < run.sms ? tiles : run.sms;
      omega_gemm_bf16_tn<<<grid, GEMM_THREADS, v.smem>>>(&dmaps[0], tb, dy, M, N, K);
    } else if (v.cluster == 1) {
      const int grid = tiles < run.sms ? tiles : run.sms;
      v.entry<<<grid, GEMM_THREADS, v.smem>>>(&dmaps[0], tb, tmap_y, dy, M, N, K);
    } else {
      const int clusters = pairs < v.max_clusters ? pairs : v.max_clusters;
      v.entry<<<2 * clusters, GEMM_THREADS, v.smem>>>(&dmaps[0], tb, tmap_y, dy, M, N, K);
    }
  };
  const float one_f = 1.0f, zero_f = 0.0f;
  auto cublas = [&] {
    cublasStatus_t st = cublasGemmEx(run.h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one_f, dw, CUDA_R_16BF, K, dx,
                                     CUDA_R_16BF, K, &zero_f, dref, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
      fprintf(stderr, "cublasGemmEx: %d\n", (int)st);
      exit(2);
    }
  };
  cublas();
  CK(cudaDeviceSynchronize());

  bool all_ok = true;
  std::vector<float> got(samples);
  for (auto& v : variants) {
    if (!selected(run, v)) continue;
    CK(cudaMemset(dy, 0xFF, MN * 4));
    if (strcmp(v.family, "hilbert") == 0) hilbert_table(v);
    launch(v);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemset(ddiff, 0, 4));
    max_abs_diff<<<4 * run.sms, 256>>>(dy, dref, MN, ddiff);
    gather<<<(unsigned)((samples + 255) / 256), 256>>>(dy, didx, samples, dsamp);
    CK(cudaGetLastError());
    unsigned int diff_bits;
    CK(cudaMemcpy(&diff_bits, ddiff, 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(got.data(), dsamp, samples * 4, cudaMemcpyDeviceToHost));
    float max_abs_cublas;
    memcpy(&max_abs_cublas, &diff_bits, 4);
    bool flags_zero = true;
    if (v.sk) {
      std::vector<uint32_t> flags(2 * run.sms);
      CK(cudaMemcpy(flags.data(), run.flags, flags.size() * 4, cudaMemcpyDeviceToHost));
      for (uint32_t f : flags) flags_zero = flags_zero && f == 0;
    }
    // Tolerance scales with K (f32 accumulation of K products of magnitude <= 1).
    double max_rel = 0;
    for (size_t i = 0; i < samples; ++i) {
      double err = fabs((double)got[i] - ref[i]);
      if (!(err <= 1e30)) err = INFINITY;
      double rel = err / (mag[i] + 1e-30);
      if (rel > max_rel) max_rel = rel;
    }
    const double tol = 1e-6 * sqrt((double)K) + 1e-6;
    const bool ok = max_rel <= tol && max_abs_cublas <= 1e-2 * sqrt((double)K) && flags_zero;
    printf("check %u %u %u %s max_rel_vs_ref %.3g max_abs_vs_cublas %.3g%s %s\n", M, N, K, v.name, max_rel,
           (double)max_abs_cublas, flags_zero ? "" : " flags_not_left_zero", ok ? "PASS" : "FAIL");
    fflush(stdout);
    all_ok = all_ok && ok;
  }

  if (bench) {
    const double flops = 2.0 * M * N * K;
    const int reps = (int)fmax(5.0, fmin(200.0, 2e13 / flops));
    auto time = [&](auto&& f) { return flops / (launches_us(reps, f) * 1e-6) / 1e12; };
    const int nv = sizeof(variants) / sizeof(variants[0]);
    std::vector<double> best(nv, 0.0);
    double tc = 0;
    for (int round = 0; round < 2; ++round) {
      tc = fmax(tc, time(cublas));
      for (int i = 0; i < nv; ++i)
        if (selected(run, variants[i])) {
          if (strcmp(variants[i].family, "hilbert") == 0) hilbert_table(variants[i]);
          best[i] = fmax(best[i], time([&] { launch(variants[i]); }));
        }
    }
    printf("gemm.%ux%ux%u.cublas_tflops %.1f\n", M, N, K, tc);
    for (int i = 0; i < nv; ++i) {
      if (!selected(run, variants[i])) continue;
      printf("gemm.%ux%ux%u.%s_tflops %.1f\ngemm.%ux%ux%u.%s_ratio %.3f\n", M, N, K, variants[i].name, best[i], M,
             N, K, variants[i].name, best[i] / tc);
    }
    fflush(stdout);
  }
  CK(cudaFree(dx));
  CK(cudaFree(dw));
  CK(cudaFree(dy));
  CK(cudaFree(dref));
  CK(cudaFree(dmaps));
  CK(cudaFree(ddiff));
  CK(cudaFree(didx));
  CK(cudaFree(dsamp));
  return all_ok;
}

int main(int argc, char** argv) {
  Run run;
  run.want = "all";
  bool check_only = false;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--check") == 0) {
      check_only = true;
    } else if (strcmp(argv[i], "--variant") == 0 && i + 1 < argc) {
      run.want = argv[++i];
    } else {
      fprintf(stderr, "usage: %s [--check] [--variant base|ts|mc|n128|hilbert|sk|fit|pp|all|<name>]\n", argv[0]);
      return 2;
    }
  }
  CK(cudaDeviceGetAttribute(&run.sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaMalloc(&run.partials, (size_t)run.sms * GEMM_SK_SLOT_FLOATS(GEMM_BN) * 4));
  CK(cudaMalloc(&run.flags, (size_t)run.sms * 2 * 4));
  CK(cudaMemset(run.flags, 0, (size_t)run.sms * 2 * 4));
  CK(cudaFuncSetAttribute(omega_gemm_bf16_tn, cudaFuncAttributeMaxDynamicSharedMemorySize, GEMM_SMEM_BYTES));
  for (auto& v : variants) {
    const void* f = v.sk ? (const void*)v.sk : v.entry ? (const void*)v.entry : (const void*)omega_gemm_bf16_tn;
    CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, v.smem));
    cudaFuncAttributes a;
    CK(cudaFuncGetAttributes(&a, f));
    printf("variant %s regs %d local %zu smem %d", v.name, a.numRegs, a.localSizeBytes, v.smem);
    if (v.cluster == 2) {
      // A persistent grid of more clusters than can be resident at once would run its last ones in a
      // second wave: the grid is this many clusters at most.
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(2 * (run.sms / 2));
      cfg.blockDim = dim3(GEMM_THREADS);
      cfg.dynamicSmemBytes = v.smem;
      cudaLaunchAttribute attr;
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = 2;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = 1;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      CK(cudaOccupancyMaxActiveClusters(&v.max_clusters, f, &cfg));
      if (v.max_clusters > run.sms / 2) v.max_clusters = run.sms / 2;
      printf(" max_active_clusters %d", v.max_clusters);
    }
    printf("\n");
  }
  cublasCreate(&run.h);
  int failed = 0, passed = 0;
  // N % 4 != 0 takes the direct-store epilogue; odd tile rows leave the last pair's second CTA past M.
  const uint32_t checks[][3] = {{1, 1, 8},         {7, 33, 1000},     {129, 257, 72},   {128, 256, 64},
                                {300, 520, 4096},  {1000, 4095, 1000}, {513, 2048, 768}, {4095, 260, 136},
                                {257, 4, 64},      {384, 1028, 200},  {2000, 3000, 520},
                                // One tile over 128 (and 64) K blocks: a stream-K tile cut among every CTA.
                                {128, 128, 8192},  {200, 384, 4096}};
  for (auto& c : checks) (one(run, c[0], c[1], c[2], false, 1 + c[0] * 31 + c[1]) ? passed : failed)++;
  if (check_only) {
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
  }
  const uint32_t benches[][3] = {{8192, 8192, 8192}, {4096, 4096, 4096}, {4096, 5120, 2048}, {4096, 2048, 4096},
                                 {4096, 1536, 2048}, {4096, 2048, 768},  {4096, 151936, 2048}, {512, 5120, 2048},
                                 {512, 2048, 4096},  {512, 1536, 2048},  {512, 2048, 768},   {512, 151936, 2048},
                                 // Mid M, where few tiles leave SMs idle (stream-K's case).
                                 {64, 5120, 2048},   {128, 5120, 2048},  {256, 5120, 2048},  {128, 2048, 4096},
                                 {128, 1536, 2048},  {128, 2048, 768},
                                 // The router: one column of tiles.
                                 {512, 128, 2048},   {4096, 128, 2048}};
  for (auto& b : benches) (one(run, b[0], b[1], b[2], true, 7 + b[0] + b[1]) ? passed : failed)++;
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
