//! The nvidia platform's one choke point for driver calls: `hal/src/nvidia/ioctl.rs` is the only file of
//! the backend that makes an ioctl, an mmap or a munmap, so the driver counters (`omega_hal::driver`)
//! see every call and the serving seal can refuse every one.

use std::path::Path;

/// The system calls that reach the driver or change the process's mappings, as a call site spells them.
const CALLS: [&str; 5] = ["libc::ioctl(", "libc::mmap(", "libc::munmap(", "rustix::ioctl::ioctl(", "libc::mremap("];

#[test]
fn only_the_choke_point_calls_ioctl_mmap_or_munmap() {
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("hal/src/nvidia")];
    let mut files = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut found = Vec::new();
    let mut seen = 0;
    for path in files {
        seen += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for call in CALLS {
                if code.contains(call) {
                    found.push((name.clone(), i + 1, call));
                }
            }
        }
    }
    assert!(seen > 10, "the scan found the backend's files ({seen})");
    let outside: Vec<_> = found.iter().filter(|(f, ..)| f != "ioctl.rs").collect();
    assert!(outside.is_empty(), "driver calls outside the choke point: {outside:?}");
    for call in ["rustix::ioctl::ioctl(", "libc::mmap(", "libc::munmap("] {
        assert_eq!(found.iter().filter(|(_, _, c)| *c == call).count(), 1, "exactly one {call} in ioctl.rs");
    }
}
