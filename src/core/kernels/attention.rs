//! The `attention` module's kernels (`kernels/cuda/attention.cu`, the attention library's): their names,
//! the launch constants their sources fix, and the host references the simulator runs.
//!
//! Layouts (every count in elements): dense q and out are `[rows][q_heads][head_dim]`, k and v
//! `[kv_len][kv_heads][head_dim]`, f32. The paged pool holds bf16: page `p` of KV head `h` has its K rows at
//! `p * page_stride + h * head_stride`, token-major (`head_dim` contiguous elements a token), and its V rows
//! `v_offset` further. Decode queries and outputs are `[batch][q_heads][head_dim]`, f32 or bf16; page
//! tables `[batch][max_pages]` and lengths `[batch]` are i32 in device memory.
//!
//! Each reference reads what its kernel reads, where the kernel reads it (the page table entry of every
//! 16-token tile, only the rows below the length, the lengths clamped and flagged as the kernel clamps
//! them), and stores exactly where the kernel stores, so a buffer too small faults where the kernel's load
//! or store would. One difference, never a fault: a decode warp also reads the table entries of its first
//! tiles before it knows the length (inside the sequence's row of `max_pages` entries, which the library
//! checks the table holds), where the reference reads only those below it. Arithmetic: the references
//! compute each row in f64 ([`omega_refmath::attend_row`]) with
//! the kernels' roundings (the decode kernel's bf16 queries and bf16 `P`), so they agree with the GPU to
//! rounding. Work is sliced by CTA ([`KernelCtx::take_blocks`]) for the decode and combine kernels and by
//! warp (one query row and head) for the dense kernel.

use omega_hal::sim::{KernelCtx, KernelError};
use omega_refmath::{self as math, KvRows};

use super::HostSpec;

/// The module's name (`kernels/cuda/attention.cu`).
pub const ATTENTION: &str = "attention";
/// `omega_gqa_attention_f32(q, k, v, out, q_heads, kv_heads, head_dim, kv_len, q_rows, causal, scale)`.
pub const GQA_F32: &str = "omega_gqa_attention_f32";
/// How a decode entry turns its splits' partials into the output (the kernels' `omega_attn::Merge`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeForm {
    /// `omega_paged_decode_bf16_d{32,64,128}(q, pool, table, lens, part_o, part_lse, status, head_stride,
    /// v_offset, page_stride, page_tokens, pages, max_pages, q_heads, group, splits, tiles_per_split,
    /// scale_log2, flags)`: the partials stay in `part_o` / `part_lse` for [`COMBINE`]'s launch.
    Split,
    /// `omega_paged_decode_cluster_bf16_d*(q, pool, table, lens, status, head_stride, v_offset,
    /// page_stride, page_tokens, pages, max_pages, q_heads, group, splits, tiles_per_split, scale_log2,
    /// flags, out, out_flags)`: the splits of a (sequence, KV head) are one cluster of `splits` CTAs (at
    /// most [`CLUSTER_MAX_SPLITS`]) merging through distributed shared memory.
    Cluster,
    /// `omega_paged_decode_ticket_bf16_d*(`the split form's arguments`, tickets, out, out_flags)`: each CTA
    /// leaves its partial as the split form does and takes a ticket on its (sequence, KV head)'s counter
    /// (`tickets[b * kv_heads + kvh]`, zero before the launch); the CTA drawing the last merges the pair's
    /// partials into `out` and zeroes the counter.
    Ticket,
}

/// Every decode entry: by form ([`DecodeForm`] order), then pipeline depth ([`DECODE_STAGES`], then
/// [`DECODE_DEEP_STAGES`]: more shared memory, one CTA an SM at head_dim 128, [`decode_smem_bytes`]), then
/// head dim ([`DECODE_HEAD_DIMS`]).
pub const PAGED_DECODE: [[[&str; 3]; 2]; 3] = [
    [
        ["omega_paged_decode_bf16_d32", "omega_paged_decode_bf16_d64", "omega_paged_decode_bf16_d128"],
        ["omega_paged_decode_deep_bf16_d32", "omega_paged_decode_deep_bf16_d64", "omega_paged_decode_deep_bf16_d128"],
    ],
    [
        [
            "omega_paged_decode_cluster_bf16_d32",
            "omega_paged_decode_cluster_bf16_d64",
            "omega_paged_decode_cluster_bf16_d128",
        ],
        [
            "omega_paged_decode_cluster_deep_bf16_d32",
            "omega_paged_decode_cluster_deep_bf16_d64",
            "omega_paged_decode_cluster_deep_bf16_d128",
        ],
    ],
    [
        [
            "omega_paged_decode_ticket_bf16_d32",
            "omega_paged_decode_ticket_bf16_d64",
            "omega_paged_decode_ticket_bf16_d128",
        ],
        [
            "omega_paged_decode_ticket_deep_bf16_d32",
            "omega_paged_decode_ticket_deep_bf16_d64",
            "omega_paged_decode_ticket_deep_bf16_d128",
        ],
    ],
];

