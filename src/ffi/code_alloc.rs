//! `omega_gpu_code_alloc.h`: how big a code buffer is. The GPU prefetches instructions past the end of a
//! kernel, so every code buffer carries a zero-filled tail after the code, and the whole is rounded up to
//! the platform's page.

use super::boundary::or;
use crate::error::{Error, SettingError, Stage};
use crate::session::runtime;

/// Zero-filled bytes after kernel code in every code buffer, at least, for instruction prefetch (a platform
/// may keep more: the nvidia platform keeps 4096).
pub const OMEGA_GPU_CODE_PREFETCH_TAIL: usize = 2048;

const _: () = assert!(OMEGA_GPU_CODE_PREFETCH_TAIL == crate::session::CODE_PREFETCH_TAIL);

/// EXPERIMENTAL. Bytes `omega_gpu_session_alloc_code(code_size, ...)` allocates: `code_size` plus the
/// platform's prefetch tail (at least `OMEGA_GPU_CODE_PREFETCH_TAIL`), rounded up to the installed
/// platform's page, at least one page. Installs the environment's platform if none is installed. Returns 0 (stage `code alloc`) when no platform can be
/// installed or the size is past what a platform can describe (the sum or the rounding overflows, or the
/// total passes `PTRDIFF_MAX`), the sizes `omega_gpu_session_alloc_code` refuses. Any thread, no lock.
#[no_mangle]
pub extern "C" fn omega_gpu_code_alloc_bytes(code_size: usize) -> usize {
    or("omega_gpu_code_alloc_bytes", 0, || {
        let bytes = runtime().alloc_bytes_for(code_size, crate::session::AllocKind::Code)?;
        let overflows =
            || Error::Setting { stage: Stage::CodeAlloc, detail: SettingError::CodeSizeOverflows(code_size) };
        bytes.and_then(|b| usize::try_from(b).ok()).ok_or_else(overflows)
    })
}
