//! Device memory on a discrete GPU: where each kind of buffer lives, its views, and the GPU virtual
//! address map. The memory service's state is [`Buffers`]; [`Base`] holds the machinery every service
//! allocates its own memory ([`DriverMem`]) through.
//!
//! | Buffer | GPU side | CPU view (`Allocation::cpu`) |
//! |---|---|---|
//! | data (kernels read and write it) | video memory, GPU-cached, 2 MiB pages from 8 MiB | this process's anonymous pages, reserved but not pinned: a sync moves bytes through the staging ring (`visibility.rs`), or directly once the view is registered; buffers of at most `bar1_view_max` bytes also get a write-combined BAR1 view for small syncs to the GPU |
//! | code | video memory | write-combined BAR1 (written once, never read) |
//! | queue memory and anything HOST_POLLED | GPU-uncached system memory | the same pages, CPU-cached |
//! | no CPU rights (device-only) | video memory | none: written and read through the staging ring |
//!
//! Allocating pins no host memory: a data buffer's view is `MAP_NORESERVE` anonymous memory, whose
//! untouched pages cost nothing, so capacity is the device's, not the host's (a 130 GiB buffer on a host
//! of 128 GiB works). A view is *registered* — pinned by the driver and mapped for the GPU, so the copy
//! engine reads and writes it at PCIe speed — at allocation when it is at most `pin_views_max` bytes, or
//! at a later large sync (`register_sync_bytes`, `register_after`), always within `pinned_budget_bytes`
//! for the whole device; a registration the driver refuses is counted ([`MemoryStats`]) and not asked
//! again, and the buffer keeps using the ring.
//!
//! Data stays GPU-cached even when the contract asks for "uncached": in video memory the L2 is the point
//! of coherence, every GPU access (kernels and the copy engine alike) goes through it, and the CPU never
//! reads video memory directly, so there is nothing for a cache to hide. The CPU-visible sides are
//! exactly the HOST_POLLED/queue pages, and those are GPU-uncached system memory as the contract demands.
//! Reading BAR1 costs about a microsecond per access, so the CPU never reads video memory at all.

use std::collections::{BTreeMap, HashMap};
use std::ptr;

use super::ioctl;
use super::rm::{unmap, MapVia, MemoryClass};
use super::stage::{Records, Stage};
use super::sys::{self, mem_attr};
use super::{Base, Nvidia, NvidiaConfig, OpenDevice};
use crate::caps::{BufferDesc, BufferKind, Rights};
use crate::error::HalError;
use crate::memory::{Allocation, DeviceMemory, MemInfo};
use crate::sync;

/// The small page.
pub const PAGE: u64 = 4096;
/// The huge page of video memory.
pub const HUGE_PAGE: u64 = 2 << 20;
/// From this size on, video memory uses huge pages (as tinygrad does; smaller buffers would waste up to
/// 2 MiB each); `NvidiaConfig::huge_from` (`OMEGA_NVIDIA_HUGE_FROM`) moves it.
pub const HUGE_FROM: u64 = 8 << 20;

/// GPU VAs of memory the CPU also sees, of code, of the queue and of QMDs: SEND_PCAS_A carries
/// `addr >> 8` in 32 bits, so a QMD must sit below 2^40.
pub const LOW_VA: (u64, u64) = (0x10_0000_0000, 0x100_0000_0000);
/// GPU VAs of data buffers and their staging views.
pub const HIGH_VA: (u64, u64) = (0x100_0000_0000, 0x7000_0000_0000);

/// Where a buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// GPU-uncached system memory, one set of pages for both sides: queue memory and polled markers.
    SysmemPolled,
    /// Video memory with a write-combined BAR1 view for the CPU: code.
    VidmemBar1,
    /// Video memory for the GPU and this process's (unpinned) anonymous pages as the CPU view: data.
    VidmemViewed,
    /// Video memory with no CPU view.
    VidmemOnly,
}

/// The decision for one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferPlan {
    /// Where it lives.
    pub placement: Placement,
    /// Page size of its GPU side.
    pub page: u64,
    /// Bytes actually allocated (the request rounded to `page`).
    pub bytes: u64,
    /// Whether its GPU address comes from the low (below 2^40) range.
    pub low_va: bool,
}

/// Decides where the buffer `desc` describes lives (the table in the module docs), with huge pages from
/// [`HUGE_FROM`] bytes on.
pub fn plan(desc: &BufferDesc) -> BufferPlan {
    plan_with(desc, HUGE_FROM)
}

