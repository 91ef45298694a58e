//! Command lists on the simulator. Every test but the last has its own runtime, so latches stay local; the
//! last one is the typed API over the process's runtime and ends by latching it.

mod common;

use common::*;
use omega::cmdlist::{
    barrier_name, check_no_overlap, CmdList, CmdListError, CmdListOpts, BARRIER_DEFAULT, BARRIER_NONE, MAX_LAUNCHES,
};
use omega::error::Stage;
use omega::session::{GpuMem, RawLaunch, Runtime};
use omega::{Error, Launch, Scoped};
use omega_hal::sim::SimFault;
use omega_hal::Order;
use rand::{Rng, SeedableRng};

fn add(list: &mut CmdList<'_>, l: &RawLaunch) -> Result<u32, CmdListError> {
    // SAFETY: `l.args` points to `l.n_args` live words for the duration of the call.
    unsafe { list.add_raw(l) }
}

fn new_list<'r>(rt: &'r Runtime, opts: Option<&CmdListOpts>) -> CmdList<'r> {
    CmdList::create_locked(rt, opts).expect("create")
}

fn random_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-1e3f32..1e3)).collect()
}

/// Word layout of `scale_copy(src, dst, alpha, n)`.
fn scale_words(src: &GpuMem, dst: &GpuMem, alpha: f32, n: usize) -> Vec<u32> {
    [&addr(src.va)[..], &addr(dst.va)[..], &[alpha.to_bits(), n as u32]].concat()
}

#[test]
fn a_dependent_chain_is_one_submission_and_matches_the_reference() {
    let (rt, sim) = open_runtime();
    let n = 3000;
    let x = random_f32(n, 11);
    let alphas = [0.5f32, -3.0, 1.25, 7.0];
    let bufs: Vec<GpuMem> = (0..=alphas.len()).map(|_| rt.alloc(n * 4).unwrap()).collect();
    put_f32(&rt, &bufs[0], &x);
    for b in &bufs[1..] {
        put_f32(&rt, b, &vec![f32::NAN; n]);
    }
    let code = load(&rt, "scale_copy");
    let words: Vec<Vec<u32>> = (0..alphas.len()).map(|i| scale_words(&bufs[i], &bufs[i + 1], alphas[i], n)).collect();
    let mut list = new_list(&rt, None);
    for w in &words {
        add(&mut list, &raw_launch(&code, w, 256, n.div_ceil(256) as u32)).unwrap();
    }
    assert_eq!(list.count(), 4);
    let before = sim.stats();
    let done = list.submit().unwrap();
    let after = sim.stats();
    assert_eq!(after.submissions - before.submissions, 1, "one submission for the whole list");
    assert_eq!(after.launches - before.launches, 4);
    assert_eq!(done.launches, 4);
    assert!(done.elapsed_ns >= 4 * sim.config().launch_ns, "four launches of 2 us each, one after another");
    let mut want = x.clone();
    for a in alphas {
        want = omega::kernels::scale_copy_ref(&want, a);
    }
    assert_eq!(get_f32(&rt, &bufs[4], n), want);
    let st = list.stats();
    assert_eq!((st.launches, st.submits, st.barriers, st.independent, st.failed_submits), (4, 1, 3, 0, 0));
    assert_eq!(st.last_submit_ns, done.elapsed_ns);
}

#[test]
fn the_list_holds_2048_launches_and_refuses_the_2049th_by_name() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "empty");
    let l = raw_launch(&code, &[0], 1, 1);
    let mut list = new_list(&rt, None);
    for i in 0..MAX_LAUNCHES {
        assert_eq!(add(&mut list, &l).unwrap(), i);
    }
    let e = add(&mut list, &l).unwrap_err();
    assert_eq!(e, CmdListError::Full);
    assert_eq!(e.stage(), Stage::CmdListAdd);
    assert_eq!(list.count(), 2048);
    assert_eq!(list.stats().refusals, 1);
    let launches = sim.stats().launches;
    let done = list.submit().unwrap();
    assert_eq!(done.launches, 2048);
    assert_eq!(sim.stats().launches - launches, 2048);
    let stamps = list.stamps_vec();
    assert_eq!(stamps.len(), 2048);
    assert!(stamps.windows(2).all(|w| w[0] != 0 && w[0] < w[1]), "every launch stamped, in order");
    assert_eq!(list.stats().barriers, 2047);
}

