// decoder: the small kernels a decoder step needs between the matmul, elementwise and attention
// libraries' kernels, one module so one load brings them all. bf16 travels as its bit pattern
// (uint16_t); every kernel computes in f32:
//
//   omega_embed_bf16        out[t, :] = table[ids[t], :] (a row of zeros for an id past the vocabulary)
//   omega_cast_f32_bf16     dst[i] = bf16(src[i]), nearest even
//   omega_router_topk       softmax over each token's expert logits, its top k, renormalised
//   omega_argmax_f32        out[r] = the lowest index of row r's largest value (greedy decoding)
//   omega_moe_combine_bf16  out[t, :] = res[t, :] + the router-weighted sum of t's grouped GEMM rows
//   omega_moe_combine_rmsnorm_bf16  the combine into h and the RMSNorm of h in one launch
//   omega_rope_step         a step's start: RoPE cos/sin tables and attention lengths from the positions
//   omega_fill_bf16_hash    the seeded weight generator (src/libs/serving/weights.rs) on the device
//   omega_l2_prefetch       the L2 fetches a later kernel's operands while latency-bound kernels run
//
// The host references the simulator runs are in src/core/kernels/decoder.rs.
#include "decoder/gather.cuh"
#include "decoder/select.cuh"
#include "decoder/combine.cuh"
#include "decoder/model.cuh"
#include "decoder/prefetch.cuh"
