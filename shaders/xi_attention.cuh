#pragma once
// Attention of one token over one kv head's cache, for up to XI_ATT_GMAX of that kv head's query heads
// (GQA: query heads h0 .. h0+gn-1 read the same k/v rows, so a key's rows are loaded once for all of
// them). The one body of attention.cu, attention_batched.cu and their f16-cache twins: a row of either
// is bit-identical to the other, by construction.
//
// Split-K (flash decoding, Dao et al. 2023). A row attending keys 0..p cuts them into segments of
// xi_att_seg_keys(p) keys (256, doubled as often as needed to keep at most XI_ATT_SEGS_MAX segments): a
// function of p and of these constants only, never of T, of the batch or of the device. Each segment's
// partial (max m, sum l, unnormalized p @ V r) per (head, dim) is computed the same way wherever it
// runs, and the partials are merged in segment order by xi_att_merge (online: running max, rescale).
// The launch (_launch.attention_launch) then only decides where the segments run:
//   - S == 1 (grid.y == n_kv): a block walks all the segments of its row and merges them in registers;
//   - S > 1 (grid.y == n_kv * S, T <= XI_ATT_SPLIT_T_MAX): block s of a row runs segments s, s + S', ...
//     (S' = min(S, segments)) and writes their partials to the workspace; the last of those S' blocks
//     to finish (an atomic counter, zeroed before the launch, reset by that block) merges them.
// Both give a (token, head) the same bits: the result never depends on the other tokens or heads of the
// launch, nor on S. With one segment (p < 256) the result is that of the single-pass kernel before
// split-K (one segment, merged with the initial state, is r * (1 / l) exactly).
//
// A segment: a block of 256 threads (8 warps); its keys in chunks of 32, chunk c to warp c % 8. In a
// chunk, lane j owns key 32c + j:
//   - scores: lane j's dot product of its k row with each query head (q staged in shared memory),
//     in 4 partial sums over d % 4, added as (s0 + s1) + (s2 + s3); the warp first stages the chunk's
//     k rows in shared memory 32 dims at a time, read coalesced (where head_dim % 4 == 0);
//   - online softmax per head over the chunk: warp max, a rescale of the running state, exp, warp sum;
//   - p @ V: lanes split head_dim (v rows read coalesced), each key's weight broadcast by a shuffle.
// Then the 8 warps' states of each head are merged through shared memory in warp order. Each head's
// arithmetic is its own (explicit fmaf, fixed order), the same whichever heads share its block: the
// host may group heads per block as suits the grid (_launch.attention_grid) without changing a bit.
//
// KV: float (an f32 cache) or uint16_t (an f16 cache: IEEE half bits, converted exactly to f32 as they
// are loaded; all arithmetic in f32).
#include "xi_common.cuh"

#define XI_ATT_WARPS 8
#define XI_ATT_MAXD 8  // head_dim / 32 per lane, at most
#define XI_ATT_GMAX 4  // query heads a block, at most
// the split-K constants: ops/_attention_split.py (SEG_KEYS, SEGS_MAX, SPLIT_T_MAX) mirrors them
#define XI_ATT_SEG_KEYS 256
#define XI_ATT_SEGS_MAX 32
#define XI_ATT_SPLIT_T_MAX 8
// DEEP segments (the decode entries): v rows a load round (8: no spill; 16 measured slower on the 8B shape),
// where the rows are not staged (below)
#define XI_ATT_VB 8
// DEEP segments where a v row is whole 16-byte pieces (head_dim * sizeof(KV) % 16 == 0, rows and cache
// 16-byte aligned): each warp copies its chunk's v rows into its part of the dynamic shared memory by
// cp.async as the chunk starts, beside its k loads, and p @ V reads them there after the softmax: one
// round trip for the chunk's v instead of one a XI_ATT_VB rows. A warp's part: 32 rows of 32 D values of
// KV; the launch gives XI_ATT_WARPS of them at the f32 size for either cache (backends/cuda/_launch.py
// att_vstage_bytes) where the device's shared memory holds them beside the static; where it gives fewer
// bytes (%dynamic_smem_size), the rows are not staged.
#define XI_ATT_VST(D) (32 * (D))
__device__ __forceinline__ unsigned xi_dynamic_smem_size() {
    unsigned n;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
    return n;
}
// warp's part of the staged v rows (the dynamic shared memory of the decode entries only)
template <int D, typename KV> __device__ __forceinline__ KV *xi_att_vrows(int warp) {
    extern __shared__ __align__(16) uint8_t xi_att_dyn[];
    return reinterpret_cast<KV *>(xi_att_dyn) + (size_t_)warp * 32 * XI_ATT_VST(D);
}

