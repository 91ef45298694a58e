//! A seeded random run of a million session operations — alloc, free (live, stale, forged), sync, CPU
//! writes and reads, launches, scratch and reservations, close and reopen, injected failures, and a latch
//! near the end — against a shadow model of what the session must hold. After every operation: every
//! stale or forged handle was refused and counted, every live buffer still holds exactly what was written
//! to it (checked when it is read), and the counters (`alloc_stats`, `parked`, the simulator's live
//! allocations and frees) are what the model says. The model places every buffer as the session's memory
//! manager must — carved from a chunk or a platform allocation of its own — with a shadow of the
//! manager's chunk bookkeeping (`omega::session::suballoc::Carver`, unit-tested on its own), so it knows
//! which operations reach the platform and so meet an injected allocation failure.
//!
//! The seed is printed first (cargo shows it for a failing test) and in every failure; rerun one with
//! `OMEGA_RANDOM_SEED=<seed>`. `OMEGA_RANDOM_OPS` changes the count (default 1,000,000).

mod common;

use common::*;
use omega::error::Stage;
use omega::session::suballoc::{Carve, Carver, Pool};
use omega::session::{AllocKind, AllocStats, GpuMem, Handle, ParkStats, Runtime, Scratch, PARK_MAX};
use omega::Error;
use omega_hal::sim::{Sim, SimFault};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const PAGE: usize = 4096;
/// Live caller buffers the model keeps at most (the rest of the time it frees).
const MAX_LIVE: usize = 40;
/// Handles of freed or closed buffers the model keeps to try again.
const MAX_STALE: usize = 256;

/// A buffer the model believes live, with what the device and the CPU view agree it holds.
struct Live {
    mem: GpuMem,
    kind: AllocKind,
    /// Where the session placed it: carved from a chunk, or (`None`) a platform allocation of its own.
    carve: Option<Carve>,
    bytes: Vec<u8>,
    /// Freed after the latch: parked, never released, handle kept.
    parked: bool,
}

/// The model's scratch: what its buffer is and the reservation.
#[derive(Default)]
struct ScratchModel {
    /// Page-rounded bytes of a live buffer of the open device, if it has one.
    bytes: Option<usize>,
    /// Where that buffer lies (as for [`Live::carve`]).
    carve: Option<Carve>,
    /// The reserved size, while a reservation is active on that buffer.
    reserved: Option<usize>,
    /// Its buffer was parked by a free after the latch.
    parked: bool,
}

struct Run {
    seed: u64,
    op: usize,
    rng: StdRng,
    rt: Runtime,
    sim: std::sync::Arc<Sim>,
    open: bool,
    latched: bool,
    live: Vec<Live>,
    stale: Vec<GpuMem>,
    /// The store_to kernel, loaded at every open (a caller buffer the model does not free).
    kernel: GpuMem,
    scratch: Scratch,
    sm: ScratchModel,
    stats: AllocStats,
    park: ParkStats,
    /// Handles parked so far, in order, for the listed/untracked split.
    parked_handles: Vec<Handle>,
    /// A FailAlloc the simulator holds, which the next platform allocation will meet, and a FailSync the
    /// next sync will.
    fail_alloc: bool,
    fail_sync: bool,
    /// The memory manager's chunks, as the model predicts them.
    shadow: Carver<u32>,
    /// Platform frees the model expects (buffers of their own, chunks returned, the launch buffer).
    platform_frees: u64,
}

fn rounded(bytes: usize, kind: AllocKind) -> usize {
    let want = if kind == AllocKind::Code { bytes + omega::session::CODE_PREFETCH_TAIL } else { bytes };
    want.max(1).div_ceil(PAGE) * PAGE
}

impl Run {
    fn ctx(&self, what: &str) -> String {
        format!("seed {} op {}: {what} (rerun with OMEGA_RANDOM_SEED={})", self.seed, self.op, self.seed)
    }

    fn check(&self, ok: bool, what: &str) {
        assert!(ok, "{}", self.ctx(what));
    }

    // ----- the model's bookkeeping -------------------------------------------------------------------

    fn counted_alloc(&mut self, size: usize) {
        self.stats.allocs += 1;
        self.stats.alloc_bytes += size as u64;
    }

