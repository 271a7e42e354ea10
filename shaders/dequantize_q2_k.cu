#include "xi_kquant.cuh"
// src (n / block) q2_k -> dst (n) f32 (see xi_kquant.cuh).
XK_DEQUANTIZE(q2_k, XI_Q2_K)