// Keys a segment of a row attending keys 0..p (p >= 0): 256 * ceil((p + 1) / (256 * XI_ATT_SEGS_MAX)).
__device__ __forceinline__ int xi_att_seg_keys(int p) {
    const int per = XI_ATT_SEG_KEYS * XI_ATT_SEGS_MAX;
    return XI_ATT_SEG_KEYS * (int)(((long long)p + per) / per);
}

// a warp's staged k rows: 32 keys x 32 dims, rows padded to 36 floats (a lane's float4 reads of its
// own row and the quarter-warps' float4 stores of 4 rows' pieces are free of bank conflicts)
#define XI_ATT_KST 36

struct __align__(16) xi_att_smem {
    float q[XI_ATT_GMAX][32 * XI_ATT_MAXD];
    float m[XI_ATT_WARPS][XI_ATT_GMAX], l[XI_ATT_WARPS][XI_ATT_GMAX];
    union {  // k staging while the warps walk their chunks; then the warps' states (a barrier between)
        float acc[XI_ATT_WARPS][XI_ATT_GMAX][32 * XI_ATT_MAXD];
        float k[XI_ATT_WARPS][32 * XI_ATT_KST];
    };
};

__device__ __forceinline__ float xi_kv1(const float *p) { return *p; }
__device__ __forceinline__ float xi_kv1(const uint16_t *p) { return xi_h2f(*p); }
__device__ __forceinline__ float4 xi_kv4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
__device__ __forceinline__ float4 xi_kv4(const uint16_t *p) {
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    return make_float4(xi_h2f((uint16_t)(u.x & 0xffffu)), xi_h2f((uint16_t)(u.x >> 16)),
                       xi_h2f((uint16_t)(u.y & 0xffffu)), xi_h2f((uint16_t)(u.y >> 16)));
}

// Merge the partial (m, l, r) of the next segment into the running state (M, L, R); the state starts at
// (-inf, 0, 0), so the first merge gives (m, l, r) exactly. Explicit roundings: no contraction differs
// between the two places that call it.
__device__ __forceinline__ void xi_att_merge(float &M, float &L, float &R, float m, float l, float r) {
    const float mn = fmaxf(M, m);
    const float a = M == -XI_INF ? 0.0f : expf(M - mn);
    const float b = m == -XI_INF ? 0.0f : expf(m - mn);
    L = __fmaf_rn(L, a, __fmul_rn(l, b));
    R = __fmaf_rn(R, a, __fmul_rn(r, b));
    M = mn;
}

// One segment: keys 0..n-1 (n >= 1) of kb/vb (key j at + j*kv_row) for the gn <= G heads whose q is in
// sm.q; thread idx < gn * hd gets the partial (pm, pl, pr) of head idx / hd, dim idx % hd (one element
// a thread: G * 32 * D == 256 for every entry). vec: k rows read 4 values at a time.
template <int D, int G, typename KV, bool DEEP = false>
__device__ __forceinline__ void xi_att_segment(const KV *__restrict__ kb, const KV *__restrict__ vb, size_t_ kv_row,
                                               int n, int hd, int gn, float scale, bool vec, bool vst, xi_att_smem &sm,
                                               float &pm, float &pl, float &pr) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float acc[G][D], m[G], ls[G];
