//! Submission: each launch becomes a QMD V04 and a constant bank 0 in video memory (written through BAR1),
//! handed to the compute engine with SEND_PCAS; the two completion markers follow.
//!
//! [`Queue::submit`] is a short list of steps: the local-memory store grown and the instruction cache
//! invalidated where needed, then the plan (a prepared encoding reused, or one encoded afresh:
//! `encode_into`, per launch a QMD from its template plus `tune_qmd`'s choices, all through the QMD
//! module's setters), then the pushbuffer (`push_launches`) sent on the compute channel. The service's
//! state is [`Queue`]: QMD templates, the prepared pool, scratch buffers and the instruction-cache flag.
//!
//! **Prepared submissions.** The QMDs and constant banks of a submission are kept (in a pool of their own)
//! under a key of everything they depend on except the sequence. A later submission with the same key
//! (a command list submitted again, a launch repeated) patches only the sequence payloads, one 64-byte line
//! per QMD, and sends a fresh pushbuffer: the encoding is done once and replayed, as a CUDA graph is.
//!
//! - Marker 0: release semaphore 0 of the last launch's QMD (payload = sequence, four words with the
//!   completion timestamp).
//! - Marker 1: a host semaphore release with wait-for-idle, 64-bit payload and timestamp, after
//!   everything else (or, under [`Marker1::QmdRelease`], release semaphore 2 of the last launch's QMD; see
//!   [`Marker1`] for why it still means the engine is done with the submission).
//! - Stamps: release semaphore 1 of every launch, at `stamps + 16 * i`.
//!
//! `Order::AfterPrevious` needs launch `i` to start only after every earlier launch finished. Two ways:
//!
//! - **QMD chain** ([`Barrier::Auto`], when every launch after the first depends on the one before):
//!   each QMD names the next as its dependent (action INVALIDATE_COPY_SCHEDULE by default, so a patched,
//!   reused QMD is re-read), so the compute engine itself starts launch `i + 1` when launch `i` completes;
//!   only the first is sent with SEND_PCAS. Nothing waits on
//!   the host side between launches. Marker 1 then first acquires marker 0 (the chain's last release), so
//!   it cannot overtake a chain the idle wait might not see.
//! - **Programmatic chain** ([`ChainMode::Programmatic`]) and **semaphore chain**
//!   ([`ChainMode::Semaphore`]): the same dependency, ordered by latches and the kernels'
//!   `griddepcontrol.wait`, or by a semaphore per launch the host acquires before sending the next.
//! - **Idle release** (any other mix, or [`Barrier::IdleRelease`]): before each launch that must wait, a
//!   host semaphore release with wait-for-idle to a scratch word; the PBDMA processes nothing after it
//!   until the engine is idle. Independent launches are consecutive SEND_PCAS pairs and may overlap.

use std::borrow::Cow;
use std::collections::HashMap;

use super::channel::{describe_error, write_lines, write_words, Channels, Target, LINE_WORDS};
use super::device::{LOCAL_WINDOW, SHARED_WINDOW};
use super::memory::DriverMem;
use super::push::{host, Push};
use super::qmd::{self, Cbuf0Params, DependentAction, QmdParams, QMD_WORDS};
use super::{Base, GrInfo, Nvidia, NvidiaConfig, OpenDevice};
use crate::arch::{Arch, QmdVersion};
use crate::error::HalError;
use crate::queue::{LaunchDesc, Order, QueueBuffer, Submission, SubmitQueue};
use crate::sync;

/// How `Order::AfterPrevious` is enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Barrier {
    /// QMD chaining when every launch after the first waits for the one before, idle releases otherwise.
    Auto,
    /// Always an idle-waiting host release before a dependent launch.
    IdleRelease,
}

/// Encoding choices that were measured on the H200 (`docs/perf/2026-11-29-launch-path.md`). The defaults
/// are the fastest settings that keep every guarantee; the others stay selectable so that a probe can
/// measure them again on another chip or driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchTuning {
    /// Reuse the QMDs and constant banks already encoded for a submission identical to an earlier one
    /// (same launches, arguments, markers and stamps; only the sequence payloads are patched), the way a
    /// CUDA graph is instantiated once and replayed.
    pub prepared: bool,
    /// `DEPENDENT_QMD_ACTION` of a chained launch.
    pub chain_action: DependentAction,
    /// `DEPENDENT_QMD_PREFETCH` of a chained launch.
    pub chain_prefetch: bool,
    /// The action of `SEND_SIGNALING_PCAS2_B` (3, 9 and 0xa all run).
    pub pcas_action: u32,
    /// `INVALIDATE_SHADER_CACHES_NO_WFI` in front of every submission; `false`: only in front of the first
    /// one after code memory was allocated, written or freed (every QMD invalidates the data and constant
    /// caches itself, so the instruction cache is the only one this covers).
    pub invalidate_every_submission: bool,
    /// `CWD_MEMBAR_TYPE` of every QMD of a QMD chain but its last, on QMD V04 (0 L1_NONE, 1 L1_SYSMEMBAR
    /// as libcuda writes, 3 L1_MEMBAR as tinygrad writes; values READ OGD `clcbc0qmd.h`): what a block's
    /// exit waits for before the grid counts as done, and so before the next launch of the chain starts.
    /// L1_MEMBAR (the default) is a GPU-scope barrier, which is what ordering one launch's video-memory
    /// stores before the next launch's loads on the same GPU needs; the chain's last QMD keeps
    /// L1_SYSMEMBAR in front of the completion release the CPU polls.
    pub cwd_membar: u32,
    /// `CWD_MEMBAR_TYPE` of every other QMD: a chain's last, every QMD of a submission that is not one
    /// chain, and every QMD of a layout other than V04 (not measured there).
    pub last_cwd_membar: u32,
    /// `RELEASE_MEMBAR_TYPE` of marker 0's release: a system-wide memory barrier before it is written.
    pub release_sysmembar: bool,
    /// How marker 1 is released.
    pub marker1: Marker1,
    /// The QMD's cache invalidations at launch, bit i = the i-th of texture header, sampler, texture
    /// data, shader data, instruction, shader constant (libcuda's: all but instruction, 0x2f).
    pub qmd_invalidate: u8,
    /// `CWD_MEMBAR_TASK_CHASING_ENABLE` (V04 bit 382) on the QMDs that get [`LaunchTuning::cwd_membar`].
    /// With L1_MEMBAR it took a chained launch from 0.71 to 0.60 us on the H200 (with L1_SYSMEMBAR it
    /// changed nothing); the block-exit barrier still runs, and the suite's ordering and
    /// launch-to-launch visibility checks pass with it (docs/perf/2026-11-29-chain-membar.md).
    pub membar_task_chasing: bool,
    /// `ARRIVE_AT_LATCH_VALID` with `ARRIVE_AT_LATCH_ID` 8 on every QMD, as libcuda's captured launch
    /// carried it (V04 only). Off by default (probe only; a programmatic chain sets its own latches).
    pub arrive_at_latch: bool,
    /// How each launch of an `AfterPrevious` chain waits for the one before it.
    pub chain: ChainMode,
    /// `PRE_EXIT_AT_LAST_CTA_LAUNCH` on the producers of a [`ChainMode::Programmatic`] chain: the next
    /// launch is scheduled once the last CTA is dispatched, not at the CTAs' own
    /// `griddepcontrol.launch_dependents` (or exit, for kernels without one).
    pub pdl_at_last_cta_launch: bool,
    /// Latch ids a programmatic chain cycles through (launch `k` arrives at `PDL_LATCH_BASE + k % n`,
    /// launch `k + 1` waits on it); 1 puts every launch on one latch. What a latch counts is not
    /// documented, so both are kept to be measured.
    pub pdl_latch_ids: u32,
    /// `RELEASE_MEMBAR_TYPE` FE_SYSMEMBAR on the semaphore each inner launch of a
    /// [`ChainMode::Semaphore`] chain releases for the next: a system-wide barrier in front of the write
    /// the next launch's acquire waits for, which is what may stand in for the block-exit barrier.
    pub chain_release_membar: bool,
    /// `RELEASE_MEMBAR_TYPE` FE_SYSMEMBAR on marker 1 when the last QMD releases it
    /// ([`Marker1::QmdRelease`]).
    pub marker1_sysmembar: bool,
}

/// How the launches of a chain (every launch after the first `AfterPrevious`) are ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainMode {
    /// Dependent-QMD chaining: each QMD names the next, which the compute engine schedules when it
    /// completes; only the first is sent.
    Dependent,
    /// Dependent-QMD chaining with Hopper's programmatic dependent launch: each producer arrives at a latch
    /// and may pre-exit (its dependent is scheduled before it completes), each consumer waits on its
    /// predecessor's latch. Only correct for kernels that run `griddepcontrol.wait` before touching what
    /// the launch before wrote (the PTX ISA: it waits until the prerequisite grids completed and their
    /// memory operations are visible); a kernel without it would run alongside its predecessor. V04 only.
    Programmatic,
    /// Every launch is sent with SEND_PCAS; each inner launch releases a semaphore of its own (QMD release
    /// 2, payload = the sequence) and the host acquires it before sending the next: the ordering comes
    /// from the PBDMA, not the compute engine.
    Semaphore,
}

