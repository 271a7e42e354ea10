#include "xi_kquant.cuh"
// w (N, K) q6_k, x (T, K) f32 -> y (T, N) f32 (see xi_kquant.cuh).
XK_MATMUL(q6_k, XI_Q6_K)
