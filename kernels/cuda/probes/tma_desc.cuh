// tma_desc.cuh: Omega's device-side TMA descriptor builder, shared by the nv_probe TMA probe
// (probe_tma.cu) and the CUDA-side checker (benches/cuda/tma_check.cu), so the bytes the checker compares
// with cuTensorMapEncodeTiled are the bytes the probe's kernels use.
//
// The CUtensorMap bit layout is not published. The builder therefore never writes it: it zeroes 128 bytes
// of shared memory, sets each field with `tensormap.replace.tile.*` (the PTX ISA's own encoder), and
// publishes the result to global memory with `tensormap.cp_fenceproxy`, which also orders the copy
// against later tensormap-proxy reads. A block that then uses a descriptor written this way in global
// memory runs `fence.proxy.tensormap::generic.acquire.gpu` on it once before its first TMA.
//
// Field values are the PTX ISA's encodings, which differ from CUDA's CUtensorMap* enums in places
// (documented in docs/kernels.md, "TMA descriptors built on the device"):
//   elemtype  0 u8, 1 u16, 2 u32, 3 s32, 4 u64, 5 s64, 6 f16, 7 f32, 8 f32.ftz, 9 f64, 10 bf16, 11 tf32,
//             12 tf32.ftz                                    (CUDA: f64 8, bf16 9, f32.ftz 10)
//   swizzle   0 none, 1 32 B, 2 64 B, 3 128 B                (same as CUDA)
//   interleave 0 none, 1 16 B, 2 32 B                        (same as CUDA)
//   fill      0 zeros, 1 NaN (OOB_NAN_REQUEST_ZERO_FMA)      (same as CUDA)
// rank is written as rank - 1; global_stride ordinal i is the byte stride of dimension i + 1 (dimension 0
// is contiguous), passed unshifted (PTX ISA 8.3+ / ptxas 13: bytes, not bytes >> 4).
#pragma once

// One descriptor's parameters, 128 bytes, as the host writes them (hal/examples/nv_probe.rs mirrors this
// layout word for word in `TmaArgs`).
struct OmegaTmaArgs {
  unsigned long long global_address;    // @0: 16-byte aligned
  unsigned long long global_stride[4];  // @8: bytes, dimensions 1..rank-1 (multiples of 16)
  unsigned int global_dim[5];           // @40: elements per dimension
  unsigned int box_dim[5];              // @60: 1..256 per dimension
  unsigned int element_stride[5];       // @80: 1..8 per dimension
  unsigned int rank;                    // @100: 1..5
  unsigned int elemtype;                // @104: PTX encoding (above)
  unsigned int swizzle;                 // @108
  unsigned int interleave;              // @112
  unsigned int fill;                    // @116
  unsigned int reserved[2];             // @120
};
static_assert(sizeof(OmegaTmaArgs) == 128, "OmegaTmaArgs is 128 bytes");

// `tensormap.replace` takes its ordinal and its field-3 values as immediates, so every value the builder
// accepts has its own instruction.
#define OMEGA_TM_DIM(ord)                                                                                     \
  if (a.rank > ord) {                                                                                          \
    asm volatile("tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%0], " #ord ", %1;" ::"l"(s),         \
                 "r"(a.box_dim[ord])                                                                           \
                 : "memory");                                                                                  \
    asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], " #ord ", %1;" ::"l"(s),      \
                 "r"(a.global_dim[ord])                                                                        \
                 : "memory");                                                                                  \
    asm volatile("tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%0], " #ord ", %1;" ::"l"(s),  \
                 "r"(a.element_stride[ord])                                                                    \
                 : "memory");                                                                                  \
  }
#define OMEGA_TM_STRIDE(ord)                                                                                  \
  if (a.rank > ord + 1) {                                                                                      \
    asm volatile("tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], " #ord ", %1;" ::"l"(s),   \
                 "l"(a.global_stride[ord])                                                                     \
                 : "memory");                                                                                  \
  }
#define OMEGA_TM_FIELD3(field, value)                                                                         \
  case value:                                                                                                  \
    asm volatile("tensormap.replace.tile." #field ".shared::cta.b1024.b32 [%0], " #value ";" ::"l"(s)         \
                 : "memory");                                                                                  \
    break;

