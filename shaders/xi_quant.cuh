// Weight formats of get_rows_DT, matmul_DT and dequantize_DT (GGUF block layouts, ggml-common.h):
//   f32, f16 (IEEE half), q8_0 {f16 d; int8 qs[32]} 34 B, q4_0 {f16 d; u8 qs[16]} 18 B,
//   q4_1 {f16 d; f16 m; u8 qs[16]} 20 B; element j of a 4-bit block is the low nibble of qs[j],
//   element j+16 the high nibble. Dequantized values are rounded as gguf.quants.dequantize does
//   (d * q, then + m: two f32 roundings, no FMA), so get_rows/dequantize match it bit for bit.
#pragma once
#include "xi_common.cuh"

enum { XI_F32 = 0, XI_F16 = 1, XI_Q8_0 = 2, XI_Q4_0 = 3, XI_Q4_1 = 4 };

__device__ __forceinline__ uint16_t xi_u16(const uint8_t *p) { return *reinterpret_cast<const uint16_t *>(p); }
// 4 bytes at a 2-aligned address
__device__ __forceinline__ uint32_t xi_u32a2(const uint8_t *p) {
    return (uint32_t)xi_u16(p) | ((uint32_t)xi_u16(p + 2) << 16);
}

// byte k (0..3) of v, an integer 0..255, as an exact float without I2F (a quarter-rate instruction
// on sm_90): 0x4B0000vv is the float 2^23 + vv, so one PRMT and one FADD per element.
__device__ __forceinline__ float xi_byte_f(uint32_t v, int k) {
    return __int_as_float(__byte_perm(v, 0x4B000000u, 0x7540 | k)) - 8388608.0f;
}

template <int TYPE> struct XiQ;

template <> struct XiQ<XI_F32> {
    static __device__ __forceinline__ size_t_ row_bytes(int k) { return (size_t_)k * 4; }
    static __device__ __forceinline__ float elem(const uint8_t *row, int e) { return reinterpret_cast<const float *>(row)[e]; }
    // elements 32b+4s..+3 -> q[0..3], 32b+16+4s..+3 -> q[4..7]; value = d*q + m
    static __device__ __forceinline__ void load8(const uint8_t *row, int b, int s, float q[8], float &d, float &m) {
        const float4 lo = reinterpret_cast<const float4 *>(row)[b * 8 + s];
        const float4 hi = reinterpret_cast<const float4 *>(row)[b * 8 + 4 + s];
        q[0] = lo.x; q[1] = lo.y; q[2] = lo.z; q[3] = lo.w; q[4] = hi.x; q[5] = hi.y; q[6] = hi.z; q[7] = hi.w;
        d = 1.0f; m = 0.0f;
    }
    static constexpr int ALIGN = 16;
};

template <> struct XiQ<XI_F16> {
    static __device__ __forceinline__ size_t_ row_bytes(int k) { return (size_t_)k * 2; }
    static __device__ __forceinline__ float elem(const uint8_t *row, int e) { return xi_h2f(reinterpret_cast<const uint16_t *>(row)[e]); }
    static __device__ __forceinline__ void load8(const uint8_t *row, int b, int s, float q[8], float &d, float &m) {
        const uint2 lo = reinterpret_cast<const uint2 *>(row)[b * 8 + s];
        const uint2 hi = reinterpret_cast<const uint2 *>(row)[b * 8 + 4 + s];
        q[0] = xi_h2f(lo.x & 0xffff); q[1] = xi_h2f(lo.x >> 16); q[2] = xi_h2f(lo.y & 0xffff); q[3] = xi_h2f(lo.y >> 16);
        q[4] = xi_h2f(hi.x & 0xffff); q[5] = xi_h2f(hi.x >> 16); q[6] = xi_h2f(hi.y & 0xffff); q[7] = xi_h2f(hi.y >> 16);
        d = 1.0f; m = 0.0f;
    }
    static constexpr int ALIGN = 8;
};