/// First latch id of a programmatic chain (any 32-bit id; clear of libcuda's 8).
pub(crate) const PDL_LATCH_BASE: u32 = 16;

/// How marker 1 ("the engine has gone idle") is released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker1 {
    /// A host semaphore release with wait-for-idle (what the PBDMA does once the engine is idle).
    HostIdleRelease,
    /// The compute engine's own WAIT_FOR_IDLE, then its report-semaphore release (flushed).
    ComputeReport,
    /// Release semaphore 2 of the last QMD (four words: payload and timestamp), when that launch starts
    /// only after every earlier one of the submission completed (a single launch, a chain, or an idle
    /// release in front of it); otherwise [`Marker1::HostIdleRelease`]. Nothing follows the last
    /// SEND_PCAS, so the PBDMA has read the whole pushbuffer before the grid runs; every earlier launch
    /// completed before the last one started; the last grid's blocks ran their block-exit system barrier
    /// (L1_SYSMEMBAR) before it counted as complete; so once this release is written no part of the
    /// submission is left to run or write, which is what "the engine has gone idle" promises the
    /// session. The releases of one QMD being written in index order (stamps and marker 0 before it) is
    /// checked by nv_probe, not documented. With nothing to launch, both markers are releases without
    /// wait-for-idle (the previous submission was seen complete).
    QmdRelease,
    /// When marker 0 is released by the last launch and that launch follows every earlier one: the host
    /// acquires marker 0 and then releases marker 1 without wait-for-idle, the acquire giving the order
    /// the wait-for-idle gave. Otherwise [`Marker1::HostIdleRelease`]; with nothing to launch, releases
    /// without wait-for-idle.
    HostAfterAcquire,
}

impl Marker1 {
    /// The word the prepared-submission key carries.
    fn key(self) -> u32 {
        match self {
            Marker1::HostIdleRelease => 0,
            Marker1::ComputeReport => 1,
            Marker1::QmdRelease => 2,
            Marker1::HostAfterAcquire => 3,
        }
    }
}

impl ChainMode {
    /// The word the prepared-submission key carries.
    fn key(self) -> u32 {
        match self {
            ChainMode::Dependent => 0,
            ChainMode::Programmatic => 1,
            ChainMode::Semaphore => 2,
        }
    }
}

impl Default for LaunchTuning {
    fn default() -> Self {
        LaunchTuning {
            prepared: true,
            // A reused QMD is patched in place, so its dependent must be re-read, never a cached copy.
            chain_action: DependentAction::InvalidateCopySchedule,
            chain_prefetch: true,
            pcas_action: super::push::compute::PCAS_INVALIDATE_PREFETCH_COPY_SCHEDULE,
            invalidate_every_submission: false,
            // Measured on the H200 (docs/perf/2026-11-29-chain-membar.md): L1_MEMBAR with task chasing
            // on a chain's inner launches, 0.75 -> 0.64-0.66 us per dependent launch.
            cwd_membar: 3,
            last_cwd_membar: 1,
            release_sysmembar: false,
            // Measured on the H200 (docs/perf/2026-12-02-s3-suite-matmul-launch.md): launch + completion p50
            // 4.43 -> 4.04 us, and the whole GPU suite passed under it (ordering, visibility, every library).
            marker1: Marker1::QmdRelease,
            qmd_invalidate: qmd::LIBCUDA_INVALIDATIONS,
            membar_task_chasing: true,
            arrive_at_latch: false,
            chain: ChainMode::Dependent,
            pdl_at_last_cta_launch: true,
            pdl_latch_ids: 2,
            chain_release_membar: false,
            marker1_sysmembar: false,
        }
    }
}

/// Bytes of the line after a launch's constant bank that holds the semaphore it releases in a semaphore
/// chain (a whole line, so the CPU's write of it is one write-combined line).
pub(crate) const SEM_LINE_BYTES: u64 = 64;

/// Bytes of one launch's slot in the arena: the QMD (384 bytes), then constant bank 0 (64-byte aligned),
/// the whole rounded to 256 so the next QMD is aligned.
pub(crate) fn slot_bytes(qmd_bytes: u64, cbuf_bytes: u64) -> u64 {
    (qmd_bytes.next_multiple_of(64) + cbuf_bytes.next_multiple_of(64)).next_multiple_of(256)
}

/// What a QMD depends on besides its per-launch addresses: launches that agree on this share one
/// encoded template, and only the constant-bank address, the releases and the dependent pointer are
/// written per launch. Encoding a QMD field by field costs about a microsecond; patching the template a
/// fraction of that.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct QmdKey {
    program_va: u64,
    program_bytes: u64,
    registers: u32,
    block: [u32; 3],
    grid: [u32; 3],
    shared_bytes: u32,
    local_bytes_per_thread: u32,
    barrier_count: u32,
    cbuf0_bytes: u32,
    features: crate::queue::LaunchFeatures,
}

/// Templates kept at most; the cache is emptied when it would grow past this.
const QMD_CACHE_MAX: usize = 4096;

/// The QMD for `p`, from the template for its key (encoded on first use) plus the per-launch fields.
pub(crate) fn qmd_from_template(
    arch: &Arch,
    cache: &mut HashMap<QmdKey, [u32; QMD_WORDS]>,
    p: &QmdParams,
) -> Result<[u32; QMD_WORDS], qmd::QmdError> {
    let key = QmdKey {
        program_va: p.program_va,
        program_bytes: p.program_bytes,
        registers: p.registers,
        block: p.block,
        grid: p.grid,
        shared_bytes: p.shared_bytes,
        local_bytes_per_thread: p.local_bytes_per_thread,
        barrier_count: p.barrier_count,
        cbuf0_bytes: p.cbuf0_bytes,
        features: p.features,
    };
    let mut q = match cache.get(&key) {
        Some(t) => *t,
        None => {
            let t =
                qmd::encode(arch, &QmdParams { cbuf0_va: 0, release0: None, release1: None, dependent: None, ..*p })?;
            if cache.len() >= QMD_CACHE_MAX {
                cache.clear();
            }
            cache.insert(key, t);
            t
        }
    };
    qmd::set_const_bank(arch, &mut q, 0, p.cbuf0_va, p.cbuf0_bytes)?;
    qmd::set_release(arch, &mut q, 0, p.release0)?;
    qmd::set_release(arch, &mut q, 1, p.release1)?;
    qmd::set_dependent(arch, &mut q, p.dependent)?;
    Ok(q)
}

/// `CWD_MEMBAR_TYPE` and `CWD_MEMBAR_TASK_CHASING_ENABLE` of a QMD: the tuned barrier on a chain's inner
/// launches on V04 (where it was measured), the other everywhere else.
pub(crate) fn block_exit_barrier(t: &LaunchTuning, chain: bool, last: bool, version: QmdVersion) -> (u32, bool) {
    if chain && !last && version == QmdVersion::V04_00 {
        (t.cwd_membar, t.membar_task_chasing)
    } else {
        (t.last_cwd_membar, false)
    }
}

/// Whether a submission can be one QMD chain: more than one live launch and each after the first waiting
/// for its predecessor.
pub(crate) fn is_chain(orders: impl IntoIterator<Item = Order>) -> bool {
    let mut rest = orders.into_iter().skip(1).peekable();
    rest.peek().is_some() && rest.all(|o| o == Order::AfterPrevious)
}

/// The latch id libcuda's captured launch arrived at ([`LaunchTuning::arrive_at_latch`]).
const LIBCUDA_LATCH_ID: u32 = 8;

/// Bytes of the prepared-submission pool (video memory, write-combined CPU view). A submission whose
/// QMDs and constant banks do not fit is encoded into the command arena and not kept.
pub(crate) const PREPARED_POOL_BYTES: u64 = 32 << 20;
/// Prepared submissions kept at most; the pool is emptied when it would hold more (or runs out of room).
const PREPARED_MAX: usize = 1024;
/// Prepared submissions kept per hash bucket; the oldest goes first.
const BUCKET_MAX: usize = 4;

/// A submission's QMDs and constant banks as they lie in memory, and what its pushbuffer needs.
#[derive(Clone, Debug, Default)]
pub(crate) struct SubmitPlan {
    /// QMD address of each live launch, in order.
    qmds: Vec<u64>,
    /// Per live launch: an idle release goes in front of its SEND_PCAS.
    barrier_before: Vec<bool>,
    /// The launches are one QMD chain (only the first is sent).
    chain: bool,
    /// Per live launch but the last, of a semaphore chain: the semaphore it releases, which the host
    /// acquires before sending the next (empty otherwise).
    sems: Vec<u64>,
    /// The last launch starts only after every earlier one completed (one launch, a chain of either
    /// kind, or an idle release in front of it): what lets marker 1 skip the wait-for-idle.
    last_follows_all: bool,
    /// Marker 1 is the last QMD's release 2 ([`Marker1::QmdRelease`]), so nothing follows the launches.
    marker1_in_qmd: bool,
    /// The 64-byte lines holding the payload words that carry the sequence (the last QMD's release 0,
    /// marker 0, and every QMD's release 1, its stamp), as written, so a patch rewrites whole lines.
    patches: Vec<Patch>,
    /// The sequence those words hold.
    sequence: u32,
}

