// Tuning study of the small-M bf16 kernel (kernels/cuda/matmul/gemv_bf16.cuh): the same products under
// each `GemvTuned`-shaped class of constants, on the GPU machine (CUDA here; Omega never uses it).
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels/cuda/matmul \
//        -o /tmp/gemv_variants benches/cuda/gemv_variants.cu
//   /tmp/gemv_variants                # the variants at each split
//   /tmp/gemv_variants --occupancy    # the shipped kernel with its CTAs an SM capped (occupancy() below)
//
// Decode's products at batch 1 and 4: the dense q/k/v, o and lm_head matrices, and the grouped expert
// products (gate_up 1536 x 2048 and down 2048 x 768 over 128 experts, 8 routed a token) read from device
// routing lists as the library launches them. Each variant keeps every sum's order, so its output must
// be bit-identical to the shipped tuning's at the same split (checked on fresh random inputs, y poisoned),
// and the shipped tuning's is checked against an f64 reference. Device time per call from a CUDA graph of
// back-to-back calls cycling through W copies (dense, >= 256 MiB) or routings (grouped) so no call finds its
// weights in L2. Output lines:
//   var <case> split <s> <variant> us <t> gbps <g> same_bits <0|1>
//   best <case> <variant> split <s> us <t> base_us <t0> (base at its best split)
//   occ <case> split <s> cap <c> smem <bytes> us <t> gbps <g> ratio <uncapped / capped> same_bits <0|1>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "gemv_bf16.cuh"

#include "check_common.cuh"

template <int U_, bool PIPE_, int RP_, int RU_ = ROWS_UNROLL>
struct Tune {
  static constexpr int U = U_;
  static constexpr bool PIPE = PIPE_;
  static constexpr int RP = RP_;
  static constexpr int RU = RU_;
};

template <class T>
__global__ void __launch_bounds__(GEMV_THREADS)
    dense_k(const uint16_t* x, const uint16_t* w, float* y, float* work, uint32_t* tickets, uint32_t M, uint32_t N,
            uint32_t K, uint32_t kps) {
  gemv_bf16_tn<1, false, T>(x, w, y, work, tickets, M, N, K, kps);
}

template <class T>
__global__ void __launch_bounds__(GEMV_THREADS)
    moe_k(const uint16_t* x, const uint16_t* w, float* y, float* work, uint32_t* tickets, const uint32_t* offsets,
          const uint32_t* rows, const uint32_t* active, uint32_t N, uint32_t K, uint32_t kps, uint32_t max_slots) {
  moe_gemv_bf16<1, T>(x, w, y, work, tickets, offsets, rows, active, N, K, kps, max_slots);
}

typedef void (*Dense)(const uint16_t*, const uint16_t*, float*, float*, uint32_t*, uint32_t, uint32_t, uint32_t,
                      uint32_t);
typedef void (*Moe)(const uint16_t*, const uint16_t*, float*, float*, uint32_t*, const uint32_t*, const uint32_t*,
                    const uint32_t*, uint32_t, uint32_t, uint32_t, uint32_t);

struct Variant {
  const char* name;
  Dense dense;
  Moe moe;
  int ref;  // the variant whose bits it must match (the same sums in the same order)
};

#define VARIANT(NAME, REF, ...) \
  { NAME, dense_k<Tune<__VA_ARGS__>>, moe_k<Tune<__VA_ARGS__>>, REF }

// The first is the shipped tuning (GemvTuned), the reference of the bit checks.
static const Variant VARIANTS[] = {
    {"base", dense_k<GemvTuned>, moe_k<GemvTuned>, 0},
    VARIANT("u8", 0, 8, false, 2),
    VARIANT("pipe_u4", 0, 4, true, 2),
    VARIANT("pipe_u2", 0, 2, true, 2),
    VARIANT("pipe_u8", 0, 8, true, 2),
    VARIANT("rp4", 0, 4, false, 4),
    VARIANT("rp8", 0, 4, false, 8),
    VARIANT("pipe_u4_rp4", 0, 4, true, 4),
    VARIANT("rp2_ru8", 0, 4, false, 2, 8),
    VARIANT("rp4_ru8", 0, 4, false, 4, 8),
    VARIANT("rp8_ru8", 0, 4, false, 8, 8),
};
static const int NV = sizeof(VARIANTS) / sizeof(VARIANTS[0]);

static double f64_dot(const std::vector<uint16_t>& x, size_t xo, const std::vector<uint16_t>& w, size_t wo,
                      uint32_t K, double* mag) {
  double acc = 0, m = 0;
  for (uint32_t k = 0; k < K; ++k) {
    double p = (double)from_bf16(x[xo + k]) * from_bf16(w[wo + k]);
    acc += p;
    m += fabs(p);
  }
  *mag = m;
  return acc;
}

