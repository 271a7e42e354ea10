#include "xi_gemm_prep.cuh"
// x (rows, dim) f32, w (dim) f32 -> y (rows, dim) f16 = f16(rmsnorm(x, w, eps) * s[r]), inv_scale (rows)
// = 1 / s[r] (xi_gemm_prep.cuh).
extern "C" __global__ void __launch_bounds__(256) rmsnorm_f16(const float *__restrict__ x, const float *__restrict__ w,
                                                              uint16_t *__restrict__ y, float *__restrict__ inv_scale,
                                                              xi_rmsnorm_f16_c c) {
    xi_grid_begin();
    xi_rows_f16<true>(x, w, y, inv_scale, c.rows, c.dim, c.eps);
}
