//! # Launch descriptors (QMDs) and constant bank 0, as pure encoders
//!
//! A compute launch is a 384-byte QMD handed to the compute engine (`SEND_PCAS_A` with its address >> 8)
//! plus constant bank 0 ("cbuf0"): driver words (block and grid dimensions, memory windows, the stack
//! pointer) followed by the kernel parameters. Nothing here touches a device: [`encode`] turns a
//! [`QmdParams`] into 96 words and [`fill_cbuf0`] builds the bank, both from the [`Arch`] table.
//!
//! Two layouts, chosen by [`Arch::qmd_version`], never V03 (Ampere's layout is silently dropped by
//! Hopper's compute class — no error, no fault, the launch just never happens):
//!
//! - [`V04`] (Hopper): bit positions from open-gpu-doc `clcbc0qmd.h`; the values written are the ones
//!   seen working on the H200 (tinygrad patched for Hopper, and libcuda's own QMDs captured there).
//! - [`V05`] (Blackwell): bit positions from open-gpu-doc `clcec0qmd.h` (the same as `clcdc0qmd.h`),
//!   with program address and local-memory sizes >> 4 and the shared-memory size >> 7. Not run.
//!
//! Bit ranges are `hi:lo`, inclusive, counted from bit 0 of word 0, as in NVIDIA's headers.

use crate::arch::{Arch, QmdVersion};

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
    /// More registers than a thread can have.
    #[error("{registers} registers per thread exceed 255")]
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
}

/// One field of a QMD: a named, inclusive bit range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// The field's name in NVIDIA's header (without the class/version prefix).
    pub name: &'static str,
    /// Highest bit.
    pub hi: u32,
    /// Lowest bit.
    pub lo: u32,
}

impl Field {
    const fn new(name: &'static str, hi: u32, lo: u32) -> Field {
        Field { name, hi, lo }
    }

    /// The same field `n` strides further (element `n` of an indexed field).
    pub const fn nth(self, n: u32, stride: u32) -> Field {
        Field { name: self.name, hi: self.hi + n * stride, lo: self.lo + n * stride }
    }

    /// Width in bits.
    pub const fn bits(self) -> u32 {
        self.hi - self.lo + 1
    }
}

/// Writes `value` into bits `hi:lo` of `words`, refusing ranges outside `words` and values wider than
/// the range.
pub fn set_bits(words: &mut [u32], hi: u32, lo: u32, value: u64) -> Result<(), QmdError> {
    set_field(words, Field::new("(raw)", hi, lo), value)
}

/// Reads bits `hi:lo` of `words`; `None` for a range outside `words`, reversed, or wider than 64 bits.
pub fn get_bits(words: &[u32], hi: u32, lo: u32) -> Option<u64> {
    if hi < lo || hi - lo >= 64 || (hi / 32) as usize >= words.len() {
        return None;
    }
    // A field spans at most three words (64 bits starting mid-word); gather them and shift once.
    let first = (lo / 32) as usize;
    let last = (hi / 32) as usize;
    let mut wide = 0u128;
    for (k, w) in words[first..=last].iter().enumerate() {
        wide |= u128::from(*w) << (32 * k);
    }
    let bits = hi - lo + 1;
    let mask = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
    Some((wide >> (lo % 32)) as u64 & mask)
}

/// Writes `value` into `field` of `words`.
pub fn set_field(words: &mut [u32], field: Field, value: u64) -> Result<(), QmdError> {
    let Field { hi, lo, .. } = field;
    if hi < lo || hi - lo >= 64 || (hi / 32) as usize >= words.len() {
        return Err(QmdError::BadRange { hi, lo, words: words.len() });
    }
    let bits = hi - lo + 1;
    if bits < 64 && value >> bits != 0 {
        return Err(QmdError::FieldOverflow { field: field.name, bits, value });
    }
    // Word by word rather than bit by bit: a launch patches a few hundred bits of its template, and
    // this runs on every launch.
    let mut done = 0u32;
    while done < bits {
        let bit = lo + done;
        let shift = bit % 32;
        let take = (32 - shift).min(bits - done);
        let mask = if take == 32 { u32::MAX } else { ((1u32 << take) - 1) << shift };
        let part = ((value >> done) as u32) << shift;
        let word = &mut words[(bit / 32) as usize];
        *word = (*word & !mask) | (part & mask);
        done += take;
    }
    Ok(())
}

/// Reads `field` of `words` (0 for a field outside `words`).
pub fn get_field(words: &[u32], field: Field) -> u64 {
    get_bits(words, field.hi, field.lo).unwrap_or(0)
}

/// Where each field the encoder writes sits in one QMD layout generation.
///
/// Indexed fields (release `i`, dependent QMD `i`, constant bank `i`) give element 0 and a stride.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QmdLayout {
    /// `QMD_GROUP_ID`.
    pub group_id: Field,
    /// `QMD_TYPE` (2 = GRID_CTA).
    pub qmd_type: Field,
    /// `RELEASE_ENABLE(0)`.
    pub release_enable: Field,
    /// `RELEASE_STRUCTURE_SIZE(0)` (0 = four words: payload, then a timestamp at +8).
    pub release_structure_size: Field,
    /// Bits between `RELEASE_*(i)` and `RELEASE_*(i + 1)`.
    pub release_flags_stride: u32,
    /// `RELEASE_SEMAPHORE0_ADDR_LOWER`.
    pub release_addr_lo: Field,
    /// `RELEASE_SEMAPHORE0_ADDR_UPPER`.
    pub release_addr_hi: Field,
    /// `RELEASE_SEMAPHORE0_PAYLOAD_LOWER`.
    pub release_payload_lo: Field,
    /// `RELEASE_SEMAPHORE0_PAYLOAD_UPPER`.
    pub release_payload_hi: Field,
    /// First bit of `RELEASE_SEMAPHORE0_*`, `1_*` and `2_*` (the fields above are semaphore 0's).
    pub release_semaphore_base: [u32; 3],
    /// `DEPENDENT_QMD_ENABLE(0)`.
    pub dependent_enable: Field,
    /// `DEPENDENT_QMD_ACTION(0)`.
    pub dependent_action: Field,
    /// `DEPENDENT_QMD_PREFETCH(0)`.
    pub dependent_prefetch: Field,
    /// Bits between the `DEPENDENT_QMD_*(i)` flag groups.
    pub dependent_flags_stride: u32,
    /// `DEPENDENT_QMD0_POINTER` (QMD address >> 8).
    pub dependent_pointer: Field,
    /// `CONSTANT_BUFFER_VALID(0)`.
    pub cbuf_valid: Field,
    /// `CONSTANT_BUFFER_INVALIDATE(0)`.
    pub cbuf_invalidate: Field,
    /// Bits between the `CONSTANT_BUFFER_VALID/INVALIDATE(i)` groups.
    pub cbuf_flags_stride: u32,
    /// `CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(0)`.
    pub cbuf_addr_lo: Field,
    /// `CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6(0)`.
    pub cbuf_addr_hi: Field,
    /// `CONSTANT_BUFFER_SIZE_SHIFTED4(0)`.
    pub cbuf_size: Field,
    /// Bits between constant-bank descriptors.
    pub cbuf_stride: u32,
    /// `SASS_VERSION`.
    pub sass_version: Field,
    /// `API_VISIBLE_CALL_LIMIT` (1 = no check).
    pub api_visible_call_limit: Field,
    /// `SAMPLER_INDEX` (1 = via header index).
    pub sampler_index: Field,
    /// `QMD_MINOR_VERSION`.
    pub minor_version: Field,
    /// `QMD_MAJOR_VERSION`.
    pub major_version: Field,
    /// `SHARED_MEMORY_SIZE` (V04, bytes) or `SHARED_MEMORY_SIZE_SHIFTED7` (V05).
    pub shared_size: Field,
    /// Right shift applied to the shared-memory size.
    pub shared_size_shift: u32,
    /// `INVALIDATE_TEXTURE_HEADER_CACHE`; the five other cache invalidations follow it bit by bit
    /// (sampler, texture data, shader data, instruction, shader constant).
    pub invalidate_caches: Field,
    /// `MIN_SM_CONFIG_SHARED_MEM_SIZE`.
    pub sm_config_min: Field,
    /// `MAX_SM_CONFIG_SHARED_MEM_SIZE`.
    pub sm_config_max: Field,
    /// `TARGET_SM_CONFIG_SHARED_MEM_SIZE`.
    pub sm_config_target: Field,
    /// `GRID_WIDTH`, `GRID_HEIGHT`, `GRID_DEPTH`.
    pub grid: [Field; 3],
    /// `CTA_THREAD_DIMENSION0..2`.
    pub block: [Field; 3],
    /// `REGISTER_COUNT`.
    pub register_count: Field,
    /// `BARRIER_COUNT`.
    pub barrier_count: Field,
    /// `PROGRAM_ADDRESS_LOWER` (V04) / `PROGRAM_ADDRESS_LOWER_SHIFTED4` (V05).
    pub program_addr_lo: Field,
    /// `PROGRAM_ADDRESS_UPPER` / `PROGRAM_ADDRESS_UPPER_SHIFTED4`.
    pub program_addr_hi: Field,
    /// Right shift applied to the program address.
    pub program_addr_shift: u32,
    /// `PROGRAM_PREFETCH_ADDR_LOWER_SHIFTED` (address >> 8, low 32 bits).
    pub prefetch_addr_lo: Field,
    /// `PROGRAM_PREFETCH_ADDR_UPPER_SHIFTED` (address >> 40).
    pub prefetch_addr_hi: Field,
    /// `PROGRAM_PREFETCH_SIZE` (bytes >> 8).
    pub prefetch_size: Field,
    /// `SHADER_LOCAL_MEMORY_HIGH_SIZE` (V04, bytes) / `SHADER_LOCAL_MEMORY_HIGH_SIZE_SHIFTED4` (V05).
    pub local_high_size: Field,
    /// Right shift applied to the local-memory size.
    pub local_size_shift: u32,
    /// `CWD_MEMBAR_TYPE` (1 = L1_SYSMEMBAR).
    pub cwd_membar_type: Field,
}

