//! What a construction of several steps has made, released in reverse order when a step fails.
//!
//! The open sequence (`device.rs`) makes a few dozen RM objects, memory objects and mappings, and a data
//! buffer (`memory.rs`) a memory object, its CPU view and maybe a BAR1 mapping. Each step makes its things through a
//! stage, which records them. A stage dropped before it is kept releases every record in reverse order of making: an
//! RM object with RM_FREE, memory with its mappings and VA range (`Base::release`), a CPU mapping with
//! munmap, a performance boost by clearing it. So a failure at any step releases exactly what the steps
//! before it made, whether it is reported with `?` or the stage goes out of scope any other way, and a
//! failed attempt inside a construction that goes on (an optional copy channel) releases only its own
//! records ([`Stage::nested`]). What the driver refuses while unwinding is ignored: the step's own error
//! is the one reported.
//!
//! Two things are not records. UVM registrations (GPU, VA space, channel) have no undo of their own: UVM
//! drops them with its fds, which close after the stage has unwound, and a channel's with the channel.
//! The low VA a channel registration reserves for UVM is never handed out again, as at close.
//!
//! There are two stages because the memory machinery ([`Base`]) names the device objects, so it can
//! only be built after them: [`RmStage`] records through the RM client alone (device objects, the
//! usermode mapping, the boost), and [`Stage::resume`] takes its records over once `Base` exists.

use super::memory::{DriverMem, DriverMemSpec, MemRecord};
use super::rm::{MapVia, Rm, RmAllocParams};
use super::sys::perf_boost;
use super::Base;
use crate::error::HalError;

/// An RM object made at open and freed at close: (parent, handle, what it is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Object {
    pub(crate) parent: u32,
    pub(crate) handle: u32,
    /// What it is, as close names it ("GPFIFO channel").
    pub(crate) what: &'static str,
}

/// The names of one RM allocation: the step an error reports and what the object is. Made by
/// [`rm_object!`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Named {
    pub(crate) call: &'static str,
    pub(crate) what: &'static str,
}

/// `rm_object!("device")`: the object "device", allocated in the step "RM_ALLOC device".
macro_rules! rm_object {
    ($what:literal) => {
        $crate::nvidia::stage::Named { call: concat!("RM_ALLOC ", $what), what: $what }
    };
}
pub(crate) use rm_object;

/// A thing made through the RM client alone.
#[derive(Debug)]
enum RmRecord {
    Object(Object),
    /// A CPU mapping made by [`Rm::map_cpu`].
    Mapping {
        cpu: *mut u8,
        bytes: u64,
    },
    /// A performance boost asked for on `subdevice`.
    Boost {
        subdevice: u32,
    },
}

impl RmRecord {
    fn release(self, rm: &Rm) {
        #[cfg(test)]
        tests::note(match &self {
            RmRecord::Object(o) => format!("object {}", o.what),
            RmRecord::Mapping { .. } => "mapping".into(),
            RmRecord::Boost { subdevice } => format!("boost {subdevice:#x}"),
        });
        match self {
            RmRecord::Object(o) => {
                let _ = rm.free(o.parent, o.handle, "RM_FREE (unwinding a failed step)");
            }
            RmRecord::Mapping { cpu, bytes } => {
                // SAFETY: the mapping of `bytes` this stage made; its pointer went only to the construction
                // that failed, whose values are dropped unused, so nothing reads or writes it any more.
                unsafe { super::rm::unmap(cpu, bytes) }
            }
            RmRecord::Boost { subdevice } => {
                let _ = rm.perf_boost(subdevice, perf_boost::CMD_CLEAR, 0);
            }
        }
    }
}

/// A thing a [`Stage`] made.
#[derive(Debug)]
enum Record {
    Rm(RmRecord),
    Mem(MemRecord),
}

/// The calls both stages make and record through the RM client.
pub(crate) trait Records {
    /// The client the calls go to.
    fn rm(&self) -> &Rm;

    /// Keeps a record (only this module makes one).
    fn record(&mut self, r: RmRecordToken);

    /// [`Rm::alloc`], recorded.
    fn alloc<P: RmAllocParams>(
        &mut self,
        parent: u32,
        class: P::Class,
        params: &mut P,
        name: Named,
    ) -> Result<u32, HalError> {
        let handle = self.rm().alloc(parent, class, params, name.call)?;
        self.record(RmRecordToken(RmRecord::Object(Object { parent, handle, what: name.what })));
        Ok(handle)
    }

    /// [`Rm::alloc_bare`], recorded.
    fn alloc_bare(&mut self, parent: u32, class: u32, name: Named) -> Result<u32, HalError> {
        let handle = self.rm().alloc_bare(parent, class, name.call)?;
        self.record(RmRecordToken(RmRecord::Object(Object { parent, handle, what: name.what })));
        Ok(handle)
    }