    fn parked_one(&mut self, h: Handle, bytes: usize) {
        self.park.buffers += 1;
        self.park.bytes += bytes as u64;
        if self.parked_handles.len() < PARK_MAX {
            self.parked_handles.push(h);
        } else {
            self.park.untracked += 1;
        }
    }

    fn remember_stale(&mut self, m: GpuMem) {
        if self.stale.len() == MAX_STALE {
            let i = self.rng.random_range(0..MAX_STALE);
            self.stale.swap_remove(i);
        }
        self.stale.push(m);
    }

    /// Device buffers the simulator must hold: the launch buffer, the kernel, the chunks, and the live and
    /// parked buffers (and the scratch's) that are platform allocations of their own.
    fn expected_live_allocations(&self) -> usize {
        if !self.open {
            return 0;
        }
        2 + self.shadow.stats().chunks as usize
            + self.live.iter().filter(|l| l.carve.is_none()).count()
            + usize::from(self.sm.bytes.is_some() && self.sm.carve.is_none())
    }

    /// One platform allocation as the session makes it: true when it succeeds. An injected failure is met
    /// once; when the manager holds empty chunks, it returns them and tries again.
    fn platform_alloc(&mut self) -> bool {
        if !std::mem::take(&mut self.fail_alloc) {
            return true;
        }
        let spares = self.shadow.take_empty().len();
        self.platform_frees += spares as u64;
        spares > 0
    }

    /// Where the session places a buffer of `size` page-rounded bytes of `kind`: carved (from a chunk it
    /// has, or a new one), else a platform allocation of its own (also when no chunk can be had); `None`
    /// when it fails.
    fn place(&mut self, size: usize, kind: AllocKind) -> Option<Option<Carve>> {
        let pool = match kind {
            AllocKind::Data => Some(Pool::Data),
            AllocKind::Cached => Some(Pool::Cached),
            AllocKind::Device => Some(Pool::Device),
            AllocKind::Code => None,
        };
        if let Some((pool, order)) = pool.and_then(|p| self.shadow.order_for(size as u64).map(|o| (p, o))) {
            if let Some(c) = self.shadow.carve(pool, order) {
                return Some(Some(c));
            }
            if self.platform_alloc() {
                self.shadow.add_chunk(pool, 0);
                return Some(self.shadow.carve(pool, order));
            }
        }
        self.platform_alloc().then_some(None)
    }

    /// The session gave back a buffer placed at `carve`: a platform free for one of its own, or for its
    /// chunk when that emptied it beyond the spare.
    fn given_back(&mut self, carve: Option<Carve>) {
        match carve {
            None => self.platform_frees += 1,
            Some(c) => self.platform_frees += u64::from(self.shadow.release(c).is_some()),
        }
    }

    fn verify_counters(&self) {
        let st = self.rt.alloc_stats();
        assert_eq!(st, self.stats, "{}", self.ctx("alloc_stats"));
        assert_eq!(self.rt.parked(), self.park, "{}", self.ctx("parked"));
        let sim = self.sim.stats();
        assert_eq!(sim.live_allocations, self.expected_live_allocations(), "{}", self.ctx("live allocations"));
        if !self.latched {
            assert_eq!(sim.frees, self.platform_frees, "{}", self.ctx("simulator frees"));
        }
        let ms = self.rt.memory_stats();
        assert_eq!(ms.carved, self.shadow.stats(), "{}", self.ctx("the memory manager's chunks"));
    }

    // ----- operations --------------------------------------------------------------------------------

