//! `omega_gpu_matmul_api.h`: the matmul library's C entries (the contract's section 9.5, EXPERIMENTAL),
//! over [`crate::libs::matmul`].
//!
//! Design choices:
//!
//! 1. **A shell over the library.** Every product is the typed library's call; an entry checks its
//!    pointers, takes the session lock, opens the device when it is closed, runs the call in one scope and
//!    lets the lock go. The entries take the lock themselves and refuse a caller that holds it (LD-4: the
//!    lock is not recursive), so a C program calls them between, never inside, its own lock holdings.
//! 2. **What outlives a call is kept** ([`crate::Kept`]): the loaded module and the workspace
//!    ([`KeptMatmul`]), the staging buffers of the host-pointer entries (x and W go up, y comes down,
//!    through device-only buffers that grow to the largest call) and the resident tensors. A close of the
//!    device — the caller's, or [`omega_gpu_device_close`] — makes them stale: the next call loads again,
//!    and a tensor of the closed device is refused by name.
//! 3. **Who opened the device closes it.** An entry that found the device closed opens it and remembers
//!    so; `omega_gpu_device_close` frees the module, the workspace and the staging and closes the device if
//!    the library opened it. Tensors keep their device memory until `omega_gpu_tensor_free`: while any of
//!    the open device is alive the close waits, and the free of the last completes it (a tensor of an
//!    earlier open owns nothing: its memory went with that close).
//! 4. **Every failure is named**: a negative `OMEGA_GPU_MATMUL_ERR_*` ([`omega_gpu_matmul_rc_name`]), the
//!    text `{stage}: {cause}` as the library's last error ([`omega_gpu_matmul_last_error`]) and the
//!    session's, and the stage and code in the call's `OmegaGpuMatmulInfo`. An uncertain completion
//!    latches the process as any launch does: the call returns `OMEGA_GPU_MATMUL_ERR_UNCERTAIN`,
//!    `omega_gpu_matmul_is_blocked` returns 1 from then on, and every later call is refused
//!    (`OMEGA_GPU_MATMUL_ERR_BLOCKED`).

use core::ffi::{c_char, c_int};
use core::ptr;
use std::collections::BTreeMap;
use std::time::Instant;

use super::boundary::{guard, library_session_rc, Keys, LibrarySessionCodes, TextBuffer};
use crate::error::{Error, Stage};
use crate::libs::matmul::{
    self, AnyShape, DeviceSpan, Failed, GroupedShape, Info, KeptMatmul, Matmul, MatmulError, Operand, Path, Shape,
    ShapeError,
};
use crate::session::{runtime, GpuMem};
use crate::sync::{self, Mutex};
use crate::{Device, DeviceScalar, Gpu, Kept, Scope};

/// The most CTAs any launch of the library has, and the default CTA budget.
pub const OMEGA_GPU_MATMUL_MAX_CTAS: u32 = 1024;

/// Success.
pub const OMEGA_GPU_MATMUL_OK: i32 = 0;
/// A NULL or misaligned pointer, or an `OmegaGpuMem` that is not a live buffer of the open session (stage
/// `matmul args`).
pub const OMEGA_GPU_MATMUL_ERR_ARGS: i32 = -1;
/// A shape with a side of 0, one past what a buffer can hold, or one the buffers do not hold (stage
/// `matmul shape`).
pub const OMEGA_GPU_MATMUL_ERR_SHAPE: i32 = -2;
/// The caller holds the session lock, which the entries take themselves (stage `lock`, LD-4).
pub const OMEGA_GPU_MATMUL_ERR_LOCK_HELD: i32 = -3;
/// Refused: the process is latched after an uncertain completion (stage `matmul`).
pub const OMEGA_GPU_MATMUL_ERR_BLOCKED: i32 = -4;
/// This call's completion was uncertain: the process latched (stage `launch`).
pub const OMEGA_GPU_MATMUL_ERR_UNCERTAIN: i32 = -5;
/// No platform, or the device did not open (stage `platform` or `open`).
pub const OMEGA_GPU_MATMUL_ERR_DEVICE: i32 = -6;
/// A device allocation failed (stage `alloc`).
pub const OMEGA_GPU_MATMUL_ERR_ALLOC: i32 = -7;
/// The `matmul` module did not load (stage `load`).
pub const OMEGA_GPU_MATMUL_ERR_LOAD: i32 = -8;
/// Moving bytes between host and device failed (stage `write`, `read` or `sync`).
pub const OMEGA_GPU_MATMUL_ERR_COPY: i32 = -9;
/// A launch was refused or its kernel faulted; nothing is running (stage `launch arguments` or `launch`).
pub const OMEGA_GPU_MATMUL_ERR_LAUNCH: i32 = -10;
/// A cancel request stopped the call before its next launch was submitted (stage `launch`).
pub const OMEGA_GPU_MATMUL_ERR_CANCELLED: i32 = -11;
/// A tensor that is not live, of another element type, or of a device that was closed (stage
/// `matmul tensor`).
pub const OMEGA_GPU_MATMUL_ERR_TENSOR: i32 = -12;
/// A grouped product whose experts do not fit the CTA budget (stage `matmul plan`).
pub const OMEGA_GPU_MATMUL_ERR_PLAN: i32 = -13;
/// A panic inside the library (stage `internal`).
pub const OMEGA_GPU_MATMUL_ERR_INTERNAL: i32 = -14;

/// `OmegaGpuMatmulInfo.path`: nothing ran.
pub const OMEGA_GPU_MATMUL_PATH_NONE: u32 = 0;
/// The split-K GEMV (`omega_gemv_bf16_tn_m*`): bf16, M <= 64, K % 32 == 0.
pub const OMEGA_GPU_MATMUL_PATH_GEMV: u32 = 1;
/// The TMA GEMM (`omega_gemm_bf16_tn`, or its split-K entry with fewer tiles than SMs): bf16, K % 8 == 0.
pub const OMEGA_GPU_MATMUL_PATH_GEMM: u32 = 2;
/// The bf16 SIMT GEMM (`omega_gemm_bf16_simt_tn`): bf16 of any other K.
pub const OMEGA_GPU_MATMUL_PATH_SIMT_BF16: u32 = 3;
/// The f32 SIMT GEMM (`omega_gemm_f32_tn`): f32 FMA, no TF32.
pub const OMEGA_GPU_MATMUL_PATH_SIMT_F32: u32 = 4;
/// The grouped expert GEMM (`omega_moe_route`, `omega_moe_gemv_bf16_m*`).
pub const OMEGA_GPU_MATMUL_PATH_GROUPED: u32 = 5;
/// The skinny bf16 GEMM for M <= 64 (`omega_skinny_bf16_tn_m*`): W streamed through shared memory by
/// every SM, split over K, f32 or bf16 stored directly.
pub const OMEGA_GPU_MATMUL_PATH_SKINNY: u32 = 6;

/// `OmegaGpuMatmulInfo.flags`: the output is bf16 (the f32 product was converted).
pub const OMEGA_GPU_MATMUL_FLAG_BF16_OUT: u32 = 1;
/// `OmegaGpuMatmulInfo.flags`: W was a resident tensor.
pub const OMEGA_GPU_MATMUL_FLAG_RESIDENT: u32 = 2;
/// `OmegaGpuMatmulInfo.flags`: host-pointer operands, staged through the copy path.
pub const OMEGA_GPU_MATMUL_FLAG_HOST_POINTERS: u32 = 4;
/// `OmegaGpuMatmulInfo.flags`: this call opened the device.
pub const OMEGA_GPU_MATMUL_FLAG_OPENED: u32 = 8;

/// `OmegaGpuMatmulInfo.stage`: no failure.
pub const OMEGA_GPU_MATMUL_STAGE_NONE: u32 = 0;
/// `matmul args`.
pub const OMEGA_GPU_MATMUL_STAGE_ARGS: u32 = 1;
/// `matmul shape`.
pub const OMEGA_GPU_MATMUL_STAGE_SHAPE: u32 = 2;
/// `matmul plan`.
pub const OMEGA_GPU_MATMUL_STAGE_PLAN: u32 = 3;
/// `matmul tensor`.
pub const OMEGA_GPU_MATMUL_STAGE_TENSOR: u32 = 4;
/// `lock`.
pub const OMEGA_GPU_MATMUL_STAGE_LOCK: u32 = 5;
/// `matmul` (refused after a latch).
pub const OMEGA_GPU_MATMUL_STAGE_MATMUL: u32 = 6;
/// `platform`.
pub const OMEGA_GPU_MATMUL_STAGE_PLATFORM: u32 = 7;
/// `open`.
pub const OMEGA_GPU_MATMUL_STAGE_OPEN: u32 = 8;
/// `alloc`.
pub const OMEGA_GPU_MATMUL_STAGE_ALLOC: u32 = 9;
/// `load`.
pub const OMEGA_GPU_MATMUL_STAGE_LOAD: u32 = 10;
/// `write` (or `sync`).
pub const OMEGA_GPU_MATMUL_STAGE_WRITE: u32 = 11;
/// `read`.
pub const OMEGA_GPU_MATMUL_STAGE_READ: u32 = 12;
/// `launch arguments`.
pub const OMEGA_GPU_MATMUL_STAGE_LAUNCH_ARGUMENTS: u32 = 13;
/// `launch`.
pub const OMEGA_GPU_MATMUL_STAGE_LAUNCH: u32 = 14;
/// Any other stage (the text says which).
pub const OMEGA_GPU_MATMUL_STAGE_OTHER: u32 = 15;

