#include "xi_gemm_prep.cuh"
// src (n / block) q6_k -> dst (n) f16: f16 (round to nearest even) of dequantize_q6_k's f32 values.
XK_DEQUANTIZE_F16(q6_k, XI_Q6_K)
