//! Raw driver ABI of NVIDIA's open kernel driver 580.x: escape numbers, class ids, control commands and the
//! `#[repr(C)]` argument structs, each with its size and field offsets pinned at compile time.
//!
//! Every number here is a fact of the driver ABI (docs/nvidia-bringup.md sections 1-6, which cite OGKM and
//! tinygrad's `nv_580.py`). Padding is spelled out as `_pad` fields so the structs can derive
//! [`IntoBytes`] (zerocopy refuses implicit padding) and so a layout drift fails to compile.

// Field names are the driver's own (snake_cased); a doc line per field would only restate nvos.h.
#![allow(missing_docs)]

use core::mem::{offset_of, size_of};

use static_assertions::const_assert_eq;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

// ---------------------------------------------------------------------------------------------------------
// ioctl request encoding
// ---------------------------------------------------------------------------------------------------------

/// The ioctl "type" byte of every RM escape: `'F'`.
pub const NV_IOCTL_MAGIC: u8 = b'F';
/// `_IOC_SIZEBITS`: the argument size field of a request number is 14 bits wide. Each RM escape's number
/// is `_IOWR('F', nr, size)` (direction 3 in bits 31:30, size in 29:16, type in 15:8, number in 7:0); the
/// driver reads the size back (`_IOC_SIZE`) to know how much to copy. `ioctl.rs` computes the numbers
/// from the structs.
pub const IOC_SIZE_MASK: u32 = (1 << 14) - 1;

/// Escapes on `/dev/nvidiactl` and `/dev/nvidiaN` (nv-ioctl-numbers.h, nv_escape.h).
pub mod esc {
    /// Card list (ctl fd).
    pub const CARD_INFO: u8 = 0xc8;
    /// Ties a `/dev/nvidiaN` fd to the ctl fd (needed before mmap on it).
    pub const REGISTER_FD: u8 = 0xc9;
    /// Version string check (unused: the version is read with a control call instead).
    pub const CHECK_VERSION_STR: u8 = 0xd2;
    /// Wrap existing pages as an RM memory object (device fd).
    pub const RM_ALLOC_MEMORY: u8 = 0x27;
    /// Free an RM object.
    pub const RM_FREE: u8 = 0x29;
    /// Control call on an RM object.
    pub const RM_CONTROL: u8 = 0x2a;
    /// Allocate an RM object.
    pub const RM_ALLOC: u8 = 0x2b;
    /// Prepare a CPU mapping of a memory object (then mmap the fd given).
    pub const RM_MAP_MEMORY: u8 = 0x4e;
    /// Map a memory object into a GPU virtual address space.
    pub const RM_MAP_MEMORY_DMA: u8 = 0x57;
}

/// UVM requests: plain integers, not `_IOWR`-encoded (uvm_ioctl.h, uvm_linux_ioctl.h).
pub mod uvm_req {
    /// UVM_INITIALIZE.
    pub const INITIALIZE: u32 = 0x3000_0001;
    /// UVM_MM_INITIALIZE.
    pub const MM_INITIALIZE: u32 = 75;
    /// UVM_REGISTER_GPU.
    pub const REGISTER_GPU: u32 = 37;
    /// UVM_REGISTER_GPU_VASPACE.
    pub const REGISTER_GPU_VASPACE: u32 = 25;
    /// UVM_REGISTER_CHANNEL.
    pub const REGISTER_CHANNEL: u32 = 27;
    /// UVM_CREATE_EXTERNAL_RANGE.
    pub const CREATE_EXTERNAL_RANGE: u32 = 73;
    /// UVM_MAP_EXTERNAL_ALLOCATION.
    pub const MAP_EXTERNAL_ALLOCATION: u32 = 33;
    /// UVM_FREE.
    pub const FREE: u32 = 34;
    /// UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS (served on `/dev/nvidia-uvm-tools`).
    pub const TOOLS_EVENT_QUEUE_ENABLE_EVENTS: u32 = 58;
    /// UVM_TOOLS_INIT_EVENT_TRACKER_V2 (served on `/dev/nvidia-uvm-tools`; entries are UvmEventEntry_V2).
    pub const TOOLS_INIT_EVENT_TRACKER_V2: u32 = 76;
}

/// UVM tools event queues (uvm_types.h): the event numbers, entry and control-block layouts.
pub mod uvm_event {
    /// UvmEventTypeFatalFault: a GPU (or CPU) fault UVM could not service, recorded before UVM cancels
    /// the access (which is what makes RM tear the channel down).
    pub const TYPE_FATAL_FAULT: u8 = 6;
    /// Bytes of one UvmEventEntry_V2 in the queue.
    pub const ENTRY_V2_BYTES: usize = 72;
    /// UvmEventNumTypesAll: the length of the control block's `dropped` counters.
    pub const NUM_TYPES_ALL: usize = 64;
    /// UVM_ID_CPU_VALUE: the processor index of the CPU in an event.
    pub const PROCESSOR_CPU: u16 = 0;
}

// ---------------------------------------------------------------------------------------------------------
// Classes and control commands
// ---------------------------------------------------------------------------------------------------------

/// RM class ids of the objects this backend allocates (the engine classes come from `arch`).
pub mod class {
    /// NV01_ROOT_CLIENT.
    pub const ROOT_CLIENT: u32 = 0x41;
    /// NV01_DEVICE_0.
    pub const DEVICE: u32 = 0x80;
    /// NV20_SUBDEVICE_0.
    pub const SUBDEVICE: u32 = 0x2080;
    /// NV01_MEMORY_VIRTUAL (the `hDma` of MAP_MEMORY_DMA).
    pub const MEMORY_VIRTUAL: u32 = 0x70;
    /// NV01_MEMORY_SYSTEM: RM-owned system memory.
    pub const MEMORY_SYSTEM: u32 = 0x3e;
    /// NV1_MEMORY_USER: video memory.
    pub const MEMORY_USER: u32 = 0x40;
    /// NV01_MEMORY_SYSTEM_OS_DESCRIPTOR: existing user pages.
    pub const MEMORY_SYSTEM_OS_DESCRIPTOR: u32 = 0x71;
    /// FERMI_VASPACE_A.
    pub const VASPACE: u32 = 0x90f1;
    /// KEPLER_CHANNEL_GROUP_A (TSG).
    pub const CHANNEL_GROUP: u32 = 0xa06c;
    /// FERMI_CONTEXT_SHARE_A (subcontext).
    pub const CONTEXT_SHARE: u32 = 0x9067;
    /// GT200_DEBUGGER.
    pub const GT200_DEBUGGER: u32 = 0x83de;
}

