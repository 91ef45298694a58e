//! loom models of the session's concurrency: the process lock, the latch against everything that could
//! release memory after it, cancel from a thread without the lock, recovery from the latch against
//! cancel, free and `is_blocked`, and open/close counting. Each model
//! builds its own [`Runtime`] on its own simulator (the process's `runtime()` is a `std` `OnceLock`,
//! outside what loom can model), with a simulator tuned so a launch completes within a few polls — loom
//! explores every interleaving of every lock and atomic, so the state space must stay small.
//!
//! Two models are deliberately broken (`#[should_panic]`): a critical section written after the unlock,
//! and a free that reads the latch before taking the lock. They prove the models can fail.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p omega --release --lib loom_models`
//! (add `-- --nocapture` to see how many interleavings each model explored).

// Outcome counters live outside the models on purpose: they tally across loom's interleavings, which loom's
// own atomics (reset with every run) cannot.
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use loom::cell::UnsafeCell;
use loom::thread;
use omega_hal::sim::{code_image, Sim, SimConfig, SimFault};

use crate::error::{Error, Stage};
use crate::platform::Installed;
use crate::session::{GpuMem, LaunchCompletion, LaunchShape, LaunchSpec, Runtime};
use crate::sync::Arc;

/// Runs `f` under loom with a preemption bound of 2 unless `LOOM_MAX_PREEMPTIONS` says otherwise, and
/// reports how many interleavings it explored.
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let start = std::time::Instant::now();
    b.check(move || {
        counted.fetch_add(1, Relaxed);
        f()
    });
    eprintln!(
        "loom model {name}: {} interleavings in {:.2?} (preemption bound {:?})",
        runs.load(Relaxed),
        start.elapsed(),
        b.preemption_bound
    );
}

/// Which outcomes a model reached, over all its interleavings: a model that never reached one of the
/// orders it is about would pass without checking it, so each model asserts that it saw every one.
#[derive(Default)]
struct Seen([AtomicUsize; 3]);

impl Seen {
    fn new() -> std::sync::Arc<Seen> {
        std::sync::Arc::new(Seen::default())
    }

    fn hit(&self, outcome: usize) {
        self.0[outcome].fetch_add(1, Relaxed);
    }

    fn assert_all(&self, names: &[&str]) {
        for (i, name) in names.iter().enumerate() {
            assert!(self.0[i].load(Relaxed) > 0, "no interleaving reached outcome `{name}`");
        }
    }
}

/// A runtime on a fresh simulator whose launches complete at the first poll after submit (plus
/// `launch_ns` virtual nanoseconds), with the repository's host kernels registered.
fn sim_runtime(launch_ns: u64) -> (Arc<Runtime>, Arc<Sim>) {
    let sim = Sim::with_config(SimConfig { launch_ns, idle_ns: 0, tick_ns: 1, ..SimConfig::default() });
    crate::kernels::register_host_kernels(&sim);
    let rt = Runtime::with_platform(Installed { platform: sim.clone(), sim: Some(sim.clone()) }).unwrap();
    (Arc::new(rt), sim)
}

/// What a model needs open: the device, one data buffer and the `empty` kernel's code. Taken and
/// released under the lock, before any thread starts.
struct Setup {
    data: GpuMem,
    code: GpuMem,
}

fn open_with_buffers(rt: &Runtime) -> Setup {
    rt.lock().unwrap();
    rt.open().expect("the simulator opens");
    // Past the largest carved size: a platform allocation of its own, so its release (or its parking) shows
    // in the simulator's frees, not only in the memory manager's blocks.
    let data = rt.alloc(crate::session::suballoc::LARGEST_CARVED as usize + 4096).expect("alloc");
    let code = rt.alloc_code(64).expect("alloc code");
    let image = code_image("empty");
    // SAFETY: `code.cpu` is the CPU view of a live code buffer of at least 64 + prefetch-tail bytes (the
    // simulator's code buffers are coherent: one copy); the image is 19 bytes; nothing else references the
    // buffer yet and no launch is running.
    unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), code.cpu.cast::<u8>(), image.len()) };
    rt.unlock().unwrap();
    Setup { data, code }
}

fn launch(rt: &Runtime, code: &GpuMem, timeout_ms: u32) -> Result<LaunchCompletion, Error> {
    rt.launch(&LaunchSpec {
        code_va: code.va,
        gpr_count: 32,
        num_elements: 1,
        args: &[0],
        max_args: 32,
        shape: LaunchShape {
            grid: [1, 1, 1],
            block: [1, 1, 1],
            shared_bytes: 0,
            dynamic_shared_bytes: 0,
            timeout_ms,
            spin_us: 0,
            cluster: [1, 1, 1],
        },
    })
}

