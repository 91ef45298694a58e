//! # The NVIDIA platform: NVIDIA's open kernel driver, driven through its ioctls
//!
//! No CUDA library is linked or loaded. The backend speaks to `/dev/nvidiactl`, `/dev/nvidiaN` and
//! `/dev/nvidia-uvm` directly, the way libcuda does underneath, and implements the same services as
//! [`crate::sim`] behind the same trait objects. Every fact it relies on (ioctl numbers, struct layouts,
//! bit positions) is in `docs/nvidia-bringup.md` with its source; `docs/nvidia-backend.md` describes the
//! design and what was measured on the H200.
//!
//! Layers, bottom up:
//!
//! - [`sys`]: ioctl numbers and `#[repr(C)]` driver structs, sizes and offsets pinned at compile time.
//! - `ioctl`: every request as a type that binds its device file, its number and its argument struct, and
//!   the one place an ioctl is made (through rustix's typed `Ioctl`); requests whose struct holds no
//!   pointer the driver follows are sent from safe code. Both the ioctl return and the in-struct NV_STATUS
//!   are checked and a failure names its step and the driver's text.
//! - `rm`, `uvm`: the resource manager client and the UVM VA-space calls. An RM allocation takes the
//!   parameter struct of its class and a control call the struct of its command, both bound at the type
//!   level, so a wrong struct cannot be written in safe code.
//! - [`abi`]: the driver version is read before any device object exists and looked up in a table keyed
//!   by branch (580.x verified); any other branch is refused with its version named.
//! - [`push`]: pure pushbuffer and GPFIFO encoders; [`qmd`]: the QMD and constant-bank encoders, from the
//!   architecture table [`crate::arch`] (which, like the cubin loader [`crate::cubin`], belongs to no
//!   backend).
//! - `stage`: what a construction of several steps has made, released in reverse order when a step
//!   fails (the open sequence, a staged data buffer), so no step cleans up by hand.
//! - the services, one file each as in `sim/`: `device` (the open sequence as a list of steps, and
//!   close), `memory`, `visibility`, `queue`, `poll`, `clock`; `channel` holds the GPFIFO channels, the
//!   doorbell, the command arena, the internal semaphores and the local-memory store. The open device
//!   (`OpenDevice` inside the state mutex) is the driver objects plus one state per service, each with its
//!   constructor: `Channels`, `Buffers` (memory), `Queue`, `Syncs` (visibility).
//!
//! ## Backend notes
//!
//! - **One channel.** A channel group (TSG) with one subcontext and one GPFIFO channel carrying both the
//!   compute object (subchannel 1) and the copy-engine object (subchannel 4), as libcuda does. The ring,
//!   its USERD block, the pushbuffers, QMDs and constant banks all live in video memory, written by the
//!   CPU through write-combined BAR1 and never read back.
//! - **Memory.** Data buffers live in video memory; their CPU view is pinned host staging, and
//!   `sync_to_gpu` / `sync_to_cpu` move bytes with the copy engine (small syncs to the GPU go through a
//!   BAR1 view instead). Code has a write-combined BAR1 view. Queue memory and HOST_POLLED buffers are
//!   GPU-uncached system memory with a CPU-cached view. See `memory.rs` for the table.
//! - **Completion.** Marker 0 is the QMD release semaphore of the last launch (four words: payload and
//!   timestamp); marker 1 is a host semaphore release with wait-for-idle and timestamp after it.
//!   `Order::AfterPrevious` is either a QMD dependency (each launch schedules the next when it completes)
//!   or an idle-waiting host release between groups; see `queue.rs`.
//! - **Prepared submissions.** A submission identical to an earlier one (same launches, arguments,
//!   markers, stamps) reuses its encoded QMDs and constant banks; only the sequence is patched (`queue`).
//! - **Performance boost.** At open the platform asks for the highest performance state, as libcuda does
//!   for every context; the H200 otherwise idles at 345 MHz and runs launches and copies at that clock
//!   until ~150 ms of sustained work raise it ([`NvidiaConfig::perf_boost`]).
//! - **Faults.** [`Platform::poll`]'s `channel_fault` reads entry 0 of the channel's error notifier, where
//!   the driver writes the Xid (31 for an MMU fault) once its channel teardown ends, 80-180 ms after the
//!   fault; and, before that, UVM's fatal-fault event queue in this process's memory, which names an MMU
//!   fault as soon as UVM has found it unserviceable (`fault.rs`, [`NvidiaConfig::fault_signal`]).
//! - **Nothing is emulated.** A missing class, an unknown architecture or driver branch is an error
//!   naming what was found.

pub mod abi;
mod channel;
mod clock;
mod crew;
mod device;
mod fault;
mod ioctl;
mod memory;
mod poll;
pub mod push;
pub mod qmd;
mod queue;
mod rm;
mod stage;
pub mod sys;
mod uvm;
mod visibility;

