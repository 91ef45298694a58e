//! `omega_gpu_engine.h`: the job engine — one built job through named states to success or exactly one
//! named failure — over [`crate::engine`].
//!
//! The structs are the engine's own `#[repr(C)]` types (`src/core/engine/types.rs`, `src/core/engine/table.rs`),
//! renamed for C in `cbindgen.toml`; a C backend is the engine's function table, wrapped by
//! [`TableBackend`] exactly as a Rust caller would wrap it. The one thing added here is the last error: a
//! failed run also records `engine <step>: <FAILURE NAME>: <detail>` for `omega_gpu_session_last_error`.

use core::ffi::{c_char, c_int, CStr};
use std::collections::BTreeMap;
use std::ffi::CString;

use super::boundary::{entry, guard, null};
use crate::engine::{
    self, BackendTable, Failure, Job, JobResult, State, Step, TableBackend, Wait, BACKEND_CUSTOM, BACKEND_FAKE,
    BACKEND_SESSION, DEFAULT_WAIT_MS, DETAIL_BYTES, FAILURE_COUNT, JOB_MAX_ELEMENTS, LAUNCH_CANCELLED, LAUNCH_DONE,
    LAUNCH_FAULT, LAUNCH_POLL_REFUSED, LAUNCH_REFUSED, LAUNCH_TIMEOUT, LAYOUT_VECTOR_1D, STATE_COUNT, STEP_COUNT,
    STEP_FAILED, STEP_LATCHED, STEP_OK, WAIT_COUNT,
};
use crate::error::{Error, Stage};
use crate::sync::{self, Mutex};

/// `OmegaGpuJob.layout`: two f32 inputs and one f32 output of `n` elements, `out[i] = a[i] + b[i]`. The
/// only layout the engine runs today.
pub const OMEGA_GPU_LAYOUT_VECTOR_1D: u32 = 1;
/// Most elements a VECTOR_1D job may have (2^28: 1 GiB per buffer).
pub const OMEGA_GPU_ENGINE_JOB_MAX_ELEMENTS: u32 = 268435456;
/// The limit of a completion wait whose `OmegaGpuTimeouts` field is 0, ms.
pub const OMEGA_GPU_ENGINE_DEFAULT_WAIT_MS: u32 = 5000;
/// Bytes of `OmegaGpuResult.detail`, the terminating NUL included.
pub const OMEGA_GPU_ENGINE_DETAIL_BYTES: usize = 192;

/// Failure: none, the run succeeded.
pub const OMEGA_GPU_ENGINE_OK: u32 = 0;
/// Failure: the job is malformed (a NULL pointer, `n` of 0 or above `OMEGA_GPU_ENGINE_JOB_MAX_ELEMENTS`).
pub const OMEGA_GPU_ENGINE_INVALID_JOB: u32 = 1;
/// Failure: the layout is not `OMEGA_GPU_LAYOUT_VECTOR_1D`.
pub const OMEGA_GPU_ENGINE_UNSUPPORTED_LAYOUT: u32 = 2;
/// Failure: the backend's device is not usable (the session lock not held, the open failed, a dead channel).
pub const OMEGA_GPU_ENGINE_DEVICE_UNAVAILABLE: u32 = 3;
/// Failure: a device buffer could not be allocated.
pub const OMEGA_GPU_ENGINE_ALLOC_FAILED: u32 = 4;
/// Failure: the inputs could not be made visible to the device.
pub const OMEGA_GPU_ENGINE_UPLOAD_FAILED: u32 = 5;
/// Failure: the launch was refused before the device saw it; certain, nothing ran.
pub const OMEGA_GPU_ENGINE_LAUNCH_REFUSED: u32 = 6;
/// Failure: a completion marker did not arrive in time; uncertain, blocks the engine.
pub const OMEGA_GPU_ENGINE_COMPLETION_TIMEOUT: u32 = 7;
/// Failure: the completion poll was refused; uncertain, blocks the engine.
pub const OMEGA_GPU_ENGINE_POLL_REFUSED: u32 = 8;
/// Failure: cancelled after submit; uncertain, blocks the engine.
pub const OMEGA_GPU_ENGINE_COMPLETION_CANCELLED: u32 = 9;
/// Failure: the channel reported an error (Xid) during a wait; certain, the work stopped.
pub const OMEGA_GPU_ENGINE_KERNEL_FAULT: u32 = 10;
/// Failure: the output could not be made visible to the CPU.
pub const OMEGA_GPU_ENGINE_READBACK_FAILED: u32 = 11;
/// Failure: an earlier completion was uncertain (or the backend's device is latched); nothing runs again.
pub const OMEGA_GPU_ENGINE_UNCERTAIN_COMPLETION_BLOCKED: u32 = 12;
/// Failure codes there are (`omega_gpu_engine_failure_name` names each of `0..COUNT`).
pub const OMEGA_GPU_ENGINE_FAILURE_COUNT: u32 = 13;

