//! # Cubin loader
//!
//! A cubin is an ELF64 file (`e_machine` 190, EM_CUDA) that ptxas or nvcc writes for one SM version.
//! Loading one means: copy every section the GPU reads into two images (read-only code and constants;
//! writable `__device__` data), find each kernel's entry and launch attributes, work out what each kernel
//! calls, and patch the images' absolute addresses once their GPU addresses — and the addresses of the
//! symbols the module leaves undefined, such as `vprintf` — are known. All of it is pure byte work; the
//! ELF is parsed by hand so that every failure can say which section and why. Like [`crate::arch`], it
//! belongs to no backend: the session's loader parses the same cubin on every platform.
//!
//! What a kernel needs is spread over several sections (facts VERIFIED on ptxas / nvcc 13.0 output, see
//! `shared/docs/nvidia-bringup.md` section 9, `docs/kernels.md` and `hal/tests/fixtures/`):
//!
//! | Section | What it gives |
//! |---|---|
//! | `.text.<fn>` | the code; entry at the kernel symbol (`STT_FUNC`, `st_other` bit 0x10 = CUDA entry; LOCAL for template kernels with internal linkage) |
//! | `.nv.info` | per function symbol: `REGCOUNT`, `FRAME_SIZE`, `MIN_STACK_SIZE`, `MAX_STACK_SIZE` |
//! | `.nv.info.<fn>` | `PARAM_CBANK`, `CBANK_PARAM_SIZE`, `KPARAM_INFO` per parameter, `NUM_BARRIERS`, `EXIT_INSTR_OFFSETS`, `MAX_THREADS`, `REQNTID`, `EXTERNS`, `CRS_STACK_SIZE`, `REG_RECONFIG`, `NUM_MBARRIERS`, `EXPLICIT_CLUSTER`, `CTA_PER_CLUSTER`, `MAXREG_COUNT` |
//! | `.nv.callgraph` | (caller, callee) symbol pairs: what each function calls, undefined symbols included |
//! | `.nv.compat` | module-wide compatibility attributes (`EICOMPAT_*`: ISA class, tensor-map use, ...) |
//! | `.nv.constant0.<fn>` | constant bank 0's size (driver words + parameters); its zeros are not loaded |
//! | `.nv.shared.<fn>` | NOBITS: static shared memory, the reserved 1 KiB included |
//! | `.nv.constant<N>` | module data a kernel reads from bank N: 3 = `__constant__` data, 4 = addresses of `__device__` data and of called undefined functions |
//! | `.nv.global`, `.nv.global.init` | `__device__` data (NOBITS zeros / initialised, string literals included): the writable [`Segment::Data`] |
//! | `.rela.<section>` | absolute addresses to patch ([`RelocKind`]) |
//!
//! Debug sections (`.debug_frame`, not `SHF_ALLOC`) are neither loaded nor relocated.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use crate::arch::Arch;

/// `e_machine` of a cubin.
pub const EM_CUDA: u16 = 190;
/// Alignment of every section in an image, and so of each image's GPU address (tinygrad's choice; code
/// needs 128, constant banks 64).
pub const IMAGE_ALIGN: u64 = 128;
/// Bytes to leave mapped after the code image: the instruction prefetcher's reach past the last instruction.
pub const CODE_SLACK_BYTES: u64 = crate::arch::CODE_PREFETCH_TAIL;
/// Stack assumed for a function whose call graph is recursive (its depth is not static): CUDA's default
/// per-thread stack limit (`cudaLimitStackSize`).
pub const RECURSIVE_STACK_BYTES: u32 = 1024;

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
    /// A section the loader does not know where to put.
    #[error("section {name}: {why}")]
    UnsupportedSection {
        /// Its name.
        name: String,
        /// What is wrong with it.
        why: &'static str,
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
    #[error("no kernel named {name} in the module (its kernels: {})", known.join(", "))]
    NoSuchKernel {
        /// The name asked for.
        name: String,
        /// The kernels the module has, by (mangled) symbol name.
        known: Vec<String>,
    },
    /// No function of that name in the module.
    #[error("no function named {name} in the module")]
    NoSuchFunction {
        /// The name asked for.
        name: String,
    },
    /// A kernel needs a symbol the module does not define and nothing provides.
    #[error("kernel {kernel} needs symbol {symbol}, which the module does not define and nothing provides")]
    UnresolvedSymbol {
        /// The kernel (or function).
        kernel: String,
        /// The undefined symbol.
        symbol: String,
    },
    /// An image address without the image's alignment.
    #[error("image address {va:#x} is not {align}-byte aligned")]
    MisalignedImage {
        /// The address.
        va: u64,
        /// The alignment needed.
        align: u64,
    },
    /// An image address so high that a relocated address overflows its field.
    #[error("address {va:#x} overflows a relocated address")]
    AddressOverflow {
        /// The address.
        va: u64,
    },
}

/// One kernel parameter, as `KPARAM_INFO` describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KParamInfo {
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

/// The two places a module's bytes are loaded to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Segment {
    /// [`Module::image`]: code and constant banks; GPU read and execute, never written by the GPU.
    Code,
    /// [`Module::data`]: `__device__` data (`.nv.global.init`, `.nv.global`); GPU read and write.
    Data,
}

/// A constant bank other than 0 that the module's data occupies, bound by the launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModuleConstBank {
    /// Bank index (`c[index][...]` in the code).
    pub index: u32,
    /// Offset of its bytes in [`Module::image`].
    pub offset: u64,
    /// Its size in bytes.
    pub bytes: u32,
}

/// A data object the module defines (`__device__`, `__constant__` variables, string literals).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataSymbol {
    /// The symbol's name (`counter`, `$str`, ...).
    pub name: String,
    /// Which image holds it.
    pub segment: Segment,
    /// Its offset in that image.
    pub offset: u64,
    /// Its size in bytes.
    pub bytes: u64,
}

