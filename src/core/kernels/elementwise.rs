//! The `elementwise` module's kernels (`kernels/cuda/elementwise.cu`, the elementwise library's): their
//! names, the launch constants their sources fix, and the host references the simulator runs.
//!
//! Every array is row-major, f32 or bf16 (`u16` bit patterns); every kernel computes in f32 and rounds
//! once per stored value. docs/elementwise.md states each kernel's contract; the sources say the same at
//! each definition (`kernels/cuda/elementwise/*.cuh`).
//!
//! Each reference does what its kernel does from the simulator's memory, as the kernel addresses it: it
//! reads the rows it computes (and the weight, the tables) and stores exactly where the kernel stores, so
//! a buffer too small faults (Xid 31) where the kernel's load or store would. It honours the launch as
//! given: every kernel is grid-stride, so any grid covers every row; a block the kernel cannot run (not
//! whole warps for the ones that reduce over warps, more than 1024 threads) faults with the reason
//! named, where the GPU would sum garbage. Work is sliced by rows ([`KernelCtx::take`]), one unit per
//! element, so virtual time grows with the bytes moved.
//!
//! Arithmetic: f32, as the kernels. The sums of squares are f32 `fma` chains in element order (the
//! kernels' order is their threads'), so results agree to rounding, not bit for bit; silu uses the
//! precise `exp` where the kernel uses `__expf` (a few ulp apart).

use core::ops::Range;

use omega_hal::sim::{KernelCtx, KernelError};
use omega_refmath as math;

use super::HostSpec;

/// The module's name (`kernels/cuda/elementwise.cu`).
pub const ELEMENTWISE: &str = "elementwise";
/// `omega_rmsnorm_{f32,bf16}(x, h, w, y, rows, cols, eps)`: `y = rmsnorm(x) * w` (h is not read).
pub const RMSNORM: [&str; 2] = ["omega_rmsnorm_f32", "omega_rmsnorm_bf16"];
/// `omega_add_rmsnorm_{f32,bf16}(x, h, w, y, rows, cols, eps)`: `h = x + h` in place, `y = rmsnorm(h) *
/// w`.
pub const ADD_RMSNORM: [&str; 2] = ["omega_add_rmsnorm_f32", "omega_add_rmsnorm_bf16"];
/// The warp-per-row RMSNorm forms (`rmsnorm_warp` in rmsnorm.cuh), the parameters and results of
/// [`RMSNORM`]: `omega_rmsnorm_warp_{f32,bf16}`. A warp owns each row; rows of at most
/// [`RMSNORM_WARP_COLS`] columns on the vector path (others take the block form inside the same entry).
pub const RMSNORM_WARP: [&str; 2] = ["omega_rmsnorm_warp_f32", "omega_rmsnorm_warp_bf16"];
/// The warp-per-row residual RMSNorm, bf16 only (the f32 form's two rows spill, and the block form
/// already reaches 0.97 of copy): `omega_add_rmsnorm_warp_bf16`, the parameters of [`ADD_RMSNORM`].
pub const ADD_RMSNORM_WARP_BF16: &str = "omega_add_rmsnorm_warp_bf16";
/// The widest row the warp-per-row forms keep in a warp's registers (`RMS_WARP_COLS`).
pub const RMSNORM_WARP_COLS: u32 = 2048;
/// The warp-per-row forms' block (`__launch_bounds__(256, 2)`): 8 rows a CTA at a time.
pub const RMSNORM_WARP_THREADS: u32 = 256;
/// `omega_rope_{f32,bf16}(x, w, cos, sin, y, tokens, heads, dim, eps)`: rotate_half RoPE (w, eps unread).
pub const ROPE: [&str; 2] = ["omega_rope_f32", "omega_rope_bf16"];
/// `omega_norm_rope_{f32,bf16}(x, w, cos, sin, y, tokens, heads, dim, eps)`: per-head RMSNorm, then RoPE.
pub const NORM_ROPE: [&str; 2] = ["omega_norm_rope_f32", "omega_norm_rope_bf16"];
/// `omega_norm_rope_whole_{f32,bf16}`: [`NORM_ROPE`]'s arguments and result for rows one 16-byte vector of
/// each half a lane covers: `dim` a multiple of `2 * ROPE_VEC`, at most [`NORM_ROPE_WHOLE_MAX_VECTORS`]
/// vectors, every pointer 16-byte aligned; the row's tables load with its x, before the norm.
pub const NORM_ROPE_WHOLE: [&str; 2] = ["omega_norm_rope_whole_f32", "omega_norm_rope_whole_bf16"];
/// The widest row of [`NORM_ROPE_WHOLE`], in vectors of [`ROPE_VEC`] elements (32 lanes, both halves).
pub const NORM_ROPE_WHOLE_MAX_VECTORS: u32 = 64;
/// `omega_swiglu_{f32,bf16}(gate, up, y, rows, cols, in_stride)`: `silu(gate) * up`.
pub const SWIGLU: [&str; 2] = ["omega_swiglu_f32", "omega_swiglu_bf16"];
/// `omega_swiglu_f32_bf16(gate, up, y, rows, cols, in_stride)`: `silu(gate) * up` from f32 into bf16.
pub const SWIGLU_F32_BF16: &str = "omega_swiglu_f32_bf16";
/// `omega_ew_copy16(src, dst, n)`: `n` 16-byte words copied, the benchmarks' bandwidth denominator.
pub const COPY16: &str = "omega_ew_copy16";

