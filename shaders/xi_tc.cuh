// The tensor-core matrix kernel of matmul_DT, rmsnorm_matmul_DT and rmsnorm_matmul_swiglu_DT for
// the quantized types q4_1 and q8_0: y (T, N) from w (N, K) rows and x (T, K) f32 tokens (NORM and
// GLU as in xi_mvc.cuh). The cuda backend runs it, at every T, for the weights where it beats the
// float kernels of xi_mvc.cuh / xi_mvt.cuh (backends/cuda/_launch.py: tc_weight, e.g. SmolLM2's
// gate/up and output layer: where its one-token grid is short); a weight's rows never mix the two.
//
// Numerics (mma.sync m16n8k8, tf32 inputs, f32 accumulation). A block's codes q (q4_1 nibbles
// 0..15, q8_0 int8) are exact in tf32. Each h (x, or its rmsnorm with NORM) is split into
// hi = h with its low 13 mantissa bits cleared (exact in tf32) and lo = h - hi (exact in f32; the
// tensor core keeps its top 11 significant bits), so hi + lo carries h to ~2^-21 of |h| and every
// product is exact. A block's dot is 8 mmas: 4 k-steps of 8 into Ch (hi) and into Cl (lo), C = Ch + Cl;
// its part is d * C (+ m * sum(h) of the block for q4_1, the sum taken in f32 over the lane's 8
// values, then over the 4 lanes of a row quad), as GGUF defines the blocks (w = d * q (+ m)).
//
// Order: K is cut into S = xi_tc_segs(K / 32) segments of consecutive blocks (K alone sets them);
// a segment's parts are added in block order, and the S segment sums in segment order, in shared
// memory. Nothing depends on T, on the token's column in the mma or on the other tokens, so every
// (row, token) result is bit-identical whatever T: a batched decode step equals each request alone.
//
// Work: a CTA is S warps (one segment each) over one tile of 16 rows (16 gate and 16 up rows with
// GLU) and TOK tokens (grid.y), 8 tokens an mma tile. Thread (g, c) = (lane / 4, lane % 4) loads,
// for rows g and g + 8, the 4 code bytes 4c..4c+3 and 16+4c..16+4c+3 of each block (q4_1: the low
// and high nibbles of qs word c); the k order inside a block is permuted the same way in A and B,
// so its 8 elements 4c..4c+3, 16+4c..16+4c+3 are its k positions c and c + 4 of the 4 k-steps, and
// its B elements are x's float4s at 4c and 16 + 4c of token g.
//
// One token (xi_tc_one, where the launch gives it the shared memory: K up to 5792, 5664 with GLU):
// the same sums with the token's hi and lo as B's columns 0 and 1 (4 mmas a block instead of 8), h
// split once a CTA into shared memory while the first weight loads are in flight.
#pragma once
#include "xi_mvc.cuh"

#define XI_TC_SEG_BLOCKS 4  // blocks a segment while there are at most XI_TC_SEGS of them
#define XI_TC_SEGS 16       // segments (warps a CTA) at most

// Blocks a segment: 4, or ceil(nb / 16) past 64 blocks. backends/cuda/_launch.py repeats these two.
__host__ __device__ constexpr int xi_tc_seg_blocks(int nb) {
    return nb <= XI_TC_SEG_BLOCKS * XI_TC_SEGS ? XI_TC_SEG_BLOCKS : (nb + XI_TC_SEGS - 1) / XI_TC_SEGS;
}
// Segments of nb blocks (warps a CTA): ceil(nb / xi_tc_seg_blocks), at least 1; the last may be shorter.
__host__ __device__ constexpr int xi_tc_segs(int nb) {
    return nb <= 0 ? 1 : (nb + xi_tc_seg_blocks(nb) - 1) / xi_tc_seg_blocks(nb);
}

// tf32 mma.sync needs compute capability 8.0; the backend never launches these entries below it
// (_launch.tc_weight), where they compile to a trap.
__device__ __forceinline__ void xi_tc_mma(float c[4], const float a[4], float b0, float b1) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])), "r"(__float_as_uint(a[3])),
          "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
