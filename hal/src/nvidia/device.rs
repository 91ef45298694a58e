//! Device open and close: the object sequence from the root client to a scheduled compute channel
//! (docs/nvidia-bringup.md section 4), and its teardown.
//!
//! [`OpenDevice::create`] reads as the list of steps: connect to the driver, make the device objects, find out
//! what the device is, ask for the performance boost, make the address space, then the compute channel
//! and (optionally) a copy channel, and assemble the services. Every step that can fail returns
//! `HalError::Driver` naming the call and carrying the driver's text, and every step makes what it makes
//! through a stage (`stage.rs`): a failure at any step releases exactly what the steps before it made, in
//! reverse order, before the driver's files close. The first submission ([`OpenDevice::setup`]) then runs on the
//! assembled device; if it fails, the device is closed as `close` closes it.

use zerocopy::FromZeros;

use super::abi::{self, DriverAbi};
use super::channel::{Channel, Channels, CopyChannel, Target, Wait, INTERNAL_SPIN_NS};
use super::fault::FaultWatch;
use super::ioctl::{DriverFd, GpuFile};
use super::memory::{Buffers, DriverMem, DriverMemKind, DriverMemSpec, VaRange, HIGH_VA, HUGE_PAGE, LOW_VA, PAGE};
use super::push::{Push, SUBC_COMPUTE, SUBC_COPY};
use super::queue::{Queue, PREPARED_POOL_BYTES};
use super::rm::{class, unmap, ClassId, CopyClass, GpfifoClass, MapVia, Rm};
use super::stage::{rm_object, Named, Object, Records, RmStage, Stage};
use super::sys::{self, gr_info, userd};
use super::uvm::Uvm;
use super::visibility::Syncs;
use super::{Base, Boost, GrInfo, Nvidia, NvidiaConfig, OpenDevice};
use crate::arch::{self, Arch};
use crate::clock::Clock;
use crate::device::{run_stop, Device, DeviceInfo, StopFailure, StopLog, StopSteps, Stopped};
use crate::error::HalError;
use crate::sync;

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
/// Copy engines asked about when looking for an asynchronous one.
const COPY_ENGINES: u32 = 20;

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

/// Memory of the backend's own: small pages in the low VA range (below 2^40, where QMDs and pushbuffers
/// must be), CPU-mapped with `caching`.
fn own_spec(kind: DriverMemKind, bytes: u64, contiguous: bool, caching: u32) -> DriverMemSpec {
    DriverMemSpec { kind, bytes, page: PAGE, contiguous, cpu_map: Some(caching), low_va: true }
}

/// Step 1: the driver's files, and what the driver says before any device object exists.
struct Connection {
    rm: Rm,
    uvm: Uvm,
    /// The GPU's `/dev/nvidiaN`, registered with the control fd.
    dev: DriverFd<GpuFile>,
    card: sys::CardInfo,
    /// GPU_GET_ID_INFO_V2's device instance of the card.
    device_instance: u32,
    version: String,
    abi: &'static DriverAbi,
}

impl Connection {
    /// The control fd and root client, the driver's version (looked up in the ABI table: the ioctl
    /// structs are laid out for one driver branch, and a branch this build does not know is refused before
    /// anything else is asked), UVM, and the first GPU's file and ids.
    fn open() -> Result<Connection, HalError> {
        let rm = Rm::open()?;
        let version = rm.driver_version()?;
        let abi = abi::lookup(&version)?;
        let uvm = Uvm::open()?;
        let cards = rm.card_info()?;
        let card = *cards.first().ok_or_else(|| HalError::NoDevice("nvidia: the driver lists no GPU".into()))?;
        let dev = rm.open_dev(card.minor_number)?;
        let id = rm.gpu_id_info(card.gpu_id)?;
        Ok(Connection { rm, uvm, dev, card, device_instance: id.device_instance, version, abi })
    }
}

/// Step 2: the device, its subdevice and the virtual-memory object every GPU mapping goes through.
#[derive(Clone, Copy, Debug)]
struct DeviceObjects {
    device: u32,
    subdevice: u32,
    virtmem: u32,
}

impl DeviceObjects {
    fn create(s: &mut RmStage<'_>, conn: &Connection) -> Result<DeviceObjects, HalError> {
        let client = conn.rm.client;
        let mut dp = sys::Nv0080Alloc { device_id: conn.device_instance, h_client_share: client, ..Default::default() };
        let device = s.alloc(client, class::DEVICE, &mut dp, rm_object!("device"))?;
        let mut sp = sys::Nv2080Alloc::default();
        let subdevice = s.alloc(device, class::SUBDEVICE, &mut sp, rm_object!("subdevice"))?;
        let mut vp = sys::MemoryVirtualAlloc { limit: sys::MEMORY_VIRTUAL_LIMIT, ..Default::default() };
        let virtmem = s.alloc(device, class::MEMORY_VIRTUAL, &mut vp, rm_object!("virtual memory object"))?;
        Ok(DeviceObjects { device, subdevice, virtmem })
    }
}

