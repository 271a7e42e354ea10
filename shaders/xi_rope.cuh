// Rotary embedding of one adjacent pair (e[0], e[1]) by pos * theta^(-2i/head_dim), GGUF "normal"
// layout; the angle in f64 (pos * freq reaches thousands of radians). rope.cu and rope_kv_store.cu
// share it, so the fused kernel's values are bit-identical to rope's.
#pragma once
#include "xi_common.cuh"

// ff: the pair's frequency divisor (llama.cpp's freq_factors; 1 for plain rope, an exact no-op).
__device__ __forceinline__ void xi_rope_pair(float *e, int p, int i, int head_dim, float theta, float ff = 1.0f) {
    const double ang = (double)p * pow((double)theta, -2.0 * i / (double)head_dim) / (double)ff;
    double s, co;
    sincos(ang, &s, &co);
    const float a = e[0], b = e[1];
    e[0] = (float)(a * co - b * s);
    e[1] = (float)(a * s + b * co);
}

// qkv (T, row_stride) f32 RW, pos (T) i32, row (T) i32, k_cache, v_cache (ctx, n_kv*head_dim) f32 RW:
// rope (xi_rope.cuh) of the n_head + n_kv heads at the start of row t (q heads, then k heads) by
// pos[t] when pos[t] >= 0, then, when 0 <= row[t] < ctx, the rotated k and the v that follows it
// copied into k_cache[row[t]] and v_cache[row[t]]. Grid (T, ceil((n_head + 2 n_kv) * head_dim / 2
// / 128)), blocks of 128: one thread a pair (a q or k pair it rotates, and stores when it is k; a
// v pair it copies), so no thread waits for another.
// ff: pair i's angle divided by ff[i] (rope_kv_store_ff), or nullptr (rope_kv_store). KV: the cache's
// element, float or uint16_t (an f16 cache, IEEE half bits: the values rounded to nearest even).
__device__ __forceinline__ void xi_kv_put(float *p, float x) { *p = x; }
__device__ __forceinline__ void xi_kv_put(uint16_t *p, float x) { *p = xi_f2h(x); }
template <typename KV>
__device__ __forceinline__ void rope_kv_store_body(float *__restrict__ qkv, const int32_t *__restrict__ pos,
                                                   const int32_t *__restrict__ row, KV *__restrict__ k_cache,
                                                   KV *__restrict__ v_cache, const float *__restrict__ ff,
                                                   const xi_rope_kv_store_c &c) {
    const int t = blockIdx.x, idx = blockIdx.y * blockDim.x + threadIdx.x, half = c.head_dim >> 1;
    const int n_rope = (c.n_head + c.n_kv) * half;
    if (t >= c.T || idx >= n_rope + c.n_kv * half) return;
    float *x = qkv + (size_t_)t * c.row_stride;
    const int p = pos[t], r = row[t], width = c.n_kv * c.head_dim;
    const bool store = r >= 0 && r < c.ctx;
    if (idx < n_rope) {
        const int h = idx / half, i = idx % half;
        float *e = x + (size_t_)h * c.head_dim + 2 * i;
        if (p >= 0) xi_rope_pair(e, p, i, c.head_dim, c.theta, ff ? ff[i] : 1.0f);
        const int kcol = (h - c.n_head) * c.head_dim + 2 * i;  // column within the k part
        if (h >= c.n_head && store) {
            xi_kv_put(k_cache + (size_t_)r * width + kcol, e[0]);
            xi_kv_put(k_cache + (size_t_)r * width + kcol + 1, e[1]);
        }
    } else if (store) {
        const int col = 2 * (idx - n_rope);
        const float *vv = x + (size_t_)(c.n_head + c.n_kv) * c.head_dim + col;
        xi_kv_put(v_cache + (size_t_)r * width + col, vv[0]);
        xi_kv_put(v_cache + (size_t_)r * width + col + 1, vv[1]);
    }
}

