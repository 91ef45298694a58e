// cluster: thread-block clusters and distributed shared memory through Omega's launch path (the GPU
// suite's cluster case; the host references are in src/core/kernels/cluster.rs).
//
// Every block of 128 threads fills its shared buffer with (block * 0x10000 + thread * 7) ^ salt, waits at
// the cluster barrier, reads its neighbour's (rank ^ 1, or itself in a cluster of one) buffer through
// mapa + ld.shared::cluster, waits again (no block leaves while a neighbour still reads it), and writes
//   out[b * 136 + 0..8)   = %cluster_ctarank, %clusterid.x, %nclusterid.x, %cluster_nctarank,
//                           %cluster_ctaid.x, %nctaid.x, %is_explicit_cluster, 0
//   out[b * 136 + 8..136) = the neighbour's 128 values
// for a 1-D grid.
//
// - cluster_pairs     __cluster_dims__(2, 1, 1): the cubin carries EXPLICIT_CLUSTER + CTA_PER_CLUSTER
// - cluster_any       the same body; the cluster comes from the launch (Launch::cluster)

__device__ inline void cluster_body(unsigned int* out, unsigned int salt) {
  __shared__ unsigned int buf[128];
  const unsigned int t = threadIdx.x;
  unsigned int rank, cid, ncid, nrank, cctaid, explicit_cluster;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(cid));
  asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(ncid));
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(nrank));
  asm volatile("mov.u32 %0, %%cluster_ctaid.x;" : "=r"(cctaid));
  asm volatile("{ .reg .pred p; mov.pred p, %%is_explicit_cluster; selp.u32 %0, 1, 0, p; }" : "=r"(explicit_cluster));
  buf[t] = (blockIdx.x * 0x10000u + t * 7u) ^ salt;
  asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory");
  const unsigned int peer = nrank > 1 ? (rank ^ 1u) : rank;
  const unsigned int local = static_cast<unsigned int>(__cvta_generic_to_shared(&buf[t]));
  unsigned int remote, v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(peer));
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(remote) : "memory");
  asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory");
  unsigned int* o = out + blockIdx.x * 136u;
  if (t == 0) {
    o[0] = rank;
    o[1] = cid;
    o[2] = ncid;
    o[3] = nrank;
    o[4] = cctaid;
    o[5] = gridDim.x;
    o[6] = explicit_cluster;
    o[7] = 0;
  }
  o[8 + t] = v;
}

extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128) cluster_pairs(unsigned int* out,
                                                                                         unsigned int salt) {
  cluster_body(out, salt);
}

extern "C" __global__ void __launch_bounds__(128) cluster_any(unsigned int* out, unsigned int salt) {
  cluster_body(out, salt);
}
