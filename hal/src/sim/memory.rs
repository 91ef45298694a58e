//! Simulated device memory: page-aligned host blocks behind a fake GPU address map.

use std::alloc::{alloc_zeroed, dealloc, Layout};

use super::{Sim, SimFault};
use crate::caps::{BufferDesc, BufferKind, CachePolicy, Rights};
use crate::error::HalError;
use crate::memory::{Allocation, DeviceMemory};
use crate::sync;

pub(crate) const PAGE: u64 = 4096;
/// Unmapped gap between buffers, so an overrun faults instead of landing in a neighbour.
const GUARD: u64 = 64 * 1024;
const VA_BASE: u64 = 0x10_0000_0000;

/// A zeroed, page-aligned host block.
pub(crate) struct PageBuf {
    ptr: *mut u8,
    len: usize,
}

impl PageBuf {
    fn new(len: usize) -> Option<Self> {
        let layout = Layout::from_size_align(len, PAGE as usize).ok()?;
        // SAFETY: `len` is non-zero (the contract refuses zero-length buffers before a platform sees them).
        let ptr = unsafe { alloc_zeroed(layout) };
        (!ptr.is_null()).then_some(Self { ptr, len })
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is a live allocation of `len` bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes this the only Rust reference into it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe { dealloc(self.ptr, Layout::from_size_align_unchecked(self.len, PAGE as usize)) }
    }
}

// SAFETY: a PageBuf owns its block; it is only touched under the simulator's state mutex, or through the
// CPU view by a caller holding the session lock.
unsafe impl Send for PageBuf {}

/// One simulated buffer.
pub(crate) struct SimAlloc {
    pub(crate) id: u64,
    pub(crate) bytes: u64,
    pub(crate) rights: Rights,
    /// The device copy, which kernels see.
    pub(crate) device: PageBuf,
    /// A separate CPU copy for discrete buffers; `None` when the CPU view is the device copy.
    pub(crate) cpu: Option<PageBuf>,
}

impl SimAlloc {
    pub(crate) fn cpu_ptr(&self) -> *mut u8 {
        self.cpu.as_ref().unwrap_or(&self.device).as_ptr()
    }
}

pub(crate) struct SimMemory {
    pub(crate) map: super::AllocMap,
    next_va: u64,
    next_id: u64,
}

impl SimMemory {
    pub(crate) fn new() -> Self {
        Self { map: Default::default(), next_va: VA_BASE, next_id: 1 }
    }

    pub(crate) fn live_count(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn live_bytes(&self) -> u64 {
        self.map.values().map(|a| a.bytes).sum()
    }

    /// The buffer holding `va`, with the offset of `va` in it.
    pub(crate) fn find(&self, va: u64) -> Option<(&SimAlloc, u64)> {
        let (base, a) = self.map.range(..=va).next_back()?;
        (va - base < a.bytes).then_some((a, va - base))
    }

    pub(crate) fn find_mut(&mut self, va: u64) -> Option<(&mut SimAlloc, u64)> {
        let (base, a) = self.map.range_mut(..=va).next_back()?;
        let off = va - *base;
        (off < a.bytes).then_some((a, off))
    }

    pub(crate) fn release_all(&mut self) {
        self.map.clear();
    }
}

/// Buffers whose CPU view is the device copy: what the CPU polls, what the GPU executes, and the session's
/// own queue memory.
fn coherent(desc: &BufferDesc) -> bool {
    desc.kind != BufferKind::Data
        || desc.rights.intersects(Rights::HOST_POLLED | Rights::GPU_EXEC)
        || !desc.rights.intersects(Rights::CPU_READ | Rights::CPU_WRITE)
}

impl DeviceMemory for Sim {
    unsafe fn alloc(&self, desc: &BufferDesc) -> Result<Allocation, HalError> {
        let mut st = sync::lock(&self.state);
        if !st.open {
            return Err(HalError::NoDevice("sim: device not open".into()));
        }
        if st.take_fault(|f| *f == SimFault::FailAlloc).is_some() {
            return Err(HalError::OutOfMemory { bytes: desc.bytes });
        }
        if st.memory.live_bytes() + desc.bytes > self.config.memory_bytes {
            return Err(HalError::OutOfMemory { bytes: desc.bytes });
        }
        let len = usize::try_from(desc.bytes).map_err(|_| HalError::OutOfMemory { bytes: desc.bytes })?;
        let oom = || HalError::OutOfMemory { bytes: desc.bytes };
        let device = PageBuf::new(len).ok_or_else(oom)?;
        let cpu_view = desc.rights.intersects(Rights::CPU_READ | Rights::CPU_WRITE);
        let cpu = if coherent(desc) || desc.cache == CachePolicy::Cached && !cpu_view {
            None
        } else {
            Some(PageBuf::new(len).ok_or_else(oom)?)
        };
        let mem = &mut st.memory;
        let va = mem.next_va;
        mem.next_va += desc.bytes.div_ceil(PAGE) * PAGE + GUARD;
        let id = mem.next_id;
        mem.next_id += 1;
        let a = SimAlloc { id, bytes: desc.bytes, rights: desc.rights, device, cpu };
        let cpu_ptr = if cpu_view { a.cpu_ptr() } else { std::ptr::null_mut() };
        mem.map.insert(va, a);
        Ok(Allocation { id, cpu: cpu_ptr, va, bytes: desc.bytes })
    }

    unsafe fn free(&self, a: &Allocation) {
        let mut st = sync::lock(&self.state);
        let removed = st.memory.map.remove(&a.va);
        debug_assert!(removed.as_ref().is_some_and(|r| r.id == a.id), "sim: free of an unknown allocation");
        if removed.is_some() {
            st.stats.frees += 1;
        }
    }
}
