//! The job engine on the simulator and on the fake backend. The engine's block flag, backend and clock are
//! process-wide, so every test here takes one mutex; the session backend runs on private runtimes, so
//! their latches stay local.

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

use omega::engine::{
    self, execute, execute_on, failure_name, set_backend, state_name, step_name, wait_name, Backend, Failure,
    FakeBackend, FakeFault, Job, JobResult, SessionBackend, State, Step, Timeouts, Wait, BACKEND_FAKE, BACKEND_SESSION,
    FAILURE_COUNT, JOB_MAX_ELEMENTS, LAYOUT_VECTOR_1D, STATE_COUNT, STEP_COUNT, WAIT_COUNT,
};
use omega::platform::Installed;
use omega::session::Runtime;
use omega_hal::sim::{Sim, SimConfig, SimFault};
use rand::{Rng, SeedableRng};

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    let g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // A test that failed may have left the block set; each test starts from a clear engine.
    engine::test_reset_block();
    engine::set_clock(None);
    g
}

/// A private runtime on its own simulator (with `config`), locked by this thread and open, leaked so the
/// backend can hold it for the rest of the process.
fn private(config: SimConfig) -> (&'static Runtime, std::sync::Arc<Sim>) {
    let sim = Sim::with_config(config);
    omega::kernels::register_host_kernels(&sim);
    let rt: &'static Runtime = Box::leak(Box::new(Runtime::with_platform(Installed::simulator(sim.clone())).unwrap()));
    rt.lock().unwrap();
    rt.open().expect("sim opens");
    (rt, sim)
}

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-1e4f32..1e4)).collect()
}

/// Runs a VECTOR_1D job of `n` random elements on `backend`; returns the result and the output, which was
/// poisoned with NaN before the run.
fn run_vector(backend: &mut dyn Backend, n: usize, seed: u64, timeouts: Timeouts) -> (JobResult, Vec<f32>, Vec<f32>) {
    let (a, b) = (random(n, seed), random(n, seed + 1));
    let mut out = vec![f32::NAN; n];
    let r = execute_on(backend, &Job::vector_1d(&a, &b, &mut out).unwrap().with_timeouts(timeouts));
    (r, out, omega::kernels::vector_add_ref(&a, &b))
}

fn assert_failed(r: &JobResult, failure: Failure, step: Step, wait: Wait, reached: State) {
    assert_eq!(r.failure(), Some(failure), "{r}");
    assert_eq!(r.state(), Some(State::Failed), "{r}");
    assert_eq!(r.step(), Some(step), "{r}");
    assert_eq!(r.wait(), Some(wait), "{r}");
    assert_eq!(r.reached(), Some(reached), "{r}");
    assert!(r.entered(State::Failed) && !r.entered(State::Success), "{r}");
    assert!(r.detail().starts_with(&format!("engine {}: ", step.name().to_ascii_lowercase())), "{r}");
}

fn untouched(out: &[f32]) -> bool {
    out.iter().all(|v| v.is_nan())
}

#[test]
fn a_vector_job_on_the_session_backend_matches_the_cpu_reference_through_every_state() {
    let _g = serial();
    let (rt, sim) = private(SimConfig::default());
    let live = sim.stats().live_allocations;
    let mut backend = SessionBackend::on(rt);
    for (n, seed) in [(1usize, 1u64), (255, 2), (4097, 3), (100_000, 4)] {
        let (r, out, want) = run_vector(&mut backend, n, seed, Timeouts::default());
        assert!(r.is_success(), "{r}");
        assert_eq!(r.to_string(), "OMEGA_GPU_ENGINE_OK");
        assert_eq!((r.step(), r.wait(), r.reached()), (Some(Step::None), Some(Wait::None), Some(State::Success)));
        assert_eq!(
            out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "n = {n}"
        );
        let path = r.path();
        assert_eq!(path, State::ALL[..=State::Success as usize].to_vec(), "every state but FAILED, in order");
        let times: Vec<u64> = path.iter().map(|s| r.entered_ns[*s as usize]).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]) && times[0] >= r.started_ns, "{times:?}");
        assert!(r.finished_ns >= times[times.len() - 1]);
        assert_eq!(r.diag.backend, BACKEND_SESSION);
        assert_eq!(r.diag.buffers, 4, "a, b, out and the kernel's code");
        assert!(r.diag.marker != 0 && r.diag.kernel_ns >= sim.config().launch_ns, "{:?}", r.diag);
        // The memory manager keeps the chunk the buffers were carved from as its spare; nothing else stays.
        let ms = rt.memory_stats();
        assert_eq!(ms.carved.buffers, 0, "every carved buffer released");
        assert_eq!(sim.stats().live_allocations, live + ms.carved.chunks as usize, "every buffer released");
    }
    let launch = sim.launches().pop().unwrap();
    assert_eq!(launch.kernel, "vector_add");
    assert_eq!((launch.block, launch.grid), ([256, 1, 1], [100_000u32.div_ceil(256), 1, 1]));
    assert!(!engine::is_blocked());
}

