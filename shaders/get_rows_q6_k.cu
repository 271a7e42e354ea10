#include "xi_kquant.cuh"
// table (vocab, dim) q6_k, ids (T) i32 -> out (T, dim) f32 (see xi_kquant.cuh).
XK_GET_ROWS(q6_k, XI_Q6_K)
