//! Faults named at once: UVM's fatal-fault events, read from a queue in this process's memory.
//!
//! The channel's error notifier, which `poll::channel_fault` reads, is written by GSP-RM at the end of
//! its channel teardown, 80-180 ms after a kernel's store to an unmapped address (docs/perf,
//! 2026-11-29). The fault reaches UVM long before that: the VA space has replayable faulting on
//! (`sys::VASPACE_ENABLE_PAGE_FAULTING`), so the SM's fault lands in UVM's replayable fault buffer, UVM
//! finds no range for the address, records a fatal-fault event (`uvm_tools_record_gpu_fatal_fault`) and
//! only then cancels the access, which is what hands the fault to RM for teardown
//! (`cancel_fault_precise_va` in uvm_gpu_replayable_faults.c). A copy engine's fault takes UVM's
//! non-replayable path and records the same event before `schedule_kill_channel`.
//!
//! A tracker on `/dev/nvidia-uvm-tools`, bound to this process's UVM file, gets those events written
//! into pages of this process (pinned by the driver): a control block whose `put_behind` the driver
//! advances, and a ring of entries. Looking for a fault is one read of that word, no system call, so
//! the poll loop can do it as often as it reads the notifier. Only faults are seen this way; every other
//! channel error (a GR exception, a PBDMA error) still comes from the notifier, which is read as before.

use std::sync::atomic::{AtomicU32, Ordering};

use super::ioctl::{self, req, DriverFd, UvmToolsFile};
use super::sys::{self, uvm_event};
use crate::error::HalError;

/// ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT (nverror.h): the Xid the driver writes for an MMU fault, and so
/// the one a fatal-fault event is named with before it does.
pub(crate) const XID_MMU_FAULT: u32 = 31;

/// The fault signal an open uses when `OMEGA_NVIDIA_FAULT_SIGNAL` is unset: the one line to change when
/// the default moves. UVM's events where they can be had, else the notifier (the platform's notes say
/// which): the whole GPU suite ran with the event path on and gave the default run's result, with MMU
/// faults named 0.24-0.45 ms after they happened against the notifier's 86-127 ms
/// (docs/perf/2026-12-02-s3-suite-matmul-launch.md).
pub const DEFAULT_FAULT_SIGNAL: FaultSignal = FaultSignal::UvmEventsOrNotifier;

/// Which signal names a faulted channel (`NvidiaConfig::fault_signal`, `OMEGA_NVIDIA_FAULT_SIGNAL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultSignal {
    /// UVM's fatal-fault events for MMU faults, the notifier for everything else; open fails, naming
    /// the step, when the events cannot be had. `uvm`.
    UvmEvents,
    /// As `UvmEvents` where the events can be had, else the notifier alone; the platform's notes say
    /// which is active and why. `uvm-or-notifier`.
    UvmEventsOrNotifier,
    /// The error notifier alone (an MMU fault is named when the driver's teardown ends). `notifier`.
    Notifier,
}

impl FaultSignal {
    /// The value of `OMEGA_NVIDIA_FAULT_SIGNAL`, or `default` when it is unset. An unknown value is ignored
    /// with a line on stderr naming it, as the numeric settings are.
    pub fn from_env(default: FaultSignal) -> FaultSignal {
        match std::env::var("OMEGA_NVIDIA_FAULT_SIGNAL") {
            Err(_) => default,
            Ok(v) => FaultSignal::parse(&v).unwrap_or_else(|| {
                eprintln!("omega (nvidia): OMEGA_NVIDIA_FAULT_SIGNAL={v:?} is not uvm, uvm-or-notifier or notifier; using {default:?}");
                default
            }),
        }
    }

    /// `uvm`, `uvm-or-notifier` or `notifier`.
    pub fn parse(s: &str) -> Option<FaultSignal> {
        match s.trim() {
            "uvm" => Some(FaultSignal::UvmEvents),
            "uvm-or-notifier" => Some(FaultSignal::UvmEventsOrNotifier),
            "notifier" => Some(FaultSignal::Notifier),
            _ => None,
        }
    }
}

