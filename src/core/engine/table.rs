//! A backend given as a C function table (`OmegaGpuBackend`), so the C layer's
//! `omega_gpu_engine_set_backend` is a thin wrapper: it copies the table into a [`TableBackend`] and installs
//! it. Each function reports only what its step can meet; the engine names the failure.

use core::ffi::c_void;

use super::backend::{Backend, CompletedLaunch, LaunchFailure, StepCause, Unready};
use super::types::{BackendDiag, Timeouts, Wait, BACKEND_CUSTOM};

/// A step succeeded.
pub const STEP_OK: i32 = 0;
/// A step failed (certain: nothing is left running).
pub const STEP_FAILED: i32 = -1;
/// `prepare` only: the device is latched after an uncertain completion.
pub const STEP_LATCHED: i32 = -2;

/// `launch` outcome: both markers arrived.
pub const LAUNCH_DONE: u32 = 0;
/// Refused before the device saw anything.
pub const LAUNCH_REFUSED: u32 = 1;
/// The marker of [`LaunchReport::wait`] did not arrive in time.
pub const LAUNCH_TIMEOUT: u32 = 2;
/// The poll of that marker was refused.
pub const LAUNCH_POLL_REFUSED: u32 = 3;
/// Cancelled while waiting for that marker.
pub const LAUNCH_CANCELLED: u32 = 4;
/// The channel reported [`LaunchReport::xid`] while waiting for that marker.
pub const LAUNCH_FAULT: u32 = 5;

/// What a table's `launch` reports.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchReport {
    /// `LAUNCH_*`.
    pub outcome: u32,
    /// A [`Wait`] code: the wait a timeout, refused poll, cancel or fault ended.
    pub wait: u32,
    /// The channel's error code of a fault.
    pub xid: u32,
    /// The first marker word observed.
    pub marker: u32,
    /// Submit to the ENGINE_IDLE marker, ns.
    pub kernel_ns: u64,
}

/// `OmegaGpuBackend`: a backend as C gives it. A missing function fails its step.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BackendTable {
    /// Passed to every function.
    pub ctx: *mut c_void,
    /// The backend's clock, ns.
    pub now_ns: Option<unsafe extern "C" fn(ctx: *mut c_void) -> u64>,
    /// [`STEP_OK`], [`STEP_FAILED`] (device unavailable) or [`STEP_LATCHED`].
    pub prepare: Option<unsafe extern "C" fn(ctx: *mut c_void) -> i32>,
    /// Allocates two inputs and an output of `n` f32.
    pub alloc: Option<unsafe extern "C" fn(ctx: *mut c_void, n: u32) -> i32>,
    /// Writes `a` and `b` (`n` f32 each) and poisons the output.
    pub upload: Option<unsafe extern "C" fn(ctx: *mut c_void, a: *const f32, b: *const f32, n: u32) -> i32>,
    /// Runs `out = a + b` and waits for both markers; returns a `LAUNCH_*` outcome and fills `report`.
    pub launch:
        Option<unsafe extern "C" fn(ctx: *mut c_void, n: u32, t: *const Timeouts, report: *mut LaunchReport) -> u32>,
    /// Copies the output (`n` f32) to `out`.
    pub readback: Option<unsafe extern "C" fn(ctx: *mut c_void, out: *mut f32, n: u32) -> i32>,
    /// Releases what alloc and launch took (parks it after an uncertain completion).
    pub release: Option<unsafe extern "C" fn(ctx: *mut c_void)>,
}

/// A [`Backend`] calling a [`BackendTable`].
#[derive(Debug)]
pub struct TableBackend {
    table: BackendTable,
    diag: BackendDiag,
}

// SAFETY: `TableBackend::new`'s caller promised the functions may be called with `ctx` from any thread, one
// call at a time (the engine mutex serialises them).
unsafe impl Send for TableBackend {}

impl TableBackend {
    /// Wraps `table`.
    ///
    /// # Safety
    /// - Every function in `table` is sound to call with `table.ctx` and the arguments the engine passes
    ///   (pointers valid for `n` f32), from any thread, one call at a time, for as long as the backend is
    ///   installed or in use.
    pub unsafe fn new(table: BackendTable) -> Self {
        TableBackend { table, diag: BackendDiag { backend: BACKEND_CUSTOM, ..Default::default() } }
    }

