//! `omega_gpu_cmdlist.h`: command lists — many launches, one submission, one completion wait — over
//! [`crate::cmdlist::CmdList`] on the process's runtime.
//!
//! Every function is a shell around one core call, as in `session.rs`. What C adds is the handle: C gets an
//! opaque `OmegaGpuCmdList *` that is a key, never dereferenced. Live lists sit in a registry under keys
//! that are addresses inside blocks of address space the registry owns for the life of the process and
//! hands out once each, so no pointer to any other object can equal a key, and a freed, foreign or made-up
//! pointer (`(OmegaGpuCmdList *)0x10`) is refused by name (stage `cmdlist <call>`): a double free or a use
//! after free is a named failure, and a stale key can never name a later list. Each list has its own mutex, so calls on different lists
//! from different threads do not wait for each other; calls on one list take turns.
//!
//! Only `omega_gpu_cmdlist_free` releases a list (it takes the session lock itself, as the contract says).
//! The registry holds each list in an `Option` that free empties under the list's mutex: a call that found
//! the list just before free removed it sees `None` and refuses it, and dropping its reference afterwards
//! releases nothing, so no call the contract lets run without the lock (`count`, `stamps`, ...) ever waits
//! for it.

use core::ffi::{c_char, c_int};
use core::ptr;
use std::collections::BTreeMap;

use super::boundary::{guard, null, or, status, Keys};
use super::engine::static_name;
use crate::cmdlist::{self as core_list, CmdList, CmdListOpts, CmdListStats};
use crate::error::{Error, Result, SettingError, Stage};
use crate::session::{runtime, RawLaunch};
use crate::sync::{self, Arc, Mutex};

/// Most launches one list holds; the next add is refused (`cmdlist add: OMEGA_GPU_CMDLIST_FULL`).
pub const OMEGA_GPU_CMDLIST_MAX_LAUNCHES: u32 = 2048;
/// `OmegaGpuCmdListOpts.barrier`: a barrier before each launch not marked independent, so dependent
/// launches never overlap (the default).
pub const OMEGA_GPU_CMDLIST_BARRIER_DEFAULT: u32 = 0;
/// `OmegaGpuCmdListOpts.barrier`: no ordering at all. TEST ONLY: launches may overlap and race.
pub const OMEGA_GPU_CMDLIST_BARRIER_NONE: u32 = 1;

const _: () = {
    assert!(OMEGA_GPU_CMDLIST_MAX_LAUNCHES == core_list::MAX_LAUNCHES);
    assert!(OMEGA_GPU_CMDLIST_BARRIER_DEFAULT == core_list::BARRIER_DEFAULT);
    assert!(OMEGA_GPU_CMDLIST_BARRIER_NONE == core_list::BARRIER_NONE);
};

/// EXPERIMENTAL. A command list, opaque to C: create it with `omega_gpu_cmdlist_create`, release it with
/// `omega_gpu_cmdlist_free`. The pointer is a key into the library's list of live lists, never dereferenced.
pub struct OmegaGpuCmdList {
    _opaque: [u8; 0],
}

/// A live list, or `None` once free took it out.
type Shared = Arc<Mutex<Option<CmdList<'static>>>>;

struct Registry {
    keys: Keys,
    lists: BTreeMap<usize, Shared>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry { keys: Keys::new(), lists: BTreeMap::new() });

fn register(list: CmdList<'static>) -> *mut OmegaGpuCmdList {
    let mut r = sync::lock(&REGISTRY);
    let key = r.keys.take();
    r.lists.insert(key, Arc::new(Mutex::new(Some(list))));
    ptr::without_provenance_mut(key)
}

/// The live list `list` names, or the refusal of a NULL or unknown pointer.
fn find(stage: Stage, list: *const OmegaGpuCmdList) -> Result<Shared> {
    if list.is_null() {
        return Err(null(stage, "list"));
    }
    let found = sync::lock(&REGISTRY).lists.get(&list.addr()).cloned();
    found.ok_or_else(|| unknown(stage, list))
}

