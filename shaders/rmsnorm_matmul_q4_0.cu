#include "xi_entries.cuh"
#include "xi_mvp.cuh"
#include "xi_mvq.cuh"
#include "xi_mmq.cuh"
// w (N, K) q4_0, x (T, K) f32, norm (K) f32 -> y (T, N) f32 RW: matmul of rmsnorm(x) * norm (xi_mvc.cuh).
XI_RMSNORM_MATMUL_ENTRIES(q4_0, XI_Q4_0)
XI_RMSNORM_MATMUL_MMQ_ENTRIES(q4_0, XI_Q4_0)
XI_MVP_NORM_ENTRIES(q4_0, XI_Q4_0)
XI_MVQ_NORM_ENTRIES(q4_0, XI_Q4_0)
