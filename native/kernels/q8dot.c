/* Quantized-weight matrix products with int8 activations: llama.cpp's numerics (ggml-cpu
 * quants.c: quantize_row_q8_0 / q8_1, ggml_vec_dot_q4_0_q8_0 / q4_1_q8_1 / q8_0_q8_0), our code.
 *
 * y (T, N) = (accumulate ? y : 0) + w (N, K) @ x (T, K)^T for w of type q8_0, q4_0 or q4_1.
 *
 * 1. Each x row is quantized once per call, per block b of 32 (xi_q8_quantize_block):
 *      amax = max |x_j|;  d_b = amax / 127;  q_j = rint(x_j * (127 / amax))  (nearest, ties even);
 *      s_b = d_b * (float)sum_j q_j        (q8_1's block sum, used by q4_1's min term);
 *    amax == 0 gives d = s = 0, q = 0; a NaN or inf in the block gives d = s = NaN (the row's
 *    results are NaN, as a float product would be). d and s stay float32 (llama.cpp rounds them
 *    to f16; keeping f32 is more accurate and costs nothing here).
 * 2. Per weight row n, token t, block b: the exact integer dot products of the 32 weight codes
 *    (q8_0: qs; q4_0: nibble - 8; q4_1: nibble) with q, as eight lane sums
 *      L_i = sum_{j = 4i .. 4i+3} w_j * q_j      (int32, exact; the maddubs + madd layout);
 *    then, in float32 and in this order (mul and add rounded separately, no fma):
 *      acc_i = acc_i + (dw_b * d_b) * (float)L_i          (acc_i = 0 before block 0)
 *      q4_1:  summ = summ + mw_b * s_b                     (summ = 0 before block 0)
 *    result = ((acc_0 + acc_4) + (acc_2 + acc_6)) + ((acc_1 + acc_5) + (acc_3 + acc_7))  [+ summ]
 *    dw_b, mw_b: the block's f16 scale and min, exact in float32.
 * The AVX2 path and the portable scalar path compute exactly these operations, so they give the
 * same bits; a (row, token) result depends on that row and token alone: not on T, on how tokens
 * and rows are tiled, or on the thread count. tests/test_q8dot.py holds the numpy model.
 *
 * Tiling (the T > 1 path is a GEMM of int8 tiles): the rows are split into chunks of XI_Q8_NCHUNK over the OpenMP threads; within a chunk,
 * tokens go in tiles of 4 and a weight block is unpacked once for the 4 tokens of a tile, each
 * token with its own accumulators. Quantized x lives in a per-thread scratch buffer that grows
 * to the largest T * K seen and is kept (no allocation per call).
 */
#include <stdlib.h>
#include "xi_common.h"

#define XI_Q8_NCHUNK 16 /* weight rows per chunk */
#define XI_Q8_TT 4      /* tokens per tile */

/* ------------------------------------------------------------------ */
/* activations: one block of 32 floats -> 32 int8 codes, d, s          */

