// Small-M bf16 GEMM with the operands' roles swapped: y[M,N] = x[M,K] . W[N,K]^T computed as
// y^T = W . x^T, for M <= 64 (issue 12's weight-streaming path on the tensor cores' own pipeline).
//
// Why: the TMA GEMM's tile is 128 x rows by BN W rows, so at M <= 64 half or more of its x box lies past M
// (the TMA unit fills it with zeros) and one of its two consumer warpgroups multiplies zeros; the narrow W
// box per CTA (BN rows) leaves each SM few bytes of W in flight. Swapped, W is wgmma's A operand (the
// 64-row side, two consumers on a 128-row W tile) and x its B operand, N = MB (8, 16, 32 or 64 rows of
// x, the box the TMA unit zero-fills only past M). Every MMA row is a W row, a stage is 16 KiB of W and
// MB x 128 bytes of x, and the ring is as deep as shared memory allows (9 to 13 stages: 150-200 KiB of W
// in flight an SM).
//
// The body is gemm_bf16.cuh's (`SWAPPED`): persistent, producer / two consumers, mbarrier ring, split-K
// over work units with the deterministic ticket reduction; only the stores go to the transposed position,
// so partial slices are [splits][M][N] f32 in y's own layout; y is f32, or bf16 in the `_y16` entries.
//
// Descriptors (128B swizzle): tmap_w is W's, {K, N} with box {64, 128} (the A descriptor's box over W);
// tmap_x is x's, {K, M} with box {64, MB}. K % 8 == 0 (16-byte row strides), x and W 16-byte aligned.
// work: splits * M * N floats and tickets ceil(N / 128) * ceil(M / MB) zeroed words when splits > 1 (left
// zero). Any M runs (more tiles of MB x rows); M <= MB is what the entries are for.
#pragma once
#include <stdint.h>

#include "gemm_bf16.cuh"

// The deepest ring beside 227 KiB for each x box height (stage = 16 KiB of W + MB * 128 bytes of x).
#define GEMM_SWAPAB_STAGES_M64 9
#define GEMM_SWAPAB_STAGES_M32 11
#define GEMM_SWAPAB_STAGES_M16 12
#define GEMM_SWAPAB_STAGES_M8 13
#define GEMM_SWAPAB_SMEM(mb, stages) GEMM_SMEM_FOR_BN(mb, stages)

// The f32-y entry and its `_y16` twin (bf16 y) for one x box height: two kernels, because one kernel
// holding both bodies behind a run-time flag has ptxas serialise the wgmmas (C7514).
#define OMEGA_GEMM_SWAPAB_ENTRY(MB, SUFFIX, Y16)                                                                 \
  extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1)                                                  \
      omega_gemm_bf16_tn_swapab_m##MB##SUFFIX(const void* tmap_w, const void* tmap_x, void* y, float* work,      \
                                              uint32_t* tickets, uint32_t M, uint32_t N, uint32_t K,             \
                                              uint32_t splits) {                                                 \
    gemm_bf16_body<MB, GEMM_SWAPAB_STAGES_M##MB, true, Y16>(tmap_w, tmap_x, y, work, tickets, N, M, K, splits);  \
  }
#define OMEGA_GEMM_SWAPAB_ENTRIES(MB) OMEGA_GEMM_SWAPAB_ENTRY(MB, , false) OMEGA_GEMM_SWAPAB_ENTRY(MB, _y16, true)

OMEGA_GEMM_SWAPAB_ENTRIES(64)
OMEGA_GEMM_SWAPAB_ENTRIES(32)
OMEGA_GEMM_SWAPAB_ENTRIES(16)
OMEGA_GEMM_SWAPAB_ENTRIES(8)
