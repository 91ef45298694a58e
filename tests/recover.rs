//! Recovery from the latch on the simulator: a hang is recovered and the reopened device computes; a
//! channel stop that times out falls back to freeing the channel group, proved by the heartbeat; a free
//! refused after it, or a stop that leaves the work writing, keeps the process latched and says why.
//! Each test has its own runtime, so latches stay local.

mod common;

use common::*;
use omega::error::{RecoverError, Stage, StopFailure};
use omega::session::{GpuMem, Runtime, WATCH_INTERVAL_US};
use omega::Error;
use omega_hal::sim::{Sim, SimFault};
use rand::{Rng, SeedableRng};

fn launch(rt: &Runtime, l: &omega::session::RawLaunch) -> Result<omega::session::LaunchCompletion, Error> {
    // SAFETY: `l.args` points to `l.n_args` live words for the duration of the call.
    unsafe { rt.launch_raw(l) }
}

/// Latches `rt` with a `spin_beat` launch that never ends (its flag stays 0), frees every buffer the
/// caller made so they park, and returns the heartbeat buffer's address.
fn latch_with_a_beating_kernel(rt: &Runtime) -> u64 {
    let mut flag = rt.alloc(4).unwrap();
    let mut beat = rt.alloc(4).unwrap();
    let mut code = load(rt, "spin_beat");
    let words = [addr(flag.va), addr(beat.va)].concat();
    let e = launch(rt, &raw_launch(&code, &words, 1, 1)).unwrap_err();
    assert_eq!(e, Error::Timeout { marker: 0, timeout_ms: 100 });
    assert!(rt.is_blocked());
    let va = beat.va;
    for m in [&mut flag, &mut beat, &mut code] {
        rt.free(m).unwrap();
    }
    va
}

/// A vector add on the open device of random inputs into a poisoned output, checked against the
/// reference.
fn checked_vector_add(rt: &Runtime, seed: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let n = 3000usize;
    let a: Vec<f32> = (0..n).map(|_| rng.random_range(-1e3..1e3)).collect();
    let b: Vec<f32> = (0..n).map(|_| rng.random_range(-1e3..1e3)).collect();
    let (ma, mb, mc) = (rt.alloc(n * 4).unwrap(), rt.alloc(n * 4).unwrap(), rt.alloc(n * 4).unwrap());
    put_f32(rt, &ma, &a);
    put_f32(rt, &mb, &b);
    put_f32(rt, &mc, &vec![f32::NAN; n]);
    let code = load(rt, "vector_add");
    let words = [addr(ma.va), addr(mb.va), addr(mc.va), [n as u32, 0]].concat();
    launch(rt, &raw_launch(&code, &words[..7], 128, n.div_ceil(128) as u32)).unwrap();
    assert_eq!(get_f32(rt, &mc, n), omega::kernels::vector_add_ref(&a, &b));
}

fn live(sim: &Sim) -> (usize, u64) {
    let s = sim.stats();
    (s.live_allocations, s.live_bytes)
}

#[test]
fn an_injected_hang_is_recovered_and_the_reopened_device_adds_vectors() {
    let (rt, sim) = open_runtime();
    let opens = sim.stats().opens;
    let flag = rt.alloc(4).unwrap();
    let mut weights = rt.alloc(1 << 20).unwrap();
    let code = load(&rt, "spin");
    sim.inject(SimFault::Hang);
    let words = addr(flag.va);
    let e = launch(&rt, &raw_launch(&code, &words, 32, 4)).unwrap_err();
    assert!(e.latched_the_process(), "{e}");
    rt.free(&mut weights).unwrap();
    let parked = rt.parked();
    assert_eq!(parked.buffers, 2, "the marker buffer and the freed weights");
    let frees = sim.stats().frees;
    assert!(live(&sim).0 > 0);

    let r = rt.recover_locked().expect("a dropped hang is recovered");
    assert_eq!(r.released, parked, "the report says what the latch had kept");
    assert_eq!(r.watched_buffers, 2, "both parked buffers are watched on the simulator");
    assert_eq!(r.unwatched_buffers, 0);
    assert_eq!(r.interval_us, WATCH_INTERVAL_US);
    assert!(r.elapsed_ns >= 2 * u64::from(WATCH_INTERVAL_US) * 1000, "two intervals of heartbeat: {r:?}");
    assert_eq!(r.steps, ["sim stop channel", "sim free channel group"]);
    assert_eq!((r.proved_by, r.refused.len()), ("sim stop channel", 0), "the channel stop worked: {r:?}");
    // The latch is gone, parked bytes are back to zero and every allocation went back to the platform.
    assert!(!rt.is_blocked());
    assert_eq!(rt.latch_cause(), None);
    assert_eq!(rt.parked(), omega::session::ParkStats::default());
    assert!(!rt.is_parked(weights.handle));
    assert!(!rt.is_open(), "recovery closes the device");
    assert_eq!(live(&sim), (0, 0), "device memory returned");
    assert!(sim.stats().frees > frees);
    // Handles of the old device are stale.
    let mut old = flag;
    assert_eq!(rt.free(&mut old).unwrap_err(), Error::NotOpen(Stage::Free));

    rt.open().expect("the device reopens after a recovery");
    assert_eq!(sim.stats().opens, opens + 1);
    checked_vector_add(&rt, 11);
}