static int failed = 0;

// The worst relative error so far against an f64 reference of magnitude `mag` (a NaN counts as infinite),
// and whether it is within what f32 sums over K allow.
static void track(double& worst, float got, double ref, double mag) {
  double e = fabs(got - ref);
  if (!(e <= 1e30)) e = INFINITY;
  worst = std::max(worst, e / (mag + 1e-30));
}
static bool within_f32_sums(double worst, uint32_t K) { return worst <= 1e-6 * sqrt((double)K) + 1e-6; }
static bool occupancy_only = false;  // --occupancy: the occupancy study instead of the variants

static void occupancy(const char* label, uint32_t split, float* dy, size_t out, double wbytes, int copies,
                      const std::function<void(uint32_t, int, cudaStream_t)>& launch);

// Runs every variant at `split` through `launch(variant, copy)`, output `dy` (`out` floats); the base's
// output checked by `check(host_y)`, each other's compared bit for bit with it.
template <typename L, typename C>
static void study(const char* label, uint32_t split, float* dy, size_t out, double wbytes, int copies, L&& launch,
                  C&& check, double (&us)[NV]) {
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  std::vector<std::vector<float>> outs(NV, std::vector<float>(out));
  for (int v = 0; v < NV; ++v) {
    CK(cudaMemset(dy, 0xFF, out * 4));
    launch(v, 0, st);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(outs[v].data(), dy, out * 4, cudaMemcpyDeviceToHost));
    bool same = true;
    const int ref = VARIANTS[v].ref;
    if (ref == v) {
      if (!check(outs[v])) {
        printf("FAIL %s split %u %s vs f64\n", label, split, VARIANTS[v].name);
        ++failed;
      }
    } else {
      same = memcmp(outs[ref].data(), outs[v].data(), out * 4) == 0;
      if (!same) ++failed;
    }
    const int calls = std::max(copies, 40);
    us[v] = graph_us(st, calls, copies, [&](int c) { launch(v, c, st); });
    printf("var %s split %u %s us %.2f gbps %.0f same_bits %d\n", label, split, VARIANTS[v].name, us[v],
           wbytes / (us[v] * 1e-6) / 1e9, same ? 1 : 0);
  }
  CK(cudaStreamDestroy(st));
}

struct Best {
  double us[NV];
  uint32_t split[NV];
  Best() {
    for (int v = 0; v < NV; ++v) us[v] = 1e30, split[v] = 0;
  }
  void take(const double (&u)[NV], uint32_t s) {
    for (int v = 0; v < NV; ++v)
      if (u[v] < us[v]) us[v] = u[v], split[v] = s;
  }
  void print(const char* label) {
    for (int v = 0; v < NV; ++v)
      printf("best %s %s split %u us %.2f base_us %.2f ratio %.3f\n", label, VARIANTS[v].name, split[v], us[v], us[0],
             us[0] / us[v]);
  }
};

static void dense_case(uint32_t M, uint32_t N, uint32_t K, uint64_t seed) {
  const size_t wbytes = (size_t)N * K * 2;
  const int copies = (int)std::max<size_t>(1, std::min<size_t>(64, (256ull << 20) / wbytes + 1));
  std::vector<uint16_t> hw((size_t)N * K), hx((size_t)M * K);
  uint64_t s = seed;
  for (auto& v : hw) v = random_bf16(s);
  for (auto& v : hx) v = random_bf16(s);
  uint16_t *dw, *dx;
  float *dy, *work;
  uint32_t* tickets;
  const uint32_t blocks = (N + GEMV_ROWS - 1) / GEMV_ROWS;
  CK(cudaMalloc(&dw, wbytes * copies));
  for (int c = 0; c < copies; ++c) CK(cudaMemcpy(dw + (size_t)c * N * K, hw.data(), wbytes, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&dx, hx.size() * 2));
  CK(cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&dy, (size_t)M * N * 4));
  CK(cudaMalloc(&work, (size_t)16 * M * N * 4));
  CK(cudaMalloc(&tickets, blocks * 4));
  CK(cudaMemset(tickets, 0, blocks * 4));
  char label[64];
  snprintf(label, sizeof label, "dense_m%u_%ux%u", M, N, K);
  Best best;
  for (uint32_t split : {1u, 2u, 4u, 8u, 16u}) {
    if (K / split < 128) continue;
    const uint32_t kps = ((K + split - 1) / split + 31) / 32 * 32;
    const uint32_t sp = (K + kps - 1) / kps;
    // Past 1024 CTAs (lm_head) the CTAs walk the blocks grid-stride, as the library launches it.
    const uint32_t gx = std::min(blocks, std::max(1u, 1024 / sp));
    auto launch = [&](int v, int c, cudaStream_t q) {
      VARIANTS[v].dense<<<dim3(gx, sp), GEMV_THREADS, 0, q>>>(dx, dw + (size_t)c * N * K, dy, work, tickets, M,
                                                                 N, K, kps);
    };
    if (occupancy_only) {
      occupancy(label, sp, dy, (size_t)M * N, wbytes, copies, [&](uint32_t smem, int c, cudaStream_t q) {
        dense_k<GemvTuned><<<dim3(gx, sp), GEMV_THREADS, smem, q>>>(dx, dw + (size_t)c * N * K, dy, work, tickets, M,
                                                                    N, K, kps);
      });
      continue;
    }
    auto check = [&](const std::vector<float>& y) {
      uint64_t r = seed ^ split;
      double worst = 0;
      for (int i = 0; i < 512; ++i) {
        const size_t idx = splitmix(r) % ((size_t)M * N), m = idx / N, n = idx % N;
        double mag, ref = f64_dot(hx, m * K, hw, n * K, K, &mag);
        track(worst, y[idx], ref, mag);
      }
      return within_f32_sums(worst, K);
    };
    double us[NV];
    study(label, sp, dy, (size_t)M * N, wbytes, copies, launch, check, us);
    best.take(us, sp);
  }
  if (!occupancy_only) best.print(label);
  CK(cudaFree(dw));
  CK(cudaFree(dx));
  CK(cudaFree(dy));
  CK(cudaFree(work));
  CK(cudaFree(tickets));
}

