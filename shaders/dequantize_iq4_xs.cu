#include "xi_kquant.cuh"
// src (n / block) iq4_xs -> dst (n) f32 (see xi_kquant.cuh).
XK_DEQUANTIZE(iq4_xs, XI_IQ4_XS)
