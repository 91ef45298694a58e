//! The serving library on the simulator: reserve, prepare, seal, then many products (single calls and a
//! command list replayed) with the driver counters, `alloc_stats` and the simulator's live allocations
//! unchanged and every result right; an allocation after seal refused with its stage, a free held back
//! until release; release back to normal. The weights generator against its Python twin's output, and the
//! safetensors reader on a file it writes.
//!
//! Tolerance: as tests/matmul_lib.rs argues, `K · 2^-22 · Σ|x·w|` bounds a kernel's f32 sums against the
//! f64 one with a factor of 2 to 4 to spare.

use omega::libs::matmul::Shape;
use omega::libs::serving::safetensors::{self, Dtype, SafetensorsError};
use omega::libs::serving::weights;
use omega::libs::serving::{BoundsError, Serving, ServingBounds, ServingError};
use omega::{Device, Gpu, Mem, Scope, Scoped, Stage};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const POISON: f32 = f32::from_bits(0x7fc0_dead);

fn rng(test: &str) -> SmallRng {
    let seed = std::env::var("OMEGA_SERVING_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    println!("{test}: seed {seed} (rerun with OMEGA_SERVING_SEED={seed})");
    SmallRng::seed_from_u64(seed)
}

fn on_sim<R>(f: impl for<'s> FnOnce(&'s Scope<'s>, Gpu<'s>) -> R) -> R {
    let dev = omega::lock().open().expect("open");
    assert_eq!(dev.platform(), "sim", "these tests run where there is no GPU");
    match dev.close().open().expect("reopen").scope(f) {
        Scoped::Open(_, r) => r,
        Scoped::Latched(..) => panic!("a serving call latched the process"),
    }
}

fn sim() -> std::sync::Arc<omega::testing::Sim> {
    omega::testing::simulator().expect("the simulator is the platform")
}

const BOUNDS: ServingBounds = ServingBounds {
    max_m: 4,
    max_n: 96,
    max_k: 256,
    max_seq: 64,
    max_batch: 2,
    pages: 8,
    page_tokens: 16,
    layers: 2,
    kv_heads: 2,
    head_dim: 32,
    flags: 0,
};

/// One product's operands, random, and its output, poisoned.
struct Case<'s> {
    shape: Shape,
    xb: Vec<u16>,
    wb: Vec<u16>,
    x: Mem<'s, Device<u16>>,
    w: Mem<'s, Device<u16>>,
    y: Mem<'s, Device<f32>>,
}

fn case<'s>(s: &'s Scope<'s>, g: &mut SmallRng, shape: Shape) -> Case<'s> {
    let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
    let mut bf16s = |len: usize| -> Vec<u16> {
        (0..len).map(|_| half::bf16::from_f32(g.random_range(-1.0f32..1.0)).to_bits()).collect()
    };
    let (xb, wb) = (bf16s(m * k), bf16s(n * k));
    let (x, w) = (s.alloc_device_from(&xb).unwrap(), s.alloc_device_from(&wb).unwrap());
    let y = s.alloc_device_from(&vec![POISON; m * n]).unwrap();
    Case { shape, xb, wb, x, w, y }
}

impl Case<'_> {
    /// Reads y back and checks every element against the f64 product.
    fn check(&mut self, what: &str) {
        let (m, n, k) = (self.shape.m as usize, self.shape.n as usize, self.shape.k as usize);
        let got = self.y.to_vec().unwrap();
        let f = |b: u16| f64::from(half::bf16::from_bits(b).to_f32());
        for r in 0..m {
            for c in 0..n {
                let (mut sum, mut abs) = (0.0f64, 0.0f64);
                for i in 0..k {
                    let p = f(self.xb[r * k + i]) * f(self.wb[c * k + i]);
                    sum += p;
                    abs += p.abs();
                }
                let tol = k as f64 * 2f64.powi(-22) * abs;
                let v = f64::from(got[r * n + c]);
                assert!((v - sum).abs() <= tol, "{what}: y[{r},{c}] = {v}, want {sum} within {tol}");
            }
        }
    }

    fn poison(&mut self) {
        let n = self.y.len();
        self.y.write(&vec![POISON; n]).unwrap();
    }
}

/// What must not move while sealed.
fn counters(s: &Scope<'_>) -> (omega::session::DriverStats, omega::session::AllocStats, usize) {
    (s.driver_stats().expect("the simulator counts its driver calls"), s.alloc_stats(), sim().stats().live_allocations)
}

