//! Submission: each launch becomes a QMD V04 and a constant bank 0 in video memory (written through BAR1),
//! handed to the compute engine with SEND_PCAS; the two completion markers follow.
//!
//! **Prepared submissions.** The QMDs and constant banks of a submission are kept (in a pool of their own)
//! under a key of everything they depend on except the sequence. A later submission with the same key
//! (a command list submitted again, a launch repeated) patches only the sequence payloads, one 64-byte line
//! per QMD, and sends a fresh pushbuffer: the encoding is done once and replayed, as a CUDA graph is.
//!
//! - Marker 0: release semaphore 0 of the last launch's QMD (payload = sequence, four words with the
//!   completion timestamp).
//! - Marker 1: a host semaphore release with wait-for-idle, 64-bit payload and timestamp, after
//!   everything else.
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
//! - **Idle release** (any other mix, or [`Barrier::IdleRelease`]): before each launch that must wait, a
//!   host semaphore release with wait-for-idle to a scratch word; the PBDMA processes nothing after it
//!   until the engine is idle. Independent launches are consecutive SEND_PCAS pairs and may overlap.

use std::collections::HashMap;

use super::channel::{line_bytes, write_lines, write_words, LINE_WORDS, SEM_BARRIER};
use super::device::{LOCAL_WINDOW, SHARED_WINDOW};
use super::memory::Mem;
use super::push::{host, Push};
use super::qmd::{self, Cbuf0Params, DependentAction, QmdParams, QMD_WORDS};
use super::{Nvidia, NvidiaConfig, Open};
use crate::error::HalError;
use crate::queue::{LaunchDesc, Order, Submission, SubmitQueue};
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
    /// carried it (V04 only). Off by default (probe only; no `WAIT_ON_LATCH` is ever set).
    pub arrive_at_latch: bool,
}

/// How marker 1 ("the engine has gone idle") is released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker1 {
    /// A host semaphore release with wait-for-idle (what the PBDMA does once the engine is idle).
    HostIdleRelease,
    /// The compute engine's own WAIT_FOR_IDLE, then its report-semaphore release (flushed).
    ComputeReport,
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
            marker1: Marker1::HostIdleRelease,
            qmd_invalidate: QMD_INVALIDATE_LIBCUDA,
            membar_task_chasing: true,
            arrive_at_latch: false,
        }
    }
}

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
}

/// Templates kept at most; the cache is emptied when it would grow past this.
const QMD_CACHE_MAX: usize = 4096;

