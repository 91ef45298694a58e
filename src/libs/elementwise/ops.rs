//! The typed calls: [`Elementwise`], a scope's handle on the `elementwise` module. A call is planned
//! first ([`EwCall`]: the shape checked against the buffers, the launch sized), then run
//! ([`Elementwise::launch`]) or recorded into a command list ([`Elementwise::record`]).

use core::marker::PhantomData;
use std::cell::Cell;
use std::time::Instant;

use crate::cmdlist::CmdListBuilder;
use crate::kernels::elementwise as k;
use crate::libs::matmul::{Input, Output};
use crate::{DeviceScalar, Gpu, KeptModule, Kernel, Launch, Module, Scope, Stage};

use super::error::{EwError, ShapeError};

mod sealed {
    pub trait Sealed {}
}

/// An element type of the library: f32, or bf16 as its bit pattern (`u16`, what C passes) or
/// [`half::bf16`]. bf16 calls read and write bf16 and compute in f32.
pub trait EwElem: DeviceScalar + sealed::Sealed {
    /// bf16 (else f32).
    const BF16: bool;
}
impl sealed::Sealed for f32 {}
impl sealed::Sealed for u16 {}
impl sealed::Sealed for half::bf16 {}
impl EwElem for f32 {
    const BF16: bool = false;
}
impl EwElem for u16 {
    const BF16: bool = true;
}
impl EwElem for half::bf16 {
    const BF16: bool = true;
}

/// `rows x cols`, row-major: RMSNorm's x, h and y (w is `[cols]`); SwiGLU's output (and each of gate and
/// up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    /// Rows (tokens).
    pub rows: u32,
    /// Columns: the normalised width, or SwiGLU's intermediate size.
    pub cols: u32,
}

/// `[tokens, heads, dim]`, row-major: RoPE's x and y; its tables are `[tokens, dim / 2]` f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heads {
    /// Tokens: rows of the tables.
    pub tokens: u32,
    /// Heads of each token.
    pub heads: u32,
    /// Values per head (even).
    pub dim: u32,
}

/// A call's shape, as failures name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EwShape {
    /// RMSNorm's and SwiGLU's.
    Rows {
        /// Rows.
        rows: u32,
        /// Columns.
        cols: u32,
    },
    /// RoPE's.
    Heads {
        /// Tokens.
        tokens: u32,
        /// Heads per token.
        heads: u32,
        /// Values per head.
        dim: u32,
    },
    /// A copy's.
    Bytes {
        /// Bytes copied.
        bytes: u64,
    },
}

impl From<Rows> for EwShape {
    fn from(r: Rows) -> Self {
        EwShape::Rows { rows: r.rows, cols: r.cols }
    }
}

impl From<Heads> for EwShape {
    fn from(h: Heads) -> Self {
        EwShape::Heads { tokens: h.tokens, heads: h.heads, dim: h.dim }
    }
}

impl core::fmt::Display for EwShape {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            EwShape::Rows { rows, cols } => write!(f, "rows={rows} cols={cols}"),
            EwShape::Heads { tokens, heads, dim } => write!(f, "tokens={tokens} heads={heads} dim={dim}"),
            EwShape::Bytes { bytes } => write!(f, "bytes={bytes}"),
        }
    }
}

/// An operand of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    /// The input.
    X,
    /// The residual stream `h` of the residual RMSNorm (read and written).
    Residual,
    /// The weight.
    W,
    /// The output.
    Y,
    /// RoPE's cosine table.
    Cos,
    /// RoPE's sine table.
    Sin,
    /// SwiGLU's gate.
    Gate,
    /// SwiGLU's up projection.
    Up,
    /// The fused gate+up projection's output.
    GateUp,
    /// A copy's source.
    Src,
    /// A copy's destination.
    Dst,
}

impl Operand {
    /// Its name, as failures print it.
    pub const fn name(self) -> &'static str {
        match self {
            Operand::X => "x",
            Operand::Residual => "h",
            Operand::W => "w",
            Operand::Y => "y",
            Operand::Cos => "cos",
            Operand::Sin => "sin",
            Operand::Gate => "gate",
            Operand::Up => "up",
            Operand::GateUp => "gate_up",
            Operand::Src => "src",
            Operand::Dst => "dst",
        }
    }
}

