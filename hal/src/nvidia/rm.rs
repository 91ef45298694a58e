//! The resource manager (RM) side: the root client and the calls made on it. Objects (device, subdevice,
//! VA space, channel group, channel, engines) are RM handles under one client; freeing the client frees
//! every object below it.
//!
//! The two calls whose struct carries a pointer to more parameters are typed here: an allocation takes
//! the parameter struct of its class ([`RmAllocParams`]: `rm.alloc(parent, class::DEVICE, &mut
//! Nv0080Alloc { .. }, ..)` compiles only with the struct `class::DEVICE` takes), and a control call
//! takes the parameter struct of its command ([`RmControl`], the command comes from the struct). So a
//! wrong struct for a class or a command cannot be written in safe code.

use std::os::fd::AsRawFd;
use std::ptr;

use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::ioctl::{self, req, CtlFile, DriverFd, GpuFile};
use super::sys::{self, class as id, ctrl};
use crate::arch::Arch;
use crate::error::HalError;

/// A class id, as the type of the parameter struct its allocation takes (see [`RmAllocParams`]).
pub(crate) trait ClassId: Copy {
    /// The id RM_ALLOC is given.
    fn id(self) -> u32;
}

/// A class whose id is fixed: the struct that names it takes exactly this class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fixed<const ID: u32>;

impl<const ID: u32> ClassId for Fixed<ID> {
    fn id(self) -> u32 {
        ID
    }
}

/// The memory classes that take `NV_MEMORY_ALLOCATION_PARAMS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemoryClass {
    /// NV1_MEMORY_USER: video memory.
    Video,
    /// NV01_MEMORY_SYSTEM: RM-owned system memory.
    System,
}

impl ClassId for MemoryClass {
    fn id(self) -> u32 {
        match self {
            MemoryClass::Video => id::MEMORY_USER,
            MemoryClass::System => id::MEMORY_SYSTEM,
        }
    }
}

/// A GPFIFO channel class of an architecture (`*_CHANNEL_GPFIFO_A/B`), all of which take
/// `NV_CHANNEL_ALLOC_PARAMS`. Only [`GpfifoClass::of`] makes one, from the architecture table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GpfifoClass(u32);

impl GpfifoClass {
    /// `arch`'s channel classes, in its order of preference.
    pub(crate) fn of(arch: &Arch) -> impl Iterator<Item = GpfifoClass> + '_ {
        arch.channel_classes.iter().map(|&c| GpfifoClass(c))
    }
}

impl ClassId for GpfifoClass {
    fn id(self) -> u32 {
        self.0
    }
}

/// A DMA copy class of an architecture (`*_DMA_COPY_A/B`), all of which take
/// `NVB0B5_ALLOCATION_PARAMETERS`. Only [`CopyClass::listed`] makes one, from the architecture table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CopyClass(u32);

impl CopyClass {
    /// `arch`'s preferred copy class among the `classes` a device lists.
    pub(crate) fn listed(arch: &Arch, classes: &[u32]) -> Option<CopyClass> {
        arch.copy_class_in(classes).map(CopyClass)
    }
}

impl ClassId for CopyClass {
    fn id(self) -> u32 {
        self.0
    }
}

/// The classes allocated with a parameter struct of their own, as [`Rm::alloc`] takes them.
pub(crate) mod class {
    use super::{id, Fixed};

    /// NV01_DEVICE_0.
    pub(crate) const DEVICE: Fixed<{ id::DEVICE }> = Fixed;
    /// NV20_SUBDEVICE_0.
    pub(crate) const SUBDEVICE: Fixed<{ id::SUBDEVICE }> = Fixed;
    /// NV01_MEMORY_VIRTUAL.
    pub(crate) const MEMORY_VIRTUAL: Fixed<{ id::MEMORY_VIRTUAL }> = Fixed;
    /// FERMI_VASPACE_A.
    pub(crate) const VASPACE: Fixed<{ id::VASPACE }> = Fixed;
    /// KEPLER_CHANNEL_GROUP_A.
    pub(crate) const CHANNEL_GROUP: Fixed<{ id::CHANNEL_GROUP }> = Fixed;
    /// FERMI_CONTEXT_SHARE_A.
    pub(crate) const CONTEXT_SHARE: Fixed<{ id::CONTEXT_SHARE }> = Fixed;
    /// GT200_DEBUGGER.
    pub(crate) const GT200_DEBUGGER: Fixed<{ id::GT200_DEBUGGER }> = Fixed;
}

