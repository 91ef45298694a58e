//! The contract's C-layout structs and constants, shared by the Rust API and the C layer so both see
//! one layout.

use core::ffi::c_void;

pub use omega_hal::{DeviceInfo, Handle};

/// `OMEGA_GPU_SESSION_LOCK_ID`: the session lock's id in the platform LOCK service.
pub const LOCK_ID: u32 = omega_hal::SESSION_LOCK_ID;
/// `OMEGA_GPU_SESSION_MAX_ARGS`: argument words of a C launch.
pub const MAX_ARGS: u32 = 32;
/// `OMEGA_GPU_SESSION_MAX_SPIN_US`: the largest marker-poll spin window.
pub const MAX_SPIN_US: u32 = 100_000;
/// `OMEGA_GPU_SESSION_PARK_MAX`: parked buffers listed by handle; later ones are counted as untracked.
pub const PARK_MAX: usize = 512;
/// `OMEGA_GPU_SESSION_SCRATCH_RESERVED`: a scratch request past an active reservation.
pub const SCRATCH_RESERVED: i32 = -2;
/// `OMEGA_GPU_SESSION_CANCELLED`: a launch saw a cancel request.
pub const CANCELLED: i32 = -3;
/// `OMEGA_GPU_CODE_PREFETCH_TAIL`: the least zero-filled tail after kernel code in a code buffer (the HAL's
/// contract floor); a platform whose GPU prefetches further asks for more in its caps, and gets it.
pub const CODE_PREFETCH_TAIL: usize = omega_hal::MIN_CODE_PREFETCH_TAIL as usize;
/// `OMEGA_GPU_SESSION_DEFAULT_SHARED_BYTES`: shared memory per block when a launch gives 0.
pub const DEFAULT_SHARED_BYTES: u32 = 1024;
/// `OMEGA_GPU_SESSION_ON_CLOSE_MAX`: on-close hooks.
pub const ON_CLOSE_MAX: usize = 8;

/// `OMEGA_GPU_HANDLE_BUF_DATA`.
pub const HANDLE_BUF_DATA: u32 = omega_hal::BufferKind::Data as u32;
/// `OMEGA_GPU_HANDLE_BUF_CODE`.
pub const HANDLE_BUF_CODE: u32 = omega_hal::BufferKind::Code as u32;
/// `OMEGA_GPU_HANDLE_BUF_QUEUE`.
pub const HANDLE_BUF_QUEUE: u32 = omega_hal::BufferKind::Queue as u32;

/// `OmegaGpuMem`: a device buffer as every API passes it around.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuMem {
    /// Index and generation.
    pub handle: Handle,
    /// `OMEGA_GPU_HANDLE_BUF_DATA`, `_BUF_CODE` or `_BUF_QUEUE`.
    pub kind: u32,
    /// CPU view; null when there is none.
    pub cpu: *mut c_void,
    /// GPU virtual address.
    pub va: u64,
    /// Bytes of both views.
    pub size: usize,
}

impl GpuMem {
    /// The all-zero buffer: "none".
    pub const NONE: GpuMem = GpuMem { handle: Handle::NONE, kind: 0, cpu: core::ptr::null_mut(), va: 0, size: 0 };
}

impl Default for GpuMem {
    fn default() -> Self {
        Self::NONE
    }
}

/// `OmegaGpuScratch`: a caller-owned staging buffer that grows to its high-water mark. Zero it before use.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scratch {
    /// The buffer.
    pub mem: GpuMem,
    /// Usable bytes.
    pub cap: usize,
    /// Largest request so far.
    pub high_water: usize,
    /// Non-zero while a serving reservation is active.
    pub reserved: i32,
}

/// `OmegaGpuAllocStats`: driver allocations made by the session layer since the process started.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Allocations that succeeded.
    pub allocs: u64,
    /// Their bytes, page-rounded.
    pub alloc_bytes: u64,
    /// Allocations the platform refused.
    pub alloc_failures: u64,
    /// Buffers released to the platform.
    pub frees: u64,
    /// Frees refused for a stale handle or a closed session.
    pub stale_refusals: u64,
}

/// `OmegaGpuParkStats`: what the latch kept.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ParkStats {
    /// Parked buffers, listed plus untracked.
    pub buffers: u64,
    /// Parked past the listed `OMEGA_GPU_SESSION_PARK_MAX`.
    pub untracked: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// `OmegaGpuLaunch`: one launch as C callers describe it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawLaunch {
    /// GPU address of the kernel code.
    pub code_va: u64,
    /// Registers per thread (rounded up to a multiple of 8, at least 64). Refused when the rounded count is
    /// past what the architecture's QMD may declare (256 on sm_90: a thread's 255 registers, rounded up).
    pub gpr_count: u32,
    /// Block size x.
    pub threads_x: u32,
    /// Block size y (0 means 1).
    pub threads_y: u32,
    /// Grid size x.
    pub grid_x: u32,
    /// Grid size y.
    pub grid_y: u32,
    /// A word carried unchanged to the platform's launch descriptor (the simulator records it with the
    /// launch). The H200's QMD (V04_00) has no such word, so on the GPU it reaches no kernel: pass an
    /// element count the kernel needs as an argument.
    pub num_elements: u32,
    /// Argument words for constant bank 0.
    pub args: *const u32,
    /// How many (1 to `OMEGA_GPU_SESSION_MAX_ARGS`).
    pub n_args: u32,
    /// Completion poll limit per marker, ms. 0 runs out at once and latches.
    pub timeout_ms: u32,
    /// Shared memory per block; 0 = the default of 1024 bytes. At most what the architecture allows per
    /// block, the system's reserve included (233472 bytes on sm_90: 227 KiB plus the 1 KiB reserve).
    pub shared_bytes: u32,
    /// Spin window before sleep-polling; 0 = the process-wide setting. At most
    /// `OMEGA_GPU_SESSION_MAX_SPIN_US`.
    pub spin_us: u32,
}

static_assertions::assert_eq_size!(Handle, [u32; 2]);
static_assertions::assert_eq_size!(GpuMem, [u64; 5]);
static_assertions::assert_eq_size!(RawLaunch, [u64; 7]);

/// `OmegaGpuMemInfo`: device memory, free and in all, as the platform reports it when asked.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemInfo {
    /// Bytes no one has allocated (this process or another) at the moment of asking.
    pub free_bytes: u64,
    /// Bytes of device memory in all.
    pub total_bytes: u64,
}

/// Where a kernel parameter of `size` bytes starts after parameters that end at byte `end`: the next
/// multiple of its size, natural alignment, as ptxas lays out a parameter table. A zero-sized parameter
/// aligns to 1 (it does not move). The one definition of the rule: the typed argument block, the derive's
/// layout and the repository's host specs all place parameters with it.
pub const fn param_offset(end: u64, size: u32) -> u64 {
    end.next_multiple_of(if size == 0 { 1 } else { size as u64 })
}