#else
    __trap();
#endif
}

// A 32-bit word of 4 bytes at p (4-byte aligned when al, else read byte by byte: the same value).
__device__ __forceinline__ uint32_t xi_tc_w32(const uint8_t *p, bool al) {
    if (al) return __ldg(reinterpret_cast<const unsigned int *>(p));
    return (uint32_t)__ldg(p) | ((uint32_t)__ldg(p + 1) << 8) | ((uint32_t)__ldg(p + 2) << 16) | ((uint32_t)__ldg(p + 3) << 24);
}
// ... 2-byte aligned when al
__device__ __forceinline__ uint32_t xi_tc_w32h(const uint8_t *p, bool al) {
    if (al) return (uint32_t)__ldg(reinterpret_cast<const unsigned short *>(p)) | ((uint32_t)__ldg(reinterpret_cast<const unsigned short *>(p + 2)) << 16);
    return xi_tc_w32(p, false);
}

// The raw bytes thread c needs of one row's block b: its 8 codes and the scales.
template <int TYPE> struct XiTc;
template <> struct XiTc<XI_Q4_1> {
    static constexpr int BYTES = 20;
    struct Raw { uint32_t qs, dm; };
    static __device__ __forceinline__ Raw load(const uint8_t *blk, int c, bool al) {
        return Raw{xi_tc_w32(blk + 4 + 4 * c, al), xi_tc_w32(blk, al)};  // nibbles of bytes 4c..4c+3; f16 d, f16 m
    }
    // e 0..3: low nibbles of bytes 4c..4c+3 (elements 4c..4c+3); 4..7: high nibbles (16+4c..16+4c+3);
    // as floats through 2^23 + v (exact, and cheaper than an integer conversion)
    static __device__ __forceinline__ void codes(const Raw &r, float q[8]) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            q[j] = __uint_as_float(0x4B000000u | ((r.qs >> (8 * j)) & 15u)) - 8388608.0f;
            q[4 + j] = __uint_as_float(0x4B000000u | ((r.qs >> (8 * j + 4)) & 15u)) - 8388608.0f;
        }
    }
    // the same values through PRMT (fewer instructions, another register schedule: xi_tc_one's)
    static __device__ __forceinline__ void codes_prmt(const Raw &r, float q[8]) {
        const uint32_t lo = r.qs & 0x0F0F0F0Fu, hi = (r.qs >> 4) & 0x0F0F0F0Fu;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            q[j] = xi_byte_f(lo, j);
            q[4 + j] = xi_byte_f(hi, j);
        }
    }
    static __device__ __forceinline__ float d(const Raw &r) { return xi_h2f((uint16_t)(r.dm & 0xffff)); }
    static __device__ __forceinline__ float m(const Raw &r) { return xi_h2f((uint16_t)(r.dm >> 16)); }
};
template <> struct XiTc<XI_Q8_0> {
    static constexpr int BYTES = 34;
    struct Raw { uint32_t lo, hi, dm; };
    static __device__ __forceinline__ Raw load(const uint8_t *blk, int c, bool al) {
        const uint32_t d = al ? (uint32_t)__ldg(reinterpret_cast<const unsigned short *>(blk))
                              : (uint32_t)__ldg(blk) | ((uint32_t)__ldg(blk + 1) << 8);
        return Raw{xi_tc_w32h(blk + 2 + 4 * c, al), xi_tc_w32h(blk + 18 + 4 * c, al), d};
    }
    static __device__ __forceinline__ void codes(const Raw &r, float q[8]) {  // 2^23 + 128 + v, exact
#pragma unroll
        for (int j = 0; j < 4; j++) {
            q[j] = __uint_as_float(0x4B000000u | (((r.lo >> (8 * j)) & 255u) ^ 128u)) - 8388736.0f;
            q[4 + j] = __uint_as_float(0x4B000000u | (((r.hi >> (8 * j)) & 255u) ^ 128u)) - 8388736.0f;
        }
    }
    static __device__ __forceinline__ void codes_prmt(const Raw &r, float q[8]) {
        const uint32_t lo = r.lo ^ 0x80808080u, hi = r.hi ^ 0x80808080u;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            q[j] = __int_as_float(__byte_perm(lo, 0x4B000000u, 0x7540 | j)) - 8388736.0f;
            q[4 + j] = __int_as_float(__byte_perm(hi, 0x4B000000u, 0x7540 | j)) - 8388736.0f;
        }
    }
    static __device__ __forceinline__ float d(const Raw &r) { return xi_h2f((uint16_t)r.dm); }
    static __device__ __forceinline__ float m(const Raw &) { return 0.0f; }
};

