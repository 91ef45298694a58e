// elementwise: the kernels of the elementwise library (src/libs/elementwise), one module so one load brings
// them all. Every kernel reads and writes row-major arrays, f32 or bf16 (bit patterns), and computes in
// f32; which launch shape each takes is the library's choice (docs/elementwise.md):
//
//   omega_rmsnorm_{f32,bf16}         y = rmsnorm(x) * w over rows x cols (rmsnorm.cuh)
//   omega_add_rmsnorm_{f32,bf16}     h = x + h (in place), y = rmsnorm(h) * w (rmsnorm.cuh)
//   omega_rmsnorm_warp_{f32,bf16}, omega_add_rmsnorm_warp_bf16   the same, one warp a row (rmsnorm.cuh)
//   omega_rope_{f32,bf16}            rotate_half RoPE with explicit cos/sin tables (rope.cuh)
//   omega_norm_rope_{f32,bf16}       per-head RMSNorm (Qwen3 QK-norm), then RoPE (rope.cuh)
//   omega_norm_rope_whole_{f32,bf16} the same for rows one vector of each half a lane covers (rope.cuh)
//   omega_swiglu_{f32,bf16}          silu(gate) * up, plain or over a fused gate+up output (swiglu.cuh)
//   omega_swiglu_f32_bf16            the same from f32 into bf16 (swiglu.cuh)
//   omega_ew_copy16                  a 16-byte copy, the benchmarks' bandwidth denominator (swiglu.cuh)
//
// The host references the simulator runs are in src/core/kernels/elementwise.rs.
#include "elementwise/rmsnorm.cuh"
#include "elementwise/rope.cuh"
#include "elementwise/swiglu.cuh"