    fn missing(step: &'static str) -> StepCause {
        StepCause::TableMissing(step)
    }
}

fn step(rc: i32, step: &'static str) -> Result<(), StepCause> {
    if rc == STEP_OK {
        Ok(())
    } else {
        Err(StepCause::TableStep { step, rc })
    }
}

impl Backend for TableBackend {
    fn kind(&self) -> u32 {
        BACKEND_CUSTOM
    }

    fn now_ns(&self) -> u64 {
        // SAFETY: `new`'s contract.
        self.table.now_ns.map_or(0, |f| unsafe { f(self.table.ctx) })
    }

    fn prepare(&mut self) -> Result<(), Unready> {
        self.diag = BackendDiag { backend: BACKEND_CUSTOM, ..Default::default() };
        let Some(f) = self.table.prepare else { return Err(Unready::Unavailable(Self::missing("prepare"))) };
        // SAFETY: `new`'s contract.
        match unsafe { f(self.table.ctx) } {
            STEP_OK => Ok(()),
            STEP_LATCHED => Err(Unready::Latched(StepCause::TableLatched)),
            rc => Err(Unready::Unavailable(StepCause::TableStep { step: "prepare", rc })),
        }
    }

    fn alloc(&mut self, n: usize) -> Result<(), StepCause> {
        let f = self.table.alloc.ok_or_else(|| Self::missing("alloc"))?;
        // SAFETY: `new`'s contract; `n` fits in u32 (the engine caps jobs at JOB_MAX_ELEMENTS).
        step(unsafe { f(self.table.ctx, n as u32) }, "alloc")?;
        self.diag.buffers = 3;
        Ok(())
    }

    fn upload(&mut self, a: &[f32], b: &[f32]) -> Result<(), StepCause> {
        let f = self.table.upload.ok_or_else(|| Self::missing("upload"))?;
        // SAFETY: `new`'s contract; `a` and `b` are valid for `a.len()` f32 during the call.
        step(unsafe { f(self.table.ctx, a.as_ptr(), b.as_ptr(), a.len() as u32) }, "upload")
    }

    fn launch(&mut self, n: usize, timeouts: &Timeouts) -> Result<CompletedLaunch, LaunchFailure> {
        let Some(f) = self.table.launch else { return Err(LaunchFailure::Refused(Self::missing("launch"))) };
        let mut r = LaunchReport::default();
        // SAFETY: `new`'s contract; `timeouts` and `r` are valid for the call.
        let outcome = unsafe { f(self.table.ctx, n as u32, timeouts, &mut r) };
        // A wait code the engine does not know is the first wait: the earliest the failure can have been.
        let wait = match Wait::from_raw(r.wait) {
            Some(Wait::EngineIdle) => Wait::EngineIdle,
            _ => Wait::KernelDone,
        };
        self.diag.marker = r.marker;
        match outcome {
            LAUNCH_DONE => {
                self.diag.kernel_ns = r.kernel_ns;
                Ok(CompletedLaunch { kernel_ns: r.kernel_ns, marker: r.marker })
            }
            LAUNCH_REFUSED => Err(LaunchFailure::Refused(StepCause::TableRefused)),
            LAUNCH_POLL_REFUSED => Err(LaunchFailure::PollRefused(wait, StepCause::TablePollRefused)),
            LAUNCH_CANCELLED => Err(LaunchFailure::Cancelled(wait)),
            LAUNCH_FAULT => {
                self.diag.xid = r.xid;
                Err(LaunchFailure::Fault { wait, xid: r.xid, detail: StepCause::TableFault(r.xid) })
            }
            // A timeout, or an outcome code the engine does not know: the completion cannot be confirmed.
            _ => Err(LaunchFailure::Timeout(wait)),
        }
    }

    fn readback(&mut self, out: &mut [f32]) -> Result<(), StepCause> {
        let f = self.table.readback.ok_or_else(|| Self::missing("readback"))?;
        // SAFETY: `new`'s contract; `out` is valid for writes of `out.len()` f32 during the call.
        step(unsafe { f(self.table.ctx, out.as_mut_ptr(), out.len() as u32) }, "readback")
    }

    fn release(&mut self) {
        if let Some(f) = self.table.release {
            // SAFETY: `new`'s contract.
            unsafe { f(self.table.ctx) }
        }
    }

    fn diag(&self) -> BackendDiag {
        self.diag
    }
}
