//! `make doctor`: checks that Omega's nvidia platform can run here and names everything the GPU path
//! lacks when it cannot; says whether the `sim` platform runs (it needs nothing of the machine). Exits 0
//! when the GPU path can run, 1 otherwise (whatever the simulator's answer).

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let report = omega::doctor::run(Path::new("/"), true, true);
    for c in report.checks.iter().chain(report.sim.as_ref()) {
        println!("{} {:17} {}", if c.ok { "ok  " } else { "FAIL" }, c.what, c.found);
    }
    if let Some(sim) = &report.sim {
        if sim.ok {
            println!(
                "doctor: the sim platform runs here (OMEGA_PLATFORM=sim, the default where /dev/nvidiactl is absent)"
            );
        } else {
            println!("doctor: the sim platform does not run here: {}", sim.found);
        }
    }
    let failures = report.failures();
    if failures.is_empty() {
        println!("doctor: Omega can run on this machine's GPU (platform nvidia)");
        return ExitCode::SUCCESS;
    }
    println!(
        "doctor: the GPU path (platform nvidia) cannot run here: {} of {} checks failed (the FAIL lines above); first, {}",
        failures.len(),
        report.checks.len(),
        failures[0]
    );
    ExitCode::FAILURE
}