/// The parameter struct of an RM_ALLOC, tied to the class or classes that take it.
///
/// RM_ALLOC is sent with `paramsSize` 0, so the driver takes the parameter size from its table of the
/// class being allocated and copies that many bytes from `pAllocParms` and back.
///
/// # Safety
/// For every class id a value of [`RmAllocParams::Class`] can hold, the driver's parameter struct of that
/// class is laid out as `Self` and is `size_of::<Self>()` bytes, and the driver follows no pointer stored
/// in it.
pub(crate) unsafe trait RmAllocParams: IntoBytes + FromBytes {
    /// The class, or the set of classes, that take this struct.
    type Class: ClassId;
}

/// Binds the allocation parameter structs to their classes: `struct => class type`. The line above each
/// names the header that makes the struct the class's (sizes and offsets pinned in sys.rs).
macro_rules! alloc_params {
    ($($params:ty => $class:ty;)*) => {$(
        // SAFETY: the struct is laid out as the parameter struct of every class `$class` can hold (the
        // header named above its line), and none of its fields is a pointer the driver follows: handles,
        // sizes and flags (the channel's RM-internal memory descriptors stay zero).
        unsafe impl RmAllocParams for $params {
            type Class = $class;
        }
    )*};
}

alloc_params! {
    // NV0080_ALLOC_PARAMETERS, NV01_DEVICE_0's (cl0080.h).
    sys::Nv0080Alloc => Fixed<{ id::DEVICE }>;
    // NV2080_ALLOC_PARAMETERS, NV20_SUBDEVICE_0's (cl2080.h).
    sys::Nv2080Alloc => Fixed<{ id::SUBDEVICE }>;
    // NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS, NV01_MEMORY_VIRTUAL's (nvos.h).
    sys::MemoryVirtualAlloc => Fixed<{ id::MEMORY_VIRTUAL }>;
    // NV_VASPACE_ALLOCATION_PARAMETERS, FERMI_VASPACE_A's (nvos.h).
    sys::VaSpaceAlloc => Fixed<{ id::VASPACE }>;
    // NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS, KEPLER_CHANNEL_GROUP_A's (cla06c.h).
    sys::ChannelGroupAlloc => Fixed<{ id::CHANNEL_GROUP }>;
    // NV_CTXSHARE_ALLOCATION_PARAMETERS, FERMI_CONTEXT_SHARE_A's (cl9067.h).
    sys::CtxShareAlloc => Fixed<{ id::CONTEXT_SHARE }>;
    // NV83DE_ALLOC_PARAMETERS, GT200_DEBUGGER's (cl83de.h).
    sys::Nv83deAlloc => Fixed<{ id::GT200_DEBUGGER }>;
    // NV_MEMORY_ALLOCATION_PARAMS, both NV1_MEMORY_USER's and NV01_MEMORY_SYSTEM's (nvos.h).
    sys::MemoryAlloc => MemoryClass;
    // NV_CHANNEL_ALLOC_PARAMS, every GPFIFO channel class's (alloc_channel.h); a GpfifoClass holds only the
    // ids of an Arch's channel_classes, which are GPFIFO channel classes.
    sys::ChannelAlloc => GpfifoClass;
    // NVB0B5_ALLOCATION_PARAMETERS, every DMA copy class's (clb0b5sw.h); a CopyClass holds only the ids of
    // an Arch's copy_classes, which are DMA copy classes.
    sys::CopyAlloc => CopyClass;
}

/// The parameter struct of an RM control command, tied to the command.
///
/// # Safety
/// `Self` is laid out as the driver's parameter struct of [`RmControl::CMD`] (RM_CONTROL passes
/// `size_of::<Self>()` as `paramsSize`, and the driver copies that many bytes in and back).
pub(crate) unsafe trait RmControl: IntoBytes + FromBytes {
    /// The control command.
    const CMD: u32;
}

