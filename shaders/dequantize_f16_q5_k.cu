#include "xi_gemm_prep.cuh"
// src (n / block) q5_k -> dst (n) f16: f16 (round to nearest even) of dequantize_q5_k's f32 values.
XK_DEQUANTIZE_F16(q5_k, XI_Q5_K)