/// LD: the session lock is exclusive. Two threads take turns; the cell they write is touched only under
/// the lock, and loom would report any two accesses it cannot order.
#[test]
// loom's checked cell is not `Sync`, and loom's threads (which need no `Send`) share it on purpose.
#[allow(clippy::arc_with_non_send_sync)]
fn the_session_lock_is_exclusive() {
    let seen = Seen::new();
    let seen2 = seen.clone();
    model("lock exclusivity", move || {
        let (rt, _sim) = sim_runtime(0);
        let cell = Arc::new(UnsafeCell::new(0u32));
        let workers: Vec<_> = (0..2)
            .map(|i| {
                let (rt, cell) = (rt.clone(), cell.clone());
                thread::spawn(move || {
                    let taken = if i == 0 {
                        rt.lock().unwrap();
                        true
                    } else {
                        rt.try_lock().unwrap()
                    };
                    if taken {
                        assert!(rt.holds_lock());
                        // SAFETY: only touched between lock and unlock of the session lock.
                        cell.with_mut(|p| unsafe { *p += 1 });
                        rt.unlock().unwrap();
                    }
                    taken
                })
            })
            .collect();
        let taken = workers.into_iter().map(|w| w.join().unwrap()).filter(|&t| t).count() as u32;
        // SAFETY: both workers have joined.
        assert_eq!(cell.with(|p| unsafe { *p }), taken);
        assert!(taken >= 1 && !rt.holds_lock());
        seen2.hit(taken as usize - 1);
        // Free again: a new holder gets it at once.
        assert!(rt.try_lock().unwrap());
        rt.unlock().unwrap();
    });
    seen.assert_all(&["try_lock refused while held", "both took it in turn"]);
}

