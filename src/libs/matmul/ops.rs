//! The typed calls: [`Matmul`], a scope's handle on the `matmul` module and its workspace.

use core::marker::PhantomData;
use std::cell::{Cell, RefCell};
use std::time::Instant;

use crate::cmdlist::CmdListBuilder;
use crate::kernels::matmul::{gemm_tmap_a, gemm_tmap_b_rows, gemm_tmap_y, gemm_tmap_y16};
use crate::tma::{encode_tiled, TiledSpec};
use crate::{Cached, Data, Device, DeviceScalar, Gpu, Kept, KeptModule, Kernel, Launch, Mem, Module, Scope, Stage};

use super::error::{AnyShape, MatmulError, Operand, ShapeError};
use super::plan::{
    self, Arg, DenseOpts, Elem, ForcedPlan, GroupedShape, Path, Plan, Shape, Step, TmaPlan, KERNEL_NAMES,
    TMA_AREA_BYTES, TMA_DESC_BYTES,
};

mod sealed {
    pub trait Sealed {}
}

/// A bf16 element: its bit pattern as `u16` (what C passes) or [`half::bf16`].
pub trait Bf16: DeviceScalar + sealed::Sealed {}
impl sealed::Sealed for u16 {}
impl sealed::Sealed for half::bf16 {}
impl Bf16 for u16 {}
impl Bf16 for half::bf16 {}

/// A buffer the library's kernels read: a device-only, data or GPU-cached buffer of the scope, or a
/// [`DeviceSpan`]. Its first elements are the operand: it may be longer than the shape needs, never
/// shorter.
pub trait Input<T: DeviceScalar>: sealed::Sealed {
    /// GPU address of element 0.
    fn device_va(&self) -> u64;
    /// Elements.
    fn elements(&self) -> usize;
}

/// A buffer the library's kernels write: a device-only or data buffer of the scope, or a [`DeviceSpan`].
pub trait Output<T: DeviceScalar>: Input<T> {}

macro_rules! mem_input {
    ($($kind:ident),*) => {$(
        impl<T: DeviceScalar> sealed::Sealed for Mem<'_, $kind<T>> {}
        impl<T: DeviceScalar> Input<T> for Mem<'_, $kind<T>> {
            fn device_va(&self) -> u64 {
                self.va()
            }
            fn elements(&self) -> usize {
                self.len()
            }
        }
    )*};
}
mem_input!(Device, Data, Cached);
impl<T: DeviceScalar> Output<T> for Mem<'_, Device<T>> {}
impl<T: DeviceScalar> Output<T> for Mem<'_, Data<T>> {}

/// Elements of device memory the caller vouches for: what the C entries over `OmegaGpuMem` hand the
/// library (their buffers are the caller's, not a scope's).
#[derive(Clone, Copy, Debug)]
pub struct DeviceSpan<T: DeviceScalar> {
    va: u64,
    len: usize,
    _elem: PhantomData<T>,
}

impl<T: DeviceScalar> DeviceSpan<T> {
    /// `len` elements of `T` at GPU address `va`.
    ///
    /// # Safety
    /// - `va .. va + len * size_of::<T>()` lies inside one live device buffer of the open session, which
    ///   stays allocated (and, for an output, GPU-writable) for as long as the span is used — the device
    ///   reads or writes it there, and a kernel store to memory the session handed to someone else would
    ///   corrupt it.
    pub unsafe fn new(va: u64, len: usize) -> Self {
        DeviceSpan { va, len, _elem: PhantomData }
    }

    /// Elements `start .. start + len` of this span (`None` past its end): inside the same buffer, so the
    /// constructor's promise covers it.
    pub fn part(&self, start: usize, len: usize) -> Option<Self> {
        let end = start.checked_add(len)?;
        (end <= self.len).then(|| DeviceSpan {
            va: self.va + (start * core::mem::size_of::<T>()) as u64,
            len,
            _elem: PhantomData,
        })
    }
}

impl<T: DeviceScalar> sealed::Sealed for DeviceSpan<T> {}
impl<T: DeviceScalar> Input<T> for DeviceSpan<T> {
    fn device_va(&self) -> u64 {
        self.va
    }
    fn elements(&self) -> usize {
        self.len
    }
}
impl<T: DeviceScalar> Output<T> for DeviceSpan<T> {}

/// What a call ran: the path, the shape, its launches and CTAs, its times and the bytes it moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Info {
    /// The path the planner chose (`None` when the call failed before planning).
    pub path: Option<Path>,
    /// The output is bf16 (the f32 product was converted).
    pub bf16_out: bool,
    /// Rows of x and y (grouped: the output's rows, one per choice).
    pub m: u32,
    /// Columns of y.
    pub n: u32,
    /// Columns of x and W.
    pub k: u32,
    /// Grouped: experts (0 for a dense product).
    pub experts: u32,
    /// Grouped: choices per token.
    pub top_k: u32,
    /// Grouped: tokens.
    pub tokens: u32,
    /// Launches (recorded, for a command-list add).
    pub launches: u32,
    /// CTAs of the largest launch: at most the budget.
    pub ctas: u32,
    /// CTAs of every launch together.
    pub total_ctas: u64,
    /// The CTA budget the plan was made for.
    pub cta_budget: u32,
    /// The K split of the GEMV or of the split-K GEMM (1 otherwise).
    pub split: u32,
    /// The symbol of the product's kernel (its first launch: the GEMM, GEMV or SIMT entry; the grouped
    /// product's router); empty when the call failed before planning.
    pub kernel: &'static str,
    /// Submit to completion of every launch, summed, platform-clock ns (0 for a command-list add).
    pub device_ns: u64,
    /// Wall time of the whole call, ns.
    pub host_ns: u64,
    /// Bytes written from the host to the device (the workspace's descriptors and zeroed tickets; the C
    /// entries add the operands they stage).
    pub h2d_bytes: u64,
    /// Bytes read back to the host (the C entries' staged output).
    pub d2h_bytes: u64,
    /// Bytes of weights the kernels read (grouped: of the most experts the choices can touch).
    pub weight_bytes: u64,
    /// The failing stage (`None` on success).
    pub stage: Option<Stage>,
}