// Token t's rmsnorm scale, as xi_tok_inv (same order of the sum) for any alignment of xt.
__device__ __forceinline__ float xi_tc_tok_inv(const float *xt, int K, float eps, bool al) {
    if (al) return xi_tok_inv(xt, K, eps);
    const int lane = threadIdx.x & 31;
    float ss = 0.0f;
    for (int i = lane; i < (K >> 2); i += 32) {
        const float4 u = make_float4(xt[4 * i], xt[4 * i + 1], xt[4 * i + 2], xt[4 * i + 3]);
        ss += u.x * u.x + u.y * u.y + u.z * u.z + u.w * u.w;
    }
    return 1.0f / sqrtf(xi_warp_sum(ss) / (float)K + eps);
}
__device__ __forceinline__ float4 xi_tc_ld4(const float *p, bool al) {
    return al ? __ldg(reinterpret_cast<const float4 *>(p)) : make_float4(p[0], p[1], p[2], p[3]);
}
__device__ __forceinline__ float xi_tc_hi(float v) { return __uint_as_float(__float_as_uint(v) & 0xffffe000u); }
// A thread's 8 values of h (lo: elements 4c..4c+3, hi: 16+4c..16+4c+3) as B's hi and lo parts:
// hi with its low 13 mantissa bits cleared, lo = h - hi rounded alone (never fused with the norm's
// product). Both bodies split through this, so their B values agree bit for bit.
__device__ __forceinline__ void xi_tc_split(float4 lo, float4 hi, float bh[8], float bl[8]) {
    const float h[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int e = 0; e < 8; e++) {
        bh[e] = xi_tc_hi(h[e]);
        bl[e] = __fsub_rn(h[e], bh[e]);
    }
}
// q4_1's block sum of h over the row quad (lanes 4k..4k+3, all of the warp's lanes taking part):
// each lane's xi_blk_sum, then (s0 + s1) + (s2 + s3), the same bits in each lane of the quad.
__device__ __forceinline__ float xi_tc_quad_sum(float4 lo, float4 hi) {
    float sm = xi_blk_sum(lo, hi);
    sm += __shfl_xor_sync(0xffffffffu, sm, 1);
    sm += __shfl_xor_sync(0xffffffffu, sm, 2);
    return sm;
}
// A block's part added to a (row, token) sum: acc + (d * (Ch + Cl) (+ m * xs for q4_1)), each
// operation rounded on its own (no contraction left to the compiler), the same in every entry.
template <int TYPE>
__device__ __forceinline__ float xi_tc_acc(float acc, float d, float ch, float cl, float m, float xs) {
    float part = __fmul_rn(d, __fadd_rn(ch, cl));
    if (TYPE == XI_Q4_1) part = __fmaf_rn(m, xs, part);
    return __fadd_rn(acc, part);
}