use std::path::Path;

pub use clock::{ClockSource, NvidiaClock};
pub use fault::{FaultSignal, FaultWatchError, DEFAULT_FAULT_SIGNAL};
pub use memory::{plan, BufferPlan, MemoryStats, Placement, VaRange};
pub use queue::{Barrier, ChainMode, LaunchTuning, Marker1};

use crate::arch;
use crate::caps::{Caps, Services, PLATFORM_ABI_MAJOR, PLATFORM_ABI_MINOR};
use crate::device::DeviceInfo;
use crate::error::HalError;
use crate::host::LibcHeap;
use crate::lock::PlainLock;
use crate::sync::{Arc, Mutex};
use crate::{
    Clock, CompletionPoll, Device, DeviceMemory, HostMemory, Platform, ProcessLock, SubmitQueue, Visibility, WaitPolicy,
};

use channel::Channels;
use ioctl::{DriverFd, GpuFile};
use memory::Buffers;
use queue::Queue;
use rm::Rm;
use stage::Object;
use uvm::Uvm;
use visibility::Syncs;

/// Settings of the NVIDIA platform.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvidiaConfig {
    /// Video memory buffers of at least this many bytes take 2 MiB pages (`memory::HUGE_FROM` unless
    /// `OMEGA_NVIDIA_HUGE_FROM` says otherwise; a measuring knob for buffers of 2-8 MiB).
    pub huge_from: u64,
    /// Syncs to the GPU of at most this many bytes, of a buffer with a BAR1 view, are CPU stores through
    /// it instead of a copy-engine round trip. 0 turns the BAR1 path off. `OMEGA_NVIDIA_BAR1_SYNC_MAX`.
    pub bar1_sync_max: u64,
    /// Data buffers of at most this many bytes get a write-combined BAR1 view at allocation (the session's
    /// chunks of small buffers are 64 MiB). 0: none. `OMEGA_NVIDIA_BAR1_VIEW_MAX`.
    pub bar1_view_max: u64,
    /// Bytes of each half of the staging ring: the pinned, GPU-mapped host memory that syncs of
    /// unregistered views and device-side writes and reads go through, one half filled (or drained) by the
    /// CPU while the copy engine drains (fills) the other. Allocated at its first use, kept until close.
    /// `OMEGA_NVIDIA_STAGING_BYTES`.
    pub staging_bytes: u64,
    /// Staged copies move at most this many bytes per piece (and at most a half), so the CPU's side of a
    /// copy smaller than a half still overlaps the copy engine's. `OMEGA_NVIDIA_STAGING_PIECE_BYTES`.
    pub staging_piece_bytes: u64,
    /// Pieces of a staged copy the ring holds at once (2 to 16, and at most as many pieces as fit in the
    /// ring): the CPU works on the next ones while the copy engine has one running and the next queued
    /// behind it, so it never waits for the CPU between two pieces. `OMEGA_NVIDIA_STAGING_SLOTS`.
    pub staging_slots: u64,
    /// CPU threads that copy a staged piece between the caller's memory and the ring (each taking at
    /// least 256 KiB of it); 1 keeps every copy on the calling thread. `OMEGA_NVIDIA_COPY_THREADS`.
    pub copy_threads: u64,
    /// A sync of at least this many bytes of a buffer whose view is not registered may register it (see
    /// `register_after`). 0: views are only registered at allocation (`pin_views_max`).
    /// `OMEGA_NVIDIA_REGISTER_SYNC_BYTES`.
    pub register_sync_bytes: u64,
    /// How many large syncs (`register_sync_bytes`) of a buffer go through the ring before the next one
    /// registers its view: 0 registers at the first. `OMEGA_NVIDIA_REGISTER_AFTER`.
    pub register_after: u32,
    /// Data buffers of at most this many bytes have their view registered at allocation (what the pinned
    /// staging of every buffer used to cost, paid once per 64 MiB chunk). 0: none.
    /// `OMEGA_NVIDIA_PIN_VIEWS_MAX`.
    pub pin_views_max: u64,
    /// The most bytes of data-buffer views registered (pinned) at once; a registration past it is not made
    /// and the buffer syncs through the ring, so pinning never bounds capacity.
    /// `OMEGA_NVIDIA_PINNED_BUDGET`.
    pub pinned_budget_bytes: u64,
    /// How the session's default completion wait uses the CPU ([`Platform::wait_policy`]):
    /// `OMEGA_NVIDIA_WAIT_SPIN_US`, `OMEGA_NVIDIA_WAIT_YIELD_US`, `OMEGA_NVIDIA_WAIT_FIRST_SLEEP_US`,
    /// `OMEGA_NVIDIA_WAIT_MAX_SLEEP_US`.
    pub wait: WaitPolicy,
    /// How `Order::AfterPrevious` is enforced.
    pub barrier: Barrier,
    /// GPFIFO ring entries (a power of two).
    pub gpfifo_entries: u32,
    /// Limit of the backend's own waits (channel setup, syncs), in milliseconds, on top of the time a
    /// sync needs at 1 GB/s.
    pub internal_timeout_ms: u64,
    /// Copy-engine syncs are split into pieces of this many bytes, pipelined between the first and the
    /// last (see [`push::Push::copy_chunked`]).
    pub copy_chunk_bytes: u64,
    /// NV_VASPACE_ALLOCATION flags of the GPU VA space (applies from the next open).
    pub vaspace_flags: u32,
    /// Allocate a GT200_DEBUGGER object bound to the compute engine at open (applies from the next open).
    pub debugger: bool,
    /// How launches are encoded (the defaults are the measured best; see [`LaunchTuning`]).
    pub tuning: LaunchTuning,
    /// Copy-engine syncs go through a channel of their own on an asynchronous copy engine rather than
    /// the compute channel's graphics copy engine. The channel is made at open (when this is set and the
    /// device has such an engine); clearing it later sends syncs back to the graphics copy engine.
    pub async_copy: bool,
    /// The staging ring is driver-owned system memory in 2 MiB pages, which the GPU maps with 2 MiB
    /// page-table entries, instead of this process's own pinned 4 KiB pages (used when this is off and
    /// when the driver refuses).
    pub huge_staging: bool,
    /// Copy-engine pieces of at least this many bytes go as multi-line copies of lines this long (0: one
    /// line per piece).
    pub copy_line_bytes: u64,
    /// At open, ask the driver to run the GPU at its highest performance state while this platform holds
    /// the device, as libcuda does for every context (and tinygrad copies): NV2080_CTRL_CMD_PERF_BOOST,
    /// BOOST_TO_MAX with CUDA priority high, until close (the driver also drops it with the client).
    /// Without it the H200 sits at 345 MHz until ~150 ms of sustained work have passed, and everything
    /// runs at the idle clock: an empty launch round trip 8.3-8.9 us instead of 4.1-4.4, a dependent
    /// launch 2.4 us instead of 0.75, a 1 GiB copy 44 GB/s instead of 55 (docs/perf).
    pub perf_boost: bool,
    /// Which signal names a faulted channel (applies from the next open): UVM's fatal-fault events, which
    /// name an MMU fault before the driver's teardown writes the error notifier, with or without a
    /// fallback to the notifier alone where the events cannot be had. `OMEGA_NVIDIA_FAULT_SIGNAL` = `uvm`,
    /// `uvm-or-notifier` or `notifier`; unset, [`DEFAULT_FAULT_SIGNAL`] (the notifier until the GPU suite
    /// has passed under the event path).
    pub fault_signal: FaultSignal,
}