/// A control command whose parameter struct holds no pointer the driver follows.
///
/// # Safety
/// For [`RmControl::CMD`], the driver dereferences no value stored in `Self`.
pub(crate) unsafe trait PlainControl: RmControl {}

/// Binds the control parameter structs to their commands: `struct => command [, plain]`.
macro_rules! controls {
    ($($params:ty => $cmd:expr $(, $plain:ident)?;)*) => {$(
        // SAFETY: each struct is laid out as its command's parameters struct in the ctrl*.h header the
        // command's doc line in sys.rs names (sizes pinned in sys.rs).
        unsafe impl RmControl for $params {
            const CMD: u32 = $cmd;
        }
        $(controls!(@$plain $params);)?
    )*};
    (@plain $params:ty) => {
        // SAFETY: the struct holds ids, sizes, flags and inline arrays only.
        unsafe impl PlainControl for $params {}
    };
}

controls! {
    sys::GpuGetIdInfoV2 => ctrl::GPU_GET_ID_INFO_V2, plain;
    sys::BuildVersionV2 => ctrl::SYSTEM_GET_BUILD_VERSION_V2, plain;
    // `class_list` points at `num_classes` u32s the driver fills in.
    sys::GetClassList => ctrl::GPU_GET_CLASSLIST;
    // `gr_info_list` points at `gr_info_list_size` entries the driver fills in.
    sys::GrGetInfo => ctrl::GR_GET_INFO;
    sys::SmToGpcTpcMappings => ctrl::GR_GET_SM_TO_GPC_TPC_MAPPINGS, plain;
    sys::GetGidInfo => ctrl::GPU_GET_GID_INFO, plain;
    sys::GetNameString => ctrl::GPU_GET_NAME_STRING, plain;
    sys::FbGetInfoV2 => ctrl::FB_GET_INFO_V2, plain;
    sys::WorkSubmitToken => ctrl::GPFIFO_GET_WORK_SUBMIT_TOKEN, plain;
    sys::GpfifoSchedule => ctrl::TSG_GPFIFO_SCHEDULE, plain;
    sys::StopChannel => ctrl::STOP_CHANNEL, plain;
    sys::TsgPreempt => ctrl::TSG_PREEMPT, plain;
    // `p_runlist_preempt_event` is a kernel event the driver signals when it is not 0.
    sys::FifoDisableChannels => ctrl::FIFO_DISABLE_CHANNELS;
    sys::BindParams => ctrl::TSG_BIND, plain;
    sys::CeGetCapsV2 => ctrl::CE_GET_CAPS_V2, plain;
    sys::PerfBoost => ctrl::PERF_BOOST, plain;
}

/// Where a CPU mapping is made: video memory and the usermode page are mapped through a registered
/// `/dev/nvidiaN` fd, RM-owned system memory through a fresh `/dev/nvidiactl` fd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapVia {
    /// A fresh `/dev/nvidia<minor>` fd, registered with the control fd.
    Device(u32),
    /// A fresh `/dev/nvidiactl` fd.
    Ctl,
}

/// The root client on an open control fd.
pub(crate) struct Rm {
    pub(crate) ctl: DriverFd<CtlFile>,
    pub(crate) client: u32,
}

impl Rm {
    /// Opens `/dev/nvidiactl` and allocates the root client.
    pub(crate) fn open() -> Result<Rm, HalError> {
        let ctl = DriverFd::open_ctl("open /dev/nvidiactl")?;
        let mut a = sys::NvOs21 { h_class: id::ROOT_CLIENT, ..Default::default() };
        // SAFETY: NVOS21's one pointer, the parameter block, is null: the root client takes none.
        unsafe { ioctl::send::<req::RmAlloc>(&ctl, &mut a, "RM_ALLOC root client", "class 0x41") }?;
        Ok(Rm { ctl, client: a.h_object_new })
    }

    /// A client on `/dev/null` (tests: every request is refused with ENOTTY).
    #[cfg(test)]
    pub(crate) fn null() -> Rm {
        Rm { ctl: DriverFd::null(), client: 1 }
    }

