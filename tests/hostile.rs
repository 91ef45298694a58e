//! Hostile launches and handles on the simulator: shapes and arguments that no kernel should get, and what
//! the runtime does with them — refuse them by name before anything runs, or run them in bounded slices
//! that a fault or the launch's own timeout stops. Nothing here may abort the process, hang, or answer
//! "done" for work that was not done. Each test has its own runtime (and simulator), so latches stay
//! local; the typed test at the end uses the process's and does not latch it.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use omega::error::Stage;
use omega::session::suballoc::LARGEST_CARVED;
use omega::session::{GpuMem, RawLaunch, Runtime, Scratch, MAX_SPIN_US};
use omega::{Error, LaunchArgError};
use omega_hal::sim::{code_image, KernelCtx, KernelError, Sim, SimFault};
use omega_hal::LimitError;

fn launch(rt: &Runtime, l: &RawLaunch) -> Result<omega::session::LaunchCompletion, Error> {
    // SAFETY: `l.args` points to `l.n_args` live words for the duration of the call.
    unsafe { rt.launch_raw(l) }
}

/// Reads `n` u32 from a buffer after syncing it to the CPU.
fn get_u32(rt: &Runtime, m: &GpuMem, n: usize) -> Vec<u32> {
    rt.sync_to_cpu(m).unwrap();
    // SAFETY: the tests allocate at least `n` words in `m`, whose CPU view covers the whole buffer.
    unsafe { std::slice::from_raw_parts(m.cpu.cast::<u32>(), n).to_vec() }
}

/// A code buffer holding the simulator image of `name` (a kernel registered on the simulator, with no
/// parameter table of its own).
fn load_unlisted(rt: &Runtime, name: &str) -> GpuMem {
    let image = code_image(name);
    let code = rt.alloc_code(image.len()).unwrap();
    // SAFETY: the code buffer's CPU view holds at least `image.len()` bytes and nothing else uses it yet.
    unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), code.cpu.cast::<u8>(), image.len()) };
    code
}

/// A C-style launch of `code`, for shapes whose thread count does not fit in a u32 (the common helper
/// multiplies them).
fn shaped(code: &GpuMem, args: &[u32], threads: u32, grid: u32) -> RawLaunch {
    RawLaunch {
        threads_x: threads,
        grid_x: grid,
        num_elements: threads.saturating_mul(grid),
        ..raw_launch(code, args, 1, 1)
    }
}

/// Bytes of the smallest buffer that is a platform allocation of its own. A smaller one is carved from a
/// chunk of the session's memory manager, so a store past its end lands in its neighbours (as with any
/// sub-allocator, on the GPU too); past the end of one of its own, the next page is unmapped and faults.
const OWN: usize = LARGEST_CARVED as usize + 4096;

fn xid(e: &Error) -> Option<u32> {
    match e {
        Error::Fault(f) => Some(f.xid),
        _ => None,
    }
}

// ----- item 9: hostile shapes on the simulator ------------------------------------------------------------

#[test]
fn a_grid_of_2_to_the_32_threads_writes_its_indices_until_the_buffer_ends_then_faults() {
    // 1024 threads x 4,194,304 blocks: the thread count is 2^32. The kernel's own 32-bit index covers every
    // one of them, into a buffer of its own: the stores up to its end land, the next faults (Xid 31), as on
    // the GPU. Before: the count wrapped to 0, nothing was written and the launch reported success.
    let (rt, sim) = open_runtime();
    let out = rt.alloc(OWN).unwrap();
    let code = load(&rt, "grid_index");
    let words = addr(out.va);
    let l = shaped(&code, &words, 1024, 4_194_304);
    let e = launch(&rt, &l).expect_err("2^32 stores into 4 KiB cannot succeed");
    assert_eq!(xid(&e), Some(31), "{e}");
    assert!(e.to_string().contains(&format!("{:#x}", out.va + OWN as u64)), "the first store past the buffer: {e}");
    assert!(!rt.is_blocked(), "a fault is certain: no latch");
    let rec = sim.launches().pop().unwrap();
    assert_eq!((rec.kernel.as_str(), rec.block, rec.grid), ("grid_index", [1024, 1, 1], [4_194_304, 1, 1]));
    // Reopen (the channel is dead after a fault) is not needed to read: the buffer is still the session's.
    assert_eq!(get_u32(&rt, &out, OWN / 4), (0..OWN as u32 / 4).collect::<Vec<u32>>());
}

