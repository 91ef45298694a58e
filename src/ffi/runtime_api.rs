//! `omega_runtime_api.h`: the runtime API version, the one place it lives.
//!
//! The version is a property of the list of entries and their behaviour (docs/runtime/omega_runtime_api.md,
//! "Versions"), not of the library build. `make test-runtime-api` fails when these macros, the manifest's
//! `version` line, the document's first line and `crate::API_VERSION` disagree; section 2 of the document
//! lists every place a version bump touches.

use super::boundary::guard;

/// Runtime API major version. A change to a STABLE entry's names, types, layout or documented behaviour
/// needs a new major.
pub const OMEGA_RUNTIME_API_VERSION_MAJOR: u32 = 0;

/// Runtime API minor version. Additions, EXPERIMENTAL changes and promotions to STABLE need a new minor.
pub const OMEGA_RUNTIME_API_VERSION_MINOR: u32 = 2;

/// The version as one number, `(MAJOR << 16) | MINOR`: what `omega_runtime_version()` returns for the
/// headers a program was compiled with.
pub const OMEGA_RUNTIME_API_VERSION: u32 = (OMEGA_RUNTIME_API_VERSION_MAJOR << 16) | OMEGA_RUNTIME_API_VERSION_MINOR;

const _: () = assert!(OMEGA_RUNTIME_API_VERSION_MAJOR == crate::API_VERSION.0);
const _: () = assert!(OMEGA_RUNTIME_API_VERSION_MINOR == crate::API_VERSION.1);

/// EXPERIMENTAL. The runtime API version of the linked library, encoded as `OMEGA_RUNTIME_API_VERSION`
/// is. A program compares it with the macro to find a library older than its headers: the majors must be
/// equal and the library's minor at least the header's. Any thread, no lock.
#[no_mangle]
pub extern "C" fn omega_runtime_version() -> u32 {
    guard("omega_runtime_version", 0, || OMEGA_RUNTIME_API_VERSION)
}
