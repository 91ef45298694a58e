//! # Prefill attention (EXPERIMENTAL)
//!
//! Causal or full attention over a whole prompt on the device, over the `prefill` CUDA C++ module
//! (kernels/cuda/prefill.cu): `out[s, h, :] = softmax_j(scale · q[s, h, :] · k[j, g, :]) · v[j, g, :]`,
//! `g = h / (q_heads / kv_heads)` (grouped-query attention), j over `0..seq` or, causal, `0..=s`. q, k, v
//! are bf16 `[seq, heads, 128]` row-major (head dimension 128), the accumulation f32, the output f32 or
//! bf16 `[seq, q_heads, 128]`. One launch: a FlashAttention-3-style kernel (TMA loads of K/V blocks, wgmma
//! for both GEMMs, a producer warpgroup and two consumer warpgroups, the softmax overlapped with the
//! GEMMs; kernels/cuda/attention/prefill_bf16.cuh says how).
//!
//! [`Prefill`] is a scope's handle: it loads the module once and owns the three TMA descriptors' device
//! buffer. Its calls check the shape against the buffers before anything runs (a zero side, kv heads
//! not dividing q heads, a buffer shorter than its operand: stage `prefill shape`; an operand no
//! descriptor can describe, such as a misaligned buffer: stage `prefill tma`), then launch, taking and
//! handing back the scope's [`Gpu`] token as [`Gpu::launch`] does, or add the launch to a command list.
//!
//! ```no_run
//! use omega::libs::attention::prefill::{Prefill, PrefillShape};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dev = omega::lock().open()?;
//! let out = dev.scope(|s, gpu| -> Result<Vec<f32>, omega::libs::attention::prefill::PrefillError> {
//!     let shape = PrefillShape::new(7, 4, 2, true); // seq 7, 4 q heads, 2 kv heads, causal
//!     let one = half::bf16::from_f32(0.5);
//!     let q = s.alloc_device_from(&vec![one; 7 * 4 * 128])?;
//!     let k = s.alloc_device_from(&vec![one; 7 * 2 * 128])?;
//!     let v = s.alloc_device_from(&vec![one; 7 * 2 * 128])?;
//!     let mut out = s.alloc_device::<f32>(7 * 4 * 128)?;
//!     let attn = Prefill::new(s)?;
//!     attn.bf16(gpu, &q, &k, &v, &mut out, shape)?;
//!     Ok(out.to_vec()?)
//! });
//! assert!(out.value()?.iter().all(|&x| x == 0.5));
//! # Ok(()) }
//! ```

use core::cell::RefCell;
use std::time::Instant;

use crate::cmdlist::{CmdListBuilder, CmdListError};
use crate::kernels::prefill::{
    prefill_grid, prefill_tmap, PREFILL, PREFILL_BF16, PREFILL_BF16_F32, PREFILL_HEAD_DIM, PREFILL_SMEM_BYTES,
    PREFILL_THREADS,
};
use crate::libs::matmul::{Bf16, Input, Output};
use crate::tma::{encode_tiled, TmaError, TENSOR_MAP_BYTES};
use crate::{Device, Error, Gpu, Kept, Kernel, Launch, Module, Scope, Stage};

/// One prefill's shape: `seq` rows of `q_heads` query heads over `kv_heads` K/V heads, head dimension
/// [`PREFILL_HEAD_DIM`], causal or not, the scores scaled by `scale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PrefillShape {
    /// Sequence length (query rows and kv rows).
    pub seq: u32,
    /// Query heads (a multiple of `kv_heads`).
    pub q_heads: u32,
    /// K/V heads.
    pub kv_heads: u32,
    /// Row s attends to kv rows `0..=s` only.
    pub causal: bool,
    /// The scores' scale (`1 / sqrt(128)` from [`PrefillShape::new`]).
    pub scale: f32,
}

impl PrefillShape {
    /// The shape with the usual scale, `1 / sqrt(head dim)`.
    pub fn new(seq: u32, q_heads: u32, kv_heads: u32, causal: bool) -> Self {
        PrefillShape { seq, q_heads, kv_heads, causal, scale: 1.0 / (PREFILL_HEAD_DIM as f32).sqrt() }
    }