#[test]
fn each_launch_gets_the_order_its_mode_and_mark_say() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "empty");
    let l = raw_launch(&code, &[0], 1, 1);

    let mut list = new_list(&rt, None);
    for _ in 0..4 {
        add(&mut list, &l).unwrap();
    }
    list.mark_independent(2).unwrap();
    let e = list.mark_independent(4).unwrap_err();
    assert_eq!(e, CmdListError::NoSuchLaunch { index: 4, count: 4 });
    assert_eq!(e.stage(), Stage::CmdListMarkIndependent);
    assert_eq!(list.barrier_name(), "OMEGA_GPU_CMDLIST_BARRIER_DEFAULT");
    list.submit().unwrap();
    let orders: Vec<Order> = sim.launches().iter().rev().take(4).rev().map(|r| r.order).collect();
    assert_eq!(orders, [Order::AfterPrevious, Order::AfterPrevious, Order::Independent, Order::AfterPrevious]);
    assert_eq!((0..4).map(|i| list.order(i).unwrap()).collect::<Vec<_>>(), orders);
    let st = list.stats();
    assert_eq!((st.barriers, st.independent, st.unordered), (2, 1, 0));

    let mut none = new_list(&rt, Some(&CmdListOpts::unordered()));
    assert_eq!(none.barrier_name(), "OMEGA_GPU_CMDLIST_BARRIER_NONE");
    for _ in 0..3 {
        add(&mut none, &l).unwrap();
    }
    none.mark_independent(1).unwrap();
    none.submit().unwrap();
    assert!(sim.launches().iter().rev().take(3).all(|r| r.order == Order::Unordered));
    let st = none.stats();
    assert_eq!((st.barriers, st.independent, st.unordered), (0, 0, 3));
}

#[test]
fn skip_launch_submits_and_waits_but_runs_nothing() {
    let (rt, sim) = open_runtime();
    let out = rt.alloc(4).unwrap();
    put_f32(&rt, &out, &[-1.0]);
    let code = load(&rt, "store_to");
    let words = [&addr(out.va)[..], &[42.0f32.to_bits()]].concat();
    let mut list = new_list(&rt, Some(&CmdListOpts::skipping()));
    for _ in 0..3 {
        add(&mut list, &raw_launch(&code, &words, 1, 1)).unwrap();
    }
    let before = sim.stats();
    let done = list.submit().unwrap();
    let after = sim.stats();
    assert_eq!(after.submissions - before.submissions, 1, "the submission and its wait happen");
    assert_eq!(after.launches, before.launches, "no launch ran");
    assert_eq!(get_f32(&rt, &out, 1), vec![-1.0], "the output is untouched");
    assert_eq!(list.stamps_vec(), vec![0, 0, 0], "a skipped launch releases no stamp");
    assert_eq!(done.launches, 3);
    assert_eq!(list.stats().skipped, 3);
}

#[test]
fn stamps_are_per_launch_increasing_and_the_devices_own_times() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "empty");
    let l = raw_launch(&code, &[0], 32, 2);
    let mut list = new_list(&rt, None);
    for _ in 0..5 {
        add(&mut list, &l).unwrap();
    }
    assert!(list.stamps_vec().is_empty(), "nothing submitted yet");
    list.submit().unwrap();
    let first = list.stamps_vec();
    let recs: Vec<u64> = sim.launches().iter().rev().take(5).rev().map(|r| r.end_ns).collect();
    assert_eq!(first, recs, "stamp i is launch i's completion time");
    assert!(first.windows(2).all(|w| w[0] < w[1]));
    list.submit().unwrap();
    let second = list.stamps_vec();
    assert!(second[0] > first[4], "a later submission's stamps are later");
    let mut short = [0u64; 2];
    assert_eq!(list.stamps(&mut short), 2);
    assert_eq!(short, [second[0], second[1]]);
}

#[test]
fn reset_empties_the_list_and_keeps_its_statistics() {
    let (rt, _sim) = open_runtime();
    let code = load(&rt, "empty");
    let l = raw_launch(&code, &[0], 1, 1);
    let mut list = new_list(&rt, None);
    for _ in 0..3 {
        add(&mut list, &l).unwrap();
    }
    list.submit().unwrap();
    list.reset().unwrap();
    assert_eq!(list.count(), 0);
    assert!(list.stamps_vec().is_empty());
    let e = list.submit().unwrap_err();
    assert_eq!(e, CmdListError::Empty);
    assert_eq!(add(&mut list, &l).unwrap(), 0, "indices start again at 0");
    list.submit().unwrap();
    let st = list.stats();
    assert_eq!((st.launches, st.submits), (4, 2));
}

