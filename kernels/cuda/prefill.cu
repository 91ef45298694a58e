// prefill: the prefill attention kernels of the attention library (src/libs/attention/prefill.rs), one
// module of their own so the library loads them apart from the decode kernels:
//
//   omega_attn_prefill_bf16_f32   bf16 q, k, v, f32 out: TMA + wgmma, warp-specialised, FA3-style (prefill_bf16.cuh)
//   omega_attn_prefill_bf16       the same with a bf16 out
//
// The host references the simulator runs are in src/core/kernels/prefill.rs.
#include "attention/prefill_bf16.cuh"
