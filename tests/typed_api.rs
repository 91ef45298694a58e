//! The typed API over the process's own runtime. Tests in this binary take turns on the one lock.

use omega::error::Stage;
use omega::{Error, Launch, LaunchArgError, Scoped};
use rand::{Rng, SeedableRng};

fn random_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-1e3f32..1e3)).collect()
}

#[test]
fn vector_add_through_the_typed_api_matches_the_reference() {
    let dev = omega::lock().open().expect("open");
    assert_eq!(dev.platform(), "sim", "these tests run where there is no GPU");
    let n = 4097;
    let (a, b) = (random_f32(n, 1), random_f32(n, 2));
    let result = dev.scope(|s, gpu| -> Result<Vec<f32>, Error> {
        let da = s.alloc_from(&a)?;
        let db = s.alloc_from(&b)?;
        let mut dc = s.alloc::<f32>(n)?;
        dc.fill(f32::NAN)?;
        let k = s.load("vector_add")?;
        let l = Launch::new(&k)
            .grid([n.div_ceil(256) as u32, 1, 1])
            .block([256, 1, 1])
            .arg(&da)
            .arg(&db)
            .arg(&dc)
            .arg(n as u32);
        let done = gpu.launch(&l)?;
        assert!(done.elapsed_ns > 0);
        dc.to_vec()
    });
    let (_dev, out) = result.into_open().expect("no latch");
    assert_eq!(out.unwrap(), omega::kernels::vector_add_ref(&a, &b));
}

#[test]
fn a_launch_whose_arguments_do_not_match_the_kernel_is_refused_and_the_token_comes_back() {
    let dev = omega::lock().open().unwrap();
    let r = dev.scope(|s, gpu| {
        let a = s.alloc::<f32>(8).unwrap();
        let k = s.load("vector_add").unwrap();
        let l = Launch::new(&k).block([8, 1, 1]).arg(&a).arg(8u32);
        let e = gpu.launch(&l).unwrap_err();
        assert!(
            matches!(&e.error, Error::LaunchArguments(LaunchArgError::ParamCount { declared: 4, given: 2, .. })),
            "{}",
            e.error
        );
        let gpu = e.gpu.expect("a refused launch does not latch");
        let l = Launch::new(&k).block([8, 1, 1]).arg(&a).arg(&a).arg(1.0f32).arg(8u32);
        let e = gpu.launch(&l).unwrap_err();
        let layout = LaunchArgError::ParamLayout {
            kernel: "vector_add".into(),
            ordinal: 2,
            size: 8,
            offset: 16,
            given_size: 4,
            given_offset: 16,
        };
        assert_eq!(e.error, Error::LaunchArguments(layout));
    });
    assert!(matches!(r, Scoped::Open(..)));
}

#[test]
fn buffers_free_at_the_end_of_the_scope() {
    let dev = omega::lock().open().unwrap();
    let sim = omega::testing::simulator().expect("sim platform");
    let live = sim.stats().live_allocations;
    let chunks = omega::session::runtime().memory_stats().carved.chunks as usize;
    let dev = dev
        .scope(|s, _gpu| {
            let _a = s.alloc::<u32>(1 << 20).unwrap();
            let _b = s.alloc_cached::<half::bf16>(100).unwrap();
            let ms = omega::session::runtime().memory_stats();
            assert_eq!(ms.carved.buffers, 1, "the small buffer is carved");
            assert_eq!(sim.stats().live_allocations, live + 1 + ms.carved.chunks as usize - chunks);
        })
        .into_open()
        .unwrap()
        .0;
    // The 4 MiB buffer was a platform allocation of its own and went back; the small one was carved from
    // a chunk, which the memory manager keeps as its pool's spare.
    let ms = omega::session::runtime().memory_stats();
    assert_eq!(ms.carved.buffers, 0);
    assert_eq!(sim.stats().live_allocations, live + ms.carved.chunks as usize - chunks);
    drop(dev);
}

#[test]
fn device_query_and_version() {
    let dev = omega::lock().open().unwrap();
    let info = dev.device();
    assert!(info.name.contains("simulated"));
    assert_eq!((info.arch_major, info.arch_minor), (9, 0));
    assert!(info.sm_count > 0 && info.memory_bytes > 0);
    assert!(!info.driver_version.is_empty());
    assert_eq!(omega::version(), env!("CARGO_PKG_VERSION"));
    // The version the Rust API reports is the written contract's (its first line), not a number of its own.
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/runtime/omega_runtime_api.md")).unwrap();
    let (api_major, api_minor) = omega::API_VERSION;
    assert_eq!(doc.lines().next(), Some(format!("Omega Runtime API version: {api_major}.{api_minor}").as_str()));
}

