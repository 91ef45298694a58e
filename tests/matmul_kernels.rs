//! The `matmul` module's kernels on the simulator, each launched through the typed API as the matmul
//! library launches it (`load_module`, `Launch`, device buffers), on fresh random inputs with the output
//! poisoned first, and checked against an f64 product.
//!
//! The tolerance: every f32 product of two bf16 is exact, and every product of two f32 is exact in f64,
//! so what separates a kernel's f32 result from the f64 sum is its f32 additions (and, for f32 x f32
//! without FMA, one rounding per product). Recursive summation of K terms in any order errs by at most
//! `(K - 1) · 2^-24 · Σ|x·w|` (plus second-order terms); tensor cores add with truncation rather than
//! rounding, up to twice that. `K · 2^-22 · Σ|x·w|` is that bound with a factor of 2 to 4 to spare, and
//! still catches a missing or doubled 32-element chunk (its terms are about `32 / K` of `Σ|x·w|`, far
//! more than `K · 2^-22` of it for K below 2^13). The SIMT kernels are also checked bit for bit against
//! their own arithmetic (one `fmaf` chain per output in k order), which the reference claims to repeat.
//!
//! Shapes are small (CI runs these in a debug build): 1x1x1 where a kernel allows it, primes (7, 33,
//! 1000, 4095) and ragged tile edges; the GPU suite (examples/gpu_suite.rs) runs the large ones. Each
//! test prints its seed; a failure names the shape, the position, what came back and what was wanted.
//! Tests in this binary take turns on the process's one lock.

use omega::kernels::{self, matmul as mm};
use omega::tma::{encode_tiled, TiledSpec, TmaSwizzle};
use omega::{Device, Error, Gpu, Launch, Mem, Scope, Scoped};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Floats of a y that is a platform allocation of its own (past the 2 MiB the session carves from
/// chunks), one page over: a store past it faults.
const Y_SHORT: usize = ((2 << 20) + 4096) / 4;

/// What an output holds before the kernel runs: a NaN no kernel computes from finite inputs.
const POISON: f32 = f32::from_bits(0x7fc0_dead);
const POISON_U32: u32 = 0xdead_beef;

fn module() -> &'static [u8] {
    let nvcc = kernels::nvcc();
    assert!(nvcc.is_ok(), "CI installs the pinned nvcc set; the build said: {nvcc:?}");
    kernels::cuda_module(mm::MATMUL).unwrap()
}

/// A fresh generator and its seed (printed, so a failure can be replayed with `OMEGA_MATMUL_SEED`).
fn rng(test: &str) -> SmallRng {
    let seed = std::env::var("OMEGA_MATMUL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    println!("{test}: seed {seed} (rerun with OMEGA_MATMUL_SEED={seed})");
    SmallRng::seed_from_u64(seed)
}

/// `f` in a scope of a freshly opened simulator (nothing of an earlier test's faults or buffers left).
fn on_sim<R>(f: impl for<'s> FnOnce(&'s Scope<'s>, Gpu<'s>) -> R) -> R {
    let dev = omega::lock().open().expect("open");
    assert_eq!(dev.platform(), "sim", "these tests run where there is no GPU");
    match dev.close().open().expect("reopen").scope(f) {
        Scoped::Open(_, r) => r,
        Scoped::Latched(..) => panic!("a kernel's launch latched the process"),
    }
}

/// `n` random bf16 in [-1, 1] (bit patterns) and their f32 values.
fn bf16s(rng: &mut SmallRng, n: usize) -> (Vec<u16>, Vec<f32>) {
    let bits = mm::random_bf16(rng.random(), n);
    let values = mm::bf16s_to_f32(&bits);
    (bits, values)
}

fn f32s(rng: &mut SmallRng, n: usize) -> Vec<f32> {
    mm::random_f32(rng.random(), n)
}

/// `got[i * n + j]` against row i of `x` times row j of `w` (k elements each), within the tolerance the
/// module comment argues; panics naming the first position that is not.
fn check(what: &str, got: &[f32], x: &[f32], w: &[f32], [m, n, k]: [usize; 3]) {
    check_against(what, got, &mm::products_f64(x, w, k), [m, n, k]);
}

/// [`check`] against an f64 product computed once (`products_f64`'s values and magnitudes).
fn check_against(what: &str, got: &[f32], (want, mag): &(Vec<f64>, Vec<f64>), [m, n, k]: [usize; 3]) {
    assert_eq!(got.len(), m * n, "{what}: output length");
    for (i, (&g, (&v, &a))) in got.iter().zip(want.iter().zip(mag)).enumerate() {
        let bound = k as f64 * 2f64.powi(-22) * a;
        assert!(
            (f64::from(g) - v).abs() <= bound,
            "{what} {m}x{n}x{k}: y[{}, {}] = {g:e} (bits {:#010x}), want {v:e} within {bound:e}",
            i / n,
            i % n,
            g.to_bits()
        );
    }
}

/// Row-major `rows x cols` values read as `[rows, cols]` with `from[r * stride + c]`.
fn rows(from: &[f32], rows: usize, cols: usize, stride: usize) -> Vec<f32> {
    (0..rows).flat_map(|r| from[r * stride..][..cols].iter().copied()).collect()
}

fn device<'s, T: omega::DeviceScalar>(s: &'s Scope<'s>, v: &[T]) -> Mem<'s, Device<T>> {
    s.alloc_device_from(v).unwrap()
}

fn poisoned<'s>(s: &'s Scope<'s>, n: usize) -> Mem<'s, Device<f32>> {
    let mut m = s.alloc_device::<f32>(n).unwrap();
    m.write(&vec![POISON; n]).unwrap();
    m
}

/// The Xid of a launch that faulted, with its message.
#[track_caller]
fn fault_of<T>(r: Result<T, omega::LaunchError<'_>>) -> (u32, String) {
    match r {
        Ok(_) => panic!("the launch completed; a fault was expected"),
        Err(e) => match &e.error {
            Error::Fault(f) => (f.xid, e.error.to_string()),
            other => panic!("expected a fault, got {other}"),
        },
    }
}

// ----- the TMA GEMM --------------------------------------------------------------------------------------

/// The two descriptors of a GEMM of x `[m, k]` at `x_va` and W `[n, k]` at `w_va`, encoded as
/// kernel_abi.md says, in one device buffer: A at byte 0, B at byte 128 (both 64-byte aligned).
fn tmaps<'s>(s: &'s Scope<'s>, a: TiledSpec, b: TiledSpec) -> Mem<'s, Device<u8>> {
    let mut bytes = encode_tiled(&a).unwrap().0.to_vec();
    bytes.extend_from_slice(&encode_tiled(&b).unwrap().0);
    device(s, &bytes)
}

fn gemm_tiles(m: u32, n: u32) -> u32 {
    m.div_ceil(mm::GEMM_TILE_M) * n.div_ceil(mm::GEMM_TILE_N)
}

#[test]
fn the_tma_gemm_matches_f64_at_primes_and_ragged_tiles_whatever_its_persistent_grid() {
    let mut g = rng("tma gemm");
    let shapes: [[u32; 3]; 8] = [
        [1, 1, 8],
        [7, 33, 1000],
        [33, 7, 8],
        [1000, 33, 64],
        [129, 257, 136],
        [7, 4095, 16],
        [4095, 7, 24],
        [256, 512, 128],
    ];
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let k = module.kernel(mm::GEMM_BF16_TN).unwrap();
        let mut gpu = gpu;
        for [m, n, kk] in shapes {
            let (xb, x) = bf16s(&mut g, (m * kk) as usize);
            let (wb, w) = bf16s(&mut g, (n * kk) as usize);
            let (dx, dw) = (device(s, &xb), device(s, &wb));
            let maps = tmaps(s, mm::gemm_tmap_a(dx.va(), m, kk), mm::gemm_tmap_b(dw.va(), n, kk));
            let mut y = poisoned(s, (m * n) as usize);
            let tiles = gemm_tiles(m, n);
            let want = mm::products_f64(&x, &w, kk as usize);
            // The library's grid (one CTA per SM), one CTA, and more CTAs than tiles: the same y.
            for grid in [tiles.min(132), 1, tiles + 3] {
                y.write(&vec![POISON; (m * n) as usize]).unwrap();
                let l = Launch::new(&k)
                    .grid([grid, 1, 1])
                    .block([mm::GEMM_THREADS, 1, 1])
                    .dynamic_shared(mm::GEMM_SMEM_BYTES)
                    .arg(maps.va())
                    .arg(maps.va() + 128)
                    .arg(&y)
                    .arg(m)
                    .arg(n)
                    .arg(kk);
                gpu = gpu.launch(&l).unwrap().gpu;
                let what = format!("gemm_bf16_tn grid {grid}");
                check_against(&what, &y.to_vec().unwrap(), &want, [m, n, kk].map(|v| v as usize));
            }
        }
    });
}