#[test]
fn n_of_u32_max_faults_at_the_end_of_the_buffers_without_a_host_allocation_to_match() {
    // Before: vector_add read 2^32 - 1 floats into a host vector (17 GB) and the process aborted.
    for (kernel, threads, grid) in [("vector_add", 1024, 4_194_304), ("scale_copy", 256, 1), ("module_data", 32, 1)] {
        let (rt, _sim) = open_runtime();
        // Buffers of their own, so the first access past one faults (see OWN).
        let (x, y, z) = (rt.alloc(OWN).unwrap(), rt.alloc(OWN).unwrap(), rt.alloc(OWN).unwrap());
        let code = load(&rt, kernel);
        let words: Vec<u32> = match kernel {
            "vector_add" => [&addr(x.va)[..], &addr(y.va), &addr(z.va), &[u32::MAX]].concat(),
            "scale_copy" => [&addr(x.va)[..], &addr(y.va), &[2.0f32.to_bits(), u32::MAX]].concat(),
            _ => [&addr(x.va)[..], &[1.0f32.to_bits(), u32::MAX]].concat(),
        };
        let started = Instant::now();
        let e = launch(&rt, &shaped(&code, &words, threads, grid)).expect_err(kernel);
        assert_eq!(xid(&e), Some(31), "{kernel}: {e}");
        assert!(!rt.is_blocked(), "{kernel}");
        assert!(started.elapsed() < Duration::from_secs(60), "{kernel}: one slice, not the whole grid");
    }
}

#[test]
fn a_timestamp_per_block_of_a_huge_grid_faults_instead_of_allocating_it() {
    // 65535 x 65535 blocks: 16 bytes each would be 69 GB of host memory at once.
    let (rt, _sim) = open_runtime();
    let stamps = rt.alloc(4096).unwrap();
    let code = load(&rt, "timestamps");
    let words = [&addr(stamps.va)[..], &[0, 0]].concat();
    let l = RawLaunch { grid_y: 65535, ..raw_launch(&code, &words, 1, 65535) };
    let e = launch(&rt, &l).expect_err("69 GB of stamps into 4 KiB");
    assert_eq!(xid(&e), Some(31), "{e}");
}

#[test]
fn a_long_simulated_kernel_is_stopped_by_the_launchs_own_timeout() {
    // local_array over 2^31 - 1 blocks of 1024 threads (2^41 threads, each 64 steps): far more than any test
    // can run. Its output buffer is large enough that no store faults before the limit, so only the 5 ms
    // timeout can end the wait. Before: the grid ran inside submit, where no timeout reaches.
    let (rt, sim) = open_runtime();
    let out = rt.alloc(64 << 20).unwrap();
    let code = load(&rt, "local_array");
    let words = [&addr(out.va)[..], &[7]].concat();
    let l = RawLaunch { timeout_ms: 5, ..shaped(&code, &words, 1024, 0x7fff_ffff) };
    let launches = sim.stats().launches;
    let started = Instant::now();
    let e = launch(&rt, &l).expect_err("the kernel cannot finish in 5 ms");
    assert!(matches!(e, Error::Timeout { marker: 0, timeout_ms: 5 }), "{e}");
    assert!(rt.is_blocked(), "an uncertain completion latches");
    assert_eq!(sim.stats().launches, launches, "the launch never finished");
    assert!(started.elapsed() < Duration::from_secs(120), "stopped after a few slices");
}

#[test]
fn large_launches_run_in_slices_that_take_virtual_time() {
    // 200,000 elements are four slices of 65,536: the results are whole, and the launch took the first
    // slice's launch_ns plus slice_ns for each further one.
    let (rt, sim) = open_runtime();
    let n = 200_000usize;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| (n - i) as f32 * 0.5).collect();
    let (ma, mb, mc) = (rt.alloc(n * 4).unwrap(), rt.alloc(n * 4).unwrap(), rt.alloc(n * 4).unwrap());
    put_f32(&rt, &ma, &a);
    put_f32(&rt, &mb, &b);
    put_f32(&rt, &mc, &vec![f32::NAN; n]);
    let code = load(&rt, "vector_add");
    let words = [&addr(ma.va)[..], &addr(mb.va), &addr(mc.va), &[n as u32]].concat();
    let l = raw_launch(&code, &words, 256, n.div_ceil(256) as u32);
    let done = launch(&rt, &l).unwrap();
    assert_eq!(get_f32(&rt, &mc, n), omega::kernels::vector_add_ref(&a, &b));
    let rec = sim.launches().pop().unwrap();
    let cfg = sim.config();
    assert_eq!(rec.slices, 4);
    assert_eq!(rec.end_ns - rec.start_ns, cfg.launch_ns + 3 * cfg.slice_ns);
    assert!(done.elapsed_ns >= rec.end_ns - rec.start_ns, "{} ns", done.elapsed_ns);
}

