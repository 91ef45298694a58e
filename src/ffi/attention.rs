//! `omega_gpu_attention_api.h`: the attention library's C entries (the contract's section 9.5,
//! EXPERIMENTAL), over [`crate::libs::attention`].
//!
//! Design choices:
//!
//! 1. **A shell over the library**, as the matmul entries are: an entry checks its pointers, takes the
//!    session lock itself (a caller that holds it is refused, LD-4), opens the device when it is closed
//!    (and leaves it open: `omega_gpu_session_close` closes it), runs the typed call in one scope and lets
//!    the lock go. The loaded module, the workspace and the staging buffers are kept between calls.
//! 2. **The pool is device memory, one per process.** `omega_gpu_attention_pool_alloc` allocates it in
//!    device memory (no CPU view: HBM, not a host mapping) and hands back an opaque key, never a CPU
//!    address. The host writes K/V into it with `omega_gpu_attention_pool_write` (a staged copy that has
//!    landed when the call returns, so the next call's kernels see it) or has the GPU append a step's rows
//!    (`omega_gpu_kv_append_bf16_mem`, over a pool of its own in an `OmegaGpuMem`).
//! 3. **Host-visible tables are checked before launch**: the host-pointer paged entries refuse a page
//!    index outside the pool or a length past its table (`OMEGA_GPU_ATTN_ERR_TABLE`, stage `attention
//!    table`) and nothing runs. Device-resident tables (the `_mem` entries) are clamped and flagged by the
//!    kernels, never faulted on; the call reads the flags back and returns `_ERR_TABLE` after the run.
//! 4. **Every failure is named**: a negative `OMEGA_GPU_ATTN_ERR_*` (`omega_gpu_attention_rc_name`), the
//!    text `{stage}: {cause}` as the library's last error and the session's, the stage and code in the
//!    call's `OmegaGpuAttnInfo`. An uncertain completion latches the process: `_ERR_UNCERTAIN`, then
//!    every later call `_ERR_BLOCKED`.

use core::ffi::{c_char, c_int, c_void};
use core::ptr;
use std::time::Instant;

use super::boundary::{guard, library_session_rc, Keys, LibrarySessionCodes, TextBuffer};
use crate::error::{Error, Stage};
use crate::libs::attention::{
    AppendShape, Attention, AttentionError, DecodeShape, DeviceSpan, Done, Elem, Failed, GqaShape, Info, KeptAttention,
    Kind, KvLayout, LayoutError, TableDetail,
};
use crate::session::{runtime, GpuMem};
use crate::sync::{self, Mutex};
use crate::{Device, DeviceScalar, Gpu, Kept, Scope};

/// Success.
pub const OMEGA_GPU_ATTN_OK: i32 = 0;
/// A NULL or misaligned pointer, unknown flags, or an `OmegaGpuMem` that is not a live buffer (stage
/// `attention args`).
pub const OMEGA_GPU_ATTN_ERR_ARGS: i32 = -1;
/// Heads, lengths or buffers that cannot go together (stage `attention shape`).
pub const OMEGA_GPU_ATTN_ERR_SHAPE: i32 = -2;
/// A KV layout the kernels cannot read (stage `attention layout`).
pub const OMEGA_GPU_ATTN_ERR_LAYOUT: i32 = -3;
/// A page index outside the pool or a length past its table (stage `attention table`).
pub const OMEGA_GPU_ATTN_ERR_TABLE: i32 = -4;
/// No pool, a second pool, a pointer that is not the pool, a write outside it, or a pool whose device was
/// closed (stage `attention pool`).
pub const OMEGA_GPU_ATTN_ERR_POOL: i32 = -5;
/// The caller holds the session lock, which the entries take themselves (stage `lock`, LD-4).
pub const OMEGA_GPU_ATTN_ERR_LOCK_HELD: i32 = -6;
/// Refused: the process is latched after an uncertain completion (stage `attention`).
pub const OMEGA_GPU_ATTN_ERR_BLOCKED: i32 = -7;
/// This call's completion was uncertain: the process latched (stage `launch`).
pub const OMEGA_GPU_ATTN_ERR_UNCERTAIN: i32 = -8;
/// No platform, or the device did not open (stage `platform` or `open`).
pub const OMEGA_GPU_ATTN_ERR_DEVICE: i32 = -9;
/// A device allocation failed (stage `alloc`).
pub const OMEGA_GPU_ATTN_ERR_ALLOC: i32 = -10;
/// The `attention` module did not load (stage `load`).
pub const OMEGA_GPU_ATTN_ERR_LOAD: i32 = -11;
/// Moving bytes between host and device failed (stage `write`, `read` or `sync`).
pub const OMEGA_GPU_ATTN_ERR_COPY: i32 = -12;
/// A launch was refused or its kernel faulted (stage `launch arguments` or `launch`).
pub const OMEGA_GPU_ATTN_ERR_LAUNCH: i32 = -13;
/// A cancel request stopped the call before its next launch (stage `launch`).
pub const OMEGA_GPU_ATTN_ERR_CANCELLED: i32 = -14;
/// A panic inside the library (stage `internal`).
pub const OMEGA_GPU_ATTN_ERR_INTERNAL: i32 = -15;

/// The dense entries' `seq_len` / `kv_len` argument: OR this bit in for a causal mask (each query row
/// attends the keys up to its own position). The length is the low 31 bits.
pub const OMEGA_GPU_ATTN_CAUSAL: u32 = 0x8000_0000;
/// `OmegaGpuKvLayout.dtype`: bf16, the only element type of the pool.
pub const OMEGA_GPU_ATTN_DTYPE_BF16: u32 = 1;
/// `flags` of `omega_gpu_paged_attention_bf16_mem`: q holds bf16 (else f32).
pub const OMEGA_GPU_ATTN_FLAG_Q_BF16: u32 = 1;
/// `flags` of `omega_gpu_paged_attention_bf16_mem`: out holds bf16 (else f32).
pub const OMEGA_GPU_ATTN_FLAG_OUT_BF16: u32 = 2;
/// `flags` of `omega_gpu_kv_append_bf16_mem`: k_new and v_new hold f32 (else bf16).
pub const OMEGA_GPU_ATTN_APPEND_F32: u32 = 1;
/// `flags` of `omega_gpu_kv_append_bf16_mem`: store `lens[b] + 1` on the GPU after the append.
pub const OMEGA_GPU_ATTN_APPEND_ADVANCE: u32 = 2;

/// `OmegaGpuAttnInfo.kind`: nothing ran.
pub const OMEGA_GPU_ATTN_KIND_NONE: u32 = 0;
/// Dense GQA in f32.
pub const OMEGA_GPU_ATTN_KIND_GQA: u32 = 1;
/// Paged decode (split-KV partials merged by the combine's launch or in their cluster: `launches` 2 or 1).
pub const OMEGA_GPU_ATTN_KIND_DECODE: u32 = 2;
/// The K/V append.
pub const OMEGA_GPU_ATTN_KIND_APPEND: u32 = 3;

/// `OmegaGpuAttnInfo.flags`: host-pointer operands, staged through the copy path.
pub const OMEGA_GPU_ATTN_INFO_HOST_POINTERS: u32 = 1;
/// `OmegaGpuAttnInfo.flags`: this call opened the device.
pub const OMEGA_GPU_ATTN_INFO_OPENED: u32 = 2;

/// `OmegaGpuAttnInfo.stage`: no failure.
pub const OMEGA_GPU_ATTN_STAGE_NONE: u32 = 0;
/// `attention args`.
pub const OMEGA_GPU_ATTN_STAGE_ARGS: u32 = 1;
/// `attention shape`.
pub const OMEGA_GPU_ATTN_STAGE_SHAPE: u32 = 2;
/// `attention layout`.
pub const OMEGA_GPU_ATTN_STAGE_LAYOUT: u32 = 3;
/// `attention table`.
pub const OMEGA_GPU_ATTN_STAGE_TABLE: u32 = 4;
/// `attention pool`.
pub const OMEGA_GPU_ATTN_STAGE_POOL: u32 = 5;
/// `lock`.
pub const OMEGA_GPU_ATTN_STAGE_LOCK: u32 = 6;
/// `attention` (refused after a latch).
pub const OMEGA_GPU_ATTN_STAGE_ATTENTION: u32 = 7;
/// `platform`.
pub const OMEGA_GPU_ATTN_STAGE_PLATFORM: u32 = 8;
/// `open`.
pub const OMEGA_GPU_ATTN_STAGE_OPEN: u32 = 9;
/// `alloc`.
pub const OMEGA_GPU_ATTN_STAGE_ALLOC: u32 = 10;
/// `load`.
pub const OMEGA_GPU_ATTN_STAGE_LOAD: u32 = 11;
/// `write` (or `sync`).
pub const OMEGA_GPU_ATTN_STAGE_WRITE: u32 = 12;
/// `read`.
pub const OMEGA_GPU_ATTN_STAGE_READ: u32 = 13;
/// `launch arguments`.
pub const OMEGA_GPU_ATTN_STAGE_LAUNCH_ARGUMENTS: u32 = 14;
/// `launch`.
pub const OMEGA_GPU_ATTN_STAGE_LAUNCH: u32 = 15;
/// Any other stage (the text says which).
pub const OMEGA_GPU_ATTN_STAGE_OTHER: u32 = 16;