/// Everything a launch of one kernel needs from the cubin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// The kernel's (entry symbol's) name: the mangled name for C++ kernels.
    pub name: String,
    /// True for an entry with LOCAL binding (a template or `static` kernel with internal linkage).
    pub local: bool,
    /// Offset of its first instruction in [`Module::image`] (128-byte aligned).
    pub code_offset: u64,
    /// Bytes of code from `code_offset` (its `.text` section).
    pub code_bytes: u64,
    /// Registers per thread (`REGCOUNT`), unrounded: the most any function of the module that it reaches
    /// through its call graph declares. Undefined callees (see `externs`) are not counted.
    pub registers: u32,
    /// Parameters in signature order.
    pub params: Vec<KParamInfo>,
    /// Bytes of parameters (`CBANK_PARAM_SIZE`; 0 for a kernel without parameters).
    pub param_bytes: u32,
    /// Where the parameters start in constant bank 0 (`PARAM_CBANK`; the arch's base when absent).
    pub param_base: u32,
    /// Size of the kernel's `.nv.constant0` template (driver words + parameters).
    pub cbuf0_bytes: u32,
    /// Static shared memory per block, the reserved 1 KiB included (`.nv.shared.<fn>`, or the arch's
    /// reserved size when the kernel has none).
    pub shared_bytes: u32,
    /// The kernel's own frame (`FRAME_SIZE`).
    pub frame_bytes: u32,
    /// Per-thread stack of the kernel and what it calls inside the module: the largest of
    /// `MIN_STACK_SIZE`, `MAX_STACK_SIZE` and frame + the deepest callee chain. Undefined callees are not
    /// counted ([`Module::link`] adds them).
    pub stack_bytes: u32,
    /// Local memory per thread for the QMD: 0 without a stack, else stack + 0x240 rounded to 32.
    pub local_bytes_per_thread: u32,
    /// Call-return stack (`CRS_STACK_SIZE`; 0 on Volta and later, where calls do not use it).
    pub crs_stack_bytes: u32,
    /// Named barriers the kernel uses (`NUM_BARRIERS`; 0 when absent).
    pub barriers: u32,
    /// `mbarrier` objects it declares (`NUM_MBARRIERS`; 0 when absent).
    pub mbarriers: u32,
    /// True when the kernel changes its register count at run time (`setmaxnreg`: `REG_RECONFIG`).
    pub reg_reconfig: bool,
    /// The `maxrregcount` the kernel was built under (`MAXREG_COUNT`), if given.
    pub max_registers: Option<u32>,
    /// Most threads per block the kernel was built for (`.maxntid` or `.reqntid`), if bounded.
    pub max_threads: Option<u32>,
    /// `.maxntid` (`MAX_THREADS`), if given.
    pub max_block: Option<[u32; 3]>,
    /// `.reqntid` (`REQNTID`): the only block shape the kernel runs with, if given.
    pub required_block: Option<[u32; 3]>,
    /// True when the kernel was built for a cluster launch (`EXPLICIT_CLUSTER`, from `__cluster_dims__`).
    pub explicit_cluster: bool,
    /// Its cluster shape in CTAs (`CTA_PER_CLUSTER`), if given.
    pub cluster_dims: Option<[u32; 3]>,
    /// Offsets of the kernel's `EXIT` instructions from its entry.
    pub exit_offsets: Vec<u32>,
    /// Constant banks other than 0 to bind for this kernel (module-wide ones included).
    pub const_banks: Vec<ModuleConstBank>,
    /// Symbols the module leaves undefined that this kernel needs (`EXTERNS`, the call graph, relocations
    /// in its own code; and any undefined symbol that no function claims, which every kernel gets).
    pub externs: Vec<String>,
}

/// A function that is not a kernel entry (a device library's exported function, or a callee).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionInfo {
    /// Its symbol name.
    pub name: String,
    /// Offset of its first instruction in [`Module::image`].
    pub code_offset: u64,
    /// Bytes of its code.
    pub code_bytes: u64,
    /// Registers it and what it calls inside the module use (`REGCOUNT`).
    pub registers: u32,
    /// Its own frame (`FRAME_SIZE`).
    pub frame_bytes: u32,
    /// Its stack, callees inside the module included (as [`KernelInfo::stack_bytes`]).
    pub stack_bytes: u32,
    /// Undefined symbols it needs.
    pub externs: Vec<String>,
}

/// What a caller needs of a function that a module calls but does not define (found by the loader's
/// resolver, e.g. Omega's own `vprintf`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExternalFunction {
    /// Registers it uses.
    pub registers: u32,
    /// Per-thread stack it needs, its callees included.
    pub stack_bytes: u32,
}

/// One kernel's needs once its undefined callees are known ([`Module::link`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linked {
    /// Registers per thread: the most any function it can reach uses.
    pub registers: u32,
    /// Per-thread stack: its own frame plus the deepest call chain, undefined callees included.
    pub stack_bytes: u32,
    /// Local memory per thread for the QMD.
    pub local_bytes_per_thread: u32,
}

/// How a relocation patches an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelocKind {
    /// R_CUDA_64 (2): the 64-bit address.
    Abs64,
    /// R_CUDA_G64 (4): the 64-bit generic address. Global memory is identity-mapped into the generic
    /// space (ptxas itself compiles `cvta.global` to nothing), so this is the same address.
    Generic64,
    /// R_CUDA_ABS32_LO_32 (0x38): the low 32 bits of the address into bytes 4..8 of the 8 bytes at the
    /// offset (an instruction's 32-bit immediate, `MOV R, 32@lo(sym)`).
    Lo32InInstruction,
    /// R_CUDA_ABS32_HI_32 (0x39): the high 32 bits, the same way.
    Hi32InInstruction,
    /// R_CUDA_ABS55_16_34 (0x4b): a call target (`CALL.ABS.NOINC sym`) in the 16-byte instruction at the
    /// offset: the address in 4-byte units, 55 bits, its low 8 bits at instruction bits 16..24 and the
    /// other 47 at bits 34..81 (READ from nvdisasm, which decodes each of these bits as that address bit).
    CallTarget55,
}