impl core::fmt::Display for Operand {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a call computes (the C info's `op`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Op {
    /// `y = rmsnorm(x) * w`.
    RmsNorm = 1,
    /// `h = x + h; y = rmsnorm(h) * w`.
    AddRmsNorm = 2,
    /// RoPE.
    Rope = 3,
    /// Per-head RMSNorm, then RoPE.
    NormRope = 4,
    /// `y = silu(gate) * up`.
    SwiGlu = 5,
    /// SwiGLU over the fused gate+up output.
    SwiGluFused = 6,
    /// A 16-byte-word copy.
    Copy = 7,
    /// SwiGLU over an f32 fused gate+up output into bf16 (a Rust call, no C entry).
    SwiGluFusedToBf16 = 8,
}

/// What a call ran: the op, its shape and launch, its times and the bytes it moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Info {
    /// The op (`None` when the call failed before it was planned).
    pub op: Option<Op>,
    /// bf16 operands (else f32); for [`Op::SwiGluFusedToBf16`], a bf16 output of f32 inputs.
    pub bf16: bool,
    /// Rows (RoPE: tokens).
    pub rows: u32,
    /// Columns (RoPE: the head dim; a copy: its 16-byte words, saturated).
    pub cols: u32,
    /// RoPE: heads per token (1 otherwise).
    pub heads: u32,
    /// Launches (recorded, for a command-list add).
    pub launches: u32,
    /// CTAs of the launch.
    pub ctas: u32,
    /// Threads per CTA.
    pub block: u32,
    /// The kernel takes its 16-byte vector path (the alignment and widths allow it).
    pub vectorized: bool,
    /// The kernel's symbol; empty before planning.
    pub kernel: &'static str,
    /// Submit to completion, platform-clock ns (0 for a command-list add).
    pub device_ns: u64,
    /// Wall time of the whole call, ns.
    pub host_ns: u64,
    /// Bytes the kernel reads and writes in device memory (the figure GB/s is computed from).
    pub bytes: u64,
    /// Bytes written from the host (the C host-pointer entries' staged inputs).
    pub h2d_bytes: u64,
    /// Bytes read back to the host (the C host-pointer entries' staged output).
    pub d2h_bytes: u64,
    /// The failing stage (`None` on success).
    pub stage: Option<Stage>,
}

/// A completed call: the launch token back and the call's record.
pub type Done<'s> = crate::libs::call::Done<'s, Info>;

/// A failed call: the token back when the failure was certain, `None` when the process latched.
pub type Failed<'s> = crate::libs::call::Failed<'s, EwError, Info>;

impl From<Failed<'_>> for EwError {
    fn from(f: Failed<'_>) -> EwError {
        f.error
    }
}

/// A launch argument.
#[derive(Clone, Copy, Debug)]
enum Arg {
    Va(u64),
    Word(u32),
}

/// A checked and planned call: one launch, its arguments, and the buffers it names borrowed for `'b`
/// (mutably, for what it writes), so a call recorded in a command list keeps them alive and unaliased.
#[derive(Debug)]
#[must_use = "an EwCall does nothing until Elementwise::launch or Elementwise::record runs it"]
pub struct EwCall<'b> {
    kernel: usize,
    grid: [u32; 3],
    block: u32,
    args: Vec<Arg>,
    info: Info,
    _buffers: PhantomData<&'b mut ()>,
}

impl EwCall<'_> {
    /// What the call will run (its op, shape, launch and bytes).
    pub fn info(&self) -> &Info {
        &self.info
    }
}

/// The module's kernels in [`Elementwise`]'s order: each family's f32 entry, then its bf16 one; then the
/// warp-per-row RMSNorm forms.
const KERNELS: [&str; 17] = [
    k::RMSNORM[0],
    k::RMSNORM[1],
    k::ADD_RMSNORM[0],
    k::ADD_RMSNORM[1],
    k::ROPE[0],
    k::ROPE[1],
    k::NORM_ROPE[0],
    k::NORM_ROPE[1],
    k::SWIGLU[0],
    k::SWIGLU[1],
    k::COPY16,
    k::SWIGLU_F32_BF16,
    k::RMSNORM_WARP[0],
    k::RMSNORM_WARP[1],
    k::ADD_RMSNORM_WARP_BF16,
    k::NORM_ROPE_WHOLE[0],
    k::NORM_ROPE_WHOLE[1],
];

/// Where the whole-row QK-norm + RoPE entries sit in [`KERNELS`]: f32, bf16.
const NORM_ROPE_WHOLE_KERNELS: [usize; 2] = [15, 16];

