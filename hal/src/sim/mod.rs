//! # The simulated platform
//!
//! A device in host memory, for machines without a GPU and for tests. What makes it useful rather than a
//! stub:
//!
//! - **Deterministic.** Its clock is virtual: every read advances it by a fixed tick and every sleep by the
//!   sleep's length, so a timeout of 100 ms is reached after the same number of polls on every run.
//! - **Discrete memory.** Data buffers have a CPU copy and a separate device copy; only
//!   `sync_to_gpu` / `sync_to_cpu` move bytes between them, so a missing sync shows up as wrong results,
//!   as it would on a discrete GPU. Code, queue and HOST_POLLED buffers are coherent (one copy).
//! - **Kernels run as host code.** A code buffer holds a small image naming a kernel ([`code_image`]); the
//!   host implementation registered under that name runs on the device copies of the buffers, with
//!   every access checked against the allocation map and its rights: a stray store is an MMU fault
//!   (Xid 31), as on hardware.
//! - **Kernels run in virtual time, in slices.** A submission only checks and schedules its launches;
//!   their host kernels run during the completion polls, a slice of at most [`SimConfig::slice_units`]
//!   work units at a time, each slice when the virtual clock reaches its end (a launch's first slice
//!   takes [`SimConfig::launch_ns`], every further one [`SimConfig::slice_ns`]). So no call holds more
//!   host memory or time than a slice needs, whatever the grid or the arguments say, and the launch's own
//!   timeout stops a simulated kernel as it would a real one: the session stops polling and latches.
//! - **Hardware limits.** A launch past the sm_90 model's limits ([`crate::LaunchLimits::SM_90`]: block
//!   and grid sides, registers, shared memory) is refused at submit with the limit named, as the QMD
//!   encoder refuses it on the GPU.
//! - **Faults on demand** ([`SimFault`]): a launch that never completes, a refused poll, a failed
//!   allocation, a kernel fault, a failed open or sync, a stop that is refused or that leaves the work
//!   running.

mod clock;
mod device;
mod kernel;
mod memory;
mod poll;
mod queue;
mod visibility;

pub use clock::{SimClock, YIELD_NS};
pub use kernel::{
    cluster_rank, code_image, code_image_with_symbols, parse_code_image, parse_code_image_symbols, HostKernel,
    KernelCtx, KernelError, Shape, CODE_MAGIC,
};

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::caps::{Caps, Services, PLATFORM_ABI_MAJOR, PLATFORM_ABI_MINOR};
use crate::host::LibcHeap;
use crate::lock::PlainLock;
use crate::poll::ChannelFault;
use crate::sync::{self, Arc, Mutex};
use crate::{
    Clock, CompletionPoll, Device, DeviceMemory, HostMemory, LaunchLimits, Platform, ProcessLock, SubmitQueue,
    Visibility,
};

/// A fault to inject; each is consumed by the first operation it applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SimFault {
    /// The next submission never releases its markers (a kernel that never ends).
    Hang,
    /// The next marker poll is refused.
    RefusePoll,
    /// The next device allocation fails with out-of-memory.
    FailAlloc,
    /// The next launch faults with this Xid (31 = MMU fault); its markers never arrive.
    KernelFault(u32),
    /// The next device open fails, with this text as the driver's.
    FailOpen(String),
    /// The next visibility sync fails.
    FailSync,
    /// The next [`Device::stop`]'s channel stop times out, as the H200's NVA06F_CTRL_CMD_STOP_CHANNEL did
    /// for a channel spinning a kernel: the stop goes on to free the channel group, which drops the work
    /// (unless [`SimFault::FreeRefused`] refuses that too).
    StopTimesOut,
    /// The next [`Device::stop`]'s free of the channel group is refused: the work stays scheduled and a
    /// recovery stays latched, naming this and, after a [`SimFault::StopTimesOut`], the timeout too.
    FreeRefused,
    /// The next [`Device::stop`] reports success but leaves the pending work running, as a driver that
    /// claimed a stop it did not make would: a recovery's heartbeat must see the work still writing.
    StopLeavesWork,
}

