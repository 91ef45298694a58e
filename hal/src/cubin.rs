//! # Cubin loader
//!
//! A cubin is an ELF64 file (`e_machine` 190, EM_CUDA) that ptxas writes for one SM version. Loading one
//! means: copy every section the GPU reads into one image, find each kernel's entry and launch
//! attributes, and patch the image's absolute addresses once its GPU address is known. All of it is
//! pure byte work; the ELF is parsed by hand so that every failure can say which section and why. Like
//! [`crate::arch`], it belongs to no backend: the session's loader parses the same cubin on every
//! platform.
//!
//! What a kernel needs is spread over several sections (facts VERIFIED on ptxas 13.0 output, see
//! `shared/docs/nvidia-bringup.md` section 9 and `hal/tests/fixtures/`):
//!
//! | Section | What it gives |
//! |---|---|
//! | `.text.<fn>` | the code; entry at the kernel symbol (`STT_FUNC`, `st_other` bit 0x10 = CUDA entry) |
//! | `.nv.info` | per function symbol: `REGCOUNT`, `FRAME_SIZE`, `MIN_STACK_SIZE`, `MAX_STACK_SIZE` |
//! | `.nv.info.<fn>` | `PARAM_CBANK`, `CBANK_PARAM_SIZE`, `KPARAM_INFO` per parameter, `NUM_BARRIERS`, `EXIT_INSTR_OFFSETS`, `MAX_THREADS`, `REQNTID` |
//! | `.nv.constant0.<fn>` | constant bank 0's size (driver words + parameters); its zeros are not loaded |
//! | `.nv.shared.<fn>` | NOBITS: static shared memory, the reserved 1 KiB included |
//! | `.nv.constant<N>` | module data a kernel reads from bank N: 3 = `__constant__` data, 4 = addresses of `__device__` data |
//! | `.nv.global`, `.nv.global.init` | `__device__` data (NOBITS zeros / initialised) |
//! | `.rela.<section>` | absolute addresses to patch: R_CUDA_64 (2), R_CUDA_G64 (4), and the 32-bit halves 0x38 / 0x39 |
//!
//! Debug sections (`.debug_frame`, not `SHF_ALLOC`) are neither loaded nor relocated.

use std::collections::HashMap;
use std::ops::Range;

use crate::arch::Arch;

/// `e_machine` of a cubin.
pub const EM_CUDA: u16 = 190;
/// Alignment of every section in the image, and so of the image's GPU address (tinygrad's choice; code
/// needs 128, constant banks 64).
pub const IMAGE_ALIGN: u64 = 128;
/// Bytes to leave mapped after the image: the instruction prefetcher reads past the last instruction
/// (tinygrad saw faults without it).
pub const CODE_SLACK_BYTES: u64 = 4096;

/// A cubin that cannot be loaded, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CubinError {
    /// The bytes do not start with the ELF magic.
    #[error("not an ELF file")]
    NotElf,
    /// An ELF file, but not the kind ptxas writes for a GPU.
    #[error("unsupported ELF: {why}")]
    UnsupportedElf {
        /// What is wrong with it.
        why: &'static str,
    },
    /// A structure or section runs past the end of the file.
    #[error("truncated cubin: {what} runs past the end of the file")]
    Truncated {
        /// The structure or section.
        what: String,
    },
    /// Not a CUDA ELF (`e_machine` is not 190).
    #[error("e_machine {found} is not EM_CUDA (190)")]
    WrongMachine {
        /// The machine found.
        found: u16,
    },
    /// Built for another SM than the device's.
    #[error("cubin is for sm_{found}, the device wants sm_{wanted}")]
    ForeignArch {
        /// SM number in the cubin's `e_flags`.
        found: u32,
        /// SM number of the architecture asked for.
        wanted: u32,
    },
    /// A section the loader needs is absent.
    #[error("missing section {name}")]
    MissingSection {
        /// Its name.
        name: String,
    },
    /// A malformed `.nv.info*` record.
    #[error("bad {section} record at byte {offset}: {why}")]
    BadNvInfo {
        /// The section.
        section: String,
        /// Byte offset of the record in the section.
        offset: usize,
        /// What is wrong.
        why: &'static str,
    },
    /// A kernel lacks an attribute the launch needs.
    #[error("kernel {kernel} has no {attribute} attribute")]
    MissingAttribute {
        /// The kernel.
        kernel: String,
        /// The attribute (`REGCOUNT`, ...).
        attribute: &'static str,
    },
    /// A relocation type this loader does not know how to apply.
    #[error("unknown relocation type {kind:#x} in {section}")]
    UnknownRelocation {
        /// `ELF64_R_TYPE` of the entry.
        kind: u32,
        /// The relocation section.
        section: String,
    },
    /// A relocation that cannot be applied.
    #[error("bad relocation in {section}: {why}")]
    BadRelocation {
        /// The relocation section.
        section: String,
        /// What is wrong.
        why: &'static str,
    },
    /// No kernel of that name in the module.
    #[error("no kernel named {name} in the module")]
    NoSuchKernel {
        /// The name asked for.
        name: String,
    },
    /// An image address without the image's alignment.
    #[error("image address {va:#x} is not {align}-byte aligned")]
    MisalignedImage {
        /// The address.
        va: u64,
        /// The alignment needed.
        align: u64,
    },
    /// An image address so high that a relocated address overflows 64 bits.
    #[error("image address {va:#x} overflows a relocated address")]
    AddressOverflow {
        /// The address.
        va: u64,
    },
}

