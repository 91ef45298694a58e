//! A Rust platform as a C table: [`export`] fills an [`OmegaGpuPlatform`] whose callbacks run the
//! platform's own services, so C can forward to it (a table that wraps the simulator, say) or install it
//! as it is.

use core::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::queue::Unflat;
use super::{
    err, write_c_text, OmegaGpuAllocation, OmegaGpuBufferDesc, OmegaGpuChannelFault, OmegaGpuClockService,
    OmegaGpuDeviceInfo, OmegaGpuDeviceMemService, OmegaGpuDeviceService, OmegaGpuHostMemService, OmegaGpuLaunchLimits,
    OmegaGpuLockService, OmegaGpuMarker, OmegaGpuPlatform, OmegaGpuPlatformCaps, OmegaGpuPlatformError,
    OmegaGpuPollService, OmegaGpuQueueBuffer, OmegaGpuSubmission, OmegaGpuSubmitService, OmegaGpuSyncService,
};
use crate::caps::{Refusal, Services};
use crate::error::HalError;
use crate::lock::LOCK_COUNT;
use crate::sync::Arc;
use crate::Platform;

/// What an exported table's `ctx` points to.
struct Exported {
    platform: Arc<dyn Platform>,
}

/// A table over `platform`: it declares the services the platform has, its caps and code format, and
/// its `release` drops the table's hold on the platform. The caller owns the result: install it
/// (`omega_gpu_session_set_platform`, which then releases it), or call its `release` once done with it.
pub fn export(platform: Arc<dyn Platform>) -> OmegaGpuPlatform {
    let caps = platform.caps();
    let present = [
        (Services::CLOCK, platform.clock().is_some()),
        (Services::LOCK, platform.lock().is_some()),
        (Services::DEVICE_MEM, platform.memory().is_some()),
        (Services::SUBMIT, platform.queue().is_some()),
        (Services::POLL, platform.poll().is_some()),
        (Services::HOST_MEM, platform.host().is_some()),
        (Services::SYNC, platform.visibility().is_some()),
        (Services::DEVICE, platform.device().is_some()),
    ];
    let services = present.iter().filter(|(_, has)| *has).fold(Services::empty(), |s, (svc, _)| s | *svc);
    let code_format = platform.code_format() as u32;
    let ctx = Box::into_raw(Box::new(Exported { platform })).cast::<c_void>();
    OmegaGpuPlatform {
        abi_major: caps.abi_major,
        abi_minor: caps.abi_minor,
        caps: OmegaGpuPlatformCaps {
            services: (services & caps.services).bits(),
            code_format,
            param_base: caps.param_base,
            max_param_bytes: caps.max_param_bytes,
            page_bytes: caps.page_bytes,
            code_prefetch_tail: caps.code_prefetch_tail,
            launch: OmegaGpuLaunchLimits::from_hal(&caps.launch),
        },
        ctx,
        clock: OmegaGpuClockService { now_ns: Some(now_ns), sleep_us: Some(sleep_us) },
        lock: OmegaGpuLockService { lock: Some(lock), try_lock: Some(try_lock), unlock: Some(unlock) },
        memory: OmegaGpuDeviceMemService { alloc: Some(alloc), free: Some(free) },
        submit: OmegaGpuSubmitService { submit: Some(submit), in_flight_buffers: Some(in_flight_buffers) },
        poll: OmegaGpuPollService { poll: Some(poll), timestamp: Some(timestamp), channel_fault: Some(channel_fault) },
        host: OmegaGpuHostMemService { alloc: Some(host_alloc), calloc: Some(host_calloc), free: Some(host_free) },
        sync: OmegaGpuSyncService { to_gpu: Some(to_gpu), to_cpu: Some(to_cpu) },
        device: OmegaGpuDeviceService { open: Some(open), close: Some(close) },
        release: Some(release),
    }
}

/// The platform behind an exported table's `ctx`.
///
/// # Safety
/// - `ctx` is the `ctx` of a table [`export`] filled, whose `release` has not been called.
unsafe fn platform<'a>(ctx: *mut c_void) -> &'a dyn Platform {
    // SAFETY: by the caller's promise `ctx` is a live `Box<Exported>` that `release` has not dropped.
    unsafe { &*ctx.cast::<Exported>() }.platform.as_ref()
}

/// Runs `body`, turning a panic (which must not unwind into C) into `fallback`.
fn no_unwind<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

/// Reports `e` through `err` (when the caller gave one) and returns the failure code.
///
/// # Safety
/// - `err` is NULL or points to a writable `OmegaGpuPlatformError`.
unsafe fn fail(err: *mut OmegaGpuPlatformError, e: &HalError) -> c_int {
    // SAFETY: forwarded from the caller.
    if let Some(out) = unsafe { err.as_mut() } {
        *out = OmegaGpuPlatformError::from_hal(e);
    }
    -1
}

