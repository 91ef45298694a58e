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

/// How the CTAs of a cluster launch are spread over the GPC's SMs (`CGA_CTA_DISTRIBUTION_MODE` on
/// Hopper).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ClusterScheduling {
    /// The hardware balances a cluster's CTAs over the SMs of one GPC (`LOAD_BALANCING`, 0), the mode a
    /// cluster launch without multicast needs.
    #[default]
    LoadBalancing,
    /// `MULTI_CAST` (1): named by NVIDIA's header beside TMA multicast; whether multicast needs it is not
    /// known until probed.
    MultiCast,
}

/// The Hopper launch features beyond a plain grid: thread-block clusters and the shared-memory
/// carve-out. [`LaunchFeatures::NONE`] is a plain launch, what every launch was before clusters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaunchFeatures {
    /// CTAs per cluster along x, y and z; `[1, 1, 1]` is no cluster. Each grid side must be a multiple
    /// of the cluster side, and the cluster at most [`LaunchLimits::max_cluster_ctas`] CTAs (or
    /// [`LaunchLimits::max_cluster_ctas_non_portable`] with `non_portable_cluster`).
    pub cluster: [u32; 3],
    /// Allows clusters past the portable size (CUDA's `cudaFuncAttributeNonPortableClusterSizeAllowed`).
    pub non_portable_cluster: bool,
    /// How a cluster's CTAs are spread (ignored without a cluster).
    pub cluster_scheduling: ClusterScheduling,
    /// The L1/shared carve-out the launch needs at least, in KiB; 0 leaves it to the platform, which
    /// picks the smallest carve-out holding every block that can be resident at once. Rounded up to a
    /// carve-out the architecture has; more than its largest is refused.
    pub carveout_kib: u32,
}

impl LaunchFeatures {
    /// A plain launch: no cluster, the platform's carve-out.
    pub const NONE: LaunchFeatures = LaunchFeatures {
        cluster: [1, 1, 1],
        non_portable_cluster: false,
        cluster_scheduling: ClusterScheduling::LoadBalancing,
        carveout_kib: 0,
    };

    /// A cluster of `dims` CTAs, scheduled with load balancing.
    pub const fn cluster(dims: [u32; 3]) -> LaunchFeatures {
        LaunchFeatures { cluster: dims, ..LaunchFeatures::NONE }
    }

    /// True when the launch is a cluster launch (any side above 1).
    pub fn has_cluster(&self) -> bool {
        self.cluster != [1, 1, 1]
    }

    /// CTAs per cluster, in 64 bits and saturating, so that hostile sides cannot wrap.
    pub fn cluster_ctas(&self) -> u64 {
        self.cluster.iter().fold(1u64, |n, &c| n.saturating_mul(u64::from(c)))
    }
}

impl Default for LaunchFeatures {
    fn default() -> Self {
        LaunchFeatures::NONE
    }
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
    /// Clusters and the shared-memory carve-out ([`LaunchFeatures::NONE`] for a plain launch).
    pub features: LaunchFeatures,
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
    /// Most CTAs per cluster without the non-portable opt-in (1: the platform has no clusters).
    pub max_cluster_ctas: u32,
    /// Most CTAs per cluster with [`LaunchFeatures::non_portable_cluster`].
    pub max_cluster_ctas_non_portable: u32,
    /// The largest L1/shared carve-out in KiB a launch may ask for ([`LaunchFeatures::carveout_kib`]).
    pub max_carveout_kib: u32,
}

/// The most registers per thread a launch may declare on sm_90, after rounding: 256. A thread has 255
/// (R0..R254; RZ is the 256th name), and libcuda rounds a kernel's count up to a multiple of 8 before it
/// writes the QMD, so a 255-register kernel reaches the QMD as 256 — and its 9-bit `REGISTER_COUNT` field
/// takes it. The session rounds the same way, so 255 as the limit would refuse every kernel that uses
/// all its registers.
pub const QMD_MAX_REGISTERS: u32 = 256;

impl LaunchLimits {
    /// Hopper (sm_90), as the QMD V04_00 encoder and the H200 take them: blocks of 1024 threads at most
    /// (1024 x 1024 x 64 per side), grids of 2^31 - 1 x 65535 x 65535 blocks, 256 registers per thread as
    /// the QMD declares them ([`QMD_MAX_REGISTERS`]: a thread has 255, rounded up to a multiple of 8) and
    /// 228 KiB of shared memory per block, of which the system reserves 1 KiB (so 227 KiB for the kernel);
    /// clusters of 8 CTAs, 16 with the non-portable opt-in (CUDA's sm_90 figures), and carve-outs up to
    /// 228 KiB.
    pub const SM_90: LaunchLimits = LaunchLimits {
        sm: (9, 0),
        max_block: [1024, 1024, 64],
        max_threads_per_block: 1024,
        max_grid: [0x7fff_ffff, 65535, 65535],
        max_registers: QMD_MAX_REGISTERS,
        max_shared_bytes: 228 * 1024,
        reserved_shared_bytes: 1024,
        max_cluster_ctas: 8,
        max_cluster_ctas_non_portable: 16,
        max_carveout_kib: 228,
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
        self.check_features(d.grid, &d.features)
    }