impl RelocKind {
    fn from_elf(kind: u32) -> Option<RelocKind> {
        Some(match kind {
            2 => RelocKind::Abs64,
            4 => RelocKind::Generic64,
            0x38 => RelocKind::Lo32InInstruction,
            0x39 => RelocKind::Hi32InInstruction,
            0x4b => RelocKind::CallTarget55,
            _ => return None,
        })
    }

    /// Bytes the patch spans from the relocation's offset.
    fn width(self) -> u64 {
        match self {
            RelocKind::CallTarget55 => 16,
            _ => 8,
        }
    }

    /// Writes `address` into `at` (of [`RelocKind::width`] bytes).
    fn patch(self, at: &mut [u8], address: u64) -> Result<(), CubinError> {
        match self {
            RelocKind::Abs64 | RelocKind::Generic64 => at[..8].copy_from_slice(&address.to_le_bytes()),
            RelocKind::Lo32InInstruction => at[4..8].copy_from_slice(&(address as u32).to_le_bytes()),
            RelocKind::Hi32InInstruction => at[4..8].copy_from_slice(&((address >> 32) as u32).to_le_bytes()),
            RelocKind::CallTarget55 => {
                let units = address >> 2;
                if !address.is_multiple_of(4) || units >> 55 != 0 {
                    return Err(CubinError::AddressOverflow { va: address });
                }
                let mut word = u128::from_le_bytes(at[..16].try_into().expect("16 bytes"));
                let low_mask = 0xffu128 << 16;
                let high_mask = ((1u128 << 47) - 1) << 34;
                word &= !(low_mask | high_mask);
                word |= (u128::from(units) & 0xff) << 16;
                word |= (u128::from(units) >> 8) << 34;
                at[..16].copy_from_slice(&word.to_le_bytes());
            }
        }
        Ok(())
    }
}

/// What a relocation writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelocTarget {
    /// An address inside the module: an image and an offset in it (symbol + addend).
    Image {
        /// The image.
        segment: Segment,
        /// The offset.
        offset: u64,
    },
    /// The address of a symbol the module does not define, plus an addend.
    External {
        /// The symbol.
        symbol: String,
        /// Added to its address.
        addend: i64,
    },
}

/// One patch to apply once the images' addresses are known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relocation {
    /// The image the patched bytes are in.
    pub segment: Segment,
    /// Where in that image the patched bytes start.
    pub offset: u64,
    /// How to patch them.
    pub kind: RelocKind,
    /// The address to write.
    pub target: RelocTarget,
}

/// Whether the file is ready to run or an object for a linker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElfType {
    /// ET_EXEC: `nvcc -cubin`, `ptxas`, `nvlink` output.
    Executable,
    /// ET_REL: `nvcc -cubin -rdc=true`, `ptxas -c` output. Loadable here as long as every symbol its
    /// kernels need is defined in it or provided by the loader's resolver.
    Relocatable,
}

/// The value of one `.nv.compat` record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompatValue {
    /// A flag (`EIFMT_NVAL`).
    Flag,
    /// A byte or half-word (`EIFMT_BVAL`, `EIFMT_HVAL`).
    Value(u16),
    /// A payload (`EIFMT_SVAL`).
    Bytes(Vec<u8>),
}

/// One `.nv.compat` record (`EICOMPAT_ATTR_*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompatAttr {
    /// The attribute's number (see the `EICOMPAT_*` constants).
    pub attribute: u8,
    /// Its value.
    pub value: CompatValue,
}

/// `EICOMPAT_ATTR_ISA_CLASS`: 1 for portable code, 2 for arch-specific (`sm_90a`) features.
pub const EICOMPAT_ISA_CLASS: u8 = 0x02;
/// `EICOMPAT_ATTR_INST_TENSORMAP_V1`: the module uses tensor-map (TMA descriptor) instructions.
pub const EICOMPAT_INST_TENSORMAP_V1: u8 = 0x03;
/// `EICOMPAT_ATTR_MERCURY_ISA_MAJOR_MINOR_VERSION`.
pub const EICOMPAT_MERCURY_ISA_VERSION: u8 = 0x07;
/// `EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET`.
pub const EICOMPAT_ACCELERATOR_TARGET: u8 = 0x09;

/// A loaded cubin: two images to upload, its kernels and functions, and the patches their addresses need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// SM number the cubin was built for (90 = sm_90 and sm_90a).
    pub sm: u32,
    /// Executable or relocatable.
    pub elf_type: ElfType,
    /// Code and constant banks, each at a 128-byte aligned offset; upload it (after [`Module::relocate`])
    /// at a 128-byte aligned address the GPU may execute and read, with [`CODE_SLACK_BYTES`] mapped after
    /// it.
    pub image: Vec<u8>,
    /// `__device__` data (initialised, then zeroed NOBITS room), each section at a 128-byte aligned
    /// offset; upload it (after [`Module::relocate`]) at a 128-byte aligned address the GPU may read and
    /// write. Empty when the module has no such data.
    pub data: Vec<u8>,
    /// The kernels (entry functions), in symbol-table order.
    pub kernels: Vec<KernelInfo>,
    /// The functions that are not entries, in symbol-table order.
    pub functions: Vec<FunctionInfo>,
    /// Module-wide constant banks other than 0 (also listed in each kernel's `const_banks`).
    pub const_banks: Vec<ModuleConstBank>,
    /// The data objects it defines.
    pub symbols: Vec<DataSymbol>,
    /// Undefined symbols its relocations name, sorted.
    pub undefined: Vec<String>,
    /// Its `.nv.compat` records.
    pub compat: Vec<CompatAttr>,
    relocations: Vec<Relocation>,
    /// Function name -> (frame, registers, callees): what [`Module::link`] walks.
    graph: HashMap<String, CallNode>,
}

/// One function in the call graph.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct CallNode {
    registers: u32,
    frame: u32,
    /// The tool's own whole-tree stack figure (`MIN_STACK_SIZE`, `MAX_STACK_SIZE`).
    stated_stack: u32,
    callees: Vec<String>,
    /// Undefined symbols its own code or `EXTERNS` names.
    externs: Vec<String>,
}