#[test]
fn malformed_jobs_and_other_layouts_fail_in_validate() {
    let _g = serial();
    let fake = FakeBackend::new();
    let mut backend = fake.clone();
    let r = execute_on(&mut backend, &Job::vector_1d(&[], &[], &mut []).unwrap());
    assert_failed(&r, Failure::InvalidJob, Step::Validate, Wait::None, State::Initial);
    assert!(r.detail().contains("n is 0"), "{r}");
    let a = [1.0f32; 4];
    let mut out = [f32::NAN; 4];
    // SAFETY: the non-null pointers are valid for 4 f32; the null one is what is being refused.
    let null = unsafe {
        Job::from_raw_parts(LAYOUT_VECTOR_1D, 4, a.as_ptr(), std::ptr::null(), out.as_mut_ptr(), Timeouts::default())
    };
    let r = execute_on(&mut backend, &null);
    assert_failed(&r, Failure::InvalidJob, Step::Validate, Wait::None, State::Initial);
    assert!(r.detail().contains("b is NULL"), "{r}");
    // SAFETY: every pointer is null, which is allowed; the size is what is being refused.
    let huge = unsafe {
        Job::from_raw_parts(
            LAYOUT_VECTOR_1D,
            JOB_MAX_ELEMENTS + 1,
            std::ptr::null(),
            std::ptr::null(),
            std::ptr::null_mut(),
            Timeouts::default(),
        )
    };
    assert_failed(&execute_on(&mut backend, &huge), Failure::InvalidJob, Step::Validate, Wait::None, State::Initial);
    let b = [2.0f32; 4];
    let r = execute_on(&mut backend, &Job::vector_1d(&a, &b, &mut out).unwrap().with_layout(2));
    assert_failed(&r, Failure::UnsupportedLayout, Step::Validate, Wait::None, State::Initial);
    assert!(r.detail().contains("layout 2 is not OMEGA_GPU_LAYOUT_VECTOR_1D"), "{r}");
    assert!(untouched(&out));
    assert_eq!(fake.stats().calls, [0; 6], "a job refused in validate never reaches the backend");
    let e = Job::vector_1d(&a, &b[..3], &mut out).unwrap_err();
    assert!(e.to_string().contains("INVALID_JOB"), "{e}");
}

