//! Recovery through the typed API: a hang latches the process, `Latched::recover` hands back the closed
//! lock, and the reopened device runs a checked vector add in the same process. The process's runtime is
//! latched by it, so this binary holds one test.

use omega::{Launch, Scoped};
use omega_hal::sim::SimFault;
use rand::{Rng, SeedableRng};

#[test]
fn a_latched_scope_recovers_and_the_reopened_device_adds_vectors() {
    let dev = omega::lock().open().unwrap();
    let sim = omega::testing::simulator().expect("sim platform");
    let scoped = dev.scope(|s, gpu| {
        let flag = s.alloc::<u32>(1).unwrap();
        let beat = s.alloc::<u32>(1).unwrap();
        let k = s.load("spin_beat").unwrap();
        sim.inject(SimFault::StopLeavesWork);
        let err = gpu.launch(&Launch::new(&k).timeout_ms(100).arg(&flag).arg(&beat)).unwrap_err();
        assert!(err.error.latched_the_process());
    });
    let Scoped::Latched(latched, ()) = scoped else { panic!("the scope must end latched") };
    let parked = latched.parked();
    assert_eq!(parked.buffers, 4, "marker buffer, flag, beat and the kernel's code");

    // The first stop leaves the kernel writing: not proved, the latch comes back with the reason.
    let failed = latched.recover().unwrap_err();
    assert!(matches!(failed.error, omega::Error::Recover(omega::RecoverError::StillRunning { .. })), "{failed}");
    assert_eq!(failed.latch.parked(), parked, "nothing released");
    let (closed, report) = failed.latch.recover().expect("the second stop holds");
    assert_eq!(report.released, parked);
    assert!(!closed.is_blocked());
    assert_eq!(closed.parked(), omega::session::ParkStats::default());
    assert!(!closed.is_open());
    assert_eq!(sim.stats().live_allocations, 0, "device memory returned");

    let dev = closed.open().expect("reopens after the recovery");
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    let n = 5000usize;
    let a: Vec<f32> = (0..n).map(|_| rng.random_range(-1e3..1e3)).collect();
    let b: Vec<f32> = (0..n).map(|_| rng.random_range(-1e3..1e3)).collect();
    let sums = dev
        .scope(|s, gpu| -> omega::Result<Vec<f32>> {
            let (ma, mb) = (s.alloc_from(&a)?, s.alloc_from(&b)?);
            let mut mc = s.alloc_from(&vec![f32::NAN; n])?;
            let k = s.load("vector_add")?;
            let l = Launch::new(&k).block([128, 1, 1]).grid([n.div_ceil(128) as u32, 1, 1]);
            gpu.launch(&l.arg(&ma).arg(&mb).arg(&mc).arg(n as u32))?;
            mc.to_vec()
        })
        .value()
        .unwrap();
    assert_eq!(sums, omega::kernels::vector_add_ref(&a, &b));
}
