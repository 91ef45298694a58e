//! The matmul library (`omega::libs::matmul`) on the simulator: every call checked on random inputs, the
//! output poisoned first, against an f64 product; the planner's paths, the CTA budget counted on the
//! simulator's launch records, the bf16 output, the grouped expert GEMM with random routing, command
//! lists, kept handles across scopes, and the refusals with their stages.
//!
//! Tolerance: every product of two bf16 (or two f32) is exact in f64, so what separates a kernel's result
//! from the f64 sum is its f32 additions: at most about `K · 2^-24 · Σ|x·w|`, twice that with tensor
//! cores' truncating adds. `K · 2^-22 · Σ|x·w|` leaves a factor of 2 to 4 and still catches a lost or
//! doubled 32-element chunk (about `32 / K` of the magnitude) for the K here.
//!
//! Shapes: 1x1x1, primes and ragged tiles, and every Qwen3-30B-A3B matrix — fused QKV (N 5120, K 2048),
//! O (2048, 4096), router (128, 2048), expert gate+up (1536, 2048), expert down (2048, 768), lm_head
//! (151936, 2048) — at small M only (CI runs a debug build: M in {1, 2} for the large ones, more M for the
//! small ones). The GPU suite runs every matrix at M in {1, 2, 4, 8, 16, 32, 64, 128, 512, 4096}
//! (examples/matmul_bench.rs --check on the H200). Large outputs are checked on a sample of columns (every
//! row of them); each test prints its seed (`OMEGA_MATMUL_SEED` replays it). Tests take turns on the
//! process's one lock.

use omega::libs::matmul::{
    self, GroupedShape, Info, KeptMatmul, Matmul, MatmulError, Operand, Path, PlanError, Shape, ShapeError,
};
use omega::testing::SimFault;
use omega::{Device, Gpu, Mem, Scope, Scoped, Stage};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use omega::kernels::matmul as refs;

/// What an output holds before the call: a NaN no product of finite inputs gives.
const POISON: f32 = f32::from_bits(0x7fc0_dead);
const POISON_BF16: u16 = 0x7fc1;

fn rng(test: &str) -> SmallRng {
    let seed = std::env::var("OMEGA_MATMUL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    println!("{test}: seed {seed} (rerun with OMEGA_MATMUL_SEED={seed})");
    SmallRng::seed_from_u64(seed)
}

/// `f` in a scope of a freshly opened simulator, the CTA budget at its default.
fn on_sim<R>(f: impl for<'s> FnOnce(&'s Scope<'s>, Gpu<'s>) -> R) -> R {
    let dev = omega::lock().open().expect("open");
    assert_eq!(dev.platform(), "sim", "these tests run where there is no GPU");
    matmul::set_cta_budget(0);
    match dev.close().open().expect("reopen").scope(f) {
        Scoped::Open(_, r) => r,
        Scoped::Latched(..) => panic!("a library call latched the process"),
    }
}

fn sim() -> std::sync::Arc<omega::testing::Sim> {
    omega::testing::simulator().expect("the simulator is the platform")
}

/// `n` random bf16 bit patterns of magnitude in [2^-7, 2^-3), either sign. Four come from one draw of the
/// generator, masked into range with one operation, so lm_head's 311 million cost about a second in a
/// debug build.
fn bf16s(rng: &mut SmallRng, n: usize) -> Vec<u16> {
    // Per 16 bits: the sign, the exponent's two low bits and the mantissa random; the exponent 0x78..0x7b.
    const RANDOM: u64 = 0x81ff_81ff_81ff_81ff;
    const FIXED: u64 = 0x3c00_3c00_3c00_3c00;
    let words: Vec<u64> = (0..n.div_ceil(4)).map(|_| (rng.random::<u64>() & RANDOM) | FIXED).collect();
    let mut out = vec![0u16; n];
    // SAFETY: `words` holds `4 * words.len() >= n` u16 of initialised bytes (u64 is at least as aligned as
    // u16 and every bit pattern is a valid u16), borrowed only for this copy.
    let bits = unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u16>(), n) };
    out.copy_from_slice(bits);
    out
}

/// A random bf16 matrix of `rows` rows of `cols`: drawn whole up to 16 million elements; larger ones
/// (lm_head's 311 million) copy each row from a random offset of a drawn pool of 4 million, so every row
/// is still its own (two rows agree only if their offsets do) at the cost of a memcpy per row.
fn bf16_matrix(rng: &mut SmallRng, rows: usize, cols: usize) -> Vec<u16> {
    if rows * cols <= 1 << 24 {
        return bf16s(rng, rows * cols);
    }
    let pool = bf16s(rng, (1 << 22) + cols);
    let mut out = Vec::with_capacity(rows * cols);
    for _ in 0..rows {
        let at = rng.random_range(0..1 << 22);
        out.extend_from_slice(&pool[at..at + cols]);
    }
    out
}

fn f32s(rng: &mut SmallRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn widen(v: &[u16]) -> Vec<f32> {
    v.iter().map(|&b| refs::bf16_to_f32(b)).collect()
}

/// The columns a check looks at: all of them for a small product, else a random sample with both edges.
fn columns(rng: &mut SmallRng, m: usize, n: usize, k: usize) -> Vec<usize> {
    if m * n * k <= 1 << 26 {
        return (0..n).collect();
    }
    let mut c: Vec<usize> = (0..256).map(|_| rng.random_range(0..n)).collect();
    c.extend([0, n - 1]);
    c.sort_unstable();
    c.dedup();
    c
}

/// `got` (`[m, n]`) against the f64 product of x (`[m, k]`) and the rows of W that `row` gives, at the
/// columns `cols`, within the tolerance the module comment argues.
#[track_caller]
fn check(what: &str, got: &[f32], x: &[f32], row: impl Fn(usize) -> Vec<f32>, [m, n, k]: [usize; 3], cols: &[usize]) {
    assert_eq!(got.len(), m * n, "{what}: output length");
    for &c in cols {
        let w = row(c);
        for r in 0..m {
            let (want, mag) = refs::dot_f64(&x[r * k..][..k], &w);
            let g = got[r * n + c];
            let bound = k as f64 * 2f64.powi(-22) * mag;
            assert!(
                (f64::from(g) - want).abs() <= bound,
                "{what} {m}x{n}x{k}: y[{r}, {c}] = {g:e} (bits {:#010x}), want {want:e} within {bound:e}",
                g.to_bits()
            );
        }
    }
}

fn poisoned<'s>(s: &'s Scope<'s>, n: usize) -> Mem<'s, Device<f32>> {
    let mut m = s.alloc_device::<f32>(n).unwrap();
    m.write(&vec![POISON; n]).unwrap();
    m
}

/// The grids of the simulator's last `n` launches (it keeps the most recent 4096).
fn last_grids(n: usize) -> Vec<[u32; 3]> {
    let recs = sim().launches();
    recs[recs.len() - n..].iter().map(|r| r.grid).collect()
}

/// One bf16 product through the library, checked; returns what ran.
fn bf16_case<'s>(
    s: &'s Scope<'s>,
    gpu: Gpu<'s>,
    mm: &Matmul<'s>,
    rng: &mut SmallRng,
    what: &str,
    [m, n, k]: [u32; 3],
) -> (Gpu<'s>, Info) {
    let (mu, nu, ku) = (m as usize, n as usize, k as usize);
    let xb = bf16s(rng, mu * ku);
    let wb = bf16_matrix(rng, nu, ku);
    let x = s.alloc_device_from(&xb).unwrap();
    let w = s.alloc_device_from(&wb).unwrap();
    let mut y = poisoned(s, mu * nu);
    let before = sim().stats().launches;
    let done = mm.bf16(gpu, &x, &w, &mut y, Shape::new(m, n, k)).unwrap_or_else(|f| panic!("{what}: {f}"));
    assert_eq!(sim().stats().launches - before, u64::from(done.info.launches), "{what}: the launches the info counts");
    let got = y.to_vec().unwrap();
    let cols = columns(rng, mu, nu, ku);
    let row = |c: usize| widen(&wb[c * ku..][..ku]);
    check(what, &got, &widen(&xb), row, [mu, nu, ku], &cols);
    (done.gpu, done.info)
}

/// Runs `f` with the generator, the scope and a library handle.
fn with_matmul<R>(test: &str, f: impl for<'s> FnOnce(&mut SmallRng, &'s Scope<'s>, Gpu<'s>, Matmul<'s>) -> R) -> R {
    let mut g = rng(test);
    on_sim(|s, gpu| {
        let mm = Matmul::new(s).unwrap();
        f(&mut g, s, gpu, mm)
    })
}

#[test]
fn bf16_products_at_primes_and_ragged_tiles_take_every_path_and_match_f64() {
    let cases: [([u32; 3], Path); 17] = [
        ([1, 1, 1], Path::SimtBf16),
        ([7, 7, 7], Path::SimtBf16),
        ([33, 1000, 33], Path::SimtBf16),
        ([7, 33, 4095], Path::SimtBf16),
        ([1, 1, 32], Path::Gemv),
        ([4, 1000, 4096], Path::Gemv),
        ([7, 1000, 4096], Path::Skinny),
        ([32, 4095, 96], Path::Skinny),
        ([64, 33, 1024], Path::Gemm),
        ([16, 33, 1024], Path::Skinny),
        ([1, 7, 8], Path::Skinny),
        ([33, 4095, 1000], Path::Gemm),
        ([16, 4095, 1000], Path::Skinny),
        ([13, 77, 1000], Path::Skinny),
        ([65, 33, 1000], Path::Gemm),
        ([128, 4095, 1000], Path::Gemm),
        ([1000, 7, 64], Path::Gemm),
    ];
    with_matmul("bf16 paths", |g, s, gpu, mm| {
        let mut gpu = gpu;
        for (shape, path) in cases {
            let (next, info) = bf16_case(s, gpu, &mm, g, &format!("bf16 {shape:?}"), shape);
            gpu = next;
            assert_eq!(info.path, Some(path), "{shape:?}: {info:?}");
            assert_eq!([info.m, info.n, info.k], shape);
            assert!(info.device_ns > 0 && info.host_ns > 0, "{info:?}");
        }
    });
}

