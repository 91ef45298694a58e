//! A Qwen3 checkpoint as a safetensors file: every tensor of a configuration under its
//! [`Tensor::name`], bf16, in [`Qwen3Config::tensors`]' order, with `__metadata__` naming the
//! configuration ([`METADATA_KEY`]).
//!
//! [`write_checkpoint`] writes the generated weights (a small model's: the whole file is built in memory,
//! so a full-width one, 61 GB, is for a loader that streams, not this); [`Checkpoint::parse`] checks a
//! file against a configuration before anything is handed out — every tensor present, bf16, of its shape,
//! and the configuration the metadata names, when it names one — and [`Checkpoint::tensor`] gives a
//! tensor's bits, borrowed from the file when they are aligned.

use std::borrow::Cow;

use zerocopy::FromBytes;

use super::config::{Qwen3Config, Tensor};
use crate::libs::serving::safetensors::{self, Dtype, Safetensors, SafetensorsError};

/// The `__metadata__` key whose value names the configuration ([`describe`]).
pub const METADATA_KEY: &str = "omega.qwen3.config";

/// Why a checkpoint was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CheckpointError {
    /// The file is no safetensors file.
    #[error("checkpoint: {0}")]
    File(#[from] SafetensorsError),
    /// A tensor the configuration has is not in the file.
    #[error("checkpoint: tensor {name} is missing")]
    Missing {
        /// The tensor.
        name: String,
    },
    /// A tensor of another element type.
    #[error("checkpoint: tensor {name} is {dtype}, the model's weights are BF16")]
    Dtype {
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: &'static str,
    },
    /// A tensor of another shape.
    #[error("checkpoint: tensor {name} has shape {got:?}, the configuration's is {want:?}")]
    Shape {
        /// The tensor.
        name: String,
        /// The file's shape.
        got: Vec<u64>,
        /// The configuration's.
        want: Vec<u64>,
    },
    /// The metadata names another configuration.
    #[error("checkpoint: written for {got}, read as {want}")]
    Config {
        /// What the file's metadata names.
        got: String,
        /// The configuration it is read with.
        want: String,
    },
}

/// The configuration as the metadata names it: every field, `name=value`, space-separated.
pub fn describe(c: &Qwen3Config) -> String {
    format!(
        "hidden={} layers={} q_heads={} kv_heads={} head_dim={} experts={} top_k={} expert_inter={} vocab={} \
         eps={:e} rope_theta={:e}",
        c.hidden,
        c.layers,
        c.q_heads,
        c.kv_heads,
        c.head_dim,
        c.experts,
        c.top_k,
        c.expert_inter,
        c.vocab,
        c.eps,
        c.rope_theta
    )
}

/// A safetensors file of `cfg`'s generated weights (see the module's text).
pub fn write_checkpoint(cfg: Qwen3Config) -> Vec<u8> {
    let tensors: Vec<(String, Vec<u64>, Vec<u8>)> = cfg
        .tensors()
        .into_iter()
        .map(|t| (t.name(), t.shape(&cfg), t.generate(&cfg).iter().flat_map(|b| b.to_le_bytes()).collect()))
        .collect();
    write_tensors(&cfg, &tensors)
}

/// A checkpoint file of `tensors` (name, shape, bf16 bytes) with `cfg`'s metadata.
fn write_tensors(cfg: &Qwen3Config, tensors: &[(String, Vec<u64>, Vec<u8>)]) -> Vec<u8> {
    let views: Vec<(&str, Dtype, &[u64], &[u8])> =
        tensors.iter().map(|(n, s, b)| (n.as_str(), Dtype::Bf16, s.as_slice(), b.as_slice())).collect();
    let description = describe(cfg);
    safetensors::write(&views, &[("format", "pt"), (METADATA_KEY, &description)])
}

/// A checked checkpoint: every tensor of its configuration is there, bf16, of its shape.
#[derive(Debug)]
pub struct Checkpoint<'a> {
    cfg: Qwen3Config,
    file: Safetensors<'a>,
}

impl<'a> Checkpoint<'a> {
    /// Reads `bytes` (a whole file) as `cfg`'s checkpoint; refused, naming the tensor and what differs,
    /// unless every tensor is there with its dtype and shape. Tensors the configuration lacks are
    /// ignored (a checkpoint may carry more).
    pub fn parse(bytes: &'a [u8], cfg: Qwen3Config) -> Result<Self, CheckpointError> {
        let file = safetensors::parse(bytes)?;
        if let Some(got) = file.metadata.get(METADATA_KEY) {
            let want = describe(&cfg);
            if *got != want {
                return Err(CheckpointError::Config { got: got.clone(), want });
            }
        }
        for t in cfg.tensors() {
            let name = t.name();
            let Some(view) = file.tensors.get(&name) else { return Err(CheckpointError::Missing { name }) };
            if view.dtype != Dtype::Bf16 {
                return Err(CheckpointError::Dtype { name, dtype: view.dtype.name() });
            }
            let want = t.shape(&cfg);
            if view.shape != want {
                return Err(CheckpointError::Shape { name, got: view.shape.clone(), want });
            }
        }
        Ok(Checkpoint { cfg, file })
    }

    /// The configuration it was checked against.
    pub fn config(&self) -> Qwen3Config {
        self.cfg
    }

