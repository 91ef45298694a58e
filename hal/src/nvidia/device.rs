//! Device open and close: the object sequence from the root client to a scheduled compute channel
//! (docs/nvidia-bringup.md section 4), and its teardown in reverse.
//!
//! Every step that can fail returns `HalError::Driver` naming the step and carrying the driver's text. A
//! failure part-way releases what was made: CPU and GPU mappings explicitly, RM objects by closing the
//! control fd (the driver frees a client's objects when its fd closes).

use std::collections::HashMap;

use zerocopy::FromZeros;

use super::abi;
use super::channel::{Arena, Channel};
use super::memory::{Mem, MemKind, MemSpec, VaRange, HIGH_VA, HUGE_FROM, HUGE_PAGE, LOW_VA, PAGE};
use super::push::{Push, SUBC_COMPUTE, SUBC_COPY};
use super::queue::{PreparedPool, PREPARED_POOL_BYTES};
use super::rm::{class, unmap, ClassId, CopyClass, GpfifoClass, MapVia, Rm};
use super::sys::{self, gr_info, userd};
use super::uvm::Uvm;
use super::{Base, CopyChannel, GrInfo, Nvidia, NvidiaConfig, Open};
use crate::arch::{self, Arch};
use crate::clock::Clock;
use crate::device::{Device, DeviceInfo};
use crate::error::HalError;
use crate::sync;

/// Driver objects in creation order: (parent, handle, what), freed in reverse at close.
type Objects = Vec<(u32, u32, &'static str)>;

/// Generic-address window of shared memory (tinygrad's choice; clear of every allocation range).
pub(crate) const SHARED_WINDOW: u64 = 0x7294_0000_0000;
/// Generic-address window of local memory.
pub(crate) const LOCAL_WINDOW: u64 = 0x7293_0000_0000;
/// Low VA UVM reserves for its own use per registered channel (tinygrad's size).
const CHANNEL_UVM_RESERVE: u64 = 64 << 20;
/// First command arena (grows when one submission needs more).
const ARENA_BYTES: u64 = 4 << 20;
/// Bytes of the error notifier: NOTIFIERS_MAXCOUNT entries of 16 bytes fit many times over.
const NOTIFIER_BYTES: u64 = 64 << 10;

/// The SLM backing store for `per_thread` bytes of local memory per thread: (bytes per TPC, total).
pub(crate) fn slm_sizes(per_thread: u32, gr: &GrInfo) -> (u64, u64) {
    let per_warp = (per_thread as u64 * 32).next_multiple_of(0x200);
    let per_tpc = (per_warp * gr.max_warps_per_sm as u64 * gr.sm_per_tpc as u64).next_multiple_of(0x8000);
    let total = (per_tpc * gr.tpc_per_gpc as u64 * gr.gpcs as u64).next_multiple_of(0x2_0000);
    (per_tpc, total)
}

/// The architecture from GR's SM_VERSION (0x900 = 9.0), else from the compute classes the device lists.
pub(crate) fn pick_arch(sm_version: u32, classes: &[u32]) -> Option<&'static Arch> {
    arch::for_sm((sm_version >> 8) & 0xff, sm_version & 0xff)
        .or_else(|| classes.iter().find_map(|&c| arch::for_compute_class(c)))
}

/// "0000:c1:00.0 10de:2335".
pub(crate) fn pci_text(c: &sys::CardInfo) -> String {
    format!(
        "{:04x}:{:02x}:{:02x}.{} {:04x}:{:04x}",
        c.pci_domain, c.pci_bus, c.pci_slot, c.pci_function, c.pci_vendor_id, c.pci_device_id
    )
}

fn missing_class(what: &'static str, wanted: &[u32], arch: &Arch) -> HalError {
    let list: Vec<String> = wanted.iter().map(|c| format!("{c:#x}")).collect();
    HalError::Driver {
        call: "GPU_GET_CLASSLIST",
        status: 0x22,
        detail: format!("the device lists no {what} class of {} ({})", arch.name, list.join(" or ")),
    }
}