#if defined(__AVX2__)
static inline void quantize_block(const float *x, int8_t *q, float *d, float *s)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], mx = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_loadu_ps(x + 8 * j);
        mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[j]));
        /* |x| == inf or x NaN: not (|x| < inf) */
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_andnot_ps(sign, v[j]), _mm256_set1_ps(INFINITY), _CMP_NLT_UQ));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    if (_mm256_movemask_ps(bad) || amax == 0.0f) {
        memset(q, 0, 32);
        *d = *s = _mm256_movemask_ps(bad) ? NAN : 0.0f;
        return;
    }
    const __m256 id = _mm256_set1_ps(127.0f / amax);
    __m256i i[4];
    for (int j = 0; j < 4; j++)
        i[j] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[j], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    /* block sum of the codes: exact int32 */
    __m256i sum = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
    /* int32 -> int8 in element order (packs interleave the 128-bit lanes: permute back) */
    __m256i p16a = _mm256_packs_epi32(i[0], i[1]), p16b = _mm256_packs_epi32(i[2], i[3]);
    __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p8);
    *d = amax / 127.0f;
    *s = *d * (float)_mm_cvtsi128_si32(s4);
}
#else
static inline void quantize_block(const float *x, int8_t *q, float *d, float *s)
{
    float amax = 0.0f;
    int bad = 0;
    for (int j = 0; j < 32; j++) {
        const float a = fabsf(x[j]);
        bad |= !(a < INFINITY);
        amax = a > amax ? a : amax;
    }
    if (bad || amax == 0.0f) {
        memset(q, 0, 32);
        *d = *s = bad ? NAN : 0.0f;
        return;
    }
    const float id = 127.0f / amax;
    int32_t sum = 0;
    for (int j = 0; j < 32; j++) {
        q[j] = (int8_t)(int32_t)rintf(x[j] * id); /* default rounding mode: nearest, ties even */
        sum += q[j];
    }
    *d = amax / 127.0f;
    *s = *d * (float)sum;
}
#endif

/* x (T, K) -> codes (T, K) int8, d (T, K/32), s (T, K/32) float32 */
XI_SHARED void xi_q8_quantize_rows(const float *x, long T, long K, int8_t *q, float *d, float *s)
{
    const long nb = K / 32;
    _Pragma("omp parallel for schedule(static) if (T * K >= 4 * XI_OMP_MIN_WORK)")
    for (long r = 0; r < T * nb; r++) quantize_block(x + r * 32, q + r * 32, d + r, s + r);
}

/* ------------------------------------------------------------------ */
/* weight blocks -> 32 codes in element order; scales                   */

static inline float wd(const uint8_t *blk) { return xi_h2f(xi_rd16(blk)); }

/* a (row, token) pair's float state: eight lanes and q4_1's min sum */
typedef struct { float lane[8]; float summ; } xi_q8_acc;

static inline float finish(const float a[8])
{
    const float u0 = a[0] + a[4], u1 = a[1] + a[5], u2 = a[2] + a[6], u3 = a[3] + a[7];
    return (u0 + u2) + (u1 + u3);
}

#if defined(__AVX2__)
/* signed weight codes (q8_0, q4_0) times int8 activations: eight int32 lane sums */
static inline __m256i dot_signed(__m256i w, __m256i q)
{
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}
/* unsigned weight codes (q4_1's nibbles 0..15) */
static inline __m256i dot_unsigned(__m256i w, __m256i q)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, q), _mm256_set1_epi16(1));
}
static inline __m256i nib32(const uint8_t *qs)
{
    const __m128i b = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m4 = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m4), _mm_and_si128(b, m4));
}
static inline float hsum8(__m256 v)
{
    float a[8];
    _mm256_storeu_ps(a, v);
    return finish(a);
}

