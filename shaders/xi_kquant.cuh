// get_rows_DT, dequantize_DT and the matrix kernels for the weight types beyond the XiQ ones
// (xi_quant.cuh): q5_0, q5_1, iq4_nl (blocks of 32), q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs (super-blocks
// of 256), bf16. Layouts: ggml-common.h. Dequantized values are rounded as gguf.quants.dequantize does
// (the same f32 operations in the same order, each an explicit _rn intrinsic, never contracted into an
// FMA), so get_rows / dequantize match it bit for bit, as native/kernels/kquant.c does.
//
// The matrix kernels are the simple, general ones: a warp an output row, 8 rows a block of 256
// threads; lane l sums elements l, l + 32, ... of the row (each weight dequantized once per tile of up
// to 4 tokens) with one FMA chain per token, then a warp sum: the order depends on K alone, so a row's
// result does not depend on T or on the other rows. Not tuned (no staging, no tensor cores).
#pragma once
#include "xi_quant.cuh"

enum { XI_Q5_0 = 10, XI_Q5_1, XI_IQ4_NL, XI_Q2_K, XI_Q3_K, XI_Q4_K, XI_Q5_K, XI_Q6_K, XI_IQ4_XS, XI_BF16 };

__constant__ int8_t xi_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// the 6-bit scale and min of group g (0..7) of q4_K / q5_K's 12 scale bytes q
__device__ __forceinline__ void xi_scale_min_k4(int g, const uint8_t *q, int &sc, int &m) {
    if (g < 4) {
        sc = q[g] & 63;
        m = q[g + 4] & 63;
    } else {
        sc = (q[g + 4] & 15) | ((q[g - 4] >> 2) & 0x30);
        m = (q[g + 4] >> 4) | ((q[g] >> 2) & 0x30);
    }
}

// XiK<TYPE>: QK elements a block of BYTES bytes; deq(b, j): element j of block b
template <int TYPE> struct XiK;

