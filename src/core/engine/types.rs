//! The engine's C-layout structs (`OmegaGpuJob`, `OmegaGpuResult`, `OmegaGpuTimeouts`,
//! `OmegaGpuBackendDiag`) and its fixed names: states, failures, steps and waits.

use core::marker::PhantomData;

/// `OMEGA_GPU_LAYOUT_VECTOR_1D`: two f32 inputs and one f32 output of `n` elements (`out = a + b`).
pub const LAYOUT_VECTOR_1D: u32 = 1;
/// Most elements a VECTOR_1D job may have (1 GiB per buffer).
pub const JOB_MAX_ELEMENTS: u32 = 1 << 28;
/// Completion limit per wait when a job gives 0.
pub const DEFAULT_WAIT_MS: u32 = 5_000;
/// Bytes of [`JobResult::detail`], NUL included.
pub const DETAIL_BYTES: usize = 192;

macro_rules! named {
    ($(#[$m:meta])* $name:ident, $count:ident, $fname:ident, $unknown:literal { $($(#[$vm:meta])* $v:ident = $n:literal => $s:literal,)* }) => {
        $(#[$m])*
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $v = $n,)* }

        impl $name {
            /// Every value, in order.
            pub const ALL: &'static [$name] = &[$($name::$v,)*];

            /// The value of a C code, `None` for a code no value has.
            pub fn from_raw(code: u32) -> Option<Self> {
                match code { $($n => Some($name::$v),)* _ => None }
            }

            /// The fixed name.
            pub fn name(self) -> &'static str {
                match self { $($name::$v => $s,)* }
            }
        }

        /// Values of this kind.
        pub const $count: u32 = $name::ALL.len() as u32;

        /// The fixed name of a C code; an unknown code (a newer library's) gets a name saying so.
        pub fn $fname(code: u32) -> &'static str {
            $name::from_raw(code).map_or($unknown, $name::name)
        }
    };
}

named!(
    /// Where a run is. A run passes through them in this order and ends in `Success` or `Failed`.
    State, STATE_COUNT, state_name, "UNKNOWN_STATE" {
        /// The job was received.
        Initial = 0 => "INITIAL",
        /// The job has the one accepted shape and its pointers and size are sound.
        Validated = 1 => "VALIDATED",
        /// The backend's device is usable: open, not latched, its channel alive.
        DeviceReady = 2 => "DEVICE_READY",
        /// Device buffers for both inputs and the output exist.
        Allocated = 3 => "ALLOCATED",
        /// The inputs are on the device and the device output is poisoned.
        Uploaded = 4 => "UPLOADED",
        /// The kernel was handed to the device; from here a lost completion is uncertain.
        Submitted = 5 => "SUBMITTED",
        /// The KERNEL_DONE marker arrived: the grid completed.
        KernelDone = 6 => "KERNEL_DONE",
        /// The ENGINE_IDLE marker arrived: the engine went idle after the grid.
        Idle = 7 => "IDLE",
        /// The output was read back into the caller's memory.
        ReadBack = 8 => "READ_BACK",
        /// Done, every buffer released.
        Success = 9 => "SUCCESS",
        /// Ended with exactly one failure.
        Failed = 10 => "FAILED",
    }
);