/// Both images of a module, patched for their addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relocated {
    /// [`Module::image`], patched.
    pub image: Vec<u8>,
    /// [`Module::data`], patched.
    pub data: Vec<u8>,
    /// Undefined symbols the resolver did not know: their patches were not applied (the bytes keep the
    /// cubin's zeros), so no kernel that needs one may run.
    pub unresolved: Vec<String>,
}

impl Module {
    /// Parses `bytes`, a cubin (executable or relocatable) that must be for `arch`.
    pub fn parse(bytes: &[u8], arch: &Arch) -> Result<Module, CubinError> {
        let elf = Elf::parse(bytes)?;
        let wanted = arch.sm_number();
        if elf.sm != wanted {
            return Err(CubinError::ForeignArch { found: elf.sm, wanted });
        }
        load(&elf, arch)
    }

    /// The kernel called `name` (its symbol name: mangled for C++ kernels).
    pub fn kernel(&self, name: &str) -> Result<&KernelInfo, CubinError> {
        self.kernels.iter().find(|k| k.name == name).ok_or_else(|| CubinError::NoSuchKernel {
            name: name.into(),
            known: self.kernels.iter().map(|k| k.name.clone()).collect(),
        })
    }

    /// The (non-entry) function called `name`.
    pub fn function(&self, name: &str) -> Result<&FunctionInfo, CubinError> {
        self.functions.iter().find(|f| f.name == name).ok_or_else(|| CubinError::NoSuchFunction { name: name.into() })
    }

    /// The data object called `name`.
    pub fn symbol(&self, name: &str) -> Option<&DataSymbol> {
        self.symbols.iter().find(|s| s.name == name)
    }

    /// The value of `.nv.compat` attribute `attribute`, if the module has it.
    pub fn compat(&self, attribute: u8) -> Option<&CompatValue> {
        self.compat.iter().find(|c| c.attribute == attribute).map(|c| &c.value)
    }

    /// The patches [`Module::relocate`] applies.
    pub fn relocations(&self) -> &[Relocation] {
        &self.relocations
    }

    /// Bytes to allocate for the code image: its size rounded up to a page, plus [`CODE_SLACK_BYTES`].
    pub fn alloc_bytes(&self) -> u64 {
        (self.image.len() as u64).next_multiple_of(4096) + CODE_SLACK_BYTES
    }

    /// Bytes to allocate for both images in one buffer ([`Module::relocate_in_one`]).
    pub fn alloc_bytes_in_one(&self) -> u64 {
        ((self.image.len() + self.data.len()) as u64).next_multiple_of(4096) + CODE_SLACK_BYTES
    }

    /// Both images in one buffer at `va`: the code image, then the data image right after it (at
    /// `va + image.len()`), every relocation applied and undefined symbols left unpatched. For a loader
    /// with one buffer, whose `__device__` data the GPU may then read but, in a code buffer, not write.
    pub fn relocate_in_one(&self, va: u64) -> Result<Vec<u8>, CubinError> {
        let data_va = va.checked_add(self.image.len() as u64).ok_or(CubinError::AddressOverflow { va })?;
        let r = self.relocate(va, data_va, &|_| None)?;
        let mut bytes = r.image;
        bytes.extend_from_slice(&r.data);
        Ok(bytes)
    }

    /// Registers and stack of `kernel` (of this module) once the functions it calls but the module does not
    /// define are known: `external` gives each one's needs, or `None` when nothing provides it — which
    /// refuses the kernel with [`CubinError::UnresolvedSymbol`] naming the symbol.
    pub fn link(
        &self,
        kernel: &KernelInfo,
        arch: &Arch,
        external: &dyn Fn(&str) -> Option<ExternalFunction>,
    ) -> Result<Linked, CubinError> {
        for symbol in &kernel.externs {
            if external(symbol).is_none() {
                return Err(CubinError::UnresolvedSymbol { kernel: kernel.name.clone(), symbol: symbol.clone() });
            }
        }
        let (registers, stack) = needs(&self.graph, &kernel.name, external, &mut Vec::new());
        let registers = registers.max(kernel.registers);
        let stack_bytes = stack.max(kernel.stack_bytes);
        Ok(Linked { registers, stack_bytes, local_bytes_per_thread: arch.local_bytes_for_stack(stack_bytes) })
    }

    /// Both images with every relocation applied, for a load of the code image at `image_va` and the data
    /// image at `data_va` (either 128-byte aligned; `data_va` is ignored when [`Module::data`] is empty).
    /// `resolve` gives the address of a symbol the module does not define; the patches of one it does not
    /// know are skipped and the symbol listed in [`Relocated::unresolved`].
    pub fn relocate(
        &self,
        image_va: u64,
        data_va: u64,
        resolve: &dyn Fn(&str) -> Option<u64>,
    ) -> Result<Relocated, CubinError> {
        for va in [image_va, if self.data.is_empty() { 0 } else { data_va }] {
            if !va.is_multiple_of(IMAGE_ALIGN) {
                return Err(CubinError::MisalignedImage { va, align: IMAGE_ALIGN });
            }
        }
        let mut out = Relocated { image: self.image.clone(), data: self.data.clone(), unresolved: Vec::new() };
        for r in &self.relocations {
            let address = match &r.target {
                RelocTarget::Image { segment, offset } => {
                    let base = if *segment == Segment::Code { image_va } else { data_va };
                    base.checked_add(*offset).ok_or(CubinError::AddressOverflow { va: base })?
                }
                RelocTarget::External { symbol, addend } => match resolve(symbol) {
                    Some(a) => a.checked_add_signed(*addend).ok_or(CubinError::AddressOverflow { va: a })?,
                    None => {
                        if !out.unresolved.contains(symbol) {
                            out.unresolved.push(symbol.clone());
                        }
                        continue;
                    }
                },
            };
            let bytes = if r.segment == Segment::Code { &mut out.image } else { &mut out.data };
            let at = r.offset as usize;
            r.kind.patch(&mut bytes[at..at + r.kind.width() as usize], address)?;
        }
        out.unresolved.sort();
        Ok(out)
    }
}