#[test]
fn the_heartbeat_of_a_running_kernel_moves_before_the_stop_and_stands_still_after() {
    let (rt, sim) = open_runtime();
    latch_with_a_beating_kernel(&rt);
    let r = rt.recover_locked().unwrap();
    assert_eq!(r.moved_before_stop, 1, "the beat word moved while the kernel ran: {r:?}");
    assert_eq!(r.watched_buffers, 4, "markers, flag, beat, code");
    assert_eq!(live(&sim), (0, 0));
    rt.open().unwrap();
    checked_vector_add(&rt, 12);
}

/// Recovers `rt` expecting `faults` to make the platform's stop fail; checks that the process stays
/// latched with nothing released, and returns the failure.
fn refused_stop(rt: &Runtime, sim: &Sim, faults: &[SimFault]) -> StopFailure {
    let (parked, held, frees) = (rt.parked(), live(sim), sim.stats().frees);
    for f in faults {
        sim.inject(f.clone());
    }
    let e = rt.recover_locked().unwrap_err();
    assert_eq!(e.stage(), Stage::Recover);
    assert!(e.to_string().starts_with("recover: the platform did not stop the work ("), "{e}");
    assert!(rt.is_blocked(), "not proved: still latched");
    assert!(rt.latch_cause().unwrap().latched_the_process(), "the latch keeps its first cause");
    assert_eq!((rt.parked(), live(sim), sim.stats().frees), (parked, held, frees), "nothing released");
    assert_eq!(rt.open().unwrap_err(), Error::Latched(Stage::Open));
    let Error::Recover(RecoverError::Stop(f)) = e else { panic!("{e}") };
    f
}

#[test]
fn a_channel_stop_that_times_out_falls_back_to_the_free_and_the_heartbeat_proves_it() {
    let (rt, sim) = open_runtime();
    latch_with_a_beating_kernel(&rt);
    sim.inject(SimFault::StopTimesOut);
    let r = rt.recover_locked().expect("the free after the timed-out stop drops the work");
    assert_eq!(r.proved_by, "sim free channel group", "{r:?}");
    assert_eq!(r.steps, ["sim free channel group"]);
    assert_eq!(r.refused.len(), 1, "{r:?}");
    assert_eq!(r.refused[0].step, "sim stop channel");
    assert!(r.refused[0].to_string().contains("timed out"), "{}", r.refused[0]);
    assert_eq!(r.moved_before_stop, 1, "the beat moved before the stop, and the proof says it stood after");
    assert!(!rt.is_blocked());
    assert_eq!(live(&sim), (0, 0), "device memory returned");
    rt.open().unwrap();
    checked_vector_add(&rt, 16);
}

