//! The generation-checked handle table a C backend keeps over its own storage
//! ([`OmegaGpuHandleTable`], `omega_gpu_handles_*`): the rule of [`crate::HandleTable`] on caller-owned
//! arrays of fixed capacity.

use core::ffi::c_void;

use super::OmegaGpuHandleTable;
use crate::handle::{next_generation, Handle, HandleError};

/// Why the table refused to issue a handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpenRefused {
    /// Every slot holds a value.
    #[error("the table is full ({0} slots)")]
    Full(u32),
    /// NULL marks a free slot, so it cannot be stored.
    #[error("the value is NULL")]
    NullValue,
}

impl OmegaGpuHandleTable {
    /// A table over `capacity` slots of caller storage, every slot free and at generation 1.
    ///
    /// # Safety
    /// - `generations` and `values` each point to `capacity` writable elements that only this table (and
    ///   its copies, used one at a time) reads or writes for as long as it is used.
    pub unsafe fn init(generations: *mut u32, values: *mut *mut c_void, capacity: u32) -> OmegaGpuHandleTable {
        let t = OmegaGpuHandleTable { generations, values, capacity, live: 0 };
        // SAFETY: forwarded from the caller.
        let (gens, vals) = unsafe { t.slots() };
        gens.fill(1);
        vals.fill(core::ptr::null_mut());
        t
    }

    /// The slots' generations and values.
    ///
    /// # Safety
    /// - The storage is what [`OmegaGpuHandleTable::init`] was given (its promise holds), and no other
    ///   reference into it is alive.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slots(&self) -> (&mut [u32], &mut [*mut c_void]) {
        let n = self.capacity as usize;
        if n == 0 {
            return (&mut [], &mut []);
        }
        // SAFETY: by the caller's promise both arrays hold `n` elements that nothing else references now.
        unsafe {
            (core::slice::from_raw_parts_mut(self.generations, n), core::slice::from_raw_parts_mut(self.values, n))
        }
    }

    /// Stores `value` in the first free slot and returns its handle.
    ///
    /// # Safety
    /// - As for [`OmegaGpuHandleTable::init`]: the storage is the table's, and no other call on it runs.
    pub unsafe fn open(&mut self, value: *mut c_void) -> Result<Handle, OpenRefused> {
        if value.is_null() {
            return Err(OpenRefused::NullValue);
        }
        let handle = {
            // SAFETY: forwarded from the caller.
            let (gens, vals) = unsafe { self.slots() };
            let Some(i) = vals.iter().position(|v| v.is_null()) else { return Err(OpenRefused::Full(self.capacity)) };
            vals[i] = value;
            Handle { index: i as u32, generation: gens[i] }
        };
        self.live += 1;
        Ok(handle)
    }

    /// The value behind `h`, if `h` is current.
    ///
    /// # Safety
    /// - As for [`OmegaGpuHandleTable::open`].
    pub unsafe fn check(&self, h: Handle) -> Result<*mut c_void, HandleError> {
        if h.generation == 0 {
            return Err(HandleError::Zero);
        }
        if h.index >= self.capacity {
            return Err(HandleError::OutOfRange(h.index));
        }
        // SAFETY: forwarded from the caller.
        let (gens, vals) = unsafe { self.slots() };
        let i = h.index as usize;
        if gens[i] != h.generation || vals[i].is_null() {
            return Err(HandleError::Stale { index: h.index, generation: h.generation, current: gens[i] });
        }
        Ok(vals[i])
    }

    /// Removes the value behind `h`, making every copy of `h` stale, and returns it.
    ///
    /// # Safety
    /// - As for [`OmegaGpuHandleTable::open`].
    pub unsafe fn close(&mut self, h: Handle) -> Result<*mut c_void, HandleError> {
        // SAFETY: forwarded from the caller.
        let value = unsafe { self.check(h) }?;
        {
            // SAFETY: as above; `check` holds no reference into the storage any more.
            let (gens, vals) = unsafe { self.slots() };
            let i = h.index as usize;
            gens[i] = next_generation(gens[i]);
            vals[i] = core::ptr::null_mut();
        }
        self.live -= 1;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_slot_is_reused_with_a_new_generation_and_old_handles_go_stale() {
        let mut gens = [0u32; 2];
        let mut vals = [core::ptr::null_mut::<c_void>(); 2];
        let (mut a, mut b) = (1u8, 2u8);
        let (pa, pb): (*mut c_void, *mut c_void) = ((&raw mut a).cast(), (&raw mut b).cast());
        // SAFETY: both arrays hold 2 elements used only through `t` in this test.
        let mut t = unsafe { OmegaGpuHandleTable::init(gens.as_mut_ptr(), vals.as_mut_ptr(), 2) };
        // SAFETY: the storage is the table's and each call runs alone.
        unsafe {
            let ha = t.open(pa).unwrap();
            let hb = t.open(pb).unwrap();
            assert_eq!(t.open(pa), Err(OpenRefused::Full(2)));
            assert_eq!(t.open(core::ptr::null_mut()), Err(OpenRefused::NullValue));
            assert_eq!(t.check(ha), Ok(pa));
            assert_eq!(t.close(ha), Ok(pa));
            assert!(matches!(t.check(ha), Err(HandleError::Stale { .. })));
            let hc = t.open(pb).unwrap();
            assert_eq!(hc.index, ha.index);
            assert_ne!(hc.generation, ha.generation);
            assert_eq!(t.check(Handle::NONE), Err(HandleError::Zero));
            assert_eq!(t.check(Handle { index: 7, generation: 1 }), Err(HandleError::OutOfRange(7)));
            assert_eq!(t.live, 2);
            assert_eq!(t.check(hb), Ok(pb));
        }
    }
}
