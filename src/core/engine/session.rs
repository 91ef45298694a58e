//! The session backend: runs the job on a [`Runtime`] — the process's (the GPU, or the simulator where there
//! is none) or a private one (tests) — through the same calls a program makes: alloc, sync, the repository's
//! `vector_add` kernel, the two-marker wait, readback, free.

use super::backend::{Backend, CompletedLaunch, LaunchFailure, StepCause, Unready};
use super::types::{BackendDiag, Timeouts, Wait, BACKEND_SESSION};
use crate::error::Error;
use crate::session::{
    runtime, AllocKind, GpuMem, LaunchShape, LaunchSpec, Runtime, ENGINE_BUFFER, MAX_ARGS, PIN_ENGINE,
};
use crate::sync;

/// The kernel every VECTOR_1D job runs.
const KERNEL: &str = "vector_add";
/// Threads per block of the launch.
const BLOCK: u32 = 256;

/// The engine's backend on a session runtime.
///
/// The caller of [`super::execute`] holds that runtime's session lock, as for any call that touches the
/// device; the backend opens the device if it is not open.
///
/// From a successful `prepare` to `release` the backend holds CPU views of its buffers across the engine's
/// clock callback, which is caller code: so its buffers are the library's (`ENGINE_BUFFER`: the raw free
/// refuses them) and the lock is pinned (the raw unlock is refused), so that no callback can release them
/// or let another thread close the device under the run.
pub struct SessionBackend {
    rt: &'static Runtime,
    /// a, b, out.
    data: Vec<GpuMem>,
    code: Option<GpuMem>,
    diag: BackendDiag,
    /// The lock is pinned for the run in progress.
    pinned: bool,
}

// SAFETY: the raw pointers in the held `GpuMem`s are CPU views of session buffers, mapped for the whole
// process; they are only dereferenced by the engine's run (one at a time, under the engine mutex) while the
// calling thread holds the session lock, so moving the backend to another thread moves sole use with it.
unsafe impl Send for SessionBackend {}

impl core::fmt::Debug for SessionBackend {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SessionBackend").field("platform", &self.rt.platform_name()).finish()
    }
}

impl SessionBackend {
    /// On the process's runtime (what `omega_gpu_execute` uses by default).
    pub fn process() -> Self {
        Self::on(runtime())
    }

    /// On `rt` (a private runtime; on the NVIDIA platform only the process's runtime exists).
    pub fn on(rt: &'static Runtime) -> Self {
        SessionBackend {
            rt,
            data: Vec::new(),
            code: None,
            diag: BackendDiag { backend: BACKEND_SESSION, ..Default::default() },
            pinned: false,
        }
    }

    fn unpin(&mut self) {
        if std::mem::take(&mut self.pinned) {
            self.rt.unpin_lock(PIN_ENGINE);
        }
    }

    /// Writes the kernel to a code buffer and registers what its launches need.
    fn place_kernel(&mut self) -> Result<u64, Error> {
        let rt = self.rt;
        let installed = rt.installed()?;
        if installed.platform.code_format() == omega_hal::CodeFormat::SimImage {
            // The simulator runs the host reference named by a code image. Described by the host spec, not the
            // shared loader, because that loader consults the process's runtime and this one may be private.
            let spec = crate::kernels::host_spec(KERNEL)
                .ok_or_else(|| Error::Load(crate::error::LoadError::NoSuchRepositoryKernel(KERNEL.to_string())))?;
            let (image, meta) = crate::loader::sim_spec_kernel(&installed, spec);
            let code = rt.alloc_owned(image.len(), AllocKind::Code, ENGINE_BUFFER)?;
            self.code = Some(code);
            self.diag.buffers += 1;
            write_and_sync(rt, &code, &image)?;
            rt.register_kernel(code.va, meta)?;
            return Ok(code.va);
        }
        // The repository's loader; it reads the process runtime's device, the only one on a GPU platform.
        let loaded = crate::loader::prepare_named(KERNEL)?;
        let code = rt.alloc_owned(loaded.image_bytes, AllocKind::Code, ENGINE_BUFFER)?;
        self.code = Some(code);
        self.diag.buffers += 1;
        let image = loaded.relocate(code.va)?;
        write_and_sync(rt, &code, &image)?;
        let entry = code.va + loaded.entry_offset;
        rt.register_kernel(entry, loaded.meta_at(code.va))?;
        Ok(entry)
    }
}

/// Copies `bytes` to the start of `m`'s CPU view and makes them visible to the device.
fn write_and_sync(rt: &Runtime, m: &GpuMem, bytes: &[u8]) -> Result<(), Error> {
    assert!(bytes.len() <= m.size && !m.cpu.is_null(), "buffers are allocated for what is written");
    // SAFETY: `m` is a live session buffer of `m.size >= bytes.len()` bytes with a CPU view (asserted), and
    // no launch is running (launches are synchronous and the caller holds the lock).
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), m.cpu.cast::<u8>(), bytes.len()) };
    rt.sync_range_to_gpu(m, 0, bytes.len())
}

fn f32_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: any f32 is four initialised bytes, u8 has alignment 1, and the length covers exactly `v`.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

fn addr(va: u64) -> [u32; 2] {
    [va as u32, (va >> 32) as u32]
}

impl Backend for SessionBackend {
    fn kind(&self) -> u32 {
        BACKEND_SESSION
    }

    fn now_ns(&self) -> u64 {
        self.rt.now_ns()
    }