/// What the simulator recorded of a launch, for tests to assert on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchRecord {
    /// Kernel name from the code image.
    pub kernel: String,
    /// Code address.
    pub code_va: u64,
    /// Registers declared.
    pub gpr_count: u32,
    /// Block size.
    pub block: [u32; 3],
    /// Grid size.
    pub grid: [u32; 3],
    /// Shared bytes per block.
    pub shared_bytes: u32,
    /// Dynamic shared bytes.
    pub dynamic_shared_bytes: u32,
    /// Local bytes per thread.
    pub local_bytes_per_thread: u32,
    /// Clusters and carve-out, as asked for (the simulator runs blocks one after another, so a cluster
    /// changes only what its kernels see: [`KernelCtx::cluster_rank`] and [`KernelCtx::cluster_id`]).
    pub features: crate::LaunchFeatures,
    /// The descriptor's `num_elements` word, as the session handed it over.
    pub num_elements: u32,
    /// Parameter words.
    pub args: Vec<u32>,
    /// Its ordering against the launch before.
    pub order: crate::Order,
    /// Virtual start and end time.
    pub start_ns: u64,
    /// Virtual end time.
    pub end_ns: u64,
    /// Slices the launch ran in ([`SimConfig::slice_units`]); 1 for a kernel that takes no slice.
    pub slices: u64,
}

/// Counters of what the simulator did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Device opens.
    pub opens: u32,
    /// Device closes.
    pub closes: u32,
    /// Submissions.
    pub submissions: u64,
    /// Launches run.
    pub launches: u64,
    /// Live allocations.
    pub live_allocations: usize,
    /// Live bytes.
    pub live_bytes: u64,
    /// Allocations released.
    pub frees: u64,
    /// Visibility syncs performed.
    pub syncs: u64,
}

/// Simulator settings.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The services it offers (drop some to test refusals).
    pub services: Services,
    /// Device memory in bytes.
    pub memory_bytes: u64,
    /// Virtual nanoseconds one launch takes (its first slice: all of a launch of at most `slice_units`
    /// work units).
    pub launch_ns: u64,
    /// Work units (threads, elements: what the kernel's `take` counts) a host kernel does per call.
    pub slice_units: u64,
    /// Virtual nanoseconds each slice after a launch's first takes. A slice runs at the first poll at or
    /// after the time it ends, so a long kernel advances only while the session waits for it, and a wait
    /// that runs out stops it where it is.
    pub slice_ns: u64,
    /// Virtual nanoseconds between the kernel-done marker and the idle marker.
    pub idle_ns: u64,
    /// Virtual nanoseconds each clock read advances.
    pub tick_ns: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            services: Services::all(),
            memory_bytes: 4 << 30,
            launch_ns: 2_000,
            slice_units: 1 << 16,
            slice_ns: 1_000_000,
            idle_ns: 300,
            tick_ns: 20,
        }
    }
}

pub(crate) struct State {
    pub(crate) open: bool,
    pub(crate) memory: memory::SimMemory,
    pub(crate) faults: VecDeque<SimFault>,
    pub(crate) pending: Option<queue::Pending>,
    pub(crate) channel_fault: Option<ChannelFault>,
    /// A [`Device::stop`] succeeded: nothing is submitted until the next open.
    pub(crate) stopped: bool,
    pub(crate) stats: SimStats,
    /// The most recent launches, at most [`LAUNCH_RECORDS`] (so long runs do not grow without bound).
    pub(crate) launches: VecDeque<LaunchRecord>,
}

/// How many launch records the simulator keeps.
pub const LAUNCH_RECORDS: usize = 4096;

impl State {
    /// Removes and returns the first queued fault that `pick` accepts.
    pub(crate) fn take_fault(&mut self, pick: impl Fn(&SimFault) -> bool) -> Option<SimFault> {
        let i = self.faults.iter().position(pick)?;
        self.faults.remove(i)
    }
}

/// The simulated platform.
pub struct Sim {
    config: SimConfig,
    clock: SimClock,
    lock: PlainLock,
    heap: LibcHeap,
    /// Its driver's equivalents counted (allocations, frees, memory queries) and sealed for serving.
    pub(crate) driver: crate::driver::DriverCounters,
    pub(crate) state: Mutex<State>,
    pub(crate) kernels: Mutex<HashMap<String, HostKernel>>,
}

impl Sim {
    /// A simulator with the default settings and every service.
    pub fn new() -> Arc<Sim> {
        Self::with_config(SimConfig::default())
    }