impl Default for NvidiaConfig {
    fn default() -> Self {
        let wait = WaitPolicy::DEFAULT;
        Self {
            bar1_sync_max: env_or("OMEGA_NVIDIA_BAR1_SYNC_MAX", 64 << 10),
            // One session chunk: every small buffer gets its syncs to the GPU through BAR1.
            bar1_view_max: env_or("OMEGA_NVIDIA_BAR1_VIEW_MAX", 64 << 20),
            // 2 x 64 MiB: a piece of 64 MiB already runs at full copy-engine speed (copy_chunk_bytes).
            huge_from: env_or("OMEGA_NVIDIA_HUGE_FROM", memory::HUGE_FROM).max(memory::PAGE),
            staging_bytes: env_or("OMEGA_NVIDIA_STAGING_BYTES", 64 << 20).max(memory::PAGE) / memory::PAGE
                * memory::PAGE,
            // One CPU thread copies pageable memory into the ring at about 6 GB/s on the H200's host, a
            // ninth of the copy engine's 55 (docs/perf/2026-12-01-memory-wait-validation.md): eight
            // threads on pieces of 8 MiB let the copy engine set the pace.
            staging_piece_bytes: env_or("OMEGA_NVIDIA_STAGING_PIECE_BYTES", 8 << 20).max(memory::PAGE),
            staging_slots: env_or("OMEGA_NVIDIA_STAGING_SLOTS", 4).clamp(2, 16),
            copy_threads: env_or("OMEGA_NVIDIA_COPY_THREADS", 8).max(1),
            register_sync_bytes: env_or("OMEGA_NVIDIA_REGISTER_SYNC_BYTES", 16 << 20),
            // Pinning costs about 0.5 ms per MiB on the H200's host (16 GiB of staging took 7.8 s), five
            // times a ring sync of the same bytes: a buffer synced once is not worth it, one synced again is.
            register_after: env_or("OMEGA_NVIDIA_REGISTER_AFTER", 1),
            pin_views_max: env_or("OMEGA_NVIDIA_PIN_VIEWS_MAX", 0),
            pinned_budget_bytes: env_or("OMEGA_NVIDIA_PINNED_BUDGET", 16 << 30),
            wait: WaitPolicy {
                spin_ns: env_or("OMEGA_NVIDIA_WAIT_SPIN_US", wait.spin_ns / 1000).saturating_mul(1000),
                yield_ns: env_or("OMEGA_NVIDIA_WAIT_YIELD_US", wait.yield_ns / 1000).saturating_mul(1000),
                first_sleep_us: env_or("OMEGA_NVIDIA_WAIT_FIRST_SLEEP_US", wait.first_sleep_us).max(1),
                max_sleep_us: env_or("OMEGA_NVIDIA_WAIT_MAX_SLEEP_US", wait.max_sleep_us).max(1),
            },
            barrier: Barrier::Auto,
            gpfifo_entries: 1024,
            internal_timeout_ms: 2000,
            // On the H200 every piece size from 4 MiB to a single 1 GiB launch ran at 55 GB/s once the
            // GPU was warm (docs/perf): pieces cost nothing and bound what one LAUNCH_DMA holds.
            copy_chunk_bytes: 64 << 20,
            vaspace_flags: sys::VASPACE_FLAGS,
            debugger: false,
            tuning: tuning_from_env(LaunchTuning::default()),
            // Measured on the H200: no faster than the graphics copy engine (both 44 GB/s from a sleeping
            // host, 55 from a spinning one), so off; kept for copies that overlap compute.
            async_copy: false,
            // Measured on the H200: 2 MiB staging pages changed neither speed nor warm-up; off.
            huge_staging: false,
            copy_line_bytes: 0,
            // A request for this process, like libcuda's, never a card setting; OMEGA_NVIDIA_PERF_BOOST=0
            // leaves the GPU at whatever clock the driver picks.
            perf_boost: std::env::var("OMEGA_NVIDIA_PERF_BOOST").map_or(true, |v| v != "0"),
            // fault::DEFAULT_FAULT_SIGNAL says which and why; OMEGA_NVIDIA_FAULT_SIGNAL overrides it.
            fault_signal: FaultSignal::from_env(fault::DEFAULT_FAULT_SIGNAL),
        }
    }
}