const _: () = {
    assert!(OMEGA_GPU_ATTN_KIND_GQA == Kind::Gqa as u32);
    assert!(OMEGA_GPU_ATTN_KIND_DECODE == Kind::Decode as u32);
    assert!(OMEGA_GPU_ATTN_KIND_APPEND == Kind::Append as u32);
    assert!(OMEGA_GPU_ATTN_APPEND_F32 == crate::kernels::attention::APPEND_F32);
    assert!(OMEGA_GPU_ATTN_APPEND_ADVANCE == crate::kernels::attention::APPEND_ADVANCE);
};

/// EXPERIMENTAL. What an attention call ran and what it cost: 176 bytes, filled on success and on failure
/// (when the pointer is not NULL).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OmegaGpuAttnInfo {
    /// `OMEGA_GPU_ATTN_KIND_*`: the kernels that ran (`_NONE`: the call stopped before planning).
    pub kind: u32,
    /// `OMEGA_GPU_ATTN_INFO_*` bits.
    pub flags: u32,
    /// Batch: the decode's sequences, 1 otherwise.
    pub batch: u32,
    /// Heads of q.
    pub q_heads: u32,
    /// Heads of K and V.
    pub kv_heads: u32,
    /// Elements of one head.
    pub head_dim: u32,
    /// Dense: the keys. Decode: what the tables can hold (slots times page tokens).
    pub kv_len: u32,
    /// Rows of q per sequence (1 for a decode).
    pub q_rows: u32,
    /// The layout's page size (0: no pages).
    pub page_tokens: u32,
    /// How many ranges the decode cut each sequence's KV into (1 for the other kernels).
    pub splits: u32,
    /// The 16-token tiles of each range.
    pub tiles_per_split: u32,
    /// Kernel launches of the call.
    pub launches: u32,
    /// The grid of the widest launch, in CTAs.
    pub ctas: u32,
    /// The kernels' status bits: 1 a page index outside the pool, 2 a length past the table, 4 a negative
    /// length (device-resident tables; 0 when sound).
    pub status: u32,
    /// `OMEGA_GPU_ATTN_STAGE_*` of a failure (`_NONE` on success).
    pub stage: u32,
    /// What the entry returned.
    pub rc: i32,
    /// K and V bytes of the sequences: exact for host-visible lengths, the tables' capacity otherwise.
    pub kv_bytes: u64,
    /// Device time, ns on the platform clock (virtual on the simulator): every launch, submit to completion.
    pub device_ns: u64,
    /// Host time of the entry, ns, lock and copies included.
    pub host_ns: u64,
    /// Bytes copied up (staged operands, the cleared status word).
    pub h2d_bytes: u64,
    /// Bytes copied down (the staged output, the status word).
    pub d2h_bytes: u64,
    /// Zero; room for later fields.
    pub reserved: [u32; 18],
}

static_assertions::assert_eq_size!(OmegaGpuAttnInfo, [u8; 176]);

/// EXPERIMENTAL. Where a paged bf16 pool keeps its rows (64 bytes; every stride in elements): page `p` of
/// KV head `h` holds its K rows at `p * page_stride + h * head_stride`, token-major with `head_dim`
/// contiguous elements a token, and its V rows `v_offset` further. `omega_gpu_attention_kv_layout` fills
/// the packed one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OmegaGpuKvLayout {
    /// Tokens per page: a positive multiple of 16 (16 and 64 are tested; small pages cost a table read
    /// and a scattered 4 KB run per head every 16 tokens).
    pub page_tokens: u32,
    /// KV heads.
    pub kv_heads: u32,
    /// Elements per head and token: 32, 64 or 128.
    pub head_dim: u32,
    /// `OMEGA_GPU_ATTN_DTYPE_BF16`.
    pub dtype: u32,
    /// Pages in the pool.
    pub pages: u32,
    /// Zero.
    pub reserved0: u32,
    /// Elements from one KV head's rows of a page to the next head's (multiple of 8).
    pub head_stride: u64,
    /// Elements from a head's K rows to its V rows (multiple of 8).
    pub v_offset: u64,
    /// Elements from one page to the next (multiple of 8).
    pub page_stride: u64,
    /// Zero.
    pub reserved: [u32; 4],
}

static_assertions::assert_eq_size!(OmegaGpuKvLayout, [u8; 64]);

impl OmegaGpuKvLayout {
    fn typed(&self) -> Result<KvLayout, LayoutError> {
        if self.dtype != OMEGA_GPU_ATTN_DTYPE_BF16 {
            return Err(LayoutError::Dtype { dtype: self.dtype });
        }
        Ok(KvLayout {
            page_tokens: self.page_tokens,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            pages: self.pages,
            head_stride: self.head_stride,
            v_offset: self.v_offset,
            page_stride: self.page_stride,
        })
    }
}

/// The C entries' pool's failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
enum PoolError {
    #[error("attention pool: no pool is allocated (omega_gpu_attention_pool_alloc first)")]
    Absent,
    #[error("attention pool: a pool of {bytes} bytes is allocated already (omega_gpu_attention_pool_free first)")]
    Twice { bytes: usize },
    #[error("attention pool: {addr:#x} is not the pool omega_gpu_attention_pool_alloc returned")]
    NotThePool { addr: usize },
    #[error("attention pool: the pool's device was closed since its allocation, and its memory went with the close")]
    Closed,
    #[error("attention pool: {bytes} bytes: a pool is a positive, even number of bytes")]
    Size { bytes: usize },
    #[error("attention pool: bytes {offset} .. {offset} + {len} are outside the pool's {bytes} (or not whole bf16)")]
    Range { offset: usize, len: usize, bytes: usize },
    #[error("attention pool: the layout's {needs} bytes are past the pool's {bytes}")]
    Short { needs: u64, bytes: usize },
}

