//! `omega_gpu_elementwise_api.h`: the elementwise library's C entries (the contract's section 9.5,
//! EXPERIMENTAL), over [`crate::libs::elementwise`].
//!
//! As the matmul library's C layer (src/ffi/matmul.rs): every entry checks its pointers, takes the
//! session lock itself (a caller that holds it is refused, LD-4), opens the device when it is closed,
//! runs the library's call in one scope and lets the lock go. The loaded module and the host-pointer
//! entries' staging buffers are kept between calls ([`crate::Kept`]); `omega_gpu_device_close` (the
//! matmul layer's) closes only a device its own calls opened, so one these entries opened stays open until
//! the session's close (`omega_gpu_session_close`); a close makes what is kept here stale, and the next
//! call loads again. Every failure is named: a negative `OMEGA_GPU_EW_ERR_*`
//! ([`omega_gpu_elementwise_rc_name`]), the text `{stage}: {cause}` as the library's last error
//! ([`omega_gpu_elementwise_last_error`]) and the session's, and the stage and code in the call's
//! `OmegaGpuEwInfo`. An uncertain completion latches the process as any launch does: the call returns
//! `OMEGA_GPU_EW_ERR_UNCERTAIN` and every later call is refused (`OMEGA_GPU_EW_ERR_BLOCKED`).
//!
//! The host-pointer entries (`omega_gpu_rmsnorm_f32`, `omega_gpu_rope_f32`, `omega_gpu_swiglu_f32`) are
//! the contract's: f32 arrays in host memory, staged up and back through the copy path. The `_mem`
//! entries run on device buffers of the open session (`OmegaGpuMem`), f32 or bf16 by an
//! `OMEGA_GPU_EW_DTYPE_*` argument, with the decoder layer's fusions.

use core::ffi::{c_char, c_int};
use core::ptr;
use std::time::Instant;

use super::boundary::{guard, library_session_rc, LibrarySessionCodes, TextBuffer};
use crate::error::{Error, Stage};
use crate::libs::elementwise::{
    DeviceSpan, Elementwise, EwCall, EwElem, EwError, Heads, Info, KeptElementwise, Op, Rows,
};
use crate::session::{runtime, GpuMem};
use crate::sync::{self, Mutex};
use crate::{Device, Kept, Mem, Scope};

/// Success.
pub const OMEGA_GPU_EW_OK: i32 = 0;
/// A NULL or misaligned pointer, an unknown dtype, or an `OmegaGpuMem` that is not a live buffer of the
/// open session (stage `elementwise args`).
pub const OMEGA_GPU_EW_ERR_ARGS: i32 = -1;
/// A side of 0, an odd RoPE dim, a shape past what a launch can address, or one the buffers do not hold
/// (stage `elementwise shape`).
pub const OMEGA_GPU_EW_ERR_SHAPE: i32 = -2;
/// The caller holds the session lock, which the entries take themselves (stage `lock`, LD-4).
pub const OMEGA_GPU_EW_ERR_LOCK_HELD: i32 = -3;
/// Refused: the process is latched after an uncertain completion (stage `elementwise`).
pub const OMEGA_GPU_EW_ERR_BLOCKED: i32 = -4;
/// This call's completion was uncertain: the process latched (stage `launch`).
pub const OMEGA_GPU_EW_ERR_UNCERTAIN: i32 = -5;
/// No platform, or the device did not open (stage `platform` or `open`).
pub const OMEGA_GPU_EW_ERR_DEVICE: i32 = -6;
/// A device allocation failed (stage `alloc`).
pub const OMEGA_GPU_EW_ERR_ALLOC: i32 = -7;
/// The `elementwise` module did not load (stage `load`).
pub const OMEGA_GPU_EW_ERR_LOAD: i32 = -8;
/// Moving bytes between host and device failed (stage `write`, `read` or `sync`).
pub const OMEGA_GPU_EW_ERR_COPY: i32 = -9;
/// The launch was refused or its kernel faulted; nothing is running (stage `launch arguments` or
/// `launch`).
pub const OMEGA_GPU_EW_ERR_LAUNCH: i32 = -10;
/// A cancel request stopped the call before its launch was submitted (stage `launch`).
pub const OMEGA_GPU_EW_ERR_CANCELLED: i32 = -11;
/// A panic inside the library (stage `internal`).
pub const OMEGA_GPU_EW_ERR_INTERNAL: i32 = -12;

/// `_mem` entries' element type: f32.
pub const OMEGA_GPU_EW_DTYPE_F32: u32 = 0;
/// `_mem` entries' element type: bf16 (`uint16_t` bit patterns; f32 arithmetic).
pub const OMEGA_GPU_EW_DTYPE_BF16: u32 = 1;

/// `OmegaGpuEwInfo.op`: nothing was planned.
pub const OMEGA_GPU_EW_OP_NONE: u32 = 0;
/// `y = rmsnorm(x) * w`.
pub const OMEGA_GPU_EW_OP_RMSNORM: u32 = 1;
/// `h = x + h; y = rmsnorm(h) * w`.
pub const OMEGA_GPU_EW_OP_ADD_RMSNORM: u32 = 2;
/// RoPE.
pub const OMEGA_GPU_EW_OP_ROPE: u32 = 3;
/// Per-head RMSNorm, then RoPE.
pub const OMEGA_GPU_EW_OP_NORM_ROPE: u32 = 4;
/// `y = silu(gate) * up`.
pub const OMEGA_GPU_EW_OP_SWIGLU: u32 = 5;
/// SwiGLU over the fused gate+up output.
pub const OMEGA_GPU_EW_OP_SWIGLU_FUSED: u32 = 6;

