/* get_rows / matmul for f32, f16, q8_0, q4_0, q4_1; dequantize for the block types.
 *
 * Dequantization is bit-exact to gguf / ggml (f32 math, no FMA contraction:
 * the build passes -ffp-contract=off). The f32 / f16 matmuls accumulate in
 * float32: a weight block is converted to float registers once per tile of up
 * to 4 x rows and FMA'd against x (AVX2/FMA intrinsics, portable scalar
 * fallback). The block-type matmuls quantize x to int8 and take exact integer
 * dot products (llama.cpp's numerics): q8dot.c.
 */
#include <stdlib.h>
#include "xi_common.h"

/* ------------------------------------------------------------------ */
/* exact scalar block dequantization (the gguf reference formulas)      */

static inline void deq_q8_0(const uint8_t *blk, float *o)
{
    const float d = xi_h2f_bits(xi_rd16(blk));
    const int8_t *qs = (const int8_t *)(blk + 2);
    for (int j = 0; j < 32; j++) o[j] = d * (float)qs[j];
}

static inline void deq_q4_0(const uint8_t *blk, float *o)
{
    const float d = xi_h2f_bits(xi_rd16(blk));
    const uint8_t *qs = blk + 2;
    for (int j = 0; j < 16; j++) {
        o[j] = d * (float)((int)(qs[j] & 15) - 8);
        o[j + 16] = d * (float)((int)(qs[j] >> 4) - 8);
    }
}

static inline void deq_q4_1(const uint8_t *blk, float *o)
{
    const float d = xi_h2f_bits(xi_rd16(blk));
    const float m = xi_h2f_bits(xi_rd16(blk + 2));
    const uint8_t *qs = blk + 4;
    for (int j = 0; j < 16; j++) {
        o[j] = d * (float)(qs[j] & 15) + m;
        o[j + 16] = d * (float)(qs[j] >> 4) + m;
    }
}

/* f32 / f16 "blocks" of 32 elements for the shared matmul driver */
static inline void deq_f32(const uint8_t *blk, float *o) { memcpy(o, blk, 32 * sizeof(float)); }
static inline void deq_f16(const uint8_t *blk, float *o)
{
    for (int j = 0; j < 32; j++) o[j] = xi_h2f(xi_rd16(blk + 2 * j));
}

/* ------------------------------------------------------------------ */
/* get_rows                                                            */

/* XI_GET_ROWS: kernels/xi_common.h */
XI_GET_ROWS(f32, 4, 1, 1, { memcpy(o, row, (size_t)dim * sizeof(float)); })
XI_GET_ROWS(f16, 2, 1, 1, { for (long i = 0; i < dim; i++) o[i] = xi_h2f_bits(xi_rd16(row + 2 * i)); })
XI_GET_ROWS(q8_0, XI_Q8_0_BYTES, 32, 32, { for (long i = 0; i < dim / 32; i++) deq_q8_0(row + i * XI_Q8_0_BYTES, o + 32 * i); })
XI_GET_ROWS(q4_0, XI_Q4_0_BYTES, 32, 32, { for (long i = 0; i < dim / 32; i++) deq_q4_0(row + i * XI_Q4_0_BYTES, o + 32 * i); })
XI_GET_ROWS(q4_1, XI_Q4_1_BYTES, 32, 32, { for (long i = 0; i < dim / 32; i++) deq_q4_1(row + i * XI_Q4_1_BYTES, o + 32 * i); })

/* the r8 layout (q8dot.c): row id's block i gathered back into GGUF bytes, then dequantized; the
 * N % 8 last rows are GGUF rows (where `row` points: XI_GET_ROWS's row = table + id * rowbytes) */