/// The entry of `form` with `stages` pipeline stages ([`DECODE_STAGES`] or [`DECODE_DEEP_STAGES`]) for
/// head dim `head_dim` (one of [`DECODE_HEAD_DIMS`]), and its index in [`PAGED_DECODE`] flattened.
pub const fn decode_entry(form: DecodeForm, stages: u32, head_dim: u32) -> (&'static str, usize) {
    let dim = match head_dim {
        32 => 0,
        64 => 1,
        _ => 2,
    };
    let depth = (stages == DECODE_DEEP_STAGES) as usize;
    (PAGED_DECODE[form as usize][depth][dim], (form as usize * 2 + depth) * 3 + dim)
}
/// Pipeline stages a warp of the decode kernels (`DECODE_STAGES`), and of their `_deep` forms
/// (`DECODE_DEEP_STAGES`).
pub const DECODE_STAGES: u32 = 2;
/// See [`DECODE_STAGES`].
pub const DECODE_DEEP_STAGES: u32 = 4;
/// The most splits (CTAs of a cluster) the cluster form merges: Hopper's portable cluster size.
pub const CLUSTER_MAX_SPLITS: u32 = 8;
/// The head dims the decode entries are compiled for, in [`PAGED_DECODE`] order.
pub const DECODE_HEAD_DIMS: [u32; 3] = [32, 64, 128];
/// `omega_attn_combine(part_o, part_lse, out, head_dim, splits, q_heads, flags)`.
pub const COMBINE: &str = "omega_attn_combine";
/// `omega_kv_append_bf16(pool, k_new, v_new, table, lens, status, head_stride, v_offset, page_stride,
/// page_tokens, pages, max_pages, kv_heads, head_dim, flags)`.
pub const KV_APPEND: &str = "omega_kv_append_bf16";
/// `omega_qkv_rope_append_bf16(qkv, q_norm, k_norm, cos, sin, q_out, pool, table, lens, status, head_stride,
/// v_offset, page_stride, page_tokens, pages, max_pages, q_heads, kv_heads, head_dim, flags, eps)`: a fused
/// QKV row's q and k heads QK-normed and rotated, q stored, k and v appended as [`KV_APPEND`] appends.
pub const QKV_APPEND: &str = "omega_qkv_rope_append_bf16";
/// The fused append's block (`QKV_APPEND_THREADS`).
pub const QKV_APPEND_THREADS: u32 = 1024;

/// `omega_attn_copy16(src, dst, n16)`: a grid-stride copy of 16-byte chunks, the benchmark's bandwidth
/// denominator.
pub const COPY16: &str = "omega_attn_copy16";
/// The copy's block (`COPY_THREADS`).
pub const COPY_THREADS: u32 = 256;

/// The dense kernel's block (`GQA_THREADS`): 4 warps, one (row, head) each.
pub const GQA_THREADS: u32 = 128;
/// The dense kernel's largest head_dim (`GQA_MAX_CHUNKS` * 32).
pub const GQA_MAX_HEAD_DIM: u32 = 256;
/// The decode kernel's block (`DECODE_THREADS`).
pub const DECODE_THREADS: u32 = 128;
/// Warps of a decode CTA (`DECODE_WARPS`).
pub const DECODE_WARPS: u32 = 4;
/// Tokens of one decode tile (`DECODE_TILE`): page sizes are multiples of it.
pub const DECODE_TILE: u32 = 16;
/// Query heads one KV head may serve in the decode kernel: the MMA's 16 rows.
pub const DECODE_MAX_GROUP: u32 = 16;
/// The combine's block (`COMBINE_THREADS`) and its most splits (`COMBINE_MAX_SPLITS`).
pub const COMBINE_THREADS: u32 = 256;
/// The most splits the combine merges.
pub const COMBINE_MAX_SPLITS: u32 = 256;
/// The append kernel's block (`APPEND_THREADS`).
pub const APPEND_THREADS: u32 = 128;

/// Decode flags: q is bf16 (`ATTN_Q_BF16`).
pub const FLAG_Q_BF16: u32 = 1;
/// Combine flags: out is bf16 (`ATTN_OUT_BF16`).
pub const FLAG_OUT_BF16: u32 = 1;
/// Append flags: k_new and v_new are f32 (`ATTN_APPEND_F32`).
pub const APPEND_F32: u32 = 1;
/// Append flags: store `lens[b] + 1` after the append (`ATTN_APPEND_ADVANCE`).
pub const APPEND_ADVANCE: u32 = 2;

/// Status bit: a page index outside the pool (its tile skipped, its append not written).
pub const STATUS_BAD_PAGE: u32 = 1;
/// Status bit: a length past the table's capacity (clamped; an append past it not written).
pub const STATUS_LONG: u32 = 2;
/// Status bit: a negative length (taken as 0; its append not written).
pub const STATUS_NEGATIVE: u32 = 4;

