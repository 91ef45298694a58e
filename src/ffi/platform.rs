//! `omega_gpu_platform.h`: the platform contract as C sees it — its ABI number, the service, rights,
//! cache and handle-kind constants, the refusal names, the typed handles, and the simulator's fault hook.
//!
//! Everything here except the ABI number, the handle kinds and the handle types is INTERNAL in the
//! runtime API (the contract has one real backend; a second will likely change it). The values are the
//! `omega-hal` ones, asserted equal below.

use core::ffi::{c_char, c_int};

use omega_hal::sim::SimFault;
use omega_hal::{BufferKind, CachePolicy, Refusal, Rights, Services};

use super::boundary::{guard, refuse};
use crate::session::runtime;

/// Platform contract major number. A platform major bump needs a runtime API major bump.
pub const OMEGA_GPU_PLATFORM_ABI_MAJOR: u32 = 1;
/// Platform contract minor number. A platform minor bump needs at least a runtime API minor bump.
pub const OMEGA_GPU_PLATFORM_ABI_MINOR: u32 = 2;

/// Service: monotonic nanosecond clock and sleep.
pub const OMEGA_GPU_SVC_CLOCK: u32 = 1 << 0;
/// Service: the process-wide locks.
pub const OMEGA_GPU_SVC_LOCK: u32 = 1 << 1;
/// Service: device-visible memory with rights and cache policy.
pub const OMEGA_GPU_SVC_DEVICE_MEM: u32 = 1 << 2;
/// Service: the submission queue.
pub const OMEGA_GPU_SVC_SUBMIT: u32 = 1 << 3;
/// Service: completion polling of marker words (never interrupts).
pub const OMEGA_GPU_SVC_POLL: u32 = 1 << 4;
/// Service: CPU-only memory, for freestanding builds.
pub const OMEGA_GPU_SVC_HOST_MEM: u32 = 1 << 5;
/// Service: CPU/GPU visibility sync of a buffer.
pub const OMEGA_GPU_SVC_SYNC: u32 = 1 << 6;
/// Service: device open, close and query.
pub const OMEGA_GPU_SVC_DEVICE: u32 = 1 << 7;

/// Right: the CPU may read its view.
pub const OMEGA_GPU_RIGHT_CPU_READ: u32 = 1 << 0;
/// Right: the CPU may write its view.
pub const OMEGA_GPU_RIGHT_CPU_WRITE: u32 = 1 << 1;
/// Right: the GPU may read.
pub const OMEGA_GPU_RIGHT_GPU_READ: u32 = 1 << 2;
/// Right: the GPU may write.
pub const OMEGA_GPU_RIGHT_GPU_WRITE: u32 = 1 << 3;
/// Right: the GPU may execute (kernel code). Never together with GPU_WRITE.
pub const OMEGA_GPU_RIGHT_GPU_EXEC: u32 = 1 << 4;
/// Right: the CPU polls words the GPU writes here, so the range must be GPU-uncached.
pub const OMEGA_GPU_RIGHT_HOST_POLLED: u32 = 1 << 5;

/// Cache policy: GPU-uncached (every ordinary session buffer).
pub const OMEGA_GPU_CACHE_UNCACHED: u32 = 0;
/// Cache policy: GPU-cached, for write-once, GPU-read-only, never-polled contents.
pub const OMEGA_GPU_CACHE_CACHED: u32 = 1;

/// Handle kind of an ordinary data buffer (`OmegaGpuMem.kind`).
pub const OMEGA_GPU_HANDLE_BUF_DATA: u32 = 1;
/// Handle kind of a kernel-code buffer (`OmegaGpuMem.kind`).
pub const OMEGA_GPU_HANDLE_BUF_CODE: u32 = 2;
/// Handle kind of a queue buffer of the session's own: ring, markers, descriptors (`OmegaGpuMem.kind`).
pub const OMEGA_GPU_HANDLE_BUF_QUEUE: u32 = 3;

/// Refusal: the platform's ABI major differs from the runtime's.
pub const OMEGA_GPU_PLAT_ABI_MAJOR: c_int = 1;
/// Refusal: the platform's ABI minor is older than the runtime needs.
pub const OMEGA_GPU_PLAT_ABI_MINOR: c_int = 2;
/// Refusal: a needed service is absent (refused, never emulated).
pub const OMEGA_GPU_PLAT_MISSING_SERVICE: c_int = 3;
/// Refusal: a byte range of zero bytes.
pub const OMEGA_GPU_PLAT_ZERO_LENGTH: c_int = 4;
/// Refusal: a byte range with no rights.
pub const OMEGA_GPU_PLAT_NO_RIGHTS: c_int = 5;
/// Refusal: a HOST_POLLED range asked to be GPU-cached.
pub const OMEGA_GPU_PLAT_POLLED_CACHED: c_int = 6;
/// Refusal: GPU_EXEC and GPU_WRITE on one range.
pub const OMEGA_GPU_PLAT_EXEC_WRITABLE: c_int = 7;
/// Refusal: a length or address past what the platform can describe.
pub const OMEGA_GPU_PLAT_OVERFLOW: c_int = 8;
/// Refusal: a GPU-cached range the GPU may write or the CPU polls.
pub const OMEGA_GPU_PLAT_CACHED_WRITABLE: c_int = 9;

