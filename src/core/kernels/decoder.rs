//! The `decoder` module's kernels (`kernels/cuda/decoder.cu`, the decoder library's): their names, the
//! constants their sources fix, and the host references the simulator runs.
//!
//! Each reference reads what its kernel reads and stores where it stores, so a buffer too small faults
//! where the kernel's access would. Every kernel is grid-stride, so any grid covers the work; the argmax
//! reduces over warps and refuses a block that is not whole warps of at most [`ARGMAX_THREADS`].
//! Arithmetic is the kernels' f32: the router's exponentials use the precise `exp` where the kernel uses
//! `expf` (an ulp or two apart); selections (top k, argmax) and the cast are exact.

use core::ops::Range;

use omega_hal::sim::{KernelCtx, KernelError};
use omega_refmath as math;

use super::elementwise::{self, inv_rms};
use super::HostSpec;

/// The module's name (`kernels/cuda/decoder.cu`).
pub const DECODER: &str = "decoder";
/// `omega_embed_bf16(table, ids, out, tokens, hidden, vocab)`: `out[t, :] = table[ids[t], :]`.
pub const EMBED_BF16: &str = "omega_embed_bf16";
/// `omega_cast_f32_bf16(src, dst, n)`: `dst[i] = bf16(src[i])`, nearest even.
pub const CAST_F32_BF16: &str = "omega_cast_f32_bf16";
/// `omega_router_topk(logits, topk, weights, tokens, experts, k)`: each token's top k, renormalised.
pub const ROUTER_TOPK: &str = "omega_router_topk";
/// `omega_argmax_f32(logits, out, rows, cols)`: each row's lowest index of its largest value.
pub const ARGMAX_F32: &str = "omega_argmax_f32";

/// `omega_moe_combine_bf16(y, pairs, slots, weights, res, out, tokens, top_k, n)`: `out[t, :] = res[t, :]
/// + sum_j weights[t, j] * y[slot(t, j), :]`, the grouped GEMM's rows summed back into the residual.
pub const MOE_COMBINE_BF16: &str = "omega_moe_combine_bf16";
/// `omega_moe_combine_rmsnorm_bf16(y, pairs, slots, weights, res, h, nw, x, tokens, top_k, n, eps)`: the
/// combine into `h` as [`MOE_COMBINE_BF16`] computes it, then `x[t, :] = rmsnorm(h[t, :]) * nw` as
/// `omega_rmsnorm_bf16` computes it, in one launch: a CTA a token of [`combine_norm_threads`] threads.
pub const MOE_COMBINE_RMSNORM_BF16: &str = "omega_moe_combine_rmsnorm_bf16";
/// The widest row the fused combine and norm takes (`2 * DEC_COMBINE_NORM_MAX_HALF` threads of 8 columns).
pub const COMBINE_NORM_MAX_COLS: u32 = 4096;

/// `omega_rope_step(pos, cos, sin, lens, batch, half, theta)`: a decode step's start, the RoPE tables
/// `[batch, half]` of the positions and `lens = pos + 1` ([`rope_angle_ref`]).
pub const ROPE_STEP: &str = "omega_rope_step";
/// `omega_fill_bf16_hash(out, n, base, start, center, a)`: the seeded weight generator
/// ([`hash_bf16_ref`]).
pub const FILL_BF16_HASH: &str = "omega_fill_bf16_hash";

/// `omega_l2_prefetch(a, a_bytes, b, b_bytes, lines)`: the L2 fetches two ranges ahead of the kernels
/// that read them (`lines`: 0 bulk prefetches, 1 one prefetch per 128-byte line); nothing is stored.
pub const L2_PREFETCH: &str = "omega_l2_prefetch";
/// The prefetch's block: one warp (`__launch_bounds__(32)`).
pub const PREFETCH_THREADS: u32 = 32;

