//! # Command lists (EXPERIMENTAL)
//!
//! A command list records up to [`MAX_LAUNCHES`] launches and submits them as ONE submission with ONE
//! completion wait. By default each launch is ordered after the one before it (a barrier, so dependent
//! launches never overlap); a launch can be marked independent. Design choices:
//!
//! 1. **One core, two shells.** [`CmdList`] mirrors the contract's `omega_gpu_cmdlist_*` functions one to
//!    one over a [`Runtime`] (the C layer wraps it), with `#[repr(C)]` [`CmdListOpts`] and
//!    [`CmdListStats`]. The typed shell ([`CmdListBuilder`], [`Gpu::submit`](crate::Gpu::submit)) is bound
//!    to a scope and consumes the launch token the way [`Gpu::launch`](crate::Gpu::launch) does.
//! 2. **The list only chooses the order.** Each launch gets a HAL [`Order`]: default →
//!    `AfterPrevious`, marked independent → `Independent`, barrier mode NONE → `Unordered`; `skip_launch`
//!    sets `LaunchDesc::skip`. How `AfterPrevious` is enforced (and how cheaply) is the platform's business.
//! 3. **Same checks as a single launch.** An add runs the descriptor checks of
//!    [`Runtime::launch`] (stage "launch arguments"); the list's own refusals name stage "cmdlist add",
//!    "cmdlist submit", ... A submit re-checks what may have changed since the add: that every launch's code
//!    still lies in a live code buffer and that the list's stamp area still belongs to the open device.
//! 4. **Latch like a launch.** The list is marked latched before its submission and the mark is cleared only
//!    once the completion is certain; so an uncertain completion (a wait ran out, a refused poll, a cancel
//!    after submit) leaves the list latched, and then the session (the runtime's latch). A latched list
//!    refuses everything but free and the queries; its stamp area is parked, never released.
//! 5. **Per-launch stamps.** The list owns a HOST_POLLED QUEUE buffer of 16 bytes per launch where the
//!    platform releases each launch's completion timestamp ([`CmdList::stamps`]).
//!
//! Lock discipline: [`CmdList::create`] and [`CmdList::free`] take the session lock themselves (call them
//! without it; [`CmdList::create_locked`] / [`CmdList::free_locked`] are for callers already holding it);
//! add, reset and submit need the caller to hold it; count, mark_independent, is_latched, stamps, stats
//! and options do not touch the device.

mod check;
mod stamps;
mod types;

pub use check::check_no_overlap;
pub use types::*;

use omega_hal::{ConstBank, LaunchDesc, Order};

use crate::error::{Error, Stage};
use crate::session::{GpuMem, LaunchShape, LaunchSpec, RawLaunch, Runtime};
use crate::sync::{self, Ordering};

/// Result with [`CmdListError`].
pub type Result<T, E = CmdListError> = std::result::Result<T, E>;

/// One recorded launch: a descriptor that passed every check, its arguments copied.
#[derive(Clone, Copy, Debug)]
struct Recorded {
    code_va: u64,
    code_bytes: u64,
    gpr_count: u32,
    shape: LaunchShape,
    local_bytes_per_thread: u32,
    barrier_count: u32,
    /// The cluster the launch checks settled on (the kernel's own, or the launch's).
    features: omega_hal::LaunchFeatures,
    num_elements: u32,
    /// Range in the list's argument arena.
    args: (usize, usize),
    /// Range in the list's constant-bank arena.
    banks: (usize, usize),
    independent: bool,
}

/// `OmegaGpuCmdList`: recorded launches on runtime `'r`, submitted as one unit.
pub struct CmdList<'r> {
    rt: &'r Runtime,
    opts: CmdListOpts,
    mode: BarrierMode,
    launches: Vec<Recorded>,
    args: Vec<u32>,
    /// The launches' constant banks other than 0 (module data), back to back.
    banks: Vec<ConstBank>,
    stamps: GpuMem,
    stats: CmdListStats,
    latched: bool,
    /// Sequence number of the last completed submission (its stamps carry it), 0 before the first.
    sequence: u32,
    /// Launches in the last completed submission.
    submitted: u32,
}

// SAFETY: the only raw pointer is the stamp area's CPU view, a mapping of the whole process. It is written
// only by submit (which needs the session lock) and read only under the session mutex, which every release
// of it also holds; so a list may move to another thread, as a C list handle does.
unsafe impl Send for CmdList<'_> {}

impl core::fmt::Debug for CmdList<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CmdList")
            .field("launches", &self.launches.len())
            .field("barrier", &barrier_name(self.opts.barrier))
            .field("latched", &self.latched)
            .finish()
    }
}

