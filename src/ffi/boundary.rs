//! The boundary every C call crosses: panics caught, failures turned into the contract's return codes and
//! recorded as the process's last error — here, once, for every entry point — and the buffer
//! `omega_gpu_session_last_error` points into.
//!
//! The core records nothing: it returns its [`Error`], and the entry point that called it records that
//! value's text on the way out ([`entry`] and its shorthands [`status`] and [`or`]). So the last error is
//! always the failure of the call that returned it, never a text an inner step left behind.
//!
//! The panic boundary is rustls-ffi's shape (`ffi_panic_boundary!`), written as a function: a panic must
//! never unwind into C (that aborts the process), so it becomes the function's failure value and a last
//! error that names the function.

use core::ffi::{c_char, c_int, CStr};
use core::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::{Error, SettingError, Stage};
use crate::session::{CANCELLED, SCRATCH_RESERVED};
use crate::sync::{self, Mutex};

/// Bytes of the last-error buffer, the terminating NUL included. Longer texts are cut at a character
/// boundary; every stage name is at the front of its text, so a cut never loses the stage.
pub const ERROR_TEXT_BYTES: usize = 1024;

/// A process-wide C text buffer that a `*_last_error` entry returns a pointer into. A C caller reads it
/// under the session lock and before its next call, as the contract says; the mutex only orders our own
/// writes.
pub struct TextBuffer(Mutex<[u8; ERROR_TEXT_BYTES]>);

impl TextBuffer {
    /// An empty text.
    pub const fn new() -> Self {
        TextBuffer(Mutex::new([0; ERROR_TEXT_BYTES]))
    }

    /// Copies `text` in (cut to fit, NUL bytes made spaces) and returns a pointer to it.
    pub fn publish(&'static self, text: &str) -> *const c_char {
        let mut buf = sync::lock(&self.0);
        let n = fit(text, ERROR_TEXT_BYTES - 1);
        for (dst, &b) in buf.iter_mut().zip(text.as_bytes()[..n].iter()) {
            // A NUL inside the text would end it early in C; no stage text has one, but driver text might.
            *dst = if b == 0 { b' ' } else { b };
        }
        buf[n] = 0;
        // The buffer is static, so the pointer outlives the guard; the contract makes the caller read it
        // before its next call, which is what keeps our next write from racing its read.
        buf.as_ptr().cast()
    }
}

impl Default for TextBuffer {
    fn default() -> Self {
        Self::new()
    }
}

/// The process's last error: the text of the most recent failure of any C call, "" if none.
static LAST_ERROR: Mutex<String> = Mutex::new(String::new());

/// The one process-wide buffer `omega_gpu_session_last_error` returns.
static ERROR_TEXT: TextBuffer = TextBuffer::new();

/// Keys for opaque C handles (`OmegaGpuCmdList *`, `OmegaGpuTensor *`): addresses inside blocks of address
/// space this owns for the life of the process and hands out once each, so no pointer to any other object
/// can equal a key, and a freed key is never handed out again (a stale or made-up pointer is refused by
/// name instead of naming a later object).
pub struct Keys {
    next: usize,
    end: usize,
    /// Blocks it allocated, never touches and never frees.
    blocks: Vec<Box<[core::mem::MaybeUninit<u8>]>>,
}

impl Keys {
    /// Keys are spaced 16 apart so that the pointer C holds is as aligned as any object's would be.
    const STRIDE: usize = 16;
    /// Bytes of address space per block: 65,536 keys. The block is never written, so it costs address
    /// space, not memory.
    const BLOCK: usize = 1 << 20;

    /// No keys handed out yet.
    pub const fn new() -> Self {
        Keys { next: 0, end: 0, blocks: Vec::new() }
    }

    /// A key no earlier call returned.
    pub fn take(&mut self) -> usize {
        if self.end - self.next < Self::STRIDE {
            let block = Box::<[u8]>::new_uninit_slice(Self::BLOCK);
            let base = block.as_ptr().addr();
            self.next = base.next_multiple_of(Self::STRIDE);
            self.end = base + Self::BLOCK;
            self.blocks.push(block);
        }
        let key = self.next;
        self.next += Self::STRIDE;
        key
    }
}

impl Default for Keys {
    fn default() -> Self {
        Self::new()
    }
}

/// Records `e` as the process's last error. The entry points call it through [`entry`]; a library's own
/// C entry points call it for a failure of theirs that is no [`Error`] (`omega_gpu_session_set_error`
/// is the same door for a library written in C).
pub fn record(e: &dyn Display) {
    let text = e.to_string();
    *sync::lock(&LAST_ERROR) = text;
}

/// The process's last error, as `omega_gpu_session_last_error` returns it (before the cut to the C
/// buffer).
pub fn last_error() -> String {
    sync::lock(&LAST_ERROR).clone()
}

/// Runs `body` for the C function `name`; a panic becomes `fallback`, with the last error
/// `internal: panic in <name>`. For the entry points that have no failure of their own to report.
pub fn guard<T>(name: &'static str, fallback: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(_) => {
            record(&format_args!("internal: panic in {name}"));
            fallback
        }
    }
}

