//! Visibility: moving bytes between a data buffer's CPU view and its video memory, and between a caller's
//! slice and a buffer's device side (device-only buffers).
//!
//! Each sync takes the first path that applies:
//!
//! 1. **BAR1**: a sync to the GPU of at most `bar1_sync_max` bytes of a buffer with a BAR1 view is CPU
//!    stores through that write-combined view and a store fence; no round trip. Nothing is ever read
//!    through BAR1.
//! 2. **Direct**: the view is registered (pinned and GPU-mapped, see `memory.rs`), so the copy engine
//!    copies between it and video memory in one submission, finished by a copy-engine semaphore release
//!    the CPU waits for. A large sync may register the view first (`register_sync_bytes`,
//!    `register_after`, within `pinned_budget_bytes`).
//! 3. **Staged**: through the staging ring, two halves of `staging_bytes` of pinned, GPU-mapped host
//!    memory owned by the open device, cut into `staging_slots` slots of one piece each. To the GPU, the
//!    CPU fills the next slots while the copy engine drains one piece and has the next queued behind it;
//!    to the CPU, the copy engine fills slots ahead while the CPU drains the ones it filled. A slot is
//!    handed to the CPU only after the copy engine's copy out of (or into) it completed, and to the copy
//!    engine only after the CPU finished with it, so no two users ever share a slot. At most
//!    `staging_slots` copies of one sync are in flight, the most recent reservations of the command
//!    arena (4 MiB against a few hundred bytes each: none is reused while it runs), and the service's
//!    state mutex (held for the whole sync) serialises syncs. Device-side writes and reads of buffers
//!    without a CPU view go this way too.
//!
//! A copy that does not complete (a timeout, a channel error) may still be running on the device: the
//! ring it used is given up — kept, never reused, freed at close after the channels — and the next
//! staged copy makes a new one. Other placements need no bytes moved: polled and queue memory is one
//! set of pages, and code is written through BAR1 directly (a store fence makes it visible).

use std::ptr;

use super::channel::{store_fence, Target, Wait, INTERNAL_SPIN_NS};
use super::crew::{Crew, CrewJob};
use super::memory::{DriverMem, DriverMemKind, DriverMemSpec, Placement, HUGE_PAGE, PAGE};
use super::push::Push;
use super::{sys, Base, Nvidia, NvidiaConfig, OpenDevice};
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

/// Where the CPU's side of a staged copy is: the bytes the CPU reads (to the GPU) or writes (to the CPU).
#[derive(Clone, Copy, Debug)]
struct HostBytes {
    ptr: *mut u8,
    len: u64,
}

/// The staging ring: two halves of `half` bytes (cut into slots by each copy), pinned host memory mapped
/// for the GPU.
pub(crate) struct StagingRing {
    mem: DriverMem,
    half: u64,
}

/// The visibility service's state: which copy engine syncs use and why, and the staging ring.
pub(crate) struct Syncs {
    /// The copy engine syncs use, and why (for reports).
    note: String,
    /// The asynchronous copy channel failed its setup: syncs stay on the graphics copy engine.
    async_failed: bool,
    /// The ring, from its first use until close.
    ring: Option<StagingRing>,
    /// Rings given up after a copy that did not complete: the device may still write them, so they are
    /// only freed at close, after the channels.
    lost: Vec<DriverMem>,
    /// The CPU threads of large staged copies, from the first such copy until close.
    crew: Option<Crew<StagedShares>>,
}

