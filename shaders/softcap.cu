#include "xi_common.cuh"
// x (n) f32 RW: x = cap * tanh(x / cap). Grid: ceil(n/256) blocks of 256 (grid-stride).
extern "C" __global__ void softcap(float *__restrict__ x, xi_softcap_c c) {
    xi_grid_begin();
    XI_FOR(idx, (long long)c.n) x[idx] = c.cap * tanhf(x[idx] / c.cap);
}
