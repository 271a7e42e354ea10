// The attention kernel before split-K (shaders/xi_attention.cuh and attention.cu at commit 62942f8), frozen
// as tools/attention_bench.py's baseline ('old'); not part of the package, compiled only by that tool.
// Attention of one token over one kv head's cache, for up to XI_ATT_GMAX of that kv head's query heads
// (GQA: query heads h0 .. h0+gn-1 read the same k/v rows, so a key's rows are loaded once for all of
// them). The one body of attention.cu and attention_batched.cu: a row of either is bit-identical to
// the other, by construction.
//
// A block of 256 threads (8 warps); the keys 0..p in chunks of 32, chunk c to warp c % 8 (flash
// decoding within the block). In a chunk, lane j owns key 32c + j:
//   - scores: lane j's dot product of its k row with each query head (q staged in shared memory),
//     in 4 partial sums over d % 4, added as (s0 + s1) + (s2 + s3);
//   - online softmax per head over the chunk: warp max, a rescale of the running state, exp, warp sum;
//   - p @ V: lanes split head_dim (v rows read coalesced), each key's weight broadcast by a shuffle.
// Then the 8 warps' states of each head are merged through shared memory in warp order. Each head's
// arithmetic is its own (explicit fmaf, fixed order), the same whichever heads share its block: the
// host may group heads per block as suits the grid (_launch.attention_grid) without changing a bit.
#include "xi_common.cuh"

#define XI_ATT_WARPS 8
#define XI_ATT_MAXD 8  // head_dim / 32 per lane, at most
#define XI_ATT_GMAX 4  // query heads a block, at most

struct __align__(16) xi_att_smem {
    float q[XI_ATT_GMAX][32 * XI_ATT_MAXD];
    float m[XI_ATT_WARPS][XI_ATT_GMAX], l[XI_ATT_WARPS][XI_ATT_GMAX];
    float acc[XI_ATT_WARPS][XI_ATT_GMAX][32 * XI_ATT_MAXD];
};

// qv: query head h0 of the token (head g at qv + g*hd); kb, vb: key 0's k and v rows of the kv head
// (key j at + j*kv_row); keys 0..p (p >= 0); o: output head h0 (head g at o + g*hd); gn <= G heads.
template <int D, int G>  // head_dim / 32 per lane (rounded up), heads at most
__device__ __forceinline__ void xi_attend_heads(const float *__restrict__ qv, const float *__restrict__ kb,
                                                const float *__restrict__ vb, size_t_ kv_row, int p, int hd, int gn,
                                                float scale, float *__restrict__ o, xi_att_smem &sm) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int i = threadIdx.x; i < gn * hd; i += blockDim.x) sm.q[i / hd][i % hd] = qv[i];
    __syncthreads();
    float acc[G][D], m[G], ls[G];