#[test]
fn shapes_past_the_architecture_are_refused_by_name_before_submit() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "empty");
    let words = [0u32];
    let ok = raw_launch(&code, &words, 32, 1);
    let side = |what: &'static str, axis, n| {
        move |e: &LaunchArgError| {
            matches!(e, LaunchArgError::Limit(LimitError::Side { what: w, axis: a, n: m, .. })
                if *w == what && *a == axis && *m == n)
        }
    };
    let registers = |registers, max| {
        move |e: &LaunchArgError| {
            matches!(e, LaunchArgError::Registers { limit: LimitError::Registers { registers: r, max: m, .. }, .. }
                if *r == registers && *m == max)
        }
    };
    let spin = |e: &LaunchArgError| *e == LaunchArgError::SpinTooLong { us: MAX_SPIN_US + 1, max: MAX_SPIN_US };
    type Refused<'a> = &'a dyn Fn(&LaunchArgError) -> bool;
    let cases: [(&str, RawLaunch, Refused<'_>); 5] = [
        ("grid x of u32::MAX", RawLaunch { grid_x: u32::MAX, ..ok }, &side("grid", 'x', u32::MAX)),
        ("grid y past 65535", RawLaunch { grid_y: 65536, ..ok }, &side("grid", 'y', 65536)),
        ("gpr_count u32::MAX", RawLaunch { gpr_count: u32::MAX, ..ok }, &registers(u32::MAX, 256)),
        ("gpr_count rounding past 256", RawLaunch { gpr_count: 257, ..ok }, &registers(264, 256)),
        ("spin past the maximum", RawLaunch { spin_us: MAX_SPIN_US + 1, ..ok }, &spin),
    ];
    let submissions = sim.stats().submissions;
    for (what, l, refused) in cases {
        let e = launch(&rt, &l).expect_err(what);
        assert!(matches!(&e, Error::LaunchArguments(why) if refused(why)), "{what}: {e}");
        assert_eq!(e.stage(), Stage::LaunchArguments, "{what}: {e}");
    }
    assert_eq!(sim.stats().submissions, submissions, "nothing was submitted");
    // The limits themselves are accepted and reach the descriptor as given; a kernel using all 255
    // registers a thread has is declared as 256, rounded up to 8 as libcuda rounds it.
    launch(&rt, &RawLaunch { gpr_count: 255, spin_us: MAX_SPIN_US, grid_y: 65535, ..ok }).unwrap();
    let rec = sim.launches().pop().unwrap();
    assert_eq!((rec.gpr_count, rec.grid), (256, [1, 65535, 1]));
    launch(&rt, &RawLaunch { gpr_count: 256, ..ok }).unwrap();
    assert_eq!(sim.launches().pop().unwrap().gpr_count, 256);
}

#[test]
fn shared_memory_is_bounded_by_what_a_block_may_have() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "empty");
    let words = [0u32];
    let ok = raw_launch(&code, &words, 32, 1);
    // 228 KiB per block on sm_90, the system's 1 KiB included: 227 KiB for the kernel.
    let shared = |e: &Error, asked: u64| {
        matches!(e, Error::LaunchArguments(LaunchArgError::Limit(LimitError::Shared { bytes, max: 233_472, reserved: 1024, sm: (9, 0) }))
            if *bytes == asked)
    };
    let e = launch(&rt, &RawLaunch { shared_bytes: 233_473, ..ok }).expect_err("one byte past");
    assert!(shared(&e, 233_473), "{e}");
    launch(&rt, &RawLaunch { shared_bytes: 233_472, ..ok }).unwrap();
    assert_eq!(sim.launches().pop().unwrap().shared_bytes, 233_472);
    let e = launch(&rt, &RawLaunch { shared_bytes: u32::MAX, ..ok }).expect_err("4 GiB of shared memory");
    assert!(shared(&e, u64::from(u32::MAX)), "{e}");
}