impl Info {
    /// Multiply-adds of the product (`M * N * K`; grouped: one row per choice).
    pub fn macs(&self) -> u64 {
        u64::from(self.m) * u64::from(self.n) * u64::from(self.k)
    }
}

/// A completed call: the launch token back and the call's record.
pub type Done<'s> = crate::libs::call::Done<'s, Info>;

/// A failed call: the token back when the failure was certain, `None` when the process latched.
pub type Failed<'s> = crate::libs::call::Failed<'s, MatmulError, Info>;

impl From<Failed<'_>> for MatmulError {
    fn from(f: Failed<'_>) -> MatmulError {
        f.error
    }
}

/// The library's device workspace: split-K partial sums and f32 products of bf16 outputs, the tickets
/// (zero before and after every launch), the TMA descriptors. Kept buffers, so a
/// [`KeptMatmul`] carries them from one scope to the next; each grows to the largest request and is
/// allocated again when its device open is gone.
#[derive(Debug, Default)]
pub struct Workspace {
    scratch: Option<Kept<Device<f32>>>,
    tickets: Option<Kept<Device<u32>>>,
    tma: Option<Kept<Device<u8>>>,
    /// The descriptors last written to `tma` and how many of their bytes, so unchanged ones are not
    /// written again.
    tma_written: Option<([u8; TMA_AREA_BYTES], usize)>,
}

/// A GEMM plan's TMA descriptors: x's and W's, encoded when the call is planned, and where y's goes
/// (encoded once the workspace says where the f32 product lies: a bf16 output's is in the scratch).
#[derive(Clone, Copy, Debug)]
struct Descriptors {
    ab: [u8; 2 * TMA_DESC_BYTES],
    /// The product's place (`Arg::Y` or `Arg::Scratch`), its `[M, N]` and whether it is bf16 (the
    /// `_y16` entries'; f32 otherwise), for the TMA-store entries.
    y: Option<(Arg, Shape, bool)>,
}

/// The workspace's addresses for one plan.
#[derive(Clone, Copy, Debug, Default)]
struct WorkspaceVas {
    scratch: u64,
    tickets: u64,
    tma: u64,
}

/// `slot`, holding at least `len` elements of the device open of now (allocated again otherwise; zeroed
/// when `zero`), and its address. `moved` counts the bytes written from the host.
fn slot<'s, T: DeviceScalar>(
    scope: &'s Scope<'s>,
    slot: &mut Option<Kept<Device<T>>>,
    len: u64,
    zero: bool,
    moved: &mut u64,
) -> Result<(u64, bool), MatmulError> {
    // A plan's sizes come from u32 sides, well inside usize on the 64-bit targets Omega runs on.
    let len = len.max(1) as usize;
    let fits = slot.as_ref().is_some_and(|k| k.is_current() && k.len() >= len);
    let fresh = !fits;
    if fresh {
        // The old buffer goes first, so a grown one does not need both in memory at once.
        *slot = None;
        let mut m = scope.alloc_device::<T>(len)?;
        if zero {
            m.write(&vec![T::default(); len])?;
            *moved += (len * size_of::<T>()) as u64;
        }
        *slot = Some(scope.keep(m));
    }
    let kept = slot.as_ref().expect("filled above");
    Ok((kept.get(scope)?.va(), fresh))
}

impl Workspace {
    /// The buffers `plan` needs, with `tma` (the descriptors of a GEMM, y's at the output `y_va` or in the
    /// scratch) written.
    fn prepare<'s>(
        &mut self,
        scope: &'s Scope<'s>,
        plan: &Plan,
        tma: Option<&Descriptors>,
        y_va: u64,
        moved: &mut u64,
    ) -> Result<WorkspaceVas, MatmulError> {
        let mut vas = WorkspaceVas::default();
        if plan.scratch > 0 {
            vas.scratch = slot(scope, &mut self.scratch, plan.scratch, false, moved)?.0;
        }
        if plan.tickets > 0 {
            vas.tickets = slot(scope, &mut self.tickets, plan.tickets, true, moved)?.0;
        }
        if let Some(d) = tma {
            let mut area = [0u8; TMA_AREA_BYTES];
            area[..2 * TMA_DESC_BYTES].copy_from_slice(&d.ab);
            let mut len = 2 * TMA_DESC_BYTES;
            if let Some((at, shape, y16)) = d.y {
                let va = match at {
                    Arg::Scratch(off) => vas.scratch + off,
                    Arg::Y(off) => y_va + off,
                    other => unreachable!("y's descriptor points at the product, not at {other:?}"),
                };
                let spec = if y16 { gemm_tmap_y16(va, shape.m, shape.n) } else { gemm_tmap_y(va, shape.m, shape.n) };
                let map = encode_tiled(&spec).map_err(|source| MatmulError::Tma { operand: Operand::Y, source })?;
                area[len..len + TMA_DESC_BYTES].copy_from_slice(&map.0);
                len += TMA_DESC_BYTES;
            }
            let (va, fresh) = slot(scope, &mut self.tma, TMA_AREA_BYTES as u64, false, moved)?;
            // What was written last holds these descriptors when its first `len` bytes are these.
            let holds = self.tma_written.as_ref().is_some_and(|(w, n)| *n >= len && w[..len] == area[..len]);
            if fresh || !holds {
                self.tma_written = None;
                let buf = self.tma.as_mut().expect("filled above").get_mut(scope)?;
                buf.write(&area[..len])?;
                *moved += len as u64;
                self.tma_written = Some((area, len));
            }
            vas.tma = va;
        }
        Ok(vas)
    }
}

