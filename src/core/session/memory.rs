//! Session memory: alloc, free (or park after a latch), visibility sync, device writes and reads,
//! scratch, the counters.
//!
//! Data, cached and device-only buffers of at most
//! [`LARGEST_CARVED`](super::suballoc::LARGEST_CARVED) bytes are carved from chunks of the session's
//! memory manager (`suballoc.rs`): one platform allocation per 64 MiB chunk, not per buffer. Larger ones,
//! code and the session's queue buffers are platform allocations of their own, and so is a small buffer
//! when the device cannot give a whole chunk (when out of memory, the manager's empty chunks are returned
//! first and the allocation tried again).

use omega_hal::{check_buffer, Allocation, BufferDesc, BufferKind, CachePolicy, Caps, DeviceMemory, HalError, Rights};

use super::suballoc::{Carve, CarverStats, Pool, CHUNK_BYTES};
use super::{
    AllocStats, Backing, Buf, GpuMem, MemInfo, Owner, ParkStats, Runtime, Scratch, Session, CODE_PREFETCH_TAIL,
};
use super::{HANDLE_BUF_CODE, HANDLE_BUF_DATA, HANDLE_BUF_QUEUE, PARK_MAX};
use crate::error::{Error, Result, Stage};
use crate::platform::Installed;
use crate::sync;

/// Which kind of buffer to make (the typed API names it through its `MemKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocKind {
    /// Data.
    Data,
    /// Code.
    Code,
    /// Cached.
    Cached,
    /// Data with no CPU view: GPU read/write, written and read with [`Runtime::write`] / [`Runtime::read`].
    Device,
}

/// What the session's memory manager holds ([`Runtime::memory_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// The chunks small buffers are carved from, and what is carved.
    pub carved: CarverStats,
    /// Page-rounded bytes of the live carved buffers (what `alloc_bytes` counted for them).
    pub carved_bytes: u64,
    /// Buffers that are a platform allocation of their own (code, large buffers, the session's queue
    /// buffers), live.
    pub direct_buffers: u64,
    /// Their bytes.
    pub direct_bytes: u64,
}

impl MemoryStats {
    /// Bytes the session holds from the platform: its chunks and its direct allocations.
    pub fn platform_bytes(&self) -> u64 {
        self.carved.chunk_bytes() + self.direct_bytes
    }
}

/// What a session allocation makes: a buffer of the caller's kinds, or a polled QUEUE buffer of the
/// library's (a command list's stamp area).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Mem(AllocKind),
    Polled,
}

impl Shape {
    /// How its size is rounded ([`buffer_bytes`]): a polled buffer has no prefetch tail, like data.
    fn alloc_kind(self) -> AllocKind {
        match self {
            Shape::Mem(k) => k,
            Shape::Polled => AllocKind::Data,
        }
    }

    /// Its rights, cache policy, HAL kind, C handle kind, and the memory manager's pool it is carved from
    /// (`None`: always a platform allocation of its own — code, whose prefetch tail must fault past its
    /// end, and the library's polled buffers).
    fn describe(self) -> (Rights, CachePolicy, BufferKind, u32, Option<Pool>) {
        let rw = Rights::CPU_READ | Rights::CPU_WRITE | Rights::GPU_READ | Rights::GPU_WRITE;
        match self {
            Shape::Mem(AllocKind::Data) => {
                (rw, CachePolicy::Uncached, BufferKind::Data, HANDLE_BUF_DATA, Some(Pool::Data))
            }
            Shape::Mem(AllocKind::Code) => (
                Rights::CPU_READ | Rights::CPU_WRITE | Rights::GPU_READ | Rights::GPU_EXEC,
                CachePolicy::Uncached,
                BufferKind::Code,
                HANDLE_BUF_CODE,
                None,
            ),
            Shape::Mem(AllocKind::Cached) => (
                Rights::CPU_READ | Rights::CPU_WRITE | Rights::GPU_READ,
                CachePolicy::Cached,
                BufferKind::Data,
                HANDLE_BUF_DATA,
                Some(Pool::Cached),
            ),
            Shape::Mem(AllocKind::Device) => (
                Rights::GPU_READ | Rights::GPU_WRITE,
                CachePolicy::Uncached,
                BufferKind::Data,
                HANDLE_BUF_DATA,
                Some(Pool::Device),
            ),
            Shape::Polled => (polled_rights(), CachePolicy::Uncached, BufferKind::Queue, HANDLE_BUF_QUEUE, None),
        }
    }

    /// From which byte of a fresh buffer of `bytes` requested bytes it reads as zeros, if it must.
    fn zeroed_from(self, bytes: usize) -> Option<usize> {
        match self {
            Shape::Mem(AllocKind::Code) => Some(bytes),
            Shape::Polled => Some(0),
            Shape::Mem(AllocKind::Data | AllocKind::Cached | AllocKind::Device) => None,
        }
    }

