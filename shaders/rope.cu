#include "xi_rope.cuh"
// x (rows, n_head, head_dim) f32 RW (row r at r*row_stride), pos (rows) i32: rotate adjacent pairs
// (x[2i], x[2i+1]) of each head by pos[r] * theta^(-2i/head_dim) (GGUF "normal" layout). Rows with
// pos < 0 are untouched. One thread per pair; grid ceil(rows*n_head*head_dim/2 / 256) blocks of 256.
extern "C" __global__ void rope(float *__restrict__ x, const int32_t *__restrict__ pos, xi_rope_c c) {
    xi_grid_begin();
    const int half = c.head_dim >> 1;
    XI_FOR(idx, (long long)c.rows * c.n_head * half) {
        const int i = (int)(idx % half);
        const long long rh = idx / half;
        const int h = (int)(rh % c.n_head);
        const int r = (int)(rh / c.n_head);
        const int p = pos[r];
        if (p < 0) continue;
        xi_rope_pair(x + (size_t_)r * c.row_stride + (size_t_)h * c.head_dim + 2 * i, p, i, c.head_dim, c.theta);
    }
}