#pragma unroll
    for (int g = 0; g < G; g++) {
#pragma unroll
        for (int i = 0; i < D; i++) acc[g][i] = 0.0f;
        m[g] = -XI_INF;
        ls[g] = 0.0f;
    }
    for (int c0 = warp * 32; c0 < n; c0 += XI_ATT_WARPS * 32) {
        const int j = c0 + lane, nk = min(32, n - c0);
        if (DEEP && vst) {  // the chunk's v rows into the warp's part, 16 bytes a lane a copy, rows in turn
            __syncwarp();   // the previous chunk's reads of the part are done
            KV *const vs = xi_att_vrows<D, KV>(warp);
            const int pcs = hd * (int)sizeof(KV) / 16, rows = 32 / pcs;  // pieces a row (<= 32), rows a round
            const int r = lane / pcs, pc = lane - r * pcs;
            if (r < rows)
                for (int r0 = r; r0 < nk; r0 += rows)
                    xi_cp16(reinterpret_cast<uint8_t *>(vs + r0 * XI_ATT_VST(D)) + 16 * pc,
                            reinterpret_cast<const uint8_t *>(vb + (size_t_)(c0 + r0) * kv_row) + 16 * pc);
            xi_cp_commit();
        }
        // scores of key j (lanes past the segment: -inf)
        float s[G];
        {
            float a[G][4];
#pragma unroll
            for (int g = 0; g < G; g++) a[g][0] = a[g][1] = a[g][2] = a[g][3] = 0.0f;
            if (vec) {
                // the chunk's k rows staged in shared memory 32 dims at a time, each piece read
                // coalesced (a load instruction: 4 keys' 128-byte pieces (f32), lane r4 + 4 i's key,
                // dims c4..c4+3), the next piece's loads in flight while this one's products run;
                // lane j then reads its key's row from shared memory: the same products in the same
                // order as reading it from global memory (a lane's 16-byte loads of its own row, 32
                // rows a warp, ~32 L1 wavefronts an instruction against 4 here). H200, 2026-12-03:
                // 512-token prefill 15.9k -> 17.7k tok/s (Llama-3.1-8B shape), 66.7k -> 69.6k (1B);
                // decode at ~600 keys no faster (8B 2.411 -> 2.42 ms a step, 1B 0.714 -> 0.708):
                // there a block's chunk waits on its loads' round trips, not on L1)
                float *st = sm.k[warp];
                const int r4 = lane >> 3, c4 = (lane & 7) * 4;
                // DEEP (the decode entries): every piece's loads at once, one round trip for the
                // chunk's k instead of one a piece; else the next piece's loads in flight
                float4 nx[DEEP ? D : 1][8];
#pragma unroll
                for (int pc = 0; pc < (DEEP ? D : 1); pc++)
#pragma unroll
                    for (int i = 0; i < 8; i++)
                        if (r4 + 4 * i < nk && 32 * pc + c4 < hd)
                            nx[pc][i] = xi_kv4(kb + (size_t_)(c0 + r4 + 4 * i) * kv_row + 32 * pc + c4);
#pragma unroll
                for (int pc = 0; pc < D; pc++) {
                    const int d0 = 32 * pc;
                    if (d0 >= hd) break;
                    __syncwarp();  // the previous piece's reads are done
#pragma unroll
                    for (int i = 0; i < 8; i++)
                        if (r4 + 4 * i < nk && d0 + c4 < hd)
                            *reinterpret_cast<float4 *>(&st[(r4 + 4 * i) * XI_ATT_KST + c4]) = nx[DEEP ? pc : 0][i];
                    if (!DEEP && pc + 1 < D && d0 + 32 < hd) {
#pragma unroll
                        for (int i = 0; i < 8; i++)
                            if (r4 + 4 * i < nk && d0 + 32 + c4 < hd)
                                nx[0][i] = xi_kv4(kb + (size_t_)(c0 + r4 + 4 * i) * kv_row + d0 + 32 + c4);
                    }
                    __syncwarp();
                    if (lane < nk) {
                        const float *kr = &st[lane * XI_ATT_KST];
                        const int w = min(32, hd - d0);
#pragma unroll
                        for (int d = 0; d < 32; d += 4) {
                            if (d >= w) break;
                            const float4 k4 = *reinterpret_cast<const float4 *>(kr + d);
#pragma unroll
                            for (int g = 0; g < G; g++) {
                                const float4 q4 = *reinterpret_cast<const float4 *>(&sm.q[g][d0 + d]);
                                a[g][0] = __fmaf_rn(q4.x, k4.x, a[g][0]);
                                a[g][1] = __fmaf_rn(q4.y, k4.y, a[g][1]);
                                a[g][2] = __fmaf_rn(q4.z, k4.z, a[g][2]);
                                a[g][3] = __fmaf_rn(q4.w, k4.w, a[g][3]);
                            }
                        }
                    }
                }
            } else if (lane < nk) {  // k a value at a time from lane j's own row
                const KV *kr = kb + (size_t_)j * kv_row;
                for (int d = 0; d < hd; d += 4) {
#pragma unroll
                    for (int u = 0; u < 4; u++) {
                        if (d + u >= hd) break;
                        const float kd = xi_kv1(kr + d + u);
#pragma unroll
                        for (int g = 0; g < G; g++) a[g][u] = __fmaf_rn(sm.q[g][d + u], kd, a[g][u]);
                    }
                }
            }
#pragma unroll
            for (int g = 0; g < G; g++)
                s[g] = lane < nk ? ((a[g][0] + a[g][1]) + (a[g][2] + a[g][3])) * scale : -XI_INF;
        }
        // online softmax over the chunk, per head; pw[g]: key j's weight
        float pw[G];
#pragma unroll
        for (int g = 0; g < G; g++) {
            if (g >= gn) { pw[g] = 0.0f; continue; }
            const float mn = fmaxf(m[g], xi_warp_max(s[g]));
            const float corr = expf(m[g] - mn);
            pw[g] = expf(s[g] - mn);
            ls[g] = __fmaf_rn(ls[g], corr, xi_warp_sum(pw[g]));
#pragma unroll
            for (int i = 0; i < D; i++) acc[g][i] *= corr;
            m[g] = mn;
        }
        // p @ V over the chunk's keys in order
        const KV *vr = vb + (size_t_)c0 * kv_row;
        if (DEEP && vst) {  // the staged rows, in key order
            xi_cp_wait_all();
            __syncwarp();  // every lane's copies are in
            const KV *const vs = xi_att_vrows<D, KV>(warp);
#pragma unroll 8
            for (int jj = 0; jj < 32; jj++) {
                if (jj >= nk) break;
                float vv[D];
#pragma unroll
                for (int i = 0; i < D; i++) {
                    const int d = lane + 32 * i;
                    vv[i] = d < hd ? xi_kv1(vs + jj * XI_ATT_VST(D) + d) : 0.0f;
                }
#pragma unroll
                for (int g = 0; g < G; g++) {
                    const float w = __shfl_sync(0xffffffffu, pw[g], jj);
#pragma unroll
                    for (int i = 0; i < D; i++) acc[g][i] = __fmaf_rn(w, vv[i], acc[g][i]);
                }
            }
        } else if constexpr (DEEP) {  // XI_ATT_VB rows' loads a round, then their products in key order
#pragma unroll
            for (int j0 = 0; j0 < 32; j0 += XI_ATT_VB) {
                if (j0 >= nk) break;
                float vv[XI_ATT_VB][D];
#pragma unroll
                for (int jj = 0; jj < XI_ATT_VB; jj++)
#pragma unroll
                    for (int i = 0; i < D; i++) {
                        const int d = lane + 32 * i;
                        vv[jj][i] = j0 + jj < nk && d < hd ? xi_kv1(vr + (size_t_)(j0 + jj) * kv_row + d) : 0.0f;
                    }
#pragma unroll
                for (int jj = 0; jj < XI_ATT_VB; jj++) {
                    if (j0 + jj >= nk) break;
#pragma unroll
                    for (int g = 0; g < G; g++) {
                        const float w = __shfl_sync(0xffffffffu, pw[g], j0 + jj);
#pragma unroll
                        for (int i = 0; i < D; i++) acc[g][i] = __fmaf_rn(w, vv[jj][i], acc[g][i]);
                    }
                }
            }
        } else {  // a row's loads at a time, 8 rows unrolled
#pragma unroll 8
            for (int jj = 0; jj < 32; jj++) {
                if (jj >= nk) break;
                float vv[D];
#pragma unroll
                for (int i = 0; i < D; i++) {
                    const int d = lane + 32 * i;
                    vv[i] = d < hd ? xi_kv1(vr + (size_t_)jj * kv_row + d) : 0.0f;
                }
#pragma unroll
                for (int g = 0; g < G; g++) {
                    const float w = __shfl_sync(0xffffffffu, pw[g], jj);
#pragma unroll
                    for (int i = 0; i < D; i++) acc[g][i] = __fmaf_rn(w, vv[i], acc[g][i]);
                }
            }
        }
    }
    __syncthreads();  // every warp's k staging is read before the states overwrite it
