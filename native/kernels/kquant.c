/* get_rows / matmul / dequantize for the GGUF types beyond q8_0/q4_0/q4_1: q5_0, q5_1, iq4_nl
 * (blocks of 32), the K-quants q2_k, q3_k, q4_k, q5_k, q6_k and iq4_xs (super-blocks of 256) and
 * bf16. Layouts: ggml's ggml-common.h (block_q4_K, ...).
 *
 * Dequantization is bit-exact with gguf-py's gguf.quants.dequantize (the same float32 operations in
 * the same order: d * sc rounded, then d_sc * q - d_min rounded; the build passes
 * -ffp-contract=off, so no product is fused into a sum).
 *
 * dequantize_DT runs the scalar formulas; get_rows_DT and the matmuls the AVX2 versions where there
 * are (the K-quants), the same operations on the same values (tests/test_kquant_kernels.py checks
 * each bit for bit against gguf).
 *
 * q5_0, q5_1 (q8dot.c) and q4_k, q5_k, q6_k (q8kdot.c) multiply through int8 activations (llama.cpp's
 * numerics). The other
 * matmuls dequantize one block (32 or 256 weights) of a weight row exactly into a float buffer
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

/* 16 packed bytes of 4-bit iq4 codes: lo[j] = dl * kvalues[q[j] & 15], hi[j] = dl * kvalues[q[j] >> 4] */
static inline void iq4_16(const uint8_t *q, float dl, float *lo, float *hi)
{
#if defined(__AVX2__)
    const __m128i table = _mm_loadu_si128((const __m128i *)kvalues_iq4nl);
    const __m128i v = _mm_loadu_si128((const __m128i *)q), m4 = _mm_set1_epi8(15);
    const __m128i kl = _mm_shuffle_epi8(table, _mm_and_si128(v, m4));
    const __m128i kh = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(v, 4), m4));
    const __m256 d = _mm256_set1_ps(dl);
    _mm256_storeu_ps(lo, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(kl))));
    _mm256_storeu_ps(lo + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(kl, kl)))));
    _mm256_storeu_ps(hi, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(kh))));
    _mm256_storeu_ps(hi + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(kh, kh)))));
#else
    for (int j = 0; j < 16; j++) {
        lo[j] = dl * (float)kvalues_iq4nl[q[j] & 15];
        hi[j] = dl * (float)kvalues_iq4nl[q[j] >> 4];
    }
#endif
}

static inline void deq_iq4_nl(const uint8_t *blk, float *o)
{
    iq4_16(blk + 2, xi_h2f_bits(xi_rd16(blk)), o, o + 16);
}

/* block_q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin */
static inline void deq_q2_k(const uint8_t *blk, float *o)
{
    const uint8_t *sc = blk, *qs = blk + 16;
    const float d = xi_h2f_bits(xi_rd16(blk + 80)), dmin = xi_h2f_bits(xi_rd16(blk + 82));
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int half = 0; half < 2; half++) {
                const int g = 8 * h + 2 * j + half;
                const float dl = d * (float)(sc[g] & 15), ml = dmin * (float)(sc[g] >> 4);
                const uint8_t *q = qs + 32 * h + 16 * half;
                float *out = o + 16 * g;
                for (int l = 0; l < 16; l++) out[l] = dl * (float)((q[l] >> (2 * j)) & 3) - ml;
            }
}

