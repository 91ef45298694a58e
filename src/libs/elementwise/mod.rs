//! # The elementwise library (EXPERIMENTAL)
//!
//! The bandwidth-bound layers of a decoder block on the device, over the `elementwise` CUDA C++ module
//! (kernels/cuda/elementwise.cu), in f32 and bf16 (bf16 in and out, f32 arithmetic), every array
//! row-major:
//!
//! - RMSNorm ([`Elementwise::rmsnorm`]) over `[rows, cols]` with a weight `[cols]`, and the residual form
//!   ([`Elementwise::add_rmsnorm`]): `h = x + h` written back, `y = rmsnorm(h) * w`.
//! - RoPE ([`Elementwise::rope`]) over `[tokens, heads, dim]` with explicit f32 cos/sin tables `[tokens,
//!   dim / 2]` (the caller's theta and positions), the rotate_half pairing (`i` with `i + dim / 2`); and
//!   Qwen3's per-head QK-RMSNorm followed by RoPE ([`Elementwise::norm_rope`]).
//! - SwiGLU ([`Elementwise::swiglu`]) `silu(gate) * up`, and over the fused gate+up projection
//!   ([`Elementwise::swiglu_fused`]: `[rows, 2 * I]`, gate columns first, then up).
//! - A 16-byte copy ([`Elementwise::copy`]), the benchmarks' bandwidth denominator.
//!
//! A call is planned first: [`EwCall`] checks the shape against the buffers' lengths (a buffer shorter
//! than its operand is refused naming both, stage `elementwise shape`, and nothing is launched) and
//! sizes the one launch for the device's SMs. It then runs in the scope ([`Elementwise::launch`], taking
//! and handing back the [`crate::Gpu`] token) or is recorded into a command list
//! ([`Elementwise::record`]); [`Info`] says what ran, its times and the bytes it moved.
//! [`KeptElementwise`] carries the loaded module from one scope to the next (the C entries of
//! `include/omega_gpu_elementwise_api.h` keep one). docs/elementwise.md describes the kernels.
//!
//! The library is written against the typed API alone (docs/design.md, "Layers"); it takes its buffer
//! traits ([`Input`], [`Output`], [`DeviceSpan`]) from the matmul library.
//!
//! ```no_run
//! use omega::libs::elementwise::{Elementwise, EwError, Rows};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dev = omega::lock().open()?;
//! let y = dev.scope(|s, gpu| -> Result<Vec<f32>, EwError> {
//!     let x = s.alloc_device_from(&[3.0f32, 4.0, 0.0, 0.0])?;   // [2, 2]
//!     let w = s.alloc_device_from(&[1.0f32, 2.0])?;             // [2]
//!     let mut y = s.alloc_device::<f32>(4)?;
//!     let ew = Elementwise::new(s)?;
//!     let call = ew.rmsnorm(&x, &w, &mut y, Rows { rows: 2, cols: 2 }, 1e-6)?;
//!     let done = ew.launch(gpu, call)?;                        // a failure: EwError
//!     println!("{} moved {} bytes", done.info.kernel, done.info.bytes);
//!     Ok(y.to_vec()?)
//! });
//! println!("{:?}", y.value()?);
//! # Ok(()) }
//! ```

mod error;
mod ops;

pub use crate::libs::matmul::{DeviceSpan, Input, Output};
pub use error::{EwError, ShapeError};
pub use ops::{
    rmsnorm_threads, Done, Elementwise, EwCall, EwElem, EwShape, Failed, Heads, Info, KeptElementwise, Op, Operand,
    RmsForm, Rows, RMSNORM_WARP_MIN_ROWS_PER_SM,
};