#[test]
fn the_split_k_and_narrow_gemms_add_their_splits_in_order_and_leave_the_tickets_zero() {
    let mut g = rng("split-k gemm");
    // (entry, tile width, dynamic shared, shape)
    let cases = [
        (mm::GEMM_BF16_TN_SPLITK, mm::GEMM_TILE_N, mm::GEMM_SMEM_BYTES, [129u32, 257u32, 1000u32]),
        (mm::GEMM_BF16_TN_SPLITK, mm::GEMM_TILE_N, mm::GEMM_SMEM_BYTES, [1, 1, 8]),
        (mm::GEMM_BF16_TN_N128, mm::GEMM_N128_TILE_N, mm::GEMM_N128_SMEM_BYTES, [7, 300, 1000]),
        (mm::GEMM_BF16_TN_N128, mm::GEMM_N128_TILE_N, mm::GEMM_N128_SMEM_BYTES, [260, 129, 136]),
    ];
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let mut gpu = gpu;
        for (name, tile_n, smem, [m, n, kk]) in cases {
            let k = module.kernel(name).unwrap();
            let (xb, x) = bf16s(&mut g, (m * kk) as usize);
            let (wb, w) = bf16s(&mut g, (n * kk) as usize);
            let (dx, dw) = (device(s, &xb), device(s, &wb));
            let maps = tmaps(s, mm::gemm_tmap_a(dx.va(), m, kk), mm::gemm_tmap_b_rows(dw.va(), n, kk, tile_n));
            let mut y = poisoned(s, (m * n) as usize);
            let want = mm::products_f64(&x, &w, kk as usize);
            // No split, a few, more than K has blocks (one block each), and the planner's for 132 SMs.
            let planned = mm::GemmSplit::planned(m, n, kk, tile_n, 132).splits;
            for asked in [1, 2, 3, 40, planned] {
                let split = mm::GemmSplit::new(m, n, kk, tile_n, asked);
                let work = poisoned(s, split.work_floats(m, n).max(1) as usize);
                let mut tickets = device(s, &vec![0u32; split.tiles as usize]);
                // Any grid covers every unit: the library's, one CTA, more CTAs than units (for a split of 3).
                let grids: &[u32] =
                    if asked == 3 { &[split.units.min(132), 1, split.units + 3] } else { &[split.units.min(132)] };
                for &grid in grids {
                    y.write(&vec![POISON; (m * n) as usize]).unwrap();
                    let l = Launch::new(&k)
                        .grid([grid, 1, 1])
                        .block([mm::GEMM_THREADS, 1, 1])
                        .dynamic_shared(smem)
                        .arg(maps.va())
                        .arg(maps.va() + 128)
                        .arg(&y)
                        .arg(&work)
                        .arg(&tickets)
                        .arg(m)
                        .arg(n)
                        .arg(kk)
                        .arg(asked);
                    gpu = gpu.launch(&l).unwrap().gpu;
                    let what = format!("{name} {split:?} grid {grid}");
                    check_against(&what, &y.to_vec().unwrap(), &want, [m, n, kk].map(|v| v as usize));
                    assert!(tickets.to_vec().unwrap().iter().all(|&t| t == 0), "{what}: tickets left non-zero");
                }
            }
        }
    });
}

#[test]
fn the_swapped_small_m_gemms_match_f64_split_or_not_into_f32_and_bf16_and_leave_the_tickets_zero() {
    let mut g = rng("swapped gemm");
    // M up to each box (1, the box, one under it), a ragged last W tile, K ragged in its last block and
    // K of one block; M past the box takes a second tile row (the entry still computes it).
    let shapes: [[u32; 3]; 5] = [[1, 1, 8], [7, 300, 1000], [64, 129, 136], [33, 256, 64], [70, 130, 200]];
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let mut gpu = gpu;
        for f in mm::GEMM_SWAPAB {
            for [m, n, kk] in shapes.into_iter().filter(|s| s[0] <= f.mb || f.mb == 64) {
                let (xb, x) = bf16s(&mut g, (m * kk) as usize);
                let (wb, w) = bf16s(&mut g, (n * kk) as usize);
                let (dx, dw) = (device(s, &xb), device(s, &wb));
                // A is W's descriptor (128-row boxes), B x's (boxes of the entry's rows).
                let maps = tmaps(s, mm::gemm_tmap_a(dw.va(), n, kk), mm::gemm_tmap_b_rows(dx.va(), m, kk, f.mb));
                let want = mm::products_f64(&x, &w, kk as usize);
                let len = (m * n) as usize;
                let tiles = n.div_ceil(mm::GEMM_TILE_M) * m.div_ceil(f.mb);
                for asked in [1, 3, 40] {
                    // The split as the body makes it: its splits over K's blocks, no more.
                    let split = mm::GemmSplit::new(n, m, kk, f.mb, asked);
                    let work = poisoned(s, split.work_floats(m, n).max(1) as usize);
                    let mut tickets = device(s, &vec![0u32; tiles as usize]);
                    for (y16, grid) in [(false, split.units.min(132)), (true, split.units.min(132)), (false, 1)] {
                        let k = module.kernel(if y16 { f.y16 } else { f.f32 }).unwrap();
                        let mut y32 = poisoned(s, len);
                        let mut yb = device(s, &vec![0xffffu16; len]);
                        let l = Launch::new(&k)
                            .grid([grid, 1, 1])
                            .block([mm::GEMM_THREADS, 1, 1])
                            .dynamic_shared(f.smem_bytes())
                            .arg(maps.va())
                            .arg(maps.va() + 128);
                        let l = if y16 { l.arg(&yb) } else { l.arg(&y32) };
                        let l = l.arg(&work).arg(&tickets).arg(m).arg(n).arg(kk).arg(asked);
                        gpu = gpu.launch(&l).unwrap().gpu;
                        let what = format!("{} {m}x{n}x{kk} {split:?} grid {grid}", if y16 { f.y16 } else { f.f32 });
                        if y16 {
                            // The f32 product rounded once: within its bound and half a bf16 step.
                            for (i, &b) in yb.to_vec().unwrap().iter().enumerate() {
                                let (got, v, a) = (f64::from(mm::bf16_to_f32(b)), want.0[i], want.1[i]);
                                let tol = v.abs() * 2f64.powi(-8) + a * f64::from(kk) * 2f64.powi(-22);
                                assert!((got - v).abs() <= tol, "{what} element {i}: {got} against {v}");
                            }
                            yb.write(&vec![0xffffu16; len]).unwrap();
                        } else {
                            check_against(&what, &y32.to_vec().unwrap(), &want, [m, n, kk].map(|v| v as usize));
                            y32.write(&vec![POISON; len]).unwrap();
                        }
                        assert!(tickets.to_vec().unwrap().iter().all(|&t| t == 0), "{what}: tickets left non-zero");
                    }
                }
            }
        }
    });
}

#[test]
fn the_tma_gemm_reads_through_its_descriptors_dims_and_strides() {
    // x is the left 40 columns of a [50, 48] matrix (rows 96 bytes apart) and W the first 20 rows of a
    // [30, 40] one: the descriptors say so, the kernel's M, N, K only bound the tiles and the stores.
    let mut g = rng("tma gemm strides");
    let (m, n, kk, ld) = (50u32, 20u32, 40u32, 48u32);
    let (xb, xall) = bf16s(&mut g, (m * ld) as usize);
    let (wb, w) = bf16s(&mut g, (30 * kk) as usize);
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let k = module.kernel(mm::GEMM_BF16_TN).unwrap();
        let (dx, dw) = (device(s, &xb), device(s, &wb));
        let a = TiledSpec::matrix(
            omega::tma::TmaElem::Bf16,
            dx.va(),
            [m.into(), kk.into()],
            2 * u64::from(ld),
            [128, 64],
            TmaSwizzle::B128,
        );
        let maps = tmaps(s, a, mm::gemm_tmap_b(dw.va(), n, kk));
        let y = poisoned(s, (m * n) as usize);
        let l = Launch::new(&k)
            .grid([1, 1, 1])
            .block([mm::GEMM_THREADS, 1, 1])
            .dynamic_shared(mm::GEMM_SMEM_BYTES)
            .arg(maps.va())
            .arg(maps.va() + 128)
            .arg(&y)
            .arg(m)
            .arg(n)
            .arg(kk);
        gpu.launch(&l).unwrap();
        let mut y = y;
        let x = rows(&xall, m as usize, kk as usize, ld as usize);
        check("gemm_bf16_tn, strided x", &y.to_vec().unwrap(), &x, &w[..(n * kk) as usize], [50, 20, 40]);
    });
}

#[test]
fn the_tma_gemm_faults_on_what_it_cannot_run_and_where_its_stores_leave_y() {
    // A y of 525,312 floats (2 MiB and a page) is an allocation of its own, ending at a page where the
    // simulator's mapping ends; smaller buffers are carved from a larger chunk and their neighbours' bytes
    // lie past them. N is one more than that.
    let (m, n, kk) = (1u32, Y_SHORT as u32 + 1, 8u32);
    let run = |shared: u32, box_b: u32, k_arg: u32, map_offset: u64, y_len: usize| -> (u32, String, u64) {
        on_sim(|s, gpu| {
            let module = s.load_module(module()).unwrap();
            let k = module.kernel(mm::GEMM_BF16_TN).unwrap();
            let (dx, dw) =
                (device(s, &vec![0x3f80u16; (m * kk) as usize]), device(s, &vec![0x3f80u16; (n * kk) as usize]));
            let b = TiledSpec::matrix(
                omega::tma::TmaElem::Bf16,
                dw.va(),
                [n.into(), kk.into()],
                2 * u64::from(kk),
                [box_b, 64],
                TmaSwizzle::B128,
            );
            let maps = tmaps(s, mm::gemm_tmap_a(dx.va(), m, kk), b);
            let y = poisoned(s, y_len);
            let l = Launch::new(&k)
                .block([mm::GEMM_THREADS, 1, 1])
                .dynamic_shared(shared)
                .arg(maps.va() + map_offset)
                .arg(maps.va() + 128)
                .arg(&y)
                .arg(m)
                .arg(n)
                .arg(k_arg);
            let (xid, e) = fault_of(gpu.launch(&l));
            (xid, e, y.va())
        })
    };
    let full = mm::GEMM_SMEM_BYTES;
    let all = Y_SHORT + 1;
    let (xid, e, _) = run(full - 1, 256, kk, 0, all);
    assert!(xid == 13 && e.contains("197696"), "{e}");
    let (xid, e, _) = run(full, 128, kk, 0, all);
    assert!(xid == 13 && e.contains("tmap_b") && e.contains("box [64, 128]"), "{e}");
    let (xid, e, _) = run(full, 256, 0, 0, all);
    assert!(xid == 13 && e.contains("K = 0"), "{e}");
    let (xid, e, _) = run(full, 256, kk, 32, all);
    assert!(xid == 13 && e.contains("not 64-byte aligned"), "{e}");
    // y holds all outputs but the last: the store of the last one faults, at y's end.
    let (xid, e, y) = run(full, 256, kk, 0, Y_SHORT);
    assert!(xid == 31 && e.contains(&format!("at {:#x}", y + 4 * Y_SHORT as u64)), "{e}");
    // A full tile of an even N stores float2 pairs: y must be 8-byte aligned then.
    let (xid, e) = on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let k = module.kernel(mm::GEMM_BF16_TN).unwrap();
        let (dx, dw) = (device(s, &[0x3f80u16; 8]), device(s, &[0x3f80u16; 256 * 8]));
        let maps = tmaps(s, mm::gemm_tmap_a(dx.va(), 1, 8), mm::gemm_tmap_b(dw.va(), 256, 8));
        let y = poisoned(s, 257);
        let l = Launch::new(&k)
            .block([mm::GEMM_THREADS, 1, 1])
            .dynamic_shared(full)
            .arg(maps.va())
            .arg(maps.va() + 128)
            .arg(y.va() + 4)
            .arg(1u32)
            .arg(256u32)
            .arg(8u32);
        fault_of(gpu.launch(&l))
    });
    assert!(xid == 13 && e.contains("y at") && e.contains("not 8-byte aligned"), "{e}");
}