const _: () = {
    assert!(OMEGA_GPU_MATMUL_MAX_CTAS == matmul::MAX_CTAS);
    assert!(OMEGA_GPU_MATMUL_PATH_GEMV == Path::Gemv as u32);
    assert!(OMEGA_GPU_MATMUL_PATH_GEMM == Path::Gemm as u32);
    assert!(OMEGA_GPU_MATMUL_PATH_SIMT_BF16 == Path::SimtBf16 as u32);
    assert!(OMEGA_GPU_MATMUL_PATH_SIMT_F32 == Path::SimtF32 as u32);
    assert!(OMEGA_GPU_MATMUL_PATH_GROUPED == Path::Grouped as u32);
    assert!(OMEGA_GPU_MATMUL_PATH_SKINNY == Path::Skinny as u32);
};

/// EXPERIMENTAL. What a matmul call ran and what it cost: 160 bytes, filled on success and on failure
/// (when the pointer is not NULL). Every product is `y = x . W^T` with row-major operands: x is
/// `[M, K]`, W is `[N, K]` (a linear layer's weight as model files store it), y is `[M, N]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OmegaGpuMatmulInfo {
    /// Which kernels ran: `OMEGA_GPU_MATMUL_PATH_*` (`_NONE` when the call failed before planning).
    pub path: u32,
    /// `OMEGA_GPU_MATMUL_FLAG_*`.
    pub flags: u32,
    /// Rows of x and y (grouped: the output's rows, one per choice).
    pub m: u32,
    /// Columns of y.
    pub n: u32,
    /// Columns of x and W.
    pub k: u32,
    /// Launches.
    pub launches: u32,
    /// CTAs of the largest launch: at most `cta_budget`.
    pub ctas: u32,
    /// The CTA budget the call ran under.
    pub cta_budget: u32,
    /// CTAs of every launch together.
    pub total_ctas: u64,
    /// Submit to completion of every launch, summed, platform-clock ns (virtual on the simulator).
    pub device_ns: u64,
    /// Wall time of the whole call, ns: the lock, the staging copies and the launches.
    pub host_ns: u64,
    /// Bytes written from the host to the device (staged x and W, the workspace's descriptors and tickets).
    pub h2d_bytes: u64,
    /// Bytes read back to the host (the staged y).
    pub d2h_bytes: u64,
    /// Bytes of W the kernels read (grouped: of the most experts the choices can touch).
    pub weight_bytes: u64,
    /// The K split of the GEMV or of the split-K GEMM (1 otherwise).
    pub split: u32,
    /// The failing stage: `OMEGA_GPU_MATMUL_STAGE_*` (`_NONE` on success).
    pub stage: u32,
    /// The call's return code.
    pub rc: i32,
    /// Grouped: experts (0 for a dense product).
    pub experts: u32,
    /// Grouped: choices per token.
    pub top_k: u32,
    /// Grouped: tokens.
    pub tokens: u32,
    /// Zero; room for later fields.
    pub reserved: [u32; 14],
}

static_assertions::assert_eq_size!(OmegaGpuMatmulInfo, [u8; 160]);

/// EXPERIMENTAL. A weight matrix resident in device memory, opaque to C: create it with
/// `omega_gpu_tensor_upload_bf16` or `_f32`, release it with `omega_gpu_tensor_free`. The pointer is a key
/// into the library's list of live tensors, never dereferenced.
pub struct OmegaGpuTensor {
    _opaque: [u8; 0],
}

/// A tensor's device memory, by element type.
enum TensorData {
    Bf16(Kept<Device<u16>>),
    F32(Kept<Device<f32>>),
}

struct Tensor {
    rows: u32,
    cols: u32,
    data: TensorData,
}

impl TensorData {
    fn is_current(&self) -> bool {
        match self {
            TensorData::Bf16(k) => k.is_current(),
            TensorData::F32(k) => k.is_current(),
        }
    }

    fn elem(&self) -> &'static str {
        match self {
            TensorData::Bf16(_) => "bf16",
            TensorData::F32(_) => "f32",
        }
    }
}

/// The host-pointer entries' staging buffers.
#[derive(Default)]
struct Staging {
    x16: Option<Kept<Device<u16>>>,
    w16: Option<Kept<Device<u16>>>,
    x32: Option<Kept<Device<f32>>>,
    w32: Option<Kept<Device<f32>>>,
    y: Option<Kept<Device<f32>>>,
}

impl Staging {
    const fn new() -> Self {
        Staging { x16: None, w16: None, x32: None, w32: None, y: None }
    }
}

/// What the library keeps between calls.
struct Library {
    /// The library opened the device: `omega_gpu_device_close` closes it.
    opened: bool,
    /// `omega_gpu_device_close` found tensors alive: the last `omega_gpu_tensor_free` closes the device.
    close_pending: bool,
    matmul: Option<KeptMatmul>,
    staging: Staging,
    keys: Keys,
    tensors: BTreeMap<usize, Tensor>,
}

static LIBRARY: Mutex<Library> = Mutex::new(Library {
    opened: false,
    close_pending: false,
    matmul: None,
    staging: Staging::new(),
    keys: Keys::new(),
    tensors: BTreeMap::new(),
});

/// The library's last failure text, and the buffer `omega_gpu_matmul_last_error` points into.
static LAST_ERROR: Mutex<String> = Mutex::new(String::new());
static LAST_ERROR_TEXT: TextBuffer = TextBuffer::new();

/// The LD-4 refusal of a caller that holds the lock.
pub(super) const LOCK_HELD: &str =
    "the matmul library's entries take the session lock themselves: call them without it (LD-4)";

