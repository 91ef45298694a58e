//! The resource manager (RM) side: the root client and the calls made on it. Objects (device, subdevice,
//! VA space, channel group, channel, engines) are RM handles under one client; freeing the client frees
//! every object below it, which is what makes a failed open easy to unwind.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::ptr;

use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::ioctl::{self, os_error};
use super::sys::{self, class, ctrl, esc};
use crate::error::HalError;

/// The control device every RM call goes to.
pub const CTL_PATH: &str = "/dev/nvidiactl";
/// The UVM device.
pub const UVM_PATH: &str = "/dev/nvidia-uvm";

/// Opens a device file read-write, close-on-exec (std's default).
pub(crate) fn open_rw(path: &str, call: &'static str) -> Result<OwnedFd, HalError> {
    File::options().read(true).write(true).open(path).map(OwnedFd::from).map_err(|e| os_error(call, e, path))
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
    pub(crate) ctl: OwnedFd,
    pub(crate) client: u32,
}

impl Rm {
    /// Opens `/dev/nvidiactl` and allocates the root client.
    pub(crate) fn open() -> Result<Rm, HalError> {
        let ctl = open_rw(CTL_PATH, "open /dev/nvidiactl")?;
        let mut a = sys::NvOs21 { h_class: class::ROOT_CLIENT, ..Default::default() };
        // SAFETY: NVOS21 with no parameter block (pointer 0); the driver only writes the struct.
        unsafe { ioctl::rm(ctl.as_raw_fd(), esc::RM_ALLOC, &mut a, "RM_ALLOC root client", "class 0x41") }?;
        Ok(Rm { ctl, client: a.h_object_new })
    }

    pub(crate) fn ctl_fd(&self) -> RawFd {
        self.ctl.as_raw_fd()
    }

    /// Allocates an object of `class` under `parent`, with `params` as its allocation parameters.
    pub(crate) fn alloc<P: IntoBytes + FromBytes>(
        &self,
        parent: u32,
        class: u32,
        params: Option<&mut P>,
        call: &'static str,
    ) -> Result<u32, HalError> {
        let p = params.map_or(ptr::null_mut(), |p| p as *mut P as *mut u8);
        let mut a = sys::NvOs21 {
            h_root: self.client,
            h_object_parent: parent,
            h_class: class,
            p_alloc_parms: p as u64,
            ..Default::default()
        };
        // SAFETY: `p` is null or a live, exclusive P, which is the parameter struct of `class` (the
        // caller chose P for the class); the driver copies the class's parameter size from it.
        unsafe {
            ioctl::rm(self.ctl_fd(), esc::RM_ALLOC, &mut a, call, &format!("class {class:#x} under {parent:#x}"))
        }?;
        Ok(a.h_object_new)
    }

    /// A control call on `object` with a parameter struct that holds no pointers.
    pub(crate) fn control<P: IntoBytes + FromBytes>(
        &self,
        object: u32,
        cmd: u32,
        params: &mut P,
        call: &'static str,
    ) -> Result<(), HalError> {
        // SAFETY: P holds no pointers (this method's contract with its callers in this module), so the
        // driver reads and writes only the struct itself.
        unsafe { self.control_raw(object, cmd, params, call) }
    }

    /// A control call whose parameter struct may hold pointers.
    ///
    /// # Safety
    /// - Every pointer inside `params` is valid for what the driver does with it for `cmd`.
    pub(crate) unsafe fn control_raw<P: IntoBytes + FromBytes>(
        &self,
        object: u32,
        cmd: u32,
        params: &mut P,
        call: &'static str,
    ) -> Result<(), HalError> {
        let mut c = sys::NvOs54 {
            h_client: self.client,
            h_object: object,
            cmd,
            params: params as *mut P as u64,
            params_size: size_of::<P>() as u32,
            ..Default::default()
        };
        // SAFETY: `params` is a live, exclusive P of `params_size` bytes; pointers inside it are the
        // caller's promise.
        unsafe { ioctl::rm(self.ctl_fd(), esc::RM_CONTROL, &mut c, call, &format!("cmd {cmd:#x} on {object:#x}")) }
    }

