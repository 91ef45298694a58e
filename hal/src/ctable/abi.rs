//! The platform contract as C lays it out (`omega_gpu_platform.h`): the table, its caps, one struct of
//! function pointers per service, and the flat descriptors that cross with the calls.
//!
//! Every callback gets the table's `ctx` first. A failing callback returns non-zero and fills the
//! [`OmegaGpuPlatformError`] it was handed. The rules below restate, for C, the `# Safety` lists of the
//! HAL traits (`omega-hal`'s `clock`, `lock`, `memory`, `queue`, `poll`, `host`, `visibility` and `device`
//! modules): what a callback may rely on when it is called, and what it must do.

use core::ffi::{c_char, c_int, c_void};

/// A GPU virtual address.
pub type OmegaGpuVa = u64;

/// A bus (DMA) address, as a device on the bus sees a byte of memory.
pub type OmegaGpuBusAddr = u64;

/// The CPU's view of a buffer: where the CPU reads and writes it. NULL where the buffer has none.
pub type OmegaCpuView = *mut c_void;

/// What one launch descriptor may ask of the device: the shape, register and shared-memory limits the
/// session checks every launch against before anything is submitted.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OmegaGpuLaunchLimits {
    /// The compute capability the limits are of (9 and 0 for sm_90), for messages.
    pub sm_major: u32,
    /// Its minor.
    pub sm_minor: u32,
    /// Most threads per block along x, y and z (each at least 1).
    pub max_block: [u32; 3],
    /// Most threads per block, all three sides together.
    pub max_threads_per_block: u32,
    /// Most blocks per grid along x, y and z (each at least 1).
    pub max_grid: [u32; 3],
    /// Most registers per thread a descriptor may declare.
    pub max_registers: u32,
    /// Most shared memory per block in bytes, the system's reserved part included.
    pub max_shared_bytes: u32,
    /// Shared memory the system reserves in every block (at most `max_shared_bytes`).
    pub reserved_shared_bytes: u32,
}

/// What a platform declares about itself, beside the ABI numbers of `OmegaGpuPlatform`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OmegaGpuPlatformCaps {
    /// The services the table fills (`OMEGA_GPU_SVC_*` bits); every function of each is non-NULL.
    pub services: u32,
    /// What the GPU executes from a code buffer (`OMEGA_GPU_CODE_*`); `omega_gpu_kernel_load` writes that.
    pub code_format: u32,
    /// Byte offset of a launch's argument words in constant bank 0 (a multiple of 4).
    pub param_base: u32,
    /// The most bytes of argument words a launch may pass.
    pub max_param_bytes: u32,
    /// Allocation granule in bytes, a power of two: every buffer is rounded up to it.
    pub page_bytes: u64,
    /// Zero-filled bytes a code buffer holds after the code, for instruction prefetch.
    pub code_prefetch_tail: u64,
    /// What one launch may ask for.
    pub launch: OmegaGpuLaunchLimits,
}

/// What a failing callback reports: the kind of failure (`OMEGA_GPU_PLAT_ERR_*`), a number and a text.
/// The runtime hands every callback that can fail a zeroed one.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OmegaGpuPlatformError {
    /// `OMEGA_GPU_PLAT_ERR_*`; a value no constant has is read as `OMEGA_GPU_PLAT_ERR_DRIVER`.
    pub kind: u32,
    /// The driver's status or errno for `OMEGA_GPU_PLAT_ERR_DRIVER`; the refusal code
    /// (`OMEGA_GPU_PLAT_*`) for `OMEGA_GPU_PLAT_ERR_REFUSED`; else 0.
    pub status: u32,
    /// NUL-terminated text, the platform's own words (what the driver said).
    pub text: [c_char; 256],
}