/// The QMD for `p`, from the template for its key (encoded on first use) plus the per-launch fields.
pub(crate) fn qmd_from_template(
    arch: &crate::arch::Arch,
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
pub(crate) fn block_exit_barrier(
    t: &LaunchTuning,
    chain: bool,
    last: bool,
    version: crate::arch::QmdVersion,
) -> (u32, bool) {
    if chain && !last && version == crate::arch::QmdVersion::V04_00 {
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

/// The cache invalidations `qmd::encode` writes (libcuda's).
const QMD_INVALIDATE_LIBCUDA: u8 = 0x2f;

/// `RELEASE_MEMBAR_TYPE(0)` of QMD V04 (1 = FE_SYSMEMBAR; READ OGD `clcbc0qmd.h`, bit 323).
const RELEASE0_MEMBAR_TYPE_BIT: u32 = 323;
/// `CWD_MEMBAR_TASK_CHASING_ENABLE` of QMD V04 (READ OGD `clcbc0qmd.h`, bit 382).
const V04_MEMBAR_TASK_CHASING_BIT: u32 = 382;
/// `ARRIVE_AT_LATCH_VALID` of QMD V04 (READ OGD `clcbc0qmd.h`, bit 28) and `ARRIVE_AT_LATCH_ID` (1503:1472).
const V04_ARRIVE_AT_LATCH_VALID_BIT: u32 = 28;
const V04_ARRIVE_AT_LATCH_ID: (u32, u32) = (1503, 1472);
/// The latch id libcuda's captured launch arrived at.
const LIBCUDA_LATCH_ID: u64 = 8;

/// Bytes of the prepared-submission pool (video memory, write-combined CPU view). A submission whose
/// QMDs and constant banks do not fit is encoded into the command arena and not kept.
pub(crate) const PREPARED_POOL_BYTES: u64 = 32 << 20;
/// Prepared submissions kept at most; the pool is emptied when it would hold more (or runs out of room).
const PREPARED_MAX: usize = 1024;
/// Prepared submissions kept per hash bucket; the oldest goes first.
const BUCKET_MAX: usize = 4;

/// A submission's QMDs and constant banks as they lie in memory, and what its pushbuffer needs.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// QMD address of each live launch, in order.
    qmds: Vec<u64>,
    /// Per live launch: an idle release goes in front of its SEND_PCAS.
    barrier_before: Vec<bool>,
    /// The launches are one QMD chain (only the first is sent).
    chain: bool,
    /// The 64-byte lines holding the payload words that carry the sequence (the last QMD's release 0,
    /// marker 0, and every QMD's release 1, its stamp), as written, so a patch rewrites whole lines.
    patches: Vec<Patch>,
    /// The sequence those words hold.
    sequence: u32,
}

/// One 64-byte line of a QMD whose payload words are patched with each new sequence.
#[derive(Debug)]
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
struct Prepared {
    key: Vec<u32>,
    offset: u64,
    plan: Plan,
}

/// Encoded submissions kept for reuse (see [`LaunchTuning::prepared`]).
pub(crate) struct PreparedPool {
    pub(crate) mem: Mem,
    head: u64,
    /// Prepared submissions by key hash; keys that hash alike share a (short) bucket.
    entries: HashMap<u64, Vec<Prepared>>,
    /// Prepared submissions held.
    count: usize,
    /// Scratch: the key of the submission being sent, and a constant bank being built.
    key: Vec<u32>,
    cbuf: Vec<u32>,
    /// Scratch: the live launches' indices and the pushbuffer of the submission being sent.
    live: Vec<usize>,
    push: Push,
    /// Submissions sent from a prepared encoding, and ones encoded afresh.
    pub(crate) hits: u64,
    pub(crate) misses: u64,
}

impl PreparedPool {
    pub(crate) fn new(mem: Mem) -> Self {
        PreparedPool {
            mem,
            head: 0,
            entries: HashMap::new(),
            count: 0,
            key: Vec::new(),
            cbuf: Vec::new(),
            live: Vec::new(),
            push: Push::new(),
            hits: 0,
            misses: 0,
        }
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
}

/// Appends everything the encoding of `s` depends on, except the sequence, to `key`.
fn submission_key(s: &Submission<'_>, chain: bool, slm_per_thread: u32, t: &LaunchTuning, key: &mut Vec<u32>) {
    let u64s = |key: &mut Vec<u32>, v: u64| key.extend_from_slice(&[v as u32, (v >> 32) as u32]);
    key.clear();
    u64s(key, s.markers[0].va);
    u64s(key, s.stamps.map_or(u64::MAX, |m| m.va));
    key.extend_from_slice(&[
        chain as u32,
        slm_per_thread,
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
fn cbuf_words(arch: &crate::arch::Arch, args: usize) -> u64 {
    ((arch.param_base / 4) as usize + args).next_multiple_of(4) as u64
}

impl Open {
    fn encode_error(i: usize, e: qmd::QmdError) -> HalError {
        HalError::Unsupported(format!("launch {i}: {e}"))
    }

    /// Encodes the live launches of `s` (indices `live`) into the region at `base_va` / `base_cpu`, laid
    /// out by `offsets`, and returns the plan.
    #[allow(clippy::too_many_arguments)] // Private; one caller.
    fn encode_into(
        &mut self,
        s: &Submission<'_>,
        live: &[usize],
        offsets: &[u64],
        chain: bool,
        t: &LaunchTuning,
        base_va: u64,
        base_cpu: *mut u8,
    ) -> Result<Plan, HalError> {
        let arch = self.arch;
        let cbuf_off = (arch.qmd_bytes as u64).next_multiple_of(64);
        let l = qmd::layout(arch.qmd_version);
        let payload0 = qmd::release_payload_word(arch, 0).expect("release 0 exists");
        let payload1 = qmd::release_payload_word(arch, 1).expect("release 1 exists");
        let mut plan = Plan { chain, sequence: s.sequence, ..Plan::default() };
        plan.qmds.reserve(live.len());
        plan.barrier_before.reserve(live.len());
        let mut cbuf = std::mem::take(&mut self.prepared.cbuf);
        for (k, &i) in live.iter().enumerate() {
            let d: &LaunchDesc<'_> = &s.launches[i];
            let qmd_va = base_va + offsets[k];
            let cbuf_va = qmd_va + cbuf_off;
            let last = k + 1 == live.len();
            let p = Cbuf0Params {
                block: d.block,
                grid: d.grid,
                shared_window: SHARED_WINDOW,
                local_window: LOCAL_WINDOW,
                dynamic_shared_bytes: d.dynamic_shared_bytes,
            };
            qmd::fill_cbuf0(arch, &p, d.args, &mut cbuf);
            // `d.num_elements` is not encoded: neither QMD V04_00 nor V05_00 has a word for it (see
            // `LaunchDesc::num_elements`), and nothing else the kernel reads carries it.
            let params = QmdParams {
                program_va: d.code_va,
                program_bytes: d.code_bytes,
                registers: d.gpr_count,
                block: d.block,
                grid: d.grid,
                shared_bytes: d.shared_bytes,
                local_bytes_per_thread: self.slm_per_thread,
                barrier_count: d.barrier_count,
                cbuf0_va: cbuf_va,
                cbuf0_bytes: cbuf.len() as u32 * 4,
                release0: last.then_some((s.markers[0].va, s.sequence)),
                release1: s.stamps.map(|st| (st.va + 16 * i as u64, s.sequence)),
                dependent: (chain && !last).then(|| (base_va + offsets[k + 1], t.chain_action)),
            };
            let mut q = match qmd_from_template(arch, &mut self.qmd_cache, &params) {
                Ok(q) => q,
                Err(e) => {
                    self.prepared.cbuf = cbuf;
                    return Err(Self::encode_error(i, e));
                }
            };
            let (membar, chasing) = block_exit_barrier(t, chain, last, arch.qmd_version);
            let tuned = (|| {
                // The template holds bank 0 only; every other bank is this launch's (module data).
                for b in d.const_banks {
                    if b.index == 0 {
                        return Err(qmd::QmdError::NoSuchCbuf { index: 0 });
                    }
                    qmd::set_const_bank(arch, &mut q, b.index, b.va, b.bytes)?;
                }
                if params.dependent.is_some() && !t.chain_prefetch {
                    qmd::set_field(&mut q, l.dependent_prefetch, 0)?;
                }
                if membar != 1 {
                    qmd::set_field(&mut q, l.cwd_membar_type, u64::from(membar))?;
                }
                if t.qmd_invalidate != QMD_INVALIDATE_LIBCUDA {
                    for bit in 0..6 {
                        let on = (t.qmd_invalidate >> bit) & 1;
                        qmd::set_field(&mut q, l.invalidate_caches.nth(bit, 1), u64::from(on))?;
                    }
                }
                if last && t.release_sysmembar {
                    qmd::set_bits(&mut q, RELEASE0_MEMBAR_TYPE_BIT, RELEASE0_MEMBAR_TYPE_BIT, 1)?;
                }
                if chasing {
                    qmd::set_bits(&mut q, V04_MEMBAR_TASK_CHASING_BIT, V04_MEMBAR_TASK_CHASING_BIT, 1)?;
                }
                if arch.qmd_version == crate::arch::QmdVersion::V04_00 && t.arrive_at_latch {
                    qmd::set_bits(&mut q, V04_ARRIVE_AT_LATCH_VALID_BIT, V04_ARRIVE_AT_LATCH_VALID_BIT, 1)?;
                    let (hi, lo) = V04_ARRIVE_AT_LATCH_ID;
                    qmd::set_bits(&mut q, hi, lo, LIBCUDA_LATCH_ID)?;
                }
                Ok(())
            })();
            if let Err(e) = tuned {
                self.prepared.cbuf = cbuf;
                return Err(Self::encode_error(i, e));
            }
            // SAFETY: the slot lies inside the region (offsets were laid out for these launches by the
            // caller, who reserved their sum), 256-byte aligned; the bank's padding to whole lines is
            // inside the slot (`slot_bytes` rounds the bank to 64 bytes).
            unsafe {
                let slot = base_cpu.add(offsets[k] as usize);
                write_words(slot, &q);
                write_lines(slot.add(cbuf_off as usize), &cbuf);
            }
            let mut words = [None, None];
            if last {
                words[0] = Some(payload0);
            }
            if s.stamps.is_some() {
                words[1] = Some(payload1);
            }
            words.sort_unstable();
            for w in words.into_iter().flatten() {
                Patch::add(&mut plan.patches, offsets[k], &q, w);
            }
            plan.qmds.push(qmd_va);
            plan.barrier_before.push(!chain && k > 0 && d.order == Order::AfterPrevious);
        }
        self.prepared.cbuf = cbuf;
        Ok(plan)
    }

    pub(crate) fn submit(&mut self, s: &Submission<'_>, config: &NvidiaConfig) -> Result<(), HalError> {
        if let Some(n) = self.channel.error() {
            return Err(HalError::Lost(super::channel::describe_error(&n)));
        }
        let t = config.tuning;
        let arch = self.arch;
        // Both reused across submissions (a launch allocates nothing once warm).
        let mut live = std::mem::take(&mut self.prepared.live);
        live.clear();
        live.extend((0..s.launches.len()).filter(|&i| !s.launches[i].skip));
        let mut push = std::mem::take(&mut self.prepared.push);
        push.clear();

        let need = live.iter().map(|&i| s.launches[i].local_bytes_per_thread).max().unwrap_or(0);
        if need > 0 {
            // The session may count the 0x240 bytes above the stack top or not; cover both.
            self.ensure_slm(need + arch.stack_headroom, &mut push)?;
        }
        let invalidate = t.invalidate_every_submission || self.code_dirty;
        if invalidate {
            push.invalidate_shader_caches();
        }
        let chain = config.barrier == Barrier::Auto && is_chain(live.iter().map(|&i| s.launches[i].order));

        // A submission identical to a prepared one reuses its encoding; only the sequence changes.
        let mut key = std::mem::take(&mut self.prepared.key);
        let mut hash = 0;
        let mut reused = None;
        if t.prepared && !live.is_empty() {
            submission_key(s, chain, self.slm_per_thread, &t, &mut key);
            hash = key_hash(&key);
            let found = self.prepared.entries.get_mut(&hash).and_then(|b| b.iter_mut().position(|e| e.key == key));
            if let Some(pos) = found {
                let e = &mut self.prepared.entries.get_mut(&hash).expect("found above")[pos];
                if e.plan.sequence != s.sequence {
                    for p in e.plan.patches.iter_mut() {
                        for (i, w) in p.words.iter_mut().enumerate() {
                            if p.payloads & (1 << i) != 0 {
                                *w = s.sequence;
                            }
                        }
                        // SAFETY: the line lies inside the entry's region of the pool (64-byte aligned: QMDs
                        // are 256-byte aligned), whose CPU view is mapped while the device is open; no
                        // submission is in flight.
                        unsafe { write_words(self.prepared.mem.cpu.add((e.offset + p.offset) as usize), &p.words) };
                    }
                    e.plan.sequence = s.sequence;
                }
                reused = Some((hash, pos));
            }
        }
        let fresh;
        let plan: &Plan = match reused {
            Some((h, pos)) => {
                self.prepared.hits += 1;
                &self.prepared.entries[&h][pos].plan
            }
            None if live.is_empty() => {
                fresh = Plan::default();
                &fresh
            }
            None => {
                self.prepared.misses += 1;
                let qmd_bytes = arch.qmd_bytes as u64;
                let mut offsets = Vec::with_capacity(live.len());
                let mut total = 0u64;
                for &i in &live {
                    offsets.push(total);
                    total += slot_bytes(qmd_bytes, cbuf_words(arch, s.launches[i].args.len()) * 4);
                }
                let pooled = if t.prepared { self.prepared.reserve(total) } else { None };
                match pooled {
                    Some(at) => {
                        let (va, cpu) = (self.prepared.mem.va + at, self.prepared.mem.cpu);
                        // SAFETY: `at + total` lies inside the pool (reserve checked it).
                        let cpu = unsafe { cpu.add(at as usize) };
                        let plan = self.encode_into(s, &live, &offsets, chain, &t, va, cpu)?;
                        let entry = Prepared { key: key.clone(), offset: at, plan };
                        let bucket = self.prepared.entries.entry(hash).or_default();
                        if bucket.len() >= BUCKET_MAX {
                            bucket.remove(0);
                        } else {
                            self.prepared.count += 1;
                        }
                        bucket.push(entry);
                        &bucket.last().expect("just pushed").plan
                    }
                    None => {
                        let (va, cpu) = self.arena_reserve(total, 256)?;
                        fresh = self.encode_into(s, &live, &offsets, chain, &t, va, cpu)?;
                        &fresh
                    }
                }
            }
        };

        let barrier_va = self.sems.va + SEM_BARRIER;
        for (k, &qmd_va) in plan.qmds.iter().enumerate() {
            if k == 0 || !plan.chain {
                if plan.barrier_before[k] {
                    push.release_after_idle(barrier_va, k as u32);
                }
                push.send_pcas_with(qmd_va, t.pcas_action);
            }
        }
        if plan.qmds.is_empty() {
            push.release_after_idle(s.markers[0].va, s.sequence);
        } else if plan.chain {
            // Hold the idle release until the chain's last launch has released marker 0.
            push.host_semaphore(s.markers[0].va, s.sequence as u64, host::SEM_OP_ACQ_CIRC_GEQ);
        }
        match t.marker1 {
            Marker1::HostIdleRelease => push.release_after_idle(s.markers[1].va, s.sequence),
            Marker1::ComputeReport => push.compute_release_after_idle(s.markers[1].va, s.sequence),
        };
        self.prepared.key = key;
        let (va, cpu) = self.arena_reserve(line_bytes(push.bytes()), 256)?;
        // SAFETY: the reservation is `push.bytes()` rounded to lines long and 256-byte aligned.
        unsafe { write_lines(cpu, push.words()) };
        // SAFETY: the doorbell is this device's; the commands are written (the kick's store fence orders
        // them, the patched payloads included, before the GPFIFO entry); the session's contract keeps one
        // submission in flight.
        unsafe { self.channel.kick(self.usermode, va, push.words().len() as u32) };
        if invalidate {
            self.code_dirty = false;
        }
        self.submissions += 1;
        self.prepared.live = live;
        self.prepared.push = push;
        Ok(())
    }
}

impl SubmitQueue for Nvidia {
    unsafe fn submit(&self, s: &Submission<'_>) -> Result<(), HalError> {
        let config = self.config();
        let mut st = sync::lock(&self.state);
        let open = st.as_mut().ok_or_else(|| HalError::NoDevice("nvidia: device not open".into()))?;
        open.submit(s, &config)
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
        ];
        for (i, p) in variants.iter().enumerate() {
            let fresh = qmd::encode(&HOPPER, p).unwrap();
            let patched = qmd_from_template(&HOPPER, &mut cache, p).unwrap();
            assert_eq!(patched, fresh, "variant {i}");
        }
        // The first three share a template; the fourth (another grid) has its own.
        assert_eq!(cache.len(), 2);
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
                shared_window: SHARED_WINDOW,
                local_window: LOCAL_WINDOW,
                dynamic_shared_bytes: 0,
            };
            qmd::fill_cbuf0(&HOPPER, &p, &vec![9; n], &mut out);
            assert_eq!(out.len() as u64, cbuf_words(&HOPPER, n), "{n} arguments");
        }
    }

    #[test]
    fn the_prepared_key_ignores_the_sequence_and_nothing_else() {
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
            num_elements: 0,
            args: &args,
            const_banks: &[],
            order: Order::AfterPrevious,
            skip: false,
        };
        let m = |va| MarkerSlot { va, cpu: core::ptr::null_mut() };
        let base = [l, l];
        let sub = Submission { launches: &base, markers: [m(0x1000), m(0x1010)], sequence: 5, stamps: None };
        let t = LaunchTuning::default();
        let key = |s: &Submission<'_>, t: &LaunchTuning| {
            let mut k = Vec::new();
            submission_key(s, true, 0x240, t, &mut k);
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
        let banked_key = key(&Submission { launches: &banked, ..sub }, &t);
        assert_ne!(key(&Submission { launches: &rebanked, ..sub }, &t), banked_key, "bank address must change the key");
        for (what, s) in [
            ("constant banks", Submission { launches: &banked, ..sub }),
            ("arguments", Submission { launches: &changed, ..sub }),
            ("order", Submission { launches: &independent, ..sub }),
            ("skip", Submission { launches: &skipped, ..sub }),
            ("count", Submission { launches: &longer, ..sub }),
            ("marker 0", Submission { markers: [m(0x2000), m(0x1010)], ..sub }),
            ("stamps", Submission { stamps: Some(m(0x3000)), ..sub }),
        ] {
            assert_ne!(key(&s, &t), k0, "{what} must change the key");
        }
        for other in [
            LaunchTuning { chain_action: DependentAction::Schedule, ..t },
            LaunchTuning { cwd_membar: 1, ..t },
            LaunchTuning { membar_task_chasing: false, ..t },
            LaunchTuning { arrive_at_latch: true, ..t },
        ] {
            assert_ne!(key(&sub, &other), k0, "the tuning must change the key: {other:?}");
        }
        assert_ne!(key_hash(&k0), key_hash(&key(&Submission { launches: &changed, ..sub }, &t)));
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
}