// A CTA's 16-row tile of the weights at row n0 (and of the up half with GLU): thread (g, c) reads rows
// g and g + 8 (a row past N reads row N - 1; its results are never stored) through load, U blocks'
// raw bytes from block bc on, below b1, in one memory round trip. Both bodies below read through it.
template <int TYPE, int NR, int U>
struct XiTcTile {
    typedef XiTc<TYPE> M;
    typedef typename M::Raw Raw;
    const uint8_t *rows[NR][2];
    int c;
    bool wal;
    __device__ __forceinline__ XiTcTile(const XiMvcArgs &a, int n0, int g, int c_) : c(c_) {
        wal = (((size_t_)a.w) & (TYPE == XI_Q4_1 ? 3 : 1)) == 0;
        const size_t_ rb = (size_t_)(a.K >> 5) * M::BYTES;
#pragma unroll
        for (int q = 0; q < NR; q++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int n = n0 + g + 8 * h;
                rows[q][h] = a.w + (size_t_)(q * a.N + (n < a.N ? n : a.N - 1)) * rb;
            }
    }
    __device__ __forceinline__ void load(Raw (&raw)[U][NR][2], int bc, int b1) const {
#pragma unroll
        for (int u = 0; u < U; u++)
            if (bc + u < b1)
#pragma unroll
                for (int q = 0; q < NR; q++)
#pragma unroll
                    for (int h = 0; h < 2; h++) raw[u][q][h] = M::load(rows[q][h] + (size_t_)(bc + u) * M::BYTES, c, wal);
    }
};

