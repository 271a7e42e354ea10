#include "xi_mvq.cuh"
// w (2N, K) q8_0, xq: qmatmul_normq's tokens -> y (T, N) = silu(gate) * up, the rmsnorm applied after the sums (xi_mvq.cuh, RMS).
XI_QMATMUL_RMS_SWIGLU_ENTRIES(q8_0, XI_Q8_0)