named!(
    /// What went wrong: exactly one per failed run, `Ok` for a successful one.
    Failure, FAILURE_COUNT, failure_name, "OMEGA_GPU_ENGINE_UNKNOWN_FAILURE" {
        /// No failure.
        Ok = 0 => "OMEGA_GPU_ENGINE_OK",
        /// The job is malformed: a NULL pointer, `n` of 0 or past [`JOB_MAX_ELEMENTS`].
        InvalidJob = 1 => "OMEGA_GPU_ENGINE_INVALID_JOB",
        /// The layout is not [`LAYOUT_VECTOR_1D`].
        UnsupportedLayout = 2 => "OMEGA_GPU_ENGINE_UNSUPPORTED_LAYOUT",
        /// The backend's device is not usable: the session lock is not held by the caller, the device does
        /// not open, or its channel is dead after a fault (close and reopen).
        DeviceUnavailable = 3 => "OMEGA_GPU_ENGINE_DEVICE_UNAVAILABLE",
        /// A device buffer could not be allocated.
        AllocFailed = 4 => "OMEGA_GPU_ENGINE_ALLOC_FAILED",
        /// The inputs could not be made visible to the device.
        UploadFailed = 5 => "OMEGA_GPU_ENGINE_UPLOAD_FAILED",
        /// The launch was refused before the device saw it (no kernel code, a refused descriptor, a failed
        /// submit, a cancel before submit): certain, nothing ran.
        LaunchRefused = 6 => "OMEGA_GPU_ENGINE_LAUNCH_REFUSED",
        /// A completion marker did not arrive in time: uncertain, blocks the engine.
        CompletionTimeout = 7 => "OMEGA_GPU_ENGINE_COMPLETION_TIMEOUT",
        /// The completion poll was refused: uncertain, blocks the engine.
        PollRefused = 8 => "OMEGA_GPU_ENGINE_POLL_REFUSED",
        /// The run was cancelled after submit; the device cannot be stopped: uncertain, blocks the engine.
        CompletionCancelled = 9 => "OMEGA_GPU_ENGINE_COMPLETION_CANCELLED",
        /// The channel reported an error (Xid) during a wait: the work stopped, certain.
        KernelFault = 10 => "OMEGA_GPU_ENGINE_KERNEL_FAULT",
        /// The output could not be made visible to the CPU.
        ReadbackFailed = 11 => "OMEGA_GPU_ENGINE_READBACK_FAILED",
        /// An earlier completion was uncertain (or the backend's device is latched): the GPU may still be
        /// running, so nothing runs again in this process.
        UncertainCompletionBlocked = 12 => "OMEGA_GPU_ENGINE_UNCERTAIN_COMPLETION_BLOCKED",
    }
);

named!(
    /// What the engine was doing when a run failed.
    Step, STEP_COUNT, step_name, "UNKNOWN_STEP" {
        /// Nothing failed.
        None = 0 => "NONE",
        /// The entry check of the block flag.
        Gate = 1 => "GATE",
        /// Checking the job.
        Validate = 2 => "VALIDATE",
        /// Making the backend's device ready.
        Prepare = 3 => "PREPARE",
        /// Allocating device buffers.
        Alloc = 4 => "ALLOC",
        /// Uploading the inputs.
        Upload = 5 => "UPLOAD",
        /// Placing the kernel and submitting it.
        Launch = 6 => "LAUNCH",
        /// Waiting for a completion marker (which one: [`Wait`]).
        Wait = 7 => "WAIT",
        /// Reading the output back.
        Readback = 8 => "READBACK",
    }
);

named!(
    /// The completion wait a run failed in.
    Wait, WAIT_COUNT, wait_name, "UNKNOWN_WAIT" {
        /// Not in a completion wait.
        None = 0 => "NONE",
        /// Marker 0: released when the grid has completed.
        KernelDone = 1 => "KERNEL_DONE",
        /// Marker 1: released after the engine has gone idle.
        EngineIdle = 2 => "ENGINE_IDLE",
    }
);

/// `OmegaGpuTimeouts`: the limit of each completion wait, ms (0: [`DEFAULT_WAIT_MS`]). Past it the
/// completion is uncertain and the engine blocks.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timeouts {
    /// The KERNEL_DONE wait.
    pub kernel_done_ms: u32,
    /// The ENGINE_IDLE wait.
    pub engine_idle_ms: u32,
    /// Spin-poll window before sleep-polling, us (0: the process-wide setting).
    pub spin_us: u32,
}

impl Timeouts {
    /// The same limit for both waits.
    pub fn both(ms: u32) -> Self {
        Timeouts { kernel_done_ms: ms, engine_idle_ms: ms, spin_us: 0 }
    }

    /// The limits with 0 replaced by the default.
    pub fn resolved(self) -> [u32; 2] {
        let d = |ms: u32| if ms == 0 { DEFAULT_WAIT_MS } else { ms };
        [d(self.kernel_done_ms), d(self.engine_idle_ms)]
    }
}

/// `OmegaGpuJob`: one built job. Today only [`LAYOUT_VECTOR_1D`]: `out[i] = a[i] + b[i]` for `i < n`.
///
/// The pointers are the caller's memory, borrowed for `'a` (the safe constructor takes slices; the C
/// layer reads a C job through [`Job::from_raw_parts`]). The engine writes `out` only when the whole run
/// succeeded.
#[repr(C)]
#[derive(Debug)]
pub struct Job<'a> {
    layout: u32,
    n: u32,
    a: *const f32,
    b: *const f32,
    out: *mut f32,
    /// Completion limits.
    pub timeouts: Timeouts,
    _borrow: PhantomData<&'a mut [f32]>,
}

