//! The session layer's contract on the simulator: each test has its own runtime, so latches stay local.

mod common;

use common::*;
use omega::error::Stage;
use omega::session::{Scratch, MAX_ARGS, MAX_SPIN_US, PARK_MAX};
use omega::Error;
use omega_hal::sim::SimFault;
use omega_hal::{HalError, HandleError, Refusal, Services};
use rand::{Rng, SeedableRng};

fn launch(
    rt: &omega::session::Runtime,
    l: &omega::session::RawLaunch,
) -> Result<omega::session::LaunchCompletion, Error> {
    // SAFETY: `l.args` points to `l.n_args` live words for the duration of the call.
    unsafe { rt.launch_raw(l) }
}

#[test]
fn vector_add_matches_the_reference_and_needs_the_syncs() {
    let (rt, _sim) = open_runtime();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let n = 1000usize;
    let a: Vec<f32> = (0..n).map(|_| rng.random_range(-1e3..1e3)).collect();
    let b: Vec<f32> = (0..n).map(|_| rng.random_range(-1e3..1e3)).collect();
    let (ma, mb, mc) = (rt.alloc(n * 4).unwrap(), rt.alloc(n * 4).unwrap(), rt.alloc(n * 4).unwrap());
    put_f32(&rt, &ma, &a);
    put_f32(&rt, &mb, &b);
    put_f32(&rt, &mc, &vec![f32::NAN; n]);
    let code = load(&rt, "vector_add");
    let words = [addr(ma.va), addr(mb.va), addr(mc.va), [n as u32, 0]].concat();
    let mut l = raw_launch(&code, &words[..7], 128, n.div_ceil(128) as u32);
    l.timeout_ms = 1000;
    let done = launch(&rt, &l).unwrap();
    assert!(done.elapsed_ns > 0);
    assert_eq!(get_f32(&rt, &mc, n), omega::kernels::vector_add_ref(&a, &b));
}

#[test]
fn a_missing_sync_to_cpu_shows_stale_data_as_on_a_discrete_gpu() {
    let (rt, _sim) = open_runtime();
    let m = rt.alloc(4096).unwrap();
    put_f32(&rt, &m, &[1.0; 4]);
    let code = load(&rt, "store_to");
    let words = [addr(m.va), [42.0f32.to_bits(), 0]].concat();
    launch(&rt, &raw_launch(&code, &words[..3], 1, 1)).unwrap();
    // SAFETY: the CPU view holds 1024 f32.
    let before = unsafe { *m.cpu.cast::<f32>() };
    assert_eq!(before, 1.0, "device writes are invisible until sync_to_cpu");
    assert_eq!(get_f32(&rt, &m, 1), vec![42.0]);
}

#[test]
fn every_launch_argument_check_names_its_stage() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "empty");
    let words = [0u32; 40];
    let ok = raw_launch(&code, &words[..1], 32, 1);
    let cases: Vec<(&str, omega::session::RawLaunch)> = vec![
        ("args NULL", omega::session::RawLaunch { args: std::ptr::null(), ..ok }),
        ("n_args 0", omega::session::RawLaunch { n_args: 0, ..ok }),
        ("n_args past the maximum", omega::session::RawLaunch { n_args: MAX_ARGS + 1, ..ok }),
        ("threads_x 0", omega::session::RawLaunch { threads_x: 0, ..ok }),
        ("grid_x 0", omega::session::RawLaunch { grid_x: 0, ..ok }),
        ("grid_y 0", omega::session::RawLaunch { grid_y: 0, ..ok }),
        ("code outside a code buffer", omega::session::RawLaunch { code_va: 0xdead_0000, ..ok }),
        ("too many threads", omega::session::RawLaunch { threads_x: 1024, threads_y: 2, ..ok }),
    ];
    let launches_before = sim.stats().launches;
    for (what, l) in cases {
        let e = launch(&rt, &l).expect_err(what);
        assert!(matches!(e, Error::LaunchArguments(_)), "{what}: {e}");
    }
    assert_eq!(sim.stats().launches, launches_before, "a refused launch runs nothing");
    assert!(!rt.is_blocked());
    // threads_y 0 means 1, and the registers are rounded to a multiple of 8, at least 64.
    let mut l = ok;
    l.gpr_count = 65;
    launch(&rt, &l).unwrap();
    l.gpr_count = 10;
    launch(&rt, &l).unwrap();
    let recs = sim.launches();
    assert_eq!(recs[recs.len() - 2].gpr_count, 72);
    assert_eq!(recs[recs.len() - 1].gpr_count, 64);
    assert_eq!(recs[recs.len() - 1].block, [32, 1, 1]);
    assert_eq!(recs[recs.len() - 1].shared_bytes, 1024, "shared 0 means the default 1 KiB");
}

