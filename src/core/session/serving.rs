//! The serving seal: after [`Runtime::seal`] nothing the session does asks the driver for anything.
//!
//! Two walls, one in each layer. The platform's driver counters ([`omega_hal::driver`]) refuse every
//! ioctl and mapping while sealed, so no call below the session can reach the driver unseen; and the
//! session refuses up front what it knows would need the driver (a buffer no held chunk can carve, which
//! would be a platform allocation: `alloc: serving sealed: allocation of 4096 bytes would ask the
//! driver`), and holds back what it would give back (a direct buffer or an emptied chunk freed while
//! sealed is freed at [`Runtime::unseal`]), so a serving step may drop a temporary without a refusal.
//! Launches, waits (which poll memory the device writes) and copies through views need the driver for
//! nothing once warm; what a launch would still grow on the GPU (the command arena, local memory) is
//! refused by the platform's wall and named in the launch's error.

use omega_hal::{Allocation, DeviceMemory, DriverStats};

use super::{Runtime, Session};
use crate::error::{Error, Result, SettingError, Stage};
use crate::sync;

impl Session {
    /// Gives `a` back to the platform, or, while sealed, keeps it to give back at unseal.
    ///
    /// # Safety
    /// - As [`DeviceMemory::free`]: nothing on the device touches `a`, the lock is held, given back once.
    pub(crate) unsafe fn give_back(&mut self, mem: &dyn DeviceMemory, a: Allocation) {
        if self.sealed {
            self.held_back.push(a);
        } else {
            // SAFETY: the caller's promises.
            unsafe { mem.free(&a) };
        }
    }

    /// Unseals and gives back what was held back while sealed.
    ///
    /// # Safety
    /// - As [`Session::give_back`] for every held-back allocation (it was, when it was held back).
    pub(crate) unsafe fn unseal(&mut self, platform: &dyn omega_hal::Platform) {
        if let Some(d) = platform.driver() {
            d.set_sealed(false);
        }
        self.sealed = false;
        let mem = platform.memory().expect("negotiated at open");
        for a in std::mem::take(&mut self.held_back) {
            // SAFETY: forwarded from the caller.
            unsafe { mem.free(&a) };
        }
    }
}

impl Runtime {
    /// What the platform asked its driver for so far; `None` on a platform that cannot count it (a C
    /// function table). Allowed at any time: reading the counters asks the driver for nothing.
    pub fn driver_stats(&self) -> Option<DriverStats> {
        let i = self.installed().ok()?;
        i.platform.driver().map(|d| d.stats())
    }

    /// Seals the session for serving: from here until [`Runtime::unseal`] (or close), every call that
    /// would ask the driver is refused with its stage and never made. Caller holds the lock, device open;
    /// refused on a platform that cannot count its driver calls, and when already sealed.
    pub fn seal(&self) -> Result<()> {
        let stage = Stage::Serving;
        let i = self.live_platform(stage)?;
        let Some(d) = i.platform.driver() else {
            return Err(Error::Setting { stage, detail: SettingError::CannotSeal });
        };
        let mut s = sync::lock(&self.session);
        if s.sealed {
            return Err(Error::Setting { stage, detail: SettingError::AlreadySealed });
        }
        s.sealed = true;
        d.set_sealed(true);
        Ok(())
    }

    /// Ends the seal and gives back the buffers freed while it held. Caller holds the lock, device open;
    /// unsealing an unsealed session does nothing.
    pub fn unseal(&self) -> Result<()> {
        let i = self.live_platform(Stage::Serving)?;
        let mut s = sync::lock(&self.session);
        // SAFETY: the lock is held and the device open (checked above); each held-back allocation was
        // given back by `release_buf`, whose callers promise that nothing on the device touches it.
        unsafe { s.unseal(&*i.platform) };
        Ok(())
    }

    /// Whether the session is sealed for serving.
    pub fn is_sealed(&self) -> bool {
        sync::lock(&self.session).sealed
    }
}
