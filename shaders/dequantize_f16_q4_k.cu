#include "xi_gemm_prep.cuh"
// src (n / block) q4_k -> dst (n) f16: f16 (round to nearest even) of dequantize_q4_k's f32 values.
XK_DEQUANTIZE_F16(q4_k, XI_Q4_K)