fn missing(service: Services) -> HalError {
    HalError::Refused(Refusal::MissingService(service))
}

fn panicked(call: &'static str) -> HalError {
    HalError::Driver { call, status: 0, detail: "the platform panicked".into() }
}

unsafe extern "C" fn now_ns(ctx: *mut c_void) -> u64 {
    // SAFETY: OmegaGpuClockService's caller passes the table's own `ctx`.
    no_unwind(0, || unsafe { platform(ctx) }.clock().map_or(0, |c| c.now_ns()))
}

unsafe extern "C" fn sleep_us(ctx: *mut c_void, us: u32) {
    no_unwind((), || {
        // SAFETY: as for now_ns.
        if let Some(c) = unsafe { platform(ctx) }.clock() {
            c.sleep_us(us)
        }
    })
}

unsafe extern "C" fn lock(ctx: *mut c_void, id: u32) {
    // SAFETY: as for now_ns. An id past the platform's locks takes nothing (the HAL would panic).
    no_unwind((), || match unsafe { platform(ctx) }.lock() {
        Some(l) if (id as usize) < LOCK_COUNT => l.lock(id),
        _ => {}
    })
}

unsafe extern "C" fn try_lock(ctx: *mut c_void, id: u32) -> c_int {
    // SAFETY: as for lock.
    no_unwind(0, || match unsafe { platform(ctx) }.lock() {
        Some(l) if (id as usize) < LOCK_COUNT => c_int::from(l.try_lock(id)),
        _ => 0,
    })
}

unsafe extern "C" fn unlock(ctx: *mut c_void, id: u32) {
    no_unwind((), || {
        // SAFETY: as for lock.
        if let (Some(l), true) = (unsafe { platform(ctx) }.lock(), (id as usize) < LOCK_COUNT) {
            // SAFETY: OmegaGpuLockService's `unlock` is called only by the holder of lock `id`: exactly
            // ProcessLock::unlock's contract.
            unsafe { l.unlock(id) }
        }
    })
}

unsafe extern "C" fn alloc(
    ctx: *mut c_void,
    desc: *const OmegaGpuBufferDesc,
    out: *mut OmegaGpuAllocation,
    err: *mut OmegaGpuPlatformError,
) -> c_int {
    let r = no_unwind(Err(panicked("alloc")), || {
        // SAFETY: the caller passes the table's `ctx`, and `desc` NULL or readable.
        let (p, desc) = unsafe { (platform(ctx), desc.as_ref()) };
        let desc = desc.ok_or(HalError::Driver { call: "alloc", status: 0, detail: "desc is NULL".into() })?;
        let desc = desc.to_hal()?;
        let mem = p.memory().ok_or(missing(Services::DEVICE_MEM))?;
        // SAFETY: OmegaGpuDeviceMemService's caller holds the lock with the device open and passes a checked,
        // page-rounded descriptor (checked again just above): DeviceMemory::alloc's contract.
        unsafe { mem.alloc(&desc) }
    });
    // SAFETY: the caller passes `out` and `err` NULL or writable.
    match (r, unsafe { out.as_mut() }) {
        (Ok(a), Some(out)) => {
            *out = OmegaGpuAllocation::from_hal(&a);
            0
        }
        (Ok(a), None) => {
            // Nowhere to say where it is: give it back rather than leak it.
            // SAFETY: the caller passes the table's `ctx`.
            if let Some(mem) = unsafe { platform(ctx) }.memory() {
                // SAFETY: `a` was allocated just above and nothing else has it; the lock is still held.
                unsafe { mem.free(&a) }
            }
            // SAFETY: as above for `err`.
            unsafe { fail(err, &HalError::Driver { call: "alloc", status: 0, detail: "out is NULL".into() }) }
        }
        // SAFETY: as above for `err`.
        (Err(e), _) => unsafe { fail(err, &e) },
    }
}

unsafe extern "C" fn free(ctx: *mut c_void, a: *const OmegaGpuAllocation) {
    no_unwind((), || {
        // SAFETY: the caller passes the table's `ctx` and `a` NULL or readable.
        let (p, a) = unsafe { (platform(ctx), a.as_ref()) };
        if let (Some(mem), Some(a)) = (p.memory(), a) {
            // SAFETY: OmegaGpuDeviceMemService's `free` rules are DeviceMemory::free's contract: a live
            // buffer of this platform, freed once, no submitted work on it, the lock held.
            unsafe { mem.free(&a.to_hal()) }
        }
    })
}

