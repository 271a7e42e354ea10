#include "xi_common.cuh"
// y (rows, n) f32 RW, b (n) f32: y[r,i] += b[i]. Grid: ceil(rows*n/256) blocks of 256 (grid-stride).
extern "C" __global__ void bias_add(float *__restrict__ y, const float *__restrict__ b, xi_bias_add_c c) {
    xi_grid_begin();
    XI_FOR(idx, (long long)c.rows * c.n) y[idx] += b[idx % c.n];
}