/// An entry's own failures, before or around the library's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum EntryError {
    /// A NULL pointer argument.
    #[error("matmul args: {0} is NULL")]
    Null(&'static str),
    /// A pointer not aligned to its elements.
    #[error("matmul args: {what} ({addr:#x}) is not aligned to its {align}-byte elements")]
    Misaligned { what: &'static str, addr: usize, align: usize },
    /// A pointer that is not a live tensor.
    #[error("matmul tensor: {0:#x} is not a live tensor (never uploaded, or freed already)")]
    UnknownTensor(usize),
    /// A tensor whose device was closed.
    #[error("matmul tensor: the tensor's device was closed since it was uploaded, and its memory went with the close")]
    TensorClosed,
    /// A tensor of the other element type.
    #[error("matmul tensor: the tensor holds {has} elements, the entry takes {wants}")]
    TensorType { has: &'static str, wants: &'static str },
    /// The library's failure.
    #[error(transparent)]
    Matmul(#[from] MatmulError),
    /// A session failure around the call (the lock, the latch, the open, a staging copy).
    #[error(transparent)]
    Session(#[from] Error),
}

impl EntryError {
    fn session(&self) -> Option<&Error> {
        match self {
            EntryError::Session(e) | EntryError::Matmul(MatmulError::Device(e)) => Some(e),
            _ => None,
        }
    }

    fn stage(&self) -> Stage {
        match self {
            EntryError::Null(_) | EntryError::Misaligned { .. } => Stage::MatmulArgs,
            EntryError::UnknownTensor(_) | EntryError::TensorClosed | EntryError::TensorType { .. } => {
                Stage::MatmulTensor
            }
            EntryError::Matmul(e) => e.stage(),
            EntryError::Session(e) => e.stage(),
        }
    }

    fn rc(&self) -> i32 {
        match self {
            EntryError::Null(_) | EntryError::Misaligned { .. } => OMEGA_GPU_MATMUL_ERR_ARGS,
            EntryError::UnknownTensor(_) | EntryError::TensorClosed | EntryError::TensorType { .. } => {
                OMEGA_GPU_MATMUL_ERR_TENSOR
            }
            EntryError::Matmul(MatmulError::Shape(_)) => OMEGA_GPU_MATMUL_ERR_SHAPE,
            EntryError::Matmul(MatmulError::Plan(_) | MatmulError::Tma { .. }) => OMEGA_GPU_MATMUL_ERR_PLAN,
            EntryError::Matmul(MatmulError::List(_)) => OMEGA_GPU_MATMUL_ERR_LAUNCH,
            _ => session_rc(self.session().expect("the other kinds are matched above")),
        }
    }
}

/// The session errors' codes of this library.
const SESSION_CODES: LibrarySessionCodes = LibrarySessionCodes {
    args_stage: Stage::MatmulArgs,
    uncertain: OMEGA_GPU_MATMUL_ERR_UNCERTAIN,
    lock_held: OMEGA_GPU_MATMUL_ERR_LOCK_HELD,
    blocked: OMEGA_GPU_MATMUL_ERR_BLOCKED,
    cancelled: OMEGA_GPU_MATMUL_ERR_CANCELLED,
    device: OMEGA_GPU_MATMUL_ERR_DEVICE,
    args: OMEGA_GPU_MATMUL_ERR_ARGS,
    alloc: OMEGA_GPU_MATMUL_ERR_ALLOC,
    load: OMEGA_GPU_MATMUL_ERR_LOAD,
    copy: OMEGA_GPU_MATMUL_ERR_COPY,
    launch: OMEGA_GPU_MATMUL_ERR_LAUNCH,
    internal: OMEGA_GPU_MATMUL_ERR_INTERNAL,
};

fn session_rc(e: &Error) -> i32 {
    library_session_rc(e, &SESSION_CODES)
}

/// `OMEGA_GPU_MATMUL_STAGE_*` of `stage`.
fn stage_code(stage: Stage) -> u32 {
    match stage {
        Stage::MatmulArgs => OMEGA_GPU_MATMUL_STAGE_ARGS,
        Stage::MatmulShape => OMEGA_GPU_MATMUL_STAGE_SHAPE,
        Stage::MatmulPlan => OMEGA_GPU_MATMUL_STAGE_PLAN,
        Stage::MatmulTensor => OMEGA_GPU_MATMUL_STAGE_TENSOR,
        Stage::Lock => OMEGA_GPU_MATMUL_STAGE_LOCK,
        Stage::Matmul => OMEGA_GPU_MATMUL_STAGE_MATMUL,
        Stage::Platform => OMEGA_GPU_MATMUL_STAGE_PLATFORM,
        Stage::Open => OMEGA_GPU_MATMUL_STAGE_OPEN,
        Stage::Alloc => OMEGA_GPU_MATMUL_STAGE_ALLOC,
        Stage::Load => OMEGA_GPU_MATMUL_STAGE_LOAD,
        Stage::Write | Stage::Sync => OMEGA_GPU_MATMUL_STAGE_WRITE,
        Stage::Read => OMEGA_GPU_MATMUL_STAGE_READ,
        Stage::LaunchArguments => OMEGA_GPU_MATMUL_STAGE_LAUNCH_ARGUMENTS,
        Stage::Launch => OMEGA_GPU_MATMUL_STAGE_LAUNCH,
        _ => OMEGA_GPU_MATMUL_STAGE_OTHER,
    }
}

/// Records `text` as the library's last error and the session's.
pub(super) fn record(text: &dyn std::fmt::Display) {
    let s = text.to_string();
    super::boundary::record(&s);
    *sync::lock(&LAST_ERROR) = s;
}

/// The C form of `info`.
fn c_info(info: &Info, flags: u32) -> OmegaGpuMatmulInfo {
    OmegaGpuMatmulInfo {
        path: info.path.map_or(OMEGA_GPU_MATMUL_PATH_NONE, |p| p as u32),
        flags: flags | if info.bf16_out { OMEGA_GPU_MATMUL_FLAG_BF16_OUT } else { 0 },
        m: info.m,
        n: info.n,
        k: info.k,
        launches: info.launches,
        ctas: info.ctas,
        cta_budget: info.cta_budget,
        total_ctas: info.total_ctas,
        device_ns: info.device_ns,
        host_ns: info.host_ns,
        h2d_bytes: info.h2d_bytes,
        d2h_bytes: info.d2h_bytes,
        weight_bytes: info.weight_bytes,
        split: info.split,
        stage: info.stage.map_or(OMEGA_GPU_MATMUL_STAGE_NONE, stage_code),
        rc: OMEGA_GPU_MATMUL_OK,
        experts: info.experts,
        top_k: info.top_k,
        tokens: info.tokens,
        reserved: [0; 14],
    }
}

/// What one entry's call produced: its info (as far as it got) and its outcome.
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

/// Finishes an entry: the info written (when `out` is not NULL), a failure recorded, the return code.
///
/// # Safety
/// - `out` is NULL or points to a writable, aligned `OmegaGpuMatmulInfo`.
unsafe fn finish(out: *mut OmegaGpuMatmulInfo, start: Instant, o: Outcome) -> c_int {
    let mut info = o.info;
    info.host_ns = start.elapsed().as_nanos() as u64;
    let rc = match &o.result {
        Ok(()) => OMEGA_GPU_MATMUL_OK,
        Err(e) => {
            record(e);
            info.stage = Some(e.stage());
            e.rc()
        }
    };
    // SAFETY: by the caller's promise `out` is NULL or points to a writable OmegaGpuMatmulInfo.
    if let Some(out) = unsafe { out.as_mut() } {
        *out = OmegaGpuMatmulInfo { rc, ..c_info(&info, o.flags) };
    }
    rc
}

/// Runs `body` in a scope of the open device, the session lock taken here and the device opened when it
/// was closed; refused when the caller holds the lock (LD-4) or the process is latched. `opened` tells
/// whether this call opened the device.
fn with_device(
    info: Info,
    flags: u32,
    body: impl for<'s> FnOnce(&mut Library, &'s Scope<'s>, Gpu<'s>, Info, u32) -> Outcome,
) -> Outcome {
    let rt = runtime();
    if rt.holds_lock() {
        return Outcome::failed(info, flags, Error::Lock(LOCK_HELD));
    }
    if rt.is_blocked() {
        return Outcome::failed(info, flags, Error::Latched(Stage::Matmul));
    }
    let lock = crate::lock();
    let was_open = lock.is_open();
    let dev = match lock.open() {
        Ok(d) => d,
        Err(e) => return Outcome::failed(info, flags, e.error),
    };
    let mut lib = sync::lock(&LIBRARY);
    let flags = if was_open {
        flags
    } else {
        lib.opened = true;
        lib.close_pending = false;
        flags | OMEGA_GPU_MATMUL_FLAG_OPENED
    };
    dev.scope(|s, gpu| body(&mut lib, s, gpu, info, flags)).value()
}

/// `n` elements of `T` at `p`, or why not (NULL, misaligned).
///
/// # Safety
/// - `p` is NULL (refused) or points to `n` readable elements of `T` that stay valid and unchanged during
///   the call.
unsafe fn host_in<'a, T>(what: &'static str, p: *const T, n: usize) -> Result<&'a [T], EntryError> {
    if p.is_null() {
        return Err(EntryError::Null(what));
    }
    if !p.is_aligned() {
        return Err(EntryError::Misaligned { what, addr: p.addr(), align: align_of::<T>() });
    }
    // SAFETY: non-null and aligned (checked); `n` readable elements by the caller's promise.
    Ok(unsafe { core::slice::from_raw_parts(p, n) })
}

/// `n` writable elements of `T` at `p`, or why not.
///
/// # Safety
/// - `p` is NULL (refused) or points to `n` writable elements of `T` that nothing else reads or writes
///   during the call.
unsafe fn host_out<'a, T>(what: &'static str, p: *mut T, n: usize) -> Result<&'a mut [T], EntryError> {
    if p.is_null() {
        return Err(EntryError::Null(what));
    }
    if !p.is_aligned() {
        return Err(EntryError::Misaligned { what, addr: p.addr(), align: align_of::<T>() });
    }
    // SAFETY: non-null and aligned (checked); `n` writable elements, not aliased, by the caller's promise.
    Ok(unsafe { core::slice::from_raw_parts_mut(p, n) })
}

/// Elements of each operand of a dense product, or the shape's refusal (a side of 0, or an operand past
/// what a buffer can hold).
fn dense_lengths(shape: Shape, elem: u64) -> Result<[usize; 3], MatmulError> {
    let any = AnyShape::Dense(shape);
    if shape.m == 0 || shape.n == 0 || shape.k == 0 {
        return Err(ShapeError::ZeroSide { shape: any }.into());
    }
    let mut out = [0usize; 3];
    for (i, (operand, bytes)) in [(Operand::X, elem), (Operand::W, elem), (Operand::Y, 4)].into_iter().enumerate() {
        let dims = operand.dims(any);
        let n = dims.elements().filter(|n| n.checked_mul(bytes).is_some_and(|b| b <= isize::MAX as u64));
        out[i] = n.and_then(|n| usize::try_from(n).ok()).ok_or(ShapeError::Overflow { shape: any, operand, dims })?;
    }
    Ok(out)
}

