//! # The decoder library (EXPERIMENTAL)
//!
//! The small steps of a decoder step that sit between the matmul, elementwise and attention libraries'
//! kernels, over the `decoder` CUDA C++ module (kernels/cuda/decoder.cu); everything stays in device
//! memory so a whole step records into one command list:
//!
//! - [`Decoder::embed`]: the embedding rows of token ids that live in device memory (the last step's
//!   argmax wrote them), bf16 table `[vocab, hidden]` -> bf16 `[tokens, hidden]`; an id at or past the
//!   vocabulary gives a row of zeros (the kernel reads no row it was not given).
//! - [`Decoder::cast_bf16`]: f32 -> bf16, nearest even.
//! - [`Decoder::router_topk`]: from the router product's f32 logits `[tokens, experts]`, each token's
//!   `k` best experts (descending, the lower expert first on a tie) as the u32 `topk` the grouped GEMM
//!   reads (`[tokens, k]`), and their softmax weights renormalised over the `k` (f32 `[tokens, k]`).
//! - [`Decoder::argmax`]: greedy decoding, f32 logits `[rows, cols]` -> u32 token per row, the lowest
//!   index of the largest value.
//! - [`Decoder::l2_prefetch`]: the L2 fetches a later kernel's operands (a weight) while the kernels in
//!   between, latency-bound, leave HBM idle; nothing is stored, results never depend on it.
//!
//! A call is planned first ([`DecCall`]: the buffers' lengths checked against the shape, stage `decoder
//! shape`, nothing launched on a refusal), then run ([`Decoder::launch`]) or recorded
//! ([`Decoder::record`]). Written against the typed API alone (docs/design.md, "Layers").

mod error;
mod ops;

pub use crate::libs::matmul::{DeviceSpan, Input, Output};
pub use error::{DecError, DecShapeError};
pub use ops::{DecCall, DecOp, Decoder, L2Prefetch};
