//! Device memory on a discrete GPU: where each kind of buffer lives, its two views, and the GPU virtual
//! address map. The memory service's state is [`Buffers`]; [`Base`] holds the machinery every service
//! allocates its own memory ([`Mem`]) through.
//!
//! | Buffer | GPU side | CPU view (`Allocation::cpu`) |
//! |---|---|---|
//! | data (kernels read and write it) | video memory, GPU-cached, 2 MiB pages from 8 MiB | pinned host staging; syncs move bytes with the copy engine |
//! | code | video memory | write-combined BAR1 (written once, never read) |
//! | queue memory and anything HOST_POLLED | GPU-uncached system memory | the same pages, CPU-cached |
//! | no CPU rights | video memory | none |
//!
//! Data stays GPU-cached even when the contract asks for "uncached": in video memory the L2 is the point
//! of coherence, every GPU access (kernels and the copy engine alike) goes through it, and the CPU never
//! touches video memory directly, so there is nothing for a cache to hide. The CPU-visible sides are
//! exactly the HOST_POLLED/queue pages, and those are GPU-uncached system memory as the contract demands.
//! Reading BAR1 costs about a microsecond per access, so the CPU never reads video memory at all.

use std::collections::{BTreeMap, HashMap};
use std::ptr;

use super::rm::{unmap, MapVia, MemoryClass};
use super::stage::{Records, Stage};
use super::sys::{self, mem_attr};
use super::{Base, Nvidia, Open};
use crate::caps::{BufferDesc, BufferKind, Rights};
use crate::error::HalError;
use crate::memory::{Allocation, DeviceMemory};
use crate::sync;

/// The small page.
pub const PAGE: u64 = 4096;
/// The huge page of video memory.
pub const HUGE_PAGE: u64 = 2 << 20;
/// From this size on, video memory uses huge pages (as tinygrad does; smaller buffers would waste up to
/// 2 MiB each).
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
    /// Video memory for the GPU and pinned host staging as the CPU view: data.
    VidmemStaged,
    /// Video memory with no CPU view.
    VidmemOnly,
}

/// The decision for one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Where it lives.
    pub placement: Placement,
    /// Page size of its GPU side.
    pub page: u64,
    /// Bytes actually allocated (the request rounded to `page`).
    pub bytes: u64,
    /// Whether its GPU address comes from the low (below 2^40) range.
    pub low_va: bool,
}

/// Decides where the buffer `desc` describes lives (the table in the module docs).
pub fn plan(desc: &BufferDesc) -> Plan {
    let cpu = desc.rights.intersects(Rights::CPU_READ | Rights::CPU_WRITE);
    let placement = if desc.kind == BufferKind::Queue || desc.rights.contains(Rights::HOST_POLLED) {
        Placement::SysmemPolled
    } else if !cpu {
        Placement::VidmemOnly
    } else if desc.kind == BufferKind::Code || desc.rights.contains(Rights::GPU_EXEC) {
        Placement::VidmemBar1
    } else {
        Placement::VidmemStaged
    };
    let huge = placement != Placement::SysmemPolled && desc.bytes >= HUGE_FROM;
    let page = if huge { HUGE_PAGE } else { PAGE };
    let low_va = matches!(placement, Placement::SysmemPolled | Placement::VidmemBar1) || desc.kind != BufferKind::Data;
    Plan { placement, page, bytes: desc.bytes.div_ceil(page) * page, low_va }
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

/// What backs a [`Mem`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemKind {
    /// Video memory (class 0x40).
    Vid,
    /// RM-owned system memory (class 0x3e), GPU-uncached.
    Sys,
    /// This process's anonymous pages wrapped as class 0x71 (pinned by the driver).
    Host,
}

/// How a new [`Mem`] is made.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemSpec {
    pub(crate) kind: MemKind,
    pub(crate) bytes: u64,
    pub(crate) page: u64,
    pub(crate) contiguous: bool,
    /// NVOS33 caching flags of a CPU mapping of video or system memory; `None`: no CPU mapping.
    pub(crate) cpu_map: Option<u32>,
    pub(crate) low_va: bool,
}

/// One RM memory object with its GPU mapping and, maybe, a CPU mapping.
#[derive(Debug)]
pub(crate) struct Mem {
    pub(crate) handle: u32,
    pub(crate) kind: MemKind,
    pub(crate) va: u64,
    pub(crate) bytes: u64,
    pub(crate) cpu: *mut u8,
    pub(crate) low_va: bool,
}

/// What releasing a [`Mem`] needs, kept by a stage (`stage.rs`) in case a later step fails while the
/// `Mem` itself has gone on to its owner.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemRecord {
    handle: u32,
    kind: MemKind,
    va: u64,
    bytes: u64,
    cpu: *mut u8,
    low_va: bool,
}

