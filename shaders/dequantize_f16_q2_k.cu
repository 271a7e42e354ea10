#include "xi_gemm_prep.cuh"
// src (n / block) q2_k -> dst (n) f16: f16 (round to nearest even) of dequantize_q2_k's f32 values.
XK_DEQUANTIZE_F16(q2_k, XI_Q2_K)