/// The decode kernel's dynamic shared memory for `head_dim` and `stages` (`DecodeSmem<D, STAGES>::BYTES`):
/// the stages of a 16-row K and V tile (rows padded by 8 elements) per warp, or the merge's accumulators if
/// larger.
pub const fn decode_smem_bytes(head_dim: u32, stages: u32) -> u32 {
    let pipe = DECODE_WARPS * stages * 2 * DECODE_TILE * (head_dim + 8) * 2;
    let merge = DECODE_WARPS * 16 * (head_dim + 2) * 4;
    if pipe > merge {
        pipe
    } else {
        merge
    }
}

/// The module's kernels with their host references, by symbol name.
pub const ATTENTION_HOST_SPECS: &[HostSpec] = &[
    HostSpec {
        name: GQA_F32,
        param_sizes: &[8, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: gqa_f32,
    },
    decode_spec::<32, DECODE_STAGES>(DecodeForm::Split),
    decode_spec::<64, DECODE_STAGES>(DecodeForm::Split),
    decode_spec::<128, DECODE_STAGES>(DecodeForm::Split),
    decode_spec::<32, DECODE_DEEP_STAGES>(DecodeForm::Split),
    decode_spec::<64, DECODE_DEEP_STAGES>(DecodeForm::Split),
    decode_spec::<128, DECODE_DEEP_STAGES>(DecodeForm::Split),
    decode_spec::<32, DECODE_STAGES>(DecodeForm::Cluster),
    decode_spec::<64, DECODE_STAGES>(DecodeForm::Cluster),
    decode_spec::<128, DECODE_STAGES>(DecodeForm::Cluster),
    decode_spec::<32, DECODE_DEEP_STAGES>(DecodeForm::Cluster),
    decode_spec::<64, DECODE_DEEP_STAGES>(DecodeForm::Cluster),
    decode_spec::<128, DECODE_DEEP_STAGES>(DecodeForm::Cluster),
    decode_spec::<32, DECODE_STAGES>(DecodeForm::Ticket),
    decode_spec::<64, DECODE_STAGES>(DecodeForm::Ticket),
    decode_spec::<128, DECODE_STAGES>(DecodeForm::Ticket),
    decode_spec::<32, DECODE_DEEP_STAGES>(DecodeForm::Ticket),
    decode_spec::<64, DECODE_DEEP_STAGES>(DecodeForm::Ticket),
    decode_spec::<128, DECODE_DEEP_STAGES>(DecodeForm::Ticket),
    HostSpec {
        name: COMBINE,
        param_sizes: &[8, 8, 8, 4, 4, 4, 4],
        // The split weights, one word a warp for the reduction, and a float4 a thread for the teams.
        static_shared_bytes: COMBINE_MAX_SPLITS * 4 + COMBINE_THREADS / 32 * 4 + COMBINE_THREADS * 16,
        local_bytes_per_thread: 0,
        run: combine,
    },
    HostSpec { name: COPY16, param_sizes: &[8, 8, 8], static_shared_bytes: 0, local_bytes_per_thread: 0, run: copy16 },
    HostSpec {
        name: KV_APPEND,
        param_sizes: &[8, 8, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: kv_append,
    },
    HostSpec {
        name: QKV_APPEND,
        param_sizes: &[8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: qkv_append,
    },
];

/// The decode entry of `form` for head dim `D` with `S` stages, and its host reference.
const fn decode_spec<const D: u32, const S: u32>(form: DecodeForm) -> HostSpec {
    const SPLIT: &[u32] = &[8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4, 4];
    HostSpec {
        name: decode_entry(form, S, D).0,
        param_sizes: match form {
            DecodeForm::Split => SPLIT,
            DecodeForm::Cluster => &[8, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4, 4, 8, 4],
            DecodeForm::Ticket => &[8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4, 4, 8, 8, 4],
        },
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: match form {
            DecodeForm::Split => paged_decode::<D, S>,
            DecodeForm::Cluster => paged_decode_cluster::<D, S>,
            DecodeForm::Ticket => paged_decode_ticket::<D, S>,
        },
    }
}

fn fault(detail: String) -> KernelError {
    KernelError::Fault { xid: 13, detail }
}

/// `n` bf16 values at `va`, widened.
fn read_bf16s(ctx: &KernelCtx<'_>, va: u64, n: usize) -> Result<Vec<f32>, KernelError> {
    let mut bytes = vec![0u8; n * 2];
    ctx.read(va, &mut bytes)?;
    Ok(math::widen_bf16(&bytes))
}

fn read_i32(ctx: &KernelCtx<'_>, va: u64) -> Result<i32, KernelError> {
    Ok(ctx.read_u32s(va, 1)?[0] as i32)
}

/// ORs `bits` into the status word at `va` (the kernels' atomicOr).
fn flag(ctx: &mut KernelCtx<'_>, va: u64, bits: u32) -> Result<(), KernelError> {
    let w = ctx.read_u32s(va, 1)?[0];
    ctx.write_u32s(va, &[w | bits])
}

fn check_block(ctx: &KernelCtx<'_>, name: &str, threads: u32) -> Result<(), KernelError> {
    if ctx.block != [threads, 1, 1] {
        return Err(fault(format!("{name}: written for blocks of [{threads}, 1, 1], launched with {:?}", ctx.block)));
    }
    Ok(())
}

fn gqa_f32(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    check_block(ctx, GQA_F32, GQA_THREADS)?;
    let (q, k, v, out) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4), ctx.u64_at(6));
    let [q_heads, kv_heads, d, kv_len, q_rows, causal] = core::array::from_fn(|i| ctx.word(8 + i));
    let scale = f32::from_bits(ctx.word(14));
    if q_heads == 0 || kv_heads == 0 || q_heads % kv_heads != 0 || d > GQA_MAX_HEAD_DIM || q_rows > kv_len {
        return Err(fault(format!("{GQA_F32}: heads {q_heads}/{kv_heads}, head_dim {d}, rows {q_rows} of {kv_len}")));
    }
    let warps = u64::from(ctx.grid[0]) * u64::from(GQA_THREADS / 32);
    let total = (u64::from(q_rows) * u64::from(q_heads)).min(warps);
    let part = ctx.take(total);
    if part.is_empty() {
        return Ok(());
    }
    let (d, row_elems) = (d as usize, kv_heads as usize * d as usize);
    let group = q_heads / kv_heads;
    // Every warp of the slice reads keys 0 .. its limit; the slice reads all kv_len rows once.
    let kf = ctx.read_f32s(k, kv_len as usize * row_elems)?;
    let vf = ctx.read_f32s(v, kv_len as usize * row_elems)?;
    let qf = ctx.read_f32s(q.wrapping_add(part.start * d as u64 * 4), (part.end - part.start) as usize * d)?;
    let mut outs = vec![0f32; qf.len()];
    let mut row_out = vec![0f64; d];
    for (i, w) in part.clone().enumerate() {
        let (row, h) = ((w / u64::from(q_heads)) as u32, (w % u64::from(q_heads)) as u32);
        let pos = kv_len - q_rows + row;
        let n = if causal != 0 { pos + 1 } else { kv_len } as usize;
        let kv = KvRows { k: &kf, v: &vf, stride: row_elems, offset: (h / group) as usize * d, n };
        // expf(s - m) is 2^(log2(e) (s - m)): the same softmax in base 2.
        let scale_log2 = f64::from(scale) * core::f64::consts::LOG2_E;
        math::attend_row(&qf[i * d..(i + 1) * d], kv, scale_log2, false, &mut row_out);
        for (o, x) in outs[i * d..(i + 1) * d].iter_mut().zip(&row_out) {
            *o = *x as f32;
        }
    }
    ctx.write_f32s(out.wrapping_add(part.start * d as u64 * 4), &outs)
}

/// The decode kernels' parameters.
struct Decode {
    q: u64,
    pool: u64,
    table: u64,
    lens: u64,
    part_o: u64,
    part_lse: u64,
    status: u64,
    head_stride: u64,
    v_offset: u64,
    page_stride: u64,
    page_tokens: u32,
    pages: u32,
    max_pages: u32,
    q_heads: u32,
    group: u32,
    splits: u32,
    tiles_per_split: u32,
    scale_log2: f32,
    flags: u32,
}

impl Decode {
    fn of(ctx: &KernelCtx<'_>) -> Decode {
        Decode {
            q: ctx.u64_at(0),
            pool: ctx.u64_at(2),
            table: ctx.u64_at(4),
            lens: ctx.u64_at(6),
            part_o: ctx.u64_at(8),
            part_lse: ctx.u64_at(10),
            status: ctx.u64_at(12),
            head_stride: ctx.u64_at(14),
            v_offset: ctx.u64_at(16),
            page_stride: ctx.u64_at(18),
            page_tokens: ctx.word(20),
            pages: ctx.word(21),
            max_pages: ctx.word(22),
            q_heads: ctx.word(23),
            group: ctx.word(24),
            splits: ctx.word(25),
            tiles_per_split: ctx.word(26),
            scale_log2: f32::from_bits(ctx.word(27)),
            flags: ctx.word(28),
        }
    }
}

/// The length of sequence `b` as the kernels clamp it, with the clamp flagged when `report`.
fn clamped_len(
    ctx: &mut KernelCtx<'_>,
    lens: u64,
    status: u64,
    b: u32,
    cap: u64,
    report: bool,
) -> Result<u32, KernelError> {
    let len = read_i32(ctx, lens.wrapping_add(u64::from(b) * 4))?;
    let cap = cap.min(i32::MAX as u64) as u32;
    let (len, bits) = if len < 0 {
        (0, STATUS_NEGATIVE)
    } else if len as u32 > cap {
        (cap, STATUS_LONG)
    } else {
        (len as u32, 0)
    };
    if bits != 0 && report {
        flag(ctx, status, bits)?;
    }
    Ok(len)
}

/// The decode kernels' checks of their launch and arguments, for entry `name`.
fn check_decode(ctx: &KernelCtx<'_>, name: &str, a: &Decode, head_dim: u32, stages: u32) -> Result<(), KernelError> {
    check_block(ctx, name, DECODE_THREADS)?;
    let smem = decode_smem_bytes(head_dim, stages);
    if ctx.dynamic_shared_bytes < smem {
        return Err(fault(format!("{name}: needs {smem} bytes of dynamic shared memory")));
    }
    if a.page_tokens == 0 || !a.page_tokens.is_multiple_of(DECODE_TILE) || a.group == 0 || a.group > DECODE_MAX_GROUP {
        return Err(fault(format!("{name}: page of {} tokens, group of {}", a.page_tokens, a.group)));
    }
    Ok(())
}

/// How a decode CTA finds its tiles: the planned `tiles_per_split` (the split form), or its share of the
/// sequence's own tiles among the splits (the cluster form).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slices {
    Planned,
    OfLength,
}

