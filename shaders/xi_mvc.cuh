// The staged-rows matrix kernel behind matmul_DT, rmsnorm_matmul_DT and rmsnorm_matmul_swiglu_DT:
// y (T, N) from w (N, K) DT rows and x (T, K) f32 tokens, with an optional rmsnorm of each token on
// the way in (NORM: h = (x * inv_t) * norm, inv_t = 1 / sqrt(mean(x_t^2) + eps), as rmsnorm.cu) and
// an optional SwiGLU on the way out (GLU: w holds 2N rows, gate rows [0, N) and up rows [N, 2N);
// y = silu(gate . h) * (up . h), as swiglu.cu).
//
// A CTA of 256 threads owns RB consecutive output rows and a group of up to XI_MVC_TG tokens
// (grid.y). It issues all its weight bytes at once as aligned 16-byte loads (one memory round trip,
// each byte read once) and parks them in shared memory. Each (row, token) dot product is then one
// warp's: lane l takes 32-element blocks l/4, l/4 + 8, ... (8 of the block's elements: 4 lanes a
// block) and a warp sum ends it; with NORM the warp first sums its token's squares (float4s l,
// l + 32, ..., then a warp sum). The warps split the tokens first (TS = 1, 2, 4 or 8 token slots)
// and the rows next (warp w: token w % TS, rows w / TS, w / TS + 8 / TS, ...), reading a token's x
// once for all their rows. So the order of every sum depends on K alone: a (row, token) result is
// bit-identical whatever T, RB or the CTA it runs in, and a batched decode step equals the same
// rows run one token at a time -- where a weight row fits the stage (xi_mvc_rows > 0 at T > 1:
// row bytes <= 32736, half that with GLU; e.g. q4_1 K <= 52377, f16 K <= 16368). Longer rows run
// other kernels at T > 1 (xi_quant.cuh's xi_matmul, or xi_mvc_scalar), which sum in other orders.
//
// The formats of xi_kquant.cuh (q5_0, q5_1, iq4_nl, the K-quants, iq4_xs, bf16) run here too, through
// their XiMv (a lane's 8 weights of a 32-element group, dequantized as gguf rounds them), and at
// T == 1 they run the staged kernel as well (xi_mvc_staged1): their lanes' loads are small and
// scattered (4-10 words a group), which the 16-byte staging loads turn into one coalesced pass.
#pragma once
#include "xi_kquant.cuh"

#define XI_MVC_BYTES 32768   // staged weight bytes a CTA (8 16-byte loads a thread)
#define XI_MVC_SPREAD 264    // 1 < T <= 8: rows spread so ~2 CTAs per SM (132 SMs) have work
#define XI_MVC_TG 8          // tokens a CTA (grid.y = ceil(T / XI_MVC_TG)): one a warp

// Whether T == 1 runs the staged kernel (where a row fits its stage, xi_mvc_rows > 0) rather than
// xi_mv1: the types of xi_kquant.cuh. backends/cuda/_launch.py repeats this rule (STAGED1_TYPES).
__host__ __device__ constexpr bool xi_mvc_staged1(int type) { return type >= XI_Q5_0; }

__host__ __device__ constexpr long long xi_row_bytes_of(int type, int k) {
    return type == XI_F32 ? 4LL * k : type == XI_F16 ? 2LL * k
         : type >= XI_Q5_0 ? (long long)(k / xk_block_elems(type)) * xk_block_bytes(type)
         : (long long)(k / 32) * xi_block_bytes(type);
}


