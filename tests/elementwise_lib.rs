//! The elementwise library (`omega::libs::elementwise`) and its C entries on the simulator: every op in
//! f32 and bf16 on random inputs, the output poisoned first, against f64 references with the bounds
//! `omega::kernels::elementwise` argues (`rmsnorm_f64`, `rope_f64`, `swiglu_f64`); the vector and the
//! scalar paths (odd widths, a buffer one element off 16-byte alignment); RoPE at positions near 40960
//! with theta 1e6 (tables built in f64); command lists; the refusals, each with its stage. Shapes: 1x1,
//! odd widths 7, 33, 1000 and Qwen3-30B-A3B's widths (hidden 2048, head dim 128 with 32 q / 4 kv heads,
//! intermediate 768 and 6144) at few rows (CI is a debug build; the GPU suite and examples/ew_bench.rs
//! run 16384 rows). Each test prints its seed (`OMEGA_EW_SEED` replays it). Tests take turns on the
//! process's one lock.

use omega::kernels::elementwise::{
    bf16_bound, first_miss, rmsnorm_f64, rope_f64, rope_tables, swiglu_f64, NORM_ROPE_WHOLE,
    NORM_ROPE_WHOLE_MAX_VECTORS, ROPE_VEC,
};
use omega::libs::elementwise::{DeviceSpan, Elementwise, EwElem, EwError, Heads, Op, Rows, ShapeError};
use omega::{Device, Gpu, Mem, Scope, Scoped, Stage};
use omega_refmath::{bf16_to_f32, f32_to_bf16};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const POISON: f32 = f32::from_bits(0x7fc0_dead);
const EPS: f32 = 1e-6;

fn rng(test: &str) -> SmallRng {
    let seed = std::env::var("OMEGA_EW_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    println!("{test}: seed {seed} (rerun with OMEGA_EW_SEED={seed})");
    SmallRng::seed_from_u64(seed)
}

fn on_sim<R>(f: impl for<'s> FnOnce(&'s Scope<'s>, Gpu<'s>) -> R) -> R {
    let dev = omega::lock().open().expect("open");
    assert_eq!(dev.platform(), "sim", "these tests run where there is no GPU");
    match dev.scope(f) {
        Scoped::Open(_, r) => r,
        Scoped::Latched(..) => panic!("a library call latched the process"),
    }
}

/// An element type under test: f32, or bf16 bits with f32 values that are exactly bf16.
trait T: EwElem + Copy {
    fn of(v: f32) -> Self;
    fn val(self) -> f32;
    fn poison() -> Self;
}
impl T for f32 {
    fn of(v: f32) -> Self {
        v
    }
    fn val(self) -> f32 {
        self
    }
    fn poison() -> Self {
        POISON
    }
}
impl T for u16 {
    fn of(v: f32) -> Self {
        f32_to_bf16(v)
    }
    fn val(self) -> f32 {
        bf16_to_f32(self)
    }
    fn poison() -> Self {
        0x7fc1
    }
}

/// `n` random values in [-scale, scale), as `E` holds them.
fn random<E: T>(g: &mut SmallRng, n: usize, scale: f32) -> Vec<E> {
    (0..n).map(|_| E::of(g.random_range(-scale..scale))).collect()
}

fn vals<E: T>(v: &[E]) -> Vec<f32> {
    v.iter().map(|e| e.val()).collect()
}

/// Checks `got` against `want` within `tol` (widened for a bf16 output).
fn check<E: T>(what: &str, got: &[E], want: &[f64], mut tol: Vec<f64>) {
    if E::BF16 {
        bf16_bound(want, &mut tol);
    }
    if let Some((i, g, w, t)) = first_miss(&vals(got), want, &tol) {
        panic!("{what}: element {i} is {g}, the f64 reference {w} (bound {t})");
    }
}

/// A device buffer of `v` one element past a 16-byte boundary when `skew` (the scalar path), as a span.
fn placed<'s, E: T>(s: &'s Scope<'s>, v: &[E], skew: bool) -> (Mem<'s, Device<E>>, DeviceSpan<E>) {
    let off = usize::from(skew);
    let mut data = vec![E::poison(); v.len() + off];
    data[off..].copy_from_slice(v);
    let m = s.alloc_device_from(&data).unwrap();
    // SAFETY: the span lies inside `m`, which the caller keeps for as long as it uses the span.
    let span = unsafe { DeviceSpan::new(m.va() + (off * size_of::<E>()) as u64, v.len()) };
    (m, span)
}

