//! The elementwise library's benchmark, Omega's side (the peer is benches/torch/ew_peer.py: torch's ops and
//! torch's copy in the same run; its metric names are these).
//!
//! Times the device-resident calls of `omega::libs::elementwise` (operands in device-only buffers) at
//! Qwen3-30B-A3B's shapes with 16384 tokens, f32 and bf16: RMSNorm and the residual RMSNorm at 16384x2048,
//! RoPE and QK-norm+RoPE at 16384 tokens x 16 heads x 128, SwiGLU plain and fused at 16384x2048 and
//! 16384x6144. Each op is recorded [`REPS`] times in one command list (each launch waits for the one
//! before), submitted four times; per submission the completion stamps give `(last - first) / (REPS -
//! 1)`, the median of the last three is the op's time. The bandwidth denominator is a device-to-device
//! copy through Omega ([`Elementwise::copy`], 16-byte loads and stores) of the same byte count, timed the
//! same way in the same run. Per op it prints
//!
//! - `omega.ew_<op>_<dtype>_<shape>_us` and `_gbps` (the bytes the kernel reads and writes, per second);
//! - `omega.ew_<op>_<dtype>_<shape>_copy_gbps` (the copy of as many bytes) and `_of_copy` (the ratio; the
//!   goal is >= 0.90);
//!
//! with a `#` line naming the kernel, its grid and block, and whether it took the vector path. The
//! RMSNorm forms are also timed forced (`ew_rmsnorm_{block,warp}_{f32,bf16}_*`, `ew_add_rmsnorm_{block,warp}_bf16_*`:
//! `Elementwise::force_rmsnorm_form`), so the library's choice between them is measured. Then the
//! host-pointer f32 entries (`omega_gpu_rmsnorm_f32` at 16384x2048, `omega_gpu_rope_f32` at 16384 x 16
//! heads of 128, `omega_gpu_swiglu_f32` over 16384 x 2048): `omega.host_<op>_f32_*`, the median wall and
//! device time of five calls after three, `_floor_us` (their bytes at the sync speeds measured in the
//! same run, `sync_256m_to_{gpu,cpu}_gbps`, plus the device time) and `_of_floor` (the goal: <= 1.1).
//! `ew_bench [--quick]`: `--quick` runs 64 tokens (a sim smoke run; on sim every time is the simulator's
//! virtual clock, not a GPU's).

#[path = "common/mod.rs"]
mod common;

use omega::cmdlist::CmdListBuilder;
use omega::ffi::elementwise::{
    omega_gpu_elementwise_last_error, omega_gpu_rmsnorm_f32, omega_gpu_rope_f32, omega_gpu_swiglu_f32, OmegaGpuEwInfo,
};
use omega::libs::elementwise::{DeviceSpan, Elementwise, EwCall, EwElem, EwError, Heads, Info, RmsForm, Rows};
use omega::{Device, Gpu, Mem, Scope};

/// Calls of one op in a timed list.
const REPS: usize = 20;

#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error(transparent)]
    Device(#[from] omega::Error),
    #[error(transparent)]
    Ew(#[from] EwError),
    #[error(transparent)]
    List(#[from] omega::cmdlist::CmdListError),
    /// A host-pointer entry failed.
    #[error("bench: {name} returned {rc}: {text}")]
    Host { name: String, rc: i32, text: String },
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The steady time of one call of `list`, which holds `REPS` of them.
fn list_secs<'s>(mut gpu: Gpu<'s>, list: &mut CmdListBuilder<'_, 's>) -> Result<(Gpu<'s>, f64), BenchError> {
    let mut ts = Vec::new();
    for round in 0..4 {
        let done = gpu.submit(list).map_err(|e| e.error)?;
        gpu = done.gpu;
        let stamps = list.stamps();
        if round > 0 {
            ts.push(stamps[REPS - 1].saturating_sub(stamps[0]) as f64 * 1e-9 / (REPS - 1) as f64);
        }
    }
    Ok((gpu, median(ts)))
}

/// `REPS` copies of a span (each call of a list borrows its own).
fn reps<T: omega::DeviceScalar>(m: &Mem<'_, Device<T>>) -> Vec<DeviceSpan<T>> {
    // SAFETY: the span is the whole of `m`, a live device buffer of the scope that outlives every list
    // the spans go into (the lists are dropped before the buffers, in `op`).
    vec![unsafe { DeviceSpan::new(m.va(), m.len()) }; REPS]
}

/// The buffers of one op, random (or zero: bandwidth does not depend on the values, except for NaN/inf
/// paths the kernels do not have).
struct Bufs<'s, T: omega::DeviceScalar> {
    a: Mem<'s, Device<T>>,
    b: Mem<'s, Device<T>>,
    w: Mem<'s, Device<T>>,
    y: Mem<'s, Device<T>>,
    cos: Mem<'s, Device<f32>>,
    sin: Mem<'s, Device<f32>>,
}

/// Which op.
#[derive(Clone, Copy)]
enum Which {
    RmsNorm,
    AddRmsNorm,
    Rope,
    NormRope,
    SwiGlu,
    SwiGluFused,
}

impl Which {
    fn name(self) -> &'static str {
        match self {
            Which::RmsNorm => "rmsnorm",
            Which::AddRmsNorm => "add_rmsnorm",
            Which::Rope => "rope",
            Which::NormRope => "norm_rope",
            Which::SwiGlu => "swiglu",
            Which::SwiGluFused => "swiglu_fused",
        }
    }
}

