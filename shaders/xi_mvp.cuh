// The pipelined matrix kernel for decode, T <= 8 tokens (entries `_p` of matmul_DT, rmsnorm_matmul_DT
// and rmsnorm_matmul_swiglu_DT for f16, q8_0, q4_0, q4_1 and, through xi_kquant.cuh's XiMv decoders,
// q4_k, q5_k, q6_k, q5_0; backends/cuda/_launch.py's mvp_weight picks it): y (T, N) from w (N, K) DT
// rows and x (T, K) f32, with xi_mvc.cuh's optional rmsnorm on the way in (NORM) and SwiGLU on the way
// out (GLU: gate rows [0, N), up rows [N, 2N)). At T > 1 each lane decodes a weight block once for all
// the CTA's tokens (xi_mvc decodes it once a token).
//
// Why: xi_mv1 (xi_mvc.cuh) reads a row's weights as 4-byte words straight into registers, a few 8-block
// steps at a time, then decodes them: a warp has ~1 KB in flight and waits a whole memory round trip
// per step, and with NORM every warp re-reads its token to sum its squares. On the H200 that reached
// 0.56-1.3 TB/s of ~4.3 on Llama-3.1-8B's weights. Here:
// - a warp owns tiles of R consecutive rows (R rows and, with GLU, their R up rows: NR regions) and
//   streams them through S stages of warp-private shared memory with cp.async (16-byte copies, no
//   registers held): while it decodes a chunk, the next S - 1 chunks are in flight (S - 1 chunks of NR
//   x CG groups of 8 blocks of 32 (a group of the K-quants: one super-block of 256), ~2-7 KB a warp, 16
//   warps an SM); only __syncwarp, no CTA barrier in the loop;
// - at T == 1 the CTA stages the token once (its rmsnorm h = (x * inv) * norm, inv summed once by warp
//   0, and q4_1's per-lane block sums) in shared memory, where K <= XI_MVP_XK; each lane then reads h
//   as two float4s a block, shared by the R rows it decodes together (the L1/shared data path is the
//   next limit after memory: fewer x reads a weight byte);
// - the grid is at most one wave (CTAs an SM from the shared bytes); warps take tiles gw, gw + GW, ...
//   (GW warps in all), so a wave's prologue is paid once and the pipeline runs across tiles.
// Numerics: lane l sums blocks l/4, l/4 + 8, ... of each row in that order with xi_mvc.cuh's
// expressions (xi_blk_norm, xi_blk_sum, xi_blk_part, the warp sum, the SwiGLU and accumulate
// expressions; the K-quants' weights dequantized by XiMv::dec as gguf rounds them), and inv as
// xi_tok_inv sums it, so every row's result is bit-identical to xi_mv1's and the one-token staged
// xi_mvc's (T == 1, the K-quants' old entry), and to xi_mvc's (T <= 8) and xi_mvt's (T > 8) where they
// keep that order (a row within their stage): a batched step still equals the rows alone
// (tests/test_mvp_kernels.py).
// Vector path: K % 256 == 0 (whole groups) and rows of whole 16-byte words (q6_k: K % 2048 == 0), w, x,
// norm 16-byte aligned; else xi_mv1 a warp a row, a token at a time (w aligned to its type, K % 32 ==
// 0, x, norm 16-byte aligned), or xi_mvc_scalar.
#pragma once
#include "xi_mvc.cuh"

#define XI_MVP_WARPS 8   // warps a CTA (256 threads)
#define XI_MVP_XK 8192   // the most K whose token is staged in shared memory (36 KB: h, block sums)

// bytes of a group of 8 blocks (32 elements a block): a warp step, 4 lanes a block
// (one super-block of the 256-element K-quants: their lanes' raw() then index blocks 0..7 of it)
__host__ __device__ constexpr int xi_mvp_group_bytes(int type) { return (int)xi_row_bytes_of(type, 256); }