/// A, B and y's descriptors in one device buffer (bytes 0, 128, 256); `y` None leaves zeros at 256 (not a
/// tensor map).
fn tmaps3<'s>(s: &'s Scope<'s>, a: TiledSpec, b: TiledSpec, y: Option<TiledSpec>) -> Mem<'s, Device<u8>> {
    let mut bytes = encode_tiled(&a).unwrap().0.to_vec();
    bytes.extend_from_slice(&encode_tiled(&b).unwrap().0);
    bytes.extend_from_slice(&y.map_or([0; 128], |y| encode_tiled(&y).unwrap().0));
    device(s, &bytes)
}

/// One launch of a TMA-store entry (`omega_gemm_bf16_tn_ts` / `_mc`, either tile) with the dynamic shared
/// memory the largest of them takes: `tmap_y` 0 when N % 4 != 0.
fn staged_launch<'k, 's, T: omega::DeviceScalar>(
    k: &'k omega::Kernel<'s>,
    grid: u32,
    maps: u64,
    tmap_y: u64,
    y: &'k Mem<'s, Device<T>>,
    [m, n, kk]: [u32; 3],
) -> Launch<'k, 's> {
    Launch::new(k)
        .grid([grid, 1, 1])
        .block([mm::GEMM_THREADS, 1, 1])
        .dynamic_shared(STAGED_SMEM_BYTES)
        .arg(maps)
        .arg(maps + 128)
        .arg(tmap_y)
        .arg(y)
        .arg(m)
        .arg(n)
        .arg(kk)
}

/// The TMA-store entries' largest dynamic shared memory (the fitted widths' included).
const STAGED_SMEM_BYTES: u32 = {
    let (wide, narrow) = (mm::GEMM_TS_SMEM_BYTES, mm::GEMM_TS_N128_SMEM_BYTES);
    let (wide_mc, narrow_mc) = (mm::GEMM_MC_SMEM_BYTES, mm::GEMM_MC_N128_SMEM_BYTES);
    let one = if wide > narrow { wide } else { narrow };
    let two = if wide_mc > narrow_mc { wide_mc } else { narrow_mc };
    let mut most = if one > two { one } else { two };
    let mut i = 0;
    while i < mm::GEMM_FITTED.len() {
        let fitted = mm::GEMM_FITTED[i].smem_bytes();
        most = if fitted > most { fitted } else { most };
        i += 1;
    }
    most
};

#[test]
fn the_tma_store_and_cluster_gemms_match_f64_through_ys_descriptor_or_direct_stores_whatever_their_grid() {
    let mut g = rng("tma-store gemm");
    // N % 4 == 0 goes through y's descriptor, other N store directly; 300 rows are 3 tile rows, so the
    // cluster form's last pair has a second tile wholly past M.
    let shapes: [[u32; 3]; 8] = [
        [1, 1, 8],
        [7, 33, 1000],
        [33, 4, 8],
        [129, 260, 136],
        [300, 520, 64],
        [4095, 12, 24],
        [256, 512, 128],
        [130, 257, 72],
    ];
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let mut gpu = gpu;
        // (entry, tile columns, W rows per box, CTAs per cluster): every tile in both forms, and the
        // narrow tile in ping-pong.
        let entries = [
            (mm::GEMM_BF16_TN_TS, mm::GEMM_TILE_N, mm::GEMM_TILE_N, 1),
            (mm::GEMM_BF16_TN_MC, mm::GEMM_TILE_N, mm::GEMM_MC_B_BOX_ROWS, 2),
            (mm::GEMM_BF16_TN_TS_N128, mm::GEMM_N128_TILE_N, mm::GEMM_N128_TILE_N, 1),
            (mm::GEMM_BF16_TN_MC_N128, mm::GEMM_N128_TILE_N, mm::GEMM_MC_N128_B_BOX_ROWS, 2),
            (mm::GEMM_BF16_TN_PP_N128, mm::GEMM_N128_TILE_N, mm::GEMM_N128_TILE_N, 1),
        ];
        let fitted = mm::GEMM_FITTED
            .iter()
            .flat_map(|f| [(f.ts, f.tile_n, f.tile_n, 1), (f.mc, f.tile_n, f.mc_b_box_rows(), 2)]);
        for (name, tile_n, b_rows, cluster) in entries.into_iter().chain(fitted) {
            let k = module.kernel(name).unwrap();
            for [m, n, kk] in shapes {
                let (xb, x) = bf16s(&mut g, (m * kk) as usize);
                let (wb, w) = bf16s(&mut g, (n * kk) as usize);
                let (dx, dw) = (device(s, &xb), device(s, &wb));
                let mut y = poisoned(s, (m * n) as usize);
                let by_tma = n % 4 == 0;
                let ymap = by_tma.then(|| mm::gemm_tmap_y(y.va(), m, n));
                let maps =
                    tmaps3(s, mm::gemm_tmap_a(dx.va(), m, kk), mm::gemm_tmap_b_rows(dw.va(), n, kk, b_rows), ymap);
                let tmap_y = if by_tma { maps.va() + 256 } else { 0 };
                let want = mm::products_f64(&x, &w, kk as usize);
                let tiles = m.div_ceil(mm::GEMM_TILE_M) * n.div_ceil(tile_n);
                let pairs = m.div_ceil(2 * mm::GEMM_TILE_M) * n.div_ceil(tile_n);
                // The library's grid, the smallest, and more CTAs (or pairs) than there is work.
                let grids =
                    if cluster == 2 { [2 * pairs.min(66), 2, 2 * pairs + 4] } else { [tiles.min(132), 1, tiles + 3] };
                for grid in grids {
                    y.write(&vec![POISON; (m * n) as usize]).unwrap();
                    gpu = gpu.launch(&staged_launch(&k, grid, maps.va(), tmap_y, &y, [m, n, kk])).unwrap().gpu;
                    let what = format!("{name} grid {grid} (y by TMA: {by_tma})");
                    check_against(&what, &y.to_vec().unwrap(), &want, [m, n, kk].map(|v| v as usize));
                }
            }
        }
    });
}

#[test]
fn the_bf16_output_gemms_store_each_product_rounded_through_ys_bf16_descriptor_and_trap_on_other_n() {
    let mut g = rng("bf16-output tma-store gemm");
    // Ragged rows and columns, N a multiple of 8 below, at and past a tile (160 and 96 end on a chunk
    // that overlaps the one before), one row.
    let shapes: [[u32; 3]; 5] = [[1, 8, 8], [129, 264, 136], [300, 520, 64], [70, 96, 72], [256, 160, 128]];
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let mut gpu = gpu;
        let pp = (mm::GEMM_BF16_TN_PP_N128_Y16, mm::GEMM_N128_TILE_N);
        for (f, pp) in mm::GEMM_Y16.into_iter().map(|f| (f, None)).chain([(mm::GEMM_Y16[1], Some(pp))]) {
            // Each width's two entries; the narrow width once more for the ping-pong entry alone.
            let forms = match pp {
                None => vec![(f.ts, f.tile_n, 1), (f.mc, f.mc_b_box_rows(), 2)],
                Some((name, b_rows)) => vec![(name, b_rows, 1)],
            };
            for (name, b_rows, cluster) in forms {
                let k = module.kernel(name).unwrap();
                for [m, n, kk] in shapes {
                    let (xb, x) = bf16s(&mut g, (m * kk) as usize);
                    let (wb, w) = bf16s(&mut g, (n * kk) as usize);
                    let (dx, dw) = (device(s, &xb), device(s, &wb));
                    let mut y = device(s, &vec![0xffffu16; (m * n) as usize]);
                    let (a, b) = (mm::gemm_tmap_a(dx.va(), m, kk), mm::gemm_tmap_b_rows(dw.va(), n, kk, b_rows));
                    let maps = tmaps3(s, a, b, Some(mm::gemm_tmap_y16(y.va(), m, n)));
                    let tiles = m.div_ceil(mm::GEMM_TILE_M) * n.div_ceil(f.tile_n);
                    let grid = if cluster == 2 { 2 * (tiles.div_ceil(2)).min(66) } else { tiles.min(132) };
                    gpu = gpu.launch(&staged_launch(&k, grid, maps.va(), maps.va() + 256, &y, [m, n, kk])).unwrap().gpu;
                    // The f32 sum rounded to bf16 (nearest even): within half a bf16 step of the f64 value,
                    // plus what f32 accumulation over K may lose against the magnitude.
                    let (want, mag) = mm::products_f64(&x, &w, kk as usize);
                    let got = y.to_vec().unwrap();
                    for (i, (&b16, (&v, &mg))) in got.iter().zip(want.iter().zip(&mag)).enumerate() {
                        let got = f64::from(mm::bf16_to_f32(b16));
                        let tol = v.abs() * 2f64.powi(-8) + mg * f64::from(kk) * 2f64.powi(-23);
                        assert!((got - v).abs() <= tol, "{name} {m}x{n}x{kk} element {i}: {got} against {v}");
                    }
                }
            }
        }
        // N % 8 != 0: no bf16 descriptor of y exists, and the kernel traps rather than store elsewhere.
        let (m, n, kk) = (70u32, 12u32, 16u32);
        let (xb, _) = bf16s(&mut g, (m * kk) as usize);
        let (wb, _) = bf16s(&mut g, (n * kk) as usize);
        let (dx, dw) = (device(s, &xb), device(s, &wb));
        let y = device(s, &vec![0u16; (m * n) as usize]);
        let k = module.kernel(mm::GEMM_Y16[0].ts).unwrap();
        let maps = tmaps3(s, mm::gemm_tmap_a(dx.va(), m, kk), mm::gemm_tmap_b(dw.va(), n, kk), None);
        let (xid, e) = fault_of(gpu.launch(&staged_launch(&k, 1, maps.va(), maps.va() + 256, &y, [m, n, kk])));
        assert!(e.contains("trap") && e.contains("N = 12"), "xid {xid}: {e}");
    });
}

