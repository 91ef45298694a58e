//! The driver's requests as types, and the one place an ioctl, an mmap or a munmap is made.
//!
//! Every call into the driver passes [`COUNTERS`] here ([`send`], [`map`], [`unmap`]): counted by kind,
//! and refused while serving is sealed (`crate::driver`). `tests/driver_calls.rs` checks that no other
//! file of the backend calls `ioctl`, `mmap` or `munmap`.
//!
//! Every request this backend sends is a type implementing [`Request`]: it names the device file the
//! request goes to ([`Request::File`]), its number ([`Request::OPCODE`]) and its one argument struct
//! ([`Request::Arg`]). [`send`] takes a `&DriverFd<R::File>` and an `&mut R::Arg`, so a request can only
//! be sent to its own file with its own struct; the number of an RM escape is computed from that struct
//! (`_IOWR('F', nr, size_of::<Arg>())`), so the size the driver reads back cannot disagree with it either.
//!
//! What the types cannot say is where the driver follows a pointer stored inside the struct. That splits
//! the requests in two: a [`PointerFree`] request touches nothing but its argument, and [`send_plain`]
//! sends it safely; the other three (RM_ALLOC's parameter block, RM_CONTROL's parameters, RM_ALLOC_MEMORY's
//! pages) only go through the unsafe [`send`], from `rm.rs`, whose typed calls vouch for those pointers.
//!
//! Two status levels exist and both are checked: the ioctl's own return (`-1` and errno) and, for requests
//! whose struct has one, the NV_STATUS the driver writes into it. Every failure names the step that made
//! the call and the driver's text for the status.

use std::ffi::c_void;
use std::fs::File;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use rustix::ioctl::{opcode, Ioctl, IoctlOutput, Opcode};
use static_assertions::const_assert;
use zerocopy::{FromBytes, IntoBytes};

use super::sys::{self, esc, status_name, uvm_req, IOC_SIZE_MASK, NV_IOCTL_MAGIC};
use crate::driver::{DriverCall, DriverCounters};
use crate::error::HalError;

/// The control device every RM call goes to.
pub const CTL_PATH: &str = "/dev/nvidiactl";
/// The UVM device.
pub const UVM_PATH: &str = "/dev/nvidia-uvm";
/// UVM's tools device (event queues of a VA space), minor 1 of the UVM driver.
pub const UVM_TOOLS_PATH: &str = "/dev/nvidia-uvm-tools";

/// A kind of device file of the driver: what a [`DriverFd`] is open on.
pub(crate) trait DeviceFile {}

/// `/dev/nvidiactl`: the resource manager's control file (RM escapes, the card list).
pub(crate) enum CtlFile {}
/// `/dev/nvidiaN`: one GPU's file (fd registration, wrapping host pages).
pub(crate) enum GpuFile {}
/// `/dev/nvidia-uvm`: the unified memory driver.
pub(crate) enum UvmFile {}
/// `/dev/nvidia-uvm-tools`: one UVM event tracker per open file.
pub(crate) enum UvmToolsFile {}

impl DeviceFile for CtlFile {}
impl DeviceFile for GpuFile {}
impl DeviceFile for UvmFile {}
impl DeviceFile for UvmToolsFile {}

/// A device file of kind `F`, open read-write and close-on-exec (std's default).
pub(crate) struct DriverFd<F: DeviceFile> {
    fd: OwnedFd,
    _file: PhantomData<F>,
}

impl<F: DeviceFile> DriverFd<F> {
    fn open_path(path: &str, call: &'static str) -> Result<Self, HalError> {
        let fd = File::options().read(true).write(true).open(path).map_err(|e| os_error(call, e, path))?;
        Ok(DriverFd { fd: fd.into(), _file: PhantomData })
    }