// Rows a CTA owns: the largest of 32, 16, 8, 4, 2, 1 under the stage (half of it each for the two
// GLU regions) and under the want: T == 1: 8 (a row a warp), 16 when N >= 16384 (32 for the
// xi_mvc_staged1 types, whose T == 1 runs here); 1 < T <= 8: N spread over ~2 CTAs per SM; T > 8: 8;
// at most 16, and 8 for GLU and for the xi_mvc_staged1 types at T > 1 (their wider decode spills at
// 16 accumulators a warp; at T == 1 a warp holds RB / 8 of them). 0: one row does not fit the stage
// (matmul_DT then runs its older kernels). backends/cuda/_launch.py repeats this rule for the grid.
__host__ __device__ inline int xi_mvc_rows(int type, int n, int k, int t, int glu) {
    const long long rb = xi_row_bytes_of(type, k), fit = ((XI_MVC_BYTES >> glu) - 32) / (rb > 0 ? rb : 1);
    const bool s1 = xi_mvc_staged1(type);
    const long long want = t == 1 ? (n >= 16384 ? (s1 ? 32 : 16) : 8) : t <= 8 ? (n + XI_MVC_SPREAD - 1) / XI_MVC_SPREAD : 8;
    const long long cap = glu ? 8 : s1 ? (t == 1 ? 32 : 8) : 16;  // registers (xi_mvc's accumulators)
    long long r = want < fit ? want : fit;
    if (r > cap) r = cap;
    return r >= 32 ? 32 : r >= 16 ? 16 : r >= 8 ? 8 : r >= 4 ? 4 : r >= 2 ? 2 : (int)r;
}

// The block math every path of this file shares, so their sums agree bit for bit: a lane's 8
// elements of block b (lo: 4s..4s+3, hi: 16+4s..16+4s+3) of x, scaled by the token's rmsnorm
// (h = (x * inv) * norm), their sum (q4_1's m term), and the block's part of the dot product.
__device__ __forceinline__ float4 xi_blk_norm(float4 v, float inv, float4 g) {
    return make_float4(v.x * inv * g.x, v.y * inv * g.y, v.z * inv * g.z, v.w * inv * g.w);
}
__device__ __forceinline__ float xi_blk_sum(float4 lo, float4 hi) {
    return ((lo.x + lo.y) + (lo.z + lo.w)) + ((hi.x + hi.y) + (hi.z + hi.w));
}
template <int TYPE>
__device__ __forceinline__ float xi_blk_part(const float q[8], float d, float m, float4 lo, float4 hi, float xs) {
    const float dot = q[0] * lo.x + q[1] * lo.y + q[2] * lo.z + q[3] * lo.w + q[4] * hi.x + q[5] * hi.y + q[6] * hi.z + q[7] * hi.w;
    float part = d * dot;
    if (TYPE == XI_Q4_1) part += m * xs;
    return part;
}
// A token's rmsnorm scale 1 / sqrt(mean(x^2) + eps): float4s lane, lane + 32, ..., then a warp sum.
__device__ __forceinline__ float xi_tok_inv(const float *xt, int K, float eps) {
    const int lane = threadIdx.x & 31;
    const float4 *xr = reinterpret_cast<const float4 *>(xt);
    float ss = 0.0f;
#pragma unroll 4
    for (int i = lane; i < (K >> 2); i += 32) {
        const float4 u = __ldg(xr + i);
        ss += u.x * u.x + u.y * u.y + u.z * u.z + u.w * u.w;
    }
    return 1.0f / sqrtf(xi_warp_sum(ss) / (float)K + eps);
}

struct XiMvcArgs {
    const uint8_t *w;
    const float *x, *norm;
    float *y;
    int T, N, K, accumulate;
    float eps;
};

// Any K, any alignment: a warp per (row, token), element by element (the rare unaligned case).
template <int TYPE, bool NORM, bool GLU>
__device__ __forceinline__ void xi_mvc_scalar(const XiMvcArgs &a, int n0, int rows, int tg0, int tn) {
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
    const size_t_ rb = XiQ<TYPE>::row_bytes(a.K);
    for (int p = wi; p < rows * tn; p += 8) {
        const int r = p % rows, t = tg0 + p / rows;
        const float *xt = a.x + (size_t_)t * a.K;
        float inv = 1.0f;
        if (NORM) {
            float ss = 0.0f;
            for (int e = lane; e < a.K; e += 32) ss += xt[e] * xt[e];
            inv = 1.0f / sqrtf(xi_warp_sum(ss) / (float)a.K + a.eps);
        }
        const uint8_t *rg = a.w + (size_t_)(n0 + r) * rb, *ru = a.w + (size_t_)(a.N + n0 + r) * rb;
        float sg = 0.0f, su = 0.0f;
        for (int e = lane; e < a.K; e += 32) {
            const float h = NORM ? xt[e] * inv * a.norm[e] : xt[e];
            sg += XiQ<TYPE>::elem(rg, e) * h;
            if (GLU) su += XiQ<TYPE>::elem(ru, e) * h;
        }
        sg = xi_warp_sum(sg);
        if (GLU) su = xi_warp_sum(su);
        if (lane == 0) {
            float *yo = a.y + (size_t_)t * a.N + n0 + r;
            *yo = GLU ? sg / (1.0f + expf(-sg)) * su : (a.accumulate ? *yo + sg : sg);
        }
    }
}

