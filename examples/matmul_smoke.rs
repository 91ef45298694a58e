//! Bring-up check of the matmul module's kernels through Omega's typed API on the GPU, before the
//! library: each kernel launched by hand (kernel_abi of kernels/cuda/matmul.cu), fresh random inputs, the
//! output poisoned, a random sample of positions checked against an f64 reference. Prints one line per
//! case and `N passed, M failed`. GPU only (the simulator's references come with the library).

#[path = "common/mod.rs"]
mod common;

use omega::half::bf16;
use omega::kernels::matmul as mm;
use omega::tma::encode_tiled;
use omega::{Device, Launch, Mem};
use rand::Rng;

const SMS: u32 = 132;

fn bf16s(rng: &mut impl Rng, n: usize) -> Vec<bf16> {
    (0..n).map(|_| bf16::from_f32(rng.random_range(-1.0f32..1.0))).collect()
}

/// Checks `samples` random positions of y [m, n] against f64 dot products; the tolerance scales with K.
fn check(name: &str, y: &[f32], x: &[f32], w: &[f32], [m, n, k]: [usize; 3], rng: &mut impl Rng) -> bool {
    let samples = 4096.min(m * n);
    let mut worst = 0f64;
    for s in 0..samples {
        let (i, j) = if samples == m * n { (s / n, s % n) } else { (rng.random_range(0..m), rng.random_range(0..n)) };
        let (mut dot, mut mag) = (0f64, 0f64);
        for kk in 0..k {
            let p = f64::from(x[i * k + kk]) * f64::from(w[j * k + kk]);
            dot += p;
            mag += p.abs();
        }
        let err = (f64::from(y[i * n + j]) - dot).abs() / (mag + 1e-30);
        if !err.is_finite() || err > worst {
            worst = if err.is_finite() { err } else { f64::INFINITY };
        }
    }
    let tol = 2f64.powi(-22) * (k as f64).sqrt() * 8.0;
    let ok = worst <= tol;
    println!(
        "[{}] {name}: worst relative error {worst:.3e} (tolerance {tol:.1e}, {samples} positions)",
        if ok { "ok" } else { "FAIL" }
    );
    ok
}

/// The GEMM's two TMA descriptors (the module's specs: A boxes of 128 rows, B boxes of `b_rows`) in a
/// device buffer, A at 0 and B at 128.
fn descriptors<'s>(
    s: &'s omega::Scope<'s>,
    x_va: u64,
    w_va: u64,
    [m, n, k]: [usize; 3],
    b_rows: u32,
) -> omega::Result<Mem<'s, Device<u8>>> {
    let a = encode_tiled(&mm::gemm_tmap_a(x_va, m as u32, k as u32)).expect("A");
    let b = encode_tiled(&mm::gemm_tmap_b_rows(w_va, n as u32, k as u32, b_rows)).expect("B");
    let mut bytes = a.0.to_vec();
    bytes.extend_from_slice(&b.0);
    s.alloc_device_from(&bytes)
}

