//! `Mem<'s, K>`: a session buffer bound to the scope that allocated it, with its kind and element type.
//!
//! What a borrow ending means while the device may still use the memory (docs/design.md, "Buffers and
//! the end of a borrow"): launches are synchronous, so when a launch returns `Ok` the device is done with
//! every buffer it was given, and dropping a `Mem` releases it. When a completion is uncertain the process
//! latches first; from then on dropping a `Mem` parks it — the memory stays allocated for the rest of the
//! process, because the device may still be writing it.

use core::marker::PhantomData;

use crate::error::{Error, Result};
use crate::session::{runtime, GpuMem, Handle};
use crate::state::{Cached, Code, Data, DeviceScalar, MemKind};

/// A buffer of kind `K` that lives no longer than the scope `'s`.
pub struct Mem<'s, K: MemKind> {
    raw: GpuMem,
    len: usize,
    _scope: PhantomData<&'s ()>,
    _kind: PhantomData<K>,
}

impl<'s, K: MemKind> Mem<'s, K> {
    pub(crate) fn alloc(len: usize) -> Result<Self> {
        let bytes = len
            .checked_mul(size_of::<K::Elem>())
            .ok_or(Error::Setting { stage: "alloc", detail: format!("{len} elements overflow the address space") })?;
        let raw = runtime().alloc_kind(bytes, K::ALLOC)?;
        Ok(Mem { raw, len, _scope: PhantomData, _kind: PhantomData })
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a buffer of no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// GPU virtual address.
    pub fn va(&self) -> u64 {
        self.raw.va
    }

    /// The handle (index and generation).
    pub fn handle(&self) -> Handle {
        self.raw.handle
    }

    /// The contract's view of this buffer.
    pub fn raw(&self) -> &GpuMem {
        &self.raw
    }

    /// True once the buffer was parked by a latch.
    pub fn is_parked(&self) -> bool {
        runtime().is_parked(self.raw.handle)
    }

    fn cpu_elems(&mut self) -> &mut [K::Elem] {
        assert!(!self.raw.cpu.is_null(), "every typed buffer kind has a CPU view");
        // SAFETY: the CPU view covers `size >= len * size_of::<Elem>()` bytes, is page-aligned (so
        // aligned for any scalar), stays mapped while this Mem lives (frees go through its drop), and
        // `&mut self` makes this the only Rust reference into it. Every bit pattern is a valid Elem.
        unsafe { core::slice::from_raw_parts_mut(self.raw.cpu.cast::<K::Elem>(), self.len) }
    }

    fn write_elems(&mut self, src: &[K::Elem]) -> Result<()> {
        if src.len() > self.len {
            return Err(Error::Setting {
                stage: "write",
                detail: format!("{} elements into a buffer of {}", src.len(), self.len),
            });
        }
        self.cpu_elems()[..src.len()].copy_from_slice(src);
        runtime().sync_range_to_gpu(&self.raw, 0, core::mem::size_of_val(src))
    }
}

impl<T: DeviceScalar> Mem<'_, Data<T>> {
    /// Writes `src` at the start of the buffer and makes it visible to the device.
    pub fn write(&mut self, src: &[T]) -> Result<()> {
        self.write_elems(src)
    }

    /// Fills the whole buffer with `value` (poisoning an output before a launch) and syncs it.
    pub fn fill(&mut self, value: T) -> Result<()> {
        self.cpu_elems().fill(value);
        runtime().sync_to_gpu(&self.raw)
    }

    /// Makes device writes visible and copies the first `dst.len()` elements out.
    pub fn read(&mut self, dst: &mut [T]) -> Result<()> {
        if dst.len() > self.len {
            return Err(Error::Setting { stage: "read", detail: format!("{} elements from {}", dst.len(), self.len) });
        }
        runtime().sync_range_to_cpu(&self.raw, 0, core::mem::size_of_val(dst))?;
        dst.copy_from_slice(&self.cpu_elems()[..dst.len()]);
        Ok(())
    }

    /// The whole buffer, read back.
    pub fn to_vec(&mut self) -> Result<Vec<T>> {
        let mut v = vec![T::default(); self.len];
        self.read(&mut v)?;
        Ok(v)
    }
}

impl<T: DeviceScalar> Mem<'_, Cached<T>> {
    /// Writes the buffer's contents once (GPU-cached memory is for write-once, read-only data).
    pub fn write_once(&mut self, src: &[T]) -> Result<()> {
        self.write_elems(src)
    }
}

impl Mem<'_, Code> {
    /// Writes machine code at the start of the buffer (the prefetch tail after it stays zero).
    pub fn write_code(&mut self, code: &[u8]) -> Result<()> {
        self.write_elems(code)
    }
}

impl<K: MemKind> Drop for Mem<'_, K> {
    fn drop(&mut self) {
        // Latched: this parks instead of releasing. A failure here (closed device) is already recorded
        // in last_error and leaves nothing to release.
        let _ = runtime().free(&mut self.raw);
    }
}

impl<K: MemKind> core::fmt::Debug for Mem<'_, K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Mem").field("va", &format_args!("{:#x}", self.raw.va)).field("len", &self.len).finish()
    }
}
