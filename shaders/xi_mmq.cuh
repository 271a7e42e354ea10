// The integer matrix kernels of matmul_DT, rmsnorm_matmul_DT and rmsnorm_matmul_swiglu_DT for the
// block types q4_0, q4_1 and q8_0 (llama.cpp's MMQ / MMVQ numerics): y (T, N) from w (N, K) GGUF
// blocks (2N rows with GLU: gate rows, then up rows) and x (T, K) f32 tokens, NORM and GLU as in
// xi_mvc.cuh. Opt-in for now (backends/cuda/_launch.py: XINFER_MMQ).
//
// Numerics (tests/_mmq_model.py models them bit for bit):
// - the activations h (x, or with NORM h = (x * inv) * norm, inv = xi_mmq_inv) are quantized per
//   block of 32 (q8_1): amax = max |h|, d = amax / 127, q = roundf(h * (1 / d)) (half away from
//   zero), s = d * (float)sum(q); amax == 0 (or d == 0) gives q = 0, d = s = 0;
// - per (row, token, block b) the integer sum isum of weight code * q is exact (q4_0 codes q - 8,
//   q4_1 codes 0..15, q8_0 int8), in any order (mma.sync or dp4a), and its float term is
//   f_b = (dw * d) * (float)isum (q4_1: + mw * s), each operation rounded once (__fmul_rn, __fadd_rn:
//   nothing is contracted into an fma);
// - f_b is added in block order from 0 within segments of XI_MMQ_SEG_BLOCKS blocks (K alone sets
//   them), the segment sums in order from 0 into the total; y = total (accumulate: y + total).
// Nothing depends on T, on the tile a row or token lands in, or on the other rows and tokens: a
// (row, token) result is bit-identical at every T and in both kernels below (a batched decode step
// equals each request alone). GLU: y = g / (1 + expf(-g)) * u from the gate and up totals.
//
// _mmq / _mmqs (xi_mmq_kernel, compute capability 8.0+): a CTA of XI_MMQ_WARPS warps owns 16 staged
// weight rows a warp (with GLU: 32 gate rows, then the same 32 up rows) and a tile of TN tokens
// (64, or 16 for _mmqs; grid.y). K runs in steps of XI_MMQ_KB blocks through two shared-memory
// stages: while a step is multiplied, the next step's weight bytes arrive by cp.async (16-byte
// chunks from the 16-byte boundary at or below the row's first byte: rows need no alignment) and
// the CTA quantizes the next step of its tokens (8 lanes a (token, block), 4 values a lane). A block
// is one int8 mma.sync m16n8k32 a warp and 8 tokens: A = 16 rows' codes (thread (g, c) = (lane / 4,
// lane % 4): rows g and g + 8, code bytes 4c..4c+3 and 16+4c..16+4c+3; a q4 word of qs gives both,
// low and high nibbles), B = 8 tokens' codes (bytes 4c.. and 16+4c.. of token g); thread (g, c)
// gets rows g, g + 8 by tokens 2c, 2c + 1 and adds their f_b.
//
// _q1 (xi_q1_kernel, T small, memory-bound; compute capability 8.0+ like _mmq so they never mix): grid
// (row groups, T): a CTA quantizes its token (whole K) into shared memory, then a warp a row: lane l
// takes blocks l/4, l/4 + 8, ... (4 lanes a block, 8 codes a lane: dp4a), the block's integer sum
// by two shuffles, then every lane adds the 8 blocks' f_b in block order (shuffled from their lanes).
#pragma once
#include "xi_mvc.cuh"

#define XI_MMQ_SEG_BLOCKS 16  // blocks of 32 a segment (tests/_mmq_model.py SEG_BLOCKS)
#define XI_MMQ_KB 8           // blocks a K-step of the tiled kernel
#define XI_MMQ_WARPS 4        // warps a CTA of the tiled kernel: 16 staged weight rows each
#define XI_MMQ_XS (XI_MMQ_KB * 32 + 16)  // shared bytes of a token's codes in a K-step (+16: no bank conflicts)

