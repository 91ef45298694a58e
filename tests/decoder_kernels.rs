//! The `decoder` module's kernels on the simulator, launched through the typed API (`load_module`,
//! `Launch`, device buffers) on fresh random inputs, every output poisoned first, and checked against
//! f64 references (written here, or shared with the GPU suite's `decoder` case in
//! `omega::kernels::decoder`: `router_f64`, `argmax_case`), or exactly, for what is a selection or a copy.
//!
//! Tolerances: the gather, the cast, the top-k choice and the argmax are exact (a copy, one rounding
//! that `half` performs independently, and selections). The router's weights are `e^(l_j - l_max) /
//! sum`: each f32 `expf` is within 2 ulp, the sum of at most 8 terms in [0, 1] adds at most 8 roundings
//! of 2^-24 relative, the division one more: 2^-20 absolute (weights are at most 1) bounds it with room,
//! and is far below the 1e-3 a wrong or missing expert would shift the weights by on these logits.
//! Each test prints its seed (rerun with `OMEGA_DECODER_SEED`). Tests take turns on the process's lock.

use omega::kernels::{self, decoder as dk, matmul as mm};
use omega::{Gpu, Launch, Scope, Scoped};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const POISON_U16: u16 = 0xdead;
const POISON_U32: u32 = 0xdead_beef;
const POISON_F32: f32 = f32::from_bits(0x7fc0_dead);

