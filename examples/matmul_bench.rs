//! The matmul library's benchmark, Omega's side (the peer is benches/torch/matmul_peer.py, cuBLAS through
//! PyTorch in the same run; its metric names are these).
//!
//! On the platform it runs on, times the device-resident calls of `omega::libs::matmul` — operands in
//! device-only buffers — the way the peer times torch's calls: the shorter of
//!
//! - one call: the median of `--iters` calls after three warm-ups, each timed by the session
//!   (`Info::device_ns`: submit to completion of every launch on the platform clock, so one launch round
//!   trip is inside it), printed as `<metric>_call_us`; and
//! - back-to-back calls: the same product added [`REPS`] times to one command list (fewer where each add's
//!   own split-K scratch would pass [`LIST_SCRATCH_BYTES`], see [`list_reps`]; the default ordering: each
//!   launch waits for the one before), submitted four times; per submission the completion stamps give
//!   `(stamp of the last launch - stamp of the first product's last launch) / (reps - 1)`, the median of the
//!   last three is `<metric>_list_us` (the GPU running ahead of the host, as torch's 20-call rounds do);
//!
//! and prints one `omega.<metric> <value>` line per figure:
//!
//! - `matmul_bf16_<n>x<n>x<n>_tflops` for n in {4096, 8192}, and `matmul_f32_8192x8192x8192_tflops`;
//! - for each Qwen3-30B-A3B matrix (qkv, o, router, gateup, down, lmhead) at M in {1, 2, 4, 8, 16, 32, 64,
//!   128, 512, 4096}: `matmul_bf16_<M>x<N>x<K>_us`, `_tflops` and `_gbps` (weight bytes per second);
//! - these products stored f32 (the C entries' output); from M = 128 and for the cubes the same product
//!   into a bf16 y (`bf16_to_bf16`, the serving engine's output) is printed as `omega16.<metric>` (`_us`,
//!   `_tflops`), the peer of the `cublas.` figure (F.linear writes bf16), where the `omega.` figure's is
//!   `cublas32.` (cuBLAS writing f32): `compare.py --ours omega16 ...` puts the former side by side;
//! - the SwiGLU call over the fused gate+up weight (an expert's N = 768 at M in {512, 4096, 8192}):
//!   `swiglu_<M>x<N>x<K>_us` (f32 y), `omega16.swiglu_<M>x<N>x<K>_us` (bf16 y) and
//!   `omega16.swiglu_gemm_<M>x<N>x<K>_us`, the library's bf16 GEMM of the `[M, 2N]` product alone; the
//!   peer prints torch's F.linear + silu + mul (`torch.`, and `torchgraph.` in a graph) and cuBLAS's GEMM
//!   alone (`cublas.swiglu_gemm_`);
//! - the grouped expert GEMM at decode (128 experts, top-8, random routing, T in {1, 8, 64}, the gate+up and
//!   down shapes): `moe_<name>_T<T>_us` and `_gbps` over the touched experts' weight bytes;
//! - the host-pointer entry `omega_gpu_matmul_bf16` at a few shapes: `host_bf16_<M>x<N>x<K>_us` (end to
//!   end, wall), `_device_us`, `_floor_us` (its bytes at the sync speeds measured in the same run,
//!   `sync_256m_to_{gpu,cpu}_gbps`, plus its device time) and `_of_floor` (the goal: <= 1.1), with the
//!   bytes it moved in a comment line; then, through the typed API in
//!   a session of its own, the staged copies that entry makes, timed alone: `host_bf16_<M>x<N>x<K>_copy_in_us`
//!   (x and W written to device buffers) and `_copy_out_us` (y read back), so the run says which part of
//!   the entry's time the copies are.
//!
//! A `#` line before each figure names the path the planner chose, its launches, CTAs and K split.
//!
//! `matmul_bench [--quick] [--check] [--iters N] [--alternatives] [--gemv-splits] [--host]`: `--quick` runs small shapes for a
//! smoke run on sim (the cubes at 256 and 128, the Qwen matrices but lm_head at M in {1, 64}, 16
//! experts); `--check` verifies one random output element of every shape against an f64 dot product and
//! fails (exit 1, stage `check`) on a miss. On sim every time is the simulator's virtual clock, not a
//! GPU's.
//!
//! `--alternatives` runs, instead of the figures above, every forced plan of the library
//! ([`matmul::ForcedPlan`]) at 4096^3, 8192^3 and each Qwen matrix at M in {1, 8, 16, 32, 64, 512, 4096}: the
//! GEMV (planner's split; M <= 64 only, past that its passes over W take tens of milliseconds), the
//! unsplit wide and narrow TMA GEMMs, the narrow one in 2 K splits, each tile by the TMA-store
//! entry, by the cluster entry and in stream-K order (`wide_ts`, `wide_mc`, `narrow_ts`, `narrow_mc`,
//! `wide_sk`, `narrow_sk`), the narrow tile in ping-pong (`narrow_pp`), and the skinny GEMM
//! (M <= 64) at the planner's split and unsplit; each timed as above (call and list, [`ALT_ITERS`] calls) and printed
//! as `omega.alt_<plan>_<M>x<N>x<K>_us` (with `_call_us` and `_list_us`), a `#` line naming the kernel,
//! a `# ... refused: <error>` line for a plan the shape cannot take. With `--quick`: 256^3, three small
//! Qwen products and one of K = 520, which the GEMV refuses (a sim smoke run).
//!
//! `--gemv-splits` runs, instead, the bf16-output GEMV of the q/k/v and o products at M in {1, 4} at each
//! K split (`gemv_splits`): `omega.gemv_split<S>_<M>x<N>x<K>_list_us`.
//!
//! `--host` runs only the host-pointer entry and its copies alone (`host_*` lines), for sweeps of the
//! staged copy's settings (`OMEGA_NVIDIA_COPY_THREADS`, `OMEGA_NVIDIA_STAGING_PIECE_BYTES`: step
//! `mmhost` of `benches/gpu/steps.sh`).

