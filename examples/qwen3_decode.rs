//! Qwen3-30B-A3B greedy decode on the installed platform (`omega::libs::serving::qwen3::Qwen3Model`):
//! the weights generated on the device (seeded, bit for bit what `benches/torch/qwen_weights.py` and the
//! host reference compute), then one command list per step, recorded once and submitted every step.
//!
//! `qwen3_decode [--tiny] [--steps N] [--batch B] [--layers L] [--context C] [--check] [--dump FILE]
//! [--checkpoint FILE] [--sealed-steps N] [--bench] [--profile] [--grouped-split S] [--prefetch HOW]
//! [--router fused|separate] [--attn-merge auto|launch|cluster|ticket]`
//!
//! - `--tiny`: the TINY configuration (the default on sim; on nvidia the full model is the default).
//! - `--steps N` (default 16): greedy steps, printed with their tokens and the step time.
//! - `--batch B` (default 1): sequences decoded together; sequence b starts from token `17 + 389 b`.
//! - `--layers L`: the configuration with L layers (a full-width model of 1 or 2 layers for `--check`).
//! - `--context C`: start from a context of C tokens (`Qwen3Model::fill_context`: every layer's KV cache
//!   filled with generated values, the positions set to C - 1, no decoding), so the first timed step
//!   attends C tokens — the benchmark peer's setup. Not with `--check` or `--dump`, whose references
//!   start from an empty cache.
//! - `--check`: compares every step with the host reference (`qwen3::Reference`, generated weights):
//!   logits within `qwen3::reference::Apart::TOLERANCE` (its text argues it) and each greedy token the
//!   reference's or a near tie (`TokenCheck`); the reference takes the device's tokens.
//!   The reference runs on the host's cores, so this is for TINY or a full-width model of `--layers 1`
//!   or 2 and a few steps (a 48-layer step takes it minutes).
//! - `--dump FILE`: the run as JSON lines (docs/serving.md, "Qwen3 dump format": a header, then per step
//!   its input tokens, greedy tokens, logits digest, first logits and top 5), what
//!   `benches/torch/qwen3_peer.py --check FILE` compares with PyTorch.
//! - `--checkpoint FILE`: the weights from a safetensors checkpoint of the configuration
//!   (`qwen3::checkpoint`, e.g. one `write_checkpoint` wrote) instead of the device's generator.
//! - `--sealed-steps N`: seal, run N more steps, and fail unless the driver counters (every ioctl, mmap
//!   and munmap) and the allocation counters are what they were before; prints both.
//! - `--bench`: one line `qwen3 decode B=.. layers=.. context=.. prefetch=.. router=.. attn_merge=.. step_us=..
//!   wall_us=.. tok_s=..`: the
//!   median step over `--steps`, `step_us` from submit to completion on the platform's clock (the
//!   submission's own time), `wall_us` the host's around it (with the wait's wake-up), `tok_s` from
//!   `step_us` (on sim the platform clock is the simulator's virtual one, not a GPU's).
//! - `--profile`: after the timed steps, the last step's launches by operation (`record_step_labelled`):
//!   each launch's time from the previous launch's completion stamp to its own (its run and the gap
//!   before it), summed over the layers, one line `qwen3 profile op=.. launches=.. us=.. share=..` an
//!   operation, largest first (the first launch has no earlier stamp and is left out).
//! - `--grouped-split S`: the expert products split K into S slices instead of the planner's choice
//!   (`Matmul::set_grouped_split`; a split K cannot make is refused by name), for a sweep.
//! - `--prefetch bulk|lines|off` (default off): the step asks the L2 for the dense weights ahead of their
//!   products (`Qwen3Model::set_l2_prefetch`; `bulk` by the TMA unit, `lines` one prefetch a line).
//!   Measured slower on the H200 (docs/perf/2026-12-03-s8-qwen3-step.md); kept to re-measure.
//! - `--router fused|separate` (default fused): each layer routes in one launch (the router product, the
//!   top k and the route) or in the three it replaces (`Qwen3Model::set_fused_router`).
//! - `--attn-merge auto|launch|cluster|ticket` (default auto, the planner's choice): each layer's
//!   attention merges its KV splits in the decode's own launch (its splits a cluster, or the last CTA of
//!   each KV head by a ticket) or in a second launch (`Qwen3Model::set_attn_merge`).

