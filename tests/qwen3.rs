//! Qwen3 on the simulator: the TINY configuration's device model (`Qwen3Model`, weights generated on the
//! device, one command list per step) against the host reference (`qwen3::Reference`) over 16 greedy
//! steps at batch 1 and 3, with the step list submitted once per step, sealed, and no driver call or
//! allocation while sealed; and the upload path (`Weights::Source` over a safetensors checkpoint) giving
//! the same logits as the generator, a wrong-sized tensor refused by name.
//!
//! Tolerance. The two agree to rounding, not bit for bit: a product's f32 sum runs in the kernel's order
//! on the device and in the reference's own (`omega_refmath::dot`), attention's softmax is f32 on the
//! device and f64 in the reference, and the router's `expf` is within 2 ulp of the reference's. Each
//! such difference is ~2^-24 relative before a bf16 rounding, so it moves a bf16 value only when it lands
//! on the other side of a rounding boundary, by one bf16 ulp (2^-8 relative of that one element); a
//! logit, a sum of 256 products of the final norm's output with weights of sqrt(3/256), then moves by
//! about 2^-8 · |x_i · w_i| — 1e-3 at these logits of about 3 (the worst seen here, at one step; the
//! other steps differ by f32 ulps, 5e-7). `|d| <= 4e-3 · (1 + |ref|)` leaves room for a few such flips
//! and still catches a wrong layer, head, expert or position (those change the logits by their own
//! size, about 1). The greedy tokens must agree exactly, and each row's top two must lie further apart
//! than twice the row's difference, so a near tie fails by name instead of deciding the token by
//! rounding (the weights and tokens are fixed, so this is a fixed outcome, never a flaky one).

use omega::libs::decoder::L2Prefetch;
use omega::libs::serving::qwen3::{checkpoint, Qwen3Config, Qwen3Model, Reference, Tensor, WeightSource, Weights};
use omega::{Gpu, Scope, Scoped};
use std::borrow::Cow;

const STEPS: usize = 16;

fn within(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let worst = got
        .iter()
        .zip(want)
        .map(|(g, w)| ((g - w).abs() / (1.0 + w.abs()), *g, *w))
        .fold((0f32, 0f32, 0f32), |a, b| if b.0 > a.0 || b.0.is_nan() { b } else { a });
    assert!(got.iter().all(|v| v.is_finite()), "{what}: a logit is not finite");
    assert!(
        worst.0 <= 4e-3,
        "{what}: worst relative difference {} (device {}, reference {})",
        worst.0,
        worst.1,
        worst.2
    );
}

/// How far a row's largest logit lies above its second.
fn gap(row: &[f32]) -> f32 {
    let mut v: Vec<f32> = row.to_vec();
    v.sort_by(|a, b| b.total_cmp(a));
    v[0] - v[1]
}

fn on_sim<R>(f: impl for<'s> FnOnce(&'s Scope<'s>, Gpu<'s>) -> R) -> R {
    let dev = omega::lock().open().expect("open");
    assert_eq!(dev.platform(), "sim", "these tests run where there is no GPU");
    match dev.close().open().expect("reopen").scope(f) {
        Scoped::Open(_, r) => r,
        Scoped::Latched(..) => panic!("the model latched the process"),
    }
}

/// `STEPS` greedy steps of the device model from `first`, each step's logits and tokens.
fn decode(
    cfg: Qwen3Config,
    first: &[u32],
    weights: Weights<'_>,
    sealed: bool,
    (prefetch, fused_router): (Option<L2Prefetch>, bool),
) -> Vec<(Vec<f32>, Vec<u32>)> {
    on_sim(|s, gpu| {
        let b = first.len() as u32;
        let (model, gpu) = Qwen3Model::new(s, gpu, cfg, [b, 64], weights, &mut |_, _| {}).unwrap();
        model.set_tokens(first).unwrap();
        model.set_fused_router(false);
        let separate = model.record_step().unwrap().len();
        model.set_fused_router(true);
        let plain = model.record_step().unwrap().len();
        // The fused router is one launch where the router product, the top k and the route were three.
        assert_eq!(plain + 2 * cfg.layers as usize, separate, "the fused router's launches");
        model.set_fused_router(fused_router);
        let plain = if fused_router { plain } else { separate };
        model.set_l2_prefetch(prefetch);
        let mut list = model.record_step().unwrap();
        // Two prefetches a layer but the last, which has no next layer to fetch for.
        let prefetches = if prefetch.is_some() { 2 * cfg.layers as usize - 1 } else { 0 };
        assert_eq!(list.len(), plain + prefetches, "the step's launches with prefetch {prefetch:?}");
        let sim = omega::testing::simulator().expect("the simulator is the platform");
        let before = (s.driver_stats(), s.alloc_stats(), sim.stats().submissions);
        let seal = if sealed { Some(model.seal().unwrap()) } else { None };
        let mut gpu = gpu;
        let mut out = Vec::new();
        for _ in 0..STEPS {
            gpu = model.step(gpu, &mut list).unwrap();
            out.push((model.read_logits().unwrap(), model.read_tokens().unwrap()));
        }
        let after = (s.driver_stats(), s.alloc_stats(), sim.stats().submissions);
        assert_eq!(after.2 - before.2, STEPS as u64, "one submission a step");
        if sealed {
            assert!(before.0.is_some(), "the simulator counts its driver calls");
            assert_eq!((before.0, before.1), (after.0, after.1), "no driver call, no allocation while sealed");
        }
        drop(seal);
        assert_eq!(model.list_status().unwrap(), 0, "every length and page fit");
        assert_eq!(model.read_positions().unwrap(), vec![STEPS as i32; first.len()], "positions advanced");
        drop((list, gpu));
        out
    })
}