/// (registers, stack) of `name` and everything it calls: frame + the deepest callee; an external callee
/// counts what `external` says of it. A call cycle counts [`RECURSIVE_STACK_BYTES`] for the repeat.
fn needs(
    graph: &HashMap<String, CallNode>,
    name: &str,
    external: &dyn Fn(&str) -> Option<ExternalFunction>,
    path: &mut Vec<String>,
) -> (u32, u32) {
    let Some(node) = graph.get(name) else {
        let e = external(name).unwrap_or_default();
        return (e.registers, e.stack_bytes);
    };
    if path.iter().any(|p| p == name) {
        return (node.registers, RECURSIVE_STACK_BYTES);
    }
    path.push(name.to_owned());
    let (mut registers, mut deepest) = (node.registers, 0);
    for callee in node.callees.iter().chain(&node.externs) {
        let (r, s) = needs(graph, callee, external, path);
        registers = registers.max(r);
        deepest = deepest.max(s);
    }
    path.pop();
    (registers, node.stated_stack.max(node.frame.saturating_add(deepest)))
}

/// The SM number a cubin was built for (`e_flags` bits 15:8), after checking it is a CUDA ELF.
pub fn cubin_sm(bytes: &[u8]) -> Result<u32, CubinError> {
    Elf::parse(bytes).map(|e| e.sm)
}

// ELF constants (System V gABI) and the CUDA section types nvcc's relocatable output uses.
const ET_REL: u16 = 1;
const ET_EXEC: u16 = 2;
const SHT_PROGBITS: u32 = 1;
const SHT_SYMTAB: u32 = 2;
const SHT_RELA: u32 = 4;
const SHT_NOBITS: u32 = 8;
const SHT_REL: u32 = 9;
/// `.nv.global` in a relocatable cubin: NOBITS by another number.
const SHT_CUDA_GLOBAL: u32 = 0x7000_0007;
/// `.nv.global.init` in a relocatable cubin.
const SHT_CUDA_GLOBAL_INIT: u32 = 0x7000_0008;
/// `.nv.callgraph`.
const SHT_CUDA_CALLGRAPH: u32 = 0x7000_0001;
/// `.nv.constant<N>` in a relocatable cubin is this plus N.
const SHT_CUDA_CONSTANT0: u32 = 0x7000_0064;
const SHF_WRITE: u64 = 1;
const SHF_ALLOC: u64 = 2;
const STB_LOCAL: u8 = 0;
const STT_OBJECT: u8 = 1;
const STT_FUNC: u8 = 2;
/// nvcc's type for a string literal or `__device__` object in a relocatable cubin.
const STT_CUDA_OBJECT: u8 = 13;
const STO_CUDA_ENTRY: u8 = 0x10;

// `.nv.info` attributes (EIATTR_*), READ from public reverse-engineered tables and matched one by one to
// the names `cuobjdump -elf` prints for nvcc 13.0 cubins.
const EIATTR_MAX_THREADS: u8 = 0x05;
const EIATTR_PARAM_CBANK: u8 = 0x0a;
const EIATTR_EXTERNS: u8 = 0x0f;
const EIATTR_REQNTID: u8 = 0x10;
const EIATTR_FRAME_SIZE: u8 = 0x11;
const EIATTR_MIN_STACK_SIZE: u8 = 0x12;
const EIATTR_KPARAM_INFO: u8 = 0x17;
const EIATTR_CBANK_PARAM_SIZE: u8 = 0x19;
const EIATTR_MAXREG_COUNT: u8 = 0x1b;
const EIATTR_EXIT_INSTR_OFFSETS: u8 = 0x1c;
const EIATTR_CRS_STACK_SIZE: u8 = 0x1e;
const EIATTR_MAX_STACK_SIZE: u8 = 0x23;
const EIATTR_REGCOUNT: u8 = 0x2f;
const EIATTR_NUM_MBARRIERS: u8 = 0x38;
const EIATTR_CTA_PER_CLUSTER: u8 = 0x3d;
const EIATTR_EXPLICIT_CLUSTER: u8 = 0x3e;
const EIATTR_NUM_BARRIERS: u8 = 0x4c;
const EIATTR_REG_RECONFIG: u8 = 0x54;

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

impl Section<'_> {
    /// True for a section with no bytes in the file (zeroed room).
    fn is_nobits(&self) -> bool {
        is_nobits(self.kind)
    }
}

fn is_nobits(kind: u32) -> bool {
    matches!(kind, SHT_NOBITS | SHT_CUDA_GLOBAL | 0)
}

/// True for a section type whose bytes are loaded as they are in the file.
fn has_bytes(kind: u32) -> bool {
    kind == SHT_PROGBITS
        || kind == SHT_CUDA_GLOBAL_INIT
        || (SHT_CUDA_CONSTANT0..=SHT_CUDA_CONSTANT0 + 17).contains(&kind)
}

/// One symbol.
#[derive(Clone, Copy, Debug)]
struct Symbol<'a> {
    name: &'a str,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
    size: u64,
}

impl Symbol<'_> {
    fn kind(&self) -> u8 {
        self.info & 0xf
    }

    fn binding(&self) -> u8 {
        self.info >> 4
    }

    fn is_entry(&self) -> bool {
        self.kind() == STT_FUNC && self.other & STO_CUDA_ENTRY != 0
    }
}

