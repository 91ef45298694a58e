//! A never-completing launch through the typed API latches the whole process: this binary holds one test.

use omega::error::Stage;
use omega::{Launch, Scoped};
use omega_hal::sim::SimFault;

#[test]
fn a_hang_ends_the_scope_latched_and_everything_parks() {
    let dev = omega::lock().open().unwrap();
    let sim = omega::testing::simulator().expect("sim platform");
    let frees_before = sim.stats().frees;
    let scoped = dev.scope(|s, gpu| {
        let flag = s.alloc::<u32>(1).unwrap();
        let _weights = s.alloc::<f32>(1 << 16).unwrap();
        let k = s.load("spin").unwrap();
        sim.inject(SimFault::Hang);
        let err = gpu.launch(&Launch::new(&k).timeout_ms(100).arg(&flag)).unwrap_err();
        assert!(err.gpu.is_none(), "an uncertain completion keeps the token: no launch can follow");
        assert!(err.error.latched_the_process());
        err.error.to_string()
    });
    let Scoped::Latched(latched, why) = scoped else { panic!("the scope must end latched") };
    assert!(why.starts_with("launch: completion timeout"), "{why}");
    let p = latched.parked();
    assert_eq!(p.buffers, 4, "marker buffer, flag, weights and the kernel's code");
    assert_eq!(p.bytes, 4096 + 4096 + (1 << 18) + 4096);
    assert_eq!(sim.stats().frees, frees_before, "nothing was released");
    drop(latched);
    // A new lock can be taken, but the device cannot be reopened.
    let lock = omega::lock();
    assert!(lock.is_blocked());
    let e = lock.open().unwrap_err();
    assert_eq!(e.error, omega::Error::Latched(Stage::Open));
}
