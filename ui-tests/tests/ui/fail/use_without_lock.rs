// Issue 2: device use without the lock. A `Scope` (and so any buffer) comes only from
// `Locked<Open>::scope`; there is no other way to make one.
fn main() {
    let scope = omega::Scope::new();
    let _buf = scope.alloc::<f32>(16);
}