/// Reads `len` elements of `span` (inside `m`, `skew` elements in).
fn read<E: T>(m: &mut Mem<'_, Device<E>>, skew: bool, len: usize) -> Vec<E> {
    let off = usize::from(skew);
    m.to_vec().unwrap()[off..off + len].to_vec()
}

const WIDTHS: [(u32, u32); 7] = [(1, 1), (3, 7), (2, 33), (5, 1000), (4, 2048), (2, 4096), (1, 6144)];

/// Launches `call`, handing the token back.
fn run<'s>(ew: &Elementwise<'s>, gpu: Gpu<'s>, call: omega::libs::elementwise::EwCall<'_>) -> Gpu<'s> {
    ew.launch(gpu, call).unwrap_or_else(|f| panic!("{f}")).gpu
}

fn rmsnorm_case<'s, E: T>(
    g: &mut SmallRng,
    s: &'s Scope<'s>,
    mut gpu: Gpu<'s>,
    ew: &Elementwise<'s>,
    add: bool,
    skew: bool,
) -> Gpu<'s> {
    for (rows, cols) in WIDTHS {
        let n = (rows * cols) as usize;
        let (x, w, h0) = (random::<E>(g, n, 1.0), random::<E>(g, cols as usize, 2.0), random::<E>(g, n, 1.0));
        let (_xm, xs) = placed(s, &x, skew);
        let (_wm, ws) = placed(s, &w, skew);
        let (mut hm, mut hs) = placed(s, &h0, skew);
        let (mut ym, mut ys) = placed(s, &vec![E::poison(); n], skew);
        let shape = Rows { rows, cols };
        let call = if add {
            ew.add_rmsnorm(&xs, &mut hs, &ws, &mut ys, shape, EPS).unwrap()
        } else {
            ew.rmsnorm(&xs, &ws, &mut ys, shape, EPS).unwrap()
        };
        let info = *call.info();
        assert_eq!(info.op, Some(if add { Op::AddRmsNorm } else { Op::RmsNorm }));
        assert_eq!(info.vectorized, !skew && cols % if E::BF16 { 8 } else { 4 } == 0, "{info:?}");
        gpu = run(ew, gpu, call);
        // The residual: h = x + h in f32, stored as E (the norm reads the stored value).
        let h: Vec<f32> = if add {
            let want: Vec<E> = x.iter().zip(&h0).map(|(a, b)| E::of(a.val() + b.val())).collect();
            let got = read(&mut hm, skew, n);
            assert!(got.iter().zip(&want).all(|(a, b)| a.val().to_bits() == b.val().to_bits()), "h = x + h");
            vals(&want)
        } else {
            vals(&x)
        };
        let (want, tol) = rmsnorm_f64(&h, &vals(&w), cols as usize, EPS);
        let what = format!("rmsnorm add={add} bf16={} {rows}x{cols} skew={skew}", E::BF16);
        check::<E>(&what, &read(&mut ym, skew, n), &want, tol);
    }
    gpu
}

#[test]
fn rmsnorm_and_the_residual_form_match_f64_in_both_types_and_both_paths() {
    let mut g = rng("rmsnorm");
    on_sim(|s, mut gpu| {
        let ew = Elementwise::new(s).unwrap();
        for add in [false, true] {
            for skew in [false, true] {
                gpu = rmsnorm_case::<f32>(&mut g, s, gpu, &ew, add, skew);
                gpu = rmsnorm_case::<u16>(&mut g, s, gpu, &ew, add, skew);
            }
        }
    });
}

/// One RMSNorm call (`add`: the residual form) of `rows x cols` in `E`: the kernel the library plans must
/// be `kernel`, and the output must match f64.
#[allow(clippy::too_many_arguments)]
fn rmsnorm_form_case<'s, E: T>(
    g: &mut SmallRng,
    s: &'s Scope<'s>,
    gpu: Gpu<'s>,
    ew: &Elementwise<'s>,
    [rows, cols]: [u32; 2],
    add: bool,
    kernel: &str,
    what: &str,
) -> Gpu<'s> {
    let n = (rows * cols) as usize;
    let (x, w, h0) = (random::<E>(g, n, 1.0), random::<E>(g, cols as usize, 2.0), random::<E>(g, n, 1.0));
    let (_xm, xs) = placed(s, &x, false);
    let (_wm, ws) = placed(s, &w, false);
    let (_hm, mut hs) = placed(s, &h0, false);
    let (mut ym, mut ys) = placed(s, &vec![E::poison(); n], false);
    let shape = Rows { rows, cols };
    let call = if add {
        ew.add_rmsnorm(&xs, &mut hs, &ws, &mut ys, shape, EPS)
    } else {
        ew.rmsnorm(&xs, &ws, &mut ys, shape, EPS)
    }
    .unwrap();
    assert_eq!(call.info().kernel, kernel, "{what}");
    let gpu = run(ew, gpu, call);
    let h: Vec<f32> =
        if add { x.iter().zip(&h0).map(|(a, b)| E::of(a.val() + b.val()).val()).collect() } else { vals(&x) };
    let (want, tol) = rmsnorm_f64(&h, &vals(&w), cols as usize, EPS);
    check::<E>(what, &read(&mut ym, false, n), &want, tol);
    gpu
}