/// Why UVM's fault events are not watched.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FaultWatchError {
    /// The configuration asked for the notifier alone.
    #[error("the configuration asks for the error notifier alone")]
    NotAsked,
    /// The VA space is made without replayable faulting, so a kernel's fault goes to RM alone.
    #[error(
        "the VA space flags {flags:#x} lack ENABLE_PAGE_FAULTING ({:#x}): a kernel's fault never reaches UVM",
        sys::VASPACE_ENABLE_PAGE_FAULTING
    )]
    NoPageFaulting {
        /// The NV_VASPACE_ALLOCATION flags in use.
        flags: u32,
    },
    /// A step of setting up the tracker failed (the error names the step).
    #[error("{0}")]
    Setup(HalError),
}

/// Entries of the event ring: a power of two; a fault stops the channel, so a handful would do.
const RING_ENTRIES: u32 = 64;
/// The control block has a page of its own; the ring follows it.
const RING_OFFSET: usize = 4096;
/// The whole mapping: the control page, then the ring rounded up to pages.
/// The queue's pages are read and written by this process (the driver writes them through its own pin).
const PROT_RW: libc::c_int = libc::PROT_READ | libc::PROT_WRITE;
const MAPPING_BYTES: usize = RING_OFFSET + (RING_ENTRIES as usize * uvm_event::ENTRY_V2_BYTES).div_ceil(4096) * 4096;

/// A fatal fault UVM reported for this process's VA space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FatalFault {
    pub(crate) event: sys::UvmEventFatalFault,
    /// `CLOCK_MONOTONIC_RAW` when this process first read the event (the clock of `event.time_stamp`).
    pub(crate) seen_raw_ns: u64,
    /// Further fatal-fault events read after this one.
    pub(crate) more: u32,
}

impl FatalFault {
    /// What the event says, for a `ChannelFault`'s detail.
    pub(crate) fn detail(&self) -> String {
        let e = &self.event;
        let lag_us = self.seen_raw_ns.saturating_sub(e.time_stamp) as f64 / 1e3;
        let more = if self.more > 0 { format!(", {} more after it", self.more) } else { String::new() };
        format!(
            "UVM fatal-fault event: {} at {:#x} by {} ({}, {}), read {lag_us:.0} us after UVM recorded it{more}; \
             the driver's error notifier follows when its channel teardown ends",
            access_name(e.access_type),
            e.address,
            if e.processor_index == uvm_event::PROCESSOR_CPU {
                "the CPU".to_string()
            } else {
                format!("GPU {}", e.processor_index)
            },
            fault_type_name(e.fault_type),
            reason_name(e.reason),
        )
    }
}

/// UvmEventMemoryAccessType.
fn access_name(t: u8) -> &'static str {
    match t {
        1 => "read",
        2 => "write",
        3 => "atomic",
        4 => "prefetch",
        _ => "access",
    }
}

/// UvmEventFaultType.
fn fault_type_name(t: u8) -> &'static str {
    match t {
        1 => "invalid PDE",
        2 => "invalid PTE",
        3 => "write to read-only",
        4 => "atomic not allowed",
        5 => "invalid PDE size",
        6 => "limit violation",
        7 => "unbound instance block",
        8 => "privilege violation",
        9 => "pitch mask violation",
        10 => "work creation",
        11 => "unsupported aperture",
        12 => "compression failure",
        13 => "unsupported kind",
        14 => "region violation",
        15 => "poison",
        16 => "CC violation",
        _ => "fault",
    }
}

/// UvmEventFatalReason.
fn reason_name(r: u8) -> &'static str {
    match r {
        1 => "no mapping",
        2 => "no permission",
        3 => "fault type UVM cannot service",
        4 => "out of memory",
        5 => "UVM internal error",
        6 => "invalid operation",
        _ => "fatal",
    }
}

