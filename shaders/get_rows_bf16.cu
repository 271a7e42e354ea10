#include "xi_kquant.cuh"
// table (vocab, dim) bf16, ids (T) i32 -> out (T, dim) f32 (see xi_kquant.cuh).
XK_GET_ROWS(bf16, XI_BF16)