#[test]
fn random_small_m_products_with_odd_sides_match_f64_by_the_planner_and_forced_skinny() {
    use matmul::ForcedPlan;
    with_matmul("small m", |g, s, gpu, mm| {
        let mut gpu = gpu;
        for i in 0..24 {
            let m = if i < 8 { [1, 2, 4, 8, 16, 32, 63, 64][i] } else { g.random_range(1..=64) };
            // Odd N; K a multiple of 8 (the skinny GEMM's 16-byte chunks) three times in four, else odd.
            let n = 2 * g.random_range(0..400u32) + 1;
            let k = if i % 4 == 3 { 2 * g.random_range(0..700u32) + 1 } else { 8 * g.random_range(1..=260u32) };
            for forced in [None, Some(ForcedPlan::Skinny { split: None })] {
                let forced = forced.filter(|_| k % 8 == 0);
                mm.set_forced_plan(forced);
                let (next, info) = bf16_case(s, gpu, &mm, g, &format!("{forced:?} [{m}, {n}, {k}]"), [m, n, k]);
                gpu = next;
                if forced.is_some() {
                    assert_eq!(info.path, Some(Path::Skinny), "[{m}, {n}, {k}]");
                }
            }
        }
        mm.set_forced_plan(None);
    });
}

/// The Qwen3-30B-A3B matrices (N, K) and the M the simulator runs each at (the GPU suite runs all ten M).
const QWEN: [(&str, u32, u32, &[u32]); 6] = [
    ("qkv", 5120, 2048, &[1, 2]),
    ("o", 2048, 4096, &[1, 2]),
    ("router", 128, 2048, &[1, 2, 4, 8, 16, 32, 64, 128, 512]),
    ("gate_up", 1536, 2048, &[1, 2, 8, 64]),
    ("down", 2048, 768, &[1, 2, 4, 8, 16, 32, 64, 128]),
    ("lm_head", 151_936, 2048, &[1]),
];

#[test]
fn every_qwen3_30b_a3b_matrix_matches_f64_at_small_m() {
    with_matmul("qwen", |g, s, gpu, mm| {
        let mut gpu = gpu;
        for (name, n, k, ms) in QWEN {
            for &m in ms {
                let (next, info) = bf16_case(s, gpu, &mm, g, &format!("{name} M={m}"), [m, n, k]);
                gpu = next;
                // M <= 4 streams W through the GEMV's row form (past the budget, lm_head's CTAs walk its
                // blocks), M = 5..64 through the skinny GEMM but where the narrow TMA GEMM's cost is lower
                // (the router and gate+up at M = 64, down from M = 32: plan.rs's Qwen test says why), past 64
                // the TMA GEMM.
                let want = match m {
                    1..=4 => Path::Gemv,
                    64 if name == "router" || name == "gate_up" => Path::Gemm,
                    32 | 64 if name == "down" => Path::Gemm,
                    5..=64 => Path::Skinny,
                    _ => Path::Gemm,
                };
                assert_eq!(info.path, Some(want), "{name} M={m}");
                assert_eq!(info.weight_bytes, u64::from(n) * u64::from(k) * 2);
            }
        }
    });
}

#[test]
fn operands_that_do_not_start_16_byte_aligned_take_the_simt_kernel() {
    with_matmul("unaligned", |g, s, gpu, mm| {
        let (m, n, k) = (2usize, 100usize, 64usize);
        let xb = bf16s(g, m * k + 1);
        let wb = bf16s(g, n * k);
        let x = s.alloc_device_from(&xb).unwrap();
        let w = s.alloc_device_from(&wb).unwrap();
        let mut y = poisoned(s, m * n);
        // SAFETY: x's buffer holds m * k + 1 u16, so the span of m * k from element 1 lies inside it, and
        // it lives to the end of the scope.
        let x1 = unsafe { matmul::DeviceSpan::<u16>::new(x.va() + 2, m * k) };
        let done = mm.bf16(gpu, &x1, &w, &mut y, Shape::new(m as u32, n as u32, k as u32)).unwrap();
        assert_eq!(done.info.path, Some(Path::SimtBf16), "a GEMV-shaped product of a misaligned x");
        check(
            "unaligned",
            &y.to_vec().unwrap(),
            &widen(&xb[1..]),
            |c| widen(&wb[c * k..][..k]),
            [m, n, k],
            &(0..n).collect::<Vec<_>>(),
        );
        // A GEMM-shaped product whose f32 output starts 4 bytes into its buffer: the epilogue's float pairs
        // need 8, so the SIMT kernel takes it.
        let (m2, n2) = (130usize, 256usize);
        let x2b = bf16s(g, m2 * k);
        let x2 = s.alloc_device_from(&x2b).unwrap();
        let w2b = bf16s(g, n2 * k);
        let w2 = s.alloc_device_from(&w2b).unwrap();
        let mut y2 = poisoned(s, m2 * n2 + 1);
        // SAFETY: y2 holds m2 * n2 + 1 floats, so the span of m2 * n2 from element 1 lies inside it.
        let mut y2s = unsafe { matmul::DeviceSpan::<f32>::new(y2.va() + 4, m2 * n2) };
        let done = mm.bf16(done.gpu, &x2, &w2, &mut y2s, Shape::new(m2 as u32, n2 as u32, k as u32)).unwrap();
        assert_eq!(done.info.path, Some(Path::SimtBf16), "a GEMM-shaped product into a 4-byte-aligned y");
        let got = y2.to_vec().unwrap();
        check(
            "unaligned y",
            &got[1..],
            &widen(&x2b),
            |c| widen(&w2b[c * k..][..k]),
            [m2, n2, k],
            &(0..n2).collect::<Vec<_>>(),
        );
    });
}

#[test]
fn f32_products_use_the_simt_kernel_and_match_f64() {
    with_matmul("f32", |g, s, gpu, mm| {
        let mut gpu = gpu;
        for [m, n, k] in [[1u32, 1, 1], [7, 33, 1000], [33, 7, 4095], [129, 257, 64], [1, 2048, 768]] {
            let (mu, nu, ku) = (m as usize, n as usize, k as usize);
            let xv = f32s(g, mu * ku);
            let wv = f32s(g, nu * ku);
            let x = s.alloc_device_from(&xv).unwrap();
            let w = s.alloc_device_from(&wv).unwrap();
            let mut y = poisoned(s, mu * nu);
            let done = mm.f32(gpu, &x, &w, &mut y, Shape::new(m, n, k)).unwrap();
            gpu = done.gpu;
            assert_eq!(done.info.path, Some(Path::SimtF32));
            let got = y.to_vec().unwrap();
            check(
                &format!("f32 {m}x{n}x{k}"),
                &got,
                &xv,
                |c| wv[c * ku..][..ku].to_vec(),
                [mu, nu, ku],
                &(0..nu).collect::<Vec<_>>(),
            );
        }
    });
}

#[test]
fn a_bf16_output_is_the_f32_product_rounded_to_nearest_even() {
    with_matmul("bf16 out", |g, s, gpu, mm| {
        let mut gpu = gpu;
        // One shape per path: the GEMV with a split, the split-K TMA GEMM, the SIMT kernel, the skinny GEMM
        // split and not (the GEMV and the skinny GEMM store bf16 themselves, from the same sums as their f32
        // stores).
        for [m, n, k] in [[3u32, 200, 2048], [130, 300, 512], [5, 9, 13], [13, 77, 1000], [64, 130, 64]] {
            let (mu, nu, ku) = (m as usize, n as usize, k as usize);
            let x = s.alloc_device_from(&bf16s(g, mu * ku)).unwrap();
            let w = s.alloc_device_from(&bf16s(g, nu * ku)).unwrap();
            let mut y32 = poisoned(s, mu * nu);
            let shape = Shape::new(m, n, k);
            let d = mm.bf16(gpu, &x, &w, &mut y32, shape).unwrap();
            let mut y16 = s.alloc_device_from(&vec![POISON_BF16; mu * nu]).unwrap();
            let d = mm.bf16_to_bf16(d.gpu, &x, &w, &mut y16, shape).unwrap();
            gpu = d.gpu;
            assert!(d.info.bf16_out);
            let launches = if matches!(d.info.path, Some(Path::Skinny | Path::Gemv)) { 1 } else { 2 };
            assert_eq!(d.info.launches, launches, "the product, then any conversion: {:?}", d.info);
            let want: Vec<u16> = y32.to_vec().unwrap().iter().map(|&v| refs::f32_to_bf16(v)).collect();
            assert_eq!(y16.to_vec().unwrap(), want, "{m}x{n}x{k} ({:?})", d.info.path);
        }
    });
}