/// The value of the environment variable `name` as a decimal number, or `default` when it is unset. A
/// value that is not a number is ignored with a line on stderr naming it, so a sweep that mistypes one is
/// not silently run on the default.
fn env_or<T: std::str::FromStr + Copy + std::fmt::Display>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            eprintln!("omega (nvidia): {name}={v:?} is not a number; using {default}");
            default
        }),
    }
}

/// The launch tuning with the overrides a GPU job may set, so that the suite and benchmarks can run
/// under another completion or chain mechanism without a rebuild (and a user can go back to libcuda's
/// barrier): `OMEGA_NVIDIA_CHAIN_MEMBAR` = 1 (L1_SYSMEMBAR), 3 (L1_MEMBAR) or 0 (L1_NONE, a measuring
/// knob: only a semaphore chain's release barrier may stand in for it) for `cwd_membar`;
/// `OMEGA_NVIDIA_MEMBAR_TASK_CHASING` = 0 or 1; `OMEGA_NVIDIA_MARKER1` = `host`, `compute`, `qmd` or
/// `acquire` ([`Marker1`]); `OMEGA_NVIDIA_MARKER1_SYSMEMBAR` = 0 or 1; `OMEGA_NVIDIA_CHAIN` =
/// `dependent` or `semaphore` ([`queue::ChainMode`]; `programmatic` is withdrawn: see `tuning_from`);
/// `OMEGA_NVIDIA_PDL_LAST_CTA` = 0 or 1; `OMEGA_NVIDIA_PDL_LATCH_IDS` = a count of at least 1;
/// `OMEGA_NVIDIA_CHAIN_RELEASE_MEMBAR` = 0 or 1. Other values are ignored with a line on stderr.
fn tuning_from_env(t: LaunchTuning) -> LaunchTuning {
    tuning_from(t, |name| std::env::var(name).ok())
}

