#include "xi_attention.cuh"
// attention_batched over an f16 cache: xi_attention.cuh's attention_batched_body (the contract is there).
XI_ATT_ENTRIES(attention_batched_f16, attention_batched_body, uint16_t, XI_ATT_BATCHED_PARAMS(uint16_t),
               (q, k, v, first, last, out, part, count, c))
