//! Omega's side of the GPU benchmarks (the CUDA side is benches/cuda/baseline.cu, run in the same job).
//!
//! Prints one `omega.<metric> <value>` line per figure, after a header naming the platform and device:
//! - `roundtrip_p10/p50/p99_us`: an empty kernel, launch to both markers observed, 10,000 iterations
//!   after 1,000 warm-up, with a spin window (no sleep-poll);
//! - `sync_1g_to_gpu_gbps`, `sync_1g_to_cpu_gbps`: a 1 GiB buffer made visible each way (best of 5);
//! - `sync_4k_to_gpu_p50_us`, `sync_4k_to_cpu_p50_us`: 4 KiB syncs, 10,000 each;
//! - `layer_*`: the same empty launch through each layer in this one process — the typed API, the session's
//!   `Runtime::launch` with a prepared spec, and the HAL's submit plus a poll of both markers — so the
//!   cost of each layer is the difference; and `clock_read_ns`, what one `Instant::now` costs here;
//! - `alloc_free_<size>_us` (4b, 64k, 1m, 64m, 1g, 16g, 64g): one allocation and its free, p50, device-only
//!   buffers (cudaMalloc's peer), and `alloc_free_data_<size>_us` the same for data buffers (with a CPU view);
//! - `devonly_write_1g_gbps`, `devonly_read_1g_gbps`, `devonly_write_4k_p50_us`, `devonly_read_4k_p50_us`:
//!   `write`/`read` of a device-only buffer through the platform's staging (cudaMemcpy from pinned memory's
//!   peer, as the 1 GiB and 4 KiB syncs are);
//! - `default_wait_roundtrip_p10/p50/p99_us`: the empty launch with no spin window anywhere (the default
//!   wait; CUDA's peer is a default-flags context's launch + cudaStreamSynchronize);
//! - `wait_100ms_cpu_pct`: CPU time of the thread waiting on a 100 ms kernel, percent of the wall time
//!   (getrusage RUSAGE_THREAD), median of 5.
//!
//! `gpu_bench [--quick]` (quick: fewer iterations, for a smoke run on sim).

use std::time::Instant;

use omega::{Error, Launch};
use omega_hal::{BufferDesc, BufferKind, CachePolicy, LaunchDesc, MarkerSlot, Order, Rights, Submission};

#[path = "common/mod.rs"]
mod common;
use common::{percentile, us_since};
use omega::error::Stage;

/// One `Instant::now` (a `clock_gettime`: a vDSO read or, in some VMs, a system call), ns.
fn clock_read_ns() -> f64 {
    let n = 200_000;
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(Instant::now());
    }
    t.elapsed().as_secs_f64() * 1e9 / n as f64
}