#[test]
fn sealed_products_ask_the_driver_for_nothing_and_release_returns_to_normal() {
    let mut g = rng("sealed");
    on_sim(|s, gpu| {
        let mut sv = Serving::reserve(s, BOUNDS).unwrap();
        let shapes = [Shape::new(1, 96, 256), Shape::new(4, 64, 128), Shape::new(3, 17, 40)];
        let mut gpu = gpu;
        for &sh in &shapes {
            gpu = sv.prepare_matmul(gpu, sh).unwrap();
        }
        assert_eq!(sv.prepared(), shapes);
        let mut cases: Vec<Case> = shapes.iter().map(|&sh| case(s, &mut g, sh)).collect();
        let mut listed = case(s, &mut g, shapes[1]);
        let mut list = s.cmdlist().unwrap();
        sv.matmul().add_bf16(&mut list, &listed.x, &listed.w, &listed.y, listed.shape).unwrap();
        gpu = gpu.submit(&mut list).unwrap().gpu;
        // A buffer of its own (past a chunk), freed while sealed: held back, given back at release.
        let big = s.alloc_device::<u8>(80 << 20).unwrap();

        let before = counters(s);
        let subs = sim().stats().submissions;
        let sealed = sv.seal().unwrap();
        assert!(s.is_sealed());
        for i in 0..300 {
            let c = &mut cases[i % shapes.len()];
            c.poison();
            gpu = sealed.serving().matmul().bf16(gpu, &c.x, &c.w, &mut c.y, c.shape).unwrap().gpu;
            if i % 50 < shapes.len() {
                c.check(&format!("sealed call {i}"));
            }
        }
        for _ in 0..40 {
            gpu = gpu.submit(&mut list).unwrap().gpu;
        }
        assert_eq!(counters(s), before, "300 products and 40 list submissions sealed: no driver call");
        // The list borrows its buffers: read once it is gone (still sealed). Its first submission, before
        // the seal, wrote y too; the counters show the 40 ran. The list's add had its own workspace, which
        // goes with the list: back to the memory manager's chunks, not to the driver.
        drop(list);
        listed.check("sealed list");
        let (driver, _, live) = counters(s);
        assert_eq!(
            (driver, live),
            (before.0.clone(), before.2),
            "the list's workspace went back without a driver call"
        );
        let big_bytes = (80u64 << 20) as usize;
        drop(big);
        let (driver, _, live) = counters(s);
        assert_eq!((driver, live), (before.0.clone(), before.2), "a free while sealed is held back");
        assert_eq!(sim().stats().submissions - subs, 300 + 40, "every product and list submission ran");

        let e = s.alloc_device::<f32>(big_bytes).unwrap_err();
        assert_eq!(e.stage(), Stage::Alloc);
        assert_eq!(
            e.to_string(),
            format!("alloc: serving sealed: allocation of {} bytes would ask the driver", 4 * big_bytes)
        );
        assert_eq!(counters(s).0, before.0, "the refusal asked nothing");
        assert!(matches!(s.seal(), Err(omega::Error::Setting { stage: Stage::Serving, .. })), "sealed already");

        sealed.release().unwrap();
        assert!(!s.is_sealed());
        let after = counters(s);
        // The big buffer, and whatever chunk the dropped list's buffers emptied, went back at release.
        let frees = |d: &omega::session::DriverStats| d.by_kind.iter().find(|(k, _)| *k == "free").map_or(0, |x| x.1);
        let given_back = before.2 - after.2;
        assert!(given_back >= 1, "the held-back buffer went back at release");
        assert_eq!(frees(&after.0), frees(&before.0) + given_back as u64, "one driver free each");
        let again = s.alloc_device::<f32>(big_bytes).unwrap();
        assert!(counters(s).0.ioctls > after.0.ioctls, "an allocation asks the driver again");
        drop(again);
        let past = sv.prepare_matmul(gpu, Shape::new(5, 8, 8)).expect_err("past the bounds");
        assert_eq!(past.stage(), Stage::Serving);
        assert_eq!(past.to_string(), "serving: shape 5x8x8 is past the bounds 4x96x256");
        assert!(sv.kv().is_some_and(|kv| kv.len() as u64 == BOUNDS.kv_elements().unwrap()));
    });
}