/// The GPU addresses of one call's operands.
#[derive(Clone, Copy, Debug, Default)]
struct Operands {
    x: u64,
    w: u64,
    y: u64,
    topk: u64,
    routing: u64,
    /// The fused router's weight, logits and top-k weights (0 for every other product).
    router: [u64; 3],
}

/// The process-wide CTA budget (see [`set_cta_budget`]). A std atomic rather than the crate's `sync`
/// facade: a static needs a const constructor, and the budget is a setting read once per call, in no
/// protocol the loom models check.
static CTA_BUDGET: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(plan::MAX_CTAS);

/// Sets the process-wide CTA budget: every launch of the library has at most this many CTAs (the
/// persistent GEMM's grid, the GEMV's split, the SIMT bands, the grouped GEMV's expert bands). 0 restores
/// the default; values above [`plan::MAX_CTAS`] are taken as it. Applies to the calls that start after it.
pub fn set_cta_budget(ctas: u32) {
    let v = if ctas == 0 { plan::MAX_CTAS } else { ctas.min(plan::MAX_CTAS) };
    CTA_BUDGET.store(v, std::sync::atomic::Ordering::SeqCst);
}

/// The CTA budget in force.
pub fn cta_budget() -> u32 {
    CTA_BUDGET.load(std::sync::atomic::Ordering::SeqCst)
}

/// A matmul library handle of scope `'s`: the `matmul` module loaded once, its kernels, and the workspace.
/// Every call checks the shape against the buffers before anything runs, plans (module docs), and either
/// launches (taking and handing back the scope's [`Gpu`] token, like [`Gpu::launch`]) or adds the launches
/// to a command list.
pub struct Matmul<'s> {
    scope: &'s Scope<'s>,
    module: Module<'s>,
    /// The kernels, in [`KERNEL_NAMES`] order.
    kernels: Vec<Kernel<'s>>,
    sms: u32,
    timeout_ms: Cell<u32>,
    workspace: RefCell<Workspace>,
    /// The plan dense bf16 products take instead of the planner's ([`Matmul::set_forced_plan`]).
    forced: Cell<Option<ForcedPlan>>,
    /// The K split grouped products take instead of the planner's ([`Matmul::set_grouped_split`]).
    grouped_split: Cell<Option<u32>>,
}

impl core::fmt::Debug for Matmul<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Matmul").field("module", &self.module).field("sms", &self.sms).finish()
    }
}

/// A matmul handle kept beyond its scope ([`Matmul::keep`]): the loaded module and the workspace, for
/// [`Matmul::resume`] in a later scope of the same device open (the C entries keep one between calls).
#[derive(Debug)]
pub struct KeptMatmul {
    module: KeptModule,
    workspace: Workspace,
}

impl KeptMatmul {
    /// True while the device open that loaded it is the one open now.
    pub fn is_current(&self) -> bool {
        self.module.is_current()
    }
}

/// Checks that no side is 0 and that `operand` fits `len` elements of `bytes` each.
fn check_operand(shape: AnyShape, operand: Operand, len: usize, bytes: u64) -> Result<(), MatmulError> {
    let dims = operand.dims(shape);
    let needs = dims.elements().filter(|n| n.checked_mul(bytes).is_some_and(|b| b <= i64::MAX as u64));
    let Some(needs) = needs else {
        return Err(ShapeError::Overflow { shape, operand, dims }.into());
    };
    if (len as u64) < needs {
        return Err(ShapeError::Short { operand, len, needs, dims, shape }.into());
    }
    Ok(())
}

/// The TMA descriptors of x and W as the GEMM reads them (the module's specs): boxes of 128 rows of x and
/// `b_rows` rows of W, 64 elements of K.
///
/// Swapped ([`TmaPlan::swapped`]), W's descriptor comes first in the A form (128-row boxes) and x's
/// second in boxes of `b_rows` rows.
fn descriptor_pair(x: u64, w: u64, shape: Shape, t: TmaPlan) -> Result<[u8; 2 * TMA_DESC_BYTES], MatmulError> {
    let encode = |operand, spec: TiledSpec| encode_tiled(&spec).map_err(|source| MatmulError::Tma { operand, source });
    let (a, b) = if t.swapped {
        let w_map = encode(Operand::W, gemm_tmap_a(w, shape.n, shape.k))?;
        (w_map, encode(Operand::X, gemm_tmap_b_rows(x, shape.m, shape.k, t.b_rows))?)
    } else {
        let x_map = encode(Operand::X, gemm_tmap_a(x, shape.m, shape.k))?;
        (x_map, encode(Operand::W, gemm_tmap_b_rows(w, shape.n, shape.k, t.b_rows))?)
    };
    let mut pair = [0u8; 2 * TMA_DESC_BYTES];
    pair[..TMA_DESC_BYTES].copy_from_slice(&a.0);
    pair[TMA_DESC_BYTES..].copy_from_slice(&b.0);
    Ok(pair)
}

/// The shape's and plan's part of an [`Info`].
fn planned(plan: &Plan, info: &mut Info) {
    info.path = Some(plan.path);
    info.launches = plan.steps.len() as u32;
    info.ctas = u32::try_from(plan.max_ctas()).unwrap_or(u32::MAX);
    info.total_ctas = plan.total_ctas();
    info.split = plan.split;
    info.kernel = plan.steps.first().map_or("", |s| KERNEL_NAMES[s.kern.index()]);
}

impl<'s> Matmul<'s> {
    /// Loads the `matmul` module in `scope` (its kernels' host references on the simulator).
    pub fn new(scope: &'s Scope<'s>) -> Result<Self, MatmulError> {
        let module = scope.load_cuda_module("matmul")?;
        Self::with_module(scope, module, Workspace::default())
    }