/* block_q3_K: hmask[32], qs[64], scales[12] (16 6-bit scales, offset 32), d */
static inline void deq_q3_k(const uint8_t *blk, float *o)
{
    const uint8_t *hm = blk, *qs = blk + 32, *sc = blk + 96;
    const float d = xi_h2f_bits(xi_rd16(blk + 108));
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int half = 0; half < 2; half++) {
                const int g = 8 * h + 2 * j + half;
                const int lo = (sc[g & 7] >> (4 * (g >> 3))) & 15;
                const int hi = (sc[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
                const float dl = d * (float)((lo | (hi << 4)) - 32);
                const uint8_t *q = qs + 32 * h + 16 * half, *m = hm + 16 * half;
                const int hb = 4 * h + j;
                float *out = o + 16 * g;
                for (int l = 0; l < 16; l++)
                    out[l] = dl * (float)(((q[l] >> (2 * j)) & 3) - ((((m[l] >> hb) & 1) ^ 1) << 2));
            }
}

/* block_q4_K: d, dmin, scales[12], qs[128] */
static inline void deq_q4_k(const uint8_t *blk, float *o)
{
    const float d = xi_h2f_bits(xi_rd16(blk)), dmin = xi_h2f_bits(xi_rd16(blk + 2));
    const uint8_t *scales = blk + 4, *qs = blk + 16;
    for (int g = 0; g < 8; g++) { /* 8 groups of 32 */
        int sc, m;
        xi_scale_min_k4(g, scales, &sc, &m);
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
        xi_scale_min_k4(g, scales, &sc, &m);
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
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int half = 0; half < 2; half++) {
                const int g = 8 * h + 2 * j + half;
                const float dl = d * (float)sc[g];
                const uint8_t *lo = ql + 64 * h + 32 * (j & 1) + 16 * half, *hi = qh + 32 * h + 16 * half;
                const int sl = 4 * (j >> 1), sh = 2 * j;
                float *out = o + 16 * g;
                for (int l = 0; l < 16; l++)
                    out[l] = dl * (float)((((lo[l] >> sl) & 15) | (((hi[l] >> sh) & 3) << 4)) - 32);
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
        iq4_16(qs + 16 * g, d * (float)(ls - 32), o + 32 * g, o + 32 * g + 16);
    }
}

#if defined(__AVX2__)
/* AVX2 versions of the K-quant dequantizations: the same float operations on the same values
 * (codes as int8 -> float exactly, d * q then - m, each rounded), so bit-identical to the scalar
 * ones above (tests/test_kquant_kernels.py compares both with gguf). */
static inline __m256i srl8(__m256i v, int s) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(s)); }

/* 32 int8 codes q -> o[0..15] = d0 * q - m0, o[16..31] = d1 * q - m1 (no subtraction if !MIN) */
static inline __attribute__((always_inline)) void
emit32(__m256i q, float d0, float d1, float m0, float m1, float *o, const int MIN)
{
    const __m128i a = _mm256_castsi256_si128(q), b = _mm256_extracti128_si256(q, 1);
    const __m256 f[4] = {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(a)),
                         _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(a, a))),
                         _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)),
                         _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(b, b)))};
    for (int i = 0; i < 4; i++) {
        __m256 v = _mm256_mul_ps(_mm256_set1_ps(i < 2 ? d0 : d1), f[i]);
        if (MIN) v = _mm256_sub_ps(v, _mm256_set1_ps(i < 2 ? m0 : m1));
        _mm256_storeu_ps(o + 8 * i, v);
    }
}

static inline __m256i ld32(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

static inline void vdeq_q4_k(const uint8_t *blk, float *o)
{
    const float d = xi_h2f_bits(xi_rd16(blk)), dmin = xi_h2f_bits(xi_rd16(blk + 2));
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int g = 0; g < 8; g++) {
        int sc, m;
        xi_scale_min_k4(g, blk + 4, &sc, &m);
        const float dl = d * (float)sc, ml = dmin * (float)m;
        const __m256i q = _mm256_and_si256(srl8(ld32(blk + 16 + 32 * (g >> 1)), 4 * (g & 1)), m4);
        emit32(q, dl, dl, ml, ml, o + 32 * g, 1);
    }
}

static inline void vdeq_q5_k(const uint8_t *blk, float *o)
{
    const float d = xi_h2f_bits(xi_rd16(blk)), dmin = xi_h2f_bits(xi_rd16(blk + 2));
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1), qh = ld32(blk + 16);
    for (int g = 0; g < 8; g++) {
        int sc, m;
        xi_scale_min_k4(g, blk + 4, &sc, &m);
        const float dl = d * (float)sc, ml = dmin * (float)m;
        const __m256i lo = _mm256_and_si256(srl8(ld32(blk + 48 + 32 * (g >> 1)), 4 * (g & 1)), m4);
        const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(srl8(qh, g), one), 4);
        emit32(_mm256_or_si256(lo, hi), dl, dl, ml, ml, o + 32 * g, 1);
    }
}

