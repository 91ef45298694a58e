//! Submission: each launch becomes a QMD V04 and a constant bank 0 in the command arena (video memory,
//! written through BAR1), handed to the compute engine with SEND_PCAS; the two completion markers follow.
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
//!   each QMD names the next as its dependent with action SCHEDULE, so the compute engine itself starts
//!   launch `i + 1` when launch `i` completes; only the first is sent with SEND_PCAS. Nothing waits on
//!   the host side between launches. Marker 1 then first acquires marker 0 (the chain's last release), so
//!   it cannot overtake a chain the idle wait might not see.
//! - **Idle release** (any other mix, or [`Barrier::IdleRelease`]): before each launch that must wait, a
//!   host semaphore release with wait-for-idle to a scratch word; the PBDMA processes nothing after it
//!   until the engine is idle. Independent launches are consecutive SEND_PCAS pairs and may overlap.

use super::channel::{write_words, SEM_BARRIER};
use super::device::{LOCAL_WINDOW, SHARED_WINDOW};
use super::push::{host, Push};
use super::qmd::{self, Cbuf0Params, DependentAction, QmdParams, QMD_WORDS};
use super::{Nvidia, Open};
use crate::error::HalError;
use crate::queue::{Order, Submission, SubmitQueue};
use crate::sync;

/// How `Order::AfterPrevious` is enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Barrier {
    /// QMD chaining when every launch after the first waits for the one before, idle releases otherwise.
    Auto,
    /// Always an idle-waiting host release before a dependent launch.
    IdleRelease,
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
    arch: &super::arch::Arch,
    cache: &mut std::collections::HashMap<QmdKey, [u32; QMD_WORDS]>,
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

/// Whether a submission can be one QMD chain: more than one live launch and each after the first waiting
/// for its predecessor.
pub(crate) fn is_chain(orders: &[Order]) -> bool {
    orders.len() > 1 && orders[1..].iter().all(|&o| o == Order::AfterPrevious)
}

impl Open {
    fn encode_error(i: usize, e: qmd::QmdError) -> HalError {
        HalError::Unsupported(format!("launch {i}: {e}"))
    }

