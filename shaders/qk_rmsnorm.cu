#include "xi_common.cuh"
// qkv (T, row_stride) f32 RW, q_norm, k_norm (head_dim) f32: in row t, each of the n_head q heads and
// then the n_kv k heads (head_dim floats each, from the row's start) becomes head / sqrt(mean(head^2)
// + eps) * q_norm (k_norm for a k head). Grid (T, ceil((n_head + n_kv) / 8)), 256 threads: a warp a
// head, sum of squares in f32 (lane-strided, then a warp sum).
extern "C" __global__ void __launch_bounds__(256) qk_rmsnorm(float *__restrict__ qkv, const float *__restrict__ q_norm,
                                                             const float *__restrict__ k_norm, xi_qk_rmsnorm_c c) {
    xi_grid_begin();
    const int t = blockIdx.x, h = blockIdx.y * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (t >= c.T || h >= c.n_head + c.n_kv) return;
    float *x = qkv + (size_t_)t * c.row_stride + (size_t_)h * c.head_dim;
    const float *w = h < c.n_head ? q_norm : k_norm;
    float ss = 0.0f;
    for (int i = lane; i < c.head_dim; i += 32) ss += x[i] * x[i];
    const float inv = 1.0f / sqrtf(xi_warp_sum(ss) / (float)c.head_dim + c.eps);
    for (int i = lane; i < c.head_dim; i += 32) x[i] = x[i] * inv * w[i];
}
