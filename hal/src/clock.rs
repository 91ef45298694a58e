//! The clock service: a monotonic nanosecond clock and a sleep, so the session layer's timeouts and
//! spin windows are driven by the platform (the simulator's clock is virtual and deterministic).

/// Monotonic time and sleep.
pub trait Clock: Send + Sync {
    /// Nanoseconds since an arbitrary, fixed origin. Never goes backwards.
    fn now_ns(&self) -> u64;
    /// Gives up the CPU for about `us` microseconds (the sleep half of sleep-polling).
    fn sleep_us(&self, us: u32);
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
}