    /// Frees `object` (and everything below it).
    pub(crate) fn free(&self, parent: u32, object: u32, call: &'static str) -> Result<(), HalError> {
        let mut f = sys::NvOs00 { h_root: self.client, h_object_parent: parent, h_object_old: object, status: 0 };
        // SAFETY: NVOS00 holds no pointers.
        unsafe { ioctl::rm(self.ctl_fd(), esc::RM_FREE, &mut f, call, &format!("object {object:#x}")) }
    }

    /// The kernel driver's version string (SYSTEM_GET_BUILD_VERSION_V2 on the client).
    pub(crate) fn driver_version(&self) -> Result<String, HalError> {
        let mut v = sys::BuildVersionV2::new_zeroed();
        self.control(self.client, ctrl::SYSTEM_GET_BUILD_VERSION_V2, &mut v, "SYSTEM_GET_BUILD_VERSION_V2")?;
        Ok(c_str(&v.driver_version_buffer))
    }

    /// The driver's list of GPUs (only entries with `valid` set).
    pub(crate) fn card_info(&self) -> Result<Vec<sys::CardInfo>, HalError> {
        let mut cards = [sys::CardInfo::default(); 32];
        // SAFETY: the request size is that of the whole array, which the driver fills; no pointers inside.
        unsafe { ioctl::rm_plain(self.ctl_fd(), esc::CARD_INFO, &mut cards, "NV_ESC_CARD_INFO") }?;
        Ok(cards.into_iter().filter(|c| c.valid != 0).collect())
    }

    /// The device instance of GPU `gpu_id` (GPU_GET_ID_INFO_V2).
    pub(crate) fn gpu_id_info(&self, gpu_id: u32) -> Result<sys::GpuGetIdInfoV2, HalError> {
        let mut p = sys::GpuGetIdInfoV2 { gpu_id, ..Default::default() };
        self.control(self.client, ctrl::GPU_GET_ID_INFO_V2, &mut p, "GPU_GET_ID_INFO_V2")?;
        Ok(p)
    }

    /// Opens `/dev/nvidia<minor>` and registers it with the control fd.
    pub(crate) fn open_dev(&self, minor: u32) -> Result<OwnedFd, HalError> {
        let path = format!("/dev/nvidia{minor}");
        let fd = open_rw(&path, "open /dev/nvidiaN")?;
        let mut r = sys::RegisterFd { ctl_fd: self.ctl_fd() };
        // SAFETY: a 4-byte struct with no pointers.
        unsafe { ioctl::rm_plain(fd.as_raw_fd(), esc::REGISTER_FD, &mut r, "NV_ESC_REGISTER_FD") }?;
        Ok(fd)
    }

    /// The classes the device implements (GPU_GET_CLASSLIST, asked twice: the count, then the list).
    pub(crate) fn class_list(&self, device: u32) -> Result<Vec<u32>, HalError> {
        let mut p = sys::GetClassList::default();
        self.control(device, ctrl::GPU_GET_CLASSLIST, &mut p, "GPU_GET_CLASSLIST (count)")?;
        let mut list = vec![0u32; p.num_classes as usize];
        let mut q = sys::GetClassList { num_classes: p.num_classes, _pad: 0, class_list: list.as_mut_ptr() as u64 };
        // SAFETY: `class_list` points at `num_classes` writable u32s that outlive the call.
        unsafe { self.control_raw(device, ctrl::GPU_GET_CLASSLIST, &mut q, "GPU_GET_CLASSLIST") }?;
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
        // SAFETY: `gr_info_list` points at `gr_info_list_size` live entries the driver fills in.
        unsafe { self.control_raw(subdevice, ctrl::GR_GET_INFO, &mut p, "GR_GET_INFO") }?;
        Ok(list.iter().map(|e| e.data).collect())
    }

