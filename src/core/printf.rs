//! Device printf.
//!
//! nvcc compiles a kernel's `printf(fmt, ...)` to a call of `vprintf(fmt, args)`, a symbol the cubin leaves
//! undefined. Omega provides it: `kernels/cuda/lib/printf.cu`, built relocatable, is loaded once per
//! session into a code buffer of its own, and each module's `vprintf` slot (constant bank 4, filled by a
//! R_CUDA_64 relocation, read by `CALL.ABS.NOINC`) gets its address. It appends a record — the format
//! string's address, a copy of the argument block and of every `%s` string — to the session's printf
//! buffer, a data buffer allocated the first time a module that calls `vprintf` loads. Both buffers are
//! the library's own (the caller's free refuses them, close releases them), and a latch parks the printf
//! buffer at once with the launch buffer: a printf kernel the device may still be running appends to it.
//!
//! After every launch or command list that ran a kernel calling it, the session drains the buffer: it
//! reads the records in reservation order (so each thread's lines keep their program order), formats each
//! one on the host — the format string is read from the host copy of the module's data image, the
//! arguments with C's rules — and hands the text to the output ([`set_output`]: stdout unless a callback
//! is set, which is how tests capture it; the lock is pinned while a callback runs, so it cannot release
//! it). Records that did not fit are counted on the device, and the drain writes one line that says how
//! many were lost ([`OVERFLOW_MARK`]). The buffer is then empty again for the next launch.
//!
//! On the simulator the kernels are host references; a reference of a printf kernel writes the same
//! records with [`sim_emit`], so the drain and the formatter run in CI exactly as on the GPU.
//!
//! The buffer layout and the record format are in `kernels/cuda/lib/printf.cu`; this file and that one
//! must agree.

use std::io::Write as _;

use omega_hal::cubin::ExternalFunction;
use omega_hal::sim::{KernelCtx, KernelError};
use omega_hal::LaunchDesc;

use crate::error::{Error, LoadError, Result, Stage};
use crate::session::{runtime, AllocKind, GpuMem, Handle, Runtime, PIN_PRINTF, PRINTF_BUFFER, PRINTF_LIBRARY};
use crate::sync::{self, Arc, AtomicBool, Mutex, Ordering};

/// The symbol Omega resolves a module's `vprintf` to.
pub const VPRINTF: &str = "vprintf";
/// The undefined symbol of the printf library that names the session's buffer.
const BUFFER_SYMBOL: &str = "omega_printf_buffer";
/// The library function `vprintf` resolves to.
const LIBRARY_FUNCTION: &str = "omega_vprintf";
/// The name under which a simulated kernel finds the printf buffer ([`KernelCtx::symbol`]).
pub const SIM_BUFFER_SYMBOL: &str = "omega.printf_buffer";

/// The buffer header's magic word (offset 20).
const MAGIC: u32 = 0x4f50_5246;
/// Bytes of the buffer header before the records.
pub const HEADER_BYTES: usize = 32;
/// Most bytes of one `%s` string a record holds; a longer string is cut and the text says so.
pub const MAX_STRING: usize = 1024;
const STRING_CUT: u32 = 1 << 31;
const STRING_NULL: u32 = 1 << 30;
/// Bytes of record area a session's buffer has unless [`set_buffer_bytes`] says otherwise (CUDA's
/// default printf FIFO is 1 MiB too).
pub const DEFAULT_BUFFER_BYTES: usize = 1 << 20;

/// The start of the line the drain writes when records were lost.
pub const OVERFLOW_MARK: &str = "[omega printf: buffer overflow:";

/// Where drained printf text goes.
pub enum Output {
    /// The process's standard output (the default).
    Stdout,
    /// A callback, called once per printed record (and once for an overflow mark) with its text.
    Callback(Box<dyn FnMut(&str) + Send>),
}

/// Sends device printf text to `output` from the next drain on (process-wide).
pub fn set_output(output: Output) {
    let state = &runtime().printf;
    sync::lock(&state.inner).output = output;
}

/// Text captured from device printf, in the order it was drained.
#[derive(Clone, Debug, Default)]
pub struct Capture(Arc<Mutex<String>>);

impl Capture {
    /// Everything captured so far.
    pub fn text(&self) -> String {
        sync::lock(&self.0).clone()
    }

    /// Everything captured so far, leaving the capture empty.
    pub fn take(&self) -> String {
        std::mem::take(&mut *sync::lock(&self.0))
    }
}

/// Captures device printf text from now on (instead of printing it) and returns the capture; call
/// [`set_output`] with [`Output::Stdout`] to print again.
pub fn capture() -> Capture {
    let c = Capture::default();
    let sink = c.0.clone();
    set_output(Output::Callback(Box::new(move |text| sync::lock(&sink).push_str(text))));
    c
}

/// Sets the bytes of record area the printf buffer has (process-wide). The size is fixed for a session
/// once its buffer exists (the loaded modules and the printf library point at it): set it before the first
/// module that calls `vprintf` loads, or close and reopen. Refused, the setting unchanged, below 64 bytes
/// or while this session's buffer exists.
pub fn set_buffer_bytes(bytes: usize) -> Result<()> {
    let rt = runtime();
    if bytes < 64 {
        return Err(Error::Setting {
            stage: Stage::Printf,
            detail: crate::error::SettingError::PrintfBufferTooSmall(bytes),
        });
    }
    let mut inner = sync::lock(&rt.printf.inner);
    if inner.buffer.is_some() && inner.session == rt.open_count() && rt.is_open() {
        let detail = crate::error::SettingError::PrintfBufferExists(inner.buffer_bytes);
        drop(inner);
        return Err(Error::Setting { stage: Stage::Printf, detail });
    }
    inner.wanted_bytes = bytes;
    Ok(())
}

/// A session buffer the printf state owns. Its CPU view is only touched by the thread holding the session
/// lock (loads and drains run under it), and it is released through the runtime or by close.
struct Owned(GpuMem);

// SAFETY: the raw CPU pointer inside is only dereferenced by the thread that holds the session lock (every
// use is inside a load or a drain, which the lock serialises), and the allocation is released only through
// the runtime, under that lock; moving the handle between threads moves no access.
unsafe impl Send for Owned {}

/// Omega's `vprintf`, loaded for this session (its code buffer is a session buffer; close frees it).
struct Library {
    entry_va: u64,
    needs: ExternalFunction,
}

/// A module's data image as the host keeps it, for reading format strings.
struct Source {
    id: u64,
    va: u64,
    bytes: Vec<u8>,
}

