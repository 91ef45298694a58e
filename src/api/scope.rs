//! The allocation scope and the launch token.

use core::marker::PhantomData;

use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::launch::Launch;
use crate::locked::{Latched, Locked};
use crate::mem::Mem;
use crate::session::{runtime, AllocStats, DriverStats, LaunchCompletion};
use crate::state::{Cached, Code, Data, Device, DeviceScalar, Open};

/// The memory of one [`Locked::scope`]: every buffer allocated here lives no longer than the scope.
pub struct Scope<'s> {
    // Invariant in 's: a scope's buffers can never be passed off as another scope's.
    _brand: PhantomData<fn(&'s ()) -> &'s ()>,
    _not_send: PhantomData<*const ()>,
}

impl<'s> Scope<'s> {
    pub(crate) fn new() -> Self {
        Scope { _brand: PhantomData, _not_send: PhantomData }
    }

    /// A data buffer of `len` elements of `T`.
    pub fn alloc<T: DeviceScalar>(&'s self, len: usize) -> Result<Mem<'s, Data<T>>> {
        Mem::alloc(len)
    }

    /// A data buffer holding a copy of `src` (written and synced to the device).
    pub fn alloc_from<T: DeviceScalar>(&'s self, src: &[T]) -> Result<Mem<'s, Data<T>>> {
        let mut m: Mem<'s, Data<T>> = Mem::alloc(src.len())?;
        m.write(src)?;
        Ok(m)
    }

    /// A GPU-cached, GPU-read-only buffer of `len` elements (write it once with `write_once`).
    pub fn alloc_cached<T: DeviceScalar>(&'s self, len: usize) -> Result<Mem<'s, Cached<T>>> {
        Mem::alloc(len)
    }

    /// A device-only buffer of `len` elements of `T`: no CPU view, so nothing of the host is pinned or
    /// mapped for it (its size is bounded by device memory alone). Move data with `write` / `read`.
    pub fn alloc_device<T: DeviceScalar>(&'s self, len: usize) -> Result<Mem<'s, Device<T>>> {
        Mem::alloc(len)
    }

    /// A device-only buffer holding a copy of `src` (written through the platform's staging).
    pub fn alloc_device_from<T: DeviceScalar>(&'s self, src: &[T]) -> Result<Mem<'s, Device<T>>> {
        let mut m: Mem<'s, Device<T>> = Mem::alloc(src.len())?;
        m.write(src)?;
        Ok(m)
    }

    /// A code buffer of `bytes` bytes plus the zero-filled prefetch tail.
    pub fn alloc_code(&'s self, bytes: usize) -> Result<Mem<'s, Code>> {
        Mem::alloc(bytes)
    }

    /// Loads kernel `name` of the repository's kernels (the cubin on a GPU, the host reference on the
    /// simulator).
    pub fn load(&'s self, name: &str) -> Result<Kernel<'s>> {
        Kernel::load_named(self, name)
    }

    /// Loads kernel `entry` from a cubin image (its whole module is loaded; see [`Scope::load_module`]).
    pub fn load_cubin(&'s self, cubin: &[u8], entry: &str) -> Result<Kernel<'s>> {
        Kernel::load_cubin(self, cubin, entry)
    }

    /// Loads a cubin — any that nvcc or ptxas emits for the device: executable or relocatable, C++
    /// template kernels, `__device__` data, `printf` — and returns the module, whose kernels
    /// [`Module::kernel`](crate::kernel::Module::kernel) takes by name. The module loads when some of its
    /// kernels need symbols nobody provides; those kernels are refused at their own load, naming the
    /// symbol.
    pub fn load_module(&'s self, cubin: &[u8]) -> Result<crate::kernel::Module<'s>> {
        crate::kernel::Module::load(self, cubin)
    }

    /// What the open device is (its SM count sizes a library's grids).
    pub fn device(&self) -> crate::DeviceInfo {
        runtime().device_info().expect("a scope exists only while the device is open")
    }

    /// Loads the repository's CUDA C++ module `name` (`kernels/cuda/<name>.cu`, built by nvcc at build
    /// time): its machine code on the GPU, its kernels' host references on the simulator. Refused (stage
    /// `load`, naming the missing tool) in a build without nvcc.
    pub fn load_cuda_module(&'s self, name: &str) -> Result<crate::kernel::Module<'s>> {
        match crate::kernels::cuda_module(name) {
            Ok(cubin) => crate::kernel::Module::load(self, cubin),
            Err(why) => Err(Error::Load(crate::error::LoadError::NotBuilt { kernel: name.to_string(), why })),
        }
    }

    /// The platform's name.
    pub fn platform(&self) -> &'static str {
        runtime().platform_name().unwrap_or("none")
    }

    /// Seals the session for serving: until [`Scope::unseal`] (or close), every call that would ask the
    /// driver (an allocation no held chunk can carve, a module load that needs a new buffer, anything
    /// that reaches an ioctl or a mapping) is refused with its stage and never made; launches, waits,
    /// reads and writes of buffers through their views go on. Refused on a platform that cannot count
    /// its driver calls, and when sealed already.
    pub fn seal(&self) -> Result<()> {
        runtime().seal()
    }

    /// Ends the seal; buffers freed while sealed are given back to the platform now.
    pub fn unseal(&self) -> Result<()> {
        runtime().unseal()
    }

    /// Whether the session is sealed for serving.
    pub fn is_sealed(&self) -> bool {
        runtime().is_sealed()
    }

    /// What the platform asked its driver for so far (`None`: a platform that cannot count it).
    pub fn driver_stats(&self) -> Option<DriverStats> {
        runtime().driver_stats()
    }

    /// The session's allocation counters.
    pub fn alloc_stats(&self) -> AllocStats {
        runtime().alloc_stats()
    }
}

/// The right to launch in scope `'s`. There is one per scope; a launch consumes it and hands it back
/// unless the launch latched the process — after which no launch can be written with it.
pub struct Gpu<'s> {
    _brand: PhantomData<fn(&'s ()) -> &'s ()>,
    _not_send: PhantomData<*const ()>,
}

/// A completed launch, and the token for the next.
#[derive(Debug)]
pub struct Launched<'s> {
    /// The launch token, back.
    pub gpu: Gpu<'s>,
    /// Submit to second marker, nanoseconds on the platform clock.
    pub elapsed_ns: u64,
    /// The first marker word observed.
    pub marker: u32,
}

/// A failed launch. `gpu` is the token back when the process is not latched (the failure was certain:
/// refused arguments, a cancel before submit, a kernel fault); `None` when the completion was uncertain.
#[derive(Debug)]
pub struct LaunchError<'s> {
    /// The token, when launching may go on.
    pub gpu: Option<Gpu<'s>>,
    /// What failed, naming its stage.
    pub error: Error,
}

impl core::fmt::Display for LaunchError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for LaunchError<'_> {}

impl From<LaunchError<'_>> for Error {
    fn from(e: LaunchError<'_>) -> Error {
        e.error
    }
}

impl core::fmt::Debug for Gpu<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Gpu")
    }
}

impl<'s> Gpu<'s> {
    pub(crate) fn new() -> Self {
        Gpu { _brand: PhantomData, _not_send: PhantomData }
    }

    /// Runs `launch` to completion.
    pub fn launch(self, launch: &Launch<'_, 's>) -> core::result::Result<Launched<'s>, LaunchError<'s>> {
        match launch.run() {
            Ok(LaunchCompletion { elapsed_ns, marker }) => Ok(Launched { gpu: self, elapsed_ns, marker }),
            Err(error) if runtime().is_blocked() => Err(LaunchError { gpu: None, error }),
            Err(error) => Err(LaunchError { gpu: Some(self), error }),
        }
    }
}

/// How a scope ended.
#[derive(Debug)]
pub enum Scoped<R> {
    /// Every completion was certain: the device is open and the lock held.
    Open(Locked<Open>, R),
    /// A completion was uncertain: the process is latched.
    Latched(Latched, R),
}

impl<R> Scoped<R> {
    /// The open token and the scope's value; `Err` with the latch when the scope latched.
    pub fn into_open(self) -> core::result::Result<(Locked<Open>, R), (Latched, R)> {
        match self {
            Scoped::Open(l, r) => Ok((l, r)),
            Scoped::Latched(l, r) => Err((l, r)),
        }
    }

    /// The scope's value, dropping the token (and so releasing the lock).
    pub fn value(self) -> R {
        match self {
            Scoped::Open(_, r) | Scoped::Latched(_, r) => r,
        }
    }
}

impl core::fmt::Debug for Locked<Open> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Locked<Open>")
    }
}
