#include "xi_kquant.cuh"
// table (vocab, dim) q2_k, ids (T) i32 -> out (T, dim) f32 (see xi_kquant.cuh).
XK_GET_ROWS(q2_k, XI_Q2_K)
