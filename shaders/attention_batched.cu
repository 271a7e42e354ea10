#include "xi_attention.cuh"
// q (T, n_head, hd) f32 (row t at t*q_stride), k, v (rows, n_kv, hd) f32, first, last (T) i32 -> out (T, n_head, hd).
// Query row t attends key rows first[t]..last[t] inclusive (last clamped to rows - 1; window > 0: first
// raised to last - window + 1); first < 0 or
// last < first gives a zero row. Query head h reads kv head h / (n_head / n_kv) (GQA). attention.cu
// over the cache starting at row first[t] (the same xi_attention.cuh body), so a row is bit-identical
// to attention with pos = last - first on that cache. Grid (T, n_kv, z) and entries as attention's.
template <int D, int G>
__device__ __forceinline__ void attention_batched_body(const float *__restrict__ q, const float *__restrict__ k,
                                                       const float *__restrict__ v, const int32_t *__restrict__ first,
                                                       const int32_t *__restrict__ last, float *__restrict__ out,
                                                       const xi_attention_batched_c &c) {
    const int t = blockIdx.x, hd = c.head_dim;
    int h0;
    const int gn = xi_att_heads(c.n_head, c.n_kv, &h0);
    if (gn <= 0) return;
    int f = first[t];
    int l = last[t];
    if (l >= c.rows) l = c.rows - 1;
    if (c.window > 0 && f >= 0 && l - f >= c.window) f = l - c.window + 1;  // sliding window
    const int p = (f < 0 || l < f) ? -1 : l - f;
    const size_t_ kv_row = (size_t_)c.n_kv * hd;
    const size_t_ kvo = (p < 0 ? 0 : (size_t_)f * kv_row) + (size_t_)blockIdx.y * hd;
    xi_attend<D, G>(q + (size_t_)t * c.q_stride + (size_t_)h0 * hd, k + kvo, v + kvo, kv_row, p, hd, gn, c.scale,
                    out + ((size_t_)t * c.n_head + h0) * hd);
}
XI_ATT_ENTRIES(attention_batched, attention_batched_body,
               (const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,
                const int32_t *__restrict__ first, const int32_t *__restrict__ last, float *__restrict__ out,
                xi_attention_batched_c c),
               (q, k, v, first, last, out, c))