/// The RMSNorm kernels' largest block (`__launch_bounds__(1024)`).
pub const RMSNORM_MAX_THREADS: u32 = 1024;
/// The RoPE and SwiGLU kernels' block, as the library launches them (`__launch_bounds__(256)`).
pub const EW_THREADS: u32 = 256;
/// Elements per 16-byte vector: f32, bf16 (the RMSNorm and SwiGLU vector paths).
pub const VEC: [u32; 2] = [4, 8];
/// Vectors of a row each RMSNorm thread keeps in registers (`RmsCfg::ITEMS`): f32, bf16.
pub const RMSNORM_ITEMS: [u32; 2] = [2, 2];
/// The RMSNorm block for rows of `cols` elements (`bf16`, else f32): as many vectors a thread as its
/// registers keep ([`RMSNORM_ITEMS`]), so the row is read once, in whole warps, 32 to 1024 threads (past
/// 8192 f32 or 16384 bf16 columns the kernel reads the row again for the scaling).
pub fn rmsnorm_block(bf16: bool, cols: u32) -> u32 {
    let i = usize::from(bf16);
    cols.div_ceil(VEC[i] * RMSNORM_ITEMS[i]).next_multiple_of(32).clamp(32, RMSNORM_MAX_THREADS)
}
/// Elements of each half-row a RoPE lane takes per step (the vector path's `V`: 16 bytes), f32 and bf16.
pub const ROPE_VEC: [u32; 2] = [4, 8];

