//! Errors of the session layer. Every failure names its stage: the stage is the first words of the text
//! (the contract's `omega_gpu_session_last_error`), and [`Error::stage`] returns it alone.

/// The HAL's failures an [`Error`] carries, named here so that the shells need no door to the HAL.
pub use omega_hal::cubin::CubinError;
use omega_hal::Handle;
pub use omega_hal::{ChannelFault, HalError, HandleError, Refusal};

/// The failing stage: the first words of every failure's text (the C layer's last error is
/// `{stage}: {cause}`), one per call or step the contract names. [`Error::stage`] returns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Stage {
    /// `platform`.
    Platform,
    /// `lock`.
    Lock,
    /// `on close`.
    OnClose,
    /// `close`.
    Close,
    /// `open`.
    Open,
    /// `alloc`.
    Alloc,
    /// `free`.
    Free,
    /// `sync`.
    Sync,
    /// `mem info`.
    MemInfo,
    /// `launch arguments`.
    LaunchArguments,
    /// `launch`.
    Launch,
    /// `scratch`.
    Scratch,
    /// `load`.
    Load,
    /// `write`.
    Write,
    /// `read`.
    Read,
    /// `printf`.
    Printf,
    /// `module data`.
    ModuleData,
    /// `set platform`.
    SetPlatform,
    /// `set spin`.
    SetSpin,
    /// `sim inject`.
    SimInject,
    /// `device query`.
    DeviceQuery,
    /// `host alloc`.
    HostAlloc,
    /// `code alloc`.
    CodeAlloc,
    /// `alloc stats`.
    AllocStats,
    /// `platform check`.
    PlatformCheck,
    /// `platform negotiate`.
    PlatformNegotiate,
    /// `execute`.
    Execute,
    /// `parked`.
    Parked,
    /// `cmdlist create`.
    CmdListCreate,
    /// `cmdlist add`.
    CmdListAdd,
    /// `cmdlist mark independent`.
    CmdListMarkIndependent,
    /// `cmdlist submit`.
    CmdListSubmit,
    /// `cmdlist stamps`.
    CmdListStamps,
    /// `cmdlist reset`.
    CmdListReset,
    /// `cmdlist free`.
    CmdListFree,
    /// `cmdlist is latched`.
    CmdListIsLatched,
    /// `cmdlist count`.
    CmdListCount,
    /// `check`: a harness program's (examples/) comparison with its reference.
    Check,
    /// `report`: a harness program's writing of its report.
    Report,
    /// `bench`: a benchmark program's own check.
    Bench,
    /// `keep`: a kept buffer or module (`omega::Kept`) used after its device was closed.
    Keep,
    /// `matmul`: a matmul library entry as a whole (refused after a latch).
    Matmul,
    /// `matmul args`: a matmul library entry's NULL or unusable argument.
    MatmulArgs,
    /// `matmul shape`: a matmul shape that cannot exist, or that the operands' buffers do not hold.
    MatmulShape,
    /// `matmul plan`: a product the library cannot launch within its CTA budget.
    MatmulPlan,
    /// `matmul tensor`: a resident tensor that is not live, or not of the entry's element type.
    MatmulTensor,
}

