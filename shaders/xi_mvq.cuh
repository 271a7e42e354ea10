// The integer decode matrix kernel, T <= ~8 tokens (entries `_pq` of matmul_DT, rmsnorm_matmul_DT and
// rmsnorm_matmul_swiglu_DT for q4_0, q4_1, q5_0, q8_0, q4_k, q5_k, q6_k; backends/cuda/_launch.py's
// mvq_weight picks it): y (T, N) from w (N, K) GGUF blocks (2N rows with GLU: gate rows, then up
// rows) and x (T, K) f32, NORM and GLU as in xi_mvc.cuh, with llama.cpp's integer numerics (#15):
// activations quantized to q8_1 per block of 32, exact int8 dot products (dp4a), scales after.
//
// Why: the f32 entry `_p` (xi_mvp.cuh) decodes every 4-bit code to a float and multiplies it in f32;
// on the H200 that, not memory, limits it for the q4 types and the K-quants (1-2 TB/s of ~4.3). Here
// a weight block costs a lane 8 dp4a and a few float operations for all its 32 codes.
//
// Design: a CTA of XI_MVQ_WARPS warps takes a tile of tokens (grid.y = ceil(T / TT) tiles; the CTA's
// tt = ceil(T / gridDim.y) <= 8 tokens) and quantizes them ONCE into shared memory (xi_mmq.cuh's
// xi_mmq_quant: codes int8 (tt, K), (d, s) (tt, K / 32); the rmsnorm scales first, xi_mvq_inv,
// the whole CTA a token), then each warp streams tiles of R
// weight rows (NR = R regions, 2R with GLU: the R gate rows and their R up rows) through S stages of
// warp-private shared memory by cp.async (xi_mvp.cuh's xi_mvp_cp16 / commit / wait: chunks of CG
// groups of 256 elements a region), warps taking tiles gw, gw + GW, ... over a grid of at most a
// wave (like `_p`). A lane takes whole blocks of 32: block b of a row goes to lane b % 32.
//
// Numerics (tests/_mmq_model.py `mvq_matmul` models them bit for bit):
// - h = x, or with NORM h = (x * inv) * norm with inv = xi_mvq_inv (rmsnorm_inv_cta of the model),
//   each operation rounded once; h quantized per block of 32 to q8_1 as xi_mmq_quant does (amax / 127,
//   codes rounded half away from zero, s = d * sum(codes));
// - per (row, token, block b) the lane computes the exact integer isum of weight codes x activation
//   codes (dp4a), and the block term, each float operation rounded once (__fmul_rn, __fadd_rn):
//     q4_0, q5_0, q8_0:  f = (dw * d) * (float)isum            (codes q - 8, q - 16, int8)
//     q4_1:              f = (dw * d) * (float)isum + mw * s   (codes 0..15; dw, mw the block's f16)
//     q4_k, q5_k:        the same as q4_1 with dw = d * sc_j, mw = -(dmin * m_j) (both exact in f32:
//                        f16 times a 6-bit integer), codes 0..15 / 0..31, j the sub-block
//     q6_k:              f = (dw * d) * (float)(sc_lo * isum_lo + sc_hi * isum_hi), dw the super-block's
//                        d, codes q - 32, isum_lo over the block's elements 0..15 (scale sc_lo, int8),
//                        isum_hi over 16..31 (sc_hi): the integer combination is exact (< 2^24);
//   how the exact integers are formed is free (XiMvqB): q4_k's high nibbles are summed in place (16
//   times the codes, dp4a of unsigned bytes) and shifted back; q6_k's sums are those of the unsigned
//   codes 0..63 plus -32 times the activation codes' sums (xi_mvq_xs, once a token for the NR rows);
// - lane l adds the f of its blocks b = l, l + 32, l + 64, ... in that order from 0 (acc = acc + f);
//   then the xor-butterfly warp sum of the 32 lanes' acc (offsets 16, 8, 4, 2, 1: `warp_sum`); y = the
//   total (accumulate: y + total). GLU: y = g / (1 + expf(-g)) * u from the gate and up totals.
// Nothing depends on T, on the token tile, on R, S, CG, or on the other rows and tokens: a row of a
// token gives the same bits at every T and alone (a batched decode step equals each request alone).
// These bits differ from the f32 entries' (xi_mvc, xi_mvt at T > 8, `_p`): the backend runs `_pq` at
// T <= PQ_MAX_T only (mvq_weight), so a request's row always takes the same kernel at a given T.
//
// Requirements (the launch rule, _launch.mvq_weight, checks the shapes; the entry writes NaN rows
// otherwise): K % 256 == 0, rows of whole 16-byte words (q6_k: K % 2048 == 0), w 16-byte aligned
// (x and norm: any 4-byte alignment, xi_mmq_quant reads them; PRE: x, the quantized tokens, 16-byte
// aligned, its cp.async copies); compute capability 8.0+ (cp.async).
#pragma once
#include "xi_mvp.cuh"
#include "xi_mmq.cuh"
#include "xi_rope.cuh"

#define XI_MVQ_WARPS 8  // warps a CTA (256 threads)
#define XI_MVQ_TT 8     // tokens a CTA at most
#define XI_MVQ_NQ_TT 4  // ... of the qmatmul_normq entries (the matmul kind's: _launch.py MVQ_MATMUL_TT)
static_assert(XI_MVQ_TT <= XI_MVQ_WARPS, "a warp a token: the rms scales and the normq blocks");

// Dynamic shared bytes: the warps' stages (8 warps x S stages x NR regions x CG groups), the tt
// tokens' codes (tt K bytes) and their (d, s) pairs (tt K / 32 float2). backends/cuda/_launch.py
// repeats this (mvq_shared).
__host__ __device__ constexpr int xi_mvq_shared(int type, int k, int tt, int nr, int s, int cg) {
    return XI_MVQ_WARPS * s * nr * cg * xi_mvp_group_bytes(type) + tt * k + tt * (k / 32) * 8;
}