    /// Whether the allocation counters count it (the caller's kinds only).
    fn counted(self) -> bool {
        matches!(self, Shape::Mem(_))
    }
}

/// The rights of a buffer the CPU polls and the device releases to (the session's launch markers, a
/// command list's stamps).
pub(crate) fn polled_rights() -> Rights {
    Rights::HOST_POLLED | Rights::GPU_WRITE | Rights::CPU_READ | Rights::CPU_WRITE
}

impl Session {
    /// A platform allocation for `desc`. When the device is out of memory and the memory manager keeps
    /// empty chunks, they are returned to the platform and the allocation is tried once more.
    ///
    /// # Safety
    /// - The caller holds the session lock and the device is open.
    unsafe fn platform_alloc(&mut self, mem: &dyn DeviceMemory, desc: &BufferDesc) -> Result<Allocation, HalError> {
        if self.sealed {
            return Err(HalError::Sealed(omega_hal::DriverCall::Alloc { bytes: desc.bytes }));
        }
        // SAFETY: forwarded from the caller.
        match unsafe { mem.alloc(desc) } {
            Err(HalError::OutOfMemory { .. }) if self.carver.stats().empty_chunks > 0 => {
                for chunk in self.carver.take_empty() {
                    // SAFETY: an empty chunk holds no buffer, so nothing on the device can touch it (the
                    // lock is held, so no launch is running); the manager forgot it, so it is freed once.
                    unsafe { mem.free(&chunk) };
                }
                // SAFETY: forwarded from the caller.
                unsafe { mem.alloc(desc) }
            }
            r => r,
        }
    }

    /// A block of `order` for a buffer of `bytes` bytes from `pool`, adding a chunk (allocated for
    /// `desc`'s rights and cache policy) when no chunk of the pool has one free. Returns the buffer as its
    /// holder sees it and where it lies.
    ///
    /// # Safety
    /// - As [`Session::platform_alloc`].
    unsafe fn carve(
        &mut self,
        mem: &dyn DeviceMemory,
        desc: &BufferDesc,
        pool: Pool,
        order: u8,
        bytes: u64,
    ) -> Result<(Allocation, Carve), Error> {
        let carve = match self.carver.carve(pool, order) {
            Some(c) => c,
            None => {
                let chunk_desc = BufferDesc { bytes: CHUNK_BYTES, ..*desc };
                // SAFETY: forwarded from the caller.
                let chunk = unsafe { self.platform_alloc(mem, &chunk_desc) }.map_err(Error::Alloc)?;
                if chunk.bytes < CHUNK_BYTES {
                    // SAFETY: just allocated under the lock; nothing has its address yet.
                    unsafe { mem.free(&chunk) };
                    return Err(Error::Setting {
                        stage: Stage::Alloc,
                        detail: crate::error::SettingError::ShortChunk { got: chunk.bytes, chunk: CHUNK_BYTES },
                    });
                }
                self.carver.add_chunk(pool, chunk);
                self.carver.carve(pool, order).expect("a fresh chunk holds a block of every carved size")
            }
        };
        let chunk = self.carver.backing(pool, carve.chunk).expect("a carved block lies in a held chunk");
        // The chunk's views cover CHUNK_BYTES and the block lies inside it; a chunk without a CPU view
        // gives buffers without one.
        let cpu = if chunk.cpu.is_null() { chunk.cpu } else { chunk.cpu.wrapping_add(carve.offset as usize) };
        Ok((Allocation { id: chunk.id, cpu, va: chunk.va + carve.offset, bytes }, carve))
    }

    /// The platform allocation holding `b` and the offset of `b` in it: what a HAL call on `b` names.
    pub(crate) fn platform_range(&self, b: &Buf) -> (Allocation, u64) {
        match b.backing {
            Backing::Direct => (b.alloc, 0),
            Backing::Carved(c) => {
                (*self.carver.backing(c.pool, c.chunk).expect("a carved buffer's chunk is held"), c.offset)
            }
        }
    }

    /// Gives `b` (just taken out of the table) back: a direct buffer to the platform, a carved one to its
    /// chunk, which goes back to the platform when that empties it (beyond the pool's spare).
    ///
    /// # Safety
    /// - The process is not latched, so no submitted work can still touch `b` (its last launch completed
    ///   with both markers observed), and the caller holds the lock.
    /// - `b` was live in the table and was removed from it, so it is given back once.
    pub(crate) unsafe fn release_buf(&mut self, mem: &dyn DeviceMemory, b: Buf) {
        match b.backing {
            Backing::Direct => {
                self.direct.0 -= 1;
                self.direct.1 -= b.alloc.bytes;
                // SAFETY: the caller's promises: nothing touches it, the lock is held, freed once.
                unsafe { self.give_back(mem, b.alloc) };
            }
            Backing::Carved(c) => {
                if let Some(chunk) = self.carver.release(c) {
                    // SAFETY: the chunk holds no buffer any more (the manager returns only an emptied one)
                    // and the process is not latched, so nothing on the device touches it; the manager
                    // forgot it, so it is freed once.
                    unsafe { self.give_back(mem, chunk) };
                }
            }
        }
    }
}

