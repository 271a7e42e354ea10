#include "xi_mvq.cuh"
// w (N, K) q6_k, xq: quantize_q8_1's tokens -> y (T, N) f32 and the rope / KV-cache stores of rope_kv_store in the epilogue (xi_mvq.cuh XiRope).
XI_QMATMUL_ROPE_ENTRIES(q6_k, XI_Q6_K)
