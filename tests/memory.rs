//! The session's memory manager, device-only buffers, the memory figures and the default wait, on the
//! simulator (issue 11 items 1-3): how many platform calls allocation makes, what fragmentation costs and
//! when chunks go back, what a latch keeps, and how soon a wait with no spin window sees its completion.

mod common;

use std::sync::Arc;

use common::*;
use omega::error::{SettingError, Stage};
use omega::platform::Installed;
use omega::session::suballoc::{CHUNK_BYTES, LARGEST_CARVED};
use omega::session::{GpuMem, Runtime};
use omega::{Error, Launch, Scoped};
use omega_hal::sim::{Sim, SimConfig, SimFault, YIELD_NS};
use omega_hal::WaitPolicy;
use rand::{Rng, SeedableRng};

const PAGE: u64 = 4096;

/// A private runtime, locked and open, on a simulator of `config`.
fn open_with(config: SimConfig) -> (Runtime, Arc<Sim>) {
    let sim = Sim::with_config(config);
    omega::kernels::register_host_kernels(&sim);
    let rt = Runtime::with_platform(Installed::simulator(sim.clone())).unwrap();
    rt.lock().unwrap();
    rt.open().expect("sim opens");
    (rt, sim)
}

fn launch(rt: &Runtime, l: &omega::session::RawLaunch) -> Result<omega::session::LaunchCompletion, Error> {
    // SAFETY: `l.args` points to `l.n_args` live words for the duration of the call.
    unsafe { rt.launch_raw(l) }
}

// ----- item 1: the memory manager -------------------------------------------------------------------------

#[test]
fn a_hundred_thousand_small_buffers_take_one_platform_allocation_per_chunk() {
    let (rt, sim) = open_rt_big();
    let before = sim.stats().live_allocations;
    let n = 100_000usize;
    let bufs: Vec<GpuMem> = (0..n).map(|_| rt.alloc(4).unwrap()).collect();
    let ms = rt.memory_stats();
    let per_chunk = (CHUNK_BYTES / PAGE) as usize;
    assert_eq!(ms.carved.buffers, n as u64);
    assert_eq!(ms.carved.chunks as usize, n.div_ceil(per_chunk), "one-page blocks, packed");
    assert_eq!(sim.stats().live_allocations - before, ms.carved.chunks as usize, "one platform call per chunk");
    assert_eq!(ms.carved_bytes, n as u64 * PAGE, "every 4-byte buffer counts its page");
    // Every buffer is its own: distinct, page-aligned addresses one page apart, and its own bytes.
    let mut vas: Vec<u64> = bufs.iter().map(|b| b.va).collect();
    vas.sort_unstable();
    assert!(vas.windows(2).all(|w| w[1] - w[0] >= PAGE), "overlapping buffers");
    for (i, b) in bufs.iter().enumerate().step_by(997) {
        rt.write(b, 0, &(i as u32).to_le_bytes()).unwrap();
    }
    for (i, b) in bufs.iter().enumerate().step_by(997) {
        let mut got = [0u8; 4];
        rt.read(b, 0, &mut got).unwrap();
        assert_eq!(u32::from_le_bytes(got), i as u32, "buffer {i}");
    }
    let frees = sim.stats().frees;
    for mut b in bufs {
        rt.free(&mut b).unwrap();
    }
    let ms = rt.memory_stats();
    assert_eq!((ms.carved.buffers, ms.carved.chunks, ms.carved.empty_chunks), (0, 1, 1), "one spare kept");
    assert_eq!(sim.stats().frees - frees, n.div_ceil(per_chunk) as u64 - 1, "every other chunk returned");
}

/// A runtime on a simulator with room for the tests that fill many chunks.
fn open_rt_big() -> (Runtime, Arc<Sim>) {
    open_with(SimConfig { memory_bytes: 16 << 30, ..SimConfig::default() })
}

#[test]
fn freed_space_is_reused_and_a_free_alloc_loop_makes_no_platform_call() {
    let (rt, sim) = open_runtime();
    let mut a = rt.alloc(5000).unwrap();
    let va = a.va;
    rt.free(&mut a).unwrap();
    let (allocs, frees) = (sim.stats().live_allocations, sim.stats().frees);
    for _ in 0..1000 {
        let mut b = rt.alloc(5000).unwrap();
        assert_eq!(b.va, va, "the freed block is taken again");
        rt.free(&mut b).unwrap();
    }
    assert_eq!((sim.stats().live_allocations, sim.stats().frees), (allocs, frees), "no platform call in the loop");
}

