//! The `prefill` module's kernels (`kernels/cuda/prefill.cu`, the attention library's prefill): their
//! names, the launch constants their sources fix, the descriptors they read, and the host references the
//! simulator runs.
//!
//! `out[s, h, :] = softmax_j(scale · q[s, h, :] · k[j, g, :]) · v[j, g, :]` with `g = h / (q_heads /
//! kv_heads)` and j over `0..seq` (causal: `0..=s`). q, k, v are bf16 `[seq, heads, 128]` row-major, read
//! through three TMA descriptors ([`prefill_tmap`]); out is f32 or bf16 `[seq, q_heads, 128]`.
//!
//! The reference reads what the kernel reads, through the descriptors (coordinates outside a
//! descriptor's dimensions read zero, as the TMA unit fills them), and stores the rows the kernel stores.
//! Its arithmetic is the kernel's up to the order of additions and the kernel's approximate 2^x (2 ulp):
//! f32 scores, the softmax in the log2 domain, the probabilities rounded to bf16 before they multiply V
//! (the kernel's P operand is bf16), the row sum of the unrounded f32 probabilities, one division at the
//! end. The kernel subtracts a running
//! maximum and rescales; the reference the row's final maximum — equal up to f32 rounding.
//!
//! What the kernel cannot do at all faults with the reason named: another block than 384 threads, too
//! little dynamic shared memory, a grid other than `[q_heads, ceil(seq / 128), 1]` (its blocks index
//! heads and query blocks by the grid), `kv_heads` 0 or not dividing `q_heads` (a division by zero or
//! heads that read the wrong K/V), descriptors not of the form the stages are laid out for.

use omega_hal::sim::{KernelCtx, KernelError};
use omega_hal::tma::{TiledSpec, TmaElem, TmaFill, TmaInterleave, TmaL2Promotion, TmaSwizzle};
use omega_refmath as math;

use super::matmul::{fault, require_block, staged_tensor_map, take_items};
use super::HostSpec;

/// The module's name (`kernels/cuda/prefill.cu`).
pub const PREFILL: &str = "prefill";
/// `omega_attn_prefill_bf16_f32(tmap_q, tmap_k, tmap_v, out, seq, q_heads, kv_heads, causal, scale)`:
/// f32 out.
pub const PREFILL_BF16_F32: &str = "omega_attn_prefill_bf16_f32";
/// The same parameters with a bf16 out: `omega_attn_prefill_bf16`.
pub const PREFILL_BF16: &str = "omega_attn_prefill_bf16";
/// The head dimension the kernels are written for (`PREFILL_D`).
pub const PREFILL_HEAD_DIM: u32 = 128;
/// Query rows per CTA (`PREFILL_BM`) and kv rows per pipeline stage (`PREFILL_BN`).
pub const PREFILL_BLOCK: u32 = 128;
/// The block: a producer and two consumer warpgroups (`PREFILL_THREADS`).
pub const PREFILL_THREADS: u32 = 384;
/// K/V stages of the ring (`PREFILL_STAGES`).
pub const PREFILL_STAGES: u32 = 2;
/// Dynamic shared memory (`PREFILL_SMEM_BYTES`): Q and the K and V stages (32 KiB each), `3 * stages + 1`
/// mbarriers, 1 KiB of alignment slack: 164,928 bytes.
pub const PREFILL_SMEM_BYTES: u32 = (1 + 2 * PREFILL_STAGES) * 32768 + (3 * PREFILL_STAGES + 1) * 8 + 1024;
/// The box of every descriptor: 64 head-dim elements (one 128-byte swizzle span) of one head, 128 rows.
pub const PREFILL_BOX: [u32; 3] = [64, 1, PREFILL_BLOCK];
/// Multiply-adds per work unit of the reference's slices.
const MACS_PER_UNIT: u64 = 64;