/* one weight row (nb blocks) against TT quantized tokens: res[t] */
#define XI_Q8_TILE(NAME, BYTES, LOADW, DOT, HAS_MIN)                                  \
static inline __attribute__((always_inline)) void                                   \
q8tile_##NAME(const uint8_t *wr, long nb, const int8_t *q, const float *d, const float *s, \
              long K, float *res, const int TT)                                     \
{                                                                                    \
    __m256 acc[XI_Q8_TT];                                                            \
    float summ[XI_Q8_TT];                                                            \
    for (int t = 0; t < XI_Q8_TT; t++) { acc[t] = _mm256_setzero_ps(); summ[t] = 0.0f; } \
    for (long ib = 0; ib < nb; ib++) {                                               \
        const uint8_t *blk = wr + ib * (BYTES);                                      \
        const float dw = wd(blk);                                                    \
        const __m256i w = LOADW;                                                     \
        for (int t = 0; t < TT; t++) {                                               \
            const long o = t * (K / 32) + ib;                                        \
            const __m256i qx = _mm256_loadu_si256((const __m256i *)(q + o * 32));    \
            const __m256 l = _mm256_cvtepi32_ps(DOT(w, qx));                         \
            acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(_mm256_set1_ps(dw * d[o]), l)); \
            if (HAS_MIN) summ[t] = summ[t] + wd(blk + 2) * s[o];                     \
        }                                                                            \
    }                                                                                \
    for (int t = 0; t < TT; t++) res[t] = hsum8(acc[t]) + summ[t];                   \
}
#define XI_LOADW_q8_0 _mm256_loadu_si256((const __m256i *)(blk + 2))
#define XI_LOADW_q4_0 _mm256_sub_epi8(nib32(blk + 2), _mm256_set1_epi8(8))
#define XI_LOADW_q4_1 nib32(blk + 4)
#else
/* portable: the same lane sums and the same float operations, one at a time */
static inline void codes_q8_0(const uint8_t *blk, int32_t *w) { for (int j = 0; j < 32; j++) w[j] = ((const int8_t *)(blk + 2))[j]; }
static inline void codes_q4_0(const uint8_t *blk, int32_t *w)
{
    for (int j = 0; j < 16; j++) { w[j] = (blk[2 + j] & 15) - 8; w[j + 16] = (blk[2 + j] >> 4) - 8; }
}
static inline void codes_q4_1(const uint8_t *blk, int32_t *w)
{
    for (int j = 0; j < 16; j++) { w[j] = blk[4 + j] & 15; w[j + 16] = blk[4 + j] >> 4; }
}
#define XI_Q8_TILE(NAME, BYTES, LOADW, DOT, HAS_MIN)                                  \
static inline void                                                                   \
q8tile_##NAME(const uint8_t *wr, long nb, const int8_t *q, const float *d, const float *s, \
              long K, float *res, const int TT)                                     \
{                                                                                    \
    float acc[XI_Q8_TT][8], summ[XI_Q8_TT];                                          \
    memset(acc, 0, sizeof acc);                                                      \
    memset(summ, 0, sizeof summ);                                                    \
    for (long ib = 0; ib < nb; ib++) {                                               \
        const uint8_t *blk = wr + ib * (BYTES);                                      \
        const float dw = wd(blk);                                                    \
        int32_t w[32];                                                               \
        codes_##NAME(blk, w);                                                        \
        for (int t = 0; t < TT; t++) {                                               \
            const long o = t * (K / 32) + ib;                                        \
            const int8_t *qx = q + o * 32;                                           \
            const float ds = dw * d[o];                                              \
            for (int i = 0; i < 8; i++) {                                            \
                int32_t l = 0;                                                       \
                for (int j = 4 * i; j < 4 * i + 4; j++) l += w[j] * qx[j];           \
                acc[t][i] = acc[t][i] + ds * (float)l;                               \
            }                                                                        \
            if (HAS_MIN) summ[t] = summ[t] + wd(blk + 2) * s[o];                     \
        }                                                                            \
    }                                                                                \
    for (int t = 0; t < TT; t++) res[t] = finish(acc[t]) + summ[t];            \
}
#define XI_LOADW_q8_0 0
#define XI_LOADW_q4_0 0
#define XI_LOADW_q4_1 0
#endif

XI_Q8_TILE(q8_0, XI_Q8_0_BYTES, XI_LOADW_q8_0, dot_signed, 0)
XI_Q8_TILE(q4_0, XI_Q4_0_BYTES, XI_LOADW_q4_0, dot_signed, 0)
XI_Q8_TILE(q4_1, XI_Q4_1_BYTES, XI_LOADW_q4_1, dot_unsigned, 1)

/* ------------------------------------------------------------------ */
/* scratch for the quantized activations: per calling thread, grown, kept */

static __thread void *xi_q8_scratch;
static __thread size_t xi_q8_scratch_bytes;