#[test]
fn certain_failures_on_the_session_backend_are_named_and_do_not_block() {
    let _g = serial();
    let (rt, sim) = private(SimConfig::default());
    let mut backend = SessionBackend::on(rt);
    let live = sim.stats().live_allocations;
    let t = Timeouts::default();

    rt.unlock().unwrap();
    let (r, out, _) = run_vector(&mut backend, 64, 1, t);
    assert_failed(&r, Failure::DeviceUnavailable, Step::Prepare, Wait::None, State::Validated);
    assert!(r.detail().contains("does not hold the session lock"), "{r}");
    assert!(untouched(&out));
    rt.lock().unwrap();

    // Buffers past the largest carved size (4 MiB each): their own platform allocations, the first of
    // which the fault refuses.
    sim.inject(SimFault::FailAlloc);
    let (r, out, _) = run_vector(&mut backend, 1 << 20, 2, t);
    assert_failed(&r, Failure::AllocFailed, Step::Alloc, Wait::None, State::DeviceReady);
    assert!(r.detail().contains("out of device memory"), "{r}");
    assert!(untouched(&out));

    sim.inject(SimFault::FailSync);
    let (r, out, _) = run_vector(&mut backend, 64, 3, t);
    assert_failed(&r, Failure::UploadFailed, Step::Upload, Wait::None, State::Allocated);
    assert!(untouched(&out));

    rt.cancel();
    let launches = sim.stats().launches;
    let (r, out, _) = run_vector(&mut backend, 64, 4, t);
    assert_failed(&r, Failure::LaunchRefused, Step::Launch, Wait::None, State::Uploaded);
    assert!(r.detail().contains("cancelled before submit"), "{r}");
    assert_eq!(sim.stats().launches, launches, "nothing ran");
    assert!(untouched(&out));
    let ms = rt.memory_stats();
    assert_eq!(ms.carved.buffers, 0, "each failed run released what it carved");
    assert_eq!(sim.stats().live_allocations, live + ms.carved.chunks as usize, "each failed run released what it held");

    sim.inject(SimFault::KernelFault(31));
    let (r, out, _) = run_vector(&mut backend, 64, 5, t);
    assert_failed(&r, Failure::KernelFault, Step::Wait, Wait::KernelDone, State::Submitted);
    assert_eq!(r.diag.xid, 31);
    assert!(r.detail().contains("Xid 31"), "{r}");
    assert!(untouched(&out));
    assert!(!engine::is_blocked() && !rt.is_blocked(), "a fault stopped the work: completion is certain");
    let (r, _, _) = run_vector(&mut backend, 64, 6, t);
    assert_failed(&r, Failure::DeviceUnavailable, Step::Prepare, Wait::None, State::Validated);
    assert!(r.detail().contains("channel is dead"), "{r}");

    rt.unlock().unwrap();
    rt.close().unwrap();
    rt.lock().unwrap();
    let (r, out, want) = run_vector(&mut backend, 64, 7, t);
    assert!(r.is_success(), "the backend reopens a closed device: {r}");
    assert_eq!(out, want);
}

