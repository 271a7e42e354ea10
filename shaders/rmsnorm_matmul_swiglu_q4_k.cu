#include "xi_entries.cuh"
#include "xi_mvp.cuh"
#include "xi_mvq.cuh"
// w (2N, K) q4_k (gate rows, then up rows), x (T, K) f32, norm (K) f32 -> y (T, N) f32:
// silu(gate . h) * (up . h) with h = rmsnorm(x) * norm (xi_mvc.cuh).
XI_SWIGLU_ENTRIES(q4_k, XI_Q4_K)
XI_MVP_SWIGLU_ENTRIES(q4_k, XI_Q4_K)
XI_MVQ_SWIGLU_ENTRIES(q4_k, XI_Q4_K)