impl Stage {
    /// The stage's text, as the last-error text begins.
    pub const fn as_str(self) -> &'static str {
        match self {
            Stage::Platform => "platform",
            Stage::Lock => "lock",
            Stage::OnClose => "on close",
            Stage::Close => "close",
            Stage::Open => "open",
            Stage::Alloc => "alloc",
            Stage::Free => "free",
            Stage::Sync => "sync",
            Stage::MemInfo => "mem info",
            Stage::LaunchArguments => "launch arguments",
            Stage::Launch => "launch",
            Stage::Scratch => "scratch",
            Stage::Load => "load",
            Stage::Write => "write",
            Stage::Read => "read",
            Stage::Printf => "printf",
            Stage::ModuleData => "module data",
            Stage::SetPlatform => "set platform",
            Stage::SetSpin => "set spin",
            Stage::SimInject => "sim inject",
            Stage::DeviceQuery => "device query",
            Stage::HostAlloc => "host alloc",
            Stage::CodeAlloc => "code alloc",
            Stage::AllocStats => "alloc stats",
            Stage::PlatformCheck => "platform check",
            Stage::PlatformNegotiate => "platform negotiate",
            Stage::Execute => "execute",
            Stage::Parked => "parked",
            Stage::CmdListCreate => "cmdlist create",
            Stage::CmdListAdd => "cmdlist add",
            Stage::CmdListMarkIndependent => "cmdlist mark independent",
            Stage::CmdListSubmit => "cmdlist submit",
            Stage::CmdListStamps => "cmdlist stamps",
            Stage::CmdListReset => "cmdlist reset",
            Stage::CmdListFree => "cmdlist free",
            Stage::CmdListIsLatched => "cmdlist is latched",
            Stage::CmdListCount => "cmdlist count",
            Stage::Check => "check",
            Stage::Report => "report",
            Stage::Bench => "bench",
            Stage::Keep => "keep",
            Stage::Matmul => "matmul",
            Stage::MatmulArgs => "matmul args",
            Stage::MatmulShape => "matmul shape",
            Stage::MatmulPlan => "matmul plan",
            Stage::MatmulTensor => "matmul tensor",
        }
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A session-layer failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The platform could not be chosen or installed.
    #[error("platform: {0}")]
    Platform(#[from] PlatformError),
    /// The platform lacks something the session needs (refused, never emulated).
    #[error("platform: {0}")]
    Refused(#[from] Refusal),
    /// The lock was used against its discipline.
    #[error("lock: {0}")]
    Lock(&'static str),
    /// An unlock while the library holds the lock across code it does not control (named).
    #[error("lock: unlock refused: the lock is pinned by {0} on this thread, which releases it when it ends")]
    LockPinned(&'static str),
    /// A call an on-close hook may not make (a hook may only release buffers and read state).
    #[error("on close: `{0}` refused inside an on-close hook (a hook may only release buffers and read state)")]
    CloseHook(Stage),
    /// A release of a buffer the library owns and releases itself.
    #[error("{stage}: the buffer is {owner}; nothing was released")]
    NotCallers {
        /// The call.
        stage: Stage,
        /// Whose it is.
        owner: &'static str,
    },
    /// The device did not open; carries the driver's own text.
    #[error("open: {0}")]
    Open(#[source] HalError),
    /// The call needs an open device.
    #[error("{0}: device not open")]
    NotOpen(Stage),
    /// An uncertain completion latched the process; nothing that could touch the device may run.
    #[error("{0}: refused, the process is latched after an uncertain completion")]
    Latched(Stage),
    /// A device allocation failed.
    #[error("alloc: {0}")]
    Alloc(#[source] HalError),
    /// A handle was refused (stale, zero or foreign).
    #[error("{stage}: {source}")]
    Handle {
        /// The call.
        stage: Stage,
        /// Why.
        source: HandleError,
    },
    /// A live handle given with another buffer's address: the `GpuMem` was changed or assembled by hand.
    /// Nothing is released.
    #[error(
        "{stage}: handle (index {}, generation {}) is live but names the buffer at {live_va:#x}, not {va:#x}",
        .handle.index,
        .handle.generation
    )]
    ForeignAddress {
        /// The call.
        stage: Stage,
        /// The handle given, which is live.
        handle: Handle,
        /// The address given with it.
        va: u64,
        /// The address of the buffer the handle names.
        live_va: u64,
    },
    /// A visibility sync failed.
    #[error("sync: {0}")]
    Sync(#[source] HalError),
    /// Moving bytes into or out of a buffer (`write`, `read`) failed on the platform.
    #[error("{stage}: {source}")]
    Copy {
        /// The call: `write` or `read`.
        stage: Stage,
        /// What the platform said.
        source: HalError,
    },
    /// The platform could not say how much device memory is free.
    #[error("mem info: {0}")]
    MemInfo(#[source] HalError),
    /// A launch descriptor failed the contract's checks; nothing ran.
    #[error("launch arguments: {0}")]
    LaunchArguments(#[from] LaunchArgError),
    /// The submission failed before the device saw it.
    #[error("launch: submit failed: {0}")]
    Submit(#[source] HalError),
    /// The launch was cancelled before it was submitted; nothing ran.
    #[error("launch: cancelled before submit")]
    CancelledBeforeSubmit,
    /// The launch was cancelled after submit: completion is uncertain and the process latched.
    #[error("launch: cancelled after submit; completion uncertain, process latched")]
    CancelledAfterSubmit,
    /// A completion marker did not arrive in time: the process latched.
    #[error("launch: completion timeout: marker {marker} not released within {timeout_ms} ms; process latched")]
    Timeout {
        /// Which marker (0 kernel done, 1 engine idle).
        marker: u8,
        /// The limit per marker.
        timeout_ms: u32,
    },
    /// The platform refused a completion poll: the process latched.
    #[error("launch: completion poll refused ({0}); process latched")]
    PollRefused(#[source] omega_hal::PollRefused),
    /// Code panicked after the submit (the platform's submit or poll, a simulated kernel, the wait): the
    /// device may hold the work, so the completion is uncertain and the process latched.
    #[error("launch: panic after submit ({0}); completion uncertain, process latched")]
    PanicAfterSubmit(String),
    /// The channel reported an error (the kernel faulted); the channel is dead until close and reopen.
    #[error("launch: kernel fault: {0}")]
    Fault(#[source] ChannelFault),
    /// A scratch request past an active reservation.
    #[error("scratch: request of {requested} bytes past the reservation of {reserved} bytes")]
    ScratchReserved {
        /// Bytes asked for.
        requested: usize,
        /// Bytes reserved.
        reserved: usize,
    },
    /// A kernel could not be loaded.
    #[error("load: {0}")]
    Load(#[from] LoadError),
    /// A command list's own refusal (not a session failure), carried whole.
    #[error(transparent)]
    CmdList(Box<crate::cmdlist::CmdListError>),
    /// A setting or request out of range, or a call the session's state does not allow.
    #[error("{stage}: {detail}")]
    Setting {
        /// The call.
        stage: Stage,
        /// What was wrong.
        detail: SettingError,
    },
}

impl Error {
    /// The stage alone ("launch arguments", "open", "alloc", ...).
    pub fn stage(&self) -> Stage {
        match self {
            Error::Platform(_) | Error::Refused(_) => Stage::Platform,
            Error::Lock(_) | Error::LockPinned(_) => Stage::Lock,
            Error::CloseHook(_) => Stage::OnClose,
            Error::NotCallers { stage, .. } => *stage,
            Error::Open(_) => Stage::Open,
            Error::NotOpen(s) | Error::Latched(s) => *s,
            Error::Alloc(_) => Stage::Alloc,
            Error::Handle { stage, .. } | Error::ForeignAddress { stage, .. } => *stage,
            Error::Sync(_) => Stage::Sync,
            Error::Copy { stage, .. } => *stage,
            Error::MemInfo(_) => Stage::MemInfo,
            Error::LaunchArguments(_) => Stage::LaunchArguments,
            Error::Submit(_)
            | Error::CancelledBeforeSubmit
            | Error::CancelledAfterSubmit
            | Error::Timeout { .. }
            | Error::PollRefused(_)
            | Error::PanicAfterSubmit(_)
            | Error::Fault(_) => Stage::Launch,
            Error::ScratchReserved { .. } => Stage::Scratch,
            Error::Load(_) => Stage::Load,
            Error::Setting { stage, .. } => *stage,
            Error::CmdList(e) => e.stage(),
        }
    }

    /// True when this failure latched the process.
    pub fn latched_the_process(&self) -> bool {
        matches!(
            self,
            Error::CancelledAfterSubmit | Error::Timeout { .. } | Error::PollRefused(_) | Error::PanicAfterSubmit(_)
        )
    }
}

/// Why a launch descriptor failed the contract's checks ([`Error::LaunchArguments`]); nothing ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchArgError {
    /// A NULL launch descriptor.
    #[error("L is NULL")]
    NullLaunch,
    /// A NULL argument pointer.
    #[error("args is NULL")]
    NullArgs,
    /// An argument count outside what the caller may pass.
    #[error("n_args {n} is not in 1..={max}")]
    ArgCount {
        /// Words given.
        n: usize,
        /// Most words this caller may pass.
        max: usize,
    },
    /// A block of zero threads in x.
    #[error("threads_x is 0")]
    ZeroThreadsX,
    /// A grid with a zero side.
    #[error("grid {x}x{y} has a zero side")]
    ZeroGridSide {
        /// Blocks in x.
        x: u32,
        /// Blocks in y.
        y: u32,
    },
    /// A zero z dimension of the block or grid.
    #[error("a z dimension of 0")]
    ZeroZ,
    /// More threads per block than any launch may have.
    #[error("{0} threads per block (at most 1024)")]
    TooManyThreads(u64),
    /// A spin window above the session's maximum.
    #[error("spin_us {us} is above the maximum of {max} us (OMEGA_GPU_SESSION_MAX_SPIN_US)")]
    SpinTooLong {
        /// The launch's spin window.
        us: u32,
        /// The maximum.
        max: u32,
    },
    /// Code outside every code buffer of the session.
    #[error("code_va {0:#x} is not inside a code buffer of this session")]
    CodeOutsideBuffer(u64),
    /// More threads per block than the kernel was built for.
    #[error("{threads} threads per block, kernel `{kernel}` allows {max}")]
    KernelThreads {
        /// Threads per block.
        threads: u32,
        /// The kernel.
        kernel: String,
        /// Its maximum.
        max: u32,
    },
    /// Fewer argument words than the kernel's parameters take.
    #[error("{words} argument words, kernel `{kernel}` takes {bytes} bytes of parameters")]
    TooFewArgs {
        /// Words given.
        words: usize,
        /// The kernel.
        kernel: String,
        /// Its parameter bytes.
        bytes: u32,
    },
    /// A launch past one of the platform's limits (shared memory, block or grid sides).
    #[error("{0}")]
    Limit(#[source] omega_hal::LimitError),
    /// A launch naming a cluster other than the one its kernel was built for.
    #[error("kernel `{kernel}` was built for clusters of {fixed:?} (__cluster_dims__); the launch asks for {asked:?}")]
    ClusterFixed {
        /// The kernel.
        kernel: String,
        /// Its built-in cluster.
        fixed: [u32; 3],
        /// What the launch asked for.
        asked: [u32; 3],
    },
    /// More registers than the platform allows, after the session's rounding.
    #[error("gpr_count {given} (the kernel's own {own}, rounded up to a multiple of 8 and to at least 64): {limit}")]
    Registers {
        /// The descriptor's count.
        given: u32,
        /// The kernel's own count.
        own: u32,
        /// The limit it broke.
        #[source]
        limit: omega_hal::LimitError,
    },
    /// A typed argument block past the most any launch can pass.
    #[error("a parameter would end at byte {end} of the block, past the {max} bytes any launch can pass")]
    ArgBlockTooLarge {
        /// Where the parameter would end.
        end: u64,
        /// The most bytes a block may have.
        max: u32,
    },
    /// More argument bytes than the platform's constant bank takes.
    #[error(
        "{bytes} bytes of arguments ({words} words) for kernel `{kernel}`; the constant bank takes at most {max} bytes"
    )]
    ArgBytes {
        /// Bytes given.
        bytes: usize,
        /// Words given.
        words: usize,
        /// The kernel.
        kernel: String,
        /// The bank's room.
        max: u32,
    },
    /// A typed launch whose parameter count differs from the kernel's.
    #[error("kernel `{kernel}` takes {declared} parameters, the launch gives {given}")]
    ParamCount {
        /// The kernel.
        kernel: String,
        /// Its parameters.
        declared: usize,
        /// Parameters given.
        given: usize,
    },
    /// A typed launch whose parameter differs in size or offset from the kernel's.
    #[error(
        "kernel `{kernel}` parameter {ordinal}: declared {size} bytes at offset {offset}, given {given_size} bytes \
         at offset {given_offset}"
    )]
    ParamLayout {
        /// The kernel.
        kernel: String,
        /// The parameter's position.
        ordinal: u32,
        /// Its declared size.
        size: u32,
        /// Its declared offset.
        offset: u32,
        /// The size given.
        given_size: u32,
        /// The offset given.
        given_offset: u32,
    },
}

/// What was wrong with a setting or request ([`Error::Setting`]); the text is the cause after the stage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    /// A typed write of more elements than the buffer holds.
    #[error("{n} elements into a buffer of {len}")]
    WriteTooLong {
        /// Elements given.
        n: usize,
        /// The buffer's elements.
        len: usize,
    },
    /// A typed read of more elements than the buffer holds.
    #[error("{n} elements from {len}")]
    ReadTooLong {
        /// Elements asked for.
        n: usize,
        /// The buffer's elements.
        len: usize,
    },
    /// An element range past a typed buffer.
    #[error("elements {at}+{n} past a buffer of {len}")]
    ElementsPast {
        /// First element.
        at: usize,
        /// Elements.
        n: usize,
        /// The buffer's elements.
        len: usize,
    },
    /// A byte range past a buffer.
    #[error("range {offset}+{len} past the buffer")]
    RangePast {
        /// First byte.
        offset: usize,
        /// Bytes.
        len: usize,
    },
    /// A byte range past a buffer of known size.
    #[error("range {offset}+{len} past the buffer's {bytes} bytes")]
    RangePastBytes {
        /// First byte.
        offset: usize,
        /// Bytes.
        len: usize,
        /// The buffer's bytes.
        bytes: u64,
    },
    /// A module with no data object of that name.
    #[error("the module defines no data object `{0}`")]
    NoDataObject(String),
    /// A `__constant__` object asked for as `__device__` data.
    #[error("`{0}` is __constant__ data, which the GPU reads from the code buffer")]
    ConstantObject(String),
    /// More bytes of a data object than it has.
    #[error("{len} bytes of `{name}`, which has {bytes}")]
    ObjectTooShort {
        /// Bytes asked for.
        len: usize,
        /// The object.
        name: String,
        /// Its bytes.
        bytes: u64,
    },
    /// Fault injection asked of a platform that is not the simulator.
    #[error("the installed platform is `{0}`, not the simulator")]
    NotSimulator(&'static str),
    /// A device printf buffer below the minimum.
    #[error("a buffer of {0} bytes (at least 64)")]
    PrintfBufferTooSmall(usize),
    /// A printf size change after the session's buffer exists.
    #[error(
        "this session's printf buffer exists ({0} bytes); set the size before the first module calling vprintf \
         loads, or close and reopen"
    )]
    PrintfBufferExists(usize),
    /// A platform change while the device is open.
    #[error("close the device first")]
    CloseDeviceFirst,
    /// An on-close hook panicked.
    #[error("a hook panicked")]
    HookPanicked,
    /// More on-close hooks than the session keeps.
    #[error("at most {0} hooks")]
    TooManyHooks(usize),
    /// A spin setting above the maximum.
    #[error("{us} us is above the maximum of {max} us")]
    SpinTooLong {
        /// The setting.
        us: u32,
        /// The maximum.
        max: u32,
    },
    /// A platform allocation smaller than a memory-manager chunk.
    #[error("the platform handed out {got} bytes for a chunk of {chunk}")]
    ShortChunk {
        /// Bytes handed out.
        got: u64,
        /// The chunk's bytes.
        chunk: u64,
    },
    /// A platform allocation smaller than the request.
    #[error("the platform handed out {got} bytes for a request of {asked}")]
    ShortAllocation {
        /// Bytes handed out.
        got: u64,
        /// Bytes asked for, rounded.
        asked: u64,
    },
    /// A scratch whose buffer is parked after the latch.
    #[error("its buffer is parked (freed after the latch) and cannot be used again")]
    ScratchParked,
    /// A scratch marked reserved whose buffer holds no reservation.
    #[error(
        "reserved is set but its buffer holds no reservation (its device was closed since, it was freed, or the \
         field was set by hand): scratch_free it and reserve again"
    )]
    StaleReservation,
    /// A kept buffer or module of an earlier device open.
    #[error("kept in device open {opened}, and the device was closed since (open {now} now); its memory went with the close")]
    KeptStale {
        /// The open it was kept in ([`crate::session::Runtime::open_count`] then).
        opened: u32,
        /// The open count now.
        now: u32,
    },
    /// An argument refused at the C boundary or a harness program's own cause, in words (the C layer's
    /// NULL, non-UTF-8 and out-of-range arguments: one text per argument of each entry point).
    #[error("{0}")]
    Text(String),
}

/// Why no platform could be chosen or installed ([`Error::Platform`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlatformError {
    /// A platform name that is neither `sim` nor `nvidia`.
    #[error("unknown platform `{0}` (expected `sim` or `nvidia`)")]
    UnknownName(String),
    /// No NVIDIA kernel module is loaded (the environment's own text: the file read and why it failed).
    #[error("nvidia: {0}")]
    NoKernelModule(String),
    /// The kernel module is loaded but the device files are missing (the backend's text names them and
    /// the platform).
    #[error("{0}")]
    MissingDeviceFiles(String),
    /// The nvidia backend refused to probe.
    #[error("nvidia: {0}")]
    Probe(#[source] HalError),
    /// A build without the nvidia backend.
    #[error("nvidia: this build has no nvidia backend (omega was built without its `nvidia` feature)")]
    NoNvidiaBackend,
    /// The nvidia backend off Linux.
    #[error("nvidia: the open-driver backend exists only on Linux")]
    NotLinux,
    /// A platform instance another runtime of this process already holds.
    #[error(
        "this `{platform}` platform instance belongs to another runtime of this process (one runtime per \
         device: its latch and its buffers are that runtime's); use that runtime, or a platform instance of your \
         own"
    )]
    ClaimedByAnotherRuntime {
        /// The platform's name.
        platform: &'static str,
    },
    /// A C platform table refused at install.
    #[cfg(not(loom))]
    #[error("{0}")]
    Table(#[source] omega_hal::ctable::TableRefusal),
}

/// Why a kernel or module could not be loaded ([`Error::Load`]). The text is the cause after the `load: `
/// stage; the C layer's last error is `load: ` followed by it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// A refusal about one kernel, named.
    #[error("kernel `{kernel}`: {cause}")]
    Kernel {
        /// The kernel's symbol name.
        kernel: String,
        /// Why.
        cause: Box<LoadError>,
    },
    /// The cubin itself was refused (parse, relocation, link, a kernel it does not hold).
    #[error(transparent)]
    Cubin(#[from] CubinError),
    /// A host kernel asked for on a platform that runs machine code.
    #[error("host kernels run on the simulator only, the platform is {platform}")]
    HostKernelOffSimulator {
        /// The platform's name.
        platform: &'static str,
    },
    /// A host kernel by a name the simulator has no implementation for.
    #[error("no host implementation is registered with the simulator under that name")]
    NoHostImplementation,
    /// The open device's architecture is not in the table.
    #[error("no architecture entry for sm_{major}{minor} ({device})")]
    NoArchitecture {
        /// Compute capability, major.
        major: u32,
        /// Compute capability, minor.
        minor: u32,
        /// The device's name.
        device: String,
    },
    /// A kernel declaring an explicit cluster launch without its shape (`dims` when the cubin gives them).
    #[error(
        "declares a cluster launch of {} CTAs but not its shape (CTA_PER_CLUSTER); launch-time cluster shapes \
         for such kernels are not supported",
        cluster_text(.dims)
    )]
    ClusterLaunch {
        /// The cluster's dimensions, when declared.
        dims: Option<[u32; 3]>,
    },
    /// Parameters at a constant-bank offset the architecture does not use.
    #[error("parameters at constant-bank offset {found:#x}, {arch} expects {expected:#x}")]
    ParamBase {
        /// The kernel's offset.
        found: u32,
        /// The architecture's name.
        arch: &'static str,
        /// The architecture's offset.
        expected: u32,
    },
    /// A call of `vprintf` when device printf could not be made ready (`missing` says why).
    #[error("calls `vprintf` (device printf), which is not available: {}", printf_missing_text(.missing))]
    PrintfUnavailable {
        /// Why device printf is not ready.
        missing: Box<Error>,
    },
    /// An undefined symbol neither the module nor Omega defines.
    #[error("needs symbol `{symbol}`, which the module does not define and Omega does not provide")]
    UndefinedSymbol {
        /// The symbol.
        symbol: String,
    },
    /// A single-buffer load of a kernel that needs a symbol only a module load provides.
    #[error(
        "kernel `{kernel}` needs symbol `{symbol}`, which a single-buffer load cannot provide: load its module \
         with Scope::load_module"
    )]
    NeedsModuleLoad {
        /// The kernel.
        kernel: String,
        /// The symbol.
        symbol: String,
    },
    /// A repository kernel with no cubin in this build, off the simulator (`why` is the build's reason).
    #[error("kernel `{kernel}`: {why}")]
    NotBuilt {
        /// The kernel.
        kernel: String,
        /// Why there is no cubin.
        why: &'static str,
    },
    /// No repository kernel of that name.
    #[error("no kernel `{0}` in kernels/")]
    NoSuchRepositoryKernel(String),
    /// A code image larger than the code buffer's CPU view.
    #[error("{bytes} bytes of code do not fit the code buffer's CPU view")]
    CodeDoesNotFit {
        /// The image's bytes.
        bytes: usize,
    },
    /// Bytes larger than a buffer's CPU view.
    #[error("{bytes} bytes do not fit the buffer's CPU view")]
    BytesDoNotFit {
        /// The bytes to write.
        bytes: usize,
    },
    /// A kernel entry outside every code buffer of the session.
    #[error("entry {va:#x} is not inside a code buffer of this session")]
    EntryOutsideCode {
        /// The entry's address.
        va: u64,
    },
    /// A kernel's code running past the end of its code buffer.
    #[error("{bytes} bytes of code from {va:#x} run past its code buffer ({left} bytes left)")]
    CodePastBuffer {
        /// The kernel's code bytes.
        bytes: u64,
        /// The entry's address.
        va: u64,
        /// Bytes of the buffer from the entry on.
        left: u64,
    },
    /// A constant bank outside the code buffer of its entry.
    #[error("constant bank {index} ({bytes} bytes at {va:#x}) lies outside the code buffer of its entry")]
    BankOutsideCode {
        /// The bank's index.
        index: u32,
        /// Its bytes.
        bytes: u32,
        /// Its address.
        va: u64,
    },
    /// Omega's printf library was not built (`why` is the build's reason).
    #[error("device printf: Omega's printf library (kernels/cuda/lib/printf.cu) was not built: {why}")]
    PrintfNotBuilt {
        /// Why.
        why: &'static str,
    },
    /// Omega's printf library was refused.
    #[error("device printf library: {0}")]
    PrintfLibrary(#[source] CubinError),
    /// Omega's printf library with data or constant banks of its own.
    #[error("device printf library: it must have no module data or constant banks")]
    PrintfLibraryHasData,
    /// Omega's printf library with a symbol nothing resolves.
    #[error("device printf library: undefined symbol {0}")]
    PrintfLibraryUndefined(String),
    /// A loaded kernel that does not match a typed handle's expectations.
    #[error("kernel `{kernel}` for `{handle}`: {mismatch}")]
    HandleMismatch {
        /// The loaded kernel.
        kernel: String,
        /// The typed handle.
        handle: String,
        /// What differs.
        mismatch: HandleMismatch,
    },
}