#[test]
fn add_makes_the_launch_checks_and_names_their_stage() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "empty");
    let words = [0u32; 40];
    let ok = raw_launch(&code, &words[..1], 32, 1);
    let cases = [
        ("args NULL", RawLaunch { args: std::ptr::null(), ..ok }),
        ("n_args 0", RawLaunch { n_args: 0, ..ok }),
        ("n_args past 32", RawLaunch { n_args: 33, ..ok }),
        ("threads_x 0", RawLaunch { threads_x: 0, ..ok }),
        ("grid_y 0", RawLaunch { grid_y: 0, ..ok }),
        ("code outside a code buffer", RawLaunch { code_va: 0xdead_0000, ..ok }),
    ];
    let mut list = new_list(&rt, None);
    for (what, l) in cases {
        let e = add(&mut list, &l).expect_err(what);
        assert!(matches!(e, CmdListError::Session(Error::LaunchArguments(_))), "{what}: {e}");
    }
    assert_eq!(list.count(), 0);
    assert_eq!(list.stats().refusals, 6);
    rt.unlock().unwrap();
    let e = add(&mut list, &ok).unwrap_err();
    assert_eq!(e.stage(), Stage::Lock, "add touches the session: it needs the lock");
    rt.lock().unwrap();
    add(&mut list, &ok).unwrap();
    list.submit().unwrap();
    assert_eq!(sim.launches().last().unwrap().block, [32, 1, 1]);
}

#[test]
fn create_and_free_take_the_lock_themselves() {
    let (rt, sim) = open_runtime();
    let live = sim.stats().live_allocations;
    let e = CmdList::create(&rt, None).unwrap_err();
    assert_eq!(e.stage(), Stage::Lock, "the C lock would deadlock here");
    rt.unlock().unwrap();
    let list = CmdList::create(&rt, None).unwrap();
    assert!(!rt.holds_lock(), "create released the lock it took");
    assert_eq!(sim.stats().live_allocations, live + 1, "the stamp area");
    assert_eq!(list.stamp_buffer().size, MAX_LAUNCHES as usize * 16);
    list.free().unwrap();
    assert_eq!(sim.stats().live_allocations, live);
    rt.lock().unwrap();
    let list = CmdList::create_locked(&rt, None).unwrap();
    let e = list.free().unwrap_err();
    assert_eq!(e.stage(), Stage::Lock);
    assert_eq!(sim.stats().live_allocations, live, "refused by name, released all the same");
    let list = new_list(&rt, None);
    list.free_locked().unwrap();
    assert_eq!(sim.stats().live_allocations, live);
}

#[test]
fn an_unknown_barrier_mode_is_refused_at_create() {
    let (rt, _sim) = open_runtime();
    let e = CmdList::create_locked(&rt, Some(&CmdListOpts { barrier: 7, ..Default::default() })).unwrap_err();
    assert_eq!(e, CmdListError::BadBarrier(7));
    assert_eq!(e.stage(), Stage::CmdListCreate);
    assert_eq!(barrier_name(BARRIER_DEFAULT), "OMEGA_GPU_CMDLIST_BARRIER_DEFAULT");
    assert_eq!(barrier_name(BARRIER_NONE), "OMEGA_GPU_CMDLIST_BARRIER_NONE");
    assert_eq!(barrier_name(7), "OMEGA_GPU_CMDLIST_BARRIER_UNKNOWN");
    let as_error: Error = e.into();
    assert_eq!(as_error.stage(), Stage::CmdListCreate);
    assert!(matches!(&as_error, Error::CmdList(l) if **l == CmdListError::BadBarrier(7)), "{as_error}");
    assert_eq!(as_error.to_string(), CmdListError::BadBarrier(7).to_string(), "the same text through omega::Error");
}

#[test]
fn a_hang_latches_the_list_then_the_session_and_parks_the_stamp_area() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "empty");
    let l = raw_launch(&code, &[0], 1, 1);
    let mut list = new_list(&rt, None);
    for _ in 0..3 {
        add(&mut list, &l).unwrap();
    }
    assert_eq!(list.timeout_ms(), 300, "the sum of the launches' own limits");
    sim.inject(SimFault::Hang);
    let e = list.submit().unwrap_err();
    assert_eq!(e, CmdListError::Session(Error::Timeout { marker: 0, timeout_ms: 300 }));
    assert!(e.latched_the_process());
    assert!(list.is_latched());
    assert!(rt.is_blocked());
    assert_eq!(rt.latch_cause(), Some(Error::Timeout { marker: 0, timeout_ms: 300 }));
    assert_eq!(list.stats().failed_submits, 1);
    for (what, e) in [
        ("add", add(&mut list, &l).unwrap_err()),
        ("submit", list.submit().unwrap_err()),
        ("reset", list.reset().unwrap_err()),
        ("mark", list.mark_independent(0).unwrap_err()),
    ] {
        assert!(matches!(e, CmdListError::ListLatched(_)), "{what}: {e}");
    }
    assert_eq!(list.count(), 3, "a latched list keeps what it held");
    let stamps = *list.stamp_buffer();
    list.free_locked().unwrap();
    assert!(rt.is_parked(stamps.handle), "the device may still write the stamps: parked, never released");
    assert_eq!(sim.stats().frees, 0);
    let e = CmdList::create_locked(&rt, None).unwrap_err();
    assert_eq!(e, CmdListError::Session(Error::Latched(Stage::CmdListCreate)));
}