template <> struct XiK<XI_Q5_0> {
    static constexpr int QK = 32, BYTES = 22;
    static __device__ __forceinline__ float deq(const uint8_t *b, int j) {
        const int lo = j < 16 ? b[6 + j] & 15 : b[6 + j - 16] >> 4, hb = (b[2 + (j >> 3)] >> (j & 7)) & 1;
        return __fmul_rn(xi_h2f(xi_u16(b)), (float)((lo | (hb << 4)) - 16));
    }
};
template <> struct XiK<XI_Q5_1> {
    static constexpr int QK = 32, BYTES = 24;
    static __device__ __forceinline__ float deq(const uint8_t *b, int j) {
        const int lo = j < 16 ? b[8 + j] & 15 : b[8 + j - 16] >> 4, hb = (b[4 + (j >> 3)] >> (j & 7)) & 1;
        return __fadd_rn(__fmul_rn(xi_h2f(xi_u16(b)), (float)(lo | (hb << 4))), xi_h2f(xi_u16(b + 2)));
    }
};
template <> struct XiK<XI_IQ4_NL> {
    static constexpr int QK = 32, BYTES = 18;
    static __device__ __forceinline__ float deq(const uint8_t *b, int j) {
        const int code = j < 16 ? b[2 + j] & 15 : b[2 + j - 16] >> 4;
        return __fmul_rn(xi_h2f(xi_u16(b)), (float)xi_kvalues_iq4nl[code]);
    }
};
template <> struct XiK<XI_Q2_K> {  // scales[16], qs[64], d, dmin
    static constexpr int QK = 256, BYTES = 84;
    static __device__ __forceinline__ float deq(const uint8_t *b, int j) {
        const int sc = b[j >> 4], q = (b[16 + 32 * (j >> 7) + (j & 31)] >> (2 * ((j & 127) >> 5))) & 3;
        const float dl = __fmul_rn(xi_h2f(xi_u16(b + 80)), (float)(sc & 15));
        const float ml = __fmul_rn(xi_h2f(xi_u16(b + 82)), (float)(sc >> 4));
        return __fsub_rn(__fmul_rn(dl, (float)q), ml);
    }
};
template <> struct XiK<XI_Q3_K> {  // hmask[32], qs[64], scales[12], d
    static constexpr int QK = 256, BYTES = 110;
    static __device__ __forceinline__ float deq(const uint8_t *b, int j) {
        const int g = j >> 4;
        const int lo = (b[96 + (g & 7)] >> (4 * (g >> 3))) & 15, hi = (b[104 + (g & 3)] >> (2 * (g >> 2))) & 3;
        const float dl = __fmul_rn(xi_h2f(xi_u16(b + 108)), (float)((lo | (hi << 4)) - 32));
        const int ql = (b[32 + 32 * (j >> 7) + (j & 31)] >> (2 * ((j & 127) >> 5))) & 3;
        const int hb = (b[j & 31] >> (j >> 5)) & 1;
        return __fmul_rn(dl, (float)(ql - ((hb ^ 1) << 2)));
    }
};
template <> struct XiK<XI_Q4_K> {  // d, dmin, scales[12], qs[128]
    static constexpr int QK = 256, BYTES = 144;
    static __device__ __forceinline__ float deq(const uint8_t *b, int j) {
        const int g = j >> 5;
        int sc, m;
        xi_scale_min_k4(g, b + 4, sc, m);
        const int q = (b[16 + 32 * (g >> 1) + (j & 31)] >> (4 * (g & 1))) & 15;
        const float dl = __fmul_rn(xi_h2f(xi_u16(b)), (float)sc), ml = __fmul_rn(xi_h2f(xi_u16(b + 2)), (float)m);
        return __fsub_rn(__fmul_rn(dl, (float)q), ml);
    }
};
template <> struct XiK<XI_Q5_K> {  // d, dmin, scales[12], qh[32], qs[128]
    static constexpr int QK = 256, BYTES = 176;
    static __device__ __forceinline__ float deq(const uint8_t *b, int j) {
        const int g = j >> 5;
        int sc, m;
        xi_scale_min_k4(g, b + 4, sc, m);
        const int q = ((b[48 + 32 * (g >> 1) + (j & 31)] >> (4 * (g & 1))) & 15) | (((b[16 + (j & 31)] >> g) & 1) << 4);
        const float dl = __fmul_rn(xi_h2f(xi_u16(b)), (float)sc), ml = __fmul_rn(xi_h2f(xi_u16(b + 2)), (float)m);
        return __fsub_rn(__fmul_rn(dl, (float)q), ml);
    }
};
template <> struct XiK<XI_Q6_K> {  // ql[128], qh[64], scales[16] int8, d
    static constexpr int QK = 256, BYTES = 210;
    static __device__ __forceinline__ float deq(const uint8_t *b, int j) {
        const int h = j >> 7, i = j & 127;
        const int lo = (b[64 * h + (i & 63)] >> (4 * (i >> 6))) & 15, hi = (b[128 + 32 * h + (i & 31)] >> (2 * (i >> 5))) & 3;
        const float dl = __fmul_rn(xi_h2f(xi_u16(b + 208)), (float)(int8_t)b[192 + (j >> 4)]);
        return __fmul_rn(dl, (float)((lo | (hi << 4)) - 32));
    }
};
template <> struct XiK<XI_IQ4_XS> {  // d, scales_h u16, scales_l[4], qs[128]
    static constexpr int QK = 256, BYTES = 136;
    static __device__ __forceinline__ float deq(const uint8_t *b, int j) {
        const int g = j >> 5, jj = j & 31;
        const int ls = ((b[4 + (g >> 1)] >> (4 * (g & 1))) & 15) | (((xi_u16(b + 2) >> (2 * g)) & 3) << 4);
        const float dl = __fmul_rn(xi_h2f(xi_u16(b)), (float)(ls - 32));
        const uint8_t byte = b[8 + 16 * g + (jj & 15)];
        return __fmul_rn(dl, (float)xi_kvalues_iq4nl[jj < 16 ? byte & 15 : byte >> 4]);
    }
};
template <> struct XiK<XI_BF16> {
    static constexpr int QK = 1, BYTES = 2;
    static __device__ __forceinline__ float deq(const uint8_t *b, int) { return __uint_as_float((uint32_t)xi_u16(b) << 16); }
};