struct Inner {
    /// `open_count` of the session the buffer and library belong to; 0 for none.
    session: u32,
    buffer: Option<Owned>,
    /// Record-area bytes of `buffer`.
    buffer_bytes: usize,
    /// Record-area bytes of the next buffer.
    wanted_bytes: usize,
    library: Option<Library>,
    sources: Vec<Source>,
    next_source: u64,
    output: Output,
}

/// The runtime's printf state (a field of [`Runtime`]).
pub(crate) struct PrintfState {
    inner: Mutex<Inner>,
    /// True once a module that calls `vprintf` was loaded in this session: launches then look for printf
    /// kernels; until then a launch pays one atomic load.
    active: AtomicBool,
}

impl PrintfState {
    pub(crate) fn new() -> Self {
        PrintfState {
            inner: Mutex::new(Inner {
                session: 0,
                buffer: None,
                buffer_bytes: 0,
                wanted_bytes: DEFAULT_BUFFER_BYTES,
                library: None,
                sources: Vec::new(),
                next_source: 1,
                output: Output::Stdout,
            }),
            active: AtomicBool::new(false),
        }
    }

    /// The handle of this session's printf buffer, if it has one: a latch parks it, since a printf kernel
    /// the device may still be running appends to it.
    pub(crate) fn buffer_handle(&self) -> Option<Handle> {
        sync::lock(&self.inner).buffer.as_ref().map(|b| b.0.handle)
    }

    /// Forgets the session's buffer and library (close frees every session buffer itself).
    pub(crate) fn forget_session(&self) {
        self.active.store(false, Ordering::SeqCst);
        let mut inner = sync::lock(&self.inner);
        inner.session = 0;
        inner.buffer = None;
        inner.library = None;
        inner.sources.clear();
    }
}

/// What a module loaded while device printf is ready gets: where `vprintf` is (0 on the simulator, whose
/// kernels never call it) and what it needs of the launch, and the buffer's address.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ready {
    pub(crate) vprintf_va: u64,
    pub(crate) needs: ExternalFunction,
    pub(crate) buffer_va: u64,
}

/// Makes device printf ready in the open session (the process runtime, which the caller holds the lock
/// of): the buffer, and on a GPU the library relocated for it. Idempotent within a session.
pub(crate) fn ready(sim: bool) -> Result<Ready> {
    let rt = runtime();
    let mut inner = sync::lock(&rt.printf.inner);
    if inner.session != rt.open_count() {
        // A buffer of an earlier session was freed by its close.
        inner.session = rt.open_count();
        inner.buffer = None;
        inner.library = None;
    }
    if inner.buffer.is_none() {
        let bytes = inner.wanted_bytes;
        // The library's own buffer: the caller's free refuses it; close (or a latch, which parks it) ends it.
        let mem = rt.alloc_owned(HEADER_BYTES + bytes, AllocKind::Data, PRINTF_BUFFER)?;
        let mut header = [0u8; HEADER_BYTES];
        header[8..16].copy_from_slice(&(bytes as u64).to_le_bytes());
        header[20..24].copy_from_slice(&MAGIC.to_le_bytes());
        if let Err(e) = write_cpu(rt, &mem, 0, &header) {
            let mut mem = mem;
            let _ = rt.release(&mut mem, PRINTF_BUFFER);
            return Err(e);
        }
        inner.buffer = Some(Owned(mem));
        inner.buffer_bytes = bytes;
    }
    let buffer_va = inner.buffer.as_ref().expect("made above").0.va;
    let library_needs = library_needs()?;
    if sim {
        rt.printf.active.store(true, Ordering::SeqCst);
        return Ok(Ready { vprintf_va: 0, needs: library_needs, buffer_va });
    }
    if inner.library.is_none() {
        inner.library = Some(load_library(rt, buffer_va)?);
    }
    let lib = inner.library.as_ref().expect("loaded above");
    rt.printf.active.store(true, Ordering::SeqCst);
    Ok(Ready { vprintf_va: lib.entry_va, needs: lib.needs, buffer_va })
}

/// The printf library's cubin, parsed for the open device.
fn library_module() -> Result<omega_hal::cubin::Module> {
    let cubin =
        crate::kernels::device_library("printf").map_err(|why| Error::Load(LoadError::PrintfNotBuilt { why }))?;
    let arch = crate::loader::device_arch()?;
    omega_hal::cubin::Module::parse(cubin, arch).map_err(|e| Error::Load(LoadError::PrintfLibrary(e)))
}

/// Registers and stack of Omega's vprintf.
fn library_needs() -> Result<ExternalFunction> {
    let m = library_module()?;
    let f = m.function(LIBRARY_FUNCTION).map_err(|e| Error::Load(LoadError::PrintfLibrary(e)))?;
    Ok(ExternalFunction { registers: f.registers, stack_bytes: f.stack_bytes })
}

/// Loads the library into a code buffer of its own with its buffer symbol resolved to `buffer_va`.
fn load_library(rt: &Runtime, buffer_va: u64) -> Result<Library> {
    let m = library_module()?;
    let f = m.function(LIBRARY_FUNCTION).map_err(|e| Error::Load(LoadError::PrintfLibrary(e)))?;
    if !m.data.is_empty() || !m.const_banks.is_empty() {
        // It runs with the calling kernel's constant banks, and has no data buffer of its own.
        return Err(Error::Load(LoadError::PrintfLibraryHasData));
    }
    let mut code = rt.alloc_owned(m.alloc_bytes() as usize, AllocKind::Code, PRINTF_LIBRARY)?;
    let resolve = |s: &str| (s == BUFFER_SYMBOL).then_some(buffer_va);
    let written =
        m.relocate(code.va, 0, &resolve).map_err(|e| Error::Load(LoadError::PrintfLibrary(e))).and_then(|r| {
            match r.unresolved.first() {
                Some(s) => Err(Error::Load(LoadError::PrintfLibraryUndefined(s.clone()))),
                None => write_cpu(rt, &code, 0, &r.image),
            }
        });
    if let Err(e) = written {
        let _ = rt.release(&mut code, PRINTF_LIBRARY);
        return Err(e);
    }
    let entry_va = code.va + f.code_offset;
    Ok(Library { entry_va, needs: ExternalFunction { registers: f.registers, stack_bytes: f.stack_bytes } })
}