impl<'r> CmdList<'r> {
    /// `omega_gpu_cmdlist_create`: a list with `opts` (`None`: the defaults). Takes the session lock itself:
    /// call it without the lock (holding it is refused by name, where the C lock would deadlock). The
    /// device must be open.
    pub fn create(rt: &'r Runtime, opts: Option<&CmdListOpts>) -> Result<Self> {
        rt.lock_itself("cmdlist create takes the session lock itself: call it without the lock")?;
        let r = Self::create_locked(rt, opts);
        // This thread took the lock just above and pins nothing (it did not hold the lock before), so the
        // release is not refused.
        let _ = rt.unlock();
        r
    }

    /// [`CmdList::create`] for a caller that holds the session lock.
    pub fn create_locked(rt: &'r Runtime, opts: Option<&CmdListOpts>) -> Result<Self> {
        let stage = Stage::CmdListCreate;
        rt.require_lock(stage)?;
        let opts = opts.copied().unwrap_or_default();
        let Some(mode) = BarrierMode::from_raw(opts.barrier) else {
            return Err(CmdListError::BadBarrier(opts.barrier));
        };
        let stamps = stamps::alloc(rt, MAX_LAUNCHES, stage)?;
        Ok(CmdList {
            rt,
            opts,
            mode,
            launches: Vec::new(),
            args: Vec::new(),
            banks: Vec::new(),
            stamps,
            stats: CmdListStats::default(),
            latched: false,
            sequence: 0,
            submitted: 0,
        })
    }

    /// `omega_gpu_cmdlist_free`: releases the list and its stamp area (parked, never released, when the
    /// process is latched). Takes the session lock itself; a caller that holds it gets the refusal the C
    /// lock would turn into a deadlock, and the list is released all the same.
    pub fn free(self) -> Result<()> {
        if self.rt.holds_lock() {
            return Err(Error::Lock("cmdlist free takes the session lock itself: call it without the lock").into());
        }
        drop(self);
        Ok(())
    }

    /// [`CmdList::free`] for a caller that holds the session lock.
    pub fn free_locked(self) -> Result<()> {
        self.rt.require_lock(Stage::CmdListFree)?;
        drop(self);
        Ok(())
    }