#[test]
fn the_simulator_itself_refuses_a_descriptor_past_its_limits() {
    // What the session would refuse, handed to the platform directly: refused with the limit named, not
    // run and not an abort.
    let sim = Sim::new();
    let installed = omega::platform::Installed::simulator(sim.clone());
    let rt = Runtime::with_platform(installed).expect("a fresh simulator belongs to no runtime yet");
    rt.lock().unwrap();
    rt.open().unwrap();
    let code = load_unlisted(&rt, "empty");
    let marks = rt.alloc(4096).unwrap();
    let markers = [
        omega_hal::MarkerSlot { va: marks.va, cpu: marks.cpu.cast() },
        omega_hal::MarkerSlot { va: marks.va + 16, cpu: marks.cpu.cast::<u8>().wrapping_add(16) },
    ];
    let desc = omega_hal::LaunchDesc {
        code_va: code.va,
        code_bytes: 0,
        gpr_count: 64,
        block: [32, 1, 1],
        grid: [1, 70_000, 1],
        shared_bytes: 1024,
        dynamic_shared_bytes: 0,
        local_bytes_per_thread: 0,
        barrier_count: 0,
        features: omega_hal::LaunchFeatures::NONE,
        num_elements: 0,
        args: &[0],
        const_banks: &[],
        order: omega_hal::Order::AfterPrevious,
        skip: false,
    };
    let queue = omega_hal::Platform::queue(&*sim).unwrap();
    let sub = omega_hal::Submission { launches: &[desc], markers, sequence: 1, stamps: None };
    // SAFETY: the device is open and this thread holds the session lock; the code and marker addresses lie
    // in live buffers that stay allocated until the runtime closes; nothing else is in flight.
    let e = unsafe { queue.submit(&sub) }.expect_err("a grid 70,000 blocks high");
    assert!(e.to_string().contains("sim: launch 0: grid y of 70000 is not in 1..=65535 (sm_90)"), "{e}");
    let registers = omega_hal::LaunchDesc { grid: [1, 1, 1], gpr_count: u32::MAX, ..desc };
    let sub = omega_hal::Submission { launches: &[registers], ..sub };
    // SAFETY: as above.
    let e = unsafe { queue.submit(&sub) }.expect_err("u32::MAX registers");
    assert!(e.to_string().contains("4294967295 registers per thread"), "{e}");
    assert_eq!(sim.stats().submissions, 0);
}

#[test]
fn a_panic_after_submit_latches_like_an_uncertain_completion() {
    // A host kernel that panics (in a debug build an overflow does) runs after the submit: the device may
    // hold the work, so the launch latches and says why instead of unwinding past the buffers.
    let (rt, sim) = open_runtime();
    sim.register_kernel(
        "panics",
        Arc::new(|ctx: &mut KernelCtx<'_>| -> Result<(), KernelError> { panic!("kernel bug at word {}", ctx.word(0)) }),
    );
    let code = load_unlisted(&rt, "panics");
    let words = [3u32];
    let e = launch(&rt, &raw_launch(&code, &words, 1, 1)).expect_err("the kernel panicked");
    assert!(e.latched_the_process(), "{e}");
    // The panic's own words are open-ended text: the one place a substring is the check.
    assert!(matches!(&e, Error::PanicAfterSubmit(what) if what.contains("kernel bug at word 3")), "{e}");
    assert!(rt.is_blocked(), "latched");
    assert!(rt.parked().buffers >= 1, "the session's launch buffer is parked");
    assert_eq!(rt.latch_cause(), Some(e), "the panic is the latch's cause");
}

// ----- item 13: num_elements reaches the descriptor -------------------------------------------------------

#[test]
fn num_elements_reaches_the_platforms_descriptor_from_a_launch_and_a_list() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "empty");
    let words = [0u32];
    launch(&rt, &RawLaunch { num_elements: 0xdead_beef, ..raw_launch(&code, &words, 32, 1) }).unwrap();
    assert_eq!(sim.launches().pop().unwrap().num_elements, 0xdead_beef);
    let mut list = omega::cmdlist::CmdList::create_locked(&rt, None).unwrap();
    for n in [1u32, 77, u32::MAX] {
        // SAFETY: `words` lives for the call; the list copies the words.
        unsafe { list.add_raw(&RawLaunch { num_elements: n, ..raw_launch(&code, &words, 32, 1) }) }.unwrap();
    }
    list.submit().unwrap();
    let got: Vec<u32> = sim.launches().iter().rev().take(3).rev().map(|r| r.num_elements).collect();
    assert_eq!(got, [1, 77, u32::MAX]);
    list.free_locked().unwrap();
}