/// `CLOCK_MONOTONIC_RAW`, the clock UVM stamps its events with (`NV_GETTIME`: `ktime_get_raw_ts64`).
fn raw_now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a live, writable timespec; CLOCK_MONOTONIC_RAW exists on every Linux this runs on.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_RAW, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// UVM's event queue for this process's VA space, with fatal-fault events enabled.
pub(crate) struct FaultEvents {
    /// The tracker's file; closing it makes the driver unpin and unmap `pages`, so it goes first.
    tools: Option<DriverFd<UvmToolsFile>>,
    /// `MAPPING_BYTES` of anonymous memory: the control block at 0, the ring at `RING_OFFSET`.
    pages: *mut u8,
    /// The next entry to read (the driver's `get`, which this process owns).
    get: u32,
    /// The first fatal fault read, kept: the channel it stopped stays dead.
    first: Option<FatalFault>,
}

// SAFETY: `pages` is a mapping owned by this value; it is reached only through `&mut self` (under the
// platform's state mutex), so moving the value moves sole access with it.
unsafe impl Send for FaultEvents {}

impl FaultEvents {
    /// A tracker on the VA space of `uvm` (this process's initialized `/dev/nvidia-uvm` file), with
    /// fatal-fault events on. Each failing step is named in the error.
    pub(crate) fn open(uvm: &DriverFd<ioctl::UvmFile>) -> Result<FaultEvents, HalError> {
        let tools = DriverFd::open_uvm_tools("open /dev/nvidia-uvm-tools")?;
        // SAFETY: anonymous pages, no driver file behind them.
        let p =
            unsafe { ioctl::map(MAPPING_BYTES as u64, PROT_RW, libc::MAP_PRIVATE, None, "map the UVM event queue") }?;
        // From here `Drop` releases the mapping (and the file, first) on every path.
        let ev = FaultEvents { tools: Some(tools), pages: p, get: 0, first: None };
        let tools = ev.tools.as_ref().expect("just set");
        let mut init = sys::UvmToolsInitEventTracker {
            queue_buffer: ev.pages as u64 + RING_OFFSET as u64,
            queue_buffer_size: u64::from(RING_ENTRIES),
            control_buffer: ev.pages as u64,
            uvm_fd: uvm.raw() as u32,
            ..Default::default()
        };
        // SAFETY: both addresses lie in the page-aligned mapping above, which holds the control block
        // (528 bytes) in its first page and RING_ENTRIES entries of ENTRY_V2_BYTES from RING_OFFSET, as
        // the driver reads `queueBufferSize * sizeof(UvmEventEntry_V2)` bytes there; the driver pins those
        // pages and writes them until the tracker's file is closed, which `Drop` does before unmapping.
        // `uvm_fd` is this process's initialized UVM file, which the tracker holds a reference to.
        unsafe {
            ioctl::send::<req::UvmToolsInitEventTracker>(tools, &mut init, "UVM_TOOLS_INIT_EVENT_TRACKER_V2", "")?
        };
        let mut enable =
            sys::UvmToolsEnableEvents { event_type_flags: 1 << uvm_event::TYPE_FATAL_FAULT, ..Default::default() };
        ioctl::send_plain::<req::UvmToolsEnableEvents>(
            tools,
            &mut enable,
            "UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS",
            "fatal faults",
        )?;
        Ok(ev)
    }

    /// The control block's word at `offset`, as an atomic shared with the driver.
    fn control_word(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: the control block lies at the start of the mapping, which lives as long as `self`;
        // every `offset` used is a 4-byte aligned field of it (get_ahead 0, get_behind 4, put_behind 12).
        // The driver writes the same words with atomic stores (`atomic_set`), so an atomic view is sound.
        unsafe { AtomicU32::from_ptr(self.pages.add(offset) as *mut u32) }
    }

