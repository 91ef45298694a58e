//! The clock service: the host's monotonic clock. Device time (the nanosecond timestamps the GPU writes
//! beside a released payload) is read through [`crate::CompletionPoll::timestamp`], not here, because
//! the two clocks are not the same clock.

pub use crate::clock::MonotonicClock as NvidiaClock;