    fn alloc(&mut self) {
        let kind = match self.rng.random_range(0..10) {
            0..=4 => AllocKind::Data,
            5..=6 => AllocKind::Code,
            7..=8 => AllocKind::Cached,
            _ => AllocKind::Device,
        };
        let bytes = match self.rng.random_range(0..100) {
            0 => usize::MAX - self.rng.random_range(0..8192),
            1 => 0,
            _ => self.rng.random_range(1..3 * PAGE),
        };
        let before = self.rt.alloc_stats();
        let r = self.rt.alloc_kind(bytes, kind);
        if !self.open {
            self.check(matches!(r, Err(Error::NotOpen(Stage::Alloc))), "alloc on a closed device");
            return;
        }
        if self.latched {
            self.check(r == Err(Error::Latched(Stage::Alloc)), "alloc after the latch");
            return;
        }
        if bytes > isize::MAX as usize {
            self.check(r == Err(Error::Refused(omega_hal::Refusal::Overflow)), "an impossible size");
            self.check(self.rt.alloc_stats() == before, "an impossible size counts nothing");
            return;
        }
        let size = rounded(bytes, kind);
        let Some(carve) = self.place(size, kind) else {
            self.check(r.as_ref().is_err_and(|e| e.stage() == Stage::Alloc), "an injected alloc failure");
            self.stats.alloc_failures += 1;
            return;
        };
        let m = r.unwrap_or_else(|e| panic!("{}", self.ctx(&format!("alloc: {e}"))));
        self.check(m.size == size, "a buffer of the rounded size");
        self.check(m.cpu.is_null() == (kind == AllocKind::Device), "a CPU view for every kind but device-only");
        self.counted_alloc(size);
        if kind == AllocKind::Device {
            // What its memory held, read through the platform (no view to read).
            let mut bytes = vec![0u8; size];
            let r = self.rt.read(&m, 0, &mut bytes);
            if std::mem::take(&mut self.fail_sync) {
                self.check(r.as_ref().is_err_and(|e| e.stage() == Stage::Read), "an injected copy failure");
                self.rt.read(&m, 0, &mut bytes).unwrap_or_else(|e| panic!("{}", self.ctx(&e.to_string())));
            } else {
                r.unwrap_or_else(|e| panic!("{}", self.ctx(&format!("read: {e}"))));
            }
            self.live.push(Live { mem: m, kind, carve, bytes, parked: false });
            let i = self.live.len() - 1;
            self.write(i);
            return;
        }
        // SAFETY: a fresh buffer of `size` bytes with a CPU view, in no one else's hands.
        let view = unsafe { std::slice::from_raw_parts(m.cpu.cast::<u8>(), size) };
        if kind == AllocKind::Code {
            self.check(view[bytes..].iter().all(|&b| b == 0), "a code buffer's tail reads as zeros");
        }
        // A new buffer holds whatever its memory held (a block of a chunk keeps its last buffer's bytes, on
        // each side, and the two sides of that buffer need not have agreed): read the device side into the
        // view, so the model knows both.
        let r = self.rt.sync_to_cpu(&m);
        if std::mem::take(&mut self.fail_sync) {
            self.check(r.is_err(), "an injected sync failure");
            self.rt.sync_to_cpu(&m).unwrap_or_else(|e| panic!("{}", self.ctx(&e.to_string())));
        } else {
            r.unwrap_or_else(|e| panic!("{}", self.ctx(&format!("sync to cpu: {e}"))));
        }
        // SAFETY: as above; the sync wrote it, nothing else holds it.
        let view = unsafe { std::slice::from_raw_parts(m.cpu.cast::<u8>(), size) };
        self.live.push(Live { mem: m, kind, carve, bytes: view.to_vec(), parked: false });
        let i = self.live.len() - 1;
        self.write(i);
    }

    /// Writes a random range of live buffer `i` through its CPU view and syncs it.
    fn write(&mut self, i: usize) {
        let size = self.live[i].bytes.len();
        let len = self.rng.random_range(1..=64.min(size));
        let off = self.rng.random_range(0..=size - len);
        let data: Vec<u8> = (0..len).map(|_| self.rng.random()).collect();
        let m = self.live[i].mem;
        if self.live[i].kind == AllocKind::Device {
            let r = self.rt.write(&m, off, &data);
            if self.latched {
                self.check(r == Err(Error::Latched(Stage::Write)), "a write after the latch");
                return;
            }
            if std::mem::take(&mut self.fail_sync) {
                self.check(r.as_ref().is_err_and(|e| e.stage() == Stage::Write), "an injected copy failure");
                self.rt.write(&m, off, &data).unwrap_or_else(|e| panic!("{}", self.ctx(&e.to_string())));
            } else {
                r.unwrap_or_else(|e| panic!("{}", self.ctx(&format!("write: {e}"))));
            }
            self.live[i].bytes[off..off + len].copy_from_slice(&data);
            return;
        }
        // SAFETY: `m` is live (the model says so, and the session agrees below) with `size` bytes of view.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), m.cpu.cast::<u8>().add(off), len) };
        let r = self.rt.sync_range_to_gpu(&m, off, len);
        if self.latched {
            self.check(r == Err(Error::Latched(Stage::Sync)), "a sync after the latch");
            // The CPU view holds it; the device copy may not: the model can no longer say what it holds.
            return;
        }
        if std::mem::take(&mut self.fail_sync) {
            self.check(r.as_ref().is_err_and(|e| e.stage() == Stage::Sync), "an injected sync failure");
            // Sync it properly, so the model stays exact.
            self.rt.sync_range_to_gpu(&m, off, len).unwrap_or_else(|e| panic!("{}", self.ctx(&e.to_string())));
        } else {
            r.unwrap_or_else(|e| panic!("{}", self.ctx(&format!("sync to gpu: {e}"))));
        }
        self.live[i].bytes[off..off + len].copy_from_slice(&data);
    }

