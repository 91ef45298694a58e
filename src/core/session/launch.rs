//! Launch: the contract's argument checks, one submission, and the two-marker completion wait whose
//! uncertainty latches the process.

use std::panic::{catch_unwind, AssertUnwindSafe};

use omega_hal::{CompletionPoll, ConstBank, LaunchDesc, LimitError, MarkerSlot, Order, Submission, WaitPolicy};

use super::{wait, RawLaunch, Runtime, DEFAULT_SHARED_BYTES, MAX_ARGS, MAX_SPIN_US};
use crate::error::{Error, LoadError, Result, Stage};
use crate::sync::{self, Arc, Ordering};

/// One kernel parameter as the kernel's parameter table declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamInfo {
    /// Position in the signature.
    pub ordinal: u32,
    /// Byte offset in the parameter block.
    pub offset: u32,
    /// Bytes.
    pub size: u32,
}

/// What a loaded kernel needs from every launch of it, registered under its code address so that a C
/// launch of the same code gets it too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelMeta {
    /// Entry name.
    pub name: String,
    /// Bytes of code.
    pub code_bytes: u64,
    /// Registers per thread the kernel was built for.
    pub registers: u32,
    /// Static shared memory per block (including any system-reserved part).
    pub static_shared_bytes: u32,
    /// Local memory (stack) per thread.
    pub local_bytes_per_thread: u32,
    /// Named barriers used.
    pub barriers: u32,
    /// The parameter table.
    pub params: Vec<ParamInfo>,
    /// Bytes of parameters.
    pub param_bytes: u32,
    /// Largest block the kernel allows, if it says.
    pub max_threads: Option<u32>,
    /// Constant banks other than 0 that every launch binds (module data: `__constant__` data in bank 3,
    /// addresses of `__device__` data in bank 4), at their addresses inside the loaded image.
    pub const_banks: Vec<ConstBank>,
    /// True when the kernel calls Omega's device printf: a completion that ran it drains the printf buffer.
    pub printf: bool,
    /// The cluster the kernel was built for (`__cluster_dims__`: `EXPLICIT_CLUSTER` with
    /// `CTA_PER_CLUSTER`); every launch of it runs in clusters of this shape.
    pub cluster: Option<[u32; 3]>,
}

/// What a launch asks for besides its kernel and arguments: its geometry, its shared memory and its
/// wait. One struct, embedded by every Rust-side launch description (the typed builder, the session's
/// `LaunchSpec`, a command list's recorded launch), so the fields and their meaning are written once.
/// The C descriptors (`OmegaGpuLaunch`, the engine's job) keep their own `#[repr(C)]` fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchShape {
    /// Grid size.
    pub grid: [u32; 3],
    /// Block size.
    pub block: [u32; 3],
    /// Shared memory per block; 0 = the kernel's static size, or the default.
    pub shared_bytes: u32,
    /// Dynamic shared memory per block, added to the kernel's static size.
    pub dynamic_shared_bytes: u32,
    /// Completion poll limit per marker.
    pub timeout_ms: u32,
    /// Spin window; 0 = process-wide setting.
    pub spin_us: u32,
    /// CTAs per cluster along x, y, z (`[1, 1, 1]`: no cluster; a 0 side counts as 1). Every grid side
    /// must be whole clusters. A kernel built with `__cluster_dims__` runs in its own shape whatever this
    /// says, unless this names another, which is refused.
    pub cluster: [u32; 3],
}

/// A launch as the Rust API describes it: the C descriptor's fields plus what C cannot say.
#[derive(Clone, Copy, Debug)]
pub struct LaunchSpec<'a> {
    /// Kernel code address.
    pub code_va: u64,
    /// Registers per thread (rounded by the session).
    pub gpr_count: u32,
    /// Geometry, shared memory and wait.
    pub shape: LaunchShape,
    /// The `num_elements` word.
    pub num_elements: u32,
    /// Parameter words.
    pub args: &'a [u32],
    /// Most words this caller may pass (32 for C; the constant bank's limit for the Rust builder).
    pub max_args: usize,
}