#pragma unroll
    for (int g = 0; g < G; g++) {
#pragma unroll
        for (int i = 0; i < D; i++) acc[g][i] = 0.0f;
        m[g] = -XI_INF;
        ls[g] = 0.0f;
    }
    // k rows 16-byte aligned (head_dim % 4 == 0): the scores read k a float4 at a time; else a float
    // at a time, the same sums
    const bool vec = (hd & 3) == 0 && ((size_t_)kb & 15) == 0;
    for (int c0 = warp * 32; c0 <= p; c0 += XI_ATT_WARPS * 32) {
        const int j = c0 + lane, nk = min(32, p - c0 + 1);
        // scores of key j (lanes past p: -inf)
        float s[G];
        {
            float a[G][4];
#pragma unroll
            for (int g = 0; g < G; g++) a[g][0] = a[g][1] = a[g][2] = a[g][3] = 0.0f;
            if (lane < nk) {
                const float *kr = kb + (size_t_)j * kv_row;
                if (vec) {
#pragma unroll 4
                    for (int d = 0; d < hd; d += 4) {
                        const float4 k4 = *reinterpret_cast<const float4 *>(kr + d);
#pragma unroll
                        for (int g = 0; g < G; g++) {
                            const float4 q4 = *reinterpret_cast<const float4 *>(&sm.q[g][d]);
                            a[g][0] = __fmaf_rn(q4.x, k4.x, a[g][0]);
                            a[g][1] = __fmaf_rn(q4.y, k4.y, a[g][1]);
                            a[g][2] = __fmaf_rn(q4.z, k4.z, a[g][2]);
                            a[g][3] = __fmaf_rn(q4.w, k4.w, a[g][3]);
                        }
                    }
                } else {
                    for (int d = 0; d < hd; d += 4) {
#pragma unroll
                        for (int u = 0; u < 4; u++) {
                            if (d + u >= hd) break;
                            const float kd = kr[d + u];
#pragma unroll
                            for (int g = 0; g < G; g++) a[g][u] = __fmaf_rn(sm.q[g][d + u], kd, a[g][u]);
                        }
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
        const float *vr = vb + (size_t_)c0 * kv_row;
#pragma unroll 8
        for (int jj = 0; jj < 32; jj++) {
            if (jj >= nk) break;
            float vv[D];
#pragma unroll
            for (int i = 0; i < D; i++) {
                const int d = lane + 32 * i;
                vv[i] = d < hd ? vr[(size_t_)jj * kv_row + d] : 0.0f;
            }
#pragma unroll
            for (int g = 0; g < G; g++) {
                const float w = __shfl_sync(0xffffffffu, pw[g], jj);
#pragma unroll
                for (int i = 0; i < D; i++) acc[g][i] = __fmaf_rn(w, vv[i], acc[g][i]);
            }
        }
    }
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
    for (int idx = threadIdx.x; idx < gn * hd; idx += blockDim.x) {
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
        o[idx] = r * (1.0f / L);
    }
}

// The block's share of its kv head's query heads: gridDim.z blocks split the group of n_head / n_kv
// heads into runs of ceil(group / gridDim.z); *h0 gets the first head, the result is how many (0: none).
__device__ __forceinline__ int xi_att_heads(int n_head, int n_kv, int *h0) {
    const int group = n_head / n_kv, per = (group + gridDim.z - 1) / gridDim.z;
    const int g0 = blockIdx.z * per;
    *h0 = blockIdx.y * group + g0;
    return min(per, group - g0);
}

// Token row of out for heads h0.. (gn of them): keys 0..p of kb/vb, or zeros where p < 0, NaN where the
// shape is beyond the entry (head_dim > 32 * D, or more heads than a block runs). The heads run G at a
// time (a key's rows are read once a run); a head's arithmetic is the same in any run. One entry point
// per D (the host picks it by head_dim, _launch.attention_launch): instantiated together in one
// kernel, the wide ones' registers would cost the narrow ones occupancy and spills.
template <int D, int G>
__device__ __forceinline__ void xi_attend(const float *__restrict__ qv, const float *__restrict__ kb,
                                          const float *__restrict__ vb, size_t_ kv_row, int p, int hd, int gn,
                                          float scale, float *__restrict__ o) {
    __shared__ xi_att_smem sm;
    if (p < 0 || hd > 32 * D || gn > XI_ATT_GMAX) {
        for (int d = threadIdx.x; d < gn * hd; d += blockDim.x) o[d] = p < 0 ? 0.0f : XI_NAN;
        return;
    }
    for (int g = 0; g < gn; g += G) {
        if (g) __syncthreads();  // the previous run's merge has read the shared memory (and q)
        const size_t_ off = (size_t_)g * hd;
        xi_attend_heads<D, G>(qv + off, kb, vb, kv_row, p, hd, min(G, gn - g), scale, o + off, sm);
    }
}

// The entry points of a kernel: NAME (head_dim <= 64, the query heads of a block in one run), NAME_d4
// (<= 128, runs of 2), NAME_d8 (<= 256, a head at a time), each calling BODY<D, G>(args...).
#define XI_ATT_ENTRIES(NAME, BODY, PARAMS, ARGS)                                                         \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME PARAMS { xi_grid_begin(); BODY<2, XI_ATT_GMAX> ARGS; } \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME##_d4 PARAMS { xi_grid_begin(); BODY<4, 2> ARGS; }      \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME##_d8 PARAMS { xi_grid_begin(); BODY<8, 1> ARGS; }
// q (T, n_head, hd) f32 (row t at t*q_stride), k, v (ctx, n_kv, hd) f32, pos (T) i32 -> out (T, n_head, hd).
// Query row t attends keys 0..pos[t] inclusive (pos clamped to ctx - 1; window > 0: only keys j with
// pos[t] - j < window, i.e. the cache from row pos[t] - window + 1); query head h reads kv head
// h / (n_head / n_kv) (GQA); pos[t] < 0 gives a zero row. Grid (T, n_kv, z): block (t, kvh, z) runs
// the z-th share of kv head kvh's query heads (xi_att_heads), 256 threads; the math is
// xi_attention.cuh's. Entries attention (head_dim <= 64), attention_d4 (<= 128), attention_d8 (<= 256).
template <int D, int G>
__device__ __forceinline__ void attention_body(const float *__restrict__ q, const float *__restrict__ k,
                                               const float *__restrict__ v, const int32_t *__restrict__ pos,
                                               float *__restrict__ out, const xi_attention_c &c) {
    const int t = blockIdx.x, hd = c.head_dim;
    int h0;
    const int gn = xi_att_heads(c.n_head, c.n_kv, &h0);
    if (gn <= 0) return;
    int p = pos[t];
    if (p >= c.ctx) p = c.ctx - 1;
    const int s = (c.window > 0 && p >= c.window) ? p - c.window + 1 : 0;  // sliding window: keys s..p
    p -= s;
    const size_t_ kv_row = (size_t_)c.n_kv * hd, kvo = (size_t_)s * kv_row + (size_t_)blockIdx.y * hd;
    xi_attend<D, G>(q + (size_t_)t * c.q_stride + (size_t_)h0 * hd, k + kvo, v + kvo, kv_row, p, hd, gn, c.scale,
                    out + ((size_t_)t * c.n_head + h0) * hd);
}
XI_ATT_ENTRIES(attention, attention_body,
               (const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,
                const int32_t *__restrict__ pos, float *__restrict__ out, xi_attention_c c),
               (q, k, v, pos, out, c))
