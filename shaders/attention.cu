#include "xi_attention.cuh"
// q (T, n_head, hd) f32 (row t at t*q_stride), k, v (ctx, n_kv, hd) f32, pos (T) i32 -> out (T, n_head, hd).
// Query row t attends keys 0..pos[t] inclusive (pos clamped to ctx - 1; window > 0: only keys j with
// pos[t] - j < window, i.e. the cache from row pos[t] - window + 1); query head h reads kv head
// h / (n_head / n_kv) (GQA); pos[t] < 0 gives a zero row. Grid (T, n_kv, z): block (t, kvh, z) runs
// the z-th share of kv head kvh's query heads (xi_att_heads), 256 threads; the math is
// xi_attention.cuh's. Entries attention (head_dim <= 64), attention_d4 (<= 128), attention_d8 (<= 256).
template <int D, int G>
__device__ __forceinline__ void attention_body(const float *__restrict__ q, const float *__restrict__ k,
                                               const float *__restrict__ v, const int32_t *__restrict__ pos,
                                               float *__restrict__ out, const xi_attention_c &c) {
    const int t = blockIdx.x, hd = c.head_dim;
    int h0;
    const int gn = xi_att_heads(c.n_head, c.n_kv, &h0);
    if (gn <= 0) return;
    int p = pos[t];
    if (p >= c.ctx) p = c.ctx - 1;
    const int s = (c.window > 0 && p >= c.window) ? p - c.window + 1 : 0;  // sliding window: keys s..p
    p -= s;
    const size_t_ kv_row = (size_t_)c.n_kv * hd, kvo = (size_t_)s * kv_row + (size_t_)blockIdx.y * hd;
    xi_attend<D, G>(q + (size_t_)t * c.q_stride + (size_t_)h0 * hd, k + kvo, v + kvo, kv_row, p, hd, gn, c.scale,
                    out + ((size_t_)t * c.n_head + h0) * hd);
}
XI_ATT_ENTRIES(attention, attention_body,
               (const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,
                const int32_t *__restrict__ pos, float *__restrict__ out, xi_attention_c c),
               (q, k, v, pos, out, c))