    /// Reads live buffer `i` back from the device and compares it with what the model wrote.
    fn read(&mut self, i: usize) {
        let l = &self.live[i];
        if l.kind == AllocKind::Device {
            let mut got = vec![0u8; l.bytes.len()];
            let r = self.rt.read(&l.mem, 0, &mut got);
            if self.latched {
                self.check(r == Err(Error::Latched(Stage::Read)), "a read after the latch");
                return;
            }
            if std::mem::take(&mut self.fail_sync) {
                self.check(r.is_err(), "an injected copy failure");
                return;
            }
            r.unwrap_or_else(|e| panic!("{}", self.ctx(&format!("read: {e}"))));
            let l = &self.live[i];
            if got != l.bytes {
                let at = got.iter().zip(&l.bytes).position(|(a, b)| a != b).unwrap_or(0);
                panic!("{}", self.ctx(&format!("device-only buffer differs from what was written at byte {at}")));
            }
            return;
        }
        let r = self.rt.sync_to_cpu(&l.mem);
        if self.latched {
            self.check(r == Err(Error::Latched(Stage::Sync)), "a sync after the latch");
            return;
        }
        if std::mem::take(&mut self.fail_sync) {
            self.check(r.is_err(), "an injected sync failure");
            return;
        }
        r.unwrap_or_else(|e| panic!("{}", self.ctx(&format!("sync to cpu: {e}"))));
        // SAFETY: the buffer is live with `bytes.len()` bytes of CPU view.
        let view = unsafe { std::slice::from_raw_parts(l.mem.cpu.cast::<u8>(), l.bytes.len()) };
        if view != l.bytes.as_slice() {
            let at = view.iter().zip(&l.bytes).position(|(a, b)| a != b).unwrap_or(0);
            panic!("{}", self.ctx(&format!("buffer {:?} differs from what was written at byte {at}", l.kind)));
        }
    }

    fn free_live(&mut self) {
        let i = self.rng.random_range(0..self.live.len());
        let mut m = self.live[i].mem;
        let before = m;
        let r = self.rt.free(&mut m);
        if self.latched {
            self.check(r.is_ok() && m == before, "a free after the latch parks and keeps the handle");
            if !self.live[i].parked {
                self.live[i].parked = true;
                let bytes = self.live[i].bytes.len();
                let listed = self.parked_handles.len() < PARK_MAX;
                self.parked_one(before.handle, bytes);
                self.check(self.rt.is_parked(before.handle) == listed, "listed while there is room");
            }
            return;
        }
        self.check(r.is_ok() && m == GpuMem::NONE, "a free of a live buffer releases it and zeroes the copy");
        self.stats.frees += 1;
        let gone = self.live.swap_remove(i);
        self.given_back(gone.carve);
        self.remember_stale(before);
    }

    fn free_stale(&mut self) {
        let i = self.rng.random_range(0..self.stale.len());
        let mut m = self.stale[i];
        let r = self.rt.free(&mut m);
        self.check(r.is_err() && m == GpuMem::NONE, "a stale handle is refused and zeroed");
        self.stats.stale_refusals += 1;
        // A stale handle stays stale however often it is tried; so does a copy of it.
        if !self.open {
            self.check(matches!(r, Err(Error::NotOpen(Stage::Free))), "a free on a closed device");
        }
    }