// Dynamic shared bytes: the warps' stages (8 warps x S stages x NR regions x CG groups) and, at
// T == 1 where K <= XI_MVP_XK, the staged token (K floats of h, K / 8 block sums).
// backends/cuda/_launch.py repeats this (mvp_shared).
__host__ __device__ constexpr int xi_mvp_shared(int type, int k, int t, int nr, int s, int cg) {
    return XI_MVP_WARPS * s * nr * cg * xi_mvp_group_bytes(type) + (t == 1 && k <= XI_MVP_XK ? k * 4 + k / 2 : 0);
}

__device__ __forceinline__ void xi_mvp_cp16(void *s, const void *g) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    const uint32_t sa = (uint32_t)__cvta_generic_to_shared(s);
    asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2;" ::"r"(sa), "l"(g),
                 "l"(xi_evict_first()) : "memory");  // weights: evict first (xi_common.cuh)
#else
    *reinterpret_cast<uint4 *>(s) = *reinterpret_cast<const uint4 *>(g);
#endif
}
__device__ __forceinline__ void xi_mvp_commit() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
// wait until at most N of this thread's committed groups are still pending
template <int N> __device__ __forceinline__ void xi_mvp_wait() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// Position of float4 i of the staged token: the two halves of every odd block swapped, so the 8
// lanes of a quarter warp (blocks 2j and 2j + 1, lanes s = 0..3 of each) read 8 distinct bank quads.
__device__ __forceinline__ int xi_mvp_pos4(int i) { return i ^ (((i >> 3) & 1) << 2); }

// SC: the sub-block scales applied after the code dots (xi_kquant.cuh's XiMvS: q4_k, q5_k, q6_k), a
// variant that tools/gemv_variants.py --mvp times; no entry launches it (other roundings than the
// other entries' sums of exact weights). A lane's part of a block: dlo q.h_lo + dhi q.h_hi (q6_k), or
// d q.h - m sum(h) (q4_k, q5_k; sum(h) as q4_1's, xi_blk_sum).
template <int TYPE>
__device__ __forceinline__ float xi_blk_part_sc(const float q[8], float dlo, float dhi, float m, float4 lo, float4 hi, float xs) {
    if (TYPE == XI_Q6_K) {
        const float a = q[0] * lo.x + q[1] * lo.y + q[2] * lo.z + q[3] * lo.w;
        const float b = q[4] * hi.x + q[5] * hi.y + q[6] * hi.z + q[7] * hi.w;
        return dlo * a + dhi * b;
    }
    const float dot = q[0] * lo.x + q[1] * lo.y + q[2] * lo.z + q[3] * lo.w + q[4] * hi.x + q[5] * hi.y + q[6] * hi.z + q[7] * hi.w;
    return dlo * dot - m * xs;
}
// Whether a lane's block sum of h is needed (staged with the token at T == 1): q4_1's m term, SC's.
__host__ __device__ constexpr bool xi_mvp_xsum(int type, bool sc) {
    return type == XI_Q4_1 || (sc && (type == XI_Q4_K || type == XI_Q5_K));
}
// A lane's 8 weights of a group and their part of a dot product: XiMv's exact weights and xi_blk_part
// (xi_mvc's expressions), or with SC XiMvS's codes and scales and xi_blk_part_sc.
template <int TYPE, bool SC> struct XiMvpW {
    float q[8], d, dh, m;
    __device__ __forceinline__ void dec(const uint8_t *group, int bl, int s) {
        uint32_t rw[XiMv<TYPE>::NW];
        XiMv<TYPE>::template raw<3>(group, bl, s, rw);
        if constexpr (SC) XiMvS<TYPE>::dec(rw, q, d, dh, m);
        else XiMv<TYPE>::dec(rw, q, d, m);
    }
    __device__ __forceinline__ float part(float4 lo, float4 hi, float xs) const {
        if constexpr (SC) return xi_blk_part_sc<TYPE>(q, d, dh, m, lo, hi, xs);
        else return xi_blk_part<TYPE>(q, d, m, lo, hi, xs);
    }
};

