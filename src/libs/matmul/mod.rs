//! # The matmul library (EXPERIMENTAL)
//!
//! Dense and grouped matrix products on the device, over the `matmul` CUDA C++ module
//! (kernels/cuda/matmul.cu): `y[M, N] = x[M, K] . W[N, K]^T`, every buffer row-major and W as a linear
//! layer stores its weight (so weights go in as model files hold them). bf16 operands accumulate in f32
//! into an f32 output or a bf16 one; f32 operands use f32 FMA (no TF32). Any M, N, K of at least 1.
//!
//! - [`Matmul`] is a scope's handle: it loads the module once and owns the workspace (split-K partial
//!   sums, the f32 product of a bf16 output, the tickets the split-K kernels leave zero, the TMA
//!   descriptors: x's, W's, and y's for the TMA-store entries). Its calls check the shape against the buffers' lengths before anything runs (a
//!   buffer shorter than its operand is refused, naming both, stage `matmul shape`), then launch, taking
//!   and handing back the scope's [`crate::Gpu`] token as [`crate::Gpu::launch`] does, or add their
//!   launches to a command list ([`crate::cmdlist::CmdListBuilder`]).
//! - The planner ([`plan`]) picks the kernels: the split-K GEMV for M <= 32 (K % 32 == 0; M <= 8 past
//!   L2's size), the TMA GEMM for K % 8 == 0 (128x256 or 128x128 tiles and a K split of whole blocks,
//!   whichever the wave-quantized cost model [`GemmCost`] predicts fastest), the SIMT kernels otherwise and
//!   for f32. Unsplit wide tiles run by the entry [`WIDE_ENTRY`] names (the cluster entry
//!   `omega_gemm_bf16_tn_mc`, 2-CTA clusters with W multicast and a TMA-store epilogue, measured fastest;
//!   else the TMA-store `omega_gemm_bf16_tn_ts`, else the direct stores), unsplit narrow tiles by
//!   [`NARROW_ENTRY`] (the direct `omega_gemm_bf16_tn_n128` until `_ts_n128` / `_mc_n128` have GPU
//!   figures). A process-wide CTA budget ([`set_cta_budget`], at most
//!   [`plan::MAX_CTAS`]) caps every launch's CTAs; [`Info`] says what ran (its path, kernel, split).
//!   [`Matmul::set_forced_plan`] replaces the planner's choice (for benchmarks: [`ForcedPlan`] names the
//!   GEMV, either tile with any split, and the TMA-store and cluster entries of either tile), refusing what the shape
//!   cannot take.
//! - The grouped GEMM ([`Matmul::grouped_bf16`]) routes a mixture-of-experts step's top-k choices on the
//!   device, listing the touched experts, and runs their rows in one launch, so the routing never returns
//!   to the host.
//! - [`KeptMatmul`] carries the module and the workspace from one scope to the next (the C entries of
//!   `include/omega_gpu_matmul_api.h`, `src/ffi/matmul.rs`, keep one between calls).
//!
//! The library is written against the typed API alone (docs/design.md, "Layers").
//!
//! ```no_run
//! use omega::libs::matmul::{Matmul, MatmulError, Shape};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dev = omega::lock().open()?;
//! let y = dev.scope(|s, gpu| -> Result<Vec<f32>, MatmulError> {
//!     let shape = Shape::new(2, 3, 4);
//!     let x = s.alloc_device_from(&[half::bf16::from_f32(1.0); 8])?;     // [M, K]
//!     let w = s.alloc_device_from(&[half::bf16::from_f32(0.5); 12])?;    // [N, K]
//!     let mut y = s.alloc_device::<f32>(6)?;                               // [M, N]
//!     let mm = Matmul::new(s)?;
//!     let done = mm.bf16(gpu, &x, &w, &mut y, shape)?;                    // a failure: MatmulError
//!     println!("{:?} ran {} launch(es)", done.info.path, done.info.launches);
//!     Ok(y.to_vec()?)
//! });
//! assert_eq!(y.value()?, vec![2.0; 6]);
//! # Ok(()) }
//! ```

mod error;
mod ops;
pub mod plan;

pub use error::{AnyShape, Dims, MatmulError, Operand, PlanError, ShapeError};
pub use ops::{
    cta_budget, set_cta_budget, Bf16, DeviceSpan, Done, Failed, Info, Input, KeptMatmul, Matmul, Output,
    RouterOperands, Workspace,
};
pub use plan::{
    ForcedPlan, ForcedRefusal, GemmCost, GemmTile, GroupedShape, Path, RoutingLayout, Shape, SkinnyCost, SwigluRefusal,
    WideEntry, FITTED_ENTRY, FITTED_MIN_SAVING_TENTHS, MAX_CTAS, MAX_SPLITS, MIN_SPLIT_KBLOCKS, NARROW_ENTRY,
    PLANNED_TILES, SKINNY_MIN_M, WIDE_ENTRY,
};