#[test]
fn large_buffers_and_code_are_platform_allocations_of_their_own() {
    let (rt, sim) = open_runtime();
    let before = (rt.memory_stats(), sim.stats().live_allocations);
    let big = rt.alloc(LARGEST_CARVED as usize + 1).unwrap();
    let edge = rt.alloc(LARGEST_CARVED as usize).unwrap();
    let code = rt.alloc_code(100).unwrap();
    let ms = rt.memory_stats();
    assert_eq!(ms.direct_buffers, before.0.direct_buffers + 2, "the large buffer and the code");
    assert_eq!(ms.direct_bytes, before.0.direct_bytes + LARGEST_CARVED + PAGE + PAGE);
    assert_eq!(ms.carved.buffers, 1, "2 MiB exactly is still carved");
    assert_eq!(sim.stats().live_allocations, before.1 + 3, "two direct allocations and one chunk");
    assert_eq!(big.size as u64, LARGEST_CARVED + PAGE, "page-rounded");
    let _ = (edge, code);
}

#[test]
fn alloc_statistics_count_page_rounded_sizes_whatever_the_placement() {
    let (rt, _sim) = open_runtime();
    let base = rt.alloc_stats();
    for bytes in [1usize, 4, 4096, 4097, 100_000, LARGEST_CARVED as usize + 1] {
        rt.alloc(bytes).unwrap();
    }
    rt.alloc_device(10).unwrap();
    rt.alloc_cached(8193).unwrap();
    let st = rt.alloc_stats();
    assert_eq!(st.allocs - base.allocs, 8);
    let want = 4096 + 4096 + 4096 + 8192 + 102_400 + (LARGEST_CARVED + 4096) + 4096 + 12_288;
    assert_eq!(st.alloc_bytes - base.alloc_bytes, want);
}

/// Fragmentation, measured: a seeded mix of sizes from 4 bytes to 2 MiB allocated, half freed at random,
/// refilled, then all freed. The figures are printed (cargo test -- --nocapture) and bounded.
#[test]
fn fragmentation_and_chunk_return_are_measured() {
    let (rt, sim) = open_rt_big();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    // Sizes spread over the classes, small ones the most frequent (as in a serving engine's buffers).
    let size = |rng: &mut rand::rngs::StdRng| -> usize {
        let order = rng.random_range(0u32..=9);
        let pages = 1usize << order;
        rng.random_range(((pages / 2) * 4096).max(1)..=pages * 4096)
    };
    let mut live: Vec<GpuMem> = (0..4000).map(|_| rt.alloc(size(&mut rng)).unwrap()).collect();
    let full = rt.memory_stats();
    let used = full.carved_bytes as f64;
    let internal = full.carved.block_bytes as f64 / used;
    let external = full.carved.chunk_bytes() as f64 / full.carved.block_bytes as f64;
    println!(
        "filled: {} buffers, {} MiB page-rounded, {} MiB in blocks ({internal:.3}x), {} chunks ({external:.3}x)",
        full.carved.buffers,
        full.carved_bytes >> 20,
        full.carved.block_bytes >> 20,
        full.carved.chunks
    );
    // A block is the next power of two of pages: less than twice the buffer. Allocation-only packs
    // lowest-first, so the chunks hold little but the blocks.
    assert!(internal < 2.0, "internal fragmentation {internal}");
    assert!(external < 1.1, "chunks {external}x the blocks after allocation alone");

    // Free a random half, then allocate as many again: the holes are reused, so the chunk count stays.
    for _ in 0..2000 {
        let i = rng.random_range(0..live.len());
        let mut m = live.swap_remove(i);
        rt.free(&mut m).unwrap();
    }
    let holes = rt.memory_stats();
    println!(
        "half freed: {} chunks held for {} MiB of blocks, largest free block {} KiB",
        holes.carved.chunks,
        holes.carved.block_bytes >> 20,
        holes.carved.largest_free_block >> 10
    );
    assert_eq!(holes.carved.chunks, full.carved.chunks, "no chunk empties when half its buffers go at random");
    assert_eq!(holes.carved.largest_free_block, LARGEST_CARVED.max(holes.carved.largest_free_block));
    for _ in 0..2000 {
        live.push(rt.alloc(size(&mut rng)).unwrap());
    }
    let refilled = rt.memory_stats();
    println!("refilled: {} chunks (from {})", refilled.carved.chunks, full.carved.chunks);
    assert!(
        refilled.carved.chunks <= full.carved.chunks + full.carved.chunks / 10 + 1,
        "refilling the holes grew {} chunks to {}",
        full.carved.chunks,
        refilled.carved.chunks
    );

    // Everything freed: the blocks merge back, every chunk but one spare goes back to the platform.
    let frees = sim.stats().frees;
    for mut m in live {
        rt.free(&mut m).unwrap();
    }
    let empty = rt.memory_stats();
    assert_eq!((empty.carved.buffers, empty.carved.block_bytes), (0, 0));
    assert_eq!((empty.carved.chunks, empty.carved.largest_free_block), (1, CHUNK_BYTES), "one whole spare");
    assert_eq!(sim.stats().frees - frees, refilled.carved.chunks - 1, "the other chunks were returned");
}