/// [`plan`] with huge pages from `huge_from` bytes on.
pub fn plan_with(desc: &BufferDesc, huge_from: u64) -> BufferPlan {
    let cpu = desc.rights.intersects(Rights::CPU_READ | Rights::CPU_WRITE);
    let placement = if desc.kind == BufferKind::Queue || desc.rights.contains(Rights::HOST_POLLED) {
        Placement::SysmemPolled
    } else if !cpu {
        Placement::VidmemOnly
    } else if desc.kind == BufferKind::Code || desc.rights.contains(Rights::GPU_EXEC) {
        Placement::VidmemBar1
    } else {
        Placement::VidmemViewed
    };
    let huge = placement != Placement::SysmemPolled && desc.bytes >= huge_from;
    let page = if huge { HUGE_PAGE } else { PAGE };
    let low_va = matches!(placement, Placement::SysmemPolled | Placement::VidmemBar1) || desc.kind != BufferKind::Data;
    BufferPlan { placement, page, bytes: desc.bytes.div_ceil(page) * page, low_va }
}

/// Times the driver steps of allocating and freeing one memory object when `OMEGA_NVIDIA_TRACE_MEMORY=1`
/// (a diagnosis knob: which of the RM allocation, the RM and UVM mappings and their frees the time of a
/// large allocation goes to). Prints one line per object to stderr.
struct StepTimes {
    on: bool,
    at: std::time::Instant,
    line: String,
}

impl StepTimes {
    fn new(what: &str, bytes: u64) -> Self {
        let on = std::env::var_os("OMEGA_NVIDIA_TRACE_MEMORY").is_some_and(|v| v == "1");
        Self {
            on,
            at: std::time::Instant::now(),
            line: if on { format!("{what} {} KiB:", bytes >> 10) } else { String::new() },
        }
    }
    fn step(&mut self, name: &str) {
        if self.on {
            let now = std::time::Instant::now();
            self.line += &format!(" {name} {:.1} us", (now - self.at).as_secs_f64() * 1e6);
            self.at = now;
        }
    }
}

impl Drop for StepTimes {
    fn drop(&mut self) {
        if self.on {
            eprintln!("omega (nvidia) memory trace: {}", self.line);
        }
    }
}

/// A first-fit allocator of GPU virtual addresses over one range, with coalescing frees.
#[derive(Clone, Debug)]
pub struct VaRange {
    /// Free extents: start -> length.
    free: BTreeMap<u64, u64>,
}

impl VaRange {
    /// All of `base..end` free.
    pub fn new(base: u64, end: u64) -> Self {
        let mut free = BTreeMap::new();
        free.insert(base, end - base);
        Self { free }
    }

    /// `len` bytes aligned to `align` (a power of two), or `None` when no extent fits.
    pub fn alloc(&mut self, len: u64, align: u64) -> Option<u64> {
        debug_assert!(align.is_power_of_two() && len > 0);
        let (start, flen, at) = self.free.iter().find_map(|(&s, &l)| {
            let at = s.checked_add(align - 1)? & !(align - 1);
            (at.checked_add(len)? <= s + l).then_some((s, l, at))
        })?;
        self.free.remove(&start);
        if at > start {
            self.free.insert(start, at - start);
        }
        if at + len < start + flen {
            self.free.insert(at + len, start + flen - (at + len));
        }
        Some(at)
    }

    /// Returns `start..start + len` (which `alloc` handed out) to the free set.
    pub fn free(&mut self, start: u64, len: u64) {
        let (mut s, mut l) = (start, len);
        if let Some((&ps, &pl)) = self.free.range(..s).next_back() {
            if ps + pl == s {
                self.free.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(s + l)) {
            self.free.remove(&(s + l));
            l += nl;
        }
        self.free.insert(s, l);
    }

    /// Bytes free in total.
    pub fn free_bytes(&self) -> u64 {
        self.free.values().sum()
    }
}

/// What backs a [`DriverMem`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DriverMemKind {
    /// Video memory (class 0x40).
    Vid,
    /// RM-owned system memory (class 0x3e), GPU-uncached.
    Sys,
    /// This process's anonymous pages, mapped here, wrapped as class 0x71 (pinned by the driver); the
    /// mapping goes with the object.
    Host,
    /// Pages of a mapping owned elsewhere (a data buffer's view) wrapped as class 0x71: releasing the
    /// object unpins them and leaves them mapped.
    Registered,
}

/// How a new [`DriverMem`] is made.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DriverMemSpec {
    pub(crate) kind: DriverMemKind,
    pub(crate) bytes: u64,
    pub(crate) page: u64,
    pub(crate) contiguous: bool,
    /// NVOS33 caching flags of a CPU mapping of video or system memory; `None`: no CPU mapping.
    pub(crate) cpu_map: Option<u32>,
    pub(crate) low_va: bool,
}

/// One RM memory object with its GPU mapping and, maybe, a CPU mapping.
#[derive(Debug)]
pub(crate) struct DriverMem {
    pub(crate) handle: u32,
    pub(crate) kind: DriverMemKind,
    pub(crate) va: u64,
    pub(crate) bytes: u64,
    pub(crate) cpu: *mut u8,
    pub(crate) low_va: bool,
}

/// What releasing a [`DriverMem`] needs, kept by a stage (`stage.rs`) in case a later step fails while the
/// `DriverMem` itself has gone on to its owner.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemRecord {
    handle: u32,
    kind: DriverMemKind,
    va: u64,
    bytes: u64,
    cpu: *mut u8,
    low_va: bool,
}

