//! Performance probe of the `nvidia` platform at the HAL level: what each encoding choice costs on the
//! device, measured in one process so the variants share the GPU's state.
//!
//! ```text
//! nv_probe [DIR] [copies|launch|chain|tma|cluster|smem|all]   (DIR holds the cubins, default .gpu;
//!                                                              default all)
//! ```
//!
//! - `copies`: the 1 GiB copy timeline — every copy timed on its own, on one buffer, again after two
//!   seconds idle, then on a fresh buffer — to tell a per-buffer warm-up from a GPU-wide one.
//! - `launch`: the empty-kernel round trip per variant of `LaunchTuning`, split into the host's submit
//!   call, marker 0 seen and marker 1 seen (`m1qmd`, `m1qmd_sysmembar`: marker 1 as the last QMD's
//!   release 2; `m1acquire`: a host release after an acquire of marker 0, no wait-for-idle); and the
//!   semaphore-only round trip with and without the wait-for-idle (`semaphore_only_nowfi`).
//! - `chain`: 1000 launches in one submission per variant (stamps none / system memory / video memory,
//!   dependent action and prefetch, membar, idle releases, independent; `pdl_*`: programmatic dependent
//!   launch on the QMD chain; `sem_*`: a semaphore per launch acquired by the host; `*_m1qmd`: marker 1
//!   from the last QMD), host per-launch time and the
//!   GPU's own per-launch time from the stamps; plus, per tuning that could weaken ordering, a check that
//!   a resubmitted (prepared) ordering submission still never overlaps and releases every new sequence,
//!   and (with `scale_copy.cubin` in DIR) that each launch of a 64-launch chain reads what the one
//!   before it wrote.
//!
//! - `tma`, `cluster`, `smem`: the Hopper launch features the GEMM kernels need, each a PASS/FAIL check
//!   against a host reference on fresh random inputs, the output poisoned first (cubins from
//!   kernels/cuda/probes/, built by tools/gpu/build.sh): a TMA tile load through a descriptor built on the
//!   device, handed over as a `__grid_constant__` parameter (constant bank 0's parameter address) and
//!   through global memory, also with the prepared encodings off so the parameter area is reused; cluster
//!   launches (`__cluster_dims__` and QMD-only) with `%cluster_ctarank`, `%clusterid` and distributed
//!   shared memory; a block with 227 KiB of dynamic shared memory.
//!
//! Times are read with a TSC timer calibrated against `Instant` (so a costly `clock_gettime` in a VM does
//! not inflate sub-microsecond phases). Prints `probe.<metric> <value>` lines.

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("nv_probe needs Linux and NVIDIA's open kernel driver");
}

#[cfg(target_os = "linux")]
fn main() {
    linux::main();
}

#[cfg(target_os = "linux")]
mod harness;

#[cfg(target_os = "linux")]
mod linux {
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    use omega_hal::nvidia::qmd::DependentAction;
    use omega_hal::nvidia::{Barrier, ChainMode, Marker1, NvidiaConfig};
    use omega_hal::tma::{encode_tiled, TiledSpec, TmaElem, TmaSwizzle};
    use omega_hal::{Allocation, BufferKind, CachePolicy, LaunchDesc, MarkerSlot, Order, Platform, Rights};

    use super::harness::{self, pct, Gpu, Kernel, Markers, Report, CODE, DATA, POLLED};

    /// TSC ticks to microseconds.
    struct Timer {
        us_per_tick: f64,
    }

    impl Timer {
        fn calibrate() -> Timer {
            let (t0, c0) = (Instant::now(), tsc());
            std::thread::sleep(Duration::from_millis(50));
            let (dt, dc) = (t0.elapsed(), tsc() - c0);
            Timer { us_per_tick: dt.as_secs_f64() * 1e6 / dc as f64 }
        }
        fn us(&self, ticks: u64) -> f64 {
            ticks as f64 * self.us_per_tick
        }
    }

    fn tsc() -> u64 {
        // SAFETY: RDTSC has no preconditions on x86-64.
        #[allow(unused_unsafe)]
        unsafe {
            core::arch::x86_64::_rdtsc()
        }
    }

    struct Probe {
        gpu: Gpu,
        timer: Timer,
        markers: Markers,
        report: Report,
    }

    impl Probe {
        /// How long allocating and freeing one device-only buffer takes at each size (the figure to
        /// read beside an `strace -T` of the same run: which driver call the time goes to).
        fn alloc_times(&mut self) {
            for shift in [20u32, 26, 30, 34] {
                let bytes = 1u64 << shift;
                for _ in 0..2 {
                    let t0 = std::time::Instant::now();
                    let a = self.alloc(bytes, Rights::GPU_READ | Rights::GPU_WRITE, BufferKind::Data);
                    let t1 = std::time::Instant::now();
                    self.gpu.free(&a);
                    let t2 = std::time::Instant::now();
                    println!(
                        "# alloc {} MiB device-only: alloc {:.1} us, free {:.1} us",
                        bytes >> 20,
                        (t1 - t0).as_secs_f64() * 1e6,
                        (t2 - t1).as_secs_f64() * 1e6
                    );
                }
            }
        }

        // A probe stops at the first allocation, sync or load that fails: every later figure would be
        // measured on a broken device.
        fn alloc(&self, bytes: u64, rights: Rights, kind: BufferKind) -> Allocation {
            self.gpu.alloc(bytes, rights, CachePolicy::Uncached, kind).expect("alloc")
        }
        fn to_gpu(&self, a: &Allocation, len: u64) {
            self.gpu.to_gpu(a, len).expect("sync to GPU")
        }
        fn to_cpu(&self, a: &Allocation, len: u64) {
            self.gpu.to_cpu(a, len).expect("sync to CPU")
        }
        fn load(&self, name: &str) -> Kernel {
            self.gpu.load(name).expect("load")
        }

        fn tune(&self, f: impl FnOnce(&mut NvidiaConfig)) {
            let mut c = NvidiaConfig::default();
            f(&mut c);
            self.gpu.nv.set_config(c);
        }