    /// The fd number, for the structs that carry one (the driver looks it up in this process).
    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The fd itself, once no request goes to it any more (a mapping's fd is only mmapped).
    pub(crate) fn into_owned(self) -> OwnedFd {
        self.fd
    }
}

#[cfg(test)]
impl<F: DeviceFile> DriverFd<F> {
    /// `/dev/null` in the place of a driver file: the kernel refuses every request (ENOTTY).
    pub(crate) fn null() -> Self {
        Self::open_path("/dev/null", "open /dev/null").expect("/dev/null opens")
    }
}

impl DriverFd<CtlFile> {
    /// Opens `/dev/nvidiactl`; `call` names the step in an error.
    pub(crate) fn open_ctl(call: &'static str) -> Result<Self, HalError> {
        Self::open_path(CTL_PATH, call)
    }
}

impl DriverFd<GpuFile> {
    /// Opens `/dev/nvidia<minor>` (not yet registered with a control fd).
    pub(crate) fn open_gpu(minor: u32) -> Result<Self, HalError> {
        Self::open_path(&format!("/dev/nvidia{minor}"), "open /dev/nvidiaN")
    }
}

impl DriverFd<UvmFile> {
    /// Opens `/dev/nvidia-uvm`; `call` names the step in an error.
    pub(crate) fn open_uvm(call: &'static str) -> Result<Self, HalError> {
        Self::open_path(UVM_PATH, call)
    }
}

impl DriverFd<UvmToolsFile> {
    /// Opens `/dev/nvidia-uvm-tools`; `call` names the step in an error.
    pub(crate) fn open_uvm_tools(call: &'static str) -> Result<Self, HalError> {
        Self::open_path(UVM_TOOLS_PATH, call)
    }
}

impl<F: DeviceFile> AsFd for DriverFd<F> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// One driver request: the file it goes to, its number, and the one struct it takes.
///
/// # Safety
/// An implementation promises that the driver behind [`Request::File`] serves [`Request::OPCODE`] with
/// exactly one [`Request::Arg`] behind the argument pointer, laid out as the driver's header lays out that
/// request's struct: it reads and writes at most `size_of::<Arg>()` bytes there (an `_IOWR` escape carries
/// that size in its number and the driver copies exactly it) and touches no other memory of this process,
/// except through pointers stored inside the `Arg`. [`Request::status`] reads the field the driver writes
/// its NV_STATUS to, if the struct has one.
pub(crate) unsafe trait Request {
    /// The device file the request is served on.
    type File: DeviceFile;
    /// The argument struct.
    type Arg: IntoBytes + FromBytes;
    /// The request number.
    const OPCODE: Opcode;
    /// The request's name, as the driver counters list it.
    const NAME: &'static str;
    /// The NV_STATUS the driver wrote into `arg`; `None` for a struct without one.
    fn status(arg: &Self::Arg) -> Option<u32>;
}

/// A request whose struct holds no pointer the driver follows: sending it touches nothing but the struct.
///
/// # Safety
/// For this request the driver dereferences no value stored in [`Request::Arg`] (an address the driver
/// only writes back as a result, like NVOS33's `pLinearAddress`, is a value, not a pointer it follows).
pub(crate) unsafe trait PointerFree: Request {}

/// Declares the RM escapes: `Name: file, escape number, argument struct, |arg| its status [, PointerFree]`.
/// The number is `_IOWR('F', nr, size_of::<Arg>())`, computed from the struct, which must fit the 14-bit
/// size field.
macro_rules! rm_escapes {
    ($($(#[$doc:meta])* $name:ident: $file:ty, $nr:expr, $arg:ty, |$a:ident| $status:expr $(, $plain:ident)?;)*) => {$(
        $(#[$doc])*
        pub(crate) enum $name {}
        const_assert!(size_of::<$arg>() <= IOC_SIZE_MASK as usize);
        // SAFETY: each line of the table is the driver's fact (nv-ioctl-numbers.h and nv_escape.h for the
        // number and file, nvos.h and nv-ioctl.h for the struct, whose layout sys.rs pins at compile time);
        // the RM dispatcher copies `_IOC_SIZE` of the number — `size_of::<$arg>()` — in and back out.
        unsafe impl Request for $name {
            type File = $file;
            type Arg = $arg;
            const OPCODE: Opcode = opcode::read_write::<$arg>(NV_IOCTL_MAGIC, $nr);
            const NAME: &'static str = stringify!($name);
            fn status($a: &$arg) -> Option<u32> {
                $status
            }
        }
        $(rm_escapes!(@$plain $name);)?
    )*};
    (@PointerFree $name:ident) => {
        // SAFETY: the struct of this request holds handles, sizes and flags only (see its line above).
        unsafe impl PointerFree for $name {}
    };
}

/// Declares the UVM requests: `Name: number, argument struct` (all pointer-free, status in `rmStatus`).
macro_rules! uvm_requests {
    ($($(#[$doc:meta])* $name:ident: $nr:expr, $arg:ty;)*) => {$(
        $(#[$doc])*
        pub(crate) enum $name {}
        // SAFETY: UVM requests are plain numbers (uvm_ioctl.h, uvm_linux_ioctl.h) whose argument is a
        // pointer to their params struct, copied in and back whole (`uvm_ioctl`'s copy_from_user /
        // copy_to_user of `sizeof(params)`); sys.rs lays each one out as uvm_ioctl.h does, ending in
        // `rmStatus`, and pins its size and offsets.
        unsafe impl Request for $name {
            type File = UvmFile;
            type Arg = $arg;
            const OPCODE: Opcode = $nr as Opcode;
            const NAME: &'static str = stringify!($name);
            fn status(arg: &$arg) -> Option<u32> {
                Some(arg.rm_status)
            }
        }
        // SAFETY: no UVM params struct this backend sends holds a pointer: GPU addresses, lengths, handles,
        // UUIDs and fd numbers only.
        unsafe impl PointerFree for $name {}
    )*};
}

/// Every request this backend sends.
pub(crate) mod req {
    use super::*;

    rm_escapes! {
        /// NV_ESC_RM_ALLOC: allocate an RM object; `pAllocParms` points at the class's parameters.
        RmAlloc: CtlFile, esc::RM_ALLOC, sys::NvOs21, |a| Some(a.status);
        /// NV_ESC_RM_CONTROL: a control call; `params` points at `paramsSize` bytes of the command's struct.
        RmControl: CtlFile, esc::RM_CONTROL, sys::NvOs54, |a| Some(a.status);
        /// NV_ESC_RM_FREE.
        RmFree: CtlFile, esc::RM_FREE, sys::NvOs00, |a| Some(a.status), PointerFree;
        /// NV_ESC_RM_MAP_MEMORY with the fd to mmap appended.
        RmMapMemory: CtlFile, esc::RM_MAP_MEMORY, sys::NvOs33WithFd, |a| Some(a.params.status), PointerFree;
        /// NV_ESC_RM_MAP_MEMORY_DMA.
        RmMapMemoryDma: CtlFile, esc::RM_MAP_MEMORY_DMA, sys::NvOs46, |a| Some(a.status), PointerFree;
        /// NV_ESC_RM_ALLOC_MEMORY (sent to the GPU's file): `pMemory` is the start of the pages to wrap.
        RmAllocMemory: GpuFile, esc::RM_ALLOC_MEMORY, sys::NvOs02WithFd, |a| Some(a.params.status);
        /// NV_ESC_CARD_INFO: the driver fills one entry per GPU (no status field).
        CardInfo: CtlFile, esc::CARD_INFO, sys::CardList, |_a| None, PointerFree;
        /// NV_ESC_REGISTER_FD (sent to the GPU's file): ties it to a control fd (no status field).
        RegisterFd: GpuFile, esc::REGISTER_FD, sys::RegisterFd, |_a| None, PointerFree;
    }

    uvm_requests! {
        /// UVM_INITIALIZE.
        UvmInitialize: uvm_req::INITIALIZE, sys::UvmInitialize;
        /// UVM_MM_INITIALIZE (sent to a second UVM fd).
        UvmMmInitialize: uvm_req::MM_INITIALIZE, sys::UvmMmInitialize;
        /// UVM_REGISTER_GPU.
        UvmRegisterGpu: uvm_req::REGISTER_GPU, sys::UvmRegisterGpu;
        /// UVM_REGISTER_GPU_VASPACE.
        UvmRegisterGpuVaspace: uvm_req::REGISTER_GPU_VASPACE, sys::UvmRegisterGpuVaspace;
        /// UVM_REGISTER_CHANNEL.
        UvmRegisterChannel: uvm_req::REGISTER_CHANNEL, sys::UvmRegisterChannel;
        /// UVM_CREATE_EXTERNAL_RANGE.
        UvmCreateExternalRange: uvm_req::CREATE_EXTERNAL_RANGE, sys::UvmCreateExternalRange;
        /// UVM_MAP_EXTERNAL_ALLOCATION.
        UvmMapExternalAllocation: uvm_req::MAP_EXTERNAL_ALLOCATION, sys::UvmMapExternalAllocation;
        /// UVM_FREE.
        UvmFree: uvm_req::FREE, sys::UvmFree;
    }

    /// UVM_TOOLS_INIT_EVENT_TRACKER_V2: `queueBuffer` and `controlBuffer` are user memory the driver pins.
    pub(crate) enum UvmToolsInitEventTracker {}
    // SAFETY: uvm_tools.c serves request 76 on the tools file (`uvm_tools_unlocked_ioctl`) with one
    // UVM_TOOLS_INIT_EVENT_TRACKER_V2_PARAMS copied in and back whole, which sys.rs lays out and pins; its
    // two buffer addresses are followed (pinned and mapped by `map_user_pages`), so it is not PointerFree.
    unsafe impl Request for UvmToolsInitEventTracker {
        type File = UvmToolsFile;
        type Arg = sys::UvmToolsInitEventTracker;
        const OPCODE: Opcode = uvm_req::TOOLS_INIT_EVENT_TRACKER_V2 as Opcode;
        const NAME: &'static str = "UvmToolsInitEventTracker";
        fn status(arg: &sys::UvmToolsInitEventTracker) -> Option<u32> {
            Some(arg.rm_status)
        }
    }

    /// UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS.
    pub(crate) enum UvmToolsEnableEvents {}
    // SAFETY: request 58 on the tools file takes one UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS_PARAMS (a bit mask
    // and the status), copied in and back whole.
    unsafe impl Request for UvmToolsEnableEvents {
        type File = UvmToolsFile;
        type Arg = sys::UvmToolsEnableEvents;
        const OPCODE: Opcode = uvm_req::TOOLS_EVENT_QUEUE_ENABLE_EVENTS as Opcode;
        const NAME: &'static str = "UvmToolsEnableEvents";
        fn status(arg: &sys::UvmToolsEnableEvents) -> Option<u32> {
            Some(arg.rm_status)
        }
    }
    // SAFETY: the struct is a mask and a status: nothing in it is followed.
    unsafe impl PointerFree for UvmToolsEnableEvents {}
}

/// A request's argument on its way to the driver: `R::Arg`, borrowed exclusively for the call.
struct Call<'a, R: Request>(&'a mut R::Arg);

// SAFETY: `Request`'s contract binds `R::OPCODE` to exactly the `R::Arg` that `as_ptr` points at, which
// `Call` borrows exclusively for the call (so the driver's writes, `IS_MUTATING`, race with nothing). The
// output is only the ioctl's return value, which carries nothing on success and is dropped.
unsafe impl<R: Request> Ioctl for Call<'_, R> {
    type Output = ();
    const IS_MUTATING: bool = true;

    fn opcode(&self) -> Opcode {
        R::OPCODE
    }

    fn as_ptr(&mut self) -> *mut c_void {
        (self.0 as *mut R::Arg).cast()
    }

    unsafe fn output_from_ptr(_out: IoctlOutput, _arg: *mut c_void) -> rustix::io::Result<()> {
        Ok(())
    }
}

/// Sends `arg` to `fd` as request `R` and checks both status levels; `call` names the step and `ctx` what
/// was asked, in an error.
///
/// # Safety
/// - Every pointer stored inside `arg` is valid for what the driver does through it for `R` (a
///   [`PointerFree`] request has none: send it with [`send_plain`]).
pub(crate) unsafe fn send<R: Request>(
    fd: &DriverFd<R::File>,
    arg: &mut R::Arg,
    call: &'static str,
    ctx: &str,
) -> Result<(), HalError> {
    COUNTERS.enter(DriverCall::Ioctl(R::NAME))?;
    // SAFETY: `fd` is open on `R::File`, the file `R` is served on; `Call`'s `Ioctl` impl hands the driver
    // `R::OPCODE` and a live, exclusive `R::Arg`, which is all `R`'s contract lets the driver touch besides
    // the pointers inside `arg`, which the caller vouches for.
    unsafe { rustix::ioctl::ioctl(fd, Call::<R>(arg)) }.map_err(|e| errno_error(call, e.into(), ctx))?;
    match R::status(arg) {
        None | Some(sys::NV_OK) => Ok(()),
        Some(s) => Err(status_error(call, s, ctx)),
    }
}

/// [`send`] for a request whose struct holds no pointer the driver follows.
pub(crate) fn send_plain<R: PointerFree>(
    fd: &DriverFd<R::File>,
    arg: &mut R::Arg,
    call: &'static str,
    ctx: &str,
) -> Result<(), HalError> {
    // SAFETY: `R` is `PointerFree`: the driver follows no pointer inside `arg`, so there is nothing to vouch
    // for beyond what the types already bind.
    unsafe { send::<R>(fd, arg, call, ctx) }
}

/// Every driver call of the process: the nvidia platform's [`crate::Platform::driver`].
pub(crate) static COUNTERS: DriverCounters = DriverCounters::new();

/// Maps `len` bytes of `fd` (`None`: anonymous pages) with `prot` and `flags`, the kernel choosing the
/// place; counted, and refused while sealed. `call` names the step in an error.
///
/// # Safety
/// - When `fd` is given, the driver has prepared it for a mapping of `len` bytes (RM_MAP_MEMORY), or it
///   is not a driver file at all.
pub(crate) unsafe fn map(
    len: u64,
    prot: libc::c_int,
    flags: libc::c_int,
    fd: Option<RawFd>,
    call: &'static str,
) -> Result<*mut u8, HalError> {
    COUNTERS.enter(DriverCall::Mmap { bytes: len })?;
    let flags = if fd.is_none() { flags | libc::MAP_ANONYMOUS } else { flags };
    // SAFETY: a fresh mapping placed by the kernel (no MAP_FIXED), so nothing existing is mapped over; what
    // backs it is the caller's promise above.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len as usize, prot, flags, fd.unwrap_or(-1), 0) };
    if p == libc::MAP_FAILED {
        return Err(os_error(call, std::io::Error::last_os_error(), "mmap"));
    }
    Ok(p.cast())
}

/// Releases a mapping made by [`map`] (counted; a null `p` is nothing to release).
///
/// # Safety
/// - `p..p + len` is exactly one mapping [`map`] made, and nothing reads or writes it any more.
pub(crate) unsafe fn unmap(p: *mut u8, len: u64) {
    if !p.is_null() {
        COUNTERS.unmapped();
        // SAFETY: the caller owns the mapping and is done with it.
        unsafe { libc::munmap(p.cast(), len as usize) };
    }
}

/// The error for a driver status: the step, the value and the driver's name for it, plus what was asked.
pub(crate) fn status_error(call: &'static str, status: u32, context: &str) -> HalError {
    let sep = if context.is_empty() { "" } else { ": " };
    HalError::Driver { call, status, detail: format!("{} ({status:#x}){sep}{context}", status_name(status)) }
}

/// The error for an ioctl that the kernel refused before the driver wrote a status.
pub(crate) fn errno_error(call: &'static str, err: std::io::Error, context: &str) -> HalError {
    let sep = if context.is_empty() { "" } else { ": " };
    HalError::Driver {
        call,
        status: err.raw_os_error().unwrap_or(0) as u32,
        detail: format!("ioctl failed: {err}{sep}{context}"),
    }
}

/// The error for a failed system call other than an ioctl (open, mmap).
pub(crate) fn os_error(call: &'static str, err: std::io::Error, context: &str) -> HalError {
    HalError::Driver { call, status: err.raw_os_error().unwrap_or(0) as u32, detail: format!("{context}: {err}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_numbers_are_the_ones_the_driver_serves() {
        // RM escapes, as strace shows them for libcuda and tinygrad: _IOWR('F', nr, size of the struct).
        assert_eq!(req::RmAlloc::OPCODE, 0xc020_462b, "NVOS21, 32 bytes");
        assert_eq!(req::RmControl::OPCODE, 0xc020_462a, "NVOS54, 32 bytes");
        assert_eq!(req::RmFree::OPCODE, 0xc010_4629, "NVOS00, 16 bytes");
        assert_eq!(req::RmMapMemory::OPCODE, 0xc038_464e, "NVOS33 with the fd, 56 bytes");
        assert_eq!(req::RmMapMemoryDma::OPCODE, 0xc040_4657, "NVOS46, 64 bytes");
        assert_eq!(req::RmAllocMemory::OPCODE, 0xc038_4627, "NVOS02 with the fd, 56 bytes");
        assert_eq!(req::CardInfo::OPCODE, 0xc900_46c8, "32 card entries of 72 bytes");
        assert_eq!(req::RegisterFd::OPCODE, 0xc004_46c9);
        // Each field lands in its own bits: direction 3 (read-write) in 31:30, size in 29:16, 'F' in 15:8.
        for r in [req::RmAlloc::OPCODE, req::CardInfo::OPCODE, req::RegisterFd::OPCODE] {
            assert_eq!(r >> 30, 3);
            assert_eq!((r >> 8) & 0xff, Opcode::from(b'F'));
        }
        assert_eq!((req::CardInfo::OPCODE >> 16) & 0x3fff, size_of::<sys::CardList>() as Opcode);
        // UVM requests are the plain numbers of uvm_ioctl.h.
        assert_eq!(req::UvmInitialize::OPCODE, 0x3000_0001);
        assert_eq!(req::UvmMmInitialize::OPCODE, 75);
        assert_eq!(req::UvmRegisterGpu::OPCODE, 37);
        assert_eq!(req::UvmRegisterGpuVaspace::OPCODE, 25);
        assert_eq!(req::UvmRegisterChannel::OPCODE, 27);
        assert_eq!(req::UvmCreateExternalRange::OPCODE, 73);
        assert_eq!(req::UvmMapExternalAllocation::OPCODE, 33);
        assert_eq!(req::UvmFree::OPCODE, 34);
        assert_eq!(req::UvmToolsInitEventTracker::OPCODE, 76);
        assert_eq!(req::UvmToolsEnableEvents::OPCODE, 58);
    }

    #[test]
    fn a_status_is_read_where_the_struct_keeps_it() {
        let f = sys::NvOs00 { status: 0x22, ..Default::default() };
        assert_eq!(req::RmFree::status(&f), Some(0x22));
        let m = sys::NvOs33WithFd { params: sys::NvOs33 { status: 0x51, ..Default::default() }, fd: 3, _pad: 0 };
        assert_eq!(req::RmMapMemory::status(&m), Some(0x51));
        let u = sys::UvmFree { rm_status: 0x1f, ..Default::default() };
        assert_eq!(req::UvmFree::status(&u), Some(0x1f));
        assert_eq!(req::RegisterFd::status(&sys::RegisterFd { ctl_fd: 3 }), None);
    }

    #[test]
    fn status_errors_name_the_step_and_the_driver_text() {
        let e = status_error("RM_ALLOC compute object", 0x22, "class 0xcbc0");
        match e {
            HalError::Driver { call, status, detail } => {
                assert_eq!(call, "RM_ALLOC compute object");
                assert_eq!(status, 0x22);
                assert_eq!(detail, "NV_ERR_INVALID_CLASS (0x22): class 0xcbc0");
            }
            other => panic!("wrong error kind: {other:?}"),
        }
        assert_eq!(status_name(0x65), "NV_ERR_TIMEOUT");
        assert_eq!(status_name(0xffff), "NV_ERR_GENERIC");
        assert_eq!(status_name(0xdead), "NV_ERR_UNKNOWN");
    }

    #[test]
    fn errno_errors_carry_the_os_text() {
        let e = errno_error("open /dev/nvidiactl", std::io::Error::from_raw_os_error(libc::ENOENT), "");
        let HalError::Driver { status, detail, .. } = e else { panic!("wrong kind") };
        assert_eq!(status, libc::ENOENT as u32);
        assert!(detail.starts_with("ioctl failed: "), "{detail}");
        assert!(detail.contains("No such file"), "{detail}");
    }

    #[test]
    fn a_refused_request_is_an_errno_error_naming_the_step() {
        // /dev/null is no GPU file, so the kernel refuses the request (ENOTTY) before any driver sees it:
        // the path every refusal takes, errno converted and the step named.
        let fd: DriverFd<GpuFile> = DriverFd::null();
        let mut r = sys::RegisterFd { ctl_fd: -1 };
        let e = send_plain::<req::RegisterFd>(&fd, &mut r, "NV_ESC_REGISTER_FD", "").unwrap_err();
        let HalError::Driver { call, status, detail } = e else { panic!("wrong kind") };
        assert_eq!((call, status), ("NV_ESC_REGISTER_FD", libc::ENOTTY as u32));
        assert!(detail.starts_with("ioctl failed: "), "{detail}");
    }
}