#[test]
fn elapsed_ns_is_added_to_and_the_marker_is_reported() {
    let (rt, _sim) = open_runtime();
    let code = load(&rt, "empty");
    let l = raw_launch(&code, &[0], 1, 1);
    let first = launch(&rt, &l).unwrap();
    let second = launch(&rt, &l).unwrap();
    assert_eq!(second.marker, first.marker + 1, "each submission releases the next sequence number");
    assert!(first.elapsed_ns >= 2_000, "the simulated launch takes its 2 us");
}

#[test]
fn stale_handles_are_refused_counted_and_zeroed() {
    let (rt, _sim) = open_runtime();
    let mut m = rt.alloc(100).unwrap();
    assert_eq!(m.size, 4096, "rounded up to a page");
    assert_ne!(m.handle.generation, 0);
    let copy = m;
    rt.free(&mut m).unwrap();
    assert_eq!(m, omega::session::GpuMem::NONE, "free zeroes the buffer");
    let mut stale = copy;
    let e = rt.free(&mut stale).unwrap_err();
    assert!(matches!(e, Error::Handle { stage: Stage::Free, source: HandleError::Stale { .. } }), "{e}");
    assert_eq!(stale, omega::session::GpuMem::NONE);
    assert!(rt.sync_to_gpu(&copy).is_err(), "a stale handle cannot be synced");
    let st = rt.alloc_stats();
    assert_eq!((st.allocs, st.frees, st.stale_refusals), (1, 1, 1));

    // Handles of a closed device are stale after reopen, even where a slot is reused.
    let mut live = rt.alloc(10).unwrap();
    rt.unlock().unwrap();
    rt.close().unwrap();
    rt.lock().unwrap();
    rt.open().unwrap();
    assert_eq!(rt.open_count(), 2);
    let e = rt.free(&mut live).unwrap_err();
    assert_eq!(e.stage(), Stage::Free);
    assert_eq!(rt.alloc_stats().stale_refusals, 2);
}

#[test]
fn code_buffers_carry_the_prefetch_tail_and_at_least_a_page() {
    let (rt, _sim) = open_runtime();
    let zero = rt.alloc_code(0).unwrap();
    assert_eq!(zero.size, 4096);
    assert_eq!(zero.kind, omega::session::HANDLE_BUF_CODE);
    let c = rt.alloc_code(4096 - 2048 + 1).unwrap();
    assert_eq!(c.size, 8192, "code + 2 KiB tail crosses into a second page");
    // SAFETY: the CPU view covers the whole buffer.
    let tail = unsafe { std::slice::from_raw_parts(c.cpu.cast::<u8>().add(2049), 2048) };
    assert!(tail.iter().all(|&b| b == 0));
}

#[test]
fn scratch_grows_to_its_high_water_and_a_reservation_refuses_past_it() {
    let (rt, sim) = open_runtime();
    let mut s = Scratch::default();
    rt.scratch(&mut s, 1000).unwrap();
    assert_eq!((s.cap, s.high_water), (4096, 1000));
    rt.scratch(&mut s, 10_000).unwrap();
    assert_eq!((s.cap, s.high_water), (12288, 10_000));
    rt.scratch_reserve(&mut s, 20_000).unwrap();
    let allocs = rt.alloc_stats().allocs;
    let live = sim.stats().live_allocations;
    rt.scratch(&mut s, 16_000).unwrap();
    let e = rt.scratch(&mut s, 30_000).unwrap_err();
    assert!(matches!(e, Error::ScratchReserved { requested: 30_000, .. }));
    assert_eq!(omega::session::SCRATCH_RESERVED, -2);
    assert_eq!(rt.alloc_stats().allocs, allocs, "nothing allocated under the reservation");
    assert_eq!(sim.stats().live_allocations, live);
    rt.scratch_unreserve(&mut s).unwrap();
    rt.scratch(&mut s, 30_000).unwrap();
    rt.scratch_free(&mut s).unwrap();
    assert_eq!(s, Scratch::default());
}