/// One kernel parameter, as `KPARAM_INFO` describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamInfo {
    /// Position in the kernel's signature, from 0.
    pub ordinal: u32,
    /// Byte offset from the start of the parameters (add `param_base` for the bank offset).
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
    /// Alignment, inferred: the largest power of two (at most 16, at most the size rounded up to a power
    /// of two) that divides the offset. The cubin does not record the declared alignment; this is an
    /// upper bound of it that the layout is consistent with.
    pub align: u32,
}

/// A constant bank other than 0 that the module's data occupies, bound by the launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConstBank {
    /// Bank index (`c[index][...]` in the code).
    pub index: u32,
    /// Offset of its bytes in [`Module::image`].
    pub offset: u64,
    /// Its size in bytes.
    pub bytes: u32,
}

/// Everything a launch of one kernel needs from the cubin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// The kernel's (entry symbol's) name.
    pub name: String,
    /// Offset of its first instruction in [`Module::image`] (128-byte aligned).
    pub code_offset: u64,
    /// Bytes of code from `code_offset` (its `.text` section).
    pub code_bytes: u64,
    /// Registers per thread (`REGCOUNT`), unrounded.
    pub registers: u32,
    /// Parameters in signature order.
    pub params: Vec<ParamInfo>,
    /// Bytes of parameters (`CBANK_PARAM_SIZE`; 0 for a kernel without parameters).
    pub param_bytes: u32,
    /// Where the parameters start in constant bank 0 (`PARAM_CBANK`; the arch's base when absent).
    pub param_base: u32,
    /// Size of the kernel's `.nv.constant0` template (driver words + parameters).
    pub cbuf0_bytes: u32,
    /// Static shared memory per block, the reserved 1 KiB included (`.nv.shared.<fn>`, or the arch's
    /// reserved size when the kernel has none).
    pub shared_bytes: u32,
    /// Per-thread stack (`MIN_STACK_SIZE`, at least `FRAME_SIZE` and `MAX_STACK_SIZE`).
    pub stack_bytes: u32,
    /// Local memory per thread for the QMD: 0 without a stack, else stack + 0x240 rounded to 32.
    pub local_bytes_per_thread: u32,
    /// Named barriers the kernel uses (`NUM_BARRIERS`; 0 when absent).
    pub barriers: u32,
    /// Most threads per block the kernel was built for (`.maxntid` or `.reqntid`), if bounded.
    pub max_threads: Option<u32>,
    /// `.maxntid` (`MAX_THREADS`), if given.
    pub max_block: Option<[u32; 3]>,
    /// `.reqntid` (`REQNTID`): the only block shape the kernel runs with, if given.
    pub required_block: Option<[u32; 3]>,
    /// Offsets of the kernel's `EXIT` instructions from its entry.
    pub exit_offsets: Vec<u32>,
    /// Constant banks other than 0 to bind for this kernel (module-wide ones included).
    pub const_banks: Vec<ConstBank>,
}

/// How a relocation patches the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelocKind {
    /// R_CUDA_64 (2): the 64-bit address.
    Abs64,
    /// R_CUDA_G64 (4): the 64-bit generic address. Global memory is identity-mapped into the generic
    /// space (ptxas itself compiles `cvta.global` to nothing), so this is the same address.
    Generic64,
    /// 0x38: the low 32 bits of the address into bytes 4..8 of the 8 bytes at the offset (an
    /// instruction's immediate).
    Lo32InInstruction,
    /// 0x39: the high 32 bits, the same way.
    Hi32InInstruction,
}