use std::time::Instant;

use omega::cmdlist::CmdListBuilder;
use omega::error::Stage;
use omega::libs::matmul::{self, GroupedShape, Info, Matmul, MatmulError, Shape};
use omega::{Device, Error, Gpu, Mem, Scope};
use rand::Rng;

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
enum BenchError {
    /// A device call of the harness itself (an allocation, a copy).
    #[error(transparent)]
    Device(#[from] Error),
    /// A library call.
    #[error(transparent)]
    Matmul(#[from] MatmulError),
    /// `--check`: a sampled element off its f64 value.
    #[error("{}: {kind} {m}x{n}x{k}: y[{r}, {c}] = {got:e}, want {want:e} within {bound:e}", Stage::Check)]
    Miss {
        /// Which product ("bf16", "f32", "grouped" with m = tokens and r the slot, "host").
        kind: &'static str,
        m: u32,
        n: u32,
        k: u32,
        r: usize,
        c: usize,
        got: f32,
        want: f64,
        bound: f64,
    },
    /// A command list of repeated products did not complete.
    #[error(transparent)]
    List(#[from] omega::cmdlist::CmdListError),
    /// The host-pointer entry failed (its text is printed before the run stops).
    #[error("{}: omega_gpu_matmul_bf16 {m}x{n}x{k} returned {rc}", Stage::Bench)]
    HostEntry { m: u32, n: u32, k: u32, rc: i32 },
}

/// Where a sampled element lies: the product, its shape and the position.
struct Sample {
    kind: &'static str,
    shape: [u32; 3],
    at: [usize; 2],
}

#[path = "common/mod.rs"]
mod common;

/// The Qwen3-30B-A3B matrices, (name, N, K) as a linear layer stores W `[N, K]`.
const QWEN: [(&str, u32, u32); 6] = [
    ("qkv", 5120, 2048),
    ("o", 2048, 4096),
    ("router", 128, 2048),
    ("gateup", 1536, 2048),
    ("down", 2048, 768),
    ("lmhead", 151_936, 2048),
];
const MS: [u32; 10] = [1, 2, 4, 8, 16, 32, 64, 128, 512, 4096];
/// Products per command list in the back-to-back timing (torch's rounds are 20 calls).
const REPS: usize = 20;
/// The most split-K scratch one timing list asks for: each add has its own (the list may run independent
/// launches together), so the lm_head at M = 4096 split in two would want 20 x 5 GB.
const LIST_SCRATCH_BYTES: u64 = 16 << 30;

/// Products per timing list for a product planned as `info` says: [`REPS`], or as many (at least two) as
/// keep the adds' split-K partial sums within [`LIST_SCRATCH_BYTES`].
fn list_reps(info: &Info) -> usize {
    if info.split <= 1 {
        return REPS;
    }
    let per_add = u64::from(info.split) * u64::from(info.m) * u64::from(info.n) * 4;
    REPS.min((LIST_SCRATCH_BYTES / per_add).max(2) as usize)
}

/// Calls per plan in `--alternatives` (the list timing as always): 8 plans of 32 shapes stay within a
/// minute or two of the H200.
const ALT_ITERS: usize = 5;

/// The SwiGLU products `(M, N, K)` (y `[M, N]`, the fused gate+up weight `[2N, K]`): an expert's gate+up at
/// 512, 4096 and 8192 rows (benches/torch/matmul_peer.py's `SWIGLU`).
const SWIGLU_SHAPES: [(u32, u32, u32); 3] = [(512, 768, 2048), (4096, 768, 2048), (8192, 768, 2048)];
/// The M of the Qwen matrices in `--alternatives`.
const ALT_MS: [u32; 7] = [1, 8, 16, 32, 64, 512, 4096];
/// The GEMV is timed up to this M.
const ALT_GEMV_MAX_M: u32 = 64;

struct Opts {
    quick: bool,
    check: bool,
    iters: usize,
}

/// The bf16-output products' [`Sample`] kind.
const BF16_OUT: &str = "bf16 out";
/// The least M whose bf16-output product is timed too (`omega16.` lines): the TMA GEMM's shapes.
const BF16_OUT_MIN_M: u32 = 128;

/// `n` random bf16 bit patterns of magnitude in [2^-7, 2^-3), either sign.
fn bf16s(rng: &mut impl Rng, n: usize) -> Vec<u16> {
    (0..n).map(|_| (rng.random::<u16>() & 0x81ff) | 0x3c00).collect()
}

fn bf16(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// `(Σ x·w, Σ |x·w|)` in f64.
fn dot(x: impl Iterator<Item = f32>, w: impl Iterator<Item = f32>) -> (f64, f64) {
    x.zip(w).fold((0.0, 0.0), |(s, m), (a, b)| {
        let p = f64::from(a) * f64::from(b);
        (s + p, m + p.abs())
    })
}

/// One element against its f64 value, within `K · 2^-22 · Σ|x·w|` (tests/matmul_lib.rs argues it), and
/// for a bf16 output (`kind` "bf16 out") half a bf16 step of the value besides.
fn verify(s: Sample, got: f32, (want, mag): (f64, f64)) -> Result<(), BenchError> {
    let [m, n, k] = s.shape;
    let rounding = if s.kind == BF16_OUT { want.abs() * 2f64.powi(-8) } else { 0.0 };
    let bound = f64::from(k) * 2f64.powi(-22) * mag + rounding;
    if (f64::from(got) - want).abs() <= bound {
        return Ok(());
    }
    let [r, c] = s.at;
    Err(BenchError::Miss { kind: s.kind, m, n, k, r, c, got, want, bound })
}

fn median(mut v: Vec<f64>) -> f64 {
    common::percentile(&mut v, 0.5)
}

fn describe(info: &Info) -> String {
    format!(
        "path {} launches {} ctas {} (total {}) split {} budget {}",
        info.path.map_or("none", |p| p.name()),
        info.launches,
        info.ctas,
        info.total_ctas,
        info.split,
        info.cta_budget
    )
}

/// Runs `call` three times, then `iters` times; returns the token, the median device seconds and the last
/// info.
fn time<'s>(
    gpu: Gpu<'s>,
    iters: usize,
    mut call: impl FnMut(Gpu<'s>) -> Result<matmul::Done<'s>, matmul::Failed<'s>>,
) -> Result<(Gpu<'s>, f64, Info), BenchError> {
    let mut gpu = gpu;
    let mut last = Info::default();
    let mut ts = Vec::with_capacity(iters);
    for i in 0..3 + iters {
        let done = call(gpu).map_err(|f| f.error)?;
        gpu = done.gpu;
        last = done.info;
        if i >= 3 {
            ts.push(done.info.device_ns as f64 * 1e-9);
        }
    }
    Ok((gpu, median(ts), last))
}

/// The steady time of one product in `list`, which holds `reps` of them of `per` launches each.
fn list_secs<'s>(
    gpu: Gpu<'s>,
    list: &mut CmdListBuilder<'_, 's>,
    per: usize,
    reps: usize,
) -> Result<(Gpu<'s>, f64), BenchError> {
    let mut gpu = gpu;
    let mut ts = Vec::new();
    for round in 0..4 {
        let done = gpu.submit(list).map_err(|e| e.error)?;
        gpu = done.gpu;
        let stamps = list.stamps();
        let (first, last) = (stamps[per - 1], stamps[reps * per - 1]);
        if round > 0 {
            ts.push(last.saturating_sub(first) as f64 * 1e-9 / (reps - 1) as f64);
        }
    }
    Ok((gpu, median(ts)))
}

/// Prints the call and list figures of `tag` and returns the shorter (the peer's rule).
fn report(tag: &str, call: f64, list: f64) -> f64 {
    report_as("omega", tag, call, list)
}

/// [`report`] on `prefix.` lines.
fn report_as(prefix: &str, tag: &str, call: f64, list: f64) -> f64 {
    println!("{prefix}.{tag}_call_us {:.3}", call * 1e6);
    println!("{prefix}.{tag}_list_us {:.3}", list * 1e6);
    call.min(list)
}

/// A dense bf16 product at `shape` on fresh random operands, timed by [`timed_bf16`].
fn dense_bf16<'s>(
    s: &'s Scope<'s>,
    gpu: Gpu<'s>,
    mm: &Matmul<'s>,
    rng: &mut impl Rng,
    o: &Opts,
    shape: Shape,
) -> Result<(Gpu<'s>, [f64; 2], Info), BenchError> {
    let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
    let xh = bf16s(rng, m * k);
    let wh = bf16s(rng, n * k);
    let x: Mem<'s, Device<u16>> = s.alloc_device_from(&xh)?;
    let w: Mem<'s, Device<u16>> = s.alloc_device_from(&wh)?;
    let mut y = s.alloc_device::<f32>(m * n)?;
    let (gpu, t, info) = timed_bf16(s, gpu, mm, rng, o, o.iters, (&xh, &wh), (&x, &w, &mut y), shape)?;
    drop(y);
    let gpu = if shape.m >= BF16_OUT_MIN_M {
        let tag = format!("matmul_bf16_{}x{}x{}", shape.m, shape.n, shape.k);
        bf16_out(s, gpu, mm, rng, o, (&xh, &wh), (&x, &w), shape, &tag)?
    } else {
        gpu
    };
    Ok((gpu, t, info))
}

/// A device-only bf16 operand.
type Bf16Mem<'s> = Mem<'s, Device<u16>>;

/// An output element of the dense bf16 product: f32 ([`Matmul::bf16`]) or bf16 ([`Matmul::bf16_to_bf16`]).
trait Out: omega::DeviceScalar + Default {
    /// Its [`Sample`] kind.
    const KIND: &'static str;
    /// Its value.
    fn value(self) -> f32;
    /// The product into `y`.
    fn call<'s>(
        mm: &Matmul<'s>,
        gpu: Gpu<'s>,
        xw: (&Bf16Mem<'s>, &Bf16Mem<'s>),
        y: &mut Mem<'s, Device<Self>>,
        shape: Shape,
    ) -> Result<matmul::Done<'s>, matmul::Failed<'s>>;
    /// The product into `y`, added to `list`.
    fn add<'k, 's>(
        mm: &'k Matmul<'s>,
        list: &mut CmdListBuilder<'k, 's>,
        xw: (&'k Bf16Mem<'s>, &'k Bf16Mem<'s>),
        y: &'k Mem<'s, Device<Self>>,
        shape: Shape,
    ) -> Result<Info, MatmulError>;
}

impl Out for f32 {
    const KIND: &'static str = "bf16";
    fn value(self) -> f32 {
        self
    }
    fn call<'s>(
        mm: &Matmul<'s>,
        gpu: Gpu<'s>,
        (x, w): (&Bf16Mem<'s>, &Bf16Mem<'s>),
        y: &mut Mem<'s, Device<f32>>,
        shape: Shape,
    ) -> Result<matmul::Done<'s>, matmul::Failed<'s>> {
        mm.bf16(gpu, x, w, y, shape)
    }
    fn add<'k, 's>(
        mm: &'k Matmul<'s>,
        list: &mut CmdListBuilder<'k, 's>,
        (x, w): (&'k Bf16Mem<'s>, &'k Bf16Mem<'s>),
        y: &'k Mem<'s, Device<f32>>,
        shape: Shape,
    ) -> Result<Info, MatmulError> {
        mm.add_bf16(list, x, w, y, shape)
    }
}

