// Issue 2: a buffer outliving its session. Buffers are bound to the scope that allocated them and
// cannot be returned out of it.
fn main() {
    let dev = omega::lock().open().unwrap();
    let _escaped = dev.scope(|s, _gpu| s.alloc::<f32>(16).unwrap()).value();
}
