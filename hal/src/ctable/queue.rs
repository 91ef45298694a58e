//! Submission through a C table: a [`Submission`] flattened into [`OmegaGpuSubmission`] (pointer-and-length
//! pairs into arrays that live for the call), and back.

use super::TablePlatform;
use super::{
    f, order, OmegaGpuConstBank, OmegaGpuLaunchDesc, OmegaGpuMarker, OmegaGpuPlatformError, OmegaGpuSubmission,
};
use crate::caps::Refusal;
use crate::error::HalError;
use crate::queue::{ConstBank, LaunchDesc, LaunchFeatures, Order, QueueBuffer, Submission, SubmitQueue};
use crate::sync::{self, Mutex};

use super::{read_c_text, OmegaGpuQueueBuffer};

/// `o` as C spells it (`OMEGA_GPU_ORDER_*`).
pub fn order_code(o: Order) -> u32 {
    match o {
        Order::AfterPrevious => order::AFTER_PREVIOUS,
        Order::Independent => order::INDEPENDENT,
        Order::Unordered => order::UNORDERED,
    }
}

/// The order C code `code` names, if any.
pub fn order_from_code(code: u32) -> Option<Order> {
    match code {
        order::AFTER_PREVIOUS => Some(Order::AfterPrevious),
        order::INDEPENDENT => Some(Order::Independent),
        order::UNORDERED => Some(Order::Unordered),
        _ => None,
    }
}

/// A submission as C lays it out, with the arrays its pointers point into.
pub(crate) struct Flat {
    launches: Vec<OmegaGpuLaunchDesc>,
    /// Every launch's constant banks, one after another; never grown once `launches` points into it.
    _banks: Vec<OmegaGpuConstBank>,
    pub(crate) submission: OmegaGpuSubmission,
}

impl Flat {
    /// `s` flattened. The pointers in the result point into `s` (argument words) and into the result's
    /// own arrays, so it is valid while both live and the result is not moved out of its box.
    pub(crate) fn new(s: &Submission<'_>) -> Box<Flat> {
        let banks: Vec<OmegaGpuConstBank> = s
            .launches
            .iter()
            .flat_map(|l| l.const_banks.iter())
            .map(|b| OmegaGpuConstBank { index: b.index, bytes: b.bytes, va: b.va })
            .collect();
        let mut next_bank = 0usize;
        let launches: Vec<OmegaGpuLaunchDesc> = s
            .launches
            .iter()
            .map(|l| {
                let first = next_bank;
                next_bank += l.const_banks.len();
                OmegaGpuLaunchDesc {
                    code_va: l.code_va,
                    code_bytes: l.code_bytes,
                    gpr_count: l.gpr_count,
                    block: l.block,
                    grid: l.grid,
                    shared_bytes: l.shared_bytes,
                    dynamic_shared_bytes: l.dynamic_shared_bytes,
                    local_bytes_per_thread: l.local_bytes_per_thread,
                    barrier_count: l.barrier_count,
                    num_elements: l.num_elements,
                    order: order_code(l.order),
                    skip: u32::from(l.skip),
                    args: l.args.as_ptr(),
                    n_args: l.args.len(),
                    const_banks: if l.const_banks.is_empty() { core::ptr::null() } else { banks[first..].as_ptr() },
                    n_const_banks: l.const_banks.len(),
                }
            })
            .collect();
        let stamps = s.stamps.as_ref().map(OmegaGpuMarker::from_hal);
        let submission = OmegaGpuSubmission {
            launches: launches.as_ptr(),
            n_launches: launches.len(),
            markers: [OmegaGpuMarker::from_hal(&s.markers[0]), OmegaGpuMarker::from_hal(&s.markers[1])],
            stamps: stamps.unwrap_or(OmegaGpuMarker { va: 0, cpu: core::ptr::null_mut() }),
            sequence: s.sequence,
            reserved: 0,
        };
        // The vectors' heap buffers do not move when the vectors move into the box.
        Box::new(Flat { launches, _banks: banks, submission })
    }

    /// How many launches.
    pub(crate) fn len(&self) -> usize {
        self.launches.len()
    }
}