// Grouped: `tokens` tokens each routed to 8 of 128 experts, `routings` different routings cycled.
static void moe_case(uint32_t tokens, uint32_t N, uint32_t K, uint64_t seed) {
  const uint32_t E = 128, TOP = 8, slots = tokens * TOP, routings = 16;
  const size_t wbytes = (size_t)E * N * K * 2;
  std::vector<uint16_t> hw((size_t)E * N * K), hx((size_t)tokens * K);
  uint64_t s = seed;
  for (auto& v : hw) v = random_bf16(s);
  for (auto& v : hx) v = random_bf16(s);
  // Routing r: offsets (E + 1), rows (slots), active (1 + E), laid out one after another.
  const uint32_t words = (E + 1) + slots + (1 + E);
  std::vector<uint32_t> hr((size_t)routings * words);
  std::vector<uint32_t> touched(routings);
  for (uint32_t r = 0; r < routings; ++r) {
    uint32_t* off = &hr[(size_t)r * words];
    uint32_t* rows = off + E + 1;
    uint32_t* act = rows + slots;
    std::vector<std::vector<uint32_t>> by_e(E);
    for (uint32_t t = 0; t < tokens; ++t) {
      std::vector<uint32_t> pick;
      while (pick.size() < TOP) {
        uint32_t e = (uint32_t)(splitmix(s) % E);
        if (std::find(pick.begin(), pick.end(), e) == pick.end()) pick.push_back(e);
      }
      for (uint32_t e : pick) by_e[e].push_back(t);
    }
    uint32_t at = 0, count = 0;
    for (uint32_t e = 0; e < E; ++e) {
      off[e] = at;
      for (uint32_t t : by_e[e]) rows[at++] = t;
      if (!by_e[e].empty()) act[1 + count++] = e;
    }
    off[E] = at;
    act[0] = count;
    touched[r] = count;
  }
  uint16_t *dw, *dx;
  float *dy, *work;
  uint32_t *tickets, *droute;
  const uint32_t blocks = (N + GEMV_ROWS - 1) / GEMV_ROWS;
  const uint32_t zmax = std::min(E, slots);
  CK(cudaMalloc(&dw, wbytes));
  CK(cudaMemcpy(dw, hw.data(), wbytes, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&dx, hx.size() * 2));
  CK(cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&dy, (size_t)slots * N * 4));
  CK(cudaMalloc(&work, (size_t)4 * slots * N * 4));
  CK(cudaMalloc(&tickets, (size_t)zmax * blocks * 4));
  CK(cudaMemset(tickets, 0, (size_t)zmax * blocks * 4));
  CK(cudaMalloc(&droute, hr.size() * 4));
  CK(cudaMemcpy(droute, hr.data(), hr.size() * 4, cudaMemcpyHostToDevice));
  char label[64];
  snprintf(label, sizeof label, "moe_b%u_%ux%u", tokens, N, K);
  // Bytes a call streams: the touched experts' matrices (routing 0's count; the others are alike).
  const double call_bytes = (double)touched[0] * N * K * 2;
  Best best;
  for (uint32_t split : {1u, 2u, 4u}) {
    if (K / split < 128 || blocks * split * zmax > 1024 * 64) continue;
    const uint32_t kps = ((K + split - 1) / split + 31) / 32 * 32;
    const uint32_t sp = (K + kps - 1) / kps;
    auto launch = [&](int v, int c, cudaStream_t q) {
      const uint32_t* off = droute + (size_t)c * words;
      VARIANTS[v].moe<<<dim3(blocks, sp, zmax), GEMV_THREADS, 0, q>>>(dx, dw, dy, work, tickets, off, off + E + 1,
                                                                     off + E + 1 + slots, N, K, kps, slots);
    };
    if (occupancy_only) {
      occupancy(label, sp, dy, (size_t)slots * N, call_bytes, routings, [&](uint32_t smem, int c, cudaStream_t q) {
        const uint32_t* off = droute + (size_t)c * words;
        moe_k<GemvTuned><<<dim3(blocks, sp, zmax), GEMV_THREADS, smem, q>>>(dx, dw, dy, work, tickets, off, off + E + 1,
                                                                            off + E + 1 + slots, N, K, kps, slots);
      });
      continue;
    }
    auto check = [&](const std::vector<float>& y) {
      const uint32_t* off = &hr[0];
      const uint32_t* rows = off + E + 1;
      double worst = 0;
      uint64_t r = seed ^ split;
      for (int i = 0; i < 256; ++i) {
        const uint32_t slot = (uint32_t)(splitmix(r) % slots), n = (uint32_t)(splitmix(r) % N);
        uint32_t e = 0;
        while (off[e + 1] <= slot) ++e;
        double mag, ref = f64_dot(hx, (size_t)rows[slot] * K, hw, ((size_t)e * N + n) * K, K, &mag);
        track(worst, y[(size_t)slot * N + n], ref, mag);
      }
      return within_f32_sums(worst, K);
    };
    double us[NV];
    study(label, sp, dy, (size_t)slots * N, call_bytes, routings, launch, check, us);
    best.take(us, sp);
  }
  if (!occupancy_only) best.print(label);
  CK(cudaFree(dw));
  CK(cudaFree(dx));
  CK(cudaFree(dy));
  CK(cudaFree(work));
  CK(cudaFree(tickets));
  CK(cudaFree(droute));
}

