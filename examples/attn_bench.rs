//! The attention library's benchmark, Omega's side (the peer is benches/torch/attn_peer.py, torch SDPA in
//! the same run; its metric names are these).
//!
//! Paged decode over a bf16 pool, Qwen3-30B-A3B's heads (32 query, 4 KV, head_dim 128), pages of 16 and 64
//! tokens, batch in {1, 4, 16, 64}, every sequence of KV length L in {1024, 4096, 16384, 32768}, page tables
//! a shuffled permutation of the pool's pages. Each configuration is timed two ways and the shorter kept
//! (the matmul bench's rule): one call (`Info::device_ns`, the median of `--iters` after warm-ups: both
//! launches' submit-to-completion) and back-to-back calls ([`REPS`] decodes in one command list, the
//! completion stamps' steady spacing). Printed per configuration (`p<page>_b<B>_kv<L>`):
//!
//! - `omega.paged_decode_<cfg>_us`: the time of one decode;
//! - `omega.paged_decode_<cfg>_gbps`: KV bytes read (`B * L * 4 heads * 128 * 2 (K, V) * 2 bytes`) per second;
//! - `omega.paged_decode_<cfg>_copy_ratio`: that over the copy bandwidth measured in the same run
//!   (`omega.copy_gbps`: `omega_attn_copy16` over 1 GiB, read plus written bytes per second, the
//!   denominator hopper-kernels.md section 7 asks for).
//!
//! and, last, the goals: `omega.paged_decode_goal_b4plus_kv4kplus_min_ratio` (at least 0.85 asked) and
//! `omega.paged_decode_goal_b1_kv16kplus_min_ratio` (at least 0.70), the smallest ratio of each group.
//! A `#` line before each configuration names the split the planner chose, the call's and the list's
//! times and launches, and each listed launch's share of a decode (the mean spacing from the completion
//! before it to its own: the decode, then the combine where there is one).
//!
//! Then the host-pointer f32 entry `omega_gpu_gqa_attention_f32` (32/4/128, causal, 2048 tokens): its
//! wall and device time and `_floor_us` / `_of_floor`, its bytes at the sync speeds measured in the same
//! run plus its device time (the goal: at most 1.1), `omega.host_gqa_f32_s2048_*`.
//!
//! `attn_bench [--quick] [--check] [--iters N] [--merge auto|launch|cluster|ticket] [--splits N] [--stages N]`:
//! `--stages` forces every decode's pipeline depth (`DecodeShape::stages`: 2 or 4); `--splits` forces
//! every decode's KV split count (`DecodeShape::splits`; the planner caps it by each sequence's tiles), so
//! a run per count shows the fixed cost a split adds; `--merge` sets every decode's
//! merge of its splits (`DecodeShape::merge`; the planner's, `auto`, by default; `cluster` caps the split
//! at the cluster's 8); `--quick` runs page 16 and 64 at batch {1, 4}, L {1024,
//! 4096} over a small pool (a sim smoke run); `--check` verifies sequence 0 of every configuration against
//! the f64 reference (examples/suite/attention_ref.rs's tolerance) and fails on a miss. On sim every time
//! is the simulator's virtual clock, not a GPU's.

use omega::cmdlist::CmdListBuilder;
use omega::kernels::attention::{COPY16, COPY_THREADS};
use omega::libs::attention::{Attention, AttentionError, DecodeShape, Info, KvLayout, Merge};
use omega::{Device, Error, Gpu, Launch, Mem, Scope};
use omega_refmath::{self as math, KvRows};

#[path = "suite/attention_ref.rs"]
mod attention_ref;
#[path = "common/mod.rs"]
mod common;
use attention_ref::{paged_tolerance, Mix};

/// Decodes per command list.
const REPS: usize = 20;
const Q_HEADS: u32 = 32;
const KV_HEADS: u32 = 4;
const HEAD_DIM: u32 = 128;
/// Elements of the random block the pool repeats (a prime count, so pages do not all start alike).
const PATTERN: usize = (1 << 22) + 9;