/// Split `split` of KV head `kvh` of sequence `b`: each of the group's query rows' normalized partial
/// output (`D` values) and log2-sum-exp (-inf for no tokens), as the decode CTA computes them.
fn split_partials<const D: u32>(
    ctx: &mut KernelCtx<'_>,
    a: &Decode,
    slices: Slices,
    [split, kvh, b]: [u32; 3],
) -> Result<Vec<(Vec<f32>, f32)>, KernelError> {
    let d = D as usize;
    let cap = u64::from(a.max_pages) * u64::from(a.page_tokens);
    let len = clamped_len(ctx, a.lens, a.status, b, cap, split == 0 && kvh == 0)?;
    let tiles = len.div_ceil(DECODE_TILE);
    let per_split = match slices {
        Slices::Planned => a.tiles_per_split,
        Slices::OfLength => tiles.div_ceil(a.splits.max(1)),
    };
    let first = split.saturating_mul(per_split);
    let last = tiles.min(first.saturating_add(per_split));
    // The split's valid rows, gathered as the warps' tiles read them.
    let (mut kf, mut vf) = (Vec::new(), Vec::new());
    for tile in first..last {
        let token0 = tile * DECODE_TILE;
        let entry =
            a.table.wrapping_add((u64::from(b) * u64::from(a.max_pages) + u64::from(token0 / a.page_tokens)) * 4);
        let page = read_i32(ctx, entry)?;
        if page < 0 || page as u32 >= a.pages {
            flag(ctx, a.status, STATUS_BAD_PAGE)?;
            continue;
        }
        let rows = (len - token0).min(DECODE_TILE) as usize;
        let at = u64::from(page as u32) * a.page_stride
            + u64::from(kvh) * a.head_stride
            + u64::from(token0 % a.page_tokens) * u64::from(D);
        let kva = a.pool.wrapping_add(at * 2);
        kf.extend(read_bf16s(ctx, kva, rows * d)?);
        vf.extend(read_bf16s(ctx, kva.wrapping_add(a.v_offset * 2), rows * d)?);
    }
    let n = kf.len() / d;
    (0..a.group)
        .map(|r| {
            let row = u64::from(b) * u64::from(a.q_heads) + u64::from(kvh * a.group + r);
            let q = if a.flags & FLAG_Q_BF16 != 0 {
                read_bf16s(ctx, a.q.wrapping_add(row * u64::from(D) * 2), d)?
            } else {
                ctx.read_f32s(a.q.wrapping_add(row * u64::from(D) * 4), d)?
            };
            // The kernel's A fragments: q rounded to bf16.
            let q: Vec<f32> = q.iter().map(|&x| math::bf16_to_f32(math::f32_to_bf16(x))).collect();
            let mut o = vec![0f64; d];
            let kv = KvRows { k: &kf, v: &vf, stride: d, offset: 0, n };
            let (m, l) = math::attend_row(&q, kv, f64::from(a.scale_log2), true, &mut o);
            let lse = if l > 0.0 { (m + l.log2()) as f32 } else { f32::NEG_INFINITY };
            Ok((o.iter().map(|&x| x as f32).collect(), lse))
        })
        .collect()
}