impl Out for u16 {
    const KIND: &'static str = BF16_OUT;
    fn value(self) -> f32 {
        bf16(self)
    }
    fn call<'s>(
        mm: &Matmul<'s>,
        gpu: Gpu<'s>,
        (x, w): (&Bf16Mem<'s>, &Bf16Mem<'s>),
        y: &mut Mem<'s, Device<u16>>,
        shape: Shape,
    ) -> Result<matmul::Done<'s>, matmul::Failed<'s>> {
        mm.bf16_to_bf16(gpu, x, w, y, shape)
    }
    fn add<'k, 's>(
        mm: &'k Matmul<'s>,
        list: &mut CmdListBuilder<'k, 's>,
        (x, w): (&'k Bf16Mem<'s>, &'k Bf16Mem<'s>),
        y: &'k Mem<'s, Device<u16>>,
        shape: Shape,
    ) -> Result<Info, MatmulError> {
        mm.add_bf16_to_bf16(list, x, w, y, shape)
    }
}

/// The product of `x` and `w` (whose host copies are `xh`, `wh`) into `y`, timed as one call (`iters`
/// of them) and back to back; with `--check`, one random element verified. Returns the token, the call
/// and list seconds, and the call's info.
#[allow(clippy::too_many_arguments)]
fn timed_bf16<'s, Y: Out>(
    s: &'s Scope<'s>,
    gpu: Gpu<'s>,
    mm: &Matmul<'s>,
    rng: &mut impl Rng,
    o: &Opts,
    iters: usize,
    (xh, wh): (&[u16], &[u16]),
    (x, w, y): (&Bf16Mem<'s>, &Bf16Mem<'s>, &mut Mem<'s, Device<Y>>),
    shape: Shape,
) -> Result<(Gpu<'s>, [f64; 2], Info), BenchError> {
    let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
    let (gpu, t, info) = time(gpu, iters, |g| Y::call(mm, g, (x, w), &mut *y, shape))?;
    if o.check {
        let (r, c) = (rng.random_range(0..m), rng.random_range(0..n));
        let mut got = [Y::default()];
        y.read_at(r * n + c, &mut got)?;
        let want = dot(xh[r * k..][..k].iter().map(|&b| bf16(b)), wh[c * k..][..k].iter().map(|&b| bf16(b)));
        verify(Sample { kind: Y::KIND, shape: [shape.m, shape.n, shape.k], at: [r, c] }, got[0].value(), want)?;
    }
    let mut list = s.cmdlist()?;
    let reps = list_reps(&info);
    for _ in 0..reps {
        Y::add(mm, &mut list, (x, w), &*y, shape)?;
    }
    let (gpu, l) = list_secs(gpu, &mut list, info.launches as usize, reps)?;
    Ok((gpu, [t, l], info))
}