    /// The bf16 bits of `t`, borrowed from the file when they lie 2-byte aligned on a little-endian host,
    /// else copied.
    ///
    /// # Panics
    /// When `t` is not a tensor of the configuration (every one of those was checked by [`Self::parse`]).
    pub fn tensor(&self, t: Tensor) -> Cow<'a, [u16]> {
        let name = t.name();
        let bytes = self.file.tensors.get(&name).unwrap_or_else(|| panic!("{name} is no tensor of the model")).bytes;
        if cfg!(target_endian = "little") {
            if let Ok(words) = <[u16]>::ref_from_bytes(bytes) {
                return Cow::Borrowed(words);
            }
        }
        Cow::Owned(bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libs::serving::qwen3::TensorKind;

    #[test]
    fn a_written_checkpoint_reads_back_as_the_generated_tensors_bit_for_bit() {
        let c = Qwen3Config::TINY;
        let bytes = write_checkpoint(c);
        let ck = Checkpoint::parse(&bytes, c).unwrap();
        assert_eq!(ck.config(), c);
        for t in c.tensors() {
            assert_eq!(ck.tensor(t)[..], t.generate(&c)[..], "{}", t.name());
        }
        let meta = safetensors::parse(&bytes).unwrap().metadata;
        assert_eq!(meta[METADATA_KEY], describe(&c));
        assert!(describe(&c).starts_with("hidden=256 layers=2 q_heads=4 kv_heads=2 head_dim=64"));
        // The copying path gives the same bits as the borrowing one: the file one byte further on.
        let mut shifted = vec![0u8];
        shifted.extend_from_slice(&bytes);
        let ck = Checkpoint::parse(&shifted[1..], c).unwrap();
        let q = Tensor { layer: Some(1), kind: TensorKind::Q };
        assert_eq!(ck.tensor(q)[..], q.generate(&c)[..]);
    }

    #[test]
    fn a_reference_loaded_from_a_checkpoint_decodes_as_the_generated_one() {
        use crate::libs::serving::qwen3::Reference;
        let c = Qwen3Config::TINY;
        let bytes = write_checkpoint(c);
        let ck = Checkpoint::parse(&bytes, c).unwrap();
        let mut loaded = Reference::new(c, 1, &|t| ck.tensor(t).into_owned());
        let mut generated = Reference::generated(c, 1);
        for token in [5, 77] {
            assert_eq!(loaded.step(&[token]), generated.step(&[token]));
        }
    }

    /// A tensor's new dtype and shape, or None: left out.
    type Edit = Option<(Dtype, Vec<u64>)>;

    /// A TINY file of zeros with tensor `index` changed by `edit` (to a dtype, a shape and its bytes),
    /// or left out when `edit` says None.
    fn tampered(index: usize, edit: fn(&[u64]) -> Edit) -> Vec<u8> {
        let c = Qwen3Config::TINY;
        let mut tensors: Vec<(String, Dtype, Vec<u64>)> =
            c.tensors().into_iter().map(|t| (t.name(), Dtype::Bf16, t.shape(&c))).collect();
        match edit(&tensors[index].2) {
            Some((dtype, shape)) => (tensors[index].1, tensors[index].2) = (dtype, shape),
            None => drop(tensors.remove(index)),
        }
        let bytes: Vec<Vec<u8>> =
            tensors.iter().map(|(_, d, s)| vec![0u8; (d.bytes() * s.iter().product::<u64>()) as usize]).collect();
        let views: Vec<(&str, Dtype, &[u64], &[u8])> =
            tensors.iter().zip(&bytes).map(|((n, d, s), b)| (n.as_str(), *d, s.as_slice(), b.as_slice())).collect();
        safetensors::write(&views, &[])
    }

    #[test]
    fn a_missing_or_misshapen_tensor_or_another_configuration_is_refused_by_name() {
        let c = Qwen3Config::TINY;
        assert!(Checkpoint::parse(&tampered(0, |s| Some((Dtype::Bf16, s.to_vec()))), c).is_ok(), "untouched");
        // The globals are 0..3, then eleven a layer: 3 + 11 + 9 is layer 1's gate_up, 5 layer 0's k_proj.
        let err = Checkpoint::parse(&tampered(23, |_| None), c).unwrap_err();
        assert_eq!(err, CheckpointError::Missing { name: "model.layers.1.mlp.experts.gate_up".into() });
        let err = Checkpoint::parse(&tampered(5, |_| Some((Dtype::Bf16, vec![64, 256]))), c).unwrap_err();
        let name = "model.layers.0.self_attn.k_proj.weight".to_owned();
        assert_eq!(err, CheckpointError::Shape { name, got: vec![64, 256], want: vec![128, 256] });
        assert_eq!(
            err.to_string(),
            "checkpoint: tensor model.layers.0.self_attn.k_proj.weight has shape [64, 256], the configuration's is \
             [128, 256]"
        );
        let err = Checkpoint::parse(&tampered(1, |s| Some((Dtype::F32, s.to_vec()))), c).unwrap_err();
        assert_eq!(err, CheckpointError::Dtype { name: "model.norm.weight".into(), dtype: "F32" });
        let err = Checkpoint::parse(&write_checkpoint(c), c.with_layers(3)).unwrap_err();
        assert!(matches!(err, CheckpointError::Config { .. }), "{err}");
        assert!(err.to_string().contains("layers=2") && err.to_string().contains("layers=3"), "{err}");
        let err = Checkpoint::parse(&[1, 2, 3], c).unwrap_err();
        assert!(matches!(err, CheckpointError::File(SafetensorsError::Truncated { .. })), "{err}");
    }
}
