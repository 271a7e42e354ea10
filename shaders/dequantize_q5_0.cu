#include "xi_kquant.cuh"
// src (n / block) q5_0 -> dst (n) f32 (see xi_kquant.cuh).
XK_DEQUANTIZE(q5_0, XI_Q5_0)