/// The Hopper layout, `NVCBC0_QMDV04_00_*` (READ OGD `clcbc0qmd.h`, VERIFIED on the H200).
pub const V04: QmdLayout = QmdLayout {
    group_id: Field::new("QMD_GROUP_ID", 21, 16),
    qmd_type: Field::new("QMD_TYPE", 25, 23),
    release_enable: Field::new("RELEASE_ENABLE", 320, 320),
    release_structure_size: Field::new("RELEASE_STRUCTURE_SIZE", 322, 321),
    release_flags_stride: 16,
    release_addr_lo: Field::new("RELEASE_SEMAPHORE_ADDR_LOWER", 671, 640),
    release_addr_hi: Field::new("RELEASE_SEMAPHORE_ADDR_UPPER", 696, 672),
    release_payload_lo: Field::new("RELEASE_SEMAPHORE_PAYLOAD_LOWER", 735, 704),
    release_payload_hi: Field::new("RELEASE_SEMAPHORE_PAYLOAD_UPPER", 767, 736),
    release_semaphore_base: [640, 768, 896],
    dependent_enable: Field::new("DEPENDENT_QMD_ENABLE", 368, 368),
    dependent_action: Field::new("DEPENDENT_QMD_ACTION", 371, 369),
    dependent_prefetch: Field::new("DEPENDENT_QMD_PREFETCH", 372, 372),
    dependent_flags_stride: 5,
    dependent_pointer: Field::new("DEPENDENT_QMD0_POINTER", 479, 448),
    cbuf_valid: Field::new("CONSTANT_BUFFER_VALID", 416, 416),
    cbuf_invalidate: Field::new("CONSTANT_BUFFER_INVALIDATE", 419, 419),
    cbuf_flags_stride: 4,
    cbuf_addr_lo: Field::new("CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6", 1567, 1536),
    cbuf_addr_hi: Field::new("CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6", 1586, 1568),
    cbuf_size: Field::new("CONSTANT_BUFFER_SIZE_SHIFTED4", 1599, 1587),
    cbuf_stride: 64,
    sass_version: Field::new("SASS_VERSION", 543, 536),
    api_visible_call_limit: Field::new("API_VISIBLE_CALL_LIMIT", 568, 568),
    sampler_index: Field::new("SAMPLER_INDEX", 569, 569),
    minor_version: Field::new("QMD_MINOR_VERSION", 579, 576),
    major_version: Field::new("QMD_MAJOR_VERSION", 583, 580),
    shared_size: Field::new("SHARED_MEMORY_SIZE", 601, 584),
    shared_size_shift: 0,
    invalidate_caches: Field::new("INVALIDATE_TEXTURE_HEADER_CACHE", 602, 602),
    sm_config_min: Field::new("MIN_SM_CONFIG_SHARED_MEM_SIZE", 613, 608),
    sm_config_max: Field::new("MAX_SM_CONFIG_SHARED_MEM_SIZE", 619, 614),
    sm_config_target: Field::new("TARGET_SM_CONFIG_SHARED_MEM_SIZE", 625, 620),
    grid: [
        Field::new("GRID_WIDTH", 1055, 1024),
        Field::new("GRID_HEIGHT", 1071, 1056),
        Field::new("GRID_DEPTH", 1103, 1088),
    ],
    block: [
        Field::new("CTA_THREAD_DIMENSION0", 1167, 1152),
        Field::new("CTA_THREAD_DIMENSION1", 1183, 1168),
        Field::new("CTA_THREAD_DIMENSION2", 1199, 1184),
    ],
    register_count: Field::new("REGISTER_COUNT", 1208, 1200),
    barrier_count: Field::new("BARRIER_COUNT", 1215, 1211),
    program_addr_lo: Field::new("PROGRAM_ADDRESS_LOWER", 1247, 1216),
    program_addr_hi: Field::new("PROGRAM_ADDRESS_UPPER", 1272, 1248),
    program_addr_shift: 0,
    prefetch_addr_lo: Field::new("PROGRAM_PREFETCH_ADDR_LOWER_SHIFTED", 1375, 1344),
    prefetch_addr_hi: Field::new("PROGRAM_PREFETCH_ADDR_UPPER_SHIFTED", 1392, 1376),
    prefetch_size: Field::new("PROGRAM_PREFETCH_SIZE", 1401, 1393),
    local_high_size: Field::new("SHADER_LOCAL_MEMORY_HIGH_SIZE", 567, 544),
    local_size_shift: 0,
    cwd_membar_type: Field::new("CWD_MEMBAR_TYPE", 1137, 1136),
};

