// get_rows_DT and dequantize_DT, and the decoders the matrix kernels (xi_mvc.cuh, xi_mvt.cuh) use, for
// the weight types beyond the XiQ ones of xi_quant.cuh: q5_0, q5_1, iq4_nl (blocks of 32), q2_k, q3_k,
// q4_k, q5_k, q6_k, iq4_xs (super-blocks of 256), bf16. Layouts: ggml-common.h. Dequantized values
// are rounded as gguf.quants.dequantize does (the same f32 operations in the same order, each an
// explicit _rn intrinsic, never contracted into an FMA), so get_rows / dequantize match it bit for
// bit, as native/kernels/kquant.c does, and the matrix kernels sum products of exactly those weights.
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
// q6_k in device memory (xinfer_async/hal/_layout.py, the cuda backend's device_layouts): the
// super-block at address a holds GGUF's 210 bytes (ql[128], qh[64], scales[16] int8, d) rotated right
// by p = (-a) mod 16, so ql and qh start on 16 bytes; GGUF byte k is at a + (k + p) mod 210. It
// depends on the address mod 16 alone: every copy the kernels make (stages of 16-byte words from
// 16-byte boundaries, by cp.async or plain loads) keeps it.
__device__ __forceinline__ int xk_q6k_rot(const uint8_t *b) { return (int)((0u - (uint32_t)(size_t_)b) & 15u); }
// GGUF byte k >= 192 (the scales, d) of the super-block at b of rotation p
__device__ __forceinline__ const uint8_t *xk_q6k_at(const uint8_t *b, int p, int k) {
    return b + (k + p >= 210 ? k + p - 210 : k + p);
}
template <> struct XiK<XI_Q6_K> {  // ql[128], qh[64], scales[16] int8, d; rotated (xk_q6k_rot)
    static constexpr int QK = 256, BYTES = 210;
    static __device__ __forceinline__ float deq(const uint8_t *b, int j) {
        const int h = j >> 7, i = j & 127, p = xk_q6k_rot(b);
        const int lo = (b[p + 64 * h + (i & 63)] >> (4 * (i >> 6))) & 15, hi = (b[p + 128 + 32 * h + (i & 31)] >> (2 * (i >> 5))) & 3;
        const float dl = __fmul_rn(xi_h2f(xi_u16(xk_q6k_at(b, p, 208))), (float)*(const int8_t *)xk_q6k_at(b, p, 192 + (j >> 4)));
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

// ---- the tuned matrix kernels' view of these formats (xi_mvc.cuh, xi_mvt.cuh) ------------------------
// XiMv<TYPE> as xi_quant.cuh's: a lane's share of 32-element group b of a row (lane s of 4: elements
// 4s..4s+3 and 16+4s..16+4s+3 of the group; group g = b % 8 of super-block b / 8 for the 256-element
// types). raw() only loads (32-bit words, or 16-bit pairs where the block is only 2-aligned) and
// keeps the group / lane index the decode needs in a last word; dec() returns the 8 weights
// dequantized exactly as XiK<TYPE>::deq rounds them (d = 1, m = 0), so these kernels' products are
// sums of the gguf-rounded weights times h, like the simple kernels above, in xi_mvc's order.
template <int PF> __device__ __forceinline__ uint32_t xk_ld32a2(const uint8_t *p) {  // 4 bytes at a 2-aligned address
    return xi_ldw16<PF>(p) | (xi_ldw16<PF>(p + 2) << 16);
}
// bit k (0..3) of v moved to bit 8k: a 4-bit lane mask as one bit a byte
__device__ __forceinline__ uint32_t xk_spread4(uint32_t v) {
    return (v & 1u) | ((v & 2u) << 7) | ((v & 4u) << 14) | ((v & 8u) << 21);
}
// q4_K / q5_K's 6-bit scale and min of group g (0..7) from the 12 scale bytes as 3 little-endian words
// (xi_scale_min_k4 on registers): g < 4 the low 6 bits of bytes g (scale) and g + 4 (min); else the
// low / high nibble of byte g + 4 with the top 2 bits of bytes g - 4 / g as bits 4, 5. Selections and
// masks by g, no branch: where g is the same for every call of a thread (xi_mvq.cuh's lane block) they
// are computed once, and a branch on g diverged within a quarter warp there.
__device__ __forceinline__ void xk_scale_min_w(int g, uint32_t w0, uint32_t w1, uint32_t w2, int &sc, int &m) {
    const bool hi = g >= 4;
    const int sh = 8 * (g & 3);
    const uint32_t m6 = hi ? 15u : 63u, m2 = hi ? 0x30u : 0u;
    sc = (int)((((hi ? w2 : w0) >> sh) & m6) | ((w0 >> (sh + 2)) & m2));
    m = (int)((((hi ? w2 : w1) >> (hi ? sh + 4 : sh)) & m6) | ((w1 >> (sh + 2)) & m2));
}
// iq4_nl's 16 values (xi_kvalues_iq4nl) as int8 bytes of 4 words: value of code c (0..15), from
// registers (a per-lane index into __constant__ memory would serialize the warp)
__device__ __forceinline__ float xk_iq4nl_value(uint32_t c) {
    const uint32_t v = __byte_perm(c & 8 ? 0x26190D01u : 0xBFAD9881u, c & 8 ? 0x71594535u : 0xF6EADDCFu, c & 7);
    return (float)(int8_t)(v & 0xff);
}

template <> struct XiMv<XI_Q5_0> {  // d, qh[4], qs[16]: 22 bytes, 2-aligned
    static constexpr int NW = 4;
    template <int PF> static __device__ __forceinline__ void raw(const uint8_t *row, int b, int s, uint32_t r[NW]) {
        const uint8_t *blk = row + (size_t_)b * 22;
        r[0] = xk_ld32a2<PF>(blk + 6 + 4 * s);
        r[1] = xk_ld32a2<PF>(blk + 2);
        r[2] = xi_ldw16<PF>(blk);
        r[3] = s;
    }
    static __device__ __forceinline__ void dec(const uint32_t r[NW], float q[8], float &d, float &m) {
        const int s = r[3];
        const uint32_t lo = (r[0] & 0x0F0F0F0Fu) | (xk_spread4(r[1] >> (4 * s)) << 4);
        const uint32_t hi = ((r[0] >> 4) & 0x0F0F0F0Fu) | (xk_spread4(r[1] >> (16 + 4 * s)) << 4);
        const float dd = xi_h2f(r[2]);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            q[i] = __fmul_rn(dd, xi_byte_f(lo, i) - 16.0f);
            q[4 + i] = __fmul_rn(dd, xi_byte_f(hi, i) - 16.0f);
        }
        d = 1.0f; m = 0.0f;
    }
};
template <> struct XiMv<XI_Q5_1> {  // d, m, qh[4], qs[16]: 24 bytes, 4-aligned
    static constexpr int NW = 4;
    template <int PF> static __device__ __forceinline__ void raw(const uint8_t *row, int b, int s, uint32_t r[NW]) {
        const uint8_t *blk = row + (size_t_)b * 24;
        r[0] = xi_ldw32<PF>(blk + 8 + 4 * s);
        r[1] = xi_ldw32<PF>(blk + 4);
        r[2] = xi_ldw32<PF>(blk);
        r[3] = s;
    }
    static __device__ __forceinline__ void dec(const uint32_t r[NW], float q[8], float &d, float &m) {
        const int s = r[3];
        const uint32_t lo = (r[0] & 0x0F0F0F0Fu) | (xk_spread4(r[1] >> (4 * s)) << 4);
        const uint32_t hi = ((r[0] >> 4) & 0x0F0F0F0Fu) | (xk_spread4(r[1] >> (16 + 4 * s)) << 4);
        const float dd = xi_h2f(r[2] & 0xffff), mm = xi_h2f(r[2] >> 16);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            q[i] = __fadd_rn(__fmul_rn(dd, xi_byte_f(lo, i)), mm);
            q[4 + i] = __fadd_rn(__fmul_rn(dd, xi_byte_f(hi, i)), mm);
        }
        d = 1.0f; m = 0.0f;
    }
};
template <> struct XiMv<XI_IQ4_NL> {  // d, qs[16]: 18 bytes, 2-aligned
    static constexpr int NW = 2;
    template <int PF> static __device__ __forceinline__ void raw(const uint8_t *row, int b, int s, uint32_t r[NW]) {
        const uint8_t *blk = row + (size_t_)b * 18;
        r[0] = xk_ld32a2<PF>(blk + 2 + 4 * s);
        r[1] = xi_ldw16<PF>(blk);
    }
    static __device__ __forceinline__ void dec(const uint32_t r[NW], float q[8], float &d, float &m) {
        const float dd = xi_h2f(r[1]);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            q[i] = __fmul_rn(dd, xk_iq4nl_value((r[0] >> (8 * i)) & 15));
            q[4 + i] = __fmul_rn(dd, xk_iq4nl_value((r[0] >> (8 * i + 4)) & 15));
        }
        d = 1.0f; m = 0.0f;
    }
};
template <> struct XiMv<XI_Q2_K> {  // scales[16], qs[64], d, dmin: 84 bytes, 4-aligned
    static constexpr int NW = 5;
    template <int PF> static __device__ __forceinline__ void raw(const uint8_t *row, int b, int s, uint32_t r[NW]) {
        const int g = b & 7;
        const uint8_t *blk = row + (size_t_)(b >> 3) * 84, *qs = blk + 16 + 32 * (g >> 2) + 4 * s;
        r[0] = xi_ldw32<PF>(qs);
        r[1] = xi_ldw32<PF>(qs + 16);
        r[2] = xi_ldw16<PF>(blk + 2 * g);  // the scale bytes of elements 0..15 and 16..31 of the group
        r[3] = xi_ldw32<PF>(blk + 80);
        r[4] = g;
    }
    static __device__ __forceinline__ void dec(const uint32_t r[NW], float q[8], float &d, float &m) {
        const int g = r[4], sh = 2 * (g & 3);
        const float dd = xi_h2f(r[3] & 0xffff), dm = xi_h2f(r[3] >> 16);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t sc = (r[2] >> (8 * h)) & 0xff, codes = (r[h] >> sh) & 0x03030303u;
            const float dl = __fmul_rn(dd, (float)(sc & 15)), ml = __fmul_rn(dm, (float)(sc >> 4));
#pragma unroll
            for (int i = 0; i < 4; i++) q[4 * h + i] = __fsub_rn(__fmul_rn(dl, xi_byte_f(codes, i)), ml);
        }
        d = 1.0f; m = 0.0f;
    }
};
template <> struct XiMv<XI_Q3_K> {  // hmask[32], qs[64], scales[12], d: 110 bytes, 2-aligned
    static constexpr int NW = 6;
    template <int PF> static __device__ __forceinline__ void raw(const uint8_t *row, int b, int s, uint32_t r[NW]) {
        const int g = b & 7;
        const uint8_t *blk = row + (size_t_)(b >> 3) * 110, *qs = blk + 32 + 32 * (g >> 2) + 4 * s;
        r[0] = xk_ld32a2<PF>(qs);
        r[1] = xk_ld32a2<PF>(qs + 16);
        r[2] = xk_ld32a2<PF>(blk + 4 * s);
        r[3] = xk_ld32a2<PF>(blk + 16 + 4 * s);
        // the low and high scale bits of 16-element groups 2g and 2g + 1 (adjacent bytes)
        r[4] = xi_ldw16<PF>(blk + 96 + (2 * g & 7)) | (xi_ldw16<PF>(blk + 104 + (2 * g & 3)) << 16);
        r[5] = xi_ldw16<PF>(blk + 108) | ((uint32_t)g << 16);
    }
    static __device__ __forceinline__ void dec(const uint32_t r[NW], float q[8], float &d, float &m) {
        const int g = r[5] >> 16, sh = 2 * (g & 3);
        const float dd = xi_h2f(r[5] & 0xffff);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int g16 = 2 * g + h;
            const int lo = ((r[4] >> (8 * h)) >> (4 * (g16 >> 3))) & 15, hi = ((r[4] >> (16 + 8 * h)) >> (2 * (g16 >> 2))) & 3;
            const float dl = __fmul_rn(dd, (float)((lo | (hi << 4)) - 32));
            // ql - 4 (1 - hbit) = (ql | hbit << 2) - 4
            const uint32_t codes = ((r[h] >> sh) & 0x03030303u) | (((r[2 + h] >> g) & 0x01010101u) << 2);
#pragma unroll
            for (int i = 0; i < 4; i++) q[4 * h + i] = __fmul_rn(dl, xi_byte_f(codes, i) - 4.0f);
        }
        d = 1.0f; m = 0.0f;
    }
};
template <> struct XiMv<XI_Q4_K> {  // d, dmin, scales[12], qs[128]: 144 bytes, 4-aligned
    static constexpr int NW = 7;
    template <int PF> static __device__ __forceinline__ void raw(const uint8_t *row, int b, int s, uint32_t r[NW]) {
        const int g = b & 7;
        const uint8_t *blk = row + (size_t_)(b >> 3) * 144, *qs = blk + 16 + 32 * (g >> 1) + 4 * s;
        r[0] = xi_ldw32<PF>(qs);
        r[1] = xi_ldw32<PF>(qs + 16);
        r[2] = xi_ldw32<PF>(blk);
        r[3] = xi_ldw32<PF>(blk + 4);
        r[4] = xi_ldw32<PF>(blk + 8);
        r[5] = xi_ldw32<PF>(blk + 12);
        r[6] = g;
    }
    static __device__ __forceinline__ void dec(const uint32_t r[NW], float q[8], float &d, float &m) {
        const int g = r[6], sh = 4 * (g & 1);
        int sc, mn;
        xk_scale_min_w(g, r[3], r[4], r[5], sc, mn);
        const float dl = __fmul_rn(xi_h2f(r[2] & 0xffff), (float)sc), ml = __fmul_rn(xi_h2f(r[2] >> 16), (float)mn);
        const uint32_t lo = (r[0] >> sh) & 0x0F0F0F0Fu, hi = (r[1] >> sh) & 0x0F0F0F0Fu;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            q[i] = __fsub_rn(__fmul_rn(dl, xi_byte_f(lo, i)), ml);
            q[4 + i] = __fsub_rn(__fmul_rn(dl, xi_byte_f(hi, i)), ml);
        }
        d = 1.0f; m = 0.0f;
    }
};
template <> struct XiMv<XI_Q5_K> {  // d, dmin, scales[12], qh[32], qs[128]: 176 bytes, 4-aligned
    static constexpr int NW = 9;
    template <int PF> static __device__ __forceinline__ void raw(const uint8_t *row, int b, int s, uint32_t r[NW]) {
        const int g = b & 7;
        const uint8_t *blk = row + (size_t_)(b >> 3) * 176, *qs = blk + 48 + 32 * (g >> 1) + 4 * s;
        r[0] = xi_ldw32<PF>(qs);
        r[1] = xi_ldw32<PF>(qs + 16);
        r[2] = xi_ldw32<PF>(blk + 16 + 4 * s);
        r[3] = xi_ldw32<PF>(blk + 32 + 4 * s);
        r[4] = xi_ldw32<PF>(blk);
        r[5] = xi_ldw32<PF>(blk + 4);
        r[6] = xi_ldw32<PF>(blk + 8);
        r[7] = xi_ldw32<PF>(blk + 12);
        r[8] = g;
    }
    static __device__ __forceinline__ void dec(const uint32_t r[NW], float q[8], float &d, float &m) {
        const int g = r[8], sh = 4 * (g & 1);
        int sc, mn;
        xk_scale_min_w(g, r[5], r[6], r[7], sc, mn);
        const float dl = __fmul_rn(xi_h2f(r[4] & 0xffff), (float)sc), ml = __fmul_rn(xi_h2f(r[4] >> 16), (float)mn);
        const uint32_t lo = ((r[0] >> sh) & 0x0F0F0F0Fu) | (((r[2] >> g) & 0x01010101u) << 4);
        const uint32_t hi = ((r[1] >> sh) & 0x0F0F0F0Fu) | (((r[3] >> g) & 0x01010101u) << 4);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            q[i] = __fsub_rn(__fmul_rn(dl, xi_byte_f(lo, i)), ml);
            q[4 + i] = __fsub_rn(__fmul_rn(dl, xi_byte_f(hi, i)), ml);
        }
        d = 1.0f; m = 0.0f;
    }
};
template <> struct XiMv<XI_Q6_K> {  // ql[128], qh[64], scales[16] int8, d: 210 bytes, rotated (xk_q6k_rot)
    static constexpr int NW = 6;
    template <int PF> static __device__ __forceinline__ void raw(const uint8_t *row, int b, int s, uint32_t r[NW]) {
        const int g = b & 7, h = g >> 2;
        const uint8_t *blk = row + (size_t_)(b >> 3) * 210;
        const int p = xk_q6k_rot(blk);
        const uint8_t *ql = blk + p + 64 * h + 32 * (g & 1) + 4 * s, *qh = blk + p + 128 + 32 * h + 4 * s;  // 4-aligned
        r[0] = xi_ldw32<PF>(ql);
        r[1] = xi_ldw32<PF>(ql + 16);
        r[2] = xi_ldw32<PF>(qh);
        r[3] = xi_ldw32<PF>(qh + 16);
        r[4] = xi_ldw16<PF>(xk_q6k_at(blk, p, 192 + 2 * g)) | (xi_ldw16<PF>(xk_q6k_at(blk, p, 208)) << 16);  // scales 2g, 2g + 1; d
        r[5] = g;
    }
    static __device__ __forceinline__ void dec(const uint32_t r[NW], float q[8], float &d, float &m) {
        const int g = r[5], shl = 4 * ((g & 3) >> 1), shh = 2 * (g & 3);
        const float dd = xi_h2f(r[4] >> 16);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float dl = __fmul_rn(dd, (float)(int8_t)((r[4] >> (8 * h)) & 0xff));
            const uint32_t codes = ((r[h] >> shl) & 0x0F0F0F0Fu) | (((r[2 + h] >> shh) & 0x03030303u) << 4);
#pragma unroll
            for (int i = 0; i < 4; i++) q[4 * h + i] = __fmul_rn(dl, xi_byte_f(codes, i) - 32.0f);
        }
        d = 1.0f; m = 0.0f;
    }
};
template <> struct XiMv<XI_IQ4_XS> {  // d, scales_h, scales_l[4], qs[128]: 136 bytes, 4-aligned
    static constexpr int NW = 4;
    template <int PF> static __device__ __forceinline__ void raw(const uint8_t *row, int b, int s, uint32_t r[NW]) {
        const int g = b & 7;
        const uint8_t *blk = row + (size_t_)(b >> 3) * 136;
        r[0] = xi_ldw32<PF>(blk + 8 + 16 * g + 4 * s);
        r[1] = xi_ldw32<PF>(blk);
        r[2] = xi_ldw32<PF>(blk + 4);
        r[3] = g;
    }
    static __device__ __forceinline__ void dec(const uint32_t r[NW], float q[8], float &d, float &m) {
        const int g = r[3];
        const int ls = ((r[2] >> (8 * (g >> 1) + 4 * (g & 1))) & 15) | (((r[1] >> (16 + 2 * g)) & 3) << 4);
        const float dl = __fmul_rn(xi_h2f(r[1] & 0xffff), (float)(ls - 32));
#pragma unroll
        for (int i = 0; i < 4; i++) {
            q[i] = __fmul_rn(dl, xk_iq4nl_value((r[0] >> (8 * i)) & 15));
            q[4 + i] = __fmul_rn(dl, xk_iq4nl_value((r[0] >> (8 * i + 4)) & 15));
        }
        d = 1.0f; m = 0.0f;
    }
};
template <> struct XiMv<XI_BF16> {  // as f16's: 4 words, 2 elements a word
    static constexpr int NW = 4;
    template <int PF> static __device__ __forceinline__ void raw(const uint8_t *row, int b, int s, uint32_t r[NW]) {
        const uint2 lo = xi_ldw64<PF>(row + (size_t_)b * 64 + 8 * s), hi = xi_ldw64<PF>(row + (size_t_)b * 64 + 32 + 8 * s);
        r[0] = lo.x; r[1] = lo.y; r[2] = hi.x; r[3] = hi.y;
    }
    static __device__ __forceinline__ void dec(const uint32_t r[NW], float q[8], float &d, float &m) {
#pragma unroll
        for (int i = 0; i < 4; i++) { q[2 * i] = __uint_as_float(r[i] << 16); q[2 * i + 1] = __uint_as_float(r[i] & 0xffff0000u); }
        d = 1.0f; m = 0.0f;
    }
};