#[test]
fn a_free_refused_after_a_timed_out_stop_keeps_the_latch_naming_both_until_a_retry_works() {
    let (rt, sim) = open_runtime();
    latch_with_a_beating_kernel(&rt);
    let f = refused_stop(&rt, &sim, &[SimFault::StopTimesOut, SimFault::FreeRefused]);
    assert_eq!(f.step, "sim free channel group");
    let first = f.after.as_deref().expect("the timed-out stop is named too");
    assert_eq!((first.step, first.after.is_none()), ("sim stop channel", true));
    let text = f.to_string();
    assert!(
        text.contains("was refused") && text.contains("after the channel stop was refused (sim stop channel: "),
        "{text}"
    );
    assert!(text.contains("timed out"), "{text}");

    // The retry's stop works (nothing injected): the work is dropped and the latch lifted.
    let r = rt.recover_locked().expect("the retry stops the work");
    assert_eq!(r.proved_by, "sim stop channel");
    assert_eq!(live(&sim), (0, 0));
    rt.open().unwrap();
    checked_vector_add(&rt, 13);
}

#[test]
fn a_free_refused_after_a_stop_that_worked_names_the_free_alone() {
    let (rt, sim) = open_runtime();
    latch_with_a_beating_kernel(&rt);
    let f = refused_stop(&rt, &sim, &[SimFault::FreeRefused]);
    assert!(!f.to_string().contains("after the channel stop"), "{f}");
    assert_eq!((f.step, f.after), ("sim free channel group", None));
    rt.recover_locked().expect("the retry frees the group");
    assert!(!rt.is_blocked());
}

#[test]
fn a_fallback_free_that_leaves_the_kernel_writing_is_caught_by_the_heartbeat() {
    let (rt, sim) = open_runtime();
    let beat = latch_with_a_beating_kernel(&rt);
    let (parked, held) = (rt.parked(), live(&sim));
    sim.inject(SimFault::StopTimesOut);
    sim.inject(SimFault::StopLeavesWork);
    let e = rt.recover_locked().unwrap_err();
    let Error::Recover(RecoverError::StillRunning { va, .. }) = e else { panic!("{e}") };
    assert_eq!(va, beat, "the free's word alone is not taken: the beat still moved");
    assert!(rt.is_blocked());
    assert_eq!((rt.parked(), live(&sim)), (parked, held), "nothing released while the beat moves");
    rt.recover_locked().expect("a second stop drops the work");
    rt.open().unwrap();
    checked_vector_add(&rt, 17);
}

#[test]
fn a_stop_that_leaves_the_kernel_writing_is_caught_by_the_heartbeat() {
    let (rt, sim) = open_runtime();
    let beat = latch_with_a_beating_kernel(&rt);
    let (parked, held) = (rt.parked(), live(&sim));
    sim.inject(SimFault::StopLeavesWork);
    let e = rt.recover_locked().unwrap_err();
    let Error::Recover(RecoverError::StillRunning { va, offset, before, after, interval_us }) = e.clone() else {
        panic!("{e}")
    };
    assert_eq!((va, offset, interval_us), (beat, 0, WATCH_INTERVAL_US), "{e}");
    assert_ne!(before, after);
    assert!(e.to_string().contains("the work still runs; process still latched"), "{e}");
    assert!(rt.is_blocked());
    assert_eq!((rt.parked(), live(&sim)), (parked, held), "nothing released while the beat moves");

    rt.recover_locked().expect("a second stop drops the work");
    assert!(!rt.is_blocked());
    rt.open().unwrap();
    checked_vector_add(&rt, 14);
}

#[test]
fn recovery_is_refused_without_a_latch_and_keeps_the_lock_discipline() {
    let (rt, _sim) = open_runtime();
    let e = rt.recover_locked().unwrap_err();
    assert_eq!(e, Error::Recover(RecoverError::NotLatched));
    assert_eq!(e.to_string(), "recover: the process is not latched; nothing to recover from");
    // The entry that takes the lock itself refuses a holder instead of waiting forever.
    let e = rt.recover().unwrap_err();
    assert_eq!(e.stage(), Stage::Lock, "{e}");
    latch_with_a_beating_kernel(&rt);
    // Another thread without the lock is refused, and may read the latch meanwhile.
    std::thread::scope(|t| {
        t.spawn(|| {
            assert_eq!(rt.recover_locked().unwrap_err().stage(), Stage::Lock);
            assert!(rt.is_blocked());
        });
    });
    rt.unlock().unwrap();
    rt.recover().expect("the entry takes the lock, recovers and releases it");
    assert!(!rt.holds_lock());
    rt.lock().unwrap();
    rt.open().unwrap();
    checked_vector_add(&rt, 15);
    let _: GpuMem = rt.alloc(4).unwrap();
}