#define XI_GET_ROWS_R8(NAME, BYTES, HEAD)                                            \
XI_GET_ROWS(NAME##_r8, BYTES, 32, 32, {                                              \
    const long nb = dim / 32;                                                        \
    const long n8 = vocab / 8 * 8;                                                   \
    for (long i = 0; i < nb; i++) {                                                  \
        if (id >= n8) { deq_##NAME(row + i * (BYTES), o + 32 * i); continue; }       \
        const uint8_t *g = table + (id / 8 * 8) * rowbytes + i * 8 * (BYTES);        \
        const int r = (int)(id % 8);                                                 \
        uint8_t blk[BYTES];                                                          \
        memcpy(blk, g + 2 * r, 2);                                                   \
        if ((HEAD) == 4) memcpy(blk + 2, g + 16 + 2 * r, 2);                         \
        for (int c = 0; c < ((BYTES) - (HEAD)) / 4; c++)                             \
            memcpy(blk + (HEAD) + 4 * c, g + 8 * (HEAD) + 32 * c + 4 * r, 4);        \
        deq_##NAME(blk, o + 32 * i);                                                 \
    }                                                                                \
})
XI_GET_ROWS_R8(q8_0, XI_Q8_0_BYTES, 2)
XI_GET_ROWS_R8(q4_0, XI_Q4_0_BYTES, 2)
XI_GET_ROWS_R8(q4_1, XI_Q4_1_BYTES, 4)

/* ------------------------------------------------------------------ */
/* dequantize                                                          */

#define XI_DEQUANTIZE(NAME, BYTES)                                                   \
int xi_k_dequantize_##NAME(void *const *b, const void *c)                            \
{                                                                                    \
    XI_C(xi_dequantize_##NAME##_c);                                                  \
    if (k->n < 0 || k->n % 32 != 0) return XI_EINVAL;                                \
    const uint8_t *src = (const uint8_t *)b[0];                                      \
    float *dst = (float *)b[1];                                                      \
    const long nb = k->n / 32;                                                       \
    _Pragma("omp parallel for schedule(static) if (nb >= XI_OMP_MIN_WORK)")          \
    for (long i = 0; i < nb; i++) deq_##NAME(src + i * (BYTES), dst + 32 * i);       \
    return XI_OK;                                                                    \
}

XI_DEQUANTIZE(q8_0, XI_Q8_0_BYTES)
XI_DEQUANTIZE(q4_0, XI_Q4_0_BYTES)
XI_DEQUANTIZE(q4_1, XI_Q4_1_BYTES)

/* ------------------------------------------------------------------ */
/* matmul                                                              */

#if defined(__AVX512F__)
/* A block of 32 weights -> two __m512 of floats, given its scales already as floats
 * (q4_1: one fma, <= 1 ulp from gguf). The f16 scales of a run of blocks are
 * converted up front, 16 at a time, so the hot loop has no scalar f16 conversions
 * and broadcasts (port 5 on Intel) but broadcasts from memory. */
#define XI_SCHUNK 128

static inline __attribute__((always_inline)) void
scales(const uint8_t *wr, long n, long bytes, int off, float *out)
{
    uint16_t h[XI_SCHUNK];
    long i = 0;
    for (; i < n; i++) h[i] = xi_rd16(wr + i * bytes + off);
    for (; i < XI_SCHUNK && (i & 15); i++) h[i] = 0;
    for (i = 0; i < n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + i))));
}

static inline __attribute__((always_inline)) void
vdeq_q8_0(const uint8_t *blk, const float *d_, const float *m_, __m512 v[2])
{
    (void)m_;
    const __m512 d = _mm512_set1_ps(*d_);
    const __m128i *q = (const __m128i *)(blk + 2);
    v[0] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q))));
    v[1] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1))));
}

static inline __attribute__((always_inline)) void nibbles(const uint8_t *qs, __m128i *lo, __m128i *hi)
{
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m4 = _mm_set1_epi8(15);
    *lo = _mm_and_si128(q, m4);
    *hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
}

static inline __attribute__((always_inline)) void
vdeq_q4_0(const uint8_t *blk, const float *d_, const float *m_, __m512 v[2])
{
    (void)m_;
    const __m512 d = _mm512_set1_ps(*d_);
    __m128i lo, hi;
    nibbles(blk + 2, &lo, &hi);
    const __m128i e8 = _mm_set1_epi8(8);
    v[0] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_sub_epi8(lo, e8))));
    v[1] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_sub_epi8(hi, e8))));
}