/// The product of `x` and `w` into a bf16 y (the serving engine's output, and F.linear's), timed as
/// [`timed_bf16`] times the f32 one and printed as `omega16.<tag>_us` and `_tflops`: the peer of cuBLAS's
/// own bf16-output figure (`cublas.` lines), where the `omega.` f32-output figure's is `cublas32.`.
#[allow(clippy::too_many_arguments)]
fn bf16_out<'s>(
    s: &'s Scope<'s>,
    gpu: Gpu<'s>,
    mm: &Matmul<'s>,
    rng: &mut impl Rng,
    o: &Opts,
    hosts: (&[u16], &[u16]),
    (x, w): (&Bf16Mem<'s>, &Bf16Mem<'s>),
    shape: Shape,
    tag: &str,
) -> Result<Gpu<'s>, BenchError> {
    let mut y = s.alloc_device::<u16>(shape.m as usize * shape.n as usize)?;
    let (gpu, [call, list], info) = timed_bf16(s, gpu, mm, rng, o, o.iters, hosts, (x, w, &mut y), shape)?;
    println!("# bf16 out {shape}: {} kernel {}", describe(&info), info.kernel);
    let t = report_as("omega16", tag, call, list);
    println!("omega16.{tag}_us {:.3}", t * 1e6);
    println!(
        "omega16.{tag}_tflops {:.4}",
        2.0 * f64::from(shape.m) * f64::from(shape.n) * f64::from(shape.k) / t / 1e12
    );
    Ok(gpu)
}

fn cubes<'s>(
    s: &'s Scope<'s>,
    gpu: Gpu<'s>,
    mm: &Matmul<'s>,
    rng: &mut impl Rng,
    o: &Opts,
) -> Result<Gpu<'s>, BenchError> {
    let mut gpu = gpu;
    for n in if o.quick { vec![256u32] } else { vec![4096, 8192] } {
        let shape = Shape::new(n, n, n);
        let (g, [call, list], info) = dense_bf16(s, gpu, mm, rng, o, shape)?;
        gpu = g;
        println!("# bf16 {shape}: {}", describe(&info));
        let t = report(&format!("matmul_bf16_{n}x{n}x{n}"), call, list);
        println!("omega.matmul_bf16_{n}x{n}x{n}_tflops {:.4}", 2.0 * f64::from(n).powi(3) / t / 1e12);
    }
    let n = if o.quick { 128u32 } else { 8192 };
    let (nu, shape) = (n as usize, Shape::new(n, n, n));
    let xh: Vec<f32> = (0..nu * nu).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let wh: Vec<f32> = (0..nu * nu).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let x = s.alloc_device_from(&xh)?;
    let w = s.alloc_device_from(&wh)?;
    let mut y = s.alloc_device::<f32>(nu * nu)?;
    let (g, t, info) = time(gpu, o.iters, |g| mm.f32(g, &x, &w, &mut y, shape))?;
    gpu = g;
    if o.check {
        let (r, c) = (rng.random_range(0..nu), rng.random_range(0..nu));
        let mut got = [0f32];
        y.read_at(r * nu + c, &mut got)?;
        let want = dot(xh[r * nu..][..nu].iter().copied(), wh[c * nu..][..nu].iter().copied());
        verify(Sample { kind: "f32", shape: [n, n, n], at: [r, c] }, got[0], want)?;
    }
    println!("# f32 {shape}: {}", describe(&info));
    println!("omega.matmul_f32_{n}x{n}x{n}_tflops {:.4}", 2.0 * f64::from(n).powi(3) / t / 1e12);
    Ok(gpu)
}

