//! Memory safety and the latch rule at the edges (issue 9): sizes that cannot exist, the library's own
//! buffers, close hooks, stale scratch buffers, a second runtime on one platform, the lock pinned while
//! the library holds CPU views, the latch parking what the device may still touch. Private runtimes on
//! private simulators, except the one test of the C close, which is alone in using the process's runtime.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use omega::error::Stage;
use omega::error::{LaunchArgError, PlatformError, SettingError};
use omega::platform::Installed;
use omega::session::{GpuMem, Handle, KernelMeta, LaunchSpec, Runtime, Scratch, MAX_ARGS};
use omega::Error;
use omega_hal::sim::{Sim, SimConfig, SimFault};
use omega_hal::{HalError, LimitError, QueueBuffer, Submission, SubmitQueue};

fn launch(rt: &Runtime, l: &omega::session::RawLaunch) -> Result<omega::session::LaunchCompletion, Error> {
    // SAFETY: `l.args` points to `l.n_args` live words for the duration of the call.
    unsafe { rt.launch_raw(l) }
}

/// A private runtime on a simulator with `config`, locked and open, leaked for hooks that need `'static`.
fn leaked(config: SimConfig) -> (&'static Runtime, Arc<Sim>) {
    let sim = Sim::with_config(config);
    omega::kernels::register_host_kernels(&sim);
    let rt = Runtime::with_platform(Installed::simulator(sim.clone())).unwrap();
    let rt: &'static Runtime = Box::leak(Box::new(rt));
    rt.lock().unwrap();
    rt.open().unwrap();
    (rt, sim)
}

// ----- 1. sizes ------------------------------------------------------------------------------------------

#[test]
fn impossible_sizes_are_refused_as_overflow_and_allocate_nothing() {
    let (rt, sim) = open_runtime();
    let before = (rt.alloc_stats(), sim.stats().live_allocations);
    use omega::session::AllocKind::{Cached, Code, Data};
    let cases = [
        ("code of usize::MAX", Code, usize::MAX),
        ("code of usize::MAX - 2047: the tail wraps to 0", Code, usize::MAX - 2047),
        ("code of usize::MAX - 4096: the rounding overflows", Code, usize::MAX - 4096),
        ("data of usize::MAX", Data, usize::MAX),
        ("data of usize::MAX - 4094: the rounding overflows", Data, usize::MAX - 4094),
        ("cached of usize::MAX", Cached, usize::MAX),
        ("data of isize::MAX + 1", Data, isize::MAX as usize + 1),
        ("data of 2^48 + 1, past the platform's range", Data, (1 << 48) + 1),
    ];
    for (what, kind, bytes) in cases {
        let e = rt.alloc_kind(bytes, kind).expect_err(what);
        assert_eq!(e, Error::Refused(omega_hal::Refusal::Overflow), "{what}");
        assert_eq!(e.stage(), Stage::Platform, "{what}");
    }
    assert_eq!((rt.alloc_stats(), sim.stats().live_allocations), before, "nothing allocated, nothing counted");
    // The largest code request that fits still gets its zeroed tail.
    let c = rt.alloc_code(3 * 4096 - 2048).unwrap();
    assert_eq!(c.size, 3 * 4096);
}

#[test]
fn shared_memory_that_overflows_a_word_is_refused_before_anything_runs() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "empty");
    rt.register_kernel(
        code.va,
        KernelMeta { name: "empty".into(), static_shared_bytes: 16, code_bytes: 16, ..Default::default() },
    )
    .unwrap();
    let spec = LaunchSpec {
        code_va: code.va,
        gpr_count: 0,
        num_elements: 1,
        args: &[0],
        max_args: MAX_ARGS as usize,
        shape: omega::session::LaunchShape {
            grid: [1, 1, 1],
            block: [1, 1, 1],
            shared_bytes: 0,
            dynamic_shared_bytes: u32::MAX,
            timeout_ms: 100,
            spin_us: 0,
            cluster: [1, 1, 1],
        },
    };
    let e = rt.launch(&spec).unwrap_err();
    // Summed in 64 bits, static + dynamic cannot wrap to a small size: it is refused by the limit.
    assert!(
        matches!(e, Error::LaunchArguments(LaunchArgError::Limit(LimitError::Shared { bytes, .. }))
            if bytes == 16 + u64::from(u32::MAX)),
        "{e}"
    );
    assert_eq!(sim.stats().submissions, 0);
    assert!(!rt.is_blocked());
}