// ONE: T == 1 only (one token slot: warp w takes rows w, w + 8, ...), RB / 8 accumulators a warp
// instead of RB, so RB may be 32 (xi_mvc_staged1 types; the same sums in the same order).
template <int TYPE, int RB, bool NORM, bool GLU, bool ONE = false>
__device__ __forceinline__ void xi_mvc(const XiMvcArgs &a, uint4 *stage) {
    typedef XiMv<TYPE> M;
    constexpr int NL = XI_MVC_BYTES / 4096, NR = GLU ? 2 : 1, RW = ONE ? (RB + 7) / 8 : RB;
    const int tid = threadIdx.x, lane = tid & 31, wi = tid >> 5, s = lane & 3, bl = lane >> 2, nb = a.K >> 5;
    const int n0 = blockIdx.x * RB, tg0 = blockIdx.y * XI_MVC_TG;
    const int rows = a.N - n0 < RB ? a.N - n0 : RB, tn = a.T - tg0 < XI_MVC_TG ? a.T - tg0 : XI_MVC_TG;
    const int ts = tn <= 1 ? 1 : tn <= 2 ? 2 : tn <= 4 ? 4 : 8, rs = 8 / ts, tw = wi % ts, rp = wi / ts;
    const size_t_ rb = XiQ<TYPE>::row_bytes(a.K);
    const uint8_t *a0[NR];
    int off[NR], n16[NR];
#pragma unroll
    for (int q = 0; q < NR; q++) {
        const uint8_t *p = a.w + (size_t_)(n0 + q * a.N) * rb;
        a0[q] = reinterpret_cast<const uint8_t *>(((size_t_)p) & ~(size_t_)15);
        off[q] = (int)(p - a0[q]);
        n16[q] = (int)((off[q] + (size_t_)rows * rb + 15) >> 4);
    }
    const int nt = GLU ? n16[0] + n16[NR - 1] : n16[0];
    {
        uint4 v[NL];
#pragma unroll
        for (int i = 0; i < NL; i++) {
            const int idx = tid + 256 * i;
            if (idx < nt) {
                const uint8_t *src = (!GLU || idx < n16[0]) ? a0[0] + 16 * (size_t_)idx : a0[NR - 1] + 16 * (size_t_)(idx - n16[0]);
                v[i] = xi_ldw128<2>(src);
            }
        }
#pragma unroll
        for (int i = 0; i < NL; i++)
            if (tid + 256 * i < nt) stage[tid + 256 * i] = v[i];
    }
    const bool active = tw < tn;
    const float *xt = a.x + (size_t_)(tg0 + tw) * a.K;
    float inv = 1.0f;
    if (NORM && active) inv = xi_tok_inv(xt, a.K, a.eps);  // this warp's token
    __syncthreads();
    if (!active || rp >= rows) return;  // no token, or no row, for this warp
    const uint8_t *base[NR];
    base[0] = reinterpret_cast<const uint8_t *>(stage) + off[0];
    if (GLU) base[NR - 1] = reinterpret_cast<const uint8_t *>(stage) + 16 * n16[0] + off[NR - 1];
    float acc[NR][RW];  // acc[q][j]: row j (ONE: row rp + 8 j)
#pragma unroll
    for (int q = 0; q < NR; q++)
#pragma unroll
        for (int j = 0; j < RW; j++) acc[q][j] = 0.0f;
#pragma unroll 2
    for (int b = bl; b < nb; b += 8) {
        float4 lo = __ldg(reinterpret_cast<const float4 *>(xt + b * 32 + 4 * s));
        float4 hi = __ldg(reinterpret_cast<const float4 *>(xt + b * 32 + 16 + 4 * s));
        if (NORM) {
            const float4 glo = __ldg(reinterpret_cast<const float4 *>(a.norm + b * 32 + 4 * s));
            const float4 ghi = __ldg(reinterpret_cast<const float4 *>(a.norm + b * 32 + 16 + 4 * s));
            lo = xi_blk_norm(lo, inv, glo);
            hi = xi_blk_norm(hi, inv, ghi);
        }
        const float xs = TYPE == XI_Q4_1 ? xi_blk_sum(lo, hi) : 0.0f;
#pragma unroll
        for (int q = 0; q < NR; q++)
#pragma unroll
            for (int j = 0; j < RW; j++) {
                const int r = ONE ? rp + 8 * j : j;
                if (r < rows && (ONE || r % rs == rp)) {
                    uint32_t rw[M::NW];
                    M::template raw<3>(base[q] + (size_t_)r * rb, b, s, rw);
                    float qv[8], d, m;
                    M::dec(rw, qv, d, m);
                    acc[q][j] += xi_blk_part<TYPE>(qv, d, m, lo, hi, xs);
                }
            }
    }
#pragma unroll
    for (int j = 0; j < RW; j++) {
        const int r = ONE ? rp + 8 * j : j;
        if (r < rows && (ONE || r % rs == rp)) {
            const float sg = xi_warp_sum(acc[0][j]);
            const float su = GLU ? xi_warp_sum(acc[NR - 1][j]) : 0.0f;
            if (lane == 0) {
                float *yo = a.y + (size_t_)(tg0 + tw) * a.N + n0 + r;
                if (GLU) *yo = sg / (1.0f + expf(-sg)) * su;
                else *yo = a.accumulate ? *yo + sg : sg;
            }
        }
    }
}

