#include "xi_mvq.cuh"
// w (N, K) q6_k, xq: qmatmul_normq's tokens -> y (T, N) f32 RW, the rmsnorm applied after the sums (xi_mvq.cuh, RMS).
XI_QMATMUL_RMS_ENTRIES(q6_k, XI_Q6_K)
