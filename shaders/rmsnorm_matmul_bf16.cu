#include "xi_kquant.cuh"
// w (N, K) bf16, x (T, K) f32, norm (K) f32 -> y (T, N) f32 RW: matmul of rmsnorm(x) * norm (see xi_kquant.cuh).
XK_RMSNORM_MATMUL(bf16, XI_BF16)