/// Where the warp-per-row forms sit in [`KERNELS`]: the plain f32 and bf16 forms, the bf16 residual one.
const RMSNORM_WARP_KERNELS: [usize; 3] = [12, 13, 14];

/// The fewest rows a call has for the library to take the warp-per-row form on its own: enough that
/// every warp of a wave owns a row (two CTAs of 8 warps an SM at its 96-108 registers); below it (decode's
/// 1 to 64 rows) a row's 8 KiB is better read by one CTA's 256 threads. Not yet measured against the block
/// form on the H200 (`ew_bench` times both at 16384 rows).
pub const RMSNORM_WARP_MIN_ROWS_PER_SM: u32 = 16;

/// An RMSNorm call's kernel form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RmsForm {
    /// One CTA a row (`omega_rmsnorm_*`, `omega_add_rmsnorm_*`), any width: the row's threads share its
    /// loads and meet at a block reduction.
    Block,
    /// One warp a row (`omega_rmsnorm_warp_*`, `omega_add_rmsnorm_warp_bf16`): rows of at most
    /// [`k::RMSNORM_WARP_COLS`] columns on the vector path; no block barrier between rows.
    Warp,
}

/// Where the copy kernel sits in [`KERNELS`].
const COPY_KERNEL: usize = 10;
/// Where the f32 -> bf16 SwiGLU sits in [`KERNELS`].
const SWIGLU_TO_BF16_KERNEL: usize = 11;

/// The index in [`KERNELS`] of `op`'s entry for element type `T`.
fn kernel_index<T: EwElem>(op: Op) -> usize {
    let family = match op {
        Op::RmsNorm => 0,
        Op::AddRmsNorm => 1,
        Op::Rope => 2,
        Op::NormRope => 3,
        Op::SwiGlu | Op::SwiGluFused => 4,
        Op::Copy => return COPY_KERNEL,
        Op::SwiGluFusedToBf16 => return SWIGLU_TO_BF16_KERNEL,
    };
    2 * family + usize::from(T::BF16)
}

/// The RMSNorm block for rows of `cols` elements of `T` ([`k::rmsnorm_block`]).
pub fn rmsnorm_threads<T: EwElem>(cols: u32) -> u32 {
    k::rmsnorm_block(T::BF16, cols)
}

/// Checks that `len` elements hold `needs` of `operand`.
fn hold(shape: EwShape, operand: Operand, len: usize, needs: Option<u64>) -> Result<(), ShapeError> {
    let Some(needs) = needs.filter(|n| n.checked_mul(4).is_some_and(|b| b <= i64::MAX as u64)) else {
        return Err(ShapeError::Overflow { shape, operand, elements: u64::MAX });
    };
    if (len as u64) < needs {
        return Err(ShapeError::Short { operand, len, needs, shape });
    }
    Ok(())
}

fn product(a: u32, b: u32) -> Option<u64> {
    u64::from(a).checked_mul(u64::from(b))
}

/// A fused gate+up operand `[rows, 2 * cols]` checked against `shape`: its gate and up halves' first
/// addresses and its row stride.
fn fused_halves<T: DeviceScalar>(gate_up: &impl Input<T>, shape: Rows) -> Result<([u64; 2], u32), EwError> {
    let s = EwShape::from(shape);
    let Some(stride) = shape.cols.checked_mul(2) else {
        let elements = product(shape.rows, shape.cols).map_or(u64::MAX, |n| n.saturating_mul(2));
        return Err(ShapeError::Overflow { shape: s, operand: Operand::GateUp, elements }.into());
    };
    hold(s, Operand::GateUp, gate_up.elements(), product(shape.rows, stride))?;
    let g = gate_up.device_va();
    Ok(([g, g + u64::from(shape.cols) * size_of::<T>() as u64], stride))
}

fn aligned16(vas: &[u64]) -> bool {
    vas.iter().all(|va| va.is_multiple_of(16))
}

/// The `elementwise` module handle of scope `'s`: its kernels, loaded once. Plans calls ([`EwCall`]) and
/// runs or records them.
pub struct Elementwise<'s> {
    scope: &'s Scope<'s>,
    module: Module<'s>,
    kernels: Vec<Kernel<'s>>,
    sms: u32,
    timeout_ms: Cell<u32>,
    rms_form: Cell<Option<RmsForm>>,
}

impl core::fmt::Debug for Elementwise<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Elementwise").field("module", &self.module).field("sms", &self.sms).finish()
    }
}

