#include "xi_kquant.cuh"
// w (N, K) q5_1, x (T, K) f32, norm (K) f32 -> y (T, N) f32 RW: matmul of rmsnorm(x) * norm (see xi_kquant.cuh).
XK_RMSNORM_MATMUL(q5_1, XI_Q5_1)
