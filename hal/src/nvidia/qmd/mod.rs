//! # Launch descriptors (QMDs) and constant bank 0, as pure encoders
//!
//! A compute launch is a 384-byte QMD handed to the compute engine (`SEND_PCAS_A` with its address >> 8)
//! plus constant bank 0 ("cbuf0"): driver words (block and grid dimensions, memory windows, the stack
//! pointer) followed by the kernel parameters. Nothing here touches a device: [`encode`] turns a
//! [`QmdParams`] into 96 words and [`fill_cbuf0`] builds the bank, both from the [`Arch`](crate::arch::Arch)
//! table.
//!
//! Two layouts, chosen by [`Arch::qmd_version`](crate::arch::Arch::qmd_version), never V03 (Ampere's layout is silently dropped by
//! Hopper's compute class — no error, no fault, the launch just never happens):
//!
//! - [`V04`] (Hopper): bit positions from open-gpu-doc `clcbc0qmd.h`; the values written are the ones
//!   seen working on the H200 (tinygrad patched for Hopper, and libcuda's own QMDs captured there).
//! - [`V05`] (Blackwell): bit positions from open-gpu-doc `clcec0qmd.h` (the same as `clcdc0qmd.h`),
//!   with program address and local-memory sizes >> 4 and the shared-memory size >> 7. Not run.
//!
//! Bit ranges are `hi:lo`, inclusive, counted from bit 0 of word 0, as in NVIDIA's headers.
//!
//! The module is split by concern, and nothing outside it names a QMD bit: `fields` holds every bit
//! position (the field type, the word-wise bit writer and reader, the V04 and V05 layouts), `encoding`
//! turns a launch into QMD words and patches them (releases, dependents, constant banks and the
//! tunings the queue chooses), `decoding` reads them back, and `cbuf0` builds constant bank 0.

use crate::arch::QmdVersion;

mod cbuf0;
mod decoding;
mod encoding;
mod fields;

pub use cbuf0::{fill_cbuf0, Cbuf0Params};
pub use decoding::{decode, DecodedQmd};
pub use encoding::{
    encode, release_payload_word, set_arrive_at_latch, set_block_exit_barrier, set_const_bank, set_dependent,
    set_dependent_prefetch, set_invalidations, set_programmatic, set_release, set_release_sysmembar, DependentAction,
    QmdParams, LIBCUDA_INVALIDATIONS,
};
pub use fields::{
    get_bits, get_field, layout, set_bits, set_field, Field, QmdLayout, QMD_TYPE_GRID_CTA, QMD_TYPE_GRID_GPC_CGA, V04,
    V05,
};

/// Most CTAs per cluster `arch`'s QMD can carry, without and with the non-portable opt-in: the arch's
/// figures where its layout's cluster fields are known, `(1, 1)` (no clusters) where they are not.
pub fn cluster_limits(arch: &crate::arch::Arch) -> (u32, u32) {
    if layout(arch.qmd_version).gpc_cga.is_some() {
        (arch.max_cluster_ctas, arch.max_cluster_ctas_non_portable)
    } else {
        (1, 1)
    }
}

/// Number of 32-bit words in a QMD (384 bytes, both V04 and V05).
pub const QMD_WORDS: usize = 96;