unsafe extern "C" fn submit(ctx: *mut c_void, s: *const OmegaGpuSubmission, err: *mut OmegaGpuPlatformError) -> c_int {
    let r = no_unwind(Err(panicked("submit")), || {
        // SAFETY: the caller passes the table's `ctx` and `s` NULL or readable.
        let (p, s) = unsafe { (platform(ctx), s.as_ref()) };
        let s = s.ok_or(HalError::Driver { call: "submit", status: 0, detail: "s is NULL".into() })?;
        let queue = p.queue().ok_or(missing(Services::SUBMIT))?;
        // SAFETY: OmegaGpuSubmitService's caller keeps `s` and every array it points to valid for the call.
        let flat = unsafe { Unflat::new(s) }?;
        // SAFETY: as above for the argument words; and the rest of OmegaGpuSubmitService's rules (lock
        // held, device open, every named address allocated until the markers are observed, one submission
        // in flight) are SubmitQueue::submit's contract.
        unsafe { flat.with(|sub| queue.submit(sub)) }
    });
    match r {
        Ok(()) => 0,
        // SAFETY: the caller passes `err` NULL or writable.
        Err(e) => unsafe { fail(err, &e) },
    }
}

unsafe extern "C" fn in_flight_buffers(ctx: *mut c_void, out: *mut OmegaGpuQueueBuffer, max: usize) -> usize {
    no_unwind(0, || {
        // SAFETY: the caller passes the table's `ctx`.
        let buffers = unsafe { platform(ctx) }.queue().map(|q| q.in_flight_buffers()).unwrap_or_default();
        let max = if out.is_null() { 0 } else { max };
        // SAFETY: OmegaGpuSubmitService's caller passes `max` writable entries at `out` (none when NULL).
        unsafe { super::queue::write_queue_buffers(&buffers, out, max) }
    })
}

unsafe extern "C" fn poll(
    ctx: *mut c_void,
    m: *const OmegaGpuMarker,
    word: *mut u32,
    err: *mut OmegaGpuPlatformError,
) -> c_int {
    let r = no_unwind(Err("the platform panicked".to_owned()), || {
        // SAFETY: the caller passes the table's `ctx` and `m` NULL or readable.
        let (p, m) = unsafe { (platform(ctx), m.as_ref()) };
        let m = m.ok_or("m is NULL")?;
        let poll = p.poll().ok_or("the platform has no POLL service")?;
        // SAFETY: OmegaGpuPollService's caller passes a marker in a live HOST_POLLED buffer of this
        // platform: CompletionPoll::poll's contract.
        unsafe { poll.poll(&m.to_hal()) }.map_err(|e| e.to_string())
    });
    // SAFETY: the caller passes `word` and `err` NULL or writable.
    match (r, unsafe { word.as_mut() }) {
        (Ok(w), Some(out)) => {
            *out = w;
            0
        }
        (Ok(_), None) => {
            // SAFETY: the caller passes `err` NULL or writable.
            unsafe { fail(err, &HalError::Driver { call: "poll", status: 0, detail: "word is NULL".into() }) }
        }
        (Err(text), _) => {
            // SAFETY: as above.
            if let Some(e) = unsafe { err.as_mut() } {
                *e = OmegaGpuPlatformError::NONE;
                e.kind = err::DRIVER;
                write_c_text(&mut e.text, &text);
            }
            -1
        }
    }
}

unsafe extern "C" fn timestamp(ctx: *mut c_void, m: *const OmegaGpuMarker) -> u64 {
    no_unwind(0, || {
        // SAFETY: the caller passes the table's `ctx` and `m` NULL or readable.
        let (p, m) = unsafe { (platform(ctx), m.as_ref()) };
        match (p.poll(), m) {
            // SAFETY: as for poll: CompletionPoll::timestamp's contract.
            (Some(poll), Some(m)) => unsafe { poll.timestamp(&m.to_hal()) },
            _ => 0,
        }
    })
}

unsafe extern "C" fn channel_fault(ctx: *mut c_void, out: *mut OmegaGpuChannelFault) -> c_int {
    no_unwind(0, || {
        // SAFETY: the caller passes the table's `ctx` and `out` NULL or writable.
        let (p, out) = unsafe { (platform(ctx), out.as_mut()) };
        match (p.poll().and_then(|poll| poll.channel_fault()), out) {
            (Some(fault), Some(out)) => {
                out.xid = fault.xid;
                out.reserved = 0;
                write_c_text(&mut out.text, &fault.detail);
                1
            }
            _ => 0,
        }
    })
}

unsafe extern "C" fn host_alloc(ctx: *mut c_void, bytes: usize) -> *mut c_void {
    no_unwind(core::ptr::null_mut(), || {
        // SAFETY: the caller passes the table's `ctx`.
        unsafe { platform(ctx) }.host().map_or(core::ptr::null_mut(), |h| h.alloc(bytes).cast())
    })
}