impl Open {
    /// Runs the whole open sequence.
    pub(crate) fn create(config: &NvidiaConfig, clock: &dyn Clock) -> Result<Box<Open>, HalError> {
        let rm = Rm::open()?;
        // The ioctl structs below are laid out for one driver branch: read the version before any device
        // object exists, and refuse a branch this build does not know.
        let version = rm.driver_version()?;
        let abi = abi::lookup(&version)?;
        let uvm = Uvm::open()?;
        let cards = rm.card_info()?;
        let card = *cards.first().ok_or_else(|| HalError::NoDevice("nvidia: the driver lists no GPU".into()))?;
        let dev = rm.open_dev(card.minor_number)?;
        let id = rm.gpu_id_info(card.gpu_id)?;
        let client = rm.client;

        let mut objects = Vec::new();
        let mut dp = sys::Nv0080Alloc { device_id: id.device_instance, h_client_share: client, ..Default::default() };
        let device = rm.alloc(client, class::DEVICE, &mut dp, "RM_ALLOC device")?;
        objects.push((client, device, "device"));
        let mut sp = sys::Nv2080Alloc::default();
        let subdevice = rm.alloc(device, class::SUBDEVICE, &mut sp, "RM_ALLOC subdevice")?;
        objects.push((device, subdevice, "subdevice"));
        let mut vp = sys::MemoryVirtualAlloc { limit: sys::MEMORY_VIRTUAL_LIMIT, ..Default::default() };
        let virtmem = rm.alloc(device, class::MEMORY_VIRTUAL, &mut vp, "RM_ALLOC virtual memory object")?;
        objects.push((device, virtmem, "virtual memory object"));

        let classes = rm.class_list(device)?;
        let gi = rm.gr_info(
            subdevice,
            &[
                gr_info::SM_VERSION,
                gr_info::MAX_WARPS_PER_SM,
                gr_info::LITTER_NUM_GPCS,
                gr_info::LITTER_NUM_TPC_PER_GPC,
                gr_info::LITTER_NUM_SM_PER_TPC,
                gr_info::SHADER_PIPE_COUNT,
            ],
        )?;
        let gr =
            GrInfo { sm_version: gi[0], max_warps_per_sm: gi[1], gpcs: gi[2], tpc_per_gpc: gi[3], sm_per_tpc: gi[4] };
        let arch = pick_arch(gr.sm_version, &classes).ok_or_else(|| HalError::Driver {
            call: "GR_GET_INFO",
            status: 0,
            detail: format!("SM_VERSION {:#x} is no architecture this build knows", gr.sm_version),
        })?;
        if !classes.contains(&arch.compute_class) {
            return Err(missing_class("compute", &[arch.compute_class], arch));
        }
        let channel_classes: Vec<GpfifoClass> = GpfifoClass::of(arch).filter(|c| classes.contains(&c.id())).collect();
        if channel_classes.is_empty() {
            return Err(missing_class("channel", arch.channel_classes, arch));
        }
        let copy_class =
            CopyClass::listed(arch, &classes).ok_or_else(|| missing_class("copy", arch.copy_classes, arch))?;
        if !classes.contains(&arch.usermode_class) {
            return Err(missing_class("usermode", &[arch.usermode_class], arch));
        }

        // The name and size are reported, not used: a refusal of either leaves a placeholder rather than
        // failing the open.
        let name = rm.gpu_name(subdevice).unwrap_or_else(|_| format!("NVIDIA GPU {:04x}", card.pci_device_id));
        let memory_bytes = rm.fb_total_bytes(subdevice).unwrap_or(0);
        let sm_count = match rm.sm_count(subdevice) {
            Ok(n) if n > 0 => n,
            _ => gi[5] * gr.sm_per_tpc,
        };
        let uuid = rm.gpu_uuid(subdevice)?;
        let info = DeviceInfo {
            name,
            sm_count,
            memory_bytes,
            arch_major: arch.sm.0,
            arch_minor: arch.sm.1,
            driver_version: version,
            pci: pci_text(&card),
        };

        // What libcuda asks for every context: the highest performance state while the client lives. A
        // refusal only costs speed, so it is noted, not fatal.
        let (boost, boost_note) = if config.perf_boost {
            let flags = sys::perf_boost::CMD_BOOST_TO_MAX | sys::perf_boost::CUDA | sys::perf_boost::CUDA_PRIORITY_HIGH;
            match rm.perf_boost(subdevice, flags, sys::perf_boost::DURATION_INFINITE) {
                Ok(()) => (Some(subdevice), "boosted to the highest performance state".to_string()),
                Err(e) => (None, format!("no boost: {e}")),
            }
        } else {
            (None, "no boost (perf_boost off)".to_string())
        };
        let usermode = rm.alloc_bare(subdevice, arch.usermode_class, "RM_ALLOC usermode")?;
        objects.push((subdevice, usermode, "usermode"));
        let mut vs = sys::VaSpaceAlloc {
            flags: config.vaspace_flags,
            va_base: sys::VASPACE_BASE,
            va_size: sys::VASPACE_SIZE,
            ..Default::default()
        };
        let vaspace = rm.alloc(device, class::VASPACE, &mut vs, "RM_ALLOC VA space")?;
        objects.push((device, vaspace, "VA space"));
        uvm.register_gpu(uuid)?;
        uvm.register_gpu_vaspace(uuid, rm.ctl_fd(), client, vaspace)?;

        let doorbell = rm.map_cpu(
            device,
            usermode,
            userd::USERMODE_BYTES,
            0,
            MapVia::Device(card.minor_number),
            "map usermode page",
        )?;
        let base = Base {
            rm,
            uvm,
            dev,
            minor: card.minor_number,
            uuid,
            device,
            virtmem,
            va_low: VaRange::new(LOW_VA.0, LOW_VA.1),
            va_high: VaRange::new(HIGH_VA.0, HIGH_VA.1),
            next_os_handle: 0x1000,
        };
        let mut base = base;
        let mut made: Vec<Mem> = Vec::new();
        let parts = Self::create_channel(
            &mut base,
            &mut made,
            config,
            arch,
            vaspace,
            &channel_classes,
            copy_class,
            &mut objects,
        );
        let (channel, arena, sems, pool) = match parts {
            Ok(p) => p,
            Err(e) => {
                for m in made {
                    base.drop_mem(m);
                }
                // SAFETY: the usermode mapping made above; nothing else uses it.
                unsafe { unmap(doorbell, userd::USERMODE_BYTES) };
                return Err(e);
            }
        };
        // The asynchronous copy engine is an optimisation: without one (or when the driver refuses it)
        // syncs use the compute channel's graphics copy engine, and the reason is kept.
        let (copy, copy_note) = if config.async_copy {
            match Self::create_copy_channel(&mut base, subdevice, config, arch, vaspace, &channel_classes, copy_class) {
                Ok((c, mut objs)) => {
                    let note = format!("asynchronous copy engine {:#x} (NV2080_ENGINE_TYPE)", c.engine_type);
                    objects.append(&mut objs);
                    (Some(c), note)
                }
                Err(e) => (None, format!("graphics copy engine (no asynchronous one: {e})")),
            }
        } else {
            (None, "graphics copy engine (async_copy off)".into())
        };
        let mut open = Box::new(Open {
            base,
            abi,
            arch,
            info,
            gr,
            objects,
            usermode: doorbell,
            channel,
            arena,
            sems,
            sem_value: 0,
            slm: None,
            slm_per_thread: 0,
            allocs: HashMap::new(),
            next_id: 1,
            submissions: 0,
            qmd_cache: HashMap::new(),
            prepared: PreparedPool::new(pool),
            code_dirty: true,
            copy,
            copy_note,
            copy_broken: false,
            boost,
            boost_note,
        });
        if let Err(e) = open.setup(clock, config) {
            open.teardown();
            return Err(e);
        }
        Ok(open)
    }

