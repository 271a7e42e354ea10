#include "xi_kquant.cuh"
// table (vocab, dim) q4_k, ids (T) i32 -> out (T, dim) f32 (see xi_kquant.cuh).
XK_GET_ROWS(q4_k, XI_Q4_K)
