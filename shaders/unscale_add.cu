#include "xi_common.cuh"
// src (rows, n) f32, inv_scale (rows) f32 -> y (rows, y_stride):
// y[r*y_stride+i] = (accumulate ? y[r*y_stride+i] : 0) + src[r*n+i] * inv_scale[r]. Grid-stride.
extern "C" __global__ void __launch_bounds__(256) unscale_add(const float *__restrict__ src,
                                                              const float *__restrict__ inv_scale, float *__restrict__ y,
                                                              xi_unscale_add_c c) {
    xi_grid_begin();
    XI_FOR(idx, (long long)c.rows * c.n) {
        const long long r = idx / c.n, i = idx % c.n;
        const float v = src[idx] * inv_scale[r];
        float *o = y + r * c.y_stride + i;
        *o = c.accumulate ? *o + v : v;
    }
}