#pragma unroll
    for (int g = 0; g < G; g++) {
        if (g >= gn) continue;
        if (lane == 0) {
            sm.m[warp][g] = m[g];
            sm.l[warp][g] = ls[g];
        }
#pragma unroll
        for (int i = 0; i < D; i++) sm.acc[warp][g][lane + 32 * i] = acc[g][i];
    }
    __syncthreads();
    const int idx = threadIdx.x;
    if (idx < gn * hd) {
        const int g = idx / hd, d = idx - g * hd;
        float M = -XI_INF;
#pragma unroll
        for (int w = 0; w < XI_ATT_WARPS; w++) M = fmaxf(M, sm.m[w][g]);
        float L = 0.0f, r = 0.0f;
#pragma unroll
        for (int w = 0; w < XI_ATT_WARPS; w++) {
            const float fw = sm.m[w][g] == -XI_INF ? 0.0f : expf(sm.m[w][g] - M);
            L = __fmaf_rn(sm.l[w][g], fw, L);
            r = __fmaf_rn(sm.acc[w][g][d], fw, r);
        }
        pm = M;
        pl = L;
        pr = r;
    }
    __syncthreads();  // the next segment (or run) rewrites the shared state
}

// Ask L2 for the k and v rows of keys [0, n) (key j at kb / vb + j * kv_row, hd values each): this
// block's share of the 128-byte lines (share z of nz: the blocks of the same kv head and segment split
// them), each thread a line in turn (prefetch.L2: a hint, no value changes; xi_common.cuh). Why: a lane
// reads its key's k row in dependent groups of 4 float4 loads and a warp its chunk's v rows in groups
// of 8, ~12 round trips a chunk; from DRAM each is ~1 us, so a 512-key segment took ~8 us alone and
// ~13 in a decode step (H200, Llama-3.1-8B shape, launch timeline). With the segment's 0.5 MB (f32,
// head_dim 128) asked for at once, the rows stream from DRAM at its bandwidth and the round trips
// hit L2. A row of B bytes that starts inside a line spans ceil(B / 128) + 1 lines: where rows need
// not start on a line (B, the row stride or a cache pointer not a multiple of 128 bytes: head_dim 48
// or 112 in f16, say), a row gets one more address, its last byte.
template <typename KV>
__device__ __forceinline__ void xi_att_prefetch(const KV *kb, const KV *vb, size_t_ kv_row, int n, int hd, int z,
                                                int nz) {
    const int bytes = hd * (int)sizeof(KV);
    const bool lined = ((((size_t_)bytes | kv_row * sizeof(KV)) | ((size_t_)kb | (size_t_)vb)) & 127) == 0;
    const int lines = ((bytes + 127) >> 7) + (lined ? 0 : 1);  // a row's addresses: r + min(128 l, bytes - 1)
    const int all = 2 * n * lines;
    for (int e = z * (int)blockDim.x + (int)threadIdx.x; e < all; e += nz * (int)blockDim.x) {
        const int row = e / lines, l = e - row * lines, j = row >> 1;
        const KV *r = ((row & 1) ? vb : kb) + (size_t_)j * kv_row;
        asm volatile("prefetch.L2 [%0];" ::"l"(reinterpret_cast<const uint8_t *>(r) + min(128 * l, bytes - 1)));
    }
}