/// A byte range a caller asks for (`alloc`), checked with `omega_gpu_platform_check_buffer` before any
/// platform sees it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OmegaGpuBufferDesc {
    /// Bytes, already rounded up to the platform's `page_bytes`; never 0.
    pub bytes: u64,
    /// `OMEGA_GPU_RIGHT_*` bits, for both views.
    pub rights: u32,
    /// `OMEGA_GPU_CACHE_*`.
    pub cache: u32,
    /// `OMEGA_GPU_HANDLE_BUF_*`: what the buffer is for.
    pub kind: u32,
    /// Zero.
    pub reserved: u32,
}

/// One device-visible buffer as a platform hands it out.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OmegaGpuAllocation {
    /// The platform's own identity of the buffer: non-zero, unique among its live buffers.
    pub id: u64,
    /// The CPU view of `bytes` bytes, or NULL when the rights give the CPU none.
    pub cpu: OmegaCpuView,
    /// The GPU address of the first byte.
    pub va: OmegaGpuVa,
    /// Bytes of both views: at least what was asked.
    pub bytes: u64,
    /// The bus address of the first byte where the platform knows one, else 0 (the runtime does not use it
    /// yet).
    pub bus: OmegaGpuBusAddr,
}

/// A 16-byte completion marker in a HOST_POLLED, GPU-uncached buffer: the payload word at +0, a
/// timestamp at +8.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OmegaGpuMarker {
    /// The GPU address the device releases to.
    pub va: OmegaGpuVa,
    /// The CPU address the host polls.
    pub cpu: OmegaCpuView,
}

/// A constant bank other than 0 that a launch binds (`__constant__` data is bank 3, the addresses of
/// `__device__` data bank 4).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OmegaGpuConstBank {
    /// Bank index, 1 to 7.
    pub index: u32,
    /// Its size in bytes (the platform may round it up to 16).
    pub bytes: u32,
    /// The GPU address of its first byte.
    pub va: OmegaGpuVa,
}

/// One kernel launch, fully resolved by the session: the platform only encodes it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OmegaGpuLaunchDesc {
    /// GPU address of the kernel's first instruction.
    pub code_va: OmegaGpuVa,
    /// Bytes of code from `code_va` (for instruction prefetch); 0 when unknown.
    pub code_bytes: u64,
    /// Registers per thread, already rounded.
    pub gpr_count: u32,
    /// Threads per block, x, y, z (each at least 1).
    pub block: [u32; 3],
    /// Blocks per grid, x, y, z (each at least 1).
    pub grid: [u32; 3],
    /// Shared memory per block, static and dynamic, in bytes.
    pub shared_bytes: u32,
    /// The dynamic part of `shared_bytes`.
    pub dynamic_shared_bytes: u32,
    /// Local memory (stack) per thread, in bytes.
    pub local_bytes_per_thread: u32,
    /// Named barriers the kernel uses.
    pub barrier_count: u32,
    /// The contract's `num_elements` word, carried into the descriptor unchanged.
    pub num_elements: u32,
    /// What must finish first (`OMEGA_GPU_ORDER_*`).
    pub order: u32,
    /// Non-zero: not submitted to the device at all (the test-only `skip_launch`).
    pub skip: u32,
    /// The argument words, written at `param_base` of constant bank 0: `n_args` of them.
    pub args: *const u32,
    /// How many argument words.
    pub n_args: usize,
    /// The constant banks other than 0 to bind: `n_const_banks` of them (NULL when 0).
    pub const_banks: *const OmegaGpuConstBank,
    /// How many constant banks.
    pub n_const_banks: usize,
}

/// A batch of launches and the two completion markers the session polls.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OmegaGpuSubmission {
    /// The launches in order: `n_launches` of them, at least one.
    pub launches: *const OmegaGpuLaunchDesc,
    /// How many launches.
    pub n_launches: usize,
    /// Marker 0 receives `sequence` when the last launch's grid has completed; marker 1 receives
    /// `sequence` and a timestamp once the engine is idle.
    pub markers: [OmegaGpuMarker; 2],
    /// Where launch `i` releases `sequence` and its completion timestamp (16 bytes each, at
    /// `stamps.cpu + 16 * i`); `cpu` NULL when nowhere.
    pub stamps: OmegaGpuMarker,
    /// The value both markers (and every stamp) receive.
    pub sequence: u32,
    /// Zero.
    pub reserved: u32,
}