/// One 64-byte line of a QMD whose payload words are patched with each new sequence.
#[derive(Clone, Debug)]
struct Patch {
    /// Offset of the line from the region's base.
    offset: u64,
    /// The line as last written.
    words: [u32; LINE_WORDS],
    /// Which of its words are payloads (bit i: word i).
    payloads: u16,
}

impl Patch {
    /// Records that word `word` of the QMD at `qmd_offset` carries the sequence, in `q`.
    fn add(patches: &mut Vec<Patch>, qmd_offset: u64, q: &[u32; QMD_WORDS], word: usize) {
        let line = word / LINE_WORDS * LINE_WORDS;
        let offset = qmd_offset + line as u64 * 4;
        let bit = 1u16 << (word - line);
        match patches.last_mut() {
            Some(p) if p.offset == offset => p.payloads |= bit,
            _ => {
                let mut words = [0; LINE_WORDS];
                words.copy_from_slice(&q[line..line + LINE_WORDS]);
                patches.push(Patch { offset, words, payloads: bit });
            }
        }
    }
}

/// A prepared submission: its key (everything its encoding depends on except the sequence) and plan.
#[derive(Debug)]
struct PreparedSubmit {
    key: Vec<u32>,
    offset: u64,
    plan: SubmitPlan,
}

/// Encoded submissions kept for reuse (see [`LaunchTuning::prepared`]).
pub(crate) struct PreparedPool {
    mem: DriverMem,
    head: u64,
    /// Prepared submissions by key hash; keys that hash alike share a (short) bucket.
    entries: HashMap<u64, Vec<PreparedSubmit>>,
    /// Prepared submissions held.
    count: usize,
    /// Submissions sent from a prepared encoding, and ones encoded afresh.
    hits: u64,
    misses: u64,
}

impl PreparedPool {
    fn new(mem: DriverMem) -> Self {
        PreparedPool { mem, head: 0, entries: HashMap::new(), count: 0, hits: 0, misses: 0 }
    }

    /// `len` bytes, 256-byte aligned, forgetting every prepared submission when the pool is full; `None`
    /// when `len` is larger than the pool. Only called with no work in flight.
    fn reserve(&mut self, len: u64) -> Option<u64> {
        if len > self.mem.bytes {
            return None;
        }
        let mut at = self.head.next_multiple_of(256);
        if at + len > self.mem.bytes || self.count >= PREPARED_MAX {
            self.entries.clear();
            self.count = 0;
            at = 0;
        }
        self.head = at + len;
        Some(at)
    }

    /// Where in its bucket the submission prepared under `key` (hashing to `hash`) is, if it is.
    fn find(&self, hash: u64, key: &[u32]) -> Option<usize> {
        self.entries.get(&hash).and_then(|b| b.iter().position(|e| e.key == key))
    }

    /// The plan of entry `pos` of bucket `hash`, its payload lines rewritten to carry `sequence` first.
    /// Only called with no work in flight.
    fn patched(&mut self, hash: u64, pos: usize, sequence: u32) -> &SubmitPlan {
        let cpu = self.mem.cpu;
        let e = &mut self.entries.get_mut(&hash).expect("found by `find`")[pos];
        if e.plan.sequence != sequence {
            for p in e.plan.patches.iter_mut() {
                for (i, w) in p.words.iter_mut().enumerate() {
                    if p.payloads & (1 << i) != 0 {
                        *w = sequence;
                    }
                }
                // SAFETY: the line lies inside the entry's region of the pool (64-byte aligned: QMDs are
                // 256-byte aligned), whose CPU view is mapped while the device is open; no submission is in
                // flight.
                unsafe { write_words(cpu.add((e.offset + p.offset) as usize), &p.words) };
            }
            e.plan.sequence = sequence;
        }
        &e.plan
    }

    /// Keeps `plan`, encoded at `offset` of the pool, under `key` (hashing to `hash`); the oldest of a
    /// full bucket goes.
    fn insert(&mut self, hash: u64, key: Vec<u32>, offset: u64, plan: SubmitPlan) -> &SubmitPlan {
        let bucket = self.entries.entry(hash).or_default();
        if bucket.len() >= BUCKET_MAX {
            bucket.remove(0);
        } else {
            self.count += 1;
        }
        bucket.push(PreparedSubmit { key, offset, plan });
        &bucket.last().expect("just pushed").plan
    }
}

/// Buffers reused from one submission to the next, so a launch allocates nothing once warm.
#[derive(Debug, Default)]
struct Scratch {
    /// The key of the submission being sent.
    key: Vec<u32>,
    /// The indices of its live (not skipped) launches.
    live: Vec<usize>,
    /// Its pushbuffer.
    push: Push,
    /// A constant bank being built.
    cbuf: Vec<u32>,
}

/// The queue service's state.
pub(crate) struct Queue {
    /// Encoded QMD templates by launch shape (see [`QmdKey`]).
    templates: HashMap<QmdKey, [u32; QMD_WORDS]>,
    /// Submissions already encoded, for reuse.
    prepared: PreparedPool,
    scratch: Scratch,
    /// Code memory was allocated, written or freed since the last instruction-cache invalidation.
    code_dirty: bool,
}

/// A submission on its way: the launches that run, whether they are one QMD chain, and what else their
/// encoding depends on.
pub(crate) struct Work<'a, 's> {
    pub(crate) s: &'a Submission<'s>,
    /// Indices of the launches that are not skipped.
    pub(crate) live: &'a [usize],
    pub(crate) chain: bool,
    /// Every launch after the first waits for its predecessor through a semaphore ([`ChainMode::Semaphore`]).
    pub(crate) sem_chain: bool,
    pub(crate) tuning: LaunchTuning,
    pub(crate) arch: &'static Arch,
    /// Per-thread local memory the SLM store covers, which every QMD carries.
    pub(crate) local_bytes_per_thread: u32,
}

/// Appends everything the encoding of `w` depends on, except the sequence, to `key`.
fn submission_key(w: &Work<'_, '_>, key: &mut Vec<u32>) {
    let (s, t) = (w.s, &w.tuning);
    let u64s = |key: &mut Vec<u32>, v: u64| key.extend_from_slice(&[v as u32, (v >> 32) as u32]);
    key.clear();
    u64s(key, s.markers[0].va);
    u64s(key, s.markers[1].va);
    u64s(key, s.stamps.map_or(u64::MAX, |m| m.va));
    key.extend_from_slice(&[
        w.chain as u32,
        w.sem_chain as u32,
        t.marker1.key(),
        t.marker1_sysmembar as u32,
        t.chain.key(),
        t.pdl_at_last_cta_launch as u32,
        t.pdl_latch_ids,
        t.chain_release_membar as u32,
        w.local_bytes_per_thread,
        t.chain_action.value(),
        t.chain_prefetch as u32,
        t.cwd_membar,
        t.last_cwd_membar,
        t.release_sysmembar as u32,
        t.qmd_invalidate as u32,
        t.membar_task_chasing as u32,
        t.arrive_at_latch as u32,
        s.launches.len() as u32,
    ]);
    for l in s.launches {
        if l.skip {
            key.push(u32::MAX);
            continue;
        }
        u64s(key, l.code_va);
        u64s(key, l.code_bytes);
        let order = match l.order {
            Order::AfterPrevious => 0,
            Order::Independent => 1,
            Order::Unordered => 2,
        };
        key.extend_from_slice(&[
            l.gpr_count,
            l.block[0],
            l.block[1],
            l.block[2],
            l.grid[0],
            l.grid[1],
            l.grid[2],
            l.shared_bytes,
            l.dynamic_shared_bytes,
            l.local_bytes_per_thread,
            l.barrier_count,
            order,
            l.args.len() as u32,
            l.const_banks.len() as u32,
        ]);
        let f = &l.features;
        let scheduling = match f.cluster_scheduling {
            crate::queue::ClusterScheduling::LoadBalancing => 0,
            crate::queue::ClusterScheduling::MultiCast => 1,
        };
        key.extend_from_slice(&f.cluster);
        key.extend_from_slice(&[f.non_portable_cluster as u32, scheduling, f.carveout_kib]);
        key.extend_from_slice(l.args);
        for b in l.const_banks {
            key.push(b.index);
            u64s(key, b.va);
            key.push(b.bytes);
        }
    }
}

/// Key words hashed at most: a 1000-launch list's key is ~18,000 words, and hashing them all cost ~20 us
/// per submission (the multiply chain), ten times building and comparing them.
const KEY_HASH_SAMPLES: usize = 512;

/// A fast 64-bit hash (FxHash's mix) of the key's length and an even sample of its words. Keys that hash
/// alike share a bucket; the words themselves decide equality.
fn key_hash(key: &[u32]) -> u64 {
    let step = (key.len() / KEY_HASH_SAMPLES).max(1);
    let mix = |h: u64, w: u32| (h.rotate_left(5) ^ w as u64).wrapping_mul(0x517c_c1b7_2722_0a95);
    let h = key.iter().step_by(step).fold(key.len() as u64, |h, &w| mix(h, w));
    // The tail too, where a list's last launches differ.
    key[key.len().saturating_sub(16)..].iter().fold(h, |h, &w| mix(h, w))
}

