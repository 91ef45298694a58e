//! # A platform whose services are a C function table
//!
//! [`OmegaGpuPlatform`] is the platform contract as C sees it (`omega_gpu_platform.h`): the ABI numbers,
//! the caps, and one struct of function pointers per service, each called with the table's `ctx`.
//! [`TablePlatform`] implements [`Platform`] over such a table, so a C program can install services of
//! its own and the session drives them exactly as it drives `sim` or `nvidia`; [`export`] goes the other
//! way and fills a table whose callbacks run a Rust platform (how C gets the simulator's table, to forward
//! to or to wrap).
//!
//! Design choices:
//!
//! 1. **Flat, C-shaped data.** What crosses is `#[repr(C)]`: integers, and pointer-and-length pairs for
//!    the slices of a submission ([`abi`]). Enumerations cross as `u32` and are checked on the way in: a
//!    value no constant has is refused ([`Refusal::BadValue`]), never turned into a Rust enum.
//! 2. **The HAL's contracts are the callbacks' contracts.** Each service struct's `# Safety` list restates
//!    for C what the matching trait's unsafe methods require and promise. Installing a table is `unsafe`
//!    ([`TablePlatform::new`]): it is the promise that the callbacks keep those rules.
//! 3. **Checked before use.** [`check_for`] refuses a table whose ABI is foreign, whose caps are malformed,
//!    or that lacks a service or one of a declared service's functions, naming the service.
//! 4. **Errors keep the platform's words.** A failing callback fills an [`OmegaGpuPlatformError`] (a kind,
//!    a number, a text), which becomes the matching [`HalError`].

pub mod abi;
mod device;
mod export;
mod handles;
mod memory;
mod poll;
mod queue;
mod visibility;

pub use abi::*;
pub use export::export;
pub use handles::OpenRefused;

use core::ffi::{c_char, c_void};

use crate::caps::{negotiate, Caps, CodeFormat, Refusal, Services};
use crate::error::HalError;
use crate::queue::LaunchLimits;
use crate::sync::{Arc, AtomicBool, Ordering};
use crate::{Clock, CompletionPoll, Device, DeviceMemory, HostMemory, Platform, ProcessLock, SubmitQueue, Visibility};

/// `OMEGA_GPU_PLAT_ERR_*`: the kinds of failure a callback reports.
pub mod err {
    /// No device of this platform is present.
    pub const NO_DEVICE: u32 = 1;
    /// The device ran out of memory.
    pub const OUT_OF_MEMORY: u32 = 2;
    /// The driver refused the call (`status` is its status or errno).
    pub const DRIVER: u32 = 3;
    /// The driver's version is not one the platform knows.
    pub const UNSUPPORTED_DRIVER: u32 = 4;
    /// The device was lost.
    pub const LOST: u32 = 5;
    /// The platform cannot do this at all.
    pub const UNSUPPORTED: u32 = 6;
    /// The platform contract refused a descriptor (`status` is the `OMEGA_GPU_PLAT_*` refusal code).
    pub const REFUSED: u32 = 7;
}

/// `OMEGA_GPU_ORDER_*`: what must finish before a launch may start.
pub mod order {
    /// Every earlier launch of the submission.
    pub const AFTER_PREVIOUS: u32 = 0;
    /// Nothing: it may overlap the launch before it.
    pub const INDEPENDENT: u32 = 1;
    /// No ordering at all (test-only barrier mode).
    pub const UNORDERED: u32 = 2;
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn fit(s: &str, max: usize) -> usize {
    if s.len() <= max {
        return s.len();
    }
    (0..=max).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0)
}

/// Copies `s` into a fixed C char array, cut to fit at a character boundary and NUL-terminated (a NUL
/// inside `s` becomes a space, so it cannot end the text early).
pub fn write_c_text(dst: &mut [c_char], s: &str) {
    let Some(last) = dst.len().checked_sub(1) else { return };
    let n = fit(s, last);
    for (d, &b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = if b == 0 { b' ' } else { b } as c_char;
    }
    for d in &mut dst[n..] {
        *d = 0;
    }
}