impl<'a> LaunchSpec<'a> {
    /// The Rust form of a C descriptor. The argument pointer is read for `n_args` words.
    ///
    /// # Safety
    /// - `l.args` is null or points to `l.n_args` readable words that stay valid for `'a`.
    pub unsafe fn from_raw(l: &RawLaunch) -> Result<LaunchSpec<'a>> {
        if l.args.is_null() {
            return Err(Error::LaunchArguments(crate::error::LaunchArgError::NullArgs));
        }
        if l.n_args == 0 || l.n_args > MAX_ARGS {
            return Err(Error::LaunchArguments(crate::error::LaunchArgError::ArgCount {
                n: l.n_args as usize,
                max: MAX_ARGS as usize,
            }));
        }
        // SAFETY: non-null (checked) and, by the caller's promise, `n_args` readable words for 'a.
        let args = unsafe { std::slice::from_raw_parts(l.args, l.n_args as usize) };
        Ok(LaunchSpec {
            code_va: l.code_va,
            // The C launch (STABLE) keeps the contract's rule for every kernel, loaded or not.
            gpr_count: round_gpr(l.gpr_count),
            num_elements: l.num_elements,
            args,
            max_args: MAX_ARGS as usize,
            shape: LaunchShape {
                grid: [l.grid_x, l.grid_y, 1],
                block: [l.threads_x, l.threads_y.max(1), 1],
                shared_bytes: l.shared_bytes,
                dynamic_shared_bytes: 0,
                timeout_ms: l.timeout_ms,
                spin_us: l.spin_us,
                cluster: [1, 1, 1],
            },
        })
    }
}

/// What a completed launch reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// Submit to second marker, platform-clock nanoseconds.
    pub elapsed_ns: u64,
    /// The first marker word observed.
    pub marker: u32,
}

/// What a launch of code no loader registered gets: nothing beyond the descriptor.
static NO_TEMPLATE: KernelMeta = KernelMeta {
    name: String::new(),
    code_bytes: 0,
    registers: 0,
    static_shared_bytes: 0,
    local_bytes_per_thread: 0,
    barriers: 0,
    params: Vec::new(),
    param_bytes: 0,
    max_threads: None,
    const_banks: Vec::new(),
    printf: false,
    cluster: None,
};

/// Rounds a declared register count the way the contract says: a multiple of 8, at least 64.
pub fn round_gpr(gpr: u32) -> u32 {
    gpr.div_ceil(8).saturating_mul(8).max(64)
}

/// The register count a launch declares, given what the caller declared and what the loader knows of
/// the kernel (`meta.registers` is 0 for code it did not load).
///
/// A self-contained kernel the loader loaded, launched from Rust, declares its own count (or the
/// caller's, if larger) rounded to a multiple of 8, as libcuda does: the contract's floor of 64 halved the resident blocks of
/// a 16-register kernel and held the bandwidth kernel to 0.79x of CUDA (1861 against 2737 GB/s without
/// the floor, 2343 for CUDA, docs/perf/2026-12-02-matmul-bringup.md). Code the runtime did not load, and a
/// kernel that calls a device library function Omega links (printf, which uses R0..R31 of its caller's
/// registers, kernels/cuda/lib/printf.cu), keep the floor, and so does every launch through the C
/// layer, whose STABLE `omega_gpu_session_launch` documents it ([`LaunchSpec::from_raw`] rounds first).
pub fn launch_gpr(declared: u32, meta: &KernelMeta) -> u32 {
    if meta.registers == 0 || meta.printf {
        round_gpr(declared.max(meta.registers))
    } else {
        declared.max(meta.registers).div_ceil(8).saturating_mul(8)
    }
}

/// Hopper's SM as residency sees it: 64 Ki 32-bit registers, 2048 threads, 32 CTAs and 228 KiB of shared
/// memory, each CTA's 1 KiB system reserve inside it (CUDA's sm_90 occupancy figures).
const SM_REGISTERS: u32 = 65_536;
const SM_THREADS: u32 = 2048;
const SM_CTAS: u32 = 32;
const SM_SHARED_BYTES: u32 = 228 * 1024;
const CTA_RESERVED_SHARED_BYTES: u32 = 1024;