    /// The first fatal fault of this VA space, reading any new events first. One atomic load when the
    /// queue is empty.
    pub(crate) fn fatal_fault(&mut self) -> Option<FatalFault> {
        let put = self.control_word(12).load(Ordering::Acquire) & (RING_ENTRIES - 1);
        if put == self.get {
            return self.first;
        }
        let seen_raw_ns = raw_now_ns();
        while self.get != put {
            // SAFETY: `get` is below RING_ENTRIES, so the entry lies inside the ring, 8-byte aligned (the
            // ring starts on a page, entries are 72 bytes); the driver wrote it before advancing
            // `put_behind` (read with Acquire above) and does not touch it until `get` passes it.
            let event = unsafe {
                (self.pages.add(RING_OFFSET + self.get as usize * uvm_event::ENTRY_V2_BYTES)
                    as *const sys::UvmEventFatalFault)
                    .read_volatile()
            };
            if event.event_type == uvm_event::TYPE_FATAL_FAULT {
                match &mut self.first {
                    Some(f) => f.more += 1,
                    None => self.first = Some(FatalFault { event, seen_raw_ns, more: 0 }),
                }
            }
            self.get = (self.get + 1) & (RING_ENTRIES - 1);
        }
        // Both get words: the driver's full-queue test reads get_behind, its wake-up test get_ahead.
        self.control_word(4).store(self.get, Ordering::Release);
        self.control_word(0).store(self.get, Ordering::Release);
        self.first
    }

    /// Events the driver dropped on a full queue, of every type.
    pub(crate) fn dropped(&self) -> u64 {
        // SAFETY: the control block lies at the start of the live mapping; `dropped` is 8-byte aligned at
        // offset 16 with NUM_TYPES_ALL counters.
        (0..uvm_event::NUM_TYPES_ALL)
            .map(|i| unsafe { (self.pages.add(16 + 8 * i) as *const u64).read_volatile() })
            .sum()
    }
}

impl Drop for FaultEvents {
    fn drop(&mut self) {
        // The driver unpins and unmaps the pages when the tracker's file closes (`destroy_event_tracker`).
        drop(self.tools.take());
        // SAFETY: `pages` is the MAPPING_BYTES mapping made in `open`, unmapped only here, and no longer
        // pinned by the driver (its file is closed above).
        unsafe { ioctl::unmap(self.pages, MAPPING_BYTES as u64) };
    }
}

/// Which signal the open device watches, and why not UVM's events when it does not.
pub(crate) enum FaultWatch {
    /// UVM's fatal-fault events, and the notifier for the rest.
    Events(FaultEvents),
    /// The notifier alone.
    Notifier(FaultWatchError),
}

impl FaultWatch {
    /// Sets up the watch `signal` asks for over `uvm`, with the VA space made with `vaspace_flags`.
    /// `UvmEvents` refuses (the error names the step) where `UvmEventsOrNotifier` falls back.
    pub(crate) fn open(
        signal: FaultSignal,
        vaspace_flags: u32,
        uvm: &DriverFd<ioctl::UvmFile>,
    ) -> Result<FaultWatch, HalError> {
        if signal == FaultSignal::Notifier {
            return Ok(FaultWatch::Notifier(FaultWatchError::NotAsked));
        }
        let events = if vaspace_flags & sys::VASPACE_ENABLE_PAGE_FAULTING == 0 {
            Err(FaultWatchError::NoPageFaulting { flags: vaspace_flags })
        } else {
            FaultEvents::open(uvm).map_err(FaultWatchError::Setup)
        };
        match (events, signal) {
            (Ok(ev), _) => Ok(FaultWatch::Events(ev)),
            (Err(e), FaultSignal::UvmEventsOrNotifier) => Ok(FaultWatch::Notifier(e)),
            (Err(FaultWatchError::Setup(e)), _) => Err(e),
            (Err(e), _) => {
                Err(HalError::Unsupported(format!("nvidia fault signal (OMEGA_NVIDIA_FAULT_SIGNAL=uvm): {e}")))
            }
        }
    }

