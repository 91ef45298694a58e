//! examples/hello_gpu.rs as a user runs it, on the simulator: the sums are checked by the example itself,
//! and the launch time it prints says it is simulated time, not a GPU's.

#[path = "../examples/hello_gpu.rs"]
#[allow(dead_code)] // the example's own `main`
mod hello_gpu;

#[test]
fn hello_gpu_on_sim_checks_every_sum_and_labels_its_time_simulated() {
    // The simulator even on a machine with a GPU: this test is about what the sim run prints.
    omega::lock().set_platform(omega::PlatformKind::Sim).expect("the simulator installs");
    let mut out = Vec::new();
    hello_gpu::run(4096, &mut out).expect("hello_gpu runs on the simulator");
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("platform: sim"), "{out}");
    let launch = out.lines().find(|l| l.starts_with("launch:")).expect("a launch line");
    assert!(launch.contains("(simulated time: the sim platform's virtual clock, not a GPU's)"), "{launch}");
    assert!(out.contains("check:    all 4096 elements match the CPU reference"), "{out}");
}