    /// Elements of q and out (`seq * q_heads * 128`).
    pub fn q_elements(&self) -> u64 {
        u64::from(self.seq) * u64::from(self.q_heads) * u64::from(PREFILL_HEAD_DIM)
    }

    /// Elements of k and of v (`seq * kv_heads * 128`).
    pub fn kv_elements(&self) -> u64 {
        u64::from(self.seq) * u64::from(self.kv_heads) * u64::from(PREFILL_HEAD_DIM)
    }

    /// Floating-point operations of the two products, as FlashAttention counts them: `4 * d` per (query
    /// row, kv row) pair attended, so a causal prefill counts `seq (seq + 1) / 2` pairs a head.
    pub fn flops(&self) -> f64 {
        let s = f64::from(self.seq);
        let pairs = if self.causal { s * (s + 1.0) / 2.0 } else { s * s };
        4.0 * f64::from(PREFILL_HEAD_DIM) * pairs * f64::from(self.q_heads)
    }
}

impl core::fmt::Display for PrefillShape {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let kind = if self.causal { "causal" } else { "full" };
        write!(f, "seq {} x {}/{} heads x {PREFILL_HEAD_DIM} ({kind})", self.seq, self.q_heads, self.kv_heads)
    }
}

/// An operand of a prefill.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PrefillOperand {
    /// The queries.
    Q,
    /// The keys.
    K,
    /// The values.
    V,
    /// The output.
    Out,
}

impl core::fmt::Display for PrefillOperand {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            PrefillOperand::Q => "q",
            PrefillOperand::K => "k",
            PrefillOperand::V => "v",
            PrefillOperand::Out => "out",
        })
    }
}

/// A failure of a prefill call; each names its stage ([`PrefillError::stage`], its text's first words).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PrefillError {
    /// A side is 0; nothing was launched.
    #[error("prefill shape: {shape} has a zero side")]
    ZeroSide {
        /// The shape.
        shape: PrefillShape,
    },
    /// The kv heads do not divide the q heads; nothing was launched.
    #[error("prefill shape: {shape}: {} kv heads do not divide {} q heads", shape.kv_heads, shape.q_heads)]
    Heads {
        /// The shape.
        shape: PrefillShape,
    },
    /// A buffer is shorter than its operand; nothing was launched.
    #[error("prefill shape: {shape}: {operand} holds {len} elements, it needs {needs}")]
    Short {
        /// The shape.
        shape: PrefillShape,
        /// The operand.
        operand: PrefillOperand,
        /// Its buffer's elements.
        len: usize,
        /// The elements the shape needs.
        needs: u64,
    },
    /// The TMA encoder refused an operand's descriptor (a misaligned buffer, a side past its range);
    /// nothing was launched.
    #[error("prefill tma: the TMA descriptor of {operand}: {source}")]
    Tma {
        /// The operand.
        operand: PrefillOperand,
        /// The encoder's refusal.
        source: TmaError,
    },
    /// A device call failed (allocation, load, copy, launch): its own stage and cause.
    #[error(transparent)]
    Device(#[from] Error),
    /// A command list refused the launch: its own stage and cause.
    #[error(transparent)]
    List(Box<CmdListError>),
}

impl From<CmdListError> for PrefillError {
    fn from(e: CmdListError) -> Self {
        PrefillError::List(Box::new(e))
    }
}

impl PrefillError {
    /// The failing stage.
    pub fn stage(&self) -> Stage {
        match self {
            PrefillError::ZeroSide { .. } | PrefillError::Heads { .. } | PrefillError::Short { .. } => {
                Stage::PrefillShape
            }
            PrefillError::Tma { .. } => Stage::PrefillTma,
            PrefillError::Device(e) => e.stage(),
            PrefillError::List(e) => e.stage(),
        }
    }
}

/// A completed call: the token back and the device time of its launch.
#[derive(Debug)]
pub struct Done<'s> {
    /// The launch token.
    pub gpu: Gpu<'s>,
    /// Submit to completion, platform-clock ns.
    pub device_ns: u64,
    /// Wall time of the whole call, ns.
    pub host_ns: u64,
}

