#include "xi_kquant.cuh"
// src (n / block) q6_k -> dst (n) f32 (see xi_kquant.cuh).
XK_DEQUANTIZE(q6_k, XI_Q6_K)