fn qwen<'s>(
    s: &'s Scope<'s>,
    gpu: Gpu<'s>,
    mm: &Matmul<'s>,
    rng: &mut impl Rng,
    o: &Opts,
) -> Result<Gpu<'s>, BenchError> {
    let mut gpu = gpu;
    for (name, n, k) in QWEN {
        if o.quick && name == "lmhead" {
            println!("# lmhead: left out in --quick (311 million weights)");
            continue;
        }
        let ms: &[u32] = if o.quick { &[1, 64] } else { &MS };
        for &m in ms {
            let shape = Shape::new(m, n, k);
            let (g, [call, list], info) = dense_bf16(s, gpu, mm, rng, o, shape)?;
            gpu = g;
            let tag = format!("matmul_bf16_{m}x{n}x{k}");
            println!("# {name} {shape}: {}", describe(&info));
            let t = report(&tag, call, list);
            println!("omega.{tag}_us {:.3}", t * 1e6);
            println!("omega.{tag}_tflops {:.4}", 2.0 * f64::from(m) * f64::from(n) * f64::from(k) / t / 1e12);
            println!("omega.{tag}_gbps {:.2}", 2.0 * f64::from(n) * f64::from(k) / t / 1e9);
        }
    }
    Ok(gpu)
}

/// The SwiGLU call ([`Matmul::swiglu_bf16`], `_to_bf16`) at [`SWIGLU_SHAPES`] on fresh random operands, each
/// output timed as a call and back to back in a list, the shorter printed (`omega.swiglu_<M>x<N>x<K>_us`,
/// f32 y; `omega16.`, bf16 y; `_call_us` and `_list_us` beside), and beside it the
/// library's bf16 GEMM of the same `[M, 2N]` product alone (`omega16.swiglu_gemm_..._us`): what the fused
/// epilogue adds to the GEMM. With `--check`, one sampled element of each output against f64.
fn swiglu<'s>(
    s: &'s Scope<'s>,
    gpu: Gpu<'s>,
    mm: &Matmul<'s>,
    rng: &mut impl Rng,
    o: &Opts,
) -> Result<Gpu<'s>, BenchError> {
    let mut gpu = gpu;
    let shapes: &[(u32, u32, u32)] = if o.quick { &[(256, 256, 256)] } else { &SWIGLU_SHAPES };
    for &(m, n, k) in shapes {
        let (mu, nu, ku) = (m as usize, n as usize, k as usize);
        let (xh, wh) = (bf16s(rng, mu * ku), bf16s(rng, 2 * nu * ku));
        let x: Mem<'s, Device<u16>> = s.alloc_device_from(&xh)?;
        let w: Mem<'s, Device<u16>> = s.alloc_device_from(&wh)?;
        let shape = Shape::new(m, n, k);
        let tag = format!("swiglu_{m}x{n}x{k}");
        // The f32 product element (r, c) of the [M, 2N] GEMM, then its SwiGLU.
        let prod = |r: usize, c: usize| {
            dot(xh[r * ku..][..ku].iter().map(|&b| bf16(b)), wh[c * ku..][..ku].iter().map(|&b| bf16(b)))
        };
        let want = |r: usize, c: usize| {
            let ((g, gm), (u, um)) = (prod(r, c), prod(r, nu + c));
            let silu = g / (1.0 + (-g).exp());
            (silu * u, (gm * u.abs() + silu.abs() * um) * 1.1 + (silu * u).abs())
        };
        let mut y32 = s.alloc_device::<f32>(mu * nu)?;
        let (g, t, info) = time(gpu, o.iters, |g| mm.swiglu_bf16(g, &x, &w, &mut y32, shape))?;
        let mut list = s.cmdlist()?;
        for _ in 0..REPS {
            mm.add_swiglu_bf16(&mut list, &x, &w, &y32, shape)?;
        }
        let (g, l) = list_secs(g, &mut list, 1, REPS)?;
        drop(list);
        println!("# swiglu {shape}: {} kernel {}", describe(&info), info.kernel);
        println!("omega.{tag}_us {:.3}", report(&tag, t, l) * 1e6);
        let mut y16 = s.alloc_device::<u16>(mu * nu)?;
        let (g, t16, info16) = time(g, o.iters, |g| mm.swiglu_bf16_to_bf16(g, &x, &w, &mut y16, shape))?;
        let mut list = s.cmdlist()?;
        for _ in 0..REPS {
            mm.add_swiglu_bf16_to_bf16(&mut list, &x, &w, &y16, shape)?;
        }
        let (g, l16) = list_secs(g, &mut list, 1, REPS)?;
        drop(list);
        gpu = g;
        println!("# swiglu bf16 out {shape}: {} kernel {}", describe(&info16), info16.kernel);
        println!("omega16.{tag}_us {:.3}", report_as("omega16", &tag, t16, l16) * 1e6);
        if o.check {
            let (r, c) = (rng.random_range(0..mu), rng.random_range(0..nu));
            let (mut a, mut b) = ([0f32], [0u16]);
            y32.read_at(r * nu + c, &mut a)?;
            y16.read_at(r * nu + c, &mut b)?;
            // `want`'s magnitude carries each product's error through SwiGLU; the bf16 y half a step more.
            verify(Sample { kind: "swiglu", shape: [m, n, k], at: [r, c] }, a[0], want(r, c))?;
            verify(Sample { kind: BF16_OUT, shape: [m, n, k], at: [r, c] }, bf16(b[0]), want(r, c))?;
        }
        let gemm = Shape::new(m, 2 * n, k);
        let mut p16 = s.alloc_device::<u16>(mu * 2 * nu)?;
        let (g, [call, list], _) = timed_bf16(s, gpu, mm, rng, o, o.iters, (&xh, &wh), (&x, &w, &mut p16), gemm)?;
        gpu = g;
        let tag = format!("swiglu_gemm_{m}x{n}x{k}");
        println!("omega16.{tag}_us {:.3}", report_as("omega16", &tag, call, list) * 1e6);
    }
    Ok(gpu)
}

