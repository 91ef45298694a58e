//! The clock service: the host's monotonic clock, read the cheapest way this machine allows.
//!
//! The session reads the clock in its completion loops (deadline, spin window) and around every launch,
//! so a clock read is on the launch's critical path. Where `CLOCK_MONOTONIC` is served by the vDSO it
//! costs ~20 ns and is used as is. In a VM whose clocksource the vDSO cannot read (hpet, acpi_pm, or a
//! kvm-clock without a stable TSC), every read is a system call and often a VM exit — microseconds. There,
//! if the CPU has an invariant TSC, the clock counts TSC ticks instead, converted with a rate measured
//! against `CLOCK_MONOTONIC` when the platform is made, and kept from ever going backwards.
//!
//! Device time (the nanosecond timestamps the GPU writes beside a released payload) is read through
//! [`crate::CompletionPoll::timestamp`], not here: the two clocks are not the same clock.

use crate::clock::{Clock, MonotonicClock};

/// A `CLOCK_MONOTONIC` read above this many nanoseconds (median of a few) is taken to be a system call.
const SLOW_READ_NS: u64 = 150;
/// How long the TSC rate is measured against `CLOCK_MONOTONIC` (an error of ~1 us at either end is 0.05%).
#[cfg(all(target_arch = "x86_64", not(loom)))]
const CALIBRATION_NS: u64 = 2_000_000;

/// Which source a [`NvidiaClock`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockSource {
    /// `CLOCK_MONOTONIC` through the vDSO.
    Monotonic,
    /// The invariant TSC, calibrated against `CLOCK_MONOTONIC` (chosen because that clock is a system call).
    Tsc,
}

/// The NVIDIA platform's clock (see the module docs).
#[derive(Debug)]
pub struct NvidiaClock {
    tsc: Option<Tsc>,
    /// Median cost of one `CLOCK_MONOTONIC` read when the clock was made, ns.
    monotonic_read_ns: u64,
}

impl Default for NvidiaClock {
    fn default() -> Self {
        Self::new()
    }
}

impl NvidiaClock {
    /// Measures `CLOCK_MONOTONIC` and picks the source.
    pub fn new() -> Self {
        let monotonic_read_ns = monotonic_read_cost();
        let tsc = if monotonic_read_ns > SLOW_READ_NS { Tsc::calibrate() } else { None };
        NvidiaClock { tsc, monotonic_read_ns }
    }

    /// `CLOCK_MONOTONIC` only, whatever it costs.
    pub fn monotonic() -> Self {
        NvidiaClock { tsc: None, monotonic_read_ns: 0 }
    }

    /// The source in use.
    pub fn source(&self) -> ClockSource {
        if self.tsc.is_some() {
            ClockSource::Tsc
        } else {
            ClockSource::Monotonic
        }
    }

    /// Median cost of one `CLOCK_MONOTONIC` read, measured when the clock was made (0 for [`Self::monotonic`]).
    pub fn monotonic_read_ns(&self) -> u64 {
        self.monotonic_read_ns
    }
}

impl Clock for NvidiaClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        match &self.tsc {
            Some(t) => t.now_ns(),
            None => MonotonicClock.now_ns(),
        }
    }

    fn sleep_us(&self, us: u32) {
        MonotonicClock.sleep_us(us)
    }

    fn precise_sleeps(&self) -> crate::clock::TimerSlack {
        MonotonicClock.precise_sleeps()
    }
}

/// Median over a few reads of what one `CLOCK_MONOTONIC` read costs, in ns.
fn monotonic_read_cost() -> u64 {
    let mut costs = [0u64; 9];
    for c in costs.iter_mut() {
        let t0 = MonotonicClock.now_ns();
        for _ in 0..7 {
            core::hint::black_box(MonotonicClock.now_ns());
        }
        *c = MonotonicClock.now_ns().saturating_sub(t0) / 8;
    }
    costs.sort_unstable();
    costs[costs.len() / 2]
}

