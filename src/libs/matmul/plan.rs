//! The planner: which kernels of the `matmul` module run for a product, on which grids, with which
//! arguments — a pure function of the shape, the device's SM count and the CTA budget, so it is tested
//! without a device and the typed calls and command-list adds launch the same plan.
//!
//! The paths (docs/kernels.md, "Matmul"; the kernels' contract is kernels/cuda/matmul.cu):
//!
//! - **split-K GEMV** (bf16, K % 32 == 0, x and W 16-byte aligned — whole buffers always are): weight
//!   streaming for M < [`SKINNY_MIN_M`] (past it the skinny or the TMA GEMM was faster at every Qwen3
//!   shape on the H200, by 1.3-4x at M = 8-32), K split until every SM
//!   streams a share of W (`gemv_check.cu`'s planner), the split lowered until `blocks * split` fits the
//!   budget; past the budget its CTAs walk the 64-row blocks grid-stride;
//! - **skinny GEMM** (bf16, M <= 64, K % 8 == 0, x and W 16-byte aligned): W and x through a cp.async
//!   ring in shared memory, mma.sync, a persistent grid over (128-row tile, K slice) units with the split
//!   [`SkinnyCost`] predicts fastest; the default for M from [`SKINNY_MIN_M`] (and below it where the GEMV cannot
//!   run) wherever [`SkinnyCost`] beats the TMA GEMM's cost; it stores a bf16 output itself;
//! - **TMA GEMM** (bf16, K % 8 == 0, x and W 16-byte aligned, y 8-byte): the persistent wgmma kernel, grid
//!   `min(units, SMs, budget)`, in 128x256 or 128x128 tiles with 1 to [`MAX_SPLITS`] K splits of at least
//!   [`MIN_SPLIT_KBLOCKS`] blocks each, whichever [`GemmCost`] (a wave-quantized cost model fitted to the
//!   recorded figures) predicts fastest; an unsplit wide tile by the entry [`WIDE_ENTRY`] names (the
//!   2-CTA cluster entry, measured fastest on the wide Qwen shapes);
//! - **SIMT f32** (every f32 product): the persistent zigzag kernel, one launch of `min(tiles, 2 * SMs,
//!   budget)` CTAs walking every 128 x 128 tile;
//! - **SIMT bf16** (bf16 of any other K or alignment): one launch per band of M rows that fits the
//!   budget, or, when one band of 128 rows is already past it (N > 128 * budget), one launch per row and
//!   per 128 * budget columns (a one-row product has no row stride, so its columns can be cut);
//! - **bf16 output**: the GEMV and the skinny GEMM store it themselves (the GEMV's `_y16` entries sum
//!   their K slices through the workspace and round at the store: one launch); the others put the f32
//!   product into the workspace, then the conversion kernel runs;
//! - **grouped GEMV** (mixture of experts): the device routes the top-k choices and lists the touched
//!   experts, then ONE launch runs them ([`grouped`]).
//!
//! A [`ForcedPlan`] replaces the planner's choice for a dense bf16 product (benchmarks time the
//! alternatives with it, the TMA-store and cluster entries among them); a forced plan the shape cannot
//! take is refused, never replaced.
//!
//! Every launch's grid (its CTAs) is at most the budget.

use super::error::PlanError;
use crate::kernels::matmul as abi;
// The launch shapes of the kernels are their module's (`omega::kernels::matmul`, which the simulator's
// references and the tests read too); the library only chooses among them.
pub use abi::{GEMM_N128_SMEM_BYTES, GEMM_SMEM_BYTES};

/// The most CTAs a launch of the library may have, and the default budget (`OMEGA_GPU_MATMUL_MAX_CTAS`).
pub const MAX_CTAS: u32 = 1024;

/// Bytes of one TMA descriptor.
pub const TMA_DESC_BYTES: usize = 128;

/// Bytes of the workspace's descriptor area: x's (A) at 0, W's (B) at 128, and y's at 256 for the
/// TMA-store entries.
pub const TMA_AREA_BYTES: usize = 3 * TMA_DESC_BYTES;

/// Which kernels computed a product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Path {
    /// `omega_gemv_bf16_tn_m*`: small M, weight streaming with a K split.
    Gemv = 1,
    /// `omega_gemm_bf16_tn`: TMA loads, wgmma, persistent.
    Gemm = 2,
    /// `omega_gemm_bf16_simt_tn`: bf16 of a K that TMA cannot stride (K % 8 != 0).
    SimtBf16 = 3,
    /// `omega_gemm_f32_tn`: f32 FMA, no TF32.
    SimtF32 = 4,
    /// `omega_moe_route` then `omega_moe_gemv_bf16_m*`: the grouped expert GEMM.
    Grouped = 5,
    /// `omega_skinny_bf16_tn_m*`: small M (1..64), W through a cp.async ring, mma.sync, split-K.
    Skinny = 6,
}

impl Path {
    /// The path's name, as reports print it.
    pub const fn name(self) -> &'static str {
        match self {
            Path::Gemv => "gemv",
            Path::Gemm => "gemm",
            Path::SimtBf16 => "simt_bf16",
            Path::SimtF32 => "simt_f32",
            Path::Grouped => "grouped",
            Path::Skinny => "skinny",
        }
    }
}

/// The element type of a dense product's operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Elem {
    Bf16,
    F32,
}

impl Elem {
    const fn bytes(self) -> u64 {
        match self {
            Elem::Bf16 => 2,
            Elem::F32 => 4,
        }
    }
}

/// A kernel of the module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kern {
    Gemm,
    GemmSplitK,
    /// The 128x128-tile form, for products with few 128x256 tiles.
    GemmN128,
    /// The wide form with the TMA-store epilogue (`omega_gemm_bf16_tn_ts`).
    GemmTs,
    /// The TMA-store form in 2-CTA clusters, W multicast (`omega_gemm_bf16_tn_mc`).
    GemmMc,
    /// The TMA-store form on the narrow tile (`omega_gemm_bf16_tn_ts_n128`).
    GemmTsN128,
    /// The cluster form on the narrow tile (`omega_gemm_bf16_tn_mc_n128`).
    GemmMcN128,
    /// `omega_gemv_bf16_tn_m{1,2,4,8}`, by index (0: m1 .. 3: m8).
    Gemv(usize),
    /// `omega_gemv_bf16_tn_m{1,2,4,8}_y16` (bf16 output), by index.
    GemvY16(usize),
    /// `omega_moe_gemv_bf16_m{1,2,4,8}`, by index.
    Moe(usize),
    /// `omega_skinny_bf16_tn_m{1,2,4,8}`, by index (`abi::skinny_variant`).
    Skinny(usize),
    Route,
    F32,
    Simt,
    Convert,
    /// `omega_moe_router_route`: the router product, top k and route in one launch.
    RouterRoute,
    /// `omega_moe_gemv_bf16_m1_rows`: the m1 grouped entry for rows streamed unsplit.
    MoeRows,
    /// `omega_gemv_bf16_tn_m1_rows`: the m1 GEMV entry for one row of x streamed unsplit.
    GemvRows,
    /// The TMA-store form in stream-K order (`omega_gemm_bf16_tn_sk`).
    GemmSk,
    /// The stream-K form on the narrow tile (`omega_gemm_bf16_tn_sk_n128`).
    GemmSkN128,
    /// The TMA-store form on fitted width `i` of [`abi::GEMM_FITTED`] (`omega_gemm_bf16_tn_ts_n<W>`).
    GemmTsFit(usize),
    /// Its cluster form (`omega_gemm_bf16_tn_mc_n<W>`).
    GemmMcFit(usize),
    /// A TMA-store entry storing a bf16 y: [`abi::GEMM_Y16`] entry `i` (by [`GemmTile::y16`]), the
    /// cluster form when `true`.
    GemmY16(usize, bool),
    /// The narrow TMA-store form with its consumers in ping-pong (`omega_gemm_bf16_tn_pp_n128`), its
    /// bf16-output form when `true` (`_pp_n128_y16`).
    GemmPp(bool),
    /// The gate+up GEMM with SwiGLU in its epilogue: [`abi::GEMM_SWIGLU`] entry `i`, its bf16-output form
    /// when `true`.
    Swiglu(usize, bool),
    /// The small-M GEMM with its operands swapped: [`abi::GEMM_SWAPAB`] entry `i`, its bf16-output form
    /// when `true`.
    Swapab(usize, bool),
}

/// The module's kernel names, in [`Kern`] order: the TMA GEMM, the four GEMVs, the four grouped GEMVs,
/// the router, the two SIMT GEMMs, the conversion, the TMA GEMM's split-K entry, its 128x128 form, its
/// TMA-store entry and that entry's cluster form, those two on the narrow tile, the four skinny GEMMs, the
/// four GEMVs with a bf16 output, the fused router, the grouped and dense row-streaming entries, the
/// two stream-K entries, the fitted widths' two entries each, every width's two bf16-output entries, and
/// the ping-pong entry in both outputs, the SwiGLU GEMM's widths in both outputs, and the swapped small-M
/// GEMM's box heights in both outputs.
pub(crate) const KERNEL_NAMES: [&str; 68] = [
    abi::GEMM_BF16_TN,
    abi::GEMV_BF16_TN[0],
    abi::GEMV_BF16_TN[1],
    abi::GEMV_BF16_TN[2],
    abi::GEMV_BF16_TN[3],
    abi::MOE_GEMV_BF16[0],
    abi::MOE_GEMV_BF16[1],
    abi::MOE_GEMV_BF16[2],
    abi::MOE_GEMV_BF16[3],
    abi::MOE_ROUTE,
    // The f32 kernel of the measured best (8x16 outputs a thread, 128 threads, zigzag FMA order: 0.875x
    // cuBLAS at 8192^3 against 0.85x for omega_gemm_f32_tn; docs/perf/2026-12-02-sgemm-candidates.md),
    // persistent: one launch within the budget (8192^3 took four of 1024 CTAs, 42 TFLOP/s against the
    // kernel's 45.2 alone).
    abi::GEMM_F32_TN_PERSISTENT,
    abi::GEMM_BF16_SIMT_TN,
    abi::CONVERT_F32_BF16,
    abi::GEMM_BF16_TN_SPLITK,
    abi::GEMM_BF16_TN_N128,
    abi::GEMM_BF16_TN_TS,
    abi::GEMM_BF16_TN_MC,
    abi::GEMM_BF16_TN_TS_N128,
    abi::GEMM_BF16_TN_MC_N128,
    abi::SKINNY_BF16_TN[0],
    abi::SKINNY_BF16_TN[1],
    abi::SKINNY_BF16_TN[2],
    abi::SKINNY_BF16_TN[3],
    abi::GEMV_BF16_TN_Y16[0],
    abi::GEMV_BF16_TN_Y16[1],
    abi::GEMV_BF16_TN_Y16[2],
    abi::GEMV_BF16_TN_Y16[3],
    abi::MOE_ROUTER_ROUTE,
    abi::MOE_GEMV_BF16_ROWS,
    abi::GEMV_BF16_TN_ROWS,
    abi::GEMM_BF16_TN_SK,
    abi::GEMM_BF16_TN_SK_N128,
    abi::GEMM_FITTED[0].ts,
    abi::GEMM_FITTED[0].mc,
    abi::GEMM_FITTED[1].ts,
    abi::GEMM_FITTED[1].mc,
    abi::GEMM_FITTED[2].ts,
    abi::GEMM_FITTED[2].mc,
    abi::GEMM_FITTED[3].ts,
    abi::GEMM_FITTED[3].mc,
    abi::GEMM_Y16[0].ts,
    abi::GEMM_Y16[0].mc,
    abi::GEMM_Y16[1].ts,
    abi::GEMM_Y16[1].mc,
    abi::GEMM_Y16[2].ts,
    abi::GEMM_Y16[2].mc,
    abi::GEMM_Y16[3].ts,
    abi::GEMM_Y16[3].mc,
    abi::GEMM_Y16[4].ts,
    abi::GEMM_Y16[4].mc,
    abi::GEMM_Y16[5].ts,
    abi::GEMM_Y16[5].mc,
    abi::GEMM_BF16_TN_PP_N128,
    abi::GEMM_BF16_TN_PP_N128_Y16,
    abi::GEMM_SWIGLU[0].f32,
    abi::GEMM_SWIGLU[0].y16,
    abi::GEMM_SWIGLU[1].f32,
    abi::GEMM_SWIGLU[1].y16,
    abi::GEMM_SWIGLU[2].f32,
    abi::GEMM_SWIGLU[2].y16,
    abi::GEMM_SWAPAB[0].f32,
    abi::GEMM_SWAPAB[0].y16,
    abi::GEMM_SWAPAB[1].f32,
    abi::GEMM_SWAPAB[1].y16,
    abi::GEMM_SWAPAB[2].f32,
    abi::GEMM_SWAPAB[2].y16,
    abi::GEMM_SWAPAB[3].f32,
    abi::GEMM_SWAPAB[3].y16,
];

impl Kern {
    /// Its position in [`KERNEL_NAMES`].
    pub(crate) const fn index(self) -> usize {
        match self {
            Kern::Gemm => 0,
            Kern::Gemv(mb) => 1 + mb,
            Kern::Moe(mb) => 5 + mb,
            Kern::Route => 9,
            Kern::F32 => 10,
            Kern::Simt => 11,
            Kern::Convert => 12,
            Kern::GemmSplitK => 13,
            Kern::GemmN128 => 14,
            Kern::GemmTs => 15,
            Kern::GemmMc => 16,
            Kern::GemmTsN128 => 17,
            Kern::GemmMcN128 => 18,
            Kern::Skinny(v) => 19 + v,
            Kern::GemvY16(mb) => 23 + mb,
            Kern::RouterRoute => 27,
            Kern::MoeRows => 28,
            Kern::GemvRows => 29,
            Kern::GemmSk => 30,
            Kern::GemmSkN128 => 31,
            Kern::GemmTsFit(i) => 32 + 2 * i,
            Kern::GemmMcFit(i) => 33 + 2 * i,
            Kern::GemmY16(i, cluster) => 40 + 2 * i + cluster as usize,
            Kern::GemmPp(y16) => 52 + y16 as usize,
            Kern::Swiglu(i, y16) => 54 + 2 * i + y16 as usize,
            Kern::Swapab(i, y16) => 60 + 2 * i + y16 as usize,
        }
    }
}

/// One kernel argument, by what it points into (byte offsets from the start of that buffer) or its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arg {
    /// The x operand (the tokens of a grouped product).
    X(u64),
    /// The weights.
    W(u64),
    /// The output.
    Y(u64),
    /// The f32 workspace (the f32 product of a bf16 output, the split-K partial sums).
    Scratch(u64),
    /// The tickets (zero before and after every launch).
    Tickets(u64),
    /// The TMA descriptor area (x's at 0, W's at 128, y's at 256).
    Tma(u64),
    /// The top-k choices of a grouped product.
    TopK,
    /// The router's operands of a grouped product routed from the router (its weight, the logits, the
    /// top-k weights).
    Router(RouterArg),
    /// The routing buffer of a grouped product (offsets, rows, pairs, drop count, touched experts).
    Routing(u64),
    /// A 32-bit value.
    Word(u32),
    /// A 64-bit value.
    Wide(u64),
}

/// Which of the router's operands an [`Arg::Router`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RouterArg {
    /// The router weight `[E, K]`.
    W,
    /// The f32 logits `[T, E]` it writes.
    Logits,
    /// The f32 top-k weights `[T, top_k]` it writes.
    Weights,
}

/// How a grouped product gets its routing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Routing {
    /// The route kernel over top-k choices in memory.
    Route,
    /// The fused router kernel: the router product, the top k (stored where the choices go) and the
    /// route, one launch.
    Router,
    /// An earlier product's routing (x one row per slot): no routing launch.
    Existing,
}

/// One launch of the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) kern: Kern,
    pub(crate) grid: [u32; 3],
    pub(crate) block: [u32; 3],
    pub(crate) dynamic_shared: u32,
    pub(crate) args: Vec<Arg>,
}

impl Step {
    /// Its CTAs.
    pub(crate) fn ctas(&self) -> u64 {
        self.grid.iter().map(|&g| u64::from(g)).product()
    }
}

/// What a product needs of the workspace, and its launches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) path: Path,
    pub(crate) steps: Vec<Step>,
    /// f32 elements of scratch.
    pub(crate) scratch: u64,
    /// Ticket words.
    pub(crate) tickets: u64,
    /// The TMA descriptors the steps read (`None`: the GEMV and SIMT paths read none).
    pub(crate) tma: Option<TmaPlan>,
    /// The K split of the GEMV and the split-K GEMM (1 elsewhere).
    pub(crate) split: u32,
}

/// The TMA descriptors of a GEMM plan, in the workspace's area ([`TMA_AREA_BYTES`]): x's, W's, and for
/// a TMA-store entry y's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TmaPlan {
    /// Rows of W per B box: the tile width (256 wide, 128 narrow), or half of it for the cluster entry,
    /// whose CTAs each load half of a tile's W rows.
    pub(crate) b_rows: u32,
    /// Where y's descriptor points: the f32 product (`Arg::Y(0)`, or `Arg::Scratch(0)` for a bf16
    /// output). `None` without a TMA-store entry, and for N % 4 != 0, where no descriptor of y can exist
    /// (its row stride is not whole 16-byte units) and the entry stores directly.
    pub(crate) y: Option<Arg>,
    /// y's descriptor is a bf16 y's ([`abi::gemm_tmap_y16`]): a [`Kern::GemmY16`] entry stores the output.
    pub(crate) y16: bool,
    /// The operands' roles are swapped ([`Kern::Swapab`]): the first descriptor is W's, in boxes of
    /// [`abi::GEMM_TILE_M`] rows, the second x's, in boxes of `b_rows` rows.
    pub(crate) swapped: bool,
}

impl Plan {
    /// The most CTAs of one launch.
    pub(crate) fn max_ctas(&self) -> u64 {
        self.steps.iter().map(Step::ctas).max().unwrap_or(0)
    }

    /// The CTAs of every launch together.
    pub(crate) fn total_ctas(&self) -> u64 {
        self.steps.iter().map(Step::ctas).sum()
    }
}

/// A dense product's shape: `y[M, N] = x[M, K] . W[N, K]^T`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Rows of x and y.
    pub m: u32,
    /// Rows of W, columns of y.
    pub n: u32,
    /// Columns of x and W.
    pub k: u32,
}

impl Shape {
    /// `[m, n, k]`.
    pub const fn new(m: u32, n: u32, k: u32) -> Self {
        Shape { m, n, k }
    }
}

impl core::fmt::Display for Shape {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "M={} N={} K={}", self.m, self.n, self.k)
    }
}

/// A grouped (mixture-of-experts) product's shape: `tokens` rows of x `[tokens, K]`, each routed to
/// `top_k` of `experts` weight matrices `[experts, N, K]`; the output has one row per choice
/// (`[tokens * top_k, N]`, in the routing's slot order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupedShape {
    /// Rows of x (tokens).
    pub tokens: u32,
    /// Experts per token.
    pub top_k: u32,
    /// Expert matrices.
    pub experts: u32,
    /// Rows of each expert's W, columns of y.
    pub n: u32,
    /// Columns of x and W.
    pub k: u32,
}

impl core::fmt::Display for GroupedShape {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "T={} top_k={} E={} N={} K={}", self.tokens, self.top_k, self.experts, self.n, self.k)
    }
}

/// Where the parts of a grouped product's routing buffer (u32 words) lie. The route kernel writes every
/// part at each launch (a replayed command list routes afresh); the grouped GEMV reads the offsets, the
/// rows and the touched experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoutingLayout {
    /// First word of `offsets` (`experts + 1` words: expert e's slots are `offsets[e] .. offsets[e + 1]`).
    pub offsets: usize,
    /// First word of `rows` (`tokens * top_k`: the token of each slot).
    pub rows: usize,
    /// First word of `pairs` (`tokens * top_k`: each slot's choice index `t * top_k + j`).
    pub pairs: usize,
    /// The drop count: choices naming an expert `>= experts`, which have no slot.
    pub dropped: usize,
    /// The count of touched experts (those with at least one slot).
    pub active: usize,
    /// First word of the touched experts' list, in increasing expert order (`min(experts, tokens *
    /// top_k)` words: its first `active` are written).
    pub experts: usize,
    /// Words of the whole buffer.
    pub words: usize,
}

impl RoutingLayout {
    /// Words of the touched experts' list: at most one expert per choice, and no more than there are.
    pub const fn experts_capacity(&self) -> usize {
        self.words - self.experts
    }
}

impl GroupedShape {
    /// The choices: `tokens * top_k` (the output's rows).
    pub const fn choices(&self) -> u64 {
        self.tokens as u64 * self.top_k as u64
    }