/// Words of constant bank 0 for `args` (what [`qmd::fill_cbuf0`] produces).
fn cbuf_words(arch: &Arch, args: usize) -> u64 {
    ((arch.param_base / 4) as usize + args).next_multiple_of(4) as u64
}

/// Writes a launch's own constant banks and the tuned encoding choices into its QMD, on top of the
/// template (which holds bank 0 and [`qmd::encode`]'s defaults). `chain` and `last`: the launch is one of
/// a QMD chain, and the last launch of the submission.
fn tune_qmd(
    arch: &Arch,
    q: &mut [u32; QMD_WORDS],
    d: &LaunchDesc<'_>,
    t: &LaunchTuning,
    has_dependent: bool,
    chain: bool,
    last: bool,
) -> Result<(), qmd::QmdError> {
    // The template holds bank 0 only; every other bank is this launch's (module data).
    for b in d.const_banks {
        if b.index == 0 {
            return Err(qmd::QmdError::NoSuchCbuf { index: 0 });
        }
        qmd::set_const_bank(arch, q, b.index, b.va, b.bytes)?;
    }
    if has_dependent && !t.chain_prefetch {
        qmd::set_dependent_prefetch(arch, q, false)?;
    }
    let (membar, chasing) = block_exit_barrier(t, chain, last, arch.qmd_version);
    qmd::set_block_exit_barrier(arch, q, membar, chasing)?;
    if t.qmd_invalidate != qmd::LIBCUDA_INVALIDATIONS {
        qmd::set_invalidations(arch, q, t.qmd_invalidate)?;
    }
    if last && t.release_sysmembar {
        qmd::set_release_sysmembar(arch, q, 0)?;
    }
    if arch.qmd_version == QmdVersion::V04_00 && t.arrive_at_latch {
        qmd::set_arrive_at_latch(arch, q, LIBCUDA_LATCH_ID)?;
    }
    Ok(())
}

/// Appends the submission `plan` lays out to `push`: SEND_PCAS for each launch that is sent (only the first
/// of a QMD chain), an idle release to `barrier_va` in front of each that must wait for its predecessor (or,
/// in a semaphore chain, an acquire of the semaphore its predecessor releases), then the markers — marker 0
/// as a host release when nothing launches (else the last QMD releases it; a chain is first waited for),
/// and marker 1 last, unless the last QMD releases it too.
fn push_launches(push: &mut Push, plan: &SubmitPlan, s: &Submission<'_>, t: &LaunchTuning, barrier_va: u64) {
    for (k, &qmd_va) in plan.qmds.iter().enumerate() {
        if k == 0 || !plan.chain {
            if plan.barrier_before[k] {
                push.release_after_idle(barrier_va, k as u32);
            }
            if k > 0 && !plan.sems.is_empty() {
                push.host_semaphore(plan.sems[k - 1], s.sequence as u64, host::SEM_OP_ACQ_CIRC_GEQ);
            }
            push.send_pcas_with(qmd_va, t.pcas_action);
        }
    }
    let quick = matches!(t.marker1, Marker1::QmdRelease | Marker1::HostAfterAcquire);
    if plan.qmds.is_empty() {
        if quick {
            // Nothing runs: the previous submission was seen complete, so there is nothing to wait for.
            push.release(s.markers[0].va, s.sequence);
            push.release(s.markers[1].va, s.sequence);
            return;
        }
        push.release_after_idle(s.markers[0].va, s.sequence);
    } else if plan.marker1_in_qmd {
        return;
    } else if plan.chain || (t.marker1 == Marker1::HostAfterAcquire && plan.last_follows_all) {
        // Hold marker 1 until the last launch has released marker 0.
        push.host_semaphore(s.markers[0].va, s.sequence as u64, host::SEM_OP_ACQ_CIRC_GEQ);
    }
    match t.marker1 {
        Marker1::HostAfterAcquire if plan.last_follows_all && !plan.qmds.is_empty() => {
            push.release(s.markers[1].va, s.sequence)
        }
        Marker1::ComputeReport => push.compute_release_after_idle(s.markers[1].va, s.sequence),
        _ => push.release_after_idle(s.markers[1].va, s.sequence),
    };
}

/// Whether the last of `live` launches starts only after every earlier one completed, for launches in a
/// QMD or semaphore chain (`ordered`) or separated by idle releases.
pub(crate) fn last_follows_all(live: usize, ordered: bool, last_order: Order) -> bool {
    live == 1 || (live > 1 && (ordered || last_order == Order::AfterPrevious))
}

impl Queue {
    /// The service with the prepared-submission pool `pool`; the first submission invalidates the
    /// instruction cache.
    pub(crate) fn new(pool: DriverMem) -> Self {
        Queue {
            templates: HashMap::new(),
            prepared: PreparedPool::new(pool),
            scratch: Scratch::default(),
            code_dirty: true,
        }
    }

    /// Code memory was allocated, written or freed: the next submission invalidates the instruction cache.
    pub(crate) fn code_changed(&mut self) {
        self.code_dirty = true;
    }

    /// Submissions sent from a prepared encoding, and ones encoded afresh.
    pub(crate) fn prepared_stats(&self) -> (u64, u64) {
        (self.prepared.hits, self.prepared.misses)
    }

    /// The pool's memory, for close.
    pub(crate) fn into_pool(self) -> DriverMem {
        self.prepared.mem
    }

    /// Sends `s` on the compute channel: its live launches (their QMDs and constant banks encoded, or
    /// reused from a prepared submission), then the markers.
    pub(crate) fn submit(
        &mut self,
        base: &mut Base,
        channels: &mut Channels,
        arch: &'static Arch,
        gr: &GrInfo,
        s: &Submission<'_>,
        config: &NvidiaConfig,
    ) -> Result<(), HalError> {
        if let Some(n) = channels.compute.error() {
            return Err(HalError::Lost(describe_error(&n)));
        }
        let t = config.tuning;
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.live.clear();
        scratch.live.extend((0..s.launches.len()).filter(|&i| !s.launches[i].skip));
        scratch.push.clear();

        let need = scratch.live.iter().map(|&i| s.launches[i].local_bytes_per_thread).max().unwrap_or(0);
        if need > 0 {
            // The session may count the 0x240 bytes above the stack top or not; cover both.
            channels.ensure_local_memory(base, gr, need + arch.stack_headroom, &mut scratch.push)?;
        }
        let invalidate = t.invalidate_every_submission || self.code_dirty;
        if invalidate {
            scratch.push.invalidate_shader_caches();
        }
        let ordered = config.barrier == Barrier::Auto && is_chain(scratch.live.iter().map(|&i| s.launches[i].order));
        let sem_chain = ordered && t.chain == ChainMode::Semaphore;
        let work = Work {
            s,
            live: &scratch.live,
            chain: ordered && !sem_chain,
            sem_chain,
            tuning: t,
            arch,
            local_bytes_per_thread: channels.local_bytes_per_thread(),
        };
        let plan = self.plan(base, channels, &work, &mut scratch.key, &mut scratch.cbuf)?;
        push_launches(&mut scratch.push, &plan, s, &t, channels.barrier_scratch_va());
        channels.send(base, Target::Compute, &scratch.push)?;
        if invalidate {
            self.code_dirty = false;
        }
        self.scratch = scratch;
        Ok(())
    }

