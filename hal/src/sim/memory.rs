//! Simulated device memory: page-aligned host blocks behind a fake GPU address map.

use super::{Sim, SimFault};
use crate::caps::{BufferDesc, BufferKind, CachePolicy, Rights};
use crate::driver::DriverCall;
use crate::error::HalError;
use crate::memory::{Allocation, DeviceMemory, MemInfo};
use crate::sync;

pub(crate) const PAGE: u64 = 4096;
/// Unmapped gap between buffers, so an overrun faults instead of landing in a neighbour.
const GUARD: u64 = 64 * 1024;
const VA_BASE: u64 = 0x10_0000_0000;

/// A zeroed, page-aligned host block.
pub(crate) struct PageBuf {
    /// What `calloc` returned (freed on drop).
    raw: *mut u8,
    /// The first page boundary in it.
    ptr: *mut u8,
    len: usize,
}

impl PageBuf {
    fn new(len: usize) -> Option<Self> {
        // calloc of a page more than asked, not `alloc_zeroed` with page alignment: for an alignment past
        // malloc's own, std writes the zeros itself and so touches every page, while calloc takes a large
        // block as fresh pages from the kernel, zero and untouched until used. A 64 MiB chunk then costs
        // what its used pages cost.
        let bytes = len.checked_add(PAGE as usize)?;
        // SAFETY: calloc has no preconditions; a null result is the failure.
        let raw = unsafe { libc::calloc(1, bytes) } as *mut u8;
        if raw.is_null() {
            return None;
        }
        let ptr = raw.wrapping_add(raw.align_offset(PAGE as usize));
        Some(Self { raw, ptr, len })
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr..ptr + len` lies inside the live calloc block of `len + PAGE` bytes owned by self
        // (`ptr` is at most PAGE - 1 bytes in).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes this the only Rust reference into it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        // SAFETY: the block calloc returned in `new`, freed once.
        unsafe { libc::free(self.raw.cast()) }
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
    map: super::AllocMap,
    /// Bytes of every live buffer (kept beside the map, so an allocation need not sum it).
    live_bytes: u64,
    next_va: u64,
    next_id: u64,
}

impl SimMemory {
    pub(crate) fn new() -> Self {
        Self { map: Default::default(), live_bytes: 0, next_va: VA_BASE, next_id: 1 }
    }

    pub(crate) fn live_count(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    /// The buffer based at `va`.
    pub(crate) fn get_mut(&mut self, va: u64) -> Option<&mut SimAlloc> {
        self.map.get_mut(&va)
    }

    fn insert(&mut self, va: u64, a: SimAlloc) {
        self.live_bytes += a.bytes;
        self.map.insert(va, a);
    }

    fn remove(&mut self, va: u64) -> Option<SimAlloc> {
        let a = self.map.remove(&va)?;
        self.live_bytes -= a.bytes;
        Some(a)
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
        self.live_bytes = 0;
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
        self.driver.enter(DriverCall::Alloc { bytes: desc.bytes })?;
        if desc.bytes > self.config.memory_bytes - st.memory.live_bytes() {
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
        mem.insert(va, a);
        Ok(Allocation { id, cpu: cpu_ptr, va, bytes: desc.bytes })
    }

    unsafe fn free(&self, a: &Allocation) {
        // The nvidia platform's RM_FREE is refused while sealed, and the object stays: so here.
        if self.driver.enter(DriverCall::Free).is_err() {
            return;
        }
        let mut st = sync::lock(&self.state);
        let removed = st.memory.remove(a.va);
        debug_assert!(removed.as_ref().is_some_and(|r| r.id == a.id), "sim: free of an unknown allocation");
        if removed.is_some() {
            st.stats.frees += 1;
        }
    }

    unsafe fn mem_info(&self) -> Result<MemInfo, HalError> {
        let st = sync::lock(&self.state);
        if !st.open {
            return Err(HalError::NoDevice("sim: device not open".into()));
        }
        self.driver.enter(DriverCall::MemInfo)?;
        let total_bytes = self.config.memory_bytes;
        Ok(MemInfo { free_bytes: total_bytes - st.memory.live_bytes(), total_bytes })
    }

    unsafe fn peek(&self, a: &Allocation, offset: u64, dst: &mut [u8]) -> Result<(), HalError> {
        let now = crate::Clock::now_ns(&self.clock);
        let mut st = sync::lock(&self.state);
        // Work still scheduled runs the slices whose time has come first, as the chip would have run them
        // by now: a peek sees what a running kernel wrote, which is the point of sampling.
        self.advance(&mut st, now);
        let (buf, at) = st.memory.find(a.va).ok_or_else(|| HalError::NoDevice("sim: peek of no allocation".into()))?;
        let from = (at + offset) as usize;
        let src = buf.device.bytes().get(from..from + dst.len());
        dst.copy_from_slice(src.ok_or_else(|| HalError::NoDevice("sim: peek past the allocation".into()))?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Device, Visibility};

    const RW: Rights = Rights::CPU_READ.union(Rights::CPU_WRITE).union(Rights::GPU_READ).union(Rights::GPU_WRITE);

    fn desc(bytes: u64, rights: Rights) -> BufferDesc {
        BufferDesc { bytes, rights, cache: CachePolicy::Uncached, kind: BufferKind::Data }
    }

    #[test]
    fn info_counts_live_bytes_against_the_configured_size_and_capacity_is_enforced() {
        let sim = Sim::with_config(super::super::SimConfig { memory_bytes: 64 * PAGE, ..Default::default() });
        // SAFETY: the device is opened first and closed last on this thread, the only one using it, and
        // each buffer is freed once.
        unsafe {
            assert!(sim.mem_info().is_err(), "closed: nothing to report");
            sim.open().unwrap();
            assert_eq!(sim.mem_info().unwrap(), MemInfo { free_bytes: 64 * PAGE, total_bytes: 64 * PAGE });
            let a = sim.alloc(&desc(48 * PAGE, RW)).unwrap();
            assert_eq!(sim.mem_info().unwrap().free_bytes, 16 * PAGE);
            assert_eq!(sim.alloc(&desc(17 * PAGE, RW)), Err(HalError::OutOfMemory { bytes: 17 * PAGE }));
            let b = sim.alloc(&desc(16 * PAGE, RW)).unwrap();
            assert_eq!(sim.mem_info().unwrap().free_bytes, 0);
            sim.free(&a);
            sim.free(&b);
            assert_eq!(sim.mem_info().unwrap().free_bytes, 64 * PAGE);
            sim.close();
        }
    }

    #[test]
    fn a_device_only_buffer_is_written_and_read_on_its_device_side() {
        let sim = Sim::new();
        // SAFETY: as above; every range lies inside its buffer.
        unsafe {
            sim.open().unwrap();
            let d = sim.alloc(&desc(2 * PAGE, Rights::GPU_READ | Rights::GPU_WRITE)).unwrap();
            assert!(d.cpu.is_null(), "no CPU rights, no CPU view");
            sim.write_device(&d, PAGE - 2, &[1, 2, 3, 4]).unwrap();
            let mut back = [0u8; 6];
            sim.read_device(&d, PAGE - 3, &mut back).unwrap();
            assert_eq!(back, [0, 1, 2, 3, 4, 0]);
            // A buffer with a CPU view: the device side changes, the CPU copy does not until a sync.
            let v = sim.alloc(&desc(PAGE, RW)).unwrap();
            sim.write_device(&v, 0, &[9; 8]).unwrap();
            assert_eq!(*v.cpu, 0);
            sim.sync_to_cpu(&v, 0, 8).unwrap();
            assert_eq!(*v.cpu.add(7), 9);
            sim.inject(SimFault::FailSync);
            assert!(sim.write_device(&d, 0, &[1]).is_err(), "an injected sync failure refuses device writes too");
            sim.free(&d);
            sim.free(&v);
            sim.close();
        }
    }
}
