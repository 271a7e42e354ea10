#include "xi_common.cuh"
// gu (rows, 2n) f32 -> y (rows, n): y[r,i] = gelu(gu[r,i]) * gu[r,n+i] (a row's gate columns, then its up
// columns), gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) g (1 + 0.044715 g^2))) (tanh approximation).
// Grid: ceil(rows*n/256) blocks of 256 (grid-stride).
extern "C" __global__ void geglu(const float *__restrict__ gu, float *__restrict__ y, xi_geglu_c c) {
    xi_grid_begin();
    XI_FOR(idx, (long long)c.rows * c.n) {
        const long long r = idx / c.n, i = idx % c.n;
        const float g = gu[r * 2 * c.n + i];
        y[idx] = 0.5f * g * (1.0f + tanhf(0.79788456080286535587989211986876f * g * (1.0f + 0.044715f * g * g))) *
                 gu[r * 2 * c.n + c.n + i];
    }
}