#[test]
fn rmsnorm_takes_the_warp_form_for_many_rows_and_a_forced_form_that_cannot_run_refuses() {
    use omega::kernels::elementwise as k;
    use omega::libs::elementwise::{EwError, RmsForm, ShapeError, RMSNORM_WARP_MIN_ROWS_PER_SM};
    let mut g = rng("rmsnorm forms");
    on_sim(|s, mut gpu| {
        let ew = Elementwise::new(s).unwrap();
        let many = RMSNORM_WARP_MIN_ROWS_PER_SM * s.device().sm_count;
        let cols = 256u32;
        for (rows, form, bf16, add, kernel) in [
            // The library's own choice: the block form below the threshold, the warp form from it.
            (many - 1, None, false, false, k::RMSNORM[0]),
            (many, None, false, false, k::RMSNORM_WARP[0]),
            (many, None, true, true, k::ADD_RMSNORM_WARP_BF16),
            // The f32 residual form has no warp kernel: the block form, unless the warp form is forced.
            (many, None, false, true, k::ADD_RMSNORM[0]),
            (5, Some(RmsForm::Warp), true, false, k::RMSNORM_WARP[1]),
            (many, Some(RmsForm::Block), true, false, k::RMSNORM[1]),
        ] {
            ew.force_rmsnorm_form(form);
            let what = format!("{rows}x{cols} form {form:?} bf16 {bf16} add {add}");
            gpu = match bf16 {
                true => rmsnorm_form_case::<u16>(&mut g, s, gpu, &ew, [rows, cols], add, kernel, &what),
                false => rmsnorm_form_case::<f32>(&mut g, s, gpu, &ew, [rows, cols], add, kernel, &what),
            };
        }
        // A forced warp form refuses what it cannot run, naming why; nothing is launched.
        ew.force_rmsnorm_form(Some(RmsForm::Warp));
        let refusal = |rows: u32, cols: u32, skew: bool, add: bool| {
            let n = (rows * cols) as usize;
            let (_xm, xs) = placed(s, &vec![0f32; n], skew);
            let (_wm, ws) = placed(s, &vec![0f32; cols as usize], skew);
            let (_hm, mut hs) = placed(s, &vec![0f32; n], skew);
            let (_ym, mut ys) = placed(s, &vec![0f32; n], skew);
            let shape = Rows { rows, cols };
            let r = if add {
                ew.add_rmsnorm(&xs, &mut hs, &ws, &mut ys, shape, EPS)
            } else {
                ew.rmsnorm(&xs, &ws, &mut ys, shape, EPS)
            };
            match r {
                Err(EwError::Shape(e @ ShapeError::FormUnavailable { form: RmsForm::Warp, .. })) => e.to_string(),
                other => panic!("{rows}x{cols} skew {skew} add {add}: {:?}", other.map(|c| *c.info())),
            }
        };
        assert!(refusal(4, 4096, false, false).contains("wider than the 2048 columns"));
        assert!(refusal(4, 2048, true, false).contains("16-byte vectors"));
        assert!(refusal(4, 2048, false, true).contains("no f32 warp-per-row kernel"));
        ew.force_rmsnorm_form(None);
    });
}

/// Positions near 40960 (Qwen3's context), one a token, in a random order.
fn positions(g: &mut SmallRng, tokens: u32) -> Vec<u32> {
    (0..tokens).map(|_| g.random_range(40_900..40_960)).collect()
}

