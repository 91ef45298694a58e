//! The `matmul` module's kernels (`kernels/cuda/matmul.cu`, the matmul library's): their names, the
//! launch constants their sources fix, the GEMV planner, and the host references the simulator runs.
//!
//! Every product is `y = x · Wᵀ`: `x` is `[M, K]` row-major, `W` is `[N, K]` row-major (a linear layer's
//! weight), `y` is `[M, N]` row-major f32; bf16 operands are `u16` bit patterns. docs/kernels.md
//! ("Matmul") states each kernel's contract — requirements, launch shape — and what its reference does.
//!
//! Each reference computes what its kernel computes from the simulator's memory, as the kernel addresses
//! it: it reads the TMA descriptors the GEMMs read (out-of-bounds boxes read zero), the rows the GEMV's
//! warps load (its 32-element chunks or streamed row slices, its clamped rows), the routing the grouped
//! kernel reads on the device, and it stores exactly where the kernel stores — so a buffer too small
//! faults (Xid 31) where the kernel's load or store would, and a misaligned vector load faults (Xid 13) as
//! on the GPU. It honours the launch as given: the persistent GEMMs cover every work unit whatever their
//! grid; the SIMT GEMMs cover the tiles their grid names; the K splits (the GEMV's `gridDim.y` slices of
//! `k_per_split`, the split-K GEMM's units) keep their partial sums in `work` and their tickets in device
//! memory, so tickets that were zero stay zero and tickets that were not break the result as they would
//! on the GPU. What a kernel cannot do at all (another block shape than the one it is written for, too
//! little dynamic shared memory, a descriptor whose boxes are not its stages, K = 0 for the tensor-core
//! GEMMs, whose accumulators would stay unwritten) faults with the reason named, where the GPU would hang
//! or store garbage.
//!
//! The references follow the kernels as `kernels/cuda/matmul/*.cuh` write them; a kernel change that
//! moves what a launch reads, stores or requires needs its reference changed with it (`tests/kernels.rs`
//! catches a new entry, a parameter table or a shared-memory size that no longer agrees).
//!
//! Arithmetic: f32 accumulation. The tensor-core kernels' addition order is their hardware's; the
//! references add in an order of their own ([`omega_refmath::dot`]), so results agree to rounding. The
//! SIMT kernels are one `fmaf` chain per output in increasing k, which [`omega_refmath::dot_fma`] repeats
//! bit for bit. The GEMV's split-K partials are summed in split order, as the kernel's last CTA does.
//!
//! Work is sliced as the simulator asks ([`KernelCtx::take`]): one work unit is one output value's 64
//! multiply-adds ([`MACS_PER_UNIT`]), so a slice of the simulator's default 2^16 units is about 4 million
//! multiply-adds whatever the shape, and virtual time grows with the arithmetic. A work item (a GEMM
//! row segment, a GEMV CTA) runs whole in the call that holds its first unit.

use std::ops::Range;

use omega_hal::sim::{KernelCtx, KernelError};
use omega_hal::tma::{
    decode_tiled, TensorMap, TiledSpec, TmaElem, TmaFill, TmaInterleave, TmaSwizzle, TENSOR_MAP_BYTES,
};
use omega_refmath as math;

use super::HostSpec;

mod skinny;
pub use skinny::{
    skinny_plan, skinny_smem_bytes, skinny_variant, skinny_work_floats, SkinnyPlan, SKINNY_BF16_TN, SKINNY_CTAS_PER_SM,
    SKINNY_KC, SKINNY_MAX_M, SKINNY_MAX_SPLITS, SKINNY_MB, SKINNY_ROWS, SKINNY_STAGES, SKINNY_THREADS,
};

/// The module's name (`kernels/cuda/matmul.cu`).
pub const MATMUL: &str = "matmul";
/// Large M: `omega_gemm_bf16_tn(tmap_a, tmap_b, y, M, N, K)`, TMA + wgmma, persistent.
pub const GEMM_BF16_TN: &str = "omega_gemm_bf16_tn";
/// The TMA GEMM with a K split, for shapes with fewer tiles than SMs: `omega_gemm_bf16_tn_splitk(tmap_a,
/// tmap_b, y, work, tickets, M, N, K, splits)`.
pub const GEMM_BF16_TN_SPLITK: &str = "omega_gemm_bf16_tn_splitk";
/// The TMA GEMM's narrow form (128 x 128 tiles, six stages), the split-K entry's parameters:
/// `omega_gemm_bf16_tn_n128(tmap_a, tmap_b, y, work, tickets, M, N, K, splits)`.
pub const GEMM_BF16_TN_N128: &str = "omega_gemm_bf16_tn_n128";
/// The TMA GEMM with a TMA-store epilogue: `omega_gemm_bf16_tn_ts(tmap_a, tmap_b, tmap_y, y, M, N, K)`.
/// Consumers stage their accumulators in shared memory and the TMA unit stores them through y's
/// descriptor ([`gemm_tmap_y`]) while the next tile's mainloop runs; N % 4 != 0 (no descriptor for y
/// exists) takes the base kernel's direct stores into `y`, and `tmap_y` is not read.
pub const GEMM_BF16_TN_TS: &str = "omega_gemm_bf16_tn_ts";
/// [`GEMM_BF16_TN_TS`] in 2-CTA clusters (`__cluster_dims__(2, 1, 1)`): the pair takes the tiles (2 pm,
/// tn) and (2 pm + 1, tn), and each CTA loads half of W's 256-row slice, multicast into both. Its B
/// descriptor has boxes of [`GEMM_MC_B_BOX_ROWS`] rows. The same parameters.
pub const GEMM_BF16_TN_MC: &str = "omega_gemm_bf16_tn_mc";
/// [`GEMM_BF16_TN_TS`] on the narrow tile (128 x 128, six stages): its B descriptor has boxes of
/// [`GEMM_N128_TILE_N`] rows. The same parameters.
pub const GEMM_BF16_TN_TS_N128: &str = "omega_gemm_bf16_tn_ts_n128";
/// [`GEMM_BF16_TN_MC`] on the narrow tile: each CTA of a pair loads [`GEMM_MC_N128_B_BOX_ROWS`] of the
/// tile's 128 W rows. The same parameters.
pub const GEMM_BF16_TN_MC_N128: &str = "omega_gemm_bf16_tn_mc_n128";
/// [`GEMM_BF16_TN_TS`] and [`GEMM_BF16_TN_MC`] on tile widths fitted to whole waves of the Qwen3 shapes
/// (`omega_gemm_bf16_tn_{ts,mc}_n{160,192,96,64}`), by [`FittedGemm`]. The same parameters.
pub const GEMM_FITTED: [FittedGemm; 4] = [
    // 512 x 5120 in 128 tiles (the wide tile makes 80, the narrow 160: 0.6 and 1.2 waves of 132).
    FittedGemm { tile_n: 160, stages: 5, ts: "omega_gemm_bf16_tn_ts_n160", mc: "omega_gemm_bf16_tn_mc_n160" },
    // 4096 x 1536 in 256 tiles (the wide tile makes 192: 1.45 waves).
    FittedGemm { tile_n: 192, stages: 4, ts: "omega_gemm_bf16_tn_ts_n192", mc: "omega_gemm_bf16_tn_mc_n192" },
    // 256 x 5120 in 108 tiles (the narrow tile makes 80; 160 columns 64).
    FittedGemm { tile_n: 96, stages: 6, ts: "omega_gemm_bf16_tn_ts_n96", mc: "omega_gemm_bf16_tn_mc_n96" },
    // 512 x 2048 (O, down) in 128 tiles, the router's 4096 x 128 in 64 (the narrow tile makes 64 and 32).
    FittedGemm { tile_n: 64, stages: 8, ts: "omega_gemm_bf16_tn_ts_n64", mc: "omega_gemm_bf16_tn_mc_n64" },
];
/// The TMA-store entries that store a bf16 y (`_y16`), one per tile width the planner takes (the wide,
/// the narrow, then [`GEMM_FITTED`]'s), by [`FittedGemm`]: the parameters of [`GEMM_BF16_TN_TS`], the
/// same grids, B boxes and shared memory as the f32 entry of their width, but `tmap_y` is y's bf16
/// descriptor ([`gemm_tmap_y16`], so `N % 8 == 0`: the kernel traps on another N) and `y` is not read.
/// Each accumulator is rounded to nearest even (`cvt.rn.bf16x2.f32`: a NaN becomes the canonical
/// 0x7fff, where `omega_convert_f32_bf16` keeps its payload).
pub const GEMM_Y16: [FittedGemm; 6] = [
    FittedGemm {
        tile_n: GEMM_TILE_N,
        stages: GEMM_TS_STAGES,
        ts: "omega_gemm_bf16_tn_ts_y16",
        mc: "omega_gemm_bf16_tn_mc_y16",
    },
    FittedGemm {
        tile_n: GEMM_N128_TILE_N,
        stages: GEMM_TS_N128_STAGES,
        ts: "omega_gemm_bf16_tn_ts_n128_y16",
        mc: "omega_gemm_bf16_tn_mc_n128_y16",
    },
    FittedGemm { ts: "omega_gemm_bf16_tn_ts_n160_y16", mc: "omega_gemm_bf16_tn_mc_n160_y16", ..GEMM_FITTED[0] },
    FittedGemm { ts: "omega_gemm_bf16_tn_ts_n192_y16", mc: "omega_gemm_bf16_tn_mc_n192_y16", ..GEMM_FITTED[1] },
    FittedGemm { ts: "omega_gemm_bf16_tn_ts_n96_y16", mc: "omega_gemm_bf16_tn_mc_n96_y16", ..GEMM_FITTED[2] },
    FittedGemm { ts: "omega_gemm_bf16_tn_ts_n64_y16", mc: "omega_gemm_bf16_tn_mc_n64_y16", ..GEMM_FITTED[3] },
];
/// The `_y16` form (in [`GEMM_Y16`], or the ping-pong entry's) of the TMA-store, cluster or ping-pong
/// entry `name`, if it has one.
pub fn y16_form(name: &str) -> Option<&'static str> {
    let staged = GEMM_Y16.iter().flat_map(|f| [f.ts, f.mc]);
    staged.chain([GEMM_BF16_TN_PP_N128_Y16]).find(|y| y.strip_suffix("_y16") == Some(name))
}

/// A TMA-store GEMM's tile width and its two entries (one CTA a tile, and 2-CTA clusters each loading
/// half of the tile's W rows, multicast).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FittedGemm {
    /// Output columns of a tile (rows of W in the one-CTA entry's B box).
    pub tile_n: u32,
    /// The ring's stages (`GEMM_N<W>_STAGES`): as many as fit beside the staging rings.
    pub stages: u32,
    /// The one-CTA entry.
    pub ts: &'static str,
    /// The cluster entry.
    pub mc: &'static str,
}

impl FittedGemm {
    /// Both entries' dynamic shared memory (`GEMM_N<W>_SMEM_BYTES`), the TMA-store layout's.
    pub const fn smem_bytes(&self) -> u32 {
        gemm_ts_smem_bytes(self.tile_n, self.stages)
    }

    /// Rows of the cluster entry's B box: half of the tile's W rows.
    pub const fn mc_b_box_rows(&self) -> u32 {
        self.tile_n / GEMM_MC_CLUSTER
    }
}
/// [`GEMM_BF16_TN_TS`] in stream-K order (`gemm_bf16_sk.cuh`): `omega_gemm_bf16_tn_sk(tmap_a, tmap_b,
/// tmap_y, y, partials, flags, M, N, K)`. Its grid of G CTAs shares the tiles x K blocks iterations evenly
/// ([`SkSchedule`]); a tile cut by a range boundary is finished by the CTA holding its first K block, from
/// the partial sums the CTAs after it left in `partials` (G slots of [`gemm_sk_slot_floats`]) and
/// released through `flags` (2 G words, zero before and after the launch).
pub const GEMM_BF16_TN_SK: &str = "omega_gemm_bf16_tn_sk";
/// [`GEMM_BF16_TN_SK`] on the narrow tile (128 x 128, six stages; B boxes of [`GEMM_N128_TILE_N`] rows).
/// The same parameters.
pub const GEMM_BF16_TN_SK_N128: &str = "omega_gemm_bf16_tn_sk_n128";
/// [`GEMM_BF16_TN_TS_N128`] with its two consumer warpgroups on alternate whole tiles (`gemm_bf16_pp.cuh`,
/// CUTLASS's ping-pong schedule): one consumer's epilogue runs under the other's mainloop, and the two
/// mainloops take turns. The same parameters, grid, B box ([`GEMM_N128_TILE_N`] rows) and shared memory
/// ([`GEMM_TS_N128_SMEM_BYTES`]) as the TMA-store entry; N % 4 != 0 stores directly into `y`.
pub const GEMM_BF16_TN_PP_N128: &str = "omega_gemm_bf16_tn_pp_n128";
/// [`GEMM_BF16_TN_PP_N128`] storing a bf16 y through its bf16 descriptor ([`gemm_tmap_y16`], `N % 8 ==
/// 0`, else a trap), as the [`GEMM_Y16`] entries do; `y` is not read.
pub const GEMM_BF16_TN_PP_N128_Y16: &str = "omega_gemm_bf16_tn_pp_n128_y16";
/// The gate+up GEMM with SwiGLU in its epilogue (`gemm_bf16_ts.cuh`, `OMEGA_GEMM_SWIGLU`), one entry pair
/// per tile width by [`SwigluGemm`]: `(tmap_a, tmap_b, tmap_y, y, M, N, K)` as [`GEMM_BF16_TN_TS`], with N
/// y's width: `y[m, j] = silu(x[m] . W[j]) * (x[m] . W[N + j])` for the fused gate+up weight `W` `[2N, K]`
/// (gate rows first). A tile's accumulators are `tile_n / 2` gate and as many up rows (B's box
/// [`SwigluGemm::b_box_rows`]), combined in registers; y is stored through its descriptor only (f32: N %
/// 4 == 0, `_y16`: N % 8 == 0, else a trap), `y` not read. Grid `[min(tiles, SMs), 1, 1]` with tiles =
/// `ceil(M/128) * ceil(N / (tile_n/2))`. `silu(g) = g / (1 + e^-g)` as the elementwise SwiGLU's
/// (`__fdividef`, `__expf`). Widest first: the planner keeps the first of equal costs.
pub const GEMM_SWIGLU: [SwigluGemm; 3] = [
    SwigluGemm {
        tile_n: GEMM_TILE_N,
        stages: GEMM_TS_STAGES,
        f32: "omega_gemm_bf16_tn_swiglu_n256",
        y16: "omega_gemm_bf16_tn_swiglu_n256_y16",
    },
    SwigluGemm {
        tile_n: GEMM_FITTED[1].tile_n,
        stages: GEMM_FITTED[1].stages,
        f32: "omega_gemm_bf16_tn_swiglu_n192",
        y16: "omega_gemm_bf16_tn_swiglu_n192_y16",
    },
    SwigluGemm {
        tile_n: GEMM_N128_TILE_N,
        stages: GEMM_TS_N128_STAGES,
        f32: "omega_gemm_bf16_tn_swiglu_n128",
        y16: "omega_gemm_bf16_tn_swiglu_n128_y16",
    },
];

/// A SwiGLU GEMM's tile width and its two entries ([`GEMM_SWIGLU`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwigluGemm {
    /// Accumulator columns of a tile: half gate, half up rows of W.
    pub tile_n: u32,
    /// The ring's stages (those of the TMA-store entry of this width).
    pub stages: u32,
    /// The f32-output entry.
    pub f32: &'static str,
    /// The bf16-output entry.
    pub y16: &'static str,
}

impl SwigluGemm {
    /// Both entries' dynamic shared memory: the TMA-store layout of `tile_n` columns.
    pub const fn smem_bytes(&self) -> u32 {
        gemm_ts_smem_bytes(self.tile_n, self.stages)
    }

    /// Rows of its B box, and columns of y a tile stores: half the tile's accumulator columns.
    pub const fn b_box_rows(&self) -> u32 {
        self.tile_n / 2
    }
}