    /// A simulator with `config`.
    pub fn with_config(config: SimConfig) -> Arc<Sim> {
        Arc::new(Sim {
            clock: SimClock::new(config.tick_ns),
            config,
            lock: PlainLock::new(),
            heap: LibcHeap,
            driver: crate::driver::DriverCounters::new(),
            state: Mutex::new(State {
                open: false,
                memory: memory::SimMemory::new(),
                faults: VecDeque::new(),
                pending: None,
                channel_fault: None,
                stopped: false,
                stats: SimStats::default(),
                launches: VecDeque::new(),
            }),
            kernels: Mutex::new(HashMap::new()),
        })
    }

    /// Queues a fault; it fires on the first operation it applies to.
    pub fn inject(&self, fault: SimFault) {
        sync::lock(&self.state).faults.push_back(fault);
    }

    /// Drops every queued fault that has not fired.
    pub fn clear_faults(&self) {
        sync::lock(&self.state).faults.clear();
    }

    /// Registers the host implementation of kernel `name` (replacing any earlier one).
    pub fn register_kernel(&self, name: &str, kernel: HostKernel) {
        sync::lock(&self.kernels).insert(name.to_owned(), kernel);
    }

    /// True when a kernel of that name is registered.
    pub fn has_kernel(&self, name: &str) -> bool {
        sync::lock(&self.kernels).contains_key(name)
    }

    /// The virtual clock, for tests that drive time.
    pub fn sim_clock(&self) -> &SimClock {
        &self.clock
    }

    /// Counters so far.
    pub fn stats(&self) -> SimStats {
        let s = sync::lock(&self.state);
        let mut stats = s.stats.clone();
        stats.live_allocations = s.memory.live_count();
        stats.live_bytes = s.memory.live_bytes();
        stats
    }

    /// The most recent launches (up to [`LAUNCH_RECORDS`]), oldest first.
    pub fn launches(&self) -> Vec<LaunchRecord> {
        sync::lock(&self.state).launches.iter().cloned().collect()
    }

    /// The settings.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    fn has(&self, s: Services) -> bool {
        self.config.services.contains(s)
    }
}

impl Platform for Sim {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn caps(&self) -> Caps {
        Caps {
            abi_major: PLATFORM_ABI_MAJOR,
            abi_minor: PLATFORM_ABI_MINOR,
            services: self.config.services,
            page_bytes: memory::PAGE,
            // The contract's tail: the simulator fetches nothing past the code.
            code_prefetch_tail: crate::MIN_CODE_PREFETCH_TAIL,
            param_base: 0x210,
            max_param_bytes: 32764,
            launch: LaunchLimits::SM_90,
        }
    }

    fn clock(&self) -> Option<&dyn Clock> {
        self.has(Services::CLOCK).then_some(&self.clock as &dyn Clock)
    }

    fn lock(&self) -> Option<&dyn ProcessLock> {
        self.has(Services::LOCK).then_some(&self.lock as &dyn ProcessLock)
    }

    fn memory(&self) -> Option<&dyn DeviceMemory> {
        self.has(Services::DEVICE_MEM).then_some(self as &dyn DeviceMemory)
    }

    fn queue(&self) -> Option<&dyn SubmitQueue> {
        self.has(Services::SUBMIT).then_some(self as &dyn SubmitQueue)
    }

    fn poll(&self) -> Option<&dyn CompletionPoll> {
        self.has(Services::POLL).then_some(self as &dyn CompletionPoll)
    }

    fn host(&self) -> Option<&dyn HostMemory> {
        self.has(Services::HOST_MEM).then_some(&self.heap as &dyn HostMemory)
    }

    fn visibility(&self) -> Option<&dyn Visibility> {
        self.has(Services::SYNC).then_some(self as &dyn Visibility)
    }

    fn device(&self) -> Option<&dyn Device> {
        self.has(Services::DEVICE).then_some(self as &dyn Device)
    }

    fn code_format(&self) -> crate::CodeFormat {
        crate::CodeFormat::SimImage
    }

    fn driver(&self) -> Option<&crate::driver::DriverCounters> {
        Some(&self.driver)
    }
}

/// Map from a buffer's base address to the buffer, shared by memory and kernel access.
pub(crate) type AllocMap = BTreeMap<u64, memory::SimAlloc>;
