//! The repository's kernels: PTX sources in `kernels/`, assembled by ptxas at build time, CUDA C++
//! modules in `kernels/cuda/`, compiled by nvcc at build time ([`cuda`]), and a host reference
//! implementation of each kernel. The references are what the simulator runs, and what every GPU result
//! is checked against.

use omega_hal::sim::{HostKernel, KernelCtx, KernelError, Sim};

use crate::platform::Installed;
use crate::session::ParamInfo;
use crate::sync::Arc;

pub mod attention;
pub mod cluster;
mod cuda;
pub mod decoder;
pub use attention::{ATTENTION, ATTENTION_HOST_SPECS};
pub use decoder::{DECODER, DECODER_HOST_SPECS};
pub mod elementwise;
pub use cluster::{CLUSTER, CLUSTER_HOST_SPECS};
pub use cuda::*;
pub use elementwise::{ELEMENTWISE, ELEMENTWISE_HOST_SPECS};
pub mod matmul;
pub use matmul::{MATMUL, MATMUL_HOST_SPECS};
pub mod prefill;
pub use prefill::{PREFILL, PREFILL_HOST_SPECS};

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

/// Which nvcc built the CUDA C++ modules (`kernels/cuda/*.cu`), or why none did.
pub fn nvcc() -> Result<&'static str, &'static str> {
    NVCC
}

/// The sm_90a cubin of CUDA C++ module `name` (`kernels/cuda/<name>.cu`), or why there is none (names
/// the missing tool). Load it with [`crate::Scope::load_module`].
pub fn cuda_module(name: &str) -> Result<&'static [u8], &'static str> {
    cuda_cubin(name)
}

/// Names of the CUDA C++ modules.
pub fn cuda_module_names() -> &'static [&'static str] {
    CUDA_MODULE_NAMES
}

/// The CUDA C++ source of module `name`.
pub fn cuda_module_source(name: &str) -> Option<&'static str> {
    cuda_source(name)
}