    /// The runtime the list belongs to.
    pub fn runtime(&self) -> &'r Runtime {
        self.rt
    }

    /// `omega_gpu_cmdlist_reset`: forgets every recorded launch (statistics and options stay). Caller holds
    /// the lock, as for [`CmdList::add`]. Refused on a latched list.
    pub fn reset(&mut self) -> Result<()> {
        self.rt.require_lock(Stage::CmdListReset)?;
        if self.latched {
            return self.refuse(CmdListError::ListLatched(Stage::CmdListReset));
        }
        self.launches.clear();
        self.args.clear();
        self.banks.clear();
        self.submitted = 0;
        Ok(())
    }

    /// `omega_gpu_cmdlist_count`: launches recorded.
    pub fn count(&self) -> u32 {
        self.launches.len() as u32
    }

    /// `omega_gpu_cmdlist_add` of a C descriptor: checks it as [`Runtime::launch_raw`] would and records it.
    /// Returns its index. Caller holds the lock.
    ///
    /// # Safety
    /// - `l.args` is null or points to `l.n_args` readable words for the duration of the call (they are
    ///   copied).
    pub unsafe fn add_raw(&mut self, l: &RawLaunch) -> Result<u32> {
        // SAFETY: forwarded from the caller.
        match unsafe { LaunchSpec::from_raw(l) } {
            Ok(spec) => self.add(&spec),
            Err(e) => {
                self.rt.require_lock(Stage::CmdListAdd)?;
                self.stats.refusals += 1;
                Err(e.into())
            }
        }
    }

    /// `omega_gpu_cmdlist_add`: checks `spec` with the descriptor checks of [`Runtime::launch`] (a refusal
    /// names stage "launch arguments"), then records it, its argument words copied. Returns its index.
    /// Refused past [`MAX_LAUNCHES`] ([`CmdListError::Full`]). Caller holds the lock; the device is open.
    pub fn add(&mut self, spec: &LaunchSpec<'_>) -> Result<u32> {
        let stage = Stage::CmdListAdd;
        self.rt.require_lock(stage)?;
        if self.latched {
            return self.refuse(CmdListError::ListLatched(stage));
        }
        if self.launches.len() >= MAX_LAUNCHES as usize {
            return self.refuse(CmdListError::Full);
        }
        // Allocates nothing for a kernel without module data.
        let mut resolved_banks = Vec::new();
        let desc = match self.rt.resolve_launch(spec, &mut resolved_banks, stage) {
            Ok((_, desc, _)) => desc,
            Err(e) => {
                self.stats.refusals += 1;
                return Err(e.into());
            }
        };
        let start = self.args.len();
        self.args.extend_from_slice(desc.args);
        let banks_start = self.banks.len();
        self.banks.extend_from_slice(desc.const_banks);
        self.launches.push(Recorded {
            code_va: desc.code_va,
            code_bytes: desc.code_bytes,
            gpr_count: desc.gpr_count,
            local_bytes_per_thread: desc.local_bytes_per_thread,
            barrier_count: desc.barrier_count,
            features: desc.features,
            num_elements: desc.num_elements,
            args: (start, desc.args.len()),
            banks: (banks_start, desc.const_banks.len()),
            independent: false,
            shape: LaunchShape {
                grid: desc.grid,
                block: desc.block,
                shared_bytes: desc.shared_bytes,
                dynamic_shared_bytes: desc.dynamic_shared_bytes,
                timeout_ms: spec.shape.timeout_ms,
                spin_us: spec.shape.spin_us,
                cluster: spec.shape.cluster,
            },
        });
        Ok(self.launches.len() as u32 - 1)
    }

    /// `omega_gpu_cmdlist_mark_independent`: launch `index` may overlap the launch before it (no barrier).
    pub fn mark_independent(&mut self, index: u32) -> Result<()> {
        if self.latched {
            return self.refuse(CmdListError::ListLatched(Stage::CmdListMarkIndependent));
        }
        let count = self.count();
        match self.launches.get_mut(index as usize) {
            Some(l) => {
                l.independent = true;
                Ok(())
            }
            None => self.refuse(CmdListError::NoSuchLaunch { index, count }),
        }
    }

    /// The HAL order launch `index` is submitted with (`None` past the list).
    pub fn order(&self, index: u32) -> Option<Order> {
        self.launches.get(index as usize).map(|l| self.mode.order(l.independent))
    }

    /// The limit of each completion wait: the option, else the sum of the launches' own limits.
    pub fn timeout_ms(&self) -> u32 {
        if self.opts.timeout_ms != 0 {
            return self.opts.timeout_ms;
        }
        self.launches.iter().fold(0u32, |t, l| t.saturating_add(l.shape.timeout_ms))
    }

    /// `omega_gpu_cmdlist_submit`: submits every recorded launch as one submission and waits once for its
    /// two markers. Caller holds the lock, device open, not latched.
    ///
    /// An uncertain completion (a wait ran out, the poll was refused, a cancel after submit) latches the
    /// list, then the session. A kernel fault is certain: neither latches, and the channel is dead until
    /// close and reopen, as after a single launch.
    pub fn submit(&mut self) -> Result<ListCompletion> {
        let stage = Stage::CmdListSubmit;
        let rt = self.rt;
        rt.require_lock(stage)?;
        if self.latched {
            return self.refuse(CmdListError::ListLatched(stage));
        }
        if rt.is_blocked() {
            return self.refuse(Error::Latched(stage).into());
        }
        if self.launches.is_empty() {
            return self.refuse(CmdListError::Empty);
        }
        let i = match rt.installed() {
            Ok(i) => i,
            Err(e) => return self.refuse(e.into()),
        };
        let slots = {
            let s = sync::lock(&rt.session);
            if s.device.is_none() {
                drop(s);
                return self.refuse(Error::NotOpen(stage).into());
            }
            if let Some(f) = s.channel_fault.clone() {
                drop(s);
                return self.refuse(Error::Fault(f).into());
            }
            drop(s);
            rt.session_markers().expect("an open session has its markers")
        };
        if !stamps::is_live(rt, &self.stamps) {
            return self.refuse(CmdListError::StaleStamps);
        }
        if let Err(e) = self.check_code_live() {
            return self.refuse(e);
        }
        let n = self.count();
        stamps::clear(&self.stamps, n);
        let skip = self.opts.skip_launch != 0;
        let descs: Vec<LaunchDesc<'_>> = self
            .launches
            .iter()
            .map(|l| LaunchDesc {
                code_va: l.code_va,
                code_bytes: l.code_bytes,
                gpr_count: l.gpr_count,
                block: l.shape.block,
                grid: l.shape.grid,
                shared_bytes: l.shape.shared_bytes,
                dynamic_shared_bytes: l.shape.dynamic_shared_bytes,
                local_bytes_per_thread: l.local_bytes_per_thread,
                barrier_count: l.barrier_count,
                features: l.features,
                num_elements: l.num_elements,
                args: &self.args[l.args.0..l.args.0 + l.args.1],
                const_banks: &self.banks[l.banks.0..l.banks.0 + l.banks.1],
                order: self.mode.order(l.independent),
                skip,
            })
            .collect();
        if rt.cancel.swap(false, Ordering::SeqCst) {
            return self.refuse(Error::CancelledBeforeSubmit.into());
        }
        let timeout_ms = self.timeout_ms();
        let spin_us = if self.opts.spin_us != 0 {
            self.opts.spin_us
        } else {
            self.launches.iter().map(|l| l.shape.spin_us).max().unwrap_or(0)
        };
        // Latched from here until the completion is certain: the list first, then (inside the wait) the
        // session, so no path leaves a list usable whose work may still be running.
        self.latched = true;
        // A list submitted before expects to take what its last submission took (wait.rs).
        let expect_ns = (self.stats.submits > 0).then_some(self.stats.last_submit_ns);
        let ask = crate::session::wait::Ask { spin_us, expect_ns };
        let r = rt.submit_and_wait(&i, &descs, slots, Some(stamps::slot(&self.stamps)), timeout_ms, ask);
        drop(descs);
        match r {
            Ok(done) => {
                self.latched = false;
                self.sequence = done.marker;
                self.submitted = n;
                let st = &mut self.stats;
                st.submits += 1;
                st.launches += n as u64;
                st.last_submit_ns = done.elapsed_ns;
                st.total_submit_ns += done.elapsed_ns;
                for (k, l) in self.launches.iter().enumerate() {
                    match self.mode.order(l.independent) {
                        Order::AfterPrevious if k > 0 => st.barriers += 1,
                        Order::Independent => st.independent += 1,
                        Order::Unordered => st.unordered += 1,
                        _ => {}
                    }
                }
                if skip {
                    st.skipped += n as u64;
                }
                Ok(ListCompletion { elapsed_ns: done.elapsed_ns, marker: done.marker, launches: n })
            }
            Err(e) => {
                self.latched = e.latched_the_process();
                self.stats.failed_submits += 1;
                self.sequence = 0;
                self.submitted = 0;
                Err(e.into())
            }
        }
    }

    /// Every launch's code must still lie in a live code buffer: it may have been freed since the add.
    fn check_code_live(&self) -> Result<()> {
        let s = sync::lock(&self.rt.session);
        // Lists mostly repeat a few kernels: look each run of one code address up once.
        let mut checked = None;
        for (k, l) in self.launches.iter().enumerate() {
            if checked == Some(l.code_va) {
                continue;
            }
            checked = Some(l.code_va);
            let live = s.code_ranges.range(..=l.code_va).next_back().is_some_and(|(va, len)| l.code_va < va + len);
            if !live {
                return Err(CmdListError::StaleCode { launch: k, code_va: l.code_va });
            }
        }
        Ok(())
    }

    /// `omega_gpu_cmdlist_is_latched`: true once an uncertain completion latched this list.
    pub fn is_latched(&self) -> bool {
        self.latched
    }

    /// `omega_gpu_cmdlist_stamps`: the completion timestamps (platform ns) of the launches of the last
    /// completed submission, in list order, into `out`; returns how many were written. A launch that did
    /// not release its stamp (skipped by `skip_launch`) reads as 0. No lock needed.
    pub fn stamps(&self, out: &mut [u64]) -> usize {
        let n = (self.submitted as usize).min(out.len());
        stamps::read(self.rt, &self.stamps, self.sequence, &mut out[..n])
    }

    /// Stamps the last completed submission has: one per launch (0 before the first).
    pub fn stamps_available(&self) -> usize {
        self.submitted as usize
    }

    /// The stamps of the last completed submission as a vector.
    pub fn stamps_vec(&self) -> Vec<u64> {
        let mut v = vec![0; self.submitted as usize];
        let n = self.stamps(&mut v);
        v.truncate(n);
        v
    }

    /// `omega_gpu_cmdlist_barrier_name` of this list's mode.
    pub fn barrier_name(&self) -> &'static str {
        barrier_name(self.opts.barrier)
    }

    /// The options the list was created with.
    pub fn options(&self) -> CmdListOpts {
        self.opts
    }

    /// What the list has done.
    pub fn stats(&self) -> CmdListStats {
        self.stats
    }

    /// The stamp area (its handle shows whether a latch parked it).
    pub fn stamp_buffer(&self) -> &GpuMem {
        &self.stamps
    }

    /// A refusal before anything was submitted, counted in the list's statistics.
    fn refuse<T>(&mut self, e: CmdListError) -> Result<T> {
        self.stats.refusals += 1;
        Err(e)
    }
}

impl Drop for CmdList<'_> {
    fn drop(&mut self) {
        // Release under the lock: the caller's if it holds it, else taken here (what free promises).
        if self.rt.holds_lock() {
            stamps::free(self.rt, &mut self.stamps);
        } else {
            // Neither is refused here: the thread does not hold the lock, so it is in no on-close hook and
            // pins nothing. With no platform there is no lock, and nothing of a device to release.
            let _ = self.rt.lock();
            stamps::free(self.rt, &mut self.stamps);
            let _ = self.rt.unlock();
        }
    }
}