/// A buffer of the platform's own that submitted work may touch (a ring, launch descriptors, constant
/// banks): what a latch must count as parked, because after an uncertain completion it is never released.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OmegaGpuQueueBuffer {
    /// Its GPU address.
    pub va: OmegaGpuVa,
    /// Its size in bytes.
    pub bytes: u64,
    /// What it is, NUL-terminated ("GPFIFO ring and USERD"), for reports.
    pub what: [c_char; 64],
}

/// An error the channel reported (the driver's error notifier).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OmegaGpuChannelFault {
    /// The robust-channel code (13 GR exception, 31 MMU fault, ...).
    pub xid: u32,
    /// Zero.
    pub reserved: u32,
    /// NUL-terminated text: what the platform knows beyond the code.
    pub text: [c_char; 256],
}

/// EXPERIMENTAL. What the open device reports (`omega_gpu_device_query`, and the DEVICE service's `open`).
/// Texts are NUL-terminated and cut to fit.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OmegaGpuDeviceInfo {
    /// Marketing name ("NVIDIA H200", or the simulator's name).
    pub name: [c_char; 64],
    /// Kernel driver version ("580.159.04"), or the simulator's version.
    pub driver_version: [c_char; 32],
    /// PCI location and ids ("0000:00:05.0 10de:2335"); empty where there is no bus.
    pub pci: [c_char; 64],
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Compute capability major (9 for Hopper).
    pub arch_major: u32,
    /// Compute capability minor.
    pub arch_minor: u32,
    /// Zero.
    pub reserved: u32,
    /// Device memory in bytes.
    pub memory_bytes: u64,
}

/// The CLOCK service (`OMEGA_GPU_SVC_CLOCK`): the clock every timeout and spin window is measured on.
///
/// # Safety
/// - `now_ns` returns nanoseconds since a fixed origin and never goes backwards. Any thread, at any time.
/// - `sleep_us` gives up the CPU for about `us` microseconds (the sleep half of sleep-polling). Any thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OmegaGpuClockService {
    /// Monotonic nanoseconds.
    pub now_ns: Option<unsafe extern "C" fn(ctx: *mut c_void) -> u64>,
    /// Sleeps about `us` microseconds.
    pub sleep_us: Option<unsafe extern "C" fn(ctx: *mut c_void, us: u32)>,
}

/// The LOCK service (`OMEGA_GPU_SVC_LOCK`): process-wide, non-recursive locks by id. Lock 0
/// (`OMEGA_GPU_SESSION_LOCK_ID`) is the session lock; ids are below 4.
///
/// # Safety
/// - `lock` blocks until lock `id` is free, then takes it for the calling thread. A thread that takes a
///   lock it holds waits forever: the runtime never does.
/// - `try_lock` takes lock `id` if it is free and returns non-zero, else returns 0 at once.
/// - `unlock` is called only by the thread that holds lock `id`, once per take, and releases it.
/// - All three are called from any thread, concurrently.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OmegaGpuLockService {
    /// Takes lock `id`, waiting until it is free.
    pub lock: Option<unsafe extern "C" fn(ctx: *mut c_void, id: u32)>,
    /// Takes lock `id` if free: non-zero when taken.
    pub try_lock: Option<unsafe extern "C" fn(ctx: *mut c_void, id: u32) -> c_int>,
    /// Releases lock `id`.
    pub unlock: Option<unsafe extern "C" fn(ctx: *mut c_void, id: u32)>,
}