/// Copies `bytes` into `m`'s CPU view at `offset` and makes them visible to the device.
fn write_cpu(rt: &Runtime, m: &GpuMem, offset: usize, bytes: &[u8]) -> Result<()> {
    if m.cpu.is_null() || offset + bytes.len() > m.size {
        return Err(Error::Load(LoadError::BytesDoNotFit { bytes: bytes.len() }));
    }
    // SAFETY: `m` is a live session buffer with a CPU view of `m.size >= offset + bytes.len()` bytes
    // (checked), the caller holds the session lock, and no launch is running (launches are synchronous).
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), m.cpu.cast::<u8>().add(offset), bytes.len()) };
    rt.sync_range_to_gpu(m, offset, bytes.len())
}

/// Keeps a module's data image on the host for the formatter, until the returned id is released.
pub(crate) fn register_source(va: u64, bytes: Vec<u8>) -> u64 {
    let mut inner = sync::lock(&runtime().printf.inner);
    let id = inner.next_source;
    inner.next_source += 1;
    inner.sources.push(Source { id, va, bytes });
    id
}

/// Drops a module's data image from the formatter's sources.
pub(crate) fn release_source(id: u64) {
    sync::lock(&runtime().printf.inner).sources.retain(|s| s.id != id);
}

impl Runtime {
    /// After a completion: drains the printf buffer if one of `launches` runs a kernel that calls
    /// `vprintf`. A failure to read the buffer is written to the output, never hidden; it is no failure of
    /// the launch, which completed (so it is not the launch's error, and no last error of the C layer).
    pub(crate) fn drain_printf_after(&self, launches: &[LaunchDesc<'_>]) {
        if !self.printf.active.load(Ordering::SeqCst) {
            return;
        }
        let printing = {
            let s = sync::lock(&self.session);
            launches.iter().any(|l| !l.skip && s.templates.get(&l.code_va).is_some_and(|m| m.printf))
        };
        if printing {
            self.drain_printf();
        }
    }

    /// Reads, formats and prints every record in the printf buffer, then empties it.
    pub(crate) fn drain_printf(&self) {
        let mut inner = sync::lock(&self.printf.inner);
        let Some(buffer) = inner.buffer.as_ref().map(|b| b.0) else { return };
        let texts = match read_records(self, &buffer, inner.buffer_bytes) {
            Ok((records, dropped)) => {
                let mut texts: Vec<String> = records.iter().map(|r| r.text(&inner.sources)).collect();
                if dropped > 0 {
                    texts.push(format!(
                        "{OVERFLOW_MARK} {dropped} record(s) lost; the buffer holds {} bytes \
                         (omega::printf::set_buffer_bytes)]\n",
                        inner.buffer_bytes
                    ));
                }
                texts
            }
            Err(e) => {
                vec![format!("[omega printf: the printf buffer could not be read: {e}]\n")]
            }
        };
        let mut output = std::mem::replace(&mut inner.output, Output::Stdout);
        drop(inner);
        match &mut output {
            Output::Stdout => {
                let mut out = std::io::stdout().lock();
                for t in &texts {
                    let _ = out.write_all(t.as_bytes());
                }
                let _ = out.flush();
            }
            Output::Callback(f) => {
                // The callback is code the library does not control, run with the lock held while the
                // caller may still hold CPU views of session buffers (a command list's stamps): pinned, so
                // it cannot release the lock and let another thread close the device under them.
                self.pin_lock(PIN_PRINTF);
                let printed =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| texts.iter().for_each(|t| f(t))));
                self.unpin_lock(PIN_PRINTF);
                if let Err(panic) = printed {
                    let mut inner = sync::lock(&self.printf.inner);
                    if matches!(inner.output, Output::Stdout) {
                        inner.output = output;
                    }
                    drop(inner);
                    std::panic::resume_unwind(panic);
                }
            }
        }
        let mut inner = sync::lock(&self.printf.inner);
        if matches!(inner.output, Output::Stdout) {
            inner.output = output;
        }
    }
}

/// One record read from the buffer, or where the readable ones ended.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Record {
    Printed {
        format_va: u64,
        args: Vec<u8>,
        /// The `%s` strings, as the record holds them ([`format`] reads them in order).
        strings: Vec<u8>,
    },
    /// A record at this byte of the area did not parse; it and the rest are dropped.
    Corrupt(usize),
}

impl Record {
    fn text(&self, sources: &[Source]) -> String {
        let (format_va, args, strings) = match self {
            Record::Printed { format_va, args, strings } => (*format_va, args, strings),
            Record::Corrupt(at) => {
                return format!("[omega printf: corrupt record at byte {at}; the rest is dropped]\n")
            }
        };
        let fmt = sources.iter().find_map(|s| {
            let at = format_va.checked_sub(s.va)? as usize;
            let rest = s.bytes.get(at..)?;
            Some(&rest[..rest.iter().position(|&b| b == 0)?])
        });
        match fmt {
            Some(f) => String::from_utf8_lossy(&format(f, args, strings)).into_owned(),
            None => format!("[omega printf: the format string at {format_va:#x} is not in a loaded module]\n"),
        }
    }
}

/// (records, dropped) of the buffer, which is emptied.
fn read_records(rt: &Runtime, buffer: &GpuMem, capacity: usize) -> Result<(Vec<Record>, u32)> {
    rt.sync_range_to_cpu(buffer, 0, HEADER_BYTES)?;
    let view = |offset: usize, len: usize| -> Vec<u8> {
        // SAFETY: the printf buffer is a live session buffer of HEADER_BYTES + capacity bytes with a CPU
        // view; callers stay inside it (`used <= capacity`); the lock is held and no launch runs, so
        // nothing writes it while it is copied.
        unsafe { std::slice::from_raw_parts(buffer.cpu.cast::<u8>().add(offset), len) }.to_vec()
    };
    let header = view(0, HEADER_BYTES);
    let cursor = u64::from_le_bytes(header[0..8].try_into().expect("8 bytes"));
    let dropped = u32::from_le_bytes(header[16..20].try_into().expect("4 bytes"));
    let used = cursor.min(capacity as u64) as usize;
    let mut records = Vec::new();
    if used > 0 {
        rt.sync_range_to_cpu(buffer, HEADER_BYTES, used)?;
        records = parse_records(&view(HEADER_BYTES, used));
    }
    // Empty again: cursor and dropped back to 0 (capacity and magic stay).
    write_cpu(rt, buffer, 0, &header_bytes(capacity))?;
    Ok((records, dropped))
}

/// The header of an empty buffer with `capacity` bytes of record area.
fn header_bytes(capacity: usize) -> [u8; HEADER_BYTES] {
    let mut header = [0u8; HEADER_BYTES];
    header[8..16].copy_from_slice(&(capacity as u64).to_le_bytes());
    header[20..24].copy_from_slice(&MAGIC.to_le_bytes());
    header
}

