//! # The job engine (EXPERIMENTAL)
//!
//! [`execute`] (`omega_gpu_execute`) runs one already-built [`Job`] through named [`State`]s — INITIAL,
//! VALIDATED, DEVICE_READY, ALLOCATED, UPLOADED, SUBMITTED, KERNEL_DONE, IDLE, READ_BACK, SUCCESS — and
//! returns a [`JobResult`] with success or exactly one named [`Failure`] (`OMEGA_GPU_ENGINE_*`), the [`Step`]
//! that failed and the completion [`Wait`] it failed in. Design choices:
//!
//! 1. **The engine names, the backend does.** A [`Backend`] has one method per step and reports only what
//!    that step can meet (an alloc fails with a text; a launch is refused, times out in a named wait, has its
//!    poll refused, is cancelled, or faults). The mapping to the one failure name lives here, once.
//! 2. **An uncertain completion blocks the process.** A lost marker, a refused poll or a cancel after submit
//!    means the device may still be running and writing the job's buffers: from then on every run in the
//!    process fails at the GATE with UNCERTAIN_COMPLETION_BLOCKED ([`is_blocked`]). So does a run whose
//!    backend finds its device latched. The block is process-wide state of this module; only the TEST ONLY
//!    hook [`test_reset_block`] clears it.
//! 3. **Backends.** [`SessionBackend`] runs on a session runtime (the process's by default: the GPU, or the
//!    simulator), with the repository's `vector_add` kernel. [`FakeBackend`] needs no runtime and fails on
//!    request at any step; tests use it. A caller may install its own ([`set_backend`]); a C caller gives a
//!    function table ([`BackendTable`], `OmegaGpuBackend`) wrapped by [`TableBackend`].
//! 4. **One run at a time.** The installed backend sits behind one mutex held for the whole run;
//!    [`is_blocked`] is an atomic load, safe from any thread.
//! 5. **A settable clock.** Result times come from the backend's clock unless [`set_clock`] installs another
//!    (or the TEST ONLY [`test_set_clock`] pins it). The clock has a mutex of its own, never held during a
//!    run: a run takes the clock in force when it starts, so setting it never waits for a run (a clock
//!    callback may even set it) and applies from the next run.

mod backend;
mod fake;
mod session;
mod table;
mod types;

pub use backend::{Backend, CompletedLaunch, LaunchFailure, StepCause, Unready};
pub use fake::{FakeBackend, FakeFault, FakeStats};
pub use session::SessionBackend;
pub use table::{
    BackendTable, LaunchReport, TableBackend, LAUNCH_CANCELLED, LAUNCH_DONE, LAUNCH_FAULT, LAUNCH_POLL_REFUSED,
    LAUNCH_REFUSED, LAUNCH_TIMEOUT, STEP_FAILED, STEP_LATCHED, STEP_OK,
};
pub use types::*;

use crate::sync::{self, AtomicBool, Mutex, Ordering};

/// `omega_gpu_engine_set_clock`'s argument: a clock in ns.
pub type ClockFn = extern "C" fn() -> u64;

#[derive(Clone, Copy, Debug)]
enum EngineClock {
    /// The backend's own.
    Backend,
    /// Installed by [`set_clock`].
    Fn(ClockFn),
    /// Pinned by [`test_set_clock`].
    Fixed(u64),
}

struct Engine {
    /// `None`: the session backend on the process runtime, made on first use.
    backend: Option<Box<dyn Backend>>,
}

struct Globals {
    blocked: AtomicBool,
    engine: Mutex<Engine>,
    /// Apart from `engine`, so that setting it never waits for a run (whose clock callback may set it).
    clock: Mutex<EngineClock>,
}

fn globals() -> &'static Globals {
    static GLOBALS: sync::OnceLock<Globals> = sync::OnceLock::new();
    GLOBALS.get_or_init(|| Globals {
        blocked: AtomicBool::new(false),
        engine: Mutex::new(Engine { backend: None }),
        clock: Mutex::new(EngineClock::Backend),
    })
}

/// The clock a run starting now reads.
fn current_clock() -> EngineClock {
    *sync::lock(&globals().clock)
}

