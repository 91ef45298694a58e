//! The planner: which kernels of the `matmul` module run for a product, on which grids, with which
//! arguments — a pure function of the shape, the device's SM count and the CTA budget, so it is tested
//! without a device and the typed calls and command-list adds launch the same plan.
//!
//! The paths (docs/kernels.md, "Matmul"; the kernels' contract is kernels/cuda/matmul.cu):
//!
//! - **split-K GEMV** (bf16, M <= 64, K % 32 == 0, x and W 16-byte aligned — whole buffers always are —
//!   its 64-row blocks within the budget): weight streaming,
//!   K split until every SM streams a share of W (`gemv_check.cu`'s planner), the split lowered until
//!   `blocks * split` fits the budget;
//! - **TMA GEMM** (bf16, K % 8 == 0, x and W 16-byte aligned, y 8-byte): the persistent wgmma kernel, grid
//!   `min(tiles, SMs, budget)`; with fewer 128x256 tiles than SMs, its split-K entry, `clamp(SMs /
//!   tiles, 1, K / 64)` splits (whole waves; the kernel adds the slices in split order);
//! - **SIMT** (bf16 of any other K or alignment, and every f32 product): one launch per band of M rows that fits the
//!   budget, or, when one band of 128 rows is already past it (N > 128 * budget), one launch per row and
//!   per 128 * budget columns (a one-row product has no row stride, so its columns can be cut);
//! - **bf16 output**: the f32 product into the workspace, then the conversion kernel;
//! - **grouped GEMV** (mixture of experts): the device routes the top-k choices, then one launch per band
//!   of experts whose `blocks * split` CTAs fit the budget.
//!
//! Every launch's grid (its CTAs) is at most the budget.

use super::error::PlanError;
use crate::kernels::matmul as abi;
// The launch shapes of the kernels are their module's (`omega::kernels::matmul`, which the simulator's
// references and the tests read too); the library only chooses among them.
pub use abi::{GEMM_N128_SMEM_BYTES, GEMM_SMEM_BYTES};

/// The most CTAs a launch of the library may have, and the default budget (`OMEGA_GPU_MATMUL_MAX_CTAS`).
pub const MAX_CTAS: u32 = 1024;

/// The H200's L2 (50 MiB): a weight matrix past it is read from HBM on every pass.
const L2_BYTES: u64 = 50 << 20;

/// Bytes of one TMA descriptor, and of the pair the GEMM reads (A at 0, B at 128).
pub const TMA_PAIR_BYTES: usize = 256;

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
    /// `omega_gemv_bf16_tn_m{1,2,4,8}`, by index (0: m1 .. 3: m8).
    Gemv(usize),
    /// `omega_moe_gemv_bf16_m{1,2,4,8}`, by index.
    Moe(usize),
    Route,
    F32,
    Simt,
    Convert,
}

/// The module's kernel names, in [`Kern`] order: the TMA GEMM, the four GEMVs, the four grouped GEMVs,
/// the router, the two SIMT GEMMs, the conversion, the TMA GEMM's split-K entry and its 128x128 form.
pub(crate) const KERNEL_NAMES: [&str; 15] = [
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
    abi::GEMM_F32_TN,
    abi::GEMM_BF16_SIMT_TN,
    abi::CONVERT_F32_BF16,
    abi::GEMM_BF16_TN_SPLITK,
    abi::GEMM_BF16_TN_N128,
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
    /// The TMA descriptor pair.
    Tma(u64),
    /// The top-k choices of a grouped product.
    TopK,
    /// The routing buffer of a grouped product (offsets, rows, pairs, drop count).
    Routing(u64),
    /// Four zero floats of the workspace.
    Zeros,
    /// A 32-bit value.
    Word(u32),
    /// A 64-bit value.
    Wide(u64),
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
    /// True when the steps read the TMA descriptor pair.
    pub(crate) tma: bool,
    /// Rows of W per TMA box: the GEMM's tile width (256, or 128 for the narrow form).
    pub(crate) tile_n: u32,
    /// True when the steps read the zeros.
    pub(crate) zeros: bool,
    /// The K split of the GEMV and the split-K GEMM (1 elsewhere).
    pub(crate) split: u32,
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

/// Where the parts of a grouped product's routing buffer (u32 words) lie.
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
    /// Words of the whole buffer.
    pub words: usize,
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
        RoutingLayout { offsets: 0, rows: e + 1, pairs: e + 1 + p, dropped: e + 1 + 2 * p, words: e + 2 + 2 * p }
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
}