// N 32-bit words of the bytes at p (any alignment, shared memory): N + 1 aligned loads, funnel shifts.
template <int N>
__device__ __forceinline__ void xi_mvq_lds(const uint8_t *p, uint32_t w[N]) {
    const uint32_t mis = (uint32_t)(size_t_)p & 3u;
    const uint32_t *q = reinterpret_cast<const uint32_t *>(p - mis);
    uint32_t a[N + 1];
#pragma unroll
    for (int i = 0; i <= N; i++) a[i] = q[i];
#pragma unroll
    for (int i = 0; i < N; i++) w[i] = __funnelshift_r(a[i], a[i + 1], mis * 8u);
}
__device__ __forceinline__ uint32_t xi_mvq_u16(const uint8_t *p) { return *reinterpret_cast<const uint16_t *>(p); }
// the exact dot product of 4 unsigned bytes of a and 4 signed bytes of b, plus c (the K-quants'
// unsigned codes: q4_k's high nibbles kept in place, 16 times the code; q6_k's codes before the - 32)
__device__ __forceinline__ int xi_dp4a_us(uint32_t a, uint32_t b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
// bits k .. k + 3 of v to bit 0 of bytes 0..3
__device__ __forceinline__ uint32_t xi_mvq_bits4(uint32_t v) {
    return (v & 1u) | ((v & 2u) << 7) | ((v & 4u) << 14) | ((v & 8u) << 21);
}

// A weight block, decoded from the staged group (grp: a group of 256 elements, 8 blocks; j: the
// block 0..7): c[k] the int8 codes of elements 4k..4k+3 (byte i: element 4k + i), dw, mw the scales
// of the block term (above), sl, sh q6_k's sub-block scales.
template <int TYPE> struct XiMvqB {
    uint32_t c[8];
    float dw, mw;
    int sl, sh;
    int sft;  // q4_k: c holds the codes times 2^sft (the high nibbles kept in place); isum >> sft
    // j: the block of its group (0..7); rot: q6_k's rotation of the group, xk_q6k_rot(grp) (the caller's,
    // once for the rows of a stage: regions are whole 16-byte words apart)
    __device__ __forceinline__ void dec(const uint8_t *grp, int j, int rot = 0) {
        mw = 0.0f;
        sl = sh = 0;
        sft = 0;
        if constexpr (TYPE == XI_Q4_1) {  // d, m, qs[16]: 20 bytes, 4-aligned
            const uint32_t *p = reinterpret_cast<const uint32_t *>(grp + 20 * j);
            const uint32_t dm = p[0];
            dw = xi_h2f(dm & 0xffff);
            mw = xi_h2f(dm >> 16);
#pragma unroll
            for (int k = 0; k < 4; k++) xi_mmq_nib<XI_Q4_1>(p[1 + k], c[k], c[4 + k]);
        } else if constexpr (TYPE == XI_Q4_0) {  // d, qs[16]: 18 bytes, 2-aligned
            const uint8_t *p = grp + 18 * j;
            uint32_t q[4];
            xi_mvq_lds<4>(p + 2, q);
            dw = xi_h2f(xi_mvq_u16(p));
#pragma unroll
            for (int k = 0; k < 4; k++) xi_mmq_nib<XI_Q4_0>(q[k], c[k], c[4 + k]);
        } else if constexpr (TYPE == XI_Q8_0) {  // d, qs[32] int8: 34 bytes, 2-aligned
            const uint8_t *p = grp + 34 * j;
            xi_mvq_lds<8>(p + 2, c);
            dw = xi_h2f(xi_mvq_u16(p));
        } else if constexpr (TYPE == XI_Q5_0) {  // d, qh[4], qs[16]: 22 bytes, 2-aligned
            const uint8_t *p = grp + 22 * j;
            uint32_t q[5];
            xi_mvq_lds<5>(p + 2, q);  // qh, qs words
            dw = xi_h2f(xi_mvq_u16(p));
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint32_t lo = (q[1 + k] & 0x0F0F0F0Fu) | (xi_mvq_bits4(q[0] >> (4 * k)) << 4);
                const uint32_t hi = ((q[1 + k] >> 4) & 0x0F0F0F0Fu) | (xi_mvq_bits4(q[0] >> (16 + 4 * k)) << 4);
                c[k] = __vsub4(lo, 0x10101010u);
                c[4 + k] = __vsub4(hi, 0x10101010u);
            }
        } else if constexpr (TYPE == XI_Q4_K || TYPE == XI_Q5_K) {  // d, dmin, scales[12], (qh[32]), qs[128]
            // 16-byte aligned (a group is 144 / 176 bytes, a chunk starts on 16): the header, the block's
            // 32 code bytes (and q5_k's qh) in 16-byte loads, 3 (5) instead of 12 (20) of 4 bytes
            const uint4 *p = reinterpret_cast<const uint4 *>(grp);
            const uint4 hd = p[0];
            int sc, m;  // j is the same for every block of a lane: the selections by it are computed once
            xk_scale_min_w(j, hd.y, hd.z, hd.w, sc, m);
            dw = __fmul_rn(xi_h2f(hd.x & 0xffff), (float)sc);
            mw = -__fmul_rn(xi_h2f(hd.x >> 16), (float)m);
            const int qs = (TYPE == XI_Q4_K ? 1 : 3) + 2 * (j >> 1);
            sft = 4 * (j & 1);
            const uint4 q0 = p[qs], q1 = p[qs + 1];
            const uint32_t w[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
            uint32_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            if constexpr (TYPE == XI_Q5_K) {
                const uint4 h0 = p[1], h1 = p[2];
                h[0] = h0.x; h[1] = h0.y; h[2] = h0.z; h[3] = h0.w; h[4] = h1.x; h[5] = h1.y; h[6] = h1.z; h[7] = h1.w;
            }
            if constexpr (TYPE == XI_Q4_K) {  // the nibbles in place (one mask, no shift): term() shifts the sum
                const uint32_t msk = 0x0F0F0F0Fu << sft;
#pragma unroll
                for (int k = 0; k < 8; k++) c[k] = w[k] & msk;
            } else {
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    c[k] = (w[k] >> sft) & 0x0F0F0F0Fu;
                    c[k] |= ((h[k] >> j) & 0x01010101u) << 4;
                }
                sft = 0;
            }
        } else if constexpr (TYPE == XI_Q6_K) {  // ql[128], qh[64], scales[16] int8, d: 210 bytes, rotated
            // so that ql and qh start on 16 bytes (xk_q6k_rot; a stage keeps addresses mod 16): the block's
            // 32 ql bytes (its low 4 bits: ql >> 4 (k4 >> 1)) and 32 qh bytes (bits 2 k4, 2 k4 + 1 of each,
            // to bits 4, 5 by a rotation: the bits it wraps around fall outside the mask) in 4 16-byte loads
            const int h = j >> 2, k4 = j & 3, p = rot;
            const int shl = 4 * (k4 >> 1), shq = (2 * k4 + 28) & 31;
            const uint4 *pl = reinterpret_cast<const uint4 *>(grp + p + 64 * h + 32 * (k4 & 1));
            const uint4 *ph = reinterpret_cast<const uint4 *>(grp + p + 128 + 32 * h);
            const uint4 l0 = pl[0], l1 = pl[1], h0 = ph[0], h1 = ph[1];
            const uint32_t a[8] = {l0.x, l0.y, l0.z, l0.w, l1.x, l1.y, l1.z, l1.w};
            const uint32_t b[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
#pragma unroll  // the unsigned codes 0..63: term() subtracts 32 times the activations' sums
            for (int k = 0; k < 8; k++)
                c[k] = ((a[k] >> shl) & 0x0F0F0F0Fu) | (__funnelshift_r(b[k], b[k], shq) & 0x30303030u);
            // the sub-block scales, int8, by casts: __byte_perm's sign-replicating selectors (0x8880) are
            // not honoured (NVRTC emits PRMT with selector 0: CUDA documents 3 selector bits; the H200's
            // q6_k tests failed that way)
            const uint32_t sv = xi_mvq_u16(xk_q6k_at(grp, p, 192 + 8 * h + 2 * k4));
            sl = (int)(int8_t)(sv & 0xffu);
            sh = (int)(int8_t)(sv >> 8);
            dw = xi_h2f(xi_mvq_u16(xk_q6k_at(grp, p, 208)));
        }
    }
    // the block term f of one token (x: its 8 code words of the block; d, s: its q8_1 scale, d * sum;
    // xs: q6_k's -32 times the sums of the activation codes of the block's elements 0..15 and 16..31,
    // xi_mvq_xs, so that the sums over the unsigned codes are the sums over codes - 32, exactly)
    __device__ __forceinline__ float term(const uint32_t x[8], float d, float s, int2 xs = {0, 0}) const {
        if constexpr (TYPE == XI_Q6_K) {
            int lo = xs.x, hi = xs.y;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                lo = xi_dp4a_us(c[k], x[k], lo);
                hi = xi_dp4a_us(c[4 + k], x[4 + k], hi);
            }
            return __fmul_rn(__fmul_rn(dw, d), (float)(sl * lo + sh * hi));
        } else {
            int isum = 0;
            if constexpr (TYPE == XI_Q4_K) {
#pragma unroll
                for (int k = 0; k < 8; k++) isum = xi_dp4a_us(c[k], x[k], isum);
                isum >>= sft;  // exact: the high nibbles in place make every product, so the sum, 16 times the code's
            } else {
#pragma unroll
                for (int k = 0; k < 8; k++) isum = xi_dp4a(c[k], x[k], isum);
            }
            float f = __fmul_rn(__fmul_rn(dw, d), (float)isum);
            if (TYPE == XI_Q4_1 || TYPE == XI_Q4_K || TYPE == XI_Q5_K) f = __fadd_rn(f, __fmul_rn(mw, s));
            return f;
        }
    }
};

// q6_k's xs of a token's block (XiMvqB::term): -32 times the sums of its codes of elements 0..15, 16..31
__device__ __forceinline__ int2 xi_mvq_xs(const uint32_t x[8]) {
    int lo = 0, hi = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        lo = xi_dp4a(0x01010101u, x[k], lo);
        hi = xi_dp4a(0x01010101u, x[4 + k], hi);
    }
    return make_int2(-32 * lo, -32 * hi);
}