fn rope_case<'s, E: T>(
    g: &mut SmallRng,
    s: &'s Scope<'s>,
    mut gpu: Gpu<'s>,
    ew: &Elementwise<'s>,
    norm: bool,
    skew: bool,
) -> Gpu<'s> {
    // Qwen3-30B-A3B's q (32 heads) and k (4 heads) of head dim 128, and small odd shapes; 96, 192, 256 and
    // 512 reach the whole-row norm entry with lanes past the half-row idle (96, 192) or none (256, 512 bf16).
    let shapes = [(1, 1, 2), (3, 2, 6), (2, 3, 34), (3, 32, 128), (5, 4, 128), (1, 1, 2048)];
    for (tokens, heads, dim) in shapes.into_iter().chain([(2, 3, 96), (2, 2, 192), (1, 2, 256), (1, 2, 512)]) {
        let n = (tokens * heads * dim) as usize;
        let (cos, sin) = rope_tables(&positions(g, tokens), dim, 1e6);
        let (x, w) = (random::<E>(g, n, 1.0), random::<E>(g, dim as usize, 2.0));
        let (_xm, xs) = placed(s, &x, skew);
        let (_wm, ws) = placed(s, &w, false);
        let (cm, sm) = (s.alloc_device_from(&cos).unwrap(), s.alloc_device_from(&sin).unwrap());
        let (mut ym, mut ys) = placed(s, &vec![E::poison(); n], skew);
        let shape = Heads { tokens, heads, dim };
        let call = if norm {
            ew.norm_rope(&xs, &ws, &cm, &sm, &mut ys, shape, EPS).unwrap()
        } else {
            ew.rope(&xs, &cm, &sm, &mut ys, shape).unwrap()
        };
        assert_eq!(call.info().vectorized, !skew && dim % 8 == 0, "{:?}", call.info());
        let v = ROPE_VEC[usize::from(E::BF16)];
        let whole = norm && !skew && dim % (2 * v) == 0 && dim <= NORM_ROPE_WHOLE_MAX_VECTORS * v;
        let expected = if whole { NORM_ROPE_WHOLE[usize::from(E::BF16)] } else { call.info().kernel };
        assert_eq!(call.info().kernel, expected, "{:?}", call.info());
        assert!(whole || !call.info().kernel.contains("whole"), "{:?}", call.info());
        gpu = run(ew, gpu, call);
        let xv = vals(&x);
        let (normed, pre): (Vec<f64>, f64) = if norm {
            let (v, _) = rmsnorm_f64(&xv, &vals(&w), dim as usize, EPS);
            (v, (f64::from(dim) + 16.0) * f64::powi(2.0, -23))
        } else {
            (xv.iter().map(|&v| f64::from(v)).collect(), 0.0)
        };
        let (want, tol) = rope_f64(&normed, &cos, &sin, heads as usize, dim as usize, pre);
        let what = format!("rope norm={norm} bf16={} {tokens}x{heads}x{dim} skew={skew}", E::BF16);
        check::<E>(&what, &read(&mut ym, skew, n), &want, tol);
    }
    gpu
}

#[test]
fn rope_and_qk_norm_rope_match_f64_at_positions_near_40960_with_theta_1e6() {
    let mut g = rng("rope");
    on_sim(|s, mut gpu| {
        let ew = Elementwise::new(s).unwrap();
        for norm in [false, true] {
            for skew in [false, true] {
                gpu = rope_case::<f32>(&mut g, s, gpu, &ew, norm, skew);
                gpu = rope_case::<u16>(&mut g, s, gpu, &ew, norm, skew);
            }
        }
    });
}

fn swiglu_case<'s, E: T>(
    g: &mut SmallRng,
    s: &'s Scope<'s>,
    mut gpu: Gpu<'s>,
    ew: &Elementwise<'s>,
    fused: bool,
    skew: bool,
) -> Gpu<'s> {
    for (rows, cols) in [(1, 1), (3, 7), (2, 33), (2, 1000), (3, 768), (2, 6144)] {
        let n = (rows * cols) as usize;
        let gate_up = random::<E>(g, 2 * n, 8.0);
        let (gate, up): (Vec<E>, Vec<E>) = if fused {
            let rows_of = |half: usize| -> Vec<E> {
                gate_up
                    .chunks(2 * cols as usize)
                    .flat_map(|r| r[half * cols as usize..][..cols as usize].to_vec())
                    .collect()
            };
            (rows_of(0), rows_of(1))
        } else {
            (gate_up[..n].to_vec(), gate_up[n..].to_vec())
        };
        let (_gm, gs) = placed(s, if fused { &gate_up } else { &gate }, skew);
        let (_um, us) = placed(s, &up, skew);
        let (mut ym, mut ys) = placed(s, &vec![E::poison(); n], skew);
        let shape = Rows { rows, cols };
        let call = if fused {
            ew.swiglu_fused(&gs, &mut ys, shape).unwrap()
        } else {
            ew.swiglu(&gs, &us, &mut ys, shape).unwrap()
        };
        gpu = run(ew, gpu, call);
        let (want, tol) = swiglu_f64(&vals(&gate), &vals(&up));
        let what = format!("swiglu fused={fused} bf16={} {rows}x{cols} skew={skew}", E::BF16);
        check::<E>(&what, &read(&mut ym, skew, n), &want, tol);
    }
    gpu
}

