#include "xi_entries.cuh"
// w (N, K) q4_k, x (T, K) f32, norm (K) f32 -> y (T, N) f32 RW: matmul of rmsnorm(x) * norm (xi_mvc.cuh).
XI_RMSNORM_MATMUL_ENTRIES(q4_k, XI_Q4_K)