// GGUF block bytes, and the offset of the codes in a block.
__host__ __device__ constexpr int xi_mmq_bb(int type) { return type == XI_Q8_0 ? 34 : type == XI_Q4_0 ? 18 : 20; }
__host__ __device__ constexpr int xi_mmq_hdr(int type) { return type == XI_Q4_1 ? 4 : 2; }
// 16-byte chunks of a staged row's slot: a K-step of a row from the 16-byte boundary below its first
// byte (at most 15 + XI_MMQ_KB * bb bytes), rounded up to an odd count (rows 8 apart in other banks).
__host__ __device__ constexpr int xi_mmq_slot16(int type) { return ((30 + XI_MMQ_KB * xi_mmq_bb(type)) / 16) | 1; }
// Shared bytes of one stage: the staged rows, the tokens' codes, their (d, s) pairs.
__host__ __device__ constexpr int xi_mmq_stage_bytes(int type, int tn) {
    return XI_MMQ_WARPS * 16 * 16 * xi_mmq_slot16(type) + tn * XI_MMQ_XS + XI_MMQ_KB * tn * 8;
}
// Dynamic shared bytes of the tiled kernel: two stages and the tokens' rmsnorm scales.
// backends/cuda/_launch.py (mmq_shared) repeats this rule.
__host__ __device__ constexpr int xi_mmq_shared(int type, int tn) { return 2 * xi_mmq_stage_bytes(type, tn) + 4 * tn; }
// Dynamic shared bytes of the one-token kernel for nb blocks: codes, (d, s) pairs, the scale (q1_shared).
__host__ __device__ constexpr int xi_q1_shared(int nb) { return 40 * nb + 16; }

// A 32-bit word of the 4 bytes at p, any alignment, p in shared memory (two aligned words: the
// caller's region extends at least 4 bytes past p + 3).
__device__ __forceinline__ uint32_t xi_lds32u(const uint8_t *p) {
    const uint32_t mis = (uint32_t)(size_t_)p & 3u;  // pointer arithmetic, not a cast: stays a shared-memory load
    const uint32_t *q = reinterpret_cast<const uint32_t *>(p - mis);
    return __funnelshift_r(q[0], q[1], mis * 8u);
}
// A 32-bit word of the 4 bytes at p in global memory, p 2-byte aligned.
__device__ __forceinline__ uint32_t xi_ldg32h(const uint8_t *p) {
    const uint16_t *h = reinterpret_cast<const uint16_t *>(p);
    return (uint32_t)__ldg(h) | ((uint32_t)__ldg(h + 1) << 16);
}
__device__ __forceinline__ int xi_dp4a(uint32_t a, uint32_t b, int c) {
    int d;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
// The q4 nibbles of a code word as int8 codes: low (bytes 0..3 -> elements 4c..) and high
// (elements 16+4c..); q4_0 subtracts 8 from each byte ((n + 120) ^ 128 is n - 8 as an int8).
template <int TYPE>
__device__ __forceinline__ void xi_mmq_nib(uint32_t v, uint32_t &lo, uint32_t &hi) {
    lo = v & 0x0F0F0F0Fu;
    hi = (v >> 4) & 0x0F0F0F0Fu;
    if (TYPE == XI_Q4_0) {
        lo = (lo + 0x78787878u) ^ 0x80808080u;
        hi = (hi + 0x78787878u) ^ 0x80808080u;
    }
}
// f_b of a block: (dw * d) * isum (+ mw * s for q4_1), each operation rounded once.
template <int TYPE>
__device__ __forceinline__ float xi_mmq_term(float dw, float mw, float d, float s, int isum) {
    float f = __fmul_rn(__fmul_rn(dw, d), (float)isum);
    if (TYPE == XI_Q4_1) f = __fadd_rn(f, __fmul_rn(mw, s));
    return f;
}
// A block's f_b into (seg, tot): the segment ends after block b where (b + 1) % XI_MMQ_SEG_BLOCKS == 0
// or b + 1 == nb, and its sum goes into tot.
__device__ __forceinline__ void xi_mmq_add(float &seg, float &tot, float f, int b, int nb) {
    seg = __fadd_rn(seg, f);
    if ((b + 1) % XI_MMQ_SEG_BLOCKS == 0 || b + 1 == nb) {
        tot = __fadd_rn(tot, seg);
        seg = 0.0f;
    }
}

// A token's rmsnorm scale 1 / sqrt(mean(x^2) + eps), a warp's: lane l adds
// ((a*a + b*b) + (c*c + d*d)) of float4s l, l + 32, ... in order, then the xor-butterfly warp sum,
// each operation rounded once (tests/_mmq_model.py rmsnorm_inv). Every lane gets it.
__device__ __forceinline__ float xi_mmq_inv(const float *xt, int K, float eps) {
    const int lane = threadIdx.x & 31;
    const bool al = (((size_t_)xt) & 15) == 0;
    float ss = 0.0f;
    for (int i = lane; i < (K >> 2); i += 32) {
        const float4 u = al ? __ldg(reinterpret_cast<const float4 *>(xt) + i)
                            : make_float4(xt[4 * i], xt[4 * i + 1], xt[4 * i + 2], xt[4 * i + 3]);
        ss = __fadd_rn(ss, __fadd_rn(__fadd_rn(__fmul_rn(u.x, u.x), __fmul_rn(u.y, u.y)),
                                     __fadd_rn(__fmul_rn(u.z, u.z), __fmul_rn(u.w, u.w))));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, o));
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)K), eps)));
}