// The occupancy study: the shipped kernel (base) launched with dynamic shared memory it does not use, so
// that at most `cap` CTAs fit an SM (228 KiB of shared memory an SM, 1 KiB of it reserved a CTA), against
// the same launch without (cap 0). A small grid (grouped batch 1: 192 CTAs on 132 SMs) is placed by the
// block scheduler, which may put several CTAs on one SM while others idle; a cap spreads them. Same code,
// so the bits must match the uncapped launch's.
static uint32_t smem_for_cap(int cap) { return cap == 0 ? 0u : (uint32_t)((228 * 1024) / cap - 1024 - 1024); }

static void occupancy(const char* label, uint32_t split, float* dy, size_t out, double wbytes, int copies,
                      const std::function<void(uint32_t, int, cudaStream_t)>& launch) {
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  std::vector<float> ref(out), got(out);
  double base_us = 0;
  for (int cap : {0, 1, 2, 3, 4, 6}) {
    const uint32_t smem = smem_for_cap(cap);
    CK(cudaMemset(dy, 0xFF, out * 4));
    launch(smem, 0, st);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy((cap == 0 ? ref : got).data(), dy, out * 4, cudaMemcpyDeviceToHost));
    const bool same = cap == 0 || memcmp(ref.data(), got.data(), out * 4) == 0;
    if (!same) ++failed;
    const double us = graph_us(st, std::max(copies, 40), copies, [&](int c) { launch(smem, c, st); });
    if (cap == 0) base_us = us;
    printf("occ %s split %u cap %d smem %u us %.2f gbps %.0f ratio %.3f same_bits %d\n", label, split, cap, smem, us,
           wbytes / (us * 1e-6) / 1e9, base_us / us, same ? 1 : 0);
  }
  CK(cudaStreamDestroy(st));
}

int main(int argc, char** argv) {
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  printf("copy_d2d_gbps %.0f\n", copy_gbps(st));
  CK(cudaFuncSetAttribute(dense_k<GemvTuned>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_for_cap(1)));
  CK(cudaFuncSetAttribute(moe_k<GemvTuned>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_for_cap(1)));
  occupancy_only = argc > 1 && strcmp(argv[1], "--occupancy") == 0;
  for (uint32_t M : {1u, 4u}) {
    dense_case(M, 5120, 2048, 11 + M);
    dense_case(M, 2048, 4096, 12 + M);
  }
  dense_case(1, 151936, 2048, 13);
  for (uint32_t t : {1u, 4u}) {
    moe_case(t, 1536, 2048, 21 + t);
    moe_case(t, 2048, 768, 22 + t);
  }
  printf("gemv_variants failed %d\n", failed);
  return failed != 0;
}
