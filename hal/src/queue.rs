//! The submission-queue service: hands a batch of launches to the device, each followed by the
//! completion markers the session polls.

use crate::error::HalError;
use crate::poll::MarkerSlot;

/// What must finish before a launch may start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Waits for every earlier launch of the submission (the default: dependent launches never overlap).
    AfterPrevious,
    /// May overlap the launch before it.
    Independent,
    /// No ordering at all (test-only barrier mode).
    Unordered,
}

/// A constant bank other than 0 that a launch binds: the kernel's `c[index][...]` reads come from `bytes`
/// bytes at `va`. Kernels that use module data need them: `__constant__` data is bank 3 and the addresses
/// of `__device__` data are bank 4 (both inside the loaded image, which relocation already patched).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConstBank {
    /// Bank index, 1..8 (0 is the platform's own parameter bank and is refused).
    pub index: u32,
    /// GPU address of the bank's first byte (64-byte aligned on the nvidia backend).
    pub va: u64,
    /// Its size in bytes (the platform may round it up to 16).
    pub bytes: u32,
}

/// One kernel launch, fully resolved: the platform only encodes it.
#[derive(Clone, Copy, Debug)]
pub struct LaunchDesc<'a> {
    /// GPU address of the kernel's first instruction.
    pub code_va: u64,
    /// Bytes of code from `code_va` (for instruction prefetch; 0 = unknown).
    pub code_bytes: u64,
    /// Registers per thread, already rounded by the session.
    pub gpr_count: u32,
    /// Threads per block, x/y/z (each at least 1).
    pub block: [u32; 3],
    /// Blocks per grid, x/y/z (each at least 1).
    pub grid: [u32; 3],
    /// Shared memory per block, static plus dynamic, in bytes.
    pub shared_bytes: u32,
    /// The dynamic part of `shared_bytes`.
    pub dynamic_shared_bytes: u32,
    /// Local memory (stack) per thread, in bytes.
    pub local_bytes_per_thread: u32,
    /// Named barriers the kernel uses.
    pub barrier_count: u32,
    /// The contract's `num_elements` word, carried for identical descriptors.
    pub num_elements: u32,
    /// Parameter words, written at the architecture's parameter base of constant bank 0.
    pub args: &'a [u32],
    /// Constant banks other than 0 to bind (empty for a kernel without module data). The simulator
    /// ignores them; its kernels are host functions.
    pub const_banks: &'a [ConstBank],
    /// What must finish first.
    pub order: Order,
    /// Not submitted to the device at all (test-only `skip_launch`).
    pub skip: bool,
}

/// A batch of launches with the two completion markers the session polls.
#[derive(Clone, Copy, Debug)]
pub struct Submission<'a> {
    /// Launches in order; at least one.
    pub launches: &'a [LaunchDesc<'a>],
    /// Marker 0: released with `sequence` when the last launch's grid has completed.
    /// Marker 1: released with `sequence` (and a timestamp) after the engine has gone idle.
    pub markers: [MarkerSlot; 2],
    /// The value both markers receive.
    pub sequence: u32,
    /// Where launch `i` releases `sequence` and its completion timestamp (16 bytes each), if anywhere.
    pub stamps: Option<MarkerSlot>,
}

/// A buffer of the platform's own that submitted work reads or writes: a ring, pushbuffers, launch
/// descriptors, constant banks, semaphores, local memory. It has no session handle; the platform allocated
/// it and releases it at [`Device::close`](crate::device::Device::close).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueBuffer {
    /// What it is, for reports ("GPFIFO ring and USERD").
    pub what: &'static str,
    /// GPU virtual address.
    pub va: u64,
    /// Bytes.
    pub bytes: u64,
}

/// The submission queue.
pub trait SubmitQueue: Send + Sync {
    /// Submits `s` and returns without waiting.
    ///
    /// # Safety
    /// - The device is open and the caller holds the session lock.
    /// - Every address in `s` (code, arguments that are addresses, markers, stamps) lies in live
    ///   allocations of this platform that stay allocated until both markers are observed, or forever
    ///   if they never are.
    /// - So does every byte of every launch's `const_banks` ranges (`va .. va + bytes`, rounded up to 16),
    ///   and those bytes are GPU-readable: the kernel reads them as constants for the whole launch.
    /// - The previous submission's markers were both observed (one submission in flight at a time).
    unsafe fn submit(&self, s: &Submission<'_>) -> Result<(), HalError>;

    /// Every buffer of the platform's own that work submitted since the device opened may still touch
    /// (empty while the device is closed). The session asks once, at a latch, and counts them as parked:
    /// after an uncertain completion the device is never closed, so they stay allocated, and a report of
    /// what the latch kept must include them. A platform that keeps nothing of its own in device memory
    /// returns an empty list.
    fn in_flight_buffers(&self) -> Vec<QueueBuffer>;
}