/// [`tuning_from_env`] over any source of variables (tests pass a table).
fn tuning_from(mut t: LaunchTuning, var: impl Fn(&str) -> Option<String>) -> LaunchTuning {
    let bad = |name: &str, v: &str| eprintln!("omega (nvidia): {name}={v:?} is not one of its values; ignored");
    let flag = |name: &str, slot: &mut bool| match var(name).as_deref() {
        None => {}
        Some("0") => *slot = false,
        Some("1") => *slot = true,
        Some(v) => bad(name, v),
    };
    match var("OMEGA_NVIDIA_CHAIN_MEMBAR").as_deref() {
        None => {}
        Some(v @ ("0" | "1" | "3")) => t.cwd_membar = v.parse().expect("one of 0, 1, 3"),
        Some(v) => bad("OMEGA_NVIDIA_CHAIN_MEMBAR", v),
    }
    flag("OMEGA_NVIDIA_MEMBAR_TASK_CHASING", &mut t.membar_task_chasing);
    match var("OMEGA_NVIDIA_MARKER1").as_deref() {
        None => {}
        Some("host") => t.marker1 = Marker1::HostIdleRelease,
        Some("compute") => t.marker1 = Marker1::ComputeReport,
        Some("qmd") => t.marker1 = Marker1::QmdRelease,
        Some("acquire") => t.marker1 = Marker1::HostAfterAcquire,
        Some(v) => bad("OMEGA_NVIDIA_MARKER1", v),
    }
    flag("OMEGA_NVIDIA_MARKER1_SYSMEMBAR", &mut t.marker1_sysmembar);
    match var("OMEGA_NVIDIA_CHAIN").as_deref() {
        None => {}
        Some("dependent") => t.chain = ChainMode::Dependent,
        // Withdrawn from the environment (nv_probe still builds it through `LaunchTuning`): on the H200 every
        // programmatic chain hung or raised Xid 13 (docs/perf/2026-12-02-s3-suite-matmul-launch.md), so a
        // run asking for it gets the dependent chain and says so.
        Some(v @ ("programmatic" | "pdl")) => eprintln!(
            "omega (nvidia): OMEGA_NVIDIA_CHAIN={v:?} is withdrawn (its QMD encoding hung on the H200); \
             the dependent chain runs"
        ),
        Some("semaphore") => t.chain = ChainMode::Semaphore,
        Some(v) => bad("OMEGA_NVIDIA_CHAIN", v),
    }
    flag("OMEGA_NVIDIA_PDL_LAST_CTA", &mut t.pdl_at_last_cta_launch);
    match var("OMEGA_NVIDIA_PDL_LATCH_IDS").map(|v| (v.trim().parse::<u32>(), v)) {
        None => {}
        Some((Ok(n), _)) if n >= 1 => t.pdl_latch_ids = n,
        Some((_, v)) => bad("OMEGA_NVIDIA_PDL_LATCH_IDS", &v),
    }
    flag("OMEGA_NVIDIA_CHAIN_RELEASE_MEMBAR", &mut t.chain_release_membar);
    t
}

/// The GR figures that size local memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct GrInfo {
    pub(crate) sm_version: u32,
    pub(crate) max_warps_per_sm: u32,
    pub(crate) gpcs: u32,
    pub(crate) tpc_per_gpc: u32,
    pub(crate) sm_per_tpc: u32,
}

/// The driver objects below the channel: client, device, VA space and the memory machinery every service
/// allocates through (`memory.rs`).
pub(crate) struct Base {
    pub(crate) rm: Rm,
    pub(crate) uvm: Uvm,
    /// A registered `/dev/nvidiaN` fd, kept for wrapping host pages.
    pub(crate) dev: DriverFd<GpuFile>,
    pub(crate) minor: u32,
    pub(crate) uuid: [u8; 16],
    pub(crate) device: u32,
    /// The subdevice, which FB info is asked of.
    pub(crate) subdevice: u32,
    pub(crate) virtmem: u32,
    pub(crate) va_low: VaRange,
    pub(crate) va_high: VaRange,
    pub(crate) next_os_handle: u32,
}

impl Base {
    /// The machinery on `/dev/null` files (tests): every driver request is refused, every VA range free.
    #[cfg(test)]
    pub(crate) fn null() -> Base {
        Base {
            rm: Rm::null(),
            uvm: Uvm::null(),
            dev: DriverFd::null(),
            minor: 0,
            uuid: [0; 16],
            device: 2,
            subdevice: 4,
            virtmem: 3,
            va_low: VaRange::new(memory::LOW_VA.0, memory::LOW_VA.1),
            va_high: VaRange::new(memory::HIGH_VA.0, memory::HIGH_VA.1),
            next_os_handle: 0x1000,
        }
    }
}

/// The performance boost asked for at open.
pub(crate) struct Boost {
    /// The subdevice it was granted on (cleared at close).
    pub(crate) subdevice: Option<u32>,
    /// What came of asking, for reports.
    pub(crate) note: String,
}

