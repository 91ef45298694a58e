//! Buffers and modules kept beyond the scope that made them, for as long as the device stays open.
//!
//! A scope's buffers and modules end with it, which is what makes them safe to use without checks. A
//! library whose entries each take the lock for one call (the matmul library's C entries) needs more: its
//! loaded module, its workspace and the tensors a caller uploaded must survive from one call to the next.
//! [`Scope::keep`] and [`Scope::keep_module`] turn a scope's buffer or module into a [`Kept`] or
//! [`KeptModule`], which any later scope of the same device open gets back with `get`.
//!
//! Why this is sound although a kept value outlives the scope and may move to another thread:
//!
//! - It is handed out again only inside a scope (`&'s Scope<'s>`: the calling thread holds the lock,
//!   pinned for the whole scope, and the device is open), and only while the device open that made it is
//!   the one open now ([`crate::session::Runtime::open_count`] unchanged). A kept buffer belongs to the
//!   library (the typed buffers' owner), so no caller's free releases it; the only other release, close,
//!   needs the lock, so it cannot happen between the check and the end of the scope.
//! - What it hands out is bound to that scope (`&'a Mem<'s, K>` with `'s: 'a`, a `Module<'s>`), so nothing
//!   of it escapes into code that runs without the lock.
//! - It is touched only by the thread that holds the lock: dropping it elsewhere, or after its device was
//!   closed, forgets it instead (close frees, or already freed, its memory), and an open with another
//!   generation refuses it (stage `keep`). So the module's shared count is never raced.

use std::mem::ManuallyDrop;
use std::rc::Rc;

use crate::error::{Error, Result, SettingError, Stage};
use crate::kernel::{Module, Resident};
use crate::mem::Mem;
use crate::scope::Scope;
use crate::session::runtime;
use crate::state::MemKind;

/// The device open a kept value belongs to, or the refusal of one that is not the open one now.
fn check_open(opened: u32) -> Result<()> {
    let rt = runtime();
    let now = rt.open_count();
    if now == opened && rt.is_open() {
        return Ok(());
    }
    Err(Error::Setting { stage: Stage::Keep, detail: SettingError::KeptStale { opened, now } })
}

/// True when `opened` is the device open of now, on a thread that holds the lock: the only state in which
/// a kept value may be released rather than forgotten.
fn releasable(opened: u32) -> bool {
    let rt = runtime();
    rt.holds_lock() && rt.open_count() == opened && rt.is_open()
}

/// A buffer kept beyond the scope that allocated it ([`Scope::keep`]), for as long as the device stays
/// open. [`Kept::get`] and [`Kept::get_mut`] hand it out inside a later scope of the same device open and
/// refuse it (stage `keep`) once the device was closed. Dropped by a thread that holds the lock while its
/// device is open, it is released (parked after a latch); dropped anywhere else it is forgotten, and the
/// device's close frees it.
pub struct Kept<K: MemKind> {
    mem: Mem<'static, K>,
    opened: u32,
}

// SAFETY: the buffer's CPU view and handle are dereferenced or released only through `get`, `get_mut` and
// `drop`, and each of those touches them only on the thread that holds the session lock (a scope, or the
// lock-held check of `drop`) while the device open that allocated the buffer is still open; the lock's
// mutex orders those accesses across threads. Moving the value between threads touches neither.
unsafe impl<K: MemKind> Send for Kept<K> {}

impl<K: MemKind> Kept<K> {
    /// The buffer, inside scope `scope`; refused (stage `keep`) once the device it was allocated on was
    /// closed.
    pub fn get<'a, 's: 'a>(&'a self, scope: &'s Scope<'s>) -> Result<&'a Mem<'s, K>> {
        let _ = scope;
        check_open(self.opened)?;
        Ok(&self.mem)
    }

    /// The buffer for writing and reading, inside scope `scope`; refused as [`Kept::get`] is.
    pub fn get_mut<'a, 's: 'a>(&'a mut self, scope: &'s Scope<'s>) -> Result<&'a mut Mem<'static, K>> {
        let _ = scope;
        check_open(self.opened)?;
        Ok(&mut self.mem)
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// True for a buffer of no elements.
    pub fn is_empty(&self) -> bool {
        self.mem.is_empty()
    }

    /// True while the device open that allocated it is the one open now.
    pub fn is_current(&self) -> bool {
        let rt = runtime();
        rt.open_count() == self.opened && rt.is_open()
    }
}

impl<K: MemKind> Drop for Kept<K> {
    fn drop(&mut self) {
        if !releasable(self.opened) {
            self.mem.disown();
        }
    }
}

impl<K: MemKind> core::fmt::Debug for Kept<K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Kept").field("mem", &self.mem).field("opened", &self.opened).finish()
    }
}

/// A module kept beyond the scope that loaded it ([`Scope::keep_module`]), for as long as the device stays
/// open: [`KeptModule::get`] gives it back in a later scope of the same device open, its kernels' launch
/// templates still registered. Dropped as [`Kept`] is.
pub struct KeptModule {
    resident: ManuallyDrop<Rc<Resident>>,
    opened: u32,
    /// Its code buffer's address, copied so that reading it needs no access to the shared module.
    code_va: u64,
}

// SAFETY: the shared count and the buffers behind `resident` are touched only by `get` (inside a scope, so
// on the lock holder's thread; the clones it hands out are `Module<'s>` and `Kernel<'s>`, which are not
// `Send` and end with that scope, before the lock can pass to another thread) and by `drop`, which touches
// them only on a thread that holds the lock. Every access is therefore ordered by the lock's mutex.
unsafe impl Send for KeptModule {}

impl KeptModule {
    /// The module, inside scope `scope`; refused (stage `keep`) once the device it was loaded on was
    /// closed.
    pub fn get<'s>(&self, scope: &'s Scope<'s>) -> Result<Module<'s>> {
        let _ = scope;
        check_open(self.opened)?;
        Ok(Module::from_resident(Rc::clone(&self.resident)))
    }

    /// True while the device open that loaded it is the one open now.
    pub fn is_current(&self) -> bool {
        let rt = runtime();
        rt.open_count() == self.opened && rt.is_open()
    }

    /// GPU address of the module's code buffer.
    pub fn code_va(&self) -> u64 {
        self.code_va
    }
}

impl Drop for KeptModule {
    fn drop(&mut self) {
        if releasable(self.opened) {
            // SAFETY: dropped once, here, and never used again (this is the value's own drop).
            unsafe { ManuallyDrop::drop(&mut self.resident) };
        }
        // Otherwise the count is left alone: this thread does not hold the lock (another thread's scope may
        // be cloning it) or the device was closed, which freed the module's buffers already.
    }
}

impl core::fmt::Debug for KeptModule {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KeptModule").field("code_va", &self.code_va()).field("opened", &self.opened).finish()
    }
}

impl<'s> Scope<'s> {
    /// Keeps `mem` beyond this scope, for as long as the device stays open (see [`Kept`]).
    pub fn keep<K: MemKind>(&'s self, mem: Mem<'s, K>) -> Kept<K> {
        Kept { mem: mem.into_static(), opened: runtime().open_count() }
    }

    /// Keeps `module` beyond this scope, for as long as the device stays open (see [`KeptModule`]).
    pub fn keep_module(&'s self, module: Module<'s>) -> KeptModule {
        let resident = Rc::clone(module.resident());
        let code_va = resident.code().va();
        KeptModule { resident: ManuallyDrop::new(resident), opened: runtime().open_count(), code_va }
    }
}