// The token's 8 elements of block b for lane quarter s (lo: 4s..4s+3, hi: 16+4s..), h as xi_mvc
// computes them, and their sum (q4_1's m term, SC's; xi_mvp_xsum): staged (XS) or from global memory.
template <int TYPE, bool NORM, bool XS, bool SC>
__device__ __forceinline__ void xi_mvp_x(const XiMvcArgs &a, const float4 *hs, const float *xsum, float inv, int b, int s,
                                         float4 &lo, float4 &hi, float &xs) {
    if (XS) {
        const int p = (b & 1) << 2;
        lo = hs[b * 8 + (s ^ p)];
        hi = hs[b * 8 + ((s + 4) ^ p)];
        xs = xi_mvp_xsum(TYPE, SC) ? xsum[b * 4 + s] : 0.0f;
    } else {
        lo = __ldg(reinterpret_cast<const float4 *>(a.x + b * 32 + 4 * s));
        hi = __ldg(reinterpret_cast<const float4 *>(a.x + b * 32 + 16 + 4 * s));
        if (NORM) {
            const float4 glo = __ldg(reinterpret_cast<const float4 *>(a.norm + b * 32 + 4 * s));
            const float4 ghi = __ldg(reinterpret_cast<const float4 *>(a.norm + b * 32 + 16 + 4 * s));
            lo = xi_blk_norm(lo, inv, glo);
            hi = xi_blk_norm(hi, inv, ghi);
        }
        xs = xi_mvp_xsum(TYPE, SC) ? xi_blk_sum(lo, hi) : 0.0f;
    }
}

// xi_tok_inv's sum of squares over the token staged (unpermuted order of float4s, xi_mvp_pos4):
// the same float4s per lane in the same order and the same expressions, so the same bits.
__device__ __forceinline__ float xi_mvp_tok_inv(const float4 *hs, int K, float eps) {
    const int lane = threadIdx.x & 31;
    float ss = 0.0f;
#pragma unroll 4
    for (int i = lane; i < (K >> 2); i += 32) {
        const float4 u = hs[xi_mvp_pos4(i)];
        ss += u.x * u.x + u.y * u.y + u.z * u.z + u.w * u.w;
    }
    return 1.0f / sqrtf(xi_warp_sum(ss) / (float)K + eps);
}

