//! How a completion wait uses the CPU between polls of its marker (issue 11 item 3): spin, then yield,
//! then sleep with a backoff.
//!
//! A launch's wait spins for its spin window — the launch's `spin_us`, else the process-wide setting,
//! else the platform's measured default ([`WaitPolicy::spin_ns`], so a short kernel is seen within
//! microseconds with no setting at all) — then yields the CPU between polls for
//! [`WaitPolicy::yield_ns`], then sleeps between polls, each sleep an eighth of the time waited so far,
//! from [`WaitPolicy::first_sleep_us`] up to [`WaitPolicy::max_sleep_us`]: a completion is seen at most
//! an eighth of its wait late (and never more than the longest sleep), and a long wait wakes a few
//! hundred times a second at most. Sleeps run with the thread's timer slack lowered
//! ([`omega_hal::Clock::precise_sleeps`]), so they end on time.
//!
//! A command list submitted again knows how long its last submission took; its wait is told to expect
//! the same ([`Backoff::expecting`]): it sleeps as above, but never past [`EXPECT_GUARD_FRACTION`] of the
//! expected time (at least [`EXPECT_GUARD_MIN_NS`]) before the expected completion, and spins from there
//! until a quarter past it, after which the backoff resumes. A repeated decode step (4 to 20 ms on the
//! H200) was seen up to an eighth of its wait late by the sleeps alone — 0.36 ms of a 4.5 ms step, 0.75
//! of a 10 ms one (docs/perf/2026-12-03-s8-qwen3-step.md); expecting it, the wait spins a sixteenth of
//! the step and sees the completion within a poll.
//!
//! Every decision is a function of the platform clock's readings, so on the simulator, whose clock is
//! virtual, a wait takes the same steps on every run.

use omega_hal::WaitPolicy;

/// What a wait does before its next poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Poll again at once.
    Spin,
    /// Give the CPU to any thread ready to run, then poll.
    Yield,
    /// Sleep this many microseconds, then poll.
    Sleep(u32),
}

/// What a caller asks of its wait: a spin window (0: the process-wide setting, else the platform's) and
/// when the completion is expected, if known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ask {
    /// Microseconds of spinning first (0: not set here).
    pub(crate) spin_us: u32,
    /// Nanoseconds from the submit to the expected completion (see [`Backoff::expecting`]).
    pub(crate) expect_ns: Option<u64>,
}

/// An expected completion is awaited by spinning from this fraction of the expected time before it.
pub(crate) const EXPECT_GUARD_FRACTION: u64 = 16;
/// ... and from at least this long before it (a sleep's own lateness and the run-to-run spread).
pub(crate) const EXPECT_GUARD_MIN_NS: u64 = 50_000;

/// The phases of one wait, fixed when it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Backoff {
    start_ns: u64,
    spin_end_ns: u64,
    yield_end_ns: u64,
    first_sleep_us: u32,
    max_sleep_us: u32,
    /// The window `[from, until)` of an expected completion, spun through (see [`Backoff::expecting`]).
    expect: Option<(u64, u64)>,
}

impl Backoff {
    /// The wait that started at `start_ns` with a spin window of `spin_us` (0: the policy's own).
    pub(crate) fn new(start_ns: u64, spin_us: u32, policy: WaitPolicy) -> Backoff {
        let spin_ns = if spin_us != 0 { u64::from(spin_us) * 1_000 } else { policy.spin_ns };
        let spin_end_ns = start_ns.saturating_add(spin_ns);
        Backoff {
            start_ns,
            spin_end_ns,
            yield_end_ns: spin_end_ns.saturating_add(policy.yield_ns),
            first_sleep_us: policy.first_sleep_us.max(1),
            max_sleep_us: policy.max_sleep_us.max(policy.first_sleep_us).max(1),
            expect: None,
        }
    }

    /// The same wait, told that its completion is expected `expect_ns` after its start (`None` or 0: no
    /// expectation): no sleep runs into the guard before the expected completion, and the wait spins from
    /// the guard's start until a quarter of the expected time past it (then the backoff goes on).
    pub(crate) fn expecting(mut self, expect_ns: Option<u64>) -> Backoff {
        if let Some(e) = expect_ns.filter(|&e| e > 0) {
            let guard = (e / EXPECT_GUARD_FRACTION).max(EXPECT_GUARD_MIN_NS);
            let from = self.start_ns.saturating_add(e.saturating_sub(guard));
            self.expect = Some((from, self.start_ns.saturating_add(e + e / 4).saturating_add(guard)));
        }
        self
    }

