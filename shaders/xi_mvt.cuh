// The register-tiled matrix kernel of batched decode and prefill (T > XI_MVT_MIN_T tokens): the
// `_t` entries of matmul_DT, rmsnorm_matmul_DT and rmsnorm_matmul_swiglu_DT (y (T, N) from w (N, K)
// DT rows and x (T, K) f32 tokens; NORM and GLU as in xi_mvc.cuh).
//
// A warp owns R output rows (R gate and R up rows with GLU; R by xi_mvt_rows) and XI_MVT_TT tokens; a CTA is 8 warps
// over consecutive rows and one token group (grid.y). Each weight is decoded once into registers
// and serves the warp's 8 tokens (xi_mvc decodes it once a token), and each x float4 pair serves
// the R rows. Lane l sums the blocks l/4, l/4 + 8, ... of every (row, token) with the block math
// of xi_mvc.cuh (xi_blk_*), in the same order as xi_mv1 at T == 1; the 32 or 16 partial sums a
// lane holds (NR * R * TT) are then reduced across the warp by a reduce-scatter over the lane
// offsets 16, 8, 4, 2, 1 -- the pairing of xi_warp_sum's butterfly -- so lane j ends with output j
// (or j / 2) and every (row, token) result is bit-identical to the same row at T == 1 (xi_mv1),
// whatever T.
// Any K (K % 32 == 0 and aligned pointers; otherwise xi_mvc_scalar, as xi_mvc_kernel); the tokens
// are staged in shared memory where they fit (XI_MVT_STAGE_MAX), else read from global memory.
#pragma once
#include "xi_mvc.cuh"

#define XI_MVT_TT 8     // tokens a warp (and a CTA): grid.y = ceil(T / XI_MVT_TT)
#define XI_MVT_WARPS 8  // warps a CTA, over consecutive row groups
#define XI_MVT_MIN_T 8  // the `_t` entry serves T > XI_MVT_MIN_T (backends/cuda/_launch.py)

#define XI_MVT_WIDE 2048  // weight rows (2N with GLU) from which a warp takes 4 rows at any T
#define XI_MVT_MANY_T 16  // tokens above which a warp takes 4 rows at any N

// Rows a warp (of each region with GLU): 4 (2 + 2 with GLU), or 2 (1 + 1) for narrow weights at
// T <= 16, where 4 would leave SMs idle (measured on the H200: tools/gemv_variants.py).
// backends/cuda/_launch.py repeats this rule.
__host__ __device__ constexpr int xi_mvt_rows(int n, int t, int glu) {
    return ((n << glu) >= XI_MVT_WIDE || t > XI_MVT_MANY_T ? 4 : 2) >> glu;
}

