//! # One table for everything chip-specific
//!
//! Every number that differs between NVIDIA GPU generations lives in an [`Arch`]: class ids, the QMD
//! layout generation, where the driver words sit in constant bank 0, the shared-memory carve-outs. Code
//! elsewhere reads the table and never tests "is this Hopper?", so a new chip is a new entry here (plus,
//! for a new QMD generation, a layout in the nvidia backend's `qmd` module), not a rewrite.
//!
//! The table is pure data and belongs to no backend: the [`cubin`](crate::cubin) loader reads it on
//! every platform (the session checks kernels against the same parameter tables on the simulator), and
//! the nvidia backend reads it for the device it opens.
//!
//! Provenance (tags as in `shared/docs/nvidia-bringup.md`):
//!
//! - [`HOPPER`] (H200, sm_90) is **verified on hardware**: every value here was seen working on the H200
//!   or in libcuda's own launches there.
//! - [`BLACKWELL_GB10`] (sm_121, the DGX Spark part) and [`BLACKWELL_GB100`] (sm_100) are **read, not run**:
//!   class ids from the open kernel driver's headers and tinygrad, QMD V05 bit positions from
//!   open-gpu-doc `clcec0qmd.h`, constant-bank offsets from the SASS that ptxas 13.0 emits for sm_100 /
//!   sm_121 (`LDC c[0x0][...]` for ntid, nctaid, the stack pointer, the global-memory descriptor and the
//!   parameters). Their `verified_on_hardware` is `false`.

/// The QMD (launch descriptor) layout generation a compute class takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QmdVersion {
    /// Hopper, `HOPPER_COMPUTE_A` (0xcbc0): 384 bytes, `QMD_TYPE` 2 required (V03 hangs silently).
    V04_00,
    /// Blackwell, `BLACKWELL_COMPUTE_A/B` (0xcdc0 / 0xcec0): 384 bytes, fields moved and several shifted.
    V05_00,
}

impl QmdVersion {
    /// The value of `QMD_MAJOR_VERSION`.
    pub const fn major(self) -> u32 {
        match self {
            QmdVersion::V04_00 => 4,
            QmdVersion::V05_00 => 5,
        }
    }

    /// The value of `QMD_MINOR_VERSION`.
    pub const fn minor(self) -> u32 {
        0
    }
}

/// Byte offsets of the driver-owned words of constant bank 0 that the runtime must fill before a launch.
///
/// The kernel's compiled code reads them (`LDC c[0x0][off]`); leaving one at zero is not an error the
/// GPU reports, it is a wrong `blockDim`, a wild stack or a bad generic address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cbuf0Layout {
    /// `blockDim.x`, `.y`, `.z`: three u32 words from here.
    pub block_dim: u32,
    /// `gridDim.x`, `.y`, `.z`: three u32 words from here.
    pub grid_dim: u32,
    /// Shared-memory window base (u64), the value also sent with `SET_SHADER_SHARED_MEMORY_WINDOW`.
    pub shared_window: u32,
    /// Local-memory window base (u64), the value also sent with `SET_SHADER_LOCAL_MEMORY_WINDOW`.
    pub local_window: u32,
    /// Initial stack pointer (u32): every kernel starts with `R1 = c[0x0][stack_top]`.
    pub stack_top: u32,
    /// Dynamic shared-memory bytes of this launch (u32), where known.
    ///
    /// `None` for Blackwell: sm_100/sm_121 code reads `%dynamic_smem_size` through an index scaled by
    /// the cluster size (`c[0x0][R + 0x2ac]`), whose layout has not been worked out.
    pub dynamic_shared: Option<u32>,
    /// Global-memory descriptor (u64) that every `LDG`/`STG` names (`desc[UR]`); 0 works (libcuda writes 0).
    pub global_memory_descriptor: u32,
    /// The GPU address of the kernel parameters (u64), followed by the address just past them (u64),
    /// where known. A `__grid_constant__` parameter whose address is taken (a `CUtensorMap` handed to
    /// TMA) is addressed as `c[0x0][param_address] + offset`: without it TMA reads address 0 + offset.
    ///
    /// `None` for Blackwell: no sm_100/sm_121 SASS of ours reads it yet.
    pub param_address: Option<u32>,
    /// The cluster words (`%cluster_nctaid`, `%nclusterid`, `%cluster_nctarank`, `%clusterid`,
    /// `%is_explicit_cluster` are constant-bank reads, not hardware registers), where known.
    ///
    /// `None` for Blackwell: not read from its SASS yet.
    pub cluster: Option<ClusterWords>,
}

