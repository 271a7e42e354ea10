#include "xi_rmsnorm.cuh"
// x (rows, dim) f32, w (dim) f32 -> y (rows, dim): y = x / sqrt(mean(x^2) + eps) * w.
// One block of 256 threads per row (xi_rmsnorm.cuh).
extern "C" __global__ void __launch_bounds__(256) rmsnorm(const float *__restrict__ x, const float *__restrict__ w,
                                                          float *__restrict__ y, xi_rmsnorm_c c) {
    xi_grid_begin();
    __shared__ float scratch[32];
    const int r = blockIdx.x;
    if (r >= c.rows) return;
    xi_rmsnorm_row<false>(x + (size_t_)r * c.dim, w, y + (size_t_)r * c.dim, c.dim, c.eps, scratch);
}
