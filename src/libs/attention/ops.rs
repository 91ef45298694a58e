//! The typed calls: [`Attention`], a scope's handle on the `attention` module and its workspace.

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};
use std::time::Instant;

use crate::cmdlist::CmdListBuilder;
use crate::kernels::attention::{
    self as k, decode_entry, decode_smem_bytes, DecodeForm, APPEND_ADVANCE, APPEND_F32, APPEND_THREADS, COMBINE,
    COMBINE_THREADS, DECODE_MAX_GROUP, DECODE_THREADS, FLAG_OUT_BF16, FLAG_Q_BF16, GQA_F32, GQA_THREADS, KV_APPEND,
    PAGED_DECODE, QKV_APPEND, QKV_APPEND_THREADS,
};
use crate::libs::matmul::{Input, Output};
use crate::{Device, DeviceScalar, Gpu, Kept, KeptModule, Kernel, Launch, Module, Scope, Stage};

use super::error::{AttentionError, Operand, ShapeError, TableDetail};
use super::plan::{self, AppendShape, DecodePlan, DecodeShape, GqaShape, KvLayout, QkvAppendShape, Split, Submission};

mod sealed {
    pub trait Sealed {}
}

/// An element of queries, outputs and new K/V rows: f32, or bf16 as its bit pattern (`u16`, what C passes)
/// or [`half::bf16`].
pub trait Elem: DeviceScalar + sealed::Sealed {
    /// True for the bf16 types.
    const BF16: bool;
}
impl sealed::Sealed for f32 {}
impl sealed::Sealed for u16 {}
impl sealed::Sealed for half::bf16 {}
impl Elem for f32 {
    const BF16: bool = false;
}
impl Elem for u16 {
    const BF16: bool = true;
}
impl Elem for half::bf16 {
    const BF16: bool = true;
}

/// Which kernels a call ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Kind {
    /// Dense GQA in f32 (`omega_gqa_attention_f32`).
    Gqa = 1,
    /// Paged decode (`omega_paged_decode_bf16_d*` and `omega_attn_combine`).
    Decode = 2,
    /// The K/V append (`omega_kv_append_bf16`).
    Append = 3,
    /// The fused QK-norm + RoPE + append (`omega_qkv_rope_append_bf16`; Rust only, no C entry runs it).
    QkvAppend = 4,
}

/// What a call ran: its kind, its shape, its split, its launches, its times and the bytes it moved.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Info {
    /// The kernels (`None` when the call failed before planning).
    pub kind: Option<Kind>,
    /// Sequences (1 for a dense call).
    pub batch: u32,
    /// Query heads.
    pub q_heads: u32,
    /// KV heads.
    pub kv_heads: u32,
    /// Elements per head.
    pub head_dim: u32,
    /// Keys: the dense call's kv_len; a decode's table capacity (`max_pages * page_tokens`).
    pub kv_len: u32,
    /// Query rows per sequence.
    pub q_rows: u32,
    /// Tokens per page (0 for a dense call).
    pub page_tokens: u32,
    /// The decode's KV splits (1 otherwise).
    pub splits: u32,
    /// 16-token tiles per split.
    pub tiles_per_split: u32,
    /// The decode kernel's pipeline stages a warp (0 otherwise).
    pub stages: u32,
    /// Launches.
    pub launches: u32,
    /// CTAs of the largest launch.
    pub ctas: u32,
    /// The kernels' status bits after the call (`STATUS_*`; 0 when the tables were sound, and for a
    /// command-list add).
    pub status: u32,
    /// Bytes of K and V the kernels read at most (a decode: the tables' capacity; the C entries with
    /// host-visible lengths say the exact bytes).
    pub kv_bytes: u64,
    /// Submit to completion of every launch, summed, platform-clock ns (0 for a command-list add).
    pub device_ns: u64,
    /// Wall time of the whole call, ns.
    pub host_ns: u64,
    /// Bytes written from the host to the device (the cleared status word; the C entries add what they
    /// stage).
    pub h2d_bytes: u64,
    /// Bytes read back to the host (the status word; the C entries add the staged output).
    pub d2h_bytes: u64,
    /// The failing stage (`None` on success).
    pub stage: Option<Stage>,
}

/// A completed call: the launch token back and the call's record.
pub type Done<'s> = crate::libs::call::Done<'s, Info>;

/// A failed call: the token back when the failure was certain, `None` when the process latched.
pub type Failed<'s> = crate::libs::call::Failed<'s, AttentionError, Info>;

impl From<Failed<'_>> for AttentionError {
    fn from(f: Failed<'_>) -> AttentionError {
        f.error
    }
}

/// The library's device workspace: the decode splits' partial outputs and log-sum-exps, the ticket form's
/// counters (one a (sequence, KV head), zero between launches: written zero when allocated, and each
/// launch's last CTAs put them back), and the status word the kernels flag untrusted tables in. Kept
/// buffers, so [`KeptAttention`] carries them from one scope to the next; each grows to the largest
/// request.
#[derive(Debug, Default)]
pub struct Workspace {
    part_o: Option<Kept<Device<f32>>>,
    part_lse: Option<Kept<Device<f32>>>,
    tickets: Option<Kept<Device<u32>>>,
    status: Option<Kept<Device<u32>>>,
}