#[test]
fn swiglu_plain_and_over_the_fused_gate_up_output_match_f64() {
    let mut g = rng("swiglu");
    on_sim(|s, mut gpu| {
        let ew = Elementwise::new(s).unwrap();
        for fused in [false, true] {
            for skew in [false, true] {
                gpu = swiglu_case::<f32>(&mut g, s, gpu, &ew, fused, skew);
                gpu = swiglu_case::<u16>(&mut g, s, gpu, &ew, fused, skew);
            }
        }
    });
}

#[test]
fn swiglu_from_f32_into_bf16_rounds_once_as_a_cast_after_it_would() {
    let mut g = rng("swiglu_to_bf16");
    on_sim(|s, mut gpu| {
        let ew = Elementwise::new(s).unwrap();
        for skew in [false, true] {
            for (rows, cols) in [(1, 1), (3, 7), (2, 33), (8, 768), (2, 6144)] {
                let (n, c) = ((rows * cols) as usize, cols as usize);
                let gate_up = random::<f32>(&mut g, 2 * n, 8.0);
                let (_gm, gs) = placed(s, &gate_up, skew);
                let (mut ym, mut ys) = placed(s, &vec![u16::poison(); n], skew);
                let call = ew.swiglu_fused_to_bf16(&gs, &mut ys, Rows { rows, cols }).unwrap();
                let info = call.info();
                assert!(info.bf16 && info.vectorized == (!skew && cols % 4 == 0), "{info:?}");
                assert_eq!(info.bytes, n as u64 * 10);
                gpu = run(&ew, gpu, call);
                let gate: Vec<f32> = gate_up.chunks(2 * c).flat_map(|r| r[..c].to_vec()).collect();
                let up: Vec<f32> = gate_up.chunks(2 * c).flat_map(|r| r[c..].to_vec()).collect();
                let (want, tol) = swiglu_f64(&gate, &up);
                let got = read(&mut ym, skew, n);
                check::<u16>(&format!("swiglu f32->bf16 {rows}x{cols} skew={skew}"), &got, &want, tol);
                // Bit for bit what the f32 kernel's result rounds to.
                let (mut fm, mut fs) = placed(s, &vec![f32::poison(); n], false);
                let call = ew.swiglu_fused(&gs, &mut fs, Rows { rows, cols }).unwrap();
                gpu = run(&ew, gpu, call);
                let f32_then_cast: Vec<u16> = read(&mut fm, false, n).iter().map(|&v| u16::of(v)).collect();
                assert_eq!(got, f32_then_cast, "{rows}x{cols} skew={skew}");
            }
        }
        let x = s.alloc_device::<f32>(100).unwrap();
        let mut y = s.alloc_device::<u16>(64).unwrap();
        let e = ew.swiglu_fused_to_bf16(&x, &mut y, Rows { rows: 2, cols: 32 }).unwrap_err();
        assert_eq!(e.stage(), Stage::ElementwiseShape, "{e}");
    });
}

