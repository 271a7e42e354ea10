#include "xi_attention.cuh"
// attention over an f32 cache: xi_attention.cuh's attention_body (the contract is there).
XI_ATT_ENTRIES(attention, attention_body, float, XI_ATT_PARAMS(float), (q, k, v, pos, out, part, count, c))