    /// Enabled SMs, from the SM-to-GPC/TPC map.
    pub(crate) fn sm_count(&self, subdevice: u32) -> Result<u32, HalError> {
        let mut p = sys::SmToGpcTpcMappings::new_zeroed();
        self.control(subdevice, ctrl::GR_GET_SM_TO_GPC_TPC_MAPPINGS, &mut p, "GR_GET_SM_TO_GPC_TPC_MAPPINGS")?;
        Ok(p.sm_count)
    }

    /// The GPU's 16-byte UUID (GPU_GET_GID_INFO, binary form).
    pub(crate) fn gpu_uuid(&self, subdevice: u32) -> Result<[u8; 16], HalError> {
        let mut p = sys::GetGidInfo::new_zeroed();
        p.flags = sys::GID_FORMAT_BINARY;
        p.length = 16;
        self.control(subdevice, ctrl::GPU_GET_GID_INFO, &mut p, "GPU_GET_GID_INFO")?;
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&p.data[..16]);
        Ok(uuid)
    }

    /// The GPU's marketing name.
    pub(crate) fn gpu_name(&self, subdevice: u32) -> Result<String, HalError> {
        let mut p = sys::GetNameString::new_zeroed();
        self.control(subdevice, ctrl::GPU_GET_NAME_STRING, &mut p, "GPU_GET_NAME_STRING")?;
        Ok(c_str(&p.name))
    }

    /// Total video memory in bytes.
    pub(crate) fn fb_total_bytes(&self, subdevice: u32) -> Result<u64, HalError> {
        let mut p = sys::FbGetInfoV2::new_zeroed();
        p.fb_info_list_size = 1;
        p.fb_info_list[0].index = sys::fb_info::TOTAL_RAM_SIZE;
        self.control(subdevice, ctrl::FB_GET_INFO_V2, &mut p, "FB_GET_INFO_V2")?;
        Ok(p.fb_info_list[0].data as u64 * 1024)
    }

    /// The token written to the doorbell to tell the host a channel has new work.
    pub(crate) fn work_submit_token(&self, channel: u32) -> Result<u32, HalError> {
        let mut p = sys::WorkSubmitToken { work_submit_token: u32::MAX };
        self.control(channel, ctrl::GPFIFO_GET_WORK_SUBMIT_TOKEN, &mut p, "GPFIFO_GET_WORK_SUBMIT_TOKEN")?;
        Ok(p.work_submit_token)
    }

    /// Whether copy engine `engine_type` is a graphics copy engine (on the graphics runlist); an error
    /// when the device has no such engine.
    pub(crate) fn ce_is_grce(&self, subdevice: u32, engine_type: u32) -> Result<bool, HalError> {
        let mut p = sys::CeGetCapsV2 { ce_engine_type: engine_type, ..Default::default() };
        self.control(subdevice, ctrl::CE_GET_CAPS_V2, &mut p, "CE_GET_CAPS_V2")?;
        Ok(p.caps_tbl[0] & sys::CE_CAPS_GRCE != 0)
    }

    /// NV2080_CTRL_CMD_PERF_BOOST on `subdevice` with `flags` for `duration` seconds.
    pub(crate) fn perf_boost(&self, subdevice: u32, flags: u32, duration: u32) -> Result<(), HalError> {
        let mut p = sys::PerfBoost { flags, duration };
        self.control(subdevice, ctrl::PERF_BOOST, &mut p, "PERF_BOOST")
    }

    /// Binds a channel group to the runlist of `engine_type`.
    pub(crate) fn bind(&self, tsg: u32, engine_type: u32) -> Result<(), HalError> {
        let mut p = sys::BindParams { engine_type };
        self.control(tsg, ctrl::TSG_BIND, &mut p, "TSG BIND")
    }

    /// Puts a channel group on the runlist.
    pub(crate) fn schedule(&self, tsg: u32) -> Result<(), HalError> {
        let mut p = sys::GpfifoSchedule { b_enable: 1, ..Default::default() };
        self.control(tsg, ctrl::TSG_GPFIFO_SCHEDULE, &mut p, "GPFIFO_SCHEDULE")
    }

    /// Allocates a memory object (class 0x40 video or 0x3e system memory) under `device`. Out of memory
    /// is reported as such, with the size asked for.
    pub(crate) fn alloc_memory(
        &self,
        device: u32,
        class: u32,
        params: &mut sys::MemoryAlloc,
        call: &'static str,
    ) -> Result<u32, HalError> {
        let bytes = params.size;
        self.alloc(device, class, Some(params), call).map_err(|e| match e {
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
        dev_fd: RawFd,
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
                h_class: class::MEMORY_SYSTEM_OS_DESCRIPTOR,
                flags: sys::OS_DESCRIPTOR_FLAGS,
                p_memory: ptr as u64,
                limit: len - 1,
                ..Default::default()
            },
            fd: -1,
            _pad: 0,
        };
        // SAFETY: the driver pins the pages at `p_memory`, which the caller keeps mapped.
        unsafe {
            ioctl::rm(dev_fd, esc::RM_ALLOC_MEMORY, &mut a, "RM_ALLOC_MEMORY host pages", &format!("{len} bytes"))
        }
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
        let fd = match via {
            MapVia::Device(minor) => self.open_dev(minor)?,
            MapVia::Ctl => open_rw(CTL_PATH, "open /dev/nvidiactl for a mapping")?,
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
        // SAFETY: NVOS33 holds no pointers the driver dereferences (pLinearAddress is an output value).
        unsafe {
            ioctl::rm(self.ctl_fd(), esc::RM_MAP_MEMORY, &mut m, call, &format!("memory {memory:#x}, {len} bytes"))
        }?;
        // SAFETY: a fresh shared mapping chosen by the kernel; the driver backs it with the object that
        // RM_MAP_MEMORY just tied to this fd. Nothing else is mapped over.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os_error(call, std::io::Error::last_os_error(), "mmap"));
        }
        // The mapping holds its own reference to the file; the fd is not needed any more.
        drop(fd);
        Ok(p as *mut u8)
    }

    /// Maps `memory` at the fixed GPU address `va` through the virtual-memory object `hdma`.
    pub(crate) fn map_dma(&self, device: u32, hdma: u32, memory: u32, len: u64, va: u64) -> Result<(), HalError> {
        let mut m = sys::NvOs46 {
            h_client: self.client,
            h_device: device,
            h_dma: hdma,
            h_memory: memory,
            length: len,
            flags: sys::DMA_MAP_FLAGS,
            dma_offset: va,
            ..Default::default()
        };
        let ctx = format!("memory {memory:#x} at {va:#x}, {len} bytes");
        // SAFETY: NVOS46 holds no pointers.
        unsafe { ioctl::rm(self.ctl_fd(), esc::RM_MAP_MEMORY_DMA, &mut m, "RM_MAP_MEMORY_DMA", &ctx) }?;
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

/// Unmaps a CPU mapping made by [`Rm::map_cpu`] or an anonymous mmap.
///
/// # Safety
/// - `p..p + len` is exactly one mapping this backend made, and nothing reads or writes it any more.
pub(crate) unsafe fn unmap(p: *mut u8, len: u64) {
    if !p.is_null() {
        // SAFETY: the caller owns the mapping and is done with it.
        unsafe { libc::munmap(p as *mut libc::c_void, len as usize) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_strings_stop_at_the_first_nul() {
        let mut b = [0u8; 16];
        b[..10].copy_from_slice(b"580.159.04");
        assert_eq!(c_str(&b), "580.159.04");
        assert_eq!(c_str(b"NVIDIA H200"), "NVIDIA H200");
        assert_eq!(c_str(&[0; 4]), "");
    }
}
