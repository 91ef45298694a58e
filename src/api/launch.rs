//! The launch builder: grid, block, dynamic shared memory, timeout, spin window and the arguments,
//! laid out as the contract says (each parameter at its natural alignment; a 64-bit GPU address is two
//! words, low first) and checked against the kernel's own parameter table before anything runs.

use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::mem::Mem;
use crate::session::{runtime, LaunchCompletion, LaunchShape, LaunchSpec, ParamInfo};
use crate::state::{Data, Device, DeviceScalar};

/// Default completion limit per marker.
pub const DEFAULT_TIMEOUT_MS: u32 = 5_000;

/// Argument words a launch builds on the stack (longer blocks allocate).
const SMALL_ARG_WORDS: usize = 64;

/// A value a kernel can take as an argument.
///
/// Implemented for the device scalars and for device pointers borrowed from data buffers; not for host
/// pointers, references or structs (derive `LaunchArgs` for a struct of these).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a kernel argument",
    note = "kernel arguments are device scalars (u32, f32, bf16, ...) or `&Mem<Data<T>>` / `&Mem<Device<T>>` device buffers"
)]
pub trait KernelArg {
    /// Bytes (and alignment) of the parameter.
    const SIZE: u32;
    /// Writes the parameter's bytes.
    fn write(&self, out: &mut [u8]);
}

macro_rules! scalar_args {
    ($($t:ty),*) => {$(
        impl KernelArg for $t {
            const SIZE: u32 = size_of::<$t>() as u32;
            fn write(&self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
scalar_args!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64, half::bf16, half::f16);

impl<T: DeviceScalar> KernelArg for &Mem<'_, Data<T>> {
    const SIZE: u32 = 8;
    fn write(&self, out: &mut [u8]) {
        out.copy_from_slice(&self.va().to_le_bytes());
    }
}

impl<T: DeviceScalar> KernelArg for &mut Mem<'_, Data<T>> {
    const SIZE: u32 = 8;
    fn write(&self, out: &mut [u8]) {
        out.copy_from_slice(&self.va().to_le_bytes());
    }
}

impl<T: DeviceScalar> KernelArg for &Mem<'_, Device<T>> {
    const SIZE: u32 = 8;
    fn write(&self, out: &mut [u8]) {
        out.copy_from_slice(&self.va().to_le_bytes());
    }
}

impl<T: DeviceScalar> KernelArg for &mut Mem<'_, Device<T>> {
    const SIZE: u32 = 8;
    fn write(&self, out: &mut [u8]) {
        out.copy_from_slice(&self.va().to_le_bytes());
    }
}

/// The largest parameter block [`ArgBlock`] builds: twice what any architecture's constant bank holds
/// (32 KiB of parameters at most), so a block past it can never launch.
pub const MAX_ARG_BLOCK_BYTES: u32 = 64 << 10;

/// The parameter block being built.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArgBlock {
    bytes: Vec<u8>,
    params: Vec<ParamInfo>,
    /// A push would have passed [`MAX_ARG_BLOCK_BYTES`] (or the size arithmetic overflowed): it was not
    /// written, and every launch of the block is refused.
    oversized: Option<u64>,
}

impl ArgBlock {
    /// An empty block with room for `params` parameters of `bytes` bytes in all.
    pub fn with_capacity(params: usize, bytes: usize) -> Self {
        ArgBlock {
            bytes: Vec::with_capacity(bytes.min(MAX_ARG_BLOCK_BYTES as usize)),
            params: Vec::with_capacity(params),
            oversized: None,
        }
    }

    /// Appends `a` at its natural alignment.
    pub fn push<A: KernelArg>(&mut self, a: A) {
        self.push_raw(A::SIZE, |out| a.write(out));
    }

    /// Appends `size` bytes written by `write`, at alignment `size`. A parameter that would end past
    /// [`MAX_ARG_BLOCK_BYTES`] is not written: the block is marked oversized and every launch of it is
    /// refused (stage `launch arguments`), the same in debug and release builds.
    pub fn push_raw(&mut self, size: u32, write: impl FnOnce(&mut [u8])) {
        let offset = crate::session::param_offset(self.bytes.len() as u64, size);
        let end = offset + u64::from(size);
        if end > u64::from(MAX_ARG_BLOCK_BYTES) || self.oversized.is_some() {
            self.oversized = Some(self.oversized.unwrap_or(0).max(end));
            return;
        }
        self.bytes.resize(end as usize, 0);
        write(&mut self.bytes[offset as usize..]);
        self.params.push(ParamInfo { ordinal: self.params.len() as u32, offset: offset as u32, size });
    }

