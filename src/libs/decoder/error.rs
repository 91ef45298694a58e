//! The decoder library's failures: each names its stage ([`DecError::stage`]) and carries its data.

use crate::cmdlist::CmdListError;
use crate::{Error, Stage};

use super::ops::DecOp;

/// What is wrong with a call's shape or buffers (stage `decoder shape`); nothing was launched.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecShapeError {
    /// A side of 0 (rows, columns, tokens, experts or k).
    #[error("{op:?}: every side must be at least 1")]
    ZeroSide {
        /// The call.
        op: DecOp,
    },
    /// A top k the router kernel cannot hold (more than its 8, or more than the experts).
    #[error("{op:?}: top {k} of {experts} experts; k must be at most 8 and at most the experts")]
    TopK {
        /// The call.
        op: DecOp,
        /// The k asked for.
        k: u32,
        /// The experts.
        experts: u32,
    },
    /// An odd head dimension (RoPE rotates pairs).
    #[error("{op:?}: head_dim {dim} is odd; RoPE rotates pairs")]
    OddDim {
        /// The call.
        op: DecOp,
        /// The dimension given.
        dim: u32,
    },
    /// A range a bulk prefetch cannot take: its address or its size not a multiple of 16 bytes.
    #[error("{op:?}: {operand} is {bytes} bytes at {va:#x}; a bulk prefetch needs both multiples of 16")]
    Unaligned {
        /// The call.
        op: DecOp,
        /// The operand's name.
        operand: &'static str,
        /// Its device address.
        va: u64,
        /// Its size.
        bytes: u64,
    },
    /// Rows the fused combine and norm cannot take: not whole 8-column vectors, or wider than its block.
    #[error("{op:?}: rows of {cols} columns; the call takes a multiple of 8, at most {most}")]
    Width {
        /// The call.
        op: DecOp,
        /// The columns asked for.
        cols: u32,
        /// The widest row the call takes.
        most: u32,
    },
    /// An operand a 16-byte vector kernel reads or writes at an address that is not a multiple of 16.
    #[error("{op:?}: {operand} is at {va:#x}; the call moves 16-byte vectors and needs it 16-byte aligned")]
    Misaligned {
        /// The call.
        op: DecOp,
        /// The operand's name.
        operand: &'static str,
        /// Its device address.
        va: u64,
    },
    /// A buffer shorter than its operand.
    #[error("{op:?}: {operand} is a buffer of {len} elements; the call needs {needs}")]
    Short {
        /// The call.
        op: DecOp,
        /// The operand's name.
        operand: &'static str,
        /// The buffer's elements.
        len: usize,
        /// The elements the shape needs.
        needs: u64,
    },
}

/// A failure of the decoder library.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecError {
    /// A shape that cannot exist or that the buffers do not hold; nothing was launched.
    #[error("decoder shape: {0}")]
    Shape(#[from] DecShapeError),
    /// A device call failed (load, launch): its own stage and cause.
    #[error(transparent)]
    Device(#[from] Error),
    /// A command list refused a launch: its own stage and cause.
    #[error(transparent)]
    List(Box<CmdListError>),
}

impl From<CmdListError> for DecError {
    fn from(e: CmdListError) -> Self {
        DecError::List(Box::new(e))
    }
}

impl DecError {
    /// The failing stage.
    pub fn stage(&self) -> Stage {
        match self {
            DecError::Shape(_) => Stage::DecoderShape,
            DecError::Device(e) => e.stage(),
            DecError::List(e) => e.stage(),
        }
    }
}
