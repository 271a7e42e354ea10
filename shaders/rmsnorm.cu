#include "xi_common.cuh"
// x (rows, dim) f32, w (dim) f32 -> y (rows, dim): y = x / sqrt(mean(x^2) + eps) * w.
// One block of 256 threads per row; sum of squares in f32 (tree reduction).
extern "C" __global__ void __launch_bounds__(256) rmsnorm(const float *__restrict__ x, const float *__restrict__ w,
                                                          float *__restrict__ y, xi_rmsnorm_c c) {
    xi_grid_begin();
    __shared__ float scratch[32];
    const int r = blockIdx.x;
    if (r >= c.rows) return;
    const float *xr = x + (size_t_)r * c.dim;
    float *yr = y + (size_t_)r * c.dim;
    float ss = 0.0f;
    const bool vec = ((((size_t_)xr) | ((size_t_)yr) | ((size_t_)w)) & 15) == 0 && (c.dim & 3) == 0;
    if (vec) {
        const int n4 = c.dim >> 2;
        for (int i = threadIdx.x; i < n4; i += blockDim.x) {
            float4 v = reinterpret_cast<const float4 *>(xr)[i];
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
        const float inv = 1.0f / sqrtf(xi_block_sum(ss, scratch) / (float)c.dim + c.eps);
        for (int i = threadIdx.x; i < n4; i += blockDim.x) {
            float4 v = reinterpret_cast<const float4 *>(xr)[i];
            float4 g = reinterpret_cast<const float4 *>(w)[i];
            reinterpret_cast<float4 *>(yr)[i] = make_float4(v.x * inv * g.x, v.y * inv * g.y, v.z * inv * g.z, v.w * inv * g.w);
        }
    } else {
        for (int i = threadIdx.x; i < c.dim; i += blockDim.x) ss += xr[i] * xr[i];
        const float inv = 1.0f / sqrtf(xi_block_sum(ss, scratch) / (float)c.dim + c.eps);
        for (int i = threadIdx.x; i < c.dim; i += blockDim.x) yr[i] = xr[i] * inv * w[i];
    }
}