#[test]
fn the_gemv_plan_is_the_kernels_planner_and_every_launch_keeps_to_the_cta_budget() {
    with_matmul("budget", |g, s, gpu, mm| {
        let mut gpu = gpu;
        // The default budget: the GEMV's grid is gemv_check.cu's plan (the simulator's reference planner).
        let (next, info) = bf16_case(s, gpu, &mm, g, "o M=4", [4, 2048, 4096]);
        gpu = next;
        let plan = refs::gemv_plan(2048, 4096, s.device().sm_count);
        assert_eq!(last_grids(1), [[plan.blocks, plan.split, 1]]);
        assert_eq!(info.split, plan.split);
        // The TMA GEMM in the form and split the cost model picks: here 2 x 5 tiles of 64 columns,
        // unsplit (2 x 3 narrow ones would take twice the time in the same wave).
        let (next, info) = bf16_case(s, gpu, &mm, g, "fitted gemm", [200, 300, 512]);
        gpu = next;
        let sms = s.device().sm_count;
        let c = matmul::GemmCost::planned(Shape::new(200, 300, 512), sms, matmul::MAX_CTAS, true);
        assert_eq!((c.tile, c.splits), (matmul::GemmTile::N64, 1));
        let narrow = matmul::GemmCost::best(Shape::new(200, 300, 512), sms, matmul::MAX_CTAS, None);
        assert_eq!((narrow.tile, narrow.splits), (matmul::GemmTile::Narrow, 1));
        assert_eq!((info.path, info.split, info.kernel), (Some(Path::Gemm), 1, refs::GEMM_FITTED[3].ts));
        assert_eq!(last_grids(1), [[10, 1, 1]]);
        // A long K: split in whole pipelines, the partial sums added by each tile's last unit.
        let (next, info) = bf16_case(s, gpu, &mm, g, "split-K gemm", [130, 200, 65_536]);
        gpu = next;
        let c = matmul::GemmCost::best(Shape::new(130, 200, 65_536), sms, matmul::MAX_CTAS, None);
        assert!(c.splits > 1, "{c:?}");
        assert_eq!((info.path, info.split), (Some(Path::Gemm), c.splits));
        assert_eq!(last_grids(1), [[u32::try_from(c.units).unwrap().min(sms), 1, 1]]);
        // Budgets from 1 CTA up: each launch's grid is within it, and the info counts what ran.
        for budget in [1u32, 5, 33, 100, 700] {
            matmul::set_cta_budget(budget);
            assert_eq!(matmul::cta_budget(), budget);
            for shape in [[4u32, 2048, 4096], [130, 1000, 64], [9, 300, 7], [1, 151_936 / 8, 64]] {
                let (next, info) = bf16_case(s, gpu, &mm, g, &format!("budget {budget} {shape:?}"), shape);
                gpu = next;
                let grids = last_grids(info.launches as usize);
                let ctas: Vec<u64> = grids.iter().map(|g| g.iter().map(|&v| u64::from(v)).product()).collect();
                assert!(ctas.iter().all(|&c| c <= u64::from(budget)), "budget {budget} {shape:?}: {ctas:?}");
                assert_eq!(u64::from(info.ctas), *ctas.iter().max().unwrap());
                assert_eq!(info.total_ctas, ctas.iter().sum::<u64>());
                assert_eq!(info.cta_budget, budget);
            }
        }
        matmul::set_cta_budget(5000);
        assert_eq!(matmul::cta_budget(), matmul::MAX_CTAS, "past the maximum: the maximum");
        matmul::set_cta_budget(0);
        assert_eq!(matmul::cta_budget(), matmul::MAX_CTAS, "0: the default");
    });
}

/// The host's routing of `topk` (`[t, top_k]`) over `e` experts: offsets, rows, pairs and the drop count,
/// as the device writes them (slots of one expert in increasing choice order).
fn route(topk: &[u32], top_k: usize, e: usize) -> (Vec<u32>, Vec<u32>, Vec<u32>, u32) {
    let mut offsets = vec![0u32; e + 1];
    let (mut rows, mut pairs) = (Vec::new(), Vec::new());
    for (x, offset) in offsets.iter_mut().enumerate().take(e) {
        *offset = rows.len() as u32;
        for (p, &c) in topk.iter().enumerate() {
            if c as usize == x {
                rows.push((p / top_k) as u32);
                pairs.push(p as u32);
            }
        }
    }
    offsets[e] = rows.len() as u32;
    let dropped = topk.iter().filter(|&&c| c as usize >= e).count() as u32;
    (offsets, rows, pairs, dropped)
}

/// Random top-k choices: `top_k` distinct experts per token, some past `e` (dropped) when `drop`.
fn choices(g: &mut SmallRng, t: usize, top_k: usize, e: usize, drop: bool) -> Vec<u32> {
    let mut out = Vec::with_capacity(t * top_k);
    for _ in 0..t {
        let mut picked: Vec<u32> = Vec::new();
        while picked.len() < top_k {
            let c = if drop && g.random_ratio(1, 10) {
                e as u32 + g.random_range(0..3)
            } else {
                g.random_range(0..e as u32)
            };
            if !picked.contains(&c) || c as usize >= e {
                picked.push(c);
            }
        }
        out.extend(picked);
    }
    if drop && out.iter().all(|&c| (c as usize) < e) {
        // At least one choice names no expert, so the case always exercises the drop count.
        *out.last_mut().expect("at least one choice") = e as u32 + 1;
    }
    out
}

#[test]
fn the_grouped_gemm_routes_on_the_device_and_matches_f64_per_slot() {
    // (tokens, top_k, experts, N, K, drop some choices)
    // (tokens, top_k, experts, N, K, drop some choices, CTA budget)
    let cases = [
        (1, 8, 128, 64, 2048, false, matmul::MAX_CTAS),
        (8, 8, 128, 96, 128, false, matmul::MAX_CTAS),
        (64, 8, 128, 70, 256, false, matmul::MAX_CTAS),
        // A budget below the list: the CTAs walk its entries.
        (64, 8, 128, 70, 256, true, 5),
        (64, 4, 16, 130, 64, true, matmul::MAX_CTAS),
        (3, 2, 5, 1, 32, true, 1),
    ];
    with_matmul("grouped", |g, s, gpu, mm| {
        let mut gpu = gpu;
        for (t, top_k, e, n, k, drop, budget) in cases {
            matmul::set_cta_budget(budget);
            let shape = GroupedShape { tokens: t, top_k, experts: e, n, k };
            let (tu, ku, nu, eu, p) = (t as usize, k as usize, n as usize, e as usize, (t * top_k) as usize);
            let xb = bf16s(g, tu * ku);
            let wb = bf16s(g, eu * nu * ku);
            let topk = choices(g, tu, top_k as usize, eu, drop);
            let x = s.alloc_device_from(&xb).unwrap();
            let w = s.alloc_device_from(&wb).unwrap();
            let tk = s.alloc_device_from(&topk).unwrap();
            let layout = shape.routing();
            let mut routing = s.alloc_device_from(&vec![0xdead_beefu32; layout.words]).unwrap();
            let mut y = poisoned(s, p * nu);
            let before = sim().stats().launches;
            let done = mm.grouped_bf16(gpu, &x, &w, &tk, &mut routing, &mut y, shape).unwrap();
            gpu = done.gpu;
            assert_eq!(done.info.path, Some(Path::Grouped));
            // The route kernel, then ONE grouped GEMV whose z spans the list's room, within the budget.
            assert_eq!((sim().stats().launches - before, done.info.launches), (2, 2), "{shape}");
            let grids = last_grids(2);
            let blocks = n.div_ceil(64);
            let room = (t * top_k).min(e);
            assert_eq!(grids[0], [1, 1, 1], "{shape}: the route kernel");
            assert_eq!([grids[1][0], grids[1][1]], [blocks, done.info.split], "{shape}");
            assert!(
                grids[1][2] <= room && grids[1].iter().product::<u32>() <= budget,
                "{shape} budget {budget}: {grids:?}"
            );
            assert_eq!(u64::from(done.info.ctas), u64::from(grids[1].iter().product::<u32>()));
            let r = routing.to_vec().unwrap();
            let (offsets, rows, pairs, dropped) = route(&topk, top_k as usize, eu);
            let placed = rows.len();
            assert_eq!(&r[layout.offsets..][..eu + 1], &offsets[..], "{shape}: offsets");
            assert_eq!(&r[layout.rows..][..placed], &rows[..], "{shape}: rows");
            assert_eq!(&r[layout.pairs..][..placed], &pairs[..], "{shape}: pairs");
            assert_eq!(r[layout.dropped], dropped, "{shape}: drop count");
            let listed: Vec<u32> = (0..e).filter(|&x| offsets[x as usize] != offsets[x as usize + 1]).collect();
            assert_eq!(r[layout.active] as usize, listed.len(), "{shape}: touched count");
            assert_eq!(&r[layout.experts..][..listed.len()], &listed[..], "{shape}: touched experts");
            assert_eq!(drop, dropped > 0, "{shape}: the case drops what it means to");
            let got = y.to_vec().unwrap();
            let xf = widen(&xb);
            for x_e in 0..eu {
                for slot in offsets[x_e] as usize..offsets[x_e + 1] as usize {
                    let token = rows[slot] as usize;
                    let row = |c: usize| widen(&wb[(x_e * nu + c) * ku..][..ku]);
                    let what = format!("{shape} slot {slot} (expert {x_e}, token {token})");
                    check(
                        &what,
                        &got[slot * nu..][..nu],
                        &xf[token * ku..][..ku],
                        row,
                        [1, nu, ku],
                        &(0..nu).collect::<Vec<_>>(),
                    );
                }
            }
            assert!(
                got[placed * nu..].iter().all(|v| v.to_bits() == POISON.to_bits()),
                "{shape}: rows past the placed slots untouched"
            );
        }
        matmul::set_cta_budget(0);
    });
}

