//! The UVM side: `/dev/nvidia-uvm` owns the GPU page tables of an externally owned VA space, so every GPU
//! mapping of this backend goes through it (an external range, then the mapping of an RM memory object
//! into it).

use std::os::fd::RawFd;

use zerocopy::FromZeros;

use super::ioctl::{self, req, DriverFd, UvmFile};
use super::sys;
use crate::error::HalError;

/// The two UVM fds: the one every call goes to, and the one that ties it to this process's mm.
pub(crate) struct Uvm {
    pub(crate) fd: DriverFd<UvmFile>,
    _mm: DriverFd<UvmFile>,
}

impl Uvm {
    /// Opens UVM twice, initializes the first and ties the second to it. A failure of the second step is
    /// ignored, as libcuda and tinygrad do: UVM refuses it when the mm is already set up.
    pub(crate) fn open() -> Result<Uvm, HalError> {
        let fd = DriverFd::open_uvm("open /dev/nvidia-uvm")?;
        let mm = DriverFd::open_uvm("open /dev/nvidia-uvm (mm)")?;
        let mut init = sys::UvmInitialize::default();
        ioctl::send_plain::<req::UvmInitialize>(&fd, &mut init, "UVM_INITIALIZE", "")?;
        let mut mm_init = sys::UvmMmInitialize { uvm_fd: fd.raw(), rm_status: 0 };
        // Deliberately not checked (see the doc comment).
        let _ = ioctl::send_plain::<req::UvmMmInitialize>(&mm, &mut mm_init, "UVM_MM_INITIALIZE", "");
        Ok(Uvm { fd, _mm: mm })
    }

    /// UVM on `/dev/null` (tests: every request is refused).
    #[cfg(test)]
    pub(crate) fn null() -> Uvm {
        Uvm { fd: DriverFd::null(), _mm: DriverFd::null() }
    }

    /// Registers the GPU with UVM.
    pub(crate) fn register_gpu(&self, uuid: [u8; 16]) -> Result<(), HalError> {
        let mut p = sys::UvmRegisterGpu { gpu_uuid: uuid, rm_ctrl_fd: -1, ..Default::default() };
        ioctl::send_plain::<req::UvmRegisterGpu>(&self.fd, &mut p, "UVM_REGISTER_GPU", "")
    }

    /// Hands the RM VA space `vaspace` to UVM, which then owns its page tables.
    pub(crate) fn register_gpu_vaspace(
        &self,
        uuid: [u8; 16],
        ctl: RawFd,
        client: u32,
        vaspace: u32,
    ) -> Result<(), HalError> {
        let mut p = sys::UvmRegisterGpuVaspace {
            gpu_uuid: uuid,
            rm_ctrl_fd: ctl,
            h_client: client,
            h_va_space: vaspace,
            rm_status: 0,
        };
        ioctl::send_plain::<req::UvmRegisterGpuVaspace>(&self.fd, &mut p, "UVM_REGISTER_GPU_VASPACE", "")
    }

    /// Registers a channel, with `base..base + len` reserved for UVM's own per-channel mappings.
    pub(crate) fn register_channel(
        &self,
        uuid: [u8; 16],
        ctl: RawFd,
        client: u32,
        channel: u32,
        base: u64,
        len: u64,
    ) -> Result<(), HalError> {
        let mut p = sys::UvmRegisterChannel {
            gpu_uuid: uuid,
            rm_ctrl_fd: ctl,
            h_client: client,
            h_channel: channel,
            base,
            length: len,
            ..Default::default()
        };
        ioctl::send_plain::<req::UvmRegisterChannel>(&self.fd, &mut p, "UVM_REGISTER_CHANNEL", "")
    }

    /// Claims `base..base + len` of the GPU VA space for external mappings.
    pub(crate) fn create_external_range(&self, base: u64, len: u64) -> Result<(), HalError> {
        let mut p = sys::UvmCreateExternalRange { base, length: len, ..Default::default() };
        let ctx = format!("{base:#x} + {len:#x}");
        ioctl::send_plain::<req::UvmCreateExternalRange>(&self.fd, &mut p, "UVM_CREATE_EXTERNAL_RANGE", &ctx)
    }

    /// Maps RM memory object `memory` at `base` for the GPU `uuid`, read-write-atomic.
    pub(crate) fn map_external(
        &self,
        uuid: [u8; 16],
        ctl: RawFd,
        client: u32,
        memory: u32,
        base: u64,
        len: u64,
    ) -> Result<(), HalError> {
        let mut p = sys::UvmMapExternalAllocation::new_zeroed();
        p.base = base;
        p.length = len;
        p.per_gpu_attributes[0].gpu_uuid = uuid;
        p.per_gpu_attributes[0].gpu_mapping_type = sys::UVM_MAPPING_READ_WRITE_ATOMIC;
        p.gpu_attributes_count = 1;
        p.rm_ctrl_fd = ctl;
        p.h_client = client;
        p.h_memory = memory;
        let ctx = format!("memory {memory:#x} at {base:#x} + {len:#x}");
        ioctl::send_plain::<req::UvmMapExternalAllocation>(&self.fd, &mut p, "UVM_MAP_EXTERNAL_ALLOCATION", &ctx)
    }

    /// Unmaps and releases the external range at `base`.
    pub(crate) fn free(&self, base: u64, len: u64) -> Result<(), HalError> {
        let mut p = sys::UvmFree { base, length: len, ..Default::default() };
        ioctl::send_plain::<req::UvmFree>(&self.fd, &mut p, "UVM_FREE", &format!("{base:#x}"))
    }
}