impl RelocKind {
    fn from_elf(kind: u32) -> Option<RelocKind> {
        Some(match kind {
            2 => RelocKind::Abs64,
            4 => RelocKind::Generic64,
            0x38 => RelocKind::Lo32InInstruction,
            0x39 => RelocKind::Hi32InInstruction,
            _ => return None,
        })
    }
}

/// One patch to apply once the image's address is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Relocation {
    /// Where in [`Module::image`] the patched 8 bytes start.
    pub offset: u64,
    /// How to patch them.
    pub kind: RelocKind,
    /// The address to write, as an offset from the image's start (symbol + addend).
    pub target: u64,
}

/// A loaded cubin: one image to upload, its kernels, and the patches its address needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// SM number the cubin was built for (90 = sm_90).
    pub sm: u32,
    /// Every section the GPU reads, each at a 128-byte aligned offset; upload it (after
    /// [`Module::relocate`]) at a 128-byte aligned address, with [`CODE_SLACK_BYTES`] mapped after it.
    pub image: Vec<u8>,
    /// The kernels (entry functions), in symbol-table order.
    pub kernels: Vec<KernelInfo>,
    /// Module-wide constant banks other than 0 (also listed in each kernel's `const_banks`).
    pub const_banks: Vec<ConstBank>,
    relocations: Vec<Relocation>,
}

impl Module {
    /// Parses `bytes`, a cubin that must be for `arch`.
    pub fn parse(bytes: &[u8], arch: &Arch) -> Result<Module, CubinError> {
        let elf = Elf::parse(bytes)?;
        let wanted = arch.sm_number();
        if elf.sm != wanted {
            return Err(CubinError::ForeignArch { found: elf.sm, wanted });
        }
        load(&elf, arch)
    }

    /// The kernel called `name`.
    pub fn kernel(&self, name: &str) -> Result<&KernelInfo, CubinError> {
        self.kernels.iter().find(|k| k.name == name).ok_or_else(|| CubinError::NoSuchKernel { name: name.into() })
    }

    /// The patches [`Module::relocate`] applies.
    pub fn relocations(&self) -> &[Relocation] {
        &self.relocations
    }

    /// Bytes to allocate for the image: its size rounded up to a page, plus [`CODE_SLACK_BYTES`].
    pub fn alloc_bytes(&self) -> u64 {
        (self.image.len() as u64).next_multiple_of(4096) + CODE_SLACK_BYTES
    }

    /// The image with every relocation applied for a load at GPU address `image_va`.
    pub fn relocate(&self, image_va: u64) -> Result<Vec<u8>, CubinError> {
        if !image_va.is_multiple_of(IMAGE_ALIGN) {
            return Err(CubinError::MisalignedImage { va: image_va, align: IMAGE_ALIGN });
        }
        let mut image = self.image.clone();
        for r in &self.relocations {
            let address = image_va.checked_add(r.target).ok_or(CubinError::AddressOverflow { va: image_va })?;
            let at = r.offset as usize;
            match r.kind {
                RelocKind::Abs64 | RelocKind::Generic64 => image[at..at + 8].copy_from_slice(&address.to_le_bytes()),
                RelocKind::Lo32InInstruction => image[at + 4..at + 8].copy_from_slice(&(address as u32).to_le_bytes()),
                RelocKind::Hi32InInstruction => {
                    image[at + 4..at + 8].copy_from_slice(&((address >> 32) as u32).to_le_bytes())
                }
            }
        }
        Ok(image)
    }
}

/// The SM number a cubin was built for (`e_flags` bits 15:8), after checking it is a CUDA ELF.
pub fn cubin_sm(bytes: &[u8]) -> Result<u32, CubinError> {
    Elf::parse(bytes).map(|e| e.sm)
}

// ELF constants (System V gABI).
const ET_EXEC: u16 = 2;
const SHT_PROGBITS: u32 = 1;
const SHT_SYMTAB: u32 = 2;
const SHT_RELA: u32 = 4;
const SHT_NOBITS: u32 = 8;
const SHT_REL: u32 = 9;
const SHF_ALLOC: u64 = 2;
const STT_FUNC: u8 = 2;
const STO_CUDA_ENTRY: u8 = 0x10;

