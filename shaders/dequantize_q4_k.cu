#include "xi_kquant.cuh"
// src (n / block) q4_k -> dst (n) f32 (see xi_kquant.cuh).
XK_DEQUANTIZE(q4_k, XI_Q4_K)