/// The refusal of a pointer that is not a live list.
fn unknown(stage: Stage, list: *const OmegaGpuCmdList) -> Error {
    Error::Setting { stage, detail: SettingError::NotALiveList(list.addr()) }
}

/// Runs `f` on the live list `list` names under its mutex, or returns the refusal of a NULL, unknown or
/// just freed pointer.
fn with_list<R>(
    stage: Stage,
    list: *const OmegaGpuCmdList,
    f: impl FnOnce(&mut CmdList<'static>) -> Result<R>,
) -> Result<R> {
    let shared = find(stage, list)?;
    let mut guard = sync::lock(&shared);
    match guard.as_mut() {
        Some(l) => f(l),
        None => Err(unknown(stage, list)),
    }
}

/// EXPERIMENTAL. Creates an empty command list with `*opts` (NULL: the defaults, as an all-zero
/// `OmegaGpuCmdListOpts`) and writes its handle to `*out`. Takes the session lock itself: call it WITHOUT
/// the lock (a caller that holds it is refused, stage `lock`, where the lock would deadlock). The device
/// must be open and the process not latched. Allocates the list's stamp area (16 bytes per launch, for
/// `OMEGA_GPU_CMDLIST_MAX_LAUNCHES`). Returns 0, or -1 with the stage named and `*out` set to NULL
/// (`cmdlist create` for an unknown barrier mode or a NULL `out`).
///
/// # Safety
/// - `opts` is NULL or points to a readable, aligned `OmegaGpuCmdListOpts`.
/// - `out` is NULL (refused) or points to a writable, aligned `OmegaGpuCmdList *`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_cmdlist_create(opts: *const CmdListOpts, out: *mut *mut OmegaGpuCmdList) -> c_int {
    status("omega_gpu_cmdlist_create", || {
        // SAFETY: by the caller's promise `out` is NULL or points to a writable pointer.
        let out = unsafe { out.as_mut() }.ok_or(null(Stage::CmdListCreate, "out"))?;
        *out = ptr::null_mut();
        // SAFETY: by the caller's promise `opts` is NULL or points to a readable OmegaGpuCmdListOpts.
        let opts = unsafe { opts.as_ref() };
        *out = register(CmdList::create(runtime(), opts)?);
        Ok(())
    })
}

/// EXPERIMENTAL. Releases the list and its stamp area; the handle is invalid from then on (every later call
/// with it, a second free included, is refused by name). A call on the same list in progress on another
/// thread is waited for; one that starts after the handle went is refused. Takes the session lock itself: call it WITHOUT the
/// lock; a caller that holds it is refused (stage `lock`) and the list stays as it was, so it can be freed
/// properly afterwards. After an uncertain completion the stamp area is parked (kept allocated, never
/// released), since the device may still write it. NULL is a no-op returning 0. Returns 0, or -1 with the
/// stage named (`cmdlist free` for a pointer that is not a live list).
#[no_mangle]
pub extern "C" fn omega_gpu_cmdlist_free(list: *mut OmegaGpuCmdList) -> c_int {
    status("omega_gpu_cmdlist_free", || {
        if list.is_null() {
            return Ok(());
        }
        if runtime().holds_lock() {
            return Err(Error::Lock("cmdlist free takes the session lock itself: call it without the lock"));
        }
        let Some(shared) = sync::lock(&REGISTRY).lists.remove(&list.addr()) else {
            return Err(unknown(Stage::CmdListFree, list));
        };
        // Waits for a call on this list that is in progress (calls on one list take turns), then takes the
        // list out, so that the reference that call still holds releases nothing; the list is released here,
        // under the session lock, after the list's mutex is let go (a call on the list that holds the
        // session lock could otherwise wait for us while we wait for the lock).
        let taken = sync::lock(&shared).take();
        drop(shared);
        Ok(taken.ok_or_else(|| unknown(Stage::CmdListFree, list))?.free()?)
    })
}