/// State: the job was received.
pub const OMEGA_GPU_ENGINE_STATE_INITIAL: u32 = 0;
/// State: the job has the accepted shape and sound pointers and size.
pub const OMEGA_GPU_ENGINE_STATE_VALIDATED: u32 = 1;
/// State: the backend's device is usable.
pub const OMEGA_GPU_ENGINE_STATE_DEVICE_READY: u32 = 2;
/// State: device buffers for the inputs and the output exist.
pub const OMEGA_GPU_ENGINE_STATE_ALLOCATED: u32 = 3;
/// State: the inputs are on the device and the device output is poisoned.
pub const OMEGA_GPU_ENGINE_STATE_UPLOADED: u32 = 4;
/// State: the kernel was handed to the device; from here a lost completion is uncertain.
pub const OMEGA_GPU_ENGINE_STATE_SUBMITTED: u32 = 5;
/// State: the KERNEL_DONE marker arrived.
pub const OMEGA_GPU_ENGINE_STATE_KERNEL_DONE: u32 = 6;
/// State: the ENGINE_IDLE marker arrived.
pub const OMEGA_GPU_ENGINE_STATE_IDLE: u32 = 7;
/// State: the output was read back into the caller's memory.
pub const OMEGA_GPU_ENGINE_STATE_READ_BACK: u32 = 8;
/// State: done, every buffer released.
pub const OMEGA_GPU_ENGINE_STATE_SUCCESS: u32 = 9;
/// State: ended with exactly one failure.
pub const OMEGA_GPU_ENGINE_STATE_FAILED: u32 = 10;
/// States there are: the length of `OmegaGpuResult.entered_ns`.
pub const OMEGA_GPU_ENGINE_STATE_COUNT: u32 = 11;

/// Step: nothing failed.
pub const OMEGA_GPU_ENGINE_STEP_NONE: u32 = 0;
/// Step: the entry check of the block.
pub const OMEGA_GPU_ENGINE_STEP_GATE: u32 = 1;
/// Step: checking the job.
pub const OMEGA_GPU_ENGINE_STEP_VALIDATE: u32 = 2;
/// Step: making the backend's device ready.
pub const OMEGA_GPU_ENGINE_STEP_PREPARE: u32 = 3;
/// Step: allocating device buffers.
pub const OMEGA_GPU_ENGINE_STEP_ALLOC: u32 = 4;
/// Step: uploading the inputs.
pub const OMEGA_GPU_ENGINE_STEP_UPLOAD: u32 = 5;
/// Step: placing the kernel and submitting it.
pub const OMEGA_GPU_ENGINE_STEP_LAUNCH: u32 = 6;
/// Step: waiting for a completion marker (which one: the wait).
pub const OMEGA_GPU_ENGINE_STEP_WAIT: u32 = 7;
/// Step: reading the output back.
pub const OMEGA_GPU_ENGINE_STEP_READBACK: u32 = 8;
/// Steps there are.
pub const OMEGA_GPU_ENGINE_STEP_COUNT: u32 = 9;