    /// Channel group, subcontext, GPFIFO area, notifier, channel, engines, token, UVM registration,
    /// schedule; plus the internal semaphore page and the command arena. Every `Mem` made is moved into
    /// `made` first, so the caller can release it on failure; on success they are taken back out.
    #[allow(clippy::too_many_arguments)] // One call site; a struct of these would only rename them.
    fn create_channel(
        base: &mut Base,
        made: &mut Vec<Mem>,
        config: &NvidiaConfig,
        arch: &'static Arch,
        vaspace: u32,
        channel_classes: &[GpfifoClass],
        copy_class: CopyClass,
        objects: &mut Vec<(u32, u32, &'static str)>,
    ) -> Result<(Channel, Arena, Mem, Mem), HalError> {
        let client = base.rm.client;
        let mut gp = sys::ChannelGroupAlloc { engine_type: sys::ENGINE_TYPE_GRAPHICS, ..Default::default() };
        let tsg = base.rm.alloc(base.device, class::CHANNEL_GROUP, &mut gp, "RM_ALLOC channel group")?;
        objects.push((base.device, tsg, "channel group"));
        let mut cs = sys::CtxShareAlloc { h_va_space: vaspace, flags: sys::CTXSHARE_ASYNC, subctx_id: 0 };
        let ctxshare = base.rm.alloc(tsg, class::CONTEXT_SHARE, &mut cs, "RM_ALLOC context share")?;
        objects.push((tsg, ctxshare, "context share"));

        let entries = config.gpfifo_entries.next_power_of_two().max(16);
        let (ring_bytes, area_bytes) = Channel::area_bytes(entries);
        let wc = Some(sys::map_caching::WRITE_COMBINED);
        let spec =
            |kind, bytes, contiguous, cpu_map| MemSpec { kind, bytes, page: PAGE, contiguous, cpu_map, low_va: true };
        made.push(base.new_mem(spec(MemKind::Vid, area_bytes, true, wc), "allocate GPFIFO ring and USERD")?);
        let cached = Some(sys::map_caching::CACHED);
        made.push(base.new_mem(spec(MemKind::Sys, NOTIFIER_BYTES, false, cached), "allocate error notifier")?);
        made.push(base.new_mem(spec(MemKind::Sys, PAGE, false, cached), "allocate internal semaphores")?);
        made.push(base.new_mem(spec(MemKind::Vid, ARENA_BYTES, false, wc), "allocate command arena")?);
        // Huge pages keep a long list's QMDs under few GPU TLB entries; small pages if the driver refuses.
        let pool = MemSpec { page: HUGE_PAGE, ..spec(MemKind::Vid, PREPARED_POOL_BYTES, false, wc) };
        let pool = base.new_mem(pool, "allocate prepared-submission pool").or_else(|_| {
            base.new_mem(spec(MemKind::Vid, PREPARED_POOL_BYTES, false, wc), "allocate prepared-submission pool")
        })?;
        made.push(pool);
        let (gpfifo, notifier, sems) = (&made[0], &made[1], &made[2]);
        // SAFETY: both are fresh CPU mappings of the sizes given; nothing else has them yet. The driver
        // writes the notifier only after the channel exists; the GPU reads USERD only after it exists.
        unsafe {
            std::ptr::write_bytes(notifier.cpu, 0, NOTIFIER_BYTES as usize);
            std::ptr::write_bytes(sems.cpu, 0, PAGE as usize);
            std::ptr::write_bytes(gpfifo.cpu.add(ring_bytes as usize), 0, PAGE as usize);
        }

        let mut cp = sys::ChannelAlloc::new_zeroed();
        cp.h_object_error = notifier.handle;
        cp.h_object_buffer = gpfifo.handle;
        cp.gp_fifo_offset = gpfifo.va;
        cp.gp_fifo_entries = entries;
        cp.h_context_share = ctxshare;
        cp.h_userd_memory[0] = gpfifo.handle;
        cp.userd_offset[0] = ring_bytes;
        // The arch lists its channel classes in order of preference; take the first the driver accepts.
        let mut channel = Err(missing_class("channel", arch.channel_classes, arch));
        for &c in channel_classes {
            channel = base.rm.alloc(tsg, c, &mut cp, "RM_ALLOC GPFIFO channel");
            if channel.is_ok() {
                break;
            }
        }
        let channel = channel?;
        objects.push((tsg, channel, "GPFIFO channel"));
        let compute = base.rm.alloc_bare(channel, arch.compute_class, "RM_ALLOC compute object")?;
        objects.push((channel, compute, "compute object"));
        let copy = base.rm.alloc_bare(channel, copy_class.id(), "RM_ALLOC copy object")?;
        objects.push((channel, copy, "copy object"));
        if config.debugger {
            // Optional: a debugger session bound to the compute object (tinygrad allocates one to read SM
            // error states after a fault). Not needed to run work, so a refusal is not an error.
            let mut dp =
                sys::Nv83deAlloc { h_debugger_client_obsolete: 0, h_app_client: client, h_class_3d_object: compute };
            if let Ok(h) = base.rm.alloc(base.device, class::GT200_DEBUGGER, &mut dp, "RM_ALLOC debugger") {
                objects.push((base.device, h, "debugger"));
            }
        }
        let token = base.rm.work_submit_token(channel)?;
        let reserve = base
            .va_low
            .alloc(CHANNEL_UVM_RESERVE, 2 << 20)
            .ok_or(HalError::OutOfMemory { bytes: CHANNEL_UVM_RESERVE })?;
        base.uvm.register_channel(base.uuid, base.rm.ctl_fd(), client, channel, reserve, CHANNEL_UVM_RESERVE)?;
        base.rm.schedule(tsg)?;

        let pool = made.pop().expect("prepared pool");
        let arena = made.pop().expect("arena");
        let sems = made.pop().expect("semaphores");
        let notifier = made.pop().expect("notifier");
        let gpfifo = made.pop().expect("gpfifo");
        let shadow = vec![0; entries as usize];
        let channel = Channel {
            copy_class: copy_class.id(),
            gpfifo,
            userd_offset: ring_bytes,
            entries,
            put: 0,
            shadow,
            token,
            notifier,
        };
        Ok((channel, Arena { mem: arena, head: 0 }, sems, pool))
    }

    /// A channel group and channel of their own on the first asynchronous (non-graphics) copy engine
    /// that takes one, with a copy object bound: where syncs go. Returns the channel and the objects to
    /// free at close (in creation order). Whatever a failed attempt made is released before the next.
    #[allow(clippy::too_many_arguments)] // One call site, as `create_channel`.
    fn create_copy_channel(
        base: &mut Base,
        subdevice: u32,
        config: &NvidiaConfig,
        arch: &'static Arch,
        vaspace: u32,
        channel_classes: &[GpfifoClass],
        copy_class: CopyClass,
    ) -> Result<(CopyChannel, Objects), HalError> {
        let _ = arch;
        let mut last = HalError::Unsupported("the device lists no asynchronous copy engine".into());
        for i in 0..20 {
            let engine = sys::engine_type_copy(i);
            match base.rm.ce_is_grce(subdevice, engine) {
                Ok(false) => {}
                // A graphics copy engine, or no engine of that number.
                Ok(true) | Err(_) => continue,
            }
            match Self::try_copy_channel(base, config, vaspace, channel_classes, copy_class, engine) {
                Ok(r) => return Ok(r),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn try_copy_channel(
        base: &mut Base,
        config: &NvidiaConfig,
        vaspace: u32,
        channel_classes: &[GpfifoClass],
        copy_class: CopyClass,
        engine: u32,
    ) -> Result<(CopyChannel, Objects), HalError> {
        let entries = config.gpfifo_entries.next_power_of_two().max(16);
        let (ring_bytes, area_bytes) = Channel::area_bytes(entries);
        let spec =
            |kind, bytes, contiguous, cpu_map| MemSpec { kind, bytes, page: PAGE, contiguous, cpu_map, low_va: true };
        let wc = Some(sys::map_caching::WRITE_COMBINED);
        let cached = Some(sys::map_caching::CACHED);
        let gpfifo = base.new_mem(spec(MemKind::Vid, area_bytes, true, wc), "allocate copy GPFIFO ring and USERD")?;
        let notifier = match base.new_mem(spec(MemKind::Sys, NOTIFIER_BYTES, false, cached), "allocate copy notifier") {
            Ok(n) => n,
            Err(e) => {
                base.drop_mem(gpfifo);
                return Err(e);
            }
        };
        // SAFETY: fresh CPU mappings of these sizes; nothing else has them yet.
        unsafe {
            std::ptr::write_bytes(notifier.cpu, 0, NOTIFIER_BYTES as usize);
            std::ptr::write_bytes(gpfifo.cpu.add(ring_bytes as usize), 0, PAGE as usize);
        }
        let mut objects: Vec<(u32, u32, &'static str)> = Vec::new();
        let made = (|| -> Result<(u32, u32), HalError> {
            let mut gp = sys::ChannelGroupAlloc { engine_type: engine, h_va_space: vaspace, ..Default::default() };
            let tsg = base.rm.alloc(base.device, class::CHANNEL_GROUP, &mut gp, "RM_ALLOC copy channel group")?;
            objects.push((base.device, tsg, "copy channel group"));
            let mut cp = sys::ChannelAlloc::new_zeroed();
            cp.h_object_error = notifier.handle;
            cp.h_object_buffer = gpfifo.handle;
            cp.gp_fifo_offset = gpfifo.va;
            cp.gp_fifo_entries = entries;
            cp.h_userd_memory[0] = gpfifo.handle;
            cp.userd_offset[0] = ring_bytes;
            cp.engine_type = engine;
            let mut channel = Err(HalError::Unsupported("no channel class".into()));
            for &c in channel_classes {
                channel = base.rm.alloc(tsg, c, &mut cp, "RM_ALLOC copy GPFIFO channel");
                if channel.is_ok() {
                    break;
                }
            }
            let channel = channel?;
            objects.push((tsg, channel, "copy GPFIFO channel"));
            let mut ca = sys::CopyAlloc { version: 1, engine_type: engine };
            let copy = base.rm.alloc(channel, copy_class, &mut ca, "RM_ALLOC asynchronous copy object")?;
            objects.push((channel, copy, "asynchronous copy object"));
            let token = base.rm.work_submit_token(channel)?;
            let reserve = base
                .va_low
                .alloc(CHANNEL_UVM_RESERVE, 2 << 20)
                .ok_or(HalError::OutOfMemory { bytes: CHANNEL_UVM_RESERVE })?;
            base.uvm.register_channel(
                base.uuid,
                base.rm.ctl_fd(),
                base.rm.client,
                channel,
                reserve,
                CHANNEL_UVM_RESERVE,
            )?;
            if base.rm.schedule(tsg).is_err() {
                base.rm.bind(tsg, engine)?;
                base.rm.schedule(tsg)?;
            }
            Ok((channel, token))
        })();
        match made {
            Ok((_, token)) => {
                let shadow = vec![0; entries as usize];
                let channel = Channel {
                    copy_class: copy_class.id(),
                    gpfifo,
                    userd_offset: ring_bytes,
                    entries,
                    put: 0,
                    shadow,
                    token,
                    notifier,
                };
                Ok((CopyChannel { channel, engine_type: engine }, objects))
            }
            Err(e) => {
                for &(parent, handle, _) in objects.iter().rev() {
                    let _ = base.rm.free(parent, handle, "RM_FREE copy channel object");
                }
                base.drop_mem(notifier);
                base.drop_mem(gpfifo);
                Err(e)
            }
        }
    }

    /// Binds the engines, programs the memory windows and the first SLM backing store, and waits for the
    /// channel to execute it: the first proof that the ring, the doorbell and the semaphores work.
    fn setup(&mut self, clock: &dyn Clock, config: &NvidiaConfig) -> Result<(), HalError> {
        let mut push = Push::new();
        push.set_object(SUBC_COMPUTE, self.arch.compute_class);
        push.set_object(SUBC_COPY, self.channel.copy_class);
        push.windows(SHARED_WINDOW, LOCAL_WINDOW);
        self.ensure_slm(self.arch.stack_headroom, &mut push)?;
        let (va, value) = self.next_wait();
        push.release_after_idle(va, value);
        self.run(&push, value, config.internal_timeout_ms * 1_000_000, clock, "channel setup")?;
        if let Some(copy_class) = self.copy.as_ref().map(|c| c.channel.copy_class) {
            let mut push = Push::new();
            push.set_object(SUBC_COPY, copy_class);
            let (va, value) = self.next_wait();
            push.copy_release(va, value);
            let timeout = config.internal_timeout_ms * 1_000_000;
            let spin = super::channel::INTERNAL_SPIN_NS;
            if let Err(e) = self.run_on(true, &push, value, timeout, spin, clock, "copy channel setup") {
                // Syncs fall back to the graphics copy engine; the channel stays until close.
                self.copy_note = format!("graphics copy engine (the asynchronous one failed its setup: {e})");
                self.copy_broken = true;
            }
        }
        Ok(())
    }

    /// Makes the SLM backing store cover `per_thread` bytes of local memory per thread, adding the
    /// methods that point the channel at a new one to `push`. The old store is freed at once: it is only
    /// ever replaced while no work is in flight, and the new methods precede any further launch.
    pub(crate) fn ensure_slm(&mut self, per_thread: u32, push: &mut Push) -> Result<(), HalError> {
        let per_thread = per_thread.next_multiple_of(32);
        if per_thread <= self.slm_per_thread {
            return Ok(());
        }
        let (per_tpc, total) = slm_sizes(per_thread, &self.gr);
        let page = if total >= HUGE_FROM { HUGE_PAGE } else { PAGE };
        let spec = MemSpec { kind: MemKind::Vid, bytes: total, page, contiguous: false, cpu_map: None, low_va: false };
        let mem = self.base.new_mem(spec, "allocate local memory (SLM)")?;
        push.local_memory(mem.va, per_tpc, 0xff);
        if let Some(old) = self.slm.replace(mem) {
            self.base.drop_mem(old);
        }
        self.slm_per_thread = per_thread;
        Ok(())
    }

    /// Frees everything, in reverse order of creation, and collects what the driver refused.
    ///
    /// Order: buffers, then the channel's engines and the channel itself (it references the ring, the
    /// notifier and the SLM store), then the memory it used, then UVM (closing its fds drops the VA-space
    /// and channel registrations), then the remaining objects; closing the control fd frees the client.
    pub(crate) fn teardown(mut self: Box<Self>) -> Vec<String> {
        let mut errors = Vec::new();
        if let Some(subdevice) = self.boost.take() {
            if let Err(e) = self.base.rm.perf_boost(subdevice, sys::perf_boost::CMD_CLEAR, 0) {
                errors.push(format!("clear performance boost: {e}"));
            }
        }
        let ids: Vec<u64> = self.allocs.keys().copied().collect();
        for id in ids {
            self.free_buffer(id);
        }
        let channel_objects = [
            "asynchronous copy object",
            "copy GPFIFO channel",
            "debugger",
            "copy object",
            "compute object",
            "GPFIFO channel",
        ];
        let mut rest = Vec::new();
        for &(parent, handle, what) in self.objects.iter().rev() {
            if channel_objects.contains(&what) {
                if let Err(e) = self.base.rm.free(parent, handle, "RM_FREE channel object") {
                    errors.push(format!("{what}: {e}"));
                }
            } else {
                rest.push((parent, handle, what));
            }
        }
        let Open { mut base, channel, arena, sems, slm, usermode, prepared, copy, .. } = *self;
        let (copy_ring, copy_notifier) = copy.map(|c| (c.channel.gpfifo, c.channel.notifier)).unzip();
        let parts = [
            Some(channel.gpfifo),
            Some(channel.notifier),
            copy_ring,
            copy_notifier,
            Some(arena.mem),
            Some(sems),
            Some(prepared.mem),
            slm,
        ];
        for m in parts.into_iter().flatten() {
            base.drop_mem(m);
        }
        // SAFETY: the usermode mapping made at open; the channel that used it is gone.
        unsafe { unmap(usermode, userd::USERMODE_BYTES) };
        let Base { rm, uvm, dev, .. } = base;
        drop(uvm);
        for (parent, handle, what) in rest {
            if let Err(e) = rm.free(parent, handle, "RM_FREE object") {
                errors.push(format!("{what}: {e}"));
            }
        }
        drop(dev);
        drop(rm);
        errors
    }
}

impl Device for Nvidia {
    unsafe fn open(&self) -> Result<DeviceInfo, HalError> {
        let mut st = sync::lock(&self.state);
        if st.is_some() {
            return Err(HalError::Driver { call: "open", status: 0, detail: "nvidia: device already open".into() });
        }
        let open = Open::create(&self.config(), &self.clock)?;
        let info = open.info.clone();
        *st = Some(open);
        Ok(info)
    }

    unsafe fn close(&self) {
        let open = sync::lock(&self.state).take();
        if let Some(open) = open {
            let errors = open.teardown();
            *sync::lock(&self.close_errors) = errors;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200() -> GrInfo {
        GrInfo { sm_version: 0x900, max_warps_per_sm: 64, gpcs: 8, tpc_per_gpc: 9, sm_per_tpc: 2 }
    }

    #[test]
    fn slm_sizing_follows_the_fact_sheet_formula() {
        // 0x240 bytes per thread: 0x4800 per warp, x 64 warps x 2 SMs = 0x240000 per TPC, x 72 TPCs.
        let (per_tpc, total) = slm_sizes(0x240, &h200());
        assert_eq!(per_tpc, 0x24_0000);
        assert_eq!(total, 0x24_0000 * 72);
        // Rounding: 0x250 bytes -> 0x4a00 per warp -> 0x250000 per TPC (already a multiple of 0x8000).
        let (per_tpc, total) = slm_sizes(0x250, &h200());
        assert_eq!(per_tpc, 0x25_0000);
        assert_eq!(total % 0x2_0000, 0);
    }

    #[test]
    fn architecture_comes_from_the_sm_version_or_the_class_list() {
        assert_eq!(pick_arch(0x900, &[]).map(|a| a.name), Some("hopper"));
        assert_eq!(pick_arch(0x777, &[0xc8b5, 0xcbc0]).map(|a| a.name), Some("hopper"));
        assert!(pick_arch(0x777, &[0xc6c0]).is_none());
    }

    #[test]
    fn pci_text_is_domain_bus_slot_function_and_ids() {
        let c = sys::CardInfo {
            pci_domain: 0,
            pci_bus: 0xc1,
            pci_slot: 0,
            pci_function: 0,
            pci_vendor_id: 0x10de,
            pci_device_id: 0x2335,
            ..Default::default()
        };
        assert_eq!(pci_text(&c), "0000:c1:00.0 10de:2335");
    }
}
