//! The session layer: the contract's semantics, checked at run time.
//!
//! [`Runtime`] is the process-wide session of the contract — one device, one channel, one lock — made a
//! value so loom models and tests can build private ones; [`runtime()`] is the process's own. The typed
//! API ([`crate::Locked`]) and the C layer are both thin shells over it: every check lives here once.
//!
//! Lock discipline (docs/lock-discipline.md): calls that touch the device need the caller to hold the
//! session lock, and check that the calling thread does; [`Runtime::close`] takes the lock itself;
//! [`Runtime::cancel`] and [`Runtime::is_blocked`] are atomics, safe from any thread.
//!
//! Why every public function here is safe, although a [`GpuMem`] is a plain copyable value with a raw CPU
//! pointer: the only code that dereferences a CPU view without `unsafe` at the call site is the library's
//! own (a typed [`crate::Mem`], a command list's stamp area, a job-engine run, the launch markers), and
//! each of those buffers is tagged with its owner (`Owner::Internal`): the caller's [`Runtime::free`]
//! and scratch calls refuse it, whatever copy of its handle they are given. The one other way to release
//! memory, [`Runtime::close`], needs the session lock, and the library pins the lock while it holds CPU
//! views across code it does not control: [`Runtime::unlock`] is refused while a typed lock token lives
//! on the thread, during a job-engine run on the session backend, and inside the on-close hooks. A
//! platform instance belongs to one runtime ([`Runtime::with_platform`]), so no second runtime can close
//! a device under the first or miss its latch.

mod caps;
mod launch;
mod memory;
pub use memory::{AllocKind, MemoryStats};
mod recover;
mod serving;
pub use omega_hal::{DriverCall, DriverStats};
pub use recover::{Recovery, WATCH_BYTES, WATCH_INTERVAL_US};
pub mod suballoc;
pub mod types;
pub(crate) mod wait;

pub use launch::{
    launch_gpr, resident_ctas, round_gpr, Completion as LaunchCompletion, KernelMeta, LaunchShape, LaunchSpec,
    ParamInfo,
};
pub use types::*;

use std::collections::{BTreeMap, HashMap};

use omega_hal::{check_buffer, negotiate, Allocation, BufferDesc, HandleTable, Platform, Refusal, Services};

use crate::error::{Error, Result, Stage};
use crate::platform::{Installed, PlatformKind};
use crate::sync::{self, thread, Arc, AtomicBool, AtomicU32, Mutex, Ordering};

/// A hook run by close before the device goes away (lets a library drop its resident kernels). It runs on
/// the closing thread with the lock held and may only release buffers and read state: every other call
/// that needs the lock, and unlock, are refused inside it (stage `on close`). A hook that panics does not
/// stop the close: the other hooks run, the buffers are released, the lock is released, and then the
/// panic goes on.
pub type CloseHook = Box<dyn FnMut() + Send>;

/// Who may release a session buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    /// The caller's (C, or the raw [`Runtime`] API): released by [`Runtime::free`] and the scratch calls.
    Caller,
    /// The library's own, named: only the library releases it (and close); the caller's free refuses it.
    Internal(&'static str),
}

/// The session's marker buffer.
pub(crate) const LAUNCH_BUFFER: Owner = Owner::Internal("the session's own launch buffer");
/// A command list's stamp area.
pub(crate) const STAMP_AREA: Owner = Owner::Internal("a command list's stamp area");
/// The buffer of a typed [`crate::Mem`].
pub(crate) const TYPED_BUFFER: Owner = Owner::Internal("the buffer of a typed omega::Mem, released by its drop");
/// A buffer of a job-engine run.
pub(crate) const ENGINE_BUFFER: Owner = Owner::Internal("a buffer of a job-engine run");
/// The session's device printf buffer (the device appends records, the drain reads them).
pub(crate) const PRINTF_BUFFER: Owner = Owner::Internal("the session's device printf buffer");
/// The code buffer of the session's device printf library (Omega's `vprintf`).
pub(crate) const PRINTF_LIBRARY: Owner = Owner::Internal("the session's device printf library (Omega's vprintf)");