// The rmsnorm scales inv[t] = 1 / sqrt(ss / K + eps) of tokens tg0 .. tg0 + tn - 1, all threads of
// the CTA (tests/_mmq_model.py rmsnorm_inv_cta): thread j adds ((a*a + b*b) + (c*c + d*d)) of the
// token's float4s j, j + 256, ... in order, then each warp's xor-butterfly sum, then the 8 warp sums
// in warp order; each operation rounded once. (A warp a token, xi_mmq_inv, waits ~K / 1024 memory
// round trips in a row before the first block can be quantized: the critical path at T == 1.)
template <int TT>
__device__ __forceinline__ void xi_mvq_inv(const XiMvcArgs &a, int tg0, int tn, float *inv) {
    __shared__ float red[TT][XI_MVQ_WARPS];
    const int tid = threadIdx.x, lane = tid & 31, wi = tid >> 5;
    const bool al = (((size_t_)a.x) & 15) == 0;
    float ss[TT];
#pragma unroll
    for (int t = 0; t < TT; t++) ss[t] = 0.0f;
    for (int i = tid; i < (a.K >> 2); i += XI_MVQ_WARPS * 32) {
#pragma unroll
        for (int t = 0; t < TT; t++) {
            if (t < tn) {
                const float *xt = a.x + (size_t_)(tg0 + t) * a.K;
                const float4 u = al ? __ldg(reinterpret_cast<const float4 *>(xt) + i)
                                    : make_float4(xt[4 * i], xt[4 * i + 1], xt[4 * i + 2], xt[4 * i + 3]);
                ss[t] = __fadd_rn(ss[t], __fadd_rn(__fadd_rn(__fmul_rn(u.x, u.x), __fmul_rn(u.y, u.y)),
                                                   __fadd_rn(__fmul_rn(u.z, u.z), __fmul_rn(u.w, u.w))));
            }
        }
    }
#pragma unroll
    for (int t = 0; t < TT; t++) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss[t] = __fadd_rn(ss[t], __shfl_xor_sync(0xffffffffu, ss[t], o));
        if (lane == 0 && t < tn) red[t][wi] = ss[t];
    }
    __syncthreads();
    if (tid < tn) {
        float v = red[tid][0];
#pragma unroll
        for (int w = 1; w < XI_MVQ_WARPS; w++) v = __fadd_rn(v, red[tid][w]);
        inv[tid] = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(v, (float)a.K), a.eps)));
    }
    __syncthreads();
}

// What the qmatmul_normq entries write beside y: the next product's tokens, h = rmsnorm(y) * norm, in
// the planar q8_1 layout with block sums of squares (qmatmul_normq_DT's xqn): codes int8 (T, N) of
// z = y * norm (each product rounded once) quantized per block of 32 (xi_q8_1_warp), then (d, s) f32
// pairs (T, N / 32) at byte T N, then ss f32 (T, N / 32) at byte T N + 8 T N / 32: ss[t][b] the
// xor-butterfly warp sum of y * y over the block's 32 values. The consumer (a qmatmul entry with
// rms = 1) computes inv = 1 / sqrt(sum(ss) / K + eps) of a token (lane l adds ss[l], ss[l + 32], ...
// in order from 0, then the warp sum) and scales each total by it: rmsnorm folded in after the
// products (the codes of z and of h = z * inv are the same up to float rounding), so the producer
// needs no other CTA's rows. Requires N / 32 CTAs a token tile (every warp one tile of R = 4 rows:
// a CTA's 32 rows are one block of each token) and at most XI_MVQ_NQ_TT tokens a CTA.
// NQ's rows buffer: one static array for every token tile size (XI_MVQ_NQ_TT tokens of 32 f32: 512 B,
// _launch.py NORMQ_STATIC), declared only in the entries that use it (xi_mvq's if constexpr).
__device__ __forceinline__ float *xi_mvq_rows() {
    __shared__ float rows[XI_MVQ_NQ_TT * 32];
    return rows;
}
// KS = 2 (the qmatmul_normq entries `_k2`): warps w and w + 8 share tile w's rows, the first the
// chunks [0, ceil(cpt / 2)) of K, the second the rest; the second hands its warp-summed totals (lane
// t R + r: row r of token t) to the first through this array (warp w's 32 floats, static: 1 KB,
// _launch.py NORMQ_K2_STATIC) and a named barrier (id 1 + w, the pair's 64 threads), and the first
// adds them to its own: total = sum(first part) + sum(second part), each a warp sum as above.
__device__ __forceinline__ float *xi_mvq_kpart() {
    __shared__ float kpart[XI_MVQ_WARPS * 32];
    return kpart;
}
__device__ __forceinline__ void xi_bar_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void xi_bar_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// What the qmatmul rope entries do with a layer's q, k, v rows instead of leaving them to
// rope_kv_store (xi_rope.cuh): the product's columns are columns col0.. of the token's qkv row (n_head
// q heads, n_kv k heads, n_kv v heads of hd); each adjacent pair of a q or k head rotated by pos[t]
// where pos[t] >= 0 (xi_rope_pair with ff[i]: the model binds ones where it has no freq factors, an
// exact no-op), written to y, the k pair also into k_cache[row[t]], a v pair into y and
// v_cache[row[t]] (rows outside [0, ctx) not stored; kv16: f16 caches, rounded to nearest even).
// The same function of the same f32 totals as rope_kv_store on the rows qmatmul_rms writes: the
// same bits, one launch fewer. (A launch outside the rule -- xi_mvq_kernel's NaN rows -- poisons y
// only: the caches keep their rows, where the two launches would store NaN.)
struct XiRope {
    const int32_t *pos, *row;
    void *k_cache, *v_cache;
    const float *ff;
    int n_head, n_kv, hd, ctx, kv16, col0;
    float theta;
};
struct XiMvqOut {
    const float *norm;  // (N) f32
    uint8_t *xq;        // (T, N) planar q8_1 with block sums of squares (above)
    // qmatmul_pair (a launch of two products): this CTA is CTA bx of the gx CTAs of its product (gx 0:
    // the whole grid is the product's, bx = blockIdx.x), and y's rows are ldy floats apart (0: N)
    int bx = 0, gx = 0, ldy = 0;
    XiRope rope = {};  // the rope entries' (ROPE)
};
__device__ __forceinline__ void xi_rope_put(const XiRope &r, size_t_ e, float v0, float v1, bool k) {
    if (r.kv16) {
        uint16_t *c = reinterpret_cast<uint16_t *>(k ? r.k_cache : r.v_cache) + e;
        c[0] = xi_f2h(v0);
        c[1] = xi_f2h(v1);
    } else {
        float *c = reinterpret_cast<float *>(k ? r.k_cache : r.v_cache) + e;
        c[0] = v0;
        c[1] = v1;
    }
}
// rows n, n + 1 of the product (one adjacent pair: R is even, N even) of token t, totals e0, e1; yr: y's
// row of the token. Out of line (noinline, r by value): the entries' one copy of the f64 angle's code
// (pow, sincos), where inlined it was one for each of a tile's pairs and token counts (+43 KB of a
// 114 KB entry; the decode kernels wait on instruction fetches: tools/cubin_stats.py).
__device__ __noinline__ void xi_rope_pair_out(const XiRope r, float *yr, int n, float e0, float e1, int t) {
    const int c = r.col0 + n, nqk = (r.n_head + r.n_kv) * r.hd, width = r.n_kv * r.hd;
    const int p = r.pos[t], dst = r.row[t];
    const bool store = dst >= 0 && dst < r.ctx;
    float e[2] = {e0, e1};
    if (c < nqk) {
        const int h = c / r.hd, i = (c - h * r.hd) >> 1;
        if (p >= 0) xi_rope_pair(e, p, i, r.hd, r.theta, r.ff[i]);
        if (h >= r.n_head && store) xi_rope_put(r, (size_t_)dst * width + (h - r.n_head) * r.hd + 2 * i, e[0], e[1], true);
    } else if (store) {
        xi_rope_put(r, (size_t_)dst * width + (c - nqk), e[0], e[1], false);
    }
    yr[n] = e[0];
    yr[n + 1] = e[1];
}
__device__ __forceinline__ int xi_mvq_bx(const XiMvqOut &o) { return o.gx ? o.bx : (int)blockIdx.x; }
__device__ __forceinline__ int xi_mvq_gx(const XiMvqOut &o) { return o.gx ? o.gx : (int)gridDim.x; }