// `.nv.info` attributes (EIATTR_*), READ from public reverse-engineered tables, checked on our cubins.
const EIATTR_MAX_THREADS: u8 = 0x05;
const EIATTR_PARAM_CBANK: u8 = 0x0a;
const EIATTR_REQNTID: u8 = 0x10;
const EIATTR_FRAME_SIZE: u8 = 0x11;
const EIATTR_MIN_STACK_SIZE: u8 = 0x12;
const EIATTR_KPARAM_INFO: u8 = 0x17;
const EIATTR_CBANK_PARAM_SIZE: u8 = 0x19;
const EIATTR_EXIT_INSTR_OFFSETS: u8 = 0x1c;
const EIATTR_MAX_STACK_SIZE: u8 = 0x23;
const EIATTR_REGCOUNT: u8 = 0x2f;
const EIATTR_NUM_BARRIERS: u8 = 0x4c;

// `.nv.info` record formats (EIFMT_*).
const EIFMT_NVAL: u8 = 1;
const EIFMT_BVAL: u8 = 2;
const EIFMT_HVAL: u8 = 3;
const EIFMT_SVAL: u8 = 4;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from(u32_at(b, at)) | u64::from(u32_at(b, at + 4)) << 32
}

/// `bytes[offset..offset + len]`, or `Truncated` naming `what`.
fn slice(bytes: &[u8], offset: u64, len: u64, what: impl FnOnce() -> String) -> Result<&[u8], CubinError> {
    let end = offset.checked_add(len).filter(|&e| e <= bytes.len() as u64);
    match end {
        Some(end) => Ok(&bytes[offset as usize..end as usize]),
        None => Err(CubinError::Truncated { what: what() }),
    }
}

/// One section header.
#[derive(Clone, Debug)]
struct Section<'a> {
    name: &'a str,
    kind: u32,
    flags: u64,
    size: u64,
    link: u32,
    info: u32,
    align: u64,
    entsize: u64,
    /// The section's bytes (empty for NOBITS).
    data: &'a [u8],
}

/// One symbol.
#[derive(Clone, Copy, Debug)]
struct Symbol<'a> {
    name: &'a str,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
}

/// The parts of the ELF the loader reads.
struct Elf<'a> {
    sm: u32,
    sections: Vec<Section<'a>>,
    symbols: Vec<Symbol<'a>>,
}

/// The NUL-terminated string at `offset` of a string table.
fn c_str<'a>(table: &'a [u8], offset: u32, what: &str) -> Result<&'a str, CubinError> {
    let rest = table.get(offset as usize..).ok_or_else(|| CubinError::Truncated { what: what.into() })?;
    let end = rest.iter().position(|&c| c == 0).ok_or_else(|| CubinError::Truncated { what: what.into() })?;
    std::str::from_utf8(&rest[..end]).map_err(|_| CubinError::UnsupportedElf { why: "a name is not UTF-8" })
}

impl<'a> Elf<'a> {
    fn parse(bytes: &'a [u8]) -> Result<Elf<'a>, CubinError> {
        if !bytes.starts_with(b"\x7fELF") {
            return Err(CubinError::NotElf);
        }
        let header = slice(bytes, 0, 64, || "the ELF header".into())?;
        if header[4] != 2 {
            return Err(CubinError::UnsupportedElf { why: "not a 64-bit ELF" });
        }
        if header[5] != 1 {
            return Err(CubinError::UnsupportedElf { why: "not little-endian" });
        }
        let machine = u16_at(header, 18);
        if machine != EM_CUDA {
            return Err(CubinError::WrongMachine { found: machine });
        }
        if u16_at(header, 16) != ET_EXEC {
            return Err(CubinError::UnsupportedElf {
                why: "not an executable cubin (ptxas -c output is not loadable)",
            });
        }
        let sm = (u32_at(header, 48) >> 8) & 0xff;
        let shoff = u64_at(header, 40);
        let shentsize = u64::from(u16_at(header, 58));
        let shnum = u64::from(u16_at(header, 60));
        let shstrndx = usize::from(u16_at(header, 62));
        if shentsize != 64 {
            return Err(CubinError::UnsupportedElf { why: "section header size is not 64" });
        }
        let table = slice(bytes, shoff, shnum * 64, || "the section header table".into())?;

        let mut raw = Vec::with_capacity(shnum as usize);
        for h in table.chunks_exact(64) {
            let (kind, offset, size) = (u32_at(h, 4), u64_at(h, 24), u64_at(h, 32));
            raw.push((
                u32_at(h, 0),
                kind,
                u64_at(h, 8),
                offset,
                size,
                u32_at(h, 40),
                u32_at(h, 44),
                u64_at(h, 48),
                u64_at(h, 56),
            ));
        }
        let names = {
            let &(_, _, _, offset, size, ..) =
                raw.get(shstrndx).ok_or(CubinError::MissingSection { name: ".shstrtab".into() })?;
            slice(bytes, offset, size, || "section .shstrtab".into())?
        };
        let mut sections = Vec::with_capacity(raw.len());
        for (name, kind, flags, offset, size, link, info, align, entsize) in raw {
            let name = c_str(names, name, "a section name")?;
            let data = if kind == SHT_NOBITS || kind == 0 {
                &[][..]
            } else {
                slice(bytes, offset, size, || format!("section {name}"))?
            };
            sections.push(Section { name, kind, flags, size, link, info, align, entsize, data });
        }

        let symtab = sections
            .iter()
            .find(|s| s.kind == SHT_SYMTAB)
            .ok_or(CubinError::MissingSection { name: ".symtab".into() })?;
        let strtab =
            sections.get(symtab.link as usize).ok_or(CubinError::MissingSection { name: ".strtab".into() })?.data;
        if symtab.entsize != 24 {
            return Err(CubinError::UnsupportedElf { why: "symbol size is not 24" });
        }
        let mut symbols = Vec::new();
        for s in symtab.data.chunks_exact(24) {
            symbols.push(Symbol {
                name: c_str(strtab, u32_at(s, 0), "a symbol name")?,
                info: s[4],
                other: s[5],
                shndx: u16_at(s, 6),
                value: u64_at(s, 8),
            });
        }
        Ok(Elf { sm, sections, symbols })
    }

    fn section(&self, name: &str) -> Option<&Section<'a>> {
        self.sections.iter().find(|s| s.name == name)
    }
}