static void *scratch(size_t nbytes)
{
    if (nbytes > xi_q8_scratch_bytes) {
        void *p = realloc(xi_q8_scratch, nbytes);
        if (!p) return NULL;
        xi_q8_scratch = p;
        xi_q8_scratch_bytes = nbytes;
    }
    return xi_q8_scratch;
}

/* ------------------------------------------------------------------ */
/* the matrix product driver                                           */

#define XI_Q8_MATMUL(NAME, BYTES)                                                    \
static void q8_rows_##NAME(const uint8_t *w, const int8_t *q, const float *d, const float *s, \
                           float *y, long T, long N, long K, int accum)              \
{                                                                                    \
    const long nb = K / 32, rb = nb * (BYTES);                                       \
    const long nchunks = (N + XI_Q8_NCHUNK - 1) / XI_Q8_NCHUNK;                      \
    _Pragma("omp parallel for schedule(static) if (nchunks > 1 && N * K * T >= 4 * XI_OMP_MIN_WORK)") \
    for (long ch = 0; ch < nchunks; ch++) {                                          \
        const long n0 = ch * XI_Q8_NCHUNK;                                           \
        const long n1 = n0 + XI_Q8_NCHUNK < N ? n0 + XI_Q8_NCHUNK : N;               \
        for (long t0 = 0; t0 < T; t0 += XI_Q8_TT) {                                  \
            const long tt = T - t0 < XI_Q8_TT ? T - t0 : XI_Q8_TT;                   \
            const int8_t *qt = q + t0 * K;                                           \
            const float *dt = d + t0 * nb, *st = s + t0 * nb;                        \
            for (long n = n0; n < n1; n++) {                                         \
                float res[XI_Q8_TT];                                                 \
                const uint8_t *wr = w + n * rb;                                      \
                switch (tt) {                                                        \
                case 1: q8tile_##NAME(wr, nb, qt, dt, st, K, res, 1); break;         \
                case 2: q8tile_##NAME(wr, nb, qt, dt, st, K, res, 2); break;         \
                case 3: q8tile_##NAME(wr, nb, qt, dt, st, K, res, 3); break;         \
                default: q8tile_##NAME(wr, nb, qt, dt, st, K, res, 4); break;        \
                }                                                                    \
                for (long t = 0; t < tt; t++) {                                      \
                    float *yp = y + (t0 + t) * N + n;                                \
                    *yp = accum ? *yp + res[t] : res[t];                             \
                }                                                                    \
            }                                                                        \
        }                                                                            \
    }                                                                                \
}                                                                                    \
XI_SHARED void xi_q8dot_rows_##NAME(const uint8_t *w, const float *x, float *y, long T, long N, \
                                    long K, int accumulate)                          \
{                                                                                    \
    if (T <= 0 || N <= 0) return;                                                    \
    const long nb = K / 32;                                                          \
    void *buf = scratch((size_t)T * (size_t)nb * (32 + 2 * sizeof(float)));          \
    if (buf) { /* all T rows quantized once, then every weight row against them */   \
        int8_t *q = (int8_t *)buf;                                                   \
        float *d = (float *)(q + T * K), *s = d + T * nb;                            \
        xi_q8_quantize_rows(x, T, K, q, d, s);                                       \
        q8_rows_##NAME(w, q, d, s, y, T, N, K, accumulate != 0);                     \
        return;                                                                      \
    }                                                                                \
    for (long t = 0; t < T; t++) { /* no scratch: one token at a time, the same bits */ \
        int8_t q[K];                                                                 \
        float d[nb], s[nb];                                                          \
        xi_q8_quantize_rows(x + t * K, 1, K, q, d, s);                               \
        q8_rows_##NAME(w, q, d, s, y + t * N, 1, N, K, accumulate != 0);             \
    }                                                                                \
}

XI_Q8_MATMUL(q8_0, XI_Q8_0_BYTES)
XI_Q8_MATMUL(q4_0, XI_Q4_0_BYTES)
XI_Q8_MATMUL(q4_1, XI_Q4_1_BYTES)
