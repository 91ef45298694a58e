//! Serving (`omega::libs::serving`): reserve everything a bounded workload needs, prepare its launches,
//! then seal, so that the steps that follow ask the driver for nothing.
//!
//! [`Serving::reserve`] takes the workload's [`ServingBounds`] and allocates up front: the matmul
//! library's handle (its kernel modules), the operand buffers a product is prepared on (x `[M, K]`, W
//! `[N, K]` bf16, y `[M, N]` f32 and bf16, at the bounds' largest sides) and the paged KV cache (`layers
//! × pages × page_tokens × kv_heads × head_dim` bf16 for K and again for V). [`Serving::prepare_matmul`]
//! runs a product of one shape once on those buffers, both outputs, so its plan, its workspace (split-K
//! partials, tickets, TMA descriptors) and what the platform keeps per launch (the prepared QMDs, the
//! command arena, local memory) exist. [`Serving::seal`] then turns it into [`Sealed`]: the session is
//! sealed (`Scope::seal`), every call that would ask the driver is refused with its stage, and a product
//! of a prepared shape runs on the warm state. [`Sealed::release`] unseals.
//!
//! What prepare cannot foresee is refused, never served: a product of a shape past the bounds at
//! prepare, and, once sealed, anything that would need a new buffer (`alloc: serving sealed: allocation
//! of 4096 bytes would ask the driver`).

pub mod qwen3;
pub mod safetensors;
pub mod weights;

use crate::cmdlist::CmdListError;
use crate::libs::matmul::{Matmul, MatmulError, Shape};
use crate::Error;
use crate::{Device, Gpu, Mem, Scope, Stage};

/// The largest workload a serving reservation is made for: the C `OmegaGpuServingBounds`, field for
/// field (eleven u32, 44 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServingBounds {
    /// The largest M of a product (rows of x and y: the tokens of a step, batch × new tokens).
    pub max_m: u32,
    /// The largest N of a product (rows of W: the widest output, lm_head's vocabulary for a decoder).
    pub max_n: u32,
    /// The largest K of a product (columns of x and W).
    pub max_k: u32,
    /// The longest sequence (context tokens) one request reaches.
    pub max_seq: u32,
    /// The most sequences decoded together.
    pub max_batch: u32,
    /// KV cache pages in all (shared by every sequence; 0: no cache).
    pub pages: u32,
    /// Tokens per KV page.
    pub page_tokens: u32,
    /// Layers, each with its own K and V pages.
    pub layers: u32,
    /// KV heads per layer.
    pub kv_heads: u32,
    /// Elements per head.
    pub head_dim: u32,
    /// Reserved, 0.
    pub flags: u32,
}

static_assertions::assert_eq_size!(ServingBounds, [u8; 44]);

impl ServingBounds {
    /// bf16 elements of the KV cache: K and V of every page of every layer. `None` on overflow.
    pub fn kv_elements(&self) -> Option<u64> {
        [self.pages, self.page_tokens, self.layers, self.kv_heads, self.head_dim]
            .iter()
            .try_fold(2u64, |acc, &v| acc.checked_mul(u64::from(v)))
    }

    /// Refused when these bounds describe no workload (a zero side, reserved flags, a buffer past what an
    /// address can count).
    pub fn check(&self) -> Result<(), BoundsError> {
        self.invalid().map_or(Ok(()), Err)
    }

    /// Why these bounds describe no workload, or `None` when they do.
    fn invalid(&self) -> Option<BoundsError> {
        let sides = [("max_m", self.max_m), ("max_n", self.max_n), ("max_k", self.max_k)];
        if let Some(&(field, _)) = sides.iter().find(|(_, v)| *v == 0) {
            return Some(BoundsError::Zero { field });
        }
        if self.flags != 0 {
            return Some(BoundsError::Flags { flags: self.flags });
        }
        let cache = [self.page_tokens, self.layers, self.kv_heads, self.head_dim];
        if self.pages > 0 && cache.contains(&0) {
            return Some(BoundsError::Zero { field: "page_tokens, layers, kv_heads or head_dim (with pages)" });
        }
        let fits = |a: u32, b: u32| usize::try_from(u64::from(a) * u64::from(b)).is_ok();
        if !fits(self.max_m, self.max_k) || !fits(self.max_n, self.max_k) || !fits(self.max_m, self.max_n) {
            return Some(BoundsError::Overflow);
        }
        self.kv_elements().and_then(|e| usize::try_from(e).ok()).is_none().then_some(BoundsError::Overflow)
    }
}

/// Why bounds were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoundsError {
    /// A side that must be at least 1.
    #[error("{field} is 0")]
    Zero {
        /// The field.
        field: &'static str,
    },
    /// Reserved flags set.
    #[error("flags {flags:#x} set (reserved: 0)")]
    Flags {
        /// The flags given.
        flags: u32,
    },
    /// A buffer the bounds ask for has more elements than an address can count.
    #[error("a buffer of these bounds overflows")]
    Overflow,
}