#[test]
fn calls_recorded_in_a_command_list_run_in_one_submission_and_a_copy_moves_the_bytes() {
    let mut g = rng("cmdlist");
    on_sim(|s, gpu| {
        let ew = Elementwise::new(s).unwrap();
        let (rows, cols) = (4u32, 2048u32);
        let n = (rows * cols) as usize;
        let (x, w) = (random::<u16>(&mut g, n, 1.0), random::<u16>(&mut g, cols as usize, 2.0));
        let (xm, wm) = (s.alloc_device_from(&x).unwrap(), s.alloc_device_from(&w).unwrap());
        let mut y = s.alloc_device_from(&vec![0x7fc1u16; n]).unwrap();
        let mut gu = s.alloc_device_from(&random::<u16>(&mut g, 2 * n, 4.0)).unwrap();
        let mut z = s.alloc_device_from(&vec![0x7fc1u16; n]).unwrap();
        let mut copy = s.alloc_device::<u16>(n).unwrap();
        let gu_host = gu.to_vec().unwrap();
        {
            let mut list = s.cmdlist().unwrap();
            let a = ew.rmsnorm(&xm, &wm, &mut y, Rows { rows, cols }, EPS).unwrap();
            ew.record(&mut list, a).unwrap();
            let b = ew.swiglu_fused(&gu, &mut z, Rows { rows, cols }).unwrap();
            ew.record(&mut list, b).unwrap();
            let c = ew.copy(&xm, &mut copy, n).unwrap();
            assert_eq!(c.info().bytes, 4 * n as u64);
            ew.record(&mut list, c).unwrap();
            assert_eq!(list.len(), 3);
            let _gpu = gpu.submit(&mut list).unwrap().gpu;
        }
        let (want, tol) = rmsnorm_f64(&vals(&x), &vals(&w), cols as usize, EPS);
        check::<u16>("list rmsnorm", &y.to_vec().unwrap(), &want, tol);
        let c = cols as usize;
        let gate: Vec<f32> = gu_host.chunks(2 * c).flat_map(|r| vals(&r[..c])).collect();
        let up: Vec<f32> = gu_host.chunks(2 * c).flat_map(|r| vals(&r[c..])).collect();
        let (want, tol) = swiglu_f64(&gate, &up);
        check::<u16>("list swiglu", &z.to_vec().unwrap(), &want, tol);
        assert_eq!(copy.to_vec().unwrap(), x);
    });
}

#[test]
fn bad_shapes_are_refused_naming_both_sides_before_anything_launches() {
    on_sim(|s, _gpu| {
        let ew = Elementwise::new(s).unwrap();
        let x = s.alloc_device::<f32>(64).unwrap();
        let w = s.alloc_device::<f32>(8).unwrap();
        let mut y = s.alloc_device::<f32>(64).unwrap();
        let stage = |e: EwError| {
            assert_eq!(e.stage(), Stage::ElementwiseShape, "{e}");
            assert!(e.to_string().starts_with("elementwise shape: "), "{e}");
            e.to_string()
        };
        let e = ew.rmsnorm(&x, &w, &mut y, Rows { rows: 8, cols: 9 }, EPS).unwrap_err();
        assert_eq!(stage(e), "elementwise shape: x is a buffer of 64 elements; rows=8 cols=9 needs x of 72 elements");
        let e = ew.rmsnorm(&x, &w, &mut y, Rows { rows: 0, cols: 8 }, EPS).unwrap_err();
        assert!(matches!(e, EwError::Shape(ShapeError::ZeroSide { .. })), "{e}");
        stage(e);
        let tables = s.alloc_device::<f32>(64).unwrap();
        let e = ew.rope(&x, &tables, &tables, &mut y, Heads { tokens: 2, heads: 1, dim: 7 }).unwrap_err();
        assert!(matches!(e, EwError::Shape(ShapeError::OddDim { .. })), "{e}");
        let e =
            ew.norm_rope(&x, &w, &tables, &tables, &mut y, Heads { tokens: 2, heads: 2, dim: 16 }, EPS).unwrap_err();
        assert_eq!(
            stage(e),
            "elementwise shape: w is a buffer of 8 elements; tokens=2 heads=2 dim=16 needs w of 16 elements"
        );
        let e = ew.swiglu_fused(&x, &mut y, Rows { rows: 2, cols: 64 }).unwrap_err();
        assert_eq!(
            stage(e),
            "elementwise shape: gate_up is a buffer of 64 elements; rows=2 cols=64 needs gate_up of 256 elements"
        );
        let e = ew.copy(&x, &mut y, 3).unwrap_err();
        assert!(matches!(e, EwError::Shape(ShapeError::CopyBytes { bytes: 12 })), "{e}");
    });
}

