//! The boundary every C call crosses: panics caught, core errors turned into the contract's return codes,
//! and the one process-wide text buffer that `omega_gpu_session_last_error` points into.
//!
//! The panic boundary is rustls-ffi's shape (`ffi_panic_boundary!`), written as a function: a panic must
//! never unwind into C (that aborts the process), so it becomes the function's failure value and a last
//! error that names the function.

use core::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::{Error, Stage};
use crate::session::{runtime, CANCELLED, SCRATCH_RESERVED};
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

/// Runs `body` for the C function `name`; a panic becomes `fallback`, with the last error
/// `internal: panic in <name>`.
pub fn guard<T>(name: &'static str, fallback: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(_) => {
            runtime().set_error(&format_args!("internal: panic in {name}"));
            fallback
        }
    }
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

/// 0 for success, else [`code`]. The core already recorded the error text.
pub fn rc(r: crate::Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => code(&e),
    }
}

/// Records `stage: detail` as the last error and returns -1 (a NULL or out-of-range argument).
pub fn refuse(stage: Stage, detail: impl Into<String>) -> c_int {
    runtime().set_error(&Error::Setting { stage, detail: crate::error::SettingError::Text(detail.into()) });
    -1
}

/// Copies the runtime's last error into the process-wide buffer and returns a pointer to it.
pub fn last_error_ptr() -> *const c_char {
    ERROR_TEXT.publish(&runtime().last_error())
}

/// The longest prefix of a text that fits a C buffer, and the copy into one: the platform table's own
/// (`omega_hal::ctable`), so every fixed C text is cut the same way.
pub use crate::core::c_abi::{fit, write_c_text as copy_c_text};

/// Reads a C string argument as UTF-8, or records why not (`stage: <what> is NULL` or not UTF-8).
///
/// # Safety
/// - `p` is NULL or points to a NUL-terminated string that stays valid and unchanged during the call.
pub unsafe fn c_str<'a>(stage: Stage, what: &str, p: *const c_char) -> Result<&'a str, c_int> {
    if p.is_null() {
        return Err(refuse(stage, format!("{what} is NULL")));
    }
    // SAFETY: non-null (checked) and, by the caller's promise, a live NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| refuse(stage, format!("{what} is not UTF-8")))
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
        assert_eq!(rc(Ok(())), 0);
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
