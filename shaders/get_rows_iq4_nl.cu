#include "xi_kquant.cuh"
// table (vocab, dim) iq4_nl, ids (T) i32 -> out (T, dim) f32 (see xi_kquant.cuh).
XK_GET_ROWS(iq4_nl, XI_IQ4_NL)