impl DriverMem {
    /// Its release record.
    pub(crate) fn record(&self) -> MemRecord {
        let DriverMem { handle, kind, va, bytes, cpu, low_va } = *self;
        MemRecord { handle, kind, va, bytes, cpu, low_va }
    }
}

impl Base {
    fn va_range(&mut self, low: bool) -> &mut VaRange {
        if low {
            &mut self.va_low
        } else {
            &mut self.va_high
        }
    }

    /// Maps RM object `handle` at `va` for the GPU: a UVM external range, the RM DMA mapping at that fixed
    /// address in page-table entries of `page` bytes (the page size the object was allocated with), then
    /// the UVM mapping (the three steps of the fact sheet).
    pub(crate) fn map_gpu(&self, handle: u32, va: u64, len: u64, page: u64) -> Result<(), HalError> {
        let mut t = StepTimes::new("map", len);
        self.uvm.create_external_range(va, len)?;
        t.step("UVM_CREATE_EXTERNAL_RANGE");
        let mapped = self.rm.map_dma(self.device, self.virtmem, handle, len, va, page == HUGE_PAGE).and_then(|()| {
            t.step("RM_MAP_MEMORY_DMA");
            let r = self.uvm.map_external(self.uuid, self.rm.ctl_fd(), self.rm.client, handle, va, len);
            t.step("UVM_MAP_EXTERNAL_ALLOCATION");
            r
        });
        if mapped.is_err() {
            let _ = self.uvm.free(va, len);
        }
        mapped
    }

    /// Allocates, maps for the GPU and (as asked) maps for the CPU one memory object.
    pub(crate) fn new_mem(&mut self, spec: DriverMemSpec, call: &'static str) -> Result<DriverMem, HalError> {
        let bytes = spec.bytes.div_ceil(spec.page) * spec.page;
        let align = spec.page.max(64 << 10);
        let va = self.va_range(spec.low_va).alloc(bytes, align).ok_or(HalError::OutOfMemory { bytes })?;
        let mut m = DriverMem { handle: 0, kind: spec.kind, va: 0, bytes, cpu: ptr::null_mut(), low_va: spec.low_va };
        let made = self.fill_mem(&mut m, spec, va, call);
        if let Err(e) = made {
            self.release_mem_parts(&m.record());
            self.va_range(spec.low_va).free(va, bytes);
            return Err(e);
        }
        Ok(m)
    }

    fn fill_mem(
        &mut self,
        m: &mut DriverMem,
        spec: DriverMemSpec,
        va: u64,
        call: &'static str,
    ) -> Result<(), HalError> {
        let bytes = m.bytes;
        match spec.kind {
            DriverMemKind::Vid | DriverMemKind::Sys => {
                let vid = spec.kind == DriverMemKind::Vid;
                let huge = spec.page == HUGE_PAGE;
                let mut attr = if spec.contiguous {
                    mem_attr::ATTR_PHYSICALITY_CONTIGUOUS
                } else {
                    mem_attr::ATTR_PHYSICALITY_ALLOW_NONCONTIGUOUS
                };
                let mut attr2 = mem_attr::ATTR2_ZBC_PREFER_NO_ZBC;
                let mut flags = mem_attr::FLAGS_IGNORE_BANK_PLACEMENT
                    | mem_attr::FLAGS_MEMORY_HANDLE_PROVIDED
                    | mem_attr::FLAGS_MAP_NOT_REQUIRED;
                if huge {
                    // System memory too: the driver then hands out 2 MiB pieces, and the GPU's page
                    // tables map them with 2 MiB entries instead of 512 entries of 4 KiB each.
                    attr |= mem_attr::ATTR_PAGE_SIZE_HUGE;
                    attr2 |= mem_attr::ATTR2_PAGE_SIZE_HUGE_2MB;
                }
                if vid {
                    attr2 |= mem_attr::ATTR2_GPU_CACHEABLE_YES;
                    flags |= mem_attr::FLAGS_ALIGNMENT_FORCE | mem_attr::FLAGS_PERSISTENT_VIDMEM;
                } else {
                    attr |= mem_attr::ATTR_LOCATION_PCI;
                    attr2 |= mem_attr::ATTR2_GPU_CACHEABLE_NO;
                }
                let mut p = sys::MemoryAlloc {
                    owner: self.rm.client,
                    type_: if vid { mem_attr::TYPE_IMAGE } else { mem_attr::TYPE_NOTIFIER },
                    flags,
                    attr,
                    attr2,
                    format: mem_attr::FORMAT_PITCH,
                    size: bytes,
                    alignment: spec.page,
                    limit: bytes - 1,
                    ..Default::default()
                };
                let cls = if vid { MemoryClass::Video } else { MemoryClass::System };
                let mut t = StepTimes::new("alloc", bytes);
                m.handle = self.rm.alloc_memory(self.device, cls, &mut p, call)?;
                t.step("RM_ALLOC memory");
                if let Some(caching) = spec.cpu_map {
                    let via = if vid { MapVia::Device(self.minor) } else { MapVia::Ctl };
                    m.cpu = self.rm.map_cpu(self.device, m.handle, bytes, caching, via, call)?;
                }
            }
            DriverMemKind::Host => {
                // SAFETY: anonymous pages, no driver file behind them.
                let p = unsafe { ioctl::map(bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, None, call) }
                    .map_err(|e| if matches!(e, HalError::Sealed(_)) { e } else { HalError::OutOfMemory { bytes } })?;
                m.cpu = p;
                // SAFETY: `m.cpu` is the page-aligned mapping of `bytes` just made; it stays mapped until
                // `release_mem_parts` frees the object first and unmaps it after.
                unsafe { self.wrap_pages(m) }?;
            }
            DriverMemKind::Registered => unreachable!("registered pages are made by Base::register_pages"),
        }
        self.map_gpu(m.handle, va, bytes, spec.page)?;
        m.va = va;
        Ok(())
    }