fn grouped<'s>(
    s: &'s Scope<'s>,
    gpu: Gpu<'s>,
    mm: &Matmul<'s>,
    rng: &mut impl Rng,
    o: &Opts,
) -> Result<Gpu<'s>, BenchError> {
    let mut gpu = gpu;
    let (experts, top_k) = (if o.quick { 16u32 } else { 128 }, 8u32);
    let suffix = if o.quick { "_E16" } else { "" };
    for (name, n, k) in [QWEN[3], QWEN[4]] {
        let (nu, ku, eu) = (n as usize, k as usize, experts as usize);
        let wh = bf16s(rng, eu * nu * ku);
        let w = s.alloc_device_from(&wh)?;
        for t in [1u32, 8, 64] {
            let shape = GroupedShape { tokens: t, top_k, experts, n, k };
            let tu = t as usize;
            let xh = bf16s(rng, tu * ku);
            let mut choices = Vec::with_capacity(tu * 8);
            for _ in 0..t {
                let mut picked: Vec<u32> = Vec::new();
                while picked.len() < top_k as usize {
                    let e = rng.random_range(0..experts);
                    if !picked.contains(&e) {
                        picked.push(e);
                    }
                }
                choices.extend(picked);
            }
            let mut touched = choices.clone();
            touched.sort_unstable();
            touched.dedup();
            let x = s.alloc_device_from(&xh)?;
            let topk = s.alloc_device_from(&choices)?;
            let layout = shape.routing();
            let mut routing = s.alloc_device::<u32>(layout.words)?;
            let mut y = s.alloc_device::<f32>(choices.len() * nu)?;
            let (g, secs, info) =
                time(gpu, o.iters, |g| mm.grouped_bf16(g, &x, &w, &topk, &mut routing, &mut y, shape))?;
            gpu = g;
            if o.check {
                let slot = rng.random_range(0..choices.len());
                let mut pair = [0u32];
                routing.read_at(layout.pairs + slot, &mut pair)?;
                let (token, expert) = (pair[0] as usize / top_k as usize, choices[pair[0] as usize] as usize);
                let c = rng.random_range(0..nu);
                let mut got = [0f32];
                y.read_at(slot * nu + c, &mut got)?;
                let wrow = &wh[(expert * nu + c) * ku..][..ku];
                let want = dot(xh[token * ku..][..ku].iter().map(|&b| bf16(b)), wrow.iter().map(|&b| bf16(b)));
                verify(Sample { kind: "grouped", shape: [t, n, k], at: [slot, c] }, got[0], want)?;
            }
            let mut list = s.cmdlist()?;
            for _ in 0..REPS {
                mm.add_grouped_bf16(&mut list, &x, &w, &topk, &routing, &y, shape)?;
            }
            let (g, lsecs) = list_secs(gpu, &mut list, info.launches as usize, REPS)?;
            gpu = g;
            drop(list);
            println!("# moe {name} {shape}: {} touched {} experts", describe(&info), touched.len());
            let secs = report(&format!("moe_{name}{suffix}_T{t}"), secs, lsecs);
            println!("omega.moe_{name}{suffix}_T{t}_us {:.3}", secs * 1e6);
            let bytes = touched.len() as f64 * 2.0 * f64::from(n) * f64::from(k);
            println!("omega.moe_{name}{suffix}_T{t}_gbps {:.2}", bytes / secs / 1e9);
        }
    }
    Ok(gpu)
}

/// The host-pointer entry (it takes the lock itself: called with none held).
fn host_entry(rng: &mut impl Rng, o: &Opts) -> Result<(), BenchError> {
    use omega::ffi::matmul::{omega_gpu_matmul_bf16, omega_gpu_matmul_last_error, OmegaGpuMatmulInfo};
    let shapes: &[(u32, u32, u32)] = if o.quick {
        &[(1, 128, 2048), (64, 2048, 768)]
    } else {
        &[(1, 5120, 2048), (64, 2048, 4096), (512, 1536, 2048)]
    };
    let mut calls = Vec::new();
    for &(m, n, k) in shapes {
        let (mu, nu, ku) = (m as usize, n as usize, k as usize);
        let x = bf16s(rng, mu * ku);
        let w = bf16s(rng, nu * ku);
        let mut y = vec![0f32; mu * nu];
        let mut info = OmegaGpuMatmulInfo::default();
        let call = common::HostCall::measure(o.iters, || {
            // SAFETY: `x`, `w` and `y` hold M*K, N*K and M*N elements, aligned, and `info` is writable.
            let rc = unsafe { omega_gpu_matmul_bf16(m, n, k, x.as_ptr(), w.as_ptr(), y.as_mut_ptr(), &mut info) };
            if rc != 0 {
                // SAFETY: the library's last error is a NUL-terminated process-wide buffer.
                let text = unsafe { std::ffi::CStr::from_ptr(omega_gpu_matmul_last_error()) };
                eprintln!("# omega_gpu_matmul_bf16: {}", text.to_string_lossy());
                return Err(BenchError::HostEntry { m, n, k, rc });
            }
            Ok((info.device_ns, info.h2d_bytes, info.d2h_bytes))
        })?;
        if o.check {
            let (r, c) = (rng.random_range(0..mu), rng.random_range(0..nu));
            let want = dot(x[r * ku..][..ku].iter().map(|&b| bf16(b)), w[c * ku..][..ku].iter().map(|&b| bf16(b)));
            verify(Sample { kind: "host", shape: [m, n, k], at: [r, c] }, y[r * nu + c], want)?;
        }
        let tag = format!("host_bf16_{m}x{n}x{k}");
        println!("# {tag}: path {}", info.path);
        calls.push((tag, call));
    }
    omega::ffi::matmul::omega_gpu_device_close();
    let speeds = common::sync_speeds(if o.quick { 1 << 24 } else { common::SYNC_MEASURE_BYTES })?;
    for (tag, call) in &calls {
        call.print(tag, speeds);
    }
    host_copies(shapes, o)
}