template <int TYPE> __device__ __forceinline__ size_t_ xk_row_bytes(int k) {
    return (size_t_)(k / XiK<TYPE>::QK) * XiK<TYPE>::BYTES;
}
template <int TYPE> __device__ __forceinline__ float xk_elem(const uint8_t *row, long long e) {
    return XiK<TYPE>::deq(row + (size_t_)(e / XiK<TYPE>::QK) * XiK<TYPE>::BYTES, (int)(e % XiK<TYPE>::QK));
}

// table (vocab, dim) TYPE, ids (T) i32 -> out (T, dim) f32; a block of 256 threads a token
template <int TYPE>
__device__ __forceinline__ void xk_get_rows(const uint8_t *__restrict__ table, const int32_t *__restrict__ ids,
                                           float *__restrict__ out, xi_get_rows_c c) {
    const int t = blockIdx.x;
    if (t >= c.T) return;
    const int id = ids[t];
    float *o = out + (size_t_)t * c.dim;
    if (id < 0 || id >= c.vocab) {
        for (int i = threadIdx.x; i < c.dim; i += blockDim.x) o[i] = XI_NAN;
        return;
    }
    const uint8_t *row = table + (size_t_)id * xk_row_bytes<TYPE>(c.dim);
    for (int i = threadIdx.x; i < c.dim; i += blockDim.x) o[i] = xk_elem<TYPE>(row, i);
}

template <int TYPE>
__device__ __forceinline__ void xk_dequantize(const uint8_t *__restrict__ src, float *__restrict__ dst, xi_dequantize_c c) {
    XI_FOR(i, c.n) dst[i] = xk_elem<TYPE>(src, i);
}

// sums[t] (t < tt) = sum_k w[row, k] * h(t, k), this lane's share (k = lane, lane + 32, ...), where
// h(t, k) = x[t0 + t, k] * (NORM ? r[t] * norm[k] : 1)
template <int TYPE, bool NORM>
__device__ __forceinline__ void xk_row_dot(const uint8_t *__restrict__ row, const float *__restrict__ x, int K, int t0, int tt,
                                          const float *__restrict__ norm, const float r[4], float sums[4]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int t = 0; t < 4; t++) sums[t] = 0.0f;
    for (int k = lane; k < K; k += 32) {
        const float w = xk_elem<TYPE>(row, k);
#pragma unroll
        for (int t = 0; t < 4; t++) {
            if (t < tt) {
                float h = x[(size_t_)(t0 + t) * K + k];
                if (NORM) h = __fmul_rn(__fmul_rn(h, r[t]), norm[k]);
                sums[t] = __fmaf_rn(w, h, sums[t]);
            }
        }
    }
#pragma unroll
    for (int t = 0; t < 4; t++) sums[t] = xi_warp_sum(sums[t]);
}

// 1 / sqrt(mean(x[t]^2) + eps) of token rows t0.. t0 + tt - 1, in every lane of the warp
__device__ __forceinline__ void xk_rms(const float *__restrict__ x, int K, int t0, int tt, float eps, float r[4]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int t = 0; t < 4; t++) {
        float s = 0.0f;
        if (t < tt)
            for (int k = lane; k < K; k += 32) {
                const float v = x[(size_t_)(t0 + t) * K + k];
                s = __fmaf_rn(v, v, s);
            }
        s = xi_warp_sum(s);
        r[t] = 1.0f / sqrtf(s / (float)K + eps);
    }
}

// y (T, N) = (accumulate ? y : 0) + w (N, K) @ h^T; h = x, or rmsnorm(x, norm, eps) when NORM
template <int TYPE, bool NORM>
__device__ __forceinline__ void xk_matmul(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                         const float *__restrict__ norm, float *__restrict__ y, int T, int N, int K,
                                         int accumulate, float eps) {
    const int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (n >= N) return;
    const uint8_t *row = w + (size_t_)n * xk_row_bytes<TYPE>(K);
    for (int t0 = 0; t0 < T; t0 += 4) {
        const int tt = T - t0 < 4 ? T - t0 : 4;
        float r[4] = {1.0f, 1.0f, 1.0f, 1.0f}, s[4];
        if (NORM) xk_rms(x, K, t0, tt, eps, r);
        xk_row_dot<TYPE, NORM>(row, x, K, t0, tt, norm, r, s);
        if ((threadIdx.x & 31) == 0)
            for (int t = 0; t < tt; t++) {
                float *yo = y + (size_t_)(t0 + t) * N + n;
                *yo = accumulate ? *yo + s[t] : s[t];
            }
    }
}