/// An elementwise handle kept beyond its scope ([`Elementwise::keep`]), for [`Elementwise::resume`] in a
/// later scope of the same device open (the C entries keep one between calls).
#[derive(Debug)]
pub struct KeptElementwise {
    module: KeptModule,
}

impl KeptElementwise {
    /// True while the device open that loaded it is the one open now.
    pub fn is_current(&self) -> bool {
        self.module.is_current()
    }
}

impl<'s> Elementwise<'s> {
    /// The most CTAs of kernel `index` at `threads` a CTA that run in one wave over every SM: the grid
    /// strides past them instead of queueing a second, partly empty wave.
    fn wave(&self, index: usize, threads: u32) -> u32 {
        self.sms * self.kernels[index].resident_ctas(threads, 0)
    }

    /// Loads the `elementwise` module in `scope` (its kernels' host references on the simulator).
    pub fn new(scope: &'s Scope<'s>) -> Result<Self, EwError> {
        let module = scope.load_cuda_module(k::ELEMENTWISE)?;
        Self::with_module(scope, module)
    }

    fn with_module(scope: &'s Scope<'s>, module: Module<'s>) -> Result<Self, EwError> {
        let kernels = KERNELS.iter().map(|name| module.kernel(name)).collect::<Result<Vec<_>, _>>()?;
        let timeout_ms = Cell::new(crate::launch::DEFAULT_TIMEOUT_MS);
        let rms_form = Cell::new(None);
        Ok(Elementwise { scope, module, kernels, sms: scope.device().sm_count.max(1), timeout_ms, rms_form })
    }

    /// The handle `kept` was, in this scope; or, when there is none or its device open is gone, a fresh
    /// one (the module loaded again).
    pub fn resume(scope: &'s Scope<'s>, kept: Option<KeptElementwise>) -> Result<Self, EwError> {
        match kept {
            Some(k) if k.is_current() => {
                let module = k.module.get(scope)?;
                Self::with_module(scope, module)
            }
            _ => Self::new(scope),
        }
    }

    /// Keeps the loaded module beyond this scope.
    pub fn keep(self) -> KeptElementwise {
        KeptElementwise { module: self.scope.keep_module(self.module) }
    }

    /// The completion limit of each launch, ms (the typed launch's default, 5 s, until set). A large call
    /// gets longer: 1 ms more per 10,000 elements, so the simulator's virtual clock never runs a correct
    /// call out.
    pub fn set_timeout_ms(&self, ms: u32) {
        self.timeout_ms.set(ms);
    }

    /// Forces the RMSNorm calls' kernel form (`None`: the library's choice, the warp form for at least
    /// [`RMSNORM_WARP_MIN_ROWS_PER_SM`] rows an SM where it can run, else the block form). A forced form
    /// that cannot run a call refuses it ([`ShapeError::FormUnavailable`]), never runs the other.
    /// Benchmarks time both forms with it.
    pub fn force_rmsnorm_form(&self, form: Option<RmsForm>) {
        self.rms_form.set(form);
    }