    fn free_forged(&mut self) {
        let mut m = GpuMem {
            handle: Handle { index: self.rng.random_range(0..200), generation: self.rng.random_range(1..50) },
            va: self.rng.random(),
            ..GpuMem::NONE
        };
        // A forged handle that matches a live buffer's handle but not its address is refused too.
        if !self.live.is_empty() && self.rng.random_bool(0.5) {
            let l = &self.live[self.rng.random_range(0..self.live.len())];
            m.handle = l.mem.handle;
            m.va = l.mem.va ^ 0x1000;
        }
        let r = self.rt.free(&mut m);
        self.check(r.is_err() && m == GpuMem::NONE, "a forged handle is refused and zeroed");
        self.stats.stale_refusals += 1;
    }

    fn sync_stale(&mut self) {
        let m = self.stale[self.rng.random_range(0..self.stale.len())];
        let to_gpu = self.rng.random_bool(0.5);
        let r = if to_gpu { self.rt.sync_to_gpu(&m) } else { self.rt.sync_to_cpu(&m) };
        self.check(r.is_err(), "a sync of a stale handle is refused");
    }

    /// store_to(addr, value) into a live data buffer; the word must arrive there and nowhere else.
    fn launch(&mut self) {
        let data: Vec<usize> = (0..self.live.len()).filter(|&i| self.live[i].kind == AllocKind::Data).collect();
        if data.is_empty() || !self.open {
            return;
        }
        let i = data[self.rng.random_range(0..data.len())];
        let word = self.rng.random_range(0..self.live[i].bytes.len() / 4);
        let value: u32 = self.rng.random();
        let va = self.live[i].mem.va + 4 * word as u64;
        let args = [va as u32, (va >> 32) as u32, value];
        let mut l = raw_launch(&self.kernel, &args, 1, 1);
        if self.rng.random_range(0..20) == 0 {
            l.grid_x = 0; // refused before anything runs
        }
        // SAFETY: `args` lives for the call.
        let r = unsafe { self.rt.launch_raw(&l) };
        if self.latched {
            self.check(r == Err(Error::Latched(Stage::Launch)), "a launch after the latch");
            return;
        }
        if l.grid_x == 0 {
            self.check(r.is_err_and(|e| e.stage() == Stage::LaunchArguments), "a refused descriptor");
            return;
        }
        r.unwrap_or_else(|e| panic!("{}", self.ctx(&format!("launch: {e}"))));
        self.live[i].bytes[4 * word..4 * word + 4].copy_from_slice(&value.to_le_bytes());
        // The device copy changed: make the CPU view agree, then the whole buffer must match.
        self.read(i);
    }

    fn scratch(&mut self) {
        let want = match self.rng.random_range(0..10) {
            0..=6 => self.rng.random_range(1..4 * PAGE),
            7 => self.sm.bytes.unwrap_or(PAGE),
            _ => self.rng.random_range(1..16 * PAGE),
        };
        let before = self.scratch;
        match self.rng.random_range(0..10) {
            0..=5 => {
                let r = self.rt.scratch(&mut self.scratch, want);
                self.scratch_outcome(r, want, false, before);
            }
            6..=7 => {
                let r = self.rt.scratch_reserve(&mut self.scratch, want);
                self.scratch_outcome(r, want, true, before);
            }
            8 => {
                self.rt.scratch_unreserve(&mut self.scratch).unwrap_or_else(|e| panic!("{}", self.ctx(&e.to_string())));
                self.sm.reserved = None;
                self.check(self.scratch.reserved == 0, "unreserve clears the flag");
            }
            _ => {
                let r = self.rt.scratch_free(&mut self.scratch);
                match (self.sm.bytes, self.open) {
                    (Some(bytes), true) if self.latched => {
                        self.check(r.is_ok() && self.scratch.mem == before.mem, "a parked scratch keeps its handle");
                        if !self.sm.parked {
                            self.sm.parked = true;
                            self.parked_one(before.mem.handle, bytes);
                        }
                    }
                    (Some(_), true) => {
                        self.check(r.is_ok() && self.scratch == Scratch::default(), "scratch free clears it");
                        self.stats.frees += 1;
                        self.given_back(self.sm.carve);
                        self.sm = ScratchModel::default();
                    }
                    _ if before.mem.handle.is_none() => self.check(r.is_ok(), "freeing an empty scratch"),
                    _ => {
                        // Its buffer went with a closed device: refused as stale, counted, cleared.
                        self.check(r.is_err() && self.scratch == Scratch::default(), "a stale scratch free");
                        self.stats.stale_refusals += 1;
                        self.sm = ScratchModel::default();
                    }
                }
            }
        }
    }