/// An entry's own failures, before or around the library's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum EntryError {
    #[error("attention args: {0} is NULL")]
    Null(&'static str),
    #[error("attention args: {what} ({addr:#x}) is not aligned to its {align}-byte elements")]
    Misaligned { what: &'static str, addr: usize, align: usize },
    #[error("attention args: flags {flags:#x} has bits no entry defines (known: {known:#x})")]
    Flags { flags: u32, known: u32 },
    #[error("attention table: {0}")]
    Table(TableDetail),
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error(transparent)]
    Attention(#[from] AttentionError),
    #[error(transparent)]
    Session(#[from] Error),
}

impl From<LayoutError> for EntryError {
    fn from(e: LayoutError) -> Self {
        EntryError::Attention(e.into())
    }
}

impl From<crate::libs::attention::ShapeError> for EntryError {
    fn from(e: crate::libs::attention::ShapeError) -> Self {
        EntryError::Attention(e.into())
    }
}

impl EntryError {
    fn stage(&self) -> Stage {
        match self {
            EntryError::Null(_) | EntryError::Misaligned { .. } | EntryError::Flags { .. } => Stage::AttentionArgs,
            EntryError::Table(_) => Stage::AttentionTable,
            EntryError::Pool(_) => Stage::AttentionPool,
            EntryError::Attention(e) => e.stage(),
            EntryError::Session(e) => e.stage(),
        }
    }

    fn rc(&self) -> i32 {
        let session = match self {
            EntryError::Null(_) | EntryError::Misaligned { .. } | EntryError::Flags { .. } => {
                return OMEGA_GPU_ATTN_ERR_ARGS
            }
            EntryError::Table(_) | EntryError::Attention(AttentionError::Table { .. }) => {
                return OMEGA_GPU_ATTN_ERR_TABLE
            }
            EntryError::Pool(_) => return OMEGA_GPU_ATTN_ERR_POOL,
            EntryError::Attention(AttentionError::Shape(_)) => return OMEGA_GPU_ATTN_ERR_SHAPE,
            EntryError::Attention(AttentionError::Layout(_)) => return OMEGA_GPU_ATTN_ERR_LAYOUT,
            EntryError::Attention(AttentionError::List(_)) => return OMEGA_GPU_ATTN_ERR_LAUNCH,
            EntryError::Attention(AttentionError::Device(e)) | EntryError::Session(e) => e,
        };
        library_session_rc(session, &SESSION_CODES)
    }
}

/// The session errors' codes of this library.
const SESSION_CODES: LibrarySessionCodes = LibrarySessionCodes {
    args_stage: Stage::AttentionArgs,
    uncertain: OMEGA_GPU_ATTN_ERR_UNCERTAIN,
    lock_held: OMEGA_GPU_ATTN_ERR_LOCK_HELD,
    blocked: OMEGA_GPU_ATTN_ERR_BLOCKED,
    cancelled: OMEGA_GPU_ATTN_ERR_CANCELLED,
    device: OMEGA_GPU_ATTN_ERR_DEVICE,
    args: OMEGA_GPU_ATTN_ERR_ARGS,
    alloc: OMEGA_GPU_ATTN_ERR_ALLOC,
    load: OMEGA_GPU_ATTN_ERR_LOAD,
    copy: OMEGA_GPU_ATTN_ERR_COPY,
    launch: OMEGA_GPU_ATTN_ERR_LAUNCH,
    internal: OMEGA_GPU_ATTN_ERR_INTERNAL,
};

/// `OMEGA_GPU_ATTN_STAGE_*` of `stage`.
fn stage_code(stage: Stage) -> u32 {
    const CODES: [(Stage, u32); 17] = [
        (Stage::AttentionArgs, OMEGA_GPU_ATTN_STAGE_ARGS),
        (Stage::AttentionShape, OMEGA_GPU_ATTN_STAGE_SHAPE),
        (Stage::AttentionLayout, OMEGA_GPU_ATTN_STAGE_LAYOUT),
        (Stage::AttentionTable, OMEGA_GPU_ATTN_STAGE_TABLE),
        (Stage::AttentionPool, OMEGA_GPU_ATTN_STAGE_POOL),
        (Stage::Lock, OMEGA_GPU_ATTN_STAGE_LOCK),
        (Stage::Attention, OMEGA_GPU_ATTN_STAGE_ATTENTION),
        (Stage::Platform, OMEGA_GPU_ATTN_STAGE_PLATFORM),
        (Stage::Open, OMEGA_GPU_ATTN_STAGE_OPEN),
        (Stage::Alloc, OMEGA_GPU_ATTN_STAGE_ALLOC),
        (Stage::Load, OMEGA_GPU_ATTN_STAGE_LOAD),
        (Stage::Write, OMEGA_GPU_ATTN_STAGE_WRITE),
        (Stage::Sync, OMEGA_GPU_ATTN_STAGE_WRITE),
        (Stage::Read, OMEGA_GPU_ATTN_STAGE_READ),
        (Stage::LaunchArguments, OMEGA_GPU_ATTN_STAGE_LAUNCH_ARGUMENTS),
        (Stage::Launch, OMEGA_GPU_ATTN_STAGE_LAUNCH),
        (Stage::Keep, OMEGA_GPU_ATTN_STAGE_POOL),
    ];
    CODES.iter().find(|(s, _)| *s == stage).map_or(OMEGA_GPU_ATTN_STAGE_OTHER, |&(_, c)| c)
}

/// The C entries' pool.
struct Pool {
    key: usize,
    bytes: usize,
    mem: Kept<Device<u16>>,
}

/// Staging buffers of the host-pointer entries, by role.
#[derive(Default)]
struct Staging {
    q: Option<Kept<Device<f32>>>,
    k: Option<Kept<Device<f32>>>,
    v: Option<Kept<Device<f32>>>,
    out: Option<Kept<Device<f32>>>,
    tables: Option<Kept<Device<i32>>>,
    lens: Option<Kept<Device<i32>>>,
}

impl Staging {
    const fn new() -> Self {
        Staging { q: None, k: None, v: None, out: None, tables: None, lens: None }
    }
}

/// What the library keeps between calls.
struct Library {
    attention: Option<KeptAttention>,
    pool: Option<Pool>,
    staging: Staging,
    keys: Keys,
}

static LIBRARY: Mutex<Library> =
    Mutex::new(Library { attention: None, pool: None, staging: Staging::new(), keys: Keys::new() });

/// The library's last failure text, and the buffer `omega_gpu_attention_last_error` points into.
static LAST_ERROR: Mutex<String> = Mutex::new(String::new());
static LAST_ERROR_TEXT: TextBuffer = TextBuffer::new();

const LOCK_HELD: &str = "the attention library's entries take the session lock themselves: call them without it (LD-4)";

/// Keeps `text` where both `omega_gpu_attention_last_error` and `omega_gpu_session_last_error` find it.
fn record(text: &dyn std::fmt::Display) {
    let s = text.to_string();
    super::boundary::record(&s);
    *sync::lock(&LAST_ERROR) = s;
}

/// One entry's call: its info as far as it got, its flags, its outcome.
struct Call {
    info: Info,
    flags: u32,
    result: Result<(), EntryError>,
}

impl Call {
    fn new(info: Info, flags: u32) -> Self {
        Call { info, flags, result: Ok(()) }
    }

    fn fail(mut self, e: impl Into<EntryError>) -> Self {
        self.result = Err(e.into());
        self
    }

    /// Takes a library call's info (keeping the staged bytes counted so far) and its outcome.
    fn took<'s>(&mut self, r: Result<Done<'s>, Failed<'s>>) -> Result<(), EntryError> {
        let (h2d, d2h) = (self.info.h2d_bytes, self.info.d2h_bytes);
        let (info, result) = match r {
            Ok(d) => (d.info, Ok(())),
            Err(f) => (*f.info, Err(EntryError::from(f.error))),
        };
        self.info = Info { h2d_bytes: info.h2d_bytes + h2d, d2h_bytes: info.d2h_bytes + d2h, ..info };
        result
    }

    /// Writes the info (when `out` is not NULL), records a failure, returns the code.
    ///
    /// # Safety
    /// - `out` is NULL or points to a writable, aligned `OmegaGpuAttnInfo`.
    unsafe fn finish(self, out: *mut OmegaGpuAttnInfo, start: Instant) -> c_int {
        let mut info = self.info;
        info.host_ns = start.elapsed().as_nanos() as u64;
        let rc = match &self.result {
            Ok(()) => OMEGA_GPU_ATTN_OK,
            Err(e) => {
                record(e);
                info.stage = Some(e.stage());
                e.rc()
            }
        };
        // SAFETY: by the caller's promise `out` is NULL or a writable OmegaGpuAttnInfo.
        if let Some(out) = unsafe { out.as_mut() } {
            *out = OmegaGpuAttnInfo {
                kind: info.kind.map_or(OMEGA_GPU_ATTN_KIND_NONE, |k| k as u32),
                flags: self.flags,
                batch: info.batch,
                q_heads: info.q_heads,
                kv_heads: info.kv_heads,
                head_dim: info.head_dim,
                kv_len: info.kv_len,
                q_rows: info.q_rows,
                page_tokens: info.page_tokens,
                splits: info.splits,
                tiles_per_split: info.tiles_per_split,
                launches: info.launches,
                ctas: info.ctas,
                status: info.status,
                stage: info.stage.map_or(OMEGA_GPU_ATTN_STAGE_NONE, stage_code),
                rc,
                kv_bytes: info.kv_bytes,
                device_ns: info.device_ns,
                host_ns: info.host_ns,
                h2d_bytes: info.h2d_bytes,
                d2h_bytes: info.d2h_bytes,
                reserved: [0; 18],
            };
        }
        rc
    }
}

/// Runs `body` in a scope of the open device with the library's handle, the session lock taken here and
/// the device opened when it was closed; refused when the caller holds the lock (LD-4) or the process is
/// latched.
fn with_device(
    call: Call,
    body: impl for<'s> FnOnce(&mut Library, &'s Scope<'s>, Gpu<'s>, &Attention<'s>, &mut Call) -> Result<(), EntryError>,
) -> Call {
    let rt = runtime();
    if rt.holds_lock() {
        return call.fail(Error::Lock(LOCK_HELD));
    }
    if rt.is_blocked() {
        return call.fail(Error::Latched(Stage::Attention));
    }
    let lock = crate::lock();
    let opened = !lock.is_open();
    let dev = match lock.open() {
        Ok(d) => d,
        Err(e) => return call.fail(e.error),
    };
    let mut call = call;
    if opened {
        call.flags |= OMEGA_GPU_ATTN_INFO_OPENED;
    }
    let mut lib = sync::lock(&LIBRARY);
    dev.scope(|s, gpu| {
        let att = match Attention::resume(s, lib.attention.take()) {
            Ok(a) => a,
            Err(e) => return call.fail(e),
        };
        let r = body(&mut lib, s, gpu, &att, &mut call);
        lib.attention = Some(att.keep());
        Call { result: r, ..call }
    })
    .value()
}

/// `n` elements of `T` at `p` (`n` of 0 takes a dangling slice), or the refusal of NULL or misalignment.
///
/// # Safety
/// - `p` is NULL (refused) or points to `n` elements of `T` readable for the call and, when `out`, writable
///   and touched by nothing else during it.
unsafe fn host<'a, T>(what: &'static str, p: *const T, n: usize) -> Result<&'a [T], EntryError> {
    if p.is_null() {
        return Err(EntryError::Null(what));
    }
    if !p.is_aligned() {
        return Err(EntryError::Misaligned { what, addr: p.addr(), align: align_of::<T>() });
    }
    // SAFETY: non-null and aligned (checked); `n` readable elements by the caller's promise.
    Ok(unsafe { core::slice::from_raw_parts(p, n) })
}