/// RM control commands.
pub mod ctrl {
    /// NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2 (client).
    pub const GPU_GET_ID_INFO_V2: u32 = 0x205;
    /// NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2 (client).
    pub const SYSTEM_GET_BUILD_VERSION_V2: u32 = 0x13e;
    /// NV0080_CTRL_CMD_GPU_GET_CLASSLIST (device).
    pub const GPU_GET_CLASSLIST: u32 = 0x0080_0201;
    /// NV2080_CTRL_CMD_GR_GET_INFO (subdevice).
    pub const GR_GET_INFO: u32 = 0x2080_1201;
    /// NV2080_CTRL_CMD_GR_GET_SM_TO_GPC_TPC_MAPPINGS (subdevice): carries the enabled SM count.
    pub const GR_GET_SM_TO_GPC_TPC_MAPPINGS: u32 = 0x2080_120f;
    /// NV2080_CTRL_CMD_GPU_GET_GID_INFO (subdevice).
    pub const GPU_GET_GID_INFO: u32 = 0x2080_014a;
    /// NV2080_CTRL_CMD_GPU_GET_NAME_STRING (subdevice).
    pub const GPU_GET_NAME_STRING: u32 = 0x2080_0110;
    /// NV2080_CTRL_CMD_FB_GET_INFO_V2 (subdevice).
    pub const FB_GET_INFO_V2: u32 = 0x2080_1303;
    /// NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN (channel).
    pub const GPFIFO_GET_WORK_SUBMIT_TOKEN: u32 = 0xc36f_0108;
    /// NVA06C_CTRL_CMD_GPFIFO_SCHEDULE (channel group).
    pub const TSG_GPFIFO_SCHEDULE: u32 = 0xa06c_0101;
    /// NVA06C_CTRL_CMD_BIND (channel group): binds the group to an engine's runlist.
    pub const TSG_BIND: u32 = 0xa06c_0102;
    /// NV2080_CTRL_CMD_CE_GET_CAPS_V2 (subdevice).
    pub const CE_GET_CAPS_V2: u32 = 0x2080_2a03;
    /// NV2080_CTRL_CMD_PERF_BOOST (subdevice).
    pub const PERF_BOOST: u32 = 0x2080_200a;
    /// NVA06F_CTRL_CMD_STOP_CHANNEL (channel): disables the channel, preempts it off its engine (or RCs
    /// it when the preempt fails) and removes it from the runlist (ctrla06fgpfifo.h).
    pub const STOP_CHANNEL: u32 = 0xa06f_0112;
    /// NVA06C_CTRL_CMD_PREEMPT (channel group): preempts the group off its engine, waiting for it when
    /// asked (ctrla06c.h). Exported NON_PRIVILEGED and routed to GSP-RM (flags 0x10248 in OGKM 580.105.08
    /// and 595.45.04 g_kernel_channel_group_api_nvoc.c): a user client may call it on its own group.
    pub const TSG_PREEMPT: u32 = 0xa06c_0105;
    /// NV2080_CTRL_CMD_FIFO_DISABLE_CHANNELS (subdevice): disables (and by default preempts) the listed
    /// channels (ctrl2080fifo.h). Exported NON_PRIVILEGED (flags 0x10108 in the same releases'
    /// g_subdevice_nvoc.c); CPU-RM passes it to GSP-RM (kernel_fifo_ctrl.c), refusing only a runlist-preempt
    /// event from a user client, and answers NV_ERR_NOT_SUPPORTED itself without GSP.
    pub const FIFO_DISABLE_CHANNELS: u32 = 0x2080_110b;
}

/// GR_GET_INFO indices (ctrl0080gr.h).
pub mod gr_info {
    /// Enabled TPCs ("shader pipes").
    pub const SHADER_PIPE_COUNT: u32 = 0x07;
    /// SM version, e.g. 0x900 for sm_90.
    pub const SM_VERSION: u32 = 0x0c;
    /// Warps per SM (64 on Hopper).
    pub const MAX_WARPS_PER_SM: u32 = 0x0d;
    /// GPCs of the chip design.
    pub const LITTER_NUM_GPCS: u32 = 0x14;
    /// TPCs per GPC of the chip design.
    pub const LITTER_NUM_TPC_PER_GPC: u32 = 0x17;
    /// SMs per TPC.
    pub const LITTER_NUM_SM_PER_TPC: u32 = 0x20;
}

/// FB_GET_INFO indices (OGKM 580.x `ctrl2080fb.h`, NV2080_CTRL_FB_INFO_INDEX_*; every value is in KiB and
/// is an NVXXXX_CTRL_XXX_INFO `data` word, so [`FbGetInfoV2`]'s layout holds them all).
pub mod fb_info {
    /// BAR1 aperture, KiB (BAR1_SIZE).
    pub const BAR1_SIZE: u32 = 0x05;
    /// Total video memory, KiB (TOTAL_RAM_SIZE).
    pub const TOTAL_RAM_SIZE: u32 = 0x08;
    /// Video memory for user allocations, KiB: total less what RM reserves (HEAP_SIZE).
    pub const HEAP_SIZE: u32 = 0x09;
    /// Video memory not allocated by anyone, KiB, at the time of asking (HEAP_FREE).
    pub const HEAP_FREE: u32 = 0x16;
    /// Unused BAR1 space, KiB, at the time of asking (BAR1_AVAIL_SIZE).
    pub const BAR1_AVAIL_SIZE: u32 = 0x1d;
}

/// Bit fields of NV_MEMORY_ALLOCATION_PARAMS (nvos.h NVOS32_*).
pub mod mem_attr {
    /// attr 24:23 PAGE_SIZE = HUGE.
    pub const ATTR_PAGE_SIZE_HUGE: u32 = 3 << 23;
    /// attr 26:25 LOCATION = PCI (system memory).
    pub const ATTR_LOCATION_PCI: u32 = 1 << 25;
    /// attr 28:27 PHYSICALITY = CONTIGUOUS.
    pub const ATTR_PHYSICALITY_CONTIGUOUS: u32 = 2 << 27;
    /// attr 28:27 PHYSICALITY = ALLOW_NONCONTIGUOUS.
    pub const ATTR_PHYSICALITY_ALLOW_NONCONTIGUOUS: u32 = 3 << 27;
    /// attr2 1:0 ZBC = PREFER_NO_ZBC.
    pub const ATTR2_ZBC_PREFER_NO_ZBC: u32 = 1;
    /// attr2 3:2 GPU_CACHEABLE = YES.
    pub const ATTR2_GPU_CACHEABLE_YES: u32 = 1 << 2;
    /// attr2 3:2 GPU_CACHEABLE = NO.
    pub const ATTR2_GPU_CACHEABLE_NO: u32 = 2 << 2;
    /// attr2 21:20 PAGE_SIZE_HUGE = 2 MiB.
    pub const ATTR2_PAGE_SIZE_HUGE_2MB: u32 = 1 << 20;
    /// NVOS32_ALLOC_FLAGS_IGNORE_BANK_PLACEMENT.
    pub const FLAGS_IGNORE_BANK_PLACEMENT: u32 = 0x1;
    /// NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE.
    pub const FLAGS_ALIGNMENT_FORCE: u32 = 0x100;
    /// NVOS32_ALLOC_FLAGS_MEMORY_HANDLE_PROVIDED.
    pub const FLAGS_MEMORY_HANDLE_PROVIDED: u32 = 0x4000;
    /// NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED.
    pub const FLAGS_MAP_NOT_REQUIRED: u32 = 0x8000;
    /// NVOS32_ALLOC_FLAGS_PERSISTENT_VIDMEM.
    pub const FLAGS_PERSISTENT_VIDMEM: u32 = 0x1_0000;
    /// NVOS32_TYPE_IMAGE.
    pub const TYPE_IMAGE: u32 = 0;
    /// NVOS32_TYPE_NOTIFIER.
    pub const TYPE_NOTIFIER: u32 = 13;
    /// NV_MEMORY_ALLOCATION_PARAMS.format used for plain buffers.
    pub const FORMAT_PITCH: u32 = 6;
}

/// NVOS02 flags for wrapping user pages (class 0x71): noncontiguous (7:4 = 1), CPU-cached (15:12 = 1),
/// no kernel mapping (31:30 = 1).
pub const OS_DESCRIPTOR_FLAGS: u32 = (1 << 4) | (1 << 12) | (1 << 30);

/// NVOS33 flags 25:23 CACHING_TYPE.
pub mod map_caching {
    /// CPU-cached (system memory).
    pub const CACHED: u32 = 0;
    /// Write-combined (BAR1 views of video memory).
    pub const WRITE_COMBINED: u32 = 2 << 23;
}