/// Everything the open device holds: what it is, the driver objects, and one state per service.
pub(crate) struct OpenDevice {
    pub(crate) base: Base,
    pub(crate) abi: &'static abi::DriverAbi,
    pub(crate) arch: &'static arch::Arch,
    pub(crate) info: DeviceInfo,
    pub(crate) gr: GrInfo,
    /// RM objects in creation order, freed at close (see `device.rs`).
    pub(crate) objects: Vec<Object>,
    /// Channels, doorbell, command arena, internal semaphores and local memory (`channel.rs`).
    pub(crate) channels: Channels,
    /// The buffers handed out (`memory.rs`).
    pub(crate) memory: Buffers,
    /// QMD templates, prepared submissions and the instruction-cache state (`queue.rs`).
    pub(crate) queue: Queue,
    /// Which copy engine syncs use (`visibility.rs`).
    pub(crate) syncs: Syncs,
    pub(crate) boost: Boost,
    /// What a recovery's stop did (`device.rs`), once it succeeded: the channels are gone.
    pub(crate) stopped: Option<crate::device::Stopped>,
    /// Which fault signal is watched besides the notifier (`fault.rs`).
    pub(crate) faults: fault::FaultWatch,
}

// SAFETY: the raw pointers in `OpenDevice` (the usermode page, CPU views) are mappings owned by it; every access
// goes through the `Nvidia::state` mutex, so moving the state between threads moves sole access with it.
unsafe impl Send for OpenDevice {}
// SAFETY: as for `OpenDevice`: the pointers are owned mappings reached only under the state mutex.
unsafe impl Send for Base {}

/// The NVIDIA platform.
pub struct Nvidia {
    config: Mutex<NvidiaConfig>,
    clock: NvidiaClock,
    lock: PlainLock,
    heap: LibcHeap,
    pub(crate) state: Mutex<Option<Box<OpenDevice>>>,
    /// What the driver refused during the last close (close itself cannot fail).
    pub(crate) close_errors: Mutex<Vec<String>>,
}

/// Device files the platform needs.
const DEVICE_FILES: [&str; 2] = [ioctl::CTL_PATH, ioctl::UVM_PATH];

impl Nvidia {
    /// The platform with default settings, after checking only that the driver's device files exist (no
    /// ioctl is made): `OMEGA_PLATFORM=nvidia` on a machine without the driver is a clear error here,
    /// not a failed open later.
    pub fn probe() -> Result<Arc<Nvidia>, HalError> {
        Self::probe_with(NvidiaConfig::default())
    }

    /// [`Nvidia::probe`] with `config`.
    pub fn probe_with(config: NvidiaConfig) -> Result<Arc<Nvidia>, HalError> {
        let missing: Vec<&str> = DEVICE_FILES.iter().copied().filter(|p| !Path::new(p).exists()).collect();
        if !missing.is_empty() {
            return Err(HalError::NoDevice(format!(
                "nvidia: {} not found (is NVIDIA's open kernel driver loaded, with nvidia-uvm?)",
                missing.join(", ")
            )));
        }
        Ok(Arc::new(Nvidia::with_config(config)))
    }

    /// The platform with `config`, without probing for the device files.
    pub fn with_config(config: NvidiaConfig) -> Nvidia {
        Nvidia {
            config: Mutex::new(config),
            clock: NvidiaClock::new(),
            lock: PlainLock::new(),
            heap: LibcHeap,
            state: Mutex::new(None),
            close_errors: Mutex::new(Vec::new()),
        }
    }

    /// The settings.
    pub fn config(&self) -> NvidiaConfig {
        crate::sync::lock(&self.config).clone()
    }

    /// Replaces the settings. `bar1_sync_max`, `barrier` and `internal_timeout_ms` apply from the next
    /// call on (a BAR1 view exists only for buffers allocated while `bar1_sync_max` covered them);
    /// `gpfifo_entries` applies from the next open.
    pub fn set_config(&self, config: NvidiaConfig) {
        *crate::sync::lock(&self.config) = config;
    }

    /// What the open device reported, if it is open.
    pub fn info(&self) -> Option<DeviceInfo> {
        crate::sync::lock(&self.state).as_ref().map(|o| o.info.clone())
    }