/// `OmegaGpuEwInfo.flags`: bf16 operands.
pub const OMEGA_GPU_EW_FLAG_BF16: u32 = 1;
/// `OmegaGpuEwInfo.flags`: the kernel took its 16-byte vector path.
pub const OMEGA_GPU_EW_FLAG_VECTORIZED: u32 = 2;
/// `OmegaGpuEwInfo.flags`: host-pointer operands, staged through the copy path.
pub const OMEGA_GPU_EW_FLAG_HOST_POINTERS: u32 = 4;
/// `OmegaGpuEwInfo.flags`: this call opened the device.
pub const OMEGA_GPU_EW_FLAG_OPENED: u32 = 8;

/// `OmegaGpuEwInfo.stage`: no failure.
pub const OMEGA_GPU_EW_STAGE_NONE: u32 = 0;
/// `elementwise args`.
pub const OMEGA_GPU_EW_STAGE_ARGS: u32 = 1;
/// `elementwise shape`.
pub const OMEGA_GPU_EW_STAGE_SHAPE: u32 = 2;
/// `lock`.
pub const OMEGA_GPU_EW_STAGE_LOCK: u32 = 3;
/// `elementwise` (refused after a latch).
pub const OMEGA_GPU_EW_STAGE_ELEMENTWISE: u32 = 4;
/// `platform`.
pub const OMEGA_GPU_EW_STAGE_PLATFORM: u32 = 5;
/// `open`.
pub const OMEGA_GPU_EW_STAGE_OPEN: u32 = 6;
/// `alloc`.
pub const OMEGA_GPU_EW_STAGE_ALLOC: u32 = 7;
/// `load`.
pub const OMEGA_GPU_EW_STAGE_LOAD: u32 = 8;
/// `write` (or `sync`).
pub const OMEGA_GPU_EW_STAGE_WRITE: u32 = 9;
/// `read`.
pub const OMEGA_GPU_EW_STAGE_READ: u32 = 10;
/// `launch arguments`.
pub const OMEGA_GPU_EW_STAGE_LAUNCH_ARGUMENTS: u32 = 11;
/// `launch`.
pub const OMEGA_GPU_EW_STAGE_LAUNCH: u32 = 12;
/// Any other stage (the text says which).
pub const OMEGA_GPU_EW_STAGE_OTHER: u32 = 13;

const _: () = {
    assert!(OMEGA_GPU_EW_OP_RMSNORM == Op::RmsNorm as u32);
    assert!(OMEGA_GPU_EW_OP_ADD_RMSNORM == Op::AddRmsNorm as u32);
    assert!(OMEGA_GPU_EW_OP_ROPE == Op::Rope as u32);
    assert!(OMEGA_GPU_EW_OP_NORM_ROPE == Op::NormRope as u32);
    assert!(OMEGA_GPU_EW_OP_SWIGLU == Op::SwiGlu as u32);
    assert!(OMEGA_GPU_EW_OP_SWIGLU_FUSED == Op::SwiGluFused as u32);
};

/// EXPERIMENTAL. What an elementwise call ran and what it cost: 120 bytes, filled on success and on
/// failure (when the pointer is not NULL).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OmegaGpuEwInfo {
    /// What ran: `OMEGA_GPU_EW_OP_*` (`_NONE` when the call failed before planning).
    pub op: u32,
    /// `OMEGA_GPU_EW_FLAG_*`.
    pub flags: u32,
    /// Rows (RoPE: tokens).
    pub rows: u32,
    /// Columns (RMSNorm: the normalised width; RoPE: the head dim; SwiGLU: the intermediate size).
    pub cols: u32,
    /// RoPE: heads per token (1 otherwise).
    pub heads: u32,
    /// Launches (1 for every op).
    pub launches: u32,
    /// CTAs of the launch.
    pub ctas: u32,
    /// Threads per CTA.
    pub block: u32,
    /// Submit to completion, platform-clock ns (virtual on the simulator).
    pub device_ns: u64,
    /// Wall time of the whole call, ns: the lock, the staging copies and the launch.
    pub host_ns: u64,
    /// Bytes the kernel reads and writes in device memory.
    pub bytes: u64,
    /// Bytes written from the host to the device (the staged inputs).
    pub h2d_bytes: u64,
    /// Bytes read back to the host (the staged output).
    pub d2h_bytes: u64,
    /// The failing stage: `OMEGA_GPU_EW_STAGE_*` (`_NONE` on success).
    pub stage: u32,
    /// The call's return code.
    pub rc: i32,
    /// Zero; room for later fields.
    pub reserved: [u32; 10],
}

static_assertions::assert_eq_size!(OmegaGpuEwInfo, [u8; 120]);

