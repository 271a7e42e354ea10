#include "xi_common.cuh"
// x (rows, n) f32 -> y (rows, n): row-wise softmax, max subtracted first. One block of 256 per row.
extern "C" __global__ void __launch_bounds__(256) softmax(const float *__restrict__ x, float *__restrict__ y, xi_softmax_c c) {
    xi_grid_begin();
    __shared__ float scratch[32];
    const int r = blockIdx.x;
    if (r >= c.rows) return;
    const float *xr = x + (size_t_)r * c.n;
    float *yr = y + (size_t_)r * c.n;
    float m = -XI_INF;
    for (int i = threadIdx.x; i < c.n; i += blockDim.x) m = fmaxf(m, xr[i]);
    m = xi_block_max(m, scratch);
    float s = 0.0f;
    for (int i = threadIdx.x; i < c.n; i += blockDim.x) s += expf(xr[i] - m);
    const float inv = 1.0f / xi_block_sum(s, scratch);
    for (int i = threadIdx.x; i < c.n; i += blockDim.x) yr[i] = expf(xr[i] - m) * inv;
}
