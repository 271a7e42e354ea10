#include "xi_entries.cuh"
#include "xi_mvp.cuh"
// w (N, K) f16, x (T, K) f32, norm (K) f32 -> y (T, N) f32 RW: matmul of rmsnorm(x) * norm (xi_mvc.cuh).
XI_RMSNORM_MATMUL_ENTRIES(f16, XI_F16)
XI_MVP_NORM_ENTRIES(f16, XI_F16)
