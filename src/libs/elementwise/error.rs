//! The elementwise library's failures: each names its stage ([`EwError::stage`], the first words of its
//! text) and carries what was wrong as data.

use crate::cmdlist::CmdListError;
use crate::{Error, Stage};

use super::ops::{EwShape, Operand};

/// What is wrong with a shape or its buffers ([`EwError::Shape`], stage `elementwise shape`); nothing
/// was launched.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// A side of 0.
    #[error("{shape}: every side must be at least 1")]
    ZeroSide {
        /// The shape.
        shape: EwShape,
    },
    /// RoPE pairs element i with i + dim / 2: dim must be even.
    #[error("{shape}: RoPE needs an even head dim")]
    OddDim {
        /// The shape.
        shape: EwShape,
    },
    /// An operand of more elements than the kernels' 32-bit row indexing or any buffer can take.
    #[error("{shape}: {operand} of {elements} elements is more than a launch can address")]
    Overflow {
        /// The shape.
        shape: EwShape,
        /// The operand.
        operand: Operand,
        /// Its elements (saturated at `u64::MAX`).
        elements: u64,
    },
    /// A buffer shorter than its operand.
    #[error("{operand} is a buffer of {len} elements; {shape} needs {operand} of {needs} elements")]
    Short {
        /// The operand.
        operand: Operand,
        /// The buffer's elements.
        len: usize,
        /// The elements the shape needs.
        needs: u64,
        /// The shape.
        shape: EwShape,
    },
    /// A copy of a byte count that is not whole 16-byte words.
    #[error("a copy of {bytes} bytes: the copy moves whole 16-byte words")]
    CopyBytes {
        /// The bytes asked for.
        bytes: u64,
    },
    /// An RMSNorm form forced ([`super::Elementwise::force_rmsnorm_form`]) that cannot run the call.
    #[error("{shape}: the {form:?} RMSNorm form was forced, and {why}")]
    FormUnavailable {
        /// The form forced.
        form: super::RmsForm,
        /// The shape.
        shape: EwShape,
        /// What it lacks.
        why: &'static str,
    },
}

/// A failure of the elementwise library.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EwError {
    /// A shape that cannot exist or that the operands' buffers do not hold; nothing was launched.
    #[error("elementwise shape: {0}")]
    Shape(#[from] ShapeError),
    /// A device call failed (load, launch): its own stage and cause.
    #[error(transparent)]
    Device(#[from] Error),
    /// A command list refused a launch (full, or a list failure): its own stage and cause.
    #[error(transparent)]
    List(Box<CmdListError>),
}

impl From<CmdListError> for EwError {
    fn from(e: CmdListError) -> Self {
        EwError::List(Box::new(e))
    }
}

impl EwError {
    /// The failing stage.
    pub fn stage(&self) -> Stage {
        match self {
            EwError::Shape(_) => Stage::ElementwiseShape,
            EwError::Device(e) => e.stage(),
            EwError::List(e) => e.stage(),
        }
    }

    /// True when this failure latched the process (its completion was uncertain).
    pub fn latched_the_process(&self) -> bool {
        match self {
            EwError::Device(e) => e.latched_the_process(),
            EwError::List(e) => e.latched_the_process(),
            EwError::Shape(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_text_begins_with_its_stage() {
        let s = EwShape::Rows { rows: 2, cols: 3 };
        let errors = [
            EwError::Shape(ShapeError::ZeroSide { shape: s }),
            EwError::Shape(ShapeError::OddDim { shape: EwShape::Heads { tokens: 1, heads: 1, dim: 3 } }),
            EwError::Shape(ShapeError::Overflow { shape: s, operand: Operand::X, elements: u64::MAX }),
            EwError::Shape(ShapeError::Short { operand: Operand::W, len: 1, needs: 3, shape: s }),
            EwError::Shape(ShapeError::CopyBytes { bytes: 3 }),
            EwError::Device(Error::NotOpen(Stage::Launch)),
        ];
        for e in errors {
            let text = e.to_string();
            assert!(text.starts_with(&format!("{}: ", e.stage())), "{text:?}");
        }
        let short = EwError::Shape(ShapeError::Short { operand: Operand::W, len: 1, needs: 3, shape: s });
        assert_eq!(
            short.to_string(),
            "elementwise shape: w is a buffer of 1 elements; rows=2 cols=3 needs w of 3 elements"
        );
    }
}
