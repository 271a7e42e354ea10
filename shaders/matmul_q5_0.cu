#include "xi_kquant.cuh"
// w (N, K) q5_0, x (T, K) f32 -> y (T, N) f32 (see xi_kquant.cuh).
XK_MATMUL(q5_0, XI_Q5_0)