#[test]
fn a_failed_allocation_is_named_and_counted() {
    let (rt, sim) = open_runtime();
    // A buffer past the largest carved size is its own platform allocation, which the fault refuses.
    sim.inject(SimFault::FailAlloc);
    let e = rt.alloc(4 << 20).unwrap_err();
    assert!(matches!(e, Error::Alloc(HalError::OutOfMemory { .. })), "{e}");
    assert_eq!(rt.alloc_stats().alloc_failures, 1);
    rt.alloc(4096).unwrap();
}

#[test]
fn a_kernel_fault_is_named_promptly_and_does_not_latch() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "store_to");
    let words = [addr(0x7f00_0000_1000), [1, 0]].concat();
    let mut l = raw_launch(&code, &words[..3], 1, 1);
    l.timeout_ms = 10_000;
    let t0 = sim.sim_clock().peek();
    let e = launch(&rt, &l).unwrap_err();
    assert!(matches!(&e, Error::Fault(f) if f.xid == 31 && f.name == "MMU fault"), "{e}");
    assert!(sim.sim_clock().peek() - t0 < 1_000_000_000, "seen long before the 10 s timeout");
    assert!(!rt.is_blocked(), "a fault stopped the work: completion is certain");
    let again = launch(&rt, &raw_launch(&code, &[0; 3], 1, 1)).unwrap_err();
    assert_eq!(again.stage(), Stage::Launch, "the channel stays dead until close and reopen");
    rt.unlock().unwrap();
    rt.close().unwrap();
    rt.lock().unwrap();
    rt.open().unwrap();
    let code = load(&rt, "empty");
    launch(&rt, &raw_launch(&code, &[0], 1, 1)).unwrap();
}

#[test]
fn calls_that_touch_the_device_need_the_lock_and_close_takes_it_itself() {
    let (rt, _sim) = open_runtime();
    let e = rt.close().unwrap_err();
    assert_eq!(e.stage(), Stage::Lock, "close with the lock held is refused, not a deadlock");
    rt.unlock().unwrap();
    let e = rt.alloc(10).unwrap_err();
    assert_eq!(e, Error::Lock("the calling thread does not hold the session lock (take it first)"));
    std::thread::scope(|s| {
        s.spawn(|| {
            rt.lock().unwrap();
            assert!(rt.alloc(10).is_ok());
            rt.unlock().unwrap();
        });
    });
    assert!(!rt.holds_lock());
    assert_eq!(rt.unlock(), Err(Error::Lock("unlock from a thread that does not hold the session lock")));
}

#[test]
fn spin_window_has_a_maximum_and_open_is_idempotent() {
    let (rt, _sim) = open_runtime();
    assert_eq!(rt.spin_us(), 0);
    rt.set_spin_us(50).unwrap();
    assert!(rt.set_spin_us(MAX_SPIN_US + 1).is_err());
    assert_eq!(rt.spin_us(), 50, "refused setting leaves the old one");
    rt.open().unwrap();
    assert_eq!(rt.open_count(), 1, "a second open finds the device open");
    assert!(rt.is_open());
}

#[test]
fn a_cancel_before_submit_returns_cancelled_and_runs_nothing() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "empty");
    rt.cancel();
    let e = launch(&rt, &raw_launch(&code, &[0], 1, 1)).unwrap_err();
    assert_eq!(e, Error::CancelledBeforeSubmit);
    assert_eq!(sim.stats().launches, 0);
    assert!(!rt.is_blocked());
    launch(&rt, &raw_launch(&code, &[0], 1, 1)).unwrap();
}

