#include "xi_mvq.cuh"
// w (N, K) q4_k, xq (T, K) planar q8_1 (quantize_q8_1) -> y (T, N) f32 RW (xi_mvq.cuh, PRE).
XI_QMATMUL_ENTRIES(q4_k, XI_Q4_K)
