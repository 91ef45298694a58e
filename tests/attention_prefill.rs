//! The prefill attention (`omega::libs::attention::prefill`) on the simulator: random bf16 inputs, the
//! output poisoned first, checked against an f64 attention; causal and full, GQA 32/4 at seq 1, 7, 100
//! and 1000 and small odd shapes (ragged 128-row blocks, one kv head, as many kv heads as q heads); the
//! bf16 output, a command list, the refusals with their stages, and the kernel's reference faulting on
//! launches it is not written for.
//!
//! Tolerance: the scores are exact in f64 (products of bf16); the kernel's f32 scores and exp2 are good
//! to ~2^-20 relative, but its probabilities P enter the PV product rounded to bf16 (8 significant bits:
//! relative error at most 2^-8 each) while the row sum l is of the unrounded ones, so an output is off
//! by at most `2^-8 · Σ_j p_j |v_j| / l` plus f32 rounding. `2^-7` times that magnitude (the f64
//! reference's `Σ p |v|`) leaves a factor of 2, and still catches a kv block lost or doubled (a whole
//! block's share of the magnitude, at least 1/8 of it at seq 1000). A bf16 output adds its own
//! rounding, 2^-8 |out|.
//! Each test prints its seed (`OMEGA_PREFILL_SEED` replays it).

use omega::kernels::matmul as refs;
use omega::libs::attention::prefill::{Prefill, PrefillError, PrefillOperand, PrefillShape};
use omega::{Gpu, Scope, Scoped, Stage};

/// What an output holds before the call: a NaN no attention of finite inputs gives.
const POISON: f32 = f32::from_bits(0x7fc0_dead);
const POISON_BF16: u16 = 0x7fc1;
const D: usize = 128;

fn seed(test: &str) -> u64 {
    let seed = std::env::var("OMEGA_PREFILL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    println!("{test}: seed {seed} (rerun with OMEGA_PREFILL_SEED={seed})");
    seed
}

fn on_sim<R>(f: impl for<'s> FnOnce(&'s Scope<'s>, Gpu<'s>) -> R) -> R {
    let dev = omega::lock().open().expect("open");
    assert_eq!(dev.platform(), "sim", "these tests run where there is no GPU");
    // Reopened, so a fault a test provoked before does not stay on the channel.
    match dev.close().open().expect("reopen").scope(f) {
        Scoped::Open(_, r) => r,
        Scoped::Latched(..) => panic!("a library call latched the process"),
    }
}

/// Random q, k, v (bf16 bit patterns uniform in [-1, 1]) for `shape`.
fn inputs(seed: u64, shape: PrefillShape) -> [Vec<u16>; 3] {
    let (nq, nkv) = (shape.q_elements() as usize, shape.kv_elements() as usize);
    [refs::random_bf16(seed, nq), refs::random_bf16(seed ^ 1, nkv), refs::random_bf16(seed ^ 2, nkv)]
}

/// Rows `[seq, 128]` of head `h` of a `[seq, heads, 128]` tensor, widened.
fn head_rows(t: &[u16], seq: usize, heads: usize, h: usize) -> Vec<f32> {
    (0..seq).flat_map(|s| refs::bf16s_to_f32(&t[(s * heads + h) * D..][..D])).collect()
}

/// The f64 attention of every head: `[seq, q_heads, 128]` values and magnitudes (`Σ p |v| / Σ p`).
fn reference(shape: PrefillShape, [q, k, v]: &[Vec<u16>; 3]) -> (Vec<f64>, Vec<f64>) {
    let (seq, hq, hkv) = (shape.seq as usize, shape.q_heads as usize, shape.kv_heads as usize);
    let mut out = vec![0f64; seq * hq * D];
    let mut mag = vec![0f64; seq * hq * D];
    for g in 0..hkv {
        let kh = head_rows(k, seq, hkv, g);
        let vh = head_rows(v, seq, hkv, g);
        let vt: Vec<f32> = (0..D).flat_map(|d| (0..seq).map(move |j| (d, j))).map(|(d, j)| vh[j * D + d]).collect();
        for h in g * (hq / hkv)..(g + 1) * (hq / hkv) {
            let (s, _) = refs::products_f64(&head_rows(q, seq, hq, h), &kh, D);
            // Each row's probabilities, normalised, as f32 rows of the PV product (2^-24 off, far below
            // the tolerance).
            let mut p = vec![0f32; seq * seq];
            for r in 0..seq {
                let n = if shape.causal { r + 1 } else { seq };
                let row = &s[r * seq..][..n];
                let m = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x));
                let e: Vec<f64> = row.iter().map(|&x| ((x - m) * f64::from(shape.scale)).exp()).collect();
                let l: f64 = e.iter().sum();
                for (j, x) in e.into_iter().enumerate() {
                    p[r * seq + j] = (x / l) as f32;
                }
            }
            let (o, om) = refs::products_f64(&p, &vt, seq);
            for r in 0..seq {
                let at = (r * hq + h) * D;
                out[at..at + D].copy_from_slice(&o[r * D..][..D]);
                mag[at..at + D].copy_from_slice(&om[r * D..][..D]);
            }
        }
    }
    (out, mag)
}

