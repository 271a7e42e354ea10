#include "xi_entries.cuh"
// w (N, K) iq4_nl, x (T, K) f32, norm (K) f32 -> y (T, N) f32 RW: matmul of rmsnorm(x) * norm (xi_mvc.cuh).
XI_RMSNORM_MATMUL_ENTRIES(iq4_nl, XI_IQ4_NL)
