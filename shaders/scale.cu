#include "xi_common.cuh"
// x (n) f32 -> y (n) f32: y = a*x.
extern "C" __global__ void scale(const float *__restrict__ x, float *__restrict__ y, xi_scale_c c) {
    xi_grid_begin();
    XI_FOR(i, c.n) y[i] = __fmul_rn(c.a, x[i]);
}