/// A staging buffer of at least `len` elements of the device open of now (allocated again otherwise).
pub(super) fn staged<'s: 'a, 'a, T: DeviceScalar>(
    scope: &'s Scope<'s>,
    slot: &'a mut Option<Kept<Device<T>>>,
    len: usize,
) -> Result<&'a mut crate::Mem<'static, Device<T>>, Error> {
    let fits = slot.as_ref().is_some_and(|k| k.is_current() && k.len() >= len);
    if !fits {
        *slot = None;
        *slot = Some(scope.keep(scope.alloc_device::<T>(len.max(1))?));
    }
    slot.as_mut().expect("filled above").get_mut(scope)
}

/// The library handle for this scope, its kept one resumed (or the module loaded again).
fn handle<'s>(lib: &mut Library, s: &'s Scope<'s>) -> Result<Matmul<'s>, MatmulError> {
    Matmul::resume(s, lib.matmul.take())
}

/// A library call's result as an outcome, with the host-side bytes added to its info.
fn outcome(r: Result<Info, Failed<'_>>, flags: u32, h2d: u64, d2h: u64) -> Outcome {
    match r {
        Ok(mut info) => {
            info.h2d_bytes += h2d;
            info.d2h_bytes += d2h;
            Outcome { info, flags, result: Ok(()) }
        }
        Err(f) => {
            let mut info = *f.info;
            info.h2d_bytes += h2d;
            Outcome { info, flags, result: Err(f.error.into()) }
        }
    }
}

/// The staging slots of x, W and y.
type Slots<'a, T> =
    (&'a mut Option<Kept<Device<T>>>, &'a mut Option<Kept<Device<T>>>, &'a mut Option<Kept<Device<f32>>>);

/// The element type of a host-pointer or resident entry.
trait HostElem: DeviceScalar {
    const NAME: &'static str;
    /// The staging slots of x, W and y.
    fn slots(st: &mut Staging) -> Slots<'_, Self>;
    /// The tensor's buffer, when it holds this type.
    fn tensor(d: &TensorData) -> Option<&Kept<Device<Self>>>;
    fn wrap(k: Kept<Device<Self>>) -> TensorData;
    /// The library's product of this type.
    fn product<'s>(
        mm: &Matmul<'s>,
        gpu: Gpu<'s>,
        x: &crate::Mem<'_, Device<Self>>,
        w: &crate::Mem<'_, Device<Self>>,
        y: &mut crate::Mem<'_, Device<f32>>,
        shape: Shape,
    ) -> Result<Info, Failed<'s>>;
}

impl HostElem for u16 {
    const NAME: &'static str = "bf16";
    fn slots(st: &mut Staging) -> Slots<'_, u16> {
        (&mut st.x16, &mut st.w16, &mut st.y)
    }
    fn tensor(d: &TensorData) -> Option<&Kept<Device<u16>>> {
        match d {
            TensorData::Bf16(k) => Some(k),
            TensorData::F32(_) => None,
        }
    }
    fn wrap(k: Kept<Device<u16>>) -> TensorData {
        TensorData::Bf16(k)
    }
    fn product<'s>(
        mm: &Matmul<'s>,
        gpu: Gpu<'s>,
        x: &crate::Mem<'_, Device<u16>>,
        w: &crate::Mem<'_, Device<u16>>,
        y: &mut crate::Mem<'_, Device<f32>>,
        shape: Shape,
    ) -> Result<Info, Failed<'s>> {
        mm.bf16(gpu, x, w, y, shape).map(|d| d.info)
    }
}

impl HostElem for f32 {
    const NAME: &'static str = "f32";
    fn slots(st: &mut Staging) -> Slots<'_, f32> {
        (&mut st.x32, &mut st.w32, &mut st.y)
    }
    fn tensor(d: &TensorData) -> Option<&Kept<Device<f32>>> {
        match d {
            TensorData::F32(k) => Some(k),
            TensorData::Bf16(_) => None,
        }
    }
    fn wrap(k: Kept<Device<f32>>) -> TensorData {
        TensorData::F32(k)
    }
    fn product<'s>(
        mm: &Matmul<'s>,
        gpu: Gpu<'s>,
        x: &crate::Mem<'_, Device<f32>>,
        w: &crate::Mem<'_, Device<f32>>,
        y: &mut crate::Mem<'_, Device<f32>>,
        shape: Shape,
    ) -> Result<Info, Failed<'s>> {
        mm.f32(gpu, x, w, y, shape).map(|d| d.info)
    }
}

/// Where W comes from: the host (staged with x) or a resident tensor.
enum Weights<'a, T> {
    Host(&'a [T]),
    Tensor(usize),
}

/// The host-pointer and resident entries: x (and W from the host) staged up, the product, y down.
fn host_product<T: HostElem>(shape: Shape, x: &[T], w: Weights<'_, T>, y: &mut [f32], flags: u32) -> Outcome {
    let info = Info { m: shape.m, n: shape.n, k: shape.k, cta_budget: matmul::cta_budget(), ..Info::default() };
    with_device(info, flags, |lib, s, gpu, info, flags| {
        let mm = match handle(lib, s) {
            Ok(m) => m,
            Err(e) => return Outcome::failed(info, flags, e),
        };
        let Library { staging, tensors, matmul, .. } = lib;
        let (x_slot, w_slot, y_slot) = T::slots(staging);
        let (h2d, d2h) = (size_of_val(x) as u64, size_of_val(y) as u64);
        let run = || -> Result<Outcome, EntryError> {
            let xs = staged(s, x_slot, x.len())?;
            xs.write(x)?;
            let (ws, w_up): (&crate::Mem<'_, Device<T>>, u64) = match w {
                Weights::Host(w) => {
                    let ws = staged(s, w_slot, w.len())?;
                    ws.write(w)?;
                    (ws, size_of_val(w) as u64)
                }
                Weights::Tensor(key) => {
                    let t = tensors.get(&key).ok_or(EntryError::UnknownTensor(key))?;
                    if !t.data.is_current() {
                        return Err(EntryError::TensorClosed);
                    }
                    let k = T::tensor(&t.data).ok_or(EntryError::TensorType { has: t.data.elem(), wants: T::NAME })?;
                    (k.get(s)?, 0)
                }
            };
            let ys = staged(s, y_slot, y.len())?;
            let r = T::product(&mm, gpu, xs, ws, ys, shape);
            let ok = r.is_ok();
            let mut o = outcome(r, flags, h2d + w_up, 0);
            if ok {
                ys.read(y)?;
                o.info.d2h_bytes += d2h;
            }
            Ok(o)
        };
        let o = run().unwrap_or_else(|e| Outcome::failed(info, flags, e));
        *matmul = Some(mm.keep());
        o
    })
}

/// The serving reservation's part of the library (`src/ffi/serving.rs`): the bf16 host-pointer entry's
/// staging grown to `[m, k]`, `[n, k]` and `[m, n]` and the library handle made (its module loaded), so
/// a product within those sides allocates nothing. Returns the entries' code; a failure is recorded.
pub(super) fn reserve_bf16_staging(m: u32, n: u32, k: u32) -> c_int {
    let start = Instant::now();
    let info = Info { m, n, k, cta_budget: matmul::cta_budget(), ..Info::default() };
    let o = with_device(info, OMEGA_GPU_MATMUL_FLAG_HOST_POINTERS, |lib, s, _gpu, info, flags| {
        let mut run = || -> Result<(), EntryError> {
            let mm = handle(lib, s)?;
            lib.matmul = Some(mm.keep());
            // Sides are u32: each product fits the 64-bit usize Omega runs on.
            let len = |a: u32, b: u32| a as usize * b as usize;
            staged(s, &mut lib.staging.x16, len(m, k))?;
            staged(s, &mut lib.staging.w16, len(n, k))?;
            staged(s, &mut lib.staging.y, len(m, n))?;
            Ok(())
        };
        Outcome { info, flags, result: run() }
    });
    // SAFETY: NULL: no info is written.
    unsafe { finish(ptr::null_mut(), start, o) }
}