/// The split form's CTA `[split, kvh, b]`: its partials, stored where the kernel stores them.
fn store_partials<const D: u32>(
    ctx: &mut KernelCtx<'_>,
    a: &Decode,
    [split, kvh, b]: [u32; 3],
) -> Result<(), KernelError> {
    for (r, (o, lse)) in split_partials::<D>(ctx, a, Slices::Planned, [split, kvh, b])?.into_iter().enumerate() {
        let row = u64::from(b) * u64::from(a.q_heads) + u64::from(kvh * a.group) + r as u64;
        let part = row * u64::from(a.splits) + u64::from(split);
        ctx.write_f32s(a.part_o.wrapping_add(part * u64::from(D) * 4), &o)?;
        ctx.write_f32s(a.part_lse.wrapping_add(part * 4), &[lse])?;
    }
    Ok(())
}

fn paged_decode<const D: u32, const S: u32>(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let name = decode_entry(DecodeForm::Split, S, D).0;
    let a = Decode::of(ctx);
    check_decode(ctx, name, &a, D, S)?;
    let shape = ctx.shape();
    for blk in ctx.take_blocks() {
        store_partials::<D>(ctx, &a, shape.block_id(blk))?;
    }
    Ok(())
}

/// The ticket form: each CTA stores its split's partials as the split form does, then adds one to its
/// (sequence, KV head)'s counter; the CTA that finds `splits - 1` there reads the pair's partials back,
/// merges them as the combine does ([`merge_splits`]) and zeroes the counter. The counter moves as the
/// kernel's atomicAdd moves it, so one left non-zero picks the wrong CTA here as on the GPU.
fn paged_decode_ticket<const D: u32, const S: u32>(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let name = decode_entry(DecodeForm::Ticket, S, D).0;
    let a = Decode::of(ctx);
    let (tickets, out, out_flags) = (ctx.u64_at(30), ctx.u64_at(32), ctx.word(34));
    check_decode(ctx, name, &a, D, S)?;
    let shape = ctx.shape();
    if shape.grid[0] != a.splits || a.splits > COMBINE_MAX_SPLITS {
        return Err(fault(format!(
            "{name}: {} splits in a grid of {:?}; the grid's x must be the splits, at most {COMBINE_MAX_SPLITS}",
            a.splits, shape.grid
        )));
    }
    let (d, splits) = (D as usize, a.splits as usize);
    for blk in ctx.take_blocks() {
        let [split, kvh, b] = shape.block_id(blk);
        store_partials::<D>(ctx, &a, [split, kvh, b])?;
        let counter = tickets.wrapping_add((u64::from(b) * u64::from(shape.grid[1]) + u64::from(kvh)) * 4);
        let drawn = ctx.read_u32s(counter, 1)?[0];
        if drawn != a.splits - 1 {
            ctx.write_u32s(counter, &[drawn.wrapping_add(1)])?;
            continue;
        }
        ctx.write_u32s(counter, &[0])?;
        for r in 0..a.group {
            let row = u64::from(b) * u64::from(a.q_heads) + u64::from(kvh * a.group + r);
            let lse = ctx.read_f32s(a.part_lse.wrapping_add(row * u64::from(a.splits) * 4), splits)?;
            let o = ctx.read_f32s(a.part_o.wrapping_add(row * u64::from(a.splits) * u64::from(D) * 4), splits * d)?;
            store_row(ctx, out, row * u64::from(D), &merge_splits(&lse, &o, d), out_flags)?;
        }
    }
    Ok(())
}

