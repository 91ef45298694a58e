//! The clock service: a monotonic nanosecond clock, a sleep and a yield, so the session layer's timeouts,
//! spin windows and backoff are driven by the platform (the simulator's clock is virtual and
//! deterministic), and the [`WaitPolicy`] a platform's completion waits follow when the caller sets no
//! spin window of its own.

use core::marker::PhantomData;

/// Monotonic time, sleep and yield.
pub trait Clock: Send + Sync {
    /// Nanoseconds since an arbitrary, fixed origin. Never goes backwards.
    fn now_ns(&self) -> u64;
    /// Gives up the CPU for about `us` microseconds (the sleep half of sleep-polling).
    fn sleep_us(&self, us: u32);
    /// Gives up the CPU once, to any other thread that is ready to run (`sched_yield`), returning at once
    /// when there is none. A virtual clock advances by what it takes a yield to cost.
    fn yield_now(&self) {
        crate::sync::thread::yield_now();
    }
    /// Makes this thread's sleeps end as close to their time as the host allows, for as long as the
    /// returned guard lives on this thread (Linux: the timer slack lowered to 1 ns, see [`TimerSlack`]).
    /// A clock whose sleeps are not the host's changes nothing.
    fn precise_sleeps(&self) -> TimerSlack {
        TimerSlack::unchanged()
    }
}

/// How a completion wait with no spin window of the caller's uses the CPU: spin for `spin_ns`, then yield
/// between polls until `yield_ns` more have passed, then sleep between polls, each sleep a fraction
/// ([`WaitPolicy::SLEEP_FRACTION`]) of the time waited so far, from `first_sleep_us` up to
/// `max_sleep_us`. An explicit spin window replaces `spin_ns`; the yield and sleep phases follow it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Nanoseconds of spinning (polls back to back) before the first yield.
    pub spin_ns: u64,
    /// Nanoseconds of yielding between polls, after the spin, before the first sleep.
    pub yield_ns: u64,
    /// The shortest sleep, in microseconds.
    pub first_sleep_us: u32,
    /// The longest sleep, in microseconds: the most a long wait may see its completion late by.
    pub max_sleep_us: u32,
}

impl WaitPolicy {
    /// Each sleep lasts the time waited so far divided by this (so a completion is seen at most an eighth
    /// of its wait late, and the sleeps grow exponentially, by 1/8 each, up to `max_sleep_us`).
    pub const SLEEP_FRACTION: u64 = 8;

    /// What a platform without measurements of its own uses: 30 us of spinning (more than a short
    /// kernel's round trip on the H200), 50 us of yielding, then sleeps from 10 us to 1 ms.
    pub const DEFAULT: WaitPolicy =
        WaitPolicy { spin_ns: 30_000, yield_ns: 50_000, first_sleep_us: 10, max_sleep_us: 1000 };
}

impl Default for WaitPolicy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The calling thread's timer slack lowered to 1 ns while this lives, and restored when it drops (Linux;
/// elsewhere, and where the host refuses, nothing changes). Linux lets a sleeping thread's timer fire up to
/// its slack late (50 us by default) to batch wake-ups, so a 20 us sleep is really a 70 us one; with a
/// slack of 1 ns it ends on time. The slack is the thread's own, so the guard is not `Send`: it is restored
/// on the thread that lowered it.
#[derive(Debug)]
#[must_use = "the timer slack is restored as soon as this guard is dropped"]
pub struct TimerSlack {
    /// The slack to restore, in ns; `None` when nothing was changed.
    restore: Option<u64>,
    _not_send: PhantomData<*const ()>,
}

impl TimerSlack {
    /// Leaves the timer slack as it is.
    pub fn unchanged() -> Self {
        TimerSlack { restore: None, _not_send: PhantomData }
    }

    /// Lowers this thread's timer slack to 1 ns until the guard drops.
    pub fn lower() -> Self {
        #[cfg(all(target_os = "linux", not(loom)))]
        {
            use core::num::NonZeroU64;
            if let Ok(old) = rustix::thread::current_timer_slack() {
                if old > 1 && rustix::thread::set_current_timer_slack(NonZeroU64::new(1)).is_ok() {
                    return TimerSlack { restore: Some(old), _not_send: PhantomData };
                }
            }
        }
        Self::unchanged()
    }

    /// True when the guard lowered the slack (and will restore it).
    pub fn is_lowered(&self) -> bool {
        self.restore.is_some()
    }
}

impl Drop for TimerSlack {
    fn drop(&mut self) {
        #[cfg(all(target_os = "linux", not(loom)))]
        if let Some(old) = self.restore {
            // Restoring the value read before cannot be refused; if it were, the thread would only keep
            // waking on time.
            let _ = rustix::thread::set_current_timer_slack(core::num::NonZeroU64::new(old));
        }
    }
}

/// The host's monotonic clock (`CLOCK_MONOTONIC`), shared by the real backends.
#[derive(Debug, Default, Clone, Copy)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    fn sleep_us(&self, us: u32) {
        // loom has no timed sleep; in a model a sleep is a yield (the other threads get to run).
        #[cfg(loom)]
        {
            let _ = us;
            crate::sync::thread::yield_now();
        }
        #[cfg(not(loom))]
        crate::sync::thread::sleep(std::time::Duration::from_micros(us as u64));
    }

    fn precise_sleeps(&self) -> TimerSlack {
        TimerSlack::lower()
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn timer_slack_is_lowered_for_the_guard_and_restored_after() {
        let before = rustix::thread::current_timer_slack().unwrap();
        {
            let g = MonotonicClock.precise_sleeps();
            if before > 1 {
                assert!(g.is_lowered());
                assert_eq!(rustix::thread::current_timer_slack().unwrap(), 1);
            }
        }
        assert_eq!(rustix::thread::current_timer_slack().unwrap(), before);
        assert!(!TimerSlack::unchanged().is_lowered());
    }
}
