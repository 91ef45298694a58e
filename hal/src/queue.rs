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
    /// The contract's `num_elements` word (`OmegaGpuLaunch.num_elements`), handed to the platform
    /// unchanged. No QMD generation the nvidia backend encodes (V04_00 on Hopper, V05_00 on Blackwell) has
    /// a word for it, so that backend writes it nowhere; the simulator records it with the launch.
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

/// What one launch descriptor may ask of an architecture: the shape, register and shared-memory limits the
/// launch descriptor (the QMD on nvidia) can carry and the chip can run. A platform declares its own in
/// [`crate::Caps::launch`]; the session refuses a launch past them before anything is submitted, so every
/// platform refuses the same launches by the same name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchLimits {
    /// The compute capability the limits are of, for messages: (9, 0) is sm_90.
    pub sm: (u32, u32),
    /// Most threads per block along x, y and z.
    pub max_block: [u32; 3],
    /// Most threads per block, all three sides together.
    pub max_threads_per_block: u32,
    /// Most blocks per grid along x, y and z.
    pub max_grid: [u32; 3],
    /// Most registers per thread a descriptor may declare (after the session's rounding).
    pub max_registers: u32,
    /// Most shared memory per block in bytes, the part the system reserves included.
    pub max_shared_bytes: u32,
    /// Shared memory the system reserves in every block (inside `max_shared_bytes`).
    pub reserved_shared_bytes: u32,
}

impl LaunchLimits {
    /// Hopper (sm_90), as the QMD V04_00 encoder and the H200 take them: blocks of 1024 threads at most
    /// (1024 x 1024 x 64 per side), grids of 2^31 - 1 x 65535 x 65535 blocks, 255 registers per thread and
    /// 228 KiB of shared memory per block, of which the system reserves 1 KiB (so 227 KiB for the kernel).
    pub const SM_90: LaunchLimits = LaunchLimits {
        sm: (9, 0),
        max_block: [1024, 1024, 64],
        max_threads_per_block: 1024,
        max_grid: [0x7fff_ffff, 65535, 65535],
        max_registers: 255,
        max_shared_bytes: 228 * 1024,
        reserved_shared_bytes: 1024,
    };

    /// Checks one descriptor against the limits; the error names the limit that was passed.
    pub fn check(&self, d: &LaunchDesc<'_>) -> Result<(), LimitError> {
        let sm = self.sm;
        for (what, dims, max) in [("block", d.block, self.max_block), ("grid", d.grid, self.max_grid)] {
            for (axis, (&n, max)) in dims.iter().zip(max).enumerate() {
                if n == 0 || n > max {
                    return Err(LimitError::Side { what, axis: AXES[axis], n, max, sm });
                }
            }
        }
        let threads = d.block.iter().map(|&b| u64::from(b)).product::<u64>();
        if threads > u64::from(self.max_threads_per_block) {
            return Err(LimitError::Threads { threads, max: self.max_threads_per_block, sm });
        }
        if d.gpr_count > self.max_registers {
            return Err(LimitError::Registers { registers: d.gpr_count, max: self.max_registers, sm });
        }
        if d.shared_bytes > self.max_shared_bytes {
            return Err(LimitError::Shared {
                bytes: u64::from(d.shared_bytes),
                max: self.max_shared_bytes,
                reserved: self.reserved_shared_bytes,
                sm,
            });
        }
        Ok(())
    }
}

const AXES: [char; 3] = ['x', 'y', 'z'];

/// A launch descriptor past its architecture's [`LaunchLimits`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// A block or grid side of 0 or past its limit.
    #[error("{what} {axis} of {n} is not in 1..={max} (sm_{}{})", sm.0, sm.1)]
    Side {
        /// `"block"` (threads) or `"grid"` (blocks).
        what: &'static str,
        /// `'x'`, `'y'` or `'z'`.
        axis: char,
        /// The side asked for.
        n: u32,
        /// The largest the architecture allows.
        max: u32,
        /// Compute capability.
        sm: (u32, u32),
    },
    /// More threads per block than the architecture runs.
    #[error("{threads} threads per block, sm_{}{} allows at most {max}", sm.0, sm.1)]
    Threads {
        /// Threads asked for.
        threads: u64,
        /// The limit.
        max: u32,
        /// Compute capability.
        sm: (u32, u32),
    },
    /// More registers per thread than the architecture has.
    #[error("{registers} registers per thread, sm_{}{} allows at most {max}", sm.0, sm.1)]
    Registers {
        /// Registers asked for (after rounding).
        registers: u32,
        /// The limit.
        max: u32,
        /// Compute capability.
        sm: (u32, u32),
    },
    /// More shared memory per block than the architecture has.
    #[error(
        "{bytes} bytes of shared memory per block, sm_{}{} allows at most {max} ({} KiB for the kernel plus the \
         {reserved} bytes the system reserves)",
        sm.0, sm.1, (max - reserved) / 1024
    )]
    Shared {
        /// Bytes asked for, the system's reserve included.
        bytes: u64,
        /// The limit, the reserve included.
        max: u32,
        /// The system's reserve.
        reserved: u32,
        /// Compute capability.
        sm: (u32, u32),
    },
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