/// One `.nv.info*` record.
struct Record<'a> {
    /// Byte offset in the section.
    offset: usize,
    format: u8,
    attribute: u8,
    /// The u16 after the attribute: the value (formats 2, 3) or the payload length (format 4).
    value: u16,
    /// Format 4's payload.
    payload: &'a [u8],
}

fn records<'a>(section: &Section<'a>) -> Result<Vec<Record<'a>>, CubinError> {
    let bad = |offset, why| CubinError::BadNvInfo { section: section.name.into(), offset, why };
    let data = section.data;
    let mut out = Vec::new();
    let mut at = 0;
    while at < data.len() {
        if at + 4 > data.len() {
            return Err(bad(at, "record header runs past the section end"));
        }
        let (format, attribute, value) = (data[at], data[at + 1], u16_at(data, at + 2));
        let payload = match format {
            EIFMT_NVAL | EIFMT_BVAL | EIFMT_HVAL => &[][..],
            EIFMT_SVAL => {
                data.get(at + 4..at + 4 + usize::from(value)).ok_or(bad(at, "payload runs past the section end"))?
            }
            _ => return Err(bad(at, "unknown record format")),
        };
        out.push(Record { offset: at, format, attribute, value, payload });
        at += 4 + payload.len();
    }
    Ok(out)
}

/// Per-function attributes from `.nv.info`, keyed by symbol index.
#[derive(Default, Clone, Copy)]
struct FunctionAttrs {
    registers: Option<u32>,
    frame: u32,
    min_stack: u32,
    max_stack: u32,
}

fn module_attrs(elf: &Elf<'_>) -> Result<HashMap<u32, FunctionAttrs>, CubinError> {
    let section = elf.section(".nv.info").ok_or(CubinError::MissingSection { name: ".nv.info".into() })?;
    let mut attrs: HashMap<u32, FunctionAttrs> = HashMap::new();
    for r in records(section)? {
        let slot = match r.attribute {
            EIATTR_REGCOUNT | EIATTR_FRAME_SIZE | EIATTR_MIN_STACK_SIZE | EIATTR_MAX_STACK_SIZE => r.attribute,
            _ => continue,
        };
        if r.format != EIFMT_SVAL || r.payload.len() != 8 {
            return Err(CubinError::BadNvInfo {
                section: section.name.into(),
                offset: r.offset,
                why: "function attribute is not (symbol, value)",
            });
        }
        let (symbol, value) = (u32_at(r.payload, 0), u32_at(r.payload, 4));
        let a = attrs.entry(symbol).or_default();
        match slot {
            EIATTR_REGCOUNT => a.registers = Some(value),
            EIATTR_FRAME_SIZE => a.frame = value,
            EIATTR_MIN_STACK_SIZE => a.min_stack = value,
            _ => a.max_stack = value,
        }
    }
    Ok(attrs)
}

