//! The skinny bf16 GEMM (`kernels/cuda/matmul/gemm_skinny.cuh`, M = 1..64): its names, launch constants,
//! the planner's split (`skinny_plan`, the header's own, which benches/cuda/skinny_check.cu launches) and
//! the host reference the simulator runs.
//!
//! The reference follows the kernel's units: unit u is tile `u / splits` (W rows `[128 t, +128)`) over K
//! slice `u % splits` (`[s * k_per_split, min(K, +k_per_split))`); it loads what the cp.async ring loads
//! (every W row of the tile and every x row of the entry's `8 * MB`, rows past N or M read as row N - 1
//! or M - 1, whole 16-byte chunks from the slice's start, 16-byte aligned or a fault), and with a split
//! it writes each unit's accumulators where the kernel writes them — in fragment order, the clamped
//! rows' products included — takes the tile's ticket in device memory and lets the unit that takes
//! `splits - 1` add the slices in split order and put the ticket back to zero.

use omega_hal::sim::{KernelCtx, KernelError};
use omega_refmath as math;

use super::{aligned, fault, misaligned, require_block, take_items, Elem, HostSpec, MACS_PER_UNIT};

/// `omega_skinny_bf16_tn_m{1,2,4,8}(x, w, y, work, tickets, M, N, K, k_per_split, splits, y_bf16)`, by
/// [`SKINNY_MB`] (index with [`skinny_variant`]).
pub const SKINNY_BF16_TN: [&str; 4] =
    ["omega_skinny_bf16_tn_m1", "omega_skinny_bf16_tn_m2", "omega_skinny_bf16_tn_m4", "omega_skinny_bf16_tn_m8"];
/// `MB` of the four entries: `8 * MB` rows of x (M at most that).
pub const SKINNY_MB: [u32; 4] = [1, 2, 4, 8];
/// W rows per tile (`SK_ROWS`).
pub const SKINNY_ROWS: u32 = 128;
/// The block (`SK_THREADS`).
pub const SKINNY_THREADS: u32 = 128;
/// K per stage (`SK_KC`): `k_per_split` is a multiple of it.
pub const SKINNY_KC: u32 = 64;
/// Stages of the ring (`SK_STAGES`).
pub const SKINNY_STAGES: u32 = 4;
/// CTAs per SM the planner counts on (`SK_CTAS_PER_SM`: two fit at MB = 8).
pub const SKINNY_CTAS_PER_SM: u32 = 2;
/// The most K splits (`SK_MAX_SPLITS`).
pub const SKINNY_MAX_SPLITS: u32 = 8;
/// The largest M the path takes (`8 * MB` of the widest entry).
pub const SKINNY_MAX_M: u32 = 64;
/// Static shared memory of each entry: the ticket's answer, placed after nvcc's 128-byte alignment.
const SKINNY_STATIC_SHARED: u32 = 128;

/// The entry for `m` rows: 0 up to 8, 1 up to 16, 2 up to 32, 3 past (M <= 64 takes this path).
pub const fn skinny_variant(m: u32) -> usize {
    match m {
        0..=8 => 0,
        9..=16 => 1,
        17..=32 => 2,
        _ => 3,
    }
}

/// Dynamic shared memory of entry `variant` (`omega_skinny::smem_bytes`): the stages of W and x.
pub const fn skinny_smem_bytes(variant: usize) -> u32 {
    SKINNY_STAGES * (SKINNY_ROWS + 8 * SKINNY_MB[variant]) * SKINNY_KC * 2
}

/// Floats of split-K scratch of a launch: every unit's `128 * 8 * MB` accumulators (none unsplit).
pub const fn skinny_work_floats(variant: usize, tiles: u32, splits: u32) -> u64 {
    if splits > 1 {
        tiles as u64 * splits as u64 * SKINNY_ROWS as u64 * 8 * SKINNY_MB[variant] as u64
    } else {
        0
    }
}

/// A skinny launch (`SkinnyPlan` of the header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkinnyPlan {
    /// The entry's index into [`SKINNY_BF16_TN`].
    pub variant: usize,
    /// K slices.
    pub splits: u32,
    /// K elements per slice, a multiple of [`SKINNY_KC`].
    pub k_per_split: u32,
    /// The persistent grid.
    pub grid: u32,
    /// `ceil(N / 128)`: the ticket words of a split launch.
    pub tiles: u32,
}