/// Why [`Job::vector_1d`] refused its slices.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("job: OMEGA_GPU_ENGINE_INVALID_JOB: inputs of {a} and {b} elements and an output of {out} differ")]
pub struct LengthMismatch {
    /// Elements of `a`.
    pub a: usize,
    /// Elements of `b`.
    pub b: usize,
    /// Elements of `out`.
    pub out: usize,
}

impl<'a> Job<'a> {
    /// A VECTOR_1D job over slices of one length (`n` of 0 or past [`JOB_MAX_ELEMENTS`] is built, and refused
    /// by the engine as INVALID_JOB).
    pub fn vector_1d(a: &'a [f32], b: &'a [f32], out: &'a mut [f32]) -> Result<Self, LengthMismatch> {
        if a.len() != out.len() || b.len() != out.len() {
            return Err(LengthMismatch { a: a.len(), b: b.len(), out: out.len() });
        }
        let n = u32::try_from(out.len()).unwrap_or(u32::MAX);
        Ok(Job {
            layout: LAYOUT_VECTOR_1D,
            n,
            a: a.as_ptr(),
            b: b.as_ptr(),
            out: out.as_mut_ptr(),
            timeouts: Timeouts::default(),
            _borrow: PhantomData,
        })
    }

    /// A job as C describes it.
    ///
    /// # Safety
    /// - Each of `a`, `b` (readable) and `out` (writable) is null or valid for `n` f32 for `'a`, and `out`
    ///   overlaps neither input nor anything else in use during `'a`.
    pub unsafe fn from_raw_parts(
        layout: u32,
        n: u32,
        a: *const f32,
        b: *const f32,
        out: *mut f32,
        timeouts: Timeouts,
    ) -> Self {
        Job { layout, n, a, b, out, timeouts, _borrow: PhantomData }
    }

    /// The same job with another layout code (how a caller asks for a shape the engine does not run).
    pub fn with_layout(mut self, layout: u32) -> Self {
        self.layout = layout;
        self
    }

    /// The same job with `timeouts`.
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// The layout code.
    pub fn layout(&self) -> u32 {
        self.layout
    }

    /// Elements.
    pub fn n(&self) -> u32 {
        self.n
    }

    /// The job's memory, once validated: `None` for a NULL pointer or an `n` out of range.
    pub(crate) fn parts(&self) -> Result<(&'a [f32], &'a [f32], *mut f32), String> {
        if self.n == 0 || self.n > JOB_MAX_ELEMENTS {
            return Err(format!("n is {}, not in 1..={JOB_MAX_ELEMENTS}", self.n));
        }
        for (name, p) in [("a", self.a.is_null()), ("b", self.b.is_null()), ("out", self.out.is_null())] {
            if p {
                return Err(format!("{name} is NULL"));
            }
        }
        // SAFETY: non-null (checked) and, by the constructors' contracts (slices of length n, or the
        // caller of `from_raw_parts`), valid for reads of `n` f32 for 'a.
        let (a, b) = unsafe {
            (std::slice::from_raw_parts(self.a, self.n as usize), std::slice::from_raw_parts(self.b, self.n as usize))
        };
        Ok((a, b, self.out))
    }
}

/// `OMEGA_GPU_ENGINE_BACKEND_*`: which kind of backend ran a job.
pub const BACKEND_SESSION: u32 = 0;
/// The fake backend (tests).
pub const BACKEND_FAKE: u32 = 1;
/// A backend supplied by the caller.
pub const BACKEND_CUSTOM: u32 = 2;

/// `OmegaGpuBackendDiag`: what the backend saw of the run.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendDiag {
    /// [`BACKEND_SESSION`], [`BACKEND_FAKE`] or [`BACKEND_CUSTOM`].
    pub backend: u32,
    /// The first marker word observed (the submission's sequence number), 0 if none.
    pub marker: u32,
    /// The channel's error code (Xid) of a kernel fault, 0 if none.
    pub xid: u32,
    /// Device buffers the run held at its peak (inputs, output, code).
    pub buffers: u32,
    /// Submit to the ENGINE_IDLE marker, backend-clock ns (0 if the run did not get there).
    pub kernel_ns: u64,
}