/// A dense host-pointer entry's checks, then its product.
///
/// # Safety
/// - As the entries' own (`x`, `w`: `M*K` and `N*K` readable elements, `y`: `M*N` writable ones, or NULL).
unsafe fn dense_entry<T: HostElem>(m: u32, n: u32, k: u32, x: *const T, w: *const T, y: *mut f32) -> Outcome {
    let shape = Shape::new(m, n, k);
    let info = Info { m, n, k, cta_budget: matmul::cta_budget(), ..Info::default() };
    let flags = OMEGA_GPU_MATMUL_FLAG_HOST_POINTERS;
    let [nx, nw, ny] = match dense_lengths(shape, size_of::<T>() as u64) {
        Ok(l) => l,
        Err(e) => return Outcome::failed(info, flags, e),
    };
    // SAFETY: the caller's promises, with the lengths of the checked shape.
    let slices = unsafe { (host_in("x", x, nx), host_in("w", w, nw), host_out("y", y, ny)) };
    match slices {
        (Ok(x), Ok(w), Ok(y)) => host_product(shape, x, Weights::Host(w), y, flags),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => Outcome::failed(info, flags, e),
    }
}

/// EXPERIMENTAL. `y[M, N] = x[M, K] . W[N, K]^T` with bf16 operands (bit patterns, `uint16_t`) and f32
/// accumulation into f32, every array row-major and W as a linear layer stores its weight. Host pointers:
/// x and W are copied to the device, y back (the copy path). Any M, N, K of at least 1. Takes the session
/// lock itself (call it WITHOUT the lock: a caller that holds it gets `OMEGA_GPU_MATMUL_ERR_LOCK_HELD`),
/// opens the device when it is closed (`omega_gpu_device_close` closes it again). `info` may be NULL.
/// Returns `OMEGA_GPU_MATMUL_OK` (0) or a negative `OMEGA_GPU_MATMUL_ERR_*` with the stage in
/// `omega_gpu_matmul_last_error()`: NULL or misaligned pointers `_ARGS`, a side of 0 or past a buffer
/// `_SHAPE`.
///
/// # Safety
/// - `x` is NULL (refused) or points to `M*K` readable, aligned `uint16_t`.
/// - `w` is NULL (refused) or points to `N*K` readable, aligned `uint16_t`.
/// - `y` is NULL (refused) or points to `M*N` writable, aligned `float` that nothing else touches during
///   the call.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuMatmulInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_matmul_bf16(
    m: u32,
    n: u32,
    k: u32,
    x: *const u16,
    w: *const u16,
    y: *mut f32,
    info: *mut OmegaGpuMatmulInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_matmul_bf16", OMEGA_GPU_MATMUL_ERR_INTERNAL, || unsafe {
        finish(info, start, dense_entry(m, n, k, x, w, y))
    })
}

/// EXPERIMENTAL. `y = x . W^T` in f32 (f32 FMA, no TF32), host pointers, as `omega_gpu_matmul_bf16`.
///
/// # Safety
/// - `x` is NULL (refused) or points to `M*K` readable, aligned `float`.
/// - `w` is NULL (refused) or points to `N*K` readable, aligned `float`.
/// - `y` is NULL (refused) or points to `M*N` writable, aligned `float` that nothing else touches during
///   the call.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuMatmulInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_matmul_f32(
    m: u32,
    n: u32,
    k: u32,
    x: *const f32,
    w: *const f32,
    y: *mut f32,
    info: *mut OmegaGpuMatmulInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_matmul_f32", OMEGA_GPU_MATMUL_ERR_INTERNAL, || unsafe {
        finish(info, start, dense_entry(m, n, k, x, w, y))
    })
}

/// The tensor `t` names: its key, or the refusal of NULL.
fn tensor_key(t: *const OmegaGpuTensor) -> Result<usize, EntryError> {
    if t.is_null() {
        return Err(EntryError::Null("tensor"));
    }
    Ok(t.addr())
}

/// A resident entry's checks, then its product.
///
/// # Safety
/// - As the entries' own.
unsafe fn resident_entry<T: HostElem>(m: u32, x: *const T, t: *const OmegaGpuTensor, y: *mut f32) -> Outcome {
    let flags = OMEGA_GPU_MATMUL_FLAG_HOST_POINTERS | OMEGA_GPU_MATMUL_FLAG_RESIDENT;
    let base = Info { m, cta_budget: matmul::cta_budget(), ..Info::default() };
    let key = match tensor_key(t) {
        Ok(k) => k,
        Err(e) => return Outcome::failed(base, flags, e),
    };
    let found = sync::lock(&LIBRARY).tensors.get(&key).map(|t| (t.rows, t.cols));
    let Some((n, k)) = found else { return Outcome::failed(base, flags, EntryError::UnknownTensor(key)) };
    let shape = Shape::new(m, n, k);
    let info = Info { n, k, ..base };
    let [nx, _, ny] = match dense_lengths(shape, size_of::<T>() as u64) {
        Ok(l) => l,
        Err(e) => return Outcome::failed(info, flags, e),
    };
    // SAFETY: the caller's promises, with the lengths of the checked shape.
    let slices = unsafe { (host_in("x", x, nx), host_out("y", y, ny)) };
    match slices {
        // The tensor is looked up again under the lock: a free on another thread in between is refused.
        (Ok(x), Ok(y)) => host_product(shape, x, Weights::Tensor(key), y, flags),
        (Err(e), _) | (_, Err(e)) => Outcome::failed(info, flags, e),
    }
}

/// EXPERIMENTAL. `y[M, N] = x[M, K] . W^T` with W the resident bf16 tensor `t` (`[N, K]` = its rows and
/// columns): only x goes up and y comes down. Otherwise as `omega_gpu_matmul_bf16`; a tensor that is not
/// live, holds f32, or whose device was closed since its upload is refused with
/// `OMEGA_GPU_MATMUL_ERR_TENSOR`.
///
/// # Safety
/// - `x` is NULL (refused) or points to `M*K` readable, aligned `uint16_t`.
/// - `y` is NULL (refused) or points to `M*N` writable, aligned `float` that nothing else touches during
///   the call.
/// - `t` is NULL (refused) or any pointer (one that is not a live tensor is refused by name).
/// - `info` is NULL or points to a writable, aligned `OmegaGpuMatmulInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_matmul_resident_bf16(
    m: u32,
    x: *const u16,
    t: *const OmegaGpuTensor,
    y: *mut f32,
    info: *mut OmegaGpuMatmulInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_matmul_resident_bf16", OMEGA_GPU_MATMUL_ERR_INTERNAL, || unsafe {
        finish(info, start, resident_entry(m, x, t, y))
    })
}

/// EXPERIMENTAL. As `omega_gpu_matmul_resident_bf16` with f32 x and an f32 tensor.
///
/// # Safety
/// - `x` is NULL (refused) or points to `M*K` readable, aligned `float`.
/// - `y` is NULL (refused) or points to `M*N` writable, aligned `float` that nothing else touches during
///   the call.
/// - `t` is NULL (refused) or any pointer (one that is not a live tensor is refused by name).
/// - `info` is NULL or points to a writable, aligned `OmegaGpuMatmulInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_matmul_resident_f32(
    m: u32,
    x: *const f32,
    t: *const OmegaGpuTensor,
    y: *mut f32,
    info: *mut OmegaGpuMatmulInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_matmul_resident_f32", OMEGA_GPU_MATMUL_ERR_INTERNAL, || unsafe {
        finish(info, start, resident_entry(m, x, t, y))
    })
}

/// Uploads a `[rows, cols]` tensor and writes its handle to `*out`.
///
/// # Safety
/// - As the upload entries' own.
unsafe fn upload<T: HostElem>(rows: u32, cols: u32, data: *const T, out: *mut *mut OmegaGpuTensor) -> c_int {
    if out.is_null() {
        record(&EntryError::Null("out"));
        return OMEGA_GPU_MATMUL_ERR_ARGS;
    }
    // SAFETY: non-null (checked) and, by the caller's promise, a writable `OmegaGpuTensor *`.
    unsafe { out.write(ptr::null_mut()) };
    let shape = Shape::new(1, rows, cols);
    let len = match dense_lengths(shape, size_of::<T>() as u64) {
        Ok([_, w, _]) => w,
        Err(e) => return fail_rc(e.into()),
    };
    // SAFETY: the caller's promise, with the length of the checked shape.
    let data = match unsafe { host_in("data", data, len) } {
        Ok(d) => d,
        Err(e) => return fail_rc(e),
    };
    let o = with_device(Info::default(), 0, |lib, s, _gpu, info, flags| {
        let placed = s.alloc_device_from(data).map(|m| s.keep(m));
        match placed {
            Ok(kept) => {
                let key = lib.keys.take();
                lib.tensors.insert(key, Tensor { rows, cols, data: T::wrap(kept) });
                // SAFETY: as above.
                unsafe { out.write(ptr::without_provenance_mut(key)) };
                Outcome { info, flags, result: Ok(()) }
            }
            Err(e) => Outcome::failed(info, flags, e),
        }
    });
    match o.result {
        Ok(()) => OMEGA_GPU_MATMUL_OK,
        Err(e) => fail_rc(e),
    }
}

