#include "xi_mvq.cuh"
// w (N, K) q4_0, xq: qmatmul_normq's tokens -> y (T, N) f32 RW, the rmsnorm applied after the sums (xi_mvq.cuh, RMS).
XI_QMATMUL_RMS_ENTRIES(q4_0, XI_Q4_0)
