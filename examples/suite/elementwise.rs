//! The GPU suite's elementwise cases (issue 13): each op of `omega::libs::elementwise` in f32 and bf16 at
//! Qwen3-30B-A3B's shapes with 16384 tokens (and odd widths), inputs random, outputs poisoned, every
//! value checked against the f64 references and bounds of `omega::kernels::elementwise` (the ones the sim
//! tests use), with the kernel's GB/s. Pulled into examples/gpu_suite.rs with `#[path]`.

use omega::kernels::elementwise::{bf16_bound, first_miss, rmsnorm_f64, rope_f64, rope_tables, swiglu_f64};
use omega::libs::elementwise::RmsForm;
use omega::libs::elementwise::{Elementwise, EwCall, Heads, Info, Rows};
use omega::{Device, Mem, Scope};
use omega_refmath::{bf16_to_f32, f32_to_bf16};

use super::{err, rng, with_scope, CaseResult};

/// Inputs as both types see them: bf16 bits and their exact f32 values, or f32.
struct Data {
    bf16: bool,
    vals: Vec<f32>,
    bits: Vec<u16>,
}

fn data(g: &mut impl rand::Rng, n: usize, scale: f32, bf16: bool) -> Data {
    let raw: Vec<f32> = (0..n).map(|_| g.random_range(-scale..scale)).collect();
    let bits: Vec<u16> = if bf16 { raw.iter().map(|&v| f32_to_bf16(v)).collect() } else { Vec::new() };
    let vals = if bf16 { bits.iter().map(|&b| bf16_to_f32(b)).collect() } else { raw };
    Data { bf16, vals, bits }
}

/// A device buffer holding `d` (bf16 bits or f32) and one poisoned for the output.
enum Buf<'s> {
    F32(Mem<'s, Device<f32>>),
    Bf16(Mem<'s, Device<u16>>),
}

impl<'s> Buf<'s> {
    fn of(s: &'s Scope<'s>, d: &Data) -> Result<Self, String> {
        Ok(if d.bf16 {
            Buf::Bf16(s.alloc_device_from(&d.bits).map_err(err)?)
        } else {
            Buf::F32(s.alloc_device_from(&d.vals).map_err(err)?)
        })
    }
    fn poisoned(s: &'s Scope<'s>, n: usize, bf16: bool) -> Result<Self, String> {
        Ok(if bf16 {
            Buf::Bf16(s.alloc_device_from(&vec![0x7fc1u16; n]).map_err(err)?)
        } else {
            Buf::F32(s.alloc_device_from(&vec![f32::from_bits(0x7fc0_dead); n]).map_err(err)?)
        })
    }
    fn values(&mut self) -> Result<Vec<f32>, String> {
        match self {
            Buf::F32(m) => m.to_vec().map_err(err),
            Buf::Bf16(m) => Ok(m.to_vec().map_err(err)?.into_iter().map(bf16_to_f32).collect()),
        }
    }
}

/// Plans `$body` with the buffers' element type (`$x`... bound to the typed buffers), or fails the case.
macro_rules! typed {
    ($($b:ident),* ; $($o:ident),* => $body:expr) => {
        match ($($b,)* $($o,)*) {
            ($(Buf::F32($b),)* $(Buf::F32($o),)*) => $body,
            ($(Buf::Bf16($b),)* $(Buf::Bf16($o),)*) => $body,
            #[allow(unreachable_patterns)]
            _ => unreachable!("one element type a call"),
        }
    };
}

/// Runs a planned call (or names why it could not be planned).
fn launched<'s>(
    ew: &Elementwise<'s>,
    gpu: omega::Gpu<'s>,
    call: Result<EwCall<'_>, omega::libs::elementwise::EwError>,
) -> Result<Info, String> {
    let call = call.map_err(err)?;
    ew.launch(gpu, call).map(|d| d.info).map_err(|f| f.to_string())
}

fn verdict(what: &str, got: &[f32], want: &[f64], mut tol: Vec<f64>, bf16: bool, info: &Info) -> CaseResult {
    if bf16 {
        bf16_bound(want, &mut tol);
    }
    if let Some((i, g, w, t)) = first_miss(got, want, &tol) {
        return Err(format!("{what}: element {i} is {g}, the f64 reference {w} (bound {t})"));
    }
    let gbps = info.bytes as f64 / info.device_ns.max(1) as f64;
    Ok(format!(
        "{what}: {} values match, {} ({} CTAs x {}), {gbps:.0} GB/s",
        got.len(),
        info.kernel,
        info.ctas,
        info.block
    ))
}