/// The host-pointer entry's staged copies alone, for the shapes `host_entry` ran: x and W written to
/// device-only buffers from pageable host memory, y read back, each the median of `3 + iters` rounds
/// after the first (which grows the staging ring).
fn host_copies(shapes: &[(u32, u32, u32)], o: &Opts) -> Result<(), BenchError> {
    let dev = omega::lock().open().map_err(|e| e.error)?;
    let r = dev.scope(|s, _gpu| -> Result<(), BenchError> {
        for &(m, n, k) in shapes {
            let (mu, nu, ku) = (m as usize, n as usize, k as usize);
            let (x, w, mut y) = (vec![0x3f80u16; mu * ku], vec![0x3f80u16; nu * ku], vec![0f32; mu * nu]);
            let mut dx = s.alloc_device::<u16>(x.len())?;
            let mut dw = s.alloc_device::<u16>(w.len())?;
            let mut dy = s.alloc_device::<f32>(y.len())?;
            let (mut copy_in, mut copy_out) = (Vec::new(), Vec::new());
            for i in 0..4 + o.iters {
                let t = Instant::now();
                dx.write(&x)?;
                dw.write(&w)?;
                let mid = Instant::now();
                dy.read(&mut y)?;
                if i > 0 {
                    copy_in.push((mid - t).as_secs_f64() * 1e6);
                    copy_out.push(common::us_since(mid));
                }
            }
            let tag = format!("host_bf16_{m}x{n}x{k}");
            println!("omega.{tag}_copy_in_us {:.3}", median(copy_in));
            println!("omega.{tag}_copy_out_us {:.3}", median(copy_out));
        }
        Ok(())
    });
    r.value()
}

/// `--alternatives`: every forced plan at each shape (module docs).
fn alternatives<'s>(
    s: &'s Scope<'s>,
    gpu: Gpu<'s>,
    mm: &Matmul<'s>,
    rng: &mut impl Rng,
    o: &Opts,
) -> Result<Gpu<'s>, BenchError> {
    use matmul::{ForcedPlan, GemmTile, PlanError};
    let mut shapes: Vec<(&str, Shape)> = Vec::new();
    if o.quick {
        shapes.push(("cube", Shape::new(256, 256, 256)));
        // K = 520 is no whole number of the GEMV's 32-element chunks: its refusal line.
        let small =
            [("router", 16, 128, 2048), ("down", 16, 2048, 768), ("gateup", 64, 1536, 2048), ("k520", 16, 256, 520)];
        shapes.extend(small.map(|(name, m, n, k)| (name, Shape::new(m, n, k))));
    } else {
        shapes.extend([4096, 8192].map(|n| ("cube", Shape::new(n, n, n))));
        for (name, n, k) in QWEN {
            shapes.extend(ALT_MS.map(|m| (name, Shape::new(m, n, k))));
        }
    }
    let plans = [
        ForcedPlan::Gemv { split: None },
        ForcedPlan::Gemm { tile: GemmTile::Wide, splits: Some(1) },
        ForcedPlan::Gemm { tile: GemmTile::Narrow, splits: Some(1) },
        ForcedPlan::Gemm { tile: GemmTile::Narrow, splits: Some(2) },
        ForcedPlan::GemmTmaStore { tile: GemmTile::Wide, cluster: false },
        ForcedPlan::GemmTmaStore { tile: GemmTile::Wide, cluster: true },
        ForcedPlan::GemmTmaStore { tile: GemmTile::Narrow, cluster: false },
        ForcedPlan::GemmTmaStore { tile: GemmTile::Narrow, cluster: true },
        ForcedPlan::GemmTmaStore { tile: GemmTile::N160, cluster: false },
        ForcedPlan::GemmTmaStore { tile: GemmTile::N160, cluster: true },
        ForcedPlan::GemmTmaStore { tile: GemmTile::N192, cluster: false },
        ForcedPlan::GemmTmaStore { tile: GemmTile::N192, cluster: true },
        ForcedPlan::GemmTmaStore { tile: GemmTile::N96, cluster: false },
        ForcedPlan::GemmTmaStore { tile: GemmTile::N64, cluster: false },
        ForcedPlan::GemmStreamK { tile: GemmTile::Wide },
        ForcedPlan::GemmStreamK { tile: GemmTile::Narrow },
        ForcedPlan::GemmPingPong { tile: GemmTile::Narrow },
        ForcedPlan::Skinny { split: None },
        ForcedPlan::Skinny { split: Some(1) },
        ForcedPlan::Swapab { splits: None },
        ForcedPlan::Swapab { splits: Some(1) },
    ];
    let iters = o.iters.min(ALT_ITERS);
    let mut gpu = gpu;
    for (name, shape) in shapes {
        let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
        let xh = bf16s(rng, m * k);
        let wh = bf16s(rng, n * k);
        let x: Mem<'s, Device<u16>> = s.alloc_device_from(&xh)?;
        let w: Mem<'s, Device<u16>> = s.alloc_device_from(&wh)?;
        let mut y = s.alloc_device::<f32>(m * n)?;
        let dims = format!("{}x{}x{}", shape.m, shape.n, shape.k);
        for plan in plans {
            let tag = format!("alt_{}_{dims}", plan.tag());
            if matches!(plan, ForcedPlan::Gemv { .. }) && shape.m > ALT_GEMV_MAX_M {
                println!("# {name} {shape}: {} not timed past M = {ALT_GEMV_MAX_M}", plan.tag());
                continue;
            }
            mm.set_forced_plan(Some(plan));
            // A first call finds a refusal, which launches nothing and hands the token back.
            gpu = match mm.bf16(gpu, &x, &w, &mut y, shape) {
                Ok(done) => done.gpu,
                Err(f) => match (f.gpu, f.error) {
                    (Some(g), e @ MatmulError::Plan(PlanError::Forced { .. })) => {
                        println!("# {name} {shape}: {}: refused: {e}", plan.tag());
                        gpu = g;
                        continue;
                    }
                    (_, e) => return Err(e.into()),
                },
            };
            let (g, [call, list_t], info) = timed_bf16(s, gpu, mm, rng, o, iters, (&xh, &wh), (&x, &w, &mut y), shape)?;
            gpu = g;
            println!("# {name} {shape} {}: {} kernel {}", plan.tag(), describe(&info), info.kernel);
            let t = report(&tag, call, list_t);
            println!("omega.{tag}_us {:.3}", t * 1e6);
        }
    }
    mm.set_forced_plan(None);
    Ok(gpu)
}