    /// The control fd's number, for the UVM calls that name it.
    pub(crate) fn ctl_fd(&self) -> i32 {
        self.ctl.raw()
    }

    /// Allocates an object of `class` under `parent` with `params`, the parameter struct of that class.
    pub(crate) fn alloc<P: RmAllocParams>(
        &self,
        parent: u32,
        class: P::Class,
        params: &mut P,
        call: &'static str,
    ) -> Result<u32, HalError> {
        // SAFETY: `params` is a live, exclusive P, and P is the parameter struct of every class a
        // `P::Class` holds (`RmAllocParams`), so the class's parameter size is P's and the driver follows no
        // pointer inside it.
        unsafe { self.alloc_raw(parent, class.id(), (params as *mut P).cast(), call) }
    }

    /// Allocates an object of `class` under `parent` without a parameter block (the engine objects and
    /// the usermode page take none).
    pub(crate) fn alloc_bare(&self, parent: u32, class: u32, call: &'static str) -> Result<u32, HalError> {
        // SAFETY: a null parameter pointer: the driver reads no parameter block for any class.
        unsafe { self.alloc_raw(parent, class, ptr::null_mut(), call) }
    }

    /// # Safety
    /// - `params` is null, or points to a live, exclusive parameter struct of `class` holding no pointer
    ///   the driver follows.
    unsafe fn alloc_raw(&self, parent: u32, class: u32, params: *mut u8, call: &'static str) -> Result<u32, HalError> {
        let mut a = sys::NvOs21 {
            h_root: self.client,
            h_object_parent: parent,
            h_class: class,
            p_alloc_parms: params as u64,
            ..Default::default()
        };
        // SAFETY: NVOS21's one pointer is `p_alloc_parms`, which the caller vouches for (null, or the
        // class's own parameter struct); `paramsSize` 0 makes the driver take the class's size.
        unsafe {
            ioctl::send::<req::RmAlloc>(&self.ctl, &mut a, call, &format!("class {class:#x} under {parent:#x}"))
        }?;
        Ok(a.h_object_new)
    }

    /// A control call on `object` with a parameter struct that holds no pointers.
    pub(crate) fn control<P: PlainControl>(
        &self,
        object: u32,
        params: &mut P,
        call: &'static str,
    ) -> Result<(), HalError> {
        // SAFETY: P's command follows no pointer inside it (`PlainControl`).
        unsafe { self.control_with_pointers(object, params, call) }
    }

    /// A control call whose parameter struct may hold pointers.
    ///
    /// # Safety
    /// - Every pointer inside `params` is valid for what the driver does through it for `P::CMD`.
    pub(crate) unsafe fn control_with_pointers<P: RmControl>(
        &self,
        object: u32,
        params: &mut P,
        call: &'static str,
    ) -> Result<(), HalError> {
        let cmd = P::CMD;
        let mut c = sys::NvOs54 {
            h_client: self.client,
            h_object: object,
            cmd,
            params: params as *mut P as u64,
            params_size: size_of::<P>() as u32,
            ..Default::default()
        };
        // SAFETY: NVOS54's one pointer is `params`: a live, exclusive P of `params_size` bytes, which is
        // `cmd`'s parameter struct (`RmControl`); pointers inside it are the caller's promise.
        unsafe { ioctl::send::<req::RmControl>(&self.ctl, &mut c, call, &format!("cmd {cmd:#x} on {object:#x}")) }
    }

    /// Frees `object` (and everything below it).
    pub(crate) fn free(&self, parent: u32, object: u32, call: &'static str) -> Result<(), HalError> {
        let mut f = sys::NvOs00 { h_root: self.client, h_object_parent: parent, h_object_old: object, status: 0 };
        ioctl::send_plain::<req::RmFree>(&self.ctl, &mut f, call, &format!("object {object:#x}"))
    }

    /// The kernel driver's version string (SYSTEM_GET_BUILD_VERSION_V2 on the client).
    pub(crate) fn driver_version(&self) -> Result<String, HalError> {
        let mut v = sys::BuildVersionV2::new_zeroed();
        self.control(self.client, &mut v, "SYSTEM_GET_BUILD_VERSION_V2")?;
        Ok(c_str(&v.driver_version_buffer))
    }