/// Where constant bank 0 holds a launch's cluster shape. Read from nvdisasm's SASS of sm_90a kernels that
/// read each PTX special register (nvcc 13.0): the hardware supplies only the CTA's rank in its cluster
/// (`SR_CgaCtaId`); everything else is these words, written for every launch (a launch without a cluster
/// is a grid of 1×1×1 clusters, as CUDA presents it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterWords {
    /// `%is_explicit_cluster` is `c[0x0][explicit] == 1` (u32).
    pub explicit: u32,
    /// `%cluster_nctaid.x/y/z`: CTAs per cluster along each side (three u32).
    pub dims: u32,
    /// `%clusterid.x/y/z` is `trunc(f32(%ctaid) * c[0x0][reciprocal + 4 * axis])`: three f32 reciprocals
    /// of the cluster sides.
    pub reciprocal: u32,
    /// `%nclusterid.x/y/z`: clusters along each side of the grid (three u32).
    pub count: u32,
    /// `%cluster_nctarank`: CTAs in one cluster (u32).
    pub ctas: u32,
}

/// Everything chip-specific about one GPU architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arch {
    /// A short name for reports: `"hopper"`, `"blackwell-gb10"`.
    pub name: &'static str,
    /// Compute capability (major, minor): (9, 0) for sm_90.
    pub sm: (u32, u32),
    /// The compute engine class allocated under a channel.
    pub compute_class: u32,
    /// GPFIFO channel classes in order of preference; use the first the device lists.
    pub channel_classes: &'static [u32],
    /// DMA copy engine classes in order of preference.
    pub copy_classes: &'static [u32],
    /// The usermode (doorbell page) class.
    pub usermode_class: u32,
    /// The QMD layout this compute class takes.
    pub qmd_version: QmdVersion,
    /// Size of one QMD in bytes.
    pub qmd_bytes: usize,
    /// `QMD_GROUP_ID` (0x3f, as libcuda and tinygrad on Hopper and tinygrad on Blackwell).
    pub qmd_group_id: u32,
    /// `SASS_VERSION` written into every QMD.
    pub sass_version: u32,
    /// Where the kernel parameters start in constant bank 0 (`PARAM_CBANK` of this arch's cubins).
    pub param_base: u32,
    /// The driver words of constant bank 0.
    pub cbuf0: Cbuf0Layout,
    /// The value written at [`Cbuf0Layout::stack_top`]: 0xfffdc0, 0x240 below the top of the 16 MiB
    /// per-thread local window.
    pub stack_top_value: u32,
    /// Bytes of the local window above the stack top; per-thread local memory is stack + this.
    pub stack_headroom: u32,
    /// Most parameter bytes one kernel may take.
    pub max_param_bytes: u32,
    /// Most bytes a constant bank may have.
    pub max_cbuf_bytes: u32,
    /// Shared memory the system reserves in every block (counted in `.nv.shared.<fn>`; the whole
    /// allocation of a kernel without that section).
    pub reserved_shared_bytes: u32,
    /// Most shared memory one block may use, reserved part included.
    pub max_shared_bytes: u32,
    /// Most CTAs per cluster without the non-portable opt-in (CUDA's portable cluster size).
    pub max_cluster_ctas: u32,
    /// Most CTAs per cluster with the non-portable opt-in.
    pub max_cluster_ctas_non_portable: u32,
    /// The L1/shared carve-outs an SM can be configured to, in KiB, ascending.
    pub shared_carveouts_kib: &'static [u32],
    /// Most threads resident on one SM.
    pub max_threads_per_sm: u32,
    /// Most blocks resident on one SM.
    pub max_blocks_per_sm: u32,
    /// 32-bit registers per SM.
    pub registers_per_sm: u32,
    /// Width of the GPU virtual address space this backend creates (the VA-space object's size).
    pub va_bits: u32,
    /// Seen working on real hardware (true), or only read from sources (false).
    pub verified_on_hardware: bool,
}

