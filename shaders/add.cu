#include "xi_common.cuh"
// a (n) + b (n) -> y (n), f32. Grid: ceil(n/256) blocks of 256.
extern "C" __global__ void add(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ y, xi_add_c c) {
    xi_grid_begin();
    XI_FOR(i, c.n) y[i] = a[i] + b[i];
}
