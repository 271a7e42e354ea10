#include "xi_mvt.cuh"
// w (N, K) f16, x (T, K) f32 -> y (T, N) f32 (see xi_mvc.cuh, xi_quant.cuh).
extern "C" __global__ void __launch_bounds__(256, 4) matmul_f16(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                                          float *__restrict__ y, xi_matmul_c c) {
    xi_matmul_any<XI_F16>(w, x, y, c);
}
// the same at T > XI_MVT_MIN_T: the register-tiled kernel (xi_mvt.cuh), bit-identical a row.
extern "C" __global__ void __launch_bounds__(256, 2) matmul_f16_t(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                                            float *__restrict__ y, xi_matmul_c c) {
    xi_grid_begin();
    xi_matmul_t<XI_F16>(w, x, y, c);
}