    /// The routing buffer's layout (checked shapes only: the sums cannot overflow for u32 sides).
    pub fn routing(&self) -> RoutingLayout {
        let e = self.experts as usize;
        let p = self.choices() as usize;
        let dropped = e + 1 + 2 * p;
        RoutingLayout {
            offsets: 0,
            rows: e + 1,
            pairs: e + 1 + p,
            dropped,
            active: dropped + 1,
            experts: dropped + 2,
            words: dropped + 2 + e.min(p),
        }
    }
}

fn ceil(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

fn round_up(a: u64, b: u64) -> u64 {
    a.div_ceil(b) * b
}

/// `u32` of a value the caller bounded (grids below the budget, K splits below K).
fn word(v: u64) -> u32 {
    u32::try_from(v).expect("bounded by the planner")
}

/// The GEMV variant for `rows` rows per group: 8 * MB rows per pass over W.
fn mb_index(rows: u64) -> usize {
    match rows {
        0..=8 => 0,
        9..=16 => 1,
        17..=32 => 2,
        _ => 3,
    }
}

/// The K split: `want` CTAs per 64-row block, at most one per 128 elements of K, in whole 32-element
/// chunks, lowered until `blocks * split <= budget`. Returns (split, k_per_split).
fn k_split(k: u64, want: u64, blocks: u64, budget: u64) -> (u64, u64) {
    let fit = |split: u64| {
        let kps = round_up(ceil(k, split.max(1)), 32);
        (ceil(k, kps), kps)
    };
    let (mut split, mut kps) = fit(want.min(k / 128).max(1));
    if blocks * split > budget {
        (split, kps) = fit((budget / blocks).max(1));
    }
    (split, kps)
}

/// The budget in force, clamped to 1..=MAX_CTAS.
fn clamp_budget(budget: u32) -> u64 {
    u64::from(budget.clamp(1, MAX_CTAS))
}

/// The TMA GEMM's tile forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GemmTile {
    /// 128 x 256 tiles, four stages (`omega_gemm_bf16_tn`, its split-K entry).
    Wide,
    /// 128 x 128 tiles, six stages (`omega_gemm_bf16_tn_n128`): twice the tiles of the wide form.
    Narrow,
    /// 128 x 160 tiles, five stages, TMA-store and cluster entries only (unsplit): 512 x 5120 in 128
    /// tiles, one wave of 132 SMs.
    N160,
    /// 128 x 192 tiles, four stages, TMA-store and cluster entries only: 4096 x 1536 in 256 tiles.
    N192,
    /// 128 x 96 tiles, six stages, TMA-store and cluster entries only: 256 x 5120 in 108 tiles.
    N96,
    /// 128 x 64 tiles, eight stages, TMA-store and cluster entries only: 512 x 2048 in 128 tiles.
    N64,
}

impl GemmTile {
    /// Its name, as reports and forced plans' tags print it.
    pub const fn name(self) -> &'static str {
        match self {
            GemmTile::Wide => "wide",
            GemmTile::Narrow => "narrow",
            GemmTile::N160 => "n160",
            GemmTile::N192 => "n192",
            GemmTile::N96 => "n96",
            GemmTile::N64 => "n64",
        }
    }

    /// Output columns of one tile (rows of W per TMA box).
    pub const fn n(self) -> u32 {
        match (self, self.fitted()) {
            (GemmTile::Wide, _) => abi::GEMM_TILE_N,
            (_, None) => abi::GEMM_N128_TILE_N,
            (_, Some(i)) => abi::GEMM_FITTED[i].tile_n,
        }
    }

    /// Its entry in [`abi::GEMM_FITTED`]: the widths that have TMA-store and cluster entries alone (no
    /// direct, split-K or stream-K kernel).
    pub const fn fitted(self) -> Option<usize> {
        match self {
            GemmTile::Wide | GemmTile::Narrow => None,
            GemmTile::N160 => Some(0),
            GemmTile::N192 => Some(1),
            GemmTile::N96 => Some(2),
            GemmTile::N64 => Some(3),
        }
    }

    /// Its bf16-output entries in [`abi::GEMM_Y16`] (every tile has them).
    pub(crate) const fn y16(self) -> usize {
        match (self, self.fitted()) {
            (GemmTile::Wide, _) => 0,
            (_, None) => 1,
            (_, Some(i)) => 2 + i,
        }
    }
}

/// The entry that runs an unsplit TMA GEMM of either tile. The three compute the same product from the
/// same tiles and order; they differ in how a tile's f32 output leaves the SM and how W arrives
/// (kernels/cuda/matmul/gemm_bf16_ts.cuh). Each has a wide (128 x 256) and a narrow (128 x 128) kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WideEntry {
    /// `omega_gemm_bf16_tn`: the consumers store their accumulators from registers, the tensor cores idle
    /// meanwhile. The one measured on the H200.
    Direct,
    /// `omega_gemm_bf16_tn_ts` (`_ts_n128`): the accumulators staged in shared memory and stored by the TMA unit
    /// through y's descriptor while the next tile's mainloop runs (direct stores for N % 4 != 0).
    TmaStore,
    /// `omega_gemm_bf16_tn_mc` (`_mc_n128`): the TMA-store entry in 2-CTA clusters, each CTA loading half of the W
    /// slice the pair shares and multicasting it into both (half W's L2 traffic). Its grid is whole
    /// pairs: `2 * min(pairs, SMs / 2, budget / 2)`.
    Cluster,
    /// `omega_gemm_bf16_tn_sk` (`_sk_n128`): the TMA-store entry in stream-K order. Its grid,
    /// `clamp(tiles * kblocks / GEMM_SK_MIN_ITERS, 1, min(SMs, budget))`, shares the tiles' K blocks
    /// evenly; a tile cut between CTAs is finished through the workspace (a slot of partial sums per CTA
    /// and two zeroed flags). Forced only (`ForcedPlan::GemmStreamK`): on the H100 it beat the planner by
    /// 2-4 % at a few few-tile shapes and lost everywhere else (docs/perf/2026-12-07-s16-h100-libraries.md).
    StreamK,
    /// `omega_gemm_bf16_tn_pp_n128`, the narrow tile only: the TMA-store entry with its two consumers on
    /// alternate whole tiles, one's epilogue under the other's mainloop. Its grid is the TMA-store
    /// entry's. The planner's where [`pingpong_pays`].
    PingPong,
}

impl WideEntry {
    /// Its name, as reports print it.
    pub const fn name(self) -> &'static str {
        match self {
            WideEntry::Direct => "direct",
            WideEntry::TmaStore => "tma_store",
            WideEntry::Cluster => "cluster",
            WideEntry::StreamK => "stream_k",
            WideEntry::PingPong => "ping_pong",
        }
    }
}

/// The entry the planner runs an unsplit wide tile with: THE switch between the three. On the H200
/// (benches/cuda/gemm_check.cu, same run as cuBLAS, docs/perf/2026-12-02-gemm-epilogue-cluster.md) the
/// cluster entry beat the direct one on every wide shape but 8192^3 (-1%): 4096^3 750 against 696
/// TFLOP/s (cuBLAS 764), 4096x5120x2048 692 / 599 (700), lm_head at M = 4096 740 / 594 (731); and it ran
/// checked under Omega's own launches (gpu_suite `matmul_mc`). The cost model ([`GemmCost`]) is still the
/// direct entry's fit, so it chooses tiles conservatively. Every unsplit wide plan takes the cluster entry
/// wherever it can run (a budget of two CTAs, y 16-byte aligned when N % 4 == 0), else the TMA-store one,
/// else the direct one.
pub const WIDE_ENTRY: WideEntry = WideEntry::Cluster;

/// The entry the planner runs an unsplit narrow tile with: the TMA-store one
/// (`omega_gemm_bf16_tn_ts_n128`). Under Omega's launches on the H200 (matmul_bench `--alternatives`,
/// docs/perf/2026-12-02-s4-libraries.md) it beat the direct narrow kernel at every narrow shape of
/// Qwen3's layers, by 3-10%: gate+up 4096x1536x2048 41.1 against 43.2 us, 512x2048x4096 23.7 / 24.0,
/// down 512x2048x768 7.37 / 8.15, the router 4096x128x2048 13.8 / 14.2; the cluster form
/// (`_mc_n128`) won only gate+up at M = 4096 (40.7) and lost elsewhere, by up to 1.5x at M <= 64.
/// Where the TMA store cannot run (y not 16-byte aligned) the plan keeps the direct entry.
pub const NARROW_ENTRY: WideEntry = WideEntry::TmaStore;

/// A fitted width replaces the wide or narrow tile only where the cost model gives it under this many
/// tenths of their time: the model is within -12 %..+10 % of the records, and the shapes where the fitted
/// widths won on the GPU are those where they save a third or more (QKV at M = 512: 16.9 against 27.0 us),
/// while at M = 4096 they tie the wide tile to within rounding.
pub const FITTED_MIN_SAVING_TENTHS: u64 = 9;

/// The entry the planner runs a fitted tile width with (they have no direct one): the TMA-store one,
/// ahead of the cluster form at every fitted width on the H100 (gemm_check: 160 columns at 512 x 5120
/// 1.024 against 0.945 of cuBLAS, 64 at 512 x 2048 x 4096 1.092 against 0.961, 192 at 4096 x 1536 0.910
/// against 0.880).
pub const FITTED_ENTRY: WideEntry = WideEntry::TmaStore;

/// The longest K at which the planner runs the ping-pong entry ([`pingpong_pays`]).
pub const PINGPONG_MAX_K: u32 = 1024;
/// The fewest rows at which the planner runs it: the M its wins were measured at. Below it (lm_head at M =
/// 128-512 also gives every CTA two narrow tiles) the cost model's plan stays until matmul_bench
/// `--alternatives` (`narrow_pp`) has timed the entry there.
pub const PINGPONG_MIN_M: u32 = 4096;

/// Whether the planner runs an unsplit product of `shape` on the ping-pong entry (narrow tile) instead of
/// the tile and entry its cost model chose: where K is at most [`PINGPONG_MAX_K`], M at least
/// [`PINGPONG_MIN_M`] and the narrow tiles give every CTA of the grid two or more, so each consumer's
/// epilogue has the other's mainloop to hide under.
/// Its win is at short K, where a tile's epilogue is as long as its mainloop. down 4096 x 2048 x 768: on
/// the H200 (gemm_check `pp`, docs/perf/2026-12-07-s21-h200-pingpong-swiglu.md, f32 y) 521 TFLOP/s
/// against the planner's wide cluster plan's 504 (cuBLAS 474); on an H100 under Omega's launches
/// (matmul_bench `--alternatives`, docs/perf/2026-12-07-s22-h100-pingpong-entry.md) 25.1 us against the
/// wide TMA-store tile's 27.0 and the cluster's 28.1. At K = 2048 the two machines disagree: on the H200
/// harness it was ahead by 0-4 % (gate+up, QKV, lm_head at 4096), on the H100 library 8 % behind the
/// 192-column tile at gate+up and 7 % behind the wide tile at QKV; at K = 4096 it lost on both, as it did
/// where a CTA has one tile (M = 512). So the rule keeps K <= 1024.
pub fn pingpong_pays(shape: Shape, sms: u32, budget: u32) -> bool {
    let tiles = ceil(u64::from(shape.m), u64::from(abi::GEMM_TILE_M))
        * ceil(u64::from(shape.n), u64::from(abi::GEMM_N128_TILE_N));
    let grid = u64::from(sms.max(1)).min(clamp_budget(budget));
    shape.k <= PINGPONG_MAX_K && shape.m >= PINGPONG_MIN_M && tiles >= 2 * grid
}

/// A plan the caller chooses instead of the planner ([`super::Matmul::set_forced_plan`]), so one run can
/// time the alternatives of a shape. Dense bf16 products only; a forced plan the shape cannot take is
/// refused ([`PlanError::Forced`], stage `matmul plan`), never replaced by another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ForcedPlan {
    /// The split-K GEMV (any M, in passes of `8 * MB` rows). `split`: K slices (`gridDim.y`), each a
    /// whole number of 32-element chunks; `None`: the planner's split for the shape.
    Gemv {
        /// K slices, or the planner's.
        split: Option<u32>,
    },
    /// The TMA GEMM in `tile`, with `splits` K splits of whole 64-element blocks (1: unsplit); `None`:
    /// the planner's split for that tile.
    Gemm {
        /// The tile form.
        tile: GemmTile,
        /// K splits, or the planner's.
        splits: Option<u32>,
    },
    /// The unsplit TMA GEMM in `tile` with the TMA-store epilogue (`omega_gemm_bf16_tn_ts`,
    /// `_ts_n128`), in 2-CTA clusters with W multicast when `cluster` (`omega_gemm_bf16_tn_mc`,
    /// `_mc_n128`). ([`ForcedPlan::Gemm`] unsplit is the direct-store entry.)
    GemmTmaStore {
        /// The tile form.
        tile: GemmTile,
        /// The cluster entry.
        cluster: bool,
    },
    /// The TMA GEMM in `tile` with the TMA-store epilogue in stream-K order (`omega_gemm_bf16_tn_sk`,
    /// `_sk_n128`).
    GemmStreamK {
        /// The tile form.
        tile: GemmTile,
    },
    /// The TMA GEMM in `tile` with its consumers in ping-pong (`omega_gemm_bf16_tn_pp_n128`: the narrow
    /// tile only).
    GemmPingPong {
        /// The tile form.
        tile: GemmTile,
    },
    /// The skinny GEMM (M <= [`abi::SKINNY_MAX_M`]) with `split` K slices of whole 64-element stages;
    /// `None`: the planner's split ([`abi::skinny_plan`]).
    Skinny {
        /// K slices, or the planner's.
        split: Option<u32>,
    },
    /// The TMA GEMM with its operands swapped (M <= [`abi::SKINNY_MAX_M`]; [`abi::GEMM_SWAPAB`]) with
    /// `splits` K splits of whole 64-element blocks; `None`: the planner's split ([`swapab_splits`]).
    Swapab {
        /// K splits, or the planner's.
        splits: Option<u32>,
    },
}

impl ForcedPlan {
    /// A short name for reports and metric names: `gemv` (the planner's split), `gemv_split<s>`; `wide`
    /// and `narrow` unsplit, `<tile>_split<s>`, `<tile>_auto` (the planner's split); `<tile>_ts`,
    /// `<tile>_mc`, `<tile>_sk`, `<tile>_pp`; `skinny` (the planner's split), `skinny_split<s>`; `swapab`
    /// (the planner's split), `swapab_split<s>`.
    pub fn tag(&self) -> String {
        let gemm = |tile: &str, splits: Option<u32>| match splits {
            None => format!("{tile}_auto"),
            Some(1) => tile.to_string(),
            Some(s) => format!("{tile}_split{s}"),
        };
        match *self {
            ForcedPlan::Gemv { split: None } => "gemv".to_string(),
            ForcedPlan::Gemv { split: Some(s) } => format!("gemv_split{s}"),
            ForcedPlan::Gemm { tile, splits } => gemm(tile.name(), splits),
            ForcedPlan::GemmTmaStore { tile, cluster: false } => format!("{}_ts", tile.name()),
            ForcedPlan::GemmTmaStore { tile, cluster: true } => format!("{}_mc", tile.name()),
            ForcedPlan::GemmStreamK { tile } => format!("{}_sk", tile.name()),
            ForcedPlan::GemmPingPong { tile } => format!("{}_pp", tile.name()),
            ForcedPlan::Skinny { split: None } => "skinny".to_string(),
            ForcedPlan::Skinny { split: Some(s) } => format!("skinny_split{s}"),
            ForcedPlan::Swapab { splits: None } => "swapab".to_string(),
            ForcedPlan::Swapab { splits: Some(s) } => format!("swapab_split{s}"),
        }
    }
}

/// Why a forced plan cannot run a shape ([`PlanError::Forced`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ForcedRefusal {
    /// An f32 product: only the SIMT kernel computes it.
    NotBf16,
    /// K is not a multiple of what the path's loads need (32 for the GEMV, 8 for the TMA strides).
    KNotMultiple {
        /// What K must be a multiple of.
        of: u32,
    },
    /// x or W does not start 16-byte aligned (vector loads, TMA), or, for the GEMM, an f32 y not 8-byte
    /// aligned (its epilogue's float pairs), or, for the TMA-store entries at N % 4 == 0, an f32 y not
    /// 16-byte aligned (y's descriptor's global address).
    Unaligned,
    /// A split of 0.
    ZeroSplit,
    /// K's chunks or blocks make fewer slices than asked: `kept` is what the kernel would run.
    SplitNotKept {
        /// The split asked.
        asked: u32,
        /// The split K's granules allow with that slice size.
        kept: u32,
    },
    /// More K slices than the CTA budget: one CTA per slice of a block must run at once.
    SplitPastBudget {
        /// The split asked.
        split: u32,
        /// The budget.
        budget: u32,
    },
    /// A budget below one cluster: the cluster entry's two CTAs of a pair run at once.
    ClusterPastBudget {
        /// CTAs per cluster.
        cluster: u32,
        /// The budget.
        budget: u32,
    },
    /// More rows of x than the path computes in one pass.
    MPastPath {
        /// The most rows it takes.
        max: u32,
    },
    /// A fitted tile width ([`GemmTile::fitted`]) in an entry built for the wide and narrow tiles alone
    /// (the direct, split-K and stream-K kernels).
    NoEntryForTile {
        /// The tile.
        tile: GemmTile,
        /// The entry.
        entry: WideEntry,
    },
    /// More tiles x K blocks than the stream-K kernel counts in its 32-bit positions.
    IterationsPastKernel {
        /// The product's iterations.
        iters: u64,
        /// The first count the kernel cannot take.
        max: u64,
    },
}

impl core::fmt::Display for ForcedRefusal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            ForcedRefusal::NotBf16 => f.write_str("an f32 product runs on the SIMT kernel only"),
            ForcedRefusal::KNotMultiple { of } => write!(f, "K is not a multiple of {of}"),
            ForcedRefusal::Unaligned => f.write_str("an operand is not aligned for its vector or TMA accesses"),
            ForcedRefusal::ZeroSplit => f.write_str("a split of 0"),
            ForcedRefusal::SplitNotKept { asked, kept } => {
                write!(f, "K divides into {kept} slices, not the {asked} asked")
            }
            ForcedRefusal::SplitPastBudget { split, budget } => {
                write!(f, "{split} K slices are past the CTA budget of {budget}")
            }
            ForcedRefusal::ClusterPastBudget { cluster, budget } => {
                write!(f, "a cluster of {cluster} CTAs is past the CTA budget of {budget}")
            }
            ForcedRefusal::MPastPath { max } => write!(f, "M is past the {max} rows the path takes"),
            ForcedRefusal::NoEntryForTile { tile, entry } => {
                write!(f, "the {} entry has no kernel on the {} tile", entry.name(), tile.name())
            }
            ForcedRefusal::IterationsPastKernel { iters, max } => {
                write!(f, "{iters} tile K blocks are past the {max} the stream-K kernel counts")
            }
        }
    }
}

impl core::fmt::Display for ForcedPlan {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let split = |s: Option<u32>| s.map_or("the planner's".to_string(), |s| s.to_string());
        match *self {
            ForcedPlan::Gemv { split: s } => write!(f, "the GEMV with {} split", split(s)),
            ForcedPlan::Gemm { tile, splits } => write!(f, "the {tile:?} TMA GEMM with {} split", split(splits)),
            ForcedPlan::GemmTmaStore { tile, cluster } => {
                let clusters = if cluster { " in 2-CTA clusters" } else { "" };
                write!(f, "the {} TMA GEMM with a TMA-store epilogue{clusters}", tile.name())
            }
            ForcedPlan::GemmStreamK { tile } => write!(f, "the {} TMA GEMM in stream-K order", tile.name()),
            ForcedPlan::GemmPingPong { tile } => {
                write!(f, "the {} TMA GEMM with its consumers in ping-pong", tile.name())
            }
            ForcedPlan::Skinny { split: s } => write!(f, "the skinny GEMM with {} split", split(s)),
            ForcedPlan::Swapab { splits: s } => {
                write!(f, "the TMA GEMM with its operands swapped, with {} split", split(s))
            }
        }
    }
}

/// The options of a dense plan beyond its shape.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DenseOpts {
    /// The device's SMs.
    pub(crate) sms: u32,
    /// The CTA budget.
    pub(crate) budget: u32,
    /// The output is bf16: the f32 product goes to the workspace and a conversion follows.
    pub(crate) out_bf16: bool,
    /// x and W start 16-byte aligned (whole buffers always do): the GEMV's vector loads and the TMA's
    /// global address need it, the SIMT kernels do not.
    pub(crate) aligned: bool,
    /// The output starts 8-byte aligned: the TMA GEMMs' epilogue stores pairs of floats.
    pub(crate) y_aligned: bool,
    /// The output starts 16-byte aligned: a TMA descriptor's global address (the TMA-store entries' y).
    pub(crate) y_aligned16: bool,
}