    /// The driver's list of GPUs (only entries with `valid` set).
    pub(crate) fn card_info(&self) -> Result<Vec<sys::CardInfo>, HalError> {
        let mut cards: sys::CardList = [sys::CardInfo::default(); sys::CARD_LIST_ENTRIES];
        ioctl::send_plain::<req::CardInfo>(&self.ctl, &mut cards, "NV_ESC_CARD_INFO", "")?;
        Ok(cards.into_iter().filter(|c| c.valid != 0).collect())
    }

    /// The device instance of GPU `gpu_id` (GPU_GET_ID_INFO_V2).
    pub(crate) fn gpu_id_info(&self, gpu_id: u32) -> Result<sys::GpuGetIdInfoV2, HalError> {
        let mut p = sys::GpuGetIdInfoV2 { gpu_id, ..Default::default() };
        self.control(self.client, &mut p, "GPU_GET_ID_INFO_V2")?;
        Ok(p)
    }

    /// Opens `/dev/nvidia<minor>` and registers it with the control fd.
    pub(crate) fn open_dev(&self, minor: u32) -> Result<DriverFd<GpuFile>, HalError> {
        let fd = DriverFd::open_gpu(minor)?;
        let mut r = sys::RegisterFd { ctl_fd: self.ctl_fd() };
        ioctl::send_plain::<req::RegisterFd>(&fd, &mut r, "NV_ESC_REGISTER_FD", "")?;
        Ok(fd)
    }

    /// The classes the device implements (GPU_GET_CLASSLIST, asked twice: the count, then the list).
    pub(crate) fn class_list(&self, device: u32) -> Result<Vec<u32>, HalError> {
        let mut p = sys::GetClassList::default();
        // SAFETY: `class_list` is null, which makes the driver write the count only.
        unsafe { self.control_with_pointers(device, &mut p, "GPU_GET_CLASSLIST (count)") }?;
        let mut list = vec![0u32; p.num_classes as usize];
        let mut q = sys::GetClassList { num_classes: p.num_classes, _pad: 0, class_list: list.as_mut_ptr() as u64 };
        // SAFETY: `class_list` points at `num_classes` writable u32s that outlive the call, which is all the
        // driver writes through it.
        unsafe { self.control_with_pointers(device, &mut q, "GPU_GET_CLASSLIST") }?;
        list.truncate(q.num_classes as usize);
        Ok(list)
    }

    /// GR_GET_INFO for each index, in order.
    pub(crate) fn gr_info(&self, subdevice: u32, indices: &[u32]) -> Result<Vec<u32>, HalError> {
        let mut list: Vec<sys::InfoEntry> = indices.iter().map(|&index| sys::InfoEntry { index, data: 0 }).collect();
        let mut p = sys::GrGetInfo {
            gr_info_list_size: list.len() as u32,
            gr_info_list: list.as_mut_ptr() as u64,
            ..Default::default()
        };
        // SAFETY: `gr_info_list` points at `gr_info_list_size` live entries the driver reads and fills in,
        // and outlives the call.
        unsafe { self.control_with_pointers(subdevice, &mut p, "GR_GET_INFO") }?;
        Ok(list.iter().map(|e| e.data).collect())
    }

    /// Enabled SMs, from the SM-to-GPC/TPC map.
    pub(crate) fn sm_count(&self, subdevice: u32) -> Result<u32, HalError> {
        let mut p = sys::SmToGpcTpcMappings::new_zeroed();
        self.control(subdevice, &mut p, "GR_GET_SM_TO_GPC_TPC_MAPPINGS")?;
        Ok(p.sm_count)
    }

