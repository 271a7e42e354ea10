#include "xi_entries.cuh"
// w (N, K) q3_k, x (T, K) f32 -> y (T, N) f32 (see xi_mvc.cuh, xi_kquant.cuh; entries: xi_entries.cuh).
XI_MATMUL_ENTRIES(q3_k, XI_Q3_K)