/// The grouped product over an existing routing (a mixture-of-experts down projection): a gate+up-like
/// product routes random choices, then a second product of another (N, K) reads that routing with x one
/// row per SLOT; every filled slot's row is checked against f64, the unfilled rows stay poisoned, and it
/// is one launch (no route kernel), run alone and recorded in a list.
#[test]
fn the_grouped_product_over_an_existing_routing_reads_x_by_slot() {
    // (tokens, top_k, experts, N of the down product, K of it, drop some choices, CTA budget)
    let cases = [
        (1, 8, 128, 64, 768, false, matmul::MAX_CTAS),
        (3, 2, 8, 256, 128, false, matmul::MAX_CTAS),
        (16, 4, 16, 70, 64, true, matmul::MAX_CTAS),
        (5, 2, 5, 33, 96, true, 3),
    ];
    with_matmul("grouped routed", |g, s, gpu, mm| {
        let mut gpu = gpu;
        for (t, top_k, e, n, k, drops, budget) in cases {
            matmul::set_cta_budget(budget);
            let route_shape = GroupedShape { tokens: t, top_k, experts: e, n: 32, k: 32 };
            let shape = GroupedShape { n, k, ..route_shape };
            let (tu, ku, nu, eu, p) = (t as usize, k as usize, n as usize, e as usize, (t * top_k) as usize);
            let topk = choices(g, tu, top_k as usize, eu, drops);
            let x0 = s.alloc_device_from(&bf16s(g, tu * 32)).unwrap();
            let w0 = s.alloc_device_from(&bf16s(g, eu * 32 * 32)).unwrap();
            let tk = s.alloc_device_from(&topk).unwrap();
            let mut routing = s.alloc_device_from(&vec![0xdead_beefu32; shape.routing().words]).unwrap();
            let mut y0 = poisoned(s, p * 32);
            gpu = mm.grouped_bf16(gpu, &x0, &w0, &tk, &mut routing, &mut y0, route_shape).unwrap().gpu;
            let xb = bf16s(g, p * ku);
            let wb = bf16s(g, eu * nu * ku);
            let x = s.alloc_device_from(&xb).unwrap();
            let w = s.alloc_device_from(&wb).unwrap();
            let (offsets, rows, _, _) = route(&topk, top_k as usize, eu);
            let placed = rows.len();
            let mut y = poisoned(s, p * nu);
            let before = sim().stats().launches;
            let done = mm.grouped_routed_bf16(gpu, &x, &w, &routing, &mut y, shape).unwrap();
            gpu = done.gpu;
            assert_eq!((sim().stats().launches - before, done.info.launches), (1, 1), "{shape}: no route kernel");
            assert!(last_grids(1)[0].iter().product::<u32>() <= budget, "{shape} budget {budget}");
            let mut yl = poisoned(s, p * nu);
            let mut list = s.cmdlist().unwrap();
            mm.add_grouped_routed_bf16(&mut list, &x, &w, &routing, &yl, shape).unwrap();
            assert_eq!(list.len(), 1, "{shape}: one launch in the list");
            gpu = gpu.submit(&mut list).unwrap().gpu;
            drop(list);
            let (got, listed) = (y.to_vec().unwrap(), yl.to_vec().unwrap());
            assert!(got.iter().zip(&listed).all(|(a, b)| a.to_bits() == b.to_bits()), "{shape}: list == call");
            let xf = widen(&xb);
            for x_e in 0..eu {
                for slot in offsets[x_e] as usize..offsets[x_e + 1] as usize {
                    let row = |c: usize| widen(&wb[(x_e * nu + c) * ku..][..ku]);
                    check(
                        &format!("{shape} slot {slot} (expert {x_e})"),
                        &got[slot * nu..][..nu],
                        &xf[slot * ku..][..ku],
                        row,
                        [1, nu, ku],
                        &(0..nu).collect::<Vec<_>>(),
                    );
                }
            }
            assert!(
                got[placed * nu..].iter().all(|v| v.to_bits() == POISON.to_bits()),
                "{shape}: rows past the placed slots untouched"
            );
        }
        matmul::set_cta_budget(0);
        let _gpu = gpu;
    });
}

#[test]
fn a_forced_plan_runs_what_it_names_checked_against_f64_or_is_refused_by_name() {
    use matmul::{ForcedPlan, ForcedRefusal, GemmTile};
    with_matmul("forced", |g, s, gpu, mm| {
        let mut gpu = gpu;
        // (shape, forced, the kernel's path and split in the info)
        let cases = [
            ([64, 1536, 2048], ForcedPlan::Gemv { split: None }, Path::Gemv, 16),
            ([130, 200, 512], ForcedPlan::Gemv { split: Some(2) }, Path::Gemv, 2),
            ([16, 300, 2048], ForcedPlan::Gemm { tile: GemmTile::Narrow, splits: Some(1) }, Path::Gemm, 1),
            ([16, 300, 2048], ForcedPlan::Gemm { tile: GemmTile::Wide, splits: Some(4) }, Path::Gemm, 4),
            ([4, 129, 1032], ForcedPlan::Gemm { tile: GemmTile::Narrow, splits: None }, Path::Gemm, 1),
            ([16, 300, 2048], ForcedPlan::Skinny { split: None }, Path::Skinny, 4),
            ([64, 129, 1000], ForcedPlan::Skinny { split: Some(3) }, Path::Skinny, 3),
            ([1, 77, 520], ForcedPlan::Skinny { split: Some(1) }, Path::Skinny, 1),
        ];
        for (shape, forced, path, split) in cases {
            mm.set_forced_plan(Some(forced));
            assert_eq!(mm.forced_plan(), Some(forced));
            let (next, info) = bf16_case(s, gpu, &mm, g, &format!("{forced} {shape:?}"), shape);
            gpu = next;
            assert_eq!((info.path, info.split), (Some(path), split), "{forced} {shape:?}");
        }
        // Refused, nothing launched: a split K's chunks do not keep, an f32 product.
        let x = s.alloc_device::<u16>(64 * 2048).unwrap();
        let w = s.alloc_device::<u16>(1536 * 2048).unwrap();
        let mut y = s.alloc_device::<f32>(64 * 1536).unwrap();
        let before = sim().stats().launches;
        mm.set_forced_plan(Some(ForcedPlan::Gemv { split: Some(9) }));
        let mut f = mm.bf16(gpu, &x, &w, &mut y, Shape::new(64, 1536, 2048)).unwrap_err();
        assert!(
            matches!(
                f.error,
                MatmulError::Plan(PlanError::Forced { why: ForcedRefusal::SplitNotKept { asked: 9, kept: 8 }, .. })
            ),
            "{}",
            f.error
        );
        assert_eq!(f.error.stage(), Stage::MatmulPlan);
        assert_eq!(
            f.error.to_string(),
            "matmul plan: M=64 N=1536 K=2048: the GEMV with 9 split cannot run it: K divides into 8 slices, not the 9 asked"
        );
        // The fitted widths have TMA-store and cluster entries alone.
        for forced in [
            ForcedPlan::Gemm { tile: GemmTile::N160, splits: Some(1) },
            ForcedPlan::GemmStreamK { tile: GemmTile::N192 },
        ] {
            mm.set_forced_plan(Some(forced));
            let g = f.gpu.unwrap();
            let e = mm.bf16(g, &x, &w, &mut y, Shape::new(64, 1536, 2048)).unwrap_err();
            assert!(
                matches!(
                    e.error,
                    MatmulError::Plan(PlanError::Forced { why: ForcedRefusal::NoEntryForTile { .. }, .. })
                ),
                "{}",
                e.error
            );
            assert_eq!(e.error.stage(), Stage::MatmulPlan);
            f = e;
        }
        assert_eq!(
            f.error.to_string(),
            "matmul plan: M=64 N=1536 K=2048: the n192 TMA GEMM in stream-K order cannot run it: the stream_k entry has no kernel on the n192 tile"
        );
        let (xf, wf) = (s.alloc_device::<f32>(8).unwrap(), s.alloc_device::<f32>(8).unwrap());
        let mut yf = s.alloc_device::<f32>(1).unwrap();
        let f = mm.f32(f.gpu.unwrap(), &xf, &wf, &mut yf, Shape::new(1, 1, 8)).unwrap_err();
        assert!(
            matches!(f.error, MatmulError::Plan(PlanError::Forced { why: ForcedRefusal::NotBf16, .. })),
            "{}",
            f.error
        );
        assert_eq!(sim().stats().launches, before, "no refusal launched anything");
        mm.set_forced_plan(None);
        let done = mm.f32(f.gpu.unwrap(), &xf, &wf, &mut yf, Shape::new(1, 1, 8)).unwrap();
        assert_eq!(done.info.path, Some(Path::SimtF32), "unforced again");
    });
}