template <> struct XiQ<XI_Q8_0> {
    static __device__ __forceinline__ size_t_ row_bytes(int k) { return (size_t_)(k / 32) * 34; }
    static __device__ __forceinline__ float elem(const uint8_t *row, int e) {
        const uint8_t *blk = row + (size_t_)(e >> 5) * 34;
        return __fmul_rn((float)(int8_t)blk[2 + (e & 31)], xi_h2f(xi_u16(blk)));
    }
    static __device__ __forceinline__ void load8(const uint8_t *row, int b, int s, float q[8], float &d, float &m) {
        const uint8_t *blk = row + (size_t_)b * 34;
        const uint32_t lo = xi_u32a2(blk + 2 + 4 * s), hi = xi_u32a2(blk + 18 + 4 * s);
#pragma unroll
        for (int i = 0; i < 4; i++) { q[i] = (float)(int8_t)(lo >> (8 * i)); q[4 + i] = (float)(int8_t)(hi >> (8 * i)); }
        d = xi_h2f(xi_u16(blk)); m = 0.0f;
    }
    static constexpr int ALIGN = 2;
};

template <> struct XiQ<XI_Q4_0> {
    static __device__ __forceinline__ size_t_ row_bytes(int k) { return (size_t_)(k / 32) * 18; }
    static __device__ __forceinline__ float elem(const uint8_t *row, int e) {
        const uint8_t *blk = row + (size_t_)(e >> 5) * 18;
        const int j = e & 31;
        const uint8_t byte = blk[2 + (j & 15)];
        return __fmul_rn(xi_h2f(xi_u16(blk)), (float)((j < 16 ? byte & 15 : byte >> 4) - 8));
    }
    static __device__ __forceinline__ void load8(const uint8_t *row, int b, int s, float q[8], float &d, float &m) {
        const uint8_t *blk = row + (size_t_)b * 18;
        const uint32_t w = xi_u32a2(blk + 2 + 4 * s), lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
#pragma unroll
        for (int i = 0; i < 4; i++) { q[i] = xi_byte_f(lo, i) - 8.0f; q[4 + i] = xi_byte_f(hi, i) - 8.0f; }
        d = xi_h2f(xi_u16(blk)); m = 0.0f;
    }
    static constexpr int ALIGN = 2;
};

template <> struct XiQ<XI_Q4_1> {
    static __device__ __forceinline__ size_t_ row_bytes(int k) { return (size_t_)(k / 32) * 20; }
    static __device__ __forceinline__ float elem(const uint8_t *row, int e) {
        const uint8_t *blk = row + (size_t_)(e >> 5) * 20;
        const int j = e & 31;
        const uint8_t byte = blk[4 + (j & 15)];
        return __fadd_rn(__fmul_rn(xi_h2f(xi_u16(blk)), (float)(j < 16 ? byte & 15 : byte >> 4)), xi_h2f(xi_u16(blk + 2)));
    }
    static __device__ __forceinline__ void load8(const uint8_t *row, int b, int s, float q[8], float &d, float &m) {
        const uint8_t *blk = row + (size_t_)b * 20;
        const uint32_t dm = *reinterpret_cast<const uint32_t *>(blk);
        const uint32_t w = *reinterpret_cast<const uint32_t *>(blk + 4 + 4 * s), lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
#pragma unroll
        for (int i = 0; i < 4; i++) { q[i] = xi_byte_f(lo, i); q[4 + i] = xi_byte_f(hi, i); }
        d = xi_h2f(dm & 0xffff); m = xi_h2f(dm >> 16);
    }
    static constexpr int ALIGN = 4;
};

// table (vocab, dim) TYPE, ids (T) i32 -> out (T, dim) f32; an id outside [0, vocab) gives a NaN row.
// One block of 256 threads per t.
template <int TYPE>
__device__ __forceinline__ void xi_get_rows(const uint8_t *__restrict__ table, const int32_t *__restrict__ ids,
                                            float *__restrict__ out, xi_get_rows_c c) {
    const int t = blockIdx.x;
    if (t >= c.T) return;
    const int id = ids[t];
    float *o = out + (size_t_)t * c.dim;
    if (id < 0 || id >= c.vocab) {
        for (int i = threadIdx.x; i < c.dim; i += blockDim.x) o[i] = XI_NAN;
        return;
    }
    const uint8_t *row = table + (size_t_)id * XiQ<TYPE>::row_bytes(c.dim);
    for (int i = threadIdx.x; i < c.dim; i += blockDim.x) o[i] = XiQ<TYPE>::elem(row, i);
}