/// EXPERIMENTAL. Forgets every recorded launch; the options and statistics stay. Caller holds the lock, as
/// for add (without it: -1, stage `lock`, and the list is unchanged). Refused on a latched list (stage
/// `cmdlist reset`). Returns 0 or -1.
#[no_mangle]
pub extern "C" fn omega_gpu_cmdlist_reset(list: *mut OmegaGpuCmdList) -> c_int {
    status("omega_gpu_cmdlist_reset", || with_list(Stage::CmdListReset, list, |l| Ok(l.reset()?)))
}

/// EXPERIMENTAL. Launches recorded. 0, with the stage named, for a pointer that is not a live list. No lock
/// needed; it never waits for the session lock (a free on another thread does not make it release the
/// list).
#[no_mangle]
pub extern "C" fn omega_gpu_cmdlist_count(list: *const OmegaGpuCmdList) -> u32 {
    or("omega_gpu_cmdlist_count", 0, || with_list(Stage::CmdListCount, list, |l| Ok(l.count())))
}

/// EXPERIMENTAL. Records launch `*L` (its argument words are copied) after the checks
/// `omega_gpu_session_launch` makes (a refusal names stage `launch arguments`; nothing is recorded), and
/// writes its index to `*index_out` when given. Caller holds the lock; the device is open. Refused past
/// `OMEGA_GPU_CMDLIST_MAX_LAUNCHES` (`cmdlist add: OMEGA_GPU_CMDLIST_FULL`) and on a latched list. Returns 0
/// or -1.
///
/// # Safety
/// - `L` is NULL (refused) or points to a readable, aligned `OmegaGpuLaunch` whose `args` is NULL (refused)
///   or points to `n_args` readable, aligned `uint32_t` words.
/// - `index_out` is NULL or points to a writable, aligned `uint32_t`.
#[no_mangle]
#[allow(non_snake_case)]
pub unsafe extern "C" fn omega_gpu_cmdlist_add(
    list: *mut OmegaGpuCmdList,
    L: *const RawLaunch,
    index_out: *mut u32,
) -> c_int {
    status("omega_gpu_cmdlist_add", || {
        let stage = Stage::CmdListAdd;
        let l = find(stage, list)?;
        runtime().require_lock(stage)?;
        // SAFETY: by the caller's promise `L` is NULL or points to a readable OmegaGpuLaunch.
        let launch = unsafe { L.as_ref() }.ok_or(Error::LaunchArguments(crate::error::LaunchArgError::NullLaunch))?;
        let mut g = sync::lock(&l);
        let cl = g.as_mut().ok_or_else(|| unknown(stage, list))?;
        // SAFETY: by the caller's promise `launch.args` is NULL or points to `launch.n_args` words, read (and
        // copied) during this call only.
        let added = unsafe { cl.add_raw(launch) };
        drop(g);
        let i = added?;
        // SAFETY: by the caller's promise `index_out` is NULL or points to a writable u32.
        if let Some(o) = unsafe { index_out.as_mut() } {
            *o = i;
        }
        Ok(())
    })
}

/// EXPERIMENTAL. Lets launch `index` overlap the launch before it (no barrier before it). Refused (stage
/// `cmdlist mark independent`) for an index the list does not hold and on a latched list. Returns 0 or -1.
#[no_mangle]
pub extern "C" fn omega_gpu_cmdlist_mark_independent(list: *mut OmegaGpuCmdList, index: u32) -> c_int {
    status("omega_gpu_cmdlist_mark_independent", || {
        with_list(Stage::CmdListMarkIndependent, list, |l| Ok(l.mark_independent(index)?))
    })
}