impl Syncs {
    /// The service, with `note` saying which copy engine the open found for syncs.
    pub(crate) fn new(note: String) -> Self {
        Syncs { note, async_failed: false, ring: None, lost: Vec::new(), crew: None }
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

    /// The memory close frees (after the channels): the ring and every ring given up.
    pub(crate) fn into_memory(self) -> impl Iterator<Item = DriverMem> {
        self.ring.map(|r| r.mem).into_iter().chain(self.lost)
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

    /// The ring with halves of `config.staging_bytes`, made now if there is none of that size (one of
    /// another size is freed first: no copy is in flight between syncs). Returns its GPU address, CPU
    /// address and half size.
    fn ring(&mut self, base: &mut Base, config: &NvidiaConfig) -> Result<(u64, *mut u8, u64), HalError> {
        let half = config.staging_bytes;
        if self.ring.as_ref().is_some_and(|r| r.half != half) {
            let old = self.ring.take().expect("checked");
            base.drop_mem(old.mem);
        }
        if self.ring.is_none() {
            let host = DriverMemSpec {
                kind: DriverMemKind::Host,
                bytes: 2 * half,
                page: PAGE,
                contiguous: false,
                cpu_map: None,
                low_va: false,
            };
            // Driver-owned system memory in 2 MiB pages when asked (`huge_staging`); this process's own
            // pinned pages when that is off or refused.
            let huge = DriverMemSpec {
                kind: DriverMemKind::Sys,
                bytes: (2 * half).next_multiple_of(HUGE_PAGE),
                page: HUGE_PAGE,
                cpu_map: Some(sys::map_caching::CACHED),
                ..host
            };
            let mem = match config.huge_staging.then(|| base.new_mem(huge, "allocate staging ring (2 MiB pages)")) {
                Some(Ok(m)) => m,
                _ => base.new_mem(host, "allocate staging ring")?,
            };
            self.ring = Some(StagingRing { mem, half });
        }
        let r = self.ring.as_ref().expect("made above");
        Ok((r.mem.va, r.mem.cpu, r.half))
    }

    /// Gives up the ring after a copy that did not complete.
    fn lose_ring(&mut self) {
        self.lost.extend(self.ring.take().map(|r| r.mem));
    }

    /// Bytes of the ring (0 before its first use).
    pub(crate) fn staging_bytes(&self) -> u64 {
        self.ring.as_ref().map_or(0, |r| r.mem.bytes)
    }

    /// Rings given up so far.
    pub(crate) fn lost_rings(&self) -> u64 {
        self.lost.len() as u64
    }
}

/// What a sync of a viewed data buffer needs of it, copied out of the memory service's state.
#[derive(Clone, Copy, Debug)]
struct ViewedBuffer {
    vid_va: u64,
    view: *mut u8,
    /// The registered view's GPU address.
    registered_va: Option<u64>,
    bar1: Option<*mut u8>,
}

/// Piece `i` of a staged copy of `len` bytes in pieces of `size` through a ring of `slots` slots of
/// `size` bytes: its offset in the copy, its length and the ring offset of its slot (pieces take the
/// slots in turn).
fn piece(i: u64, len: u64, size: u64, slots: u64) -> (u64, u64, u64) {
    (i * size, size.min(len - i * size), (i % slots) * size)
}

/// The slots a staged copy in pieces of `size` uses of a ring of `ring` bytes: the setting, at most as
/// many as fit, at least 2 (a piece is at most a half).
fn ring_slots(setting: u64, ring: u64, size: u64) -> u64 {
    setting.min(ring / size.max(1)).max(2)
}

/// Bytes of a piece each CPU thread of a [`Crew`] must have at least: below it waking a thread costs
/// more than its share of the copy (a futex wake is a few µs; 256 KiB at a thread's 6 GB/s is 43 µs).
/// Within a copy the workers spin between pieces, so only its first piece pays a wake.
const CREW_SHARE_MIN: u64 = 256 << 10;

/// The threads that copy pieces of `piece` bytes: `threads` (the setting), fewer when the piece would
/// give each less than [`CREW_SHARE_MIN`].
fn crew_size(threads: u64, piece: u64) -> u64 {
    threads.min(piece / CREW_SHARE_MIN).max(1)
}

/// The ring's CPU mapping, as an address a worker thread can carry.
#[derive(Clone, Copy)]
struct RingBytes {
    ptr: *mut u8,
}

// SAFETY: the ring is pinned host memory owned by the open device for as long as the copy runs (the
// workers are scoped to it); which thread touches which bytes when is the staged protocol's, argued at
// each copy.
unsafe impl Send for RingBytes {}
// SAFETY: as for Send: shared references only carry the address.
unsafe impl Sync for RingBytes {}
// SAFETY: `HostBytes` is the caller's slice of a sync, alive for the whole (scoped) copy; the protocol
// gives each byte to one thread at a time.
unsafe impl Send for HostBytes {}
// SAFETY: as for Send.
unsafe impl Sync for HostBytes {}

/// Copies bytes `from..to` of `host` to (`ToGpu`) or from (`ToCpu`) the ring at `slot` (the ring offset
/// of byte `from`).
///
/// # Safety
/// - `host` holds at least `to` bytes, and the ring at least `slot + (to - from)` bytes;
/// - nothing else reads or writes those host bytes or ring bytes while this runs (the copy engine
///   included), and the two ranges do not overlap.
unsafe fn move_bytes(host: HostBytes, ring: RingBytes, dir: Direction, (from, to): (u64, u64), slot: u64) {
    let n = (to - from) as usize;
    // SAFETY: both ranges are inside their memory and owned by this call (the caller's promise).
    unsafe {
        let (h, r) = (host.ptr.add(from as usize), ring.ptr.add(slot as usize));
        match dir {
            Direction::ToGpu => ptr::copy_nonoverlapping(h.cast_const(), r, n),
            Direction::ToCpu => ptr::copy_nonoverlapping(r.cast_const(), h, n),
        }
    }
}

/// Worker `w`'s bytes of a piece of `n` bytes cut for `threads` workers: `n / threads` rounded to 64
/// bytes, the last worker taking the rest.
fn share(n: u64, w: u64, threads: u64) -> (u64, u64) {
    let each = (n / threads) & !63;
    let a = each * w;
    (a, if w + 1 == threads { n } else { a + each })
}

/// One staged copy's CPU side as the crew moves it: piece `i` of `len` bytes in pieces of `size`
/// through `slots` slots, each piece cut in shares ([`share`]).
#[derive(Clone, Copy)]
struct StagedShares {
    host: HostBytes,
    ring: RingBytes,
    dir: Direction,
    len: u64,
    size: u64,
    slots: u64,
}

impl CrewJob for StagedShares {
    unsafe fn move_share(&self, i: u64, w: u64, threads: u64) {
        let (off, n, slot) = piece(i, self.len, self.size, self.slots);
        let (a, b) = share(n, w, threads);
        // SAFETY: `host` holds `len >= off + n` bytes and the ring slot at `slot` holds `size >= n`; the
        // crew's contract gives this worker bytes `a..b` of piece `i` (disjoint from every other
        // worker's, `share`) while the protocol keeps the copy engine off that slot, and `host` and the
        // ring live until the run that published this job returned.
        unsafe { move_bytes(self.host, self.ring, self.dir, (off + a, off + b), slot + a) }
    }
}

/// The two sides of a staged copy as [`staged_order`] drives them.
trait StagedSides {
    /// Sends the copy engine's copy of piece `i`, queued behind those sent before.
    fn send(&mut self, i: u64) -> Result<(), HalError>;
    /// Waits for the oldest copy sent and not yet waited for.
    fn wait_oldest(&mut self) -> Result<(), HalError>;
    /// Lets the CPU's side of piece `i` (and those before it) begin.
    fn start(&mut self, i: u64);
    /// Waits until the CPU's side of pieces `0..=i` is done.
    fn finish(&mut self, i: u64);
}

/// The order of a staged copy of `pieces` pieces over `slots >= 2` ring slots (piece `i` in slot
/// `i % slots`): the CPU's side works on some slots while the copy engine works on others. A slot goes to
/// one side only after the other finished with it, and the copy engine gets its next piece before the
/// CPU waits for the one before, so it never idles between two pieces the CPU has ready.
///
/// To the GPU, with `k` slots: pieces `0 .. k - 1` start at once; once piece `i` is done its copy goes
/// out, then the copy of piece `i - 1` is waited for and piece `i + k - 1` starts in its slot. To the
/// CPU: the copies of pieces `0 .. k - 1` go out at once; once the copy of piece `i` landed the CPU starts
/// draining it, then the drain of piece `i - 1` is waited for and the copy of piece `i + k - 1` goes out
/// into its slot. (For `i = 0`, piece `k - 1` takes the one slot not yet used.)
fn staged_order(pieces: u64, slots: u64, dir: Direction, sides: &mut impl StagedSides) -> Result<(), HalError> {
    let ahead = slots.max(2) - 1;
    match dir {
        Direction::ToGpu => {
            (0..ahead.min(pieces)).for_each(|j| sides.start(j));
            for i in 0..pieces {
                sides.finish(i);
                sides.send(i)?;
                if i >= 1 {
                    sides.wait_oldest()?;
                }
                if i + ahead < pieces {
                    sides.start(i + ahead);
                }
            }
            if pieces > 0 {
                sides.wait_oldest()?;
            }
        }
        Direction::ToCpu => {
            for j in 0..ahead.min(pieces) {
                sides.send(j)?;
            }
            for i in 0..pieces {
                sides.wait_oldest()?;
                sides.start(i);
                if i + ahead < pieces {
                    if i >= 1 {
                        sides.finish(i - 1);
                    }
                    sides.send(i + ahead)?;
                }
            }
            if pieces > 0 {
                sides.finish(pieces - 1);
            }
        }
    }
    Ok(())
}

/// A staged copy's two sides on the open device: copies through its channels, the CPU's side through
/// `start` and `finish`.
struct Sides<'a> {
    dev: &'a mut OpenDevice,
    o: Order,
    piece: &'a dyn Fn(u64) -> (u64, u64, u64),
    c: &'a NvidiaConfig,
    clock: &'a dyn Clock,
    start: &'a dyn Fn(u64),
    finish: &'a dyn Fn(u64),
    sent: std::collections::VecDeque<Wait>,
}

impl StagedSides for Sides<'_> {
    fn send(&mut self, i: u64) -> Result<(), HalError> {
        let (off, n, slot) = (self.piece)(i);
        let (ring, vid) = (self.o.ring_va + slot, self.o.vid_va + off);
        let (src, dst) = if self.o.dir == Direction::ToGpu { (ring, vid) } else { (vid, ring) };
        let wait = self.dev.submit_copy(src, dst, n, self.c, self.o.what)?;
        self.sent.push_back(wait);
        Ok(())
    }