#[test]
fn a_refused_poll_and_a_cancel_after_submit_latch_the_list_too() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "empty");
    let mut list = new_list(&rt, None);
    add(&mut list, &raw_launch(&code, &[0], 1, 1)).unwrap();
    sim.inject(SimFault::RefusePoll);
    let e = list.submit().unwrap_err();
    assert!(matches!(e, CmdListError::Session(Error::PollRefused(_))), "{e}");
    assert!(list.is_latched() && rt.is_blocked());

    let (rt, sim) = open_runtime();
    let code = load(&rt, "spin");
    let flag = rt.alloc(4).unwrap();
    let mut list = new_list(&rt, Some(&CmdListOpts { timeout_ms: 100_000, ..Default::default() }));
    add(&mut list, &raw_launch(&code, &addr(flag.va), 1, 1)).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            while sim.stats().submissions == 0 {
                std::thread::yield_now();
            }
            rt.cancel();
        });
        assert_eq!(list.submit().unwrap_err(), CmdListError::Session(Error::CancelledAfterSubmit));
    });
    assert!(list.is_latched() && rt.is_blocked());
}

#[test]
fn a_cancel_before_submit_and_a_kernel_fault_are_certain_and_do_not_latch() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "store_to");
    let good = rt.alloc(4).unwrap();
    let ok_words = [&addr(good.va)[..], &[1]].concat();
    let bad_words = [&addr(0x7f00_0000_1000)[..], &[1]].concat();
    let mut list = new_list(&rt, None);
    add(&mut list, &raw_launch(&code, &ok_words, 1, 1)).unwrap();
    rt.cancel();
    let launches = sim.stats().launches;
    assert_eq!(list.submit().unwrap_err(), CmdListError::Session(Error::CancelledBeforeSubmit));
    assert_eq!(sim.stats().launches, launches, "nothing ran");
    assert!(!list.is_latched() && !rt.is_blocked());

    add(&mut list, &raw_launch(&code, &bad_words, 1, 1)).unwrap();
    let e = list.submit().unwrap_err();
    assert!(matches!(&e, CmdListError::Session(Error::Fault(f)) if f.xid == 31), "{e}");
    assert!(!list.is_latched(), "a fault stopped the work: completion is certain");
    assert!(!rt.is_blocked());
    let e = list.submit().unwrap_err();
    assert!(matches!(e, CmdListError::Session(Error::Fault(_))), "the channel stays dead until close and reopen");
    assert_eq!(e.stage(), Stage::Launch);
}

#[test]
fn submit_refuses_code_freed_since_the_add_and_a_list_of_a_closed_device() {
    let (rt, sim) = open_runtime();
    let mut code = load(&rt, "empty");
    let mut list = new_list(&rt, None);
    add(&mut list, &raw_launch(&code, &[0], 1, 1)).unwrap();
    rt.free(&mut code).unwrap();
    let launches = sim.stats().launches;
    let e = list.submit().unwrap_err();
    assert!(matches!(e, CmdListError::StaleCode { launch: 0, .. }), "{e}");
    assert_eq!(sim.stats().launches, launches);

    let code = load(&rt, "empty");
    let mut list = new_list(&rt, None);
    add(&mut list, &raw_launch(&code, &[0], 1, 1)).unwrap();
    rt.unlock().unwrap();
    rt.close().unwrap();
    rt.lock().unwrap();
    rt.open().unwrap();
    let e = list.submit().unwrap_err();
    assert_eq!(e, CmdListError::StaleStamps);
    assert!(list.stamps_vec().is_empty());
    drop(list);
    assert_eq!(rt.alloc_stats().stale_refusals, 0, "a list of a closed device frees nothing and counts nothing");
}

