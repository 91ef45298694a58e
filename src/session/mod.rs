//! The session layer: the contract's semantics, checked at run time.
//!
//! [`Runtime`] is the process-wide session of the contract — one device, one channel, one lock — made a
//! value so loom models and tests can build private ones; [`runtime()`] is the process's own. The typed
//! API ([`crate::Locked`]) and the C layer are both thin shells over it: every check lives here once.
//!
//! Lock discipline (docs/lock-discipline.md): calls that touch the device need the caller to hold the
//! session lock, and check that the calling thread does; [`Runtime::close`] takes the lock itself;
//! [`Runtime::cancel`] and [`Runtime::is_blocked`] are atomics, safe from any thread.

mod launch;
mod memory;
pub use memory::AllocKind;
pub mod types;

pub use launch::{round_gpr, Completion as LaunchCompletion, KernelMeta, LaunchSpec, ParamInfo};
pub use types::*;

use std::collections::{BTreeMap, HashMap};

use omega_hal::{check_buffer, negotiate, Allocation, BufferDesc, DeviceInfo, HandleTable, Platform, Services};

use crate::error::{Error, Result};
use crate::platform::{Installed, PlatformKind};
use crate::sync::{self, thread, Arc, AtomicBool, AtomicU32, Mutex, Ordering};

/// A hook run by close before the device goes away (lets a library drop its resident kernels).
pub type CloseHook = Box<dyn FnMut() + Send>;

/// A session buffer.
pub(crate) struct Buf {
    pub(crate) alloc: Allocation,
    pub(crate) kind: u32,
    pub(crate) parked: bool,
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
}