    /// The warp form's kernel for `op` in `T`, or why it has none for this call.
    fn warp_form<T: EwElem>(&self, op: Op, shape: Rows, vectorized: bool) -> Result<usize, &'static str> {
        let index = match (op, T::BF16) {
            (Op::RmsNorm, bf16) => RMSNORM_WARP_KERNELS[usize::from(bf16)],
            (_, true) => RMSNORM_WARP_KERNELS[2],
            (_, false) => return Err("the residual form has no f32 warp-per-row kernel"),
        };
        if shape.cols > k::RMSNORM_WARP_COLS {
            return Err("its rows are wider than the 2048 columns a warp holds");
        }
        if !vectorized {
            return Err("its operands do not take 16-byte vectors (cols % vector != 0, or a pointer off 16 bytes)");
        }
        Ok(index)
    }

    fn timeout_for(&self, elements: u64) -> u32 {
        let scaled = u64::from(crate::launch::DEFAULT_TIMEOUT_MS).saturating_add(elements / 10_000);
        self.timeout_ms.get().max(u32::try_from(scaled).unwrap_or(u32::MAX))
    }

    /// `y[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * w` over `shape` (`x`, `y`: `[rows, cols]`; `w`:
    /// `[cols]`). The row held in registers, each byte read once: one CTA a row, or one warp a row for many
    /// rows of at most 2048 columns ([`RmsForm`], [`Elementwise::force_rmsnorm_form`]).
    pub fn rmsnorm<'b, T: EwElem>(
        &self,
        x: &'b impl Input<T>,
        w: &'b impl Input<T>,
        y: &'b mut impl Output<T>,
        shape: Rows,
        eps: f32,
    ) -> Result<EwCall<'b>, EwError> {
        self.plan_rmsnorm::<T>(Op::RmsNorm, x, None, w, y, shape, eps)
    }

    /// The decoder layer's residual RMSNorm: `h = x + h` (stored back into `h`; bf16 rounds it there, and
    /// the norm reads the rounded value, as an unfused `h = h + x` then `rmsnorm(h)` would), then `y =
    /// rmsnorm(h) * w`. `x`, `h`, `y`: `[rows, cols]`; `w`: `[cols]`.
    pub fn add_rmsnorm<'b, T: EwElem>(
        &self,
        x: &'b impl Input<T>,
        h: &'b mut impl Output<T>,
        w: &'b impl Input<T>,
        y: &'b mut impl Output<T>,
        shape: Rows,
        eps: f32,
    ) -> Result<EwCall<'b>, EwError> {
        self.plan_rmsnorm::<T>(Op::AddRmsNorm, x, Some(&*h), w, y, shape, eps)
    }

    #[allow(clippy::too_many_arguments)]
    fn plan_rmsnorm<'b, T: EwElem>(
        &self,
        op: Op,
        x: &impl Input<T>,
        h: Option<&dyn Input<T>>,
        w: &impl Input<T>,
        y: &impl Output<T>,
        shape: Rows,
        eps: f32,
    ) -> Result<EwCall<'b>, EwError> {
        let s = EwShape::from(shape);
        if shape.rows == 0 || shape.cols == 0 {
            return Err(ShapeError::ZeroSide { shape: s }.into());
        }
        let n = product(shape.rows, shape.cols);
        hold(s, Operand::X, x.elements(), n)?;
        if let Some(h) = h {
            hold(s, Operand::Residual, h.elements(), n)?;
        }
        hold(s, Operand::W, w.elements(), Some(shape.cols.into()))?;
        hold(s, Operand::Y, y.elements(), n)?;
        let e = size_of::<T>() as u64;
        let h_va = h.map_or(0, |h| h.device_va());
        let mut vas = vec![x.device_va(), w.device_va(), y.device_va()];
        vas.extend(h.map(|h| h.device_va()));
        let vectorized = shape.cols.is_multiple_of(k::VEC[usize::from(T::BF16)]) && aligned16(&vas);
        let warp = match self.rms_form.get() {
            None => self
                .warp_form::<T>(op, shape, vectorized)
                .ok()
                .filter(|_| shape.rows >= RMSNORM_WARP_MIN_ROWS_PER_SM.saturating_mul(self.sms)),
            Some(RmsForm::Block) => None,
            Some(form @ RmsForm::Warp) => match self.warp_form::<T>(op, shape, vectorized) {
                Ok(index) => Some(index),
                Err(why) => return Err(ShapeError::FormUnavailable { form, shape: s, why }.into()),
            },
        };
        let (kernel, block, grid) = match warp {
            Some(index) => {
                let block = k::RMSNORM_WARP_THREADS;
                (index, block, shape.rows.div_ceil(block / 32).min(self.wave(index, block)))
            }
            None => {
                let (index, block) = (kernel_index::<T>(op), rmsnorm_threads::<T>(shape.cols));
                (index, block, shape.rows.min(self.wave(index, block)))
            }
        };
        let passes = if h.is_some() { 4 } else { 2 };
        let info = Info {
            op: Some(op),
            bf16: T::BF16,
            rows: shape.rows,
            cols: shape.cols,
            heads: 1,
            vectorized,
            bytes: n.unwrap_or(0) * e * passes + u64::from(shape.cols) * e,
            ..Info::default()
        };
        let args = vec![
            Arg::Va(x.device_va()),
            Arg::Va(h_va),
            Arg::Va(w.device_va()),
            Arg::Va(y.device_va()),
            Arg::Word(shape.rows),
            Arg::Word(shape.cols),
            Arg::Word(eps.to_bits()),
        ];
        Ok(self.call_kernel(kernel, [grid, 1, 1], block, args, info))
    }

    /// RoPE over `x` `[tokens, heads, dim]` into `y` (the same shape; `y` may be a copy's destination or
    /// `x`'s own buffer through a [`crate::libs::matmul::DeviceSpan`]), with explicit f32 tables `cos`,
    /// `sin` `[tokens, dim / 2]`: row t holds `cos(p_t * theta^(-2i/dim))` and `sin(..)` of token t's
    /// position p_t (the caller builds them for the model's theta). The rotate_half pairing of Qwen and
    /// Hugging Face: element `i` pairs with `i + dim / 2`.
    pub fn rope<'b, T: EwElem>(
        &self,
        x: &'b impl Input<T>,
        cos: &'b impl Input<f32>,
        sin: &'b impl Input<f32>,
        y: &'b mut impl Output<T>,
        shape: Heads,
    ) -> Result<EwCall<'b>, EwError> {
        self.plan_rope::<T>(Op::Rope, x, None, cos, sin, y, shape, 0.0)
    }

    /// Qwen3's QK-norm then RoPE: each head's `dim` values RMS-normalised with the weight `w` `[dim]` (one
    /// weight for every head of the tensor: q_norm's for q, k_norm's for k), then rotated as
    /// [`Elementwise::rope`] does. Call it once for q and once for k.
    #[allow(clippy::too_many_arguments)]
    pub fn norm_rope<'b, T: EwElem>(
        &self,
        x: &'b impl Input<T>,
        w: &'b impl Input<T>,
        cos: &'b impl Input<f32>,
        sin: &'b impl Input<f32>,
        y: &'b mut impl Output<T>,
        shape: Heads,
        eps: f32,
    ) -> Result<EwCall<'b>, EwError> {
        self.plan_rope::<T>(Op::NormRope, x, Some(w), cos, sin, y, shape, eps)
    }

    #[allow(clippy::too_many_arguments)]
    fn plan_rope<'b, T: EwElem>(
        &self,
        op: Op,
        x: &impl Input<T>,
        w: Option<&dyn Input<T>>,
        cos: &impl Input<f32>,
        sin: &impl Input<f32>,
        y: &impl Output<T>,
        shape: Heads,
        eps: f32,
    ) -> Result<EwCall<'b>, EwError> {
        let s = EwShape::from(shape);
        if shape.tokens == 0 || shape.heads == 0 || shape.dim == 0 {
            return Err(ShapeError::ZeroSide { shape: s }.into());
        }
        if !shape.dim.is_multiple_of(2) {
            return Err(ShapeError::OddDim { shape: s }.into());
        }
        let n = product(shape.tokens, shape.heads).and_then(|r| r.checked_mul(shape.dim.into()));
        let table = product(shape.tokens, shape.dim / 2);
        hold(s, Operand::X, x.elements(), n)?;
        if let Some(w) = w {
            hold(s, Operand::W, w.elements(), Some(shape.dim.into()))?;
        }
        hold(s, Operand::Cos, cos.elements(), table)?;
        hold(s, Operand::Sin, sin.elements(), table)?;
        hold(s, Operand::Y, y.elements(), n)?;
        let e = size_of::<T>() as u64;
        let w_va = w.map_or(0, |w| w.device_va());
        let mut vas = vec![x.device_va(), y.device_va(), cos.device_va(), sin.device_va()];
        vas.extend(w.map(|_| w_va));
        let v = k::ROPE_VEC[usize::from(T::BF16)];
        let vectorized = shape.dim.is_multiple_of(2 * v) && aligned16(&vas);
        // The norm form's rows one vector of each half a lane covers take the entry that loads a row's
        // tables with its x (`k::NORM_ROPE_WHOLE`; docs/elementwise.md says what it gained).
        let whole = op == Op::NormRope && vectorized && shape.dim <= k::NORM_ROPE_WHOLE_MAX_VECTORS * v;
        let kernel = if whole { NORM_ROPE_WHOLE_KERNELS[usize::from(T::BF16)] } else { kernel_index::<T>(op) };
        let rows = u64::from(shape.tokens) * u64::from(shape.heads);
        let warps = u64::from(k::EW_THREADS / 32);
        let grid = rows.div_ceil(warps).min(u64::from(self.wave(kernel, k::EW_THREADS))) as u32;
        let info = Info {
            op: Some(op),
            bf16: T::BF16,
            rows: shape.tokens,
            cols: shape.dim,
            heads: shape.heads,
            vectorized,
            bytes: n.unwrap_or(0) * e * 2
                + table.unwrap_or(0) * 8
                + if w.is_some() { u64::from(shape.dim) * e } else { 0 },
            ..Info::default()
        };
        let args = vec![
            Arg::Va(x.device_va()),
            Arg::Va(w_va),
            Arg::Va(cos.device_va()),
            Arg::Va(sin.device_va()),
            Arg::Va(y.device_va()),
            Arg::Word(shape.tokens),
            Arg::Word(shape.heads),
            Arg::Word(shape.dim),
            Arg::Word(eps.to_bits()),
        ];
        Ok(self.call_kernel(kernel, [grid, 1, 1], k::EW_THREADS, args, info))
    }

    /// `y = silu(gate) * up` elementwise over `shape` (`gate`, `up`, `y`: `[rows, cols]`), `silu(g) = g /
    /// (1 + e^-g)`.
    pub fn swiglu<'b, T: EwElem>(
        &self,
        gate: &'b impl Input<T>,
        up: &'b impl Input<T>,
        y: &'b mut impl Output<T>,
        shape: Rows,
    ) -> Result<EwCall<'b>, EwError> {
        let s = EwShape::from(shape);
        let n = product(shape.rows, shape.cols);
        hold(s, Operand::Gate, gate.elements(), n)?;
        hold(s, Operand::Up, up.elements(), n)?;
        let vas = [gate.device_va(), up.device_va(), y.device_va()];
        self.plan_swiglu::<T, T>(Op::SwiGlu, vas, y, shape, shape.cols)
    }

    /// SwiGLU over the fused gate+up projection's output: `gate_up` is `[rows, 2 * cols]`, each row's
    /// `cols` gate values first, then its `cols` up values (a linear layer whose weight stacks gate_proj's
    /// rows over up_proj's); `y[r, c] = silu(gate_up[r, c]) * gate_up[r, cols + c]`, `y` `[rows, cols]`.
    pub fn swiglu_fused<'b, T: EwElem>(
        &self,
        gate_up: &'b impl Input<T>,
        y: &'b mut impl Output<T>,
        shape: Rows,
    ) -> Result<EwCall<'b>, EwError> {
        let ([g, up], stride) = fused_halves(gate_up, shape)?;
        self.plan_swiglu::<T, T>(Op::SwiGluFused, [g, up, y.device_va()], y, shape, stride)
    }

    /// [`Elementwise::swiglu_fused`] from an f32 `gate_up` into a bf16 `y`, each value rounded once
    /// (nearest even): what `swiglu_fused::<f32>` and a cast to bf16 give, in one launch.
    pub fn swiglu_fused_to_bf16<'b>(
        &self,
        gate_up: &'b impl Input<f32>,
        y: &'b mut impl Output<u16>,
        shape: Rows,
    ) -> Result<EwCall<'b>, EwError> {
        let ([g, up], stride) = fused_halves(gate_up, shape)?;
        self.plan_swiglu::<f32, u16>(Op::SwiGluFusedToBf16, [g, up, y.device_va()], y, shape, stride)
    }

    /// SwiGLU reading `T` and writing `Y` (`Info::bf16` says what `y` holds).
    fn plan_swiglu<'b, T: EwElem, Y: EwElem>(
        &self,
        op: Op,
        vas: [u64; 3],
        y: &impl Output<Y>,
        shape: Rows,
        stride: u32,
    ) -> Result<EwCall<'b>, EwError> {
        let s = EwShape::from(shape);
        if shape.rows == 0 || shape.cols == 0 {
            return Err(ShapeError::ZeroSide { shape: s }.into());
        }
        let n = product(shape.rows, shape.cols);
        hold(s, Operand::Y, y.elements(), n)?;
        let vec = k::VEC[usize::from(T::BF16)];
        let chunks = shape.cols.div_ceil(k::EW_THREADS * vec);
        let target = self.wave(kernel_index::<T>(op), k::EW_THREADS);
        let gx = chunks.min(target);
        let gy = shape.rows.min(65_535).min((target / gx).max(1));
        // The kernel's vector path: 16-byte loads, y aligned to its `vec` elements.
        let y_aligned = vas[2].is_multiple_of(u64::from(vec) * size_of::<Y>() as u64);
        let vectorized =
            shape.cols.is_multiple_of(vec) && stride.is_multiple_of(vec) && aligned16(&vas[..2]) && y_aligned;
        let info = Info {
            op: Some(op),
            bf16: Y::BF16,
            rows: shape.rows,
            cols: shape.cols,
            heads: 1,
            vectorized,
            bytes: n.unwrap_or(0) * (2 * size_of::<T>() + size_of::<Y>()) as u64,
            ..Info::default()
        };
        let args = vec![
            Arg::Va(vas[0]),
            Arg::Va(vas[1]),
            Arg::Va(vas[2]),
            Arg::Word(shape.rows),
            Arg::Word(shape.cols),
            Arg::Word(stride),
        ];
        Ok(self.call::<T>(op, [gx, gy, 1], k::EW_THREADS, args, info))
    }

    /// Copies the first `elements` of `src` into `dst` with 16-byte loads and stores (the benchmarks'
    /// bandwidth denominator: a device-to-device copy through Omega of the bytes a kernel moves). The byte
    /// count must be whole 16-byte words and both buffers 16-byte aligned (a misaligned one faults).
    pub fn copy<'b, T: DeviceScalar>(
        &self,
        src: &'b impl Input<T>,
        dst: &'b mut impl Output<T>,
        elements: usize,
    ) -> Result<EwCall<'b>, EwError> {
        let bytes = (elements as u64).saturating_mul(size_of::<T>() as u64);
        let s = EwShape::Bytes { bytes };
        if bytes == 0 || !bytes.is_multiple_of(16) {
            return Err(ShapeError::CopyBytes { bytes }.into());
        }
        hold(s, Operand::Src, src.elements(), Some(elements as u64))?;
        hold(s, Operand::Dst, dst.elements(), Some(elements as u64))?;
        let words = bytes / 16;
        let grid = words.div_ceil(u64::from(k::EW_THREADS)).min(u64::from(self.wave(COPY_KERNEL, k::EW_THREADS)));
        let info = Info {
            op: Some(Op::Copy),
            rows: 1,
            cols: u32::try_from(words).unwrap_or(u32::MAX),
            heads: 1,
            vectorized: true,
            bytes: 2 * bytes,
            ..Info::default()
        };
        let args = vec![
            Arg::Va(src.device_va()),
            Arg::Va(dst.device_va()),
            // `uint64_t n`: one 8-byte parameter.
            Arg::Va(words),
        ];
        Ok(self.call::<f32>(Op::Copy, [grid as u32, 1, 1], k::EW_THREADS, args, info))
    }

    fn call<'b, T: EwElem>(&self, op: Op, grid: [u32; 3], block: u32, args: Vec<Arg>, info: Info) -> EwCall<'b> {
        self.call_kernel(kernel_index::<T>(op), grid, block, args, info)
    }

    fn call_kernel<'b>(&self, kernel: usize, grid: [u32; 3], block: u32, args: Vec<Arg>, mut info: Info) -> EwCall<'b> {
        info.kernel = KERNELS[kernel];
        info.launches = 1;
        info.ctas = grid[0] * grid[1] * grid[2];
        info.block = block;
        EwCall { kernel, grid, block, args, info, _buffers: PhantomData }
    }

    fn launch_of<'k>(&'k self, call: &EwCall<'_>) -> Launch<'k, 's> {
        let elements = call.info.bytes / 2;
        let mut l = Launch::new(&self.kernels[call.kernel])
            .grid(call.grid)
            .block([call.block, 1, 1])
            .timeout_ms(self.timeout_for(elements));
        for a in &call.args {
            l = match *a {
                Arg::Va(v) => l.arg(v),
                Arg::Word(v) => l.arg(v),
            };
        }
        l
    }

    /// Runs `call` (one launch), taking and handing back the scope's token as [`Gpu::launch`] does.
    pub fn launch(&self, gpu: Gpu<'s>, call: EwCall<'_>) -> Result<Done<'s>, Failed<'s>> {
        let start = Instant::now();
        let mut info = call.info;
        match gpu.launch(&self.launch_of(&call)) {
            Ok(done) => {
                info.device_ns = done.elapsed_ns;
                info.host_ns = start.elapsed().as_nanos() as u64;
                Ok(Done { gpu: done.gpu, info })
            }
            Err(e) => {
                let error = EwError::Device(e.error);
                info.stage = Some(error.stage());
                info.host_ns = start.elapsed().as_nanos() as u64;
                Err(Failed { gpu: e.gpu, error, info: Box::new(info) })
            }
        }
    }

    /// Adds `call`'s launch to `list` (nothing runs until the list is submitted); its buffers stay borrowed
    /// for as long as the list can submit them.
    pub fn record<'k>(&'k self, list: &mut CmdListBuilder<'k, 's>, call: EwCall<'k>) -> Result<Info, EwError> {
        let start = Instant::now();
        list.add(&self.launch_of(&call))?;
        Ok(Info { host_ns: start.elapsed().as_nanos() as u64, ..call.info })
    }
}