#[test]
fn the_c_entries_compute_refuse_null_pointers_and_bad_shapes_with_their_stages() {
    use omega::ffi::elementwise::*;
    let mut g = rng("c entries");
    let last = || {
        // SAFETY: the library's last error is a NUL-terminated buffer that lives for the process.
        unsafe { std::ffi::CStr::from_ptr(omega_gpu_elementwise_last_error()) }.to_str().unwrap().to_owned()
    };
    let _lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (rows, cols) = (3u32, 1000u32);
    let n = (rows * cols) as usize;
    let (x, w): (Vec<f32>, Vec<f32>) = (random(&mut g, n, 1.0), random(&mut g, cols as usize, 2.0));
    let mut y = vec![POISON; n];
    let mut info = OmegaGpuEwInfo::default();
    // SAFETY: every pointer points to as many floats as the shape says; `info` is writable.
    let rc = unsafe { omega_gpu_rmsnorm_f32(rows, cols, x.as_ptr(), w.as_ptr(), EPS, y.as_mut_ptr(), &mut info) };
    assert_eq!(rc, OMEGA_GPU_EW_OK, "{}", last());
    assert_eq!((info.op, info.rows, info.cols, info.launches), (OMEGA_GPU_EW_OP_RMSNORM, rows, cols, 1));
    assert_ne!(info.flags & OMEGA_GPU_EW_FLAG_HOST_POINTERS, 0);
    assert_eq!((info.h2d_bytes, info.d2h_bytes), (4 * (n + cols as usize) as u64, 4 * n as u64));
    let (want, tol) = rmsnorm_f64(&x, &w, cols as usize, EPS);
    check::<f32>("C rmsnorm", &y, &want, tol);

    let dim = 128u32;
    let xr: Vec<f32> = random(&mut g, 4 * dim as usize, 1.0);
    let (cos, sin) = rope_tables(&[40_959, 0, 17, 40_000], dim, 1e6);
    let mut yr = vec![POISON; xr.len()];
    // SAFETY: as above: x and y [4, 128], the tables [4, 64].
    let rc = unsafe { omega_gpu_rope_f32(4, dim, xr.as_ptr(), cos.as_ptr(), sin.as_ptr(), yr.as_mut_ptr(), &mut info) };
    assert_eq!(rc, OMEGA_GPU_EW_OK, "{}", last());
    let xd: Vec<f64> = xr.iter().map(|&v| f64::from(v)).collect();
    let (want, tol) = rope_f64(&xd, &cos, &sin, 1, dim as usize, 0.0);
    check::<f32>("C rope", &yr, &want, tol);

    let (gate, up): (Vec<f32>, Vec<f32>) = (random(&mut g, 777, 8.0), random(&mut g, 777, 1.0));
    let mut ys = vec![POISON; 777];
    // SAFETY: as above, 777 floats each.
    let rc = unsafe { omega_gpu_swiglu_f32(777, gate.as_ptr(), up.as_ptr(), ys.as_mut_ptr(), &mut info) };
    assert_eq!(rc, OMEGA_GPU_EW_OK, "{}", last());
    let (want, tol) = swiglu_f64(&gate, &up);
    check::<f32>("C swiglu", &ys, &want, tol);

    // Refusals: NULL, a zero side, an odd dim; each named, with its stage in the info.
    // SAFETY: the NULL is refused before anything is read; the rest as above.
    let rc = unsafe { omega_gpu_rmsnorm_f32(rows, cols, std::ptr::null(), w.as_ptr(), EPS, y.as_mut_ptr(), &mut info) };
    assert_eq!((rc, info.stage, info.rc), (OMEGA_GPU_EW_ERR_ARGS, OMEGA_GPU_EW_STAGE_ARGS, rc));
    assert_eq!(last(), "elementwise args: x is NULL");
    // SAFETY: as above.
    let rc = unsafe { omega_gpu_swiglu_f32(0, gate.as_ptr(), up.as_ptr(), ys.as_mut_ptr(), &mut info) };
    assert_eq!((rc, info.stage), (OMEGA_GPU_EW_ERR_SHAPE, OMEGA_GPU_EW_STAGE_SHAPE));
    assert!(last().starts_with("elementwise shape: "), "{}", last());
    // SAFETY: as above (3 rows of 5: the odd dim is refused before anything is read past 3 * 5).
    let rc = unsafe { omega_gpu_rope_f32(3, 5, xr.as_ptr(), cos.as_ptr(), sin.as_ptr(), yr.as_mut_ptr(), &mut info) };
    assert_eq!((rc, info.stage), (OMEGA_GPU_EW_ERR_SHAPE, OMEGA_GPU_EW_STAGE_SHAPE));
    assert!(last().contains("RoPE needs an even head dim"), "{}", last());
    // SAFETY: a static name.
    let name = unsafe { std::ffi::CStr::from_ptr(omega_gpu_elementwise_rc_name(rc)) };
    assert_eq!(name.to_str().unwrap(), "OMEGA_GPU_EW_ERR_SHAPE");

    // A caller holding the lock is refused (LD-4), nothing run.
    let held = omega::lock();
    // SAFETY: as above.
    let rc = unsafe { omega_gpu_swiglu_f32(777, gate.as_ptr(), up.as_ptr(), ys.as_mut_ptr(), &mut info) };
    drop(held);
    assert_eq!((rc, info.stage), (OMEGA_GPU_EW_ERR_LOCK_HELD, OMEGA_GPU_EW_STAGE_LOCK));
}