impl Mem {
    /// Its release record.
    pub(crate) fn record(&self) -> MemRecord {
        let Mem { handle, kind, va, bytes, cpu, low_va } = *self;
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
    /// address, then the UVM mapping (the three steps of the fact sheet).
    pub(crate) fn map_gpu(&self, handle: u32, va: u64, len: u64) -> Result<(), HalError> {
        self.uvm.create_external_range(va, len)?;
        let mapped = self
            .rm
            .map_dma(self.device, self.virtmem, handle, len, va)
            .and_then(|()| self.uvm.map_external(self.uuid, self.rm.ctl_fd(), self.rm.client, handle, va, len));
        if mapped.is_err() {
            let _ = self.uvm.free(va, len);
        }
        mapped
    }

    /// Allocates, maps for the GPU and (as asked) maps for the CPU one memory object.
    pub(crate) fn new_mem(&mut self, spec: MemSpec, call: &'static str) -> Result<Mem, HalError> {
        let bytes = spec.bytes.div_ceil(spec.page) * spec.page;
        let align = spec.page.max(64 << 10);
        let va = self.va_range(spec.low_va).alloc(bytes, align).ok_or(HalError::OutOfMemory { bytes })?;
        let mut m = Mem { handle: 0, kind: spec.kind, va: 0, bytes, cpu: ptr::null_mut(), low_va: spec.low_va };
        let made = self.fill_mem(&mut m, spec, va, call);
        if let Err(e) = made {
            self.release_mem_parts(&m.record());
            self.va_range(spec.low_va).free(va, bytes);
            return Err(e);
        }
        Ok(m)
    }

    fn fill_mem(&mut self, m: &mut Mem, spec: MemSpec, va: u64, call: &'static str) -> Result<(), HalError> {
        let bytes = m.bytes;
        match spec.kind {
            MemKind::Vid | MemKind::Sys => {
                let vid = spec.kind == MemKind::Vid;
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
                m.handle = self.rm.alloc_memory(self.device, cls, &mut p, call)?;
                if let Some(caching) = spec.cpu_map {
                    let via = if vid { MapVia::Device(self.minor) } else { MapVia::Ctl };
                    m.cpu = self.rm.map_cpu(self.device, m.handle, bytes, caching, via, call)?;
                }
            }
            MemKind::Host => {
                // SAFETY: a fresh anonymous shared mapping the kernel places; nothing else is mapped over.
                let p = unsafe {
                    libc::mmap(
                        ptr::null_mut(),
                        bytes as usize,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    )
                };
                if p == libc::MAP_FAILED {
                    return Err(HalError::OutOfMemory { bytes });
                }
                m.cpu = p as *mut u8;
                let handle = self.next_os_handle;
                self.next_os_handle += 1;
                // SAFETY: `m.cpu` is the page-aligned mapping of `bytes` just made; it stays mapped until
                // `release_mem_parts` frees the object first and unmaps it after.
                unsafe { self.rm.alloc_os_descriptor(&self.dev, self.device, handle, m.cpu, bytes) }?;
                m.handle = handle;
            }
        }
        self.map_gpu(m.handle, va, bytes)?;
        m.va = va;
        Ok(())
    }

    /// Undoes whatever part of `m` exists: GPU mapping, CPU mapping, RM object, host pages.
    fn release_mem_parts(&self, m: &MemRecord) {
        if m.va != 0 {
            let _ = self.uvm.free(m.va, m.bytes);
        }
        if m.kind != MemKind::Host {
            // SAFETY: an RM CPU mapping of `bytes` this backend made for `m`; its owner is done with it.
            unsafe { unmap(m.cpu, m.bytes) };
        }
        if m.handle != 0 {
            let _ = self.rm.free(self.device, m.handle, "RM_FREE memory");
        }
        if m.kind == MemKind::Host {
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
    pub(crate) fn drop_mem(&mut self, m: Mem) {
        self.release(m.record());
    }
}

/// A buffer as this backend holds it.
pub(crate) struct NvAlloc {
    pub(crate) placement: Placement,
    /// The GPU side (its VA is `Allocation::va`).
    pub(crate) primary: Mem,
    /// The CPU view of a staged data buffer.
    pub(crate) staging: Option<Mem>,
    /// A write-combined BAR1 view of `primary` for small syncs to the GPU.
    pub(crate) bar1: Option<*mut u8>,
}

/// The memory service's state: every buffer handed out, by the id in its [`Allocation`].
pub(crate) struct Buffers {
    allocs: HashMap<u64, NvAlloc>,
    next_id: u64,
}

impl Buffers {
    /// No buffers yet; the first gets id 1.
    pub(crate) fn new() -> Self {
        Buffers { allocs: HashMap::new(), next_id: 1 }
    }

    /// The buffer `id`.
    pub(crate) fn get(&self, id: u64) -> Option<&NvAlloc> {
        self.allocs.get(&id)
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
        bar1_sync_max: u64,
        huge_staging: bool,
    ) -> Result<(Allocation, Placement), HalError> {
        let p = plan(desc);
        let spec =
            |kind, cpu_map, low_va| MemSpec { kind, bytes: p.bytes, page: p.page, contiguous: false, cpu_map, low_va };
        let (primary, staging, bar1) = match p.placement {
            Placement::SysmemPolled => (
                base.new_mem(spec(MemKind::Sys, Some(sys::map_caching::CACHED), true), "allocate polled sysmem")?,
                None,
                None,
            ),
            Placement::VidmemBar1 => {
                let wc = Some(sys::map_caching::WRITE_COMBINED);
                (base.new_mem(spec(MemKind::Vid, wc, p.low_va), "allocate code vidmem")?, None, None)
            }
            Placement::VidmemOnly => (base.new_mem(spec(MemKind::Vid, None, p.low_va), "allocate vidmem")?, None, None),
            Placement::VidmemStaged => {
                // Three parts; a failure releases the ones made before it.
                let mut s = Stage::new(base);
                let vid = s.mem(spec(MemKind::Vid, None, p.low_va), "allocate data vidmem")?;
                let host_spec = MemSpec { page: PAGE, ..spec(MemKind::Host, None, p.low_va) };
                // Large staging as driver-owned system memory in 2 MiB pages when asked (see
                // `NvidiaConfig::huge_staging`); this process's own pages when that is refused.
                let huge = (huge_staging && p.page == HUGE_PAGE).then(|| {
                    let cached = Some(sys::map_caching::CACHED);
                    let sys_spec = MemSpec { page: HUGE_PAGE, ..spec(MemKind::Sys, cached, p.low_va) };
                    s.mem(sys_spec, "allocate staging system memory (2 MiB pages)")
                });
                let staging = match huge.and_then(Result::ok) {
                    Some(staging) => staging,
                    None => s.mem(host_spec, "allocate staging host memory")?,
                };
                let bar1 = if p.bytes <= bar1_sync_max {
                    let wc = sys::map_caching::WRITE_COMBINED;
                    let (device, minor) = (s.base().device, s.base().minor);
                    Some(s.map_cpu(device, vid.handle, vid.bytes, wc, MapVia::Device(minor), "map BAR1 view")?)
                } else {
                    None
                };
                let _ = s.keep();
                (vid, Some(staging), bar1)
            }
        };
        let cpu = staging.as_ref().map_or(primary.cpu, |s| s.cpu);
        let cpu = if desc.rights.intersects(Rights::CPU_READ | Rights::CPU_WRITE) { cpu } else { ptr::null_mut() };
        let id = self.next_id;
        self.next_id += 1;
        let a = Allocation { id, cpu, va: primary.va, bytes: desc.bytes };
        self.allocs.insert(id, NvAlloc { placement: p.placement, primary, staging, bar1 });
        Ok((a, p.placement))
    }

    /// Frees the buffer `id`, and says where it was (`None`: no such buffer).
    pub(crate) fn free(&mut self, base: &mut Base, id: u64) -> Option<Placement> {
        let a = self.allocs.remove(&id)?;
        if let Some(b) = a.bar1 {
            // SAFETY: the BAR1 view made for this buffer; the buffer is being freed.
            unsafe { unmap(b, a.primary.bytes) };
        }
        if let Some(s) = a.staging {
            base.drop_mem(s);
        }
        base.drop_mem(a.primary);
        Some(a.placement)
    }
}

impl Open {
    /// Frees the buffer `id`; code memory going away makes the next submission invalidate the instruction
    /// cache (new code may be placed where it was).
    pub(crate) fn free_buffer(&mut self, id: u64) {
        if self.memory.free(&mut self.base, id) == Some(Placement::VidmemBar1) {
            self.queue.code_changed();
        }
    }
}

impl DeviceMemory for Nvidia {
    unsafe fn alloc(&self, desc: &BufferDesc) -> Result<Allocation, HalError> {
        let mut st = sync::lock(&self.state);
        let open = st.as_mut().ok_or_else(|| HalError::NoDevice("nvidia: device not open".into()))?;
        let c = self.config();
        let (a, placement) = open.memory.alloc(&mut open.base, desc, c.bar1_sync_max, c.huge_staging)?;
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
    fn data_goes_to_vidmem_with_a_staging_view() {
        let p = plan(&desc(4096, RW, BufferKind::Data));
        assert_eq!(p.placement, Placement::VidmemStaged);
        assert_eq!((p.page, p.bytes, p.low_va), (PAGE, 4096, false));
        // Cached read-only weights are data too.
        let w = BufferDesc {
            cache: CachePolicy::Cached,
            ..desc(1 << 20, Rights::CPU_WRITE | Rights::GPU_READ, BufferKind::Data)
        };
        assert_eq!(plan(&w).placement, Placement::VidmemStaged);
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
}