/// The empty launch through each layer, interleaved in rounds so drifts hit every layer alike.
fn layers<'s>(
    k: &omega::Kernel<'s>,
    mut gpu: omega::Gpu<'s>,
    launch: &Launch<'_, 's>,
    warm: usize,
    iters: usize,
) -> Result<omega::Gpu<'s>, Error> {
    let rt = omega::session::runtime();
    let meta = k.meta();
    let words = launch.arguments().words();
    let spec = omega::session::LaunchSpec {
        code_va: k.entry_va(),
        gpr_count: meta.registers,
        num_elements: 1,
        args: &words,
        max_args: words.len(),
        shape: omega::session::LaunchShape {
            grid: [1, 1, 1],
            block: [1, 1, 1],
            shared_bytes: 0,
            dynamic_shared_bytes: 0,
            timeout_ms: 5_000,
            spin_us: 100_000,
            cluster: [1, 1, 1],
        },
    };
    // The HAL level: our own marker pair, the descriptor the session would build.
    let platform = omega::testing::platform_of(rt)?;
    let desc = BufferDesc {
        bytes: 4096,
        rights: Rights::HOST_POLLED | Rights::GPU_WRITE | Rights::CPU_READ | Rights::CPU_WRITE,
        cache: CachePolicy::Uncached,
        kind: BufferKind::Queue,
    };
    let mem = platform.memory().expect("memory service");
    // SAFETY: the scope holds the session lock and the device is open.
    let markers = unsafe { mem.alloc(&desc) }.map_err(Error::Alloc)?;
    // SAFETY: the marker buffer is a page; the second slot at +16 lies inside it.
    let second = unsafe { markers.cpu.add(16) };
    let slots = [MarkerSlot { va: markers.va, cpu: markers.cpu }, MarkerSlot { va: markers.va + 16, cpu: second }];
    let hal_desc = LaunchDesc {
        code_va: k.entry_va(),
        code_bytes: meta.code_bytes,
        gpr_count: omega::session::launch_gpr(0, meta),
        block: [1, 1, 1],
        grid: [1, 1, 1],
        shared_bytes: meta.static_shared_bytes.max(1024),
        dynamic_shared_bytes: 0,
        local_bytes_per_thread: meta.local_bytes_per_thread,
        barrier_count: meta.barriers,
        features: omega_hal::LaunchFeatures::NONE,
        num_elements: 1,
        args: &words,
        const_banks: &[],
        order: Order::AfterPrevious,
        skip: false,
    };
    let queue = platform.queue().expect("queue service");
    let poll = platform.poll().expect("poll service");
    let mut seq = 0u32;
    let hal = |seq: &mut u32| -> Result<(), Error> {
        *seq = seq.wrapping_add(1).max(1);
        let sub =
            Submission { launches: std::slice::from_ref(&hal_desc), markers: slots, sequence: *seq, stamps: None };
        // SAFETY: lock held; code, markers and arguments are live; the previous submission completed.
        unsafe { queue.submit(&sub) }.map_err(Error::Submit)?;
        let t = Instant::now();
        for (which, m) in slots.iter().enumerate() {
            let mut spins = 0u32;
            // SAFETY: both slots lie in the live HOST_POLLED marker buffer.
            while unsafe { poll.poll(m) }.map_err(Error::PollRefused)? != *seq {
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(4096) && t.elapsed().as_secs() > 5 {
                    return Err(Error::Timeout { marker: which as u8, timeout_ms: 5_000 });
                }
                std::hint::spin_loop();
            }
        }
        Ok(())
    };
    let (mut typed, mut runtime, mut hal_t) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..(warm + iters) / 100 {
        for _ in 0..100 {
            let t = Instant::now();
            gpu = gpu.launch(launch)?.gpu;
            let a = us_since(t);
            let t = Instant::now();
            rt.launch(&spec)?;
            let b = us_since(t);
            let t = Instant::now();
            hal(&mut seq)?;
            let c = us_since(t);
            if round * 100 >= warm {
                typed.push(a);
                runtime.push(b);
                hal_t.push(c);
            }
        }
    }
    // SAFETY: every submission naming the markers completed.
    unsafe { mem.free(&markers) };
    println!("omega.clock_read_ns {:.1}", clock_read_ns());
    println!("omega.layer_typed_p50_us {:.2}", percentile(&mut typed, 0.5));
    println!("omega.layer_runtime_p50_us {:.2}", percentile(&mut runtime, 0.5));
    println!("omega.layer_hal_p50_us {:.2}", percentile(&mut hal_t, 0.5));
    Ok(gpu)
}

/// CPU time this thread has used, seconds (getrusage RUSAGE_THREAD).
fn thread_cpu_s() -> f64 {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a writable rusage; RUSAGE_THREAD asks for the calling thread's own figures.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    assert_eq!(rc, 0, "getrusage: {}", std::io::Error::last_os_error());
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Allocation + free at each size, device-only and data buffers. A size the device refuses is reported
/// on a `#` line and the others still run.
fn alloc_free<'s>(s: &'s omega::Scope<'s>, quick: bool) {
    let sizes: &[(&str, usize, usize)] = &[
        ("4b", 4, 2000),
        ("64k", 64 << 10, 2000),
        ("1m", 1 << 20, 1000),
        ("64m", 64 << 20, 100),
        ("1g", 1 << 30, 20),
        ("16g", 16 << 30, 5),
        ("64g", 64 << 30, 3),
    ];
    for &(name, bytes, iters) in sizes {
        if quick && bytes > 64 << 20 {
            println!("# alloc_free_{name}: left out in --quick (the simulator's memory is 4 GiB)");
            continue;
        }
        let iters = if quick { iters.min(20) } else { iters };
        for device in [true, false] {
            let mut lat = Vec::with_capacity(iters);
            let mut failed = None;
            for i in 0..iters + iters / 10 + 1 {
                let t = Instant::now();
                let r = if device { s.alloc_device::<u8>(bytes).map(drop) } else { s.alloc::<u8>(bytes).map(drop) };
                let dt = t.elapsed().as_secs_f64() * 1e6;
                if let Err(e) = r {
                    failed = Some(e);
                    break;
                }
                if i > iters / 10 {
                    lat.push(dt);
                }
            }
            let metric = if device { format!("alloc_free_{name}_us") } else { format!("alloc_free_data_{name}_us") };
            match failed {
                Some(e) => println!("# {metric}: {e}"),
                None => println!("omega.{metric} {:.2}", percentile(&mut lat, 0.5)),
            }
        }
    }
}