/// `.nv.constant<N>` or `.nv.constant<N>.<fn>`: (N, fn).
fn constant_bank_name(name: &str) -> Option<(u32, Option<&str>)> {
    let rest = name.strip_prefix(".nv.constant")?;
    let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    let index = rest[..digits].parse().ok()?;
    match &rest[digits..] {
        "" => Some((index, None)),
        tail => Some((index, Some(tail.strip_prefix('.')?))),
    }
}

/// Whether a section is part of the GPU image.
fn loaded(s: &Section<'_>) -> bool {
    if s.flags & SHF_ALLOC == 0 {
        return false;
    }
    // Bank 0 is rebuilt for every launch from the driver words and the arguments.
    if let Some((0, _)) = constant_bank_name(s.name) {
        return false;
    }
    match s.kind {
        SHT_PROGBITS => true,
        // Uninitialised `__device__` data needs zeroed room; shared memory is not in the image.
        SHT_NOBITS => s.name.starts_with(".nv.global"),
        _ => false,
    }
}

fn load(elf: &Elf<'_>, arch: &Arch) -> Result<Module, CubinError> {
    // Lay out the image.
    let mut image = Vec::new();
    let mut placed: HashMap<usize, u64> = HashMap::new();
    for (index, s) in elf.sections.iter().enumerate().filter(|(_, s)| loaded(s)) {
        let offset = (image.len() as u64).next_multiple_of(s.align.max(IMAGE_ALIGN));
        image.resize(offset as usize, 0);
        if s.kind == SHT_NOBITS {
            image.resize((offset + s.size) as usize, 0);
        } else {
            image.extend_from_slice(s.data);
        }
        placed.insert(index, offset);
    }
    image.resize((image.len() as u64).next_multiple_of(IMAGE_ALIGN) as usize, 0);

    let mut module_banks = Vec::new();
    let mut kernel_banks: HashMap<&str, Vec<ConstBank>> = HashMap::new();
    for (index, s) in elf.sections.iter().enumerate() {
        let (Some(&offset), Some((bank, owner))) = (placed.get(&index), constant_bank_name(s.name)) else {
            continue;
        };
        let b = ConstBank { index: bank, offset, bytes: s.size as u32 };
        match owner {
            None => module_banks.push(b),
            Some(f) => kernel_banks.entry(f).or_default().push(b),
        }
    }

    let relocations = relocations(elf, &placed)?;
    let attrs = module_attrs(elf)?;

    let mut kernels = Vec::new();
    for (symbol_index, sym) in elf.symbols.iter().enumerate() {
        if sym.info & 0xf != STT_FUNC || sym.other & STO_CUDA_ENTRY == 0 {
            continue;
        }
        let text_index = usize::from(sym.shndx);
        let text = elf.sections.get(text_index).filter(|s| s.name == format!(".text.{}", sym.name));
        let (Some(text), Some(&text_offset)) = (text, placed.get(&text_index)) else {
            return Err(CubinError::MissingSection { name: format!(".text.{}", sym.name) });
        };
        let a = attrs.get(&(symbol_index as u32)).copied().unwrap_or_default();
        let registers = a
            .registers
            .ok_or_else(|| CubinError::MissingAttribute { kernel: sym.name.into(), attribute: "REGCOUNT" })?;
        let stack = a.min_stack.max(a.frame).max(a.max_stack);
        let cbuf0_name = format!(".nv.constant0.{}", sym.name);
        let cbuf0 = elf.section(&cbuf0_name).ok_or(CubinError::MissingSection { name: cbuf0_name })?;
        let shared = elf.section(&format!(".nv.shared.{}", sym.name)).map(|s| s.size as u32);
        let mut k = KernelInfo {
            name: sym.name.into(),
            code_offset: text_offset + sym.value,
            code_bytes: text.size.saturating_sub(sym.value),
            registers,
            params: Vec::new(),
            param_bytes: 0,
            param_base: arch.param_base,
            cbuf0_bytes: cbuf0.size as u32,
            shared_bytes: shared.unwrap_or(arch.reserved_shared_bytes),
            stack_bytes: stack,
            local_bytes_per_thread: arch.local_bytes_for_stack(stack),
            barriers: 0,
            max_threads: None,
            max_block: None,
            required_block: None,
            exit_offsets: Vec::new(),
            const_banks: module_banks.iter().chain(kernel_banks.get(sym.name).into_iter().flatten()).copied().collect(),
        };
        let info_name = format!(".nv.info.{}", sym.name);
        let info = elf.section(&info_name).ok_or(CubinError::MissingSection { name: info_name })?;
        kernel_attrs(info, arch, &mut k)?;
        kernels.push(k);
    }
    Ok(Module { sm: elf.sm, image, kernels, const_banks: module_banks, relocations })
}