/// Past this M the GEMV is taken only when nothing faster can run (a y the GEMM cannot store into).
const GEMV_ANY_M: u64 = 64;

/// The fewest K blocks (of 64) a split of the TMA GEMM keeps. Each split is a work unit that fills the
/// producer's ring from empty (4 stages wide, 6 narrow) and drains it: with fewer blocks than stages the
/// producer is never a ring ahead and every block waits out a TMA round trip. Eight blocks (512 of K) are
/// past the deeper ring, so at least a quarter of each unit runs with the ring full. (Splitting the router's
/// 32 blocks 32 ways made one-block units: 226-240 us where cuBLAS takes 16.)
pub const MIN_SPLIT_KBLOCKS: u32 = 8;

/// The tile forms the planner weighs, in the order ties keep (the widest first: the cost model is linear
/// in the width, so a narrower tile wins only where it fills a wave the wider ones leave part empty). On
/// the H100 beside cuBLAS (gemm_check, docs/perf/2026-12-07-s19-h100-fitted-tiles.md) the fitted widths
/// took the M = 512 shapes from 0.69-0.90 of cuBLAS to 0.94-1.09: QKV 512 x 5120 x 2048 in 160 columns
/// 1.024 (the wide tile 0.73), O 512 x 2048 x 4096 in 64 columns 1.092 (narrow 0.77), down 512 x 2048 x
/// 768 1.052 (0.84), gate+up 512 x 1536 x 2048 0.941 (0.69), 256 x 5120 x 2048 in 96 columns 1.013 (0.88).
pub const PLANNED_TILES: [GemmTile; 6] =
    [GemmTile::Wide, GemmTile::Narrow, GemmTile::N192, GemmTile::N160, GemmTile::N96, GemmTile::N64];

/// The most K splits the planner chooses: the tile's last unit adds every split's slice alone, at
/// [`GemmCost::REDUCE_SLICE_NS`] each, so past a few slices the reduction outweighs any wave it saves.
pub const MAX_SPLITS: u32 = 8;

/// The TMA GEMM's cost model, fitted by tools/fit_gemm_model.py to the 21 recorded figures whose plans are
/// known (docs/perf/2026-12-02-matmul-bringup.md runs 9-10, -matmul-library-bench.md run 13; within
/// -12%..+10% of each):
///
/// ```text
/// t = waves * (BN / 256) * (EPILOGUE + per * KBLOCK) + tile_waves * [splits > 1] * (BN / 128) * (REDUCE + splits * REDUCE_SLICE)
/// ```
///
/// `waves = ceil(units / grid)` (the persistent grid is `min(units, SMs, budget)`), `per` the K blocks of
/// one unit, BN the tile width: the main loop is `∝ BN * K` (a 128x256x64 block is 0.70 us, the
/// wgmma's peak at 1980 MHz), the epilogue `∝ BN` (the tile's f32 stores and the ring's fill, 4.7 us per
/// wide unit), and a split adds the last unit's pass over every slice (6.5 us + 6.9 us per slice of a
/// 128x128 tile: the reduction reads its slices at about 10 GB/s per CTA, so two splits cost ~20 us).
/// No plan beats reading W and x once from HBM ([`GemmCost::HBM_BYTES_PER_US`], the recorded copy
/// rate): lm_head at M = 16-128 is bound there in either form. The launch's round trip (~4.5 us) is the
/// same for every candidate and left out. Ties keep the wide form and fewer splits (the forms the records
/// measured most).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmCost {
    /// The tile form.
    pub tile: GemmTile,
    /// K splits (1: unsplit).
    pub splits: u32,
    /// Work units (`tiles * splits`).
    pub units: u64,
    /// The predicted device time, ns (the launch's round trip left out).
    pub ns: u64,
}

impl GemmCost {
    /// Per wide (128x256) unit: the epilogue's stores and the ring's fill, ns.
    pub const EPILOGUE_NS: u64 = 4738;
    /// Per 64-element K block of a wide unit, ns.
    pub const KBLOCK_NS: u64 = 696;
    /// Per 128x128 tile of a split product: the last unit's fixed reduction cost, ns.
    pub const REDUCE_NS: u64 = 6475;
    /// Per 128x128 tile and per split: one slice added by the last unit, ns.
    pub const REDUCE_SLICE_NS: u64 = 6930;
    /// HBM's rate: the H200's 1 GiB device copy, 4242 GB/s (docs/perf/2026-12-02-matmul-library-bench.md).
    pub const HBM_BYTES_PER_US: u64 = 4_242_000;

    /// The cost of `shape` in `tile` with `splits` asked on a grid of `grid` CTAs (`None` when K's blocks
    /// keep fewer splits than asked: that plan is another candidate's; and for a fitted width at more
    /// than one split, which no entry runs).
    pub fn of(shape: Shape, tile: GemmTile, splits: u32, grid: u64) -> Option<GemmCost> {
        let s = abi::GemmSplit::new(shape.m, shape.n, shape.k, tile.n(), splits);
        if s.splits != splits.max(1) || (s.splits > 1 && tile.fitted().is_some()) {
            return None;
        }
        let units = u64::from(s.tiles) * u64::from(s.splits);
        let grid = grid.max(1);
        // Twice the ns of a unit, linear in the tile's columns (the wide tile's 256 are twice the
        // narrow's 128, the constants' unit).
        let cols = u64::from(tile.n());
        let unit = cols * (Self::EPILOGUE_NS + u64::from(s.per) * Self::KBLOCK_NS) / 128;
        let mut half_ns = units.div_ceil(grid) * unit;
        if s.splits > 1 {
            let tile_waves = u64::from(s.tiles).div_ceil(grid);
            half_ns += tile_waves * 2 * cols * (Self::REDUCE_NS + u64::from(s.splits) * Self::REDUCE_SLICE_NS) / 128;
        }
        let operands = (u64::from(shape.n) + u64::from(shape.m)) * u64::from(shape.k) * 2;
        let floor = operands * 1000 / Self::HBM_BYTES_PER_US;
        Some(GemmCost { tile, splits: s.splits, units, ns: (half_ns / 2).max(floor) })
    }

    /// The cheapest plan for `shape` on `sms` SMs within `budget` CTAs of the wide and narrow tiles at 1
    /// to [`MAX_SPLITS`] splits of at least [`MIN_SPLIT_KBLOCKS`] blocks each (`only`: that form alone,
    /// any form). The planner's own choice, fitted widths included, is [`GemmCost::planned`].
    pub fn best(shape: Shape, sms: u32, budget: u32, only: Option<GemmTile>) -> GemmCost {
        match only {
            Some(tile) => Self::best_of(shape, sms, budget, &[tile]),
            None => Self::best_of(shape, sms, budget, &PLANNED_TILES[..2]),
        }
    }

    /// The planner's TMA GEMM for `shape`: [`GemmCost::best`], replaced by a fitted width of
    /// [`PLANNED_TILES`] that the model gives under [`FITTED_MIN_SAVING_TENTHS`] of its time, or that is
    /// wider and no slower by the model, where `staged` (y can take the TMA-store entries, the fitted
    /// widths' only ones).
    pub fn planned(shape: Shape, sms: u32, budget: u32, staged: bool) -> GemmCost {
        Self::best(shape, sms, budget, None).or_fitted(shape, sms, budget, staged)
    }

    /// `self` (the wide or narrow tile's plan), or the fitted width [`GemmCost::planned`] takes instead.
    fn or_fitted(self, shape: Shape, sms: u32, budget: u32, staged: bool) -> GemmCost {
        let fitted = PLANNED_TILES[2..].iter().filter(|_| staged);
        let costs = fitted.map(|&t| Self::best_of(shape, sms, budget, &[t]));
        // A wider tile than the plan's that the model ties with it is taken too: it loads x fewer times and
        // issues wider wgmmas, which the model (linear in the width) does not see. gate+up at M = 4096:
        // 192 columns 39.6 us against the narrow tile's 45.0 forced through the library, 585 against 573
        // TFLOP/s in gemm_check (session 19), where the model gives both 40.5 us.
        costs.fold(self, |b, c| {
            let saves = c.ns * 10 < b.ns * FITTED_MIN_SAVING_TENTHS;
            let wider_tie = c.tile.n() > b.tile.n() && c.ns <= b.ns;
            if saves || wider_tie {
                c
            } else {
                b
            }
        })
    }

    /// [`GemmCost::best`] among `tiles` (not empty).
    pub fn best_of(shape: Shape, sms: u32, budget: u32, tiles: &[GemmTile]) -> GemmCost {
        let grid = u64::from(sms.max(1)).min(clamp_budget(budget));
        let kblocks = shape.k.div_ceil(abi::GEMM_TILE_K);
        let mut best: Option<GemmCost> = None;
        for &tile in tiles {
            for splits in 1..=MAX_SPLITS {
                if splits > 1 && kblocks.div_ceil(splits) < MIN_SPLIT_KBLOCKS {
                    break;
                }
                if let Some(c) = GemmCost::of(shape, tile, splits, grid) {
                    if best.is_none_or(|b| c.ns < b.ns) {
                        best = Some(c);
                    }
                }
            }
        }
        best.expect("one split always keeps its own plan")
    }
}

/// The skinny GEMM takes M from here to [`abi::SKINNY_MAX_M`] by default (where its cost beats the TMA
/// GEMM's, [`SkinnyCost`]). Below it the GEMV's row-streaming form keeps M <= 4: measured at 3.97 TB/s
/// on lm_head at M = 1 (93% of the copy rate; /work/data/job1 run of 2026-12-02), where the skinny GEMM
/// is not yet measured. Raise this past 64 to take the path out of the default plans (forced plans still
/// run it).
pub const SKINNY_MIN_M: u32 = abi::ROWS_MAX_M + 1;

/// The skinny GEMM's cost model, fitted to its first H200 run (`matmul_bench --alternatives`, every
/// Qwen3 shape at M = 1..64 with the planner's split and with one split, 60 timings;
/// docs/perf/2026-12-02-s4-libraries.md):
///
/// ```text
/// t = FIXED + max(stream, chain) + reduce
/// chain  = waves * k_blocks_per_split * STAGE_NS[variant] * max(1, grid / sms)
/// reduce = waves * (REDUCE_NS + splits * slice_bytes * REDUCE_PS_PER_BYTE / 1000)   (splits > 1)
/// ```
///
/// `stream` is W, x and y once at [`SkinnyCost::RATE_PERMILLE`] of the copy rate. One CTA alone on its SM
/// takes [`SkinnyCost::STAGE_NS`] a 64-element K stage (unsplit products with 16 and 12 CTAs fit it
/// within 3%), and two CTAs on an SM share it. The split's reduction is the model's largest surprise:
/// the last CTA of a tile adds the others' partial sums at ~15 GB/s (9 us for qkv's 131 KiB at M = 64),
/// so at M >= 16 fewer splits win where the planner's old byte count took up to 8. The split is chosen
/// by this model; max error over the fitted timings about 15%.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkinnyCost {
    /// The launch.
    pub plan: abi::SkinnyPlan,
    /// The predicted device time, ns.
    pub ns: u64,
}

impl SkinnyCost {
    /// Of the copy rate ([`GemmCost::HBM_BYTES_PER_US`]) the stream reaches, per mille (lm_head at M = 1
    /// unsplit: 99%; qkv at M = 1-8: 87-90%).
    pub const RATE_PERMILLE: u64 = 950;
    /// Of the copy rate the TMA GEMM streams a weight matrix past L2 at when M is small, per mille.
    pub const GEMM_STREAM_PERMILLE: u64 = 730;
    /// One 64-element K stage of one CTA alone on its SM, per variant (8, 16, 32, 64 rows of x), ns.
    pub const STAGE_NS: [u64; 4] = [244, 386, 508, 637];
    /// The launch's fill and drain, ns.
    pub const FIXED_NS: u64 = 1700;
    /// The split reduction's fixed part per wave, ns.
    pub const REDUCE_NS: u64 = 500;
    /// The split reduction per byte of one split's partial sums of a tile, ps.
    pub const REDUCE_PS_PER_BYTE: u64 = 65;

    /// The planner's skinny launch of `shape` (M <= 64, K >= 1): the cheapest split by this model.
    pub fn of(shape: Shape, sms: u32, budget: u32) -> SkinnyCost {
        (1..=abi::SKINNY_MAX_SPLITS)
            .filter_map(|s| Self::with_split(shape, sms, budget, s))
            .min_by_key(|c| c.ns)
            .expect("one split always keeps its own plan")
    }

    /// The launch of `shape` in `splits` K slices and its cost, or `None` when K's 64-element blocks do
    /// not keep that many slices.
    pub fn with_split(shape: Shape, sms: u32, budget: u32, splits: u32) -> Option<SkinnyCost> {
        let sms = u64::from(sms.max(1));
        let variant = abi::skinny_variant(shape.m);
        let tiles = shape.n.div_ceil(abi::SKINNY_ROWS);
        let kblocks = shape.k.div_ceil(abi::SKINNY_KC);
        let per = kblocks.div_ceil(splits.max(1));
        if splits == 0 || kblocks.div_ceil(per) != splits {
            return None;
        }
        let slots = (u64::from(abi::SKINNY_CTAS_PER_SM) * sms).min(clamp_budget(budget));
        let units = u64::from(tiles) * u64::from(splits);
        let grid = units.min(slots);
        let plan = abi::SkinnyPlan { variant, splits, k_per_split: per * abi::SKINNY_KC, grid: word(grid), tiles };
        let waves = units.div_ceil(grid);
        let chain = waves * u64::from(per) * Self::STAGE_NS[variant] * grid.max(sms) / sms;
        let reduce = if splits > 1 {
            let slice = u64::from(abi::SKINNY_ROWS) * 8 * u64::from(abi::SKINNY_MB[variant]) * 4;
            waves * (Self::REDUCE_NS + u64::from(splits) * slice * Self::REDUCE_PS_PER_BYTE / 1000)
        } else {
            0
        };
        Some(SkinnyCost { plan, ns: Self::FIXED_NS + Self::stream_ns(shape).max(chain) + reduce })
    }

    /// W, x and the f32 y once from HBM at [`SkinnyCost::RATE_PERMILLE`] of the copy rate, ns.
    pub fn stream_ns(shape: Shape) -> u64 {
        let (m, n, k) = (u64::from(shape.m), u64::from(shape.n), u64::from(shape.k));
        let bytes = (n + m) * k * 2 + m * n * 4;
        bytes * 1000 * 1000 / (GemmCost::HBM_BYTES_PER_US * Self::RATE_PERMILLE)
    }

    /// Whether this beats the TMA GEMM's `gemm` on the same shape. The GEMM's model floors it at the
    /// full copy rate, which it does not reach on a stream-bound shape: lm_head at M = 1-64 took 184-213
    /// us by the TMA-store entry, [`SkinnyCost::GEMM_STREAM_PERMILLE`] of copy, against a 147 us floor.
    /// So the GEMM is taken at no less than its measured stream rate and the same fill for the comparison.
    pub fn beats(&self, shape: Shape, gemm: &GemmCost) -> bool {
        let gemm_stream = Self::stream_ns(shape) * Self::RATE_PERMILLE / Self::GEMM_STREAM_PERMILLE;
        self.ns <= gemm.ns.max(gemm_stream + Self::FIXED_NS)
    }
}

/// A kernel's work buffer: `floats` more of the scratch when it needs any, else `out`, which a kernel with
/// nothing to keep (one split) takes in that argument's place and does not read.
fn scratch_or(floats: u64, out: Arg, scratch: &mut u64) -> Arg {
    if floats == 0 {
        return out;
    }
    let at = Arg::Scratch(*scratch * 4);
    *scratch += floats;
    at
}

/// The skinny GEMM's launch of `plan` into `out` (f32, or bf16 stored directly when `bf16`), its scratch
/// and tickets.
fn skinny_step(shape: Shape, plan: abi::SkinnyPlan, out: Arg, bf16: bool, scratch: &mut u64) -> (Step, u64) {
    let floats = abi::skinny_work_floats(plan.variant, plan.tiles, plan.splits);
    let work = scratch_or(floats, out, scratch);
    let step = Step {
        kern: Kern::Skinny(plan.variant),
        grid: [plan.grid, 1, 1],
        block: [abi::SKINNY_THREADS, 1, 1],
        dynamic_shared: abi::skinny_smem_bytes(plan.variant),
        args: vec![
            Arg::X(0),
            Arg::W(0),
            out,
            work,
            Arg::Tickets(0),
            Arg::Word(shape.m),
            Arg::Word(shape.n),
            Arg::Word(shape.k),
            Arg::Word(plan.k_per_split),
            Arg::Word(plan.splits),
            Arg::Word(u32::from(bf16)),
        ],
    };
    (step, if plan.splits > 1 { u64::from(plan.tiles) } else { 0 })
}

/// The skinny GEMM's plan for `split` K slices (`None`: the planner's), or why it cannot run `shape`.
fn skinny_forced(shape: Shape, opts: DenseOpts, split: Option<u32>) -> Result<abi::SkinnyPlan, ForcedRefusal> {
    if let Some(why) = skinny_refusal(shape, opts) {
        return Err(why);
    }
    match split {
        None => Ok(SkinnyCost::of(shape, opts.sms, opts.budget).plan),
        Some(0) => Err(ForcedRefusal::ZeroSplit),
        Some(s) => match SkinnyCost::with_split(shape, opts.sms, opts.budget, s) {
            Some(c) => Ok(c.plan),
            None => {
                let kblocks = shape.k.div_ceil(abi::SKINNY_KC);
                Err(ForcedRefusal::SplitNotKept { asked: s, kept: kblocks.div_ceil(kblocks.div_ceil(s)) })
            }
        },
    }
}

/// The most K splits [`swapab_splits`] chooses.
pub const SWAPAB_MAX_SPLITS: u32 = 16;

/// What a work unit of the swapped small-M GEMM costs beyond its K blocks, in K blocks: the ring's fill
/// at the unit's start and its store or partial slice at the end.
const SWAPAB_UNIT_BLOCKS: u64 = 2;

/// The planner's K split of the swapped small-M GEMM for `shape`: the split (of those K's blocks keep, up
/// to [`SWAPAB_MAX_SPLITS`]) that makes the fewest block-times on the busiest CTA, counting
/// [`SWAPAB_UNIT_BLOCKS`] a unit; ties keep the fewer splits.
pub(crate) fn swapab_splits(shape: Shape, sms: u32, budget: u32) -> u32 {
    let Some(v) = abi::swapab_variant(shape.m) else { return 1 };
    let grid = u64::from(sms.max(1)).min(clamp_budget(budget));
    let kblocks = shape.k.div_ceil(abi::GEMM_TILE_K).max(1);
    (1..=SWAPAB_MAX_SPLITS.min(kblocks))
        .map(|asked| abi::GemmSplit::new(shape.n, shape.m, shape.k, abi::GEMM_SWAPAB[v].mb, asked))
        .min_by_key(|s| ceil(u64::from(s.units), grid) * (u64::from(s.per) + SWAPAB_UNIT_BLOCKS))
        .map_or(1, |s| s.splits)
}

/// Why the small-M paths (the skinny GEMM and the swapped TMA GEMM) cannot run `shape`: bf16 only, 16-byte
/// chunks of x and W rows (K % 8 == 0, aligned operands), at most 64 rows of x. Both store y element by
/// element, so y needs only its element's alignment.
fn skinny_refusal(shape: Shape, opts: DenseOpts) -> Option<ForcedRefusal> {
    if !shape.k.is_multiple_of(8) {
        Some(ForcedRefusal::KNotMultiple { of: 8 })
    } else if !opts.aligned {
        Some(ForcedRefusal::Unaligned)
    } else if shape.m > abi::SKINNY_MAX_M {
        Some(ForcedRefusal::MPastPath { max: abi::SKINNY_MAX_M })
    } else {
        None
    }
}

