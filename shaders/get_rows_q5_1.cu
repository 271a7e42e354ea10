#include "xi_kquant.cuh"
// table (vocab, dim) q5_1, ids (T) i32 -> out (T, dim) f32 (see xi_kquant.cuh).
XK_GET_ROWS(q5_1, XI_Q5_1)