/// As [`host`], writable.
///
/// # Safety
/// - As [`host`]'s, and the elements are writable and touched by nothing else during the call.
unsafe fn host_mut<'a, T>(what: &'static str, p: *mut T, n: usize) -> Result<&'a mut [T], EntryError> {
    // SAFETY: forwarded; the checks are the same.
    unsafe { host(what, p.cast_const(), n)? };
    // SAFETY: non-null and aligned (checked above); writable and unaliased by the caller's promise.
    Ok(unsafe { core::slice::from_raw_parts_mut(p, n) })
}

/// The staging buffer in `slot` with `data` written (of at least `len` elements), allocated again when too
/// small or of a closed device.
fn staged<'s: 'a, 'a, T: DeviceScalar>(
    s: &'s Scope<'s>,
    slot: &'a mut Option<Kept<Device<T>>>,
    data: &[T],
    len: usize,
    moved: &mut u64,
) -> Result<&'a mut crate::Mem<'static, Device<T>>, Error> {
    let len = len.max(data.len()).max(1);
    if !slot.as_ref().is_some_and(|k| k.is_current() && k.len() >= len) {
        *slot = None;
        *slot = Some(s.keep(s.alloc_device::<T>(len)?));
    }
    let m = slot.as_mut().expect("filled above").get_mut(s)?;
    if !data.is_empty() {
        m.write(data)?;
        *moved += size_of_val(data) as u64;
    }
    Ok(m)
}

// ----- dense GQA ------------------------------------------------------------------------------------------

/// The dense host-pointer entries: the shape checked, q, k and v staged up, out down.
///
/// # Safety
/// - `q`, `k`, `v`: NULL or `q_rows * q_heads * head_dim` (q) and `kv_len * kv_heads * head_dim` (k, v)
///   readable floats; `out`: NULL or `q_rows * q_heads * head_dim` writable floats nothing else touches.
unsafe fn dense_host(shape: GqaShape, q: *const f32, k: *const f32, v: *const f32, out: *mut f32) -> Call {
    let base = Info {
        kind: Some(Kind::Gqa),
        q_heads: shape.q_heads,
        kv_heads: shape.kv_heads,
        head_dim: shape.head_dim,
        kv_len: shape.kv_len,
        q_rows: shape.q_rows,
        ..Info::default()
    };
    let call = Call::new(base, OMEGA_GPU_ATTN_INFO_HOST_POINTERS);
    if let Err(e) = shape.check() {
        return call.fail(e);
    }
    let d = shape.head_dim as usize;
    let (nq, nkv) =
        (shape.q_rows as usize * shape.q_heads as usize * d, shape.kv_len as usize * shape.kv_heads as usize * d);
    // SAFETY: the caller's promises, with the lengths of the checked shape.
    let slices = unsafe {
        (|| Ok::<_, EntryError>((host("q", q, nq)?, host("k", k, nkv)?, host("v", v, nkv)?, host_mut("out", out, nq)?)))(
        )
    };
    let (q, k, v, out) = match slices {
        Ok(t) => t,
        Err(e) => return call.fail(e),
    };
    with_device(call, |lib, s, gpu, att, call| {
        let moved = &mut call.info.h2d_bytes;
        let st = &mut lib.staging;
        let dq = staged(s, &mut st.q, q, nq, moved)?;
        let dk = staged(s, &mut st.k, k, nkv, moved)?;
        let dv = staged(s, &mut st.v, v, nkv, moved)?;
        let dout = staged(s, &mut st.out, &[], nq, moved)?;
        call.took(att.gqa_f32(gpu, dq, dk, dv, dout, shape))?;
        dout.read(out)?;
        call.info.d2h_bytes += size_of_val(out) as u64;
        Ok(())
    })
}

/// The shape of the dense entries' arguments (the causal bit is `OMEGA_GPU_ATTN_CAUSAL` of `len_flags`).
fn dense_shape(q_heads: u32, kv_heads: u32, head_dim: u32, len_flags: u32, q_rows: Option<u32>) -> GqaShape {
    let kv_len = len_flags & !OMEGA_GPU_ATTN_CAUSAL;
    let causal = len_flags & OMEGA_GPU_ATTN_CAUSAL != 0;
    GqaShape { q_rows: q_rows.unwrap_or(kv_len), ..GqaShape::new(q_heads, kv_heads, head_dim, kv_len, causal) }
}

/// EXPERIMENTAL. Dense GQA self-attention in f32 over host arrays: q and out `[seq_len][q_heads][head_dim]`,
/// k and v `[seq_len][kv_heads][head_dim]`, row-major. Query head h reads KV head `h / (q_heads /
/// kv_heads)`; q_heads a multiple of kv_heads; head_dim 1 ..= 256. `seq_flags` is the sequence length
/// (low 31 bits) ORed with `OMEGA_GPU_ATTN_CAUSAL` for a causal mask. Scale `1 / sqrt(head_dim)`, f32
/// arithmetic with an online softmax. The arrays are copied to the device and out back. Takes the session
/// lock itself (call it WITHOUT the lock), opens the device when it is closed. `info` may be NULL.
///
/// # Safety
/// - `q`, `k`, `v` are NULL (refused) or point to the readable, aligned floats above; `out` to the writable
///   ones, touched by nothing else during the call.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuAttnInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_gqa_attention_f32(
    q: *const f32,
    k: *const f32,
    v: *const f32,
    q_heads: u32,
    kv_heads: u32,
    head_dim: u32,
    seq_flags: u32,
    out: *mut f32,
    info: *mut OmegaGpuAttnInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_gqa_attention_f32", OMEGA_GPU_ATTN_ERR_INTERNAL, || unsafe {
        dense_host(dense_shape(q_heads, kv_heads, head_dim, seq_flags, None), q, k, v, out).finish(info, start)
    })
}

/// EXPERIMENTAL. The rows form: `q_rows` query rows against the full KV of `kv_len` keys (low 31 bits of
/// `kv_len_flags`, with `OMEGA_GPU_ATTN_CAUSAL`). q and out are `[q_rows][q_heads][head_dim]`, k and v
/// `[kv_len][kv_heads][head_dim]`; query row i sits at position `kv_len - q_rows + i`, so any slice of a
/// self-attention is one call (rows a .. b of a causal one: k and v its first b rows, `kv_len` b, `q_rows`
/// b - a; of a non-causal one the positions do not matter). `q_rows` 1 ..= kv_len. Otherwise as
/// `omega_gpu_gqa_attention_f32`.
///
/// # Safety
/// - `q`, `k`, `v` are NULL (refused) or point to the readable, aligned floats above (`q_rows` rows of q,
///   `kv_len` of k and v); `out` to `q_rows` rows of writable, aligned floats nothing else touches.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuAttnInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_gqa_attention_rows_f32(
    q: *const f32,
    k: *const f32,
    v: *const f32,
    q_heads: u32,
    kv_heads: u32,
    head_dim: u32,
    kv_len_flags: u32,
    q_rows: u32,
    out: *mut f32,
    info: *mut OmegaGpuAttnInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_gqa_attention_rows_f32", OMEGA_GPU_ATTN_ERR_INTERNAL, || unsafe {
        dense_host(dense_shape(q_heads, kv_heads, head_dim, kv_len_flags, Some(q_rows)), q, k, v, out)
            .finish(info, start)
    })
}