/// Who pins the lock while it holds CPU views across code it does not control.
pub(crate) const PIN_TOKEN: &str = "a typed lock token (omega::Locked or omega::Latched)";
/// A job-engine run on the session backend.
pub(crate) const PIN_ENGINE: &str = "a job-engine run";
/// The on-close hooks.
pub(crate) const PIN_CLOSE: &str = "close, running its on-close hooks";
/// Device printf's output callback, called with the drained text after a launch.
pub(crate) const PIN_PRINTF: &str = "device printf's output callback";

/// A session buffer.
pub(crate) struct Buf {
    /// The buffer as its holder sees it: GPU address, CPU view and page-rounded bytes. For a buffer carved
    /// from a chunk, `id` is the chunk's and the addresses are inside the chunk's.
    pub(crate) alloc: Allocation,
    /// Where its memory comes from.
    pub(crate) backing: Backing,
    pub(crate) kind: u32,
    pub(crate) parked: bool,
    pub(crate) owner: Owner,
    /// The reserved size while a scratch reservation on this buffer is active.
    pub(crate) reserved: Option<usize>,
}

/// Where a session buffer's memory comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backing {
    /// A platform allocation of its own: `Buf::alloc` is it.
    Direct,
    /// A block of a chunk of the session's memory manager.
    Carved(suballoc::Carve),
}

impl Buf {
    /// A buffer that is a platform allocation of its own.
    pub(crate) fn new(alloc: Allocation, kind: u32, owner: Owner) -> Self {
        Buf { alloc, backing: Backing::Direct, kind, parked: false, owner, reserved: None }
    }
}

/// Session state. Only touched by the thread holding the session lock; the mutex around it is for
/// memory safety against callers that break the discipline, and is never contended by ones that keep it.
pub(crate) struct Session {
    pub(crate) device: Option<DeviceInfo>,
    pub(crate) buffers: HandleTable<Buf>,
    /// The session's own launch buffer: two markers and the per-launch stamps.
    pub(crate) markers: Option<(omega_hal::Handle, Allocation)>,
    pub(crate) sequence: u32,
    pub(crate) stats: AllocStats,
    pub(crate) park: ParkStats,
    pub(crate) parked_listed: Vec<omega_hal::Handle>,
    /// What each loaded kernel needs, by entry address (shared, so a launch clones a pointer).
    pub(crate) templates: HashMap<u64, Arc<KernelMeta>>,
    /// Live code buffers by base address, with their length: a launch's code address must fall in one.
    pub(crate) code_ranges: BTreeMap<u64, u64>,
    pub(crate) channel_fault: Option<omega_hal::ChannelFault>,
    /// The open platform's `caps().max_param_bytes` (0 while closed), so a launch need not ask for it.
    pub(crate) max_param_bytes: u32,
    /// The open platform's `caps().launch` (`None` while closed): what one launch may ask of the device.
    pub(crate) launch_limits: Option<omega_hal::LaunchLimits>,
    /// The stamp area of the submission in flight, by address (a command list's), so a latch parks it.
    pub(crate) in_flight_stamps: Option<u64>,
    /// The chunks small buffers are carved from (`suballoc.rs`), made for the open platform's page.
    pub(crate) carver: suballoc::Carver<Allocation>,
    /// Buffers that are a platform allocation of their own (the session's launch buffer included), and
    /// their bytes.
    pub(crate) direct: (u64, u64),
    /// Sealed for serving (`serving.rs`): nothing may ask the driver.
    pub(crate) sealed: bool,
    /// What was given back while sealed, given back to the platform at unseal.
    pub(crate) held_back: Vec<Allocation>,
}

/// The process-wide session.
pub struct Runtime {
    installed: Mutex<Option<Installed>>,
    /// The platform whose lock the holder took, so unlock releases that one even if the platform changed.
    lock_platform: Mutex<Option<Arc<dyn Platform>>>,
    owner: Mutex<Option<thread::ThreadId>>,
    /// Who pins the lock on which thread (innermost last): unlock is refused while the holder has a pin.
    pins: Mutex<Vec<(thread::ThreadId, &'static str)>>,
    /// True while close runs the on-close hooks (on the lock holder's thread).
    in_close_hooks: AtomicBool,
    /// This runtime's identity, which the platforms it claimed are bound to.
    identity: Arc<()>,
    pub(crate) session: Mutex<Session>,
    pub(crate) latched: AtomicBool,
    pub(crate) cancel: AtomicBool,
    spin_us: AtomicU32,
    open_count: AtomicU32,
    /// The failure that latched the process (`None` until one does).
    latch_cause: Mutex<Option<Error>>,
    hooks: Mutex<Vec<CloseHook>>,
    /// Device printf: the session's buffer and library, and where drained text goes.
    pub(crate) printf: crate::printf::PrintfState,
}

/// The process's runtime.
pub fn runtime() -> &'static Runtime {
    static RUNTIME: sync::OnceLock<Runtime> = sync::OnceLock::new();
    RUNTIME.get_or_init(Runtime::new)
}

