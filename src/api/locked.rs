//! The lock token and its states: `Locked<Closed>` → `open()` → `Locked<Open>` → `scope(..)`, and
//! `Latched`, the state an uncertain completion leaves the process in.
//!
//! The token is the session lock: zero-sized, released on drop, not `Send` (the lock belongs to the
//! thread that took it). `let _ = omega::lock();` takes and immediately releases it — bind it to a name.
//! It is not re-entrant: taking it again on the same thread waits forever, as the contract's lock does.
//! While a token lives the lock is pinned: the raw `Runtime::unlock` (and `omega_gpu_session_unlock`) is
//! refused on its thread, so no safe call can hand the lock to another thread that would close the device
//! under the scope's buffers. Only the token's drop releases it.

use core::marker::PhantomData;

use crate::error::{Error, Result};
use crate::platform::PlatformKind;
use crate::session::{runtime, MemInfo, MemoryStats, ParkStats, Recovery, PIN_TOKEN};
use crate::state::{Closed, DeviceState, Open};
use crate::DeviceInfo;
use crate::Scope;
use crate::{Gpu, Scoped};

/// The session lock, held, with the device in state `S`.
#[must_use = "the lock is released as soon as this token is dropped"]
pub struct Locked<S: DeviceState> {
    _state: PhantomData<S>,
    _not_send: PhantomData<*const ()>,
}

static_assertions::assert_eq_size!(Locked<Open>, ());
static_assertions::assert_not_impl_any!(Locked<Open>: Send, Sync);
static_assertions::assert_not_impl_any!(Latched: Send, Sync);

/// Takes the process-wide session lock, blocking until it is free.
pub fn lock() -> Locked<Closed> {
    let rt = runtime();
    // Refused only inside an on-close hook, on the thread that runs close and holds the lock already.
    let _ = rt.lock();
    rt.pin_lock(PIN_TOKEN);
    Locked { _state: PhantomData, _not_send: PhantomData }
}

/// Takes the session lock if no one holds it.
pub fn try_lock() -> Option<Locked<Closed>> {
    let rt = runtime();
    if !rt.try_lock().unwrap_or(false) {
        return None;
    }
    rt.pin_lock(PIN_TOKEN);
    Some(Locked { _state: PhantomData, _not_send: PhantomData })
}

impl<S: DeviceState> Locked<S> {
    /// Moves the held lock into another state without releasing it.
    fn into_state<T: DeviceState>(self) -> Locked<T> {
        core::mem::forget(self);
        Locked { _state: PhantomData, _not_send: PhantomData }
    }

    /// The installed platform's name ("sim" or "nvidia").
    pub fn platform(&self) -> &'static str {
        runtime().platform_name().unwrap_or("none")
    }

    /// True once an uncertain completion latched the process.
    pub fn is_blocked(&self) -> bool {
        runtime().is_blocked()
    }

    /// What the latch kept.
    pub fn parked(&self) -> ParkStats {
        runtime().parked()
    }
}

impl<S: DeviceState> Drop for Locked<S> {
    fn drop(&mut self) {
        // Refused only where there was no lock to take (no platform installs): the open already
        // returned that failure to the caller.
        let _ = runtime().unlock_pinned(PIN_TOKEN);
    }
}

/// Why `open` failed, with the lock handed back.
#[derive(Debug)]
pub struct OpenError {
    /// The lock, still held.
    pub lock: Locked<Closed>,
    /// What failed (its text names the stage, and carries the driver's words for a driver refusal).
    pub error: Error,
}

impl core::fmt::Debug for Locked<Closed> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Locked<Closed>")
    }
}

impl core::fmt::Display for OpenError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for OpenError {}

/// `?` on an open in a function returning [`Error`]: the error is kept and the lock it carried is
/// released (dropped) on the way out.
impl From<OpenError> for Error {
    fn from(e: OpenError) -> Error {
        e.error
    }
}

impl Locked<Closed> {
    /// Opens the device (or finds it open). Refused after a latch.
    pub fn open(self) -> core::result::Result<Locked<Open>, OpenError> {
        match runtime().open() {
            Ok(()) => Ok(self.into_state()),
            Err(error) => Err(OpenError { lock: self, error }),
        }
    }

    /// Chooses the platform for the next open (the device must be closed).
    pub fn set_platform(&self, kind: PlatformKind) -> Result<()> {
        runtime().set_platform(kind)
    }