// The block's kv head and share of its query heads: grid.y = n_kv * S (S split-K blocks a kv head,
// *s gets this block's index among them), gridDim.z blocks split the group of n_head / n_kv heads into
// runs of ceil(group / gridDim.z); *h0 gets the first head, the result is how many (0: none).
__device__ __forceinline__ int xi_att_heads(int n_head, int n_kv, int *h0, int *kvh, int *s) {
    const int S = max(1, (int)gridDim.y / n_kv);
    *kvh = blockIdx.y / S;
    *s = blockIdx.y - *kvh * S;
    const int group = n_head / n_kv, per = (group + gridDim.z - 1) / gridDim.z;
    const int g0 = blockIdx.z * per;
    *h0 = *kvh * group + g0;
    return min(per, group - g0);
}

// Token t's output heads h0.. (gn of them, o) over keys 0..p of kb/vb: zeros where p < 0, NaN where the
// shape is beyond the entry (head_dim > 32 * D, more heads than a block runs, or a split launch past
// XI_ATT_SPLIT_T_MAX tokens). s, S: this block's index among the S split-K blocks of its row (see the
// top); part: this (t, h0)'s partials, head g's segment i at part + (g * XI_ATT_SEGS_MAX + i) * (hd + 2)
// as (m, l, r[hd]); count: its counter. The heads run G at a time (a key's rows are read once a run).
// One entry point per D (the host picks it by head_dim, _launch.attention_launch): instantiated
// together in one kernel, the wide ones' registers would cost the narrow ones occupancy and spills.
// QOUT (the attention_quantize entries; head_dim % 32 == 0): each output value is also quantized,
// a warp's 32 consecutive values (32 dims of one head) one q8_1 block (xi_q8_1_warp): its code at
// qc[e] for o[e], its (d, s) at qp[e / 32] -- the planar q8_1 of the (T, n_head hd) output, the next
// product's tokens (``quantize_q8_1``'s bits on out, without its launch).
template <int D, int G, typename KV, bool QOUT = false, bool DEEP = false>
__device__ __forceinline__ void xi_attend(const float *__restrict__ qv, const KV *__restrict__ kb,
                                          const KV *__restrict__ vb, size_t_ kv_row, int p, int hd, int gn,
                                          float scale, float *__restrict__ o, int t, int s, int S,
                                          float *__restrict__ part, int *__restrict__ count,
                                          uint8_t *__restrict__ qc = nullptr, float2 *__restrict__ qp = nullptr) {
    __shared__ xi_att_smem sm;
    __shared__ int is_last;
    // DEEP: the first run's q (one value a thread: G * hd <= 256), asked for before p is looked at, so
    // that its load and pos's are in flight together (q lies in the launch's buffer whatever p is); the
    // other entries load it in the run, as before
    const int idx = threadIdx.x;  // (head idx / hd of the run, dim idx % hd)
    const float q0 = DEEP && idx < min(G, gn) * hd ? qv[idx] : 0.0f;
    if (p < 0 || hd > 32 * D || gn > XI_ATT_GMAX || (S > 1 && t >= XI_ATT_SPLIT_T_MAX) || (QOUT && (hd & 31))) {
        if (s == 0)
            for (int d = threadIdx.x; d < gn * hd; d += blockDim.x) {
                o[d] = p < 0 ? 0.0f : XI_NAN;
                if (QOUT) {  // a zero row's block: codes 0, d = s = 0 (quantize_q8_1 of zeros)
                    qc[d] = 0;
                    if ((d & 31) == 0) qp[d >> 5] = p < 0 ? make_float2(0.0f, 0.0f) : make_float2(XI_NAN, XI_NAN);
                }
            }
        return;
    }
    const int seg = xi_att_seg_keys(p), nseg = (int)(((long long)p + seg) / seg);
    const int parts = min(S, nseg);  // the blocks of this row with segments to run
    if (s >= parts) return;
    const bool direct = parts == 1;  // this block runs every segment: merged in registers
    // k rows 16-byte aligned for f32, 8 for f16 (head_dim % 4 == 0): the scores read k 4 values at a
    // time; else one at a time, the same sums
    const bool vec = (hd & 3) == 0 && ((size_t_)kb & (4 * sizeof(KV) - 1)) == 0;
    // the decode entries' v rows staged by cp.async where they are whole 16-byte pieces (see XI_ATT_VST)
    const bool vst = DEEP && hd > 0 && ((hd * sizeof(KV)) & 15) == 0 &&
                     (((size_t_)vb | kv_row * sizeof(KV)) & 15) == 0 &&
                     xi_dynamic_smem_size() >= (unsigned)(XI_ATT_WARPS * 32 * XI_ATT_VST(D) * sizeof(KV));
    // the first segment's rows now, each next one's as the one before starts (the first run of heads);
    // decode-sized launches only (T <= XI_ATT_SPLIT_T_MAX): in a prompt's launch the rows of a chunk
    // share their keys, which the loads of the earlier rows bring to L2 anyway, and there the requests
    // cost more than they hide (H200, 2026-12-02: the 8B 512-token prefill 16.2k -> 15.9k tok/s with
    // them; the gate keeps that launch as it was before the prefetch)
    const bool pf = gridDim.x <= XI_ATT_SPLIT_T_MAX;
    if (pf)
        xi_att_prefetch(kb + (size_t_)s * seg * kv_row, vb + (size_t_)s * seg * kv_row, kv_row, min(seg, p + 1 - s * seg), hd,
                    (int)blockIdx.z, (int)gridDim.z);
    for (int g = 0; g < gn; g += G) {
        const int gr = min(G, gn - g);
        if (DEEP && g == 0) {
            if (idx < gr * hd) sm.q[idx / hd][idx % hd] = q0;
        } else {
            for (int i = idx; i < gr * hd; i += blockDim.x) sm.q[i / hd][i % hd] = qv[(size_t_)g * hd + i];
        }
        __syncthreads();
        float M = -XI_INF, L = 0.0f, R = 0.0f;
        for (int i = s; i < nseg; i += parts) {
            const size_t_ k0 = (size_t_)i * seg;
            if (pf && g == 0 && i + parts < nseg)
                xi_att_prefetch(kb + (k0 + (size_t_)parts * seg) * kv_row, vb + (k0 + (size_t_)parts * seg) * kv_row, kv_row,
                                min(seg, p + 1 - (i + parts) * seg), hd, (int)blockIdx.z, (int)gridDim.z);
            float pm = 0.0f, pl = 0.0f, pr = 0.0f;
            xi_att_segment<D, G, KV, DEEP>(kb + k0 * kv_row, vb + k0 * kv_row, kv_row, min(seg, p + 1 - i * seg), hd, gr,
                                           scale, vec, vst, sm, pm, pl, pr);
            if (idx < gr * hd) {
                if (direct) {
                    xi_att_merge(M, L, R, pm, pl, pr);
                } else {
                    const int gi = idx / hd, d = idx - gi * hd;
                    float *w = part + ((size_t_)(g + gi) * XI_ATT_SEGS_MAX + i) * (hd + 2);
                    if (d == 0) {
                        w[0] = pm;
                        w[1] = pl;
                    }
                    w[2 + d] = pr;
                }
            }
        }
        if (direct && idx < gr * hd) {
            const float r = R * (1.0f / L);
            o[(size_t_)g * hd + idx] = r;
            if (QOUT) xi_q8_1_warp(r, qc + (size_t_)g * hd + idx, qp + (((size_t_)g * hd + idx) >> 5));
        }
    }
    if (direct) return;
    // the last of the row's blocks to finish merges the partials of every segment in order
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const int done = atomicAdd(count, 1);
        is_last = done == parts - 1;
        if (is_last) atomicExch(count, 0);  // ready for the next launch
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    for (int e = idx; e < gn * hd; e += blockDim.x) {
        const int g = e / hd, d = e - g * hd;
        float M = -XI_INF, L = 0.0f, R = 0.0f;
        for (int i = 0; i < nseg; i++) {
            const float *w = part + ((size_t_)g * XI_ATT_SEGS_MAX + i) * (hd + 2);
            xi_att_merge(M, L, R, __ldcg(w), __ldcg(w + 1), __ldcg(w + 2 + d));
        }
        const float r = R * (1.0f / L);
        o[e] = r;
        if (QOUT) xi_q8_1_warp(r, qc + e, qp + (e >> 5));
    }
}