/// Step 3: what the device is — its architecture and the classes of it the device lists, its GR figures,
/// what is reported about it, and its UUID.
struct Identity {
    arch: &'static Arch,
    gr: GrInfo,
    /// The arch's channel classes the device lists, in the arch's order of preference.
    channel_classes: Vec<GpfifoClass>,
    copy_class: CopyClass,
    info: DeviceInfo,
    uuid: [u8; 16],
}

impl Identity {
    fn query(rm: &Rm, conn: &Connection, dev: &DeviceObjects) -> Result<Identity, HalError> {
        let classes = rm.class_list(dev.device)?;
        let gi = rm.gr_info(
            dev.subdevice,
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
        let card = &conn.card;
        let name = rm.gpu_name(dev.subdevice).unwrap_or_else(|_| format!("NVIDIA GPU {:04x}", card.pci_device_id));
        let memory_bytes = rm.fb_total_bytes(dev.subdevice).unwrap_or(0);
        let sm_count = match rm.sm_count(dev.subdevice) {
            Ok(n) if n > 0 => n,
            _ => gi[5] * gr.sm_per_tpc,
        };
        let uuid = rm.gpu_uuid(dev.subdevice)?;
        let info = DeviceInfo {
            name,
            sm_count,
            memory_bytes,
            arch_major: arch.sm.0,
            arch_minor: arch.sm.1,
            driver_version: conn.version.clone(),
            pci: pci_text(card),
        };
        Ok(Identity { arch, gr, channel_classes, copy_class, info, uuid })
    }
}

impl Boost {
    /// Step 4: what libcuda asks for every context, the highest performance state while the client lives.
    /// A refusal only costs speed, so it is noted, not fatal.
    fn ask(s: &mut RmStage<'_>, subdevice: u32, config: &NvidiaConfig) -> Boost {
        if !config.perf_boost {
            return Boost { subdevice: None, note: "no boost (perf_boost off)".to_string() };
        }
        let flags = sys::perf_boost::CMD_BOOST_TO_MAX | sys::perf_boost::CUDA | sys::perf_boost::CUDA_PRIORITY_HIGH;
        match s.boost(subdevice, flags, sys::perf_boost::DURATION_INFINITE) {
            Ok(()) => {
                Boost { subdevice: Some(subdevice), note: "boosted to the highest performance state".to_string() }
            }
            Err(e) => Boost { subdevice: None, note: format!("no boost: {e}") },
        }
    }
}

/// Step 5: the usermode (doorbell) page and the GPU VA space, handed to UVM.
struct AddressSpace {
    vaspace: u32,
    /// The usermode page, mapped.
    doorbell: *mut u8,
}

impl AddressSpace {
    fn create(
        s: &mut RmStage<'_>,
        conn: &Connection,
        dev: &DeviceObjects,
        id: &Identity,
        config: &NvidiaConfig,
    ) -> Result<AddressSpace, HalError> {
        let usermode = s.alloc_bare(dev.subdevice, id.arch.usermode_class, rm_object!("usermode"))?;
        let mut vs = sys::VaSpaceAlloc {
            flags: config.vaspace_flags,
            va_base: sys::VASPACE_BASE,
            va_size: sys::VASPACE_SIZE,
            ..Default::default()
        };
        let vaspace = s.alloc(dev.device, class::VASPACE, &mut vs, rm_object!("VA space"))?;
        conn.uvm.register_gpu(id.uuid)?;
        conn.uvm.register_gpu_vaspace(id.uuid, conn.rm.ctl_fd(), conn.rm.client, vaspace)?;
        let doorbell = s.map_cpu(
            dev.device,
            usermode,
            userd::USERMODE_BYTES,
            0,
            MapVia::Device(conn.card.minor_number),
            "map usermode page",
        )?;
        Ok(AddressSpace { vaspace, doorbell })
    }
}

/// A channel's ring memory, zeroed where the GPU or the driver reads it first: the GPFIFO area (ring,
/// then a page of USERD) and the error notifier.
struct RingMemory {
    gpfifo: DriverMem,
    notifier: DriverMem,
    entries: u32,
    /// Bytes of the ring (USERD starts here).
    ring_bytes: u64,
}

impl RingMemory {
    /// `names`: the steps allocating the GPFIFO area and the notifier, for errors.
    fn alloc(s: &mut Stage<'_>, config: &NvidiaConfig, names: [&'static str; 2]) -> Result<RingMemory, HalError> {
        let entries = config.gpfifo_entries.next_power_of_two().max(16);
        let (ring_bytes, area_bytes) = Channel::area_bytes(entries);
        let wc = sys::map_caching::WRITE_COMBINED;
        let gpfifo = s.mem(own_spec(DriverMemKind::Vid, area_bytes, true, wc), names[0])?;
        let cached = sys::map_caching::CACHED;
        let notifier = s.mem(own_spec(DriverMemKind::Sys, NOTIFIER_BYTES, false, cached), names[1])?;
        // SAFETY: both are fresh CPU mappings of the sizes given; nothing else has them yet. The driver
        // writes the notifier only after the channel exists; the GPU reads USERD only after it exists.
        unsafe {
            std::ptr::write_bytes(notifier.cpu, 0, NOTIFIER_BYTES as usize);
            std::ptr::write_bytes(gpfifo.cpu.add(ring_bytes as usize), 0, PAGE as usize);
        }
        Ok(RingMemory { gpfifo, notifier, entries, ring_bytes })
    }