#[test]
fn close_runs_the_on_close_hooks_up_to_eight() {
    let (rt, _sim) = open_runtime();
    let ran = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    for _ in 0..8 {
        let r = ran.clone();
        rt.on_close(Box::new(move || {
            r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }))
        .unwrap();
    }
    assert!(rt.on_close(Box::new(|| {})).is_err());
    rt.unlock().unwrap();
    rt.close().unwrap();
    assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 8);
}

#[test]
fn a_platform_missing_a_service_is_refused_at_open() {
    let sim = omega_hal::sim::Sim::with_config(omega_hal::sim::SimConfig {
        services: omega_hal::Services::all() - omega_hal::Services::POLL,
        ..Default::default()
    });
    let rt = omega::session::Runtime::with_platform(omega::platform::Installed::simulator(sim)).unwrap();
    rt.lock().unwrap();
    let e = rt.open().unwrap_err();
    assert_eq!(e, Error::Refused(Refusal::MissingService(Services::POLL)));
}

#[test]
fn a_failed_open_carries_the_drivers_text() {
    let installed = omega::platform::Installed::sim();
    omega::testing::simulator_in(&installed)
        .unwrap()
        .inject(SimFault::FailOpen("NV_ERR_INVALID_DEVICE from the driver".into()));
    let rt = omega::session::Runtime::with_platform(installed).unwrap();
    rt.lock().unwrap();
    let e = rt.open().unwrap_err();
    assert!(
        matches!(&e, Error::Open(HalError::Driver { detail, .. }) if detail == "NV_ERR_INVALID_DEVICE from the driver"),
        "{e}"
    );
    rt.open().unwrap();
}

#[test]
fn forcing_nvidia_without_a_device_is_an_error_not_a_fallback() {
    let rt = omega::session::Runtime::new();
    let e = omega::platform::Installed::new(omega::PlatformKind::Nvidia).err();
    if std::path::Path::new("/dev/nvidiactl").exists() {
        return; // a GPU machine: nvidia is real here.
    }
    let e = e.expect("no device: no platform");
    assert_eq!(e.stage(), Stage::Platform);
    assert!(e.to_string().contains("nvidia"), "{e}");
    drop(rt);
}

#[test]
fn threads_take_turns_on_the_lock() {
    let (rt, _sim) = open_runtime();
    rt.unlock().unwrap();
    let inside = std::sync::atomic::AtomicU32::new(0);
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let (rt, inside) = (&rt, &inside);
            s.spawn(move || {
                for i in 0..50 {
                    rt.lock().unwrap();
                    assert_eq!(inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst), 0, "exclusive");
                    let mut m = rt.alloc(64 + (t * 50 + i) as usize).unwrap();
                    rt.free(&mut m).unwrap();
                    inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    rt.unlock().unwrap();
                }
            });
        }
    });
    assert_eq!(rt.alloc_stats().allocs, 200);
}

#[test]
fn parked_list_holds_512_then_counts_untracked() {
    let (rt, sim) = open_runtime();
    let mut bufs: Vec<_> = (0..PARK_MAX + 3).map(|_| rt.alloc(4096).unwrap()).collect();
    let code = load(&rt, "spin");
    let flag = rt.alloc(4).unwrap();
    sim.inject(SimFault::Hang);
    let words = [addr(flag.va), [0, 0]].concat();
    let e = launch(&rt, &raw_launch(&code, &words[..2], 1, 1)).unwrap_err();
    assert!(matches!(e, Error::Timeout { marker: 0, timeout_ms: 100 }), "{e}");
    let base = rt.parked();
    assert_eq!(base.buffers, 1, "the session's marker buffer is parked at the latch");
    for b in bufs.iter_mut() {
        rt.free(b).unwrap();
    }
    let p = rt.parked();
    assert_eq!(p.buffers, base.buffers + PARK_MAX as u64 + 3);
    assert_eq!(p.untracked, 4, "513 listed would be over the limit of 512");
    assert_eq!(p.bytes, base.bytes + 4096 * (PARK_MAX as u64 + 3));
    assert!(rt.is_parked(bufs[0].handle));
    assert!(!rt.is_parked(bufs[PARK_MAX + 2].handle), "untracked: counted, not listed");
    assert_eq!(sim.stats().frees, 0, "nothing is released after the latch");
}

