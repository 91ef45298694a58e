// matmul: the kernels of the matmul library (src/libs/matmul), one module so one load brings them all.
//
// Every product is y = x . W^T with x [M, K] row-major and W [N, K] as a linear layer stores it; y is
// [M, N] row-major f32. Which kernel runs for which shape is the library's choice (docs/kernels.md,
// "Matmul"); what each requires is said at its definition:
//
//   omega_gemm_bf16_tn          large M: TMA + wgmma, persistent, warp-specialised (gemm_bf16.cuh)
//   omega_gemm_bf16_tn_ts       the same with a TMA-store epilogue (gemm_bf16_ts.cuh)
//   omega_gemm_bf16_tn_mc       the same in 2-CTA clusters, W multicast, TMA-store epilogue (gemm_bf16_ts.cuh)
//   omega_gemm_bf16_tn_{ts,mc}_n128  those two on 128 x 128 tiles (gemm_bf16_ts.cuh)
//   omega_gemm_bf16_tn_{ts,mc}_n{160,192,96,64}  those two on tiles fitted to whole waves (gemm_bf16_ts.cuh)
//   omega_gemm_bf16_tn_sk[_n128] the TMA-store form in stream-K order, either tile (gemm_bf16_sk.cuh)
//   omega_gemm_bf16_tn_pp_n128[_y16] the narrow TMA-store form with its consumers on alternate tiles (gemm_bf16_pp.cuh)
//   omega_gemm_bf16_tn_swiglu_n{256,192,128}[_y16] gate+up with SwiGLU in the epilogue (gemm_bf16_ts.cuh)
//   omega_gemv_bf16_tn_m{1,2,4,8}  small M: weight streaming, split-K (gemv_bf16.cuh); _y16: bf16 out
//   omega_skinny_bf16_tn_m{1,2,4,8} small M (1..64): W streamed through a cp.async ring, mma.sync (gemm_skinny.cuh)
//   omega_gemm_bf16_tn_swapab_m{8,16,32,64}[_y16]  small M: the TMA GEMM with W as the 64-row operand (gemm_swapab.cuh)
//   omega_moe_gemv_bf16_m{1,2,4,8} grouped experts, routing read on the device (gemv_bf16.cuh)
//   omega_moe_route             top-k choices -> the grouped kernels' CSR routing (moe_route.cuh)
//   omega_moe_router_route      router product + top k + that routing in one launch (moe_router.cuh)
//   omega_gemm_f32_tn           f32 x f32, f32 FMA, any shape (gemm_simt.cuh)
//   omega_gemm_bf16_simt_tn     bf16 of any shape or alignment (gemm_simt.cuh)
//   omega_gemm_f32_tn_v2_*      f32 candidates of issue 12, same arithmetic as omega_gemm_f32_tn (gemm_sgemm.cuh);
//                               the library runs omega_gemm_f32_tn_v2_8x16k8_zigzag_p, the persistent zigzag one
//   omega_convert_f32_bf16      bf16 outputs (convert.cuh)
//
// The host references the simulator runs are in src/core/kernels/matmul.rs.
#include "matmul/convert.cuh"
#include "matmul/gemm_bf16.cuh"
#include "matmul/gemm_bf16_ts.cuh"
#include "matmul/gemm_bf16_sk.cuh"
#include "matmul/gemm_bf16_pp.cuh"
#include "matmul/gemm_sgemm.cuh"
#include "matmul/gemm_simt.cuh"
#include "matmul/gemm_skinny.cuh"
#include "matmul/gemm_swapab.cuh"
#include "matmul/gemv_bf16.cuh"
#include "matmul/moe_route.cuh"
#include "matmul/moe_router.cuh"