/// A slice from a C pointer-and-length pair (NULL with length 0 is the empty slice).
///
/// # Safety
/// - When `n` is not 0, `p` points to `n` readable, initialised `T`s that stay valid and unchanged for `'a`.
unsafe fn slice<'a, T>(p: *const T, n: usize) -> &'a [T] {
    if n == 0 {
        return &[];
    }
    // SAFETY: the caller promised `n` valid `T`s at `p` for `'a`; `n` is not 0, so `p` is not NULL.
    unsafe { core::slice::from_raw_parts(p, n) }
}

/// The HAL's view of a C submission: what [`Submission`] borrows, owned for the call.
pub(crate) struct Unflat<'a> {
    banks: Vec<Vec<ConstBank>>,
    launches: &'a [OmegaGpuLaunchDesc],
    markers: [crate::poll::MarkerSlot; 2],
    stamps: Option<crate::poll::MarkerSlot>,
    sequence: u32,
}

impl<'a> Unflat<'a> {
    /// Reads `s`, refusing a launch whose order no constant has.
    ///
    /// # Safety
    /// - `s.launches` points to `s.n_launches` launch descriptors, and each descriptor's `args` and
    ///   `const_banks` to `n_args` words and `n_const_banks` banks, all valid and unchanged for `'a`.
    pub(crate) unsafe fn new(s: &'a OmegaGpuSubmission) -> Result<Unflat<'a>, Refusal> {
        // SAFETY: forwarded from the caller.
        let launches = unsafe { slice(s.launches, s.n_launches) };
        let mut banks = Vec::with_capacity(launches.len());
        for l in launches {
            order_from_code(l.order).ok_or(Refusal::BadValue("OmegaGpuLaunchDesc.order"))?;
            // SAFETY: forwarded from the caller.
            let c = unsafe { slice(l.const_banks, l.n_const_banks) };
            banks.push(c.iter().map(|b| ConstBank { index: b.index, va: b.va, bytes: b.bytes }).collect());
        }
        let stamps = (!s.stamps.cpu.is_null()).then(|| s.stamps.to_hal());
        Ok(Unflat {
            banks,
            launches,
            markers: [s.markers[0].to_hal(), s.markers[1].to_hal()],
            stamps,
            sequence: s.sequence,
        })
    }

    /// Runs `submit` with the submission in the HAL's terms.
    ///
    /// # Safety
    /// - As for [`Unflat::new`]: every `args` pointer of the launches is valid for `'a`.
    pub(crate) unsafe fn with<R>(&self, submit: impl FnOnce(&Submission<'_>) -> R) -> R {
        let descs: Vec<LaunchDesc<'_>> = self
            .launches
            .iter()
            .zip(&self.banks)
            .map(|(l, banks)| LaunchDesc {
                code_va: l.code_va,
                code_bytes: l.code_bytes,
                gpr_count: l.gpr_count,
                block: l.block,
                grid: l.grid,
                shared_bytes: l.shared_bytes,
                dynamic_shared_bytes: l.dynamic_shared_bytes,
                local_bytes_per_thread: l.local_bytes_per_thread,
                barrier_count: l.barrier_count,
                // `OmegaGpuLaunchDesc` carries no cluster or carve-out (its platforms declare none).
                features: LaunchFeatures::NONE,
                num_elements: l.num_elements,
                // SAFETY: `Unflat::new`'s caller promised `n_args` valid words at `args` for `'a`.
                args: unsafe { slice(l.args, l.n_args) },
                const_banks: banks,
                order: order_from_code(l.order).expect("checked in Unflat::new"),
                skip: l.skip != 0,
            })
            .collect();
        submit(&Submission { launches: &descs, markers: self.markers, sequence: self.sequence, stamps: self.stamps })
    }
}

impl SubmitQueue for TablePlatform {
    unsafe fn submit(&self, s: &Submission<'_>) -> Result<(), HalError> {
        // A cluster or a carve-out has no word in `OmegaGpuLaunchDesc`: refused rather than dropped (the
        // table platform's limits, `max_cluster_ctas` 1 and `max_carveout_kib` 0, refuse them earlier).
        if let Some(i) = s.launches.iter().position(|l| l.features != LaunchFeatures::NONE) {
            return Err(HalError::Unsupported(format!(
                "table platform: launch {i} asks for {:?}; OmegaGpuLaunchDesc has no cluster or carve-out words",
                s.launches[i].features
            )));
        }
        let flat = Flat::new(s);
        debug_assert_eq!(flat.len(), s.launches.len());
        let mut err = OmegaGpuPlatformError::NONE;
        // SAFETY: the caller holds the lock with the device open, every address the submission names stays
        // allocated until its markers are observed, and the previous submission completed
        // (SubmitQueue::submit's contract): OmegaGpuSubmitService's rules. `flat` points into `s` and into
        // its own arrays, both alive for the call, which is as long as the callback may read them.
        match unsafe { f(self.table.submit.submit)(self.ctx(), &flat.submission, &mut err) } {
            0 => Ok(()),
            _ => Err(err.to_hal("submit", 0)),
        }
    }

    fn in_flight_buffers(&self) -> Vec<QueueBuffer> {
        let call = f(self.table.submit.in_flight_buffers);
        let none = OmegaGpuQueueBuffer { va: 0, bytes: 0, what: [0; 64] };
        let mut room = vec![none; 16];
        loop {
            // SAFETY: OmegaGpuSubmitService's `in_flight_buffers` may be called under the session lock (the
            // HAL's caller asks at a latch, holding it) and writes at most `room.len()` entries to `room`.
            let n = unsafe { call(self.ctx(), room.as_mut_ptr(), room.len()) };
            if n <= room.len() {
                room.truncate(n);
                break;
            }
            room = vec![none; n];
        }
        room.iter().map(|b| QueueBuffer { what: intern(read_c_text(&b.what)), va: b.va, bytes: b.bytes }).collect()
    }
}

/// What a C table names its buffers, as the static strings [`QueueBuffer`] holds: each distinct name is
/// kept once for the life of the process (a platform has a handful).
fn intern(name: String) -> &'static str {
    static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut names = sync::lock(&NAMES);
    if let Some(n) = names.iter().find(|n| **n == name) {
        return n;
    }
    let leaked: &'static str = Box::leak(name.into_boxed_str());
    names.push(leaked);
    leaked
}

/// Writes up to `max` of `buffers` to `out` as C lays them out and returns how many there are.
///
/// # Safety
/// - `out` points to `max` writable `OmegaGpuQueueBuffer`s, or `max` is 0.
pub(crate) unsafe fn write_queue_buffers(buffers: &[QueueBuffer], out: *mut OmegaGpuQueueBuffer, max: usize) -> usize {
    for (i, b) in buffers.iter().take(max).enumerate() {
        let mut c = OmegaGpuQueueBuffer { va: b.va, bytes: b.bytes, what: [0; 64] };
        super::write_c_text(&mut c.what, b.what);
        // SAFETY: `i < max`, and the caller promised `max` writable entries at `out`.
        unsafe { out.add(i).write(c) };
    }
    buffers.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctable::export;
    use crate::sim::Sim;

    /// A platform's own buffers, more than the runtime's first ask has room for.
    unsafe extern "C" fn twenty(_ctx: *mut core::ffi::c_void, out: *mut OmegaGpuQueueBuffer, max: usize) -> usize {
        let all: Vec<QueueBuffer> =
            (0..20u64).map(|i| QueueBuffer { what: "ring", va: 0x1000 * (i + 1), bytes: 4096 }).collect();
        // SAFETY: the caller passes `max` writable entries at `out`.
        unsafe { write_queue_buffers(&all, out, max) }
    }

    #[test]
    fn in_flight_buffers_cross_the_table_however_many_there_are() {
        let mut table = export(Sim::new());
        let sims_own = table.submit.in_flight_buffers.unwrap();
        // SAFETY: `export`'s callback with its own ctx and room for none: it only counts.
        assert_eq!(unsafe { sims_own(table.ctx, core::ptr::null_mut(), 0) }, 0, "the simulator keeps none");
        table.submit.in_flight_buffers = Some(twenty);
        // SAFETY: every other callback is the simulator's own; `twenty` keeps the service's rule.
        let p = unsafe { TablePlatform::new(&table, "twenty") }.unwrap();
        let got = p.in_flight_buffers();
        assert_eq!(got.len(), 20, "asked again with room for all");
        assert_eq!(got[19], QueueBuffer { what: "ring", va: 0x14000, bytes: 4096 });
        drop(p);
        // SAFETY: the table was never adopted, so its release is still ours to call, once.
        unsafe { (table.release.unwrap())(table.ctx) };
    }
}
