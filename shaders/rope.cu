#include "xi_common.cuh"
// x (rows, n_head, head_dim) f32 RW (row r at r*row_stride), pos (rows) i32: rotate adjacent pairs
// (x[2i], x[2i+1]) of each head by pos[r] * theta^(-2i/head_dim) (GGUF "normal" layout). Rows with
// pos < 0 are untouched. The angle is computed in f64 (pos * freq reaches thousands of radians).
// One thread per pair; grid ceil(rows*n_head*head_dim/2 / 256) blocks of 256.
extern "C" __global__ void rope(float *__restrict__ x, const int32_t *__restrict__ pos, xi_rope_c c) {
    const int half = c.head_dim >> 1;
    XI_FOR(idx, (long long)c.rows * c.n_head * half) {
        const int i = (int)(idx % half);
        const long long rh = idx / half;
        const int h = (int)(rh % c.n_head);
        const int r = (int)(rh / c.n_head);
        const int p = pos[r];
        if (p < 0) continue;
        const double ang = (double)p * pow((double)c.theta, -2.0 * i / (double)c.head_dim);
        double s, co;
        sincos(ang, &s, &co);
        float *e = x + (size_t_)r * c.row_stride + (size_t_)h * c.head_dim + 2 * i;
        const float a = e[0], b = e[1];
        e[0] = (float)(a * co - b * s);
        e[1] = (float)(a * s + b * co);
    }
}