/// The Blackwell layout, `NVCEC0_QMDV05_00_*` (READ OGD `clcec0qmd.h`; not run).
pub const V05: QmdLayout = QmdLayout {
    group_id: Field::new("QMD_GROUP_ID", 149, 144),
    qmd_type: Field::new("QMD_TYPE", 153, 151),
    release_enable: Field::new("RELEASE_ENABLE", 288, 288),
    release_structure_size: Field::new("RELEASE_STRUCTURE_SIZE", 290, 289),
    release_flags_stride: 16,
    release_addr_lo: Field::new("RELEASE_SEMAPHORE_ADDR_LOWER", 511, 480),
    release_addr_hi: Field::new("RELEASE_SEMAPHORE_ADDR_UPPER", 536, 512),
    release_payload_lo: Field::new("RELEASE_SEMAPHORE_PAYLOAD_LOWER", 575, 544),
    release_payload_hi: Field::new("RELEASE_SEMAPHORE_PAYLOAD_UPPER", 607, 576),
    // Semaphore 0 moved down to 480; 1 and 2 stayed where V04 has them.
    release_semaphore_base: [480, 768, 896],
    dependent_enable: Field::new("DEPENDENT_QMD_ENABLE", 336, 336),
    dependent_action: Field::new("DEPENDENT_QMD_ACTION", 339, 337),
    dependent_prefetch: Field::new("DEPENDENT_QMD_PREFETCH", 340, 340),
    dependent_flags_stride: 8,
    dependent_pointer: Field::new("DEPENDENT_QMD0_POINTER", 415, 384),
    cbuf_valid: Field::new("CONSTANT_BUFFER_VALID", 1856, 1856),
    cbuf_invalidate: Field::new("CONSTANT_BUFFER_INVALIDATE", 1859, 1859),
    cbuf_flags_stride: 4,
    cbuf_addr_lo: Field::new("CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6", 1375, 1344),
    cbuf_addr_hi: Field::new("CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6", 1394, 1376),
    cbuf_size: Field::new("CONSTANT_BUFFER_SIZE_SHIFTED4", 1407, 1395),
    cbuf_stride: 64,
    sass_version: Field::new("SASS_VERSION", 455, 448),
    api_visible_call_limit: Field::new("API_VISIBLE_CALL_LIMIT", 456, 456),
    sampler_index: Field::new("SAMPLER_INDEX", 457, 457),
    minor_version: Field::new("QMD_MINOR_VERSION", 467, 464),
    major_version: Field::new("QMD_MAJOR_VERSION", 471, 468),
    shared_size: Field::new("SHARED_MEMORY_SIZE_SHIFTED7", 1162, 1152),
    shared_size_shift: 7,
    invalidate_caches: Field::new("INVALIDATE_TEXTURE_HEADER_CACHE", 472, 472),
    sm_config_min: Field::new("MIN_SM_CONFIG_SHARED_MEM_SIZE", 1168, 1163),
    sm_config_max: Field::new("MAX_SM_CONFIG_SHARED_MEM_SIZE", 1174, 1169),
    sm_config_target: Field::new("TARGET_SM_CONFIG_SHARED_MEM_SIZE", 1180, 1175),
    grid: [
        Field::new("GRID_WIDTH", 1279, 1248),
        Field::new("GRID_HEIGHT", 1295, 1280),
        Field::new("GRID_DEPTH", 1327, 1312),
    ],
    block: [
        Field::new("CTA_THREAD_DIMENSION0", 1103, 1088),
        Field::new("CTA_THREAD_DIMENSION1", 1119, 1104),
        Field::new("CTA_THREAD_DIMENSION2", 1127, 1120),
    ],
    register_count: Field::new("REGISTER_COUNT", 1136, 1128),
    barrier_count: Field::new("BARRIER_COUNT", 1141, 1137),
    program_addr_lo: Field::new("PROGRAM_ADDRESS_LOWER_SHIFTED4", 1055, 1024),
    program_addr_hi: Field::new("PROGRAM_ADDRESS_UPPER_SHIFTED4", 1076, 1056),
    program_addr_shift: 4,
    prefetch_addr_lo: Field::new("PROGRAM_PREFETCH_ADDR_LOWER_SHIFTED", 1919, 1888),
    prefetch_addr_hi: Field::new("PROGRAM_PREFETCH_ADDR_UPPER_SHIFTED", 1936, 1920),
    prefetch_size: Field::new("PROGRAM_PREFETCH_SIZE", 1085, 1077),
    local_high_size: Field::new("SHADER_LOCAL_MEMORY_HIGH_SIZE_SHIFTED4", 1215, 1200),
    local_size_shift: 4,
    cwd_membar_type: Field::new("CWD_MEMBAR_TYPE", 625, 624),
};

/// The layout of a QMD version.
pub const fn layout(version: QmdVersion) -> &'static QmdLayout {
    match version {
        QmdVersion::V04_00 => &V04,
        QmdVersion::V05_00 => &V05,
    }
}

impl QmdLayout {
    /// `RELEASE_SEMAPHORE<i>_{ADDR_LOWER, ADDR_UPPER, PAYLOAD_LOWER, PAYLOAD_UPPER}` (`i` < 3).
    fn release_semaphore(&self, i: u32) -> [Field; 4] {
        let shift = self.release_semaphore_base[i as usize] - self.release_semaphore_base[0];
        [self.release_addr_lo, self.release_addr_hi, self.release_payload_lo, self.release_payload_hi]
            .map(|f| f.nth(1, shift))
    }
}

/// What a dependent QMD pointer does when this launch completes (`DEPENDENT_QMD_ACTION`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DependentAction {
    /// `QMD_INCREMENT_PUT` (0).
    IncrementPut,
    /// `QMD_SCHEDULE` (1): launch the dependent QMD — tinygrad chains back-to-back launches this way
    /// (VERIFIED).
    Schedule,
    /// `QMD_INVALIDATE_COPY_SCHEDULE` (3).
    InvalidateCopySchedule,
    /// `QMD_DECREMENT_DEPENDENCE` (4): what libcuda wrote.
    DecrementDependence,
}

impl DependentAction {
    /// The field value.
    pub const fn value(self) -> u32 {
        match self {
            DependentAction::IncrementPut => 0,
            DependentAction::Schedule => 1,
            DependentAction::InvalidateCopySchedule => 3,
            DependentAction::DecrementDependence => 4,
        }
    }
}

/// Everything one launch's QMD says, resolved by the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QmdParams {
    /// GPU address of the kernel's first instruction (16-byte aligned on V05).
    pub program_va: u64,
    /// Bytes of code from `program_va`, for instruction prefetch (0 = no prefetch).
    pub program_bytes: u64,
    /// Registers per thread, as the QMD should carry them (rounding is the session's job).
    pub registers: u32,
    /// Threads per block, x/y/z.
    pub block: [u32; 3],
    /// Blocks per grid, x/y/z.
    pub grid: [u32; 3],
    /// Shared memory per block, static (reserved 1 KiB included) plus dynamic, in bytes.
    pub shared_bytes: u32,
    /// Local memory per thread (`SHADER_LOCAL_MEMORY_HIGH_SIZE`), in bytes.
    pub local_bytes_per_thread: u32,
    /// Named barriers the kernel uses (`NUM_BARRIERS`; encoded as at least 1).
    pub barrier_count: u32,
    /// GPU address of constant bank 0 (64-byte aligned).
    pub cbuf0_va: u64,
    /// Bytes of constant bank 0 (rounded up to 16 when encoded).
    pub cbuf0_bytes: u32,
    /// Semaphore 0: released with (address, payload) when the grid completes; four words (payload,
    /// then the completion timestamp at +8), so the address must be 16-byte aligned.
    pub release0: Option<(u64, u32)>,
    /// Semaphore 1, same shape as `release0`.
    pub release1: Option<(u64, u32)>,
    /// A QMD (256-byte aligned, below 2^40) to act on when this one completes.
    pub dependent: Option<(u64, DependentAction)>,
}

/// Checks `va` against an alignment and an address limit.
fn check_va(what: &'static str, va: u64, align: u64, limit_bits: u32) -> Result<(), QmdError> {
    if !va.is_multiple_of(align) {
        return Err(QmdError::Misaligned { what, va, align });
    }
    if limit_bits < 64 && va >> limit_bits != 0 {
        return Err(QmdError::AddressTooHigh { what, va, limit_bits });
    }
    Ok(())
}