/// Simulator fault: the next submission never releases its markers (a kernel that never ends).
pub const OMEGA_GPU_SIM_FAULT_HANG: c_int = 1;
/// Simulator fault: the next completion poll is refused.
pub const OMEGA_GPU_SIM_FAULT_REFUSE_POLL: c_int = 2;
/// Simulator fault: the next device allocation fails with out-of-memory.
pub const OMEGA_GPU_SIM_FAULT_FAIL_ALLOC: c_int = 3;
/// Simulator fault: the next launch faults with Xid 31 (an MMU fault); its markers never arrive.
pub const OMEGA_GPU_SIM_FAULT_KERNEL_FAULT: c_int = 4;
/// Simulator fault: the next device open fails, with the driver text "injected open failure".
pub const OMEGA_GPU_SIM_FAULT_FAIL_OPEN: c_int = 5;
/// Simulator fault: the next visibility sync fails.
pub const OMEGA_GPU_SIM_FAULT_FAIL_SYNC: c_int = 6;

const _: () = {
    assert!(OMEGA_GPU_PLATFORM_ABI_MAJOR == omega_hal::PLATFORM_ABI_MAJOR);
    assert!(OMEGA_GPU_PLATFORM_ABI_MINOR == omega_hal::PLATFORM_ABI_MINOR);
    assert!(OMEGA_GPU_SVC_CLOCK == Services::CLOCK.bits());
    assert!(OMEGA_GPU_SVC_LOCK == Services::LOCK.bits());
    assert!(OMEGA_GPU_SVC_DEVICE_MEM == Services::DEVICE_MEM.bits());
    assert!(OMEGA_GPU_SVC_SUBMIT == Services::SUBMIT.bits());
    assert!(OMEGA_GPU_SVC_POLL == Services::POLL.bits());
    assert!(OMEGA_GPU_SVC_HOST_MEM == Services::HOST_MEM.bits());
    assert!(OMEGA_GPU_SVC_SYNC == Services::SYNC.bits());
    assert!(OMEGA_GPU_SVC_DEVICE == Services::DEVICE.bits());
    assert!(OMEGA_GPU_RIGHT_CPU_READ == Rights::CPU_READ.bits());
    assert!(OMEGA_GPU_RIGHT_CPU_WRITE == Rights::CPU_WRITE.bits());
    assert!(OMEGA_GPU_RIGHT_GPU_READ == Rights::GPU_READ.bits());
    assert!(OMEGA_GPU_RIGHT_GPU_WRITE == Rights::GPU_WRITE.bits());
    assert!(OMEGA_GPU_RIGHT_GPU_EXEC == Rights::GPU_EXEC.bits());
    assert!(OMEGA_GPU_RIGHT_HOST_POLLED == Rights::HOST_POLLED.bits());
    assert!(OMEGA_GPU_CACHE_UNCACHED == CachePolicy::Uncached as u32);
    assert!(OMEGA_GPU_CACHE_CACHED == CachePolicy::Cached as u32);
    assert!(OMEGA_GPU_HANDLE_BUF_DATA == BufferKind::Data as u32);
    assert!(OMEGA_GPU_HANDLE_BUF_CODE == BufferKind::Code as u32);
    assert!(OMEGA_GPU_HANDLE_BUF_QUEUE == BufferKind::Queue as u32);
    assert!(OMEGA_GPU_HANDLE_BUF_DATA == crate::session::HANDLE_BUF_DATA);
    assert!(OMEGA_GPU_HANDLE_BUF_CODE == crate::session::HANDLE_BUF_CODE);
    assert!(OMEGA_GPU_HANDLE_BUF_QUEUE == crate::session::HANDLE_BUF_QUEUE);
};

/// A handle to the device of the platform contract: `{index, generation}`, the same shape and rule as
/// `OmegaGpuBufferHandle` (generation 0 is never issued, so a zeroed handle means "none").
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OmegaGpuDeviceHandle {
    /// Slot in the owning table.
    pub index: u32,
    /// Slot generation at issue time; never 0 for an issued handle.
    pub generation: u32,
}

/// A handle to a submission queue of the platform contract: `{index, generation}`, the same shape and
/// rule as `OmegaGpuBufferHandle`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OmegaGpuQueueHandle {
    /// Slot in the owning table.
    pub index: u32,
    /// Slot generation at issue time; never 0 for an issued handle.
    pub generation: u32,
}

static_assertions::assert_eq_size!(OmegaGpuDeviceHandle, omega_hal::Handle);
static_assertions::assert_eq_size!(OmegaGpuQueueHandle, omega_hal::Handle);

