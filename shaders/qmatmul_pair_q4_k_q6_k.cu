#include "xi_mvq.cuh"
// w (N, K) q4_k and w2 (N2, K) q6_k, xq (T, K) planar q8_1 -> y (T, N + N2) f32: qmatmul_q4_k into columns [0, N), qmatmul_q6_k into [N, N + N2), one launch (xi_mvq.cuh).
XI_QMATMUL_PAIR_ENTRIES(q4_k, q6_k, XI_Q4_K, XI_Q6_K)
