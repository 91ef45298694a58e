// The GEMM harnesses' TMA descriptors (benches/cuda/gemm_check.cu, gemm_swiglu_check.cu): a row-major
// matrix of `outer` rows by `inner` elements, 128B-swizzled boxes of box_outer x box_inner, encoded by
// CUDA's driver (the harness's side; Omega builds its own, checked byte for byte against this encoder).
#pragma once
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

static void encode(CUtensorMap* m, CUtensorMapDataType type, int elem_bytes, void* base, uint64_t inner,
                   uint64_t outer, uint32_t box_inner, uint32_t box_outer) {
  cuuint64_t dims[2] = {inner, outer};
  cuuint64_t strides[1] = {inner * elem_bytes};
  cuuint32_t box[2] = {box_inner, box_outer};
  cuuint32_t estr[2] = {1, 1};
  CUresult r = cuTensorMapEncodeTiled(m, type, 2, base, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", (int)r);
    exit(2);
  }
}
