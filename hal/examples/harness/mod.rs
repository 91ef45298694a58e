//! What the two hardware programs, `nv_smoke` and `nv_probe`, share: the command line, the platform and
//! its buffers, kernels loaded from the cubin directory, the marker buffer and its sequence, submission,
//! and the report (`[ok]` / `[FAIL]` lines, metrics, the exit status).

use std::path::PathBuf;
use std::sync::Arc;

use omega_hal::cubin::{KernelInfo, Module};
use omega_hal::nvidia::{Nvidia, NvidiaConfig};
use omega_hal::{
    Allocation, BufferDesc, BufferKind, CachePolicy, LaunchDesc, MarkerSlot, Order, Platform, Rights, Submission,
};

/// A data buffer both sides read and write.
pub const DATA: Rights = Rights::CPU_READ.union(Rights::CPU_WRITE).union(Rights::GPU_READ).union(Rights::GPU_WRITE);
/// A data buffer the CPU polls.
pub const POLLED: Rights = DATA.union(Rights::HOST_POLLED);
/// Code.
pub const CODE: Rights = Rights::CPU_WRITE.union(Rights::GPU_READ).union(Rights::GPU_EXEC);

/// Command-line argument `i` (0 is the program), or `default`.
pub fn arg(i: usize, default: &str) -> String {
    std::env::args().nth(i).unwrap_or_else(|| default.to_string())
}

/// The `p`-quantile of `v`, which is sorted in place.
pub fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// What a program found: `[ok] name: detail` / `[FAIL] name: detail` lines, `<prefix>.<name> <value>`
/// metric lines, and the count of failures that decides the exit status.
pub struct Report {
    prefix: &'static str,
    pub failures: u32,
}

impl Report {
    /// A report whose metrics are `<prefix>.<name>`.
    pub fn new(prefix: &'static str) -> Report {
        Report { prefix, failures: 0 }
    }

    /// Prints the check and counts a failure; returns `ok`.
    pub fn check(&mut self, name: &str, ok: bool, detail: impl std::fmt::Display) -> bool {
        if ok {
            println!("[ok] {name}: {detail}");
        } else {
            println!("[FAIL] {name}: {detail}");
            self.failures += 1;
        }
        ok
    }

    /// A failed check.
    pub fn fail(&mut self, name: &str, why: impl std::fmt::Display) {
        self.check(name, false, why);
    }

    pub fn metric(&self, name: &str, value: f64) {
        println!("{}.{name} {value:.3}", self.prefix);
    }

    /// Ends the process: status 0 without failures, 1 with.
    pub fn exit(&self) -> ! {
        std::process::exit(if self.failures == 0 { 0 } else { 1 })
    }
}

/// The nvidia platform with `config`; where it cannot be had, the reason as a failure and exit status 2.
pub fn probe(config: NvidiaConfig) -> Arc<Nvidia> {
    match Nvidia::probe_with(config) {
        Ok(nv) => nv,
        Err(e) => {
            println!("[FAIL] probe: {e}");
            std::process::exit(2);
        }
    }
}

/// The platform a program drives, single-threaded, and where its cubins are.
pub struct Gpu {
    pub nv: Arc<Nvidia>,
    /// The directory holding `<kernel>.cubin`.
    pub dir: PathBuf,
    /// Registers a launch asks for at least (the kernel's count is rounded up to a multiple of 8 first).
    pub min_registers: u32,
}

impl Gpu {
    /// Opens the device; its report, or the driver's refusal.
    pub fn open(&self) -> Result<omega_hal::DeviceInfo, String> {
        // SAFETY: the program is single-threaded and the device is closed.
        unsafe { self.nv.device().unwrap().open() }.map_err(|e| e.to_string())
    }

    /// Closes the device.
    pub fn close(&self) {
        // SAFETY: nothing is running and every allocation of the program was freed.
        unsafe { self.nv.device().unwrap().close() }
    }

    /// A buffer of `bytes` rounded up to pages.
    pub fn alloc(
        &self,
        bytes: u64,
        rights: Rights,
        cache: CachePolicy,
        kind: BufferKind,
    ) -> Result<Allocation, String> {
        let desc = BufferDesc { bytes: bytes.div_ceil(4096) * 4096, rights, cache, kind };
        omega_hal::check_buffer(&desc).map_err(|e| e.to_string())?;
        // SAFETY: the device is open and this single-threaded program is its only user.
        unsafe { self.nv.memory().unwrap().alloc(&desc) }.map_err(|e| e.to_string())
    }

    pub fn free(&self, a: &Allocation) {
        // SAFETY: `a` came from alloc and every submission touching it has completed.
        unsafe { self.nv.memory().unwrap().free(a) }
    }

    /// Syncs the first `len` bytes of `a` to the GPU.
    pub fn to_gpu(&self, a: &Allocation, len: u64) -> Result<(), String> {
        // SAFETY: `a` is live, `len <= a.bytes`, nothing is running.
        unsafe { self.nv.visibility().unwrap().sync_to_gpu(a, 0, len) }.map_err(|e| e.to_string())
    }