    /// The driver-ABI table entry the open device was matched to, if it is open.
    pub fn driver_abi(&self) -> Option<&'static abi::DriverAbi> {
        crate::sync::lock(&self.state).as_ref().map(|o| o.abi)
    }

    /// The architecture of the open device, if it is open.
    pub fn arch(&self) -> Option<&'static arch::Arch> {
        crate::sync::lock(&self.state).as_ref().map(|o| o.arch)
    }

    /// What the driver refused while the last `close` freed objects (empty when everything went).
    pub fn last_close_errors(&self) -> Vec<String> {
        crate::sync::lock(&self.close_errors).clone()
    }

    /// The first `n` entries of the channel's error notifier and the ring's GPGet/GPPut, for diagnosis
    /// (`None` while closed). Reads system memory and one USERD word through BAR1: not for hot paths.
    pub fn channel_state(&self, n: usize) -> Option<(Vec<sys::NvNotification>, u32, u32)> {
        let st = crate::sync::lock(&self.state);
        let o = st.as_ref()?;
        let c = &o.channels.compute;
        let entries = (0..n.min(16))
            // SAFETY: the notifier mapping is 64 KiB, far more than 16 entries of 16 bytes.
            .map(|i| unsafe { (c.notifier.cpu as *const sys::NvNotification).add(i).read_volatile() })
            .collect();
        // SAFETY: USERD lies inside the GPFIFO mapping.
        let get =
            unsafe { (c.gpfifo.cpu.add(c.userd_offset as usize + sys::userd::GP_GET) as *const u32).read_volatile() };
        Some((entries, get, (c.put % c.entries as u64) as u32))
    }

    /// Which source the platform clock reads (the TSC where `CLOCK_MONOTONIC` is a system call), and what
    /// one `CLOCK_MONOTONIC` read cost when the platform was made, in ns.
    pub fn clock_source(&self) -> (ClockSource, u64) {
        (self.clock.source(), self.clock.monotonic_read_ns())
    }

    /// Whether the performance boost was granted at open, and why not ("" while closed).
    pub fn perf_boost(&self) -> String {
        crate::sync::lock(&self.state).as_ref().map_or(String::new(), |o| o.boost.note.clone())
    }

    /// Which signal names a faulted channel, and why not UVM's events when it is the notifier alone (""
    /// while closed).
    pub fn fault_signal(&self) -> String {
        crate::sync::lock(&self.state).as_ref().map_or(String::new(), |o| o.faults.note())
    }

    /// Which copy engine syncs use, and why ("" while closed).
    pub fn copy_engine(&self) -> String {
        crate::sync::lock(&self.state).as_ref().map_or(String::new(), |o| o.syncs.note().to_string())
    }

    /// Submissions sent from a prepared encoding and ones encoded afresh since open ((0, 0) while closed).
    pub fn prepared_stats(&self) -> (u64, u64) {
        crate::sync::lock(&self.state).as_ref().map_or((0, 0), |o| o.queue.prepared_stats())
    }

    /// What the memory and visibility services did since open (all zero while closed), with the BAR1
    /// aperture's size and free space as RM reports them now (`None` while closed or if RM refuses).
    pub fn memory_stats(&self) -> (MemoryStats, Option<(u64, u64)>) {
        let st = crate::sync::lock(&self.state);
        let Some(o) = st.as_ref() else { return (MemoryStats::default(), None) };
        let bar1 = o.base.rm.fb_info(o.base.subdevice, [sys::fb_info::BAR1_SIZE, sys::fb_info::BAR1_AVAIL_SIZE]);
        let stats =
            MemoryStats { staging_bytes: o.syncs.staging_bytes(), lost_rings: o.syncs.lost_rings(), ..o.memory.stats };
        (stats, bar1.ok().map(|[size, free]| (size, free)))
    }

    /// Per-thread local memory the SLM backing currently covers, in bytes (0 while closed).
    pub fn local_bytes_per_thread(&self) -> u32 {
        crate::sync::lock(&self.state).as_ref().map_or(0, |o| o.channels.local_bytes_per_thread())
    }
}

