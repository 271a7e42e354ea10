#include "xi_mvq.cuh"
// w (2N, K) q4_1, xq: qmatmul_normq's tokens -> y (T, N) = silu(gate) * up, the rmsnorm applied after the sums (xi_mvq.cuh, RMS).
XI_QMATMUL_RMS_SWIGLU_ENTRIES(q4_1, XI_Q4_1)
