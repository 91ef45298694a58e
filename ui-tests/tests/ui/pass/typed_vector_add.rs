// The happy path: a typed handle from PTX and a derived arguments struct, run on the simulator.
use omega::{Data, LaunchArgs, Mem};

omega::kernel!(VectorAdd = "../../../../kernels/vector_add.ptx", entry = "vector_add",
               params(a: &f32, b: &f32, c: &mut f32, n: u32));

#[derive(LaunchArgs)]
struct Args<'a, 's> {
    a: &'a Mem<'s, Data<f32>>,
    b: &'a Mem<'s, Data<f32>>,
    c: &'a mut Mem<'s, Data<f32>>,
    n: u32,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let lock = omega::lock();
    lock.set_platform(omega::PlatformKind::Sim)?;
    let dev = lock.open()?;
    let (typed, derived) = dev.scope(|s, gpu| -> omega::Result<(Vec<f32>, Vec<f32>)> {
        let a = s.alloc_from(&[1.0f32, 2.0, 3.0, 4.0])?;
        let b = s.alloc_from(&[10.0f32, 20.0, 30.0, 40.0])?;
        let mut c = s.alloc::<f32>(4)?;
        let k = VectorAdd::load(s)?;
        let gpu = gpu.launch(&k.launch(&a, &b, &mut c, 4).block([32, 1, 1]))?.gpu;
        let typed = c.to_vec()?;
        c.fill(0.0)?;
        let args = Args { a: &b, b: &b, c: &mut c, n: 4 };
        gpu.launch(&omega::Launch::new(k.kernel()).args(&args).block([32, 1, 1]))?;
        Ok((typed, c.to_vec()?))
    }).value()?;
    assert_eq!(typed, [11.0, 22.0, 33.0, 44.0]);
    assert_eq!(derived, [20.0, 40.0, 60.0, 80.0]);
    Ok(())
}
