// Issue 2: after a latch there is no launch, close or reopen to write: `Latched` has none of them.
fn main() {
    let dev = omega::lock().open().unwrap();
    if let omega::Scoped::Latched(latched, ()) = dev.scope(|_, _| ()) {
        let _ = latched.open();
    }
}
