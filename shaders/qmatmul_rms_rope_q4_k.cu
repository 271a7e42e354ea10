#include "xi_mvq.cuh"
// w (N, K) q4_k, xq: qmatmul_normq's tokens -> y (T, N) f32, the rmsnorm after the sums, and the rope / KV-cache stores of rope_kv_store in the epilogue (xi_mvq.cuh XiRope).
XI_QMATMUL_RMS_ROPE_ENTRIES(q4_k, XI_Q4_K)