/// RMSNorm (`add`: the residual form) at `rows x cols`, in the form `form` forces (`None`: the library's).
fn rmsnorm_once(rows: u32, cols: u32, bf16: bool, add: bool, form: Option<RmsForm>) -> CaseResult {
    let mut g = rng();
    let n = (rows * cols) as usize;
    let (x, w, h0) = (data(&mut g, n, 1.0, bf16), data(&mut g, cols as usize, 2.0, bf16), data(&mut g, n, 1.0, bf16));
    with_scope(|s, gpu| {
        let ew = Elementwise::new(s).map_err(err)?;
        ew.force_rmsnorm_form(form);
        let (mut xb, mut wb, mut hb) = (Buf::of(s, &x)?, Buf::of(s, &w)?, Buf::of(s, &h0)?);
        let mut yb = Buf::poisoned(s, n, bf16)?;
        let shape = Rows { rows, cols };
        let info = {
            let (xr, wr, hr, yr) = (&mut xb, &mut wb, &mut hb, &mut yb);
            typed!(xr, wr; hr, yr => launched(&ew, gpu, if add {
                ew.add_rmsnorm(&*xr, hr, &*wr, yr, shape, 1e-6)
            } else {
                ew.rmsnorm(&*xr, &*wr, yr, shape, 1e-6)
            }))?
        };
        let h: Vec<f32> = if add { hb.values()? } else { x.vals.clone() };
        if add {
            let want: Vec<f32> = x.vals.iter().zip(&h0.vals).map(|(a, b)| a + b).collect();
            let round = |v: f32| if bf16 { bf16_to_f32(f32_to_bf16(v)) } else { v };
            if h.iter().zip(&want).any(|(a, b)| a.to_bits() != round(*b).to_bits()) {
                return Err("h = x + h: the residual written back differs".into());
            }
        }
        let (want, tol) = rmsnorm_f64(&h, &w.vals, cols as usize, 1e-6);
        verdict(&format!("{rows}x{cols} bf16={bf16} add={add} form={form:?}"), &yb.values()?, &want, tol, bf16, &info)
    })
}

pub fn rmsnorm(add: bool) -> CaseResult {
    let mut lines = Vec::new();
    for bf16 in [false, true] {
        for (rows, cols) in [(16384, 2048), (7, 7), (33, 33), (1000, 1000), (1, 1), (5, 12288), (3, 12289)] {
            lines.push(rmsnorm_once(rows, cols, bf16, add, None)?);
        }
        // Both forms forced at Qwen3's width, and the warp form where a row leaves lanes idle (64 and
        // 1000 columns) or the rows do not fill a wave; the residual form's warp kernel is bf16 only.
        lines.push(rmsnorm_once(16384, 2048, bf16, add, Some(RmsForm::Block))?);
        if bf16 || !add {
            for (rows, cols) in [(16384, 2048), (4096, 64), (777, 1000), (3, 2048)] {
                lines.push(rmsnorm_once(rows, cols, bf16, add, Some(RmsForm::Warp))?);
            }
        }
    }
    Ok(lines.join("; "))
}

/// RoPE (`norm`: QK-norm first) over `tokens x heads x dim` at positions near 40960, theta 1e6.
fn rope_once(tokens: u32, heads: u32, dim: u32, bf16: bool, norm: bool) -> CaseResult {
    let mut g = rng();
    let n = (tokens * heads * dim) as usize;
    let pos: Vec<u32> = (0..tokens).map(|t| 40_960 - tokens.min(40_960) + t).collect();
    let (cos, sin) = rope_tables(&pos, dim, 1e6);
    let (x, w) = (data(&mut g, n, 1.0, bf16), data(&mut g, dim as usize, 2.0, bf16));
    with_scope(|s, gpu| {
        let ew = Elementwise::new(s).map_err(err)?;
        let (cm, sm) = (s.alloc_device_from(&cos).map_err(err)?, s.alloc_device_from(&sin).map_err(err)?);
        let (mut xb, mut wb, mut yb) = (Buf::of(s, &x)?, Buf::of(s, &w)?, Buf::poisoned(s, n, bf16)?);
        let shape = Heads { tokens, heads, dim };
        let info = {
            let (xr, wr, yr) = (&mut xb, &mut wb, &mut yb);
            typed!(xr, wr; yr => launched(&ew, gpu, if norm {
                ew.norm_rope(&*xr, &*wr, &cm, &sm, yr, shape, 1e-6)
            } else {
                ew.rope(&*xr, &cm, &sm, yr, shape)
            }))?
        };
        let (normed, pre) = if norm {
            (rmsnorm_f64(&x.vals, &w.vals, dim as usize, 1e-6).0, (f64::from(dim) + 16.0) * f64::powi(2.0, -23))
        } else {
            (x.vals.iter().map(|&v| f64::from(v)).collect(), 0.0)
        };
        let (want, tol) = rope_f64(&normed, &cos, &sin, heads as usize, dim as usize, pre);
        verdict(&format!("{tokens}x{heads}x{dim} bf16={bf16} norm={norm}"), &yb.values()?, &want, tol, bf16, &info)
    })
}

pub fn rope(norm: bool) -> CaseResult {
    let mut lines = Vec::new();
    for bf16 in [false, true] {
        // 96, 192 and 512 take the whole-row norm entry with idle lanes (96, 192) or at its widest (512 bf16).
        let shapes = [(16384, 16, 128), (4096, 32, 128), (4096, 4, 128), (7, 3, 34), (5, 1, 6)];
        for (t, h, d) in shapes.into_iter().chain([(33, 5, 96), (9, 3, 192), (4, 2, 512)]) {
            lines.push(rope_once(t, h, d, bf16, norm)?);
        }
    }
    Ok(lines.join("; "))
}

