//! Qwen3 on the installed platform (issue 14): the device model (`Qwen3Model`, weights generated on the
//! device, one command list per step) against the host reference (`qwen3::Reference`).
//!
//! - `qwen3_tiny`: the weight generator's device bits against the host's (a norm, a stacked expert
//!   tensor, a slice inside the embedding), then the TINY configuration at batch 1 and 3 over 16 greedy
//!   steps against the reference, then 16 sealed steps with the driver and allocation counters unchanged.
//! - `qwen3_2layer`: the full width (hidden 2048, 32/4 heads of 128, 128 experts top 8, vocab 151936)
//!   with 2 layers, batch 1, 8 greedy steps against the reference (a few seconds of host arithmetic).
//!
//! Tolerance: [`Apart::TOLERANCE`] (its text argues it); the qwen3_2layer case measures the host
//! reference's own rounding noise in the same run and prints it beside the device's distance. Each
//! greedy token must be the reference's, or a near tie broken the other way ([`TokenCheck`]: the
//! reference's logit of the device's token within twice the row's largest difference of its best),
//! reported by step; the reference then takes the device's tokens. The residual stream after the last
//! layer is compared too and reported, so a failure says whether the difference is rounding or the
//! whole stream.

use omega::libs::decoder::{Decoder, DeviceSpan};
use omega::libs::serving::qwen3::reference::{Apart, TokenCheck};
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
///
/// With `floor`, the reference is also run with its products summed in another order
/// ([`Reference::summed_in_fma_order`]) and that distance reported beside the device's: the rounding
/// noise two correct implementations show, which the tolerance is argued from.
fn against_reference(cfg: Qwen3Config, batch: u32, steps: usize, sealed: usize, tol: Apart, floor: bool) -> CaseResult {
    let first: Vec<u32> = (0..batch).map(|b| (17 + 389 * b) % cfg.vocab).collect();
    let mut r = Reference::generated(cfg, batch);
    let mut other = floor.then(|| Reference::generated(cfg, batch).summed_in_fma_order());
    with_scope(|s, gpu| {
        let max_seq = (steps + sealed + 1) as u32;
        let (model, gpu) =
            Qwen3Model::new(s, gpu, cfg, [batch, max_seq], Weights::Generated, &mut |_, _| {}).map_err(err)?;
        model.set_tokens(&first).map_err(err)?;
        let mut list = model.record_step().map_err(err)?;
        let (mut gpu, mut tokens) = (gpu, first.clone());
        let (mut seen, mut noise, mut residual) = (Apart::default(), Apart::default(), Apart::default());
        let mut near_ties = Vec::new();
        let v = cfg.vocab as usize;
        for i in 0..steps {
            gpu = model.step(gpu, &mut list).map_err(|e| format!("step {i}: {e}"))?;
            let (got, dev_tokens) = (model.read_logits().map_err(err)?, model.read_tokens().map_err(err)?);
            let want = r.step(&tokens);
            if let Some(o) = other.as_mut() {
                for (a, b) in o.step(&tokens).chunks(v).zip(want.chunks(v)) {
                    noise.fold(a, b);
                }
            }
            let dev_residual: Vec<f32> =
                model.read_residual().map_err(err)?.iter().map(|&b| f32::from_bits(u32::from(b) << 16)).collect();
            let mut this_residual = Apart::default();
            for (dev, want) in dev_residual.chunks(cfg.hidden as usize).zip(r.residual().chunks(cfg.hidden as usize)) {
                this_residual.fold(dev, want);
            }
            residual = Apart { rms: residual.rms.max(this_residual.rms), max: residual.max.max(this_residual.max) };
            let note = |what: String, seen: &Apart| {
                format!(
                    "B={batch} step {i}: {what} (logits apart by rms {:.2e} max {:.2e} of their rms, tol {:.1e} / \
                     {:.1e}; the residual stream after the last layer apart by rms {:.2e} max {:.2e})",
                    seen.rms, seen.max, tol.rms, tol.max, this_residual.rms, this_residual.max
                )
            };
            for (b, (row, dev)) in want.chunks(v).zip(got.chunks(v)).enumerate() {
                // f32::max drops a NaN, so the logits' finiteness is checked on its own.
                if !dev.iter().all(|x| x.is_finite()) {
                    return Err(note(format!("row {b}: a logit is not finite"), &seen));
                }
                let diff = seen.fold(dev, row);
                if !seen.within(tol) {
                    return Err(note(format!("row {b}: the logits differ past the tolerance"), &seen));
                }
                match TokenCheck::of(dev_tokens[b], row, diff) {
                    TokenCheck::Equal => {}
                    TokenCheck::NearTie { gap } => near_ties.push(format!("step {i} row {b} ({gap:.1e} apart)")),
                    TokenCheck::Differ { gap } => {
                        let want = r.tokens()[b];
                        return Err(note(
                            format!("row {b}: token {}, the reference's {want}, {gap} below it", dev_tokens[b]),
                            &seen,
                        ));
                    }
                }
            }
            // The reference takes the device's tokens next (a near tie broken the other way stays one).
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
        let floor_note = if floor {
            format!(
                " (the reference against itself summed in another order: rms {:.1e} max {:.1e})",
                noise.rms, noise.max
            )
        } else {
            String::new()
        };
        let ties = if near_ties.is_empty() {
            "tokens equal".to_string()
        } else {
            format!("tokens equal but near ties broken the other way at {}", near_ties.join(", "))
        };
        Ok(format!(
            "B={batch} {steps} steps: {ties}, logits apart by rms {:.1e} max {:.1e} of their rms{floor_note}, \
             the residual stream by rms {:.1e} max {:.1e}{sealed_note}",
            seen.rms, seen.max, residual.rms, residual.max
        ))
    })
}

/// The `qwen3_tiny` case.
pub fn tiny() -> CaseResult {
    let cfg = Qwen3Config::TINY;
    let bits = generator_bits()?;
    let one = against_reference(cfg, 1, 16, 16, Apart::TOLERANCE, false)?;
    let three = against_reference(cfg, 3, 16, 0, Apart::TOLERANCE, false)?;
    Ok(format!("{bits}; {one}; {three}"))
}

/// The `qwen3_2layer` case.
pub fn two_layer() -> CaseResult {
    against_reference(Qwen3Config::FULL.with_layers(2), 1, 8, 0, Apart::TOLERANCE, true)
}