/// TSC ticks to `CLOCK_MONOTONIC` nanoseconds: `ns0 + (tsc - tsc0) * mult >> 32`.
#[derive(Debug)]
struct Tsc {
    tsc0: u64,
    ns0: u64,
    /// Nanoseconds per tick, 32.32 fixed point.
    mult: u64,
    /// The largest value handed out, so a read on a CPU whose TSC lags cannot go backwards.
    last: crate::sync::AtomicU64,
}

impl Tsc {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    fn calibrate() -> Option<Tsc> {
        if !invariant_tsc() {
            return None;
        }
        let (ns0, tsc0) = (MonotonicClock.now_ns(), read_tsc());
        let (mut ns1, mut tsc1) = (ns0, tsc0);
        while ns1.saturating_sub(ns0) < CALIBRATION_NS {
            ns1 = MonotonicClock.now_ns();
            tsc1 = read_tsc();
        }
        let ticks = tsc1.checked_sub(tsc0).filter(|&t| t > 0)?;
        let mult = (((ns1 - ns0) as u128) << 32) / ticks as u128;
        let mult = u64::try_from(mult).ok().filter(|&m| m > 0)?;
        Some(Tsc { tsc0, ns0, mult, last: crate::sync::AtomicU64::new(ns0) })
    }

    // Other CPUs (and loom models, whose atomics cannot live outside a model) keep CLOCK_MONOTONIC.
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    fn calibrate() -> Option<Tsc> {
        None
    }

    #[inline]
    fn now_ns(&self) -> u64 {
        let ticks = read_tsc().wrapping_sub(self.tsc0);
        let ns = self.ns0 + ((ticks as u128 * self.mult as u128) >> 32) as u64;
        let prev = self.last.fetch_max(ns, crate::sync::Ordering::Relaxed);
        ns.max(prev)
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn read_tsc() -> u64 {
    // SAFETY: RDTSC has no preconditions and is part of the x86-64 baseline.
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn read_tsc() -> u64 {
    MonotonicClock.now_ns()
}

/// CPUID 0x8000_0007 EDX bit 8: the TSC ticks at a constant rate in every power state.
#[cfg(all(target_arch = "x86_64", not(loom)))]
fn invariant_tsc() -> bool {
    // SAFETY: CPUID is available on every x86-64 CPU; leaf 0x8000_0000 says how far the extended leaves go.
    #[allow(unused_unsafe)]
    let max = unsafe { core::arch::x86_64::__cpuid(0x8000_0000) }.eax;
    if max < 0x8000_0007 {
        return false;
    }
    // SAFETY: as above; the leaf exists (checked).
    #[allow(unused_unsafe)]
    let edx = unsafe { core::arch::x86_64::__cpuid(0x8000_0007) }.edx;
    edx & (1 << 8) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sources_agree_with_clock_monotonic_and_never_go_back() {
        let mono = NvidiaClock::monotonic();
        assert_eq!(mono.source(), ClockSource::Monotonic);
        #[cfg_attr(loom, allow(unused_mut))]
        let mut clocks = vec![NvidiaClock::new()];
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        if let Some(t) = Tsc::calibrate() {
            // Forced, so the TSC path is tested even where CLOCK_MONOTONIC is cheap.
            clocks.push(NvidiaClock { tsc: Some(t), monotonic_read_ns: 0 });
        }
        for c in &clocks {
            let mut prev = c.now_ns();
            for _ in 0..10_000 {
                let now = c.now_ns();
                assert!(now >= prev, "{:?} went back: {prev} -> {now}", c.source());
                prev = now;
            }
            // Within 1 ms of CLOCK_MONOTONIC across a 5 ms sleep (rate error 0.05% would be 2.5 us).
            let (a, m0) = (c.now_ns(), MonotonicClock.now_ns());
            MonotonicClock.sleep_us(5_000);
            let (b, m1) = (c.now_ns(), MonotonicClock.now_ns());
            let (dc, dm) = ((b - a) as i64, (m1 - m0) as i64);
            assert!((dc - dm).abs() < 1_000_000, "{:?}: {dc} ns against {dm} ns", c.source());
            assert!((a as i64 - m0 as i64).abs() < 50_000_000, "{:?} is not on CLOCK_MONOTONIC's origin", c.source());
        }
    }
}