/// Hardware limits of a launch shape (CUDA's: block 1024 x 1024 x 64, at most 1024 threads; grid
/// 2^31 - 1 x 65535 x 65535).
fn check_shape(p: &QmdParams) -> Result<(), QmdError> {
    for (what, dims, limits) in [("block", p.block, [1024, 1024, 64]), ("grid", p.grid, [0x7fff_ffff, 65535, 65535])] {
        if dims.contains(&0) {
            return Err(QmdError::ZeroDimension { what, dims });
        }
        if dims.iter().zip(limits).any(|(&d, l)| d > l) {
            return Err(QmdError::DimensionTooLarge { what, dims, limits });
        }
    }
    let threads = p.block.iter().map(|&d| u64::from(d)).product::<u64>();
    if threads > 1024 {
        return Err(QmdError::TooManyThreads { threads });
    }
    Ok(())
}

/// Points constant bank `index` of `qmd` at `bytes` bytes at `va` and marks it valid.
///
/// `encode` does this for bank 0. Kernels that touch module data also read bank 3 (`__constant__`
/// data, `.nv.constant3`) and bank 4 (addresses of `__device__` data, `.nv.constant4`); see
/// `cubin::KernelInfo::const_banks`. The bank's size is rounded up to 16 bytes.
pub fn set_const_bank(
    arch: &Arch,
    qmd: &mut [u32; QMD_WORDS],
    index: u32,
    va: u64,
    bytes: u32,
) -> Result<(), QmdError> {
    if index >= 8 {
        return Err(QmdError::NoSuchCbuf { index });
    }
    let l = layout(arch.qmd_version);
    check_va("constant bank", va, 64, arch.va_bits)?;
    let size = bytes.next_multiple_of(16);
    if size > arch.max_cbuf_bytes {
        return Err(QmdError::CbufTooLarge { index, bytes, max: arch.max_cbuf_bytes });
    }
    let shifted = va >> 6;
    set_field(qmd, l.cbuf_addr_lo.nth(index, l.cbuf_stride), shifted & 0xffff_ffff)?;
    set_field(qmd, l.cbuf_addr_hi.nth(index, l.cbuf_stride), shifted >> 32)?;
    set_field(qmd, l.cbuf_size.nth(index, l.cbuf_stride), u64::from(size >> 4))?;
    set_field(qmd, l.cbuf_valid.nth(index, l.cbuf_flags_stride), 1)?;
    // Constant banks are rewritten between launches at the same address; drop stale cache lines.
    set_field(qmd, l.cbuf_invalidate.nth(index, l.cbuf_flags_stride), 1)
}

/// Sets (or clears, with `None`) release semaphore `i` (0..3).
pub fn set_release(
    arch: &Arch,
    qmd: &mut [u32; QMD_WORDS],
    i: u32,
    release: Option<(u64, u32)>,
) -> Result<(), QmdError> {
    if i >= 3 {
        return Err(QmdError::NoSuchRelease { index: i });
    }
    let l = layout(arch.qmd_version);
    let [addr_lo, addr_hi, payload_lo, payload_hi] = l.release_semaphore(i);
    let enable = l.release_enable.nth(i, l.release_flags_stride);
    let size = l.release_structure_size.nth(i, l.release_flags_stride);
    let Some((va, payload)) = release else {
        return set_field(qmd, enable, 0);
    };
    check_va("release semaphore", va, 16, arch.va_bits)?;
    set_field(qmd, addr_lo, va & 0xffff_ffff)?;
    set_field(qmd, addr_hi, va >> 32)?;
    set_field(qmd, payload_lo, u64::from(payload))?;
    set_field(qmd, payload_hi, 0)?;
    // Four words: the payload, then the ns timestamp at +8 (what `CompletionPoll::timestamp` reads).
    set_field(qmd, size, 0)?;
    set_field(qmd, enable, 1)
}

/// The index of the word holding release semaphore `i`'s payload (its low 32 bits, word-aligned in both
/// layouts): what a reused QMD patches when only the payload changes. `None` for `i` >= 3.
pub fn release_payload_word(arch: &Arch, i: u32) -> Option<usize> {
    if i >= 3 {
        return None;
    }
    let f = layout(arch.qmd_version).release_semaphore(i)[2];
    debug_assert!(f.lo.is_multiple_of(32) && f.bits() == 32, "payload {i} is not a whole word");
    Some((f.lo / 32) as usize)
}

/// Sets (or clears, with `None`) dependent QMD 0: when this launch completes, `action` applies to the QMD
/// at the given address.
pub fn set_dependent(
    arch: &Arch,
    qmd: &mut [u32; QMD_WORDS],
    dependent: Option<(u64, DependentAction)>,
) -> Result<(), QmdError> {
    let l = layout(arch.qmd_version);
    let Some((va, action)) = dependent else {
        set_field(qmd, l.dependent_enable, 0)?;
        return set_field(qmd, l.dependent_pointer, 0);
    };
    // The pointer field holds address >> 8 in 32 bits, like SEND_PCAS_A.
    check_va("dependent QMD", va, 256, 40)?;
    set_field(qmd, l.dependent_pointer, va >> 8)?;
    set_field(qmd, l.dependent_action, u64::from(action.value()))?;
    set_field(qmd, l.dependent_prefetch, 1)?;
    set_field(qmd, l.dependent_enable, 1)
}

/// Encodes one launch for `arch` into a fresh QMD.
///
/// Beyond the caller's values it writes what every working launch on the H200 carried: group 0x3f, type
/// GRID_CTA, the arch's SASS version, `API_VISIBLE_CALL_LIMIT` = 1 (no check), `SAMPLER_INDEX` = 1,
/// `CWD_MEMBAR_TYPE` = L1_SYSMEMBAR, and libcuda's cache invalidations (texture header, sampler, texture
/// data, shader data, shader constant). The shared-memory size is raised to the arch's reserved
/// minimum and rounded up to 256 bytes, the barrier count raised to 1 (libcuda and tinygrad never
/// send 0), and the carve-out chosen by [`Arch::sm_config`].
pub fn encode(arch: &Arch, p: &QmdParams) -> Result<[u32; QMD_WORDS], QmdError> {
    debug_assert_eq!(arch.qmd_bytes, QMD_WORDS * 4);
    let l = layout(arch.qmd_version);
    check_shape(p)?;
    if p.registers > 255 {
        return Err(QmdError::TooManyRegisters { registers: p.registers });
    }
    if p.barrier_count > 16 {
        return Err(QmdError::TooManyBarriers { barriers: p.barrier_count });
    }
    let shared = p.shared_bytes.max(arch.reserved_shared_bytes).next_multiple_of(256);
    if shared > arch.max_shared_bytes {
        return Err(QmdError::SharedTooLarge { bytes: shared, max: arch.max_shared_bytes });
    }
    let threads = p.block[0] * p.block[1] * p.block[2];
    let config = arch
        .sm_config(shared, threads, p.registers)
        .ok_or(QmdError::SharedTooLarge { bytes: shared, max: arch.max_shared_bytes })?;
    check_va("program", p.program_va, 1 << l.program_addr_shift, arch.va_bits)?;

    let mut q = [0u32; QMD_WORDS];
    set_field(&mut q, l.group_id, u64::from(arch.qmd_group_id))?;
    // GRID_CTA. QUEUE (0) hangs without any error on Hopper.
    set_field(&mut q, l.qmd_type, 2)?;
    set_field(&mut q, l.major_version, u64::from(arch.qmd_version.major()))?;
    set_field(&mut q, l.minor_version, u64::from(arch.qmd_version.minor()))?;
    set_field(&mut q, l.sass_version, u64::from(arch.sass_version))?;
    set_field(&mut q, l.api_visible_call_limit, 1)?;
    set_field(&mut q, l.sampler_index, 1)?;
    // Texture header, sampler, texture data, shader data: yes; instruction: no; shader constant: yes.
    for (bit, on) in [1, 1, 1, 1, 0, 1].into_iter().enumerate() {
        set_field(&mut q, l.invalidate_caches.nth(bit as u32, 1), on)?;
    }
    set_field(&mut q, l.cwd_membar_type, 1)?;

    for axis in 0..3 {
        set_field(&mut q, l.grid[axis], u64::from(p.grid[axis]))?;
        set_field(&mut q, l.block[axis], u64::from(p.block[axis]))?;
    }
    set_field(&mut q, l.register_count, u64::from(p.registers))?;
    set_field(&mut q, l.barrier_count, u64::from(p.barrier_count.max(1)))?;

    set_field(&mut q, l.shared_size, u64::from(shared >> l.shared_size_shift))?;
    set_field(&mut q, l.sm_config_min, u64::from(config.min))?;
    set_field(&mut q, l.sm_config_max, u64::from(config.max))?;
    set_field(&mut q, l.sm_config_target, u64::from(config.target))?;
    let local = u64::from(p.local_bytes_per_thread).next_multiple_of(1 << l.local_size_shift);
    set_field(&mut q, l.local_high_size, local >> l.local_size_shift)?;

    let program = p.program_va >> l.program_addr_shift;
    set_field(&mut q, l.program_addr_lo, program & 0xffff_ffff)?;
    set_field(&mut q, l.program_addr_hi, program >> 32)?;
    if p.program_bytes > 0 {
        set_field(&mut q, l.prefetch_addr_lo, (p.program_va >> 8) & 0xffff_ffff)?;
        set_field(&mut q, l.prefetch_addr_hi, p.program_va >> 40)?;
        let field_max = (1u64 << l.prefetch_size.bits()) - 1;
        set_field(&mut q, l.prefetch_size, (p.program_bytes >> 8).min(field_max))?;
    }

    set_const_bank(arch, &mut q, 0, p.cbuf0_va, p.cbuf0_bytes)?;
    set_release(arch, &mut q, 0, p.release0)?;
    set_release(arch, &mut q, 1, p.release1)?;
    set_dependent(arch, &mut q, p.dependent)?;
    Ok(q)
}

