//! Decoding: a QMD read back into its launch-relevant fields (tests, and dumping a launch that hung).

use super::fields::{get_field, layout, Field};
use super::QMD_WORDS;
use crate::arch::Arch;

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
    /// `GPC_CGA_WIDTH/HEIGHT/DEPTH` (all 0 on a plain grid, and where the layout has no such fields).
    pub gpc_cga: [u32; 3],
    /// `CGA_CTA_DISTRIBUTION_MODE` (0 where the layout has no such field).
    pub cga_distribution_mode: u32,
    /// `GPU_CGA_WIDTH/HEIGHT/DEPTH` (never written by the encoder).
    pub gpu_cga: [u32; 3],
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
        gpc_cga: l.gpc_cga.map_or([0; 3], |f| f.map(g32)),
        cga_distribution_mode: l.cga_distribution_mode.map_or(0, g32),
        gpu_cga: l.gpu_cga.map_or([0; 3], |f| f.map(g32)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::k_params;
    use super::*;
    use crate::arch::{BLACKWELL_GB10, HOPPER};
    use crate::nvidia::qmd::{encode, DependentAction};

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
            assert_eq!((d.gpc_cga, d.cga_distribution_mode, d.gpu_cga), ([0; 3], 0, [0; 3]));
        }
    }

    #[test]
    fn decode_reads_a_cluster_back() {
        let mut p = k_params();
        p.grid = [8, 6, 2];
        p.features = crate::queue::LaunchFeatures {
            cluster: [2, 3, 1],
            cluster_scheduling: crate::queue::ClusterScheduling::MultiCast,
            ..crate::queue::LaunchFeatures::NONE
        };
        let d = decode(&HOPPER, &encode(&HOPPER, &p).unwrap());
        assert_eq!((d.qmd_type, d.gpc_cga, d.cga_distribution_mode, d.gpu_cga), (3, [2, 3, 1], 1, [0; 3]));
        assert_eq!(d.grid, [4, 2, 2], "the grid fields count clusters");
    }
}
