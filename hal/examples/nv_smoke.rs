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
mod linux {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use omega_hal::cubin::{KernelInfo, Module};
    use omega_hal::nvidia::{Barrier, Nvidia, NvidiaConfig};
    use omega_hal::{
        Allocation, BufferDesc, BufferKind, CachePolicy, LaunchDesc, MarkerSlot, Order, Platform, Rights, Submission,
    };

    const DATA: Rights = Rights::CPU_READ.union(Rights::CPU_WRITE).union(Rights::GPU_READ).union(Rights::GPU_WRITE);
    const POLLED: Rights = DATA.union(Rights::HOST_POLLED);
    const CODE: Rights = Rights::CPU_WRITE.union(Rights::GPU_READ).union(Rights::GPU_EXEC);

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

    struct Smoke {
        nv: Arc<Nvidia>,
        dir: PathBuf,
        failures: u32,
        seq: u32,
        markers: Option<Allocation>,
    }

    fn pct(v: &mut [f64], p: f64) -> f64 {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[((v.len() - 1) as f64 * p).round() as usize]
    }

    /// A loaded kernel: its code buffer and launch facts.
    struct Kernel {
        code: Allocation,
        info: KernelInfo,
    }

    /// A parameter value, placed at the offset KPARAM_INFO gives.
    #[derive(Clone, Copy)]
    enum Arg {
        U64(u64),
        U32(u32),
    }

    impl Smoke {
        fn check(&mut self, name: &str, ok: bool, detail: impl std::fmt::Display) -> bool {
            if ok {
                println!("[ok] {name}: {detail}");
            } else {
                println!("[FAIL] {name}: {detail}");
                self.failures += 1;
            }
            ok
        }

        fn metric(&self, name: &str, value: f64) {
            println!("nv.{name} {value:.3}");
        }

        fn alloc(
            &self,
            bytes: u64,
            rights: Rights,
            cache: CachePolicy,
            kind: BufferKind,
        ) -> Result<Allocation, String> {
            let desc = BufferDesc { bytes: bytes.div_ceil(4096) * 4096, rights, cache, kind };
            omega_hal::check_buffer(&desc).map_err(|e| e.to_string())?;
            // SAFETY: the device is open and this single-threaded program is the only user.
            unsafe { self.nv.memory().unwrap().alloc(&desc) }.map_err(|e| e.to_string())
        }

        fn free(&self, a: &Allocation) {
            // SAFETY: `a` came from alloc and every submission touching it has completed.
            unsafe { self.nv.memory().unwrap().free(a) }
        }

        fn to_gpu(&self, a: &Allocation, len: u64) -> Result<(), String> {
            // SAFETY: `a` is live, `len <= a.bytes`, nothing is running.
            unsafe { self.nv.visibility().unwrap().sync_to_gpu(a, 0, len) }.map_err(|e| e.to_string())
        }

        fn to_cpu(&self, a: &Allocation, len: u64) -> Result<(), String> {
            // SAFETY: as for to_gpu.
            unsafe { self.nv.visibility().unwrap().sync_to_cpu(a, 0, len) }.map_err(|e| e.to_string())
        }