/// Records `e` and returns its code.
fn fail_rc(e: EntryError) -> c_int {
    record(&e);
    e.rc()
}

/// EXPERIMENTAL. Copies the bf16 matrix `data` (`[rows, cols]`, row-major: a weight `[N, K]` as model
/// files store it) into device memory the new tensor owns until `omega_gpu_tensor_free`, and writes the
/// tensor to `*out` (NULL on failure). Takes the session lock itself and opens the device when it is closed,
/// as the products do. Returns 0 or a negative `OMEGA_GPU_MATMUL_ERR_*`.
///
/// # Safety
/// - `data` is NULL (refused) or points to `rows*cols` readable, aligned `uint16_t`.
/// - `out` is NULL (refused) or points to a writable, aligned `OmegaGpuTensor *`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_tensor_upload_bf16(
    rows: u32,
    cols: u32,
    data: *const u16,
    out: *mut *mut OmegaGpuTensor,
) -> c_int {
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_tensor_upload_bf16", OMEGA_GPU_MATMUL_ERR_INTERNAL, || unsafe { upload(rows, cols, data, out) })
}

/// EXPERIMENTAL. As `omega_gpu_tensor_upload_bf16`, an f32 matrix.
///
/// # Safety
/// - `data` is NULL (refused) or points to `rows*cols` readable, aligned `float`.
/// - `out` is NULL (refused) or points to a writable, aligned `OmegaGpuTensor *`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_tensor_upload_f32(
    rows: u32,
    cols: u32,
    data: *const f32,
    out: *mut *mut OmegaGpuTensor,
) -> c_int {
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_tensor_upload_f32", OMEGA_GPU_MATMUL_ERR_INTERNAL, || unsafe { upload(rows, cols, data, out) })
}

/// Closes the device the library opened, once nothing of it is alive (the lock held by the caller's
/// `lock`); a no-op when it is not the library's to close.
fn close_if_due(lib: &mut Library, lock: crate::Locked<crate::Closed>) {
    // A tensor of an earlier device open owns nothing any more (its memory went with that close).
    let owning = lib.tensors.values().any(|t| t.data.is_current());
    if !lib.opened || owning {
        return;
    }
    lib.opened = false;
    lib.close_pending = false;
    if lock.is_open() && !lock.is_blocked() {
        if let Ok(dev) = lock.open() {
            drop(dev.close());
        }
    }
}

/// EXPERIMENTAL. Releases tensor `t`'s device memory and the tensor. NULL is a no-op. Takes the session lock
/// itself: a caller that holds it is refused (the tensor stays, so it can be freed properly afterwards),
/// as is a pointer that is not a live tensor (the stage is in `omega_gpu_matmul_last_error()`). After an
/// uncertain completion the memory is parked, never released. The free of the last tensor completes a
/// close `omega_gpu_device_close` left waiting.
#[no_mangle]
pub extern "C" fn omega_gpu_tensor_free(t: *mut OmegaGpuTensor) {
    guard("omega_gpu_tensor_free", (), || {
        if t.is_null() {
            return;
        }
        if runtime().holds_lock() {
            record(&EntryError::Session(Error::Lock(LOCK_HELD)));
            return;
        }
        let lock = crate::lock();
        let mut lib = sync::lock(&LIBRARY);
        let Some(tensor) = lib.tensors.remove(&t.addr()) else {
            record(&EntryError::UnknownTensor(t.addr()));
            return;
        };
        // Released here, under the lock (forgotten when its device is gone).
        drop(tensor);
        if lib.close_pending {
            close_if_due(&mut lib, lock);
        }
    })
}

/// EXPERIMENTAL. Writes tensor `t`'s rows and columns to `*rows` and `*cols` (each skipped when NULL); 0
/// and 0, with the stage recorded, for NULL or a pointer that is not a live tensor. Needs no lock.
///
/// # Safety
/// - `rows` and `cols` are each NULL or point to a writable, aligned `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_tensor_shape(t: *const OmegaGpuTensor, rows: *mut u32, cols: *mut u32) {
    guard("omega_gpu_tensor_shape", (), || {
        let shape = match tensor_key(t) {
            Ok(key) => match sync::lock(&LIBRARY).tensors.get(&key) {
                Some(t) => (t.rows, t.cols),
                None => {
                    record(&EntryError::UnknownTensor(key));
                    (0, 0)
                }
            },
            Err(e) => {
                record(&e);
                (0, 0)
            }
        };
        // SAFETY: by the caller's promise each is NULL or a writable u32.
        unsafe {
            if let Some(r) = rows.as_mut() {
                *r = shape.0;
            }
            if let Some(c) = cols.as_mut() {
                *c = shape.1;
            }
        }
    })
}

/// EXPERIMENTAL. The name of return code `rc` (`"OMEGA_GPU_MATMUL_OK"`, `"OMEGA_GPU_MATMUL_ERR_SHAPE"`,
/// ...; `"OMEGA_GPU_MATMUL_ERR_UNKNOWN"` for a code no entry returns). A static string; no lock.
#[no_mangle]
pub extern "C" fn omega_gpu_matmul_rc_name(rc: i32) -> *const c_char {
    let name: &'static core::ffi::CStr = match rc {
        OMEGA_GPU_MATMUL_OK => c"OMEGA_GPU_MATMUL_OK",
        OMEGA_GPU_MATMUL_ERR_ARGS => c"OMEGA_GPU_MATMUL_ERR_ARGS",
        OMEGA_GPU_MATMUL_ERR_SHAPE => c"OMEGA_GPU_MATMUL_ERR_SHAPE",
        OMEGA_GPU_MATMUL_ERR_LOCK_HELD => c"OMEGA_GPU_MATMUL_ERR_LOCK_HELD",
        OMEGA_GPU_MATMUL_ERR_BLOCKED => c"OMEGA_GPU_MATMUL_ERR_BLOCKED",
        OMEGA_GPU_MATMUL_ERR_UNCERTAIN => c"OMEGA_GPU_MATMUL_ERR_UNCERTAIN",
        OMEGA_GPU_MATMUL_ERR_DEVICE => c"OMEGA_GPU_MATMUL_ERR_DEVICE",
        OMEGA_GPU_MATMUL_ERR_ALLOC => c"OMEGA_GPU_MATMUL_ERR_ALLOC",
        OMEGA_GPU_MATMUL_ERR_LOAD => c"OMEGA_GPU_MATMUL_ERR_LOAD",
        OMEGA_GPU_MATMUL_ERR_COPY => c"OMEGA_GPU_MATMUL_ERR_COPY",
        OMEGA_GPU_MATMUL_ERR_LAUNCH => c"OMEGA_GPU_MATMUL_ERR_LAUNCH",
        OMEGA_GPU_MATMUL_ERR_CANCELLED => c"OMEGA_GPU_MATMUL_ERR_CANCELLED",
        OMEGA_GPU_MATMUL_ERR_TENSOR => c"OMEGA_GPU_MATMUL_ERR_TENSOR",
        OMEGA_GPU_MATMUL_ERR_PLAN => c"OMEGA_GPU_MATMUL_ERR_PLAN",
        OMEGA_GPU_MATMUL_ERR_INTERNAL => c"OMEGA_GPU_MATMUL_ERR_INTERNAL",
        _ => c"OMEGA_GPU_MATMUL_ERR_UNKNOWN",
    };
    name.as_ptr()
}

/// EXPERIMENTAL. The text of the library's most recent failure, `{stage}: {cause}` ("" before any): one
/// process-wide buffer, overwritten by the next call of this function. Every failure of the library sets it
/// (and the session's last error); a success leaves it.
#[no_mangle]
pub extern "C" fn omega_gpu_matmul_last_error() -> *const c_char {
    guard("omega_gpu_matmul_last_error", ptr::null(), || {
        let text = sync::lock(&LAST_ERROR).clone();
        LAST_ERROR_TEXT.publish(&text)
    })
}

/// EXPERIMENTAL. 1 once an uncertain completion latched the process (in a library call or any other
/// launch): every later library call is refused with `OMEGA_GPU_MATMUL_ERR_BLOCKED`. Any thread, no lock.
#[no_mangle]
pub extern "C" fn omega_gpu_matmul_is_blocked() -> c_int {
    c_int::from(runtime().is_blocked())
}

/// Frees what the library keeps between calls; the lock is the caller's `_lock`.
fn clear(lib: &mut Library) {
    lib.matmul = None;
    lib.staging = Staging::new();
}

