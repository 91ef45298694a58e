// probe_smem: a block with 227 KiB of dynamic shared memory (Hopper's most for one block; the system's
// 1 KiB makes 228). Built by tools/gpu/build.sh, run by `nv_probe smem`.
//
// Block b writes in[i] ^ (b * 0x9e3779b9) to every word of its dynamic shared memory, then reads it back
// reversed: out[b * words + i] = shared[words - 1 - i]; and meta[2b], meta[2b + 1] = %dynamic_smem_size,
// %total_smem_size (constant bank 0's dynamic-size word and the QMD's shared size, as the kernel sees
// them).
extern "C" __global__ void probe_smem(const unsigned int* in, unsigned int* out, unsigned int* meta,
                                      unsigned int words) {
  extern __shared__ unsigned int big[];
  const unsigned int key = blockIdx.x * 0x9e3779b9u;
  for (unsigned int i = threadIdx.x; i < words; i += blockDim.x) big[i] = in[i] ^ key;
  __syncthreads();
  for (unsigned int i = threadIdx.x; i < words; i += blockDim.x)
    out[static_cast<unsigned long long>(blockIdx.x) * words + i] = big[words - 1 - i];
  if (threadIdx.x == 0) {
    unsigned int dyn, total;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    asm volatile("mov.u32 %0, %%total_smem_size;" : "=r"(total));
    meta[2 * blockIdx.x] = dyn;
    meta[2 * blockIdx.x + 1] = total;
  }
}