impl Platform for Nvidia {
    fn name(&self) -> &'static str {
        "nvidia"
    }

    fn caps(&self) -> Caps {
        let arch = self.arch().unwrap_or(&arch::HOPPER);
        Caps {
            abi_major: PLATFORM_ABI_MAJOR,
            abi_minor: PLATFORM_ABI_MINOR,
            services: Services::all(),
            page_bytes: memory::PAGE,
            code_prefetch_tail: arch::CODE_PREFETCH_TAIL,
            param_base: arch.param_base,
            max_param_bytes: arch.max_param_bytes,
            // Every arch the backend knows takes Hopper's shapes and register count (`qmd::encode` checks
            // the same); the shared memory per block is the arch's.
            launch: crate::LaunchLimits {
                sm: arch.sm,
                max_shared_bytes: arch.max_shared_bytes,
                reserved_shared_bytes: arch.reserved_shared_bytes,
                // Clusters only where the QMD layout's cluster fields were read (V04); elsewhere the
                // encoder would refuse them, so the limits say so first.
                max_cluster_ctas: qmd::cluster_limits(arch).0,
                max_cluster_ctas_non_portable: qmd::cluster_limits(arch).1,
                max_carveout_kib: arch.shared_carveouts_kib.last().copied().unwrap_or(0),
                ..crate::LaunchLimits::SM_90
            },
        }
    }

    fn clock(&self) -> Option<&dyn Clock> {
        Some(&self.clock)
    }

    fn lock(&self) -> Option<&dyn ProcessLock> {
        Some(&self.lock)
    }

    fn memory(&self) -> Option<&dyn DeviceMemory> {
        Some(self)
    }

    fn queue(&self) -> Option<&dyn SubmitQueue> {
        Some(self)
    }

    fn poll(&self) -> Option<&dyn CompletionPoll> {
        Some(self)
    }

    fn host(&self) -> Option<&dyn HostMemory> {
        Some(&self.heap)
    }

    fn visibility(&self) -> Option<&dyn Visibility> {
        Some(self)
    }

    fn device(&self) -> Option<&dyn Device> {
        Some(self)
    }

    fn wait_policy(&self) -> WaitPolicy {
        crate::sync::lock(&self.config).wait
    }

    fn driver(&self) -> Option<&crate::driver::DriverCounters> {
        Some(&ioctl::COUNTERS)
    }

    fn notes(&self) -> Vec<(&'static str, String)> {
        let st = crate::sync::lock(&self.state);
        let Some(o) = st.as_ref() else { return Vec::new() };
        vec![
            ("fault signal", o.faults.note()),
            ("performance boost", o.boost.note.clone()),
            ("copy engine", o.syncs.note().to_string()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_offer_every_service_and_the_hopper_parameter_base_while_closed() {
        let nv = Nvidia::with_config(NvidiaConfig::default());
        let caps = nv.caps();
        assert_eq!(crate::negotiate(&caps, Services::SESSION), Ok(()));
        assert_eq!(caps.param_base, 0x210);
        assert!(caps.code_prefetch_tail >= 4096);
        assert_eq!(nv.name(), "nvidia");
        assert!(nv.info().is_none());
    }

    #[test]
    fn tuning_switches_come_from_their_variables_and_bad_values_change_nothing() {
        let with = |pairs: &[(&str, &str)]| {
            let table: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            tuning_from(LaunchTuning::default(), move |name| {
                table.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
            })
        };
        let d = LaunchTuning::default();
        assert_eq!(with(&[]), d, "no variables: the defaults");
        let t = with(&[
            ("OMEGA_NVIDIA_MARKER1", "qmd"),
            ("OMEGA_NVIDIA_MARKER1_SYSMEMBAR", "1"),
            ("OMEGA_NVIDIA_CHAIN", "semaphore"),
            ("OMEGA_NVIDIA_CHAIN_MEMBAR", "0"),
            ("OMEGA_NVIDIA_CHAIN_RELEASE_MEMBAR", "1"),
            ("OMEGA_NVIDIA_MEMBAR_TASK_CHASING", "0"),
        ]);
        assert_eq!(
            t,
            LaunchTuning {
                marker1: Marker1::QmdRelease,
                marker1_sysmembar: true,
                chain: ChainMode::Semaphore,
                cwd_membar: 0,
                chain_release_membar: true,
                membar_task_chasing: false,
                ..d
            }
        );
        let p = with(&[
            ("OMEGA_NVIDIA_CHAIN", "pdl"),
            ("OMEGA_NVIDIA_PDL_LAST_CTA", "0"),
            ("OMEGA_NVIDIA_PDL_LATCH_IDS", "1"),
        ]);
        // The withdrawn programmatic chain is not taken from the environment; its latch knobs still parse.
        assert_eq!((p.chain, p.pdl_at_last_cta_launch, p.pdl_latch_ids), (ChainMode::Dependent, false, 1));
        assert_eq!(with(&[("OMEGA_NVIDIA_MARKER1", "acquire")]).marker1, Marker1::HostAfterAcquire);
        assert_eq!(with(&[("OMEGA_NVIDIA_MARKER1", "compute")]).marker1, Marker1::ComputeReport);
        for (name, value) in [
            ("OMEGA_NVIDIA_MARKER1", "fast"),
            ("OMEGA_NVIDIA_CHAIN", "graph"),
            ("OMEGA_NVIDIA_CHAIN_MEMBAR", "2"),
            ("OMEGA_NVIDIA_PDL_LATCH_IDS", "0"),
            ("OMEGA_NVIDIA_PDL_LAST_CTA", "yes"),
        ] {
            assert_eq!(with(&[(name, value)]), d, "{name}={value} must be ignored");
        }
    }

    #[test]
    fn probe_names_missing_files() {
        if DEVICE_FILES.iter().all(|p| Path::new(p).exists()) {
            // A machine with the driver: probing must succeed instead.
            assert!(Nvidia::probe().is_ok());
            return;
        }
        match Nvidia::probe() {
            Err(HalError::NoDevice(msg)) => assert!(msg.contains("/dev/nvidia"), "{msg}"),
            other => panic!("expected NoDevice, got {:?}", other.map(|_| ())),
        }
    }
}
