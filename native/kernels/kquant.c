/* get_rows / matmul / dequantize for the GGUF types beyond q8_0/q4_0/q4_1: q5_0, q5_1, iq4_nl
 * (blocks of 32), the K-quants q2_k, q3_k, q4_k, q5_k, q6_k and iq4_xs (super-blocks of 256) and
 * bf16. Layouts: ggml's ggml-common.h (block_q4_K, ...).
 *
 * Dequantization is bit-exact with gguf-py's gguf.quants.dequantize (the same float32 operations in
 * the same order: d * sc rounded, then d_sc * q - d_min rounded; the build passes
 * -ffp-contract=off, so no product is fused into a sum).
 *
 * The matmuls dequantize one block (32 or 256 weights) of a weight row exactly into a float buffer
 * (in L1), then FMA it against up to 4 x rows in float32: every token's sum runs in 4 chains of 8
 * floats (AVX2+FMA) over the blocks in order, whatever the number of tokens sharing the tile, so a
 * row's result does not depend on T or on the other rows (batched == alone, bit for bit).
 */
#include <stdlib.h>
#include "xi_common.h"

#define XI_QKK 256

/* ------------------------------------------------------------------ */
/* exact scalar block dequantization (gguf-py's formulas)               */

static const int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static inline void deq_q5_0(const uint8_t *blk, float *o)
{
    const float d = xi_h2f_bits(xi_rd16(blk));
    uint32_t qh;
    memcpy(&qh, blk + 2, 4);
    const uint8_t *qs = blk + 6;
    for (int j = 0; j < 16; j++) {
        const int lo = (qs[j] & 15) | (((qh >> j) & 1) << 4);
        const int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
        o[j] = d * (float)(lo - 16);
        o[j + 16] = d * (float)(hi - 16);
    }
}

static inline void deq_q5_1(const uint8_t *blk, float *o)
{
    const float d = xi_h2f_bits(xi_rd16(blk));
    const float m = xi_h2f_bits(xi_rd16(blk + 2));
    uint32_t qh;
    memcpy(&qh, blk + 4, 4);
    const uint8_t *qs = blk + 8;
    for (int j = 0; j < 16; j++) {
        const int lo = (qs[j] & 15) | (((qh >> j) & 1) << 4);
        const int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
        o[j] = d * (float)lo + m;
        o[j + 16] = d * (float)hi + m;
    }
}

static inline void deq_iq4_nl(const uint8_t *blk, float *o)
{
    const float d = xi_h2f_bits(xi_rd16(blk));
    const uint8_t *qs = blk + 2;
    for (int j = 0; j < 16; j++) {
        o[j] = d * (float)kvalues_iq4nl[qs[j] & 15];
        o[j + 16] = d * (float)kvalues_iq4nl[qs[j] >> 4];
    }
}

/* block_q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin */
static inline void deq_q2_k(const uint8_t *blk, float *o)
{
    const uint8_t *sc = blk, *qs = blk + 16;
    const float d = xi_h2f_bits(xi_rd16(blk + 80)), dmin = xi_h2f_bits(xi_rd16(blk + 82));
    for (int g = 0; g < 16; g++) { /* 16 groups of 16 */
        const float dl = d * (float)(sc[g] & 15), ml = dmin * (float)(sc[g] >> 4);
        for (int l = 0; l < 16; l++) {
            const int e = 16 * g + l, h = e >> 7, j = (e & 127) >> 5;
            o[e] = dl * (float)((qs[32 * h + (e & 31)] >> (2 * j)) & 3) - ml;
        }
    }
}

/* block_q3_K: hmask[32], qs[64], scales[12] (16 6-bit scales, offset 32), d */
static inline void deq_q3_k(const uint8_t *blk, float *o)
{
    const uint8_t *hm = blk, *qs = blk + 32, *sc = blk + 96;
    const float d = xi_h2f_bits(xi_rd16(blk + 108));
    for (int g = 0; g < 16; g++) {
        const int lo = (sc[g & 7] >> (4 * (g >> 3))) & 15;
        const int hi = (sc[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
        const float dl = d * (float)((int8_t)(lo | (hi << 4)) - 32);
        for (int l = 0; l < 16; l++) {
            const int e = 16 * g + l, h = e >> 7, j = (e & 127) >> 5;
            const int ql = (qs[32 * h + (e & 31)] >> (2 * j)) & 3;
            const int qh = (hm[e & 31] >> (e >> 5)) & 1;
            o[e] = dl * (float)(ql - ((qh ^ 1) << 2));
        }
    }
}

/* the 6-bit scale and min of group j (0..7) of q4_K / q5_K's 12 scale bytes */
static inline void scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 2) & 0x30);
        *m = (q[j + 4] >> 4) | ((q[j] >> 2) & 0x30);
    }
}