        // The view belongs to the device mapping, not to the `Allocation` value that describes it; the
        // allocation is a copyable description, so the borrow only ties the slice's lifetime to it.
        #[allow(clippy::mut_from_ref)]
        fn bytes<'a>(&self, a: &'a Allocation) -> &'a mut [u8] {
            // SAFETY: the CPU view of a live allocation of `bytes` bytes; this single-threaded program uses
            // one slice of it at a time.
            unsafe { std::slice::from_raw_parts_mut(a.cpu, a.bytes as usize) }
        }

        fn marker_slots(&mut self) -> Result<[MarkerSlot; 3], String> {
            if self.markers.is_none() {
                self.markers = Some(self.alloc(1 << 16, POLLED, CachePolicy::Uncached, BufferKind::Queue)?);
            }
            let m = self.markers.unwrap();
            // SAFETY: offsets inside the 64 KiB marker buffer.
            let at = |off: u64| MarkerSlot { va: m.va + off, cpu: unsafe { m.cpu.add(off as usize) } };
            Ok([at(0), at(16), at(64)])
        }

        fn load(&mut self, name: &str) -> Result<Kernel, String> {
            let path = self.dir.join(format!("{name}.cubin"));
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let arch = self.nv.arch().ok_or("device not open")?;
            let module = Module::parse(&bytes, arch).map_err(|e| e.to_string())?;
            let info = module.kernel(name).map_err(|e| e.to_string())?.clone();
            let code = self.alloc(module.alloc_bytes(), CODE, CachePolicy::Uncached, BufferKind::Code)?;
            let image = module.relocate(code.va).map_err(|e| e.to_string())?;
            let view = self.bytes(&code);
            view.fill(0);
            view[..image.len()].copy_from_slice(&image);
            self.to_gpu(&code, code.bytes)?;
            Ok(Kernel { code, info })
        }

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

        fn launch<'a>(k: &Kernel, args: &'a [u32], block: [u32; 3], grid: [u32; 3], order: Order) -> LaunchDesc<'a> {
            LaunchDesc {
                code_va: k.code.va + k.info.code_offset,
                code_bytes: k.info.code_bytes,
                gpr_count: k.info.registers.next_multiple_of(8).max(8),
                block,
                grid,
                shared_bytes: k.info.shared_bytes,
                dynamic_shared_bytes: 0,
                local_bytes_per_thread: k.info.local_bytes_per_thread,
                barrier_count: k.info.barriers,
                num_elements: 0,
                args,
                const_banks: &[],
                order,
                skip: false,
            }
        }

        /// Submits and waits for both markers; returns the round trip and whether marker 0 was already
        /// released when marker 1 was seen.
        fn run(
            &mut self,
            launches: &[LaunchDesc<'_>],
            stamps: bool,
            timeout: Duration,
        ) -> Result<(Duration, bool), String> {
            let [m0, m1, st] = self.marker_slots()?;
            self.seq = self.seq.wrapping_add(1).max(1);
            let s = Submission { launches, markers: [m0, m1], sequence: self.seq, stamps: stamps.then_some(st) };
            let t = Instant::now();
            // SAFETY: every address in `s` lies in live allocations of this platform; the previous
            // submission's markers were both observed.
            unsafe { self.nv.queue().unwrap().submit(&s) }.map_err(|e| format!("submit: {e}"))?;
            self.wait(m1, m0, t, timeout)
        }

        fn wait(
            &self,
            m1: MarkerSlot,
            m0: MarkerSlot,
            t: Instant,
            timeout: Duration,
        ) -> Result<(Duration, bool), String> {
            let poll = self.nv.poll().unwrap();
            let mut n = 0u64;
            loop {
                // SAFETY: markers live in the HOST_POLLED marker buffer.
                let v1 = unsafe { poll.poll(&m1) }.map_err(|e| e.to_string())?;
                if v1 == self.seq {
                    let dt = t.elapsed();
                    // SAFETY: as above.
                    let v0 = unsafe { poll.poll(&m0) }.map_err(|e| e.to_string())?;
                    return Ok((dt, v0 == self.seq));
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
                            "timeout after {:?} (marker0 {v0:#x}, marker1 {v1:#x}, want {:#x})",
                            t.elapsed(),
                            self.seq
                        ));
                    }
                }
                std::hint::spin_loop();
            }
        }

        fn open(&mut self) -> bool {
            let t = Instant::now();
            // SAFETY: single-threaded; the device is closed.
            match unsafe { self.nv.device().unwrap().open() } {
                Ok(info) => {
                    let sane =
                        !info.name.is_empty() && info.sm_count > 0 && info.memory_bytes > 0 && !info.pci.is_empty();
                    self.check("device query", sane, format!("{info:?}"));
                    let abi = self.nv.driver_abi().map(|a| a.verified_with).unwrap_or("?");
                    let arch = self.nv.arch().map(|a| a.name).unwrap_or("?");
                    self.check(
                        "open",
                        true,
                        format!(
                            "in {:?}; name \"{}\", {} SMs, {} MiB, sm_{}{}, driver {} (ABI entry verified with {abi}), arch {arch}, PCI {}, SLM {} B/thread",
                            t.elapsed(),
                            info.name,
                            info.sm_count,
                            info.memory_bytes >> 20,
                            info.arch_major,
                            info.arch_minor,
                            info.driver_version,
                            info.pci,
                            self.nv.local_bytes_per_thread()
                        ),
                    )
                }
                Err(e) => self.check("open", false, e),
            }
        }

        fn close(&mut self) {
            if let Some(m) = self.markers.take() {
                self.free(&m);
            }
            // SAFETY: nothing is running and every allocation of this program was freed.
            unsafe { self.nv.device().unwrap().close() };
            let errs = self.nv.last_close_errors();
            self.check("close", errs.is_empty(), format!("driver refusals during close: {errs:?}"));
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
                match self.alloc(bytes, rights, cache, kind) {
                    Ok(a) => {
                        let cpu_ok = a.cpu.is_null() != rights.intersects(Rights::CPU_READ | Rights::CPU_WRITE);
                        if !a.cpu.is_null() && kind != BufferKind::Code {
                            // Touch the whole CPU view (write then read back) where reading is allowed.
                            let v = self.bytes(&a);
                            v.fill(0xa5);
                            let ok = v.iter().all(|&b| b == 0xa5);
                            self.check(&format!("alloc {name} CPU view"), ok, "written and read back");
                        }
                        self.check(
                            &format!("alloc {name}"),
                            cpu_ok && a.va != 0,
                            format!("va {:#x}, cpu {:p}", a.va, a.cpu),
                        );
                        self.free(&a);
                    }
                    Err(e) => {
                        self.check(&format!("alloc {name}"), false, e);
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
                        self.check("semaphore-only submission", false, e);
                        return;
                    }
                }
            }
            let p50 = pct(&mut lat, 0.5);
            self.check("semaphore-only submission", true, format!("{iters} round trips, p50 {p50:.2} us"));
            self.metric("semaphore_roundtrip_p10_us", pct(&mut lat, 0.1));
            self.metric("semaphore_roundtrip_p50_us", p50);
            self.metric("semaphore_roundtrip_p99_us", pct(&mut lat, 0.99));
        }

        /// Random data to video memory and back, with both sides poisoned first.
        fn sync_roundtrip(&mut self, bytes: u64, rng: &mut Rng) {
            let name = format!("sync round trip {} KiB", bytes >> 10);
            let a = match self.alloc(bytes, DATA, CachePolicy::Uncached, BufferKind::Data) {
                Ok(a) => a,
                Err(e) => {
                    self.check(&name, false, e);
                    return;
                }
            };
            let len = bytes;
            let r = (|| -> Result<String, String> {
                let v = self.bytes(&a);
                v[..len as usize].fill(0xdb);
                self.to_gpu(&a, len)?; // video memory poisoned
                let mut want = vec![0u8; len as usize];
                rng.fill(&mut want);
                self.bytes(&a)[..len as usize].copy_from_slice(&want);
                self.to_gpu(&a, len)?;
                self.bytes(&a)[..len as usize].fill(0x5c); // staging poisoned
                self.to_cpu(&a, len)?;
                let got = &self.bytes(&a)[..len as usize];
                match got.iter().zip(&want).position(|(g, w)| g != w) {
                    None => Ok(format!("{len} random bytes back intact")),
                    Some(i) => Err(format!("first difference at byte {i}: got {:#x}, want {:#x}", got[i], want[i])),
                }
            })();
            match r {
                Ok(d) => self.check(&name, true, d),
                Err(e) => self.check(&name, false, e),
            };
            self.free(&a);
        }

        fn sync_speed(&mut self) {
            let big = 1u64 << 30;
            let a = match self.alloc(big, DATA, CachePolicy::Uncached, BufferKind::Data) {
                Ok(a) => a,
                Err(e) => {
                    self.check("sync 1 GiB", false, e);
                    return;
                }
            };
            self.bytes(&a).fill(0x3c);
            let default_chunk = self.nv.config().copy_chunk_bytes;
            for chunk in [default_chunk, 256 << 20, 64 << 20, 16 << 20, 4 << 20] {
                let mut cfg = self.nv.config();
                cfg.copy_chunk_bytes = chunk;
                self.nv.set_config(cfg);
                for (dir, name) in [(0, "to_gpu"), (1, "to_cpu")] {
                    let mut best = f64::MAX;
                    for _ in 0..5 {
                        let t = Instant::now();
                        let r = if dir == 0 { self.to_gpu(&a, big) } else { self.to_cpu(&a, big) };
                        if let Err(e) = r {
                            self.check("sync 1 GiB", false, e);
                            self.free(&a);
                            return;
                        }
                        best = best.min(t.elapsed().as_secs_f64());
                    }
                    let gbps = big as f64 / best / 1e9;
                    let tag = if chunk == default_chunk { String::new() } else { format!("_chunk{}m", chunk >> 20) };
                    self.metric(&format!("sync_1g_{name}{tag}_gbps"), gbps);
                    self.check(&format!("sync 1 GiB {name}{tag}"), true, format!("{gbps:.1} GB/s (best of 5)"));
                }
            }
            let mut cfg = self.nv.config();
            cfg.copy_chunk_bytes = default_chunk;
            self.nv.set_config(cfg);
            self.free(&a);

            let a = self.alloc(4096, DATA, CachePolicy::Uncached, BufferKind::Data).expect("4 KiB");
            let mut cfg = self.nv.config();
            for (label, bar1) in [("to_gpu_bar1", true), ("to_gpu_ce", false), ("to_cpu", true)] {
                cfg.bar1_sync_max = if bar1 { 64 << 10 } else { 0 };
                self.nv.set_config(cfg.clone());
                let mut lat = Vec::new();
                for i in 0..11_000 {
                    let t = Instant::now();
                    let r = if label == "to_cpu" { self.to_cpu(&a, 4096) } else { self.to_gpu(&a, 4096) };
                    if let Err(e) = r {
                        self.check("sync 4 KiB", false, e);
                        break;
                    }
                    if i >= 1000 {
                        lat.push(t.elapsed().as_secs_f64() * 1e6);
                    }
                }
                if !lat.is_empty() {
                    self.metric(&format!("sync_4k_{label}_p50_us"), pct(&mut lat, 0.5));
                    self.metric(&format!("sync_4k_{label}_p99_us"), pct(&mut lat, 0.99));
                }
            }
            cfg.bar1_sync_max = NvidiaConfig::default().bar1_sync_max;
            self.nv.set_config(cfg);
            self.free(&a);
        }

        fn vector_add(&mut self, k: &Kernel, n: u32, rng: &mut Rng) -> bool {
            let name = format!("vector_add n={n}");
            let bytes = n as u64 * 4;
            let bufs: Result<Vec<Allocation>, String> =
                (0..3).map(|_| self.alloc(bytes, DATA, CachePolicy::Uncached, BufferKind::Data)).collect();
            let bufs = match bufs {
                Ok(b) => b,
                Err(e) => return self.check(&name, false, e),
            };
            let (a, b, c) = (bufs[0], bufs[1], bufs[2]);
            let r = (|| -> Result<String, String> {
                let fa: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
                let fb: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
                let put = |s: &Self, x: &Allocation, v: &[f32]| {
                    for (d, f) in s.bytes(x).chunks_exact_mut(4).zip(v) {
                        d.copy_from_slice(&f.to_le_bytes());
                    }
                };
                put(self, &a, &fa);
                put(self, &b, &fb);
                self.bytes(&c).fill(0xff); // NaN poison in video memory...
                self.to_gpu(&a, bytes)?;
                self.to_gpu(&b, bytes)?;
                self.to_gpu(&c, bytes)?;
                self.bytes(&c).fill(0xee); // ...and a different poison in staging
                let args = Self::pack(&k.info, &[Arg::U64(a.va), Arg::U64(b.va), Arg::U64(c.va), Arg::U32(n)]);
                let l = Self::launch(k, &args, [256, 1, 1], [n.div_ceil(256), 1, 1], Order::AfterPrevious);
                let (dt, _) = self.run(&[l], false, Duration::from_secs(2))?;
                self.to_cpu(&c, bytes)?;
                let got = self.bytes(&c);
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
                self.free(x);
            }
            match r {
                Ok(d) => self.check(&name, true, d),
                Err(e) => self.check(&name, false, e),
            }
        }

        fn local_array(&mut self, k: &Kernel, rng: &mut Rng) {
            let threads = 128 * 264u32;
            let out = match self.alloc(threads as u64 * 4, DATA, CachePolicy::Uncached, BufferKind::Data) {
                Ok(o) => o,
                Err(e) => {
                    self.check("local_array", false, e);
                    return;
                }
            };
            let kv = rng.next() as u32;
            let r = (|| -> Result<String, String> {
                self.bytes(&out).fill(0xcd);
                self.to_gpu(&out, out.bytes)?;
                let before = self.nv.local_bytes_per_thread();
                let args = Self::pack(&k.info, &[Arg::U64(out.va), Arg::U32(kv)]);
                let l = Self::launch(k, &args, [128, 1, 1], [264, 1, 1], Order::AfterPrevious);
                self.run(&[l], false, Duration::from_secs(2))?;
                self.to_cpu(&out, out.bytes)?;
                let got = self.bytes(&out);
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
                    self.nv.local_bytes_per_thread(),
                    k.info.local_bytes_per_thread
                ))
            })();
            match r {
                Ok(d) => self.check("local_array (stack in SLM)", true, d),
                Err(e) => self.check("local_array (stack in SLM)", false, e),
            };
            self.free(&out);
        }

        fn launch_latency(&mut self, k: &Kernel, iters: usize) {
            let mut lat = Vec::new();
            for i in 0..iters + 200 {
                let l = Self::launch(k, &[], [1, 1, 1], [1, 1, 1], Order::AfterPrevious);
                match self.run(&[l], false, Duration::from_secs(2)) {
                    Ok((dt, _)) => {
                        if i >= 200 {
                            lat.push(dt.as_secs_f64() * 1e6);
                        }
                    }
                    Err(e) => {
                        self.check("empty launch latency", false, e);
                        return;
                    }
                }
            }
            let p50 = pct(&mut lat, 0.5);
            self.check("empty launch latency", true, format!("{iters} launch+wait round trips, p50 {p50:.2} us"));
            self.metric("roundtrip_p10_us", pct(&mut lat, 0.1));
            self.metric("roundtrip_p50_us", p50);
            self.metric("roundtrip_p99_us", pct(&mut lat, 0.99));
        }

        /// Dependent launches of the timestamps kernel must not overlap: every block of launch i + 1
        /// starts after every block of launch i has ended.
        fn ordering(&mut self, k: &Kernel, barrier: Barrier, order: Order) {
            let name = format!("ordering {barrier:?} {order:?}");
            let (launches, blocks) = (6usize, 264u32);
            let per = blocks as u64 * 16;
            let buf = match self.alloc(per * launches as u64, DATA, CachePolicy::Uncached, BufferKind::Data) {
                Ok(b) => b,
                Err(e) => {
                    self.check(&name, false, e);
                    return;
                }
            };
            let mut cfg = self.nv.config();
            cfg.barrier = barrier;
            self.nv.set_config(cfg.clone());
            let r = (|| -> Result<String, String> {
                self.bytes(&buf).fill(0);
                self.to_gpu(&buf, buf.bytes)?;
                let args: Vec<Vec<u32>> = (0..launches)
                    .map(|i| Self::pack(&k.info, &[Arg::U64(buf.va + per * i as u64), Arg::U64(20_000)]))
                    .collect();
                let ls: Vec<LaunchDesc<'_>> =
                    args.iter().map(|a| Self::launch(k, a, [32, 1, 1], [blocks, 1, 1], order)).collect();
                let (dt, m0_first) = self.run(&ls, true, Duration::from_secs(2))?;
                self.to_cpu(&buf, buf.bytes)?;
                let v = self.bytes(&buf);
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
                let m = self.markers.unwrap();
                let stamps_ok = (0..launches).all(|i| {
                    // SAFETY: inside the marker buffer (stamps at +64, 16 bytes per launch).
                    let p = unsafe { m.cpu.add(64 + 16 * i) };
                    // SAFETY: as above.
                    let (pay, ts) =
                        unsafe { ((p as *const u32).read_volatile(), (p.add(8) as *const u64).read_volatile()) };
                    pay == self.seq && ts != 0
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
                Ok(d) => self.check(&name, true, d),
                Err(e) => self.check(&name, false, e),
            };
            cfg.barrier = Barrier::Auto;
            self.nv.set_config(cfg);
            self.free(&buf);
        }

        fn many_launches(&mut self, k: &Kernel, barrier: Barrier, order: Order) {
            let mut cfg = self.nv.config();
            cfg.barrier = barrier;
            self.nv.set_config(cfg.clone());
            let n = 1000;
            let ls: Vec<LaunchDesc<'_>> = (0..n).map(|_| Self::launch(k, &[], [32, 1, 1], [1, 1, 1], order)).collect();
            let mut per = Vec::new();
            for rep in 0..8 {
                match self.run(&ls, false, Duration::from_secs(2)) {
                    Ok((dt, _)) => {
                        if rep >= 2 {
                            per.push(dt.as_secs_f64() * 1e6 / n as f64);
                        }
                    }
                    Err(e) => {
                        self.check(&format!("1000 launches {barrier:?} {order:?}"), false, e);
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
                self.metric(&key, p50);
                self.check(&format!("1000 launches {barrier:?} {order:?}"), true, format!("{p50:.3} us per launch"));
            }
            cfg.barrier = Barrier::Auto;
            self.nv.set_config(cfg);
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
        let mut cfg = s.nv.config();
        cfg.bar1_sync_max = 0;
        s.nv.set_config(cfg.clone());
        s.sync_roundtrip(4096, &mut rng);
        cfg.bar1_sync_max = NvidiaConfig::default().bar1_sync_max;
        s.nv.set_config(cfg);
        s.sync_speed();

        let kernels: Vec<(&str, Result<Kernel, String>)> =
            ["vector_add", "empty", "timestamps", "local_array"].into_iter().map(|n| (n, s.load(n))).collect();
        let mut k = std::collections::HashMap::new();
        for (n, r) in kernels {
            match r {
                Ok(kern) => {
                    s.check(
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
                    s.check(&format!("load {n}"), false, e);
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
            s.free(&kern.code);
        }
        s.close();

        // Reopen: a second open in the same process must work after close.
        if s.open() {
            if let Ok(va) = s.load("vector_add") {
                s.vector_add(&va, 4099, &mut rng);
                s.free(&va.code);
            }
            s.close();
        }
    }

    fn quick(s: &mut Smoke) {
        let mut rng = Rng::new();
        if !s.open() {
            return;
        }
        match s.load("vector_add") {
            Ok(va) => {
                s.vector_add(&va, 1 << 20, &mut rng);
                s.free(&va.code);
            }
            Err(e) => {
                s.check("load vector_add", false, e);
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
        let k = match s.load("store_to") {
            Ok(k) => k,
            Err(e) => {
                s.check("load store_to", false, e);
                return;
            }
        };
        let args = Smoke::pack(&k.info, &[Arg::U64(0x7f00_0000_1000), Arg::U32(0xdead)]);
        let l = Smoke::launch(&k, &args, [32, 1, 1], [1, 1, 1], Order::AfterPrevious);
        let t = Instant::now();
        match s.run(&[l], false, Duration::from_millis(1000)) {
            Ok(_) => {
                s.check("fault: store to unmapped VA", false, "completed without a fault");
            }
            Err(e) => {
                let f = s.nv.poll().unwrap().channel_fault();
                let ok = f.as_ref().is_some_and(|f| f.xid == 31) && e.starts_with("channel fault");
                s.metric("fault_wait_end_ms", t.elapsed().as_secs_f64() * 1e3);
                s.check(
                    "fault: store to unmapped VA ends the wait with Xid 31",
                    ok,
                    format!("{e}; channel_fault = {f:?}"),
                );
                // Diagnosis: how long the driver takes to write the notifier, if it does at all.
                let mut late = None;
                while t.elapsed() < Duration::from_secs(6) {
                    if let Some(f) = s.nv.poll().unwrap().channel_fault() {
                        late = Some((t.elapsed(), f));
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                match &late {
                    Some((dt, f)) => {
                        s.metric("fault_notifier_ms", dt.as_secs_f64() * 1e3);
                        println!("# notifier written after {dt:?}: {f}");
                    }
                    None => println!("# notifier still clean after {:?}", t.elapsed()),
                }
                if let Some((n, get, put)) = s.nv.channel_state(3) {
                    println!("# notifier[0..3] {n:?}; GPGet {get}, GPPut {put}");
                }
            }
        }
        // The channel is dead: leave without freeing (the driver tears it down at exit).
        std::process::exit(if s.failures == 0 { 0 } else { 1 });
    }

    /// A kernel that never ends: the 100 ms wait times out with no channel error; exiting tears it down.
    fn hang(s: &mut Smoke) {
        if !s.open() {
            return;
        }
        let k = match s.load("spin") {
            Ok(k) => k,
            Err(e) => {
                s.check("load spin", false, e);
                return;
            }
        };
        let flag = s.alloc(4096, DATA, CachePolicy::Uncached, BufferKind::Data).expect("flag");
        s.bytes(&flag).fill(0);
        s.to_gpu(&flag, 4096).expect("flag to GPU");
        let args = Smoke::pack(&k.info, &[Arg::U64(flag.va)]);
        let l = Smoke::launch(&k, &args, [32, 1, 1], [132, 1, 1], Order::AfterPrevious);
        let t = Instant::now();
        match s.run(&[l], false, Duration::from_millis(100)) {
            Ok(_) => {
                s.check("hang: spinning kernel times out", false, "completed");
            }
            Err(e) => {
                let fault = s.nv.poll().unwrap().channel_fault();
                let ok = e.contains("timeout") && fault.is_none();
                s.check(
                    "hang: spinning kernel times out",
                    ok,
                    format!("{e} after {:?}; channel_fault = {fault:?}", t.elapsed()),
                );
            }
        }
        std::process::exit(if s.failures == 0 { 0 } else { 1 });
    }

    pub fn main() {
        let args: Vec<String> = std::env::args().collect();
        let mode = args.get(1).map(String::as_str).unwrap_or("main");
        let dir = PathBuf::from(args.get(2).map(String::as_str).unwrap_or(".gpu"));
        let mut cfg = NvidiaConfig::default();
        if let Ok(v) = std::env::var("NV_SMOKE_VASPACE_FLAGS") {
            cfg.vaspace_flags = u32::from_str_radix(v.trim_start_matches("0x"), 16).unwrap_or(cfg.vaspace_flags);
        }
        cfg.debugger = std::env::var("NV_SMOKE_DEBUGGER").is_ok_and(|v| v == "1");
        println!("# config: {cfg:?}");
        let nv = match Nvidia::probe_with(cfg) {
            Ok(nv) => nv,
            Err(e) => {
                println!("[FAIL] probe: {e}");
                std::process::exit(2);
            }
        };
        let mut s = Smoke { nv, dir: Path::new(&dir).to_path_buf(), failures: 0, seq: 0, markers: None };
        match mode {
            "main" => main_suite(&mut s),
            "quick" => quick(&mut s),
            "fault" => fault(&mut s),
            "hang" => hang(&mut s),
            other => {
                println!("[FAIL] unknown mode {other}");
                s.failures += 1;
            }
        }
        println!("# nv_smoke {mode}: {} failure(s)", s.failures);
        std::process::exit(if s.failures == 0 { 0 } else { 1 });
    }
}