#[test]
fn the_swiglu_gemms_store_silu_of_the_gate_product_times_the_up_product_and_trap_on_n_without_a_descriptor() {
    let mut g = rng("swiglu gemm");
    // y's width N (W is [2N, K]): ragged rows and columns, a last column tile whose gate box runs into the
    // up rows, one row; N % 8 == 0 for both outputs, 100 and 20 (N % 8 == 4) for the f32 one only.
    let shapes: [[u32; 3]; 6] =
        [[1, 8, 8], [129, 264, 136], [300, 520, 64], [70, 96, 72], [256, 100, 128], [3, 20, 1000]];
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let mut gpu = gpu;
        for f in mm::GEMM_SWIGLU {
            for y16 in [false, true] {
                let name = if y16 { f.y16 } else { f.f32 };
                let k = module.kernel(name).unwrap();
                for [m, n, kk] in shapes.into_iter().filter(|s| !y16 || s[1] % 8 == 0) {
                    let (xb, x) = bf16s(&mut g, (m * kk) as usize);
                    let (wb, w) = bf16s(&mut g, (2 * n * kk) as usize);
                    let (dx, dw) = (device(s, &xb), device(s, &wb));
                    let len = (m * n) as usize;
                    let (mut y32, mut y16m) = (poisoned(s, len), device(s, &vec![0xffffu16; len]));
                    let ymap = if y16 { mm::gemm_tmap_y16(y16m.va(), m, n) } else { mm::gemm_tmap_y(y32.va(), m, n) };
                    let b = mm::gemm_tmap_b_rows(dw.va(), 2 * n, kk, f.b_box_rows());
                    let maps = tmaps3(s, mm::gemm_tmap_a(dx.va(), m, kk), b, Some(ymap));
                    let tiles = m.div_ceil(mm::GEMM_TILE_M) * n.div_ceil(f.b_box_rows());
                    // The library's grid and one CTA: the same y.
                    for grid in [tiles.min(132), 1] {
                        let l = if y16 {
                            staged_launch(&k, grid, maps.va(), maps.va() + 256, &y16m, [m, n, kk])
                        } else {
                            staged_launch(&k, grid, maps.va(), maps.va() + 256, &y32, [m, n, kk])
                        };
                        gpu = gpu.launch(&l).unwrap().gpu;
                        let got: Vec<f64> = if y16 {
                            y16m.to_vec().unwrap().iter().map(|&b| f64::from(mm::bf16_to_f32(b))).collect()
                        } else {
                            y32.to_vec().unwrap().iter().map(|&v| f64::from(v)).collect()
                        };
                        // silu(g) * u in f64 within the SwiGLU bound, a bf16 y half a step more.
                        let (nu, ku) = (n as usize, kk as usize);
                        for (i, &got) in got.iter().enumerate() {
                            let (r, j) = (i / nu, i % nu);
                            let (gate, up) = (&w[j * ku..][..ku], &w[(nu + j) * ku..][..ku]);
                            let (want, bound) = mm::swiglu_f64(&x[r * ku..][..ku], gate, up);
                            let tol = bound + if y16 { want.abs() * 2f64.powi(-8) } else { 0.0 };
                            assert!(
                                (got - want).abs() <= tol,
                                "{name} grid {grid} {m}x{n}x{kk}: y[{r}, {j}] = {got:e}, want {want:e} within {tol:e}"
                            );
                        }
                        if y16 {
                            y16m.write(&vec![0xffffu16; len]).unwrap();
                        } else {
                            y32.write(&vec![POISON; len]).unwrap();
                        }
                    }
                }
            }
        }
    });
    // No descriptor of y: N % 4 != 0 (f32), N % 8 != 0 (bf16). The kernel traps (a fault ends the scope's
    // token, so one scope each).
    for (name, n) in [(mm::GEMM_SWIGLU[1].f32, 6u32), (mm::GEMM_SWIGLU[1].y16, 12)] {
        let (xid, e) = on_sim(|s, gpu| {
            let module = s.load_module(module()).unwrap();
            let (m, kk) = (70u32, 16u32);
            let (xb, _) = bf16s(&mut g, (m * kk) as usize);
            let (wb, _) = bf16s(&mut g, (2 * n * kk) as usize);
            let (dx, dw) = (device(s, &xb), device(s, &wb));
            let y = device(s, &vec![0u16; (2 * m * n) as usize]);
            let k = module.kernel(name).unwrap();
            let b = mm::gemm_tmap_b_rows(dw.va(), 2 * n, kk, mm::GEMM_SWIGLU[1].b_box_rows());
            let maps = tmaps3(s, mm::gemm_tmap_a(dx.va(), m, kk), b, None);
            fault_of(gpu.launch(&staged_launch(&k, 1, maps.va(), maps.va() + 256, &y, [m, n, kk])))
        });
        assert!(e.contains("trap") && e.contains(&format!("N = {n}")), "{name}: xid {xid}: {e}");
    }
}

/// One launch of a stream-K entry on `grid` CTAs: `tmap_y` 0 when N % 4 != 0.
#[allow(clippy::too_many_arguments)]
fn stream_k_launch<'k, 's>(
    k: &'k omega::Kernel<'s>,
    grid: u32,
    maps: u64,
    tmap_y: u64,
    y: &'k Mem<'s, Device<f32>>,
    partials: &'k Mem<'s, Device<f32>>,
    flags: &'k Mem<'s, Device<u32>>,
    [m, n, kk]: [u32; 3],
) -> Launch<'k, 's> {
    Launch::new(k)
        .grid([grid, 1, 1])
        .block([mm::GEMM_THREADS, 1, 1])
        .dynamic_shared(mm::GEMM_SK_SMEM_BYTES.max(mm::GEMM_SK_N128_SMEM_BYTES))
        .arg(maps)
        .arg(maps + 128)
        .arg(tmap_y)
        .arg(y)
        .arg(partials)
        .arg(flags)
        .arg(m)
        .arg(n)
        .arg(kk)
}

#[test]
fn the_stream_k_schedule_gives_every_iteration_to_one_cta_and_each_cut_tile_to_its_first_ctas_finisher() {
    for (total, grid, kblocks) in
        [(1u64, 1u64, 1u64), (7, 3, 7), (160 * 32, 132, 32), (128, 132, 128), (5, 9, 5), (63 * 16, 7, 16)]
    {
        let s = mm::SkSchedule { total, grid, kblocks };
        let mut seen = vec![0u32; total as usize];
        for c in 0..grid {
            let segs = s.segments(c);
            let len: u64 = segs.iter().map(|g| g.kb1 - g.kb0).sum();
            // Even shares: no CTA takes two iterations more than another.
            assert!(len == total / grid || len == total / grid + 1, "{s:?} CTA {c}: {len} iterations");
            for (i, g) in segs.iter().enumerate() {
                for kb in g.kb0..g.kb1 {
                    seen[(g.tile * kblocks + kb) as usize] += 1;
                }
                // Only a first segment starts inside a tile; only a last one ends inside one.
                assert!(g.kb0 == 0 || i == 0, "{s:?} CTA {c} segment {i}: {g:?}");
                assert!(g.kb1 == kblocks || i + 1 == segs.len(), "{s:?} CTA {c} segment {i}: {g:?}");
                if g.kb0 == 0 && g.kb1 < kblocks {
                    // The finisher's contributors hold exactly the rest of its tile, in order.
                    let rest: u64 = s
                        .contributors(c, g.tile)
                        .map(|d| s.segments(d).first().filter(|f| f.tile == g.tile).map_or(0, |f| f.kb1 - f.kb0))
                        .sum();
                    assert_eq!(rest, kblocks - g.kb1, "{s:?} CTA {c} tile {}", g.tile);
                }
            }
        }
        assert!(seen.iter().all(|&n| n == 1), "{s:?}: an iteration run {seen:?} times");
    }
}

#[test]
fn the_stream_k_gemms_match_f64_on_any_grid_and_leave_their_flags_zero_for_the_next_launch() {
    let mut g = rng("stream-k gemm");
    // N % 4 == 0 through y's descriptor, other N direct; one tile cut among every CTA (16 K blocks on
    // 16+ CTAs); 64 live rows of a tile row (the second consumer skips); a last tile row of 3.
    let shapes: [[u32; 3]; 7] =
        [[1, 1, 8], [7, 33, 1000], [129, 260, 136], [64, 256, 1024], [300, 520, 64], [130, 257, 72], [3, 128, 640]];
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let mut gpu = gpu;
        for (name, tile_n) in [(mm::GEMM_BF16_TN_SK, mm::GEMM_TILE_N), (mm::GEMM_BF16_TN_SK_N128, mm::GEMM_N128_TILE_N)]
        {
            let k = module.kernel(name).unwrap();
            for [m, n, kk] in shapes {
                let (xb, x) = bf16s(&mut g, (m * kk) as usize);
                let (wb, w) = bf16s(&mut g, (n * kk) as usize);
                let (dx, dw) = (device(s, &xb), device(s, &wb));
                let mut y = poisoned(s, (m * n) as usize);
                let by_tma = n % 4 == 0;
                let ymap = by_tma.then(|| mm::gemm_tmap_y(y.va(), m, n));
                let maps =
                    tmaps3(s, mm::gemm_tmap_a(dx.va(), m, kk), mm::gemm_tmap_b_rows(dw.va(), n, kk, tile_n), ymap);
                let tmap_y = if by_tma { maps.va() + 256 } else { 0 };
                let want = mm::products_f64(&x, &w, kk as usize);
                let iters = m.div_ceil(mm::GEMM_TILE_M) * n.div_ceil(tile_n) * kk.div_ceil(mm::GEMM_TILE_K);
                // The library's grid, one CTA, three, and more CTAs than iterations.
                for grid in [iters.min(132), 1, 3, iters + 5] {
                    let partials = poisoned(s, (u64::from(grid) * mm::gemm_sk_slot_floats(tile_n)) as usize);
                    let mut flags = device(s, &vec![0u32; 2 * grid as usize]);
                    // Twice on the same flags: the second launch relies on the first leaving them zero.
                    for round in 0..2 {
                        y.write(&vec![POISON; (m * n) as usize]).unwrap();
                        let l = stream_k_launch(&k, grid, maps.va(), tmap_y, &y, &partials, &flags, [m, n, kk]);
                        gpu = gpu.launch(&l).unwrap().gpu;
                        let what = format!("{name} {m}x{n}x{kk} grid {grid} round {round} (y by TMA: {by_tma})");
                        check_against(&what, &y.to_vec().unwrap(), &want, [m, n, kk].map(|v| v as usize));
                        assert!(flags.to_vec().unwrap().iter().all(|&f| f == 0), "{what}: flags left non-zero");
                    }
                }
            }
        }
    });
}

