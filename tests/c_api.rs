//! The C interface as a C program sees it. Each test compiles C sources (`tests/c/*.c`,
//! `examples/c/hello.c`) with `cc -std=c11 -Wall -Wextra -Werror -Iinclude` against the library cargo built
//! for this very test run (`libomega.so`, or `libomega.a` for the worked example), runs the program on the
//! simulator (`OMEGA_PLATFORM=sim`) and requires it to pass its own checks. Every latch scenario runs in a
//! process of its own, because a latch lasts for the rest of the process.
//!
//! The library is the one in this test binary's own `deps/` directory: cargo builds the crate's cdylib and
//! staticlib alongside the rlib the tests link, so they are always of the same source as the test.

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use omega::cmdlist::{CmdListOpts, CmdListStats};
use omega::engine::{BackendDiag, BackendTable, Job, JobResult, LaunchReport, Timeouts};
use omega::ffi::kernel::OmegaGpuKernel;
use omega::ffi::platform::{OmegaGpuDeviceHandle, OmegaGpuQueueHandle};
use omega::ffi::session::{OmegaGpuDeviceInfo, OmegaGpuSession};
use omega::session::{AllocStats, GpuMem, Handle, ParkStats, RawLaunch, Scratch};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The directory holding the `libomega.so` and `libomega.a` cargo built in this test run: the test
/// binary's own `target/<profile>/deps/` (cargo copies them up to `target/<profile>/` only when the library
/// itself is what was asked for, so the copies there may be older than this test).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe.parent().expect("target/<profile>/deps/<test>").to_path_buf();
    for lib in ["libomega.so", "libomega.a"] {
        assert!(dir.join(lib).exists(), "{} not built next to the test binary ({})", lib, dir.display());
    }
    dir
}

enum Link {
    Shared,
    Static,
}

/// Compiles `sources` into a program named `name` and returns its path.
fn build(name: &str, sources: &[&str], link: Link) -> PathBuf {
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-api");
    std::fs::create_dir_all(&out_dir).expect("the C test output directory");
    let exe = out_dir.join(name);
    let lib = lib_dir();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(&cc);
    cmd.current_dir(ROOT).args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-Iinclude", "-Itests/c", "-g"]);
    cmd.args(sources).arg("-o").arg(&exe);
    match link {
        Link::Shared => {
            cmd.arg(format!("-L{}", lib.display()))
                .arg("-lomega")
                .arg(format!("-Wl,-rpath,{}", lib.display()))
                .arg("-lpthread")
                // The elementwise program's double references (sqrt, exp, sin, cos, pow).
                .arg("-lm");
        }
        Link::Static => {
            // What a Rust staticlib needs from the system on Linux (`rustc --print native-static-libs`).
            cmd.arg(lib.join("libomega.a")).args(["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl", "-lc"]);
        }
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(out.status.success(), "compiling {name} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    exe
}

fn run(exe: &Path, args: &[&str]) -> Output {
    run_on("sim", exe, args)
}

/// Runs `exe` with `OMEGA_PLATFORM=platform` and requires it to succeed.
fn run_on(platform: &str, exe: &Path, args: &[&str]) -> Output {
    // cargo's LD_LIBRARY_PATH puts target/<profile>/ first, where an older libomega.so from a plain
    // `cargo build` may sit; it would win over the rpath, so the library of this run goes first.
    let search = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    let out = Command::new(exe)
        .args(args)
        .env("OMEGA_PLATFORM", platform)
        .env("LD_LIBRARY_PATH", format!("{}:{search}", lib_dir().display()))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{} {:?} failed ({}):\n{text}", exe.display(), args, out.status);
    out
}

/// The `NAME value` lines a layout program prints.
fn name_values(out: &str) -> BTreeMap<&str, i64> {
    out.lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').expect("`name value`");
            (k, v.parse().expect("a number"))
        })
        .collect()
}

