//! Submission on the simulator: checks each launch against the sm_90 model's limits and schedules it; the
//! completion polls then run the host kernels slice by slice as virtual time passes and release the markers.

use std::collections::VecDeque;

use super::kernel::{parse_code_image, parse_code_image_symbols, HostKernel, KernelCtx, KernelError};
use super::{LaunchRecord, Sim, SimFault, State};
use crate::error::HalError;
use crate::poll::{xid_name, ChannelFault, MarkerSlot};
use crate::queue::{QueueBuffer, Submission, SubmitQueue};
use crate::sync;
use crate::Clock;

/// Slices one poll runs at most, so a poll after a long sleep (or a test's jump of the clock) returns in
/// bounded time; the rest run at the next polls.
const SLICES_PER_POLL: u32 = 64;

/// A submission whose markers have not all been released.
pub(crate) struct Pending {
    pub(crate) markers: [MarkerSlot; 2],
    pub(crate) sequence: u32,
    stamps: Option<MarkerSlot>,
    /// Launches not finished yet, in submission order.
    work: VecDeque<Run>,
    /// Virtual time the last slice ended (the submission's start before the first).
    clock_ns: u64,
    /// A launch hung or faulted: nothing more runs and the markers never arrive.
    stopped: bool,
    /// Virtual times at which each marker is released, known once the work is done.
    due: [Option<u64>; 2],
    released: [bool; 2],
}

/// One launch of a submission, with how far its host kernel got.
struct Run {
    /// Its index in the submission (its stamp slot).
    index: usize,
    /// The host kernel, or the fault its code address makes (no code image, no kernel of that name).
    kernel: Result<HostKernel, KernelError>,
    /// What the simulator reports of it; the times and slices are filled in as it runs.
    record: LaunchRecord,
    /// The addresses its code image carries (read at submit, as the hardware reads the code it runs).
    symbols: Vec<(String, u64)>,
    /// Work units its kernel took so far.
    done: u64,
}

impl SubmitQueue for Sim {
    unsafe fn submit(&self, s: &Submission<'_>) -> Result<(), HalError> {
        let start = self.clock.now_ns();
        let mut st = sync::lock(&self.state);
        if !st.open {
            return Err(HalError::NoDevice("sim: device not open".into()));
        }
        if st.stopped {
            return Err(HalError::Lost("sim: the work was stopped; close and reopen the device".into()));
        }
        // What the model cannot run is refused before anything is scheduled, as the QMD encoder refuses it.
        let limits = crate::Platform::caps(self).launch;
        for (i, l) in s.launches.iter().enumerate().filter(|(_, l)| !l.skip) {
            if let Err(e) = limits.check(l) {
                return Err(HalError::Unsupported(format!("sim: launch {i}: {e}")));
            }
        }
        st.stats.submissions += 1;
        let mut p = Pending {
            markers: s.markers,
            sequence: s.sequence,
            stamps: s.stamps,
            work: VecDeque::new(),
            clock_ns: start,
            stopped: false,
            due: [None; 2],
            released: [false; 2],
        };
        if st.take_fault(|f| *f == SimFault::Hang).is_some() {
            p.stopped = true;
        } else if let Some(SimFault::KernelFault(xid)) = st.take_fault(|f| matches!(f, SimFault::KernelFault(_))) {
            st.channel_fault = Some(ChannelFault { xid, name: xid_name(xid), detail: "injected kernel fault".into() });
            p.stopped = true;
        } else {
            for (index, l) in s.launches.iter().enumerate().filter(|(_, l)| !l.skip) {
                let image = st.memory.find(l.code_va).and_then(|(a, off)| {
                    let code = &a.device.bytes()[off as usize..];
                    parse_code_image(code).map(|name| (name.to_owned(), parse_code_image_symbols(code)))
                });
                let (name, symbols) = image.map_or((None, Vec::new()), |(name, symbols)| (Some(name), symbols));
                let kernel = match &name {
                    None => Err(KernelError::Fault {
                        xid: 13,
                        detail: format!("no simulator code image at {:#x} (illegal instruction)", l.code_va),
                    }),
                    Some(name) => sync::lock(&self.kernels).get(name).cloned().ok_or_else(|| KernelError::Fault {
                        xid: 13,
                        detail: format!("kernel `{name}` has no host implementation registered with the simulator"),
                    }),
                };
                // `l.const_banks` is not kept: a simulated kernel is a host function that holds its constant
                // data itself and finds its `__device__` data through the addresses its code image carries.
                // The argument words are copied, as the hardware copies them into the bank.
                let record = LaunchRecord {
                    kernel: name.unwrap_or_default(),
                    code_va: l.code_va,
                    gpr_count: l.gpr_count,
                    block: l.block,
                    grid: l.grid,
                    shared_bytes: l.shared_bytes,
                    dynamic_shared_bytes: l.dynamic_shared_bytes,
                    local_bytes_per_thread: l.local_bytes_per_thread,
                    features: l.features,
                    num_elements: l.num_elements,
                    args: l.args.to_vec(),
                    order: l.order,
                    start_ns: 0,
                    end_ns: 0,
                    slices: 0,
                };
                p.work.push_back(Run { index, kernel, record, symbols, done: 0 });
            }
        }
        st.pending = Some(p);
        Ok(())
    }