/// The C entries take the process's lock per call: the test that holds it on purpose takes turns with
/// the others through this.
static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn the_mem_entries_run_bf16_with_the_fusions_on_session_buffers() {
    use omega::ffi::elementwise::*;
    use omega::session::{runtime, GpuMem};
    let mut g = rng("mem entries");
    let _lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (rows, cols) = (2u32, 2048u32);
    let n = (rows * cols) as usize;
    let (x, h0, w) =
        (random::<u16>(&mut g, n, 1.0), random::<u16>(&mut g, n, 1.0), random::<u16>(&mut g, cols as usize, 2.0));
    let bytes = |v: &[u16]| v.iter().flat_map(|b| b.to_le_bytes()).collect::<Vec<u8>>();
    let (xm, hm, wm, ym) = {
        let _dev = omega::lock().open().unwrap();
        let rt = runtime();
        let up = |v: &[u16]| -> GpuMem {
            let m = rt.alloc(v.len() * 2).unwrap();
            rt.write(&m, 0, &bytes(v)).unwrap();
            m
        };
        (up(&x), up(&h0), up(&w), up(&vec![0x7fc1; n]))
    };
    let mut info = OmegaGpuEwInfo::default();
    // SAFETY: the four are live buffers of the session, as long as the shape needs.
    let rc =
        unsafe { omega_gpu_add_rmsnorm_mem(OMEGA_GPU_EW_DTYPE_BF16, rows, cols, &xm, &hm, &wm, EPS, &ym, &mut info) };
    // SAFETY: the library's last error buffer.
    assert_eq!(rc, OMEGA_GPU_EW_OK, "{:?}", unsafe { std::ffi::CStr::from_ptr(omega_gpu_elementwise_last_error()) });
    assert_eq!(info.op, OMEGA_GPU_EW_OP_ADD_RMSNORM);
    assert_eq!(
        info.flags & (OMEGA_GPU_EW_FLAG_BF16 | OMEGA_GPU_EW_FLAG_VECTORIZED),
        OMEGA_GPU_EW_FLAG_BF16 | OMEGA_GPU_EW_FLAG_VECTORIZED
    );
    let back = |m: &GpuMem| -> Vec<u16> {
        let _dev = omega::lock().open().unwrap();
        let mut b = vec![0u8; n * 2];
        runtime().read(m, 0, &mut b).unwrap();
        b.chunks(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()
    };
    let h: Vec<u16> = x.iter().zip(&h0).map(|(a, b)| f32_to_bf16(bf16_to_f32(*a) + bf16_to_f32(*b))).collect();
    assert_eq!(back(&hm), h);
    let (want, tol) = rmsnorm_f64(&vals(&h), &vals(&w), cols as usize, EPS);
    check::<u16>("mem add rmsnorm", &back(&ym), &want, tol);
    // A bad dtype and a NULL buffer, named.
    // SAFETY: as above; the refusals come before any buffer is used.
    let rc = unsafe { omega_gpu_rmsnorm_mem(7, rows, cols, &xm, &wm, EPS, &ym, &mut info) };
    assert_eq!((rc, info.stage), (OMEGA_GPU_EW_ERR_ARGS, OMEGA_GPU_EW_STAGE_ARGS));
    // SAFETY: as above.
    let rc =
        unsafe { omega_gpu_swiglu_mem(OMEGA_GPU_EW_DTYPE_BF16, rows, cols, std::ptr::null(), &xm, &ym, &mut info) };
    assert_eq!((rc, info.stage), (OMEGA_GPU_EW_ERR_ARGS, OMEGA_GPU_EW_STAGE_ARGS));
    // A buffer shorter than the fused gate+up needs: the shape stage, naming both.
    // SAFETY: as above.
    let rc =
        unsafe { omega_gpu_swiglu_mem(OMEGA_GPU_EW_DTYPE_BF16, rows, cols, &xm, std::ptr::null(), &ym, &mut info) };
    assert_eq!((rc, info.stage), (OMEGA_GPU_EW_ERR_SHAPE, OMEGA_GPU_EW_STAGE_SHAPE));
    let _dev = omega::lock().open().unwrap();
    for mut m in [xm, hm, wm, ym] {
        runtime().free(&mut m).unwrap();
    }
}
