#include "xi_gemm_prep.cuh"
// src (n / block) iq4_nl -> dst (n) f16: f16 (round to nearest even) of dequantize_iq4_nl's f32 values.
XK_DEQUANTIZE_F16(iq4_nl, XI_IQ4_NL)