/// What the library keeps between calls: the module and the host-pointer entries' staging (three inputs,
/// one output).
struct Library {
    ew: Option<KeptElementwise>,
    inputs: [Option<Kept<Device<f32>>>; 3],
    output: Option<Kept<Device<f32>>>,
}

static LIBRARY: Mutex<Library> = Mutex::new(Library { ew: None, inputs: [None, None, None], output: None });

static LAST_ERROR: Mutex<String> = Mutex::new(String::new());
static LAST_ERROR_TEXT: TextBuffer = TextBuffer::new();

const LOCK_HELD: &str =
    "the elementwise library's entries take the session lock themselves: call them without it (LD-4)";

/// An entry's own failures, before or around the library's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum EntryError {
    #[error("elementwise args: {0} is NULL")]
    Null(&'static str),
    #[error("elementwise args: {what} ({addr:#x}) is not aligned to its {align}-byte elements")]
    Misaligned { what: &'static str, addr: usize, align: usize },
    #[error("elementwise args: dtype {0} is neither OMEGA_GPU_EW_DTYPE_F32 (0) nor OMEGA_GPU_EW_DTYPE_BF16 (1)")]
    Dtype(u32),
    #[error(transparent)]
    Ew(#[from] EwError),
    #[error(transparent)]
    Session(#[from] Error),
}

impl EntryError {
    fn stage(&self) -> Stage {
        match self {
            EntryError::Null(_) | EntryError::Misaligned { .. } | EntryError::Dtype(_) => Stage::ElementwiseArgs,
            EntryError::Ew(e) => e.stage(),
            EntryError::Session(e) => e.stage(),
        }
    }

    fn rc(&self) -> i32 {
        let e = match self {
            EntryError::Null(_) | EntryError::Misaligned { .. } | EntryError::Dtype(_) => return OMEGA_GPU_EW_ERR_ARGS,
            EntryError::Ew(EwError::Shape(_)) => return OMEGA_GPU_EW_ERR_SHAPE,
            EntryError::Ew(EwError::List(_)) => return OMEGA_GPU_EW_ERR_LAUNCH,
            EntryError::Ew(EwError::Device(e)) | EntryError::Session(e) => e,
        };
        library_session_rc(e, &SESSION_CODES)
    }
}

/// The session errors' codes of this library.
const SESSION_CODES: LibrarySessionCodes = LibrarySessionCodes {
    args_stage: Stage::ElementwiseArgs,
    uncertain: OMEGA_GPU_EW_ERR_UNCERTAIN,
    lock_held: OMEGA_GPU_EW_ERR_LOCK_HELD,
    blocked: OMEGA_GPU_EW_ERR_BLOCKED,
    cancelled: OMEGA_GPU_EW_ERR_CANCELLED,
    device: OMEGA_GPU_EW_ERR_DEVICE,
    args: OMEGA_GPU_EW_ERR_ARGS,
    alloc: OMEGA_GPU_EW_ERR_ALLOC,
    load: OMEGA_GPU_EW_ERR_LOAD,
    copy: OMEGA_GPU_EW_ERR_COPY,
    launch: OMEGA_GPU_EW_ERR_LAUNCH,
    internal: OMEGA_GPU_EW_ERR_INTERNAL,
};

fn stage_code(stage: Stage) -> u32 {
    match stage {
        Stage::ElementwiseArgs => OMEGA_GPU_EW_STAGE_ARGS,
        Stage::ElementwiseShape => OMEGA_GPU_EW_STAGE_SHAPE,
        Stage::Lock => OMEGA_GPU_EW_STAGE_LOCK,
        Stage::Elementwise => OMEGA_GPU_EW_STAGE_ELEMENTWISE,
        Stage::Platform => OMEGA_GPU_EW_STAGE_PLATFORM,
        Stage::Open => OMEGA_GPU_EW_STAGE_OPEN,
        Stage::Alloc => OMEGA_GPU_EW_STAGE_ALLOC,
        Stage::Load => OMEGA_GPU_EW_STAGE_LOAD,
        Stage::Write | Stage::Sync => OMEGA_GPU_EW_STAGE_WRITE,
        Stage::Read => OMEGA_GPU_EW_STAGE_READ,
        Stage::LaunchArguments => OMEGA_GPU_EW_STAGE_LAUNCH_ARGUMENTS,
        Stage::Launch => OMEGA_GPU_EW_STAGE_LAUNCH,
        _ => OMEGA_GPU_EW_STAGE_OTHER,
    }
}

/// What one call produced: its info as far as it got, its flags and its outcome.
struct Outcome {
    info: Info,
    flags: u32,
    result: Result<(), EntryError>,
}

impl Outcome {
    fn failed(info: Info, flags: u32, e: impl Into<EntryError>) -> Self {
        Outcome { info, flags, result: Err(e.into()) }
    }
}

/// The info written (when `out` is not NULL), a failure recorded, the return code.
///
/// # Safety
/// - `out` is NULL or points to a writable, aligned `OmegaGpuEwInfo`.
unsafe fn finish(out: *mut OmegaGpuEwInfo, start: Instant, o: Outcome) -> c_int {
    let info = o.info;
    let (rc, stage) = match &o.result {
        Ok(()) => (OMEGA_GPU_EW_OK, OMEGA_GPU_EW_STAGE_NONE),
        Err(e) => {
            let text = e.to_string();
            super::boundary::record(&text);
            *sync::lock(&LAST_ERROR) = text;
            (e.rc(), stage_code(e.stage()))
        }
    };
    let flags = o.flags
        | if info.bf16 { OMEGA_GPU_EW_FLAG_BF16 } else { 0 }
        | if info.vectorized { OMEGA_GPU_EW_FLAG_VECTORIZED } else { 0 };
    // SAFETY: by the caller's promise `out` is NULL or a writable, aligned OmegaGpuEwInfo.
    if let Some(out) = unsafe { out.as_mut() } {
        *out = OmegaGpuEwInfo {
            op: info.op.map_or(OMEGA_GPU_EW_OP_NONE, |op| op as u32),
            flags,
            rows: info.rows,
            cols: info.cols,
            heads: info.heads,
            launches: info.launches,
            ctas: info.ctas,
            block: info.block,
            device_ns: info.device_ns,
            host_ns: start.elapsed().as_nanos() as u64,
            bytes: info.bytes,
            h2d_bytes: info.h2d_bytes,
            d2h_bytes: info.d2h_bytes,
            stage,
            rc,
            reserved: [0; 10],
        };
    }
    rc
}

/// Runs `body` with the library's handle in a scope of the open device: the lock taken here (refused when
/// the caller holds it, LD-4, or the process is latched), the device opened when it was closed, the
/// handle kept again afterwards.
fn with_library(
    flags: u32,
    body: impl for<'s> FnOnce(&mut Library, &'s Scope<'s>, &Elementwise<'s>, crate::Gpu<'s>, u32) -> Outcome,
) -> Outcome {
    let rt = runtime();
    if rt.holds_lock() {
        return Outcome::failed(Info::default(), flags, Error::Lock(LOCK_HELD));
    }
    if rt.is_blocked() {
        return Outcome::failed(Info::default(), flags, Error::Latched(Stage::Elementwise));
    }
    let lock = crate::lock();
    let flags = if lock.is_open() { flags } else { flags | OMEGA_GPU_EW_FLAG_OPENED };
    let dev = match lock.open() {
        Ok(d) => d,
        Err(e) => return Outcome::failed(Info::default(), flags, e.error),
    };
    let mut lib = sync::lock(&LIBRARY);
    let scoped = dev.scope(|s, gpu| {
        let ew = match Elementwise::resume(s, lib.ew.take()) {
            Ok(ew) => ew,
            Err(e) => return Outcome::failed(Info::default(), flags, e),
        };
        let o = body(&mut lib, s, &ew, gpu, flags);
        lib.ew = Some(ew.keep());
        o
    });
    // A latched scope still hands the outcome back; the latch is in its error.
    scoped.value()
}

/// Refuses NULL and a pointer not aligned to `T`.
fn check_ptr<T>(what: &'static str, p: *const T) -> Result<(), EntryError> {
    if p.is_null() {
        Err(EntryError::Null(what))
    } else if !p.is_aligned() {
        Err(EntryError::Misaligned { what, addr: p.addr(), align: align_of::<T>() })
    } else {
        Ok(())
    }
}

/// Elements of `a * b` (u32 sides: within usize on the 64-bit hosts Omega runs on).
fn elements(a: u32, b: u32) -> usize {
    (u64::from(a) * u64::from(b)) as usize
}

/// A host-pointer call: `inputs` staged up (each `(name, pointer, elements)`), the call the library plans
/// over the staged buffers, y staged back.
///
/// # Safety
/// - Each input pointer is NULL (refused) or points to its count of readable, aligned `float`; `y` is NULL
///   (refused) or points to `y_len` writable, aligned `float` nothing else touches during the call.
unsafe fn host_call(
    inputs: &[(&'static str, *const f32, usize)],
    y: *mut f32,
    y_len: usize,
    plan: impl for<'s, 'b> FnOnce(
        &Elementwise<'s>,
        &[&'b Mem<'static, Device<f32>>],
        &'b mut Mem<'static, Device<f32>>,
    ) -> Result<EwCall<'b>, EwError>,
) -> Outcome {
    let flags = OMEGA_GPU_EW_FLAG_HOST_POINTERS;
    let checked = inputs.iter().try_for_each(|&(what, p, _)| check_ptr(what, p)).and_then(|()| check_ptr("y", y));
    if let Err(e) = checked {
        return Outcome::failed(Info::default(), flags, e);
    }
    with_library(flags, |lib, s, ew, gpu, flags| {
        let Library { inputs: slots, output, .. } = lib;
        let mut up = 0u64;
        let run = || -> Result<Outcome, EntryError> {
            let mut staged = Vec::with_capacity(inputs.len());
            for (slot, &(_, p, n)) in slots.iter_mut().zip(inputs) {
                // SAFETY: non-null and aligned (checked above); `n` readable floats by the caller's promise.
                let data = unsafe { core::slice::from_raw_parts(p, n) };
                let m = super::matmul::staged(s, slot, n)?;
                m.write(data)?;
                up += size_of_val(data) as u64;
                staged.push(&*m);
            }
            let ys = super::matmul::staged(s, output, y_len)?;
            let call = plan(ew, &staged, ys)?;
            let mut info = match ew.launch(gpu, call) {
                Ok(done) => done.info,
                Err(f) => return Ok(Outcome::failed(Info { h2d_bytes: up, ..*f.info }, flags, f.error)),
            };
            info.h2d_bytes = up;
            // SAFETY: non-null and aligned (checked above); `y_len` writable floats, not aliased, by the
            // caller's promise.
            let out = unsafe { core::slice::from_raw_parts_mut(y, y_len) };
            super::matmul::staged(s, output, y_len)?.read(out)?;
            info.d2h_bytes = size_of_val(out) as u64;
            Ok(Outcome { info, flags, result: Ok(()) })
        };
        run().unwrap_or_else(|e| Outcome::failed(Info { h2d_bytes: up, ..Info::default() }, flags, e))
    })
}

/// EXPERIMENTAL. RMSNorm over the rows of `x` `[rows, cols]` (row-major f32, host memory): `y[r, c] = x[r,
/// c] * w[c] / sqrt(mean_c(x[r, c]^2) + eps)`, `w` `[cols]`, `y` `[rows, cols]`. f32 arithmetic. x and w
/// are copied to the device, y back. Takes the session lock itself (call it WITHOUT the lock: a caller
/// that holds it gets `OMEGA_GPU_EW_ERR_LOCK_HELD`) and opens the device when it is closed
/// (`omega_gpu_device_close` closes it again). `info` may be NULL. Returns `OMEGA_GPU_EW_OK` (0) or a
/// negative `OMEGA_GPU_EW_ERR_*` with the stage in `omega_gpu_elementwise_last_error()`: NULL or
/// misaligned pointers `_ARGS`, a side of 0 `_SHAPE`.
///
/// # Safety
/// - `x` is NULL (refused) or points to `rows*cols` readable, aligned `float`; `w` to `cols`.
/// - `y` is NULL (refused) or points to `rows*cols` writable, aligned `float` that nothing else touches
///   during the call.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuEwInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_rmsnorm_f32(
    rows: u32,
    cols: u32,
    x: *const f32,
    w: *const f32,
    eps: f32,
    y: *mut f32,
    info: *mut OmegaGpuEwInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_rmsnorm_f32", OMEGA_GPU_EW_ERR_INTERNAL, || unsafe {
        let n = elements(rows, cols);
        let inputs = [("x", x, n), ("w", w, cols as usize)];
        let o = host_call(&inputs, y, n, |ew, m, ys| ew.rmsnorm(m[0], m[1], ys, Rows { rows, cols }, eps));
        finish(info, start, o)
    })
}

/// EXPERIMENTAL. RoPE over `x` `[rows, dim]` (row-major f32, host memory; one head per row, row r at
/// position table row r) with explicit tables `cos`, `sin` `[rows, dim / 2]`: row r, column i holds
/// `cos(p_r * theta^(-2i/dim))` and `sin(p_r * theta^(-2i/dim))` for the row's position `p_r` and the
/// model's `theta` (1e6 for Qwen3). The "rotate_half" pairing of Qwen / Hugging Face: element i pairs
/// with i + dim/2, `y[i] = x[i] cos[i] - x[i + dim/2] sin[i]`, `y[i + dim/2] = x[i + dim/2] cos[i] + x[i]
/// sin[i]`. dim must be even (`_SHAPE` otherwise). Otherwise as `omega_gpu_rmsnorm_f32`.
///
/// # Safety
/// - `x` is NULL (refused) or points to `rows*dim` readable, aligned `float`; `cos` and `sin` to
///   `rows*dim/2` each.
/// - `y` is NULL (refused) or points to `rows*dim` writable, aligned `float` that nothing else touches
///   during the call.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuEwInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_rope_f32(
    rows: u32,
    dim: u32,
    x: *const f32,
    cos: *const f32,
    sin: *const f32,
    y: *mut f32,
    info: *mut OmegaGpuEwInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_rope_f32", OMEGA_GPU_EW_ERR_INTERNAL, || unsafe {
        let (n, table) = (elements(rows, dim), elements(rows, dim / 2));
        let inputs = [("x", x, n), ("cos", cos, table), ("sin", sin, table)];
        let shape = Heads { tokens: rows, heads: 1, dim };
        let o = host_call(&inputs, y, n, |ew, m, ys| ew.rope(m[0], m[1], m[2], ys, shape));
        finish(info, start, o)
    })
}