/// NVOS46 flags of a GPU mapping of memory in 4 KiB pages: PAGE_SIZE 11:8 = 1 (4 KiB), CACHE_SNOOP bit 4,
/// DMA_OFFSET_FIXED bit 15 (the VA is ours).
pub const DMA_MAP_FLAGS: u32 = (1 << 8) | (1 << 4) | (1 << 15);
/// [`DMA_MAP_FLAGS`] for memory allocated in 2 MiB pages: PAGE_SIZE 11:8 = 4 (HUGE), so the GPU's page
/// tables get one entry per 2 MiB. With 4 KiB entries a 1 GiB buffer took 18.6 ms to map (262,144 entries
/// written by RM) and a streaming kernel over it ran at 0.75x of the same kernel under CUDA
/// (docs/perf/2026-12-01-memory-wait-validation.md).
pub const DMA_MAP_FLAGS_HUGE: u32 = (4 << 8) | (1 << 4) | (1 << 15);

/// NV_VASPACE_ALLOCATION_FLAGS: IS_EXTERNALLY_OWNED (bit 3) | ENABLE_PAGE_FAULTING (bit 6).
pub const VASPACE_FLAGS: u32 = (1 << 3) | VASPACE_ENABLE_PAGE_FAULTING;
/// NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING: a kernel's faults are replayable and go to UVM's
/// fault buffer (without it they go to RM alone, and UVM never sees them).
pub const VASPACE_ENABLE_PAGE_FAULTING: u32 = 1 << 6;
/// VA space base and size (libcuda and tinygrad use the same).
pub const VASPACE_BASE: u64 = 0x1000;
/// VA space size.
pub const VASPACE_SIZE: u64 = 0x1_ffff_fb00_0000;
/// Limit of the NV01_MEMORY_VIRTUAL object.
pub const MEMORY_VIRTUAL_LIMIT: u64 = 0x1_ffff_ffff_ffff;
/// NV2080_ENGINE_TYPE_GRAPHICS: the channel group runs on the graphics/compute runlist.
pub const ENGINE_TYPE_GRAPHICS: u32 = 1;

/// NV2080_ENGINE_TYPE_COPY(i) (cl2080_notification.h): COPY0..COPY9 are 0x09..0x12, COPY10.. start at
/// 0x34 (READ open-gpu-kernel-modules).
pub const fn engine_type_copy(i: u32) -> u32 {
    if i < 10 {
        0x09 + i
    } else {
        0x34 + (i - 10)
    }
}

/// NV2080_CTRL_CE_CAPS_CE_GRCE (byte 0, bit 0): the copy engine belongs to the graphics runlist.
pub const CE_CAPS_GRCE: u8 = 0x01;
/// NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC.
pub const CTXSHARE_ASYNC: u32 = 1;
/// GPU_GET_GID_INFO flags: binary format.
pub const GID_FORMAT_BINARY: u32 = 2;
/// UVM gpuMappingType ReadWriteAtomic.
pub const UVM_MAPPING_READ_WRITE_ATOMIC: u32 = 1;

/// Byte offsets inside the USERD control block and the usermode (doorbell) page.
pub mod userd {
    /// GPGet (read-only for the CPU).
    pub const GP_GET: usize = 0x88;
    /// GPPut.
    pub const GP_PUT: usize = 0x8c;
    /// Bytes the USERD block occupies.
    pub const BYTES: u64 = 0x200;
    /// Usermode page: NOTIFY_CHANNEL_PENDING, where the work-submit token is written.
    pub const DOORBELL: usize = 0x90;
    /// Bytes of the usermode mapping.
    pub const USERMODE_BYTES: u64 = 0x10000;
}

// ---------------------------------------------------------------------------------------------------------
// RM call structs (nvos.h)
// ---------------------------------------------------------------------------------------------------------

/// NVOS21_PARAMETERS: RM_ALLOC.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NvOs21 {
    pub h_root: u32,
    pub h_object_parent: u32,
    pub h_object_new: u32,
    pub h_class: u32,
    pub p_alloc_parms: u64,
    pub params_size: u32,
    pub status: u32,
}

/// NVOS54_PARAMETERS: RM_CONTROL.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NvOs54 {
    pub h_client: u32,
    pub h_object: u32,
    pub cmd: u32,
    pub flags: u32,
    pub params: u64,
    pub params_size: u32,
    pub status: u32,
}

/// NVOS00_PARAMETERS: RM_FREE.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NvOs00 {
    pub h_root: u32,
    pub h_object_parent: u32,
    pub h_object_old: u32,
    pub status: u32,
}

/// NVOS33_PARAMETERS: RM_MAP_MEMORY (CPU mapping).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NvOs33 {
    pub h_client: u32,
    pub h_device: u32,
    pub h_memory: u32,
    pub _pad0: u32,
    pub offset: u64,
    pub length: u64,
    pub p_linear_address: u64,
    pub status: u32,
    pub flags: u32,
}

/// `nv_ioctl_nvos33_parameters_with_fd`: NVOS33 plus the fd that will be mmapped.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NvOs33WithFd {
    pub params: NvOs33,
    pub fd: i32,
    pub _pad: u32,
}

/// NVOS46_PARAMETERS: RM_MAP_MEMORY_DMA (GPU mapping).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NvOs46 {
    pub h_client: u32,
    pub h_device: u32,
    pub h_dma: u32,
    pub h_memory: u32,
    pub offset: u64,
    pub length: u64,
    pub flags: u32,
    pub flags2: u32,
    pub kind_override: u32,
    pub _pad0: u32,
    pub dma_offset: u64,
    pub status: u32,
    pub _pad1: u32,
}

/// NVOS02_PARAMETERS: RM_ALLOC_MEMORY (wrap existing pages).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NvOs02 {
    pub h_root: u32,
    pub h_object_parent: u32,
    pub h_object_new: u32,
    pub h_class: u32,
    pub flags: u32,
    pub _pad0: u32,
    pub p_memory: u64,
    pub limit: u64,
    pub status: u32,
    pub _pad1: u32,
}

/// `nv_ioctl_nvos02_parameters_with_fd`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NvOs02WithFd {
    pub params: NvOs02,
    pub fd: i32,
    pub _pad: u32,
}

/// `nv_ioctl_card_info_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CardInfo {
    pub valid: u8,
    pub _pad0: [u8; 3],
    pub pci_domain: u32,
    pub pci_bus: u8,
    pub pci_slot: u8,
    pub pci_function: u8,
    pub _pad1: u8,
    pub pci_vendor_id: u16,
    pub pci_device_id: u16,
    pub gpu_id: u32,
    pub interrupt_line: u16,
    pub _pad2: u16,
    pub reg_address: u64,
    pub reg_size: u64,
    pub fb_address: u64,
    pub fb_size: u64,
    pub minor_number: u32,
    pub dev_name: [u8; 10],
    pub _pad3: [u8; 2],
}

/// Entries of the card list this backend asks for (NV_ESC_CARD_INFO fills one per GPU, `valid` set).
pub const CARD_LIST_ENTRIES: usize = 32;
/// The argument of NV_ESC_CARD_INFO: the whole list is the struct.
pub type CardList = [CardInfo; CARD_LIST_ENTRIES];

/// `nv_ioctl_register_fd_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct RegisterFd {
    pub ctl_fd: i32,
}

/// NvNotification: one entry of the channel error notifier.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NvNotification {
    pub time_stamp: u64,
    pub info32: u32,
    pub info16: u16,
    pub status: u16,
}