    /// The encoding of `w`: a prepared one with the same key, its sequence patched, or a fresh one, kept
    /// in the pool when it fits and prepared submissions are on, else written to the command arena.
    fn plan<'q>(
        &'q mut self,
        base: &mut Base,
        channels: &mut Channels,
        w: &Work<'_, '_>,
        key: &mut Vec<u32>,
        cbuf: &mut Vec<u32>,
    ) -> Result<Cow<'q, SubmitPlan>, HalError> {
        if w.live.is_empty() {
            return Ok(Cow::Owned(SubmitPlan::default()));
        }
        let mut hash = 0;
        if w.tuning.prepared {
            submission_key(w, key);
            hash = key_hash(key);
            if let Some(pos) = self.prepared.find(hash, key) {
                self.prepared.hits += 1;
                return Ok(Cow::Borrowed(self.prepared.patched(hash, pos, w.s.sequence)));
            }
        }
        self.prepared.misses += 1;
        let qmd_bytes = w.arch.qmd_bytes as u64;
        let mut offsets = Vec::with_capacity(w.live.len());
        let mut total = 0u64;
        for &i in w.live {
            offsets.push(total);
            let cbuf = cbuf_words(w.arch, w.s.launches[i].args.len()) * 4;
            total += slot_bytes(qmd_bytes, cbuf + if w.sem_chain { SEM_LINE_BYTES } else { 0 });
        }
        let pooled = if w.tuning.prepared { self.prepared.reserve(total) } else { None };
        match pooled {
            Some(at) => {
                let va = self.prepared.mem.va + at;
                // SAFETY: `at + total` lies inside the pool (reserve checked it).
                let cpu = unsafe { self.prepared.mem.cpu.add(at as usize) };
                let plan = self.encode_into(w, &offsets, va, cpu, cbuf)?;
                Ok(Cow::Borrowed(self.prepared.insert(hash, key.clone(), at, plan)))
            }
            None => {
                let (va, cpu) = channels.arena_reserve(base, total, 256)?;
                Ok(Cow::Owned(self.encode_into(w, &offsets, va, cpu, cbuf)?))
            }
        }
    }

    /// Encodes the live launches of `w` into the region at `base_va` / `base_cpu`, laid out by `offsets`,
    /// and returns the plan.
    fn encode_into(
        &mut self,
        w: &Work<'_, '_>,
        offsets: &[u64],
        base_va: u64,
        base_cpu: *mut u8,
        cbuf: &mut Vec<u32>,
    ) -> Result<SubmitPlan, HalError> {
        let (s, t, arch) = (w.s, &w.tuning, w.arch);
        let cbuf_off = (arch.qmd_bytes as u64).next_multiple_of(64);
        let payload0 = qmd::release_payload_word(arch, 0).expect("release 0 exists");
        let payload1 = qmd::release_payload_word(arch, 1).expect("release 1 exists");
        let payload2 = qmd::release_payload_word(arch, 2).expect("release 2 exists");
        let encode_error = |i: usize, e: qmd::QmdError| HalError::Unsupported(format!("launch {i}: {e}"));
        let ordered = w.chain || w.sem_chain;
        let last_order = w.live.last().map_or(Order::AfterPrevious, |&i| s.launches[i].order);
        let follows = last_follows_all(w.live.len(), ordered, last_order);
        let mut plan = SubmitPlan {
            chain: w.chain,
            sequence: s.sequence,
            last_follows_all: follows,
            marker1_in_qmd: follows && t.marker1 == Marker1::QmdRelease,
            ..SubmitPlan::default()
        };
        let programmatic = w.chain && t.chain == ChainMode::Programmatic;
        let latch = |k: usize| PDL_LATCH_BASE + (k as u32) % t.pdl_latch_ids.max(1);
        plan.qmds.reserve(w.live.len());
        plan.barrier_before.reserve(w.live.len());
        for (k, &i) in w.live.iter().enumerate() {
            let d: &LaunchDesc<'_> = &s.launches[i];
            let qmd_va = base_va + offsets[k];
            let cbuf_va = qmd_va + cbuf_off;
            let last = k + 1 == w.live.len();
            let p = Cbuf0Params {
                block: d.block,
                grid: d.grid,
                cluster: d.features.cluster,
                shared_window: SHARED_WINDOW,
                local_window: LOCAL_WINDOW,
                dynamic_shared_bytes: d.dynamic_shared_bytes,
                cbuf0_va: cbuf_va,
            };
            qmd::fill_cbuf0(arch, &p, d.args, cbuf);
            // `d.num_elements` is not encoded: neither QMD V04_00 nor V05_00 has a word for it (see
            // `LaunchDesc::num_elements`), and nothing else the kernel reads carries it.
            let params = QmdParams {
                program_va: d.code_va,
                program_bytes: d.code_bytes,
                registers: d.gpr_count,
                block: d.block,
                grid: d.grid,
                shared_bytes: d.shared_bytes,
                local_bytes_per_thread: w.local_bytes_per_thread,
                barrier_count: d.barrier_count,
                cbuf0_va: cbuf_va,
                cbuf0_bytes: cbuf.len() as u32 * 4,
                release0: last.then_some((s.markers[0].va, s.sequence)),
                release1: s.stamps.map(|st| (st.va + 16 * i as u64, s.sequence)),
                dependent: (w.chain && !last).then(|| (base_va + offsets[k + 1], t.chain_action)),
                features: d.features,
            };
            let mut q = qmd_from_template(arch, &mut self.templates, &params).map_err(|e| encode_error(i, e))?;
            tune_qmd(arch, &mut q, d, t, params.dependent.is_some(), ordered, last).map_err(|e| encode_error(i, e))?;
            // Release 2: marker 1 on the last launch, or the semaphore the next launch of a semaphore
            // chain is held behind, in a line of its own after the bank.
            let sem_off = cbuf_off + (cbuf.len() as u64 * 4).next_multiple_of(SEM_LINE_BYTES);
            let release2 = if last && plan.marker1_in_qmd {
                Some((s.markers[1].va, t.marker1_sysmembar))
            } else if w.sem_chain && !last {
                Some((qmd_va + sem_off, t.chain_release_membar))
            } else {
                None
            };
            if let Some((va, membar)) = release2 {
                qmd::set_release(arch, &mut q, 2, Some((va, s.sequence))).map_err(|e| encode_error(i, e))?;
                if membar {
                    qmd::set_release_sysmembar(arch, &mut q, 2).map_err(|e| encode_error(i, e))?;
                }
            }
            if programmatic {
                let arrive = (!last).then(|| latch(k));
                let wait = (k > 0).then(|| latch(k - 1));
                qmd::set_programmatic(arch, &mut q, arrive, t.pdl_at_last_cta_launch, wait)
                    .map_err(|e| encode_error(i, e))?;
            }
            // SAFETY: the slot lies inside the region (offsets were laid out for these launches by the
            // caller, who reserved their sum), 256-byte aligned; the bank's padding to whole lines is
            // inside the slot (`slot_bytes` rounds the bank to 64 bytes).
            unsafe {
                let slot = base_cpu.add(offsets[k] as usize);
                write_words(slot, &q);
                write_lines(slot.add(cbuf_off as usize), cbuf);
            }
            if w.sem_chain && !last {
                // The semaphore starts one behind the sequence, so the acquire of the next launch cannot
                // pass on whatever the line held; a prepared reuse finds the older sequence it released.
                let mut line = [0u32; LINE_WORDS];
                line[0] = s.sequence.wrapping_sub(1);
                // SAFETY: the line lies inside the slot (`plan` sized it with SEM_LINE_BYTES after the
                // bank), 64-byte aligned; nothing is in flight.
                unsafe { write_words(base_cpu.add((offsets[k] + sem_off) as usize), &line) };
                plan.sems.push(qmd_va + sem_off);
            }
            let mut words = [None, None, None];
            if last {
                words[0] = Some(payload0);
            }
            if s.stamps.is_some() {
                words[1] = Some(payload1);
            }
            if release2.is_some() {
                words[2] = Some(payload2);
            }
            words.sort_unstable();
            for word in words.into_iter().flatten() {
                Patch::add(&mut plan.patches, offsets[k], &q, word);
            }
            plan.qmds.push(qmd_va);
            // A semaphore chain's launches wait behind their acquire, not behind an idle release.
            plan.barrier_before.push(!ordered && k > 0 && d.order == Order::AfterPrevious);
        }
        Ok(plan)
    }
}

impl OpenDevice {
    /// [`Queue::submit`] on this device's channels.
    pub(crate) fn submit(&mut self, s: &Submission<'_>, config: &NvidiaConfig) -> Result<(), HalError> {
        let OpenDevice { base, arch, gr, channels, queue, .. } = self;
        queue.submit(base, channels, arch, gr, s, config)
    }
}

/// One of the backend's own buffers as the session's latch report names it.
pub(crate) fn queue_buffer(what: &'static str, m: &DriverMem) -> QueueBuffer {
    QueueBuffer { what, va: m.va, bytes: m.bytes }
}

impl SubmitQueue for Nvidia {
    unsafe fn submit(&self, s: &Submission<'_>) -> Result<(), HalError> {
        let config = self.config();
        let mut st = sync::lock(&self.state);
        let open = st.as_mut().ok_or_else(|| HalError::NoDevice("nvidia: device not open".into()))?;
        open.submit(s, &config)
    }