/// The shared-memory carve-out configuration of one launch, in the QMD's encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmConfig {
    /// `MIN_SM_CONFIG_SHARED_MEM_SIZE`.
    pub min: u32,
    /// `TARGET_SM_CONFIG_SHARED_MEM_SIZE`.
    pub target: u32,
    /// `MAX_SM_CONFIG_SHARED_MEM_SIZE`.
    pub max: u32,
}

// Class ids: READ OGKM class headers / tinygrad nv_580.py.
const HOPPER_COMPUTE_A: u32 = 0xcbc0;
const BLACKWELL_COMPUTE_A: u32 = 0xcdc0;
const BLACKWELL_COMPUTE_B: u32 = 0xcec0;
const AMPERE_CHANNEL_GPFIFO_A: u32 = 0xc56f;
const HOPPER_CHANNEL_GPFIFO_A: u32 = 0xc86f;
const BLACKWELL_CHANNEL_GPFIFO_A: u32 = 0xc96f;
const BLACKWELL_CHANNEL_GPFIFO_B: u32 = 0xca6f;
const HOPPER_DMA_COPY_A: u32 = 0xc8b5;
const BLACKWELL_DMA_COPY_A: u32 = 0xc9b5;
const BLACKWELL_DMA_COPY_B: u32 = 0xcab5;
const HOPPER_USERMODE_A: u32 = 0xc661;

const STACK_TOP_VALUE: u32 = 0x00ff_fdc0;
const STACK_HEADROOM: u32 = 0x240;

/// Hopper carve-outs (KiB): the values libcuda chose from are these plus the encoding KiB/4 + 1.
const CARVEOUTS_228: &[u32] = &[0, 8, 16, 32, 64, 100, 132, 164, 196, 228];
/// Compute capability 12.x (GB20x, GB10): 128 KiB of L1, at most 100 KiB of it shared.
const CARVEOUTS_100: &[u32] = &[0, 8, 16, 32, 64, 100];

/// Bytes an NVIDIA GPU's instruction prefetcher may read past a kernel's last instruction, which must be
/// mapped (tinygrad keeps 4 KiB after the code and saw faults on an unmapped page without it). The nvidia
/// platform asks for it as its code prefetch tail, and a cubin's code image is allocated with it after.
pub const CODE_PREFETCH_TAIL: u64 = 4096;

/// Hopper: H100/H200, sm_90, `HOPPER_COMPUTE_A`. Verified on the H200.
pub const HOPPER: Arch = Arch {
    name: "hopper",
    sm: (9, 0),
    compute_class: HOPPER_COMPUTE_A,
    // libcuda uses the Hopper class; tinygrad the Ampere one; both work on the H200.
    channel_classes: &[HOPPER_CHANNEL_GPFIFO_A, AMPERE_CHANNEL_GPFIFO_A],
    copy_classes: &[HOPPER_DMA_COPY_A],
    usermode_class: HOPPER_USERMODE_A,
    qmd_version: QmdVersion::V04_00,
    qmd_bytes: 384,
    qmd_group_id: 0x3f,
    sass_version: 0x90,
    param_base: 0x210,
    cbuf0: Cbuf0Layout {
        block_dim: 0x0,
        grid_dim: 0xc,
        shared_window: 0x18,
        local_window: 0x20,
        stack_top: 0x28,
        dynamic_shared: Some(0x2c),
        global_memory_descriptor: 0x208,
        // libcuda writes the parameter block's start and end here (captured on the H200); nvcc's code
        // for a `__grid_constant__` CUtensorMap adds the parameter's offset to this word.
        param_address: Some(0x198),
        cluster: Some(ClusterWords { explicit: 0x140, dims: 0x144, reciprocal: 0x150, count: 0x15c, ctas: 0x188 }),
    },
    stack_top_value: STACK_TOP_VALUE,
    stack_headroom: STACK_HEADROOM,
    max_param_bytes: 32764,
    max_cbuf_bytes: 0x10000,
    reserved_shared_bytes: 0x400,
    max_shared_bytes: 228 * 1024,
    max_cluster_ctas: 8,
    max_cluster_ctas_non_portable: 16,
    shared_carveouts_kib: CARVEOUTS_228,
    max_threads_per_sm: 2048,
    max_blocks_per_sm: 32,
    registers_per_sm: 65536,
    va_bits: 49,
    verified_on_hardware: true,
};