/// Runs `body` for the C function `name`: its failure is recorded as the last error and becomes what
/// `failed` makes of it; a panic becomes `panicked` (see [`guard`]).
pub fn entry<T, E: Display>(
    name: &'static str,
    panicked: T,
    failed: impl FnOnce(&E) -> T,
    body: impl FnOnce() -> Result<T, E>,
) -> T {
    guard(name, panicked, || match body() {
        Ok(v) => v,
        Err(e) => {
            record(&e);
            failed(&e)
        }
    })
}

/// [`entry`] for a function that returns 0 or the contract's code for its failure ([`code`]).
pub fn status(name: &'static str, body: impl FnOnce() -> crate::Result<()>) -> c_int {
    entry(name, -1, code, || body().map(|()| 0))
}

/// [`entry`] for a function whose failure value is fixed (NULL, 0, nothing).
pub fn or<T: Copy>(name: &'static str, failed: T, body: impl FnOnce() -> crate::Result<T>) -> T {
    entry(name, failed, |_| failed, body)
}

/// The contract's return code for a failure: `OMEGA_GPU_SESSION_SCRATCH_RESERVED` (-2) for a request
/// past a reservation, `OMEGA_GPU_SESSION_CANCELLED` (-3) for a launch that saw a cancel request, else -1.
pub fn code(e: &Error) -> c_int {
    match e {
        Error::ScratchReserved { .. } => SCRATCH_RESERVED,
        Error::CancelledBeforeSubmit | Error::CancelledAfterSubmit => CANCELLED,
        _ => -1,
    }
}

/// The refusal of a NULL argument `what` of a call of `stage`.
pub fn null(stage: Stage, what: &'static str) -> Error {
    Error::Setting { stage, detail: SettingError::Null(what) }
}

/// Copies the last error into the process-wide buffer and returns a pointer to it.
pub fn last_error_ptr() -> *const c_char {
    ERROR_TEXT.publish(&last_error())
}

/// The longest prefix of a text that fits a C buffer, and the copy into one: the platform table's own
/// (`omega_hal::ctable`), so every fixed C text is cut the same way.
pub use crate::core::c_abi::{fit, write_c_text as copy_c_text};

/// Reads a C string argument `what` of a call of `stage` as UTF-8, or says why not (NULL, not UTF-8).
///
/// # Safety
/// - `p` is NULL or points to a NUL-terminated string that stays valid and unchanged during the call.
pub unsafe fn c_str<'a>(stage: Stage, what: &'static str, p: *const c_char) -> Result<&'a str, Error> {
    if p.is_null() {
        return Err(null(stage, what));
    }
    // SAFETY: non-null (checked) and, by the caller's promise, a live NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| Error::Setting { stage, detail: SettingError::NotUtf8(what) })
}

/// A library's return codes for the session errors its calls pass on, in its own numbering: the rule
/// that picks one ([`library_session_rc`]) is the same for every library.
pub struct LibrarySessionCodes {
    /// The library's argument stage: a session error at it is the caller's arguments.
    pub args_stage: Stage,
    /// A completion was uncertain and the process latched.
    pub uncertain: i32,
    /// The session lock is held or pinned elsewhere.
    pub lock_held: i32,
    /// The process is latched from before.
    pub blocked: i32,
    /// Cancelled before anything was submitted.
    pub cancelled: i32,
    /// The platform refused, or no device is open.
    pub device: i32,
    /// The arguments, at the library's argument stage.
    pub args: i32,
    /// An allocation.
    pub alloc: i32,
    /// Loading the library's kernels.
    pub load: i32,
    /// A copy between host and device, or its sync.
    pub copy: i32,
    /// A launch, or its arguments.
    pub launch: i32,
    /// Anything else.
    pub internal: i32,
}

/// The code of `codes` for session error `e`.
pub fn library_session_rc(e: &Error, codes: &LibrarySessionCodes) -> i32 {
    if e.latched_the_process() {
        return codes.uncertain;
    }
    match e {
        Error::Lock(_) | Error::LockPinned(_) => codes.lock_held,
        Error::Latched(_) => codes.blocked,
        Error::CancelledBeforeSubmit => codes.cancelled,
        Error::Platform(_) | Error::Refused(_) | Error::Open(_) | Error::NotOpen(_) => codes.device,
        _ => match e.stage() {
            s if s == codes.args_stage => codes.args,
            Stage::Alloc => codes.alloc,
            Stage::Load => codes.load,
            Stage::Write | Stage::Read | Stage::Sync => codes.copy,
            Stage::Launch | Stage::LaunchArguments => codes.launch,
            _ => codes.internal,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_follow_the_contract() {
        assert_eq!(code(&Error::ScratchReserved { requested: 2, reserved: 1 }), -2);
        assert_eq!(code(&Error::CancelledBeforeSubmit), -3);
        assert_eq!(code(&Error::CancelledAfterSubmit), -3);
        assert_eq!(code(&Error::LaunchArguments(crate::error::LaunchArgError::NullArgs)), -1);
        assert_eq!(status("test", || Ok(())), 0);
    }

    #[test]
    fn long_text_is_cut_on_a_character_boundary() {
        let s = "é".repeat(10); // 20 bytes
        assert_eq!(fit(&s, 5), 4);
        let mut dst = [1 as c_char; 6];
        copy_c_text(&mut dst, &s);
        assert_eq!(dst[4], 0);
        assert_eq!(dst[5], 0);
        let mut empty: [c_char; 0] = [];
        copy_c_text(&mut empty, "x");
    }
}