fn main() -> Result<(), Error> {
    let quick = std::env::args().any(|a| a == "--quick");
    let (warm, iters, big) = if quick { (10, 200, 64usize << 20) } else { (1_000, 10_000, 1usize << 30) };
    let dev = omega::lock().open().map_err(|e| e.error)?;
    let info = dev.device();
    println!(
        "# omega gpu_bench platform={} device=\"{}\" driver={} quick={quick}",
        dev.platform(),
        info.name,
        info.driver_version
    );
    if common::is_sim(dev.platform()) {
        println!("# platform sim: every time below is host time spent driving the simulator, not a GPU's");
    }
    let r = dev.scope(|s, gpu| -> Result<(), Error> {
        let k = s.load("empty")?;
        let launch = Launch::new(&k).spin_us(100_000).timeout_ms(5_000);
        let mut gpu = gpu;
        for _ in 0..warm {
            gpu = gpu.launch(&launch)?.gpu;
        }
        let mut rt = Vec::with_capacity(iters);
        for _ in 0..iters {
            let t = Instant::now();
            gpu = gpu.launch(&launch)?.gpu;
            rt.push(us_since(t));
        }
        println!("omega.roundtrip_p10_us {:.2}", percentile(&mut rt, 0.10));
        println!("omega.roundtrip_p50_us {:.2}", percentile(&mut rt, 0.50));
        println!("omega.roundtrip_p99_us {:.2}", percentile(&mut rt, 0.99));
        gpu = layers(&k, gpu, &launch, warm, iters)?;

        // Per-launch cost inside one command list: 1000 dependent launches (a barrier before each, the
        // CUDA graph's chain) and 1000 independent ones, one submission each, best of 20 after warm-up.
        for (name, independent) in
            [("cmdlist_1000_dependent_per_launch_us", false), ("cmdlist_1000_independent_per_launch_us", true)]
        {
            let mut list = s.cmdlist()?;
            for i in 0..1000 {
                if independent && i > 0 {
                    list.add_independent(&launch)?;
                } else {
                    list.add(&launch)?;
                }
            }
            let mut per = Vec::new();
            for rep in 0..(if quick { 5 } else { 23 }) {
                let t = Instant::now();
                gpu = gpu.submit(&mut list).map_err(Error::from)?.gpu;
                if rep >= 3 {
                    per.push(us_since(t) / 1000.0);
                }
            }
            println!("omega.{name} {:.3}", percentile(&mut per, 0.5));
        }

        let mut m = s.alloc::<u8>(big)?;
        let t = Instant::now();
        m.fill(0x5a)?;
        println!("# {} MiB fill + first sync to GPU: {:.1} ms", big >> 20, t.elapsed().as_secs_f64() * 1e3);
        for (name, to_gpu) in [("to_gpu", true), ("to_cpu", false)] {
            let mut best = f64::MAX;
            let mut each = Vec::new();
            for _ in 0..5 {
                let t = Instant::now();
                if to_gpu {
                    omega::session::runtime().sync_to_gpu(m.raw())?;
                } else {
                    omega::session::runtime().sync_to_cpu(m.raw())?;
                }
                let dt = t.elapsed().as_secs_f64();
                best = best.min(dt);
                each.push(format!("{:.1}", big as f64 / dt / 1e9));
            }
            println!("# sync {name} each copy, GB/s: {}", each.join(" "));
            println!("omega.sync_{}_{}_gbps {:.2}", if quick { "64m" } else { "1g" }, name, big as f64 / best / 1e9);
        }
        drop(m);

        // Device-only buffers: write and read through the platform's staging.
        let mut d = s.alloc_device::<u8>(big)?;
        let host = vec![0x3cu8; big];
        let mut back = vec![0u8; big];
        for (name, write) in [("write", true), ("read", false)] {
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = Instant::now();
                if write {
                    d.write(&host)?;
                } else {
                    d.read(&mut back)?;
                }
                best = best.min(t.elapsed().as_secs_f64());
            }
            println!("omega.devonly_{name}_{}_gbps {:.2}", if quick { "64m" } else { "1g" }, big as f64 / best / 1e9);
        }
        if back != host {
            return Err(Error::Setting { stage: Stage::Bench, detail: omega::SettingError::ReadBackWrong });
        }
        drop((d, host, back));
        let mut d = s.alloc_device::<u8>(4096)?;
        let mut page = [7u8; 4096];
        for (name, write) in [("write", true), ("read", false)] {
            let mut lat = Vec::with_capacity(iters);
            for i in 0..iters + warm {
                let t = Instant::now();
                if write {
                    d.write(&page)?;
                } else {
                    d.read(&mut page)?;
                }
                if i >= warm {
                    lat.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
            println!("omega.devonly_{name}_4k_p50_us {:.2}", percentile(&mut lat, 0.50));
        }
        drop(d);

        alloc_free(s, quick);

        // The default wait: no spin window in the launch or the process.
        omega::session::runtime().set_spin_us(0)?;
        let plain = Launch::new(&k).timeout_ms(5_000);
        let mut lat = Vec::with_capacity(iters);
        for i in 0..iters + warm {
            let t = Instant::now();
            gpu = gpu.launch(&plain)?.gpu;
            if i >= warm {
                lat.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        println!("omega.default_wait_roundtrip_p10_us {:.2}", percentile(&mut lat, 0.10));
        println!("omega.default_wait_roundtrip_p50_us {:.2}", percentile(&mut lat, 0.50));
        println!("omega.default_wait_roundtrip_p99_us {:.2}", percentile(&mut lat, 0.99));
        let ts = s.load("timestamps")?;
        let mut stamps = s.alloc::<u64>(2)?;
        stamps.fill(0)?;
        let long = Launch::new(&ts).timeout_ms(5_000).arg(&stamps).arg(100_000_000u64);
        let mut pct = Vec::new();
        for _ in 0..5 {
            let (cpu0, t) = (thread_cpu_s(), Instant::now());
            gpu = gpu.launch(&long)?.gpu;
            let (wall, cpu) = (t.elapsed().as_secs_f64(), thread_cpu_s() - cpu0);
            println!("# 100 ms kernel: waited {:.1} ms, {:.3} ms of CPU", wall * 1e3, cpu * 1e3);
            pct.push(cpu / wall * 100.0);
        }
        println!("omega.wait_100ms_cpu_pct {:.2}", percentile(&mut pct, 0.5));

        let small = s.alloc::<u8>(4096)?;
        for (name, to_gpu) in [("to_gpu", true), ("to_cpu", false)] {
            let mut lat = Vec::with_capacity(iters);
            for i in 0..iters + warm {
                let t = Instant::now();
                if to_gpu {
                    omega::session::runtime().sync_to_gpu(small.raw())?;
                } else {
                    omega::session::runtime().sync_to_cpu(small.raw())?;
                }
                if i >= warm {
                    lat.push(us_since(t));
                }
            }
            println!("omega.sync_4k_{name}_p50_us {:.2}", percentile(&mut lat, 0.50));
        }

        // What hello_gpu prints: the process's first vector_add (a fresh load) on fresh 4 MiB buffers,
        // submit to completion, beside CUDA's first launch of the same PTX.
        {
            let n = 1usize << 20;
            let a = s.alloc_from(&vec![1.0f32; n])?;
            let b = s.alloc_from(&vec![2.0f32; n])?;
            let c = s.alloc::<f32>(n)?;
            let va = s.load("vector_add")?;
            let l = Launch::new(&va)
                .grid([(n / 256) as u32, 1, 1])
                .block([256, 1, 1])
                .timeout_ms(2_000)
                .arg(&a)
                .arg(&b)
                .arg(&c)
                .arg(n as u32);
            let done = gpu.launch(&l)?;
            println!("omega.hello_vector_add_us {:.2}", done.elapsed_ns as f64 / 1e3);
            gpu = done.gpu;
        }

        // A bandwidth kernel on Omega's device-only buffers: scale_copy over `big` bytes (one read and one
        // write per element), 8 blocks of 256 per SM, best of 20 launches after 3, beside the same PTX
        // under CUDA.
        {
            let n = big / 4;
            let src = s.alloc_device::<f32>(n)?;
            let dst = s.alloc_device::<f32>(n)?;
            let k = s.load("scale_copy")?;
            let l = Launch::new(&k)
                .grid([info.sm_count * 8, 1, 1])
                .block([256, 1, 1])
                .timeout_ms(5_000)
                .arg(&src)
                .arg(&dst)
                .arg(1.0f32)
                .arg(n as u32);
            let mut best = f64::MAX;
            for rep in 0..23 {
                let t = Instant::now();
                gpu = gpu.launch(&l)?.gpu;
                if rep >= 3 {
                    best = best.min(t.elapsed().as_secs_f64());
                }
            }
            let size = if quick { "64m" } else { "1g" };
            println!("omega.bandwidth_scale_copy_{size}_gbps {:.1}", 8.0 * n as f64 / best / 1e9);
        }
        Ok(())
    });
    r.value()
}