/// The small-M GEMM with its operands' roles swapped (`gemm_swapab.cuh`): `y^T = W . x^T` on the TMA
/// GEMM's body, W as wgmma's 64-row A operand (tiles of [`GEMM_TILE_M`] W rows, two consumers) and x as
/// its B operand in a box of [`SwapabGemm::mb`] rows, so no MMA row and no x box row past `mb` is wasted
/// at M <= 64. `(tmap_w, tmap_x, y, work, tickets, M, N, K, splits)`, M and N y's: tmap_w is
/// [`gemm_tmap_a`] over W (`[N, K]`), tmap_x [`gemm_tmap_b_rows`] over x with `mb`-row boxes; y is f32
/// (`_y16`: bf16, rounded as `cvt.rn.bf16.f32`), stored element by element (4- or 2-byte aligned); with
/// `splits > 1` the partial sums go to `work` (`splits * M * N` f32, y's layout) and `tickets`
/// (`ceil(N / 128) * ceil(M / mb)` zeroed words, left zero) as the split-K entries'. K % 8 == 0. Any M
/// works (tiles of `mb` x rows); M <= `mb` is what it is for. Grid `[min(units, SMs), 1, 1]`, units =
/// tiles * splits. Narrowest first; [`swapab_variant`] picks the entry for M.
pub const GEMM_SWAPAB: [SwapabGemm; 4] = [
    SwapabGemm { mb: 8, stages: 13, f32: "omega_gemm_bf16_tn_swapab_m8", y16: "omega_gemm_bf16_tn_swapab_m8_y16" },
    SwapabGemm { mb: 16, stages: 12, f32: "omega_gemm_bf16_tn_swapab_m16", y16: "omega_gemm_bf16_tn_swapab_m16_y16" },
    SwapabGemm { mb: 32, stages: 11, f32: "omega_gemm_bf16_tn_swapab_m32", y16: "omega_gemm_bf16_tn_swapab_m32_y16" },
    SwapabGemm { mb: 64, stages: 9, f32: "omega_gemm_bf16_tn_swapab_m64", y16: "omega_gemm_bf16_tn_swapab_m64_y16" },
];

/// One x box height of [`GEMM_SWAPAB`] and its two entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwapabGemm {
    /// x's box rows: the wgmma's N, and the most rows of y the entry computes.
    pub mb: u32,
    /// The ring's stages: as many as fit beside 227 KiB.
    pub stages: u32,
    /// The f32-output entry.
    pub f32: &'static str,
    /// The bf16-output entry.
    pub y16: &'static str,
}

impl SwapabGemm {
    /// Dynamic shared memory: the stages (W's 128-row box and x's `mb`-row box), their barriers and the
    /// alignment slack (`GEMM_SMEM_FOR_BN(mb, stages)`).
    pub const fn smem_bytes(&self) -> u32 {
        self.stages * (GEMM_TILE_M * GEMM_TILE_K * 2 + self.mb * GEMM_TILE_K * 2) + 2 * self.stages * 8 + 1024
    }
}

/// The [`GEMM_SWAPAB`] entry for `m` rows of x: the narrowest whose box holds them (`None` past 64).
pub fn swapab_variant(m: u32) -> Option<usize> {
    GEMM_SWAPAB.iter().position(|g| m <= g.mb)
}

/// Small M: `omega_gemv_bf16_tn_m{1,2,4,8}(x, w, y, work, tickets, M, N, K, k_per_split)`, by
/// [`GEMV_MB`] (index with [`gemv_variant`]).
pub const GEMV_BF16_TN: [&str; 4] =
    ["omega_gemv_bf16_tn_m1", "omega_gemv_bf16_tn_m2", "omega_gemv_bf16_tn_m4", "omega_gemv_bf16_tn_m8"];
/// `omega_gemv_bf16_tn_m1_rows`: the m1 entry of [`GEMV_BF16_TN`] (same arguments, same sums) with 4 W rows
/// a round in its row-streaming form, for one row of x streamed unsplit (`gemv_bf16.cuh`,
/// `GemvDenseRowsTuned`).
pub const GEMV_BF16_TN_ROWS: &str = "omega_gemv_bf16_tn_m1_rows";
/// The GEMV with a bf16 output, `omega_gemv_bf16_tn_m{1,2,4,8}_y16` (the same parameters, y bf16): every
/// K slice goes through `work` and the tickets, a split of 1 included, and the last CTA of a 64-row block
/// stores the rounded sum, so a bf16 product at small M is one launch.
pub const GEMV_BF16_TN_Y16: [&str; 4] = [
    "omega_gemv_bf16_tn_m1_y16",
    "omega_gemv_bf16_tn_m2_y16",
    "omega_gemv_bf16_tn_m4_y16",
    "omega_gemv_bf16_tn_m8_y16",
];
/// Grouped experts: `omega_moe_gemv_bf16_m{1,2,4,8}(x, w, y, work, tickets, offsets, rows, active, N, K,
/// k_per_split, max_slots)`, by [`GEMV_MB`]: one launch over the touched experts `active` lists.
pub const MOE_GEMV_BF16: [&str; 4] =
    ["omega_moe_gemv_bf16_m1", "omega_moe_gemv_bf16_m2", "omega_moe_gemv_bf16_m4", "omega_moe_gemv_bf16_m8"];
/// `omega_moe_gemv_bf16_m1_rows`: the m1 entry of [`MOE_GEMV_BF16`] (same arguments, same sums) under the
/// tuning whose row-streaming form issues a round's W loads together, for the grouped products the planner
/// streams unsplit (`gemv_bf16.cuh`, `GemvRowsTuned`).
pub const MOE_GEMV_BF16_ROWS: &str = "omega_moe_gemv_bf16_m1_rows";
/// `omega_moe_route(topk, T, top_k, E, offsets, rows, pairs, dropped, active)`: top-k choices to CSR
/// routing, the drop count (stored) and the list of touched experts (`active[0]` of them at `active[1..]`).
pub const MOE_ROUTE: &str = "omega_moe_route";
/// `omega_moe_router_route(x, w, logits, ticket, T, K, E, top_k, topk, weights, offsets, rows, pairs,
/// dropped, active)`: the router product `logits = x . w^T` (f32), each token's top k and weights (as
/// the decoder's `omega_router_topk`) and the routing of [`MOE_ROUTE`], one launch of `ceil(E /
/// ROUTER_ROWS)` CTAs of [`ROUTE_THREADS`]; the last CTA to take `*ticket` selects and routes, and puts it
/// back to zero.
pub const MOE_ROUTER_ROUTE: &str = "omega_moe_router_route";
/// Experts each CTA of [`MOE_ROUTER_ROUTE`] takes (`ROUTER_ROWS`: 16 warps an expert).
pub const ROUTER_ROWS: u32 = 2;
/// `omega_gemm_f32_tn(x, w, y, M, N, K)`: f32 FMA, any shape.
pub const GEMM_F32_TN: &str = "omega_gemm_f32_tn";
/// `omega_gemm_bf16_simt_tn(x, w, y, M, N, K)`: bf16 widened exactly, f32 FMA, any shape or alignment.
pub const GEMM_BF16_SIMT_TN: &str = "omega_gemm_bf16_simt_tn";
/// The f32 GEMM candidates of issue 12 (`gemm_sgemm.cuh`), `(x, w, y, M, N, K)` as [`GEMM_F32_TN`] and
/// the same arithmetic (one `fmaf` chain per output, k ascending), each with its launch shape: see
/// [`SgemmVariant`]. benches/cuda/sgemm_check.cu times them beside cuBLAS.
pub const GEMM_F32_TN_V2: [SgemmVariant; 5] = [
    // cuBLAS's shape (8 x 16 a thread, 128 threads, K slices of 8), register-staged, FMAs rows first; then
    // zigzag, which leaves ptxas fewer register-bank conflicts.
    SgemmVariant::staged("omega_gemm_f32_tn_v2_8x16k8", 8),
    SgemmVariant::staged("omega_gemm_f32_tn_v2_8x16k8_zigzag", 8),
    // The same shape with 16-byte cp.async into K-major stages: 3 and 4 stages of K = 8, 3 of K = 16.
    SgemmVariant::kmajor("omega_gemm_f32_tn_v2_8x16k8_cp3", 8, 3),
    SgemmVariant::kmajor("omega_gemm_f32_tn_v2_8x16k8_cp4", 8, 4),
    SgemmVariant::kmajor("omega_gemm_f32_tn_v2_8x16k16_cp3", 16, 3),
];
/// The fastest of [`GEMM_F32_TN_V2`] on the H200 so far (8192^3: 44.9 TFLOP/s against
/// `omega_gemm_f32_tn`'s 43.5 and cuBLAS's 50.9; benches/cuda/sgemm_check.cu).
pub const GEMM_F32_TN_V2_BEST: usize = 1;
/// [`GEMM_F32_TN_V2`]'s best ([`GEMM_F32_TN_V2_BEST`], the zigzag form) made persistent: `(x, w, y, M, N,
/// K)`, grid `[G, 1, 1]` of any G >= 1, CTA b taking the 128 x 128 tiles b, b + G, ... in row-major tile
/// order, so one launch within the CTA budget covers any shape (the library's f32 path).
pub const GEMM_F32_TN_PERSISTENT: &str = "omega_gemm_f32_tn_v2_8x16k8_zigzag_p";
/// The persistent f32 GEMM's CTAs per SM (two at 248 registers): the library's grid is
/// `min(tiles, 2 * SMs, budget)`.
pub const GEMM_F32_PERSISTENT_CTAS_PER_SM: u32 = 2;
/// `omega_convert_f32_bf16(in, out, n)`: round to nearest even, grid-stride.
pub const CONVERT_F32_BF16: &str = "omega_convert_f32_bf16";

/// The TMA GEMM's output tile rows (`GEMM_BM`).
pub const GEMM_TILE_M: u32 = 128;
/// The TMA GEMM's output tile columns (`GEMM_BN`).
pub const GEMM_TILE_N: u32 = 256;
/// The narrow form's output tile columns.
pub const GEMM_N128_TILE_N: u32 = 128;
/// Tile rows the TMA GEMMs walk together before the next column (`GEMM_GROUP_M`).
pub const GEMM_GROUP_M: u32 = 16;
/// The TMA GEMM's K slice per pipeline stage (`GEMM_BK`): the descriptors' inner box.
pub const GEMM_TILE_K: u32 = 64;
/// The TMA GEMM's block: a producer and two consumer warpgroups.
pub const GEMM_THREADS: u32 = 384;
/// The TMA GEMM's dynamic shared memory: 4 stages of A and B tiles, 8 mbarriers, 1 KiB of alignment
/// slack (`GEMM_SMEM_BYTES`, 197,696 bytes).
pub const GEMM_SMEM_BYTES: u32 = 4 * (128 * 64 * 2 + 256 * 64 * 2) + 2 * 4 * 8 + 1024;
/// The narrow form's dynamic shared memory: 6 stages of 128 x 64 A and B tiles, 12 mbarriers, the slack
/// (`GEMM_N128_SMEM_BYTES`, 197,728 bytes).
pub const GEMM_N128_SMEM_BYTES: u32 = 6 * (128 * 64 * 2 + 128 * 64 * 2) + 2 * 6 * 8 + 1024;
/// The TMA-store entry's dynamic shared memory: 4 stages, each consumer's staging ring of two 32-column
/// buffers (2 x 8 KiB), 8 mbarriers, the slack (`GEMM_TS_SMEM_BYTES`, 230,464 bytes).
pub const GEMM_TS_SMEM_BYTES: u32 = gemm_ts_smem_bytes(GEMM_TILE_N, GEMM_TS_STAGES);
/// The wide TMA-store and cluster entries' stages (`GEMM_TS_STAGES`, `GEMM_MC_STAGES`).
pub const GEMM_TS_STAGES: u32 = 4;
/// The narrow ones' (`GEMM_TS_N128_STAGES`, `GEMM_MC_N128_STAGES`).
pub const GEMM_TS_N128_STAGES: u32 = 6;
/// A TMA-store layout's dynamic shared memory (gemm_bf16_ts.cuh's `GEMM_TS_SMEM_FOR_BN` with its module's
/// staging): `stages` stages of the 128 x 64 A box and a `tile_n` x 64 B box, each consumer's staging ring
/// of two 32-column buffers, two mbarriers a stage, 1 KiB of alignment slack.
pub const fn gemm_ts_smem_bytes(tile_n: u32, stages: u32) -> u32 {
    stages * (GEMM_TILE_M * GEMM_TILE_K * 2 + tile_n * GEMM_TILE_K * 2) + 2 * 2 * 32 * 64 * 4 + 2 * stages * 8 + 1024
}
/// The cluster entry's dynamic shared memory: the TMA-store entry's layout (`GEMM_MC_SMEM_BYTES`).
pub const GEMM_MC_SMEM_BYTES: u32 = GEMM_TS_SMEM_BYTES;
/// The cluster entry's CTAs per cluster (`__cluster_dims__`): its grid is a whole number of pairs.
pub const GEMM_MC_CLUSTER: u32 = 2;
/// Rows of the cluster entry's B box: each CTA of a pair loads half of the tile's 256 W rows.
pub const GEMM_MC_B_BOX_ROWS: u32 = GEMM_TILE_N / GEMM_MC_CLUSTER;
/// The narrow TMA-store entries' dynamic shared memory: 6 stages of 128 x 64 A and B tiles, the staging
/// rings of [`GEMM_TS_SMEM_BYTES`], 12 mbarriers, the slack (`GEMM_TS_N128_SMEM_BYTES`, 230,496 bytes).
pub const GEMM_TS_N128_SMEM_BYTES: u32 = gemm_ts_smem_bytes(GEMM_N128_TILE_N, GEMM_TS_N128_STAGES);
/// The narrow cluster entry's: the same layout (`GEMM_MC_N128_SMEM_BYTES`).
pub const GEMM_MC_N128_SMEM_BYTES: u32 = GEMM_TS_N128_SMEM_BYTES;
/// Rows of the narrow cluster entry's B box: half of the tile's 128 W rows.
pub const GEMM_MC_N128_B_BOX_ROWS: u32 = GEMM_N128_TILE_N / GEMM_MC_CLUSTER;
/// The stream-K entries' dynamic shared memory: the TMA-store entries' layouts (the fix-up goes through
/// global memory).
pub const GEMM_SK_SMEM_BYTES: u32 = GEMM_TS_SMEM_BYTES;
/// The narrow stream-K entry's (`GEMM_SK_N128_SMEM_BYTES`).
pub const GEMM_SK_N128_SMEM_BYTES: u32 = GEMM_TS_N128_SMEM_BYTES;
/// The fewest iterations the library gives a stream-K CTA: a finisher reads the slot of every CTA that
/// shares its tile, so a grid of one K block per CTA would make one CTA read a slot per K block (the
/// router's 128 x 128 x 2048 would be 31 slots of 64 KiB). Timed on an H100 (gemm_check's `sk*_i<n>`
/// variants, docs/perf/2026-12-07-s16-h100-libraries.md): 16 beat 4 and one-iteration grids at every shape
/// where stream-K competes, by 8-26 % (narrow tile, TFLOP/s, 4 against 16: 512 x 1536 x 2048 193.6 / 243.5,
/// 128 x 5120 x 2048 165.3 / 198.6, 4096 x 128 x 2048 136.2 / 163.1, 128 x 1536 x 2048 54.7 / 62.6).
pub const GEMM_SK_MIN_ITERS: u64 = 16;
/// The stream-K kernels count iterations (tiles x K blocks) in 32 bits; a product of this many or more
/// takes another entry.
pub const GEMM_SK_MAX_ITERS: u64 = 1 << 31;

/// f32 of one stream-K CTA's partials slot (`GEMM_SK_SLOT_FLOATS`): both consumers' 64 x `tile_n`
/// accumulators.
pub const fn gemm_sk_slot_floats(tile_n: u32) -> u64 {
    2 * 64 * tile_n as u64
}

