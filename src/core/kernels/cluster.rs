//! The cluster module's kernels (`kernels/cuda/cluster.cu`): what a thread-block cluster shows its CTAs
//! (rank, cluster index and counts, `%is_explicit_cluster`) and a neighbour's shared memory read through
//! distributed shared memory, as the simulator runs them and as the GPU suite checks them.

use omega_hal::sim::{KernelCtx, KernelError};

use super::HostSpec;

/// The module's name (`kernels/cuda/cluster.cu`).
pub const CLUSTER: &str = "cluster";
/// `extern "C" __cluster_dims__(2, 1, 1) cluster_pairs(unsigned* out, unsigned salt)`.
pub const CLUSTER_PAIRS: &str = "cluster_pairs";
/// `extern "C" cluster_any(unsigned* out, unsigned salt)`: the cluster comes from the launch.
pub const CLUSTER_ANY: &str = "cluster_any";
/// Words each block writes.
pub const CLUSTER_WORDS_PER_BLOCK: usize = 136;
/// Threads per block the kernels are written for.
pub const CLUSTER_THREADS: u32 = 128;

/// The module's kernels with their host references.
pub const CLUSTER_HOST_SPECS: &[HostSpec] = &[
    HostSpec { name: CLUSTER_PAIRS, param_sizes: &[8, 4], static_shared_bytes: 0, local_bytes_per_thread: 0, run },
    HostSpec { name: CLUSTER_ANY, param_sizes: &[8, 4], static_shared_bytes: 0, local_bytes_per_thread: 0, run },
];

/// What block `b` of a 1-D grid of `grid` blocks in clusters of `cluster` writes, for `salt`.
pub fn cluster_ref(b: u32, grid: u32, cluster: u32, explicit: bool, salt: u32) -> Vec<u32> {
    let cluster = cluster.max(1);
    let rank = b % cluster;
    let peer_rank = if cluster > 1 { rank ^ 1 } else { rank };
    let peer = b - rank + peer_rank;
    let mut v = vec![rank, b / cluster, grid / cluster, cluster, rank, grid, u32::from(explicit), 0];
    v.extend((0..CLUSTER_THREADS).map(|t| (peer * 0x10000 + t * 7) ^ salt));
    v
}

fn run(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (out, salt) = (ctx.u64_at(0), ctx.word(2));
    let shape = ctx.shape();
    let (grid, cluster) = (shape.grid[0], ctx.cluster[0]);
    let explicit = ctx.cluster != [1, 1, 1];
    for b in ctx.take_blocks() {
        let words = cluster_ref(b as u32, grid, cluster, explicit, salt);
        ctx.write_u32s(out.wrapping_add(b * 4 * CLUSTER_WORDS_PER_BLOCK as u64), &words)?;
    }
    Ok(())
}
