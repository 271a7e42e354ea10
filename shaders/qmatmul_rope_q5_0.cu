#include "xi_mvq.cuh"
// w (N, K) q5_0, xq: quantize_q8_1's tokens -> y (T, N) f32 and the rope / KV-cache stores of rope_kv_store in the epilogue (xi_mvq.cuh XiRope).
XI_QMATMUL_ROPE_ENTRIES(q5_0, XI_Q5_0)
