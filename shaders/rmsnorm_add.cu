#include "xi_rmsnorm.cuh"
// x (rows, dim) f32, w (dim) f32, y (rows, dim) f32 RW: y += x / sqrt(mean(x^2) + eps) * w (a post-norm
// before the residual add). One block of 256 threads per row (xi_rmsnorm.cuh).
extern "C" __global__ void __launch_bounds__(256) rmsnorm_add(const float *__restrict__ x, const float *__restrict__ w,
                                                              float *__restrict__ y, xi_rmsnorm_add_c c) {
    xi_grid_begin();
    __shared__ float scratch[32];
    const int r = blockIdx.x;
    if (r >= c.rows) return;
    xi_rmsnorm_row<true>(x + (size_t_)r * c.dim, w, y + (size_t_)r * c.dim, c.dim, c.eps, scratch);
}