// ----- the pool ---------------------------------------------------------------------------------------------

/// The pool `key` names, current, or why not.
fn pool_of(pool: &Option<Pool>, key: usize) -> Result<&Pool, EntryError> {
    let pool = pool.as_ref().ok_or(PoolError::Absent)?;
    if pool.key != key {
        return Err(PoolError::NotThePool { addr: key }.into());
    }
    if !pool.mem.is_current() {
        return Err(PoolError::Closed.into());
    }
    Ok(pool)
}

/// EXPERIMENTAL. Allocates the process's KV pool: `bytes` (even, at least 2) of device memory (HBM; no CPU
/// view), and stores its key in `*pool`: an opaque pointer to pass to the paged entries and to
/// `omega_gpu_attention_pool_write`, never to dereference. The host writes K/V into it with
/// `omega_gpu_attention_pool_write`, whose copy has landed when it returns, so the next call's kernels see
/// it. One pool at a time (a second is refused, `OMEGA_GPU_ATTN_ERR_POOL`); a close of the device frees
/// its memory (the pool is then refused by name until freed). Takes the session lock itself.
///
/// # Safety
/// - `pool` is NULL (refused) or points to a writable, aligned `void *`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_attention_pool_alloc(bytes: usize, pool: *mut *mut c_void) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_attention_pool_alloc", OMEGA_GPU_ATTN_ERR_INTERNAL, || unsafe {
        let call = Call::new(Info::default(), 0);
        if pool.is_null() {
            return call.fail(EntryError::Null("pool")).finish(ptr::null_mut(), start);
        }
        if bytes == 0 || !bytes.is_multiple_of(2) {
            return call.fail(PoolError::Size { bytes }).finish(ptr::null_mut(), start);
        }
        let call = with_device(call, |lib, s, _gpu, _att, _call| {
            if let Some(p) = lib.pool.as_ref().filter(|p| p.mem.is_current()) {
                return Err(PoolError::Twice { bytes: p.bytes }.into());
            }
            lib.pool = None;
            let mem = s.keep(s.alloc_device::<u16>(bytes / 2)?);
            let key = lib.keys.take();
            lib.pool = Some(Pool { key, bytes, mem });
            // SAFETY: `pool` is non-null (checked) and writable by the caller's promise.
            *pool = ptr::without_provenance_mut(key);
            Ok(())
        });
        call.finish(ptr::null_mut(), start)
    })
}

/// EXPERIMENTAL. Frees the KV pool (nothing when there is none). Takes the session lock itself (a caller
/// that holds it is refused, recorded, nothing freed). After an uncertain completion the memory is parked,
/// never released.
#[no_mangle]
pub extern "C" fn omega_gpu_attention_pool_free() {
    guard("omega_gpu_attention_pool_free", (), || {
        if runtime().holds_lock() {
            record(&EntryError::Session(Error::Lock(LOCK_HELD)));
            return;
        }
        let _lock = crate::lock();
        sync::lock(&LIBRARY).pool = None;
    })
}

/// EXPERIMENTAL. Copies `len` bytes from host `src` into the pool at byte `offset` (both even: whole bf16).
/// The copy goes through the platform's staging and has landed in device memory when the call returns: the
/// next attention call sees it. Takes the session lock itself.
///
/// # Safety
/// - `src` is NULL (refused) or points to `len` readable bytes, 2-byte aligned.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_attention_pool_write(
    pool: *mut c_void,
    offset: usize,
    src: *const c_void,
    len: usize,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_attention_pool_write", OMEGA_GPU_ATTN_ERR_INTERNAL, || unsafe {
        let call = Call::new(Info::default(), OMEGA_GPU_ATTN_INFO_HOST_POINTERS);
        let data = match host::<u16>("src", src.cast(), len / 2) {
            Ok(d) => d,
            Err(e) => return call.fail(e).finish(ptr::null_mut(), start),
        };
        let call = with_device(call, |lib, s, _gpu, _att, call| {
            let p = pool_of(&lib.pool, pool.addr())?;
            let bytes = p.bytes;
            if !offset.is_multiple_of(2)
                || !len.is_multiple_of(2)
                || offset.checked_add(len).is_none_or(|end| end > bytes)
            {
                return Err(PoolError::Range { offset, len, bytes }.into());
            }
            let p = lib.pool.as_mut().expect("checked above");
            p.mem.get_mut(s)?.write_at(offset / 2, data)?;
            call.info.h2d_bytes += len as u64;
            Ok(())
        });
        call.finish(ptr::null_mut(), start)
    })
}

/// EXPERIMENTAL. Fills `*layout` with the packed layout of `pages` pages of `page_tokens` tokens, `kv_heads`
/// heads of `head_dim` (per page every head's K rows, then every head's V rows) and returns the pool bytes
/// it needs; 0 (and `*layout` untouched) for a layout the kernels cannot read. No lock.
///
/// # Safety
/// - `layout` is NULL (returns 0) or points to a writable, aligned `OmegaGpuKvLayout`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_attention_kv_layout(
    page_tokens: u32,
    kv_heads: u32,
    head_dim: u32,
    pages: u32,
    layout: *mut OmegaGpuKvLayout,
) -> usize {
    guard("omega_gpu_attention_kv_layout", 0, || {
        let l = KvLayout::new(page_tokens, kv_heads, head_dim, pages);
        let Ok(elems) = l.check() else { return 0 };
        // SAFETY: by the caller's promise NULL or a writable OmegaGpuKvLayout.
        let Some(out) = (unsafe { layout.as_mut() }) else { return 0 };
        *out = OmegaGpuKvLayout {
            page_tokens,
            kv_heads,
            head_dim,
            dtype: OMEGA_GPU_ATTN_DTYPE_BF16,
            pages,
            head_stride: l.head_stride,
            v_offset: l.v_offset,
            page_stride: l.page_stride,
            ..OmegaGpuKvLayout::default()
        };
        usize::try_from(elems * 2).unwrap_or(0)
    })
}

// ----- paged decode, host pointers ----------------------------------------------------------------------------

/// A host-pointer decode: the tables (`[batch][max_pages]`) and lengths checked against the pool, then q
/// staged up, the decode, out down.
struct HostDecode<'a> {
    q: *const f32,
    out: *mut f32,
    layout: *const OmegaGpuKvLayout,
    pool: usize,
    tables: Vec<i32>,
    lens: &'a [i32],
    shape: DecodeShape,
}

/// Every sequence's length in `0 ..= max_pages * page_tokens` and every page it reads in the pool, or the
/// first that is not; the bytes of K and V the sequences hold.
fn check_tables(l: &KvLayout, max_pages: u32, tables: &[i32], lens: &[i32]) -> Result<u64, EntryError> {
    let cap = u64::from(max_pages) * u64::from(l.page_tokens);
    let mut tokens = 0u64;
    for (b, &len) in lens.iter().enumerate() {
        if len < 0 || len as u64 > cap {
            return Err(EntryError::Table(TableDetail::Length { seq: b as u32, len: len.into(), cap }));
        }
        tokens += len as u64;
        let used = (len as u64).div_ceil(u64::from(l.page_tokens)) as usize;
        let row = &tables[b * max_pages as usize..][..used];
        if let Some((slot, &page)) = row.iter().enumerate().find(|&(_, &p)| p < 0 || p as u32 >= l.pages) {
            return Err(EntryError::Table(TableDetail::Page {
                seq: b as u32,
                slot: slot as u32,
                page: page.into(),
                pages: l.pages,
            }));
        }
    }
    Ok(tokens * l.token_bytes())
}

