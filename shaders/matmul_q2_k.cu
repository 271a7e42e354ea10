#include "xi_kquant.cuh"
// w (N, K) q2_k, x (T, K) f32 -> y (T, N) f32 (see xi_kquant.cuh).
XK_MATMUL(q2_k, XI_Q2_K)