    fn in_flight_buffers(&self) -> Vec<QueueBuffer> {
        // The simulator keeps a submission's pending work and markers in host memory of its own and in
        // the session's buffers: it has no ring, descriptors or constant banks in device memory.
        Vec::new()
    }
}

impl Sim {
    /// Runs the slices of the pending submission whose virtual end is at or before `now` (at most
    /// [`SLICES_PER_POLL`]), then releases each marker whose time has come.
    pub(crate) fn advance(&self, st: &mut State, now: u64) {
        let Some(mut p) = st.pending.take() else { return };
        let mut budget = SLICES_PER_POLL;
        while budget > 0 && !p.stopped {
            let Some(run) = p.work.front_mut() else { break };
            if run.record.slices == 0 {
                run.record.start_ns = p.clock_ns;
            }
            let length = if run.record.slices == 0 { self.config.launch_ns } else { self.config.slice_ns };
            let end = p.clock_ns.saturating_add(length);
            if end > now {
                break;
            }
            budget -= 1;
            let outcome = match &run.kernel {
                Err(e) => Err(e.clone()),
                Ok(kernel) => {
                    let mut ctx = KernelCtx {
                        block: run.record.block,
                        grid: run.record.grid,
                        cluster: run.record.features.cluster,
                        dynamic_shared_bytes: run.record.dynamic_shared_bytes,
                        args: &run.record.args,
                        start_ns: run.record.start_ns,
                        launch_ns: self.config.launch_ns,
                        done: run.done,
                        budget: self.config.slice_units,
                        more: false,
                        symbols: &run.symbols,
                        memory: &mut st.memory,
                    };
                    let r = kernel(&mut ctx);
                    run.done = ctx.done;
                    r.map(|()| ctx.more)
                }
            };
            run.record.slices += 1;
            run.record.end_ns = end;
            p.clock_ns = end;
            match outcome {
                Ok(true) => continue,
                Ok(false) => {
                    if let Some(stamps) = p.stamps {
                        // SAFETY: submit's caller promised the stamp area stays live, 16 bytes per launch,
                        // until both markers are observed; they are not released before this.
                        unsafe { write_release(stamps.cpu.add(16 * run.index), p.sequence, end) };
                    }
                }
                Err(KernelError::Hang) => p.stopped = true,
                Err(KernelError::Fault { xid, detail }) => {
                    st.channel_fault = Some(ChannelFault { xid, name: xid_name(xid), detail });
                    p.stopped = true;
                }
            }
            let run = p.work.pop_front().expect("the front launch ran");
            if run.kernel.is_ok() {
                st.stats.launches += 1;
                if st.launches.len() == super::LAUNCH_RECORDS {
                    st.launches.pop_front();
                }
                st.launches.push_back(run.record);
            }
        }
        if p.work.is_empty() && !p.stopped && p.due[0].is_none() {
            p.due = [Some(p.clock_ns), Some(p.clock_ns.saturating_add(self.config.idle_ns))];
        }
        for i in 0..2 {
            if let Some(due) = p.due[i].filter(|d| !p.released[i] && *d <= now) {
                // SAFETY: submit's caller promised the markers stay live until observed.
                unsafe { write_release(p.markers[i].cpu, p.sequence, due) };
                p.released[i] = true;
            }
        }
        st.pending = Some(p);
    }
}

/// Writes a four-word semaphore release: payload at +0, timestamp at +8.
///
/// # Safety
/// `p` points to 16 writable bytes, 8-byte aligned.
pub(crate) unsafe fn write_release(p: *mut u8, payload: u32, timestamp: u64) {
    // SAFETY: the caller guarantees 16 writable, aligned bytes at `p`.
    unsafe {
        (p.add(8) as *mut u64).write_volatile(timestamp);
        (p as *mut u32).write_volatile(payload);
    }
}