/// The cluster form: the CTA of split 0 (cluster rank 0) computes every split's partials of its
/// (sequence, KV head), each split its share of the sequence's own tiles, and merges them as the combine
/// does ([`merge_splits`]); the other ranks' work is in it. The grid must be whole clusters of `splits`
/// CTAs along x, as the kernel's merge reads ranks 0 .. gridDim.x.
fn paged_decode_cluster<const D: u32, const S: u32>(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let name = decode_entry(DecodeForm::Cluster, S, D).0;
    let a = Decode {
        q: ctx.u64_at(0),
        pool: ctx.u64_at(2),
        table: ctx.u64_at(4),
        lens: ctx.u64_at(6),
        part_o: 0,
        part_lse: 0,
        status: ctx.u64_at(8),
        head_stride: ctx.u64_at(10),
        v_offset: ctx.u64_at(12),
        page_stride: ctx.u64_at(14),
        page_tokens: ctx.word(16),
        pages: ctx.word(17),
        max_pages: ctx.word(18),
        q_heads: ctx.word(19),
        group: ctx.word(20),
        splits: ctx.word(21),
        tiles_per_split: ctx.word(22),
        scale_log2: f32::from_bits(ctx.word(23)),
        flags: ctx.word(24),
    };
    let (out, out_flags) = (ctx.u64_at(26), ctx.word(28));
    check_decode(ctx, name, &a, D, S)?;
    let shape = ctx.shape();
    if shape.grid[0] != a.splits || ctx.cluster != [a.splits, 1, 1] || a.splits > CLUSTER_MAX_SPLITS {
        return Err(fault(format!(
            "{name}: {} splits in a grid of {:?} and clusters of {:?}; it needs clusters of [splits, 1, 1], the \
             grid's x, at most {CLUSTER_MAX_SPLITS}",
            a.splits, shape.grid, ctx.cluster
        )));
    }
    let d = D as usize;
    for blk in ctx.take_blocks() {
        let [rank, kvh, b] = shape.block_id(blk);
        if rank != 0 {
            continue;
        }
        let parts = (0..a.splits)
            .map(|split| split_partials::<D>(ctx, &a, Slices::OfLength, [split, kvh, b]))
            .collect::<Result<Vec<_>, _>>()?;
        for r in 0..a.group as usize {
            let lse: Vec<f32> = parts.iter().map(|p| p[r].1).collect();
            let o: Vec<f32> = parts.iter().flat_map(|p| p[r].0.iter().copied()).collect();
            let row = u64::from(b) * u64::from(a.q_heads) + u64::from(kvh * a.group) + r as u64;
            store_row(ctx, out, row * u64::from(D), &merge_splits(&lse, &o, d), out_flags)?;
        }
    }
    Ok(())
}