    /// Wraps the `m.bytes` of pages at `m.cpu` as a class 0x71 object (the driver pins them) and sets
    /// `m.handle`.
    ///
    /// # Safety
    /// - `m.cpu..m.cpu + m.bytes` is a page-aligned mapping of this process that stays mapped until the
    ///   object is freed.
    unsafe fn wrap_pages(&mut self, m: &mut DriverMem) -> Result<(), HalError> {
        let handle = self.next_os_handle;
        self.next_os_handle += 1;
        // SAFETY: forwarded from the caller.
        unsafe { self.rm.alloc_os_descriptor(&self.dev, self.device, handle, m.cpu, m.bytes) }?;
        m.handle = handle;
        Ok(())
    }

    /// Registers `bytes` of this process's pages at `cpu` with the driver: pinned and mapped for the GPU in
    /// the high VA range, as a [`DriverMemKind::Registered`] memory whose release unpins them and leaves them
    /// mapped.
    ///
    /// # Safety
    /// - `cpu..cpu + bytes` is a page-aligned mapping of this process (`bytes` a multiple of [`PAGE`]) that
    ///   stays mapped until the returned memory is released.
    pub(crate) unsafe fn register_pages(&mut self, cpu: *mut u8, bytes: u64) -> Result<DriverMem, HalError> {
        let align = 64 << 10;
        let va = self.va_high.alloc(bytes, align).ok_or(HalError::OutOfMemory { bytes })?;
        let mut m = DriverMem { handle: 0, kind: DriverMemKind::Registered, va: 0, bytes, cpu, low_va: false };
        // SAFETY: forwarded from the caller.
        let made = unsafe { self.wrap_pages(&mut m) }.and_then(|()| self.map_gpu(m.handle, va, bytes, PAGE));
        if let Err(e) = made {
            self.release_mem_parts(&m.record());
            self.va_high.free(va, bytes);
            return Err(e);
        }
        m.va = va;
        Ok(m)
    }

    /// Undoes whatever part of `m` exists: GPU mapping, CPU mapping, RM object, host pages.
    fn release_mem_parts(&self, m: &MemRecord) {
        let mut t = StepTimes::new("free", m.bytes);
        if m.va != 0 {
            let _ = self.uvm.free(m.va, m.bytes);
            t.step("UVM_FREE");
        }
        if matches!(m.kind, DriverMemKind::Vid | DriverMemKind::Sys) {
            // SAFETY: an RM CPU mapping of `bytes` this backend made for `m`; its owner is done with it.
            unsafe { unmap(m.cpu, m.bytes) };
        }
        if m.handle != 0 {
            let _ = self.rm.free(self.device, m.handle, "RM_FREE memory");
            t.step("RM_FREE");
        }
        if m.kind == DriverMemKind::Host {
            // SAFETY: the anonymous mapping made for `m`; the driver unpinned it when the object was freed.
            unsafe { unmap(m.cpu, m.bytes) };
        }
    }

    /// Frees the memory `m` records and returns its GPU addresses. Its owner (or, unwinding, the failed
    /// construction that held it) is done with it.
    pub(crate) fn release(&mut self, m: MemRecord) {
        self.release_mem_parts(&m);
        if m.va != 0 {
            self.va_range(m.low_va).free(m.va, m.bytes);
        }
    }

    /// Frees `m` and returns its GPU addresses.
    pub(crate) fn drop_mem(&mut self, m: DriverMem) {
        self.release(m.record());
    }
}

