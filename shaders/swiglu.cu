#include "xi_common.cuh"
// gate, up (rows, in_stride) f32 -> y (rows, n): y[r,i] = silu(gate[r*in_stride+i]) * up[r*in_stride+i].
// Grid: ceil(rows*n/256) blocks of 256.
extern "C" __global__ void swiglu(const float *__restrict__ gate, const float *__restrict__ up, float *__restrict__ y,
                                  xi_swiglu_c c) {
    xi_grid_begin();
    XI_FOR(idx, (long long)c.rows * c.n) {
        const long long r = idx / c.n, i = idx % c.n;
        const float g = gate[r * c.in_stride + i];
        y[idx] = g / (1.0f + expf(-g)) * up[r * c.in_stride + i];
    }
}