// Quantize blocks [kb0, kb0 + nblk) of tokens [t0, t0 + ntok) (q8_1): pair p = (token p / nblk,
// block p % nblk), 8 lanes a pair (values 4l..4l+3 of the block, lane l = tid % 8); codes to
// xq[tok * xstride + kk * 32 ..], (d, s) to ds[kk * ntok + tok] (TOKMAJOR: ds[tok * nblk + kk],
// xi_mvq.cuh's layout). Tokens past T and blocks past K get zeros. inv: the tokens' rmsnorm scales
// (NORM). All nthreads threads of the CTA call it; a thread issues the loads of UQ pairs before it
// quantizes them (UQ loads in flight: one round trip to L2 for UQ * nthreads / 8 pairs).
template <bool NORM, int UQ, bool TOKMAJOR = false>
__device__ __forceinline__ void xi_mmq_quant(const XiMvcArgs &a, const float *inv, int t0, int ntok, int kb0, int nblk,
                                             uint8_t *xq, int xstride, float2 *ds, int nthreads) {
    const int tid = threadIdx.x, l8 = tid & 7, grp = tid >> 3, ngrp = nthreads >> 3, nb = a.K >> 5, total = ntok * nblk;
    const bool al = ((((size_t_)a.x) | (NORM ? (size_t_)a.norm : (size_t_)0)) & 15) == 0 && (a.K & 3) == 0;
    for (int p0 = 0; p0 < total; p0 += UQ * ngrp) {  // every lane of a warp runs the same iterations
        float4 v[UQ];
        int tok = (p0 + grp) / nblk, kk = p0 + grp - tok * nblk;  // pair p's (token, block), stepped below
#pragma unroll
        for (int u = 0; u < UQ; u++) {
            const int p = p0 + u * ngrp + grp, t = t0 + tok, b = kb0 + kk;
            v[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (p < total && t < a.T && b < nb) {
                const float *src = a.x + (size_t_)t * a.K + b * 32 + 4 * l8;
                v[u] = al ? __ldg(reinterpret_cast<const float4 *>(src)) : make_float4(src[0], src[1], src[2], src[3]);
                if (NORM) {
                    const float *gp = a.norm + b * 32 + 4 * l8;
                    const float4 g = al ? __ldg(reinterpret_cast<const float4 *>(gp)) : make_float4(gp[0], gp[1], gp[2], gp[3]);
                    const float iv = inv[tok];
                    v[u] = make_float4(__fmul_rn(__fmul_rn(v[u].x, iv), g.x), __fmul_rn(__fmul_rn(v[u].y, iv), g.y),
                                       __fmul_rn(__fmul_rn(v[u].z, iv), g.z), __fmul_rn(__fmul_rn(v[u].w, iv), g.w));
                }
            }
            for (kk += ngrp; kk >= nblk; kk -= nblk) tok++;  // p + ngrp, without a division
        }
        // one copy of the quantize code for the UQ pairs (v[0] each time, the rest moved down): the
        // loads above stay in flight together, and the code a CTA runs once stays short (an entry's
        // first run after other kernels fetches its instructions from L2; `_pq` for q4_1 at one token
        // ~21 -> ~15 KB of code run, with xi_mvq's issue loop; on the H200 the same speed within 1.5%
        // once the weights are evict-first, xi_common.cuh, which keeps that code in L2)
#pragma unroll 1
        for (int u = 0; u < UQ; u++) {
            const float4 w = v[0];
#pragma unroll
            for (int j = 0; j + 1 < UQ; j++) v[j] = v[j + 1];
            const int p = p0 + u * ngrp + grp, tok = p / nblk, kk = p - tok * nblk;
            float am = fmaxf(fmaxf(fabsf(w.x), fabsf(w.y)), fmaxf(fabsf(w.z), fabsf(w.w)));
            am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 1));
            am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 2));
            am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 4));
            const float d = __fdiv_rn(am, 127.0f), id = d > 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
            const int q0 = (int)roundf(__fmul_rn(w.x, id)), q1 = (int)roundf(__fmul_rn(w.y, id));
            const int q2 = (int)roundf(__fmul_rn(w.z, id)), q3 = (int)roundf(__fmul_rn(w.w, id));
            int qs = (q0 + q1) + (q2 + q3);
            qs += __shfl_xor_sync(0xffffffffu, qs, 1);
            qs += __shfl_xor_sync(0xffffffffu, qs, 2);
            qs += __shfl_xor_sync(0xffffffffu, qs, 4);
            if (p < total) {
                *reinterpret_cast<uint32_t *>(xq + (size_t_)tok * xstride + kk * 32 + 4 * l8) =
                    (uint32_t)(q0 & 255) | ((uint32_t)(q1 & 255) << 8) | ((uint32_t)(q2 & 255) << 16) | ((uint32_t)(q3 & 255) << 24);
                if (l8 == 0) ds[TOKMAJOR ? tok * nblk + kk : kk * ntok + tok] = make_float2(d, __fmul_rn(d, (float)qs));
            }
        }
    }
}


