//! The command list's C-layout structs, constants and errors (`OmegaGpuCmdListOpts`, `OmegaGpuCmdListStats`).

use omega_hal::Order;

use crate::error::{Error, Stage};

/// `OMEGA_GPU_CMDLIST_MAX_LAUNCHES`: launches one list can hold.
pub const MAX_LAUNCHES: u32 = 2048;
/// Bytes of the stamp area per launch: the payload word and the completion timestamp the HAL releases.
pub const STAMP_BYTES: u64 = 16;

/// `OMEGA_GPU_CMDLIST_BARRIER_DEFAULT`: a barrier before each dependent launch, so no two overlap.
pub const BARRIER_DEFAULT: u32 = 0;
/// `OMEGA_GPU_CMDLIST_BARRIER_NONE`: no ordering at all. TEST ONLY: launches may overlap and race.
pub const BARRIER_NONE: u32 = 1;

/// How the launches of a list are ordered against each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarrierMode {
    /// A barrier before each launch not marked independent.
    Default,
    /// No ordering (test-only).
    None,
}

impl BarrierMode {
    /// The mode of a C value; `None` for a value no mode has.
    pub fn from_raw(mode: u32) -> Option<Self> {
        match mode {
            BARRIER_DEFAULT => Some(BarrierMode::Default),
            BARRIER_NONE => Some(BarrierMode::None),
            _ => None,
        }
    }

    /// The C value.
    pub fn raw(self) -> u32 {
        match self {
            BarrierMode::Default => BARRIER_DEFAULT,
            BarrierMode::None => BARRIER_NONE,
        }
    }

    /// The HAL ordering of a launch under this mode. The first launch gets the same order as the others:
    /// there is nothing before it in the submission, and earlier submissions have completed.
    pub fn order(self, independent: bool) -> Order {
        match (self, independent) {
            (BarrierMode::None, _) => Order::Unordered,
            (BarrierMode::Default, true) => Order::Independent,
            (BarrierMode::Default, false) => Order::AfterPrevious,
        }
    }
}

/// `omega_gpu_cmdlist_barrier_name`: the fixed name of a barrier mode, `"OMEGA_GPU_CMDLIST_BARRIER_UNKNOWN"`
/// for a value no mode has.
pub fn barrier_name(mode: u32) -> &'static str {
    match BarrierMode::from_raw(mode) {
        Some(BarrierMode::Default) => "OMEGA_GPU_CMDLIST_BARRIER_DEFAULT",
        Some(BarrierMode::None) => "OMEGA_GPU_CMDLIST_BARRIER_NONE",
        None => "OMEGA_GPU_CMDLIST_BARRIER_UNKNOWN",
    }
}

/// `OmegaGpuCmdListOpts`. All-zero is the default: barriers on, launches run, the limits derived from the
/// launches' own.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmdListOpts {
    /// [`BARRIER_DEFAULT`] or [`BARRIER_NONE`] (test-only).
    pub barrier: u32,
    /// Non-zero: submit the list and wait for it, but run none of its launches (test-only; measures the
    /// submission and the wait alone).
    pub skip_launch: u32,
    /// Limit of each of the submission's two completion waits, ms; 0 = the sum of the launches' own
    /// limits (the list runs them one after another).
    pub timeout_ms: u32,
    /// Spin-poll window, us; 0 = the largest of the launches' own, and if that is 0 too the process-wide
    /// setting.
    pub spin_us: u32,
}

impl CmdListOpts {
    /// The test-only options: no barriers.
    pub fn unordered() -> Self {
        CmdListOpts { barrier: BARRIER_NONE, ..Default::default() }
    }

    /// The test-only options: submit, run nothing.
    pub fn skipping() -> Self {
        CmdListOpts { skip_launch: 1, ..Default::default() }
    }
}

/// `OmegaGpuCmdListStats`: what a list has done since it was created. Reset does not clear them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmdListStats {
    /// Launches in submissions that completed.
    pub launches: u64,
    /// Submissions that completed (both markers observed).
    pub submits: u64,
    /// Submissions that failed, certain or not.
    pub failed_submits: u64,
    /// Submit to second marker of the last completed submission, platform-clock ns.
    pub last_submit_ns: u64,
    /// The same, summed over every completed submission.
    pub total_submit_ns: u64,
    /// Barriers in completed submissions: launches ordered after the one before them (the first launch of
    /// a submission has none before it and is not counted).
    pub barriers: u64,
    /// Launches in completed submissions that were marked independent.
    pub independent: u64,
    /// Launches in completed submissions under [`BARRIER_NONE`].
    pub unordered: u64,
    /// Launches in completed submissions that `skip_launch` kept from running.
    pub skipped: u64,
    /// Adds and submits refused before anything was submitted.
    pub refusals: u64,
}

