#include "xi_kquant.cuh"
// w (N, K) iq4_xs, x (T, K) f32, norm (K) f32 -> y (T, N) f32 RW: matmul of rmsnorm(x) * norm (see xi_kquant.cuh).
XK_RMSNORM_MATMUL(iq4_xs, XI_IQ4_XS)
