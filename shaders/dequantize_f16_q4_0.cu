#include "xi_gemm_prep.cuh"
// src (n / block) q4_0 -> dst (n) f16: f16 (round to nearest even) of dequantize_q4_0's f32 values.
XI_DEQUANTIZE_F16(q4_0, XI_Q4_0)