/// CTAs of a kernel one SM holds at once with `threads` a CTA and `dynamic_shared` bytes of shared memory
/// beyond the kernel's static part, at least 1. Registers count as the launch declares them
/// ([`launch_gpr`]), allocated per warp: a grid sized for 8 CTAs an SM of a kernel that fits 6 runs a
/// second, two-thirds-empty wave (the bf16 SwiGLU at 37 registers reached 0.57 of copy so).
pub fn resident_ctas(meta: &KernelMeta, threads: u32, dynamic_shared: u32) -> u32 {
    let lanes = threads.max(1).div_ceil(32) * 32;
    let by_regs = SM_REGISTERS / lanes.saturating_mul(launch_gpr(0, meta).max(1));
    let shared = meta.static_shared_bytes.max(CTA_RESERVED_SHARED_BYTES).saturating_add(dynamic_shared);
    let by_shared = SM_SHARED_BYTES / shared.max(1);
    (SM_THREADS / lanes).min(by_regs).min(by_shared).clamp(1, SM_CTAS)
}

/// Spin iterations between looks at the channel's error notifier inside a spin window (a multiple of
/// [`SPIN_CLOCK_EVERY`]).
const SPIN_FAULT_CHECK: u32 = 4096;
/// Polls between looks at the clock and the cancel flag inside a spin window. Every poll under loom, whose
/// models count on each iteration reaching the cancel check.
const SPIN_CLOCK_EVERY: u32 = if cfg!(loom) { 1 } else { 16 };

impl Runtime {
    fn check_spec(&self, spec: &LaunchSpec<'_>) -> Result<()> {
        let bad = |m: crate::error::LaunchArgError| Err(Error::LaunchArguments(m));
        if spec.args.is_empty() || spec.args.len() > spec.max_args {
            return bad(crate::error::LaunchArgError::ArgCount { n: spec.args.len(), max: spec.max_args });
        }
        if spec.shape.block[0] == 0 {
            return bad(crate::error::LaunchArgError::ZeroThreadsX);
        }
        if spec.shape.grid[0] == 0 || spec.shape.grid[1] == 0 {
            return bad(crate::error::LaunchArgError::ZeroGridSide { x: spec.shape.grid[0], y: spec.shape.grid[1] });
        }
        if spec.shape.block[2] == 0 || spec.shape.grid[2] == 0 {
            return bad(crate::error::LaunchArgError::ZeroZ);
        }
        let threads = spec.shape.block.iter().map(|&b| b as u64).product::<u64>();
        if threads > 1024 {
            return bad(crate::error::LaunchArgError::TooManyThreads(threads));
        }
        if spec.shape.spin_us > MAX_SPIN_US {
            return bad(crate::error::LaunchArgError::SpinTooLong { us: spec.shape.spin_us, max: MAX_SPIN_US });
        }
        Ok(())
    }

    /// [`Runtime::launch`] of a C descriptor; a refused descriptor fails like any other launch.
    ///
    /// # Safety
    /// - `l.args` is null or points to `l.n_args` readable words for the duration of the call.
    pub unsafe fn launch_raw(&self, l: &RawLaunch) -> Result<Completion> {
        // SAFETY: forwarded from the caller.
        match unsafe { LaunchSpec::from_raw(l) } {
            Ok(spec) => self.launch(&spec),
            Err(e) => {
                self.require_lock(Stage::Launch)?;
                Err(e)
            }
        }
    }

    /// Submits one launch and waits for both markers (caller holds the lock, device open, not latched).
    pub fn launch(&self, spec: &LaunchSpec<'_>) -> Result<Completion> {
        self.launch_each(spec, [spec.shape.timeout_ms; 2], &mut 0)
    }