#[test]
fn spare_chunks_go_back_when_the_device_runs_out_and_the_allocation_is_tried_again() {
    // Room for the launch buffer, one chunk, and little else.
    let (rt, sim) = open_with(SimConfig { memory_bytes: CHUNK_BYTES + (8 << 20), ..SimConfig::default() });
    let mut small = rt.alloc(4).unwrap();
    rt.free(&mut small).unwrap();
    assert_eq!(rt.memory_stats().carved.empty_chunks, 1, "the chunk stays as a spare");
    let frees = sim.stats().frees;
    let big = rt.alloc(16 << 20).expect("the spare is given back to make room");
    assert_eq!(rt.memory_stats().carved.chunks, 0);
    assert_eq!(sim.stats().frees, frees + 1);
    // With no chunk to be had, a small buffer falls back to an allocation of its own.
    let small = rt.alloc(4).unwrap();
    let ms = rt.memory_stats();
    assert_eq!((ms.carved.chunks, ms.direct_buffers), (0, 3), "the launch buffer, the large and the small");
    assert_eq!(small.size, 4096);
    let _ = big;
}

#[test]
fn after_a_latch_carved_buffers_are_parked_and_their_chunks_stay() {
    let (rt, sim) = open_runtime();
    let mut bufs: Vec<GpuMem> = (0..50).map(|_| rt.alloc(4096).unwrap()).collect();
    let code = load(&rt, "spin");
    let flag = rt.alloc(4).unwrap();
    sim.inject(SimFault::Hang);
    let words = addr(flag.va);
    let e = launch(&rt, &raw_launch(&code, &words, 1, 1)).unwrap_err();
    assert!(e.latched_the_process(), "{e}");
    let (before, frees) = (rt.memory_stats(), sim.stats().frees);
    for b in bufs.iter_mut() {
        rt.free(b).unwrap();
        assert!(rt.is_parked(b.handle));
    }
    let after = rt.memory_stats();
    assert_eq!(after.carved, before.carved, "a parked buffer keeps its block, and so its chunk");
    assert_eq!(sim.stats().frees, frees, "nothing goes back to the platform after a latch");
    assert_eq!(rt.parked().bytes - 4096, 50 * 4096, "the marker buffer and the 50 carved buffers, page-rounded");
}

// ----- item 2: device-only buffers and the memory figures -------------------------------------------------

#[test]
fn a_device_only_buffer_has_no_cpu_view_and_moves_through_the_platform() {
    let (rt, sim) = open_runtime();
    for bytes in [10usize, 100_000, 3 << 20] {
        let m = rt.alloc_device(bytes).unwrap();
        assert!(m.cpu.is_null(), "cpu == NULL: no CPU view");
        assert_eq!(m.size as u64, (bytes as u64).div_ceil(PAGE) * PAGE);
        let data: Vec<u8> = (0..bytes).map(|i| (i * 7 + 3) as u8).collect();
        rt.write(&m, 0, &data).unwrap();
        let syncs = sim.stats().syncs;
        rt.sync_to_gpu(&m).unwrap();
        rt.sync_to_cpu(&m).unwrap();
        assert_eq!(sim.stats().syncs, syncs, "a device-only buffer's syncs are no-ops");
        let mut back = vec![0u8; bytes];
        rt.read(&m, 0, &mut back).unwrap();
        assert_eq!(back, data, "{bytes} bytes");
        // A range inside, and one past the end.
        rt.write(&m, bytes - 3, &[1, 2, 3]).unwrap();
        let mut tail = [0u8; 3];
        rt.read(&m, bytes - 3, &mut tail).unwrap();
        assert_eq!(tail, [1, 2, 3]);
        let e = rt.write(&m, m.size - 1, &[0, 0]).unwrap_err();
        let past = SettingError::RangePastBytes { offset: m.size - 1, len: 2, bytes: m.size as u64 };
        assert_eq!(e, Error::Setting { stage: Stage::Write, detail: past });
    }
}