/// Plans call `i` of `which` on the spans.
#[allow(clippy::too_many_arguments)]
fn plan<'b, T: EwElem>(
    ew: &Elementwise<'_>,
    which: Which,
    a: &'b DeviceSpan<T>,
    b: &'b mut DeviceSpan<T>,
    w: &'b DeviceSpan<T>,
    y: &'b mut DeviceSpan<T>,
    tables: (&'b DeviceSpan<f32>, &'b DeviceSpan<f32>),
    rows: u32,
    cols: u32,
) -> Result<EwCall<'b>, EwError> {
    let heads = Heads { tokens: rows, heads: cols / 128, dim: 128 };
    match which {
        Which::RmsNorm => ew.rmsnorm(a, w, y, Rows { rows, cols }, 1e-6),
        Which::AddRmsNorm => ew.add_rmsnorm(a, b, w, y, Rows { rows, cols }, 1e-6),
        Which::Rope => ew.rope(a, tables.0, tables.1, y, heads),
        Which::NormRope => ew.norm_rope(a, w, tables.0, tables.1, y, heads, 1e-6),
        Which::SwiGlu => ew.swiglu(a, &*b, y, Rows { rows, cols }),
        Which::SwiGluFused => ew.swiglu_fused(a, y, Rows { rows, cols }),
    }
}

/// Times `which` at `rows x cols` in `T` and the copy of as many bytes; prints the figures. `form` forces
/// an RMSNorm form, named in the tag (`ew_rmsnorm_warp_...`); `None` is the library's choice.
#[allow(clippy::too_many_arguments)]
fn op<'s, T: EwElem>(
    s: &'s Scope<'s>,
    gpu: Gpu<'s>,
    ew: &Elementwise<'s>,
    which: Which,
    rows: u32,
    cols: u32,
    form: Option<RmsForm>,
) -> Result<Gpu<'s>, BenchError> {
    ew.force_rmsnorm_form(form);
    let n = rows as usize * cols as usize;
    let input = if matches!(which, Which::SwiGluFused) { 2 * n } else { n };
    let bufs: Bufs<'s, T> = Bufs {
        a: s.alloc_device_from(&vec![T::default(); input])?,
        b: s.alloc_device_from(&vec![T::default(); n])?,
        w: s.alloc_device_from(&vec![T::default(); cols as usize])?,
        y: s.alloc_device::<T>(n)?,
        cos: s.alloc_device_from(&vec![1.0f32; rows as usize * 64])?,
        sin: s.alloc_device_from(&vec![0.0f32; rows as usize * 64])?,
    };
    let (a, mut b, w, mut y) = (reps(&bufs.a), reps(&bufs.b), reps(&bufs.w), reps(&bufs.y));
    let (cos, sin) = (reps(&bufs.cos)[0], reps(&bufs.sin)[0]);
    let mut info = Info::default();
    let (gpu, secs) = {
        let mut list = s.cmdlist()?;
        for (i, (bi, yi)) in b.iter_mut().zip(y.iter_mut()).enumerate() {
            let call = plan::<T>(ew, which, &a[i], bi, &w[i], yi, (&cos, &sin), rows, cols)?;
            info = ew.record(&mut list, call)?;
        }
        list_secs(gpu, &mut list)?
    };
    // The copy of the bytes the kernel moves: half read, half written.
    let copy_elems = (info.bytes / 2 / 16 * 16) as usize / size_of::<T>();
    let src = s.alloc_device_from(&vec![T::default(); copy_elems])?;
    let dst = s.alloc_device::<T>(copy_elems)?;
    let (srcs, mut dsts) = (reps(&src), reps(&dst));
    let (gpu, copy_secs) = {
        let mut list = s.cmdlist()?;
        for (si, di) in srcs.iter().zip(dsts.iter_mut()) {
            let call = ew.copy(si, di, copy_elems)?;
            ew.record(&mut list, call)?;
        }
        list_secs(gpu, &mut list)?
    };
    let copy_bytes = 2.0 * (copy_elems * size_of::<T>()) as f64;
    let form_name = match form {
        None => String::new(),
        Some(f) => format!("_{}", if f == RmsForm::Warp { "warp" } else { "block" }),
    };
    let tag = format!("ew_{}{form_name}_{}_{rows}x{cols}", which.name(), if T::BF16 { "bf16" } else { "f32" });
    ew.force_rmsnorm_form(None);
    println!(
        "# {tag}: {} grid {} x {} threads, vectorized {}, {} bytes a call",
        info.kernel, info.ctas, info.block, info.vectorized, info.bytes
    );
    let (gbps, copy_gbps) = (info.bytes as f64 / secs / 1e9, copy_bytes / copy_secs / 1e9);
    println!("omega.{tag}_us {:.3}", secs * 1e6);
    println!("omega.{tag}_gbps {gbps:.1}");
    println!("omega.{tag}_copy_gbps {copy_gbps:.1}");
    println!("omega.{tag}_of_copy {:.3}", gbps / copy_gbps);
    Ok(gpu)
}

