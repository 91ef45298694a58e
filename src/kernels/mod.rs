//! The repository's kernels: PTX sources in `kernels/`, assembled by ptxas at build time, and a host
//! reference implementation of each. The references are what the simulator runs, and what every GPU
//! result is checked against.

use omega_hal::sim::{HostKernel, KernelCtx, KernelError, Sim};

use crate::session::ParamInfo;
use crate::sync::Arc;

include!(concat!(env!("OUT_DIR"), "/cubins.rs"));

/// The cubin of kernel `name` for sm_90, or why there is none (names the missing tool).
pub fn sm90_cubin(name: &str) -> Result<&'static [u8], &'static str> {
    cubin(name)
}

/// The PTX source of kernel `name`.
pub fn ptx_source(name: &str) -> Option<&'static str> {
    ptx(name)
}

/// Names of the repository's kernels.
pub fn names() -> &'static [&'static str] {
    KERNEL_NAMES
}

/// Which ptxas built the cubins, or why none did.
pub fn ptxas() -> Result<&'static str, &'static str> {
    PTXAS
}

/// What the simulator needs to know of a kernel that a cubin would otherwise say.
#[derive(Clone, Copy, Debug)]
pub struct HostSpec {
    /// Entry name.
    pub name: &'static str,
    /// Parameter sizes in signature order.
    pub param_sizes: &'static [u32],
    /// Static shared bytes.
    pub static_shared_bytes: u32,
    /// Stack bytes per thread.
    pub local_bytes_per_thread: u32,
    /// The host implementation.
    pub run: fn(&mut KernelCtx<'_>) -> Result<(), KernelError>,
}

impl HostSpec {
    /// The parameter table at natural alignment, as ptxas lays it out.
    pub fn params(&self) -> Vec<ParamInfo> {
        let mut off = 0u32;
        self.param_sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| {
                off = off.next_multiple_of(size);
                let p = ParamInfo { ordinal: i as u32, offset: off, size };
                off += size;
                p
            })
            .collect()
    }
}