/// The plan of a dense product (`shape` checked: no side is 0).
pub(crate) fn dense(elem: Elem, shape: Shape, opts: DenseOpts) -> Plan {
    let DenseOpts { sms, budget, out_bf16, aligned, y_aligned } = opts;
    // A bf16 output's f32 product is the workspace's (aligned); only a direct f32 output can be unaligned.
    let y_aligned = y_aligned || out_bf16;
    let (m, n, k) = (u64::from(shape.m), u64::from(shape.n), u64::from(shape.k));
    let budget = clamp_budget(budget);
    let sms = u64::from(sms.max(1));
    let mut scratch = 0u64;
    // The f32 product of a bf16 output lies at the workspace's start.
    let out = |off: u64| if out_bf16 { Arg::Scratch(off) } else { Arg::Y(off) };
    if out_bf16 {
        scratch = round_up(m * n, 64);
    }
    let mut steps = Vec::new();
    let (path, tickets, tma, split);
    let mut tile_n = abi::GEMM_TILE_N;
    let blocks = ceil(n, u64::from(abi::GEMV_ROWS));
    // Past M = 8 the GEMV's MMA form streams a weight matrix larger than L2 slower than the TMA GEMM
    // does (lm_head on the H200: GEMV 270-547 us at M = 16-64, the GEMM 210 us at M = 128;
    // docs/perf/2026-12-02-matmul-library-bench.md); below L2's size the GEMV stays ahead.
    let gemv_streams = m <= 8 || n * k * 2 <= L2_BYTES;
    if elem == Elem::Bf16 && aligned && m <= 64 && k.is_multiple_of(32) && gemv_streams {
        let want = ceil(4 * sms, blocks);
        let (s, kps) = k_split(k, want, blocks, budget);
        // Past the budget the kernel's CTAs walk the 64-row blocks grid-stride (split is then 1).
        let gx = blocks.min((budget / s).max(1));
        let work = if s > 1 {
            let at = Arg::Scratch(scratch * 4);
            scratch += s * m * n;
            at
        } else {
            out(0)
        };
        steps.push(Step {
            kern: Kern::Gemv(mb_index(m)),
            grid: [word(gx), word(s), 1],
            block: [128, 1, 1],
            dynamic_shared: 0,
            args: vec![
                Arg::X(0),
                Arg::W(0),
                out(0),
                work,
                Arg::Tickets(0),
                Arg::Word(shape.m),
                Arg::Word(shape.n),
                Arg::Word(shape.k),
                Arg::Word(word(kps)),
            ],
        });
        (path, tickets, tma, split) = (Path::Gemv, blocks, false, word(s));
    } else if elem == Elem::Bf16 && aligned && y_aligned && k.is_multiple_of(8) {
        // 128x256 tiles, or 128x128 when the wide tiles would fill fewer than half the SMs (M = 512 of
        // the Qwen matrices: 24-80 wide tiles for 132 SMs; docs/perf/2026-12-02-matmul-bringup.md).
        let (tm, tk) = (u64::from(abi::GEMM_TILE_M), u64::from(abi::GEMM_TILE_K));
        let narrow = ceil(m, tm) * ceil(n, u64::from(abi::GEMM_TILE_N)) * 2 < sms;
        tile_n = if narrow { abi::GEMM_N128_TILE_N } else { abi::GEMM_TILE_N };
        let tiles = ceil(m, tm) * ceil(n, u64::from(tile_n));
        let kblocks = ceil(k, tk);
        // Fewer tiles than SMs: split K in whole waves, in the kernel's own arithmetic (the splits a K of
        // `kblocks` blocks keeps after `per` blocks each).
        let asked = if tiles < sms { (sms / tiles).clamp(1, kblocks) } else { 1 };
        let per = kblocks.div_ceil(asked);
        let splits = kblocks.div_ceil(per);
        let tma_args = [Arg::Tma(0), Arg::Tma(128), out(0)];
        let dims = [Arg::Word(shape.m), Arg::Word(shape.n), Arg::Word(shape.k)];
        let split_args = |work: Arg| {
            let mut args = tma_args.to_vec();
            args.extend([work, Arg::Tickets(0)]);
            args.extend(dims);
            args.push(Arg::Word(word(splits)));
            args
        };
        let work = if splits > 1 {
            let at = Arg::Scratch(scratch * 4);
            scratch += splits * m * n;
            at
        } else {
            // Not read with one split.
            out(0)
        };
        let (kern, args, smem) = match (narrow, splits > 1) {
            (true, _) => (Kern::GemmN128, split_args(work), GEMM_N128_SMEM_BYTES),
            (false, true) => (Kern::GemmSplitK, split_args(work), GEMM_SMEM_BYTES),
            (false, false) => (Kern::Gemm, [tma_args, dims].concat(), GEMM_SMEM_BYTES),
        };
        steps.push(Step {
            kern,
            grid: [word((tiles * splits).min(sms).min(budget)), 1, 1],
            block: [abi::GEMM_THREADS, 1, 1],
            dynamic_shared: smem,
            args,
        });
        let gemm_tickets = if splits > 1 { tiles } else { 0 };
        (path, tickets, tma, split) = (Path::Gemm, gemm_tickets, true, word(splits));
    } else {
        let (kern, p) = match elem {
            Elem::Bf16 => (Kern::Simt, Path::SimtBf16),
            Elem::F32 => (Kern::F32, Path::SimtF32),
        };
        let e = elem.bytes();
        let gx = ceil(n, 128);
        let simt = |grid: [u64; 2], x: u64, w: u64, y: u64, rows: u64, cols: u64| Step {
            kern,
            grid: [word(grid[0]), word(grid[1]), 1],
            block: [256, 1, 1],
            dynamic_shared: 0,
            args: vec![Arg::X(x), Arg::W(w), out(y), Arg::Word(word(rows)), Arg::Word(word(cols)), Arg::Word(shape.k)],
        };
        if gx <= budget {
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
        (path, tickets, tma, split) = (p, 0, false, 1);
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
    Plan { path, steps, scratch, tickets, tma, tile_n, zeros: false, split }
}

/// The plan of a grouped product (`shape` checked: no side is 0, K % 32 == 0). Refused when one expert's
/// 64-row blocks alone are past the budget.
pub(crate) fn grouped(shape: GroupedShape, sms: u32, budget: u32) -> Result<Plan, PlanError> {
    let (n, k, e) = (u64::from(shape.n), u64::from(shape.k), u64::from(shape.experts));
    let budget = clamp_budget(budget);
    let sms = u64::from(sms.max(1));
    let choices = shape.choices();
    let layout = shape.routing();
    let blocks = ceil(n, 64);
    if blocks > budget {
        return Err(PlanError::ExpertPastBudget { blocks, budget: word(budget) });
    }
    // The experts the routing can touch: at most one per choice.
    let active = e.min(choices);
    let want = ceil(4 * sms, blocks * active);
    // Every expert's blocks are in each launch's grid (the empty ones end at once): the split is lowered
    // first, then the experts are banded.
    let (split, kps) = k_split(k, want, blocks * e, budget);
    let per_launch = (budget / (blocks * split)).max(1);
    let word_at = |w: usize| (w * 4) as u64;
    let mut steps = vec![
        // The drop count starts at zero on the device, so a command list's replay counts afresh: the
        // conversion of two zero floats writes four zero bytes over it.
        Step {
            kern: Kern::Convert,
            grid: [1, 1, 1],
            block: [256, 1, 1],
            dynamic_shared: 0,
            args: vec![Arg::Zeros, Arg::Routing(word_at(layout.dropped)), Arg::Wide(2)],
        },
        Step {
            kern: Kern::Route,
            grid: [1, 1, 1],
            block: [1024, 1, 1],
            dynamic_shared: 0,
            args: vec![
                Arg::TopK,
                Arg::Word(shape.tokens),
                Arg::Word(shape.top_k),
                Arg::Word(shape.experts),
                Arg::Routing(word_at(layout.offsets)),
                Arg::Routing(word_at(layout.rows)),
                Arg::Routing(word_at(layout.pairs)),
                Arg::Routing(word_at(layout.dropped)),
            ],
        },
    ];
    let mb = mb_index(u64::from(shape.tokens));
    let mut e0 = 0;
    while e0 < e {
        let band = per_launch.min(e - e0);
        steps.push(Step {
            kern: Kern::Moe(mb),
            grid: [word(blocks), word(split), word(band)],
            block: [128, 1, 1],
            dynamic_shared: 0,
            args: vec![
                Arg::X(0),
                Arg::W(e0 * n * k * 2),
                Arg::Y(0),
                if split > 1 { Arg::Scratch(0) } else { Arg::Y(0) },
                Arg::Tickets(e0 * blocks * 4),
                Arg::Routing(word_at(layout.offsets) + e0 * 4),
                Arg::Routing(word_at(layout.rows)),
                Arg::Word(shape.n),
                Arg::Word(shape.k),
                Arg::Word(word(kps)),
                Arg::Word(word(choices)),
            ],
        });
        e0 += band;
    }
    let scratch = if split > 1 { split * choices * n } else { 0 };
    Ok(Plan {
        path: Path::Grouped,
        steps,
        scratch,
        tickets: e * blocks,
        tma: false,
        tile_n: 256,
        zeros: true,
        split: word(split),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMS: u32 = 132;

    fn dense(elem: Elem, shape: Shape, sms: u32, budget: u32, out_bf16: bool) -> Plan {
        super::dense(elem, shape, DenseOpts { sms, budget, out_bf16, aligned: true, y_aligned: true })
    }

    #[test]
    fn the_path_follows_the_shape() {
        let p = |m, n, k| dense(Elem::Bf16, Shape::new(m, n, k), SMS, MAX_CTAS, false).path;
        assert_eq!(p(1, 2048, 4096), Path::Gemv);
        assert_eq!(p(64, 5120, 2048), Path::Gemv);
        assert_eq!(p(65, 5120, 2048), Path::Gemm, "M past 64: the GEMM");
        assert_eq!(p(8, 5120, 2056), Path::Gemm, "K % 32 != 0 but K % 8 == 0: TMA still strides it");
        assert_eq!(p(8, 151_936, 2048), Path::Gemv, "2374 blocks past the budget: the CTAs walk them grid-stride");
        assert_eq!(p(16, 151_936, 2048), Path::Gemm, "past M = 8 a matrix larger than L2 streams faster as a GEMM");
        let lm_head = dense(Elem::Bf16, Shape::new(1, 151_936, 2048), SMS, MAX_CTAS, false);
        assert_eq!((lm_head.steps[0].grid, lm_head.split), ([MAX_CTAS, 1, 1], 1));
        assert_eq!(p(4095, 33, 7), Path::SimtBf16);
        assert_eq!(dense(Elem::F32, Shape::new(1, 1, 1), SMS, MAX_CTAS, false).path, Path::SimtF32);
        let unaligned = DenseOpts { sms: SMS, budget: MAX_CTAS, out_bf16: false, aligned: false, y_aligned: true };
        let y4 = DenseOpts { aligned: true, y_aligned: false, ..unaligned };
        assert_eq!(super::dense(Elem::Bf16, Shape::new(512, 2048, 4096), y4).path, Path::SimtBf16);
        assert_eq!(super::dense(Elem::Bf16, Shape::new(4, 2048, 4096), y4).path, Path::Gemv, "the GEMV stores floats");
        assert_eq!(super::dense(Elem::Bf16, Shape::new(1, 2048, 4096), unaligned).path, Path::SimtBf16);
        assert_eq!(super::dense(Elem::Bf16, Shape::new(512, 2048, 4096), unaligned).path, Path::SimtBf16);
    }

    #[test]
    fn the_gemv_split_follows_gemv_check_and_the_budget() {
        // blocks = 32, want = ceil(528 / 32) = 17, K / 128 = 32: split 17, k_per_split round_up(241, 32) =
        // 256, so split = 16.
        let plan = dense(Elem::Bf16, Shape::new(1, 2048, 4096), SMS, MAX_CTAS, false);
        assert_eq!(plan.steps[0].grid, [32, 16, 1]);
        assert_eq!(plan.steps[0].args[8], Arg::Word(256));
        assert_eq!(plan.scratch, 16 * 2048);
        assert_eq!(plan.tickets, 32);
        // A budget of 100 CTAs: split 100 / 32 = 3, k_per_split round_up(1366, 32) = 1376, split 3.
        let plan = dense(Elem::Bf16, Shape::new(1, 2048, 4096), SMS, 100, false);
        assert_eq!(plan.steps[0].grid, [32, 3, 1]);
        assert_eq!(plan.steps[0].args[8], Arg::Word(1376));
        // No split: the workspace is the output itself, and no scratch is needed.
        // M = 512 of the O projection: 4 x 8 wide tiles fill fewer than half of 132 SMs, so the narrow form:
        // 4 x 16 tiles, 2 splits of K's 64 blocks, a scratch of 2 slices and a ticket per tile.
        let plan = dense(Elem::Bf16, Shape::new(512, 2048, 4096), SMS, MAX_CTAS, false);
        assert_eq!((plan.steps[0].kern, plan.tile_n), (Kern::GemmN128, 128));
        assert_eq!((plan.split, plan.tickets, plan.scratch), (2, 64, 2 * 512 * 2048));
        assert_eq!(plan.steps[0].grid, [128, 1, 1]);
        // QKV at M = 512: 80 wide tiles, more than half: the wide form, unsplit.
        let plan = dense(Elem::Bf16, Shape::new(512, 5120, 2048), SMS, MAX_CTAS, false);
        assert_eq!((plan.steps[0].kern, plan.tile_n, plan.split), (Kern::Gemm, 256, 1));
        assert_eq!(dense(Elem::Bf16, Shape::new(4096, 2048, 4096), SMS, MAX_CTAS, false).steps[0].kern, Kern::Gemm);
        let plan = dense(Elem::Bf16, Shape::new(3, 2048, 96), SMS, MAX_CTAS, false);
        assert_eq!(plan.split, 1);
        assert_eq!(plan.steps[0].args[3], Arg::Y(0));
        assert_eq!(plan.scratch, 0);
    }

    #[test]
    fn every_launch_fits_the_budget() {
        let shapes = [(1, 1, 1), (7, 7, 7), (33, 1000, 33), (4095, 4095, 4095), (2, 151_936, 2048), (300, 1000, 30)];
        for budget in [1, 2, 3, 7, 64, 131, 1000, MAX_CTAS, 5000] {
            for (m, n, k) in shapes {
                for elem in [Elem::Bf16, Elem::F32] {
                    for out_bf16 in [false, true] {
                        let plan = dense(elem, Shape::new(m, n, k), SMS, budget, out_bf16 && elem == Elem::Bf16);
                        assert!(
                            plan.max_ctas() <= u64::from(budget.min(MAX_CTAS)),
                            "{elem:?} {m}x{n}x{k} budget {budget}: {:?}",
                            plan.steps
                        );
                    }
                }
            }
            let g = GroupedShape { tokens: 64, top_k: 8, experts: 128, n: 1536, k: 2048 };
            match grouped(g, SMS, budget) {
                Ok(plan) => assert!(plan.max_ctas() <= u64::from(budget.min(MAX_CTAS))),
                Err(PlanError::ExpertPastBudget { blocks, .. }) => assert!(u64::from(budget) < blocks),
            }
        }
    }

    #[test]
    fn simt_bands_cover_every_row_and_column_once() {
        for (budget, m, n) in [(MAX_CTAS, 300u32, 1000u32), (3, 300, 1000), (1, 5, 1000), (2, 3, 300)] {
            let plan = dense(Elem::F32, Shape::new(m, n, 5), SMS, budget, false);
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

    #[test]
    fn grouped_bands_cover_every_expert_once() {
        let g = GroupedShape { tokens: 1, top_k: 8, experts: 128, n: 1536, k: 2048 };
        let plan = grouped(g, SMS, MAX_CTAS).unwrap();
        // 24 blocks per expert, split 1 (128 * 24 = 3072 CTAs): 42 experts per launch, 4 launches.
        assert_eq!(plan.split, 1);
        let bands: Vec<u32> = plan.steps[2..].iter().map(|s| s.grid[2]).collect();
        assert_eq!(bands.iter().sum::<u32>(), 128);
        assert!(bands.iter().all(|&b| b * 24 <= MAX_CTAS));
        assert_eq!(plan.tickets, 128 * 24);
        assert_eq!(g.routing().words, 129 + 16 + 1);
        let err = grouped(GroupedShape { n: 64 * 1025, ..g }, SMS, MAX_CTAS).unwrap_err();
        assert_eq!(err, PlanError::ExpertPastBudget { blocks: 1025, budget: MAX_CTAS });
    }
}