/// The records in `area` (the used part of the record area), up to a terminator or the end.
fn parse_records(area: &[u8]) -> Vec<Record> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 4 <= area.len() {
        let bytes = u32::from_le_bytes(area[at..at + 4].try_into().expect("4 bytes")) as usize;
        if bytes == 0 {
            break;
        }
        let record = area.get(at..at + bytes).filter(|_| bytes >= 16 && bytes.is_multiple_of(8));
        let arg_bytes = record.map(|r| u32::from_le_bytes(r[4..8].try_into().expect("4 bytes")) as usize);
        match (record, arg_bytes) {
            (Some(r), Some(n)) if 16 + n <= r.len() => out.push(Record::Printed {
                format_va: u64::from_le_bytes(r[8..16].try_into().expect("8 bytes")),
                args: r[16..16 + n].to_vec(),
                strings: r.get(16 + n.next_multiple_of(4)..).unwrap_or_default().to_vec(),
            }),
            _ => {
                out.push(Record::Corrupt(at));
                break;
            }
        }
        at += bytes;
    }
    out
}

// ----- the format walk ---------------------------------------------------------------------------------

/// One conversion of a format string.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Spec {
    left: bool,
    plus: bool,
    space: bool,
    alt: bool,
    zero: bool,
    width: usize,
    precision: Option<usize>,
    /// `h` count (1: short, 2: char).
    narrow: u8,
    /// Any of `l ll j z t L q`: a 64-bit integer argument.
    wide: bool,
    conversion: u8,
}

/// Reads the argument block as the device packed it: each argument at its natural alignment.
struct Args<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl Args<'_> {
    /// The next argument of `size` bytes (4 or 8), zero past the end of the block.
    fn next(&mut self, size: usize) -> u64 {
        self.offset = self.offset.next_multiple_of(size);
        let mut v = [0u8; 8];
        if let Some(b) = self.bytes.get(self.offset..self.offset + size) {
            v[..size].copy_from_slice(b);
        }
        self.offset += size;
        u64::from_le_bytes(v)
    }
}

/// Formats one record: C's printf of `fmt` with the argument block `args` and the `%s` strings
/// `strings` (each a u32 length word and the bytes padded to 4). The conversions, flags, width,
/// precision and length modifiers are C's and the argument sizes the device's walk
/// (`kernels/cuda/lib/printf.cu`): `d i u o x X` take 4 bytes, or 8 with a `l ll j z t L q` modifier;
/// `c` 4; `f F e E g G a A s p n` 8. `%n` writes nothing; a conversion it does not know is printed as it
/// stands and takes no argument.
pub fn format(fmt: &[u8], args: &[u8], strings: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(fmt.len() + 16);
    let mut args = Args { bytes: args, offset: 0 };
    let mut strings = strings;
    let mut p = 0;
    while p < fmt.len() {
        let c = fmt[p];
        p += 1;
        if c != b'%' {
            out.push(c);
            continue;
        }
        let start = p - 1;
        if fmt.get(p) == Some(&b'%') {
            out.push(b'%');
            p += 1;
            continue;
        }
        let mut s = Spec::default();
        while let Some(&f) = fmt.get(p) {
            match f {
                b'-' => s.left = true,
                b'+' => s.plus = true,
                b' ' => s.space = true,
                b'#' => s.alt = true,
                b'0' => s.zero = true,
                b'\'' => {}
                _ => break,
            }
            p += 1;
        }
        if fmt.get(p) == Some(&b'*') {
            let w = args.next(4) as u32 as i32;
            s.left |= w < 0;
            s.width = w.unsigned_abs() as usize;
            p += 1;
        } else {
            while let Some(d) = fmt.get(p).filter(|d| d.is_ascii_digit()) {
                s.width = s.width.saturating_mul(10).saturating_add(usize::from(d - b'0'));
                p += 1;
            }
        }
        if fmt.get(p) == Some(&b'.') {
            p += 1;
            if fmt.get(p) == Some(&b'*') {
                let v = args.next(4) as u32 as i32;
                s.precision = (v >= 0).then_some(v as usize);
                p += 1;
            } else {
                let mut v = 0usize;
                while let Some(d) = fmt.get(p).filter(|d| d.is_ascii_digit()) {
                    v = v.saturating_mul(10).saturating_add(usize::from(d - b'0'));
                    p += 1;
                }
                s.precision = Some(v);
            }
        }
        while let Some(&m) = fmt.get(p) {
            match m {
                b'h' => s.narrow = s.narrow.saturating_add(1),
                b'l' | b'j' | b'z' | b't' | b'L' | b'q' => s.wide = true,
                _ => break,
            }
            p += 1;
        }
        let Some(&conversion) = fmt.get(p) else {
            // A lone '%' (and flags) at the end: printed as it stands.
            out.extend_from_slice(&fmt[start..]);
            break;
        };
        p += 1;
        s.conversion = conversion;
        match conversion {
            b'd' | b'i' => {
                let v = if s.wide {
                    args.next(8) as i64
                } else {
                    let v = args.next(4) as u32 as i32;
                    match s.narrow {
                        0 => i64::from(v),
                        1 => i64::from(v as i16),
                        _ => i64::from(v as i8),
                    }
                };
                integer(&mut out, &s, v < 0, v.unsigned_abs());
            }
            b'u' | b'o' | b'x' | b'X' => {
                let v = if s.wide {
                    args.next(8)
                } else {
                    let v = args.next(4) as u32;
                    match s.narrow {
                        0 => u64::from(v),
                        1 => u64::from(v as u16),
                        _ => u64::from(v as u8),
                    }
                };
                integer(&mut out, &s, false, v);
            }
            b'c' => {
                let v = args.next(4) as u8;
                pad(&mut out, &s, &[], &[v], false);
            }
            b's' => {
                let _pointer = args.next(8);
                let (text, cut) = take_string(&mut strings);
                let text = match text {
                    None if s.precision.is_some_and(|p| p < 6) => Vec::new(),
                    None => b"(null)".to_vec(),
                    Some(mut t) => {
                        if cut && s.precision.is_none_or(|p| p > t.len()) {
                            t.extend_from_slice(format!("...[cut at {MAX_STRING} bytes]").as_bytes());
                        }
                        if let Some(p) = s.precision {
                            t.truncate(p);
                        }
                        t
                    }
                };
                pad(&mut out, &s, &[], &text, false);
            }
            b'p' => {
                let v = args.next(8);
                if v == 0 {
                    pad(&mut out, &Spec { zero: false, ..s }, &[], b"(nil)", false);
                } else {
                    let sign: &[u8] = if s.plus {
                        b"+0x"
                    } else if s.space {
                        b" 0x"
                    } else {
                        b"0x"
                    };
                    pad(&mut out, &s, sign, format!("{v:x}").as_bytes(), true);
                }
            }
            b'f' | b'F' | b'e' | b'E' | b'g' | b'G' | b'a' | b'A' => {
                float(&mut out, &s, f64::from_bits(args.next(8)));
            }
            b'n' => {
                let _pointer = args.next(8);
            }
            // `%5%`: a percent sign, as glibc prints it.
            b'%' => out.push(b'%'),
            _ => out.extend_from_slice(&fmt[start..p]),
        }
    }
    out
}