/// The relocatable sm_90a cubin of device library `name` (`kernels/cuda/lib/<name>.cu`; `"printf"` is
/// Omega's `vprintf`), or why there is none.
pub fn device_library(name: &str) -> Result<&'static [u8], &'static str> {
    library_cubin(name)
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
                off = crate::session::param_offset(u64::from(off), size) as u32;
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
        name: "spin_beat",
        param_sizes: &[8, 8],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: spin_beat,
    },
    HostSpec {
        name: "store_to",
        param_sizes: &[8, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: store_to,
    },
    HostSpec {
        name: "stamp_then_store",
        param_sizes: &[8, 8, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: stamp_then_store,
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

/// Every CUDA C++ module's kernels with their host references: `(module, kernels)`.
pub const CUDA_HOST_SPECS: &[(&str, &[HostSpec])] = &[
    (CLUSTER, CLUSTER_HOST_SPECS),
    (MIXED, MIXED_HOST_SPECS),
    (MATMUL, MATMUL_HOST_SPECS),
    (ATTENTION, ATTENTION_HOST_SPECS),
    (PREFILL, PREFILL_HOST_SPECS),
    (ELEMENTWISE, ELEMENTWISE_HOST_SPECS),
    (DECODER, DECODER_HOST_SPECS),
];

/// The host spec of kernel `name` (its symbol name) of a CUDA C++ module.
pub fn cuda_host_spec(name: &str) -> Option<&'static HostSpec> {
    CUDA_HOST_SPECS.iter().flat_map(|(_, specs)| specs.iter()).find(|s| s.name == name)
}

/// The host reference of repository kernel `name`, a PTX kernel's or a CUDA module's.
pub fn host_reference(name: &str) -> Option<&'static HostSpec> {
    host_spec(name).or_else(|| cuda_host_spec(name))
}

/// Registers `spec`'s host reference with a simulator, under the kernel's name.
pub fn register_host_kernel(sim: &Sim, spec: &HostSpec) {
    let run = spec.run;
    let k: HostKernel = Arc::new(run);
    sim.register_kernel(spec.name, k);
}

/// Registers every host reference with a simulator (the PTX kernels' and the CUDA modules' kernels').
pub fn register_host_kernels(sim: &Sim) {
    for spec in HOST_SPECS.iter().chain(CUDA_HOST_SPECS.iter().flat_map(|(_, specs)| specs.iter())) {
        register_host_kernel(sim, spec);
    }
}

/// A fresh simulator that runs every repository kernel (what `omega_gpu_platform_sim()` exports, and
/// what a test that writes code images by hand installs). The platform the core installs is a plain
/// simulator: its loader registers a kernel's reference when it loads that kernel.
pub fn simulator() -> Installed {
    let sim = Sim::new();
    register_host_kernels(&sim);
    Installed::simulator(sim)
}

// ----- the references --------------------------------------------------------------------------------
//
// Each host kernel does what its PTX does, in the simulator's slices: it takes its part of the work
// (`take`, `take_threads`, `take_blocks`) and loads and stores only that part, with the PTX's own 32-bit
// index arithmetic, so a hostile grid or argument costs no more host memory than one slice and a store past
// the output buffer faults where it would on the GPU.

/// Reference of `vector_add`: `c[i] = a[i] + b[i]`.
pub fn vector_add_ref(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

fn vector_add(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (a, b, c, n) = (ctx.u64_at(0), ctx.u64_at(2), ctx.u64_at(4), u64::from(ctx.word(6)));
    // One thread per element of a 1-D launch: the threads along x below n.
    let part = ctx.take(n.min(ctx.threads_x()));
    let (offset, len) = (part.start * 4, (part.end - part.start) as usize);
    let x = ctx.read_f32s(a.wrapping_add(offset), len)?;
    let y = ctx.read_f32s(b.wrapping_add(offset), len)?;
    ctx.write_f32s(c.wrapping_add(offset), &vector_add_ref(&x, &y))
}

/// Reference of `grid_index` for a grid of `grid` blocks of `block` threads: word `i` holds `i`.
pub fn grid_index_ref(block: [u32; 2], grid: [u32; 2]) -> Vec<u32> {
    let n = [block[0], grid[0], block[1], grid[1]].iter().map(|&d| u64::from(d)).product::<u64>();
    (0..n).map(|i| i as u32).collect()
}

fn grid_index(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let out = ctx.u64_at(0);
    let shape = ctx.shape();
    let (ntid, nctaid) = (shape.block, shape.grid);
    // The PTX's arithmetic: 32-bit and wrapping (`mad.lo.s32`), then a 64-bit byte offset.
    let width = nctaid[0].wrapping_mul(ntid[0]);
    let stores = ctx.take_threads().map(|t| {
        let (ctaid, tid) = shape.thread_id(t);
        let x = ctaid[0].wrapping_mul(ntid[0]).wrapping_add(tid[0]);
        let y = ctaid[1].wrapping_mul(ntid[1]).wrapping_add(tid[1]);
        let i = y.wrapping_mul(width).wrapping_add(x);
        (u64::from(i), i)
    });
    ctx.scatter_u32s(out, stores)
}

/// What `local_array` stores for thread `t` (its `tid.x`) with key `k`.
fn local_array_value(t: u32, k: u32) -> u32 {
    let mut buf = [0u32; 64];
    let mut v = k.wrapping_add(t);
    for i in 0..64u32 {
        buf[(5u32.wrapping_mul(i).wrapping_add(t) & 63) as usize] = v;
        v = v.wrapping_mul(1664525).wrapping_add(1013904223);
    }
    buf[(t.wrapping_mul(7).wrapping_add(k) & 63) as usize]
}

/// Reference of `local_array` for `threads` threads per block, `blocks` blocks and key `k`.
pub fn local_array_ref(threads: u32, blocks: u32, k: u32) -> Vec<u32> {
    (0..blocks).flat_map(|_| (0..threads).map(move |t| local_array_value(t, k))).collect()
}

fn local_array(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (out, k) = (ctx.u64_at(0), ctx.word(2));
    let shape = ctx.shape();
    let stores = ctx.take_threads().map(|t| {
        let (ctaid, tid) = shape.thread_id(t);
        let g = ctaid[0].wrapping_mul(shape.block[0]).wrapping_add(tid[0]);
        (u64::from(g), local_array_value(tid[0], k))
    });
    ctx.scatter_u32s(out, stores)
}

/// Reference of `scale_copy`.
pub fn scale_copy_ref(src: &[f32], alpha: f32) -> Vec<f32> {
    src.iter().map(|x| x * alpha).collect()
}

fn scale_copy(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (src, dst, alpha) = (ctx.u64_at(0), ctx.u64_at(2), f32::from_bits(ctx.word(4)));
    // A grid-stride loop: every element below n, whatever the launch's shape.
    let part = ctx.take(u64::from(ctx.word(5)));
    let (offset, len) = (part.start * 4, (part.end - part.start) as usize);
    let x = ctx.read_f32s(src.wrapping_add(offset), len)?;
    ctx.write_f32s(dst.wrapping_add(offset), &scale_copy_ref(&x, alpha))
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

/// Element `i` of `module_data`'s output.
fn module_data_value(i: u64, scale: f32) -> f32 {
    f32::from_bits(MODULE_DATA_TABLE[(i % 16) as usize]) * scale + MODULE_DATA_COUNTER as f32
}

/// Reference of `module_data`: `out[i] = table[i % 16] * scale + counter` for `i < n`, each operation
/// rounded on its own (as the PTX's `mul.rn` / `add.rn`).
pub fn module_data_ref(scale: f32, n: usize) -> Vec<f32> {
    (0..n as u64).map(|i| module_data_value(i, scale)).collect()
}

fn module_data(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (out, scale) = (ctx.u64_at(0), f32::from_bits(ctx.word(2)));
    // A grid-stride loop: every element below n, whatever the launch's shape.
    let part = ctx.take(u64::from(ctx.word(3)));
    let values: Vec<f32> = part.clone().map(|i| module_data_value(i, scale)).collect();
    ctx.write_f32s(out.wrapping_add(part.start * 4), &values)
}

/// Reference of `shared_reverse` with blocks of `n` threads: each block's slice reversed.
pub fn shared_reverse_ref(input: &[f32], n: usize) -> Vec<f32> {
    input.chunks(n).flat_map(|c| c.iter().rev().copied()).collect()
}

fn shared_reverse(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (input, out) = (ctx.u64_at(0), ctx.u64_at(2));
    let n = ctx.block[0];
    if u64::from(ctx.dynamic_shared_bytes) < u64::from(n) * 4 {
        // On hardware the dynamic part would be read past its end: an out-of-range shared access.
        return Err(KernelError::Fault { xid: 13, detail: "shared_reverse: dynamic shared memory too small".into() });
    }
    let shape = ctx.shape();
    for b in ctx.take_blocks() {
        // g = ctaid.x * ntid.x + tid.x, in 32 bits, then a 64-bit byte offset.
        let first = u64::from(shape.block_id(b)[0].wrapping_mul(n)) * 4;
        let x = ctx.read_f32s(input.wrapping_add(first), n as usize)?;
        ctx.write_f32s(out.wrapping_add(first), &shared_reverse_ref(&x, n as usize))?;
    }
    Ok(())
}

fn spin(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let flag = ctx.read_u32s(ctx.u64_at(0), 1)?;
    if flag[0] == 0 {
        return Err(KernelError::Hang);
    }
    Ok(())
}

/// One turn of `spin_beat`'s loop per slice: the heartbeat word grows by one while the flag reads zero, and
/// the kernel asks for another slice (it never ends on its own, as the machine code's loop does not).
fn spin_beat(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (flag, beat) = (ctx.u64_at(0), ctx.u64_at(2));
    if ctx.read_u32s(flag, 1)?[0] != 0 {
        return Ok(());
    }
    let count = ctx.read_u32s(beat, 1)?[0].wrapping_add(1);
    ctx.write_u32s(beat, &[count])?;
    // Leaves work for the next slice: the loop goes on.
    let _ = ctx.take(u64::MAX);
    Ok(())
}

fn store_to(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (addr, value) = (ctx.u64_at(0), ctx.word(2));
    ctx.write_u32s(addr, &[value])
}

/// The stamp is the launch's start on the simulator's clock, its `%globaltimer`; the store after it faults
/// where nothing is mapped, as on hardware, with the stamp already written.
fn stamp_then_store(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (stamp, addr, value) = (ctx.u64_at(0), ctx.u64_at(2), ctx.word(4));
    let t = ctx.start_ns;
    ctx.write_u32s(stamp, &[t as u32, (t >> 32) as u32])?;
    ctx.write_u32s(addr, &[value])
}

fn timestamps(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (stamps, spin_ns) = (ctx.u64_at(0), ctx.u64_at(2));
    let (start, end) = (ctx.start_ns, ctx.start_ns.saturating_add(spin_ns.min(ctx.launch_ns)));
    let shape = ctx.shape();
    let words = [start as u32, (start >> 32) as u32, end as u32, (end >> 32) as u32];
    let stores = ctx.take_blocks().flat_map(|b| {
        // b = ctaid.x + nctaid.x * (ctaid.y + nctaid.y * ctaid.z), in 32 bits; 16 bytes per block.
        let [x, y, z] = shape.block_id(b);
        let id = shape.grid[0].wrapping_mul(shape.grid[1].wrapping_mul(z).wrapping_add(y)).wrapping_add(x);
        (0..4).map(move |k| (u64::from(id) * 4 + k, words[k as usize]))
    });
    ctx.scatter_u32s(stamps, stores)
}

fn empty(_ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    Ok(())
}
