#include "xi_kquant.cuh"
// w (N, K) bf16, x (T, K) f32 -> y (T, N) f32 (see xi_kquant.cuh).
XK_MATMUL(bf16, XI_BF16)