    /// [`Rm::map_cpu`], recorded.
    fn map_cpu(
        &mut self,
        device: u32,
        memory: u32,
        bytes: u64,
        flags: u32,
        via: MapVia,
        call: &'static str,
    ) -> Result<*mut u8, HalError> {
        let cpu = self.rm().map_cpu(device, memory, bytes, flags, via, call)?;
        self.record(RmRecordToken(RmRecord::Mapping { cpu, bytes }));
        Ok(cpu)
    }

    /// [`Rm::perf_boost`] with `flags` for `duration`, recorded (unwinding clears it).
    fn boost(&mut self, subdevice: u32, flags: u32, duration: u32) -> Result<(), HalError> {
        self.rm().perf_boost(subdevice, flags, duration)?;
        self.record(RmRecordToken(RmRecord::Boost { subdevice }));
        Ok(())
    }
}

/// A record on its way into a stage (the records themselves stay private to this module).
#[derive(Debug)]
pub(crate) struct RmRecordToken(RmRecord);

/// The records of a kept [`RmStage`], waiting for [`Stage::resume`].
#[derive(Debug)]
#[must_use = "records not resumed into a Stage are never released"]
pub(crate) struct RmRecords(Vec<RmRecord>);

/// A stage that records through the RM client alone; see the module docs.
pub(crate) struct RmStage<'a> {
    rm: &'a Rm,
    made: Vec<RmRecord>,
}

impl<'a> RmStage<'a> {
    /// An empty stage on `rm`.
    pub(crate) fn new(rm: &'a Rm) -> Self {
        RmStage { rm, made: Vec::new() }
    }

    /// Ends the stage without releasing anything, handing its records on.
    pub(crate) fn keep(mut self) -> RmRecords {
        RmRecords(std::mem::take(&mut self.made))
    }
}

impl Records for RmStage<'_> {
    fn rm(&self) -> &Rm {
        self.rm
    }

    fn record(&mut self, r: RmRecordToken) {
        self.made.push(r.0);
    }
}

impl Drop for RmStage<'_> {
    fn drop(&mut self) {
        while let Some(r) = self.made.pop() {
            r.release(self.rm);
        }
    }
}

/// A stage with the memory machinery; see the module docs.
pub(crate) struct Stage<'a> {
    base: &'a mut Base,
    made: Vec<Record>,
}

impl<'a> Stage<'a> {
    /// An empty stage on `base`.
    pub(crate) fn new(base: &'a mut Base) -> Self {
        Stage { base, made: Vec::new() }
    }

    /// A stage on `base` that also holds what an [`RmStage`] made before `base` existed, released after
    /// this stage's own records.
    pub(crate) fn resume(base: &'a mut Base, earlier: RmRecords) -> Self {
        Stage { base, made: earlier.0.into_iter().map(Record::Rm).collect() }
    }

    /// The memory machinery, for calls that make nothing to record.
    pub(crate) fn base(&mut self) -> &mut Base {
        self.base
    }

    /// A mapping of `bytes` of this process's anonymous memory that `map` makes, recorded (unwinding
    /// unmaps it).
    pub(crate) fn anonymous(
        &mut self,
        bytes: u64,
        map: impl FnOnce(u64) -> Result<*mut u8, HalError>,
    ) -> Result<*mut u8, HalError> {
        let cpu = map(bytes)?;
        self.made.push(Record::Rm(RmRecord::Mapping { cpu, bytes }));
        Ok(cpu)
    }

    /// [`Base::new_mem`], recorded.
    pub(crate) fn mem(&mut self, spec: DriverMemSpec, call: &'static str) -> Result<DriverMem, HalError> {
        let m = self.base.new_mem(spec, call)?;
        self.made.push(Record::Mem(m.record()));
        Ok(m)
    }

    /// A stage for an attempt that may fail while this one goes on: dropped, it releases only its own
    /// records; kept, they join this stage's with [`Stage::adopt`].
    pub(crate) fn nested(&mut self) -> Stage<'_> {
        Stage { base: self.base, made: Vec::new() }
    }

    /// Takes over the records of a kept nested stage.
    pub(crate) fn adopt(&mut self, kept: Kept) {
        self.made.extend(kept.0);
    }

    /// Ends a nested stage without releasing anything, for [`Stage::adopt`].
    pub(crate) fn keep_nested(mut self) -> Kept {
        Kept(std::mem::take(&mut self.made))
    }

    /// Ends the stage without releasing anything: everything made now belongs to the caller. Returns the
    /// RM objects made, in order of making, which close frees.
    pub(crate) fn keep(mut self) -> Vec<Object> {
        std::mem::take(&mut self.made)
            .into_iter()
            .filter_map(|r| match r {
                Record::Rm(RmRecord::Object(o)) => Some(o),
                _ => None,
            })
            .collect()
    }
}

/// The records of a kept nested [`Stage`].
#[derive(Debug)]
#[must_use = "records not adopted by a Stage are never released"]
pub(crate) struct Kept(Vec<Record>);