/* block_q4_K: d, dmin, scales[12], qs[128] */
static inline void deq_q4_k(const uint8_t *blk, float *o)
{
    const float d = xi_h2f_bits(xi_rd16(blk)), dmin = xi_h2f_bits(xi_rd16(blk + 2));
    const uint8_t *scales = blk + 4, *qs = blk + 16;
    for (int g = 0; g < 8; g++) { /* 8 groups of 32 */
        int sc, m;
        scale_min_k4(g, scales, &sc, &m);
        const float dl = d * (float)sc, ml = dmin * (float)m;
        const uint8_t *q = qs + 32 * (g >> 1);
        const int sh = 4 * (g & 1);
        for (int l = 0; l < 32; l++) o[32 * g + l] = dl * (float)((q[l] >> sh) & 15) - ml;
    }
}

/* block_q5_K: d, dmin, scales[12], qh[32], qs[128] */
static inline void deq_q5_k(const uint8_t *blk, float *o)
{
    const float d = xi_h2f_bits(xi_rd16(blk)), dmin = xi_h2f_bits(xi_rd16(blk + 2));
    const uint8_t *scales = blk + 4, *qh = blk + 16, *qs = blk + 48;
    for (int g = 0; g < 8; g++) {
        int sc, m;
        scale_min_k4(g, scales, &sc, &m);
        const float dl = d * (float)sc, ml = dmin * (float)m;
        const uint8_t *q = qs + 32 * (g >> 1);
        const int sh = 4 * (g & 1);
        for (int l = 0; l < 32; l++)
            o[32 * g + l] = dl * (float)(((q[l] >> sh) & 15) | (((qh[l] >> g) & 1) << 4)) - ml;
    }
}

/* block_q6_K: ql[128], qh[64], scales[16] (int8), d */
static inline void deq_q6_k(const uint8_t *blk, float *o)
{
    const uint8_t *ql = blk, *qh = blk + 128;
    const int8_t *sc = (const int8_t *)(blk + 192);
    const float d = xi_h2f_bits(xi_rd16(blk + 208));
    for (int g = 0; g < 16; g++) {
        const float dl = d * (float)sc[g];
        for (int l = 0; l < 16; l++) {
            const int e = 16 * g + l, h = e >> 7, i = e & 127;
            const int lo = (ql[64 * h + (i & 63)] >> (4 * (i >> 6))) & 15;
            const int hi = (qh[32 * h + (i & 31)] >> (2 * (i >> 5))) & 3;
            o[e] = dl * (float)((lo | (hi << 4)) - 32);
        }
    }
}

/* block_iq4_xs: d, scales_h (u16), scales_l[4], qs[128] */
static inline void deq_iq4_xs(const uint8_t *blk, float *o)
{
    const float d = xi_h2f_bits(xi_rd16(blk));
    const uint16_t sh = xi_rd16(blk + 2);
    const uint8_t *sl = blk + 4, *qs = blk + 8;
    for (int g = 0; g < 8; g++) {
        const int ls = ((sl[g >> 1] >> (4 * (g & 1))) & 15) | (((sh >> (2 * g)) & 3) << 4);
        const float dl = d * (float)(ls - 32);
        const uint8_t *q = qs + 16 * g;
        for (int j = 0; j < 16; j++) {
            o[32 * g + j] = dl * (float)kvalues_iq4nl[q[j] & 15];
            o[32 * g + j + 16] = dl * (float)kvalues_iq4nl[q[j] >> 4];
        }
    }
}