/// The DEVICE_MEM service (`OMEGA_GPU_SVC_DEVICE_MEM`): device-visible buffers with rights and a cache
/// policy.
///
/// # Safety
/// - `alloc` is called with the device open (the DEVICE service's `open` succeeded, no `close` since),
///   under the session lock, with `desc` checked (`omega_gpu_platform_check_buffer`) and rounded to
///   `page_bytes`. On success it returns 0 and fills `*out`: a non-zero `id` unique among the live buffers,
///   `bytes` at least `desc->bytes`, `cpu` a CPU view of `bytes` bytes when `desc->rights` give the CPU any
///   (else NULL), `va` the GPU address; both views stay valid until `free` or the device's `close`. A
///   HOST_POLLED buffer is GPU-uncached: words the GPU writes there are seen by CPU reads of `cpu`. On
///   failure it returns non-zero, fills `*err` and allocates nothing.
/// - `free` is called under the session lock with a buffer `alloc` returned since the last open, once,
///   after every submission that named it has completed (both markers observed). After an uncertain
///   completion the runtime frees nothing at all (it parks the buffers). Both views are invalid after it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OmegaGpuDeviceMemService {
    /// Allocates a buffer for `desc`.
    pub alloc: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            desc: *const OmegaGpuBufferDesc,
            out: *mut OmegaGpuAllocation,
            err: *mut OmegaGpuPlatformError,
        ) -> c_int,
    >,
    /// Releases a buffer.
    pub free: Option<unsafe extern "C" fn(ctx: *mut c_void, a: *const OmegaGpuAllocation)>,
}

/// The SUBMIT service (`OMEGA_GPU_SVC_SUBMIT`): hands a batch of launches to the device.
///
/// # Safety
/// - `submit` is called with the device open, under the session lock, and only once both markers of the
///   previous submission were observed (one submission in flight). It returns 0 without waiting for the
///   launches, or non-zero with `*err` filled when nothing was submitted.
/// - Every address the submission names (code, arguments that are addresses, markers, stamps, every byte
///   of every constant bank) lies in live buffers of this platform that stay allocated until both markers
///   are observed, or forever if they never are; constant banks are GPU-readable.
/// - `s` and everything it points to (launches, argument words, constant banks) is valid only during the
///   call: copy what the device needs later.
/// - `in_flight_buffers` is called under the session lock, once, at a latch. It writes up to `max` of the
///   platform's own buffers that work submitted since the device opened may still touch to `out` (`out`
///   is NULL when `max` is 0) and returns how many there are, which may be more than `max` (the runtime
///   then asks again with room for all). None while the device is closed; 0 for a platform that keeps
///   nothing of its own in device memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OmegaGpuSubmitService {
    /// Submits `s`.
    pub submit: Option<
        unsafe extern "C" fn(ctx: *mut c_void, s: *const OmegaGpuSubmission, err: *mut OmegaGpuPlatformError) -> c_int,
    >,
    /// The platform's own buffers submitted work may touch.
    pub in_flight_buffers:
        Option<unsafe extern "C" fn(ctx: *mut c_void, out: *mut OmegaGpuQueueBuffer, max: usize) -> usize>,
}

/// The POLL service (`OMEGA_GPU_SVC_POLL`): reads the marker words the device releases. Polling a word
/// is the only completion there is; it is never an interrupt.
///
/// # Safety
/// - `poll` and `timestamp` are called with a marker in a live HOST_POLLED buffer of this platform.
///   `poll` stores the payload word in `*word` and returns 0, or returns non-zero with `*err` filled when
///   it would not read it: the runtime then treats the completion as uncertain and latches the process.
/// - `timestamp` returns the device time (ns) released beside the payload.
/// - `channel_fault` returns non-zero and fills `*out` when the channel reported an error (a faulted
///   kernel), else 0. It is asked on every slow wait, from the thread that waits.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OmegaGpuPollService {
    /// Reads the payload word of marker `m`.
    pub poll: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            m: *const OmegaGpuMarker,
            word: *mut u32,
            err: *mut OmegaGpuPlatformError,
        ) -> c_int,
    >,
    /// Reads the timestamp beside the payload of marker `m`.
    pub timestamp: Option<unsafe extern "C" fn(ctx: *mut c_void, m: *const OmegaGpuMarker) -> u64>,
    /// The channel's error, if it reported one.
    pub channel_fault: Option<unsafe extern "C" fn(ctx: *mut c_void, out: *mut OmegaGpuChannelFault) -> c_int>,
}