impl Default for Runtime {
    fn default() -> Self {
        Self::new()
    }
}

impl Runtime {
    /// A runtime with no platform installed yet (the first call that needs one installs the default).
    pub fn new() -> Self {
        Runtime {
            installed: Mutex::new(None),
            lock_platform: Mutex::new(None),
            owner: Mutex::new(None),
            pins: Mutex::new(Vec::new()),
            in_close_hooks: AtomicBool::new(false),
            identity: Arc::new(()),
            session: Mutex::new(Session {
                device: None,
                buffers: HandleTable::new(),
                markers: None,
                sequence: 0,
                stats: AllocStats::default(),
                park: ParkStats::default(),
                parked_listed: Vec::new(),
                templates: HashMap::new(),
                code_ranges: BTreeMap::new(),
                channel_fault: None,
                max_param_bytes: 0,
                launch_limits: None,
                in_flight_stamps: None,
                carver: suballoc::Carver::new(4096),
                direct: (0, 0),
                sealed: false,
                held_back: Vec::new(),
            }),
            latched: AtomicBool::new(false),
            cancel: AtomicBool::new(false),
            spin_us: AtomicU32::new(0),
            open_count: AtomicU32::new(0),
            latch_cause: Mutex::new(None),
            hooks: Mutex::new(Vec::new()),
            printf: crate::printf::PrintfState::new(),
        }
    }

    /// A runtime with `installed` as its platform.
    ///
    /// A platform instance belongs to the first runtime that takes it, for as long as the instance
    /// exists: its latch, its buffers and its lock discipline are the device's, and a second runtime on it
    /// would open the open device again, miss its latch and release its parked buffers at close. So a
    /// platform another runtime holds (`Runtime::with_platform(runtime().installed()?)`, say) is refused
    /// with stage `platform`; use that runtime, or a platform instance of your own.
    pub fn with_platform(installed: Installed) -> Result<Self> {
        let rt = Self::new();
        crate::platform::claim(&installed.platform, &rt.identity)?;
        *sync::lock(&rt.installed) = Some(installed);
        Ok(rt)
    }

    // ----- platform -------------------------------------------------------------------------------

    /// The installed platform, installing the environment's choice on first use.
    pub fn installed(&self) -> Result<Installed> {
        let mut slot = sync::lock(&self.installed);
        if let Some(i) = slot.as_ref() {
            return Ok(i.clone());
        }
        let i = Installed::new(PlatformKind::from_env()?)?;
        crate::platform::claim(&i.platform, &self.identity)?;
        *slot = Some(i.clone());
        Ok(i)
    }