static_assertions::assert_eq_size!(CmdListOpts, [u32; 4]);
static_assertions::assert_eq_size!(CmdListStats, [u64; 10]);

/// What a completed submission reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListCompletion {
    /// Submit to second marker, platform-clock ns.
    pub elapsed_ns: u64,
    /// The first marker word observed (the submission's sequence number).
    pub marker: u32,
    /// Launches submitted.
    pub launches: u32,
}

/// A command-list failure. Its text is `{stage}: {cause}`, as every session failure's is ([`Error`]); the
/// session's own failures (lock, latch, launch arguments, the completion wait) pass through unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmdListError {
    /// The list already holds [`MAX_LAUNCHES`] launches.
    Full,
    /// `mark_independent` of an index the list does not hold.
    NoSuchLaunch {
        /// The index given.
        index: u32,
        /// Launches in the list.
        count: u32,
    },
    /// A barrier mode no mode has, at create.
    BadBarrier(u32),
    /// Submit of a list with no launches.
    Empty,
    /// The list's own stamp area is gone: the device was closed since the list was created; nothing was
    /// submitted.
    StaleStamps,
    /// Launch `launch`'s code is gone (freed since the add); nothing was submitted.
    StaleCode {
        /// The launch's index in the list.
        launch: usize,
        /// Its code address.
        code_va: u64,
    },
    /// The list latched after an uncertain completion; it refuses everything but free and the queries.
    ListLatched(Stage),
    /// A session failure.
    Session(#[from] Error),
}

impl CmdListError {
    /// The stage alone.
    pub fn stage(&self) -> Stage {
        match self {
            CmdListError::Full => Stage::CmdListAdd,
            CmdListError::NoSuchLaunch { .. } => Stage::CmdListMarkIndependent,
            CmdListError::BadBarrier(_) => Stage::CmdListCreate,
            CmdListError::Empty | CmdListError::StaleStamps | CmdListError::StaleCode { .. } => Stage::CmdListSubmit,
            CmdListError::ListLatched(stage) => *stage,
            CmdListError::Session(e) => e.stage(),
        }
    }

    /// True when this failure latched the list and the process.
    pub fn latched_the_process(&self) -> bool {
        matches!(self, CmdListError::Session(e) if e.latched_the_process())
    }

    /// The failure's text without its stage.
    pub fn cause(&self) -> ListCause<'_> {
        ListCause(self)
    }
}

/// `{stage}: {cause}`, rendered as [`Error`]'s is.
impl core::fmt::Display for CmdListError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}: {}", self.stage(), self.cause())
    }
}

/// The text of a list failure after its stage ([`CmdListError::cause`]).
#[derive(Clone, Copy, Debug)]
pub struct ListCause<'a>(&'a CmdListError);

impl core::fmt::Display for ListCause<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            CmdListError::Full => write!(f, "OMEGA_GPU_CMDLIST_FULL: the list already holds {MAX_LAUNCHES} launches"),
            CmdListError::NoSuchLaunch { index, count } => {
                write!(f, "launch {index} is not in the list ({count} launches)")
            }
            CmdListError::BadBarrier(mode) => write!(
                f,
                "barrier mode {mode} is neither OMEGA_GPU_CMDLIST_BARRIER_DEFAULT ({BARRIER_DEFAULT}) nor \
                 OMEGA_GPU_CMDLIST_BARRIER_NONE ({BARRIER_NONE})"
            ),
            CmdListError::Empty => f.write_str("the list is empty"),
            CmdListError::StaleStamps => f.write_str(
                "the list's stamp area belongs to a device that was closed since the list was created; create a \
                 new list",
            ),
            CmdListError::StaleCode { launch, code_va } => write!(
                f,
                "launch {launch}: code_va {code_va:#x} is no longer inside a code buffer of this session (freed \
                 since the add?); nothing was submitted"
            ),
            CmdListError::ListLatched(_) => f.write_str("refused, the list is latched after an uncertain completion"),
            CmdListError::Session(e) => e.cause().fmt(f),
        }
    }
}

impl From<CmdListError> for Error {
    /// A session failure unwrapped; a list's own refusal carried whole ([`Error::CmdList`]), so it prints
    /// and matches the same.
    fn from(e: CmdListError) -> Error {
        match e {
            CmdListError::Session(e) => e,
            other => Error::CmdList(Box::new(other)),
        }
    }
}
