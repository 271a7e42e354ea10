#include "xi_kquant.cuh"
// table (vocab, dim) q3_k, ids (T) i32 -> out (T, dim) f32 (see xi_kquant.cuh).
XK_GET_ROWS(q3_k, XI_Q3_K)