/// The router's most experts a token chooses (`DEC_TOPK_MAX`).
pub const TOPK_MAX: u32 = 8;
/// The argmax block (`DEC_ARGMAX_THREADS`), also its largest.
pub const ARGMAX_THREADS: u32 = 1024;
/// The gather's and the cast's block (`__launch_bounds__(256)`).
pub const GATHER_THREADS: u32 = 256;
/// The combine's block (`DEC_COMBINE_THREADS`).
pub const COMBINE_THREADS: u32 = 256;
/// The router's block: `DEC_ROUTER_WARPS` warps, a token each.
pub const ROUTER_THREADS: u32 = 32 * ROUTER_TOKENS_PER_CTA;
/// Tokens a router block takes (`DEC_ROUTER_WARPS`).
pub const ROUTER_TOKENS_PER_CTA: u32 = 4;

/// The fused combine and norm's block at `n` columns: twice the bf16 RMSNorm's
/// ([`elementwise::rmsnorm_block`]), a thread per vector, so its sum of squares runs in the RMSNorm's order.
pub fn combine_norm_threads(n: u32) -> u32 {
    2 * elementwise::rmsnorm_block(true, n)
}

/// The module's kernels with their host references, by symbol name.
pub const DECODER_HOST_SPECS: &[HostSpec] = &[
    HostSpec {
        name: EMBED_BF16,
        param_sizes: &[8, 8, 8, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: embed,
    },
    HostSpec {
        name: CAST_F32_BF16,
        param_sizes: &[8, 8, 8],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: cast,
    },
    HostSpec {
        name: ROUTER_TOPK,
        param_sizes: &[8, 8, 8, 4, 4, 4],
        static_shared_bytes: 0,
        // The lane's logits and its choice stay in registers: no stack.
        local_bytes_per_thread: 0,
        run: router_topk,
    },
    HostSpec {
        name: ARGMAX_F32,
        param_sizes: &[8, 8, 4, 4],
        // `sv` and `si`: a float and a u32 per warp of the 256-thread block.
        static_shared_bytes: 64,
        local_bytes_per_thread: 0,
        run: argmax,
    },
    HostSpec {
        name: MOE_COMBINE_BF16,
        param_sizes: &[8, 8, 8, 8, 8, 8, 4, 4, 4],
        // `slot_of`: a u32 per choice of at most TOPK_MAX.
        static_shared_bytes: 32,
        local_bytes_per_thread: 0,
        run: combine,
    },
    HostSpec {
        name: MOE_COMBINE_RMSNORM_BF16,
        param_sizes: &[8, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 4],
        // `slot_of` (32 bytes), `red` (a float a warp: 128) and `upper` (256 packed vectors: 4096).
        static_shared_bytes: 4256,
        local_bytes_per_thread: 0,
        run: combine_norm,
    },
    HostSpec {
        name: ROPE_STEP,
        param_sizes: &[8, 8, 8, 8, 4, 4, 4],
        static_shared_bytes: 0,
        // The f64 cos and sin's argument reduction for a large angle (Payne-Hanek) keeps its words on the
        // stack: 40 bytes.
        local_bytes_per_thread: 40,
        run: rope_step,
    },
    HostSpec {
        name: L2_PREFETCH,
        param_sizes: &[8, 8, 8, 8, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: l2_prefetch,
    },
    HostSpec {
        name: FILL_BF16_HASH,
        param_sizes: &[8, 8, 8, 8, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: fill_hash,
    },
];

/// This call's rows of `rows` rows of `cols` units each (one unit per element, whole rows per call).
fn take_rows(ctx: &mut KernelCtx<'_>, rows: u64, cols: u64) -> Range<u64> {
    let cost = cols.max(1);
    let units = ctx.take(rows.saturating_mul(cost));
    units.start.div_ceil(cost)..units.end.div_ceil(cost)
}

fn load_u16s(ctx: &KernelCtx<'_>, va: u64, n: u64) -> Result<Vec<u16>, KernelError> {
    let mut bytes = vec![0u8; (n * 2) as usize];
    ctx.read(va, &mut bytes)?;
    Ok(bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect())
}

fn store_u16s(ctx: &mut KernelCtx<'_>, va: u64, v: &[u16]) -> Result<(), KernelError> {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    ctx.write(va, &bytes)
}

fn embed(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (table, ids, out) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4));
    let (tokens, hidden, vocab) = (u64::from(ctx.word(6)), u64::from(ctx.word(7)), u64::from(ctx.word(8)));
    if hidden == 0 {
        return Ok(());
    }
    for t in take_rows(ctx, tokens, hidden) {
        let id = u64::from(ctx.read_u32s(ids.wrapping_add(t * 4), 1)?[0]);
        let row = if id < vocab {
            load_u16s(ctx, table.wrapping_add(id * hidden * 2), hidden)?
        } else {
            vec![0; hidden as usize]
        };
        store_u16s(ctx, out.wrapping_add(t * hidden * 2), &row)?;
    }
    Ok(())
}

fn cast(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (src, dst, n) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4));
    const CHUNK: u64 = 4096;
    for c in take_rows(ctx, n.div_ceil(CHUNK), CHUNK) {
        let start = c * CHUNK;
        let len = CHUNK.min(n - start);
        let v = ctx.read_f32s(src.wrapping_add(start * 4), len as usize)?;
        let bits: Vec<u16> = v.iter().map(|&f| math::f32_to_bf16(f)).collect();
        store_u16s(ctx, dst.wrapping_add(start * 2), &bits)?;
    }
    Ok(())
}

