//! The decoder module's selections on the installed platform, through the library (`Decoder`), on fresh
//! random inputs with the outputs poisoned first: the router's top-k (warp per token) and the argmax
//! (one block per row, 16-byte loads), both exact against references written here (selections; the
//! router's weights within 2^-20 of an f64 softmax, the argument of tests/decoder_kernels.rs).

use omega::kernels::decoder as dk;
use omega::libs::decoder::{Decoder, DeviceSpan};
use rand::Rng;

use super::{err, rng, with_scope, CaseResult};

/// The `decoder` case.
pub fn selections() -> CaseResult {
    let mut g = rng();
    with_scope(|s, gpu| {
        let dec = Decoder::new(s).map_err(err)?;
        let mut gpu = gpu;
        let mut notes = Vec::new();
        for (tokens, experts, k) in
            [(1u32, 128u32, 8u32), (8, 128, 8), (32, 128, 8), (7, 8, 2), (5, 200, 3), (3, 300, 8)]
        {
            let mut logits: Vec<f32> = (0..tokens * experts).map(|_| g.random_range(-4.0f32..4.0)).collect();
            // A tie at the top of the last token: the lower expert comes first.
            let last = (tokens - 1) as usize * experts as usize;
            logits[last + experts as usize - 1] = 9.0;
            logits[last + 1] = 9.0;
            let n = (tokens * k) as usize;
            let dl = s.alloc_device_from(&logits).map_err(err)?;
            let mut topk = s.alloc_device_from(&vec![0xdead_beefu32; n]).map_err(err)?;
            let mut weights = s.alloc_device_from(&vec![f32::from_bits(0x7fc0_dead); n]).map_err(err)?;
            // SAFETY: each span is the whole of its buffer, which outlives the launch.
            let (l, mut t, mut w) = unsafe {
                (
                    DeviceSpan::<f32>::new(dl.va(), dl.len()),
                    DeviceSpan::<u32>::new(topk.va(), n),
                    DeviceSpan::<f32>::new(weights.va(), n),
                )
            };
            let call = dec.router_topk(&l, &mut t, &mut w, [tokens, experts, k]).map_err(err)?;
            gpu = dec.launch(gpu, call).map_err(|(_, e)| e.to_string())?;
            let (got_i, got_w) = (topk.to_vec().map_err(err)?, weights.to_vec().map_err(err)?);
            for tk in 0..tokens as usize {
                let (want_i, want_w) = dk::router_f64(&logits[tk * experts as usize..][..experts as usize], k as usize);
                let what = format!("router T={tokens} E={experts} k={k} token {tk}");
                if got_i[tk * k as usize..][..k as usize] != want_i[..] {
                    return Err(format!(
                        "{what}: experts {:?}, want {want_i:?}",
                        &got_i[tk * k as usize..][..k as usize]
                    ));
                }
                for (j, (&gw, &ww)) in got_w[tk * k as usize..][..k as usize].iter().zip(&want_w).enumerate() {
                    if (f64::from(gw) - ww).abs() > 2f64.powi(-20) || gw.is_nan() {
                        return Err(format!("{what}: weight {j} = {gw:e}, want {ww:e}"));
                    }
                }
            }
        }
        notes.push("router: 6 shapes exact (past 256 experts included)".to_string());
        for (rows, cols) in [(1u32, 151_936u32), (3, 151_936), (32, 151_936), (9, 1001), (2, 1)] {
            let (logits, want) = dk::argmax_case(g.random(), rows as usize, cols as usize);
            let dl = s.alloc_device_from(&logits).map_err(err)?;
            let mut out = s.alloc_device_from(&vec![0xdead_beefu32; rows as usize]).map_err(err)?;
            // SAFETY: each span is the whole of its buffer, which outlives the launch.
            let (l, mut o) =
                unsafe { (DeviceSpan::<f32>::new(dl.va(), dl.len()), DeviceSpan::<u32>::new(out.va(), rows as usize)) };
            let call = dec.argmax(&l, &mut o, [rows, cols]).map_err(err)?;
            gpu = dec.launch(gpu, call).map_err(|(_, e)| e.to_string())?;
            let got = out.to_vec().map_err(err)?;
            if got != want {
                return Err(format!("argmax rows={rows} cols={cols}: {got:?}, want {want:?}"));
            }
        }
        notes.push("argmax: 5 shapes exact (151936-wide rows included)".to_string());
        let _gpu = gpu;
        Ok(notes.join("; "))
    })
}