/// EXPERIMENTAL. SwiGLU over `n` f32 in host memory: `y[i] = silu(gate[i]) * up[i]`, `silu(g) = g / (1 +
/// e^-g)`. Otherwise as `omega_gpu_rmsnorm_f32` (`n` of 0 is `_SHAPE`).
///
/// # Safety
/// - `gate` and `up` are each NULL (refused) or point to `n` readable, aligned `float`.
/// - `y` is NULL (refused) or points to `n` writable, aligned `float` that nothing else touches during the
///   call.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuEwInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_swiglu_f32(
    n: u32,
    gate: *const f32,
    up: *const f32,
    y: *mut f32,
    info: *mut OmegaGpuEwInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_swiglu_f32", OMEGA_GPU_EW_ERR_INTERNAL, || unsafe {
        let inputs = [("gate", gate, n as usize), ("up", up, n as usize)];
        let o = host_call(&inputs, y, n as usize, |ew, m, ys| ew.swiglu(m[0], m[1], ys, Rows { rows: 1, cols: n }));
        finish(info, start, o)
    })
}

// ----- device-resident entries --------------------------------------------------------------------------

/// A live buffer of the open session as a span of `T`, or the refusal (stage `elementwise args`) of NULL
/// or a buffer the session does not have.
///
/// # Safety
/// - `m` is NULL (refused) or points to a readable, aligned `OmegaGpuMem`.
unsafe fn span<T: EwElem>(what: &'static str, m: *const GpuMem) -> Result<DeviceSpan<T>, EntryError> {
    // SAFETY: by the caller's promise NULL or a readable OmegaGpuMem.
    let Some(m) = (unsafe { m.as_ref() }) else { return Err(EntryError::Null(what)) };
    let bytes = runtime().live_bytes(m, Stage::ElementwiseArgs)?;
    // SAFETY: the session says `m` names a live buffer of `bytes` bytes at `m.va`; it stays allocated for
    // the span's use, which is this call's, since the call holds the session lock and a free or close
    // needs it. Whether the kernel may write it is the device's check (a store to a read-only buffer
    // faults).
    Ok(unsafe { DeviceSpan::new(m.va, (bytes / size_of::<T>() as u64) as usize) })
}