/// The module's kernels with their host references, by symbol name.
pub const ELEMENTWISE_HOST_SPECS: &[HostSpec] = &[
    rms_spec(RMSNORM[0], rmsnorm::<f32, false>),
    rms_spec(RMSNORM[1], rmsnorm::<u16, false>),
    rms_spec(ADD_RMSNORM[0], rmsnorm::<f32, true>),
    rms_spec(ADD_RMSNORM[1], rmsnorm::<u16, true>),
    rms_spec(RMSNORM_WARP[0], rmsnorm_warp::<f32, false>),
    rms_spec(RMSNORM_WARP[1], rmsnorm_warp::<u16, false>),
    rms_spec(ADD_RMSNORM_WARP_BF16, rmsnorm_warp::<u16, true>),
    rope_spec(ROPE[0], rope::<f32, false>),
    rope_spec(ROPE[1], rope::<u16, false>),
    rope_spec(NORM_ROPE[0], rope::<f32, true>),
    rope_spec(NORM_ROPE[1], rope::<u16, true>),
    rope_spec(NORM_ROPE_WHOLE[0], norm_rope_whole::<f32>),
    rope_spec(NORM_ROPE_WHOLE[1], norm_rope_whole::<u16>),
    HostSpec {
        name: SWIGLU[0],
        param_sizes: &[8, 8, 8, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: swiglu::<f32, f32>,
    },
    HostSpec {
        name: SWIGLU[1],
        param_sizes: &[8, 8, 8, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: swiglu::<u16, u16>,
    },
    HostSpec {
        name: SWIGLU_F32_BF16,
        param_sizes: &[8, 8, 8, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: swiglu::<f32, u16>,
    },
    HostSpec { name: COPY16, param_sizes: &[8, 8, 8], static_shared_bytes: 0, local_bytes_per_thread: 0, run: copy16 },
];

type Run = fn(&mut KernelCtx<'_>) -> Result<(), KernelError>;

const fn rms_spec(name: &'static str, run: Run) -> HostSpec {
    // `__shared__ float red[32]`: the block sum's one word per warp.
    HostSpec { name, param_sizes: &[8, 8, 8, 8, 4, 4, 4], static_shared_bytes: 128, local_bytes_per_thread: 0, run }
}

const fn rope_spec(name: &'static str, run: Run) -> HostSpec {
    HostSpec { name, param_sizes: &[8, 8, 8, 8, 8, 4, 4, 4, 4], static_shared_bytes: 0, local_bytes_per_thread: 0, run }
}

/// An element type of the kernels: how its values load, store and round.
trait Elem {
    const BYTES: u64;
    fn load(ctx: &KernelCtx<'_>, va: u64, n: u64) -> Result<Vec<f32>, KernelError>;
    fn store(ctx: &mut KernelCtx<'_>, va: u64, values: &[f32]) -> Result<(), KernelError>;
    /// `f` as a stored value holds it.
    fn round(f: f32) -> f32;
}

/// Bytes `va .. va + len` of device memory (a GPU load; a length no buffer holds faults before any host
/// memory is taken for it).
fn load_bytes(ctx: &KernelCtx<'_>, va: u64, len: u64) -> Result<Vec<u8>, KernelError> {
    // The last byte is probed first: a length no buffer holds faults before the allocation (64-bit
    // hosts only, as Omega runs on, so the length fits usize).
    if len > 0 {
        ctx.read(va.wrapping_add(len - 1), &mut [0u8])?;
    }
    let mut out = vec![0u8; len as usize];
    ctx.read(va, &mut out)?;
    Ok(out)
}

impl Elem for f32 {
    const BYTES: u64 = 4;
    fn load(ctx: &KernelCtx<'_>, va: u64, n: u64) -> Result<Vec<f32>, KernelError> {
        Ok(math::f32s_le(&load_bytes(ctx, va, n * 4)?))
    }
    fn store(ctx: &mut KernelCtx<'_>, va: u64, values: &[f32]) -> Result<(), KernelError> {
        ctx.write(va, &math::f32s_to_le(values))
    }
    fn round(f: f32) -> f32 {
        f
    }
}

impl Elem for u16 {
    const BYTES: u64 = 2;
    fn load(ctx: &KernelCtx<'_>, va: u64, n: u64) -> Result<Vec<f32>, KernelError> {
        Ok(math::widen_bf16(&load_bytes(ctx, va, n * 2)?))
    }
    fn store(ctx: &mut KernelCtx<'_>, va: u64, values: &[f32]) -> Result<(), KernelError> {
        let bytes: Vec<u8> = values.iter().flat_map(|&v| math::f32_to_bf16(v).to_le_bytes()).collect();
        ctx.write(va, &bytes)
    }
    fn round(f: f32) -> f32 {
        math::bf16_to_f32(math::f32_to_bf16(f))
    }
}

fn fault(kernel: &str, why: impl core::fmt::Display) -> KernelError {
    KernelError::Fault { xid: 13, detail: format!("{kernel}: {why}") }
}

/// Refuses a block that is not whole warps along x (at most `max` threads), one-dimensional: the kernels
/// that sum over warps would read partial sums no warp wrote.
fn require_warps(ctx: &KernelCtx<'_>, kernel: &str, max: u32) -> Result<(), KernelError> {
    let [x, y, z] = ctx.block;
    if x == 0 || !x.is_multiple_of(32) || x > max || y != 1 || z != 1 {
        return Err(fault(
            kernel,
            format_args!("launched with block {:?}; it needs [32k, 1, 1], at most {max}", ctx.block),
        ));
    }
    Ok(())
}

/// This call's rows of `rows` rows of `cols` elements (one unit per element, whole rows per call).
fn take_rows(ctx: &mut KernelCtx<'_>, rows: u64, cols: u64) -> Range<u64> {
    let cost = cols.max(1);
    let units = ctx.take(rows.saturating_mul(cost));
    units.start.div_ceil(cost)..units.end.div_ceil(cost)
}

/// `1 / sqrt(mean(v^2) + eps)`, the sum an f32 `fma` chain in element order.
pub fn inv_rms(v: &[f32], eps: f32) -> f32 {
    let ss = v.iter().fold(0f32, |s, &x| x.mul_add(x, s));
    1.0 / (ss / v.len().max(1) as f32 + eps).sqrt()
}

fn rmsnorm<T: Elem, const ADD: bool>(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let kernel = if ADD { "omega_add_rmsnorm" } else { "omega_rmsnorm" };
    rmsnorm_rows::<T, ADD>(ctx, kernel, RMSNORM_MAX_THREADS)
}

/// The warp-per-row forms compute what the block forms do (each row's sum in an order of its own, so
/// results agree to rounding); only their block limit differs.
fn rmsnorm_warp<T: Elem, const ADD: bool>(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let kernel = if ADD { "omega_add_rmsnorm_warp" } else { "omega_rmsnorm_warp" };
    rmsnorm_rows::<T, ADD>(ctx, kernel, RMSNORM_WARP_THREADS)
}

fn rmsnorm_rows<T: Elem, const ADD: bool>(
    ctx: &mut KernelCtx<'_>,
    kernel: &str,
    max_threads: u32,
) -> Result<(), KernelError> {
    let (x, h, w, y) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4), ctx.u64_at(6));
    let (rows, cols, eps) = (u64::from(ctx.word(8)), u64::from(ctx.word(9)), f32::from_bits(ctx.word(10)));
    require_warps(ctx, kernel, max_threads)?;
    let part = take_rows(ctx, rows, cols);
    if part.is_empty() || cols == 0 {
        return Ok(());
    }
    let wv = T::load(ctx, w, cols)?;
    let row_bytes = cols * T::BYTES;
    for r in part {
        let at = r * row_bytes;
        let mut v = T::load(ctx, x.wrapping_add(at), cols)?;
        if ADD {
            let hv = T::load(ctx, h.wrapping_add(at), cols)?;
            v.iter_mut().zip(&hv).for_each(|(a, b)| *a = T::round(*a + b));
            T::store(ctx, h.wrapping_add(at), &v)?;
        }
        let inv = inv_rms(&v, eps);
        let out: Vec<f32> = v.iter().zip(&wv).map(|(a, b)| a * inv * b).collect();
        T::store(ctx, y.wrapping_add(at), &out)?;
    }
    Ok(())
}

/// RoPE of one head's row `v` (`dim` values) with its token's table rows `c` and `s` (`dim / 2` each), the
/// rotate_half pairing: element `i` with `i + dim / 2`.
pub fn rotate_half(v: &[f32], c: &[f32], s: &[f32]) -> Vec<f32> {
    let half = v.len() / 2;
    let (a, b) = v.split_at(half);
    let mut out = vec![0f32; v.len()];
    for i in 0..half {
        out[i] = a[i] * c[i] - b[i] * s[i];
        out[half + i] = b[i] * c[i] + a[i] * s[i];
    }
    out
}

/// [`NORM_ROPE_WHOLE`]: the norm form's reference, after the checks of what the entry assumes (it has no
/// path for other rows: a lane past them would read and write beside the row).
fn norm_rope_whole<T: Elem>(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let name = NORM_ROPE_WHOLE[usize::from(T::BYTES == 2)];
    let v = ROPE_VEC[usize::from(T::BYTES == 2)];
    let dim = ctx.word(12);
    if dim == 0 || !dim.is_multiple_of(2 * v) || dim > NORM_ROPE_WHOLE_MAX_VECTORS * v {
        return Err(fault(
            name,
            format_args!("dim {dim}: it needs a multiple of {} up to {}", 2 * v, NORM_ROPE_WHOLE_MAX_VECTORS * v),
        ));
    }
    if let Some(va) = (0..5).map(|i| ctx.u64_at(2 * i)).find(|va| !va.is_multiple_of(16)) {
        return Err(fault(name, format_args!("pointer {va:#x} not 16-byte aligned")));
    }
    rope::<T, true>(ctx)
}

fn rope<T: Elem, const NORM: bool>(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (x, w, cs, sn, y) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4), ctx.u64_at(6), ctx.u64_at(8));
    let (tokens, heads, dim) = (u64::from(ctx.word(10)), u64::from(ctx.word(11)), u64::from(ctx.word(12)));
    let eps = f32::from_bits(ctx.word(13));
    require_warps(ctx, if NORM { "omega_norm_rope" } else { "omega_rope" }, EW_THREADS)?;
    let part = take_rows(ctx, tokens * heads, dim);
    let half = dim / 2;
    if part.is_empty() || half == 0 {
        return Ok(());
    }
    let wv = if NORM { T::load(ctx, w, dim)? } else { Vec::new() };
    for r in part {
        let t = r / heads;
        let mut v = T::load(ctx, x.wrapping_add(r * dim * T::BYTES), half * 2)?;
        if NORM {
            let inv = inv_rms(&v, eps);
            v.iter_mut().zip(&wv).for_each(|(a, b)| *a = *a * inv * b);
        }
        let c = f32::load(ctx, cs.wrapping_add(t * half * 4), half)?;
        let s = f32::load(ctx, sn.wrapping_add(t * half * 4), half)?;
        T::store(ctx, y.wrapping_add(r * dim * T::BYTES), &rotate_half(&v, &c, &s))?;
    }
    Ok(())
}

/// `silu(g) * u`, `silu(g) = g / (1 + e^-g)`, in f32.
pub fn silu_mul(g: f32, u: f32) -> f32 {
    g / (1.0 + (-g).exp()) * u
}

/// SwiGLU reading `T` and storing `Y`.
fn swiglu<T: Elem, Y: Elem>(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (g, u, y) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4));
    let (rows, cols, stride) = (u64::from(ctx.word(6)), u64::from(ctx.word(7)), u64::from(ctx.word(8)));
    let part = take_rows(ctx, rows, cols);
    if cols == 0 {
        return Ok(());
    }
    for r in part {
        let gv = T::load(ctx, g.wrapping_add(r * stride * T::BYTES), cols)?;
        let uv = T::load(ctx, u.wrapping_add(r * stride * T::BYTES), cols)?;
        let out: Vec<f32> = gv.iter().zip(&uv).map(|(&a, &b)| silu_mul(a, b)).collect();
        Y::store(ctx, y.wrapping_add(r * cols * Y::BYTES), &out)?;
    }
    Ok(())
}