/// What the memory and visibility services did, for reports and benchmarks ([`crate::nvidia::Nvidia::memory_stats`]):
/// which path each sync took, what is pinned, and what the driver refused (each refusal keeps a buffer on
/// a slower path, never fails it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes of data-buffer views registered (pinned) now.
    pub pinned_bytes: u64,
    /// Data-buffer views registered now.
    pub registered_views: u64,
    /// Registrations the driver refused since open (those buffers sync through the ring).
    pub register_refusals: u64,
    /// Data buffers with a BAR1 view now.
    pub bar1_views: u64,
    /// BAR1 views the driver refused since open (those buffers sync to the GPU through the copy engine).
    pub bar1_refusals: u64,
    /// Bytes of the staging ring (both halves; 0 before its first use).
    pub staging_bytes: u64,
    /// Staging rings given up after a copy that did not complete (kept, never reused, freed at close).
    pub lost_rings: u64,
    /// Syncs to the GPU done as CPU stores through a BAR1 view.
    pub syncs_bar1: u64,
    /// Syncs done by the copy engine straight between a registered view and video memory.
    pub syncs_direct: u64,
    /// Syncs, device-side writes and reads that went through the staging ring.
    pub syncs_staged: u64,
}

/// The CPU view of a data buffer: anonymous pages of this process, reserved at allocation, pinned only
/// once registered.
pub(crate) struct View {
    pub(crate) cpu: *mut u8,
    pub(crate) bytes: u64,
    /// The view registered with the driver (pinned, GPU-mapped): the copy engine reads and writes it
    /// directly.
    pub(crate) registered: Option<DriverMem>,
    /// Large syncs that went through the ring while the view was not registered.
    pub(crate) staged_large_syncs: u32,
    /// The driver refused to register the view once; it is not asked again.
    pub(crate) refused: bool,
}

/// A buffer as this backend holds it.
pub(crate) struct NvAlloc {
    pub(crate) placement: Placement,
    /// The GPU side (its VA is `Allocation::va`).
    pub(crate) primary: DriverMem,
    /// The CPU view of a data buffer.
    pub(crate) view: Option<View>,
    /// A write-combined BAR1 view of `primary` for small syncs to the GPU.
    pub(crate) bar1: Option<*mut u8>,
}

/// The memory service's state: every buffer handed out, by the id in its [`Allocation`], and the counters.
pub(crate) struct Buffers {
    allocs: HashMap<u64, NvAlloc>,
    next_id: u64,
    pub(crate) stats: MemoryStats,
}

/// Reserves `bytes` of anonymous memory for a CPU view: private, not accounted against the host's commit
/// limit (`MAP_NORESERVE`), so untouched pages cost nothing.
fn reserve_view(bytes: u64) -> Result<*mut u8, HalError> {
    let flags = libc::MAP_PRIVATE | libc::MAP_NORESERVE;
    // SAFETY: anonymous pages, no driver file behind them.
    unsafe { ioctl::map(bytes, libc::PROT_READ | libc::PROT_WRITE, flags, None, "reserve a CPU view") }.map_err(|e| {
        if matches!(e, HalError::Sealed(_)) {
            e
        } else {
            HalError::OutOfMemory { bytes }
        }
    })
}

impl Buffers {
    /// No buffers yet; the first gets id 1.
    pub(crate) fn new() -> Self {
        Buffers { allocs: HashMap::new(), next_id: 1, stats: MemoryStats::default() }
    }

    /// The buffer `id`.
    pub(crate) fn get(&self, id: u64) -> Option<&NvAlloc> {
        self.allocs.get(&id)
    }

    /// The buffer `id`, to change.
    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut NvAlloc> {
        self.allocs.get_mut(&id)
    }

    /// The ids of every buffer held.
    pub(crate) fn ids(&self) -> Vec<u64> {
        self.allocs.keys().copied().collect()
    }

    /// Allocates a buffer as [`plan`] decides, and says where it went.
    pub(crate) fn alloc(
        &mut self,
        base: &mut Base,
        desc: &BufferDesc,
        config: &NvidiaConfig,
    ) -> Result<(Allocation, Placement), HalError> {
        let p = plan_with(desc, config.huge_from);
        let spec = |kind, cpu_map, low_va| DriverMemSpec {
            kind,
            bytes: p.bytes,
            page: p.page,
            contiguous: false,
            cpu_map,
            low_va,
        };
        let (primary, view, bar1) = match p.placement {
            Placement::SysmemPolled => (
                base.new_mem(spec(DriverMemKind::Sys, Some(sys::map_caching::CACHED), true), "allocate polled sysmem")?,
                None,
                None,
            ),
            Placement::VidmemBar1 => {
                let wc = Some(sys::map_caching::WRITE_COMBINED);
                (base.new_mem(spec(DriverMemKind::Vid, wc, p.low_va), "allocate code vidmem")?, None, None)
            }
            Placement::VidmemOnly => {
                (base.new_mem(spec(DriverMemKind::Vid, None, p.low_va), "allocate vidmem")?, None, None)
            }
            Placement::VidmemViewed => {
                // Two parts that must both exist; a failure of the second releases the first.
                let mut s = Stage::new(base);
                let vid = s.mem(spec(DriverMemKind::Vid, None, p.low_va), "allocate data vidmem")?;
                let cpu = s.anonymous(p.bytes, reserve_view)?;
                // The BAR1 view only speeds up small syncs: without it they go through the copy engine.
                let bar1 = if p.bytes <= config.bar1_view_max {
                    let wc = sys::map_caching::WRITE_COMBINED;
                    let (device, minor) = (s.base().device, s.base().minor);
                    match s.map_cpu(device, vid.handle, vid.bytes, wc, MapVia::Device(minor), "map BAR1 view") {
                        Ok(b) => Some(b),
                        Err(_) => {
                            self.stats.bar1_refusals += 1;
                            None
                        }
                    }
                } else {
                    None
                };
                let _ = s.keep();
                let view = View { cpu, bytes: p.bytes, registered: None, staged_large_syncs: 0, refused: false };
                (vid, Some(view), bar1)
            }
        };
        let cpu = view.as_ref().map_or(primary.cpu, |v| v.cpu);
        let cpu = if desc.rights.intersects(Rights::CPU_READ | Rights::CPU_WRITE) { cpu } else { ptr::null_mut() };
        let id = self.next_id;
        self.next_id += 1;
        let a = Allocation { id, cpu, va: primary.va, bytes: desc.bytes };
        self.stats.bar1_views += u64::from(bar1.is_some());
        self.allocs.insert(id, NvAlloc { placement: p.placement, primary, view, bar1 });
        if p.placement == Placement::VidmemViewed && p.bytes <= config.pin_views_max {
            self.register_view(base, id, config.pinned_budget_bytes);
        }
        Ok((a, p.placement))
    }

