#include "xi_common.cuh"
// x (rows, dim) f32, w (dim) f32, y (rows, dim) f32 RW: y += x / sqrt(mean(x^2) + eps) * w (a post-norm
// before the residual add). One block of 256 threads per row; sum of squares in f32 (tree reduction).
extern "C" __global__ void __launch_bounds__(256) rmsnorm_add(const float *__restrict__ x, const float *__restrict__ w,
                                                              float *__restrict__ y, xi_rmsnorm_add_c c) {
    xi_grid_begin();
    __shared__ float scratch[32];
    const int r = blockIdx.x;
    if (r >= c.rows) return;
    const float *xr = x + (size_t_)r * c.dim;
    float *yr = y + (size_t_)r * c.dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < c.dim; i += blockDim.x) ss += xr[i] * xr[i];
    const float inv = 1.0f / sqrtf(xi_block_sum(ss, scratch) / (float)c.dim + c.eps);
    for (int i = threadIdx.x; i < c.dim; i += blockDim.x) yr[i] += xr[i] * inv * w[i];
}
