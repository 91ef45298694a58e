//! Visibility: moving bytes between a data buffer's CPU view (pinned host staging) and its video memory.
//!
//! Both directions use the copy engine on the compute channel, finished by a copy-engine semaphore
//! release (flushed) that the CPU waits for. Small syncs to the GPU are CPU stores through the buffer's
//! write-combined BAR1 view instead, which skips the round trip; nothing is ever read through BAR1.
//! Other placements need no bytes moved: polled and queue memory is one set of pages, and code is
//! written through BAR1 directly (a store fence makes it visible).

use std::ptr;

use super::channel::{store_fence, Target, Wait, INTERNAL_SPIN_NS};
use super::memory::Placement;
use super::push::Push;
use super::{Nvidia, NvidiaConfig, Open};
use crate::clock::Clock;
use crate::error::HalError;
use crate::memory::Allocation;
use crate::sync;
use crate::Visibility;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    ToGpu,
    ToCpu,
}

/// The visibility service's state: which copy engine syncs use, and why.
pub(crate) struct Syncs {
    /// The copy engine syncs use, and why (for reports).
    note: String,
    /// The asynchronous copy channel failed its setup: syncs stay on the graphics copy engine.
    async_failed: bool,
}

impl Syncs {
    /// The service, with `note` saying which copy engine the open found for syncs.
    pub(crate) fn new(note: String) -> Self {
        Syncs { note, async_failed: false }
    }

    /// The asynchronous copy channel failed its setup with `e`: syncs use the graphics copy engine from
    /// now on (the channel stays until close).
    pub(crate) fn async_copy_failed(&mut self, e: &HalError) {
        self.note = format!("graphics copy engine (the asynchronous one failed its setup: {e})");
        self.async_failed = true;
    }

    /// Which copy engine syncs use, and why.
    pub(crate) fn note(&self) -> &str {
        &self.note
    }

    /// The channel a copy-engine sync goes to: the asynchronous copy channel when asked for, made at open
    /// and not broken since; the compute channel's graphics copy engine otherwise.
    fn target(&self, config: &NvidiaConfig, has_copy_channel: bool) -> Target {
        if config.async_copy && has_copy_channel && !self.async_failed {
            Target::Copy
        } else {
            Target::Compute
        }
    }
}

impl Open {
    fn sync(
        &mut self,
        a: &Allocation,
        offset: u64,
        len: u64,
        dir: Direction,
        c: &NvidiaConfig,
        clock: &dyn Clock,
    ) -> Result<(), HalError> {
        let na = self
            .memory
            .get(a.id)
            .ok_or_else(|| HalError::Lost(format!("nvidia: sync of unknown buffer {} at {:#x}", a.id, a.va)))?;
        if len == 0 {
            return Ok(());
        }
        match na.placement {
            Placement::VidmemStaged => {}
            Placement::VidmemBar1 => {
                // Code: the next submission invalidates the instruction cache.
                self.queue.code_changed();
                store_fence();
                return Ok(());
            }
            Placement::SysmemPolled => {
                store_fence();
                return Ok(());
            }
            Placement::VidmemOnly => return Ok(()),
        }
        let staging = na.staging.as_ref().expect("a staged buffer has staging");
        if dir == Direction::ToGpu && len <= c.bar1_sync_max {
            if let Some(bar1) = na.bar1 {
                // SAFETY: both views cover the buffer and `offset + len <= bytes` (the caller's promise);
                // the BAR1 view is write-combined device memory that is only written, never read.
                unsafe {
                    ptr::copy_nonoverlapping(staging.cpu.add(offset as usize), bar1.add(offset as usize), len as usize)
                };
                store_fence();
                return Ok(());
            }
        }
        let (src, dst) = match dir {
            Direction::ToGpu => (staging.va + offset, na.primary.va + offset),
            Direction::ToCpu => (na.primary.va + offset, staging.va + offset),
        };
        // Allow 1 ns per byte (1 GB/s, far below PCIe) on top of the fixed limit.
        let timeout_ns = c.internal_timeout_ms * 1_000_000 + len;
        let what = if dir == Direction::ToGpu { "sync to GPU (copy engine)" } else { "sync to CPU (copy engine)" };
        let target = self.syncs.target(c, self.channels.copy.is_some());
        let mut push = Push::new();
        push.copy_lines(src, dst, len, c.copy_chunk_bytes, c.copy_line_bytes);
        let (sem, value) = self.channels.next_wait();
        push.copy_release(sem, value);
        let wait = Wait { value, timeout_ns, spin_ns: INTERNAL_SPIN_NS, what };
        self.channels.run(&mut self.base, target, &push, wait, clock)
    }
}

impl Nvidia {
    fn sync(&self, a: &Allocation, offset: u64, len: u64, dir: Direction) -> Result<(), HalError> {
        let mut st = sync::lock(&self.state);
        let open = st.as_mut().ok_or_else(|| HalError::NoDevice("nvidia: device not open".into()))?;
        open.sync(a, offset, len, dir, &self.config(), &self.clock)
    }
}

impl Visibility for Nvidia {
    unsafe fn sync_to_gpu(&self, a: &Allocation, offset: u64, len: u64) -> Result<(), HalError> {
        self.sync(a, offset, len, Direction::ToGpu)
    }

    unsafe fn sync_to_cpu(&self, a: &Allocation, offset: u64, len: u64) -> Result<(), HalError> {
        self.sync(a, offset, len, Direction::ToCpu)
    }
}