/// The GEMV's split for `shape` (bf16, K % 32 == 0): gemv_check.cu's planner, lowered to the budget, then
/// raised until each K slice is a whole number of the MMA form's 128-element unrolled steps (no tail
/// loop) while the grid fits the budget: q/k/v at batch 1 (5120 x 2048) took 10.4 us a product in 7
/// slices of 320 and 9.3 in 8 of 256, 11.8 and 10.0 at M = 4 (`matmul_bench --gemv-splits`,
/// docs/perf/2026-12-03-s8-qwen3-step.md).
fn gemv_auto_split(shape: Shape, sms: u64, budget: u64) -> u64 {
    let (n, k) = (u64::from(shape.n), u64::from(shape.k));
    let blocks = ceil(n, u64::from(abi::GEMV_ROWS));
    let (split, kps) = k_split(k, ceil(4 * sms, blocks), blocks, budget);
    let step = u64::from(GEMV_STEP_K);
    let whole = kps / step * step;
    if split > 1 && kps % step != 0 && whole >= step && blocks * ceil(k, whole) <= budget {
        return ceil(k, whole);
    }
    split
}

/// K elements of one unrolled step of the GEMV's MMA form (`GEMV_UNROLL` 32-element chunks).
const GEMV_STEP_K: u32 = 128;

/// The GEMV's launch for `split` K slices (the caller checked that K's chunks keep it), and the plan's
/// scratch and split. Past the budget the kernel's CTAs walk the 64-row blocks grid-stride. With `y16`
/// the bf16-output entry, whose slices go through the scratch whatever the split; with `rows_entry` (the
/// planner's own choice, not a forced plan) one row of x streamed unsplit takes the dense rows entry.
fn gemv_step(shape: Shape, split: u64, budget: u64, out: Arg, y16: bool, rows_entry: bool, scratch: &mut u64) -> Step {
    let (m, n, k) = (u64::from(shape.m), u64::from(shape.n), u64::from(shape.k));
    let blocks = ceil(n, u64::from(abi::GEMV_ROWS));
    let kps = round_up(ceil(k, split), 32);
    let gx = blocks.min((budget / split).max(1));
    let work = scratch_or(if split > 1 || y16 { split * m * n } else { 0 }, out, scratch);
    // One row of x streamed unsplit (the kernel's row form, K >= ROWS_MIN_K) takes the dense rows entry:
    // lm_head at batch 1, 143 us against the m1 entry's 152-155 (docs/perf/2026-12-04-s10-gemv-variants.md).
    let kern = if y16 {
        Kern::GemvY16(mb_index(m))
    } else if rows_entry && m == 1 && split == 1 && k >= u64::from(ROWS_MIN_K) {
        Kern::GemvRows
    } else {
        Kern::Gemv(mb_index(m))
    };
    Step {
        kern,
        grid: [word(gx), word(split), 1],
        block: [abi::GEMV_THREADS, 1, 1],
        dynamic_shared: 0,
        args: vec![
            Arg::X(0),
            Arg::W(0),
            out,
            work,
            Arg::Tickets(0),
            Arg::Word(shape.m),
            Arg::Word(shape.n),
            Arg::Word(shape.k),
            Arg::Word(word(kps)),
        ],
    }
}

/// The TMA GEMM's launch in `tile` with `splits` (kept by K's blocks, the caller checked) by `entry` (the
/// direct one unless the product is unsplit: the caller checked), its tickets and its descriptors.
#[allow(clippy::too_many_arguments)]
fn gemm_step(
    shape: Shape,
    tile: GemmTile,
    splits: u32,
    entry: WideEntry,
    sms: u64,
    budget: u64,
    out: Arg,
    y16: bool,
    scratch: &mut u64,
) -> (Step, u64, TmaPlan) {
    let (m, n) = (u64::from(shape.m), u64::from(shape.n));
    let s = abi::GemmSplit::new(shape.m, shape.n, shape.k, tile.n(), splits);
    let dims = [Arg::Word(shape.m), Arg::Word(shape.n), Arg::Word(shape.k)];
    if entry != WideEntry::Direct {
        // The TMA-store entries: `(tmap_a, tmap_b, tmap_y, y, M, N, K)`. For N % 4 != 0 they store
        // directly into y and never read tmap_y, so no descriptor is written and 0 is passed.
        let y_map = shape.n.is_multiple_of(4);
        let tmap_y = if y_map { Arg::Tma(2 * TMA_DESC_BYTES as u64) } else { Arg::Wide(0) };
        let maps = [Arg::Tma(0), Arg::Tma(TMA_DESC_BYTES as u64), tmap_y, out];
        if entry == WideEntry::StreamK {
            // `(tmap_a, tmap_b, tmap_y, y, partials, flags, M, N, K)`: a slot of partial sums per CTA after
            // the f32 product of a bf16 output, two flags per CTA; at least GEMM_SK_MIN_ITERS iterations a
            // CTA (or one CTA), so a finisher adds few slots.
            let grid = (stream_k_iters(shape, tile) / abi::GEMM_SK_MIN_ITERS).clamp(1, sms.min(budget));
            let partials = Arg::Scratch(*scratch * 4);
            *scratch += grid * abi::gemm_sk_slot_floats(tile.n());
            let args = [&maps[..], &[partials, Arg::Tickets(0)], &dims[..]].concat();
            let (kern, smem) = match tile {
                GemmTile::Wide => (Kern::GemmSk, abi::GEMM_SK_SMEM_BYTES),
                GemmTile::Narrow => (Kern::GemmSkN128, abi::GEMM_SK_N128_SMEM_BYTES),
                GemmTile::N160 | GemmTile::N192 | GemmTile::N96 | GemmTile::N64 => {
                    unreachable!("entry_refusal refuses stream-K on {tile:?}")
                }
            };
            let step =
                Step { kern, grid: [word(grid), 1, 1], block: [abi::GEMM_THREADS, 1, 1], dynamic_shared: smem, args };
            return (step, 2 * grid, TmaPlan { b_rows: tile.n(), y: y_map.then_some(out), y16: false, swapped: false });
        }
        let args = [&maps[..], &dims[..]].concat();
        let tiles = u64::from(s.tiles);
        let (kern, grid, smem, b_rows) = if entry == WideEntry::Cluster {
            let c = u64::from(abi::GEMM_MC_CLUSTER);
            // Whole clusters: a pair per cluster, as many as there are pairs of tile rows, as fit on the
            // SMs and as the budget holds (the caller checked it holds one).
            let pairs = ceil(m, u64::from(abi::GEMM_TILE_M) * c) * ceil(n, u64::from(tile.n()));
            let grid = c * pairs.min((sms / c).max(1)).min(budget / c);
            match (tile, tile.fitted()) {
                (GemmTile::Wide, _) => (Kern::GemmMc, grid, abi::GEMM_MC_SMEM_BYTES, abi::GEMM_MC_B_BOX_ROWS),
                (_, None) => (Kern::GemmMcN128, grid, abi::GEMM_MC_N128_SMEM_BYTES, abi::GEMM_MC_N128_B_BOX_ROWS),
                (_, Some(i)) => {
                    let f = abi::GEMM_FITTED[i];
                    (Kern::GemmMcFit(i), grid, f.smem_bytes(), f.mc_b_box_rows())
                }
            }
        } else {
            let grid = tiles.min(sms).min(budget);
            match (tile, tile.fitted()) {
                (GemmTile::Narrow, _) if entry == WideEntry::PingPong => {
                    (Kern::GemmPp(y16), grid, abi::GEMM_TS_N128_SMEM_BYTES, tile.n())
                }
                (GemmTile::Wide, _) => (Kern::GemmTs, grid, abi::GEMM_TS_SMEM_BYTES, tile.n()),
                (_, None) => (Kern::GemmTsN128, grid, abi::GEMM_TS_N128_SMEM_BYTES, tile.n()),
                (_, Some(i)) => (Kern::GemmTsFit(i), grid, abi::GEMM_FITTED[i].smem_bytes(), tile.n()),
            }
        };
        // The bf16-output entry of the same width and form: the same grid, B box and shared memory.
        let kern = match kern {
            Kern::GemmPp(_) => kern,
            _ if y16 => Kern::GemmY16(tile.y16(), entry == WideEntry::Cluster),
            _ => kern,
        };
        let step =
            Step { kern, grid: [word(grid), 1, 1], block: [abi::GEMM_THREADS, 1, 1], dynamic_shared: smem, args };
        return (step, 0, TmaPlan { b_rows, y: y_map.then_some(out), y16, swapped: false });
    }
    let tma_args = [Arg::Tma(0), Arg::Tma(TMA_DESC_BYTES as u64), out];
    let work = scratch_or(if s.splits > 1 { u64::from(s.splits) * m * n } else { 0 }, out, scratch);
    let split_args = || {
        let mut args = tma_args.to_vec();
        args.extend([work, Arg::Tickets(0)]);
        args.extend(dims);
        args.push(Arg::Word(s.splits));
        args
    };
    let (kern, args, smem) = match (tile, s.splits > 1) {
        (GemmTile::Narrow, _) => (Kern::GemmN128, split_args(), GEMM_N128_SMEM_BYTES),
        (GemmTile::N160 | GemmTile::N192 | GemmTile::N96 | GemmTile::N64, _) => {
            unreachable!("entry_refusal refuses the direct entry on {tile:?}")
        }
        (GemmTile::Wide, true) => (Kern::GemmSplitK, split_args(), GEMM_SMEM_BYTES),
        (GemmTile::Wide, false) => (Kern::Gemm, [tma_args, dims].concat(), GEMM_SMEM_BYTES),
    };
    let units = u64::from(s.tiles) * u64::from(s.splits);
    let step = Step {
        kern,
        grid: [word(units.min(sms).min(budget)), 1, 1],
        block: [abi::GEMM_THREADS, 1, 1],
        dynamic_shared: smem,
        args,
    };
    let tickets = if s.splits > 1 { u64::from(s.tiles) } else { 0 };
    (step, tickets, TmaPlan { b_rows: tile.n(), y: None, y16: false, swapped: false })
}

/// The path the planner takes for a dense product (before the SIMT fallback).
enum Choice {
    /// The GEMV at a K split; `true`: the planner's own choice, which may take the dense rows entry (a
    /// forced plan names the m1 entry and gets it).
    Gemv(u64, bool),
    Skinny(abi::SkinnyPlan),
    /// The swapped small-M TMA GEMM: its [`abi::GEMM_SWAPAB`] entry and K splits.
    Swapab(usize, u32),
    /// The TMA GEMM: its tile, K splits and entry (not [`WideEntry::Direct`] only unsplit).
    Gemm(GemmTile, u32, WideEntry),
    Simt,
}

/// Why `entry` cannot run an unsplit product of `shape` in `tile` (the TMA GEMM's own requirements
/// checked).
fn entry_refusal(entry: WideEntry, tile: GemmTile, shape: Shape, opts: DenseOpts) -> Option<ForcedRefusal> {
    if tile.fitted().is_some() && matches!(entry, WideEntry::Direct | WideEntry::StreamK)
        || entry == WideEntry::PingPong && tile != GemmTile::Narrow
    {
        return Some(ForcedRefusal::NoEntryForTile { tile, entry });
    }
    let budget = clamp_budget(opts.budget);
    if entry == WideEntry::Cluster && budget < u64::from(abi::GEMM_MC_CLUSTER) {
        return Some(ForcedRefusal::ClusterPastBudget { cluster: abi::GEMM_MC_CLUSTER, budget: word(budget) });
    }
    let iters = stream_k_iters(shape, tile);
    if entry == WideEntry::StreamK && iters >= abi::GEMM_SK_MAX_ITERS {
        return Some(ForcedRefusal::IterationsPastKernel { iters, max: abi::GEMM_SK_MAX_ITERS });
    }
    // y's descriptor holds a global address of whole 16-byte units; a bf16 output's f32 product is the
    // workspace's, which is.
    let y_map = shape.n.is_multiple_of(4);
    if entry != WideEntry::Direct && y_map && !(opts.y_aligned16 || opts.out_bf16) {
        return Some(ForcedRefusal::Unaligned);
    }
    None
}

/// The entry the planner runs an unsplit tile with: `wanted` where it can run, else the TMA-store entry
/// (for a cluster past the budget), else the direct one.
fn wide_entry(wanted: WideEntry, tile: GemmTile, shape: Shape, opts: DenseOpts) -> WideEntry {
    let tries: &[WideEntry] = match wanted {
        WideEntry::Cluster => &[WideEntry::Cluster, WideEntry::TmaStore],
        WideEntry::StreamK => &[WideEntry::StreamK, WideEntry::TmaStore],
        WideEntry::PingPong => &[WideEntry::PingPong, WideEntry::TmaStore],
        WideEntry::TmaStore => &[WideEntry::TmaStore],
        WideEntry::Direct => &[],
    };
    tries.iter().copied().find(|&e| entry_refusal(e, tile, shape, opts).is_none()).unwrap_or(WideEntry::Direct)
}

/// A product's iterations in stream-K order: its tiles times K's blocks.
fn stream_k_iters(shape: Shape, tile: GemmTile) -> u64 {
    let tiles = ceil(u64::from(shape.m), u64::from(abi::GEMM_TILE_M)) * ceil(u64::from(shape.n), u64::from(tile.n()));
    tiles * ceil(u64::from(shape.k), u64::from(abi::GEMM_TILE_K))
}

/// The plan of a dense product (`shape` checked: no side is 0).
pub(crate) fn dense(elem: Elem, shape: Shape, opts: DenseOpts) -> Plan {
    dense_with(elem, shape, opts, WIDE_ENTRY)
}

/// [`dense`] with `wide` as the entry of unsplit wide tiles (the tests try each); unsplit narrow tiles
/// take [`NARROW_ENTRY`].
fn dense_with(elem: Elem, shape: Shape, opts: DenseOpts, wide: WideEntry) -> Plan {
    let (m, k) = (u64::from(shape.m), u64::from(shape.k));
    let (sms, budget) = (u64::from(opts.sms.max(1)), clamp_budget(opts.budget));
    // A bf16 output's f32 product is the workspace's (aligned); only a direct f32 output can be unaligned.
    let y_aligned = opts.y_aligned || opts.out_bf16;
    let bf16 = elem == Elem::Bf16 && opts.aligned;
    let gemm_ok = bf16 && y_aligned && k.is_multiple_of(8);
    // The GEMV's row form streams W fastest below SKINNY_MIN_M; past it the skinny GEMM or the TMA GEMM
    // beat it at every Qwen3 shape (down at M = 32: GEMV 18.7 us, narrow TMA GEMM 6.9;
    // docs/perf/2026-12-02-s4-libraries.md).
    let gemv_streams = m < u64::from(SKINNY_MIN_M);
    let gemv_ok = bf16 && k.is_multiple_of(32);
    // Below SKINNY_MIN_M the GEMV's row form runs where it can (K % 32 == 0).
    let skinny = (bf16 && (shape.m >= SKINNY_MIN_M || !gemv_ok) && skinny_refusal(shape, opts).is_none())
        .then(|| SkinnyCost::of(shape, opts.sms, opts.budget));
    // The skinny GEMM's boundary with the TMA GEMM was fitted against the wide and narrow tiles, and the
    // model prices the fitted widths far too low at M <= 64 (QKV at M = 64: 64 columns modelled 6.75 us,
    // measured 15.5), so it is decided against those two; the TMA GEMM's tile is then the planner's,
    // fitted widths included where y can take their TMA-store entries.
    let classic = gemm_ok.then(|| GemmCost::best(shape, opts.sms, opts.budget, None));
    let gemm = classic.map(|c| {
        let staged = entry_refusal(WideEntry::TmaStore, GemmTile::Wide, shape, opts).is_none();
        c.or_fitted(shape, opts.sms, opts.budget, staged)
    });
    let choice = if let Some(c) = skinny.filter(|c| classic.is_none_or(|g| c.beats(shape, &g))) {
        Choice::Skinny(c.plan)
    } else if gemv_ok && (gemv_streams || (!gemm_ok && m <= GEMV_ANY_M)) {
        Choice::Gemv(gemv_auto_split(shape, sms, budget), true)
    } else if gemm_ok {
        let c = gemm.expect("gemm_ok");
        let pingpong = c.splits == 1
            && pingpong_pays(shape, opts.sms, opts.budget)
            && entry_refusal(WideEntry::PingPong, GemmTile::Narrow, shape, opts).is_none();
        let entry = match (c.tile, c.splits) {
            _ if pingpong => WideEntry::PingPong,
            (GemmTile::Wide, 1) => wide_entry(wide, c.tile, shape, opts),
            (GemmTile::Narrow, 1) => wide_entry(NARROW_ENTRY, c.tile, shape, opts),
            (tile, _) if tile.fitted().is_some() => wide_entry(FITTED_ENTRY, tile, shape, opts),
            _ => WideEntry::Direct,
        };
        let tile = if pingpong { GemmTile::Narrow } else { c.tile };
        Choice::Gemm(tile, c.splits, entry)
    } else {
        Choice::Simt
    };
    build(elem, shape, opts, choice)
}

/// The plan of a dense product in the path `forced` names, or why that path cannot run it.
pub(crate) fn dense_forced(elem: Elem, shape: Shape, opts: DenseOpts, forced: ForcedPlan) -> Result<Plan, PlanError> {
    let (k, budget) = (u64::from(shape.k), clamp_budget(opts.budget));
    let refuse = |why| Err(PlanError::Forced { forced, shape, why });
    if elem != Elem::Bf16 {
        return refuse(ForcedRefusal::NotBf16);
    }
    let choice = match forced {
        ForcedPlan::Gemv { split } => {
            if !k.is_multiple_of(32) {
                return refuse(ForcedRefusal::KNotMultiple { of: 32 });
            }
            if !opts.aligned {
                return refuse(ForcedRefusal::Unaligned);
            }
            let split = match split {
                None => gemv_auto_split(shape, u64::from(opts.sms.max(1)), budget),
                Some(0) => return refuse(ForcedRefusal::ZeroSplit),
                Some(s) => u64::from(s),
            };
            let kept = ceil(k, round_up(ceil(k, split), 32));
            if kept != split {
                return refuse(ForcedRefusal::SplitNotKept { asked: word(split), kept: word(kept) });
            }
            if split > budget {
                return refuse(ForcedRefusal::SplitPastBudget { split: word(split), budget: word(budget) });
            }
            Choice::Gemv(split, false)
        }
        ForcedPlan::Gemm { tile, splits } => {
            let direct = entry_refusal(WideEntry::Direct, tile, shape, opts);
            if let Some(why) = gemm_refusal(k, opts).or(direct) {
                return refuse(why);
            }
            let splits = match splits {
                None => GemmCost::best(shape, opts.sms, opts.budget, Some(tile)).splits,
                Some(0) => return refuse(ForcedRefusal::ZeroSplit),
                Some(s) => s,
            };
            let kept = abi::GemmSplit::new(shape.m, shape.n, shape.k, tile.n(), splits).splits;
            if kept != splits {
                return refuse(ForcedRefusal::SplitNotKept { asked: splits, kept });
            }
            Choice::Gemm(tile, splits, WideEntry::Direct)
        }
        ForcedPlan::GemmTmaStore { tile, cluster } => {
            let entry = if cluster { WideEntry::Cluster } else { WideEntry::TmaStore };
            if let Some(why) = gemm_refusal(k, opts).or_else(|| entry_refusal(entry, tile, shape, opts)) {
                return refuse(why);
            }
            Choice::Gemm(tile, 1, entry)
        }
        ForcedPlan::GemmPingPong { tile } => {
            let entry = WideEntry::PingPong;
            if let Some(why) = gemm_refusal(k, opts).or_else(|| entry_refusal(entry, tile, shape, opts)) {
                return refuse(why);
            }
            Choice::Gemm(tile, 1, entry)
        }
        ForcedPlan::GemmStreamK { tile } => {
            let entry = WideEntry::StreamK;
            if let Some(why) = gemm_refusal(k, opts).or_else(|| entry_refusal(entry, tile, shape, opts)) {
                return refuse(why);
            }
            Choice::Gemm(tile, 1, entry)
        }
        ForcedPlan::Skinny { split } => match skinny_forced(shape, opts, split) {
            Ok(plan) => Choice::Skinny(plan),
            Err(why) => return refuse(why),
        },
        ForcedPlan::Swapab { splits } => {
            if let Some(why) = skinny_refusal(shape, opts) {
                return refuse(why);
            }
            let v = abi::swapab_variant(shape.m).expect("a box holds every M up to SKINNY_MAX_M");
            let splits = match splits {
                None => swapab_splits(shape, opts.sms, opts.budget),
                Some(0) => return refuse(ForcedRefusal::ZeroSplit),
                Some(s) => s,
            };
            let kept = abi::GemmSplit::new(shape.n, shape.m, shape.k, abi::GEMM_SWAPAB[v].mb, splits).splits;
            if kept != splits {
                return refuse(ForcedRefusal::SplitNotKept { asked: splits, kept });
            }
            Choice::Swapab(v, splits)
        }
    };
    Ok(build(elem, shape, opts, choice))
}