    /// The channel's allocation parameters for this ring: notifier, GPFIFO area, ring and USERD.
    fn channel_params(&self) -> sys::ChannelAlloc {
        let mut cp = sys::ChannelAlloc::new_zeroed();
        cp.h_object_error = self.notifier.handle;
        cp.h_object_buffer = self.gpfifo.handle;
        cp.gp_fifo_offset = self.gpfifo.va;
        cp.gp_fifo_entries = self.entries;
        cp.h_userd_memory[0] = self.gpfifo.handle;
        cp.userd_offset[0] = self.ring_bytes;
        cp
    }

    fn into_channel(self, copy_class: CopyClass, token: u32) -> Channel {
        Channel::new(self.gpfifo, self.ring_bytes, self.entries, self.notifier, copy_class.id(), token)
    }
}

/// The GPFIFO channel under `tsg`, of the first of `classes` the driver accepts (the arch lists them in
/// order of preference); `none` when there is no class to try.
fn channel_object(
    s: &mut Stage<'_>,
    tsg: u32,
    params: &mut sys::ChannelAlloc,
    classes: &[GpfifoClass],
    none: impl FnOnce() -> HalError,
    name: Named,
) -> Result<u32, HalError> {
    let mut channel = Err(none());
    for &c in classes {
        channel = s.alloc(tsg, c, params, name);
        if channel.is_ok() {
            break;
        }
    }
    channel
}

/// The last steps of a channel: its work-submit token, its registration with UVM (with low VA reserved
/// for UVM's own mappings), and its group put on the runlist — bound to `bind_engine` first if scheduling
/// alone is refused. Returns the token.
fn register_and_schedule(s: &mut Stage<'_>, tsg: u32, channel: u32, bind_engine: Option<u32>) -> Result<u32, HalError> {
    let base = s.base();
    let token = base.rm.work_submit_token(channel)?;
    let reserve =
        base.va_low.alloc(CHANNEL_UVM_RESERVE, 2 << 20).ok_or(HalError::OutOfMemory { bytes: CHANNEL_UVM_RESERVE })?;
    base.uvm.register_channel(base.uuid, base.rm.ctl_fd(), base.rm.client, channel, reserve, CHANNEL_UVM_RESERVE)?;
    match bind_engine {
        None => base.rm.schedule(tsg)?,
        Some(engine) => {
            if base.rm.schedule(tsg).is_err() {
                base.rm.bind(tsg, engine)?;
                base.rm.schedule(tsg)?;
            }
        }
    }
    Ok(token)
}

/// Step 6: the compute channel and the memory the backend itself runs on.
struct ComputeChannel {
    channel: Channel,
    /// The internal semaphore page (zeroed).
    sems: DriverMem,
    arena: DriverMem,
    /// The prepared-submission pool.
    pool: DriverMem,
}

