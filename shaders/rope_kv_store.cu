#include "xi_rope.cuh"
// qkv (T, row_stride) f32 RW, pos (T) i32, row (T) i32, k_cache, v_cache (ctx, n_kv*head_dim) f32 RW:
// rope (xi_rope.cuh) of the n_head + n_kv heads at the start of row t (q heads, then k heads) by
// pos[t] when pos[t] >= 0, then, when 0 <= row[t] < ctx, the rotated k and the v that follows it
// copied into k_cache[row[t]] and v_cache[row[t]]. Grid (T, ceil((n_head + 2 n_kv) * head_dim / 2
// / 128)), blocks of 128: one thread a pair (a q or k pair it rotates, and stores when it is k; a
// v pair it copies), so no thread waits for another.
extern "C" __global__ void __launch_bounds__(128) rope_kv_store(float *__restrict__ qkv, const int32_t *__restrict__ pos,
                                                                const int32_t *__restrict__ row, float *__restrict__ k_cache,
                                                                float *__restrict__ v_cache, xi_rope_kv_store_c c) {
    xi_grid_begin();
    const int t = blockIdx.x, idx = blockIdx.y * blockDim.x + threadIdx.x, half = c.head_dim >> 1;
    const int n_rope = (c.n_head + c.n_kv) * half;
    if (t >= c.T || idx >= n_rope + c.n_kv * half) return;
    float *x = qkv + (size_t_)t * c.row_stride;
    const int p = pos[t], r = row[t], width = c.n_kv * c.head_dim;
    const bool store = r >= 0 && r < c.ctx;
    if (idx < n_rope) {
        const int h = idx / half, i = idx % half;
        float *e = x + (size_t_)h * c.head_dim + 2 * i;
        if (p >= 0) xi_rope_pair(e, p, i, c.head_dim, c.theta);
        const int kcol = (h - c.n_head) * c.head_dim + 2 * i;  // column within the k part
        if (h >= c.n_head && store) {
            k_cache[(size_t_)r * width + kcol] = e[0];
            k_cache[(size_t_)r * width + kcol + 1] = e[1];
        }
    } else if (store) {
        const int col = 2 * (idx - n_rope);
        const float *vv = x + (size_t_)(c.n_head + c.n_kv) * c.head_dim + col;
        v_cache[(size_t_)r * width + col] = vv[0];
        v_cache[(size_t_)r * width + col + 1] = vv[1];
    }
}
