//! Session memory: alloc, free (or park after a latch), visibility sync, scratch, the counters.

use omega_hal::{check_buffer, BufferDesc, BufferKind, CachePolicy, Caps, Rights};

use super::{AllocStats, Buf, GpuMem, Owner, ParkStats, Runtime, Scratch, Session, CODE_PREFETCH_TAIL, PARK_MAX};
use super::{HANDLE_BUF_CODE, HANDLE_BUF_DATA, HANDLE_BUF_QUEUE};
use crate::error::{Error, Result};
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

    /// Its rights, cache policy, HAL kind and C handle kind.
    fn describe(self) -> (Rights, CachePolicy, BufferKind, u32) {
        match self {
            Shape::Mem(AllocKind::Data) => (
                Rights::CPU_READ | Rights::CPU_WRITE | Rights::GPU_READ | Rights::GPU_WRITE,
                CachePolicy::Uncached,
                BufferKind::Data,
                HANDLE_BUF_DATA,
            ),
            Shape::Mem(AllocKind::Code) => (
                Rights::CPU_READ | Rights::CPU_WRITE | Rights::GPU_READ | Rights::GPU_EXEC,
                CachePolicy::Uncached,
                BufferKind::Code,
                HANDLE_BUF_CODE,
            ),
            Shape::Mem(AllocKind::Cached) => (
                Rights::CPU_READ | Rights::CPU_WRITE | Rights::GPU_READ,
                CachePolicy::Cached,
                BufferKind::Data,
                HANDLE_BUF_DATA,
            ),
            Shape::Polled => (polled_rights(), CachePolicy::Uncached, BufferKind::Queue, HANDLE_BUF_QUEUE),
        }
    }

    /// From which byte of a fresh buffer of `bytes` requested bytes it reads as zeros, if it must.
    fn zeroed_from(self, bytes: usize) -> Option<usize> {
        match self {
            Shape::Mem(AllocKind::Code) => Some(bytes),
            Shape::Polled => Some(0),
            Shape::Mem(AllocKind::Data | AllocKind::Cached) => None,
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
        AllocKind::Data | AllocKind::Cached => bytes,
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
    fn live_platform(&self, stage: &'static str) -> Result<Installed> {
        self.require_lock(stage)?;
        let i = self.installed()?;
        if !self.is_open() {
            return self.fail(Error::NotOpen(stage));
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
        self.allocate("alloc", bytes, Shape::Mem(kind), owner)
    }

    /// A zeroed QUEUE buffer of at least `bytes` bytes for `owner` (a command list's stamp area): what the
    /// CPU polls and the device releases to, so HOST_POLLED and GPU-uncached, as the contract requires of
    /// anything the CPU polls. Not in the allocation counters, which count the caller's kinds of buffer.
    pub(crate) fn alloc_polled(&self, bytes: usize, owner: Owner, stage: &'static str) -> Result<GpuMem> {
        self.allocate(stage, bytes, Shape::Polled, owner)
    }

    /// Every session allocation: the checks (lock, open device, not latched, a size a platform can
    /// describe, a valid descriptor), the platform's allocation under the session mutex, the zero fill
    /// the shape promises, the counters and the handle.
    fn allocate(&self, stage: &'static str, bytes: usize, shape: Shape, owner: Owner) -> Result<GpuMem> {
        let i = self.live_platform(stage)?;
        if self.is_blocked() {
            return self.fail(Error::Latched(stage));
        }
        let Some(rounded) = buffer_bytes(bytes, shape.alloc_kind(), &i.platform.caps()) else {
            return self.fail(Error::Refused(omega_hal::Refusal::Overflow));
        };
        let (rights, cache, hal_kind, c_kind) = shape.describe();
        let desc = BufferDesc { bytes: rounded, rights, cache, kind: hal_kind };
        if let Err(r) = check_buffer(&desc) {
            return self.fail(Error::Refused(r));
        }
        let counted = shape.counted();
        let mem = i.platform.memory().expect("negotiated at open");
        let mut s = sync::lock(&self.session);
        // SAFETY: the lock is held and the device is open (checked above, and close needs the lock).
        let a = match unsafe { mem.alloc(&desc) } {
            Ok(a) => a,
            Err(e) => {
                if counted {
                    s.stats.alloc_failures += 1;
                }
                drop(s);
                return self.fail(Error::Alloc(e));
            }
        };
        if a.bytes < rounded {
            // SAFETY: just allocated under the lock; nothing has its address yet.
            unsafe { mem.free(&a) };
            drop(s);
            return self.fail(Error::Setting {
                stage,
                detail: format!("the platform handed out {} bytes for a request of {rounded}", a.bytes),
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
        let handle = s.buffers.open(Buf::new(a, c_kind, owner));
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
        let stage = "free";
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
            return self.fail(Error::NotOpen(stage));
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
                return self.fail(e);
            }
            Err(source) => {
                s.stats.stale_refusals += 1;
                *m = GpuMem::NONE;
                drop(s);
                return self.fail(Error::Handle { stage, source });
            }
        };
        if buf.owner != owner {
            let Owner::Internal(whose) = buf.owner else { unreachable!("a caller's buffer matches Owner::Caller") };
            drop(s);
            return self.fail(Error::NotCallers { stage, owner: whose });
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
    /// for [`Runtime::is_parked`] — because a launch whose completion was uncertain may still touch it;
    /// otherwise it is released and `m` zeroed.
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
        let mem = i.platform.memory().expect("negotiated at open");
        // SAFETY: not latched, so the last launch (or command-list submission) completed with both markers
        // observed and nothing on the device can touch `b`; the lock is held (every caller checked it);
        // the handle was current, so it is freed exactly once.
        unsafe { mem.free(&b.alloc) };
        if b.kind != HANDLE_BUF_QUEUE {
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

    fn sync_dir(&self, m: &GpuMem, to_gpu: bool, offset: usize, len: usize) -> Result<()> {
        let stage = "sync";
        let i = self.live_platform(stage)?;
        if self.is_blocked() {
            return self.fail(Error::Latched(stage));
        }
        let s = sync::lock(&self.session);
        let buf = match s.buffers.check(m.handle) {
            Ok(b) => b,
            Err(source) => {
                drop(s);
                return self.fail(Error::Handle { stage, source });
            }
        };
        if offset.checked_add(len).is_none_or(|end| end as u64 > buf.alloc.bytes) {
            drop(s);
            return self.fail(Error::Setting { stage, detail: format!("range {offset}+{len} past the buffer") });
        }
        if buf.alloc.cpu.is_null() || len == 0 {
            return Ok(());
        }
        let a = buf.alloc;
        drop(s);
        let vis = i.platform.visibility().expect("negotiated at open");
        // SAFETY: `a` is live (its handle is current and frees need the lock we hold), the range is inside
        // it, and no work is running (launches are synchronous and the lock serialises callers).
        let r = unsafe {
            if to_gpu {
                vis.sync_to_gpu(&a, offset as u64, len as u64)
            } else {
                vis.sync_to_cpu(&a, offset as u64, len as u64)
            }
        };
        r.or_else(|e| self.fail(Error::Sync(e)))
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
        let stage = "scratch";
        self.live_platform(stage)?;
        let now = self.scratch_buf(&s.mem);
        if let ScratchBuf::Live { parked: true, .. } = now {
            return self.fail(Error::Setting {
                stage,
                detail: "its buffer is parked (freed after the latch) and cannot be used again".into(),
            });
        }
        if let ScratchBuf::Live { owner: Owner::Internal(whose), .. } = now {
            return self.fail(Error::NotCallers { stage, owner: whose });
        }
        if reserved {
            let ScratchBuf::Live { reserved: Some(bound), .. } = now else {
                return self.fail(Error::Setting {
                    stage,
                    detail: "reserved is set but its buffer holds no reservation (its device was closed since, \
                             it was freed, or the field was set by hand): scratch_free it and reserve again"
                        .into(),
                });
            };
            if bytes > bound {
                return self.fail(Error::ScratchReserved { requested: bytes, reserved: bound });
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
                self.set_error(&e);
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
        self.require_lock("scratch")?;
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
        self.require_lock("scratch")?;
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