fn check(what: &str, got: &[f32], shape: PrefillShape, inputs: &[Vec<u16>; 3], bf16_out: bool) {
    let (want, mag) = reference(shape, inputs);
    assert_eq!(got.len(), want.len());
    let mut worst = 0f64;
    for (i, (&g, (&w, &m))) in got.iter().zip(want.iter().zip(&mag)).enumerate() {
        let out_round = if bf16_out { w.abs() / 256.0 } else { 0.0 };
        let tol = m / 128.0 + out_round + 1e-6;
        let err = (f64::from(g) - w).abs();
        assert!(
            err <= tol,
            "{what} {shape}: row {} head {} dim {}: {g} against {w} (magnitude {m}, tolerance {tol})",
            i / D / shape.q_heads as usize,
            i / D % shape.q_heads as usize,
            i % D
        );
        worst = worst.max(err / tol);
    }
    println!("{what} {shape}: worst error {worst:.3} of the tolerance");
}

/// One f32-out prefill of `shape` on random inputs, checked.
fn run_f32(what: &str, shape: PrefillShape) {
    let data = inputs(seed(what), shape);
    let got = on_sim(|s, gpu| {
        let [q, k, v] = [&data[0], &data[1], &data[2]].map(|t| s.alloc_device_from(t).unwrap());
        let mut out = s.alloc_device_from(&vec![POISON; shape.q_elements() as usize]).unwrap();
        let p = Prefill::new(s).unwrap();
        p.bf16(gpu, &q, &k, &v, &mut out, shape).unwrap();
        out.to_vec().unwrap()
    });
    check(what, &got, shape, &data, false);
}

#[test]
fn gqa_32_4_matches_the_f64_attention_causal_and_full() {
    for seq in [1, 7, 100] {
        for causal in [true, false] {
            run_f32("gqa", PrefillShape::new(seq, 32, 4, causal));
        }
    }
}

#[test]
fn gqa_32_4_at_seq_1000_causal() {
    run_f32("gqa 1000", PrefillShape::new(1000, 32, 4, true));
}

#[test]
fn small_odd_shapes_match_the_f64_attention() {
    // Ragged blocks just past a boundary, one kv head for three q heads, as many kv heads as q heads,
    // a scale other than 1/sqrt(128).
    run_f32("odd", PrefillShape::new(129, 3, 1, true));
    run_f32("odd", PrefillShape::new(257, 2, 2, false));
    run_f32("odd", PrefillShape::new(1000, 2, 1, false));
    run_f32("odd", PrefillShape { scale: 0.3, ..PrefillShape::new(200, 4, 2, true) });
}

#[test]
fn a_bf16_output_is_the_attention_rounded_and_a_command_list_repeats_it() {
    let shape = PrefillShape::new(300, 4, 1, true);
    let data = inputs(seed("bf16"), shape);
    let n = shape.q_elements() as usize;
    let (direct, listed) = on_sim(|s, gpu| {
        let [q, k, v] = [&data[0], &data[1], &data[2]].map(|t| s.alloc_device_from(t).unwrap());
        let mut out = s.alloc_device_from(&vec![POISON_BF16; n]).unwrap();
        let listed = s.alloc_device_from(&vec![POISON; n]).unwrap();
        let p = Prefill::new(s).unwrap();
        let gpu = p.bf16_to_bf16(gpu, &q, &k, &v, &mut out, shape).unwrap().gpu;
        let mut list = s.cmdlist().unwrap();
        p.add_bf16(&mut list, &q, &k, &v, &listed, shape).unwrap();
        assert_eq!(list.len(), 1);
        let _gpu = gpu.submit(&mut list).unwrap().gpu;
        drop(list);
        let mut listed = listed;
        (out.to_vec().unwrap(), listed.to_vec().unwrap())
    });
    check("bf16 out", &refs::bf16s_to_f32(&direct), shape, &data, true);
    check("command list", &listed, shape, &data, false);
}