        /// Submits and waits for marker 0 then marker 1; returns (submit call, marker 0 seen, marker 1 seen)
        /// in ticks from just before the submit.
        fn run(&mut self, launches: &[LaunchDesc<'_>], stamps: Option<MarkerSlot>) -> Result<[u64; 3], String> {
            let s = self.markers.submission(launches, stamps);
            let (m0, m1, seq) = (s.markers[0], s.markers[1], s.sequence);
            let poll = self.gpu.nv.poll().unwrap();
            let t0 = tsc();
            self.gpu.submit(&s)?;
            let t1 = tsc();
            let mut seen = [0u64; 2];
            let deadline = Instant::now() + Duration::from_secs(3);
            for (i, m) in [m0, m1].iter().enumerate() {
                let mut n = 0u32;
                loop {
                    // SAFETY: the markers live in the HOST_POLLED marker buffer.
                    if unsafe { poll.poll(m) }.map_err(|e| e.to_string())? == seq {
                        seen[i] = tsc();
                        break;
                    }
                    n = n.wrapping_add(1);
                    if n.is_multiple_of(4096) {
                        if let Some(f) = poll.channel_fault() {
                            return Err(format!("channel fault: {f}"));
                        }
                        if Instant::now() > deadline {
                            return Err(format!("marker {i} not released in 3 s"));
                        }
                    }
                    std::hint::spin_loop();
                }
            }
            Ok([t1 - t0, seen[0] - t0, seen[1] - t0])
        }

        // ----- copies --------------------------------------------------------------------------------

        fn copies(&mut self) {
            println!("# copies: {}", self.gpu.nv.copy_engine());
            type Tune = fn(&mut NvidiaConfig);
            let variants: [(&str, Tune); 3] =
                [("grce", |_| {}), ("async", |c| c.async_copy = true), ("grce_huge", |c| c.huge_staging = true)];
            for (i, (tag, f)) in variants.into_iter().enumerate() {
                if i > 0 {
                    std::thread::sleep(Duration::from_secs(2));
                }
                self.tune(f);
                self.copy_timeline(tag);
            }
            self.tune(|_| {});
            let small = self.alloc(4096, DATA, BufferKind::Data);
            for (name, async_copy, bar1) in [("grce", false, true), ("grce_ce", false, false)] {
                self.tune(|c| {
                    c.async_copy = async_copy;
                    c.bar1_sync_max = if bar1 { 64 << 10 } else { 0 };
                });
                for (dir, to_gpu) in [("to_gpu", true), ("to_cpu", false)] {
                    if !bar1 && !to_gpu {
                        continue;
                    }
                    let mut v = Vec::new();
                    for i in 0..6000 {
                        let t = tsc();
                        if to_gpu {
                            self.to_gpu(&small, 4096);
                        } else {
                            self.to_cpu(&small, 4096);
                        }
                        if i >= 1000 {
                            v.push(self.timer.us(tsc() - t));
                        }
                    }
                    self.report.metric(&format!("sync4k_{dir}_{name}_p50_us"), pct(&mut v, 0.5));
                }
            }
            self.tune(|_| {});
            self.gpu.free(&small);
        }

        fn copy_timeline(&mut self, tag: &str) {
            let big = 1u64 << 30;
            let gbps = |t: Instant| big as f64 / t.elapsed().as_secs_f64() / 1e9;
            let t = Instant::now();
            let x = self.alloc(big, DATA, BufferKind::Data);
            self.report.metric(&format!("copy_{tag}_alloc_1g_ms"), t.elapsed().as_secs_f64() * 1e3);
            self.gpu.bytes(&x).fill(0x3c);
            let mut line = Vec::new();
            for _ in 0..6 {
                let t = Instant::now();
                self.to_gpu(&x, big);
                line.push(gbps(t));
            }
            // The copies must move the bytes: poison the staging, bring them back, compare.
            self.gpu.bytes(&x).fill(0xa5);
            let mut back = Vec::new();
            for _ in 0..3 {
                let t = Instant::now();
                self.to_cpu(&x, big);
                back.push(gbps(t));
            }
            let v = self.gpu.bytes(&x);
            let intact = v.iter().all(|&b| b == 0x3c);
            println!("probe.copy_{tag}_to_gpu {}", fmt_list(&line));
            println!("probe.copy_{tag}_to_cpu {} (bytes back intact: {intact})", fmt_list(&back));
            if !intact {
                self.report.failures += 1;
            }
            self.gpu.free(&x);
        }

        /// What write-combined stores to video memory through BAR1 and the store fence cost here.
        fn wc_costs(&mut self) {
            let buf = self.alloc(1 << 16, CODE, BufferKind::Code);
            let words = [0x1234_5678u32; 64];
            let fence = || {
                // SAFETY: SFENCE has no preconditions.
                unsafe { core::arch::x86_64::_mm_sfence() }
            };
            for (name, n) in [("sfence_only", 0usize), ("wc8_sfence", 2), ("wc64_sfence", 16), ("wc256_sfence", 64)] {
                let mut v = Vec::new();
                for i in 0..20_000 {
                    let t = tsc();
                    // SAFETY: inside the 64 KiB write-combined view; rotating offsets, 256-byte aligned.
                    unsafe {
                        let dst = buf.cpu.add((i % 128) * 256) as *mut u32;
                        std::ptr::copy_nonoverlapping(words.as_ptr(), dst, n);
                    }
                    fence();
                    if i >= 2000 {
                        v.push(self.timer.us(tsc() - t) * 1e3);
                    }
                }
                self.report.metric(&format!("{name}_p50_ns"), pct(&mut v, 0.5));
            }
            self.gpu.free(&buf);
        }

        // ----- launch round trip ---------------------------------------------------------------------

        fn launch(&mut self, k: &Kernel) {
            type Tune = fn(&mut NvidiaConfig);
            let variants: [(&str, Tune); 19] = [
                ("default", |_| {}),
                ("inv_sdata_const", |c| c.tuning.qmd_invalidate = 0x28),
                ("inv_none", |c| c.tuning.qmd_invalidate = 0),
                ("not_prepared", |c| c.tuning.prepared = false),
                ("invalidate_each", |c| c.tuning.invalidate_every_submission = true),
                ("pcas9", |c| c.tuning.pcas_action = 9),
                ("membar0", |c| c.tuning.last_cwd_membar = 0),
                ("membar3", |c| c.tuning.last_cwd_membar = 3),
                ("membar3_relsys", |c| {
                    c.tuning.last_cwd_membar = 3;
                    c.tuning.release_sysmembar = true;
                }),
                ("membar0_relsys", |c| {
                    c.tuning.last_cwd_membar = 0;
                    c.tuning.release_sysmembar = true;
                }),
                ("m1compute", |c| c.tuning.marker1 = Marker1::ComputeReport),
                ("m1compute_membar3_relsys", |c| {
                    c.tuning.marker1 = Marker1::ComputeReport;
                    c.tuning.last_cwd_membar = 3;
                    c.tuning.release_sysmembar = true;
                }),
                // Marker 1 without the host's wait-for-idle: the last QMD's release 2 (with and without a
                // system-wide barrier in front of it), or a host release after an acquire of marker 0.
                ("m1qmd", |c| c.tuning.marker1 = Marker1::QmdRelease),
                ("m1qmd_sysmembar", |c| {
                    c.tuning.marker1 = Marker1::QmdRelease;
                    c.tuning.marker1_sysmembar = true;
                }),
                ("m1acquire", |c| c.tuning.marker1 = Marker1::HostAfterAcquire),
                ("default_again", |_| {}),
                ("m1compute_again", |c| c.tuning.marker1 = Marker1::ComputeReport),
                ("m1qmd_again", |c| c.tuning.marker1 = Marker1::QmdRelease),
                ("m1acquire_again", |c| c.tuning.marker1 = Marker1::HostAfterAcquire),
            ];
            let args = [0u32];
            for (name, f) in variants {
                self.tune(f);
                let l = k.launch(&args, [1, 1, 1], [1, 1, 1], Order::AfterPrevious);
                let mut ph = [Vec::new(), Vec::new(), Vec::new()];
                for i in 0..3300 {
                    match self.run(&[l], None) {
                        Ok(t) if i >= 300 => {
                            for p in 0..3 {
                                ph[p].push(self.timer.us(t[p]));
                            }
                        }
                        Ok(_) => {}
                        Err(e) => {
                            self.report.fail(&format!("launch {name}"), e);
                            break;
                        }
                    }
                }
                if ph[2].is_empty() {
                    continue;
                }
                self.report.metric(&format!("rt_{name}_submit_p50_us"), pct(&mut ph[0], 0.5));
                self.report.metric(&format!("rt_{name}_m0_p50_us"), pct(&mut ph[1], 0.5));
                self.report.metric(&format!("rt_{name}_m1_p10_us"), pct(&mut ph[2], 0.1));
                self.report.metric(&format!("rt_{name}_m1_p50_us"), pct(&mut ph[2], 0.5));
                self.report.metric(&format!("rt_{name}_m1_p99_us"), pct(&mut ph[2], 0.99));
            }
            self.tune(|_| {});
            let (hits, misses) = self.gpu.nv.prepared_stats();
            self.report.metric("prepared_hits", hits as f64);
            self.report.metric("prepared_misses", misses as f64);
            // Semaphore-only: no kernel, the idle releases alone; then the same two releases without the
            // wait-for-idle (what every non-host marker-1 variant sends when nothing launches): the floor
            // without the WFI.
            let skip = LaunchDesc { skip: true, ..k.launch(&args, [1; 3], [1; 3], Order::AfterPrevious) };
            type Tune2 = fn(&mut NvidiaConfig);
            let floors: [(&str, Tune2); 2] =
                [("semaphore_only", |_| {}), ("semaphore_only_nowfi", |c| c.tuning.marker1 = Marker1::QmdRelease)];
            for (name, f) in floors {
                self.tune(f);
                let mut v = Vec::new();
                for i in 0..3300 {
                    match self.run(&[skip], None) {
                        Ok(t) if i >= 300 => v.push(self.timer.us(t[2])),
                        Ok(_) => {}
                        Err(e) => {
                            self.report.fail(name, e);
                            break;
                        }
                    }
                }
                if !v.is_empty() {
                    self.report.metric(&format!("rt_{name}_p10_us"), pct(&mut v, 0.1));
                    self.report.metric(&format!("rt_{name}_p50_us"), pct(&mut v, 0.5));
                    self.report.metric(&format!("rt_{name}_p99_us"), pct(&mut v, 0.99));
                }
            }
            self.tune(|_| {});
        }

        // ----- chains ------------------------------------------------------------------------------------

        fn chain(&mut self, k: &Kernel, ts: &Kernel, sc: Option<&Kernel>) {
            let n = 1000usize;
            let sys_stamps = self.alloc(n as u64 * 16, POLLED, BufferKind::Queue);
            let vid_stamps = self.alloc(n as u64 * 16, DATA, BufferKind::Data);
            let sys = MarkerSlot { va: sys_stamps.va, cpu: sys_stamps.cpu };
            let vid = MarkerSlot { va: vid_stamps.va, cpu: std::ptr::null_mut() };
            type Tune = fn(&mut NvidiaConfig);
            #[derive(Clone, Copy, PartialEq)]
            enum St {
                None,
                Sys,
                Vid,
            }
            fn sysmembar(c: &mut NvidiaConfig, chasing: bool) {
                c.tuning.cwd_membar = 1;
                c.tuning.membar_task_chasing = chasing;
            }
            fn membar3(c: &mut NvidiaConfig, chasing: bool) {
                c.tuning.cwd_membar = 3;
                c.tuning.membar_task_chasing = chasing;
            }
            fn pdl(c: &mut NvidiaConfig) {
                c.tuning.chain = ChainMode::Programmatic;
            }
            fn sem(c: &mut NvidiaConfig) {
                c.tuning.chain = ChainMode::Semaphore;
            }
            let variants: [(&str, Tune, St, Order); 41] = [
                // The chain's block-exit barrier, each setting spelled out (the default is L1_MEMBAR with
                // task chasing), measured next to each other.
                ("dep_sysstamps_base", |_| {}, St::Sys, Order::AfterPrevious),
                ("dep_sysstamps_sysmembar", |c| sysmembar(c, false), St::Sys, Order::AfterPrevious),
                ("dep_sysstamps_sysmembar_chasing", |c| sysmembar(c, true), St::Sys, Order::AfterPrevious),
                ("dep_sysstamps_membar3_nochasing", |c| membar3(c, false), St::Sys, Order::AfterPrevious),
                ("dep_sysstamps_membar3_chasing", |c| membar3(c, true), St::Sys, Order::AfterPrevious),
                (
                    "dep_sysstamps_sysmembar_latch",
                    |c| {
                        sysmembar(c, false);
                        c.tuning.arrive_at_latch = true;
                    },
                    St::Sys,
                    Order::AfterPrevious,
                ),
                ("dep_sysstamps_latch", |c| c.tuning.arrive_at_latch = true, St::Sys, Order::AfterPrevious),
                ("dep_sysstamps_inv_sdata_const", |c| c.tuning.qmd_invalidate = 0x28, St::Sys, Order::AfterPrevious),
                (
                    "dep_sysstamps_inv_tdata_sdata_const",
                    |c| c.tuning.qmd_invalidate = 0x2c,
                    St::Sys,
                    Order::AfterPrevious,
                ),
                ("dep_sysstamps_inv_none", |c| c.tuning.qmd_invalidate = 0, St::Sys, Order::AfterPrevious),
                ("dep_nostamps", |_| {}, St::None, Order::AfterPrevious),
                ("dep_sysstamps", |_| {}, St::Sys, Order::AfterPrevious),
                ("dep_vidstamps", |_| {}, St::Vid, Order::AfterPrevious),
                ("dep_nostamps_not_prepared", |c| c.tuning.prepared = false, St::None, Order::AfterPrevious),
                ("dep_sysstamps_not_prepared", |c| c.tuning.prepared = false, St::Sys, Order::AfterPrevious),
                (
                    "dep_nostamps_schedule",
                    |c| c.tuning.chain_action = DependentAction::Schedule,
                    St::None,
                    Order::AfterPrevious,
                ),
                ("dep_nostamps_noprefetch", |c| c.tuning.chain_prefetch = false, St::None, Order::AfterPrevious),
                ("dep_nostamps_membar0", |c| c.tuning.cwd_membar = 0, St::None, Order::AfterPrevious),
                ("dep_vidstamps_membar0", |c| c.tuning.cwd_membar = 0, St::Vid, Order::AfterPrevious),
                ("dep_nostamps_membar3", |c| c.tuning.cwd_membar = 3, St::None, Order::AfterPrevious),
                ("dep_sysstamps_membar3", |c| c.tuning.cwd_membar = 3, St::Sys, Order::AfterPrevious),
                (
                    "dep_sysstamps_membar3_all_relsys",
                    |c| {
                        c.tuning.cwd_membar = 3;
                        c.tuning.last_cwd_membar = 3;
                        c.tuning.release_sysmembar = true;
                    },
                    St::Sys,
                    Order::AfterPrevious,
                ),
                (
                    "dep_sysstamps_membar3_m1compute",
                    |c| {
                        c.tuning.cwd_membar = 3;
                        c.tuning.marker1 = Marker1::ComputeReport;
                    },
                    St::Sys,
                    Order::AfterPrevious,
                ),
                (
                    "dep_sysstamps_membar0_all",
                    |c| {
                        c.tuning.cwd_membar = 0;
                        c.tuning.last_cwd_membar = 0;
                    },
                    St::Sys,
                    Order::AfterPrevious,
                ),
                ("indep_sysstamps_membar3", |c| c.tuning.cwd_membar = 3, St::Sys, Order::Independent),
                ("dep_nostamps_idlerelease", |c| c.barrier = Barrier::IdleRelease, St::None, Order::AfterPrevious),
                ("indep_nostamps", |_| {}, St::None, Order::Independent),
                ("indep_sysstamps", |_| {}, St::Sys, Order::Independent),
                ("indep_nostamps_not_prepared", |c| c.tuning.prepared = false, St::None, Order::Independent),
                // Programmatic dependent launch on top of the QMD chain (the kernels start with
                // griddepcontrol.wait): pre-exit at the last CTA's dispatch or at the CTAs' exit, two
                // latches or one, and without the block-exit barrier (the wait's own visibility promise).
                ("pdl_sysstamps", pdl, St::Sys, Order::AfterPrevious),
                ("pdl_nostamps", pdl, St::None, Order::AfterPrevious),
                (
                    "pdl_nostamps_atexit",
                    |c| {
                        pdl(c);
                        c.tuning.pdl_at_last_cta_launch = false;
                    },
                    St::None,
                    Order::AfterPrevious,
                ),
                (
                    "pdl_nostamps_ids1",
                    |c| {
                        pdl(c);
                        c.tuning.pdl_latch_ids = 1;
                    },
                    St::None,
                    Order::AfterPrevious,
                ),
                (
                    "pdl_sysstamps_membar0",
                    |c| {
                        pdl(c);
                        c.tuning.cwd_membar = 0;
                    },
                    St::Sys,
                    Order::AfterPrevious,
                ),
                // A semaphore per launch, acquired by the host before the next SEND_PCAS, instead of the
                // dependent pointer; with its release behind FE_SYSMEMBAR, with and without the block-exit
                // barrier.
                ("sem_sysstamps", sem, St::Sys, Order::AfterPrevious),
                ("sem_nostamps", sem, St::None, Order::AfterPrevious),
                (
                    "sem_sysstamps_relmembar",
                    |c| {
                        sem(c);
                        c.tuning.chain_release_membar = true;
                    },
                    St::Sys,
                    Order::AfterPrevious,
                ),
                (
                    "sem_sysstamps_membar0_relmembar",
                    |c| {
                        sem(c);
                        c.tuning.cwd_membar = 0;
                        c.tuning.chain_release_membar = true;
                    },
                    St::Sys,
                    Order::AfterPrevious,
                ),
                // The chain's end without the host's idle release.
                ("dep_sysstamps_m1qmd", |c| c.tuning.marker1 = Marker1::QmdRelease, St::Sys, Order::AfterPrevious),
                (
                    "pdl_sysstamps_m1qmd",
                    |c| {
                        pdl(c);
                        c.tuning.marker1 = Marker1::QmdRelease;
                    },
                    St::Sys,
                    Order::AfterPrevious,
                ),
                ("dep_sysstamps_again", |_| {}, St::Sys, Order::AfterPrevious),
            ];
            let args = [0u32];
            for (name, f, st, order) in variants {
                self.tune(f);
                let ls: Vec<LaunchDesc<'_>> = (0..n).map(|_| k.launch(&args, [32, 1, 1], [1, 1, 1], order)).collect();
                let stamps = match st {
                    St::None => None,
                    St::Sys => Some(sys),
                    St::Vid => Some(vid),
                };
                let mut host = Vec::new();
                let mut submit = Vec::new();
                let mut gpu = Vec::new();
                for rep in 0..14 {
                    match self.run(&ls, stamps) {
                        Ok(t) => {
                            if rep >= 2 {
                                host.push(self.timer.us(t[2]) / n as f64);
                                submit.push(self.timer.us(t[0]));
                            }
                        }
                        Err(e) => {
                            self.report.fail(&format!("chain {name}"), e);
                            break;
                        }
                    }
                    if rep >= 2 && st != St::None {
                        let stamp = |i: usize| -> u64 {
                            if st == St::Sys {
                                // SAFETY: inside the stamp buffer.
                                unsafe { (sys_stamps.cpu.add(16 * i + 8) as *const u64).read_volatile() }
                            } else {
                                let v = self.gpu.bytes(&vid_stamps);
                                u64::from_le_bytes(v[16 * i + 8..16 * i + 16].try_into().unwrap())
                            }
                        };
                        if st == St::Vid {
                            self.to_cpu(&vid_stamps, n as u64 * 16);
                        }
                        let (a, b) = (stamp(0), stamp(n - 1));
                        if b > a {
                            gpu.push((b - a) as f64 / 1e3 / (n - 1) as f64);
                        }
                    }
                }
                if host.is_empty() {
                    continue;
                }
                self.report.metric(&format!("chain_{name}_per_launch_us"), pct(&mut host, 0.5));
                self.report.metric(&format!("chain_{name}_submit_us"), pct(&mut submit, 0.5));
                if !gpu.is_empty() {
                    self.report.metric(&format!("chain_{name}_gpu_per_launch_us"), pct(&mut gpu, 0.5));
                }
            }
            self.tune(|_| {});
            self.gpu.free(&sys_stamps);
            self.gpu.free(&vid_stamps);
            type T2 = fn(&mut NvidiaConfig);
            let checks: [(&str, T2); 17] = [
                ("default", |_| {}),
                ("sysmembar", |c| sysmembar(c, false)),
                ("sysmembar_chasing", |c| sysmembar(c, true)),
                ("membar3_nochasing", |c| membar3(c, false)),
                ("latch", |c| c.tuning.arrive_at_latch = true),
                ("membar3_relsys_m1compute", |c| {
                    c.tuning.cwd_membar = 3;
                    c.tuning.last_cwd_membar = 3;
                    c.tuning.release_sysmembar = true;
                    c.tuning.marker1 = Marker1::ComputeReport;
                }),
                ("idlerelease_m1compute", |c| {
                    c.barrier = Barrier::IdleRelease;
                    c.tuning.marker1 = Marker1::ComputeReport;
                }),
                ("m1qmd", |c| c.tuning.marker1 = Marker1::QmdRelease),
                ("m1qmd_sysmembar", |c| {
                    c.tuning.marker1 = Marker1::QmdRelease;
                    c.tuning.marker1_sysmembar = true;
                }),
                ("m1acquire", |c| c.tuning.marker1 = Marker1::HostAfterAcquire),
                ("idlerelease_m1qmd", |c| {
                    c.barrier = Barrier::IdleRelease;
                    c.tuning.marker1 = Marker1::QmdRelease;
                }),
                ("pdl", pdl),
                ("pdl_atexit", |c| {
                    pdl(c);
                    c.tuning.pdl_at_last_cta_launch = false;
                }),
                ("pdl_ids1", |c| {
                    pdl(c);
                    c.tuning.pdl_latch_ids = 1;
                }),
                ("pdl_membar0", |c| {
                    pdl(c);
                    c.tuning.cwd_membar = 0;
                }),
                ("sem", sem),
                ("sem_membar0_relmembar", |c| {
                    sem(c);
                    c.tuning.cwd_membar = 0;
                    c.tuning.chain_release_membar = true;
                }),
            ];
            for (name, f) in checks {
                self.tune(f);
                self.resubmitted_ordering(ts, name);
                self.visibility(ts, name);
                if let Some(sc) = sc {
                    self.chain_data(sc, name);
                }
            }
            self.tune(|_| {});
        }

        /// What launch i writes, launch i + 1 reads: 64 dependent `scale_copy` launches ping-pong 2^20 floats
        /// between two video-memory buffers, in one chained submission, sent three times (the later two from
        /// the prepared encoding); both buffers must equal the same chain computed on the CPU, bit for bit,
        /// each time. Even launches run 528 blocks of 256 threads, odd ones 131 blocks of 1024, so the
        /// grid-stride loops hand each element to another block (and SM) than the one that wrote it: the
        /// first blocks of a launch read what the last blocks of the one before stored just before exit.
        fn chain_data(&mut self, sc: &Kernel, tag: &str) {
            let (n, launches) = (1usize << 20, 64usize);
            let bytes = n as u64 * 4;
            let bufs = [self.alloc(bytes, DATA, BufferKind::Data), self.alloc(bytes, DATA, BufferKind::Data)];
            let mut x = 0x9e37_79b9u32 ^ tag.len() as u32;
            let input: Vec<f32> = (0..n)
                .map(|_| {
                    x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (x >> 8) as f32 / (1 << 16) as f32 - 128.0
                })
                .collect();
            let alphas: Vec<f32> = (0..launches).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
            let mut want = [input.clone(), input.clone()];
            for (i, &a) in alphas.iter().enumerate() {
                want[(i + 1) % 2] = want[i % 2].iter().map(|v| v * a).collect();
            }
            let args: Vec<[u32; 6]> = (0..launches)
                .map(|i| {
                    let (s, d) = (bufs[i % 2].va, bufs[(i + 1) % 2].va);
                    [s as u32, (s >> 32) as u32, d as u32, (d >> 32) as u32, alphas[i].to_bits(), n as u32]
                })
                .collect();
            let ls: Vec<LaunchDesc<'_>> = args
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    let (block, grid) = if i % 2 == 0 { (256, 528) } else { (1024, 131) };
                    sc.launch(a, [block, 1, 1], [grid, 1, 1], Order::AfterPrevious)
                })
                .collect();
            for round in 0..3 {
                let v = self.gpu.bytes(&bufs[0]);
                for (c, f) in v.chunks_exact_mut(4).zip(&input) {
                    c.copy_from_slice(&f.to_le_bytes());
                }
                self.to_gpu(&bufs[0], bytes);
                self.gpu.bytes(&bufs[1]).fill(0xff);
                self.to_gpu(&bufs[1], bytes);
                if let Err(e) = self.run(&ls, None) {
                    self.report.fail(&format!("chain data {tag}"), e);
                    break;
                }
                let mut bad = 0;
                for (b, w) in bufs.iter().zip(&want) {
                    self.to_cpu(b, bytes);
                    let v = self.gpu.bytes(b);
                    bad += v.chunks_exact(4).zip(w).filter(|(c, f)| c != &f.to_le_bytes().as_slice()).count();
                }
                self.report.check(
                    &format!("chain data {tag} round {round}"),
                    bad == 0,
                    format!(
                        "{launches} dependent scale_copy launches, {bad} of {} floats differ from the CPU chain",
                        2 * n
                    ),
                );
            }
            self.gpu.free(&bufs[0]);
            self.gpu.free(&bufs[1]);
        }