#[test]
fn the_swapped_small_m_gemm_runs_forced_at_every_box_into_f32_and_bf16_and_refuses_what_it_cannot_run() {
    use matmul::{ForcedPlan, ForcedRefusal};
    with_matmul("swapab", |g, s, gpu, mm| {
        let mut gpu = gpu;
        // (shape, splits asked, the entry): every box height, ragged W tiles and K, the planner's split.
        let cases = [
            ([1u32, 300, 1000], Some(1), 0),
            ([8, 129, 136], Some(3), 0),
            ([16, 77, 2048], None, 1),
            ([31, 256, 520], Some(2), 2),
            ([64, 130, 1000], None, 3),
        ];
        for (shape, splits, v) in cases {
            let forced = ForcedPlan::Swapab { splits };
            mm.set_forced_plan(Some(forced));
            let (next, info) = bf16_case(s, gpu, &mm, g, &format!("{forced} {shape:?}"), shape);
            gpu = next;
            let f = refs::GEMM_SWAPAB[v];
            assert_eq!((info.path, info.kernel, info.launches), (Some(Path::Gemm), f.f32, 1), "{forced} {shape:?}");
            if let Some(asked) = splits {
                assert_eq!(info.split, asked, "{forced} {shape:?}");
            }
            // A bf16 y: the `_y16` entry stores the f32 product rounded, in the same one launch.
            let [m, n, k] = shape.map(|d| d as usize);
            let x = s.alloc_device_from(&bf16s(g, m * k)).unwrap();
            let w = s.alloc_device_from(&bf16s(g, n * k)).unwrap();
            let mut y32 = poisoned(s, m * n);
            let shape = Shape::new(shape[0], shape[1], shape[2]);
            gpu = mm.bf16(gpu, &x, &w, &mut y32, shape).unwrap().gpu;
            let want: Vec<u16> = y32.to_vec().unwrap().iter().map(|&v| refs::f32_to_bf16(v)).collect();
            let mut y16 = s.alloc_device_from(&vec![POISON_BF16; m * n]).unwrap();
            let d = mm.bf16_to_bf16(gpu, &x, &w, &mut y16, shape).unwrap();
            gpu = d.gpu;
            assert_eq!((d.info.launches, d.info.kernel), (1, f.y16), "{:?}", d.info);
            assert_eq!(y16.to_vec().unwrap(), want, "{forced} {shape}: bf16 y");
        }
        // Refused by name, nothing launched: past 64 rows, K % 8 != 0, a split of 0, a split K's blocks
        // do not keep (32 blocks in 3 splits of 11 keep 3; 5 of 7 keep 4).
        let x = s.alloc_device::<u16>(65 * 2048).unwrap();
        let w = s.alloc_device::<u16>(256 * 2048).unwrap();
        let mut y = s.alloc_device::<f32>(65 * 256).unwrap();
        let before = sim().stats().launches;
        let refusals = [
            ([65, 256, 2048], None, ForcedRefusal::MPastPath { max: 64 }),
            ([64, 256, 2044], None, ForcedRefusal::KNotMultiple { of: 8 }),
            ([64, 256, 2048], Some(0), ForcedRefusal::ZeroSplit),
            ([64, 256, 448], Some(5), ForcedRefusal::SplitNotKept { asked: 5, kept: 4 }),
        ];
        for ([m, n, k], splits, why) in refusals {
            mm.set_forced_plan(Some(ForcedPlan::Swapab { splits }));
            let f = mm.bf16(gpu, &x, &w, &mut y, Shape::new(m, n, k)).unwrap_err();
            assert!(
                matches!(f.error, MatmulError::Plan(PlanError::Forced { why: w, .. }) if w == why),
                "{m}x{n}x{k}: {}",
                f.error
            );
            assert_eq!(f.error.stage(), Stage::MatmulPlan);
            gpu = f.gpu.unwrap();
        }
        assert_eq!(sim().stats().launches, before, "no refusal launched anything");
        mm.set_forced_plan(None);
        let _gpu = gpu;
    });
}

#[test]
fn the_tma_store_and_cluster_entries_run_forced_through_the_library_and_match_f64() {
    use matmul::{ForcedPlan, ForcedRefusal};
    with_matmul("tma store", |g, s, gpu, mm| {
        let mut gpu = gpu;
        // Ragged tiles: N % 4 == 0 through y's descriptor (an odd count of tile rows, whose last pair's
        // second tile lies past M), N % 4 == 2 and 3 stored directly (pairs of floats, single floats),
        // one row, N below a box.
        let shapes = [[130u32, 300, 72], [257, 514, 200], [1, 7, 8], [300, 1024, 520], [129, 4, 64], [64, 1002, 136]];
        use matmul::GemmTile::{Narrow, Wide, N160, N192, N64, N96};
        let entries = [
            (Wide, false, refs::GEMM_BF16_TN_TS),
            (Wide, true, refs::GEMM_BF16_TN_MC),
            (Narrow, false, refs::GEMM_BF16_TN_TS_N128),
            (Narrow, true, refs::GEMM_BF16_TN_MC_N128),
            (N160, false, refs::GEMM_FITTED[0].ts),
            (N160, true, refs::GEMM_FITTED[0].mc),
            (N192, false, refs::GEMM_FITTED[1].ts),
            (N192, true, refs::GEMM_FITTED[1].mc),
            (N96, false, refs::GEMM_FITTED[2].ts),
            (N96, true, refs::GEMM_FITTED[2].mc),
            (N64, false, refs::GEMM_FITTED[3].ts),
            (N64, true, refs::GEMM_FITTED[3].mc),
        ];
        // Each as its forced plan, and the ping-pong entry (the narrow tile's, one CTA a tile).
        let entries: Vec<(ForcedPlan, bool, &str)> = entries
            .into_iter()
            .map(|(tile, cluster, name)| (ForcedPlan::GemmTmaStore { tile, cluster }, cluster, name))
            .chain([(ForcedPlan::GemmPingPong { tile: Narrow }, false, refs::GEMM_BF16_TN_PP_N128)])
            .collect();
        // Each entry's bf16-output form.
        let y16_of = |name: &str| refs::y16_form(name).unwrap_or_else(|| panic!("{name} has a _y16 form"));
        for &(forced, cluster, name) in &entries {
            mm.set_forced_plan(Some(forced));
            for shape in shapes {
                let (next, info) = bf16_case(s, gpu, &mm, g, &format!("{forced} {shape:?}"), shape);
                gpu = next;
                assert_eq!((info.path, info.kernel, info.split, info.launches), (Some(Path::Gemm), name, 1, 1));
                let rec = sim().launches().last().unwrap().clone();
                assert_eq!(rec.kernel, name);
                assert_eq!(rec.features.cluster, if cluster { [2, 1, 1] } else { [1, 1, 1] }, "{shape:?}");
                assert!(!cluster || rec.grid[0].is_multiple_of(2), "whole pairs: {:?}", rec.grid);
                // tmap_y (words 4 and 5): the workspace's third descriptor when N % 4 == 0, else 0.
                let tmap_y = u64::from(rec.args[4]) | u64::from(rec.args[5]) << 32;
                assert_eq!(tmap_y == 0, shape[1] % 4 != 0, "{shape:?}: tmap_y {tmap_y:#x}");
            }
        }
        // A bf16 output: at N % 8 == 0 the entry's `_y16` form stores it through a bf16 descriptor of y (one
        // launch); at other N (and below, into a y that is not 16-byte aligned), y's descriptor at the
        // workspace's f32 product, then the conversion. The same bits as the f32 product rounded.
        for [m, n, k] in [[200u32, 520, 136], [70, 258, 64], [70, 260, 64], [130, 96, 72]] {
            let (mu, nu, ku) = (m as usize, n as usize, k as usize);
            let x = s.alloc_device_from(&bf16s(g, mu * ku)).unwrap();
            let w = s.alloc_device_from(&bf16s(g, nu * ku)).unwrap();
            let shape = Shape::new(m, n, k);
            mm.set_forced_plan(None);
            let mut y32 = poisoned(s, mu * nu);
            gpu = mm.bf16(gpu, &x, &w, &mut y32, shape).unwrap().gpu;
            let want: Vec<u16> = y32.to_vec().unwrap().iter().map(|&v| refs::f32_to_bf16(v)).collect();
            for &(forced, cluster, name) in &entries {
                mm.set_forced_plan(Some(forced));
                let mut y16 = s.alloc_device_from(&vec![POISON_BF16; mu * nu]).unwrap();
                let d = mm.bf16_to_bf16(gpu, &x, &w, &mut y16, shape).unwrap();
                gpu = d.gpu;
                let (launches, kernel) = if n % 8 == 0 { (1, y16_of(name)) } else { (2, name) };
                assert_eq!((d.info.launches, d.info.bf16_out, d.info.kernel), (launches, true, kernel), "{:?}", d.info);
                if n % 8 == 0 {
                    assert_eq!(sim().launches().last().unwrap().kernel, kernel, "no conversion follows");
                }
                assert_eq!(y16.to_vec().unwrap(), want, "{m}x{n}x{k} {forced} cluster {cluster}");
            }
            if n % 8 == 0 {
                // 2 bytes past a 16-byte boundary: no descriptor of y can exist, so the f32 product and the
                // conversion.
                let big = s.alloc_device_from(&vec![POISON_BF16; mu * nu + 1]).unwrap();
                // SAFETY: `big` holds `m * n + 1` elements and outlives the span, its elements 1.., written
                // by the device only through the call below while `big` is alive.
                let mut off = unsafe { matmul::DeviceSpan::<u16>::new(big.va() + 2, mu * nu) };
                mm.set_forced_plan(Some(ForcedPlan::GemmTmaStore { tile: Wide, cluster: false }));
                let d = mm.bf16_to_bf16(gpu, &x, &w, &mut off, shape).unwrap();
                gpu = d.gpu;
                assert_eq!((d.info.launches, d.info.kernel), (2, refs::GEMM_BF16_TN_TS), "{:?}", d.info);
                let mut big = big;
                assert_eq!(&big.to_vec().unwrap()[1..], &want[..], "{m}x{n}x{k} unaligned bf16 y");
            }
        }
        // The descriptors are written when they change: the same call again writes nothing, another y
        // writes the three, the direct entry after it finds its two in place.
        let (m, n, k) = (150usize, 264usize, 96usize);
        let (xb, wb) = (bf16s(g, m * k), bf16s(g, n * k));
        let x = s.alloc_device_from(&xb).unwrap();
        let w = s.alloc_device_from(&wb).unwrap();
        let shape = Shape::new(m as u32, n as u32, k as u32);
        let cols: Vec<usize> = (0..n).collect();
        let row = |c: usize| widen(&wb[c * k..][..k]);
        mm.set_forced_plan(Some(ForcedPlan::GemmTmaStore { tile: Wide, cluster: false }));
        let (mut y1, mut y2) = (poisoned(s, m * n), poisoned(s, m * n));
        let call = |gpu, y: &mut Mem<'_, Device<f32>>, what: &str| {
            let d = mm.bf16(gpu, &x, &w, y, shape).unwrap();
            check(what, &y.to_vec().unwrap(), &widen(&xb), row, [m, n, k], &cols);
            y.write(&vec![POISON; m * n]).unwrap();
            (d.gpu, d.info)
        };
        let (gpu1, i) = call(gpu, &mut y1, "ts");
        assert_eq!((i.kernel, i.h2d_bytes), (refs::GEMM_BF16_TN_TS, 384), "x's, W's and y's descriptors");
        let (gpu1, i) = call(gpu1, &mut y1, "ts again");
        assert_eq!(i.h2d_bytes, 0, "unchanged descriptors are not written again");
        let (gpu1, i) = call(gpu1, &mut y2, "ts, another y");
        assert_eq!(i.h2d_bytes, 384, "y's descriptor changed");
        mm.set_forced_plan(Some(ForcedPlan::Gemm { tile: matmul::GemmTile::Wide, splits: Some(1) }));
        let (gpu1, i) = call(gpu1, &mut y2, "direct");
        assert_eq!((i.kernel, i.h2d_bytes), (refs::GEMM_BF16_TN, 0), "x's and W's are in place");
        mm.set_forced_plan(Some(ForcedPlan::GemmTmaStore { tile: Wide, cluster: true }));
        let (gpu1, i) = call(gpu1, &mut y2, "cluster");
        assert_eq!((i.kernel, i.h2d_bytes), (refs::GEMM_BF16_TN_MC, 384), "the cluster's W box is another map");
        gpu = gpu1;
        let mut y = y1;
        // Refused, nothing launched: a y 8 bytes past a 16-byte boundary at N % 4 == 0 (N % 4 == 2 runs),
        // a budget below one cluster.
        let before = sim().stats().launches;
        let big = poisoned(s, m * n + 2);
        // SAFETY: `big` holds `m * n + 2` floats and outlives the span; the span is its elements 2.., all
        // inside it, written by the device only through the calls below while `big` is alive.
        let mut off = unsafe { matmul::DeviceSpan::<f32>::new(big.va() + 8, m * n) };
        for &(forced, _, _) in &entries {
            mm.set_forced_plan(Some(forced));
            let f = mm.bf16(gpu, &x, &w, &mut off, shape).unwrap_err();
            assert_eq!(f.error.stage(), Stage::MatmulPlan);
            assert!(
                matches!(f.error, MatmulError::Plan(PlanError::Forced { why: ForcedRefusal::Unaligned, .. })),
                "{}",
                f.error
            );
            gpu = f.gpu.unwrap();
        }
        mm.set_forced_plan(Some(ForcedPlan::GemmTmaStore { tile: Wide, cluster: true }));
        matmul::set_cta_budget(1);
        let f = mm.bf16(gpu, &x, &w, &mut y, shape).unwrap_err();
        matmul::set_cta_budget(0);
        assert_eq!(
            f.error.to_string(),
            "matmul plan: M=150 N=264 K=96: the wide TMA GEMM with a TMA-store epilogue in 2-CTA clusters cannot \
             run it: a cluster of 2 CTAs is past the CTA budget of 1"
        );
        gpu = f.gpu.unwrap();
        assert_eq!(sim().stats().launches, before, "no refusal launched anything");
        // N % 4 == 2 stores directly (pairs of floats): an 8-aligned y is enough.
        let n2 = 258usize;
        let w2b = bf16s(g, n2 * k);
        let w2 = s.alloc_device_from(&w2b).unwrap();
        let mut big = poisoned(s, m * n2 + 2);
        // SAFETY: as above, for `m * n2` floats inside `big`'s `m * n2 + 2`.
        let mut off = unsafe { matmul::DeviceSpan::<f32>::new(big.va() + 8, m * n2) };
        let cols2: Vec<usize> = (0..n2).collect();
        for &(forced, _, _) in &entries {
            mm.set_forced_plan(Some(forced));
            gpu = mm.bf16(gpu, &x, &w2, &mut off, Shape::new(m as u32, n2 as u32, k as u32)).unwrap().gpu;
            let got = big.to_vec().unwrap();
            assert!(got[0].is_nan() && got[1].is_nan(), "nothing stored before y");
            check("direct stores", &got[2..], &widen(&xb), |c| widen(&w2b[c * k..][..k]), [m, n2, k], &cols2);
            big.write(&vec![POISON; m * n2 + 2]).unwrap();
        }
        mm.set_forced_plan(None);
    });
}

