#include "xi_kquant.cuh"
// table (vocab, dim) q5_k, ids (T) i32 -> out (T, dim) f32 (see xi_kquant.cuh).
XK_GET_ROWS(q5_k, XI_Q5_K)
