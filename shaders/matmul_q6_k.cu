#include "xi_entries.cuh"
#include "xi_mvp.cuh"
#include "xi_mvq.cuh"
// w (N, K) q6_k, x (T, K) f32 -> y (T, N) f32 (see xi_mvc.cuh, xi_kquant.cuh; entries: xi_entries.cuh).
XI_MATMUL_ENTRIES(q6_k, XI_Q6_K)
XI_MVP_ENTRIES(q6_k, XI_Q6_K)
XI_MVQ_ENTRIES(q6_k, XI_Q6_K)