// c = A (16 x 32 int8) . B (32 x 8 int8), exact int32 (compute capability 8.0+; a trap below).
__device__ __forceinline__ void xi_mma_s8(int c[4], const uint32_t A[4], uint32_t b0, uint32_t b1) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(b0), "r"(b1), "r"(0));
#else
    __trap();
#endif
}

// The weight row a staged row r of the tiled kernel holds: n0 + r (GLU: gate rows n0 + r for the
// first half, up rows N + n0 + r - half after), rows past N clamped to N - 1 (never stored).
template <bool GLU>
__device__ __forceinline__ const uint8_t *xi_mmq_row(const XiMvcArgs &a, int n0, int r, size_t_ rb) {
    constexpr int HALF = XI_MMQ_WARPS * 8;
    const int rr = GLU ? r % HALF : r;
    long long n = n0 + rr < a.N ? n0 + rr : a.N - 1;
    if (GLU && r >= HALF) n += a.N;
    return a.w + (size_t_)n * rb;
}

// The tiled kernel body (entries _mmq, TN = 64; _mmqs, TN = 16), XI_MMQ_WARPS * 32 threads,
// xi_mmq_shared(TYPE, TN) dynamic shared bytes. Grid (ceil(N / rows), ceil(T / TN)), rows = 16 *
// XI_MMQ_WARPS output rows a CTA (half that with GLU).
template <int TYPE, bool NORM, bool GLU, int TN>
__device__ __forceinline__ void xi_mmq_kernel(const XiMvcArgs &a) {
    constexpr int BB = xi_mmq_bb(TYPE), HDR = xi_mmq_hdr(TYPE), S16 = xi_mmq_slot16(TYPE), SLOT = 16 * S16;
    constexpr int RS = XI_MMQ_WARPS * 16, NT = TN / 8, WB = RS * SLOT, XB = TN * XI_MMQ_XS;
    constexpr int STAGE = xi_mmq_stage_bytes(TYPE, TN), NTH = XI_MMQ_WARPS * 32, OR = GLU ? RS / 2 : RS;
    extern __shared__ __align__(16) uint8_t xi_mmq_sm[];
    xi_grid_begin();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c4 = lane & 3;
    const int nb = a.K >> 5, nsteps = (nb + XI_MMQ_KB - 1) / XI_MMQ_KB;
    const int n0 = blockIdx.x * OR, tg0 = blockIdx.y * TN;
    if (n0 >= a.N || tg0 >= a.T) return;  // the whole CTA
    const size_t_ rb = (size_t_)nb * BB;
    uint8_t *st0 = xi_mmq_sm, *st1 = xi_mmq_sm + STAGE;
    float *inv = reinterpret_cast<float *>(xi_mmq_sm + 2 * STAGE);
    if (NORM) {
        for (int j = warp; j < TN; j += XI_MMQ_WARPS) {
            const float v = tg0 + j < a.T ? xi_mmq_inv(a.x + (size_t_)(tg0 + j) * a.K, a.K, a.eps) : 0.0f;
            if (lane == 0) inv[j] = v;
        }
        __syncthreads();
    }
    // Stage a K-step: its weight bytes by cp.async, its token codes quantized by the threads.
    auto stage = [&](int s, uint8_t *st) {
        const int kb0 = s * XI_MMQ_KB, nblk = nb - kb0 < XI_MMQ_KB ? nb - kb0 : XI_MMQ_KB;
        for (int i = tid; i < RS * S16; i += NTH) {
            const int r = i / S16, c = i - r * S16;
            const uint8_t *p = xi_mmq_row<GLU>(a, n0, r, rb) + (size_t_)kb0 * BB;
            const uint8_t *al = reinterpret_cast<const uint8_t *>(((size_t_)p) & ~(size_t_)15);
            const int n16 = ((int)(p - al) + nblk * BB + 15) >> 4;
            if (c < n16) xi_cp16(st + r * SLOT + 16 * c, al + 16 * c);
        }
        xi_cp_commit();
        xi_mmq_quant<NORM, 8>(a, inv, tg0, TN, kb0, XI_MMQ_KB, st + WB, XI_MMQ_XS, reinterpret_cast<float2 *>(st + WB + XB), NTH);
    };
    if (nsteps > 0) stage(0, st0);  // K == 0: no weight bytes, y = 0 (or y unchanged)
    xi_cp_wait_all();
    __syncthreads();
    const int r0 = warp * 16 + g;
    const uint8_t *p0 = xi_mmq_row<GLU>(a, n0, r0, rb), *p1 = xi_mmq_row<GLU>(a, n0, r0 + 8, rb);
    float seg[NT][4], tot[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) seg[j][i] = tot[j][i] = 0.0f;
    for (int s = 0; s < nsteps; s++) {
        uint8_t *cur = (s & 1) ? st1 : st0;
        if (s + 1 < nsteps) stage(s + 1, (s & 1) ? st0 : st1);
        const int kb0 = s * XI_MMQ_KB, nblk = nb - kb0 < XI_MMQ_KB ? nb - kb0 : XI_MMQ_KB;
        const uint8_t *w0 = cur + r0 * SLOT + (int)(((size_t_)(p0 + (size_t_)kb0 * BB)) & 15);
        const uint8_t *w1 = cur + (r0 + 8) * SLOT + (int)(((size_t_)(p1 + (size_t_)kb0 * BB)) & 15);
        const uint8_t *xq = cur + WB;
        const float2 *ds = reinterpret_cast<const float2 *>(cur + WB + XB);
        for (int kk = 0; kk < nblk; kk++) {
            const uint8_t *b0 = w0 + kk * BB, *b1 = w1 + kk * BB;
            uint32_t A[4];
            if (TYPE == XI_Q8_0) {
                A[0] = xi_lds32u(b0 + HDR + 4 * c4);
                A[1] = xi_lds32u(b1 + HDR + 4 * c4);
                A[2] = xi_lds32u(b0 + HDR + 16 + 4 * c4);
                A[3] = xi_lds32u(b1 + HDR + 16 + 4 * c4);
            } else {
                xi_mmq_nib<TYPE>(xi_lds32u(b0 + HDR + 4 * c4), A[0], A[2]);
                xi_mmq_nib<TYPE>(xi_lds32u(b1 + HDR + 4 * c4), A[1], A[3]);
            }
            const float dw0 = xi_h2f(*reinterpret_cast<const uint16_t *>(b0));
            const float dw1 = xi_h2f(*reinterpret_cast<const uint16_t *>(b1));
            const float mw0 = TYPE == XI_Q4_1 ? xi_h2f(*reinterpret_cast<const uint16_t *>(b0 + 2)) : 0.0f;
            const float mw1 = TYPE == XI_Q4_1 ? xi_h2f(*reinterpret_cast<const uint16_t *>(b1 + 2)) : 0.0f;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const uint8_t *xb = xq + (8 * j + g) * XI_MMQ_XS + kk * 32 + 4 * c4;
                int c[4];
                xi_mma_s8(c, A, *reinterpret_cast<const uint32_t *>(xb), *reinterpret_cast<const uint32_t *>(xb + 16));
                const float4 dd = *reinterpret_cast<const float4 *>(ds + kk * TN + 8 * j + 2 * c4);  // (d, s) of tokens 2c, 2c+1
                seg[j][0] = __fadd_rn(seg[j][0], xi_mmq_term<TYPE>(dw0, mw0, dd.x, dd.y, c[0]));
                seg[j][1] = __fadd_rn(seg[j][1], xi_mmq_term<TYPE>(dw0, mw0, dd.z, dd.w, c[1]));
                seg[j][2] = __fadd_rn(seg[j][2], xi_mmq_term<TYPE>(dw1, mw1, dd.x, dd.y, c[2]));
                seg[j][3] = __fadd_rn(seg[j][3], xi_mmq_term<TYPE>(dw1, mw1, dd.z, dd.w, c[3]));
            }
        }
        // segments end only at a step's end: XI_MMQ_SEG_BLOCKS is a multiple of XI_MMQ_KB
        if ((kb0 + nblk) % XI_MMQ_SEG_BLOCKS == 0 || kb0 + nblk == nb) {
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    tot[j][i] = __fadd_rn(tot[j][i], seg[j][i]);
                    seg[j][i] = 0.0f;
                }
        }
        xi_cp_wait_all();
        __syncthreads();
    }
    if (GLU) {  // gate and up totals through shared memory (the stages are free after the last barrier)
        float *comb = reinterpret_cast<float *>(xi_mmq_sm);  // (RS, TN)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) comb[(r0 + 8 * (i >> 1)) * TN + 8 * j + 2 * c4 + (i & 1)] = tot[j][i];
        __syncthreads();
        for (int e = tid; e < OR * TN; e += NTH) {
            const int r = e / TN, tok = e - r * TN, n = n0 + r, t = tg0 + tok;
            if (n < a.N && t < a.T) {
                const float sg = comb[r * TN + tok], su = comb[(r + OR) * TN + tok];
                a.y[(size_t_)t * a.N + n] = sg / (1.0f + expf(-sg)) * su;
            }
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int n = n0 + r0 + 8 * (i >> 1), t = tg0 + 8 * j + 2 * c4 + (i & 1);
            if (n < a.N && t < a.T) {
                float *yo = a.y + (size_t_)t * a.N + n;
                *yo = a.accumulate ? __fadd_rn(*yo, tot[j][i]) : tot[j][i];
            }
        }
}

