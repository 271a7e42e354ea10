#include "xi_gemm_prep.cuh"
// src (n / block) q3_k -> dst (n) f16: f16 (round to nearest even) of dequantize_q3_k's f32 values.
XK_DEQUANTIZE_F16(q3_k, XI_Q3_K)
