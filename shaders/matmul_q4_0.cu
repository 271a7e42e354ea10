#include "xi_entries.cuh"
#include "xi_mvp.cuh"
#include "xi_mvq.cuh"
#include "xi_mmq.cuh"
// w (N, K) q4_0, x (T, K) f32 -> y (T, N) f32 (see xi_mvc.cuh, xi_quant.cuh; entries: xi_entries.cuh).
XI_MATMUL_ENTRIES(q4_0, XI_Q4_0)
XI_MATMUL_MMQ_ENTRIES(q4_0, XI_Q4_0)
XI_MVP_ENTRIES(q4_0, XI_Q4_0)
XI_MVQ_ENTRIES(q4_0, XI_Q4_0)
