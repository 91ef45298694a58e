//! Omega's side of the GPU benchmarks (the CUDA side is benches/cuda/baseline.cu, run in the same job).
//!
//! Prints one `omega.<metric> <value>` line per figure, after a header naming the platform and device:
//! - `roundtrip_p10/p50/p99_us`: an empty kernel, launch to both markers observed, 10,000 iterations
//!   after 1,000 warm-up, with a spin window (no sleep-poll);
//! - `sync_1g_to_gpu_gbps`, `sync_1g_to_cpu_gbps`: a 1 GiB buffer made visible each way (best of 5);
//! - `sync_4k_to_gpu_p50_us`, `sync_4k_to_cpu_p50_us`: 4 KiB syncs, 10,000 each.
//!
//! `gpu_bench [--quick]` (quick: fewer iterations, for a smoke run on sim).

use std::time::Instant;

use omega::{Error, Launch};

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p).round() as usize]
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
            rt.push(t.elapsed().as_secs_f64() * 1e6);
        }
        println!("omega.roundtrip_p10_us {:.2}", percentile(&mut rt, 0.10));
        println!("omega.roundtrip_p50_us {:.2}", percentile(&mut rt, 0.50));
        println!("omega.roundtrip_p99_us {:.2}", percentile(&mut rt, 0.99));

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
                    per.push(t.elapsed().as_secs_f64() * 1e6 / 1000.0);
                }
            }
            println!("omega.{name} {:.3}", percentile(&mut per, 0.5));
        }

        let mut m = s.alloc::<u8>(big)?;
        m.fill(0x5a)?;
        for (name, to_gpu) in [("to_gpu", true), ("to_cpu", false)] {
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = Instant::now();
                if to_gpu {
                    omega::session::runtime().sync_to_gpu(m.raw())?;
                } else {
                    omega::session::runtime().sync_to_cpu(m.raw())?;
                }
                best = best.min(t.elapsed().as_secs_f64());
            }
            println!("omega.sync_{}_{}_gbps {:.2}", if quick { "64m" } else { "1g" }, name, big as f64 / best / 1e9);
        }
        drop(m);

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
                    lat.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
            println!("omega.sync_4k_{name}_p50_us {:.2}", percentile(&mut lat, 0.50));
        }
        Ok(())
    });
    r.value()
}