    fn prepare(&mut self) -> Result<(), Unready> {
        // A run that ended in a panic never reached `release`.
        self.unpin();
        self.diag = BackendDiag { backend: BACKEND_SESSION, ..Default::default() };
        let rt = self.rt;
        if !rt.holds_lock() {
            return Err(Unready::Unavailable(StepCause::LockNotHeld));
        }
        if rt.is_blocked() {
            let cause = rt.latch_cause().expect("a latched session keeps its cause");
            return Err(Unready::Latched(StepCause::SessionLatched { cause: Box::new(cause) }));
        }
        rt.open().map_err(|e| Unready::Unavailable(e.into()))?;
        if let Some(f) = sync::lock(&rt.session).channel_fault.clone() {
            return Err(Unready::Unavailable(StepCause::ChannelDead(f)));
        }
        // The engine calls `release` after anything from here on.
        rt.pin_lock(PIN_ENGINE);
        self.pinned = true;
        Ok(())
    }

    fn alloc(&mut self, n: usize) -> Result<(), StepCause> {
        for _ in 0..3 {
            let bytes = n.checked_mul(4).ok_or(StepCause::Overflow { n })?;
            let m = self.rt.alloc_owned(bytes, AllocKind::Data, ENGINE_BUFFER).map_err(StepCause::from)?;
            self.data.push(m);
            self.diag.buffers += 1;
        }
        Ok(())
    }

    fn upload(&mut self, a: &[f32], b: &[f32]) -> Result<(), StepCause> {
        let rt = self.rt;
        write_and_sync(rt, &self.data[0], f32_bytes(a)).map_err(StepCause::from)?;
        write_and_sync(rt, &self.data[1], f32_bytes(b)).map_err(StepCause::from)?;
        // Poisoned, so an output the kernel did not write cannot pass for a result.
        write_and_sync(rt, &self.data[2], f32_bytes(&vec![f32::NAN; a.len()])).map_err(StepCause::from)
    }

    fn launch(&mut self, n: usize, timeouts: &Timeouts) -> Result<CompletedLaunch, LaunchFailure> {
        let entry = match self.place_kernel() {
            Ok(va) => va,
            Err(e) => return Err(LaunchFailure::Refused(e.into())),
        };
        let words: Vec<u32> =
            [addr(self.data[0].va), addr(self.data[1].va), addr(self.data[2].va), [n as u32, 0]].concat()[..7].to_vec();
        let limits = timeouts.resolved();
        let spec = LaunchSpec {
            code_va: entry,
            gpr_count: 0,
            num_elements: n as u32,
            args: &words,
            max_args: MAX_ARGS as usize,
            shape: LaunchShape {
                grid: [(n as u32).div_ceil(BLOCK), 1, 1],
                block: [BLOCK, 1, 1],
                shared_bytes: 0,
                dynamic_shared_bytes: 0,
                timeout_ms: limits[0],
                spin_us: timeouts.spin_us,
                cluster: [1, 1, 1],
            },
        };
        let mut seen = 0u8;
        let wait = |seen: u8| if seen == 0 { Wait::KernelDone } else { Wait::EngineIdle };
        match self.rt.launch_each(&spec, limits, &mut seen) {
            Ok(done) => {
                self.diag.marker = done.marker;
                self.diag.kernel_ns = done.elapsed_ns;
                Ok(CompletedLaunch { kernel_ns: done.elapsed_ns, marker: done.marker })
            }
            Err(Error::Timeout { marker, .. }) => {
                Err(LaunchFailure::Timeout(if marker == 0 { Wait::KernelDone } else { Wait::EngineIdle }))
            }
            Err(Error::PollRefused(why)) => Err(LaunchFailure::PollRefused(wait(seen), Error::PollRefused(why).into())),
            // The completion could not be observed (a panic in the platform or the wait): uncertain, as a
            // refused poll is.
            Err(e @ Error::PanicAfterSubmit(_)) => Err(LaunchFailure::PollRefused(wait(seen), e.into())),
            Err(Error::CancelledAfterSubmit) => Err(LaunchFailure::Cancelled(wait(seen))),
            Err(Error::Fault(f)) => {
                self.diag.xid = f.xid;
                Err(LaunchFailure::Fault { wait: wait(seen), xid: f.xid, detail: StepCause::Fault(f) })
            }
            // Refused descriptor, cancel before submit, failed submit: the device saw nothing.
            Err(e) => Err(LaunchFailure::Refused(e.into())),
        }
    }

    fn readback(&mut self, out: &mut [f32]) -> Result<(), StepCause> {
        let c = &self.data[2];
        let bytes = std::mem::size_of_val(out);
        self.rt.sync_range_to_cpu(c, 0, bytes).map_err(StepCause::from)?;
        // SAFETY: `c` is a live session buffer of at least `bytes` bytes (allocated for `out.len()` f32) with a
        // CPU view, the kernel has completed (both markers observed) and `out` is the caller's own memory.
        unsafe { std::ptr::copy_nonoverlapping(c.cpu.cast::<f32>(), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    fn release(&mut self) {
        // Latched, these park instead of releasing; a failure (a device closed under the run) leaves
        // nothing to release, and the run's own outcome is what it reports.
        for mut m in self.data.drain(..).chain(self.code.take()) {
            let _ = self.rt.release(&mut m, ENGINE_BUFFER);
        }
        self.unpin();
    }

    fn diag(&self) -> BackendDiag {
        self.diag
    }
}