use std::io::Write;
use std::time::Instant;

use omega::libs::attention::Merge;
use omega::libs::decoder::L2Prefetch;
use omega::libs::serving::qwen3::reference::{Apart, TokenCheck};
use omega::libs::serving::qwen3::{checkpoint, dump, Qwen3Config, Qwen3Model, Reference, Weights};
use omega::{Gpu, Scoped};

struct Opts {
    tiny: bool,
    steps: usize,
    batch: u32,
    layers: Option<u32>,
    context: usize,
    check: bool,
    dump: Option<String>,
    checkpoint: Option<String>,
    sealed: usize,
    bench: bool,
    profile: bool,
    grouped_split: Option<u32>,
    prefetch: Option<L2Prefetch>,
    fused_router: bool,
    attn_merge: Merge,
}

fn parse(platform: &str) -> Result<Opts, String> {
    let mut o = Opts {
        tiny: platform == "sim",
        steps: 16,
        batch: 1,
        layers: None,
        context: 0,
        check: false,
        dump: None,
        checkpoint: None,
        sealed: 0,
        bench: false,
        profile: false,
        grouped_split: None,
        prefetch: None,
        fused_router: true,
        attn_merge: Merge::Auto,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        let num = |v: String, name: &str| v.parse::<usize>().map_err(|e| format!("{name} {v}: {e}"));
        match a.as_str() {
            "--tiny" => o.tiny = true,
            "--steps" => o.steps = num(value("--steps")?, "--steps")?,
            "--batch" => o.batch = num(value("--batch")?, "--batch")? as u32,
            "--layers" => o.layers = Some(num(value("--layers")?, "--layers")? as u32),
            "--context" => o.context = num(value("--context")?, "--context")?,
            "--check" => o.check = true,
            "--dump" => o.dump = Some(value("--dump")?),
            "--checkpoint" => o.checkpoint = Some(value("--checkpoint")?),
            "--sealed-steps" => o.sealed = num(value("--sealed-steps")?, "--sealed-steps")?,
            "--bench" => o.bench = true,
            "--profile" => o.profile = true,
            "--grouped-split" => o.grouped_split = Some(num(value("--grouped-split")?, "--grouped-split")? as u32),
            "--prefetch" => {
                o.prefetch = match value("--prefetch")?.as_str() {
                    "bulk" => Some(L2Prefetch::Bulk),
                    "lines" => Some(L2Prefetch::Lines),
                    "off" => None,
                    other => return Err(format!("--prefetch {other}: bulk, lines or off")),
                }
            }
            "--router" => {
                o.fused_router = match value("--router")?.as_str() {
                    "fused" => true,
                    "separate" => false,
                    other => return Err(format!("--router {other}: fused or separate")),
                }
            }
            "--attn-merge" => {
                o.attn_merge = match value("--attn-merge")?.as_str() {
                    "auto" => Merge::Auto,
                    "launch" => Merge::Launch,
                    "cluster" => Merge::Cluster,
                    "ticket" => Merge::Ticket,
                    other => return Err(format!("--attn-merge {other}: auto, launch, cluster or ticket")),
                }
            }
            other => return Err(format!("unknown argument {other} (see the example's header)")),
        }
    }
    if o.steps == 0 || o.batch == 0 {
        return Err("--steps and --batch must be at least 1".into());
    }
    if o.context > 0 && (o.check || o.dump.is_some()) {
        return Err("--context fills the cache with generated values, which --check and --dump cannot follow".into());
    }
    Ok(o)
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("qwen3_decode: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let dev = omega::lock().open().map_err(|e| e.error.to_string())?;
    let platform = dev.platform().to_string();
    let o = parse(&platform)?;
    let base = if o.tiny { Qwen3Config::TINY } else { Qwen3Config::FULL };
    let cfg = o.layers.map_or(base, |l| base.with_layers(l));
    println!(
        "platform {platform}: Qwen3 {} ({} layers, hidden {}, {} experts top-{}, vocab {}), batch {}",
        if o.tiny { "TINY" } else { "30B-A3B" },
        cfg.layers,
        cfg.hidden,
        cfg.experts,
        cfg.top_k,
        cfg.vocab,
        o.batch
    );
    match dev.scope(|s, gpu| decode(s, gpu, cfg, &o)) {
        Scoped::Open(_, r) => r,
        Scoped::Latched(l, r) => Err(format!("latched ({}); the run said {:?}", l.cause(), r.err())),
    }
}

fn decode<'s>(s: &'s omega::Scope<'s>, gpu: Gpu<'s>, cfg: Qwen3Config, o: &Opts) -> Result<(), String> {
    let total_steps = o.context + o.steps + o.sealed;
    let max_seq = u32::try_from(total_steps + 1).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let mut shown = 0;
    let mut progress = |done: u64, total: u64| {
        let tenth = done * 10 / total;
        if tenth > shown {
            shown = tenth;
            println!(
                "weights: {:>3}% ({:.2} GB) in {:.1} s",
                tenth * 10,
                done as f64 * 2e-9,
                t.elapsed().as_secs_f64()
            );
        }
    };
    let file = match &o.checkpoint {
        Some(path) => Some(std::fs::read(path).map_err(|e| format!("{path}: {e}"))?),
        None => None,
    };
    let ckpt = match &file {
        Some(bytes) => Some(checkpoint::Checkpoint::parse(bytes, cfg).map_err(|e| e.to_string())?),
        None => None,
    };
    let weights = ckpt.as_ref().map_or(Weights::Generated, |c| Weights::Source(c));
    let (model, gpu) =
        Qwen3Model::new(s, gpu, cfg, [o.batch, max_seq], weights, &mut progress).map_err(|e| e.to_string())?;
    let first: Vec<u32> = (0..o.batch).map(|b| (17 + 389 * b) % cfg.vocab).collect();
    model.set_tokens(&first).map_err(|e| e.to_string())?;
    let mut gpu = gpu;
    if o.context > 0 {
        gpu = model.fill_context(gpu, o.context as u32).map_err(|e| e.to_string())?;
        println!("context: {} tokens' K/V generated in every layer's cache", o.context);
    }
    model.matmul().set_grouped_split(o.grouped_split);
    model.set_l2_prefetch(o.prefetch);
    model.set_fused_router(o.fused_router);
    model.set_attn_merge(o.attn_merge);
    let (mut list, labels) = model.record_step_labelled().map_err(|e| e.to_string())?;
    println!("ready in {:.1} s: one list of {} launches a step", t.elapsed().as_secs_f64(), list.len());
    let mut reference = o.check.then(|| Reference::generated(cfg, o.batch));
    let mut tokens = first;
    let mut dump = match &o.dump {
        Some(path) => {
            let mut w = std::io::BufWriter::new(std::fs::File::create(path).map_err(|e| format!("{path}: {e}"))?);
            writeln!(w, "{}", dump::header_line(&cfg, &tokens, s.platform())).map_err(|e| format!("--dump: {e}"))?;
            Some(w)
        }
        None => None,
    };
    let (mut times, mut walls) = (Vec::new(), Vec::new());
    for i in 0..o.steps {
        let t = Instant::now();
        let (g, ns) = model.step_timed(gpu, &mut list).map_err(|e| format!("step {i}: {e}"))?;
        gpu = g;
        let wall = t.elapsed().as_secs_f64() * 1e6;
        let next = model.read_tokens().map_err(|e| e.to_string())?;
        times.push(ns as f64 / 1e3);
        walls.push(wall);
        println!("step {i}: {:.0} us ({wall:.0} us wall), tokens {next:?}", ns as f64 / 1e3);
        if let Some(r) = reference.as_mut() {
            check_step(i, r, &model, &tokens, &next)?;
        }
        if let Some(w) = dump.as_mut() {
            let logits = model.read_logits().map_err(|e| e.to_string())?;
            writeln!(w, "{}", dump::step_line(i as u32, &tokens, &logits)).map_err(|e| format!("--dump: {e}"))?;
        }
        tokens = next;
    }
    let (median, wall) = (median(times), median(walls));
    let tok_s = f64::from(o.batch) * 1e6 / median;
    println!("decode: median step {median:.0} us ({wall:.0} us wall), {tok_s:.1} tokens/s");
    if o.bench {
        let (b, l, c) = (o.batch, cfg.layers, o.context);
        let pf = match o.prefetch {
            Some(L2Prefetch::Bulk) => "bulk",
            Some(L2Prefetch::Lines) => "lines",
            None => "off",
        };
        let router = if o.fused_router { "fused" } else { "separate" };
        let merge = format!("{:?}", o.attn_merge).to_lowercase();
        println!(
            "qwen3 decode B={b} layers={l} context={c} prefetch={pf} router={router} attn_merge={merge} \
             step_us={median:.1} wall_us={wall:.1} tok_s={tok_s:.1}"
        );
    }
    if o.profile {
        profile(&list.stamps(), &labels);
    }
    if o.sealed > 0 {
        gpu = sealed_steps(s, gpu, &model, &mut list, o.sealed)?;
    }
    drop((list, gpu));
    Ok(())
}