    /// Syncs the first `len` bytes of `a` to the CPU.
    pub fn to_cpu(&self, a: &Allocation, len: u64) -> Result<(), String> {
        // SAFETY: as for to_gpu.
        unsafe { self.nv.visibility().unwrap().sync_to_cpu(a, 0, len) }.map_err(|e| e.to_string())
    }

    /// The CPU view of `a`.
    // The view belongs to the device mapping, not to the `Allocation` value that describes it; the
    // allocation is a copyable description, so the borrow only ties the slice's lifetime to it.
    #[allow(clippy::mut_from_ref)]
    pub fn bytes<'a>(&self, a: &'a Allocation) -> &'a mut [u8] {
        // SAFETY: the CPU view of a live allocation of `bytes` bytes; this single-threaded program uses
        // one slice of it at a time.
        unsafe { std::slice::from_raw_parts_mut(a.cpu, a.bytes as usize) }
    }

    /// `<dir>/<name>.cubin`, parsed for the open device and written, relocated, to a code buffer.
    pub fn load(&self, name: &str) -> Result<Kernel, String> {
        self.load_kernel(name, name)
    }

    /// Kernel `kernel` of `<dir>/<file>.cubin` (a module of several kernels), loaded as [`Gpu::load`] does.
    pub fn load_kernel(&self, file: &str, kernel: &str) -> Result<Kernel, String> {
        let name = kernel;
        let path = self.dir.join(format!("{file}.cubin"));
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let arch = self.nv.arch().ok_or("device not open")?;
        let module = Module::parse(&bytes, arch).map_err(|e| e.to_string())?;
        let info = module.kernel(name).map_err(|e| e.to_string())?.clone();
        let code = self.alloc(module.alloc_bytes_in_one(), CODE, CachePolicy::Uncached, BufferKind::Code)?;
        let image = module.relocate_in_one(code.va).map_err(|e| e.to_string())?;
        let view = self.bytes(&code);
        view.fill(0);
        view[..image.len()].copy_from_slice(&image);
        self.to_gpu(&code, code.bytes)?;
        Ok(Kernel { code, info, min_registers: self.min_registers })
    }

    /// Submits `s` (the submit call alone, so that it can be timed).
    pub fn submit(&self, s: &Submission<'_>) -> Result<(), String> {
        // SAFETY: every address in `s` lies in live allocations of this platform; the previous submission's
        // markers were both observed.
        unsafe { self.nv.queue().unwrap().submit(s) }.map_err(|e| format!("submit: {e}"))
    }
}

/// A loaded kernel: its code buffer and launch facts.
pub struct Kernel {
    pub code: Allocation,
    pub info: KernelInfo,
    min_registers: u32,
}

impl Kernel {
    /// A launch of the kernel with the argument words `args`.
    pub fn launch<'a>(&self, args: &'a [u32], block: [u32; 3], grid: [u32; 3], order: Order) -> LaunchDesc<'a> {
        LaunchDesc {
            code_va: self.code.va + self.info.code_offset,
            code_bytes: self.info.code_bytes,
            gpr_count: self.info.registers.next_multiple_of(8).max(self.min_registers),
            block,
            grid,
            shared_bytes: self.info.shared_bytes,
            dynamic_shared_bytes: 0,
            local_bytes_per_thread: self.info.local_bytes_per_thread,
            barrier_count: self.info.barriers,
            features: omega_hal::LaunchFeatures::NONE,
            num_elements: 0,
            args,
            const_banks: &[],
            order,
            skip: false,
        }
    }
}

/// The 64 KiB HOST_POLLED buffer the markers live in (marker 0 at 0, marker 1 at 16; from 64 on it is the
/// program's), and the sequence of the last submission.
pub struct Markers {
    pub buf: Allocation,
    pub seq: u32,
}

impl Markers {
    pub fn alloc(gpu: &Gpu) -> Result<Markers, String> {
        Ok(Markers { buf: gpu.alloc(1 << 16, POLLED, CachePolicy::Uncached, BufferKind::Queue)?, seq: 0 })
    }

    /// The slot `off` bytes into the buffer.
    pub fn slot(&self, off: u64) -> MarkerSlot {
        // SAFETY: offsets inside the 64 KiB marker buffer.
        MarkerSlot { va: self.buf.va + off, cpu: unsafe { self.buf.cpu.add(off as usize) } }
    }

    /// The next submission of `launches`, under a fresh sequence (never 0).
    pub fn submission<'a>(&mut self, launches: &'a [LaunchDesc<'a>], stamps: Option<MarkerSlot>) -> Submission<'a> {
        self.seq = self.seq.wrapping_add(1).max(1);
        Submission { launches, markers: [self.slot(0), self.slot(16)], sequence: self.seq, stamps }
    }
}