// T == 1: a warp per R output rows (8 warps a CTA), no staging: U steps of 8 blocks have their raw
// weight loads issued before any is decoded (xi_quant.cuh's xi_matvec_u, which this extends with
// NORM and GLU). Lane l sums blocks l/4, l/4 + 8, ... in that order with the same expressions as
// xi_mvc, and the rmsnorm scale likewise, so its results are bit-identical to xi_mvc's at T > 1.
// U (0: the default below, which keeps the raw words of a step within 32 registers a lane).
template <int TYPE, int R, bool NORM, bool GLU, int U0 = 0>
__device__ __forceinline__ void xi_mv1(const XiMvcArgs &a, int n0) {
    typedef XiMv<TYPE> M;
    constexpr int U = U0 > 0 ? U0 : (TYPE == XI_F32 || TYPE == XI_F16 || R >= 4) ? 2 : 4, NR = GLU ? 2 : 1;
    const int lane = threadIdx.x & 31, s = lane & 3, bl = lane >> 2, nb = a.K >> 5;
    const size_t_ rb = XiQ<TYPE>::row_bytes(a.K);
    const uint8_t *rows[NR][R];
    float acc[NR][R];
#pragma unroll
    for (int q = 0; q < NR; q++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            rows[q][r] = a.w + (size_t_)(q * a.N + (n0 + r < a.N ? n0 + r : a.N - 1)) * rb;
            acc[q][r] = 0.0f;
        }
    float inv = 1.0f;
    for (int b0 = 0; b0 < nb; b0 += 8 * U) {
        uint32_t raw[U][NR][R][M::NW];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int b = b0 + 8 * u + bl;
#pragma unroll
            for (int q = 0; q < NR; q++)
#pragma unroll
                for (int r = 0; r < R; r++) {
                    if (b < nb) M::template raw<0>(rows[q][r], b, s, raw[u][q][r]);
                    else {
#pragma unroll
                        for (int i = 0; i < M::NW; i++) raw[u][q][r][i] = 0;
                    }
                }
        }
        if (NORM && b0 == 0) inv = xi_tok_inv(a.x, a.K, a.eps);  // read while the first weights are in flight
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int b = b0 + 8 * u + bl;
            if (b < nb) {
                float4 lo = __ldg(reinterpret_cast<const float4 *>(a.x + b * 32 + 4 * s));
                float4 hi = __ldg(reinterpret_cast<const float4 *>(a.x + b * 32 + 16 + 4 * s));
                if (NORM) {
                    const float4 glo = __ldg(reinterpret_cast<const float4 *>(a.norm + b * 32 + 4 * s));
                    const float4 ghi = __ldg(reinterpret_cast<const float4 *>(a.norm + b * 32 + 16 + 4 * s));
                    lo = xi_blk_norm(lo, inv, glo);
                    hi = xi_blk_norm(hi, inv, ghi);
                }
                const float xs = TYPE == XI_Q4_1 ? xi_blk_sum(lo, hi) : 0.0f;
#pragma unroll
                for (int q = 0; q < NR; q++)
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        float qv[8], d, m;
                        M::dec(raw[u][q][r], qv, d, m);
                        acc[q][r] += xi_blk_part<TYPE>(qv, d, m, lo, hi, xs);
                    }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float sg = xi_warp_sum(acc[0][r]);
        const float su = GLU ? xi_warp_sum(acc[NR - 1][r]) : 0.0f;
        if (lane == 0 && n0 + r < a.N) {
            float *yo = a.y + n0 + r;
            if (GLU) *yo = sg / (1.0f + expf(-sg)) * su;
            else *yo = a.accumulate ? *yo + sg : sg;
        }
    }
}

