//! The matmul library's failures: each names its stage ([`MatmulError::stage`], the first words of its
//! text), and carries what was wrong as data.

use crate::cmdlist::CmdListError;
use crate::tma::TmaError;
use crate::{Error, Stage};

use super::plan::{ForcedPlan, ForcedRefusal, GroupedShape, Shape, SwigluRefusal};

/// A product's shape, dense or grouped, as failures name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnyShape {
    /// `y[M, N] = x[M, K] . W[N, K]^T`.
    Dense(Shape),
    /// The grouped (mixture-of-experts) product.
    Grouped(GroupedShape),
    /// The gate+up product's SwiGLU: `y[M, N] = silu(x . Wg^T) * (x . Wu^T)` with the fused weight `W`
    /// `[2N, K]`.
    Swiglu(Shape),
}

impl core::fmt::Display for AnyShape {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            AnyShape::Dense(s) => s.fmt(f),
            AnyShape::Grouped(g) => g.fmt(f),
            AnyShape::Swiglu(s) => write!(f, "SwiGLU {s}"),
        }
    }
}

/// An operand of a product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    /// The activations (the tokens of a grouped product).
    X,
    /// The weights (every expert's, of a grouped product).
    W,
    /// The output.
    Y,
    /// The top-k choices of a grouped product.
    TopK,
    /// The routing buffer of a grouped product.
    Routing,
    /// The activations of a grouped product over an existing routing: one row per slot.
    SlotX,
    /// The router's weight `[experts, K]` of a grouped product routed by its router.
    RouterW,
    /// The router's f32 logits `[tokens, experts]`.
    Logits,
    /// The f32 weights of the top-k choices `[tokens, top_k]`.
    TopKWeights,
}

impl Operand {
    /// Its name, as failures print it.
    pub const fn name(self) -> &'static str {
        match self {
            Operand::X => "x",
            Operand::W => "w",
            Operand::Y => "y",
            Operand::TopK => "topk",
            Operand::Routing => "routing",
            Operand::SlotX => "x (a row per slot)",
            Operand::RouterW => "router weight",
            Operand::Logits => "router logits",
            Operand::TopKWeights => "top-k weights",
        }
    }

    /// The operand's dimensions for `shape` (row-major, the last one contiguous).
    pub fn dims(self, shape: AnyShape) -> Dims {
        let d = |v: &[u64]| Dims::new(v);
        match (self, shape) {
            (Operand::X, AnyShape::Dense(s) | AnyShape::Swiglu(s)) => d(&[s.m.into(), s.k.into()]),
            (Operand::W, AnyShape::Dense(s)) => d(&[s.n.into(), s.k.into()]),
            (Operand::W, AnyShape::Swiglu(s)) => d(&[2 * u64::from(s.n), s.k.into()]),
            (Operand::Y, AnyShape::Dense(s) | AnyShape::Swiglu(s)) => d(&[s.m.into(), s.n.into()]),
            (Operand::X, AnyShape::Grouped(g)) => d(&[g.tokens.into(), g.k.into()]),
            (Operand::W, AnyShape::Grouped(g)) => d(&[g.experts.into(), g.n.into(), g.k.into()]),
            (Operand::Y, AnyShape::Grouped(g)) => d(&[g.choices(), g.n.into()]),
            (Operand::TopK, AnyShape::Grouped(g)) => d(&[g.tokens.into(), g.top_k.into()]),
            (Operand::Routing, AnyShape::Grouped(g)) => d(&[g.routing().words as u64]),
            (Operand::SlotX, AnyShape::Grouped(g)) => d(&[g.choices(), g.k.into()]),
            (Operand::RouterW, AnyShape::Grouped(g)) => d(&[g.experts.into(), g.k.into()]),
            (Operand::Logits, AnyShape::Grouped(g)) => d(&[g.tokens.into(), g.experts.into()]),
            (Operand::TopKWeights, AnyShape::Grouped(g)) => d(&[g.tokens.into(), g.top_k.into()]),
            (
                Operand::TopK
                | Operand::Routing
                | Operand::SlotX
                | Operand::RouterW
                | Operand::Logits
                | Operand::TopKWeights,
                AnyShape::Dense(_) | AnyShape::Swiglu(_),
            ) => d(&[]),
        }
    }
}

