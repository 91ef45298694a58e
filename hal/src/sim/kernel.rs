//! Host implementations of kernels, and the code image that names one.

use super::memory::SimMemory;
use crate::caps::Rights;
use crate::sync::Arc;

/// First bytes of a simulator code image.
pub const CODE_MAGIC: &[u8; 8] = b"OMEGASIM";

/// The code image that makes the simulator run kernel `name`: the magic, a little-endian u32 length, the
/// name. Written to a code buffer the way real machine code would be.
pub fn code_image(name: &str) -> Vec<u8> {
    let mut v = CODE_MAGIC.to_vec();
    v.extend_from_slice(&(name.len() as u32).to_le_bytes());
    v.extend_from_slice(name.as_bytes());
    v
}

/// The kernel name in a code image, if `code` starts with one.
pub fn parse_code_image(code: &[u8]) -> Option<&str> {
    let rest = code.strip_prefix(CODE_MAGIC.as_slice())?;
    let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    std::str::from_utf8(rest.get(4..4 + len)?).ok()
}

/// How a host kernel can fail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelError {
    /// The kernel faulted; the channel reports this Xid.
    Fault {
        /// Robust-channel code (31 MMU fault, 13 GR exception).
        xid: u32,
        /// What went wrong.
        detail: String,
    },
    /// The kernel never ends (its markers never arrive).
    Hang,
}

impl KernelError {
    fn mmu(kind: &str, va: u64, len: usize) -> Self {
        KernelError::Fault { xid: 31, detail: format!("{kind} of {len} bytes at {va:#x}: no mapping allows it") }
    }
}

/// A host implementation of a kernel. It runs the whole grid at once.
pub type HostKernel = Arc<dyn Fn(&mut KernelCtx<'_>) -> Result<(), KernelError> + Send + Sync>;

/// What a host kernel sees: its launch shape, its parameter words and device memory.
pub struct KernelCtx<'a> {
    /// Threads per block.
    pub block: [u32; 3],
    /// Blocks per grid.
    pub grid: [u32; 3],
    /// Dynamic shared memory bytes.
    pub dynamic_shared_bytes: u32,
    /// Parameter words as laid out in constant bank 0.
    pub args: &'a [u32],
    /// Virtual time at which the launch starts (what `%globaltimer` would read).
    pub start_ns: u64,
    /// Virtual nanoseconds the launch is given.
    pub launch_ns: u64,
    pub(crate) memory: &'a mut SimMemory,
}

impl KernelCtx<'_> {
    /// Parameter word `i` (0 past the end, as unwritten constant-bank words read).
    pub fn word(&self, i: usize) -> u32 {
        self.args.get(i).copied().unwrap_or(0)
    }

    /// The 64-bit value in words `i` (low) and `i + 1` (high).
    pub fn u64_at(&self, i: usize) -> u64 {
        self.word(i) as u64 | (self.word(i + 1) as u64) << 32
    }

    /// Total threads in the grid along x.
    pub fn threads_x(&self) -> u64 {
        self.block[0] as u64 * self.grid[0] as u64
    }

    /// Copies device bytes at `va` into `out` (a GPU load).
    pub fn read(&self, va: u64, out: &mut [u8]) -> Result<(), KernelError> {
        let (a, off) = self.memory.find(va).ok_or_else(|| KernelError::mmu("load", va, out.len()))?;
        let end = off as usize + out.len();
        if end as u64 > a.bytes || !a.rights.intersects(Rights::GPU_READ | Rights::GPU_EXEC) {
            return Err(KernelError::mmu("load", va, out.len()));
        }
        out.copy_from_slice(&a.device.bytes()[off as usize..end]);
        Ok(())
    }

    /// Writes `data` to device bytes at `va` (a GPU store).
    pub fn write(&mut self, va: u64, data: &[u8]) -> Result<(), KernelError> {
        let (a, off) = self.memory.find_mut(va).ok_or_else(|| KernelError::mmu("store", va, data.len()))?;
        let end = off as usize + data.len();
        if end as u64 > a.bytes || !a.rights.contains(Rights::GPU_WRITE) {
            return Err(KernelError::mmu("store", va, data.len()));
        }
        a.device.bytes_mut()[off as usize..end].copy_from_slice(data);
        Ok(())
    }

    /// Loads `n` little-endian 32-bit words at `va`.
    pub fn read_u32s(&self, va: u64, n: usize) -> Result<Vec<u32>, KernelError> {
        let mut bytes = vec![0u8; n * 4];
        self.read(va, &mut bytes)?;
        Ok(bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
    }

    /// Stores 32-bit words at `va`.
    pub fn write_u32s(&mut self, va: u64, words: &[u32]) -> Result<(), KernelError> {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        self.write(va, &bytes)
    }

    /// Loads `n` f32 at `va`.
    pub fn read_f32s(&self, va: u64, n: usize) -> Result<Vec<f32>, KernelError> {
        Ok(self.read_u32s(va, n)?.into_iter().map(f32::from_bits).collect())
    }

    /// Stores f32 values at `va`.
    pub fn write_f32s(&mut self, va: u64, values: &[f32]) -> Result<(), KernelError> {
        let words: Vec<u32> = values.iter().map(|v| v.to_bits()).collect();
        self.write_u32s(va, &words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_image_round_trips_and_rejects_foreign_bytes() {
        assert_eq!(parse_code_image(&code_image("vector_add")), Some("vector_add"));
        assert_eq!(parse_code_image(b"\x7fELF...."), None);
        assert_eq!(parse_code_image(&code_image("x")[..10]), None);
    }
}
