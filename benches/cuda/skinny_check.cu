// CUDA-side check and benchmark of Omega's skinny bf16 GEMM (kernels/cuda/matmul/gemm_skinny.cuh) beside
// cuBLAS and the split-K GEMV (gemv_bf16.cuh), on the GPU machine (CUDA and cuBLAS here; Omega never
// uses them).
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels/cuda/matmul \
//        -o /tmp/skinny_check benches/cuda/skinny_check.cu -lcublas -lcuda   (steps.sh's `skchk`)
//   .gpu/skinny_check            # SKINNY_SPLIT=<s> forces the K split (tuning)
//
// For the Qwen3-30B-A3B matrices (N x K) at M = 1, 2, 4, 8, 16, 32, 64: x and W from a seeded generator,
// y poisoned, the f32 output checked on sampled entries against an f64 CPU reference (|err| <= 1e-6 *
// sqrt(K) * sum |x w|: f32 accumulation over K products), the bf16 output checked bit for bit against the
// f32 output rounded to nearest even (the two entries share accumulators), the tickets checked back at
// zero; then device time per call of each kernel, captured in a CUDA graph of back-to-back calls that
// cycle through enough copies of W (>= 256 MiB) that no call finds its weights in L2. Bandwidth = W
// bytes / time, beside a 1 GiB D2D cudaMemcpy's (read + write) / time in the same process.
//
// The swapped-operand TMA GEMM (gemm_swapab.cuh, x box of 8-64 rows) runs beside them unsplit and at
// every K split that keeps its units within 8 waves, each checked as above (f32 against f64, bf16 the
// f32 rounded, tickets back at zero), its best split's time beside the skinny GEMM's and cuBLAS's. Output:
//   copy_d2d_gbps <G>
//   check <M> <N> <K> splits <s> grid <g> max_rel <e> bf16 <ok> tickets <ok> PASS|FAIL
//   skinny.<M>x<N>x<K>.{omega_us,gemv_us,cublas_us,omega_gbps,frac_copy,vs_cublas,vs_gemv} <v>
//   check_swapab <M> <N> <K> mb <b> splits <s> grid <g> max_rel <e> bf16 <ok> tickets <ok> PASS|FAIL
//   swapab.<M>x<N>x<K>.s<s>_us <t>, .best_us <t>, .best_split <s>, .frac_copy <f>, .vs_skinny <r>,
//   .vs_cublas <r>; then at the best split, with shallower rings
//   check_swapab_stages st<S> <M> <N> <K> ... PASS|FAIL and swapab.<M>x<N>x<K>.st<S>_us <t>,
//   and with x in 8 copies (W tile t reading copy t % 8, so the CTAs do not read the same x lines at once)
//   check_swapab_xcopies xcopies <M> <N> <K> ... PASS|FAIL and swapab.<M>x<N>x<K>.xcopies_us <t>
//   <p> passed, <f> failed
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gemv_bf16.cuh"
#include "gemm_skinny.cuh"
#include "gemm_swapab.cuh"

#include "check_common.cuh"
#include "tma_encode.cuh"

typedef void (*SwapabEntry)(const void*, const void*, void*, float*, uint32_t*, uint32_t, uint32_t, uint32_t,
                            uint32_t);

// The swapped entries for M rows (f32 y, bf16 y): their x box height and dynamic shared memory.
struct Swapab {
  SwapabEntry entry[2];
  uint32_t mb, smem;
};