/// A QMD refused before it reached the device.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QmdError {
    /// A value does not fit its field.
    #[error("QMD field {field} ({bits} bits) cannot hold {value:#x}")]
    FieldOverflow {
        /// The field, as NVIDIA's header names it.
        field: &'static str,
        /// Its width.
        bits: u32,
        /// The value that did not fit.
        value: u64,
    },
    /// A bit range outside the QMD, or reversed (an encoder bug, reported rather than panicking).
    #[error("QMD bit range {hi}:{lo} is not inside a {words}-word QMD")]
    BadRange {
        /// High bit.
        hi: u32,
        /// Low bit.
        lo: u32,
        /// Words in the QMD.
        words: usize,
    },
    /// An address without the alignment its field needs.
    #[error("{what} address {va:#x} is not {align}-byte aligned")]
    Misaligned {
        /// What the address is for.
        what: &'static str,
        /// The address.
        va: u64,
        /// The alignment needed.
        align: u64,
    },
    /// An address above what its field (or the GPU address space) can reach.
    #[error("{what} address {va:#x} is at or above 2^{limit_bits}")]
    AddressTooHigh {
        /// What the address is for.
        what: &'static str,
        /// The address.
        va: u64,
        /// The limit, as a power of two.
        limit_bits: u32,
    },
    /// A zero grid or block dimension.
    #[error("{what} dimensions {dims:?} contain a zero")]
    ZeroDimension {
        /// "grid" or "block".
        what: &'static str,
        /// The dimensions given.
        dims: [u32; 3],
    },
    /// A grid or block dimension larger than the hardware takes.
    #[error("{what} dimensions {dims:?} exceed the limits {limits:?}")]
    DimensionTooLarge {
        /// "grid" or "block".
        what: &'static str,
        /// The dimensions given.
        dims: [u32; 3],
        /// The per-axis limits.
        limits: [u32; 3],
    },
    /// More than 1024 threads in a block.
    #[error("block of {threads} threads exceeds 1024")]
    TooManyThreads {
        /// Threads per block.
        threads: u64,
    },
    /// More shared memory than one block may have on this architecture.
    #[error("{bytes} bytes of shared memory per block exceed the {max} this architecture allows")]
    SharedTooLarge {
        /// Bytes asked for (after rounding).
        bytes: u32,
        /// The architecture's limit.
        max: u32,
    },
    /// More registers than a QMD may declare ([`crate::queue::QMD_MAX_REGISTERS`]: a thread's 255, rounded up
    /// to a multiple of 8).
    #[error("{registers} registers per thread exceed the 256 a QMD may declare (255, rounded up to a multiple of 8)")]
    TooManyRegisters {
        /// Registers asked for.
        registers: u32,
    },
    /// More named barriers than a block has.
    #[error("{barriers} barriers exceed the 16 a block has")]
    TooManyBarriers {
        /// Barriers asked for.
        barriers: u32,
    },
    /// A constant bank larger than the hardware maps.
    #[error("constant bank {index} of {bytes} bytes exceeds {max}")]
    CbufTooLarge {
        /// Bank index.
        index: u32,
        /// Bytes asked for.
        bytes: u32,
        /// The architecture's limit.
        max: u32,
    },
    /// A release-semaphore index outside 0..3.
    #[error("release semaphore index {index} is not below 3")]
    NoSuchRelease {
        /// The index.
        index: u32,
    },
    /// A constant-bank index outside 0..8.
    #[error("constant bank index {index} is not below 8")]
    NoSuchCbuf {
        /// The index.
        index: u32,
    },
    /// A cluster with more CTAs than the architecture schedules together.
    #[error(
        "cluster {cluster:?} of {ctas} CTAs exceeds the {max} this architecture allows{}",
        if *non_portable { " with non-portable sizes" } else { " without the non-portable opt-in" }
    )]
    ClusterTooLarge {
        /// CTAs per cluster along x, y and z.
        cluster: [u32; 3],
        /// Their product.
        ctas: u64,
        /// The limit that applies.
        max: u32,
        /// Whether the non-portable opt-in was given.
        non_portable: bool,
    },
    /// A grid that is not a whole number of clusters along some axis.
    #[error("grid {grid:?} is not a whole number of clusters {cluster:?}")]
    GridNotWholeClusters {
        /// Grid in CTAs.
        grid: [u32; 3],
        /// Cluster in CTAs.
        cluster: [u32; 3],
    },
    /// A carve-out larger than the largest this architecture has.
    #[error("a carve-out of {kib} KiB exceeds the largest this architecture has, {max} KiB")]
    CarveoutTooLarge {
        /// KiB asked for.
        kib: u32,
        /// The largest carve-out.
        max: u32,
    },
    /// A field whose position in this QMD version's layout was never read from NVIDIA's header.
    #[error("QMD field {field} has no known position in the {version:?} layout")]
    NotInLayout {
        /// The field, as NVIDIA's header names it.
        field: &'static str,
        /// The layout generation.
        version: QmdVersion,
    },
}

#[cfg(test)]
mod test_support {
    use super::*;

    /// The H200 launch libcuda made for `k_params`: 3x2x1 blocks of 64x2x1 threads, 16 registers,
    /// 0x400 bytes of shared, 0x640 bytes of local memory per thread.
    pub(super) fn k_params() -> QmdParams {
        QmdParams {
            program_va: 0x7f12_3456_7800,
            program_bytes: 0xa00,
            registers: 16,
            block: [64, 2, 1],
            grid: [3, 2, 1],
            shared_bytes: 0x400,
            local_bytes_per_thread: 0x640,
            barrier_count: 1,
            cbuf0_va: 0x7f00_0000_1040,
            cbuf0_bytes: 0x228,
            release0: Some((0x2_0060_2010, 0x1234_5678)),
            release1: None,
            dependent: None,
            features: crate::queue::LaunchFeatures::NONE,
        }
    }

    pub(super) fn bits(q: &[u32; QMD_WORDS], hi: u32, lo: u32) -> u64 {
        get_bits(q, hi, lo).unwrap()
    }
}