/// EXPERIMENTAL. Frees the library's loaded module, workspace and staging buffers (the next call loads
/// again); tensors and the device stay. Takes the session lock itself (a caller that holds it is refused,
/// recorded, nothing freed). After an uncertain completion the buffers are parked, never released.
#[no_mangle]
pub extern "C" fn omega_gpu_matmul_cache_clear() {
    guard("omega_gpu_matmul_cache_clear", (), || {
        if runtime().holds_lock() {
            record(&EntryError::Session(Error::Lock(LOCK_HELD)));
            return;
        }
        let _lock = crate::lock();
        clear(&mut sync::lock(&LIBRARY));
    })
}

/// EXPERIMENTAL. Frees what `omega_gpu_matmul_cache_clear` frees and closes the device if a library call
/// opened it. Tensors keep their device memory until `omega_gpu_tensor_free`: while any uploaded since the
/// device opened is alive the device stays open, and the free of the last one closes it. A device the
/// caller opened stays open. Takes the
/// session lock itself (a caller that holds it is refused, recorded, nothing done); after an uncertain
/// completion nothing is closed (the latch forbids it) and the buffers are parked.
#[no_mangle]
pub extern "C" fn omega_gpu_device_close() {
    guard("omega_gpu_device_close", (), || {
        if runtime().holds_lock() {
            record(&EntryError::Session(Error::Lock(LOCK_HELD)));
            return;
        }
        let lock = crate::lock();
        let mut lib = sync::lock(&LIBRARY);
        clear(&mut lib);
        if lib.opened {
            lib.close_pending = true;
            close_if_due(&mut lib, lock);
        }
    })
}

/// EXPERIMENTAL. Sets the process-wide CTA budget: every launch of the library has at most `ctas` CTAs (the
/// persistent GEMM's grid, the GEMV's K split, the SIMT and grouped bands; `OmegaGpuMatmulInfo.ctas` says
/// what a call used). 0 restores the default, `OMEGA_GPU_MATMUL_MAX_CTAS`; larger values are taken as it.
/// Applies to the calls that start after it; any thread, no lock.
#[no_mangle]
pub extern "C" fn omega_gpu_matmul_set_cta_budget(ctas: u32) {
    matmul::set_cta_budget(ctas);
}

/// EXPERIMENTAL. The CTA budget in force. Any thread, no lock.
#[no_mangle]
pub extern "C" fn omega_gpu_matmul_cta_budget() -> u32 {
    matmul::cta_budget()
}

// ----- device-resident entries --------------------------------------------------------------------------

/// A live buffer of the open session as a span of `T`, or the refusal (stage `matmul args`) of NULL or a
/// buffer the session does not have. The lock is held by the call, so the buffer stays allocated.
///
/// # Safety
/// - `m` is NULL (refused) or points to a readable, aligned `OmegaGpuMem`.
unsafe fn span<T: DeviceScalar>(what: &'static str, m: *const GpuMem) -> Result<DeviceSpan<T>, EntryError> {
    // SAFETY: by the caller's promise NULL or a readable OmegaGpuMem.
    let Some(m) = (unsafe { m.as_ref() }) else { return Err(EntryError::Null(what)) };
    let bytes = runtime().live_bytes(m, Stage::MatmulArgs)?;
    // SAFETY: the session says `m` names a live buffer of `bytes` bytes at `m.va`; it stays allocated for
    // the span's use, which is this call's, since the call holds the session lock and a free or close needs
    // it. Whether the kernels may write it is the device's check (a store to a read-only buffer faults).
    Ok(unsafe { DeviceSpan::new(m.va, (bytes / size_of::<T>() as u64) as usize) })
}

/// The x, W and y spans of a dense device-resident product.
type Spans3<A, B, C> = (DeviceSpan<A>, DeviceSpan<B>, DeviceSpan<C>);

/// Three spans, or the first refusal.
///
/// # Safety
/// - Each pointer is NULL or points to a readable, aligned `OmegaGpuMem`.
unsafe fn spans3<A: DeviceScalar, B: DeviceScalar, C: DeviceScalar>(
    a: *const GpuMem,
    b: *const GpuMem,
    c: *const GpuMem,
) -> Result<Spans3<A, B, C>, EntryError> {
    // SAFETY: forwarded from the caller.
    unsafe { Ok((span("x", a)?, span("w", b)?, span("y", c)?)) }
}

/// Runs a dense device-resident product: the lock and the device first (the spans are checked under it).
///
/// # Safety
/// - Each pointer is NULL or points to a readable, aligned `OmegaGpuMem`.
unsafe fn dense_mem<X: DeviceScalar, Y: DeviceScalar>(
    shape: Shape,
    bf16_out: bool,
    x: *const GpuMem,
    w: *const GpuMem,
    y: *const GpuMem,
    run: impl for<'s> FnOnce(
        &Matmul<'s>,
        Gpu<'s>,
        &DeviceSpan<X>,
        &DeviceSpan<X>,
        &mut DeviceSpan<Y>,
    ) -> Result<Info, Failed<'s>>,
) -> Outcome {
    let info =
        Info { m: shape.m, n: shape.n, k: shape.k, bf16_out, cta_budget: matmul::cta_budget(), ..Info::default() };
    with_device(info, 0, |lib, s, gpu, info, flags| {
        // SAFETY: forwarded from the caller.
        let (xs, ws, mut ys) = match unsafe { spans3::<X, X, Y>(x, w, y) } {
            Ok(t) => t,
            Err(e) => return Outcome::failed(info, flags, e),
        };
        let mm = match handle(lib, s) {
            Ok(m) => m,
            Err(e) => return Outcome::failed(info, flags, e),
        };
        let o = outcome(run(&mm, gpu, &xs, &ws, &mut ys), flags, 0, 0);
        lib.matmul = Some(mm.keep());
        o
    })
}

/// EXPERIMENTAL. `omega_gpu_matmul_bf16` over device buffers of the open session (no copies): x `[M, K]`
/// and W `[N, K]` bf16, y `[M, N]` f32, each an `OmegaGpuMem` from `omega_gpu_session_alloc*` at least as
/// long as its operand (a shorter one is refused, `OMEGA_GPU_MATMUL_ERR_SHAPE`, naming both shapes; one
/// that is not a live buffer `_ARGS`). Takes the session lock itself, as the other entries.
///
/// # Safety
/// - `x`, `w` and `y` are each NULL (refused) or point to a readable, aligned `OmegaGpuMem`.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuMatmulInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_matmul_bf16_mem(
    m: u32,
    n: u32,
    k: u32,
    x: *const GpuMem,
    w: *const GpuMem,
    y: *const GpuMem,
    info: *mut OmegaGpuMatmulInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_matmul_bf16_mem", OMEGA_GPU_MATMUL_ERR_INTERNAL, || unsafe {
        let shape = Shape::new(m, n, k);
        let o = dense_mem::<u16, f32>(shape, false, x, w, y, |mm, gpu, x, w, y| {
            mm.bf16(gpu, x, w, y, shape).map(|d| d.info)
        });
        finish(info, start, o)
    })
}

/// EXPERIMENTAL. As `omega_gpu_matmul_bf16_mem` with a bf16 output: y `[M, N]` of `uint16_t`, the f32
/// product rounded to nearest even.
///
/// # Safety
/// - `x`, `w` and `y` are each NULL (refused) or point to a readable, aligned `OmegaGpuMem`.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuMatmulInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_matmul_bf16_to_bf16_mem(
    m: u32,
    n: u32,
    k: u32,
    x: *const GpuMem,
    w: *const GpuMem,
    y: *const GpuMem,
    info: *mut OmegaGpuMatmulInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_matmul_bf16_to_bf16_mem", OMEGA_GPU_MATMUL_ERR_INTERNAL, || unsafe {
        let shape = Shape::new(m, n, k);
        let o = dense_mem::<u16, u16>(shape, true, x, w, y, |mm, gpu, x, w, y| {
            mm.bf16_to_bf16(gpu, x, w, y, shape).map(|d| d.info)
        });
        finish(info, start, o)
    })
}