unsafe extern "C" fn host_calloc(ctx: *mut c_void, bytes: usize) -> *mut c_void {
    no_unwind(core::ptr::null_mut(), || {
        // SAFETY: the caller passes the table's `ctx`.
        unsafe { platform(ctx) }.host().map_or(core::ptr::null_mut(), |h| h.calloc(bytes).cast())
    })
}

unsafe extern "C" fn host_free(ctx: *mut c_void, p: *mut c_void) {
    no_unwind((), || {
        // SAFETY: the caller passes the table's `ctx`.
        if let Some(h) = unsafe { platform(ctx) }.host() {
            // SAFETY: OmegaGpuHostMemService's `free` rule (NULL, or from this service and not freed since)
            // is HostMemory::free's contract.
            unsafe { h.free(p.cast()) }
        }
    })
}

/// The SYNC service's two directions.
///
/// # Safety
/// - The rules of OmegaGpuSyncService: `ctx` is the table's, `a` NULL or a live buffer of this platform
///   with the range inside it, `err` NULL or writable, the lock held and nothing running.
unsafe fn sync(
    ctx: *mut c_void,
    a: *const OmegaGpuAllocation,
    offset: u64,
    len: u64,
    err: *mut OmegaGpuPlatformError,
    to_gpu: bool,
) -> c_int {
    let r = no_unwind(Err(panicked("sync")), || {
        // SAFETY: forwarded from the caller.
        let (p, a) = unsafe { (platform(ctx), a.as_ref()) };
        let a = a.ok_or(HalError::Driver { call: "sync", status: 0, detail: "a is NULL".into() })?.to_hal();
        let v = p.visibility().ok_or(missing(Services::SYNC))?;
        // SAFETY: forwarded from the caller: Visibility's contract.
        unsafe {
            if to_gpu {
                v.sync_to_gpu(&a, offset, len)
            } else {
                v.sync_to_cpu(&a, offset, len)
            }
        }
    });
    match r {
        Ok(()) => 0,
        // SAFETY: forwarded from the caller.
        Err(e) => unsafe { fail(err, &e) },
    }
}

unsafe extern "C" fn to_gpu(
    ctx: *mut c_void,
    a: *const OmegaGpuAllocation,
    offset: u64,
    len: u64,
    err: *mut OmegaGpuPlatformError,
) -> c_int {
    // SAFETY: OmegaGpuSyncService's caller keeps its rules, which are `sync`'s.
    unsafe { sync(ctx, a, offset, len, err, true) }
}

unsafe extern "C" fn to_cpu(
    ctx: *mut c_void,
    a: *const OmegaGpuAllocation,
    offset: u64,
    len: u64,
    err: *mut OmegaGpuPlatformError,
) -> c_int {
    // SAFETY: as for to_gpu.
    unsafe { sync(ctx, a, offset, len, err, false) }
}

unsafe extern "C" fn open(ctx: *mut c_void, out: *mut OmegaGpuDeviceInfo, err: *mut OmegaGpuPlatformError) -> c_int {
    let r = no_unwind(Err(panicked("open")), || {
        // SAFETY: the caller passes the table's `ctx`.
        let dev = unsafe { platform(ctx) }.device().ok_or(missing(Services::DEVICE))?;
        // SAFETY: OmegaGpuDeviceService's `open` rule (lock held, device not open) is Device::open's.
        unsafe { dev.open() }
    });
    // SAFETY: the caller passes `out` and `err` NULL or writable.
    match (r, unsafe { out.as_mut() }) {
        (Ok(info), Some(out)) => {
            *out = OmegaGpuDeviceInfo::from_info(&info);
            0
        }
        // The device is open; without `out` the caller only loses the report.
        (Ok(_), None) => 0,
        // SAFETY: as above.
        (Err(e), _) => unsafe { fail(err, &e) },
    }
}

unsafe extern "C" fn close(ctx: *mut c_void) {
    no_unwind((), || {
        // SAFETY: the caller passes the table's `ctx`.
        if let Some(dev) = unsafe { platform(ctx) }.device() {
            // SAFETY: OmegaGpuDeviceService's `close` rule (lock held, device open, nothing running, every
            // buffer freed, no uncertain completion) is Device::close's contract.
            unsafe { dev.close() }
        }
    })
}

unsafe extern "C" fn release(ctx: *mut c_void) {
    if !ctx.is_null() {
        // SAFETY: `ctx` came from `Box::into_raw` in `export`, and `release` is called once, after every other
        // callback (OmegaGpuPlatform's rule), so nothing uses it any more.
        drop(unsafe { Box::from_raw(ctx.cast::<Exported>()) });
    }
}