    /// What the compute channel's work may touch: its ring, the driver's notifier for it, the pushbuffers,
    /// QMDs and constant banks (the arena and the prepared pool), the semaphores and the local memory.
    fn in_flight_buffers(&self) -> Vec<QueueBuffer> {
        let st = sync::lock(&self.state);
        let Some(o) = st.as_ref() else { return Vec::new() };
        let mut v = o.channels.in_flight_buffers();
        v.push(queue_buffer("prepared submissions (QMDs, constant banks)", &o.queue.prepared.mem));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_keep_qmds_256_aligned_and_banks_64_aligned() {
        // A QMD and a 0x210 + 28-byte bank: 384 + 0x240 = 0x3c0 -> 0x400.
        assert_eq!(slot_bytes(384, 0x22c), 0x400);
        assert_eq!(slot_bytes(384, 0x210), 0x400);
        assert_eq!(slot_bytes(384, 64), 512);
        for cb in [16u64, 0x210, 0x22c, 0x1000, 0x8210] {
            let s = slot_bytes(384, cb);
            assert_eq!(s % 256, 0);
            assert!(s >= 384 + cb, "{cb}");
        }
    }

    #[test]
    fn patched_templates_equal_fresh_encodings() {
        use crate::arch::HOPPER;
        let mut cache = std::collections::HashMap::new();
        let base = QmdParams {
            block: [256, 1, 1],
            grid: [4097, 1, 1],
            local_bytes_per_thread: 0x240,
            cbuf0_bytes: 0x230,
            dependent: Some((0x10_0000_0400, DependentAction::Schedule)),
            ..with_payloads(7, 7)
        };
        let variants = [
            base,
            QmdParams { cbuf0_va: 0x10_0000_0580, release0: None, dependent: None, ..base },
            QmdParams { release1: None, release0: Some((0x10_0001_0010, 0xffff_fffe)), ..base },
            QmdParams { grid: [3, 2, 1], ..base },
            QmdParams { grid: [4096, 1, 1], features: crate::queue::LaunchFeatures::cluster([2, 1, 1]), ..base },
            QmdParams { grid: [4096, 1, 1], ..base },
        ];
        for (i, p) in variants.iter().enumerate() {
            let fresh = qmd::encode(&HOPPER, p).unwrap();
            let patched = qmd_from_template(&HOPPER, &mut cache, p).unwrap();
            assert_eq!(patched, fresh, "variant {i}");
        }
        // The first three share a template; the others (another grid, a cluster, the same grid without
        // the cluster) have their own: a cluster is part of the template's key.
        assert_eq!(cache.len(), 4);
        // A template encoded with a dependent must not leak it into a launch without one.
        let again = qmd_from_template(&HOPPER, &mut cache, &variants[1]).unwrap();
        assert_eq!(again, qmd::encode(&HOPPER, &variants[1]).unwrap());
    }

    /// A one-block launch whose two release semaphores carry `payload0` and `payload1`.
    fn with_payloads(payload0: u32, payload1: u32) -> QmdParams {
        QmdParams {
            program_va: 0x10_0004_0000,
            program_bytes: 512,
            registers: 16,
            block: [32, 1, 1],
            grid: [1, 1, 1],
            shared_bytes: 1024,
            local_bytes_per_thread: 0,
            barrier_count: 1,
            cbuf0_va: 0x10_0000_0180,
            cbuf0_bytes: 0x220,
            release0: Some((0x10_0001_0000, payload0)),
            release1: Some((0x10_0001_0040, payload1)),
            dependent: None,
            features: crate::queue::LaunchFeatures::NONE,
        }
    }

    #[test]
    fn payload_words_are_where_the_encoder_puts_the_payloads() {
        use crate::arch::HOPPER;
        let p = QmdParams { local_bytes_per_thread: 0x240, ..with_payloads(0xdead_beef, 0x1234_5678) };
        let q = qmd::encode(&HOPPER, &p).unwrap();
        assert_eq!(q[qmd::release_payload_word(&HOPPER, 0).unwrap()], 0xdead_beef);
        assert_eq!(q[qmd::release_payload_word(&HOPPER, 1).unwrap()], 0x1234_5678);
        assert_eq!(qmd::release_payload_word(&HOPPER, 3), None);
        // Patching that word is the same as encoding with the new payload.
        let mut patched = q;
        patched[qmd::release_payload_word(&HOPPER, 0).unwrap()] = 7;
        patched[qmd::release_payload_word(&HOPPER, 1).unwrap()] = 7;
        let fresh = qmd::encode(
            &HOPPER,
            &QmdParams { release0: Some((0x10_0001_0000, 7)), release1: Some((0x10_0001_0040, 7)), ..p },
        )
        .unwrap();
        assert_eq!(patched, fresh);
    }

    #[test]
    fn one_patch_line_carries_both_payloads_of_a_qmd() {
        use crate::arch::HOPPER;
        let p = with_payloads(5, 5);
        let q = qmd::encode(&HOPPER, &p).unwrap();
        let (w0, w1) = (qmd::release_payload_word(&HOPPER, 0).unwrap(), qmd::release_payload_word(&HOPPER, 1).unwrap());
        let mut patches = Vec::new();
        Patch::add(&mut patches, 0x400, &q, w0);
        Patch::add(&mut patches, 0x400, &q, w1);
        Patch::add(&mut patches, 0x800, &q, w1);
        assert_eq!(patches.len(), 2, "both payloads of one QMD share a line; the next QMD has its own");
        let line = w0 / LINE_WORDS * LINE_WORDS;
        assert_eq!(patches[0].offset, 0x400 + 4 * line as u64);
        assert_eq!(patches[0].words[..], q[line..line + LINE_WORDS]);
        assert_eq!(patches[0].payloads, (1 << (w0 - line)) | (1 << (w1 - line)));
        assert_eq!(patches[1].payloads, 1 << (w1 - line));
        // Patching the shadow line and writing it back is encoding with the new payloads.
        let mut patched = q;
        let mut words = patches[0].words;
        for (i, w) in words.iter_mut().enumerate() {
            if patches[0].payloads & (1 << i) != 0 {
                *w = 9;
            }
        }
        patched[line..line + LINE_WORDS].copy_from_slice(&words);
        let fresh = qmd::encode(
            &HOPPER,
            &QmdParams { release0: Some((0x10_0001_0000, 9)), release1: Some((0x10_0001_0040, 9)), ..p },
        )
        .unwrap();
        assert_eq!(patched, fresh);
    }

    #[test]
    fn sampled_hashes_see_the_tail_and_the_length() {
        let a: Vec<u32> = (0..20_000).collect();
        let mut b = a.clone();
        *b.last_mut().unwrap() += 1;
        assert_ne!(key_hash(&a), key_hash(&b), "the last words are always hashed");
        assert_ne!(key_hash(&a), key_hash(&a[..19_999]));
        assert_eq!(key_hash(&a), key_hash(&a.clone()));
    }

    #[test]
    fn only_a_chains_inner_launches_on_v04_get_the_tuned_block_exit_barrier() {
        use crate::arch::QmdVersion::{V04_00, V05_00};
        let t = LaunchTuning::default();
        assert_eq!((t.cwd_membar, t.membar_task_chasing, t.last_cwd_membar), (3, true, 1));
        assert_eq!(block_exit_barrier(&t, true, false, V04_00), (3, true), "inner launch of a chain");
        assert_eq!(block_exit_barrier(&t, true, true, V04_00), (1, false), "the last keeps L1_SYSMEMBAR");
        assert_eq!(block_exit_barrier(&t, false, false, V04_00), (1, false), "idle releases or independent");
        assert_eq!(block_exit_barrier(&t, true, false, V05_00), (1, false), "not measured on Blackwell");
    }

    #[test]
    fn constant_bank_sizes_match_what_fill_cbuf0_builds() {
        use crate::arch::HOPPER;
        for n in [0usize, 1, 3, 4, 5, 31] {
            let mut out = Vec::new();
            let p = Cbuf0Params {
                block: [1; 3],
                grid: [1; 3],
                cluster: [1; 3],
                shared_window: SHARED_WINDOW,
                local_window: LOCAL_WINDOW,
                dynamic_shared_bytes: 0,
                cbuf0_va: 0x10_0000_0180,
            };
            qmd::fill_cbuf0(&HOPPER, &p, &vec![9; n], &mut out);
            assert_eq!(out.len() as u64, cbuf_words(&HOPPER, n), "{n} arguments");
        }
    }

    #[test]
    fn the_prepared_key_ignores_the_sequence_and_nothing_else() {
        use crate::arch::HOPPER;
        use crate::poll::MarkerSlot;
        let args = [1u32, 2];
        let l = LaunchDesc {
            code_va: 0x10_0004_0000,
            code_bytes: 512,
            gpr_count: 64,
            block: [32, 1, 1],
            grid: [4, 1, 1],
            shared_bytes: 1024,
            dynamic_shared_bytes: 0,
            local_bytes_per_thread: 0,
            barrier_count: 1,
            features: crate::queue::LaunchFeatures::NONE,
            num_elements: 0,
            args: &args,
            const_banks: &[],
            order: Order::AfterPrevious,
            skip: false,
        };
        let m = |va| MarkerSlot { va, cpu: core::ptr::null_mut() };
        let base = [l, l];
        let sub = Submission { launches: &base, markers: [m(0x1000), m(0x1010)], sequence: 5, stamps: None };
        let t = LaunchTuning { marker1: Marker1::HostIdleRelease, ..LaunchTuning::default() };
        let key = |s: &Submission<'_>, t: &LaunchTuning| {
            let mut k = Vec::new();
            let w = Work {
                s,
                live: &[],
                chain: true,
                sem_chain: false,
                tuning: *t,
                arch: &HOPPER,
                local_bytes_per_thread: 0x240,
            };
            submission_key(&w, &mut k);
            k
        };
        let k0 = key(&sub, &t);
        assert_eq!(k0, key(&Submission { sequence: 6, ..sub }, &t), "the sequence is patched, not keyed");
        let other_args = [1u32, 3];
        let changed = [l, LaunchDesc { args: &other_args, ..l }];
        let independent = [l, LaunchDesc { order: Order::Independent, ..l }];
        let skipped = [l, LaunchDesc { skip: true, ..l }];
        let longer = [l, l, l];
        let bank = [crate::queue::ConstBank { index: 4, va: 0x10_0004_0200, bytes: 8 }];
        let moved = [crate::queue::ConstBank { va: 0x10_0004_0240, ..bank[0] }];
        let banked = [l, LaunchDesc { const_banks: &bank, ..l }];
        let rebanked = [l, LaunchDesc { const_banks: &moved, ..l }];
        let clustered = [l, LaunchDesc { features: crate::queue::LaunchFeatures::cluster([2, 1, 1]), ..l }];
        let multicast = [
            l,
            LaunchDesc {
                features: crate::queue::LaunchFeatures {
                    cluster_scheduling: crate::queue::ClusterScheduling::MultiCast,
                    ..clustered[1].features
                },
                ..l
            },
        ];
        let carved =
            [l, LaunchDesc { features: crate::queue::LaunchFeatures { carveout_kib: 228, ..l.features }, ..l }];
        let banked_key = key(&Submission { launches: &banked, ..sub }, &t);
        assert_ne!(key(&Submission { launches: &rebanked, ..sub }, &t), banked_key, "bank address must change the key");
        for (what, s) in [
            ("constant banks", Submission { launches: &banked, ..sub }),
            ("arguments", Submission { launches: &changed, ..sub }),
            ("order", Submission { launches: &independent, ..sub }),
            ("skip", Submission { launches: &skipped, ..sub }),
            ("count", Submission { launches: &longer, ..sub }),
            ("marker 0", Submission { markers: [m(0x2000), m(0x1010)], ..sub }),
            ("marker 1", Submission { markers: [m(0x1000), m(0x2010)], ..sub }),
            ("stamps", Submission { stamps: Some(m(0x3000)), ..sub }),
            ("cluster", Submission { launches: &clustered, ..sub }),
            ("carve-out", Submission { launches: &carved, ..sub }),
        ] {
            assert_ne!(key(&s, &t), k0, "{what} must change the key");
        }
        for other in [
            LaunchTuning { chain_action: DependentAction::Schedule, ..t },
            LaunchTuning { cwd_membar: 1, ..t },
            LaunchTuning { membar_task_chasing: false, ..t },
            LaunchTuning { arrive_at_latch: true, ..t },
            LaunchTuning { marker1: Marker1::QmdRelease, ..t },
            LaunchTuning { marker1: Marker1::HostAfterAcquire, ..t },
            LaunchTuning { marker1_sysmembar: true, ..t },
            LaunchTuning { chain: ChainMode::Programmatic, ..t },
            LaunchTuning { chain: ChainMode::Semaphore, ..t },
            LaunchTuning { pdl_at_last_cta_launch: false, ..t },
            LaunchTuning { pdl_latch_ids: 1, ..t },
            LaunchTuning { chain_release_membar: true, ..t },
        ] {
            assert_ne!(key(&sub, &other), k0, "the tuning must change the key: {other:?}");
        }
        assert_ne!(key_hash(&k0), key_hash(&key(&Submission { launches: &changed, ..sub }, &t)));
        assert_ne!(
            key(&Submission { launches: &multicast, ..sub }, &t),
            key(&Submission { launches: &clustered, ..sub }, &t),
            "the cluster scheduling must change the key"
        );
    }

