#include "xi_mvq.cuh"
// w (N, K) q5_0, xq: qmatmul_normq's tokens -> y (T, N) f32 RW, the rmsnorm applied after the sums (xi_mvq.cuh, RMS).
XI_QMATMUL_RMS_ENTRIES(q5_0, XI_Q5_0)