/// The refusal code of `r` (`OMEGA_GPU_PLAT_*`).
pub fn refusal_code(r: &Refusal) -> c_int {
    match r {
        Refusal::AbiMajor { .. } => OMEGA_GPU_PLAT_ABI_MAJOR,
        Refusal::AbiMinor { .. } => OMEGA_GPU_PLAT_ABI_MINOR,
        Refusal::MissingService(_) => OMEGA_GPU_PLAT_MISSING_SERVICE,
        Refusal::ZeroLength => OMEGA_GPU_PLAT_ZERO_LENGTH,
        Refusal::NoRights => OMEGA_GPU_PLAT_NO_RIGHTS,
        Refusal::PolledCached => OMEGA_GPU_PLAT_POLLED_CACHED,
        Refusal::ExecWritable => OMEGA_GPU_PLAT_EXEC_WRITABLE,
        Refusal::Overflow => OMEGA_GPU_PLAT_OVERFLOW,
        Refusal::CachedWritable => OMEGA_GPU_PLAT_CACHED_WRITABLE,
    }
}

/// INTERNAL. The fixed name of refusal code `code` (`"OMEGA_GPU_PLAT_ZERO_LENGTH"`, ...), or `"unknown"`.
/// The string is static. Any thread, no lock.
#[no_mangle]
pub extern "C" fn omega_gpu_platform_refusal_name(code: c_int) -> *const c_char {
    guard("omega_gpu_platform_refusal_name", c"unknown".as_ptr(), || {
        let name = match code {
            OMEGA_GPU_PLAT_ABI_MAJOR => c"OMEGA_GPU_PLAT_ABI_MAJOR",
            OMEGA_GPU_PLAT_ABI_MINOR => c"OMEGA_GPU_PLAT_ABI_MINOR",
            OMEGA_GPU_PLAT_MISSING_SERVICE => c"OMEGA_GPU_PLAT_MISSING_SERVICE",
            OMEGA_GPU_PLAT_ZERO_LENGTH => c"OMEGA_GPU_PLAT_ZERO_LENGTH",
            OMEGA_GPU_PLAT_NO_RIGHTS => c"OMEGA_GPU_PLAT_NO_RIGHTS",
            OMEGA_GPU_PLAT_POLLED_CACHED => c"OMEGA_GPU_PLAT_POLLED_CACHED",
            OMEGA_GPU_PLAT_EXEC_WRITABLE => c"OMEGA_GPU_PLAT_EXEC_WRITABLE",
            OMEGA_GPU_PLAT_OVERFLOW => c"OMEGA_GPU_PLAT_OVERFLOW",
            OMEGA_GPU_PLAT_CACHED_WRITABLE => c"OMEGA_GPU_PLAT_CACHED_WRITABLE",
            _ => c"unknown",
        };
        name.as_ptr()
    })
}

/// EXPERIMENTAL, test hook. Queues fault `fault` (`OMEGA_GPU_SIM_FAULT_*`) on the simulated platform; it
/// fires on the first operation it applies to. Returns 0, or -1 (stage `sim inject`) for an unknown fault
/// or when the installed platform is not the simulator. Any thread, no lock: it touches only the
/// simulator's own state.
#[no_mangle]
pub extern "C" fn omega_gpu_sim_inject(fault: c_int) -> c_int {
    guard("omega_gpu_sim_inject", -1, || {
        let f = match fault {
            OMEGA_GPU_SIM_FAULT_HANG => SimFault::Hang,
            OMEGA_GPU_SIM_FAULT_REFUSE_POLL => SimFault::RefusePoll,
            OMEGA_GPU_SIM_FAULT_FAIL_ALLOC => SimFault::FailAlloc,
            OMEGA_GPU_SIM_FAULT_KERNEL_FAULT => SimFault::KernelFault(31),
            OMEGA_GPU_SIM_FAULT_FAIL_OPEN => SimFault::FailOpen("injected open failure".into()),
            OMEGA_GPU_SIM_FAULT_FAIL_SYNC => SimFault::FailSync,
            other => return refuse("sim inject", format!("unknown fault {other}")),
        };
        let installed = match runtime().installed() {
            Ok(i) => i,
            Err(e) => {
                runtime().set_error(&e);
                return -1;
            }
        };
        match installed.sim {
            Some(sim) => {
                sim.inject(f);
                0
            }
            None => {
                refuse("sim inject", format!("the installed platform is `{}`, not the simulator", installed.name()))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_has_its_code_and_name() {
        let all = [
            Refusal::AbiMajor { platform: 2, runtime: 1 },
            Refusal::AbiMinor { platform: 1, runtime: 2 },
            Refusal::MissingService(Services::POLL),
            Refusal::ZeroLength,
            Refusal::NoRights,
            Refusal::PolledCached,
            Refusal::ExecWritable,
            Refusal::Overflow,
            Refusal::CachedWritable,
        ];
        for r in all {
            let p = omega_gpu_platform_refusal_name(refusal_code(&r));
            // SAFETY: the function returns a static NUL-terminated string.
            let name = unsafe { core::ffi::CStr::from_ptr(p) }.to_str().unwrap();
            assert_eq!(name, r.name());
        }
        // SAFETY: as above.
        let unknown = unsafe { core::ffi::CStr::from_ptr(omega_gpu_platform_refusal_name(0)) };
        assert_eq!(unknown.to_str().unwrap(), "unknown");
    }
}
