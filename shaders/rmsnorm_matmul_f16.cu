#include "xi_mvt.cuh"
// w (N, K) f16, x (T, K) f32, norm (K) f32 -> y (T, N) f32 RW: matmul of rmsnorm(x) * norm (xi_mvc.cuh).
extern "C" __global__ void __launch_bounds__(256, 4) rmsnorm_matmul_f16(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                                                  const float *__restrict__ norm, float *__restrict__ y,
                                                                  xi_rmsnorm_matmul_c c) {
    const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, c.accumulate, c.eps};
    xi_mvc_kernel<XI_F16, true, false>(a);
}
// the same at T > XI_MVT_MIN_T: the register-tiled kernel (xi_mvt.cuh), bit-identical a row.
extern "C" __global__ void __launch_bounds__(256, 2) rmsnorm_matmul_f16_t(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                                            const float *__restrict__ norm, float *__restrict__ y, xi_rmsnorm_matmul_c c) {
    xi_grid_begin();
    const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, c.accumulate, c.eps};
    xi_mvt_kernel<XI_F16, true, false>(a);
}