// Fills the zeroed 128-byte, 128-byte-aligned shared buffer at shared-window address `s` from `a`. One
// thread. Returns false for a value the builder has no instruction for (the buffer is then incomplete).
__device__ inline bool omega_tma_fill(unsigned long long s, const OmegaTmaArgs& a) {
  if (a.rank < 1 || a.rank > 5) return false;
  asm volatile("tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;" ::"l"(s),
               "l"(a.global_address)
               : "memory");
  asm volatile("tensormap.replace.tile.rank.shared::cta.b1024.b32 [%0], %1;" ::"l"(s), "r"(a.rank - 1)
               : "memory");
  OMEGA_TM_DIM(0) OMEGA_TM_DIM(1) OMEGA_TM_DIM(2) OMEGA_TM_DIM(3) OMEGA_TM_DIM(4)
  OMEGA_TM_STRIDE(0) OMEGA_TM_STRIDE(1) OMEGA_TM_STRIDE(2) OMEGA_TM_STRIDE(3)
  switch (a.elemtype) {
    OMEGA_TM_FIELD3(elemtype, 0) OMEGA_TM_FIELD3(elemtype, 1) OMEGA_TM_FIELD3(elemtype, 2)
    OMEGA_TM_FIELD3(elemtype, 3) OMEGA_TM_FIELD3(elemtype, 4) OMEGA_TM_FIELD3(elemtype, 5)
    OMEGA_TM_FIELD3(elemtype, 6) OMEGA_TM_FIELD3(elemtype, 7) OMEGA_TM_FIELD3(elemtype, 8)
    OMEGA_TM_FIELD3(elemtype, 9) OMEGA_TM_FIELD3(elemtype, 10) OMEGA_TM_FIELD3(elemtype, 11)
    OMEGA_TM_FIELD3(elemtype, 12)
    default: return false;
  }
  switch (a.interleave) {
    OMEGA_TM_FIELD3(interleave_layout, 0) OMEGA_TM_FIELD3(interleave_layout, 1)
    OMEGA_TM_FIELD3(interleave_layout, 2)
    default: return false;
  }
  switch (a.swizzle) {
    OMEGA_TM_FIELD3(swizzle_mode, 0) OMEGA_TM_FIELD3(swizzle_mode, 1) OMEGA_TM_FIELD3(swizzle_mode, 2)
    OMEGA_TM_FIELD3(swizzle_mode, 3)
    default: return false;
  }
  switch (a.fill) {
    OMEGA_TM_FIELD3(fill_mode, 0) OMEGA_TM_FIELD3(fill_mode, 1)
    default: return false;
  }
  return true;
}

// Builds descriptor `blockIdx.x` of `count` from `args[blockIdx.x]` into `out[blockIdx.x]` (128 bytes,
// 64-byte aligned). One warp per block; `status[blockIdx.x]` = 1 built, 2 refused (a value without an
// instruction), so a refused shape is never mistaken for a wrong encoding.
extern "C" __global__ void __launch_bounds__(32) omega_tma_build(const OmegaTmaArgs* args, void* out,
                                                                 unsigned int* status, unsigned int count) {
  __shared__ alignas(128) unsigned int tm[32];
  const unsigned int b = blockIdx.x;
  if (b >= count) return;
  tm[threadIdx.x] = 0;
  __syncwarp();
  unsigned long long s = static_cast<unsigned long long>(__cvta_generic_to_shared(tm));
  bool ok = true;
  if (threadIdx.x == 0) ok = omega_tma_fill(s, args[b]);
  ok = __shfl_sync(0xffffffffu, ok, 0);
  __syncwarp();
  unsigned long long g = reinterpret_cast<unsigned long long>(static_cast<char*>(out) + 128ull * b);
  // .sync.aligned: the whole warp executes the copy.
  asm volatile(
      "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%0], [%1], 128;" ::"l"(
          g),
      "r"(static_cast<unsigned int>(s))
      : "memory");
  if (threadIdx.x == 0) status[b] = ok ? 1u : 2u;
}