/// The launch grid for `seq` rows of `q_heads` heads: `[q_heads, ceil(seq / 128), 1]`.
pub const fn prefill_grid(seq: u32, q_heads: u32) -> [u32; 3] {
    [q_heads, seq.div_ceil(PREFILL_BLOCK), 1]
}

/// The descriptor of a `[seq, heads, 128]` bf16 tensor at `va`: 3-D `{128, heads, seq}`, strides `{256,
/// heads * 256}` bytes, box [`PREFILL_BOX`], 128-byte swizzle, zero fill.
pub fn prefill_tmap(va: u64, seq: u32, heads: u32) -> TiledSpec {
    let d = u64::from(PREFILL_HEAD_DIM);
    TiledSpec {
        elem: TmaElem::Bf16,
        rank: 3,
        global_address: va,
        global_dim: [d, u64::from(heads), u64::from(seq), 0, 0],
        global_stride: [2 * d, 2 * d * u64::from(heads), 0, 0],
        box_dim: [PREFILL_BOX[0], PREFILL_BOX[1], PREFILL_BOX[2], 0, 0],
        element_stride: [1, 1, 1, 0, 0],
        interleave: TmaInterleave::None,
        swizzle: TmaSwizzle::B128,
        l2_promotion: TmaL2Promotion::None,
        fill: TmaFill::Zeros,
    }
}