/// How a stream-K launch of `grid` CTAs shares `total` iterations (`tiles * kblocks`, tile-major): CTA c
/// takes `[begin(c), begin(c + 1))`, each CTA `total / grid` iterations and the first `total % grid` one
/// more (`sk_begin` in gemm_bf16_sk.cuh).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkSchedule {
    /// Iterations of the product.
    pub total: u64,
    /// CTAs.
    pub grid: u64,
    /// K blocks per tile.
    pub kblocks: u64,
}

/// One stretch of a stream-K CTA's range: tile `tile`'s K blocks `kb0 .. kb1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkSegment {
    /// Tile index (the kernels' grouped order).
    pub tile: u64,
    /// First K block.
    pub kb0: u64,
    /// One past the last K block.
    pub kb1: u64,
}

impl SkSchedule {
    /// The first iteration of CTA `c` (`total` for a CTA past it).
    pub fn begin(&self, c: u64) -> u64 {
        let (q, r) = (self.total / self.grid.max(1), self.total % self.grid.max(1));
        c * q + c.min(r)
    }

    /// CTA `c`'s segments, in the order it runs them.
    pub fn segments(&self, c: u64) -> Vec<SkSegment> {
        let (mut pos, end) = (self.begin(c), self.begin(c + 1));
        let mut out = Vec::new();
        while pos < end {
            let (tile, kb0) = (pos / self.kblocks, pos % self.kblocks);
            let kb1 = self.kblocks.min(kb0 + (end - pos));
            out.push(SkSegment { tile, kb0, kb1 });
            pos += kb1 - kb0;
        }
        out
    }

    /// The CTAs after `c` whose partial sums the finisher `c` of `tile` adds, in its order.
    pub fn contributors(&self, c: u64, tile: u64) -> Range<u64> {
        let tile_end = (tile + 1) * self.kblocks;
        c + 1..(c + 1..self.grid).find(|&d| self.begin(d) >= tile_end).unwrap_or(self.grid)
    }
}

/// y's TMA box for the TMA-store entries: 32 floats (one 128-byte swizzle span) by 64 rows (a consumer
/// warpgroup's half of a tile).
pub const GEMM_Y_BOX: [u32; 2] = [64, 32];
/// A bf16 y's box for the [`GEMM_Y16`] entries: 64 elements (one 128-byte swizzle span) by 64 rows.
pub const GEMM_Y16_BOX: [u32; 2] = [64, 64];
/// The GEMV's W rows per CTA (`GEMV_ROWS`): `gridDim.x = ceil(N / 64)`.
pub const GEMV_ROWS: u32 = 64;
/// The GEMV's block (`GEMV_THREADS`).
pub const GEMV_THREADS: u32 = 128;
/// The GEMV's K granule: each warp pass loads 32 elements of a row (`K % 32 == 0` is its requirement).
pub const GEMV_K_CHUNK: u32 = 32;
/// `MB` of the four GEMV and grouped-GEMV entries: each pass over W takes `8 * MB` rows of x.
pub const GEMV_MB: [u32; 4] = [1, 2, 4, 8];
/// The GEMV's row-streaming form (`ROWS_MAX_M`): the MB = 1 entries stream whole row slices for at most
/// this many x rows over K slices of at least 1024.
pub const ROWS_MAX_M: u32 = 4;
/// The routing kernel's block (`ROUTE_THREADS`): one thread per expert, 1024 experts a pass.
pub const ROUTE_THREADS: u32 = 1024;
/// The SIMT GEMMs' output tile (128 x 128): `grid = [ceil(N / 128), ceil(M / 128), 1]`.
pub const SIMT_TILE: u32 = 128;
/// The SIMT GEMMs' block.
pub const SIMT_THREADS: u32 = 256;
/// One f32 GEMM candidate's launch: `grid = [ceil(N / tile_n), ceil(M / tile_m), 1]`, `block =
/// [threads, 1, 1]`, no dynamic shared memory; its stages in static shared memory (`shared_bytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SgemmVariant {
    /// The entry's symbol.
    pub name: &'static str,
    /// Output rows a CTA covers (`Cfg::BM`).
    pub tile_m: u32,
    /// Output columns a CTA covers (`Cfg::BN`).
    pub tile_n: u32,
    /// The block it is written for (`Cfg::THREADS`).
    pub threads: u32,
    /// K per shared-memory stage (`Cfg::BK`).
    pub slice_k: u32,
    /// Its static shared memory (`Cfg::SMEM_BYTES`).
    pub shared_bytes: u32,
}

impl SgemmVariant {
    /// Its grid for an `m x n` output.
    pub const fn grid(&self, m: u32, n: u32) -> [u32; 3] {
        [n.div_ceil(self.tile_n), m.div_ceil(self.tile_m), 1]
    }

    /// A register-staged 128 x 128 candidate of 128 threads (`Cfg`): two double-buffered
    /// `[slice_k][128 + 4]` stages of each operand.
    pub const fn staged(name: &'static str, slice_k: u32) -> SgemmVariant {
        let shared_bytes = 2 * slice_k * (128 + 4 + 128 + 4) * 4;
        SgemmVariant { name, tile_m: 128, tile_n: 128, threads: 128, slice_k, shared_bytes }
    }

    /// A cp.async 128 x 128 candidate of 128 threads (`KCfg`, both operands K-major): `stages` stages of
    /// `[128][slice_k]` for each operand, unpadded (the chunks are swizzled instead).
    pub const fn kmajor(name: &'static str, slice_k: u32, stages: u32) -> SgemmVariant {
        let shared_bytes = stages * slice_k * (128 + 128) * 4;
        SgemmVariant { name, tile_m: 128, tile_n: 128, threads: 128, slice_k, shared_bytes }
    }
}

/// The conversion's block (`omega_convert_f32_bf16` strides by `gridDim.x * 256`).
pub const CONVERT_THREADS: u32 = 256;
/// Multiply-adds per work unit of the references' slices (one output value's 64 of K).
pub const MACS_PER_UNIT: u64 = 64;

/// Which of the four GEMV entries serves `m` rows of x (`MB` = 1 up to 8 rows, 2 up to 16, 4 up to 32,
/// 8 past): the index into [`GEMV_BF16_TN`], [`MOE_GEMV_BF16`] and [`GEMV_MB`].
pub const fn gemv_variant(m: u32) -> usize {
    match m {
        0..=8 => 0,
        9..=16 => 1,
        17..=32 => 2,
        _ => 3,
    }
}

/// A GEMV launch's K split, as the planner of kernel_abi.md (`gemv_check.cu`'s `plan`) makes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemvPlan {
    /// `gridDim.x`: `ceil(N / 64)`.
    pub blocks: u32,
    /// `gridDim.y`: `ceil(K / k_per_split)`.
    pub split: u32,
    /// K elements per slice, a multiple of 32.
    pub k_per_split: u32,
}

impl GemvPlan {
    /// `split * M * N` floats of split-K scratch when `split > 1` (none otherwise): the dense GEMV's
    /// `work`, and the grouped GEMV's with `M` = `max_slots`.
    pub const fn work_floats(&self, m: u32, n: u32) -> u64 {
        if self.split > 1 {
            self.split as u64 * m as u64 * n as u64
        } else {
            0
        }
    }
}

/// The GEMV plan for `[., K] · [N, K]ᵀ` on `sms` SMs: enough CTAs to fill every SM about four times over
/// (`want = ceil(4 * sms / blocks)` slices), never a slice below 128 of K, slices rounded up to 32.
pub fn gemv_plan(n: u32, k: u32, sms: u32) -> GemvPlan {
    let blocks = n.div_ceil(GEMV_ROWS).max(1);
    let want = (4 * sms.max(1)).div_ceil(blocks);
    let split = want.min(k / 128).max(1);
    let k_per_split = k.div_ceil(split).next_multiple_of(GEMV_K_CHUNK).max(GEMV_K_CHUNK);
    GemvPlan { blocks, split: k.div_ceil(k_per_split).max(1), k_per_split }
}

/// How a split-K TMA GEMM divides its work, in the kernel's own arithmetic: `tiles` output tiles
/// (`ceil(M / 128) * ceil(N / tile_n)`), `kblocks = ceil(K / 64)` blocks of K, `per` blocks per split
/// (`ceil(kblocks / splits asked)`), `splits` the splits that remain (`ceil(kblocks / per)`), `units =
/// tiles * splits` work units (unit u: tile `u / splits`, split `u % splits`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmSplit {
    /// Output tiles.
    pub tiles: u32,
    /// K blocks of 64.
    pub kblocks: u32,
    /// K blocks per split.
    pub per: u32,
    /// Splits after the kernel drops those K does not need.
    pub splits: u32,
    /// Work units (the persistent grid's `min(units, SMs)` takes them).
    pub units: u32,
}

impl GemmSplit {
    /// The split of `[M, K] · [N, K]ᵀ` in tiles of 128 x `tile_n` with `splits` asked (0 counts as 1).
    /// The kernel's 32-bit arithmetic throughout (`(M + 127) / 128`, products that wrap).
    pub fn new(m: u32, n: u32, k: u32, tile_n: u32, splits: u32) -> GemmSplit {
        let tiles = (m.wrapping_add(GEMM_TILE_M - 1) / GEMM_TILE_M)
            .wrapping_mul(n.wrapping_add(tile_n.max(1) - 1) / tile_n.max(1));
        let kblocks = k.wrapping_add(GEMM_TILE_K - 1) / GEMM_TILE_K;
        let per = kblocks.div_ceil(splits.max(1)).max(1);
        let splits = kblocks.div_ceil(per).max(1);
        GemmSplit { tiles, kblocks, per, splits, units: tiles.wrapping_mul(splits) }
    }

    /// The whole-wave split for `sms` SMs, `clamp(floor(sms / tiles), 1, kblocks)`: what the kernel tests
    /// and the smoke run launch (the library's planner chooses by its cost model, `plan::GemmCost`).
    pub fn planned(m: u32, n: u32, k: u32, tile_n: u32, sms: u32) -> GemmSplit {
        let tiles = m.div_ceil(GEMM_TILE_M) * n.div_ceil(tile_n);
        let kblocks = k.div_ceil(GEMM_TILE_K).max(1);
        GemmSplit::new(m, n, k, tile_n, (sms / tiles.max(1)).clamp(1, kblocks))
    }

    /// Floats of split-K scratch (`splits * M * N` when the kernel splits, none otherwise).
    pub const fn work_floats(&self, m: u32, n: u32) -> u64 {
        if self.splits > 1 {
            self.splits as u64 * m as u64 * n as u64
        } else {
            0
        }
    }
}

/// The TMA GEMM's A descriptor for x at `x_va` (`[m, k]` bf16, rows `2k` bytes apart): boxes of 128 rows
/// by 64 elements, 128-byte swizzle (kernel_abi.md). Encode it with [`omega_hal::tma::encode_tiled`].
pub fn gemm_tmap_a(x_va: u64, m: u32, k: u32) -> TiledSpec {
    let (rows, cols) = (u64::from(m), u64::from(k));
    TiledSpec::matrix(TmaElem::Bf16, x_va, [rows, cols], 2 * cols, [GEMM_TILE_M, GEMM_TILE_K], TmaSwizzle::B128)
}

/// The TMA GEMM's B descriptor for W at `w_va` (`[n, k]` bf16): boxes of 256 rows by 64 elements,
/// 128-byte swizzle.
pub fn gemm_tmap_b(w_va: u64, n: u32, k: u32) -> TiledSpec {
    gemm_tmap_b_rows(w_va, n, k, GEMM_TILE_N)
}

/// The B descriptor with boxes of `box_rows` rows: [`GEMM_TILE_N`] for `omega_gemm_bf16_tn` and the
/// split-K entry, [`GEMM_N128_TILE_N`] for the narrow form.
pub fn gemm_tmap_b_rows(w_va: u64, n: u32, k: u32, box_rows: u32) -> TiledSpec {
    let (rows, cols) = (u64::from(n), u64::from(k));
    TiledSpec::matrix(TmaElem::Bf16, w_va, [rows, cols], 2 * cols, [box_rows, GEMM_TILE_K], TmaSwizzle::B128)
}

/// y's descriptor for the TMA-store entries at `y_va` (`[m, n]` f32, rows `4n` bytes apart): boxes of 64
/// rows by 32 floats, 128-byte swizzle. Only for `n % 4 == 0` (the row stride a multiple of 16 bytes);
/// the entries store other N directly.
pub fn gemm_tmap_y(y_va: u64, m: u32, n: u32) -> TiledSpec {
    let (rows, cols) = (u64::from(m), u64::from(n));
    TiledSpec::matrix(TmaElem::F32, y_va, [rows, cols], 4 * cols, GEMM_Y_BOX, TmaSwizzle::B128)
}

/// A bf16 y's descriptor for the [`GEMM_Y16`] entries at `y_va` (`[m, n]` bf16, rows `2n` bytes apart):
/// boxes of 64 rows by 64 elements (the same 128-byte rows as [`gemm_tmap_y`]'s), 128-byte swizzle. Only
/// for `n % 8 == 0`.
pub fn gemm_tmap_y16(y_va: u64, m: u32, n: u32) -> TiledSpec {
    let (rows, cols) = (u64::from(m), u64::from(n));
    TiledSpec::matrix(TmaElem::Bf16, y_va, [rows, cols], 2 * cols, GEMM_Y16_BOX, TmaSwizzle::B128)
}

/// The f64 value and magnitude of one product, `(Σ_k x[k]·w[k], Σ_k |x[k]·w[k]|)`: what a test checks a
/// matmul result against (every f32 product is exact in f64). Optimised in every build
/// ([`omega_refmath`]), so debug-built tests check real shapes fast.
pub fn dot_f64(x: &[f32], w: &[f32]) -> (f64, f64) {
    math::dot_f64(x, w)
}

/// `silu(g) * u` in f64 of x's row `x` with W's gate row `gate` (g) and up row `up` (u), and the bound a
/// SwiGLU GEMM's value lies within: each product's f32 accumulation error (`K 2^-22 Σ|x·w|`, as for a
/// product) carried through SwiGLU (`silu` moves by at most 1.1 per unit of g), plus `2^-20` of the value
/// for the epilogue's `__expf` / `__fdividef`. A bf16 output adds half a bf16 step of its own.
pub fn swiglu_f64(x: &[f32], gate: &[f32], up: &[f32]) -> (f64, f64) {
    let k = x.len() as f64;
    let ((g, gmag), (u, umag)) = (dot_f64(x, gate), dot_f64(x, up));
    let (eg, eu) = (gmag * k * 2f64.powi(-22), umag * k * 2f64.powi(-22));
    let silu = g / (1.0 + (-g).exp());
    let want = silu * u;
    (want, 1.1 * u.abs() * eg + (silu.abs() + eg) * eu + want.abs() * 2f64.powi(-20) + 1e-30)
}

/// [`dot_f64`] of every row of `x` (`[m, k]`) with every row of `w` (`[n, k]`): `[m, n]` values and
/// magnitudes, row-major.
pub fn products_f64(x: &[f32], w: &[f32], k: usize) -> (Vec<f64>, Vec<f64>) {
    math::products_f64(x, w, k)
}

/// f32 of a bf16 bit pattern (exact).
pub fn bf16_to_f32(bits: u16) -> f32 {
    math::bf16_to_f32(bits)
}

/// The f32 values of bf16 bit patterns (exact; fast in debug builds too).
pub fn bf16s_to_f32(bits: &[u16]) -> Vec<f32> {
    math::bf16s_to_f32(bits)
}

/// `n` random bf16 (bit patterns) uniform in [-1, 1] from `seed`, the same on every machine: inputs for
/// tests and examples at real shapes, generated fast in debug builds too.
pub fn random_bf16(seed: u64, n: usize) -> Vec<u16> {
    math::random_bf16(seed, n)
}

/// `n` random f32 uniform in [-1, 1) from `seed` (as [`random_bf16`]).
pub fn random_f32(seed: u64, n: usize) -> Vec<f32> {
    math::random_f32(seed, n)
}

/// bf16 bit pattern of `f`, as `omega_convert_f32_bf16` rounds it (nearest even; NaN made quiet).
pub fn f32_to_bf16(f: f32) -> u16 {
    math::f32_to_bf16(f)
}