#[test]
fn launches_added_to_a_command_list_run_in_one_submission_and_replay() {
    with_matmul("cmdlist", |g, s, gpu, mm| {
        let (m, n, k) = (3usize, 200usize, 2048usize);
        let xb = bf16s(g, m * k);
        let wb = bf16s(g, n * k);
        let x = s.alloc_device_from(&xb).unwrap();
        let w = s.alloc_device_from(&wb).unwrap();
        let y = poisoned(s, m * n);
        let y16 = s.alloc_device_from(&vec![POISON_BF16; m * n]).unwrap();
        let xf = f32s(g, 5 * 9);
        let wf = f32s(g, 4 * 9);
        let (x32, w32) = (s.alloc_device_from(&xf).unwrap(), s.alloc_device_from(&wf).unwrap());
        let y32 = poisoned(s, 5 * 4);
        let gs = GroupedShape { tokens: 2, top_k: 2, experts: 3, n: 64, k: 64 };
        let (xg, wg) = (bf16s(g, 2 * 64), bf16s(g, 3 * 64 * 64));
        let topk = [0u32, 2, 1, 2];
        let (xgm, wgm, tkm) =
            (s.alloc_device_from(&xg).unwrap(), s.alloc_device_from(&wg).unwrap(), s.alloc_device_from(&topk).unwrap());
        let routing = s.alloc_device::<u32>(gs.routing().words).unwrap();
        let yg = poisoned(s, 4 * 64);
        let shape = Shape::new(m as u32, n as u32, k as u32);
        let mut list = s.cmdlist().unwrap();
        let a = mm.add_bf16(&mut list, &x, &w, &y, shape).unwrap();
        assert_eq!(a.path, Some(Path::Gemv));
        assert!(a.split > 1, "a split, so the replay proves the tickets stay zero: {a:?}");
        mm.add_bf16_to_bf16(&mut list, &x, &w, &y16, shape).unwrap();
        mm.add_f32(&mut list, &x32, &w32, &y32, Shape::new(5, 4, 9)).unwrap();
        let gi = mm.add_grouped_bf16(&mut list, &xgm, &wgm, &tkm, &routing, &yg, gs).unwrap();
        // The GEMV stores its bf16 output itself: one launch each product.
        assert_eq!(list.len(), 1 + 1 + 1 + gi.launches as usize);
        let subs = sim().stats().submissions;
        let done = gpu.submit(&mut list).unwrap();
        let _gpu = done.gpu.submit(&mut list).unwrap().gpu;
        assert_eq!(sim().stats().submissions - subs, 2, "one submission each");
        drop(list);
        let (mut y, mut y16, mut y32, mut yg, mut routing) = (y, y16, y32, yg, routing);
        let got = y.to_vec().unwrap();
        check("list bf16", &got, &widen(&xb), |c| widen(&wb[c * k..][..k]), [m, n, k], &(0..n).collect::<Vec<_>>());
        let want16: Vec<u16> = got.iter().map(|&v| refs::f32_to_bf16(v)).collect();
        assert_eq!(y16.to_vec().unwrap(), want16);
        check("list f32", &y32.to_vec().unwrap(), &xf, |c| wf[c * 9..][..9].to_vec(), [5, 4, 9], &[0, 1, 2, 3]);
        let r = routing.to_vec().unwrap();
        assert_eq!(r[gs.routing().dropped], 0, "the drop count is zeroed on the device at each submission");
        let (offsets, rows, _, _) = route(&topk, 2, 3);
        let ygot = yg.to_vec().unwrap();
        for e in 0..3 {
            for slot in offsets[e] as usize..offsets[e + 1] as usize {
                let t = rows[slot] as usize;
                let row = |c: usize| widen(&wg[(e * 64 + c) * 64..][..64]);
                check(
                    "list grouped",
                    &ygot[slot * 64..][..64],
                    &widen(&xg[t * 64..][..64]),
                    row,
                    [1, 64, 64],
                    &(0..64).collect::<Vec<_>>(),
                );
            }
        }
    });
}