impl HostDecode<'_> {
    /// # Safety
    /// - `q` is NULL or points to `batch * q_heads * head_dim` readable floats, `out` to as many writable
    ///   ones nothing else touches; `layout` is NULL or points to a readable `OmegaGpuKvLayout`.
    unsafe fn run(self) -> Call {
        let s = self.shape;
        let base = Info { kind: Some(Kind::Decode), batch: s.batch, q_heads: s.q_heads, q_rows: 1, ..Info::default() };
        let call = Call::new(base, OMEGA_GPU_ATTN_INFO_HOST_POINTERS);
        // SAFETY: by the caller's promise NULL or a readable OmegaGpuKvLayout.
        let Some(c_layout) = (unsafe { self.layout.as_ref() }) else { return call.fail(EntryError::Null("layout")) };
        let layout = match c_layout.typed().and_then(|l| l.check().map(|_| l)) {
            Ok(l) => l,
            Err(e) => return call.fail(e),
        };
        let kv_bytes = match check_tables(&layout, s.max_pages, &self.tables, self.lens) {
            Ok(b) => b,
            Err(e) => return call.fail(e),
        };
        let n = s.batch as usize * s.q_heads as usize * layout.head_dim as usize;
        // SAFETY: the caller's promises, with the lengths of the checked layout.
        let slices = unsafe { (|| Ok::<_, EntryError>((host("q", self.q, n)?, host_mut("out", self.out, n)?)))() };
        let (q, out) = match slices {
            Ok(t) => t,
            Err(e) => return call.fail(e),
        };
        let (tables, lens, key) = (&self.tables, self.lens, self.pool);
        let mut call = with_device(call, |lib, sc, gpu, att, call| {
            let moved = &mut call.info.h2d_bytes;
            let Library { pool, staging: st, .. } = lib;
            let p = pool_of(pool, key)?;
            // The layout was checked above: its pages fit 2^63 bytes.
            let needs = u64::from(layout.pages) * layout.page_stride * 2;
            if needs > p.bytes as u64 {
                return Err(PoolError::Short { needs, bytes: p.bytes }.into());
            }
            let pool = p.mem.get(sc)?;
            let dq = staged(sc, &mut st.q, q, n, moved)?;
            let dt = staged(sc, &mut st.tables, tables, tables.len(), moved)?;
            let dl = staged(sc, &mut st.lens, lens, lens.len(), moved)?;
            let dout = staged(sc, &mut st.out, &[], n, moved)?;
            call.took(att.paged_decode::<f32, f32>(gpu, dq, pool, &layout, dt, dl, dout, s))?;
            dout.read(out)?;
            call.info.d2h_bytes += size_of_val(out) as u64;
            Ok(())
        });
        call.info.kv_bytes = kv_bytes;
        call
    }
}

/// The softmax scale of the paged entries' `scale_bits` (0: `1 / sqrt(head_dim)`).
fn scale(scale_bits: u32) -> Option<f32> {
    (scale_bits != 0).then(|| f32::from_bits(scale_bits))
}

fn no_flags(flags: u32, known: u32) -> Result<(), EntryError> {
    if flags & !known != 0 {
        return Err(EntryError::Flags { flags, known });
    }
    Ok(())
}

/// EXPERIMENTAL. Paged decode of one sequence over the pool (`omega_gpu_attention_pool_alloc`'s key in
/// `pool`), laid out as `*layout` says: its one query token `q` `[q_heads][head_dim]` f32 attends its
/// `seq_len` tokens, whose pages `page_table[0 .. ceil(seq_len / page_tokens)]` name (`table_len` entries,
/// `seq_len <= table_len * page_tokens`); out `[q_heads][head_dim]` f32. q_heads is a multiple of the
/// layout's kv_heads, at most 16 per KV head. `splits`: 0 lets the planner split the KV across every SM,
/// otherwise that many splits (at most 256). `scale_bits`: the f32 bits of the softmax scale, 0 for `1 /
/// sqrt(head_dim)`. `flags`: 0 (no flag is defined yet). The table is host memory and is checked before
/// anything runs: a page index outside the pool (or past 2^31) or a length past the table is refused,
/// `OMEGA_GPU_ATTN_ERR_TABLE`. The tensor cores take q rounded to bf16. A length of 0 gives zeros. Takes the
/// session lock itself.
///
/// # Safety
/// - `q` is NULL (refused) or points to `q_heads * head_dim` readable, aligned floats; `out` to as many
///   writable, aligned floats nothing else touches.
/// - `pool` is any value (it is compared with the pool's key, never dereferenced: aligned or not, it is
///   only read as an address).
/// - `layout` is NULL (refused) or points to a readable, aligned `OmegaGpuKvLayout`.
/// - `page_table` is NULL (refused) or points to `table_len` readable, aligned `uint32_t`.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuAttnInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_paged_attention_bf16(
    q: *const f32,
    pool: *const c_void,
    layout: *const OmegaGpuKvLayout,
    page_table: *const u32,
    q_heads: u32,
    seq_len: u32,
    table_len: u32,
    splits: u32,
    scale_bits: u32,
    flags: u32,
    out: *mut f32,
    info: *mut OmegaGpuAttnInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_paged_attention_bf16", OMEGA_GPU_ATTN_ERR_INTERNAL, || unsafe {
        let shape = DecodeShape { splits, scale: scale(scale_bits), ..DecodeShape::new(1, q_heads, table_len) };
        let fail = |e: EntryError| {
            Call::new(Info { kind: Some(Kind::Decode), ..Info::default() }, OMEGA_GPU_ATTN_INFO_HOST_POINTERS)
                .fail(e)
                .finish(info, start)
        };
        if let Err(e) = no_flags(flags, 0) {
            return fail(e);
        }
        let table = match host("page_table", page_table, table_len as usize) {
            Ok(t) => t,
            Err(e) => return fail(e),
        };
        // Indices past i32 are past any pool the kernels address: they become -1, which the check refuses.
        let tables = table.iter().map(|&p| i32::try_from(p).unwrap_or(-1)).collect();
        let Ok(len) = i32::try_from(seq_len) else {
            return fail(EntryError::Table(TableDetail::Length {
                seq: 0,
                len: seq_len.into(),
                cap: u64::from(table_len),
            }));
        };
        let lens = [len];
        HostDecode { q, out, layout, pool: pool.addr(), tables, lens: &lens, shape }.run().finish(info, start)
    })
}

/// EXPERIMENTAL. Paged decode of `batch` sequences: q and out `[batch][q_heads][head_dim]` f32,
/// `page_tables` `[batch][max_pages]` and `seq_lens` `[batch]` (int32, host memory, checked before
/// anything runs as in `omega_gpu_paged_attention_bf16`: every length in `0 ..= max_pages * page_tokens`,
/// every page a sequence reads inside the pool; unused slots are not read). Ragged lengths, any page order.
/// `splits`, `scale_bits`, `flags` as in `omega_gpu_paged_attention_bf16`.
///
/// # Safety
/// - `q` is NULL (refused) or points to `batch * q_heads * head_dim` readable, aligned floats; `out` to as
///   many writable, aligned floats nothing else touches.
/// - `pool` is any value (compared with the pool's key, never dereferenced: aligned or not, it is only
///   read as an address).
/// - `layout` is NULL (refused) or points to a readable, aligned `OmegaGpuKvLayout`.
/// - `page_tables` is NULL (refused) or points to `batch * max_pages` readable, aligned `int32_t`.
/// - `seq_lens` is NULL (refused) or points to `batch` readable, aligned `int32_t`.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuAttnInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_paged_attention_batch_bf16(
    q: *const f32,
    pool: *const c_void,
    layout: *const OmegaGpuKvLayout,
    page_tables: *const i32,
    seq_lens: *const i32,
    batch: u32,
    q_heads: u32,
    max_pages: u32,
    splits: u32,
    scale_bits: u32,
    flags: u32,
    out: *mut f32,
    info: *mut OmegaGpuAttnInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_paged_attention_batch_bf16", OMEGA_GPU_ATTN_ERR_INTERNAL, || unsafe {
        let shape = DecodeShape { splits, scale: scale(scale_bits), ..DecodeShape::new(batch, q_heads, max_pages) };
        let host_tables = (|| {
            no_flags(flags, 0)?;
            let n = (batch as usize).checked_mul(max_pages as usize).ok_or(EntryError::Null("page_tables"))?;
            Ok::<_, EntryError>((host("page_tables", page_tables, n)?, host("seq_lens", seq_lens, batch as usize)?))
        })();
        match host_tables {
            Ok((tables, lens)) => {
                HostDecode { q, out, layout, pool: pool.addr(), tables: tables.to_vec(), lens, shape }
                    .run()
                    .finish(info, start)
            }
            Err(e) => Call::new(
                Info { kind: Some(Kind::Decode), batch, q_heads, ..Info::default() },
                OMEGA_GPU_ATTN_INFO_HOST_POINTERS,
            )
            .fail(e)
            .finish(info, start),
        }
    })
}

