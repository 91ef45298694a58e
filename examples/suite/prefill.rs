//! The gpu_suite's prefill attention case (`omega::libs::attention::prefill`), run in a child process
//! (`--case prefill`) so a kernel that hangs or faults latches the child alone.
//!
//! Random bf16 q, k, v, the output poisoned; every row checked at seq <= 128, 256 sampled (row, head)
//! pairs (the first and last rows among them) past that, against an f64 attention of the row. Tolerance:
//! `2^-7 · Σ p |v| / Σ p + 1e-5` (the kernel rounds P to bf16, 2^-8 relative each: tests/attention_prefill.rs
//! argues it), plus `2^-8 |out|` for the bf16 output. Then the causal GQA 32/4 prefill at seq 1K/4K/16K is
//! timed (best of 5 launches, device time) and its TFLOP/s reported as FlashAttention counts them.

use omega::kernels::matmul as mm;
use omega::libs::attention::prefill::{Prefill, PrefillShape};
use rand::Rng;

use super::{err, rng, with_scope, CaseResult};

const D: usize = 128;

/// The f64 attention of query row `r`, head `h`: its 128 values and magnitudes `Σ p |v| / Σ p`.
fn row_reference(shape: PrefillShape, [q, k, v]: [&[f32]; 3], r: usize, h: usize) -> (Vec<f64>, Vec<f64>) {
    let (hq, hkv) = (shape.q_heads as usize, shape.kv_heads as usize);
    let g = h / (hq / hkv);
    let qr = &q[(r * hq + h) * D..][..D];
    let n = if shape.causal { r + 1 } else { shape.seq as usize };
    let s: Vec<f64> = (0..n).map(|j| mm::dot_f64(qr, &k[(j * hkv + g) * D..][..D]).0).collect();
    let m = s.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x));
    let p: Vec<f64> = s.iter().map(|&x| ((x - m) * f64::from(shape.scale)).exp()).collect();
    let l: f64 = p.iter().sum();
    let (mut o, mut mag) = (vec![0f64; D], vec![0f64; D]);
    for (j, &pj) in p.iter().enumerate() {
        for (d, x) in v[(j * hkv + g) * D..][..D].iter().enumerate() {
            o[d] += pj * f64::from(*x) / l;
            mag[d] += pj * f64::from(x.abs()) / l;
        }
    }
    (o, mag)
}

/// The (row, head) pairs a check covers: all of them for a short sequence, else a sample.
fn positions(g: &mut impl Rng, shape: PrefillShape) -> Vec<(usize, usize)> {
    let (seq, hq) = (shape.seq as usize, shape.q_heads as usize);
    if seq <= 128 {
        return (0..seq).flat_map(|r| (0..hq).map(move |h| (r, h))).collect();
    }
    let mut at = vec![(0, 0), (seq - 1, hq - 1)];
    at.extend((0..254).map(|_| (g.random_range(0..seq), g.random_range(0..hq))));
    at
}

fn check(
    what: &str,
    shape: PrefillShape,
    ops: [&[f32]; 3],
    got: &[f32],
    at: &[(usize, usize)],
    bf16: bool,
) -> CaseResult {
    let hq = shape.q_heads as usize;
    let mut worst = 0f64;
    for &(r, h) in at {
        let (want, mag) = row_reference(shape, ops, r, h);
        for d in 0..D {
            let x = got[(r * hq + h) * D + d];
            let tol = mag[d] / 128.0 + if bf16 { want[d].abs() / 256.0 } else { 0.0 } + 1e-5;
            let e = (f64::from(x) - want[d]).abs() / tol;
            // A NaN (the poison, or a kernel's) fails as well as a large error.
            if e.is_nan() || e > 1.0 {
                return Err(format!(
                    "{what} {shape}: row {r} head {h} dim {d}: {x} against {} (tolerance {tol})",
                    want[d]
                ));
            }
            worst = worst.max(e);
        }
    }
    Ok(format!("{what} {shape} {:.2} of tol", worst))
}

/// The child's case: checks, then the timings.
pub fn prefill_case() -> CaseResult {
    let mut g = rng();
    let checks = [
        PrefillShape::new(1, 32, 4, true),
        PrefillShape::new(7, 32, 4, true),
        PrefillShape::new(100, 32, 4, false),
        PrefillShape::new(129, 3, 1, true),
        PrefillShape::new(1000, 32, 4, true),
        PrefillShape::new(1000, 32, 4, false),
        PrefillShape::new(4096, 32, 4, true),
        PrefillShape::new(4095, 8, 1, false),
    ];
    let timed = [1024u32, 4096, 16384].map(|seq| PrefillShape::new(seq, 32, 4, true));
    with_scope(|s, mut gpu| {
        let lib = Prefill::new(s).map_err(err)?;
        let mut lines = Vec::new();
        // The simulator's reference would take hours at the long shapes: it runs the short ones and says so.
        let sim = s.platform() == "sim";
        if sim {
            lines.push("sim: seq <= 129 only, no timings".to_string());
        }
        for shape in checks.into_iter().chain(timed).filter(|sh| !sim || sh.seq <= 129) {
            let seed: u64 = g.random();
            let qb = mm::random_bf16(seed, shape.q_elements() as usize);
            let kb = mm::random_bf16(seed ^ 1, shape.kv_elements() as usize);
            let vb = mm::random_bf16(seed ^ 2, shape.kv_elements() as usize);
            let [q, k, v] = [&qb, &kb, &vb].map(|t| s.alloc_device_from(t));
            let (q, k, v) = (q.map_err(err)?, k.map_err(err)?, v.map_err(err)?);
            let mut out = super::common::poisoned_f32(s, shape.q_elements() as usize).map_err(err)?;
            let done = lib.bf16(gpu, &q, &k, &v, &mut out, shape).map_err(|f| format!("{shape}: {f}"))?;
            let mut out16 = s.alloc::<u16>(shape.q_elements() as usize).map_err(err)?;
            out16.fill(0x7fc1).map_err(err)?;
            let done =
                lib.bf16_to_bf16(done.gpu, &q, &k, &v, &mut out16, shape).map_err(|f| format!("{shape}: {f}"))?;
            gpu = done.gpu;
            let ops = [mm::bf16s_to_f32(&qb), mm::bf16s_to_f32(&kb), mm::bf16s_to_f32(&vb)];
            let ops = [&ops[0][..], &ops[1][..], &ops[2][..]];
            let at = positions(&mut g, shape);
            lines.push(check("f32", shape, ops, &out.to_vec().map_err(err)?, &at, false)?);
            let got16 = mm::bf16s_to_f32(&out16.to_vec().map_err(err)?);
            check("bf16", shape, ops, &got16, &at, true)?;
            if timed.contains(&shape) {
                let mut best = u64::MAX;
                for _ in 0..5 {
                    let d = lib.bf16(gpu, &q, &k, &v, &mut out, shape).map_err(|f| format!("{shape}: {f}"))?;
                    best = best.min(d.device_ns);
                    gpu = d.gpu;
                }
                let tflops = shape.flops() / best as f64 / 1e3;
                lines.push(format!("prefill.{}.causal.omega_ms {:.4}", shape.seq, best as f64 / 1e6));
                lines.push(format!("prefill.{}.causal.omega_tflops {tflops:.1}", shape.seq));
            }
        }
        Ok(lines.join("; "))
    })
}