/// Blackwell GB10 (DGX Spark), sm_121, `BLACKWELL_COMPUTE_B`. Read from sources, never run.
///
/// `sass_version` is a guess: libcuda's QMDs on sm_120 parts carry 0xa4 (their `SM_VERSION` is 0xa04), and
/// GB10 runs the same consumer-Blackwell ISA; prefer [`sass_version_for_sm_version`] of the device's
/// `GR_GET_INFO` `SM_VERSION` once a GB10 is at hand.
pub const BLACKWELL_GB10: Arch = Arch {
    name: "blackwell-gb10",
    sm: (12, 1),
    compute_class: BLACKWELL_COMPUTE_B,
    channel_classes: &[BLACKWELL_CHANNEL_GPFIFO_B, BLACKWELL_CHANNEL_GPFIFO_A],
    copy_classes: &[BLACKWELL_DMA_COPY_B, BLACKWELL_DMA_COPY_A],
    usermode_class: HOPPER_USERMODE_A,
    qmd_version: QmdVersion::V05_00,
    qmd_bytes: 384,
    qmd_group_id: 0x3f,
    sass_version: 0xa4,
    param_base: 0x380,
    cbuf0: BLACKWELL_CBUF0,
    stack_top_value: STACK_TOP_VALUE,
    stack_headroom: STACK_HEADROOM,
    max_param_bytes: 32764,
    max_cbuf_bytes: 0x10000,
    reserved_shared_bytes: 0x400,
    max_shared_bytes: 100 * 1024,
    max_cluster_ctas: 8,
    max_cluster_ctas_non_portable: 8,
    shared_carveouts_kib: CARVEOUTS_100,
    max_threads_per_sm: 1536,
    max_blocks_per_sm: 24,
    registers_per_sm: 65536,
    va_bits: 49,
    verified_on_hardware: false,
};

/// Blackwell GB100/GB200, sm_100, `BLACKWELL_COMPUTE_A`. Read from sources, never run.
pub const BLACKWELL_GB100: Arch = Arch {
    name: "blackwell-gb100",
    sm: (10, 0),
    compute_class: BLACKWELL_COMPUTE_A,
    channel_classes: &[BLACKWELL_CHANNEL_GPFIFO_A],
    copy_classes: &[BLACKWELL_DMA_COPY_A],
    usermode_class: HOPPER_USERMODE_A,
    qmd_version: QmdVersion::V05_00,
    qmd_bytes: 384,
    qmd_group_id: 0x3f,
    sass_version: 0xa0,
    param_base: 0x380,
    cbuf0: BLACKWELL_CBUF0,
    stack_top_value: STACK_TOP_VALUE,
    stack_headroom: STACK_HEADROOM,
    max_param_bytes: 32764,
    max_cbuf_bytes: 0x10000,
    reserved_shared_bytes: 0x400,
    max_shared_bytes: 228 * 1024,
    max_cluster_ctas: 8,
    max_cluster_ctas_non_portable: 16,
    shared_carveouts_kib: CARVEOUTS_228,
    max_threads_per_sm: 2048,
    max_blocks_per_sm: 32,
    registers_per_sm: 65536,
    va_bits: 49,
    verified_on_hardware: false,
};

/// sm_100 and sm_121 SASS from ptxas 13.0 agree on these (READ from `nvdisasm`); the shared window is
/// READ from tinygrad (no ptxas output of ours reads it).
const BLACKWELL_CBUF0: Cbuf0Layout = Cbuf0Layout {
    block_dim: 0x360,
    grid_dim: 0x370,
    shared_window: 0x2f0,
    local_window: 0x2f8,
    stack_top: 0x37c,
    dynamic_shared: None,
    global_memory_descriptor: 0x358,
    param_address: None,
    cluster: None,
};