    #[test]
    fn the_pushbuffer_sends_what_the_plan_says_then_the_markers() {
        use crate::poll::MarkerSlot;
        let m = |va| MarkerSlot { va, cpu: core::ptr::null_mut() };
        let s = Submission { launches: &[], markers: [m(0x1000), m(0x1010)], sequence: 9, stamps: None };
        // The host's idle release of marker 1, which the QMD-release default falls back to where it cannot apply.
        let t = LaunchTuning { marker1: Marker1::HostIdleRelease, ..LaunchTuning::default() };
        let qmds = vec![0x10_0000_0000, 0x10_0000_0400, 0x10_0000_0800];
        let sent = |plan: &SubmitPlan| {
            let mut push = Push::new();
            push_launches(&mut push, plan, &s, &t, 0x2010);
            push
        };
        // A chain: only its first QMD is sent; marker 1 waits until the last QMD released marker 0.
        let chain =
            SubmitPlan { qmds: qmds.clone(), barrier_before: vec![false; 3], chain: true, ..SubmitPlan::default() };
        let mut want = Push::new();
        want.send_pcas_with(qmds[0], t.pcas_action);
        want.host_semaphore(0x1000, 9, host::SEM_OP_ACQ_CIRC_GEQ);
        want.release_after_idle(0x1010, 9);
        assert_eq!(sent(&chain), want);
        // Idle releases: every QMD is sent, with the barrier in front of the ones that wait.
        let idle = SubmitPlan { qmds: qmds.clone(), barrier_before: vec![false, true, false], ..SubmitPlan::default() };
        let mut want = Push::new();
        want.send_pcas_with(qmds[0], t.pcas_action);
        want.release_after_idle(0x2010, 1);
        want.send_pcas_with(qmds[1], t.pcas_action);
        want.send_pcas_with(qmds[2], t.pcas_action);
        want.release_after_idle(0x1010, 9);
        assert_eq!(sent(&idle), want);
        // Nothing to launch: both markers are host releases.
        let mut want = Push::new();
        want.release_after_idle(0x1000, 9);
        want.release_after_idle(0x1010, 9);
        assert_eq!(sent(&SubmitPlan::default()), want);
    }

    #[test]
    fn only_pure_dependency_chains_are_chained() {
        use Order::*;
        assert!(!is_chain([AfterPrevious]), "one launch needs no chain");
        assert!(!is_chain([]), "nor does none");
        assert!(is_chain([AfterPrevious, AfterPrevious, AfterPrevious]));
        assert!(is_chain([Independent, AfterPrevious]), "the first launch's order is moot");
        assert!(!is_chain([AfterPrevious, Independent, AfterPrevious]));
        assert!(!is_chain([AfterPrevious, Unordered]));
    }

    #[test]
    fn marker1_variants_drop_the_wait_for_idle_only_where_the_last_launch_follows_all() {
        use crate::poll::MarkerSlot;
        let m = |va| MarkerSlot { va, cpu: core::ptr::null_mut() };
        let s = Submission { launches: &[], markers: [m(0x1000), m(0x1010)], sequence: 9, stamps: None };
        let qmds = vec![0x10_0000_0000, 0x10_0000_0400, 0x10_0000_0800];
        let sent = |plan: &SubmitPlan, marker1| {
            let mut push = Push::new();
            push_launches(&mut push, plan, &s, &LaunchTuning { marker1, ..LaunchTuning::default() }, 0x2010);
            push
        };
        let pcas = LaunchTuning::default().pcas_action;
        // Marker 1 in the last QMD: a chain is its first SEND_PCAS and nothing else.
        let chain = SubmitPlan {
            qmds: qmds.clone(),
            barrier_before: vec![false; 3],
            chain: true,
            last_follows_all: true,
            marker1_in_qmd: true,
            ..SubmitPlan::default()
        };
        let mut want = Push::new();
        want.send_pcas_with(qmds[0], pcas);
        assert_eq!(sent(&chain, Marker1::QmdRelease), want);
        // The acquire variant: one launch, then marker 0 acquired and marker 1 released without the WFI.
        let one = SubmitPlan {
            qmds: qmds[..1].to_vec(),
            barrier_before: vec![false],
            last_follows_all: true,
            ..SubmitPlan::default()
        };
        let mut want = Push::new();
        want.send_pcas_with(qmds[0], pcas);
        want.host_semaphore(0x1000, 9, host::SEM_OP_ACQ_CIRC_GEQ);
        want.release(0x1010, 9);
        assert_eq!(sent(&one, Marker1::HostAfterAcquire), want);
        // Independent launches: the last does not follow the others, so both variants keep the idle release.
        let loose = SubmitPlan { qmds: qmds.clone(), barrier_before: vec![false; 3], ..SubmitPlan::default() };
        let mut want = Push::new();
        for &q in &qmds {
            want.send_pcas_with(q, pcas);
        }
        want.release_after_idle(0x1010, 9);
        assert_eq!(sent(&loose, Marker1::HostAfterAcquire), want);
        assert_eq!(sent(&loose, Marker1::QmdRelease), want);
        // Nothing to launch: two releases, neither waiting for an idle engine.
        let mut want = Push::new();
        want.release(0x1000, 9);
        want.release(0x1010, 9);
        assert_eq!(sent(&SubmitPlan::default(), Marker1::QmdRelease), want);
        assert_eq!(sent(&SubmitPlan::default(), Marker1::HostAfterAcquire), want);
        // A semaphore chain: each launch after the first is sent behind an acquire of its predecessor's
        // semaphore, carrying the sequence.
        let sems = vec![0x10_0000_0300, 0x10_0000_0700];
        let sem = SubmitPlan {
            qmds: qmds.clone(),
            barrier_before: vec![false; 3],
            sems: sems.clone(),
            last_follows_all: true,
            ..SubmitPlan::default()
        };
        let mut want = Push::new();
        want.send_pcas_with(qmds[0], pcas);
        want.host_semaphore(sems[0], 9, host::SEM_OP_ACQ_CIRC_GEQ);
        want.send_pcas_with(qmds[1], pcas);
        want.host_semaphore(sems[1], 9, host::SEM_OP_ACQ_CIRC_GEQ);
        want.send_pcas_with(qmds[2], pcas);
        want.release_after_idle(0x1010, 9);
        assert_eq!(sent(&sem, Marker1::HostIdleRelease), want);
    }

