//! Qwen3 on the installed platform (issue 14): the device model (`Qwen3Model`, weights generated on the
//! device, one command list per step) against the host reference (`qwen3::Reference`).
//!
//! - `qwen3_tiny`: the weight generator's device bits against the host's (a norm, a stacked expert
//!   tensor, a slice inside the embedding), then the TINY configuration at batch 1 and 3 over 16 greedy
//!   steps against the reference, then 16 sealed steps with the driver and allocation counters unchanged.
//! - `qwen3_2layer`: the full width (hidden 2048, 32/4 heads of 128, 128 experts top 8, vocab 151936)
//!   with 2 layers, batch 1, 8 greedy steps against the reference (a few seconds of host arithmetic).
//!
//! Tolerance (tests/qwen3.rs argues it for the simulator): the logits within `tol · (1 + |ref|)`, the
//! greedy tokens equal, each row's top two further apart than twice the row's difference (a near tie
//! fails by name). On the GPU a product's f32 sum runs in the tensor cores' order, so bf16 roundings
//! flip more often than on the simulator; a flip moves a logit by about `2^-8 · |x_i · w_i|` (1e-3 at
//! TINY's logits, 1.5e-4 at full width's `w` of sqrt(3/2048), where a few hundred random-signed flips
//! over 2048 elements and 2 layers add to about 3e-3): `tol` is 4e-3 at TINY and 1e-2 at full width,
//! while a wrong head, expert, position or layer moves the logits by their own size (about 1).

use omega::libs::decoder::{Decoder, DeviceSpan};
use omega::libs::serving::qwen3::{Qwen3Config, Qwen3Model, Reference, Tensor, TensorKind, Weights, WEIGHT_SEED};

use super::{err, with_scope, CaseResult};

/// The device's generated bits of three tensors against the host generator's.
fn generator_bits() -> CaseResult {
    let c = Qwen3Config::TINY;
    let cases = [
        (Tensor { layer: Some(1), kind: TensorKind::QNorm }, 0u64, 64usize),
        (Tensor { layer: Some(0), kind: TensorKind::GateUp }, 0, (c.experts * 2 * c.expert_inter * c.hidden) as usize),
        (Tensor::global(TensorKind::Embed), 12_345, 70_001),
    ];
    with_scope(|s, gpu| {
        let dec = Decoder::new(s).map_err(err)?;
        let mut gpu = gpu;
        for (t, start, n) in cases {
            let mut want = vec![0u16; n];
            t.fill(&c, start, &mut want);
            let mut out = s.alloc_device_from(&vec![0xdeadu16; n]).map_err(err)?;
            // SAFETY: the span is the whole of `out`, which outlives the launch.
            let mut span = unsafe { DeviceSpan::<u16>::new(out.va(), n) };
            let call =
                dec.generate_bf16(&mut span, WEIGHT_SEED, t.id(), start, t.center(), t.scale(&c)).map_err(err)?;
            gpu = dec.launch(gpu, call).map_err(|(_, e)| e.to_string())?;
            let got = out.to_vec().map_err(err)?;
            if let Some(i) = (0..n).find(|&i| got[i] != want[i]) {
                return Err(format!(
                    "generator: {} element {}: device {:#06x}, host {:#06x}",
                    t.name(),
                    start + i as u64,
                    got[i],
                    want[i]
                ));
            }
        }
        let _gpu = gpu;
        Ok(format!("generator: {} tensors bit for bit", cases.len()))
    })
}

/// `steps` greedy steps of `cfg` at `batch` against the reference, then `sealed` sealed steps.
fn against_reference(cfg: Qwen3Config, batch: u32, steps: usize, sealed: usize, tol: f32) -> CaseResult {
    let first: Vec<u32> = (0..batch).map(|b| (17 + 389 * b) % cfg.vocab).collect();
    let mut r = Reference::generated(cfg, batch);
    with_scope(|s, gpu| {
        let max_seq = (steps + sealed + 1) as u32;
        let (model, gpu) =
            Qwen3Model::new(s, gpu, cfg, [batch, max_seq], Weights::Generated, &mut |_, _| {}).map_err(err)?;
        model.set_tokens(&first).map_err(err)?;
        let mut list = model.record_step().map_err(err)?;
        let (mut gpu, mut tokens, mut worst_seen) = (gpu, first.clone(), 0f32);
        for i in 0..steps {
            gpu = model.step(gpu, &mut list).map_err(|e| format!("step {i}: {e}"))?;
            let (got, dev_tokens) = (model.read_logits().map_err(err)?, model.read_tokens().map_err(err)?);
            let want = r.step(&tokens);
            let v = cfg.vocab as usize;
            for (b, (row, dev)) in want.chunks(v).zip(got.chunks(v)).enumerate() {
                let diff = dev.iter().zip(row).map(|(g, w)| (g - w).abs()).fold(0f32, f32::max);
                let worst = dev.iter().zip(row).map(|(g, w)| (g - w).abs() / (1.0 + w.abs())).fold(0f32, f32::max);
                // f32::max drops a NaN, so the logits' finiteness is checked on its own.
                if !dev.iter().all(|x| x.is_finite()) || worst > tol {
                    return Err(format!(
                        "B={batch} step {i} row {b}: logits differ by {worst:.2e} relative (tol {tol})"
                    ));
                }
                let mut top: Vec<f32> = row.to_vec();
                top.sort_by(|a, b| b.total_cmp(a));
                if top[0] - top[1] <= 2.0 * diff {
                    return Err(format!(
                        "B={batch} step {i} row {b}: a near tie ({} apart), the token is not decided",
                        top[0] - top[1]
                    ));
                }
                worst_seen = worst_seen.max(worst);
            }
            if dev_tokens != r.tokens() {
                return Err(format!("B={batch} step {i}: tokens {dev_tokens:?}, the reference's {:?}", r.tokens()));
            }
            tokens = dev_tokens;
        }
        let mut sealed_note = String::new();
        if sealed > 0 {
            let before = (s.driver_stats().ok_or("the platform counts no driver calls")?, s.alloc_stats());
            let seal = model.seal().map_err(err)?;
            for i in 0..sealed {
                gpu = model.step(gpu, &mut list).map_err(|e| format!("sealed step {i}: {e}"))?;
            }
            let after = (s.driver_stats().ok_or("the counters went away")?, s.alloc_stats());
            seal.release().map_err(err)?;
            if before != after {
                return Err(format!("sealed: the driver was asked: before {before:?}, after {after:?}"));
            }
            sealed_note =
                format!(", {sealed} sealed steps with 0 driver calls ({} ioctls before and after)", before.0.ioctls);
        }
        if model.list_status().map_err(err)? != 0 {
            return Err("attention flagged a length or page".into());
        }
        drop((list, gpu));
        Ok(format!("B={batch} {steps} steps: tokens equal, logits within {worst_seen:.1e}{sealed_note}"))
    })
}

/// The `qwen3_tiny` case.
pub fn tiny() -> CaseResult {
    let cfg = Qwen3Config::TINY;
    let bits = generator_bits()?;
    let one = against_reference(cfg, 1, 16, 16, 4e-3)?;
    let three = against_reference(cfg, 3, 16, 0, 4e-3)?;
    Ok(format!("{bits}; {one}; {three}"))
}

/// The `qwen3_2layer` case.
pub fn two_layer() -> CaseResult {
    against_reference(Qwen3Config::FULL.with_layers(2), 1, 8, 0, 1e-2)
}
