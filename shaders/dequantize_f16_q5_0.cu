#include "xi_gemm_prep.cuh"
// src (n / block) q5_0 -> dst (n) f16: f16 (round to nearest even) of dequantize_q5_0's f32 values.
XK_DEQUANTIZE_F16(q5_0, XI_Q5_0)
