#include "xi_entries.cuh"
// w (2N, K) iq4_nl (gate rows, then up rows), x (T, K) f32, norm (K) f32 -> y (T, N) f32:
// silu(gate . h) * (up . h) with h = rmsnorm(x) * norm (xi_mvc.cuh).
XI_SWIGLU_ENTRIES(iq4_nl, XI_IQ4_NL)
