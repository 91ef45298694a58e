// Issue 2: launch after a latch. A launch whose completion was uncertain returns no token
// (`LaunchError { gpu: None, .. }`): the one the launch consumed cannot be used again.
fn main() {
    let dev = omega::lock().open().unwrap();
    let _ = dev.scope(|s, gpu| {
        let k = s.load("empty").unwrap();
        let l = omega::Launch::new(&k);
        if let Err(omega::LaunchError { gpu: None, .. }) = gpu.launch(&l) {
            // Latched: try again anyway.
            let _ = gpu.launch(&l);
        }
    });
}