/// The parts of the ELF the loader reads.
struct Elf<'a> {
    sm: u32,
    elf_type: ElfType,
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
        let elf_type = match u16_at(header, 16) {
            ET_EXEC => ElfType::Executable,
            ET_REL => ElfType::Relocatable,
            _ => return Err(CubinError::UnsupportedElf { why: "neither an executable nor a relocatable cubin" }),
        };
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
            let data =
                if is_nobits(kind) { &[][..] } else { slice(bytes, offset, size, || format!("section {name}"))? };
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
                size: u64_at(s, 16),
            });
        }
        Ok(Elf { sm, elf_type, sections, symbols })
    }

    fn section(&self, name: &str) -> Option<&Section<'a>> {
        self.sections.iter().find(|s| s.name == name)
    }

    /// The name of symbol `index`, or `BadNvInfo` in `section` at `offset`.
    fn symbol_name(&self, index: u32, section: &str, offset: usize) -> Result<&'a str, CubinError> {
        self.symbols.get(index as usize).map(|s| s.name).ok_or_else(|| CubinError::BadNvInfo {
            section: section.into(),
            offset,
            why: "symbol index out of range",
        })
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

/// Which image a section goes into, if any.
fn placement(s: &Section<'_>) -> Result<Option<Segment>, CubinError> {
    if s.flags & SHF_ALLOC == 0 {
        return Ok(None);
    }
    // Bank 0 is rebuilt for every launch from the driver words and the arguments; shared and local
    // memory are not in any image; the `.nv.merc.*` / `.nv.capmerc.*` copies that Blackwell cubins carry
    // are for the driver's finalizer, not the GPU.
    if matches!(constant_bank_name(s.name), Some((0, _)))
        || s.name.starts_with(".nv.shared")
        || s.name.starts_with(".nv.local")
        || s.name.starts_with(".nv.merc.")
        || s.name.starts_with(".nv.capmerc.")
    {
        return Ok(None);
    }
    if s.flags & SHF_WRITE != 0 {
        return if s.name.starts_with(".nv.global") {
            Ok(Some(Segment::Data))
        } else {
            Err(CubinError::UnsupportedSection { name: s.name.into(), why: "writable, and not __device__ data" })
        };
    }
    // Allocated and read-only: code and constant banks. One empty in the file is nothing the GPU reads
    // (the loader knows no such section it would need).
    Ok(has_bytes(s.kind).then_some(Segment::Code))
}

/// Where each loaded section went: section index -> (image, offset in it).
type Placed = HashMap<usize, (Segment, u64)>;

/// Lays the sections out in the two images: (code image, data image, where each section went).
fn lay_out(elf: &Elf<'_>) -> Result<(Vec<u8>, Vec<u8>, Placed), CubinError> {
    let (mut image, mut data) = (Vec::new(), Vec::new());
    let mut placed = HashMap::new();
    for (index, s) in elf.sections.iter().enumerate() {
        let Some(segment) = placement(s)? else { continue };
        let bytes = if segment == Segment::Code { &mut image } else { &mut data };
        let offset = (bytes.len() as u64).next_multiple_of(s.align.max(IMAGE_ALIGN));
        bytes.resize(offset as usize, 0);
        if s.is_nobits() {
            bytes.resize((offset + s.size) as usize, 0);
        } else if has_bytes(s.kind) {
            bytes.extend_from_slice(s.data);
        } else {
            return Err(CubinError::UnsupportedSection { name: s.name.into(), why: "unknown section type" });
        }
        placed.insert(index, (segment, offset));
    }
    for bytes in [&mut image, &mut data] {
        bytes.resize((bytes.len() as u64).next_multiple_of(IMAGE_ALIGN) as usize, 0);
    }
    Ok((image, data, placed))
}

/// `.nv.callgraph`: (caller, callee) symbol-index pairs. Entries whose callee is negative are markers.
fn call_edges(elf: &Elf<'_>) -> Result<Vec<(u32, u32)>, CubinError> {
    let Some(section) = elf.sections.iter().find(|s| s.kind == SHT_CUDA_CALLGRAPH) else {
        return Ok(Vec::new());
    };
    if section.data.len() % 8 != 0 {
        return Err(CubinError::BadNvInfo {
            section: section.name.into(),
            offset: 0,
            why: "not (caller, callee) pairs",
        });
    }
    Ok(section
        .data
        .chunks_exact(8)
        .map(|e| (u32_at(e, 0), u32_at(e, 4) as i32))
        .filter(|&(caller, callee)| caller != 0 && callee >= 0)
        .map(|(caller, callee)| (caller, callee as u32))
        .collect())
}

