// A kept buffer (omega::Kept) outlives scopes, but what it hands out does not: the buffer `get_mut` gives
// is bound to the scope it was asked in, so no CPU view is touched once the lock is let go.
fn main() {
    let dev = omega::lock().open().unwrap();
    let (dev, mut kept) = dev.scope(|s, _gpu| s.keep(s.alloc::<f32>(16).unwrap())).into_open().unwrap();
    let _escaped = dev.scope(|s, _gpu| kept.get_mut(s).unwrap()).value();
}
