// probe_cluster: thread-block clusters and distributed shared memory. Built by tools/gpu/build.sh, run by
// `nv_probe cluster`.
//
// Every block of 128 threads fills its shared buffer with (block * 0x10000 + thread * 7) ^ salt, waits at the
// cluster barrier, reads its neighbour's (rank ^ 1) buffer through mapa + ld.shared::cluster, waits
// again (so no block leaves while a neighbour still reads it), and writes, for block b of `expected`:
//   out[b * 136 + 0..8)   = %cluster_ctarank, %clusterid.x, %nclusterid.x, %cluster_nctarank,
//                           %ctaid.x, %nctaid.x, %cluster_ctaid.x, %is_explicit_cluster
//   out[b * 136 + 8..136) = the neighbour's 128 values
// and counts itself in *count, so a QMD whose grid the hardware read as clusters (twice the CTAs) shows.
//
// - probe_cluster     __cluster_dims__(2, 1, 1): the cubin carries EXPLICIT_CLUSTER + CTA_PER_CLUSTER
// - probe_cluster_rt  the same body without the attribute: the cluster comes from the QMD alone

__device__ inline unsigned int sreg_rank() {
  unsigned int v;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(v));
  return v;
}

__device__ inline void probe_cluster_body(unsigned int* out, unsigned int* count, unsigned int expected,
                                          unsigned int salt) {
  __shared__ unsigned int buf[128];
  const unsigned int t = threadIdx.x;
  unsigned int rank, cid, ncid, nrank, cctaid, explicit_cluster;
  rank = sreg_rank();
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
  if (t == 0) atomicAdd(count, 1u);
  if (blockIdx.x >= expected) return;
  unsigned int* o = out + blockIdx.x * 136u;
  if (t == 0) {
    o[0] = rank;
    o[1] = cid;
    o[2] = ncid;
    o[3] = nrank;
    o[4] = blockIdx.x;
    o[5] = gridDim.x;
    o[6] = cctaid;
    o[7] = explicit_cluster;
  }
  o[8 + t] = v;
}

extern "C" __global__ void __cluster_dims__(2, 1, 1) probe_cluster(unsigned int* out, unsigned int* count,
                                                                   unsigned int expected, unsigned int salt) {
  probe_cluster_body(out, count, expected, salt);
}

extern "C" __global__ void probe_cluster_rt(unsigned int* out, unsigned int* count, unsigned int expected,
                                            unsigned int salt) {
  probe_cluster_body(out, count, expected, salt);
}
