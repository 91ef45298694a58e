// probe_tma: TMA through descriptors Omega builds on the device (tma_desc.cuh), the two ways a kernel
// gets one: as a `const __grid_constant__ CUtensorMap` parameter (read through constant bank 0's
// parameter address, c[0x0][0x198] + offset) and through a pointer to global memory (after
// `fence.proxy.tensormap::generic.acquire`). Built by tools/gpu/build.sh, run by `nv_probe tma`.
//
// - omega_tma_build       (tma_desc.cuh) one descriptor per block
// - probe_tma_load_param  loads one box at (c0, c1) with cp.async.bulk.tensor + an mbarrier into shared
//                         memory and copies it, as laid out there, to out[0 .. box_bytes/2)
// - probe_tma_load_global the same through `const CUtensorMap*`
#include <cuda.h>

#include "tma_desc.cuh"

// The box lands here: 8 KiB (64 x 64 bf16 at most), 1024-byte aligned as the 128-byte swizzle needs.
__device__ inline void probe_tma_load(const void* tm, unsigned short* out, int c0, int c1, unsigned int box_bytes,
                                      bool acquire) {
  __shared__ alignas(1024) unsigned short tile[64 * 64];
  __shared__ alignas(8) unsigned long long bar;
  const unsigned int t = threadIdx.x;
  const unsigned int bar_s = static_cast<unsigned int>(__cvta_generic_to_shared(&bar));
  const unsigned int tile_s = static_cast<unsigned int>(__cvta_generic_to_shared(tile));
  const unsigned long long desc = reinterpret_cast<unsigned long long>(tm);
  if (box_bytes > sizeof(tile)) return;
  if (t == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_s) : "memory");
    // The barrier's initialisation must be visible to the async proxy that completes it.
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    if (acquire) asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(desc) : "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_s), "r"(box_bytes) : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
        "[%4];" ::"r"(tile_s),
        "l"(desc), "r"(c0), "r"(c1), "r"(bar_s)
        : "memory");
  }
  __syncthreads();
  unsigned int done = 0;
  while (!done) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(bar_s)
        : "memory");
  }
  for (unsigned int i = t; i < box_bytes / 2; i += blockDim.x) out[i] = tile[i];
}

extern "C" __global__ void probe_tma_load_param(const __grid_constant__ CUtensorMap tm, unsigned short* out, int c0,
                                                int c1, unsigned int box_bytes) {
  probe_tma_load(&tm, out, c0, c1, box_bytes, false);
}

extern "C" __global__ void probe_tma_load_global(const CUtensorMap* tm, unsigned short* out, int c0, int c1,
                                                 unsigned int box_bytes) {
  probe_tma_load(tm, out, c0, c1, box_bytes, true);
}
