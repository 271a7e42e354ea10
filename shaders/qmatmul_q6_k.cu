#include "xi_mvq.cuh"
// w (N, K) q6_k, xq (T, K) planar q8_1 (quantize_q8_1) -> y (T, N) f32 RW (xi_mvq.cuh, PRE).
XI_QMATMUL_ENTRIES(q6_k, XI_Q6_K)