// The vector path (see the top of the file). smem: the dynamic shared memory (xi_mvp_shared bytes).
template <int TYPE, int R, int S, int CG, bool NORM, bool GLU, bool XS, int TT, bool SC>
__device__ __forceinline__ void xi_mvp(const XiMvcArgs &a, uint8_t *smem) {
    constexpr int GB = xi_mvp_group_bytes(TYPE), NR = GLU ? 2 * R : R, CGB = CG * GB, CW = CGB / 16, NCP = (CW + 31) / 32;
    static_assert(CGB % 16 == 0, "a chunk of CG groups is whole 16-byte words");
    static_assert(!XS || TT == 1, "the token is staged at T == 1 only");
    __shared__ float inv_s[TT];
    const int tid = threadIdx.x, lane = tid & 31, wi = tid >> 5, s = lane & 3, bl = lane >> 2;
    const int tg0 = blockIdx.y * TT, tn = a.T - tg0 < TT ? a.T - tg0 : TT;  // this CTA's tokens
    const int nb = a.K >> 5, gpr = nb >> 3, cpt = (gpr + CG - 1) / CG;  // groups a row, chunks a tile
    const size_t_ rb = (size_t_)gpr * GB;
    const int ntile = (a.N + R - 1) / R, gw = blockIdx.x * XI_MVP_WARPS + wi, GW = gridDim.x * XI_MVP_WARPS;
    const int nchunk = gw < ntile ? ((ntile - 1 - gw) / GW + 1) * cpt : 0;
    uint8_t *st = smem + (size_t_)wi * S * NR * CGB;  // this warp's S stages
    float4 *hs = reinterpret_cast<float4 *>(smem + (size_t_)XI_MVP_WARPS * S * NR * CGB);
    float *xsum = reinterpret_cast<float *>(hs) + a.K;

    // issue cursor: chunk ic of tile it, into stage is
    int it = gw, ic = 0, is = 0, issued = 0;
    auto issue = [&]() {
        if (issued < nchunk) {
            const int g0 = ic * CG, nw = (gpr - g0 < CG ? gpr - g0 : CG) * GB / 16;  // whole words: rb % 16 == 0
            uint8_t *dst = st + (size_t_)is * NR * CGB;
#pragma unroll
            for (int q = 0; q < NR; q++) {
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
            if (++ic == cpt) { ic = 0; it += GW; }
        }
        xi_mvp_commit();  // an empty group past the end keeps the count of pending groups uniform
    };
#pragma unroll
    for (int c = 0; c < S - 1; c++) issue();

    // the token, once a CTA, while the first chunks are in flight
    float inv[TT];
#pragma unroll
    for (int t = 0; t < TT; t++) inv[t] = 1.0f;
    if (XS) {
        const float4 *x4 = reinterpret_cast<const float4 *>(a.x);
        if (NORM) {  // x staged, warp 0 sums its squares from there
            for (int i = tid; i < (a.K >> 2); i += 256) hs[xi_mvp_pos4(i)] = __ldg(x4 + i);
            __syncthreads();
            if (wi == 0) {
                const float v = xi_mvp_tok_inv(hs, a.K, a.eps);
                if (lane == 0) inv_s[0] = v;
            }
            __syncthreads();
            inv[0] = inv_s[0];
        }
        // a thread a (block, lane quarter), as xi_mvt.cuh stages: the h values xi_mv1 computes, and the
        // block sum from the same registers (the expressions xi_mv1 evaluates, whatever the compiler fuses)
        const float4 *g4 = reinterpret_cast<const float4 *>(a.norm);
        for (int j = tid; j < (a.K >> 3); j += 256) {
            const int b = j >> 2, q = j & 3, ilo = b * 8 + (q ^ ((b & 1) << 2)), ihi = b * 8 + ((q + 4) ^ ((b & 1) << 2));
            float4 lo, hi;
            if (NORM) {
                lo = xi_blk_norm(hs[ilo], inv[0], __ldg(g4 + b * 8 + q));
                hi = xi_blk_norm(hs[ihi], inv[0], __ldg(g4 + b * 8 + 4 + q));
            } else {
                lo = __ldg(x4 + b * 8 + q);
                hi = __ldg(x4 + b * 8 + 4 + q);
            }
            hs[ilo] = lo;
            hs[ihi] = hi;
            if (xi_mvp_xsum(TYPE, SC)) xsum[j] = xi_blk_sum(lo, hi);
        }
        __syncthreads();
    } else if (NORM) {  // warp t: token t's scale
        if (wi < tn) {
            const float v = xi_tok_inv(a.x + (size_t_)(tg0 + wi) * a.K, a.K, a.eps);
            if (lane == 0) inv_s[wi] = v;
        }
        __syncthreads();
#pragma unroll
        for (int t = 0; t < TT; t++) inv[t] = t < tn ? inv_s[t] : 1.0f;
    }

    // compute cursor: chunk cc of tile ct, from stage cs
    int ct = gw, cc = 0, cs = 0;
    float acc[TT][NR];
#pragma unroll
    for (int t = 0; t < TT; t++)
#pragma unroll
        for (int q = 0; q < NR; q++) acc[t][q] = 0.0f;
    for (int c = 0; c < nchunk; c++) {
        issue();
        xi_mvp_wait<S - 1>();
        __syncwarp();
        const uint8_t *src = st + (size_t_)cs * NR * CGB;
        const int g0 = cc * CG, ng = gpr - g0 < CG ? gpr - g0 : CG;
#pragma unroll 2
        for (int j = 0; j < ng; j++) {
            const int b = (g0 + j) * 8 + bl;
            if (TT == 1) {
                float4 lo, hi;
                float xs;
                xi_mvp_x<TYPE, NORM, XS, SC>(a, hs, xsum, inv[0], b, s, lo, hi, xs);
#pragma unroll
                for (int q = 0; q < NR; q++) {
                    XiMvpW<TYPE, SC> wq;
                    wq.dec(src + q * CGB + j * GB, bl, s);
                    acc[0][q] += wq.part(lo, hi, xs);
                }
            } else {  // decode once, then every token (xi_mvc's expressions)
                XiMvpW<TYPE, SC> wq[NR];
#pragma unroll
                for (int q = 0; q < NR; q++) wq[q].dec(src + q * CGB + j * GB, bl, s);
                float4 glo, ghi;
                if (NORM) {
                    glo = __ldg(reinterpret_cast<const float4 *>(a.norm + b * 32 + 4 * s));
                    ghi = __ldg(reinterpret_cast<const float4 *>(a.norm + b * 32 + 16 + 4 * s));
                }
#pragma unroll
                for (int t = 0; t < TT; t++) {
                    if (t < tn) {
                        const float *xt = a.x + (size_t_)(tg0 + t) * a.K;
                        float4 lo = __ldg(reinterpret_cast<const float4 *>(xt + b * 32 + 4 * s));
                        float4 hi = __ldg(reinterpret_cast<const float4 *>(xt + b * 32 + 16 + 4 * s));
                        if (NORM) {
                            lo = xi_blk_norm(lo, inv[t], glo);
                            hi = xi_blk_norm(hi, inv[t], ghi);
                        }
                        const float xs = xi_mvp_xsum(TYPE, SC) ? xi_blk_sum(lo, hi) : 0.0f;
#pragma unroll
                        for (int q = 0; q < NR; q++) acc[t][q] += wq[q].part(lo, hi, xs);
                    }
                }
            }
        }
        if (cc == cpt - 1) {  // the tile's rows are summed: write them
#pragma unroll
            for (int t = 0; t < TT; t++) {
                if (t < tn) {
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        const float sg = xi_warp_sum(acc[t][r]);
                        const float su = GLU ? xi_warp_sum(acc[t][NR - R + r]) : 0.0f;
                        const int n = ct * R + r;
                        if (lane == 0 && n < a.N) {
                            float *yo = a.y + (size_t_)(tg0 + t) * a.N + n;
                            if (GLU) *yo = sg / (1.0f + expf(-sg)) * su;
                            else *yo = a.accumulate ? *yo + sg : sg;
                        }
                    }
                }
#pragma unroll
                for (int q = 0; q < NR; q++) acc[t][q] = 0.0f;
            }
        }
        cs = cs + 1 == S ? 0 : cs + 1;
        if (++cc == cpt) { cc = 0; ct += GW; }
        __syncwarp();  // every lane has read stage cs before the next issue() refills it
    }
    xi_mvp_wait<0>();
}