impl From<omega::cmdlist::CmdListError> for BenchError {
    fn from(e: omega::cmdlist::CmdListError) -> Self {
        BenchError::List(Box::new(e))
    }
}

impl From<omega::libs::attention::LayoutError> for BenchError {
    fn from(e: omega::libs::attention::LayoutError) -> Self {
        BenchError::Attention(e.into())
    }
}

/// Why a run stopped (each names its stage).
#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error(transparent)]
    Device(#[from] Error),
    #[error(transparent)]
    Attention(#[from] AttentionError),
    #[error(transparent)]
    List(#[from] Box<omega::cmdlist::CmdListError>),
    #[error("check: {0}")]
    Check(String),
}

struct Opts {
    quick: bool,
    check: bool,
    iters: usize,
    merge: Merge,
    /// `DecodeShape::splits` of every decode (0: the planner's).
    splits: u32,
    /// `DecodeShape::stages` of every decode (0: the planner's).
    stages: u32,
}

/// A configuration's batch, KV length and copy ratio.
type Ratio = (u32, u32, f64);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The steady spacing of `REPS` units of `per` launches each in `list`, seconds (median of three rounds
/// after one warm-up), and, of the last round, each launch's share of a unit: the mean spacing from the
/// completion before it to its own (launch 0's from the previous unit's last), seconds.
fn list_secs<'s>(
    gpu: Gpu<'s>,
    list: &mut CmdListBuilder<'_, 's>,
    per: usize,
) -> Result<(Gpu<'s>, f64, Vec<f64>), BenchError> {
    let mut gpu = gpu;
    let mut ts = Vec::new();
    let mut shares = vec![0.0; per];
    for round in 0..4 {
        gpu = gpu.submit(list).map_err(|e| e.error)?.gpu;
        let st = list.stamps();
        if round > 0 {
            ts.push(st[REPS * per - 1].saturating_sub(st[per - 1]) as f64 * 1e-9 / (REPS - 1) as f64);
            for (j, share) in shares.iter_mut().enumerate() {
                let gaps = (1..REPS).map(|u| st[u * per + j].saturating_sub(st[u * per + j - 1]));
                *share = gaps.sum::<u64>() as f64 * 1e-9 / (REPS - 1) as f64;
            }
        }
    }
    Ok((gpu, median(ts), shares))
}

/// The copy bandwidth, read plus written bytes per second, over `bytes`.
fn copy_gbps<'s>(s: &'s Scope<'s>, gpu: Gpu<'s>, bytes: usize) -> Result<(Gpu<'s>, f64), BenchError> {
    let src = s.alloc_device::<u8>(bytes)?;
    let dst = s.alloc_device::<u8>(bytes)?;
    let module = s.load_cuda_module("attention")?;
    let k = module.kernel(COPY16)?;
    let grid = s.device().sm_count * 8;
    let launch =
        Launch::new(&k).grid([grid, 1, 1]).block([COPY_THREADS, 1, 1]).arg(&src).arg(&dst).arg((bytes / 16) as u64);
    let mut list = s.cmdlist()?;
    for _ in 0..REPS {
        list.add(&launch)?;
    }
    let (gpu, secs, _) = list_secs(gpu, &mut list, 1)?;
    Ok((gpu, 2.0 * bytes as f64 / secs / 1e9))
}

/// A pool of `pages` pages repeating one random block, and the block.
fn pool<'s>(s: &'s Scope<'s>, layout: &KvLayout, seed: u64) -> Result<(Mem<'s, Device<u16>>, Vec<u16>), BenchError> {
    let elems = layout.check()? as usize;
    let block = math::random_bf16(seed, PATTERN);
    let mut m = s.alloc_device::<u16>(elems)?;
    let mut at = 0;
    while at < elems {
        let n = PATTERN.min(elems - at);
        m.write_at(at, &block[..n])?;
        at += n;
    }
    Ok((m, block))
}

