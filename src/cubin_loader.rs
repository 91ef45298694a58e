//! From a cubin to a code image and a launch template, through the nvidia backend's cubin parser.

use crate::error::{Error, Result};
use crate::session::KernelMeta;

/// A parsed cubin, ready to be placed at an address.
pub(crate) struct Prepared {
    pub(crate) image_bytes: usize,
    pub(crate) entry_offset: u64,
    pub(crate) meta: KernelMeta,
    relocate: Box<dyn Fn(u64) -> Result<Vec<u8>>>,
}

impl Prepared {
    /// The image with its relocations applied for a load at `va`.
    pub(crate) fn relocate(&self, va: u64) -> Result<Vec<u8>> {
        (self.relocate)(va)
    }
}

pub(crate) fn prepare(_cubin: &[u8], entry: &str) -> Result<Prepared> {
    Err(Error::Load(format!("kernel `{entry}`: the cubin loader is not wired in yet")))
}