    /// What to do when the clock reads `now_ns`.
    pub(crate) fn step(&self, now_ns: u64) -> Step {
        if now_ns < self.spin_end_ns {
            return Step::Spin;
        }
        if self.expect.is_some_and(|(from, until)| (from..until).contains(&now_ns)) {
            return Step::Spin;
        }
        if now_ns < self.yield_end_ns {
            return Step::Yield;
        }
        let waited_us = now_ns.saturating_sub(self.start_ns) / 1_000;
        let mut us = (waited_us / WaitPolicy::SLEEP_FRACTION)
            .clamp(u64::from(self.first_sleep_us), u64::from(self.max_sleep_us));
        if let Some((from, _)) = self.expect.filter(|&(from, _)| now_ns < from) {
            // Wake by the window's start; closer than a microsecond, yield instead.
            us = us.min((from - now_ns) / 1_000);
            if us == 0 {
                return Step::Yield;
            }
        }
        Step::Sleep(us as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: WaitPolicy = WaitPolicy { spin_ns: 30_000, yield_ns: 50_000, first_sleep_us: 10, max_sleep_us: 1000 };

    #[test]
    fn spin_then_yield_then_sleeps_that_grow_to_the_cap() {
        let b = Backoff::new(1_000_000, 0, POLICY);
        let at = |us: u64| b.step(1_000_000 + us * 1_000);
        assert_eq!(at(0), Step::Spin);
        assert_eq!(at(29), Step::Spin);
        assert_eq!(at(30), Step::Yield);
        assert_eq!(at(79), Step::Yield);
        assert_eq!(at(80), Step::Sleep(10), "the first sleep is the shortest");
        assert_eq!(at(800), Step::Sleep(100), "an eighth of the time waited");
        assert_eq!(at(8_000), Step::Sleep(1000));
        assert_eq!(at(100_000), Step::Sleep(1000), "capped");
    }

    #[test]
    fn an_explicit_window_replaces_the_policys_spin_and_the_backoff_follows_it() {
        let b = Backoff::new(0, 500, POLICY);
        assert_eq!(b.step(499_999), Step::Spin);
        assert_eq!(b.step(500_000), Step::Yield);
        assert_eq!(b.step(550_000), Step::Sleep(68), "550 us waited: an eighth");
    }

    #[test]
    fn a_long_wait_sleeps_rarely() {
        // Walk a 100 ms wait the way the session does and count the wake-ups.
        let b = Backoff::new(0, 0, POLICY);
        let (mut now, mut wakeups) = (0u64, 0u32);
        while now < 100_000_000 {
            match b.step(now) {
                Step::Spin => now += 100,
                Step::Yield => now += 1_000,
                Step::Sleep(us) => {
                    now += u64::from(us) * 1_000;
                    wakeups += 1;
                }
            }
        }
        assert!(wakeups < 150, "{wakeups} sleeps in 100 ms");
    }

    #[test]
    fn an_expected_completion_is_slept_up_to_and_spun_through() {
        // Expected 4 ms after the start: the guard is 250 us, so the window is [3.75 ms, 5.25 ms).
        let b = Backoff::new(0, 0, POLICY).expecting(Some(4_000_000));
        assert_eq!(b.step(0), Step::Spin, "the spin window first");
        assert_eq!(b.step(2_000_000), Step::Sleep(250), "an eighth of the wait, as before");
        assert_eq!(b.step(3_600_000), Step::Sleep(150), "no sleep into the guard");
        assert_eq!(b.step(3_749_500), Step::Yield, "under a microsecond before it: no sleep");
        assert_eq!(b.step(3_750_000), Step::Spin);
        assert_eq!(b.step(5_249_999), Step::Spin);
        assert_eq!(b.step(5_250_000), Step::Sleep(656), "past the window the backoff goes on");
        // A short expectation keeps the 50 us guard; none (or 0) is the plain backoff.
        assert_eq!(Backoff::new(0, 0, POLICY).expecting(Some(100_000)).step(50_000), Step::Spin);
        for none in [None, Some(0)] {
            assert_eq!(Backoff::new(0, 0, POLICY).expecting(none), Backoff::new(0, 0, POLICY));
        }
    }

    #[test]
    fn a_degenerate_policy_still_sleeps() {
        let b = Backoff::new(0, 0, WaitPolicy { spin_ns: 0, yield_ns: 0, first_sleep_us: 0, max_sleep_us: 0 });
        assert_eq!(b.step(0), Step::Sleep(1));
    }
}