fn rng(test: &str) -> SmallRng {
    let seed = std::env::var("OMEGA_DECODER_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    println!("{test}: seed {seed} (rerun with OMEGA_DECODER_SEED={seed})");
    SmallRng::seed_from_u64(seed)
}

/// `f` with the decoder module loaded, in a scope of a freshly opened simulator.
fn on_sim<R>(f: impl for<'s> FnOnce(&'s Scope<'s>, Gpu<'s>, omega::Module<'s>) -> R) -> R {
    let nvcc = kernels::nvcc();
    assert!(nvcc.is_ok(), "CI installs the pinned nvcc set; the build said: {nvcc:?}");
    let dev = omega::lock().open().expect("open");
    assert_eq!(dev.platform(), "sim", "these tests run where there is no GPU");
    match dev.close().open().expect("reopen").scope(|s, gpu| {
        let module = s.load_module(kernels::cuda_module(dk::DECODER).unwrap()).unwrap();
        f(s, gpu, module)
    }) {
        Scoped::Open(_, r) => r,
        Scoped::Latched(..) => panic!("a kernel's launch latched the process"),
    }
}

#[test]
fn the_embedding_gather_copies_each_tokens_row_and_zeros_an_id_past_the_vocabulary() {
    let mut g = rng("embed");
    let (vocab, hidden, tokens) = (37u32, 70u32, 6u32);
    let table = mm::random_bf16(g.random(), (vocab * hidden) as usize);
    let mut ids: Vec<u32> = (0..tokens).map(|_| g.random_range(0..vocab)).collect();
    ids[2] = vocab + 3;
    on_sim(|s, gpu, module| {
        let k = module.kernel(dk::EMBED_BF16).unwrap();
        let (dt, di) = (s.alloc_device_from(&table).unwrap(), s.alloc_device_from(&ids).unwrap());
        let n = (tokens * hidden) as usize;
        let mut gpu = gpu;
        for grid in [1u32, 3, 64] {
            let mut out = s.alloc_device_from(&vec![POISON_U16; n]).unwrap();
            let l = Launch::new(&k)
                .grid([grid, 1, 1])
                .block([dk::GATHER_THREADS, 1, 1])
                .arg(&dt)
                .arg(&di)
                .arg(&out)
                .arg(tokens)
                .arg(hidden)
                .arg(vocab);
            gpu = gpu.launch(&l).unwrap().gpu;
            let got = out.to_vec().unwrap();
            for (t, &id) in ids.iter().enumerate() {
                let row = &got[t * hidden as usize..][..hidden as usize];
                if id < vocab {
                    assert_eq!(row, &table[(id * hidden) as usize..][..hidden as usize], "grid {grid}: token {t}");
                } else {
                    assert!(row.iter().all(|&b| b == 0), "grid {grid}: token {t}'s id {id} is past the vocabulary");
                }
            }
        }
    });
}

#[test]
fn the_cast_rounds_every_f32_to_the_nearest_even_bf16() {
    let mut g = rng("cast");
    let n = 10_007usize;
    let mut src: Vec<f32> = (0..n).map(|_| f32::from_bits(g.random::<u32>())).collect();
    // The rounding's edges: exact halves (to even, both ways), infinities, a NaN, the largest finite.
    src[..6].copy_from_slice(&[
        f32::from_bits(0x3f80_8000),
        f32::from_bits(0x3f81_8000),
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
    ]);
    on_sim(|s, gpu, module| {
        let k = module.kernel(dk::CAST_F32_BF16).unwrap();
        let ds = s.alloc_device_from(&src).unwrap();
        let mut out = s.alloc_device_from(&vec![POISON_U16; n]).unwrap();
        let l = Launch::new(&k).grid([5, 1, 1]).block([dk::GATHER_THREADS, 1, 1]).arg(&ds).arg(&out).arg(n as u64);
        let _ = gpu.launch(&l).unwrap();
        for (i, (&got, &x)) in out.to_vec().unwrap().iter().zip(&src).enumerate() {
            let want = half::bf16::from_f32(x);
            if x.is_nan() {
                assert!(half::bf16::from_bits(got).is_nan(), "[{i}] {x:e}: got {got:#06x}, want a NaN");
            } else {
                assert_eq!(got, want.to_bits(), "[{i}] {x:e}: got {got:#06x}, want {:#06x}", want.to_bits());
            }
        }
    });
}

#[test]
fn the_router_writes_each_tokens_top_k_experts_and_their_renormalised_weights() {
    let mut g = rng("router");
    on_sim(|s, gpu, module| {
        let kernel = module.kernel(dk::ROUTER_TOPK).unwrap();
        let mut gpu = gpu;
        for (tokens, experts, k) in [(7u32, 128u32, 8u32), (33, 8, 2), (1, 8, 8), (5, 128, 1)] {
            let mut logits: Vec<f32> = (0..tokens * experts).map(|_| g.random_range(-4.0f32..4.0)).collect();
            // A tie at the top of token 0: the lower expert comes first.
            let (a, b) = (experts as usize - 1, experts as usize / 2);
            logits[a] = 9.0;
            logits[b] = 9.0;
            let n = (tokens * k) as usize;
            let dl = s.alloc_device_from(&logits).unwrap();
            let mut topk = s.alloc_device_from(&vec![POISON_U32; n]).unwrap();
            let mut weights = s.alloc_device_from(&vec![POISON_F32; n]).unwrap();
            let l = Launch::new(&kernel)
                .grid([tokens.div_ceil(dk::ROUTER_TOKENS_PER_CTA), 1, 1])
                .block([dk::ROUTER_THREADS, 1, 1])
                .arg(&dl)
                .arg(&topk)
                .arg(&weights)
                .arg(tokens)
                .arg(experts)
                .arg(k);
            gpu = gpu.launch(&l).unwrap().gpu;
            let (got_i, got_w) = (topk.to_vec().unwrap(), weights.to_vec().unwrap());
            for t in 0..tokens as usize {
                let (want_i, want_w) = dk::router_f64(&logits[t * experts as usize..][..experts as usize], k as usize);
                let what = format!("T={tokens} E={experts} k={k} token {t}");
                assert_eq!(&got_i[t * k as usize..][..k as usize], &want_i[..], "{what}: experts");
                for (j, (&gw, &ww)) in got_w[t * k as usize..][..k as usize].iter().zip(&want_w).enumerate() {
                    assert!((f64::from(gw) - ww).abs() <= 2f64.powi(-20), "{what}: weight {j} = {gw:e}, want {ww:e}");
                }
            }
        }
    });
}

#[test]
fn the_argmax_finds_each_rows_first_largest_value_over_a_full_vocabulary() {
    let mut g = rng("argmax");
    on_sim(|s, gpu, module| {
        let kernel = module.kernel(dk::ARGMAX_F32).unwrap();
        let mut gpu = gpu;
        for (rows, cols, block, grid) in [(3u32, 151_936u32, 256u32, 3u32), (9, 1000, 32, 2), (2, 1, 256, 4)] {
            let (logits, want) = dk::argmax_case(g.random(), rows as usize, cols as usize);
            let dl = s.alloc_device_from(&logits).unwrap();
            let mut out = s.alloc_device_from(&vec![POISON_U32; rows as usize]).unwrap();
            let l = Launch::new(&kernel).grid([grid, 1, 1]).block([block, 1, 1]).arg(&dl).arg(&out).arg(rows).arg(cols);
            gpu = gpu.launch(&l).unwrap().gpu;
            assert_eq!(out.to_vec().unwrap(), want, "rows={rows} cols={cols} block={block} grid={grid}");
        }
    });
}

/// The library's chain in one command list, as a decode step ends and the next begins: the argmax writes
/// the tokens into device memory and the gather reads them from there (no host between), beside the
/// router and a cast.
#[test]
fn the_library_records_argmax_then_the_gather_of_its_tokens_in_one_submission() {
    use omega::libs::decoder::{Decoder, DeviceSpan};
    let mut g = rng("library");
    let (rows, vocab, hidden, experts, k) = (4u32, 1000u32, 64u32, 16u32, 4u32);
    let logits: Vec<f32> = (0..rows * vocab).map(|_| g.random_range(-8.0f32..8.0)).collect();
    let router: Vec<f32> = (0..rows * experts).map(|_| g.random_range(-4.0f32..4.0)).collect();
    let table = mm::random_bf16(g.random(), (vocab * hidden) as usize);
    let dev = omega::lock().open().expect("open");
    let dev = dev.close().open().expect("reopen");
    let r = dev.scope(|s, gpu| {
        let dec = Decoder::new(s).unwrap();
        let (dl, dr, dt) = (
            s.alloc_device_from(&logits).unwrap(),
            s.alloc_device_from(&router).unwrap(),
            s.alloc_device_from(&table).unwrap(),
        );
        let ids = s.alloc_device_from(&vec![POISON_U32; rows as usize]).unwrap();
        // The argmax writes the ids that the gather reads in the same list: the calls' borrows cannot say
        // that (a call holds its output mutably for the list's life), so both name them as a span.
        // SAFETY: the span is `ids`' own `rows` u32s, and `ids` outlives the list (it is read after the
        // submission, in this scope).
        let ids_in = unsafe { DeviceSpan::<u32>::new(ids.va(), rows as usize) };
        let mut ids_out = ids_in;
        let mut rows_out = s.alloc_device_from(&vec![POISON_U16; (rows * hidden) as usize]).unwrap();
        let mut topk = s.alloc_device_from(&vec![POISON_U32; (rows * k) as usize]).unwrap();
        let mut weights = s.alloc_device_from(&vec![POISON_F32; (rows * k) as usize]).unwrap();
        let mut cast = s.alloc_device_from(&vec![POISON_U16; (rows * vocab) as usize]).unwrap();
        {
            let mut list = s.cmdlist().unwrap();
            dec.record(&mut list, dec.argmax(&dl, &mut ids_out, [rows, vocab]).unwrap()).unwrap();
            dec.record(&mut list, dec.embed(&dt, &ids_in, &mut rows_out, [rows, hidden, vocab]).unwrap()).unwrap();
            dec.record(&mut list, dec.router_topk(&dr, &mut topk, &mut weights, [rows, experts, k]).unwrap()).unwrap();
            dec.record(&mut list, dec.cast_bf16(&dl, &mut cast, u64::from(rows * vocab)).unwrap()).unwrap();
            assert_eq!(list.len(), 4);
            let _gpu = gpu.submit(&mut list).unwrap().gpu;
        }
        let mut ids = ids;
        (ids.to_vec().unwrap(), rows_out.to_vec().unwrap(), topk.to_vec().unwrap(), cast.to_vec().unwrap())
    });
    let (ids, gathered, topk, cast) = match r {
        Scoped::Open(_, r) => r,
        Scoped::Latched(..) => panic!("the list latched the process"),
    };
    for r in 0..rows as usize {
        let row = &logits[r * vocab as usize..][..vocab as usize];
        let best = (0..row.len()).fold(0, |b, c| if row[c] > row[b] { c } else { b });
        assert_eq!(ids[r] as usize, best, "row {r}'s token");
        let h = hidden as usize;
        assert_eq!(&gathered[r * h..][..h], &table[best * h..][..h], "row {r}'s embedding is its token's");
        let (want, _) = dk::router_f64(&router[r * experts as usize..][..experts as usize], k as usize);
        assert_eq!(&topk[r * k as usize..][..k as usize], &want[..], "row {r}'s experts");
    }
    let want: Vec<u16> = logits.iter().map(|&x| half::bf16::from_f32(x).to_bits()).collect();
    assert_eq!(cast, want, "the cast");
}

#[test]
fn the_library_refuses_short_buffers_and_a_top_k_past_eight_before_launching() {
    use omega::error::Stage;
    use omega::libs::decoder::{DecError, DecShapeError, Decoder};
    on_sim(|s, _gpu, _module| {
        let dec = Decoder::new(s).unwrap();
        let logits = s.alloc_device_from(&[0f32; 128]).unwrap();
        let mut topk = s.alloc_device_from(&[0u32; 16]).unwrap();
        let mut weights = s.alloc_device_from(&[0f32; 16]).unwrap();
        let e = dec.router_topk(&logits, &mut topk, &mut weights, [1, 128, 9]).unwrap_err();
        assert_eq!(e.stage(), Stage::DecoderShape);
        assert!(matches!(e, DecError::Shape(DecShapeError::TopK { k: 9, experts: 128, .. })), "{e}");
        assert!(e.to_string().starts_with("decoder shape: "), "{e}");
        let e = dec.router_topk(&logits, &mut topk, &mut weights, [2, 128, 8]).unwrap_err();
        assert!(
            matches!(e, DecError::Shape(DecShapeError::Short { operand: "logits", len: 128, needs: 256, .. })),
            "{e}"
        );
        let mut ids = s.alloc_device_from(&[0u32; 1]).unwrap();
        let e = dec.argmax(&logits, &mut ids, [2, 64]).unwrap_err();
        assert!(matches!(e, DecError::Shape(DecShapeError::Short { operand: "out", len: 1, needs: 2, .. })), "{e}");
        let e = dec.argmax(&logits, &mut ids, [0, 64]).unwrap_err();
        assert!(matches!(e, DecError::Shape(DecShapeError::ZeroSide { .. })), "{e}");
    });
}

/// The L2 prefetch stores nothing: the buffers it names read the same after it, either instruction runs
/// over any whole span, and a bulk prefetch of a span off a 16-byte boundary is refused by name (the
/// instruction would fault), while line prefetches take it.
#[test]
fn the_l2_prefetch_changes_nothing_and_refuses_a_bulk_range_off_16_bytes() {
    use omega::libs::decoder::{DecError, DecOp, DecShapeError, Decoder, L2Prefetch};
    let mut g = rng("prefetch");
    on_sim(|s, mut gpu, _module| {
        let dec = Decoder::new(s).unwrap();
        let bits = mm::random_bf16(g.random(), 70_000);
        let mut a = s.alloc_device_from(&bits).unwrap();
        let mut b = s.alloc_device_from(&bits[..4099]).unwrap();
        let (whole, odd) = (span(&a, bits.len()), span(&b, 4099));
        for how in [L2Prefetch::Bulk, L2Prefetch::Lines] {
            let call = dec.l2_prefetch(&whole, None, how).unwrap();
            assert_eq!(call.op(), DecOp::Prefetch);
            gpu = dec.launch(gpu, call).unwrap_or_else(|(_, e)| panic!("{e}"));
        }
        let e = dec.l2_prefetch(&whole, Some(&odd), L2Prefetch::Bulk).unwrap_err();
        assert!(matches!(e, DecError::Shape(DecShapeError::Unaligned { operand: "b", bytes: 8198, .. })), "{e}");
        assert!(e.to_string().contains("a bulk prefetch needs both multiples of 16"), "{e}");
        dec.launch(gpu, dec.l2_prefetch(&whole, Some(&odd), L2Prefetch::Lines).unwrap())
            .unwrap_or_else(|(_, e)| panic!("{e}"));
        assert_eq!(a.to_vec().unwrap(), bits);
        assert_eq!(b.to_vec().unwrap(), &bits[..4099]);
    });
}

/// `len` u32s (or f32s) at `m` as a span two calls of one list may name, one writing, one reading.
fn span<T: omega::DeviceScalar>(
    m: &omega::Mem<'_, omega::Device<T>>,
    len: usize,
) -> omega::libs::decoder::DeviceSpan<T> {
    // SAFETY: the span is `m`'s own first `len` elements (callers pass at most its length), and `m` stays
    // allocated in the scope until after the list that names the span has run.
    unsafe { omega::libs::decoder::DeviceSpan::new(m.va(), len) }
}

/// A whole MoE block's routing and combine in one command list: router logits -> top k (device) ->
/// grouped GEMM (routed on the device) -> weighted sum into the bf16 residual, against f64.
///
/// Tolerance: the f64 sum `res + sum_j w_j (x . W_e)` against the stored bf16: one bf16 rounding (half an
/// ulp, at most 2^-8 of the value), the grouped GEMM's f32 additions (`K 2^-22 sum|x w|` per row, as
/// tests/matmul_kernels.rs argues, weighted by w_j <= 1), the weights' 2^-20 (see the module comment)
/// times each row's size, and the combine's own f32 fma chain and final add (2^-22 of the sum of
/// magnitudes).
#[test]
fn a_moe_block_routes_multiplies_and_combines_into_the_residual_in_one_submission() {
    use omega::libs::decoder::Decoder;
    use omega::libs::matmul::{GroupedShape, Matmul};
    let mut g = rng("moe");
    let (t, e, top_k, n, kk) = (5u32, 16u32, 4u32, 96u32, 64u32);
    let shape = GroupedShape { tokens: t, top_k, experts: e, n, k: kk };
    let (tu, nu, ku, p) = (t as usize, n as usize, kk as usize, (t * top_k) as usize);
    let xb = mm::random_bf16(g.random(), tu * ku);
    let wb = mm::random_bf16(g.random(), (e * n * kk) as usize);
    let res = mm::random_bf16(g.random(), tu * nu);
    let logits: Vec<f32> = (0..t * e).map(|_| g.random_range(-3.0f32..3.0)).collect();
    let dev = omega::lock().open().expect("open").close().open().expect("reopen");
    let got = dev.scope(|s, gpu| {
        let (dec, mmul) = (Decoder::new(s).unwrap(), Matmul::new(s).unwrap());
        let (x, w) = (s.alloc_device_from(&xb).unwrap(), s.alloc_device_from(&wb).unwrap());
        let dl = s.alloc_device_from(&logits).unwrap();
        let topk = s.alloc_device_from(&vec![POISON_U32; p]).unwrap();
        let weights = s.alloc_device_from(&vec![POISON_F32; p]).unwrap();
        let layout = shape.routing();
        let routing = s.alloc_device_from(&vec![POISON_U32; layout.words]).unwrap();
        let y = s.alloc_device_from(&vec![POISON_F32; p * nu]).unwrap();
        let mut h = s.alloc_device_from(&res).unwrap();
        let (mut tk_out, tk_in) = (span(&topk, p), span(&topk, p));
        let (mut w_out, w_in) = (span(&weights, p), span(&weights, p));
        let (r_out, r_in) = (span(&routing, layout.words), span(&routing, layout.words));
        let (y_out, y_in) = (span(&y, p * nu), span(&y, p * nu));
        let (h_in, mut h_out) = (span(&h, tu * nu), span(&h, tu * nu));
        {
            let mut list = s.cmdlist().unwrap();
            dec.record(&mut list, dec.router_topk(&dl, &mut tk_out, &mut w_out, [t, e, top_k]).unwrap()).unwrap();
            mmul.add_grouped_bf16(&mut list, &x, &w, &tk_in, &r_out, &y_out, shape).unwrap();
            let c = dec.moe_combine(&y_in, &r_in, layout, &w_in, &h_in, &mut h_out, shape).unwrap();
            dec.record(&mut list, c).unwrap();
            let _gpu = gpu.submit(&mut list).unwrap().gpu;
        }
        h.to_vec().unwrap()
    });
    let got = match got {
        Scoped::Open(_, r) => r,
        Scoped::Latched(..) => panic!("the list latched the process"),
    };
    let (x, w, r) = (mm::bf16s_to_f32(&xb), mm::bf16s_to_f32(&wb), mm::bf16s_to_f32(&res));
    for ti in 0..tu {
        let (experts, wts) = dk::router_f64(&logits[ti * e as usize..][..e as usize], top_k as usize);
        for c in 0..nu {
            let (mut want, mut bound) = (f64::from(r[ti * nu + c]), 0f64);
            for (&ex, &wj) in experts.iter().zip(&wts) {
                let row = &w[(ex as usize * nu + c) * ku..][..ku];
                let (dot, mag) = omega_refmath::dot_f64(&x[ti * ku..][..ku], row);
                want += wj * dot;
                bound += wj * ku as f64 * 2f64.powi(-22) * mag
                    + 2f64.powi(-20) * dot.abs()
                    + 2f64.powi(-22) * wj * dot.abs();
            }
            bound += 2f64.powi(-8) * want.abs() + 2f64.powi(-22) * f64::from(r[ti * nu + c]).abs();
            let gv = f64::from(half::bf16::from_bits(got[ti * nu + c]).to_f32());
            assert!((gv - want).abs() <= bound, "token {ti} col {c}: {gv:e}, want {want:e} within {bound:e}");
        }
    }
}

/// The step start: each (sequence, pair) entry of the RoPE tables within half an f32 ulp (plus the f64
/// angle's own error, ~1e-11 at these positions) of `cos(p * theta^(-2i / d))` in f64, i.e. the f64
/// value rounded once; `lens` = `pos + 1`. Positions reach 200,000, where an f32 angle would be off by
/// about 1e-2: the kernel's f64 angle is what this tolerance checks.
#[test]
fn the_step_start_writes_rope_tables_of_the_device_positions_and_the_lengths() {
    use omega::libs::decoder::Decoder;
    let mut g = rng("rope step");
    let (batch, head_dim, theta) = (5u32, 64u32, 1e6f32);
    let mut pos: Vec<i32> = (0..batch).map(|_| g.random_range(0..200_000)).collect();
    pos[0] = 0;
    let half = (head_dim / 2) as usize;
    let r = omega::lock().open().expect("open").close().open().expect("reopen").scope(|s, gpu| {
        let dec = Decoder::new(s).unwrap();
        let dp = s.alloc_device_from(&pos).unwrap();
        let n = batch as usize * half;
        let mut cos = s.alloc_device_from(&vec![POISON_F32; n]).unwrap();
        let mut sin = s.alloc_device_from(&vec![POISON_F32; n]).unwrap();
        let mut lens = s.alloc_device_from(&vec![-7i32; batch as usize]).unwrap();
        let call = dec.rope_step(&dp, &mut cos, &mut sin, &mut lens, [batch, head_dim], theta).unwrap();
        let _gpu = dec.launch(gpu, call).map_err(|(_, e)| e).unwrap();
        (cos.to_vec().unwrap(), sin.to_vec().unwrap(), lens.to_vec().unwrap())
    });
    let Scoped::Open(_, (cos, sin, lens)) = r else { panic!("the step start latched the process") };
    for (b, &p) in pos.iter().enumerate() {
        assert_eq!(lens[b], p + 1, "sequence {b}'s length");
        for i in 0..half {
            let angle = f64::from(p) * f64::from(theta).powf(-(2.0 * i as f64) / f64::from(head_dim));
            let (c, s) = (cos[b * half + i], sin[b * half + i]);
            let tol = 6e-8 + 1e-10;
            assert!((f64::from(c) - angle.cos()).abs() <= tol, "cos [{b}, {i}] at {p}: {c} vs {}", angle.cos());
            assert!((f64::from(s) - angle.sin()).abs() <= tol, "sin [{b}, {i}] at {p}: {s} vs {}", angle.sin());
        }
    }
}

/// The weight generator on the device against the host's (`weights::fill_bf16_centered`, what
/// `Tensor::fill` computes): bit for bit, for a norm (centred on 1), a linear layer and a slice that
/// starts inside a tensor.
#[test]
fn the_weight_generator_makes_the_hosts_bits_on_the_device() {
    use omega::libs::decoder::{Decoder, DeviceSpan};
    use omega::libs::serving::qwen3::{Qwen3Config, Tensor, TensorKind, WEIGHT_SEED};
    let c = Qwen3Config::TINY;
    let cases = [
        (Tensor { layer: Some(1), kind: TensorKind::QNorm }, 0u64, 64usize),
        (Tensor { layer: Some(0), kind: TensorKind::Down }, 0, (c.experts * c.hidden * c.expert_inter) as usize),
        (Tensor::global(TensorKind::Embed), 12_345, 70_001),
    ];
    for (t, start, n) in cases {
        let mut want = vec![0u16; n];
        t.fill(&c, start, &mut want);
        let r = omega::lock().open().expect("open").close().open().expect("reopen").scope(|s, gpu| {
            let dec = Decoder::new(s).unwrap();
            let mut out = s.alloc_device_from(&vec![POISON_U16; n + 8]).unwrap();
            // SAFETY: the span is the first `n` of `out`'s `n + 8` u16s, and `out` outlives the launch.
            let mut head = unsafe { DeviceSpan::<u16>::new(out.va(), n) };
            let call = dec.generate_bf16(&mut head, WEIGHT_SEED, t.id(), start, t.center(), t.scale(&c)).unwrap();
            let _gpu = dec.launch(gpu, call).map_err(|(_, e)| e).unwrap();
            out.to_vec().unwrap()
        });
        let Scoped::Open(_, got) = r else { panic!("the generator latched the process") };
        assert!(got[..n] == want[..], "{t:?} from {start}: the device's bits are the host's");
        assert!(got[n..].iter().all(|&b| b == POISON_U16), "{t:?}: nothing past the span written");
    }
}

/// The combine and the RMSNorm after it in one launch: against the two calls it replaces (the combine,
/// then the elementwise RMSNorm), in one submission each on the same routed MoE block, `h` and `x` bit
/// for bit; and `x` against the f64 RMSNorm of the combined `h` within the f32 norm's error (the sum of
/// squares and the scaling: 2^-20 of the value, rounded once to bf16, 2^-8). The block is the bf16
/// RMSNorm's doubled at every width the call takes. A width that is not whole vectors, one past the
/// widest, and a misaligned operand are refused with their names, before any launch.
#[test]
fn the_fused_combine_and_norm_store_the_bits_of_the_two_calls_it_replaces() {
    use omega::libs::decoder::{DecError, DecOp, DecShapeError, Decoder};
    use omega::libs::elementwise::{rmsnorm_threads, Elementwise, Rows};
    use omega::libs::matmul::{GroupedShape, Matmul};
    for n in (8..=dk::COMBINE_NORM_MAX_COLS).step_by(8) {
        assert_eq!(dk::combine_norm_threads(n), 2 * rmsnorm_threads::<u16>(n), "{n} columns");
    }
    let mut g = rng("combine norm");
    let (t, e, top_k, n, kk, eps) = (3u32, 16u32, 4u32, 520u32, 64u32, 1e-6f32);
    let shape = GroupedShape { tokens: t, top_k, experts: e, n, k: kk };
    let (tu, nu, ku, p) = (t as usize, n as usize, kk as usize, (t * top_k) as usize);
    let xb = mm::random_bf16(g.random(), tu * ku);
    let wb = mm::random_bf16(g.random(), (e * n * kk) as usize);
    let res = mm::random_bf16(g.random(), tu * nu);
    let norm = mm::random_bf16(g.random(), nu);
    let logits: Vec<f32> = (0..t * e).map(|_| g.random_range(-3.0f32..3.0)).collect();
    let dev = omega::lock().open().expect("open").close().open().expect("reopen");
    let got = dev.scope(|s, gpu| {
        let (dec, mmul, ew) = (Decoder::new(s).unwrap(), Matmul::new(s).unwrap(), Elementwise::new(s).unwrap());
        // The fused norm sums in the block form's order; the warp-per-row form (many rows) sums in its own.
        ew.force_rmsnorm_form(Some(omega::libs::elementwise::RmsForm::Block));
        let (x, w) = (s.alloc_device_from(&xb).unwrap(), s.alloc_device_from(&wb).unwrap());
        let (dl, dn) = (s.alloc_device_from(&logits).unwrap(), s.alloc_device_from(&norm).unwrap());
        let layout = shape.routing();
        let mut gpu = gpu;
        let mut results = Vec::new();
        for fused in [true, false] {
            let topk = s.alloc_device_from(&vec![POISON_U32; p]).unwrap();
            let weights = s.alloc_device_from(&vec![POISON_F32; p]).unwrap();
            let routing = s.alloc_device_from(&vec![POISON_U32; layout.words]).unwrap();
            let y = s.alloc_device_from(&vec![POISON_F32; p * nu]).unwrap();
            let mut h = s.alloc_device_from(&res).unwrap();
            let mut xo = s.alloc_device_from(&vec![POISON_U16; tu * nu]).unwrap();
            let (mut tk_out, tk_in) = (span(&topk, p), span(&topk, p));
            let (mut w_out, w_in) = (span(&weights, p), span(&weights, p));
            let (r_out, r_in) = (span(&routing, layout.words), span(&routing, layout.words));
            let (y_out, y_in) = (span(&y, p * nu), span(&y, p * nu));
            let (h_in, mut h_out, h_norm) = (span(&h, tu * nu), span(&h, tu * nu), span(&h, tu * nu));
            let mut x_out = span(&xo, tu * nu);
            {
                let mut list = s.cmdlist().unwrap();
                dec.record(&mut list, dec.router_topk(&dl, &mut tk_out, &mut w_out, [t, e, top_k]).unwrap()).unwrap();
                mmul.add_grouped_bf16(&mut list, &x, &w, &tk_in, &r_out, &y_out, shape).unwrap();
                if fused {
                    let c = dec
                        .moe_combine_rmsnorm(
                            &y_in,
                            &r_in,
                            layout,
                            &w_in,
                            (&h_in, &mut h_out),
                            (&dn, &mut x_out),
                            shape,
                            eps,
                        )
                        .unwrap();
                    dec.record(&mut list, c).unwrap();
                } else {
                    dec.record(
                        &mut list,
                        dec.moe_combine(&y_in, &r_in, layout, &w_in, &h_in, &mut h_out, shape).unwrap(),
                    )
                    .unwrap();
                    let rows = Rows { rows: t, cols: n };
                    ew.record(&mut list, ew.rmsnorm::<u16>(&h_norm, &dn, &mut x_out, rows, eps).unwrap()).unwrap();
                }
                gpu = gpu.submit(&mut list).unwrap().gpu;
            }
            results.push((h.to_vec().unwrap(), xo.to_vec().unwrap()));
        }
        let apart = results.pop().unwrap();
        let fused = results.pop().unwrap();
        // Refusals name the call, the operand and the cause, and launch nothing.
        let (y, r, wt) = (
            s.alloc_device::<f32>(p * nu).unwrap(),
            s.alloc_device::<u32>(layout.words).unwrap(),
            s.alloc_device::<f32>(p).unwrap(),
        );
        let hb = s.alloc_device::<u16>(tu * nu + 8).unwrap();
        let xb = s.alloc_device::<u16>(tu * nu + 8).unwrap();
        let (h_in, mut h_out, mut x_out) = (span(&hb, tu * nu), span(&hb, tu * nu), span(&xb, tu * nu));
        let odd = GroupedShape { n: n - 4, ..shape };
        let e = dec.moe_combine_rmsnorm(&y, &r, layout, &wt, (&h_in, &mut h_out), (&dn, &mut x_out), odd, eps);
        assert_eq!(
            e.unwrap_err(),
            DecError::Shape(DecShapeError::Width { op: DecOp::CombineNorm, cols: n - 4, most: 4096 })
        );
        let wide = GroupedShape { n: 4104, ..shape };
        let e = dec.moe_combine_rmsnorm(&y, &r, layout, &wt, (&h_in, &mut h_out), (&dn, &mut x_out), wide, eps);
        assert_eq!(
            e.unwrap_err(),
            DecError::Shape(DecShapeError::Width { op: DecOp::CombineNorm, cols: 4104, most: 4096 })
        );
        let mut short_h = span(&hb, tu * nu - 1);
        let e = dec.moe_combine_rmsnorm(&y, &r, layout, &wt, (&h_in, &mut short_h), (&dn, &mut x_out), shape, eps);
        assert!(
            matches!(
                e.unwrap_err(),
                DecError::Shape(DecShapeError::Short { op: DecOp::CombineNorm, operand: "h", .. })
            ),
            "a short h is named"
        );
        // SAFETY: the span is xb's elements 1 ..= tu * nu, inside its tu * nu + 8.
        let mut shifted = unsafe { omega::libs::decoder::DeviceSpan::<u16>::new(xb.va() + 2, tu * nu) };
        let e = dec.moe_combine_rmsnorm(&y, &r, layout, &wt, (&h_in, &mut h_out), (&dn, &mut shifted), shape, eps);
        assert_eq!(
            e.unwrap_err(),
            DecError::Shape(DecShapeError::Misaligned { op: DecOp::CombineNorm, operand: "x", va: xb.va() + 2 })
        );
        (fused, apart)
    });
    let ((h, x), (h_apart, x_apart)) = match got {
        Scoped::Open(_, r) => r,
        Scoped::Latched(..) => panic!("the list latched the process"),
    };
    assert!(h == h_apart, "the fused call's h differs from the combine's");
    assert!(x == x_apart, "the fused call's x differs from the RMSNorm's");
    assert!(h.iter().all(|&b| b != POISON_U16) && x.iter().all(|&b| b != POISON_U16));
    let (hf, nf) = (mm::bf16s_to_f32(&h), mm::bf16s_to_f32(&norm));
    for ti in 0..tu {
        let row = &hf[ti * nu..][..nu];
        let ms = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / nu as f64;
        let inv = 1.0 / (ms + f64::from(eps)).sqrt();
        for c in 0..nu {
            let want = f64::from(row[c]) * inv * f64::from(nf[c]);
            let gv = f64::from(half::bf16::from_bits(x[ti * nu + c]).to_f32());
            let bound = (2f64.powi(-8) + 2f64.powi(-20)) * want.abs() + 1e-30;
            assert!((gv - want).abs() <= bound, "token {ti} col {c}: {gv:e}, want {want:e} within {bound:e}");
        }
    }
}