/// The spans of a `_mem` entry's buffers, in the order the entry names them.
type Spans<T> = Vec<DeviceSpan<T>>;

/// A `_mem` entry's plan over its spans of `T` and its f32 tables.
trait MemPlan<T: EwElem>:
    for<'s, 'b> FnOnce(&Elementwise<'s>, &'b mut Spans<T>, &'b Spans<f32>) -> Result<EwCall<'b>, EwError>
{
}
impl<T: EwElem, F> MemPlan<T> for F where
    F: for<'s, 'b> FnOnce(&Elementwise<'s>, &'b mut Spans<T>, &'b Spans<f32>) -> Result<EwCall<'b>, EwError>
{
}

/// Named `OmegaGpuMem` pointers.
type Bufs<'a> = &'a [(&'static str, *const GpuMem)];

/// A device-resident call of element type `T`: the spans checked under the lock, the library's plan, the
/// launch.
///
/// # Safety
/// - Each buffer pointer is NULL (refused) or points to a readable, aligned `OmegaGpuMem`.
unsafe fn mem_call<T: EwElem>(bufs: Bufs<'_>, tables: Bufs<'_>, plan: impl MemPlan<T>) -> Outcome {
    with_library(0, |_lib, _s, ew, gpu, flags| {
        // SAFETY: forwarded from the caller.
        let spans = unsafe {
            let tables = tables.iter().map(|&(what, m)| span::<f32>(what, m)).collect::<Result<Spans<f32>, _>>();
            bufs.iter()
                .map(|&(what, m)| span::<T>(what, m))
                .collect::<Result<Spans<T>, _>>()
                .and_then(|b| Ok((b, tables?)))
        };
        let (mut spans, tables) = match spans {
            Ok(v) => v,
            Err(e) => return Outcome::failed(Info::default(), flags, e),
        };
        let call = match plan(ew, &mut spans, &tables) {
            Ok(c) => c,
            Err(e) => return Outcome::failed(Info::default(), flags, e),
        };
        match ew.launch(gpu, call) {
            Ok(done) => Outcome { info: done.info, flags, result: Ok(()) },
            Err(f) => Outcome::failed(*f.info, flags, f.error),
        }
    })
}

/// Dispatches a `_mem` entry on its dtype.
///
/// # Safety
/// - As [`mem_call`].
unsafe fn by_dtype(
    dtype: u32,
    bufs: Bufs<'_>,
    tables: Bufs<'_>,
    f32_plan: impl MemPlan<f32>,
    bf16_plan: impl MemPlan<u16>,
) -> Outcome {
    // SAFETY: forwarded from the caller.
    unsafe {
        match dtype {
            OMEGA_GPU_EW_DTYPE_F32 => mem_call::<f32>(bufs, tables, f32_plan),
            OMEGA_GPU_EW_DTYPE_BF16 => mem_call::<u16>(bufs, tables, bf16_plan),
            other => Outcome::failed(Info::default(), 0, EntryError::Dtype(other)),
        }
    }
}

/// Splits `v` into its first element (mutable, the output) and the rest (the inputs).
fn out_first<T>(v: &mut [T]) -> (&mut T, &[T]) {
    let (first, rest) = v.split_first_mut().expect("every entry passes its output first");
    (first, rest)
}

/// Splits `v` into its first two elements (mutable: the residual and the output) and the rest.
fn two_out<T>(v: &mut [T]) -> (&mut T, &mut T, &[T]) {
    let (a, rest) = v.split_first_mut().expect("two outputs");
    let (b, rest) = rest.split_first_mut().expect("two outputs");
    (a, b, rest)
}

/// The two element types' plans written once: `$body` compiled for f32 and for bf16.
macro_rules! dtyped {
    ($dtype:expr, $bufs:expr, $tables:expr, |$ew:ident, $s:ident, $t:pat_param| $body:expr) => {
        by_dtype($dtype, $bufs, $tables, |$ew, $s, $t| $body, |$ew, $s, $t| $body)
    };
}

/// EXPERIMENTAL. RMSNorm over device buffers of the open session (no copies): `y = rmsnorm(x) * w`, x and y
/// `[rows, cols]`, w `[cols]`, of `dtype` (`OMEGA_GPU_EW_DTYPE_F32` or `_BF16`: bf16 in and out, f32
/// arithmetic). Each `OmegaGpuMem` comes from `omega_gpu_session_alloc*` and is at least as long as its
/// operand (a shorter one is refused, `OMEGA_GPU_EW_ERR_SHAPE`, naming both; one that is not a live
/// buffer `_ARGS`). Takes the session lock itself, as every entry.
///
/// # Safety
/// - `x`, `w` and `y` are each NULL (refused) or point to a readable, aligned `OmegaGpuMem`.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuEwInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_rmsnorm_mem(
    dtype: u32,
    rows: u32,
    cols: u32,
    x: *const GpuMem,
    w: *const GpuMem,
    eps: f32,
    y: *const GpuMem,
    info: *mut OmegaGpuEwInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_rmsnorm_mem", OMEGA_GPU_EW_ERR_INTERNAL, || unsafe {
        let shape = Rows { rows, cols };
        let o = dtyped!(dtype, &[("y", y), ("x", x), ("w", w)], &[], |ew, s, _| {
            let (y, ins) = out_first(s);
            ew.rmsnorm(&ins[0], &ins[1], y, shape, eps)
        });
        finish(info, start, o)
    })
}

/// EXPERIMENTAL. The decoder layer's residual RMSNorm over device buffers: `h = x + h` written back into h
/// (bf16: rounded there, and the norm reads the rounded value), then `y = rmsnorm(h) * w`. x, h, y `[rows,
/// cols]`, w `[cols]`. Otherwise as `omega_gpu_rmsnorm_mem`.
///
/// # Safety
/// - `x`, `h`, `w` and `y` are each NULL (refused) or point to a readable, aligned `OmegaGpuMem`.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuEwInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_add_rmsnorm_mem(
    dtype: u32,
    rows: u32,
    cols: u32,
    x: *const GpuMem,
    h: *const GpuMem,
    w: *const GpuMem,
    eps: f32,
    y: *const GpuMem,
    info: *mut OmegaGpuEwInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_add_rmsnorm_mem", OMEGA_GPU_EW_ERR_INTERNAL, || unsafe {
        let shape = Rows { rows, cols };
        let o = dtyped!(dtype, &[("h", h), ("y", y), ("x", x), ("w", w)], &[], |ew, s, _| {
            let (h, y, ins) = two_out(s);
            ew.add_rmsnorm(&ins[0], h, &ins[1], y, shape, eps)
        });
        finish(info, start, o)
    })
}