        /// A kernel's stores to GPU-uncached system memory are all visible to the CPU once both markers
        /// are: 300 launches of `timestamps` (264 blocks) into a polled buffer zeroed before each.
        fn visibility(&mut self, ts: &Kernel, name: &str) {
            let blocks = 264u32;
            let out = self.alloc(blocks as u64 * 16, POLLED, BufferKind::Queue);
            let args = [out.va as u32, (out.va >> 32) as u32, 0, 0];
            let l = ts.launch(&args, [32, 1, 1], [blocks, 1, 1], Order::AfterPrevious);
            let words = blocks as usize * 2;
            let mut bad = 0;
            let mut m0_late = 0;
            for _ in 0..300 {
                // SAFETY: the polled buffer's CPU view, `words` u64s; nothing is running.
                unsafe { std::ptr::write_bytes(out.cpu, 0, words * 8) };
                match self.run_m1_first(&[l]) {
                    Ok(m0_seen) => m0_late += (!m0_seen) as u32,
                    Err(e) => {
                        self.report.fail(&format!("visibility {name}"), e);
                        break;
                    }
                }
                // SAFETY: as above.
                let zeros =
                    (0..words).filter(|&i| unsafe { (out.cpu as *const u64).add(i).read_volatile() } == 0).count();
                bad += (zeros > 0) as u32;
            }
            self.report.check(
                &format!("visibility {name}"),
                bad == 0 && m0_late == 0,
                format!("300 launches, {bad} with stores not yet visible at marker 1, {m0_late} with marker 1 before marker 0"),
            );
            self.gpu.free(&out);
        }