// ---------------------------------------------------------------------------------------------------------
// Allocation parameter structs
// ---------------------------------------------------------------------------------------------------------

/// NV0080_ALLOC_PARAMETERS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Nv0080Alloc {
    pub device_id: u32,
    pub h_client_share: u32,
    pub h_target_client: u32,
    pub h_target_device: u32,
    pub flags: u32,
    pub _pad0: u32,
    pub va_space_size: u64,
    pub va_start_internal: u64,
    pub va_limit_internal: u64,
    pub va_mode: u32,
    pub _pad1: u32,
}

/// NV2080_ALLOC_PARAMETERS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Nv2080Alloc {
    pub sub_device_id: u32,
}

/// NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct MemoryVirtualAlloc {
    pub offset: u64,
    pub limit: u64,
    pub h_va_space: u32,
    pub _pad: u32,
}

/// NV_VASPACE_ALLOCATION_PARAMETERS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct VaSpaceAlloc {
    pub index: u32,
    pub flags: u32,
    pub va_size: u64,
    pub va_start_internal: u64,
    pub va_limit_internal: u64,
    pub big_page_size: u32,
    pub _pad0: u32,
    pub va_base: u64,
    pub pasid: u32,
    pub _pad1: u32,
}

/// NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ChannelGroupAlloc {
    pub h_object_error: u32,
    pub h_object_ecc_error: u32,
    pub h_va_space: u32,
    pub engine_type: u32,
    pub b_is_calling_context_vgpu_plugin: u8,
    pub _pad: [u8; 3],
}

/// NV_CTXSHARE_ALLOCATION_PARAMETERS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CtxShareAlloc {
    pub h_va_space: u32,
    pub flags: u32,
    pub subctx_id: u32,
}

/// NV83DE_ALLOC_PARAMETERS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Nv83deAlloc {
    pub h_debugger_client_obsolete: u32,
    pub h_app_client: u32,
    pub h_class_3d_object: u32,
}

/// NV_CHANNEL_ALLOC_PARAMS (the RM-internal memory descriptors from byte 144 on stay zero).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ChannelAlloc {
    pub h_object_error: u32,
    pub h_object_buffer: u32,
    pub gp_fifo_offset: u64,
    pub gp_fifo_entries: u32,
    pub flags: u32,
    pub h_context_share: u32,
    pub h_va_space: u32,
    pub h_userd_memory: [u32; 8],
    pub userd_offset: [u64; 8],
    pub engine_type: u32,
    pub cid: u32,
    pub sub_device_id: u32,
    pub h_object_ecc_error: u32,
    pub _internal: [u8; 224],
}

/// NV_MEMORY_ALLOCATION_PARAMS (classes 0x40 and 0x3e).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct MemoryAlloc {
    pub owner: u32,
    pub type_: u32,
    pub flags: u32,
    pub width: u32,
    pub height: u32,
    pub pitch: i32,
    pub attr: u32,
    pub attr2: u32,
    pub format: u32,
    pub compr_covg: u32,
    pub zcull_covg: u32,
    pub _pad0: u32,
    pub range_lo: u64,
    pub range_hi: u64,
    pub size: u64,
    pub alignment: u64,
    pub offset: u64,
    pub limit: u64,
    pub address: u64,
    pub ctag_offset: u32,
    pub h_va_space: u32,
    pub internal_flags: u32,
    pub tag: u32,
    pub numa_node: i32,
    pub _pad1: u32,
}

// ---------------------------------------------------------------------------------------------------------
// Control parameter structs
// ---------------------------------------------------------------------------------------------------------

/// NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct GpuGetIdInfoV2 {
    pub gpu_id: u32,
    pub gpu_flags: u32,
    pub device_instance: u32,
    pub sub_device_instance: u32,
    pub sli_status: u32,
    pub board_id: u32,
    pub gpu_instance: u32,
    pub numa_id: i32,
}

/// NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct BuildVersionV2 {
    pub driver_version_buffer: [u8; 256],
    pub version_buffer: [u8; 256],
    pub driver_branch: [u8; 256],
    pub title_buffer: [u8; 256],
    pub changelist_number: u32,
    pub official_changelist_number: u32,
}

/// NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct GetClassList {
    pub num_classes: u32,
    pub _pad: u32,
    pub class_list: u64,
}

/// NV2080_CTRL_GR_INFO (and NV2080_CTRL_FB_INFO): an index and the value the driver fills in.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct InfoEntry {
    pub index: u32,
    pub data: u32,
}

/// NV2080_CTRL_GR_ROUTE_INFO.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct GrRouteInfo {
    pub flags: u32,
    pub _pad: u32,
    pub route: u64,
}

/// NV2080_CTRL_GR_GET_INFO_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct GrGetInfo {
    pub gr_info_list_size: u32,
    pub _pad: u32,
    pub gr_info_list: u64,
    pub gr_route_info: GrRouteInfo,
}

/// NV2080_CTRL_GR_GET_SM_TO_GPC_TPC_MAPPINGS_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SmToGpcTpcMappings {
    pub sm_id: [[u32; 2]; 240],
    pub sm_count: u32,
    pub _pad: u32,
    pub gr_route_info: GrRouteInfo,
}

/// NV2080_CTRL_GPU_GET_GID_INFO_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct GetGidInfo {
    pub index: u32,
    pub flags: u32,
    pub length: u32,
    pub data: [u8; 256],
}

/// NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS (flags 0 = ASCII).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct GetNameString {
    pub flags: u32,
    pub name: [u8; 128],
}

/// NV2080_CTRL_FB_GET_INFO_V2_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct FbGetInfoV2 {
    pub fb_info_list_size: u32,
    pub fb_info_list: [InfoEntry; 128],
}

/// NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct WorkSubmitToken {
    pub work_submit_token: u32,
}

/// NV2080_CTRL_CE_GET_CAPS_V2_PARAMS: an engine type in, two bytes of capability bits out.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CeGetCapsV2 {
    pub ce_engine_type: u32,
    pub caps_tbl: [u8; 2],
    pub _pad: [u8; 2],
}

/// NVB0B5_ALLOCATION_PARAMETERS: which copy-engine instance a copy object (and its channel) runs on.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CopyAlloc {
    pub version: u32,
    pub engine_type: u32,
}

/// NV2080_CTRL_PERF_BOOST_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct PerfBoost {
    pub flags: u32,
    pub duration: u32,
}

/// NV2080_CTRL_PERF_BOOST flags and duration (ctrl2080perf.h, READ open-gpu-kernel-modules; the values
/// libcuda and tinygrad send).
pub mod perf_boost {
    /// FLAGS_CMD (1:0) = CLEAR.
    pub const CMD_CLEAR: u32 = 0;
    /// FLAGS_CMD (1:0) = BOOST_TO_MAX.
    pub const CMD_BOOST_TO_MAX: u32 = 2;
    /// FLAGS_CUDA (4:4) = YES.
    pub const CUDA: u32 = 1 << 4;
    /// FLAGS_CUDA_PRIORITY (7:6) = HIGH.
    pub const CUDA_PRIORITY_HIGH: u32 = 1 << 6;
    /// DURATION_INFINITE: until cleared (or the client goes).
    pub const DURATION_INFINITE: u32 = 0xffff_ffff;
}

/// NVA06F_CTRL_BIND_PARAMS (also NVA06C's).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct BindParams {
    pub engine_type: u32,
}

/// NVA06F_CTRL_STOP_CHANNEL_PARAMS (one boolean): `b_immediate` 1 does not wait for the channel to go
/// idle but preempts it off the runlist at once, and RCs it if the preempt times out.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct StopChannel {
    pub b_immediate: u8,
}