    /// The GPU's 16-byte UUID (GPU_GET_GID_INFO, binary form).
    pub(crate) fn gpu_uuid(&self, subdevice: u32) -> Result<[u8; 16], HalError> {
        let mut p = sys::GetGidInfo::new_zeroed();
        p.flags = sys::GID_FORMAT_BINARY;
        p.length = 16;
        self.control(subdevice, &mut p, "GPU_GET_GID_INFO")?;
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&p.data[..16]);
        Ok(uuid)
    }

    /// The GPU's marketing name.
    pub(crate) fn gpu_name(&self, subdevice: u32) -> Result<String, HalError> {
        let mut p = sys::GetNameString::new_zeroed();
        self.control(subdevice, &mut p, "GPU_GET_NAME_STRING")?;
        Ok(c_str(&p.name))
    }

    /// Total video memory in bytes.
    pub(crate) fn fb_total_bytes(&self, subdevice: u32) -> Result<u64, HalError> {
        Ok(self.fb_info(subdevice, [sys::fb_info::TOTAL_RAM_SIZE])?[0])
    }

    /// FB_GET_INFO_V2 for each index (`sys::fb_info`, all in KiB), in bytes, in order.
    pub(crate) fn fb_info<const N: usize>(&self, subdevice: u32, indices: [u32; N]) -> Result<[u64; N], HalError> {
        let mut p = sys::FbGetInfoV2::new_zeroed();
        const { assert!(N <= 128, "FB_GET_INFO_V2 takes at most NV2080_CTRL_FB_INFO_MAX_LIST_SIZE entries") };
        p.fb_info_list_size = N as u32;
        for (e, index) in p.fb_info_list.iter_mut().zip(indices) {
            e.index = index;
        }
        self.control(subdevice, &mut p, "FB_GET_INFO_V2")?;
        Ok(core::array::from_fn(|i| p.fb_info_list[i].data as u64 * 1024))
    }

    /// The token written to the doorbell to tell the host a channel has new work.
    pub(crate) fn work_submit_token(&self, channel: u32) -> Result<u32, HalError> {
        let mut p = sys::WorkSubmitToken { work_submit_token: u32::MAX };
        self.control(channel, &mut p, "GPFIFO_GET_WORK_SUBMIT_TOKEN")?;
        Ok(p.work_submit_token)
    }

    /// Whether copy engine `engine_type` is a graphics copy engine (on the graphics runlist); an error
    /// when the device has no such engine.
    pub(crate) fn ce_is_grce(&self, subdevice: u32, engine_type: u32) -> Result<bool, HalError> {
        let mut p = sys::CeGetCapsV2 { ce_engine_type: engine_type, ..Default::default() };
        self.control(subdevice, &mut p, "CE_GET_CAPS_V2")?;
        Ok(p.caps_tbl[0] & sys::CE_CAPS_GRCE != 0)
    }

    /// NV2080_CTRL_CMD_PERF_BOOST on `subdevice` with `flags` for `duration` seconds.
    pub(crate) fn perf_boost(&self, subdevice: u32, flags: u32, duration: u32) -> Result<(), HalError> {
        let mut p = sys::PerfBoost { flags, duration };
        self.control(subdevice, &mut p, "PERF_BOOST")
    }

    /// Binds a channel group to the runlist of `engine_type`.
    pub(crate) fn bind(&self, tsg: u32, engine_type: u32) -> Result<(), HalError> {
        let mut p = sys::BindParams { engine_type };
        self.control(tsg, &mut p, "TSG BIND")
    }

    /// Puts a channel group on the runlist.
    pub(crate) fn schedule(&self, tsg: u32) -> Result<(), HalError> {
        let mut p = sys::GpfifoSchedule { b_enable: 1, ..Default::default() };
        self.control(tsg, &mut p, "GPFIFO_SCHEDULE")
    }

    /// Stops `channel` at once: disabled, preempted off its engine (RC'd when the preempt times out) and
    /// off the runlist (NVA06F_CTRL_CMD_STOP_CHANNEL with bImmediate). RM then writes
    /// ROBUST_CHANNEL_PREEMPTIVE_REMOVAL (Xid 45) to the channel's error notifier.
    pub(crate) fn stop_channel(&self, channel: u32) -> Result<(), HalError> {
        let mut p = sys::StopChannel { b_immediate: 1 };
        self.control(channel, &mut p, "NVA06F_CTRL_CMD_STOP_CHANNEL")
    }

    /// Preempts channel group `tsg` off its engine and waits up to `timeout_us` for it
    /// (NVA06C_CTRL_CMD_PREEMPT, bWait with a manual timeout).
    pub(crate) fn preempt_group(&self, tsg: u32, timeout_us: u32) -> Result<(), HalError> {
        let timeout_us = timeout_us.min(sys::TSG_PREEMPT_MAX_TIMEOUT_US);
        let mut p = sys::TsgPreempt { b_wait: 1, b_manual_timeout: 1, timeout_us, ..Default::default() };
        self.control(tsg, &mut p, "NVA06C_CTRL_CMD_PREEMPT")
    }

    /// Makes sure none of this client's `channels` (at most 64) can be scheduled again, without waiting
    /// for what runs on them (NV2080_CTRL_CMD_FIFO_DISABLE_CHANNELS with bOnlyDisableScheduling).
    pub(crate) fn disable_scheduling(&self, subdevice: u32, channels: &[u32]) -> Result<(), HalError> {
        debug_assert!(channels.len() <= sys::DISABLE_CHANNELS_MAX);
        let mut p = sys::FifoDisableChannels::new_zeroed();
        p.b_disable = 1;
        p.b_only_disable_scheduling = 1;
        for (i, &c) in channels.iter().take(sys::DISABLE_CHANNELS_MAX).enumerate() {
            p.h_client_list[i] = self.client;
            p.h_channel_list[i] = c;
            p.num_channels = i as u32 + 1;
        }
        // SAFETY: the struct's one pointer, `p_runlist_preempt_event`, is 0 (`new_zeroed`): RM follows it
        // only when it is not (and refuses it from a user client).
        unsafe { self.control_with_pointers(subdevice, &mut p, "NV2080_CTRL_CMD_FIFO_DISABLE_CHANNELS") }
    }

    /// Allocates a memory object (class 0x40 video or 0x3e system memory) under `device`. Out of memory
    /// is reported as such, with the size asked for.
    pub(crate) fn alloc_memory(
        &self,
        device: u32,
        class: MemoryClass,
        params: &mut sys::MemoryAlloc,
        call: &'static str,
    ) -> Result<u32, HalError> {
        let bytes = params.size;
        self.alloc(device, class, params, call).map_err(|e| match e {
            HalError::Driver { status: sys::NV_ERR_NO_MEMORY | sys::NV_ERR_INSUFFICIENT_RESOURCES, .. } => {
                HalError::OutOfMemory { bytes }
            }
            e => e,
        })
    }

    /// Wraps `len` bytes of this process's pages at `ptr` as memory object `handle` (class 0x71).
    ///
    /// # Safety
    /// - `ptr..ptr + len` is a page-aligned, mapped range of this process that stays mapped until the
    ///   object is freed (the driver pins its pages).
    pub(crate) unsafe fn alloc_os_descriptor(
        &self,
        dev: &DriverFd<GpuFile>,
        device: u32,
        handle: u32,
        ptr: *mut u8,
        len: u64,
    ) -> Result<(), HalError> {
        let mut a = sys::NvOs02WithFd {
            params: sys::NvOs02 {
                h_root: self.client,
                h_object_parent: device,
                h_object_new: handle,
                h_class: id::MEMORY_SYSTEM_OS_DESCRIPTOR,
                flags: sys::OS_DESCRIPTOR_FLAGS,
                p_memory: ptr as u64,
                limit: len - 1,
                ..Default::default()
            },
            fd: -1,
            _pad: 0,
        };
        // SAFETY: NVOS02's one pointer is `p_memory`: the driver pins the `limit + 1` bytes of pages there,
        // which the caller keeps mapped until the object is freed.
        unsafe { ioctl::send::<req::RmAllocMemory>(dev, &mut a, "RM_ALLOC_MEMORY host pages", &format!("{len} bytes")) }
            .map_err(|e| match e {
                HalError::Driver { status: sys::NV_ERR_NO_MEMORY, .. } => HalError::OutOfMemory { bytes: len },
                e => e,
            })
    }

    /// Maps memory object `memory` for the CPU with NVOS33 `flags` (caching type), through a fresh fd of
    /// the kind `via` says, and returns the mapping.
    pub(crate) fn map_cpu(
        &self,
        device: u32,
        memory: u32,
        len: u64,
        flags: u32,
        via: MapVia,
        call: &'static str,
    ) -> Result<*mut u8, HalError> {
        // Either file serves the mapping; only its fd number goes into the struct, and mmap maps it.
        let fd = match via {
            MapVia::Device(minor) => self.open_dev(minor)?.into_owned(),
            MapVia::Ctl => DriverFd::open_ctl("open /dev/nvidiactl for a mapping")?.into_owned(),
        };
        let mut m = sys::NvOs33WithFd {
            params: sys::NvOs33 {
                h_client: self.client,
                h_device: device,
                h_memory: memory,
                length: len,
                flags,
                ..Default::default()
            },
            fd: fd.as_raw_fd(),
            _pad: 0,
        };
        let ctx = format!("memory {memory:#x}, {len} bytes");
        ioctl::send_plain::<req::RmMapMemory>(&self.ctl, &mut m, call, &ctx)?;
        // SAFETY: RM_MAP_MEMORY just tied the object to this fd for a mapping of `len` bytes.
        let p = unsafe {
            ioctl::map(len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, Some(fd.as_raw_fd()), call)
        }?;
        // The mapping holds its own reference to the file; the fd is not needed any more.
        drop(fd);
        Ok(p)
    }

    /// Maps `memory` at the fixed GPU address `va` through the virtual-memory object `hdma`.
    pub(crate) fn map_dma(
        &self,
        device: u32,
        hdma: u32,
        memory: u32,
        len: u64,
        va: u64,
        huge: bool,
    ) -> Result<(), HalError> {
        let mut m = sys::NvOs46 {
            h_client: self.client,
            h_device: device,
            h_dma: hdma,
            h_memory: memory,
            length: len,
            flags: if huge { sys::DMA_MAP_FLAGS_HUGE } else { sys::DMA_MAP_FLAGS },
            dma_offset: va,
            ..Default::default()
        };
        let ctx = format!("memory {memory:#x} at {va:#x}, {len} bytes");
        ioctl::send_plain::<req::RmMapMemoryDma>(&self.ctl, &mut m, "RM_MAP_MEMORY_DMA", &ctx)?;
        if m.dma_offset != va {
            return Err(HalError::Driver {
                call: "RM_MAP_MEMORY_DMA",
                status: 0,
                detail: format!("asked for {va:#x}, the driver mapped at {:#x}", m.dma_offset),
            });
        }
        Ok(())
    }
}