        /// Submits and waits for marker 1 first; returns whether marker 0 was already released then.
        fn run_m1_first(&mut self, launches: &[LaunchDesc<'_>]) -> Result<bool, String> {
            let s = self.markers.submission(launches, None);
            let (m0, m1, seq) = (s.markers[0], s.markers[1], s.sequence);
            let poll = self.gpu.nv.poll().unwrap();
            self.gpu.submit(&s)?;
            let deadline = Instant::now() + Duration::from_secs(3);
            // SAFETY: the markers live in the HOST_POLLED marker buffer.
            while unsafe { poll.poll(&m1) }.map_err(|e| e.to_string())? != seq {
                if Instant::now() > deadline {
                    return Err("marker 1 not released in 3 s".into());
                }
                std::hint::spin_loop();
            }
            // SAFETY: as above.
            let m0_seen = unsafe { poll.poll(&m0) }.map_err(|e| e.to_string())? == seq;
            Ok(m0_seen)
        }

        /// The same six dependent launches of `timestamps` (264 blocks x 20 us) submitted three times: the
        /// second and third are sent from the prepared encoding. Each must show no overlap, and every stamp
        /// and both markers must carry that submission's sequence.
        fn resubmitted_ordering(&mut self, ts: &Kernel, tag: &str) {
            let (launches, blocks) = (6usize, 264u32);
            let per = blocks as u64 * 16;
            let buf = self.alloc(per * launches as u64, DATA, BufferKind::Data);
            let stamps = self.alloc(launches as u64 * 16, POLLED, BufferKind::Queue);
            let args: Vec<Vec<u32>> = (0..launches)
                .map(|i| {
                    let va = buf.va + per * i as u64;
                    vec![va as u32, (va >> 32) as u32, 20_000, 0]
                })
                .collect();
            let ls: Vec<LaunchDesc<'_>> =
                args.iter().map(|a| ts.launch(a, [32, 1, 1], [blocks, 1, 1], Order::AfterPrevious)).collect();
            let (h0, _) = self.gpu.nv.prepared_stats();
            for round in 0..3 {
                self.gpu.bytes(&buf).fill(0);
                self.to_gpu(&buf, buf.bytes);
                let slot = MarkerSlot { va: stamps.va, cpu: stamps.cpu };
                if let Err(e) = self.run(&ls, Some(slot)) {
                    self.report.fail("resubmitted ordering", e);
                    break;
                }
                self.to_cpu(&buf, buf.bytes);
                let v = self.gpu.bytes(&buf);
                let word = |i: usize| u64::from_le_bytes(v[8 * i..8 * i + 8].try_into().unwrap());
                let mut spans = Vec::new();
                let mut missing = 0;
                for l in 0..launches {
                    let (mut lo, mut hi) = (u64::MAX, 0u64);
                    for b in 0..blocks as usize {
                        let base = (l * blocks as usize + b) * 2;
                        let (s, e) = (word(base), word(base + 1));
                        if s == 0 || e < s {
                            missing += 1;
                        }
                        lo = lo.min(s);
                        hi = hi.max(e);
                    }
                    spans.push((lo, hi));
                }
                let overlaps = spans.windows(2).filter(|w| w[1].0 < w[0].1).count();
                // How soon after a launch's last block ended the next one's first block passed its wait
                // (GPU ns): what programmatic launch would shorten.
                let mut gaps: Vec<f64> = spans.windows(2).map(|w| w[1].0.saturating_sub(w[0].1) as f64 / 1e3).collect();
                if round == 2 && !gaps.is_empty() {
                    println!("probe.resubmitted_ordering_{tag}_gap_p50_us {:.3}", pct(&mut gaps, 0.5));
                }
                let seq = self.markers.seq;
                let seq_ok = (0..launches).all(|i| {
                    // SAFETY: inside the stamp buffer.
                    unsafe { (stamps.cpu.add(16 * i) as *const u32).read_volatile() == seq }
                });
                self.report.check(
                    &format!("resubmitted ordering {tag} round {round}"),
                    overlaps == 0 && missing == 0 && seq_ok,
                    format!(
                        "overlapping pairs {overlaps}, blocks without stamps {missing}, stamps carry the sequence: {seq_ok}"
                    ),
                );
            }
            let (h1, _) = self.gpu.nv.prepared_stats();
            println!("probe.resubmitted_ordering_{tag}_prepared_hits {}", h1 - h0);
            self.gpu.free(&buf);
            self.gpu.free(&stamps);
        }
    }