    /// True while the device is open.
    pub fn is_open(&self) -> bool {
        runtime().is_open()
    }
}

impl Locked<Open> {
    /// What the device is.
    pub fn device(&self) -> DeviceInfo {
        runtime().device_info().expect("the token proves the device is open")
    }

    /// Runs `f` with the session's memory and its launch token.
    ///
    /// Buffers allocated in the scope cannot leave it, and the token cannot be used once a launch has
    /// latched (that launch consumed it). Every launch is synchronous, so when the scope ends the device
    /// is done with its buffers — unless a completion was uncertain, in which case the scope ends in
    /// [`Scoped::Latched`] and every buffer it freed was parked, never released.
    pub fn scope<R>(self, f: impl for<'s> FnOnce(&'s Scope<'s>, Gpu<'s>) -> R) -> Scoped<R> {
        let r = {
            let scope = Scope::new();
            f(&scope, Gpu::new())
        };
        if runtime().is_blocked() {
            core::mem::forget(self);
            Scoped::Latched(Latched::new(), r)
        } else {
            Scoped::Open(self, r)
        }
    }

    /// Free and total device memory now, as the platform reports them (on the GPU the driver's figures,
    /// which count every process's allocations, the session's own chunks included).
    pub fn mem_info(&self) -> Result<MemInfo> {
        runtime().mem_info()
    }

    /// What the session's memory manager holds: its chunks, what is carved from them, its direct
    /// allocations.
    pub fn memory_stats(&self) -> MemoryStats {
        runtime().memory_stats()
    }

    /// Closes the device, freeing every session buffer; the lock stays held.
    pub fn close(self) -> Locked<Closed> {
        // Not latched (the token exists only while not latched), so close cannot be refused; the only
        // failure is a platform with no device, which leaves it closed all the same.
        let _ = runtime().close_locked();
        self.into_state()
    }
}

/// The process after an uncertain completion: the lock is held, and no launch, close or reopen can be
/// written — this type has none of them. Its drop releases the lock; the process stays latched.
#[must_use = "dropping the latch token releases the lock"]
pub struct Latched {
    _not_send: PhantomData<*const ()>,
}

impl Latched {
    fn new() -> Self {
        Latched { _not_send: PhantomData }
    }

    /// What the latch kept.
    pub fn parked(&self) -> ParkStats {
        runtime().parked()
    }

    /// The failure that latched the process (its stage is [`Error::stage`]).
    pub fn cause(&self) -> Error {
        runtime().latch_cause().expect("the token exists only once the process latched, and a latch keeps its cause")
    }

    /// EXPERIMENTAL. Recovers from the latch: the platform stops the work and tears down its channel, the
    /// parked buffers are watched for a heartbeat that must have stopped, and only then is everything the
    /// latch kept released and the device closed. Gives back the lock with the device closed (open it
    /// again to go on in this process) and what the recovery did; or, when the stop could not be proved,
    /// this latch and the reason ([`crate::error::RecoverError`]), with nothing released.
    pub fn recover(self) -> core::result::Result<(Locked<Closed>, Recovery), RecoverFailed> {
        match runtime().recover_locked() {
            Ok(report) => {
                core::mem::forget(self);
                Ok((Locked { _state: PhantomData, _not_send: PhantomData }, report))
            }
            Err(error) => Err(RecoverFailed { latch: self, error }),
        }
    }
}

/// A recovery that could not prove the device stopped the latched work: the process is still latched.
#[derive(Debug)]
pub struct RecoverFailed {
    /// The latch, still held.
    pub latch: Latched,
    /// Why (stage `recover`; [`Error::Recover`] carries the reason as data).
    pub error: Error,
}

impl core::fmt::Display for RecoverFailed {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for RecoverFailed {}

/// `?` on a recovery in a function returning [`Error`]: the error is kept and the latch it carried
/// dropped (releasing the lock; the process stays latched).
impl From<RecoverFailed> for Error {
    fn from(e: RecoverFailed) -> Error {
        e.error
    }
}

impl core::fmt::Debug for Latched {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Latched").field("parked", &self.parked()).finish()
    }
}

impl Drop for Latched {
    fn drop(&mut self) {
        // The token exists only while this thread holds the lock, so the release is not refused.
        let _ = runtime().unlock_pinned(PIN_TOKEN);
    }
}