/// The prefill module's kernels with their host references, by symbol name.
pub const PREFILL_HOST_SPECS: &[HostSpec] = &[
    HostSpec {
        name: PREFILL_BF16_F32,
        param_sizes: &[8, 8, 8, 8, 4, 4, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: prefill_bf16_f32,
    },
    HostSpec {
        name: PREFILL_BF16,
        param_sizes: &[8, 8, 8, 8, 4, 4, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: prefill_bf16,
    },
];

fn prefill_bf16_f32(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    prefill(ctx, PREFILL_BF16_F32, false)
}

fn prefill_bf16(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    prefill(ctx, PREFILL_BF16, true)
}

/// Row `row` of head `head` as the descriptor `s` reads it (zeros outside its dimensions), widened.
fn row_of(ctx: &KernelCtx<'_>, s: &TiledSpec, head: u64, row: u64) -> Result<Vec<f32>, KernelError> {
    let d = PREFILL_HEAD_DIM as usize;
    let mut out = vec![0f32; d];
    if head >= s.global_dim[1] || row >= s.global_dim[2] {
        return Ok(out);
    }
    let n = s.global_dim[0].min(d as u64) as usize;
    let va =
        s.global_address.wrapping_add(row.wrapping_mul(s.global_stride[1])).wrapping_add(head * s.global_stride[0]);
    let mut bytes = vec![0u8; 2 * n];
    ctx.read(va, &mut bytes)?;
    out[..n].copy_from_slice(&math::widen_bf16(&bytes));
    Ok(out)
}

/// The kernel's parameters after the descriptors.
#[derive(Clone, Copy)]
struct Args {
    out: u64,
    seq: u64,
    q_heads: u64,
    kv_heads: u64,
    causal: bool,
    scale: f32,
}

fn prefill(ctx: &mut KernelCtx<'_>, kernel: &str, bf16_out: bool) -> Result<(), KernelError> {
    let maps = [ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4)];
    let a = Args {
        out: ctx.u64_at(6),
        seq: u64::from(ctx.word(8)),
        q_heads: u64::from(ctx.word(9)),
        kv_heads: u64::from(ctx.word(10)),
        causal: ctx.word(11) != 0,
        scale: f32::from_bits(ctx.word(12)),
    };
    require_block(ctx, kernel, PREFILL_THREADS)?;
    if ctx.dynamic_shared_bytes < PREFILL_SMEM_BYTES {
        return Err(fault(
            kernel,
            format_args!(
                "out-of-range shared address: {} bytes of dynamic shared memory, its stages need {PREFILL_SMEM_BYTES}",
                ctx.dynamic_shared_bytes
            ),
        ));
    }
    if a.kv_heads == 0 || !a.q_heads.is_multiple_of(a.kv_heads) {
        return Err(fault(kernel, format_args!("{} kv heads do not divide {} q heads", a.kv_heads, a.q_heads)));
    }
    let grid = prefill_grid(a.seq as u32, a.q_heads as u32);
    if ctx.grid != grid {
        return Err(fault(kernel, format_args!("launched with grid {:?}; it is written for {grid:?}", ctx.grid)));
    }
    if a.seq == 0 {
        return Ok(());
    }
    let q = staged_tensor_map(ctx, kernel, maps[0], "tmap_q", &PREFILL_BOX)?;
    let k = staged_tensor_map(ctx, kernel, maps[1], "tmap_k", &PREFILL_BOX)?;
    let v = staged_tensor_map(ctx, kernel, maps[2], "tmap_v", &PREFILL_BOX)?;
    let blocks = u64::from(grid[1]);
    let block = u64::from(PREFILL_BLOCK);
    // A CTA's cost: its rows against the kv rows it walks, both GEMMs.
    let cost = block * a.seq * 2 * u64::from(PREFILL_HEAD_DIM) / MACS_PER_UNIT;
    let items = take_items(ctx, a.q_heads * blocks, cost);
    for item in items {
        let (head, m_block) = (item % a.q_heads, item / a.q_heads);
        let rows = m_block * block..a.seq.min((m_block + 1) * block);
        let kv_head = head / (a.q_heads / a.kv_heads);
        let kv_end = if a.causal { rows.end } else { a.seq };
        let mut ks = Vec::with_capacity(kv_end as usize * 128);
        let mut vt = vec![0f32; kv_end as usize * 128];
        for j in 0..kv_end {
            ks.extend(row_of(ctx, &k, kv_head, j)?);
            for (d, x) in row_of(ctx, &v, kv_head, j)?.into_iter().enumerate() {
                vt[d * kv_end as usize + j as usize] = x;
            }
        }
        for r in rows {
            let qr = row_of(ctx, &q, head, r)?;
            let n = if a.causal { r as usize + 1 } else { kv_end as usize };
            let o = attend_row(&qr, &ks[..n * 128], &vt, kv_end as usize, n, a.scale);
            store_row(ctx, a, head, r, &o, bf16_out)?;
        }
    }
    Ok(())
}

/// One output row: `q` against the first `n` rows of `ks` (`[n, 128]`) and of V (`vt`, `[128, ld]`
/// transposed), the kernel's arithmetic.
fn attend_row(q: &[f32], ks: &[f32], vt: &[f32], ld: usize, n: usize, scale: f32) -> Vec<f32> {
    let d = PREFILL_HEAD_DIM as usize;
    let mut s = vec![0f32; n];
    math::products(q, ks, d, false, &mut s);
    let scale_log2 = scale * core::f32::consts::LOG2_E;
    let m = s.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x * scale_log2));
    let mut l = 0f32;
    let p: Vec<f32> = s
        .iter()
        .map(|&x| {
            let e = (x * scale_log2 - m).exp2();
            l += e;
            math::bf16_to_f32(math::f32_to_bf16(e))
        })
        .collect();
    let mut o = vec![0f32; d];
    for (dd, out) in o.iter_mut().enumerate() {
        *out = math::dot(&p, &vt[dd * ld..dd * ld + n]) / l;
    }
    o
}

fn store_row(ctx: &mut KernelCtx<'_>, a: Args, head: u64, r: u64, o: &[f32], bf16: bool) -> Result<(), KernelError> {
    let elem = if bf16 { 2 } else { 4 };
    let va = a.out.wrapping_add((r * a.q_heads + head) * u64::from(PREFILL_HEAD_DIM) * elem);
    if bf16 {
        let bytes: Vec<u8> = o.iter().flat_map(|&x| math::f32_to_bf16(x).to_le_bytes()).collect();
        ctx.write(va, &bytes)
    } else {
        ctx.write(va, &math::f32s_to_le(o))
    }
}