    fn scratch_outcome(&mut self, r: omega::Result<()>, want: usize, reserve: bool, before: Scratch) {
        let live = self.sm.bytes.filter(|_| self.open);
        if !self.open {
            self.check(r.is_err(), "scratch on a closed device");
            return;
        }
        if self.sm.parked {
            self.check(r.is_err() && self.scratch.mem == before.mem, "a parked scratch is not handed out");
            return;
        }
        // Under a reservation (and not reserving again) the bound is the reserved size.
        if !reserve && before.reserved != 0 {
            match (live, self.sm.reserved) {
                (Some(_), Some(bound)) if want <= bound => {
                    self.check(r.is_ok() && self.scratch.mem == before.mem, "a request within the reservation")
                }
                (Some(_), Some(bound)) => self.check(
                    r == Err(Error::ScratchReserved { requested: want, reserved: bound }),
                    "a request past the reservation",
                ),
                _ => self.check(r.is_err(), "a reservation whose buffer went with the closed device"),
            }
            self.check(self.rt.alloc_stats() == self.stats, "nothing allocated under a reservation");
            return;
        }
        if live.is_some_and(|b| want <= b) {
            self.check(r.is_ok() && self.scratch.mem == before.mem, "a request the buffer holds allocates nothing");
        } else if self.latched {
            self.check(r == Err(Error::Latched(Stage::Alloc)), "a scratch grow after the latch");
            self.check(self.scratch == Scratch { reserved: 0, ..before }, "a failed grow keeps the old buffer");
            self.sm.reserved = None;
            return;
        } else if let Some(carve) = self.place(rounded(want, AllocKind::Data), AllocKind::Data) {
            self.check(r.is_ok(), "a scratch grow");
            let size = rounded(want, AllocKind::Data);
            self.check(self.scratch.cap == size && self.scratch.mem.size == size, "the grown scratch's size");
            self.counted_alloc(size);
            // The new buffer first, then the old one given back.
            if live.is_some() {
                self.stats.frees += 1;
                self.given_back(self.sm.carve);
            }
            self.sm.carve = carve;
            if !before.mem.handle.is_none() {
                self.remember_stale(before.mem);
            }
            self.sm.bytes = Some(size);
        } else {
            self.check(r.is_err() && self.scratch.mem == before.mem, "a failed grow keeps the old buffer");
            self.stats.alloc_failures += 1;
            self.sm.reserved = None;
            return;
        }
        self.sm.reserved = reserve.then_some(want);
        self.check((self.scratch.reserved != 0) == reserve, "the reserved flag");
        if !self.fail_sync && !self.latched {
            self.check(self.rt.sync_to_gpu(&self.scratch.mem).is_ok(), "the scratch is a live buffer");
        }
    }

    fn close_and_reopen(&mut self) {
        self.rt.unlock().unwrap();
        let r = self.rt.close();
        self.rt.lock().unwrap();
        if self.latched {
            self.check(r == Err(Error::Latched(Stage::Close)), "close after the latch");
            return;
        }
        r.unwrap_or_else(|e| panic!("{}", self.ctx(&format!("close: {e}"))));
        // Everything the session held was released; every handle of it is stale from now on. The platform
        // freed every chunk, every buffer of its own, the kernel and the launch buffer.
        self.stats.frees += self.live.len() as u64 + 1 + u64::from(self.sm.bytes.is_some());
        let own = self.live.iter().filter(|l| l.carve.is_none()).count() as u64
            + u64::from(self.sm.bytes.is_some() && self.sm.carve.is_none());
        self.platform_frees += self.shadow.take_all().len() as u64 + own + 2;
        for l in std::mem::take(&mut self.live) {
            self.remember_stale(l.mem);
        }
        self.remember_stale(self.kernel);
        self.sm.bytes = None;
        self.sm.carve = None;
        self.sm.reserved = None;
        self.open = false;
        // Sometimes a few calls on the closed device first.
        for _ in 0..self.rng.random_range(0..3) {
            if !self.stale.is_empty() {
                self.free_stale();
            }
            self.alloc();
        }
        self.verify_counters();
        // The reopen and the kernel load are not operations the model checks: no injected failure may meet
        // them.
        self.sim.clear_faults();
        self.fail_alloc = false;
        self.fail_sync = false;
        self.rt.open().unwrap_or_else(|e| panic!("{}", self.ctx(&format!("reopen: {e}"))));
        self.open = true;
        self.load_kernel();
    }