/// A QMD read back into its launch-relevant fields (for tests and for dumping a QMD that hung).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodedQmd {
    /// `QMD_MAJOR_VERSION`.
    pub major: u32,
    /// `QMD_TYPE`.
    pub qmd_type: u32,
    /// `QMD_GROUP_ID`.
    pub group_id: u32,
    /// `SASS_VERSION`.
    pub sass_version: u32,
    /// Program address (unshifted).
    pub program_va: u64,
    /// Prefetch address (unshifted, 256-byte granular) and size in bytes.
    pub prefetch: (u64, u64),
    /// `REGISTER_COUNT`.
    pub registers: u32,
    /// `BARRIER_COUNT`.
    pub barriers: u32,
    /// Block dimensions.
    pub block: [u32; 3],
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Shared memory in bytes (unshifted).
    pub shared_bytes: u32,
    /// Carve-out configuration (min, target, max).
    pub sm_config: (u32, u32, u32),
    /// Local memory per thread in bytes (unshifted).
    pub local_bytes_per_thread: u32,
    /// Constant bank 0: (address, size in bytes, valid).
    pub cbuf0: (u64, u32, bool),
    /// Release semaphores 0 and 1: (address, payload) when enabled.
    pub release: [Option<(u64, u32)>; 2],
    /// Dependent QMD 0: (address, action value, prefetch) when enabled.
    pub dependent: Option<(u64, u32, bool)>,
}

/// Reads a QMD of `arch`'s layout back.
pub fn decode(arch: &Arch, q: &[u32; QMD_WORDS]) -> DecodedQmd {
    let l = layout(arch.qmd_version);
    let g = |f: Field| get_field(q, f);
    let g32 = |f: Field| get_field(q, f) as u32;
    let release = [0, 1].map(|i| {
        let [alo, ahi, plo, _] = l.release_semaphore(i);
        (g(l.release_enable.nth(i, l.release_flags_stride)) == 1).then(|| (g(alo) | g(ahi) << 32, g32(plo)))
    });
    DecodedQmd {
        major: g32(l.major_version),
        qmd_type: g32(l.qmd_type),
        group_id: g32(l.group_id),
        sass_version: g32(l.sass_version),
        program_va: (g(l.program_addr_lo) | g(l.program_addr_hi) << 32) << l.program_addr_shift,
        prefetch: ((g(l.prefetch_addr_lo) | g(l.prefetch_addr_hi) << 32) << 8, g(l.prefetch_size) << 8),
        registers: g32(l.register_count),
        barriers: g32(l.barrier_count),
        block: l.block.map(g32),
        grid: l.grid.map(g32),
        shared_bytes: g32(l.shared_size) << l.shared_size_shift,
        sm_config: (g32(l.sm_config_min), g32(l.sm_config_target), g32(l.sm_config_max)),
        local_bytes_per_thread: g32(l.local_high_size) << l.local_size_shift,
        cbuf0: ((g(l.cbuf_addr_lo) | g(l.cbuf_addr_hi) << 32) << 6, g32(l.cbuf_size) << 4, g(l.cbuf_valid) == 1),
        release,
        dependent: (g(l.dependent_enable) == 1)
            .then(|| (g(l.dependent_pointer) << 8, g32(l.dependent_action), g(l.dependent_prefetch) == 1)),
    }
}

/// The per-launch values of constant bank 0's driver words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cbuf0Params {
    /// Threads per block (`blockDim`).
    pub block: [u32; 3],
    /// Blocks per grid (`gridDim`).
    pub grid: [u32; 3],
    /// Shared-memory window base, as programmed on the channel.
    pub shared_window: u64,
    /// Local-memory window base, as programmed on the channel.
    pub local_window: u64,
    /// The dynamic part of the launch's shared memory, in bytes.
    pub dynamic_shared_bytes: u32,
}