/// The next `%s` string of a record: (bytes, cut), or (None, _) for a null pointer; a missing one reads
/// as an empty string.
fn take_string(strings: &mut &[u8]) -> (Option<Vec<u8>>, bool) {
    let Some(head) = strings.get(..4) else { return (Some(Vec::new()), false) };
    let head = u32::from_le_bytes(head.try_into().expect("4 bytes"));
    let len = (head & !(STRING_CUT | STRING_NULL)) as usize;
    let bytes = strings.get(4..4 + len).unwrap_or_default().to_vec();
    *strings = strings.get(4 + len.next_multiple_of(4)..).unwrap_or_default();
    if head & STRING_NULL != 0 {
        (None, false)
    } else {
        (Some(bytes), head & STRING_CUT != 0)
    }
}

/// Writes `prefix` + `body` padded to the width: spaces on the left (or right with `-`), or zeros between
/// prefix and body when `zeros_allowed` and the `0` flag is set without `-`.
fn pad(out: &mut Vec<u8>, s: &Spec, prefix: &[u8], body: &[u8], zeros_allowed: bool) {
    let len = prefix.len() + body.len();
    let fill = s.width.saturating_sub(len);
    if s.left {
        out.extend_from_slice(prefix);
        out.extend_from_slice(body);
        out.resize(out.len() + fill, b' ');
    } else if s.zero && zeros_allowed {
        out.extend_from_slice(prefix);
        out.resize(out.len() + fill, b'0');
        out.extend_from_slice(body);
    } else {
        out.resize(out.len() + fill, b' ');
        out.extend_from_slice(prefix);
        out.extend_from_slice(body);
    }
}

/// An integer conversion of magnitude `v` (negative when `negative`).
fn integer(out: &mut Vec<u8>, s: &Spec, negative: bool, v: u64) {
    let mut digits = match s.conversion {
        b'o' => format!("{v:o}"),
        b'x' => format!("{v:x}"),
        b'X' => format!("{v:X}"),
        _ => v.to_string(),
    }
    .into_bytes();
    if s.precision == Some(0) && v == 0 {
        digits.clear();
    }
    if let Some(p) = s.precision {
        if digits.len() < p {
            let mut z = vec![b'0'; p - digits.len()];
            z.extend_from_slice(&digits);
            digits = z;
        }
    }
    if s.conversion == b'o' && s.alt && digits.first() != Some(&b'0') {
        digits.insert(0, b'0');
    }
    let prefix: &[u8] = match s.conversion {
        b'd' | b'i' if negative => b"-",
        b'd' | b'i' if s.plus => b"+",
        b'd' | b'i' if s.space => b" ",
        b'x' if s.alt && v != 0 => b"0x",
        b'X' if s.alt && v != 0 => b"0X",
        _ => b"",
    };
    pad(out, s, prefix, &digits, s.precision.is_none());
}

/// A floating-point conversion.
fn float(out: &mut Vec<u8>, s: &Spec, v: f64) {
    let upper = s.conversion.is_ascii_uppercase();
    let sign: &[u8] = if v.is_sign_negative() {
        b"-"
    } else if s.plus {
        b"+"
    } else if s.space {
        b" "
    } else {
        b""
    };
    if !v.is_finite() {
        let text = match (v.is_nan(), upper) {
            (true, false) => "nan",
            (true, true) => "NAN",
            (false, false) => "inf",
            (false, true) => "INF",
        };
        return pad(out, s, sign, text.as_bytes(), false);
    }
    let a = v.abs();
    let precision = s.precision.unwrap_or(6);
    let mut body = match s.conversion.to_ascii_lowercase() {
        b'f' => fixed(a, precision, s.alt),
        b'e' => exponent(a, precision, s.alt),
        b'g' => general(a, s.precision, s.alt),
        _ => hex_float(a, s.precision, s.alt),
    };
    if upper {
        body = body.to_ascii_uppercase();
    }
    let prefix: Vec<u8> = if s.conversion.eq_ignore_ascii_case(&b'a') {
        let mut p = sign.to_vec();
        p.extend_from_slice(if upper { b"0X" } else { b"0x" });
        body.drain(..2);
        p
    } else {
        sign.to_vec()
    };
    pad(out, s, &prefix, &body, true);
}

/// `%f` of a non-negative finite value.
fn fixed(a: f64, precision: usize, alt: bool) -> Vec<u8> {
    let mut t = format!("{a:.precision$}");
    if alt && precision == 0 {
        t.push('.');
    }
    t.into_bytes()
}

