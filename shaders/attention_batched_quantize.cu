#include "xi_attention.cuh"
// attention_batched over an f32 cache, its output also quantized (planar q8_1, the next product's
// tokens): xi_attention.cuh's attention_batched_body with QOUT.
XI_ATT_QUANT_ENTRIES(attention_batched_quantize, attention_batched_body, float, XI_ATT_BATCHED_QUANT_PARAMS(float),
                     (q, k, v, first, last, out, part, count, c, xq))