    fn load_kernel(&mut self) {
        self.kernel = load(&self.rt, "store_to");
        let size = self.kernel.size;
        self.counted_alloc(size);
    }

    fn inject(&mut self) {
        if self.rng.random_bool(0.5) {
            if !self.fail_alloc {
                self.sim.inject(SimFault::FailAlloc);
                self.fail_alloc = true;
            }
        } else if !self.fail_sync {
            self.sim.inject(SimFault::FailSync);
            self.fail_sync = true;
        }
    }

    /// A launch that never completes: the process latches, and the launch buffer is parked at once.
    fn latch(&mut self) {
        self.sim.inject(SimFault::Hang);
        let args = [0u32; 3];
        let l = raw_launch(&self.kernel, &args, 1, 1);
        // SAFETY: `args` lives for the call.
        let r = unsafe { self.rt.launch_raw(&l) };
        self.check(r == Err(Error::Timeout { marker: 0, timeout_ms: 100 }), "the hang latches");
        self.latched = true;
        // The launch buffer, parked at once; its handle is the session's own, unlike any of the model's.
        self.parked_one(Handle { index: u32::MAX, generation: u32::MAX }, PAGE);
    }

    fn step(&mut self) {
        let roll = self.rng.random_range(0..1000);
        let has_live = !self.live.is_empty();
        match roll {
            0 if !self.latched => self.close_and_reopen(),
            1..=3 if !self.latched => self.inject(),
            4..=180 if self.live.len() < MAX_LIVE => self.alloc(),
            4..=330 if has_live => self.free_live(),
            331..=420 if !self.stale.is_empty() => self.free_stale(),
            421..=450 => self.free_forged(),
            451..=480 if !self.stale.is_empty() => self.sync_stale(),
            481..=650 if has_live && !self.latched => {
                let i = self.rng.random_range(0..self.live.len());
                self.write(i);
            }
            651..=800 if has_live && !self.latched => {
                let i = self.rng.random_range(0..self.live.len());
                self.read(i);
            }
            801..=900 => self.launch(),
            901..=999 => self.scratch(),
            _ if has_live => self.free_live(),
            _ => self.alloc(),
        }
        self.verify_counters();
    }
}

#[test]
fn a_million_random_operations_keep_the_session_and_its_model_in_step() {
    let seed = std::env::var("OMEGA_RANDOM_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    let ops: usize = std::env::var("OMEGA_RANDOM_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    println!("random_ops: seed {seed}, {ops} operations (rerun with OMEGA_RANDOM_SEED={seed})");
    let (rt, sim) = open_runtime();
    let mut run = Run {
        seed,
        op: 0,
        rng: StdRng::seed_from_u64(seed),
        rt,
        sim,
        open: true,
        latched: false,
        live: Vec::new(),
        stale: Vec::new(),
        kernel: GpuMem::NONE,
        scratch: Scratch::default(),
        sm: ScratchModel::default(),
        stats: AllocStats::default(),
        park: ParkStats::default(),
        parked_handles: Vec::new(),
        fail_alloc: false,
        fail_sync: false,
        shadow: Carver::new(PAGE as u64),
        platform_frees: 0,
    };
    run.load_kernel();
    // The last 2% run after a latch: frees park, everything that could touch the device is refused.
    let latch_at = ops - ops / 50;
    for op in 0..ops {
        run.op = op;
        if op == latch_at {
            run.latch();
        }
        run.step();
    }
    run.verify_counters();
    assert!(run.latched, "{}", run.ctx("the run ended latched"));
    assert_eq!(run.sim.stats().closes, run.sim.stats().opens - 1, "{}", run.ctx("closes"));
    println!(
        "random_ops: {} opens, {} parked ({} untracked), {:?}",
        run.sim.stats().opens,
        run.park.buffers,
        run.park.untracked,
        run.stats
    );
}