    /// [`Runtime::launch`] with a limit per completion wait (marker 0, marker 1). `seen` counts the markers
    /// observed, so a caller knows which wait a failure ended (the job engine names it).
    pub(crate) fn launch_each(&self, spec: &LaunchSpec<'_>, limits: [u32; 2], seen: &mut u8) -> Result<Completion> {
        let mut banks = Vec::new();
        let (i, desc, slots) = self.resolve_launch(spec, &mut banks, Stage::Launch)?;
        if self.cancel.swap(false, Ordering::SeqCst) {
            return Err(Error::CancelledBeforeSubmit);
        }
        let ask = wait::Ask { spin_us: spec.shape.spin_us, expect_ns: None };
        self.submit_and_wait_each(&i, &[desc], slots, None, limits, ask, seen)
    }

    /// Every check [`Runtime::launch`] makes, and the descriptor it would submit (in `AfterPrevious` order,
    /// not skipped) with the session's marker slots; nothing is submitted. A refusal names `stage`
    /// (command lists record launches through this). The kernel's constant banks are copied into
    /// `banks` (emptied first; no allocation for a kernel without module data), which the descriptor
    /// borrows.
    pub(crate) fn resolve_launch<'a>(
        &self,
        spec: &LaunchSpec<'a>,
        banks: &'a mut Vec<ConstBank>,
        stage: Stage,
    ) -> Result<(crate::platform::Installed, LaunchDesc<'a>, [MarkerSlot; 2])> {
        self.require_lock(stage)?;
        if self.is_blocked() {
            return Err(Error::Latched(stage));
        }
        self.check_spec(spec)?;
        let i = self.installed()?;
        let s = sync::lock(&self.session);
        if s.device.is_none() {
            drop(s);
            return Err(Error::NotOpen(stage));
        }
        if let Some(f) = s.channel_fault.clone() {
            drop(s);
            return Err(Error::Fault(f));
        }
        // The code must lie in a live code buffer of this session: a launch of anything else would run
        // whatever bytes sit there.
        let code = s.code_ranges.range(..=spec.code_va).next_back().filter(|(va, len)| spec.code_va < *va + *len);
        let Some((code_base, code_len)) = code.map(|(va, len)| (*va, *len)) else {
            drop(s);
            return Err(Error::LaunchArguments(crate::error::LaunchArgError::CodeOutsideBuffer(spec.code_va)));
        };
        let code_bytes = code_base + code_len - spec.code_va;
        let template = s.templates.get(&spec.code_va).cloned();
        let meta: &KernelMeta = template.as_deref().unwrap_or(&NO_TEMPLATE);
        if let Some(max) = meta.max_threads {
            let threads: u32 = spec.shape.block.iter().product();
            if threads > max {
                drop(s);
                return Err(Error::LaunchArguments(crate::error::LaunchArgError::KernelThreads {
                    threads,
                    kernel: meta.name.clone(),
                    max,
                }));
            }
        }
        if meta.param_bytes > 0 && (spec.args.len() * 4) < meta.param_bytes as usize {
            drop(s);
            return Err(Error::LaunchArguments(crate::error::LaunchArgError::TooFewArgs {
                words: spec.args.len(),
                kernel: meta.name.clone(),
                bytes: meta.param_bytes,
            }));
        }
        let (_, markers) = s.markers.expect("open allocates the markers");
        let limits = s.launch_limits.expect("open records the launch limits");
        // In 64 bits: a static size plus a hostile dynamic one must be refused, not wrap.
        let kernel_shared = u64::from(meta.static_shared_bytes) + u64::from(spec.shape.dynamic_shared_bytes);
        let shared = match spec.shape.shared_bytes {
            0 if meta.static_shared_bytes > 0 => kernel_shared,
            0 => u64::from(DEFAULT_SHARED_BYTES.max(spec.shape.dynamic_shared_bytes)),
            n => u64::from(n).max(kernel_shared),
        };
        drop(s);
        if shared > u64::from(limits.max_shared_bytes) {
            let e = LimitError::Shared {
                bytes: shared,
                max: limits.max_shared_bytes,
                reserved: limits.reserved_shared_bytes,
                sm: limits.sm,
            };
            return Err(Error::LaunchArguments(crate::error::LaunchArgError::Limit(e)));
        }
        let asked = spec.shape.cluster.map(|side| side.max(1));
        let cluster = match meta.cluster {
            Some(fixed) if asked != [1, 1, 1] && asked != fixed => {
                let kernel = meta.name.clone();
                let e = crate::error::LaunchArgError::ClusterFixed { kernel, fixed, asked };
                return Err(Error::LaunchArguments(e));
            }
            Some(fixed) => fixed,
            None => asked,
        };
        let features = omega_hal::LaunchFeatures { cluster, ..omega_hal::LaunchFeatures::NONE };
        if let Err(e) = limits.check_features(spec.shape.grid, &features) {
            return Err(Error::LaunchArguments(crate::error::LaunchArgError::Limit(e)));
        }
        let gpr_count = launch_gpr(spec.gpr_count, meta);
        if gpr_count > limits.max_registers {
            let e = LimitError::Registers { registers: gpr_count, max: limits.max_registers, sm: limits.sm };
            return Err(Error::LaunchArguments(crate::error::LaunchArgError::Registers {
                given: spec.gpr_count,
                own: meta.registers,
                limit: e,
            }));
        }
        banks.clear();
        banks.extend_from_slice(&meta.const_banks);
        let banks: &'a [ConstBank] = banks;
        let desc = LaunchDesc {
            code_va: spec.code_va,
            code_bytes: if meta.code_bytes > 0 { meta.code_bytes } else { code_bytes },
            gpr_count,
            block: spec.shape.block,
            grid: spec.shape.grid,
            // At most the limit, checked above.
            shared_bytes: shared as u32,
            dynamic_shared_bytes: spec.shape.dynamic_shared_bytes,
            local_bytes_per_thread: meta.local_bytes_per_thread,
            barrier_count: meta.barriers,
            features,
            num_elements: spec.num_elements,
            args: spec.args,
            const_banks: banks,
            order: Order::AfterPrevious,
            skip: false,
        };
        // The architecture's shape limits (block and grid sides), the same the platform would refuse.
        if let Err(e) = limits.check(&desc) {
            return Err(Error::LaunchArguments(crate::error::LaunchArgError::Limit(e)));
        }
        Ok((i, desc, marker_slots(&markers)))
    }

    /// Submits `launches` as one unit and waits for its two markers as `ask` says. Used by single
    /// launches and lists.
    pub(crate) fn submit_and_wait(
        &self,
        i: &crate::platform::Installed,
        launches: &[LaunchDesc<'_>],
        slots: [MarkerSlot; 2],
        stamps: Option<MarkerSlot>,
        timeout_ms: u32,
        ask: wait::Ask,
    ) -> Result<Completion> {
        self.submit_and_wait_each(i, launches, slots, stamps, [timeout_ms; 2], ask, &mut 0)
    }

    /// [`Runtime::submit_and_wait`] with a limit per marker; `seen` counts the markers observed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn submit_and_wait_each(
        &self,
        i: &crate::platform::Installed,
        launches: &[LaunchDesc<'_>],
        slots: [MarkerSlot; 2],
        stamps: Option<MarkerSlot>,
        limits: [u32; 2],
        ask: wait::Ask,
        seen: &mut u8,
    ) -> Result<Completion> {
        *seen = 0;
        let poll = i.platform.poll().expect("negotiated at open");
        let clock = i.platform.clock().expect("negotiated at open");
        let queue = i.platform.queue().expect("negotiated at open");
        let sequence = {
            let mut s = sync::lock(&self.session);
            s.sequence = s.sequence.wrapping_add(1).max(1);
            // Set for every submission, so a latch parks the stamp area of this one and no other.
            s.in_flight_stamps = stamps.map(|m| m.va);
            s.sequence
        };
        let sub = Submission { launches, markers: slots, sequence, stamps };
        // From the submit on, the device may hold the work. A panic from there (in the platform's submit or
        // poll, a simulated kernel, this wait) is an uncertain completion like a timeout: it latches before
        // the failure is returned, so no unwinding releases buffers the device may still be using.
        let policy = i.platform.wait_policy();
        let waited = catch_unwind(AssertUnwindSafe(|| {
            self.submit_then_wait(poll, clock, queue, &sub, limits, (ask, policy), seen)
        }));
        let done = waited.unwrap_or_else(|panic| self.latch(Error::PanicAfterSubmit(panic_text(panic.as_ref()))))?;
        // Both markers were seen: the device is done, and what its printf kernels wrote can be read. Outside
        // the unwind guard, since the completion is certain by now (a panic in an output callback is the
        // caller's, not an uncertain completion).
        self.drain_printf_after(launches);
        Ok(done)
    }

    /// The submit and the two marker waits of [`Runtime::submit_and_wait_each`].
    #[allow(clippy::too_many_arguments)]
    fn submit_then_wait(
        &self,
        poll: &dyn CompletionPoll,
        clock: &dyn omega_hal::Clock,
        queue: &dyn omega_hal::SubmitQueue,
        sub: &Submission<'_>,
        limits: [u32; 2],
        (ask, policy): (wait::Ask, WaitPolicy),
        seen: &mut u8,
    ) -> Result<Completion> {
        let sequence = sub.sequence;
        let start = clock.now_ns();
        // SAFETY: the lock is held; every address in `sub` is in live session buffers (code checked in
        // `resolve_launch`, and again by a command list's submit; constant banks come from the template
        // registered for that code address, lie in the same code buffer as the entry, and die with it;
        // arguments are the caller's, markers are the session's own), which are only released by
        // free/close under this same lock, after this wait, or parked forever if the wait latches; the
        // previous submission's markers were observed (or the process latched and refuses launches).
        if let Err(e) = unsafe { queue.submit(sub) } {
            return Err(Error::Submit(e));
        }
        let spin_us = if ask.spin_us != 0 { ask.spin_us } else { self.spin_us() };
        let mut first = 0;
        for (which, slot) in sub.markers.iter().enumerate() {
            // Marker 0's wait starts with the submission (the clock was just read) and carries the
            // expectation; marker 1's reads the clock only if its first look fails.
            let since = (which == 0).then_some(start);
            let ask = wait::Ask { spin_us, expect_ns: if which == 0 { ask.expect_ns } else { None } };
            let word =
                self.wait_marker(poll, clock, slot, sequence, which as u8, limits[which], (ask, policy), since)?;
            *seen = which as u8 + 1;
            if which == 0 {
                first = word;
            }
        }
        Ok(Completion { elapsed_ns: clock.now_ns().saturating_sub(start), marker: first })
    }

    /// Polls `slot` until it reads `sequence`, as [`wait::Backoff`] paces it: the spin window `ask.spin_us`
    /// (0: the platform policy's own) and the expected completion's window, then yields, then sleeps that grow with the time waited (with the
    /// thread's timer slack lowered while it sleeps). Ends with the marker word, or latches at the limit,
    /// on a cancel or a refused poll; a channel fault ends it with a certain failure.
    #[allow(clippy::too_many_arguments)]
    fn wait_marker(
        &self,
        poll: &dyn CompletionPoll,
        clock: &dyn omega_hal::Clock,
        slot: &MarkerSlot,
        sequence: u32,
        which: u8,
        timeout_ms: u32,
        (ask, policy): (wait::Ask, WaitPolicy),
        since: Option<u64>,
    ) -> Result<u32> {
        if timeout_ms == 0 {
            // A limit of 0 has run out before the first look, whatever the marker says: the contract's
            // "0 runs out at once and latches", on every platform and however fast the work was.
            return self.latch(Error::Timeout { marker: which, timeout_ms });
        }
        // One look before the clock is read: marker 1 is usually released by the time marker 0 is seen,
        // and a clock read is the dearest part of an iteration where it is a system call.
        // SAFETY: `slot` is in the session's marker buffer, live while the device is open and parked
        // (never released) once latched.
        match unsafe { poll.poll(slot) } {
            Ok(w) if w == sequence => return Ok(w),
            Ok(_) => {}
            Err(e) => return self.latch(Error::PollRefused(e)),
        }
        let start = since.unwrap_or_else(|| clock.now_ns());
        let deadline = start.saturating_add(timeout_ms as u64 * 1_000_000);
        let backoff = wait::Backoff::new(start, ask.spin_us, policy).expecting(ask.expect_ns);
        let mut spins = 0u32;
        let mut step = backoff.step(start);
        // Lowered at the first sleep, restored when the wait ends.
        let mut slack: Option<omega_hal::TimerSlack> = None;
        loop {
            // SAFETY: `slot` is in the session's marker buffer, live while the device is open and parked
            // (never released) once latched.
            let word = match unsafe { poll.poll(slot) } {
                Ok(w) => w,
                Err(e) => return self.latch(Error::PollRefused(e)),
            };
            if word == sequence {
                return Ok(word);
            }
            spins = spins.wrapping_add(1);
            // While spinning the cancel flag and the clock are looked at every SPIN_CLOCK_EVERY polls (a
            // poll is a cached read; the clock and the atomic swap cost more than it), once past the spin at
            // every poll, as before each yield or sleep.
            if step != wait::Step::Spin || spins.is_multiple_of(SPIN_CLOCK_EVERY) {
                if self.cancel.swap(false, Ordering::SeqCst) {
                    return self.latch(Error::CancelledAfterSubmit);
                }
                let now = clock.now_ns();
                if now >= deadline {
                    return self.latch(Error::Timeout { marker: which, timeout_ms });
                }
                step = backoff.step(now);
                // No sleep past the deadline: the limit is seen when it passes, not a sleep later.
                if let wait::Step::Sleep(us) = &mut step {
                    *us = (*us as u64).min((deadline - now).div_ceil(1_000)) as u32;
                }
                if step != wait::Step::Spin || spins.is_multiple_of(SPIN_FAULT_CHECK) {
                    if let Some(f) = poll.channel_fault() {
                        sync::lock(&self.session).channel_fault = Some(f.clone());
                        return Err(Error::Fault(f));
                    }
                }
            }
            match step {
                wait::Step::Spin => {
                    std::hint::spin_loop();
                    #[cfg(loom)]
                    crate::sync::thread::yield_now();
                }
                wait::Step::Yield => clock.yield_now(),
                wait::Step::Sleep(us) => {
                    slack.get_or_insert_with(|| clock.precise_sleeps());
                    clock.sleep_us(us);
                }
            }
        }
    }

    /// Latches the process: from now on nothing is released to the platform. Every buffer the device may
    /// still touch is parked at once: the session's launch buffer, the stamp area of the submission in
    /// flight and the device printf buffer (listed by handle), and the platform's own buffers of the
    /// queue — its ring, descriptors, constant banks (counted as untracked: they have no handle). Every
    /// later free parks. `why` is returned, and kept as the latch's cause ([`Runtime::latch_cause`]).
    pub(crate) fn latch<T>(&self, why: Error) -> Result<T> {
        self.set_latch_cause(&why);
        if !self.latched.swap(true, Ordering::SeqCst) {
            let platform_buffers = self
                .installed()
                .ok()
                .and_then(|i| i.platform.queue().map(|q| q.in_flight_buffers()))
                .unwrap_or_default();
            // Taken before the session's mutex, in the order the printf drain takes them.
            let printf = self.printf.buffer_handle();
            let mut s = sync::lock(&self.session);
            let stamps =
                s.in_flight_stamps.and_then(|va| s.buffers.iter().find(|(_, b)| b.alloc.va == va).map(|(h, _)| h));
            let markers = s.markers.map(|(h, _)| h);
            for h in markers.into_iter().chain(stamps).chain(printf) {
                if let Ok(b) = s.buffers.check_mut(h) {
                    if !b.parked {
                        b.parked = true;
                        let bytes = b.alloc.bytes;
                        Self::park(&mut s, h, bytes);
                    }
                }
            }
            for b in platform_buffers {
                s.park.buffers += 1;
                s.park.untracked += 1;
                s.park.bytes += b.bytes;
            }
        }
        Err(why)
    }

    /// Records what a loaded kernel needs, under its code address. Caller holds the lock. Refused (stage
    /// `load`) unless the entry, its code bytes and every constant bank lie inside the one live code buffer
    /// that holds the entry: every launch of that address has the GPU fetch and read those ranges, so they
    /// must stay mapped for as long as the record lives, and it dies with that buffer (free, close).
    pub fn register_kernel(&self, code_va: u64, meta: KernelMeta) -> Result<()> {
        self.require_lock(Stage::Load)?;
        let mut s = sync::lock(&self.session);
        let buffer = s.code_ranges.range(..=code_va).next_back().filter(|(va, len)| code_va - **va < **len);
        let Some((base, end)) = buffer.map(|(va, len)| (*va, *va + *len)) else {
            drop(s);
            return Err(Error::Load(LoadError::EntryOutsideCode { va: code_va }.for_kernel(&meta.name)));
        };
        if meta.code_bytes > end - code_va {
            drop(s);
            let why = LoadError::CodePastBuffer { bytes: meta.code_bytes, va: code_va, left: end - code_va };
            return Err(Error::Load(why.for_kernel(&meta.name)));
        }
        for b in &meta.const_banks {
            let bytes = u64::from(b.bytes).next_multiple_of(16);
            if b.va < base || b.va.checked_add(bytes).is_none_or(|e| e > end) {
                drop(s);
                let why = LoadError::BankOutsideCode { index: b.index, bytes: b.bytes, va: b.va };
                return Err(Error::Load(why.for_kernel(&meta.name)));
            }
        }
        s.templates.insert(code_va, Arc::new(meta));
        Ok(())
    }

    /// The marker slots of the session's launch buffer (for command lists).
    pub(crate) fn session_markers(&self) -> Option<[MarkerSlot; 2]> {
        sync::lock(&self.session).markers.map(|(_, a)| marker_slots(&a))
    }
}

