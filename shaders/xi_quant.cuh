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

// ---- T == 1 (decode) matrix-vector path ------------------------------------------------------------
// Weight loads (read-only path); PF = 1 adds the L2 256-byte prefetch hint, PF = 2 also skips L1
// allocation (the x vector, re-read by every warp, keeps L1); PF = 4 marks the bytes evict-first in L2
// (xi_evict_first: a weight stream read once a step).
template <int PF> __device__ __forceinline__ uint32_t xi_ldw32(const uint8_t *p) {
    uint32_t v;
    if (PF == 4) asm("ld.global.nc.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(xi_evict_first()));
    else if (PF == 2) asm("ld.global.nc.L1::no_allocate.L2::256B.u32 %0, [%1];" : "=r"(v) : "l"(p));
    else if (PF == 1) asm("ld.global.nc.L2::256B.u32 %0, [%1];" : "=r"(v) : "l"(p));
    else if (PF == 3) v = *reinterpret_cast<const unsigned int *>(p);
    else v = __ldg(reinterpret_cast<const unsigned int *>(p));
    return v;
}
template <int PF> __device__ __forceinline__ uint32_t xi_ldw16(const uint8_t *p) {
    unsigned short v;
    if (PF == 4) asm("ld.global.nc.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(v) : "l"(p), "l"(xi_evict_first()));
    else if (PF == 2) asm("ld.global.nc.L1::no_allocate.L2::256B.u16 %0, [%1];" : "=h"(v) : "l"(p));
    else if (PF == 1) asm("ld.global.nc.L2::256B.u16 %0, [%1];" : "=h"(v) : "l"(p));
    else if (PF == 3) v = *reinterpret_cast<const unsigned short *>(p);
    else v = __ldg(reinterpret_cast<const unsigned short *>(p));
    return v;
}
template <int PF> __device__ __forceinline__ uint2 xi_ldw64(const uint8_t *p) {
    uint2 v;
    if (PF == 4) asm("ld.global.nc.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;" : "=r"(v.x), "=r"(v.y) : "l"(p), "l"(xi_evict_first()));
    else if (PF == 2) asm("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    else if (PF == 1) asm("ld.global.nc.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    else if (PF == 3) v = *reinterpret_cast<const uint2 *>(p);
    else v = __ldg(reinterpret_cast<const uint2 *>(p));
    return v;
}
template <int PF> __device__ __forceinline__ uint4 xi_ldw128(const uint8_t *p) {
    uint4 v;
    if (PF == 4) asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(xi_evict_first()));
    else if (PF == 2) asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    else if (PF == 1) asm("ld.global.nc.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    else if (PF == 3) v = *reinterpret_cast<const uint4 *>(p);
    else v = __ldg(reinterpret_cast<const uint4 *>(p));
    return v;
}

// One lane's share of a 32-element block (4 lanes a block, lane s of 4: elements 4s..4s+3 and
// 16+4s..16+4s+3), split in two steps so a warp issues all its raw loads before decoding any:
// raw(): NW 32-bit words from memory; dec(): q[8] and the block's d, m (value = d*q + m; for q4_0
// m = -8d, folded out of the per-element work, see XiMv::dec).
template <int TYPE> struct XiMv;
template <> struct XiMv<XI_F32> {
    static constexpr int NW = 8;
    template <int PF> static __device__ __forceinline__ void raw(const uint8_t *row, int b, int s, uint32_t r[NW]) {
        const uint4 lo = xi_ldw128<PF>(row + (size_t_)b * 128 + 16 * s), hi = xi_ldw128<PF>(row + (size_t_)b * 128 + 64 + 16 * s);
        r[0] = lo.x; r[1] = lo.y; r[2] = lo.z; r[3] = lo.w; r[4] = hi.x; r[5] = hi.y; r[6] = hi.z; r[7] = hi.w;
    }
    static __device__ __forceinline__ void dec(const uint32_t r[NW], float q[8], float &d, float &m) {
#pragma unroll
        for (int i = 0; i < 8; i++) q[i] = __int_as_float(r[i]);
        d = 1.0f; m = 0.0f;
    }
};
template <> struct XiMv<XI_F16> {
    static constexpr int NW = 4;
    template <int PF> static __device__ __forceinline__ void raw(const uint8_t *row, int b, int s, uint32_t r[NW]) {
        const uint2 lo = xi_ldw64<PF>(row + (size_t_)b * 64 + 8 * s), hi = xi_ldw64<PF>(row + (size_t_)b * 64 + 32 + 8 * s);
        r[0] = lo.x; r[1] = lo.y; r[2] = hi.x; r[3] = hi.y;
    }
    static __device__ __forceinline__ void dec(const uint32_t r[NW], float q[8], float &d, float &m) {
#pragma unroll
        for (int i = 0; i < 4; i++) { q[2 * i] = xi_h2f(r[i] & 0xffff); q[2 * i + 1] = xi_h2f(r[i] >> 16); }
        d = 1.0f; m = 0.0f;
    }
};
template <> struct XiMv<XI_Q8_0> {
    static constexpr int NW = 3;
    template <int PF> static __device__ __forceinline__ void raw(const uint8_t *row, int b, int s, uint32_t r[NW]) {
        const uint8_t *blk = row + (size_t_)b * 34;
        r[0] = xi_ldw16<PF>(blk + 2 + 4 * s) | (xi_ldw16<PF>(blk + 4 + 4 * s) << 16);
        r[1] = xi_ldw16<PF>(blk + 18 + 4 * s) | (xi_ldw16<PF>(blk + 20 + 4 * s) << 16);
        r[2] = xi_ldw16<PF>(blk);
    }
    // int8 -> float without I2F: (byte ^ 0x80) is q + 128, read as 2^23 + q + 128 by PRMT
    static __device__ __forceinline__ void dec(const uint32_t r[NW], float q[8], float &d, float &m) {
        const uint32_t lo = r[0] ^ 0x80808080u, hi = r[1] ^ 0x80808080u;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            q[i] = __int_as_float(__byte_perm(lo, 0x4B000000u, 0x7540 | i)) - 8388736.0f;
            q[4 + i] = __int_as_float(__byte_perm(hi, 0x4B000000u, 0x7540 | i)) - 8388736.0f;
        }
        d = xi_h2f(r[2]); m = 0.0f;
    }
};
template <> struct XiMv<XI_Q4_0> {
    static constexpr int NW = 2;
    template <int PF> static __device__ __forceinline__ void raw(const uint8_t *row, int b, int s, uint32_t r[NW]) {
        const uint8_t *blk = row + (size_t_)b * 18;
        r[0] = xi_ldw16<PF>(blk + 2 + 4 * s) | (xi_ldw16<PF>(blk + 4 + 4 * s) << 16);
        r[1] = xi_ldw16<PF>(blk);
    }
    // q = nibble - 8 (exact: 2^23 + nibble - (2^23 + 8))
    static __device__ __forceinline__ void dec(const uint32_t r[NW], float q[8], float &d, float &m) {
        const uint32_t lo = r[0] & 0x0F0F0F0Fu, hi = (r[0] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            q[i] = __int_as_float(__byte_perm(lo, 0x4B000000u, 0x7540 | i)) - 8388616.0f;
            q[4 + i] = __int_as_float(__byte_perm(hi, 0x4B000000u, 0x7540 | i)) - 8388616.0f;
        }
        d = xi_h2f(r[1]); m = 0.0f;
    }
};
template <> struct XiMv<XI_Q4_1> {
    static constexpr int NW = 2;
    template <int PF> static __device__ __forceinline__ void raw(const uint8_t *row, int b, int s, uint32_t r[NW]) {
        const uint8_t *blk = row + (size_t_)b * 20;
        r[0] = xi_ldw32<PF>(blk + 4 + 4 * s);
        r[1] = xi_ldw32<PF>(blk);
    }
    static __device__ __forceinline__ void dec(const uint32_t r[NW], float q[8], float &d, float &m) {
        const uint32_t lo = r[0] & 0x0F0F0F0Fu, hi = (r[0] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
        for (int i = 0; i < 4; i++) { q[i] = xi_byte_f(lo, i); q[4 + i] = xi_byte_f(hi, i); }
        d = xi_h2f(r[1] & 0xffff); m = xi_h2f(r[1] >> 16);
    }
};

// T == 1, K % 32 == 0, aligned x and w: one warp computes rows n0..n0+R-1 (rows past N repeat row
// N-1 and are not written). 4 lanes a block, 8 blocks a warp step; U steps at once: the U*R raw
// weight loads of a lane are issued before any is decoded (predicated past the row's end, so a
// short K is one round of loads too), and each x float4 pair (read through L1) serves all R rows.
template <int TYPE, int R, int U, int PF>
__device__ __forceinline__ void xi_matvec_u(const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y,
                                            const xi_matmul_c &c, int n0) {
    typedef XiMv<TYPE> M;
    const int lane = threadIdx.x & 31, s = lane & 3, bl = lane >> 2, nb = c.K >> 5;
    const size_t_ rb = XiQ<TYPE>::row_bytes(c.K);
    const uint8_t *rows[R];
    float sum[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        rows[r] = w + (size_t_)(n0 + r < c.N ? n0 + r : c.N - 1) * rb;
        sum[r] = 0.0f;
    }
    for (int b0 = 0; b0 < nb; b0 += 8 * U) {
        uint32_t raw[U][R][M::NW];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int b = b0 + 8 * u + bl;
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (b < nb) M::template raw<PF>(rows[r], b, s, raw[u][r]);
                else {
#pragma unroll
                    for (int i = 0; i < M::NW; i++) raw[u][r][i] = 0;
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int b = b0 + 8 * u + bl;
            if (b < nb) {
                const float4 lo = __ldg(reinterpret_cast<const float4 *>(x + b * 32 + 4 * s));
                const float4 hi = __ldg(reinterpret_cast<const float4 *>(x + b * 32 + 16 + 4 * s));
                const float xs = TYPE == XI_Q4_1 ? ((lo.x + lo.y) + (lo.z + lo.w)) + ((hi.x + hi.y) + (hi.z + hi.w)) : 0.0f;
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float q[8], d, m;
                    M::dec(raw[u][r], q, d, m);
                    const float dot = q[0] * lo.x + q[1] * lo.y + q[2] * lo.z + q[3] * lo.w +
                                      q[4] * hi.x + q[5] * hi.y + q[6] * hi.z + q[7] * hi.w;
                    float part = d * dot;
                    if (TYPE == XI_Q4_1) part += m * xs;
                    sum[r] += part;
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float v = xi_warp_sum(sum[r]);
        if (lane == 0 && n0 + r < c.N) y[n0 + r] = c.accumulate ? y[n0 + r] + v : v;
    }
}

__host__ __device__ constexpr int xi_block_bytes(int type) {
    return type == XI_Q4_1 ? 20 : type == XI_Q4_0 ? 18 : type == XI_Q8_0 ? 34 : type == XI_F16 ? 64 : 128;
}

// T == 1 with staged weight bytes: a warp loads CB blocks of each of its R rows as aligned 16-byte
// words (each byte fetched once, coalesced; the 16-byte window around the chunk stays inside the
// 16-byte words that hold its first and last bytes), parks them in shared memory, then decodes as
// xi_matvec_u does. The warps of a block are independent (__syncwarp only).
template <int TYPE, int R, int CB>
__device__ __forceinline__ void xi_matvec_s(const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y,
                                            const xi_matmul_c &c, int n0) {
    typedef XiMv<TYPE> M;
    constexpr int BS = xi_block_bytes(TYPE), NL = (CB * BS + 16 + 511) / 512;
    __shared__ uint4 sm[8][R][NL * 32];
    const int lane = threadIdx.x & 31, wi = (threadIdx.x >> 5) & 7, s = lane & 3, bl = lane >> 2, nb = c.K >> 5;
    const size_t_ rb = XiQ<TYPE>::row_bytes(c.K);
    const uint8_t *rows[R];
    float sum[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        rows[r] = w + (size_t_)(n0 + r < c.N ? n0 + r : c.N - 1) * rb;
        sum[r] = 0.0f;
    }
    for (int cb0 = 0; cb0 < nb; cb0 += CB) {
        const int nblk = nb - cb0 < CB ? nb - cb0 : CB;
        uint4 v[R][NL];
        int off[R], n16[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const uint8_t *a = rows[r] + (size_t_)cb0 * BS;
            const uint8_t *a0 = reinterpret_cast<const uint8_t *>(((size_t_)a) & ~(size_t_)15);
            off[r] = (int)(a - a0);
            n16[r] = (off[r] + nblk * BS + 15) >> 4;
#pragma unroll
            for (int i = 0; i < NL; i++) {
                const int idx = lane + 32 * i;
                if (idx < n16[r]) v[r][i] = __ldg(reinterpret_cast<const uint4 *>(a0) + idx);
            }
        }
        __syncwarp();
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int i = 0; i < NL; i++)
                if (lane + 32 * i < n16[r]) sm[wi][r][lane + 32 * i] = v[r][i];
        __syncwarp();
        for (int j0 = 0; j0 < nblk; j0 += 8) {
            const int j = j0 + bl;
            if (j < nblk) {
                const int b = cb0 + j;
                const float4 lo = __ldg(reinterpret_cast<const float4 *>(x + b * 32 + 4 * s));
                const float4 hi = __ldg(reinterpret_cast<const float4 *>(x + b * 32 + 16 + 4 * s));
                const float xs = TYPE == XI_Q4_1 ? ((lo.x + lo.y) + (lo.z + lo.w)) + ((hi.x + hi.y) + (hi.z + hi.w)) : 0.0f;
#pragma unroll
                for (int r = 0; r < R; r++) {
                    uint32_t rw[M::NW];
                    M::template raw<3>(reinterpret_cast<const uint8_t *>(sm[wi][r]) + off[r], j, s, rw);
                    float q[8], d, m;
                    M::dec(rw, q, d, m);
                    const float dot = q[0] * lo.x + q[1] * lo.y + q[2] * lo.z + q[3] * lo.w +
                                      q[4] * hi.x + q[5] * hi.y + q[6] * hi.z + q[7] * hi.w;
                    float part = d * dot;
                    if (TYPE == XI_Q4_1) part += m * xs;
                    sum[r] += part;
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float v = xi_warp_sum(sum[r]);
        if (lane == 0 && n0 + r < c.N) y[n0 + r] = c.accumulate ? y[n0 + r] + v : v;
    }
}

template <int TYPE, int R, int CB>
__device__ __forceinline__ void xi_matvec_s_kernel(const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y,
                                                   const xi_matmul_c &c) {
    const int n0 = (blockIdx.x * 8 + (threadIdx.x >> 5)) * R;
    if (n0 >= c.N) return;
    const bool vec = (c.K & 31) == 0 && (((size_t_)x) & 15) == 0 && (((size_t_)w) & (XiQ<TYPE>::ALIGN - 1)) == 0;
    if (vec) xi_matvec_s<TYPE, R, CB>(w, x, y, c, n0);
    else for (int r = 0; r < R && n0 + r < c.N; r++) xi_matmul_row<TYPE, 1, false>(w, x, y, c, n0 + r, 0);
}

// A T == 1 variant as a whole kernel body: warps of 8 per block, a warp per R rows; the scalar
// path where K, x or w rule the vector loads out.
template <int TYPE, int R, int U, int PF>
__device__ __forceinline__ void xi_matvec_kernel(const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y,
                                                 const xi_matmul_c &c) {
    const int n0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
    if (n0 >= c.N) return;
    const bool vec = (c.K & 31) == 0 && (((size_t_)x) & 15) == 0 && (((size_t_)w) & (XiQ<TYPE>::ALIGN - 1)) == 0;
    if (vec) xi_matvec_u<TYPE, R, U, PF>(w, x, y, c, n0);
    else for (int r = 0; r < R && n0 + r < c.N; r++) xi_matmul_row<TYPE, 1, false>(w, x, y, c, n0 + r, 0);
}

// ---- T == 1 on the tensor cores (mma.sync m16n8k16, f16 inputs, f32 accumulation) -------------------
// Exact in f32 terms: the weight codes (4-bit nibbles, int8) are exact in f16; x is split as
// x = xh + xl (two f16, |x - xh - xl| <= 2^-22 |x|) in B's columns 0 and 1, so every product is
// exact and the sums are f32. A CTA of 8 warps owns 16*RT rows; warp wi takes blocks wi, wi+8, ...
// of all of them (U blocks' raw loads issued at once), one block (32 k) = two mmas, then
// acc += d * (D[:,0] + D[:,1]) (+ m * sum(x of the block) for q4_1); the 8 partial sums meet in
// shared memory. x's f16 halves are built once per CTA in shared memory in B-fragment order.
// The k order inside a block is permuted the same way in A and B: mma 1 takes thread tq's elements
// 4tq..4tq+3 (k = 2tq, 2tq+1, 2tq+8, 2tq+9), mma 2 elements 16+4tq..16+4tq+3, which for q4 are the
// low and high nibbles of qs word tq, for q8_0 qs words tq and tq+4.
#define XI_MMA_KMAX 8192
__device__ __forceinline__ void xi_mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t xi_f2h2(float lo, float hi) {
    uint32_t r;
    asm("{ .reg .b16 l, h; cvt.rn.f16.f32 l, %1; cvt.rn.f16.f32 h, %2; mov.b32 %0, {l, h}; }" : "=r"(r) : "f"(lo), "f"(hi));
    return r;
}
__device__ __forceinline__ float xi_h2f_lo(uint32_t v) { return xi_h2f(v & 0xffff); }
// bytes k, k+1 of v (each 0..255 after the bias) as the f16 pair (1024 + byte) - bias, exact
__device__ __forceinline__ uint32_t xi_bytes_h2(uint32_t v, int sel, uint32_t nbias2) {
    const uint32_t h = __byte_perm(v, 0x64646464u, sel);
    uint32_t r;
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(h), "r"(nbias2));
    return r;
}

template <int TYPE> struct XiMma;
template <> struct XiMma<XI_Q4_1> {
    static constexpr int NW = 2;  // qs word tq, dm
    template <int PF> static __device__ __forceinline__ void raw(const uint8_t *row, int b, int tq, uint32_t r[NW]) {
        const uint8_t *blk = row + (size_t_)b * 20;
        r[0] = xi_ldw32<PF>(blk + 4 + 4 * tq);
        r[1] = xi_ldw32<PF>(blk);
    }
    // a1: mma 1's two regs of this row (k pairs (2tq,2tq+1), (2tq+8,2tq+9)), a2: mma 2's
    static __device__ __forceinline__ void frag(const uint32_t r[NW], uint32_t a1[2], uint32_t a2[2]) {
        const uint32_t lo = r[0] & 0x0F0F0F0Fu, hi = (r[0] >> 4) & 0x0F0F0F0Fu, nb = 0xE400E400u;  // -1024
        a1[0] = xi_bytes_h2(lo, 0x4140, nb); a1[1] = xi_bytes_h2(lo, 0x4342, nb);
        a2[0] = xi_bytes_h2(hi, 0x4140, nb); a2[1] = xi_bytes_h2(hi, 0x4342, nb);
    }
    static __device__ __forceinline__ float d(const uint32_t r[NW]) { return xi_h2f(r[1] & 0xffff); }
    static __device__ __forceinline__ float m(const uint32_t r[NW]) { return xi_h2f(r[1] >> 16); }
};
template <> struct XiMma<XI_Q4_0> {
    static constexpr int NW = 2;  // qs word tq, d
    template <int PF> static __device__ __forceinline__ void raw(const uint8_t *row, int b, int tq, uint32_t r[NW]) {
        const uint8_t *blk = row + (size_t_)b * 18;
        r[0] = xi_ldw16<PF>(blk + 2 + 4 * tq) | (xi_ldw16<PF>(blk + 4 + 4 * tq) << 16);
        r[1] = xi_ldw16<PF>(blk);
    }
    static __device__ __forceinline__ void frag(const uint32_t r[NW], uint32_t a1[2], uint32_t a2[2]) {
        const uint32_t lo = r[0] & 0x0F0F0F0Fu, hi = (r[0] >> 4) & 0x0F0F0F0Fu, nb = 0xE408E408u;  // -1032
        a1[0] = xi_bytes_h2(lo, 0x4140, nb); a1[1] = xi_bytes_h2(lo, 0x4342, nb);
        a2[0] = xi_bytes_h2(hi, 0x4140, nb); a2[1] = xi_bytes_h2(hi, 0x4342, nb);
    }
    static __device__ __forceinline__ float d(const uint32_t r[NW]) { return xi_h2f(r[1] & 0xffff); }
    static __device__ __forceinline__ float m(const uint32_t r[NW]) { return 0.0f; }
};
template <> struct XiMma<XI_Q8_0> {
    static constexpr int NW = 3;  // qs words tq and tq + 4, d
    template <int PF> static __device__ __forceinline__ void raw(const uint8_t *row, int b, int tq, uint32_t r[NW]) {
        const uint8_t *blk = row + (size_t_)b * 34;
        r[0] = xi_ldw16<PF>(blk + 2 + 4 * tq) | (xi_ldw16<PF>(blk + 4 + 4 * tq) << 16);
        r[1] = xi_ldw16<PF>(blk + 18 + 4 * tq) | (xi_ldw16<PF>(blk + 20 + 4 * tq) << 16);
        r[2] = xi_ldw16<PF>(blk);
    }
    static __device__ __forceinline__ void frag(const uint32_t r[NW], uint32_t a1[2], uint32_t a2[2]) {
        const uint32_t lo = r[0] ^ 0x80808080u, hi = r[1] ^ 0x80808080u, nb = 0xE480E480u;  // -1152
        a1[0] = xi_bytes_h2(lo, 0x4140, nb); a1[1] = xi_bytes_h2(lo, 0x4342, nb);
        a2[0] = xi_bytes_h2(hi, 0x4140, nb); a2[1] = xi_bytes_h2(hi, 0x4342, nb);
    }
    static __device__ __forceinline__ float d(const uint32_t r[NW]) { return xi_h2f(r[2] & 0xffff); }
    static __device__ __forceinline__ float m(const uint32_t r[NW]) { return 0.0f; }
};

// The whole T == 1 kernel body (blocks of 256 threads, grid ceil(N / (16 * RT))). Falls back to
// the float path (per CTA) when K % 32 != 0, K > XI_MMA_KMAX, x or w is misaligned, or some
// |x| > 2^15 or x is not finite (f16 range).
template <int TYPE, int RT, int U, int PF>
__device__ __forceinline__ void xi_matvec_mma_kernel(const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y,
                                                     const xi_matmul_c &c) {
    typedef XiMma<TYPE> M;
    __shared__ uint4 bs[XI_MMA_KMAX / 32 * 8];
    __shared__ float xsum[XI_MMA_KMAX / 32];
    __shared__ float red[8][16 * RT];
    const int tid = threadIdx.x, lane = tid & 31, wi = tid >> 5, g = lane >> 2, tq = lane & 3;
    const int nrow0 = blockIdx.x * 16 * RT;
    if (nrow0 >= c.N) return;
    const int nb = c.K >> 5;
    bool ok = (c.K & 31) == 0 && c.K <= XI_MMA_KMAX && (((size_t_)x) & 15) == 0 && (((size_t_)w) & (XiQ<TYPE>::ALIGN - 1)) == 0;
    bool bad = false;
    if (ok) {
        for (int i = tid; i < nb * 8; i += 256) {
            const int b = i >> 3, l8 = i & 7, part = l8 >> 2, t4 = l8 & 3;
            const float4 lo = __ldg(reinterpret_cast<const float4 *>(x + b * 32 + 4 * t4));
            const float4 hi = __ldg(reinterpret_cast<const float4 *>(x + b * 32 + 16 + 4 * t4));
            float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
            for (int j = 0; j < 8; j++) {
                bad |= !(fabsf(v[j]) <= 32768.0f);
                if (part) v[j] -= xi_h2f_lo(xi_f2h2(v[j], 0.0f));  // xl = x - f32(xh)
            }
            bs[i] = make_uint4(xi_f2h2(v[0], v[1]), xi_f2h2(v[2], v[3]), xi_f2h2(v[4], v[5]), xi_f2h2(v[6], v[7]));
        }
        if (TYPE == XI_Q4_1) {
            for (int b = tid; b < nb; b += 256) {
                const float4 *xb = reinterpret_cast<const float4 *>(x + b * 32);
                float s = 0.0f;
#pragma unroll
                for (int j = 0; j < 8; j++) { const float4 t = __ldg(xb + j); s += (t.x + t.y) + (t.z + t.w); }
                xsum[b] = s;
            }
        }
    }
    bad = __syncthreads_or(bad);
    if (!ok || bad) {
        const bool vec = (c.K & 31) == 0 && (((size_t_)x) & 15) == 0 && (((size_t_)w) & (XiQ<TYPE>::ALIGN - 1)) == 0;
        for (int r = wi; r < 16 * RT; r += 8)
            if (nrow0 + r < c.N) {
                if (vec) xi_matmul_row<TYPE, 1, true>(w, x, y, c, nrow0 + r, 0);
                else xi_matmul_row<TYPE, 1, false>(w, x, y, c, nrow0 + r, 0);
            }
        return;
    }
    const size_t_ rb = XiQ<TYPE>::row_bytes(c.K);
    const uint8_t *rows[RT][2];
#pragma unroll
    for (int rt = 0; rt < RT; rt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int n = nrow0 + 16 * rt + 8 * h + g;
            rows[rt][h] = w + (size_t_)(n < c.N ? n : c.N - 1) * rb;
        }
    float acc[RT][2];
#pragma unroll
    for (int rt = 0; rt < RT; rt++) acc[rt][0] = acc[rt][1] = 0.0f;
    for (int b0 = wi; b0 < nb; b0 += 8 * U) {
        uint32_t raw[U][RT][2][M::NW];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int b = b0 + 8 * u;
#pragma unroll
            for (int rt = 0; rt < RT; rt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    if (b < nb) M::template raw<PF>(rows[rt][h], b, tq, raw[u][rt][h]);
                    else {
#pragma unroll
                        for (int i = 0; i < M::NW; i++) raw[u][rt][h][i] = 0;
                    }
                }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int b = b0 + 8 * u;
            if (b < nb) {  // warp-uniform
                const uint4 bf = lane < 8 ? bs[b * 8 + lane] : make_uint4(0, 0, 0, 0);
                const float xs = TYPE == XI_Q4_1 ? xsum[b] : 0.0f;
#pragma unroll
                for (int rt = 0; rt < RT; rt++) {
                    uint32_t a1[4], a2[4], t1[2], t2[2];
                    M::frag(raw[u][rt][0], t1, t2);
                    a1[0] = t1[0]; a1[2] = t1[1]; a2[0] = t2[0]; a2[2] = t2[1];
                    M::frag(raw[u][rt][1], t1, t2);
                    a1[1] = t1[0]; a1[3] = t1[1]; a2[1] = t2[0]; a2[3] = t2[1];
                    float cc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    xi_mma16816(cc, a1, bf.x, bf.y);
                    xi_mma16816(cc, a2, bf.z, bf.w);
                    acc[rt][0] += M::d(raw[u][rt][0]) * (cc[0] + cc[1]);
                    acc[rt][1] += M::d(raw[u][rt][1]) * (cc[2] + cc[3]);
                    if (TYPE == XI_Q4_1) {
                        acc[rt][0] += M::m(raw[u][rt][0]) * xs;
                        acc[rt][1] += M::m(raw[u][rt][1]) * xs;
                    }
                }
            }
        }
    }
    if (tq == 0) {
#pragma unroll
        for (int rt = 0; rt < RT; rt++) { red[wi][16 * rt + g] = acc[rt][0]; red[wi][16 * rt + 8 + g] = acc[rt][1]; }
    }
    __syncthreads();
    if (tid < 16 * RT && nrow0 + tid < c.N) {
        float v = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) v += red[k][tid];
        const int n = nrow0 + tid;
        y[n] = c.accumulate ? y[n] + v : v;
    }
}

// T == 1 rows a warp (8 warps a block): 2 for f32/f16 and for N >= XI_MV_WIDE_N, else 1 (xi_matmul's
// own T == 1 branch; matmul_DT runs xi_mvc.cuh's xi_mv1 instead, which extends xi_matvec_u with the
// same rule). Measured on the H200 (tools/gemv_variants.py, L2-cold, CUDA graph): the
// float path xi_matvec_kernel<R, U=4> beat the tensor-core (xi_matvec_mma_kernel) and the
// staged-bytes (xi_matvec_s_kernel) variants on every shape but a few small ones (within 5%).
#define XI_MV_WIDE_N 16384

// w (N, K) TYPE, x (T, K) f32 -> y (T, N) f32 RW: y[t,n] = (accumulate ? y[t,n] : 0) + sum_k w[n,k] x[t,k].
// matmul_DT runs this only at T > 1 when a row does not fit xi_mvc.cuh's stage (K above ~13000 for
// q4_1); tools/gemv_variants.py and the kernels above use its parts.
// Blocks of 256 threads (8 warps). T > 1: a warp per row, grid (ceil(N/8), ceil(T/4)). T == 1:
// xi_matvec_kernel, R rows a warp (above), grid (ceil(N / (8 R)), 1).
template <int TYPE>
__device__ __forceinline__ void xi_matmul_t4(const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y,
                                             const xi_matmul_c &c);
template <int TYPE>
__device__ __forceinline__ void xi_matmul(const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y,
                                          xi_matmul_c c) {
    if (c.T == 1) {
        if (blockIdx.y > 0) return;
        if constexpr (TYPE == XI_F32 || TYPE == XI_F16) xi_matvec_kernel<TYPE, 2, 2, 0>(w, x, y, c);
        else if (c.N >= XI_MV_WIDE_N) xi_matvec_kernel<TYPE, 2, 4, 0>(w, x, y, c);
        else xi_matvec_kernel<TYPE, 1, 4, 0>(w, x, y, c);
        return;
    }
    xi_matmul_t4<TYPE>(w, x, y, c);
}

// xi_matmul's T > 1 body: a warp per row, 4 tokens a block row, grid (ceil(N/8), ceil(T/4)).
template <int TYPE>
__device__ __forceinline__ void xi_matmul_t4(const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y,
                                             const xi_matmul_c &c) {
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