// The kernel body: grid (ceil(N / 16), ceil(T / (8 TL))), S = xi_tc_segs(K / 32) warps a CTA (warp s:
// the blocks of segment s of row tile blockIdx.x, for the CTA's up to 8 TL tokens, read from global
// memory), S x (1 or 2) x tiles x 512 bytes of dynamic shared memory (the segment sums; tiles: of 8
// tokens, ceil(min(T, 8 TL) / 8)). K % 32 == 0. The q4_1 block sum of h is xi_blk_sum over a lane's
// 8 values, then over the 4 lanes of the row quad: (s0 + s1) + (s2 + s3), the same bits in each lane.
template <int TYPE, bool NORM, bool GLU, int TL>
__device__ __forceinline__ void xi_tc_body(const XiMvcArgs &a) {
    typedef XiTc<TYPE> M;
    constexpr int NR = GLU ? 2 : 1, TOK = 8 * TL, U = GLU ? 2 : 4;  // U: blocks whose loads go out at once
    extern __shared__ __align__(16) float xi_tc_red[];
    __shared__ float inv_s[TOK];
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int nb = a.K >> 5, S = xi_tc_segs(nb), sb = xi_tc_seg_blocks(nb);
    const int n0 = blockIdx.x * 16, tg0 = blockIdx.y * TOK;
    if (n0 >= a.N || tg0 >= a.T) return;  // the whole CTA
    const int tn = a.T - tg0 < TOK ? a.T - tg0 : TOK, tiles = (tn + 7) / 8;
    const bool xal = (((size_t_)a.x) & 15) == 0 && (!NORM || (((size_t_)a.norm) & 15) == 0);
    const XiTcTile<TYPE, NR, U> tile(a, n0, g, c);
    const int b0 = wi * sb, b1 = b0 + sb < nb ? b0 + sb : nb;
    typename M::Raw raw[U][NR][2];
    if (b0 < b1) tile.load(raw, b0, b1);  // the first loads go out before the tokens' rmsnorm scales are taken
    if (NORM) {
        for (int t = wi; t < tn; t += S) {
            const float v = xi_tc_tok_inv(a.x + (size_t_)(tg0 + t) * a.K, a.K, a.eps, xal);
            if (lane == 0) inv_s[t] = v;
        }
        __syncthreads();
    }
    float acc[NR][TL][4];
#pragma unroll
    for (int q = 0; q < NR; q++)
#pragma unroll
        for (int j = 0; j < TL; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[q][j][e] = 0.0f;
    for (int bc = b0; bc < b1; bc += U) {
        if (bc != b0) tile.load(raw, bc, b1);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int b = bc + u;
            if (b >= b1) break;
            float4 glo, ghi;
            if (NORM) {
                glo = xi_tc_ld4(a.norm + b * 32 + 4 * c, xal);
                ghi = xi_tc_ld4(a.norm + b * 32 + 16 + 4 * c, xal);
            }
            float4 xlo[TL], xhi[TL];  // this thread's B values of each tile (token 8 j + g), loaded first
#pragma unroll
            for (int j = 0; j < TL; j++) {
                xlo[j] = xhi[j] = make_float4(0.f, 0.f, 0.f, 0.f);
                const int t = 8 * j + g;
                if (j < tiles && t < tn) {
                    const float *xt = a.x + (size_t_)(tg0 + t) * a.K + b * 32 + 4 * c;
                    xlo[j] = xi_tc_ld4(xt, xal);
                    xhi[j] = xi_tc_ld4(xt + 16, xal);
                }
            }
            float A[NR][4][4], dd[NR][2], mm[NR][2];  // A[q][k-step]: a0 (g, c), a1 (g+8, c), a2 (g, c+4), a3 (g+8, c+4)
#pragma unroll
            for (int q = 0; q < NR; q++) {
                float q0[8], q1[8];
                M::codes(raw[u][q][0], q0);
                M::codes(raw[u][q][1], q1);
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    A[q][s][0] = q0[2 * s];
                    A[q][s][1] = q1[2 * s];
                    A[q][s][2] = q0[2 * s + 1];
                    A[q][s][3] = q1[2 * s + 1];
                }
                dd[q][0] = M::d(raw[u][q][0]);
                dd[q][1] = M::d(raw[u][q][1]);
                mm[q][0] = M::m(raw[u][q][0]);
                mm[q][1] = M::m(raw[u][q][1]);
            }
#pragma unroll
            for (int j = 0; j < TL; j++) {
                if (j >= tiles) break;
                float4 lo = xlo[j], hi = xhi[j];
                if (NORM && 8 * j + g < tn) {
                    lo = xi_blk_norm(lo, inv_s[8 * j + g], glo);
                    hi = xi_blk_norm(hi, inv_s[8 * j + g], ghi);
                }
                float xs0 = 0.0f, xs1 = 0.0f;  // q4_1: the block sums of h of tokens 8 j + 2c and 8 j + 2c + 1
                if (TYPE == XI_Q4_1) {
                    const float sm = xi_tc_quad_sum(lo, hi);
                    xs0 = __shfl_sync(0xffffffffu, sm, 8 * c);
                    xs1 = __shfl_sync(0xffffffffu, sm, 8 * c + 4);
                }
                float bh[8], bl[8];
                xi_tc_split(lo, hi, bh, bl);
#pragma unroll
                for (int q = 0; q < NR; q++) {
                    float Ch[4] = {0.0f, 0.0f, 0.0f, 0.0f}, Cl[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                    for (int s = 0; s < 4; s++) {
                        xi_tc_mma(Ch, A[q][s], bh[2 * s], bh[2 * s + 1]);
                        xi_tc_mma(Cl, A[q][s], bl[2 * s], bl[2 * s + 1]);
                    }
                    // C: c0 (row g, token 2c), c1 (g, 2c + 1), c2 (g + 8, 2c), c3 (g + 8, 2c + 1)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        acc[q][j][e] = xi_tc_acc<TYPE>(acc[q][j][e], dd[q][e >> 1], Ch[e], Cl[e], mm[q][e >> 1], (e & 1) ? xs1 : xs0);
                }
            }
        }
    }
    // the segment sums meet in shared memory: red[seg][q][tile][e][lane], added in segment order
    const int per = NR * tiles * 128;
#pragma unroll
    for (int q = 0; q < NR; q++)
#pragma unroll
        for (int j = 0; j < TL; j++)
            if (j < tiles)
#pragma unroll
                for (int e = 0; e < 4; e++) xi_tc_red[wi * per + ((q * tiles + j) * 4 + e) * 32 + lane] = acc[q][j][e];
    __syncthreads();
    for (int o = threadIdx.x; o < tiles * 128; o += S * 32) {  // o = (tile, e, lane) of the gate (or only) region
        float sg = xi_tc_red[o], su = GLU ? xi_tc_red[tiles * 128 + o] : 0.0f;
        for (int s = 1; s < S; s++) {
            sg += xi_tc_red[s * per + o];
            if (GLU) su += xi_tc_red[s * per + tiles * 128 + o];
        }
        const int j = o >> 7, e = (o >> 5) & 3, l = o & 31;
        const int n = n0 + (l >> 2) + 8 * (e >> 1), t = 8 * j + 2 * (l & 3) + (e & 1);
        if (n >= a.N || t >= tn) continue;
        float *yo = a.y + (size_t_)(tg0 + t) * a.N + n;
        if (GLU) *yo = sg / (1.0f + expf(-sg)) * su;
        else *yo = a.accumulate ? *yo + sg : sg;
    }
}