/// Bytes a buffer of `bytes` bytes of `kind` takes on a platform of capabilities `caps`: the request (plus,
/// for code, the zero-filled prefetch tail the platform asks, at least [`CODE_PREFETCH_TAIL`]), at least one
/// byte, rounded up to the platform's page. `None` when that is past
/// what any platform can describe: the sum or the rounding overflows, or the total passes `isize::MAX`,
/// the most one CPU view can span. The same in debug and release builds.
pub(crate) fn buffer_bytes(bytes: usize, kind: AllocKind, caps: &Caps) -> Option<u64> {
    let page = caps.page_bytes;
    let want = match kind {
        AllocKind::Code => {
            let tail = usize::try_from(caps.code_prefetch_tail).ok()?.max(CODE_PREFETCH_TAIL);
            bytes.checked_add(tail)?
        }
        AllocKind::Data | AllocKind::Cached | AllocKind::Device => bytes,
    };
    let rounded = u64::try_from(want.max(1)).ok()?.checked_next_multiple_of(page)?;
    (rounded <= isize::MAX as u64).then_some(rounded)
}

/// What a scratch's buffer is, as the session sees it.
enum ScratchBuf {
    /// No buffer yet.
    Empty,
    /// A live buffer of the session.
    Live { bytes: u64, parked: bool, owner: Owner, reserved: Option<usize> },
    /// A handle the session no longer has: freed, or its device was closed since.
    Stale,
}

impl Runtime {
    pub(crate) fn live_platform(&self, stage: Stage) -> Result<Installed> {
        self.require_lock(stage)?;
        let i = self.installed()?;
        if !self.is_open() {
            return Err(Error::NotOpen(stage));
        }
        Ok(i)
    }

    /// A buffer of `kind` for `bytes` bytes (the typed API allocates through this). The caller owns it:
    /// [`Runtime::free`] releases it.
    pub fn alloc_kind(&self, bytes: usize, kind: AllocKind) -> Result<GpuMem> {
        self.alloc_owned(bytes, kind, Owner::Caller)
    }

    /// [`Runtime::alloc_kind`] for `owner`: a buffer only that owner releases (and close).
    pub(crate) fn alloc_owned(&self, bytes: usize, kind: AllocKind, owner: Owner) -> Result<GpuMem> {
        self.allocate(Stage::Alloc, bytes, Shape::Mem(kind), owner)
    }

    /// A zeroed QUEUE buffer of at least `bytes` bytes for `owner` (a command list's stamp area): what the
    /// CPU polls and the device releases to, so HOST_POLLED and GPU-uncached, as the contract requires of
    /// anything the CPU polls. Not in the allocation counters, which count the caller's kinds of buffer.
    /// Always a platform allocation of its own.
    pub(crate) fn alloc_polled(&self, bytes: usize, owner: Owner, stage: Stage) -> Result<GpuMem> {
        self.allocate(stage, bytes, Shape::Polled, owner)
    }