/// Deliberately broken: the protected write happens after the unlock. loom must find the two writes it
/// cannot order.
#[test]
#[should_panic(expected = "Causality violation")]
// loom's checked cell is not `Sync`, and loom's threads (which need no `Send`) share it on purpose.
#[allow(clippy::arc_with_non_send_sync)]
fn broken_a_write_after_the_unlock_is_caught() {
    model("broken lock use", || {
        let (rt, _sim) = sim_runtime(0);
        let cell = Arc::new(UnsafeCell::new(0u32));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (rt, cell) = (rt.clone(), cell.clone());
                thread::spawn(move || {
                    rt.lock().unwrap();
                    rt.unlock().unwrap();
                    // SAFETY: none: this is the bug the model must catch (loom panics before any
                    // unsynchronised access happens for real).
                    cell.with_mut(|p| unsafe { *p += 1 });
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
    });
}

/// The latch against a concurrent free: one thread's launch never completes and latches the process;
/// another frees a buffer. Whatever the order, nothing is released to the platform after the latch —
/// the free before it releases, the free after it parks — and close is refused afterwards.
#[test]
fn nothing_is_released_after_the_latch_free() {
    let seen = Seen::new();
    let seen2 = seen.clone();
    model("latch vs free", move || {
        let (rt, sim) = sim_runtime(0);
        let Setup { data, code } = open_with_buffers(&rt);
        let live = sim.stats().live_allocations;
        sim.inject(SimFault::Hang);
        let launcher = {
            let (rt, sim) = (rt.clone(), sim.clone());
            thread::spawn(move || {
                rt.lock().unwrap();
                let r = launch(&rt, &code, 0);
                let frees_at_latch = sim.stats().frees;
                rt.unlock().unwrap();
                (r, frees_at_latch)
            })
        };
        let freer = {
            let (rt, sim) = (rt.clone(), sim.clone());
            thread::spawn(move || {
                let mut data = data;
                let h = data.handle;
                rt.lock().unwrap();
                let latched = rt.is_blocked();
                let before = sim.stats().frees;
                rt.free(&mut data).expect("free or park");
                let after = sim.stats().frees;
                let parked = rt.is_parked(h);
                rt.unlock().unwrap();
                (latched, after - before, parked)
            })
        };
        let (r, frees_at_latch) = launcher.join().unwrap();
        let (latched_first, released, parked) = freer.join().unwrap();
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        assert!(rt.is_blocked());
        seen2.hit(latched_first as usize);
        if latched_first {
            assert_eq!((released, parked), (0, true), "a free after the latch parks");
            assert_eq!(sim.stats().live_allocations, live);
        } else {
            assert_eq!((released, parked), (1, false), "a free before the latch releases");
            assert_eq!(sim.stats().live_allocations, live - 1);
        }
        assert_eq!(sim.stats().frees, frees_at_latch, "released to the platform after the latch");
        assert!(matches!(rt.close(), Err(Error::Latched(Stage::Close))));
        assert_eq!((sim.stats().frees, sim.stats().closes), (frees_at_latch, 0));
    });
    seen.assert_all(&["free before the latch", "free after the latch"]);
}

/// The latch against a concurrent close (which takes the lock itself): either close runs first and the
/// launch finds the device closed (no latch), or the launch latches and close is refused with every
/// buffer still allocated.
#[test]
fn nothing_is_released_after_the_latch_close() {
    let seen = Seen::new();
    let seen2 = seen.clone();
    model("latch vs close", move || {
        let (rt, sim) = sim_runtime(0);
        let Setup { code, .. } = open_with_buffers(&rt);
        let live = sim.stats().live_allocations;
        sim.inject(SimFault::Hang);
        let launcher = {
            let rt = rt.clone();
            thread::spawn(move || {
                rt.lock().unwrap();
                let r = launch(&rt, &code, 0);
                rt.unlock().unwrap();
                r
            })
        };
        let closer = {
            let rt = rt.clone();
            thread::spawn(move || rt.close())
        };
        let launched = launcher.join().unwrap();
        let closed = closer.join().unwrap();
        match (&launched, &closed) {
            (Err(Error::NotOpen(Stage::Launch)), Ok(())) => {
                seen2.hit(0);
                assert!(!rt.is_blocked());
                assert_eq!((sim.stats().closes, sim.stats().live_allocations), (1, 0));
            }
            (Err(Error::Timeout { .. }), Err(Error::Latched(Stage::Close))) => {
                seen2.hit(1);
                assert!(rt.is_blocked());
                assert_eq!((sim.stats().closes, sim.stats().frees), (0, 0));
                assert_eq!(sim.stats().live_allocations, live);
                assert_eq!(rt.parked().buffers, 1, "the session's marker buffer is parked at the latch");
            }
            other => panic!("launch/close outcome the contract does not allow: {other:?}"),
        }
    });
    seen.assert_all(&["close first", "latch first"]);
}

/// Cancel from a thread without the lock, against a launch in progress. What the contract promises
/// (and the model checks): a cancel is never lost. Either the launch reports it — `CancelledBeforeSubmit`
/// (nothing submitted, not latched) or `CancelledAfterSubmit` (submitted, process latched) — or the launch
/// completed first and the request stays pending, so the next launch is `CancelledBeforeSubmit`.
#[test]
fn a_cancel_is_never_lost() {
    let seen = Seen::new();
    let seen2 = seen.clone();
    model("cancel vs launch", move || {
        // A launch takes a few virtual nanoseconds, so the wait polls at least once before completion
        // and the cancel can land before submit, during the wait, or after completion.
        let (rt, sim) = sim_runtime(3);
        let Setup { code, .. } = open_with_buffers(&rt);
        let launcher = {
            let rt = rt.clone();
            thread::spawn(move || {
                rt.lock().unwrap();
                let r = launch(&rt, &code, 1_000);
                rt.unlock().unwrap();
                r
            })
        };
        let canceller = {
            let rt = rt.clone();
            thread::spawn(move || rt.cancel())
        };
        let first = launcher.join().unwrap();
        canceller.join().unwrap();
        let submissions = sim.stats().submissions;
        match first {
            Ok(_) => {
                seen2.hit(0);
                assert_eq!(submissions, 1);
                assert!(!rt.is_blocked());
                rt.lock().unwrap();
                let next = launch(&rt, &code, 1_000);
                rt.unlock().unwrap();
                assert!(matches!(next, Err(Error::CancelledBeforeSubmit)), "cancel lost: {next:?}");
                assert_eq!(sim.stats().submissions, 1, "the cancelled launch submitted nothing");
            }
            Err(Error::CancelledBeforeSubmit) => {
                seen2.hit(1);
                assert_eq!(submissions, 0);
                assert!(!rt.is_blocked());
                // Consumed: the next launch runs.
                rt.lock().unwrap();
                assert!(launch(&rt, &code, 1_000).is_ok());
                rt.unlock().unwrap();
            }
            Err(Error::CancelledAfterSubmit) => {
                seen2.hit(2);
                assert_eq!(submissions, 1);
                assert!(rt.is_blocked(), "a cancel after submit latches");
            }
            Err(e) => panic!("unexpected launch failure: {e}"),
        }
    });
    seen.assert_all(&["completed, cancel pending", "cancelled before submit", "cancelled after submit"]);
}

/// Recovery from the latch against a thread without the lock that reads the latch and the parked
/// buffers, cancels, then frees a buffer under the lock. Whatever the order: a thread that sees the latch
/// gone sees the parked buffers released (never a window where `is_blocked` is 0 and the latch still
/// holds memory); the free either parks the buffer before the recovery, which then releases it, or finds
/// the device closed after it and releases nothing — each allocation goes back to the platform once; and
/// the cancel is neither lost nor turned into a latch: the first launch on the reopened device sees it
/// before submit.
#[test]
fn recovery_races_cancel_free_and_is_blocked() {
    recovery_model("recover vs cancel, free, is_blocked", &[], false);
}

/// The same race when the platform's channel stop times out and the stop goes on to free the channel
/// group (the H200's path), and when that free is refused once too: the refused attempt, made under the
/// same lock hold, releases nothing and keeps the latch, so the racing thread sees no difference.
#[test]
fn recovery_by_the_fallback_free_races_cancel_free_and_is_blocked() {
    recovery_model("fallback recover vs cancel, free, is_blocked", &[SimFault::StopTimesOut], false);
    recovery_model(
        "refused, then fallback recover vs cancel, free, is_blocked",
        &[SimFault::StopTimesOut, SimFault::FreeRefused, SimFault::StopTimesOut],
        true,
    );
}

/// The model of [`recovery_races_cancel_free_and_is_blocked`], with `stop_faults` injected before the
/// recovery; with `first_refused` the first attempt must fail with the stop named and a second is made.
fn recovery_model(name: &'static str, stop_faults: &'static [SimFault], first_refused: bool) {
    let seen = Seen::new();
    let seen2 = seen.clone();
    model(name, move || {
        let (rt, sim) = sim_runtime(0);
        let Setup { data, code } = open_with_buffers(&rt);
        sim.inject(SimFault::Hang);
        rt.lock().unwrap();
        assert!(matches!(launch(&rt, &code, 0), Err(Error::Timeout { .. })));
        rt.unlock().unwrap();
        for f in stop_faults {
            sim.inject(f.clone());
        }
        let recoverer = {
            let rt = rt.clone();
            thread::spawn(move || {
                rt.lock().unwrap();
                let mut r = rt.recover_locked();
                if first_refused {
                    assert!(
                        matches!(&r, Err(Error::Recover(crate::error::RecoverError::Stop(f))) if f.after.is_some()),
                        "{r:?}"
                    );
                    assert!(rt.is_blocked(), "a refused recovery keeps the latch");
                    r = rt.recover_locked();
                }
                rt.unlock().unwrap();
                r
            })
        };
        let other = {
            let (rt, sim) = (rt.clone(), sim.clone());
            thread::spawn(move || {
                rt.cancel();
                let mut data = data;
                rt.lock().unwrap();
                let blocked = rt.is_blocked();
                let freed = rt.free(&mut data);
                let parked_it = rt.is_parked(data.handle);
                rt.unlock().unwrap();
                // The first moment this thread, without the lock, sees the latch gone: what it kept is gone.
                while rt.is_blocked() {
                    thread::yield_now();
                }
                assert_eq!(rt.parked(), crate::session::ParkStats::default(), "latch gone, parked buffers kept");
                assert_eq!(sim.stats().live_allocations, 0, "latch gone, memory not returned");
                (blocked, freed, parked_it)
            })
        };
        let recovered = recoverer.join().unwrap();
        let (blocked, freed, parked_it) = other.join().unwrap();
        let report = recovered.expect("the hang is recovered");
        let fallback = !stop_faults.is_empty();
        assert_eq!(report.proved_by, if fallback { "sim free channel group" } else { "sim stop channel" });
        match freed {
            Ok(()) => {
                seen2.hit(0);
                assert!(blocked && parked_it, "a free before the recovery parks");
                assert_eq!(report.released.buffers, 2, "the marker buffer and the freed one");
            }
            Err(Error::NotOpen(Stage::Free)) => {
                seen2.hit(1);
                assert!(!blocked && !parked_it, "a free after the recovery finds the device closed");
                assert_eq!(report.released.buffers, 1, "the marker buffer");
            }
            Err(e) => panic!("free outcome the contract does not allow: {e}"),
        }
        let s = sim.stats();
        assert_eq!((s.live_allocations, s.closes), (0, 1), "everything returned once, one close");
        assert!(!rt.is_blocked());
        rt.lock().unwrap();
        rt.open().expect("reopens after the recovery");
        let code = rt.alloc_code(64).expect("alloc code");
        let image = code_image("empty");
        // SAFETY: as in `open_with_buffers`: a fresh coherent code buffer of at least 64 bytes, nothing
        // else references it and no launch is running.
        unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), code.cpu.cast::<u8>(), image.len()) };
        assert!(matches!(launch(&rt, &code, 1_000), Err(Error::CancelledBeforeSubmit)), "cancel lost");
        assert!(!rt.is_blocked(), "the cancel did not latch");
        assert!(launch(&rt, &code, 1_000).is_ok());
        rt.unlock().unwrap();
    });
    seen.assert_all(&["free parked before the recovery", "free after the recovery"]);
}