#[test]
fn a_never_completing_launch_latches_the_process() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "spin");
    let flag = rt.alloc(4).unwrap();
    let mut keep = rt.alloc(3 * 4096).unwrap();
    let words = [addr(flag.va)].concat();
    let e = launch(&rt, &raw_launch(&code, &words, 32, 4)).unwrap_err();
    assert_eq!(e, Error::Timeout { marker: 0, timeout_ms: 100 });
    assert!(e.latched_the_process());
    assert_eq!(rt.latch_cause(), Some(e));
    assert!(rt.is_blocked());
    // Later launches are refused, and so is everything else that could touch the device.
    let e = launch(&rt, &raw_launch(&code, &words, 1, 1)).unwrap_err();
    assert_eq!(e, Error::Latched(Stage::Launch));
    assert_eq!(rt.alloc(10).unwrap_err(), Error::Latched(Stage::Alloc));
    // Frees park: counted with their bytes, handles still inspectable, nothing released.
    let h = keep.handle;
    rt.free(&mut keep).unwrap();
    assert_eq!(keep.handle, h, "a parked buffer keeps its handle");
    assert!(rt.is_parked(h));
    let p = rt.parked();
    assert_eq!(p.buffers, 2, "the marker buffer and the freed one");
    assert_eq!(p.bytes, 4096 + 3 * 4096);
    assert_eq!(sim.stats().frees, 0);
    // Close and reopen are refused.
    rt.unlock().unwrap();
    assert_eq!(rt.close().unwrap_err(), Error::Latched(Stage::Close));
    assert!(rt.is_open(), "close was a no-op");
    rt.lock().unwrap();
    assert_eq!(rt.open().unwrap_err(), Error::Latched(Stage::Open));
    assert_eq!(sim.stats().closes, 0);
}

#[test]
fn a_refused_completion_poll_latches() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "empty");
    sim.inject(SimFault::RefusePoll);
    let e = launch(&rt, &raw_launch(&code, &[0], 1, 1)).unwrap_err();
    assert!(matches!(e, Error::PollRefused(_)), "{e}");
    assert!(rt.is_blocked());
    assert_eq!(rt.latch_cause(), Some(e), "the failure that latched is kept");
}

#[test]
fn a_cancel_from_another_thread_after_submit_latches() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "spin");
    let flag = rt.alloc(4).unwrap();
    let words = addr(flag.va);
    let mut l = raw_launch(&code, &words, 1, 1);
    l.timeout_ms = 100_000;
    std::thread::scope(|s| {
        let canceller = s.spawn(|| {
            // Wait until the launch is in flight (the spin kernel never releases its markers).
            while sim.stats().submissions == 0 {
                std::thread::yield_now();
            }
            assert!(!rt.holds_lock(), "cancel needs no lock");
            rt.cancel();
        });
        let e = launch(&rt, &l).unwrap_err();
        canceller.join().unwrap();
        assert_eq!(e, Error::CancelledAfterSubmit);
    });
    assert!(rt.is_blocked(), "the chip cannot be stopped: completion is uncertain");
    assert_eq!(omega::session::CANCELLED, -3);
}

/// A private runtime on a simulator with `config`, locked and open.
fn open_with(config: omega_hal::sim::SimConfig) -> (omega::session::Runtime, std::sync::Arc<omega_hal::sim::Sim>) {
    let sim = omega_hal::sim::Sim::with_config(config);
    omega::kernels::register_host_kernels(&sim);
    let installed = omega::platform::Installed::simulator(sim.clone());
    let rt = omega::session::Runtime::with_platform(installed).unwrap();
    rt.lock().unwrap();
    rt.open().unwrap();
    (rt, sim)
}

