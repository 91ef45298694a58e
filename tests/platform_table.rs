//! The platform contract as a C table, from Rust: the simulator exported as an `OmegaGpuPlatform`
//! (`omega_hal::ctable::export`) and driven back through the table adapter (`TablePlatform`), so every
//! service call crosses the C ABI twice. A launch gives the simulator's answer, and each of the
//! simulator's faults arrives through the table as the session reports it on `sim` itself.

mod common;

use std::sync::Arc;

use common::*;
use omega::error::Stage;
use omega::platform::Installed;
use omega::session::Runtime;
use omega_hal::ctable::{check_for, export, OmegaGpuPlatform, TablePlatform};
use omega_hal::sim::{Sim, SimFault};
use omega_hal::{Platform, Refusal, Services};

/// A runtime, locked and open, whose platform is the simulator seen through its own C table.
fn through_the_table() -> (Runtime, Arc<Sim>) {
    let installed = omega::kernels::simulator();
    let sim = omega::testing::simulator_in(&installed).expect("a simulator");
    let table = export(omega::testing::platform_in(&installed));
    // SAFETY: `export` filled the table with callbacks that keep every service's rules, and its release
    // drops only its own hold on the simulator.
    let platform = unsafe { TablePlatform::new(&table, "sim-table") }.expect("the simulator's table is complete");
    platform.adopt();
    let rt = Runtime::with_platform(Installed::platform(platform)).expect("a fresh platform instance");
    rt.lock().unwrap();
    rt.open().expect("the table opens the simulator");
    (rt, sim)
}

fn vector_add(rt: &Runtime, n: usize, timeout_ms: u32) -> (omega::Result<Vec<f32>>, Vec<f32>) {
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 2.0 * i as f32).collect();
    let (ma, mb, mc) = (rt.alloc(n * 4).unwrap(), rt.alloc(n * 4).unwrap(), rt.alloc(n * 4).unwrap());
    put_f32(rt, &ma, &a);
    put_f32(rt, &mb, &b);
    put_f32(rt, &mc, &vec![f32::NAN; n]);
    let code = load(rt, "vector_add");
    let words = [addr(ma.va), addr(mb.va), addr(mc.va), [n as u32, 0]].concat();
    let mut l = raw_launch(&code, &words[..7], 128, n.div_ceil(128) as u32);
    l.timeout_ms = timeout_ms;
    // SAFETY: `l.args` points to 7 live words for the call.
    let r = unsafe { rt.launch_raw(&l) }.map(|_| get_f32(rt, &mc, n));
    (r, omega::kernels::vector_add_ref(&a, &b))
}

#[test]
fn a_launch_through_the_c_table_gives_the_simulators_answer() {
    let (rt, sim) = through_the_table();
    assert_eq!(rt.platform_name(), Some("sim-table"));
    let info = rt.device_info().unwrap();
    assert_eq!(info, sim.info(), "the device report crosses the table intact");
    let (got, want) = vector_add(&rt, 1000, 1000);
    assert_eq!(got.unwrap(), want);
    let stats = sim.stats();
    assert_eq!(stats.submissions, 1);
    assert_eq!(stats.launches, 1);
    let record = sim.launches().pop().unwrap();
    assert_eq!(record.kernel, "vector_add");
    assert_eq!(record.grid, [8, 1, 1]);
    assert_eq!(record.args.len(), 7, "the argument words cross as a pointer and a length");
    rt.unlock().unwrap();
    rt.close().unwrap();
    assert_eq!(sim.stats().live_allocations, 0, "close freed every buffer through the table");
    assert_eq!(sim.stats().closes, 1);
}