/// `%e` of a non-negative finite value: d.ddde±XX.
fn exponent(a: f64, precision: usize, alt: bool) -> Vec<u8> {
    let t = format!("{a:.precision$e}");
    let (mantissa, exp) = t.split_once('e').expect("Rust writes an exponent");
    let exp: i32 = exp.parse().expect("an integer exponent");
    let mut m = mantissa.to_string();
    if alt && precision == 0 {
        m.push('.');
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{m}e{sign}{:02}", exp.unsigned_abs()).into_bytes()
}

/// `%g` of a non-negative finite value.
fn general(a: f64, precision: Option<usize>, alt: bool) -> Vec<u8> {
    let p = match precision {
        None => 6,
        Some(0) => 1,
        Some(p) => p,
    };
    // The exponent %e would print with p - 1 digits after the point (after its rounding).
    let x: i64 = if a == 0.0 {
        0
    } else {
        let t = format!("{a:.prec$e}", prec = p - 1);
        t.split_once('e').expect("an exponent").1.parse().expect("an integer exponent")
    };
    let mut t =
        if (p as i64) > x && x >= -4 { fixed(a, (p as i64 - 1 - x) as usize, alt) } else { exponent(a, p - 1, alt) };
    if !alt {
        let (mantissa_end, tail) = match t.iter().position(|&c| c == b'e') {
            Some(e) => (e, t[e..].to_vec()),
            None => (t.len(), Vec::new()),
        };
        let mut m = t[..mantissa_end].to_vec();
        if m.contains(&b'.') {
            while m.last() == Some(&b'0') {
                m.pop();
            }
            if m.last() == Some(&b'.') {
                m.pop();
            }
        }
        m.extend_from_slice(&tail);
        t = m;
    }
    t
}

/// `%a` of a non-negative finite value, with the `0x` prefix (glibc's form: `0x1.8p+1`, subnormals as
/// `0x0.…p-1022`, ties rounded to even).
fn hex_float(a: f64, precision: Option<usize>, alt: bool) -> Vec<u8> {
    let bits = a.to_bits();
    let biased = (bits >> 52) as i64;
    let mut mantissa = bits & ((1 << 52) - 1);
    let (mut lead, exp) = match (biased, mantissa) {
        (0, 0) => (0u64, 0i64),
        (0, _) => (0, -1022),
        _ => (1, biased - 1023),
    };
    let mut digits = 13usize;
    if let Some(p) = precision.filter(|&p| p < 13) {
        let drop = 4 * (13 - p) as u32;
        let full = (lead << 52) | mantissa;
        let rest = full & ((1u64 << drop) - 1);
        let half = 1u64 << (drop - 1);
        let mut kept = full >> drop;
        if rest > half || (rest == half && kept & 1 == 1) {
            kept += 1;
        }
        lead = kept >> (4 * p as u32);
        mantissa = kept & ((1u64 << (4 * p as u32)) - 1);
        digits = p;
    }
    let mut frac = if digits == 0 { String::new() } else { format!("{mantissa:0digits$x}") };
    if precision.is_none() {
        while frac.ends_with('0') {
            frac.pop();
        }
    } else if let Some(p) = precision.filter(|&p| p > 13) {
        frac.push_str(&"0".repeat(p - 13));
    }
    let point = if frac.is_empty() && !alt { "" } else { "." };
    let sign = if exp < 0 { '-' } else { '+' };
    format!("0x{lead}{point}{frac}p{sign}{}", exp.unsigned_abs()).into_bytes()
}

// ----- records written by the host (the simulator's printf kernels) -----------------------------------

/// The arguments of one printf call, packed as nvcc packs them for `vprintf`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PrintfArgs {
    block: Vec<u8>,
    strings: Vec<u8>,
    count: i32,
}

impl PrintfArgs {
    /// No arguments yet.
    pub fn new() -> Self {
        PrintfArgs::default()
    }

    fn push(&mut self, bytes: &[u8]) -> &mut Self {
        let at = self.block.len().next_multiple_of(bytes.len());
        self.block.resize(at, 0);
        self.block.extend_from_slice(bytes);
        self.count += 1;
        self
    }

    /// An `int`, `unsigned`, `char` (promoted): 4 bytes.
    pub fn int(&mut self, v: i32) -> &mut Self {
        self.push(&v.to_le_bytes())
    }

    /// A 64-bit integer (`long`, `long long`, `size_t`): 8 bytes.
    pub fn long(&mut self, v: i64) -> &mut Self {
        self.push(&v.to_le_bytes())
    }

    /// A `double` (or a promoted `float`): 8 bytes.
    pub fn double(&mut self, v: f64) -> &mut Self {
        self.push(&v.to_le_bytes())
    }

    /// A pointer (`%p`): 8 bytes.
    pub fn pointer(&mut self, va: u64) -> &mut Self {
        self.push(&va.to_le_bytes())
    }

    /// A `%s` argument: the pointer `va` and the string the device would copy from it (`None`: a null
    /// pointer), cut at [`MAX_STRING`] bytes and at `precision` as the device cuts it.
    pub fn string(&mut self, va: u64, text: Option<&[u8]>, precision: Option<usize>) -> &mut Self {
        self.push(&va.to_le_bytes());
        let (head, bytes) = match text {
            None => (STRING_NULL, &[][..]),
            Some(t) => {
                let limit = precision.filter(|&p| p <= MAX_STRING).unwrap_or(MAX_STRING);
                let n = t.len().min(limit);
                let cut = n == MAX_STRING && t.len() > n && precision.is_none_or(|p| p > MAX_STRING);
                ((n as u32) | if cut { STRING_CUT } else { 0 }, &t[..n])
            }
        };
        self.strings.extend_from_slice(&head.to_le_bytes());
        self.strings.extend_from_slice(bytes);
        self.strings.resize(self.strings.len().next_multiple_of(4), 0);
        self
    }

    /// The record for format address `format_va`: header, argument block, strings.
    fn record(&self, format_va: u64) -> Vec<u8> {
        let mut r = Vec::with_capacity(16 + self.block.len() + self.strings.len() + 8);
        let bytes = (16 + self.block.len().next_multiple_of(4) + self.strings.len()).next_multiple_of(8);
        r.extend_from_slice(&(bytes as u32).to_le_bytes());
        r.extend_from_slice(&(self.block.len() as u32).to_le_bytes());
        r.extend_from_slice(&format_va.to_le_bytes());
        r.extend_from_slice(&self.block);
        r.resize(16 + self.block.len().next_multiple_of(4), 0);
        r.extend_from_slice(&self.strings);
        r.resize(bytes, 0);
        r
    }
}