// The vector body (see the top): tokens [tg0, tg0 + tn), tn <= TT; smem: xi_mvq_shared bytes for tn.
// PRE (the qmatmul entries): a.x is not f32 but the tokens already quantized, in the planar q8_1
// layout of quantize_q8_1 (shaders/xi_quantize.cuh: codes int8 (T, K), then (d, s) f32 pairs (T, K /
// 32) at byte T K): the CTA copies its tokens' codes and pairs into shared memory with cp.async in
// the first group of weight chunks (no arithmetic, no rmsnorm; NORM is false), then computes as above;
// with RMS, the tokens are qmatmul_normq's (XiMvqOut) and each row's total is scaled by the token's
// inv (from the block sums of squares, read while the first chunks are in flight) before it is written.
// NQ (the qmatmul_normq entries): the CTA's rows of its tokens also into shared memory, then h of them
// quantized into o.xq (XiMvqOut).
template <int TYPE, int R, int S, int CG, bool NORM, bool GLU, int TT, bool PRE = false, bool NQ = false,
          bool RMS = false, bool ROPE = false, int KS = 1>
__device__ __forceinline__ void xi_mvq(const XiMvcArgs &a, uint8_t *smem, int tg0, int tn, const XiMvqOut &o) {
    static_assert(!NQ || (R == 4 && !GLU && PRE), "qmatmul_normq: the matmul kind, 8 warps of 4 rows = a block of 32");
    static_assert(!ROPE || (R % 2 == 0 && !GLU && !NQ && PRE), "rope: the matmul kind, whole pairs a tile");
    static_assert(!RMS || PRE, "rms: the tokens of qmatmul_normq");
    // KS = 2 relies on one tile a warp (the second part's totals are handed over once, after its loop):
    // NQ's launch, N / 32 CTAs of 32 rows, which xi_mvq_kernel's ok checks
    static_assert(KS == 1 || (KS == 2 && NQ), "K split in two: the qmatmul_normq entries `_k2` (a warp one tile)");
    constexpr int W = XI_MVQ_WARPS * KS;  // warps of the CTA
    constexpr int GB = xi_mvp_group_bytes(TYPE), NR = GLU ? 2 * R : R, CGB = CG * GB, NCP = (CGB / 16 + 31) / 32;
    static_assert(CGB % 16 == 0, "a chunk of CG groups is whole 16-byte words");
    static_assert(TT >= 1 && TT <= XI_MVQ_TT, "1 <= TT <= XI_MVQ_TT");
    const int tid = threadIdx.x, lane = tid & 31, wi = tid >> 5;
    const int wt = KS == 1 ? wi : wi % XI_MVQ_WARPS, kp = KS == 1 ? 0 : wi / XI_MVQ_WARPS;  // tile warp, part of K
    const int nb = a.K >> 5, gpr = nb >> 3, cpt = (gpr + CG - 1) / CG;  // blocks, groups a row, chunks a tile
    // NQ sums a tile's chunks [0, h) and [h, cpt) apart, h = ceil(cpt / 2) (each lanes then butterfly),
    // total = first + second: so with KS = 2 (a warp each half) and KS = 1 (one warp, both halves) the
    // same bits, and the host picks the entry by speed alone (tests/_mmq_model.py mvq_matmul's split)
    const int h = (cpt + 1) / 2;
    // this warp's chunks of each of its tiles: [c_lo, c_hi) (KS = 1: all)
    const int c_lo = KS == 1 || kp == 0 ? 0 : h, c_hi = KS == 1 || kp == 1 ? cpt : h;
    const size_t_ rb = (size_t_)gpr * GB;
    const int bx = xi_mvq_bx(o), ntile = (a.N + R - 1) / R, gw = bx * XI_MVQ_WARPS + wt, GW = xi_mvq_gx(o) * XI_MVQ_WARPS;
    const size_t_ ldy = o.ldy ? o.ldy : a.N;
    const int nchunk = gw < ntile ? ((ntile - 1 - gw) / GW + 1) * (c_hi - c_lo) : 0;
    uint8_t *st = smem + (size_t_)wi * S * NR * CGB;  // this warp's S stages
    uint8_t *xq = smem + (size_t_)W * S * NR * CGB;  // (tn, K) codes
    float2 *ds = reinterpret_cast<float2 *>(xq + (size_t_)tn * a.K);  // (tn, nb) (d, s)
    __shared__ float inv[TT];  // the tokens' rmsnorm scales
    float *yb = nullptr;  // NQ: the CTA's 32 rows of each token, as written to y (token t: yb[32 t ..])
    if constexpr (NQ) yb = xi_mvq_rows();

    // issue cursor: chunk ic of tile it, into stage is (as xi_mvp)
    int it = gw, ic = c_lo, is = 0, issued = 0;
    auto issue = [&]() {
        if (issued < nchunk) {
            const int g0 = ic * CG, nw = (gpr - g0 < CG ? gpr - g0 : CG) * GB / 16;
            uint8_t *dst = st + (size_t_)is * NR * CGB;
#pragma unroll 1
            for (int q = 0; q < NR; q++) {  // a loop, not unrolled: short code (see xi_mmq_quant)
                const int r = GLU ? q % R : q;
                const int n = it * R + r < a.N ? it * R + r : a.N - 1;  // rows past N repeat row N - 1 (not written)
                const uint8_t *src = a.w + (size_t_)((GLU && q >= R ? a.N : 0) + n) * rb + (size_t_)g0 * GB;
#pragma unroll
                for (int k = 0; k < NCP; k++) {
                    const int i = lane + 32 * k;
                    if (i < nw) xi_mvp_cp16(dst + q * CGB + 16 * i, src + 16 * i);
                }
            }
            issued++;
            is = is + 1 == S ? 0 : is + 1;
            if (++ic == c_hi) { ic = c_lo; it += GW; }
        }
        xi_mvp_commit();  // an empty group past the end keeps the count of pending groups uniform
    };
    // The weights' first S - 1 stages, before the wait for the previous kernel: no kernel writes a
    // weight (the model uploads them by copies and awaits the kernels that derive others: see
    // xi_grid_begin in xi_common.cuh), so they may be read while the previous kernel still runs, and
    // the first chunks are in shared memory when it ends instead of one L2 round trip after.
#pragma unroll
    for (int c = 0; c < S - 1; c++) issue();
    xi_grid_begin();
    if (PRE) {  // the tokens' codes and (d, s) pairs (16-byte words, from L2: the previous kernel wrote them;
        // the codes' halves of blocks b with b & 4 swapped, the order the loop below reads them in)
        const uint4 *g = reinterpret_cast<const uint4 *>(a.x);
        const uint4 *gc = g + (size_t_)tg0 * a.K / 16, *gd = g + ((size_t_)a.T * a.K + (size_t_)tg0 * nb * 8) / 16;
        const int nc = tn * a.K / 16, nd = tn * nb / 2;  // K % 256 == 0
#pragma unroll 4
        for (int i = tid; i < nc; i += W * 32) reinterpret_cast<uint4 *>(xq)[i ^ ((i >> 3) & 1)] = __ldcg(gc + i);
#pragma unroll 4
        for (int i = tid; i < nd; i += W * 32) reinterpret_cast<uint4 *>(ds)[i] = __ldcg(gd + i);
    }

    if (RMS) {  // inv of the tokens from their block sums of squares: warp t, token tg0 + t
        if (wi < tn) {
            const float *ss = reinterpret_cast<const float *>(reinterpret_cast<const uint8_t *>(a.x) +
                                                              (size_t_)a.T * a.K + (size_t_)a.T * nb * 8) + (size_t_)(tg0 + wi) * nb;
            float v = 0.0f;
            for (int b = lane; b < nb; b += 32) v = __fadd_rn(v, __ldcg(ss + b));
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
            if (lane == 0) inv[wi] = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(v, (float)a.K), a.eps)));
        }
    }
    if (!PRE) {  // the tokens, quantized once a CTA while the first chunks are in flight
        if (NORM) xi_mvq_inv<TT>(a, tg0, tn, inv);
        xi_mmq_quant<NORM, 4, true>(a, inv, tg0, tn, 0, nb, xq, a.K, ds, XI_MVQ_WARPS * 32);
    }
    __syncthreads();

    const int jl = lane & 7;  // the block of its group that each of this lane's blocks is (below)
    int ct = gw, cc = c_lo, cs = 0;  // compute cursor: chunk cc of tile ct, from stage cs
    float acc[TT][NR];
