//! What the shells may ask of the installed platform's capabilities, each a narrow answer, so that neither
//! the typed API nor the C layer holds the platform itself.

use omega_hal::Services;

use super::Runtime;
use crate::error::Result;

impl Runtime {
    /// The installed platform's page (the unit every allocation is rounded to), installing the
    /// environment's choice first.
    pub fn page_bytes(&self) -> Result<u64> {
        Ok(self.installed()?.platform.caps().page_bytes)
    }

    /// Bytes a buffer of `bytes` bytes of `kind` takes on the installed platform (installing the
    /// environment's choice first); `Ok(None)` for a size no platform can describe. The C layer's code
    /// allocator asks it, so it rounds as the session does (the C layer is not built under loom).
    #[cfg(not(loom))]
    pub fn alloc_bytes_for(&self, bytes: usize, kind: super::AllocKind) -> Result<Option<u64>> {
        Ok(super::memory::buffer_bytes(bytes, kind, &self.installed()?.platform.caps()))
    }

    /// Argument words that precede a launch's own in constant bank 0 on the installed platform (132 on
    /// Hopper); 0 with no platform.
    pub fn param_prefix_words(&self) -> u32 {
        self.installed().map(|i| i.platform.caps().param_base / 4).unwrap_or(0)
    }

    /// True when the installed platform learns completions by polling (it has the POLL service); false
    /// with no platform.
    pub fn polls_completions(&self) -> bool {
        self.installed().is_ok_and(|i| i.platform.caps().services.contains(Services::POLL))
    }
}