/// NVA06C_CTRL_PREEMPT_PARAMS: `b_wait` 1 returns when the preempt completed (or timed out),
/// `b_manual_timeout` 1 uses `timeout_us` (at most NVA06C_CTRL_CMD_PREEMPT_MAX_MANUAL_TIMEOUT_US, 1 s).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct TsgPreempt {
    pub b_wait: u8,
    pub b_manual_timeout: u8,
    pub _pad: [u8; 2],
    pub timeout_us: u32,
}

/// NVA06C_CTRL_CMD_PREEMPT_MAX_MANUAL_TIMEOUT_US.
pub const TSG_PREEMPT_MAX_TIMEOUT_US: u32 = 1_000_000;

/// NV2080_CTRL_FIFO_DISABLE_CHANNELS_MAX_ENTRIES.
pub const DISABLE_CHANNELS_MAX: usize = 64;

/// NV2080_CTRL_FIFO_DISABLE_CHANNELS_PARAMS: `num_channels` (client, channel) pairs. With `b_disable` and
/// `b_only_disable_scheduling` both 1 RM makes sure none of them can be scheduled again, without
/// preempting what runs; `p_runlist_preempt_event` (a kernel event, for kernel clients only) stays 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct FifoDisableChannels {
    pub b_disable: u8,
    pub _pad0: [u8; 3],
    pub num_channels: u32,
    pub b_only_disable_scheduling: u8,
    pub b_rewind_gp_put: u8,
    pub _pad1: [u8; 6],
    pub p_runlist_preempt_event: u64,
    pub h_client_list: [u32; DISABLE_CHANNELS_MAX],
    pub h_channel_list: [u32; DISABLE_CHANNELS_MAX],
}

/// NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS (three booleans, 3 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct GpfifoSchedule {
    pub b_enable: u8,
    pub b_skip_submit: u8,
    pub b_skip_enable: u8,
}

// ---------------------------------------------------------------------------------------------------------
// UVM parameter structs (uvm_ioctl.h); each ends in rmStatus
// ---------------------------------------------------------------------------------------------------------

/// UVM_INITIALIZE_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UvmInitialize {
    pub flags: u64,
    pub rm_status: u32,
    pub _pad: u32,
}

/// UVM_MM_INITIALIZE_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UvmMmInitialize {
    pub uvm_fd: i32,
    pub rm_status: u32,
}

/// UVM_REGISTER_GPU_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UvmRegisterGpu {
    pub gpu_uuid: [u8; 16],
    pub numa_enabled: u8,
    pub _pad: [u8; 3],
    pub numa_node_id: i32,
    pub rm_ctrl_fd: i32,
    pub h_client: u32,
    pub h_smc_part_ref: u32,
    pub rm_status: u32,
}

/// UVM_REGISTER_GPU_VASPACE_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UvmRegisterGpuVaspace {
    pub gpu_uuid: [u8; 16],
    pub rm_ctrl_fd: i32,
    pub h_client: u32,
    pub h_va_space: u32,
    pub rm_status: u32,
}

/// UVM_REGISTER_CHANNEL_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UvmRegisterChannel {
    pub gpu_uuid: [u8; 16],
    pub rm_ctrl_fd: i32,
    pub h_client: u32,
    pub h_channel: u32,
    pub _pad0: u32,
    pub base: u64,
    pub length: u64,
    pub rm_status: u32,
    pub _pad1: u32,
}

/// UVM_CREATE_EXTERNAL_RANGE_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UvmCreateExternalRange {
    pub base: u64,
    pub length: u64,
    pub rm_status: u32,
    pub _pad: u32,
}

/// UvmGpuMappingAttributes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UvmGpuMappingAttributes {
    pub gpu_uuid: [u8; 16],
    pub gpu_mapping_type: u32,
    pub gpu_caching_type: u32,
    pub gpu_format_type: u32,
    pub gpu_element_bits: u32,
    pub gpu_compression_type: u32,
}

/// UVM_MAP_EXTERNAL_ALLOCATION_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UvmMapExternalAllocation {
    pub base: u64,
    pub length: u64,
    pub offset: u64,
    pub per_gpu_attributes: [UvmGpuMappingAttributes; 256],
    pub gpu_attributes_count: u64,
    pub rm_ctrl_fd: i32,
    pub h_client: u32,
    pub h_memory: u32,
    pub rm_status: u32,
}

/// UVM_FREE_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UvmFree {
    pub base: u64,
    pub length: u64,
    pub rm_status: u32,
    pub _pad: u32,
}

/// UVM_TOOLS_INIT_EVENT_TRACKER(_V2)_PARAMS. `queue_buffer` and `control_buffer` are user addresses the
/// driver pins and maps into the kernel until the tools file is closed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UvmToolsInitEventTracker {
    pub queue_buffer: u64,
    /// Entries of the queue (a power of two, at least 2); 0 makes a counter tracker instead.
    pub queue_buffer_size: u64,
    pub control_buffer: u64,
    pub processor: [u8; 16],
    pub all_processors: u32,
    /// The `/dev/nvidia-uvm` fd whose VA space the events come from.
    pub uvm_fd: u32,
    pub rm_status: u32,
    pub _pad: u32,
}

/// UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS_PARAMS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UvmToolsEnableEvents {
    /// Bit `t` enables event type `t`.
    pub event_type_flags: u64,
    pub rm_status: u32,
    pub _pad: u32,
}

/// UvmToolsEventControlData: the queue's indices, shared with the driver (which writes `put_*` and reads
/// `get_*`), and the per-type counts of events dropped on a full queue.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UvmToolsEventControl {
    pub get_ahead: u32,
    pub get_behind: u32,
    pub put_ahead: u32,
    pub put_behind: u32,
    pub dropped: [u64; uvm_event::NUM_TYPES_ALL],
}

/// UvmEventFatalFaultInfo_V2: the start of a queue entry whose first byte is `TYPE_FATAL_FAULT`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UvmEventFatalFault {
    pub event_type: u8,
    /// UvmEventFaultType (1 invalid PDE, 2 invalid PTE, 3 write, ...).
    pub fault_type: u8,
    /// UvmEventMemoryAccessType (1 read, 2 write, 3 atomic, 4 prefetch, ...).
    pub access_type: u8,
    /// UvmEventFatalReason (1 invalid address, 2 invalid permissions, ...).
    pub reason: u8,
    pub processor_index: u16,
    pub _pad: u16,
    /// The faulting GPU virtual address.
    pub address: u64,
    /// `CLOCK_MONOTONIC_RAW` nanoseconds when UVM found the fault fatal.
    pub time_stamp: u64,
}

// ---------------------------------------------------------------------------------------------------------
// Layout pins: sizes and the offsets the fact sheet lists (a drift from the 580 ABI fails the build)
// ---------------------------------------------------------------------------------------------------------