    fn with_module(scope: &'s Scope<'s>, module: Module<'s>, workspace: Workspace) -> Result<Self, MatmulError> {
        let kernels = KERNEL_NAMES.iter().map(|name| module.kernel(name)).collect::<Result<Vec<_>, _>>()?;
        Ok(Matmul {
            scope,
            module,
            kernels,
            sms: scope.device().sm_count,
            timeout_ms: Cell::new(crate::launch::DEFAULT_TIMEOUT_MS),
            workspace: RefCell::new(workspace),
            forced: Cell::new(None),
            grouped_split: Cell::new(None),
        })
    }

    /// The handle `kept` was, in this scope; or, when there is none or its device open is gone, a fresh
    /// one (the module loaded again).
    pub fn resume(scope: &'s Scope<'s>, kept: Option<KeptMatmul>) -> Result<Self, MatmulError> {
        match kept {
            Some(k) if k.is_current() => {
                let module = k.module.get(scope)?;
                Self::with_module(scope, module, k.workspace)
            }
            // A stale one is forgotten (its memory went with the close that made it stale).
            _ => Self::new(scope),
        }
    }

    /// Keeps the module and the workspace beyond this scope (a command-list add's workspace is the list's:
    /// no list outlives the handle).
    pub fn keep(self) -> KeptMatmul {
        let Matmul { scope, module, workspace, .. } = self;
        KeptMatmul { module: scope.keep_module(module), workspace: workspace.into_inner() }
    }

    /// The completion limit of each launch, ms (the typed launch's default, 5 s, until set). A large
    /// product gets longer: at least 5 s plus 1 ms per million multiply-adds of the whole product, so the
    /// simulator's virtual clock (about 4 million a ms) never runs a correct product out, while a kernel
    /// that hangs on a decode-sized product is still found within seconds.
    pub fn set_timeout_ms(&self, ms: u32) {
        self.timeout_ms.set(ms);
    }

    /// Makes this handle's dense products ([`Matmul::bf16`], [`Matmul::bf16_to_bf16`], [`Matmul::f32`] and
    /// their command-list adds) run `forced` instead of the planner's choice, until set back to `None` (an
    /// f32 product is refused meanwhile: it has one path; grouped products are not dense and keep theirs). For benchmarks: one run times the GEMV against the GEMM, the
    /// wide tile against the narrow one, one split against another. A forced plan the shape cannot take
    /// (its K, the operands' alignment, a split K's granules do not keep or the budget cannot hold) is
    /// refused with [`crate::libs::matmul::PlanError::Forced`], stage `matmul plan`, and nothing runs;
    /// [`Info`] says what ran (`path`, `split`, `ctas`).
    pub fn set_forced_plan(&self, forced: Option<ForcedPlan>) {
        self.forced.set(forced);
    }

    /// Makes this handle's grouped products ([`Matmul::grouped_bf16`], [`Matmul::grouped_routed_bf16`]
    /// and their adds) split K into `split` slices instead of the planner's choice, until set back to
    /// `None`. For benchmarks (a decode step timed at each split); a split K's 32-element chunks or the
    /// budget cannot make is refused with [`crate::libs::matmul::PlanError::GroupedSplit`], stage `matmul
    /// plan`, and nothing runs.
    pub fn set_grouped_split(&self, split: Option<u32>) {
        self.grouped_split.set(split);
    }

    /// The forced plan in effect ([`Matmul::set_forced_plan`]).
    pub fn forced_plan(&self) -> Option<ForcedPlan> {
        self.forced.get()
    }

    /// The completion limit of each launch of a product of `macs` multiply-adds.
    fn timeout_for(&self, macs: u64) -> u32 {
        let scaled = u64::from(crate::launch::DEFAULT_TIMEOUT_MS).saturating_add(macs / 1_000_000);
        self.timeout_ms.get().max(u32::try_from(scaled).unwrap_or(u32::MAX))
    }

    /// `y[M, N] = x[M, K] . W[N, K]^T` with bf16 operands and f32 accumulation into an f32 output (every
    /// buffer row-major; W as a linear layer stores it). Any shape with sides of at least 1.
    pub fn bf16<B: Bf16>(
        &self,
        gpu: Gpu<'s>,
        x: &impl Input<B>,
        w: &impl Input<B>,
        y: &mut impl Output<f32>,
        shape: Shape,
    ) -> Result<Done<'s>, Failed<'s>> {
        let start = Instant::now();
        let prepared =
            self.prepare_dense(DenseKind::Product(Elem::Bf16), x, w, y.device_va(), y.elements(), shape, false);
        self.run(gpu, prepared, start)
    }

    /// As [`Matmul::bf16`], the f32 product rounded to a bf16 output (nearest even; the product goes
    /// through the workspace).
    pub fn bf16_to_bf16<B: Bf16>(
        &self,
        gpu: Gpu<'s>,
        x: &impl Input<B>,
        w: &impl Input<B>,
        y: &mut impl Output<B>,
        shape: Shape,
    ) -> Result<Done<'s>, Failed<'s>> {
        let start = Instant::now();
        let prepared =
            self.prepare_dense(DenseKind::Product(Elem::Bf16), x, w, y.device_va(), y.elements(), shape, true);
        self.run(gpu, prepared, start)
    }