// One step of the warp reduce-scatter over C values: lanes l and l ^ O add them; lane l keeps the
// half of v[0, C) whose top index bit equals its lane bit O (into v[0, C / 2)).
template <int O, int C>
__device__ __forceinline__ void xi_mvt_halve(float v[32], int lane) {
    const bool up = (lane & O) != 0;
#pragma unroll
    for (int i = 0; i < C / 2; i++) {
        const float send = up ? v[i] : v[i + C / 2], keep = up ? v[i + C / 2] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
}

// The warp sum of each of NV (32 or 16) values a lane holds, over the lane offsets 16, 8, 4, 2, 1
// in xi_warp_sum's order: value j ends in v[0] of lane j (NV == 32) or lanes 2j, 2j + 1 (NV == 16).
template <int NV>
__device__ __forceinline__ void xi_mvt_reduce(float v[32], int lane) {
    if constexpr (NV == 32) {
        xi_mvt_halve<16, 32>(v, lane);
        xi_mvt_halve<8, 16>(v, lane);
        xi_mvt_halve<4, 8>(v, lane);
        xi_mvt_halve<2, 4>(v, lane);
        xi_mvt_halve<1, 2>(v, lane);
    } else {
        static_assert(NV == 16, "32 or 16 values a lane");
        xi_mvt_halve<16, 16>(v, lane);
        xi_mvt_halve<8, 8>(v, lane);
        xi_mvt_halve<4, 4>(v, lane);
        xi_mvt_halve<2, 2>(v, lane);
        v[0] += __shfl_xor_sync(0xffffffffu, v[0], 1);
    }
}

#ifndef XI_MVT_STAGE_MAX  // dynamic shared bytes at most for the staged tokens: the cuda backend
#define XI_MVT_STAGE_MAX 102400  // passes the device's (_launch.stage_max_for); 100 KB: 2 CTAs an SM
#endif

// Dynamic shared bytes of the staged tokens: XI_MVT_TT rows of h (K floats) and, for q4_1, their
// block sums (K / 8 floats); 0 (no staging: x from global memory) past XI_MVT_STAGE_MAX.
__host__ __device__ constexpr int xi_mvt_stage_bytes(int type, int k) {
    return (XI_MVT_TT * 4 * (k + (type == XI_Q4_1 ? k / 8 : 0))) <= XI_MVT_STAGE_MAX
               ? XI_MVT_TT * 4 * (k + (type == XI_Q4_1 ? k / 8 : 0)) : 0;
}

// STAGE: the CTA first writes its tokens' h (x, or its rmsnorm with NORM: the xi_blk_norm values
// xi_mv1 computes) and, for q4_1, each lane's block sums (xi_blk_sum) to shared memory, once for all
// 8 warps, which then read them with conflict-free 16-byte loads (block b's 32 floats with their
// halves swapped when b is odd) instead of recomputing them from global memory for every row group.
// Not inlined: each of xi_mvt_kernel's four instances gets its own register allocation (inlined
// together they spill).
template <int TYPE, int R, bool NORM, bool GLU, bool STAGE>
__device__ __noinline__ void xi_mvt(const XiMvcArgs a) {
    typedef XiMv<TYPE> M;
    constexpr int NR = GLU ? 2 : 1, TT = XI_MVT_TT, NV = NR * R * TT, LSH = NV == 32 ? 0 : 1;
    __shared__ float inv_s[TT];
    extern __shared__ __align__(16) float xi_mvt_h[];
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, s = lane & 3, bl = lane >> 2, nb = a.K >> 5;
    const int n0 = (blockIdx.x * XI_MVT_WARPS + wi) * R, tg0 = blockIdx.y * TT;
    if (tg0 >= a.T || blockIdx.x * XI_MVT_WARPS * R >= a.N) return;  // the whole CTA: before any barrier
    const int tn = a.T - tg0 < TT ? a.T - tg0 : TT;
    const bool vec = (a.K & 31) == 0 && (((size_t_)a.x) & 15) == 0 && (!NORM || (((size_t_)a.norm) & 15) == 0) &&
                     (((size_t_)a.w) & (XiQ<TYPE>::ALIGN - 1)) == 0;
    if (!vec) {
        const int c0 = blockIdx.x * XI_MVT_WARPS * R;
        xi_mvc_scalar<TYPE, NORM, GLU>(a, c0, a.N - c0 < XI_MVT_WARPS * R ? a.N - c0 : XI_MVT_WARPS * R, tg0, tn);
        return;
    }
    if (NORM) {  // the tokens' scales, a warp a token, as xi_mv1 computes them
        for (int t = wi; t < tn; t += XI_MVT_WARPS) {
            const float v = xi_tok_inv(a.x + (size_t_)(tg0 + t) * a.K, a.K, a.eps);
            if (lane == 0) inv_s[t] = v;
        }
        __syncthreads();
    }
    float *xs_s = xi_mvt_h + TT * nb * 32;
    if (STAGE) {  // a thread a (token, block, lane quarter): the values lane (b % 8, q) reads below
        for (int u = threadIdx.x; u < tn * nb * 4; u += blockDim.x) {
            const int t = u / (nb * 4), b = (u >> 2) % nb, q = u & 3;
            const float *xt = a.x + (size_t_)(tg0 + t) * a.K + b * 32 + 4 * q;
            float4 lo = __ldg(reinterpret_cast<const float4 *>(xt)), hi = __ldg(reinterpret_cast<const float4 *>(xt + 16));
            if (NORM) {
                lo = xi_blk_norm(lo, inv_s[t], __ldg(reinterpret_cast<const float4 *>(a.norm + b * 32 + 4 * q)));
                hi = xi_blk_norm(hi, inv_s[t], __ldg(reinterpret_cast<const float4 *>(a.norm + b * 32 + 16 + 4 * q)));
            }
            float *hb = xi_mvt_h + (t * nb + b) * 32;
            const int sw = (b & 1) << 4;
            *reinterpret_cast<float4 *>(hb + ((4 * q) ^ sw)) = lo;
            *reinterpret_cast<float4 *>(hb + ((16 + 4 * q) ^ sw)) = hi;
            if (TYPE == XI_Q4_1) xs_s[(t * nb + b) * 4 + q] = xi_blk_sum(lo, hi);
        }
        __syncthreads();
    }
    if (n0 >= a.N) return;
    const size_t_ rb = XiQ<TYPE>::row_bytes(a.K);
    const uint8_t *rows[NR][R];
#pragma unroll
    for (int q = 0; q < NR; q++)
#pragma unroll
        for (int r = 0; r < R; r++) rows[q][r] = a.w + (size_t_)(q * a.N + (n0 + r < a.N ? n0 + r : a.N - 1)) * rb;
    const float *x0 = a.x + (size_t_)tg0 * a.K;
    float inv[TT];
#pragma unroll
    for (int t = 0; t < TT; t++) inv[t] = NORM ? inv_s[t < tn ? t : tn - 1] : 1.0f;
    float acc[NR][TT][R];
#pragma unroll
    for (int q = 0; q < NR; q++)
#pragma unroll
        for (int t = 0; t < TT; t++)
#pragma unroll
            for (int r = 0; r < R; r++) acc[q][t][r] = 0.0f;
    uint32_t raw[NR][R][M::NW];
    if (bl < nb) {
#pragma unroll
        for (int q = 0; q < NR; q++)
#pragma unroll
            for (int r = 0; r < R; r++) M::template raw<4>(rows[q][r], bl, s, raw[q][r]);
    }
    for (int b = bl; b < nb; b += 8) {
        float qv[NR][R][8], d[NR][R], m[NR][R];
#pragma unroll
        for (int q = 0; q < NR; q++)
#pragma unroll
            for (int r = 0; r < R; r++) M::dec(raw[q][r], qv[q][r], d[q][r], m[q][r]);
        if (b + 8 < nb) {  // the next block's weights, in flight while this one is summed
#pragma unroll
            for (int q = 0; q < NR; q++)
#pragma unroll
                for (int r = 0; r < R; r++) M::template raw<4>(rows[q][r], b + 8, s, raw[q][r]);
        }
        float4 glo, ghi;
        if (NORM && !STAGE) {
            glo = __ldg(reinterpret_cast<const float4 *>(a.norm + b * 32 + 4 * s));
            ghi = __ldg(reinterpret_cast<const float4 *>(a.norm + b * 32 + 16 + 4 * s));
        }
#pragma unroll
        for (int t = 0; t < TT; t++) {
            const int tc = t < tn ? t : tn - 1;
            float4 lo, hi;
            float xs;
            if (STAGE) {
                const float *hb = xi_mvt_h + (tc * nb + b) * 32;
                const int sw = (b & 1) << 4;
                lo = *reinterpret_cast<const float4 *>(hb + ((4 * s) ^ sw));
                hi = *reinterpret_cast<const float4 *>(hb + ((16 + 4 * s) ^ sw));
                xs = TYPE == XI_Q4_1 ? xs_s[(tc * nb + b) * 4 + s] : 0.0f;
            } else {
                const float *xt = x0 + (size_t_)tc * a.K;
                lo = __ldg(reinterpret_cast<const float4 *>(xt + b * 32 + 4 * s));
                hi = __ldg(reinterpret_cast<const float4 *>(xt + b * 32 + 16 + 4 * s));
                if (NORM) {
                    lo = xi_blk_norm(lo, inv[t], glo);
                    hi = xi_blk_norm(hi, inv[t], ghi);
                }
                xs = TYPE == XI_Q4_1 ? xi_blk_sum(lo, hi) : 0.0f;
            }
#pragma unroll
            for (int q = 0; q < NR; q++)
#pragma unroll
                for (int r = 0; r < R; r++) acc[q][t][r] += xi_blk_part<TYPE>(qv[q][r], d[q][r], m[q][r], lo, hi, xs);
        }
    }
    // reduce-scatter: output j = (q * TT + t) * R + r ends in lane j << LSH
    float v[32];
#pragma unroll
    for (int q = 0; q < NR; q++)
#pragma unroll
        for (int t = 0; t < TT; t++)
#pragma unroll
            for (int r = 0; r < R; r++) v[(q * TT + t) * R + r] = acc[q][t][r];
    xi_mvt_reduce<NV>(v, lane);
    const float sg = v[0];
    const float su = GLU ? __shfl_down_sync(0xffffffffu, sg, 16) : 0.0f;  // output j + NV / 2: the up row
    const int j = lane >> LSH, t = (j / R) % TT, r = j % R, n = n0 + r;
    if ((lane & LSH) || (GLU && lane >= 16) || t >= tn || n >= a.N) return;
    float *yo = a.y + (size_t_)(tg0 + t) * a.N + n;
    if (GLU) *yo = sg / (1.0f + expf(-sg)) * su;
    else *yo = a.accumulate ? *yo + sg : sg;
}

// The `_t` entries' body: xi_mvt with xi_mvt_rows(N, T, GLU) rows a warp, staged where
// xi_mvt_stage_bytes > 0; grid (ceil(N / (8 * rows)), ceil(T / 8)) of 256 threads and that many
// dynamic shared bytes.
template <int TYPE, bool NORM, bool GLU>
__device__ __forceinline__ void xi_mvt_kernel(const XiMvcArgs &a) {
    constexpr int RW = GLU ? 2 : 4, RN = GLU ? 1 : 2;
    const bool wide = xi_mvt_rows(a.N, a.T, GLU) == RW;
    if (xi_mvt_stage_bytes(TYPE, a.K) > 0) {
        if (wide) xi_mvt<TYPE, RW, NORM, GLU, true>(a);
        else xi_mvt<TYPE, RN, NORM, GLU, true>(a);
    } else {
        if (wide) xi_mvt<TYPE, RW, NORM, GLU, false>(a);
        else xi_mvt<TYPE, RN, NORM, GLU, false>(a);
    }
}

// matmul_DT_t: T > XI_MVT_MIN_T.
template <int TYPE>
__device__ __forceinline__ void xi_matmul_t(const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y,
                                            xi_matmul_c c) {
    const XiMvcArgs a{w, x, nullptr, y, c.T, c.N, c.K, c.accumulate, 0.0f};
    xi_mvt_kernel<TYPE, false, false>(a);
}