#[test]
fn a_kernel_record_must_lie_inside_its_code_buffer() {
    let (rt, _sim) = open_runtime();
    let code = rt.alloc_code(100).unwrap();
    let data = rt.alloc(4096).unwrap();
    let meta = |code_bytes, banks: Vec<omega_hal::ConstBank>| KernelMeta {
        name: "k".into(),
        code_bytes,
        const_banks: banks,
        ..Default::default()
    };
    let bank = |va, bytes| omega_hal::ConstBank { index: 3, va, bytes };
    let refused = [
        ("an entry in a data buffer", data.va, meta(0, vec![])),
        ("an entry nowhere", 0x7000_0000_0000, meta(0, vec![])),
        ("code past the buffer", code.va + 64, meta(code.size as u64, vec![])),
        ("a bank past the buffer", code.va, meta(0, vec![bank(code.va + code.size as u64 - 16, 17)])),
        ("a bank in another buffer", code.va, meta(0, vec![bank(data.va, 16)])),
        ("a bank that wraps", code.va, meta(0, vec![bank(u64::MAX - 8, 64)])),
    ];
    for (what, va, m) in refused {
        let e = rt.register_kernel(va, m).expect_err(what);
        assert_eq!(e.stage(), Stage::Load, "{what}: {e}");
    }
    rt.register_kernel(code.va + 64, meta(code.size as u64 - 64, vec![bank(code.va + 256, 100)])).unwrap();
    rt.unlock().unwrap();
    assert_eq!(rt.register_kernel(code.va, meta(0, vec![])).unwrap_err().stage(), Stage::Lock);
}

// ----- 2, 6. buffers the library owns --------------------------------------------------------------------

#[test]
fn the_stamp_area_of_a_command_list_cannot_be_freed_through_the_callers_free() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "empty");
    let mut list = omega::cmdlist::CmdList::create_locked(&rt, None).unwrap();
    let mut copy = *list.stamp_buffer();
    let frees = rt.alloc_stats().frees;
    let e = rt.free(&mut copy).unwrap_err();
    assert_eq!(e, Error::NotCallers { stage: Stage::Free, owner: "a command list's stamp area" });
    assert_eq!(copy, *list.stamp_buffer(), "the caller's copy is left as it was");
    assert_eq!(rt.alloc_stats().frees, frees, "a refusal is not a free");
    // Neither can a scratch call that is handed its handle.
    let mut s = Scratch { mem: copy, cap: 0, high_water: 0, reserved: 0 };
    assert_eq!(rt.scratch(&mut s, 1 << 20).unwrap_err().stage(), Stage::Scratch);
    assert!(rt.scratch_free(&mut s).is_err());
    assert_eq!(s.mem, copy, "a refused scratch free keeps the scratch");
    // The list still submits and stamps.
    let l = raw_launch(&code, &[0], 1, 1);
    // SAFETY: `l.args` points to one live word.
    unsafe { list.add_raw(&l) }.unwrap();
    list.submit().unwrap();
    assert_eq!(list.stamps_vec().len(), 1);
    assert!(list.stamps_vec()[0] > 0);
    let live = sim.stats().live_allocations;
    list.free_locked().unwrap();
    assert_eq!(sim.stats().live_allocations, live - 1, "its owner releases it");
}

// ----- 3, 7. close hooks ---------------------------------------------------------------------------------

/// The part of a buffer a hook (which must be `Send`) can carry: handle and address, no CPU view.
fn by_handle(m: &GpuMem) -> (Handle, u64) {
    (m.handle, m.va)
}

fn named(h: (Handle, u64)) -> GpuMem {
    GpuMem { handle: h.0, va: h.1, ..GpuMem::NONE }
}