/// The `l2_prefetch` case: `omega_l2_prefetch` (one warp a CTA, a CTA an SM) over 1, 16 and 64 MiB, with
/// bulk and with line prefetches, on a buffer of fresh random bits that must read the same after (a
/// prefetch stores nothing). Each launch's round trip is reported: whether the grid waits for its
/// prefetches before it completes shows as a time that grows with the size.
pub fn l2_prefetch() -> CaseResult {
    let mut g = rng();
    let bits: Vec<u16> = (0..32usize << 20).map(|_| g.random()).collect();
    with_scope(|s, gpu| {
        let module = s.load_module(omega::kernels::cuda_module(dk::DECODER).map_err(err)?).map_err(err)?;
        let kernel = module.kernel(dk::L2_PREFETCH).map_err(err)?;
        let mut buf = s.alloc_device_from(&bits).map_err(err)?;
        let sms = s.device().sm_count.max(1);
        let mut gpu = gpu;
        let mut notes = Vec::new();
        for lines in [0u32, 1] {
            for mib in [1u64, 16, 64] {
                let l = omega::Launch::new(&kernel)
                    .grid([sms, 1, 1])
                    .block([dk::PREFETCH_THREADS, 1, 1])
                    .arg(buf.va())
                    .arg(mib << 20)
                    .arg(0u64)
                    .arg(0u64)
                    .arg(lines);
                let done = gpu.launch(&l).map_err(|e| format!("{}: {e}", dk::L2_PREFETCH))?;
                notes.push(format!(
                    "{} {mib} MiB {:.1} us",
                    if lines == 1 { "lines" } else { "bulk" },
                    done.elapsed_ns as f64 / 1e3
                ));
                gpu = done.gpu;
            }
        }
        if buf.to_vec().map_err(err)? != bits {
            return Err(format!("{}: the prefetched buffer changed", dk::L2_PREFETCH));
        }
        let clock = if super::common::is_sim(s.platform()) { ", simulated clock" } else { "" };
        Ok(format!("{} (buffer unchanged{clock})", notes.join(", ")))
    })
}