#[test]
fn a_stream_k_flag_not_zero_at_the_launch_or_a_short_partials_buffer_faults_naming_it() {
    // One 128 x 256 tile over 40 K blocks on `grid` CTAs: every CTA but the first contributes.
    let (m, n, kk) = (128u32, 256u32, 2560u32);
    let slot = mm::gemm_sk_slot_floats(mm::GEMM_TILE_N) as usize;
    let run = |grid: u32, stale: Option<usize>, partials_len: usize| -> (u32, String) {
        on_sim(|s, gpu| {
            let module = s.load_module(module()).unwrap();
            let k = module.kernel(mm::GEMM_BF16_TN_SK).unwrap();
            let (dx, dw) =
                (device(s, &vec![0x3f80u16; (m * kk) as usize]), device(s, &vec![0x3f80u16; (n * kk) as usize]));
            let y = poisoned(s, (m * n) as usize);
            let maps = tmaps3(
                s,
                mm::gemm_tmap_a(dx.va(), m, kk),
                mm::gemm_tmap_b(dw.va(), n, kk),
                Some(mm::gemm_tmap_y(y.va(), m, n)),
            );
            let partials = poisoned(s, partials_len);
            let mut init = vec![0u32; 2 * grid as usize];
            if let Some(at) = stale {
                init[at] = 7;
            }
            let flags = device(s, &init);
            fault_of(gpu.launch(&stream_k_launch(
                &k,
                grid,
                maps.va(),
                maps.va() + 256,
                &y,
                &partials,
                &flags,
                [m, n, kk],
            )))
        })
    };
    // CTA 1's first consumer finds its flag already set.
    let (_, e) = run(4, Some(2), 4 * slot);
    assert!(e.contains("flag of CTA 1's consumer 0 is 7 at the launch"), "{e}");
    // 20 slots do not fit a partials buffer that is an allocation of its own of about 16: the last
    // contributors' stores fault where the kernel's would.
    let (xid, e) = run(20, None, Y_SHORT);
    assert_eq!(xid, 31, "{e}");
}

#[test]
fn the_tma_store_gemm_stores_at_ys_descriptor_stride_and_refuses_a_descriptor_that_is_not_ys() {
    let mut g = rng("tma-store gemm descriptor");
    let (m, n, kk) = (70u32, 8u32, 16u32);
    let (xb, x) = bf16s(&mut g, (m * kk) as usize);
    let (wb, w) = bf16s(&mut g, (n * kk) as usize);
    // y rows 12 floats apart: the kernel stores at the descriptor's stride and leaves the gaps alone.
    let ld = 12usize;
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let k = module.kernel(mm::GEMM_BF16_TN_TS).unwrap();
        let (dx, dw) = (device(s, &xb), device(s, &wb));
        let (a, b) = (mm::gemm_tmap_a(dx.va(), m, kk), mm::gemm_tmap_b(dw.va(), n, kk));
        let mut y = poisoned(s, m as usize * ld);
        let strided = TiledSpec::matrix(
            omega::tma::TmaElem::F32,
            y.va(),
            [m.into(), n.into()],
            4 * ld as u64,
            mm::GEMM_Y_BOX,
            TmaSwizzle::B128,
        );
        let maps = tmaps3(s, a, b, Some(strided));
        gpu.launch(&staged_launch(&k, 1, maps.va(), maps.va() + 256, &y, [m, n, kk])).unwrap();
        let got = y.to_vec().unwrap();
        check("gemm_bf16_tn_ts, strided y", &rows(&got, m as usize, n as usize, ld), &x, &w, [70, 8, 16]);
        assert!(
            got.chunks_exact(ld).all(|r| r[n as usize..].iter().all(|v| v.to_bits() == POISON.to_bits())),
            "the stores wrote between y's rows"
        );
    });
    // Dims other than [N, M], and a bf16 map: faults naming tmap_y, not stores somewhere.
    let bad_map = |bad: fn(u64) -> TiledSpec| {
        on_sim(|s, gpu| {
            let module = s.load_module(module()).unwrap();
            let k = module.kernel(mm::GEMM_BF16_TN_TS).unwrap();
            let (dx, dw) = (device(s, &xb), device(s, &wb));
            let y = poisoned(s, (m * n) as usize);
            let maps = tmaps3(s, mm::gemm_tmap_a(dx.va(), m, kk), mm::gemm_tmap_b(dw.va(), n, kk), Some(bad(y.va())));
            fault_of(gpu.launch(&staged_launch(&k, 1, maps.va(), maps.va() + 256, &y, [m, n, kk])))
        })
    };
    let (xid, e) = bad_map(|y| mm::gemm_tmap_y(y, 71, 8));
    assert!(xid == 13 && e.contains("tmap_y") && e.contains("dims [8, 71]"), "{e}");
    let (xid, e) = bad_map(|y| TiledSpec { elem: omega::tma::TmaElem::Bf16, ..mm::gemm_tmap_y(y, 70, 16) });
    assert!(xid == 13 && e.contains("tmap_y") && e.contains("element type Bf16"), "{e}");
    // The cluster form runs in pairs: an odd grid is refused before it reaches the GPU.
    let e = on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let k = module.kernel(mm::GEMM_BF16_TN_MC).unwrap();
        let (dx, dw) = (device(s, &xb), device(s, &wb));
        let y = poisoned(s, (m * n) as usize);
        let b = mm::gemm_tmap_b_rows(dw.va(), n, kk, mm::GEMM_MC_B_BOX_ROWS);
        let maps = tmaps3(s, mm::gemm_tmap_a(dx.va(), m, kk), b, Some(mm::gemm_tmap_y(y.va(), m, n)));
        match gpu.launch(&staged_launch(&k, 3, maps.va(), maps.va() + 256, &y, [m, n, kk])) {
            Ok(_) => panic!("a cluster launch of 3 CTAs completed"),
            Err(e) => e.error.to_string(),
        }
    });
    assert!(e.contains("whole number of clusters"), "{e}");
}

// ----- the GEMVs -----------------------------------------------------------------------------------------

/// One dense GEMV launch of `[m, k] · [n, k]ᵀ` split as `plan` says, checked, tickets zero after.
#[allow(clippy::too_many_arguments)]
fn gemv_case<'s>(
    s: &'s Scope<'s>,
    gpu: Gpu<'s>,
    module: &omega::Module<'s>,
    g: &mut SmallRng,
    [m, n, kk]: [u32; 3],
    plan: mm::GemvPlan,
) -> Gpu<'s> {
    let name = mm::GEMV_BF16_TN[mm::gemv_variant(m)];
    let k = module.kernel(name).unwrap();
    let (xb, x) = bf16s(g, (m * kk) as usize);
    let (wb, w) = bf16s(g, (n * kk) as usize);
    let (dx, dw) = (device(s, &xb), device(s, &wb));
    let y = poisoned(s, (m * n) as usize);
    let work = poisoned(s, plan.work_floats(m, n).max(1) as usize);
    let mut tickets = device(s, &vec![0u32; plan.blocks as usize]);
    let l = Launch::new(&k)
        .grid([plan.blocks, plan.split, 1])
        .block([mm::GEMV_THREADS, 1, 1])
        .arg(&dx)
        .arg(&dw)
        .arg(&y)
        .arg(&work)
        .arg(&tickets)
        .arg(m)
        .arg(n)
        .arg(kk)
        .arg(plan.k_per_split);
    let gpu = gpu.launch(&l).unwrap().gpu;
    let mut y = y;
    check(&format!("{name} {plan:?}"), &y.to_vec().unwrap(), &x, &w, [m, n, kk].map(|v| v as usize));
    assert!(tickets.to_vec().unwrap().iter().all(|&t| t == 0), "{name} {plan:?}: tickets left non-zero");
    gpu
}

#[test]
fn the_gemv_matches_f64_for_every_m_up_to_64_with_and_without_a_k_split() {
    let mut g = rng("gemv");
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let mut gpu = gpu;
        for m in [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 48, 63, 64] {
            for (n, kk) in [(7u32, 4064u32), (33, 1024), (100, 96), (1000, 32)] {
                // The library's plan on an H200, on an SM count that splits differently, and on one SM
                // (one slice of all of K: the row-streaming form for M <= 4 once K >= 1024).
                for sms in [132, 7, 1] {
                    gpu = gemv_case(s, gpu, &module, &mut g, [m, n, kk], mm::gemv_plan(n, kk, sms));
                }
            }
        }
        // The split is gridDim.y slices of k_per_split, whatever the planner would say: 64 of K per slice.
        let plan = mm::GemvPlan { blocks: 2, split: 16, k_per_split: 64 };
        gpu = gemv_case(s, gpu, &module, &mut g, [5, 65, 1024], plan);
        // The streaming form over a split: slices of 2048 and 2016, then the ticket.
        for m in [1, 3, 4, 5] {
            let plan = mm::GemvPlan { blocks: 2, split: 2, k_per_split: 2048 };
            gpu = gemv_case(s, gpu, &module, &mut g, [m, 100, 4064], plan);
        }
        // One slice of the whole K, written straight to y.
        gemv_case(s, gpu, &module, &mut g, [1, 1, 32], mm::GemvPlan { blocks: 1, split: 1, k_per_split: 32 });
    });
}

