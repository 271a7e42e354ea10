#include "xi_entries.cuh"
// w (N, K) iq4_xs, x (T, K) f32 -> y (T, N) f32 (see xi_mvc.cuh, xi_kquant.cuh; entries: xi_entries.cuh).
XI_MATMUL_ENTRIES(iq4_xs, XI_IQ4_XS)