/// The f64 reference of sequence 0 (its table row `row`, length `len`) over the repeating pool.
fn reference(layout: &KvLayout, block: &[u16], row: &[i32], len: u32, q: &[f32]) -> (Vec<f64>, f64) {
    let d = HEAD_DIM as usize;
    let elem = |i: u64| math::bf16_to_f32(block[(i % PATTERN as u64) as usize]);
    let mut out = vec![0f64; (Q_HEADS * HEAD_DIM) as usize];
    let mut vmax = 0f64;
    let group = Q_HEADS / KV_HEADS;
    for h in 0..KV_HEADS {
        let (mut k, mut v) = (Vec::new(), Vec::new());
        for t in 0..u64::from(len) {
            let pt = u64::from(layout.page_tokens);
            let at = row[(t / pt) as usize] as u64 * layout.page_stride
                + u64::from(h) * layout.head_stride
                + (t % pt) * d as u64;
            k.extend((0..d as u64).map(|e| elem(at + e)));
            v.extend((0..d as u64).map(|e| elem(at + layout.v_offset + e)));
        }
        vmax = v.iter().fold(vmax, |m, &x| m.max(f64::from(x).abs()));
        for r in 0..group {
            let qh = ((h * group + r) * HEAD_DIM) as usize;
            let qr: Vec<f32> = q[qh..qh + d].iter().map(|&x| math::bf16_to_f32(math::f32_to_bf16(x))).collect();
            let kv = KvRows { k: &k, v: &v, stride: d, offset: 0, n: len as usize };
            math::attend_row(&qr, kv, std::f64::consts::LOG2_E / (d as f64).sqrt(), false, &mut out[qh..qh + d]);
        }
    }
    (out, vmax)
}

/// One configuration: timed, printed; returns its copy ratio.
#[allow(clippy::too_many_arguments)]
fn config<'s>(
    s: &'s Scope<'s>,
    gpu: Gpu<'s>,
    att: &Attention<'s>,
    (pool, block, layout): (&Mem<'s, Device<u16>>, &[u16], &KvLayout),
    batch: u32,
    len: u32,
    copy: f64,
    o: &Opts,
    mix: &mut Mix,
) -> Result<(Gpu<'s>, f64), BenchError> {
    let max_pages = len.div_ceil(layout.page_tokens);
    // A shuffled choice of the pool's pages: a random permutation's first batch * max_pages.
    let mut pages: Vec<i32> = (0..layout.pages as i32).collect();
    let need = (batch * max_pages) as usize;
    for i in 0..need {
        let j = i + mix.below((pages.len() - i) as u64) as usize;
        pages.swap(i, j);
    }
    let tables = s.alloc_device_from(&pages[..need])?;
    let lens = s.alloc_device_from(&vec![len as i32; batch as usize])?;
    let qv = math::random_f32(mix.next(), (batch * Q_HEADS * HEAD_DIM) as usize);
    let q = s.alloc_device_from(&qv)?;
    let mut out = s.alloc_device_from(&vec![attention_ref::POISON; qv.len()])?;
    let shape = DecodeShape {
        merge: o.merge,
        splits: o.splits,
        stages: o.stages,
        ..DecodeShape::new(batch, Q_HEADS, max_pages)
    };
    let mut gpu = gpu;
    let mut calls = Vec::new();
    let mut info = Info::default();
    for i in 0..3 + o.iters {
        let done = att.paged_decode(gpu, &q, pool, layout, &tables, &lens, &mut out, shape).map_err(|f| f.error)?;
        gpu = done.gpu;
        info = done.info;
        if i >= 3 {
            calls.push(info.device_ns as f64 * 1e-9);
        }
    }
    if o.check {
        let got = out.to_vec()?;
        let (want, vmax) = reference(layout, block, &pages[..max_pages as usize], len, &qv);
        let n = want.len();
        attention_ref::compare("sequence 0", &got[..n], &want, paged_tolerance(vmax)).map_err(BenchError::Check)?;
    }
    // A listed call may merge otherwise than a call alone (`Submission`): its own launches space the stamps.
    let mut list = s.cmdlist()?;
    let mut list_launches = 0;
    for _ in 0..REPS {
        list_launches = att.add_paged_decode(&mut list, &q, pool, layout, &tables, &lens, &out, shape)?.launches;
    }
    let (gpu, listed, shares) = list_secs(gpu, &mut list, list_launches as usize)?;
    let shares: Vec<String> = shares.iter().map(|s| format!("{:.2}", s * 1e6)).collect();
    let secs = median(calls).min(listed);
    let tag = format!("p{}_b{batch}_kv{len}", layout.page_tokens);
    let bytes = u64::from(batch) * u64::from(len) * layout.token_bytes();
    let gbps = bytes as f64 / secs / 1e9;
    println!(
        "# {tag}: {} splits of {} tiles, {} stages, {} CTAs; call {:.2} us ({} launch(es)), list {:.2} us ({}: {} us)",
        info.splits,
        info.tiles_per_split,
        info.stages,
        info.ctas,
        last_call_us(&info),
        info.launches,
        listed * 1e6,
        list_launches,
        shares.join(" + ")
    );
    println!("omega.paged_decode_{tag}_us {:.3}", secs * 1e6);
    println!("omega.paged_decode_{tag}_gbps {gbps:.1}");
    println!("omega.paged_decode_{tag}_copy_ratio {:.3}", gbps / copy);
    Ok((gpu, gbps / copy))
}

