#include "xi_mvq.cuh"
// w (2N, K) q8_0 (gate rows, then up rows), xq (T, K) planar q8_1 (quantize_q8_1) -> y (T, N) f32:
// silu(gate . h) * (up . h), h the quantized tokens (xi_mvq.cuh, PRE).
XI_QMATMUL_SWIGLU_ENTRIES(q8_0, XI_Q8_0)
