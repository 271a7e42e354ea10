#include "xi_common.cuh"
// gu (rows, 2n) f32 (gate columns, then up columns), inv_scale (rows) f32 -> y (rows, n):
// g = gu[r,i] * inv_scale[r], u = gu[r,n+i] * inv_scale[r], y[r,i] = silu(g) * u as swiglu.cu computes it.
// Grid-stride; 32-bit index arithmetic where rows * 2n < 2^31 (the same operations: the same bits).
__device__ __forceinline__ float xi_swiglu_unscale1(float g, float u, float s) {
    g = g * s;
    return g / (1.0f + expf(-g)) * (u * s);
}
extern "C" __global__ void __launch_bounds__(256) swiglu_unscale(const float *__restrict__ gu,
                                                                 const float *__restrict__ inv_scale,
                                                                 float *__restrict__ y, xi_swiglu_unscale_c c) {
    xi_grid_begin();
    const long long total = (long long)c.rows * c.n;
    if (2 * total < (1LL << 31)) {
        const int n = c.n, stride = gridDim.x * blockDim.x;
        for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < (int)total; idx += stride) {
            const int r = idx / n, i = idx - r * n;
            const float *row = gu + (size_t_)r * 2 * n;
            y[idx] = xi_swiglu_unscale1(row[i], row[n + i], inv_scale[r]);
        }
        return;
    }
    XI_FOR(idx, total) {
        const long long r = idx / c.n, i = idx % c.n;
        y[idx] = xi_swiglu_unscale1(gu[r * 2 * c.n + i], gu[r * 2 * c.n + c.n + i], inv_scale[r]);
    }
}