#[test]
fn bounds_that_describe_no_workload_are_refused_before_anything_is_allocated() {
    on_sim(|s, _gpu| {
        let allocs = s.alloc_stats().allocs;
        let refused = |b: ServingBounds| Serving::reserve(s, b).err().expect("refused");
        assert_eq!(
            refused(ServingBounds { max_k: 0, ..BOUNDS }),
            ServingError::Bounds(BoundsError::Zero { field: "max_k" })
        );
        assert_eq!(
            refused(ServingBounds { flags: 2, ..BOUNDS }),
            ServingError::Bounds(BoundsError::Flags { flags: 2 })
        );
        let huge = ServingBounds { pages: u32::MAX, page_tokens: u32::MAX, layers: u32::MAX, ..BOUNDS };
        assert_eq!(refused(huge), ServingError::Bounds(BoundsError::Overflow));
        assert_eq!(refused(huge).stage(), Stage::Serving);
        assert_eq!(s.alloc_stats().allocs, allocs);
    });
}

/// `python3 benches/torch/qwen_weights.py --seed 7 --tensor 3 --count 8 --scale 0.5`, then `--seed 12345
/// --tensor 41 --start 1000000 --count 8 --scale 0.02` (the pure-Python path; with numpy present the
/// script checks numpy's values against it first).
const PYTHON: [(u64, u64, u64, f32, [u16; 8]); 2] = [
    (7, 3, 0, 0.5, [0x3de1, 0xbedf, 0xbeed, 0xbe29, 0xbc26, 0x3eed, 0xbeb5, 0xbedb]),
    (12345, 41, 1_000_000, 0.02, [0xbc94, 0x3c1a, 0xbc67, 0xbb72, 0x3c4c, 0x3c76, 0xbbb9, 0xbaf2]),
];

#[test]
fn generated_weights_match_the_python_twin_bit_for_bit() {
    for (seed, tensor, start, a, want) in PYTHON {
        let mut got = [0u16; 8];
        weights::fill_bf16(seed, tensor, start, a, &mut got);
        assert_eq!(got, want, "seed {seed}, tensor {tensor}, from {start}");
    }
    // The script itself, when a Python is here: the same words for a third draw.
    let Ok(out) = std::process::Command::new("python3")
        .args([
            "benches/torch/qwen_weights.py",
            "--seed",
            "99",
            "--tensor",
            "5",
            "--start",
            "77",
            "--count",
            "64",
            "--scale",
            "0.125",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
    else {
        println!("no python3: the checked-in vectors above are the comparison");
        return;
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let py: Vec<u16> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| u16::from_str_radix(&l[2..], 16).unwrap()).collect();
    let mut got = vec![0u16; 64];
    weights::fill_bf16(99, 5, 77, 0.125, &mut got);
    assert_eq!(py, got);
}

#[test]
fn a_written_safetensors_file_reads_back_and_bad_ones_are_refused() {
    let mut g = rng("safetensors");
    let w: Vec<u16> = weights::bf16_tensor(g.random(), 1, 6 * 4, 0.1);
    let b: Vec<f32> = (0..5).map(|_| g.random_range(-1.0f32..1.0)).collect();
    let wb: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    let bb: Vec<u8> = b.iter().flat_map(|v| v.to_le_bytes()).collect();
    let file = safetensors::write(
        &[("model.layers.0.w", Dtype::Bf16, &[6, 4], &wb), ("model.norm.bias", Dtype::F32, &[5], &bb)],
        &[("format", "pt")],
    );
    let path = std::env::temp_dir().join(format!("omega-serving-{}.safetensors", std::process::id()));
    std::fs::write(&path, &file).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let st = safetensors::parse(&bytes).unwrap();
    assert_eq!(st.metadata.get("format").map(String::as_str), Some("pt"));
    let t = &st.tensors["model.layers.0.w"];
    assert_eq!((t.dtype, t.shape.as_slice(), t.bytes), (Dtype::Bf16, &[6u64, 4][..], &wb[..]));
    let t = &st.tensors["model.norm.bias"];
    assert_eq!((t.dtype, t.shape.as_slice(), t.bytes), (Dtype::F32, &[5u64][..], &bb[..]));
    assert_eq!(u64::from_le_bytes(bytes[..8].try_into().unwrap()) % 8, 0, "the header is padded to 8 bytes");

    assert!(matches!(safetensors::parse(&bytes[..bytes.len() - 1]), Err(SafetensorsError::Extent { .. })));
    assert!(matches!(safetensors::parse(&bytes[..20]), Err(SafetensorsError::Truncated { .. })));
    let lie = safetensors::write(&[("t", Dtype::F32, &[3], &bb[..8])], &[]);
    assert!(matches!(safetensors::parse(&lie), Err(SafetensorsError::Extent { needs: 12, .. })));
    let f16 = String::from_utf8(file.clone()).unwrap_or_default().replace("\"F32\"", "\"F16\"");
    if !f16.is_empty() {
        assert!(matches!(safetensors::parse(f16.as_bytes()), Err(SafetensorsError::Dtype { .. })));
    }
}
