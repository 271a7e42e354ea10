#include "xi_kquant.cuh"
// table (vocab, dim) iq4_xs, ids (T) i32 -> out (T, dim) f32 (see xi_kquant.cuh).
XK_GET_ROWS(iq4_xs, XI_IQ4_XS)