    /// Why the block cannot launch: a parameter would have ended at byte `end`, past
    /// [`MAX_ARG_BLOCK_BYTES`].
    fn check_size(&self) -> Result<()> {
        match self.oversized {
            Some(end) => Err(crate::error::LaunchArgError::ArgBlockTooLarge { end, max: MAX_ARG_BLOCK_BYTES }.into()),
            None => Ok(()),
        }
    }

    /// The layout so far.
    pub fn params(&self) -> &[ParamInfo] {
        &self.params
    }

    /// [`ArgBlock::words`] into `buf` when they fit, without allocating; `None` when they do not.
    fn words_into<'b>(&self, buf: &'b mut [u32; SMALL_ARG_WORDS]) -> Option<&'b [u32]> {
        let n = self.bytes.len().div_ceil(4).max(1);
        if n > buf.len() {
            return None;
        }
        for (w, c) in buf.iter_mut().zip(self.bytes.chunks(4)) {
            let mut b = [0u8; 4];
            b[..c.len()].copy_from_slice(c);
            *w = u32::from_le_bytes(b);
        }
        if self.bytes.is_empty() {
            buf[0] = 0;
        }
        Some(&buf[..n])
    }

    /// The block as argument words (at least one: the contract's launch takes 1 or more).
    pub fn words(&self) -> Vec<u32> {
        let mut w: Vec<u32> = self
            .bytes
            .chunks(4)
            .map(|c| {
                let mut b = [0u8; 4];
                b[..c.len()].copy_from_slice(c);
                u32::from_le_bytes(b)
            })
            .collect();
        if w.is_empty() {
            w.push(0);
        }
        w
    }
}

/// Describes one launch of `kernel`.
#[must_use = "a Launch does nothing until `Gpu::launch` runs it"]
pub struct Launch<'k, 's> {
    kernel: &'k Kernel<'s>,
    /// Its geometry and wait (`shared_bytes` stays 0: the kernel's static size plus the dynamic part).
    shape: LaunchShape,
    args: ArgBlock,
}

impl<'k, 's> Launch<'k, 's> {
    /// A launch of one block of one thread, no arguments, the default timeout.
    pub fn new(kernel: &'k Kernel<'s>) -> Self {
        Launch {
            kernel,
            args: ArgBlock::default(),
            shape: LaunchShape {
                grid: [1, 1, 1],
                block: [1, 1, 1],
                shared_bytes: 0,
                dynamic_shared_bytes: 0,
                timeout_ms: DEFAULT_TIMEOUT_MS,
                spin_us: 0,
                cluster: [1, 1, 1],
            },
        }
    }

    /// Blocks per grid (`[x, y, z]`).
    pub fn grid(mut self, grid: [u32; 3]) -> Self {
        self.shape.grid = grid;
        self
    }

    /// Threads per block (`[x, y, z]`).
    pub fn block(mut self, block: [u32; 3]) -> Self {
        self.shape.block = block;
        self
    }

    /// Dynamic shared memory per block, in bytes.
    pub fn dynamic_shared(mut self, bytes: u32) -> Self {
        self.shape.dynamic_shared_bytes = bytes;
        self
    }

    /// Runs the grid in thread-block clusters of `ctas` (x, y, z): every grid side a multiple of the
    /// cluster's, at most 8 CTAs per cluster on Hopper. A kernel built with `__cluster_dims__` already
    /// runs in its own shape; naming another is refused at the launch.
    pub fn cluster(mut self, ctas: [u32; 3]) -> Self {
        self.shape.cluster = ctas;
        self
    }

    /// Completion limit per marker; past it the process latches.
    pub fn timeout_ms(mut self, ms: u32) -> Self {
        self.shape.timeout_ms = ms;
        self
    }

    /// Spin-poll window before sleep-polling (0: the process-wide setting).
    pub fn spin_us(mut self, us: u32) -> Self {
        self.shape.spin_us = us;
        self
    }