#[test]
fn a_command_list_adds_workspace_goes_with_the_list_not_the_handle() {
    with_matmul("list_workspace", |g, s, gpu, mm| {
        // Split K (a scratch of partial sums and tickets each add) and a bf16 output (an f32 product in the
        // scratch): the buffers a recorded product names that no caller owns.
        let (m, n, k) = (4usize, 256usize, 4096usize);
        let (xb, wb) = (bf16s(g, m * k), bf16s(g, n * k));
        let (x, w) = (s.alloc_device_from(&xb).unwrap(), s.alloc_device_from(&wb).unwrap());
        let (y, y16) = (poisoned(s, m * n), s.alloc_device_from(&vec![POISON_BF16; m * n]).unwrap());
        let shape = Shape::new(m as u32, n as u32, k as u32);
        let live = || {
            let a = s.alloc_stats();
            a.allocs - a.frees
        };
        let before = live();
        let mut gpu = gpu;
        for round in 0..3 {
            let mut list = s.cmdlist().unwrap();
            for _ in 0..4 {
                let info = mm.add_bf16(&mut list, &x, &w, &y, shape).unwrap();
                assert!(info.split > 1, "a split product has a scratch of its own: {info:?}");
                mm.add_bf16_to_bf16(&mut list, &x, &w, &y16, shape).unwrap();
            }
            assert!(live() > before, "round {round}: the adds' workspaces are allocated");
            gpu = gpu.submit(&mut list).unwrap().gpu;
            drop(list);
            assert_eq!(live(), before, "round {round}: the dropped list took every workspace buffer with it");
        }
        let _ = gpu;
        let mut y = y;
        let got = y.to_vec().unwrap();
        check("list y", &got, &widen(&xb), |c| widen(&wb[c * k..][..k]), [m, n, k], &(0..n).collect::<Vec<_>>());
    });
}

#[test]
fn refusals_name_their_stage_and_launch_nothing() {
    with_matmul("refusals", |_g, s, gpu, mm| {
        let x = s.alloc_device::<u16>(16).unwrap();
        let w = s.alloc_device::<u16>(24).unwrap();
        let mut y = s.alloc_device::<f32>(6).unwrap();
        let before = sim().stats().launches;
        let f = mm.bf16(gpu, &x, &w, &mut y, Shape::new(0, 3, 8)).unwrap_err();
        assert!(matches!(f.error, MatmulError::Shape(ShapeError::ZeroSide { .. })), "{}", f.error);
        assert_eq!(f.error.stage(), Stage::MatmulShape);
        assert_eq!(f.info.stage, Some(Stage::MatmulShape));
        let gpu = f.gpu.expect("a refusal before any launch hands the token back");
        let f = mm.bf16(gpu, &x, &w, &mut y, Shape::new(2, 4, 8)).unwrap_err();
        assert_eq!(
            f.error.to_string(),
            "matmul shape: w is a buffer of 24 elements; the product M=2 N=4 K=8 needs w [4, 8], 32 elements"
        );
        let f = mm.bf16(f.gpu.unwrap(), &x, &w, &mut y, Shape::new(2, 3, 9)).unwrap_err();
        assert!(
            matches!(f.error, MatmulError::Shape(ShapeError::Short { operand: Operand::X, len: 16, needs: 18, .. })),
            "{}",
            f.error
        );
        let mut short_y = s.alloc_device::<f32>(5).unwrap();
        let f = mm
            .f32(
                f.gpu.unwrap(),
                &s.alloc_device::<f32>(16).unwrap(),
                &s.alloc_device::<f32>(24).unwrap(),
                &mut short_y,
                Shape::new(2, 3, 8),
            )
            .unwrap_err();
        assert!(f.error.to_string().contains("y is a buffer of 5 elements"), "{}", f.error);
        let g = GroupedShape { tokens: 1, top_k: 1, experts: 2, n: 64, k: 48 };
        let tk = s.alloc_device::<u32>(1).unwrap();
        let mut routing = s.alloc_device::<u32>(g.routing().words).unwrap();
        let big = s.alloc_device::<u16>(2 * 64 * 64).unwrap();
        let mut yg = s.alloc_device::<f32>(64).unwrap();
        let f = mm.grouped_bf16(f.gpu.unwrap(), &x, &big, &tk, &mut routing, &mut yg, g).unwrap_err();
        assert!(matches!(f.error, MatmulError::Shape(ShapeError::GroupedK { .. })), "{}", f.error);
        matmul::set_cta_budget(1);
        let g = GroupedShape { k: 64, n: 65, ..g };
        let wide = s.alloc_device::<u16>(2 * 65 * 64).unwrap();
        let mut yw = s.alloc_device::<f32>(65).unwrap();
        let xg = s.alloc_device::<u16>(64).unwrap();
        let f = mm.grouped_bf16(f.gpu.unwrap(), &xg, &wide, &tk, &mut routing, &mut yw, g).unwrap_err();
        matmul::set_cta_budget(0);
        assert_eq!(f.error, MatmulError::Plan(PlanError::ExpertPastBudget { blocks: 2, budget: 1 }));
        assert_eq!(f.error.stage(), Stage::MatmulPlan);
        assert!(f.error.to_string().starts_with("matmul plan: "), "{}", f.error);
        assert_eq!(sim().stats().launches, before, "no refusal launched anything");
    });
}

#[test]
fn a_kept_handle_resumes_in_a_later_scope_and_a_closed_device_makes_it_stale() {
    let mut g = rng("kept");
    let dev = omega::lock().open().expect("open");
    let dev = dev.close().open().unwrap();
    let (dev, kept): (_, KeptMatmul) = dev
        .scope(|s, gpu| {
            let mm = Matmul::new(s).unwrap();
            let (_gpu, info) = bf16_case(s, gpu, &mm, &mut g, "first scope", [2, 100, 64]);
            assert_eq!(info.path, Some(Path::Gemv));
            mm.keep()
        })
        .into_open()
        .unwrap();
    assert!(kept.is_current());
    let loads = sim().stats().live_allocations;
    let (dev, kept) = dev
        .scope(|s, gpu| {
            let mm = Matmul::resume(s, Some(kept)).unwrap();
            let (_gpu, _) = bf16_case(s, gpu, &mm, &mut g, "resumed", [2, 100, 64]);
            mm.keep()
        })
        .into_open()
        .unwrap();
    assert_eq!(sim().stats().live_allocations, loads, "the resumed handle loaded nothing and reused its workspace");
    let dev = dev.close().open().unwrap();
    assert!(!kept.is_current(), "a close makes it stale");
    let r = dev.scope(|s, gpu| {
        let mm = Matmul::resume(s, Some(kept)).unwrap();
        let (_gpu, info) = bf16_case(s, gpu, &mm, &mut g, "after the close", [2, 100, 64]);
        info.path
    });
    assert_eq!(r.value(), Some(Path::Gemv));
}

#[test]
fn a_kept_buffer_is_refused_after_its_device_was_closed() {
    let dev = omega::lock().open().expect("open");
    let (dev, kept) = dev.scope(|s, _| s.keep(s.alloc_device_from(&[1u32, 2, 3]).unwrap())).into_open().unwrap();
    let (dev, ()) = dev
        .scope(|s, _| {
            let m = kept.get(s).unwrap();
            assert_eq!(m.len(), 3);
        })
        .into_open()
        .unwrap();
    let mut kept = kept;
    let (dev, ()) =
        dev.scope(|s, _| assert_eq!(kept.get_mut(s).unwrap().to_vec().unwrap(), [1, 2, 3])).into_open().unwrap();
    let frees = sim().stats().frees;
    let dev = dev.close().open().unwrap();
    let r = dev.scope(|s, _| kept.get(s).map(|_| ()).unwrap_err());
    let e = r.value();
    assert_eq!(e.stage(), Stage::Keep);
    assert!(e.to_string().starts_with("keep: kept in device open "), "{e}");
    let frees_after_close = sim().stats().frees;
    drop(kept);
    assert_eq!(sim().stats().frees, frees_after_close, "a stale kept buffer is forgotten, not freed twice");
    assert!(frees_after_close > frees);
}

/// True in the child process `test` runs in when it must have the process to itself; in the parent, runs
/// that child (this binary, filtered to `test`), requires it to pass and print `done`, and returns false.
fn in_child(test: &str, done: &str) -> bool {
    if std::env::var("OMEGA_MATMUL_CHILD").is_ok_and(|t| t == test) {
        return true;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["--exact", test, "--nocapture"])
        .env("OMEGA_MATMUL_CHILD", test)
        .env("OMEGA_PLATFORM", "sim")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains(done), "{text}");
    false
}

#[test]
fn an_uncertain_completion_inside_a_call_latches_and_takes_the_token() {
    // A latch lasts for the rest of the process: this test runs in a child process of its own.
    if !in_child("an_uncertain_completion_inside_a_call_latches_and_takes_the_token", "latched as it should") {
        return;
    }
    let dev = omega::lock().open().expect("open");
    let r = dev.scope(|s, gpu| {
        let mm = Matmul::new(s).unwrap();
        let x = s.alloc_device::<u16>(64).unwrap();
        let w = s.alloc_device::<u16>(64 * 64).unwrap();
        let mut y = s.alloc_device::<f32>(64).unwrap();
        sim().inject(SimFault::Hang);
        let f = mm.bf16(gpu, &x, &w, &mut y, Shape::new(1, 64, 64)).unwrap_err();
        assert!(f.gpu.is_none(), "an uncertain completion keeps the token");
        assert!(f.error.latched_the_process(), "{}", f.error);
        assert_eq!(f.error.stage(), Stage::Launch);
        assert_eq!(f.info.stage, Some(Stage::Launch));
    });
    let Scoped::Latched(latched, ()) = r else { panic!("the scope must end latched") };
    assert!(latched.parked().buffers > 0);
    println!("latched as it should");
}