static inline void vdeq_q6_k(const uint8_t *blk, float *o)
{
    const int8_t *sc = (const int8_t *)(blk + 192);
    const float d = xi_h2f_bits(xi_rd16(blk + 208));
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++) {
            const int g = 8 * h + 2 * j;
            const __m256i lo = _mm256_and_si256(srl8(ld32(blk + 64 * h + 32 * (j & 1)), 4 * (j >> 1)), m4);
            const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(srl8(ld32(blk + 128 + 32 * h), 2 * j), m2), 4);
            emit32(_mm256_sub_epi8(_mm256_or_si256(lo, hi), k32), d * (float)sc[g], d * (float)sc[g + 1], 0, 0,
                   o + 32 * (4 * h + j), 0);
        }
}

static inline void vdeq_q2_k(const uint8_t *blk, float *o)
{
    const uint8_t *sc = blk;
    const float d = xi_h2f_bits(xi_rd16(blk + 80)), dmin = xi_h2f_bits(xi_rd16(blk + 82));
    const __m256i m2 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++) {
            const int g = 8 * h + 2 * j;
            const __m256i q = _mm256_and_si256(srl8(ld32(blk + 16 + 32 * h), 2 * j), m2);
            emit32(q, d * (float)(sc[g] & 15), d * (float)(sc[g + 1] & 15), dmin * (float)(sc[g] >> 4),
                   dmin * (float)(sc[g + 1] >> 4), o + 32 * (4 * h + j), 1);
        }
}

static inline void vdeq_q3_k(const uint8_t *blk, float *o)
{
    const uint8_t *sc = blk + 96;
    const float d = xi_h2f_bits(xi_rd16(blk + 108));
    const __m256i m2 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), hm = ld32(blk);
    float dl[16];
    for (int g = 0; g < 16; g++) {
        const int lo = (sc[g & 7] >> (4 * (g >> 3))) & 15, hi = (sc[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
        dl[g] = d * (float)((lo | (hi << 4)) - 32);
    }
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++) {
            const int g = 8 * h + 2 * j;
            const __m256i ql = _mm256_and_si256(srl8(ld32(blk + 32 + 32 * h), 2 * j), m2);
            const __m256i nb = _mm256_andnot_si256(srl8(hm, 4 * h + j), one); /* (bit ^ 1) */
            emit32(_mm256_sub_epi8(ql, _mm256_slli_epi16(nb, 2)), dl[g], dl[g + 1], 0, 0, o + 32 * (4 * h + j), 0);
        }
}
static inline void vdeq_q5_0(const uint8_t *blk, float *o)
{
    const float d = xi_h2f_bits(xi_rd16(blk));
    emit32(_mm256_sub_epi8(xi_q5_codes(blk + 2, blk + 6), _mm256_set1_epi8(16)), d, d, 0, 0, o, 0);
}

static inline void vdeq_q5_1(const uint8_t *blk, float *o)
{
    const float d = xi_h2f_bits(xi_rd16(blk)), m = xi_h2f_bits(xi_rd16(blk + 2));
    emit32(xi_q5_codes(blk + 4, blk + 8), d, d, -m, -m, o, 1); /* d * q - (-m): d * q + m, bit for bit */
}
#define XI_KDEQ(NAME) vdeq_##NAME
#else
#define XI_KDEQ(NAME) deq_##NAME
#endif
/* the matmul's block dequantization: the AVX2 one where there is one */
#define mdeq_q5_0 XI_KDEQ(q5_0)
#define mdeq_q5_1 XI_KDEQ(q5_1)
#define mdeq_iq4_nl deq_iq4_nl
#define mdeq_iq4_xs deq_iq4_xs
#define mdeq_bf16 deq_bf16
#define mdeq_q2_k XI_KDEQ(q2_k)
#define mdeq_q3_k XI_KDEQ(q3_k)
#define mdeq_q4_k XI_KDEQ(q4_k)
#define mdeq_q5_k XI_KDEQ(q5_k)
#define mdeq_q6_k XI_KDEQ(q6_k)

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