static Swapab swapab_for(uint32_t M) {
#define SWAPAB(MB) \
  {{omega_gemm_bf16_tn_swapab_m##MB, omega_gemm_bf16_tn_swapab_m##MB##_y16}, MB, \
   GEMM_SWAPAB_SMEM(MB, GEMM_SWAPAB_STAGES_M##MB)}
  if (M <= 8) return SWAPAB(8);
  if (M <= 16) return SWAPAB(16);
  if (M <= 32) return SWAPAB(32);
  return SWAPAB(64);
#undef SWAPAB
}

// The swapped body at shallower rings than the entries' (which take the deepest that fits), f32 y: how
// much of the time is the bytes in flight.
#define X_COPIES 8

template <int MB, int S>
__global__ void __launch_bounds__(GEMM_THREADS, 1)
    swapab_stages(const void* tw, const void* tx, void* y, float* work, uint32_t* tk, uint32_t M, uint32_t N, uint32_t K,
                  uint32_t splits) {
  gemm_bf16_body<MB, S, true>(tw, tx, y, work, tk, N, M, K, splits);
}

// The swapped entry's body reading x through 8 descriptors of 8 copies of x, W tile t through copy t % 8:
// whether the CTAs' reads of the same x lines in L2 at once are what slows a wide grid at small M.
template <int MB, int S>
__global__ void __launch_bounds__(GEMM_THREADS, 1)
    swapab_xcopies(const void* tw, const void* tx, void* y, float* work, uint32_t* tk, uint32_t M, uint32_t N,
                   uint32_t K, uint32_t splits) {
  gemm_bf16_body<MB, S, true, false, X_COPIES>(tw, tx, y, work, tk, N, M, K, splits);
}

struct StageVariant {
  uint32_t mb, stages;
  SwapabEntry entry;
};

static const StageVariant stage_variants[] = {
    {64, 4, swapab_stages<64, 4>}, {64, 6, swapab_stages<64, 6>}, {32, 4, swapab_stages<32, 4>},
    {32, 7, swapab_stages<32, 7>}, {16, 4, swapab_stages<16, 4>}, {8, 4, swapab_stages<8, 4>},
};

// The x-copies diagnostic for each box height, at the entry's ring.
static SwapabEntry xcopies_for(uint32_t mb) {
  switch (mb) {
    case 8: return swapab_xcopies<8, GEMM_SWAPAB_STAGES_M8>;
    case 16: return swapab_xcopies<16, GEMM_SWAPAB_STAGES_M16>;
    case 32: return swapab_xcopies<32, GEMM_SWAPAB_STAGES_M32>;
    default: return swapab_xcopies<64, GEMM_SWAPAB_STAGES_M64>;
  }
}

// The splits the body actually makes of `asked` (it drops splits past what K's blocks fill).
static uint32_t swapab_splits(uint32_t K, uint32_t asked) {
  const uint32_t kblocks = (K + GEMM_BK - 1) / GEMM_BK, per = (kblocks + asked - 1) / asked;
  return (kblocks + per - 1) / per;
}

typedef void (*SkinnyEntry)(const uint16_t*, const uint16_t*, void*, float*, uint32_t*, uint32_t, uint32_t, uint32_t,
                            uint32_t, uint32_t, uint32_t);
typedef void (*GemvEntry)(const uint16_t*, const uint16_t*, float*, float*, uint32_t*, uint32_t, uint32_t, uint32_t,
                          uint32_t);

static SkinnyEntry skinny_entry(uint32_t mb) {
  switch (mb) {
    case 1: return omega_skinny_bf16_tn_m1;
    case 2: return omega_skinny_bf16_tn_m2;
    case 4: return omega_skinny_bf16_tn_m4;
    default: return omega_skinny_bf16_tn_m8;
  }
}

// The library's plan, or the split SKINNY_SPLIT names (its grid as the planner would make it).
static SkinnyPlan plan_for(uint32_t M, uint32_t N, uint32_t K, int sms) {
  SkinnyPlan p = skinny_plan(M, N, K, sms, 1024);
  if (const char* v = getenv("SKINNY_SPLIT")) {
    const uint32_t kblocks = (K + SK_KC - 1) / SK_KC;
    const uint32_t per = (kblocks + atoi(v) - 1) / std::max(1, atoi(v));
    p.splits = (kblocks + per - 1) / per;
    p.k_per_split = per * SK_KC;
    p.grid = std::min<uint32_t>(p.tiles * p.splits, std::min(SK_CTAS_PER_SM * sms, 1024));
  }
  return p;
}

// The split-K GEMV as gemv_check.cu launches it (4 CTAs per SM).
struct GemvLaunch {
  GemvEntry entry;
  dim3 grid;
  uint32_t k_per_split;
};

static GemvLaunch gemv_for(uint32_t M, uint32_t N, uint32_t K, int sms) {
  GemvLaunch g;
  g.entry = M <= 8 ? omega_gemv_bf16_tn_m1 : M <= 16 ? omega_gemv_bf16_tn_m2 : M <= 32 ? omega_gemv_bf16_tn_m4
                                                                                        : omega_gemv_bf16_tn_m8;
  const uint32_t blocks = (N + GEMV_ROWS - 1) / GEMV_ROWS;
  uint32_t split = std::max(1u, std::min((4u * sms + blocks - 1) / blocks, K / 128));
  g.k_per_split = ((K + split - 1) / split + 31) / 32 * 32;
  g.grid = dim3(blocks, (K + g.k_per_split - 1) / g.k_per_split);
  return g;
}

// The largest |y - ref| / sum |x w| over sampled entries (all of them for small outputs).
static double max_rel_error(const std::vector<float>& y, const std::vector<uint16_t>& x, const std::vector<uint16_t>& w,
                            uint32_t M, uint32_t N, uint32_t K) {
  const size_t total = (size_t)M * N, samples = std::min<size_t>(total, 4096);
  uint64_t r = 5;
  double worst = 0;
  for (size_t i = 0; i < samples; ++i) {
    const size_t idx = samples == total ? i : splitmix(r) % total;
    const size_t m = idx / N, n = idx % N;
    double acc = 0, mag = 0;
    for (uint32_t k = 0; k < K; ++k) {
      const double p = (double)from_bf16(x[m * K + k]) * from_bf16(w[n * K + k]);
      acc += p;
      mag += fabs(p);
    }
    double e = fabs(y[idx] - acc) / (mag + 1e-30);
    if (!(e <= 1e30)) e = INFINITY;  // NaN (a poisoned entry left unwritten) fails
    worst = std::max(worst, e);
  }
  return worst;
}

// y [M, N] f32 = x . W^T by cuBLAS (column-major: y^T = W x^T), f32 accumulation.
static void cublas_tn(cublasHandle_t h, uint32_t M, uint32_t N, uint32_t K, const uint16_t* x, const uint16_t* w,
                      float* y) {
  static const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t r = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w, CUDA_R_16BF, K, x, CUDA_R_16BF,
                                        K, &zero, y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (r == CUBLAS_STATUS_SUCCESS) return;
  fprintf(stderr, "cublasGemmEx: status %d\n", (int)r);
  exit(2);
}

struct Bufs {
  uint16_t* x;
  float* y;
  uint16_t* y16;
  float* ref;
  float* work;
  uint32_t* tickets;
};

int main() {
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cublasHandle_t h;
  cublasCreate(&h);
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  cublasSetStream(h, st);
  for (int mb : {1, 2, 4, 8})
    CK(cudaFuncSetAttribute(skinny_entry(mb), cudaFuncAttributeMaxDynamicSharedMemorySize,
                            omega_skinny::smem_bytes(mb)));
  for (uint32_t m : {8u, 16u, 32u, 64u})
    for (SwapabEntry entry : swapab_for(m).entry)
      CK(cudaFuncSetAttribute(entry, cudaFuncAttributeMaxDynamicSharedMemorySize, swapab_for(m).smem));
  for (const StageVariant& v : stage_variants)
    CK(cudaFuncSetAttribute(v.entry, cudaFuncAttributeMaxDynamicSharedMemorySize, GEMM_SWAPAB_SMEM(v.mb, v.stages)));
  for (uint32_t m : {8u, 16u, 32u, 64u})
    CK(cudaFuncSetAttribute(xcopies_for(m), cudaFuncAttributeMaxDynamicSharedMemorySize, swapab_for(m).smem));
  const double copy = copy_gbps(st);
  printf("copy_d2d_gbps %.0f\n", copy);

  const uint32_t mats[][2] = {{5120, 2048}, {2048, 4096}, {1536, 2048}, {2048, 768}, {151936, 2048}};
  const uint32_t ms_list[] = {1, 2, 4, 8, 16, 32, 64};
  int passed = 0, failed = 0;
  for (auto& mk : mats) {
    const uint32_t N = mk[0], K = mk[1];
    const size_t wbytes = (size_t)N * K * 2;
    const int copies = (int)std::max<size_t>(1, std::min<size_t>(64, (256ull << 20) / wbytes + 1));
    std::vector<uint16_t> hw((size_t)N * K);
    uint64_t seed = 7 + N + K;
    for (auto& v : hw) v = random_bf16(seed);
    uint16_t* dw;
    CK(cudaMalloc(&dw, wbytes * copies));
    for (int c = 0; c < copies; ++c) CK(cudaMemcpy(dw + (size_t)c * N * K, hw.data(), wbytes, cudaMemcpyHostToDevice));
    // W's descriptor for each copy (the swapped entry's A operand: boxes of 128 rows), then x's.
    std::vector<CUtensorMap> maps(copies + 1);
    for (int c = 0; c < copies; ++c)
      encode(&maps[c], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dw + (size_t)c * N * K, K, N, GEMM_BK, GEMM_BM);
    CUtensorMap* dmaps;
    CK(cudaMalloc(&dmaps, maps.size() * sizeof(CUtensorMap)));
    for (uint32_t M : ms_list) {
      std::vector<uint16_t> hx((size_t)M * K);
      for (auto& v : hx) v = random_bf16(seed);
      const SkinnyPlan p = plan_for(M, N, K, sms);
      const GemvLaunch g = gemv_for(M, N, K, sms);
      const size_t out = (size_t)M * N;
      const size_t work_floats = std::max<size_t>((size_t)p.tiles * p.splits * SK_ROWS * 8 * p.mb,
                                                  (size_t)g.grid.y * out);
      const uint32_t ticket_words = std::max<uint32_t>(p.tiles, g.grid.x);
      Bufs b;
      CK(cudaMalloc(&b.x, hx.size() * 2));
      CK(cudaMalloc(&b.y, out * 4));
      CK(cudaMalloc(&b.y16, out * 2));
      CK(cudaMalloc(&b.ref, out * 4));
      CK(cudaMalloc(&b.work, work_floats * 4));
      CK(cudaMalloc(&b.tickets, ticket_words * 4));
      CK(cudaMemset(b.tickets, 0, ticket_words * 4));
      CK(cudaMemcpy(b.x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
      CK(cudaMemset(b.y, 0xFF, out * 4));
      CK(cudaMemset(b.y16, 0xFF, out * 2));
      const SkinnyEntry entry = skinny_entry(p.mb);
      const uint32_t smem = omega_skinny::smem_bytes(p.mb);
      auto omega = [&](int c, void* y, uint32_t bf16) {
        entry<<<p.grid, SK_THREADS, smem, st>>>(b.x, dw + (size_t)c * N * K, y, b.work, b.tickets, M, N, K,
                                               p.k_per_split, p.splits, bf16);
      };
      auto gemv = [&](int c) {
        g.entry<<<g.grid, GEMV_THREADS, 0, st>>>(b.x, dw + (size_t)c * N * K, b.ref, b.work, b.tickets, M, N, K,
                                                 g.k_per_split);
      };
      auto cublas = [&](int c) { cublas_tn(h, M, N, K, b.x, dw + (size_t)c * N * K, b.ref); };
      omega(0, b.y, 0);
      omega(0, b.y16, 1);
      CK(cudaGetLastError());
      CK(cudaStreamSynchronize(st));
      std::vector<float> hy(out);
      std::vector<uint16_t> hy16(out);
      std::vector<uint32_t> ht(ticket_words);
      CK(cudaMemcpy(hy.data(), b.y, out * 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hy16.data(), b.y16, out * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(ht.data(), b.tickets, ticket_words * 4, cudaMemcpyDeviceToHost));
      const double rel = max_rel_error(hy, hx, hw, M, N, K);
      bool bf16_ok = true;
      for (size_t i = 0; i < out; ++i) bf16_ok = bf16_ok && hy16[i] == to_bf16(hy[i]);
      const bool tickets_ok = std::all_of(ht.begin(), ht.end(), [](uint32_t t) { return t == 0; });
      const bool ok = rel <= 1e-6 * sqrt((double)K) + 1e-6 && bf16_ok && tickets_ok;
      printf("check %u %u %u splits %u grid %u max_rel %.3g bf16 %s tickets %s %s\n", M, N, K, p.splits, p.grid, rel,
             bf16_ok ? "ok" : "BAD", tickets_ok ? "ok" : "BAD", ok ? "PASS" : "FAIL");
      (ok ? passed : failed)++;

      const int calls = std::max(copies, 20);
      const double to = graph_us(st, calls, copies, [&](int c) { omega(c, b.y, 0); });
      const double tg = graph_us(st, calls, copies, gemv);
      const double tc = graph_us(st, calls, copies, cublas);

      // The swapped entry at every split within 8 waves of units.
      const Swapab sw = swapab_for(M);
      encode(&maps[copies], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, b.x, K, M, GEMM_BK, sw.mb);
      CK(cudaMemcpy(dmaps, maps.data(), maps.size() * sizeof(CUtensorMap), cudaMemcpyHostToDevice));
      const uint32_t tiles = (N + GEMM_BM - 1) / GEMM_BM, kblocks = (K + GEMM_BK - 1) / GEMM_BK;
      double sw_best = 1e30;
      uint32_t sw_best_split = 0, last_splits = 0;
      for (uint32_t asked = 1; asked <= kblocks; ++asked) {
        const uint32_t splits = swapab_splits(K, asked);
        if (splits == last_splits) continue;
        last_splits = splits;
        if (splits > 1 && tiles * splits > 8u * sms) break;
        const uint32_t grid = std::min<uint32_t>(tiles * splits, sms);
        float* work;
        uint32_t* tk;
        CK(cudaMalloc(&work, std::max<size_t>(1, (size_t)splits * out) * 4));
        CK(cudaMalloc(&tk, tiles * 4));
        CK(cudaMemset(tk, 0, tiles * 4));
        auto run = [&](int c, void* y, uint32_t bf16) {
          sw.entry[bf16]<<<grid, GEMM_THREADS, sw.smem, st>>>(&dmaps[c], &dmaps[copies], y, work, tk, M, N, K, splits);
        };
        CK(cudaMemset(b.y, 0xFF, out * 4));
        CK(cudaMemset(b.y16, 0xFF, out * 2));
        run(0, b.y, 0);
        run(0, b.y16, 1);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(st));
        std::vector<uint32_t> stk(tiles);
        CK(cudaMemcpy(hy.data(), b.y, out * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hy16.data(), b.y16, out * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(stk.data(), tk, tiles * 4, cudaMemcpyDeviceToHost));
        const double srel = max_rel_error(hy, hx, hw, M, N, K);
        bool s16 = true;
        for (size_t i = 0; i < out; ++i) s16 = s16 && hy16[i] == to_bf16(hy[i]);
        const bool stk_ok = std::all_of(stk.begin(), stk.end(), [](uint32_t t) { return t == 0; });
        const bool sok = srel <= 1e-6 * sqrt((double)K) + 1e-6 && s16 && stk_ok;
        printf("check_swapab %u %u %u mb %u splits %u grid %u max_rel %.3g bf16 %s tickets %s %s\n", M, N, K, sw.mb,
               splits, grid, srel, s16 ? "ok" : "BAD", stk_ok ? "ok" : "BAD", sok ? "PASS" : "FAIL");
        (sok ? passed : failed)++;
        const double ts = graph_us(st, calls, copies, [&](int c) { run(c, b.y, 0); });
        printf("swapab.%ux%ux%u.s%u_us %.2f\n", M, N, K, splits, ts);
        if (ts < sw_best) sw_best = ts, sw_best_split = splits;
        CK(cudaFree(work));
        CK(cudaFree(tk));
      }
      printf("swapab.%ux%ux%u.best_us %.2f\nswapab.%ux%ux%u.best_split %u\n", M, N, K, sw_best, M, N, K,
             sw_best_split);
      // Another form of the swapped launch at the best split, `launch(copy, work, tickets)`: y poisoned, one
      // launch checked against f64 (f32 y), then timed as `swapab.<shape>.<name>_us`.
      auto other_form = [&](const char* check, const char* name, auto&& launch) {
        const uint32_t splits = sw_best_split;
        float* work;
        uint32_t* tk;
        CK(cudaMalloc(&work, std::max<size_t>(1, (size_t)splits * out) * 4));
        CK(cudaMalloc(&tk, tiles * 4));
        CK(cudaMemset(tk, 0, tiles * 4));
        CK(cudaMemset(b.y, 0xFF, out * 4));
        launch(0, work, tk);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(st));
        CK(cudaMemcpy(hy.data(), b.y, out * 4, cudaMemcpyDeviceToHost));
        const double srel = max_rel_error(hy, hx, hw, M, N, K);
        const bool sok = srel <= 1e-6 * sqrt((double)K) + 1e-6;
        printf("%s %s %u %u %u mb %u splits %u max_rel %.3g %s\n", check, name, M, N, K, sw.mb, splits, srel,
               sok ? "PASS" : "FAIL");
        (sok ? passed : failed)++;
        const double t = graph_us(st, calls, copies, [&](int c) { launch(c, work, tk); });
        printf("swapab.%ux%ux%u.%s_us %.2f\n", M, N, K, name, t);
        CK(cudaFree(work));
        CK(cudaFree(tk));
      };
      const uint32_t best_grid = std::min<uint32_t>(tiles * sw_best_split, sms);
      for (const StageVariant& v : stage_variants) {
        if (v.mb != sw.mb) continue;
        const uint32_t smem = GEMM_SWAPAB_SMEM(v.mb, v.stages);
        const std::string name = "st" + std::to_string(v.stages);
        other_form("check_swapab_stages", name.c_str(), [&](int c, float* work, uint32_t* tk) {
          v.entry<<<best_grid, GEMM_THREADS, smem, st>>>(&dmaps[c], &dmaps[copies], b.y, work, tk, M, N, K,
                                                         sw_best_split);
        });
      }
      {
        // x in X_COPIES copies, W tile t reading copy t % X_COPIES.
        uint16_t* xs;
        CK(cudaMalloc(&xs, (size_t)X_COPIES * M * K * 2));
        std::vector<CUtensorMap> xmaps(X_COPIES);
        for (int c = 0; c < X_COPIES; ++c) {
          CK(cudaMemcpy(xs + (size_t)c * M * K, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
          encode(&xmaps[c], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, xs + (size_t)c * M * K, K, M, GEMM_BK, sw.mb);
        }
        CUtensorMap* dx;
        CK(cudaMalloc(&dx, X_COPIES * sizeof(CUtensorMap)));
        CK(cudaMemcpy(dx, xmaps.data(), X_COPIES * sizeof(CUtensorMap), cudaMemcpyHostToDevice));
        const SwapabEntry entry = xcopies_for(sw.mb);
        other_form("check_swapab_xcopies", "xcopies", [&](int c, float* work, uint32_t* tk) {
          entry<<<best_grid, GEMM_THREADS, sw.smem, st>>>(&dmaps[c], dx, b.y, work, tk, M, N, K, sw_best_split);
        });
        CK(cudaFree(dx));
        CK(cudaFree(xs));
      }
      printf("swapab.%ux%ux%u.frac_copy %.3f\nswapab.%ux%ux%u.vs_skinny %.2f\nswapab.%ux%ux%u.vs_cublas %.2f\n", M,
             N, K, wbytes / (sw_best * 1e-6) / 1e9 / copy, M, N, K, to / sw_best, M, N, K, tc / sw_best);
      const double gbps = wbytes / (to * 1e-6) / 1e9;
      const char* tag = "skinny";
      printf("%s.%ux%ux%u.omega_us %.2f\n%s.%ux%ux%u.gemv_us %.2f\n%s.%ux%ux%u.cublas_us %.2f\n", tag, M, N, K, to,
             tag, M, N, K, tg, tag, M, N, K, tc);
      printf("%s.%ux%ux%u.omega_gbps %.0f\n%s.%ux%ux%u.frac_copy %.3f\n", tag, M, N, K, gbps, tag, M, N, K,
             gbps / copy);
      printf("%s.%ux%ux%u.vs_cublas %.2f\n%s.%ux%ux%u.vs_gemv %.2f\n", tag, M, N, K, tc / to, tag, M, N, K, tg / to);
      CK(cudaFree(b.x));
      CK(cudaFree(b.y));
      CK(cudaFree(b.y16));
      CK(cudaFree(b.ref));
      CK(cudaFree(b.work));
      CK(cudaFree(b.tickets));
    }
    CK(cudaFree(dw));
    CK(cudaFree(dmaps));
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