/// How a loaded kernel differs from what a typed handle was generated for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandleMismatch {
    /// Another entry name.
    #[error("the handle was generated for entry `{0}`")]
    Entry(String),
    /// Another parameter table: the kernel's, and the one of the PTX the handle was generated from.
    #[error(
        "the kernel declares {} parameters [{}] (size@offset), the PTX the handle was generated from {} [{}]",
        .declared.len(),
        param_table(.declared),
        .expected.len(),
        param_table(.expected)
    )]
    Params {
        /// The loaded kernel's table, by ordinal.
        declared: Vec<crate::session::ParamInfo>,
        /// The handle's table.
        expected: Vec<crate::session::ParamInfo>,
    },
}

impl LoadError {
    /// This refusal, about kernel `kernel`.
    pub fn for_kernel(self, kernel: impl Into<String>) -> LoadError {
        LoadError::Kernel { kernel: kernel.into(), cause: Box::new(self) }
    }
}

fn param_table(t: &[crate::session::ParamInfo]) -> String {
    t.iter().map(|p| format!("{}@{}", p.size, p.offset)).collect::<Vec<_>>().join(" ")
}

fn cluster_text(dims: &Option<[u32; 3]>) -> String {
    dims.map_or("an explicit cluster".to_string(), |[x, y, z]| format!("{x}x{y}x{z}"))
}