// Rows [p0, p0 + cnt) of the weights (and of the up half with GLU) into L2 (xi_prefetch_l2), while
// the previous kernel finishes; rows past N are left out.
template <int TYPE, bool GLU>
__device__ __forceinline__ void xi_prefetch_rows(const XiMvcArgs &a, long long p0, long long cnt) {
    if (p0 >= a.N) return;
    const long long rb = (long long)XiQ<TYPE>::row_bytes(a.K), n = a.N - p0 < cnt ? a.N - p0 : cnt;
    xi_prefetch_l2(a.w + p0 * rb, n * rb);
    if (GLU) xi_prefetch_l2(a.w + (a.N + p0) * rb, n * rb);
}

// The T == 1 body of a block of 8 warps with R rows a warp: its 8 R rows c0 = 8 R blockIdx.x .. into
// L2, the wait for the previous kernel, then xi_mv1 (xi_mvc_scalar where K or an address is not
// aligned). Grid (ceil(N / (8 R)), 1).
template <int TYPE, int R, bool NORM, bool GLU, int U = 0>
__device__ __forceinline__ void xi_mv1_block(const XiMvcArgs &a) {
    const int c0 = blockIdx.x * 8 * R;
    if (blockIdx.y == 0) xi_prefetch_rows<TYPE, GLU>(a, c0, 8 * R);
    xi_grid_begin();
    if (c0 >= a.N || blockIdx.y > 0) return;
    const bool vec = (a.K & 31) == 0 && (((size_t_)a.x) & 15) == 0 && (!NORM || (((size_t_)a.norm) & 15) == 0) &&
                     (((size_t_)a.w) & (XiQ<TYPE>::ALIGN - 1)) == 0;
    if (!vec) {
        xi_mvc_scalar<TYPE, NORM, GLU>(a, c0, a.N - c0 < 8 * R ? a.N - c0 : 8 * R, 0, 1);
        return;
    }
    const int n0 = c0 + (threadIdx.x >> 5) * R;
    if (n0 < a.N) xi_mv1<TYPE, R, NORM, GLU, U>(a, n0);
}

// T == 1 rows a warp (R of xi_mv1_block): 2 for f32/f16 and for N >= 16384 (not with GLU, nor for the
// xi_mvc_staged1 types, which run xi_mv1 only where a row does not fit the stage), else 1.
// backends/cuda/_launch.py repeats this rule for the grid.
__host__ __device__ constexpr int xi_mv1_rows(int type, int n, int glu) {
    return glu || xi_mvc_staged1(type) ? 1 : (type == XI_F32 || type == XI_F16 || n >= 16384) ? 2 : 1;
}

