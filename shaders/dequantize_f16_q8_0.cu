#include "xi_gemm_prep.cuh"
// src (n / block) q8_0 -> dst (n) f16: f16 (round to nearest even) of dequantize_q8_0's f32 values.
XI_DEQUANTIZE_F16(q8_0, XI_Q8_0)
