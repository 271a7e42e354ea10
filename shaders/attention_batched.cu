#include "xi_attention.cuh"
// attention_batched over an f32 cache: xi_attention.cuh's attention_batched_body (the contract is there).
XI_ATT_ENTRIES(attention_batched, attention_batched_body, float, XI_ATT_BATCHED_PARAMS(float),
               (q, k, v, first, last, out, part, count, c))
