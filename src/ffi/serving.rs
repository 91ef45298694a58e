//! The serving entries (contract §9.5): `omega_gpu_reserve_serving`, `omega_gpu_matmul_prepare`,
//! `omega_gpu_serving_seal`, `omega_gpu_serving_release`, over the matmul library's host-pointer entries
//! and the session's seal.
//!
//! Reserve grows the bf16 host-pointer entry's staging (x, W, y) to the bounds' largest sides and loads
//! the library's module; prepare runs `omega_gpu_matmul_bf16` once at a shape on zeros, so its plan and
//! workspace exist; seal seals the session (`Runtime::seal`): from then every call that would ask the
//! driver is refused with its stage (`alloc: serving sealed: allocation of 4096 bytes would ask the
//! driver`, recorded as the last error of `omega_gpu_matmul_last_error`), and `omega_gpu_matmul_bf16` at a
//! prepared shape runs without one. Release unseals and forgets the bounds (the staging stays, as after
//! any call, until `omega_gpu_matmul_cache_clear`).
//!
//! Codes: `OMEGA_GPU_SERVING_*` below, or, for a failure of the matmul library underneath, its own
//! `OMEGA_GPU_MATMUL_ERR_*` (`omega_gpu_matmul_rc_name` names it); the two ranges do not meet.

use core::ffi::c_int;

use super::boundary::guard;
use super::matmul::{self, record, LOCK_HELD};
use crate::error::Error;
use crate::libs::serving::ServingBounds;
use crate::session::runtime;
use crate::sync::{self, Mutex};

/// Success.
pub const OMEGA_GPU_SERVING_OK: i32 = 0;
/// The bounds are NULL or describe no workload, or a shape is past them (stage `serving`).
pub const OMEGA_GPU_SERVING_ERR_BOUNDS: i32 = -101;
/// `omega_gpu_matmul_prepare` with no reservation (stage `serving`).
pub const OMEGA_GPU_SERVING_ERR_NOT_RESERVED: i32 = -102;
/// A reservation or a prepare while sealed: both would ask the driver (stage `serving`).
pub const OMEGA_GPU_SERVING_ERR_SEALED: i32 = -103;

/// `omega_gpu_serving_driver_stats` on a platform that does not count its driver calls (a C function
/// table), or with `out` NULL; nothing written.
pub const OMEGA_GPU_SERVING_ERR_NOT_COUNTED: i32 = -104;

/// What the platform asked its driver for since the process started (`omega_gpu_serving_driver_stats`): on
/// nvidia every ioctl, every mmap and munmap; on the simulator its equivalents (allocations, frees,
/// memory queries, as ioctls).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OmegaGpuDriverStats {
    /// Ioctls made.
    pub ioctls: u64,
    /// Mappings made.
    pub mmaps: u64,
    /// Mappings released.
    pub munmaps: u64,
    /// Calls the seal refused (never made).
    pub refused: u64,
}

static_assertions::assert_eq_size!(OmegaGpuDriverStats, [u8; 32]);

/// The bounds of the reservation in force.
static RESERVED: Mutex<Option<ServingBounds>> = Mutex::new(None);

/// Records `why` (a serving refusal) and returns `rc`.
fn refuse(rc: c_int, why: std::fmt::Arguments<'_>) -> c_int {
    record(&format_args!("serving: {why}"));
    rc
}

/// EXPERIMENTAL. Reserves for the workload `bounds` describes (`OmegaGpuServingBounds`: the largest M, N
/// and K of a product, the sequence, batch and KV-cache sides): the matmul entries' staging and module.
/// Takes the session lock itself (call it without). Replaces an earlier reservation.
///
/// # Safety
/// - `bounds` is NULL (refused) or points to a readable, aligned `OmegaGpuServingBounds`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_reserve_serving(bounds: *const ServingBounds) -> c_int {
    guard("omega_gpu_reserve_serving", matmul::OMEGA_GPU_MATMUL_ERR_INTERNAL, || {
        // SAFETY: the caller's promise: NULL or a readable, aligned struct.
        let Some(b) = (unsafe { bounds.as_ref() }).copied() else {
            return refuse(OMEGA_GPU_SERVING_ERR_BOUNDS, format_args!("bounds NULL"));
        };
        if runtime().is_sealed() {
            return refuse(OMEGA_GPU_SERVING_ERR_SEALED, format_args!("reserve while sealed"));
        }
        if let Err(e) = b.check() {
            return refuse(OMEGA_GPU_SERVING_ERR_BOUNDS, format_args!("bounds refused: {e}"));
        }
        let rc = matmul::reserve_bf16_staging(b.max_m, b.max_n, b.max_k);
        if rc == matmul::OMEGA_GPU_MATMUL_OK {
            *sync::lock(&RESERVED) = Some(b);
        }
        rc
    })
}