// The one-token kernel body (entry _q1), 256 threads, xi_q1_shared(K / 32) dynamic shared bytes.
// Grid (G, T): CTA (x, t) runs token t and output rows [x R, x R + R), R = ceil(N / G) rounded up
// to a multiple of 8 (the launch picks G from the R it wants), a warp a row in turn.
template <int TYPE, bool NORM, bool GLU>
__device__ __forceinline__ void xi_q1_kernel(const XiMvcArgs &a) {
    constexpr int BB = xi_mmq_bb(TYPE), HDR = xi_mmq_hdr(TYPE), U = 4, NR = GLU ? 2 : 1;
    extern __shared__ __align__(16) uint8_t xi_mmq_sm[];
    xi_grid_begin();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5, s4 = lane & 3, bl = lane >> 2;
    const int nb = a.K >> 5, t = blockIdx.y;
    const int R = ((a.N + (int)gridDim.x - 1) / (int)gridDim.x + 7) & ~7, n0 = blockIdx.x * R;
    if (t >= a.T || n0 >= a.N) return;  // the whole CTA
    uint8_t *xq = xi_mmq_sm;
    float2 *ds = reinterpret_cast<float2 *>(xi_mmq_sm + 32 * nb);
    float *inv = reinterpret_cast<float *>(ds + nb);
    const float *xt = a.x + (size_t_)t * a.K;
    if (NORM) {
        if (warp == 0) {
            const float v = xi_mmq_inv(xt, a.K, a.eps);
            if (lane == 0) inv[0] = v;
        }
        __syncthreads();
    }
    xi_mmq_quant<NORM, 4>(a, inv, t, 1, 0, nb, xq, 0, ds, blockDim.x);
    __syncthreads();
    const size_t_ rb = (size_t_)nb * BB;
    const int rows = a.N - n0 < R ? a.N - n0 : R;
    for (int r = warp; r < rows; r += nw) {
        const uint8_t *row[NR];
        row[0] = a.w + (size_t_)(n0 + r) * rb;
        if (GLU) row[NR - 1] = a.w + (size_t_)(a.N + n0 + r) * rb;
        float seg[NR], tot[NR];
#pragma unroll
        for (int q = 0; q < NR; q++) seg[q] = tot[q] = 0.0f;
        for (int b0 = 0; b0 < nb; b0 += 8 * U) {
            uint32_t cw[U][NR][2], sc[U][NR];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int b = b0 + 8 * u + bl;
#pragma unroll
                for (int q = 0; q < NR; q++) {
                    cw[u][q][0] = cw[u][q][1] = sc[u][q] = 0;
                    if (b < nb) {
                        const uint8_t *blk = row[q] + (size_t_)b * BB;
                        if (TYPE == XI_Q4_1) {
                            cw[u][q][0] = __ldg(reinterpret_cast<const unsigned int *>(blk + HDR + 4 * s4));
                            sc[u][q] = __ldg(reinterpret_cast<const unsigned int *>(blk));
                        } else {
                            cw[u][q][0] = xi_ldg32h(blk + HDR + 4 * s4);
                            if (TYPE == XI_Q8_0) cw[u][q][1] = xi_ldg32h(blk + HDR + 16 + 4 * s4);
                            sc[u][q] = __ldg(reinterpret_cast<const uint16_t *>(blk));
                        }
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int b = b0 + 8 * u + bl;
                const int bs = b < nb ? b : 0;
                const uint32_t xlo = *reinterpret_cast<const uint32_t *>(xq + bs * 32 + 4 * s4);
                const uint32_t xhi = *reinterpret_cast<const uint32_t *>(xq + bs * 32 + 16 + 4 * s4);
                const float2 dx = ds[bs];
#pragma unroll
                for (int q = 0; q < NR; q++) {
                    uint32_t lo, hi;
                    if (TYPE == XI_Q8_0) {
                        lo = cw[u][q][0];
                        hi = cw[u][q][1];
                    } else {
                        xi_mmq_nib<TYPE>(cw[u][q][0], lo, hi);
                    }
                    int isum = xi_dp4a(hi, xhi, xi_dp4a(lo, xlo, 0));
                    isum += __shfl_xor_sync(0xffffffffu, isum, 1);
                    isum += __shfl_xor_sync(0xffffffffu, isum, 2);
                    const float dw = xi_h2f((uint16_t)(sc[u][q] & 0xFFFFu));
                    const float mw = TYPE == XI_Q4_1 ? xi_h2f((uint16_t)(sc[u][q] >> 16)) : 0.0f;
                    const float f = xi_mmq_term<TYPE>(dw, mw, dx.x, dx.y, isum);
#pragma unroll
                    for (int j = 0; j < 8; j++) {  // blocks b0 + 8u + j in order, from lane 4j
                        const float fj = __shfl_sync(0xffffffffu, f, 4 * j);
                        const int bj = b0 + 8 * u + j;
                        if (bj < nb) xi_mmq_add(seg[q], tot[q], fj, bj, nb);
                    }
                }
            }
        }
        if (lane == 0) {
            float *yo = a.y + (size_t_)t * a.N + n0 + r;
            if (GLU) *yo = tot[0] / (1.0f + expf(-tot[0])) * tot[NR - 1];
            else *yo = a.accumulate ? __fadd_rn(*yo, tot[0]) : tot[0];
        }
    }
}

// The entries (shaders/matmul_DT.cu, rmsnorm_matmul_DT.cu, rmsnorm_matmul_swiglu_DT.cu of q4_0, q4_1,
// q8_0): _mmq (64 tokens a CTA), _mmqs (16), _q1; launched by backends/cuda/_launch.py mmq_launch.
#define XI_MMQ_ENTRY_SET(NAME, PARAMS, ARGS, TYPE, NORM, GLU)                                                  \
    extern "C" __global__ void __launch_bounds__(XI_MMQ_WARPS * 32, 2) NAME##_mmq(PARAMS) {                     \
        const XiMvcArgs a ARGS;                                                                                  \
        xi_mmq_kernel<TYPE, NORM, GLU, 64>(a);                                                                   \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(XI_MMQ_WARPS * 32, 4) NAME##_mmqs(PARAMS) {                    \
        const XiMvcArgs a ARGS;                                                                                  \
        xi_mmq_kernel<TYPE, NORM, GLU, 16>(a);                                                                   \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(256, 4) NAME##_q1(PARAMS) {                                    \
        const XiMvcArgs a ARGS;                                                                                  \
        xi_q1_kernel<TYPE, NORM, GLU>(a);                                                                        \
    }
