#include "xi_attention.cuh"
// attention over an f16 cache (IEEE half bits): xi_attention.cuh's attention_body (the contract is there).
XI_ATT_ENTRIES(attention_f16, attention_body, uint16_t, XI_ATT_PARAMS(uint16_t), (q, k, v, pos, out, part, count, c))