/// The text before the first NUL of a driver string buffer.
pub(crate) fn c_str(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).trim().to_owned()
}

pub(crate) use super::ioctl::unmap;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_tokens_carry_the_ids_of_the_classes_they_name() {
        use crate::arch::{BLACKWELL_GB10, HOPPER};
        assert_eq!(class::DEVICE.id(), 0x80);
        assert_eq!(class::SUBDEVICE.id(), 0x2080);
        assert_eq!(class::CHANNEL_GROUP.id(), 0xa06c);
        assert_eq!((MemoryClass::Video.id(), MemoryClass::System.id()), (0x40, 0x3e));
        // The arch families hold exactly the table's ids, in its order of preference.
        let ids = |a| GpfifoClass::of(a).map(ClassId::id).collect::<Vec<_>>();
        assert_eq!(ids(&HOPPER), HOPPER.channel_classes);
        assert_eq!(ids(&BLACKWELL_GB10), BLACKWELL_GB10.channel_classes);
        assert_eq!(CopyClass::listed(&HOPPER, &[0x1, 0xc8b5]).map(ClassId::id), Some(0xc8b5));
        assert_eq!(CopyClass::listed(&HOPPER, &[0xc9b5]), None, "a class the arch does not list is no copy class");
    }

    #[test]
    fn driver_strings_stop_at_the_first_nul() {
        let mut b = [0u8; 16];
        b[..10].copy_from_slice(b"580.159.04");
        assert_eq!(c_str(&b), "580.159.04");
        assert_eq!(c_str(b"NVIDIA H200"), "NVIDIA H200");
        assert_eq!(c_str(&[0; 4]), "");
    }
}