// src (n / 32 blocks) TYPE -> dst (n) f32. Grid-stride, 256 threads a block.
template <int TYPE>
__device__ __forceinline__ void xi_dequantize(const uint8_t *__restrict__ src, float *__restrict__ dst, xi_dequantize_c c) {
    XI_FOR(i, c.n) dst[i] = XiQ<TYPE>::elem(src, (int)i);
}

// One warp per output row n; TT (1..4) consecutive token rows t0.. at once, so each weight byte is
// read once per TT tokens. Vector path: 4 lanes share a 32-element block (8 elements each), a warp
// covers 8 blocks per step; the x reads (two float4 per lane) are coalesced per block.
template <int TYPE, int TT, bool VEC>
__device__ __forceinline__ void xi_matmul_row(const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y,
                                              const xi_matmul_c &c, int n, int t0) {
    const int lane = threadIdx.x & 31;
    const uint8_t *row = w + (size_t_)n * XiQ<TYPE>::row_bytes(c.K);
    float sum[TT];
#pragma unroll
    for (int t = 0; t < TT; t++) sum[t] = 0.0f;
    if (VEC) {
        const int nb = c.K >> 5, s = lane & 3;
#pragma unroll 4
        for (int b = lane >> 2; b < nb; b += 8) {
            float q[8], d, m;
            XiQ<TYPE>::load8(row, b, s, q, d, m);
#pragma unroll
            for (int t = 0; t < TT; t++) {
                const float *xt = x + (size_t_)(t0 + t) * c.K + b * 32 + 4 * s;
                const float4 lo = *reinterpret_cast<const float4 *>(xt);
                const float4 hi = *reinterpret_cast<const float4 *>(xt + 16);
                const float dot = q[0] * lo.x + q[1] * lo.y + q[2] * lo.z + q[3] * lo.w +
                                  q[4] * hi.x + q[5] * hi.y + q[6] * hi.z + q[7] * hi.w;
                float part = d * dot;
                if (TYPE == XI_Q4_1) part += m * ((lo.x + lo.y) + (lo.z + lo.w) + (hi.x + hi.y) + (hi.z + hi.w));
                sum[t] += part;
            }
        }
    } else {
        for (int e = lane; e < c.K; e += 32) {
            const float wv = XiQ<TYPE>::elem(row, e);
#pragma unroll
            for (int t = 0; t < TT; t++) sum[t] += wv * x[(size_t_)(t0 + t) * c.K + e];
        }
    }
#pragma unroll
    for (int t = 0; t < TT; t++) {
        const float v = xi_warp_sum(sum[t]);
        if (lane == 0) {
            float *yo = y + (size_t_)(t0 + t) * c.N + n;
            *yo = c.accumulate ? *yo + v : v;
        }
    }
}

// Rows per warp of the one-token (T == 1, decode) path; _launch.py's grid uses the same rule.
__device__ __forceinline__ int xi_matvec_rows(const xi_matmul_c &c) { return c.N >= 2048 ? 2 : 1; }

