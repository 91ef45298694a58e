//! A printf kernel that never completes latches the process, and the device printf buffer, which the
//! device may still be appending to, is parked at once with the launch buffer: this binary holds one test.

use omega::kernels::{self, MIXED, MIXED_PRINTF};
use omega::{Launch, Scoped};
use omega_hal::sim::SimFault;

#[test]
fn a_latch_parks_the_printf_buffer_the_device_may_still_write() {
    let dev = omega::lock().open().unwrap();
    let sim = omega::testing::simulator().expect("sim platform");
    let cubin = kernels::cuda_module(MIXED).expect("CI installs the pinned nvcc set");
    let scoped = dev.scope(|s, gpu| {
        let module = s.load_module(cubin).unwrap();
        let k = module.kernel(MIXED_PRINTF).unwrap();
        assert_eq!(omega::session::runtime().parked().buffers, 0);
        sim.inject(SimFault::Hang);
        let err = gpu.launch(&Launch::new(&k).timeout_ms(100).arg(1).arg(1.0).arg(2u32)).unwrap_err();
        assert!(err.error.latched_the_process());
        // Parked at the latch, before anything of the scope is dropped: the launch buffer (one page) and
        // the printf buffer (its header and the default record area, one page more than 1 MiB).
        let p = omega::session::runtime().parked();
        assert_eq!(p.buffers, 2, "the launch buffer and the printf buffer");
        assert_eq!(p.bytes, 4096 + (omega::printf::DEFAULT_BUFFER_BYTES as u64 + 4096));
    });
    let Scoped::Latched(latched, _) = scoped else { panic!("the scope must end latched") };
    assert_eq!(sim.stats().frees, 0, "nothing was released");
    drop(latched);
}