#[test]
fn a_kernel_reads_and_writes_device_only_buffers() {
    let (rt, _sim) = open_runtime();
    let n = 5000usize;
    let (a, b, c) = (rt.alloc_device(n * 4).unwrap(), rt.alloc_device(n * 4).unwrap(), rt.alloc_device(n * 4).unwrap());
    let av: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let bv: Vec<f32> = (0..n).map(|i| 0.5 * i as f32).collect();
    rt.write(&a, 0, bytemuck_f32(&av)).unwrap();
    rt.write(&b, 0, bytemuck_f32(&bv)).unwrap();
    let code = load(&rt, "vector_add");
    let words = [&addr(a.va)[..], &addr(b.va), &addr(c.va), &[n as u32]].concat();
    launch(&rt, &raw_launch(&code, &words, 256, n.div_ceil(256) as u32)).unwrap();
    let mut out = vec![0u8; n * 4];
    rt.read(&c, 0, &mut out).unwrap();
    let got: Vec<f32> = out.chunks(4).map(|w| f32::from_le_bytes(w.try_into().unwrap())).collect();
    assert_eq!(got, omega::kernels::vector_add_ref(&av, &bv));
}

fn bytemuck_f32(v: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and every byte of it is initialised; the slice borrows `v`.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

#[test]
fn write_and_read_work_on_buffers_with_a_cpu_view_too_and_are_refused_after_a_latch() {
    let (rt, sim) = open_runtime();
    let m = rt.alloc(8192).unwrap();
    rt.write(&m, 4096, b"hello").unwrap();
    let mut got = [0u8; 5];
    rt.read(&m, 4096, &mut got).unwrap();
    assert_eq!(&got, b"hello");
    sim.inject(SimFault::FailSync);
    let e = rt.write(&m, 0, b"x").unwrap_err();
    assert_eq!(e.stage(), Stage::Sync, "{e}");
    let d = rt.alloc_device(4096).unwrap();
    sim.inject(SimFault::FailSync);
    let e = rt.read(&d, 0, &mut got).unwrap_err();
    assert_eq!(e.stage(), Stage::Read, "{e}");
    assert!(!rt.is_blocked(), "a failed copy is certain: no latch");
    let code = load(&rt, "spin");
    sim.inject(SimFault::Hang);
    let words = addr(m.va);
    launch(&rt, &raw_launch(&code, &words, 1, 1)).unwrap_err();
    assert!(rt.is_blocked());
    assert_eq!(rt.write(&d, 0, b"x"), Err(Error::Latched(Stage::Write)));
    assert_eq!(rt.read(&d, 0, &mut got), Err(Error::Latched(Stage::Read)));
    assert!(rt.mem_info().is_ok(), "the figures touch no buffer: allowed after a latch");
}

#[test]
fn mem_info_reports_the_devices_free_and_total_bytes() {
    let total = 1u64 << 30;
    let (rt, _sim) = open_with(SimConfig { memory_bytes: total, ..SimConfig::default() });
    let base = rt.mem_info().unwrap();
    assert_eq!(base.total_bytes, total);
    assert_eq!(base.free_bytes, total - PAGE, "only the launch buffer is allocated");
    let _small = rt.alloc(4).unwrap();
    assert_eq!(rt.mem_info().unwrap().free_bytes, base.free_bytes - CHUNK_BYTES, "the chunk counts as used");
    let _big = rt.alloc_device(100 << 20).unwrap();
    assert_eq!(rt.mem_info().unwrap().free_bytes, base.free_bytes - CHUNK_BYTES - (100 << 20));
    rt.unlock().unwrap();
    rt.close().unwrap();
    rt.lock().unwrap();
    let e = rt.mem_info().unwrap_err();
    assert_eq!(e.stage(), Stage::MemInfo);
}

#[test]
fn device_only_buffers_in_the_typed_api() {
    let dev = omega::lock().open().unwrap();
    let info = dev.mem_info().unwrap();
    assert!(info.total_bytes > 0 && info.free_bytes <= info.total_bytes);
    let n = 3000;
    let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.25).collect();
    let b: Vec<f32> = (0..n).map(|i| 1000.0 - i as f32).collect();
    let r = dev.scope(|s, gpu| -> Result<(Vec<f32>, Vec<f32>), Error> {
        let da = s.alloc_device_from(&a)?;
        let db = s.alloc_device_from(&b)?;
        let mut dc = s.alloc_device::<f32>(n)?;
        assert!(dc.raw().cpu.is_null());
        let k = s.load("vector_add")?;
        let l = Launch::new(&k)
            .grid([(n as u32).div_ceil(256), 1, 1])
            .block([256, 1, 1])
            .arg(&da)
            .arg(&db)
            .arg(&dc)
            .arg(n as u32);
        gpu.launch(&l)?;
        let whole = dc.to_vec()?;
        let mut part = vec![0f32; 10];
        dc.read_at(n - 10, &mut part)?;
        let past = SettingError::ElementsPast { at: n - 5, n: 6, len: n };
        assert_eq!(dc.write_at(n - 5, &[0.0; 6]), Err(Error::Setting { stage: Stage::Write, detail: past }));
        Ok((whole, part))
    });
    let Scoped::Open(_, r) = r else { panic!("no latch") };
    let (whole, part) = r.unwrap();
    let want = omega::kernels::vector_add_ref(&a, &b);
    assert_eq!(whole, want);
    assert_eq!(part, want[n - 10..]);
}