// y (T, N) = silu(gate) * up, gate = rows [0, N) of w @ h^T, up = rows [N, 2N); h = rmsnorm(x, norm, eps)
template <int TYPE>
__device__ __forceinline__ void xk_matmul_swiglu(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                                const float *__restrict__ norm, float *__restrict__ y, int T, int N,
                                                int K, float eps) {
    const int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (n >= N) return;
    const size_t_ rb = xk_row_bytes<TYPE>(K);
    for (int t0 = 0; t0 < T; t0 += 4) {
        const int tt = T - t0 < 4 ? T - t0 : 4;
        float r[4], g[4], u[4];
        xk_rms(x, K, t0, tt, eps, r);
        xk_row_dot<TYPE, true>(w + (size_t_)n * rb, x, K, t0, tt, norm, r, g);
        xk_row_dot<TYPE, true>(w + (size_t_)(N + n) * rb, x, K, t0, tt, norm, r, u);
        if ((threadIdx.x & 31) == 0)
            for (int t = 0; t < tt; t++) y[(size_t_)(t0 + t) * N + n] = g[t] / (1.0f + expf(-g[t])) * u[t];
    }
}

// The entry points of type NAME (TYPE its XiK tag): one macro a kernel, one kernel a shaders/*.cu.
#define XK_GET_ROWS(NAME, TYPE)                                                                                   \
    extern "C" __global__ void __launch_bounds__(256) get_rows_##NAME(                                           \
        const uint8_t *__restrict__ table, const int32_t *__restrict__ ids, float *__restrict__ out, xi_get_rows_c c) { \
        xi_grid_begin();                                                                                          \
        xk_get_rows<TYPE>(table, ids, out, c);                                                                    \
    }
#define XK_DEQUANTIZE(NAME, TYPE)                                                                                 \
    extern "C" __global__ void __launch_bounds__(256) dequantize_##NAME(                                         \
        const uint8_t *__restrict__ src, float *__restrict__ dst, xi_dequantize_c c) {                             \
        xi_grid_begin();                                                                                          \
        xk_dequantize<TYPE>(src, dst, c);                                                                         \
    }
#define XK_MATMUL(NAME, TYPE)                                                                                     \
    extern "C" __global__ void __launch_bounds__(256) matmul_##NAME(                                             \
        const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y, xi_matmul_c c) {        \
        xi_grid_begin();                                                                                          \
        xk_matmul<TYPE, false>(w, x, nullptr, y, c.T, c.N, c.K, c.accumulate, 0.0f);                              \
    }
#define XK_RMSNORM_MATMUL(NAME, TYPE)                                                                             \
    extern "C" __global__ void __launch_bounds__(256) rmsnorm_matmul_##NAME(                                     \
        const uint8_t *__restrict__ w, const float *__restrict__ x, const float *__restrict__ norm,                \
        float *__restrict__ y, xi_rmsnorm_matmul_c c) {                                                           \
        xi_grid_begin();                                                                                          \
        xk_matmul<TYPE, true>(w, x, norm, y, c.T, c.N, c.K, c.accumulate, c.eps);                                 \
    }
#define XK_RMSNORM_MATMUL_SWIGLU(NAME, TYPE)                                                                      \
    extern "C" __global__ void __launch_bounds__(256) rmsnorm_matmul_swiglu_##NAME(                              \
        const uint8_t *__restrict__ w, const float *__restrict__ x, const float *__restrict__ norm,                \
        float *__restrict__ y, xi_rmsnorm_matmul_swiglu_c c) {                                                    \
        xi_grid_begin();                                                                                          \
        xk_matmul_swiglu<TYPE>(w, x, norm, y, c.T, c.N, c.K, c.eps);                                              \
    }
