//! Recovery from the latch (EXPERIMENTAL): stop the device's work, prove it stopped, then release what the
//! latch parked and close, so the next open starts afresh in the same process.
//!
//! The proof has two parts, and both must hold:
//!
//! 1. **The platform's stop** ([`omega_hal::Device::stop`]): the channel and its group are stopped and
//!    torn down, and the platform names the step that proved it ([`Recovery::proved_by`]). On the GPU:
//!    NVA06F_CTRL_CMD_STOP_CHANNEL, which disables the channel, preempts it off its engine or RCs it and
//!    takes it off the runlist, then RM_FREE of every object of the channel group. When the stop is
//!    refused (the H200 timed out on a channel spinning a kernel), scheduling is disabled, the group
//!    preempted, and the RM_FREE of the group — which preempts it and resets the engine context when the
//!    preempt fails — must work instead, each freed channel's handle refused afterwards; what was refused on
//!    the way is in [`Recovery::refused`]. A free that fails too keeps the latch, naming both causes.
//! 2. **A heartbeat that stopped**: the first [`WATCH_BYTES`] bytes of every parked buffer (what the
//!    latched work could still write), read by the CPU with no engine of the device involved
//!    ([`omega_hal::DeviceMemory::peek`]), are sampled right after the stop and again one interval
//!    later, and must not have changed. They are sampled twice, one interval apart, before the stop as
//!    well, which tells whether the work was seen running at all ([`Recovery::moved_before_stop`]).
//!
//! What it cannot prove: work that writes nothing the heartbeat watches (beyond a buffer's first bytes, or
//! to a buffer the CPU has no direct view of: counted in [`Recovery::unwatched_buffers`]) is covered by
//! the platform's word alone.
//!
//! Only then is anything released: every buffer of the session (parked or not, as close releases them),
//! the memory manager's chunks, then the device is closed and the latch cleared, in that order, so a
//! thread that sees the latch gone (`is_blocked`, any thread) sees the parked buffers released too.

use super::Runtime;
use crate::error::{Error, RecoverError, Result, Stage};
use crate::sync::{self, Ordering};

/// Bytes sampled from the start of each parked buffer.
pub const WATCH_BYTES: u64 = 256;
/// Microseconds between the two samples after the stop.
pub const WATCH_INTERVAL_US: u32 = 20_000;

/// What a recovery did and saw.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Recovery {
    /// The platform's calls that stopped the work, in order, each of which reported success.
    pub steps: Vec<&'static str>,
    /// The step whose success is the platform's word that the work stopped: the channel stop, or the free
    /// of the channel group after the stop was refused.
    pub proved_by: &'static str,
    /// Steps the platform refused on the way and went on without (a channel stop that timed out).
    pub refused: Vec<crate::error::StopFailure>,
    /// What the channel reported after the stop.
    pub channel: String,
    /// Parked buffers whose first bytes the heartbeat read.
    pub watched_buffers: u64,
    /// Bytes each sample read in all.
    pub watched_bytes: u64,
    /// Parked buffers the CPU has no direct view of (device-only, or video memory without a BAR1 view):
    /// the heartbeat could not watch them.
    pub unwatched_buffers: u64,
    /// Watched buffers that changed between the two samples before the stop: the work was seen running (0
    /// says only that it wrote nothing watched in that interval).
    pub moved_before_stop: u64,
    /// The interval between the two samples after the stop, in microseconds.
    pub interval_us: u32,
    /// What the latch had kept, now released.
    pub released: super::ParkStats,
    /// Platform-clock nanoseconds from the first sample to the close (two intervals of it are the
    /// heartbeat's).
    pub elapsed_ns: u64,
}

/// One watched range: the platform allocation holding the buffer, the buffer's offset in it and address.
struct Watch {
    alloc: omega_hal::Allocation,
    offset: u64,
    va: u64,
    len: usize,
}

