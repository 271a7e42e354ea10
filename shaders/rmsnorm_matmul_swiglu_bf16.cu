#include "xi_entries.cuh"
// w (2N, K) bf16 (gate rows, then up rows), x (T, K) f32, norm (K) f32 -> y (T, N) f32:
// silu(gate . h) * (up . h) with h = rmsnorm(x) * norm (xi_mvc.cuh).
XI_SWIGLU_ENTRIES(bf16, XI_BF16)