/// A failed call: the token back when launching may go on (`None` when the process latched).
#[derive(Debug)]
pub struct Failed<'s> {
    /// The token, when launching may go on.
    pub gpu: Option<Gpu<'s>>,
    /// What failed, naming its stage.
    pub error: PrefillError,
}

impl core::fmt::Display for Failed<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for Failed<'_> {}

impl From<Failed<'_>> for PrefillError {
    fn from(f: Failed<'_>) -> PrefillError {
        f.error
    }
}

/// The three descriptors of one call (q's, k's, v's).
type Descriptors = [u8; 3 * TENSOR_MAP_BYTES];

/// A prefill handle of scope `'s`: the `prefill` module, its two kernels, and the descriptors' buffer.
pub struct Prefill<'s> {
    scope: &'s Scope<'s>,
    _module: Module<'s>,
    /// f32 out, bf16 out.
    kernels: [Kernel<'s>; 2],
    tma: RefCell<Option<Kept<Device<u8>>>>,
}

impl core::fmt::Debug for Prefill<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Prefill").finish_non_exhaustive()
    }
}

/// Checks `shape` against the operands' lengths (`out_len` elements of the output) and encodes the
/// descriptors.
fn prepare<B: Bf16>(
    q: &impl Input<B>,
    k: &impl Input<B>,
    v: &impl Input<B>,
    out_len: usize,
    shape: PrefillShape,
) -> Result<Descriptors, PrefillError> {
    if shape.seq == 0 || shape.q_heads == 0 || shape.kv_heads == 0 {
        return Err(PrefillError::ZeroSide { shape });
    }
    if !shape.q_heads.is_multiple_of(shape.kv_heads) {
        return Err(PrefillError::Heads { shape });
    }
    let operands = [
        (PrefillOperand::Q, q.elements(), shape.q_elements()),
        (PrefillOperand::K, k.elements(), shape.kv_elements()),
        (PrefillOperand::V, v.elements(), shape.kv_elements()),
        (PrefillOperand::Out, out_len, shape.q_elements()),
    ];
    for (operand, len, needs) in operands {
        if (len as u64) < needs {
            return Err(PrefillError::Short { shape, operand, len, needs });
        }
    }
    let mut maps = [0u8; 3 * TENSOR_MAP_BYTES];
    let tensors = [
        (PrefillOperand::Q, q.device_va(), shape.q_heads),
        (PrefillOperand::K, k.device_va(), shape.kv_heads),
        (PrefillOperand::V, v.device_va(), shape.kv_heads),
    ];
    for (i, (operand, va, heads)) in tensors.into_iter().enumerate() {
        let map = encode_tiled(&prefill_tmap(va, shape.seq, heads))
            .map_err(|source| PrefillError::Tma { operand, source })?;
        maps[i * TENSOR_MAP_BYTES..(i + 1) * TENSOR_MAP_BYTES].copy_from_slice(&map.0);
    }
    Ok(maps)
}

impl<'s> Prefill<'s> {
    /// Loads the `prefill` module in `scope` (its kernels' host references on the simulator).
    pub fn new(scope: &'s Scope<'s>) -> Result<Self, PrefillError> {
        let module = scope.load_cuda_module(PREFILL)?;
        let kernels = [module.kernel(PREFILL_BF16_F32)?, module.kernel(PREFILL_BF16)?];
        Ok(Prefill { scope, _module: module, kernels, tma: RefCell::new(None) })
    }

    /// Attention of bf16 `q`, `k`, `v` into an f32 `out` (layouts: module docs).
    pub fn bf16<B: Bf16>(
        &self,
        gpu: Gpu<'s>,
        q: &impl Input<B>,
        k: &impl Input<B>,
        v: &impl Input<B>,
        out: &mut impl Output<f32>,
        shape: PrefillShape,
    ) -> Result<Done<'s>, Failed<'s>> {
        self.run(gpu, 0, prepare(q, k, v, out.elements(), shape), out.device_va(), shape)
    }

    /// As [`Prefill::bf16`] into a bf16 `out` (round to nearest even).
    pub fn bf16_to_bf16<B: Bf16>(
        &self,
        gpu: Gpu<'s>,
        q: &impl Input<B>,
        k: &impl Input<B>,
        v: &impl Input<B>,
        out: &mut impl Output<B>,
        shape: PrefillShape,
    ) -> Result<Done<'s>, Failed<'s>> {
        self.run(gpu, 1, prepare(q, k, v, out.elements(), shape), out.device_va(), shape)
    }