fn against_reference(batch: usize, how: (Option<L2Prefetch>, bool)) {
    let cfg = Qwen3Config::TINY;
    let first: Vec<u32> = (0..batch as u32).map(|b| 17 + 389 * b).collect();
    let got = decode(cfg, &first, Weights::Generated, true, how);
    let mut r = Reference::generated(cfg, batch as u32);
    let mut tokens = first.clone();
    for (i, (logits, dev_tokens)) in got.iter().enumerate() {
        let want = r.step(&tokens);
        within(logits, &want, &format!("B={batch} step {i}"));
        let want_tokens = r.tokens();
        let v = cfg.vocab as usize;
        for (b, (row, dev)) in want.chunks(v).zip(logits.chunks(v)).enumerate() {
            let diff = dev.iter().zip(row).map(|(g, w)| (g - w).abs()).fold(0f32, f32::max);
            assert!(gap(row) > 2.0 * diff, "B={batch} step {i} row {b}: a near tie, the greedy token is not decided");
        }
        assert_eq!(dev_tokens, &want_tokens, "B={batch} step {i}: greedy tokens");
        tokens = want_tokens;
    }
}

#[test]
fn the_tiny_model_at_batch_1_matches_the_host_reference_over_16_sealed_greedy_steps() {
    against_reference(1, (None, true));
}

/// With the L2 prefetches in the step (which store nothing): the same check.
#[test]
fn the_tiny_model_at_batch_3_matches_the_host_reference_over_16_sealed_greedy_steps() {
    against_reference(3, (Some(L2Prefetch::Bulk), true));
}

/// Routed by the router product, the top-k kernel and the route kernel (the fused router's three
/// launches): the same check.
#[test]
fn the_tiny_model_routed_in_three_launches_matches_the_host_reference_too() {
    against_reference(2, (None, false));
}

/// The upload path through a safetensors checkpoint (`qwen3::checkpoint`, the generated weights written
/// and parsed back): the same bits, so the same kernels give the generated model's logits bit for bit;
/// and a second generated run is the same.
#[test]
fn a_checkpoint_upload_gives_the_generated_models_logits_and_two_runs_agree() {
    let cfg = Qwen3Config::TINY.with_layers(1);
    let first = [5u32, 999];
    let file = checkpoint::write_checkpoint(cfg);
    let ckpt = checkpoint::Checkpoint::parse(&file, cfg).unwrap();
    let generated = decode(cfg, &first, Weights::Generated, false, (None, true));
    let uploaded = decode(cfg, &first, Weights::Source(&ckpt), false, (None, true));
    let again = decode(cfg, &first, Weights::Generated, false, (Some(L2Prefetch::Lines), true));
    let bits = |v: &[(Vec<f32>, Vec<u32>)]| {
        v.iter().map(|(l, t)| (l.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), t.clone())).collect::<Vec<_>>()
    };
    assert_eq!(bits(&generated), bits(&uploaded), "upload == generate");
    assert_eq!(bits(&generated), bits(&again), "a second run (with line prefetches) is the same");
}

/// A source of the wrong configuration's tensors is refused by the tensor's name before anything runs.
#[test]
fn a_checkpoint_of_another_shape_is_refused_by_the_tensors_name() {
    struct Short;
    impl WeightSource for Short {
        fn tensor(&self, t: Tensor) -> Result<Cow<'_, [u16]>, Box<dyn std::error::Error + Send + Sync>> {
            Ok(Cow::Owned(t.generate(&Qwen3Config::TINY.with_layers(1))[1..].to_vec()))
        }
    }
    let e = on_sim(|s, gpu| {
        Qwen3Model::new(s, gpu, Qwen3Config::TINY.with_layers(1), [1, 16], Weights::Source(&Short), &mut |_, _| {})
            .err()
            .expect("a short tensor is refused")
    });
    assert_eq!(e.to_string(), "qwen3 weights: model.embed_tokens.weight has 255999 elements; its shape needs 256000");
    assert_eq!(e.stage(), omega::Stage::Serving);
}
