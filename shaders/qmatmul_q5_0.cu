#include "xi_mvq.cuh"
// w (N, K) q5_0, xq (T, K) planar q8_1 (quantize_q8_1) -> y (T, N) f32 RW (xi_mvq.cuh, PRE).
XI_QMATMUL_ENTRIES(q5_0, XI_Q5_0)
