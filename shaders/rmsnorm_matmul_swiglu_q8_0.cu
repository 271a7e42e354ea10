#include "xi_mvt.cuh"
#include "xi_tc.cuh"
// w (2N, K) q8_0 (gate rows, then up rows), x (T, K) f32, norm (K) f32 -> y (T, N) f32:
// silu(gate . h) * (up . h) with h = rmsnorm(x) * norm (xi_mvc.cuh).
extern "C" __global__ void __launch_bounds__(256, 4) rmsnorm_matmul_swiglu_q8_0(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                                                         const float *__restrict__ norm, float *__restrict__ y,
                                                                         xi_rmsnorm_matmul_swiglu_c c) {
    const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, 0, c.eps};
    xi_mvc_kernel<XI_Q8_0, true, true>(a);
}
// the same at T > XI_MVT_MIN_T: the register-tiled kernel (xi_mvt.cuh), bit-identical a row.
extern "C" __global__ void __launch_bounds__(256, 2) rmsnorm_matmul_swiglu_q8_0_t(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                                            const float *__restrict__ norm, float *__restrict__ y, xi_rmsnorm_matmul_swiglu_c c) {
    xi_grid_begin();
    const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, 0, c.eps};
    xi_mvt_kernel<XI_Q8_0, true, true>(a);
}
// the tensor-core kernel (xi_tc.cuh) for the weights the backend gives it (_launch.tc_weight), at
// every T: 8 tokens a block (T <= 8), and up to 16 a block at T > 8; bit-identical a row.
extern "C" __global__ void __maxnreg__(112) rmsnorm_matmul_swiglu_q8_0_tc(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                                                         const float *__restrict__ norm, float *__restrict__ y,
                                                                         xi_rmsnorm_matmul_swiglu_c c) {
    xi_grid_begin();
    const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, 0, c.eps};
    xi_tc_kernel<XI_Q8_0, true, true>(a);
}
extern "C" __global__ void __launch_bounds__(512) rmsnorm_matmul_swiglu_q8_0_tct(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                                                         const float *__restrict__ norm, float *__restrict__ y,
                                                                         xi_rmsnorm_matmul_swiglu_c c) {
    xi_grid_begin();
    const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, 0, c.eps};
    xi_tc_kernel_t<XI_Q8_0, true, true>(a);
}
