#include "xi_gemm_prep.cuh"
// x (rows, dim) f32 -> y (rows, dim) f16 = f16(x * s[r]), inv_scale (rows) = 1 / s[r] (xi_gemm_prep.cuh).
extern "C" __global__ void __launch_bounds__(256) to_f16(const float *__restrict__ x, uint16_t *__restrict__ y,
                                                         float *__restrict__ inv_scale, xi_to_f16_c c) {
    xi_grid_begin();
    xi_rows_f16<false>(x, nullptr, y, inv_scale, c.rows, c.dim, 0.0f);
}