#[test]
fn uncertain_completions_block_every_later_run_until_the_test_hook_clears_it() {
    let _g = serial();
    let healthy = FakeBackend::new();
    let t = Timeouts::both(100);

    // KERNEL_DONE never arrives.
    let (rt, sim) = private(SimConfig::default());
    let mut backend = SessionBackend::on(rt);
    sim.inject(SimFault::Hang);
    let (r, out, _) = run_vector(&mut backend, 300, 1, t);
    assert_failed(&r, Failure::CompletionTimeout, Step::Wait, Wait::KernelDone, State::Submitted);
    assert!(untouched(&out), "an uncertain run never writes the caller's output");
    assert!(engine::is_blocked() && rt.is_blocked());
    assert_eq!(rt.parked().buffers, 5, "the marker buffer and the run's four buffers: parked, not released");
    assert_eq!(sim.stats().frees, 0);

    // Blocked: every later run fails at the gate, on any backend, before touching it.
    let mut other = healthy.clone();
    let (r, _, _) = run_vector(&mut other, 8, 2, t);
    assert_failed(&r, Failure::UncertainCompletionBlocked, Step::Gate, Wait::None, State::Initial);
    assert_eq!(r.path(), [State::Initial, State::Failed]);
    assert_eq!(healthy.stats().calls, [0; 6]);
    assert_eq!(r.diag, engine::BackendDiag { backend: BACKEND_FAKE, ..Default::default() });
    let (r, _, _) = run_vector(&mut backend, 8, 2, t);
    assert_failed(&r, Failure::UncertainCompletionBlocked, Step::Gate, Wait::None, State::Initial);
    assert_eq!(r.diag.buffers, 0, "the gate reports nothing of the earlier run's buffers: {:?}", r.diag);

    // A backend whose device is latched blocks the engine again, at PREPARE.
    engine::test_reset_block();
    let (r, _, _) = run_vector(&mut backend, 8, 3, t);
    assert_failed(&r, Failure::UncertainCompletionBlocked, Step::Prepare, Wait::None, State::Validated);
    assert!(engine::is_blocked());

    // ENGINE_IDLE never arrives: the grid completed, the engine did not go idle in time.
    engine::test_reset_block();
    let (rt, _sim) = private(SimConfig { idle_ns: 10_000_000_000, ..Default::default() });
    let (r, _, _) = run_vector(&mut SessionBackend::on(rt), 300, 4, t);
    assert_failed(&r, Failure::CompletionTimeout, Step::Wait, Wait::EngineIdle, State::KernelDone);
    assert!(engine::is_blocked());

    engine::test_reset_block();
    let (rt, sim) = private(SimConfig::default());
    sim.inject(SimFault::RefusePoll);
    let (r, _, _) = run_vector(&mut SessionBackend::on(rt), 300, 5, t);
    assert_failed(&r, Failure::PollRefused, Step::Wait, Wait::KernelDone, State::Submitted);
    assert!(engine::is_blocked());

    engine::test_reset_block();
    let (rt, sim) = private(SimConfig::default());
    sim.inject(SimFault::Hang);
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            while sim.stats().submissions == 0 {
                std::thread::yield_now();
            }
            rt.cancel();
        });
        run_vector(&mut SessionBackend::on(rt), 300, 6, Timeouts::both(100_000)).0
    });
    assert_failed(&r, Failure::CompletionCancelled, Step::Wait, Wait::KernelDone, State::Submitted);
    assert!(engine::is_blocked());

    engine::test_reset_block();
    engine::test_force_block();
    assert!(engine::is_blocked());
    engine::test_reset_block();
    let (r, out, want) = run_vector(&mut healthy.clone(), 8, 7, t);
    assert!(r.is_success(), "{r}");
    assert_eq!(out, want);
}