impl core::fmt::Display for Operand {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// An operand's dimensions: up to three sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    sides: [u64; 3],
    rank: usize,
}

impl Dims {
    fn new(v: &[u64]) -> Self {
        let mut sides = [0; 3];
        sides[..v.len()].copy_from_slice(v);
        Dims { sides, rank: v.len() }
    }

    /// The sides.
    pub fn sides(&self) -> &[u64] {
        &self.sides[..self.rank]
    }

    /// Elements, or `None` past `u64`.
    pub fn elements(&self) -> Option<u64> {
        self.sides().iter().try_fold(1u64, |n, &s| n.checked_mul(s))
    }
}

impl core::fmt::Display for Dims {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("[")?;
        for (i, s) in self.sides().iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{s}")?;
        }
        f.write_str("]")
    }
}

/// What is wrong with a shape ([`MatmulError::Shape`], stage `matmul shape`); nothing was launched.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// A side of 0.
    #[error("{shape}: every side must be at least 1")]
    ZeroSide {
        /// The shape.
        shape: AnyShape,
    },
    /// An operand of more bytes than any buffer can have.
    #[error("{shape}: {operand} {dims} is more than any buffer can hold")]
    Overflow {
        /// The shape.
        shape: AnyShape,
        /// The operand.
        operand: Operand,
        /// Its dimensions.
        dims: Dims,
    },
    /// A buffer shorter than its operand.
    #[error("{operand} is a buffer of {len} elements; the product {shape} needs {operand} {dims}, {needs} elements")]
    Short {
        /// The operand.
        operand: Operand,
        /// The buffer's elements.
        len: usize,
        /// The elements the shape needs.
        needs: u64,
        /// The operand's dimensions.
        dims: Dims,
        /// The shape.
        shape: AnyShape,
    },
    /// The grouped kernels stream K in 32-element chunks.
    #[error("{shape}: the grouped GEMM needs K % 32 == 0")]
    GroupedK {
        /// The shape.
        shape: GroupedShape,
    },
    /// The fused router reads x and its weight 16 bytes at a time.
    #[error("{shape}: the router product needs x and the router weight 16-byte aligned")]
    RouterAlignment {
        /// The shape.
        shape: GroupedShape,
    },
    /// The fused router keeps a token's choices one a lane of a warp, at most 8 of them.
    #[error("{shape}: the router's top k must be at most 8 and at most the experts")]
    RouterTopK {
        /// The shape.
        shape: GroupedShape,
    },
}

/// A product the library cannot launch within the CTA budget ([`MatmulError::Plan`], stage `matmul plan`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// One expert's 64-row blocks are more CTAs than the budget allows in one launch.
    #[error("one expert's {blocks} blocks of 64 rows are past the CTA budget of {budget}")]
    ExpertPastBudget {
        /// CTAs of one expert (`ceil(N / 64)`).
        blocks: u64,
        /// The budget.
        budget: u32,
    },
    /// A grouped K split forced by [`super::Matmul::set_grouped_split`] that K's 32-element chunks or
    /// the budget cannot make; nothing else was chosen in its place.
    #[error("a forced grouped split of {split}: K = {k} holds at most K / 32 slices and {blocks} blocks of 64 rows times the split must fit the CTA budget of {budget}")]
    GroupedSplit {
        /// The split forced.
        split: u32,
        /// The product's K.
        k: u32,
        /// CTAs of one expert (`ceil(N / 64)`).
        blocks: u64,
        /// The budget.
        budget: u32,
    },
    /// A forced plan ([`super::Matmul::set_forced_plan`]) that cannot run the shape; nothing else was
    /// chosen in its place.
    #[error("{shape}: {forced} cannot run it: {why}")]
    Forced {
        /// The plan forced.
        forced: ForcedPlan,
        /// The shape.
        shape: Shape,
        /// Why.
        why: ForcedRefusal,
    },
    /// A SwiGLU product the fused gate+up GEMM cannot run; nothing else was chosen in its place (compute
    /// the product with [`super::Matmul::bf16`] and the elementwise library's SwiGLU).
    #[error("SwiGLU {shape}: the gate+up GEMM with SwiGLU in its epilogue cannot run it: {why}")]
    Swiglu {
        /// The shape (y `[M, N]`, W `[2N, K]`).
        shape: Shape,
        /// Why.
        why: SwigluRefusal,
    },
}