impl Runtime {
    /// Recovers from the latch: takes the lock itself (a caller that holds it is refused, stage `lock`, as
    /// close refuses one), runs [`Runtime::recover_locked`], and releases the lock.
    pub fn recover(&self) -> Result<Recovery> {
        self.lock_itself("recover takes the session lock itself: call it without the lock")?;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.recover_locked()));
        if self.holds_lock() {
            self.release_lock();
        }
        match r {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Recovery with the lock held by the caller (the typed API's `Latched::recover`). Refused when the
    /// process is not latched. When the platform's stop fails or the heartbeat still moves, the process
    /// stays latched, nothing is released, and the reason is returned ([`RecoverError`]); it may be tried
    /// again. On success the device is closed, the latch cleared and parked buffers released: the next
    /// open reopens, and every handle of the old device is stale.
    pub fn recover_locked(&self) -> Result<Recovery> {
        self.require_lock(Stage::Recover)?;
        if !self.is_blocked() {
            return Err(Error::Recover(RecoverError::NotLatched));
        }
        let i = self.installed()?;
        if !self.is_open() {
            // A latch refuses close, so a latched process has its device open.
            return Err(Error::NotOpen(Stage::Recover));
        }
        let (clock, dev, mem) = (
            i.platform.clock().expect("negotiated at open"),
            i.platform.device().expect("negotiated at open"),
            i.platform.memory().expect("negotiated at open"),
        );
        let start = clock.now_ns();
        let (watch, unwatched) = self.watch_list(mem);
        let sample = |watch: &[Watch]| -> Result<Vec<Vec<u8>>> {
            watch
                .iter()
                .map(|w| {
                    let mut bytes = vec![0u8; w.len];
                    // SAFETY: the lock is held and the device open (checked above); `w.alloc` is the live
                    // platform allocation holding a parked buffer (nothing is released while latched),
                    // and `offset + len` lies inside it (`watch_list`).
                    match unsafe { mem.peek(&w.alloc, w.offset, &mut bytes) } {
                        Ok(()) => Ok(bytes),
                        Err(source) => Err(Error::Recover(RecoverError::Sample { va: w.va, source })),
                    }
                })
                .collect()
        };
        let running = sample(&watch)?;
        clock.sleep_us(WATCH_INTERVAL_US);
        let before = sample(&watch)?;
        // SAFETY: the lock is held and the device is open (checked above).
        let stopped = unsafe { dev.stop() }.map_err(|e| Error::Recover(RecoverError::Stop(e)))?;
        let after = sample(&watch)?;
        clock.sleep_us(WATCH_INTERVAL_US);
        let later = sample(&watch)?;
        for (w, (a, l)) in watch.iter().zip(after.iter().zip(&later)) {
            if let Some(k) = a.iter().zip(l).position(|(x, y)| x != y) {
                return Err(Error::Recover(RecoverError::StillRunning {
                    va: w.va,
                    offset: k as u64,
                    before: a[k],
                    after: l[k],
                    interval_us: WATCH_INTERVAL_US,
                }));
            }
        }
        let moved_before_stop = running.iter().zip(&before).filter(|(r, b)| r != b).count() as u64;
        let watched_bytes = watch.iter().map(|w| w.len as u64).sum();
        let released = self.parked();
        // Proved: close as close would, then lift the latch. The hooks run while the process still counts
        // as latched, so what they free parks and goes with the rest below.
        let panic = self.run_close_hooks();
        let r = self.release_all(&i).map(|()| {
            let mut s = sync::lock(&self.session);
            s.park = super::ParkStats::default();
            s.parked_listed.clear();
            drop(s);
            *sync::lock(&self.latch_cause) = None;
            self.latched.store(false, Ordering::SeqCst);
            Recovery {
                steps: stopped.steps,
                proved_by: stopped.proved_by,
                refused: stopped.refused,
                channel: stopped.channel,
                watched_buffers: watch.len() as u64,
                watched_bytes,
                unwatched_buffers: unwatched,
                moved_before_stop,
                interval_us: WATCH_INTERVAL_US,
                released,
                elapsed_ns: clock.now_ns().saturating_sub(start),
            }
        });
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
        r
    }

    /// The first [`WATCH_BYTES`] of every parked buffer the platform lets the CPU read directly, and how
    /// many parked buffers it does not.
    fn watch_list(&self, mem: &dyn omega_hal::DeviceMemory) -> (Vec<Watch>, u64) {
        let s = sync::lock(&self.session);
        let mut watch = Vec::new();
        let mut unwatched = 0;
        for (_, b) in s.buffers.iter().filter(|(_, b)| b.parked) {
            let (alloc, offset) = s.platform_range(b);
            let len = b.alloc.bytes.min(WATCH_BYTES) as usize;
            let mut probe = [0u8; 1];
            // SAFETY: the lock is held, the device is open (the caller checked both) and `alloc` is live
            // (parked buffers are never released while latched); one byte at the buffer's start is in it.
            match unsafe { mem.peek(&alloc, offset, &mut probe) } {
                Err(omega_hal::HalError::Unsupported(_)) => unwatched += 1,
                // Another failure is reported by the sample that reads it again.
                _ => watch.push(Watch { alloc, offset, va: b.alloc.va, len }),
            }
        }
        (watch, unwatched)
    }
}