/// The log-sum-exp merge of one row's splits (`lse[s]`, partial `o[s * d ..][..d]`): `sum_s 2^(lse_s - M)
/// o_s / sum_s 2^(lse_s - M)`, zeros when no split has a token.
fn merge_splits(lse: &[f32], parts: &[f32], d: usize) -> Vec<f32> {
    let m = lse.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let w: Vec<f32> = lse.iter().map(|&x| if m == f32::NEG_INFINITY { 0.0 } else { (x - m).exp2() }).collect();
    let total: f32 = w.iter().sum();
    (0..d)
        .map(|j| {
            let acc: f32 = w.iter().enumerate().map(|(s, ws)| ws * parts[s * d + j]).sum();
            if total > 0.0 {
                acc / total
            } else {
                0.0
            }
        })
        .collect()
}

/// One output row at element `at`, f32 or bf16 by `flags`.
fn store_row(ctx: &mut KernelCtx<'_>, out: u64, at: u64, vals: &[f32], flags: u32) -> Result<(), KernelError> {
    if flags & FLAG_OUT_BF16 != 0 {
        let bytes: Vec<u8> = vals.iter().flat_map(|&x| math::f32_to_bf16(x).to_le_bytes()).collect();
        ctx.write(out.wrapping_add(at * 2), &bytes)
    } else {
        ctx.write_f32s(out.wrapping_add(at * 4), vals)
    }
}

fn combine(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    check_block(ctx, COMBINE, COMBINE_THREADS)?;
    let (part_o, part_lse, out) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4));
    let [head_dim, splits, q_heads, flags] = core::array::from_fn(|i| ctx.word(6 + i));
    if splits > COMBINE_MAX_SPLITS {
        return Err(fault(format!("{COMBINE}: {splits} splits, at most {COMBINE_MAX_SPLITS}")));
    }
    // The kernel reads a row as float4s, one team of head_dim / 4 threads a split.
    if head_dim == 0 || !head_dim.is_multiple_of(4) || head_dim > 4 * COMBINE_THREADS {
        return Err(fault(format!("{COMBINE}: head_dim {head_dim}, a multiple of 4 up to {}", 4 * COMBINE_THREADS)));
    }
    let shape = ctx.shape();
    let d = head_dim as usize;
    for blk in ctx.take_blocks() {
        let [h, b, _] = shape.block_id(blk);
        let row = u64::from(b) * u64::from(q_heads) + u64::from(h);
        let lse = ctx.read_f32s(part_lse.wrapping_add(row * u64::from(splits) * 4), splits as usize)?;
        let parts =
            ctx.read_f32s(part_o.wrapping_add(row * u64::from(splits) * u64::from(head_dim) * 4), splits as usize * d)?;
        store_row(ctx, out, row * u64::from(head_dim), &merge_splits(&lse, &parts, d), flags)?;
    }
    Ok(())
}

fn kv_append(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    check_block(ctx, KV_APPEND, APPEND_THREADS)?;
    let [pool, k_new, v_new, table, lens, status] = core::array::from_fn(|i| ctx.u64_at(2 * i));
    let (head_stride, v_offset, page_stride) = (ctx.u64_at(12), ctx.u64_at(14), ctx.u64_at(16));
    let [page_tokens, pages, max_pages, kv_heads, head_dim, flags] = core::array::from_fn(|i| ctx.word(18 + i));
    if page_tokens == 0 || head_dim % 8 != 0 {
        return Err(fault(format!("{KV_APPEND}: page of {page_tokens} tokens, head_dim {head_dim}")));
    }
    let shape = ctx.shape();
    let d = head_dim as usize;
    for blk in ctx.take_blocks() {
        let b = shape.block_id(blk)[0];
        let Some((len, page)) = append_slot(ctx, b, [table, lens, status], [page_tokens, pages, max_pages])? else {
            continue;
        };
        let pos = len as u32;
        for h in 0..kv_heads {
            let src = (u64::from(b) * u64::from(kv_heads) + u64::from(h)) * u64::from(head_dim);
            let (kr, vr) = if flags & APPEND_F32 != 0 {
                let k = ctx.read_f32s(k_new.wrapping_add(src * 4), d)?;
                let v = ctx.read_f32s(v_new.wrapping_add(src * 4), d)?;
                let round =
                    |x: Vec<f32>| -> Vec<u8> { x.iter().flat_map(|&f| math::f32_to_bf16(f).to_le_bytes()).collect() };
                (round(k), round(v))
            } else {
                let (mut k, mut v) = (vec![0u8; d * 2], vec![0u8; d * 2]);
                ctx.read(k_new.wrapping_add(src * 2), &mut k)?;
                ctx.read(v_new.wrapping_add(src * 2), &mut v)?;
                (k, v)
            };
            let dst = u64::from(page) * page_stride
                + u64::from(h) * head_stride
                + u64::from(pos % page_tokens) * u64::from(head_dim);
            ctx.write(pool.wrapping_add(dst * 2), &kr)?;
            ctx.write(pool.wrapping_add((dst + v_offset) * 2), &vr)?;
        }
        if flags & APPEND_ADVANCE != 0 {
            ctx.write_u32s(lens.wrapping_add(u64::from(b) * 4), &[(len + 1) as u32])?;
        }
    }
    Ok(())
}