fn run(quick: bool) -> Result<(), BenchError> {
    let dev = omega::lock().open().map_err(|e| e.error)?;
    println!("# ew_bench on {}", dev.platform());
    let rows = if quick { 64 } else { 16384 };
    let cases = [
        (Which::RmsNorm, 2048),
        (Which::AddRmsNorm, 2048),
        (Which::Rope, 2048),
        (Which::NormRope, 2048),
        (Which::SwiGlu, 2048),
        (Which::SwiGlu, 6144),
        (Which::SwiGluFused, 2048),
        (Which::SwiGluFused, 6144),
    ];
    let r = dev.scope(|s, gpu| -> Result<(), BenchError> {
        let ew = Elementwise::new(s)?;
        let mut gpu = gpu;
        for (which, cols) in cases {
            gpu = op::<f32>(s, gpu, &ew, which, rows, cols, None)?;
            gpu = op::<u16>(s, gpu, &ew, which, rows, cols, None)?;
        }
        // Both RMSNorm forms forced, side by side (the residual form has no f32 warp kernel).
        for form in [RmsForm::Block, RmsForm::Warp] {
            gpu = op::<f32>(s, gpu, &ew, Which::RmsNorm, rows, 2048, Some(form))?;
            gpu = op::<u16>(s, gpu, &ew, Which::RmsNorm, rows, 2048, Some(form))?;
            gpu = op::<u16>(s, gpu, &ew, Which::AddRmsNorm, rows, 2048, Some(form))?;
        }
        Ok(())
    });
    r.value()?;
    host_entries(rows)
}

/// One host-pointer entry's figures over 5 calls after 3 of `call` (which returns the entry's code and
/// fills `info`).
fn host_figures(name: &str, mut call: impl FnMut(&mut OmegaGpuEwInfo) -> i32) -> Result<common::HostCall, BenchError> {
    let mut info = OmegaGpuEwInfo::default();
    common::HostCall::measure(5, || match call(&mut info) {
        0 => Ok((info.device_ns, info.h2d_bytes, info.d2h_bytes)),
        rc => {
            // SAFETY: the library's last error is a NUL-terminated process-wide buffer.
            let text = unsafe { std::ffi::CStr::from_ptr(omega_gpu_elementwise_last_error()) };
            Err(BenchError::Host { name: name.to_string(), rc, text: text.to_string_lossy().into_owned() })
        }
    })
}

/// The host-pointer f32 entries at `rows` tokens (they take the lock themselves: called with none held).
fn host_entries(rows: u32) -> Result<(), BenchError> {
    let (cols, heads, dim) = (2048u32, 16u32, 128u32);
    let n = (rows * cols) as usize;
    let mut mix = common::rng(common::fresh_seed());
    let x = common::random_f32(&mut mix, n).into_iter().map(|v| v * 1e-6).collect::<Vec<f32>>();
    let w = vec![1.0f32; cols as usize];
    let table = vec![0.5f32; n / 2];
    let mut y = vec![0f32; n];
    let mut figures = Vec::new();
    figures.push((
        format!("host_rmsnorm_f32_{rows}x{cols}"),
        // SAFETY: x and y hold rows * 2048 aligned floats, w 2048, and info is writable.
        host_figures("omega_gpu_rmsnorm_f32", |info| unsafe {
            omega_gpu_rmsnorm_f32(rows, cols, x.as_ptr(), w.as_ptr(), 1e-6, y.as_mut_ptr(), info)
        })?,
    ));
    figures.push((
        format!("host_rope_f32_{rows}x{heads}x{dim}"),
        // SAFETY: x and y hold (rows * 16) * 128 aligned floats, the tables (rows * 16) * 64 = n / 2 each,
        // and info is writable.
        host_figures("omega_gpu_rope_f32", |info| unsafe {
            omega_gpu_rope_f32(rows * heads, dim, x.as_ptr(), table.as_ptr(), table.as_ptr(), y.as_mut_ptr(), info)
        })?,
    ));
    figures.push((
        format!("host_swiglu_f32_{rows}x{cols}"),
        // SAFETY: gate, up (both x) and y hold rows * 2048 aligned floats, and info is writable.
        host_figures("omega_gpu_swiglu_f32", |info| unsafe {
            omega_gpu_swiglu_f32(rows * cols, x.as_ptr(), x.as_ptr(), y.as_mut_ptr(), info)
        })?,
    ));
    omega::ffi::matmul::omega_gpu_device_close();
    let bytes = if rows < 1024 { 1 << 24 } else { common::SYNC_MEASURE_BYTES };
    let speeds = common::sync_speeds(bytes)?;
    for (tag, call) in &figures {
        call.print(tag, speeds);
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let quick = std::env::args().any(|a| a == "--quick");
    match run(quick) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ew_bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