impl ComputeChannel {
    /// Channel group (graphics runlist), subcontext, GPFIFO ring and notifier, internal semaphores, command
    /// arena and prepared-submission pool, the channel, the compute and copy engines on it (and, when asked,
    /// a debugger bound to compute), then its token, UVM registration and schedule.
    fn create(s: &mut Stage<'_>, config: &NvidiaConfig, id: &Identity, vaspace: u32) -> Result<Self, HalError> {
        let (client, device) = (s.rm().client, s.base().device);
        let mut gp = sys::ChannelGroupAlloc { engine_type: sys::ENGINE_TYPE_GRAPHICS, ..Default::default() };
        let tsg = s.alloc(device, class::CHANNEL_GROUP, &mut gp, rm_object!("channel group"))?;
        let mut cs = sys::CtxShareAlloc { h_va_space: vaspace, flags: sys::CTXSHARE_ASYNC, subctx_id: 0 };
        let ctxshare = s.alloc(tsg, class::CONTEXT_SHARE, &mut cs, rm_object!("context share"))?;

        let ring = RingMemory::alloc(s, config, ["allocate GPFIFO ring and USERD", "allocate error notifier"])?;
        let cached = sys::map_caching::CACHED;
        let sems = s.mem(own_spec(DriverMemKind::Sys, PAGE, false, cached), "allocate internal semaphores")?;
        // SAFETY: a fresh CPU mapping of one page; nothing else has it yet.
        unsafe { std::ptr::write_bytes(sems.cpu, 0, PAGE as usize) };
        let wc = sys::map_caching::WRITE_COMBINED;
        let arena = s.mem(own_spec(DriverMemKind::Vid, ARENA_BYTES, false, wc), "allocate command arena")?;
        // Huge pages keep a long list's QMDs under few GPU TLB entries; small pages if the driver refuses.
        let small_pool = own_spec(DriverMemKind::Vid, PREPARED_POOL_BYTES, false, wc);
        let pool = s
            .mem(DriverMemSpec { page: HUGE_PAGE, ..small_pool }, "allocate prepared-submission pool")
            .or_else(|_| s.mem(small_pool, "allocate prepared-submission pool"))?;

        let mut cp = ring.channel_params();
        cp.h_context_share = ctxshare;
        let none = || missing_class("channel", id.arch.channel_classes, id.arch);
        let channel = channel_object(s, tsg, &mut cp, &id.channel_classes, none, rm_object!("GPFIFO channel"))?;
        let compute = s.alloc_bare(channel, id.arch.compute_class, rm_object!("compute object"))?;
        s.alloc_bare(channel, id.copy_class.id(), rm_object!("copy object"))?;
        if config.debugger {
            // Optional: a debugger session bound to the compute object (tinygrad allocates one to read SM
            // error states after a fault). Not needed to run work, so a refusal is not an error.
            let mut dp =
                sys::Nv83deAlloc { h_debugger_client_obsolete: 0, h_app_client: client, h_class_3d_object: compute };
            let _ = s.alloc(device, class::GT200_DEBUGGER, &mut dp, rm_object!("debugger"));
        }
        let token = register_and_schedule(s, tsg, channel, None)?;
        Ok(ComputeChannel { channel: ring.into_channel(id.copy_class, token), sems, arena, pool })
    }
}

impl CopyChannel {
    /// Step 7 (with `async_copy`): a channel group and channel of their own on the first asynchronous
    /// (non-graphics) copy engine that takes one, with a copy object bound: where syncs go. The
    /// asynchronous copy engine is an optimisation, so without one, or when the driver refuses it, syncs use
    /// the compute channel's graphics copy engine; the note says which and why. Whatever a failed attempt
    /// made is released before the next.
    fn find(
        s: &mut Stage<'_>,
        subdevice: u32,
        config: &NvidiaConfig,
        id: &Identity,
        vaspace: u32,
    ) -> (Option<CopyChannel>, String) {
        if !config.async_copy {
            return (None, "graphics copy engine (async_copy off)".into());
        }
        let mut last = HalError::Unsupported("the device lists no asynchronous copy engine".into());
        for i in 0..COPY_ENGINES {
            let engine = sys::engine_type_copy(i);
            match s.rm().ce_is_grce(subdevice, engine) {
                Ok(false) => {}
                // A graphics copy engine, or no engine of that number.
                Ok(true) | Err(_) => continue,
            }
            let mut attempt = s.nested();
            match Self::create(&mut attempt, config, id, vaspace, engine) {
                Ok(c) => {
                    let kept = attempt.keep_nested();
                    s.adopt(kept);
                    let note = format!("asynchronous copy engine {:#x} (NV2080_ENGINE_TYPE)", c.engine_type);
                    return (Some(c), note);
                }
                Err(e) => last = e,
            }
        }
        (None, format!("graphics copy engine (no asynchronous one: {last})"))
    }

