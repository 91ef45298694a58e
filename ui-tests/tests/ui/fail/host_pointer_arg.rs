// Issue 5: a host pointer where a device pointer is expected. The derive refuses the field, on the
// field's type: a raw pointer, and a host slice.
#[derive(omega::LaunchArgs)]
struct Args<'a> {
    a: *const f32,
    b: &'a [f32],
    n: u32,
}

fn main() {}