/// `omega_gpu_execute`: runs `job` on the installed backend (by default the session backend on the process
/// runtime, whose lock the caller holds).
pub fn execute(job: &Job<'_>) -> JobResult {
    let g = globals();
    let mut e = sync::lock(&g.engine);
    let backend = e.backend.get_or_insert_with(|| Box::new(SessionBackend::process()));
    run(&mut **backend, job, current_clock(), &g.blocked)
}

/// Runs `job` on `backend` instead of the installed one, under the same rules: one run at a time, the
/// process-wide block and clock.
pub fn execute_on(backend: &mut dyn Backend, job: &Job<'_>) -> JobResult {
    let g = globals();
    let e = sync::lock(&g.engine);
    let r = run(backend, job, current_clock(), &g.blocked);
    drop(e);
    r
}

/// `omega_gpu_engine_set_backend`: installs `backend` for [`execute`] (`None`: back to the session backend on
/// the process runtime). Returns the one it replaces. Waits for a run in progress (so it must not be called
/// from inside one: a backend function or a clock callback).
pub fn set_backend(backend: Option<Box<dyn Backend>>) -> Option<Box<dyn Backend>> {
    std::mem::replace(&mut sync::lock(&globals().engine).backend, backend)
}

/// `omega_gpu_engine_is_blocked`: true once an uncertain completion blocked every later run. Any thread.
pub fn is_blocked() -> bool {
    globals().blocked.load(Ordering::SeqCst)
}

/// `omega_gpu_engine_set_clock`: the clock result times are read from (`None`: the backend's own), from the
/// next run on. Never waits for a run in progress, so a clock callback may call it too.
pub fn set_clock(clock: Option<ClockFn>) {
    *sync::lock(&globals().clock) = clock.map_or(EngineClock::Backend, EngineClock::Fn);
}

/// `omega_gpu_engine_test_reset_block`: clears the block. TEST ONLY (INTERNAL): a blocked process must stay
/// blocked, because the GPU may still be running and writing memory a later run would be handed.
pub fn test_reset_block() {
    globals().blocked.store(false, Ordering::SeqCst);
}

/// `omega_gpu_engine_test_force_block`: blocks as an uncertain completion would. TEST ONLY (INTERNAL).
pub fn test_force_block() {
    globals().blocked.store(true, Ordering::SeqCst);
}

/// `omega_gpu_engine_test_set_clock`: pins the engine clock at `now_ns` (it does not move until set again or
/// [`set_clock`] is called). TEST ONLY (INTERNAL).
pub fn test_set_clock(now_ns: u64) {
    *sync::lock(&globals().clock) = EngineClock::Fixed(now_ns);
}

/// The state machine of one run.
struct Run<'b> {
    backend: &'b mut dyn Backend,
    clock: EngineClock,
    r: JobResult,
}

impl Run<'_> {
    fn now(&self) -> u64 {
        match self.clock {
            EngineClock::Backend => self.backend.now_ns(),
            EngineClock::Fn(f) => f(),
            EngineClock::Fixed(t) => t,
        }
    }

    fn enter(&mut self, s: State) {
        let t = self.now();
        self.r.entered_ns[s as usize] = t;
        self.r.states |= 1 << s as u32;
        self.r.state = s as u32;
        if s != State::Failed {
            self.r.reached = s as u32;
        }
    }

    fn fail(mut self, failure: Failure, step: Step, wait: Wait, detail: &dyn std::fmt::Display) -> JobResult {
        self.r.failure = failure as u32;
        self.r.step = step as u32;
        self.r.wait = wait as u32;
        self.r.set_detail(&format!("engine {}: {detail}", step.name().to_ascii_lowercase()));
        self.enter(State::Failed);
        self.finish()
    }

    fn finish(mut self) -> JobResult {
        // A run refused before PREPARE never reached the backend: its diagnostics are an earlier run's.
        self.r.diag = if self.r.entered(State::Validated) {
            self.backend.diag()
        } else {
            BackendDiag { backend: self.backend.kind(), ..BackendDiag::default() }
        };
        self.r.finished_ns = self.now();
        self.r
    }
}

