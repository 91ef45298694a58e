//! `Mem<'s, K>`: a session buffer bound to the scope that allocated it, with its kind and element type.
//!
//! What a borrow ending means while the device may still use the memory (docs/design.md, "Buffers and
//! the end of a borrow"): launches are synchronous, so when a launch returns `Ok` the device is done with
//! every buffer it was given, and dropping a `Mem` releases it. When a completion is uncertain the process
//! latches first; from then on dropping a `Mem` parks it — the memory stays allocated for the rest of the
//! process, because the device may still be writing it — and the CPU no longer touches it (`write`, `fill`
//! and `read` are refused).
//!
//! The buffer is the library's ([`crate::session`]'s `TYPED_BUFFER` owner): the raw API's free and scratch
//! calls refuse it whatever copy of its handle they get (from [`Mem::raw`], or guessed), so the CPU view
//! this type dereferences stays mapped for as long as the `Mem` lives.

use core::marker::PhantomData;

use crate::error::{Error, Result, Stage};
use crate::session::{runtime, GpuMem, Handle, TYPED_BUFFER};
use crate::state::{Cached, Code, Data, Device, DeviceScalar, MemKind};

/// A buffer of kind `K` that lives no longer than the scope `'s`.
pub struct Mem<'s, K: MemKind> {
    raw: GpuMem,
    len: usize,
    _scope: PhantomData<&'s ()>,
    _kind: PhantomData<K>,
}

impl<'s, K: MemKind> Mem<'s, K> {
    pub(crate) fn alloc(len: usize) -> Result<Self> {
        let rt = runtime();
        let Some(bytes) = len.checked_mul(size_of::<K::Elem>()) else {
            return Err(Error::Refused(crate::error::Refusal::Overflow));
        };
        let raw = rt.alloc_owned(bytes, K::ALLOC, TYPED_BUFFER)?;
        Ok(Mem { raw, len, _scope: PhantomData, _kind: PhantomData })
    }

