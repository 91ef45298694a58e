//! Device memory through a C table: the descriptors and buffers as C lays them out, and the DEVICE_MEM
//! service's calls.

use super::{f, OmegaGpuAllocation, OmegaGpuBufferDesc, OmegaGpuPlatformError, TablePlatform};
use crate::caps::{check_buffer, BufferDesc, BufferKind, CachePolicy, Refusal, Rights};
use crate::error::HalError;
use crate::memory::{Allocation, DeviceMemory};

impl OmegaGpuBufferDesc {
    /// `d` as C lays it out.
    pub fn from_hal(d: &BufferDesc) -> Self {
        OmegaGpuBufferDesc {
            bytes: d.bytes,
            rights: d.rights.bits(),
            cache: d.cache as u32,
            kind: d.kind as u32,
            reserved: 0,
        }
    }

    /// The descriptor in the HAL's terms, refused unless every field holds a value the contract defines
    /// and the contract's buffer rules ([`check_buffer`]) accept it.
    pub fn to_hal(&self) -> Result<BufferDesc, Refusal> {
        let rights = Rights::from_bits(self.rights).ok_or(Refusal::BadValue("OmegaGpuBufferDesc.rights"))?;
        let cache = match self.cache {
            0 => CachePolicy::Uncached,
            1 => CachePolicy::Cached,
            _ => return Err(Refusal::BadValue("OmegaGpuBufferDesc.cache")),
        };
        let kind = match self.kind {
            1 => BufferKind::Data,
            2 => BufferKind::Code,
            3 => BufferKind::Queue,
            _ => return Err(Refusal::BadValue("OmegaGpuBufferDesc.kind")),
        };
        let d = BufferDesc { bytes: self.bytes, rights, cache, kind };
        check_buffer(&d)?;
        Ok(d)
    }
}

impl OmegaGpuAllocation {
    /// `a` as C lays it out (no bus address: the HAL does not carry one).
    pub fn from_hal(a: &Allocation) -> Self {
        OmegaGpuAllocation { id: a.id, cpu: a.cpu.cast(), va: a.va, bytes: a.bytes, bus: 0 }
    }

    /// The buffer in the HAL's terms.
    pub fn to_hal(&self) -> Allocation {
        Allocation { id: self.id, cpu: self.cpu.cast(), va: self.va, bytes: self.bytes }
    }

    /// The all-zero buffer a callback fills.
    pub const NONE: OmegaGpuAllocation =
        OmegaGpuAllocation { id: 0, cpu: core::ptr::null_mut(), va: 0, bytes: 0, bus: 0 };
}

impl DeviceMemory for TablePlatform {
    unsafe fn alloc(&self, desc: &BufferDesc) -> Result<Allocation, HalError> {
        let c_desc = OmegaGpuBufferDesc::from_hal(desc);
        let mut out = OmegaGpuAllocation::NONE;
        let mut err = OmegaGpuPlatformError::NONE;
        // SAFETY: the caller holds the session lock with the device open and passed `desc` through
        // check_buffer, rounded to the page (DeviceMemory::alloc's contract): OmegaGpuDeviceMemService's
        // `alloc` rules. `c_desc`, `out` and `err` are live locals for the call.
        let rc = unsafe { f(self.table.memory.alloc)(self.ctx(), &c_desc, &mut out, &mut err) };
        if rc != 0 {
            return Err(err.to_hal("alloc", desc.bytes));
        }
        let cpu_view = desc.rights.intersects(Rights::CPU_READ | Rights::CPU_WRITE);
        let broken = if out.id == 0 {
            Some("an id of 0")
        } else if out.bytes < desc.bytes {
            Some("fewer bytes than asked")
        } else if cpu_view && out.cpu.is_null() {
            Some("no CPU view for a buffer the CPU may access")
        } else {
            None
        };
        if let Some(what) = broken {
            // SAFETY: the callback reported success, so `out` is its live buffer; nothing was submitted
            // with it, and the lock is still held. Handing it back is all that can be done with it.
            unsafe { f(self.table.memory.free)(self.ctx(), &out) };
            return Err(HalError::Driver {
                call: "alloc",
                status: 0,
                detail: format!("the platform table's alloc returned {what} (refused and freed)"),
            });
        }
        Ok(out.to_hal())
    }

    unsafe fn free(&self, a: &Allocation) {
        let c = OmegaGpuAllocation::from_hal(a);
        // SAFETY: `a` is a live buffer of this platform, freed once, touched by no submitted work, and the
        // lock is held (DeviceMemory::free's contract): OmegaGpuDeviceMemService's `free` rules.
        unsafe { f(self.table.memory.free)(self.ctx(), &c) }
    }
}
