// Issue 5: a wrong argument type. `a` is a buffer of f32 in the typed handle; a buffer of u32 does not
// fit.
omega::kernel!(VectorAdd = "../../../../kernels/vector_add.ptx", entry = "vector_add",
               params(a: &f32, b: &f32, c: &mut f32, n: u32));

fn main() {
    let dev = omega::lock().open().unwrap();
    let _ = dev.scope(|s, gpu| -> omega::Result<()> {
        let k = VectorAdd::load(s)?;
        let a = s.alloc::<u32>(4)?;
        let b = s.alloc::<f32>(4)?;
        let mut c = s.alloc::<f32>(4)?;
        gpu.launch(&k.launch(&a, &b, &mut c, 4))?;
        Ok(())
    });
}
