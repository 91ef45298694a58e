//! Typed handles `{index, generation}` and the table that issues them.
//!
//! A handle is valid only while its slot's generation matches. Generation 0 is never issued, so an
//! all-zero handle means "none"; freeing a slot bumps its generation so every copy of the old handle
//! goes stale at once.

/// A resource handle as the contract lays it out (`OmegaGpuBufferHandle` and its siblings).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Handle {
    /// Slot in the owning table.
    pub index: u32,
    /// Slot generation at issue time; never 0 for an issued handle.
    pub generation: u32,
}

impl Handle {
    /// The zero handle: "no resource".
    pub const NONE: Handle = Handle { index: 0, generation: 0 };

    /// True for the zero handle.
    pub fn is_none(self) -> bool {
        self.generation == 0
    }
}

/// Why a handle was refused by [`HandleTable::check`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandleError {
    /// Generation 0: the handle was never issued.
    #[error("handle is zero (never issued)")]
    Zero,
    /// The index is past the table.
    #[error("handle index {0} out of range")]
    OutOfRange(u32),
    /// The slot was freed (or its table closed) since this handle was issued.
    #[error("stale handle (index {index}, generation {generation}, slot now at {current})")]
    Stale {
        /// Index of the refused handle.
        index: u32,
        /// Generation the handle carries.
        generation: u32,
        /// Generation the slot has now.
        current: u32,
    },
}

struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// A generation-checked slot table. Not synchronised: its owner holds the session lock.
pub struct HandleTable<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    /// Added to every generation so that handles from a closed table never match a reopened one.
    epoch: u32,
}

impl<T> Default for HandleTable<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> HandleTable<T> {
    /// An empty table.
    pub fn new() -> Self {
        Self { slots: Vec::new(), free: Vec::new(), epoch: 1 }
    }

    /// Stores `value` and returns its handle (generation never 0).
    pub fn open(&mut self, value: T) -> Handle {
        if let Some(index) = self.free.pop() {
            let slot = &mut self.slots[index as usize];
            slot.value = Some(value);
            return Handle { index, generation: slot.generation };
        }
        let index = self.slots.len() as u32;
        self.slots.push(Slot { generation: self.epoch, value: Some(value) });
        Handle { index, generation: self.epoch }
    }

    /// The value behind `h`, if `h` is current.
    pub fn check(&self, h: Handle) -> Result<&T, HandleError> {
        self.slot(h).map(|s| s.value.as_ref().expect("a current slot holds a value"))
    }

    /// Mutable access to the value behind `h`, if `h` is current.
    pub fn check_mut(&mut self, h: Handle) -> Result<&mut T, HandleError> {
        self.slot(h)?;
        Ok(self.slots[h.index as usize].value.as_mut().expect("a current slot holds a value"))
    }

    fn slot(&self, h: Handle) -> Result<&Slot<T>, HandleError> {
        if h.generation == 0 {
            return Err(HandleError::Zero);
        }
        let slot = self.slots.get(h.index as usize).ok_or(HandleError::OutOfRange(h.index))?;
        if slot.generation != h.generation || slot.value.is_none() {
            return Err(HandleError::Stale { index: h.index, generation: h.generation, current: slot.generation });
        }
        Ok(slot)
    }

    /// Removes the value behind `h` and makes every copy of `h` stale.
    pub fn close(&mut self, h: Handle) -> Result<T, HandleError> {
        self.slot(h)?;
        let slot = &mut self.slots[h.index as usize];
        slot.generation = next_generation(slot.generation);
        self.free.push(h.index);
        Ok(slot.value.take().expect("checked above"))
    }

    /// Removes every value (in slot order) and makes every issued handle stale, including for a later reuse
    /// of the same table.
    pub fn close_all(&mut self) -> Vec<T> {
        let mut out = Vec::new();
        let mut top = self.epoch;
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if let Some(v) = slot.value.take() {
                out.push(v);
                let _ = i;
            }
            top = top.max(slot.generation);
        }
        self.epoch = next_generation(top);
        self.slots.clear();
        self.free.clear();
        out
    }

    /// Number of live values.
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.value.is_some()).count()
    }

    /// True when no value is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Live values with their handles.
    pub fn iter(&self) -> impl Iterator<Item = (Handle, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.value.as_ref().map(|v| (Handle { index: i as u32, generation: s.generation }, v)))
    }
}

/// The generation after `g`, skipping 0 (never issued).
pub(crate) fn next_generation(g: u32) -> u32 {
    match g.wrapping_add(1) {
        0 => 1,
        n => n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_zero_is_never_issued_and_free_makes_stale() {
        let mut t = HandleTable::new();
        let a = t.open("a");
        assert_ne!(a.generation, 0);
        assert_eq!(t.check(a), Ok(&"a"));
        assert_eq!(t.close(a), Ok("a"));
        assert!(matches!(t.check(a), Err(HandleError::Stale { .. })));
        let b = t.open("b");
        assert_eq!(b.index, a.index, "slot is reused");
        assert_ne!(b.generation, a.generation, "with a new generation");
        assert_eq!(t.check(Handle::NONE), Err(HandleError::Zero));
    }

    #[test]
    fn close_all_stales_every_handle_even_after_reuse() {
        let mut t = HandleTable::new();
        let a = t.open(1);
        let _b = t.open(2);
        assert_eq!(t.close_all(), vec![1, 2]);
        let c = t.open(3);
        assert_eq!(c.index, a.index);
        assert!(t.check(a).is_err(), "a handle from before close_all never matches a reopened table");
        assert_eq!(t.check(c), Ok(&3));
    }
}
