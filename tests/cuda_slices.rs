//! The CUDA C++ module's kernels on a simulator that runs them in small slices, printf kernels too:
//! this binary holds one test, since it installs a simulator of its own as the process's platform (a
//! test waiting for the lock of the platform it replaced would not wait for this one's).

use omega::kernels::{self, MIXED, MIXED_PLAIN, MIXED_PRINTF};
use omega::{Error, Launch};

fn mixed() -> &'static [u8] {
    kernels::cuda_module(MIXED).expect("CI installs the pinned nvcc set")
}

#[test]
fn module_kernels_run_in_the_simulators_slices_printf_ones_too() {
    // A simulator that runs at most 7 work units a slice: every launch below takes several.
    let config = omega_hal::sim::SimConfig { slice_units: 7, ..Default::default() };
    let sim = omega_hal::sim::Sim::with_config(config);
    kernels::register_host_kernels(&sim);
    let lock = omega::lock();
    let rt = omega::session::runtime();
    rt.install(omega::platform::Installed::simulator(sim.clone())).unwrap();
    let dev = lock.open().expect("open");
    let capture = omega::printf::capture();
    let (base, scale, threads, lines) = (9, -1.25, 5u32, 3u32);
    let r = dev.scope(|s, gpu| -> Result<(), Error> {
        let module = s.load_module(mixed())?;
        let k = module.kernel(MIXED_PRINTF)?;
        let gpu = gpu.launch(&Launch::new(&k).block([threads, 1, 1]).arg(base).arg(scale).arg(lines))?.gpu;
        assert_eq!(sim.launches().last().unwrap().slices, 3, "15 lines, 7 a slice");
        // Each thread's lines in order, the slices one after another: the same text as in one piece.
        assert_eq!(capture.take(), kernels::mixed_printf_expected(base, scale, threads, lines).concat().concat());
        let n = 100u32;
        let mut out = s.alloc::<f32>(n as usize)?;
        out.fill(f32::NAN)?;
        let plain = module.kernel(MIXED_PLAIN)?;
        let gpu = gpu.launch(&Launch::new(&plain).block([128, 1, 1]).arg(&out).arg(n))?.gpu;
        assert_eq!(sim.launches().last().unwrap().slices, 15, "100 elements, 7 a slice");
        assert_eq!(out.to_vec()?, kernels::mixed_plain_ref(n as usize));
        let mut count = [0u8; 4];
        module.read_global("mixed_count", &mut count)?;
        assert_eq!(u32::from_le_bytes(count), n, "every slice counts what it stored");
        // The output callback runs with the lock held and pinned: it cannot release the lock.
        let refused = std::sync::Arc::new(std::sync::Mutex::new(Ok(())));
        let seen = refused.clone();
        omega::printf::set_output(omega::printf::Output::Callback(Box::new(move |_| {
            *seen.lock().unwrap() = omega::session::runtime().unlock();
        })));
        gpu.launch(&Launch::new(&k).block([1, 1, 1]).arg(0).arg(0.0).arg(1u32)).map_err(Error::from)?;
        let refused = refused.lock().unwrap().clone();
        assert_eq!(refused, Err(Error::LockPinned("device printf's output callback")));
        assert!(omega::session::runtime().holds_lock(), "the lock stayed held");
        Ok(())
    });
    omega::printf::set_output(omega::printf::Output::Stdout);
    let (_dev, r) = r.into_open().expect("no latch");
    r.unwrap();
}