    /// One attempt of [`CopyChannel::find`] on copy engine `engine`.
    fn create(
        s: &mut Stage<'_>,
        config: &NvidiaConfig,
        id: &Identity,
        vaspace: u32,
        engine: u32,
    ) -> Result<CopyChannel, HalError> {
        let ring = RingMemory::alloc(s, config, ["allocate copy GPFIFO ring and USERD", "allocate copy notifier"])?;
        let device = s.base().device;
        let mut gp = sys::ChannelGroupAlloc { engine_type: engine, h_va_space: vaspace, ..Default::default() };
        let tsg = s.alloc(device, class::CHANNEL_GROUP, &mut gp, rm_object!("copy channel group"))?;
        let mut cp = ring.channel_params();
        cp.engine_type = engine;
        let none = || HalError::Unsupported("no channel class".into());
        let channel = channel_object(s, tsg, &mut cp, &id.channel_classes, none, rm_object!("copy GPFIFO channel"))?;
        let mut ca = sys::CopyAlloc { version: 1, engine_type: engine };
        s.alloc(channel, id.copy_class, &mut ca, rm_object!("asynchronous copy object"))?;
        let token = register_and_schedule(s, tsg, channel, Some(engine))?;
        Ok(CopyChannel { channel: ring.into_channel(id.copy_class, token), engine_type: engine })
    }
}

impl Base {
    /// The memory machinery on `conn`'s files, once the device objects it names exist.
    fn new(conn: Connection, dev: &DeviceObjects, uuid: [u8; 16]) -> Base {
        Base {
            rm: conn.rm,
            uvm: conn.uvm,
            dev: conn.dev,
            minor: conn.card.minor_number,
            uuid,
            device: dev.device,
            subdevice: dev.subdevice,
            virtmem: dev.virtmem,
            va_low: VaRange::new(LOW_VA.0, LOW_VA.1),
            va_high: VaRange::new(HIGH_VA.0, HIGH_VA.1),
            next_os_handle: 0x1000,
        }
    }
}

/// The RM objects close frees first, in reverse order, before the memory they use: the channels' engines
/// and the channels (they reference the rings, the notifiers and the SLM store).
const CHANNEL_OBJECTS: [&str; 6] =
    ["asynchronous copy object", "copy GPFIFO channel", "debugger", "copy object", "compute object", "GPFIFO channel"];

/// What a recovery's stop frees: the channels' objects, then their groups and the subcontext (every
/// object of a channel group, so RM has nothing of this process's left to schedule).
const STOP_OBJECTS: [&str; 9] = [
    "asynchronous copy object",
    "copy GPFIFO channel",
    "copy channel group",
    "debugger",
    "copy object",
    "compute object",
    "GPFIFO channel",
    "context share",
    "channel group",
];

/// The channels a recovery's stop stops before freeing anything, by the name the open gave them.
const STOPPED_CHANNELS: [&str; 2] = ["GPFIFO channel", "copy GPFIFO channel"];

/// The channel groups of [`STOPPED_CHANNELS`], by the name the open gave them.
const STOPPED_GROUPS: [&str; 2] = ["channel group", "copy channel group"];

/// How long the preempt before a fallback free waits for the group to come off its engine. A preempt
/// that can happen takes microseconds; one that cannot (a kernel that never ends, with nothing to switch
/// it out at) will not happen later either, and the free after it deals with that: so not long.
const PREEMPT_TIMEOUT_US: u32 = 100_000;

/// Step names of a recovery's stop, as [`Stopped`] and [`StopFailure`] report them.
mod step {
    pub(super) const STOP_CHANNEL: &str = "NVA06F_CTRL_CMD_STOP_CHANNEL";
    pub(super) const DISABLE_SCHEDULING: &str = "NV2080_CTRL_CMD_FIFO_DISABLE_CHANNELS (scheduling only)";
    pub(super) const PREEMPT_GROUP: &str = "NVA06C_CTRL_CMD_PREEMPT";
    pub(super) const FREE_GROUP: &str = "RM_FREE channel group";
    pub(super) const CHANNEL_GONE: &str = "freed channel handle refused by RM";
}

/// RM's answers to a control on a handle it no longer has (resserv's rs_client.c / rs_server.c): the
/// proof that a freed channel is gone.
const GONE: [u32; 3] =
    [0x31 /* INVALID_OBJECT */, 0x33 /* INVALID_OBJECT_HANDLE */, 0x57 /* OBJECT_NOT_FOUND */];