    /// xorshift64*: the feature probes' inputs, seeded from the clock so every run checks fresh values.
    struct Rng(u64);

    impl Rng {
        fn fresh(tag: &str) -> Rng {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
            let seed = t ^ 0x9e37_79b9_7f4a_7c15 | 1;
            println!("# {tag}: seed {seed:#x}");
            Rng(seed)
        }
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// A kernel's argument words: `values[i]`'s bytes at parameter `i`'s offset (from the cubin's
    /// KPARAM_INFO), zeros between, rounded up to whole words.
    fn pack(k: &Kernel, values: &[&[u8]]) -> Vec<u32> {
        assert_eq!(values.len(), k.info.params.len(), "{}: argument count", k.info.name);
        let mut bytes = vec![0u8; (k.info.param_bytes as usize).next_multiple_of(4)];
        for (p, v) in k.info.params.iter().zip(values) {
            assert_eq!(v.len(), p.size as usize, "{}: parameter {} size", k.info.name, p.ordinal);
            bytes[p.offset as usize..p.offset as usize + v.len()].copy_from_slice(v);
        }
        bytes.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
    }

    /// `OmegaTmaArgs` of kernels/cuda/probes/tma_desc.cuh, 128 bytes: a 2-D tiled bf16 descriptor.
    struct TmaArgs {
        base: u64,
        dims: [u32; 2],
        row_bytes: u64,
        box_dims: [u32; 2],
        swizzle: u32,
    }

