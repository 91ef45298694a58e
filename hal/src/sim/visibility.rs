//! Visibility on the simulator: copies between a discrete buffer's CPU copy and its device copy.

use super::{Sim, SimFault};
use crate::error::HalError;
use crate::memory::Allocation;
use crate::sync;
use crate::Visibility;

#[derive(Clone, Copy)]
enum Direction {
    ToGpu,
    ToCpu,
}

impl Sim {
    fn sync(&self, a: &Allocation, offset: u64, len: u64, dir: Direction) -> Result<(), HalError> {
        let mut st = sync::lock(&self.state);
        if st.take_fault(|f| *f == SimFault::FailSync).is_some() {
            return Err(HalError::Injected("visibility sync refused"));
        }
        st.stats.syncs += 1;
        let buf = st
            .memory
            .get_mut(a.va)
            .ok_or_else(|| HalError::Lost(format!("sim: sync of unknown buffer at {:#x}", a.va)))?;
        let (start, end) = (offset as usize, (offset + len) as usize);
        if let Some(cpu) = buf.cpu.as_mut() {
            match dir {
                Direction::ToGpu => buf.device.bytes_mut()[start..end].copy_from_slice(&cpu.bytes()[start..end]),
                Direction::ToCpu => cpu.bytes_mut()[start..end].copy_from_slice(&buf.device.bytes()[start..end]),
            }
        }
        Ok(())
    }
}

impl Sim {
    /// Runs `copy` on the device copy of `a` (whatever its CPU view), after the injected faults and
    /// counters a sync sees.
    fn device_side(&self, a: &Allocation, copy: impl FnOnce(&mut [u8])) -> Result<(), HalError> {
        let mut st = sync::lock(&self.state);
        if st.take_fault(|f| *f == SimFault::FailSync).is_some() {
            return Err(HalError::Injected("device write or read refused"));
        }
        st.stats.syncs += 1;
        let buf = st
            .memory
            .get_mut(a.va)
            .ok_or_else(|| HalError::Lost(format!("sim: device access of unknown buffer at {:#x}", a.va)))?;
        copy(buf.device.bytes_mut());
        Ok(())
    }
}

impl Visibility for Sim {
    unsafe fn sync_to_gpu(&self, a: &Allocation, offset: u64, len: u64) -> Result<(), HalError> {
        self.sync(a, offset, len, Direction::ToGpu)
    }

    unsafe fn sync_to_cpu(&self, a: &Allocation, offset: u64, len: u64) -> Result<(), HalError> {
        self.sync(a, offset, len, Direction::ToCpu)
    }

    unsafe fn write_device(&self, a: &Allocation, offset: u64, src: &[u8]) -> Result<(), HalError> {
        let start = offset as usize;
        // In range by the caller's promise (`offset + src.len() <= a.bytes`, the device copy's length).
        self.device_side(a, |device| device[start..start + src.len()].copy_from_slice(src))
    }

    unsafe fn read_device(&self, a: &Allocation, offset: u64, dst: &mut [u8]) -> Result<(), HalError> {
        let start = offset as usize;
        self.device_side(a, |device| dst.copy_from_slice(&device[start..start + dst.len()]))
    }
}