#[test]
fn bad_shapes_are_refused_with_their_stage_and_nothing_runs() {
    /// Whether a failure is the refusal a case expects.
    type Refusal = fn(&PrefillError) -> bool;
    on_sim(|s, gpu| {
        let q = s.alloc_device_from(&vec![0u16; 7 * 4 * D]).unwrap();
        let kv = s.alloc_device_from(&vec![0u16; 7 * 2 * D]).unwrap();
        let mut out = s.alloc_device_from(&vec![POISON; 7 * 4 * D]).unwrap();
        let p = Prefill::new(s).unwrap();
        let mut gpu = gpu;
        let cases: [(PrefillShape, Refusal); 5] = [
            (PrefillShape::new(0, 4, 2, true), |e| matches!(e, PrefillError::ZeroSide { .. })),
            (PrefillShape::new(7, 4, 0, true), |e| matches!(e, PrefillError::ZeroSide { .. })),
            (PrefillShape::new(7, 4, 3, true), |e| matches!(e, PrefillError::Heads { .. })),
            (
                PrefillShape::new(8, 4, 2, true),
                |e| matches!(e, PrefillError::Short { operand: PrefillOperand::Q, needs, .. } if *needs == 8 * 4 * 128),
            ),
            (PrefillShape::new(7, 4, 4, false), |e| {
                matches!(e, PrefillError::Short { operand: PrefillOperand::K, .. })
            }),
        ];
        for (shape, want) in cases {
            let f = p.bf16(gpu, &q, &kv, &kv, &mut out, shape).unwrap_err();
            assert!(want(&f.error), "{shape}: {:?}", f.error);
            assert_eq!(f.error.stage(), Stage::PrefillShape);
            assert!(f.error.to_string().starts_with("prefill shape: "), "{}", f.error);
            gpu = f.gpu.expect("nothing ran: the token comes back");
        }
        assert!(out.to_vec().unwrap().iter().all(|x| x.to_bits() == POISON.to_bits()), "nothing was written");
    });
}

/// The Xid and text of a launch that faulted.
#[track_caller]
fn fault_of<T>(r: Result<T, omega::LaunchError<'_>>) -> (u32, String) {
    match r {
        Ok(_) => panic!("the launch completed; a fault was expected"),
        Err(e) => match &e.error {
            omega::Error::Fault(f) => (f.xid, e.error.to_string()),
            other => panic!("expected a fault, got {other}"),
        },
    }
}

#[test]
fn the_kernel_faults_on_a_launch_it_is_not_written_for_naming_why() {
    use omega::kernels::prefill as pk;
    use omega::tma::encode_tiled;
    // (grid, dynamic shared, k's descriptor spec altered, what the fault names)
    type Alter = fn(&mut omega::tma::TiledSpec);
    let cases: [([u32; 3], u32, Alter, &str); 4] = [
        ([4, 2, 1], pk::PREFILL_SMEM_BYTES, |_| {}, "written for [4, 1, 1]"),
        ([4, 1, 1], pk::PREFILL_SMEM_BYTES - 1024, |_| {}, "its stages need"),
        ([4, 1, 1], pk::PREFILL_SMEM_BYTES, |m| m.box_dim[2] = 64, "box [64, 1, 64]"),
        ([4, 1, 1], pk::PREFILL_SMEM_BYTES, |m| m.fill = omega::tma::TmaFill::NanRequestZeroFma, "a NaN fill"),
    ];
    for (grid, shared, alter, names) in cases {
        let (xid, text) = on_sim(|s, gpu| {
            let module = s.load_cuda_module(pk::PREFILL).unwrap();
            let kernel = module.kernel(pk::PREFILL_BF16_F32).unwrap();
            let q = s.alloc_device_from(&vec![0u16; 7 * 4 * D]).unwrap();
            let kv = s.alloc_device_from(&vec![0u16; 7 * 2 * D]).unwrap();
            let out = s.alloc_device_from(&vec![POISON; 7 * 4 * D]).unwrap();
            let mut k_spec = pk::prefill_tmap(kv.va(), 7, 2);
            alter(&mut k_spec);
            let mut maps = encode_tiled(&pk::prefill_tmap(q.va(), 7, 4)).unwrap().0.to_vec();
            maps.extend_from_slice(&encode_tiled(&k_spec).unwrap().0);
            maps.extend_from_slice(&encode_tiled(&pk::prefill_tmap(kv.va(), 7, 2)).unwrap().0);
            let maps = s.alloc_device_from(&maps).unwrap();
            let l = omega::Launch::new(&kernel)
                .grid(grid)
                .block([pk::PREFILL_THREADS, 1, 1])
                .dynamic_shared(shared)
                .arg(maps.va())
                .arg(maps.va() + 128)
                .arg(maps.va() + 256)
                .arg(out.va())
                .arg(7u32)
                .arg(4u32)
                .arg(2u32)
                .arg(1u32)
                .arg(0.1f32);
            fault_of(gpu.launch(&l))
        });
        assert!(xid == 13 && text.contains(names), "{names}: {text}");
    }
}
