//! Thin unsafe wrappers over the driver's ioctls: an fd, a request and an argument struct in, a `Result`
//! out. Two status levels exist and both are checked: the ioctl's own return (`-1` and errno) and the
//! NV_STATUS the driver writes into the struct. Every failure names the step that made the call and the
//! driver's text for the status.

use std::os::fd::RawFd;

use zerocopy::{FromBytes, IntoBytes};

use super::sys::{self, iowr, status_name};
use crate::error::HalError;

/// A driver argument struct that carries its own NV_STATUS.
pub(crate) trait InStatus: IntoBytes + FromBytes {
    /// The status the driver wrote.
    fn status(&self) -> u32;
}

macro_rules! in_status {
    ($($t:ty => |$s:ident| $e:expr),* $(,)?) => {
        $(impl InStatus for $t {
            fn status(&self) -> u32 {
                let $s = self;
                $e
            }
        })*
    };
}

in_status!(
    sys::NvOs21 => |s| s.status,
    sys::NvOs54 => |s| s.status,
    sys::NvOs00 => |s| s.status,
    sys::NvOs46 => |s| s.status,
    sys::NvOs33WithFd => |s| s.params.status,
    sys::NvOs02WithFd => |s| s.params.status,
    sys::UvmInitialize => |s| s.rm_status,
    sys::UvmMmInitialize => |s| s.rm_status,
    sys::UvmRegisterGpu => |s| s.rm_status,
    sys::UvmRegisterGpuVaspace => |s| s.rm_status,
    sys::UvmRegisterChannel => |s| s.rm_status,
    sys::UvmCreateExternalRange => |s| s.rm_status,
    sys::UvmMapExternalAllocation => |s| s.rm_status,
    sys::UvmFree => |s| s.rm_status,
);

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

/// Issues `ioctl(fd, req, arg)` and returns the kernel's verdict.
///
/// # Safety
/// - `req` is a request whose argument is exactly a `T` (for `_IOWR` requests the size is encoded in it).
/// - Every pointer stored inside `arg` is valid for the reads and writes the driver makes through it for
///   this request (parameter blocks of the size the struct says, lists of the length it says).
pub(crate) unsafe fn raw<T: IntoBytes + FromBytes>(fd: RawFd, req: u32, arg: &mut T) -> std::io::Result<()> {
    // SAFETY: `arg` is a live, exclusive `T` the request expects (caller's promise); the driver writes
    // only within it and through the pointers the caller vouched for.
    let r = unsafe { libc::ioctl(fd, req as _, arg as *mut T as *mut libc::c_void) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// An RM escape (`_IOWR('F', nr, size_of::<T>())`) whose struct carries an NV_STATUS; both levels checked.
///
/// # Safety
/// Same as [`raw`], with the request built from `nr` and `T`'s size.
pub(crate) unsafe fn rm<T: InStatus>(
    fd: RawFd,
    nr: u8,
    arg: &mut T,
    call: &'static str,
    ctx: &str,
) -> Result<(), HalError> {
    // SAFETY: the request is derived from T's size, so the driver copies exactly one T; the caller vouches
    // for the pointers inside it.
    unsafe { raw(fd, iowr(nr, size_of::<T>()), arg) }.map_err(|e| errno_error(call, e, ctx))?;
    match arg.status() {
        sys::NV_OK => Ok(()),
        s => Err(status_error(call, s, ctx)),
    }
}

/// An RM escape whose struct has no status field (card info, register fd): only the ioctl return counts.
///
/// # Safety
/// Same as [`raw`].
pub(crate) unsafe fn rm_plain<T: IntoBytes + FromBytes>(
    fd: RawFd,
    nr: u8,
    arg: &mut T,
    call: &'static str,
) -> Result<(), HalError> {
    // SAFETY: as in `rm`.
    unsafe { raw(fd, iowr(nr, size_of::<T>()), arg) }.map_err(|e| errno_error(call, e, ""))
}

/// A UVM request (a plain number, not `_IOWR`) whose struct ends in rmStatus; both levels checked.
///
/// # Safety
/// Same as [`raw`].
pub(crate) unsafe fn uvm<T: InStatus>(
    fd: RawFd,
    req: u32,
    arg: &mut T,
    call: &'static str,
    ctx: &str,
) -> Result<(), HalError> {
    // SAFETY: UVM requests take a pointer to their params struct; T is that struct (caller's promise).
    unsafe { raw(fd, req, arg) }.map_err(|e| errno_error(call, e, ctx))?;
    match arg.status() {
        sys::NV_OK => Ok(()),
        s => Err(status_error(call, s, ctx)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_numbers_encode_direction_size_type_and_number() {
        // RM_ALLOC with NVOS21 (32 bytes): 0xc020462b, as strace shows for libcuda and tinygrad.
        assert_eq!(iowr(sys::esc::RM_ALLOC, size_of::<sys::NvOs21>()), 0xc020_462b);
        // RM_CONTROL (NVOS54, 32 bytes) and RM_FREE (NVOS00, 16 bytes).
        assert_eq!(iowr(sys::esc::RM_CONTROL, size_of::<sys::NvOs54>()), 0xc020_462a);
        assert_eq!(iowr(sys::esc::RM_FREE, size_of::<sys::NvOs00>()), 0xc010_4629);
        // MAP_MEMORY with the fd appended (56 bytes) and MAP_MEMORY_DMA (64 bytes).
        assert_eq!(iowr(sys::esc::RM_MAP_MEMORY, size_of::<sys::NvOs33WithFd>()), 0xc038_464e);
        assert_eq!(iowr(sys::esc::RM_MAP_MEMORY_DMA, size_of::<sys::NvOs46>()), 0xc040_4657);
        // A 64-entry card list: 64 * 72 = 4608 = 0x1200 bytes.
        assert_eq!(iowr(sys::esc::CARD_INFO, 64 * size_of::<sys::CardInfo>()), 0xd200_46c8);
        assert_eq!(iowr(sys::esc::REGISTER_FD, 4), 0xc004_46c9);
        // Each field lands in its own bits.
        let r = iowr(0x5a, 0x123);
        assert_eq!(r >> 30, 3);
        assert_eq!((r >> 16) & 0x3fff, 0x123);
        assert_eq!((r >> 8) & 0xff, b'F' as u32);
        assert_eq!(r & 0xff, 0x5a);
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
}