/// The router's choice for one token's logits: the `k` largest in descending order (the lower expert
/// first on a tie, NaN below every number) and their softmax weights renormalised over the `k`, in the
/// kernel's f32: `k` rounds each taking the best of the experts not yet chosen, as the kernel's warp does.
pub fn router_topk_ref(row: &[f32], k: usize) -> (Vec<u32>, Vec<f32>) {
    // Whether (v, i) ranks above (w, j): the order of `dec_router_key` in kernels/cuda/decoder/select.cuh.
    let above = |(v, i): (f32, usize), (w, j): (f32, usize)| match (v.is_nan(), w.is_nan()) {
        (false, true) => true,
        (true, false) => false,
        (false, false) if v != w => v > w,
        _ => i < j,
    };
    let mut order: Vec<u32> = Vec::with_capacity(k);
    for _ in 0..k.min(row.len()) {
        let best = (0..row.len())
            .filter(|&e| !order.contains(&(e as u32)))
            .reduce(|b, e| if above((row[e], e), (row[b], b)) { e } else { b })
            .expect("fewer chosen than experts");
        order.push(best as u32);
    }
    let top = row[order[0] as usize];
    let e: Vec<f32> = order.iter().map(|&i| (row[i as usize] - top).exp()).collect();
    let sum = e.iter().fold(0f32, |s, &x| s + x);
    (order, e.iter().map(|x| x / sum).collect())
}

fn router_topk(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (logits, topk, weights) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4));
    let (tokens, experts, k) = (u64::from(ctx.word(6)), u64::from(ctx.word(7)), u64::from(ctx.word(8)));
    let part = take_rows(ctx, tokens, experts);
    // The kernel returns at once for a k it cannot hold: nothing is written.
    if k == 0 || k > u64::from(TOPK_MAX) || k > experts {
        return Ok(());
    }
    for t in part {
        let row = ctx.read_f32s(logits.wrapping_add(t * experts * 4), experts as usize)?;
        let (idx, w) = router_topk_ref(&row, k as usize);
        ctx.write_u32s(topk.wrapping_add(t * k * 4), &idx)?;
        ctx.write_f32s(weights.wrapping_add(t * k * 4), &w)?;
    }
    Ok(())
}