// ----- device-resident entries ------------------------------------------------------------------------------

/// A live buffer of the open session as a span of `T`, or the refusal (stage `attention args`) of NULL or
/// a buffer the session does not have. The lock is held by the call, so the buffer stays allocated.
///
/// # Safety
/// - `m` is NULL (refused) or points to a readable, aligned `OmegaGpuMem`.
unsafe fn span<T: DeviceScalar>(what: &'static str, m: *const GpuMem) -> Result<DeviceSpan<T>, EntryError> {
    // SAFETY: by the caller's promise NULL or a readable OmegaGpuMem.
    let Some(m) = (unsafe { m.as_ref() }) else { return Err(EntryError::Null(what)) };
    let bytes = runtime().live_bytes(m, Stage::AttentionArgs)?;
    // SAFETY: the session says `m` names a live buffer of `bytes` bytes at `m.va`; it stays allocated for the
    // span's use, this call's, since the call holds the session lock and a free or close needs it. Whether
    // the kernels may write it is the device's check (a store to a read-only buffer faults).
    Ok(unsafe { DeviceSpan::new(m.va, (bytes / size_of::<T>() as u64) as usize) })
}

/// The C layout at `layout`, or the refusal of NULL or of a dtype other than bf16.
///
/// # Safety
/// - `layout` is NULL or points to a readable, aligned `OmegaGpuKvLayout`.
unsafe fn layout_of(layout: *const OmegaGpuKvLayout) -> Result<KvLayout, EntryError> {
    // SAFETY: by the caller's promise.
    let l = unsafe { layout.as_ref() }.ok_or(EntryError::Null("layout"))?;
    Ok(l.typed()?)
}

/// The decode over device buffers with `Q` queries and `O` outputs.
///
/// # Safety
/// - Every pointer is NULL or points to a readable, aligned `OmegaGpuMem` (the layout to an `OmegaGpuKvLayout`).
#[allow(clippy::too_many_arguments)]
unsafe fn decode_mem<Q: Elem, O: Elem>(
    q: *const GpuMem,
    pool: *const GpuMem,
    layout: *const OmegaGpuKvLayout,
    tables: *const GpuMem,
    lens: *const GpuMem,
    out: *const GpuMem,
    shape: DecodeShape,
    call: Call,
) -> Call {
    with_device(call, |_lib, _s, gpu, att, call| {
        // SAFETY: forwarded from the caller.
        let (l, q, p, t, n, mut o) = unsafe {
            (
                layout_of(layout)?,
                span::<Q>("q", q)?,
                span::<u16>("pool", pool)?,
                span::<i32>("page_tables", tables)?,
                span::<i32>("seq_lens", lens)?,
                span::<O>("out", out)?,
            )
        };
        call.took(att.paged_decode(gpu, &q, &p, &l, &t, &n, &mut o, shape))
    })
}

/// EXPERIMENTAL. Paged decode over device buffers of the open session (`OmegaGpuMem` from
/// `omega_gpu_session_alloc*`), no copies: q and out `[batch][q_heads][head_dim]` (f32, or bf16 with
/// `OMEGA_GPU_ATTN_FLAG_Q_BF16` / `_OUT_BF16` in `flags`), the pool laid out as `*layout` says,
/// `page_tables` `[batch][max_pages]` and `seq_lens` `[batch]` int32. The tables are device memory and
/// are not trusted: the kernels clamp a length to `0 ..= max_pages * page_tokens`, skip a tile whose page
/// index is outside the pool, flag either, and never fault; the call then returns
/// `OMEGA_GPU_ATTN_ERR_TABLE` with the bits in `info->status` (the output holds the clamped result).
/// `splits` and `scale_bits` as in `omega_gpu_paged_attention_bf16`. Takes the session lock itself.
///
/// # Safety
/// - `q`, `pool`, `page_tables`, `seq_lens`, `out` are each NULL (refused) or point to a readable, aligned
///   `OmegaGpuMem`; `layout` NULL (refused) or a readable `OmegaGpuKvLayout`.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuAttnInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_paged_attention_bf16_mem(
    q: *const GpuMem,
    pool: *const GpuMem,
    layout: *const OmegaGpuKvLayout,
    page_tables: *const GpuMem,
    seq_lens: *const GpuMem,
    batch: u32,
    q_heads: u32,
    max_pages: u32,
    splits: u32,
    scale_bits: u32,
    flags: u32,
    out: *const GpuMem,
    info: *mut OmegaGpuAttnInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_paged_attention_bf16_mem", OMEGA_GPU_ATTN_ERR_INTERNAL, || unsafe {
        let shape = DecodeShape { splits, scale: scale(scale_bits), ..DecodeShape::new(batch, q_heads, max_pages) };
        let call = Call::new(Info { kind: Some(Kind::Decode), batch, q_heads, ..Info::default() }, 0);
        if let Err(e) = no_flags(flags, OMEGA_GPU_ATTN_FLAG_Q_BF16 | OMEGA_GPU_ATTN_FLAG_OUT_BF16) {
            return call.fail(e).finish(info, start);
        }
        let (qb, ob) = (flags & OMEGA_GPU_ATTN_FLAG_Q_BF16 != 0, flags & OMEGA_GPU_ATTN_FLAG_OUT_BF16 != 0);
        let a = (q, pool, layout, page_tables, seq_lens, out);
        let call = match (qb, ob) {
            (false, false) => decode_mem::<f32, f32>(a.0, a.1, a.2, a.3, a.4, a.5, shape, call),
            (false, true) => decode_mem::<f32, u16>(a.0, a.1, a.2, a.3, a.4, a.5, shape, call),
            (true, false) => decode_mem::<u16, f32>(a.0, a.1, a.2, a.3, a.4, a.5, shape, call),
            (true, true) => decode_mem::<u16, u16>(a.0, a.1, a.2, a.3, a.4, a.5, shape, call),
        };
        call.finish(info, start)
    })
}

/// The append over device buffers with `E` inputs.
///
/// # Safety
/// - Every pointer is NULL or points to a readable, aligned `OmegaGpuMem` (the layout to an `OmegaGpuKvLayout`).
#[allow(clippy::too_many_arguments)]
unsafe fn append_mem<E: Elem>(
    pool: *const GpuMem,
    layout: *const OmegaGpuKvLayout,
    k_new: *const GpuMem,
    v_new: *const GpuMem,
    tables: *const GpuMem,
    lens: *const GpuMem,
    shape: AppendShape,
    call: Call,
) -> Call {
    with_device(call, |_lib, _s, gpu, att, call| {
        // SAFETY: forwarded from the caller.
        let (l, mut p, k, v, t, mut n) = unsafe {
            (
                layout_of(layout)?,
                span::<u16>("pool", pool)?,
                span::<E>("k_new", k_new)?,
                span::<E>("v_new", v_new)?,
                span::<i32>("page_tables", tables)?,
                span::<i32>("seq_lens", lens)?,
            )
        };
        call.took(att.kv_append(gpu, &mut p, &l, &k, &v, &t, &mut n, shape))
    })
}

/// EXPERIMENTAL. Appends one decode step's K and V rows into a pool in device memory, on the GPU: k_new and
/// v_new `[batch][kv_heads][head_dim]` (bf16, or f32 with `OMEGA_GPU_ATTN_APPEND_F32`, rounded to bf16);
/// sequence b's token goes at position `seq_lens[b]` through its page table `page_tables[b][..]`
/// (`[batch][max_pages]` int32). With `OMEGA_GPU_ATTN_APPEND_ADVANCE` the kernel then stores `seq_lens[b]
/// + 1`, so a following `omega_gpu_paged_attention_bf16_mem` sees the token with no host round trip. A
/// length or page index the table or pool cannot hold is flagged and that sequence writes nothing
/// (`OMEGA_GPU_ATTN_ERR_TABLE`, bits in `info->status`). Takes the session lock itself.
///
/// # Safety
/// - `pool`, `k_new`, `v_new`, `page_tables`, `seq_lens` are each NULL (refused) or point to a readable,
///   aligned `OmegaGpuMem`; `layout` NULL (refused) or a readable `OmegaGpuKvLayout`.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuAttnInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_kv_append_bf16_mem(
    pool: *const GpuMem,
    layout: *const OmegaGpuKvLayout,
    k_new: *const GpuMem,
    v_new: *const GpuMem,
    page_tables: *const GpuMem,
    seq_lens: *const GpuMem,
    batch: u32,
    max_pages: u32,
    flags: u32,
    info: *mut OmegaGpuAttnInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_kv_append_bf16_mem", OMEGA_GPU_ATTN_ERR_INTERNAL, || unsafe {
        let shape = AppendShape { batch, max_pages, advance: flags & OMEGA_GPU_ATTN_APPEND_ADVANCE != 0 };
        let call = Call::new(Info { kind: Some(Kind::Append), batch, ..Info::default() }, 0);
        if let Err(e) = no_flags(flags, OMEGA_GPU_ATTN_APPEND_F32 | OMEGA_GPU_ATTN_APPEND_ADVANCE) {
            return call.fail(e).finish(info, start);
        }
        let a = (pool, layout, k_new, v_new, page_tables, seq_lens);
        let call = if flags & OMEGA_GPU_ATTN_APPEND_F32 != 0 {
            append_mem::<f32>(a.0, a.1, a.2, a.3, a.4, a.5, shape, call)
        } else {
            append_mem::<u16>(a.0, a.1, a.2, a.3, a.4, a.5, shape, call)
        };
        call.finish(info, start)
    })
}

