#include "xi_entries.cuh"
// w (N, K) f32, x (T, K) f32 -> y (T, N) f32 (see xi_mvc.cuh, xi_quant.cuh; entries: xi_entries.cuh).
XI_MATMUL_ENTRIES(f32, XI_F32)