/// Reads `.nv.info.<fn>` into `k`.
fn kernel_attrs(section: &Section<'_>, arch: &Arch, k: &mut KernelInfo) -> Result<(), CubinError> {
    let bad = |offset, why| CubinError::BadNvInfo { section: section.name.into(), offset, why };
    let mut cbank: Option<(u32, u32)> = None;
    let mut param_size: Option<u32> = None;
    let dims = |r: &Record<'_>| -> Result<[u32; 3], CubinError> {
        if r.payload.len() != 12 {
            return Err(bad(r.offset, "launch bound is not three u32"));
        }
        Ok([0, 4, 8].map(|at| u32_at(r.payload, at)))
    };
    for r in records(section)? {
        match r.attribute {
            EIATTR_PARAM_CBANK => {
                if r.payload.len() != 8 {
                    return Err(bad(r.offset, "PARAM_CBANK is not (symbol, offset, size)"));
                }
                cbank = Some((u32::from(u16_at(r.payload, 4)), u32::from(u16_at(r.payload, 6))));
            }
            EIATTR_CBANK_PARAM_SIZE => param_size = Some(u32::from(r.value)),
            EIATTR_KPARAM_INFO => {
                if r.payload.len() != 12 {
                    return Err(bad(r.offset, "KPARAM_INFO is not 12 bytes"));
                }
                let flags = u32_at(r.payload, 8);
                // Bit 17 clear: the parameter lives in a constant bank (the only kind a launch writes).
                if flags & (1 << 17) != 0 {
                    return Err(bad(r.offset, "parameter not passed in a constant bank"));
                }
                let (offset, size) = (u32::from(u16_at(r.payload, 6)), flags >> 18);
                let align_cap = size.max(1).next_power_of_two().min(16);
                let align = if offset == 0 { align_cap } else { (1 << offset.trailing_zeros()).min(align_cap) };
                k.params.push(ParamInfo { ordinal: u32::from(u16_at(r.payload, 4)), offset, size, align });
            }
            EIATTR_NUM_BARRIERS => k.barriers = u32::from(r.value & 0xff),
            EIATTR_EXIT_INSTR_OFFSETS => {
                if r.payload.len() % 4 != 0 {
                    return Err(bad(r.offset, "EXIT_INSTR_OFFSETS is not a list of u32"));
                }
                k.exit_offsets = r.payload.chunks_exact(4).map(|c| u32_at(c, 0)).collect();
            }
            EIATTR_MAX_THREADS => k.max_block = Some(dims(&r)?),
            EIATTR_REQNTID => k.required_block = Some(dims(&r)?),
            _ => {}
        }
    }
    // ptxas lists the last parameter first.
    k.params.sort_by_key(|p| p.ordinal);
    if k.params.iter().enumerate().any(|(i, p)| p.ordinal != i as u32) {
        return Err(bad(0, "parameter ordinals are not 0..n"));
    }
    let end = k.params.iter().map(|p| p.offset + p.size).max().unwrap_or(0);
    if let Some((base, bytes)) = cbank {
        if base != arch.param_base {
            return Err(bad(0, "PARAM_CBANK's parameter base differs from the architecture table"));
        }
        k.param_base = base;
        k.param_bytes = bytes;
    }
    if let Some(size) = param_size {
        if cbank.is_some_and(|(_, bytes)| bytes != size) {
            return Err(bad(0, "CBANK_PARAM_SIZE and PARAM_CBANK disagree"));
        }
        k.param_bytes = size;
    }
    if end > k.param_bytes || k.param_base + k.param_bytes > k.cbuf0_bytes {
        return Err(bad(0, "parameters do not fit the parameter block"));
    }
    let product = |d: [u32; 3]| d.iter().map(|&x| x.max(1)).product::<u32>();
    k.max_threads = match (k.max_block, k.required_block) {
        (Some(m), Some(r)) => Some(product(m).min(product(r))),
        (Some(d), None) | (None, Some(d)) => Some(product(d)),
        (None, None) => None,
    };
    Ok(())
}