/// `--gemv-splits`: the bf16-output GEMV of the decode step's q/k/v and o products at M in {1, 4} and each
/// K split (the planner's, then 1, 2, 3, 4, 6, 8, 12, 16): a list of [`REPS`] products cycling over four
/// weight copies (84 and 67 MB, past the L2, as a step's layers are), timed as `list_secs` does, printed as
/// `omega.gemv_split<S>_<M>x<N>x<K>_list_us` with a `#` line naming the kernel and its grid.
fn gemv_splits<'s>(s: &'s Scope<'s>, gpu: Gpu<'s>, mm: &Matmul<'s>, rng: &mut impl Rng) -> Result<Gpu<'s>, BenchError> {
    use matmul::{ForcedPlan, PlanError};
    let mut gpu = gpu;
    for (name, n, k) in [("qkv", 5120u32, 2048u32), ("o", 2048, 4096)] {
        let ws = (0..4)
            .map(|_| s.alloc_device_from(&bf16s(rng, (n * k) as usize)))
            .collect::<Result<Vec<Mem<'s, Device<u16>>>, _>>()?;
        for m in [1u32, 4] {
            let shape = Shape::new(m, n, k);
            let x: Mem<'s, Device<u16>> = s.alloc_device_from(&bf16s(rng, (m * k) as usize))?;
            let y = s.alloc_device::<u16>((m * n) as usize)?;
            for split in [None, Some(1), Some(2), Some(3), Some(4), Some(6), Some(8), Some(12), Some(16)] {
                let tag = split.map_or("auto".to_string(), |v| v.to_string());
                mm.set_forced_plan(Some(ForcedPlan::Gemv { split }));
                let mut list = s.cmdlist()?;
                let mut info = Info::default();
                let mut refused = None;
                for r in 0..REPS {
                    match mm.add_bf16_to_bf16(&mut list, &x, &ws[r % ws.len()], &y, shape) {
                        Ok(i) => info = i,
                        Err(e @ MatmulError::Plan(PlanError::Forced { .. })) => {
                            refused = Some(e);
                            break;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                if let Some(e) = refused {
                    println!("# {name} {shape} split {tag}: refused: {e}");
                    continue;
                }
                let (g, t) = list_secs(gpu, &mut list, info.launches as usize, REPS)?;
                gpu = g;
                println!("# {name} {shape} split {tag}: {} kernel {}", describe(&info), info.kernel);
                println!("omega.gemv_split{tag}_{m}x{n}x{k}_list_us {:.3}", t * 1e6);
            }
        }
    }
    mm.set_forced_plan(None);
    Ok(gpu)
}

fn main() -> Result<(), BenchError> {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let check = args.iter().any(|a| a == "--check");
    let alternatives_only = args.iter().any(|a| a == "--alternatives");
    let gemv_splits_only = args.iter().any(|a| a == "--gemv-splits");
    let host_only = args.iter().any(|a| a == "--host");
    let iters = args
        .iter()
        .position(|a| a == "--iters")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 3 } else { 20 });
    let o = Opts { quick, check, iters };
    let seed = common::fresh_seed();
    let mut rng = common::rng(seed);
    let dev = omega::lock().open().map_err(|e| e.error)?;
    println!(
        "# omega matmul_bench platform={} device=\"{}\" quick={quick} check={check} iters={iters} seed={seed} budget={}",
        dev.platform(),
        common::device_line(&dev.device()),
        matmul::cta_budget()
    );
    if common::is_sim(dev.platform()) {
        println!("# platform sim: every time below is the simulator's virtual clock, not a GPU's");
    }
    if alternatives_only {
        println!("# --alternatives: every forced plan, {} calls and {REPS}-product lists each", iters.min(ALT_ITERS));
    }
    let r = dev.scope(|s, gpu| -> Result<(), BenchError> {
        let mm = Matmul::new(s)?;
        mm.set_timeout_ms(60_000);
        if alternatives_only {
            alternatives(s, gpu, &mm, &mut rng, &o)?;
            return Ok(());
        }
        if gemv_splits_only {
            gemv_splits(s, gpu, &mm, &mut rng)?;
            return Ok(());
        }
        if host_only {
            return Ok(());
        }
        let gpu = cubes(s, gpu, &mm, &mut rng, &o)?;
        let gpu = qwen(s, gpu, &mm, &mut rng, &o)?;
        let gpu = swiglu(s, gpu, &mm, &mut rng, &o)?;
        grouped(s, gpu, &mm, &mut rng, &o)?;
        Ok(())
    });
    // The lock goes with the token, so the host-pointer entry can take it itself.
    r.value()?;
    if !alternatives_only && !gemv_splits_only {
        host_entry(&mut rng, &o)?;
    }
    if check {
        println!("# --check: every sampled element matched its f64 product");
    }
    Ok(())
}
