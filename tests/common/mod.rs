//! Helpers shared by the session tests: a private runtime on a fresh simulator, and a loaded kernel.
#![allow(dead_code)]

use omega::session::{GpuMem, KernelMeta, RawLaunch, Runtime};
use omega_hal::sim::Sim;
use std::sync::Arc;

/// A private runtime on its own simulator, locked and open.
pub fn open_runtime() -> (Runtime, Arc<Sim>) {
    let installed = omega::kernels::simulator();
    let sim = omega::testing::simulator_in(&installed).unwrap();
    let rt = Runtime::with_platform(installed).expect("a fresh simulator is this runtime's");
    rt.lock().unwrap();
    rt.open().expect("sim opens");
    (rt, sim)
}

/// Loads the host kernel `name` into a code buffer the way the typed API does.
pub fn load(rt: &Runtime, name: &str) -> GpuMem {
    let image = omega_hal::sim::code_image(name);
    let code = rt.alloc_code(image.len()).unwrap();
    // SAFETY: the code buffer's CPU view holds at least `image.len()` bytes.
    unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), code.cpu.cast::<u8>(), image.len()) };
    let spec = omega::kernels::host_spec(name).unwrap();
    rt.register_kernel(code.va, KernelMeta { name: name.into(), params: spec.params(), ..Default::default() }).unwrap();
    code
}

/// A C-style launch of `code` with `args`.
pub fn raw_launch(code: &GpuMem, args: &[u32], threads: u32, grid: u32) -> RawLaunch {
    RawLaunch {
        code_va: code.va,
        gpr_count: 10,
        threads_x: threads,
        threads_y: 0,
        grid_x: grid,
        grid_y: 1,
        num_elements: threads * grid,
        args: args.as_ptr(),
        n_args: args.len() as u32,
        timeout_ms: 100,
        shared_bytes: 0,
        spin_us: 0,
    }
}

/// Splits a 64-bit GPU address into two argument words, low first.
pub fn addr(va: u64) -> [u32; 2] {
    [va as u32, (va >> 32) as u32]
}

/// Writes f32 values into a buffer's CPU view and syncs them to the device.
pub fn put_f32(rt: &Runtime, m: &GpuMem, v: &[f32]) {
    // SAFETY: the buffer's CPU view holds at least `v.len()` f32 (the tests allocate them so).
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), m.cpu.cast::<f32>(), v.len()) };
    rt.sync_to_gpu(m).unwrap();
}

/// Syncs a buffer to the CPU and reads `n` f32.
pub fn get_f32(rt: &Runtime, m: &GpuMem, n: usize) -> Vec<f32> {
    rt.sync_to_cpu(m).unwrap();
    // SAFETY: as above.
    unsafe { std::slice::from_raw_parts(m.cpu.cast::<f32>(), n).to_vec() }
}

/// The C layer's last error, as `omega_gpu_session_last_error()` hands it to C: the text C callers read,
/// which the C layer records at its boundary (Rust callers read the `Error` a call returns instead).
pub fn c_last_error() -> String {
    // SAFETY: the function returns a pointer into a NUL-terminated process-wide buffer that stays as it is
    // until the next call of it; the text is copied out at once.
    let text = unsafe { std::ffi::CStr::from_ptr(omega::ffi::session::omega_gpu_session_last_error()) };
    text.to_string_lossy().into_owned()
}

/// The simulator's services under a platform of a test's own: every service forwarded to the simulator,
/// except the submission queue when the test gives one. What the simulator declares beyond its services
/// is left at the platform contract's defaults, so a `Forwarding` platform says it runs machine code (the
/// default code format) where the simulator says it runs its code images.
pub struct Forwarding {
    sim: Arc<Sim>,
    queue: Option<Box<dyn omega_hal::SubmitQueue>>,
}

impl Forwarding {
    /// Every service the simulator's.
    pub fn new(sim: Arc<Sim>) -> Self {
        Forwarding { sim, queue: None }
    }

    /// The simulator's services, with `queue` as the submission queue.
    pub fn with_queue(sim: Arc<Sim>, queue: impl omega_hal::SubmitQueue + 'static) -> Self {
        Forwarding { sim, queue: Some(Box::new(queue)) }
    }

    /// This platform installed, with the simulator behind it for fault injection and host kernels.
    pub fn installed(self) -> omega::platform::Installed {
        let sim = self.sim.clone();
        omega::platform::Installed::simulator_behind(Arc::new(self), sim)
    }
}

impl omega_hal::Platform for Forwarding {
    fn name(&self) -> &'static str {
        "sim"
    }
    fn caps(&self) -> omega_hal::Caps {
        self.sim.caps()
    }
    fn clock(&self) -> Option<&dyn omega_hal::Clock> {
        self.sim.clock()
    }
    fn lock(&self) -> Option<&dyn omega_hal::ProcessLock> {
        omega_hal::Platform::lock(&*self.sim)
    }
    fn memory(&self) -> Option<&dyn omega_hal::DeviceMemory> {
        self.sim.memory()
    }
    fn queue(&self) -> Option<&dyn omega_hal::SubmitQueue> {
        self.queue.as_deref().or_else(|| self.sim.queue())
    }
    fn poll(&self) -> Option<&dyn omega_hal::CompletionPoll> {
        omega_hal::Platform::poll(&*self.sim)
    }
    fn host(&self) -> Option<&dyn omega_hal::HostMemory> {
        self.sim.host()
    }
    fn visibility(&self) -> Option<&dyn omega_hal::Visibility> {
        self.sim.visibility()
    }
    fn device(&self) -> Option<&dyn omega_hal::Device> {
        self.sim.device()
    }
}