#[test]
fn a_gemv_ticket_that_was_not_zero_stays_so_and_a_short_or_misaligned_buffer_faults() {
    let (m, n, kk) = (2u32, 64u32, 256u32);
    let plan = mm::GemvPlan { blocks: 1, split: 4, k_per_split: 64 };
    // Ticket 1 before: the third CTA to arrive takes split - 1, sums early and resets it; the fourth
    // leaves 1 behind, as it would on the GPU.
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let k = module.kernel(mm::GEMV_BF16_TN[0]).unwrap();
        let (dx, dw) = (device(s, &vec![0x3f80u16; (m * kk) as usize]), device(s, &vec![0x3f80u16; (n * kk) as usize]));
        let (y, work) = (poisoned(s, (m * n) as usize), poisoned(s, plan.work_floats(m, n) as usize));
        let mut tickets = device(s, &[1u32]);
        let l = Launch::new(&k)
            .grid([plan.blocks, plan.split, 1])
            .block([mm::GEMV_THREADS, 1, 1])
            .arg(&dx)
            .arg(&dw)
            .arg(&y)
            .arg(&work)
            .arg(&tickets)
            .arg(m)
            .arg(n)
            .arg(kk)
            .arg(plan.k_per_split);
        gpu.launch(&l).unwrap();
        assert_eq!(tickets.to_vec().unwrap(), [1]);
    });
    // A y one float short of N, allocated on its own (see the TMA GEMM's faults).
    let (m, n, kk) = (1u32, Y_SHORT as u32 + 1, 32u32);
    let plan = mm::gemv_plan(n, kk, 132);
    let run = |y_len: usize, w_offset: u64, block: u32| -> (u32, String, u64) {
        on_sim(|s, gpu| {
            let module = s.load_module(module()).unwrap();
            let k = module.kernel(mm::GEMV_BF16_TN[0]).unwrap();
            let (dx, dw) = (device(s, &vec![0u16; (m * kk) as usize]), device(s, &vec![0u16; (n * kk + 8) as usize]));
            let y = poisoned(s, y_len);
            let work = poisoned(s, plan.work_floats(m, n) as usize);
            let tickets = device(s, &vec![0u32; plan.blocks as usize]);
            let l = Launch::new(&k)
                .grid([plan.blocks, plan.split, 1])
                .block([block, 1, 1])
                .arg(&dx)
                .arg(dw.va() + w_offset)
                .arg(&y)
                .arg(&work)
                .arg(&tickets)
                .arg(m)
                .arg(n)
                .arg(kk)
                .arg(plan.k_per_split);
            let (xid, e) = fault_of(gpu.launch(&l));
            (xid, e, y.va())
        })
    };
    let (xid, e, y) = run(Y_SHORT, 0, mm::GEMV_THREADS);
    assert!(xid == 31 && e.contains(&format!("at {:#x}", y + 4 * Y_SHORT as u64)), "y one float short: {e}");
    let (xid, e, _) = run((m * n) as usize, 8, mm::GEMV_THREADS);
    assert!(xid == 13 && e.contains("misaligned") && e.contains("W row"), "{e}");
    let (xid, e, _) = run((m * n) as usize, 0, 64);
    assert!(xid == 13 && e.contains("written for [128, 1, 1]"), "{e}");
}

// ----- the skinny GEMM ------------------------------------------------------------------------------------

/// One launch of the skinny entry for `m` rows: x and W at their buffers' start unless `w_offset` moves
/// W, `plan`'s grid, split and slices; its y of `y_len` floats (f32) or bf16 pairs (`bf16`).
struct SkinnyRun<'a, 's> {
    dx: &'a Mem<'s, Device<u16>>,
    w_va: u64,
    y_va: u64,
    work: &'a Mem<'s, Device<f32>>,
    tickets: &'a Mem<'s, Device<u32>>,
    shape: [u32; 3],
    plan: mm::SkinnyPlan,
    bf16: bool,
    block: u32,
    smem: u32,
}

impl<'s> SkinnyRun<'_, 's> {
    fn launch<'k>(&'k self, k: &'k omega::Kernel<'s>) -> Launch<'k, 's> {
        let [m, n, kk] = self.shape;
        Launch::new(k)
            .grid([self.plan.grid, 1, 1])
            .block([self.block, 1, 1])
            .dynamic_shared(self.smem)
            .arg(self.dx)
            .arg(self.w_va)
            .arg(self.y_va)
            .arg(self.work)
            .arg(self.tickets)
            .arg(m)
            .arg(n)
            .arg(kk)
            .arg(self.plan.k_per_split)
            .arg(self.plan.splits)
            .arg(u32::from(self.bf16))
    }
}

fn skinny_work<'s>(s: &'s Scope<'s>, plan: mm::SkinnyPlan) -> Mem<'s, Device<f32>> {
    poisoned(s, mm::skinny_work_floats(plan.variant, plan.tiles, plan.splits).max(4) as usize)
}

/// The skinny GEMM of random operands by `plan` into an f32 y and a bf16 one (both poisoned): the f32
/// within the f64 tolerance, the bf16 its f32 rounded to nearest even (the same accumulators), the
/// tickets back at zero after both.
fn skinny_case<'s>(
    s: &'s Scope<'s>,
    gpu: Gpu<'s>,
    module: &omega::Module<'s>,
    g: &mut SmallRng,
    [m, n, kk]: [u32; 3],
    plan: mm::SkinnyPlan,
) -> Gpu<'s> {
    let name = mm::SKINNY_BF16_TN[plan.variant];
    let k = module.kernel(name).unwrap();
    let (xb, x) = bf16s(g, (m * kk) as usize);
    let (wb, w) = bf16s(g, (n * kk) as usize);
    let (dx, dw) = (device(s, &xb), device(s, &wb));
    let mut y = poisoned(s, (m * n) as usize);
    let mut y16 = device(s, &vec![0xdeadu16; (m * n) as usize]);
    let work = skinny_work(s, plan);
    let mut tickets = device(s, &vec![0u32; plan.tiles as usize]);
    let smem = mm::skinny_smem_bytes(plan.variant);
    let mut gpu = gpu;
    for (y_va, bf16) in [(y.va(), false), (y16.va(), true)] {
        let run = SkinnyRun {
            dx: &dx,
            w_va: dw.va(),
            y_va,
            work: &work,
            tickets: &tickets,
            shape: [m, n, kk],
            plan,
            bf16,
            block: mm::SKINNY_THREADS,
            smem,
        };
        gpu = gpu.launch(&run.launch(&k)).unwrap().gpu;
    }
    let got = y.to_vec().unwrap();
    check(&format!("{name} {plan:?}"), &got, &x, &w, [m, n, kk].map(|v| v as usize));
    let rounded: Vec<u16> = got.iter().map(|&v| mm::f32_to_bf16(v)).collect();
    assert_eq!(y16.to_vec().unwrap(), rounded, "{name} {plan:?}: the bf16 output is the f32 one rounded");
    assert!(tickets.to_vec().unwrap().iter().all(|&t| t == 0), "{name} {plan:?}: tickets left non-zero");
    gpu
}

#[test]
fn the_skinny_gemm_matches_f64_for_every_m_up_to_64_split_or_not_into_f32_and_bf16() {
    let mut g = rng("skinny");
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let mut gpu = gpu;
        // Odd N (ragged 128-row tiles), K past and below one stage, K % 64 != 0 (a zero-filled tail).
        for m in [1, 2, 3, 5, 8, 9, 13, 16, 17, 31, 32, 33, 47, 64] {
            for (n, kk) in [(7u32, 1000u32), (129, 520), (300, 64), (1, 8)] {
                // The planner's launch on an H200, on 3 SMs (other splits, a grid below the units), and
                // within a budget of 1 CTA (one persistent CTA takes every unit).
                for (sms, budget) in [(132, 1024), (3, 1024), (132, 1)] {
                    gpu = skinny_case(s, gpu, &module, &mut g, [m, n, kk], mm::skinny_plan(m, n, kk, sms, budget));
                }
            }
        }
        // Eight slices of one stage over a grid of 5: units walk the grid, the last of a tile adds them.
        let plan = mm::SkinnyPlan { variant: 1, splits: 8, k_per_split: 64, grid: 5, tiles: 3 };
        skinny_case(s, gpu, &module, &mut g, [11, 300, 512], plan);
    });
}

#[test]
fn the_skinny_gemm_faults_on_what_it_cannot_run_and_a_ticket_not_zero_stays_so() {
    let (m, n, kk) = (2u32, 64u32, 256u32);
    let plan = mm::SkinnyPlan { variant: 0, splits: 4, k_per_split: 64, grid: 4, tiles: 1 };
    let run = |shape: [u32; 3], plan: mm::SkinnyPlan, w_offset: u64, block: u32, smem: u32, ticket: u32| {
        on_sim(|s, gpu| {
            let module = s.load_module(module()).unwrap();
            let k = module.kernel(mm::SKINNY_BF16_TN[plan.variant]).unwrap();
            let [m, n, kk] = shape;
            let dx = device(s, &vec![0x3f80u16; (m * kk) as usize]);
            let dw = device(s, &vec![0x3f80u16; (n * kk + 8) as usize]);
            let y = poisoned(s, (m * n) as usize);
            let work = skinny_work(s, plan);
            let mut tickets = device(s, &vec![ticket; plan.tiles as usize]);
            let w_va = dw.va() + w_offset;
            let r = SkinnyRun {
                dx: &dx,
                w_va,
                y_va: y.va(),
                work: &work,
                tickets: &tickets,
                shape,
                plan,
                bf16: false,
                block,
                smem,
            };
            let out = gpu.launch(&r.launch(&k)).map(|_| ()).map_err(|e| e.error.to_string());
            (out, tickets.to_vec().unwrap())
        })
    };
    let smem = mm::skinny_smem_bytes(0);
    // Ticket 1 before: the third unit takes splits - 1, sums early and resets it; the fourth leaves 1.
    let (r, t) = run([m, n, kk], plan, 0, mm::SKINNY_THREADS, smem, 1);
    assert!(r.is_ok() && t == [1], "{r:?} {t:?}");
    let fails = |r: (Result<(), String>, Vec<u32>), want: &[&str]| {
        let e = r.0.expect_err("a fault was expected");
        assert!(want.iter().all(|w| e.contains(w)), "{e}");
    };
    fails(run([m, n, kk], plan, 8, mm::SKINNY_THREADS, smem, 0), &["misaligned", "W row"]);
    fails(run([m, n, kk], plan, 0, 64, smem, 0), &["written for [128, 1, 1]"]);
    fails(run([m, n, kk], plan, 0, mm::SKINNY_THREADS, smem - 16, 0), &["dynamic shared memory"]);
    fails(run([9, n, kk], plan, 0, mm::SKINNY_THREADS, smem, 0), &["M = 9", "1 to 8 rows"]);
    let ragged = mm::SkinnyPlan { k_per_split: 96, ..plan };
    fails(run([m, n, kk], ragged, 0, mm::SKINNY_THREADS, smem, 0), &["k_per_split 96"]);
    let short = mm::SkinnyPlan { splits: 3, ..plan };
    fails(run([m, n, kk], short, 0, mm::SKINNY_THREADS, smem, 0), &["3 splits"]);
}

