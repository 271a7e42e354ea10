#include "xi_kquant.cuh"
// w (N, K) q4_k, x (T, K) f32 -> y (T, N) f32 (see xi_kquant.cuh).
XK_MATMUL(q4_k, XI_Q4_K)