    /// The first fatal fault UVM reported, if the events are watched.
    pub(crate) fn fatal_fault(&mut self) -> Option<FatalFault> {
        match self {
            FaultWatch::Events(ev) => ev.fatal_fault(),
            FaultWatch::Notifier(_) => None,
        }
    }

    /// Which signal is active and why, for reports.
    pub(crate) fn note(&self) -> String {
        match self {
            FaultWatch::Events(ev) => {
                let dropped = ev.dropped();
                let dropped = if dropped > 0 { format!("; {dropped} events dropped") } else { String::new() };
                format!(
                    "UVM fatal-fault events ({}) for MMU faults, the error notifier for other channel errors{dropped}",
                    ioctl::UVM_TOOLS_PATH
                )
            }
            FaultWatch::Notifier(why) => format!("the error notifier alone ({why})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_parses_its_three_words_only() {
        assert_eq!(FaultSignal::parse("uvm"), Some(FaultSignal::UvmEvents));
        assert_eq!(FaultSignal::parse(" uvm-or-notifier\n"), Some(FaultSignal::UvmEventsOrNotifier));
        assert_eq!(FaultSignal::parse("notifier"), Some(FaultSignal::Notifier));
        assert_eq!(FaultSignal::parse("UVM"), None);
        assert_eq!(FaultSignal::parse(""), None);
    }

    #[test]
    fn the_mapping_holds_the_control_block_and_the_ring() {
        assert!(size_of::<sys::UvmToolsEventControl>() <= RING_OFFSET);
        assert!(RING_OFFSET + RING_ENTRIES as usize * uvm_event::ENTRY_V2_BYTES <= MAPPING_BYTES);
        assert!(RING_ENTRIES.is_power_of_two() && RING_ENTRIES >= 2);
        assert_eq!(uvm_event::ENTRY_V2_BYTES % 8, 0, "entries stay 8-byte aligned");
    }

    /// A queue over host memory with no driver behind it: what the driver's `enqueue_event` does is done by
    /// hand, so the reader's side (indices, wrap, first fault kept, entries of other types skipped, both get
    /// words written back) is tested on the exact layout.
    fn fake_queue() -> FaultEvents {
        // SAFETY: as in `open`.
        let p = unsafe { ioctl::map(MAPPING_BYTES as u64, PROT_RW, libc::MAP_PRIVATE, None, "fake queue") }.unwrap();
        FaultEvents { tools: None, pages: p, get: 0, first: None }
    }

    fn enqueue(q: &FaultEvents, event_type: u8, address: u64, time_stamp: u64) {
        let put = q.control_word(12).load(Ordering::Relaxed);
        let e = sys::UvmEventFatalFault {
            event_type,
            fault_type: 1,
            access_type: 2,
            reason: 1,
            processor_index: 1,
            address,
            time_stamp,
            ..Default::default()
        };
        // SAFETY: `put` is below RING_ENTRIES: the entry lies inside the test's mapping.
        unsafe {
            (q.pages.add(RING_OFFSET + put as usize * uvm_event::ENTRY_V2_BYTES) as *mut sys::UvmEventFatalFault)
                .write_volatile(e)
        };
        let next = (put + 1) & (RING_ENTRIES - 1);
        q.control_word(8).store(next, Ordering::Release);
        q.control_word(12).store(next, Ordering::Release);
    }

    #[test]
    fn the_reader_keeps_the_first_fatal_fault_and_hands_every_entry_back() {
        let mut q = fake_queue();
        assert_eq!(q.fatal_fault(), None, "an empty queue");
        // Entries of another type (a migration, say) are consumed and skipped.
        enqueue(&q, 2, 0x1000, 5);
        assert_eq!(q.fatal_fault(), None);
        assert_eq!(q.control_word(4).load(Ordering::Relaxed), 1, "get_behind handed back");
        assert_eq!(q.control_word(0).load(Ordering::Relaxed), 1, "get_ahead handed back");
        let now = raw_now_ns();
        enqueue(&q, uvm_event::TYPE_FATAL_FAULT, 0x7f00_0000_1000, now);
        enqueue(&q, uvm_event::TYPE_FATAL_FAULT, 0x7f00_0000_2000, now + 1);
        let f = q.fatal_fault().expect("a fatal fault");
        assert_eq!(f.event.address, 0x7f00_0000_1000, "the first one is kept");
        assert_eq!(f.more, 1);
        assert!(f.seen_raw_ns >= now);
        let d = f.detail();
        assert!(d.contains("write at 0x7f0000001000 by GPU 1 (invalid PDE, no mapping)"), "{d}");
        assert!(d.contains("1 more after it"), "{d}");
        // Later polls with nothing new return the same fault without touching the ring.
        assert_eq!(q.fatal_fault(), Some(f));
        // Around the ring's end: the index wraps and the first fault stays the one kept.
        for i in 0..RING_ENTRIES + 5 {
            enqueue(&q, uvm_event::TYPE_FATAL_FAULT, 0x9000 + u64::from(i), now);
            q.fatal_fault();
        }
        let f2 = q.fatal_fault().expect("still faulted");
        assert_eq!(f2.event.address, 0x7f00_0000_1000);
        assert_eq!(f2.more, 1 + RING_ENTRIES + 5);
        assert_eq!(q.get, q.control_word(12).load(Ordering::Relaxed));
        assert_eq!(q.dropped(), 0);
    }

    #[test]
    fn the_notifier_alone_is_named_with_its_reason() {
        let uvm: DriverFd<ioctl::UvmFile> = DriverFd::null();
        let w = FaultWatch::open(FaultSignal::Notifier, sys::VASPACE_FLAGS, &uvm).unwrap();
        assert!(w.note().contains("notifier alone (the configuration asks"), "{}", w.note());
        // Without replayable faulting the events can never fire: refused when asked for, named when not.
        let e = FaultWatch::open(FaultSignal::UvmEvents, 0x8, &uvm).err().expect("refused");
        assert!(e.to_string().contains("lack ENABLE_PAGE_FAULTING"), "{e}");
        let mut w = FaultWatch::open(FaultSignal::UvmEventsOrNotifier, 0x8, &uvm).unwrap();
        assert!(w.note().contains("flags 0x8"), "{}", w.note());
        assert_eq!(w.fatal_fault(), None);
    }

    #[test]
    fn a_missing_tools_device_is_refused_or_named_as_the_config_says() {
        if std::path::Path::new(ioctl::UVM_TOOLS_PATH).exists() {
            // A machine with the driver: the tracker is tried for real in the GPU suite, not here (the
            // UVM file below is /dev/null, which the driver would refuse as no VA space).
            return;
        }
        let uvm: DriverFd<ioctl::UvmFile> = DriverFd::null();
        match FaultWatch::open(FaultSignal::UvmEvents, sys::VASPACE_FLAGS, &uvm) {
            Err(HalError::Driver { call, status, .. }) => {
                assert_eq!(call, "open /dev/nvidia-uvm-tools");
                assert_eq!(status, libc::ENOENT as u32);
            }
            other => panic!("expected the open to be named, got {:?}", other.map(|w| w.note())),
        }
        let w = FaultWatch::open(FaultSignal::UvmEventsOrNotifier, sys::VASPACE_FLAGS, &uvm).unwrap();
        let note = w.note();
        assert!(note.starts_with("the error notifier alone (driver refused open /dev/nvidia-uvm-tools"), "{note}");
    }
}