#[test]
fn a_close_hook_may_only_release_buffers_and_cannot_latch() {
    let (rt, sim) = leaked(SimConfig::default());
    let code = load(rt, "spin");
    let code = (code.va, code.size);
    let flag = by_handle(&rt.alloc(4).unwrap());
    let owned = by_handle(&rt.alloc(4096).unwrap());
    let seen: &'static Mutex<Vec<Result<(), Error>>> = Box::leak(Box::new(Mutex::new(Vec::new())));
    let held: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
    rt.on_close(Box::new(move || {
        let mut seen = seen.lock().unwrap();
        // The hook's own buffer: released.
        seen.push(rt.free(&mut named(owned)));
        // A launch that would never complete: refused, so it cannot latch under the close.
        sim_hang(rt);
        let words = addr(flag.1);
        let code = GpuMem { va: code.0, size: code.1, ..GpuMem::NONE };
        seen.push(launch(rt, &raw_launch(&code, &words, 1, 1)).map(drop));
        seen.push(rt.alloc(4).map(drop));
        seen.push(rt.sync_to_gpu(&named(flag)));
        seen.push(rt.open());
        seen.push(rt.unlock());
        held.store(usize::from(rt.holds_lock()), Ordering::SeqCst);
        seen.push(rt.lock());
        seen.push(rt.close());
    }))
    .unwrap();
    let frees = rt.alloc_stats().frees;
    rt.unlock().unwrap();
    rt.close().unwrap();
    let seen = seen.lock().unwrap().clone();
    let hook = |stage| Err(Error::CloseHook(stage));
    assert_eq!(
        seen,
        [
            Ok(()),
            hook(Stage::Launch),
            hook(Stage::Alloc),
            hook(Stage::Sync),
            hook(Stage::Open),
            Err(Error::LockPinned("close, running its on-close hooks")),
            hook(Stage::Lock),
            Err(Error::Lock("close takes the session lock itself: call it without the lock")),
        ]
    );
    assert_eq!(held.load(Ordering::SeqCst), 1, "the refused unlock left the lock held");
    assert!(!rt.is_blocked(), "nothing launched, so nothing latched");
    assert!(!rt.is_open());
    assert_eq!(rt.parked().buffers, 0);
    assert_eq!(sim.stats().live_allocations, 0, "close released everything");
    assert_eq!(sim.stats().launches, 0);
    assert_eq!(rt.alloc_stats().frees, frees + 3, "the hook's free, then the code and the flag");
    assert!(!rt.holds_lock());
    assert!(rt.try_lock().unwrap(), "close released the lock");
    rt.unlock().unwrap();
}

/// Queues a never-ending launch on the runtime's simulator.
fn sim_hang(rt: &Runtime) {
    omega::testing::simulator_of(rt).unwrap().inject(SimFault::Hang);
}

#[test]
fn a_panicking_close_hook_still_closes_and_releases_the_lock() {
    let (rt, sim) = leaked(SimConfig::default());
    let _m = rt.alloc(4096).unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    rt.on_close(Box::new(|| panic!("a bug in a library's hook"))).unwrap();
    rt.on_close(Box::new(move || {
        r.fetch_add(1, Ordering::SeqCst);
    }))
    .unwrap();
    rt.unlock().unwrap();
    let panic = std::panic::catch_unwind(|| rt.close()).expect_err("the hook's panic goes on to the caller");
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"a bug in a library's hook"));
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the next hook still ran");
    assert!(!rt.is_open(), "the close completed");
    assert_eq!(sim.stats().live_allocations, 0);
    assert!(!rt.holds_lock());
    let other = std::thread::spawn(move || {
        let took = rt.try_lock().unwrap();
        if took {
            rt.unlock().unwrap();
        }
        took
    });
    assert!(other.join().unwrap(), "another thread takes the lock");
}

/// The C close on the process's runtime (the only test of this file that touches it).
#[test]
fn a_panicking_rust_hook_under_the_c_close_leaves_the_lock_free() {
    let rt = omega::session::runtime();
    rt.lock().unwrap();
    rt.set_platform(omega::PlatformKind::Sim).unwrap();
    rt.open().unwrap();
    rt.unlock().unwrap();
    rt.on_close(Box::new(|| panic!("a panicking hook"))).unwrap();
    omega::ffi::session::omega_gpu_session_close();
    assert_eq!(c_last_error(), "internal: panic in omega_gpu_session_close", "the C text names the function");
    assert!(!rt.is_open());
    let took = std::thread::spawn(|| {
        let rt = omega::session::runtime();
        let took = rt.try_lock().unwrap();
        if took {
            rt.unlock().unwrap();
        }
        took
    });
    assert!(took.join().unwrap(), "the lock is free for another thread");
    assert!(rt.try_lock().unwrap(), "and for this one");
    rt.unlock().unwrap();
}

// ----- 4, 14. scratch ------------------------------------------------------------------------------------

/// Closes the device (every handle of it goes stale) and opens it again, the lock held before and after.
fn reopen(rt: &Runtime) {
    rt.unlock().unwrap();
    rt.close().unwrap();
    rt.lock().unwrap();
    rt.open().unwrap();
}