/// Every kernel's host reference.
pub const HOST_SPECS: &[HostSpec] = &[
    HostSpec {
        name: "vector_add",
        param_sizes: &[8, 8, 8, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: vector_add,
    },
    HostSpec {
        name: "grid_index",
        param_sizes: &[8],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: grid_index,
    },
    HostSpec {
        name: "local_array",
        param_sizes: &[8, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 256,
        run: local_array,
    },
    HostSpec {
        name: "scale_copy",
        param_sizes: &[8, 8, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: scale_copy,
    },
    HostSpec {
        name: "module_data",
        param_sizes: &[8, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: module_data,
    },
    HostSpec {
        name: "shared_reverse",
        param_sizes: &[8, 8],
        static_shared_bytes: 1024,
        local_bytes_per_thread: 0,
        run: shared_reverse,
    },
    HostSpec { name: "spin", param_sizes: &[8], static_shared_bytes: 0, local_bytes_per_thread: 0, run: spin },
    HostSpec {
        name: "store_to",
        param_sizes: &[8, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: store_to,
    },
    HostSpec {
        name: "timestamps",
        param_sizes: &[8, 8],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: timestamps,
    },
    HostSpec { name: "empty", param_sizes: &[], static_shared_bytes: 0, local_bytes_per_thread: 0, run: empty },
];

/// The host spec of `name`.
pub fn host_spec(name: &str) -> Option<&'static HostSpec> {
    HOST_SPECS.iter().find(|s| s.name == name)
}

/// Registers every host reference with a simulator.
pub fn register_host_kernels(sim: &Sim) {
    for spec in HOST_SPECS {
        let run = spec.run;
        let k: HostKernel = Arc::new(run);
        sim.register_kernel(spec.name, k);
    }
}

// ----- the references --------------------------------------------------------------------------------

/// Reference of `vector_add`: `c[i] = a[i] + b[i]`.
pub fn vector_add_ref(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

fn vector_add(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (a, b, c, n) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4), ctx.word(6) as usize);
    let n = n.min(ctx.threads_x() as usize);
    let (x, y) = (ctx.read_f32s(a, n)?, ctx.read_f32s(b, n)?);
    ctx.write_f32s(c, &vector_add_ref(&x, &y))
}

/// Reference of `grid_index` for a grid of `grid` blocks of `block` threads: word `i` holds `i`.
pub fn grid_index_ref(block: [u32; 2], grid: [u32; 2]) -> Vec<u32> {
    let n = block[0] * grid[0] * block[1] * grid[1];
    (0..n).collect()
}

fn grid_index(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let out = ctx.u64_at(0);
    let v = grid_index_ref([ctx.block[0], ctx.block[1]], [ctx.grid[0], ctx.grid[1]]);
    ctx.write_u32s(out, &v)
}

/// Reference of `local_array` for `threads` threads per block, `blocks` blocks and key `k`.
pub fn local_array_ref(threads: u32, blocks: u32, k: u32) -> Vec<u32> {
    let mut out = Vec::with_capacity((threads * blocks) as usize);
    for _b in 0..blocks {
        for t in 0..threads {
            let mut buf = [0u32; 64];
            let mut v = k.wrapping_add(t);
            for i in 0..64u32 {
                buf[((5 * i + t) & 63) as usize] = v;
                v = v.wrapping_mul(1664525).wrapping_add(1013904223);
            }
            out.push(buf[((t * 7 + k) & 63) as usize]);
        }
    }
    out
}

fn local_array(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (out, k) = (ctx.u64_at(0), ctx.word(2));
    let v = local_array_ref(ctx.block[0], ctx.grid[0], k);
    ctx.write_u32s(out, &v)
}

/// Reference of `scale_copy`.
pub fn scale_copy_ref(src: &[f32], alpha: f32) -> Vec<f32> {
    src.iter().map(|x| x * alpha).collect()
}

fn scale_copy(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (src, dst, alpha, n) = (ctx.u64_at(0), ctx.u64_at(2), f32::from_bits(ctx.word(4)), ctx.word(5) as usize);
    let x = ctx.read_f32s(src, n)?;
    ctx.write_f32s(dst, &scale_copy_ref(&x, alpha))
}

/// `module_data`'s `__constant__` table (bank 3), as the PTX spells its bits.
pub const MODULE_DATA_TABLE: [u32; 16] = [
    0x3F80_0000,
    0x4000_0000,
    0x4040_0000,
    0x4080_0000,
    0x40A0_0000,
    0x40C0_0000,
    0x40E0_0000,
    0x4100_0000,
    0xBF00_0000,
    0xBE80_0000,
    0x3E00_0000,
    0x4120_0000,
    0xC170_0000,
    0x42C8_0000,
    0x3DCC_CCCD,
    0xC049_0FDB,
];

/// `module_data`'s initialised `__device__` counter.
pub const MODULE_DATA_COUNTER: u32 = 7;

/// Reference of `module_data`: `out[i] = table[i % 16] * scale + counter` for `i < n`, each operation
/// rounded on its own (as the PTX's `mul.rn` / `add.rn`).
pub fn module_data_ref(scale: f32, n: usize) -> Vec<f32> {
    let counter = MODULE_DATA_COUNTER as f32;
    (0..n).map(|i| f32::from_bits(MODULE_DATA_TABLE[i % 16]) * scale + counter).collect()
}

fn module_data(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (out, scale, n) = (ctx.u64_at(0), f32::from_bits(ctx.word(2)), ctx.word(3) as usize);
    ctx.write_f32s(out, &module_data_ref(scale, n))
}

/// Reference of `shared_reverse` with blocks of `n` threads: each block's slice reversed.
pub fn shared_reverse_ref(input: &[f32], n: usize) -> Vec<f32> {
    input.chunks(n).flat_map(|c| c.iter().rev().copied()).collect()
}

fn shared_reverse(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (input, out) = (ctx.u64_at(0), ctx.u64_at(2));
    let n = ctx.block[0] as usize;
    if ctx.dynamic_shared_bytes < (n * 4) as u32 {
        // On hardware the dynamic part would be read past its end: an out-of-range shared access.
        return Err(KernelError::Fault { xid: 13, detail: "shared_reverse: dynamic shared memory too small".into() });
    }
    let total = n * ctx.grid[0] as usize;
    let x = ctx.read_f32s(input, total)?;
    ctx.write_f32s(out, &shared_reverse_ref(&x, n))
}

fn spin(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let flag = ctx.read_u32s(ctx.u64_at(0), 1)?;
    if flag[0] == 0 {
        return Err(KernelError::Hang);
    }
    Ok(())
}

fn store_to(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (addr, value) = (ctx.u64_at(0), ctx.word(2));
    ctx.write_u32s(addr, &[value])
}

fn timestamps(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (stamps, spin_ns) = (ctx.u64_at(0), ctx.u64_at(2));
    let blocks = ctx.grid.iter().product::<u32>() as usize;
    let end = ctx.start_ns + spin_ns.min(ctx.launch_ns);
    let words: Vec<u32> =
        (0..blocks).flat_map(|_| [ctx.start_ns, end]).flat_map(|t| [t as u32, (t >> 32) as u32]).collect();
    ctx.write_u32s(stamps, &words)
}

fn empty(_ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    Ok(())
}