// ----- item 10: handles and scratch -----------------------------------------------------------------------

#[test]
fn a_live_handle_with_another_address_is_refused_by_its_own_name() {
    let (rt, _sim) = open_runtime();
    let m = rt.alloc(4096).unwrap();
    let mut forged = GpuMem { va: m.va + 4096, ..m };
    let e = rt.free(&mut forged).expect_err("the address is not the handle's buffer");
    assert_eq!(e.stage(), Stage::Free);
    let text = e.to_string();
    assert!(!text.contains("handle is zero"), "{text}");
    assert!(text.contains(&format!("is live but names the buffer at {:#x}, not {:#x}", m.va, m.va + 4096)), "{text}");
    assert_eq!(rt.alloc_stats().stale_refusals, 1);
    let mut m = m;
    rt.free(&mut m).expect("the buffer itself is untouched and frees");
}

#[test]
fn a_scratch_grow_that_cannot_allocate_keeps_the_old_buffer() {
    let (rt, sim) = open_runtime();
    let mut s = Scratch::default();
    rt.scratch(&mut s, 1000).unwrap();
    let old = s;
    let frees = rt.alloc_stats().frees;
    // A grow past the largest carved size: its own platform allocation, which the fault refuses.
    sim.inject(SimFault::FailAlloc);
    let e = rt.scratch(&mut s, 4 << 20).expect_err("the allocation fails");
    assert_eq!(e.stage(), Stage::Alloc);
    assert_eq!(s, old, "the old buffer, its capacity and high-water mark stay");
    assert_eq!(rt.alloc_stats().frees, frees, "nothing was freed");
    rt.sync_to_gpu(&s.mem).expect("the old buffer is still live");
    // The next grow succeeds and releases the old buffer after the new one exists.
    rt.scratch(&mut s, 4 << 20).unwrap();
    assert!(s.cap >= 4 << 20 && s.mem.handle != old.mem.handle);
    assert_eq!(rt.alloc_stats().frees, frees + 1);
    rt.scratch_free(&mut s).unwrap();
}

#[test]
fn resetting_a_list_needs_the_lock_as_adding_to_it_does() {
    let (rt, _sim) = open_runtime();
    let code = load(&rt, "empty");
    let words = [0u32];
    let mut list = omega::cmdlist::CmdList::create_locked(&rt, None).unwrap();
    // SAFETY: `words` lives for the call; the list copies the words.
    unsafe { list.add_raw(&raw_launch(&code, &words, 32, 1)) }.unwrap();
    rt.unlock().unwrap();
    let e = list.reset().expect_err("reset without the lock");
    assert!(matches!(e, omega::cmdlist::CmdListError::Session(Error::Lock(_))), "{e}");
    assert_eq!(list.count(), 1, "nothing was forgotten");
    rt.lock().unwrap();
    list.reset().unwrap();
    assert_eq!(list.count(), 0);
    list.free_locked().unwrap();
}

// ----- the typed API on the process's runtime -------------------------------------------------------------

#[test]
fn a_hostile_dynamic_shared_size_is_refused_not_wrapped() {
    // shared_reverse has 1 KiB of static shared memory: u32::MAX more overflowed a u32 (a panic in a debug
    // build, a wrapped size in release).
    let lock = omega::lock();
    if lock.platform() != "sim" {
        lock.set_platform(omega::PlatformKind::Sim).expect("the simulator installs");
    }
    let dev = lock.open().expect("the simulator opens");
    let e = dev
        .scope(|s, gpu| {
            let (input, out) = (s.alloc::<f32>(256).unwrap(), s.alloc::<f32>(256).unwrap());
            let k = s.load("shared_reverse").unwrap();
            let l = omega::Launch::new(&k).block([256, 1, 1]).arg(&input).arg(&out).dynamic_shared(u32::MAX);
            gpu.launch(&l).expect_err("4 GiB of dynamic shared memory").error
        })
        .value();
    assert_eq!(e.stage(), Stage::LaunchArguments, "{e}");
    let text = e.to_string();
    assert!(text.contains("bytes of shared memory per block, sm_90 allows at most 233472"), "{text}");
}
