//! # The attention library (EXPERIMENTAL)
//!
//! Attention on the device over the `attention` CUDA C++ module (kernels/cuda/attention.cu): dense GQA in
//! f32, paged decode over a bf16 KV pool, and the append of a decode step's K/V rows into that pool on the
//! GPU. docs/attention.md describes the layouts, the kernels and their figures.
//!
//! - [`Attention`] is a scope's handle: it loads the module once and owns the workspace (the decode
//!   splits' partial outputs and log-sum-exps, the status word). Every call checks its shape, layout and
//!   buffers before anything runs (stage `attention shape` or `attention layout`), then launches, taking
//!   and handing back the scope's [`crate::Gpu`] token, or adds its launches to a command list.
//! - [`KvLayout`] says where the pool keeps each page's K and V rows; [`DecodeShape`], [`GqaShape`] and
//!   [`AppendShape`] the rest of a call. Page tables and lengths live in device memory and are not trusted:
//!   the kernels clamp and flag, the call reports the flags ([`AttentionError::Table`], stage `attention
//!   table`).
//! - Decode splits the KV of each (sequence, KV head) into ranges spread over whole waves of every SM
//!   ([`split`]), and the splits merge by their log-sum-exps ([`Merge`]): in a combine kernel, in their
//!   cluster, or in the last CTA of each (sequence, KV head) to finish.
//! - [`prefill::Prefill`] is the bf16 causal (or full) prefill attention: TMA, wgmma, a producer warp and
//!   two ping-ponging consumer warpgroups (kernels/cuda/prefill.cu, its own module).
//! - [`KeptAttention`] carries the module and the workspace from one scope to the next (the C entries of
//!   `include/omega_gpu_attention_api.h` keep one between calls).
//!
//! The library is written against the typed API alone (docs/design.md, "Layers"); its buffers are the
//! matmul library's [`Input`] and [`Output`] (scope buffers or [`DeviceSpan`]s).
//!
//! ```no_run
//! use omega::libs::attention::{Attention, AttentionError, DecodeShape, KvLayout};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dev = omega::lock().open()?;
//! let out = dev.scope(|s, gpu| -> Result<Vec<f32>, AttentionError> {
//!     let layout = KvLayout::new(16, 4, 128, 8);                  // 8 pages of 16 tokens, 4 KV heads
//!     let pool = s.alloc_device_from(&vec![0x3f80u16; layout.check()? as usize])?; // every K and V 1.0
//!     let q = s.alloc_device_from(&vec![0.5f32; 32 * 128])?;       // 1 sequence, 32 query heads
//!     let tables = s.alloc_device_from(&[3i32, 5])?;              // its pages
//!     let lens = s.alloc_device_from(&[20i32])?;                  // its tokens
//!     let mut out = s.alloc_device::<f32>(32 * 128)?;
//!     let att = Attention::new(s)?;
//!     att.paged_decode(gpu, &q, &pool, &layout, &tables, &lens, &mut out, DecodeShape::new(1, 32, 2))?;
//!     Ok(out.to_vec()?)
//! });
//! assert!(out.value()?.iter().all(|&x| x == 1.0));
//! # Ok(()) }
//! ```

mod error;
mod ops;
mod plan;
pub mod prefill;

pub use crate::kernels::attention::DecodeForm;
pub use crate::libs::matmul::{DeviceSpan, Input, Output};
pub use error::{AttentionError, LayoutError, Operand, ShapeError, TableDetail};
pub use ops::{Attention, Done, Elem, Failed, Info, KeptAttention, Kind, Workspace};
pub use plan::{
    decode_plan, split, AppendShape, DecodePlan, DecodeShape, GqaShape, KvLayout, Merge, QkvAppendShape, Split,
    Submission,
};