/// A load refusal's cause without its stage (the printf library's own refusals say what they are), any
/// other failure whole.
fn printf_missing_text(e: &Error) -> String {
    match e {
        Error::Load(why) => why.to_string(),
        other => other.to_string(),
    }
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The last-error text is `{stage}: {cause}`: every failure's text begins with its [`Stage`]'s, so a
    /// variant whose message spells a stage cannot drift from the stage it reports.
    #[test]
    fn every_failure_text_begins_with_its_stage() {
        let hal = || HalError::Unsupported("x".into());
        let errors = [
            Error::Lock("x"),
            Error::LockPinned("x"),
            Error::CloseHook(Stage::Lock),
            Error::NotCallers { stage: Stage::Free, owner: "x" },
            Error::Open(hal()),
            Error::NotOpen(Stage::Load),
            Error::Latched(Stage::CmdListReset),
            Error::Alloc(hal()),
            Error::Sync(hal()),
            Error::Copy { stage: Stage::Write, source: hal() },
            Error::MemInfo(hal()),
            Error::LaunchArguments(LaunchArgError::NullArgs),
            Error::Submit(hal()),
            Error::CancelledBeforeSubmit,
            Error::CancelledAfterSubmit,
            Error::Timeout { marker: 0, timeout_ms: 1 },
            Error::PollRefused(omega_hal::PollRefused::Injected),
            Error::PanicAfterSubmit("x".into()),
            Error::ScratchReserved { requested: 2, reserved: 1 },
            Error::Load(LoadError::NoHostImplementation),
            Error::Platform(PlatformError::NotLinux),
            Error::Setting { stage: Stage::SetSpin, detail: SettingError::HookPanicked },
            Error::Setting { stage: Stage::Keep, detail: SettingError::KeptStale { opened: 1, now: 2 } },
        ];
        for e in errors {
            let text = e.to_string();
            assert!(text.starts_with(&format!("{}: ", e.stage())), "{text:?} does not begin with {:?}", e.stage());
        }
    }
}
