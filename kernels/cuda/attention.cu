// attention: the kernels of the attention library (src/libs/attention), one module so one load brings them all.
//
//   omega_gqa_attention_f32          dense GQA in f32: one warp per (query row, query head), online softmax,
//                                    any head_dim <= 256, optional causal mask (gqa_f32.cuh)
//   omega_paged_decode_bf16_d{32,64,128}
//                                    paged decode, bf16 KV: split-KV partials, the query heads of one KV head
//                                    packed into the rows of mma.sync m16n8k16 (paged_decode.cuh)
//   omega_attn_combine               the log-sum-exp merge of the splits' partials into the output (paged_decode.cuh)
//   omega_paged_decode_cluster_bf16_d{32,64,128}
//                                    the decode and the merge in one launch: a (sequence, KV head)'s splits
//                                    one cluster, merging through distributed shared memory (paged_decode.cuh)
//   omega_paged_decode_deep_bf16_d{32,64,128}, omega_paged_decode_cluster_deep_bf16_d{32,64,128}
//                                    the same with four pipeline stages a warp instead of two (paged_decode.cuh)
//   omega_attn_copy16                the benchmark's copy, its bandwidth denominator (copy.cuh)
//   omega_kv_append_bf16             one step's K/V rows written into the paged pool on the GPU (kv_append.cuh)
//   omega_qkv_rope_append_bf16       a fused QKV row: QK-norm + RoPE on q and k, q stored, k and v appended
//                                    (qkv_append.cuh)
//
// The pool's layout (every count in elements): page p of kv head h holds its K rows at
// pool + p * page_stride + h * head_stride, token-major, head_dim contiguous elements per token, and its V
// rows v_offset further. The host references the simulator runs are in src/core/kernels/attention.rs.
#include "attention/common.cuh"
#include "attention/copy.cuh"
#include "attention/gqa_f32.cuh"
#include "attention/kv_append.cuh"
#include "attention/paged_decode.cuh"
#include "attention/qkv_append.cuh"