// ----- routing and the grouped GEMV ----------------------------------------------------------------------

/// The routing the kernel must produce: per expert its choices in increasing choice index.
fn route_ref(topk: &[u32], top_k: u32, e: u32) -> (Vec<u32>, Vec<u32>, Vec<u32>, u32) {
    let mut offsets = vec![0u32];
    let (mut rows, mut pairs) = (Vec::new(), Vec::new());
    for expert in 0..e {
        for (p, _) in topk.iter().enumerate().filter(|(_, &c)| c == expert) {
            rows.push(p as u32 / top_k);
            pairs.push(p as u32);
        }
        offsets.push(rows.len() as u32);
    }
    (offsets, rows, pairs, topk.iter().filter(|&&c| c >= e).count() as u32)
}

/// Random top-k choices: distinct experts per token from the first `used` of `e` (so the rest get no
/// rows), and `bad` choices replaced by ids >= e.
fn choices(g: &mut SmallRng, t: u32, top_k: u32, e: u32, used: u32, bad: u32) -> Vec<u32> {
    let mut topk = Vec::new();
    for _ in 0..t {
        let mut mine: Vec<u32> = Vec::new();
        while mine.len() < top_k as usize {
            let c = g.random_range(0..used);
            if !mine.contains(&c) {
                mine.push(c);
            }
        }
        topk.extend(mine);
    }
    for _ in 0..bad {
        let i = g.random_range(0..topk.len());
        topk[i] = e + g.random_range(0..5);
    }
    topk
}

/// The touched experts the route kernel lists: those with a slot, in increasing order.
fn touched(offsets: &[u32]) -> Vec<u32> {
    (0..offsets.len() - 1).filter(|&e| offsets[e] != offsets[e + 1]).map(|e| e as u32).collect()
}

#[test]
fn routing_places_every_choice_in_expert_order_lists_the_touched_experts_and_the_grouped_gemv_computes_each_slot() {
    let mut g = rng("moe");
    // (tokens, top-k, experts, experts used, out-of-range choices, N, K, split, grid z)
    let cases: [[u32; 9]; 7] = [
        [1, 1, 1, 1, 0, 1, 32, 1, 1],
        [3, 2, 8, 5, 1, 33, 128, 2, 6],
        [8, 8, 128, 40, 2, 70, 256, 4, 64],
        // z smaller than the touched count: CTAs walk the list's entries grid-stride.
        [8, 8, 128, 40, 2, 70, 256, 2, 7],
        [13, 4, 16, 16, 0, 7, 4064, 3, 16],
        [64, 2, 6, 6, 3, 64, 96, 1, 2],
        // The row-streaming form: a few rows per expert over slices of 1024.
        [2, 4, 32, 32, 0, 130, 2048, 2, 8],
    ];
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let route = module.kernel(mm::MOE_ROUTE).unwrap();
        let mut gpu = gpu;
        for [t, top_k, e, used, bad, n, kk, split, z] in cases {
            let topk = choices(&mut g, t, top_k, e, used, bad);
            let slots = (t * top_k) as usize;
            let room = slots.min(e as usize);
            let dtopk = device(s, &topk);
            let mut offsets = device(s, &vec![POISON_U32; e as usize + 1]);
            let mut rows = device(s, &vec![POISON_U32; slots]);
            let mut pairs = device(s, &vec![POISON_U32; slots]);
            // A stale drop count: the kernel stores, it does not add.
            let mut dropped = device(s, &[7u32]);
            let mut active = device(s, &vec![POISON_U32; 1 + room]);
            let l = Launch::new(&route)
                .block([mm::ROUTE_THREADS, 1, 1])
                .arg(&dtopk)
                .arg(t)
                .arg(top_k)
                .arg(e)
                .arg(&offsets)
                .arg(&rows)
                .arg(&pairs)
                .arg(&dropped)
                .arg(&active);
            gpu = gpu.launch(&l).unwrap().gpu;
            let (want_off, want_rows, want_pairs, want_bad) = route_ref(&topk, top_k, e);
            let placed = want_rows.len();
            let what = format!("route T={t} top_k={top_k} E={e}");
            assert_eq!(offsets.to_vec().unwrap(), want_off, "{what}: offsets");
            assert_eq!(rows.to_vec().unwrap()[..placed], want_rows, "{what}: rows");
            assert_eq!(pairs.to_vec().unwrap()[..placed], want_pairs, "{what}: pairs");
            assert_eq!(dropped.to_vec().unwrap(), [want_bad], "{what}: dropped");
            let list = touched(&want_off);
            let got_active = active.to_vec().unwrap();
            assert_eq!(got_active[0] as usize, list.len(), "{what}: the touched count");
            assert_eq!(got_active[1..=list.len()], list, "{what}: the touched experts");
            assert!(got_active[1 + list.len()..].iter().all(|&v| v == POISON_U32), "{what}: past the list");
            assert!((0..e as usize).any(|x| want_off[x] == want_off[x + 1]) || used == e, "{what}: an empty expert");

            // The grouped GEMV over that routing: slot i = x[rows[i]] · W[expert of i]ᵀ.
            let name = mm::MOE_GEMV_BF16[mm::gemv_variant(t * top_k / used.max(1))];
            let kernel = module.kernel(name).unwrap();
            let (xb, x) = bf16s(&mut g, (t * kk) as usize);
            let (wb, w) = bf16s(&mut g, (e * n * kk) as usize);
            let (dx, dw) = (device(s, &xb), device(s, &wb));
            let blocks = n.div_ceil(mm::GEMV_ROWS);
            let kps = kk.div_ceil(split).next_multiple_of(mm::GEMV_K_CHUNK);
            assert_eq!(kk.div_ceil(kps), split, "{what}: the case's split is kept");
            let max_slots = slots as u32;
            let y = poisoned(s, slots * n as usize);
            let work_floats = if split > 1 { split as usize * slots * n as usize } else { 1 };
            let work = poisoned(s, work_floats);
            let mut tickets = device(s, &vec![0u32; room * blocks as usize]);
            let l = Launch::new(&kernel)
                .grid([blocks, split, z])
                .block([mm::GEMV_THREADS, 1, 1])
                .arg(&dx)
                .arg(&dw)
                .arg(&y)
                .arg(&work)
                .arg(&tickets)
                .arg(&offsets)
                .arg(&rows)
                .arg(&active)
                .arg(n)
                .arg(kk)
                .arg(kps)
                .arg(max_slots);
            gpu = gpu.launch(&l).unwrap().gpu;
            let mut y = y;
            let got = y.to_vec().unwrap();
            let (n_, k_) = (n as usize, kk as usize);
            for expert in 0..e as usize {
                let (lo, hi) = (want_off[expert] as usize, want_off[expert + 1] as usize);
                if lo == hi {
                    continue;
                }
                let xs: Vec<f32> =
                    want_rows[lo..hi].iter().flat_map(|&r| x[r as usize * k_..][..k_].to_vec()).collect();
                let we = &w[expert * n_ * k_..][..n_ * k_];
                check(&format!("{name} {what} expert {expert}"), &got[lo * n_..hi * n_], &xs, we, [hi - lo, n_, k_]);
            }
            // Slots past the placed ones (the dropped choices') are never written.
            assert!(got[placed * n_..].iter().all(|v| v.to_bits() == POISON.to_bits()), "{what}: unplaced slots");
            assert!(tickets.to_vec().unwrap().iter().all(|&t| t == 0), "{what}: tickets left non-zero");
        }
    });
}

#[test]
fn routing_takes_more_experts_than_threads_in_passes_and_stores_the_drop_count() {
    let mut g = rng("route passes");
    let (t, top_k, e) = (7u32, 3u32, 2500u32);
    let topk = choices(&mut g, t, top_k, e, e, 2);
    let (want_off, want_rows, want_pairs, want_bad) = route_ref(&topk, top_k, e);
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let route = module.kernel(mm::MOE_ROUTE).unwrap();
        let dtopk = device(s, &topk);
        let mut offsets = device(s, &vec![POISON_U32; e as usize + 1]);
        let mut rows = device(s, &vec![POISON_U32; topk.len()]);
        let mut pairs = device(s, &vec![POISON_U32; topk.len()]);
        let mut dropped = device(s, &[5u32]);
        let mut active = device(s, &vec![POISON_U32; 1 + topk.len()]);
        // Two CTAs: each stores the same values.
        let l = Launch::new(&route)
            .grid([2, 1, 1])
            .block([mm::ROUTE_THREADS, 1, 1])
            .arg(&dtopk)
            .arg(t)
            .arg(top_k)
            .arg(e)
            .arg(&offsets)
            .arg(&rows)
            .arg(&pairs)
            .arg(&dropped)
            .arg(&active);
        gpu.launch(&l).unwrap();
        assert_eq!(offsets.to_vec().unwrap(), want_off);
        assert_eq!(rows.to_vec().unwrap()[..want_rows.len()], want_rows);
        assert_eq!(pairs.to_vec().unwrap()[..want_pairs.len()], want_pairs);
        assert_eq!(dropped.to_vec().unwrap(), [want_bad]);
        let list = touched(&want_off);
        assert!(list.iter().any(|&x| x >= mm::ROUTE_THREADS), "experts of a later pass are listed");
        let got = active.to_vec().unwrap();
        assert_eq!((got[0] as usize, &got[1..=list.len()]), (list.len(), &list[..]));
    });
}

// ----- the SIMT GEMMs ------------------------------------------------------------------------------------

/// What the SIMT kernels compute, bit for bit: one fused multiply-add chain per output, k ascending.
fn fma_chain(x: &[f32], w: &[f32], [m, n, k]: [usize; 3]) -> Vec<f32> {
    let mut y = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            y.push((0..k).fold(0f32, |acc, kk| x[i * k + kk].mul_add(w[j * k + kk], acc)));
        }
    }
    y
}