/// Every architecture the backend knows, newest last.
pub const ALL: &[&Arch] = &[&HOPPER, &BLACKWELL_GB100, &BLACKWELL_GB10];

/// The architecture of compute capability `major.minor`, if known.
pub fn for_sm(major: u32, minor: u32) -> Option<&'static Arch> {
    ALL.iter().copied().find(|a| a.sm == (major, minor))
}

/// The architecture whose compute engine class is `class`, if known.
///
/// GB10 and the GB20x parts share `BLACKWELL_COMPUTE_B`; this returns the GB10 entry for it, which is the
/// Blackwell-B part this project targets. Use [`for_sm`] with the device's compute capability to tell them
/// apart.
pub fn for_compute_class(class: u32) -> Option<&'static Arch> {
    ALL.iter().copied().find(|a| a.compute_class == class)
}

/// The `SASS_VERSION` for a `GR_GET_INFO` `SM_VERSION` value (0x900 -> 0x90, 0xa04 -> 0xa4), the rule
/// tinygrad uses on Ampere through Blackwell.
pub fn sass_version_for_sm_version(sm_version: u32) -> u32 {
    ((sm_version & 0xf00) >> 4) | (sm_version & 0xf)
}

impl Arch {
    /// The SM number cubins for this arch carry in `e_flags` bits 15:8 (90 for sm_90, 121 for sm_121).
    pub const fn sm_number(&self) -> u32 {
        self.sm.0 * 10 + self.sm.1
    }

    /// The first of `preferred` that `available` (the device's class list) contains.
    pub fn pick_class(preferred: &[u32], available: &[u32]) -> Option<u32> {
        preferred.iter().copied().find(|c| available.contains(c))
    }

    /// The channel class to allocate on a device offering `available`.
    pub fn channel_class_in(&self, available: &[u32]) -> Option<u32> {
        Self::pick_class(self.channel_classes, available)
    }

    /// The copy class to allocate on a device offering `available`.
    pub fn copy_class_in(&self, available: &[u32]) -> Option<u32> {
        Self::pick_class(self.copy_classes, available)
    }

    /// The QMD's encoding of a carve-out of `kib` KiB: `kib / 4 + 1` (8 KiB -> 3, 228 KiB -> 58).
    pub const fn sm_config_value(kib: u32) -> u32 {
        kib / 4 + 1
    }

    /// The smallest carve-out (KiB) holding `bytes`, or `None` when even the largest does not.
    pub fn carveout_for(&self, bytes: u64) -> Option<u32> {
        self.shared_carveouts_kib.iter().copied().find(|&k| u64::from(k) * 1024 >= bytes)
    }

    /// Blocks of this shape that fit on one SM at once, by threads, block count and registers (at least 1).
    ///
    /// Registers are allocated per warp in units of 256 (tinygrad's rule, matching the occupancy libcuda
    /// chose for).
    pub fn resident_blocks(&self, threads_per_block: u32, registers: u32) -> u32 {
        let threads = threads_per_block.max(1);
        let by_threads = self.max_threads_per_sm / threads;
        let warps = threads.div_ceil(32);
        let per_warp = (registers.max(1) * 32).next_multiple_of(256);
        let by_registers = self.registers_per_sm / (per_warp * warps);
        by_threads.min(by_registers).min(self.max_blocks_per_sm).max(1)
    }

    /// The carve-out configuration for a launch using `shared_bytes` per block (reserved part included).
    ///
    /// The rule reproduces what libcuda wrote on the H200: `min` is the smallest carve-out that holds
    /// every block that can be resident at once (so shared memory never limits occupancy), `target` is at
    /// least 32 KiB (libcuda's choice for small kernels) and never below `min`, `max` is the largest
    /// carve-out. For a 1 KiB kernel of 128 threads: 16 blocks x 1 KiB = 16 KiB, so min 5, target 9,
    /// max 58; for a 9 KiB kernel of 128 threads: 144 KiB needs the 164 KiB carve-out, so
    /// min = target = 42. Returns `None` when one block does not fit at all.
    pub fn sm_config(&self, shared_bytes: u32, threads_per_block: u32, registers: u32) -> Option<SmConfig> {
        self.sm_config_at_least(shared_bytes, threads_per_block, registers, 0)
    }