impl SkinnyPlan {
    /// Work units (`tiles * splits`).
    pub const fn units(&self) -> u64 {
        self.tiles as u64 * self.splits as u64
    }
}

/// `skinny_plan` of gemm_skinny.cuh for `[m, k] · [n, k]ᵀ` on `sms` SMs within `budget` CTAs (k >= 1):
/// the split in whole 64-element blocks, at most [`SKINNY_MAX_SPLITS`], that costs the fewest bytes
/// through the busiest CTA slot — `waves * (per * stage + [s > 1] * s * slice)`, a stage being the tile's
/// W and x of 64 K, a slice one unit's accumulators (written once, read by the last unit) — on a grid of
/// `min(units, 2 * sms, budget)`; ties keep fewer splits.
pub fn skinny_plan(m: u32, n: u32, k: u32, sms: u32, budget: u32) -> SkinnyPlan {
    let variant = skinny_variant(m);
    let mb = u64::from(SKINNY_MB[variant]);
    let tiles = n.div_ceil(SKINNY_ROWS);
    let kblocks = k.div_ceil(SKINNY_KC);
    let slots = (u64::from(SKINNY_CTAS_PER_SM) * u64::from(sms)).min(u64::from(budget.max(1)));
    let stage = (u64::from(SKINNY_ROWS) + 8 * mb) * u64::from(SKINNY_KC) * 2;
    let slice = u64::from(SKINNY_ROWS) * 8 * mb * 4;
    let mut best: Option<(u64, SkinnyPlan)> = None;
    for s in 1..=SKINNY_MAX_SPLITS.min(kblocks) {
        let per = kblocks.div_ceil(s);
        if kblocks.div_ceil(per) != s {
            continue;
        }
        let units = u64::from(tiles) * u64::from(s);
        let grid = units.min(slots);
        let cost = units.div_ceil(grid) * (u64::from(per) * stage + if s > 1 { u64::from(s) * slice } else { 0 });
        if best.is_none_or(|(c, _)| cost < c) {
            let grid = u32::try_from(grid).expect("at most the budget");
            best = Some((cost, SkinnyPlan { variant, splits: s, k_per_split: per * SKINNY_KC, grid, tiles }));
        }
    }
    best.map(|(_, p)| p).expect("K >= 1 keeps one split")
}

/// The four entries' host specs.
pub(super) const SKINNY_SPECS: [HostSpec; 4] = [
    spec(0, skinny_bf16_tn::<0>),
    spec(1, skinny_bf16_tn::<1>),
    spec(2, skinny_bf16_tn::<2>),
    spec(3, skinny_bf16_tn::<3>),
];

