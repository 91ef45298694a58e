//! The fake backend: no device and no runtime. It computes `a + b` on the CPU through the same steps a
//! device backend takes, and fails on request at any step, so every failure the engine can name is reachable
//! from a test (and from the C layer's tests).

use std::collections::VecDeque;

use super::backend::{Backend, CompletedLaunch, LaunchFailure, StepCause, Unready};
use super::types::{BackendDiag, Timeouts, Wait, BACKEND_FAKE};
use crate::sync::{self, Arc, Mutex};

/// A failure to inject; each is consumed by the first step it applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FakeFault {
    /// Prepare: the device is not usable.
    Unavailable,
    /// Prepare: the device is latched.
    Latched,
    /// Alloc fails.
    Alloc,
    /// Upload fails.
    Upload,
    /// The launch is refused before submit.
    Refuse,
    /// This wait runs out.
    Timeout(Wait),
    /// The poll in this wait is refused.
    RefusePoll(Wait),
    /// A cancel arrives in this wait.
    Cancel(Wait),
    /// The channel reports this Xid during this wait.
    Fault(Wait, u32),
    /// Readback fails.
    Readback,
    /// The kernel "runs" but leaves the output poisoned (a wrong result the engine cannot see; tests use it
    /// to show that the caller's check against a reference is what catches it).
    SkipCompute,
}

/// What the fake did, for tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FakeStats {
    /// Calls of each step, in engine order: prepare, alloc, upload, launch, readback, release.
    pub calls: [u32; 6],
    /// Buffers held now.
    pub live_buffers: u32,
    /// Launches that completed.
    pub completed: u32,
}

#[derive(Default)]
struct Inner {
    faults: VecDeque<FakeFault>,
    /// a, b, out, as the fake "device" holds them.
    device: Option<[Vec<f32>; 3]>,
    stats: FakeStats,
    diag: BackendDiag,
    clock_ns: u64,
    sequence: u32,
}

impl Inner {
    fn take(&mut self, pick: impl Fn(&FakeFault) -> bool) -> Option<FakeFault> {
        let i = self.faults.iter().position(pick)?;
        self.faults.remove(i)
    }

    /// Time moves 1 us per look, so runs are deterministic.
    fn tick(&mut self) -> u64 {
        self.clock_ns += 1_000;
        self.clock_ns
    }
}

/// The fake backend. A cheap handle: clones share one fake, so a test keeps one to inject faults into the
/// one it handed to [`super::set_backend`].
#[derive(Clone, Default)]
pub struct FakeBackend {
    inner: Arc<Mutex<Inner>>,
}

impl core::fmt::Debug for FakeBackend {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FakeBackend").field("stats", &self.stats()).finish()
    }
}

impl FakeBackend {
    /// A fake with no faults queued.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues a fault.
    pub fn inject(&self, fault: FakeFault) {
        sync::lock(&self.inner).faults.push_back(fault);
    }

    /// Faults queued and not yet fired.
    pub fn pending_faults(&self) -> usize {
        sync::lock(&self.inner).faults.len()
    }

    /// What it did.
    pub fn stats(&self) -> FakeStats {
        sync::lock(&self.inner).stats.clone()
    }
}

impl Backend for FakeBackend {
    fn kind(&self) -> u32 {
        BACKEND_FAKE
    }

    fn now_ns(&self) -> u64 {
        sync::lock(&self.inner).tick()
    }

    fn prepare(&mut self) -> Result<(), Unready> {
        let mut s = sync::lock(&self.inner);
        s.stats.calls[0] += 1;
        s.diag = BackendDiag { backend: BACKEND_FAKE, ..Default::default() };
        match s.take(|f| matches!(f, FakeFault::Unavailable | FakeFault::Latched)) {
            Some(FakeFault::Unavailable) => Err(Unready::Unavailable(StepCause::FakeUnavailable)),
            Some(_) => Err(Unready::Latched(StepCause::FakeLatched)),
            None => Ok(()),
        }
    }

