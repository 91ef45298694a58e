//! Errors of the session layer. Every failure names its stage, as data: [`Error::stage`] returns it, and
//! the text (what the C layer records as `omega_gpu_session_last_error`) is rendered from it in one place,
//! `{stage}: {cause}` (`Display for Error`), where the cause ([`Error::cause`]) is the variant's own words
//! and never spells a stage. The cause enums below (`LaunchArgError`, `LoadError`, `SettingError`,
//! `PlatformError`) carry data, not text, except where the text is the driver's or the OS's own.

/// The HAL's failures an [`Error`] carries, named here so that the shells need no door to the HAL.
pub use omega_hal::cubin::CubinError;
use omega_hal::Handle;
pub use omega_hal::{ChannelFault, HalError, HandleError, Refusal, StopFailure};

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
    /// `attention`: an attention library entry as a whole (refused after a latch).
    Attention,
    /// `attention args`: an attention entry's NULL, misaligned or unusable argument.
    AttentionArgs,
    /// `attention shape`: heads, head dim or lengths that cannot exist, or that the buffers do not hold.
    AttentionShape,
    /// `attention layout`: a KV layout the kernels cannot read (page size, strides, element type).
    AttentionLayout,
    /// `attention table`: a page index or length of a page table outside the pool or the table.
    AttentionTable,
    /// `attention pool`: the C entries' KV pool (absent, allocated twice, or not the one passed).
    AttentionPool,
    /// `prefill shape`: a prefill attention shape that cannot exist, or that the buffers do not hold.
    PrefillShape,
    /// `prefill tma`: a prefill operand no TMA descriptor can describe.
    PrefillTma,
    /// `elementwise`: an elementwise library entry as a whole (refused after a latch).
    Elementwise,
    /// `elementwise args`: an elementwise entry's NULL, misaligned or unusable argument.
    ElementwiseArgs,
    /// `elementwise shape`: a shape that cannot exist, or that the operands' buffers do not hold.
    ElementwiseShape,
    /// `decoder shape`: a decoder library call whose shape cannot exist, or that its buffers do not hold.
    DecoderShape,
    /// `recover`: recovery from a latch (EXPERIMENTAL).
    Recover,
    /// The serving seal (`Runtime::seal`, `Runtime::unseal`).
    Serving,
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
            Stage::Attention => "attention",
            Stage::AttentionArgs => "attention args",
            Stage::AttentionShape => "attention shape",
            Stage::AttentionLayout => "attention layout",
            Stage::AttentionTable => "attention table",
            Stage::AttentionPool => "attention pool",
            Stage::PrefillShape => "prefill shape",
            Stage::PrefillTma => "prefill tma",
            Stage::Elementwise => "elementwise",
            Stage::ElementwiseArgs => "elementwise args",
            Stage::ElementwiseShape => "elementwise shape",
            Stage::DecoderShape => "decoder shape",
            Stage::Recover => "recover",
            Stage::Serving => "serving",
        }
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A session-layer failure. Its text is `{stage}: {cause}` ([`Error::stage`], [`Error::cause`]): the
/// stage is rendered from the [`Stage`] enum, in this one place, never spelled by a variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The platform could not be chosen or installed.
    Platform(#[from] PlatformError),
    /// The platform lacks something the session needs (refused, never emulated).
    Refused(#[from] Refusal),
    /// The lock was used against its discipline.
    Lock(&'static str),
    /// An unlock while the library holds the lock across code it does not control (named).
    LockPinned(&'static str),
    /// A call an on-close hook may not make (a hook may only release buffers and read state).
    CloseHook(Stage),
    /// A release of a buffer the library owns and releases itself.
    NotCallers {
        /// The call.
        stage: Stage,
        /// Whose it is.
        owner: &'static str,
    },
    /// The device did not open; carries the driver's own text.
    Open(#[source] HalError),
    /// The call needs an open device.
    NotOpen(Stage),
    /// An uncertain completion latched the process; nothing that could touch the device may run.
    Latched(Stage),
    /// A device allocation failed.
    Alloc(#[source] HalError),
    /// A handle was refused (stale, zero or foreign).
    Handle {
        /// The call.
        stage: Stage,
        /// Why.
        source: HandleError,
    },
    /// A live handle given with another buffer's address: the `GpuMem` was changed or assembled by hand.
    /// Nothing is released.
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
    Sync(#[source] HalError),
    /// Moving bytes into or out of a buffer (`write`, `read`) failed on the platform.
    Copy {
        /// The call: `write` or `read`.
        stage: Stage,
        /// What the platform said.
        source: HalError,
    },
    /// The platform could not say how much device memory is free.
    MemInfo(#[source] HalError),
    /// A launch descriptor failed the contract's checks; nothing ran.
    LaunchArguments(#[from] LaunchArgError),
    /// The submission failed before the device saw it.
    Submit(#[source] HalError),
    /// The launch was cancelled before it was submitted; nothing ran.
    CancelledBeforeSubmit,
    /// The launch was cancelled after submit: completion is uncertain and the process latched.
    CancelledAfterSubmit,
    /// A completion marker did not arrive in time: the process latched.
    Timeout {
        /// Which marker (0 kernel done, 1 engine idle).
        marker: u8,
        /// The limit per marker.
        timeout_ms: u32,
    },
    /// The platform refused a completion poll: the process latched.
    PollRefused(#[source] omega_hal::PollRefused),
    /// Code panicked after the submit (the platform's submit or poll, a simulated kernel, the wait): the
    /// device may hold the work, so the completion is uncertain and the process latched.
    PanicAfterSubmit(String),
    /// The channel reported an error (the kernel faulted); the channel is dead until close and reopen.
    Fault(#[source] ChannelFault),
    /// A scratch request past an active reservation.
    ScratchReserved {
        /// Bytes asked for.
        requested: usize,
        /// Bytes reserved.
        reserved: usize,
    },
    /// A kernel could not be loaded.
    Load(#[from] LoadError),
    /// A command list's own refusal (not a session failure), carried whole.
    CmdList(Box<crate::cmdlist::CmdListError>),
    /// A setting or request out of range, or a call the session's state does not allow.
    Setting {
        /// The call.
        stage: Stage,
        /// What was wrong.
        detail: SettingError,
    },
    /// A recovery from the latch did not prove that the device stopped this process's work: the process
    /// is still latched and nothing was released.
    Recover(#[source] RecoverError),
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
            Error::Recover(_) => Stage::Recover,
        }
    }

    /// True when this failure latched the process.
    pub fn latched_the_process(&self) -> bool {
        matches!(
            self,
            Error::CancelledAfterSubmit | Error::Timeout { .. } | Error::PollRefused(_) | Error::PanicAfterSubmit(_)
        )
    }

    /// The failure's text without its stage: what follows `{stage}: ` in the last error.
    pub fn cause(&self) -> Cause<'_> {
        Cause(self)
    }
}

/// `{stage}: {cause}`, the one rendering of every failure's text (the C layer's last error).
impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.stage(), self.cause())
    }
}

/// The text of a failure after its stage ([`Error::cause`]).
#[derive(Clone, Copy, Debug)]
pub struct Cause<'a>(&'a Error);

impl std::fmt::Display for Cause<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Error::Platform(e) => e.fmt(f),
            Error::Refused(r) => r.fmt(f),
            Error::Lock(why) => f.write_str(why),
            Error::LockPinned(by) => {
                write!(f, "unlock refused: the lock is pinned by {by} on this thread, which releases it when it ends")
            }
            Error::CloseHook(refused) => write!(
                f,
                "`{refused}` refused inside an on-close hook (a hook may only release buffers and read state)"
            ),
            Error::NotCallers { owner, .. } => write!(f, "the buffer is {owner}; nothing was released"),
            Error::NotOpen(_) => f.write_str("device not open"),
            Error::Latched(_) => f.write_str("refused, the process is latched after an uncertain completion"),
            Error::Open(e) | Error::Alloc(e) | Error::Sync(e) | Error::MemInfo(e) | Error::Copy { source: e, .. } => {
                e.fmt(f)
            }
            Error::Handle { source, .. } => source.fmt(f),
            Error::ForeignAddress { handle, va, live_va, .. } => write!(
                f,
                "handle (index {}, generation {}) is live but names the buffer at {live_va:#x}, not {va:#x}",
                handle.index, handle.generation
            ),
            Error::LaunchArguments(e) => e.fmt(f),
            Error::Submit(e) => write!(f, "submit failed: {e}"),
            Error::CancelledBeforeSubmit => f.write_str("cancelled before submit"),
            Error::CancelledAfterSubmit => f.write_str("cancelled after submit; completion uncertain, process latched"),
            Error::Timeout { marker, timeout_ms } => {
                write!(f, "completion timeout: marker {marker} not released within {timeout_ms} ms; process latched")
            }
            Error::PollRefused(e) => write!(f, "completion poll refused ({e}); process latched"),
            Error::PanicAfterSubmit(what) => {
                write!(f, "panic after submit ({what}); completion uncertain, process latched")
            }
            Error::Fault(fault) => write!(f, "kernel fault: {fault}"),
            Error::ScratchReserved { requested, reserved } => {
                write!(f, "request of {requested} bytes past the reservation of {reserved} bytes")
            }
            Error::Load(e) => e.fmt(f),
            Error::CmdList(e) => e.cause().fmt(f),
            Error::Setting { detail, .. } => detail.fmt(f),
            Error::Recover(e) => e.fmt(f),
        }
    }
}

/// Why a recovery ([`Error::Recover`]) could not prove that the device no longer runs this process's work.
/// The process stays latched and every parked buffer stays parked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecoverError {
    /// The process is not latched: there is nothing to recover from.
    #[error("the process is not latched; nothing to recover from")]
    NotLatched,
    /// The platform could not stop the work (or has no way to); the work may still run.
    #[error("the platform did not stop the work ({0}); process still latched")]
    Stop(#[source] StopFailure),
    /// Memory the latched work could write changed after the platform said the work was stopped.
    #[error(
        "a parked buffer (GPU address {va:#x}) changed at byte {offset} ({before:#04x} -> {after:#04x}) over {interval_us} us \
         after the stop: the work still runs; process still latched"
    )]
    StillRunning {
        /// The buffer's GPU address.
        va: u64,
        /// The first byte that changed, from the buffer's start.
        offset: u64,
        /// The byte in the first sample after the stop.
        before: u8,
        /// The byte in the sample one interval later.
        after: u8,
        /// The interval between the samples, in microseconds.
        interval_us: u32,
    },
    /// Reading a parked buffer for the heartbeat failed other than by lacking a direct view.
    #[error("sampling the parked buffer at {va:#x} failed ({source}); process still latched")]
    Sample {
        /// The buffer's GPU address.
        va: u64,
        /// What the platform said.
        #[source]
        source: HalError,
    },
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
    #[error("gpr_count {given} (the kernel's own {own}, rounded as the launch declares it: a multiple of 8, at least 64 from C): {limit}")]
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
    /// A seal on a platform that cannot count its driver calls.
    #[error("this platform cannot count its driver calls, so it cannot be sealed for serving")]
    CannotSeal,
    /// A seal while sealed.
    #[error("already sealed")]
    AlreadySealed,
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
    /// A NULL pointer where the C call needs an object (`{what} is NULL`, the argument's C name).
    #[error("{0} is NULL")]
    Null(&'static str),
    /// A NULL output array given room for `max` elements.
    #[error("{what} is NULL (max {max})")]
    NullArray {
        /// The argument's C name.
        what: &'static str,
        /// The elements the caller said it has room for.
        max: usize,
    },
    /// A C string argument that is not UTF-8.
    #[error("{0} is not UTF-8")]
    NotUtf8(&'static str),
    /// A code size whose code buffer's size (with the prefetch tail, page-rounded) overflows.
    #[error("code size {0} overflows")]
    CodeSizeOverflows(usize),
    /// A pointer (its address) that names no live command list.
    #[error("{0:#x} is not a live command list (never created, or freed already)")]
    NotALiveList(usize),
    /// Host memory the platform did not give.
    #[error("{0} bytes: no memory, or no platform with the HOST_MEM service")]
    NoHostMemory(usize),
    /// A host allocation of `count * size` bytes, which overflows.
    #[error("{count} * {size} bytes overflows")]
    HostSizeOverflows {
        /// Elements.
        count: usize,
        /// Bytes of each.
        size: usize,
    },
    /// A C platform table given a built-in platform's name.
    #[error("`{0}` is a built-in platform's name; give the table a name of its own")]
    BuiltInName(&'static str),
    /// A C platform table's name outside what a name may be.
    #[error("a table's name is 1 to 63 printable ASCII characters, no spaces")]
    BadTableName,
    /// A C platform table's name that cannot be made a C string.
    #[error("the name is not a C string")]
    NameNotCString,
    /// A simulator fault number no fault has.
    #[error("unknown fault {0}")]
    UnknownFault(i32),
    /// A harness program's (examples/) report that could not be written: the OS's own words for it.
    #[error("{0}")]
    ReportNotWritten(String),
    /// A harness program's f32 results that differ from its reference: `wrong` of `of` elements, the first
    /// at `first` (`got` and `want` are its f32 bit patterns), with the `seed` the inputs came from.
    #[error(
        "{wrong} of {of} elements wrong (first at {first}: got {}, want {}; seed {seed})",
        f32::from_bits(*.got),
        f32::from_bits(*.want)
    )]
    ElementsWrong {
        /// Elements that differ.
        wrong: usize,
        /// Elements compared.
        of: usize,
        /// The first that differs.
        first: usize,
        /// Its value, as f32 bits.
        got: u32,
        /// The reference's, as f32 bits.
        want: u32,
        /// The inputs' seed.
        seed: u64,
    },
    /// A harness program's bytes that came back from a device-only buffer other than they went in.
    #[error("a device-only buffer read back wrong")]
    ReadBackWrong,
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
    /// A kernel declaring an explicit cluster launch (`EXPLICIT_CLUSTER`) without its shape
    /// (`CTA_PER_CLUSTER`), which CUDA takes from the launch; a kernel with `__cluster_dims__` loads.
    #[error(
        "declares an explicit cluster launch without its shape (CTA_PER_CLUSTER); launch-time cluster shapes \
         for such kernels are not supported"
    )]
    ClusterShapeMissing,
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

/// A load refusal's cause without its stage (the printf library's own refusals say what they are), any
/// other failure whole.
fn printf_missing_text(e: &Error) -> String {
    match e {
        Error::Load(_) => e.cause().to_string(),
        other => other.to_string(),
    }
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

// The texts of C table refusals are among them, and a loom build has no C table.
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Every failure's text, byte for byte: the last-error text C callers read is the contract, so a change
    /// to how texts are rendered must leave each of these as it is.
    fn samples() -> Vec<Error> {
        use crate::cmdlist::CmdListError;
        use crate::session::ParamInfo;
        let hal = || HalError::Driver { call: "alloc", status: 0x1f, detail: "NV_ERR_INVALID_DEVICE".into() };
        let limit = || omega_hal::LimitError::Threads { threads: 2048, max: 1024, sm: (9, 0) };
        let handle = Handle { index: 3, generation: 7 };
        let fault = ChannelFault { xid: 31, name: "MMU fault", detail: "at 0x1000".into() };
        let p = |ordinal, offset, size| ParamInfo { ordinal, offset, size };
        let load = |e: LoadError| Error::Load(e);
        let arg = |e: LaunchArgError| Error::LaunchArguments(e);
        let set = |stage, detail| Error::Setting { stage, detail };
        vec![
            Error::Platform(PlatformError::UnknownName("bogus".into())),
            Error::Platform(PlatformError::NoKernelModule("/proc/driver/nvidia/version: not found".into())),
            Error::Platform(PlatformError::MissingDeviceFiles("nvidia: /dev/nvidiactl is missing".into())),
            Error::Platform(PlatformError::Probe(hal())),
            Error::Platform(PlatformError::NoNvidiaBackend),
            Error::Platform(PlatformError::NotLinux),
            Error::Platform(PlatformError::ClaimedByAnotherRuntime { platform: "sim" }),
            Error::Platform(PlatformError::Table(omega_hal::ctable::TableRefusal {
                refusal: Refusal::MissingService(omega_hal::Services::POLL),
                null: Some("OmegaGpuPollService.poll"),
            })),
            Error::Refused(Refusal::Overflow),
            Error::Refused(Refusal::MissingService(omega_hal::Services::LOCK)),
            Error::Lock("the calling thread does not hold the session lock (take it first)"),
            Error::LockPinned("a typed lock token (omega::Locked or omega::Latched)"),
            Error::CloseHook(Stage::Launch),
            Error::NotCallers { stage: Stage::Free, owner: "a command list's stamp area" },
            Error::Open(HalError::Injected("open")),
            Error::NotOpen(Stage::DeviceQuery),
            Error::Latched(Stage::CmdListCreate),
            Error::Alloc(HalError::OutOfMemory { bytes: 4096 }),
            Error::Handle {
                stage: Stage::Sync,
                source: omega_hal::HandleError::Stale { index: 1, generation: 2, current: 3 },
            },
            Error::Handle { stage: Stage::Free, source: omega_hal::HandleError::Zero },
            Error::ForeignAddress { stage: Stage::Free, handle, va: 0x2000, live_va: 0x3000 },
            Error::Sync(HalError::Injected("sync")),
            Error::Copy { stage: Stage::Read, source: HalError::Lost("gone".into()) },
            Error::MemInfo(HalError::Unsupported("mem info".into())),
            Error::Submit(hal()),
            Error::CancelledBeforeSubmit,
            Error::CancelledAfterSubmit,
            Error::Timeout { marker: 1, timeout_ms: 100 },
            Error::PollRefused(omega_hal::PollRefused::Injected),
            Error::PanicAfterSubmit("boom".into()),
            Error::Fault(fault.clone()),
            Error::ScratchReserved { requested: 8192, reserved: 4096 },
            arg(LaunchArgError::NullLaunch),
            arg(LaunchArgError::NullArgs),
            arg(LaunchArgError::ArgCount { n: 33, max: 32 }),
            arg(LaunchArgError::ZeroThreadsX),
            arg(LaunchArgError::ZeroGridSide { x: 0, y: 1 }),
            arg(LaunchArgError::ZeroZ),
            arg(LaunchArgError::TooManyThreads(2048)),
            arg(LaunchArgError::SpinTooLong { us: 200_000, max: 100_000 }),
            arg(LaunchArgError::CodeOutsideBuffer(0x1234)),
            arg(LaunchArgError::KernelThreads { threads: 512, kernel: "k".into(), max: 256 }),
            arg(LaunchArgError::TooFewArgs { words: 1, kernel: "k".into(), bytes: 16 }),
            arg(LaunchArgError::Limit(limit())),
            arg(LaunchArgError::Registers { given: 300, own: 290, limit: limit() }),
            arg(LaunchArgError::ArgBlockTooLarge { end: 40_000, max: 32_764 }),
            arg(LaunchArgError::ArgBytes { bytes: 5000, words: 1250, kernel: "k".into(), max: 4096 }),
            arg(LaunchArgError::ParamCount { kernel: "k".into(), declared: 3, given: 2 }),
            arg(LaunchArgError::ParamLayout {
                kernel: "k".into(),
                ordinal: 1,
                size: 8,
                offset: 8,
                given_size: 4,
                given_offset: 4,
            }),
            load(LoadError::NoHostImplementation.for_kernel("k")),
            load(LoadError::Cubin(CubinError::NoSuchKernel { name: "k".into(), known: vec!["a".into(), "b".into()] })),
            load(LoadError::HostKernelOffSimulator { platform: "nvidia" }),
            load(LoadError::NoArchitecture { major: 7, minor: 5, device: "T4".into() }),
            load(LoadError::ClusterShapeMissing),
            load(LoadError::ParamBase { found: 0x160, arch: "sm_90", expected: 0x210 }),
            load(LoadError::PrintfUnavailable {
                missing: Box::new(load(LoadError::PrintfNotBuilt { why: "no nvcc" })),
            }),
            load(LoadError::PrintfUnavailable { missing: Box::new(Error::NotOpen(Stage::Printf)) }),
            load(LoadError::UndefinedSymbol { symbol: "foo".into() }),
            load(LoadError::NeedsModuleLoad { kernel: "k".into(), symbol: "foo".into() }),
            load(LoadError::NotBuilt { kernel: "k".into(), why: "ptxas was not found" }),
            load(LoadError::NoSuchRepositoryKernel("nope".into())),
            load(LoadError::CodeDoesNotFit { bytes: 9000 }),
            load(LoadError::BytesDoNotFit { bytes: 9000 }),
            load(LoadError::EntryOutsideCode { va: 0x4000 }),
            load(LoadError::CodePastBuffer { bytes: 100, va: 0x4000, left: 50 }),
            load(LoadError::BankOutsideCode { index: 3, bytes: 64, va: 0x5000 }),
            load(LoadError::PrintfNotBuilt { why: "no nvcc" }),
            load(LoadError::PrintfLibrary(CubinError::NoSuchKernel { name: "vprintf".into(), known: vec![] })),
            load(LoadError::PrintfLibraryHasData),
            load(LoadError::PrintfLibraryUndefined("malloc".into())),
            load(LoadError::HandleMismatch {
                kernel: "k".into(),
                handle: "K".into(),
                mismatch: HandleMismatch::Entry("j".into()),
            }),
            load(LoadError::HandleMismatch {
                kernel: "k".into(),
                handle: "K".into(),
                mismatch: HandleMismatch::Params { declared: vec![p(0, 0, 8), p(1, 8, 4)], expected: vec![p(0, 0, 8)] },
            }),
            set(Stage::Write, SettingError::WriteTooLong { n: 5, len: 4 }),
            set(Stage::Read, SettingError::ReadTooLong { n: 5, len: 4 }),
            set(Stage::Write, SettingError::ElementsPast { at: 3, n: 2, len: 4 }),
            set(Stage::Sync, SettingError::RangePast { offset: 10, len: 5000 }),
            set(Stage::Write, SettingError::RangePastBytes { offset: 10, len: 5000, bytes: 4096 }),
            set(Stage::ModuleData, SettingError::NoDataObject("x".into())),
            set(Stage::ModuleData, SettingError::ConstantObject("x".into())),
            set(Stage::ModuleData, SettingError::ObjectTooShort { len: 8, name: "x".into(), bytes: 4 }),
            set(Stage::SimInject, SettingError::NotSimulator("nvidia")),
            set(Stage::Printf, SettingError::PrintfBufferTooSmall(8)),
            set(Stage::Printf, SettingError::PrintfBufferExists(4096)),
            set(Stage::SetPlatform, SettingError::CloseDeviceFirst),
            set(Stage::OnClose, SettingError::TooManyHooks(8)),
            set(Stage::SetSpin, SettingError::SpinTooLong { us: 200_000, max: 100_000 }),
            set(Stage::Alloc, SettingError::ShortChunk { got: 4096, chunk: 65536 }),
            set(Stage::Alloc, SettingError::ShortAllocation { got: 4096, asked: 8192 }),
            set(Stage::Scratch, SettingError::ScratchParked),
            set(Stage::Scratch, SettingError::StaleReservation),
            set(Stage::Keep, SettingError::KeptStale { opened: 1, now: 2 }),
            set(Stage::Alloc, SettingError::Null("out")),
            set(Stage::SetPlatform, SettingError::NotUtf8("name")),
            set(Stage::CodeAlloc, SettingError::CodeSizeOverflows(99)),
            set(Stage::CmdListAdd, SettingError::NotALiveList(0x10)),
            set(Stage::CmdListStamps, SettingError::NullArray { what: "out", max: 4 }),
            set(Stage::HostAlloc, SettingError::NoHostMemory(64)),
            set(Stage::HostAlloc, SettingError::HostSizeOverflows { count: 2, size: 3 }),
            set(Stage::SetPlatform, SettingError::BuiltInName("sim")),
            set(Stage::SetPlatform, SettingError::BadTableName),
            set(Stage::SetPlatform, SettingError::NameNotCString),
            set(Stage::SimInject, SettingError::UnknownFault(99)),
            set(Stage::Report, SettingError::ReportNotWritten("No space left on device (os error 28)".into())),
            set(
                Stage::Check,
                SettingError::ElementsWrong {
                    wrong: 2,
                    of: 8,
                    first: 3,
                    got: 1.5f32.to_bits(),
                    want: 2.0f32.to_bits(),
                    seed: 7,
                },
            ),
            set(Stage::Bench, SettingError::ReadBackWrong),
            CmdListError::Full.into(),
            CmdListError::NoSuchLaunch { index: 5, count: 2 }.into(),
            CmdListError::BadBarrier(7).into(),
            CmdListError::Empty.into(),
            CmdListError::StaleStamps.into(),
            CmdListError::StaleCode { launch: 1, code_va: 0x6000 }.into(),
            CmdListError::ListLatched(Stage::CmdListReset).into(),
            CmdListError::Session(Error::Latched(Stage::CmdListSubmit)).into(),
        ]
    }

    /// What each of [`samples`] reads, in order.
    const TEXTS: &[&str] = &[
        "platform: unknown platform `bogus` (expected `sim` or `nvidia`)",
        "platform: nvidia: /proc/driver/nvidia/version: not found",
        "platform: nvidia: /dev/nvidiactl is missing",
        "platform: nvidia: driver refused alloc: NV_ERR_INVALID_DEVICE",
        "platform: nvidia: this build has no nvidia backend (omega was built without its `nvidia` feature)",
        "platform: nvidia: the open-driver backend exists only on Linux",
        "platform: this `sim` platform instance belongs to another runtime of this process (one runtime per device: its latch and its buffers are that runtime's); use that runtime, or a platform instance of your own",
        "platform: OMEGA_GPU_PLAT_MISSING_SERVICE: OMEGA_GPU_SVC_POLL (OmegaGpuPollService.poll is NULL)",
        "platform: OMEGA_GPU_PLAT_OVERFLOW: range too large",
        "platform: OMEGA_GPU_PLAT_MISSING_SERVICE: OMEGA_GPU_SVC_LOCK",
        "lock: the calling thread does not hold the session lock (take it first)",
        "lock: unlock refused: the lock is pinned by a typed lock token (omega::Locked or omega::Latched) on this thread, which releases it when it ends",
        "on close: `launch` refused inside an on-close hook (a hook may only release buffers and read state)",
        "free: the buffer is a command list's stamp area; nothing was released",
        "open: injected fault: open",
        "device query: device not open",
        "cmdlist create: refused, the process is latched after an uncertain completion",
        "alloc: out of device memory (4096 bytes requested)",
        "sync: stale handle (index 1, generation 2, slot now at 3)",
        "free: handle is zero (never issued)",
        "free: handle (index 3, generation 7) is live but names the buffer at 0x3000, not 0x2000",
        "sync: injected fault: sync",
        "read: device lost: gone",
        "mem info: unsupported: mem info",
        "launch: submit failed: driver refused alloc: NV_ERR_INVALID_DEVICE",
        "launch: cancelled before submit",
        "launch: cancelled after submit; completion uncertain, process latched",
        "launch: completion timeout: marker 1 not released within 100 ms; process latched",
        "launch: completion poll refused (sim: injected poll refusal); process latched",
        "launch: panic after submit (boom); completion uncertain, process latched",
        "launch: kernel fault: channel error Xid 31 (MMU fault): at 0x1000",
        "scratch: request of 8192 bytes past the reservation of 4096 bytes",
        "launch arguments: L is NULL",
        "launch arguments: args is NULL",
        "launch arguments: n_args 33 is not in 1..=32",
        "launch arguments: threads_x is 0",
        "launch arguments: grid 0x1 has a zero side",
        "launch arguments: a z dimension of 0",
        "launch arguments: 2048 threads per block (at most 1024)",
        "launch arguments: spin_us 200000 is above the maximum of 100000 us (OMEGA_GPU_SESSION_MAX_SPIN_US)",
        "launch arguments: code_va 0x1234 is not inside a code buffer of this session",
        "launch arguments: 512 threads per block, kernel `k` allows 256",
        "launch arguments: 1 argument words, kernel `k` takes 16 bytes of parameters",
        "launch arguments: 2048 threads per block, sm_90 allows at most 1024",
        "launch arguments: gpr_count 300 (the kernel's own 290, rounded as the launch declares it: a multiple of 8, at least 64 from C): 2048 threads per block, sm_90 allows at most 1024",
        "launch arguments: a parameter would end at byte 40000 of the block, past the 32764 bytes any launch can pass",
        "launch arguments: 5000 bytes of arguments (1250 words) for kernel `k`; the constant bank takes at most 4096 bytes",
        "launch arguments: kernel `k` takes 3 parameters, the launch gives 2",
        "launch arguments: kernel `k` parameter 1: declared 8 bytes at offset 8, given 4 bytes at offset 4",
        "load: kernel `k`: no host implementation is registered with the simulator under that name",
        "load: no kernel named k in the module (its kernels: a, b)",
        "load: host kernels run on the simulator only, the platform is nvidia",
        "load: no architecture entry for sm_75 (T4)",
        "load: declares an explicit cluster launch without its shape (CTA_PER_CLUSTER); launch-time cluster shapes for such kernels are not supported",
        "load: parameters at constant-bank offset 0x160, sm_90 expects 0x210",
        "load: calls `vprintf` (device printf), which is not available: device printf: Omega's printf library (kernels/cuda/lib/printf.cu) was not built: no nvcc",
        "load: calls `vprintf` (device printf), which is not available: printf: device not open",
        "load: needs symbol `foo`, which the module does not define and Omega does not provide",
        "load: kernel `k` needs symbol `foo`, which a single-buffer load cannot provide: load its module with Scope::load_module",
        "load: kernel `k`: ptxas was not found",
        "load: no kernel `nope` in kernels/",
        "load: 9000 bytes of code do not fit the code buffer's CPU view",
        "load: 9000 bytes do not fit the buffer's CPU view",
        "load: entry 0x4000 is not inside a code buffer of this session",
        "load: 100 bytes of code from 0x4000 run past its code buffer (50 bytes left)",
        "load: constant bank 3 (64 bytes at 0x5000) lies outside the code buffer of its entry",
        "load: device printf: Omega's printf library (kernels/cuda/lib/printf.cu) was not built: no nvcc",
        "load: device printf library: no kernel named vprintf in the module (its kernels: )",
        "load: device printf library: it must have no module data or constant banks",
        "load: device printf library: undefined symbol malloc",
        "load: kernel `k` for `K`: the handle was generated for entry `j`",
        "load: kernel `k` for `K`: the kernel declares 2 parameters [8@0 4@8] (size@offset), the PTX the handle was generated from 1 [8@0]",
        "write: 5 elements into a buffer of 4",
        "read: 5 elements from 4",
        "write: elements 3+2 past a buffer of 4",
        "sync: range 10+5000 past the buffer",
        "write: range 10+5000 past the buffer's 4096 bytes",
        "module data: the module defines no data object `x`",
        "module data: `x` is __constant__ data, which the GPU reads from the code buffer",
        "module data: 8 bytes of `x`, which has 4",
        "sim inject: the installed platform is `nvidia`, not the simulator",
        "printf: a buffer of 8 bytes (at least 64)",
        "printf: this session's printf buffer exists (4096 bytes); set the size before the first module calling vprintf loads, or close and reopen",
        "set platform: close the device first",
        "on close: at most 8 hooks",
        "set spin: 200000 us is above the maximum of 100000 us",
        "alloc: the platform handed out 4096 bytes for a chunk of 65536",
        "alloc: the platform handed out 4096 bytes for a request of 8192",
        "scratch: its buffer is parked (freed after the latch) and cannot be used again",
        "scratch: reserved is set but its buffer holds no reservation (its device was closed since, it was freed, or the field was set by hand): scratch_free it and reserve again",
        "keep: kept in device open 1, and the device was closed since (open 2 now); its memory went with the close",
        "alloc: out is NULL",
        "set platform: name is not UTF-8",
        "code alloc: code size 99 overflows",
        "cmdlist add: 0x10 is not a live command list (never created, or freed already)",
        "cmdlist stamps: out is NULL (max 4)",
        "host alloc: 64 bytes: no memory, or no platform with the HOST_MEM service",
        "host alloc: 2 * 3 bytes overflows",
        "set platform: `sim` is a built-in platform's name; give the table a name of its own",
        "set platform: a table's name is 1 to 63 printable ASCII characters, no spaces",
        "set platform: the name is not a C string",
        "sim inject: unknown fault 99",
        "report: No space left on device (os error 28)",
        "check: 2 of 8 elements wrong (first at 3: got 1.5, want 2; seed 7)",
        "bench: a device-only buffer read back wrong",
        "cmdlist add: OMEGA_GPU_CMDLIST_FULL: the list already holds 2048 launches",
        "cmdlist mark independent: launch 5 is not in the list (2 launches)",
        "cmdlist create: barrier mode 7 is neither OMEGA_GPU_CMDLIST_BARRIER_DEFAULT (0) nor OMEGA_GPU_CMDLIST_BARRIER_NONE (1)",
        "cmdlist submit: the list is empty",
        "cmdlist submit: the list's stamp area belongs to a device that was closed since the list was created; create a new list",
        "cmdlist submit: launch 1: code_va 0x6000 is no longer inside a code buffer of this session (freed since the add?); nothing was submitted",
        "cmdlist reset: refused, the list is latched after an uncertain completion",
        "cmdlist submit: refused, the process is latched after an uncertain completion",
    ];

    #[test]
    fn every_failure_text_is_the_one_c_callers_read() {
        let samples = samples();
        assert_eq!(samples.len(), TEXTS.len());
        for (e, want) in samples.iter().zip(TEXTS) {
            assert_eq!(e.to_string(), *want, "{e:?}");
        }
    }
}