// attention (attention.cu, attention_f16.cu): q (T, n_head, hd) f32 (row t at t*q_stride), k, v (ctx,
// n_kv, hd) KV, pos (T) i32 -> out (T, n_head, hd); part, count: the split-K workspace (see the top).
// Query row t attends keys 0..pos[t] inclusive (pos clamped to ctx - 1; window > 0: only keys j with
// pos[t] - j < window, i.e. the cache from row pos[t] - window + 1); query head h reads kv head
// h / (n_head / n_kv) (GQA); pos[t] < 0 gives a zero row. Grid (T, n_kv * S, z): block (t, kvh * S + s,
// z) runs split-K share s of the z-th share of kv head kvh's query heads (xi_att_heads), 256 threads.
template <int D, int G, typename KV, bool QOUT = false, bool DEEP = false, typename C = xi_attention_c>
__device__ __forceinline__ void attention_body(const float *__restrict__ q, const KV *__restrict__ k,
                                               const KV *__restrict__ v, const int32_t *__restrict__ pos,
                                               float *__restrict__ out, float *__restrict__ part,
                                               int32_t *__restrict__ count, const C &c,
                                               uint8_t *__restrict__ xq = nullptr) {
    const int t = blockIdx.x, hd = c.head_dim, S = max(1, (int)gridDim.y / c.n_kv);
    int h0, kvh, s;
    const int gn = xi_att_heads(c.n_head, c.n_kv, &h0, &kvh, &s);
    if (gn <= 0) return;
    int p = pos[t];
    if (p >= c.ctx) p = c.ctx - 1;
    const int w0 = (c.window > 0 && p >= c.window) ? p - c.window + 1 : 0;  // sliding window: keys w0..p
    p -= w0;
    const size_t_ kv_row = (size_t_)c.n_kv * hd, kvo = (size_t_)w0 * kv_row + (size_t_)kvh * hd;
    const size_t_ th = (size_t_)t * c.n_head + h0;
    float2 *qp = QOUT ? reinterpret_cast<float2 *>(xq + (size_t_)c.T * c.n_head * hd) + ((th * hd) >> 5) : nullptr;
    xi_attend<D, G, KV, QOUT, DEEP>(q + (size_t_)t * c.q_stride + (size_t_)h0 * hd, k + kvo, v + kvo, kv_row, p, hd, gn,
                              c.scale, out + th * hd, t, s, S, part + th * XI_ATT_SEGS_MAX * (hd + 2), count + th,
                              QOUT ? xq + th * hd : nullptr, qp);
}

