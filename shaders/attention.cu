#include "xi_common.cuh"
// q (T, n_head, hd) f32 (row t at t*q_stride), k, v (ctx, n_kv, hd) f32, pos (T) i32 -> out (T, n_head, hd).
// Query row t attends keys 0..pos[t] inclusive; query head h reads kv head h / (n_head / n_kv) (GQA);
// pos[t] < 0 gives a zero row. One block of 256 threads (8 warps) per (t, head): each warp runs an
// online softmax over keys j = warp, warp+8, ... (lanes split head_dim, so k/v rows are read
// coalesced), then the 8 partial states are merged through shared memory. head_dim <= 256, any ctx.
#define XI_ATT_WARPS 8
#define XI_ATT_MAXD 8  // head_dim / 32 per lane, at most
extern "C" __global__ void __launch_bounds__(256) attention(const float *__restrict__ q, const float *__restrict__ k,
                                                            const float *__restrict__ v, const int32_t *__restrict__ pos,
                                                            float *__restrict__ out, xi_attention_c c) {
    __shared__ float s_m[XI_ATT_WARPS], s_l[XI_ATT_WARPS];
    __shared__ float s_acc[XI_ATT_WARPS][32 * XI_ATT_MAXD];
    const int t = blockIdx.x, h = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int hd = c.head_dim;
    float *o = out + ((size_t_)t * c.n_head + h) * hd;
    int p = pos[t];
    if (p < 0 || hd > 32 * XI_ATT_MAXD) {
        for (int d = threadIdx.x; d < hd; d += blockDim.x) o[d] = p < 0 ? 0.0f : XI_NAN;
        return;
    }
    if (p >= c.ctx) p = c.ctx - 1;
    const int kvh = h / (c.n_head / c.n_kv);
    const float *qv = q + (size_t_)t * c.q_stride + (size_t_)h * hd;
    const size_t_ kv_row = (size_t_)c.n_kv * hd;
    const float *kb = k + (size_t_)kvh * hd, *vb = v + (size_t_)kvh * hd;
    float qr[XI_ATT_MAXD], acc[XI_ATT_MAXD];
#pragma unroll
    for (int i = 0; i < XI_ATT_MAXD; i++) {
        const int d = lane + 32 * i;
        qr[i] = d < hd ? qv[d] : 0.0f;
        acc[i] = 0.0f;
    }
    float m = -XI_INF, l = 0.0f;
    // key j's k and v values of this lane, loaded one key ahead (the next key's loads are in flight
    // while this one is summed; the sums are those of a plain loop)
    float kn[XI_ATT_MAXD], vn[XI_ATT_MAXD];
    auto load_kv = [&](int j) {
        const float *kr = kb + (size_t_)j * kv_row, *vr = vb + (size_t_)j * kv_row;
#pragma unroll
        for (int i = 0; i < XI_ATT_MAXD; i++) {
            const int d = lane + 32 * i;
            kn[i] = d < hd ? kr[d] : 0.0f;
            vn[i] = d < hd ? vr[d] : 0.0f;
        }
    };
    if (warp <= p) load_kv(warp);
    for (int j = warp; j <= p; j += XI_ATT_WARPS) {
        float s = 0.0f, kk[XI_ATT_MAXD], vv[XI_ATT_MAXD];
#pragma unroll
        for (int i = 0; i < XI_ATT_MAXD; i++) {
            kk[i] = kn[i];
            vv[i] = vn[i];
        }
        if (j + XI_ATT_WARPS <= p) load_kv(j + XI_ATT_WARPS);
#pragma unroll
        for (int i = 0; i < XI_ATT_MAXD; i++)
            if (lane + 32 * i < hd) s += qr[i] * kk[i];
        s = xi_warp_sum(s) * c.scale;
        const float mn = fmaxf(m, s);
        const float corr = expf(m - mn), e = expf(s - mn);
        l = l * corr + e;
#pragma unroll
        for (int i = 0; i < XI_ATT_MAXD; i++) acc[i] = acc[i] * corr + e * vv[i];
        m = mn;
    }
    if (lane == 0) { s_m[warp] = m; s_l[warp] = l; }
#pragma unroll
    for (int i = 0; i < XI_ATT_MAXD; i++) s_acc[warp][lane + 32 * i] = acc[i];
    __syncthreads();
    float M = -XI_INF;
#pragma unroll
    for (int w = 0; w < XI_ATT_WARPS; w++) M = fmaxf(M, s_m[w]);
    float L = 0.0f, f[XI_ATT_WARPS];
#pragma unroll
    for (int w = 0; w < XI_ATT_WARPS; w++) { f[w] = s_m[w] == -XI_INF ? 0.0f : expf(s_m[w] - M); L += s_l[w] * f[w]; }
    const float inv = 1.0f / L;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float r = 0.0f;
#pragma unroll
        for (int w = 0; w < XI_ATT_WARPS; w++) r += s_acc[w][d] * f[w];
        o[d] = r * inv;
    }
}
