//! The UVM side: `/dev/nvidia-uvm` owns the GPU page tables of an externally owned VA space, so every GPU
//! mapping of this backend goes through it (an external range, then the mapping of an RM memory object
//! into it).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use zerocopy::FromZeros;

use super::ioctl;
use super::rm::{open_rw, UVM_PATH};
use super::sys::{self, uvm_req};
use crate::error::HalError;

/// The two UVM fds: the one every call goes to, and the one that ties it to this process's mm.
pub(crate) struct Uvm {
    pub(crate) fd: OwnedFd,
    _mm: OwnedFd,
}

impl Uvm {
    /// Opens UVM twice, initializes the first and ties the second to it. A failure of the second step is
    /// ignored, as libcuda and tinygrad do: UVM refuses it when the mm is already set up.
    pub(crate) fn open() -> Result<Uvm, HalError> {
        let fd = open_rw(UVM_PATH, "open /dev/nvidia-uvm")?;
        let mm = open_rw(UVM_PATH, "open /dev/nvidia-uvm (mm)")?;
        let mut init = sys::UvmInitialize::default();
        // SAFETY: UVM_INITIALIZE takes this struct and nothing it points to.
        unsafe { ioctl::uvm(fd.as_raw_fd(), uvm_req::INITIALIZE, &mut init, "UVM_INITIALIZE", "") }?;
        let mut mm_init = sys::UvmMmInitialize { uvm_fd: fd.as_raw_fd(), rm_status: 0 };
        // SAFETY: as above; the result is deliberately not checked (see the doc comment).
        let _ = unsafe { ioctl::uvm(mm.as_raw_fd(), uvm_req::MM_INITIALIZE, &mut mm_init, "UVM_MM_INITIALIZE", "") };
        Ok(Uvm { fd, _mm: mm })
    }

    fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Registers the GPU with UVM.
    pub(crate) fn register_gpu(&self, uuid: [u8; 16]) -> Result<(), HalError> {
        let mut p = sys::UvmRegisterGpu { gpu_uuid: uuid, rm_ctrl_fd: -1, ..Default::default() };
        // SAFETY: no pointers inside.
        unsafe { ioctl::uvm(self.raw(), uvm_req::REGISTER_GPU, &mut p, "UVM_REGISTER_GPU", "") }
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
        // SAFETY: no pointers inside.
        unsafe { ioctl::uvm(self.raw(), uvm_req::REGISTER_GPU_VASPACE, &mut p, "UVM_REGISTER_GPU_VASPACE", "") }
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
        // SAFETY: no pointers inside.
        unsafe { ioctl::uvm(self.raw(), uvm_req::REGISTER_CHANNEL, &mut p, "UVM_REGISTER_CHANNEL", "") }
    }

    /// Claims `base..base + len` of the GPU VA space for external mappings.
    pub(crate) fn create_external_range(&self, base: u64, len: u64) -> Result<(), HalError> {
        let mut p = sys::UvmCreateExternalRange { base, length: len, ..Default::default() };
        let ctx = format!("{base:#x} + {len:#x}");
        // SAFETY: no pointers inside.
        unsafe { ioctl::uvm(self.raw(), uvm_req::CREATE_EXTERNAL_RANGE, &mut p, "UVM_CREATE_EXTERNAL_RANGE", &ctx) }
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
        // SAFETY: no pointers inside.
        unsafe { ioctl::uvm(self.raw(), uvm_req::MAP_EXTERNAL_ALLOCATION, &mut p, "UVM_MAP_EXTERNAL_ALLOCATION", &ctx) }
    }

    /// Unmaps and releases the external range at `base`.
    pub(crate) fn free(&self, base: u64, len: u64) -> Result<(), HalError> {
        let mut p = sys::UvmFree { base, length: len, ..Default::default() };
        // SAFETY: no pointers inside.
        unsafe { ioctl::uvm(self.raw(), uvm_req::FREE, &mut p, "UVM_FREE", &format!("{base:#x}")) }
    }
}