/* bf16 "blocks" of 32 elements (matmul driver; the K % 32 tail goes through scalar_bf16) */
static inline float bf16_to_f32(uint16_t h)
{
    const uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
static inline void deq_bf16(const uint8_t *blk, float *o)
{
    for (int j = 0; j < 32; j++) o[j] = bf16_to_f32(xi_rd16(blk + 2 * j));
}
static inline float scalar_bf16(const uint8_t *row, long i) { return bf16_to_f32(xi_rd16(row + 2 * i)); }

/* ------------------------------------------------------------------ */
/* get_rows, dequantize                                                */

/* QK elements a block of BYTES bytes */
#define XI_KGET_ROWS(NAME, QK, BYTES)                                                \
int xi_k_get_rows_##NAME(void *const *b, const void *c)                              \
{                                                                                    \
    XI_C(xi_get_rows_##NAME##_c);                                                    \
    if (k->T < 0 || k->dim < 0 || k->vocab < 0 || k->dim % (QK) != 0)                \
        return XI_EINVAL;                                                            \
    const uint8_t *table = (const uint8_t *)b[0];                                    \
    const int32_t *ids = (const int32_t *)b[1];                                      \
    float *out = (float *)b[2];                                                      \
    const long T = k->T, dim = k->dim, vocab = k->vocab, nb = dim / (QK);            \
    _Pragma("omp parallel for schedule(static) if (T > 1 && T * dim >= 4 * XI_OMP_MIN_WORK)") \
    for (long t = 0; t < T; t++) {                                                   \
        float *o = out + t * dim;                                                    \
        const long id = ids[t];                                                      \
        if (id < 0 || id >= vocab) {                                                 \
            for (long i = 0; i < dim; i++) o[i] = NAN;                               \
            continue;                                                                \
        }                                                                            \
        const uint8_t *row = table + id * nb * (BYTES);                              \
        for (long i = 0; i < nb; i++) deq_##NAME(row + i * (BYTES), o + (QK) * i);   \
    }                                                                                \
    return XI_OK;                                                                    \
}

#define XI_KDEQUANTIZE(NAME, QK, BYTES)                                              \
int xi_k_dequantize_##NAME(void *const *b, const void *c)                            \
{                                                                                    \
    XI_C(xi_dequantize_##NAME##_c);                                                  \
    if (k->n < 0 || k->n % (QK) != 0) return XI_EINVAL;                              \
    const uint8_t *src = (const uint8_t *)b[0];                                      \
    float *dst = (float *)b[1];                                                      \
    const long nb = k->n / (QK), nwork = k->n / 32;                                  \
    _Pragma("omp parallel for schedule(static) if (nwork >= XI_OMP_MIN_WORK)")       \
    for (long i = 0; i < nb; i++) deq_##NAME(src + i * (BYTES), dst + (QK) * i);     \
    return XI_OK;                                                                    \
}

int xi_k_get_rows_bf16(void *const *b, const void *c)
{
    XI_C(xi_get_rows_bf16_c);
    if (k->T < 0 || k->dim < 0 || k->vocab < 0) return XI_EINVAL;
    const uint8_t *table = (const uint8_t *)b[0];
    const int32_t *ids = (const int32_t *)b[1];
    float *out = (float *)b[2];
    const long T = k->T, dim = k->dim, vocab = k->vocab;
    for (long t = 0; t < T; t++) {
        float *o = out + t * dim;
        const long id = ids[t];
        if (id < 0 || id >= vocab) {
            for (long i = 0; i < dim; i++) o[i] = NAN;
            continue;
        }
        for (long i = 0; i < dim; i++) o[i] = scalar_bf16(table + id * dim * 2, i);
    }
    return XI_OK;
}

/* ------------------------------------------------------------------ */
/* matmul                                                              */

#define XI_KT 4       /* x rows a tile */
#define XI_KNCHUNK 16 /* weight rows a chunk: the x tile stays in L1 across a chunk */

/* acc[t][0..31] += w[0..31] * xb[t*K + 0..31] for t < TT: four chains of 8 floats a token, the
 * same whatever TT */
#if defined(__AVX2__) && defined(__FMA__)
typedef __m256 xi_acc[4];
static inline __attribute__((always_inline)) void acc_zero(xi_acc a)
{
    for (int j = 0; j < 4; j++) a[j] = _mm256_setzero_ps();
}
static inline __attribute__((always_inline)) void acc_fma32(xi_acc a, const float *w, const float *x)
{
    for (int j = 0; j < 4; j++)
        a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(w + 8 * j), _mm256_loadu_ps(x + 8 * j), a[j]);
}
static inline float acc_sum(xi_acc a)
{
    __m256 s = _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}
#else
typedef float xi_acc[32];
static inline void acc_zero(xi_acc a) { memset(a, 0, 32 * sizeof(float)); }
static inline void acc_fma32(xi_acc a, const float *w, const float *x)
{
    for (int j = 0; j < 32; j++) a[j] = fmaf(w[j], x[j], a[j]);
}
static inline float acc_sum(xi_acc a)
{
    float s[8];
    for (int j = 0; j < 8; j++) s[j] = (a[j] + a[j + 8]) + (a[j + 16] + a[j + 24]);
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}
#endif

/* one weight row (nb blocks of QK) against TT x rows (stride K): res[t] = dot */
#define XI_KTILE(NAME, QK, BYTES)                                                    \
static inline __attribute__((always_inline)) void                                   \
ktile_##NAME(const uint8_t *wr, long nb, const float *x, long K, float *res, const int TT) \
{                                                                                    \
    xi_acc acc[XI_KT];                                                               \
    float w[QK] __attribute__((aligned(64)));                                        \
    for (int t = 0; t < XI_KT; t++) acc_zero(acc[t]);                                \
    for (long ib = 0; ib < nb; ib++) {                                               \
        deq_##NAME(wr + ib * (BYTES), w);                                            \
        for (int t = 0; t < TT; t++) {                                               \
            const float *xb = x + t * K + ib * (QK);                                 \
            for (int j = 0; j < (QK); j += 32) acc_fma32(acc[t], w + j, xb + j);     \
        }                                                                            \
    }                                                                                \
    for (int t = 0; t < TT; t++) res[t] = acc_sum(acc[t]);                           \
}

/* TAIL(row, i): weight i of the K % QK tail (bf16 only; the block types require K % QK == 0) */
#define XI_KMATMUL(NAME, QK, BYTES, ROWBYTES, BLOCKED, TAIL)                         \
XI_KTILE(NAME, QK, BYTES)                                                            \
void xi_matmul_rows_##NAME(const uint8_t *w, const float *x, float *y, long T, long N, long K, \
                           int accumulate)                                           \
{                                                                                    \
    const long nb = K / (QK), kt = nb * (QK);                                        \
    const long rb = ROWBYTES;                                                        \
    const int accum = accumulate != 0;                                               \
    const long nchunks = (N + XI_KNCHUNK - 1) / XI_KNCHUNK;                          \
    _Pragma("omp parallel for schedule(static) if (nchunks > 1 && N * K * T >= 4 * XI_OMP_MIN_WORK)") \
    for (long ch = 0; ch < nchunks; ch++) {                                          \
        const long n0 = ch * XI_KNCHUNK;                                             \
        const long n1 = n0 + XI_KNCHUNK < N ? n0 + XI_KNCHUNK : N;                   \
        for (long t0 = 0; t0 < T; t0 += XI_KT) {                                     \
            const long tt = T - t0 < XI_KT ? T - t0 : XI_KT;                         \
            const float *xt = x + t0 * K;                                            \
            for (long n = n0; n < n1; n++) {                                         \
                const uint8_t *wr = w + n * rb;                                      \
                float res[XI_KT];                                                    \
                switch (tt) {                                                        \
                case 1: ktile_##NAME(wr, nb, xt, K, res, 1); break;                  \
                case 2: ktile_##NAME(wr, nb, xt, K, res, 2); break;                  \
                case 3: ktile_##NAME(wr, nb, xt, K, res, 3); break;                  \
                default: ktile_##NAME(wr, nb, xt, K, res, 4); break;                 \
                }                                                                    \
                for (long t = 0; t < tt; t++) {                                      \
                    float s = res[t];                                                \
                    for (long i = kt; i < K; i++) s += TAIL(wr, i) * xt[t * K + i];  \
                    float *yp = y + (t0 + t) * N + n;                                \
                    *yp = accum ? *yp + s : s;                                       \
                }                                                                    \
            }                                                                        \
        }                                                                            \
    }                                                                                \
}                                                                                    \
int xi_k_matmul_##NAME(void *const *b, const void *c)                                \
{                                                                                    \
    XI_C(xi_matmul_##NAME##_c);                                                      \
    if (k->T < 0 || k->N < 0 || k->K < 0 || ((BLOCKED) && k->K % (QK) != 0))         \
        return XI_EINVAL;                                                            \
    xi_matmul_rows_##NAME((const uint8_t *)b[0], (const float *)b[1], (float *)b[2], \
                          k->T, k->N, k->K, k->accumulate);                          \
    return XI_OK;                                                                    \
}

#define XI_KNO_TAIL(row, i) 0.0f
#define XI_KQUANT(NAME, QK, BYTES)                                                   \
    XI_KGET_ROWS(NAME, QK, BYTES)                                                    \
    XI_KDEQUANTIZE(NAME, QK, BYTES)                                                  \
    XI_KMATMUL(NAME, QK, BYTES, nb * (BYTES), 1, XI_KNO_TAIL)

XI_KQUANT(q5_0, 32, 22)
XI_KQUANT(q5_1, 32, 24)
XI_KQUANT(iq4_nl, 32, 18)
XI_KQUANT(q2_k, XI_QKK, 84)
XI_KQUANT(q3_k, XI_QKK, 110)
XI_KQUANT(q4_k, XI_QKK, 144)
XI_KQUANT(q5_k, XI_QKK, 176)
XI_KQUANT(q6_k, XI_QKK, 210)
XI_KQUANT(iq4_xs, XI_QKK, 136)
XI_KMATMUL(bf16, 32, 64, K * 2, 0, scalar_bf16)