// T == 1, vector layouts: one warp computes R rows n0..n0+R-1 with the lane mapping of
// xi_matmul_row, so each x float4 is loaded once for R rows (x reads, not weight bytes, bound the
// one-row loop: 32 bytes of x per 4 bytes of q4_1 nibbles); unrolled 4 deep for loads in flight.
// Rows past N repeat row N-1 and are not written.
template <int TYPE, int R>
__device__ __forceinline__ void xi_matvec_vec(const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y,
                                              const xi_matmul_c &c, int n0) {
    const int lane = threadIdx.x & 31, s = lane & 3, nb = c.K >> 5;
    const size_t_ rb = XiQ<TYPE>::row_bytes(c.K);
    const uint8_t *rows[R];
    float sum[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        rows[r] = w + (size_t_)(n0 + r < c.N ? n0 + r : c.N - 1) * rb;
        sum[r] = 0.0f;
    }
#pragma unroll 4
    for (int b = lane >> 2; b < nb; b += 8) {
        const float *xt = x + b * 32 + 4 * s;
        const float4 lo = *reinterpret_cast<const float4 *>(xt);
        const float4 hi = *reinterpret_cast<const float4 *>(xt + 16);
        const float xs = TYPE == XI_Q4_1 ? ((lo.x + lo.y) + (lo.z + lo.w)) + ((hi.x + hi.y) + (hi.z + hi.w)) : 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++) {
            float q[8], d, m;
            XiQ<TYPE>::load8(rows[r], b, s, q, d, m);
            const float dot = q[0] * lo.x + q[1] * lo.y + q[2] * lo.z + q[3] * lo.w +
                              q[4] * hi.x + q[5] * hi.y + q[6] * hi.z + q[7] * hi.w;
            float part = d * dot;
            if (TYPE == XI_Q4_1) part += m * xs;
            sum[r] += part;
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float v = xi_warp_sum(sum[r]);
        if (lane == 0 && n0 + r < c.N) y[n0 + r] = c.accumulate ? y[n0 + r] + v : v;
    }
}

// w (N, K) TYPE, x (T, K) f32 -> y (T, N) f32 RW: y[t,n] = (accumulate ? y[t,n] : 0) + sum_k w[n,k] x[t,k].
// Blocks of 256 threads (8 warps). T > 1: a warp per row, grid (ceil(N/8), ceil(T/4)). T == 1: a warp
// per xi_matvec_rows(c) rows, grid (ceil(N / (8 * rows)), 1).
template <int TYPE>
__device__ __forceinline__ void xi_matmul(const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y,
                                          xi_matmul_c c) {
    if (c.T == 1) {
        const int R = xi_matvec_rows(c);
        const int n0 = (blockIdx.x * 8 + (threadIdx.x >> 5)) * R;
        if (n0 >= c.N || blockIdx.y > 0) return;
        const bool vec1 = (c.K & 31) == 0 && (((size_t_)x) & 15) == 0 && (((size_t_)w) & (XiQ<TYPE>::ALIGN - 1)) == 0;
        if (vec1) {
            if (R == 2) xi_matvec_vec<TYPE, 2>(w, x, y, c, n0);
            else xi_matvec_vec<TYPE, 1>(w, x, y, c, n0);
        } else {
            for (int r = 0; r < R && n0 + r < c.N; r++) xi_matmul_row<TYPE, 1, false>(w, x, y, c, n0 + r, 0);
        }
        return;
    }
    const int n = blockIdx.x * 8 + (threadIdx.x >> 5);
    const int t0 = blockIdx.y * 4;
    if (n >= c.N || t0 >= c.T) return;
    const int tc = c.T - t0 < 4 ? c.T - t0 : 4;
    const bool vec = (c.K & 31) == 0 && (((size_t_)x) & 15) == 0 && (((size_t_)w) & (XiQ<TYPE>::ALIGN - 1)) == 0;
    if (vec) {
        switch (tc) {
            case 1: xi_matmul_row<TYPE, 1, true>(w, x, y, c, n, t0); break;
            case 2: xi_matmul_row<TYPE, 2, true>(w, x, y, c, n, t0); break;
            case 3: xi_matmul_row<TYPE, 3, true>(w, x, y, c, n, t0); break;
            default: xi_matmul_row<TYPE, 4, true>(w, x, y, c, n, t0); break;
        }
    } else {
        switch (tc) {
            case 1: xi_matmul_row<TYPE, 1, false>(w, x, y, c, n, t0); break;
            case 2: xi_matmul_row<TYPE, 2, false>(w, x, y, c, n, t0); break;
            case 3: xi_matmul_row<TYPE, 3, false>(w, x, y, c, n, t0); break;
            default: xi_matmul_row<TYPE, 4, false>(w, x, y, c, n, t0); break;
        }
    }
}