/// A recovery's stop on the GPU, in [`run_stop`]'s order. Which control does what, and why this order:
///
/// 1. `NVA06F_CTRL_CMD_STOP_CHANNEL` (bImmediate) on each channel: RM's own stop — disable, preempt off
///    the engine (RC when the preempt fails), off the runlist, Xid 45 in the notifier. The cleanest when
///    it works, so it goes first. On the H200 it answered NV_ERR_TIMEOUT for a channel spinning a kernel
///    (docs/perf/2026-12-02-gemm-epilogue-cluster.md): the preempt never completed and RM gave up without
///    the RC, so the work was still running.
/// 2. After that refusal only, `NV2080_CTRL_CMD_FIFO_DISABLE_CHANNELS` with bOnlyDisableScheduling: no
///    channel of ours can be scheduled again, and it waits for no preempt, so a kernel that never ends
///    cannot make it time out. First, so that nothing the steps below take off the engine comes back.
/// 3. `NVA06C_CTRL_CMD_PREEMPT` (bWait, 100 ms) on each group: the hardware preempts groups, not
///    channels, so this is the group-level second chance at a clean preempt before the free.
/// 4. `RM_FREE` of every object of each group, the groups last: what must work. RM's free of a channel
///    and its group (kchannelDestruct / kchangrpapiDestruct, done by GSP-RM) disables and preempts the
///    group and, when the preempt fails, resets the engine context (RC), then releases the hardware
///    channel: nothing of this process's is left to run. After each channel's free, a control on its
///    handle must be refused as unknown (`GONE`): the object is gone, not only said to be. That is CPU-RM's
///    word only: kchannelDestruct (OGKM kernel_channel.c) drops the status of its free RPC to GSP-RM, so
///    an RM_FREE returns OK whatever GSP-RM's teardown did. The session's heartbeat is what proves the
///    engine stopped.
///
/// Steps 1 to 3 are NON_PRIVILEGED controls a user client may make on its own objects (OGKM 580.105.08 and
/// 595.45.04 export tables: STOP_CHANNEL 0x10008, FIFO_DISABLE_CHANNELS 0x10108, PREEMPT 0x10248); the
/// refusals of 2 and 3 are reported in [`Stopped::refused`] and do not end the stop, since step 4 does
/// not need them. What UVM follows its own STOP_CHANNEL with, NV2080_CTRL_CMD_GPU_EVICT_CTX
/// (nv_gpu_ops.c), is kernel-privileged (flags 0x1c240) and so not a step here. The session's heartbeat
/// then checks the whole chain against memory.
impl StopSteps for OpenDevice {
    fn stop_channels(&mut self, log: &mut StopLog) -> Result<Option<&'static str>, StopFailure> {
        // No more doorbells from here, whatever happens below: a channel may already be off its runlist.
        self.channels.stopped = true;
        let channels = self.live(&STOPPED_CHANNELS);
        for &c in &channels {
            self.base.rm.stop_channel(c).map_err(|e| StopFailure::new(step::STOP_CHANNEL, e))?;
            log.steps.push(step::STOP_CHANNEL);
        }
        Ok((!channels.is_empty()).then_some(step::STOP_CHANNEL))
    }

    fn quiesce(&mut self, log: &mut StopLog) {
        let channels = self.live(&STOPPED_CHANNELS);
        let mut note = |what, r: Result<(), HalError>| match r {
            Ok(()) => log.steps.push(what),
            Err(e) => log.refused.push(StopFailure::new(what, e)),
        };
        if !channels.is_empty() {
            note(step::DISABLE_SCHEDULING, self.base.rm.disable_scheduling(self.base.subdevice, &channels));
        }
        for g in self.live(&STOPPED_GROUPS) {
            note(step::PREEMPT_GROUP, self.base.rm.preempt_group(g, PREEMPT_TIMEOUT_US));
        }
    }

    fn free_channels(&mut self, log: &mut StopLog) -> Result<&'static str, StopFailure> {
        while let Some(i) = self.objects.iter().rposition(|o| STOP_OBJECTS.contains(&o.what)) {
            let o = self.objects[i];
            let step = if STOPPED_GROUPS.contains(&o.what) { step::FREE_GROUP } else { o.what };
            self.base.rm.free(o.parent, o.handle, "RM_FREE channel object").map_err(|e| StopFailure::new(step, e))?;
            log.steps.push(o.what);
            if STOPPED_CHANNELS.contains(&o.what) {
                // Kept listed until proved gone: a retry frees it again rather than trusting this free.
                self.channel_gone(o.handle)?;
                log.steps.push(step::CHANNEL_GONE);
            }
            // Freed: close must not free it again.
            self.objects.remove(i);
        }
        Ok(step::FREE_GROUP)
    }

    fn channel(&self) -> String {
        // RM writes ROBUST_CHANNEL_PREEMPTIVE_REMOVAL (45) here when the stop went through; an earlier
        // channel error (an MMU fault's 31) stays.
        match self.channels.compute.error() {
            Some(n) => super::channel::describe_error(&n),
            None => "error notifier clean".to_string(),
        }
    }
}

