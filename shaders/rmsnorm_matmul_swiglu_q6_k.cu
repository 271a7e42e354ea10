#include "xi_kquant.cuh"
// w (2N, K) q6_k, x (T, K) f32, norm (K) f32 -> y (T, N) f32: silu(gate) * up of rmsnorm(x) * norm (see xi_kquant.cuh).
XK_RMSNORM_MATMUL_SWIGLU(q6_k, XI_Q6_K)