// XiMvS<TYPE>: the sub-block scales applied after the code dots, as llama.cpp's mmvq does (d sc sum(q h)
// - dmin m sum(h)): raw() as XiMv's; dec() gives a lane's 8 codes as exact floats q (q6_k: code - 32)
// and the scales, the value of element i being dlo q[i] - m (i < 4) or dhi q[i] - m (i >= 4): 2 float
// operations an element fewer than XiMv's exact weights, but other roundings, so a row's bits differ
// from XiMv's. Only xi_mvp.cuh's SC variants use them (timed by tools/gemv_variants.py --mvp; no
// entry launches them: every entry of a type must sum a row the same way).
template <int TYPE> struct XiMvS;
template <> struct XiMvS<XI_Q4_K> : XiMv<XI_Q4_K> {
    static __device__ __forceinline__ void dec(const uint32_t r[NW], float q[8], float &dlo, float &dhi, float &m) {
        const int g = r[6], sh = 4 * (g & 1);
        int sc, mn;
        xk_scale_min_w(g, r[3], r[4], r[5], sc, mn);
        dlo = dhi = __fmul_rn(xi_h2f(r[2] & 0xffff), (float)sc);
        m = __fmul_rn(xi_h2f(r[2] >> 16), (float)mn);
        const uint32_t lo = (r[0] >> sh) & 0x0F0F0F0Fu, hi = (r[1] >> sh) & 0x0F0F0F0Fu;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            q[i] = xi_byte_f(lo, i);
            q[4 + i] = xi_byte_f(hi, i);
        }
    }
};
template <> struct XiMvS<XI_Q5_K> : XiMv<XI_Q5_K> {
    static __device__ __forceinline__ void dec(const uint32_t r[NW], float q[8], float &dlo, float &dhi, float &m) {
        const int g = r[8], sh = 4 * (g & 1);
        int sc, mn;
        xk_scale_min_w(g, r[5], r[6], r[7], sc, mn);
        dlo = dhi = __fmul_rn(xi_h2f(r[4] & 0xffff), (float)sc);
        m = __fmul_rn(xi_h2f(r[4] >> 16), (float)mn);
        const uint32_t lo = ((r[0] >> sh) & 0x0F0F0F0Fu) | (((r[2] >> g) & 0x01010101u) << 4);
        const uint32_t hi = ((r[1] >> sh) & 0x0F0F0F0Fu) | (((r[3] >> g) & 0x01010101u) << 4);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            q[i] = xi_byte_f(lo, i);
            q[4 + i] = xi_byte_f(hi, i);
        }
    }
};
template <> struct XiMvS<XI_Q6_K> : XiMv<XI_Q6_K> {
    static __device__ __forceinline__ void dec(const uint32_t r[NW], float q[8], float &dlo, float &dhi, float &m) {
        const int g = r[5], shl = 4 * ((g & 3) >> 1), shh = 2 * (g & 3);
        const float dd = xi_h2f(r[4] >> 16);
        dlo = __fmul_rn(dd, (float)(int8_t)(r[4] & 0xff));  // the scale of elements 0..15 of the group
        dhi = __fmul_rn(dd, (float)(int8_t)((r[4] >> 8) & 0xff));  // of 16..31
        m = 0.0f;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t codes = ((r[h] >> shl) & 0x0F0F0F0Fu) | (((r[2 + h] >> shh) & 0x03030303u) << 4);
#pragma unroll
            for (int i = 0; i < 4; i++)  // 2^23 + code, less 2^23 + 32: code - 32, exact
                q[4 * h + i] = __int_as_float(__byte_perm(codes, 0x4B000000u, 0x7540 | i)) - 8388640.0f;
        }
    }
};