    #[test]
    fn the_last_launch_follows_all_only_when_nothing_can_still_run_beside_it() {
        assert!(last_follows_all(1, false, Order::Independent), "a single launch");
        assert!(last_follows_all(3, true, Order::AfterPrevious), "a chain");
        assert!(last_follows_all(3, false, Order::AfterPrevious), "an idle release in front of the last");
        assert!(!last_follows_all(3, false, Order::Independent));
        assert!(!last_follows_all(3, false, Order::Unordered));
        assert!(!last_follows_all(0, true, Order::AfterPrevious), "nothing launched");
    }

    /// Encodes `n` chained launches of one shape under `t` into host memory standing in for the pool, and
    /// returns the plan with every QMD and the line after each bank.
    fn encode_chain(t: LaunchTuning, n: usize, sem_chain: bool) -> (SubmitPlan, Vec<[u32; QMD_WORDS]>, Vec<u32>) {
        use super::super::memory::DriverMemKind;
        use crate::arch::HOPPER;
        use crate::poll::MarkerSlot;
        let args = [1u32, 2, 3];
        let l = LaunchDesc {
            code_va: 0x10_0004_0000,
            code_bytes: 512,
            gpr_count: 32,
            block: [32, 1, 1],
            grid: [4, 1, 1],
            shared_bytes: 1024,
            dynamic_shared_bytes: 0,
            local_bytes_per_thread: 0,
            barrier_count: 1,
            features: crate::queue::LaunchFeatures::NONE,
            num_elements: 0,
            args: &args,
            const_banks: &[],
            order: Order::AfterPrevious,
            skip: false,
        };
        let launches = vec![l; n];
        let m = |va| MarkerSlot { va, cpu: core::ptr::null_mut() };
        let s = Submission {
            launches: &launches,
            markers: [m(0x20_0000_0000), m(0x20_0000_0010)],
            sequence: 0x77,
            stamps: Some(m(0x20_0001_0000)),
        };
        let live: Vec<usize> = (0..n).collect();
        let w = Work {
            s: &s,
            live: &live,
            chain: !sem_chain,
            sem_chain,
            tuning: t,
            arch: &HOPPER,
            local_bytes_per_thread: 0,
        };
        let cbuf = cbuf_words(&HOPPER, args.len()) * 4;
        let slot = slot_bytes(HOPPER.qmd_bytes as u64, cbuf + if sem_chain { SEM_LINE_BYTES } else { 0 });
        let offsets: Vec<u64> = (0..n as u64).map(|k| k * slot).collect();
        let mut backing = vec![0xa5u8; (slot * n as u64) as usize];
        let base_va = 0x10_0000_0000;
        let pool = DriverMem {
            handle: 1,
            kind: DriverMemKind::Vid,
            va: base_va,
            bytes: 0,
            cpu: core::ptr::null_mut(),
            low_va: true,
        };
        let mut queue = Queue::new(pool);
        let plan = queue.encode_into(&w, &offsets, base_va, backing.as_mut_ptr(), &mut Vec::new()).unwrap();
        let words: Vec<u32> = backing.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
        let qmds =
            offsets.iter().map(|&o| words[o as usize / 4..o as usize / 4 + QMD_WORDS].try_into().unwrap()).collect();
        (plan, qmds, words)
    }

    #[test]
    fn marker1_in_the_qmd_is_release_2_of_the_last_launch_with_its_payload_patched() {
        use crate::nvidia::qmd::get_bits;
        let t = LaunchTuning { marker1: Marker1::QmdRelease, marker1_sysmembar: true, ..LaunchTuning::default() };
        let (plan, q, _) = encode_chain(t, 3, false);
        assert!(plan.marker1_in_qmd && plan.last_follows_all && plan.chain);
        let last = &q[2];
        // RELEASE_ENABLE(2) 352, RELEASE_MEMBAR_TYPE(2) 355, semaphore 2 at 896 (clcbc0qmd.h).
        assert_eq!(get_bits(last, 352, 352), Some(1));
        assert_eq!(get_bits(last, 355, 355), Some(1), "FE_SYSMEMBAR asked for");
        assert_eq!(get_bits(last, 952, 896), Some(0x20_0000_0010), "marker 1's address");
        assert_eq!(get_bits(last, 991, 960), Some(0x77), "the sequence");
        for inner in &q[..2] {
            assert_eq!(get_bits(inner, 352, 352), Some(0), "no release 2 on inner launches");
        }
        // The last QMD's one patch line carries all three payloads (marker 0, stamp, marker 1).
        let p = plan.patches.last().unwrap();
        assert_eq!(p.payloads.count_ones(), 3);
        assert!(p.words.iter().filter(|&&w| w == 0x77).count() >= 3);
        // With the host's idle release instead, release 2 stays off.
        let host = LaunchTuning { marker1: Marker1::HostIdleRelease, ..LaunchTuning::default() };
        let (plan, q, _) = encode_chain(host, 3, false);
        assert!(!plan.marker1_in_qmd);
        assert_eq!(get_bits(&q[2], 352, 352), Some(0));
    }

    #[test]
    fn a_programmatic_chain_links_each_producer_to_its_consumer_by_latch() {
        use crate::nvidia::qmd::get_bits;
        let t = LaunchTuning { chain: ChainMode::Programmatic, pdl_latch_ids: 2, ..LaunchTuning::default() };
        let (plan, q, _) = encode_chain(t, 4, false);
        assert!(plan.chain && plan.sems.is_empty());
        for (k, qmd) in q.iter().enumerate() {
            let arrive = (get_bits(qmd, 28, 28), get_bits(qmd, 1503, 1472), get_bits(qmd, 1151, 1151));
            let wait = (get_bits(qmd, 29, 29), get_bits(qmd, 1535, 1504));
            if k < 3 {
                let id = u64::from(PDL_LATCH_BASE) + k as u64 % 2;
                assert_eq!(arrive, (Some(1), Some(id), Some(1)), "producer {k}");
                assert_eq!(get_bits(qmd, 1150, 1150), Some(1), "pre-exit at the last CTA's dispatch");
                assert_eq!(get_bits(qmd, 368, 368), Some(1), "still the dependent-QMD chain");
            } else {
                assert_eq!(arrive, (Some(0), Some(0), Some(0)), "the last has no consumer");
            }
            if k > 0 {
                let id = u64::from(PDL_LATCH_BASE) + (k as u64 - 1) % 2;
                assert_eq!(wait, (Some(1), Some(id)), "consumer {k} waits on its producer's latch");
            } else {
                assert_eq!(wait, (Some(0), Some(0)), "the first waits on nothing");
            }
        }
        // The default chain carries none of it.
        let (_, q, _) = encode_chain(LaunchTuning::default(), 4, false);
        assert!(q.iter().all(|qmd| get_bits(qmd, 29, 28) == Some(0) && get_bits(qmd, 1151, 1150) == Some(0)));
    }

    #[test]
    fn a_semaphore_chain_releases_a_fresh_semaphore_per_inner_launch() {
        use crate::nvidia::qmd::get_bits;
        let t = LaunchTuning {
            chain: ChainMode::Semaphore,
            chain_release_membar: true,
            cwd_membar: 0,
            marker1: Marker1::HostIdleRelease,
            ..LaunchTuning::default()
        };
        let (plan, q, words) = encode_chain(t, 3, true);
        assert!(!plan.chain, "every launch is sent");
        assert_eq!(plan.barrier_before, [false; 3], "held by the acquires, not by idle releases");
        assert_eq!(plan.sems.len(), 2);
        for (k, qmd) in q.iter().enumerate() {
            assert_eq!(get_bits(qmd, 368, 368), Some(0), "no dependent pointer");
            if k < 2 {
                assert_eq!(get_bits(qmd, 952, 896), Some(plan.sems[k]), "release 2 is its semaphore");
                assert_eq!(get_bits(qmd, 991, 960), Some(0x77));
                assert_eq!(get_bits(qmd, 355, 355), Some(1), "FE_SYSMEMBAR in front of it");
                assert_eq!(get_bits(qmd, 1137, 1136), Some(0), "the tuned block-exit barrier of an inner launch");
                // The semaphore starts one behind the sequence, inside this launch's slot.
                let at = ((plan.sems[k] - 0x10_0000_0000) / 4) as usize;
                assert_eq!(words[at], 0x76);
                assert!(plan.sems[k] > plan.qmds[k] && (k == 1 || plan.sems[k] < plan.qmds[k + 1]));
                assert_eq!(plan.sems[k] % 64, 0);
            } else {
                assert_eq!(get_bits(qmd, 352, 352), Some(0), "the last releases no semaphore");
                assert_eq!(get_bits(qmd, 1137, 1136), Some(1), "the last keeps L1_SYSMEMBAR");
            }
        }
        // Each inner QMD's patch covers its semaphore payload, so a prepared reuse releases the new sequence.
        assert!(plan.patches.iter().take(2).all(|p| p.payloads.count_ones() == 2), "stamp and semaphore");
    }
}