static inline __attribute__((always_inline)) void
vdeq_q4_1(const uint8_t *blk, const float *d_, const float *m_, __m512 v[2])
{
    const __m512 d = _mm512_set1_ps(*d_), m = _mm512_set1_ps(*m_);
    __m128i lo, hi;
    nibbles(blk + 4, &lo, &hi);
    v[0] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), m);
    v[1] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)), m);
}

static inline __attribute__((always_inline)) void
vdeq_f32(const uint8_t *blk, const float *d_, const float *m_, __m512 v[2])
{
    (void)d_; (void)m_;
    v[0] = _mm512_loadu_ps((const float *)blk);
    v[1] = _mm512_loadu_ps((const float *)blk + 16);
}

static inline __attribute__((always_inline)) void
vdeq_f16(const uint8_t *blk, const float *d_, const float *m_, __m512 v[2])
{
    (void)d_; (void)m_;
    v[0] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
    v[1] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk + 1));
}

/* scale offsets inside a block (-1: none) */
#define XI_DOFF_q8_0 0
#define XI_MOFF_q8_0 -1
#define XI_DOFF_q4_0 0
#define XI_MOFF_q4_0 -1
#define XI_DOFF_q4_1 0
#define XI_MOFF_q4_1 2
#define XI_DOFF_f32 -1
#define XI_MOFF_f32 -1
#define XI_DOFF_f16 -1
#define XI_MOFF_f16 -1

/* one weight row (nb blocks) against TT x rows (stride K): res[t] = dot */
#define XI_TILE(NAME, BYTES)                                                         \
static inline __attribute__((always_inline)) void                                   \
tile_##NAME(const uint8_t *wr, long nb, const float *x, long K, float *res, const int TT) \
{                                                                                    \
    /* Every token's row sum takes the same steps whatever TT is (even blocks into acc, odd  \
     * blocks into odd, a chunk's leftover block into acc), so a row's result does not depend \
     * on how many tokens share the tile: batched decode equals decode alone, bit for bit.  */ \
    __m512 acc[4][2], odd[4][2];                                                     \
    float ds[XI_SCHUNK], ms[XI_SCHUNK];                                              \
    for (int t = 0; t < 4; t++)                                                      \
        acc[t][0] = acc[t][1] = odd[t][0] = odd[t][1] = _mm512_setzero_ps();         \
    for (long cb = 0; cb < nb; cb += XI_SCHUNK) {                                    \
        const long ce = cb + XI_SCHUNK < nb ? cb + XI_SCHUNK : nb;                   \
        const uint8_t *wc = wr + cb * (BYTES);                                       \
        if (XI_DOFF_##NAME >= 0) scales(wc, ce - cb, BYTES, XI_DOFF_##NAME, ds);     \
        if (XI_MOFF_##NAME >= 0) scales(wc, ce - cb, BYTES, XI_MOFF_##NAME, ms);     \
        long ib = cb;                                                                \
        for (; ib + 2 <= ce; ib += 2) { /* two blocks per step: four fma chains a token */ \
            __m512 v[2], u[2];                                                       \
            vdeq_##NAME(wr + ib * (BYTES), ds + ib - cb, ms + ib - cb, v);           \
            vdeq_##NAME(wr + (ib + 1) * (BYTES), ds + ib + 1 - cb, ms + ib + 1 - cb, u); \
            for (int t = 0; t < TT; t++) {                                           \
                const float *xb = x + t * K + ib * 32;                               \
                acc[t][0] = _mm512_fmadd_ps(v[0], _mm512_loadu_ps(xb), acc[t][0]);   \
                acc[t][1] = _mm512_fmadd_ps(v[1], _mm512_loadu_ps(xb + 16), acc[t][1]); \
                odd[t][0] = _mm512_fmadd_ps(u[0], _mm512_loadu_ps(xb + 32), odd[t][0]); \
                odd[t][1] = _mm512_fmadd_ps(u[1], _mm512_loadu_ps(xb + 48), odd[t][1]); \
            }                                                                        \
        }                                                                            \
        for (; ib < ce; ib++) {                                                      \
            __m512 v[2];                                                             \
            vdeq_##NAME(wr + ib * (BYTES), ds + ib - cb, ms + ib - cb, v);           \
            for (int t = 0; t < TT; t++) {                                           \
                const float *xb = x + t * K + ib * 32;                               \
                acc[t][0] = _mm512_fmadd_ps(v[0], _mm512_loadu_ps(xb), acc[t][0]);   \
                acc[t][1] = _mm512_fmadd_ps(v[1], _mm512_loadu_ps(xb + 16), acc[t][1]); \
            }                                                                        \
        }                                                                            \
    }                                                                                \
    for (int t = 0; t < TT; t++)                                                     \
        res[t] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]), \
                                                    _mm512_add_ps(odd[t][0], odd[t][1]))); \
}
#elif defined(__AVX2__)
/* a block of 32 weights -> four __m256 of floats (rounding may differ from the
 * exact scalar formula by at most one float ulp per weight: fma for q4_1) */
