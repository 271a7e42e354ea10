#include "xi_common.cuh"
// gu (rows, 2n) f32 (gate columns, then up columns), inv_scale (rows) f32 -> y (rows, n):
// g = gu[r,i] * inv_scale[r], u = gu[r,n+i] * inv_scale[r], y[r,i] = silu(g) * u as swiglu.cu computes it.
extern "C" __global__ void __launch_bounds__(256) swiglu_unscale(const float *__restrict__ gu,
                                                                 const float *__restrict__ inv_scale,
                                                                 float *__restrict__ y, xi_swiglu_unscale_c c) {
    xi_grid_begin();
    XI_FOR(idx, (long long)c.rows * c.n) {
        const long long r = idx / c.n, i = idx % c.n;
        const float s = inv_scale[r];
        const float g = gu[r * 2 * c.n + i] * s;
        y[idx] = g / (1.0f + expf(-g)) * (gu[r * 2 * c.n + c.n + i] * s);
    }
}
