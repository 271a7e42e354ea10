#include "xi_kquant.cuh"
// src (n / block) q5_k -> dst (n) f32 (see xi_kquant.cuh).
XK_DEQUANTIZE(q5_k, XI_Q5_K)