#[test]
fn every_state_failure_step_and_wait_is_reached_on_the_fake_backend() {
    let _g = serial();
    let mut results: Vec<JobResult> = Vec::new();
    let scenarios: Vec<Option<FakeFault>> = vec![
        None,
        Some(FakeFault::Unavailable),
        Some(FakeFault::Latched),
        Some(FakeFault::Alloc),
        Some(FakeFault::Upload),
        Some(FakeFault::Refuse),
        Some(FakeFault::Timeout(Wait::KernelDone)),
        Some(FakeFault::Timeout(Wait::EngineIdle)),
        Some(FakeFault::RefusePoll(Wait::EngineIdle)),
        Some(FakeFault::Cancel(Wait::KernelDone)),
        Some(FakeFault::Fault(Wait::EngineIdle, 13)),
        Some(FakeFault::Readback),
    ];
    for fault in scenarios {
        engine::test_reset_block();
        let fake = FakeBackend::new();
        if let Some(f) = fault.clone() {
            fake.inject(f);
        }
        let (r, out, want) = run_vector(&mut fake.clone(), 33, 9, Timeouts::default());
        assert_eq!(fake.pending_faults(), 0, "{fault:?} fired");
        assert_eq!(r.diag.backend, BACKEND_FAKE);
        let st = fake.stats();
        assert_eq!(st.live_buffers, 0, "{fault:?}: released");
        assert_eq!(st.calls[5], st.calls[1], "{fault:?}: one release after each alloc, failed or not");
        if r.is_success() {
            assert_eq!(out, want);
        } else {
            assert!(untouched(&out), "{fault:?}: a failed run leaves the output alone");
        }
        let expect = match &fault {
            None => None,
            Some(FakeFault::Unavailable) => Some((Failure::DeviceUnavailable, Step::Prepare, Wait::None)),
            Some(FakeFault::Latched) => Some((Failure::UncertainCompletionBlocked, Step::Prepare, Wait::None)),
            Some(FakeFault::Alloc) => Some((Failure::AllocFailed, Step::Alloc, Wait::None)),
            Some(FakeFault::Upload) => Some((Failure::UploadFailed, Step::Upload, Wait::None)),
            Some(FakeFault::Refuse) => Some((Failure::LaunchRefused, Step::Launch, Wait::None)),
            Some(FakeFault::Timeout(w)) => Some((Failure::CompletionTimeout, Step::Wait, *w)),
            Some(FakeFault::RefusePoll(w)) => Some((Failure::PollRefused, Step::Wait, *w)),
            Some(FakeFault::Cancel(w)) => Some((Failure::CompletionCancelled, Step::Wait, *w)),
            Some(FakeFault::Fault(w, _)) => Some((Failure::KernelFault, Step::Wait, *w)),
            Some(FakeFault::Readback) => Some((Failure::ReadbackFailed, Step::Readback, Wait::None)),
            Some(FakeFault::SkipCompute) => None,
        };
        match expect {
            None => assert!(r.is_success(), "{r}"),
            Some((f, s, w)) => {
                assert_eq!((r.failure(), r.step(), r.wait()), (Some(f), Some(s), Some(w)), "{fault:?}: {r}");
                let uncertain = matches!(
                    f,
                    Failure::CompletionTimeout
                        | Failure::PollRefused
                        | Failure::CompletionCancelled
                        | Failure::UncertainCompletionBlocked
                );
                assert_eq!(engine::is_blocked(), uncertain, "{fault:?}: blocks exactly when uncertain");
            }
        }
        results.push(r);
    }
    // The job itself: malformed, and of a shape the engine does not run.
    let mut fake = FakeBackend::new();
    results.push(execute_on(&mut fake, &Job::vector_1d(&[], &[], &mut []).unwrap()));
    let mut out = [0.0f32; 2];
    results.push(execute_on(&mut fake, &Job::vector_1d(&[1.0; 2], &[2.0; 2], &mut out).unwrap().with_layout(9)));
    // The gate.
    engine::test_force_block();
    results.push(run_vector(&mut FakeBackend::new(), 4, 10, Timeouts::default()).0);
    engine::test_reset_block();

    let states: HashSet<&str> = results.iter().flat_map(|r| r.path()).map(State::name).collect();
    let failures: HashSet<&str> = results.iter().map(|r| failure_name(r.failure)).collect();
    let steps: HashSet<&str> = results.iter().map(|r| step_name(r.step)).collect();
    let waits: HashSet<&str> = results.iter().map(|r| wait_name(r.wait)).collect();
    assert_eq!(states.len(), STATE_COUNT as usize, "{states:?}");
    assert_eq!(failures.len(), FAILURE_COUNT as usize, "{failures:?}");
    assert_eq!(steps.len(), STEP_COUNT as usize, "{steps:?}");
    assert_eq!(waits.len(), WAIT_COUNT as usize, "{waits:?}");
}

#[test]
fn names_are_fixed_and_an_unknown_code_says_so() {
    let _g = serial();
    let states: Vec<&str> = (0..STATE_COUNT).map(state_name).collect();
    assert_eq!(
        states,
        [
            "INITIAL",
            "VALIDATED",
            "DEVICE_READY",
            "ALLOCATED",
            "UPLOADED",
            "SUBMITTED",
            "KERNEL_DONE",
            "IDLE",
            "READ_BACK",
            "SUCCESS",
            "FAILED"
        ]
    );
    let failures: Vec<&str> = (0..FAILURE_COUNT).map(failure_name).collect();
    assert!(failures.iter().all(|n| n.starts_with("OMEGA_GPU_ENGINE_")), "{failures:?}");
    assert_eq!(failures.iter().collect::<HashSet<_>>().len(), failures.len(), "distinct");
    assert_eq!(
        failure_name(Failure::UncertainCompletionBlocked as u32),
        "OMEGA_GPU_ENGINE_UNCERTAIN_COMPLETION_BLOCKED"
    );
    assert_eq!(failure_name(Failure::InvalidJob as u32), "OMEGA_GPU_ENGINE_INVALID_JOB");
    let steps: Vec<&str> = (0..STEP_COUNT).map(step_name).collect();
    assert_eq!(steps, ["NONE", "GATE", "VALIDATE", "PREPARE", "ALLOC", "UPLOAD", "LAUNCH", "WAIT", "READBACK"]);
    let waits: Vec<&str> = (0..WAIT_COUNT).map(wait_name).collect();
    assert_eq!(waits, ["NONE", "KERNEL_DONE", "ENGINE_IDLE"]);
    assert_eq!(state_name(99), "UNKNOWN_STATE");
    assert_eq!(failure_name(99), "OMEGA_GPU_ENGINE_UNKNOWN_FAILURE");
    assert_eq!(step_name(99), "UNKNOWN_STEP");
    assert_eq!(wait_name(99), "UNKNOWN_WAIT");
    for s in State::ALL {
        assert_eq!(State::from_raw(*s as u32), Some(*s));
    }
}