/// The Rust side of a layout comparison: `"NAME" => size_of::<T>()` and the like.
macro_rules! layout {
    ($($key:literal => $val:expr),* $(,)?) => { BTreeMap::from([$(($key, ($val) as i64)),*]) };
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_worked_example_adds_vectors_through_the_static_library() {
    let exe = build("hello", &["examples/c/hello.c"], Link::Static);
    let out = stdout(&run(&exe, &[]));
    assert!(out.contains("platform sim"), "{out}");
    // c[i] = i + i/2 over 1000 elements; the last is 999 * 1.5.
    assert!(out.contains("1000 sums correct, c[999] = 1498.5"), "{out}");
    assert!(
        out.contains(" ns of simulated time (the sim platform's virtual clock)"),
        "the time says what it is: {out}"
    );
}

#[test]
fn session_entries_return_their_documented_values_and_stages() {
    let exe = build("session_api", &["tests/c/session_api.c"], Link::Shared);
    assert!(stdout(&run(&exe, &[])).contains("session_api: ok"));
}

#[test]
fn an_unknown_platform_fails_the_open_with_its_name_and_no_lock_error_follows() {
    let exe = build("no_platform", &["tests/c/no_platform.c"], Link::Shared);
    let out = stdout(&run_on("bogus", &exe, &["unknown platform `bogus` (expected `sim` or `nvidia`)"]));
    assert!(out.contains("no_platform: ok"), "{out}");
}

#[test]
fn forcing_nvidia_without_a_gpu_fails_the_open_with_what_is_missing() {
    let exe = build("no_platform_nvidia", &["tests/c/no_platform.c"], Link::Shared);
    let expect = if !Path::new("/proc/driver/nvidia/version").exists() {
        "nvidia: no NVIDIA kernel module loaded"
    } else if !Path::new("/dev/nvidiactl").exists() {
        "/dev/nvidiactl"
    } else {
        "ok"
    };
    let out = stdout(&run_on("nvidia", &exe, &[expect]));
    assert!(out.contains("no_platform: ok"), "{out}");
}

#[test]
fn a_c_table_forwarding_to_the_simulator_runs_a_launch_and_a_broken_one_is_refused_by_name() {
    let exe = build("platform_table", &["tests/c/platform_table.c"], Link::Shared);
    assert!(stdout(&run(&exe, &["run"])).contains("platform_table run: ok"));
}

#[test]
fn c_sees_the_platform_table_laid_out_as_rust_does() {
    use omega_hal::ctable::*;
    let exe = build("platform_table_layout", &["tests/c/platform_table.c"], Link::Shared);
    let out = stdout(&run(&exe, &["layout"]));
    let c = name_values(&out);
    let rust: BTreeMap<&str, i64> = layout! {
        "OmegaGpuPlatform" => size_of::<OmegaGpuPlatform>(),
        "OmegaGpuPlatform.caps" => offset_of!(OmegaGpuPlatform, caps),
        "OmegaGpuPlatform.ctx" => offset_of!(OmegaGpuPlatform, ctx),
        "OmegaGpuPlatform.clock" => offset_of!(OmegaGpuPlatform, clock),
        "OmegaGpuPlatform.lock" => offset_of!(OmegaGpuPlatform, lock),
        "OmegaGpuPlatform.memory" => offset_of!(OmegaGpuPlatform, memory),
        "OmegaGpuPlatform.submit" => offset_of!(OmegaGpuPlatform, submit),
        "OmegaGpuPlatform.poll" => offset_of!(OmegaGpuPlatform, poll),
        "OmegaGpuPlatform.host" => offset_of!(OmegaGpuPlatform, host),
        "OmegaGpuPlatform.sync" => offset_of!(OmegaGpuPlatform, sync),
        "OmegaGpuPlatform.device" => offset_of!(OmegaGpuPlatform, device),
        "OmegaGpuPlatform.release" => offset_of!(OmegaGpuPlatform, release),
        "OmegaGpuPlatformCaps" => size_of::<OmegaGpuPlatformCaps>(),
        "OmegaGpuPlatformCaps.page_bytes" => offset_of!(OmegaGpuPlatformCaps, page_bytes),
        "OmegaGpuPlatformCaps.code_prefetch_tail" => offset_of!(OmegaGpuPlatformCaps, code_prefetch_tail),
        "OmegaGpuPlatformCaps.launch" => offset_of!(OmegaGpuPlatformCaps, launch),
        "OmegaGpuLaunchLimits" => size_of::<OmegaGpuLaunchLimits>(),
        "OmegaGpuLaunchLimits.max_grid" => offset_of!(OmegaGpuLaunchLimits, max_grid),
        "OmegaGpuLaunchLimits.reserved_shared_bytes" => offset_of!(OmegaGpuLaunchLimits, reserved_shared_bytes),
        "OmegaGpuQueueBuffer" => size_of::<OmegaGpuQueueBuffer>(),
        "OmegaGpuQueueBuffer.what" => offset_of!(OmegaGpuQueueBuffer, what),
        "OmegaGpuPlatformError" => size_of::<OmegaGpuPlatformError>(),
        "OmegaGpuPlatformError.text" => offset_of!(OmegaGpuPlatformError, text),
        "OmegaGpuBufferDesc" => size_of::<OmegaGpuBufferDesc>(),
        "OmegaGpuBufferDesc.kind" => offset_of!(OmegaGpuBufferDesc, kind),
        "OmegaGpuAllocation" => size_of::<OmegaGpuAllocation>(),
        "OmegaGpuAllocation.bus" => offset_of!(OmegaGpuAllocation, bus),
        "OmegaGpuMarker" => size_of::<OmegaGpuMarker>(),
        "OmegaGpuConstBank" => size_of::<OmegaGpuConstBank>(),
        "OmegaGpuConstBank.va" => offset_of!(OmegaGpuConstBank, va),
        "OmegaGpuLaunchDesc" => size_of::<OmegaGpuLaunchDesc>(),
        "OmegaGpuLaunchDesc.grid" => offset_of!(OmegaGpuLaunchDesc, grid),
        "OmegaGpuLaunchDesc.order" => offset_of!(OmegaGpuLaunchDesc, order),
        "OmegaGpuLaunchDesc.args" => offset_of!(OmegaGpuLaunchDesc, args),
        "OmegaGpuLaunchDesc.n_const_banks" => offset_of!(OmegaGpuLaunchDesc, n_const_banks),
        "OmegaGpuSubmission" => size_of::<OmegaGpuSubmission>(),
        "OmegaGpuSubmission.markers" => offset_of!(OmegaGpuSubmission, markers),
        "OmegaGpuSubmission.stamps" => offset_of!(OmegaGpuSubmission, stamps),
        "OmegaGpuSubmission.sequence" => offset_of!(OmegaGpuSubmission, sequence),
        "OmegaGpuChannelFault" => size_of::<OmegaGpuChannelFault>(),
        "OmegaGpuChannelFault.text" => offset_of!(OmegaGpuChannelFault, text),
        "OmegaGpuDeviceInfo" => size_of::<OmegaGpuDeviceInfo>(),
        "OmegaGpuDeviceInfo.memory_bytes" => offset_of!(OmegaGpuDeviceInfo, memory_bytes),
        "OmegaGpuHandleTable" => size_of::<OmegaGpuHandleTable>(),
        "OmegaGpuHandleTable.capacity" => offset_of!(OmegaGpuHandleTable, capacity),
        "OmegaGpuHandleTable.live" => offset_of!(OmegaGpuHandleTable, live),
        "OmegaGpuClockService" => size_of::<OmegaGpuClockService>(),
        "OmegaGpuLockService" => size_of::<OmegaGpuLockService>(),
        "OmegaGpuDeviceMemService" => size_of::<OmegaGpuDeviceMemService>(),
        "OmegaGpuSubmitService" => size_of::<OmegaGpuSubmitService>(),
        "OmegaGpuPollService" => size_of::<OmegaGpuPollService>(),
        "OmegaGpuHostMemService" => size_of::<OmegaGpuHostMemService>(),
        "OmegaGpuSyncService" => size_of::<OmegaGpuSyncService>(),
        "OmegaGpuDeviceService" => size_of::<OmegaGpuDeviceService>(),
    };
    assert_eq!(c, rust, "C (left) and Rust (right) disagree");
}

#[test]
fn pthreads_take_turns_on_the_session_lock() {
    let exe = build("threads", &["tests/c/threads.c"], Link::Shared);
    assert!(stdout(&run(&exe, &[])).contains("threads: ok"));
}

fn latch(scenario: &str) {
    let exe = build(&format!("latch_{scenario}"), &["tests/c/latch.c"], Link::Shared);
    let out = stdout(&run(&exe, &[scenario]));
    assert!(out.contains(&format!("latch {scenario}: ok")), "{out}");
}

#[test]
fn latch_after_a_completion_timeout() {
    latch("hang");
}

#[test]
fn latch_after_a_refused_completion_poll() {
    latch("refuse_poll");
}

#[test]
fn latch_after_a_cancel_once_submitted() {
    latch("cancel");
}

#[test]
fn a_timeout_of_zero_runs_out_at_once_and_latches() {
    latch("zero_timeout");
}

#[test]
fn parked_buffers_past_the_listed_512_are_counted_untracked() {
    latch("park_max");
}

#[test]
fn a_latch_is_recovered_and_the_reopened_device_runs_a_checked_launch() {
    latch("hang_recover");
}

fn cmdlist(scenario: &str) {
    let exe = build(&format!("cmdlist_{scenario}"), &["tests/c/cmdlist.c"], Link::Shared);
    let out = stdout(&run(&exe, &[scenario]));
    assert!(out.contains(&format!("cmdlist {scenario}: ok")), "{out}");
}

#[test]
fn a_command_list_of_vector_adds_matches_the_cpu_and_refuses_dead_handles() {
    cmdlist("run");
}

#[test]
fn a_command_list_that_times_out_latches_itself_then_the_process() {
    cmdlist("hang");
}

fn hostile(scenario: &str) {
    let exe = build(&format!("hostile_{scenario}"), &["tests/c/hostile.c"], Link::Shared);
    let out = stdout(&run(&exe, &[scenario]));
    assert!(out.contains(&format!("hostile {scenario}: ok")), "{out}");
}

#[test]
fn made_up_list_pointers_and_forged_handles_are_refused_by_name() {
    hostile("handles");
}

#[test]
fn hostile_launch_descriptors_are_refused_or_stopped_never_aborted() {
    hostile("launch");
}

#[test]
fn a_list_count_never_waits_for_the_session_lock_while_another_thread_frees_the_list() {
    cmdlist("count_free");
}

#[test]
fn the_serving_entries_reserve_prepare_seal_and_release() {
    let exe = build("serving", &["tests/c/serving.c"], Link::Shared);
    let out = stdout(&run(&exe, &[]));
    assert!(out.contains("serving: ok"), "{out}");
}

fn matmul(scenario: &str) {
    let exe = build(&format!("matmul_{scenario}"), &["tests/c/matmul.c"], Link::Shared);
    let out = stdout(&run(&exe, &[scenario]));
    assert!(out.contains(&format!("matmul {scenario}: ok")), "{out}");
}

#[test]
fn every_matmul_library_entry_computes_refuses_by_name_and_keeps_the_lock_rule() {
    matmul("run");
}

#[test]
fn an_uncertain_completion_inside_a_matmul_call_latches_and_later_calls_are_refused() {
    matmul("latch");
}

fn elementwise(scenario: &str) {
    let exe = build(&format!("elementwise_{scenario}"), &["tests/c/elementwise.c"], Link::Shared);
    let out = stdout(&run(&exe, &[scenario]));
    assert!(out.contains(&format!("elementwise {scenario}: ok")), "{out}");
}

#[test]
fn every_elementwise_entry_computes_refuses_by_name_and_keeps_the_lock_rule() {
    elementwise("run");
}

#[test]
fn an_uncertain_completion_inside_an_elementwise_call_latches_and_later_calls_are_refused() {
    elementwise("latch");
}

fn engine(scenario: &str) {
    let exe = build(&format!("engine_{scenario}"), &["tests/c/engine.c"], Link::Shared);
    let out = stdout(&run(&exe, &[scenario]));
    assert!(out.contains(&format!("engine {scenario}: ok")), "{out}");
}

#[test]
fn the_vector_job_runs_through_every_state_and_every_name_is_fixed() {
    engine("run");
}

#[test]
fn an_uncertain_job_completion_blocks_every_later_run() {
    engine("hang");
}

#[test]
fn a_clock_function_may_set_the_engine_clock_inside_a_run() {
    engine("clock_reset");
}

#[test]
fn c_sees_the_same_struct_layout_and_constants_as_rust() {
    let exe = build("layout", &["tests/c/layout.c"], Link::Shared);
    let out = stdout(&run(&exe, &[]));
    let c = name_values(&out);
    use omega::ffi::{code_alloc as ca, platform as p, runtime_api as ra, session as s};
    let rust: BTreeMap<&str, i64> = layout! {
        "OmegaGpuBufferHandle" => size_of::<Handle>(),
        "OmegaGpuBufferHandle.index" => offset_of!(Handle, index),
        "OmegaGpuBufferHandle.generation" => offset_of!(Handle, generation),
        "OmegaGpuDeviceHandle" => size_of::<OmegaGpuDeviceHandle>(),
        "OmegaGpuQueueHandle" => size_of::<OmegaGpuQueueHandle>(),
        "OmegaGpuMem" => size_of::<GpuMem>(),
        "OmegaGpuMem.handle" => offset_of!(GpuMem, handle),
        "OmegaGpuMem.kind" => offset_of!(GpuMem, kind),
        "OmegaGpuMem.cpu" => offset_of!(GpuMem, cpu),
        "OmegaGpuMem.va" => offset_of!(GpuMem, va),
        "OmegaGpuMem.size" => offset_of!(GpuMem, size),
        "OmegaGpuScratch" => size_of::<Scratch>(),
        "OmegaGpuScratch.mem" => offset_of!(Scratch, mem),
        "OmegaGpuScratch.cap" => offset_of!(Scratch, cap),
        "OmegaGpuScratch.high_water" => offset_of!(Scratch, high_water),
        "OmegaGpuScratch.reserved" => offset_of!(Scratch, reserved),
        "OmegaGpuAllocStats" => size_of::<AllocStats>(),
        "OmegaGpuAllocStats.allocs" => offset_of!(AllocStats, allocs),
        "OmegaGpuAllocStats.alloc_bytes" => offset_of!(AllocStats, alloc_bytes),
        "OmegaGpuAllocStats.alloc_failures" => offset_of!(AllocStats, alloc_failures),
        "OmegaGpuAllocStats.frees" => offset_of!(AllocStats, frees),
        "OmegaGpuAllocStats.stale_refusals" => offset_of!(AllocStats, stale_refusals),
        "OmegaGpuParkStats" => size_of::<ParkStats>(),
        "OmegaGpuParkStats.buffers" => offset_of!(ParkStats, buffers),
        "OmegaGpuParkStats.untracked" => offset_of!(ParkStats, untracked),
        "OmegaGpuParkStats.bytes" => offset_of!(ParkStats, bytes),
        "OmegaGpuLaunch" => size_of::<RawLaunch>(),
        "OmegaGpuLaunch.code_va" => offset_of!(RawLaunch, code_va),
        "OmegaGpuLaunch.gpr_count" => offset_of!(RawLaunch, gpr_count),
        "OmegaGpuLaunch.threads_x" => offset_of!(RawLaunch, threads_x),
        "OmegaGpuLaunch.threads_y" => offset_of!(RawLaunch, threads_y),
        "OmegaGpuLaunch.grid_x" => offset_of!(RawLaunch, grid_x),
        "OmegaGpuLaunch.grid_y" => offset_of!(RawLaunch, grid_y),
        "OmegaGpuLaunch.num_elements" => offset_of!(RawLaunch, num_elements),
        "OmegaGpuLaunch.args" => offset_of!(RawLaunch, args),
        "OmegaGpuLaunch.n_args" => offset_of!(RawLaunch, n_args),
        "OmegaGpuLaunch.timeout_ms" => offset_of!(RawLaunch, timeout_ms),
        "OmegaGpuLaunch.shared_bytes" => offset_of!(RawLaunch, shared_bytes),
        "OmegaGpuLaunch.spin_us" => offset_of!(RawLaunch, spin_us),
        "OmegaGpuSession" => size_of::<OmegaGpuSession>(),
        "OmegaGpuSession.launch_buffer" => offset_of!(OmegaGpuSession, launch_buffer),
        "OmegaGpuSession.open_count" => offset_of!(OmegaGpuSession, open_count),
        "OmegaGpuDeviceInfo" => size_of::<OmegaGpuDeviceInfo>(),
        "OmegaGpuDeviceInfo.name" => offset_of!(OmegaGpuDeviceInfo, name),
        "OmegaGpuDeviceInfo.driver_version" => offset_of!(OmegaGpuDeviceInfo, driver_version),
        "OmegaGpuDeviceInfo.pci" => offset_of!(OmegaGpuDeviceInfo, pci),
        "OmegaGpuDeviceInfo.sm_count" => offset_of!(OmegaGpuDeviceInfo, sm_count),
        "OmegaGpuDeviceInfo.memory_bytes" => offset_of!(OmegaGpuDeviceInfo, memory_bytes),
        "OmegaGpuKernel" => size_of::<OmegaGpuKernel>(),
        "OmegaGpuKernel.code" => offset_of!(OmegaGpuKernel, code),
        "OmegaGpuKernel.entry_va" => offset_of!(OmegaGpuKernel, entry_va),
        "OmegaGpuKernel.gpr_count" => offset_of!(OmegaGpuKernel, gpr_count),
        "OmegaGpuKernel.param_bytes" => offset_of!(OmegaGpuKernel, param_bytes),
        "OmegaGpuCmdListOpts" => size_of::<CmdListOpts>(),
        "OmegaGpuCmdListOpts.barrier" => offset_of!(CmdListOpts, barrier),
        "OmegaGpuCmdListOpts.skip_launch" => offset_of!(CmdListOpts, skip_launch),
        "OmegaGpuCmdListOpts.timeout_ms" => offset_of!(CmdListOpts, timeout_ms),
        "OmegaGpuCmdListOpts.spin_us" => offset_of!(CmdListOpts, spin_us),
        "OmegaGpuCmdListStats" => size_of::<CmdListStats>(),
        "OmegaGpuCmdListStats.launches" => offset_of!(CmdListStats, launches),
        "OmegaGpuCmdListStats.last_submit_ns" => offset_of!(CmdListStats, last_submit_ns),
        "OmegaGpuCmdListStats.refusals" => offset_of!(CmdListStats, refusals),
        "OmegaGpuJob" => size_of::<Job<'static>>(),
        "OmegaGpuJob.timeouts" => offset_of!(Job<'static>, timeouts),
        "OmegaGpuTimeouts" => size_of::<Timeouts>(),
        "OmegaGpuTimeouts.kernel_done_ms" => offset_of!(Timeouts, kernel_done_ms),
        "OmegaGpuTimeouts.engine_idle_ms" => offset_of!(Timeouts, engine_idle_ms),
        "OmegaGpuTimeouts.spin_us" => offset_of!(Timeouts, spin_us),
        "OmegaGpuResult" => size_of::<JobResult>(),
        "OmegaGpuResult.failure" => offset_of!(JobResult, failure),
        "OmegaGpuResult.states" => offset_of!(JobResult, states),
        "OmegaGpuResult.entered_ns" => offset_of!(JobResult, entered_ns),
        "OmegaGpuResult.started_ns" => offset_of!(JobResult, started_ns),
        "OmegaGpuResult.finished_ns" => offset_of!(JobResult, finished_ns),
        "OmegaGpuResult.diag" => offset_of!(JobResult, diag),
        "OmegaGpuResult.detail" => offset_of!(JobResult, detail),
        "OmegaGpuBackendDiag" => size_of::<BackendDiag>(),
        "OmegaGpuBackendDiag.kernel_ns" => offset_of!(BackendDiag, kernel_ns),
        "OmegaGpuLaunchReport" => size_of::<LaunchReport>(),
        "OmegaGpuLaunchReport.kernel_ns" => offset_of!(LaunchReport, kernel_ns),
        "OmegaGpuBackend" => size_of::<BackendTable>(),
        "OmegaGpuBackend.ctx" => offset_of!(BackendTable, ctx),
        "OmegaGpuBackend.now_ns" => offset_of!(BackendTable, now_ns),
        "OmegaGpuBackend.launch" => offset_of!(BackendTable, launch),
        "OmegaGpuBackend.release" => offset_of!(BackendTable, release),
        "OMEGA_GPU_CMDLIST_MAX_LAUNCHES" => omega::cmdlist::MAX_LAUNCHES,
        "OMEGA_GPU_CMDLIST_BARRIER_DEFAULT" => omega::cmdlist::BARRIER_DEFAULT,
        "OMEGA_GPU_CMDLIST_BARRIER_NONE" => omega::cmdlist::BARRIER_NONE,
        "OMEGA_GPU_LAYOUT_VECTOR_1D" => omega::engine::LAYOUT_VECTOR_1D,
        "OMEGA_GPU_ENGINE_JOB_MAX_ELEMENTS" => omega::engine::JOB_MAX_ELEMENTS,
        "OMEGA_GPU_ENGINE_DETAIL_BYTES" => omega::engine::DETAIL_BYTES,
        "OMEGA_GPU_ENGINE_FAILURE_COUNT" => omega::engine::FAILURE_COUNT,
        "OMEGA_GPU_ENGINE_STATE_COUNT" => omega::engine::STATE_COUNT,
        "OMEGA_GPU_ENGINE_STEP_COUNT" => omega::engine::STEP_COUNT,
        "OMEGA_GPU_ENGINE_WAIT_COUNT" => omega::engine::WAIT_COUNT,
        "OMEGA_GPU_ENGINE_UNCERTAIN_COMPLETION_BLOCKED" => omega::engine::Failure::UncertainCompletionBlocked,
        "OMEGA_GPU_ENGINE_STATE_FAILED" => omega::engine::State::Failed,
        "OMEGA_GPU_ENGINE_STEP_READBACK" => omega::engine::Step::Readback,
        "OMEGA_GPU_ENGINE_WAIT_ENGINE_IDLE" => omega::engine::Wait::EngineIdle,
        "OMEGA_GPU_BACKEND_STEP_LATCHED" => omega::engine::STEP_LATCHED,
        "OMEGA_GPU_BACKEND_LAUNCH_FAULT" => omega::engine::LAUNCH_FAULT,
        "OMEGA_GPU_SESSION_LOCK_ID" => omega::session::LOCK_ID,
        "OMEGA_GPU_SESSION_MAX_ARGS" => omega::session::MAX_ARGS,
        "OMEGA_GPU_SESSION_MAX_SPIN_US" => omega::session::MAX_SPIN_US,
        "OMEGA_GPU_SESSION_PARK_MAX" => omega::session::PARK_MAX,
        "OMEGA_GPU_SESSION_SCRATCH_RESERVED" => omega::session::SCRATCH_RESERVED,
        "OMEGA_GPU_SESSION_CANCELLED" => omega::session::CANCELLED,
        "OMEGA_GPU_SESSION_DEFAULT_SHARED_BYTES" => omega::session::DEFAULT_SHARED_BYTES,
        "OMEGA_GPU_SESSION_ON_CLOSE_MAX" => omega::session::ON_CLOSE_MAX,
        "OMEGA_GPU_HANDLE_BUF_DATA" => omega::session::HANDLE_BUF_DATA,
        "OMEGA_GPU_HANDLE_BUF_CODE" => omega::session::HANDLE_BUF_CODE,
        "OMEGA_GPU_HANDLE_BUF_QUEUE" => omega::session::HANDLE_BUF_QUEUE,
        "OMEGA_GPU_CODE_PREFETCH_TAIL" => omega::session::CODE_PREFETCH_TAIL,
        "OMEGA_GPU_PLATFORM_ABI_MAJOR" => omega_hal::PLATFORM_ABI_MAJOR,
        "OMEGA_GPU_PLATFORM_ABI_MINOR" => omega_hal::PLATFORM_ABI_MINOR,
        "OMEGA_RUNTIME_API_VERSION_MAJOR" => omega::API_VERSION.0,
        "OMEGA_RUNTIME_API_VERSION_MINOR" => omega::API_VERSION.1,
    };
    assert_eq!(c, rust, "C (left) and Rust (right) disagree");
    // The C layer's own spellings are the core's values too (also asserted at compile time).
    assert_eq!(s::OMEGA_GPU_SESSION_MAX_ARGS, omega::session::MAX_ARGS);
    assert_eq!(ca::OMEGA_GPU_CODE_PREFETCH_TAIL, omega::session::CODE_PREFETCH_TAIL);
    assert_eq!(p::OMEGA_GPU_PLATFORM_ABI_MAJOR, omega_hal::PLATFORM_ABI_MAJOR);
    assert_eq!((ra::OMEGA_RUNTIME_API_VERSION_MAJOR, ra::OMEGA_RUNTIME_API_VERSION_MINOR), omega::API_VERSION);
}

/// The manifest's functions plus the INTERNAL ones: exactly what the shared library exports.
#[test]
fn the_shared_library_exports_exactly_the_contract_names() {
    let manifest =
        std::fs::read_to_string(Path::new(ROOT).join("docs/runtime/omega_runtime_api.manifest")).expect("the manifest");
    let mut want: Vec<String> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("fn "))
        .map(|l| l.split_whitespace().next().expect("a name").to_owned())
        .collect();
    want.extend(
        [
            "omega_gpu_session_set_error",
            "omega_gpu_session_on_close",
            "omega_gpu_engine_test_reset_block",
            "omega_gpu_engine_test_force_block",
            "omega_gpu_engine_test_set_clock",
        ]
        .map(String::from),
    );
    want.sort();
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib_dir().join("libomega.so"))
        .output()
        .expect("nm (binutils) runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut have: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (_addr, kind, name) = (w.next()?, w.next()?, w.next()?);
            (kind == "T").then(|| name.to_owned())
        })
        .collect();
    have.sort();
    assert_eq!(have, want, "exported (left) vs the manifest's functions and the INTERNAL ones (right)");
}

#[test]
fn a_panic_becomes_the_failure_value_and_names_the_function() {
    let v = omega::ffi::boundary::guard("omega_test_panicking_call", -1, || -> i32 { panic!("a bug") });
    assert_eq!(v, -1);
    // This process runs no other session call, so the text is still ours.
    // SAFETY: the function returns a NUL-terminated string in a static buffer, read before any other call.
    let text = unsafe { std::ffi::CStr::from_ptr(omega::ffi::session::omega_gpu_session_last_error()) };
    assert_eq!(text.to_str().unwrap(), "internal: panic in omega_test_panicking_call");
}

fn attention(scenario: &str) {
    let exe = build(&format!("attention_{scenario}"), &["tests/c/attention.c"], Link::Shared);
    let out = stdout(&run(&exe, &[scenario]));
    assert!(out.contains(&format!("attention {scenario}: ok")), "{out}");
}

#[test]
fn every_attention_library_entry_computes_refuses_by_name_and_keeps_the_lock_rule() {
    attention("run");
}

#[test]
fn an_uncertain_completion_inside_an_attention_call_latches_and_later_calls_are_refused() {
    attention("latch");
}