fn load(elf: &Elf<'_>, arch: &Arch) -> Result<Module, CubinError> {
    let (image, data, placed) = lay_out(elf)?;

    let mut module_banks = Vec::new();
    let mut kernel_banks: HashMap<&str, Vec<ModuleConstBank>> = HashMap::new();
    for (index, s) in elf.sections.iter().enumerate() {
        let (Some(&(Segment::Code, offset)), Some((bank, owner))) = (placed.get(&index), constant_bank_name(s.name))
        else {
            continue;
        };
        let b = ModuleConstBank { index: bank, offset, bytes: s.size as u32 };
        match owner {
            None => module_banks.push(b),
            Some(f) => kernel_banks.entry(f).or_default().push(b),
        }
    }

    let (relocations, undefined_refs) = relocations(elf, &placed)?;
    let attrs = module_attrs(elf)?;

    let mut symbols = Vec::new();
    for sym in &elf.symbols {
        if !matches!(sym.kind(), STT_OBJECT | STT_CUDA_OBJECT) {
            continue;
        }
        if let Some(&(segment, offset)) = placed.get(&usize::from(sym.shndx)) {
            symbols.push(DataSymbol { name: sym.name.into(), segment, offset: offset + sym.value, bytes: sym.size });
        }
    }

    // The call graph by name, with each function's own undefined references.
    let mut graph: HashMap<String, CallNode> = HashMap::new();
    let mut functions = Vec::new();
    let mut kernels = Vec::new();
    for (symbol_index, sym) in elf.symbols.iter().enumerate() {
        if sym.kind() != STT_FUNC || sym.shndx == 0 {
            continue;
        }
        let text_index = usize::from(sym.shndx);
        let text = elf.sections.get(text_index).filter(|s| s.name.starts_with(".text"));
        let (Some(text), Some(&(Segment::Code, text_offset))) = (text, placed.get(&text_index)) else {
            return Err(CubinError::MissingSection { name: format!(".text.{}", sym.name) });
        };
        let a = attrs.get(&(symbol_index as u32)).copied().unwrap_or_default();
        let mut externs: Vec<String> =
            undefined_refs.iter().filter(|(section, _)| *section == text_index).map(|(_, s)| s.clone()).collect();
        let info = elf.section(&format!(".nv.info.{}", sym.name));
        if let Some(info) = info {
            for r in records(info)? {
                if r.attribute == EIATTR_EXTERNS {
                    if r.payload.len() % 4 != 0 {
                        return Err(CubinError::BadNvInfo {
                            section: info.name.into(),
                            offset: r.offset,
                            why: "EXTERNS is not a list of symbol indices",
                        });
                    }
                    for i in r.payload.chunks_exact(4) {
                        externs.push(elf.symbol_name(u32_at(i, 0), info.name, r.offset)?.into());
                    }
                }
            }
        }
        graph.insert(
            sym.name.into(),
            CallNode {
                registers: a.registers.unwrap_or(0),
                frame: a.frame,
                stated_stack: a.min_stack.max(a.max_stack),
                callees: Vec::new(),
                externs,
            },
        );
        let code = (text_offset + sym.value, text.size.saturating_sub(sym.value));
        if !sym.is_entry() {
            if sym.binding() != STB_LOCAL {
                functions.push(FunctionInfo {
                    name: sym.name.into(),
                    code_offset: code.0,
                    code_bytes: code.1,
                    registers: a.registers.unwrap_or(0),
                    frame_bytes: a.frame,
                    stack_bytes: 0,
                    externs: Vec::new(),
                });
            }
            continue;
        }
        let registers = a
            .registers
            .ok_or_else(|| CubinError::MissingAttribute { kernel: sym.name.into(), attribute: "REGCOUNT" })?;
        let cbuf0_name = format!(".nv.constant0.{}", sym.name);
        let cbuf0 = elf.section(&cbuf0_name).ok_or(CubinError::MissingSection { name: cbuf0_name })?;
        let shared = elf.section(&format!(".nv.shared.{}", sym.name)).map(|s| s.size as u32);
        let mut k = KernelInfo {
            name: sym.name.into(),
            local: sym.binding() == STB_LOCAL,
            code_offset: code.0,
            code_bytes: code.1,
            registers,
            params: Vec::new(),
            param_bytes: 0,
            param_base: arch.param_base,
            cbuf0_bytes: cbuf0.size as u32,
            shared_bytes: shared.unwrap_or(arch.reserved_shared_bytes),
            frame_bytes: a.frame,
            stack_bytes: 0,
            local_bytes_per_thread: 0,
            crs_stack_bytes: 0,
            barriers: 0,
            mbarriers: 0,
            reg_reconfig: false,
            max_registers: None,
            max_threads: None,
            max_block: None,
            required_block: None,
            explicit_cluster: false,
            cluster_dims: None,
            exit_offsets: Vec::new(),
            const_banks: module_banks.iter().chain(kernel_banks.get(sym.name).into_iter().flatten()).copied().collect(),
            externs: Vec::new(),
        };
        let info_name = format!(".nv.info.{}", sym.name);
        let info = info.ok_or(CubinError::MissingSection { name: info_name })?;
        kernel_attrs(info, arch, &mut k)?;
        kernels.push(k);
    }
    for (caller, callee) in call_edges(elf)? {
        let (Some(caller), Some(callee)) = (elf.symbols.get(caller as usize), elf.symbols.get(callee as usize)) else {
            return Err(CubinError::BadNvInfo {
                section: ".nv.callgraph".into(),
                offset: 0,
                why: "symbol index out of range",
            });
        };
        let Some(node) = graph.get_mut(caller.name) else { continue };
        let list = if callee.shndx == 0 { &mut node.externs } else { &mut node.callees };
        if !list.iter().any(|c| c == callee.name) {
            list.push(callee.name.into());
        }
    }

    // Undefined symbols no function claims (references from a module-wide constant bank, say) are charged
    // to every kernel and function: none of them can be shown not to need them.
    let mut undefined: Vec<String> = undefined_refs.iter().map(|(_, s)| s.clone()).collect();
    undefined.sort();
    undefined.dedup();
    let claimed: HashSet<&str> = graph.values().flat_map(|n| n.externs.iter().map(String::as_str)).collect();
    let unclaimed: Vec<String> = undefined.iter().filter(|s| !claimed.contains(s.as_str())).cloned().collect();

    let no_externals = |_: &str| None;
    for k in &mut kernels {
        let (registers, stack) = needs(&graph, &k.name, &no_externals, &mut Vec::new());
        k.registers = k.registers.max(registers);
        k.stack_bytes = stack;
        k.local_bytes_per_thread = arch.local_bytes_for_stack(stack);
        k.externs = reachable_externs(&graph, &k.name, &unclaimed);
    }
    for f in &mut functions {
        let (registers, stack) = needs(&graph, &f.name, &no_externals, &mut Vec::new());
        f.registers = f.registers.max(registers);
        f.stack_bytes = stack;
        f.externs = reachable_externs(&graph, &f.name, &unclaimed);
    }
    Ok(Module {
        sm: elf.sm,
        elf_type: elf.elf_type,
        image,
        data,
        kernels,
        functions,
        const_banks: module_banks,
        symbols,
        undefined,
        compat: compat(elf)?,
        relocations,
        graph,
    })
}

/// The undefined symbols `name` can reach through the call graph, plus `unclaimed`, sorted.
fn reachable_externs(graph: &HashMap<String, CallNode>, name: &str, unclaimed: &[String]) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut stack = vec![name.to_owned()];
    let mut out: Vec<String> = unclaimed.to_vec();
    while let Some(f) = stack.pop() {
        if !seen.insert(f.clone()) {
            continue;
        }
        if let Some(node) = graph.get(&f) {
            out.extend(node.externs.iter().cloned());
            stack.extend(node.callees.iter().cloned());
        }
    }
    out.sort();
    out.dedup();
    out
}