/// The workspace's addresses for one call.
#[derive(Clone, Copy, Debug, Default)]
struct Vas {
    part_o: u64,
    part_lse: u64,
    tickets: u64,
    status: u64,
}

/// `slot`, holding at least `len` elements of the device open of now (allocated again otherwise; written
/// zero when `zero`, its bytes counted in `moved`), and its address.
fn slot<'s, T: DeviceScalar>(
    scope: &'s Scope<'s>,
    slot: &mut Option<Kept<Device<T>>>,
    len: u64,
    zero: bool,
    moved: &mut u64,
) -> Result<u64, AttentionError> {
    // Sizes come from u32 sides, well inside usize on the 64-bit targets Omega runs on.
    let len = len.max(1) as usize;
    if !slot.as_ref().is_some_and(|k| k.is_current() && k.len() >= len) {
        // The old buffer goes first, so a grown one does not need both in memory at once.
        *slot = None;
        let mut m = scope.alloc_device::<T>(len)?;
        if zero {
            m.write(&vec![T::default(); len])?;
            *moved += (len * size_of::<T>()) as u64;
        }
        *slot = Some(scope.keep(m));
    }
    Ok(slot.as_ref().expect("filled above").get(scope)?.va())
}

impl Workspace {
    /// The buffers a call of `plan.partials` partial rows of `plan.head_dim` and `plan.tickets` counters
    /// needs, the status word cleared.
    fn prepare<'s>(&mut self, scope: &'s Scope<'s>, plan: &Plan, moved: &mut u64) -> Result<Vas, AttentionError> {
        let part_o = slot(scope, &mut self.part_o, plan.partials * u64::from(plan.head_dim), false, moved)?;
        let part_lse = slot(scope, &mut self.part_lse, plan.partials, false, moved)?;
        // Only the ticket form reads counters; other calls allocate and zero none.
        let tickets = if plan.tickets == 0 { 0 } else { slot(scope, &mut self.tickets, plan.tickets, true, moved)? };
        let status = slot(scope, &mut self.status, 1, false, moved)?;
        self.status.as_mut().expect("filled above").get_mut(scope)?.write(&[0])?;
        *moved += 4;
        Ok(Vas { part_o, part_lse, tickets, status })
    }

    /// The status word the kernels left (0 when none was allocated).
    fn status<'s>(&mut self, scope: &'s Scope<'s>) -> Result<u32, AttentionError> {
        let Some(s) = self.status.as_mut() else { return Ok(0) };
        let mut w = [0u32];
        s.get_mut(scope)?.read(&mut w)?;
        Ok(w[0])
    }
}

/// One launch argument, resolved once the workspace is placed.
#[derive(Clone, Copy, Debug)]
enum Arg {
    Va(u64),
    PartO,
    PartLse,
    Tickets,
    Status,
    Word(u32),
    Wide(u64),
}

/// One launch of a call.
#[derive(Clone, Debug)]
struct Step {
    kernel: usize,
    grid: [u32; 3],
    /// CTAs a cluster (`[1, 1, 1]`: none).
    cluster: [u32; 3],
    block: u32,
    smem: u32,
    args: Vec<Arg>,
}

/// A checked and planned call: its launches, the partial rows and ticket counters its workspace needs,
/// its head dim.
#[derive(Debug)]
struct Plan {
    steps: Vec<Step>,
    partials: u64,
    tickets: u64,
    head_dim: u32,
    /// Multiply-adds, for the completion limit.
    work: u64,
}

/// The kernels the handle loads, by index: these, then every decode entry in [`decode_entry`]'s order
/// (at [`DECODE_BASE`]).
const OTHERS: [&str; 4] = [GQA_F32, COMBINE, KV_APPEND, QKV_APPEND];
const GQA_KERNEL: usize = 0;
const COMBINE_KERNEL: usize = 1;
const APPEND_KERNEL: usize = 2;
const QKV_KERNEL: usize = 3;
const DECODE_BASE: usize = OTHERS.len();

fn kernel_names() -> impl Iterator<Item = &'static str> {
    OTHERS.into_iter().chain(PAGED_DECODE.into_iter().flatten().flatten())
}

/// Checks that `len` elements hold an operand of `needs` elements of `bytes` each.
fn holds(operand: Operand, len: usize, needs: u64, bytes: u64) -> Result<(), ShapeError> {
    if needs.checked_mul(bytes).is_none_or(|b| b > i64::MAX as u64) {
        return Err(ShapeError::Overflow { operand });
    }
    if (len as u64) < needs {
        return Err(ShapeError::Short { operand, len, needs });
    }
    Ok(())
}

fn aligned(operand: Operand, va: u64, align: u64) -> Result<(), ShapeError> {
    if va.is_multiple_of(align) {
        Ok(())
    } else {
        Err(ShapeError::Misaligned { operand, va, align })
    }
}

