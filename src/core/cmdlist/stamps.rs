//! The list's stamp area: a session QUEUE buffer, HOST_POLLED and GPU-uncached like the session's own
//! marker buffer, where launch `i` releases the submission's sequence number and its completion timestamp
//! at `16 * i`. It is a session buffer, so a latch parks it and close releases it with the rest.

use omega_hal::MarkerSlot;

use super::types::STAMP_BYTES;
use crate::error::{Result, Stage};
use crate::session::{GpuMem, Runtime, STAMP_AREA};
use crate::sync;

/// Allocates a zeroed stamp area for `launches` launches, through the session's memory. Caller holds the
/// lock; the device is open.
pub(super) fn alloc(rt: &Runtime, launches: u32, stage: Stage) -> Result<GpuMem> {
    rt.alloc_polled((u64::from(launches) * STAMP_BYTES) as usize, STAMP_AREA, stage)
}

/// Releases the stamp area, or parks it when the process is latched (the session's rule,
/// [`Runtime::release_polled`]). A stamp area of a closed device was already released by close: nothing
/// to do. Caller holds the lock.
pub(super) fn free(rt: &Runtime, m: &mut GpuMem) {
    rt.release_polled(m);
}

/// True while `m` is a live buffer of the open session.
pub(super) fn is_live(rt: &Runtime, m: &GpuMem) -> bool {
    let s = sync::lock(&rt.session);
    s.device.is_some() && s.buffers.check(m.handle).is_ok_and(|b| b.alloc.va == m.va)
}

/// Zeroes the first `n` entries, so a launch that does not release its entry (skipped, or the submission
/// failed before it) reads as "no stamp". Caller holds the lock and checked `m` live.
pub(super) fn clear(m: &GpuMem, n: u32) {
    // SAFETY: `m` is live (checked by the caller under the lock, which close and free need) and holds
    // `MAX_LAUNCHES * 16` bytes; no submission is in flight (one at a time, and the last one completed).
    unsafe { std::ptr::write_bytes(m.cpu.cast::<u8>(), 0, (n as u64 * STAMP_BYTES) as usize) };
}

/// The HAL slot of the area.
pub(super) fn slot(m: &GpuMem) -> MarkerSlot {
    MarkerSlot { va: m.va, cpu: m.cpu.cast() }
}

/// Copies the completion timestamps of the first `out.len()` launches; an entry whose payload is not
/// `sequence` (never released by that submission) reads as 0. Returns how many were copied, 0 when the
/// area is gone.
pub(super) fn read(rt: &Runtime, m: &GpuMem, sequence: u32, out: &mut [u64]) -> usize {
    // The session mutex is held across the check and the reads: free and close release buffers only
    // while holding it, so the area cannot be unmapped under us even without the session lock.
    let s = sync::lock(&rt.session);
    if s.device.is_none() || !s.buffers.check(m.handle).is_ok_and(|b| b.alloc.va == m.va) {
        return 0;
    }
    for (i, o) in out.iter_mut().enumerate() {
        // SAFETY: the area is live (checked under the session mutex, held) and `out` is no longer than
        // the list, so entry `i` lies inside it; the entries are 16-byte aligned (page-aligned base).
        let (payload, stamp) = unsafe {
            let p = m.cpu.cast::<u8>().add(i * STAMP_BYTES as usize);
            ((p as *const u32).read_volatile(), (p.add(8) as *const u64).read_volatile())
        };
        *o = if payload == sequence && sequence != 0 { stamp } else { 0 };
    }
    drop(s);
    out.len()
}
