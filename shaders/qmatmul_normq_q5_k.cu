#include "xi_mvq.cuh"
// w (N, K) q5_k, xq (T, K) planar q8_1 -> y (T, N) f32 RW, then xqn: rmsnorm(y) * norm quantized for a qmatmul with rms = 1 (xi_mvq.cuh, NQ).
XI_QMATMUL_NORMQ_ENTRIES(q5_k, XI_Q5_K)