/// Why no TMA GEMM can run a product of this K and these operands: TMA strides whole 16-byte units of K,
/// x's and W's descriptors need 16-byte aligned addresses, the epilogues store f32 pairs.
fn gemm_refusal(k: u64, opts: DenseOpts) -> Option<ForcedRefusal> {
    if !k.is_multiple_of(8) {
        Some(ForcedRefusal::KNotMultiple { of: 8 })
    } else if !opts.aligned || !(opts.y_aligned || opts.out_bf16) {
        Some(ForcedRefusal::Unaligned)
    } else {
        None
    }
}

/// The launches of `choice` (checked to run `shape`), then the bf16 output's conversion.
fn build(elem: Elem, shape: Shape, opts: DenseOpts, choice: Choice) -> Plan {
    let (m, n, k) = (u64::from(shape.m), u64::from(shape.n), u64::from(shape.k));
    let (sms, budget) = (u64::from(opts.sms.max(1)), clamp_budget(opts.budget));
    // The skinny GEMM, the GEMV and the unsplit TMA-store tiles (where y can have a bf16 descriptor: N % 8
    // == 0, y 16-byte aligned) store a bf16 output themselves; the others' f32 product of one lies at the
    // workspace's start and a conversion follows.
    let y16 = opts.out_bf16
        && matches!(choice, Choice::Gemm(_, _, WideEntry::TmaStore | WideEntry::Cluster | WideEntry::PingPong))
        && shape.n.is_multiple_of(8)
        && opts.y_aligned16;
    let direct = matches!(choice, Choice::Skinny(_) | Choice::Gemv(..) | Choice::Swapab(..)) || y16;
    let out_bf16 = opts.out_bf16 && !direct;
    let out = |off: u64| if out_bf16 { Arg::Scratch(off) } else { Arg::Y(off) };
    let mut scratch = if out_bf16 { round_up(m * n, 64) } else { 0 };
    let mut steps = Vec::new();
    let (path, tickets, tma, split);
    match choice {
        Choice::Gemv(s, rows_entry) => {
            steps.push(gemv_step(shape, s, budget, out(0), opts.out_bf16, rows_entry, &mut scratch));
            let blocks = ceil(n, u64::from(abi::GEMV_ROWS));
            (path, tickets, tma, split) = (Path::Gemv, blocks, None, word(s));
        }
        Choice::Skinny(p) => {
            let (step, t) = skinny_step(shape, p, out(0), opts.out_bf16, &mut scratch);
            steps.push(step);
            (path, tickets, tma, split) = (Path::Skinny, t, None, p.splits);
        }
        Choice::Swapab(v, s) => {
            let f = abi::GEMM_SWAPAB[v];
            // The body's split of y's transpose: tiles of 128 W rows by `mb` x rows.
            let sp = abi::GemmSplit::new(shape.n, shape.m, shape.k, f.mb, s);
            let slices = if sp.splits > 1 { u64::from(sp.splits) * m * n } else { 0 };
            let work = scratch_or(slices, out(0), &mut scratch);
            let dims = [shape.m, shape.n, shape.k, sp.splits].map(Arg::Word);
            let args =
                [&[Arg::Tma(0), Arg::Tma(TMA_DESC_BYTES as u64), out(0), work, Arg::Tickets(0)][..], &dims].concat();
            let grid = u64::from(sp.units).min(sms).min(budget);
            steps.push(Step {
                kern: Kern::Swapab(v, opts.out_bf16),
                grid: [word(grid), 1, 1],
                block: [abi::GEMM_THREADS, 1, 1],
                dynamic_shared: f.smem_bytes(),
                args,
            });
            let maps = TmaPlan { b_rows: f.mb, y: None, y16: false, swapped: true };
            let words = if sp.splits > 1 { u64::from(sp.tiles) } else { 0 };
            (path, tickets, tma, split) = (Path::Gemm, words, Some(maps), sp.splits);
        }
        Choice::Gemm(tile, s, entry) => {
            let (step, t, maps) = gemm_step(shape, tile, s, entry, sms, budget, out(0), y16, &mut scratch);
            steps.push(step);
            (path, tickets, tma, split) = (Path::Gemm, t, Some(maps), s);
        }
        Choice::Simt => {
            let (kern, p) = match elem {
                Elem::Bf16 => (Kern::Simt, Path::SimtBf16),
                Elem::F32 => (Kern::F32, Path::SimtF32),
            };
            let e = elem.bytes();
            let gx = ceil(n, 128);
            let threads = match kern {
                Kern::F32 => abi::GEMM_F32_TN_V2[abi::GEMM_F32_TN_V2_BEST].threads,
                _ => abi::SIMT_THREADS,
            };
            let simt = |grid: [u64; 2], x: u64, w: u64, y: u64, rows: u64, cols: u64| Step {
                kern,
                grid: [word(grid[0]), word(grid[1]), 1],
                block: [threads, 1, 1],
                dynamic_shared: 0,
                args: vec![
                    Arg::X(x),
                    Arg::W(w),
                    out(y),
                    Arg::Word(word(rows)),
                    Arg::Word(word(cols)),
                    Arg::Word(shape.k),
                ],
            };
            if kern == Kern::F32 {
                // Persistent: its CTAs walk every tile, two an SM at most.
                let tiles = gx * ceil(m, 128);
                let per_sm = u64::from(abi::GEMM_F32_PERSISTENT_CTAS_PER_SM);
                steps.push(simt([tiles.min(per_sm * sms).min(budget), 1], 0, 0, 0, m, n));
            } else if gx <= budget {
                let band = 128 * (budget / gx);
                let mut m0 = 0;
                while m0 < m {
                    let rows = band.min(m - m0);
                    steps.push(simt([gx, ceil(rows, 128)], m0 * k * e, 0, m0 * n * 4, rows, n));
                    m0 += rows;
                }
            } else {
                let band = 128 * budget;
                for row in 0..m {
                    let mut n0 = 0;
                    while n0 < n {
                        let cols = band.min(n - n0);
                        steps.push(simt([ceil(cols, 128), 1], row * k * e, n0 * k * e, (row * n + n0) * 4, 1, cols));
                        n0 += cols;
                    }
                }
            }
            (path, tickets, tma, split) = (p, 0, None, 1);
        }
    }
    if out_bf16 {
        let count = m * n;
        steps.push(Step {
            kern: Kern::Convert,
            grid: [word(ceil(count, 256).min(budget)), 1, 1],
            block: [256, 1, 1],
            dynamic_shared: 0,
            args: vec![Arg::Scratch(0), Arg::Y(0), Arg::Wide(count)],
        });
    }
    Plan { path, steps, scratch, tickets, tma, split }
}

/// Why the SwiGLU GEMM cannot run a product ([`PlanError::Swiglu`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SwigluRefusal {
    /// K is not a multiple of 8: TMA strides rows in whole 16-byte units.
    KNotMultiple,
    /// x or W does not start 16-byte aligned (their descriptors' addresses), or y does not (its
    /// descriptor's: the epilogue stores through it only).
    Unaligned,
    /// y's width is not a multiple of `of` (4 for an f32 y, 8 for a bf16 one): its rows are no whole
    /// number of 16-byte units, so no descriptor of y exists.
    NNotMultiple {
        /// What N must be a multiple of.
        of: u32,
    },
}

impl core::fmt::Display for SwigluRefusal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            SwigluRefusal::KNotMultiple => f.write_str("K is not a multiple of 8"),
            SwigluRefusal::Unaligned => f.write_str("x, W or y does not start 16-byte aligned"),
            SwigluRefusal::NNotMultiple { of } => write!(f, "N is not a multiple of {of}"),
        }
    }
}

/// The cost the planner weighs a SwiGLU width by, ns: [`GemmCost`]'s unsplit form over the tile's
/// accumulator columns (`waves * tile_n / 256 * (EPILOGUE + kblocks * KBLOCK)`), with `tiles =
/// ceil(M / 128) * ceil(N / (tile_n / 2))` on `min(tiles, SMs, budget)` CTAs.
fn swiglu_cost(shape: Shape, f: abi::SwigluGemm, sms: u64, budget: u64) -> u64 {
    let tiles = swiglu_tiles(shape, f);
    let grid = tiles.min(sms).min(budget).max(1);
    let kblocks = ceil(u64::from(shape.k), u64::from(abi::GEMM_TILE_K));
    tiles.div_ceil(grid) * u64::from(f.tile_n) * (GemmCost::EPILOGUE_NS + kblocks * GemmCost::KBLOCK_NS) / 256
}

/// The SwiGLU GEMM's tiles of `shape` in `f`'s width: `tile_n / 2` columns of y each.
fn swiglu_tiles(shape: Shape, f: abi::SwigluGemm) -> u64 {
    ceil(u64::from(shape.m), u64::from(abi::GEMM_TILE_M)) * ceil(u64::from(shape.n), u64::from(f.b_box_rows()))
}

/// The plan of `y = silu(x . Wg^T) * (x . Wu^T)` (`shape` checked: no side is 0; y `[M, N]`, W the fused
/// gate+up weight `[2N, K]`, gate rows first): ONE launch of the SwiGLU GEMM ([`abi::GEMM_SWIGLU`]) at the
/// width [`swiglu_cost`] gives the least time, ties kept by the wider (as [`GemmCost::planned`] keeps
/// them: fewer loads of x, wider wgmmas). On the H200 (gemm_swiglu_check, docs/perf/
/// 2026-12-07-s21-h200-pingpong-swiglu.md, bf16 y) the model's widths were the measured best at every
/// shape timed: 192 at 4096 x 768 x 2048 (37.3 us; 128: 41.3, 256: 46.2), 128 at 512 (14.1; 192: 18.0),
/// 256 at 8192 (81.0; 192: 82.0) and at 4096 x 6144 (316.0; 192: 319.3). Refused where the kernel cannot
/// run ([`SwigluRefusal`]); nothing else is chosen in its place.
pub(crate) fn swiglu(shape: Shape, opts: DenseOpts) -> Result<Plan, PlanError> {
    let refuse = |why| Err(PlanError::Swiglu { shape, why });
    if !shape.k.is_multiple_of(8) {
        return refuse(SwigluRefusal::KNotMultiple);
    }
    if !opts.aligned || !opts.y_aligned16 {
        return refuse(SwigluRefusal::Unaligned);
    }
    let of = if opts.out_bf16 { 8 } else { 4 };
    if !shape.n.is_multiple_of(of) {
        return refuse(SwigluRefusal::NNotMultiple { of });
    }
    let (sms, budget) = (u64::from(opts.sms.max(1)), clamp_budget(opts.budget));
    // GEMM_SWIGLU is widest first, and `min_by_key` keeps the first of equal costs.
    let (i, f) = abi::GEMM_SWIGLU
        .iter()
        .copied()
        .enumerate()
        .min_by_key(|&(_, f)| swiglu_cost(shape, f, sms, budget))
        .expect("GEMM_SWIGLU is not empty");
    let tiles = swiglu_tiles(shape, f);
    let args = vec![
        Arg::Tma(0),
        Arg::Tma(TMA_DESC_BYTES as u64),
        Arg::Tma(2 * TMA_DESC_BYTES as u64),
        Arg::Y(0),
        Arg::Word(shape.m),
        Arg::Word(shape.n),
        Arg::Word(shape.k),
    ];
    let step = Step {
        kern: Kern::Swiglu(i, opts.out_bf16),
        grid: [word(tiles.min(sms).min(budget)), 1, 1],
        block: [abi::GEMM_THREADS, 1, 1],
        dynamic_shared: f.smem_bytes(),
        args,
    };
    let tma = Some(TmaPlan { b_rows: f.b_box_rows(), y: Some(Arg::Y(0)), y16: opts.out_bf16, swapped: false });
    Ok(Plan { path: Path::Gemm, steps: vec![step], scratch: 0, tickets: 0, tma, split: 1 })
}

/// The plan of a grouped product (`shape` checked: no side is 0, K % 32 == 0): its routing launch, then
/// ONE grouped GEMV over the list of touched experts that launch wrote. Refused when one expert's 64-row
/// blocks alone are past the budget.
///
/// `routing` names the routing launch: the route kernel over top-k choices in memory; the fused router
/// kernel (`omega_moe_router_route`: grid `ceil(E / ROUTER_ROWS)`, one ticket word after the GEMV's),
/// which first computes the router product of the same x and takes each token's top k; or none, over an
/// existing routing, the GEMV then taking a null `rows` — the kernels' flag that x holds one row per SLOT
/// (`y[s, :] = x[s, :] . W[e]^T`), which is what a down projection reads after SwiGLU of the gate+up
/// product that routed.
///
/// The GEMV's grid is `[ceil(N / 64), split, z]`: z covers the `min(E, tokens * top_k)` entries the list
/// can have (CTA z takes entries z, z + gridDim.z, .. below the device's count, so an untouched expert
/// costs nothing and a z past the count exits at once), lowered until the grid fits the budget. The split
/// makes `blocks * split * entries` about 4 CTAs per SM, and stays at slices of at least 1024 of K when
/// the experts' rows are few enough for the row-streaming form (`ROWS_MAX_M`), which streams W at the
/// copy rate where the MMA form over short slices is latency-bound. Once `blocks * entries` CTAs cover
/// the SMs, the MMA form is not split at all (measured faster at decode's down product), nor are rows of
/// at most `ROWS_ENTRY_MAX_M` an expert, which go to the rows entry (`omega_moe_gemv_bf16_m1_rows`).
/// `forced`: the K split a benchmark asked for ([`crate::libs::matmul::Matmul::set_grouped_split`]) in
/// place of the planner's, refused when K's 32-element chunks cannot make it.
pub(crate) fn grouped(
    shape: GroupedShape,
    sms: u32,
    budget: u32,
    routing: Routing,
    forced: Option<u32>,
) -> Result<Plan, PlanError> {
    let routed = routing == Routing::Existing;
    let (n, k, e) = (u64::from(shape.n), u64::from(shape.k), u64::from(shape.experts));
    let budget = clamp_budget(budget);
    let sms = u64::from(sms.max(1));
    let choices = shape.choices();
    let layout = shape.routing();
    let blocks = ceil(n, u64::from(abi::GEMV_ROWS));
    if blocks > budget {
        return Err(PlanError::ExpertPastBudget { blocks, budget: word(budget) });
    }
    let entries = layout.experts_capacity() as u64;
    // Under random routing an expert gets about `choices / E` rows; twice that leaves room for the
    // imbalance (an expert with more rows than one pass takes another pass over its slice, from L2).
    let rows_hint = u64::from(shape.tokens).min(2 * ceil(choices, e));
    let mb = mb_index(rows_hint);
    let (mut split, _) = k_split(k, ceil(4 * sms, blocks * entries), blocks, budget);
    let rows_form = mb == 0 && rows_hint <= u64::from(abi::ROWS_MAX_M) && k >= 2 * u64::from(ROWS_MIN_K);
    // With every SM given a CTA and at most ROWS_ENTRY_MAX_M rows an expert, the rows entry streams them
    // unsplit: decode's gate_up, 1536 x 2048 an expert, 836 us a step at batch 1 and 3995 at batch 8
    // against the m1 entry's 896 (in two slices) and 4145, but 8826 at batch 32 (4 rows) against 8683
    // (docs/perf/2026-12-04-s10-gemv-variants.md).
    let rows_entry = rows_form && rows_hint <= ROWS_ENTRY_MAX_M && blocks * entries >= sms;
    if rows_entry {
        split = 1;
    } else if rows_form {
        split = split.min(k / u64::from(ROWS_MIN_K));
    } else if blocks * entries >= sms {
        // The MMA form over short slices is latency-bound: with a CTA for every SM already, no split
        // (decode's down product, 8 x 2048 x 768 at batch 1: 9.6 us a layer unsplit, 10.8 in two slices,
        // 12.7 in three; qwen3_decode --grouped-split, docs/perf/2026-12-03-s6-qwen3-step.md).
        split = 1;
    }
    if let Some(f) = forced {
        if f == 0 || u64::from(f) > k / 32 || blocks * u64::from(f) > budget {
            return Err(PlanError::GroupedSplit { split: f, k: shape.k, blocks, budget: word(budget) });
        }
        split = u64::from(f);
    }
    let kps = round_up(ceil(k, split), 32);
    let split = ceil(k, kps);
    let z = entries.min(budget / (blocks * split)).max(1);
    let word_at = |w: usize| (w * 4) as u64;
    // What both routing kernels store: offsets, rows, pairs, the drop count, the touched experts.
    let route_outs =
        [layout.offsets, layout.rows, layout.pairs, layout.dropped, layout.active].map(|w| Arg::Routing(word_at(w)));
    let mut args = vec![Arg::TopK, Arg::Word(shape.tokens), Arg::Word(shape.top_k), Arg::Word(shape.experts)];
    args.extend(route_outs);
    let mut steps = vec![
        Step { kern: Kern::Route, grid: [1, 1, 1], block: [abi::ROUTE_THREADS, 1, 1], dynamic_shared: 0, args },
        Step {
            kern: if rows_entry && split == 1 { Kern::MoeRows } else { Kern::Moe(mb) },
            grid: [word(blocks), word(split), word(z)],
            block: [abi::GEMV_THREADS, 1, 1],
            dynamic_shared: 0,
            args: vec![
                Arg::X(0),
                Arg::W(0),
                Arg::Y(0),
                if split > 1 { Arg::Scratch(0) } else { Arg::Y(0) },
                Arg::Tickets(0),
                Arg::Routing(word_at(layout.offsets)),
                if routed { Arg::Wide(0) } else { Arg::Routing(word_at(layout.rows)) },
                Arg::Routing(word_at(layout.active)),
                Arg::Word(shape.n),
                Arg::Word(shape.k),
                Arg::Word(word(kps)),
                Arg::Word(word(choices)),
            ],
        },
    ];
    let mut tickets = entries * blocks;
    match routing {
        Routing::Route => {}
        Routing::Existing => {
            steps.remove(0);
        }
        Routing::Router => {
            // The routing's outputs after the router's own arguments; its ticket follows the GEMV's.
            let mut args = vec![
                Arg::X(0),
                Arg::Router(RouterArg::W),
                Arg::Router(RouterArg::Logits),
                Arg::Tickets(tickets * 4),
                Arg::Word(shape.tokens),
                Arg::Word(shape.k),
                Arg::Word(shape.experts),
                Arg::Word(shape.top_k),
                Arg::TopK,
                Arg::Router(RouterArg::Weights),
            ];
            args.extend(route_outs);
            let ctas = shape.experts.div_ceil(abi::ROUTER_ROWS);
            steps[0] = Step {
                kern: Kern::RouterRoute,
                grid: [ctas, 1, 1],
                block: [abi::ROUTE_THREADS, 1, 1],
                dynamic_shared: 0,
                args,
            };
            tickets += 1;
        }
    }
    let scratch = if split > 1 { split * choices * n } else { 0 };
    Ok(Plan { path: Path::Grouped, steps, scratch, tickets, tma: None, split: word(split) })
}

/// The shortest K slice the row-streaming form takes (`gemv_bf16_group`'s `k1 - k0 >= 1024`).
const ROWS_MIN_K: u32 = 1024;