/// EXPERIMENTAL. The gate+up projection and its SwiGLU in one launch, over device buffers of the open
/// session: `y[i, j] = silu(x[i] . W[j]) * (x[i] . W[N + j])`, `silu(g) = g / (1 + e^-g)`, with x `[M, K]`
/// and the fused gate+up weight W `[2N, K]` (the N gate rows first, then the N up rows) bf16, y `[M, N]`
/// f32. Needs K % 8 == 0, N % 4 == 0 and 16-byte aligned buffers (whole `OmegaGpuMem`s are); other
/// products are refused, `OMEGA_GPU_MATMUL_ERR_PLAN`, and nothing runs. A buffer shorter than its
/// operand is refused, `_SHAPE`. Takes the session lock itself, as the other entries.
///
/// # Safety
/// - `x`, `w` and `y` are each NULL (refused) or point to a readable, aligned `OmegaGpuMem`.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuMatmulInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_matmul_swiglu_bf16_mem(
    m: u32,
    n: u32,
    k: u32,
    x: *const GpuMem,
    w: *const GpuMem,
    y: *const GpuMem,
    info: *mut OmegaGpuMatmulInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_matmul_swiglu_bf16_mem", OMEGA_GPU_MATMUL_ERR_INTERNAL, || unsafe {
        let shape = Shape::new(m, n, k);
        let o = dense_mem::<u16, f32>(shape, false, x, w, y, |mm, gpu, x, w, y| {
            mm.swiglu_bf16(gpu, x, w, y, shape).map(|d| d.info)
        });
        finish(info, start, o)
    })
}

/// EXPERIMENTAL. As `omega_gpu_matmul_swiglu_bf16_mem` with a bf16 output: y `[M, N]` of `uint16_t`, each
/// value rounded to nearest even; N % 8 == 0.
///
/// # Safety
/// - `x`, `w` and `y` are each NULL (refused) or point to a readable, aligned `OmegaGpuMem`.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuMatmulInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_matmul_swiglu_bf16_to_bf16_mem(
    m: u32,
    n: u32,
    k: u32,
    x: *const GpuMem,
    w: *const GpuMem,
    y: *const GpuMem,
    info: *mut OmegaGpuMatmulInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_matmul_swiglu_bf16_to_bf16_mem", OMEGA_GPU_MATMUL_ERR_INTERNAL, || unsafe {
        let shape = Shape::new(m, n, k);
        let o = dense_mem::<u16, u16>(shape, true, x, w, y, |mm, gpu, x, w, y| {
            mm.swiglu_bf16_to_bf16(gpu, x, w, y, shape).map(|d| d.info)
        });
        finish(info, start, o)
    })
}

/// EXPERIMENTAL. `omega_gpu_matmul_f32` over device buffers of the open session (as
/// `omega_gpu_matmul_bf16_mem`, every operand f32).
///
/// # Safety
/// - `x`, `w` and `y` are each NULL (refused) or point to a readable, aligned `OmegaGpuMem`.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuMatmulInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_matmul_f32_mem(
    m: u32,
    n: u32,
    k: u32,
    x: *const GpuMem,
    w: *const GpuMem,
    y: *const GpuMem,
    info: *mut OmegaGpuMatmulInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_matmul_f32_mem", OMEGA_GPU_MATMUL_ERR_INTERNAL, || unsafe {
        let shape = Shape::new(m, n, k);
        let o = dense_mem::<f32, f32>(shape, false, x, w, y, |mm, gpu, x, w, y| {
            mm.f32(gpu, x, w, y, shape).map(|d| d.info)
        });
        finish(info, start, o)
    })
}

/// EXPERIMENTAL. `uint32_t` words of a grouped product's routing buffer: `experts + 1` offsets, then
/// `tokens * top_k` rows, the same number of pairs, the drop count, the count of touched experts and the
/// list of touched experts in increasing order (room for `min(experts, tokens * top_k)`); 0 for a shape
/// past `size_t`.
#[no_mangle]
pub extern "C" fn omega_gpu_matmul_routing_words(tokens: u32, top_k: u32, experts: u32) -> usize {
    let p = u64::from(tokens) * u64::from(top_k);
    let e = u64::from(experts);
    p.checked_mul(2)
        .and_then(|v| v.checked_add(e + 3))
        .and_then(|v| v.checked_add(e.min(p)))
        .and_then(|v| usize::try_from(v).ok())
        .unwrap_or(0)
}

/// EXPERIMENTAL. The grouped expert GEMM over device buffers, with no host round trip of the routing: x
/// `[tokens, K]` bf16, W `[experts, N, K]` bf16 (every expert's weight, as a linear layer stores it),
/// `topk` `[tokens, top_k]` u32 (token t's j-th expert at `t * top_k + j`). The device routes the choices
/// into `routing` (`omega_gpu_matmul_routing_words` u32: `offsets[experts + 1]`, `rows[tokens * top_k]`,
/// `pairs[tokens * top_k]`, the drop count, the touched experts' count and list, every part written at
/// each call) and writes y `[tokens * top_k, N]` f32 in slot order: expert
/// e's slots are `offsets[e] .. offsets[e+1]`, slot i holds `x[rows[i]] . W[e]^T` and `pairs[i]` is its
/// choice index `t * top_k + j`. Choices naming an expert `>= experts` get no slot and are counted (their
/// rows of y, at the end, are not written). K % 32 == 0 (else `OMEGA_GPU_MATMUL_ERR_SHAPE`); an expert
/// whose `ceil(N / 64)` blocks are past the CTA budget is refused (`_PLAN`). Takes the session lock itself.
///
/// # Safety
/// - `x`, `w`, `topk`, `routing` and `y` are each NULL (refused) or point to a readable, aligned
///   `OmegaGpuMem`.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuMatmulInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_matmul_grouped_bf16_mem(
    tokens: u32,
    top_k: u32,
    experts: u32,
    n: u32,
    k: u32,
    x: *const GpuMem,
    w: *const GpuMem,
    topk: *const GpuMem,
    routing: *const GpuMem,
    y: *const GpuMem,
    info: *mut OmegaGpuMatmulInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_matmul_grouped_bf16_mem", OMEGA_GPU_MATMUL_ERR_INTERNAL, || unsafe {
        let shape = GroupedShape { tokens, top_k, experts, n, k };
        let base = Info { n, k, experts, top_k, tokens, cta_budget: matmul::cta_budget(), ..Info::default() };
        let o = with_device(base, 0, |lib, s, gpu, info, flags| {
            // The outer block's promise covers the five pointers.
            let spans = (|| {
                Ok::<_, EntryError>((
                    span::<u16>("x", x)?,
                    span::<u16>("w", w)?,
                    span::<u32>("topk", topk)?,
                    span::<u32>("routing", routing)?,
                    span::<f32>("y", y)?,
                ))
            })();
            let (xs, ws, ts, mut rs, mut ys) = match spans {
                Ok(t) => t,
                Err(e) => return Outcome::failed(info, flags, e),
            };
            let mm = match handle(lib, s) {
                Ok(m) => m,
                Err(e) => return Outcome::failed(info, flags, e),
            };
            let r = mm.grouped_bf16(gpu, &xs, &ws, &ts, &mut rs, &mut ys, shape).map(|d| d.info);
            let o = outcome(r, flags, 0, 0);
            lib.matmul = Some(mm.keep());
            o
        });
        finish(info, start, o)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_distinct_name() {
        let codes = (-14..=0).collect::<Vec<i32>>();
        let names: std::collections::BTreeSet<String> = codes
            .iter()
            // SAFETY: the names are static NUL-terminated strings.
            .map(|&c| unsafe { core::ffi::CStr::from_ptr(omega_gpu_matmul_rc_name(c)) }.to_str().unwrap().to_owned())
            .collect();
        assert_eq!(names.len(), codes.len());
        assert!(!names.contains("OMEGA_GPU_MATMUL_ERR_UNKNOWN"));
        // SAFETY: as above.
        let unknown = unsafe { core::ffi::CStr::from_ptr(omega_gpu_matmul_rc_name(-99)) };
        assert_eq!(unknown.to_str().unwrap(), "OMEGA_GPU_MATMUL_ERR_UNKNOWN");
    }

    #[test]
    fn the_info_is_160_bytes_with_the_documented_offsets() {
        assert_eq!(size_of::<OmegaGpuMatmulInfo>(), 160);
        assert_eq!(core::mem::offset_of!(OmegaGpuMatmulInfo, total_ctas), 32);
        assert_eq!(core::mem::offset_of!(OmegaGpuMatmulInfo, split), 80);
        assert_eq!(core::mem::offset_of!(OmegaGpuMatmulInfo, reserved), 104);
    }

    #[test]
    fn the_routing_words_match_the_library_layout() {
        let g = GroupedShape { tokens: 3, top_k: 2, experts: 5, n: 1, k: 32 };
        assert_eq!(omega_gpu_matmul_routing_words(3, 2, 5), g.routing().words);
        assert_eq!(omega_gpu_matmul_routing_words(1 << 16, 1 << 15, 7), (1 << 32) + 10 + 7);
        let g = GroupedShape { tokens: 1, top_k: 8, experts: 128, n: 1, k: 32 };
        assert_eq!(omega_gpu_matmul_routing_words(1, 8, 128), g.routing().words);
        assert_eq!(omega_gpu_matmul_routing_words(u32::MAX, u32::MAX, u32::MAX), 0, "past u64: 0");
    }
}