#[test]
fn the_simulators_faults_arrive_through_the_table_with_their_words() {
    let (rt, sim) = through_the_table();
    // A buffer past the largest carved size: its own platform allocation, which the fault refuses.
    sim.inject(SimFault::FailAlloc);
    let e = rt.alloc(4 << 20).unwrap_err();
    assert!(e.to_string().starts_with("alloc: out of device memory (4194304 bytes"), "{e}");
    sim.inject(SimFault::FailSync);
    let m = rt.alloc(4096).unwrap();
    let e = rt.sync_to_gpu(&m).unwrap_err();
    assert!(e.to_string().contains("injected fault: visibility sync refused"), "{e}");
    sim.inject(SimFault::KernelFault(31));
    let (got, _) = vector_add(&rt, 64, 1000);
    let e = got.unwrap_err();
    assert!(e.to_string().starts_with("launch: kernel fault: channel error Xid 31 (MMU fault)"), "{e}");
    assert!(!rt.is_blocked(), "a fault is certain: no latch");
    rt.unlock().unwrap();
    rt.close().unwrap();

    rt.lock().unwrap();
    sim.inject(SimFault::FailOpen("injected open failure".into()));
    let e = rt.open().unwrap_err();
    assert!(e.to_string().starts_with("open: driver refused open: injected open failure"), "{e}");
    rt.open().unwrap();
    sim.inject(SimFault::RefusePoll);
    let (got, _) = vector_add(&rt, 64, 1000);
    let e = got.unwrap_err();
    assert!(e.to_string().contains("completion poll refused (sim: injected poll refusal)"), "{e}");
    assert!(rt.is_blocked(), "a refused poll through the table latches, as on sim");
}

#[test]
fn a_hang_through_the_table_times_out_and_latches() {
    let (rt, sim) = through_the_table();
    sim.inject(SimFault::Hang);
    let (got, _) = vector_add(&rt, 64, 5);
    let e = got.unwrap_err();
    assert!(e.latched_the_process(), "{e}");
    assert!(rt.is_blocked());
    rt.unlock().unwrap();
    assert_eq!(rt.close().unwrap_err().stage(), Stage::Close);
}

#[test]
fn a_table_without_a_service_or_with_a_null_function_is_refused_by_name() {
    let table = export(omega::testing::platform_in(&Installed::sim()));
    assert_eq!(check_for(&table, Services::SESSION), Ok(()));
    let mut no_poll = table;
    no_poll.caps.services &= !Services::POLL.bits();
    let r = check_for(&no_poll, Services::SESSION).unwrap_err();
    assert_eq!(r.refusal, Refusal::MissingService(Services::POLL));
    assert_eq!(r.to_string(), "OMEGA_GPU_PLAT_MISSING_SERVICE: OMEGA_GPU_SVC_POLL");
    let mut no_free = table;
    no_free.memory.free = None;
    // SAFETY: the table is refused before any callback is called.
    let r = unsafe { TablePlatform::new(&no_free, "broken") }.err().unwrap();
    assert_eq!(
        r.to_string(),
        "OMEGA_GPU_PLAT_MISSING_SERVICE: OMEGA_GPU_SVC_DEVICE_MEM (OmegaGpuDeviceMemService.free is NULL)"
    );
    let mut bad_page = table;
    bad_page.caps.page_bytes = 0;
    assert_eq!(check_for(&bad_page, Services::SESSION).unwrap_err().refusal, Refusal::BadValue("caps.page_bytes"));
    // The table was never installed: its maker releases it.
    // SAFETY: `export`'s release, called once, after which nothing uses the table.
    unsafe { (table.release.unwrap())(table.ctx) };
}

#[test]
fn an_adopted_table_is_released_once_when_its_platform_goes() {
    use std::sync::atomic::{AtomicU32, Ordering};
    static RELEASED: AtomicU32 = AtomicU32::new(0);
    unsafe extern "C" fn count_release(_ctx: *mut core::ffi::c_void) {
        RELEASED.fetch_add(1, Ordering::SeqCst);
    }
    let sim = export(omega::testing::platform_in(&Installed::sim()));
    let table = OmegaGpuPlatform { release: Some(count_release), ..sim };
    // SAFETY: every callback is the simulator's own (`export`); the release only counts.
    let refused_then_dropped = unsafe { TablePlatform::new(&table, "t") }.unwrap();
    drop(refused_then_dropped);
    assert_eq!(RELEASED.load(Ordering::SeqCst), 0, "a table never adopted stays its maker's");
    // SAFETY: as above.
    let p = unsafe { TablePlatform::new(&table, "t") }.unwrap();
    p.adopt();
    let held: Arc<dyn Platform> = p.clone();
    drop(p);
    assert_eq!(RELEASED.load(Ordering::SeqCst), 0, "still held");
    drop(held);
    assert_eq!(RELEASED.load(Ordering::SeqCst), 1);
    // SAFETY: the simulator's own release, once.
    unsafe { (sim.release.unwrap())(sim.ctx) };
}
