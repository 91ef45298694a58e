// Issue 2: close while a buffer borrow is alive. `scope` holds the open token for as long as the
// scope's buffers live, so it cannot be closed from inside.
fn main() {
    let dev = omega::lock().open().unwrap();
    let _ = dev.scope(|s, _gpu| {
        let buf = s.alloc::<f32>(16).unwrap();
        let _closed = dev.close();
        drop(buf);
    });
}
