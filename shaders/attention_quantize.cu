#include "xi_attention.cuh"
// attention over an f32 cache, its output also quantized (planar q8_1, the next product's tokens):
// xi_attention.cuh's attention_body with QOUT.
XI_ATT_QUANT_ENTRIES(attention_quantize, attention_body, float, XI_ATT_QUANT_PARAMS(float),
                     (q, k, v, pos, out, part, count, c, xq))