/// What a simulated printf kernel does for one `printf` call: reserves room in the session's buffer
/// (found through the kernel's [`SIM_BUFFER_SYMBOL`]) and writes the record, or counts it dropped and
/// marks where the records end, exactly as `omega_vprintf` does on the GPU. Returns what `printf`
/// returns: the number of arguments, or -1 when the record did not fit.
pub fn sim_emit(ctx: &mut KernelCtx<'_>, format_va: u64, args: &PrintfArgs) -> core::result::Result<i32, KernelError> {
    let buffer = ctx.symbol(SIM_BUFFER_SYMBOL).ok_or_else(|| KernelError::Fault {
        xid: 13,
        detail: "a printf kernel without the printf buffer's address (its module was not linked)".into(),
    })?;
    let mut header = [0u8; 24];
    ctx.read(buffer, &mut header)?;
    let cursor = u64::from_le_bytes(header[0..8].try_into().expect("8 bytes"));
    let capacity = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
    let record = args.record(format_va);
    let at = cursor;
    ctx.write(buffer, &(cursor + record.len() as u64).to_le_bytes())?;
    let records = buffer + HEADER_BYTES as u64;
    if at + record.len() as u64 > capacity {
        let dropped = u32::from_le_bytes(header[16..20].try_into().expect("4 bytes")) + 1;
        ctx.write(buffer + 16, &dropped.to_le_bytes())?;
        if at + 4 <= capacity {
            ctx.write(records + at, &[0; 4])?;
        }
        return Ok(-1);
    }
    ctx.write(records + at, &record)?;
    Ok(args.count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::{c_char, CString};

    /// What the C library prints for `fmt` with the arguments `f` passes to snprintf.
    fn c_printf(f: impl FnOnce(*mut c_char, usize) -> i32) -> Vec<u8> {
        let mut buf = vec![0u8; 4096];
        let n = f(buf.as_mut_ptr().cast(), buf.len());
        buf.truncate(usize::try_from(n).expect("snprintf succeeds"));
        buf
    }

    /// Formats `fmt` both ways and compares: ours from a record's argument block and strings, the C
    /// library's from the same values passed as C varargs.
    macro_rules! same_as_c {
        ($fmt:expr $(, $kind:ident($v:expr))* $(,)?) => {{
            let fmt = CString::new($fmt).unwrap();
            let mut a = PrintfArgs::new();
            $( same_as_c!(@push a, $kind, $v); )*
            let ours = format(fmt.as_bytes(), &a.block, &a.strings);
            // SAFETY: the buffer is as long as snprintf is told; every conversion of the format gets an
            // argument of the C type it names (the macro's kinds), strings are NUL-terminated literals.
            let theirs = c_printf(|buf, len| unsafe { libc::snprintf(buf, len, fmt.as_ptr() $(, same_as_c!(@c $kind, $v))*) });
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&theirs),
                "format {:?}", $fmt
            );
        }};
        (@push $a:ident, i, $v:expr) => { $a.int($v) };
        (@push $a:ident, l, $v:expr) => { $a.long($v) };
        (@push $a:ident, d, $v:expr) => { $a.double($v) };
        (@push $a:ident, p, $v:expr) => { $a.pointer($v) };
        (@push $a:ident, s, $v:expr) => { $a.string(0x1000, Some($v.to_bytes()), None) };
        (@push $a:ident, null, $v:expr) => { $a.string(0, None::<&[u8]>, $v) };
        (@c i, $v:expr) => { $v as libc::c_int };
        (@c l, $v:expr) => { $v as libc::c_longlong };
        (@c d, $v:expr) => { $v as f64 };
        (@c p, $v:expr) => { $v as usize as *const libc::c_void };
        (@c s, $v:expr) => { $v.as_ptr() };
        (@c null, $v:expr) => { { let _: Option<usize> = $v; std::ptr::null::<c_char>() } };
    }

    #[test]
    fn integers_format_as_the_c_library_does() {
        same_as_c!("[%d][%i][%u][%x][%X][%o]", i(42), i(-42), i(-1), i(0xbeef), i(0xbeef), i(8));
        same_as_c!("[%5d][%-5d][%05d][%+d][% d][%+05d][%-+6d|]", i(42), i(42), i(-42), i(7), i(7), i(-3), i(9));
        same_as_c!("[%.3d][%.0d][%5.3d][%-8.4x][%08.3d][%.0x]", i(7), i(0), i(-7), i(0xab), i(5), i(0));
        same_as_c!("[%#x][%#X][%#o][%#.3o][%#o][%#x][%#08x]", i(255), i(255), i(8), i(8), i(0), i(0), i(255));
        same_as_c!("[%hd][%hu][%hhd][%hhu][%hhx][%hx]", i(70000), i(70000), i(300), i(-1), i(0x1ff), i(-1));
        same_as_c!(
            "[%ld][%lld][%lu][%llx][%lX][%jd][%zu][%td]",
            l(-5),
            l(i64::MIN),
            l(-1),
            l(-1),
            l(1i64 << 40),
            l(3),
            l(4),
            l(-6)
        );
        same_as_c!("[%*d][%-*d][%*d][%.*d][%.*d]", i(6), i(7), i(6), i(7), i(-6), i(7), i(4), i(7), i(-1), i(7));
        same_as_c!("[%c][%3c][%-3c][%c]", i(65), i(66), i(67), i(0x141));
        same_as_c!("[%%][%5%][%d%%]", i(100));
    }

    #[test]
    fn floats_format_as_the_c_library_does() {
        let values = [
            0.0,
            -0.0,
            1.0,
            -1.5,
            0.125,
            2.5,
            std::f64::consts::PI,
            1e-5,
            123456.789,
            1e21,
            1e300,
            5e-324,
            2.2250738585072014e-308,
            f64::MAX,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
        ];
        let specs = [
            "%f", "%F", "%.0f", "%.2f", "%#.0f", "%12.4f", "%-12.3f|", "%+f", "% f", "%010.3f", "%e", "%E", "%.0e",
            "%.3E", "%#.0e", "%+e", "%15.2e", "%-15.2e|", "%015.2e", "%g", "%G", "%.0g", "%.3g", "%#g", "%#.3g",
            "%.10g", "%12g", "%-12g|", "%012g", "%a", "%A", "%.0a", "%.1a", "%.3a", "%.20a", "%#a", "%20a", "%020a",
        ];
        for v in values {
            for spec in specs {
                same_as_c!(format!("[{spec}]"), d(v));
            }
        }
        // Ties round to even on the exact binary value, as glibc does.
        for (spec, v) in [("%.2f", 0.125), ("%.1f", 0.25), ("%.0f", 0.5), ("%.0f", 1.5), ("%.0f", 2.5), ("%.1e", 1.25)]
        {
            same_as_c!(spec, d(v));
        }
        for v in [1.5, 2.5, 0.5] {
            same_as_c!("%.0a", d(v));
        }
        // A float argument is promoted to double, so %f of an f32 value is its double.
        same_as_c!("[%f][%.9g]", d(0.1f32 as f64), d(0.1f32 as f64));
    }

    #[test]
    fn strings_and_pointers_format_as_the_c_library_does() {
        same_as_c!(
            "[%s][%10s][%-10s|][%.3s][%10.2s][%-6.3s|][%s]",
            s(c"omega"),
            s(c"omega"),
            s(c"omega"),
            s(c"omega"),
            s(c"omega"),
            s(c"kernel"),
            s(c"")
        );
        same_as_c!("[%s][%10s][%.6s][%.5s][%.0s]", null(None), null(None), null(None), null(None), null(None));
        same_as_c!(
            "[%p][%p][%20p][%-20p|][%020p][%+p][% p][%5p]",
            p(0x7f00_1234u64),
            p(0u64),
            p(0xabcu64),
            p(0xabcu64),
            p(0xabcu64),
            p(16u64),
            p(16u64),
            p(0u64)
        );
        same_as_c!("mixed %s=%d (%5.1f%%) at %p\n", s(c"load"), i(7), d(99.44), p(0x1000u64));
    }

    #[test]
    fn what_c_leaves_undefined_is_printed_and_takes_no_argument() {
        // An unknown conversion is printed as written (glibc does the same) and takes no argument, so the
        // following conversion still gets its own.
        assert_eq!(format(b"[%k][%d]", &7i32.to_le_bytes(), &[]), b"[%k][7]");
        // A trailing lone '%' is printed.
        assert_eq!(format(b"100%", &[], &[]), b"100%");
        // %n writes nothing and takes its pointer.
        let mut a = PrintfArgs::new();
        a.pointer(0x1000).int(5);
        assert_eq!(format(b"[%n%d]", &a.block, &a.strings), b"[5]");
        // Missing arguments read as zero rather than past the record.
        assert_eq!(format(b"%d %s|", &[], &[]), b"0 |");
    }

    #[test]
    fn arguments_are_packed_at_their_natural_alignment_as_nvcc_packs_them() {
        // The layout nvcc emits for printf("%d %f %lld %s %hhd %e %p", ...) (read from its PTX:
        // st.local.u32 [0], .f64 [8], .u64 [16], .u64 [24], .u32 [32], .f64 [40], .u64 [48]).
        let mut a = PrintfArgs::new();
        a.int(1).double(2.0).long(3).string(0x40, Some(b"x"), None).int(4).double(5.0).pointer(6);
        let at = |o: usize, n: usize| &a.block[o..o + n];
        assert_eq!(a.block.len(), 56);
        assert_eq!(at(0, 4), 1i32.to_le_bytes());
        assert_eq!(at(8, 8), 2.0f64.to_le_bytes());
        assert_eq!(at(16, 8), 3i64.to_le_bytes());
        assert_eq!(at(24, 8), 0x40u64.to_le_bytes());
        assert_eq!(at(32, 4), 4i32.to_le_bytes());
        assert_eq!(at(40, 8), 5.0f64.to_le_bytes());
        assert_eq!(at(48, 8), 6u64.to_le_bytes());
    }

    #[test]
    fn long_strings_are_cut_and_say_so_and_precision_cuts_on_the_device() {
        let long = vec![b'a'; MAX_STRING + 10];
        let mut a = PrintfArgs::new();
        a.string(0x1000, Some(&long), None).string(0x2000, Some(b"abcdef"), Some(2));
        let text = format(b"%s|%.2s", &a.block, &a.strings);
        let expected = format!("{}...[cut at {MAX_STRING} bytes]|ab", "a".repeat(MAX_STRING));
        assert_eq!(String::from_utf8(text).unwrap(), expected);
        // The device copied only what the precision lets through: two bytes, padded to four.
        assert_eq!(a.strings.len(), 4 + MAX_STRING + 4 + 4);
    }

    #[test]
    fn records_round_trip_and_a_terminator_or_a_corrupt_record_ends_them() {
        let format_va = 0x10_0000_0040;
        let sources = [Source {
            id: 1,
            va: 0x10_0000_0000,
            bytes: {
                let mut b = vec![0u8; 0x40];
                b.extend_from_slice(b"v=%d s=%s\n\0");
                b
            },
        }];
        let mut area = Vec::new();
        for i in 0..3 {
            let mut a = PrintfArgs::new();
            a.int(i).string(0x99, Some(b"hi"), None);
            let r = a.record(format_va);
            assert_eq!(r.len() % 8, 0);
            area.extend_from_slice(&r);
        }
        let parsed = parse_records(&area);
        let text: Vec<String> = parsed.iter().map(|r| r.text(&sources)).collect();
        assert_eq!(text, ["v=0 s=hi\n", "v=1 s=hi\n", "v=2 s=hi\n"]);
        // A terminator (the straddling record's zero word) ends the list.
        let mut cut = area.clone();
        let second = u32::from_le_bytes(area[0..4].try_into().unwrap()) as usize;
        cut[second..second + 4].copy_from_slice(&[0; 4]);
        assert_eq!(parse_records(&cut).len(), 1);
        // A record whose length is not a multiple of 8 is reported and ends the list.
        let mut bad = area.clone();
        bad[second..second + 4].copy_from_slice(&13u32.to_le_bytes());
        let parsed = parse_records(&bad);
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[1], Record::Corrupt(second));
        assert!(parsed[1].text(&sources).contains("corrupt record at byte"));
        // A format outside every loaded module is reported with its address.
        let mut a = PrintfArgs::new();
        a.int(1);
        let lost = parse_records(&a.record(0xdead_0000));
        assert!(
            lost[0].text(&sources).contains("0xdead0000 is not in a loaded module"),
            "{:?}",
            lost[0].text(&sources)
        );
    }

    /// The one test of this crate's unit tests on the process's runtime (the printf state lives there).
    #[test]
    fn the_printf_buffer_is_the_librarys_own_and_goes_with_the_session() {
        let rt = runtime();
        rt.lock().unwrap();
        rt.set_platform(crate::PlatformKind::Sim).unwrap();
        rt.open().unwrap();
        let ready = ready(true).unwrap();
        let handle = rt.printf.buffer_handle().expect("made by ready");
        // Whatever copy of its handle the caller holds, the caller's free refuses it: only close ends it.
        let mut copy = GpuMem { handle, va: ready.buffer_va, ..GpuMem::NONE };
        let e = rt.free(&mut copy).unwrap_err();
        assert!(
            matches!(e, Error::NotCallers { stage: Stage::Free, owner }
                if crate::session::Owner::Internal(owner) == crate::session::PRINTF_BUFFER),
            "{e}"
        );
        assert_eq!(copy.handle, handle, "the caller's copy is left as it was");
        rt.unlock().unwrap();
        rt.close().unwrap();
        assert_eq!(rt.printf.buffer_handle(), None, "close freed it with the session's buffers");
        let sim = rt.installed().unwrap().sim.expect("the simulator");
        assert_eq!(sim.stats().live_allocations, 0, "nothing of the session is left on the device");
    }
}