fn main() -> omega::Result<()> {
    let seed = common::fresh_seed();
    let mut rng = common::rng(seed);
    println!("# matmul_smoke seed {seed:#x}");
    let dev = omega::lock().open().map_err(|e| e.error)?;
    println!("# platform {} device {}", dev.platform(), common::device_line(&dev.device()));
    let results = dev.scope(|s, mut gpu| -> omega::Result<Vec<bool>> {
        let module = s.load_module(omega::kernels::cuda_module("matmul").expect("the matmul module was built"))?;
        let mut results = Vec::new();
        // The TMA GEMM.
        for (m, n, k) in [
            (1024usize, 1024usize, 1024usize),
            (1000, 1000, 1000),
            (4096, 2048, 2048),
            (512, 151936, 2048),
            (4096, 4096, 4096),
            (8192, 8192, 8192),
        ] {
            let xh = bf16s(&mut rng, m * k);
            let wh = bf16s(&mut rng, n * k);
            let x: Mem<'_, Device<bf16>> = s.alloc_device_from(&xh)?;
            let w: Mem<'_, Device<bf16>> = s.alloc_device_from(&wh)?;
            let mut y = s.alloc_device_from(&vec![f32::NAN; m * n])?;
            let d = descriptors(s, x.va(), w.va(), [m, n, k], mm::GEMM_TILE_N)?;
            let kern = module.kernel("omega_gemm_bf16_tn")?;
            let tiles = (m.div_ceil(128) * n.div_ceil(256)) as u32;
            let l = Launch::new(&kern)
                .grid([tiles.min(SMS), 1, 1])
                .block([384, 1, 1])
                .dynamic_shared(197_696)
                .arg(d.va())
                .arg(d.va() + 128)
                .arg(&y)
                .arg(m as u32)
                .arg(n as u32)
                .arg(k as u32)
                .timeout_ms(10_000);
            // Five launches of the same submission (the later ones replay its prepared encoding); the best.
            let t = std::time::Instant::now();
            let mut done = gpu.launch(&l).map_err(|e| e.error)?;
            let us = t.elapsed().as_secs_f64() * 1e6;
            let mut best = done.elapsed_ns;
            for _ in 0..4 {
                done = done.gpu.launch(&l).map_err(|e| e.error)?;
                best = best.min(done.elapsed_ns);
            }
            gpu = done.gpu;
            let mut yh = vec![0f32; m * n];
            y.read(&mut yh)?;
            let xf: Vec<f32> = xh.iter().map(|v| v.to_f32()).collect();
            let wf: Vec<f32> = wh.iter().map(|v| v.to_f32()).collect();
            println!(
                "# gemm {m}x{n}x{k}: first {us:.0} us wall; best of 5 {:.1} us device, {:.1} TFLOP/s",
                best as f64 / 1e3,
                2.0 * (m * n * k) as f64 / best as f64 / 1e3
            );
            results.push(check(&format!("gemm_bf16_tn {m}x{n}x{k}"), &yh, &xf, &wf, [m, n, k], &mut rng));
        }
        // The split-K GEMM and the narrow (128x128) form, for shapes with fewer 128x256 tiles than SMs.
        let variants = [("omega_gemm_bf16_tn_splitk", 256u32, 197_696u32), ("omega_gemm_bf16_tn_n128", 128, 197_728)];
        for ((m, n, k), (entry, bn, smem)) in [
            (512usize, 2048usize, 4096usize),
            (512, 5120, 2048),
            (512, 1536, 2048),
            (512, 2048, 768),
            (1000, 1000, 1000),
        ]
        .into_iter()
        .flat_map(|shape| variants.map(|v| (shape, v)))
        {
            let xh = bf16s(&mut rng, m * k);
            let wh = bf16s(&mut rng, n * k);
            let x: Mem<'_, Device<bf16>> = s.alloc_device_from(&xh)?;
            let w: Mem<'_, Device<bf16>> = s.alloc_device_from(&wh)?;
            let mut y = s.alloc_device_from(&vec![f32::NAN; m * n])?;
            let d = descriptors(s, x.va(), w.va(), [m, n, k], bn)?;
            let tiles = (m.div_ceil(128) * n.div_ceil(bn as usize)) as u32;
            let kblocks = k.div_ceil(64) as u32;
            // Whole waves: as many splits as fit the SMs once (a second, partial wave costs a whole unit).
            let splits = (SMS / tiles).clamp(1, kblocks);
            let work = s.alloc_device::<f32>(splits as usize * m * n)?;
            let tickets = s.alloc_device_from(&vec![0u32; tiles as usize])?;
            let kern = module.kernel(entry)?;
            let l = Launch::new(&kern)
                .grid([(tiles * splits).min(SMS), 1, 1])
                .block([384, 1, 1])
                .dynamic_shared(smem)
                .arg(d.va())
                .arg(d.va() + 128)
                .arg(&y)
                .arg(&work)
                .arg(&tickets)
                .arg(m as u32)
                .arg(n as u32)
                .arg(k as u32)
                .arg(splits)
                .timeout_ms(10_000);
            let mut done = gpu.launch(&l).map_err(|e| e.error)?;
            let mut best = done.elapsed_ns;
            for _ in 0..4 {
                done = done.gpu.launch(&l).map_err(|e| e.error)?;
                best = best.min(done.elapsed_ns);
            }
            gpu = done.gpu;
            let mut yh = vec![0f32; m * n];
            y.read(&mut yh)?;
            let xf: Vec<f32> = xh.iter().map(|v| v.to_f32()).collect();
            let wf: Vec<f32> = wh.iter().map(|v| v.to_f32()).collect();
            println!(
                "# {entry} {m}x{n}x{k} ({tiles} tiles x {splits} splits): best of 5 {:.1} us device, {:.1} TFLOP/s",
                best as f64 / 1e3,
                2.0 * (m * n * k) as f64 / best as f64 / 1e3
            );
            results.push(check(&format!("{entry} {m}x{n}x{k}"), &yh, &xf, &wf, [m, n, k], &mut rng));
        }
        // The split-K GEMV.
        for (m, n, k) in [
            (1usize, 2048usize, 4096usize),
            (4, 1536, 2048),
            (8, 5120, 2048),
            (64, 2048, 768),
            (1, 151936, 2048),
            (2, 151936, 2048),
        ] {
            let xh = bf16s(&mut rng, m * k);
            let wh = bf16s(&mut rng, n * k);
            let x = s.alloc_device_from(&xh)?;
            let w = s.alloc_device_from(&wh)?;
            let mut y = s.alloc_device_from(&vec![f32::NAN; m * n])?;
            let mm::GemvPlan { blocks, split, k_per_split: kps } = mm::gemv_plan(n as u32, k as u32, SMS);
            let work = s.alloc_device::<f32>((split as usize * m * n).max(1))?;
            let tickets = s.alloc_device_from(&vec![0u32; blocks as usize])?;
            let mb = if m <= 8 {
                1
            } else if m <= 16 {
                2
            } else if m <= 32 {
                4
            } else {
                8
            };
            let kern = module.kernel(&format!("omega_gemv_bf16_tn_m{mb}"))?;
            let l = Launch::new(&kern)
                .grid([blocks, split, 1])
                .block([128, 1, 1])
                .arg(&x)
                .arg(&w)
                .arg(&y)
                .arg(&work)
                .arg(&tickets)
                .arg(m as u32)
                .arg(n as u32)
                .arg(k as u32)
                .arg(kps);
            let mut done = gpu.launch(&l).map_err(|e| e.error)?;
            let mut best = done.elapsed_ns;
            for _ in 0..4 {
                done = done.gpu.launch(&l).map_err(|e| e.error)?;
                best = best.min(done.elapsed_ns);
            }
            gpu = done.gpu;
            let mut yh = vec![0f32; m * n];
            y.read(&mut yh)?;
            let xf: Vec<f32> = xh.iter().map(|v| v.to_f32()).collect();
            let wf: Vec<f32> = wh.iter().map(|v| v.to_f32()).collect();
            let bytes = (2 * n * k) as f64;
            println!(
                "# gemv {m}x{n}x{k} split {split}: best of 5 {:.1} us device, {:.0} GB/s of weights",
                best as f64 / 1e3,
                bytes / best as f64
            );
            results.push(check(&format!("gemv_bf16 m{mb} {m}x{n}x{k}"), &yh, &xf, &wf, [m, n, k], &mut rng));
        }
        // The f32 SIMT GEMM.
        for (m, n, k) in [(513usize, 257usize, 1000usize), (2048, 2048, 2048), (8192, 8192, 8192)] {
            let xh: Vec<f32> = (0..m * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
            let wh: Vec<f32> = (0..n * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
            let x = s.alloc_device_from(&xh)?;
            let w = s.alloc_device_from(&wh)?;
            let mut y = s.alloc_device_from(&vec![f32::NAN; m * n])?;
            let kern = module.kernel("omega_gemm_f32_tn")?;
            // An unaligned view of the same rows would take the scalar path; these take the vector path.
            let l = Launch::new(&kern)
                .grid([n.div_ceil(128) as u32, m.div_ceil(128) as u32, 1])
                .block([256, 1, 1])
                .arg(&x)
                .arg(&w)
                .arg(&y)
                .arg(m as u32)
                .arg(n as u32)
                .arg(k as u32)
                .timeout_ms(10_000);
            let mut done = gpu.launch(&l).map_err(|e| e.error)?;
            let mut best = done.elapsed_ns;
            for _ in 0..2 {
                done = done.gpu.launch(&l).map_err(|e| e.error)?;
                best = best.min(done.elapsed_ns);
            }
            gpu = done.gpu;
            let mut yh = vec![0f32; m * n];
            y.read(&mut yh)?;
            println!(
                "# f32 {m}x{n}x{k}: best of 3 {:.1} us device, {:.1} TFLOP/s",
                best as f64 / 1e3,
                2.0 * (m * n * k) as f64 / best as f64 / 1e3
            );
            results.push(check(&format!("gemm_f32_tn {m}x{n}x{k}"), &yh, &xh, &wh, [m, n, k], &mut rng));
        }
        Ok(results)
    });
    let results = scoped_value(results)?;
    let passed = results.iter().filter(|&&r| r).count();
    println!("{passed} passed, {} failed", results.len() - passed);
    if passed == results.len() {
        Ok(())
    } else {
        std::process::exit(1)
    }
}

fn scoped_value<R>(s: omega::Scoped<omega::Result<R>>) -> omega::Result<R> {
    match s.into_open() {
        Ok((_, r)) => r,
        Err((latched, r)) => {
            println!("# latched: {}", latched.cause());
            r
        }
    }
}