/// The last submission's completion stamps added up by operation (see `--profile`).
fn profile(stamps: &[u64], labels: &[&'static str]) {
    let mut ops: Vec<(&'static str, u32, f64)> = Vec::new();
    for (i, pair) in stamps.windows(2).enumerate() {
        let us = pair[1].saturating_sub(pair[0]) as f64 / 1e3;
        let label = labels.get(i + 1).copied().unwrap_or("?");
        match ops.iter_mut().find(|(l, ..)| *l == label) {
            Some(op) => (op.1, op.2) = (op.1 + 1, op.2 + us),
            None => ops.push((label, 1, us)),
        }
    }
    let total: f64 = ops.iter().map(|op| op.2).sum();
    ops.sort_by(|a, b| b.2.total_cmp(&a.2));
    for (op, n, us) in ops {
        println!("qwen3 profile op={op} launches={n} us={us:.1} share={:.3}", us / total.max(1e-9));
    }
    println!("qwen3 profile total_us={total:.1} (first launch to last completion)");
}

/// The median of `v` (not empty: `--steps` is at least 1).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn check_step(i: usize, r: &mut Reference, model: &Qwen3Model<'_>, tokens: &[u32], next: &[u32]) -> Result<(), String> {
    let want = r.step(tokens);
    let got = model.read_logits().map_err(|e| e.to_string())?;
    let mut apart = Apart::default();
    let v = model.config().vocab as usize;
    let mut verdicts = Vec::new();
    for ((g, w), &token) in got.chunks(v).zip(want.chunks(v)).zip(next) {
        verdicts.push(TokenCheck::of(token, w, apart.fold(g, w)));
    }
    println!(
        "check step {i}: logits apart by rms {:.2e} max {:.2e} of their rms, reference tokens {:?}, {verdicts:?}",
        apart.rms,
        apart.max,
        r.tokens()
    );
    // A NaN would pass the comparisons, so the logits' finiteness is checked on its own.
    let wrong = verdicts.iter().any(|v| matches!(v, TokenCheck::Differ { .. }));
    if !got.iter().all(|x| x.is_finite()) || !apart.within(Apart::TOLERANCE) || wrong {
        return Err(format!("step {i}: the device differs from the host reference (tolerance {:?})", Apart::TOLERANCE));
    }
    Ok(())
}

fn sealed_steps<'s>(
    s: &'s omega::Scope<'s>,
    gpu: Gpu<'s>,
    model: &Qwen3Model<'s>,
    list: &mut omega::cmdlist::CmdListBuilder<'_, 's>,
    n: usize,
) -> Result<Gpu<'s>, String> {
    let before = (s.driver_stats().ok_or("the platform counts no driver calls")?, s.alloc_stats());
    let sealed = model.seal().map_err(|e| e.to_string())?;
    let t = Instant::now();
    let mut gpu = gpu;
    for i in 0..n {
        gpu = model.step(gpu, list).map_err(|e| format!("sealed step {i}: {e}"))?;
    }
    let secs = t.elapsed().as_secs_f64();
    let after = (s.driver_stats().ok_or("the counters went away")?, s.alloc_stats());
    sealed.release().map_err(|e| e.to_string())?;
    println!("sealed: {n} steps in {secs:.3} s; driver before {:?} after {:?}", before.0, after.0);
    println!("sealed: alloc_stats before {:?} after {:?}", before.1, after.1);
    if before != after {
        return Err("the driver was asked (or memory allocated) while sealed".into());
    }
    println!("sealed: 0 driver calls, 0 allocations over {n} steps");
    Ok(gpu)
}