#pragma unroll
    for (int t = 0; t < TT; t++)
#pragma unroll
        for (int q = 0; q < NR; q++) acc[t][q] = 0.0f;
    float g1 = 0.0f;  // NQ, KS = 1: the first half's total of this lane's row (lane t R + r), from cc == h - 1 on
    for (int c = 0; c < nchunk; c++) {
        issue();
        xi_mvp_wait<S - 1>();
        __syncwarp();
        const uint8_t *src = st + (size_t_)cs * NR * CGB;
        const int cb0 = cc * CG * 8, cb1 = (gpr < (cc + 1) * CG ? gpr : (cc + 1) * CG) * 8;  // the chunk's blocks
        // this lane's blocks of the chunk: b % 32 == lane, in order; block o % 8 of its group is lane % 8 (cb0
        // is a multiple of 8): jl, the same for every block, so the decode's shifts and selections by it are
        // computed once, outside the loop
        for (int b = cb0 + ((lane - cb0) & 31); b < cb1; b += 32) {
            const int o = b - cb0;  // block within the chunk: group o / 8, block o % 8
            const int rot = TYPE == XI_Q6_K ? xk_q6k_rot(src + (o >> 3) * GB) : 0;  // the same in every region (CGB % 16 == 0)
            XiMvqB<TYPE> wb[NR];
#pragma unroll
            for (int q = 0; q < NR; q++) wb[q].dec(src + q * CGB + (o >> 3) * GB, jl, rot);
#pragma unroll
            for (int t = 0; t < TT; t++) {
                if (t < tn) {
                    // the block's two 16-byte halves, the second first where b & 4: the 8 lanes of a
                    // quarter warp (blocks 32 bytes apart) then read 8 distinct bank quads
                    // (PRE: the tokens staged with those halves swapped, so that is the order of the
                    // elements; else put back in order here)
                    const uint4 *xp = reinterpret_cast<const uint4 *>(xq + (size_t_)t * a.K + 32 * b);
                    const int sw = (b >> 2) & 1;
                    const uint4 u0 = xp[sw], u1 = xp[sw ^ 1], x0 = PRE || !sw ? u0 : u1, x1 = PRE || !sw ? u1 : u0;
                    const uint32_t xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
                    const float2 dsv = ds[(size_t_)t * nb + b];
                    int2 xs = {0, 0};
                    if constexpr (TYPE == XI_Q6_K) xs = xi_mvq_xs(xw);  // once for the NR rows
#pragma unroll
                    for (int q = 0; q < NR; q++) acc[t][q] = __fadd_rn(acc[t][q], wb[q].term(xw, dsv.x, dsv.y, xs));
                }
            }
        }
        if constexpr (NQ && KS == 1) {
            if (cc == h - 1) {  // the first half summed: each lane keeps its row's total, the accumulators restart
#pragma unroll
                for (int t = 0; t < TT; t++) {
                    if (t < tn) {
#pragma unroll
                        for (int r = 0; r < R; r++) {
                            float sg = acc[t][r];
#pragma unroll
                            for (int o = 16; o > 0; o >>= 1) sg = __fadd_rn(sg, __shfl_xor_sync(0xffffffffu, sg, o));
                            if (lane == t * R + r) g1 = sg;
                        }
                    }
#pragma unroll
                    for (int q = 0; q < NR; q++) acc[t][q] = 0.0f;
                }
            }
        }
        if (cc == c_hi - 1 && (KS == 1 || kp == 0)) {  // the tile's rows are summed (KS = 2: this part; the other's below): write them
            if constexpr (ROPE) {  // the same sums and scale as below; then pair r / 2 of token t by lane t R / 2 + r / 2
                static_assert(TT * (R / 2) <= 32, "rope: a lane for each pair of a tile's tokens");
                float e0 = 0.0f, e1 = 0.0f;
                int pt = -1, pn = 0;  // this lane's pair: token tg0 + pt, rows pn, pn + 1 of the product
#pragma unroll
                for (int t = 0; t < TT; t++) {
                    float tot[R];
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        float sg = acc[t][r];
#pragma unroll
                        for (int o = 16; o > 0; o >>= 1) sg = __fadd_rn(sg, __shfl_xor_sync(0xffffffffu, sg, o));
                        tot[r] = RMS ? __fmul_rn(sg, inv[t]) : sg;
                        acc[t][r] = 0.0f;
                    }
#pragma unroll
                    for (int r = 0; r < R; r += 2)  // every lane holds every total: each keeps its pair's
                        if (lane == t * (R / 2) + r / 2) { e0 = tot[r]; e1 = tot[r + 1]; pt = t; pn = ct * R + r; }
                }
                // one call a lane (xi_rope_pair_out is out of line: one copy of the f64 angle's code, not
                // one for each pair and token count; the tile's pairs rotate at once, in parallel lanes)
                if (pt >= 0 && pt < tn && pn < a.N)
                    xi_rope_pair_out(o.rope, a.y + (size_t_)(tg0 + pt) * ldy, pn, e0, e1, tg0 + pt);
            } else {  // the sums; then row r of token t by lane t R + r (one store path, not one a row and token count)
                static_assert(TT * R <= 32, "a lane for each row of a tile's tokens");
                float g = 0.0f, u = 0.0f;
                int mt = -1, mr = 0;  // this lane's row: row ct R + mr of token tg0 + mt
#pragma unroll
                for (int t = 0; t < TT; t++) {
                    if (t < tn) {
#pragma unroll
                        for (int r = 0; r < R; r++) {
                            float sg = acc[t][r], su = GLU ? acc[t][NR - R + r] : 0.0f;
#pragma unroll
                            for (int o = 16; o > 0; o >>= 1) {
                                sg = __fadd_rn(sg, __shfl_xor_sync(0xffffffffu, sg, o));
                                if (GLU) su = __fadd_rn(su, __shfl_xor_sync(0xffffffffu, su, o));
                            }
                            if (lane == t * R + r) { g = sg; u = su; mt = t; mr = r; }  // every lane holds every total
                        }
                    }
#pragma unroll
                    for (int q = 0; q < NR; q++) acc[t][q] = 0.0f;
                }
                if constexpr (KS == 2) {  // the second part's totals (warp wt + 8, after its loop), added in that order
                    xi_bar_sync(1 + wt, 64);
                    if (mt >= 0) g = __fadd_rn(g, xi_mvq_kpart()[32 * wt + lane]);
                } else if constexpr (NQ) {
                    g = __fadd_rn(g1, g);  // first + second (KS = 2's order); h == cpt: the first + 0
                }
                const int n = ct * R + mr;
                if (mt >= 0 && n < a.N) {
                    float *yo = a.y + (size_t_)(tg0 + mt) * ldy + n;
                    if (RMS) {  // qmatmul_normq's tokens: the rmsnorm's scale, after the sums
                        g = __fmul_rn(g, inv[mt]);
                        if (GLU) u = __fmul_rn(u, inv[mt]);
                    }
                    const float v = GLU ? g / (1.0f + expf(-g)) * u : a.accumulate ? __fadd_rn(*yo, g) : g;
                    *yo = v;
                    if (NQ) yb[32 * mt + n - bx * (XI_MVQ_WARPS * R)] = v;
                }
            }
        }
        cs = cs + 1 == S ? 0 : cs + 1;
        if (++cc == c_hi) { cc = c_lo; ct += GW; }
        __syncwarp();  // every lane has read stage cs before the next issue() refills it
    }
    xi_mvp_wait<0>();
    if (KS == 2 && kp == 1 && gw < ntile) {  // this part's totals (zeros where it had no chunks) to warp wt, the same lanes
        float g = 0.0f;
#pragma unroll
        for (int t = 0; t < TT; t++) {
            if (t < tn) {
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float sg = acc[t][r];
#pragma unroll
                    for (int off = 16; off > 0; off >>= 1) sg = __fadd_rn(sg, __shfl_xor_sync(0xffffffffu, sg, off));
                    if (lane == t * R + r) g = sg;
                }
            }
        }
        xi_mvq_kpart()[32 * wt + lane] = g;
        xi_bar_arrive(1 + wt, 64);
    }
    if (NQ) {  // the CTA's block (rows 32 bx ..) of each token: warp t quantizes token tg0 + t
        __syncthreads();
        if (wi < tn) {
            const int nbn = a.N >> 5, t = tg0 + wi, n = 32 * bx + lane;
            const float v = yb[32 * wi + lane];
            float2 *pairs = reinterpret_cast<float2 *>(o.xq + (size_t_)a.T * a.N);
            float *ssq = reinterpret_cast<float *>(o.xq + (size_t_)a.T * a.N + (size_t_)a.T * nbn * 8);
            xi_q8_1_warp(__fmul_rn(v, __ldg(o.norm + n)), o.xq + (size_t_)t * a.N + n, pairs + (size_t_)t * nbn + bx);
            float q = __fmul_rn(v, v);
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) q = __fadd_rn(q, __shfl_xor_sync(0xffffffffu, q, off));
            if (lane == 0) ssq[(size_t_)t * nbn + bx] = q;
        }
    }
}