// The kernel body (blocks of 256 threads; grid (any, ceil(T / XI_MVP_TT)): backends/cuda/_launch.py's
// mvp_launch gives at most a wave). T == 1: the token staged (K <= XI_MVP_XK); 1 < T: up to
// XI_MVP_TT tokens a CTA, read from global memory (L1), each weight group decoded once for them all.
// xi_prefetch_rows of the CTA's first tiles into L2, the wait for the previous kernel, then the
// vector path, or where K, x, norm or w rules it out, the sums xi_mv1 (T == 1) or xi_mvc_scalar
// make over the same rows (as xi_mvc_kernel falls back).
#define XI_MVP_TT 8
template <int TYPE, int R, int S, int CG, bool NORM, bool GLU, bool SC = false>
__device__ __forceinline__ void xi_mvp_kernel(const XiMvcArgs &a) {
    extern __shared__ uint4 xi_mvp_dyn[];
    if (blockIdx.y == 0) xi_prefetch_rows<TYPE, GLU>(a, (long long)blockIdx.x * XI_MVP_WARPS * R, XI_MVP_WARPS * R);
    xi_grid_begin();
    const int tg0 = blockIdx.y * XI_MVP_TT;
    if (tg0 >= a.T) return;
    const bool vec32 = (a.K & 31) == 0 && (((size_t_)a.x) & 15) == 0 && (!NORM || (((size_t_)a.norm) & 15) == 0);
    uint8_t *smem = reinterpret_cast<uint8_t *>(xi_mvp_dyn);
    if (vec32 && (a.K & 255) == 0 && (xi_row_bytes_of(TYPE, a.K) & 15) == 0 && (((size_t_)a.w) & 15) == 0) {
        if (a.T > 1) xi_mvp<TYPE, R, S, CG, NORM, GLU, false, XI_MVP_TT, SC>(a, smem);
        else if (a.K <= XI_MVP_XK) xi_mvp<TYPE, R, S, CG, NORM, GLU, true, 1, SC>(a, smem);
        else xi_mvp<TYPE, R, S, CG, NORM, GLU, false, 1, SC>(a, smem);
    } else if (vec32 && (((size_t_)a.w) & (XiQ<TYPE>::ALIGN - 1)) == 0) {  // xi_mv1's sums a token at a time
        const int tn = a.T - tg0 < XI_MVP_TT ? a.T - tg0 : XI_MVP_TT;
        for (int t = tg0; t < tg0 + tn; t++) {
            XiMvcArgs b = a;
            b.x = a.x + (size_t_)t * a.K;
            b.y = a.y + (size_t_)t * a.N;
            b.T = 1;
            for (int n0 = blockIdx.x * XI_MVP_WARPS + (threadIdx.x >> 5); n0 < a.N; n0 += gridDim.x * XI_MVP_WARPS)
                xi_mv1<TYPE, 1, NORM, GLU, xi_mvc_staged1(TYPE) ? 1 : 0>(b, n0);
        }
    } else {
        const int tn = a.T - tg0 < XI_MVP_TT ? a.T - tg0 : XI_MVP_TT;
        for (int c0 = blockIdx.x * 8; c0 < a.N; c0 += gridDim.x * 8)
            xi_mvc_scalar<TYPE, NORM, GLU>(a, c0, a.N - c0 < 8 ? a.N - c0 : 8, tg0, tn);
    }
}

