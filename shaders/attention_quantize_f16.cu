#include "xi_attention.cuh"
// attention over an f16 cache, its output also quantized (planar q8_1, the next product's tokens):
// xi_attention.cuh's attention_body with QOUT.
XI_ATT_QUANT_ENTRIES(attention_quantize_f16, attention_body, uint16_t, XI_ATT_QUANT_PARAMS(uint16_t),
                     (q, k, v, pos, out, part, count, c, xq))