/// EXPERIMENTAL. `omega_gpu_gqa_attention_rows_f32` over device buffers of the open session (no copies):
/// q and out `[q_rows][q_heads][head_dim]`, k and v `[kv_len][kv_heads][head_dim]`, f32 `OmegaGpuMem`s.
///
/// # Safety
/// - `q`, `k`, `v`, `out` are each NULL (refused) or point to a readable, aligned `OmegaGpuMem`.
/// - `info` is NULL or points to a writable, aligned `OmegaGpuAttnInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_gqa_attention_f32_mem(
    q: *const GpuMem,
    k: *const GpuMem,
    v: *const GpuMem,
    q_heads: u32,
    kv_heads: u32,
    head_dim: u32,
    kv_len_flags: u32,
    q_rows: u32,
    out: *const GpuMem,
    info: *mut OmegaGpuAttnInfo,
) -> c_int {
    let start = Instant::now();
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_gqa_attention_f32_mem", OMEGA_GPU_ATTN_ERR_INTERNAL, || unsafe {
        let shape = dense_shape(q_heads, kv_heads, head_dim, kv_len_flags, Some(q_rows));
        let call = Call::new(Info { kind: Some(Kind::Gqa), q_heads, kv_heads, head_dim, ..Info::default() }, 0);
        with_device(call, |_lib, _s, gpu, att, call| {
            // The outer block's promise covers the four pointers.
            let (q, k, v, mut o) =
                (span::<f32>("q", q)?, span::<f32>("k", k)?, span::<f32>("v", v)?, span::<f32>("out", out)?);
            call.took(att.gqa_f32(gpu, &q, &k, &v, &mut o, shape))
        })
        .finish(info, start)
    })
}

/// EXPERIMENTAL. The name of return code `rc` (`"OMEGA_GPU_ATTN_OK"`, `"OMEGA_GPU_ATTN_ERR_TABLE"`, ...;
/// `"OMEGA_GPU_ATTN_ERR_UNKNOWN"` for a code no entry returns). A static string; no lock.
#[no_mangle]
pub extern "C" fn omega_gpu_attention_rc_name(rc: i32) -> *const c_char {
    const NAMES: [&core::ffi::CStr; 16] = [
        c"OMEGA_GPU_ATTN_OK",
        c"OMEGA_GPU_ATTN_ERR_ARGS",
        c"OMEGA_GPU_ATTN_ERR_SHAPE",
        c"OMEGA_GPU_ATTN_ERR_LAYOUT",
        c"OMEGA_GPU_ATTN_ERR_TABLE",
        c"OMEGA_GPU_ATTN_ERR_POOL",
        c"OMEGA_GPU_ATTN_ERR_LOCK_HELD",
        c"OMEGA_GPU_ATTN_ERR_BLOCKED",
        c"OMEGA_GPU_ATTN_ERR_UNCERTAIN",
        c"OMEGA_GPU_ATTN_ERR_DEVICE",
        c"OMEGA_GPU_ATTN_ERR_ALLOC",
        c"OMEGA_GPU_ATTN_ERR_LOAD",
        c"OMEGA_GPU_ATTN_ERR_COPY",
        c"OMEGA_GPU_ATTN_ERR_LAUNCH",
        c"OMEGA_GPU_ATTN_ERR_CANCELLED",
        c"OMEGA_GPU_ATTN_ERR_INTERNAL",
    ];
    // The codes are 0, -1, ..., -15 in this order.
    let name = usize::try_from(rc.unsigned_abs()).ok().filter(|_| rc <= 0).and_then(|i| NAMES.get(i));
    name.copied().unwrap_or(c"OMEGA_GPU_ATTN_ERR_UNKNOWN").as_ptr()
}

/// EXPERIMENTAL. The text of the library's most recent failure, `{stage}: {cause}` ("" before any): one
/// process-wide buffer, overwritten by the next call of this function. Every failure of the library sets it
/// (and the session's last error); a success leaves it.
#[no_mangle]
pub extern "C" fn omega_gpu_attention_last_error() -> *const c_char {
    guard("omega_gpu_attention_last_error", ptr::null(), || {
        let text = sync::lock(&LAST_ERROR).clone();
        LAST_ERROR_TEXT.publish(&text)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_own_name_in_order() {
        let codes = [
            OMEGA_GPU_ATTN_OK,
            OMEGA_GPU_ATTN_ERR_ARGS,
            OMEGA_GPU_ATTN_ERR_SHAPE,
            OMEGA_GPU_ATTN_ERR_LAYOUT,
            OMEGA_GPU_ATTN_ERR_TABLE,
            OMEGA_GPU_ATTN_ERR_POOL,
            OMEGA_GPU_ATTN_ERR_LOCK_HELD,
            OMEGA_GPU_ATTN_ERR_BLOCKED,
            OMEGA_GPU_ATTN_ERR_UNCERTAIN,
            OMEGA_GPU_ATTN_ERR_DEVICE,
            OMEGA_GPU_ATTN_ERR_ALLOC,
            OMEGA_GPU_ATTN_ERR_LOAD,
            OMEGA_GPU_ATTN_ERR_COPY,
            OMEGA_GPU_ATTN_ERR_LAUNCH,
            OMEGA_GPU_ATTN_ERR_CANCELLED,
            OMEGA_GPU_ATTN_ERR_INTERNAL,
        ];
        let suffixes = [
            "OK",
            "ERR_ARGS",
            "ERR_SHAPE",
            "ERR_LAYOUT",
            "ERR_TABLE",
            "ERR_POOL",
            "ERR_LOCK_HELD",
            "ERR_BLOCKED",
            "ERR_UNCERTAIN",
            "ERR_DEVICE",
            "ERR_ALLOC",
            "ERR_LOAD",
            "ERR_COPY",
            "ERR_LAUNCH",
            "ERR_CANCELLED",
            "ERR_INTERNAL",
        ];
        for (c, s) in codes.iter().zip(suffixes) {
            // SAFETY: the names are static NUL-terminated strings.
            let name = unsafe { core::ffi::CStr::from_ptr(omega_gpu_attention_rc_name(*c)) };
            assert_eq!(name.to_str().unwrap(), format!("OMEGA_GPU_ATTN_{s}"));
        }
        for c in [1, -16, i32::MIN] {
            // SAFETY: as above.
            let name = unsafe { core::ffi::CStr::from_ptr(omega_gpu_attention_rc_name(c)) };
            assert_eq!(name.to_str().unwrap(), "OMEGA_GPU_ATTN_ERR_UNKNOWN");
        }
    }

    #[test]
    fn the_structs_have_the_contracts_sizes_and_documented_offsets() {
        assert_eq!(size_of::<OmegaGpuAttnInfo>(), 176);
        assert_eq!(core::mem::offset_of!(OmegaGpuAttnInfo, kv_bytes), 64);
        assert_eq!(core::mem::offset_of!(OmegaGpuAttnInfo, reserved), 104);
        assert_eq!(size_of::<OmegaGpuKvLayout>(), 64);
        assert_eq!(core::mem::offset_of!(OmegaGpuKvLayout, head_stride), 24);
        assert_eq!(core::mem::offset_of!(OmegaGpuKvLayout, reserved), 48);
    }
}