const fn spec(variant: usize, run: fn(&mut KernelCtx<'_>) -> Result<(), KernelError>) -> HostSpec {
    HostSpec {
        name: SKINNY_BF16_TN[variant],
        param_sizes: &[8, 8, 8, 8, 8, 4, 4, 4, 4, 4, 4],
        static_shared_bytes: SKINNY_STATIC_SHARED,
        local_bytes_per_thread: 0,
        run,
    }
}

/// `span` bf16 of row `row` of the `[., k]` matrix at `base` from element `k0`, as 16-byte loads (the
/// address 16-byte aligned or a fault), widened: the GEMV's and the skinny GEMM's global loads.
pub(super) fn load_row16(
    ctx: &KernelCtx<'_>,
    kernel: &str,
    what: &str,
    base: u64,
    [row, k, k0, span]: [u64; 4],
) -> Result<Vec<f32>, KernelError> {
    if span == 0 {
        return Ok(Vec::new());
    }
    let va = base.wrapping_add(row.wrapping_mul(k).wrapping_add(k0).wrapping_mul(2));
    if !va.is_multiple_of(16) {
        return Err(misaligned(kernel, what, va, 16));
    }
    Elem::Bf16.load(ctx, va, span)
}

/// One launch's parameters.
struct Skinny {
    name: &'static str,
    mb: u32,
    x: u64,
    w: u64,
    y: u64,
    work: u64,
    tickets: u64,
    m: u32,
    n: u32,
    k: u32,
    k_per_split: u32,
    splits: u32,
    y_bf16: bool,
}

impl Skinny {
    /// Unit `u`'s accumulators over its slice, `[8 * MB x rows][128 W rows]` of the clamped rows.
    fn unit(&self, ctx: &KernelCtx<'_>, tile: u32, s: u32) -> Result<Vec<f32>, KernelError> {
        let k0 = s.wrapping_mul(self.k_per_split);
        let k1 = self.k.min(k0.wrapping_add(self.k_per_split));
        // The ring's chunks below k1, from k0: K % 8 == 0 makes them whole (another K misaligns a row).
        let span = u64::from(k1.saturating_sub(k0).div_ceil(8) * 8);
        let (k, k0) = (u64::from(self.k), u64::from(k0));
        let rows = |base: u64, what: &str, count: u32, last: u32, first: u32| -> Result<Vec<f32>, KernelError> {
            let mut out = Vec::with_capacity(count as usize * span as usize);
            for r in 0..count {
                let row = u64::from(first.wrapping_add(r).min(last));
                out.extend(load_row16(ctx, self.name, what, base, [row, k, k0, span])?);
            }
            Ok(out)
        };
        let w = rows(self.w, "a W row", SKINNY_ROWS, self.n - 1, tile.wrapping_mul(SKINNY_ROWS))?;
        let x = rows(self.x, "an x row", 8 * self.mb, self.m - 1, 0)?;
        let mut acc = vec![0f32; (8 * self.mb * SKINNY_ROWS) as usize];
        math::products(&x, &w, span as usize, false, &mut acc);
        Ok(acc)
    }

    /// Where thread `tid`'s accumulator `r` of block `q = i * MB + nb` of unit `unit` lies in `work`
    /// (floats), and which `(x row, W row of the tile)` it holds: the C fragment's layout.
    fn fragment(&self, unit: u64, tid: u32, q: u32, r: u32) -> (u64, u32, u32) {
        let (warp, lane) = (tid / 32, tid % 32);
        let (i, nb) = (q / self.mb, q % self.mb);
        let n = warp * 32 + 16 * i + lane / 4 + 8 * (r / 2);
        let m = 8 * nb + 2 * (lane % 4) + r % 2;
        let at = ((unit * u64::from(2 * self.mb) + u64::from(q)) * u64::from(SKINNY_THREADS) + u64::from(tid)) * 4;
        (at + u64::from(r), m, n)
    }

    /// `f(index in the unit's slice of work, index in the [8 * MB][128] accumulators)` for every
    /// accumulator of unit `unit`; returns the slice's first float in `work`.
    fn fragments(&self, unit: u64, mut f: impl FnMut(usize, usize)) -> u64 {
        let first = self.fragment(unit, 0, 0, 0).0;
        for tid in 0..SKINNY_THREADS {
            for q in 0..2 * self.mb {
                for r in 0..4 {
                    let (at, m, n) = self.fragment(unit, tid, q, r);
                    f((at - first) as usize, (m * SKINNY_ROWS + n) as usize);
                }
            }
        }
        first
    }

    /// Unit `(tile, s)`'s accumulators into `work` in fragment order.
    fn write_slice(&self, ctx: &mut KernelCtx<'_>, tile: u32, s: u32, acc: &[f32]) -> Result<(), KernelError> {
        let unit = u64::from(tile) * u64::from(self.splits) + u64::from(s);
        let mut slice = vec![0f32; (8 * self.mb * SKINNY_ROWS) as usize];
        let first = self.fragments(unit, |at, i| slice[at] = acc[i]);
        let va = self.work.wrapping_add(first * 4);
        aligned(self.name, "work", va, 16)?;
        ctx.write(va, &math::f32s_to_le(&slice))
    }

    /// The sum of tile `tile`'s slices in split order, `[8 * MB][128]` as [`Skinny::unit`] lays them.
    fn reduce(&self, ctx: &KernelCtx<'_>, tile: u32) -> Result<Vec<f32>, KernelError> {
        let floats = (8 * self.mb * SKINNY_ROWS) as usize;
        let mut sum = vec![0f32; floats];
        for p in 0..self.splits {
            let unit = u64::from(tile) * u64::from(self.splits) + u64::from(p);
            let first = self.fragment(unit, 0, 0, 0).0;
            let slice = ctx.read_f32s(self.work.wrapping_add(first * 4), floats)?;
            self.fragments(unit, |at, i| sum[i] += slice[at]);
        }
        Ok(sum)
    }

    /// The stored part of a tile: rows m < M, columns n < N, f32 or bf16.
    fn store(&self, ctx: &mut KernelCtx<'_>, tile: u32, acc: &[f32]) -> Result<(), KernelError> {
        let n0 = tile.wrapping_mul(SKINNY_ROWS);
        let cols = SKINNY_ROWS.min(self.n.saturating_sub(n0)) as usize;
        let esize = if self.y_bf16 { 2 } else { 4 };
        if cols > 0 {
            aligned(self.name, "y", self.y, esize)?;
        }
        for m in 0..self.m {
            let row = &acc[(m * SKINNY_ROWS) as usize..][..cols];
            let at = (u64::from(m) * u64::from(self.n) + u64::from(n0)) * esize;
            let bytes = if self.y_bf16 {
                row.iter().flat_map(|&v| math::f32_to_bf16(v).to_le_bytes()).collect()
            } else {
                math::f32s_to_le(row)
            };
            ctx.write(self.y.wrapping_add(at), &bytes)?;
        }
        Ok(())
    }

    fn run(&self, ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
        let tiles = self.n.div_ceil(SKINNY_ROWS);
        let units = u64::from(tiles) * u64::from(self.splits);
        let cost = u64::from(SKINNY_ROWS * 8 * self.mb) * u64::from(self.k_per_split).div_ceil(MACS_PER_UNIT).max(1);
        for u in take_items(ctx, units, cost) {
            let (tile, s) = ((u / u64::from(self.splits)) as u32, (u % u64::from(self.splits)) as u32);
            let acc = self.unit(ctx, tile, s)?;
            if self.splits == 1 {
                self.store(ctx, tile, &acc)?;
                continue;
            }
            self.write_slice(ctx, tile, s, &acc)?;
            let ticket = self.tickets.wrapping_add(4 * u64::from(tile));
            aligned(self.name, "a ticket", ticket, 4)?;
            let taken = ctx.read_u32s(ticket, 1)?[0];
            ctx.write_u32s(ticket, &[taken.wrapping_add(1)])?;
            if taken != self.splits - 1 {
                continue;
            }
            ctx.write_u32s(ticket, &[0])?;
            let sum = self.reduce(ctx, tile)?;
            self.store(ctx, tile, &sum)?;
        }
        Ok(())
    }
}

/// `omega_skinny_bf16_tn_m*`: the persistent grid (any size of at least one CTA) covers every unit, so
/// the reference runs them in unit order. What the kernel cannot do faults with the reason: another
/// block, too little dynamic shared memory, M = 0 or past the entry's `8 * MB` rows (rows it never
/// stores), N = 0 with work to do, a `k_per_split` not whole stages or `splits` other than
/// `ceil(K / k_per_split)` (slices that overlap or leave K uncovered).
fn skinny_bf16_tn<const V: usize>(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let name = SKINNY_BF16_TN[V];
    let (x, w, y, work, tickets) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4), ctx.u64_at(6), ctx.u64_at(8));
    let (m, n, k, k_per_split, splits, y_bf16) =
        (ctx.word(10), ctx.word(11), ctx.word(12), ctx.word(13), ctx.word(14), ctx.word(15));
    require_block(ctx, name, SKINNY_THREADS)?;
    let smem = skinny_smem_bytes(V);
    if ctx.dynamic_shared_bytes < smem {
        return Err(fault(
            name,
            format_args!(
                "out-of-range shared address: {} bytes of dynamic shared memory, its stages need {smem}",
                ctx.dynamic_shared_bytes
            ),
        ));
    }
    if n == 0 || splits == 0 {
        return Ok(());
    }
    let mb = SKINNY_MB[V];
    if m == 0 || m > 8 * mb {
        return Err(fault(name, format_args!("M = {m}: the entry computes 1 to {} rows", 8 * mb)));
    }
    if k_per_split == 0 || !k_per_split.is_multiple_of(SKINNY_KC) || k.div_ceil(k_per_split) != splits {
        return Err(fault(
            name,
            format_args!(
                "k_per_split {k_per_split} with {splits} splits over K = {k}: slices must be whole stages of \
                 {SKINNY_KC} and ceil(K / k_per_split) of them"
            ),
        ));
    }
    Skinny { name, mb, x, w, y, work, tickets, m, n, k, k_per_split, splits, y_bf16: y_bf16 != 0 }.run(ctx)
}