fn copy16(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (src, dst, n) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4));
    // One unit per 16-byte word, a 64 KiB chunk at a time.
    const CHUNK: u64 = 4096;
    for c in take_rows(ctx, n.div_ceil(CHUNK), CHUNK) {
        let first = c * CHUNK;
        let words = CHUNK.min(n - first);
        let bytes = load_bytes(ctx, src.wrapping_add(first * 16), words * 16)?;
        ctx.write(dst.wrapping_add(first * 16), &bytes)?;
    }
    Ok(())
}

// ----- the f64 checks -----------------------------------------------------------------------------------
//
// What the tests and the GPU suite check every result against: each value in f64 from the same inputs
// (bf16 widened exactly), with the bound a correct f32 kernel stays within, argued at each function.

/// The sin and cos tables of RoPE for `positions` at head dim `dim` and base `theta`, each `[positions,
/// dim / 2]`: `angle = p * theta^(-2i/dim)` computed in f64 and rounded once to f32 (an f32 angle at
/// position 40960 would be off by whole radians' fractions), as a model builds them.
pub fn rope_tables(positions: &[u32], dim: u32, theta: f64) -> (Vec<f32>, Vec<f32>) {
    let half = (dim / 2) as usize;
    let (mut cos, mut sin) = (Vec::with_capacity(positions.len() * half), Vec::with_capacity(positions.len() * half));
    for &p in positions {
        for i in 0..half {
            let angle = f64::from(p) * theta.powf(-2.0 * i as f64 / f64::from(dim));
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    (cos, sin)
}

/// RMSNorm of each `cols`-wide row in f64, and the bound of each value: `y` is a product of `x`, `w` and
/// one `rsqrt`, so its f32 error is relative to itself: the f32 sum of squares (at most `cols * 2^-24`
/// relative), `rsqrtf` (2 ulp) and the two products; `(cols + 16) * 2^-23` leaves a factor of 2.
pub fn rmsnorm_f64(x: &[f32], w: &[f32], cols: usize, eps: f32) -> (Vec<f64>, Vec<f64>) {
    let rel = (cols as f64 + 16.0) * f64::powi(2.0, -23);
    let mut want = Vec::with_capacity(x.len());
    for row in x.chunks(cols) {
        let ss: f64 = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        let inv = 1.0 / (ss / cols as f64 + f64::from(eps)).sqrt();
        want.extend(row.iter().zip(w).map(|(&v, &g)| f64::from(v) * inv * f64::from(g)));
    }
    let tol = want.iter().map(|v| v.abs() * rel).collect();
    (want, tol)
}

/// RoPE of `[rows, dim]` (`heads` rows a token, each token's table row) in f64 from the f32 tables, and
/// each value's bound: `a c - b s` may cancel, so the bound is absolute, from the magnitudes of the two
/// products (`2^-21 * (|a c| + |b s|)`: each product and the difference rounded once, 2^-24 each, with
/// a factor of 2 left), plus `pre` times the same magnitudes for an error already in `a` and `b` (the
/// norm's, relative).
pub fn rope_f64(x: &[f64], cos: &[f32], sin: &[f32], heads: usize, dim: usize, pre: f64) -> (Vec<f64>, Vec<f64>) {
    let half = dim / 2;
    let (mut want, mut tol) = (vec![0f64; x.len()], vec![0f64; x.len()]);
    for (r, row) in x.chunks(dim).enumerate() {
        let t = r / heads;
        let (c, s) = (&cos[t * half..][..half], &sin[t * half..][..half]);
        for i in 0..half {
            let (a, b, c, s) = (row[i], row[half + i], f64::from(c[i]), f64::from(s[i]));
            want[r * dim + i] = a * c - b * s;
            want[r * dim + half + i] = b * c + a * s;
            let m = (a * c).abs() + (b * s).abs();
            let m2 = (b * c).abs() + (a * s).abs();
            tol[r * dim + i] = m * (f64::powi(2.0, -21) + pre);
            tol[r * dim + half + i] = m2 * (f64::powi(2.0, -21) + pre);
        }
    }
    (want, tol)
}

/// `silu(g) * u` in f64 and its bound: products and a quotient of positive terms, relative; the GPU's
/// `__expf` is the largest part (about 2^-21 relative for the |g| < 16 tested; `__fdividef` adds 2 ulp),
/// `2^-18` a factor of 4 over it. `__fdividef` returns 0 for a denominator past 2^126 (g below about
/// -87), where silu(g) is below 2^-119 in magnitude: `|u| 2^-119` more covers it.
pub fn swiglu_f64(g: &[f32], u: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let (want, tol) = g
        .iter()
        .zip(u)
        .map(|(&g, &u)| {
            let (g, u) = (f64::from(g), f64::from(u));
            let v = g / (1.0 + (-g).exp()) * u;
            (v, v.abs() * f64::powi(2.0, -18) + u.abs() * f64::powi(2.0, -119))
        })
        .unzip();
    (want, tol)
}

/// Widens a bound for a bf16 output: the one rounding to bf16 (2^-9 relative, taken as 2^-8).
pub fn bf16_bound(want: &[f64], tol: &mut [f64]) {
    tol.iter_mut().zip(want).for_each(|(t, w)| *t += w.abs() * f64::powi(2.0, -8));
}

/// The first value of `got` outside its bound of `want` (index, got, want, bound), or `None`. A NaN (the
/// tests' poison) is always outside. Every bound is widened by f32's smallest normal: an output is f32
/// (or bf16, of the same range), so a value below it may flush to zero whatever the kernel's care.
pub fn first_miss(got: &[f32], want: &[f64], tol: &[f64]) -> Option<(usize, f32, f64, f64)> {
    if got.len() != want.len() {
        return Some((got.len().min(want.len()), f32::NAN, f64::NAN, f64::NAN));
    }
    got.iter()
        .zip(want.iter().zip(tol))
        .enumerate()
        .find(|(_, (&g, (&w, &t)))| {
            let within = (f64::from(g) - w).abs().partial_cmp(&(t + f64::from(f32::MIN_POSITIVE)));
            !matches!(within, Some(core::cmp::Ordering::Less | core::cmp::Ordering::Equal))
        })
        .map(|(i, (&g, (&w, &t)))| (i, g, w, t))
}