// The kernel body (256 threads, 512 with KS = 2; grid (at most a wave, ceil(T / TT)), xi_mvq_shared(TYPE, K, TT, ...)
// dynamic shared bytes: backends/cuda/_launch.py's mvq_launch). A CTA's tokens: tt = ceil(T /
// gridDim.y) from blockIdx.y tt, its accumulators sized for the next of 1, 2, 4, 8 (tt > 8, a
// launch that breaks the rule, and the shapes the vector body does not take: NaN rows).
template <int TYPE, int R, int S, int CG, bool NORM, bool GLU, bool PRE = false, bool NQ = false, bool RMS = false,
          bool ROPE = false, int KS = 1>
__device__ __forceinline__ void xi_mvq_kernel(const XiMvcArgs &a, const XiMvqOut o = XiMvqOut{nullptr, nullptr}) {
    // the new entries of the matmul kind (normq, rms): at most XI_MVQ_NQ_TT tokens a CTA (mvq_tokens), no
    // code for 8 (qmatmul_DT keeps its own, unchanged)
    constexpr bool SMALL_TT = NQ || (RMS && !GLU);
    extern __shared__ uint4 xi_mvq_dyn[];
    const int bx = xi_mvq_bx(o), gx = xi_mvq_gx(o);
    if (blockIdx.y == 0) xi_prefetch_rows<TYPE, GLU>(a, (long long)bx * XI_MVQ_WARPS * R, XI_MVQ_WARPS * R);
    // xi_grid_begin: on each path before it returns (xi_mvq: after the weights' first stages)
    const int tt = (a.T + (int)gridDim.y - 1) / (int)gridDim.y, tg0 = blockIdx.y * tt;
    if (tg0 >= a.T) {
        xi_grid_begin();
        return;
    }
    const int tn = a.T - tg0 < tt ? a.T - tg0 : tt;
    uint8_t *smem = reinterpret_cast<uint8_t *>(xi_mvq_dyn);
    const bool ok = (a.K & 255) == 0 && (xi_row_bytes_of(TYPE, a.K) & 15) == 0 && (((size_t_)a.w) & 15) == 0 &&
                    (!PRE || (((size_t_)a.x) & 15) == 0) &&
                    (!NQ || ((a.N & 31) == 0 && (long long)gx * XI_MVQ_WARPS * R == a.N)) &&
                    (!SMALL_TT || tt <= XI_MVQ_NQ_TT) && (int)blockDim.x == 32 * XI_MVQ_WARPS * KS;
    if (!ok || tt > XI_MVQ_TT) {  // not a launch of mvq_launch (normq_launch): poison this CTA's rows
        xi_grid_begin();
        for (int t = tg0; t < tg0 + tn; t++)
            for (int n = bx * blockDim.x + threadIdx.x; n < a.N; n += gx * blockDim.x)
                a.y[(size_t_)t * (o.ldy ? o.ldy : a.N) + n] = XI_NAN;
        if (NQ && bx == 0)  // and the next product's tokens: NaN scales
            for (int i = threadIdx.x; i < (tn * a.N) >> 5; i += blockDim.x)
                reinterpret_cast<float2 *>(o.xq + (size_t_)a.T * a.N)[(size_t_)tg0 * (a.N >> 5) + i] = make_float2(XI_NAN, XI_NAN);
        return;
    }
    if (tt == 1) xi_mvq<TYPE, R, S, CG, NORM, GLU, 1, PRE, NQ, RMS, ROPE, KS>(a, smem, tg0, tn, o);
    else if (tt == 2) xi_mvq<TYPE, R, S, CG, NORM, GLU, 2, PRE, NQ, RMS, ROPE, KS>(a, smem, tg0, tn, o);
    else if (tt <= 4) xi_mvq<TYPE, R, S, CG, NORM, GLU, 4, PRE, NQ, RMS, ROPE, KS>(a, smem, tg0, tn, o);
    else if constexpr (!SMALL_TT) xi_mvq<TYPE, R, S, CG, NORM, GLU, 8, PRE, NQ, RMS, ROPE, KS>(a, smem, tg0, tn, o);
    else xi_grid_begin();  // (unreached: ok holds tt to XI_MVQ_NQ_TT there)
}

// (R, S, CG) by type and kind (NORM: rmsnorm_matmul and SwiGLU; else matmul), from the H200 sweep of
// tools/gemv_variants.py --mvq: R = 1 with GLU (2 regions), 2 with NORM (4 for q8_0, the output
// layer), 4 for matmul; S = 2 for the types of 176- and 210-byte groups (8 tokens of K = 4096 then fit
// 100 KB beside them) and for matmul (q8_0: 3), else 3; chunks of CG groups of 256 elements (a
// multiple of 4: 32 blocks, a block a lane; q6_k 8 for whole 16-byte words).
// backends/cuda/_launch.py repeats this (mvq_params); tools/gemv_variants.py --mvq sweeps others.
#define XI_MVQ_R(TYPE, NORM, GLU) ((GLU) ? 1 : !(NORM) || (TYPE) == XI_Q8_0 ? 4 : 2)
#define XI_MVQ_S(TYPE, NORM, GLU) (!(NORM) && !(GLU) ? ((TYPE) == XI_Q8_0 ? 3 : 2) : (TYPE) == XI_Q6_K || (TYPE) == XI_Q5_K || (TYPE) == XI_Q5_0 ? 2 : 3)
#define XI_MVQ_CG(TYPE) ((TYPE) == XI_Q8_0 ? 4 : 8)

// the `_pq` entries of matmul_DT, rmsnorm_matmul_DT and rmsnorm_matmul_swiglu_DT
#define XI_MVQ_ENTRIES(DT, TYPE)                                                                                      \
    extern "C" __global__ void __launch_bounds__(256, 2) matmul_##DT##_pq(XI_MVP_PARAMS) {                            \
        const XiMvcArgs a{w, x, nullptr, y, c.T, c.N, c.K, c.accumulate, 0.0f};                                       \
        xi_mvq_kernel<TYPE, XI_MVQ_R(TYPE, 0, 0), XI_MVQ_S(TYPE, 0, 0), XI_MVQ_CG(TYPE), false, false>(a);                        \
    }
#define XI_MVQ_NORM_ENTRIES(DT, TYPE)                                                                                 \
    extern "C" __global__ void __launch_bounds__(256, 2) rmsnorm_matmul_##DT##_pq(XI_MVP_NORM_PARAMS(xi_rmsnorm_matmul_c)) { \
        const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, c.accumulate, c.eps};                                         \
        xi_mvq_kernel<TYPE, XI_MVQ_R(TYPE, 1, 0), XI_MVQ_S(TYPE, 1, 0), XI_MVQ_CG(TYPE), true, false>(a);                         \
    }