extern "C" fn counting_clock() -> u64 {
    static NOW: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1_000);
    NOW.fetch_add(10, std::sync::atomic::Ordering::SeqCst)
}

#[test]
fn the_engine_clock_is_settable_and_pinnable() {
    let _g = serial();
    let mut fake = FakeBackend::new();
    engine::set_clock(Some(counting_clock));
    let (r, _, _) = run_vector(&mut fake, 4, 1, Timeouts::default());
    let times: Vec<u64> = r.path().iter().map(|s| r.entered_ns[*s as usize]).collect();
    assert!(times.windows(2).all(|w| w[1] == w[0] + 10), "one read per state from the installed clock: {times:?}");
    assert_eq!(r.started_ns + 10, times[0]);

    engine::test_set_clock(42);
    let (r, _, _) = run_vector(&mut fake, 4, 2, Timeouts::default());
    assert!(r.path().iter().all(|s| r.entered_ns[*s as usize] == 42));
    assert_eq!((r.started_ns, r.finished_ns), (42, 42));

    engine::set_clock(None);
    let (r, _, _) = run_vector(&mut fake, 4, 3, Timeouts::default());
    assert!(r.started_ns > 0 && r.finished_ns > r.started_ns, "the backend's own clock moves: {r:?}");
}

/// The runtime the meddling clock below reaches for, its simulator, and what its calls answered.
static MEDDLED: std::sync::OnceLock<(&'static Runtime, std::sync::Arc<Sim>)> = std::sync::OnceLock::new();
/// For each meddling call: whether the lock was still held, and what the unlock and the close answered.
type Meddled = (bool, Result<(), omega::Error>, Result<(), omega::Error>);
static MEDDLING: Mutex<Vec<Meddled>> = Mutex::new(Vec::new());

/// A clock callback that tries to take the run's buffers away while the run holds them (the session has
/// buffers live besides its launch buffer): it hands the lock back (so that another thread, or itself,
/// could close the device) and closes.
extern "C" fn meddling_clock() -> u64 {
    let (rt, _) = MEDDLED.get().expect("set before the run");
    let ms = rt.memory_stats();
    if ms.carved.buffers + ms.direct_buffers > 1 {
        let unlocked = rt.unlock();
        let closed = rt.close();
        MEDDLING.lock().unwrap().push((rt.holds_lock(), unlocked, closed));
    }
    rt.now_ns()
}

#[test]
fn a_clock_callback_cannot_let_the_lock_go_under_a_session_run() {
    let _g = serial();
    let (rt, sim) = private(SimConfig::default());
    assert!(MEDDLED.set((rt, sim.clone())).is_ok(), "one run of this test per process");
    engine::set_clock(Some(meddling_clock));
    let (r, out, want) = run_vector(&mut SessionBackend::on(rt), 300, 11, Timeouts::default());
    engine::set_clock(None);
    assert!(r.is_success(), "{r}");
    assert_eq!(out, want);
    let seen = MEDDLING.lock().unwrap().clone();
    assert!(seen.len() >= 5, "ALLOCATED to READ_BACK read the clock while the run held its buffers: {seen:?}");
    let refused = (
        true,
        Err(omega::Error::LockPinned("a job-engine run")),
        Err(omega::Error::Lock("close takes the session lock itself: call it without the lock")),
    );
    for s in &seen {
        assert_eq!(*s, refused);
    }
    assert!(rt.is_open());
    let ms = rt.memory_stats();
    assert_eq!(
        (ms.carved.buffers, ms.direct_buffers),
        (0, 1),
        "the run released its buffers; only the launch buffer is left"
    );
    assert_eq!(sim.stats().live_allocations, 1 + ms.carved.chunks as usize, "the launch buffer and the spare chunk");
    // Outside a run the raw lock is the caller's to release again.
    rt.unlock().unwrap();
    assert!(!rt.holds_lock());
}

/// A clock callback that sets the clock: it must not wait for the run it is called from.
extern "C" fn resetting_clock() -> u64 {
    engine::set_clock(Some(counting_clock));
    7
}

#[test]
fn a_clock_callback_may_set_the_clock_for_the_next_run() {
    let _g = serial();
    let mut fake = FakeBackend::new();
    engine::set_clock(Some(resetting_clock));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (r, _, _) = run_vector(&mut fake, 4, 1, Timeouts::default());
        let (r2, _, _) = run_vector(&mut fake, 4, 2, Timeouts::default());
        done_tx.send((r, r2)).unwrap();
    });
    let (r, r2) = done_rx.recv_timeout(std::time::Duration::from_secs(20)).expect("no deadlock in set_clock");
    assert!(r.path().iter().all(|s| r.entered_ns[*s as usize] == 7), "a run keeps the clock it started with");
    assert!(r2.entered_ns[State::Initial as usize] != 7, "the next run reads the clock set during the first");
    engine::set_clock(None);
}