    /// Every session allocation: the checks (lock, open device, not latched, a size a platform can
    /// describe, a valid descriptor), the placement under the session mutex (carved from a chunk, or a
    /// platform allocation of its own), the zero fill the shape promises, the counters and the handle.
    fn allocate(&self, stage: Stage, bytes: usize, shape: Shape, owner: Owner) -> Result<GpuMem> {
        let i = self.live_platform(stage)?;
        if self.is_blocked() {
            return Err(Error::Latched(stage));
        }
        let Some(rounded) = buffer_bytes(bytes, shape.alloc_kind(), &i.platform.caps()) else {
            return Err(Error::Refused(omega_hal::Refusal::Overflow));
        };
        let (rights, cache, hal_kind, c_kind, pool) = shape.describe();
        let desc = BufferDesc { bytes: rounded, rights, cache, kind: hal_kind };
        if let Err(r) = check_buffer(&desc) {
            return Err(Error::Refused(r));
        }
        let counted = shape.counted();
        let mem = i.platform.memory().expect("negotiated at open");
        let mut s = sync::lock(&self.session);
        let class = pool.and_then(|p| s.carver.order_for(rounded).map(|order| (p, order)));
        let carved = class.map(|(pool, order)| {
            // SAFETY: the caller holds the session lock and the device is open (both checked above; close
            // needs the lock, so it stays open).
            unsafe { s.carve(mem, &desc, pool, order, rounded) }
        });
        let placed = match carved {
            Some(Ok((a, carve))) => Ok((a, Backing::Carved(carve))),
            // No chunk could be had (the device has less than a chunk free): the buffer gets an allocation of
            // its own instead, so a small buffer fails only when its own bytes cannot be had.
            Some(Err(Error::Alloc(HalError::OutOfMemory { .. }))) | None => {
                // SAFETY: as for the carve above.
                unsafe { s.platform_alloc(mem, &desc) }.map(|a| (a, Backing::Direct)).map_err(Error::Alloc)
            }
            Some(Err(e)) => Err(e),
        };
        let (a, backing) = match placed {
            Ok(p) => p,
            Err(e) => {
                if counted && matches!(e, Error::Alloc(_)) {
                    s.stats.alloc_failures += 1;
                }
                drop(s);
                return Err(e);
            }
        };
        if a.bytes < rounded {
            // SAFETY: just allocated under the lock (a direct allocation: a carved one has exactly
            // `rounded` bytes); nothing has its address yet.
            unsafe { mem.free(&a) };
            drop(s);
            return Err(Error::Setting {
                stage,
                detail: crate::error::SettingError::ShortAllocation { got: a.bytes, asked: rounded },
            });
        }
        if let Some(from) = shape.zeroed_from(bytes) {
            if !a.cpu.is_null() {
                // Code: the prefetch tail must read as zeros whatever the platform handed out. Polled: every
                // entry reads as "not released yet" until the device writes it.
                // SAFETY: the CPU view covers `a.bytes >= rounded >= from` bytes (checked above) and nothing
                // else references the buffer yet.
                unsafe { std::ptr::write_bytes(a.cpu.add(from), 0, a.bytes as usize - from) };
            }
        }
        if counted {
            s.stats.allocs += 1;
            s.stats.alloc_bytes += rounded;
        }
        if shape == Shape::Mem(AllocKind::Code) {
            s.code_ranges.insert(a.va, a.bytes);
        }
        if backing == Backing::Direct {
            s.direct.0 += 1;
            s.direct.1 += a.bytes;
        }
        let handle = s.buffers.open(Buf { backing, ..Buf::new(a, c_kind, owner) });
        Ok(GpuMem { handle, kind: c_kind, cpu: a.cpu.cast(), va: a.va, size: rounded as usize })
    }

    /// A GPU-uncached data buffer, CPU and GPU read/write, rounded up to a page.
    pub fn alloc(&self, bytes: usize) -> Result<GpuMem> {
        self.alloc_kind(bytes, AllocKind::Data)
    }

    /// A code buffer for `code_size` bytes plus the zero-filled prefetch tail; at least one page.
    pub fn alloc_code(&self, code_size: usize) -> Result<GpuMem> {
        self.alloc_kind(code_size, AllocKind::Code)
    }

    /// A GPU-cached, GPU-read-only buffer for write-once weights.
    pub fn alloc_cached(&self, bytes: usize) -> Result<GpuMem> {
        self.alloc_kind(bytes, AllocKind::Cached)
    }

    /// A device-only data buffer (GPU read/write, no CPU view: `cpu` is null), rounded up to a page.
    /// [`Runtime::write`] and [`Runtime::read`] move bytes in and out through the platform's staging;
    /// nothing of the host is pinned or reserved for it, so its size is bounded by device memory only.
    pub fn alloc_device(&self, bytes: usize) -> Result<GpuMem> {
        self.alloc_kind(bytes, AllocKind::Device)
    }

    /// Releases `m` and zeroes it. Latched: parks it instead (never released; `m` keeps its handle for
    /// [`Runtime::is_parked`]). A stale handle or closed session: nothing released, counted, `m` zeroed.
    /// A buffer the library owns (the session's launch buffer, a command list's stamp area, a typed
    /// [`crate::Mem`], a job-engine run's) is refused whatever copy of its handle `m` is: nothing is
    /// released or counted and `m` is left as it was.
    pub fn free(&self, m: &mut GpuMem) -> Result<()> {
        self.release(m, Owner::Caller)
    }

    /// [`Runtime::free`] by `owner`, the only one (but close) that may release the buffer.
    pub(crate) fn release(&self, m: &mut GpuMem, owner: Owner) -> Result<()> {
        let stage = Stage::Free;
        self.require_lock_to_release(stage)?;
        if m.handle.is_none() {
            *m = GpuMem::NONE;
            return Ok(());
        }
        let i = self.installed()?;
        let mut s = sync::lock(&self.session);
        if s.device.is_none() {
            s.stats.stale_refusals += 1;
            *m = GpuMem::NONE;
            drop(s);
            return Err(Error::NotOpen(stage));
        }
        let latched = self.is_blocked();
        let buf = match s.buffers.check_mut(m.handle) {
            Ok(b) if b.alloc.va == m.va => b,
            Ok(b) => {
                let live_va = b.alloc.va;
                s.stats.stale_refusals += 1;
                let e = Error::ForeignAddress { stage, handle: m.handle, va: m.va, live_va };
                *m = GpuMem::NONE;
                drop(s);
                return Err(e);
            }
            Err(source) => {
                s.stats.stale_refusals += 1;
                *m = GpuMem::NONE;
                drop(s);
                return Err(Error::Handle { stage, source });
            }
        };
        if buf.owner != owner {
            let Owner::Internal(whose) = buf.owner else { unreachable!("a caller's buffer matches Owner::Caller") };
            drop(s);
            return Err(Error::NotCallers { stage, owner: whose });
        }
        Self::release_live(&mut s, &i, m, latched);
        Ok(())
    }