/// The HOST_MEM service (`OMEGA_GPU_SVC_HOST_MEM`): CPU-only memory, for builds without a C library. The
/// session does not need it.
///
/// # Safety
/// - `alloc` returns `bytes` of memory aligned for any scalar, `calloc` `bytes` of zeroed memory; NULL on
///   failure. Any thread.
/// - `free` is called with NULL or a pointer from `alloc`/`calloc` not freed since, once. Any thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OmegaGpuHostMemService {
    /// `bytes` of uninitialised memory.
    pub alloc: Option<unsafe extern "C" fn(ctx: *mut c_void, bytes: usize) -> *mut c_void>,
    /// `bytes` of zeroed memory.
    pub calloc: Option<unsafe extern "C" fn(ctx: *mut c_void, bytes: usize) -> *mut c_void>,
    /// Releases memory from `alloc` or `calloc`.
    pub free: Option<unsafe extern "C" fn(ctx: *mut c_void, p: *mut c_void)>,
}

/// The SYNC service (`OMEGA_GPU_SVC_SYNC`): what makes CPU writes visible to the GPU and GPU writes
/// visible to the CPU (on a discrete device it moves the bytes).
///
/// # Safety
/// - Both are called under the session lock, with no submission running, for a live buffer `a` of this
///   platform and `offset + len <= a->bytes`. `to_gpu` makes CPU writes to `cpu[offset .. offset + len]`
///   visible to the GPU, `to_cpu` GPU writes to that range visible in `cpu`. Each returns 0, or non-zero
///   with `*err` filled.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OmegaGpuSyncService {
    /// CPU writes to the range become visible to the GPU.
    pub to_gpu: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            a: *const OmegaGpuAllocation,
            offset: u64,
            len: u64,
            err: *mut OmegaGpuPlatformError,
        ) -> c_int,
    >,
    /// GPU writes to the range become visible to the CPU.
    pub to_cpu: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            a: *const OmegaGpuAllocation,
            offset: u64,
            len: u64,
            err: *mut OmegaGpuPlatformError,
        ) -> c_int,
    >,
}

/// The DEVICE service (`OMEGA_GPU_SVC_DEVICE`): opens and closes the device.
///
/// # Safety
/// - `open` is called under the session lock with the device not open. It returns 0 and fills `*out`
///   (zeroed by the runtime) once every other service may be used, or non-zero with `*err` filled (the
///   driver's words: the runtime reports them as stage `open`).
/// - `close` is called under the session lock with the device open, nothing running (every submission's
///   markers observed) and every buffer freed; never after an uncertain completion. It releases
///   everything the platform holds for the device.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OmegaGpuDeviceService {
    /// Opens the device.
    pub open: Option<
        unsafe extern "C" fn(ctx: *mut c_void, out: *mut OmegaGpuDeviceInfo, err: *mut OmegaGpuPlatformError) -> c_int,
    >,
    /// Closes the device.
    pub close: Option<unsafe extern "C" fn(ctx: *mut c_void)>,
}