const_assert_eq!(size_of::<NvOs21>(), 32);
const_assert_eq!(size_of::<CeGetCapsV2>(), 8);
const_assert_eq!(size_of::<CopyAlloc>(), 8);
const_assert_eq!(size_of::<BindParams>(), 4);
const_assert_eq!(size_of::<PerfBoost>(), 8);
const_assert_eq!(size_of::<TsgPreempt>(), 8);
const_assert_eq!(offset_of!(TsgPreempt, timeout_us), 4);
const_assert_eq!(size_of::<FifoDisableChannels>(), 536);
const_assert_eq!(offset_of!(FifoDisableChannels, b_only_disable_scheduling), 8);
const_assert_eq!(offset_of!(FifoDisableChannels, p_runlist_preempt_event), 16);
const_assert_eq!(offset_of!(FifoDisableChannels, h_channel_list), 280);
const_assert_eq!(offset_of!(NvOs21, p_alloc_parms), 16);
const_assert_eq!(offset_of!(NvOs21, status), 28);
const_assert_eq!(size_of::<NvOs54>(), 32);
const_assert_eq!(offset_of!(NvOs54, params), 16);
const_assert_eq!(offset_of!(NvOs54, status), 28);
const_assert_eq!(size_of::<NvOs00>(), 16);
const_assert_eq!(offset_of!(NvOs00, status), 12);
const_assert_eq!(size_of::<NvOs33>(), 48);
const_assert_eq!(offset_of!(NvOs33, offset), 16);
const_assert_eq!(offset_of!(NvOs33, p_linear_address), 32);
const_assert_eq!(offset_of!(NvOs33, status), 40);
const_assert_eq!(offset_of!(NvOs33, flags), 44);
const_assert_eq!(size_of::<NvOs33WithFd>(), 56);
const_assert_eq!(offset_of!(NvOs33WithFd, fd), 48);
const_assert_eq!(size_of::<NvOs46>(), 64);
const_assert_eq!(offset_of!(NvOs46, flags), 32);
const_assert_eq!(offset_of!(NvOs46, kind_override), 40);
const_assert_eq!(offset_of!(NvOs46, dma_offset), 48);
const_assert_eq!(offset_of!(NvOs46, status), 56);
const_assert_eq!(size_of::<NvOs02>(), 48);
const_assert_eq!(offset_of!(NvOs02, p_memory), 24);
const_assert_eq!(offset_of!(NvOs02, limit), 32);
const_assert_eq!(offset_of!(NvOs02, status), 40);
const_assert_eq!(size_of::<NvOs02WithFd>(), 56);
const_assert_eq!(offset_of!(NvOs02WithFd, fd), 48);
const_assert_eq!(size_of::<CardInfo>(), 72);
const_assert_eq!(offset_of!(CardInfo, pci_domain), 4);
const_assert_eq!(offset_of!(CardInfo, pci_bus), 8);
const_assert_eq!(offset_of!(CardInfo, pci_vendor_id), 12);
const_assert_eq!(offset_of!(CardInfo, pci_device_id), 14);
const_assert_eq!(offset_of!(CardInfo, gpu_id), 16);
const_assert_eq!(offset_of!(CardInfo, fb_size), 48);
const_assert_eq!(offset_of!(CardInfo, minor_number), 56);
const_assert_eq!(offset_of!(CardInfo, dev_name), 60);
const_assert_eq!(size_of::<CardList>(), 32 * 72);
const_assert_eq!(size_of::<RegisterFd>(), 4);
const_assert_eq!(size_of::<NvNotification>(), 16);
const_assert_eq!(offset_of!(NvNotification, info32), 8);
const_assert_eq!(offset_of!(NvNotification, status), 14);
const_assert_eq!(size_of::<Nv0080Alloc>(), 56);
const_assert_eq!(offset_of!(Nv0080Alloc, va_space_size), 24);
const_assert_eq!(offset_of!(Nv0080Alloc, va_mode), 48);
const_assert_eq!(size_of::<Nv2080Alloc>(), 4);
const_assert_eq!(size_of::<MemoryVirtualAlloc>(), 24);
const_assert_eq!(offset_of!(MemoryVirtualAlloc, h_va_space), 16);
const_assert_eq!(size_of::<VaSpaceAlloc>(), 56);
const_assert_eq!(offset_of!(VaSpaceAlloc, big_page_size), 32);
const_assert_eq!(offset_of!(VaSpaceAlloc, va_base), 40);
const_assert_eq!(offset_of!(VaSpaceAlloc, pasid), 48);
const_assert_eq!(size_of::<ChannelGroupAlloc>(), 20);
const_assert_eq!(offset_of!(ChannelGroupAlloc, b_is_calling_context_vgpu_plugin), 16);
const_assert_eq!(size_of::<CtxShareAlloc>(), 12);
const_assert_eq!(size_of::<Nv83deAlloc>(), 12);
const_assert_eq!(offset_of!(Nv83deAlloc, h_class_3d_object), 8);
const_assert_eq!(size_of::<ChannelAlloc>(), 368);
const_assert_eq!(offset_of!(ChannelAlloc, gp_fifo_offset), 8);
const_assert_eq!(offset_of!(ChannelAlloc, gp_fifo_entries), 16);
const_assert_eq!(offset_of!(ChannelAlloc, h_context_share), 24);
const_assert_eq!(offset_of!(ChannelAlloc, h_userd_memory), 32);
const_assert_eq!(offset_of!(ChannelAlloc, userd_offset), 64);
const_assert_eq!(offset_of!(ChannelAlloc, engine_type), 128);
const_assert_eq!(offset_of!(ChannelAlloc, h_object_ecc_error), 140);
const_assert_eq!(size_of::<MemoryAlloc>(), 128);
const_assert_eq!(offset_of!(MemoryAlloc, attr), 24);
const_assert_eq!(offset_of!(MemoryAlloc, format), 32);
const_assert_eq!(offset_of!(MemoryAlloc, range_lo), 48);
const_assert_eq!(offset_of!(MemoryAlloc, size), 64);
const_assert_eq!(offset_of!(MemoryAlloc, alignment), 72);
const_assert_eq!(offset_of!(MemoryAlloc, limit), 88);
const_assert_eq!(offset_of!(MemoryAlloc, address), 96);
const_assert_eq!(offset_of!(MemoryAlloc, h_va_space), 108);
const_assert_eq!(offset_of!(MemoryAlloc, numa_node), 120);
const_assert_eq!(size_of::<GpuGetIdInfoV2>(), 32);
const_assert_eq!(offset_of!(GpuGetIdInfoV2, device_instance), 8);
const_assert_eq!(size_of::<BuildVersionV2>(), 1032);
const_assert_eq!(offset_of!(BuildVersionV2, changelist_number), 1024);
const_assert_eq!(size_of::<GetClassList>(), 16);
const_assert_eq!(offset_of!(GetClassList, class_list), 8);
const_assert_eq!(size_of::<InfoEntry>(), 8);
const_assert_eq!(size_of::<GrGetInfo>(), 32);
const_assert_eq!(offset_of!(GrGetInfo, gr_info_list), 8);
const_assert_eq!(offset_of!(GrGetInfo, gr_route_info), 16);
const_assert_eq!(size_of::<SmToGpcTpcMappings>(), 1944);
const_assert_eq!(offset_of!(SmToGpcTpcMappings, sm_count), 1920);
const_assert_eq!(size_of::<GetGidInfo>(), 268);
const_assert_eq!(offset_of!(GetGidInfo, data), 12);
const_assert_eq!(size_of::<GetNameString>(), 132);
const_assert_eq!(size_of::<FbGetInfoV2>(), 1028);
const_assert_eq!(size_of::<WorkSubmitToken>(), 4);
const_assert_eq!(size_of::<GpfifoSchedule>(), 3);
const_assert_eq!(size_of::<StopChannel>(), 1);
const_assert_eq!(size_of::<UvmInitialize>(), 16);
const_assert_eq!(offset_of!(UvmInitialize, rm_status), 8);
const_assert_eq!(size_of::<UvmMmInitialize>(), 8);
const_assert_eq!(offset_of!(UvmMmInitialize, rm_status), 4);
const_assert_eq!(size_of::<UvmRegisterGpu>(), 40);
const_assert_eq!(offset_of!(UvmRegisterGpu, numa_node_id), 20);
const_assert_eq!(offset_of!(UvmRegisterGpu, rm_ctrl_fd), 24);
const_assert_eq!(offset_of!(UvmRegisterGpu, rm_status), 36);
const_assert_eq!(size_of::<UvmRegisterGpuVaspace>(), 32);
const_assert_eq!(offset_of!(UvmRegisterGpuVaspace, h_va_space), 24);
const_assert_eq!(offset_of!(UvmRegisterGpuVaspace, rm_status), 28);
const_assert_eq!(size_of::<UvmRegisterChannel>(), 56);
const_assert_eq!(offset_of!(UvmRegisterChannel, h_channel), 24);
const_assert_eq!(offset_of!(UvmRegisterChannel, base), 32);
const_assert_eq!(offset_of!(UvmRegisterChannel, rm_status), 48);
const_assert_eq!(size_of::<UvmCreateExternalRange>(), 24);
const_assert_eq!(offset_of!(UvmCreateExternalRange, rm_status), 16);
const_assert_eq!(size_of::<UvmGpuMappingAttributes>(), 36);
const_assert_eq!(offset_of!(UvmGpuMappingAttributes, gpu_mapping_type), 16);
const_assert_eq!(offset_of!(UvmGpuMappingAttributes, gpu_compression_type), 32);
const_assert_eq!(size_of::<UvmMapExternalAllocation>(), 9264);
const_assert_eq!(offset_of!(UvmMapExternalAllocation, per_gpu_attributes), 24);
const_assert_eq!(offset_of!(UvmMapExternalAllocation, gpu_attributes_count), 9240);
const_assert_eq!(offset_of!(UvmMapExternalAllocation, rm_ctrl_fd), 9248);
const_assert_eq!(offset_of!(UvmMapExternalAllocation, h_memory), 9256);
const_assert_eq!(offset_of!(UvmMapExternalAllocation, rm_status), 9260);
const_assert_eq!(size_of::<UvmFree>(), 24);
const_assert_eq!(offset_of!(UvmFree, rm_status), 16);
// UVM tools: the sizes and offsets a C compile of 580/595's uvm_ioctl.h and uvm_types.h printed.
const_assert_eq!(size_of::<UvmToolsInitEventTracker>(), 56);
const_assert_eq!(offset_of!(UvmToolsInitEventTracker, processor), 24);
const_assert_eq!(offset_of!(UvmToolsInitEventTracker, all_processors), 40);
const_assert_eq!(offset_of!(UvmToolsInitEventTracker, uvm_fd), 44);
const_assert_eq!(offset_of!(UvmToolsInitEventTracker, rm_status), 48);
const_assert_eq!(size_of::<UvmToolsEnableEvents>(), 16);
const_assert_eq!(offset_of!(UvmToolsEnableEvents, rm_status), 8);
const_assert_eq!(size_of::<UvmToolsEventControl>(), 528);
const_assert_eq!(offset_of!(UvmToolsEventControl, put_behind), 12);
const_assert_eq!(size_of::<UvmEventFatalFault>(), 24);
const_assert_eq!(offset_of!(UvmEventFatalFault, reason), 3);
const_assert_eq!(offset_of!(UvmEventFatalFault, processor_index), 4);
const_assert_eq!(offset_of!(UvmEventFatalFault, address), 8);
const_assert_eq!(offset_of!(UvmEventFatalFault, time_stamp), 16);

