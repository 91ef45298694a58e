//! Submission on the simulator: runs each launch's host kernel and schedules the markers.

use super::kernel::{parse_code_image, KernelCtx, KernelError};
use super::{LaunchRecord, Sim, SimFault};
use crate::error::HalError;
use crate::poll::{xid_name, ChannelFault, MarkerSlot};
use crate::queue::{QueueBuffer, Submission, SubmitQueue};
use crate::sync;
use crate::Clock;

/// A submission whose markers have not all been released.
pub(crate) struct Pending {
    pub(crate) markers: [MarkerSlot; 2],
    pub(crate) sequence: u32,
    /// Virtual times at which each marker is released; `None` never.
    pub(crate) due: [Option<u64>; 2],
    pub(crate) released: [bool; 2],
}

impl SubmitQueue for Sim {
    unsafe fn submit(&self, s: &Submission<'_>) -> Result<(), HalError> {
        let start = self.clock.now_ns();
        let mut st = sync::lock(&self.state);
        if !st.open {
            return Err(HalError::NoDevice("sim: device not open".into()));
        }
        st.stats.submissions += 1;
        let mut t = start;
        let mut outcome: Result<(), KernelError> = Ok(());
        if st.take_fault(|f| *f == SimFault::Hang).is_some() {
            outcome = Err(KernelError::Hang);
        } else if let Some(SimFault::KernelFault(xid)) = st.take_fault(|f| matches!(f, SimFault::KernelFault(_))) {
            outcome = Err(KernelError::Fault { xid, detail: "injected kernel fault".into() });
        }
        for (i, l) in s.launches.iter().enumerate() {
            if outcome.is_err() {
                break;
            }
            if l.skip {
                continue;
            }
            let name = st
                .memory
                .find(l.code_va)
                .and_then(|(a, off)| parse_code_image(&a.device.bytes()[off as usize..]).map(str::to_owned));
            let Some(name) = name else {
                outcome = Err(KernelError::Fault {
                    xid: 13,
                    detail: format!("no simulator code image at {:#x} (illegal instruction)", l.code_va),
                });
                break;
            };
            let kernel = sync::lock(&self.kernels).get(&name).cloned();
            let Some(kernel) = kernel else {
                outcome = Err(KernelError::Fault {
                    xid: 13,
                    detail: format!("kernel `{name}` has no host implementation registered with the simulator"),
                });
                break;
            };
            // `l.const_banks` is not read: a simulated kernel is a host function that holds its module
            // data itself.
            let mut ctx = KernelCtx {
                block: l.block,
                grid: l.grid,
                dynamic_shared_bytes: l.dynamic_shared_bytes,
                args: l.args,
                start_ns: t,
                launch_ns: self.config.launch_ns,
                memory: &mut st.memory,
            };
            outcome = kernel(&mut ctx);
            let end = t + self.config.launch_ns;
            st.stats.launches += 1;
            if st.launches.len() == super::LAUNCH_RECORDS {
                st.launches.pop_front();
            }
            st.launches.push_back(LaunchRecord {
                kernel: name,
                code_va: l.code_va,
                gpr_count: l.gpr_count,
                block: l.block,
                grid: l.grid,
                shared_bytes: l.shared_bytes,
                dynamic_shared_bytes: l.dynamic_shared_bytes,
                local_bytes_per_thread: l.local_bytes_per_thread,
                args: l.args.to_vec(),
                order: l.order,
                start_ns: t,
                end_ns: end,
            });
            if outcome.is_ok() {
                if let Some(stamps) = s.stamps {
                    // SAFETY: the caller promised the stamp area is live and 16 bytes per launch.
                    unsafe { write_release(stamps.cpu.add(16 * i), s.sequence, end) };
                }
            }
            t = end;
        }
        let due = match outcome {
            Ok(()) => [Some(t), Some(t + self.config.idle_ns)],
            Err(KernelError::Hang) => [None, None],
            Err(KernelError::Fault { xid, detail }) => {
                st.channel_fault = Some(ChannelFault { xid, name: xid_name(xid), detail });
                [None, None]
            }
        };
        st.pending = Some(Pending { markers: s.markers, sequence: s.sequence, due, released: [false; 2] });
        Ok(())
    }

    fn in_flight_buffers(&self) -> Vec<QueueBuffer> {
        // The simulator runs every launch on the host inside `submit` and keeps its pending markers in the
        // session's own buffers: it has no ring, descriptors or constant banks in device memory.
        Vec::new()
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