/// Wait: not in a completion wait.
pub const OMEGA_GPU_ENGINE_WAIT_NONE: u32 = 0;
/// Wait: marker 0, released when the grid has completed.
pub const OMEGA_GPU_ENGINE_WAIT_KERNEL_DONE: u32 = 1;
/// Wait: marker 1, released after the engine has gone idle.
pub const OMEGA_GPU_ENGINE_WAIT_ENGINE_IDLE: u32 = 2;
/// Waits there are.
pub const OMEGA_GPU_ENGINE_WAIT_COUNT: u32 = 3;

/// `OmegaGpuBackendDiag.backend`: the session backend (the default: the GPU, or the simulator).
pub const OMEGA_GPU_ENGINE_BACKEND_SESSION: u32 = 0;
/// `OmegaGpuBackendDiag.backend`: the Rust test backend.
pub const OMEGA_GPU_ENGINE_BACKEND_FAKE: u32 = 1;
/// `OmegaGpuBackendDiag.backend`: a backend installed with `omega_gpu_engine_set_backend`.
pub const OMEGA_GPU_ENGINE_BACKEND_CUSTOM: u32 = 2;

/// An `OmegaGpuBackend` step function's return: the step succeeded.
pub const OMEGA_GPU_BACKEND_STEP_OK: i32 = 0;
/// An `OmegaGpuBackend` step function's return: the step failed, certainly (nothing is left running).
pub const OMEGA_GPU_BACKEND_STEP_FAILED: i32 = -1;
/// `OmegaGpuBackend.prepare` only: the device is latched after an uncertain completion.
pub const OMEGA_GPU_BACKEND_STEP_LATCHED: i32 = -2;

/// `OmegaGpuBackend.launch` outcome: both markers arrived.
pub const OMEGA_GPU_BACKEND_LAUNCH_DONE: u32 = 0;
/// `OmegaGpuBackend.launch` outcome: refused before the device saw anything.
pub const OMEGA_GPU_BACKEND_LAUNCH_REFUSED: u32 = 1;
/// `OmegaGpuBackend.launch` outcome: the marker of `OmegaGpuLaunchReport.wait` did not arrive in time.
pub const OMEGA_GPU_BACKEND_LAUNCH_TIMEOUT: u32 = 2;
/// `OmegaGpuBackend.launch` outcome: the poll of that marker was refused.
pub const OMEGA_GPU_BACKEND_LAUNCH_POLL_REFUSED: u32 = 3;
/// `OmegaGpuBackend.launch` outcome: cancelled while waiting for that marker.
pub const OMEGA_GPU_BACKEND_LAUNCH_CANCELLED: u32 = 4;
/// `OmegaGpuBackend.launch` outcome: the channel reported `OmegaGpuLaunchReport.xid` while waiting.
pub const OMEGA_GPU_BACKEND_LAUNCH_FAULT: u32 = 5;