    /// The gate+up projection and its SwiGLU in one launch: `y[m, j] = silu(x[m] . W[j]) * (x[m] . W[N +
    /// j])`, `silu(g) = g / (1 + e^-g)`, for x `[M, K]` and the fused gate+up weight W `[2N, K]` (the N
    /// gate rows first, then the N up rows) bf16, y `[M, N]` f32 (`shape` is y's `M, N` and x's `K`). The
    /// products accumulate in f32 and never leave the SM: no `[M, 2N]` product is written or read again.
    /// Runs where the SwiGLU GEMM can (K % 8 == 0, N % 4 == 0, x, W and y 16-byte aligned), else refused
    /// with [`crate::libs::matmul::PlanError::Swiglu`] (stage `matmul plan`) and nothing runs. Forced
    /// plans ([`Matmul::set_forced_plan`]) do not apply: the width is the planner's.
    pub fn swiglu_bf16<B: Bf16>(
        &self,
        gpu: Gpu<'s>,
        x: &impl Input<B>,
        w: &impl Input<B>,
        y: &mut impl Output<f32>,
        shape: Shape,
    ) -> Result<Done<'s>, Failed<'s>> {
        let start = Instant::now();
        let prepared = self.prepare_dense(DenseKind::Swiglu, x, w, y.device_va(), y.elements(), shape, false);
        self.run(gpu, prepared, start)
    }

    /// As [`Matmul::swiglu_bf16`] into a bf16 y, each value rounded to nearest even (`cvt.rn`; N % 8 ==
    /// 0).
    pub fn swiglu_bf16_to_bf16<B: Bf16>(
        &self,
        gpu: Gpu<'s>,
        x: &impl Input<B>,
        w: &impl Input<B>,
        y: &mut impl Output<B>,
        shape: Shape,
    ) -> Result<Done<'s>, Failed<'s>> {
        let start = Instant::now();
        let prepared = self.prepare_dense(DenseKind::Swiglu, x, w, y.device_va(), y.elements(), shape, true);
        self.run(gpu, prepared, start)
    }