// Default (R, S, CG) by type: ~1-1.7 KB a region's chunk (8 groups: whole 16-byte words for every
// type, q6_k's 210-byte super-blocks included); R = 2 rows a warp (1 with GLU: 2 regions), 3 stages.
// backends/cuda/_launch.py repeats this (mvp_params).
#define XI_MVP_R(TYPE, GLU) ((GLU) ? 1 : 2)
#define XI_MVP_S 3
#define XI_MVP_CG(TYPE) ((TYPE) == XI_Q8_0 ? 4 : (TYPE) == XI_F16 ? 2 : (TYPE) == XI_F32 ? 1 : 8)

#define XI_MVP_PARAMS const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y, xi_matmul_c c
#define XI_MVP_NORM_PARAMS(C) const uint8_t *__restrict__ w, const float *__restrict__ x, const float *__restrict__ norm, \
                              float *__restrict__ y, C c
// the `_p` entries of matmul_DT, rmsnorm_matmul_DT and rmsnorm_matmul_swiglu_DT
#define XI_MVP_ENTRIES(DT, TYPE)                                                                                      \
    extern "C" __global__ void __launch_bounds__(256, 2) matmul_##DT##_p(XI_MVP_PARAMS) {                             \
        const XiMvcArgs a{w, x, nullptr, y, c.T, c.N, c.K, c.accumulate, 0.0f};                                       \
        xi_mvp_kernel<TYPE, XI_MVP_R(TYPE, 0), XI_MVP_S, XI_MVP_CG(TYPE), false, false>(a);                           \
    }
#define XI_MVP_NORM_ENTRIES(DT, TYPE)                                                                                 \
    extern "C" __global__ void __launch_bounds__(256, 2) rmsnorm_matmul_##DT##_p(XI_MVP_NORM_PARAMS(xi_rmsnorm_matmul_c)) { \
        const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, c.accumulate, c.eps};                                         \
        xi_mvp_kernel<TYPE, XI_MVP_R(TYPE, 0), XI_MVP_S, XI_MVP_CG(TYPE), true, false>(a);                            \
    }
#define XI_MVP_SWIGLU_ENTRIES(DT, TYPE)                                                                               \
    extern "C" __global__ void __launch_bounds__(256, 2) rmsnorm_matmul_swiglu_##DT##_p(                              \
        XI_MVP_NORM_PARAMS(xi_rmsnorm_matmul_swiglu_c)) {                                                             \
        const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, 0, c.eps};                                                    \
        xi_mvp_kernel<TYPE, XI_MVP_R(TYPE, 1), XI_MVP_S, XI_MVP_CG(TYPE), true, true>(a);                             \
    }