/// A failure of the matmul library.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MatmulError {
    /// A shape that cannot exist or that the operands' buffers do not hold; nothing was launched.
    #[error("matmul shape: {0}")]
    Shape(#[from] ShapeError),
    /// A product that does not fit the CTA budget; nothing was launched.
    #[error("matmul plan: {0}")]
    Plan(#[from] PlanError),
    /// The TMA encoder refused an operand's descriptor; nothing was launched.
    #[error("matmul plan: the TMA descriptor of {operand}: {source}")]
    Tma {
        /// The operand.
        operand: Operand,
        /// The encoder's refusal.
        source: TmaError,
    },
    /// A device call failed (allocation, load, copy, launch): its own stage and cause.
    #[error(transparent)]
    Device(#[from] Error),
    /// A command list refused a launch (full, or a list failure): its own stage and cause.
    #[error(transparent)]
    List(Box<CmdListError>),
}

impl From<CmdListError> for MatmulError {
    fn from(e: CmdListError) -> Self {
        MatmulError::List(Box::new(e))
    }
}

impl MatmulError {
    /// The failing stage.
    pub fn stage(&self) -> Stage {
        match self {
            MatmulError::Shape(_) => Stage::MatmulShape,
            MatmulError::Plan(_) | MatmulError::Tma { .. } => Stage::MatmulPlan,
            MatmulError::Device(e) => e.stage(),
            MatmulError::List(e) => e.stage(),
        }
    }

    /// True when this failure latched the process (its completion was uncertain).
    pub fn latched_the_process(&self) -> bool {
        match self {
            MatmulError::Device(e) => e.latched_the_process(),
            MatmulError::List(e) => e.latched_the_process(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_text_begins_with_its_stage() {
        let s = AnyShape::Dense(Shape::new(2, 3, 8));
        let g = GroupedShape { tokens: 1, top_k: 2, experts: 4, n: 64, k: 33 };
        let errors = [
            MatmulError::Shape(ShapeError::ZeroSide { shape: s }),
            MatmulError::Shape(ShapeError::Overflow { shape: s, operand: Operand::X, dims: Operand::X.dims(s) }),
            MatmulError::Shape(ShapeError::Short {
                operand: Operand::W,
                len: 1,
                needs: 24,
                dims: Operand::W.dims(s),
                shape: s,
            }),
            MatmulError::Shape(ShapeError::GroupedK { shape: g }),
            MatmulError::Shape(ShapeError::RouterTopK { shape: g }),
            MatmulError::Shape(ShapeError::RouterAlignment { shape: g }),
            MatmulError::Plan(PlanError::ExpertPastBudget { blocks: 2, budget: 1 }),
            MatmulError::Plan(PlanError::Forced {
                forced: ForcedPlan::Gemv { split: Some(3) },
                shape: Shape::new(2, 3, 8),
                why: ForcedRefusal::KNotMultiple { of: 32 },
            }),
            MatmulError::Plan(PlanError::Swiglu {
                shape: Shape::new(2, 6, 8),
                why: SwigluRefusal::NNotMultiple { of: 4 },
            }),
            MatmulError::Shape(ShapeError::ZeroSide { shape: AnyShape::Swiglu(Shape::new(0, 4, 8)) }),
            MatmulError::Tma { operand: Operand::X, source: TmaError::Rank { rank: 0 } },
            MatmulError::Device(Error::NotOpen(Stage::Alloc)),
        ];
        for e in errors {
            let text = e.to_string();
            assert!(text.starts_with(&format!("{}: ", e.stage())), "{text:?} does not begin with {:?}", e.stage());
        }
        let short = MatmulError::Shape(ShapeError::Short {
            operand: Operand::W,
            len: 1,
            needs: 24,
            dims: Operand::W.dims(s),
            shape: s,
        });
        assert_eq!(
            short.to_string(),
            "matmul shape: w is a buffer of 1 elements; the product M=2 N=3 K=8 needs w [3, 8], 24 elements"
        );
    }
}