// Dynamic shared bytes of xi_tc_one for nb blocks of K and NR weight regions (1, or 2 with GLU):
// h split into hi and lo in B-fragment order (nb x 256 bytes), the segment sums (S x NR x 16
// floats) and the block sums of h (nb floats). backends/cuda/_launch.py repeats this (tc1_shared).
__host__ __device__ constexpr int xi_tc1_shared(int nb, int nr) { return xi_tc_segs(nb) * nr * 64 + nb * 4 + nb * 256; }
__device__ __forceinline__ unsigned xi_dynamic_smem() {
    unsigned v;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(v));
    return v;
}

// T == 1, the same sums as xi_tc_body's (bit for bit: every (row, block) part and the segment sums
// in the same order), laid out for one token: the token's hi and lo are B's columns 0 and 1, so a
// block is 4 mmas (not 8 a tile), and thread (g, 0) holds row g's Ch, Cl in c0, c1 (row g + 8's in
// c2, c3). The CTA first issues the raw loads of its first U blocks a warp, then, while they are in
// flight, splits h once into shared memory (threads 4b..4b+3 take block b: hi, lo and the block sum
// xi_tc_body takes, (s0 + s1) + (s2 + s3)), so no warp converts x per block. Needs
// xi_tc1_shared(nb, NR) bytes of dynamic shared memory.
template <int TYPE, bool NORM, bool GLU, int U>
__device__ __forceinline__ void xi_tc_one(const XiMvcArgs &a) {
    typedef XiTc<TYPE> M;
    constexpr int NR = GLU ? 2 : 1;
    extern __shared__ __align__(16) float xi_tc_red[];
    __shared__ float inv_s;
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int nb = a.K >> 5, S = xi_tc_segs(nb), sb = xi_tc_seg_blocks(nb), nt = 32 * S;
    const int n0 = blockIdx.x * 16;
    if (n0 >= a.N) return;
    float4 *bpart = reinterpret_cast<float4 *>(xi_tc_red);  // [b][hi, lo][c][2]
    float *red = xi_tc_red + nb * 64, *xsum = red + S * NR * 16;
    const bool xal = (((size_t_)a.x) & 15) == 0 && (!NORM || (((size_t_)a.norm) & 15) == 0);
    const XiTcTile<TYPE, NR, U> tile(a, n0, g, c);
    const int b0 = wi * sb, b1 = b0 + sb < nb ? b0 + sb : nb;
    typename M::Raw raw[U][NR][2];
    if (b0 < b1) tile.load(raw, b0, b1);
    if (NORM) {
        if (wi == 0) {
            const float v = xi_tc_tok_inv(a.x, a.K, a.eps, xal);
            if (lane == 0) inv_s = v;
        }
        __syncthreads();
    }
    for (int base = 0; base < 4 * nb; base += nt) {  // the split of h, block b by threads 4b..4b+3
        const int i = base + threadIdx.x, b = i >> 2;
        float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
        if (i < 4 * nb) {
            lo = xi_tc_ld4(a.x + b * 32 + 4 * c, xal);
            hi = xi_tc_ld4(a.x + b * 32 + 16 + 4 * c, xal);
            if (NORM) {
                lo = xi_blk_norm(lo, inv_s, xi_tc_ld4(a.norm + b * 32 + 4 * c, xal));
                hi = xi_blk_norm(hi, inv_s, xi_tc_ld4(a.norm + b * 32 + 16 + 4 * c, xal));
            }
        }
        if (TYPE == XI_Q4_1) {
            const float sm = xi_tc_quad_sum(lo, hi);
            if (i < 4 * nb && c == 0) xsum[b] = sm;
        }
        if (i < 4 * nb) {
            float bh[8], bl[8];
            xi_tc_split(lo, hi, bh, bl);
            float4 *o = bpart + (size_t_)b * 16 + 2 * c;
            o[0] = make_float4(bh[0], bh[1], bh[2], bh[3]);
            o[1] = make_float4(bh[4], bh[5], bh[6], bh[7]);
            o[8] = make_float4(bl[0], bl[1], bl[2], bl[3]);
            o[9] = make_float4(bl[4], bl[5], bl[6], bl[7]);
        }
    }
    __syncthreads();
    float acc[NR][2];
#pragma unroll
    for (int q = 0; q < NR; q++) acc[q][0] = acc[q][1] = 0.0f;
    for (int bc = b0; bc < b1; bc += U) {
        if (bc != b0) tile.load(raw, bc, b1);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int b = bc + u;
            if (b >= b1) break;
            float bv[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};  // column g of B: h's hi (g 0), lo (g 1)
            if (g < 2) {
                const float4 *p = bpart + (size_t_)b * 16 + 8 * g + 2 * c;
                const float4 v0 = p[0], v1 = p[1];
                bv[0] = v0.x; bv[1] = v0.y; bv[2] = v0.z; bv[3] = v0.w;
                bv[4] = v1.x; bv[5] = v1.y; bv[6] = v1.z; bv[7] = v1.w;
            }
            const float xs = TYPE == XI_Q4_1 ? xsum[b] : 0.0f;
#pragma unroll
            for (int q = 0; q < NR; q++) {
                float q0[8], q1[8];
                M::codes_prmt(raw[u][q][0], q0);
                M::codes_prmt(raw[u][q][1], q1);
                float C[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    const float A[4] = {q0[2 * s], q1[2 * s], q0[2 * s + 1], q1[2 * s + 1]};
                    xi_tc_mma(C, A, bv[2 * s], bv[2 * s + 1]);
                }
                acc[q][0] = xi_tc_acc<TYPE>(acc[q][0], M::d(raw[u][q][0]), C[0], C[1], M::m(raw[u][q][0]), xs);
                acc[q][1] = xi_tc_acc<TYPE>(acc[q][1], M::d(raw[u][q][1]), C[2], C[3], M::m(raw[u][q][1]), xs);
            }
        }
    }
    if (c == 0)