/// Reads every relocation that targets a loaded section.
fn relocations(elf: &Elf<'_>, placed: &HashMap<usize, u64>) -> Result<Vec<Relocation>, CubinError> {
    let mut out = Vec::new();
    for s in elf.sections.iter().filter(|s| s.kind == SHT_RELA || s.kind == SHT_REL) {
        let bad = |why| CubinError::BadRelocation { section: s.name.into(), why };
        let target_index = s.info as usize;
        let target = elf.sections.get(target_index).ok_or_else(|| bad("target section does not exist"))?;
        let Some(&target_offset) = placed.get(&target_index) else {
            if target.flags & SHF_ALLOC == 0 {
                // Debug information: never on the GPU, never patched.
                continue;
            }
            return Err(bad("targets a section that is not loaded"));
        };
        if s.kind == SHT_REL {
            return Err(bad("SHT_REL (implicit addends) is not supported"));
        }
        if s.entsize != 24 {
            return Err(bad("entry size is not 24"));
        }
        for e in s.data.chunks_exact(24) {
            let (r_offset, r_info, addend) = (u64_at(e, 0), u64_at(e, 8), u64_at(e, 16) as i64);
            let kind = (r_info & 0xffff_ffff) as u32;
            let kind = RelocKind::from_elf(kind)
                .ok_or_else(|| CubinError::UnknownRelocation { kind, section: s.name.into() })?;
            if r_offset.checked_add(8).is_none_or(|end| end > target.size) {
                return Err(bad("patch runs past the end of its section"));
            }
            let sym = elf.symbols.get((r_info >> 32) as usize).ok_or_else(|| bad("symbol index out of range"))?;
            if sym.shndx == 0 {
                return Err(bad("undefined symbol"));
            }
            let sym_offset =
                placed.get(&usize::from(sym.shndx)).ok_or_else(|| bad("symbol in a section that is not loaded"))?;
            let target = (sym_offset + sym.value)
                .checked_add_signed(addend)
                .ok_or_else(|| bad("symbol + addend is negative or overflows"))?;
            out.push(Relocation { offset: target_offset + r_offset, kind, target });
        }
    }
    Ok(out)
}

/// Byte range of `name`'s section in the file (for tests that corrupt a cubin on purpose).
#[doc(hidden)]
pub fn section_file_range(bytes: &[u8], name: &str) -> Option<Range<usize>> {
    let elf = Elf::parse(bytes).ok()?;
    let s = elf.section(name)?;
    let start = s.data.as_ptr() as usize - bytes.as_ptr() as usize;
    Some(start..start + s.data.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_bank_names() {
        assert_eq!(constant_bank_name(".nv.constant3"), Some((3, None)));
        assert_eq!(constant_bank_name(".nv.constant0.vector_add"), Some((0, Some("vector_add"))));
        assert_eq!(constant_bank_name(".nv.constant12.k.x"), Some((12, Some("k.x"))));
        assert_eq!(constant_bank_name(".nv.constant"), None);
        assert_eq!(constant_bank_name(".nv.constantX"), None);
        assert_eq!(constant_bank_name(".nv.constant2x"), None);
        assert_eq!(constant_bank_name(".nv.global"), None);
    }

    #[test]
    fn records_parse_every_format_and_reject_overruns() {
        const DATA: &[u8] = &[
            0x01, 0x99, 0x00, 0x00, // NVAL
            0x02, 0x4c, 0x01, 0x00, // BVAL 1
            0x03, 0x19, 0x1c, 0x00, // HVAL 0x1c
            0x04, 0x1c, 0x04, 0x00, 0x70, 0, 0, 0, // SVAL, 4 bytes
        ];
        let s = |data: &'static [u8]| Section {
            name: ".nv.info.k",
            kind: 0x7000_0000,
            flags: 0,
            size: data.len() as u64,
            link: 0,
            info: 0,
            align: 4,
            entsize: 0,
            data,
        };
        let r = records(&s(DATA)).unwrap();
        assert_eq!(r.len(), 4);
        assert_eq!((r[1].attribute, r[1].value), (0x4c, 1));
        assert_eq!((r[2].format, r[2].value), (3, 0x1c));
        assert_eq!((r[3].offset, r[3].payload), (12, &[0x70, 0, 0, 0][..]));
        let short: &'static [u8] = &[0x04, 0x1c, 0x08, 0x00, 0x70, 0, 0, 0];
        assert!(matches!(records(&s(short)), Err(CubinError::BadNvInfo { offset: 0, .. })));
        let odd: &'static [u8] = &[0x02, 0x4c];
        assert!(matches!(records(&s(odd)), Err(CubinError::BadNvInfo { .. })));
        let unknown: &'static [u8] = &[0x07, 0x4c, 0, 0];
        assert!(matches!(records(&s(unknown)), Err(CubinError::BadNvInfo { why: "unknown record format", .. })));
    }
}