/// The message a panic carried.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(s), _) => (*s).to_owned(),
        (_, Some(s)) => s.clone(),
        _ => "a panic without a message".to_owned(),
    }
}

fn marker_slots(a: &omega_hal::Allocation) -> [MarkerSlot; 2] {
    // The marker buffer is at least one page, so the second marker at +16 is inside it.
    [MarkerSlot { va: a.va, cpu: a.cpu }, MarkerSlot { va: a.va + 16, cpu: a.cpu.wrapping_add(16) }]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Residency follows the register file, the threads and shared memory, whichever runs out first: the
    /// bf16 SwiGLU's 37 registers (declared as 40) leave 6 CTAs of 256 threads an SM, not 8.
    #[test]
    fn resident_ctas_take_the_scarcest_of_registers_threads_and_shared_memory() {
        let k = |registers, static_shared_bytes| KernelMeta { registers, static_shared_bytes, ..NO_TEMPLATE.clone() };
        assert_eq!(resident_ctas(&k(32, 1024), 256, 0), 8);
        assert_eq!(resident_ctas(&k(37, 1024), 256, 0), 6);
        assert_eq!(resident_ctas(&k(64, 1024), 256, 0), 4);
        assert_eq!(resident_ctas(&k(168, 1024), 384, 229 * 1024), 1);
        assert_eq!(resident_ctas(&k(32, 1024), 128, 100 * 1024), 2);
        assert_eq!(resident_ctas(&k(16, 1024), 32, 0), 32, "at most 32 CTAs an SM");
    }

    /// A loaded kernel using all 255 registers is declared as 256 and fits the sm_90 limit; one past
    /// that rounds to 264 and does not, whichever path (Rust's own count, or C's floor) declares it.
    #[test]
    fn a_255_register_kernel_rounds_to_the_256_the_limit_takes() {
        let max = omega_hal::LaunchLimits::SM_90.max_registers;
        let own = |registers| KernelMeta { registers, ..NO_TEMPLATE.clone() };
        assert_eq!(launch_gpr(0, &own(255)), 256);
        assert_eq!(launch_gpr(0, &own(255)), max);
        assert_eq!(launch_gpr(255, &NO_TEMPLATE), 256);
        assert_eq!(launch_gpr(0, &own(257)), 264);
        assert!(launch_gpr(0, &own(257)) > max);
        assert_eq!(launch_gpr(0, &own(16)), 16, "a loaded kernel keeps its own count, without the floor");
    }
}