static inline __attribute__((always_inline)) void vdeq_q8_0(const uint8_t *blk, __m256 v[4])
{
    const __m256 d = _mm256_set1_ps(xi_h2f(xi_rd16(blk)));
    const __m256i q = _mm256_loadu_si256((const __m256i *)(blk + 2));
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    v[0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)));
    v[1] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(lo, lo))));
    v[2] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)));
    v[3] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(hi, hi))));
}

static inline __attribute__((always_inline)) void nibbles(const uint8_t *qs, __m128i *lo, __m128i *hi)
{
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m4 = _mm_set1_epi8(15);
    *lo = _mm_and_si128(q, m4);
    *hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
}

static inline __attribute__((always_inline)) void vdeq_q4_0(const uint8_t *blk, __m256 v[4])
{
    const __m256 d = _mm256_set1_ps(xi_h2f(xi_rd16(blk)));
    __m128i lo, hi;
    nibbles(blk + 2, &lo, &hi);
    const __m128i e8 = _mm_set1_epi8(8);
    lo = _mm_sub_epi8(lo, e8);
    hi = _mm_sub_epi8(hi, e8);
    v[0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)));
    v[1] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(lo, lo))));
    v[2] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)));
    v[3] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(hi, hi))));
}

static inline __attribute__((always_inline)) void vdeq_q4_1(const uint8_t *blk, __m256 v[4])
{
    const __m256 d = _mm256_set1_ps(xi_h2f(xi_rd16(blk)));
    const __m256 m = _mm256_set1_ps(xi_h2f(xi_rd16(blk + 2)));
    __m128i lo, hi;
    nibbles(blk + 4, &lo, &hi);
    v[0] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), m);
    v[1] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(lo, lo))), m);
    v[2] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), m);
    v[3] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(hi, hi))), m);
}

static inline __attribute__((always_inline)) void vdeq_f32(const uint8_t *blk, __m256 v[4])
{
    const float *f = (const float *)blk;
    v[0] = _mm256_loadu_ps(f);
    v[1] = _mm256_loadu_ps(f + 8);
    v[2] = _mm256_loadu_ps(f + 16);
    v[3] = _mm256_loadu_ps(f + 24);
}

static inline __attribute__((always_inline)) void vdeq_f16(const uint8_t *blk, __m256 v[4])
{
    const __m128i *h = (const __m128i *)blk;
    v[0] = _mm256_cvtph_ps(_mm_loadu_si128(h));
    v[1] = _mm256_cvtph_ps(_mm_loadu_si128(h + 1));
    v[2] = _mm256_cvtph_ps(_mm_loadu_si128(h + 2));
    v[3] = _mm256_cvtph_ps(_mm_loadu_si128(h + 3));
}

