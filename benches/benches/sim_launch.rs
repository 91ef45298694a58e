//! The launch path on the simulator, per launch: the session's own cost (checks, submission, the
//! two-marker wait) with the simulator's host kernel doing the work. Three cuts: a launch inside a held
//! scope; the lock taken and released around each launch; and the whole cycle a one-shot caller pays
//! (lock, scope, three buffers, load, launch).
//!
//! The times criterion reports are host time: what Omega's launch path costs the CPU on the simulator. The
//! simulated launch itself takes virtual time on the simulator's clock, printed once, labelled so, before
//! the measurements.
//!
//! `cargo bench -p omega-benches --bench sim_launch`

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;

omega::kernel!(VectorAdd = "../../kernels/vector_add.ptx", entry = "vector_add",
               params(a: &f32, b: &f32, c: &mut f32, n: u32));

const N: usize = 1024;

fn sim_launch(c: &mut Criterion) {
    let lock = omega::lock();
    lock.set_platform(omega::PlatformKind::Sim).expect("the simulator installs");
    let dev = lock.open().expect("the simulator opens");
    let x: Vec<f32> = (0..N).map(|i| i as f32).collect();

    let mut g = c.benchmark_group("sim_vector_add_1024");
    let (dev, ()) = dev
        .scope(|s, gpu| {
            let a = s.alloc_from(&x).unwrap();
            let b = s.alloc_from(&x).unwrap();
            let mut out = s.alloc::<f32>(N).unwrap();
            let k = VectorAdd::load(s).unwrap();
            let l = k.launch(&a, &b, &mut out, N as u32).grid([N as u32 / 256, 1, 1]).block([256, 1, 1]);
            let once = gpu.launch(&l).unwrap();
            println!(
                "sim_launch: one launch takes {} ns of simulated time (the sim platform's virtual clock, not a \
                 GPU's); the times below are host time",
                once.elapsed_ns
            );
            let mut gpu = Some(once.gpu);
            g.bench_function("launch_in_scope", |bench| {
                bench.iter(|| {
                    let done = gpu.take().unwrap().launch(black_box(&l)).unwrap();
                    gpu = Some(done.gpu);
                    done.elapsed_ns
                })
            });
        })
        .into_open()
        .expect("no latch");
    drop(dev);

    g.bench_function("lock_open_launch", |bench| {
        bench.iter(|| {
            let dev = omega::lock().open().unwrap();
            dev.scope(|s, gpu| {
                let a = s.alloc::<f32>(N).unwrap();
                let mut out = s.alloc::<f32>(N).unwrap();
                let k = VectorAdd::load(s).unwrap();
                gpu.launch(&k.launch(&a, &a, &mut out, N as u32).grid([4, 1, 1]).block([256, 1, 1])).unwrap().elapsed_ns
            })
            .value()
        })
    });
    g.bench_function("lock_unlock", |bench| bench.iter(|| drop(black_box(omega::lock()))));
    g.finish();
}

criterion_group!(benches, sim_launch);
criterion_main!(benches);