    /// Releases the stamp area of a command list, the library's own buffer, which may outlive its device:
    /// one of a closed device (stale) was already released by close, and is only forgotten (`m` zeroed).
    /// Latched, it is parked. Caller holds the lock.
    pub(crate) fn release_polled(&self, m: &mut GpuMem) {
        if m.handle.is_none() {
            return;
        }
        let Ok(i) = self.installed() else { return };
        let mut s = sync::lock(&self.session);
        let live = s.device.is_some() && s.buffers.check(m.handle).is_ok_and(|b| b.alloc.va == m.va);
        if !live {
            *m = GpuMem::NONE;
            return;
        }
        let latched = self.is_blocked();
        Self::release_live(&mut s, &i, m, latched);
    }

    /// The park-after-latch rule, for live buffer `m` of the open device (its handle current, checked by
    /// the caller under the session mutex `s`): latched, the buffer is parked — never released, `m` kept
    /// for [`Runtime::is_parked`], and a carved buffer's block, so its chunk, stays taken — because a
    /// launch whose completion was uncertain may still touch it; otherwise it is given back (to its chunk,
    /// or to the platform) and `m` zeroed.
    fn release_live(s: &mut Session, i: &Installed, m: &mut GpuMem, latched: bool) {
        if latched {
            let buf = s.buffers.check_mut(m.handle).expect("checked live by the caller");
            if !buf.parked {
                buf.parked = true;
                let bytes = buf.alloc.bytes;
                Self::park(s, m.handle, bytes);
            }
            return;
        }
        let b = s.buffers.close(m.handle).expect("checked live by the caller");
        if s.code_ranges.remove(&b.alloc.va).is_some() {
            // Launch templates of kernels in this buffer die with it.
            s.templates.retain(|va, _| *va < b.alloc.va || *va >= b.alloc.va + b.alloc.bytes);
        }
        let counted = b.kind != HANDLE_BUF_QUEUE;
        let mem = i.platform.memory().expect("negotiated at open");
        // SAFETY: not latched, so the last launch (or command-list submission) completed with both markers
        // observed and nothing on the device can touch `b`; the lock is held (every caller checked it);
        // the handle was current and is now closed, so `b` is given back exactly once.
        unsafe { s.release_buf(mem, b) };
        if counted {
            s.stats.frees += 1;
        }
        *m = GpuMem::NONE;
    }

    pub(crate) fn park(s: &mut Session, h: omega_hal::Handle, bytes: u64) {
        s.park.buffers += 1;
        s.park.bytes += bytes;
        if s.parked_listed.len() < PARK_MAX {
            s.parked_listed.push(h);
        } else {
            s.park.untracked += 1;
        }
    }

    /// Parked buffers so far.
    pub fn parked(&self) -> ParkStats {
        sync::lock(&self.session).park
    }

    /// True when `h` is parked and listed.
    pub fn is_parked(&self, h: omega_hal::Handle) -> bool {
        !h.is_none() && sync::lock(&self.session).parked_listed.contains(&h)
    }

    /// The allocation counters.
    pub fn alloc_stats(&self) -> AllocStats {
        sync::lock(&self.session).stats
    }

    /// What the session's memory manager holds now: its chunks and what is carved from them, and its
    /// direct allocations.
    pub fn memory_stats(&self) -> MemoryStats {
        let s = sync::lock(&self.session);
        let carved_bytes =
            s.buffers.iter().filter(|(_, b)| b.backing != Backing::Direct).map(|(_, b)| b.alloc.bytes).sum();
        MemoryStats { carved: s.carver.stats(), carved_bytes, direct_buffers: s.direct.0, direct_bytes: s.direct.1 }
    }

    /// Free and total device memory, as the platform reports them now (on the GPU, the driver's figures,
    /// which count every process's allocations; the session's own chunks, spares included, count as
    /// used). Caller holds the lock, device open; allowed after a latch (it touches no buffer).
    pub fn mem_info(&self) -> Result<MemInfo> {
        let stage = Stage::MemInfo;
        let i = self.live_platform(stage)?;
        let mem = i.platform.memory().expect("negotiated at open");
        // SAFETY: the lock is held and the device is open (checked above; close needs the lock).
        match unsafe { mem.mem_info() } {
            Ok(m) => Ok(MemInfo { free_bytes: m.free_bytes, total_bytes: m.total_bytes }),
            Err(e) => Err(Error::MemInfo(e)),
        }
    }

