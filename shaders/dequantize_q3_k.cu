#include "xi_kquant.cuh"
// src (n / block) q3_k -> dst (n) f32 (see xi_kquant.cuh).
XK_DEQUANTIZE(q3_k, XI_Q3_K)