impl Records for Stage<'_> {
    fn rm(&self) -> &Rm {
        &self.base.rm
    }

    fn record(&mut self, r: RmRecordToken) {
        self.made.push(Record::Rm(r.0));
    }
}

impl Drop for Stage<'_> {
    fn drop(&mut self) {
        while let Some(r) = self.made.pop() {
            match r {
                Record::Rm(r) => r.release(&self.base.rm),
                Record::Mem(m) => {
                    #[cfg(test)]
                    tests::note("memory".into());
                    self.base.release(m)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::nvidia::memory::DriverMemKind;

    thread_local! {
        /// What the stages of this thread released, in order.
        static RELEASED: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn note(what: String) {
        RELEASED.with(|r| r.borrow_mut().push(what));
    }

    fn released() -> Vec<String> {
        RELEASED.with(|r| std::mem::take(&mut *r.borrow_mut()))
    }

    /// A client on /dev/null: every release's ioctl is refused (ENOTTY) and ignored, as unwinding ignores
    /// what the driver refuses, so what is released, in which order, is what the stage decides.
    fn rm() -> Rm {
        Rm::null()
    }

    fn base() -> Base {
        Base::null()
    }

    fn object(what: &'static str) -> RmRecordToken {
        RmRecordToken(RmRecord::Object(Object { parent: 1, handle: 0x10, what }))
    }

    /// A memory object of 2 MiB of low VA (the record a successful `Stage::mem` would keep).
    fn mem(s: &mut Stage<'_>) {
        let va = s.base().va_low.alloc(2 << 20, 2 << 20).unwrap();
        let m = DriverMem {
            handle: 0,
            kind: DriverMemKind::Vid,
            va,
            bytes: 2 << 20,
            cpu: std::ptr::null_mut(),
            low_va: true,
        };
        s.made.push(Record::Mem(m.record()));
    }

    #[test]
    fn a_dropped_stage_releases_what_it_made_in_reverse_order() {
        let rm = rm();
        // SAFETY: a fresh anonymous mapping of one page, which the stage owns from here.
        let cpu = unsafe { super::super::ioctl::map(4096, libc::PROT_READ, libc::MAP_PRIVATE, None, "test") }.unwrap();
        {
            let mut s = RmStage::new(&rm);
            s.record(object("device"));
            s.record(object("subdevice"));
            s.record(RmRecordToken(RmRecord::Boost { subdevice: 0x5 }));
            s.record(RmRecordToken(RmRecord::Mapping { cpu, bytes: 4096 }));
        }
        assert_eq!(released(), ["mapping", "boost 0x5", "object subdevice", "object device"]);
        // SAFETY: msync only reports whether the range is mapped; it touches no memory.
        let r = unsafe { libc::msync(cpu.cast(), 4096, libc::MS_ASYNC) };
        assert_eq!((r, std::io::Error::last_os_error().raw_os_error()), (-1, Some(libc::ENOMEM)), "unmapped");
    }

    #[test]
    fn a_resumed_stage_releases_its_own_records_then_the_earlier_ones() {
        let mut base = base();
        let free = base.va_low.free_bytes();
        let rm = rm();
        let mut early = RmStage::new(&rm);
        early.record(object("device"));
        early.record(object("VA space"));
        let made = early.keep();
        assert!(released().is_empty(), "keeping releases nothing");
        {
            let mut s = Stage::resume(&mut base, made);
            s.record(object("channel group"));
            mem(&mut s);
            s.record(object("GPFIFO channel"));
        }
        assert_eq!(
            released(),
            ["object GPFIFO channel", "memory", "object channel group", "object VA space", "object device"]
        );
        assert_eq!(base.va_low.free_bytes(), free, "the memory's VA went back");
    }

    #[test]
    fn a_failed_attempt_releases_only_its_own_records_and_a_kept_one_joins_the_stage() {
        let mut base = base();
        let free = base.va_low.free_bytes();
        let mut s = Stage::new(&mut base);
        s.record(object("compute object"));
        {
            let mut attempt = s.nested();
            mem(&mut attempt);
            attempt.record(object("copy channel group"));
        }
        assert_eq!(released(), ["object copy channel group", "memory"]);
        assert_eq!(s.base().va_low.free_bytes(), free, "the failed attempt's VA went back");
        let mut attempt = s.nested();
        attempt.record(object("copy GPFIFO channel"));
        mem(&mut attempt);
        let kept = attempt.keep_nested();
        s.adopt(kept);
        let objects: Vec<&str> = s.keep().iter().map(|o| o.what).collect();
        assert_eq!(objects, ["compute object", "copy GPFIFO channel"], "the objects close frees, in order");
        assert!(released().is_empty(), "nothing kept is released");
        assert_eq!(base.va_low.free_bytes(), free - (2 << 20), "the kept memory still holds its VA");
    }
}