// attention_batched (attention_batched.cu, attention_batched_f16.cu): q (T, n_head, hd) f32 (row t at
// t*q_stride), k, v (rows, n_kv, hd) KV, first, last (T) i32 -> out (T, n_head, hd); part, count as
// attention's. Query row t attends key rows first[t]..last[t] inclusive (last clamped to rows - 1;
// window > 0: first raised to last - window + 1); first < 0 or last < first gives a zero row. Query
// head h reads kv head h / (n_head / n_kv) (GQA). attention over the cache starting at row first[t]
// (the same body), so a row is bit-identical to attention with pos = last - first on that cache.
template <int D, int G, typename KV, bool QOUT = false, bool DEEP = false, typename C = xi_attention_batched_c>
__device__ __forceinline__ void attention_batched_body(const float *__restrict__ q, const KV *__restrict__ k,
                                                       const KV *__restrict__ v, const int32_t *__restrict__ first,
                                                       const int32_t *__restrict__ last, float *__restrict__ out,
                                                       float *__restrict__ part, int32_t *__restrict__ count,
                                                       const C &c, uint8_t *__restrict__ xq = nullptr) {
    const int t = blockIdx.x, hd = c.head_dim, S = max(1, (int)gridDim.y / c.n_kv);
    int h0, kvh, s;
    const int gn = xi_att_heads(c.n_head, c.n_kv, &h0, &kvh, &s);
    if (gn <= 0) return;
    int f = first[t];
    int l = last[t];
    if (l >= c.rows) l = c.rows - 1;
    if (c.window > 0 && f >= 0 && l - f >= c.window) f = l - c.window + 1;  // sliding window
    const int p = (f < 0 || l < f) ? -1 : l - f;
    const size_t_ kv_row = (size_t_)c.n_kv * hd;
    const size_t_ kvo = (p < 0 ? 0 : (size_t_)f * kv_row) + (size_t_)kvh * hd;
    const size_t_ th = (size_t_)t * c.n_head + h0;
    float2 *qp = QOUT ? reinterpret_cast<float2 *>(xq + (size_t_)c.T * c.n_head * hd) + ((th * hd) >> 5) : nullptr;
    xi_attend<D, G, KV, QOUT, DEEP>(q + (size_t_)t * c.q_stride + (size_t_)h0 * hd, k + kvo, v + kvo, kv_row, p, hd, gn,
                              c.scale, out + th * hd, t, s, S, part + th * XI_ATT_SEGS_MAX * (hd + 2), count + th,
                              QOUT ? xq + th * hd : nullptr, qp);
}

