#include "xi_kquant.cuh"
// w (N, K) q3_k, x (T, K) f32, norm (K) f32 -> y (T, N) f32 RW: matmul of rmsnorm(x) * norm (see xi_kquant.cuh).
XK_RMSNORM_MATMUL(q3_k, XI_Q3_K)