/// The f64 router for tests: the `k` largest logits (the lower expert first on a tie) and their
/// renormalised softmax weights, what [`router_topk_ref`]'s f32 arithmetic approximates.
pub fn router_f64(row: &[f32], k: usize) -> (Vec<u32>, Vec<f64>) {
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    order.truncate(k);
    let top = f64::from(row[order[0]]);
    let e: Vec<f64> = order.iter().map(|&i| (f64::from(row[i]) - top).exp()).collect();
    let sum: f64 = e.iter().sum();
    (order.iter().map(|&i| i as u32).collect(), e.iter().map(|x| x / sum).collect())
}

/// An argmax test's input from `seed`: `rows` rows of `cols` logits uniform in [-30, 30), each row's
/// largest value (31) placed twice, and the index the argmax must return for each row (the first of the
/// two). The same on every machine.
pub fn argmax_case(seed: u64, rows: usize, cols: usize) -> (Vec<f32>, Vec<u32>) {
    let mut logits: Vec<f32> = math::random_f32(seed, rows * cols).iter().map(|v| 30.0 * v).collect();
    let picks = math::random_f32(seed ^ 0xa5a5, 2 * rows);
    let mut want = Vec::with_capacity(rows);
    for (r, pick) in picks.chunks(2).enumerate() {
        // [-1, 1) to an index: the first anywhere in the row, the second at or after it.
        let at = |u: f32, from: usize| from + (((u + 1.0) * 0.5 * (cols - from) as f32) as usize).min(cols - from - 1);
        let first = at(pick[0], 0);
        let second = at(pick[1], first);
        let row = &mut logits[r * cols..][..cols];
        row[first] = 31.0;
        row[second] = 31.0;
        want.push(first as u32);
    }
    (logits, want)
}

/// The lowest index of `row`'s largest value, NaN never the largest (0 for a row of NaN or an empty
/// row).
pub fn argmax_ref(row: &[f32]) -> u32 {
    let mut best: Option<(f32, u32)> = None;
    for (c, &x) in row.iter().enumerate() {
        if x.is_nan() {
            continue;
        }
        if best.is_none_or(|(v, _)| x > v) {
            best = Some((x, c as u32));
        }
    }
    best.map_or(0, |(_, i)| i)
}

fn argmax(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (logits, out) = (ctx.u64_at(0), ctx.u64_at(2));
    let (rows, cols) = (u64::from(ctx.word(4)), u64::from(ctx.word(5)));
    let [x, y, z] = ctx.block;
    if x == 0 || !x.is_multiple_of(32) || x > ARGMAX_THREADS || y != 1 || z != 1 {
        return Err(KernelError::Fault {
            xid: 13,
            detail: format!(
                "{ARGMAX_F32}: launched with block {:?}; it needs [32k, 1, 1], at most {ARGMAX_THREADS}",
                ctx.block
            ),
        });
    }
    for r in take_rows(ctx, rows, cols) {
        let row = ctx.read_f32s(logits.wrapping_add(r * cols * 4), cols as usize)?;
        ctx.write_u32s(out.wrapping_add(r * 4), &[argmax_ref(&row)])?;
    }
    Ok(())
}

/// One token's combine: `res + sum_j w[j] * rows[j]` over the choices that have a row (`None`: a dropped
/// choice), the sum an f32 `fma` chain in choice order, then one bf16 rounding (as bits).
pub fn combine_row_ref(res: &[f32], w: &[f32], rows: &[Option<Vec<f32>>]) -> Vec<u16> {
    (0..res.len())
        .map(|c| {
            let acc = rows.iter().zip(w).fold(0f32, |a, (r, &wj)| r.as_ref().map_or(a, |r| wj.mul_add(r[c], a)));
            math::f32_to_bf16(res[c] + acc)
        })
        .collect()
}