const _: () = {
    assert!(OMEGA_GPU_LAYOUT_VECTOR_1D == LAYOUT_VECTOR_1D);
    assert!(OMEGA_GPU_ENGINE_JOB_MAX_ELEMENTS == JOB_MAX_ELEMENTS);
    assert!(OMEGA_GPU_ENGINE_DEFAULT_WAIT_MS == DEFAULT_WAIT_MS);
    assert!(OMEGA_GPU_ENGINE_DETAIL_BYTES == DETAIL_BYTES);

    assert!(OMEGA_GPU_ENGINE_OK == Failure::Ok as u32);
    assert!(OMEGA_GPU_ENGINE_INVALID_JOB == Failure::InvalidJob as u32);
    assert!(OMEGA_GPU_ENGINE_UNSUPPORTED_LAYOUT == Failure::UnsupportedLayout as u32);
    assert!(OMEGA_GPU_ENGINE_DEVICE_UNAVAILABLE == Failure::DeviceUnavailable as u32);
    assert!(OMEGA_GPU_ENGINE_ALLOC_FAILED == Failure::AllocFailed as u32);
    assert!(OMEGA_GPU_ENGINE_UPLOAD_FAILED == Failure::UploadFailed as u32);
    assert!(OMEGA_GPU_ENGINE_LAUNCH_REFUSED == Failure::LaunchRefused as u32);
    assert!(OMEGA_GPU_ENGINE_COMPLETION_TIMEOUT == Failure::CompletionTimeout as u32);
    assert!(OMEGA_GPU_ENGINE_POLL_REFUSED == Failure::PollRefused as u32);
    assert!(OMEGA_GPU_ENGINE_COMPLETION_CANCELLED == Failure::CompletionCancelled as u32);
    assert!(OMEGA_GPU_ENGINE_KERNEL_FAULT == Failure::KernelFault as u32);
    assert!(OMEGA_GPU_ENGINE_READBACK_FAILED == Failure::ReadbackFailed as u32);
    assert!(OMEGA_GPU_ENGINE_UNCERTAIN_COMPLETION_BLOCKED == Failure::UncertainCompletionBlocked as u32);
    assert!(OMEGA_GPU_ENGINE_FAILURE_COUNT == FAILURE_COUNT);

    assert!(OMEGA_GPU_ENGINE_STATE_INITIAL == State::Initial as u32);
    assert!(OMEGA_GPU_ENGINE_STATE_VALIDATED == State::Validated as u32);
    assert!(OMEGA_GPU_ENGINE_STATE_DEVICE_READY == State::DeviceReady as u32);
    assert!(OMEGA_GPU_ENGINE_STATE_ALLOCATED == State::Allocated as u32);
    assert!(OMEGA_GPU_ENGINE_STATE_UPLOADED == State::Uploaded as u32);
    assert!(OMEGA_GPU_ENGINE_STATE_SUBMITTED == State::Submitted as u32);
    assert!(OMEGA_GPU_ENGINE_STATE_KERNEL_DONE == State::KernelDone as u32);
    assert!(OMEGA_GPU_ENGINE_STATE_IDLE == State::Idle as u32);
    assert!(OMEGA_GPU_ENGINE_STATE_READ_BACK == State::ReadBack as u32);
    assert!(OMEGA_GPU_ENGINE_STATE_SUCCESS == State::Success as u32);
    assert!(OMEGA_GPU_ENGINE_STATE_FAILED == State::Failed as u32);
    assert!(OMEGA_GPU_ENGINE_STATE_COUNT == STATE_COUNT);

    assert!(OMEGA_GPU_ENGINE_STEP_NONE == Step::None as u32);
    assert!(OMEGA_GPU_ENGINE_STEP_GATE == Step::Gate as u32);
    assert!(OMEGA_GPU_ENGINE_STEP_VALIDATE == Step::Validate as u32);
    assert!(OMEGA_GPU_ENGINE_STEP_PREPARE == Step::Prepare as u32);
    assert!(OMEGA_GPU_ENGINE_STEP_ALLOC == Step::Alloc as u32);
    assert!(OMEGA_GPU_ENGINE_STEP_UPLOAD == Step::Upload as u32);
    assert!(OMEGA_GPU_ENGINE_STEP_LAUNCH == Step::Launch as u32);
    assert!(OMEGA_GPU_ENGINE_STEP_WAIT == Step::Wait as u32);
    assert!(OMEGA_GPU_ENGINE_STEP_READBACK == Step::Readback as u32);
    assert!(OMEGA_GPU_ENGINE_STEP_COUNT == STEP_COUNT);

    assert!(OMEGA_GPU_ENGINE_WAIT_NONE == Wait::None as u32);
    assert!(OMEGA_GPU_ENGINE_WAIT_KERNEL_DONE == Wait::KernelDone as u32);
    assert!(OMEGA_GPU_ENGINE_WAIT_ENGINE_IDLE == Wait::EngineIdle as u32);
    assert!(OMEGA_GPU_ENGINE_WAIT_COUNT == WAIT_COUNT);

    assert!(OMEGA_GPU_ENGINE_BACKEND_SESSION == BACKEND_SESSION);
    assert!(OMEGA_GPU_ENGINE_BACKEND_FAKE == BACKEND_FAKE);
    assert!(OMEGA_GPU_ENGINE_BACKEND_CUSTOM == BACKEND_CUSTOM);

    assert!(OMEGA_GPU_BACKEND_STEP_OK == STEP_OK);
    assert!(OMEGA_GPU_BACKEND_STEP_FAILED == STEP_FAILED);
    assert!(OMEGA_GPU_BACKEND_STEP_LATCHED == STEP_LATCHED);
    assert!(OMEGA_GPU_BACKEND_LAUNCH_DONE == LAUNCH_DONE);
    assert!(OMEGA_GPU_BACKEND_LAUNCH_REFUSED == LAUNCH_REFUSED);
    assert!(OMEGA_GPU_BACKEND_LAUNCH_TIMEOUT == LAUNCH_TIMEOUT);
    assert!(OMEGA_GPU_BACKEND_LAUNCH_POLL_REFUSED == LAUNCH_POLL_REFUSED);
    assert!(OMEGA_GPU_BACKEND_LAUNCH_CANCELLED == LAUNCH_CANCELLED);
    assert!(OMEGA_GPU_BACKEND_LAUNCH_FAULT == LAUNCH_FAULT);
};