/// EXPERIMENTAL. A platform as a C table: the ABI numbers it implements, its caps, and one table of
/// functions per service, each called with `ctx`. `omega_gpu_session_set_platform(name, &table)` installs
/// one; `omega_gpu_platform_sim()` returns the simulator's own; `omega_gpu_platform_check` says whether
/// one would be accepted.
///
/// # Safety
/// Whoever installs a table promises, for as long as the runtime holds it (until `release` is called):
/// - every function of every service `caps.services` names keeps the rules of that service's struct, and
///   may be called from any thread with `ctx` (the session lock orders the device calls; the clock, the
///   lock service, host memory and `channel_fault` may run concurrently with anything);
/// - no callback calls back into the runtime (`omega_gpu_session_*`, `omega_gpu_cmdlist_*`, ...): the
///   runtime is in the middle of a call and holds its own state;
/// - no callback unwinds (a C++ exception or a `longjmp` out of one is undefined behaviour).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OmegaGpuPlatform {
    /// The platform contract major it implements: `OMEGA_GPU_PLATFORM_ABI_MAJOR`.
    pub abi_major: u32,
    /// The platform contract minor it implements: at least `OMEGA_GPU_PLATFORM_ABI_MINOR`.
    pub abi_minor: u32,
    /// What it declares.
    pub caps: OmegaGpuPlatformCaps,
    /// Handed to every callback as its first argument.
    pub ctx: *mut c_void,
    /// `OMEGA_GPU_SVC_CLOCK`.
    pub clock: OmegaGpuClockService,
    /// `OMEGA_GPU_SVC_LOCK`.
    pub lock: OmegaGpuLockService,
    /// `OMEGA_GPU_SVC_DEVICE_MEM`.
    pub memory: OmegaGpuDeviceMemService,
    /// `OMEGA_GPU_SVC_SUBMIT`.
    pub submit: OmegaGpuSubmitService,
    /// `OMEGA_GPU_SVC_POLL`.
    pub poll: OmegaGpuPollService,
    /// `OMEGA_GPU_SVC_HOST_MEM`.
    pub host: OmegaGpuHostMemService,
    /// `OMEGA_GPU_SVC_SYNC`.
    pub sync: OmegaGpuSyncService,
    /// `OMEGA_GPU_SVC_DEVICE`.
    pub device: OmegaGpuDeviceService,
    /// Called once with `ctx` when its owner is done with the table. The runtime owns a table it installed
    /// and calls this once another platform replaced it and no call on it is left; a table that was never
    /// installed, or that `omega_gpu_session_set_platform` refused, stays its maker's to release. NULL:
    /// nothing to release.
    pub release: Option<unsafe extern "C" fn(ctx: *mut c_void)>,
}

impl OmegaGpuPlatform {
    /// A table with no services and nothing to release (what a failed `omega_gpu_platform_sim` returns).
    pub const EMPTY: OmegaGpuPlatform = OmegaGpuPlatform {
        abi_major: 0,
        abi_minor: 0,
        caps: OmegaGpuPlatformCaps {
            services: 0,
            code_format: 0,
            param_base: 0,
            max_param_bytes: 0,
            page_bytes: 0,
            code_prefetch_tail: 0,
            launch: OmegaGpuLaunchLimits {
                sm_major: 0,
                sm_minor: 0,
                max_block: [0; 3],
                max_threads_per_block: 0,
                max_grid: [0; 3],
                max_registers: 0,
                max_shared_bytes: 0,
                reserved_shared_bytes: 0,
            },
        },
        ctx: core::ptr::null_mut(),
        clock: OmegaGpuClockService { now_ns: None, sleep_us: None },
        lock: OmegaGpuLockService { lock: None, try_lock: None, unlock: None },
        memory: OmegaGpuDeviceMemService { alloc: None, free: None },
        submit: OmegaGpuSubmitService { submit: None, in_flight_buffers: None },
        poll: OmegaGpuPollService { poll: None, timestamp: None, channel_fault: None },
        host: OmegaGpuHostMemService { alloc: None, calloc: None, free: None },
        sync: OmegaGpuSyncService { to_gpu: None, to_cpu: None },
        device: OmegaGpuDeviceService { open: None, close: None },
        release: None,
    };
}

/// EXPERIMENTAL. A generation-checked handle table for a C backend, over storage the caller owns
/// (`omega_gpu_handles_init`): the contract's rule that a handle is `{index, generation}`, generation 0
/// is never issued, and closing a slot makes every copy of its handle stale.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OmegaGpuHandleTable {
    /// `capacity` generations, one per slot.
    pub generations: *mut u32,
    /// `capacity` values, one per slot; NULL marks a free slot.
    pub values: *mut *mut c_void,
    /// Slots.
    pub capacity: u32,
    /// Slots holding a value.
    pub live: u32,
}