// ----- item 3: the default wait ----------------------------------------------------------------------------

/// The completion time of an `empty` launch that takes `kernel_ns` of virtual time, with the launch's
/// own spin window `spin_us` (0: none, so the default wait).
fn completion_ns(kernel_ns: u64, spin_us: u32) -> u64 {
    let (rt, _sim) = open_with(SimConfig { launch_ns: kernel_ns, ..SimConfig::default() });
    let code = load(&rt, "empty");
    let words = [0u32];
    let l = omega::session::RawLaunch { spin_us, timeout_ms: 1000, ..raw_launch(&code, &words, 1, 1) };
    launch(&rt, &l).unwrap().elapsed_ns
}

#[test]
fn the_default_wait_sees_a_short_kernel_within_microseconds_and_a_long_one_within_an_eighth() {
    let p = WaitPolicy::DEFAULT;
    // Inside the spin: seen within a few clock ticks.
    let short = completion_ns(5_000, 0);
    assert!((5_000..5_000 + 1_000).contains(&short), "a 5 us kernel seen after {short} ns");
    // In the yield phase: at most one yield late.
    let k = p.spin_ns + p.yield_ns / 2;
    let mid = completion_ns(k, 0);
    assert!((k..k + YIELD_NS + 1_000).contains(&mid), "a {k} ns kernel seen after {mid} ns");
    // Sleeping: at most an eighth of the wait late, and never more than the longest sleep.
    for k in [300_000u64, 5_000_000, 100_000_000] {
        let t = completion_ns(k, 0);
        let late = t - k;
        let bound = (k / WaitPolicy::SLEEP_FRACTION)
            .clamp(u64::from(p.first_sleep_us) * 1_000, u64::from(p.max_sleep_us) * 1_000);
        assert!(late <= bound + 1_000, "a {k} ns kernel seen {late} ns late (bound {bound})");
    }
}

#[test]
fn a_spin_window_replaces_the_default_spin() {
    // 400 us is past the default spin and yield: sleeping would see it up to 50 us late. A 500 us window
    // spins through it.
    let k = 400_000;
    let spun = completion_ns(k, 500);
    assert!(spun - k < 1_000, "seen {} ns late inside the window", spun - k);
    let slept = completion_ns(k, 0);
    assert!(slept - k >= 1_000, "the default wait sleeps by then: {} ns late", slept - k);
}