#[test]
fn the_timeout_applies_to_each_marker_in_turn() {
    // Marker 0 comes 70 ms after submit, marker 1 70 ms after that: 140 ms in all, each within 100 ms.
    let ms = 1_000_000;
    let (rt, _sim) =
        open_with(omega_hal::sim::SimConfig { launch_ns: 70 * ms, idle_ns: 70 * ms, ..Default::default() });
    let code = load(&rt, "empty");
    let l = raw_launch(&code, &[0], 1, 1);
    assert_eq!(l.timeout_ms, 100);
    let done = launch(&rt, &l).expect("each marker arrived within its own 100 ms");
    assert!(done.elapsed_ns >= 140 * ms, "{} ns: longer than one limit", done.elapsed_ns);
    assert!(!rt.is_blocked());
    // Marker 1 150 ms after marker 0: its own wait runs out, after marker 0 was seen.
    let (rt, _sim) =
        open_with(omega_hal::sim::SimConfig { launch_ns: 70 * ms, idle_ns: 150 * ms, ..Default::default() });
    let code = load(&rt, "empty");
    let e = launch(&rt, &raw_launch(&code, &[0], 1, 1)).unwrap_err();
    assert_eq!(e, Error::Timeout { marker: 1, timeout_ms: 100 });
    assert!(rt.is_blocked());
}

#[test]
fn a_timeout_of_zero_latches_even_when_the_work_is_already_done() {
    // Markers due at the moment of submit: the first look would see them. 0 still runs out at once.
    let (rt, sim) = open_with(omega_hal::sim::SimConfig { launch_ns: 0, idle_ns: 0, ..Default::default() });
    let code = load(&rt, "empty");
    let mut l = raw_launch(&code, &[0], 1, 1);
    l.timeout_ms = 0;
    let e = launch(&rt, &l).unwrap_err();
    assert_eq!(e, Error::Timeout { marker: 0, timeout_ms: 0 });
    assert!(e.latched_the_process());
    assert!(rt.is_blocked());
    assert_eq!(sim.stats().submissions, 1, "it was submitted: the completion is what is uncertain");
    assert_eq!(rt.parked().buffers, 1, "the launch buffer");
}

#[test]
fn stamp_then_store_stamps_before_it_stores_and_the_stamp_outlives_its_fault() {
    let (rt, _sim) = open_runtime();
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let m = rt.alloc(4096).unwrap();
    let code = load(&rt, "stamp_then_store");
    // Mapped: the stamp is the launch's start (the simulator's %globaltimer) and the value lands.
    put_f32(&rt, &m, &[f32::from_bits(0xdead_beef); 4]);
    let value: u32 = rng.random();
    let words = [addr(m.va), addr(m.va + 8), [value, 0]].concat();
    let done = launch(&rt, &raw_launch(&code, &words[..5], 32, 1)).unwrap();
    let w: Vec<u32> = get_f32(&rt, &m, 4).iter().map(|f| f.to_bits()).collect();
    let stamp = u64::from(w[0]) | u64::from(w[1]) << 32;
    assert_eq!(w[2], value, "the store after the stamp");
    assert_eq!(w[3], 0xdead_beef, "nothing else is written");
    assert!(stamp > 0 && stamp != 0xdead_beef_dead_beef, "stamp {stamp:#x}");
    assert!(done.elapsed_ns > 0);
    // Unmapped: an MMU fault, named, with the stamp written before it.
    put_f32(&rt, &m, &[f32::from_bits(0xdead_beef); 4]);
    let words = [addr(m.va), addr(0x7f00_0000_1000), [value, 0]].concat();
    let mut l = raw_launch(&code, &words[..5], 32, 1);
    l.timeout_ms = 1000;
    match launch(&rt, &l) {
        Err(Error::Fault(f)) => assert_eq!(f.xid, 31, "{f}"),
        other => panic!("expected an MMU fault, got {other:?}"),
    }
    assert!(!rt.is_blocked(), "a fault is a certain failure, not a latch");
    let w: Vec<u32> = get_f32(&rt, &m, 4).iter().map(|f| f.to_bits()).collect();
    let second = u64::from(w[0]) | u64::from(w[1]) << 32;
    assert!(second > stamp, "the faulting launch stamped first: {second:#x} after {stamp:#x}");
    assert_eq!(w[2], 0xdead_beef, "the value went nowhere");
}
