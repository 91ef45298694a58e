//! The channel service: the GPFIFO channels, the doorbell, the command arena where pushbuffers, QMDs and
//! constant banks are written for the GPU, the internal semaphores the backend's own waits use, and the
//! local-memory (SLM) backing store the compute channel points at. [`Channels`] holds all of it.
//!
//! Everything the GPU fetches to run work lives in video memory and is written by the CPU through a
//! write-combined BAR1 view, never read back (a BAR1 read costs about a microsecond). Write-combined
//! stores may reach the GPU in any order, so a store fence separates the commands from the GPFIFO
//! entry, the entry from GPPut, and GPPut from the doorbell.

use std::ptr;

use super::memory::{DriverMem, DriverMemKind, DriverMemSpec, HUGE_FROM, HUGE_PAGE, PAGE};
use super::push::{gpfifo_entry, Push};
use super::queue::queue_buffer;
use super::sys::{self, userd, NvNotification};
use super::{Base, GrInfo};
use crate::clock::Clock;
use crate::error::HalError;
use crate::poll::xid_name;
use crate::queue::QueueBuffer;

/// Orders every earlier store (write-combined ones included) before every later one, as the GPU sees them.
#[inline]
pub(crate) fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no preconditions; SSE is part of the x86-64 baseline.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dsb st` only waits for earlier stores to complete; it touches no memory.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// A GPFIFO channel: its ring and USERD block, error notifier, engines and work-submit token.
pub(crate) struct Channel {
    /// The copy-engine class bound to subchannel 4.
    pub(crate) copy_class: u32,
    /// Ring at offset 0, USERD at `userd_offset`; video memory, write-combined CPU view.
    pub(crate) gpfifo: DriverMem,
    pub(crate) userd_offset: u64,
    pub(crate) entries: u32,
    /// Entries written so far (GPPut is this modulo `entries`).
    pub(crate) put: u64,
    /// The ring as last written, so an entry goes out with the rest of its 64-byte line.
    pub(crate) shadow: Vec<u64>,
    pub(crate) token: u32,
    /// The driver's error notifier (system memory, CPU-mapped): entry 0 is the channel error.
    pub(crate) notifier: DriverMem,
}

impl Channel {
    /// The channel on a ring of `entries` entries at the start of `gpfifo` (USERD `userd_offset` bytes in),
    /// with its `notifier`, the copy class bound to subchannel 4, and its work-submit `token`.
    pub(crate) fn new(
        gpfifo: DriverMem,
        userd_offset: u64,
        entries: u32,
        notifier: DriverMem,
        copy_class: u32,
        token: u32,
    ) -> Self {
        let shadow = vec![0; entries as usize];
        Channel { copy_class, gpfifo, userd_offset, entries, put: 0, shadow, token, notifier }
    }

    /// Bytes of the GPFIFO area for `entries` entries: the ring, then one page of USERD.
    pub(crate) fn area_bytes(entries: u32) -> (u64, u64) {
        let ring = (entries as u64 * 8).div_ceil(PAGE) * PAGE;
        (ring, ring + PAGE)
    }

    /// Hands `dwords` of pushbuffer at `va` to the GPU.
    ///
    /// # Safety
    /// - `doorbell` is the mapped usermode page of this channel's GPU.
    /// - The pushbuffer at `va` is completely written (the store fence before GPPut orders it, and the
    ///   entry, before the GPU can see either).
    /// - Fewer than `entries` entries are outstanding (every earlier submission has completed).
    pub(crate) unsafe fn kick(&mut self, doorbell: *mut u8, va: u64, dwords: u32) {
        let slot = (self.put % self.entries as u64) as usize;
        let ring = self.gpfifo.cpu as *mut u64;
        // No fence between the commands and the entry: the GPU reads an entry only once GPPut covers
        // it, and reads the commands only through the entry, so the one fence before GPPut orders both.
        // The whole line: entries before `slot` were consumed (rewritten unchanged), those after it lie
        // past GPPut and are not read.
        self.shadow[slot] = gpfifo_entry(va, dwords);
        let line = slot / 8 * 8;
        // SAFETY: `entries` is a power of two of at least 16, so the 8-entry line holding `slot` is inside
        // the ring's `entries` u64 words mapped at `gpfifo.cpu` (page-aligned); the shadow has `entries`.
        unsafe { ptr::copy_nonoverlapping(self.shadow.as_ptr().add(line), ring.add(line), 8) };
        self.put += 1;
        store_fence();
        let gp_put = (self.put % self.entries as u64) as u32;
        // SAFETY: USERD lies inside the same mapping, `userd::BYTES` bytes from `userd_offset`.
        unsafe { (self.gpfifo.cpu.add(self.userd_offset as usize + userd::GP_PUT) as *mut u32).write_volatile(gp_put) };
        store_fence();
        // SAFETY: the caller vouches for the usermode mapping, which is `USERMODE_BYTES` long.
        unsafe { (doorbell.add(userd::DOORBELL) as *mut u32).write_volatile(self.token) };
    }

    /// The channel's error, if the driver reported one in notifier entry 0.
    pub(crate) fn error(&self) -> Option<NvNotification> {
        // SAFETY: the notifier mapping is at least one page and lives as long as the channel.
        let n = unsafe { (self.notifier.cpu as *const NvNotification).read_volatile() };
        (n.status != 0 || n.info32 != 0).then_some(n)
    }
}

/// Text for a notifier entry that reports an error.
pub(crate) fn describe_error(n: &NvNotification) -> String {
    format!("channel error Xid {} ({}): {}", n.info32, xid_name(n.info32), notifier_detail(n))
}

/// What the notifier entry says beyond the Xid.
pub(crate) fn notifier_detail(n: &NvNotification) -> String {
    format!("error notifier entry 0: info16 {}, status {:#x}", n.info16, n.status)
}

/// A ring of video memory the CPU writes commands into (write-combined), reused from the start when the
/// tail is too short. Reuse is safe because nothing written here is still needed when it is reused: a
/// reservation is only made when no earlier work is in flight.
pub(crate) struct Arena {
    pub(crate) mem: DriverMem,
    pub(crate) head: u64,
}

impl Arena {
    /// `len` bytes aligned to `align` (at most a page), or `None` when `len` exceeds the arena.
    pub(crate) fn reserve(&mut self, len: u64, align: u64) -> Option<(u64, *mut u8)> {
        let mut at = self.head.next_multiple_of(align);
        if at + len > self.mem.bytes {
            at = 0;
        }
        if len > self.mem.bytes {
            return None;
        }
        self.head = at + len;
        // SAFETY: `at + len <= bytes`, inside the arena's CPU mapping.
        Some((self.mem.va + at, unsafe { self.mem.cpu.add(at as usize) }))
    }
}

/// Whether a semaphore that counts up by one per release (skipping 0 at the wrap, `next_wait`) and now
/// reads `now` has passed `value`: `now` at most 2^31 releases ahead of it, in wrapping order.
pub(crate) fn reached(now: u32, value: u32) -> bool {
    now.wrapping_sub(value) as i32 >= 0
}

/// Copies `words` to a write-combined view.
///
/// # Safety
/// - `dst` is valid for `4 * words.len()` bytes of writes and 4-byte aligned.
pub(crate) unsafe fn write_words(dst: *mut u8, words: &[u32]) {
    // SAFETY: the caller vouches for the destination; the source is a live slice that cannot overlap a
    // device mapping.
    unsafe { ptr::copy_nonoverlapping(words.as_ptr(), dst as *mut u32, words.len()) };
}

/// Dwords in one 64-byte line.
pub(crate) const LINE_WORDS: usize = 16;

/// Copies `words` to a write-combined view in whole 64-byte lines, the last one padded with zeros.
///
/// A write-combining buffer that is full goes out as one burst; a partly filled one is flushed in
/// pieces at the next fence, which cost ~110 ns each on the H200's host against ~27 ns for whole
/// lines (docs/perf/2026-11-29-launch-path.md). The padding lands in memory nothing reads.
///
/// # Safety
/// - `dst` is 64-byte aligned and valid for `4 * words.len()` bytes rounded up to 64.
pub(crate) unsafe fn write_lines(dst: *mut u8, words: &[u32]) {
    let whole = words.len() / LINE_WORDS * LINE_WORDS;
    // SAFETY: the caller vouches for the destination, whole lines included.
    unsafe { write_words(dst, &words[..whole]) };
    let rest = &words[whole..];
    if !rest.is_empty() {
        let mut line = [0u32; LINE_WORDS];
        line[..rest.len()].copy_from_slice(rest);
        // SAFETY: the padded last line lies inside the caller's rounded-up region.
        unsafe { write_words(dst.add(whole * 4), &line) };
    }
}

/// `bytes` rounded up to whole 64-byte lines.
pub(crate) fn line_bytes(bytes: u64) -> u64 {
    bytes.next_multiple_of(64)
}

/// The slot of the internal semaphore page the backend's own waits use.
pub(crate) const SEM_WAIT: u64 = 0;
/// The slot barrier releases write to (nobody reads it).
pub(crate) const SEM_BARRIER: u64 = 16;
/// How long the backend's own waits spin-poll before sleep-polling, unless told otherwise.
pub(crate) const INTERNAL_SPIN_NS: u64 = 200_000;

/// A channel of its own on an asynchronous copy engine, for syncs.
pub(crate) struct CopyChannel {
    pub(crate) channel: Channel,
    /// Its NV2080_ENGINE_TYPE.
    pub(crate) engine_type: u32,
}

/// Which channel a pushbuffer goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// The compute channel (compute on subchannel 1, the graphics copy engine on 4).
    Compute,
    /// The asynchronous copy channel, which must exist.
    Copy,
}

/// One of the backend's own waits on the internal semaphore: the value its pushbuffer releases, how long
/// to wait in all and spinning, and what to call it in a timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wait {
    pub(crate) value: u32,
    pub(crate) timeout_ns: u64,
    pub(crate) spin_ns: u64,
    pub(crate) what: &'static str,
}

/// The SLM backing store for `per_thread` bytes of local memory per thread: (bytes per TPC, total).
pub(crate) fn slm_sizes(per_thread: u32, gr: &GrInfo) -> (u64, u64) {
    let per_warp = (per_thread as u64 * 32).next_multiple_of(0x200);
    let per_tpc = (per_warp * gr.max_warps_per_sm as u64 * gr.sm_per_tpc as u64).next_multiple_of(0x8000);
    let total = (per_tpc * gr.tpc_per_gpc as u64 * gr.gpcs as u64).next_multiple_of(0x2_0000);
    (per_tpc, total)
}

/// The channel service's state.
pub(crate) struct Channels {
    /// The compute channel.
    pub(crate) compute: Channel,
    /// The asynchronous copy channel, if the device has one and the driver took it.
    pub(crate) copy: Option<CopyChannel>,
    /// The usermode page (its doorbell word tells the host a channel has work), mapped at open.
    doorbell: *mut u8,
    /// Where pushbuffers (and QMDs not kept for reuse) are written.
    arena: Arena,
    /// The internal semaphore page (system memory): slot [`SEM_WAIT`] the backend's own waits, slot
    /// [`SEM_BARRIER`] barrier scratch.
    sems: DriverMem,
    /// The last value released to [`SEM_WAIT`].
    sem_value: u32,
    /// The SLM backing store, and the per-thread local memory it covers (0 before the first).
    slm: Option<DriverMem>,
    slm_per_thread: u32,
    /// The channels were stopped and freed (a recovery, `device.rs`): nothing may be sent any more.
    pub(crate) stopped: bool,
}

/// What [`Channels`] holds, for close to release in its own order.
pub(crate) struct ChannelParts {
    pub(crate) compute: Channel,
    pub(crate) copy: Option<CopyChannel>,
    pub(crate) doorbell: *mut u8,
    pub(crate) arena: DriverMem,
    pub(crate) sems: DriverMem,
    pub(crate) slm: Option<DriverMem>,
}

impl Channels {
    /// The compute channel's buffers that submitted work may touch: its ring, the driver's notifier for it,
    /// the arena (pushbuffers, QMDs, constant banks), the internal semaphores and the local memory. Not the
    /// copy channel's: syncs are waited for, so no work of its own is ever left uncertain.
    pub(crate) fn in_flight_buffers(&self) -> Vec<QueueBuffer> {
        let mut v = vec![
            queue_buffer("GPFIFO ring and USERD", &self.compute.gpfifo),
            queue_buffer("channel error notifier", &self.compute.notifier),
            queue_buffer("command arena (pushbuffers, QMDs, constant banks)", &self.arena.mem),
            queue_buffer("internal semaphores", &self.sems),
        ];
        v.extend(self.slm.as_ref().map(|m| queue_buffer("local memory (SLM)", m)));
        v
    }

    /// The service on the channels made at open, the mapped usermode page, the first command arena and
    /// the internal semaphore page (zeroed). No SLM store yet.
    pub(crate) fn new(
        compute: Channel,
        copy: Option<CopyChannel>,
        doorbell: *mut u8,
        arena: DriverMem,
        sems: DriverMem,
    ) -> Self {
        Channels {
            compute,
            copy,
            doorbell,
            arena: Arena { mem: arena, head: 0 },
            sems,
            sem_value: 0,
            slm: None,
            slm_per_thread: 0,
            stopped: false,
        }
    }

    /// Everything held, for close.
    pub(crate) fn into_parts(self) -> ChannelParts {
        let Channels { compute, copy, doorbell, arena, sems, slm, .. } = self;
        ChannelParts { compute, copy, doorbell, arena: arena.mem, sems, slm }
    }

    /// The next value of the internal wait semaphore, and its GPU address.
    pub(crate) fn next_wait(&mut self) -> (u64, u32) {
        self.sem_value = self.sem_value.wrapping_add(1).max(1);
        (self.sems.va + SEM_WAIT, self.sem_value)
    }

    /// The GPU address barrier releases write to.
    pub(crate) fn barrier_scratch_va(&self) -> u64 {
        self.sems.va + SEM_BARRIER
    }

    /// Per-thread local memory the SLM store covers, in bytes.
    pub(crate) fn local_bytes_per_thread(&self) -> u32 {
        self.slm_per_thread
    }

    /// Makes the SLM backing store cover `per_thread` bytes of local memory per thread, adding the
    /// methods that point the channel at a new one to `push`. The old store is freed at once: it is only
    /// ever replaced while no work is in flight, and the new methods precede any further launch.
    pub(crate) fn ensure_local_memory(
        &mut self,
        base: &mut Base,
        gr: &GrInfo,
        per_thread: u32,
        push: &mut Push,
    ) -> Result<(), HalError> {
        let per_thread = per_thread.next_multiple_of(32);
        if per_thread <= self.slm_per_thread {
            return Ok(());
        }
        let (per_tpc, total) = slm_sizes(per_thread, gr);
        let page = if total >= HUGE_FROM { HUGE_PAGE } else { PAGE };
        let spec = DriverMemSpec {
            kind: DriverMemKind::Vid,
            bytes: total,
            page,
            contiguous: false,
            cpu_map: None,
            low_va: false,
        };
        let mem = base.new_mem(spec, "allocate local memory (SLM)")?;
        push.local_memory(mem.va, per_tpc, 0xff);
        if let Some(old) = self.slm.replace(mem) {
            base.drop_mem(old);
        }
        self.slm_per_thread = per_thread;
        Ok(())
    }

    /// Makes sure the arena holds `len` bytes in one piece, replacing it by a larger one if not.
    pub(crate) fn arena_reserve(&mut self, base: &mut Base, len: u64, align: u64) -> Result<(u64, *mut u8), HalError> {
        if let Some(r) = self.arena.reserve(len, align) {
            return Ok(r);
        }
        let bytes = (len * 2).next_power_of_two();
        let spec = DriverMemSpec {
            kind: DriverMemKind::Vid,
            bytes,
            page: PAGE,
            contiguous: false,
            cpu_map: Some(sys::map_caching::WRITE_COMBINED),
            low_va: true,
        };
        let mem = base.new_mem(spec, "grow the command arena")?;
        let old = std::mem::replace(&mut self.arena, Arena { mem, head: 0 });
        base.drop_mem(old.mem);
        self.arena.reserve(len, align).ok_or(HalError::OutOfMemory { bytes: len })
    }

    /// Writes `push` into the arena and rings the doorbell of the `target` channel.
    pub(crate) fn send(&mut self, base: &mut Base, target: Target, push: &Push) -> Result<(), HalError> {
        if self.stopped {
            // The doorbell token names a channel RM has freed.
            return Err(HalError::Lost("nvidia: the channels were stopped and freed; close the device".into()));
        }
        let (va, cpu) = self.arena_reserve(base, line_bytes(push.bytes()), 256)?;
        // SAFETY: the reservation is `push.bytes()` rounded to lines long and 256-byte aligned.
        unsafe { write_lines(cpu, push.words()) };
        let channel = match (target, self.copy.as_mut()) {
            (Target::Copy, Some(c)) => &mut c.channel,
            (Target::Copy, None) => return Err(HalError::Unsupported("nvidia: no asynchronous copy channel".into())),
            (Target::Compute, _) => &mut self.compute,
        };
        // SAFETY: the usermode page is this device's; the pushbuffer was just written (the kick's store
        // fence orders it, and any patched QMD lines before it, ahead of the GPFIFO entry); the backend's
        // waits and the session's contract keep at most one submission in flight on either channel.
        unsafe { channel.kick(self.doorbell, va, push.words().len() as u32) };
        Ok(())
    }

    /// The first error either channel's notifier reports.
    pub(crate) fn any_error(&self) -> Option<NvNotification> {
        self.compute.error().or_else(|| self.copy.as_ref().and_then(|c| c.channel.error()))
    }

    /// Waits until the word at `cpu` has reached `wait.value` ([`reached`]: a staged copy waits for a
    /// piece while the next one's release may already have landed), ending early with a channel's error or at
    /// `wait.timeout_ns` with a timeout naming `wait.what`. Spin-polls for the first `wait.spin_ns`, then
    /// sleep-polls.
    ///
    /// # Safety
    /// - `cpu` points to a live, 4-byte aligned word the GPU releases to.
    pub(crate) unsafe fn wait_word(&self, cpu: *const u32, wait: Wait, clock: &dyn Clock) -> Result<(), HalError> {
        let Wait { value, timeout_ns, spin_ns, what } = wait;
        // The sleeps below end on time rather than up to the thread's timer slack (50 us) late.
        let _slack = clock.precise_sleeps();
        let start = clock.now_ns();
        let mut spins = 0u32;
        loop {
            // SAFETY: the caller vouches for the word.
            if reached(unsafe { cpu.read_volatile() }, value) {
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                if let Some(n) = self.any_error() {
                    return Err(HalError::Lost(format!("{what}: {}", describe_error(&n))));
                }
                let waited = clock.now_ns().saturating_sub(start);
                if waited > timeout_ns {
                    return Err(HalError::Lost(format!(
                        "{what}: no completion after {} ms (semaphore reads {:#x}, expected {value:#x})",
                        waited / 1_000_000,
                        // SAFETY: as above.
                        unsafe { cpu.read_volatile() }
                    )));
                }
                if waited > spin_ns {
                    clock.sleep_us(20);
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Sends `push`, which must end by releasing `wait.value` at the internal wait semaphore, on the
    /// `target` channel and waits for it.
    pub(crate) fn run(
        &mut self,
        base: &mut Base,
        target: Target,
        push: &Push,
        wait: Wait,
        clock: &dyn Clock,
    ) -> Result<(), HalError> {
        self.send(base, target, push)?;
        self.wait(wait, clock)
    }

    /// Waits for the internal wait semaphore to reach `wait.value` (a pushbuffer already sent releases it).
    pub(crate) fn wait(&self, wait: Wait, clock: &dyn Clock) -> Result<(), HalError> {
        let word = (self.sems.cpu as u64 + SEM_WAIT) as *const u32;
        // SAFETY: the internal semaphore page is mapped for as long as the device is open (as `self` is),
        // and slot SEM_WAIT is an aligned word the copy and host releases write.
        unsafe { self.wait_word(word, wait, clock) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slm_sizing_follows_the_fact_sheet_formula() {
        let h200 = GrInfo { sm_version: 0x900, max_warps_per_sm: 64, gpcs: 8, tpc_per_gpc: 9, sm_per_tpc: 2 };
        // 0x240 bytes per thread: 0x4800 per warp, x 64 warps x 2 SMs = 0x240000 per TPC, x 72 TPCs.
        let (per_tpc, total) = slm_sizes(0x240, &h200);
        assert_eq!(per_tpc, 0x24_0000);
        assert_eq!(total, 0x24_0000 * 72);
        // Rounding: 0x250 bytes -> 0x4a00 per warp -> 0x250000 per TPC (already a multiple of 0x8000).
        let (per_tpc, total) = slm_sizes(0x250, &h200);
        assert_eq!(per_tpc, 0x25_0000);
        assert_eq!(total % 0x2_0000, 0);
    }

    #[test]
    fn a_semaphore_has_reached_every_value_up_to_its_own_across_the_wrap() {
        assert!(reached(7, 7) && reached(8, 7) && !reached(6, 7));
        assert!(reached(2, u32::MAX) && !reached(u32::MAX, 2), "past the wrap");
        assert!(!reached(0, 1), "the reset word has reached no release");
    }

    #[test]
    fn gpfifo_area_is_the_ring_then_a_page_of_userd() {
        assert_eq!(Channel::area_bytes(1024), (8192, 12288));
        assert_eq!(Channel::area_bytes(100), (4096, 8192));
        assert!(userd::GP_PUT < userd::BYTES as usize);
    }

    #[test]
    fn the_arena_aligns_wraps_and_refuses_what_cannot_fit() {
        let mut backing = vec![0u8; 4096];
        let mem = DriverMem {
            handle: 1,
            kind: DriverMemKind::Vid,
            va: 0x10_0000_0000,
            bytes: 4096,
            cpu: backing.as_mut_ptr(),
            low_va: true,
        };
        let mut a = Arena { mem, head: 0 };
        let (va, cpu) = a.reserve(100, 256).unwrap();
        assert_eq!((va, cpu), (0x10_0000_0000, backing.as_mut_ptr()));
        let (va, _) = a.reserve(1000, 256).unwrap();
        assert_eq!(va, 0x10_0000_0100, "aligned after the first reservation");
        // 0x100 + 1000 = 0x4e8 -> next at 0x500; 3000 bytes do not fit before 4096: wrap to the start.
        let (va, _) = a.reserve(3000, 256).unwrap();
        assert_eq!(va, 0x10_0000_0000);
        assert!(a.reserve(4097, 256).is_none());
        assert_eq!(a.reserve(4096, 256).map(|r| r.0), Some(0x10_0000_0000));
    }

    #[test]
    fn whole_lines_pad_the_last_with_zeros_and_stop_there() {
        let mut dst = vec![0xffff_ffffu32; 64];
        let words: Vec<u32> = (1..=20).collect();
        // SAFETY: `dst` is 256 bytes; 20 words round up to 32 (128 bytes). A Vec<u32> is only 4-byte
        // aligned, which is all a host-memory copy needs.
        unsafe { write_lines(dst.as_mut_ptr() as *mut u8, &words) };
        assert_eq!(&dst[..20], &words[..]);
        assert!(dst[20..32].iter().all(|&w| w == 0), "the last line is padded");
        assert!(dst[32..].iter().all(|&w| w == 0xffff_ffff), "nothing past it is written");
        assert_eq!(line_bytes(80), 128);
        assert_eq!(line_bytes(128), 128);
    }

    #[test]
    fn error_text_names_the_xid() {
        let n = NvNotification { time_stamp: 5, info32: 31, info16: 1, status: 0xffff };
        let t = describe_error(&n);
        assert!(t.contains("Xid 31 (MMU fault)"), "{t}");
        assert!(t.contains("0xffff"), "{t}");
    }
}