#[test]
fn execute_runs_the_installed_backend_and_defaults_to_the_process_session() {
    let _g = serial();
    let fake = FakeBackend::new();
    let previous = set_backend(Some(Box::new(fake.clone())));
    let (a, b) = (random(100, 1), random(100, 2));
    let mut out = vec![f32::NAN; 100];
    let r = execute(&Job::vector_1d(&a, &b, &mut out).unwrap());
    assert!(r.is_success(), "{r}");
    assert_eq!(r.diag.backend, BACKEND_FAKE);
    assert_eq!(fake.stats().completed, 1);
    let back = set_backend(previous).expect("the fake was installed");
    assert_eq!(back.kind(), BACKEND_FAKE);

    // The default: the session backend on the process runtime, whose lock the caller holds.
    set_backend(None);
    let mut out = vec![f32::NAN; 100];
    let r = execute(&Job::vector_1d(&a, &b, &mut out).unwrap());
    assert_eq!(r.failure(), Some(Failure::DeviceUnavailable), "no lock held: {r}");
    let dev = omega::lock().open().expect("open");
    assert_eq!(dev.platform(), "sim");
    let r = execute(&Job::vector_1d(&a, &b, &mut out).unwrap());
    assert!(r.is_success(), "{r}");
    assert_eq!(r.diag.backend, BACKEND_SESSION);
    assert_eq!(out, omega::kernels::vector_add_ref(&a, &b));
    drop(dev);
}

/// A C-style backend for the table test: a host vector add that can be told to lose a marker.
#[derive(Default)]
struct CBackend {
    data: Vec<[f32; 3]>,
    lose: u32,
    released: u32,
}

