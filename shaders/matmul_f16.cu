#include "xi_entries.cuh"
#include "xi_mvp.cuh"
// w (N, K) f16, x (T, K) f32 -> y (T, N) f32 (see xi_mvc.cuh, xi_quant.cuh; entries: xi_entries.cuh).
XI_MATMUL_ENTRIES(f16, XI_F16)
XI_MVP_ENTRIES(f16, XI_F16)