/// `OmegaGpuResult`: how a run ended. Exactly one failure; the failed step and wait; the states passed.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct JobResult {
    /// A [`Failure`] code ([`Failure::Ok`] on success).
    pub failure: u32,
    /// The final [`State`]: SUCCESS or FAILED.
    pub state: u32,
    /// The last state reached before the end (SUCCESS on success; e.g. UPLOADED when the launch was refused).
    pub reached: u32,
    /// The [`Step`] that failed (NONE on success).
    pub step: u32,
    /// The [`Wait`] the failure happened in (NONE outside a completion wait).
    pub wait: u32,
    /// Bit `1 << state` for every state entered, the final one included.
    pub states: u32,
    /// Engine-clock ns at which each state was entered (0: not entered), indexed by state code.
    pub entered_ns: [u64; STATE_COUNT as usize],
    /// Engine-clock ns at the start and the end of the run.
    pub started_ns: u64,
    /// See `started_ns`.
    pub finished_ns: u64,
    /// What the backend saw.
    pub diag: BackendDiag,
    /// The failure's text, NUL-terminated UTF-8 (empty on success): the step's stage and the backend's words.
    pub detail: [u8; DETAIL_BYTES],
}

static_assertions::assert_eq_size!(Timeouts, [u32; 3]);
static_assertions::assert_eq_size!(BackendDiag, [u64; 3]);
static_assertions::assert_eq_size!(JobResult, [u8; 24 + 8 * 11 + 16 + 24 + DETAIL_BYTES]);

impl JobResult {
    pub(crate) fn new() -> Self {
        JobResult {
            failure: Failure::Ok as u32,
            state: State::Initial as u32,
            reached: State::Initial as u32,
            step: Step::None as u32,
            wait: Wait::None as u32,
            states: 0,
            entered_ns: [0; STATE_COUNT as usize],
            started_ns: 0,
            finished_ns: 0,
            diag: BackendDiag::default(),
            detail: [0; DETAIL_BYTES],
        }
    }

    /// True for a run that ended in SUCCESS.
    pub fn is_success(&self) -> bool {
        self.failure == Failure::Ok as u32 && self.state == State::Success as u32
    }

    /// The failure.
    pub fn failure(&self) -> Option<Failure> {
        Failure::from_raw(self.failure)
    }

    /// The final state.
    pub fn state(&self) -> Option<State> {
        State::from_raw(self.state)
    }

    /// The last state reached before the end.
    pub fn reached(&self) -> Option<State> {
        State::from_raw(self.reached)
    }

    /// The failed step.
    pub fn step(&self) -> Option<Step> {
        Step::from_raw(self.step)
    }

    /// The wait the failure happened in.
    pub fn wait(&self) -> Option<Wait> {
        Wait::from_raw(self.wait)
    }

    /// True when the run entered `s`.
    pub fn entered(&self, s: State) -> bool {
        self.states & (1 << s as u32) != 0
    }

    /// The states entered, in order.
    pub fn path(&self) -> Vec<State> {
        State::ALL.iter().copied().filter(|s| self.entered(*s)).collect()
    }

    /// The failure text.
    pub fn detail(&self) -> &str {
        let end = self.detail.iter().position(|&b| b == 0).unwrap_or(DETAIL_BYTES);
        // Written whole by `set_detail`, which cuts at a character boundary.
        std::str::from_utf8(&self.detail[..end]).unwrap_or("")
    }

    pub(crate) fn set_detail(&mut self, text: &str) {
        let mut end = text.len().min(DETAIL_BYTES - 1);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.detail = [0; DETAIL_BYTES];
        self.detail[..end].copy_from_slice(&text.as_bytes()[..end]);
    }
}

impl core::fmt::Debug for JobResult {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("JobResult")
            .field("failure", &failure_name(self.failure))
            .field("state", &state_name(self.state))
            .field("reached", &state_name(self.reached))
            .field("step", &step_name(self.step))
            .field("wait", &wait_name(self.wait))
            .field("path", &self.path())
            .field("diag", &self.diag)
            .field("detail", &self.detail())
            .finish()
    }
}

impl core::fmt::Display for JobResult {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.is_success() {
            return write!(f, "{}", failure_name(self.failure));
        }
        write!(
            f,
            "{} at step {} (wait {}, reached {}): {}",
            failure_name(self.failure),
            step_name(self.step),
            wait_name(self.wait),
            state_name(self.reached),
            self.detail()
        )
    }
}