unsafe extern "C" fn c_now(_: *mut std::ffi::c_void) -> u64 {
    7
}
unsafe extern "C" fn c_prepare(_: *mut std::ffi::c_void) -> i32 {
    engine::STEP_OK
}
unsafe extern "C" fn c_alloc(ctx: *mut std::ffi::c_void, n: u32) -> i32 {
    // SAFETY: the test passes a live CBackend as ctx and the engine calls one function at a time.
    let b = unsafe { &mut *ctx.cast::<CBackend>() };
    b.data = vec![[0.0; 3]; n as usize];
    engine::STEP_OK
}
unsafe extern "C" fn c_upload(ctx: *mut std::ffi::c_void, a: *const f32, bb: *const f32, n: u32) -> i32 {
    // SAFETY: as above; the engine passes inputs valid for n f32.
    let (b, a, bb) = unsafe {
        (
            &mut *ctx.cast::<CBackend>(),
            std::slice::from_raw_parts(a, n as usize),
            std::slice::from_raw_parts(bb, n as usize),
        )
    };
    for (i, d) in b.data.iter_mut().enumerate() {
        *d = [a[i], bb[i], f32::NAN];
    }
    engine::STEP_OK
}
unsafe extern "C" fn c_launch(
    ctx: *mut std::ffi::c_void,
    _n: u32,
    _t: *const Timeouts,
    report: *mut engine::LaunchReport,
) -> u32 {
    // SAFETY: as above; `report` is valid for the call.
    let (b, report) = unsafe { (&mut *ctx.cast::<CBackend>(), &mut *report) };
    for d in &mut b.data {
        d[2] = d[0] + d[1];
    }
    report.marker = 1;
    if b.lose != 0 {
        report.wait = b.lose;
        return engine::LAUNCH_TIMEOUT;
    }
    report.kernel_ns = 5;
    engine::LAUNCH_DONE
}
unsafe extern "C" fn c_readback(ctx: *mut std::ffi::c_void, out: *mut f32, n: u32) -> i32 {
    // SAFETY: as above; `out` is valid for n f32.
    let (b, out) = unsafe { (&mut *ctx.cast::<CBackend>(), std::slice::from_raw_parts_mut(out, n as usize)) };
    for (o, d) in out.iter_mut().zip(&b.data) {
        *o = d[2];
    }
    engine::STEP_OK
}
unsafe extern "C" fn c_release(ctx: *mut std::ffi::c_void) {
    // SAFETY: as above.
    let b = unsafe { &mut *ctx.cast::<CBackend>() };
    b.data.clear();
    b.released += 1;
}

#[test]
fn a_backend_given_as_a_c_function_table_runs_and_fails_by_name() {
    let _g = serial();
    let mut c = CBackend::default();
    let mut table = engine::BackendTable {
        ctx: (&mut c as *mut CBackend).cast(),
        now_ns: Some(c_now),
        prepare: Some(c_prepare),
        alloc: Some(c_alloc),
        upload: Some(c_upload),
        launch: Some(c_launch),
        readback: Some(c_readback),
        release: Some(c_release),
    };
    // SAFETY: the functions above are sound for a live CBackend ctx, which outlives every run below.
    let mut backend = unsafe { engine::TableBackend::new(table) };
    let (r, out, want) = run_vector(&mut backend, 50, 3, Timeouts::default());
    assert!(r.is_success(), "{r}");
    assert_eq!(out, want);
    assert_eq!((r.diag.backend, r.diag.kernel_ns, r.started_ns), (engine::BACKEND_CUSTOM, 5, 7));

    // SAFETY: only this thread touches `c` between runs.
    unsafe { (*table.ctx.cast::<CBackend>()).lose = Wait::EngineIdle as u32 };
    let (r, out, _) = run_vector(&mut backend, 50, 4, Timeouts::default());
    assert_failed(&r, Failure::CompletionTimeout, Step::Wait, Wait::EngineIdle, State::KernelDone);
    assert!(untouched(&out));
    assert!(engine::is_blocked());
    engine::test_reset_block();

    table.launch = None;
    // SAFETY: as above.
    let mut backend = unsafe { engine::TableBackend::new(table) };
    let (r, _, _) = run_vector(&mut backend, 50, 5, Timeouts::default());
    assert_failed(&r, Failure::LaunchRefused, Step::Launch, Wait::None, State::Uploaded);
    assert!(r.detail().contains("no `launch` function"), "{r}");
    // SAFETY: as above.
    assert_eq!(unsafe { (*table.ctx.cast::<CBackend>()).released }, 3, "released after every run");
}
