//! Every input of the fuzz target's corpus and every crash it ever found, replayed by `cargo test`
//! (docs/testing.md, "Fuzzing the C layer"). The harness (`fuzz/harness.c`, its shadow model and all)
//! is compiled with the system C compiler against the `libomega.a` cargo built for this test run, and
//! `fuzz/replay.c` runs each file of `fuzz/regressions/` and `fuzz/corpus/` through it once, on the
//! simulator. A finding aborts the program with the harness's message, which this test shows.
//!
//! The libFuzzer build of the same harness (`make fuzz`) explores; this replay keeps what it found from
//! coming back, on any machine with a C compiler, without clang.

use std::path::Path;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn every_corpus_input_and_every_regression_replays_clean() {
    let exe_dir = std::env::current_exe().expect("the test binary's path");
    let lib = exe_dir.parent().expect("target/<profile>/deps").join("libomega.a");
    assert!(lib.exists(), "libomega.a not built next to the test binary ({})", lib.display());
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-replay");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .current_dir(ROOT)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-Iinclude", "-Ifuzz"])
        .args(["fuzz/harness.c", "fuzz/replay.c", "-o"])
        .arg(&out)
        .arg(&lib)
        .args(["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl", "-lc"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(built.status.success(), "compiling the fuzz harness failed:\n{}", String::from_utf8_lossy(&built.stderr));

    let ran = Command::new(&out)
        .current_dir(ROOT)
        .args(["fuzz/regressions", "fuzz/corpus"])
        .env("OMEGA_PLATFORM", "sim")
        .output()
        .expect("run the replay");
    let stdout = String::from_utf8_lossy(&ran.stdout);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    // The findings (the harness's own message) and the file that made them, not every file's line.
    let tail: Vec<&str> = stderr.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
    assert!(ran.status.success(), "a fuzz input failed ({}):\n{}", ran.status, tail.join("\n"));
    let count: usize = stdout
        .lines()
        .find_map(|l| l.strip_prefix("replayed ")?.strip_suffix(" inputs")?.parse().ok())
        .unwrap_or_else(|| panic!("no count in the replay's output:\n{stdout}"));
    let on_disk = ["fuzz/regressions", "fuzz/corpus"]
        .iter()
        .flat_map(|d| std::fs::read_dir(Path::new(ROOT).join(d)).expect("the fuzz input directories"))
        .filter(|e| {
            let name = e.as_ref().expect("a directory entry").file_name();
            let name = name.to_string_lossy();
            !name.starts_with('.') && name != "README.md"
        })
        .count();
    assert_eq!(count, on_disk, "every input on disk was replayed");
    assert!(count > 0, "the corpus is empty");
}
