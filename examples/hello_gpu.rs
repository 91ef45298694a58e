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

use omega::error::Stage;
use omega::{Error, Launch};

#[path = "common/mod.rs"]
mod common;

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
    if common::is_sim(platform) {
        "simulated time: the sim platform's virtual clock, not a GPU's"
    } else {
        "submit to completion"
    }
}

/// The vector add of `n` elements, its report written to `out`.
pub fn run(n: usize, out: &mut impl Write) -> Result<(), Error> {
    let written = |e: std::io::Error| Error::Setting {
        stage: Stage::Report,
        detail: omega::SettingError::ReportNotWritten(e.to_string()),
    };
    let dev = omega::lock().open()?;
    let info = dev.device();
    let platform = dev.platform();
    writeln!(out, "platform: {platform}").map_err(written)?;
    writeln!(out, "device:   {}", common::device_line(&info)).map_err(written)?;
    let seed = common::fresh_seed();
    let mut rng = common::rng(seed);
    let a = common::random_f32(&mut rng, n);
    let b = common::random_f32(&mut rng, n);
    let scoped = dev.scope(|s, gpu| -> Result<(Vec<f32>, u64), Error> {
        let da = s.alloc_from(&a)?;
        let db = s.alloc_from(&b)?;
        let mut dc = common::poisoned_f32(s, n)?;
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
    let bad = common::mismatches(&c, &want);
    writeln!(
        out,
        "launch:   vector_add of {n} f32 in {:.1} us ({})",
        elapsed_ns as f64 / 1e3,
        launch_time_label(platform)
    )
    .map_err(written)?;
    if let Some(&i) = bad.first() {
        return Err(Error::Setting {
            stage: Stage::Check,
            detail: omega::SettingError::ElementsWrong {
                wrong: bad.len(),
                of: n,
                first: i,
                got: c[i].to_bits(),
                want: want[i].to_bits(),
                seed,
            },
        });
    }
    writeln!(out, "check:    all {n} elements match the CPU reference (seed {seed})").map_err(written)?;
    Ok(())
}