#[test]
fn a_scratch_of_a_closed_device_is_never_reused() {
    let (rt, sim) = open_runtime();
    let mut s = Scratch::default();
    rt.scratch(&mut s, 1000).unwrap();
    let old = s.mem;
    reopen(&rt);
    rt.scratch(&mut s, 1000).unwrap();
    assert_ne!(s.mem.handle, old.handle, "a new buffer, not the closed device's");
    rt.sync_to_gpu(&s.mem).expect("the buffer it hands out is live");
    assert_eq!(sim.stats().live_allocations, 2, "the launch buffer and the new scratch");
    // Under a reservation a stale scratch cannot be replaced without allocating: refused.
    rt.scratch_reserve(&mut s, 1000).unwrap();
    reopen(&rt);
    let e = rt.scratch(&mut s, 10).unwrap_err();
    assert_eq!(e, Error::Setting { stage: Stage::Scratch, detail: SettingError::StaleReservation });
    assert_eq!(sim.stats().live_allocations, 1, "nothing allocated");
    rt.scratch_free(&mut s).unwrap_err(); // stale: refused, counted, and the scratch is cleared
    assert_eq!(s, Scratch::default());
}

#[test]
fn scratch_needs_the_lock_even_when_the_request_fits() {
    let (rt, _sim) = open_runtime();
    let mut s = Scratch::default();
    rt.scratch_reserve(&mut s, 1000).unwrap();
    let kept = s;
    rt.unlock().unwrap();
    assert_eq!(rt.scratch(&mut s, 10).unwrap_err().stage(), Stage::Lock);
    assert_eq!(rt.scratch_unreserve(&mut s).unwrap_err().stage(), Stage::Lock);
    assert_eq!(rt.scratch_reserve(&mut s, 10).unwrap_err().stage(), Stage::Lock);
    assert_eq!(s, kept, "the reservation stays");
    assert_eq!(rt.scratch_free(&mut s).unwrap_err().stage(), Stage::Lock);
    assert_eq!(s, kept, "a refused free leaves the scratch as it was: nothing leaks");
    rt.lock().unwrap();
    rt.scratch_free(&mut s).unwrap();
    assert_eq!(s, Scratch::default());
}

#[test]
fn a_reservation_bounds_requests_by_the_size_reserved_not_the_page() {
    let (rt, _sim) = open_runtime();
    let mut s = Scratch::default();
    rt.scratch_reserve(&mut s, 1000).unwrap();
    assert_eq!(s.cap, 4096);
    let allocs = rt.alloc_stats().allocs;
    rt.scratch(&mut s, 1000).unwrap();
    let e = rt.scratch(&mut s, 2000).unwrap_err();
    assert_eq!(e, Error::ScratchReserved { requested: 2000, reserved: 1000 });
    assert_eq!(rt.alloc_stats().allocs, allocs);
    rt.scratch_unreserve(&mut s).unwrap();
    rt.scratch(&mut s, 2000).unwrap();
    assert_eq!(rt.alloc_stats().allocs, allocs, "within the page: no new buffer once unreserved");
}

#[test]
fn a_parked_scratch_keeps_its_handle_and_is_not_handed_out_again() {
    let (rt, sim) = open_runtime();
    let mut s = Scratch::default();
    rt.scratch(&mut s, 5000).unwrap();
    let code = load(&rt, "spin");
    let flag = rt.alloc(4).unwrap();
    sim.inject(SimFault::Hang);
    launch(&rt, &raw_launch(&code, &addr(flag.va), 1, 1)).unwrap_err();
    assert!(rt.is_blocked());
    let h = s.mem.handle;
    rt.scratch_free(&mut s).unwrap();
    assert_eq!(s.mem.handle, h, "parked: the handle stays for is_parked");
    assert!(rt.is_parked(s.mem.handle));
    let e = rt.scratch(&mut s, 10).unwrap_err();
    assert_eq!(e, Error::Setting { stage: Stage::Scratch, detail: SettingError::ScratchParked });
}

#[test]
fn a_failed_grow_keeps_the_old_buffer() {
    let (rt, sim) = open_runtime();
    let mut s = Scratch::default();
    rt.scratch(&mut s, 1000).unwrap();
    let old = s;
    // A grow past the largest carved size: its own platform allocation, which the fault refuses.
    sim.inject(SimFault::FailAlloc);
    assert_eq!(rt.scratch(&mut s, 4 << 20).unwrap_err().stage(), Stage::Alloc);
    assert_eq!(s, old);
    rt.sync_to_gpu(&s.mem).expect("still live");
}

// ----- 5. one runtime per platform -----------------------------------------------------------------------

