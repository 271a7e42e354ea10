#include "xi_entries.cuh"
// w (N, K) q5_1, x (T, K) f32 -> y (T, N) f32 (see xi_mvc.cuh, xi_kquant.cuh; entries: xi_entries.cuh).
XI_MATMUL_ENTRIES(q5_1, XI_Q5_1)