// ---------------------------------------------------------------------------------------------------------
// NV_STATUS names
// ---------------------------------------------------------------------------------------------------------

/// NV_OK.
pub const NV_OK: u32 = 0;
/// NV_ERR_NO_MEMORY: turned into [`HalError::OutOfMemory`](crate::HalError::OutOfMemory) by allocations.
pub const NV_ERR_NO_MEMORY: u32 = 0x51;
/// NV_ERR_INSUFFICIENT_RESOURCES: also an out-of-memory for allocations.
pub const NV_ERR_INSUFFICIENT_RESOURCES: u32 = 0x1a;

/// The driver's name for an NV_STATUS value (nvstatuscodes.h), `"NV_ERR_UNKNOWN"` for one it never defined.
pub fn status_name(status: u32) -> &'static str {
    match status {
        0x0 => "NV_OK",
        0xffff => "NV_ERR_GENERIC",
        0x1 => "NV_ERR_BROKEN_FB",
        0x2 => "NV_ERR_BUFFER_TOO_SMALL",
        0x3 => "NV_ERR_BUSY_RETRY",
        0x4 => "NV_ERR_CALLBACK_NOT_SCHEDULED",
        0x5 => "NV_ERR_CARD_NOT_PRESENT",
        0x6 => "NV_ERR_CYCLE_DETECTED",
        0x7 => "NV_ERR_DMA_IN_USE",
        0x8 => "NV_ERR_DMA_MEM_NOT_LOCKED",
        0x9 => "NV_ERR_DMA_MEM_NOT_UNLOCKED",
        0xa => "NV_ERR_DUAL_LINK_INUSE",
        0xb => "NV_ERR_ECC_ERROR",
        0xc => "NV_ERR_FIFO_BAD_ACCESS",
        0xd => "NV_ERR_FREQ_NOT_SUPPORTED",
        0xe => "NV_ERR_GPU_DMA_NOT_INITIALIZED",
        0xf => "NV_ERR_GPU_IS_LOST",
        0x10 => "NV_ERR_GPU_IN_FULLCHIP_RESET",
        0x11 => "NV_ERR_GPU_NOT_FULL_POWER",
        0x12 => "NV_ERR_GPU_UUID_NOT_FOUND",
        0x13 => "NV_ERR_HOT_SWITCH",
        0x14 => "NV_ERR_I2C_ERROR",
        0x15 => "NV_ERR_I2C_SPEED_TOO_HIGH",
        0x16 => "NV_ERR_ILLEGAL_ACTION",
        0x17 => "NV_ERR_IN_USE",
        0x18 => "NV_ERR_INFLATE_COMPRESSED_DATA_FAILED",
        0x19 => "NV_ERR_INSERT_DUPLICATE_NAME",
        0x1a => "NV_ERR_INSUFFICIENT_RESOURCES",
        0x1b => "NV_ERR_INSUFFICIENT_PERMISSIONS",
        0x1c => "NV_ERR_INSUFFICIENT_POWER",
        0x1d => "NV_ERR_INVALID_ACCESS_TYPE",
        0x1e => "NV_ERR_INVALID_ADDRESS",
        0x1f => "NV_ERR_INVALID_ARGUMENT",
        0x20 => "NV_ERR_INVALID_BASE",
        0x21 => "NV_ERR_INVALID_CHANNEL",
        0x22 => "NV_ERR_INVALID_CLASS",
        0x23 => "NV_ERR_INVALID_CLIENT",
        0x24 => "NV_ERR_INVALID_COMMAND",
        0x25 => "NV_ERR_INVALID_DATA",
        0x26 => "NV_ERR_INVALID_DEVICE",
        0x27 => "NV_ERR_INVALID_DMA_SPECIFIER",
        0x28 => "NV_ERR_INVALID_EVENT",
        0x29 => "NV_ERR_INVALID_FLAGS",
        0x2a => "NV_ERR_INVALID_FUNCTION",
        0x2b => "NV_ERR_INVALID_HEAP",
        0x2c => "NV_ERR_INVALID_INDEX",
        0x2d => "NV_ERR_INVALID_IRQ_LEVEL",
        0x2e => "NV_ERR_INVALID_LIMIT",
        0x2f => "NV_ERR_INVALID_LOCK_STATE",
        0x30 => "NV_ERR_INVALID_METHOD",
        0x31 => "NV_ERR_INVALID_OBJECT",
        0x32 => "NV_ERR_INVALID_OBJECT_BUFFER",
        0x33 => "NV_ERR_INVALID_OBJECT_HANDLE",
        0x34 => "NV_ERR_INVALID_OBJECT_NEW",
        0x35 => "NV_ERR_INVALID_OBJECT_OLD",
        0x36 => "NV_ERR_INVALID_OBJECT_PARENT",
        0x37 => "NV_ERR_INVALID_OFFSET",
        0x38 => "NV_ERR_INVALID_OPERATION",
        0x39 => "NV_ERR_INVALID_OWNER",
        0x3a => "NV_ERR_INVALID_PARAM_STRUCT",
        0x3b => "NV_ERR_INVALID_PARAMETER",
        0x3c => "NV_ERR_INVALID_PATH",
        0x3d => "NV_ERR_INVALID_POINTER",
        0x3e => "NV_ERR_INVALID_REGISTRY_KEY",
        0x3f => "NV_ERR_INVALID_REQUEST",
        0x40 => "NV_ERR_INVALID_STATE",
        0x41 => "NV_ERR_INVALID_STRING_LENGTH",
        0x42 => "NV_ERR_INVALID_READ",
        0x43 => "NV_ERR_INVALID_WRITE",
        0x44 => "NV_ERR_INVALID_XLATE",
        0x45 => "NV_ERR_IRQ_NOT_FIRING",
        0x46 => "NV_ERR_IRQ_EDGE_TRIGGERED",
        0x47 => "NV_ERR_MEMORY_TRAINING_FAILED",
        0x48 => "NV_ERR_MISMATCHED_SLAVE",
        0x49 => "NV_ERR_MISMATCHED_TARGET",
        0x4a => "NV_ERR_MISSING_TABLE_ENTRY",
        0x4b => "NV_ERR_MODULE_LOAD_FAILED",
        0x4c => "NV_ERR_MORE_DATA_AVAILABLE",
        0x4d => "NV_ERR_MORE_PROCESSING_REQUIRED",
        0x4e => "NV_ERR_MULTIPLE_MEMORY_TYPES",
        0x4f => "NV_ERR_NO_FREE_FIFOS",
        0x50 => "NV_ERR_NO_INTR_PENDING",
        0x51 => "NV_ERR_NO_MEMORY",
        0x52 => "NV_ERR_NO_SUCH_DOMAIN",
        0x53 => "NV_ERR_NO_VALID_PATH",
        0x54 => "NV_ERR_NOT_COMPATIBLE",
        0x55 => "NV_ERR_NOT_READY",
        0x56 => "NV_ERR_NOT_SUPPORTED",
        0x57 => "NV_ERR_OBJECT_NOT_FOUND",
        0x58 => "NV_ERR_OBJECT_TYPE_MISMATCH",
        0x59 => "NV_ERR_OPERATING_SYSTEM",
        0x5a => "NV_ERR_OTHER_DEVICE_FOUND",
        0x5b => "NV_ERR_OUT_OF_RANGE",
        0x5c => "NV_ERR_OVERLAPPING_UVM_COMMIT",
        0x5d => "NV_ERR_PAGE_TABLE_NOT_AVAIL",
        0x5e => "NV_ERR_PID_NOT_FOUND",
        0x5f => "NV_ERR_PROTECTION_FAULT",
        0x60 => "NV_ERR_RC_ERROR",
        0x61 => "NV_ERR_REJECTED_VBIOS",
        0x62 => "NV_ERR_RESET_REQUIRED",
        0x63 => "NV_ERR_STATE_IN_USE",
        0x64 => "NV_ERR_SIGNAL_PENDING",
        0x65 => "NV_ERR_TIMEOUT",
        0x66 => "NV_ERR_TIMEOUT_RETRY",
        0x67 => "NV_ERR_TOO_MANY_PRIMARIES",
        0x68 => "NV_ERR_UVM_ADDRESS_IN_USE",
        0x69 => "NV_ERR_MAX_SESSION_LIMIT_REACHED",
        0x6a => "NV_ERR_LIB_RM_VERSION_MISMATCH",
        0x6b => "NV_ERR_PRIV_SEC_VIOLATION",
        0x6c => "NV_ERR_GPU_IN_DEBUG_MODE",
        0x6d => "NV_ERR_FEATURE_NOT_ENABLED",
        0x6e => "NV_ERR_RESOURCE_LOST",
        0x6f => "NV_ERR_PMU_NOT_READY",
        0x70 => "NV_ERR_FLCN_ERROR",
        0x71 => "NV_ERR_FATAL_ERROR",
        0x72 => "NV_ERR_MEMORY_ERROR",
        0x73 => "NV_ERR_INVALID_LICENSE",
        0x74 => "NV_ERR_NVLINK_INIT_ERROR",
        0x75 => "NV_ERR_NVLINK_MINION_ERROR",
        0x76 => "NV_ERR_NVLINK_CLOCK_ERROR",
        0x77 => "NV_ERR_NVLINK_TRAINING_ERROR",
        0x78 => "NV_ERR_NVLINK_CONFIGURATION_ERROR",
        0x79 => "NV_ERR_RISCV_ERROR",
        0x7a => "NV_ERR_FABRIC_MANAGER_NOT_PRESENT",
        0x7b => "NV_ERR_ALREADY_SIGNALLED",
        0x7c => "NV_ERR_QUEUE_TASK_SLOT_NOT_AVAILABLE",
        0x7d => "NV_ERR_KEY_ROTATION_IN_PROGRESS",
        0x7e => "NV_ERR_TEST_ONLY_CODE_NOT_ENABLED",
        0x7f => "NV_ERR_SECURE_BOOT_FAILED",
        0x80 => "NV_ERR_INSUFFICIENT_ZBC_ENTRY",
        0x81 => "NV_ERR_NVLINK_FABRIC_NOT_READY",
        0x82 => "NV_ERR_NVLINK_FABRIC_FAILURE",
        0x83 => "NV_ERR_GPU_MEMORY_ONLINING_FAILURE",
        0x84 => "NV_ERR_REDUCTION_MANAGER_NOT_AVAILABLE",
        0x85 => "NV_ERR_THRESHOLD_CROSSED",
        0x86 => "NV_ERR_RESOURCE_RETIREMENT_ERROR",
        0x87 => "NV_ERR_FABRIC_STATE_OUT_OF_SYNC",
        0x88 => "NV_ERR_BUFFER_FULL",
        0x89 => "NV_ERR_BUFFER_EMPTY",
        0x8a => "NV_ERR_MC_FLA_OFFSET_TABLE_FULL",
        0x8b => "NV_ERR_DMA_XFER_FAILED",
        0x10001 => "NV_WARN_HOT_SWITCH",
        0x10002 => "NV_WARN_INCORRECT_PERFMON_DATA",
        0x10003 => "NV_WARN_MISMATCHED_SLAVE",
        0x10004 => "NV_WARN_MISMATCHED_TARGET",
        0x10005 => "NV_WARN_MORE_PROCESSING_REQUIRED",
        0x10006 => "NV_WARN_NOTHING_TO_DO",
        0x10007 => "NV_WARN_NULL_OBJECT",
        0x10008 => "NV_WARN_OUT_OF_RANGE",
        0x10009 => "NV_WARN_THRESHOLD_CROSSED",
        _ => "NV_ERR_UNKNOWN",
    }
}