fn combine(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (y, pairs, slots, weights) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4), ctx.u64_at(6));
    let (res, out) = (ctx.u64_at(8), ctx.u64_at(10));
    let (tokens, top_k, n) = (u64::from(ctx.word(12)), u64::from(ctx.word(13)), u64::from(ctx.word(14)));
    let part = take_rows(ctx, tokens, n);
    if top_k == 0 || top_k > u64::from(TOPK_MAX) || part.is_empty() {
        return Ok(());
    }
    let filled = ctx.read_u32s(slots, 1)?[0] as usize;
    let p = ctx.read_u32s(pairs, filled)?;
    for t in part {
        let bits = combine_token(ctx, [y, weights, res], &p, [t, top_k, n])?;
        store_u16s(ctx, out.wrapping_add(t * n * 2), &bits)?;
    }
    Ok(())
}

/// The choices' slots of token `t` (`None`: dropped); the last slot naming a choice wins, as the kernels'
/// stores race to one value per choice (the route kernel gives each choice one slot, so there is no race
/// in practice).
fn slots_of(pairs: &[u32], t: u64, top_k: u64) -> Vec<Option<u64>> {
    let mut slot_of = vec![None; top_k as usize];
    for (s, &pair) in pairs.iter().enumerate() {
        if u64::from(pair) / top_k == t {
            slot_of[(u64::from(pair) % top_k) as usize] = Some(s as u64);
        }
    }
    slot_of
}

/// Token `t`'s combined row (bf16 bits): its choices' rows of `y` weighted and added to its `res` row.
fn combine_token(
    ctx: &KernelCtx<'_>,
    [y, weights, res]: [u64; 3],
    pairs: &[u32],
    [t, top_k, n]: [u64; 3],
) -> Result<Vec<u16>, KernelError> {
    let w = ctx.read_f32s(weights.wrapping_add(t * top_k * 4), top_k as usize)?;
    let rows = slots_of(pairs, t, top_k)
        .iter()
        .map(|s| s.map(|s| ctx.read_f32s(y.wrapping_add(s * n * 4), n as usize)).transpose())
        .collect::<Result<Vec<_>, _>>()?;
    let r = math::bf16s_to_f32(&load_u16s(ctx, res.wrapping_add(t * n * 2), n)?);
    Ok(combine_row_ref(&r, &w, &rows))
}

fn combine_norm(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (y, pairs, slots, weights) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4), ctx.u64_at(6));
    let (res, h, nw, x) = (ctx.u64_at(8), ctx.u64_at(10), ctx.u64_at(12), ctx.u64_at(14));
    let (tokens, top_k, n) = (u64::from(ctx.word(16)), u64::from(ctx.word(17)), u64::from(ctx.word(18)));
    let eps = f32::from_bits(ctx.word(19));
    // A block other than the library's leaves vectors without a thread (fewer) or a sum of squares in
    // another order (more): the kernel's result would not be the norm's.
    let want = combine_norm_threads(n as u32);
    if ctx.block != [want, 1, 1] || !n.is_multiple_of(8) || n > u64::from(COMBINE_NORM_MAX_COLS) {
        return Err(KernelError::Fault {
            xid: 13,
            detail: format!(
                "{MOE_COMBINE_RMSNORM_BF16}: launched with block {:?} at {n} columns; it needs [{want}, 1, 1] \
                 and a multiple of 8 columns, at most {COMBINE_NORM_MAX_COLS}",
                ctx.block
            ),
        });
    }
    let part = take_rows(ctx, tokens, n);
    if top_k == 0 || top_k > u64::from(TOPK_MAX) || part.is_empty() {
        return Ok(());
    }
    let filled = ctx.read_u32s(slots, 1)?[0] as usize;
    let p = ctx.read_u32s(pairs, filled)?;
    let wv = math::bf16s_to_f32(&load_u16s(ctx, nw, n)?);
    for t in part {
        let bits = combine_token(ctx, [y, weights, res], &p, [t, top_k, n])?;
        store_u16s(ctx, h.wrapping_add(t * n * 2), &bits)?;
        let v = math::bf16s_to_f32(&bits);
        let inv = inv_rms(&v, eps);
        let out: Vec<f32> = v.iter().zip(&wv).map(|(a, b)| a * inv * b).collect();
        let out: Vec<u16> = out.iter().map(|&f| math::f32_to_bf16(f)).collect();
        store_u16s(ctx, x.wrapping_add(t * n * 2), &out)?;
    }
    Ok(())
}

