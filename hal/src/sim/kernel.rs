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

/// [`code_image`] followed by a symbol table: the addresses the loader resolved for the kernel (its
/// module's `__device__` data, the device printf buffer), which the host kernel reads with
/// [`KernelCtx::symbol`] as the machine code would through its relocated addresses. The table is a u32
/// count, then per symbol a u32 name length, the name and the u64 address, all little-endian.
pub fn code_image_with_symbols(name: &str, symbols: &[(&str, u64)]) -> Vec<u8> {
    let mut v = code_image(name);
    v.extend_from_slice(&(symbols.len() as u32).to_le_bytes());
    for (symbol, va) in symbols {
        v.extend_from_slice(&(symbol.len() as u32).to_le_bytes());
        v.extend_from_slice(symbol.as_bytes());
        v.extend_from_slice(&va.to_le_bytes());
    }
    v
}

/// The kernel name in a code image, if `code` starts with one.
pub fn parse_code_image(code: &[u8]) -> Option<&str> {
    let rest = code.strip_prefix(CODE_MAGIC.as_slice())?;
    let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    std::str::from_utf8(rest.get(4..4 + len)?).ok()
}

/// The symbol table after the name in a code image (empty when there is none, or it is cut short).
pub fn parse_code_image_symbols(code: &[u8]) -> Vec<(String, u64)> {
    let table = || -> Option<Vec<(String, u64)>> {
        let name = parse_code_image(code)?;
        let mut at = CODE_MAGIC.len() + 4 + name.len();
        let word = |at: usize| -> Option<u32> { Some(u32::from_le_bytes(code.get(at..at + 4)?.try_into().ok()?)) };
        let count = word(at)? as usize;
        at += 4;
        let mut out = Vec::with_capacity(count.min(1024));
        for _ in 0..count {
            let len = word(at)? as usize;
            let symbol = std::str::from_utf8(code.get(at + 4..at + 4 + len)?).ok()?;
            at += 4 + len;
            let va = u64::from_le_bytes(code.get(at..at + 8)?.try_into().ok()?);
            at += 8;
            out.push((symbol.to_owned(), va));
        }
        Some(out)
    };
    table().unwrap_or_default()
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

/// A host implementation of a kernel.
///
/// The simulator calls it once per slice of the launch's work, with [`KernelCtx::budget`] work units to do
/// in that call. A kernel whose work grows with the grid or with an argument takes its slice with one of
/// [`KernelCtx::take`], [`KernelCtx::take_threads`] or [`KernelCtx::take_blocks`] and does only that part;
/// it is called again while work remains. A kernel that takes nothing runs once, whole. Either way no
/// call allocates more host memory or runs longer than its slice, whatever the launch's shape.
pub type HostKernel = Arc<dyn Fn(&mut KernelCtx<'_>) -> Result<(), KernelError> + Send + Sync>;

/// A launch's shape: threads per block and blocks per grid, with the linear numbering a sliced kernel
/// walks (x fastest, then y, then z; threads block by block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Threads per block.
    pub block: [u32; 3],
    /// Blocks per grid.
    pub grid: [u32; 3],
}

impl Shape {
    /// Threads in one block.
    pub fn threads_per_block(&self) -> u64 {
        self.block.iter().map(|&n| u64::from(n)).product()
    }

    /// Blocks in the grid.
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&n| u64::from(n)).product()
    }

    /// Threads in the grid (saturating: past 2^64 it reads as 2^64 - 1, more than any slice reaches).
    pub fn threads(&self) -> u64 {
        self.blocks().saturating_mul(self.threads_per_block())
    }

    /// `%ctaid` of linear block `b`.
    pub fn block_id(&self, b: u64) -> [u32; 3] {
        split(b, self.grid)
    }

    /// `%ctaid` and `%tid` of linear thread `t`.
    pub fn thread_id(&self, t: u64) -> ([u32; 3], [u32; 3]) {
        let per_block = self.threads_per_block().max(1);
        (split(t / per_block, self.grid), split(t % per_block, self.block))
    }
}

/// `%cluster_ctarank` of the block at `ctaid` in clusters of `cluster` CTAs: the linear index of
/// `%cluster_ctaid` (= `ctaid` modulo the cluster), x fastest.
pub fn cluster_rank(cluster: [u32; 3], ctaid: [u32; 3]) -> u32 {
    let [cx, cy, cz] = cluster.map(|c| c.max(1));
    let [x, y, z] = [ctaid[0] % cx, ctaid[1] % cy, ctaid[2] % cz];
    x + cx * (y + cy * z)
}