    /// Adds the launch of [`Matmul::swiglu_bf16`] to `list`.
    pub fn add_swiglu_bf16<'k, B: Bf16>(
        &'k self,
        list: &mut CmdListBuilder<'k, 's>,
        x: &'k impl Input<B>,
        w: &'k impl Input<B>,
        y: &'k impl Output<f32>,
        shape: Shape,
    ) -> Result<Info, MatmulError> {
        let start = Instant::now();
        let prepared = self.prepare_dense(DenseKind::Swiglu, x, w, y.device_va(), y.elements(), shape, false);
        self.record(list, prepared, start)
    }

    /// Adds the launch of [`Matmul::swiglu_bf16_to_bf16`] to `list`.
    pub fn add_swiglu_bf16_to_bf16<'k, B: Bf16>(
        &'k self,
        list: &mut CmdListBuilder<'k, 's>,
        x: &'k impl Input<B>,
        w: &'k impl Input<B>,
        y: &'k impl Output<B>,
        shape: Shape,
    ) -> Result<Info, MatmulError> {
        let start = Instant::now();
        let prepared = self.prepare_dense(DenseKind::Swiglu, x, w, y.device_va(), y.elements(), shape, true);
        self.record(list, prepared, start)
    }

    /// `y = x . W^T` in f32 (f32 FMA, no TF32), any shape.
    pub fn f32(
        &self,
        gpu: Gpu<'s>,
        x: &impl Input<f32>,
        w: &impl Input<f32>,
        y: &mut impl Output<f32>,
        shape: Shape,
    ) -> Result<Done<'s>, Failed<'s>> {
        let start = Instant::now();
        let prepared =
            self.prepare_dense(DenseKind::Product(Elem::F32), x, w, y.device_va(), y.elements(), shape, false);
        self.run(gpu, prepared, start)
    }

    /// The grouped expert GEMM: x `[tokens, K]`, the experts' weights `[experts, N, K]`, the top-k choices
    /// `topk[t * top_k + j]` (u32, in device memory). The device routes the choices into `routing`
    /// ([`GroupedShape::routing`]: per-expert offsets, each slot's token and choice index, the count of
    /// choices naming no expert, the list of touched experts) and ONE launch over that list computes one
    /// output row per slot, `y[slot, :] = x[rows[slot], :] .
    /// W[e]^T`, in the routing's slot order (`pairs[slot]` says which choice a row is). Nothing of the
    /// routing returns to the host. Rows of slots that a dropped choice left empty are not written.
    #[allow(clippy::too_many_arguments)]
    pub fn grouped_bf16<B: Bf16>(
        &self,
        gpu: Gpu<'s>,
        x: &impl Input<B>,
        w: &impl Input<B>,
        topk: &impl Input<u32>,
        routing: &mut impl Output<u32>,
        y: &mut impl Output<f32>,
        shape: GroupedShape,
    ) -> Result<Done<'s>, Failed<'s>> {
        let start = Instant::now();
        let route = Route::Fresh { topk: (topk.device_va(), topk.elements()) };
        let routing = (routing.device_va(), routing.elements());
        let prepared = self.prepare_grouped(x, w, route, routing, (y.device_va(), y.elements()), shape);
        self.run(gpu, prepared, start)
    }

    /// Adds the launches of [`Matmul::bf16`] to `list` (nothing runs until it is submitted); the buffers
    /// stay borrowed for as long as the list can submit them, and the add's workspace is its own.
    pub fn add_bf16<'k, B: Bf16>(
        &'k self,
        list: &mut CmdListBuilder<'k, 's>,
        x: &'k impl Input<B>,
        w: &'k impl Input<B>,
        y: &'k impl Output<f32>,
        shape: Shape,
    ) -> Result<Info, MatmulError> {
        let start = Instant::now();
        let prepared =
            self.prepare_dense(DenseKind::Product(Elem::Bf16), x, w, y.device_va(), y.elements(), shape, false);
        self.record(list, prepared, start)
    }

    /// Adds the launches of [`Matmul::bf16_to_bf16`] to `list`.
    pub fn add_bf16_to_bf16<'k, B: Bf16>(
        &'k self,
        list: &mut CmdListBuilder<'k, 's>,
        x: &'k impl Input<B>,
        w: &'k impl Input<B>,
        y: &'k impl Output<B>,
        shape: Shape,
    ) -> Result<Info, MatmulError> {
        let start = Instant::now();
        let prepared =
            self.prepare_dense(DenseKind::Product(Elem::Bf16), x, w, y.device_va(), y.elements(), shape, true);
        self.record(list, prepared, start)
    }

    /// Adds the launches of [`Matmul::f32`] to `list`.
    pub fn add_f32<'k>(
        &'k self,
        list: &mut CmdListBuilder<'k, 's>,
        x: &'k impl Input<f32>,
        w: &'k impl Input<f32>,
        y: &'k impl Output<f32>,
        shape: Shape,
    ) -> Result<Info, MatmulError> {
        let start = Instant::now();
        let prepared =
            self.prepare_dense(DenseKind::Product(Elem::F32), x, w, y.device_va(), y.elements(), shape, false);
        self.record(list, prepared, start)
    }

    /// Adds the launches of [`Matmul::grouped_bf16`] to `list`: each submission routes afresh (the route
    /// kernel stores every part of the routing, the drop count included, so nothing needs zeroing).
    #[allow(clippy::too_many_arguments)]
    pub fn add_grouped_bf16<'k, B: Bf16>(
        &'k self,
        list: &mut CmdListBuilder<'k, 's>,
        x: &'k impl Input<B>,
        w: &'k impl Input<B>,
        topk: &'k impl Input<u32>,
        routing: &'k impl Output<u32>,
        y: &'k impl Output<f32>,
        shape: GroupedShape,
    ) -> Result<Info, MatmulError> {
        let start = Instant::now();
        let route = Route::Fresh { topk: (topk.device_va(), topk.elements()) };
        let routing = (routing.device_va(), routing.elements());
        let prepared = self.prepare_grouped(x, w, route, routing, (y.device_va(), y.elements()), shape);
        self.record(list, prepared, start)
    }

    /// Adds a grouped product routed by its router to `list`: one launch computes the router's logits
    /// `logits = x . router_w^T` (f32 `[tokens, experts]`, `router_w` bf16 `[experts, K]`), each token's
    /// top k experts and their softmax weights renormalised over the k (`topk`, `weights`
    /// `[tokens, top_k]`, as [`crate::libs::decoder::Decoder::router_topk`] writes them, the lower expert
    /// first on a tie) and the routing of [`Matmul::add_grouped_bf16`]; then the same grouped launch.
    /// Where a router product, a top-k launch and this product's route launch took three launches, this
    /// takes one. Needs `top_k <= 8` and x and `router_w` 16-byte aligned.
    #[allow(clippy::too_many_arguments)]
    pub fn add_grouped_bf16_from_router<'k, B: Bf16>(
        &'k self,
        list: &mut CmdListBuilder<'k, 's>,
        x: &'k impl Input<B>,
        router: RouterOperands<'k, B>,
        w: &'k impl Input<B>,
        routing: &'k impl Output<u32>,
        y: &'k impl Output<f32>,
        shape: GroupedShape,
    ) -> Result<Info, MatmulError> {
        let start = Instant::now();
        let RouterOperands { w: rw, logits, topk, weights } = router;
        let route = Route::Router {
            w: (rw.device_va(), rw.elements()),
            logits: (logits.device_va(), logits.elements()),
            topk: (topk.device_va(), topk.elements()),
            weights: (weights.device_va(), weights.elements()),
        };
        let routing = (routing.device_va(), routing.elements());
        let prepared = self.prepare_grouped(x, w, route, routing, (y.device_va(), y.elements()), shape);
        self.record(list, prepared, start)
    }

    /// The grouped product over an EXISTING routing (no route kernel): `routing` is what an earlier
    /// [`Matmul::grouped_bf16`] of the same `shape` (tokens, top_k, experts) wrote, and x holds one row
    /// per SLOT (`[tokens * top_k, K]`, in that routing's slot order: e.g. the SwiGLU of the gate+up
    /// product's rows), so `y[slot, :] = x[slot, :] . W[e]^T` for every filled slot `slot` of expert `e`.
    /// This is a mixture-of-experts down projection; y keeps the slot order the combine reads.
    pub fn grouped_routed_bf16<B: Bf16>(
        &self,
        gpu: Gpu<'s>,
        x: &impl Input<B>,
        w: &impl Input<B>,
        routing: &impl Input<u32>,
        y: &mut impl Output<f32>,
        shape: GroupedShape,
    ) -> Result<Done<'s>, Failed<'s>> {
        let start = Instant::now();
        let routing = (routing.device_va(), routing.elements());
        let prepared = self.prepare_grouped(x, w, Route::Existing, routing, (y.device_va(), y.elements()), shape);
        self.run(gpu, prepared, start)
    }

    /// Adds the launch of [`Matmul::grouped_routed_bf16`] to `list`, after the grouped product whose
    /// routing it reads.
    pub fn add_grouped_routed_bf16<'k, B: Bf16>(
        &'k self,
        list: &mut CmdListBuilder<'k, 's>,
        x: &'k impl Input<B>,
        w: &'k impl Input<B>,
        routing: &'k impl Input<u32>,
        y: &'k impl Output<f32>,
        shape: GroupedShape,
    ) -> Result<Info, MatmulError> {
        let start = Instant::now();
        let routing = (routing.device_va(), routing.elements());
        let prepared = self.prepare_grouped(x, w, Route::Existing, routing, (y.device_va(), y.elements()), shape);
        self.record(list, prepared, start)
    }

    /// Checks a dense call and plans it.
    #[allow(clippy::too_many_arguments)]
    fn prepare_dense<T: DeviceScalar>(
        &self,
        kind: DenseKind,
        x: &impl Input<T>,
        w: &impl Input<T>,
        y_va: u64,
        y_len: usize,
        shape: Shape,
        out_bf16: bool,
    ) -> Prepared {
        let budget = cta_budget();
        let mut info =
            Info { bf16_out: out_bf16, m: shape.m, n: shape.n, k: shape.k, cta_budget: budget, ..Info::default() };
        let any = match kind {
            DenseKind::Product(_) => AnyShape::Dense(shape),
            DenseKind::Swiglu => AnyShape::Swiglu(shape),
        };
        let e = size_of::<T>() as u64;
        let checked = (|| {
            if shape.m == 0 || shape.n == 0 || shape.k == 0 {
                return Err(MatmulError::from(ShapeError::ZeroSide { shape: any }));
            }
            check_operand(any, Operand::X, x.elements(), e)?;
            check_operand(any, Operand::W, w.elements(), e)?;
            check_operand(any, Operand::Y, y_len, if out_bf16 { 2 } else { 4 })?;
            let aligned = x.device_va().is_multiple_of(16) && w.device_va().is_multiple_of(16);
            let (y_aligned, y_aligned16) = (y_va.is_multiple_of(8), y_va.is_multiple_of(16));
            let opts = DenseOpts { sms: self.sms, budget, out_bf16, aligned, y_aligned, y_aligned16 };
            // W's rows as its descriptor spans them: the SwiGLU's fused weight holds both halves, 2N.
            let (plan, w_rows) = match kind {
                DenseKind::Product(elem) => match self.forced.get() {
                    Some(forced) => (plan::dense_forced(elem, shape, opts, forced)?, shape.n),
                    None => (plan::dense(elem, shape, opts), shape.n),
                },
                DenseKind::Swiglu => {
                    let Some(rows) = shape.n.checked_mul(2) else {
                        let operand = Operand::W;
                        return Err(ShapeError::Overflow { shape: any, operand, dims: operand.dims(any) }.into());
                    };
                    (plan::swiglu(shape, opts)?, rows)
                }
            };
            let w_shape = Shape::new(shape.m, w_rows, shape.k);
            let tma = match plan.tma {
                Some(t) => Some(Descriptors {
                    ab: descriptor_pair(x.device_va(), w.device_va(), w_shape, t)?,
                    y: t.y.map(|at| (at, shape, t.y16)),
                }),
                None => None,
            };
            Ok((plan, tma))
        })();
        let ops = Operands { x: x.device_va(), w: w.device_va(), y: y_va, ..Operands::default() };
        info.weight_bytes = Operand::W.dims(any).elements().unwrap_or(u64::MAX).saturating_mul(e);
        Prepared::new(checked, ops, info)
    }

    /// Checks a grouped product and plans it.
    fn prepare_grouped<B: Bf16>(
        &self,
        x: &impl Input<B>,
        w: &impl Input<B>,
        route: Route,
        (routing_va, routing_len): (u64, usize),
        (y_va, y_len): (u64, usize),
        shape: GroupedShape,
    ) -> Prepared {
        let budget = cta_budget();
        let mut info = Info {
            m: u32::try_from(shape.choices()).unwrap_or(u32::MAX),
            n: shape.n,
            k: shape.k,
            experts: shape.experts,
            top_k: shape.top_k,
            tokens: shape.tokens,
            cta_budget: budget,
            ..Info::default()
        };
        let any = AnyShape::Grouped(shape);
        let checked = (|| {
            let g = shape;
            if g.tokens == 0 || g.top_k == 0 || g.experts == 0 || g.n == 0 || g.k == 0 {
                return Err(MatmulError::from(ShapeError::ZeroSide { shape: any }));
            }
            if !g.k.is_multiple_of(32) {
                return Err(ShapeError::GroupedK { shape: g }.into());
            }
            if g.choices() > u64::from(u32::MAX) {
                let operand = Operand::TopK;
                return Err(ShapeError::Overflow { shape: any, operand, dims: operand.dims(any) }.into());
            }
            check_operand(any, Operand::W, w.elements(), 2)?;
            check_operand(any, Operand::Routing, routing_len, 4)?;
            check_operand(any, Operand::Y, y_len, 4)?;
            let routing = match route {
                Route::Fresh { topk: (_, topk_len) } => {
                    check_operand(any, Operand::X, x.elements(), 2)?;
                    check_operand(any, Operand::TopK, topk_len, 4)?;
                    plan::Routing::Route
                }
                Route::Router { w: (w_va, w_len), logits, topk, weights } => {
                    if g.top_k > crate::kernels::decoder::TOPK_MAX || g.top_k > g.experts {
                        return Err(ShapeError::RouterTopK { shape: g }.into());
                    }
                    check_operand(any, Operand::X, x.elements(), 2)?;
                    check_operand(any, Operand::RouterW, w_len, 2)?;
                    check_operand(any, Operand::Logits, logits.1, 4)?;
                    check_operand(any, Operand::TopK, topk.1, 4)?;
                    check_operand(any, Operand::TopKWeights, weights.1, 4)?;
                    if !x.device_va().is_multiple_of(16) || !w_va.is_multiple_of(16) {
                        return Err(ShapeError::RouterAlignment { shape: g }.into());
                    }
                    plan::Routing::Router
                }
                Route::Existing => {
                    check_operand(any, Operand::SlotX, x.elements(), 2)?;
                    plan::Routing::Existing
                }
            };
            Ok((plan::grouped(g, self.sms, budget, routing, self.grouped_split.get())?, None))
        })();
        let (topk, router) = match route {
            Route::Fresh { topk: (va, _) } => (va, [0; 3]),
            Route::Router { w, logits, topk, weights } => (topk.0, [w.0, logits.0, weights.0]),
            Route::Existing => (0, [0; 3]),
        };
        let ops = Operands { x: x.device_va(), w: w.device_va(), y: y_va, topk, routing: routing_va, router };
        let touched = u64::from(shape.experts).min(shape.choices());
        info.weight_bytes = touched * u64::from(shape.n) * u64::from(shape.k) * 2;
        Prepared::new(checked, ops, info)
    }

    /// The launch of `step` of a product of `macs` multiply-adds, its arguments resolved.
    fn launch_of(&self, step: &Step, ops: &Operands, ws: &WorkspaceVas, macs: u64) -> Launch<'_, 's> {
        let mut l = Launch::new(&self.kernels[step.kern.index()])
            .grid(step.grid)
            .block(step.block)
            .dynamic_shared(step.dynamic_shared)
            .timeout_ms(self.timeout_for(macs));
        for a in &step.args {
            l = match *a {
                Arg::X(off) => l.arg(ops.x + off),
                Arg::W(off) => l.arg(ops.w + off),
                Arg::Y(off) => l.arg(ops.y + off),
                Arg::Scratch(off) => l.arg(ws.scratch + off),
                Arg::Tickets(off) => l.arg(ws.tickets + off),
                Arg::Tma(off) => l.arg(ws.tma + off),
                Arg::TopK => l.arg(ops.topk),
                Arg::Router(which) => l.arg(ops.router[which as usize]),
                Arg::Routing(off) => l.arg(ops.routing + off),
                Arg::Word(v) => l.arg(v),
                Arg::Wide(v) => l.arg(v),
            };
        }
        l
    }

    fn run(&self, gpu: Gpu<'s>, prepared: Prepared, start: Instant) -> Result<Done<'s>, Failed<'s>> {
        let Prepared { checked, ops, mut info } = prepared;
        let fail = |gpu, error: MatmulError, mut info: Info| {
            info.stage = Some(error.stage());
            info.host_ns = start.elapsed().as_nanos() as u64;
            Err(Failed { gpu, error, info: Box::new(info) })
        };
        let (plan, tma) = match checked {
            Ok(p) => p,
            Err(e) => return fail(Some(gpu), e, info),
        };
        planned(&plan, &mut info);
        let vas = {
            let mut ws = self.workspace.borrow_mut();
            match ws.prepare(self.scope, &plan, tma.as_ref(), ops.y, &mut info.h2d_bytes) {
                Ok(v) => v,
                Err(e) => return fail(Some(gpu), e, info),
            }
        };
        let mut gpu = gpu;
        for step in &plan.steps {
            match gpu.launch(&self.launch_of(step, &ops, &vas, info.macs())) {
                Ok(done) => {
                    info.device_ns += done.elapsed_ns;
                    gpu = done.gpu;
                }
                Err(e) => return fail(e.gpu, MatmulError::Device(e.error), info),
            }
        }
        info.host_ns = start.elapsed().as_nanos() as u64;
        Ok(Done { gpu, info })
    }

    fn record<'k>(
        &'k self,
        list: &mut CmdListBuilder<'k, 's>,
        prepared: Prepared,
        start: Instant,
    ) -> Result<Info, MatmulError> {
        let Prepared { checked, ops, mut info } = prepared;
        let (plan, tma) = checked?;
        planned(&plan, &mut info);
        // Each add has its own workspace (a list may run its launches out of order where they are marked
        // independent), held by the list: a handle recording many lists does not keep every list's
        // scratch. Held before the launches are added, so that even a list that kept some of them before
        // refusing the next never names a workspace that is gone.
        let mut ws = Workspace::default();
        let vas = ws.prepare(self.scope, &plan, tma.as_ref(), ops.y, &mut info.h2d_bytes)?;
        list.hold(ws);
        for step in &plan.steps {
            list.add(&self.launch_of(step, &ops, &vas, info.macs()))?;
        }
        info.host_ns = start.elapsed().as_nanos() as u64;
        Ok(info)
    }
}

