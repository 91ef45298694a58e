//! `make doctor`: checks that Omega's nvidia platform can run here, and names the reason when it cannot.
//! Exits 0 when every check passes, 1 otherwise.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let report = omega::doctor::run(Path::new("/"), true);
    for c in &report.checks {
        println!("{} {:17} {}", if c.ok { "ok  " } else { "FAIL" }, c.what, c.found);
    }
    match report.reason() {
        None => {
            println!("doctor: Omega can run on this machine (platform nvidia)");
            ExitCode::SUCCESS
        }
        Some(why) => {
            println!("doctor: Omega cannot run here: {why}");
            ExitCode::FAILURE
        }
    }
}
