//! Where every field of a QMD sits: the named bit range, the word-wise writer and reader, and the V04
//! (Hopper) and V05 (Blackwell) layouts. Bit ranges are `hi:lo`, inclusive, counted from bit 0 of word 0.

use super::QmdError;
use crate::arch::QmdVersion;

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
    /// `RELEASE_MEMBAR_TYPE(0)` (1 = FE_SYSMEMBAR); release `i`'s is `release_flags_stride * i` further.
    /// `None` where the position was not read.
    pub release_membar_type: Option<Field>,
    /// `CWD_MEMBAR_TASK_CHASING_ENABLE`; `None` where the position was not read.
    pub cwd_membar_task_chasing: Option<Field>,
    /// `ARRIVE_AT_LATCH_VALID`; `None` where the position was not read.
    pub arrive_at_latch_valid: Option<Field>,
    /// `ARRIVE_AT_LATCH_ID`; `None` where the position was not read.
    pub arrive_at_latch_id: Option<Field>,
    /// `WAIT_ON_LATCH_VALID`; `None` where the position was not read.
    pub wait_on_latch_valid: Option<Field>,
    /// `WAIT_ON_LATCH_ID`; `None` where the position was not read.
    pub wait_on_latch_id: Option<Field>,
    /// `ENABLE_PROGRAM_PRE_EXIT`: the grid may count as pre-exited (its dependent scheduled) before it
    /// completes; `None` where the position was not read.
    pub enable_program_pre_exit: Option<Field>,
    /// `PRE_EXIT_AT_LAST_CTA_LAUNCH`: the pre-exit happens when the last CTA is dispatched rather than
    /// at the CTAs' `griddepcontrol.launch_dependents`; `None` where the position was not read.
    pub pre_exit_at_last_cta_launch: Option<Field>,
    /// `GPC_CGA_WIDTH`, `GPC_CGA_HEIGHT`, `GPC_CGA_DEPTH`: CTAs per cluster (a cluster's CTAs run on one
    /// GPC), written with `QMD_TYPE` = [`QMD_TYPE_GRID_GPC_CGA`]. `None` where the positions were not
    /// read (the encoder then refuses clusters).
    pub gpc_cga: Option<[Field; 3]>,
    /// `CGA_CTA_DISTRIBUTION_MODE` (0 LOAD_BALANCING, 1 MULTI_CAST); `None` where not read.
    pub cga_distribution_mode: Option<Field>,
    /// `GPU_CGA_WIDTH`, `GPU_CGA_HEIGHT`, `GPU_CGA_DEPTH` (GPU-wide CGAs, the `GRID_GPU_CGA` types);
    /// never written, decoded for dumps. `None` where not read.
    pub gpu_cga: Option<[Field; 3]>,
}

/// `QMD_TYPE_GRID_CTA`: a plain grid (what every launch without a cluster uses; QUEUE (0) hangs on
/// Hopper without any error).
pub const QMD_TYPE_GRID_CTA: u64 = 2;
/// `QMD_TYPE_GRID_GPC_CGA`: a grid of clusters, each cluster's CTAs on one GPC.
pub const QMD_TYPE_GRID_GPC_CGA: u64 = 3;

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
    release_membar_type: Some(Field::new("RELEASE_MEMBAR_TYPE", 323, 323)),
    cwd_membar_task_chasing: Some(Field::new("CWD_MEMBAR_TASK_CHASING_ENABLE", 382, 382)),
    arrive_at_latch_valid: Some(Field::new("ARRIVE_AT_LATCH_VALID", 28, 28)),
    arrive_at_latch_id: Some(Field::new("ARRIVE_AT_LATCH_ID", 1503, 1472)),
    // READ only (clcbc0qmd.h); the programmatic-dependent-launch chain of nv_probe runs them.
    wait_on_latch_valid: Some(Field::new("WAIT_ON_LATCH_VALID", 29, 29)),
    wait_on_latch_id: Some(Field::new("WAIT_ON_LATCH_ID", 1535, 1504)),
    enable_program_pre_exit: Some(Field::new("ENABLE_PROGRAM_PRE_EXIT", 1151, 1151)),
    pre_exit_at_last_cta_launch: Some(Field::new("PRE_EXIT_AT_LAST_CTA_LAUNCH", 1150, 1150)),
    // READ only (clcbc0qmd.h); the cluster probe of nv_probe runs them.
    gpc_cga: Some([
        Field::new("GPC_CGA_WIDTH", 2149, 2144),
        Field::new("GPC_CGA_HEIGHT", 2157, 2152),
        Field::new("GPC_CGA_DEPTH", 2165, 2160),
    ]),
    cga_distribution_mode: Some(Field::new("CGA_CTA_DISTRIBUTION_MODE", 2207, 2207)),
    gpu_cga: Some([
        Field::new("GPU_CGA_WIDTH", 2223, 2208),
        Field::new("GPU_CGA_HEIGHT", 2239, 2224),
        Field::new("GPU_CGA_DEPTH", 2255, 2240),
    ]),
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
    // Not read from clcec0qmd.h: the tunings that write these are refused on V05 (or, for the ones only
    // measured on Hopper, not asked for).
    release_membar_type: None,
    cwd_membar_task_chasing: None,
    arrive_at_latch_valid: None,
    arrive_at_latch_id: None,
    wait_on_latch_valid: None,
    wait_on_latch_id: None,
    enable_program_pre_exit: None,
    pre_exit_at_last_cta_launch: None,
    // clcec0qmd.h's cluster fields were not read: cluster launches are refused on V05.
    gpc_cga: None,
    cga_distribution_mode: None,
    gpu_cga: None,
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
    pub(super) fn release_semaphore(&self, i: u32) -> [Field; 4] {
        let shift = self.release_semaphore_base[i as usize] - self.release_semaphore_base[0];
        [self.release_addr_lo, self.release_addr_hi, self.release_payload_lo, self.release_payload_hi]
            .map(|f| f.nth(1, shift))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