    /// Registers the view of buffer `id` (pinned and mapped for the GPU) unless it is registered already,
    /// the driver refused it before, or it would take the registered views past `budget` bytes. Returns the
    /// GPU address of the registered view, if it is registered on return.
    pub(crate) fn register_view(&mut self, base: &mut Base, id: u64, budget: u64) -> Option<u64> {
        let stats = &mut self.stats;
        let view = self.allocs.get_mut(&id)?.view.as_mut()?;
        if let Some(r) = &view.registered {
            return Some(r.va);
        }
        if view.refused || view.bytes > budget.saturating_sub(stats.pinned_bytes) {
            return None;
        }
        // SAFETY: the view is a page-aligned anonymous mapping of `bytes` (a multiple of the page: plan's
        // rounding), unmapped only by `free`, which releases the registration first.
        match unsafe { base.register_pages(view.cpu, view.bytes) } {
            Ok(m) => {
                stats.pinned_bytes += m.bytes;
                stats.registered_views += 1;
                let va = m.va;
                view.registered = Some(m);
                Some(va)
            }
            Err(_) => {
                view.refused = true;
                stats.register_refusals += 1;
                None
            }
        }
    }

    /// Frees the buffer `id`, and says where it was (`None`: no such buffer).
    pub(crate) fn free(&mut self, base: &mut Base, id: u64) -> Option<Placement> {
        let a = self.allocs.remove(&id)?;
        if let Some(b) = a.bar1 {
            self.stats.bar1_views -= 1;
            // SAFETY: the BAR1 view made for this buffer; the buffer is being freed.
            unsafe { unmap(b, a.primary.bytes) };
        }
        base.drop_mem(a.primary);
        if let Some(v) = a.view {
            if let Some(r) = v.registered {
                self.stats.pinned_bytes -= r.bytes;
                self.stats.registered_views -= 1;
                // Unpinned before the pages are unmapped.
                base.drop_mem(r);
            }
            // SAFETY: the view's anonymous mapping, made for this buffer, no longer registered; the buffer is
            // being freed, so nothing reads or writes it any more.
            unsafe { unmap(v.cpu, v.bytes) };
        }
        Some(a.placement)
    }
}

impl OpenDevice {
    /// Frees the buffer `id`; code memory going away makes the next submission invalidate the instruction
    /// cache (new code may be placed where it was).
    pub(crate) fn free_buffer(&mut self, id: u64) {
        if self.memory.free(&mut self.base, id) == Some(Placement::VidmemBar1) {
            self.queue.code_changed();
        }
    }

    /// Free and total video memory, as RM's FB info reports them.
    pub(crate) fn mem_info(&self) -> Result<MemInfo, HalError> {
        let [free_bytes, total_bytes] =
            self.base.rm.fb_info(self.base.subdevice, [sys::fb_info::HEAP_FREE, sys::fb_info::TOTAL_RAM_SIZE])?;
        Ok(MemInfo { free_bytes, total_bytes })
    }
}

impl DeviceMemory for Nvidia {
    unsafe fn alloc(&self, desc: &BufferDesc) -> Result<Allocation, HalError> {
        let mut st = sync::lock(&self.state);
        let open = st.as_mut().ok_or_else(|| HalError::NoDevice("nvidia: device not open".into()))?;
        let (a, placement) = open.memory.alloc(&mut open.base, desc, &self.config())?;
        if placement == Placement::VidmemBar1 {
            // New code memory may sit where freed code was.
            open.queue.code_changed();
        }
        Ok(a)
    }

    unsafe fn free(&self, a: &Allocation) {
        let mut st = sync::lock(&self.state);
        if let Some(open) = st.as_mut() {
            open.free_buffer(a.id);
        }
    }

