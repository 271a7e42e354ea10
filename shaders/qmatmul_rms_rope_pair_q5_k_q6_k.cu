#include "xi_mvq.cuh"
// qmatmul_rms_pair_q5_k_q6_k, then the rope / KV-cache stores of rope_kv_store in the epilogue (xi_mvq.cuh XiRope).
XI_QMATMUL_RMS_ROPE_PAIR_ENTRIES(q5_k, q6_k, XI_Q5_K, XI_Q6_K)