#define XI_MMQ_MATMUL_ARGS {w, x, nullptr, y, c.T, c.N, c.K, c.accumulate, 0.0f}
#define XI_MMQ_NORM_ARGS {w, x, norm, y, c.T, c.N, c.K, c.accumulate, c.eps}
#define XI_MMQ_GLU_ARGS {w, x, norm, y, c.T, c.N, c.K, 0, c.eps}
#define XI_MMQ_P_MATMUL const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y, xi_matmul_c c
#define XI_MMQ_P_NORM const uint8_t *__restrict__ w, const float *__restrict__ x, const float *__restrict__ norm, \
                      float *__restrict__ y, xi_rmsnorm_matmul_c c
#define XI_MMQ_P_GLU const uint8_t *__restrict__ w, const float *__restrict__ x, const float *__restrict__ norm, \
                     float *__restrict__ y, xi_rmsnorm_matmul_swiglu_c c
#define XI_MATMUL_MMQ_ENTRIES(DT, TYPE) XI_MMQ_ENTRY_SET(matmul_##DT, XI_MMQ_P_MATMUL, XI_MMQ_MATMUL_ARGS, TYPE, false, false)
#define XI_RMSNORM_MATMUL_MMQ_ENTRIES(DT, TYPE) \
    XI_MMQ_ENTRY_SET(rmsnorm_matmul_##DT, XI_MMQ_P_NORM, XI_MMQ_NORM_ARGS, TYPE, true, false)
#define XI_SWIGLU_MMQ_ENTRIES(DT, TYPE) \
    XI_MMQ_ENTRY_SET(rmsnorm_matmul_swiglu_##DT, XI_MMQ_P_GLU, XI_MMQ_GLU_ARGS, TYPE, true, true)