/// EXPERIMENTAL. RoPE over device buffers: x and y `[tokens, heads, dim]` of `dtype`, the tables `cos` and
/// `sin` `[tokens, dim / 2]` f32 whatever the dtype (row t: the angles of token t's position, as
/// `omega_gpu_rope_f32` describes; every head of a token uses its row). The rotate_half pairing: element i
/// with element i + dim/2. With `w` not NULL, each head's row is first RMS-normalised over its dim values
/// with the weight `w` `[dim]` (of `dtype`) and `eps` (Qwen3's QK-norm: call it for q with q_norm's
/// weight, for k with k_norm's); with `w` NULL, `eps` is not read. dim even. Otherwise as
/// `omega_gpu_rmsnorm_mem`.
///
/// # Safety
/// - `x`, `cos`, `sin` and `y` are each NULL (refused) or point to a readable, aligned `OmegaGpuMem`; `w`
///   is NULL (no norm) or does.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuEwInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_rope_mem(
    dtype: u32,
    tokens: u32,
    heads: u32,
    dim: u32,
    x: *const GpuMem,
    w: *const GpuMem,
    eps: f32,
    cos: *const GpuMem,
    sin: *const GpuMem,
    y: *const GpuMem,
    info: *mut OmegaGpuEwInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_rope_mem", OMEGA_GPU_EW_ERR_INTERNAL, || unsafe {
        let shape = Heads { tokens, heads, dim };
        // The tables are f32 whatever the dtype.
        let tables = [("cos", cos), ("sin", sin)];
        let o = if w.is_null() {
            dtyped!(dtype, &[("y", y), ("x", x)], &tables, |ew, s, t| {
                let (y, ins) = out_first(s);
                ew.rope(&ins[0], &t[0], &t[1], y, shape)
            })
        } else {
            dtyped!(dtype, &[("y", y), ("x", x), ("w", w)], &tables, |ew, s, t| {
                let (y, ins) = out_first(s);
                ew.norm_rope(&ins[0], &ins[1], &t[0], &t[1], y, shape, eps)
            })
        };
        finish(info, start, o)
    })
}

