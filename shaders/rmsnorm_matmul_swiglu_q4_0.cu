#include "xi_entries.cuh"
#include "xi_mvp.cuh"
#include "xi_mvq.cuh"
#include "xi_mmq.cuh"
// w (2N, K) q4_0 (gate rows, then up rows), x (T, K) f32, norm (K) f32 -> y (T, N) f32:
// silu(gate . h) * (up . h) with h = rmsnorm(x) * norm (xi_mvc.cuh).
XI_SWIGLU_ENTRIES(q4_0, XI_Q4_0)
XI_SWIGLU_MMQ_ENTRIES(q4_0, XI_Q4_0)
XI_MVP_SWIGLU_ENTRIES(q4_0, XI_Q4_0)
XI_MVQ_SWIGLU_ENTRIES(q4_0, XI_Q4_0)