#pragma unroll
        for (int q = 0; q < NR; q++) {
            red[(wi * NR + q) * 16 + g] = acc[q][0];
            red[(wi * NR + q) * 16 + g + 8] = acc[q][1];
        }
    __syncthreads();
    if (threadIdx.x < 16 && n0 + threadIdx.x < a.N) {  // the segment sums in segment order, as xi_tc_body
        const int r = threadIdx.x;
        float sg = red[r], su = GLU ? red[16 + r] : 0.0f;
        for (int s = 1; s < S; s++) {
            sg += red[(s * NR) * 16 + r];
            if (GLU) su += red[(s * NR + 1) * 16 + r];
        }
        float *yo = a.y + n0 + r;
        if (GLU) *yo = sg / (1.0f + expf(-sg)) * su;
        else *yo = a.accumulate ? *yo + sg : sg;
    }
}

// The entries' bodies: 8 tokens a CTA (T <= 8; xi_tc_one at T == 1 where the launch gave it its
// shared memory), and 32 (16 with GLU) at T > 8. Separate entries, so each gets its own registers.
template <int TYPE, bool NORM, bool GLU>
__device__ __forceinline__ void xi_tc_kernel(const XiMvcArgs &a) {
    if (a.T == 1 && xi_dynamic_smem() >= (unsigned)xi_tc1_shared(a.K >> 5, GLU ? 2 : 1))
        // the launch gave it the bytes (_launch.tc_launch); U: every block of a segment of 8 in one
        // round trip, fewer with GLU's two regions (within the entries' registers, no spills)
        xi_tc_one<TYPE, NORM, GLU, GLU ? 2 : 8>(a);
    else
        xi_tc_body<TYPE, NORM, GLU, 1>(a);
}
template <int TYPE, bool NORM, bool GLU>
__device__ __forceinline__ void xi_tc_kernel_t(const XiMvcArgs &a) {
    xi_tc_body<TYPE, NORM, GLU, GLU ? 2 : 4>(a);
}