// The kernel body, blocks of 256 threads. T == 1: xi_mv1_block with xi_mv1_rows rows a warp (for the
// xi_mvc_staged1 types only where a row does not fit the stage; else as T > 1). T > 1:
// grid (ceil(N / rows), ceil(T / XI_MVC_TG)) with rows = xi_mvc_rows(TYPE, N, K, T, GLU), or N rows
// when that is 0 (fused kernels only; matmul_DT runs its older kernels then).
template <int TYPE, bool NORM, bool GLU>
__device__ __forceinline__ void xi_mvc_kernel(const XiMvcArgs &a) {
    __shared__ uint4 stage[XI_MVC_BYTES / 16];
    if (a.T == 1 && !(xi_mvc_staged1(TYPE) && xi_mvc_rows(TYPE, a.N, a.K, 1, GLU) > 0)) {
        if constexpr (xi_mvc_staged1(TYPE)) xi_mv1_block<TYPE, 1, NORM, GLU, 1>(a);  // a row past the stage: rare
        else if (!GLU && xi_mv1_rows(TYPE, a.N, GLU) == 2) xi_mv1_block<TYPE, GLU ? 1 : 2, NORM, GLU>(a);
        else xi_mv1_block<TYPE, 1, NORM, GLU>(a);
        return;
    }
    const int rows = xi_mvc_rows(TYPE, a.N, a.K, a.T, GLU);
    const int rb = rows > 0 ? rows : 1, n0 = blockIdx.x * rb, tg0 = blockIdx.y * XI_MVC_TG;
    if (blockIdx.y == 0) xi_prefetch_rows<TYPE, GLU>(a, n0, rb);
    xi_grid_begin();
    if (n0 >= a.N || tg0 >= a.T) return;
    const bool vec = rows > 0 && (a.K & 31) == 0 && (((size_t_)a.x) & 15) == 0 && (!NORM || (((size_t_)a.norm) & 15) == 0) &&
                     (((size_t_)a.w) & (XiQ<TYPE>::ALIGN - 1)) == 0;
    if (!vec) {
        xi_mvc_scalar<TYPE, NORM, GLU>(a, n0, a.N - n0 < rb ? a.N - n0 : rb, tg0, a.T - tg0 < XI_MVC_TG ? a.T - tg0 : XI_MVC_TG);
        return;
    }
    if constexpr (xi_mvc_staged1(TYPE)) {
        if (a.T == 1) {  // one token: a warp's rows w, w + 8, ...
            switch (rows) {
                case 32: if constexpr (!GLU) { xi_mvc<TYPE, 32, NORM, GLU, true>(a, stage); break; }
                case 16: if constexpr (!GLU) { xi_mvc<TYPE, 16, NORM, GLU, true>(a, stage); break; }
                case 8: xi_mvc<TYPE, 8, NORM, GLU, true>(a, stage); break;
                case 4: xi_mvc<TYPE, 4, NORM, GLU, true>(a, stage); break;
                case 2: xi_mvc<TYPE, 2, NORM, GLU, true>(a, stage); break;
                default: xi_mvc<TYPE, 1, NORM, GLU, true>(a, stage); break;
            }
            return;
        }
    }
    switch (rows) {
        case 16: if constexpr (!GLU && !xi_mvc_staged1(TYPE)) { xi_mvc<TYPE, 16, NORM, GLU>(a, stage); break; }
        case 8: xi_mvc<TYPE, 8, NORM, GLU>(a, stage); break;
        case 4: xi_mvc<TYPE, 4, NORM, GLU>(a, stage); break;
        case 2: xi_mvc<TYPE, 2, NORM, GLU>(a, stage); break;
        default: xi_mvc<TYPE, 1, NORM, GLU>(a, stage); break;
    }
}

// matmul_DT: xi_mv1 at T == 1, the staged kernel at T > 1 where a row fits its stage, else the
// warp-per-row kernels of xi_quant.cuh (xi_matmul; its grid rule in _launch.py likewise).
template <int TYPE>
__device__ __forceinline__ void xi_matmul_any(const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y,
                                              xi_matmul_c c) {
    if (c.T == 1 || xi_mvc_rows(TYPE, c.N, c.K, c.T, 0) > 0) {
        const XiMvcArgs a{w, x, nullptr, y, c.T, c.N, c.K, c.accumulate, 0.0f};
        xi_mvc_kernel<TYPE, false, false>(a);
    } else {
        xi_grid_begin();
        xi_matmul_t4<TYPE>(w, x, y, c);  // xi_matmul at T > 1
    }
}