/// The matmul module's kernels with their host references, by symbol name.
pub const MATMUL_HOST_SPECS: &[HostSpec] = &[
    // The TMA GEMMs' one static word: `last_unit`, a split's ticket answer.
    HostSpec {
        name: GEMM_BF16_TN,
        param_sizes: &[8, 8, 8, 4, 4, 4],
        static_shared_bytes: 4,
        local_bytes_per_thread: 0,
        run: gemm_bf16_tn,
    },
    HostSpec {
        name: GEMM_BF16_TN_SPLITK,
        param_sizes: &[8, 8, 8, 8, 8, 4, 4, 4, 4],
        static_shared_bytes: 4,
        local_bytes_per_thread: 0,
        run: gemm_bf16_tn_splitk,
    },
    HostSpec {
        name: GEMM_BF16_TN_N128,
        param_sizes: &[8, 8, 8, 8, 8, 4, 4, 4, 4],
        static_shared_bytes: 4,
        local_bytes_per_thread: 0,
        run: gemm_bf16_tn_n128,
    },
    HostSpec {
        name: GEMM_BF16_TN_TS,
        param_sizes: &[8, 8, 8, 8, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: gemm_bf16_tn_ts,
    },
    HostSpec {
        name: GEMM_BF16_TN_MC,
        param_sizes: &[8, 8, 8, 8, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: gemm_bf16_tn_mc,
    },
    HostSpec {
        name: GEMM_BF16_TN_TS_N128,
        param_sizes: &[8, 8, 8, 8, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: gemm_bf16_tn_ts_n128,
    },
    HostSpec {
        name: GEMM_BF16_TN_MC_N128,
        param_sizes: &[8, 8, 8, 8, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: gemm_bf16_tn_mc_n128,
    },
    HostSpec {
        name: GEMM_BF16_TN_SK,
        param_sizes: &[8, 8, 8, 8, 8, 8, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: gemm_bf16_tn_sk,
    },
    HostSpec {
        name: GEMM_BF16_TN_SK_N128,
        param_sizes: &[8, 8, 8, 8, 8, 8, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: gemm_bf16_tn_sk_n128,
    },
    HostSpec {
        name: GEMM_BF16_TN_PP_N128,
        param_sizes: &[8, 8, 8, 8, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: gemm_bf16_tn_pp_n128::<false>,
    },
    HostSpec {
        name: GEMM_BF16_TN_PP_N128_Y16,
        param_sizes: &[8, 8, 8, 8, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: gemm_bf16_tn_pp_n128::<true>,
    },
    swiglu_spec(0, false, gemm_swiglu::<0, false>),
    swiglu_spec(0, true, gemm_swiglu::<0, true>),
    swiglu_spec(1, false, gemm_swiglu::<1, false>),
    swiglu_spec(1, true, gemm_swiglu::<1, true>),
    swiglu_spec(2, false, gemm_swiglu::<2, false>),
    swiglu_spec(2, true, gemm_swiglu::<2, true>),
    swapab_spec(0, false, gemm_swapab::<0, false>),
    swapab_spec(0, true, gemm_swapab::<0, true>),
    swapab_spec(1, false, gemm_swapab::<1, false>),
    swapab_spec(1, true, gemm_swapab::<1, true>),
    swapab_spec(2, false, gemm_swapab::<2, false>),
    swapab_spec(2, true, gemm_swapab::<2, true>),
    swapab_spec(3, false, gemm_swapab::<3, false>),
    swapab_spec(3, true, gemm_swapab::<3, true>),
    table_spec(&GEMM_FITTED, 0, false, gemm_table::<false, 0, false>),
    table_spec(&GEMM_FITTED, 0, true, gemm_table::<false, 0, true>),
    table_spec(&GEMM_FITTED, 1, false, gemm_table::<false, 1, false>),
    table_spec(&GEMM_FITTED, 1, true, gemm_table::<false, 1, true>),
    table_spec(&GEMM_FITTED, 2, false, gemm_table::<false, 2, false>),
    table_spec(&GEMM_FITTED, 2, true, gemm_table::<false, 2, true>),
    table_spec(&GEMM_FITTED, 3, false, gemm_table::<false, 3, false>),
    table_spec(&GEMM_FITTED, 3, true, gemm_table::<false, 3, true>),
    table_spec(&GEMM_Y16, 0, false, gemm_table::<true, 0, false>),
    table_spec(&GEMM_Y16, 0, true, gemm_table::<true, 0, true>),
    table_spec(&GEMM_Y16, 1, false, gemm_table::<true, 1, false>),
    table_spec(&GEMM_Y16, 1, true, gemm_table::<true, 1, true>),
    table_spec(&GEMM_Y16, 2, false, gemm_table::<true, 2, false>),
    table_spec(&GEMM_Y16, 2, true, gemm_table::<true, 2, true>),
    table_spec(&GEMM_Y16, 3, false, gemm_table::<true, 3, false>),
    table_spec(&GEMM_Y16, 3, true, gemm_table::<true, 3, true>),
    table_spec(&GEMM_Y16, 4, false, gemm_table::<true, 4, false>),
    table_spec(&GEMM_Y16, 4, true, gemm_table::<true, 4, true>),
    table_spec(&GEMM_Y16, 5, false, gemm_table::<true, 5, false>),
    table_spec(&GEMM_Y16, 5, true, gemm_table::<true, 5, true>),
    gemv_spec(0, 0, gemv_bf16_tn::<0>),
    gemv_spec(1, 0, gemv_bf16_tn::<1>),
    gemv_spec(2, 0, gemv_bf16_tn::<2>),
    gemv_spec(3, 0, gemv_bf16_tn::<3>),
    HostSpec { name: GEMV_BF16_TN_ROWS, ..gemv_spec(0, 0, gemv_bf16_tn_rows) },
    gemv_y16_spec(0, gemv_bf16_tn_y16::<0>),
    gemv_y16_spec(1, gemv_bf16_tn_y16::<1>),
    gemv_y16_spec(2, gemv_bf16_tn_y16::<2>),
    gemv_y16_spec(3, gemv_bf16_tn_y16::<3>),
    skinny::SKINNY_SPECS[0],
    skinny::SKINNY_SPECS[1],
    skinny::SKINNY_SPECS[2],
    skinny::SKINNY_SPECS[3],
    moe_spec(0, 0, moe_gemv_bf16::<0>),
    moe_spec(1, 0, moe_gemv_bf16::<1>),
    moe_spec(2, 0, moe_gemv_bf16::<2>),
    moe_spec(3, 0, moe_gemv_bf16::<3>),
    HostSpec { name: MOE_GEMV_BF16_ROWS, ..moe_spec(0, 0, moe_gemv_bf16_rows) },
    HostSpec {
        name: MOE_ROUTE,
        param_sizes: &[8, 4, 4, 4, 8, 8, 8, 8, 8],
        // The block scan's two 32-word arrays, `next[ROUTE_THREADS]` (a pass's counts, then its next
        // slots) and the drop count.
        static_shared_bytes: 2 * 32 * 4 + ROUTE_THREADS * 4 + 4,
        local_bytes_per_thread: 0,
        run: moe_route,
    },
    HostSpec {
        name: MOE_ROUTER_ROUTE,
        param_sizes: &[8, 8, 8, 8, 4, 4, 4, 4, 8, 8, 8, 8, 8, 8, 8],
        // The route's shared words and the last-CTA flag.
        static_shared_bytes: 2 * 32 * 4 + ROUTE_THREADS * 4 + 4 + 4,
        local_bytes_per_thread: 0,
        run: moe_router_route,
    },
    HostSpec {
        name: GEMM_F32_TN,
        param_sizes: &[8, 8, 8, 4, 4, 4],
        static_shared_bytes: SIMT_SHARED_BYTES,
        local_bytes_per_thread: 0,
        run: gemm_f32_tn,
    },
    HostSpec {
        name: GEMM_BF16_SIMT_TN,
        param_sizes: &[8, 8, 8, 4, 4, 4],
        static_shared_bytes: SIMT_SHARED_BYTES,
        local_bytes_per_thread: 0,
        run: gemm_bf16_simt_tn,
    },
    sgemm_spec::<0>(),
    sgemm_spec::<1>(),
    sgemm_spec::<2>(),
    sgemm_spec::<3>(),
    sgemm_spec::<4>(),
    HostSpec {
        name: GEMM_F32_TN_PERSISTENT,
        param_sizes: &[8, 8, 8, 4, 4, 4],
        static_shared_bytes: GEMM_F32_TN_V2[GEMM_F32_TN_V2_BEST].shared_bytes,
        local_bytes_per_thread: 0,
        run: gemm_f32_tn_persistent,
    },
    HostSpec {
        name: CONVERT_F32_BF16,
        param_sizes: &[8, 8, 8],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: convert_f32_bf16,
    },
];

/// The SIMT GEMMs' two double-buffered `[16][128 + 4]` f32 tiles (rows padded against bank conflicts).
const SIMT_SHARED_BYTES: u32 = 2 * 2 * 16 * (SIMT_TILE + 4) * 4;

const fn sgemm_spec<const I: usize>() -> HostSpec {
    HostSpec {
        name: GEMM_F32_TN_V2[I].name,
        param_sizes: &[8, 8, 8, 4, 4, 4],
        static_shared_bytes: GEMM_F32_TN_V2[I].shared_bytes,
        local_bytes_per_thread: 0,
        run: gemm_f32_tn_v2::<I>,
    }
}

const fn gemv_spec(
    variant: usize,
    local_bytes_per_thread: u32,
    run: fn(&mut KernelCtx<'_>) -> Result<(), KernelError>,
) -> HostSpec {
    HostSpec {
        name: GEMV_BF16_TN[variant],
        param_sizes: &[8, 8, 8, 8, 8, 4, 4, 4, 4],
        // `__shared__ uint32_t last`: the split-K ticket's answer.
        static_shared_bytes: 4,
        local_bytes_per_thread,
        run,
    }
}

const fn gemv_y16_spec(variant: usize, run: fn(&mut KernelCtx<'_>) -> Result<(), KernelError>) -> HostSpec {
    HostSpec { name: GEMV_BF16_TN_Y16[variant], ..gemv_spec(variant, 0, run) }
}

const fn moe_spec(
    variant: usize,
    local_bytes_per_thread: u32,
    run: fn(&mut KernelCtx<'_>) -> Result<(), KernelError>,
) -> HostSpec {
    HostSpec {
        name: MOE_GEMV_BF16[variant],
        param_sizes: &[8, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 4],
        static_shared_bytes: 4,
        local_bytes_per_thread,
        run,
    }
}

// ----- what every reference shares ----------------------------------------------------------------------

/// A fault of kernel `kernel` that is not an address the MMU refused: Xid 13, as the GPU reports an
/// exception of the graphics engine (a misaligned address, a shared-memory access past the window).
pub(super) fn fault(kernel: &str, why: impl core::fmt::Display) -> KernelError {
    KernelError::Fault { xid: 13, detail: format!("{kernel}: {why}") }
}

pub(super) fn misaligned(kernel: &str, what: &str, va: u64, align: u64) -> KernelError {
    fault(kernel, format_args!("misaligned address: {what} at {va:#x} is not {align}-byte aligned"))
}

/// Refuses an access of `align` bytes at `va` that is not aligned to them (a misaligned address).
fn aligned(kernel: &str, what: &str, va: u64, align: u64) -> Result<(), KernelError> {
    if va.is_multiple_of(align) {
        Ok(())
    } else {
        Err(misaligned(kernel, what, va, align))
    }
}

/// Refuses a launch whose block is not `want`: the kernels index their warps and tiles by a fixed block
/// (on the GPU another shape would hang or leave outputs unwritten).
pub(super) fn require_block(ctx: &KernelCtx<'_>, kernel: &str, want: u32) -> Result<(), KernelError> {
    if ctx.block != [want, 1, 1] {
        return Err(fault(
            kernel,
            format_args!("launched with block {:?}; it is written for [{want}, 1, 1]", ctx.block),
        ));
    }
    Ok(())
}

/// This call's items of `items` equal ones of `cost` units each: those whose first unit lies in the
/// call's take, so each item runs whole in exactly one call.
pub(super) fn take_items(ctx: &mut KernelCtx<'_>, items: u64, cost: u64) -> Range<u64> {
    let cost = cost.max(1);
    let units = ctx.take(items.saturating_mul(cost));
    units.start.div_ceil(cost)..units.end.div_ceil(cost)
}

/// Bytes `va .. va + len` of device memory (a GPU load). Read a chunk at a time, so a length that no
/// buffer holds costs no more host memory than the part that exists before the fault.
fn load(ctx: &KernelCtx<'_>, va: u64, len: u64) -> Result<Vec<u8>, KernelError> {
    const CHUNK: u64 = 1 << 20;
    // `vec![0; n]` is one zeroed allocation, where growing a Vec would write each byte (slow in the debug
    // builds the tests are).
    let mut out = vec![0u8; len.min(CHUNK) as usize];
    ctx.read(va, &mut out)?;
    while (out.len() as u64) < len {
        let at = out.len() as u64;
        let mut chunk = vec![0u8; (len - at).min(CHUNK) as usize];
        ctx.read(va.wrapping_add(at), &mut chunk)?;
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// An operand's element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Elem {
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

    /// `n` elements at `va`, widened to f32.
    fn load(self, ctx: &KernelCtx<'_>, va: u64, n: u64) -> Result<Vec<f32>, KernelError> {
        let bytes = load(ctx, va, n.saturating_mul(self.bytes()))?;
        Ok(match self {
            Elem::Bf16 => math::widen_bf16(&bytes),
            Elem::F32 => math::f32s_le(&bytes),
        })
    }
}

/// Where the rows of one operand of a dense product lie.
#[derive(Clone, Copy, Debug)]
struct Rows {
    elem: Elem,
    /// Row 0.
    va: u64,
    /// Bytes between rows.
    row_bytes: u64,
    /// Rows that exist; the others read as zeros without a load (the TMA's out-of-bounds fill).
    rows: u64,
    /// Elements the kernel loads of each row (at least the ones it multiplies).
    loaded: u64,
    /// Whether a misaligned row faults (scalar loads of the element size), or alignment is the
    /// descriptor's business (TMA).
    check_align: bool,
}

impl Rows {
    /// The first `kk` elements of row `r`, after loading what the kernel loads of it.
    fn row(&self, ctx: &KernelCtx<'_>, kernel: &str, what: &str, r: u64, kk: usize) -> Result<Vec<f32>, KernelError> {
        if r >= self.rows {
            return Ok(vec![0.0; kk]);
        }
        let va = self.va.wrapping_add(r.wrapping_mul(self.row_bytes));
        if self.check_align && !va.is_multiple_of(self.elem.bytes()) {
            return Err(misaligned(kernel, what, va, self.elem.bytes()));
        }
        let mut v = self.elem.load(ctx, va, self.loaded)?;
        v.resize(kk, 0.0);
        Ok(v)
    }
}

/// A dense product `y[m, n] = Σ_{k < kk} a[m, k] · b[n, k]` for `m < rows`, `n < cols`, computed in
/// items of one row by `tile_n` columns, column blocks outermost (so a call reuses the B rows it read).
struct Dense<'a> {
    kernel: &'a str,
    a: Rows,
    b: Rows,
    kk: u64,
    y: u64,
    /// Floats between rows of y (N).
    ldy: u64,
    rows: u64,
    cols: u64,
    tile_n: u64,
    fused: bool,
    /// y is bf16, each value rounded as `cvt.rn.bf16x2.f32` rounds ([`GEMM_Y16`]); `ldy` counts elements.
    y16: bool,
    /// SwiGLU ([`GEMM_SWIGLU`]): output n is `silu(product with b's row n) * (product with row up + n)`.
    swiglu_up: Option<u64>,
}

/// bf16 of `f` as `cvt.rn.bf16x2.f32` makes it: nearest even, a NaN the canonical quiet NaN 0x7fff.
fn cvt_rn_bf16(f: f32) -> u16 {
    if f.is_nan() {
        0x7fff
    } else {
        math::f32_to_bf16(f)
    }
}

impl Dense<'_> {
    fn run(&self, ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
        if self.rows == 0 || self.cols == 0 {
            return Ok(());
        }
        let blocks = self.cols.div_ceil(self.tile_n);
        let cost = self.tile_n * self.kk.div_ceil(MACS_PER_UNIT).max(1);
        let items = take_items(ctx, blocks.saturating_mul(self.rows), cost);
        let kk = usize::try_from(self.kk).map_err(|_| fault(self.kernel, "K past the host's address space"))?;
        let mut i = items.start;
        while i < items.end {
            let (nb, m0) = (i / self.rows, i % self.rows);
            let m1 = self.rows.min(m0 + (items.end - i));
            let (n0, n1) = (nb * self.tile_n, self.cols.min((nb + 1) * self.tile_n));
            let mut b = Vec::with_capacity((n1 - n0) as usize * kk * if self.swiglu_up.is_some() { 2 } else { 1 });
            for n in n0..n1 {
                b.extend(self.b.row(ctx, self.kernel, "a W row", n, kk)?);
            }
            if let Some(up) = self.swiglu_up {
                for n in n0..n1 {
                    b.extend(self.b.row(ctx, self.kernel, "an up row of W", up + n, kk)?);
                }
            }
            let mut a = Vec::with_capacity((m1 - m0) as usize * kk);
            for m in m0..m1 {
                a.extend(self.a.row(ctx, self.kernel, "an x row", m, kk)?);
            }
            let width = (n1 - n0) as usize;
            let products = if self.swiglu_up.is_some() { 2 * width } else { width };
            let mut out = vec![0f32; (m1 - m0) as usize * products];
            math::products(&a, &b, kk, self.fused, &mut out);
            if self.swiglu_up.is_some() {
                // Each row's gate products, then its up products: the output is their SwiGLU.
                out = out
                    .chunks_exact(products)
                    .flat_map(|r| {
                        let (g, u) = r.split_at(width);
                        g.iter().zip(u).map(|(&g, &u)| super::elementwise::silu_mul(g, u))
                    })
                    .collect();
            }
            for (m, row) in (m0..m1).zip(out.chunks_exact(width)) {
                let at = m.wrapping_mul(self.ldy).wrapping_add(n0);
                if self.y16 {
                    let bytes: Vec<u8> = row.iter().flat_map(|&v| cvt_rn_bf16(v).to_le_bytes()).collect();
                    ctx.write(self.y.wrapping_add(at.wrapping_mul(2)), &bytes)?;
                } else {
                    ctx.write(self.y.wrapping_add(at.wrapping_mul(4)), &math::f32s_to_le(row))?;
                }
            }
            i += m1 - m0;
        }
        Ok(())
    }
}

// ----- the TMA GEMM --------------------------------------------------------------------------------------

/// A TMA descriptor the GEMM reads at `va`, checked against what its stages are laid out for: bf16, 2-D,
/// boxes of `box_rows` rows by 64 elements, 128-byte swizzle, zero fill. Another descriptor would make the
/// stages' byte count or layout wrong (a barrier that never completes, or garbage), so it faults here.
fn gemm_tensor_map(ctx: &KernelCtx<'_>, va: u64, which: &str, box_rows: u32) -> Result<TiledSpec, KernelError> {
    staged_tensor_map(ctx, GEMM_BF16_TN, va, which, &[GEMM_TILE_K, box_rows])
}

/// A descriptor kernel `k` reads at `va` into 128B-swizzled shared-memory stages: bf16, of `want_box`'s
/// rank and box, unit element strides, no interleave, 128-byte swizzle, zero fill (ragged boxes sum
/// zeros). Anything else faults, naming what differs.
pub(super) fn staged_tensor_map(
    ctx: &KernelCtx<'_>,
    k: &str,
    va: u64,
    which: &str,
    want_box: &[u32],
) -> Result<TiledSpec, KernelError> {
    if !va.is_multiple_of(64) {
        return Err(misaligned(k, which, va, 64));
    }
    let mut m = TensorMap([0; TENSOR_MAP_BYTES]);
    ctx.read(va, &mut m.0)?;
    let s = decode_tiled(&m).map_err(|e| fault(k, format_args!("{which} at {va:#x} is not a tensor map: {e}")))?;
    let rank = want_box.len();
    let wrong = if s.elem != TmaElem::Bf16 {
        Some(format!("element type {:?}, not Bf16", s.elem))
    } else if s.rank as usize != rank {
        Some(format!("rank {}, not {rank}", s.rank))
    } else if s.box_dim[..rank] != *want_box {
        Some(format!("box {:?}, not {want_box:?} (innermost first)", &s.box_dim[..rank]))
    } else if s.element_stride[..rank].iter().any(|&e| e != 1) {
        Some(format!("element strides {:?}, not all 1", &s.element_stride[..rank]))
    } else if s.interleave != TmaInterleave::None || s.swizzle != TmaSwizzle::B128 {
        Some(format!("interleave {:?} and swizzle {:?}, not None and B128", s.interleave, s.swizzle))
    } else if s.fill != TmaFill::Zeros {
        Some("a NaN fill, not zeros (ragged tiles would sum NaN)".to_string())
    } else {
        None
    };
    match wrong {
        Some(why) => Err(fault(k, format_args!("{which} at {va:#x}: {why}; the kernel's stages take those"))),
        None => Ok(s),
    }
}

/// The tile a persistent TMA GEMM computes for tile index `t` (`tile_of` in gemm_bf16.cuh):
/// [`GEMM_GROUP_M`] tile rows at a time, column by column. `(tile row, tile column)`.
fn tile_of(t: u64, tiles_m: u64, tiles_n: u64) -> (u64, u64) {
    let group_m = u64::from(GEMM_GROUP_M);
    let per_group = group_m * tiles_n;
    let group = t / per_group;
    let first_m = group * group_m;
    let rows = (tiles_m - first_m).min(group_m);
    let in_group = t - group * per_group;
    (first_m + in_group % rows, in_group / rows)
}

/// The parameters after `tmap_a, tmap_b` of a TMA GEMM entry.
#[derive(Clone, Copy, PartialEq, Eq)]
enum GemmArgs {
    /// `y, M, N, K` (`omega_gemm_bf16_tn`).
    Plain,
    /// `y, work, tickets, M, N, K, splits` (the split-K and narrow entries).
    Split,
    /// `tmap_y, y, M, N, K` (the TMA-store entries).
    Staged,
    /// `tmap_y, y, partials, flags, M, N, K` (the stream-K entries).
    StreamK,
    /// `tmap_y, y, M, N, K` as [`GemmArgs::Staged`], for the SwiGLU entries ([`GEMM_SWIGLU`]): N is y's
    /// width, a tile's `tile_n` accumulator columns are `tile_n / 2` gate rows of W and the up rows N on,
    /// and y is stored through its descriptor only.
    Swiglu,
    /// `y, work, tickets, M, N, K, splits` as [`GemmArgs::Split`], for the swapped small-M entries
    /// ([`GEMM_SWAPAB`]): A (`tmap_a`) is W's descriptor and B x's, M and N are y's, and y and the
    /// partial slices hold `y[m, n]` at `m * N + n`, stored element by element.
    Swapped,
}

/// One of the TMA GEMM's entries (`gemm_bf16_body` or `gemm_bf16_ts_body`): its name, tile width, the
/// rows of its B box, dynamic shared memory, and its parameters.
struct GemmForm {
    name: &'static str,
    tile_n: u32,
    b_box_rows: u32,
    smem: u32,
    args: GemmArgs,
    /// A [`GEMM_Y16`] entry: y is bf16, stored through its descriptor only.
    y16: bool,
}

/// y's descriptor of a TMA-store entry at `va`, checked against what the epilogue's staging buffers are
/// laid out for (f32, 2-D, boxes of 32 floats by 64 rows, 128-byte swizzle; a `y16` entry's bf16 with
/// boxes of 64 elements) and against the product's shape: the kernel clips its boxes at the descriptor's
/// dims and at nothing else, so dims other than `[N, M]` would store outside y or leave part of it
/// unwritten. `(row 0's address, elements between rows)`.
fn gemm_y_map(
    ctx: &KernelCtx<'_>,
    name: &str,
    va: u64,
    [m, n]: [u32; 2],
    y16: bool,
) -> Result<(u64, u64), KernelError> {
    if !va.is_multiple_of(64) {
        return Err(misaligned(name, "tmap_y", va, 64));
    }
    let mut map = TensorMap([0; TENSOR_MAP_BYTES]);
    ctx.read(va, &mut map.0)?;
    let s = decode_tiled(&map).map_err(|e| fault(name, format_args!("tmap_y at {va:#x} is not a tensor map: {e}")))?;
    let (elem, bytes, y_box) = if y16 { (TmaElem::Bf16, 2, GEMM_Y16_BOX) } else { (TmaElem::F32, 4, GEMM_Y_BOX) };
    let want_box = [y_box[1], y_box[0]];
    let want_dims = [u64::from(n), u64::from(m)];
    let wrong = if s.elem != elem {
        Some(format!("element type {:?}, not {elem:?}", s.elem))
    } else if s.rank != 2 {
        Some(format!("rank {}, not 2", s.rank))
    } else if s.box_dim[..2] != want_box {
        Some(format!("box {:?}, not {want_box:?} (elements, rows)", &s.box_dim[..2]))
    } else if s.element_stride[..2] != [1, 1] {
        Some(format!("element strides {:?}, not [1, 1]", &s.element_stride[..2]))
    } else if s.interleave != TmaInterleave::None || s.swizzle != TmaSwizzle::B128 {
        Some(format!("interleave {:?} and swizzle {:?}, not None and B128", s.interleave, s.swizzle))
    } else if s.global_dim[..2] != want_dims {
        Some(format!("dims {:?}, not [N, M] = {want_dims:?}", &s.global_dim[..2]))
    } else if !s.global_stride[0].is_multiple_of(16) {
        Some(format!("row stride {} bytes, not a multiple of 16", s.global_stride[0]))
    } else {
        None
    };
    match wrong {
        Some(why) => Err(fault(name, format_args!("tmap_y at {va:#x}: {why}; the epilogue's boxes take those"))),
        None => Ok((s.global_address, s.global_stride[0] / bytes)),
    }
}

/// The packed rows `rows` of a TMA operand over the K elements `k` (zero outside the descriptor's dims,
/// without a load), each row `k.end - k.start` floats.
fn tma_rows(ctx: &KernelCtx<'_>, s: &TiledSpec, rows: Range<u64>, k: Range<u64>) -> Result<Vec<f32>, KernelError> {
    let width = (k.end - k.start) as usize;
    let mut out = Vec::with_capacity((rows.end - rows.start) as usize * width);
    let loaded = k.end.min(s.global_dim[0]).saturating_sub(k.start);
    for r in rows {
        if r >= s.global_dim[1] || loaded == 0 {
            out.resize(out.len() + width, 0.0);
            continue;
        }
        let va = s.global_address.wrapping_add(r.wrapping_mul(s.global_stride[0])).wrapping_add(2 * k.start);
        let mut row = Elem::Bf16.load(ctx, va, loaded)?;
        row.resize(width, 0.0);
        out.extend(row);
    }
    Ok(out)
}

/// The TMA GEMMs: every output `y[m < M, n < N]` of the tiles the kernel's 32-bit tile count covers,
/// summed over the K blocks it loads (`ceil(K / 64)` boxes of 64), each operand element read through its
/// descriptor (zero outside the descriptor's dims). The persistent grid only decides which CTA takes which
/// work unit: any grid of at least one CTA gives the same y. With a K split (`splits` asked, `per =
/// ceil(kblocks / splits)`, `ceil(kblocks / per)` splits kept) unit u is tile `u / splits` (in the
/// kernel's grouped order) over split `u % splits`: its partial sums go to slice `split` of `work`, it
/// takes the tile's ticket in device memory, and the unit that takes `splits - 1` adds the slices in
/// split order into y and puts the ticket back to zero. A SwiGLU entry ([`GemmArgs::Swiglu`]) stores
/// `silu(g) * u` of the products with W's rows n and N + n instead.
fn gemm_tma(ctx: &mut KernelCtx<'_>, f: &GemmForm) -> Result<(), KernelError> {
    let name = f.name;
    let (tmap_a, tmap_b) = (ctx.u64_at(0), ctx.u64_at(2));
    let (tmap_y, y, work, tickets, [m, n, k], splits_asked) = match f.args {
        GemmArgs::Plain => (0, ctx.u64_at(4), 0, 0, [ctx.word(6), ctx.word(7), ctx.word(8)], 1),
        GemmArgs::Split | GemmArgs::Swapped => {
            (0, ctx.u64_at(4), ctx.u64_at(6), ctx.u64_at(8), [ctx.word(10), ctx.word(11), ctx.word(12)], ctx.word(13))
        }
        GemmArgs::Staged | GemmArgs::Swiglu => {
            (ctx.u64_at(4), ctx.u64_at(6), 0, 0, [ctx.word(8), ctx.word(9), ctx.word(10)], 1)
        }
        GemmArgs::StreamK => {
            (ctx.u64_at(4), ctx.u64_at(6), ctx.u64_at(8), ctx.u64_at(10), [ctx.word(12), ctx.word(13), ctx.word(14)], 1)
        }
    };
    require_block(ctx, name, GEMM_THREADS)?;
    if ctx.dynamic_shared_bytes < f.smem {
        return Err(fault(
            name,
            format_args!(
                "out-of-range shared address: {} bytes of dynamic shared memory, its stages need {}",
                ctx.dynamic_shared_bytes, f.smem
            ),
        ));
    }
    // The kernel's `int` arithmetic: `(M + 127) / 128` in 32 bits, the tile count as an int. A SwiGLU
    // tile stores half its accumulator columns; a swapped entry's tile rows are W's (y's columns).
    let swiglu = f.args == GemmArgs::Swiglu;
    let swapped = f.args == GemmArgs::Swapped;
    let out_cols = if swiglu { f.tile_n / 2 } else { f.tile_n };
    let [body_m, body_n] = if swapped { [n, m] } else { [m, n] };
    let tiles_m = body_m.wrapping_add(GEMM_TILE_M - 1) / GEMM_TILE_M;
    let tiles_n = body_n.wrapping_add(out_cols - 1) / out_cols;
    if (tiles_m as i32).wrapping_mul(tiles_n as i32) <= 0 {
        return Ok(());
    }
    let kblocks = k.wrapping_add(GEMM_TILE_K - 1) / GEMM_TILE_K;
    if kblocks == 0 {
        return Err(fault(name, "K = 0: no K block is loaded and the accumulators are stored unwritten"));
    }
    let a = gemm_tensor_map(ctx, tmap_a, "tmap_a", GEMM_TILE_M)?;
    let b = gemm_tensor_map(ctx, tmap_b, "tmap_b", f.b_box_rows)?;
    // The TMA-store entries store through y's descriptor when N % 4 == 0; the direct epilogue stores
    // float2 pairs in a tile whose columns all lie below an even N, floats elsewhere.
    let staged = matches!(f.args, GemmArgs::Staged | GemmArgs::StreamK);
    let (y, ldy) = if swapped {
        aligned(name, "y", y, if f.y16 { 2 } else { 4 })?;
        (y, u64::from(n))
    } else if f.y16 {
        if !n.is_multiple_of(8) {
            return Err(fault(name, format_args!("trap: N = {n}, no multiple of 8: a bf16 y has no descriptor")));
        }
        gemm_y_map(ctx, name, tmap_y, [m, n], true)?
    } else if swiglu {
        if !n.is_multiple_of(4) {
            return Err(fault(name, format_args!("trap: N = {n}, no multiple of 4: y has no descriptor")));
        }
        gemm_y_map(ctx, name, tmap_y, [m, n], false)?
    } else if staged && n.is_multiple_of(4) {
        gemm_y_map(ctx, name, tmap_y, [m, n], false)?
    } else {
        aligned(name, "y", y, if n.is_multiple_of(2) && n >= f.tile_n { 8 } else { 4 })?;
        (y, u64::from(n))
    };
    if splits_asked > i32::MAX as u32 {
        return Err(fault(
            name,
            format_args!("{splits_asked} splits: past the kernel's int, its split count is undefined"),
        ));
    }
    if f.args == GemmArgs::StreamK {
        let tiles = [tiles_m, tiles_n].map(u64::from);
        return StreamK { name, tile_n: u64::from(f.tile_n), a, b, y, ldy, partials: work, flags: tickets }.run(
            ctx,
            [m, n].map(u64::from),
            tiles,
            u64::from(kblocks),
        );
    }
    let split = GemmSplit::new(body_m, body_n, k, f.tile_n, splits_asked);
    // y's rows come from x's descriptor and its columns from W's; so do a tile's, in y's orientation
    // (`(x descriptor, W descriptor, y rows a tile, y columns a tile)`).
    let (xs, ws, tile_rows, tile_cols) = if swapped {
        (&b, &a, u64::from(f.tile_n), u64::from(GEMM_TILE_M))
    } else {
        (&a, &b, u64::from(GEMM_TILE_M), u64::from(out_cols))
    };
    let [y_tiles_m, y_tiles_n] = if swapped { [tiles_n, tiles_m] } else { [tiles_m, tiles_n] }.map(u64::from);
    if split.splits == 1 {
        let kmax = u64::from(kblocks) * u64::from(GEMM_TILE_K);
        // Elements past a descriptor's inner dim read as zero: the product runs over the K both hold.
        let (ka, kb) = (kmax.min(xs.global_dim[0]), kmax.min(ws.global_dim[0]));
        let rows = |s: &TiledSpec, loaded: u64| Rows {
            elem: Elem::Bf16,
            va: s.global_address,
            row_bytes: s.global_stride[0],
            rows: s.global_dim[1],
            loaded,
            check_align: false,
        };
        return Dense {
            kernel: name,
            a: rows(xs, ka),
            b: rows(ws, kb),
            kk: ka.min(kb),
            y,
            ldy,
            rows: u64::from(m).min(y_tiles_m * tile_rows),
            cols: u64::from(n).min(y_tiles_n * tile_cols),
            tile_n: tile_cols,
            fused: false,
            y16: f.y16,
            swiglu_up: swiglu.then_some(u64::from(n)),
        }
        .run(ctx);
    }
    let (mm, nn) = (u64::from(m), u64::from(n));
    let (tiles_m, tiles_n) = (u64::from(tiles_m), u64::from(tiles_n));
    let (per, splits) = (u64::from(split.per), u64::from(split.splits));
    let units = tiles_m * tiles_n * splits;
    let cost = u64::from(GEMM_TILE_M) * u64::from(f.tile_n) * per;
    for u in take_items(ctx, units, cost) {
        let (tile, s) = (u / splits, u % splits);
        let (tm, tn) = tile_of(tile, tiles_m, tiles_n);
        let (ym, yn) = if swapped { (tn, tm) } else { (tm, tn) };
        let rows = ym * tile_rows..mm.min((ym + 1) * tile_rows);
        let cols = yn * tile_cols..nn.min((yn + 1) * tile_cols);
        let ks = s * per * u64::from(GEMM_TILE_K)..u64::from(kblocks).min((s + 1) * per) * u64::from(GEMM_TILE_K);
        let x = tma_rows(ctx, xs, rows.clone(), ks.clone())?;
        let w = tma_rows(ctx, ws, cols.clone(), ks.clone())?;
        let width = (cols.end - cols.start) as usize;
        let mut part = vec![0f32; (rows.end - rows.start) as usize * width];
        math::products(&x, &w, (ks.end - ks.start) as usize, false, &mut part);
        // The swapped entries store element by element.
        let full_cols = !swapped && (yn + 1) * tile_cols <= nn && nn.is_multiple_of(2);
        let align = if full_cols { 8 } else { 4 };
        let slice = |p: u64| work.wrapping_add(p.wrapping_mul(mm * nn).wrapping_mul(4));
        aligned(name, "work", slice(s), align)?;
        for (r, row) in rows.clone().zip(part.chunks_exact(width)) {
            ctx.write(slice(s).wrapping_add((r * nn + cols.start) * 4), &math::f32s_to_le(row))?;
        }
        let ticket = tickets.wrapping_add(4 * tile);
        aligned(name, "a ticket", ticket, 4)?;
        let taken = ctx.read_u32s(ticket, 1)?[0];
        ctx.write_u32s(ticket, &[taken.wrapping_add(1)])?;
        if u64::from(taken) != splits - 1 {
            continue;
        }
        ctx.write_u32s(ticket, &[0])?;
        for r in rows {
            let at = (r * nn + cols.start) * 4;
            let mut sum = vec![0f32; width];
            for p in 0..splits {
                for (acc, v) in sum.iter_mut().zip(ctx.read_f32s(slice(p).wrapping_add(at), width)?) {
                    *acc += v;
                }
            }
            if f.y16 {
                let bytes: Vec<u8> = sum.iter().flat_map(|&v| cvt_rn_bf16(v).to_le_bytes()).collect();
                ctx.write(y.wrapping_add(at / 2), &bytes)?;
            } else {
                ctx.write(y.wrapping_add(at), &math::f32s_to_le(&sum))?;
            }
        }
    }
    Ok(())
}

fn gemm_bf16_tn(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let f = GemmForm {
        name: GEMM_BF16_TN,
        tile_n: GEMM_TILE_N,
        b_box_rows: GEMM_TILE_N,
        smem: GEMM_SMEM_BYTES,
        args: GemmArgs::Plain,
        y16: false,
    };
    gemm_tma(ctx, &f)
}

fn gemm_bf16_tn_splitk(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let f = GemmForm {
        name: GEMM_BF16_TN_SPLITK,
        tile_n: GEMM_TILE_N,
        b_box_rows: GEMM_TILE_N,
        smem: GEMM_SMEM_BYTES,
        args: GemmArgs::Split,
        y16: false,
    };
    gemm_tma(ctx, &f)
}

fn gemm_bf16_tn_n128(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let f = GemmForm {
        name: GEMM_BF16_TN_N128,
        tile_n: GEMM_N128_TILE_N,
        b_box_rows: GEMM_N128_TILE_N,
        smem: GEMM_N128_SMEM_BYTES,
        args: GemmArgs::Split,
        y16: false,
    };
    gemm_tma(ctx, &f)
}

/// A TMA-store entry (one CTA or a 2-CTA cluster, either tile): the cluster entries compute the same y
/// as the one-CTA ones whatever their (even) grid; a pair's second tile past M reads zeros and stores
/// nothing, so the product is the one-CTA form's.
fn gemm_staged(
    ctx: &mut KernelCtx<'_>,
    name: &'static str,
    tile_n: u32,
    b_box_rows: u32,
    smem: u32,
) -> Result<(), KernelError> {
    gemm_tma(ctx, &GemmForm { name, tile_n, b_box_rows, smem, args: GemmArgs::Staged, y16: false })
}

fn gemm_bf16_tn_ts(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    gemm_staged(ctx, GEMM_BF16_TN_TS, GEMM_TILE_N, GEMM_TILE_N, GEMM_TS_SMEM_BYTES)
}

fn gemm_bf16_tn_mc(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    gemm_staged(ctx, GEMM_BF16_TN_MC, GEMM_TILE_N, GEMM_MC_B_BOX_ROWS, GEMM_MC_SMEM_BYTES)
}

fn gemm_bf16_tn_ts_n128(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    gemm_staged(ctx, GEMM_BF16_TN_TS_N128, GEMM_N128_TILE_N, GEMM_N128_TILE_N, GEMM_TS_N128_SMEM_BYTES)
}

fn gemm_bf16_tn_mc_n128(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    gemm_staged(ctx, GEMM_BF16_TN_MC_N128, GEMM_N128_TILE_N, GEMM_MC_N128_B_BOX_ROWS, GEMM_MC_N128_SMEM_BYTES)
}

/// The ping-pong entry (`Y16`: its bf16-output form): the narrow TMA-store entry's product, tiles and
/// requirements; which consumer takes a tile changes no value of y.
fn gemm_bf16_tn_pp_n128<const Y16: bool>(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let name = if Y16 { GEMM_BF16_TN_PP_N128_Y16 } else { GEMM_BF16_TN_PP_N128 };
    let (tile_n, smem) = (GEMM_N128_TILE_N, GEMM_TS_N128_SMEM_BYTES);
    gemm_tma(ctx, &GemmForm { name, tile_n, b_box_rows: tile_n, smem, args: GemmArgs::Staged, y16: Y16 })
}

/// The host spec of [`GEMM_SWIGLU`] entry `i`'s f32 or bf16 (`y16`) form: the TMA-store parameters.
const fn swiglu_spec(i: usize, y16: bool, run: fn(&mut KernelCtx<'_>) -> Result<(), KernelError>) -> HostSpec {
    let f = GEMM_SWIGLU[i];
    HostSpec {
        name: if y16 { f.y16 } else { f.f32 },
        param_sizes: &[8, 8, 8, 8, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run,
    }
}

/// The host spec of [`GEMM_SWAPAB`] entry `i`'s f32 or bf16 (`y16`) form: the split-K parameters and
/// the ticket's static word.
const fn swapab_spec(i: usize, y16: bool, run: fn(&mut KernelCtx<'_>) -> Result<(), KernelError>) -> HostSpec {
    let f = GEMM_SWAPAB[i];
    HostSpec {
        name: if y16 { f.y16 } else { f.f32 },
        param_sizes: &[8, 8, 8, 8, 8, 4, 4, 4, 4],
        static_shared_bytes: 4,
        local_bytes_per_thread: 0,
        run,
    }
}

/// [`GEMM_SWAPAB`] entry `I` (`Y16`: its bf16 form): `y = x . W^T` with W read through the A descriptor
/// (128-row boxes) and x through the B descriptor (`mb`-row boxes), split over K as the split-K entries.
fn gemm_swapab<const I: usize, const Y16: bool>(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let f = GEMM_SWAPAB[I];
    let name = if Y16 { f.y16 } else { f.f32 };
    let form =
        GemmForm { name, tile_n: f.mb, b_box_rows: f.mb, smem: f.smem_bytes(), args: GemmArgs::Swapped, y16: Y16 };
    gemm_tma(ctx, &form)
}

/// [`GEMM_SWIGLU`] entry `I` (`Y16`: its bf16 form): `y[m, j] = silu(g) * u` with `g`, `u` the products of
/// x's row m with W's rows j and N + j as the descriptor reads them (rows past its dims zero), for the
/// tiles the kernel's count covers; y through its descriptor only.
fn gemm_swiglu<const I: usize, const Y16: bool>(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let f = GEMM_SWIGLU[I];
    let name = if Y16 { f.y16 } else { f.f32 };
    let (tile_n, b_box_rows, smem) = (f.tile_n, f.b_box_rows(), f.smem_bytes());
    gemm_tma(ctx, &GemmForm { name, tile_n, b_box_rows, smem, args: GemmArgs::Swiglu, y16: Y16 })
}

/// The host spec of `table[i]`'s one-CTA (`cluster` false) or cluster entry ([`GEMM_FITTED`] or
/// [`GEMM_Y16`]): the TMA-store entries' parameters, no static shared memory, no stack.
const fn table_spec(
    table: &[FittedGemm],
    i: usize,
    cluster: bool,
    run: fn(&mut KernelCtx<'_>) -> Result<(), KernelError>,
) -> HostSpec {
    let f = table[i];
    HostSpec {
        name: if cluster { f.mc } else { f.ts },
        param_sizes: &[8, 8, 8, 8, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run,
    }
}

/// Entry `I` of [`GEMM_Y16`] (`Y16`: the product stored bf16) or of [`GEMM_FITTED`], one CTA or in
/// clusters (`CLUSTER`).
fn gemm_table<const Y16: bool, const I: usize, const CLUSTER: bool>(
    ctx: &mut KernelCtx<'_>,
) -> Result<(), KernelError> {
    let table: &[FittedGemm] = if Y16 { &GEMM_Y16 } else { &GEMM_FITTED };
    let f = table[I];
    let (name, b_box_rows) = if CLUSTER { (f.mc, f.mc_b_box_rows()) } else { (f.ts, f.tile_n) };
    let form = GemmForm { name, tile_n: f.tile_n, b_box_rows, smem: f.smem_bytes(), args: GemmArgs::Staged, y16: Y16 };
    gemm_tma(ctx, &form)
}

fn gemm_bf16_tn_sk(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (name, tile_n, smem) = (GEMM_BF16_TN_SK, GEMM_TILE_N, GEMM_SK_SMEM_BYTES);
    gemm_tma(ctx, &GemmForm { name, tile_n, b_box_rows: tile_n, smem, args: GemmArgs::StreamK, y16: false })
}

fn gemm_bf16_tn_sk_n128(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (name, tile_n, smem) = (GEMM_BF16_TN_SK_N128, GEMM_N128_TILE_N, GEMM_SK_N128_SMEM_BYTES);
    gemm_tma(ctx, &GemmForm { name, tile_n, b_box_rows: tile_n, smem, args: GemmArgs::StreamK, y16: false })
}

/// A stream-K launch after [`gemm_tma`]'s checks: its operands' descriptors, where y's rows lie.
struct StreamK<'a> {
    name: &'a str,
    tile_n: u64,
    a: TiledSpec,
    b: TiledSpec,
    y: u64,
    ldy: u64,
    partials: u64,
    flags: u64,
}

impl StreamK<'_> {
    /// The launch as gemm_bf16_sk.cuh runs it: its CTAs in [`SkSchedule`]'s ranges, taken last CTA first
    /// so that every finisher's contributors have written their slots and released their flags when it
    /// runs. Each segment's product over its K blocks is computed from the descriptors; a contributor
    /// writes its live consumers' halves to its slot in the kernel's register order and sets their flags
    /// (a flag that was not zero faults: on the GPU its finisher could read the slot before it is
    /// written); a finisher takes the flags back to zero and adds the slots in CTA order; whole and
    /// finished tiles are stored within M and N at y's row stride.
    fn run(
        &self,
        ctx: &mut KernelCtx<'_>,
        [m, n]: [u64; 2],
        [tiles_m, tiles_n]: [u64; 2],
        kblocks: u64,
    ) -> Result<(), KernelError> {
        let name = self.name;
        let [g, gy, gz] = ctx.grid.map(u64::from);
        if gy * gz != 1 {
            return Err(fault(
                name,
                format_args!(
                    "grid {:?}: the CTAs of blockIdx.y or .z > 0 would run the same ranges and race on the flags",
                    ctx.grid,
                ),
            ));
        }
        let total = tiles_m * tiles_n * kblocks;
        if total >= GEMM_SK_MAX_ITERS {
            return Err(fault(name, format_args!("{total} iterations: past the kernel's 32-bit iteration count")));
        }
        aligned(name, "partials", self.partials, 16)?;
        aligned(name, "flags", self.flags, 4)?;
        let sched = SkSchedule { total, grid: g, kblocks };
        let cost = u64::from(GEMM_TILE_M) * self.tile_n * total.div_ceil(g).max(1);
        let tile_n = self.tile_n as usize;
        for i in take_items(ctx, g, cost) {
            let c = g - 1 - i;
            for seg in sched.segments(c) {
                let (tm, tn) = tile_of(seg.tile, tiles_m, tiles_n);
                let rows = tm * u64::from(GEMM_TILE_M)..(tm + 1) * u64::from(GEMM_TILE_M);
                let cols = tn * self.tile_n..(tn + 1) * self.tile_n;
                let ks = seg.kb0 * u64::from(GEMM_TILE_K)..seg.kb1 * u64::from(GEMM_TILE_K);
                let x = tma_rows(ctx, &self.a, rows.clone(), ks.clone())?;
                let w = tma_rows(ctx, &self.b, cols.clone(), ks.clone())?;
                let mut acc = vec![0f32; GEMM_TILE_M as usize * tile_n];
                math::products(&x, &w, (ks.end - ks.start) as usize, false, &mut acc);
                // A consumer's 64 rows wholly past M neither write nor wait.
                let live = |q: u64| rows.start + 64 * q < m;
                let half = |q: u64| q as usize * 64 * tile_n..(q as usize + 1) * 64 * tile_n;
                if seg.kb0 > 0 {
                    for q in (0..2).filter(|&q| live(q)) {
                        self.contribute(ctx, c, q, &acc[half(q)])?;
                    }
                    continue;
                }
                if seg.kb1 < kblocks {
                    for d in sched.contributors(c, seg.tile) {
                        for q in (0..2).filter(|&q| live(q)) {
                            self.add_contribution(ctx, [c, d], q, &mut acc[half(q)])?;
                        }
                    }
                }
                let width = (cols.end.min(n) - cols.start) as usize;
                for (r, row) in rows.take_while(|&r| r < m).zip(acc.chunks_exact(tile_n)) {
                    let va = self.y.wrapping_add(r.wrapping_mul(self.ldy).wrapping_add(cols.start).wrapping_mul(4));
                    ctx.write(va, &math::f32s_to_le(&row[..width]))?;
                }
            }
        }
        Ok(())
    }
}

impl StreamK<'_> {
    /// Bytes of one CTA's slot (both consumers' halves).
    fn slot_bytes(&self) -> u64 {
        gemm_sk_slot_floats(self.tile_n as u32) * 4
    }

    /// Where consumer `q` of CTA `c` keeps its half of the slots, and its flag.
    fn place(&self, c: u64, q: u64) -> (u64, u64) {
        let at = self.partials.wrapping_add(c * self.slot_bytes() + q * self.slot_bytes() / 2);
        (at, self.flags.wrapping_add(4 * (2 * c + q)))
    }

    /// Contributor `c`'s consumer `q`: its 64 x tile_n `half` (row-major) to its slot in the kernel's
    /// register order, then its flag set.
    fn contribute(&self, ctx: &mut KernelCtx<'_>, c: u64, q: u64, half: &[f32]) -> Result<(), KernelError> {
        let (at, flag) = self.place(c, q);
        let was = ctx.read_u32s(flag, 1)?[0];
        if was != 0 {
            let why = "its finisher could add the slot before it is written";
            return Err(fault(
                self.name,
                format_args!("the flag of CTA {c}'s consumer {q} is {was} at the launch, not 0: {why}"),
            ));
        }
        ctx.write(at, &math::f32s_to_le(&sk_slot_order(half, self.tile_n as usize)))?;
        ctx.write_u32s(flag, &[1])
    }

    /// Finisher `c` adds contributor `d`'s consumer `q` half into its own `half`, and puts the flag back.
    fn add_contribution(
        &self,
        ctx: &mut KernelCtx<'_>,
        [c, d]: [u64; 2],
        q: u64,
        half: &mut [f32],
    ) -> Result<(), KernelError> {
        let (at, flag) = self.place(d, q);
        if ctx.read_u32s(flag, 1)?[0] == 0 {
            let why = "which nothing sets: the kernel would spin";
            return Err(fault(self.name, format_args!("CTA {c} waits for the flag of CTA {d}'s consumer {q}, {why}")));
        }
        ctx.write_u32s(flag, &[0])?;
        let part = ctx.read_f32s(at, half.len())?;
        for (v, p) in half.iter_mut().zip(sk_row_order(&part, self.tile_n as usize)) {
            *v += p;
        }
        Ok(())
    }
}

/// Where the kernel's thread `t` keeps output (row, column) of a consumer's 64 x `tile_n` half (the wgmma
/// m64nN accumulator layout: register 4j + {0, 1} at row 16 warp + lane / 4, columns 8j + 2 (lane % 4) +
/// {0, 1}; 4j + {2, 3} eight rows down), as the float index of the slot it stores float4 j of thread t
/// at: `(j * 128 + t) * 4 + register % 4`.
fn sk_slot_index(row: usize, col: usize) -> usize {
    let (warp, r) = (row / 16, row % 16);
    let (j, cc) = (col / 8, col % 8);
    let t = warp * 32 + (r % 8) * 4 + cc / 2;
    (j * 128 + t) * 4 + 2 * (r / 8) + cc % 2
}

/// A row-major 64 x `tile_n` half in the order a consumer writes its slot.
fn sk_slot_order(half: &[f32], tile_n: usize) -> Vec<f32> {
    let mut out = vec![0f32; half.len()];
    for (i, &v) in half.iter().enumerate() {
        out[sk_slot_index(i / tile_n, i % tile_n)] = v;
    }
    out
}

/// A slot read back into row-major order.
fn sk_row_order(slot: &[f32], tile_n: usize) -> Vec<f32> {
    (0..slot.len()).map(|i| slot[sk_slot_index(i / tile_n, i % tile_n)]).collect()
}

// ----- the SIMT GEMMs -----------------------------------------------------------------------------------

/// `omega_gemm_f32_tn` / `omega_gemm_bf16_simt_tn` / `omega_gemm_f32_tn_v2_*`: the outputs of the
/// `tile_m x tile_n` tiles the grid names (`blockIdx.y` rows of tiles, `blockIdx.x` columns, in the
/// kernel's 32-bit arithmetic; `blockIdx.z` repeats the same stores), each one `fmaf` chain over
/// k = 0..K from +0.
fn gemm_simt(ctx: &mut KernelCtx<'_>, name: &str, elem: Elem) -> Result<(), KernelError> {
    gemm_simt_tiled(ctx, name, elem, [SIMT_TILE, SIMT_TILE], SIMT_THREADS)
}

fn gemm_simt_tiled(
    ctx: &mut KernelCtx<'_>,
    name: &str,
    elem: Elem,
    tile: [u32; 2],
    threads: u32,
) -> Result<(), KernelError> {
    gemm_simt_cover(ctx, name, elem, tile, threads, false)
}

/// A SIMT GEMM of `tile` tiles: the tiles its 2-D grid names, or every tile when `persistent` (its CTAs
/// walk them whatever the grid).
fn gemm_simt_cover(
    ctx: &mut KernelCtx<'_>,
    name: &str,
    elem: Elem,
    [tile_m, tile_n]: [u32; 2],
    threads: u32,
    persistent: bool,
) -> Result<(), KernelError> {
    let (x, w, y) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4));
    let (m, n, k) = (u64::from(ctx.word(6)), u64::from(ctx.word(7)), u64::from(ctx.word(8)));
    require_block(ctx, name, threads)?;
    let (tile_m, tile_n) = (u64::from(tile_m), u64::from(tile_n));
    let [gx, gy, _] = ctx.grid.map(u64::from);
    // `blockIdx.x * tile_n` wraps past 2^32: a grid that long covers every column.
    let cols = if persistent || gx * tile_n >= 1 << 32 { n } else { n.min(gx * tile_n) };
    let out_rows = if persistent { m } else { m.min(gy * tile_m) };
    if out_rows > 0 && cols > 0 {
        aligned(name, "y", y, 4)?;
    }
    let rows = |va: u64, rows: u64| Rows { elem, va, row_bytes: k * elem.bytes(), rows, loaded: k, check_align: true };
    Dense {
        kernel: name,
        a: rows(x, m),
        b: rows(w, n),
        kk: k,
        y,
        ldy: n,
        rows: out_rows,
        cols,
        tile_n,
        fused: true,
        y16: false,
        swiglu_up: None,
    }
    .run(ctx)
}

fn gemm_f32_tn_v2<const I: usize>(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let v = &GEMM_F32_TN_V2[I];
    gemm_simt_tiled(ctx, v.name, Elem::F32, [v.tile_m, v.tile_n], v.threads)
}

/// `omega_gemm_f32_tn_v2_8x16k8_zigzag_p`: any grid of at least one CTA covers every tile (the same fmaf
/// chain per output as the candidate it is built from).
fn gemm_f32_tn_persistent(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let v = &GEMM_F32_TN_V2[GEMM_F32_TN_V2_BEST];
    gemm_simt_cover(ctx, GEMM_F32_TN_PERSISTENT, Elem::F32, [v.tile_m, v.tile_n], v.threads, true)
}

fn gemm_f32_tn(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    gemm_simt(ctx, GEMM_F32_TN, Elem::F32)
}

fn gemm_bf16_simt_tn(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    gemm_simt(ctx, GEMM_BF16_SIMT_TN, Elem::Bf16)
}

// ----- the GEMVs -----------------------------------------------------------------------------------------

/// One CTA of a GEMV (`gemv_bf16_group` in gemv_bf16.cuh): W rows `[64 * nblock, +64)` over K slice `s`
/// of `split`, for `m` rows of x.
struct GemvCta<'a> {
    kernel: &'a str,
    x: u64,
    /// The x row of each of the `m` rows (`rows + first`, u32 each), or row i itself.
    x_rows: Option<u64>,
    w: u64,
    y: u64,
    work: u64,
    ticket: u64,
    m: u32,
    n: u32,
    k: u32,
    k_per_split: u32,
    nblock: u32,
    s: u32,
    split: u32,
    /// Floats between the work slices.
    work_slice: u64,
    /// The entry's MB: `8 * MB` x rows per pass over W.
    mb: u32,
    /// y is bf16 (the `_y16` entries): every slice through `work`, the sum rounded at the store.
    y16: bool,
}

impl GemvCta<'_> {
    /// The elements of a row the warps load: whole 32-element chunks from `k0` while the chunk starts
    /// below `k1`, read flat from the row's start (a K that is not a multiple of 32 reads on into the
    /// next row, as the kernel's 16-byte loads do). 16-byte loads: the address must be 16-byte aligned.
    fn load_row(
        &self,
        ctx: &KernelCtx<'_>,
        base: u64,
        row: u64,
        k0: u32,
        span: u64,
        what: &str,
    ) -> Result<Vec<f32>, KernelError> {
        skinny::load_row16(ctx, self.kernel, what, base, [row, u64::from(self.k), u64::from(k0), span])
    }

    fn run(&self, ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
        let k0 = self.s.wrapping_mul(self.k_per_split);
        let k1 = self.k.min(k0.wrapping_add(self.k_per_split));
        // The row-streaming form (`gemv_rows_partial`): MB = 1, M <= 4 and a slice of at least 1024 (the
        // difference in 32 bits, as the kernel takes it). Its lanes walk 8-element groups from k0 while
        // they start below k1; the MMA form walks 32-element chunks.
        let rows_form = self.mb == 1 && self.m <= ROWS_MAX_M && k1.wrapping_sub(k0) >= 1024;
        let granule = if rows_form { 8 } else { GEMV_K_CHUNK };
        let span = if k1 > k0 { u64::from((k1 - k0).div_ceil(granule)) * u64::from(granule) } else { 0 };
        // The CTA's 64 W rows, as its warps address them (a multiple of 64 below 2^32, so `nb0 + 63` does
        // not wrap); the ones below N are stored. The MMA form loads `min(n, N - 1)` for each, and nothing
        // without an x row; the streaming form loads the rows below N only, whatever M.
        let nb0 = self.nblock.wrapping_mul(GEMV_ROWS);
        let stored: Vec<u32> = (nb0..nb0 + GEMV_ROWS).filter(|&r| r < self.n).collect();
        let w_rows: Vec<u32> = if rows_form {
            stored.clone()
        } else if self.m == 0 {
            Vec::new()
        } else {
            let last = self.n.wrapping_sub(1);
            let mut rows: Vec<u32> = (0..GEMV_ROWS).map(|i| (nb0 + i).min(last)).collect();
            rows.dedup();
            rows
        };
        let mut w = Vec::with_capacity(stored.len() * span as usize);
        for &r in &w_rows {
            let row = self.load_row(ctx, self.w, u64::from(r), k0, span, "a W row")?;
            if r >= nb0 && r < self.n {
                w.extend(row);
            }
        }
        let out = if self.split == 1 && !self.y16 {
            self.y
        } else {
            self.work.wrapping_add(u64::from(self.s) * self.work_slice * 4)
        };
        let ldy = u64::from(self.n);
        // The streaming form takes its (at most 4) rows in one pass.
        let pass = if rows_form { ROWS_MAX_M } else { 8 * self.mb };
        let mut m0 = 0u32;
        while m0 < self.m {
            let m1 = self.m.min(m0.saturating_add(pass));
            let indices: Vec<u32> = match self.x_rows {
                Some(va) => {
                    aligned(self.kernel, "rows", va, 4)?;
                    ctx.read_u32s(va.wrapping_add(4 * u64::from(m0)), (m1 - m0) as usize)?
                }
                None => (m0..m1).collect(),
            };
            let mut x = Vec::with_capacity(indices.len() * span as usize);
            for &r in &indices {
                x.extend(self.load_row(ctx, self.x, u64::from(r), k0, span, "an x row")?);
            }
            if !stored.is_empty() {
                let mut y = vec![0f32; indices.len() * stored.len()];
                math::products(&x, &w, span as usize, false, &mut y);
                for (i, row) in y.chunks_exact(stored.len()).enumerate() {
                    let at = (u64::from(m0) + i as u64) * ldy + u64::from(nb0);
                    ctx.write(out.wrapping_add(at * 4), &math::f32s_to_le(row))?;
                }
            }
            m0 = m1;
        }
        if self.split == 1 && !self.y16 {
            return Ok(());
        }
        // The ticket, in device memory: the CTA that takes `split - 1` adds the slices and puts it back to 0.
        aligned(self.kernel, "a ticket", self.ticket, 4)?;
        let taken = ctx.read_u32s(self.ticket, 1)?[0];
        ctx.write_u32s(self.ticket, &[taken.wrapping_add(1)])?;
        if taken != self.split - 1 {
            return Ok(());
        }
        ctx.write_u32s(self.ticket, &[0])?;
        let cols = GEMV_ROWS.min(self.n.wrapping_sub(nb0));
        if self.m > 0 && cols > 0 {
            aligned(self.kernel, "y", self.y, if self.y16 { 2 } else { 4 })?;
        }
        for mm in 0..self.m {
            let at = u64::from(mm) * ldy + u64::from(nb0);
            let mut sum = vec![0f32; cols as usize];
            for p in 0..self.split {
                let part =
                    ctx.read_f32s(self.work.wrapping_add((u64::from(p) * self.work_slice + at) * 4), cols as usize)?;
                for (s, v) in sum.iter_mut().zip(part) {
                    *s += v;
                }
            }
            if self.y16 {
                let bits: Vec<u8> = sum.iter().flat_map(|&f| math::f32_to_bf16(f).to_le_bytes()).collect();
                ctx.write(self.y.wrapping_add(at * 2), &bits)?;
            } else {
                ctx.write(self.y.wrapping_add(at * 4), &math::f32s_to_le(&sum))?;
            }
        }
        Ok(())
    }

    /// Work units of a CTA of `m` rows: 64 W rows times m times its slice's 64-element blocks.
    fn cost(m: u32, k_per_split: u32) -> u64 {
        u64::from(GEMV_ROWS) * u64::from(m.max(1)) * u64::from(k_per_split).div_ceil(MACS_PER_UNIT).max(1)
    }
}

/// `omega_gemv_bf16_tn_m*`: CTA `(bx, s)` of the grid (x fastest; `blockIdx.z` repeats the CTA, ticket
/// included) computes the 64-row blocks `bx, bx + gridDim.x, ..` below `ceil(N / 64)` over its K slice,
/// `split = gridDim.y`.
fn gemv_bf16_tn<const V: usize>(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    gemv_dense(ctx, GEMV_BF16_TN[V], V, false)
}

/// `omega_gemv_bf16_tn_m*_y16`: [`gemv_bf16_tn`] with a bf16 y.
fn gemv_bf16_tn_y16<const V: usize>(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    gemv_dense(ctx, GEMV_BF16_TN_Y16[V], V, true)
}

/// [`GEMV_BF16_TN_ROWS`]: the m1 entry's reference (its tuning changes no sum).
fn gemv_bf16_tn_rows(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    gemv_dense(ctx, GEMV_BF16_TN_ROWS, 0, false)
}

fn gemv_dense(ctx: &mut KernelCtx<'_>, name: &'static str, variant: usize, y16: bool) -> Result<(), KernelError> {
    let (x, w, y, work, tickets) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4), ctx.u64_at(6), ctx.u64_at(8));
    let (m, n, k, k_per_split) = (ctx.word(10), ctx.word(11), ctx.word(12), ctx.word(13));
    require_block(ctx, name, GEMV_THREADS)?;
    let shape = ctx.shape();
    let nblocks = n.div_ceil(GEMV_ROWS);
    let per_cta = u64::from(nblocks.div_ceil(shape.grid[0].max(1)).max(1));
    let ctas = take_items(ctx, shape.blocks(), GemvCta::cost(m, k_per_split) * per_cta);
    for b in ctas {
        let [cx, s, _] = shape.block_id(b);
        for bx in (cx..nblocks).step_by(shape.grid[0].max(1) as usize) {
            GemvCta {
                kernel: name,
                x,
                x_rows: None,
                w,
                y,
                work,
                ticket: tickets.wrapping_add(4 * u64::from(bx)),
                m,
                n,
                k,
                k_per_split,
                nblock: bx,
                s,
                split: shape.grid[1],
                work_slice: u64::from(m) * u64::from(n),
                mb: GEMV_MB[variant],
                y16,
            }
            .run(ctx)?;
        }
    }
    Ok(())
}

/// `omega_moe_gemv_bf16_m*`: CTA `(bx, s, z)` takes the entries `i = z, z + gridDim.z, ..` below
/// `active[0]` of the touched experts' list `active[1..]` (read on the device); entry i names expert e,
/// whose slots `offsets[e] .. offsets[e + 1]` it computes with W = `w + e * N * K`, x rows `rows[slot]`
/// (row `slot` when `rows` is null: x per slot, over an existing routing), y rows `slot`, its split-K ticket at `tickets[i * gridDim.x + bx]`. An entry with no slot is skipped.
fn moe_gemv_bf16<const V: usize>(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    moe_gemv(ctx, MOE_GEMV_BF16[V], GEMV_MB[V])
}

/// [`MOE_GEMV_BF16_ROWS`]: the m1 entry's reference (its tuning changes no sum).
fn moe_gemv_bf16_rows(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    moe_gemv(ctx, MOE_GEMV_BF16_ROWS, GEMV_MB[0])
}

fn moe_gemv(ctx: &mut KernelCtx<'_>, name: &'static str, mb: u32) -> Result<(), KernelError> {
    let (x, w, y, work, tickets) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4), ctx.u64_at(6), ctx.u64_at(8));
    let (offsets, rows, active) = (ctx.u64_at(10), ctx.u64_at(12), ctx.u64_at(14));
    let (n, k, k_per_split, max_slots) = (ctx.word(16), ctx.word(17), ctx.word(18), ctx.word(19));
    require_block(ctx, name, GEMV_THREADS)?;
    let shape = ctx.shape();
    let gz = shape.grid[2].max(1);
    aligned(name, "active", active, 4)?;
    let count_active = ctx.read_u32s(active, 1)?[0];
    // Entry i's expert and its slots `(first, count)`, read where the kernel reads them.
    let list =
        if count_active == 0 { Vec::new() } else { ctx.read_u32s(active.wrapping_add(4), count_active as usize)? };
    let mut slots = Vec::with_capacity(list.len());
    for &e in &list {
        aligned(name, "offsets", offsets, 4)?;
        let o = ctx.read_u32s(offsets.wrapping_add(4 * u64::from(e)), 2)?;
        slots.push((e, o[0], o[1].wrapping_sub(o[0])));
    }
    // Each CTA costs what its entries' slots cost (one unit when it has none); CTAs in grid order.
    let per_z = |z: u32| (z..count_active).step_by(gz as usize);
    let costs: Vec<u64> = (0..shape.blocks())
        .map(|b| {
            let z = shape.block_id(b)[2];
            let c: u64 =
                per_z(z).map(|i| slots[i as usize].2).filter(|&c| c != 0).map(|c| GemvCta::cost(c, k_per_split)).sum();
            c.max(1)
        })
        .collect();
    for b in take_costed(ctx, &costs) {
        let [bx, s, z] = shape.block_id(b);
        for i in per_z(z) {
            let (e, first, count) = slots[i as usize];
            if count == 0 {
                continue;
            }
            let slot = u64::from(first) * u64::from(n);
            GemvCta {
                kernel: name,
                // A null `rows` flags x as one row per slot (a product over an existing routing).
                x: if rows == 0 { x.wrapping_add(u64::from(first) * u64::from(k) * 2) } else { x },
                x_rows: (rows != 0).then(|| rows.wrapping_add(4 * u64::from(first))),
                w: w.wrapping_add((u64::from(e) * u64::from(n) * u64::from(k)).wrapping_mul(2)),
                y: y.wrapping_add(slot.wrapping_mul(4)),
                work: work.wrapping_add(slot.wrapping_mul(4)),
                ticket: tickets.wrapping_add(4 * (u64::from(i) * u64::from(shape.grid[0]) + u64::from(bx))),
                m: count,
                n,
                k,
                k_per_split,
                nblock: bx,
                s,
                split: shape.grid[1],
                work_slice: u64::from(max_slots) * u64::from(n),
                mb,
                y16: false,
            }
            .run(ctx)?;
        }
    }
    Ok(())
}

/// This call's items of the ones whose costs are `costs` (units each, in order): those whose first unit
/// lies in the call's take, so each item runs whole in exactly one call.
fn take_costed(ctx: &mut KernelCtx<'_>, costs: &[u64]) -> Range<u64> {
    let total = costs.iter().fold(0u64, |t, &c| t.saturating_add(c.max(1)));
    let units = ctx.take(total);
    let (mut first, mut lo, mut hi) = (0u64, None, 0u64);
    for (i, &c) in costs.iter().enumerate() {
        if first >= units.start && first < units.end {
            lo.get_or_insert(i as u64);
            hi = i as u64 + 1;
        }
        first = first.saturating_add(c.max(1));
    }
    lo.map_or(0..0, |lo| lo..hi)
}

// ----- the routing ---------------------------------------------------------------------------------------

/// `omega_moe_route`: pass after pass of 1024 experts, the block's scan writes the pass's offsets (the
/// running total carried from the passes before) and appends the pass's touched experts to `active[1..]`,
/// then each expert's slots get its choices in increasing choice index; last, `*dropped` is stored with
/// the count of choices naming an expert >= E and `active[0]` with the count of touched experts — every
/// CTA of the grid stores the same values.
fn moe_route(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let name = MOE_ROUTE;
    let (topk, t, top_k, e) = (ctx.u64_at(0), ctx.word(2), ctx.word(3), ctx.word(4));
    let outs = [ctx.u64_at(6), ctx.u64_at(8), ctx.u64_at(10), ctx.u64_at(12), ctx.u64_at(14)];
    require_block(ctx, name, ROUTE_THREADS)?;
    let p = t.wrapping_mul(top_k);
    let passes = u64::from(e).div_ceil(u64::from(ROUTE_THREADS));
    // Every pass scans every choice; the counts are one more scan. A CTA runs whole in one call.
    let per_cta = (passes + 1) * (u64::from(ROUTE_THREADS) + u64::from(p));
    let ctas = take_items(ctx, ctx.shape().blocks(), per_cta);
    if ctas.is_empty() {
        return Ok(());
    }
    aligned(name, "topk", topk, 4)?;
    let choices = ctx.read_u32s(topk, p as usize)?;
    let routed = route_ref(&choices, top_k, e);
    for _ in ctas {
        route_choices(ctx, name, &routed, e, outs)?;
    }
    Ok(())
}

/// The routing of `choices` (`topk[t * top_k + j]`) among `e` experts, as the route kernels write it:
/// `offsets[0..=e]` (each expert's first slot, then the slot count), per expert its choices in increasing
/// choice index as `rows[slot]` (the token) and `pairs[slot]` (the choice), `active` the touched experts'
/// count then the experts in increasing order, `dropped` the choices naming an expert >= e.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteRef {
    /// `e + 1` words.
    pub offsets: Vec<u32>,
    /// A word per filled slot.
    pub rows: Vec<u32>,
    /// A word per filled slot.
    pub pairs: Vec<u32>,
    /// The count, then the list.
    pub active: Vec<u32>,
    /// Choices dropped.
    pub dropped: u32,
}

/// [`RouteRef`] of `choices`.
pub fn route_ref(choices: &[u32], top_k: u32, e: u32) -> RouteRef {
    let mut slots: Vec<Vec<u32>> = vec![Vec::new(); e as usize];
    for (p, &c) in choices.iter().enumerate() {
        if let Some(s) = slots.get_mut(c as usize) {
            s.push(p as u32);
        }
    }
    let mut offsets = Vec::with_capacity(e as usize + 1);
    let (mut rows, mut pairs, mut active) = (Vec::new(), Vec::new(), vec![0]);
    for (x, s) in slots.iter().enumerate() {
        offsets.push(rows.len() as u32);
        if !s.is_empty() {
            active.push(x as u32);
        }
        rows.extend(s.iter().map(|&p| p / top_k.max(1)));
        pairs.extend_from_slice(s);
    }
    offsets.push(rows.len() as u32);
    active[0] = (active.len() - 1) as u32;
    let dropped = choices.iter().filter(|&&c| c >= e).count() as u32;
    RouteRef { offsets, rows, pairs, active, dropped }
}

/// What one CTA of the route kernels stores into `[offsets, rows, pairs, dropped, active]`: the words of
/// `r` (the [`route_ref`] of its choices among `e` experts), each where the kernel stores it.
fn route_choices(
    ctx: &mut KernelCtx<'_>,
    name: &str,
    r: &RouteRef,
    e: u32,
    [offsets, rows, pairs, dropped, active]: [u64; 5],
) -> Result<(), KernelError> {
    for (what, va) in [("offsets", offsets), ("rows", rows), ("pairs", pairs), ("dropped", dropped), ("active", active)]
    {
        aligned(name, what, va, 4)?;
    }
    if u64::from(e) > u64::from(u32::MAX - (ROUTE_THREADS - 1)) {
        // `base += 1024` wraps below E: the pass loop never ends.
        return Err(KernelError::Hang);
    }
    ctx.write_u32s(offsets, &r.offsets)?;
    if !r.rows.is_empty() {
        ctx.write_u32s(rows, &r.rows)?;
        ctx.write_u32s(pairs, &r.pairs)?;
    }
    ctx.write_u32s(dropped, &[r.dropped])?;
    ctx.write_u32s(active, &r.active)
}

/// The logits `[T, E]` of `omega_moe_router_route` bit for bit, from x `[T, K]` and w `[E, K]` (bf16
/// widened): each is the kernel's sum — lane `l`'s f32 FMA chain over the 8-element groups `8 l + 256 i`
/// of the row (each group's elements in order), then the warp's butterfly `acc += acc(lane ^ o)` for o =
/// 16, 8, 4, 2, 1, lane 0's value.
pub fn router_logits_ref(x: &[f32], w: &[f32], [t, k, e]: [u32; 3]) -> Vec<f32> {
    let (tu, ku, eu) = (t as usize, k as usize, e as usize);
    let mut lg = vec![0f32; tu * eu];
    for ti in 0..tu {
        let xr = &x[ti * ku..][..ku];
        for ei in 0..eu {
            let wr = &w[ei * ku..][..ku];
            let mut lanes = [0f32; 32];
            for (l, acc) in lanes.iter_mut().enumerate() {
                for g in (8 * l..ku).step_by(256) {
                    for j in g..g + 8 {
                        *acc = wr[j].mul_add(xr[j], *acc);
                    }
                }
            }
            for o in [16, 8, 4, 2, 1] {
                let before = lanes;
                for (l, acc) in lanes.iter_mut().enumerate() {
                    *acc += before[l ^ o];
                }
            }
            lg[ti * eu + ei] = lanes[0];
        }
    }
    lg
}

/// `omega_moe_router_route`: the logits of [`router_logits_ref`], then each token's top k
/// ([`crate::kernels::decoder::router_topk_ref`]) and the routing ([`MOE_ROUTE`]'s), written by the last
/// CTA; the ticket is left zero. The whole grid runs in one call.
fn moe_router_route(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let name = MOE_ROUTER_ROUTE;
    let (x, w, logits, ticket) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4), ctx.u64_at(6));
    let (t, k, e, top_k) = (ctx.word(8), ctx.word(9), ctx.word(10), ctx.word(11));
    let (topk, weights) = (ctx.u64_at(12), ctx.u64_at(14));
    let outs = [ctx.u64_at(16), ctx.u64_at(18), ctx.u64_at(20), ctx.u64_at(22), ctx.u64_at(24)];
    require_block(ctx, name, ROUTE_THREADS)?;
    let macs = u64::from(t) * u64::from(k) * u64::from(e);
    if take_items(ctx, 1, macs.max(1)).is_empty() {
        return Ok(());
    }
    for (what, va, align) in [
        ("x", x, 16),
        ("w", w, 16),
        ("logits", logits, 4),
        ("ticket", ticket, 4),
        ("topk", topk, 4),
        ("weights", weights, 4),
    ] {
        aligned(name, what, va, align)?;
    }
    if k % 8 != 0 || top_k == 0 || top_k > crate::kernels::decoder::TOPK_MAX || top_k > e {
        // The kernel reads 16-byte groups of K and the top k keeps a choice a lane.
        return Err(KernelError::Fault { xid: 13, detail: format!("{name}: K = {k}, top_k = {top_k} of {e}") });
    }
    let (tu, ku, eu) = (t as usize, k as usize, e as usize);
    let bf16s = |va: u64, n: usize| -> Result<Vec<f32>, KernelError> {
        let bytes = load(ctx, va, 2 * n as u64)?;
        Ok(bf16s_to_f32(&bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect::<Vec<_>>()))
    };
    let (xs, ws) = (bf16s(x, tu * ku)?, bf16s(w, eu * ku)?);
    let lg = router_logits_ref(&xs, &ws, [t, k, e]);
    ctx.write_f32s(logits, &lg)?;
    let (mut choices, mut tw) = (Vec::with_capacity(tu * top_k as usize), Vec::with_capacity(tu * top_k as usize));
    for row in lg.chunks(eu.max(1)).take(tu) {
        let (i, wts) = crate::kernels::decoder::router_topk_ref(row, top_k as usize);
        choices.extend(i);
        tw.extend(wts);
    }
    ctx.write_u32s(topk, &choices)?;
    ctx.write_f32s(weights, &tw)?;
    route_choices(ctx, name, &route_ref(&choices, top_k, e), e, outs)?;
    ctx.write_u32s(ticket, &[0])
}

// ----- the conversion ------------------------------------------------------------------------------------

/// `omega_convert_f32_bf16`: thread `t` of every block converts the elements `i < n` with `i % 256 ==
/// t`, whatever the grid (a grid-stride loop of `gridDim.x * 256`), so a block of fewer than 256 threads
/// leaves the others as they were.
fn convert_f32_bf16(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let name = CONVERT_F32_BF16;
    let (input, out, n) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4));
    let lanes = u64::from(ctx.block[0].min(CONVERT_THREADS));
    let part = ctx.take(n);
    if part.is_empty() {
        return Ok(());
    }
    aligned(name, "in", input, 4)?;
    aligned(name, "out", out, 2)?;
    let group = u64::from(CONVERT_THREADS);
    let mut i = part.start;
    while i < part.end {
        // The run of covered elements from i: to the end of its 256-group's first `lanes`.
        let (g0, lane) = (i - i % group, i % group);
        let end = if lane < lanes { part.end.min(g0 + lanes) } else { i };
        if end > i {
            let values = math::f32s_le(&load(ctx, input.wrapping_add(i * 4), (end - i) * 4)?);
            let bytes: Vec<u8> = values.iter().flat_map(|&v| math::f32_to_bf16(v).to_le_bytes()).collect();
            ctx.write(out.wrapping_add(i * 2), &bytes)?;
        }
        i = part.end.min(g0 + group).max(end);
    }
    Ok(())
}