    fn sync_dir(&self, m: &GpuMem, to_gpu: bool, offset: usize, len: usize) -> Result<()> {
        let stage = Stage::Sync;
        let i = self.live_platform(stage)?;
        if self.is_blocked() {
            return Err(Error::Latched(stage));
        }
        let s = sync::lock(&self.session);
        let buf = match s.buffers.check(m.handle) {
            Ok(b) => b,
            Err(source) => {
                drop(s);
                return Err(Error::Handle { stage, source });
            }
        };
        if offset.checked_add(len).is_none_or(|end| end as u64 > buf.alloc.bytes) {
            drop(s);
            return Err(Error::Setting { stage, detail: crate::error::SettingError::RangePast { offset, len } });
        }
        if buf.alloc.cpu.is_null() || len == 0 {
            return Ok(());
        }
        let (a, base) = s.platform_range(buf);
        drop(s);
        let vis = i.platform.visibility().expect("negotiated at open");
        let (offset, len) = (base + offset as u64, len as u64);
        // SAFETY: `a` is live (its handle is current and frees need the lock we hold), the range is inside
        // the buffer, which lies at `base` inside `a`, and no work is running (launches are synchronous and
        // the lock serialises callers).
        let r = unsafe {
            if to_gpu {
                vis.sync_to_gpu(&a, offset, len)
            } else {
                vis.sync_to_cpu(&a, offset, len)
            }
        };
        r.map_err(Error::Sync)
    }

    /// The bytes of `m`, a live buffer of the open session (its handle current and naming `m.va`), for a
    /// call that hands the buffer's device memory to its kernels; refused as a copy's target is (stage
    /// `stage`). Caller holds the lock, device open, not latched. The size is the session's record, not
    /// `m.size`, which the caller may have changed.
    pub fn live_bytes(&self, m: &GpuMem, stage: Stage) -> Result<u64> {
        self.live_platform(stage)?;
        if self.is_blocked() {
            return Err(Error::Latched(stage));
        }
        let s = sync::lock(&self.session);
        match s.buffers.check(m.handle) {
            Ok(b) if b.alloc.va == m.va => Ok(b.alloc.bytes),
            Ok(b) => Err(Error::ForeignAddress { stage, handle: m.handle, va: m.va, live_va: b.alloc.va }),
            Err(source) => Err(Error::Handle { stage, source }),
        }
    }

    /// Writes `src` into `m` at `offset`, visible to the device on return: through the CPU view and a sync
    /// for a buffer that has one, straight to the device side (the platform's staging) for one that has
    /// not (a device-only buffer). Caller holds the lock, device open, not latched.
    pub fn write(&self, m: &GpuMem, offset: usize, src: &[u8]) -> Result<()> {
        let Some((a, base, cpu)) = self.copy_target(m, offset, src.len(), Stage::Write)? else { return Ok(()) };
        let i = self.installed()?;
        let vis = i.platform.visibility().expect("negotiated at open");
        let at = base + offset as u64;
        if cpu.is_null() {
            // SAFETY: `a` is live (its handle is current and frees need the lock we hold), the range lies
            // inside the buffer, which lies at `base` inside `a`, and no work is running.
            return unsafe { vis.write_device(&a, at, src) }
                .map_err(|source| Error::Copy { stage: Stage::Write, source });
        }
        // SAFETY: the CPU view covers the buffer's bytes and `offset + len` is inside it (checked); it stays
        // mapped while the lock is held; `src` is a caller's slice, which cannot overlap a platform view the
        // session hands out only as raw pointers.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), cpu.add(offset), src.len()) };
        // SAFETY: as for write_device above.
        unsafe { vis.sync_to_gpu(&a, at, src.len() as u64) }.map_err(Error::Sync)
    }