#[test]
fn two_dependent_timestamp_launches_do_not_overlap() {
    let (rt, _sim) = open_runtime();
    let blocks = 4u32;
    let code = load(&rt, "timestamps");
    let outs: Vec<GpuMem> = (0..2).map(|_| rt.alloc(blocks as usize * 16).unwrap()).collect();
    let mut list = new_list(&rt, None);
    for o in &outs {
        // Poisoned with zeros, which check_no_overlap refuses: a block that does not write fails the check.
        put_f32(&rt, o, &vec![0.0; blocks as usize * 4]);
        let words = [&addr(o.va)[..], &[1_500, 0]].concat();
        add(&mut list, &raw_launch(&code, &words, 32, blocks)).unwrap();
    }
    list.submit().unwrap();
    let read = |m: &GpuMem| -> Vec<u64> {
        rt.sync_to_cpu(m).unwrap();
        // SAFETY: the buffer's CPU view holds `blocks * 16` bytes, page-aligned.
        unsafe { std::slice::from_raw_parts(m.cpu.cast::<u64>(), blocks as usize * 2).to_vec() }
    };
    let (first, second) = (read(&outs[0]), read(&outs[1]));
    assert_eq!(check_no_overlap(&first, &second), Ok(()));
    assert!(check_no_overlap(&second, &first).is_err(), "the check is not vacuous: reversed, they overlap");
    let stamps = list.stamps_vec();
    assert!(stamps[0] <= second[0], "launch 0 completed before launch 1 started");
}

#[test]
fn the_typed_list_is_bound_to_the_scope_and_submits_with_the_token() {
    let dev = omega::lock().open().expect("open");
    let sim = omega::testing::simulator().expect("these tests run on the simulator");
    let n = 1000;
    let x = random_f32(n, 5);
    let r = dev.scope(|s, gpu| -> Result<(), Error> {
        let src = s.alloc_from(&x)?;
        let mut mid = s.alloc::<f32>(n)?;
        let mut dst = s.alloc::<f32>(n)?;
        mid.fill(f32::NAN)?;
        dst.fill(f32::NAN)?;
        let k = s.load("scale_copy")?;
        let grid = [n.div_ceil(128) as u32, 1, 1];
        let submissions = sim.stats().submissions;
        let mut list = s.cmdlist()?;
        list.add(&Launch::new(&k).grid(grid).block([128, 1, 1]).arg(&src).arg(&mid).arg(2.0f32).arg(n as u32))?;
        list.add(&Launch::new(&k).grid(grid).block([128, 1, 1]).arg(&mid).arg(&dst).arg(-0.5f32).arg(n as u32))?;
        let bad = list.add(&Launch::new(&k).arg(&src)).unwrap_err();
        assert_eq!(bad.stage(), Stage::LaunchArguments, "checked against the kernel's parameters: {bad}");
        assert_eq!(list.len(), 2);
        let done = gpu.submit(&mut list)?;
        assert_eq!(done.launches, 2);
        assert_eq!(sim.stats().submissions - submissions, 1);
        let stamps = list.stamps();
        assert!(stamps[0] < stamps[1]);
        let gpu = done.gpu;

        // A certain failure hands the token back.
        list.reset()?;
        let e = gpu.submit(&mut list).unwrap_err();
        assert_eq!(e.error, omega::cmdlist::CmdListError::Empty);
        let gpu = e.gpu.expect("an empty list latches nothing");
        drop(list);
        let want = omega::kernels::scale_copy_ref(&omega::kernels::scale_copy_ref(&x, 2.0), -0.5);
        assert_eq!(dst.to_vec()?, want);

        // An independent launch, then a hang: the list and the process latch and the token is gone.
        let mut list = s.cmdlist()?;
        list.add(&Launch::new(&k).grid(grid).block([128, 1, 1]).arg(&src).arg(&mid).arg(1.0f32).arg(n as u32))?;
        list.add_independent(
            &Launch::new(&k).grid(grid).block([128, 1, 1]).arg(&src).arg(&dst).arg(1.0f32).arg(n as u32),
        )?;
        let orders: Vec<Order> = (0..2).map(|i| list.core().order(i).unwrap()).collect();
        assert_eq!(orders, [Order::AfterPrevious, Order::Independent]);
        sim.inject(SimFault::Hang);
        let e = gpu.submit(&mut list).unwrap_err();
        assert!(e.gpu.is_none(), "an uncertain completion keeps the token");
        assert!(e.error.latched_the_process());
        assert!(list.is_latched());
        Ok(())
    });
    let Scoped::Latched(latched, r) = r else { panic!("the scope must end latched") };
    r.unwrap();
    assert!(matches!(latched.cause(), Error::Timeout { marker: 0, .. }), "{}", latched.cause());
    assert!(latched.parked().buffers >= 5, "marker buffer, stamp area, the three buffers and the code");
}