/// The arguments the decode and append kernels share, in their order: the status word, the layout's
/// strides, its page size and pages, the table's slots per sequence.
fn pool_args(layout: &KvLayout, max_pages: u32) -> [Arg; 7] {
    [
        Arg::Status,
        Arg::Wide(layout.head_stride),
        Arg::Wide(layout.v_offset),
        Arg::Wide(layout.page_stride),
        Arg::Word(layout.page_tokens),
        Arg::Word(layout.pages),
        Arg::Word(max_pages),
    ]
}

/// What an append of one token for each of `batch` sequences into `layout`'s pool reports before it runs.
fn append_info(kind: Kind, batch: u32, layout: &KvLayout) -> Info {
    Info {
        kind: Some(kind),
        batch,
        kv_heads: layout.kv_heads,
        head_dim: layout.head_dim,
        q_rows: 1,
        page_tokens: layout.page_tokens,
        splits: 1,
        kv_bytes: u64::from(batch) * layout.token_bytes(),
        ..Info::default()
    }
}

/// The softmax scale a call asks for, or the default.
fn scale_of(scale: Option<f32>, head_dim: u32) -> f32 {
    scale.unwrap_or(1.0 / (head_dim as f32).sqrt())
}

/// The decode's checks against the layout, shape and buffers, and the group size.
fn check_decode(layout: &KvLayout, shape: &DecodeShape, pool_len: usize) -> Result<u32, AttentionError> {
    let pool_elems = layout.check()?;
    for (what, v) in [("batch", shape.batch), ("q_heads", shape.q_heads), ("max_pages", shape.max_pages)] {
        if v == 0 {
            return Err(ShapeError::Zero { what }.into());
        }
    }
    if !shape.q_heads.is_multiple_of(layout.kv_heads) {
        return Err(ShapeError::Heads { q_heads: shape.q_heads, kv_heads: layout.kv_heads }.into());
    }
    let group = shape.q_heads / layout.kv_heads;
    if group > DECODE_MAX_GROUP {
        return Err(ShapeError::Group { group, max: DECODE_MAX_GROUP }.into());
    }
    if shape.splits > k::COMBINE_MAX_SPLITS {
        return Err(ShapeError::Splits { splits: shape.splits, max: k::COMBINE_MAX_SPLITS }.into());
    }
    holds(Operand::Pool, pool_len, pool_elems, 2)?;
    Ok(group)
}

/// An attention handle of scope `'s`: the `attention` module loaded once, its kernels, and the workspace.
/// Every call checks its shape, layout and buffers before anything runs, then launches (taking and handing
/// back the scope's [`Gpu`] token) or adds its launches to a command list.
pub struct Attention<'s> {
    scope: &'s Scope<'s>,
    module: Module<'s>,
    kernels: Vec<Kernel<'s>>,
    sms: u32,
    timeout_ms: Cell<u32>,
    workspace: RefCell<Workspace>,
    /// The workspaces of the launches added to command lists, each held by its list (so it goes with the
    /// list), seen here for their status words.
    recorded: RefCell<Vec<Weak<RefCell<Workspace>>>>,
}

impl core::fmt::Debug for Attention<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Attention").field("module", &self.module).field("sms", &self.sms).finish()
    }
}

/// An attention handle kept beyond its scope ([`Attention::keep`]), for [`Attention::resume`].
#[derive(Debug)]
pub struct KeptAttention {
    module: KeptModule,
    workspace: Workspace,
}

impl KeptAttention {
    /// True while the device open that loaded it is the one open now.
    pub fn is_current(&self) -> bool {
        self.module.is_current()
    }
}

impl<'s> Attention<'s> {
    /// Loads the `attention` module in `scope` (its kernels' host references on the simulator).
    pub fn new(scope: &'s Scope<'s>) -> Result<Self, AttentionError> {
        let module = scope.load_cuda_module(k::ATTENTION)?;
        Self::with_module(scope, module, Workspace::default())
    }

    fn with_module(scope: &'s Scope<'s>, module: Module<'s>, workspace: Workspace) -> Result<Self, AttentionError> {
        let kernels = kernel_names().map(|name| module.kernel(name)).collect::<Result<Vec<_>, _>>()?;
        let (sms, timeout_ms) = (scope.device().sm_count, Cell::new(crate::launch::DEFAULT_TIMEOUT_MS));
        let (workspace, recorded) = (RefCell::new(workspace), RefCell::new(Vec::new()));
        Ok(Attention { scope, module, kernels, sms, timeout_ms, workspace, recorded })
    }

    /// The handle `kept` was, in this scope; a fresh one when there is none or its device open is gone.
    pub fn resume(scope: &'s Scope<'s>, kept: Option<KeptAttention>) -> Result<Self, AttentionError> {
        match kept {
            Some(k) if k.is_current() => {
                let module = k.module.get(scope)?;
                Self::with_module(scope, module, k.workspace)
            }
            _ => Self::new(scope),
        }
    }

    /// Keeps the module and the workspace beyond this scope.
    pub fn keep(self) -> KeptAttention {
        let Attention { scope, module, workspace, .. } = self;
        KeptAttention { module: scope.keep_module(module), workspace: workspace.into_inner() }
    }

    /// The least completion limit of each launch, ms (5 s until set; a call of much work gets 1 ms more
    /// per million multiply-adds).
    pub fn set_timeout_ms(&self, ms: u32) {
        self.timeout_ms.set(ms);
    }