/// The x, y, z coordinates of linear index `i` in a box of `dims` (x fastest). Each coordinate is below its
/// side, so it fits in a u32.
fn split(i: u64, dims: [u32; 3]) -> [u32; 3] {
    let (x, y) = (u64::from(dims[0].max(1)), u64::from(dims[1].max(1)));
    [(i % x) as u32, (i / x % y) as u32, (i / x / y) as u32]
}

/// What a host kernel sees: its launch shape, its parameter words, its slice of the work and device
/// memory.
pub struct KernelCtx<'a> {
    /// Threads per block.
    pub block: [u32; 3],
    /// Blocks per grid.
    pub grid: [u32; 3],
    /// CTAs per cluster (`[1, 1, 1]` without a cluster); the grid is a whole number of clusters.
    pub cluster: [u32; 3],
    /// Dynamic shared memory bytes.
    pub dynamic_shared_bytes: u32,
    /// Parameter words as laid out in constant bank 0.
    pub args: &'a [u32],
    /// Virtual time at which the launch starts (what `%globaltimer` would read).
    pub start_ns: u64,
    /// Virtual nanoseconds the launch's first slice is given.
    pub launch_ns: u64,
    /// Work units the earlier calls of this launch took (0 in the first call).
    pub done: u64,
    /// Most work units this call may take.
    pub budget: u64,
    /// Set by a `take` that left work for another call.
    pub(crate) more: bool,
    /// The addresses its code image carries ([`code_image_with_symbols`]).
    pub symbols: &'a [(String, u64)],
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

    /// The address the loader resolved for `symbol`, if the code image carries it.
    pub fn symbol(&self, symbol: &str) -> Option<u64> {
        self.symbols.iter().find(|(s, _)| s == symbol).map(|&(_, va)| va)
    }

    /// Total threads in the grid along x.
    pub fn threads_x(&self) -> u64 {
        self.block[0] as u64 * self.grid[0] as u64
    }

    /// `%cluster_ctarank` of the block at `%ctaid` = `ctaid`: its linear index inside its cluster, x
    /// fastest.
    pub fn cluster_rank(&self, ctaid: [u32; 3]) -> u32 {
        cluster_rank(self.cluster, ctaid)
    }

    /// `%clusterid` of the block at `ctaid`: which cluster of the grid it belongs to.
    pub fn cluster_id(&self, ctaid: [u32; 3]) -> [u32; 3] {
        core::array::from_fn(|a| ctaid[a] / self.cluster[a].max(1))
    }

    /// The launch's shape.
    pub fn shape(&self) -> Shape {
        Shape { block: self.block, grid: self.grid }
    }

    /// This call's part of `total` work units (elements, say): the next at most [`KernelCtx::budget`] of
    /// them after those earlier calls took. The simulator calls the kernel again while any remain. Take
    /// once per call.
    pub fn take(&mut self, total: u64) -> core::ops::Range<u64> {
        self.take_units(total, self.budget)
    }

    /// This call's part of the grid's threads, by linear thread index ([`Shape::thread_id`]).
    pub fn take_threads(&mut self) -> core::ops::Range<u64> {
        self.take(self.shape().threads())
    }

    /// This call's part of the grid's blocks, by linear block index ([`Shape::block_id`]): whole blocks, as
    /// many as fit in the budget's threads (at least one).
    pub fn take_blocks(&mut self) -> core::ops::Range<u64> {
        let shape = self.shape();
        self.take_units(shape.blocks(), self.budget / shape.threads_per_block().max(1))
    }

    fn take_units(&mut self, total: u64, per_call: u64) -> core::ops::Range<u64> {
        let start = self.done.min(total);
        let end = total.min(start.saturating_add(per_call.max(1)));
        self.done = end;
        self.more = end < total;
        start..end
    }

    /// The device bytes `va .. va + len`, if one buffer the GPU may read holds all of them.
    fn loadable(&self, va: u64, len: usize) -> Result<&[u8], KernelError> {
        let fault = || KernelError::mmu("load", va, len);
        let (a, off) = self.memory.find(va).ok_or_else(fault)?;
        if (len as u64) > a.bytes - off || !a.rights.intersects(Rights::GPU_READ | Rights::GPU_EXEC) {
            return Err(fault());
        }
        Ok(&a.device.bytes()[off as usize..off as usize + len])
    }

    /// Copies device bytes at `va` into `out` (a GPU load).
    pub fn read(&self, va: u64, out: &mut [u8]) -> Result<(), KernelError> {
        out.copy_from_slice(self.loadable(va, out.len())?);
        Ok(())
    }

    /// Writes `data` to device bytes at `va` (the stores of many threads at once). The bytes that fall
    /// inside the buffer holding `va` land; the first past its end faults, as the store of the thread that
    /// made it would (buffers are separated by unmapped gaps).
    pub fn write(&mut self, va: u64, data: &[u8]) -> Result<(), KernelError> {
        let (a, off) = self.memory.find_mut(va).ok_or_else(|| KernelError::mmu("store", va, data.len()))?;
        if !a.rights.contains(Rights::GPU_WRITE) {
            return Err(KernelError::mmu("store", va, data.len()));
        }
        let room = (a.bytes - off).min(data.len() as u64) as usize;
        let off = off as usize;
        a.device.bytes_mut()[off..off + room].copy_from_slice(&data[..room]);
        if room < data.len() {
            return Err(KernelError::mmu("store", va.wrapping_add(room as u64), data.len() - room));
        }
        Ok(())
    }

    /// Stores 32-bit words, word `i` of the iterator's `(i, value)` at `base + 4 * i` (addresses wrap as
    /// the GPU's do), one thread's store each. Runs of consecutive indices are written together; the first
    /// store that faults ends the call, after the ones before it landed.
    pub fn scatter_u32s(&mut self, base: u64, stores: impl IntoIterator<Item = (u64, u32)>) -> Result<(), KernelError> {
        let mut run: Vec<u8> = Vec::new();
        let mut run_start = 0u64;
        let mut next = None;
        for (i, value) in stores {
            if next != Some(i) && !run.is_empty() {
                self.write(base.wrapping_add(run_start.wrapping_mul(4)), &run)?;
                run.clear();
            }
            if run.is_empty() {
                run_start = i;
            }
            run.extend_from_slice(&value.to_le_bytes());
            next = Some(i.wrapping_add(1));
        }
        if run.is_empty() {
            return Ok(());
        }
        self.write(base.wrapping_add(run_start.wrapping_mul(4)), &run)
    }

    /// Loads `n` little-endian 32-bit words at `va` (checked against the mapping before anything is
    /// copied, so a load past a buffer costs no host memory).
    pub fn read_u32s(&self, va: u64, n: usize) -> Result<Vec<u32>, KernelError> {
        let bytes = n.checked_mul(4).ok_or_else(|| KernelError::mmu("load", va, usize::MAX))?;
        let src = self.loadable(va, bytes)?;
        Ok(src.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
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
    fn cluster_ranks_are_linear_inside_each_cluster_x_fastest() {
        assert_eq!(cluster_rank([1, 1, 1], [5, 7, 2]), 0);
        assert_eq!((0..6).map(|x| cluster_rank([2, 1, 1], [x, 0, 0])).collect::<Vec<_>>(), [0, 1, 0, 1, 0, 1]);
        // A 2 x 2 x 2 cluster: rank = x + 2y + 4z of the position inside it.
        // x 3 % 2 = 1, y 2 % 2 = 0, z 1: 1 + 2 * 0 + 4 * 1.
        assert_eq!(cluster_rank([2, 2, 2], [3, 2, 1]), 5);
        assert_eq!(cluster_rank([4, 2, 1], [6, 3, 9]), 2 + 4);
    }

    #[test]
    fn code_image_round_trips_and_rejects_foreign_bytes() {
        assert_eq!(parse_code_image(&code_image("vector_add")), Some("vector_add"));
        assert_eq!(parse_code_image(b"\x7fELF...."), None);
        assert_eq!(parse_code_image(&code_image("x")[..10]), None);
    }

    #[test]
    fn symbol_tables_round_trip_and_a_cut_table_reads_as_none() {
        let image = code_image_with_symbols("k", &[("counter", 0x1000), ("omega.printf", 0x2_0000_0040)]);
        assert_eq!(parse_code_image(&image), Some("k"));
        let table = parse_code_image_symbols(&image);
        assert_eq!(table, [("counter".to_string(), 0x1000), ("omega.printf".to_string(), 0x2_0000_0040)]);
        assert!(parse_code_image_symbols(&code_image("k")).is_empty());
        assert!(parse_code_image_symbols(&image[..image.len() - 1]).is_empty());
    }
}
