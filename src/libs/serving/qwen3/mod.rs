//! Qwen3-30B-A3B's decoder (EXPERIMENTAL): its configuration and the tensors of its weights
//! ([`config`]), the model on the device, and a host reference of the same model.
//!
//! The architecture: token embedding; per layer RMSNorm, q/k/v projections, Qwen3's per-head
//! QK-RMSNorm then RoPE (rotate_half pairing, theta 1e6), K/V appended to a paged cache, grouped-query
//! attention over it, the output projection added into the residual, RMSNorm, a router over 128 experts
//! whose 8 best (softmax, renormalised over the 8) each run a SwiGLU MLP, their weighted sum added into
//! the residual; a final RMSNorm, an untied lm_head and greedy argmax.

pub mod checkpoint;
pub mod config;
pub mod dump;
pub mod model;
pub mod reference;
mod step;

pub use config::{Qwen3Config, Tensor, TensorKind, WEIGHT_SEED};
pub use model::{Qwen3Error, Qwen3Model, WeightSource, Weights, CONTEXT_FILL_ID, PAGE_TOKENS};
pub use reference::Reference;