/// The process-wide session.
pub struct Runtime {
    installed: Mutex<Option<Installed>>,
    /// The platform whose lock the holder took, so unlock releases that one even if the platform changed.
    lock_platform: Mutex<Option<Arc<dyn Platform>>>,
    owner: Mutex<Option<thread::ThreadId>>,
    pub(crate) session: Mutex<Session>,
    pub(crate) latched: AtomicBool,
    pub(crate) cancel: AtomicBool,
    spin_us: AtomicU32,
    open_count: AtomicU32,
    last_error: Mutex<String>,
    hooks: Mutex<Vec<CloseHook>>,
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
            }),
            latched: AtomicBool::new(false),
            cancel: AtomicBool::new(false),
            spin_us: AtomicU32::new(0),
            open_count: AtomicU32::new(0),
            last_error: Mutex::new(String::new()),
            hooks: Mutex::new(Vec::new()),
        }
    }

    /// A runtime with `installed` as its platform.
    pub fn with_platform(installed: Installed) -> Self {
        let rt = Self::new();
        *sync::lock(&rt.installed) = Some(installed);
        rt
    }

    // ----- platform -------------------------------------------------------------------------------

    /// The installed platform, installing the environment's choice on first use.
    pub fn installed(&self) -> Result<Installed> {
        let mut slot = sync::lock(&self.installed);
        if let Some(i) = slot.as_ref() {
            return Ok(i.clone());
        }
        let i = Installed::new(PlatformKind::from_env()?)?;
        *slot = Some(i.clone());
        Ok(i)
    }

    /// The installed platform's name, installing the default first; `None` when none can be installed.
    pub fn platform_name(&self) -> Option<&'static str> {
        self.installed().ok().map(|i| i.name())
    }

    /// Replaces the platform. Caller holds the lock; the device must be closed and the process not latched.
    pub fn set_platform(&self, kind: PlatformKind) -> Result<()> {
        let i = Installed::new(kind).or_else(|e| self.fail(e))?;
        self.install(i)
    }

    /// Installs a given platform (a configured simulator, say). Same rules as [`Runtime::set_platform`].
    pub fn install(&self, installed: Installed) -> Result<()> {
        self.require_lock("set platform")?;
        if self.is_blocked() {
            return self.fail(Error::Latched("set platform"));
        }
        if self.is_open() {
            return self.fail(Error::Setting { stage: "set platform", detail: "close the device first".into() });
        }
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
    /// forever, as the contract documents. With no platform, or one without a LOCK service, does nothing.
    pub fn lock(&self) {
        let Ok(i) = self.installed() else { return };
        let Some(l) = i.platform.lock() else { return };
        l.lock(LOCK_ID);
        *sync::lock(&self.lock_platform) = Some(i.platform.clone());
        *sync::lock(&self.owner) = Some(thread::current().id());
    }

    /// Takes the session lock if it is free.
    pub fn try_lock(&self) -> bool {
        let Ok(i) = self.installed() else { return false };
        let Some(l) = i.platform.lock() else { return false };
        if !l.try_lock(LOCK_ID) {
            return false;
        }
        *sync::lock(&self.lock_platform) = Some(i.platform.clone());
        *sync::lock(&self.owner) = Some(thread::current().id());
        true
    }

    /// Releases the session lock. Refused (recorded in last_error) from a thread that does not hold it.
    pub fn unlock(&self) {
        if !self.holds_lock() {
            self.set_error(&Error::Lock("unlock from a thread that does not hold the session lock"));
            return;
        }
        *sync::lock(&self.owner) = None;
        let p = sync::lock(&self.lock_platform).take();
        if let Some(l) = p.as_ref().and_then(|p| p.lock()) {
            // SAFETY: `holds_lock` confirmed this thread took the lock of this very platform (recorded in
            // `lock_platform` by `lock`/`try_lock`) and has not released it.
            unsafe { l.unlock(LOCK_ID) };
        }
    }

    /// True when the calling thread holds the session lock.
    pub fn holds_lock(&self) -> bool {
        *sync::lock(&self.owner) == Some(thread::current().id())
    }

    pub(crate) fn require_lock(&self, stage: &'static str) -> Result<()> {
        if self.holds_lock() {
            Ok(())
        } else {
            let _ = stage;
            self.fail(Error::Lock("the calling thread does not hold the session lock (take it first)"))
        }
    }

    // ----- errors ---------------------------------------------------------------------------------

    /// Records `e` as the process-wide last error and returns it.
    pub(crate) fn fail<T>(&self, e: Error) -> Result<T> {
        self.set_error(&e);
        Err(e)
    }

    /// Sets the process-wide error text (libraries name their own stage through it).
    pub fn set_error(&self, e: &dyn std::fmt::Display) {
        *sync::lock(&self.last_error) = e.to_string();
    }

    /// The stage of the most recent failure, "" if none.
    pub fn last_error(&self) -> String {
        sync::lock(&self.last_error).clone()
    }

    // ----- open / close ---------------------------------------------------------------------------

    /// Opens the device on first use (caller holds the lock). Refused after a latch.
    pub fn open(&self) -> Result<()> {
        self.require_lock("open")?;
        if self.is_blocked() {
            return self.fail(Error::Latched("open"));
        }
        let i = match self.installed() {
            Ok(i) => i,
            Err(e) => return self.fail(e),
        };
        let mut s = sync::lock(&self.session);
        if s.device.is_some() {
            return Ok(());
        }
        if let Err(r) = negotiate(&i.platform.caps(), Services::SESSION) {
            drop(s);
            return self.fail(Error::Refused(r));
        }
        let dev = i.platform.device().expect("negotiated DEVICE");
        // SAFETY: the caller holds the session lock (checked above) and the device is not open (`device`
        // is None under the session mutex).
        let info = match unsafe { dev.open() } {
            Ok(info) => info,
            Err(e) => {
                drop(s);
                return self.fail(Error::Open(e));
            }
        };
        let desc = BufferDesc {
            bytes: i.platform.caps().page_bytes,
            rights: omega_hal::Rights::HOST_POLLED
                | omega_hal::Rights::GPU_WRITE
                | omega_hal::Rights::CPU_READ
                | omega_hal::Rights::CPU_WRITE,
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
                return self.fail(Error::Open(e));
            }
        };
        let h = s.buffers.open(Buf { alloc: markers, kind: HANDLE_BUF_QUEUE, parked: false });
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
    /// Refused (a no-op, recorded) after a latch.
    pub fn close(&self) -> Result<()> {
        if self.holds_lock() {
            // The contract's C lock would deadlock here; in Rust we say so instead of hanging.
            return self.fail(Error::Lock("close takes the session lock itself: call it without the lock"));
        }
        self.lock();
        let r = self.close_locked();
        self.unlock();
        r
    }

    /// Close with the lock already held by the caller (the typed API's `Locked<Open>::close`).
    pub(crate) fn close_locked(&self) -> Result<()> {
        if self.is_blocked() {
            return self.fail(Error::Latched("close"));
        }
        if !self.is_open() {
            return Ok(());
        }
        let mut hooks = std::mem::take(&mut *sync::lock(&self.hooks));
        for h in hooks.iter_mut() {
            h();
        }
        let i = self.installed()?;
        let mut s = sync::lock(&self.session);
        let mem = i.platform.memory().expect("negotiated at open");
        for b in s.buffers.close_all() {
            // SAFETY: not latched, so every launch completed with both markers observed; the lock is held;
            // every allocation in the table is live and freed once (close_all empties the table).
            unsafe { mem.free(&b.alloc) };
            if b.kind != HANDLE_BUF_QUEUE {
                s.stats.frees += 1;
            }
        }
        s.markers = None;
        s.templates.clear();
        s.code_ranges.clear();
        s.device = None;
        s.channel_fault = None;
        s.max_param_bytes = 0;
        s.launch_limits = None;
        let dev = i.platform.device().expect("negotiated at open");
        // SAFETY: lock held, device open, nothing in flight (synchronous launches, not latched), every
        // allocation freed above.
        unsafe { dev.close() };
        Ok(())
    }

    // ----- settings -------------------------------------------------------------------------------

    /// Sets the process-wide spin window; refused above [`MAX_SPIN_US`] (setting unchanged).
    pub fn set_spin_us(&self, us: u32) -> Result<()> {
        if us > MAX_SPIN_US {
            return self.fail(Error::Setting {
                stage: "set spin",
                detail: format!("{us} us is above the maximum of {MAX_SPIN_US} us"),
            });
        }
        self.spin_us.store(us, Ordering::SeqCst);
        Ok(())
    }

    /// The process-wide spin window.
    pub fn spin_us(&self) -> u32 {
        self.spin_us.load(Ordering::SeqCst)
    }

    /// Registers a hook that close runs before the device goes away (up to [`ON_CLOSE_MAX`]).
    pub fn on_close(&self, hook: CloseHook) -> Result<()> {
        let mut hooks = sync::lock(&self.hooks);
        if hooks.len() >= ON_CLOSE_MAX {
            drop(hooks);
            return self.fail(Error::Setting { stage: "on close", detail: format!("at most {ON_CLOSE_MAX} hooks") });
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
