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

/// The phases of one wait, fixed when it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Backoff {
    start_ns: u64,
    spin_end_ns: u64,
    yield_end_ns: u64,
    first_sleep_us: u32,
    max_sleep_us: u32,
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
        }
    }

    /// What to do when the clock reads `now_ns`.
    pub(crate) fn step(&self, now_ns: u64) -> Step {
        if now_ns < self.spin_end_ns {
            return Step::Spin;
        }
        if now_ns < self.yield_end_ns {
            return Step::Yield;
        }
        let waited_us = now_ns.saturating_sub(self.start_ns) / 1_000;
        let us = (waited_us / WaitPolicy::SLEEP_FRACTION)
            .clamp(u64::from(self.first_sleep_us), u64::from(self.max_sleep_us));
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
    fn a_degenerate_policy_still_sleeps() {
        let b = Backoff::new(0, 0, WaitPolicy { spin_ns: 0, yield_ns: 0, first_sleep_us: 0, max_sleep_us: 0 });
        assert_eq!(b.step(0), Step::Sleep(1));
    }
}
