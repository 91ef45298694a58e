// silu(g) = g / (1 + e^-g): the one definition the elementwise SwiGLU (swiglu.cuh) and the gate+up GEMM's
// SwiGLU epilogue (matmul/gemm_bf16_ts.cuh) share, so the fused and the two-launch paths round alike.
//
// The quotient is `__fdividef` (2 ulp, 0 past a 2^126 denominator, where silu is below 2^-119): the
// IEEE division took 37 registers in the SwiGLU kernel, 6 CTAs an SM; with it that kernel fits
// `__launch_bounds__(256, 8)` without spills, 2048 threads an SM.
#pragma once

__device__ __forceinline__ float omega_silu(float g) { return __fdividef(g, 1.0f + __expf(-g)); }