/// `.nv.compat` records, if the module has the section.
fn compat(elf: &Elf<'_>) -> Result<Vec<CompatAttr>, CubinError> {
    let Some(section) = elf.section(".nv.compat") else { return Ok(Vec::new()) };
    Ok(records(section)?
        .into_iter()
        .map(|r| CompatAttr {
            attribute: r.attribute,
            value: match r.format {
                EIFMT_NVAL => CompatValue::Flag,
                EIFMT_SVAL => CompatValue::Bytes(r.payload.to_vec()),
                _ => CompatValue::Value(r.value),
            },
        })
        .collect())
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
                k.params.push(KParamInfo { ordinal: u32::from(u16_at(r.payload, 4)), offset, size, align });
            }
            EIATTR_NUM_BARRIERS => k.barriers = u32::from(r.value & 0xff),
            EIATTR_NUM_MBARRIERS => k.mbarriers = u32::from(r.value),
            EIATTR_REG_RECONFIG => k.reg_reconfig = true,
            EIATTR_MAXREG_COUNT => k.max_registers = Some(u32::from(r.value)),
            EIATTR_EXPLICIT_CLUSTER => k.explicit_cluster = true,
            EIATTR_CTA_PER_CLUSTER => k.cluster_dims = Some(dims(&r)?),
            EIATTR_CRS_STACK_SIZE => {
                if r.payload.len() != 4 {
                    return Err(bad(r.offset, "CRS_STACK_SIZE is not one u32"));
                }
                k.crs_stack_bytes = u32_at(r.payload, 0);
            }
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

/// A relocation's use of a symbol the module does not define: (the patched section's index, the symbol).
type UndefinedRef = (usize, String);

/// Reads every relocation that patches a loaded section, and every undefined symbol they name.
fn relocations(elf: &Elf<'_>, placed: &Placed) -> Result<(Vec<Relocation>, Vec<UndefinedRef>), CubinError> {
    let (mut out, mut undefined) = (Vec::new(), Vec::new());
    for s in elf.sections.iter().filter(|s| s.kind == SHT_RELA || s.kind == SHT_REL) {
        let bad = |why| CubinError::BadRelocation { section: s.name.into(), why };
        let target_index = s.info as usize;
        let target = elf.sections.get(target_index).ok_or_else(|| bad("target section does not exist"))?;
        let Some(&(segment, target_offset)) = placed.get(&target_index) else {
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
            if r_offset.checked_add(kind.width()).is_none_or(|end| end > target.size) {
                return Err(bad("patch runs past the end of its section"));
            }
            let sym = elf.symbols.get((r_info >> 32) as usize).ok_or_else(|| bad("symbol index out of range"))?;
            let target = if sym.shndx == 0 {
                undefined.push((target_index, sym.name.to_owned()));
                RelocTarget::External { symbol: sym.name.into(), addend }
            } else {
                let &(sym_segment, sym_offset) =
                    placed.get(&usize::from(sym.shndx)).ok_or_else(|| bad("symbol in a section that is not loaded"))?;
                let offset = (sym_offset + sym.value)
                    .checked_add_signed(addend)
                    .ok_or_else(|| bad("symbol + addend is negative or overflows"))?;
                RelocTarget::Image { segment: sym_segment, offset }
            };
            out.push(Relocation { segment, offset: target_offset + r_offset, kind, target });
        }
    }
    Ok((out, undefined))
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

    /// The call-target encoding against what nvdisasm decodes: bit 16 of the instruction is address bit 2,
    /// bit 23 is address bit 9, bit 34 is address bit 10, bit 80 is address bit 56.
    #[test]
    fn call_target_bits_match_nvdisasm() {
        for (address, bit) in [(0x4u64, 16u32), (0x200, 23), (0x400, 34), (1 << 56, 80)] {
            let mut at = [0u8; 16];
            RelocKind::CallTarget55.patch(&mut at, address).unwrap();
            assert_eq!(u128::from_le_bytes(at), 1u128 << bit, "address {address:#x}");
        }
        // Everything else in the instruction is kept.
        let mut at = [0xffu8; 16];
        RelocKind::CallTarget55.patch(&mut at, 0).unwrap();
        let cleared = (0xffu128 << 16) | (((1u128 << 47) - 1) << 34);
        assert_eq!(u128::from_le_bytes(at), !cleared);
        assert_eq!(RelocKind::CallTarget55.patch(&mut [0; 16], 2), Err(CubinError::AddressOverflow { va: 2 }));
        assert_eq!(
            RelocKind::CallTarget55.patch(&mut [0; 16], 1 << 57),
            Err(CubinError::AddressOverflow { va: 1 << 57 })
        );
    }

    #[test]
    fn call_graph_needs_add_frames_along_the_deepest_chain() {
        let node = |registers, frame, callees: &[&str], externs: &[&str]| CallNode {
            registers,
            frame,
            stated_stack: 0,
            callees: callees.iter().map(|s| s.to_string()).collect(),
            externs: externs.iter().map(|s| s.to_string()).collect(),
        };
        let graph: HashMap<String, CallNode> = [
            ("k".to_string(), node(24, 16, &["a", "b"], &[])),
            ("a".to_string(), node(40, 8, &[], &["ext"])),
            ("b".to_string(), node(10, 64, &[], &[])),
            ("r".to_string(), node(8, 4, &["r"], &[])),
        ]
        .into();
        let ext = |s: &str| (s == "ext").then_some(ExternalFunction { registers: 50, stack_bytes: 100 });
        // k(16) + a(8) + ext(100) beats k(16) + b(64); registers are the most of any.
        assert_eq!(needs(&graph, "k", &ext, &mut Vec::new()), (50, 124));
        assert_eq!(needs(&graph, "k", &|_| None, &mut Vec::new()), (40, 80));
        assert_eq!(needs(&graph, "r", &|_| None, &mut Vec::new()), (8, 4 + RECURSIVE_STACK_BYTES));
        assert_eq!(reachable_externs(&graph, "k", &["x".into()]), ["ext", "x"]);
    }
}