    fn alloc(&mut self, n: usize) -> Result<(), StepCause> {
        let mut s = sync::lock(&self.inner);
        s.stats.calls[1] += 1;
        if s.take(|f| *f == FakeFault::Alloc).is_some() {
            return Err(StepCause::FakeOutOfMemory);
        }
        s.device = Some([vec![0.0; n], vec![0.0; n], vec![0.0; n]]);
        s.stats.live_buffers = 3;
        s.diag.buffers = 3;
        Ok(())
    }

    fn upload(&mut self, a: &[f32], b: &[f32]) -> Result<(), StepCause> {
        let mut s = sync::lock(&self.inner);
        s.stats.calls[2] += 1;
        if s.take(|f| *f == FakeFault::Upload).is_some() {
            return Err(StepCause::FakeSyncToDevice);
        }
        let d = s.device.as_mut().expect("the engine uploads only after a successful alloc");
        d[0].copy_from_slice(a);
        d[1].copy_from_slice(b);
        d[2].fill(f32::NAN);
        Ok(())
    }

    fn launch(&mut self, n: usize, _timeouts: &Timeouts) -> Result<CompletedLaunch, LaunchFailure> {
        let mut s = sync::lock(&self.inner);
        s.stats.calls[3] += 1;
        let fault = s.take(|f| {
            matches!(
                f,
                FakeFault::Refuse
                    | FakeFault::Timeout(_)
                    | FakeFault::RefusePoll(_)
                    | FakeFault::Cancel(_)
                    | FakeFault::Fault(..)
                    | FakeFault::SkipCompute
            )
        });
        if fault == Some(FakeFault::Refuse) {
            return Err(LaunchFailure::Refused(StepCause::FakeRefused));
        }
        let start = s.tick();
        s.sequence = s.sequence.wrapping_add(1).max(1);
        // The grid runs unless a fault stops it in the KERNEL_DONE wait.
        let runs = !matches!(&fault, Some(FakeFault::SkipCompute))
            && !matches!(&fault, Some(FakeFault::Timeout(Wait::KernelDone) | FakeFault::Fault(Wait::KernelDone, _)));
        if runs {
            let [a, b, out] = s.device.as_mut().expect("the engine launches only after a successful alloc");
            for ((o, x), y) in out.iter_mut().zip(a.iter()).zip(b.iter()).take(n) {
                *o = x + y;
            }
        }
        match fault {
            Some(FakeFault::Timeout(w)) => Err(LaunchFailure::Timeout(w)),
            Some(FakeFault::RefusePoll(w)) => Err(LaunchFailure::PollRefused(w, StepCause::FakePollRefused)),
            Some(FakeFault::Cancel(w)) => Err(LaunchFailure::Cancelled(w)),
            Some(FakeFault::Fault(w, xid)) => {
                s.diag.xid = xid;
                Err(LaunchFailure::Fault { wait: w, xid, detail: StepCause::FakeFault(xid) })
            }
            _ => {
                let kernel_ns = s.tick() - start;
                s.stats.completed += 1;
                let marker = s.sequence;
                s.diag.marker = marker;
                s.diag.kernel_ns = kernel_ns;
                Ok(CompletedLaunch { kernel_ns, marker })
            }
        }
    }

    fn readback(&mut self, out: &mut [f32]) -> Result<(), StepCause> {
        let mut s = sync::lock(&self.inner);
        s.stats.calls[4] += 1;
        if s.take(|f| *f == FakeFault::Readback).is_some() {
            return Err(StepCause::FakeSyncToCpu);
        }
        let d = s.device.as_ref().expect("the engine reads back only after a successful alloc");
        out.copy_from_slice(&d[2][..out.len()]);
        Ok(())
    }

    fn release(&mut self) {
        let mut s = sync::lock(&self.inner);
        s.stats.calls[5] += 1;
        s.device = None;
        s.stats.live_buffers = 0;
    }

    fn diag(&self) -> BackendDiag {
        sync::lock(&self.inner).diag
    }
}