#[test]
fn a_second_runtime_on_the_same_platform_cannot_be_made() {
    let (rt, sim) = open_runtime();
    let e = Runtime::with_platform(rt.installed().unwrap()).err().expect("refused");
    assert_eq!(e, Error::Platform(PlatformError::ClaimedByAnotherRuntime { platform: "sim" }));
    let again = Runtime::with_platform(Installed::simulator(sim.clone()));
    assert!(again.is_err(), "whatever handle reaches the instance");
    // Installing it into another runtime is refused too.
    let other = Runtime::with_platform(Installed::sim()).unwrap();
    other.lock().unwrap();
    let e = other.install(rt.installed().unwrap()).unwrap_err();
    assert_eq!(e, Error::Platform(PlatformError::ClaimedByAnotherRuntime { platform: "sim" }));
    other.unlock().unwrap();
    // Its own runtime may install it again.
    rt.unlock().unwrap();
    rt.close().unwrap();
    rt.lock().unwrap();
    rt.install(rt.installed().unwrap()).unwrap();
    // The instance stays the first runtime's even after that runtime is gone (it may be open, or latched).
    rt.open().unwrap();
    let installed = rt.installed().unwrap();
    drop(rt);
    assert!(Runtime::with_platform(installed).is_err());
}

#[test]
fn the_latch_belongs_to_the_device_whatever_handle_reaches_it() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "spin");
    let flag = rt.alloc(4).unwrap();
    sim.inject(SimFault::Hang);
    launch(&rt, &raw_launch(&code, &addr(flag.va), 1, 1)).unwrap_err();
    assert!(rt.is_blocked());
    // No second runtime can reach this device to open, launch or close it.
    assert!(Runtime::with_platform(rt.installed().unwrap()).is_err());
    rt.unlock().unwrap();
    assert_eq!(rt.close().unwrap_err(), Error::Latched(Stage::Close));
    assert_eq!(sim.stats().frees, 0, "nothing was released");
    assert_eq!(sim.stats().closes, 0);
}

// ----- 12. the latch parks what the device may still touch -----------------------------------------------

/// The simulator's queue, reporting buffers of its own in flight as the NVIDIA backend's does.
struct Reporting(Arc<Sim>);

const RING: QueueBuffer = QueueBuffer { what: "ring", va: 0x10, bytes: 65536 };
const QMDS: QueueBuffer = QueueBuffer { what: "QMDs and constant banks", va: 0x20000, bytes: 1 << 20 };

impl SubmitQueue for Reporting {
    unsafe fn submit(&self, s: &Submission<'_>) -> Result<(), HalError> {
        // SAFETY: forwarded from the caller.
        unsafe { SubmitQueue::submit(&*self.0, s) }
    }
    fn in_flight_buffers(&self) -> Vec<QueueBuffer> {
        vec![RING, QMDS]
    }
}

#[test]
fn the_latch_counts_the_platforms_own_buffers_and_the_lists_stamps_as_parked() {
    let sim = Sim::new();
    omega::kernels::register_host_kernels(&sim);
    let rt = Runtime::with_platform(Forwarding::with_queue(sim.clone(), Reporting(sim.clone())).installed()).unwrap();
    rt.lock().unwrap();
    rt.open().unwrap();
    let code = load(&rt, "spin");
    let flag = rt.alloc(4).unwrap();
    let mut list = omega::cmdlist::CmdList::create_locked(&rt, None).unwrap();
    let words = addr(flag.va);
    // SAFETY: `words` lives for the call.
    unsafe { list.add_raw(&raw_launch(&code, &words, 1, 1)) }.unwrap();
    let idle = omega::cmdlist::CmdList::create_locked(&rt, None).unwrap();
    assert_eq!(rt.parked().buffers, 0);
    sim.inject(SimFault::Hang);
    list.submit().unwrap_err();
    assert!(rt.is_blocked());
    let p = rt.parked();
    let stamps = list.stamp_buffer().size as u64;
    assert_eq!(p.buffers, 4, "launch buffer, the latched list's stamps, the platform's ring and QMD pages");
    assert_eq!(p.untracked, 2, "the platform's own have no handle: counted, not listed");
    assert_eq!(p.bytes, 4096 + stamps + RING.bytes + QMDS.bytes);
    assert!(rt.is_parked(list.stamp_buffer().handle), "the stamps the device may still write: parked at once");
    assert!(!rt.is_parked(idle.stamp_buffer().handle), "a list that submitted nothing is not in flight");
    list.free_locked().unwrap();
    assert_eq!(rt.parked().buffers, 4, "freeing it later counts it once");
    idle.free_locked().unwrap();
    assert_eq!(rt.parked().buffers, 5, "every free after the latch parks");
    assert_eq!(sim.stats().frees, 0);
}
