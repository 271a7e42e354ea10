#include "xi_mvt.cuh"
#include "xi_tc.cuh"
// w (N, K) q4_1, x (T, K) f32 -> y (T, N) f32 (see xi_mvc.cuh, xi_quant.cuh).
extern "C" __global__ void __launch_bounds__(256, 4) matmul_q4_1(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                                          float *__restrict__ y, xi_matmul_c c) {
    xi_matmul_any<XI_Q4_1>(w, x, y, c);
}
// the same at T > XI_MVT_MIN_T: the register-tiled kernel (xi_mvt.cuh), bit-identical a row.
extern "C" __global__ void __launch_bounds__(256, 2) matmul_q4_1_t(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                                            float *__restrict__ y, xi_matmul_c c) {
    xi_grid_begin();
    xi_matmul_t<XI_Q4_1>(w, x, y, c);
}
// the tensor-core kernel (xi_tc.cuh) for the weights the backend gives it (_launch.tc_weight), at
// every T: 8 tokens a block (T <= 8), and up to 32 a block at T > 8; bit-identical a row.
extern "C" __global__ void __maxnreg__(96) matmul_q4_1_tc(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                                          float *__restrict__ y, xi_matmul_c c) {
    xi_grid_begin();
    const XiMvcArgs a{w, x, nullptr, y, c.T, c.N, c.K, c.accumulate, 0.0f};
    xi_tc_kernel<XI_Q4_1, false, false>(a);
}
extern "C" __global__ void __launch_bounds__(512) matmul_q4_1_tct(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                                          float *__restrict__ y, xi_matmul_c c) {
    xi_grid_begin();
    const XiMvcArgs a{w, x, nullptr, y, c.T, c.N, c.K, c.accumulate, 0.0f};
    xi_tc_kernel_t<XI_Q4_1, false, false>(a);
}