// The entry points of a kernel: NAME (head_dim <= 64, the query heads of a block in one run), NAME_d4
// (<= 128, runs of 2), NAME_d8 (<= 256, a head at a time), each calling BODY<D, G, KV>(args...); and
// the decode entries NAME_s, NAME_d4s (the same D, G; DEEP segments: a chunk's k in one load round, its
// v rows XI_ATT_VB a round; up to 255 registers, one block an SM), which the host launches where T <=
// XI_ATT_SPLIT_T_MAX (_launch.attention_launch): there a launch is a block an SM or fewer (96 blocks
// for Llama-3.1-8B's heads at ~600 keys), so occupancy costs nothing and each chunk waits on 1 + 4
// load rounds instead of 4 + 4. Their rows are the other entries' bit for bit (the same products in
// the same order).
#define XI_ATT_ENTRIES(NAME, BODY, KV, PARAMS, ARGS)                                                          \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME PARAMS { xi_grid_begin(); BODY<2, XI_ATT_GMAX, KV> ARGS; } \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME##_d4 PARAMS { xi_grid_begin(); BODY<4, 2, KV> ARGS; }      \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME##_d8 PARAMS { xi_grid_begin(); BODY<8, 1, KV> ARGS; }      \
    extern "C" __global__ void __launch_bounds__(256, 1) NAME##_s PARAMS {                                          \
        xi_grid_begin();                                                                                         \
        BODY<2, XI_ATT_GMAX, KV, false, true> ARGS;                                                              \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(256, 1) NAME##_d4s PARAMS { xi_grid_begin(); BODY<4, 2, KV, false, true> ARGS; }

// The attention_quantize entries (cuda only): BODY<D, G, KV, true>, the xq pointer after count.
#define XI_ATT_QUANT_ENTRIES(NAME, BODY, KV, PARAMS, ARGS)                                                          \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME PARAMS { xi_grid_begin(); BODY<2, XI_ATT_GMAX, KV, true> ARGS; } \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME##_d4 PARAMS { xi_grid_begin(); BODY<4, 2, KV, true> ARGS; }      \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME##_d8 PARAMS { xi_grid_begin(); BODY<8, 1, KV, true> ARGS; }      \
    extern "C" __global__ void __launch_bounds__(256, 1) NAME##_s PARAMS {                                                \
        xi_grid_begin();                                                                                               \
        BODY<2, XI_ATT_GMAX, KV, true, true> ARGS;                                                                     \
    }                                                                                                                  \
    extern "C" __global__ void __launch_bounds__(256, 1) NAME##_d4s PARAMS { xi_grid_begin(); BODY<4, 2, KV, true, true> ARGS; }

#define XI_ATT_PARAMS(KV) \
    (const float *__restrict__ q, const KV *__restrict__ k, const KV *__restrict__ v, const int32_t *__restrict__ pos, \
     float *__restrict__ out, float *__restrict__ part, int32_t *__restrict__ count, xi_attention_c c)
#define XI_ATT_BATCHED_PARAMS(KV)                                                                               \
    (const float *__restrict__ q, const KV *__restrict__ k, const KV *__restrict__ v,                            \
     const int32_t *__restrict__ first, const int32_t *__restrict__ last, float *__restrict__ out,              \
     float *__restrict__ part, int32_t *__restrict__ count, xi_attention_batched_c c)
#define XI_ATT_QUANT_PARAMS(KV)                                                                                  \
    (const float *__restrict__ q, const KV *__restrict__ k, const KV *__restrict__ v, const int32_t *__restrict__ pos, \
     float *__restrict__ out, float *__restrict__ part, int32_t *__restrict__ count, uint8_t *__restrict__ xq,   \
     xi_attention_quantize_c c)
#define XI_ATT_BATCHED_QUANT_PARAMS(KV)                                                                         \
    (const float *__restrict__ q, const KV *__restrict__ k, const KV *__restrict__ v,                            \
     const int32_t *__restrict__ first, const int32_t *__restrict__ last, float *__restrict__ out,              \
     float *__restrict__ part, int32_t *__restrict__ count, uint8_t *__restrict__ xq, xi_attention_batched_quantize_c c)