/// A failure of the serving library, naming its stage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServingError {
    /// The bounds describe no workload.
    #[error("serving: bounds refused: {0}")]
    Bounds(#[source] BoundsError),
    /// A shape past the bounds: it was not reserved for.
    #[error("serving: shape {m}x{n}x{k} is past the bounds {max_m}x{max_n}x{max_k}")]
    PastBounds {
        /// M asked.
        m: u32,
        /// N asked.
        n: u32,
        /// K asked.
        k: u32,
        /// The bounds' M.
        max_m: u32,
        /// The bounds' N.
        max_n: u32,
        /// The bounds' K.
        max_k: u32,
    },
    /// A session call failed (an allocation, the seal), with its own stage.
    #[error("{0}")]
    Session(#[from] Error),
    /// A matmul call failed, with its own stage.
    #[error("{0}")]
    Matmul(#[from] MatmulError),
    /// The launch token was lost: a product's completion was uncertain and the process latched.
    #[error("serving: a product latched the process")]
    Latched,
}

impl From<CmdListError> for ServingError {
    fn from(e: CmdListError) -> Self {
        ServingError::Matmul(e.into())
    }
}

impl ServingError {
    /// The stage that failed.
    pub fn stage(&self) -> Stage {
        match self {
            ServingError::Session(e) => e.stage(),
            ServingError::Matmul(e) => e.stage(),
            ServingError::Bounds(_) | ServingError::PastBounds { .. } | ServingError::Latched => Stage::Serving,
        }
    }
}

/// The operand buffers products are prepared on.
struct Operands<'s> {
    x: Mem<'s, Device<u16>>,
    w: Mem<'s, Device<u16>>,
    y: Mem<'s, Device<f32>>,
    y16: Mem<'s, Device<u16>>,
}

/// A reservation, not sealed: shapes may be prepared.
pub struct Serving<'s> {
    scope: &'s Scope<'s>,
    bounds: ServingBounds,
    matmul: Matmul<'s>,
    ops: Operands<'s>,
    kv: Option<Mem<'s, Device<u16>>>,
    prepared: Vec<Shape>,
}

/// A sealed reservation: nothing asks the driver until [`Sealed::release`] (or its drop). It borrows the
/// reservation, so no shape can be prepared while sealed, while command lists built on the reservation's
/// handle before the seal stay usable.
pub struct Sealed<'a, 's> {
    inner: &'a Serving<'s>,
}

impl<'s> Serving<'s> {
    /// Allocates everything `bounds` needs (see the module's text). Refused before anything is allocated
    /// when the bounds describe no workload.
    pub fn reserve(scope: &'s Scope<'s>, bounds: ServingBounds) -> Result<Self, ServingError> {
        if let Some(e) = bounds.invalid() {
            return Err(ServingError::Bounds(e));
        }
        // Checked by `invalid`: each product of two sides fits a usize.
        let len = |a: u32, b: u32| (u64::from(a) * u64::from(b)) as usize;
        let ops = Operands {
            x: scope.alloc_device_from(&vec![0u16; len(bounds.max_m, bounds.max_k)])?,
            w: scope.alloc_device_from(&vec![0u16; len(bounds.max_n, bounds.max_k)])?,
            y: scope.alloc_device(len(bounds.max_m, bounds.max_n))?,
            y16: scope.alloc_device(len(bounds.max_m, bounds.max_n))?,
        };
        let kv = match bounds.kv_elements().expect("checked by `invalid`") {
            0 => None,
            n => Some(scope.alloc_device(n as usize)?),
        };
        let matmul = Matmul::new(scope)?;
        Ok(Serving { scope, bounds, matmul, ops, kv, prepared: Vec::new() })
    }

    /// The bounds reserved for.
    pub fn bounds(&self) -> ServingBounds {
        self.bounds
    }

    /// Builds the launches of a product of `shape` (x `[m, k]` · W `[n, k]`ᵀ, both outputs): runs it once
    /// on the reserved operands, so its plan and workspace exist when sealed. Refused past the bounds.
    pub fn prepare_matmul(&mut self, gpu: Gpu<'s>, shape: Shape) -> Result<Gpu<'s>, ServingError> {
        let b = self.bounds;
        if shape.m > b.max_m || shape.n > b.max_n || shape.k > b.max_k {
            return Err(ServingError::PastBounds {
                m: shape.m,
                n: shape.n,
                k: shape.k,
                max_m: b.max_m,
                max_n: b.max_n,
                max_k: b.max_k,
            });
        }
        let Operands { x, w, y, y16 } = &mut self.ops;
        let done = self.matmul.bf16(gpu, x, w, y, shape).map_err(lost_token)?;
        let done = self.matmul.bf16_to_bf16(done.gpu, x, w, y16, shape).map_err(lost_token)?;
        if !self.prepared.contains(&shape) {
            self.prepared.push(shape);
        }
        Ok(done.gpu)
    }

    /// The shapes prepared so far.
    pub fn prepared(&self) -> &[Shape] {
        &self.prepared
    }

    /// The matmul library's handle, warm for the prepared shapes.
    pub fn matmul(&self) -> &Matmul<'s> {
        &self.matmul
    }

    /// The paged KV cache (`None` when the bounds have no pages).
    pub fn kv(&mut self) -> Option<&mut Mem<'s, Device<u16>>> {
        self.kv.as_mut()
    }

    /// Seals the session: see [`Sealed`].
    pub fn seal(&self) -> Result<Sealed<'_, 's>, ServingError> {
        self.scope.seal()?;
        Ok(Sealed { inner: self })
    }
}

/// The token back from a failed product, or [`ServingError::Latched`] when the product latched.
fn lost_token(f: crate::libs::matmul::Failed<'_>) -> ServingError {
    if f.gpu.is_none() {
        ServingError::Latched
    } else {
        ServingError::Matmul(f.error)
    }
}

impl<'s> Sealed<'_, 's> {
    /// The reservation: its matmul handle, bounds and prepared shapes.
    pub fn serving(&self) -> &Serving<'s> {
        self.inner
    }

    /// Unseals: the buffers freed while sealed go back to the platform.
    pub fn release(self) -> Result<(), ServingError> {
        let scope = self.inner.scope;
        std::mem::forget(self);
        scope.unseal().map_err(ServingError::from)
    }
}

impl Drop for Sealed<'_, '_> {
    fn drop(&mut self) {
        // Unsealing fails only when the device is no longer open, which ends the seal anyway.
        let _ = self.inner.scope.unseal();
    }
}