/// SwiGLU (`fused`: over the gate+up output) at `rows x cols`.
fn swiglu_once(rows: u32, cols: u32, bf16: bool, fused: bool) -> CaseResult {
    let mut g = rng();
    let (n, c) = ((rows * cols) as usize, cols as usize);
    // Fused: one [rows, 2 * cols] input; plain: gate and up of [rows, cols] each.
    let (first, second) = if fused {
        (data(&mut g, 2 * n, 8.0, bf16), None)
    } else {
        (data(&mut g, n, 8.0, bf16), Some(data(&mut g, n, 1.0, bf16)))
    };
    let (gate, up): (Vec<f32>, Vec<f32>) = match &second {
        None => (
            first.vals.chunks(2 * c).flat_map(|r| r[..c].to_vec()).collect(),
            first.vals.chunks(2 * c).flat_map(|r| r[c..].to_vec()).collect(),
        ),
        Some(u) => (first.vals.clone(), u.vals.clone()),
    };
    with_scope(|s, gpu| {
        let ew = Elementwise::new(s).map_err(err)?;
        let mut fb = Buf::of(s, &first)?;
        let mut ub = match &second {
            Some(u) => Buf::of(s, u)?,
            None => Buf::poisoned(s, 1, bf16)?,
        };
        let mut yb = Buf::poisoned(s, n, bf16)?;
        let shape = Rows { rows, cols };
        let info = {
            let (fr, ur, yr) = (&mut fb, &mut ub, &mut yb);
            typed!(fr, ur; yr => launched(&ew, gpu, if fused {
                ew.swiglu_fused(&*fr, yr, shape)
            } else {
                ew.swiglu(&*fr, &*ur, yr, shape)
            }))?
        };
        let (want, tol) = swiglu_f64(&gate, &up);
        verdict(&format!("{rows}x{cols} bf16={bf16} fused={fused}"), &yb.values()?, &want, tol, bf16, &info)
    })
}

pub fn swiglu(fused: bool) -> CaseResult {
    let mut lines = Vec::new();
    for bf16 in [false, true] {
        for (rows, cols) in [(16384, 6144), (16384, 768), (7, 7), (33, 33), (1, 1000)] {
            lines.push(swiglu_once(rows, cols, bf16, fused)?);
        }
    }
    Ok(lines.join("; "))
}

/// SwiGLU over an f32 gate+up output into bf16 at `rows x cols` (the decode step's MoE activation).
fn swiglu_to_bf16_once(rows: u32, cols: u32) -> CaseResult {
    let mut g = rng();
    let (n, c) = ((rows * cols) as usize, cols as usize);
    let first = data(&mut g, 2 * n, 8.0, false);
    let gate: Vec<f32> = first.vals.chunks(2 * c).flat_map(|r| r[..c].to_vec()).collect();
    let up: Vec<f32> = first.vals.chunks(2 * c).flat_map(|r| r[c..].to_vec()).collect();
    with_scope(|s, gpu| {
        let ew = Elementwise::new(s).map_err(err)?;
        let (Buf::F32(fm), Buf::Bf16(mut ym)) = (Buf::of(s, &first)?, Buf::poisoned(s, n, true)?) else {
            unreachable!("an f32 input and a bf16 output")
        };
        let info = launched(&ew, gpu, ew.swiglu_fused_to_bf16(&fm, &mut ym, Rows { rows, cols }))?;
        let got: Vec<f32> = ym.to_vec().map_err(err)?.into_iter().map(bf16_to_f32).collect();
        let (want, tol) = swiglu_f64(&gate, &up);
        verdict(&format!("{rows}x{cols} f32->bf16"), &got, &want, tol, true, &info)
    })
}

pub fn swiglu_to_bf16() -> CaseResult {
    let shapes = [(8, 768), (256, 768), (4096, 768), (7, 7), (1, 1000)];
    shapes.into_iter().map(|(r, c)| swiglu_to_bf16_once(r, c)).collect::<Result<Vec<_>, _>>().map(|l| l.join("; "))
}

/// Every case above in turn (`gpu_suite --case elementwise`: the elementwise cases alone).
pub fn all() -> CaseResult {
    let cases: [super::Case; 7] = [
        ("rmsnorm", || rmsnorm(false)),
        ("add_rmsnorm", || rmsnorm(true)),
        ("rope", || rope(false)),
        ("norm_rope", || rope(true)),
        ("swiglu", || swiglu(false)),
        ("swiglu_fused", || swiglu(true)),
        ("swiglu_to_bf16", swiglu_to_bf16),
    ];
    let mut lines = Vec::new();
    for (name, case) in cases {
        lines.push(format!("{name}: {}", case().map_err(|e| format!("{name}: {e}"))?));
    }
    Ok(lines.join("\n"))
}