    /// The same buffer without its scope's lifetime, for the holders that re-bind it to a scope themselves
    /// (a module's buffers, a [`crate::Kept`] buffer): they hand it out again only inside a scope of the
    /// device open that allocated it.
    pub(crate) fn into_static(self) -> Mem<'static, K> {
        let this = core::mem::ManuallyDrop::new(self);
        Mem { raw: this.raw, len: this.len, _scope: PhantomData, _kind: PhantomData }
    }

    /// Forgets the buffer without releasing it: for a holder whose device was closed (close freed the
    /// buffer already) or that cannot take the lock to release it (close will). The drop then does nothing.
    pub(crate) fn disown(&mut self) {
        self.raw = GpuMem::NONE;
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

    /// The contract's view of this buffer (for the raw API's syncs, say). Its handle names a buffer this
    /// `Mem` owns: the raw API's free and scratch calls refuse it.
    pub fn raw(&self) -> &GpuMem {
        &self.raw
    }

    /// True once the buffer was parked by a latch.
    pub fn is_parked(&self) -> bool {
        runtime().is_parked(self.raw.handle)
    }

    fn cpu_elems(&mut self) -> &mut [K::Elem] {
        assert!(!self.raw.cpu.is_null(), "every typed buffer kind but Device has a CPU view (Device never asks)");
        // SAFETY: the CPU view covers `size >= len * size_of::<Elem>()` bytes, is page-aligned (so
        // aligned for any scalar), and stays mapped while this Mem lives: the buffer is TYPED_BUFFER's, so
        // the raw free and scratch calls refuse it, only this Mem's drop releases it, and close, the other
        // release, needs the lock, which the scope's token pins on this thread (no other thread can take it,
        // and unlock is refused). `&mut self` makes this the only Rust reference into it, and no device
        // work runs while we hold it: launches are synchronous, and after a latch (work may still run)
        // every caller refuses first (`refuse_after_latch`). Every bit pattern is a valid Elem.
        unsafe { core::slice::from_raw_parts_mut(self.raw.cpu.cast::<K::Elem>(), self.len) }
    }

    /// After a latch the device may still be writing the buffer: the CPU leaves it alone.
    fn refuse_after_latch(stage: Stage) -> Result<()> {
        let rt = runtime();
        if rt.is_blocked() {
            return Err(Error::Latched(stage));
        }
        Ok(())
    }

    fn write_elems(&mut self, src: &[K::Elem]) -> Result<()> {
        Self::refuse_after_latch(Stage::Write)?;
        if src.len() > self.len {
            return Err(Error::Setting {
                stage: Stage::Write,
                detail: crate::error::SettingError::WriteTooLong { n: src.len(), len: self.len },
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
        Self::refuse_after_latch(Stage::Write)?;
        self.cpu_elems().fill(value);
        runtime().sync_to_gpu(&self.raw)
    }

    /// Makes device writes visible and copies the first `dst.len()` elements out.
    pub fn read(&mut self, dst: &mut [T]) -> Result<()> {
        if dst.len() > self.len {
            return Err(Error::Setting {
                stage: Stage::Read,
                detail: crate::error::SettingError::ReadTooLong { n: dst.len(), len: self.len },
            });
        }
        // The sync is refused after a latch, before the CPU view is read.
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

impl<T: DeviceScalar> Mem<'_, Device<T>> {
    /// The byte range of `n` elements from element `at`, checked against the buffer (stage `stage`).
    fn byte_range(&self, stage: Stage, at: usize, n: usize) -> Result<usize> {
        match at.checked_add(n) {
            Some(end) if end <= self.len => Ok(at * size_of::<T>()),
            _ => {
                let e =
                    Error::Setting { stage, detail: crate::error::SettingError::ElementsPast { at, n, len: self.len } };
                Err(e)
            }
        }
    }

    /// Writes `src` at element `at` through the platform's staging; visible to the device on return.
    /// Refused after a latch.
    pub fn write_at(&mut self, at: usize, src: &[T]) -> Result<()> {
        let offset = self.byte_range(Stage::Write, at, src.len())?;
        // SAFETY: T is a DeviceScalar (plain bytes, no padding, any bit pattern valid), so its slice is
        // `size_of_val(src)` initialised bytes, borrowed for this call only.
        let bytes = unsafe { core::slice::from_raw_parts(src.as_ptr().cast::<u8>(), core::mem::size_of_val(src)) };
        runtime().write(&self.raw, offset, bytes)
    }

    /// Writes `src` at the start of the buffer.
    pub fn write(&mut self, src: &[T]) -> Result<()> {
        self.write_at(0, src)
    }

    /// Reads `dst.len()` elements from element `at`, as the device left them. Refused after a latch.
    pub fn read_at(&mut self, at: usize, dst: &mut [T]) -> Result<()> {
        let offset = self.byte_range(Stage::Read, at, dst.len())?;
        let len = core::mem::size_of_val(dst);
        // SAFETY: as in `write_at`; every bit pattern is a valid T, so any bytes written through this view
        // leave `dst` valid; `dst` is borrowed mutably for this call only.
        let bytes = unsafe { core::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<u8>(), len) };
        runtime().read(&self.raw, offset, bytes)
    }

    /// Reads the first `dst.len()` elements.
    pub fn read(&mut self, dst: &mut [T]) -> Result<()> {
        self.read_at(0, dst)
    }

    /// The whole buffer, read back.
    pub fn to_vec(&mut self) -> Result<Vec<T>> {
        let mut v = vec![T::default(); self.len];
        self.read(&mut v)?;
        Ok(v)
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
        if self.raw.handle.is_none() {
            // Disowned: nothing of the session to release, and no lock to ask for.
            return;
        }
        // Latched: this parks instead of releasing. A failure here (closed device) leaves nothing to
        // release, and a drop has no one to tell.
        let _ = runtime().release(&mut self.raw, TYPED_BUFFER);
    }
}

impl<K: MemKind> core::fmt::Debug for Mem<'_, K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Mem").field("va", &format_args!("{:#x}", self.raw.va)).field("len", &self.len).finish()
    }
}