// Elements a block (QK) and its bytes of a type of this file, on the host too (xi_mvc_rows).
__host__ __device__ constexpr int xk_block_elems(int type) {
    return type == XI_BF16 ? 1 : (type == XI_Q5_0 || type == XI_Q5_1 || type == XI_IQ4_NL) ? 32 : 256;
}
__host__ __device__ constexpr int xk_block_bytes(int type) {
    return type == XI_Q5_0 ? 22 : type == XI_Q5_1 ? 24 : type == XI_IQ4_NL ? 18 : type == XI_Q2_K ? 84
         : type == XI_Q3_K ? 110 : type == XI_Q4_K ? 144 : type == XI_Q5_K ? 176 : type == XI_Q6_K ? 210
         : type == XI_IQ4_XS ? 136 : 2;
}

// XiQ<TYPE> as xi_quant.cuh's (row bytes, one element, a lane's 8 weights, the weight pointer's
// alignment the vector paths need): the fallbacks of the tuned kernels (xi_mvc_scalar, xi_matmul).
template <int TYPE> struct XkQ {
    static __device__ __forceinline__ size_t_ row_bytes(int k) {
        return (size_t_)(k / xk_block_elems(TYPE)) * xk_block_bytes(TYPE);
    }
    static __device__ __forceinline__ float elem(const uint8_t *row, int e) {
        return XiK<TYPE>::deq(row + (size_t_)(e / XiK<TYPE>::QK) * XiK<TYPE>::BYTES, e % XiK<TYPE>::QK);
    }
    static __device__ __forceinline__ void load8(const uint8_t *row, int b, int s, float q[8], float &d, float &m) {
        uint32_t r[XiMv<TYPE>::NW];
        XiMv<TYPE>::template raw<0>(row, b, s, r);
        XiMv<TYPE>::dec(r, q, d, m);
    }
    static constexpr int ALIGN = (xk_block_bytes(TYPE) & 3) == 0 ? 4 : 2;
};
template <> struct XiQ<XI_Q5_0> : XkQ<XI_Q5_0> {};
template <> struct XiQ<XI_Q5_1> : XkQ<XI_Q5_1> {};
template <> struct XiQ<XI_IQ4_NL> : XkQ<XI_IQ4_NL> {};
template <> struct XiQ<XI_Q2_K> : XkQ<XI_Q2_K> {};
template <> struct XiQ<XI_Q3_K> : XkQ<XI_Q3_K> {};
template <> struct XiQ<XI_Q4_K> : XkQ<XI_Q4_K> {};
template <> struct XiQ<XI_Q5_K> : XkQ<XI_Q5_K> {};
template <> struct XiQ<XI_Q6_K> : XkQ<XI_Q6_K> {};
template <> struct XiQ<XI_IQ4_XS> : XkQ<XI_IQ4_XS> {};
template <> struct XiQ<XI_BF16> : XkQ<XI_BF16> {
    static constexpr int ALIGN = 8;
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

// The entry points of type NAME (TYPE its XiK tag): one macro a kernel, one kernel a shaders/*.cu (the
// matrix kernels' entries are xi_entries.cuh's).
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