static inline float hsum8(__m256 s)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* one weight row (nb blocks) against TT x rows (stride K): res[t] = dot */
#define XI_TILE(NAME, BYTES)                                                         \
static inline __attribute__((always_inline)) void                                   \
tile_##NAME(const uint8_t *wr, long nb, const float *x, long K, float *res, const int TT) \
{                                                                                    \
    __m256 acc[4][4];                                                                \
    for (int t = 0; t < 4; t++)                                                      \
        for (int j = 0; j < 4; j++) acc[t][j] = _mm256_setzero_ps();                 \
    for (long ib = 0; ib < nb; ib++) {                                               \
        __m256 v[4];                                                                 \
        vdeq_##NAME(wr + ib * (BYTES), v);                                           \
        for (int t = 0; t < TT; t++) {                                               \
            const float *xb = x + t * K + ib * 32;                                   \
            /* the same four chains for every TT: a row's sum does not depend on TT */ \
            for (int j = 0; j < 4; j++)                                              \
                acc[t][j] = _mm256_fmadd_ps(v[j], _mm256_loadu_ps(xb + 8 * j), acc[t][j]); \
        }                                                                            \
    }                                                                                \
    for (int t = 0; t < TT; t++)                                                     \
        res[t] = hsum8(_mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]),            \
                                     _mm256_add_ps(acc[t][2], acc[t][3])));          \
}
#else
/* portable fallback: exact block dequantization into float[32], then dot */
#define XI_TILE(NAME, BYTES)                                                         \
static inline void                                                                   \
tile_##NAME(const uint8_t *wr, long nb, const float *x, long K, float *res, const int TT) \
{                                                                                    \
    float acc[4][8];                                                                 \
    memset(acc, 0, sizeof acc);                                                      \
    for (long ib = 0; ib < nb; ib++) {                                               \
        float w[32];                                                                 \
        deq_##NAME(wr + ib * (BYTES), w);                                            \
        for (int t = 0; t < TT; t++) {                                               \
            const float *xb = x + t * K + ib * 32;                                   \
            for (int j = 0; j < 32; j++) acc[t][j & 7] += w[j] * xb[j];              \
        }                                                                            \
    }                                                                                \
    for (int t = 0; t < TT; t++) {                                                   \
        float s = 0.0f;                                                              \
        for (int j = 0; j < 8; j++) s += acc[t][j];                                  \
        res[t] = s;                                                                  \
    }                                                                                \
}
#endif

static inline float scalar_f32(const uint8_t *row, long i) { return ((const float *)row)[i]; }
static inline float scalar_f16(const uint8_t *row, long i) { return xi_h2f(xi_rd16(row + 2 * i)); }

#define XI_MATMUL(NAME, BYTES, ROWBYTES, BLOCKED, TAIL)                              \
XI_TILE(NAME, BYTES)                                                                 \
XI_MATMUL_DRIVER(NAME, tile, 32, ROWBYTES, BLOCKED, TAIL)

#define XI_NO_TAIL(row, i) 0.0f
XI_MATMUL(f32, 128, K * 4, 0, scalar_f32)
XI_MATMUL(f16, 64, K * 2, 0, scalar_f16)

/* block types: int8 activations, exact integer dot products, scales after (q8dot.c) */
XI_MATMUL_Q8(q8_0, 32)
XI_MATMUL_Q8(q4_0, 32)
XI_MATMUL_Q8(q4_1, 32)
/* the same over the row-interleaved r8 layout (q8dot.c): the same bits */
XI_MATMUL_Q8(q8_0_r8, 32)
XI_MATMUL_Q8(q4_0_r8, 32)
XI_MATMUL_Q8(q4_1_r8, 32)

/* the load-time repack into r8 (xinfer_native.h) */
#define XI_REPACK_R8(NAME)                                                           \
int xi_repack_##NAME##_r8(const void *src, void *dst, int64_t N, int64_t K)           \
{                                                                                    \
    if (N < 0 || K < 0 || K % 32 != 0 || !src || !dst || src == dst) return XI_EINVAL; \
    xi_q8_repack_r8_##NAME((const uint8_t *)src, (uint8_t *)dst, (long)N, (long)K);  \
    return XI_OK;                                                                    \
}
XI_REPACK_R8(q8_0)
XI_REPACK_R8(q4_0)
XI_REPACK_R8(q4_1)
XI_REPACK_R8(q5_0)
XI_REPACK_R8(q5_1)
