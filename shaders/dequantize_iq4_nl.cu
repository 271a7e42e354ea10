#include "xi_kquant.cuh"
// src (n / block) iq4_nl -> dst (n) f32 (see xi_kquant.cuh).
XK_DEQUANTIZE(iq4_nl, XI_IQ4_NL)