/// Where sequence `b`'s appended token goes, as the append kernels find it: its length (the position) and
/// page, or `None` with the status flagged for a length or a page the tables cannot hold.
fn append_slot(
    ctx: &mut KernelCtx<'_>,
    b: u32,
    [table, lens, status]: [u64; 3],
    [page_tokens, pages, max_pages]: [u32; 3],
) -> Result<Option<(i32, u32)>, KernelError> {
    let len = read_i32(ctx, lens.wrapping_add(u64::from(b) * 4))?;
    let cap = u64::from(max_pages) * u64::from(page_tokens);
    if len < 0 || len as u64 >= cap {
        flag(ctx, status, if len < 0 { STATUS_NEGATIVE } else { STATUS_LONG })?;
        return Ok(None);
    }
    let entry = table.wrapping_add((u64::from(b) * u64::from(max_pages) + u64::from(len as u32 / page_tokens)) * 4);
    let page = read_i32(ctx, entry)?;
    if page < 0 || page as u32 >= pages {
        flag(ctx, status, STATUS_BAD_PAGE)?;
        return Ok(None);
    }
    Ok(Some((len, page as u32)))
}

fn qkv_append(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    check_block(ctx, QKV_APPEND, QKV_APPEND_THREADS)?;
    let [qkv, q_norm, k_norm, cs, sn, q_out, pool, table, lens, status] = core::array::from_fn(|i| ctx.u64_at(2 * i));
    let (head_stride, v_offset, page_stride) = (ctx.u64_at(20), ctx.u64_at(22), ctx.u64_at(24));
    let [page_tokens, pages, max_pages, q_heads, kv_heads, head_dim, flags] =
        core::array::from_fn(|i| ctx.word(26 + i));
    let eps = f32::from_bits(ctx.word(33));
    if page_tokens == 0 || head_dim == 0 || head_dim % 2 != 0 {
        return Err(fault(format!("{QKV_APPEND}: page of {page_tokens} tokens, head_dim {head_dim}")));
    }
    let (shape, d, half) = (ctx.shape(), u64::from(head_dim), u64::from(head_dim / 2));
    let heads = u64::from(q_heads + 2 * kv_heads);
    let (wq, wk) = (read_bf16s(ctx, q_norm, d as usize)?, read_bf16s(ctx, k_norm, d as usize)?);
    for blk in ctx.take_blocks() {
        let b = shape.block_id(blk)[0];
        let Some((len, page)) = append_slot(ctx, b, [table, lens, status], [page_tokens, pages, max_pages])? else {
            continue;
        };
        let slot = u64::from(page) * page_stride + u64::from(len as u32 % page_tokens) * d;
        let bq = u64::from(b);
        let c = ctx.read_f32s(cs.wrapping_add(bq * half * 4), half as usize)?;
        let s = ctx.read_f32s(sn.wrapping_add(bq * half * 4), half as usize)?;
        for h in 0..heads {
            let src = qkv.wrapping_add((bq * heads + h) * d * 2);
            let kv = h.checked_sub(u64::from(q_heads));
            if let Some(vh) = kv.and_then(|k| k.checked_sub(u64::from(kv_heads))) {
                let mut v = vec![0u8; d as usize * 2];
                ctx.read(src, &mut v)?;
                ctx.write(pool.wrapping_add((slot + vh * head_stride + v_offset) * 2), &v)?;
                continue;
            }
            let mut x = read_bf16s(ctx, src, d as usize)?;
            let w = if kv.is_none() { &wq } else { &wk };
            let inv = super::elementwise::inv_rms(&x, eps);
            x.iter_mut().zip(w).for_each(|(a, g)| *a = *a * inv * g);
            let y: Vec<u8> = super::elementwise::rotate_half(&x, &c, &s)
                .iter()
                .flat_map(|&f| math::f32_to_bf16(f).to_le_bytes())
                .collect();
            let dst = match kv {
                None => q_out.wrapping_add(((bq * u64::from(q_heads)) + h) * d * 2),
                Some(kh) => pool.wrapping_add((slot + kh * head_stride) * 2),
            };
            ctx.write(dst, &y)?;
        }
        if flags & APPEND_ADVANCE != 0 {
            ctx.write_u32s(lens.wrapping_add(bq * 4), &[(len + 1) as u32])?;
        }
    }
    Ok(())
}

fn copy16(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    check_block(ctx, COPY16, COPY_THREADS)?;
    let (src, dst, n16) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4));
    // A grid-stride loop: every chunk whatever the grid; a slice of the simulator's units is a chunk each.
    let part = ctx.take(n16);
    let mut bytes = vec![0u8; ((part.end - part.start) * 16) as usize];
    ctx.read(src.wrapping_add(part.start * 16), &mut bytes)?;
    ctx.write(dst.wrapping_add(part.start * 16), &bytes)
}