    fn wait_oldest(&mut self) -> Result<(), HalError> {
        let w = self.sent.pop_front().expect("staged_order waits only for copies it sent");
        self.dev.channels.wait(w, self.clock)
    }

    fn start(&mut self, i: u64) {
        (self.start)(i)
    }

    fn finish(&mut self, i: u64) {
        (self.finish)(i)
    }
}

/// What [`OpenDevice::staged_protocol`] orders: `pieces` pieces over `slots` ring slots between the
/// ring at `ring_va` and video memory at `vid_va`, in direction `dir`, its waits named `what`.
#[derive(Clone, Copy)]
struct Order {
    pieces: u64,
    slots: u64,
    ring_va: u64,
    vid_va: u64,
    dir: Direction,
    what: &'static str,
}

impl OpenDevice {
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
        let b = match na.placement {
            Placement::VidmemViewed => {
                let view = na.view.as_ref().expect("a viewed buffer has a view");
                ViewedBuffer {
                    vid_va: na.primary.va,
                    view: view.cpu,
                    registered_va: view.registered.as_ref().map(|r| r.va),
                    bar1: na.bar1,
                }
            }
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
        };
        if dir == Direction::ToGpu && len <= c.bar1_sync_max {
            if let Some(bar1) = b.bar1 {
                // SAFETY: both views cover the buffer and `offset + len <= bytes` (the caller's promise);
                // the BAR1 view is write-combined device memory that is only written, never read.
                unsafe {
                    ptr::copy_nonoverlapping(b.view.add(offset as usize), bar1.add(offset as usize), len as usize)
                };
                store_fence();
                self.memory.stats.syncs_bar1 += 1;
                return Ok(());
            }
        }
        let large = c.register_sync_bytes > 0 && len >= c.register_sync_bytes;
        let registered = b.registered_va.or_else(|| self.register_for(a.id, large, c));
        let what = if dir == Direction::ToGpu { "sync to GPU (copy engine)" } else { "sync to CPU (copy engine)" };
        if let Some(view_va) = registered {
            let (src, dst) = match dir {
                Direction::ToGpu => (view_va + offset, b.vid_va + offset),
                Direction::ToCpu => (b.vid_va + offset, view_va + offset),
            };
            let wait = self.submit_copy(src, dst, len, c, what)?;
            self.channels.wait(wait, clock)?;
            self.memory.stats.syncs_direct += 1;
            return Ok(());
        }
        // SAFETY: the view covers `offset + len <= bytes` (the caller's promise), and the buffer stays live
        // for the call (the caller holds the lock; frees need it).
        let host = HostBytes { ptr: unsafe { b.view.add(offset as usize) }, len };
        self.staged_copy(host, b.vid_va + offset, dir, c, clock, what)?;
        if large {
            if let Some(v) = self.memory.get_mut(a.id).and_then(|na| na.view.as_mut()) {
                v.staged_large_syncs = v.staged_large_syncs.saturating_add(1);
            }
        }
        Ok(())
    }

    /// For a large sync of buffer `id`, whose view is not registered: registers it once `register_after`
    /// large syncs went through the ring. Its GPU address if it is registered.
    fn register_for(&mut self, id: u64, large: bool, c: &NvidiaConfig) -> Option<u64> {
        let staged = self.memory.get(id)?.view.as_ref()?.staged_large_syncs;
        if !large || staged < c.register_after {
            return None;
        }
        self.memory.register_view(&mut self.base, id, c.pinned_budget_bytes)
    }

    /// Writes a copy-engine copy of `len` bytes from GPU address `src` to `dst`, finished by a release of
    /// the internal wait semaphore, and sends it: the wait for it.
    fn submit_copy(
        &mut self,
        src: u64,
        dst: u64,
        len: u64,
        c: &NvidiaConfig,
        what: &'static str,
    ) -> Result<Wait, HalError> {
        // Allow 1 ns per byte (1 GB/s, far below PCIe) on top of the fixed limit.
        let timeout_ns = c.internal_timeout_ms * 1_000_000 + len;
        let target = self.syncs.target(c, self.channels.copy.is_some());
        let mut push = Push::new();
        push.copy_lines(src, dst, len, c.copy_chunk_bytes, c.copy_line_bytes);
        let (sem, value) = self.channels.next_wait();
        push.copy_release(sem, value);
        self.channels.send(&mut self.base, target, &push)?;
        Ok(Wait { value, timeout_ns, spin_ns: INTERNAL_SPIN_NS, what })
    }

    /// Moves `host.len` bytes between `host` and video memory at `vid_va` through the staging ring, in
    /// pieces that take the ring's slots in turn (the module docs). If anything fails once a copy was
    /// sent, the ring is given up (copies may still run).
    fn staged_copy(
        &mut self,
        host: HostBytes,
        vid_va: u64,
        dir: Direction,
        c: &NvidiaConfig,
        clock: &dyn Clock,
        what: &'static str,
    ) -> Result<(), HalError> {
        let (ring_va, ring_cpu, half) = self.syncs.ring(&mut self.base, c)?;
        let r = self.staged_pieces(host, vid_va, (ring_va, ring_cpu, half), dir, c, clock, what);
        match r {
            Ok(()) => {
                self.memory.stats.syncs_staged += 1;
                Ok(())
            }
            Err(e) => {
                self.syncs.lose_ring();
                Err(e)
            }
        }
    }

    /// The pieces of [`OpenDevice::staged_copy`] on the ring at (`ring_va`, `ring_cpu`) with halves of
    /// `half`: pieces of at most `staging_piece_bytes` (and a half), so that even a copy smaller than a
    /// half overlaps the CPU's side with the copy engine's, in [`ring_slots`] slots; the CPU's side is the
    /// calling thread's, or a [`Crew`]'s when the pieces are large enough to split.
    #[allow(clippy::too_many_arguments)]
    fn staged_pieces(
        &mut self,
        host: HostBytes,
        vid_va: u64,
        (ring_va, ring_cpu, half): (u64, *mut u8, u64),
        dir: Direction,
        c: &NvidiaConfig,
        clock: &dyn Clock,
        what: &'static str,
    ) -> Result<(), HalError> {
        let size = half.min(c.staging_piece_bytes.max(PAGE));
        let slots = ring_slots(c.staging_slots, 2 * half, size);
        let pieces = host.len.div_ceil(size);
        let piece = |i| piece(i, host.len, size, slots);
        let ring = RingBytes { ptr: ring_cpu };
        let threads = crew_size(c.copy_threads, host.len.min(size));
        let order = Order { pieces, slots, ring_va, vid_va, dir, what };
        if threads <= 1 {
            let cpu = |i: u64| {
                let (off, n, slot) = piece(i);
                // SAFETY: `host` holds `len` bytes and `off + n <= len`; the ring slot at `slot` holds
                // `size >= n` bytes, and `protocol` calls this only while the copy engine is not using it.
                unsafe { move_bytes(host, ring, dir, (off, off + n), slot) }
            };
            return self.staged_protocol(order, &piece, c, clock, &cpu, &|_| ());
        }
        let mut crew = match self.syncs.crew.take() {
            Some(crew) if crew.threads() == c.copy_threads => crew,
            _ => Crew::start(c.copy_threads)?,
        };
        let job = StagedShares { host, ring, dir, len: host.len, size, slots };
        // SAFETY: `host` is the caller's slice and the ring the open device's, both live for this call,
        // and `run` returns only after every worker left the job. `staged_protocol` allows piece i only
        // once the copy engine is done with its slot (ToGpu: the copy out of the piece before in that
        // slot completed; ToCpu: the copy into it completed), hands that slot to the copy engine again
        // only after `wait_done` of piece i, and waits for a piece only after allowing it.
        let r = unsafe {
            crew.run(job, pieces, threads, |allow, wait_done| {
                self.staged_protocol(order, &piece, c, clock, allow, wait_done)
            })
        };
        self.syncs.crew = Some(crew);
        r
    }

    /// Runs a staged copy in [`staged_order`]: the copy engine's side through this device's channels,
    /// the CPU's through `start` and `finish`.
    fn staged_protocol(
        &mut self,
        o: Order,
        piece: &dyn Fn(u64) -> (u64, u64, u64),
        c: &NvidiaConfig,
        clock: &dyn Clock,
        start: &dyn Fn(u64),
        finish: &dyn Fn(u64),
    ) -> Result<(), HalError> {
        let mut sides = Sides { dev: self, o, piece, c, clock, start, finish, sent: Default::default() };
        staged_order(o.pieces, o.slots, o.dir, &mut sides)
    }

    /// Writes (`ToGpu`) or reads the device side of buffer `a` at `offset` from or into `host`.
    fn device_side(
        &mut self,
        a: &Allocation,
        offset: u64,
        host: HostBytes,
        dir: Direction,
        c: &NvidiaConfig,
        clock: &dyn Clock,
    ) -> Result<(), HalError> {
        let na = self.memory.get(a.id).ok_or_else(|| {
            HalError::Lost(format!("nvidia: device access of unknown buffer {} at {:#x}", a.id, a.va))
        })?;
        if host.len == 0 {
            return Ok(());
        }
        let (placement, va, cpu) = (na.placement, na.primary.va, na.primary.cpu);
        if placement == Placement::SysmemPolled {
            // One set of pages for both sides, CPU-cached.
            // SAFETY: the mapping covers the buffer and `offset + len <= bytes` (the caller's promise); the
            // caller's slice cannot overlap a device mapping.
            unsafe {
                let dev = cpu.add(offset as usize);
                match dir {
                    Direction::ToGpu => ptr::copy_nonoverlapping(host.ptr, dev, host.len as usize),
                    Direction::ToCpu => ptr::copy_nonoverlapping(dev, host.ptr, host.len as usize),
                }
            }
            store_fence();
            return Ok(());
        }
        let what = if dir == Direction::ToGpu { "device write (copy engine)" } else { "device read (copy engine)" };
        self.staged_copy(host, va + offset, dir, c, clock, what)?;
        if placement == Placement::VidmemBar1 && dir == Direction::ToGpu {
            // New code: the next submission invalidates the instruction cache.
            self.queue.code_changed();
        }
        Ok(())
    }
}