    /// [`Arch::sm_config`], with `min` and `target` raised to at least the carve-out holding
    /// `carveout_kib` KiB (a launch's [`LaunchFeatures::carveout_kib`](crate::LaunchFeatures::carveout_kib);
    /// 0 adds nothing). `None` also when `carveout_kib` is past the largest carve-out.
    pub fn sm_config_at_least(
        &self,
        shared_bytes: u32,
        threads_per_block: u32,
        registers: u32,
        carveout_kib: u32,
    ) -> Option<SmConfig> {
        let one = self.carveout_for(u64::from(shared_bytes).max(u64::from(carveout_kib) * 1024))?;
        let blocks = self.resident_blocks(threads_per_block, registers);
        let wanted = u64::from(shared_bytes) * u64::from(blocks);
        let largest = *self.shared_carveouts_kib.last()?;
        let min_kib = self.carveout_for(wanted).unwrap_or(largest).max(one);
        let target_kib = min_kib.max(self.carveout_for(32 * 1024).unwrap_or(largest));
        Some(SmConfig {
            min: Self::sm_config_value(min_kib),
            target: Self::sm_config_value(target_kib),
            max: Self::sm_config_value(largest),
        })
    }

    /// Per-thread local memory for a kernel whose stack needs `stack_bytes`: 0 without a stack, else the
    /// stack plus the headroom above the stack top, rounded up to 32 bytes.
    pub const fn local_bytes_for_stack(&self, stack_bytes: u32) -> u32 {
        if stack_bytes == 0 {
            0
        } else {
            (stack_bytes + self.stack_headroom).next_multiple_of(32)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_find_each_entry_by_sm_and_by_class() {
        for a in ALL {
            assert_eq!(for_sm(a.sm.0, a.sm.1), Some(*a));
        }
        assert_eq!(for_compute_class(0xcbc0).map(|a| a.name), Some("hopper"));
        assert_eq!(for_compute_class(0xcec0).map(|a| a.name), Some("blackwell-gb10"));
        assert_eq!(for_compute_class(0xcdc0).map(|a| a.name), Some("blackwell-gb100"));
        assert_eq!(for_sm(8, 0), None);
        assert_eq!(for_compute_class(0xc6c0), None);
    }

    #[test]
    fn only_hopper_is_verified() {
        let verified: Vec<&str> = ALL.iter().filter(|a| a.verified_on_hardware).map(|a| a.name).collect();
        assert_eq!(verified, ["hopper"]);
    }

    #[test]
    fn sm_numbers_match_cubin_e_flags() {
        // e_flags bits 15:8 of the fixture cubins: 0x5a (sm_90), 0x79 (sm_121), 0x64 (sm_100).
        assert_eq!(HOPPER.sm_number(), 0x5a);
        assert_eq!(BLACKWELL_GB10.sm_number(), 0x79);
        assert_eq!(BLACKWELL_GB100.sm_number(), 0x64);
    }

    #[test]
    fn sm_config_encoding_is_kib_over_4_plus_1() {
        let seen = [(8, 3), (16, 5), (32, 9), (64, 17), (100, 26), (164, 42), (228, 58)];
        for (kib, value) in seen {
            assert_eq!(Arch::sm_config_value(kib), value, "{kib} KiB");
        }
    }

    #[test]
    fn hopper_sm_config_reproduces_libcuda() {
        // k_params: 0x400 bytes of shared, 64x2x1 threads, 16 registers.
        assert_eq!(HOPPER.sm_config(0x400, 128, 16), Some(SmConfig { min: 5, target: 9, max: 0x3a }));
        // 9 KiB kernel of 128 threads: 16 resident blocks need 144 KiB -> the 164 KiB carve-out.
        let c = HOPPER.sm_config(0x2400, 128, 16).unwrap();
        assert_eq!((c.min, c.target), (42, 42));
        // One block larger than the largest carve-out does not fit.
        assert_eq!(HOPPER.sm_config(229 * 1024, 32, 8), None);
        // A whole-SM block still gets a configuration.
        let big = HOPPER.sm_config(200 * 1024, 1024, 32).unwrap();
        assert_eq!((big.min, big.target, big.max), (58, 58, 58));
    }

    #[test]
    fn resident_blocks_respects_every_limit() {
        assert_eq!(HOPPER.resident_blocks(128, 16), 16); // threads
        assert_eq!(HOPPER.resident_blocks(32, 8), 32); // block limit
        assert_eq!(HOPPER.resident_blocks(1024, 64), 1); // registers: 64 * 1024 = 65536
        assert_eq!(HOPPER.resident_blocks(1024, 255), 1); // never below 1
        assert_eq!(BLACKWELL_GB10.resident_blocks(128, 16), 12); // 1536 threads per SM
    }

    #[test]
    fn blackwell_gb10_entry_encodings() {
        let a = &BLACKWELL_GB10;
        assert_eq!(a.qmd_version, QmdVersion::V05_00);
        assert_eq!((a.qmd_version.major(), a.qmd_version.minor()), (5, 0));
        assert_eq!(a.param_base, 0x380);
        // The driver words sit below the parameters, without overlapping each other.
        let c = a.cbuf0;
        let spans = [
            (c.block_dim, 12),
            (c.grid_dim, 12),
            (c.shared_window, 8),
            (c.local_window, 8),
            (c.stack_top, 4),
            (c.global_memory_descriptor, 8),
        ];
        for (i, &(off, len)) in spans.iter().enumerate() {
            assert!(off + len <= a.param_base, "word at {off:#x} runs into the parameters");
            for &(other, other_len) in &spans[i + 1..] {
                assert!(off + len <= other || other + other_len <= off, "{off:#x} overlaps {other:#x}");
            }
        }
        // 12.x parts: at most 100 KiB of shared per SM, so 99 KiB + the reserved 1 KiB per block.
        assert_eq!(a.max_shared_bytes, 100 * 1024);
        let cfg = a.sm_config(0x400, 128, 16).unwrap();
        // 12 resident blocks x 1 KiB -> 16 KiB carve-out (5); target 32 KiB (9); max 100 KiB (26).
        assert_eq!(cfg, SmConfig { min: 5, target: 9, max: 26 });
        assert_eq!(a.channel_class_in(&[0xc56f, 0xc96f]), Some(0xc96f));
        assert_eq!(a.channel_class_in(&[0xca6f, 0xc96f]), Some(0xca6f));
        assert_eq!(a.copy_class_in(&[0xc8b5]), None);
    }

    #[test]
    fn hopper_prefers_the_hopper_channel_class_and_falls_back() {
        assert_eq!(HOPPER.channel_class_in(&[0xc56f, 0xc86f]), Some(0xc86f));
        assert_eq!(HOPPER.channel_class_in(&[0xc56f]), Some(0xc56f));
        assert_eq!(HOPPER.copy_class_in(&[0xc6b5, 0xc8b5]), Some(0xc8b5));
    }

    #[test]
    fn sass_version_rule() {
        assert_eq!(sass_version_for_sm_version(0x900), HOPPER.sass_version);
        assert_eq!(sass_version_for_sm_version(0xa00), BLACKWELL_GB100.sass_version);
        assert_eq!(sass_version_for_sm_version(0xa04), 0xa4);
        assert_eq!(sass_version_for_sm_version(0x809), 0x89);
    }

    #[test]
    fn local_memory_is_stack_plus_headroom_rounded() {
        assert_eq!(HOPPER.local_bytes_for_stack(0), 0);
        assert_eq!(HOPPER.local_bytes_for_stack(0x100), 0x340);
        assert_eq!(HOPPER.local_bytes_for_stack(0x104), 0x360);
        assert_eq!(HOPPER.stack_top_value + HOPPER.stack_headroom, 1 << 24);
    }
}
