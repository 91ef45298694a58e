// Issue 5: a struct without the derive passed to `.args(..)`.
struct Args {
    n: u32,
}

fn main() {
    let dev = omega::lock().open().unwrap();
    let _ = dev.scope(|s, gpu| -> omega::Result<()> {
        let k = s.load("empty")?;
        gpu.launch(&omega::Launch::new(&k).args(&Args { n: 1 }))?;
        Ok(())
    });
}