impl OpenDevice {
    /// The handles of the objects still held whose names are in `names`.
    fn live(&self, names: &[&str]) -> Vec<u32> {
        self.objects.iter().filter(|o| names.contains(&o.what)).map(|o| o.handle).collect()
    }

    /// Checks that RM no longer knows channel `handle`: a harmless read on it (its work-submit token) must
    /// be refused as an unknown object.
    fn channel_gone(&self, handle: u32) -> Result<(), StopFailure> {
        gone(self.base.rm.work_submit_token(handle)).map_err(|e| StopFailure::new(step::CHANNEL_GONE, e))
    }
}

/// What RM's answer to a read on a freed channel says: `Ok` only for a refusal naming the object unknown
/// ([`GONE`]); an answer, or any other refusal (the object may still be there, only unreadable), is the
/// error.
fn gone(answer: Result<u32, HalError>) -> Result<(), HalError> {
    match answer {
        Err(HalError::Driver { status, .. }) if GONE.contains(&status) => Ok(()),
        Err(e) => Err(e),
        Ok(token) => Err(HalError::Driver {
            call: "GPFIFO_GET_WORK_SUBMIT_TOKEN on a freed channel",
            status: 0,
            detail: format!("RM still answers for the channel (token {token}) after its RM_FREE returned OK"),
        }),
    }
}

impl OpenDevice {
    /// Runs the whole open sequence.
    pub(crate) fn create(config: &NvidiaConfig, clock: &dyn Clock) -> Result<Box<OpenDevice>, HalError> {
        let conn = Connection::open()?;
        let mut s = RmStage::new(&conn.rm);
        let dev = DeviceObjects::create(&mut s, &conn)?;
        let id = Identity::query(&conn.rm, &conn, &dev)?;
        let boost = Boost::ask(&mut s, dev.subdevice, config);
        let space = AddressSpace::create(&mut s, &conn, &dev, &id, config)?;
        let made = s.keep();

        let abi = conn.abi;
        let mut base = Base::new(conn, &dev, id.uuid);
        let mut s = Stage::resume(&mut base, made);
        // Before the channels, so a refusal releases the least; the VA space is registered with UVM.
        let faults = FaultWatch::open(config.fault_signal, config.vaspace_flags, &s.base().uvm.fd)?;
        let compute = ComputeChannel::create(&mut s, config, &id, space.vaspace)?;
        let (copy, copy_note) = CopyChannel::find(&mut s, dev.subdevice, config, &id, space.vaspace);
        let objects = s.keep();

        let Identity { arch, gr, info, .. } = id;
        let mut open = Box::new(OpenDevice {
            base,
            abi,
            arch,
            info,
            gr,
            objects,
            channels: Channels::new(compute.channel, copy, space.doorbell, compute.arena, compute.sems),
            memory: Buffers::new(),
            queue: Queue::new(compute.pool),
            syncs: Syncs::new(copy_note),
            boost,
            stopped: None,
            faults,
        });
        if let Err(e) = open.setup(clock, config) {
            open.teardown();
            return Err(e);
        }
        Ok(open)
    }

    /// Binds the engines, programs the memory windows and the first SLM backing store, and waits for the
    /// channel to execute it: the first proof that the ring, the doorbell and the semaphores work. Then the
    /// same for the copy channel, if there is one; its failure sends syncs back to the graphics copy engine.
    fn setup(&mut self, clock: &dyn Clock, config: &NvidiaConfig) -> Result<(), HalError> {
        let wait = |value, what| Wait {
            value,
            timeout_ns: config.internal_timeout_ms * 1_000_000,
            spin_ns: INTERNAL_SPIN_NS,
            what,
        };
        let mut push = Push::new();
        push.set_object(SUBC_COMPUTE, self.arch.compute_class);
        push.set_object(SUBC_COPY, self.channels.compute.copy_class);
        push.windows(SHARED_WINDOW, LOCAL_WINDOW);
        self.channels.ensure_local_memory(&mut self.base, &self.gr, self.arch.stack_headroom, &mut push)?;
        let (va, value) = self.channels.next_wait();
        push.release_after_idle(va, value);
        self.channels.run(&mut self.base, Target::Compute, &push, wait(value, "channel setup"), clock)?;
        if let Some(copy_class) = self.channels.copy.as_ref().map(|c| c.channel.copy_class) {
            let mut push = Push::new();
            push.set_object(SUBC_COPY, copy_class);
            let (va, value) = self.channels.next_wait();
            push.copy_release(va, value);
            if let Err(e) =
                self.channels.run(&mut self.base, Target::Copy, &push, wait(value, "copy channel setup"), clock)
            {
                // The channel stays until close.
                self.syncs.async_copy_failed(&e);
            }
        }
        Ok(())
    }

