#include "xi_entries.cuh"
// w (N, K) q5_1, x (T, K) f32, norm (K) f32 -> y (T, N) f32 RW: matmul of rmsnorm(x) * norm (xi_mvc.cuh).
XI_RMSNORM_MATMUL_ENTRIES(q5_1, XI_Q5_1)
