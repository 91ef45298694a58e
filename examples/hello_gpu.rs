//! hello_gpu: one vector add through Omega, checked element by element.
//!
//! Allocates three buffers, fills two with fresh random data and poisons the third, launches
//! `vector_add`, reads the result back and compares every element with a CPU reference. Prints the
//! platform that ran (sim or nvidia), the device and the launch time (labelled simulated on sim, where it
//! is the simulator's virtual clock, not a GPU's). Exits non-zero on any mismatch.
//!
//! `cargo run --release --example hello_gpu [-- N]` (`OMEGA_PLATFORM=sim|nvidia` forces a platform).

use std::io::Write;
use std::process::ExitCode;

use omega::{Error, Launch};
use rand::{Rng, SeedableRng};

fn main() -> ExitCode {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
    match run(n, &mut std::io::stdout()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hello_gpu: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// How the launch time reads on `platform`: the simulator's is virtual time, not a GPU's.
fn launch_time_label(platform: &str) -> &'static str {
    if platform == "sim" {
        "simulated time: the sim platform's virtual clock, not a GPU's"
    } else {
        "submit to completion"
    }
}

/// The vector add of `n` elements, its report written to `out`.
pub fn run(n: usize, out: &mut impl Write) -> Result<(), Error> {
    let written = |e: std::io::Error| Error::Setting { stage: "report", detail: e.to_string() };
    let dev = omega::lock().open()?;
    let info = dev.device();
    let platform = dev.platform();
    writeln!(out, "platform: {platform}").map_err(written)?;
    writeln!(
        out,
        "device:   {} (sm_{}{}, {} SMs, {} MiB, driver {})",
        info.name,
        info.arch_major,
        info.arch_minor,
        info.sm_count,
        info.memory_bytes >> 20,
        info.driver_version
    )
    .map_err(written)?;
    // A fresh seed each run (printed, so a failure can be replayed).
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()) << 32;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let a: Vec<f32> = (0..n).map(|_| rng.random_range(-1e6f32..1e6)).collect();
    let b: Vec<f32> = (0..n).map(|_| rng.random_range(-1e6f32..1e6)).collect();
    let scoped = dev.scope(|s, gpu| -> Result<(Vec<f32>, u64), Error> {
        let da = s.alloc_from(&a)?;
        let db = s.alloc_from(&b)?;
        let mut dc = s.alloc::<f32>(n)?;
        dc.fill(f32::NAN)?;
        let kernel = s.load("vector_add")?;
        let launch = Launch::new(&kernel)
            .grid([n.div_ceil(256) as u32, 1, 1])
            .block([256, 1, 1])
            .timeout_ms(2_000)
            .arg(&da)
            .arg(&db)
            .arg(&dc)
            .arg(n as u32);
        let done = gpu.launch(&launch)?;
        Ok((dc.to_vec()?, done.elapsed_ns))
    });
    let (c, elapsed_ns) = scoped.value()?;
    let want = omega::kernels::vector_add_ref(&a, &b);
    let bad: Vec<usize> = (0..n).filter(|&i| c[i].to_bits() != want[i].to_bits()).collect();
    writeln!(
        out,
        "launch:   vector_add of {n} f32 in {:.1} us ({})",
        elapsed_ns as f64 / 1e3,
        launch_time_label(platform)
    )
    .map_err(written)?;
    if let Some(&i) = bad.first() {
        return Err(Error::Setting {
            stage: "check",
            detail: format!(
                "{} of {n} elements wrong (first at {i}: got {}, want {}; seed {seed})",
                bad.len(),
                c[i],
                want[i]
            ),
        });
    }
    writeln!(out, "check:    all {n} elements match the CPU reference (seed {seed})").map_err(written)?;
    Ok(())
}