    pub(crate) fn submit(&mut self, s: &Submission<'_>, barrier: Barrier) -> Result<(), HalError> {
        if let Some(n) = self.channel.error() {
            return Err(HalError::Lost(super::channel::describe_error(&n)));
        }
        let arch = self.arch;
        let live: Vec<usize> = (0..s.launches.len()).filter(|&i| !s.launches[i].skip).collect();
        let mut push = Push::new();

        let need = live.iter().map(|&i| s.launches[i].local_bytes_per_thread).max().unwrap_or(0);
        if need > 0 {
            // The session may count the 0x240 bytes above the stack top or not; cover both.
            self.ensure_slm(need + arch.stack_headroom, &mut push)?;
        }
        push.invalidate_shader_caches();

        // Constant banks first: their sizes fix the slot layout.
        let mut cbufs: Vec<Vec<u32>> = Vec::with_capacity(live.len());
        for &i in &live {
            let l = &s.launches[i];
            let mut words = Vec::new();
            let p = Cbuf0Params {
                block: l.block,
                grid: l.grid,
                shared_window: SHARED_WINDOW,
                local_window: LOCAL_WINDOW,
                dynamic_shared_bytes: l.dynamic_shared_bytes,
            };
            qmd::fill_cbuf0(arch, &p, l.args, &mut words);
            cbufs.push(words);
        }
        let qmd_bytes = arch.qmd_bytes as u64;
        let mut offsets = Vec::with_capacity(live.len());
        let mut total = 0u64;
        for c in &cbufs {
            offsets.push(total);
            total += slot_bytes(qmd_bytes, c.len() as u64 * 4);
        }
        let push_room = push.bytes() + 256 + 64 * live.len() as u64;
        let (base_va, base_cpu) = self.arena_reserve(total + push_room, 256)?;

        let orders: Vec<Order> = live.iter().map(|&i| s.launches[i].order).collect();
        let chain = barrier == Barrier::Auto && is_chain(&orders);
        let cbuf_off = qmd_bytes.next_multiple_of(64);
        let barrier_va = self.sems.va + SEM_BARRIER;
        for (k, &i) in live.iter().enumerate() {
            let l = &s.launches[i];
            let qmd_va = base_va + offsets[k];
            let cbuf_va = qmd_va + cbuf_off;
            let last = k + 1 == live.len();
            let params = QmdParams {
                program_va: l.code_va,
                program_bytes: l.code_bytes,
                registers: l.gpr_count,
                block: l.block,
                grid: l.grid,
                shared_bytes: l.shared_bytes,
                local_bytes_per_thread: self.slm_per_thread,
                barrier_count: l.barrier_count,
                cbuf0_va: cbuf_va,
                cbuf0_bytes: cbufs[k].len() as u32 * 4,
                release0: last.then_some((s.markers[0].va, s.sequence)),
                release1: s.stamps.map(|st| (st.va + 16 * i as u64, s.sequence)),
                dependent: (chain && !last).then(|| (base_va + offsets[k + 1], DependentAction::Schedule)),
            };
            let q = qmd_from_template(arch, &mut self.qmd_cache, &params).map_err(|e| Self::encode_error(i, e))?;
            // SAFETY: the slot lies inside the reservation (offsets sum to `total`), 256-byte aligned.
            unsafe {
                let slot = base_cpu.add(offsets[k] as usize);
                write_words(slot, &q);
                write_words(slot.add(cbuf_off as usize), &cbufs[k]);
            }
            if k == 0 || !chain {
                if k > 0 && l.order == Order::AfterPrevious {
                    push.release_after_idle(barrier_va, k as u32);
                }
                push.send_pcas(qmd_va);
            }
        }
        if live.is_empty() {
            push.release_after_idle(s.markers[0].va, s.sequence);
        } else if chain {
            // Hold the idle release until the chain's last launch has released marker 0.
            push.host_semaphore(s.markers[0].va, s.sequence as u64, host::SEM_OP_ACQ_CIRC_GEQ);
        }
        push.release_after_idle(s.markers[1].va, s.sequence);
        if push.bytes() > push_room {
            return Err(HalError::Unsupported(format!(
                "pushbuffer of {} bytes outgrew its {push_room}-byte reservation",
                push.bytes()
            )));
        }
        // SAFETY: the pushbuffer goes after the slots, inside the reservation (checked just above).
        unsafe { write_words(base_cpu.add(total as usize), push.words()) };
        // SAFETY: the doorbell is this device's; the commands are written; the session's contract keeps one
        // submission in flight.
        unsafe { self.channel.kick(self.usermode, base_va + total, push.words().len() as u32) };
        self.submissions += 1;
        Ok(())
    }
}

impl SubmitQueue for Nvidia {
    unsafe fn submit(&self, s: &Submission<'_>) -> Result<(), HalError> {
        let mut st = sync::lock(&self.state);
        let open = st.as_mut().ok_or_else(|| HalError::NoDevice("nvidia: device not open".into()))?;
        open.submit(s, self.config().barrier)
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
        use super::super::arch::HOPPER;
        let mut cache = std::collections::HashMap::new();
        let base = QmdParams {
            program_va: 0x10_0004_0000,
            program_bytes: 512,
            registers: 16,
            block: [256, 1, 1],
            grid: [4097, 1, 1],
            shared_bytes: 1024,
            local_bytes_per_thread: 0x240,
            barrier_count: 1,
            cbuf0_va: 0x10_0000_0180,
            cbuf0_bytes: 0x230,
            release0: Some((0x10_0001_0000, 7)),
            release1: Some((0x10_0001_0040, 7)),
            dependent: Some((0x10_0000_0400, DependentAction::Schedule)),
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

    #[test]
    fn only_pure_dependency_chains_are_chained() {
        use Order::*;
        assert!(!is_chain(&[AfterPrevious]), "one launch needs no chain");
        assert!(is_chain(&[AfterPrevious, AfterPrevious, AfterPrevious]));
        assert!(is_chain(&[Independent, AfterPrevious]), "the first launch's order is moot");
        assert!(!is_chain(&[AfterPrevious, Independent, AfterPrevious]));
        assert!(!is_chain(&[AfterPrevious, Unordered]));
    }
}