    /// Checks a launch's cluster and carve-out against the limits (the grid sides already checked).
    pub fn check_features(&self, grid: [u32; 3], f: &LaunchFeatures) -> Result<(), LimitError> {
        let sm = self.sm;
        if f.has_cluster() {
            let cluster = f.cluster;
            let ctas = f.cluster_ctas();
            let max = if f.non_portable_cluster { self.max_cluster_ctas_non_portable } else { self.max_cluster_ctas };
            if cluster.contains(&0) || ctas > u64::from(max) {
                let non_portable = f.non_portable_cluster;
                return Err(LimitError::Cluster { cluster, ctas, max, non_portable, sm });
            }
            if let Some(axis) = (0..3).find(|&a| !grid[a].is_multiple_of(cluster[a])) {
                return Err(LimitError::ClusterGrid { grid, cluster, axis: AXES[axis] });
            }
        }
        if f.carveout_kib > self.max_carveout_kib {
            return Err(LimitError::Carveout { kib: f.carveout_kib, max: self.max_carveout_kib, sm });
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
    /// A cluster with a zero side or more CTAs than the architecture schedules together.
    #[error(
        "cluster {cluster:?} of {ctas} CTAs is not in 1..={max} CTAs (sm_{}{}{})",
        sm.0, sm.1, if *non_portable { ", non-portable sizes allowed" } else { ", portable size" }
    )]
    Cluster {
        /// The cluster asked for.
        cluster: [u32; 3],
        /// Its CTAs.
        ctas: u64,
        /// The limit that applies.
        max: u32,
        /// Whether the non-portable opt-in was given.
        non_portable: bool,
        /// Compute capability.
        sm: (u32, u32),
    },
    /// A grid side that is not a multiple of the cluster side.
    #[error("grid {grid:?} is not a whole number of clusters {cluster:?} along {axis}")]
    ClusterGrid {
        /// The grid, in CTAs.
        grid: [u32; 3],
        /// The cluster, in CTAs.
        cluster: [u32; 3],
        /// The first axis that does not divide.
        axis: char,
    },
    /// A carve-out larger than the architecture's largest.
    #[error("a carve-out of {kib} KiB, sm_{}{} has at most {max} KiB", sm.0, sm.1)]
    Carveout {
        /// KiB asked for.
        kib: u32,
        /// The largest carve-out.
        max: u32,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(grid: [u32; 3], features: LaunchFeatures) -> LaunchDesc<'static> {
        LaunchDesc {
            code_va: 0x1000,
            code_bytes: 0,
            gpr_count: 32,
            block: [128, 1, 1],
            grid,
            shared_bytes: 1024,
            dynamic_shared_bytes: 0,
            local_bytes_per_thread: 0,
            barrier_count: 1,
            features,
            num_elements: 0,
            args: &[],
            const_banks: &[],
            order: Order::AfterPrevious,
            skip: false,
        }
    }

    #[test]
    fn sm_90_limits_take_clusters_of_8_or_16_that_divide_the_grid() {
        let l = LaunchLimits::SM_90;
        assert_eq!(l.check(&launch([132, 1, 1], LaunchFeatures::NONE)), Ok(()));
        assert_eq!(l.check(&launch([132, 1, 1], LaunchFeatures::cluster([2, 1, 1]))), Ok(()));
        assert_eq!(l.check(&launch([8, 4, 2], LaunchFeatures::cluster([2, 2, 2]))), Ok(()));
        assert_eq!(
            l.check(&launch([133, 1, 1], LaunchFeatures::cluster([2, 1, 1]))),
            Err(LimitError::ClusterGrid { grid: [133, 1, 1], cluster: [2, 1, 1], axis: 'x' })
        );
        let sixteen = LaunchFeatures::cluster([4, 4, 1]);
        let e = l.check(&launch([8, 8, 1], sixteen)).unwrap_err();
        assert_eq!(e, LimitError::Cluster { cluster: [4, 4, 1], ctas: 16, max: 8, non_portable: false, sm: (9, 0) });
        assert!(e.to_string().contains("portable size"), "{e}");
        let opted = LaunchFeatures { non_portable_cluster: true, ..sixteen };
        assert_eq!(l.check(&launch([8, 8, 1], opted)), Ok(()));
        let zero = LaunchFeatures::cluster([0, 1, 1]);
        assert!(matches!(l.check(&launch([8, 1, 1], zero)), Err(LimitError::Cluster { ctas: 0, .. })));
        // Hostile sides cannot wrap the CTA count.
        let huge = LaunchFeatures { non_portable_cluster: true, ..LaunchFeatures::cluster([u32::MAX; 3]) };
        assert!(matches!(l.check(&launch([1, 1, 1], huge)), Err(LimitError::Cluster { .. })));
    }

    #[test]
    fn carveouts_past_the_largest_are_refused_and_a_platform_without_clusters_refuses_them() {
        let l = LaunchLimits::SM_90;
        let carve = |kib| LaunchFeatures { carveout_kib: kib, ..LaunchFeatures::NONE };
        assert_eq!(l.check(&launch([1, 1, 1], carve(228))), Ok(()));
        assert_eq!(
            l.check(&launch([1, 1, 1], carve(229))),
            Err(LimitError::Carveout { kib: 229, max: 228, sm: (9, 0) })
        );
        let none = LaunchLimits { max_cluster_ctas: 1, max_cluster_ctas_non_portable: 1, max_carveout_kib: 0, ..l };
        assert!(matches!(
            none.check(&launch([2, 1, 1], LaunchFeatures::cluster([2, 1, 1]))),
            Err(LimitError::Cluster { max: 1, .. })
        ));
        assert!(matches!(none.check(&launch([1, 1, 1], carve(8))), Err(LimitError::Carveout { max: 0, .. })));
        assert_eq!(none.check(&launch([2, 1, 1], LaunchFeatures::NONE)), Ok(()));
        assert_eq!(LaunchFeatures::default(), LaunchFeatures::NONE);
        assert!(!LaunchFeatures::NONE.has_cluster());
        assert_eq!(LaunchFeatures::cluster([2, 3, 1]).cluster_ctas(), 6);
    }
}