/// The text in a fixed C char array: up to its first NUL (or all of it), not-UTF-8 bytes replaced.
pub fn read_c_text(src: &[c_char]) -> String {
    let bytes: Vec<u8> = src.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl OmegaGpuPlatformError {
    /// No failure yet: what the runtime hands a callback.
    pub const NONE: OmegaGpuPlatformError = OmegaGpuPlatformError { kind: 0, status: 0, text: [0; 256] };

    /// The report of `e`, for a callback that runs a Rust platform.
    pub fn from_hal(e: &HalError) -> Self {
        let (kind, status, text) = match e {
            HalError::NoDevice(t) => (err::NO_DEVICE, 0, t.clone()),
            HalError::OutOfMemory { .. } => (err::OUT_OF_MEMORY, 0, e.to_string()),
            HalError::Driver { status, detail, .. } => (err::DRIVER, *status, detail.clone()),
            HalError::UnsupportedDriver(t) => (err::UNSUPPORTED_DRIVER, 0, t.clone()),
            HalError::Refused(r) => (err::REFUSED, r.code() as u32, r.to_string()),
            HalError::Injected(_) | HalError::Sealed(_) => (err::DRIVER, 0, e.to_string()),
            HalError::Lost(t) => (err::LOST, 0, t.clone()),
            HalError::Unsupported(t) => (err::UNSUPPORTED, 0, t.clone()),
        };
        let mut out = Self::NONE;
        out.kind = kind;
        out.status = status;
        write_c_text(&mut out.text, &text);
        out
    }

    /// The failure this report describes, of callback `call` (for an out-of-memory report, of a request
    /// of `bytes`).
    pub fn to_hal(&self, call: &'static str, bytes: u64) -> HalError {
        let text = read_c_text(&self.text);
        match self.kind {
            err::NO_DEVICE => HalError::NoDevice(text),
            err::OUT_OF_MEMORY => HalError::OutOfMemory { bytes },
            err::UNSUPPORTED_DRIVER => HalError::UnsupportedDriver(text),
            err::LOST => HalError::Lost(text),
            err::UNSUPPORTED => HalError::Unsupported(text),
            err::REFUSED => match Refusal::from_buffer_code(self.status as i32) {
                Some(r) => HalError::Refused(r),
                None => HalError::Driver { call, status: self.status, detail: text },
            },
            err::DRIVER => HalError::Driver { call, status: self.status, detail: text },
            other => HalError::Driver {
                call,
                status: self.status,
                detail: format!("{text} (the callback failed with error kind {other}, which no constant has)"),
            },
        }
    }
}

/// Why [`check_for`] refused a table: the contract's refusal, and for a declared service with a NULL
/// function, which function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{refusal}{}", null.map(|f| format!(" ({f} is NULL)")).unwrap_or_default())]
pub struct TableRefusal {
    /// The refusal (`OMEGA_GPU_PLAT_*`).
    pub refusal: Refusal,
    /// `OmegaGpuXService.function` when a declared service lacks a function.
    pub null: Option<&'static str>,
}

impl From<Refusal> for TableRefusal {
    fn from(refusal: Refusal) -> Self {
        TableRefusal { refusal, null: None }
    }
}

impl OmegaGpuLaunchLimits {
    /// `l` as C lays it out.
    pub fn from_hal(l: &LaunchLimits) -> Self {
        OmegaGpuLaunchLimits {
            sm_major: l.sm.0,
            sm_minor: l.sm.1,
            max_block: l.max_block,
            max_threads_per_block: l.max_threads_per_block,
            max_grid: l.max_grid,
            max_registers: l.max_registers,
            max_shared_bytes: l.max_shared_bytes,
            reserved_shared_bytes: l.reserved_shared_bytes,
        }
    }

    /// The limits in the HAL's terms.
    pub fn to_hal(&self) -> LaunchLimits {
        LaunchLimits {
            sm: (self.sm_major, self.sm_minor),
            max_block: self.max_block,
            max_threads_per_block: self.max_threads_per_block,
            max_grid: self.max_grid,
            max_registers: self.max_registers,
            max_shared_bytes: self.max_shared_bytes,
            reserved_shared_bytes: self.reserved_shared_bytes,
            // `OmegaGpuLaunchDesc` has no words for a cluster or a carve-out, so a table platform is
            // asked for neither: the session refuses them by these limits before anything reaches C.
            max_cluster_ctas: 1,
            max_cluster_ctas_non_portable: 1,
            max_carveout_kib: 0,
        }
    }

    /// Limits a launch can meet: every side, the thread count and the registers at least 1, the reserved
    /// shared memory inside the maximum.
    fn well_formed(&self) -> bool {
        self.max_block.iter().chain(&self.max_grid).all(|&n| n >= 1)
            && self.max_threads_per_block >= 1
            && self.max_registers >= 1
            && self.reserved_shared_bytes <= self.max_shared_bytes
    }
}

/// The caps a table declares, in the HAL's terms (the ABI numbers included).
pub fn caps_of(t: &OmegaGpuPlatform) -> Caps {
    Caps {
        abi_major: t.abi_major,
        abi_minor: t.abi_minor,
        services: Services::from_bits_retain(t.caps.services),
        page_bytes: t.caps.page_bytes,
        code_prefetch_tail: t.caps.code_prefetch_tail,
        param_base: t.caps.param_base,
        max_param_bytes: t.caps.max_param_bytes,
        launch: t.caps.launch.to_hal(),
    }
}

/// Whether `t` can serve `needed`: its ABI is this runtime's ([`negotiate`]), it declares every service
/// of `needed`, its caps are well-formed, and every service it declares has all of its functions.
pub fn check_for(t: &OmegaGpuPlatform, needed: Services) -> Result<(), TableRefusal> {
    let caps = caps_of(t);
    if caps.services.bits() & !Services::all().bits() != 0 {
        return Err(Refusal::BadValue("caps.services").into());
    }
    negotiate(&caps, needed)?;
    if CodeFormat::from_code(t.caps.code_format).is_none() {
        return Err(Refusal::BadValue("caps.code_format").into());
    }
    if !t.caps.page_bytes.is_power_of_two() {
        return Err(Refusal::BadValue("caps.page_bytes").into());
    }
    if !t.caps.param_base.is_multiple_of(4) {
        return Err(Refusal::BadValue("caps.param_base").into());
    }
    if !t.caps.launch.well_formed() {
        return Err(Refusal::BadValue("caps.launch").into());
    }
    let functions: [(Services, &[(&'static str, bool)]); 8] = [
        (
            Services::CLOCK,
            &[
                ("OmegaGpuClockService.now_ns", t.clock.now_ns.is_some()),
                ("OmegaGpuClockService.sleep_us", t.clock.sleep_us.is_some()),
            ],
        ),
        (
            Services::LOCK,
            &[
                ("OmegaGpuLockService.lock", t.lock.lock.is_some()),
                ("OmegaGpuLockService.try_lock", t.lock.try_lock.is_some()),
                ("OmegaGpuLockService.unlock", t.lock.unlock.is_some()),
            ],
        ),
        (
            Services::DEVICE_MEM,
            &[
                ("OmegaGpuDeviceMemService.alloc", t.memory.alloc.is_some()),
                ("OmegaGpuDeviceMemService.free", t.memory.free.is_some()),
            ],
        ),
        (
            Services::SUBMIT,
            &[
                ("OmegaGpuSubmitService.submit", t.submit.submit.is_some()),
                ("OmegaGpuSubmitService.in_flight_buffers", t.submit.in_flight_buffers.is_some()),
            ],
        ),
        (
            Services::POLL,
            &[
                ("OmegaGpuPollService.poll", t.poll.poll.is_some()),
                ("OmegaGpuPollService.timestamp", t.poll.timestamp.is_some()),
                ("OmegaGpuPollService.channel_fault", t.poll.channel_fault.is_some()),
            ],
        ),
        (
            Services::HOST_MEM,
            &[
                ("OmegaGpuHostMemService.alloc", t.host.alloc.is_some()),
                ("OmegaGpuHostMemService.calloc", t.host.calloc.is_some()),
                ("OmegaGpuHostMemService.free", t.host.free.is_some()),
            ],
        ),
        (
            Services::SYNC,
            &[
                ("OmegaGpuSyncService.to_gpu", t.sync.to_gpu.is_some()),
                ("OmegaGpuSyncService.to_cpu", t.sync.to_cpu.is_some()),
            ],
        ),
        (
            Services::DEVICE,
            &[
                ("OmegaGpuDeviceService.open", t.device.open.is_some()),
                ("OmegaGpuDeviceService.close", t.device.close.is_some()),
            ],
        ),
    ];
    for (service, fns) in functions {
        if !caps.services.contains(service) {
            continue;
        }
        if let Some((name, _)) = fns.iter().find(|(_, present)| !present) {
            return Err(TableRefusal { refusal: Refusal::MissingService(service), null: Some(name) });
        }
    }
    Ok(())
}

/// A function of a declared service: [`check_for`] proved it non-NULL before the platform was built.
fn f<T: Copy>(function: Option<T>) -> T {
    function.expect("TablePlatform::new checked every function of every declared service")
}

/// A [`Platform`] over a C table.
pub struct TablePlatform {
    table: OmegaGpuPlatform,
    name: &'static str,
    caps: Caps,
    code_format: CodeFormat,
    /// Set once the runtime installed the table: from then on its `release` is this value's to call.
    owns_ctx: AtomicBool,
}

// SAFETY: the table is function pointers and a context pointer; whoever built the platform promised
// (`TablePlatform::new`) that every callback may be called with `ctx` from any thread.
unsafe impl Send for TablePlatform {}
// SAFETY: as above; `TablePlatform` has no interior state of its own but the atomic flag.
unsafe impl Sync for TablePlatform {}

impl TablePlatform {
    /// A platform named `name` over a copy of `table`, if [`check_for`] accepts it for the session's
    /// services. Nothing is released when it is refused, nor when the platform is dropped before
    /// [`TablePlatform::adopt`].
    ///
    /// # Safety
    /// - Every function of every service `table.caps.services` declares keeps the rules its service struct
    ///   states (`# Safety` of [`OmegaGpuClockService`] and its siblings), with `table.ctx`, from any thread,
    ///   for as long as the returned platform lives, and neither calls back into the runtime nor unwinds.
    /// - `table.release`, if not NULL, may be called once with `table.ctx` after the last call of any other
    ///   callback, once adopted.
    /// - The table's services drive no device another runtime drives: a table [`export`]ed from a platform
    ///   a runtime holds would give that device a second runtime, with its own latch and its own frees.
    pub unsafe fn new(table: &OmegaGpuPlatform, name: &'static str) -> Result<Arc<TablePlatform>, TableRefusal> {
        check_for(table, Services::SESSION)?;
        Ok(Arc::new(TablePlatform {
            table: *table,
            name,
            caps: caps_of(table),
            code_format: CodeFormat::from_code(table.caps.code_format).expect("checked above"),
            owns_ctx: AtomicBool::new(false),
        }))
    }

    /// Takes over the table's context: dropping the platform from now on calls the table's `release`.
    pub fn adopt(&self) {
        self.owns_ctx.store(true, Ordering::SeqCst);
    }

    fn ctx(&self) -> *mut c_void {
        self.table.ctx
    }

    fn has(&self, s: Services) -> bool {
        self.caps.services.contains(s)
    }
}

impl Drop for TablePlatform {
    fn drop(&mut self) {
        if let (true, Some(release)) = (self.owns_ctx.load(Ordering::SeqCst), self.table.release) {
            // SAFETY: the installer allowed one call of `release` with `ctx` once adopted, after every other
            // callback; this is the last reference to the platform, so no other call can follow or run.
            unsafe { release(self.table.ctx) };
        }
    }
}

impl Platform for TablePlatform {
    fn name(&self) -> &'static str {
        self.name
    }

    fn caps(&self) -> Caps {
        self.caps
    }

    fn clock(&self) -> Option<&dyn Clock> {
        self.has(Services::CLOCK).then_some(self as &dyn Clock)
    }

    fn lock(&self) -> Option<&dyn ProcessLock> {
        self.has(Services::LOCK).then_some(self as &dyn ProcessLock)
    }

    fn memory(&self) -> Option<&dyn DeviceMemory> {
        self.has(Services::DEVICE_MEM).then_some(self as &dyn DeviceMemory)
    }

    fn queue(&self) -> Option<&dyn SubmitQueue> {
        self.has(Services::SUBMIT).then_some(self as &dyn SubmitQueue)
    }

    fn poll(&self) -> Option<&dyn CompletionPoll> {
        self.has(Services::POLL).then_some(self as &dyn CompletionPoll)
    }

    fn host(&self) -> Option<&dyn HostMemory> {
        self.has(Services::HOST_MEM).then_some(self as &dyn HostMemory)
    }

    fn visibility(&self) -> Option<&dyn Visibility> {
        self.has(Services::SYNC).then_some(self as &dyn Visibility)
    }

    fn device(&self) -> Option<&dyn Device> {
        self.has(Services::DEVICE).then_some(self as &dyn Device)
    }

    fn code_format(&self) -> CodeFormat {
        self.code_format
    }
}

impl Clock for TablePlatform {
    fn now_ns(&self) -> u64 {
        // SAFETY: the installer promised `now_ns` keeps OmegaGpuClockService's rules (`new`): no
        // precondition, any thread.
        unsafe { f(self.table.clock.now_ns)(self.ctx()) }
    }

    fn sleep_us(&self, us: u32) {
        // SAFETY: as for `now_ns`; `sleep_us` has no precondition either.
        unsafe { f(self.table.clock.sleep_us)(self.ctx(), us) }
    }
}

impl ProcessLock for TablePlatform {
    fn lock(&self, id: u32) {
        assert!((id as usize) < crate::lock::LOCK_COUNT, "lock id {id} out of range");
        // SAFETY: OmegaGpuLockService's `lock` may be called from any thread with an id below 4 (asserted);
        // the trait's own rule (a holder never takes it again) is the callback's.
        unsafe { f(self.table.lock.lock)(self.ctx(), id) }
    }

    fn try_lock(&self, id: u32) -> bool {
        assert!((id as usize) < crate::lock::LOCK_COUNT, "lock id {id} out of range");
        // SAFETY: as for `lock`; `try_lock` never waits.
        unsafe { f(self.table.lock.try_lock)(self.ctx(), id) != 0 }
    }

    unsafe fn unlock(&self, id: u32) {
        // SAFETY: the caller holds lock `id` (this method's contract), which is exactly when
        // OmegaGpuLockService's `unlock` may be called.
        unsafe { f(self.table.lock.unlock)(self.ctx(), id) }
    }
}

impl HostMemory for TablePlatform {
    fn alloc(&self, bytes: usize) -> *mut u8 {
        // SAFETY: OmegaGpuHostMemService's `alloc` has no precondition; a NULL result is the failure.
        unsafe { f(self.table.host.alloc)(self.ctx(), bytes) }.cast()
    }

    fn calloc(&self, bytes: usize) -> *mut u8 {
        // SAFETY: as for `alloc`.
        unsafe { f(self.table.host.calloc)(self.ctx(), bytes) }.cast()
    }

    unsafe fn free(&self, p: *mut u8) {
        // SAFETY: the caller passes NULL or a pointer from this service's `alloc`/`calloc` not freed since
        // (this method's contract), which is `free`'s rule.
        unsafe { f(self.table.host.free)(self.ctx(), p.cast()) }
    }
}