/// The fixed names the core returns as `&'static str`, as NUL-terminated C strings. Each distinct name is
/// made once and kept for the life of the process (the set is finite: the names of the engine and the
/// command list), so the pointers handed to C never dangle.
static NAMES: Mutex<BTreeMap<&'static str, &'static CStr>> = Mutex::new(BTreeMap::new());

/// `name` as a static C string.
pub(crate) fn static_name(name: &'static str) -> *const c_char {
    let mut names = sync::lock(&NAMES);
    let c = names.entry(name).or_insert_with(|| {
        let owned = CString::new(name).expect("fixed names have no NUL");
        Box::leak(owned.into_boxed_c_str())
    });
    c.as_ptr()
}

/// Why `omega_gpu_execute` returned -1, as its last error reads.
enum ExecuteFailed {
    /// An argument refused before anything ran.
    Refused(Error),
    /// A run that ended in its one failure: `engine <step>: <FAILURE NAME>: <what the backend said>`.
    Run(Box<JobResult>),
}

impl core::fmt::Display for ExecuteFailed {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ExecuteFailed::Refused(e) => e.fmt(f),
            ExecuteFailed::Run(r) => {
                let name = engine::failure_name(r.failure);
                let detail = r.detail();
                match detail.split_once(": ") {
                    Some((stage, rest)) => write!(f, "{stage}: {name}: {rest}"),
                    None => write!(f, "engine: {name}: {detail}"),
                }
            }
        }
    }
}

/// The result of a call whose job pointer was NULL: nothing ran, and the one failure is INVALID_JOB in
/// VALIDATE, so a caller that reads only the result still sees a failure.
fn null_job_result() -> JobResult {
    let mut r = JobResult::new();
    r.failure = Failure::InvalidJob as u32;
    r.state = State::Failed as u32;
    r.reached = State::Initial as u32;
    r.step = Step::Validate as u32;
    r.wait = Wait::None as u32;
    r.states = (1 << State::Initial as u32) | (1 << State::Failed as u32);
    r.set_detail("execute: job is NULL");
    r
}