    unsafe fn mem_info(&self) -> Result<MemInfo, HalError> {
        let st = sync::lock(&self.state);
        st.as_ref().ok_or_else(|| HalError::NoDevice("nvidia: device not open".into()))?.mem_info()
    }

    unsafe fn peek(&self, a: &Allocation, offset: u64, dst: &mut [u8]) -> Result<(), HalError> {
        let st = sync::lock(&self.state);
        let open = st.as_ref().ok_or_else(|| HalError::NoDevice("nvidia: device not open".into()))?;
        let n = open.memory.get(a.id).ok_or_else(|| HalError::NoDevice("nvidia: peek of no allocation".into()))?;
        // What the CPU can read of the GPU side itself: the one set of pages of polled system memory, or a
        // BAR1 view of video memory (code, and data buffers small enough to have one). A data buffer's
        // own CPU view is a separate copy and says nothing of what a kernel wrote.
        let src = match (n.placement, n.bar1) {
            (Placement::SysmemPolled | Placement::VidmemBar1, _) => n.primary.cpu,
            (Placement::VidmemViewed, Some(bar1)) => bar1,
            (Placement::VidmemViewed, None) | (Placement::VidmemOnly, _) => {
                return Err(HalError::Unsupported("nvidia: video memory without a BAR1 view".into()))
            }
        };
        if src.is_null() || offset.checked_add(dst.len() as u64).is_none_or(|end| end > n.primary.bytes) {
            return Err(HalError::Unsupported("nvidia: no CPU mapping of that range".into()));
        }
        for (i, d) in dst.iter_mut().enumerate() {
            // SAFETY: `src` maps all `primary.bytes` of the live allocation (checked against the range
            // above); byte reads because BAR1 reads are uncached and no wider read is needed to sample.
            *d = unsafe { src.add(offset as usize + i).read_volatile() };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::CachePolicy;

    fn desc(bytes: u64, rights: Rights, kind: BufferKind) -> BufferDesc {
        BufferDesc { bytes, rights, cache: CachePolicy::Uncached, kind }
    }

    const RW: Rights = Rights::CPU_READ.union(Rights::CPU_WRITE).union(Rights::GPU_READ).union(Rights::GPU_WRITE);

    #[test]
    fn data_goes_to_vidmem_with_a_cpu_view() {
        let p = plan(&desc(4096, RW, BufferKind::Data));
        assert_eq!(p.placement, Placement::VidmemViewed);
        assert_eq!((p.page, p.bytes, p.low_va), (PAGE, 4096, false));
        // Cached read-only weights are data too.
        let w = BufferDesc {
            cache: CachePolicy::Cached,
            ..desc(1 << 20, Rights::CPU_WRITE | Rights::GPU_READ, BufferKind::Data)
        };
        assert_eq!(plan(&w).placement, Placement::VidmemViewed);
    }

    #[test]
    fn big_vidmem_uses_huge_pages_and_rounds_up() {
        let p = plan(&desc(HUGE_FROM, RW, BufferKind::Data));
        assert_eq!((p.page, p.bytes), (HUGE_PAGE, HUGE_FROM));
        let p = plan(&desc(HUGE_FROM + 1, RW, BufferKind::Data));
        assert_eq!(p.bytes, HUGE_FROM + HUGE_PAGE);
        let p = plan(&desc(HUGE_FROM - PAGE, RW, BufferKind::Data));
        assert_eq!((p.page, p.bytes), (PAGE, HUGE_FROM - PAGE));
        // Polled memory never takes huge pages: it is system memory.
        let p = plan(&desc(64 << 20, RW | Rights::HOST_POLLED, BufferKind::Data));
        assert_eq!((p.placement, p.page), (Placement::SysmemPolled, PAGE));
    }

    #[test]
    fn polled_and_queue_memory_is_sysmem_in_the_low_range() {
        for d in [desc(4096, RW | Rights::HOST_POLLED, BufferKind::Data), desc(8192, RW, BufferKind::Queue)] {
            let p = plan(&d);
            assert_eq!(p.placement, Placement::SysmemPolled, "{d:?}");
            assert!(p.low_va);
        }
    }

    #[test]
    fn code_gets_a_bar1_view_and_gpu_only_buffers_none() {
        let code = desc(4096, Rights::CPU_WRITE | Rights::GPU_READ | Rights::GPU_EXEC, BufferKind::Code);
        let p = plan(&code);
        assert_eq!(p.placement, Placement::VidmemBar1);
        assert!(p.low_va);
        let scratch = desc(4096, Rights::GPU_READ | Rights::GPU_WRITE, BufferKind::Data);
        assert_eq!(plan(&scratch).placement, Placement::VidmemOnly);
    }

    #[test]
    fn va_allocation_aligns_reuses_and_coalesces() {
        let mut r = VaRange::new(0x1000, 0x100_0000);
        let total = r.free_bytes();
        let a = r.alloc(0x3000, 0x1000).unwrap();
        assert_eq!(a, 0x1000);
        let b = r.alloc(0x1000, 0x10_0000).unwrap();
        assert_eq!(b, 0x10_0000, "aligned past the gap");
        let c = r.alloc(0x2000, 0x1000).unwrap();
        assert_eq!(c, 0x4000, "first fit takes the gap below the aligned block");
        assert_eq!(r.free_bytes(), total - 0x6000);
        r.free(a, 0x3000);
        assert_eq!(r.alloc(0x3000, 0x1000), Some(0x1000), "freed space is reused");
        r.free(0x1000, 0x3000);
        r.free(c, 0x2000);
        r.free(b, 0x1000);
        assert_eq!(r.free_bytes(), total);
        assert_eq!(r.free.len(), 1, "every extent coalesced back into one");
        assert_eq!(r.alloc(total, 0x1000), Some(0x1000));
        assert_eq!(r.alloc(0x1000, 0x1000), None, "exhausted");
    }

    /// A viewed buffer of `bytes` on the null machinery: fake video memory, a real anonymous view.
    fn viewed(buffers: &mut Buffers, bytes: u64) -> (u64, *mut u8) {
        let cpu = reserve_view(bytes).unwrap();
        let primary =
            DriverMem { handle: 0, kind: DriverMemKind::Vid, va: 0, bytes, cpu: ptr::null_mut(), low_va: false };
        let view = View { cpu, bytes, registered: None, staged_large_syncs: 0, refused: false };
        let id = buffers.next_id;
        buffers.next_id += 1;
        buffers
            .allocs
            .insert(id, NvAlloc { placement: Placement::VidmemViewed, primary, view: Some(view), bar1: None });
        (id, cpu)
    }

    fn is_mapped(p: *mut u8) -> bool {
        // SAFETY: msync only reports whether the page is mapped; it touches no memory.
        unsafe { libc::msync(p.cast(), PAGE as usize, libc::MS_ASYNC) == 0 }
    }

    #[test]
    fn a_view_reserves_address_space_not_host_memory() {
        // Twice the largest host this runs on: only reserved, never touched, so it costs nothing.
        let bytes = 256u64 << 30;
        let cpu = reserve_view(bytes).expect("a MAP_NORESERVE view of 256 GiB");
        // SAFETY: the view is mapped read-write; these two pages are inside it.
        unsafe {
            assert_eq!(*cpu.add(bytes as usize - 1), 0, "untouched pages read as zeros");
            *cpu.add(123 << 30) = 7;
            assert_eq!(*cpu.add(123 << 30), 7);
            unmap(cpu, bytes);
        }
    }

    #[test]
    fn registration_keeps_to_the_budget_and_a_refused_view_is_not_asked_again() {
        let mut base = Base::null();
        let mut b = Buffers::new();
        let (id, cpu) = viewed(&mut b, 4 * PAGE);
        let free_va = base.va_high.free_bytes();
        assert_eq!(b.register_view(&mut base, id, 3 * PAGE), None, "past the budget: not asked");
        assert_eq!(b.stats.register_refusals, 0);
        // The driver (here /dev/null) refuses: counted once, the VA returned, the view untouched.
        assert_eq!(b.register_view(&mut base, id, 4 * PAGE), None);
        assert_eq!((b.stats.register_refusals, b.stats.pinned_bytes), (1, 0));
        assert_eq!(base.va_high.free_bytes(), free_va);
        assert!(b.get(id).unwrap().view.as_ref().unwrap().refused);
        assert_eq!(b.register_view(&mut base, id, u64::MAX), None);
        assert_eq!(b.stats.register_refusals, 1, "a refused view is not asked again");
        assert!(is_mapped(cpu));
        assert_eq!(b.free(&mut base, id), Some(Placement::VidmemViewed));
        assert!(!is_mapped(cpu), "freeing the buffer unmaps its view");
        assert_eq!(b.free(&mut base, id), None);
    }

    #[test]
    fn freeing_a_registered_view_unpins_it_before_unmapping() {
        let mut base = Base::null();
        let mut b = Buffers::new();
        let (id, cpu) = viewed(&mut b, 2 * PAGE);
        let va = base.va_high.alloc(2 * PAGE, 64 << 10).unwrap();
        let reg =
            DriverMem { handle: 0x1000, kind: DriverMemKind::Registered, va, bytes: 2 * PAGE, cpu, low_va: false };
        b.get_mut(id).unwrap().view.as_mut().unwrap().registered = Some(reg);
        b.stats.pinned_bytes = 2 * PAGE;
        b.stats.registered_views = 1;
        assert_eq!(b.register_view(&mut base, id, 0), Some(va), "registered already: its address, whatever the budget");
        let free_va = base.va_high.free_bytes();
        b.free(&mut base, id);
        assert_eq!((b.stats.pinned_bytes, b.stats.registered_views), (0, 0));
        assert_eq!(base.va_high.free_bytes(), free_va + 2 * PAGE, "the registration's GPU addresses went back");
        assert!(!is_mapped(cpu));
    }
}