#[test]
fn resident_tensors_through_the_c_entries_upload_multiply_report_their_shape_and_free() {
    use omega::ffi::matmul::*;
    // The C entries take the lock per call, so another test's close between two of them would make the
    // tensor stale (refused by name, as it should be): this test has a process of its own.
    if !in_child("resident_tensors_through_the_c_entries_upload_multiply_report_their_shape_and_free", "resident: done")
    {
        return;
    }
    let mut g = rng("resident");
    // The C entries take the lock themselves: nothing here holds it.
    let (m, n, k) = (5usize, 1536usize, 2048usize);
    let xb = bf16s(&mut g, m * k);
    let wb = bf16_matrix(&mut g, n, k);
    let mut t: *mut OmegaGpuTensor = std::ptr::null_mut();
    // SAFETY: `wb` holds n * k u16 and `t` is a writable pointer.
    assert_eq!(unsafe { omega_gpu_tensor_upload_bf16(n as u32, k as u32, wb.as_ptr(), &mut t) }, OMEGA_GPU_MATMUL_OK);
    let (mut rows, mut cols) = (0u32, 0u32);
    // SAFETY: `rows` and `cols` are writable u32.
    unsafe { omega_gpu_tensor_shape(t, &mut rows, &mut cols) };
    assert_eq!((rows, cols), (n as u32, k as u32));
    let mut y = vec![POISON; m * n];
    let mut info = OmegaGpuMatmulInfo::default();
    // SAFETY: `xb` holds m * k u16, `y` m * n f32, `info` is writable; `t` is the live tensor.
    let rc = unsafe { omega_gpu_matmul_resident_bf16(m as u32, xb.as_ptr(), t, y.as_mut_ptr(), &mut info) };
    assert_eq!(rc, OMEGA_GPU_MATMUL_OK);
    assert_eq!(info.path, OMEGA_GPU_MATMUL_PATH_SKINNY);
    assert_ne!(info.flags & OMEGA_GPU_MATMUL_FLAG_RESIDENT, 0);
    assert!(info.h2d_bytes < (wb.len() * 2) as u64, "W stayed on the device: {info:?}");
    assert_eq!(info.d2h_bytes, (m * n * 4) as u64);
    let cols: Vec<usize> = columns(&mut g, m, n, k);
    check("resident gate_up M=5", &y, &widen(&xb), |c| widen(&wb[c * k..][..k]), [m, n, k], &cols);
    omega_gpu_tensor_free(t);
    // SAFETY: as above.
    let rc = unsafe { omega_gpu_matmul_resident_bf16(m as u32, xb.as_ptr(), t, y.as_mut_ptr(), &mut info) };
    assert_eq!(rc, OMEGA_GPU_MATMUL_ERR_TENSOR);
    assert_eq!(info.stage, OMEGA_GPU_MATMUL_STAGE_TENSOR);
    // SAFETY: the library's last error is a NUL-terminated static buffer.
    let text = unsafe { std::ffi::CStr::from_ptr(omega_gpu_matmul_last_error()) }.to_str().unwrap().to_owned();
    assert!(text.starts_with("matmul tensor: ") && text.contains("is not a live tensor"), "{text}");
    omega_gpu_device_close();
    println!("resident: done");
}

/// A call's refusal: its stage, its text and the token it handed back.
fn refusal<'s>(r: Result<matmul::Done<'s>, matmul::Failed<'s>>) -> (Stage, String, Gpu<'s>) {
    let f = r.unwrap_err();
    (f.error.stage(), f.error.to_string(), f.gpu.expect("a refusal hands the token back"))
}

/// `got[r * n + j]` against `silu(g) * u` of x's row r with W's rows j (g) and n + j (u) in f64, within
/// [`refs::swiglu_f64`]'s bound and, for a bf16 y (`half_step`), half a bf16 step more.
fn check_swiglu(what: &str, got: &[f32], x: &[f32], w: &[f32], [m, n, k]: [usize; 3], half_step: bool) {
    assert_eq!(got.len(), m * n, "{what}: output length");
    for r in 0..m {
        let xr = &x[r * k..][..k];
        for j in 0..n {
            let (want, bound) = refs::swiglu_f64(xr, &w[j * k..][..k], &w[(n + j) * k..][..k]);
            let tol = bound + if half_step { want.abs() * 2f64.powi(-8) } else { 0.0 };
            let v = f64::from(got[r * n + j]);
            assert!((v - want).abs() <= tol, "{what} {m}x{n}x{k}: y[{r}, {j}] = {v:e}, want {want:e} within {tol:e}");
        }
    }
}

#[test]
fn the_swiglu_product_runs_in_one_launch_into_either_output_and_refuses_what_its_kernel_cannot_store() {
    with_matmul("swiglu", |g, s, gpu, mm| {
        let mut gpu = gpu;
        // (M, N, K, the width the planner takes): one row; an expert's gate+up at 200 rows; N % 8 == 4 (f32
        // only); a last column tile whose gate box runs into the up rows.
        for (m, n, k) in [(1usize, 8usize, 8usize), (200, 768, 136), (70, 260, 64), (130, 100, 72)] {
            let (xb, wb) = (bf16s(g, m * k), bf16s(g, 2 * n * k));
            let x = s.alloc_device_from(&xb).unwrap();
            let w = s.alloc_device_from(&wb).unwrap();
            let shape = Shape::new(m as u32, n as u32, k as u32);
            let mut y = poisoned(s, m * n);
            let before = sim().stats().launches;
            let d = mm.swiglu_bf16(gpu, &x, &w, &mut y, shape).unwrap();
            gpu = d.gpu;
            assert_eq!(sim().stats().launches - before, 1, "one launch");
            assert_eq!((d.info.path, d.info.launches, d.info.bf16_out, d.info.split), (Some(Path::Gemm), 1, false, 1));
            assert!(refs::GEMM_SWIGLU.iter().any(|f| f.f32 == d.info.kernel), "{:?}", d.info);
            let got = y.to_vec().unwrap();
            check_swiglu("swiglu f32", &got, &widen(&xb), &widen(&wb), [m, n, k], false);
            if n % 8 == 0 {
                let mut y16 = s.alloc_device_from(&vec![POISON_BF16; m * n]).unwrap();
                let d = mm.swiglu_bf16_to_bf16(gpu, &x, &w, &mut y16, shape).unwrap();
                gpu = d.gpu;
                assert!(refs::GEMM_SWIGLU.iter().any(|f| f.y16 == d.info.kernel), "{:?}", d.info);
                assert_eq!((d.info.launches, d.info.bf16_out), (1, true));
                // The same accumulators, rounded: the f32 y's values to nearest even.
                let want: Vec<u16> = got.iter().map(|&v| refs::f32_to_bf16(v)).collect();
                assert_eq!(y16.to_vec().unwrap(), want, "{m}x{n}x{k}: bf16 y");
            }
        }
        // Refused, nothing launched: N % 4 != 0; a bf16 y at N % 8 != 0; K % 8 != 0; a W of N rows (the
        // fused weight has 2N); a y 8 bytes past a 16-byte boundary.
        let (m, n, k) = (64usize, 260usize, 64usize);
        let x = s.alloc_device_from(&bf16s(g, m * k)).unwrap();
        let w = s.alloc_device_from(&bf16s(g, 2 * n * k)).unwrap();
        let w_half = s.alloc_device_from(&bf16s(g, n * k)).unwrap();
        let mut y = poisoned(s, m * n + 2);
        let mut y16 = s.alloc_device_from(&vec![POISON_BF16; m * n]).unwrap();
        let before = sim().stats().launches;
        let (stage, e, g1) = refusal(mm.swiglu_bf16(gpu, &x, &w, &mut y, Shape::new(64, 258, 64)));
        assert_eq!(stage, Stage::MatmulPlan);
        assert_eq!(
            e,
            "matmul plan: SwiGLU M=64 N=258 K=64: the gate+up GEMM with SwiGLU in its epilogue cannot run it: N is \
             not a multiple of 4"
        );
        let (_, e, g1) = refusal(mm.swiglu_bf16_to_bf16(g1, &x, &w, &mut y16, Shape::new(64, 260, 64)));
        assert!(e.ends_with("N is not a multiple of 8"), "{e}");
        let (_, e, g1) = refusal(mm.swiglu_bf16(g1, &x, &w, &mut y, Shape::new(64, 260, 60)));
        assert!(e.ends_with("K is not a multiple of 8"), "{e}");
        let (stage, e, g1) = refusal(mm.swiglu_bf16(g1, &x, &w_half, &mut y, Shape::new(64, 260, 64)));
        assert_eq!(stage, Stage::MatmulShape);
        assert!(e.contains("the product SwiGLU M=64 N=260 K=64 needs w [520, 64]"), "{e}");
        // SAFETY: `y` holds `m * n + 2` floats and outlives the span, its elements 2.., written by the
        // device only through the call below while `y` is alive.
        let mut off = unsafe { matmul::DeviceSpan::<f32>::new(y.va() + 8, m * n) };
        let (_, e, g1) = refusal(mm.swiglu_bf16(g1, &x, &w, &mut off, Shape::new(64, 260, 64)));
        assert!(e.ends_with("x, W or y does not start 16-byte aligned"), "{e}");
        assert_eq!(sim().stats().launches, before, "no refusal launched anything");
        // In a command list: the same y as the call.
        let shape = Shape::new(m as u32, n as u32, k as u32);
        let mut want = poisoned(s, m * n);
        let g1 = mm.swiglu_bf16(g1, &x, &w, &mut want, shape).unwrap().gpu;
        let listed = poisoned(s, m * n);
        let mut list = s.cmdlist().unwrap();
        let info = mm.add_swiglu_bf16(&mut list, &x, &w, &listed, shape).unwrap();
        assert_eq!(info.launches, 1);
        let _gpu = g1.submit(&mut list).unwrap().gpu;
        drop(list);
        let mut listed = listed;
        assert_eq!(listed.to_vec().unwrap(), want.to_vec().unwrap());
    });
}