    /// The installed platform's name, installing the default first; `None` when none can be installed.
    pub fn platform_name(&self) -> Option<&'static str> {
        self.installed().ok().map(|i| i.name())
    }

    /// Replaces the platform. Caller holds the lock; the device must be closed and the process not latched.
    pub fn set_platform(&self, kind: PlatformKind) -> Result<()> {
        let i = Installed::new(kind)?;
        self.install(i)
    }

    /// Installs a given platform (a configured simulator, say). Same rules as [`Runtime::set_platform`];
    /// a platform instance another runtime holds is refused (stage `platform`, see
    /// [`Runtime::with_platform`]).
    pub fn install(&self, installed: Installed) -> Result<()> {
        self.require_lock(Stage::SetPlatform)?;
        if self.is_blocked() {
            return Err(Error::Latched(Stage::SetPlatform));
        }
        if self.is_open() {
            return Err(Error::Setting {
                stage: Stage::SetPlatform,
                detail: crate::error::SettingError::CloseDeviceFirst,
            });
        }
        crate::platform::claim(&installed.platform, &self.identity)?;
        *sync::lock(&self.installed) = Some(installed);
        Ok(())
    }

    /// The most bytes of parameters a launch may pass on the installed platform: the value cached at open
    /// while the device is open, else the platform's caps.
    pub(crate) fn max_param_bytes(&self) -> Result<u32> {
        let cached = sync::lock(&self.session).max_param_bytes;
        if cached != 0 {
            return Ok(cached);
        }
        Ok(self.installed()?.platform.caps().max_param_bytes)
    }

    /// Nanoseconds on the platform clock (0 with no platform).
    pub fn now_ns(&self) -> u64 {
        self.installed().ok().and_then(|i| i.platform.clock().map(|c| c.now_ns())).unwrap_or(0)
    }

    // ----- lock -----------------------------------------------------------------------------------

    /// Takes the session lock (blocking). Non-recursive: a thread that holds it and takes it again waits
    /// forever, as the contract documents. With no platform, or one without a LOCK service, does nothing;
    /// every call that needs the lock then reports why there is none ([`Runtime::lock_unavailable`]).
    /// Inside an on-close hook (whose thread holds the lock already) it is refused (stage `on close`)
    /// instead of waiting forever: the one failure.
    pub fn lock(&self) -> Result<()> {
        if self.in_close_hook() {
            return Err(Error::CloseHook(Stage::Lock));
        }
        let Ok(i) = self.installed() else { return Ok(()) };
        let Some(l) = i.platform.lock() else { return Ok(()) };
        l.lock(LOCK_ID);
        *sync::lock(&self.lock_platform) = Some(i.platform.clone());
        *sync::lock(&self.owner) = Some(thread::current().id());
        Ok(())
    }

    /// Takes the session lock if it is free: true when it did; false when another thread holds it, or
    /// there is no lock (as for [`Runtime::lock`]). Refused inside an on-close hook, as `lock` is.
    pub fn try_lock(&self) -> Result<bool> {
        if self.in_close_hook() {
            return Err(Error::CloseHook(Stage::Lock));
        }
        let Ok(i) = self.installed() else { return Ok(false) };
        let Some(l) = i.platform.lock() else { return Ok(false) };
        if !l.try_lock(LOCK_ID) {
            return Ok(false);
        }
        *sync::lock(&self.lock_platform) = Some(i.platform.clone());
        *sync::lock(&self.owner) = Some(thread::current().id());
        Ok(true)
    }

    /// Releases the session lock. Refused (the lock left as it was) from a thread that does not hold it
    /// (where there is no lock to hold, the refusal is why: the platform's failure, not a lock misuse),
    /// and while the lock is pinned on this thread: by a typed lock token (which releases it when
    /// dropped), by a job-engine run on the session backend (a clock callback), or by close running its
    /// on-close hooks. Each of those holds CPU views of session buffers across code it does not control;
    /// releasing the lock under it would let another thread close the device.
    pub fn unlock(&self) -> Result<()> {
        if !self.holds_lock() {
            return Err(self.unlock_refusal());
        }
        let me = thread::current().id();
        let pinned = sync::lock(&self.pins).iter().rev().find(|(t, _)| *t == me).map(|(_, by)| *by);
        if let Some(by) = pinned {
            return Err(Error::LockPinned(by));
        }
        self.release_lock();
        Ok(())
    }

    fn release_lock(&self) {
        *sync::lock(&self.owner) = None;
        let p = sync::lock(&self.lock_platform).take();
        if let Some(l) = p.as_ref().and_then(|p| p.lock()) {
            // SAFETY: the caller (`unlock`, `unlock_pinned`) confirmed this thread holds the lock, which it
            // took from this very platform (recorded in `lock_platform` by `lock`/`try_lock`) and has not
            // released.
            unsafe { l.unlock(LOCK_ID) };
        }
    }

    /// Pins the lock on this thread for `by`: [`Runtime::unlock`] is refused until [`Runtime::unpin_lock`].
    pub(crate) fn pin_lock(&self, by: &'static str) {
        sync::lock(&self.pins).push((thread::current().id(), by));
    }

    /// Removes this thread's innermost pin by `by`, if there is one.
    pub(crate) fn unpin_lock(&self, by: &'static str) {
        let me = thread::current().id();
        let mut pins = sync::lock(&self.pins);
        if let Some(i) = pins.iter().rposition(|p| *p == (me, by)) {
            pins.remove(i);
        }
    }

    /// Removes the pin by `by` and releases the lock (what a typed token's drop does). Refused, as
    /// [`Runtime::unlock`] is, when this thread does not hold it.
    pub(crate) fn unlock_pinned(&self, by: &'static str) -> Result<()> {
        self.unpin_lock(by);
        if !self.holds_lock() {
            return Err(self.unlock_refusal());
        }
        self.release_lock();
        Ok(())
    }

    /// Why an unlock from a thread that does not hold the lock released nothing: where there is no lock
    /// to hold, the platform's failure (the real cause), else the lock misuse.
    fn unlock_refusal(&self) -> Error {
        self.lock_unavailable().unwrap_or(Error::Lock("unlock from a thread that does not hold the session lock"))
    }

    /// True when the calling thread holds the session lock.
    pub fn holds_lock(&self) -> bool {
        *sync::lock(&self.owner) == Some(thread::current().id())
    }

    /// True on the thread that runs the on-close hooks, while it runs them.
    fn in_close_hook(&self) -> bool {
        self.in_close_hooks.load(Ordering::SeqCst) && self.holds_lock()
    }

    /// The gate of every call that touches the device: the calling thread holds the lock, and is not
    /// inside an on-close hook (a hook may only release buffers).
    pub(crate) fn require_lock(&self, stage: Stage) -> Result<()> {
        self.require_lock_to_release(stage)?;
        // This thread holds the lock, and only the holder runs the hooks: the flag alone says it is in one.
        if self.in_close_hooks.load(Ordering::SeqCst) {
            return Err(Error::CloseHook(stage));
        }
        Ok(())
    }

    /// The gate of the calls that release buffers, which an on-close hook may make: the lock only.
    pub(crate) fn require_lock_to_release(&self, stage: Stage) -> Result<()> {
        if self.holds_lock() {
            return Ok(());
        }
        let _ = stage;
        match self.lock_unavailable() {
            Some(e) => Err(e),
            None => Err(Error::Lock("the calling thread does not hold the session lock (take it first)")),
        }
    }

    /// Why [`Runtime::lock`] cannot take a lock at all: no platform installs (stage `platform`, with the
    /// platform's own reason), or the installed one has no LOCK service. `None` when there is a lock.
    pub(crate) fn lock_unavailable(&self) -> Option<Error> {
        match self.installed() {
            Err(e) => Some(e),
            Ok(i) if i.platform.lock().is_none() => Some(Error::Refused(Refusal::MissingService(Services::LOCK))),
            Ok(_) => None,
        }
    }

    /// For the calls that take the lock themselves (close, command-list create): refuses a caller that
    /// already holds it with `holder_refusal` (the contract's non-recursive lock would deadlock), reports
    /// the platform's failure when there is no lock to take, and otherwise takes the lock.
    pub(crate) fn lock_itself(&self, holder_refusal: &'static str) -> Result<()> {
        if self.holds_lock() {
            return Err(Error::Lock(holder_refusal));
        }
        if let Some(e) = self.lock_unavailable() {
            return Err(e);
        }
        self.lock()
    }

    // ----- the latch's cause -----------------------------------------------------------------------

    /// The failure that latched the process, `None` while it is not latched. (The core records no
    /// last error: each call returns its failure, and the C layer records what its callers read.)
    pub fn latch_cause(&self) -> Option<Error> {
        sync::lock(&self.latch_cause).clone()
    }

    /// Keeps `why` as the latch's cause; the first latch's stays.
    pub(crate) fn set_latch_cause(&self, why: &Error) {
        sync::lock(&self.latch_cause).get_or_insert_with(|| why.clone());
    }

    // ----- open / close ---------------------------------------------------------------------------

    /// Opens the device on first use (caller holds the lock). Refused after a latch.
    pub fn open(&self) -> Result<()> {
        self.require_lock(Stage::Open)?;
        if self.is_blocked() {
            return Err(Error::Latched(Stage::Open));
        }
        let i = self.installed()?;
        let mut s = sync::lock(&self.session);
        if s.device.is_some() {
            return Ok(());
        }
        if let Err(r) = negotiate(&i.platform.caps(), Services::SESSION) {
            drop(s);
            return Err(Error::Refused(r));
        }
        let dev = i.platform.device().expect("negotiated DEVICE");
        // SAFETY: the caller holds the session lock (checked above) and the device is not open (`device`
        // is None under the session mutex).
        let info = match unsafe { dev.open() } {
            Ok(info) => info,
            Err(e) => {
                drop(s);
                return Err(Error::Open(e));
            }
        };
        let desc = BufferDesc {
            bytes: i.platform.caps().page_bytes,
            rights: memory::polled_rights(),
            cache: omega_hal::CachePolicy::Uncached,
            kind: omega_hal::BufferKind::Queue,
        };
        check_buffer(&desc).expect("the marker buffer descriptor is valid");
        let mem = i.platform.memory().expect("negotiated DEVICE_MEM");
        // SAFETY: the device is open and the caller holds the lock.
        let markers = match unsafe { mem.alloc(&desc) } {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: lock held, device open, nothing submitted, nothing allocated.
                unsafe { dev.close() };
                drop(s);
                return Err(Error::Open(e));
            }
        };
        let h = s.buffers.open(Buf::new(markers, HANDLE_BUF_QUEUE, LAUNCH_BUFFER));
        s.direct = (1, markers.bytes);
        s.carver = suballoc::Carver::new(i.platform.caps().page_bytes);
        s.markers = Some((h, markers));
        s.device = Some(info);
        s.channel_fault = None;
        s.max_param_bytes = i.platform.caps().max_param_bytes;
        s.launch_limits = Some(i.platform.caps().launch);
        drop(s);
        self.open_count.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// True while the device is open.
    pub fn is_open(&self) -> bool {
        sync::lock(&self.session).device.is_some()
    }

    /// What the open device reports.
    pub fn device_info(&self) -> Option<DeviceInfo> {
        sync::lock(&self.session).device.clone()
    }

    /// 1 once an uncertain completion latched this process. Any thread, no lock: one atomic load.
    pub fn is_blocked(&self) -> bool {
        self.latched.load(Ordering::SeqCst)
    }

    /// Device opens so far.
    pub fn open_count(&self) -> u32 {
        self.open_count.load(Ordering::SeqCst)
    }

    /// Closes the device and frees every session buffer. Takes the lock itself: call it without the lock.
    /// Refused (a no-op) after a latch, including one that happened in an on-close hook.
    ///
    /// A panic in an on-close hook does not leave the lock held: the close completes, the lock is
    /// released, and then the panic goes on to the caller (the C layer turns it into its failure value).
    pub fn close(&self) -> Result<()> {
        // The contract's C lock would deadlock for a holder; in Rust we say so instead of hanging. With no
        // platform there is no lock to take, and the platform's failure is what close returns.
        self.lock_itself("close takes the session lock itself: call it without the lock")?;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.close_locked()));
        if self.holds_lock() {
            self.release_lock();
        }
        match r {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Close with the lock already held by the caller (the typed API's `Locked<Open>::close`). A hook's
    /// panic is resumed once the device is closed.
    pub(crate) fn close_locked(&self) -> Result<()> {
        if self.is_blocked() {
            return Err(Error::Latched(Stage::Close));
        }
        if !self.is_open() {
            return Ok(());
        }
        let panic = self.run_close_hooks();
        let r = self.release_everything();
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
        r
    }

    /// Runs every on-close hook once, each under a pin of the lock and with the device calls refused; the
    /// first hook's panic is caught (the later hooks still run) and returned.
    fn run_close_hooks(&self) -> Option<Box<dyn std::any::Any + Send>> {
        let mut hooks = std::mem::take(&mut *sync::lock(&self.hooks));
        let mut first_panic = None;
        self.pin_lock(PIN_CLOSE);
        self.in_close_hooks.store(true, Ordering::SeqCst);
        for h in hooks.iter_mut() {
            if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(h)) {
                first_panic.get_or_insert(p);
            }
        }
        self.in_close_hooks.store(false, Ordering::SeqCst);
        self.unpin_lock(PIN_CLOSE);
        first_panic
    }

    /// The rest of close, after the hooks: refused when the process latched (a hook cannot launch, but the
    /// check belongs here whatever happened before), else every buffer is released and the device closed.
    fn release_everything(&self) -> Result<()> {
        if self.is_blocked() {
            return Err(Error::Latched(Stage::Close));
        }
        let i = self.installed()?;
        self.release_all(&i)
    }

    /// Releases every session buffer and chunk and closes the device. The caller holds the lock and knows
    /// that nothing on the device touches any of it: the process is not latched (close), or a recovery
    /// proved the work stopped.
    fn release_all(&self, i: &Installed) -> Result<()> {
        // The printf buffer and library are session buffers: freed below with the rest.
        self.printf.forget_session();
        let mut s = sync::lock(&self.session);
        // Closing ends a seal: what it held back goes first, with everything else.
        // SAFETY: as for every buffer below; the held-back ones were given back by `release_buf`.
        unsafe { s.unseal(&*i.platform) };
        let mem = i.platform.memory().expect("negotiated at open");
        for b in s.buffers.close_all() {
            if b.backing == Backing::Direct {
                // SAFETY: not latched (checked after the hooks, and nothing but this thread, which holds
                // the lock, can latch), so every launch completed with both markers observed — or a
                // recovery proved the device stopped the latched work (its stop succeeded and the heartbeat
                // stood still); the lock is held; every direct allocation in the table is live and freed
                // once (close_all empties the table).
                unsafe { mem.free(&b.alloc) };
            }
            if b.kind != HANDLE_BUF_QUEUE {
                s.stats.frees += 1;
            }
        }
        for chunk in s.carver.take_all() {
            // SAFETY: as above; every chunk the manager holds is a live allocation, handed back once
            // (take_all forgets them), and every buffer carved from it went with the table.
            unsafe { mem.free(&chunk) };
        }
        s.direct = (0, 0);
        s.markers = None;
        s.templates.clear();
        s.code_ranges.clear();
        s.device = None;
        s.channel_fault = None;
        s.max_param_bytes = 0;
        s.launch_limits = None;
        s.in_flight_stamps = None;
        let dev = i.platform.device().expect("negotiated at open");
        // SAFETY: lock held, device open, nothing in flight (synchronous launches, not latched, or the
        // latched work proved stopped), every allocation freed above.
        unsafe { dev.close() };
        Ok(())
    }

    // ----- settings -------------------------------------------------------------------------------

    /// Sets the process-wide spin window; refused above [`MAX_SPIN_US`] (setting unchanged).
    pub fn set_spin_us(&self, us: u32) -> Result<()> {
        if us > MAX_SPIN_US {
            return Err(Error::Setting {
                stage: Stage::SetSpin,
                detail: crate::error::SettingError::SpinTooLong { us, max: MAX_SPIN_US },
            });
        }
        self.spin_us.store(us, Ordering::SeqCst);
        Ok(())
    }

    /// The process-wide spin window.
    pub fn spin_us(&self) -> u32 {
        self.spin_us.load(Ordering::SeqCst)
    }

    /// Registers a hook that close runs before the device goes away (up to [`ON_CLOSE_MAX`]). What a hook
    /// may call: see [`CloseHook`].
    pub fn on_close(&self, hook: CloseHook) -> Result<()> {
        let mut hooks = sync::lock(&self.hooks);
        if hooks.len() >= ON_CLOSE_MAX {
            drop(hooks);
            return Err(Error::Setting {
                stage: Stage::OnClose,
                detail: crate::error::SettingError::TooManyHooks(ON_CLOSE_MAX),
            });
        }
        hooks.push(hook);
        Ok(())
    }

    /// Asks the launch in progress (or the next one) to stop: before submit it returns CANCELLED and runs
    /// nothing; after submit the chip cannot be stopped, so the process latches. Any thread, no lock.
    pub fn cancel(&self) {
        // A read-modify-write rather than a store: the same on hardware, and loom (0.7) models a plain
        // store racing the launch's `swap` wrongly (it can lose the store; tokio-rs/loom#254), which would
        // make the cancel model report a lost cancel that cannot happen.
        self.cancel.fetch_or(true, Ordering::SeqCst);
    }
}