    /// PTX's `.bf16` element type for `tensormap.replace.tile.elemtype` (CUDA's enum says 9).
    const PTX_ELEMTYPE_BF16: u32 = 10;

    impl TmaArgs {
        fn bytes(&self) -> [u8; 128] {
            let mut b = [0u8; 128];
            let mut put = |off: usize, v: &[u8]| b[off..off + v.len()].copy_from_slice(v);
            put(0, &self.base.to_le_bytes());
            put(8, &self.row_bytes.to_le_bytes());
            for i in 0..2 {
                put(40 + 4 * i, &self.dims[i].to_le_bytes());
                put(60 + 4 * i, &self.box_dims[i].to_le_bytes());
                put(80 + 4 * i, &1u32.to_le_bytes());
            }
            put(100, &2u32.to_le_bytes());
            put(104, &PTX_ELEMTYPE_BF16.to_le_bytes());
            put(108, &self.swizzle.to_le_bytes());
            b
        }

        /// The same descriptor as the host encoder writes it (`omega_hal::tma`, the driver's bytes).
        fn encoded(&self) -> [u8; 128] {
            let swizzle = [TmaSwizzle::None, TmaSwizzle::B32, TmaSwizzle::B64, TmaSwizzle::B128][self.swizzle as usize];
            let [w, h] = self.dims.map(u64::from);
            let [bw, bh] = self.box_dims;
            let spec = TiledSpec::matrix(TmaElem::Bf16, self.base, [h, w], self.row_bytes, [bh, bw], swizzle);
            encode_tiled(&spec).expect("the probe's descriptors are valid").0
        }

        /// What the box at (c0, c1) looks like in shared memory: row-major, zeros outside the tensor, and
        /// with the 128-byte swizzle each 16-byte chunk j of row r at chunk j ^ (r % 8).
        fn expected(&self, src: &[u16], c0: u32, c1: u32) -> Vec<u16> {
            let [bw, bh] = self.box_dims.map(|d| d as usize);
            let mut out = vec![0u16; bw * bh];
            for y in 0..bh {
                for x in 0..bw {
                    let (gx, gy) = (c0 as usize + x, c1 as usize + y);
                    let v = if gx < self.dims[0] as usize && gy < self.dims[1] as usize {
                        src[gy * (self.row_bytes as usize / 2) + gx]
                    } else {
                        0
                    };
                    let at = match self.swizzle {
                        0 => y * bw + x,
                        3 => {
                            assert_eq!(bw * 2, 128, "the 128-byte swizzle reference takes 128-byte rows");
                            let (chunk, e) = (x / 8, x % 8);
                            y * bw + ((chunk ^ (y % 8)) * 8) + e
                        }
                        other => unreachable!("no reference for swizzle {other}"),
                    };
                    out[at] = v;
                }
            }
            out
        }
    }

