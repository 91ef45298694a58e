//! Hardware smoke test of the `nvidia` platform, at the HAL level (no session layer): open, allocate every
//! kind, semaphore-only and kernel submissions, syncs through video memory, ordering of dependent
//! launches, and the fault and hang paths, each checked against a CPU reference on fresh random data.
//!
//! ```text
//! nv_smoke main  [DIR]   everything but the fault and hang cases (DIR holds the cubins, default .gpu)
//! nv_smoke quick [DIR]   open, one vector add, close (run after a fault to show the GPU is usable)
//! nv_smoke fault [DIR]   a store to an unmapped address: channel_fault must report Xid 31 promptly
//! nv_smoke hang  [DIR]   a kernel that never ends: the 100 ms wait must time out, the process exit cleanly
//! ```
//!
//! Prints `[ok]` / `[FAIL]` per check and `nv.<metric> <value>` lines; exits non-zero on any failure.
//! Build the cubins and the binary with `tools/gpu/build.sh`.

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("nv_smoke needs Linux and NVIDIA's open kernel driver");
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

    use omega_hal::cubin::KernelInfo;
    use omega_hal::nvidia::{Barrier, NvidiaConfig};
    use omega_hal::{Allocation, BufferKind, CachePolicy, LaunchDesc, MarkerSlot, Order, Platform, Rights};

    use super::harness::{self, pct, Gpu, Kernel, Markers, Report, CODE, DATA, POLLED};

    /// xorshift64*: fresh inputs every run, seeded from the clock.
    struct Rng(u64);

    impl Rng {
        fn new() -> Self {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            Rng(t.as_nanos() as u64 | 1)
        }
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn fill(&mut self, b: &mut [u8]) {
            let mut chunks = b.chunks_exact_mut(8);
            for c in &mut chunks {
                c.copy_from_slice(&self.next().to_le_bytes());
            }
            let rest = chunks.into_remainder();
            let v = self.next().to_le_bytes();
            rest.copy_from_slice(&v[..rest.len()]);
        }
        fn f32(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 200.0 - 100.0
        }
    }

    /// Where in the marker buffer launch `i` releases its stamp (16 bytes each), past both markers.
    const STAMPS: u64 = 64;

    struct Smoke {
        gpu: Gpu,
        report: Report,
        /// Made at the first submission, freed at close.
        markers: Option<Markers>,
    }

    /// A parameter value, placed at the offset KPARAM_INFO gives.
    #[derive(Clone, Copy)]
    enum Arg {
        U64(u64),
        U32(u32),
    }

    impl Smoke {
        fn pack(info: &KernelInfo, args: &[Arg]) -> Vec<u32> {
            let mut words = vec![0u32; (info.param_bytes as usize).div_ceil(4)];
            for (p, a) in info.params.iter().zip(args) {
                let at = p.offset as usize / 4;
                match *a {
                    Arg::U64(v) => {
                        words[at] = v as u32;
                        words[at + 1] = (v >> 32) as u32;
                    }
                    Arg::U32(v) => words[at] = v,
                }
            }
            words
        }

        fn markers(&mut self) -> Result<&mut Markers, String> {
            if self.markers.is_none() {
                self.markers = Some(Markers::alloc(&self.gpu)?);
            }
            Ok(self.markers.as_mut().expect("made above"))
        }

        /// The sequence of the last submission.
        fn seq(&self) -> u32 {
            self.markers.as_ref().map_or(0, |m| m.seq)
        }

        /// Submits and waits for both markers; returns the round trip and whether marker 0 was already
        /// released when marker 1 was seen.
        fn run(
            &mut self,
            launches: &[LaunchDesc<'_>],
            stamps: bool,
            timeout: Duration,
        ) -> Result<(Duration, bool), String> {
            let m = self.markers()?;
            let s = m.submission(launches, stamps.then(|| m.slot(STAMPS)));
            let [m0, m1] = s.markers;
            let t = Instant::now();
            self.gpu.submit(&s)?;
            self.wait(m1, m0, t, timeout)
        }

        fn wait(
            &self,
            m1: MarkerSlot,
            m0: MarkerSlot,
            t: Instant,
            timeout: Duration,
        ) -> Result<(Duration, bool), String> {
            let poll = self.gpu.nv.poll().unwrap();
            let seq = self.seq();
            let mut n = 0u64;
            loop {
                // SAFETY: markers live in the HOST_POLLED marker buffer.
                let v1 = unsafe { poll.poll(&m1) }.map_err(|e| e.to_string())?;
                if v1 == seq {
                    let dt = t.elapsed();
                    // SAFETY: as above.
                    let v0 = unsafe { poll.poll(&m0) }.map_err(|e| e.to_string())?;
                    return Ok((dt, v0 == seq));
                }
                n += 1;
                if n.is_multiple_of(256) {
                    if let Some(f) = poll.channel_fault() {
                        return Err(format!("channel fault after {:?}: {f}", t.elapsed()));
                    }
                    if t.elapsed() > timeout {
                        // SAFETY: as above.
                        let v0 = unsafe { poll.poll(&m0) }.unwrap_or(0);
                        return Err(format!(
                            "timeout after {:?} (marker0 {v0:#x}, marker1 {v1:#x}, want {seq:#x})",
                            t.elapsed()
                        ));
                    }
                }
                std::hint::spin_loop();
            }
        }

        fn open(&mut self) -> bool {
            let t = Instant::now();
            match self.gpu.open() {
                Ok(info) => {
                    let sane =
                        !info.name.is_empty() && info.sm_count > 0 && info.memory_bytes > 0 && !info.pci.is_empty();
                    self.report.check("device query", sane, format!("{info:?}"));
                    let nv = &self.gpu.nv;
                    let abi = nv.driver_abi().map(|a| a.verified_with).unwrap_or("?");
                    let arch = nv.arch().map(|a| a.name).unwrap_or("?");
                    let slm = nv.local_bytes_per_thread();
                    self.report.check(
                        "open",
                        true,
                        format!(
                            "in {:?}; name \"{}\", {} SMs, {} MiB, sm_{}{}, driver {} (ABI entry verified with {abi}), arch {arch}, PCI {}, SLM {slm} B/thread",
                            t.elapsed(),
                            info.name,
                            info.sm_count,
                            info.memory_bytes >> 20,
                            info.arch_major,
                            info.arch_minor,
                            info.driver_version,
                            info.pci,
                        ),
                    )
                }
                Err(e) => self.report.check("open", false, e),
            }
        }

        fn close(&mut self) {
            if let Some(m) = self.markers.take() {
                self.gpu.free(&m.buf);
            }
            self.gpu.close();
            let errs = self.gpu.nv.last_close_errors();
            self.report.check("close", errs.is_empty(), format!("driver refusals during close: {errs:?}"));
        }

        fn allocations(&mut self) {
            let kinds: [(&str, u64, Rights, CachePolicy, BufferKind); 7] = [
                ("data 4 KiB", 4096, DATA, CachePolicy::Uncached, BufferKind::Data),
                ("data 64 MiB (2 MiB pages)", 64 << 20, DATA, CachePolicy::Uncached, BufferKind::Data),
                (
                    "cached weights",
                    1 << 20,
                    Rights::CPU_WRITE | Rights::GPU_READ,
                    CachePolicy::Cached,
                    BufferKind::Data,
                ),
                ("code", 64 << 10, CODE, CachePolicy::Uncached, BufferKind::Code),
                ("queue", 64 << 10, DATA, CachePolicy::Uncached, BufferKind::Queue),
                ("host-polled data", 4096, POLLED, CachePolicy::Uncached, BufferKind::Data),
                (
                    "GPU-only scratch",
                    8 << 20,
                    Rights::GPU_READ | Rights::GPU_WRITE,
                    CachePolicy::Uncached,
                    BufferKind::Data,
                ),
            ];
            for (name, bytes, rights, cache, kind) in kinds {
                match self.gpu.alloc(bytes, rights, cache, kind) {
                    Ok(a) => {
                        let cpu_ok = a.cpu.is_null() != rights.intersects(Rights::CPU_READ | Rights::CPU_WRITE);
                        if !a.cpu.is_null() && kind != BufferKind::Code {
                            // Touch the whole CPU view (write then read back) where reading is allowed.
                            let v = self.gpu.bytes(&a);
                            v.fill(0xa5);
                            let ok = v.iter().all(|&b| b == 0xa5);
                            self.report.check(&format!("alloc {name} CPU view"), ok, "written and read back");
                        }
                        self.report.check(
                            &format!("alloc {name}"),
                            cpu_ok && a.va != 0,
                            format!("va {:#x}, cpu {:p}", a.va, a.cpu),
                        );
                        self.gpu.free(&a);
                    }
                    Err(e) => {
                        self.report.fail(&format!("alloc {name}"), e);
                    }
                }
            }
        }

        fn semaphore_only(&mut self, iters: usize) {
            let skip = LaunchDesc {
                code_va: 0,
                code_bytes: 0,
                gpr_count: 8,
                block: [1; 3],
                grid: [1; 3],
                shared_bytes: 0,
                dynamic_shared_bytes: 0,
                local_bytes_per_thread: 0,
                barrier_count: 0,
                features: omega_hal::LaunchFeatures::NONE,
                num_elements: 0,
                args: &[],
                const_banks: &[],
                order: Order::AfterPrevious,
                skip: true,
            };
            let mut lat = Vec::new();
            for i in 0..iters + 100 {
                match self.run(&[skip], false, Duration::from_secs(2)) {
                    Ok((dt, _)) => {
                        if i >= 100 {
                            lat.push(dt.as_secs_f64() * 1e6)
                        }
                    }
                    Err(e) => {
                        self.report.fail("semaphore-only submission", e);
                        return;
                    }
                }
            }
            let p50 = pct(&mut lat, 0.5);
            self.report.check("semaphore-only submission", true, format!("{iters} round trips, p50 {p50:.2} us"));
            self.report.metric("semaphore_roundtrip_p10_us", pct(&mut lat, 0.1));
            self.report.metric("semaphore_roundtrip_p50_us", p50);
            self.report.metric("semaphore_roundtrip_p99_us", pct(&mut lat, 0.99));
        }

        /// Random data to video memory and back, with both sides poisoned first.
        fn sync_roundtrip(&mut self, bytes: u64, rng: &mut Rng) {
            let name = format!("sync round trip {} KiB", bytes >> 10);
            let a = match self.gpu.alloc(bytes, DATA, CachePolicy::Uncached, BufferKind::Data) {
                Ok(a) => a,
                Err(e) => {
                    self.report.fail(&name, e);
                    return;
                }
            };
            let len = bytes;
            let r = (|| -> Result<String, String> {
                let v = self.gpu.bytes(&a);
                v[..len as usize].fill(0xdb);
                self.gpu.to_gpu(&a, len)?; // video memory poisoned
                let mut want = vec![0u8; len as usize];
                rng.fill(&mut want);
                self.gpu.bytes(&a)[..len as usize].copy_from_slice(&want);
                self.gpu.to_gpu(&a, len)?;
                self.gpu.bytes(&a)[..len as usize].fill(0x5c); // staging poisoned
                self.gpu.to_cpu(&a, len)?;
                let got = &self.gpu.bytes(&a)[..len as usize];
                match got.iter().zip(&want).position(|(g, w)| g != w) {
                    None => Ok(format!("{len} random bytes back intact")),
                    Some(i) => Err(format!("first difference at byte {i}: got {:#x}, want {:#x}", got[i], want[i])),
                }
            })();
            match r {
                Ok(d) => self.report.check(&name, true, d),
                Err(e) => self.report.check(&name, false, e),
            };
            self.gpu.free(&a);
        }

        fn sync_speed(&mut self) {
            let big = 1u64 << 30;
            let a = match self.gpu.alloc(big, DATA, CachePolicy::Uncached, BufferKind::Data) {
                Ok(a) => a,
                Err(e) => {
                    self.report.fail("sync 1 GiB", e);
                    return;
                }
            };
            self.gpu.bytes(&a).fill(0x3c);
            let default_chunk = self.gpu.nv.config().copy_chunk_bytes;
            for chunk in [default_chunk, 256 << 20, 64 << 20, 16 << 20, 4 << 20] {
                let mut cfg = self.gpu.nv.config();
                cfg.copy_chunk_bytes = chunk;
                self.gpu.nv.set_config(cfg);
                for (dir, name) in [(0, "to_gpu"), (1, "to_cpu")] {
                    let mut best = f64::MAX;
                    for _ in 0..5 {
                        let t = Instant::now();
                        let r = if dir == 0 { self.gpu.to_gpu(&a, big) } else { self.gpu.to_cpu(&a, big) };
                        if let Err(e) = r {
                            self.report.fail("sync 1 GiB", e);
                            self.gpu.free(&a);
                            return;
                        }
                        best = best.min(t.elapsed().as_secs_f64());
                    }
                    let gbps = big as f64 / best / 1e9;
                    let tag = if chunk == default_chunk { String::new() } else { format!("_chunk{}m", chunk >> 20) };
                    self.report.metric(&format!("sync_1g_{name}{tag}_gbps"), gbps);
                    self.report.check(&format!("sync 1 GiB {name}{tag}"), true, format!("{gbps:.1} GB/s (best of 5)"));
                }
            }
            let mut cfg = self.gpu.nv.config();
            cfg.copy_chunk_bytes = default_chunk;
            self.gpu.nv.set_config(cfg);
            self.gpu.free(&a);

            let a = self.gpu.alloc(4096, DATA, CachePolicy::Uncached, BufferKind::Data).expect("4 KiB");
            let mut cfg = self.gpu.nv.config();
            for (label, bar1) in [("to_gpu_bar1", true), ("to_gpu_ce", false), ("to_cpu", true)] {
                cfg.bar1_sync_max = if bar1 { 64 << 10 } else { 0 };
                self.gpu.nv.set_config(cfg.clone());
                let mut lat = Vec::new();
                for i in 0..11_000 {
                    let t = Instant::now();
                    let r = if label == "to_cpu" { self.gpu.to_cpu(&a, 4096) } else { self.gpu.to_gpu(&a, 4096) };
                    if let Err(e) = r {
                        self.report.fail("sync 4 KiB", e);
                        break;
                    }
                    if i >= 1000 {
                        lat.push(t.elapsed().as_secs_f64() * 1e6);
                    }
                }
                if !lat.is_empty() {
                    self.report.metric(&format!("sync_4k_{label}_p50_us"), pct(&mut lat, 0.5));
                    self.report.metric(&format!("sync_4k_{label}_p99_us"), pct(&mut lat, 0.99));
                }
            }
            cfg.bar1_sync_max = NvidiaConfig::default().bar1_sync_max;
            self.gpu.nv.set_config(cfg);
            self.gpu.free(&a);
        }

        fn vector_add(&mut self, k: &Kernel, n: u32, rng: &mut Rng) -> bool {
            let name = format!("vector_add n={n}");
            let bytes = n as u64 * 4;
            let bufs: Result<Vec<Allocation>, String> =
                (0..3).map(|_| self.gpu.alloc(bytes, DATA, CachePolicy::Uncached, BufferKind::Data)).collect();
            let bufs = match bufs {
                Ok(b) => b,
                Err(e) => return self.report.check(&name, false, e),
            };
            let (a, b, c) = (bufs[0], bufs[1], bufs[2]);
            let r = (|| -> Result<String, String> {
                let fa: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
                let fb: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
                let put = |s: &Self, x: &Allocation, v: &[f32]| {
                    for (d, f) in s.gpu.bytes(x).chunks_exact_mut(4).zip(v) {
                        d.copy_from_slice(&f.to_le_bytes());
                    }
                };
                put(self, &a, &fa);
                put(self, &b, &fb);
                self.gpu.bytes(&c).fill(0xff); // NaN poison in video memory...
                self.gpu.to_gpu(&a, bytes)?;
                self.gpu.to_gpu(&b, bytes)?;
                self.gpu.to_gpu(&c, bytes)?;
                self.gpu.bytes(&c).fill(0xee); // ...and a different poison in staging
                let args = Self::pack(&k.info, &[Arg::U64(a.va), Arg::U64(b.va), Arg::U64(c.va), Arg::U32(n)]);
                let l = k.launch(&args, [256, 1, 1], [n.div_ceil(256), 1, 1], Order::AfterPrevious);
                let (dt, _) = self.run(&[l], false, Duration::from_secs(2))?;
                self.gpu.to_cpu(&c, bytes)?;
                let got = self.gpu.bytes(&c);
                let mut bad = 0u64;
                let mut first = None;
                for i in 0..n as usize {
                    let g = f32::from_le_bytes(got[4 * i..4 * i + 4].try_into().unwrap());
                    let w = fa[i] + fb[i];
                    if g.to_bits() != w.to_bits() {
                        bad += 1;
                        first.get_or_insert((i, g, w));
                    }
                }
                match first {
                    None => Ok(format!("all {n} elements equal the CPU sum; launch round trip {dt:?}")),
                    Some((i, g, w)) => Err(format!("{bad} of {n} wrong; first at {i}: got {g} want {w}")),
                }
            })();
            for x in &bufs {
                self.gpu.free(x);
            }
            match r {
                Ok(d) => self.report.check(&name, true, d),
                Err(e) => self.report.check(&name, false, e),
            }
        }

        fn local_array(&mut self, k: &Kernel, rng: &mut Rng) {
            let threads = 128 * 264u32;
            let out = match self.gpu.alloc(threads as u64 * 4, DATA, CachePolicy::Uncached, BufferKind::Data) {
                Ok(o) => o,
                Err(e) => {
                    self.report.fail("local_array", e);
                    return;
                }
            };
            let kv = rng.next() as u32;
            let r = (|| -> Result<String, String> {
                self.gpu.bytes(&out).fill(0xcd);
                self.gpu.to_gpu(&out, out.bytes)?;
                let before = self.gpu.nv.local_bytes_per_thread();
                let args = Self::pack(&k.info, &[Arg::U64(out.va), Arg::U32(kv)]);
                let l = k.launch(&args, [128, 1, 1], [264, 1, 1], Order::AfterPrevious);
                self.run(&[l], false, Duration::from_secs(2))?;
                self.gpu.to_cpu(&out, out.bytes)?;
                let got = self.gpu.bytes(&out);
                for g in 0..threads {
                    let t = g % 128;
                    let mut buf = [0u32; 64];
                    let mut v = kv.wrapping_add(t);
                    for i in 0..64u32 {
                        buf[((5 * i + t) & 63) as usize] = v;
                        v = v.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    }
                    let want = buf[((t * 7 + kv) & 63) as usize];
                    let have = u32::from_le_bytes(got[4 * g as usize..4 * g as usize + 4].try_into().unwrap());
                    if have != want {
                        return Err(format!("thread {g}: got {have:#x}, want {want:#x}"));
                    }
                }
                Ok(format!(
                    "{threads} threads with a 256-byte stack match the CPU; SLM {before} -> {} B/thread (kernel needs {})",
                    self.gpu.nv.local_bytes_per_thread(),
                    k.info.local_bytes_per_thread
                ))
            })();
            match r {
                Ok(d) => self.report.check("local_array (stack in SLM)", true, d),
                Err(e) => self.report.check("local_array (stack in SLM)", false, e),
            };
            self.gpu.free(&out);
        }

        fn launch_latency(&mut self, k: &Kernel, iters: usize) {
            let mut lat = Vec::new();
            for i in 0..iters + 200 {
                let l = k.launch(&[], [1, 1, 1], [1, 1, 1], Order::AfterPrevious);
                match self.run(&[l], false, Duration::from_secs(2)) {
                    Ok((dt, _)) => {
                        if i >= 200 {
                            lat.push(dt.as_secs_f64() * 1e6);
                        }
                    }
                    Err(e) => {
                        self.report.fail("empty launch latency", e);
                        return;
                    }
                }
            }
            let p50 = pct(&mut lat, 0.5);
            self.report.check(
                "empty launch latency",
                true,
                format!("{iters} launch+wait round trips, p50 {p50:.2} us"),
            );
            self.report.metric("roundtrip_p10_us", pct(&mut lat, 0.1));
            self.report.metric("roundtrip_p50_us", p50);
            self.report.metric("roundtrip_p99_us", pct(&mut lat, 0.99));
        }

        /// Dependent launches of the timestamps kernel must not overlap: every block of launch i + 1
        /// starts after every block of launch i has ended.
        fn ordering(&mut self, k: &Kernel, barrier: Barrier, order: Order) {
            let name = format!("ordering {barrier:?} {order:?}");
            let (launches, blocks) = (6usize, 264u32);
            let per = blocks as u64 * 16;
            let buf = match self.gpu.alloc(per * launches as u64, DATA, CachePolicy::Uncached, BufferKind::Data) {
                Ok(b) => b,
                Err(e) => {
                    self.report.fail(&name, e);
                    return;
                }
            };
            let mut cfg = self.gpu.nv.config();
            cfg.barrier = barrier;
            self.gpu.nv.set_config(cfg.clone());
            let r = (|| -> Result<String, String> {
                self.gpu.bytes(&buf).fill(0);
                self.gpu.to_gpu(&buf, buf.bytes)?;
                let args: Vec<Vec<u32>> = (0..launches)
                    .map(|i| Self::pack(&k.info, &[Arg::U64(buf.va + per * i as u64), Arg::U64(20_000)]))
                    .collect();
                let ls: Vec<LaunchDesc<'_>> =
                    args.iter().map(|a| k.launch(a, [32, 1, 1], [blocks, 1, 1], order)).collect();
                let (dt, m0_first) = self.run(&ls, true, Duration::from_secs(2))?;
                self.gpu.to_cpu(&buf, buf.bytes)?;
                let v = self.gpu.bytes(&buf);
                let word = |i: usize| u64::from_le_bytes(v[8 * i..8 * i + 8].try_into().unwrap());
                let mut spans = Vec::new();
                for l in 0..launches {
                    let (mut lo, mut hi) = (u64::MAX, 0u64);
                    for b in 0..blocks as usize {
                        let base = (l * blocks as usize + b) * 2;
                        let (s, e) = (word(base), word(base + 1));
                        if s == 0 || e < s {
                            return Err(format!("launch {l} block {b} did not record (start {s}, end {e})"));
                        }
                        lo = lo.min(s);
                        hi = hi.max(e);
                    }
                    spans.push((lo, hi));
                }
                let overlaps = spans.windows(2).filter(|w| w[1].0 < w[0].1).count();
                // Stamps: every launch released the sequence with a timestamp.
                let seq = self.seq();
                let stamps = self.markers()?.slot(STAMPS);
                let stamps_ok = (0..launches).all(|i| {
                    // SAFETY: inside the marker buffer (stamps at +64, 16 bytes per launch).
                    let p = unsafe { stamps.cpu.add(16 * i) };
                    // SAFETY: as above.
                    let (pay, ts) =
                        unsafe { ((p as *const u32).read_volatile(), (p.add(8) as *const u64).read_volatile()) };
                    pay == seq && ts != 0
                });
                let detail = format!(
                    "{launches} launches of {blocks} blocks x 20 us in {dt:?}; overlapping pairs {overlaps}; marker0 before marker1: {m0_first}; stamps released: {stamps_ok}"
                );
                let must_not_overlap = order == Order::AfterPrevious;
                if (must_not_overlap && overlaps > 0) || !m0_first || !stamps_ok {
                    Err(detail)
                } else {
                    Ok(detail)
                }
            })();
            match r {
                Ok(d) => self.report.check(&name, true, d),
                Err(e) => self.report.check(&name, false, e),
            };
            cfg.barrier = Barrier::Auto;
            self.gpu.nv.set_config(cfg);
            self.gpu.free(&buf);
        }

        fn many_launches(&mut self, k: &Kernel, barrier: Barrier, order: Order) {
            let mut cfg = self.gpu.nv.config();
            cfg.barrier = barrier;
            self.gpu.nv.set_config(cfg.clone());
            let n = 1000;
            let ls: Vec<LaunchDesc<'_>> = (0..n).map(|_| k.launch(&[], [32, 1, 1], [1, 1, 1], order)).collect();
            let mut per = Vec::new();
            for rep in 0..8 {
                match self.run(&ls, false, Duration::from_secs(2)) {
                    Ok((dt, _)) => {
                        if rep >= 2 {
                            per.push(dt.as_secs_f64() * 1e6 / n as f64);
                        }
                    }
                    Err(e) => {
                        self.report.fail(&format!("1000 launches {barrier:?} {order:?}"), e);
                        break;
                    }
                }
            }
            if !per.is_empty() {
                let p50 = pct(&mut per, 0.5);
                let key = format!(
                    "launch_1000_{}_{}_per_launch_us",
                    format!("{barrier:?}").to_lowercase(),
                    format!("{order:?}").to_lowercase()
                );
                self.report.metric(&key, p50);
                self.report.check(
                    &format!("1000 launches {barrier:?} {order:?}"),
                    true,
                    format!("{p50:.3} us per launch"),
                );
            }
            cfg.barrier = Barrier::Auto;
            self.gpu.nv.set_config(cfg);
        }
    }

    fn main_suite(s: &mut Smoke) {
        let mut rng = Rng::new();
        if !s.open() {
            return;
        }
        s.allocations();
        s.semaphore_only(10_000);
        for bytes in [4096u64, 64 << 10, 1 << 20, 64 << 20, 1 << 30] {
            s.sync_roundtrip(bytes, &mut rng);
        }
        // The CE path for a small sync to the GPU, too.
        let mut cfg = s.gpu.nv.config();
        cfg.bar1_sync_max = 0;
        s.gpu.nv.set_config(cfg.clone());
        s.sync_roundtrip(4096, &mut rng);
        cfg.bar1_sync_max = NvidiaConfig::default().bar1_sync_max;
        s.gpu.nv.set_config(cfg);
        s.sync_speed();

        let kernels: Vec<(&str, Result<Kernel, String>)> =
            ["vector_add", "empty", "timestamps", "local_array"].into_iter().map(|n| (n, s.gpu.load(n))).collect();
        let mut k = std::collections::HashMap::new();
        for (n, r) in kernels {
            match r {
                Ok(kern) => {
                    s.report.check(
                        &format!("load {n}"),
                        true,
                        format!(
                            "{} regs, {} B code at {:#x}, shared {}, local {}",
                            kern.info.registers,
                            kern.info.code_bytes,
                            kern.code.va,
                            kern.info.shared_bytes,
                            kern.info.local_bytes_per_thread
                        ),
                    );
                    k.insert(n, kern);
                }
                Err(e) => {
                    s.report.fail(&format!("load {n}"), e);
                }
            }
        }
        if let Some(va) = k.get("vector_add") {
            for n in [1000, (1 << 24) + 3] {
                s.vector_add(va, n, &mut rng);
            }
        }
        if let Some(la) = k.get("local_array") {
            s.local_array(la, &mut rng);
        }
        if let Some(e) = k.get("empty") {
            s.launch_latency(e, 10_000);
        }
        if let Some(t) = k.get("timestamps") {
            s.ordering(t, Barrier::Auto, Order::AfterPrevious);
            s.ordering(t, Barrier::IdleRelease, Order::AfterPrevious);
            s.ordering(t, Barrier::Auto, Order::Independent);
        }
        if let Some(e) = k.get("empty") {
            s.many_launches(e, Barrier::Auto, Order::AfterPrevious);
            s.many_launches(e, Barrier::IdleRelease, Order::AfterPrevious);
            s.many_launches(e, Barrier::Auto, Order::Independent);
        }
        for (_, kern) in k.drain() {
            s.gpu.free(&kern.code);
        }
        s.close();

        // Reopen: a second open in the same process must work after close.
        if s.open() {
            if let Ok(va) = s.gpu.load("vector_add") {
                s.vector_add(&va, 4099, &mut rng);
                s.gpu.free(&va.code);
            }
            s.close();
        }
    }

    fn quick(s: &mut Smoke) {
        let mut rng = Rng::new();
        if !s.open() {
            return;
        }
        match s.gpu.load("vector_add") {
            Ok(va) => {
                s.vector_add(&va, 1 << 20, &mut rng);
                s.gpu.free(&va.code);
            }
            Err(e) => {
                s.report.fail("load vector_add", e);
            }
        }
        s.close();
    }

    /// A store to an unmapped address: the wait must end with the channel's Xid 31, not with its timeout.
    ///
    /// The driver writes the error notifier when it has recovered the channel, 80-130 ms after the fault on
    /// the H200 (measured), so the wait here allows 1 s and the time the fault took to show is printed.
    fn fault(s: &mut Smoke) {
        if !s.open() {
            return;
        }
        let k = match s.gpu.load("store_to") {
            Ok(k) => k,
            Err(e) => {
                s.report.fail("load store_to", e);
                return;
            }
        };
        let args = Smoke::pack(&k.info, &[Arg::U64(0x7f00_0000_1000), Arg::U32(0xdead)]);
        let l = k.launch(&args, [32, 1, 1], [1, 1, 1], Order::AfterPrevious);
        let t = Instant::now();
        match s.run(&[l], false, Duration::from_millis(1000)) {
            Ok(_) => {
                s.report.fail("fault: store to unmapped VA", "completed without a fault");
            }
            Err(e) => {
                let f = s.gpu.nv.poll().unwrap().channel_fault();
                let ok = f.as_ref().is_some_and(|f| f.xid == 31) && e.starts_with("channel fault");
                s.report.metric("fault_wait_end_ms", t.elapsed().as_secs_f64() * 1e3);
                s.report.check(
                    "fault: store to unmapped VA ends the wait with Xid 31",
                    ok,
                    format!("{e}; channel_fault = {f:?}"),
                );
                // Diagnosis: how long the driver takes to write the notifier, if it does at all.
                let mut late = None;
                while t.elapsed() < Duration::from_secs(6) {
                    if let Some(f) = s.gpu.nv.poll().unwrap().channel_fault() {
                        late = Some((t.elapsed(), f));
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                match &late {
                    Some((dt, f)) => {
                        s.report.metric("fault_notifier_ms", dt.as_secs_f64() * 1e3);
                        println!("# notifier written after {dt:?}: {f}");
                    }
                    None => println!("# notifier still clean after {:?}", t.elapsed()),
                }
                if let Some((n, get, put)) = s.gpu.nv.channel_state(3) {
                    println!("# notifier[0..3] {n:?}; GPGet {get}, GPPut {put}");
                }
            }
        }
        // The channel is dead: leave without freeing (the driver tears it down at exit).
        s.report.exit();
    }

    /// A kernel that never ends: the 100 ms wait times out with no channel error; exiting tears it down.
    fn hang(s: &mut Smoke) {
        if !s.open() {
            return;
        }
        let k = match s.gpu.load("spin") {
            Ok(k) => k,
            Err(e) => {
                s.report.fail("load spin", e);
                return;
            }
        };
        let flag = s.gpu.alloc(4096, DATA, CachePolicy::Uncached, BufferKind::Data).expect("flag");
        s.gpu.bytes(&flag).fill(0);
        s.gpu.to_gpu(&flag, 4096).expect("flag to GPU");
        let args = Smoke::pack(&k.info, &[Arg::U64(flag.va)]);
        let l = k.launch(&args, [32, 1, 1], [132, 1, 1], Order::AfterPrevious);
        let t = Instant::now();
        match s.run(&[l], false, Duration::from_millis(100)) {
            Ok(_) => {
                s.report.fail("hang: spinning kernel times out", "completed");
            }
            Err(e) => {
                let fault = s.gpu.nv.poll().unwrap().channel_fault();
                let ok = e.contains("timeout") && fault.is_none();
                s.report.check(
                    "hang: spinning kernel times out",
                    ok,
                    format!("{e} after {:?}; channel_fault = {fault:?}", t.elapsed()),
                );
            }
        }
        s.report.exit();
    }

    pub fn main() {
        let mode = harness::arg(1, "main");
        let dir = PathBuf::from(harness::arg(2, ".gpu"));
        let mut cfg = NvidiaConfig::default();
        if let Ok(v) = std::env::var("NV_SMOKE_VASPACE_FLAGS") {
            cfg.vaspace_flags = u32::from_str_radix(v.trim_start_matches("0x"), 16).unwrap_or(cfg.vaspace_flags);
        }
        cfg.debugger = std::env::var("NV_SMOKE_DEBUGGER").is_ok_and(|v| v == "1");
        println!("# config: {cfg:?}");
        let gpu = Gpu { nv: harness::probe(cfg), dir, min_registers: 8 };
        let mut s = Smoke { gpu, report: Report::new("nv"), markers: None };
        match mode.as_str() {
            "main" => main_suite(&mut s),
            "quick" => quick(&mut s),
            "fault" => fault(&mut s),
            "hang" => hang(&mut s),
            other => {
                println!("[FAIL] unknown mode {other}");
                s.report.failures += 1;
            }
        }
        println!("# nv_smoke {mode}: {} failure(s)", s.report.failures);
        s.report.exit();
    }
}