/// EXPERIMENTAL. Submits every recorded launch as one submission and waits once for its two completion
/// markers, so it returns when the chip is done. Caller holds the lock, device open, not latched. Each wait's
/// limit is `OmegaGpuCmdListOpts.timeout_ms`, or the sum of the launches' own `timeout_ms` when that is 0.
/// `*stats` (when given) receives the list's statistics after the call, whatever it returned. Returns 0;
/// -1 with the stage named (`cmdlist submit` for an empty list, a list of a device closed since create, or
/// a launch whose code was freed since the add; nothing is submitted); `OMEGA_GPU_SESSION_CANCELLED` when
/// a cancel request was seen. An uncertain completion (a marker timeout, a refused poll, a cancel after
/// submit) latches the list and then the process: `omega_gpu_cmdlist_is_latched` and
/// `omega_gpu_session_is_blocked` return 1.
///
/// # Safety
/// - `stats` is NULL or points to a writable, aligned `OmegaGpuCmdListStats`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_cmdlist_submit(list: *mut OmegaGpuCmdList, stats: *mut CmdListStats) -> c_int {
    status("omega_gpu_cmdlist_submit", || {
        with_list(Stage::CmdListSubmit, list, |l| {
            let r = l.submit();
            // SAFETY: by the caller's promise `stats` is NULL or points to a writable OmegaGpuCmdListStats.
            if let Some(s) = unsafe { stats.as_mut() } {
                *s = l.stats();
            }
            r.map(drop).map_err(Error::from)
        })
    })
}

/// EXPERIMENTAL. 1 once an uncertain completion latched this list, 0 if not; -1 (stage named) for a pointer
/// that is not a live list. A latched list refuses everything but free and the queries. No lock needed.
#[no_mangle]
pub extern "C" fn omega_gpu_cmdlist_is_latched(list: *const OmegaGpuCmdList) -> c_int {
    or("omega_gpu_cmdlist_is_latched", -1, || {
        with_list(Stage::CmdListIsLatched, list, |l| Ok(c_int::from(l.is_latched())))
    })
}

/// EXPERIMENTAL. Copies the completion timestamps (platform-clock ns) of the launches of the last completed
/// submission, in list order, to `out[0..]`, at most `max` of them; returns how many were written (0 before
/// the first submission, after a reset, or for a failed one). A launch that released no stamp reads 0. No
/// lock needed; it never waits for the session lock. 0, with the stage named, for a pointer that is not a live list or a NULL `out` with `max`
/// above 0.
///
/// # Safety
/// - `out` is NULL (refused unless `max` is 0) or points to `max` writable, aligned `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_cmdlist_stamps(list: *const OmegaGpuCmdList, out: *mut u64, max: usize) -> usize {
    or("omega_gpu_cmdlist_stamps", 0, || {
        let stage = Stage::CmdListStamps;
        with_list(stage, list, |l| {
            if max == 0 {
                return Ok(0);
            }
            if out.is_null() {
                return Err(Error::Setting { stage, detail: SettingError::NullArray { what: "out", max } });
            }
            // At most one stamp per launch of the last submission is written, so the slice is never longer
            // than that (a `max` past what `out` can hold, `SIZE_MAX` say, names no more memory than this).
            let n = max.min(l.stamps_available());
            // SAFETY: non-null (checked) and, by the caller's promise, valid for `max >= n` writable u64 that
            // nothing else uses during the call.
            let out = unsafe { core::slice::from_raw_parts_mut(out, n) };
            Ok(l.stamps(out))
        })
    })
}

/// EXPERIMENTAL. The fixed name of a barrier mode: `"OMEGA_GPU_CMDLIST_BARRIER_DEFAULT"`,
/// `"OMEGA_GPU_CMDLIST_BARRIER_NONE"`, or `"OMEGA_GPU_CMDLIST_BARRIER_UNKNOWN"` for a value no mode has. A
/// static string. Any thread.
#[no_mangle]
pub extern "C" fn omega_gpu_cmdlist_barrier_name(mode: u32) -> *const c_char {
    guard("omega_gpu_cmdlist_barrier_name", c"OMEGA_GPU_CMDLIST_BARRIER_UNKNOWN".as_ptr(), || {
        static_name(core_list::barrier_name(mode))
    })
}
