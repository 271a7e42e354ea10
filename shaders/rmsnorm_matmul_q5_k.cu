#include "xi_entries.cuh"
#include "xi_mvp.cuh"
#include "xi_mvq.cuh"
// w (N, K) q5_k, x (T, K) f32, norm (K) f32 -> y (T, N) f32 RW: matmul of rmsnorm(x) * norm (xi_mvc.cuh).
XI_RMSNORM_MATMUL_ENTRIES(q5_k, XI_Q5_K)
XI_MVP_NORM_ENTRIES(q5_k, XI_Q5_K)
XI_MVQ_NORM_ENTRIES(q5_k, XI_Q5_K)