/// Open and close from two threads: open is counted once per real open (a second open finds the device
/// open), close releases everything, and the platform's counts agree with the session's.
#[test]
fn open_and_close_are_counted() {
    let seen = Seen::new();
    let seen2 = seen.clone();
    model("open/close counting", move || {
        let (rt, sim) = sim_runtime(0);
        let _ = open_with_buffers(&rt);
        let user = {
            let rt = rt.clone();
            thread::spawn(move || {
                rt.lock().unwrap();
                rt.open().expect("open, or find it open");
                let mut m = rt.alloc(16).expect("alloc");
                rt.free(&mut m).expect("free");
                rt.unlock().unwrap();
            })
        };
        let closer = {
            let rt = rt.clone();
            thread::spawn(move || rt.close().expect("close"))
        };
        user.join().unwrap();
        closer.join().unwrap();
        let st = sim.stats();
        assert_eq!(st.opens, rt.open_count(), "opens counted by the session and the platform");
        assert_eq!(st.opens - st.closes, rt.is_open() as u32);
        seen2.hit(rt.is_open() as usize);
        if rt.is_open() {
            // Closed then reopened: only the new session's marker buffer is live, and the chunk the user's
            // small buffer was carved from, kept as its pool's spare.
            let chunks = rt.memory_stats().carved.chunks as usize;
            assert_eq!((st.opens, st.live_allocations, chunks), (2, 2, 1));
        } else {
            assert_eq!((st.opens, st.live_allocations), (1, 0));
        }
        assert!(!rt.is_blocked());
    });
    seen.assert_all(&["open then close", "close then reopen"]);
}