/// EXPERIMENTAL. Runs `*job` on the installed backend (by default the session backend: the process's device,
/// which it opens if needed, with the repository's `vector_add`; the caller holds the session lock, else the
/// run fails with `OMEGA_GPU_ENGINE_DEVICE_UNAVAILABLE`) and writes how it ended to `*result`: success, or
/// exactly one failure, with the failed step, the wait, the states entered and their times. `job->out` is
/// written only by a run that succeeds. Returns 0 when the run ended in `OMEGA_GPU_ENGINE_STATE_SUCCESS`;
/// -1 otherwise, with `engine <step>: <failure name>: <detail>` in `omega_gpu_session_last_error()`. After
/// an uncertain completion every later run fails at step GATE with
/// `OMEGA_GPU_ENGINE_UNCERTAIN_COMPLETION_BLOCKED`. One run at a time: a second thread waits. NULL `result`
/// is refused (-1, stage `execute`, nothing runs); NULL `job` is refused the same way, and `*result` says
/// `OMEGA_GPU_ENGINE_INVALID_JOB` at step VALIDATE.
///
/// # Safety
/// - `job` is NULL (refused) or points to a readable, aligned `OmegaGpuJob` whose `a` and `b` are NULL
///   (refused by the engine) or aligned and readable for `n` floats, and whose `out` is NULL (refused) or
///   aligned and writable for `n` floats overlapping neither input nor anything else in use during the call.
/// - `result` is NULL (refused) or points to a writable, aligned `OmegaGpuResult`.
/// - Not called from inside a function of an installed `OmegaGpuBackend` or a clock function (the engine is
///   busy: it waits forever).
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_execute(job: *const Job<'_>, result: *mut JobResult) -> c_int {
    entry(
        "omega_gpu_execute",
        -1,
        |_| -1,
        || {
            // SAFETY: by the caller's promise `result` is NULL or points to a writable OmegaGpuResult.
            let Some(result) = (unsafe { result.as_mut() }) else {
                return Err(ExecuteFailed::Refused(null(Stage::Execute, "result")));
            };
            // SAFETY: by the caller's promise `job` is NULL or points to a readable OmegaGpuJob whose memory is
            // valid as the engine needs it for the duration of this call.
            let Some(job) = (unsafe { job.as_ref() }) else {
                *result = null_job_result();
                return Err(ExecuteFailed::Refused(null(Stage::Execute, "job")));
            };
            let r = engine::execute(job);
            *result = r;
            if r.is_success() {
                Ok(0)
            } else {
                Err(ExecuteFailed::Run(Box::new(r)))
            }
        },
    )
}

/// EXPERIMENTAL. Installs the backend `*backend` (copied; its functions are called with its `ctx`) for every
/// later `omega_gpu_execute`; NULL goes back to the session backend. A NULL function in the table fails its
/// step (`now_ns` NULL reads 0). Waits for a run in progress. Returns 0.
///
/// # Safety
/// - `backend` is NULL or points to a readable, aligned `OmegaGpuBackend` whose every non-NULL function is
///   sound to call with its `ctx` and the arguments the engine passes (aligned pointers valid for `n`
///   floats, an aligned `OmegaGpuLaunchReport` or `OmegaGpuBackendDiag`), from any thread, one call at a
///   time, for as long as it stays installed.
/// - Every function of the table returns normally: none unwinds (a C++ exception) or `longjmp`s out
///   through Omega.
/// - Not called from inside a backend function (the engine is busy: it waits forever).
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_engine_set_backend(backend: *const BackendTable) -> c_int {
    guard("omega_gpu_engine_set_backend", -1, || {
        // SAFETY: by the caller's promise `backend` is NULL or points to a readable OmegaGpuBackend.
        let table = unsafe { backend.as_ref() }.copied();
        let installed: Option<Box<dyn engine::Backend>> = match table {
            // SAFETY: the caller promised what `TableBackend::new` requires of the table's functions.
            Some(t) => Some(Box::new(unsafe { TableBackend::new(t) })),
            None => None,
        };
        drop(engine::set_backend(installed));
        0
    })
}

/// EXPERIMENTAL. 1 once an uncertain completion (or a backend's latched device) blocked every later run of
/// the engine in this process, else 0. One atomic load: any thread, no lock.
#[no_mangle]
pub extern "C" fn omega_gpu_engine_is_blocked() -> c_int {
    guard("omega_gpu_engine_is_blocked", 1, || c_int::from(engine::is_blocked()))
}