impl Nvidia {
    /// Runs `f` on the open device with the settings and the clock.
    fn with_open<R>(
        &self,
        f: impl FnOnce(&mut OpenDevice, &NvidiaConfig, &dyn Clock) -> Result<R, HalError>,
    ) -> Result<R, HalError> {
        let config = self.config();
        let mut st = sync::lock(&self.state);
        let open = st.as_mut().ok_or_else(|| HalError::NoDevice("nvidia: device not open".into()))?;
        f(open, &config, &self.clock)
    }
}

impl Visibility for Nvidia {
    unsafe fn sync_to_gpu(&self, a: &Allocation, offset: u64, len: u64) -> Result<(), HalError> {
        self.with_open(|o, c, clock| o.sync(a, offset, len, Direction::ToGpu, c, clock))
    }

    unsafe fn sync_to_cpu(&self, a: &Allocation, offset: u64, len: u64) -> Result<(), HalError> {
        self.with_open(|o, c, clock| o.sync(a, offset, len, Direction::ToCpu, c, clock))
    }

    unsafe fn write_device(&self, a: &Allocation, offset: u64, src: &[u8]) -> Result<(), HalError> {
        // Only read through: the copy to the GPU reads `host` and never writes it.
        let host = HostBytes { ptr: src.as_ptr().cast_mut(), len: src.len() as u64 };
        self.with_open(|o, c, clock| o.device_side(a, offset, host, Direction::ToGpu, c, clock))
    }