/// What a dense call computes: a product of `Elem` operands, or the gate+up product's SwiGLU (bf16 x and
/// the fused weight `[2N, K]`).
#[derive(Clone, Copy)]
enum DenseKind {
    Product(Elem),
    Swiglu,
}

/// Where a grouped product's routing comes from.
#[derive(Clone, Copy)]
enum Route {
    /// Routed by the product itself from the top-k choices (address, elements).
    Fresh { topk: (u64, usize) },
    /// Routed by the fused router from x: its weight, the logits, choices and top-k weights it stores
    /// (address, elements each).
    Router { w: (u64, usize), logits: (u64, usize), topk: (u64, usize), weights: (u64, usize) },
    /// An earlier product's routing, x one row per slot.
    Existing,
}

/// The router's operands of [`Matmul::add_grouped_bf16_from_router`]: its weight (read) and what it
/// stores (the logits, the top-k choices and their weights), borrowed for the list's life.
pub struct RouterOperands<'k, B: Bf16> {
    /// The router weight, bf16 `[experts, K]`.
    pub w: &'k dyn Input<B>,
    /// The f32 logits `[tokens, experts]`.
    pub logits: &'k dyn Output<f32>,
    /// The u32 top-k choices `[tokens, top_k]`.
    pub topk: &'k dyn Output<u32>,
    /// The f32 top-k weights `[tokens, top_k]`.
    pub weights: &'k dyn Output<f32>,
}

/// A checked and planned call (or why it cannot run), its operands' addresses and its info so far.
struct Prepared {
    checked: Result<(Plan, Option<Descriptors>), MatmulError>,
    ops: Operands,
    info: Info,
}

impl Prepared {
    fn new(checked: Result<(Plan, Option<Descriptors>), MatmulError>, ops: Operands, info: Info) -> Self {
        Prepared { checked, ops, info }
    }
}