/// Builds constant bank 0 for one launch into `out`: the driver words of `arch`, zeros elsewhere, then
/// `args` at [`Arch::param_base`]; `out` ends up `param_base + 4 * args.len()` bytes rounded up to 16
/// (what the QMD's size field can express), and its previous contents are discarded.
///
/// Written: block and grid dimensions, both windows, the stack top (0xfffdc0), the dynamic shared size
/// where the arch has a word for it, and 0 as the global-memory descriptor. The bank's address must be
/// 64-byte aligned; that is the caller's allocation.
///
/// # Panics
/// When `args` is longer than [`Arch::max_param_bytes`]: the session checks argument sizes against the
/// kernel before building a launch, so this is a usage bug, not an input error.
pub fn fill_cbuf0(arch: &Arch, p: &Cbuf0Params, args: &[u32], out: &mut Vec<u32>) {
    assert!(
        args.len() * 4 <= arch.max_param_bytes as usize,
        "{} parameter bytes exceed the {} an {} kernel takes",
        args.len() * 4,
        arch.max_param_bytes,
        arch.name
    );
    let c = arch.cbuf0;
    let base = (arch.param_base / 4) as usize;
    let words = (base + args.len()).next_multiple_of(4);
    out.clear();
    out.resize(words, 0);
    let mut put = |offset: u32, value: u32| out[(offset / 4) as usize] = value;
    for axis in 0..3 {
        put(c.block_dim + 4 * axis as u32, p.block[axis]);
        put(c.grid_dim + 4 * axis as u32, p.grid[axis]);
    }
    for (offset, value) in [(c.shared_window, p.shared_window), (c.local_window, p.local_window)] {
        put(offset, value as u32);
        put(offset + 4, (value >> 32) as u32);
    }
    put(c.stack_top, arch.stack_top_value);
    if let Some(offset) = c.dynamic_shared {
        put(offset, p.dynamic_shared_bytes);
    }
    put(c.global_memory_descriptor, 0);
    put(c.global_memory_descriptor + 4, 0);
    out[base..base + args.len()].copy_from_slice(args);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::{BLACKWELL_GB10, HOPPER};

    /// The H200 launch libcuda made for `k_params`: 3x2x1 blocks of 64x2x1 threads, 16 registers,
    /// 0x400 bytes of shared, 0x640 bytes of local memory per thread.
    fn k_params() -> QmdParams {
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
        }
    }

    fn bits(q: &[u32; QMD_WORDS], hi: u32, lo: u32) -> u64 {
        get_bits(q, hi, lo).unwrap()
    }

    #[test]
    fn bit_writer_writes_across_words_and_checks_ranges() {
        let mut w = [0u32; 4];
        set_bits(&mut w, 39, 28, 0xabc).unwrap();
        assert_eq!(w, [0xc000_0000, 0xab, 0, 0]);
        assert_eq!(get_bits(&w, 39, 28), Some(0xabc));
        set_bits(&mut w, 31, 28, 0).unwrap();
        assert_eq!(w[0], 0);
        assert_eq!(set_bits(&mut w, 3, 0, 0x10), Err(QmdError::FieldOverflow { field: "(raw)", bits: 4, value: 0x10 }));
        assert_eq!(set_bits(&mut w, 128, 120, 1), Err(QmdError::BadRange { hi: 128, lo: 120, words: 4 }));
        assert_eq!(set_bits(&mut w, 1, 2, 1), Err(QmdError::BadRange { hi: 1, lo: 2, words: 4 }));
        set_bits(&mut w, 127, 64, u64::MAX).unwrap();
        assert_eq!(&w[2..], &[u32::MAX, u32::MAX]);
        assert_eq!(get_bits(&w, 127, 64), Some(u64::MAX));
        assert_eq!(get_bits(&w, 128, 0), None);
    }

    #[test]
    fn word_wise_bit_writer_matches_a_bit_by_bit_one() {
        // Every range shape (inside one word, across two, across three, full 64 bits) against the obvious
        // bit-at-a-time definition, on a background of ones and of zeros.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for background in [0u32, u32::MAX, 0x5a5a_a5a5] {
            for lo in 0..70u32 {
                for width in 1..=64u32 {
                    let hi = lo + width - 1;
                    let value = if width == 64 { next() } else { next() & ((1u64 << width) - 1) };
                    let mut fast = [background; 5];
                    set_bits(&mut fast, hi, lo, value).unwrap();
                    let mut slow = [background; 5];
                    for i in 0..width {
                        let bit = lo + i;
                        let mask = 1u32 << (bit % 32);
                        if (value >> i) & 1 == 1 {
                            slow[(bit / 32) as usize] |= mask;
                        } else {
                            slow[(bit / 32) as usize] &= !mask;
                        }
                    }
                    assert_eq!(fast, slow, "bits {hi}:{lo} value {value:#x}");
                    assert_eq!(get_bits(&fast, hi, lo), Some(value), "bits {hi}:{lo}");
                }
            }
        }
    }

    #[test]
    fn v04_first_word_is_libcudas_without_the_latch() {
        let q = encode(&HOPPER, &k_params()).unwrap();
        // libcuda's first dword was 0x113f0000: group 0x3f (21:16), type 2 GRID_CTA (25:23), and
        // ARRIVE_AT_LATCH_VALID (28), which this encoder leaves clear.
        assert_eq!(q[0], 0x013f_0000);
        assert_eq!(q[0] | 1 << 28, 0x113f_0000);
    }

    #[test]
    fn v04_fields_land_where_clcbc0qmd_h_puts_them() {
        let p = k_params();
        let q = encode(&HOPPER, &p).unwrap();
        assert_eq!(bits(&q, 583, 580), 4, "QMD_MAJOR_VERSION");
        assert_eq!(bits(&q, 579, 576), 0, "QMD_MINOR_VERSION");
        assert_eq!(bits(&q, 543, 536), 0x90, "SASS_VERSION");
        assert_eq!(bits(&q, 568, 568), 1, "API_VISIBLE_CALL_LIMIT");
        assert_eq!(bits(&q, 569, 569), 1, "SAMPLER_INDEX");
        assert_eq!(bits(&q, 607, 602), 0b10_1111, "cache invalidations as libcuda (1,1,1,1,0,1)");
        assert_eq!(bits(&q, 1137, 1136), 1, "CWD_MEMBAR_TYPE");
        assert_eq!([bits(&q, 1055, 1024), bits(&q, 1071, 1056), bits(&q, 1103, 1088)], [3, 2, 1]);
        assert_eq!([bits(&q, 1167, 1152), bits(&q, 1183, 1168), bits(&q, 1199, 1184)], [64, 2, 1]);
        assert_eq!(bits(&q, 1208, 1200), 16, "REGISTER_COUNT");
        assert_eq!(bits(&q, 1215, 1211), 1, "BARRIER_COUNT");
        assert_eq!(bits(&q, 601, 584), 0x400, "SHARED_MEMORY_SIZE");
        assert_eq!((bits(&q, 613, 608), bits(&q, 619, 614), bits(&q, 625, 620)), (5, 0x3a, 9), "libcuda's SM config");
        assert_eq!(bits(&q, 567, 544), 0x640, "SHADER_LOCAL_MEMORY_HIGH_SIZE");
        assert_eq!(bits(&q, 535, 512), 0, "SHADER_LOCAL_MEMORY_LOW_SIZE");
        assert_eq!(bits(&q, 1247, 1216) | bits(&q, 1272, 1248) << 32, p.program_va);
        assert_eq!(bits(&q, 1375, 1344), (p.program_va >> 8) & 0xffff_ffff);
        assert_eq!(bits(&q, 1392, 1376), p.program_va >> 40);
        assert_eq!(bits(&q, 1401, 1393), 0xa, "PROGRAM_PREFETCH_SIZE, as libcuda");
        // cbuf 0: VALID (416), INVALIDATE (419), address >> 6 at 1536.., size >> 4 at 1599:1587.
        assert_eq!(bits(&q, 416, 416), 1);
        assert_eq!(bits(&q, 419, 419), 1);
        assert_eq!(bits(&q, 1567, 1536) | bits(&q, 1586, 1568) << 32, p.cbuf0_va >> 6);
        assert_eq!(bits(&q, 1599, 1587), 0x230 >> 4, "0x228 rounded up to 16 bytes");
        assert_eq!(bits(&q, 420, 420), 0, "cbuf 1 stays invalid");
        // Release 0: enable at 320, four-word structure (322:321 = 0), address and payload at 640...
        assert_eq!(bits(&q, 320, 320), 1);
        assert_eq!(bits(&q, 322, 321), 0);
        assert_eq!(bits(&q, 671, 640) | bits(&q, 696, 672) << 32, 0x2_0060_2010);
        assert_eq!(bits(&q, 735, 704), 0x1234_5678);
        assert_eq!(bits(&q, 336, 336), 0, "release 1 disabled");
        assert_eq!(bits(&q, 368, 368), 0, "no dependent QMD");
        assert_eq!(bits(&q, 28, 28), 0, "no latch");
    }

    #[test]
    fn v04_release1_and_dependent_qmd() {
        let mut p = k_params();
        p.release1 = Some((0x1000_0020, 7));
        p.dependent = Some((0x2_0000_1200, DependentAction::Schedule));
        let q = encode(&HOPPER, &p).unwrap();
        assert_eq!(bits(&q, 336, 336), 1, "RELEASE_ENABLE(1)");
        assert_eq!(bits(&q, 338, 337), 0, "RELEASE_STRUCTURE_SIZE(1)");
        assert_eq!(bits(&q, 799, 768) | bits(&q, 824, 800) << 32, 0x1000_0020);
        assert_eq!(bits(&q, 863, 832), 7);
        assert_eq!(bits(&q, 368, 368), 1, "DEPENDENT_QMD_ENABLE(0)");
        assert_eq!(bits(&q, 371, 369), 1, "DEPENDENT_QMD_ACTION(0) = SCHEDULE");
        assert_eq!(bits(&q, 372, 372), 1, "DEPENDENT_QMD_PREFETCH(0)");
        assert_eq!(bits(&q, 479, 448), 0x2_0000_1200 >> 8);
        assert_eq!(bits(&q, 373, 373), 0, "dependent 1 untouched");
        let mut q2 = q;
        set_dependent(&HOPPER, &mut q2, None).unwrap();
        assert_eq!(bits(&q2, 368, 368), 0);
        set_release(&HOPPER, &mut q2, 1, None).unwrap();
        assert_eq!(bits(&q2, 336, 336), 0);
    }

    #[test]
    fn decode_inverts_encode_for_both_layouts() {
        for arch in [&HOPPER, &BLACKWELL_GB10] {
            let mut p = k_params();
            p.release1 = Some((0x3000, 9));
            p.dependent = Some((0x4_0000, DependentAction::DecrementDependence));
            p.barrier_count = 2;
            let d = decode(arch, &encode(arch, &p).unwrap());
            assert_eq!(d.major, arch.qmd_version.major());
            assert_eq!((d.qmd_type, d.group_id, d.sass_version), (2, 0x3f, arch.sass_version));
            assert_eq!((d.program_va, d.registers, d.barriers), (p.program_va, 16, 2));
            assert_eq!((d.block, d.grid), (p.block, p.grid));
            assert_eq!(d.shared_bytes, 0x400);
            assert_eq!(d.local_bytes_per_thread, 0x640);
            assert_eq!(d.cbuf0, (p.cbuf0_va, 0x230, true));
            assert_eq!(d.release, [p.release0, p.release1]);
            assert_eq!(d.dependent, Some((0x4_0000, 4, true)));
            assert_eq!(d.prefetch, (p.program_va & !0xff, 0xa00));
        }
    }

    #[test]
    fn v05_fields_land_where_clcec0qmd_h_puts_them() {
        let mut p = k_params();
        p.release1 = Some((0x5000, 3));
        p.dependent = Some((0x2_0000_1200, DependentAction::Schedule));
        p.local_bytes_per_thread = 0x248; // rounds up to 0x250 for the >> 4 field
        p.shared_bytes = 0x1234; // rounds up to 0x1300 (256), stored >> 7
        let q = encode(&BLACKWELL_GB10, &p).unwrap();
        // Word 4 carries group 0x3f and type 2 exactly as libcuda's Blackwell QMDs (0x013f0000).
        assert_eq!(q[4], 0x013f_0000);
        assert_eq!(q[0], 0);
        // Word 14: SASS 455:448, API_VISIBLE_CALL_LIMIT 456, SAMPLER_INDEX 457, major 471:468,
        // invalidations 472..477: libcuda's captured 0x2f5003a4 with our SASS version.
        assert_eq!(q[14], 0x2f50_0300 | BLACKWELL_GB10.sass_version);
        assert_eq!(bits(&q, 1055, 1024) | bits(&q, 1076, 1056) << 32, p.program_va >> 4);
        assert_eq!([bits(&q, 1103, 1088), bits(&q, 1119, 1104), bits(&q, 1127, 1120)], [64, 2, 1]);
        assert_eq!(bits(&q, 1136, 1128), 16, "REGISTER_COUNT");
        assert_eq!(bits(&q, 1141, 1137), 1, "BARRIER_COUNT");
        assert_eq!(bits(&q, 1162, 1152), 0x1300 >> 7, "SHARED_MEMORY_SIZE_SHIFTED7");
        // 12 resident blocks of 0x1300 bytes = 57 KiB -> 64 KiB carve-out (17); max 100 KiB (26).
        assert_eq!((bits(&q, 1168, 1163), bits(&q, 1180, 1175), bits(&q, 1174, 1169)), (17, 17, 26));
        assert_eq!(bits(&q, 1215, 1200), 0x250 >> 4, "SHADER_LOCAL_MEMORY_HIGH_SIZE_SHIFTED4");
        assert_eq!([bits(&q, 1279, 1248), bits(&q, 1295, 1280), bits(&q, 1327, 1312)], [3, 2, 1]);
        assert_eq!(bits(&q, 1375, 1344) | bits(&q, 1394, 1376) << 32, p.cbuf0_va >> 6);
        assert_eq!(bits(&q, 1407, 1395), 0x23);
        assert_eq!((bits(&q, 1856, 1856), bits(&q, 1859, 1859)), (1, 1), "cbuf 0 VALID / INVALIDATE");
        assert_eq!(bits(&q, 1919, 1888) | bits(&q, 1936, 1920) << 32, p.program_va >> 8);
        assert_eq!(bits(&q, 1085, 1077), 0xa, "PROGRAM_PREFETCH_SIZE");
        assert_eq!(bits(&q, 625, 624), 1, "CWD_MEMBAR_TYPE");
        // Release 0 enable at 288, semaphore 0 at 480..607; release 1 enable at 304, semaphore 1 at 768.
        assert_eq!((bits(&q, 288, 288), bits(&q, 290, 289)), (1, 0));
        assert_eq!(bits(&q, 511, 480) | bits(&q, 536, 512) << 32, 0x2_0060_2010);
        assert_eq!(bits(&q, 575, 544), 0x1234_5678);
        assert_eq!(bits(&q, 304, 304), 1);
        assert_eq!(bits(&q, 799, 768), 0x5000);
        assert_eq!(bits(&q, 863, 832), 3);
        // Dependent QMD 0: enable 336, action 339:337, prefetch 340, pointer 415:384.
        assert_eq!((bits(&q, 336, 336), bits(&q, 339, 337), bits(&q, 340, 340)), (1, 1, 1));
        assert_eq!(bits(&q, 415, 384), 0x2_0000_1200 >> 8);
    }

    #[test]
    fn v05_refuses_a_program_address_it_cannot_shift() {
        let mut p = k_params();
        p.program_va += 8;
        assert_eq!(
            encode(&BLACKWELL_GB10, &p),
            Err(QmdError::Misaligned { what: "program", va: p.program_va, align: 16 })
        );
        // V04 takes the unshifted address.
        assert!(encode(&HOPPER, &p).is_ok());
    }

    #[test]
    fn refusals_name_their_cause() {
        let ok = k_params();
        let with = |f: &dyn Fn(&mut QmdParams)| {
            let mut p = ok;
            f(&mut p);
            encode(&HOPPER, &p).unwrap_err()
        };
        assert_eq!(
            with(&|p| p.cbuf0_va += 0x20),
            QmdError::Misaligned { what: "constant bank", va: ok.cbuf0_va + 0x20, align: 64 }
        );
        assert!(matches!(with(&|p| p.cbuf0_va = 1 << 49), QmdError::AddressTooHigh { limit_bits: 49, .. }));
        assert!(matches!(with(&|p| p.program_va = 1 << 50), QmdError::AddressTooHigh { what: "program", .. }));
        assert_eq!(with(&|p| p.grid = [3, 0, 1]), QmdError::ZeroDimension { what: "grid", dims: [3, 0, 1] });
        assert_eq!(with(&|p| p.block = [0, 1, 1]), QmdError::ZeroDimension { what: "block", dims: [0, 1, 1] });
        assert!(matches!(with(&|p| p.block = [1, 1, 65]), QmdError::DimensionTooLarge { what: "block", .. }));
        assert!(matches!(with(&|p| p.grid = [1, 65536, 1]), QmdError::DimensionTooLarge { what: "grid", .. }));
        assert_eq!(with(&|p| p.block = [64, 32, 1]), QmdError::TooManyThreads { threads: 2048 });
        assert_eq!(with(&|p| p.registers = 256), QmdError::TooManyRegisters { registers: 256 });
        assert_eq!(with(&|p| p.barrier_count = 17), QmdError::TooManyBarriers { barriers: 17 });
        assert_eq!(
            with(&|p| p.shared_bytes = 228 * 1024 + 1),
            QmdError::SharedTooLarge { bytes: 228 * 1024 + 256, max: 228 * 1024 }
        );
        assert_eq!(
            with(&|p| p.cbuf0_bytes = 0x10001),
            QmdError::CbufTooLarge { index: 0, bytes: 0x10001, max: 0x10000 }
        );
        assert!(matches!(with(&|p| p.release0 = Some((0x1008, 1))), QmdError::Misaligned { align: 16, .. }));
        assert!(matches!(
            with(&|p| p.dependent = Some((0x1080, DependentAction::Schedule))),
            QmdError::Misaligned { what: "dependent QMD", .. }
        ));
        assert!(matches!(
            with(&|p| p.dependent = Some((1 << 40, DependentAction::Schedule))),
            QmdError::AddressTooHigh { limit_bits: 40, .. }
        ));
        // Blackwell GB10 allows less shared memory than Hopper.
        let mut p = ok;
        p.shared_bytes = 101 * 1024;
        assert!(encode(&HOPPER, &p).is_ok());
        assert_eq!(encode(&BLACKWELL_GB10, &p), Err(QmdError::SharedTooLarge { bytes: 101 * 1024, max: 100 * 1024 }));
    }

    #[test]
    fn small_values_are_raised_to_what_the_hardware_was_seen_running() {
        let mut p = k_params();
        p.shared_bytes = 0;
        p.barrier_count = 0;
        p.program_bytes = 0;
        let q = encode(&HOPPER, &p).unwrap();
        let d = decode(&HOPPER, &q);
        assert_eq!(d.shared_bytes, 0x400, "the reserved 1 KiB");
        assert_eq!(d.barriers, 1);
        assert_eq!(d.prefetch, (0, 0), "no prefetch without a size");
        // A huge program still fits the 9-bit prefetch size.
        p.program_bytes = 1 << 30;
        assert_eq!(decode(&HOPPER, &encode(&HOPPER, &p).unwrap()).prefetch.1, 0x1ff << 8);
    }

    #[test]
    fn extra_constant_banks() {
        let mut q = encode(&HOPPER, &k_params()).unwrap();
        set_const_bank(&HOPPER, &mut q, 3, 0x10_0000_0080, 0x10).unwrap();
        set_const_bank(&HOPPER, &mut q, 4, 0x10_0000_0100, 0x8).unwrap();
        assert_eq!((bits(&q, 428, 428), bits(&q, 431, 431)), (1, 1), "VALID(3) / INVALIDATE(3)");
        assert_eq!(bits(&q, 432, 432), 1, "VALID(4)");
        assert_eq!(bits(&q, 1567 + 192, 1536 + 192), 0x10_0000_0080 >> 6);
        assert_eq!(bits(&q, 1599 + 256, 1587 + 256), 1, "8 bytes round up to one 16-byte unit");
        assert_eq!(set_const_bank(&HOPPER, &mut q, 8, 0, 16), Err(QmdError::NoSuchCbuf { index: 8 }));
        let mut b = encode(&BLACKWELL_GB10, &k_params()).unwrap();
        set_const_bank(&BLACKWELL_GB10, &mut b, 3, 0x8000, 0x40).unwrap();
        assert_eq!(bits(&b, 1868, 1868), 1, "V05 VALID(3) at 1856 + 12");
        assert_eq!(bits(&b, 1375 + 192, 1344 + 192), 0x8000 >> 6);
    }

    #[test]
    fn cbuf0_hopper_words() {
        let p = Cbuf0Params {
            block: [64, 2, 1],
            grid: [3, 2, 1],
            shared_window: 0x7294_0000_0000,
            local_window: 0x7293_0000_0000,
            dynamic_shared_bytes: 0x1000,
        };
        let mut out = vec![0xdead_beef; 3];
        fill_cbuf0(&HOPPER, &p, &[0x1111, 0x2222, 0x3333, 0x4444, 5, 6, 7], &mut out);
        // 0x210 + 28 bytes = 0x22c, rounded up to 0x230.
        assert_eq!(out.len() * 4, 0x230);
        let at = |off: usize| out[off / 4];
        assert_eq!([at(0x0), at(0x4), at(0x8)], [64, 2, 1]);
        assert_eq!([at(0xc), at(0x10), at(0x14)], [3, 2, 1]);
        assert_eq!([at(0x18), at(0x1c)], [0, 0x7294]);
        assert_eq!([at(0x20), at(0x24)], [0, 0x7293]);
        assert_eq!(at(0x28), 0xfffdc0);
        assert_eq!(at(0x2c), 0x1000);
        assert_eq!([at(0x208), at(0x20c)], [0, 0]);
        assert_eq!(&out[0x210 / 4..0x210 / 4 + 7], &[0x1111, 0x2222, 0x3333, 0x4444, 5, 6, 7]);
        assert_eq!(at(0x22c), 0, "padding");
        // Every other driver word is zero (the old contents are gone).
        let written = [0x0, 0x4, 0x8, 0xc, 0x10, 0x14, 0x1c, 0x24, 0x28, 0x2c];
        for off in (0..0x210).step_by(4).filter(|o| !written.contains(o)) {
            assert_eq!(at(off), 0, "word {off:#x}");
        }
    }

    #[test]
    fn cbuf0_blackwell_words() {
        let p = Cbuf0Params {
            block: [32, 4, 2],
            grid: [7, 5, 3],
            shared_window: 0x1_2345_6789_0000,
            local_window: 0x9_8765_4321_0000,
            dynamic_shared_bytes: 0x800,
        };
        let mut out = Vec::new();
        fill_cbuf0(&BLACKWELL_GB10, &p, &[0xaa], &mut out);
        assert_eq!(out.len() * 4, 0x390, "0x380 + 4 rounded up to 16");
        let at = |off: usize| out[off / 4];
        assert_eq!([at(0x360), at(0x364), at(0x368)], [32, 4, 2]);
        assert_eq!([at(0x370), at(0x374), at(0x378)], [7, 5, 3]);
        assert_eq!([at(0x2f0), at(0x2f4)], [0x6789_0000, 0x1_2345]);
        assert_eq!([at(0x2f8), at(0x2fc)], [0x4321_0000, 0x9_8765]);
        assert_eq!(at(0x37c), 0xfffdc0);
        assert_eq!(at(0x380), 0xaa);
        assert_eq!(out.iter().filter(|&&w| w == 0x800).count(), 0, "no dynamic-shared word on Blackwell");
    }

    #[test]
    #[should_panic(expected = "parameter bytes exceed")]
    fn cbuf0_refuses_oversized_arguments() {
        let p = Cbuf0Params { block: [1; 3], grid: [1; 3], shared_window: 0, local_window: 0, dynamic_shared_bytes: 0 };
        fill_cbuf0(&HOPPER, &p, &vec![0; 8192], &mut Vec::new());
    }
}
