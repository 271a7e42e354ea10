#include "xi_entries.cuh"
#include "xi_mvp.cuh"
// w (2N, K) f16 (gate rows, then up rows), x (T, K) f32, norm (K) f32 -> y (T, N) f32:
// silu(gate . h) * (up . h) with h = rmsnorm(x) * norm (xi_mvc.cuh).
XI_SWIGLU_ENTRIES(f16, XI_F16)
XI_MVP_SWIGLU_ENTRIES(f16, XI_F16)