/// The device time of the last timed call, µs.
fn last_call_us(info: &Info) -> f64 {
    info.device_ns as f64 / 1e3
}

fn run(o: &Opts) -> Result<(), BenchError> {
    let dev = omega::lock().open().map_err(|e| e.error)?;
    println!("# attn_bench on {}: {}", dev.platform(), common::device_line(&dev.device()));
    let (batches, lens): (&[u32], &[u32]) =
        if o.quick { (&[1, 4], &[1024, 4096]) } else { (&[1, 4, 16, 64], &[1024, 4096, 16384, 32768]) };
    let r = dev.scope(|s, gpu| -> Result<(Vec<Ratio>, f64), BenchError> {
        let (mut gpu, copy) = copy_gbps(s, gpu, if o.quick { 1 << 24 } else { 1 << 30 })?;
        println!("omega.copy_gbps {copy:.1}");
        let att = Attention::new(s)?;
        let mut mix = Mix(common::fresh_seed());
        let mut ratios = Vec::new();
        for page in [16u32, 64] {
            let most = batches.iter().max().expect("a batch") * lens.iter().max().expect("a length").div_ceil(page);
            let layout = KvLayout::new(page, KV_HEADS, HEAD_DIM, most);
            let (pool, block) = pool(s, &layout, mix.next())?;
            for &b in batches {
                for &l in lens {
                    let (g, ratio) = config(s, gpu, &att, (&pool, &block, &layout), b, l, copy, o, &mut mix)?;
                    gpu = g;
                    ratios.push((b, l, ratio));
                }
            }
        }
        Ok((ratios, copy))
    });
    let (ratios, _copy) = r.value()?;
    let min_of = |f: &dyn Fn(u32, u32) -> bool| {
        ratios.iter().filter(|(b, l, _)| f(*b, *l)).map(|r| r.2).fold(f64::INFINITY, f64::min)
    };
    let a = min_of(&|b, l| b >= 4 && l >= 4096);
    let c = min_of(&|b, l| b == 1 && l >= 16384);
    println!("# goals: >= 0.85 of copy for KV >= 4K at batch >= 4; >= 0.70 at batch 1 for KV >= 16K");
    if a.is_finite() {
        println!("omega.paged_decode_goal_b4plus_kv4kplus_min_ratio {a:.3}");
    }
    if c.is_finite() {
        println!("omega.paged_decode_goal_b1_kv16kplus_min_ratio {c:.3}");
    }
    host_entry(o)
}