/* QK elements a block of BYTES bytes: the shared get_rows (kernels/xi_common.h) */
#define XI_KGET_ROWS(NAME, QK, BYTES)                                                \
    XI_GET_ROWS(NAME, BYTES, QK, QK,                                                 \
                { for (long i = 0; i < dim / (QK); i++) mdeq_##NAME(row + i * (BYTES), o + (QK) * i); })

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
        mdeq_##NAME(wr + ib * (BYTES), w);                                            \
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
XI_MATMUL_DRIVER(NAME, ktile, QK, ROWBYTES, BLOCKED, TAIL)

#define XI_KNO_TAIL(row, i) 0.0f
#define XI_KQUANT(NAME, QK, BYTES)                                                   \
    XI_KGET_ROWS(NAME, QK, BYTES)                                                    \
    XI_KDEQUANTIZE(NAME, QK, BYTES)                                                  \
    XI_KMATMUL(NAME, QK, BYTES, nb * (BYTES), 1, XI_KNO_TAIL)

/* q5_0, q5_1: matmul through int8 activations (q8dot.c), also over the r8 layout */
XI_KGET_ROWS(q5_0, 32, 22)
XI_KDEQUANTIZE(q5_0, 32, 22)
XI_MATMUL_Q8(q5_0, 32)
XI_KGET_ROWS(q5_1, 32, 24)
XI_KDEQUANTIZE(q5_1, 32, 24)
XI_MATMUL_Q8(q5_1, 32)
XI_MATMUL_Q8(q5_0_r8, 32)
XI_MATMUL_Q8(q5_1_r8, 32)
/* get_rows of the r8 layout: row id's block gathered back into GGUF bytes (the fifth bits too) */
#define XI_KGET_ROWS_R8(NAME, BYTES, HEAD)                                           \
XI_GET_ROWS(NAME##_r8, BYTES, 32, 32, {                                              \
    const long nb = dim / 32;                                                        \
    const long n8 = vocab / 8 * 8;                                                   \
    for (long i = 0; i < nb; i++) {                                                  \
        if (id >= n8) { deq_##NAME(row + i * (BYTES), o + 32 * i); continue; }       \
        const uint8_t *g = table + (id / 8 * 8) * rowbytes + i * 8 * (BYTES);        \
        const int r = (int)(id % 8);                                                 \
        uint8_t blk[BYTES];                                                          \
        memset(blk, 0, sizeof blk);                                                  \
        memcpy(blk, g + 2 * r, 2);                                                   \
        if ((HEAD) == 4) memcpy(blk + 2, g + 16 + 2 * r, 2);                         \
        const uint8_t *H = g + 8 * (HEAD);                                           \
        const uint8_t *qs = H + 32;                                                  \
        for (int c = 0; c < 4; c++) memcpy(blk + (HEAD) + 4 + 4 * c, qs + 32 * c + 4 * r, 4); \
        for (int j = 0; j < 32; j++)                                                 \
            blk[(HEAD) + j / 8] |= (uint8_t)(((H[4 * r + j % 4] >> (j / 4)) & 1) << (j % 8)); \
        deq_##NAME(blk, o + 32 * i);                                                 \
    }                                                                                \
})
XI_KGET_ROWS_R8(q5_0, 22, 2)
XI_KGET_ROWS_R8(q5_1, 24, 4)
XI_KQUANT(iq4_nl, 32, 18)
XI_KQUANT(q2_k, XI_QKK, 84)
XI_KQUANT(q3_k, XI_QKK, 110)
/* q4_k, q5_k, q6_k: matmul through int8 activations per 256 (q8kdot.c) */
XI_KGET_ROWS(q4_k, XI_QKK, 144)
XI_KDEQUANTIZE(q4_k, XI_QKK, 144)
XI_MATMUL_Q8(q4_k, XI_QKK)
XI_KGET_ROWS(q5_k, XI_QKK, 176)
XI_KDEQUANTIZE(q5_k, XI_QKK, 176)
XI_MATMUL_Q8(q5_k, XI_QKK)
XI_KGET_ROWS(q6_k, XI_QKK, 210)
XI_KDEQUANTIZE(q6_k, XI_QKK, 210)
XI_MATMUL_Q8(q6_k, XI_QKK)
XI_KQUANT(iq4_xs, XI_QKK, 136)
XI_KMATMUL(bf16, 32, 64, K * 2, 0, scalar_bf16)