#[test]
fn kernels_using_2d_grids_shared_and_local_memory_match_their_references() {
    let dev = omega::lock().open().unwrap();
    dev.scope(|s, gpu| {
        let (block, grid) = ([16u32, 8], [5u32, 3]);
        let n = (block[0] * grid[0] * block[1] * grid[1]) as usize;
        let mut out = s.alloc::<u32>(n).unwrap();
        out.fill(u32::MAX).unwrap();
        let k = s.load("grid_index").unwrap();
        let gpu = gpu
            .launch(&Launch::new(&k).grid([grid[0], grid[1], 1]).block([block[0], block[1], 1]).arg(&out))
            .unwrap()
            .gpu;
        assert_eq!(out.to_vec().unwrap(), omega::kernels::grid_index_ref(block, grid));

        let input = random_f32(128 * 4, 9);
        let din = s.alloc_from(&input).unwrap();
        let mut dout = s.alloc::<f32>(input.len()).unwrap();
        dout.fill(f32::NAN).unwrap();
        let k = s.load("shared_reverse").unwrap();
        let l = Launch::new(&k).grid([4, 1, 1]).block([128, 1, 1]).dynamic_shared(128 * 4).arg(&din).arg(&dout);
        let gpu = gpu.launch(&l).unwrap().gpu;
        assert_eq!(dout.to_vec().unwrap(), omega::kernels::shared_reverse_ref(&input, 128));

        let mut lout = s.alloc::<u32>(64 * 3).unwrap();
        lout.fill(0xdead_beef).unwrap();
        let k = s.load("local_array").unwrap();
        gpu.launch(&Launch::new(&k).grid([3, 1, 1]).block([64, 1, 1]).arg(&lout).arg(12345u32)).unwrap();
        assert_eq!(lout.to_vec().unwrap(), omega::kernels::local_array_ref(64, 3, 12345));
    });
}

#[test]
fn safe_code_can_neither_free_a_typed_buffer_nor_let_the_lock_go_under_it() {
    use omega::session::{runtime, Scratch};
    let dev = omega::lock().open().unwrap();
    let r = dev.scope(|s, _gpu| {
        let mut m = s.alloc_from(&[1u32, 2, 3, 4]).unwrap();
        // A copy of the handle, from raw() or guessed, frees nothing: the buffer is the Mem's.
        let mut copy = *m.raw();
        let e = runtime().free(&mut copy).unwrap_err();
        let owner = "the buffer of a typed omega::Mem, released by its drop";
        assert_eq!(e, Error::NotCallers { stage: Stage::Free, owner });
        assert_eq!(copy, *m.raw());
        let mut forged = Scratch { mem: copy, cap: 0, high_water: 0, reserved: 0 };
        assert_eq!(runtime().scratch(&mut forged, 1 << 20).unwrap_err().stage(), Stage::Scratch);
        assert!(runtime().scratch_free(&mut forged).is_err());
        // The lock cannot be handed to another thread (which could close the device) while the scope lives.
        assert_eq!(runtime().unlock(), Err(Error::LockPinned("a typed lock token (omega::Locked or omega::Latched)")));
        omega::ffi::session::omega_gpu_session_unlock();
        assert!(runtime().holds_lock());
        assert_eq!(runtime().close().unwrap_err().stage(), Stage::Lock, "and close from here is refused");
        // The buffer is intact and writable.
        m.write(&[5, 6, 7, 8]).unwrap();
        assert_eq!(m.to_vec().unwrap(), vec![5, 6, 7, 8]);
        // Sizes past what a platform can describe are refused, not wrapped.
        let e = s.alloc_code(usize::MAX).unwrap_err();
        assert_eq!(e, Error::Refused(omega_hal::Refusal::Overflow));
        assert!(s.alloc::<u64>(usize::MAX / 4).is_err(), "elements times their size overflows");
    });
    let (dev, ()) = r.into_open().expect("no latch");
    drop(dev);
    assert!(!runtime().holds_lock(), "the token's drop released it");
}
