#include "xi_mvq.cuh"
// qmatmul_pair_q4_k_q6_k, then the rope / KV-cache stores of rope_kv_store in the epilogue (xi_mvq.cuh XiRope).
XI_QMATMUL_ROPE_PAIR_ENTRIES(q4_k, q6_k, XI_Q4_K, XI_Q6_K)