fn run(backend: &mut dyn Backend, job: &Job<'_>, clock: EngineClock, blocked: &AtomicBool) -> JobResult {
    let mut run = Run { backend, clock, r: JobResult::new() };
    run.r.started_ns = run.now();
    run.enter(State::Initial);
    if blocked.load(Ordering::SeqCst) {
        return run.fail(
            Failure::UncertainCompletionBlocked,
            Step::Gate,
            Wait::None,
            &"an earlier completion was uncertain; the GPU may still be running, so nothing runs again in this process",
        );
    }

    if job.layout() != LAYOUT_VECTOR_1D {
        let why = format!("layout {} is not OMEGA_GPU_LAYOUT_VECTOR_1D ({LAYOUT_VECTOR_1D})", job.layout());
        return run.fail(Failure::UnsupportedLayout, Step::Validate, Wait::None, &why);
    }
    let (a, b, out) = match job.parts() {
        Ok(p) => p,
        Err(why) => return run.fail(Failure::InvalidJob, Step::Validate, Wait::None, &why),
    };
    run.enter(State::Validated);

    match run.backend.prepare() {
        Ok(()) => run.enter(State::DeviceReady),
        Err(Unready::Unavailable(why)) => return run.fail(Failure::DeviceUnavailable, Step::Prepare, Wait::None, &why),
        Err(Unready::Latched(why)) => {
            blocked.store(true, Ordering::SeqCst);
            return run.fail(Failure::UncertainCompletionBlocked, Step::Prepare, Wait::None, &why);
        }
    }

    let n = a.len();
    if let Err(why) = run.backend.alloc(n) {
        run.backend.release();
        return run.fail(Failure::AllocFailed, Step::Alloc, Wait::None, &why);
    }
    run.enter(State::Allocated);

    // From here every path releases what the backend holds (parked by it if the completion was uncertain).
    let failed = (|| {
        if let Err(why) = run.backend.upload(a, b) {
            return Some((Failure::UploadFailed, Step::Upload, Wait::None, why.to_string()));
        }
        run.enter(State::Uploaded);
        match run.backend.launch(n, &job.timeouts) {
            Ok(_) => {
                run.enter(State::Submitted);
                run.enter(State::KernelDone);
                run.enter(State::Idle);
            }
            Err(f) => {
                let (failure, step, wait, why, uncertain) = classify(f);
                if uncertain {
                    blocked.store(true, Ordering::SeqCst);
                }
                if step == Step::Wait {
                    run.enter(State::Submitted);
                    if wait == Wait::EngineIdle {
                        run.enter(State::KernelDone);
                    }
                }
                return Some((failure, step, wait, why));
            }
        }
        // SAFETY: `out` is non-null (checked by `parts`) and, by the job's constructors, valid for writes of
        // `n` f32 for the job's lifetime and overlapping nothing else in use; the engine mutex makes this the
        // only run writing it.
        let out = unsafe { std::slice::from_raw_parts_mut(out, n) };
        if let Err(why) = run.backend.readback(out) {
            return Some((Failure::ReadbackFailed, Step::Readback, Wait::None, why.to_string()));
        }
        run.enter(State::ReadBack);
        None
    })();
    run.backend.release();
    match failed {
        Some((failure, step, wait, why)) => run.fail(failure, step, wait, &why),
        None => {
            run.enter(State::Success);
            run.finish()
        }
    }
}

/// The one failure a launch step's outcome is, its step and wait, and whether the completion is uncertain.
fn classify(f: LaunchFailure) -> (Failure, Step, Wait, String, bool) {
    match f {
        LaunchFailure::Refused(why) => (Failure::LaunchRefused, Step::Launch, Wait::None, why.to_string(), false),
        LaunchFailure::Timeout(w) => (
            Failure::CompletionTimeout,
            Step::Wait,
            w,
            format!("the {} marker did not arrive within its limit; completion uncertain", w.name()),
            true,
        ),
        LaunchFailure::PollRefused(w, why) => (Failure::PollRefused, Step::Wait, w, why.to_string(), true),
        LaunchFailure::Cancelled(w) => {
            (Failure::CompletionCancelled, Step::Wait, w, "cancelled after submit; completion uncertain".into(), true)
        }
        LaunchFailure::Fault { wait, detail, .. } => {
            (Failure::KernelFault, Step::Wait, wait, detail.to_string(), false)
        }
    }
}
