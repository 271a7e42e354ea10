#include "xi_entries.cuh"
#include "xi_mvp.cuh"
#include "xi_mvq.cuh"
// w (N, K) q5_k, x (T, K) f32 -> y (T, N) f32 (see xi_mvc.cuh, xi_kquant.cuh; entries: xi_entries.cuh).
XI_MATMUL_ENTRIES(q5_k, XI_Q5_K)
XI_MVP_ENTRIES(q5_k, XI_Q5_K)
XI_MVQ_ENTRIES(q5_k, XI_Q5_K)