/// EXPERIMENTAL. SwiGLU over device buffers, `y[r, c] = silu(g[r, c]) * u[r, c]` for `rows x cols`: with
/// `up` not NULL, `gate` and `up` are `[rows, cols]` each; with `up` NULL, `gate` is the fused gate+up
/// projection's output `[rows, 2 * cols]` (each row's `cols` gate values first, then its `cols` up
/// values) and y is `[rows, cols]`. Otherwise as `omega_gpu_rmsnorm_mem`.
///
/// # Safety
/// - `gate` and `y` are each NULL (refused) or point to a readable, aligned `OmegaGpuMem`; `up` is NULL
///   (the fused form) or does.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuEwInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_swiglu_mem(
    dtype: u32,
    rows: u32,
    cols: u32,
    gate: *const GpuMem,
    up: *const GpuMem,
    y: *const GpuMem,
    info: *mut OmegaGpuEwInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_swiglu_mem", OMEGA_GPU_EW_ERR_INTERNAL, || unsafe {
        let shape = Rows { rows, cols };
        let o = if up.is_null() {
            dtyped!(dtype, &[("y", y), ("gate", gate)], &[], |ew, s, _| {
                let (y, ins) = out_first(s);
                ew.swiglu_fused(&ins[0], y, shape)
            })
        } else {
            dtyped!(dtype, &[("y", y), ("gate", gate), ("up", up)], &[], |ew, s, _| {
                let (y, ins) = out_first(s);
                ew.swiglu(&ins[0], &ins[1], y, shape)
            })
        };
        finish(info, start, o)
    })
}