    /// Reads `dst.len()` bytes of `m` at `offset` as the device left them: a sync and the CPU view for a
    /// buffer that has one, straight from the device side for one that has not. Caller holds the lock,
    /// device open, not latched.
    pub fn read(&self, m: &GpuMem, offset: usize, dst: &mut [u8]) -> Result<()> {
        let Some((a, base, cpu)) = self.copy_target(m, offset, dst.len(), Stage::Read)? else { return Ok(()) };
        let i = self.installed()?;
        let vis = i.platform.visibility().expect("negotiated at open");
        let at = base + offset as u64;
        if cpu.is_null() {
            // SAFETY: as in `write`.
            return unsafe { vis.read_device(&a, at, dst) }
                .map_err(|source| Error::Copy { stage: Stage::Read, source });
        }
        // SAFETY: as in `write`.
        unsafe { vis.sync_to_cpu(&a, at, dst.len() as u64) }.map_err(Error::Sync)?;
        // SAFETY: the view covers the range (checked) and stays mapped under the lock; `dst` cannot overlap
        // it (see `write`).
        unsafe { std::ptr::copy_nonoverlapping(cpu.add(offset).cast_const(), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// The checks of `write` and `read` (stage `stage`): lock, open, not latched, `m` live with its own
    /// address, the range inside it. `None` for an empty range; else the platform allocation holding `m`,
    /// `m`'s offset in it, and `m`'s CPU view (null for none).
    fn copy_target(
        &self,
        m: &GpuMem,
        offset: usize,
        len: usize,
        stage: Stage,
    ) -> Result<Option<(Allocation, u64, *mut u8)>> {
        self.live_platform(stage)?;
        if self.is_blocked() {
            return Err(Error::Latched(stage));
        }
        let s = sync::lock(&self.session);
        let buf = match s.buffers.check(m.handle) {
            Ok(b) if b.alloc.va == m.va => b,
            Ok(b) => {
                let e = Error::ForeignAddress { stage, handle: m.handle, va: m.va, live_va: b.alloc.va };
                drop(s);
                return Err(e);
            }
            Err(source) => {
                drop(s);
                return Err(Error::Handle { stage, source });
            }
        };
        if offset.checked_add(len).is_none_or(|end| end as u64 > buf.alloc.bytes) {
            let bytes = buf.alloc.bytes;
            drop(s);
            return Err(Error::Setting {
                stage,
                detail: crate::error::SettingError::RangePastBytes { offset, len, bytes },
            });
        }
        if len == 0 {
            return Ok(None);
        }
        let (a, base) = s.platform_range(buf);
        Ok(Some((a, base, buf.alloc.cpu)))
    }

    /// Makes CPU writes to the whole buffer visible to the device.
    pub fn sync_to_gpu(&self, m: &GpuMem) -> Result<()> {
        self.sync_dir(m, true, 0, self.buffer_bytes(m))
    }

    /// Makes device writes to the whole buffer visible to the CPU.
    pub fn sync_to_cpu(&self, m: &GpuMem) -> Result<()> {
        self.sync_dir(m, false, 0, self.buffer_bytes(m))
    }

    /// Makes CPU writes to `offset..offset+len` visible to the device.
    pub fn sync_range_to_gpu(&self, m: &GpuMem, offset: usize, len: usize) -> Result<()> {
        self.sync_dir(m, true, offset, len)
    }

    /// Makes device writes to `offset..offset+len` visible to the CPU.
    pub fn sync_range_to_cpu(&self, m: &GpuMem, offset: usize, len: usize) -> Result<()> {
        self.sync_dir(m, false, offset, len)
    }

    fn buffer_bytes(&self, m: &GpuMem) -> usize {
        sync::lock(&self.session).buffers.check(m.handle).map(|b| b.alloc.bytes as usize).unwrap_or(0)
    }

    fn scratch_buf(&self, m: &GpuMem) -> ScratchBuf {
        if m.handle.is_none() {
            return ScratchBuf::Empty;
        }
        let s = sync::lock(&self.session);
        match s.buffers.check(m.handle) {
            Ok(b) if b.alloc.va == m.va => {
                ScratchBuf::Live { bytes: b.alloc.bytes, parked: b.parked, owner: b.owner, reserved: b.reserved }
            }
            _ => ScratchBuf::Stale,
        }
    }

    /// Sets the reservation recorded with `m`'s buffer, if it is live.
    fn set_reservation(&self, m: &GpuMem, reserved: Option<usize>) {
        let mut s = sync::lock(&self.session);
        if let Ok(b) = s.buffers.check_mut(m.handle) {
            if b.alloc.va == m.va {
                b.reserved = reserved;
            }
        }
    }

    /// Makes `s.mem` at least `bytes` long (contents not kept). Caller holds the lock, device open.
    ///
    /// - A request the live buffer holds allocates nothing. With a reservation active, a request past the
    ///   reserved size (not the page-rounded capacity) is refused with [`Error::ScratchReserved`] and
    ///   allocates nothing.
    /// - Growing allocates the new buffer first and frees the old one after, so a failed grow keeps the
    ///   old buffer in `s`.
    /// - A buffer the session no longer has (its device was closed since, or it was freed through its
    ///   handle) is never reused: it is replaced by a new one, or, under a reservation, refused.
    /// - A parked buffer (freed after a latch) is refused, and so is one the library owns.
    pub fn scratch(&self, s: &mut Scratch, bytes: usize) -> Result<()> {
        self.scratch_to(s, bytes, s.reserved != 0)
    }

    fn scratch_to(&self, s: &mut Scratch, bytes: usize, reserved: bool) -> Result<()> {
        let stage = Stage::Scratch;
        self.live_platform(stage)?;
        let now = self.scratch_buf(&s.mem);
        if let ScratchBuf::Live { parked: true, .. } = now {
            return Err(Error::Setting { stage, detail: crate::error::SettingError::ScratchParked });
        }
        if let ScratchBuf::Live { owner: Owner::Internal(whose), .. } = now {
            return Err(Error::NotCallers { stage, owner: whose });
        }
        if reserved {
            let ScratchBuf::Live { reserved: Some(bound), .. } = now else {
                return Err(Error::Setting { stage, detail: crate::error::SettingError::StaleReservation });
            };
            if bytes > bound {
                return Err(Error::ScratchReserved { requested: bytes, reserved: bound });
            }
            s.high_water = s.high_water.max(bytes);
            return Ok(());
        }
        if let ScratchBuf::Live { bytes: have, .. } = now {
            if bytes as u64 <= have {
                s.high_water = s.high_water.max(bytes);
                return Ok(());
            }
        }
        let mut grown = self.alloc(bytes)?;
        if let ScratchBuf::Live { .. } = now {
            if let Err(e) = self.free(&mut s.mem) {
                // Cannot happen for a live buffer of the caller's under the lock before any latch (the
                // alloc just succeeded); if it does, give the new buffer back and keep the old one.
                let _ = self.free(&mut grown);
                return Err(e);
            }
        }
        s.cap = grown.size;
        s.mem = grown;
        s.high_water = s.high_water.max(bytes);
        Ok(())
    }

    /// Releases the scratch buffer as [`Runtime::free`] does and clears `s` — unless the buffer is still
    /// there: a refused free (no lock, a buffer the library owns) leaves `s` as it was, and a parked one
    /// keeps `s` with its handle, for [`Runtime::is_parked`].
    pub fn scratch_free(&self, s: &mut Scratch) -> Result<()> {
        let r = self.free(&mut s.mem);
        if s.mem.handle.is_none() {
            *s = Scratch::default();
        }
        r
    }

    /// Grows `s` to `bytes` now and reserves it: later requests up to `bytes` (the size asked for here, not
    /// the page-rounded capacity) allocate nothing, past it they are refused. On failure nothing is
    /// reserved.
    pub fn scratch_reserve(&self, s: &mut Scratch, bytes: usize) -> Result<()> {
        // Refused without the lock before anything changes: the old reservation stays.
        self.require_lock(Stage::Scratch)?;
        self.set_reservation(&s.mem, None);
        s.reserved = 0;
        self.scratch_to(s, bytes, false)?;
        self.set_reservation(&s.mem, Some(bytes));
        s.reserved = 1;
        Ok(())
    }

    /// Ends the reservation; the buffer stays. Caller holds the lock (refused without it: the reservation
    /// stays).
    pub fn scratch_unreserve(&self, s: &mut Scratch) -> Result<()> {
        self.require_lock(Stage::Scratch)?;
        self.set_reservation(&s.mem, None);
        s.reserved = 0;
        Ok(())
    }

    /// CPU-only memory from the platform HOST_MEM service.
    pub fn host_alloc(&self, bytes: usize, zeroed: bool) -> *mut u8 {
        let Ok(i) = self.installed() else { return std::ptr::null_mut() };
        let Some(h) = i.platform.host() else { return std::ptr::null_mut() };
        if zeroed {
            h.calloc(bytes)
        } else {
            h.alloc(bytes)
        }
    }

    /// Releases memory from [`Runtime::host_alloc`].
    ///
    /// # Safety
    /// - `p` is null or came from `host_alloc` of this runtime's current platform and was not freed since.
    pub unsafe fn host_free(&self, p: *mut u8) {
        if let Some(h) = self.installed().ok().as_ref().and_then(|i| i.platform.host()) {
            // SAFETY: forwarded from the caller.
            unsafe { h.free(p) }
        }
    }
}

#[cfg(test)]
mod tests {
    use omega_hal::{LaunchLimits, Services, MIN_CODE_PREFETCH_TAIL, PLATFORM_ABI_MAJOR, PLATFORM_ABI_MINOR};

    use super::*;

    fn caps(code_prefetch_tail: u64) -> Caps {
        Caps {
            abi_major: PLATFORM_ABI_MAJOR,
            abi_minor: PLATFORM_ABI_MINOR,
            services: Services::all(),
            page_bytes: 4096,
            code_prefetch_tail,
            param_base: 0x210,
            max_param_bytes: 4096,
            launch: LaunchLimits::SM_90,
        }
    }

    #[test]
    fn a_code_buffer_gets_the_platforms_prefetch_tail_and_never_less_than_the_contracts() {
        // nvidia's 4096: 1000 + 4096 rounds to two pages, where the contract's 2048 fits one.
        assert_eq!(buffer_bytes(1000, AllocKind::Code, &caps(omega_hal::arch::CODE_PREFETCH_TAIL)), Some(8192));
        assert_eq!(buffer_bytes(1000, AllocKind::Code, &caps(MIN_CODE_PREFETCH_TAIL)), Some(4096));
        // A C table that declares no tail still gets the contract's.
        assert_eq!(buffer_bytes(2049, AllocKind::Code, &caps(0)), Some(8192));
        assert_eq!(buffer_bytes(2048, AllocKind::Code, &caps(0)), Some(4096));
        // Data has no tail.
        assert_eq!(buffer_bytes(4096, AllocKind::Data, &caps(1 << 20)), Some(4096));
        assert_eq!(buffer_bytes(usize::MAX - 100, AllocKind::Code, &caps(0)), None);
    }
}
