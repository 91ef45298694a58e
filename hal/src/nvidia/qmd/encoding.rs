//! Encoding: one launch's parameters into a fresh QMD ([`encode`]), and the setters that patch one in
//! place — releases, the dependent QMD, constant banks, and the encoding choices the queue tunes.

use super::fields::{layout, set_field, Field, QMD_TYPE_GRID_CTA, QMD_TYPE_GRID_GPC_CGA};
use super::{cluster_limits, QmdError, QMD_WORDS};
use crate::arch::Arch;
use crate::queue::{ClusterScheduling, LaunchFeatures, QMD_MAX_REGISTERS};

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
    /// The cluster shape and the carve-out ([`LaunchFeatures::NONE`]: a plain grid, the carve-out chosen
    /// from the shared size and occupancy).
    pub features: LaunchFeatures,
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

/// A cluster `arch`'s QMD can carry and `grid` divides into: no zero side, at most the arch's CTAs per
/// cluster (portable or, with the opt-in, non-portable), every grid side a multiple of the cluster's.
fn check_cluster(arch: &Arch, grid: [u32; 3], f: &LaunchFeatures) -> Result<(), QmdError> {
    if !f.has_cluster() {
        return Ok(());
    }
    let cluster = f.cluster;
    if cluster.contains(&0) {
        return Err(QmdError::ZeroDimension { what: "cluster", dims: cluster });
    }
    if layout(arch.qmd_version).gpc_cga.is_none() {
        return Err(QmdError::NotInLayout { field: "GPC_CGA_WIDTH", version: arch.qmd_version });
    }
    let (portable, non_portable) = cluster_limits(arch);
    let max = if f.non_portable_cluster { non_portable } else { portable };
    let ctas = f.cluster_ctas();
    if ctas > u64::from(max) {
        return Err(QmdError::ClusterTooLarge { cluster, ctas, max, non_portable: f.non_portable_cluster });
    }
    if grid.iter().zip(cluster).any(|(&g, c)| !g.is_multiple_of(c)) {
        return Err(QmdError::GridNotWholeClusters { grid, cluster });
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

/// The cache invalidations [`encode`] writes, bit `i` for the `i`-th of texture header, sampler, texture
/// data, shader data, instruction and shader constant: libcuda's, all but the instruction cache.
pub const LIBCUDA_INVALIDATIONS: u8 = 0x2f;

/// Sets the six cache invalidations at launch from `bits` (bit `i` as in [`LIBCUDA_INVALIDATIONS`]).
pub fn set_invalidations(arch: &Arch, qmd: &mut [u32; QMD_WORDS], bits: u8) -> Result<(), QmdError> {
    let l = layout(arch.qmd_version);
    for bit in 0..6 {
        set_field(qmd, l.invalidate_caches.nth(bit, 1), u64::from((bits >> bit) & 1))?;
    }
    Ok(())
}

/// Sets `DEPENDENT_QMD_PREFETCH(0)`, which [`set_dependent`] turns on.
pub fn set_dependent_prefetch(arch: &Arch, qmd: &mut [u32; QMD_WORDS], on: bool) -> Result<(), QmdError> {
    set_field(qmd, layout(arch.qmd_version).dependent_prefetch, u64::from(on))
}

/// Sets the barrier every block of the grid runs at exit before the grid counts as done:
/// `CWD_MEMBAR_TYPE` = `membar` (0 L1_NONE, 1 L1_SYSMEMBAR as [`encode`] writes, 3 L1_MEMBAR) and, with
/// `task_chasing`, `CWD_MEMBAR_TASK_CHASING_ENABLE` (refused on a layout whose position for it was not
/// read).
pub fn set_block_exit_barrier(
    arch: &Arch,
    qmd: &mut [u32; QMD_WORDS],
    membar: u32,
    task_chasing: bool,
) -> Result<(), QmdError> {
    let l = layout(arch.qmd_version);
    set_field(qmd, l.cwd_membar_type, u64::from(membar))?;
    if task_chasing {
        set_field(qmd, known(arch, l.cwd_membar_task_chasing, "CWD_MEMBAR_TASK_CHASING_ENABLE")?, 1)?;
    }
    Ok(())
}

/// Sets `RELEASE_MEMBAR_TYPE(i)` to FE_SYSMEMBAR: a system-wide memory barrier before release semaphore
/// `i` (0..3) is written. Refused on a layout whose position for it was not read.
pub fn set_release_sysmembar(arch: &Arch, qmd: &mut [u32; QMD_WORDS], i: u32) -> Result<(), QmdError> {
    if i >= 3 {
        return Err(QmdError::NoSuchRelease { index: i });
    }
    let l = layout(arch.qmd_version);
    let field = known(arch, l.release_membar_type, "RELEASE_MEMBAR_TYPE")?;
    set_field(qmd, field.nth(i, l.release_flags_stride), 1)
}

/// Sets `ARRIVE_AT_LATCH_VALID` with `ARRIVE_AT_LATCH_ID` = `id`: the launch arrives at that latch when
/// it completes. Refused on a layout whose positions for them were not read.
pub fn set_arrive_at_latch(arch: &Arch, qmd: &mut [u32; QMD_WORDS], id: u32) -> Result<(), QmdError> {
    let l = layout(arch.qmd_version);
    set_field(qmd, known(arch, l.arrive_at_latch_valid, "ARRIVE_AT_LATCH_VALID")?, 1)?;
    set_field(qmd, known(arch, l.arrive_at_latch_id, "ARRIVE_AT_LATCH_ID")?, u64::from(id))
}

/// The programmatic-dependent-launch fields of a chained launch (V04 only): as a producer (it has a
/// dependent), `ARRIVE_AT_LATCH_VALID` with `ARRIVE_AT_LATCH_ID` = `arrive` and `ENABLE_PROGRAM_PRE_EXIT`,
/// so its dependent may be scheduled before it completes (with `at_last_cta_launch`,
/// `PRE_EXIT_AT_LAST_CTA_LAUNCH`: once its last CTA is dispatched); as a consumer (it has a predecessor),
/// `WAIT_ON_LATCH_VALID` with `WAIT_ON_LATCH_ID` = `wait`, the latch its predecessor arrives at when it
/// completes, which the kernel's `griddepcontrol.wait` waits for. Refused where the positions were not read.
pub fn set_programmatic(
    arch: &Arch,
    qmd: &mut [u32; QMD_WORDS],
    arrive: Option<u32>,
    at_last_cta_launch: bool,
    wait: Option<u32>,
) -> Result<(), QmdError> {
    let l = layout(arch.qmd_version);
    if let Some(id) = arrive {
        set_arrive_at_latch(arch, qmd, id)?;
        set_field(qmd, known(arch, l.enable_program_pre_exit, "ENABLE_PROGRAM_PRE_EXIT")?, 1)?;
        if at_last_cta_launch {
            set_field(qmd, known(arch, l.pre_exit_at_last_cta_launch, "PRE_EXIT_AT_LAST_CTA_LAUNCH")?, 1)?;
        }
    }
    if let Some(id) = wait {
        set_field(qmd, known(arch, l.wait_on_latch_valid, "WAIT_ON_LATCH_VALID")?, 1)?;
        set_field(qmd, known(arch, l.wait_on_latch_id, "WAIT_ON_LATCH_ID")?, u64::from(id))?;
    }
    Ok(())
}

/// `field` of `arch`'s layout, or the refusal naming it.
fn known(arch: &Arch, field: Option<Field>, name: &'static str) -> Result<Field, QmdError> {
    field.ok_or(QmdError::NotInLayout { field: name, version: arch.qmd_version })
}

/// Writes a cluster launch's fields: `QMD_TYPE` = GRID_GPC_CGA, the CTAs per cluster in
/// `GPC_CGA_WIDTH/HEIGHT/DEPTH`, and `CGA_CTA_DISTRIBUTION_MODE`. The grid fields then count clusters,
/// not CTAs (`encode` divides them): the H200 ran twice the CTAs of a 2-CTA-cluster launch whose grid
/// fields counted CTAs (docs/perf/2026-12-01-hopper-launch-probes.md).
fn set_cluster(arch: &Arch, q: &mut [u32; QMD_WORDS], f: &LaunchFeatures) -> Result<(), QmdError> {
    let l = layout(arch.qmd_version);
    let dims = known3(arch, l.gpc_cga, "GPC_CGA_WIDTH")?;
    let mode = known(arch, l.cga_distribution_mode, "CGA_CTA_DISTRIBUTION_MODE")?;
    set_field(q, l.qmd_type, QMD_TYPE_GRID_GPC_CGA)?;
    for (field, &side) in dims.iter().zip(&f.cluster) {
        set_field(q, *field, u64::from(side))?;
    }
    let multicast = match f.cluster_scheduling {
        ClusterScheduling::LoadBalancing => 0,
        ClusterScheduling::MultiCast => 1,
    };
    set_field(q, mode, multicast)
}

/// The three fields of `arch`'s layout, or the refusal naming the first.
fn known3(arch: &Arch, fields: Option<[Field; 3]>, name: &'static str) -> Result<[Field; 3], QmdError> {
    fields.ok_or(QmdError::NotInLayout { field: name, version: arch.qmd_version })
}

/// Encodes one launch for `arch` into a fresh QMD.
///
/// Beyond the caller's values it writes what every working launch on the H200 carried: group 0x3f, type
/// GRID_CTA, the arch's SASS version, `API_VISIBLE_CALL_LIMIT` = 1 (no check), `SAMPLER_INDEX` = 1,
/// `CWD_MEMBAR_TYPE` = L1_SYSMEMBAR, and libcuda's cache invalidations (texture header, sampler, texture
/// data, shader data, shader constant). The shared-memory size is raised to the arch's reserved
/// minimum and rounded up to 256 bytes, the barrier count raised to 1 (libcuda and tinygrad never
/// send 0), and the carve-out chosen by [`Arch::sm_config_at_least`] (at least the launch's
/// [`LaunchFeatures::carveout_kib`]). A cluster launch gets type GRID_GPC_CGA and its cluster shape
/// (see `set_cluster`); a cluster the arch cannot run, a grid that is not whole clusters, or a
/// carve-out past the largest is refused.
pub fn encode(arch: &Arch, p: &QmdParams) -> Result<[u32; QMD_WORDS], QmdError> {
    debug_assert_eq!(arch.qmd_bytes, QMD_WORDS * 4);
    let l = layout(arch.qmd_version);
    check_shape(p)?;
    if p.registers > QMD_MAX_REGISTERS {
        return Err(QmdError::TooManyRegisters { registers: p.registers });
    }
    if p.barrier_count > 16 {
        return Err(QmdError::TooManyBarriers { barriers: p.barrier_count });
    }
    let shared = p.shared_bytes.max(arch.reserved_shared_bytes).next_multiple_of(256);
    if shared > arch.max_shared_bytes {
        return Err(QmdError::SharedTooLarge { bytes: shared, max: arch.max_shared_bytes });
    }
    let largest_kib = arch.shared_carveouts_kib.last().copied().unwrap_or(0);
    if p.features.carveout_kib > largest_kib {
        return Err(QmdError::CarveoutTooLarge { kib: p.features.carveout_kib, max: largest_kib });
    }
    check_cluster(arch, p.grid, &p.features)?;
    let threads = p.block[0] * p.block[1] * p.block[2];
    let config = arch
        .sm_config_at_least(shared, threads, p.registers, p.features.carveout_kib)
        .ok_or(QmdError::SharedTooLarge { bytes: shared, max: arch.max_shared_bytes })?;
    check_va("program", p.program_va, 1 << l.program_addr_shift, arch.va_bits)?;

    let mut q = [0u32; QMD_WORDS];
    set_field(&mut q, l.group_id, u64::from(arch.qmd_group_id))?;
    // GRID_CTA, or GRID_GPC_CGA for a cluster. QUEUE (0) hangs without any error on Hopper.
    set_field(&mut q, l.qmd_type, QMD_TYPE_GRID_CTA)?;
    if p.features.has_cluster() {
        set_cluster(arch, &mut q, &p.features)?;
    }
    set_field(&mut q, l.major_version, u64::from(arch.qmd_version.major()))?;
    set_field(&mut q, l.minor_version, u64::from(arch.qmd_version.minor()))?;
    set_field(&mut q, l.sass_version, u64::from(arch.sass_version))?;
    set_field(&mut q, l.api_visible_call_limit, 1)?;
    set_field(&mut q, l.sampler_index, 1)?;
    set_invalidations(arch, &mut q, LIBCUDA_INVALIDATIONS)?;
    set_field(&mut q, l.cwd_membar_type, 1)?;

    // `check_cluster` proved every side whole clusters; a launch without one is clusters of one CTA.
    let clusters = std::array::from_fn::<u32, 3, _>(|axis| p.grid[axis] / p.features.cluster[axis].max(1));
    for (axis, &count) in clusters.iter().enumerate() {
        set_field(&mut q, l.grid[axis], u64::from(count))?;
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

#[cfg(test)]
mod tests {
    use super::super::test_support::{bits, k_params};
    use super::*;
    use crate::arch::{BLACKWELL_GB10, HOPPER};
    use crate::nvidia::qmd::decode;

    #[test]
    fn v04_first_word_is_libcudas_without_the_latch() {
        let q = encode(&HOPPER, &k_params()).unwrap();
        // libcuda's first dword was 0x113f0000: group 0x3f (21:16), type 2 GRID_CTA (25:23), and
        // ARRIVE_AT_LATCH_VALID (28), which this encoder leaves clear.
        assert_eq!(q[0], 0x013f_0000);
        assert_eq!(q[0] | 1 << 28, 0x113f_0000);
    }

    /// A kernel that uses all 255 registers reaches the encoder as 256 (the count rounded up to 8, as
    /// libcuda writes it): both layouts' 9-bit REGISTER_COUNT carry it, and 256 threads of it fill the
    /// SM's 64K registers exactly once.
    #[test]
    fn a_255_register_kernel_declares_256_in_both_layouts() {
        let mut p = k_params();
        p.registers = QMD_MAX_REGISTERS;
        p.block = [256, 1, 1];
        let q = encode(&HOPPER, &p).unwrap();
        assert_eq!(bits(&q, 1208, 1200), 256, "REGISTER_COUNT (V04)");
        assert_eq!(decode(&HOPPER, &q).registers, 256);
        let q = encode(&BLACKWELL_GB10, &p).unwrap();
        assert_eq!(bits(&q, 1136, 1128), 256, "REGISTER_COUNT (V05)");
        assert_eq!(HOPPER.resident_blocks(256, 256), 1);
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
        assert_eq!(with(&|p| p.registers = 257), QmdError::TooManyRegisters { registers: 257 });
        assert_eq!(with(&|p| p.registers = 264), QmdError::TooManyRegisters { registers: 264 });
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
    fn tuning_fields_land_where_clcbc0qmd_h_puts_them() {
        let fresh = encode(&HOPPER, &with_dependent()).unwrap();
        let mut q = fresh;
        set_release_sysmembar(&HOPPER, &mut q, 0).unwrap();
        assert_eq!(bits(&q, 323, 323), 1, "RELEASE_MEMBAR_TYPE(0)");
        set_release_sysmembar(&HOPPER, &mut q, 1).unwrap();
        assert_eq!(bits(&q, 339, 339), 1, "RELEASE_MEMBAR_TYPE(1) at 323 + 16");
        set_block_exit_barrier(&HOPPER, &mut q, 3, true).unwrap();
        assert_eq!((bits(&q, 1137, 1136), bits(&q, 382, 382)), (3, 1), "L1_MEMBAR, task chasing");
        set_arrive_at_latch(&HOPPER, &mut q, 8).unwrap();
        assert_eq!((bits(&q, 28, 28), bits(&q, 1503, 1472)), (1, 8));
        assert_eq!(q[0], 0x113f_0000, "libcuda's first dword, latch included");
        set_invalidations(&HOPPER, &mut q, 0b01_0000).unwrap();
        assert_eq!(bits(&q, 607, 602), 0b01_0000, "the instruction cache only");
        set_dependent_prefetch(&HOPPER, &mut q, false).unwrap();
        assert_eq!(bits(&q, 372, 372), 0, "DEPENDENT_QMD_PREFETCH(0)");
        // Undoing each returns the fresh encoding: nothing else was touched.
        set_invalidations(&HOPPER, &mut q, LIBCUDA_INVALIDATIONS).unwrap();
        set_dependent_prefetch(&HOPPER, &mut q, true).unwrap();
        set_block_exit_barrier(&HOPPER, &mut q, 1, false).unwrap();
        for (hi, lo) in [(323, 323), (339, 339), (382, 382), (28, 28), (1503, 1472)] {
            crate::nvidia::qmd::set_bits(&mut q, hi, lo, 0).unwrap();
        }
        assert_eq!(q, fresh);
    }

    #[test]
    fn tunings_without_a_known_v05_position_are_refused_there() {
        let mut q = encode(&BLACKWELL_GB10, &k_params()).unwrap();
        let refused = |field| Err(QmdError::NotInLayout { field, version: BLACKWELL_GB10.qmd_version });
        assert_eq!(set_release_sysmembar(&BLACKWELL_GB10, &mut q, 0), refused("RELEASE_MEMBAR_TYPE"));
        assert_eq!(set_block_exit_barrier(&BLACKWELL_GB10, &mut q, 3, true), refused("CWD_MEMBAR_TASK_CHASING_ENABLE"));
        assert_eq!(set_arrive_at_latch(&BLACKWELL_GB10, &mut q, 8), refused("ARRIVE_AT_LATCH_VALID"));
        // What V05 does have is written where clcec0qmd.h puts it.
        set_block_exit_barrier(&BLACKWELL_GB10, &mut q, 3, false).unwrap();
        assert_eq!(bits(&q, 625, 624), 3);
        assert_eq!(set_release_sysmembar(&HOPPER, &mut q, 3), Err(QmdError::NoSuchRelease { index: 3 }));
        assert_eq!(set_programmatic(&BLACKWELL_GB10, &mut q, None, false, Some(9)), refused("WAIT_ON_LATCH_VALID"));
    }

    #[test]
    fn programmatic_launch_fields_land_where_clcbc0qmd_h_puts_them() {
        let fresh = encode(&HOPPER, &with_dependent()).unwrap();
        // A producer only: arrive at 17, pre-exit at the last CTA's dispatch; no wait.
        let mut q = fresh;
        set_programmatic(&HOPPER, &mut q, Some(17), true, None).unwrap();
        assert_eq!((bits(&q, 28, 28), bits(&q, 1503, 1472)), (1, 17), "ARRIVE_AT_LATCH_VALID / _ID");
        assert_eq!((bits(&q, 1151, 1151), bits(&q, 1150, 1150)), (1, 1), "ENABLE_PROGRAM_PRE_EXIT, AT_LAST_CTA");
        assert_eq!((bits(&q, 29, 29), bits(&q, 1535, 1504)), (0, 0), "no wait");
        // A consumer only: wait on 0xdead_beef (the id is 32 bits); nothing of the producer's.
        let mut c = fresh;
        set_programmatic(&HOPPER, &mut c, None, true, Some(0xdead_beef)).unwrap();
        assert_eq!((bits(&c, 29, 29), bits(&c, 1535, 1504)), (1, 0xdead_beef), "WAIT_ON_LATCH_VALID / _ID");
        assert_eq!((bits(&c, 28, 28), bits(&c, 1151, 1151), bits(&c, 1150, 1150)), (0, 0, 0));
        // Both, without the last-CTA trigger; clearing exactly those bits gives the fresh encoding back.
        let mut b = fresh;
        set_programmatic(&HOPPER, &mut b, Some(3), false, Some(2)).unwrap();
        assert_eq!(bits(&b, 1150, 1150), 0, "pre-exit at the CTAs' own launch_dependents");
        for (hi, lo) in [(28, 28), (29, 29), (1151, 1151), (1503, 1472), (1535, 1504)] {
            crate::nvidia::qmd::set_bits(&mut b, hi, lo, 0).unwrap();
        }
        assert_eq!(b, fresh);
    }

    fn clustered(cluster: [u32; 3], grid: [u32; 3]) -> QmdParams {
        QmdParams { grid, features: LaunchFeatures::cluster(cluster), ..k_params() }
    }

    #[test]
    fn a_cluster_launch_is_a_grid_gpc_cga_with_its_cluster_shape() {
        let plain = encode(&HOPPER, &k_params()).unwrap();
        let q = encode(&HOPPER, &clustered([2, 1, 1], [132, 2, 1])).unwrap();
        // clcbc0qmd.h: QMD_TYPE 25:23 (GRID_GPC_CGA = 3), GPC_CGA_WIDTH 2149:2144, HEIGHT 2157:2152,
        // DEPTH 2165:2160, CGA_CTA_DISTRIBUTION_MODE 2207 (LOAD_BALANCING 0).
        assert_eq!(bits(&q, 25, 23), 3, "QMD_TYPE_GRID_GPC_CGA");
        assert_eq!(q[0], 0x01bf_0000, "group 0x3f, type 3");
        assert_eq!((bits(&q, 2149, 2144), bits(&q, 2157, 2152), bits(&q, 2165, 2160)), (2, 1, 1));
        assert_eq!(bits(&q, 2207, 2207), 0, "LOAD_BALANCING");
        assert_eq!(bits(&q, 2255, 2208), 0, "GPU_CGA_* untouched");
        assert_eq!([bits(&q, 1055, 1024), bits(&q, 1071, 1056), bits(&q, 1103, 1088)], [66, 2, 1], "grid in clusters");
        // Word 67 holds the GPC CGA sides: width at bit 0, height at 8, depth at 16 (2144 = 67 * 32).
        assert_eq!(q[67], 0x0001_0102);
        assert_eq!(bits(&plain, 25, 23), 2, "a plain launch stays GRID_CTA");
        assert_eq!(plain[67], 0, "and has no cluster shape");

        let mut p = clustered([2, 2, 2], [4, 4, 2]);
        p.features.cluster_scheduling = ClusterScheduling::MultiCast;
        let q = encode(&HOPPER, &p).unwrap();
        assert_eq!(q[67], 0x0002_0202);
        assert_eq!(bits(&q, 2207, 2207), 1, "MULTI_CAST");
        assert_eq!(q[68], 1 << 31, "bit 2207 is the top bit of word 68, alone in it");
        // Everything else is the plain encoding of the same launch with a grid of 2 × 2 × 1 CTAs.
        let mut same = q;
        crate::nvidia::qmd::set_bits(&mut same, 25, 23, 2).unwrap();
        crate::nvidia::qmd::set_bits(&mut same, 2207, 2144, 0).unwrap();
        let plain = QmdParams { features: LaunchFeatures::NONE, grid: [2, 2, 1], ..p };
        assert_eq!(same, encode(&HOPPER, &plain).unwrap());
    }

    #[test]
    fn clusters_that_cannot_be_encoded_are_refused_by_name() {
        let err = |cluster, grid| encode(&HOPPER, &clustered(cluster, grid)).unwrap_err();
        assert_eq!(
            err([16, 1, 1], [32, 1, 1]),
            QmdError::ClusterTooLarge { cluster: [16, 1, 1], ctas: 16, max: 8, non_portable: false }
        );
        assert_eq!(
            err([2, 2, 4], [2, 2, 4]),
            QmdError::ClusterTooLarge { cluster: [2, 2, 4], ctas: 16, max: 8, non_portable: false }
        );
        let mut p = clustered([16, 1, 1], [32, 1, 1]);
        p.features.non_portable_cluster = true;
        assert_eq!(decode(&HOPPER, &encode(&HOPPER, &p).unwrap()).gpc_cga, [16, 1, 1], "16 with the opt-in");
        p.features.cluster = [17, 1, 1];
        p.grid = [34, 1, 1];
        assert_eq!(
            encode(&HOPPER, &p),
            Err(QmdError::ClusterTooLarge { cluster: [17, 1, 1], ctas: 17, max: 16, non_portable: true })
        );
        assert_eq!(err([2, 1, 1], [3, 1, 1]), QmdError::GridNotWholeClusters { grid: [3, 1, 1], cluster: [2, 1, 1] });
        assert_eq!(err([1, 2, 1], [4, 3, 1]), QmdError::GridNotWholeClusters { grid: [4, 3, 1], cluster: [1, 2, 1] });
        assert_eq!(err([0, 1, 1], [4, 1, 1]), QmdError::ZeroDimension { what: "cluster", dims: [0, 1, 1] });
        // Blackwell's cluster fields were not read from clcec0qmd.h: refused rather than guessed.
        assert_eq!(
            encode(&BLACKWELL_GB10, &clustered([2, 1, 1], [4, 1, 1])),
            Err(QmdError::NotInLayout { field: "GPC_CGA_WIDTH", version: BLACKWELL_GB10.qmd_version })
        );
        assert_eq!(crate::nvidia::qmd::cluster_limits(&HOPPER), (8, 16));
        assert_eq!(crate::nvidia::qmd::cluster_limits(&BLACKWELL_GB10), (1, 1));
    }

    #[test]
    fn dynamic_shared_up_to_227_kib_takes_the_228_kib_carveout() {
        // 227 KiB of dynamic shared memory + the reserved 1 KiB static section = 228 KiB, Hopper's most.
        let mut p = k_params();
        p.block = [1024, 1, 1];
        p.registers = 32;
        p.shared_bytes = 1024 + 227 * 1024;
        let q = encode(&HOPPER, &p).unwrap();
        assert_eq!(bits(&q, 601, 584), 228 * 1024, "SHARED_MEMORY_SIZE in bytes (18 bits hold 0x39000)");
        // MIN 613:608, MAX 619:614, TARGET 625:620: 228 KiB / 4 + 1 = 58 in all three.
        assert_eq!((bits(&q, 613, 608), bits(&q, 619, 614), bits(&q, 625, 620)), (58, 58, 58));
        assert_eq!(bits(&q, 626, 626), 0, "SHARED_ALLOCATION_ENABLE untouched");
        // One byte more (rounded to 256) is past the arch's maximum.
        p.shared_bytes += 1;
        assert_eq!(encode(&HOPPER, &p), Err(QmdError::SharedTooLarge { bytes: 228 * 1024 + 256, max: 228 * 1024 }));
        // 100 KiB + 1 KiB needs the 132 KiB carve-out for one block: min 34; 2 of 1024 threads fit -> 228.
        p.shared_bytes = 101 * 1024;
        let q = encode(&HOPPER, &p).unwrap();
        assert_eq!((bits(&q, 613, 608), bits(&q, 625, 620)), (58, 58), "two resident blocks need 202 KiB");
        p.block = [1024, 1, 1];
        p.registers = 64;
        let q = encode(&HOPPER, &p).unwrap();
        assert_eq!((bits(&q, 613, 608), bits(&q, 625, 620)), (34, 34), "one resident block: 132 KiB");
    }

    #[test]
    fn an_asked_for_carveout_raises_min_and_target() {
        // k_params alone: min 5 (16 KiB), target 9 (32 KiB), max 58.
        let mut p = k_params();
        p.features.carveout_kib = 100;
        let q = encode(&HOPPER, &p).unwrap();
        assert_eq!((bits(&q, 613, 608), bits(&q, 625, 620), bits(&q, 619, 614)), (26, 26, 58));
        p.features.carveout_kib = 101; // rounds up to the 132 KiB carve-out
        let q = encode(&HOPPER, &p).unwrap();
        assert_eq!((bits(&q, 613, 608), bits(&q, 625, 620)), (34, 34));
        p.features.carveout_kib = 8; // less than the launch needs anyway: nothing changes
        assert_eq!(encode(&HOPPER, &p).unwrap(), encode(&HOPPER, &k_params()).unwrap());
        p.features.carveout_kib = 229;
        assert_eq!(encode(&HOPPER, &p), Err(QmdError::CarveoutTooLarge { kib: 229, max: 228 }));
        assert_eq!(encode(&BLACKWELL_GB10, &p), Err(QmdError::CarveoutTooLarge { kib: 229, max: 100 }));
    }

    /// `k_params` with a dependent QMD, so the prefetch bit is set.
    fn with_dependent() -> QmdParams {
        QmdParams { dependent: Some((0x2_0000_1200, DependentAction::Schedule)), ..k_params() }
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
}