/// The host-pointer f32 entry `omega_gpu_gqa_attention_f32` (it takes the lock itself: called with none
/// held): 32 query and 4 KV heads of 128, causal, `seq` tokens, the median wall and device time of
/// `--iters` calls after three, against its bytes at the session's sync speeds (`host_gqa_f32_s<seq>_*`).
fn host_entry(o: &Opts) -> Result<(), BenchError> {
    use omega::ffi::attention::OMEGA_GPU_ATTN_CAUSAL;
    use omega::ffi::attention::{omega_gpu_attention_last_error, omega_gpu_gqa_attention_f32, OmegaGpuAttnInfo};
    let seq: u32 = if o.quick { 64 } else { 2048 };
    let (qh, kvh, d) = (32u32, KV_HEADS, HEAD_DIM);
    let mut mix = Mix(common::fresh_seed());
    let mut gen = |n: u32| (0..n).map(|_| (mix.next() % 2001) as f32 / 1000.0 - 1.0).collect::<Vec<f32>>();
    let (q, k, v) = (gen(seq * qh * d), gen(seq * kvh * d), gen(seq * kvh * d));
    let mut out = vec![0f32; q.len()];
    let mut info = OmegaGpuAttnInfo::default();
    let call = common::HostCall::measure(o.iters, || {
        // SAFETY: q and out hold seq * 32 * 128 floats, k and v seq * 4 * 128, all aligned; info is writable.
        let rc = unsafe {
            omega_gpu_gqa_attention_f32(
                q.as_ptr(),
                k.as_ptr(),
                v.as_ptr(),
                qh,
                kvh,
                d,
                seq | OMEGA_GPU_ATTN_CAUSAL,
                out.as_mut_ptr(),
                &mut info,
            )
        };
        if rc != 0 {
            // SAFETY: the library's last error is a NUL-terminated process-wide buffer.
            let text = unsafe { std::ffi::CStr::from_ptr(omega_gpu_attention_last_error()) };
            let text = text.to_string_lossy();
            return Err(BenchError::Check(format!("omega_gpu_gqa_attention_f32 returned {rc}: {text}")));
        }
        Ok((info.device_ns, info.h2d_bytes, info.d2h_bytes))
    })?;
    omega::ffi::matmul::omega_gpu_device_close();
    let speeds = common::sync_speeds(if o.quick { 1 << 24 } else { common::SYNC_MEASURE_BYTES })?;
    call.print(&format!("host_gqa_f32_s{seq}"), speeds);
    Ok(())
}

fn main() -> Result<(), BenchError> {
    let args: Vec<String> = std::env::args().collect();
    let iters = args.iter().position(|a| a == "--iters").and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok());
    let merge = match args.iter().position(|a| a == "--merge").map(|i| args.get(i + 1).map(String::as_str)) {
        None | Some(Some("auto")) => Merge::Auto,
        Some(Some("launch")) => Merge::Launch,
        Some(Some("cluster")) => Merge::Cluster,
        Some(Some("ticket")) => Merge::Ticket,
        Some(other) => return Err(BenchError::Check(format!("--merge {other:?}: auto, launch, cluster or ticket"))),
    };
    let count = |flag: &str, what: &str| match args.iter().position(|a| a == flag).map(|i| args.get(i + 1)) {
        None => Ok(0),
        Some(v) => {
            v.and_then(|v| v.parse::<u32>().ok()).ok_or_else(|| BenchError::Check(format!("{flag} {v:?}: {what}")))
        }
    };
    let splits = count("--splits", "a count of KV splits")?;
    let stages = count("--stages", "pipeline stages, 2 or 4")?;
    let o = Opts {
        quick: args.iter().any(|a| a == "--quick"),
        check: args.iter().any(|a| a == "--check"),
        iters: iters.unwrap_or(20),
        merge,
        splits,
        stages,
    };
    run(&o)
}