    unsafe fn read_device(&self, a: &Allocation, offset: u64, dst: &mut [u8]) -> Result<(), HalError> {
        let host = HostBytes { ptr: dst.as_mut_ptr(), len: dst.len() as u64 };
        self.with_open(|o, c, clock| o.device_side(a, offset, host, Direction::ToCpu, c, clock))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_asynchronous_channel_that_was_asked_for_and_works_takes_syncs() {
        let mut s = Syncs::new("note".into());
        let mut c = NvidiaConfig { async_copy: true, ..NvidiaConfig::default() };
        assert_eq!(s.target(&c, true), Target::Copy);
        assert_eq!(s.target(&c, false), Target::Compute);
        c.async_copy = false;
        assert_eq!(s.target(&c, true), Target::Compute);
        c.async_copy = true;
        s.async_copy_failed(&HalError::Unsupported("x".into()));
        assert_eq!(s.target(&c, true), Target::Compute);
        assert!(s.note().contains("failed its setup"));
        assert_eq!((s.staging_bytes(), s.lost_rings()), (0, 0));
        assert_eq!(s.into_memory().count(), 0, "no ring before its first use");
    }

    #[test]
    fn staged_pieces_cover_the_copy_once_and_take_the_slots_in_turn() {
        let (len, size): (u64, u64) = (5 * 4096 + 100, 2 * 4096);
        let pieces: Vec<_> = (0..len.div_ceil(size)).map(|i| piece(i, len, size, 2)).collect();
        assert_eq!(pieces, [(0, size, 0), (size, size, size), (2 * size, 4096 + 100, 0)]);
        assert_eq!(pieces.iter().map(|p| p.1).sum::<u64>(), len);
        assert_eq!(piece(0, 4, size, 2), (0, 4, 0), "a small sync is one piece in the first slot");
        assert_eq!(piece(5, len, 4096, 4), (5 * 4096, 100, 4096), "piece 5 of 4 slots is in slot 1");
        // The slots of a ring: the setting where they fit, fewer where they do not, never fewer than two.
        assert_eq!(ring_slots(4, 128 << 20, 8 << 20), 4);
        assert_eq!(ring_slots(16, 128 << 20, 32 << 20), 4);
        assert_eq!(ring_slots(4, 2 * 4096, 4096), 2);
        assert_eq!(ring_slots(2, 1 << 30, 4096), 2);
    }

    /// Both sides of a staged copy as bookkeeping: every rule of [`staged_order`] asserted as it runs.
    struct Model {
        dir: Direction,
        slots: u64,
        started: Vec<bool>,
        finished: Vec<bool>,
        sent: Vec<u64>,
        landed: Vec<bool>,
        waited: usize,
        /// Waits made with another copy still queued behind the one waited for.
        waits_with_one_queued: usize,
    }

    impl StagedSides for Model {
        fn send(&mut self, i: u64) -> Result<(), HalError> {
            let i = i as usize;
            assert!(!self.sent.contains(&(i as u64)), "piece {i} sent twice");
            match self.dir {
                Direction::ToGpu => assert!(self.finished[i], "piece {i} sent before the CPU filled it"),
                Direction::ToCpu => {
                    let k = self.slots as usize;
                    assert!(i < k || self.finished[i - k], "piece {i} sent into a slot the CPU still drains");
                }
            }
            self.sent.push(i as u64);
            assert!((self.sent.len() - self.waited) as u64 <= self.slots, "more copies in flight than slots");
            Ok(())
        }

        fn wait_oldest(&mut self) -> Result<(), HalError> {
            let oldest = self.sent[self.waited] as usize;
            self.waited += 1;
            if self.sent.len() > self.waited {
                self.waits_with_one_queued += 1;
            }
            self.landed[oldest] = true;
            Ok(())
        }

        fn start(&mut self, i: u64) {
            let i = i as usize;
            assert!(!self.started[i] && self.started[..i].iter().all(|&s| s), "piece {i} started out of turn");
            match self.dir {
                Direction::ToGpu => {
                    let k = self.slots as usize;
                    assert!(i < k || self.landed[i - k], "piece {i} filled while its slot is still being copied");
                }
                Direction::ToCpu => assert!(self.landed[i], "piece {i} drained before its copy landed"),
            }
            self.started[i] = true;
        }

        fn finish(&mut self, i: u64) {
            for j in 0..=i as usize {
                assert!(self.started[j], "finish({i}) waits for piece {j}, never started");
                self.finished[j] = true;
            }
        }
    }

    #[test]
    fn the_staged_order_shares_no_slot_and_keeps_the_copy_engine_fed() {
        for dir in [Direction::ToGpu, Direction::ToCpu] {
            for slots in 2..=6u64 {
                for pieces in 0..=11u64 {
                    let n = pieces as usize;
                    let mut m = Model {
                        dir,
                        slots,
                        started: vec![false; n],
                        finished: vec![false; n],
                        sent: Vec::new(),
                        landed: vec![false; n],
                        waited: 0,
                        waits_with_one_queued: 0,
                    };
                    staged_order(pieces, slots, dir, &mut m).unwrap();
                    let every = |v: &[bool]| v.iter().all(|&b| b);
                    assert!(every(&m.started) && every(&m.finished) && every(&m.landed), "{dir:?} {slots} {pieces}");
                    assert_eq!(m.sent, (0..pieces).collect::<Vec<_>>(), "copies in piece order");
                    assert_eq!(m.waited, n);
                    // To the GPU every wait but the last has the next piece queued; to the CPU, with three
                    // slots or more, every wait while pieces remain to be sent does.
                    let fed = match dir {
                        Direction::ToGpu => n.saturating_sub(1),
                        Direction::ToCpu if slots >= 3 => n.saturating_sub(1).min(n.saturating_sub(slots as usize - 2)),
                        Direction::ToCpu => 0,
                    };
                    assert!(m.waits_with_one_queued >= fed, "{dir:?} {slots} {pieces}: {}", m.waits_with_one_queued);
                }
            }
        }
    }

    #[test]
    fn crew_shares_cut_a_piece_once_in_64_byte_steps() {
        for (n, t) in [(8u64 << 20, 8u64), (5 << 20, 3), ((1 << 20) + 7, 2)] {
            let shares: Vec<_> = (0..t).map(|w| share(n, w, t)).collect();
            assert_eq!(shares[0].0, 0);
            assert_eq!(shares.last().unwrap().1, n);
            assert!(shares.windows(2).all(|p| p[0].1 == p[1].0 && p[0].1 % 64 == 0), "{shares:?}");
        }
        assert_eq!(crew_size(8, 8 << 20), 8);
        assert_eq!(crew_size(8, 3 << 18), 3);
        assert_eq!(crew_size(16, 2 << 20), 8, "256 KiB a thread at least");
        assert_eq!(crew_size(8, 4096), 1, "a small piece stays on the calling thread");
    }
}