/// EXPERIMENTAL. Prepares the bf16 product `[m, n, k]` (its plan and workspace) within the reservation, by
/// running it once on zeros. Refused with no reservation, past the bounds, and while sealed.
#[no_mangle]
pub extern "C" fn omega_gpu_matmul_prepare(m: u32, n: u32, k: u32) -> c_int {
    guard("omega_gpu_matmul_prepare", matmul::OMEGA_GPU_MATMUL_ERR_INTERNAL, || {
        let Some(b) = *sync::lock(&RESERVED) else {
            return refuse(OMEGA_GPU_SERVING_ERR_NOT_RESERVED, format_args!("prepare with no reservation"));
        };
        if runtime().is_sealed() {
            return refuse(OMEGA_GPU_SERVING_ERR_SEALED, format_args!("prepare while sealed"));
        }
        if m == 0 || n == 0 || k == 0 || m > b.max_m || n > b.max_n || k > b.max_k {
            return refuse(
                OMEGA_GPU_SERVING_ERR_BOUNDS,
                format_args!("shape {m}x{n}x{k} is past the bounds {}x{}x{}", b.max_m, b.max_n, b.max_k),
            );
        }
        let (x, w) = (vec![0u16; m as usize * k as usize], vec![0u16; n as usize * k as usize]);
        let mut y = vec![0f32; m as usize * n as usize];
        // SAFETY: x, w and y hold exactly M*K, N*K and M*N elements, owned here for the call; no info.
        unsafe { matmul::omega_gpu_matmul_bf16(m, n, k, x.as_ptr(), w.as_ptr(), y.as_mut_ptr(), core::ptr::null_mut()) }
    })
}

/// Runs `f` (seal or unseal) under the session lock, taken here; a failure is recorded.
fn locked(name: &'static str, f: impl FnOnce() -> crate::Result<()>) {
    guard(name, (), || {
        if runtime().holds_lock() {
            record(&Error::Lock(LOCK_HELD));
            return;
        }
        let _lock = crate::lock();
        if let Err(e) = f() {
            record(&e);
        }
    })
}

/// EXPERIMENTAL. Seals the session: from here until `omega_gpu_serving_release` (or the device's close),
/// every call that would ask the driver is refused with its stage, never made. A failure (no open device,
/// a platform that cannot count its driver calls, sealed already) is recorded as the last error.
#[no_mangle]
pub extern "C" fn omega_gpu_serving_seal() {
    locked("omega_gpu_serving_seal", || runtime().seal());
}

/// EXPERIMENTAL. Ends the seal (buffers freed while sealed go back to the platform) and the reservation.
#[no_mangle]
pub extern "C" fn omega_gpu_serving_release() {
    *sync::lock(&RESERVED) = None;
    locked("omega_gpu_serving_release", || if runtime().is_open() { runtime().unseal() } else { Ok(()) });
}

/// EXPERIMENTAL. Writes the platform's driver-call counters to `out` (see `OmegaGpuDriverStats`): a
/// sealed step leaves them unchanged. Needs no lock and asks the driver nothing.
///
/// # Safety
/// - `out` is NULL (refused) or points to a writable, aligned `OmegaGpuDriverStats`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_serving_driver_stats(out: *mut OmegaGpuDriverStats) -> c_int {
    guard("omega_gpu_serving_driver_stats", matmul::OMEGA_GPU_MATMUL_ERR_INTERNAL, || {
        // SAFETY: the caller's promise: NULL or a writable, aligned struct.
        let Some(out) = (unsafe { out.as_mut() }) else {
            return refuse(OMEGA_GPU_SERVING_ERR_NOT_COUNTED, format_args!("driver stats: out NULL"));
        };
        let Some(d) = runtime().driver_stats() else {
            return refuse(
                OMEGA_GPU_SERVING_ERR_NOT_COUNTED,
                format_args!("this platform does not count its driver calls"),
            );
        };
        *out = OmegaGpuDriverStats { ioctls: d.ioctls, mmaps: d.mmaps, munmaps: d.munmaps, refused: d.refused };
        OMEGA_GPU_SERVING_OK
    })
}