/// The shape of `Runtime::free` and the latch, cut down to what the ordering depends on: the latch is
/// set under the lock, and a free decides between release and park. `check_under_lock` picks where the
/// free reads the latch.
struct MiniSession {
    lock: loom::sync::Mutex<()>,
    latched: loom::sync::atomic::AtomicBool,
    released: loom::sync::atomic::AtomicUsize,
    released_at_latch: loom::sync::atomic::AtomicUsize,
}

impl MiniSession {
    fn latch(&self) {
        let _g = self.lock.lock().unwrap();
        self.latched.store(true, loom::sync::atomic::Ordering::SeqCst);
        self.released_at_latch
            .store(self.released.load(loom::sync::atomic::Ordering::SeqCst), loom::sync::atomic::Ordering::SeqCst);
    }

    fn free(&self, check_under_lock: bool) {
        use loom::sync::atomic::Ordering::SeqCst;
        let early = self.latched.load(SeqCst);
        let _g = self.lock.lock().unwrap();
        let latched = if check_under_lock { self.latched.load(SeqCst) } else { early };
        if !latched {
            self.released.fetch_add(1, SeqCst);
        }
    }
}

fn mini_model(check_under_lock: bool) {
    use loom::sync::atomic::Ordering::SeqCst;
    let s = Arc::new(MiniSession {
        lock: loom::sync::Mutex::new(()),
        latched: loom::sync::atomic::AtomicBool::new(false),
        released: loom::sync::atomic::AtomicUsize::new(0),
        released_at_latch: loom::sync::atomic::AtomicUsize::new(0),
    });
    let latcher = {
        let s = s.clone();
        thread::spawn(move || s.latch())
    };
    s.free(check_under_lock);
    latcher.join().unwrap();
    assert_eq!(s.released.load(SeqCst), s.released_at_latch.load(SeqCst), "released after the latch");
}

#[test]
fn mini_free_reading_the_latch_under_the_lock_holds() {
    model("mini free, latch read under the lock", || mini_model(true));
}

/// Deliberately broken: the free reads the latch before it takes the lock, so a latch in between is
/// missed and the buffer is released after it.
#[test]
#[should_panic(expected = "released after the latch")]
fn broken_a_free_that_reads_the_latch_before_the_lock_is_caught() {
    model("broken mini free", || mini_model(false));
}