#define XI_MVQ_SWIGLU_ENTRIES(DT, TYPE)                                                                               \
    extern "C" __global__ void __launch_bounds__(256, 2) rmsnorm_matmul_swiglu_##DT##_pq(                             \
        XI_MVP_NORM_PARAMS(xi_rmsnorm_matmul_swiglu_c)) {                                                             \
        const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, 0, c.eps};                                                    \
        xi_mvq_kernel<TYPE, XI_MVQ_R(TYPE, 1, 1), XI_MVQ_S(TYPE, 1, 1), XI_MVQ_CG(TYPE), true, true>(a);                          \
    }

// The qmatmul entries (qmatmul_DT.cu, qmatmul_swiglu_DT.cu): `_pq`'s matmul and SwiGLU bodies on
// tokens quantized beforehand (PRE: xq, the planar q8_1 layout of quantize_q8_1), with the matmul
// kind's (R, S, CG) and tokens a CTA (backends/cuda/_launch.py's qmatmul family). Their rows equal
// `_pq`'s bit for bit on the same tokens: the codes and pairs are the ones `_pq` computes in shared
// memory (quantize_q8_1 and rmsnorm_quantize_q8_1 run its xi_mmq_quant and xi_mvq_inv), and the sums
// are the same code.
#define XI_QMATMUL_ENTRIES(DT, TYPE)                                                                                  \
    extern "C" __global__ void __launch_bounds__(256, 2) qmatmul_##DT(                                                \
        const uint8_t *__restrict__ w, const uint8_t *__restrict__ xq, float *__restrict__ y, xi_qmatmul_c c) {       \
        const XiMvcArgs a{w, reinterpret_cast<const float *>(xq), nullptr, y, c.T, c.N, c.K, c.accumulate, 0.0f};      \
        xi_mvq_kernel<TYPE, XI_MVQ_R(TYPE, 0, 0), XI_MVQ_S(TYPE, 0, 0), XI_MVQ_CG(TYPE), false, false, true>(a);      \
    }
// qmatmul_rms_DT.cu: qmatmul_DT on qmatmul_normq's tokens (RMS: the rmsnorm's scale after the sums)
#define XI_QMATMUL_RMS_ENTRIES(DT, TYPE)                                                                              \
    extern "C" __global__ void __launch_bounds__(256, 2) qmatmul_rms_##DT(                                            \
        const uint8_t *__restrict__ w, const uint8_t *__restrict__ xq, float *__restrict__ y, xi_qmatmul_rms_c c) {   \
        const XiMvcArgs a{w, reinterpret_cast<const float *>(xq), nullptr, y, c.T, c.N, c.K, c.accumulate, c.eps};     \
        xi_mvq_kernel<TYPE, XI_MVQ_R(TYPE, 0, 0), XI_MVQ_S(TYPE, 0, 0), XI_MVQ_CG(TYPE), false, false, true, false,   \
                      true>(a);                                                                                        \
    }
#define XI_QMATMUL_SWIGLU_ENTRIES(DT, TYPE)                                                                           \
    extern "C" __global__ void __launch_bounds__(256, 2) qmatmul_swiglu_##DT(                                         \
        const uint8_t *__restrict__ w, const uint8_t *__restrict__ xq, float *__restrict__ y, xi_qmatmul_swiglu_c c) { \
        const XiMvcArgs a{w, reinterpret_cast<const float *>(xq), nullptr, y, c.T, c.N, c.K, 0, 0.0f};                 \
        xi_mvq_kernel<TYPE, XI_MVQ_R(TYPE, 1, 1), XI_MVQ_S(TYPE, 1, 1), XI_MVQ_CG(TYPE), false, true, true>(a);       \
    }
// qmatmul_rms_swiglu_DT.cu: qmatmul_swiglu_DT on qmatmul_normq's tokens (RMS)
#define XI_QMATMUL_RMS_SWIGLU_ENTRIES(DT, TYPE)                                                                       \
    extern "C" __global__ void __launch_bounds__(256, 2) qmatmul_rms_swiglu_##DT(                                     \
        const uint8_t *__restrict__ w, const uint8_t *__restrict__ xq, float *__restrict__ y,                          \
        xi_qmatmul_rms_swiglu_c c) {                                                                                   \
        const XiMvcArgs a{w, reinterpret_cast<const float *>(xq), nullptr, y, c.T, c.N, c.K, 0, c.eps};                \
        xi_mvq_kernel<TYPE, XI_MVQ_R(TYPE, 1, 1), XI_MVQ_S(TYPE, 1, 1), XI_MVQ_CG(TYPE), false, true, true, false,    \
                      true>(a);                                                                                        \
    }
// qmatmul_normq_DT.cu: qmatmul_DT (rms = 0; K's halves summed apart, below), then the next product's tokens from the rows it wrote
// (XiMvqOut: xqn, the rmsnorm of y by norm quantized with block sums of squares, for a qmatmul entry
// with rms = 1); one round of CTAs (the launch rule, _launch.py normq_fits; else NaN rows and scales).
// `_k2`: the same with 16 warps, two a tile, each over half of K's chunks (KS = 2, xi_mvq_kpart):
// each warp's chain of chunks halves and an SM runs twice the warps (N / 32 CTAs run one an SM).
// Both entries give the same bits (K's halves summed apart, then added: tests/_mmq_model.py
// mvq_matmul's split); backends/cuda/_launch.py normq_launch picks one by T (XINFER_NORMQ_K2=0: never `_k2`).
#define XI_QMATMUL_NORMQ_ENTRIES(DT, TYPE)                                                                            \
    extern "C" __global__ void __launch_bounds__(256, 2) qmatmul_normq_##DT(                                          \
        const uint8_t *__restrict__ w, const uint8_t *__restrict__ xq, float *__restrict__ y,                          \
        const float *__restrict__ norm, uint8_t *__restrict__ xqn, xi_qmatmul_normq_c c) {                                  \
        const XiMvcArgs a{w, reinterpret_cast<const float *>(xq), nullptr, y, c.T, c.N, c.K, c.accumulate, 0.0f};      \
        xi_mvq_kernel<TYPE, XI_MVQ_R(TYPE, 0, 0), XI_MVQ_S(TYPE, 0, 0), XI_MVQ_CG(TYPE), false, false, true, true>(   \
            a, XiMvqOut{norm, xqn});                                                                                   \
    }                                                                                                                  \
    extern "C" __global__ void __launch_bounds__(512, 1) qmatmul_normq_##DT##_k2(                                     \
        const uint8_t *__restrict__ w, const uint8_t *__restrict__ xq, float *__restrict__ y,                          \
        const float *__restrict__ norm, uint8_t *__restrict__ xqn, xi_qmatmul_normq_c c) {                             \
        const XiMvcArgs a{w, reinterpret_cast<const float *>(xq), nullptr, y, c.T, c.N, c.K, c.accumulate, 0.0f};      \
        xi_mvq_kernel<TYPE, XI_MVQ_R(TYPE, 0, 0), XI_MVQ_S(TYPE, 0, 0), XI_MVQ_CG(TYPE), false, false, true, true,     \
                      false, false, 2>(a, XiMvqOut{norm, xqn});                                                        \
    }

