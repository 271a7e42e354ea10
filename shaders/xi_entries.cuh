// The entry points of the matrix kernels, one macro a group (shaders/matmul_DT.cu,
// rmsnorm_matmul_DT.cu and rmsnorm_matmul_swiglu_DT.cu expand them for their type): the first
// entry (xi_mvc.cuh: T <= 8, and xi_quant.cuh's warp-per-row kernel where a row does not fit the
// stage), `_t` (xi_mvt.cuh, the register-tiled kernel at T > XI_MVT_MIN_T) and, for the types with
// a tensor-core kernel (files that include xi_tc.cuh), `_tc` and `_tct` (xi_tc.cuh: 8 tokens a
// block at T <= 8, 32 at T > 8, 16 with GLU) for the weights the backend gives it
// (_launch.tc_weight), at every T. Every entry's row results are bit-identical whatever T, but for
// the integer decode entry `_pq` (xi_mvq.cuh, q8_1 activations: llama.cpp's numerics), which the
// backend runs at 1 <= T <= 8 only: its rows are bit-identical at every such T, not to the others'.
#pragma once
#include "xi_mvt.cuh"

#define XI_MATMUL_PARAMS const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y, xi_matmul_c c
#define XI_NORM_PARAMS(C) const uint8_t *__restrict__ w, const float *__restrict__ x, const float *__restrict__ norm, \
                          float *__restrict__ y, C c

// matmul_DT: w (N, K) DT, x (T, K) f32 -> y (T, N) f32
#define XI_MATMUL_ENTRIES(DT, TYPE)                                                                 \
    extern "C" __global__ void __launch_bounds__(256, 4) matmul_##DT(XI_MATMUL_PARAMS) {            \
        xi_matmul_any<TYPE>(w, x, y, c);                                                            \
    }                                                                                               \
    extern "C" __global__ void __launch_bounds__(256, 2) matmul_##DT##_t(XI_MATMUL_PARAMS) {        \
        xi_grid_begin();                                                                            \
        xi_matmul_t<TYPE>(w, x, y, c);                                                              \
    }
#define XI_MATMUL_TC_ENTRIES(DT, TYPE)                                                              \
    extern "C" __global__ void __maxnreg__(96) matmul_##DT##_tc(XI_MATMUL_PARAMS) {                 \
        xi_grid_begin();                                                                            \
        const XiMvcArgs a{w, x, nullptr, y, c.T, c.N, c.K, c.accumulate, 0.0f};                     \
        xi_tc_kernel<TYPE, false, false>(a);                                                        \
    }                                                                                               \
    extern "C" __global__ void __launch_bounds__(512) matmul_##DT##_tct(XI_MATMUL_PARAMS) {         \
        xi_grid_begin();                                                                            \
        const XiMvcArgs a{w, x, nullptr, y, c.T, c.N, c.K, c.accumulate, 0.0f};                     \
        xi_tc_kernel_t<TYPE, false, false>(a);                                                      \
    }

// rmsnorm_matmul_DT: the same of h = rmsnorm(x) * norm (norm (K) f32), y RW
#define XI_RMSNORM_MATMUL_ENTRIES(DT, TYPE)                                                                          \
    extern "C" __global__ void __launch_bounds__(256, 4) rmsnorm_matmul_##DT(XI_NORM_PARAMS(xi_rmsnorm_matmul_c)) {  \
        const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, c.accumulate, c.eps};                                        \
        xi_mvc_kernel<TYPE, true, false>(a);                                                                         \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(256, 2) rmsnorm_matmul_##DT##_t(XI_NORM_PARAMS(xi_rmsnorm_matmul_c)) { \
        xi_grid_begin();                                                                                             \
        const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, c.accumulate, c.eps};                                        \
        xi_mvt_kernel<TYPE, true, false>(a);                                                                         \
    }
#define XI_RMSNORM_MATMUL_TC_ENTRIES(DT, TYPE)                                                                       \
    extern "C" __global__ void __maxnreg__(96) rmsnorm_matmul_##DT##_tc(XI_NORM_PARAMS(xi_rmsnorm_matmul_c)) {       \
        xi_grid_begin();                                                                                             \
        const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, c.accumulate, c.eps};                                        \
        xi_tc_kernel<TYPE, true, false>(a);                                                                          \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(512) rmsnorm_matmul_##DT##_tct(XI_NORM_PARAMS(xi_rmsnorm_matmul_c)) { \
        xi_grid_begin();                                                                                             \
        const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, c.accumulate, c.eps};                                        \
        xi_tc_kernel_t<TYPE, true, false>(a);                                                                        \
    }

// rmsnorm_matmul_swiglu_DT: w (2N, K) DT (gate rows, then up rows) -> y (T, N) = silu(gate . h) * (up . h)
#define XI_SWIGLU_ENTRIES(DT, TYPE)                                                                                  \
    extern "C" __global__ void __launch_bounds__(256, 4) rmsnorm_matmul_swiglu_##DT(                                 \
        XI_NORM_PARAMS(xi_rmsnorm_matmul_swiglu_c)) {                                                                \
        const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, 0, c.eps};                                                   \
        xi_mvc_kernel<TYPE, true, true>(a);                                                                          \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(256, 2) rmsnorm_matmul_swiglu_##DT##_t(                             \
        XI_NORM_PARAMS(xi_rmsnorm_matmul_swiglu_c)) {                                                                \
        xi_grid_begin();                                                                                             \
        const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, 0, c.eps};                                                   \
        xi_mvt_kernel<TYPE, true, true>(a);                                                                          \
    }
#define XI_SWIGLU_TC_ENTRIES(DT, TYPE)                                                                               \
    extern "C" __global__ void __maxnreg__(112) rmsnorm_matmul_swiglu_##DT##_tc(                                     \
        XI_NORM_PARAMS(xi_rmsnorm_matmul_swiglu_c)) {                                                                \
        xi_grid_begin();                                                                                             \
        const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, 0, c.eps};                                                   \
        xi_tc_kernel<TYPE, true, true>(a);                                                                           \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(512) rmsnorm_matmul_swiglu_##DT##_tct(                              \
        XI_NORM_PARAMS(xi_rmsnorm_matmul_swiglu_c)) {                                                                \
        xi_grid_begin();                                                                                             \
        const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, 0, c.eps};                                                   \
        xi_tc_kernel_t<TYPE, true, true>(a);                                                                         \
    }