/// EXPERIMENTAL. The clock the times in `OmegaGpuResult` are read from, in ns; NULL goes back to the
/// backend's own clock (the platform clock for the session backend). Applies from the next run: a run reads
/// the clock that was set when it started. Never waits for a run in progress, so the clock function itself
/// may call it. Any thread, no lock.
///
/// # Safety
/// - `clock` is NULL or a function that may be called with no arguments from any thread, any number of
///   times, for as long as it stays installed: the engine calls it on the thread running
///   `omega_gpu_execute`, during the run, to time each state.
/// - `clock` returns normally: it does not unwind (a C++ exception) or `longjmp` out through Omega.
/// - `clock` does not call `omega_gpu_execute` or `omega_gpu_engine_set_backend`: both wait for the run
///   in progress, which is waiting for the clock. An `omega_gpu_session_unlock` from it is refused (stage
///   `lock`) while the session backend holds the run's buffers.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_engine_set_clock(clock: Option<extern "C" fn() -> u64>) {
    guard("omega_gpu_engine_set_clock", (), || engine::set_clock(clock))
}

/// EXPERIMENTAL. The name of a failure code, the constant's own name (`"OMEGA_GPU_ENGINE_OK"`, ...);
/// `"OMEGA_GPU_ENGINE_UNKNOWN_FAILURE"` for a code no failure has (treat it as a failure). A static string.
#[no_mangle]
pub extern "C" fn omega_gpu_engine_failure_name(code: u32) -> *const c_char {
    guard("omega_gpu_engine_failure_name", c"OMEGA_GPU_ENGINE_UNKNOWN_FAILURE".as_ptr(), || {
        static_name(engine::failure_name(code))
    })
}

/// EXPERIMENTAL. The name of a state code (`"INITIAL"` ... `"SUCCESS"`, `"FAILED"`); `"UNKNOWN_STATE"` for a
/// code no state has. A static string.
#[no_mangle]
pub extern "C" fn omega_gpu_engine_state_name(code: u32) -> *const c_char {
    guard("omega_gpu_engine_state_name", c"UNKNOWN_STATE".as_ptr(), || static_name(engine::state_name(code)))
}

/// EXPERIMENTAL. The name of a wait code (`"NONE"`, `"KERNEL_DONE"`, `"ENGINE_IDLE"`); `"UNKNOWN_WAIT"` for a
/// code no wait has. A static string.
#[no_mangle]
pub extern "C" fn omega_gpu_engine_wait_name(code: u32) -> *const c_char {
    guard("omega_gpu_engine_wait_name", c"UNKNOWN_WAIT".as_ptr(), || static_name(engine::wait_name(code)))
}

/// EXPERIMENTAL. The name of a step code (`"NONE"`, `"GATE"`, ... `"READBACK"`); `"UNKNOWN_STEP"` for a code
/// no step has. A static string.
#[no_mangle]
pub extern "C" fn omega_gpu_engine_step_name(code: u32) -> *const c_char {
    guard("omega_gpu_engine_step_name", c"UNKNOWN_STEP".as_ptr(), || static_name(engine::step_name(code)))
}

/// INTERNAL, TEST ONLY. Clears the engine's block. A real process must stay blocked: the GPU may still be
/// running and writing memory a later run would be handed. Does not clear the session's latch.
#[no_mangle]
pub extern "C" fn omega_gpu_engine_test_reset_block() {
    guard("omega_gpu_engine_test_reset_block", (), engine::test_reset_block)
}

/// INTERNAL, TEST ONLY. Blocks the engine as an uncertain completion would.
#[no_mangle]
pub extern "C" fn omega_gpu_engine_test_force_block() {
    guard("omega_gpu_engine_test_force_block", (), engine::test_force_block)
}

/// INTERNAL, TEST ONLY. Pins the engine clock at `now_ns` until it is set again or
/// `omega_gpu_engine_set_clock` is called.
#[no_mangle]
pub extern "C" fn omega_gpu_engine_test_set_clock(now_ns: u64) {
    guard("omega_gpu_engine_test_set_clock", (), || engine::test_set_clock(now_ns))
}
