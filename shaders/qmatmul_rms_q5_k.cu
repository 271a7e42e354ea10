#include "xi_mvq.cuh"
// w (N, K) q5_k, xq: qmatmul_normq's tokens -> y (T, N) f32 RW, the rmsnorm applied after the sums (xi_mvq.cuh, RMS).
XI_QMATMUL_RMS_ENTRIES(q5_k, XI_Q5_K)