    /// Adds the launch of [`Prefill::bf16`] to `list` (nothing runs until it is submitted); the buffers
    /// stay borrowed for as long as the list can submit them.
    pub fn add_bf16<'k, B: Bf16>(
        &'k self,
        list: &mut CmdListBuilder<'k, 's>,
        q: &'k impl Input<B>,
        k: &'k impl Input<B>,
        v: &'k impl Input<B>,
        out: &'k impl Output<f32>,
        shape: PrefillShape,
    ) -> Result<(), PrefillError> {
        let maps = prepare(q, k, v, out.elements(), shape)?;
        let mut buf = self.scope.alloc_device::<u8>(maps.len())?;
        buf.write(&maps)?;
        let kept = self.scope.keep(buf);
        let va = kept.get(self.scope)?.va();
        // Each add's own, held by its list (so they go with it) before the launch is added, so a list never
        // names descriptors that are gone.
        list.hold(kept);
        list.add(&self.launch_of(0, va, out.device_va(), shape))?;
        Ok(())
    }

    /// The launch of kernel `which` (0: f32 out, 1: bf16 out) with the descriptors at `tma`.
    fn launch_of(&self, which: usize, tma: u64, out: u64, shape: PrefillShape) -> Launch<'_, 's> {
        let t = TENSOR_MAP_BYTES as u64;
        // A completion limit of 5 s plus 1 ms per 4 million multiply-adds of the whole-row product the
        // simulator's reference charges (its virtual clock's rate), so the simulator never runs a
        // correct prefill out, while a hang at a small shape is still found within seconds.
        let rows = u64::from(prefill_grid(shape.seq, shape.q_heads)[1]) * 128 * u64::from(shape.q_heads);
        let macs = rows * u64::from(shape.seq) * 2 * u64::from(PREFILL_HEAD_DIM);
        let timeout = u32::try_from(macs / 4_000_000).unwrap_or(u32::MAX);
        let timeout = crate::launch::DEFAULT_TIMEOUT_MS.saturating_add(timeout);
        Launch::new(&self.kernels[which])
            .grid(prefill_grid(shape.seq, shape.q_heads))
            .block([PREFILL_THREADS, 1, 1])
            .dynamic_shared(PREFILL_SMEM_BYTES)
            .timeout_ms(timeout)
            .arg(tma)
            .arg(tma + t)
            .arg(tma + 2 * t)
            .arg(out)
            .arg(shape.seq)
            .arg(shape.q_heads)
            .arg(shape.kv_heads)
            .arg(u32::from(shape.causal))
            .arg(shape.scale)
    }

    /// The descriptors written into the handle's buffer (allocated once, again when its open is gone).
    fn write_descriptors(&self, maps: &Descriptors) -> Result<u64, PrefillError> {
        let mut slot = self.tma.borrow_mut();
        if !slot.as_ref().is_some_and(|k| k.is_current()) {
            *slot = None;
            *slot = Some(self.scope.keep(self.scope.alloc_device::<u8>(maps.len())?));
        }
        let buf = slot.as_mut().expect("filled above").get_mut(self.scope)?;
        buf.write(maps)?;
        Ok(buf.va())
    }

    fn run(
        &self,
        gpu: Gpu<'s>,
        which: usize,
        prepared: Result<Descriptors, PrefillError>,
        out: u64,
        shape: PrefillShape,
    ) -> Result<Done<'s>, Failed<'s>> {
        let start = Instant::now();
        let tma = match prepared.and_then(|maps| self.write_descriptors(&maps)) {
            Ok(va) => va,
            Err(error) => return Err(Failed { gpu: Some(gpu), error }),
        };
        match gpu.launch(&self.launch_of(which, tma, out, shape)) {
            Ok(done) => {
                Ok(Done { gpu: done.gpu, device_ns: done.elapsed_ns, host_ns: start.elapsed().as_nanos() as u64 })
            }
            Err(e) => Err(Failed { gpu: e.gpu, error: PrefillError::Device(e.error) }),
        }
    }
}