/// The most rows an expert may expect for a grouped product to take the rows entry
/// (`omega_moe_gemv_bf16_m1_rows`): measured faster at 1 and 2, slower at 4 (batch 32's gate_up).
const ROWS_ENTRY_MAX_M: u64 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    const SMS: u32 = 132;

    fn opts(budget: u32, out_bf16: bool) -> DenseOpts {
        DenseOpts { sms: SMS, budget, out_bf16, aligned: true, y_aligned: true, y_aligned16: true }
    }

    fn dense(elem: Elem, shape: Shape, sms: u32, budget: u32, out_bf16: bool) -> Plan {
        super::dense(elem, shape, DenseOpts { sms, ..opts(budget, out_bf16) })
    }

    fn bf16(m: u32, n: u32, k: u32) -> Plan {
        dense(Elem::Bf16, Shape::new(m, n, k), SMS, MAX_CTAS, false)
    }

    #[test]
    fn the_path_follows_the_shape() {
        let p = |m, n, k| bf16(m, n, k).path;
        assert_eq!(p(1, 2048, 4096), Path::Gemv);
        assert_eq!(p(4, 5120, 2048), Path::Gemv, "to M = 4 the GEMV's row form streams W");
        assert_eq!(p(5, 5120, 2048), Path::Skinny);
        assert_eq!(p(32, 5120, 2048), Path::Skinny);
        assert_eq!(p(64, 5120, 2048), Path::Gemm, "at M = 64 the narrow TMA GEMM is ahead (13.4 against 19.7 us)");
        assert_eq!(p(64, 2048, 4096), Path::Skinny);
        assert_eq!(p(65, 5120, 2048), Path::Gemm, "past M = 64 the skinny GEMM's one pass cannot hold x");
        assert_eq!(p(1, 5120, 2056), Path::Skinny, "K % 32 != 0: no GEMV, and the skinny GEMM beats the TMA one");
        assert_eq!(p(512, 5120, 2056), Path::Gemm, "K % 8 == 0: TMA strides it");
        assert_eq!(p(16, 151_936, 2048), Path::Skinny, "lm_head streams as fast as a GEMM can (the tie keeps it)");
        let lm_head = bf16(1, 151_936, 2048);
        assert_eq!((lm_head.steps[0].grid, lm_head.split), ([MAX_CTAS, 1, 1], 1));
        assert_eq!(lm_head.steps[0].kern, Kern::GemvRows, "one row streamed unsplit: the rows entry");
        assert_eq!(bf16(4, 151_936, 2048).steps[0].kern, Kern::Gemv(0));
        assert_eq!(p(4095, 33, 7), Path::SimtBf16);
        assert_eq!(dense(Elem::F32, Shape::new(1, 1, 1), SMS, MAX_CTAS, false).path, Path::SimtF32);
        let unaligned = DenseOpts { aligned: false, ..opts(MAX_CTAS, false) };
        let y4 = DenseOpts { y_aligned: false, ..opts(MAX_CTAS, false) };
        assert_eq!(super::dense(Elem::Bf16, Shape::new(512, 2048, 4096), y4).path, Path::SimtBf16);
        assert_eq!(super::dense(Elem::Bf16, Shape::new(4, 2048, 4096), y4).path, Path::Gemv, "the GEMV stores floats");
        assert_eq!(
            super::dense(Elem::Bf16, Shape::new(64, 2048, 4096), y4).path,
            Path::Skinny,
            "to M = 64 the skinny GEMM takes what the TMA GEMM cannot store"
        );
        assert_eq!(
            super::dense(Elem::Bf16, Shape::new(65, 2048, 4096), y4).path,
            Path::SimtBf16,
            "past M = 64 the GEMV is not taken for it"
        );
        assert_eq!(super::dense(Elem::Bf16, Shape::new(1, 2048, 4096), unaligned).path, Path::SimtBf16);
        assert_eq!(super::dense(Elem::Bf16, Shape::new(512, 2048, 4096), unaligned).path, Path::SimtBf16);
    }

    #[test]
    fn the_swapped_plan_fills_a_wave_of_units_and_stores_a_bf16_y_itself() {
        // The split with the fewest block-times on the busiest CTA on 132 SMs: QKV's 40 W tiles take 3
        // splits (120 units of 11 blocks), O's 16 take 8, gate+up's 12 take 11 (132 units of 3), down's 16
        // take 6 (12 blocks in 2s), the router's one tile the most (16), lm_head's 1187 none.
        let splits = |m, n, k| swapab_splits(Shape::new(m, n, k), SMS, MAX_CTAS);
        assert_eq!(splits(64, 5120, 2048), 3);
        assert_eq!(splits(64, 2048, 4096), 8);
        assert_eq!(splits(32, 1536, 2048), 11);
        assert_eq!(splits(64, 2048, 768), 6);
        assert_eq!(splits(64, 128, 2048), SWAPAB_MAX_SPLITS);
        assert_eq!(splits(8, 151936, 2048), 1);
        // A budget of 40 CTAs: QKV's tiles make one wave unsplit.
        assert_eq!(swapab_splits(Shape::new(64, 5120, 2048), SMS, 40), 1);
        let o = opts(MAX_CTAS, true);
        let p = dense_forced(Elem::Bf16, Shape::new(64, 5120, 2048), o, ForcedPlan::Swapab { splits: None }).unwrap();
        let s = &p.steps[0];
        let f = abi::GEMM_SWAPAB[3];
        assert_eq!((s.kern, s.grid, s.dynamic_shared), (Kern::Swapab(3, true), [120, 1, 1], f.smem_bytes()));
        assert_eq!(s.args[..5], [Arg::Tma(0), Arg::Tma(128), Arg::Y(0), Arg::Scratch(0), Arg::Tickets(0)]);
        assert_eq!(s.args[5..], [Arg::Word(64), Arg::Word(5120), Arg::Word(2048), Arg::Word(3)]);
        // One launch (no conversion), 3 slices of y's size, a ticket a tile, W's descriptor first.
        assert_eq!((p.steps.len(), p.scratch, p.tickets, p.split), (1, 3 * 64 * 5120, 40, 3));
        assert_eq!(p.tma, Some(TmaPlan { b_rows: 64, y: None, y16: false, swapped: true }));
        // Unsplit: no scratch, no tickets; M = 5 takes the 8-row box.
        let one = ForcedPlan::Swapab { splits: Some(1) };
        let p = dense_forced(Elem::Bf16, Shape::new(5, 300, 1000), opts(MAX_CTAS, false), one).unwrap();
        assert_eq!((p.steps[0].kern, p.scratch, p.tickets), (Kern::Swapab(0, false), 0, 0));
    }

    #[test]
    fn the_skinny_plan_is_the_headers_and_stores_bf16_itself() {
        // qkv at M = 64 (MB = 8, a stage 24 KiB, a unit's partial sums 32 KiB): 40 tiles of 32 blocks;
        // 4 splits are one wave of 160 units at 8 * 24 + 4 * 32 = 320 KiB, the least of 1..8.
        let p = abi::skinny_plan(64, 5120, 2048, SMS, MAX_CTAS);
        assert_eq!((p.variant, p.splits, p.k_per_split, p.grid, p.tiles), (3, 4, 512, 160, 40));
        // K = 100: two 64-element blocks, 2 splits of one stage each (the tail zero-filled).
        let p = abi::skinny_plan(3, 1000, 100, SMS, MAX_CTAS);
        assert_eq!((p.variant, p.splits, p.k_per_split, p.grid, p.tiles), (0, 2, 64, 16, 8));
        // The budget caps the persistent grid, not the units.
        let p = abi::skinny_plan(8, 151_936, 2048, SMS, 100);
        assert_eq!((p.splits, p.grid), (1, 100));
        let plan = dense(Elem::Bf16, Shape::new(16, 5120, 2048), SMS, MAX_CTAS, true);
        assert_eq!(plan.path, Path::Skinny);
        assert_eq!(plan.steps.len(), 1, "no conversion: the kernel stores bf16");
        let step = &plan.steps[0];
        assert_eq!((step.kern, step.grid, step.dynamic_shared), (Kern::Skinny(1), [120, 1, 1], 4 * 144 * 128));
        assert_eq!(step.args[2], Arg::Y(0));
        assert_eq!(step.args[3], Arg::Scratch(0), "the partial sums are the workspace's, from its start");
        assert_eq!(step.args[8..], [Arg::Word(704), Arg::Word(3), Arg::Word(1)]);
        assert_eq!((plan.scratch, plan.tickets), (40 * 3 * 128 * 16, 40));
        let unsplit = dense(Elem::Bf16, Shape::new(8, 128, 64), SMS, MAX_CTAS, false);
        assert_eq!((unsplit.path, unsplit.split, unsplit.scratch, unsplit.tickets), (Path::Skinny, 1, 0, 0));
        assert_eq!(unsplit.steps[0].args[3], Arg::Y(0), "not read unsplit");
    }

    #[test]
    fn the_gemv_split_follows_gemv_check_and_the_budget() {
        // blocks = 32, want = ceil(528 / 32) = 17, K / 128 = 32: split 17, k_per_split round_up(241, 32) =
        // 256, so split = 16.
        let plan = bf16(1, 2048, 4096);
        assert_eq!(plan.steps[0].grid, [32, 16, 1]);
        assert_eq!(plan.steps[0].args[8], Arg::Word(256));
        assert_eq!(plan.scratch, 16 * 2048);
        assert_eq!(plan.tickets, 32);
        // A budget of 100 CTAs: split 100 / 32 = 3, k_per_split round_up(1366, 32) = 1376, split 3.
        let plan = dense(Elem::Bf16, Shape::new(1, 2048, 4096), SMS, 100, false);
        assert_eq!(plan.steps[0].grid, [32, 3, 1]);
        assert_eq!(plan.steps[0].args[8], Arg::Word(1376));
        // No split: the workspace is the output itself, and no scratch is needed.
        let plan = bf16(3, 2048, 96);
        assert_eq!(plan.split, 1);
        assert_eq!(plan.steps[0].args[3], Arg::Y(0));
        assert_eq!(plan.scratch, 0);
    }

    /// The plan of a Qwen3-30B-A3B matrix at one M: the kernel, the K split and the grid.
    /// The tile choice of a Qwen product, with unsplit wide tiles on the direct entry (which entry runs
    /// them is `WIDE_ENTRY`'s, tested below).
    fn qwen(n: u32, k: u32, m: u32) -> (Kern, u32, [u32; 3]) {
        let p = super::dense_with(Elem::Bf16, Shape::new(m, n, k), opts(MAX_CTAS, false), WideEntry::Direct);
        (p.steps[0].kern, p.split, p.steps[0].grid)
    }

    #[test]
    fn the_plans_of_every_qwen_matrix_at_every_m_of_the_issue() {
        use Kern::{Gemm, GemmTsFit, Gemv, Skinny};
        // M = 1..4 the GEMV (MB = 1); 8..64 the skinny GEMM by its MB bucket, split as SkinnyCost
        // predicts fastest, where it beats the narrow TMA GEMM (as measured on the H200: qkv, gate+up and
        // the router at M = 64, down from M = 32, took the narrow GEMM's 7-13 us against the skinny's
        // 8-20 us, docs/perf/2026-12-02-s4-libraries.md); the TMA GEMM then runs 64-column tiles, twice
        // the CTAs of the narrow ones.
        let small = [1, 2, 4];
        let narrow = |g| (GemmTsFit(3), 1, [g, 1, 1]);
        for (n, k, split, gx, sk) in [
            (
                5120,
                2048,
                // 7 slices of 320 raised to 8 of 256: whole unrolled steps.
                8,
                80,
                [(Skinny(0), 2, [80, 1, 1]), (Skinny(1), 3, [120, 1, 1]), (Skinny(2), 3, [120, 1, 1]), narrow(80)],
            ),
            (
                2048,
                4096,
                16,
                32,
                [
                    (Skinny(0), 4, [64, 1, 1]),
                    (Skinny(1), 6, [96, 1, 1]),
                    (Skinny(2), 5, [80, 1, 1]),
                    (Skinny(3), 4, [64, 1, 1]),
                ],
            ),
            (
                128,
                2048,
                16,
                2,
                [(Skinny(0), 4, [4, 1, 1]), (Skinny(1), 4, [4, 1, 1]), (Skinny(2), 4, [4, 1, 1]), narrow(2)],
            ),
            (
                1536,
                2048,
                16,
                24,
                [(Skinny(0), 4, [48, 1, 1]), (Skinny(1), 4, [48, 1, 1]), (Skinny(2), 4, [48, 1, 1]), narrow(24)],
            ),
            (2048, 768, 6, 32, [(Skinny(0), 3, [48, 1, 1]), (Skinny(1), 3, [48, 1, 1]), narrow(32), narrow(32)]),
            (
                151_936,
                2048,
                1,
                MAX_CTAS,
                [
                    (Skinny(0), 1, [264, 1, 1]),
                    (Skinny(1), 1, [264, 1, 1]),
                    (Skinny(2), 1, [264, 1, 1]),
                    (Skinny(3), 1, [264, 1, 1]),
                ],
            ),
        ] {
            for m in small {
                let gemv = if split == 1 { [gx, 1, 1] } else { [gx, split, 1] };
                // One row streamed unsplit (lm_head at M = 1) takes the dense rows entry.
                let entry = if m == 1 && split == 1 && k >= ROWS_MIN_K { Kern::GemvRows } else { Gemv(0) };
                assert_eq!(qwen(n, k, m), (entry, split, gemv), "{n}x{k} M={m}");
            }
            for (m, want) in [8, 16, 32, 64].into_iter().zip(sk) {
                assert_eq!(qwen(n, k, m), want, "{n}x{k} M={m}");
            }
        }
        // Where the wide or narrow tiles leave part of a wave empty, a fitted width fills it (the cost
        // model gives it under 0.9 of their time): 64 columns at M = 128 (QKV 80 tiles, 6.8 us against
        // the narrow tile's 13.5) and for O, down, gate+up and the router at M = 512; 160 for QKV at
        // M = 512 (128 tiles, 16.9 us against 27 wide). At M = 4096 the wide tile ties them and stays, but
        // the router's 32 narrow tiles become 64 and gate+up takes 192 columns (below).
        let fit = |i: usize, g| (GemmTsFit(i), 1, [g, 1, 1]);
        assert_eq!(qwen(5120, 2048, 128), fit(3, 80));
        assert_eq!(qwen(5120, 2048, 512), fit(0, 128));
        assert_eq!(qwen(5120, 2048, 4096), (Gemm, 1, [SMS, 1, 1]));
        assert_eq!(qwen(2048, 4096, 128), fit(3, 32));
        assert_eq!(qwen(2048, 4096, 512), fit(3, 128));
        assert_eq!(qwen(2048, 4096, 4096), (Gemm, 1, [SMS, 1, 1]));
        // The router: never split (was 32 one-block splits: 226-240 us).
        assert_eq!(qwen(128, 2048, 128), fit(3, 2));
        assert_eq!(qwen(128, 2048, 512), fit(3, 8));
        assert_eq!(qwen(128, 2048, 4096), fit(3, 64));
        assert_eq!(qwen(1536, 2048, 128), fit(3, 24));
        assert_eq!(qwen(1536, 2048, 512), fit(3, 96));
        // At M = 4096 192 columns tie the narrow tile in the model and are wider: 256 tiles.
        assert_eq!(qwen(1536, 2048, 4096), fit(1, SMS));
        // down at M = 4096 (K = 768, four narrow tiles a CTA) runs in ping-pong; the model chose the wide
        // tile.
        let pp = (Kern::GemmPp(false), 1, [SMS, 1, 1]);
        assert_eq!(qwen(2048, 768, 128), fit(3, 32));
        assert_eq!(qwen(2048, 768, 512), fit(3, 128));
        assert_eq!(qwen(2048, 768, 4096), pp);
        // 256 x 5120: 108 tiles of 96 columns in one wave.
        assert_eq!(qwen(5120, 2048, 256), fit(2, 108));
        // lm_head past M = 64: HBM-bound in either form (147 us for its 622 MB): the tie keeps wide.
        for m in [128, 512, 4096] {
            assert_eq!(qwen(151_936, 2048, m), (Gemm, 1, [SMS, 1, 1]), "lm_head M={m}");
        }
    }

    #[test]
    fn the_fitted_widths_are_weighed_unsplit_and_fill_the_wave_the_others_leave_part_empty() {
        let all = [GemmTile::Wide, GemmTile::Narrow, GemmTile::N160, GemmTile::N192];
        // QKV at M = 512: 128 tiles of 160 columns in one wave (16.9 us), where 80 wide or 160 narrow
        // tiles take 27 us.
        let qkv = Shape::new(512, 5120, 2048);
        let c = GemmCost::best_of(qkv, SMS, MAX_CTAS, &all);
        assert_eq!((c.tile, c.splits, c.units, c.ns), (GemmTile::N160, 1, 128, 16_881));
        for splits in 2..=MAX_SPLITS {
            assert_eq!(GemmCost::of(qkv, GemmTile::N160, splits, u64::from(SMS)), None, "no split entry");
        }
        // gate+up at M = 4096: 256 tiles of 192 in two waves tie 384 narrow ones in three (the model is
        // linear in the width), and ties keep the earlier form.
        let c = GemmCost::best_of(Shape::new(4096, 1536, 2048), SMS, MAX_CTAS, &all);
        assert_eq!((c.tile, c.units), (GemmTile::Narrow, 384));
        assert_eq!(GemmCost::best(Shape::new(4096, 1536, 2048), SMS, MAX_CTAS, Some(GemmTile::N192)).ns, c.ns);
        // The planner weighs them after the wide and narrow tiles, widest first.
        assert_eq!(&PLANNED_TILES[..2], &[GemmTile::Wide, GemmTile::Narrow]);
        assert!(PLANNED_TILES.windows(2).skip(2).all(|w| w[0].n() > w[1].n()));
    }

    #[test]
    fn the_cost_model_reproduces_the_recorded_figures() {
        // (shape, tile, splits, recorded us, the launch's round trip included): library bench run 13.
        let cases = [
            ((512, 128, 2048), GemmTile::Narrow, 32, 240.0),
            ((128, 128, 2048), GemmTile::Narrow, 32, 226.2),
            ((4096, 128, 2048), GemmTile::Narrow, 4, 40.0),
            ((4096, 1536, 2048), GemmTile::Wide, 1, 57.81),
            ((4096, 5120, 2048), GemmTile::Wide, 1, 137.5),
            ((512, 1536, 2048), GemmTile::Narrow, 2, 30.53),
            ((512, 5120, 2048), GemmTile::Wide, 1, 30.59),
        ];
        for ((m, n, k), tile, splits, us) in cases {
            let c = GemmCost::of(Shape::new(m, n, k), tile, splits, u64::from(SMS)).unwrap();
            let model = c.ns as f64 / 1000.0 + 4.5;
            assert!(
                (model / us - 1.0).abs() < 0.12,
                "{m}x{n}x{k} {tile:?} {splits}: model {model:.1} us, recorded {us}"
            );
        }
        // Asked splits that K's blocks do not keep are another candidate's plan.
        assert_eq!(GemmCost::of(Shape::new(128, 128, 2048), GemmTile::Narrow, 9, 132), None);
    }

    #[test]
    fn a_k_split_keeps_whole_pipelines_and_pays_only_for_long_k() {
        let mut g = 0x1234_5678_9abc_def1u64;
        let mut next = |lo: u32, hi: u32| {
            g ^= g << 13;
            g ^= g >> 7;
            g ^= g << 17;
            lo + (g % u64::from(hi - lo)) as u32
        };
        for _ in 0..2000 {
            let shape = Shape::new(next(33, 5000), next(1, 9000), 8 * next(1, 4000));
            for budget in [1, 7, 131, MAX_CTAS] {
                let c = GemmCost::best(shape, SMS, budget, None);
                let s = abi::GemmSplit::new(shape.m, shape.n, shape.k, c.tile.n(), c.splits);
                assert!(c.splits <= MAX_SPLITS, "{shape}: {c:?}");
                assert!(c.splits == 1 || s.per >= MIN_SPLIT_KBLOCKS, "{shape}: {c:?} keeps {} blocks", s.per);
            }
        }
        // A long K with one tile: 1024 blocks in 7 splits of 147 (108.5 us against 359 unsplit; 8 of 128
        // would add more reduction than they save).
        let c = GemmCost::best(Shape::new(128, 128, 65_536), SMS, MAX_CTAS, None);
        assert_eq!((c.tile, c.splits), (GemmTile::Narrow, 7));
        let plan = bf16(128, 128, 65_536);
        assert_eq!((plan.steps[0].kern, plan.split, plan.tickets, plan.scratch), (Kern::GemmN128, 7, 1, 7 * 128 * 128));
        assert_eq!(plan.steps[0].grid, [7, 1, 1]);
        // The budget is the persistent grid's bound, and the model counts its waves.
        let plan = dense(Elem::Bf16, Shape::new(4096, 1536, 2048), SMS, 100, false);
        assert_eq!(plan.steps[0].grid, [100, 1, 1]);
    }

    #[test]
    fn forced_plans_run_what_they_name_or_say_why_not() {
        let f = |shape: Shape, forced, o: DenseOpts| dense_forced(Elem::Bf16, shape, o, forced);
        let o = opts(MAX_CTAS, false);
        // The GEMV at M = 512 (the kernel takes any M in passes of 64 rows), the planner's split.
        let gemv = ForcedPlan::Gemv { split: None };
        let p = f(Shape::new(512, 2048, 4096), gemv, o).unwrap();
        assert_eq!((p.path, p.steps[0].kern, p.steps[0].grid), (Path::Gemv, Kern::Gemv(3), [32, 16, 1]));
        let p = f(Shape::new(64, 1536, 2048), ForcedPlan::Gemv { split: Some(4) }, o).unwrap();
        assert_eq!((p.steps[0].grid, p.steps[0].args[8], p.scratch), ([24, 4, 1], Arg::Word(512), 4 * 64 * 1536));
        // A bf16 output: the GEMV stores it itself (one launch), its slices through the scratch even
        // unsplit.
        for split in [1, 4] {
            let p =
                f(Shape::new(1, 5120, 2048), ForcedPlan::Gemv { split: Some(split) }, opts(MAX_CTAS, true)).unwrap();
            assert_eq!(p.steps.len(), 1, "no conversion after the GEMV");
            let s = &p.steps[0];
            assert_eq!(
                (s.kern, s.args[2], s.args[3], p.scratch),
                (Kern::GemvY16(0), Arg::Y(0), Arg::Scratch(0), 5120 * u64::from(split))
            );
        }
        // 2048 of K in 32-element chunks: 9 slices of 256 make 8.
        let why = |r: Result<Plan, PlanError>| match r {
            Err(PlanError::Forced { why, .. }) => why,
            other => panic!("{other:?}"),
        };
        let shape = Shape::new(64, 1536, 2048);
        assert_eq!(
            why(f(shape, ForcedPlan::Gemv { split: Some(9) }, o)),
            ForcedRefusal::SplitNotKept { asked: 9, kept: 8 }
        );
        assert_eq!(why(f(shape, ForcedPlan::Gemv { split: Some(0) }, o)), ForcedRefusal::ZeroSplit);
        let small = opts(8, false);
        assert_eq!(
            why(f(shape, ForcedPlan::Gemv { split: Some(16) }, small)),
            ForcedRefusal::SplitPastBudget { split: 16, budget: 8 }
        );
        assert_eq!(why(f(Shape::new(4, 64, 48), gemv, o)), ForcedRefusal::KNotMultiple { of: 32 });
        // The GEMM, wide with 4 splits (the split-K entry), narrow with the planner's split, at M = 16.
        let wide4 = ForcedPlan::Gemm { tile: GemmTile::Wide, splits: Some(4) };
        let p = f(Shape::new(512, 2048, 4096), wide4, o).unwrap();
        assert_eq!((p.steps[0].kern, p.split, p.tma.unwrap().b_rows, p.tickets), (Kern::GemmSplitK, 4, 256, 32));
        let narrow = ForcedPlan::Gemm { tile: GemmTile::Narrow, splits: None };
        let p = f(Shape::new(16, 5120, 2048), narrow, o).unwrap();
        assert_eq!((p.path, p.steps[0].kern, p.split, p.steps[0].grid), (Path::Gemm, Kern::GemmN128, 1, [40, 1, 1]));
        let p = f(Shape::new(16, 5120, 2048), ForcedPlan::Gemm { tile: GemmTile::Wide, splits: Some(1) }, o).unwrap();
        assert_eq!((p.steps[0].kern, p.steps[0].grid), (Kern::Gemm, [20, 1, 1]));
        let nine = ForcedPlan::Gemm { tile: GemmTile::Narrow, splits: Some(9) };
        assert_eq!(why(f(shape, nine, o)), ForcedRefusal::SplitNotKept { asked: 9, kept: 8 });
        assert_eq!(why(f(Shape::new(4, 64, 44), narrow, o)), ForcedRefusal::KNotMultiple { of: 8 });
        let y4 = DenseOpts { y_aligned: false, ..o };
        assert_eq!(why(f(shape, narrow, y4)), ForcedRefusal::Unaligned);
        assert!(f(shape, narrow, DenseOpts { out_bf16: true, ..y4 }).is_ok(), "a bf16 output's product is aligned");
        assert_eq!(why(f(shape, gemv, DenseOpts { aligned: false, ..o })), ForcedRefusal::Unaligned);
        assert_eq!(why(dense_forced(Elem::F32, shape, o, gemv)), ForcedRefusal::NotBf16);
        // A forced bf16 output still converts after the product.
        let p = f(shape, narrow, opts(MAX_CTAS, true)).unwrap();
        assert_eq!(p.steps.iter().map(|s| s.kern).collect::<Vec<_>>(), [Kern::GemmN128, Kern::Convert]);
        // The skinny GEMM: the planner's split, or one asked in whole 64-element stages (32 of them).
        let skinny = |split| ForcedPlan::Skinny { split };
        let p = f(Shape::new(1, 5120, 2048), skinny(None), o).unwrap();
        assert_eq!((p.path, p.steps[0].kern, p.split, p.steps[0].grid), (Path::Skinny, Kern::Skinny(0), 2, [80, 1, 1]));
        let p = f(shape, skinny(Some(1)), opts(7, false)).unwrap();
        assert_eq!((p.steps[0].grid, p.steps[0].args[8], p.scratch, p.tickets), ([7, 1, 1], Arg::Word(2048), 0, 0));
        assert_eq!(why(f(shape, skinny(Some(9)), o)), ForcedRefusal::SplitNotKept { asked: 9, kept: 8 });
        assert_eq!(why(f(shape, skinny(Some(0)), o)), ForcedRefusal::ZeroSplit);
        assert_eq!(why(f(Shape::new(65, 64, 64), skinny(None), o)), ForcedRefusal::MPastPath { max: 64 });
        assert_eq!(why(f(Shape::new(4, 64, 44), skinny(None), o)), ForcedRefusal::KNotMultiple { of: 8 });
        assert_eq!(why(f(shape, skinny(None), DenseOpts { aligned: false, ..o })), ForcedRefusal::Unaligned);
        assert!(f(shape, skinny(None), y4).is_ok(), "it stores floats one at a time");
    }

    #[test]
    fn the_tma_store_and_cluster_entries_take_ys_descriptor_whole_clusters_and_say_why_not() {
        let f = |shape: Shape, cluster, o: DenseOpts| {
            dense_forced(Elem::Bf16, shape, o, ForcedPlan::GemmTmaStore { tile: GemmTile::Wide, cluster })
        };
        let o = opts(MAX_CTAS, false);
        let why = |r: Result<Plan, PlanError>| match r {
            Err(PlanError::Forced { why, .. }) => why,
            other => panic!("{other:?}"),
        };
        // 512 x 2048: 4 x 8 = 32 tiles, one CTA each; y's descriptor third in the area, at the output.
        let shape = Shape::new(512, 2048, 4096);
        let p = f(shape, false, o).unwrap();
        let s = &p.steps[0];
        assert_eq!(
            (p.path, s.kern, s.grid, s.dynamic_shared),
            (Path::Gemm, Kern::GemmTs, [32, 1, 1], abi::GEMM_TS_SMEM_BYTES)
        );
        assert_eq!(s.args[..4], [Arg::Tma(0), Arg::Tma(128), Arg::Tma(256), Arg::Y(0)]);
        assert_eq!(s.args[4..], [Arg::Word(512), Arg::Word(2048), Arg::Word(4096)]);
        assert_eq!(
            (p.tma, p.split, p.tickets, p.scratch),
            (Some(TmaPlan { b_rows: 256, y: Some(Arg::Y(0)), y16: false, swapped: false }), 1, 0, 0)
        );
        // The cluster entry: 2 pairs of tile rows by 8 columns, two CTAs each; half the W rows per box.
        let p = f(shape, true, o).unwrap();
        let s = &p.steps[0];
        assert_eq!((s.kern, s.grid, s.dynamic_shared), (Kern::GemmMc, [32, 1, 1], abi::GEMM_MC_SMEM_BYTES));
        assert_eq!(
            p.tma,
            Some(TmaPlan { b_rows: abi::GEMM_MC_B_BOX_ROWS, y: Some(Arg::Y(0)), y16: false, swapped: false })
        );
        // 4096 x 5120: 320 pairs, 66 clusters fill the 132 SMs; a budget of 7 holds 3 clusters, of 1 none.
        let big = Shape::new(4096, 5120, 2048);
        assert_eq!(f(big, true, o).unwrap().steps[0].grid, [132, 1, 1]);
        assert_eq!(f(big, false, o).unwrap().steps[0].grid, [132, 1, 1]);
        assert_eq!(f(big, true, opts(7, false)).unwrap().steps[0].grid, [6, 1, 1]);
        assert_eq!(f(big, false, opts(7, false)).unwrap().steps[0].grid, [7, 1, 1]);
        assert_eq!(why(f(big, true, opts(1, false))), ForcedRefusal::ClusterPastBudget { cluster: 2, budget: 1 });
        // An odd count of tile rows: the last pair's second tile lies past M (one pair for 1..=256 rows).
        assert_eq!(f(Shape::new(129, 300, 64), true, o).unwrap().steps[0].grid, [4, 1, 1]);
        assert_eq!(f(Shape::new(1, 1, 8), true, o).unwrap().steps[0].grid, [2, 1, 1]);
        // N % 4 != 0: no descriptor of y exists; the entries store directly and are passed 0 for it.
        for cluster in [false, true] {
            let p = f(Shape::new(300, 1002, 64), cluster, o).unwrap();
            assert_eq!((p.steps[0].args[2], p.tma.unwrap().y), (Arg::Wide(0), None));
        }
        // y's descriptor needs a 16-byte address, the direct stores 8: N % 4 == 0 refuses an 8-aligned y.
        let y8 = DenseOpts { y_aligned16: false, ..o };
        assert_eq!(why(f(shape, false, y8)), ForcedRefusal::Unaligned);
        assert_eq!(why(f(shape, true, y8)), ForcedRefusal::Unaligned);
        assert!(f(Shape::new(300, 1002, 64), false, y8).is_ok(), "N % 4 != 0 stores directly");
        assert_eq!(
            why(f(shape, false, DenseOpts { y_aligned: false, y_aligned16: false, ..o })),
            ForcedRefusal::Unaligned
        );
        assert_eq!(why(f(Shape::new(4, 64, 44), true, o)), ForcedRefusal::KNotMultiple { of: 8 });
        assert_eq!(
            why(dense_forced(Elem::F32, shape, o, ForcedPlan::GemmTmaStore { tile: GemmTile::Wide, cluster: true })),
            ForcedRefusal::NotBf16
        );
        // A bf16 output: y's descriptor at the workspace's f32 product, then the conversion.
        let p = f(shape, true, DenseOpts { y_aligned16: false, ..opts(MAX_CTAS, true) }).unwrap();
        assert_eq!(p.steps.iter().map(|s| s.kern).collect::<Vec<_>>(), [Kern::GemmMc, Kern::Convert]);
        assert_eq!((p.steps[0].args[3], p.tma.unwrap().y), (Arg::Scratch(0), Some(Arg::Scratch(0))));
        assert_eq!(p.scratch, 512 * 2048);
        let tags = [
            ForcedPlan::Gemv { split: None },
            ForcedPlan::Gemv { split: Some(3) },
            ForcedPlan::Gemm { tile: GemmTile::Wide, splits: None },
            ForcedPlan::Gemm { tile: GemmTile::Wide, splits: Some(1) },
            ForcedPlan::Gemm { tile: GemmTile::Narrow, splits: Some(2) },
            ForcedPlan::GemmTmaStore { tile: GemmTile::Wide, cluster: false },
            ForcedPlan::GemmTmaStore { tile: GemmTile::Wide, cluster: true },
            ForcedPlan::GemmTmaStore { tile: GemmTile::Narrow, cluster: false },
            ForcedPlan::GemmTmaStore { tile: GemmTile::Narrow, cluster: true },
            ForcedPlan::GemmStreamK { tile: GemmTile::Wide },
            ForcedPlan::GemmStreamK { tile: GemmTile::Narrow },
        ]
        .map(|p| p.tag());
        let want = [
            "gemv",
            "gemv_split3",
            "wide_auto",
            "wide",
            "narrow_split2",
            "wide_ts",
            "wide_mc",
            "narrow_ts",
            "narrow_mc",
            "wide_sk",
            "narrow_sk",
        ];
        assert_eq!(tags, want.map(String::from));
    }

    #[test]
    fn the_stream_k_entries_take_every_sm_a_slot_and_two_flags_per_cta_and_say_why_not() {
        let f = |shape: Shape, tile, o: DenseOpts| dense_forced(Elem::Bf16, shape, o, ForcedPlan::GemmStreamK { tile });
        let why = |r: Result<Plan, PlanError>| match r {
            Err(PlanError::Forced { why, .. }) => why,
            other => panic!("{other:?}"),
        };
        let o = opts(MAX_CTAS, false);
        // QKV at M = 512: 160 narrow tiles of 32 K blocks share the 132 SMs; a slot and two flags each.
        let qkv = Shape::new(512, 5120, 2048);
        let p = f(qkv, GemmTile::Narrow, o).unwrap();
        let s = &p.steps[0];
        assert_eq!(
            (p.path, s.kern, s.grid, s.dynamic_shared),
            (Path::Gemm, Kern::GemmSkN128, [132, 1, 1], abi::GEMM_SK_N128_SMEM_BYTES)
        );
        assert_eq!(
            s.args,
            [
                Arg::Tma(0),
                Arg::Tma(128),
                Arg::Tma(256),
                Arg::Y(0),
                Arg::Scratch(0),
                Arg::Tickets(0),
                Arg::Word(512),
                Arg::Word(5120),
                Arg::Word(2048)
            ]
        );
        assert_eq!((p.scratch, p.tickets, p.split), (132 * 2 * 64 * 128, 2 * 132, 1));
        assert_eq!(p.tma, Some(TmaPlan { b_rows: 128, y: Some(Arg::Y(0)), y16: false, swapped: false }));
        // Few iterations: GEMM_SK_MIN_ITERS (16) a CTA (1 x 1 x 8 is one iteration, one CTA; 10 still one;
        // 40 make 2 CTAs; the router's 128 x 128 x 2048, 32 K blocks, 2); the budget caps the grid.
        assert_eq!(f(Shape::new(1, 1, 8), GemmTile::Wide, o).unwrap().steps[0].grid, [1, 1, 1]);
        assert_eq!(f(Shape::new(128, 256, 640), GemmTile::Wide, o).unwrap().steps[0].grid, [1, 1, 1]);
        assert_eq!(f(Shape::new(128, 256, 2560), GemmTile::Wide, o).unwrap().steps[0].grid, [2, 1, 1]);
        assert_eq!(f(Shape::new(128, 128, 2048), GemmTile::Narrow, o).unwrap().steps[0].grid, [2, 1, 1]);
        let p = f(qkv, GemmTile::Wide, opts(7, false)).unwrap();
        assert_eq!((p.steps[0].kern, p.steps[0].grid, p.tickets), (Kern::GemmSk, [7, 1, 1], 14));
        // A bf16 output: the slots after the f32 product, y's descriptor at that product.
        let p = f(qkv, GemmTile::Wide, opts(MAX_CTAS, true)).unwrap();
        assert_eq!(p.steps.iter().map(|s| s.kern).collect::<Vec<_>>(), [Kern::GemmSk, Kern::Convert]);
        assert_eq!((p.steps[0].args[3], p.steps[0].args[4]), (Arg::Scratch(0), Arg::Scratch(512 * 5120 * 4)));
        assert_eq!(p.scratch, 512 * 5120 + 132 * 2 * 64 * 256);
        // 2^31 iterations: 4096 x 4096 narrow tiles (1024) of 2^21 K blocks would pass them.
        let long = Shape::new(4096, 4096, 1 << 27);
        let iters = 32 * 32 * (1u64 << 21);
        assert_eq!(
            why(f(long, GemmTile::Narrow, o)),
            ForcedRefusal::IterationsPastKernel { iters, max: abi::GEMM_SK_MAX_ITERS }
        );
        assert_eq!(why(f(Shape::new(4, 64, 44), GemmTile::Wide, o)), ForcedRefusal::KNotMultiple { of: 8 });
        assert_eq!(why(f(qkv, GemmTile::Wide, DenseOpts { y_aligned16: false, ..o })), ForcedRefusal::Unaligned);
        assert!(f(Shape::new(300, 1002, 64), GemmTile::Wide, DenseOpts { y_aligned16: false, ..o }).is_ok());
    }

    #[test]
    fn the_narrow_tma_store_and_cluster_entries_take_narrow_tiles_and_half_boxes() {
        let f = |shape: Shape, cluster, o: DenseOpts| {
            dense_forced(Elem::Bf16, shape, o, ForcedPlan::GemmTmaStore { tile: GemmTile::Narrow, cluster })
        };
        let o = opts(MAX_CTAS, false);
        // 512 x 2048: 4 x 16 = 64 narrow tiles, one CTA each; W's box is the tile's 128 rows.
        let shape = Shape::new(512, 2048, 4096);
        let p = f(shape, false, o).unwrap();
        let s = &p.steps[0];
        assert_eq!((s.kern, s.grid, s.dynamic_shared), (Kern::GemmTsN128, [64, 1, 1], abi::GEMM_TS_N128_SMEM_BYTES));
        assert_eq!(s.args[..4], [Arg::Tma(0), Arg::Tma(128), Arg::Tma(256), Arg::Y(0)]);
        assert_eq!(
            (p.tma, p.split, p.tickets),
            (Some(TmaPlan { b_rows: 128, y: Some(Arg::Y(0)), y16: false, swapped: false }), 1, 0)
        );
        // The cluster form: 2 pairs of tile rows by 16 columns, two CTAs each; 64 W rows per box.
        let p = f(shape, true, o).unwrap();
        let s = &p.steps[0];
        assert_eq!((s.kern, s.grid, s.dynamic_shared), (Kern::GemmMcN128, [64, 1, 1], abi::GEMM_MC_N128_SMEM_BYTES));
        assert_eq!(
            p.tma,
            Some(TmaPlan { b_rows: abi::GEMM_MC_N128_B_BOX_ROWS, y: Some(Arg::Y(0)), y16: false, swapped: false })
        );
        // gate+up at M = 4096: 32 x 12 = 384 tiles, 192 pairs: the persistent grids fill the SMs.
        let gate_up = Shape::new(4096, 1536, 2048);
        assert_eq!(f(gate_up, false, o).unwrap().steps[0].grid, [132, 1, 1]);
        assert_eq!(f(gate_up, true, o).unwrap().steps[0].grid, [132, 1, 1]);
        assert_eq!(f(gate_up, true, opts(5, false)).unwrap().steps[0].grid, [4, 1, 1]);
        let why = |r: Result<Plan, PlanError>| match r {
            Err(PlanError::Forced { why, .. }) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(why(f(gate_up, true, opts(1, false))), ForcedRefusal::ClusterPastBudget { cluster: 2, budget: 1 });
        assert_eq!(why(f(shape, false, DenseOpts { y_aligned16: false, ..o })), ForcedRefusal::Unaligned);
        // The planner runs unsplit narrow tiles by the TMA-store entry, measured fastest on them.
        assert_eq!(NARROW_ENTRY, WideEntry::TmaStore);
        assert_eq!(bf16(1024, 2048, 2048).steps[0].kern, Kern::GemmTsN128);
    }

    #[test]
    fn the_ping_pong_entry_runs_where_every_cta_has_two_narrow_tiles_at_short_k_and_only_on_the_narrow_tile() {
        let kern = |m, n, k, o: DenseOpts| super::dense(Elem::Bf16, Shape::new(m, n, k), o).steps[0].kern;
        let o = opts(MAX_CTAS, false);
        // down at 4096: 512 narrow tiles on 132 CTAs, K = 768; the TMA-store entry's grid and shared memory.
        let p = super::dense(Elem::Bf16, Shape::new(4096, 2048, 768), o);
        let s = &p.steps[0];
        assert_eq!(
            (s.kern, s.grid, s.dynamic_shared),
            (Kern::GemmPp(false), [SMS, 1, 1], abi::GEMM_TS_N128_SMEM_BYTES)
        );
        assert_eq!(KERNEL_NAMES[s.kern.index()], abi::GEMM_BF16_TN_PP_N128);
        assert_eq!(p.tma.map(|t| t.b_rows), Some(abi::GEMM_N128_TILE_N));
        // At the bounds: K one block past PINGPONG_MAX_K, M one row short, fewer than two tiles a CTA
        // (1024 x 2048: 128 tiles), and y not 16-byte aligned (no descriptor of y) keep the model's plan.
        assert_ne!(kern(4096, 2048, PINGPONG_MAX_K + 64, o), Kern::GemmPp(false));
        assert_eq!(kern(4096, 2048, PINGPONG_MAX_K, o), Kern::GemmPp(false));
        assert_ne!(kern(PINGPONG_MIN_M - 1, 2048, 768, o), Kern::GemmPp(false));
        assert_ne!(kern(PINGPONG_MIN_M, 256, 768, o), Kern::GemmPp(false), "64 tiles");
        assert_eq!(kern(4096, 2048, 768, DenseOpts { y_aligned16: false, ..o }), Kern::Gemm, "the wide direct entry");
        // A small budget gives each CTA more tiles: still ping-pong, on the budget's grid.
        let p = super::dense(Elem::Bf16, Shape::new(4096, 2048, 768), opts(7, false));
        assert_eq!((p.steps[0].kern, p.steps[0].grid), (Kern::GemmPp(false), [7, 1, 1]));
        // A bf16 output: its _y16 form (N % 8 == 0), else the f32 entry into the workspace and the conversion.
        assert_eq!(kern(4096, 2048, 768, opts(MAX_CTAS, true)), Kern::GemmPp(true));
        let p = super::dense(Elem::Bf16, Shape::new(4096, 2044, 768), opts(MAX_CTAS, true));
        assert_eq!(p.steps.iter().map(|s| s.kern).collect::<Vec<_>>(), [Kern::GemmPp(false), Kern::Convert]);
        // Forced: the narrow tile runs at any shape; the others have no ping-pong kernel.
        let forced = |tile| ForcedPlan::GemmPingPong { tile };
        let p = dense_forced(Elem::Bf16, Shape::new(130, 7, 64), o, forced(GemmTile::Narrow)).unwrap();
        assert_eq!(
            (p.steps[0].kern, p.steps[0].grid, p.tma.unwrap().y),
            (Kern::GemmPp(false), [2, 1, 1], None),
            "two tiles"
        );
        assert_eq!(forced(GemmTile::Narrow).tag(), "narrow_pp");
        for tile in [GemmTile::Wide, GemmTile::N192, GemmTile::N64] {
            let e = dense_forced(Elem::Bf16, Shape::new(4096, 2048, 768), o, forced(tile)).unwrap_err();
            let want = ForcedRefusal::NoEntryForTile { tile, entry: WideEntry::PingPong };
            assert!(matches!(e, PlanError::Forced { why, .. } if why == want), "{tile:?}: {e:?}");
        }
    }

    #[test]
    fn the_swiglu_gemm_takes_the_width_its_cost_gives_least_time_and_refuses_what_it_cannot_store() {
        let width = |m, n, k, out_bf16| {
            let p = swiglu(Shape::new(m, n, k), opts(MAX_CTAS, out_bf16)).unwrap();
            let s = &p.steps[0];
            let Kern::Swiglu(i, y16) = s.kern else { panic!("{:?}", s.kern) };
            let f = abi::GEMM_SWIGLU[i];
            assert_eq!((y16, s.dynamic_shared, p.steps.len(), p.scratch), (out_bf16, f.smem_bytes(), 1, 0));
            assert_eq!(p.tma.map(|t| (t.b_rows, t.y, t.y16)), Some((f.b_box_rows(), Some(Arg::Y(0)), out_bf16)));
            assert_eq!(KERNEL_NAMES[s.kern.index()], if y16 { f.y16 } else { f.f32 });
            (f.tile_n, s.grid[0])
        };
        // The widths measured best on the H200 (gemm_swiglu_check, s21): an expert's gate+up at 4096 rows
        // in 192 (256 tiles; 256 columns make 192, 1.45 waves), at 512 in 128 (48 tiles), at 8192 and the
        // dense 4096 x 6144 in 256 (ties, the wider kept).
        for out_bf16 in [false, true] {
            assert_eq!(width(4096, 768, 2048, out_bf16), (192, SMS));
            assert_eq!(width(512, 768, 2048, out_bf16), (128, 48));
            assert_eq!(width(8192, 768, 2048, out_bf16), (256, SMS));
            assert_eq!(width(4096, 6144, 2048, out_bf16), (256, SMS));
        }
        // The budget bounds the grid.
        let p = swiglu(Shape::new(4096, 768, 2048), opts(5, false)).unwrap();
        assert_eq!(p.steps[0].grid, [5, 1, 1]);
        let refused = |shape, o| swiglu(shape, o).unwrap_err();
        let o = opts(MAX_CTAS, false);
        let why = |e: PlanError| match e {
            PlanError::Swiglu { why, .. } => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(why(refused(Shape::new(64, 768, 100), o)), SwigluRefusal::KNotMultiple);
        assert_eq!(why(refused(Shape::new(64, 770, 128), o)), SwigluRefusal::NNotMultiple { of: 4 });
        assert_eq!(why(refused(Shape::new(64, 772, 128), opts(MAX_CTAS, true))), SwigluRefusal::NNotMultiple { of: 8 });
        assert_eq!(
            why(refused(Shape::new(64, 768, 128), DenseOpts { y_aligned16: false, ..o })),
            SwigluRefusal::Unaligned
        );
        assert_eq!(why(refused(Shape::new(64, 768, 128), DenseOpts { aligned: false, ..o })), SwigluRefusal::Unaligned);
        assert_eq!(
            refused(Shape::new(64, 770, 128), o).to_string(),
            "SwiGLU M=64 N=770 K=128: the gate+up GEMM with SwiGLU in its epilogue cannot run it: N is not a \
             multiple of 4"
        );
    }

    #[test]
    fn a_bf16_output_of_an_unsplit_tma_store_plan_is_stored_by_its_y16_entry_where_y_can_have_a_descriptor() {
        let o = opts(MAX_CTAS, true);
        // The planner's QKV at 512 (n160), O at 512 (n64), the wide cube and down at 4096 (ping-pong): one
        // launch, no workspace product, y's bf16 descriptor at y itself; the same grid and shared memory as
        // the f32 entry.
        for (m, n, k) in [(512, 5120, 2048), (512, 2048, 4096), (4096, 4096, 4096), (4096, 2048, 768)] {
            let shape = Shape::new(m, n, k);
            let (f32_plan, p) =
                (super::dense(Elem::Bf16, shape, opts(MAX_CTAS, false)), super::dense(Elem::Bf16, shape, o));
            let (s32, s) = (&f32_plan.steps[0], &p.steps[0]);
            let name = |k: Kern| KERNEL_NAMES[k.index()];
            assert_eq!(Some(name(s.kern)), abi::y16_form(name(s32.kern)), "{m}x{n}x{k}: the f32 entry's _y16 form");
            assert_eq!((s.grid, s.dynamic_shared, &s.args), (s32.grid, s32.dynamic_shared, &s32.args), "{m}x{n}x{k}");
            assert_eq!((p.steps.len(), p.scratch), (1, 0), "{m}x{n}x{k}: no f32 product, no conversion");
            assert_eq!(p.tma.map(|t| (t.y, t.y16)), Some((Some(Arg::Y(0)), true)));
        }
        // No bf16 descriptor of y: N % 8 != 0, or y not 16-byte aligned. The f32 product in the workspace
        // and the conversion, as before.
        let y8 = DenseOpts { y_aligned16: false, ..o };
        for (shape, o) in [(Shape::new(512, 2044, 4096), o), (Shape::new(512, 2048, 4096), y8)] {
            let p = super::dense(Elem::Bf16, shape, o);
            assert_eq!(p.steps.last().map(|s| s.kern), Some(Kern::Convert), "{shape:?}");
            assert!(!p.tma.is_some_and(|t| t.y16) && p.scratch > 0, "{shape:?}");
        }
        // Split-K products sum slices in the workspace first: they keep the conversion.
        let split = dense_forced(
            Elem::Bf16,
            Shape::new(512, 2048, 4096),
            o,
            ForcedPlan::Gemm { tile: GemmTile::Narrow, splits: Some(2) },
        )
        .unwrap();
        assert_eq!(split.steps.last().map(|s| s.kern), Some(Kern::Convert));
        // Every width's two y16 entries are named, in KERNEL_NAMES order.
        for (i, f) in abi::GEMM_Y16.iter().enumerate() {
            assert_eq!(KERNEL_NAMES[Kern::GemmY16(i, false).index()], f.ts);
            assert_eq!(KERNEL_NAMES[Kern::GemmY16(i, true).index()], f.mc);
        }
        // Each width's f32 entry's shared memory (the same stages and staging ring).
        for t in PLANNED_TILES {
            let f32_smem = match (t, t.fitted()) {
                (GemmTile::Wide, _) => abi::GEMM_TS_SMEM_BYTES,
                (_, None) => abi::GEMM_TS_N128_SMEM_BYTES,
                (_, Some(i)) => abi::GEMM_FITTED[i].smem_bytes(),
            };
            let y16 = abi::GEMM_Y16[t.y16()];
            assert_eq!((y16.tile_n, y16.smem_bytes()), (t.n(), f32_smem), "{t:?}");
        }
    }

    #[test]
    fn one_switch_makes_the_planner_run_unsplit_wide_tiles_by_the_tma_store_or_cluster_entry() {
        assert_eq!(WIDE_ENTRY, WideEntry::Cluster, "the cluster entry, measured fastest on the wide shapes");
        assert_eq!(bf16(4096, 4096, 4096).steps[0].kern, Kern::GemmMc);
        let kern = |shape: Shape, o: DenseOpts, wide| super::dense_with(Elem::Bf16, shape, o, wide).steps[0].kern;
        let o = opts(MAX_CTAS, false);
        // 4096^3 and QKV at M = 4096 plan unsplit wide tiles; the router's narrow and the GEMV stay.
        for shape in [Shape::new(4096, 4096, 4096), Shape::new(4096, 5120, 2048)] {
            assert_eq!(kern(shape, o, WideEntry::Direct), Kern::Gemm);
            assert_eq!(kern(shape, o, WideEntry::TmaStore), Kern::GemmTs);
            assert_eq!(kern(shape, o, WideEntry::Cluster), Kern::GemmMc);
            // The cluster past the budget takes the TMA-store entry; an 8-aligned y the direct one.
            assert_eq!(kern(shape, opts(1, false), WideEntry::Cluster), Kern::GemmTs);
            assert_eq!(kern(shape, DenseOpts { y_aligned16: false, ..o }, WideEntry::Cluster), Kern::Gemm);
            assert_eq!(kern(shape, DenseOpts { y_aligned16: false, ..o }, WideEntry::TmaStore), Kern::Gemm);
        }
        for wide in [WideEntry::TmaStore, WideEntry::Cluster] {
            assert_eq!(kern(Shape::new(128, 128, 2048), o, wide), Kern::GemmTsFit(3));
            assert_eq!(kern(Shape::new(1, 2048, 4096), o, wide), Kern::Gemv(0));
            assert_eq!(kern(Shape::new(512, 2048, 4096), o, wide), Kern::GemmTsFit(3));
            assert_eq!(kern(Shape::new(4096, 1536, 2048), o, wide), Kern::GemmTsFit(1));
            assert_eq!(kern(Shape::new(1024, 2048, 2048), o, wide), Kern::GemmTsN128);
        }
        // Whatever the switch, every plan keeps to the budget.
        for budget in [1, 2, 3, 131, MAX_CTAS] {
            for wide in [WideEntry::Direct, WideEntry::TmaStore, WideEntry::Cluster] {
                let p = super::dense_with(Elem::Bf16, Shape::new(4096, 4096, 4096), opts(budget, false), wide);
                assert!(p.max_ctas() <= u64::from(budget), "{wide:?} budget {budget}: {:?}", p.steps);
            }
        }
    }

    #[test]
    fn every_launch_fits_the_budget() {
        let shapes = [(1, 1, 1), (7, 7, 7), (33, 1000, 33), (4095, 4095, 4095), (2, 151_936, 2048), (300, 1000, 30)];
        for budget in [1, 2, 3, 7, 64, 131, 1000, MAX_CTAS, 5000] {
            let within = |p: &Plan| p.max_ctas() <= u64::from(budget.min(MAX_CTAS));
            for (m, n, k) in shapes {
                for elem in [Elem::Bf16, Elem::F32] {
                    for out_bf16 in [false, true] {
                        let plan = dense(elem, Shape::new(m, n, k), SMS, budget, out_bf16 && elem == Elem::Bf16);
                        assert!(within(&plan), "{elem:?} {m}x{n}x{k} budget {budget}: {:?}", plan.steps);
                    }
                }
                for forced in [
                    ForcedPlan::Gemv { split: None },
                    ForcedPlan::Gemm { tile: GemmTile::Wide, splits: None },
                    ForcedPlan::Gemm { tile: GemmTile::Narrow, splits: Some(1) },
                    ForcedPlan::GemmTmaStore { tile: GemmTile::Wide, cluster: false },
                    ForcedPlan::GemmTmaStore { tile: GemmTile::Wide, cluster: true },
                    ForcedPlan::GemmTmaStore { tile: GemmTile::Narrow, cluster: false },
                    ForcedPlan::GemmTmaStore { tile: GemmTile::Narrow, cluster: true },
                    ForcedPlan::GemmStreamK { tile: GemmTile::Wide },
                    ForcedPlan::GemmStreamK { tile: GemmTile::Narrow },
                    ForcedPlan::GemmPingPong { tile: GemmTile::Narrow },
                ] {
                    if let Ok(plan) = dense_forced(Elem::Bf16, Shape::new(m, n, k), opts(budget, false), forced) {
                        assert!(within(&plan), "{forced} {m}x{n}x{k} budget {budget}: {:?}", plan.steps);
                    }
                }
            }
            for tokens in [1, 8, 64] {
                for (n, k) in [(1536, 2048), (2048, 768)] {
                    let g = GroupedShape { tokens, top_k: 8, experts: 128, n, k };
                    match grouped(g, SMS, budget, Routing::Route, None) {
                        Ok(plan) => assert!(within(&plan), "{g} budget {budget}: {:?}", plan.steps),
                        Err(PlanError::ExpertPastBudget { blocks, .. }) => assert!(u64::from(budget) < blocks),
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        }
    }

    #[test]
    fn the_f32_gemm_is_one_persistent_launch_within_the_budget() {
        // 8192^3: 4096 tiles, two CTAs an SM (264) where the 2-D grid took four launches of 1024.
        for (budget, m, n, grid) in [(MAX_CTAS, 8192u32, 8192u32, 264u32), (100, 8192, 8192, 100), (MAX_CTAS, 5, 9, 1)]
        {
            let plan = dense(Elem::F32, Shape::new(m, n, 7), SMS, budget, false);
            assert_eq!(plan.path, Path::SimtF32);
            assert_eq!(plan.steps.len(), 1, "{m}x{n} budget {budget}");
            let s = &plan.steps[0];
            assert_eq!((s.kern, s.grid, s.block), (Kern::F32, [grid, 1, 1], [128, 1, 1]));
            assert_eq!(s.args, [Arg::X(0), Arg::W(0), Arg::Y(0), Arg::Word(m), Arg::Word(n), Arg::Word(7)]);
        }
        assert_eq!(KERNEL_NAMES[Kern::F32.index()], abi::GEMM_F32_TN_PERSISTENT);
    }

    #[test]
    fn simt_bands_cover_every_row_and_column_once() {
        // The bf16 SIMT kernel (K % 8 != 0); the f32 one is persistent (above).
        for (budget, m, n) in [(MAX_CTAS, 300u32, 1000u32), (3, 300, 1000), (1, 5, 1000), (2, 3, 300)] {
            let plan = dense(Elem::Bf16, Shape::new(m, n, 5), SMS, budget, false);
            let mut covered = vec![0u8; (m * n) as usize];
            for s in &plan.steps {
                let (Arg::Y(y), Arg::Word(rows), Arg::Word(cols)) = (s.args[2], s.args[3], s.args[4]) else {
                    panic!("{s:?}")
                };
                let first = y / 4;
                for r in 0..u64::from(rows) {
                    for c in 0..u64::from(cols) {
                        // A band of rows keeps N's row stride; a one-row piece has no stride at all.
                        let at = if rows == 1 { first + c } else { first + r * u64::from(n) + c };
                        covered[at as usize] += 1;
                    }
                }
                assert!(u64::from(s.grid[0]) * 128 >= u64::from(cols) && u64::from(s.grid[1]) * 128 >= u64::from(rows));
            }
            assert!(covered.iter().all(|&c| c == 1), "budget {budget} {m}x{n}");
        }
    }

    /// The grouped plan's GEMV launch: (variant, grid, k_per_split).
    fn moe(plan: &Plan) -> (Kern, [u32; 3], Arg) {
        assert_eq!(plan.steps.len(), 2, "the route kernel, then one grouped GEMV");
        assert_eq!(plan.steps[0].kern, Kern::Route);
        let s = &plan.steps[1];
        (s.kern, s.grid, s.args[10])
    }

    #[test]
    fn the_grouped_gemm_is_one_launch_over_the_listed_experts() {
        let g = |tokens, n, k| GroupedShape { tokens, top_k: 8, experts: 128, n, k };
        // T = 1, gate+up: 8 entries x 24 blocks = 192 CTAs cover the SMs, rows few enough to stream: the
        // rows entry, unsplit.
        let p = grouped(g(1, 1536, 2048), SMS, MAX_CTAS, Routing::Route, None).unwrap();
        assert_eq!(moe(&p), (Kern::MoeRows, [24, 1, 8], Arg::Word(2048)));
        assert_eq!((p.split, p.tickets, p.scratch), (1, 8 * 24, 0));
        // Fewer CTAs than SMs (one expert routed): split into slices of 1024 of K, the m1 entry.
        let p = grouped(GroupedShape { top_k: 1, ..g(1, 1536, 2048) }, SMS, MAX_CTAS, Routing::Route, None).unwrap();
        assert_eq!(moe(&p), (Kern::Moe(0), [24, 2, 1], Arg::Word(1024)));
        // T = 1, down: K = 768 has no 1024 slice, and 8 x 32 = 256 CTAs already cover the SMs: unsplit.
        let p = grouped(g(1, 2048, 768), SMS, MAX_CTAS, Routing::Route, None).unwrap();
        assert_eq!(moe(&p), (Kern::Moe(0), [32, 1, 8], Arg::Word(768)));
        // T = 8: 64 entries; 24 blocks each already fill the SMs, so no split (the rows entry); the budget
        // holds 42 entries at once and those CTAs walk the rest.
        let p = grouped(g(8, 1536, 2048), SMS, MAX_CTAS, Routing::Route, None).unwrap();
        assert_eq!(moe(&p), (Kern::MoeRows, [24, 1, 42], Arg::Word(2048)));
        assert_eq!((p.tickets, p.scratch), (64 * 24, 0));
        let p = grouped(g(8, 2048, 768), SMS, MAX_CTAS, Routing::Route, None).unwrap();
        assert_eq!(moe(&p), (Kern::Moe(0), [32, 1, 32], Arg::Word(768)));
        // T = 32: up to 4 rows an expert: the row-streaming form in the m1 entry, unsplit.
        let p = grouped(g(32, 1536, 2048), SMS, MAX_CTAS, Routing::Route, None).unwrap();
        assert_eq!(moe(&p).0, Kern::Moe(0));
        assert_eq!(p.split, 1);
        // T = 64: every expert can be touched (128 entries), about 4 rows each: MB = 1 still (8 rows per
        // pass, the row-streaming form up to 4).
        let p = grouped(g(64, 1536, 2048), SMS, MAX_CTAS, Routing::Route, None).unwrap();
        assert_eq!(moe(&p), (Kern::Moe(0), [24, 1, 42], Arg::Word(2048)));
        assert_eq!(p.tickets, 128 * 24);
        // Few experts and many tokens: 64 tokens top-2 of 6 give ~21 rows each, twice that past 32: MB = 8.
        let few = GroupedShape { tokens: 64, top_k: 2, experts: 6, n: 64, k: 96 };
        assert_eq!(moe(&grouped(few, SMS, MAX_CTAS, Routing::Route, None).unwrap()).0, Kern::Moe(3));
        // The layout: offsets, rows, pairs, the drop count, the touched count, room for min(E, P) experts.
        let l = g(1, 1536, 2048).routing();
        assert_eq!((l.dropped, l.active, l.experts, l.words), (129 + 16, 146, 147, 147 + 8));
        assert_eq!(l.experts_capacity(), 8);
        assert_eq!(g(64, 1536, 2048).routing().experts_capacity(), 128);
        let err = grouped(GroupedShape { n: 64 * 1025, ..g(1, 1536, 2048) }, SMS, MAX_CTAS, Routing::Route, None)
            .unwrap_err();
        assert_eq!(err, PlanError::ExpertPastBudget { blocks: 1025, budget: MAX_CTAS });
        // A forced split replaces the planner's (a benchmark's sweep), in whole 32-element chunks, or is
        // refused by name.
        let p = grouped(g(1, 1536, 2048), SMS, MAX_CTAS, Routing::Route, Some(4)).unwrap();
        assert_eq!((moe(&p), p.split, p.scratch), ((Kern::Moe(0), [24, 4, 8], Arg::Word(512)), 4, 4 * 8 * 1536));
        let p = grouped(g(1, 2048, 768), SMS, MAX_CTAS, Routing::Route, Some(1)).unwrap();
        assert_eq!((moe(&p), p.scratch), ((Kern::Moe(0), [32, 1, 8], Arg::Word(768)), 0));
        for bad in [0, 65] {
            let err = grouped(g(1, 1536, 2048), SMS, MAX_CTAS, Routing::Route, Some(bad)).unwrap_err();
            assert_eq!(err, PlanError::GroupedSplit { split: bad, k: 2048, blocks: 24, budget: MAX_CTAS });
        }
    }
}