/// The `combine_norm` case: `omega_moe_combine_rmsnorm_bf16` against the two launches it replaces (the
/// combine, then the elementwise RMSNorm) on the same fresh random rows and a routing written here
/// (shuffled slots, one choice dropped), outputs poisoned first: `h` and `x` bit for bit, and `x` within
/// 2^-8 + 2^-20 of the f64 RMSNorm of `h` (one bf16 rounding of the f32 norm; tests/decoder_kernels.rs).
/// Decode's shapes (hidden 2048 at batch 1, 8 and 32, top 8) and odd ones up to the widest row (4096).
pub fn combine_norm() -> CaseResult {
    use omega::libs::elementwise::{Elementwise, Rows};
    use omega::libs::matmul::GroupedShape;
    let mut g = rng();
    with_scope(|s, gpu| {
        let (dec, ew) = (Decoder::new(s).map_err(err)?, Elementwise::new(s).map_err(err)?);
        // The fused norm sums in the block form's order; the warp-per-row form (many rows) sums in its own.
        ew.force_rmsnorm_form(Some(omega::libs::elementwise::RmsForm::Block));
        let mut gpu = gpu;
        let shapes = [(1u32, 8u32, 2048u32), (8, 8, 2048), (32, 8, 2048), (3, 4, 256), (5, 2, 4096), (2, 3, 520)];
        for (tokens, top_k, n) in shapes {
            let shape = GroupedShape { tokens, top_k, experts: 16, n, k: 8 };
            let layout = shape.routing();
            let (p, nu, rows) = (shape.choices() as usize, n as usize, (tokens * n) as usize);
            // Slots in a shuffled order of the choices, the last slot's choice dropped (no slot).
            let mut order: Vec<u32> = (0..p as u32).collect();
            for i in (1..p).rev() {
                order.swap(i, g.random_range(0..=i));
            }
            let mut routing = vec![0u32; layout.words];
            routing[layout.pairs..][..p].copy_from_slice(&order);
            routing[layout.offsets + 16] = p as u32 - 1;
            let y: Vec<f32> = (0..p * nu).map(|_| g.random_range(-2.0f32..2.0)).collect();
            let wts: Vec<f32> = (0..p).map(|_| g.random_range(0.0f32..1.0)).collect();
            let res = omega::kernels::matmul::random_bf16(g.random(), rows);
            let norm = omega::kernels::matmul::random_bf16(g.random(), nu);
            let (dy, dr) = (s.alloc_device_from(&y).map_err(err)?, s.alloc_device_from(&routing).map_err(err)?);
            let (dw, dn) = (s.alloc_device_from(&wts).map_err(err)?, s.alloc_device_from(&norm).map_err(err)?);
            let mut got = Vec::new();
            for fused in [true, false] {
                let mut h = s.alloc_device_from(&res).map_err(err)?;
                let mut x = s.alloc_device_from(&vec![0xdeadu16; rows]).map_err(err)?;
                // SAFETY: each span is the whole of its buffer, which outlives the list that names it.
                let (h_in, mut h_out, h_norm, mut x_out) = unsafe {
                    let span = |m: &omega::Mem<'_, omega::Device<u16>>| DeviceSpan::<u16>::new(m.va(), rows);
                    (span(&h), span(&h), span(&h), span(&x))
                };
                let mut list = s.cmdlist().map_err(err)?;
                if fused {
                    let c = dec
                        .moe_combine_rmsnorm(&dy, &dr, layout, &dw, (&h_in, &mut h_out), (&dn, &mut x_out), shape, 1e-6)
                        .map_err(err)?;
                    dec.record(&mut list, c).map_err(err)?;
                } else {
                    let c = dec.moe_combine(&dy, &dr, layout, &dw, &h_in, &mut h_out, shape).map_err(err)?;
                    dec.record(&mut list, c).map_err(err)?;
                    let norm_call = ew.rmsnorm::<u16>(&h_norm, &dn, &mut x_out, Rows { rows: tokens, cols: n }, 1e-6);
                    ew.record(&mut list, norm_call.map_err(err)?).map_err(err)?;
                }
                gpu = gpu.submit(&mut list).map_err(|e| e.to_string())?.gpu;
                drop(list);
                got.push((h.to_vec().map_err(err)?, x.to_vec().map_err(err)?));
            }
            let what = format!("combine_norm T={tokens} k={top_k} n={n}");
            let ((h, x), (h2, x2)) = (&got[0], &got[1]);
            if h != h2 || x != x2 {
                let at = h.iter().zip(h2).position(|(a, b)| a != b).or(x.iter().zip(x2).position(|(a, b)| a != b));
                return Err(format!("{what}: the fused launch's bits differ from the two launches' at {at:?}"));
            }
            for t in 0..tokens as usize {
                let row: Vec<f64> =
                    h[t * nu..][..nu].iter().map(|&b| f64::from(half::bf16::from_bits(b).to_f32())).collect();
                let inv = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / nu as f64 + 1e-6).sqrt();
                for c in 0..nu {
                    let want = row[c] * inv * f64::from(half::bf16::from_bits(norm[c]).to_f32());
                    let gv = f64::from(half::bf16::from_bits(x[t * nu + c]).to_f32());
                    if (gv - want).abs() > (2f64.powi(-8) + 2f64.powi(-20)) * want.abs() + 1e-30 {
                        return Err(format!("{what}: token {t} col {c}: {gv:e}, want {want:e}"));
                    }
                }
            }
        }
        let _gpu = gpu;
        Ok(format!("{} shapes: the fused launch's h and x bit for bit the combine's and the norm's", shapes.len()))
    })
}