    /// Appends an argument. A borrowed buffer stays borrowed for as long as the launch lives (`A: 'k`),
    /// so a launch cannot name a buffer that was freed before it runs.
    pub fn arg<A: KernelArg + 'k>(mut self, a: A) -> Self {
        self.args.push(a);
        self
    }

    /// Replaces the arguments with those of a `#[derive(LaunchArgs)]` struct, borrowed for as long as the
    /// launch lives (and so are the buffers the struct borrows).
    pub fn args<A: crate::args::LaunchArgs>(mut self, a: &'k A) -> Self {
        self.args = a.block();
        self
    }

    /// Replaces the arguments with a prepared block (what `#[derive(LaunchArgs)]` produces).
    pub fn arg_block(mut self, block: ArgBlock) -> Self {
        self.args = block;
        self
    }

    /// The arguments so far.
    pub fn arguments(&self) -> &ArgBlock {
        &self.args
    }

    fn check_against_kernel(&self) -> Result<()> {
        let declared = &self.kernel.meta().params;
        let given = self.args.params();
        let name = self.kernel.name();
        if declared.len() != given.len() {
            return Err(crate::error::LaunchArgError::ParamCount {
                kernel: name.to_string(),
                declared: declared.len(),
                given: given.len(),
            }
            .into());
        }
        for (d, g) in declared.iter().zip(given) {
            if d.offset != g.offset || d.size != g.size {
                return Err(crate::error::LaunchArgError::ParamLayout {
                    kernel: name.to_string(),
                    ordinal: d.ordinal,
                    size: d.size,
                    offset: d.offset,
                    given_size: g.size,
                    given_offset: g.offset,
                }
                .into());
            }
        }
        Ok(())
    }

    pub(crate) fn run(&self) -> Result<LaunchCompletion> {
        self.with_spec(|spec| runtime().launch(spec))
    }

    /// Checks the launch against its kernel and hands the resulting spec to `f` (a run launches it, a
    /// command list records it), or returns why it is refused.
    pub(crate) fn with_spec<R, E: From<Error>>(
        &self,
        f: impl FnOnce(&LaunchSpec<'_>) -> core::result::Result<R, E>,
    ) -> core::result::Result<R, E> {
        let rt = runtime();
        self.args.check_size()?;
        // The Rust builder is not held to the C launch's 32 words: its limit is the constant bank's room
        // for parameters on this architecture.
        let max_bytes = rt.max_param_bytes()?;
        // Small blocks (nearly all) go through the stack: no allocation per launch.
        let mut small = [0u32; SMALL_ARG_WORDS];
        let owned;
        let words: &[u32] = match self.args.words_into(&mut small) {
            Some(w) => w,
            None => {
                owned = self.args.words();
                &owned
            }
        };
        if words.len() * 4 > max_bytes as usize {
            let e = Error::LaunchArguments(crate::error::LaunchArgError::ArgBytes {
                bytes: words.len() * 4,
                words: words.len(),
                kernel: self.kernel.name().to_string(),
                max: max_bytes,
            });
            return Err(e.into());
        }
        self.check_against_kernel()?;
        let max_words = max_bytes as usize / 4;
        let meta = self.kernel.meta();
        let spec = LaunchSpec {
            code_va: self.kernel.entry_va(),
            gpr_count: meta.registers,
            num_elements: self.shape.grid[0].saturating_mul(self.shape.block[0]),
            args: words,
            max_args: max_words,
            shape: self.shape,
        };
        f(&spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_words_equal_allocated_words() {
        let mut b = ArgBlock::default();
        let mut buf = [0xdead_beef; SMALL_ARG_WORDS];
        assert_eq!(b.words_into(&mut buf).map(<[u32]>::to_vec), Some(b.words()), "empty block: one zero word");
        b.push(7u8);
        b.push(0x1234_5678_9abc_def0u64);
        b.push(3u16);
        let mut buf = [0xdead_beef; SMALL_ARG_WORDS];
        assert_eq!(b.words_into(&mut buf).map(<[u32]>::to_vec), Some(b.words()));
        let mut big = ArgBlock::default();
        for i in 0..SMALL_ARG_WORDS as u32 + 1 {
            big.push(i);
        }
        assert_eq!(big.words_into(&mut [0; SMALL_ARG_WORDS]), None, "too long for the stack");
        let mut exact = ArgBlock::default();
        for i in 0..SMALL_ARG_WORDS as u32 {
            exact.push(i);
        }
        let mut buf = [0; SMALL_ARG_WORDS];
        assert_eq!(exact.words_into(&mut buf).map(<[u32]>::to_vec), Some(exact.words()));
    }
}