/// RoPE's `(cos, sin)` of position `pos`, pair `i` of a head of `head_dim`: `theta^(-2i / head_dim) =
/// exp2(-(2i / head_dim) * log2(theta))`, the angle `pos` times that, all in f64, each rounded once to f32
/// (the kernel's formula; its f64 `exp2`, `cos` and `sin` are within an ulp or two of the host's in f64,
/// so the f32 results agree but for a value lying within that of a rounding boundary).
pub fn rope_angle_ref(pos: i32, i: u32, head_dim: u32, theta: f32) -> (f32, f32) {
    let inv = (-(f64::from(2 * i) / f64::from(head_dim)) * f64::from(theta).log2()).exp2();
    let angle = f64::from(pos) * inv;
    (angle.cos() as f32, angle.sin() as f32)
}

fn rope_step(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (pos, cos, sin, lens) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4), ctx.u64_at(6));
    let (batch, half, theta) = (u64::from(ctx.word(8)), ctx.word(9), f32::from_bits(ctx.word(10)));
    for b in take_rows(ctx, batch, u64::from(half)) {
        let p = ctx.read_u32s(pos.wrapping_add(b * 4), 1)?[0] as i32;
        let (c, s): (Vec<f32>, Vec<f32>) = (0..half).map(|i| rope_angle_ref(p, i, 2 * half, theta)).unzip();
        let at = b * u64::from(half) * 4;
        ctx.write_f32s(cos.wrapping_add(at), &c)?;
        ctx.write_f32s(sin.wrapping_add(at), &s)?;
        ctx.write_u32s(lens.wrapping_add(b * 4), &[p.wrapping_add(1) as u32])?;
    }
    Ok(())
}

/// splitmix64's step, as the generator kernel computes it (`dec_splitmix64`).
pub fn splitmix64_ref(z: u64) -> u64 {
    let z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Element `index` of the generator kernel: `bf16(center + (u * 2^-23 - 1) * a)`, `u` the top 24 bits
/// of `splitmix64(base ^ index)`, each step one f32 operation rounded to nearest.
pub fn hash_bf16_ref(base: u64, index: u64, center: f32, a: f32) -> u16 {
    let u = (splitmix64_ref(base ^ index) >> 40) as f32;
    math::f32_to_bf16(center + (u * (1.0 / 8_388_608.0) - 1.0) * a)
}

/// `omega_l2_prefetch`: a prefetch stores nothing and its results are nobody's, so the reference only
/// refuses what the GPU would: a bulk prefetch (`lines == 0`) of a range whose address or size is not a
/// multiple of 16 faults as the instruction's misaligned operand does.
fn l2_prefetch(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let lines = ctx.word(8);
    ctx.take(1);
    for (va, bytes) in [(ctx.u64_at(0), ctx.u64_at(2)), (ctx.u64_at(4), ctx.u64_at(6))] {
        if lines == 0 && bytes != 0 && !(va | bytes).is_multiple_of(16) {
            let detail = format!("{L2_PREFETCH}: a bulk prefetch of {bytes} bytes at {va:#x} is not 16-byte aligned");
            return Err(KernelError::Fault { xid: 13, detail });
        }
    }
    Ok(())
}

fn fill_hash(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (out, n, base, start) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4), ctx.u64_at(6));
    let (center, a) = (f32::from_bits(ctx.word(8)), f32::from_bits(ctx.word(9)));
    const CHUNK: u64 = 1 << 16;
    for c in take_rows(ctx, n.div_ceil(CHUNK), CHUNK) {
        let first = c * CHUNK;
        let bits: Vec<u16> =
            (first..n.min(first + CHUNK)).map(|i| hash_bf16_ref(base, start.wrapping_add(i), center, a)).collect();
        store_u16s(ctx, out.wrapping_add(first * 2), &bits)?;
    }
    Ok(())
}
