// Issue 2: a code buffer used as data. A buffer's kind is in its type: the kernel's code buffer is a
// `Mem<Code>`, and a data parameter takes `&Mem<Data<f32>>`.
omega::kernel!(VectorAdd = "../../../../kernels/vector_add.ptx", entry = "vector_add",
               params(a: &f32, b: &f32, c: &mut f32, n: u32));

fn main() {
    let dev = omega::lock().open().unwrap();
    let _ = dev.scope(|s, gpu| -> omega::Result<()> {
        let k = VectorAdd::load(s)?;
        let b = s.alloc::<f32>(4)?;
        let mut c = s.alloc::<f32>(4)?;
        gpu.launch(&k.launch(k.kernel().code(), &b, &mut c, 4))?;
        Ok(())
    });
}
