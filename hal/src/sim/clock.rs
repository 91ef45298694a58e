//! The simulator's virtual clock.

use crate::sync::{AtomicU64, Ordering};
use crate::Clock;

/// Virtual nanoseconds one yield costs (a `sched_yield` with nothing else to run, on a VM's host).
pub const YIELD_NS: u64 = 1_000;

/// Virtual time: each read advances it by a fixed tick, each sleep by the sleep's length and each yield
/// by [`YIELD_NS`]. Nothing here depends on the host's clock, so every run of a test sees the same times.
pub struct SimClock {
    now: AtomicU64,
    tick_ns: u64,
}

impl SimClock {
    pub(crate) fn new(tick_ns: u64) -> Self {
        Self { now: AtomicU64::new(1_000_000), tick_ns }
    }

    /// Moves time forward by `ns` (tests use it to pass a deadline without polling).
    pub fn advance(&self, ns: u64) {
        self.now.fetch_add(ns, Ordering::SeqCst);
    }

    /// The current virtual time, without advancing it.
    pub fn peek(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

impl Clock for SimClock {
    fn now_ns(&self) -> u64 {
        self.now.fetch_add(self.tick_ns, Ordering::SeqCst) + self.tick_ns
    }

    fn sleep_us(&self, us: u32) {
        self.advance(us as u64 * 1_000);
        // Let a thread that wants to cancel or take the lock run, as a real sleep would.
        crate::sync::thread::yield_now();
    }

    fn yield_now(&self) {
        self.advance(YIELD_NS);
        crate::sync::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yield_costs_fixed_virtual_time_and_precise_sleeps_change_nothing() {
        let c = SimClock::new(20);
        let t0 = c.peek();
        c.yield_now();
        c.sleep_us(3);
        assert_eq!(c.peek() - t0, YIELD_NS + 3_000);
        assert!(!c.precise_sleeps().is_lowered(), "virtual sleeps need no timer slack");
    }
}