// qmatmul_pair_A_B.cu / qmatmul_rms_pair_A_B.cu: two products on the same tokens in one launch (a layer's
// q, k, v in two types, as llama.cpp's Q4_K_M mix gives them: Q4_K q and k, Q6_K v on some layers),
// w (N, K) of type A into y's columns [0, N) and w2 (N2, K) of type B into [N, N + N2), y (T, N + N2):
// the first CTAs run the first product as qmatmul_A (qmatmul_rms_A with RMS) would over that many CTAs,
// the rest the second (with XI_MVQ_PAIR_R2 rows a warp), each as many as a tile a warp needs where the grid
// holds both, else split in proportion to the weights' bytes (the launch, _launch.py pair_launch,
// gives the grid; any split gives the same bits: a row's sums do not depend on which CTAs run the
// others, nor on how many there are). So each row is the single-type launch's, bit for bit, with
// one launch's tail and wait instead of two.
// The second product's rows a warp: 2, not the matmul kind's 4, so that its stages (q6_k: 8 warps x 2
// stages x 2 rows x 1,680 bytes) stay under the first's and two CTAs still fit an SM (4 rows: 107 KB of
// q6_k stages, one CTA an SM for both products). backends/cuda/_launch.py PAIR_R2 repeats it.
#define XI_MVQ_PAIR_R2 2
template <int TA, int TB, bool RMS, bool ROPE = false>
__device__ __forceinline__ void xi_qmatmul_pair(const uint8_t *w, const uint8_t *w2, const uint8_t *xq, float *y, int T,
                                                int N, int N2, int K, float eps, XiRope rope = {}) {
    const long long b1 = (long long)N * xi_row_bytes_of(TA, K), b2 = (long long)N2 * xi_row_bytes_of(TB, K);
    const int gx = (int)gridDim.x;
    // CTAs that give each warp one tile (pair_launch's grid is their sum where both fit a wave): then
    // each product its own, so that no warp of the second takes two tiles while the first has CTAs to
    // spare (the Q4_K_M 8B's qkv: 160 + 64 CTAs, which the bytes' split made 173 + 51, 408 warps for
    // the v rows' 512 tiles); else in proportion to the bytes
    const int n1 = ((N + XI_MVQ_R(TA, 0, 0) - 1) / XI_MVQ_R(TA, 0, 0) + XI_MVQ_WARPS - 1) / XI_MVQ_WARPS;
    const int n2 = ((N2 + XI_MVQ_PAIR_R2 - 1) / XI_MVQ_PAIR_R2 + XI_MVQ_WARPS - 1) / XI_MVQ_WARPS;
    int g1 = gx >= n1 + n2 ? n1 : (int)(((long long)gx * b1 + (b1 + b2) / 2) / (b1 + b2));
    g1 = g1 < 1 ? 1 : g1 > gx - 1 ? gx - 1 : g1;
    const float *x = reinterpret_cast<const float *>(xq);
    if ((int)blockIdx.x < g1) {
        const XiMvcArgs a{w, x, nullptr, y, T, N, K, 0, eps};
        xi_mvq_kernel<TA, XI_MVQ_R(TA, 0, 0), XI_MVQ_S(TA, 0, 0), XI_MVQ_CG(TA), false, false, true, false, RMS, ROPE>(
            a, XiMvqOut{nullptr, nullptr, (int)blockIdx.x, g1, N + N2, rope});
    } else {
        const XiMvcArgs a{w2, x, nullptr, y + N, T, N2, K, 0, eps};
        rope.col0 = N;  // the second product's columns start at N of the qkv row
        xi_mvq_kernel<TB, XI_MVQ_PAIR_R2, XI_MVQ_S(TB, 0, 0), XI_MVQ_CG(TB), false, false, true, false, RMS, ROPE>(
            a, XiMvqOut{nullptr, nullptr, (int)blockIdx.x - g1, gx - g1, N + N2, rope});
    }
}
#define XI_QMATMUL_PAIR_ENTRIES(A, B, TA, TB)                                                                         \
    extern "C" __global__ void __launch_bounds__(256, 2) qmatmul_pair_##A##_##B(                                      \
        const uint8_t *__restrict__ w, const uint8_t *__restrict__ w2, const uint8_t *__restrict__ xq,                 \
        float *__restrict__ y, xi_qmatmul_pair_c c) {                                                                  \
        xi_qmatmul_pair<TA, TB, false>(w, w2, xq, y, c.T, c.N, c.N2, c.K, 0.0f);                                       \
    }
#define XI_QMATMUL_RMS_PAIR_ENTRIES(A, B, TA, TB)                                                                     \
    extern "C" __global__ void __launch_bounds__(256, 2) qmatmul_rms_pair_##A##_##B(                                  \
        const uint8_t *__restrict__ w, const uint8_t *__restrict__ w2, const uint8_t *__restrict__ xq,                 \
        float *__restrict__ y, xi_qmatmul_rms_pair_c c) {                                                              \
        xi_qmatmul_pair<TA, TB, true>(w, w2, xq, y, c.T, c.N, c.N2, c.K, c.eps);                                       \
    }

// The rope entries (qmatmul_rope_DT.cu, qmatmul_rms_rope_DT.cu, qmatmul_rope_pair_A_B.cu,
// qmatmul_rms_rope_pair_A_B.cu): a layer's qkv product as qmatmul_DT / qmatmul_rms_DT / the pairs
// compute it, then rope_kv_store's rotation and cache stores in the epilogue (XiRope), so no
// rope_kv_store launch follows; accumulate 0.
#define XI_ROPE_PARAMS                                                                                           \
    const int32_t *__restrict__ pos, const int32_t *__restrict__ row, void *__restrict__ k_cache,               \
        void *__restrict__ v_cache, const float *__restrict__ ff
#define XI_ROPE_ARGS(C) XiRope{pos, row, k_cache, v_cache, ff, C.n_head, C.n_kv, C.head_dim, C.ctx, C.kv16, 0, C.theta}
#define XI_QMATMUL_ROPE_ENTRIES(DT, TYPE)                                                                             \
    extern "C" __global__ void __launch_bounds__(256, 2) qmatmul_rope_##DT(                                           \
        const uint8_t *__restrict__ w, const uint8_t *__restrict__ xq, float *__restrict__ y, XI_ROPE_PARAMS,         \
        xi_qmatmul_rope_c c) {                                                                                         \
        const XiMvcArgs a{w, reinterpret_cast<const float *>(xq), nullptr, y, c.T, c.N, c.K, 0, 0.0f};                 \
        xi_mvq_kernel<TYPE, XI_MVQ_R(TYPE, 0, 0), XI_MVQ_S(TYPE, 0, 0), XI_MVQ_CG(TYPE), false, false, true, false,   \
                      false, true>(a, XiMvqOut{nullptr, nullptr, 0, 0, 0, XI_ROPE_ARGS(c)});                           \
    }
#define XI_QMATMUL_RMS_ROPE_ENTRIES(DT, TYPE)                                                                         \
    extern "C" __global__ void __launch_bounds__(256, 2) qmatmul_rms_rope_##DT(                                       \
        const uint8_t *__restrict__ w, const uint8_t *__restrict__ xq, float *__restrict__ y, XI_ROPE_PARAMS,         \
        xi_qmatmul_rms_rope_c c) {                                                                                     \
        const XiMvcArgs a{w, reinterpret_cast<const float *>(xq), nullptr, y, c.T, c.N, c.K, 0, c.eps};                \
        xi_mvq_kernel<TYPE, XI_MVQ_R(TYPE, 0, 0), XI_MVQ_S(TYPE, 0, 0), XI_MVQ_CG(TYPE), false, false, true, false,   \
                      true, true>(a, XiMvqOut{nullptr, nullptr, 0, 0, 0, XI_ROPE_ARGS(c)});                            \
    }
#define XI_QMATMUL_ROPE_PAIR_ENTRIES(A, B, TA, TB)                                                                    \
    extern "C" __global__ void __launch_bounds__(256, 2) qmatmul_rope_pair_##A##_##B(                                 \
        const uint8_t *__restrict__ w, const uint8_t *__restrict__ w2, const uint8_t *__restrict__ xq,                 \
        float *__restrict__ y, XI_ROPE_PARAMS, xi_qmatmul_rope_pair_c c) {                                             \
        xi_qmatmul_pair<TA, TB, false, true>(w, w2, xq, y, c.T, c.N, c.N2, c.K, 0.0f, XI_ROPE_ARGS(c));               \
    }
#define XI_QMATMUL_RMS_ROPE_PAIR_ENTRIES(A, B, TA, TB)                                                                \
    extern "C" __global__ void __launch_bounds__(256, 2) qmatmul_rms_rope_pair_##A##_##B(                             \
        const uint8_t *__restrict__ w, const uint8_t *__restrict__ w2, const uint8_t *__restrict__ xq,                 \
        float *__restrict__ y, XI_ROPE_PARAMS, xi_qmatmul_rms_rope_pair_c c) {                                         \
        xi_qmatmul_pair<TA, TB, true, true>(w, w2, xq, y, c.T, c.N, c.N2, c.K, c.eps, XI_ROPE_ARGS(c));               \
    }