/// EXPERIMENTAL. The name of return code `rc` (`"OMEGA_GPU_EW_OK"`, `"OMEGA_GPU_EW_ERR_SHAPE"`, ...;
/// `"OMEGA_GPU_EW_ERR_UNKNOWN"` for a code no entry returns). A static string; no lock.
#[no_mangle]
pub extern "C" fn omega_gpu_elementwise_rc_name(rc: i32) -> *const c_char {
    let name: &'static core::ffi::CStr = match rc {
        OMEGA_GPU_EW_OK => c"OMEGA_GPU_EW_OK",
        OMEGA_GPU_EW_ERR_ARGS => c"OMEGA_GPU_EW_ERR_ARGS",
        OMEGA_GPU_EW_ERR_SHAPE => c"OMEGA_GPU_EW_ERR_SHAPE",
        OMEGA_GPU_EW_ERR_LOCK_HELD => c"OMEGA_GPU_EW_ERR_LOCK_HELD",
        OMEGA_GPU_EW_ERR_BLOCKED => c"OMEGA_GPU_EW_ERR_BLOCKED",
        OMEGA_GPU_EW_ERR_UNCERTAIN => c"OMEGA_GPU_EW_ERR_UNCERTAIN",
        OMEGA_GPU_EW_ERR_DEVICE => c"OMEGA_GPU_EW_ERR_DEVICE",
        OMEGA_GPU_EW_ERR_ALLOC => c"OMEGA_GPU_EW_ERR_ALLOC",
        OMEGA_GPU_EW_ERR_LOAD => c"OMEGA_GPU_EW_ERR_LOAD",
        OMEGA_GPU_EW_ERR_COPY => c"OMEGA_GPU_EW_ERR_COPY",
        OMEGA_GPU_EW_ERR_LAUNCH => c"OMEGA_GPU_EW_ERR_LAUNCH",
        OMEGA_GPU_EW_ERR_CANCELLED => c"OMEGA_GPU_EW_ERR_CANCELLED",
        OMEGA_GPU_EW_ERR_INTERNAL => c"OMEGA_GPU_EW_ERR_INTERNAL",
        _ => c"OMEGA_GPU_EW_ERR_UNKNOWN",
    };
    name.as_ptr()
}

/// EXPERIMENTAL. The text of the library's most recent failure, `{stage}: {cause}` ("" before any): one
/// process-wide buffer, overwritten by the next call of this function. A success leaves it.
#[no_mangle]
pub extern "C" fn omega_gpu_elementwise_last_error() -> *const c_char {
    guard("omega_gpu_elementwise_last_error", ptr::null(), || {
        let text = sync::lock(&LAST_ERROR).clone();
        LAST_ERROR_TEXT.publish(&text)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_distinct_name_and_the_info_is_120_bytes() {
        let name = |c: i32| {
            // SAFETY: the names are static NUL-terminated strings.
            unsafe { core::ffi::CStr::from_ptr(omega_gpu_elementwise_rc_name(c)) }.to_str().unwrap().to_owned()
        };
        let names: std::collections::BTreeSet<String> = (-12..=0).map(name).collect();
        assert_eq!(names.len(), 13);
        assert!(!names.contains("OMEGA_GPU_EW_ERR_UNKNOWN"));
        assert_eq!(size_of::<OmegaGpuEwInfo>(), 120);
        assert_eq!(core::mem::offset_of!(OmegaGpuEwInfo, device_ns), 32);
        assert_eq!(core::mem::offset_of!(OmegaGpuEwInfo, stage), 72);
        assert_eq!(core::mem::offset_of!(OmegaGpuEwInfo, reserved), 80);
    }
}