    /// Frees everything and collects what the driver refused.
    ///
    /// Order: the performance boost is cleared; buffers go, then the channels' engines and the channels
    /// themselves (they reference the rings, the notifiers and the SLM store), then the memory they used
    /// (the staging ring's included) and the usermode mapping, then UVM (closing its fds drops the VA-space and channel registrations), then
    /// the remaining objects in reverse order of creation; closing the control fd frees the client.
    pub(crate) fn teardown(mut self: Box<Self>) -> Vec<String> {
        let mut errors = Vec::new();
        if let Some(subdevice) = self.boost.subdevice.take() {
            if let Err(e) = self.base.rm.perf_boost(subdevice, sys::perf_boost::CMD_CLEAR, 0) {
                errors.push(format!("clear performance boost: {e}"));
            }
        }
        for id in self.memory.ids() {
            self.free_buffer(id);
        }
        let mut rest: Vec<Object> = Vec::new();
        for &o in self.objects.iter().rev() {
            if CHANNEL_OBJECTS.contains(&o.what) {
                if let Err(e) = self.base.rm.free(o.parent, o.handle, "RM_FREE channel object") {
                    errors.push(format!("{}: {e}", o.what));
                }
            } else {
                rest.push(o);
            }
        }
        let OpenDevice { mut base, channels, queue, syncs, faults, .. } = *self;
        // The tracker holds the UVM file: closed first, so UVM's own close below tears the VA space down.
        drop(faults);
        let parts = channels.into_parts();
        let (copy_ring, copy_notifier) = parts.copy.map(|c| (c.channel.gpfifo, c.channel.notifier)).unzip();
        let memory = [
            Some(parts.compute.gpfifo),
            Some(parts.compute.notifier),
            copy_ring,
            copy_notifier,
            Some(parts.arena),
            Some(parts.sems),
            Some(queue.into_pool()),
            parts.slm,
        ];
        // The staging ring, and any given up after a copy that did not complete: the channels that may have
        // been writing them are gone.
        for m in memory.into_iter().flatten().chain(syncs.into_memory()) {
            base.drop_mem(m);
        }
        // SAFETY: the usermode mapping made at open; the channels that used it are gone.
        unsafe { unmap(parts.doorbell, userd::USERMODE_BYTES) };
        let Base { rm, uvm, dev, .. } = base;
        drop(uvm);
        for o in rest {
            if let Err(e) = rm.free(o.parent, o.handle, "RM_FREE object") {
                errors.push(format!("{}: {e}", o.what));
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
        let open = OpenDevice::create(&self.config(), &self.clock)?;
        let info = open.info.clone();
        *st = Some(open);
        Ok(info)
    }

    unsafe fn stop(&self) -> Result<Stopped, StopFailure> {
        let mut st = sync::lock(&self.state);
        let Some(o) = st.as_mut() else {
            let source = HalError::NoDevice("nvidia: device not open".into());
            return Err(StopFailure::new("stop", source));
        };
        if let Some(done) = &o.stopped {
            return Ok(done.clone());
        }
        let stopped = run_stop(&mut **o)?;
        o.stopped = Some(stopped.clone());
        Ok(stopped)
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

    #[test]
    fn architecture_comes_from_the_sm_version_or_the_class_list() {
        assert_eq!(pick_arch(0x900, &[]).map(|a| a.name), Some("hopper"));
        assert_eq!(pick_arch(0x777, &[0xc8b5, 0xcbc0]).map(|a| a.name), Some("hopper"));
        assert!(pick_arch(0x777, &[0xc6c0]).is_none());
    }

    #[test]
    fn a_freed_channel_is_gone_only_when_rm_calls_the_handle_unknown() {
        let refused = |status| Err(super::super::ioctl::status_error("GPFIFO_GET_WORK_SUBMIT_TOKEN", status, "cmd"));
        for status in GONE {
            assert_eq!(gone(refused(status)), Ok(()), "{status:#x}");
        }
        // NV_ERR_RESOURCE_LOST: invalidated but still there; NV_ERR_INVALID_STATE: any other refusal.
        for status in [0x6e, 0x40] {
            assert_eq!(gone(refused(status)), refused(status).map(|_: u32| ()), "{status:#x}");
        }
        let e = gone(Ok(10)).unwrap_err();
        assert!(e.to_string().contains("RM still answers for the channel (token 10)"), "{e}");
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