    impl Probe {
        /// Submits `launches` and waits for both markers; the failure names `what`.
        fn go(&mut self, what: &str, launches: &[LaunchDesc<'_>]) -> bool {
            match self.run(launches, None) {
                Ok(_) => true,
                Err(e) => {
                    self.report.fail(what, e);
                    false
                }
            }
        }

        /// `file`'s `kernel`, or a failure naming the build step that makes it.
        fn probe_kernel(&mut self, file: &str, kernel: &str) -> Option<Kernel> {
            match self.gpu.load_kernel(file, kernel) {
                Ok(k) => Some(k),
                Err(e) => {
                    self.report.fail(&format!("{file}/{kernel}"), format!("{e} (tools/gpu/build.sh builds it)"));
                    None
                }
            }
        }

        // ----- tma ----------------------------------------------------------------------------------

        /// Two descriptors encoded on the host (no swizzle, box 32 x 16; 128-byte swizzle, box 64 x 8) over
        /// a random 200 x 96 bf16 tensor; each loads a box inside the tensor and one hanging over its
        /// corner, through the `__grid_constant__` parameter and through global memory; then the same
        /// with prepared encodings off, so consecutive launches reuse one parameter area. Last, the
        /// device-side builder (`tensormap.replace`) is run on the same parameters and its bytes compared
        /// with the host's: last, because it has hung on the H200, which ends the channel.
        fn tma(&mut self) {
            println!("# tma: descriptors encoded on the host, loaded with cp.async.bulk.tensor");
            let (Some(build), Some(by_param), Some(by_global)) = (
                self.probe_kernel("probe_tma", "omega_tma_build"),
                self.probe_kernel("probe_tma", "probe_tma_load_param"),
                self.probe_kernel("probe_tma", "probe_tma_load_global"),
            ) else {
                return;
            };
            let mut rng = Rng::fresh("tma");
            let (w, h) = (200u32, 96u32);
            let src = self.alloc(u64::from(w * h) * 2, DATA, BufferKind::Data);
            let host: Vec<u16> = (0..w * h).map(|_| rng.next() as u16).collect();
            for (i, v) in host.iter().enumerate() {
                self.gpu.bytes(&src)[2 * i..2 * i + 2].copy_from_slice(&v.to_le_bytes());
            }
            self.to_gpu(&src, src.bytes);
            let descs = [
                TmaArgs { base: src.va, dims: [w, h], row_bytes: u64::from(w) * 2, box_dims: [32, 16], swizzle: 0 },
                TmaArgs { base: src.va, dims: [w, h], row_bytes: u64::from(w) * 2, box_dims: [64, 8], swizzle: 3 },
            ];
            let built = self.alloc(128 * descs.len() as u64, DATA, BufferKind::Data);
            let images: Vec<[u8; 128]> = descs.iter().map(TmaArgs::encoded).collect();
            for (i, img) in images.iter().enumerate() {
                self.gpu.bytes(&built)[128 * i..128 * (i + 1)].copy_from_slice(img);
                let hex: Vec<String> =
                    img.chunks(8).map(|c| format!("{:016x}", u64::from_le_bytes(c.try_into().unwrap()))).collect();
                println!("# tma descriptor {i} (swizzle {}): {}", descs[i].swizzle, hex.join(" "));
            }
            self.to_gpu(&built, built.bytes);
            // The same descriptors in GPU-uncached system memory, where the launch's constant bank (and so a
            // `__grid_constant__` parameter) lives.
            let built_sys = self.alloc(128 * descs.len() as u64, POLLED, BufferKind::Data);
            for (i, img) in images.iter().enumerate() {
                self.gpu.bytes(&built_sys)[128 * i..128 * (i + 1)].copy_from_slice(img);
            }
            let out = self.alloc(64 * 64 * 2, DATA, BufferKind::Data);
            // A fault ends the channel, so each run takes the paths `OMEGA_PROBE_TMA_PATHS` names (default all,
            // in this order): descriptors in video memory, in system memory, as a parameter.
            let paths = std::env::var("OMEGA_PROBE_TMA_PATHS").unwrap_or_else(|_| "global,sysmem,param".into());
            let runs: Vec<(&str, bool)> = ["global", "sysmem", "param"]
                .into_iter()
                .filter(|p| paths.split(',').any(|q| q == *p))
                .flat_map(|p| [(p, true), (p, false)])
                .collect();
            for (path, prepared) in runs {
                self.tune(|c| c.tuning.prepared = prepared);
                let tag = if prepared { "" } else { " (parameter area reused)" };
                // `OMEGA_PROBE_TMA_SWIZZLE` (0 or 3) keeps one descriptor, for the same reason.
                let only = std::env::var("OMEGA_PROBE_TMA_SWIZZLE").ok().and_then(|v| v.parse::<u32>().ok());
                for (i, d) in descs.iter().enumerate().filter(|(_, d)| only.is_none_or(|z| z == d.swizzle)) {
                    let [bw, bh] = d.box_dims;
                    let inside = (rng.below(u64::from(w - bw)) as u32, rng.below(u64::from(h - bh)) as u32);
                    let corner = (w - bw / 2, h - bh / 2);
                    for (where_, (c0, c1)) in [("inside", inside), ("over the corner", corner)] {
                        let box_bytes = bw * bh * 2;
                        let want = d.expected(&host, c0, c1);
                        {
                            let poison = rng.next() as u16 | 1;
                            for c in self.gpu.bytes(&out).chunks_mut(2) {
                                c.copy_from_slice(&poison.to_le_bytes());
                            }
                            self.to_gpu(&out, out.bytes);
                            let (c0b, c1b, bb) =
                                ((c0 as i32).to_le_bytes(), (c1 as i32).to_le_bytes(), box_bytes.to_le_bytes());
                            let table = if path == "sysmem" { &built_sys } else { &built };
                            let desc_va = (table.va + 128 * i as u64).to_le_bytes();
                            let words = if path == "param" {
                                pack(&by_param, &[&img_of(&images, i), &out.va.to_le_bytes(), &c0b, &c1b, &bb])
                            } else {
                                pack(&by_global, &[&desc_va, &out.va.to_le_bytes(), &c0b, &c1b, &bb])
                            };
                            let k = if path == "param" { &by_param } else { &by_global };
                            let name =
                                format!("tma {path} swizzle {} box {bw}x{bh} {where_} ({c0}, {c1}){tag}", d.swizzle);
                            if !self.go(&name, &[k.launch(&words, [128, 1, 1], [1, 1, 1], Order::AfterPrevious)]) {
                                continue;
                            }
                            self.to_cpu(&out, out.bytes);
                            let got: Vec<u16> = self.gpu.bytes(&out)[..box_bytes as usize]
                                .chunks(2)
                                .map(|c| u16::from_le_bytes(c.try_into().unwrap()))
                                .collect();
                            let bad = got.iter().zip(&want).filter(|(g, w)| g != w).count();
                            let first = got.iter().zip(&want).position(|(g, w)| g != w);
                            let detail = match first {
                                None => format!("{} elements match", want.len()),
                                Some(at) => format!(
                                    "{bad} of {} differ; first at {at}: got {:#06x}, want {:#06x}",
                                    want.len(),
                                    got[at],
                                    want[at]
                                ),
                            };
                            self.report.check(&name, bad == 0, detail);
                        }
                    }
                }
            }
            self.tune(|_| {});
            self.gpu.free(&out);
            self.tma_device_builder(&build, &descs, &images);
            for b in [&src, &built, &built_sys] {
                self.gpu.free(b);
            }
            for k in [&build, &by_param, &by_global] {
                self.gpu.free(&k.code);
            }
        }

        /// The device-side builder on `descs`, compared with the host encoder's `images` byte for byte
        /// except the two fields only the driver's encoder derives (box bytes, bytes 64..67, and the
        /// swizzle atom, bytes 72..74), which `tensormap.replace` has no instruction for.
        fn tma_device_builder(&mut self, build: &Kernel, descs: &[TmaArgs], images: &[[u8; 128]]) {
            let n = descs.len() as u32;
            let args = self.alloc(128 * u64::from(n), DATA, BufferKind::Data);
            let out = self.alloc(128 * u64::from(n), DATA, BufferKind::Data);
            let status = self.alloc(4 * u64::from(n), DATA, BufferKind::Data);
            for (i, d) in descs.iter().enumerate() {
                self.gpu.bytes(&args)[128 * i..128 * (i + 1)].copy_from_slice(&d.bytes());
            }
            self.gpu.bytes(&out).fill(0xa5);
            self.gpu.bytes(&status).fill(0);
            for b in [&args, &out, &status] {
                self.to_gpu(b, b.bytes);
            }
            let words = pack(
                build,
                &[&args.va.to_le_bytes(), &out.va.to_le_bytes(), &status.va.to_le_bytes(), &n.to_le_bytes()],
            );
            if self.go("tma device builder", &[build.launch(&words, [32, 1, 1], [n, 1, 1], Order::AfterPrevious)]) {
                self.to_cpu(&out, out.bytes);
                let derived = |b: usize| (64..67).contains(&b) || (72..74).contains(&b);
                let bad: Vec<String> = (0..n as usize)
                    .flat_map(|i| {
                        let got = self.gpu.bytes(&out)[128 * i..128 * (i + 1)].to_vec();
                        (0..128)
                            .filter(move |&b| !derived(b) && got[b] != images[i][b])
                            .map(move |b| format!("{i}:{b}"))
                    })
                    .collect();
                self.report.check(
                    "tma device builder",
                    bad.is_empty(),
                    format!("bytes that differ from the host's: {bad:?}"),
                );
            }
            for b in [&args, &out, &status] {
                self.gpu.free(b);
            }
        }

        // ----- cluster ------------------------------------------------------------------------------

        /// `probe_cluster` (`__cluster_dims__(2, 1, 1)`, 8 blocks) and `probe_cluster_rt` (no attribute,
        /// clusters of 4 from the QMD alone, 16 blocks): ranks, cluster ids, the count of CTAs that ran, and
        /// each block's view of its neighbour's shared memory.
        fn cluster(&mut self) {
            println!("# cluster: QMD_TYPE GRID_GPC_CGA, %cluster_ctarank, distributed shared memory");
            for (kernel, grid, fallback) in [("probe_cluster", 8u32, [2, 1, 1]), ("probe_cluster_rt", 16u32, [4, 1, 1])]
            {
                let Some(k) = self.probe_kernel("probe_cluster", kernel) else { continue };
                let cluster = k.info.cluster_dims.unwrap_or(fallback);
                let mut rng = Rng::fresh(kernel);
                let salt = rng.next() as u32;
                let per = 136usize;
                let out = self.alloc(4 * (per as u64) * u64::from(grid), DATA, BufferKind::Data);
                let count = self.alloc(4, DATA, BufferKind::Data);
                let poison = rng.next() as u32;
                for c in self.gpu.bytes(&out).chunks_mut(4) {
                    c.copy_from_slice(&poison.to_le_bytes());
                }
                self.gpu.bytes(&count).fill(0);
                self.to_gpu(&out, out.bytes);
                self.to_gpu(&count, count.bytes);
                let words = pack(
                    &k,
                    &[&out.va.to_le_bytes(), &count.va.to_le_bytes(), &grid.to_le_bytes(), &salt.to_le_bytes()],
                );
                let l = LaunchDesc {
                    features: omega_hal::LaunchFeatures::cluster(cluster),
                    ..k.launch(&words, [128, 1, 1], [grid, 1, 1], Order::AfterPrevious)
                };
                let name = format!("cluster {kernel} {cluster:?} x {grid} blocks");
                if self.go(&name, &[l]) {
                    self.to_cpu(&out, out.bytes);
                    self.to_cpu(&count, count.bytes);
                    let v: Vec<u32> =
                        self.gpu.bytes(&out).chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
                    let ran = u32::from_le_bytes(self.gpu.bytes(&count)[..4].try_into().unwrap());
                    let size = cluster[0];
                    let mut errors = Vec::new();
                    for b in 0..grid {
                        let o = &v[b as usize * per..(b as usize + 1) * per];
                        let want = [b % size, b / size, grid / size, size, b, grid, b % size];
                        if o[..7] != want {
                            errors.push(format!(
                                "block {b}: rank/id/nid/nrank/ctaid/nctaid/cluster_ctaid {:?}, want {want:?}",
                                &o[..7]
                            ));
                        }
                        let peer = b ^ 1;
                        let bad = (0..128u32).filter(|&t| o[8 + t as usize] != (peer * 0x10000 + t * 7) ^ salt).count();
                        if bad > 0 {
                            errors.push(format!(
                                "block {b}: {bad} of 128 values read from block {peer}'s shared memory are wrong"
                            ));
                        }
                    }
                    let explicit: Vec<u32> = (0..grid).map(|b| v[b as usize * per + 7]).collect();
                    println!("# {kernel}: %is_explicit_cluster per block {explicit:?}");
                    let detail = if errors.is_empty() {
                        format!("{ran} CTAs ran; ranks, cluster ids and neighbours' shared memory all match")
                    } else {
                        format!(
                            "{ran} CTAs ran (want {grid}); {}",
                            errors.iter().take(4).cloned().collect::<Vec<_>>().join("; ")
                        )
                    };
                    self.report.check(&name, errors.is_empty() && ran == grid, detail);
                }
                self.gpu.free(&out);
                self.gpu.free(&count);
                self.gpu.free(&k.code);
            }
        }

        // ----- smem ---------------------------------------------------------------------------------

        /// Four blocks of 1024 threads, each with 227 KiB of dynamic shared memory written and read back
        /// reversed in full.
        fn smem(&mut self) {
            println!("# smem: 227 KiB of dynamic shared memory per block");
            let Some(k) = self.probe_kernel("probe_smem", "probe_smem") else { return };
            let dynamic = 227 * 1024u32;
            let words = dynamic / 4;
            let blocks = 4u32;
            let mut rng = Rng::fresh("smem");
            let input = self.alloc(u64::from(dynamic), DATA, BufferKind::Data);
            let out = self.alloc(u64::from(dynamic) * u64::from(blocks), DATA, BufferKind::Data);
            let meta = self.alloc(8 * u64::from(blocks), DATA, BufferKind::Data);
            let host: Vec<u32> = (0..words).map(|_| rng.next() as u32).collect();
            for (i, v) in host.iter().enumerate() {
                self.gpu.bytes(&input)[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
            }
            let poison = rng.next() as u32;
            for c in self.gpu.bytes(&out).chunks_mut(4) {
                c.copy_from_slice(&poison.to_le_bytes());
            }
            self.gpu.bytes(&meta).fill(0xff);
            for b in [&input, &out, &meta] {
                self.to_gpu(b, b.bytes);
            }
            let args = pack(
                &k,
                &[&input.va.to_le_bytes(), &out.va.to_le_bytes(), &meta.va.to_le_bytes(), &words.to_le_bytes()],
            );
            let l = LaunchDesc {
                shared_bytes: k.info.shared_bytes + dynamic,
                dynamic_shared_bytes: dynamic,
                ..k.launch(&args, [1024, 1, 1], [blocks, 1, 1], Order::AfterPrevious)
            };
            let name = format!("smem {} + {dynamic} bytes x {blocks} blocks", k.info.shared_bytes);
            if self.go(&name, &[l]) {
                self.to_cpu(&out, out.bytes);
                self.to_cpu(&meta, meta.bytes);
                let v: Vec<u32> =
                    self.gpu.bytes(&out).chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
                let m: Vec<u32> =
                    self.gpu.bytes(&meta).chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
                let mut bad = 0usize;
                for b in 0..blocks {
                    let key = b.wrapping_mul(0x9e37_79b9);
                    for i in 0..words {
                        if v[(b * words + i) as usize] != host[(words - 1 - i) as usize] ^ key {
                            bad += 1;
                        }
                    }
                }
                let dyn_ok = (0..blocks as usize).all(|b| m[2 * b] == dynamic);
                println!(
                    "# smem: %dynamic_smem_size / %total_smem_size per block {:?}",
                    m.chunks(2).collect::<Vec<_>>()
                );
                self.report.check(
                    &name,
                    bad == 0 && dyn_ok,
                    format!("{bad} of {} words wrong; %dynamic_smem_size {} (want {dynamic})", words * blocks, m[0]),
                );
            }
            for b in [&input, &out, &meta] {
                self.gpu.free(b);
            }
            self.gpu.free(&k.code);
        }
    }

    /// Descriptor `i`'s bytes, the value of a `__grid_constant__ CUtensorMap` parameter.
    fn img_of(images: &[[u8; 128]], i: usize) -> [u8; 128] {
        images[i]
    }

    fn fmt_list(v: &[f64]) -> String {
        v.iter().map(|x| format!("{x:.1}")).collect::<Vec<_>>().join(" ")
    }

    pub fn main() {
        let dir = PathBuf::from(harness::arg(1, ".gpu"));
        let what = harness::arg(2, "all");
        // The asynchronous copy channel is made at open only when asked for; the copy variants use it.
        // OMEGA_NV_NO_BOOST=1: without the performance boost, to measure the idle-clock state.
        let perf_boost = std::env::var("OMEGA_NV_NO_BOOST").map_or(true, |v| v != "1");
        let nv = harness::probe(NvidiaConfig { async_copy: true, perf_boost, ..NvidiaConfig::default() });
        let gpu = Gpu { nv: nv.clone(), dir, min_registers: 64 };
        let info = gpu.open().expect("open");
        let (src, mono_ns) = nv.clock_source();
        println!(
            "# nv_probe device=\"{}\" driver={} clock={src:?} clock_gettime={mono_ns} ns; {}",
            info.name,
            info.driver_version,
            nv.perf_boost()
        );
        let timer = Timer::calibrate();
        let markers = Markers::alloc(&gpu).expect("markers");
        let mut p = Probe { gpu, timer, markers, report: Report::new("probe") };
        if what == "all" || what == "copies" {
            p.copies();
        }
        let empty = p.load("empty");
        let ts = p.load("timestamps");
        if what == "all" || what == "launch" {
            p.wc_costs();
            p.launch(&empty);
        }
        // Optional: an older .gpu/ may lack it; the data-visibility checks are skipped then.
        let sc = p.gpu.dir.join("scale_copy.cubin").exists().then(|| p.load("scale_copy"));
        if what == "all" || what == "chain" {
            p.chain(&empty, &ts, sc.as_ref());
        }
        for (name, probe) in [
            ("tma", Probe::tma as fn(&mut Probe)),
            ("cluster", Probe::cluster as fn(&mut Probe)),
            ("smem", Probe::smem as fn(&mut Probe)),
            ("alloc", Probe::alloc_times as fn(&mut Probe)),
        ] {
            if what == "all" || what == name {
                probe(&mut p);
            }
        }
        let (hits, misses) = nv.prepared_stats();
        println!("# prepared submissions: {hits} hits, {misses} misses; failures {}", p.report.failures);
        p.gpu.free(&empty.code);
        p.gpu.free(&ts.code);
        if let Some(sc) = &sc {
            p.gpu.free(&sc.code);
        }
        p.gpu.free(&p.markers.buf);
        p.gpu.close();
        p.report.exit();
    }
}