    fn timeout_for(&self, work: u64) -> u32 {
        let scaled = u64::from(crate::launch::DEFAULT_TIMEOUT_MS).saturating_add(work / 1_000_000);
        self.timeout_ms.get().max(u32::try_from(scaled).unwrap_or(u32::MAX))
    }

    /// Dense GQA attention in f32: q and out `[q_rows][q_heads][head_dim]`, k and v
    /// `[kv_len][kv_heads][head_dim]`, row-major ([`GqaShape`] says where the rows sit and what they
    /// attend). f32 arithmetic with an online softmax.
    pub fn gqa_f32(
        &self,
        gpu: Gpu<'s>,
        q: &impl Input<f32>,
        k: &impl Input<f32>,
        v: &impl Input<f32>,
        out: &mut impl Output<f32>,
        shape: GqaShape,
    ) -> Result<Done<'s>, Failed<'s>> {
        let start = Instant::now();
        let (plan, info) = self.plan_gqa(q, k, v, out.device_va(), out.elements(), shape);
        self.run(gpu, plan, info, start)
    }

    /// Adds [`Attention::gqa_f32`]'s launch to `list`.
    pub fn add_gqa_f32<'k>(
        &'k self,
        list: &mut CmdListBuilder<'k, 's>,
        q: &'k impl Input<f32>,
        k: &'k impl Input<f32>,
        v: &'k impl Input<f32>,
        out: &'k impl Output<f32>,
        shape: GqaShape,
    ) -> Result<Info, AttentionError> {
        let start = Instant::now();
        let (plan, info) = self.plan_gqa(q, k, v, out.device_va(), out.elements(), shape);
        self.record(list, plan?, info, start)
    }

    /// Paged decode over a bf16 pool laid out as `layout` says: q and out `[batch][q_heads][head_dim]` (f32
    /// or bf16 each), page tables `[batch][max_pages]` and lengths `[batch]` (i32) in device memory. Each
    /// sequence's one query token attends its `lens[b]` tokens; a length of 0 gives zeros. The tables are
    /// the device's and are never trusted: the kernels clamp a length to `[0, max_pages * page_tokens]`,
    /// skip a tile whose page index is outside the pool, and flag either; the call reads the flags back
    /// and fails with [`AttentionError::Table`] (stage `attention table`) when any is set, after the
    /// launches ran (the output then holds the clamped result). The tensor cores take q rounded to bf16.
    #[allow(clippy::too_many_arguments)]
    pub fn paged_decode<Q: Elem, O: Elem>(
        &self,
        gpu: Gpu<'s>,
        q: &impl Input<Q>,
        pool: &impl Input<u16>,
        layout: &KvLayout,
        tables: &impl Input<i32>,
        lens: &impl Input<i32>,
        out: &mut impl Output<O>,
        shape: DecodeShape,
    ) -> Result<Done<'s>, Failed<'s>> {
        let start = Instant::now();
        let out = (out.device_va(), out.elements());
        let (plan, info) = self.plan_decode::<Q, O>(q, pool, layout, tables, lens, out, (shape, Submission::Alone));
        self.run(gpu, plan, info, start)
    }

    /// Adds [`Attention::paged_decode`]'s launches to `list`: every submission clamps and flags into the
    /// add's own status word, which [`Attention::list_status`] reads.
    #[allow(clippy::too_many_arguments)]
    pub fn add_paged_decode<'k, Q: Elem, O: Elem>(
        &'k self,
        list: &mut CmdListBuilder<'k, 's>,
        q: &'k impl Input<Q>,
        pool: &'k impl Input<u16>,
        layout: &KvLayout,
        tables: &'k impl Input<i32>,
        lens: &'k impl Input<i32>,
        out: &'k impl Output<O>,
        shape: DecodeShape,
    ) -> Result<Info, AttentionError> {
        let start = Instant::now();
        let out = (out.device_va(), out.elements());
        let (plan, info) = self.plan_decode::<Q, O>(q, pool, layout, tables, lens, out, (shape, Submission::Listed));
        self.record(list, plan?, info, start)
    }

    /// Appends one decode step's K and V rows (`[batch][kv_heads][head_dim]`, f32 or bf16, rounded to bf16)
    /// into the pool on the GPU: sequence b's token goes at position `lens[b]`, through its page table;
    /// with `advance` the kernel then stores `lens[b] + 1`. A length or page index the table cannot hold is
    /// flagged and that sequence writes nothing ([`AttentionError::Table`] after the launch).
    #[allow(clippy::too_many_arguments)]
    pub fn kv_append<E: Elem>(
        &self,
        gpu: Gpu<'s>,
        pool: &mut impl Output<u16>,
        layout: &KvLayout,
        k_new: &impl Input<E>,
        v_new: &impl Input<E>,
        tables: &impl Input<i32>,
        lens: &mut impl Output<i32>,
        shape: AppendShape,
    ) -> Result<Done<'s>, Failed<'s>> {
        let start = Instant::now();
        let (plan, info) = self.plan_append(pool, layout, k_new, v_new, tables, lens, shape);
        self.run(gpu, plan, info, start)
    }

    /// Adds [`Attention::kv_append`]'s launch to `list` (with `advance`, a list that appends and then
    /// decodes steps a whole decode on the GPU).
    #[allow(clippy::too_many_arguments)]
    pub fn add_kv_append<'k, E: Elem>(
        &'k self,
        list: &mut CmdListBuilder<'k, 's>,
        pool: &'k impl Output<u16>,
        layout: &KvLayout,
        k_new: &'k impl Input<E>,
        v_new: &'k impl Input<E>,
        tables: &'k impl Input<i32>,
        lens: &'k impl Output<i32>,
        shape: AppendShape,
    ) -> Result<Info, AttentionError> {
        let start = Instant::now();
        let (plan, info) = self.plan_append(pool, layout, k_new, v_new, tables, lens, shape);
        self.record(list, plan?, info, start)
    }

    /// A decode step's fused QKV projection made attention's inputs, in one launch: `qkv` (bf16
    /// `[batch][q_heads + 2 kv_heads][head_dim]`, the product `x · [Wq; Wk; Wv]ᵀ`) has its q and k heads
    /// RMS-normalised with `q_norm` / `k_norm` (bf16 `[head_dim]`, Qwen3's QK-norm) and rotated with the
    /// sequence's row of `cos` / `sin` (f32 `[batch][head_dim / 2]`, rotate_half pairing) — the arithmetic
    /// of [`crate::libs::elementwise::Elementwise::norm_rope`] — then q goes to `q_out` (bf16 `[batch]
    /// [q_heads][head_dim]`, what [`Attention::paged_decode`] reads) and k and v into the pool as
    /// [`Attention::kv_append`] appends them (position `lens[b]`, `advance`, and its rules for a table it
    /// cannot use: the status, and nothing written for that sequence, q included).
    #[allow(clippy::too_many_arguments)]
    pub fn qkv_append(
        &self,
        gpu: Gpu<'s>,
        qkv: &impl Input<u16>,
        norms: [&dyn Input<u16>; 2],
        tables_rope: [&dyn Input<f32>; 2],
        q_out: &mut impl Output<u16>,
        pool: &mut impl Output<u16>,
        layout: &KvLayout,
        tables: &impl Input<i32>,
        lens: &mut impl Output<i32>,
        shape: QkvAppendShape,
    ) -> Result<Done<'s>, Failed<'s>> {
        let start = Instant::now();
        let (plan, info) =
            self.plan_qkv_append(qkv, norms, tables_rope, &*q_out, &*pool, layout, tables, &*lens, shape);
        self.run(gpu, plan, info, start)
    }

    /// Adds [`Attention::qkv_append`]'s launch to `list`.
    #[allow(clippy::too_many_arguments)]
    pub fn add_qkv_append<'k>(
        &'k self,
        list: &mut CmdListBuilder<'k, 's>,
        qkv: &'k impl Input<u16>,
        norms: [&'k dyn Input<u16>; 2],
        tables_rope: [&'k dyn Input<f32>; 2],
        q_out: &'k impl Output<u16>,
        pool: &'k impl Output<u16>,
        layout: &KvLayout,
        tables: &'k impl Input<i32>,
        lens: &'k impl Output<i32>,
        shape: QkvAppendShape,
    ) -> Result<Info, AttentionError> {
        let start = Instant::now();
        let (plan, info) = self.plan_qkv_append(qkv, norms, tables_rope, q_out, pool, layout, tables, lens, shape);
        self.record(list, plan?, info, start)
    }

    /// The status bits of every command-list add of this handle whose list is still held, ORed (0: every
    /// table was sound in every submission of those lists so far). A dropped list's bits go with it.
    pub fn list_status(&self) -> Result<u32, AttentionError> {
        let mut bits = 0;
        for ws in self.recorded.borrow().iter().filter_map(Weak::upgrade) {
            bits |= ws.borrow_mut().status(self.scope)?;
        }
        Ok(bits)
    }

    fn plan_gqa(
        &self,
        q: &impl Input<f32>,
        k: &impl Input<f32>,
        v: &impl Input<f32>,
        out_va: u64,
        out_len: usize,
        s: GqaShape,
    ) -> (Result<Plan, AttentionError>, Info) {
        let info = Info {
            batch: 1,
            q_heads: s.q_heads,
            kv_heads: s.kv_heads,
            head_dim: s.head_dim,
            kv_len: s.kv_len,
            q_rows: s.q_rows,
            splits: 1,
            kv_bytes: 2 * 4 * u64::from(s.kv_len) * u64::from(s.kv_heads) * u64::from(s.head_dim),
            ..Info::default()
        };
        let plan = (|| {
            s.check()?;
            let d = u64::from(s.head_dim);
            let qn = u64::from(s.q_rows) * u64::from(s.q_heads) * d;
            let kn = u64::from(s.kv_len) * u64::from(s.kv_heads) * d;
            holds(Operand::Q, q.elements(), qn, 4)?;
            holds(Operand::K, k.elements(), kn, 4)?;
            holds(Operand::V, v.elements(), kn, 4)?;
            holds(Operand::Out, out_len, qn, 4)?;
            let warps = u64::from(s.q_rows) * u64::from(s.q_heads);
            let grid = u32::try_from(warps.div_ceil(u64::from(GQA_THREADS / 32)))
                .map_err(|_| ShapeError::Overflow { operand: Operand::Q })?;
            let args = vec![
                Arg::Va(q.device_va()),
                Arg::Va(k.device_va()),
                Arg::Va(v.device_va()),
                Arg::Va(out_va),
                Arg::Word(s.q_heads),
                Arg::Word(s.kv_heads),
                Arg::Word(s.head_dim),
                Arg::Word(s.kv_len),
                Arg::Word(s.q_rows),
                Arg::Word(u32::from(s.causal)),
                Arg::Word(scale_of(s.scale, s.head_dim).to_bits()),
            ];
            let step =
                Step { kernel: GQA_KERNEL, grid: [grid, 1, 1], cluster: [1, 1, 1], block: GQA_THREADS, smem: 0, args };
            let work = warps * u64::from(s.kv_len) * d * 2;
            Ok(Plan { steps: vec![step], partials: 0, tickets: 0, head_dim: s.head_dim, work })
        })();
        (plan, Info { kind: Some(Kind::Gqa), ..info })
    }

    #[allow(clippy::too_many_arguments)]
    fn plan_decode<Q: Elem, O: Elem>(
        &self,
        q: &impl Input<Q>,
        pool: &impl Input<u16>,
        layout: &KvLayout,
        tables: &impl Input<i32>,
        lens: &impl Input<i32>,
        (out_va, out_len): (u64, usize),
        (s, submission): (DecodeShape, Submission),
    ) -> (Result<Plan, AttentionError>, Info) {
        let cap = u64::from(s.max_pages) * u64::from(layout.page_tokens);
        let mut info = Info {
            kind: Some(Kind::Decode),
            batch: s.batch,
            q_heads: s.q_heads,
            kv_heads: layout.kv_heads,
            head_dim: layout.head_dim,
            kv_len: u32::try_from(cap).unwrap_or(u32::MAX),
            q_rows: 1,
            page_tokens: layout.page_tokens,
            kv_bytes: u64::from(s.batch) * cap * layout.token_bytes(),
            ..Info::default()
        };
        let plan = (|| {
            let group = check_decode(layout, &s, pool.elements())?;
            let d = layout.head_dim;
            let rows = u64::from(s.batch) * u64::from(s.q_heads);
            holds(Operand::Q, q.elements(), rows * u64::from(d), size_of::<Q>() as u64)?;
            holds(Operand::Out, out_len, rows * u64::from(d), size_of::<O>() as u64)?;
            holds(Operand::Table, tables.elements(), u64::from(s.batch) * u64::from(s.max_pages), 4)?;
            holds(Operand::Lens, lens.elements(), u64::from(s.batch), 4)?;
            aligned(Operand::Pool, pool.device_va(), 16)?;
            let pairs = u64::from(s.batch) * u64::from(layout.kv_heads);
            let DecodePlan { split: Split { splits, tiles_per_split }, form, stages } =
                plan::decode_plan(pairs, cap, self.sms, (s.splits, s.stages), (s.merge, submission))?;
            let scale_log2 = scale_of(s.scale, d) * core::f32::consts::LOG2_E;
            let out = [Arg::Va(out_va), Arg::Word(if O::BF16 { FLAG_OUT_BF16 } else { 0 })];
            let inputs = [Arg::Va(q.device_va()), Arg::Va(pool.device_va()), Arg::Va(tables.device_va())];
            // The cluster form keeps its partials in shared memory: no workspace arguments.
            let partials: &[Arg] = match form {
                DecodeForm::Cluster => &[],
                DecodeForm::Split | DecodeForm::Ticket => &[Arg::PartO, Arg::PartLse],
            };
            let split_args = [Arg::Word(s.q_heads), Arg::Word(group), Arg::Word(splits), Arg::Word(tiles_per_split)];
            let flags = [Arg::Word(scale_log2.to_bits()), Arg::Word(if Q::BF16 { FLAG_Q_BF16 } else { 0 })];
            let merged: &[Arg] = match form {
                DecodeForm::Split => &[],
                DecodeForm::Cluster => &out,
                DecodeForm::Ticket => &[Arg::Tickets, out[0], out[1]],
            };
            info.splits = splits;
            info.tiles_per_split = tiles_per_split;
            info.stages = stages;
            let decode = Step {
                kernel: DECODE_BASE + decode_entry(form, stages, d).1,
                grid: [splits, layout.kv_heads, s.batch],
                cluster: if form == DecodeForm::Cluster { [splits, 1, 1] } else { [1, 1, 1] },
                block: DECODE_THREADS,
                smem: decode_smem_bytes(d, stages),
                args: [
                    inputs.as_slice(),
                    &[Arg::Va(lens.device_va())],
                    partials,
                    &pool_args(layout, s.max_pages),
                    &split_args,
                    &flags,
                    merged,
                ]
                .concat(),
            };
            let partials = if form == DecodeForm::Cluster { 0 } else { rows * u64::from(splits) };
            let tickets = if form == DecodeForm::Ticket { pairs } else { 0 };
            let work = rows * cap * u64::from(d) * 2;
            let mut steps = vec![decode];
            if form == DecodeForm::Split {
                steps.push(Step {
                    kernel: COMBINE_KERNEL,
                    grid: [s.q_heads, s.batch, 1],
                    cluster: [1, 1, 1],
                    block: COMBINE_THREADS,
                    smem: 0,
                    args: [
                        Arg::PartO,
                        Arg::PartLse,
                        out[0],
                        Arg::Word(d),
                        Arg::Word(splits),
                        Arg::Word(s.q_heads),
                        out[1],
                    ]
                    .to_vec(),
                });
            }
            Ok(Plan { steps, partials, tickets, head_dim: d, work })
        })();
        (plan, info)
    }

    #[allow(clippy::too_many_arguments)]
    fn plan_append<E: Elem>(
        &self,
        pool: &impl Input<u16>,
        layout: &KvLayout,
        k_new: &impl Input<E>,
        v_new: &impl Input<E>,
        tables: &impl Input<i32>,
        lens: &impl Input<i32>,
        s: AppendShape,
    ) -> (Result<Plan, AttentionError>, Info) {
        let info = append_info(Kind::Append, s.batch, layout);
        let plan = (|| {
            let pool_elems = layout.check()?;
            for (what, v) in [("batch", s.batch), ("max_pages", s.max_pages)] {
                if v == 0 {
                    return Err(ShapeError::Zero { what }.into());
                }
            }
            holds(Operand::Pool, pool.elements(), pool_elems, 2)?;
            let rows = u64::from(s.batch) * u64::from(layout.kv_heads) * u64::from(layout.head_dim);
            let e = size_of::<E>() as u64;
            holds(Operand::KNew, k_new.elements(), rows, e)?;
            holds(Operand::VNew, v_new.elements(), rows, e)?;
            holds(Operand::Table, tables.elements(), u64::from(s.batch) * u64::from(s.max_pages), 4)?;
            holds(Operand::Lens, lens.elements(), u64::from(s.batch), 4)?;
            aligned(Operand::Pool, pool.device_va(), 16)?;
            aligned(Operand::KNew, k_new.device_va(), 16)?;
            aligned(Operand::VNew, v_new.device_va(), 16)?;
            let flags = if E::BF16 { 0 } else { APPEND_F32 } | if s.advance { APPEND_ADVANCE } else { 0 };
            let step = Step {
                kernel: APPEND_KERNEL,
                grid: [s.batch, 1, 1],
                cluster: [1, 1, 1],
                block: APPEND_THREADS,
                smem: 0,
                args: [
                    [Arg::Va(pool.device_va()), Arg::Va(k_new.device_va()), Arg::Va(v_new.device_va())].as_slice(),
                    &[Arg::Va(tables.device_va()), Arg::Va(lens.device_va())],
                    &pool_args(layout, s.max_pages),
                    &[Arg::Word(layout.kv_heads), Arg::Word(layout.head_dim), Arg::Word(flags)],
                ]
                .concat(),
            };
            Ok(Plan { steps: vec![step], partials: 0, tickets: 0, head_dim: layout.head_dim, work: rows })
        })();
        (plan, info)
    }

    #[allow(clippy::too_many_arguments)]
    fn plan_qkv_append(
        &self,
        qkv: &impl Input<u16>,
        [q_norm, k_norm]: [&dyn Input<u16>; 2],
        [cos, sin]: [&dyn Input<f32>; 2],
        q_out: &impl Input<u16>,
        pool: &impl Input<u16>,
        layout: &KvLayout,
        tables: &impl Input<i32>,
        lens: &impl Input<i32>,
        s: QkvAppendShape,
    ) -> (Result<Plan, AttentionError>, Info) {
        let info = Info { q_heads: s.q_heads, ..append_info(Kind::QkvAppend, s.batch, layout) };
        let plan = (|| {
            let pool_elems = layout.check()?;
            for (what, v) in [("batch", s.batch), ("q_heads", s.q_heads), ("max_pages", s.max_pages)] {
                if v == 0 {
                    return Err(ShapeError::Zero { what }.into());
                }
            }
            if !s.q_heads.is_multiple_of(layout.kv_heads) {
                return Err(ShapeError::Heads { q_heads: s.q_heads, kv_heads: layout.kv_heads }.into());
            }
            let (b, d) = (u64::from(s.batch), u64::from(layout.head_dim));
            let heads = u64::from(s.q_heads) + 2 * u64::from(layout.kv_heads);
            holds(Operand::Pool, pool.elements(), pool_elems, 2)?;
            holds(Operand::Qkv, qkv.elements(), b * heads * d, 2)?;
            holds(Operand::QNorm, q_norm.elements(), d, 2)?;
            holds(Operand::KNorm, k_norm.elements(), d, 2)?;
            holds(Operand::Cos, cos.elements(), b * d / 2, 4)?;
            holds(Operand::Sin, sin.elements(), b * d / 2, 4)?;
            holds(Operand::Q, q_out.elements(), b * u64::from(s.q_heads) * d, 2)?;
            holds(Operand::Table, tables.elements(), b * u64::from(s.max_pages), 4)?;
            holds(Operand::Lens, lens.elements(), b, 4)?;
            let flags = if s.advance { APPEND_ADVANCE } else { 0 };
            let vas = [qkv.device_va(), q_norm.device_va(), k_norm.device_va(), cos.device_va(), sin.device_va()];
            let step = Step {
                kernel: QKV_KERNEL,
                grid: [s.batch, 1, 1],
                cluster: [1, 1, 1],
                block: QKV_APPEND_THREADS,
                smem: 0,
                args: [
                    vas.map(Arg::Va).as_slice(),
                    &[q_out.device_va(), pool.device_va(), tables.device_va(), lens.device_va()].map(Arg::Va),
                    &pool_args(layout, s.max_pages),
                    &[Arg::Word(s.q_heads), Arg::Word(layout.kv_heads), Arg::Word(layout.head_dim)],
                    &[Arg::Word(flags), Arg::Word(s.eps.to_bits())],
                ]
                .concat(),
            };
            Ok(Plan { steps: vec![step], partials: 0, tickets: 0, head_dim: layout.head_dim, work: b * heads * d })
        })();
        (plan, info)
    }

    fn launch_of(&self, step: &Step, vas: &Vas, work: u64) -> Launch<'_, 's> {
        let mut l = Launch::new(&self.kernels[step.kernel])
            .grid(step.grid)
            .cluster(step.cluster)
            .block([step.block, 1, 1])
            .dynamic_shared(step.smem)
            .timeout_ms(self.timeout_for(work));
        for a in &step.args {
            l = match *a {
                Arg::Va(va) => l.arg(va),
                Arg::PartO => l.arg(vas.part_o),
                Arg::PartLse => l.arg(vas.part_lse),
                Arg::Tickets => l.arg(vas.tickets),
                Arg::Status => l.arg(vas.status),
                Arg::Word(w) => l.arg(w),
                Arg::Wide(w) => l.arg(w),
            };
        }
        l
    }

    fn planned(plan: &Plan, info: &mut Info) {
        info.launches = plan.steps.len() as u32;
        info.ctas = plan
            .steps
            .iter()
            .map(|s| s.grid.iter().map(|&g| u64::from(g)).product::<u64>())
            .max()
            .unwrap_or(0)
            .min(u64::from(u32::MAX)) as u32;
    }

    fn run(
        &self,
        gpu: Gpu<'s>,
        plan: Result<Plan, AttentionError>,
        mut info: Info,
        start: Instant,
    ) -> Result<Done<'s>, Failed<'s>> {
        let fail = |gpu, error: AttentionError, mut info: Info| {
            info.stage = Some(error.stage());
            info.host_ns = start.elapsed().as_nanos() as u64;
            Err(Failed { gpu, error, info: Box::new(info) })
        };
        let plan = match plan {
            Ok(p) => p,
            Err(e) => return fail(Some(gpu), e, info),
        };
        Self::planned(&plan, &mut info);
        let mut ws = self.workspace.borrow_mut();
        let vas = match ws.prepare(self.scope, &plan, &mut info.h2d_bytes) {
            Ok(v) => v,
            Err(e) => return fail(Some(gpu), e, info),
        };
        let mut gpu = gpu;
        for step in &plan.steps {
            match gpu.launch(&self.launch_of(step, &vas, plan.work)) {
                Ok(done) => {
                    info.device_ns += done.elapsed_ns;
                    gpu = done.gpu;
                }
                Err(e) => return fail(e.gpu, AttentionError::Device(e.error), info),
            }
        }
        if plan.steps.iter().any(|s| s.args.iter().any(|a| matches!(a, Arg::Status))) {
            info.status = match ws.status(self.scope) {
                Ok(s) => s,
                Err(e) => return fail(Some(gpu), e, info),
            };
            info.d2h_bytes += 4;
            if info.status != 0 {
                let error = AttentionError::Table { status: info.status, detail: TableDetail::Flagged(info.status) };
                return fail(Some(gpu), error, info);
            }
        }
        info.host_ns = start.elapsed().as_nanos() as u64;
        Ok(Done { gpu, info })
    }

    fn record<'k>(
        &'k self,
        list: &mut CmdListBuilder<'k, 's>,
        plan: Plan,
        mut info: Info,
        start: Instant,
    ) -> Result<Info, AttentionError> {
        Self::planned(&plan, &mut info);
        let mut ws = Workspace::default();
        let vas = ws.prepare(self.scope, &plan, &mut info.h2d_bytes)?;
        // The list holds the workspace, so a handle recording many lists keeps none of a dropped list's
        // buffers; held before the launches are added, so a list never names a workspace that is gone.
        let ws = Rc::new(RefCell::new(ws));
        let mut recorded = self.recorded.borrow_mut();
        recorded.retain(|w| w.strong_count() > 0);
        recorded.push(Rc::downgrade(&ws));
        drop(recorded);
        list.hold(ws);
        for step in &plan.steps {
            list.add(&self.launch_of(step, &vas, plan.work))?;
        }
        info.host_ns = start.elapsed().as_nanos() as u64;
        Ok(info)
    }
}