fn simt_grid(m: u32, n: u32) -> [u32; 3] {
    [n.div_ceil(mm::SIMT_TILE), m.div_ceil(mm::SIMT_TILE), 1]
}

#[test]
fn the_simt_gemms_match_f64_and_their_fma_chain_bit_for_bit_at_any_shape_and_alignment() {
    let mut g = rng("simt");
    let shapes: [[u32; 3]; 6] = [[1, 1, 1], [7, 33, 1000], [33, 7, 4095], [129, 130, 17], [1000, 7, 33], [4, 3, 0]];
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let f32k = module.kernel(mm::GEMM_F32_TN).unwrap();
        let bf16k = module.kernel(mm::GEMM_BF16_SIMT_TN).unwrap();
        let mut gpu = gpu;
        for [m, n, kk] in shapes {
            let dims = [m, n, kk].map(|v| v as usize);
            let (x, w) = (f32s(&mut g, (m * kk) as usize), f32s(&mut g, (n * kk) as usize));
            let (dx, dw) = (device(s, &x), device(s, &w));
            let mut y = poisoned(s, (m * n) as usize);
            let l = Launch::new(&f32k)
                .grid(simt_grid(m, n))
                .block([mm::SIMT_THREADS, 1, 1])
                .arg(&dx)
                .arg(&dw)
                .arg(&y)
                .arg(m)
                .arg(n)
                .arg(kk);
            gpu = gpu.launch(&l).unwrap().gpu;
            let got = y.to_vec().unwrap();
            check("gemm_f32_tn", &got, &x, &w, dims);
            assert_eq!(got, fma_chain(&x, &w, dims), "gemm_f32_tn {m}x{n}x{kk}: not its fma chain");

            // bf16 from odd element offsets: 2-byte aligned, never 16 (the path for unaligned operands).
            let (xb, xv) = bf16s(&mut g, (m * kk) as usize + 1);
            let (wb, wv) = bf16s(&mut g, (n * kk) as usize + 3);
            let (dx, dw) = (device(s, &xb), device(s, &wb));
            y.write(&vec![POISON; (m * n) as usize]).unwrap();
            let l = Launch::new(&bf16k)
                .grid(simt_grid(m, n))
                .block([mm::SIMT_THREADS, 1, 1])
                .arg(dx.va() + 2)
                .arg(dw.va() + 6)
                .arg(&y)
                .arg(m)
                .arg(n)
                .arg(kk);
            gpu = gpu.launch(&l).unwrap().gpu;
            let got = y.to_vec().unwrap();
            let (xv, wv) = (&xv[1..], &wv[3..]);
            check("gemm_bf16_simt_tn", &got, xv, wv, dims);
            assert_eq!(got, fma_chain(xv, wv, dims), "gemm_bf16_simt_tn {m}x{n}x{kk}: not its fma chain");
        }
    });
}

#[test]
fn the_f32_gemm_candidates_are_the_simt_kernels_fma_chain_bit_for_bit_at_any_shape_and_alignment() {
    let mut g = rng("sgemm v2");
    // Ragged tile edges, K below, at and past a slice, K % 4 != 0 (the scalar path) and K = 0.
    let shapes: [[u32; 3]; 7] =
        [[1, 1, 1], [7, 33, 1000], [129, 257, 71], [33, 7, 4095], [130, 129, 16], [1000, 7, 33], [4, 3, 0]];
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let mut gpu = gpu;
        // The candidates on their 2-D grids, then the persistent zigzag form on grids of 1 and 3 CTAs
        // (each walks every tile whatever the grid).
        let best = mm::GEMM_F32_TN_V2[mm::GEMM_F32_TN_V2_BEST];
        let persistent = [1, 3].map(|g| (mm::SgemmVariant { name: mm::GEMM_F32_TN_PERSISTENT, ..best }, Some(g)));
        for (v, walk) in mm::GEMM_F32_TN_V2.map(|v| (v, None)).into_iter().chain(persistent) {
            let kernel = module.kernel(v.name).unwrap();
            for [m, n, kk] in shapes {
                let dims = [m, n, kk].map(|d| d as usize);
                // One float past the allocation's start when K % 4 == 0: 4-byte aligned, never 16 (the
                // scalar path with whole vectors' K).
                let skew = usize::from(kk % 4 == 0 && m % 2 == 1);
                let x = f32s(&mut g, (m * kk) as usize + skew);
                let w = f32s(&mut g, (n * kk) as usize + skew);
                let (dx, dw) = (device(s, &x), device(s, &w));
                let mut y = poisoned(s, (m * n) as usize);
                let at = 4 * skew as u64;
                let l = Launch::new(&kernel)
                    .grid(walk.map_or(v.grid(m, n), |g| [g, 1, 1]))
                    .block([v.threads, 1, 1])
                    .arg(dx.va() + at)
                    .arg(dw.va() + at)
                    .arg(&y)
                    .arg(m)
                    .arg(n)
                    .arg(kk);
                gpu = gpu.launch(&l).unwrap().gpu;
                let got = y.to_vec().unwrap();
                let (x, w) = (&x[skew..], &w[skew..]);
                check(v.name, &got, x, w, dims);
                assert_eq!(got, fma_chain(x, w, dims), "{} {m}x{n}x{kk}: not its fma chain", v.name);
            }
        }
    });
}

#[test]
fn an_f32_gemm_candidate_covers_the_tiles_its_grid_names_and_no_others() {
    let mut g = rng("sgemm v2 grid");
    let v = mm::GEMM_F32_TN_V2[mm::GEMM_F32_TN_V2_BEST];
    let (m, n, kk) = (300u32, 200u32, 5u32);
    let (x, w) = (f32s(&mut g, (m * kk) as usize), f32s(&mut g, (n * kk) as usize));
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let k = module.kernel(v.name).unwrap();
        let (dx, dw) = (device(s, &x), device(s, &w));
        let mut y = poisoned(s, (m * n) as usize);
        // One tile column of two rows of tiles: rows 0..256, columns 0..128.
        let l =
            Launch::new(&k).grid([1, 2, 1]).block([v.threads, 1, 1]).arg(&dx).arg(&dw).arg(&y).arg(m).arg(n).arg(kk);
        gpu.launch(&l).unwrap();
        let got = y.to_vec().unwrap();
        let want = fma_chain(&x, &w, [m, n, kk].map(|d| d as usize));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let (r, c) = (i / n as usize, i % n as usize);
            if r < 256 && c < 128 {
                assert_eq!(g, w, "y[{r}, {c}]");
            } else {
                assert_eq!(g.to_bits(), POISON.to_bits(), "y[{r}, {c}] is outside the grid's tiles");
            }
        }
    });
}

#[test]
fn a_simt_grid_covers_the_tiles_it_names_and_no_others() {
    let mut g = rng("simt grid");
    let (m, n, kk) = (300u32, 200u32, 5u32);
    let (x, w) = (f32s(&mut g, (m * kk) as usize), f32s(&mut g, (n * kk) as usize));
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let k = module.kernel(mm::GEMM_F32_TN).unwrap();
        let (dx, dw) = (device(s, &x), device(s, &w));
        let mut y = poisoned(s, (m * n) as usize);
        // One tile column of two rows of tiles: rows 0..256, columns 0..128; z repeats the same stores.
        let l = Launch::new(&k).grid([1, 2, 3]).block([256, 1, 1]).arg(&dx).arg(&dw).arg(&y).arg(m).arg(n).arg(kk);
        gpu.launch(&l).unwrap();
        let got = y.to_vec().unwrap();
        let want = fma_chain(&x, &w, [m, n, kk].map(|v| v as usize));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let (r, c) = (i / n as usize, i % n as usize);
            if r < 256 && c < 128 {
                assert_eq!(g, w, "y[{r}, {c}]");
            } else {
                assert_eq!(g.to_bits(), POISON.to_bits(), "y[{r}, {c}] is outside the grid's tiles");
            }
        }
    });
}

// ----- the conversion ------------------------------------------------------------------------------------

#[test]
fn conversion_rounds_to_nearest_even_keeps_nan_quiet_and_strides_over_any_grid() {
    let mut g = rng("convert");
    let specials = [
        0.0f32,
        -0.0,
        1.0,
        1.0 + 1.0 / 256.0,
        1.0 + 3.0 / 256.0,
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0xffc1_2345),
        f32::from_bits(1),
    ];
    on_sim(|s, gpu| {
        let module = s.load_module(module()).unwrap();
        let k = module.kernel(mm::CONVERT_F32_BF16).unwrap();
        let mut gpu = gpu;
        for (n, grid) in [(1usize, 1u32), (11, 1), (1000, 1), (70_001, 3), (70_001, 300)] {
            let mut input: Vec<f32> = (0..n).map(|_| g.random_range(-1e30f32..1e30)).collect();
            for (v, sp) in input.iter_mut().zip(specials) {
                *v = sp;
            }
            let din = device(s, &input);
            let mut out = device(s, &vec![0xdeadu16; n]);
            let l =
                Launch::new(&k).grid([grid, 1, 1]).block([mm::CONVERT_THREADS, 1, 1]).arg(&din).arg(&out).arg(n as u64);
            gpu = gpu.launch(&l).unwrap().gpu;
            let want: Vec<u16> = input.iter().map(|&v| mm::f32_to_bf16(v)).collect();
            assert_eq!(out.to_vec().unwrap(), want, "convert n={n} grid={grid}");
        }
        let want = [0x0000u16, 0x8000, 0x3f80, 0x3f80, 0x3f82, 0x7f80, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x0000];
        assert_eq!(specials.map(mm::f32_to_bf16), want);
        // A block of 128 threads converts the first half of every 256.
        let input: Vec<f32> = (0..600).map(|i| i as f32).collect();
        let din = device(s, &input);
        let mut out = device(s, &vec![0xdeadu16; 600]);
        gpu.launch(&Launch::new(&k).block([128, 1, 1]).arg(&din).arg(&out).arg(600u64)).unwrap();
        for (i, v) in out.to_vec().unwrap().into_iter().enumerate() {
            let want = if i % 256 < 128 { mm::f32_to_bf16(i as f32) } else { 0xdead };
            assert_eq!(v, want, "out[{i}]");
        }
    });
}
