/* Quantized-weight matrix products with int8 activations: llama.cpp's numerics (ggml-cpu
 * quants.c: quantize_row_q8_0 / q8_1, ggml_vec_dot_q4_0_q8_0 / q4_1_q8_1 / q8_0_q8_0), our code.
 *
 * y (T, N) = (accumulate ? y : 0) + w (N, K) @ x (T, K)^T for w of type q8_0, q4_0, q4_1, q5_0 or q5_1.
 *
 * 1. Each x row is quantized once per call, per block b of 32:
 *      amax = max |x_j|;  q_j = rint(x_j * (127 / amax))  (nearest, ties even);
 *      d_b = f16(amax / 127);  s_b = f16((amax / 127) * (float)sum_j q_j)  (q8_1's block sum, used by
 *      the min term of q4_1 / q5_1), f16() rounding to the nearest half, ties even (llama.cpp stores
 *      d and s as f16: quantize_row_q8_0 / q8_1; the codes come from the unrounded scale);
 *    amax == 0 gives d = s = 0, q = 0; a NaN or inf in the block gives d = s = NaN (the token's
 *    results are NaN, as a float product would be).
 * 2. Per weight row n, token t, block b: the exact integer dot product of the block's 32 weight
 *    codes (q8_0: qs; q4_0: nibble - 8; q4_1: nibble; q5_0: 5-bit code - 16; q5_1: 5-bit code) with q,
 *    S_b = sum_j w_j q_j  (int32);
 *    then in float32, block after block, mul and add rounded separately (no fma):
 *      acc = acc + (dw_b * d_b) * (float)S_b;   q4_1, q5_1 then:  acc = acc + mw_b * s_b
 *    from acc = 0; the result is acc. dw_b, mw_b: the block's f16 scale and min (exact in f32).
 * The AVX2 path and the portable scalar path compute exactly these operations, so they give the
 * same bits; a (row, token) result depends on that row and token alone: not on T, on how tokens
 * and rows are tiled, or on the thread count. tests/test_q8dot.py holds the numpy model.
 *
 * Tiling (the T > 1 path is a GEMM of int8 tiles): rows go in chunks of XI_Q8_NCHUNK over the
 * OpenMP threads; a tile is 8 weight rows x up to 4 tokens: a block of the 8 rows is unpacked once
 * for the 4 tokens, each token's q block is loaded once for the 8 rows, and the 8 rows' integer
 * sums land in the 8 lanes of one vector (a transposing hadd tree), so the scale multiply and the
 * float add are one vector op for 8 rows. Quantized x lives in a per-thread scratch buffer that
 * grows to the largest T * K seen and is kept (no allocation per call).
 */
#include <stdlib.h>
#include "xi_common.h"

#define XI_Q8_NCHUNK 16 /* weight rows per chunk (a multiple of XI_Q8_NR) */
#define XI_Q8_NR 8      /* weight rows per tile */
#define XI_Q8_TT 4      /* tokens per tile */

/* ------------------------------------------------------------------ */
/* activations: one block of 32 floats -> 32 int8 codes, d, s, sum(codes) */

#if defined(__AVX2__)
static inline void quantize_block(const float *x, int8_t *q, float *d, float *s, int32_t *qsum)
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
        *qsum = 0;
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
    *qsum = _mm_cvtsi128_si32(s4);
    *s = xi_f16_round(amax / 127.0f * (float)*qsum);
    *d = xi_f16_round(amax / 127.0f);
}
#else
static inline void quantize_block(const float *x, int8_t *q, float *d, float *s, int32_t *qsum)
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
        *qsum = 0;
        return;
    }
    const float id = 127.0f / amax;
    int32_t sum = 0;
    for (int j = 0; j < 32; j++) {
        q[j] = (int8_t)(int32_t)rintf(x[j] * id); /* default rounding mode: nearest, ties even */
        sum += q[j];
    }
    *qsum = sum;
    *s = xi_f16_round(amax / 127.0f * (float)sum);
    *d = xi_f16_round(amax / 127.0f);
}
#endif

/* x (T, K) -> codes q (T, K) int8, d, s (T, K/32) float32, the codes' block sums qsum (T, K/32) */
XI_SHARED void xi_q8_quantize_rows(const float *x, long T, long K, int8_t *q, float *d, float *s, int32_t *qsum)
{
    const long nb = K / 32;
    _Pragma("omp parallel for schedule(static) if (T * K >= 4 * XI_OMP_MIN_WORK)")
    for (long r = 0; r < T * nb; r++) quantize_block(x + r * 32, q + r * 32, d + r, s + r, qsum + r);
}

/* ------------------------------------------------------------------ */
/* a tile: nr <= 8 weight rows (row stride rb bytes) x TT tokens -> res[t * 8 + r] */

#define XI_KIND_q8_0 0 /* signed codes */
#define XI_KIND_q4_0 1 /* nibbles; -8 applied to the integer sum: sum((n - 8) q) = sum(n q) - 8 sum(q) */
#define XI_KIND_q4_1 2 /* nibbles; min term mw * s */
#define XI_KIND_q5_0 3 /* 5-bit codes; -16 applied to the integer sum */
#define XI_KIND_q5_1 4 /* 5-bit codes; min term mw * s */

#if defined(__AVX2__) && defined(__F16C__)
static inline __m256i nib32(const uint8_t *qs)
{
    const __m128i b = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m4 = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m4), _mm_and_si128(b, m4));
}
/* eight int32 partial sums of 4 products each: signed codes (sign trick) or unsigned nibbles */
static inline __m256i dot_signed(__m256i w, __m256i q)
{
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}
static inline __m256i dot_unsigned(__m256i w, __m256i q)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, q), _mm256_set1_epi16(1));
}
/* r[k] = the sum of v[k]'s eight lanes */
static inline __m256i hsum8x8(const __m256i v[8])
{
    const __m256i a = _mm256_hadd_epi32(v[0], v[1]), b = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i c = _mm256_hadd_epi32(v[4], v[5]), e = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i ab = _mm256_hadd_epi32(a, b), ce = _mm256_hadd_epi32(c, e);
    return _mm256_add_epi32(_mm256_permute2x128_si256(ab, ce, 0x20), _mm256_permute2x128_si256(ab, ce, 0x31));
}

#define XI_Q8_TILE(NAME, BYTES)                                                      \
static inline __attribute__((always_inline)) void                                   \
q8tile_##NAME(const uint8_t *w, long rb, int nr, long nb, const int8_t *q, const float *d, \
              const float *s, const int32_t *qsum, float *res, const int TT)        \
{                                                                                    \
    const int kind = XI_KIND_##NAME;                                                 \
    __m256 acc[XI_Q8_TT];                                                            \
    for (int t = 0; t < XI_Q8_TT; t++) acc[t] = _mm256_setzero_ps();                 \
    for (long b = 0; b < nb; b++) {                                                  \
        __m256i wt[8];                                                               \
        short dh[8] = {0}, mh[8] = {0};                                              \
        for (int r = 0; r < 8; r++) {                                                \
            const uint8_t *blk = w + r * rb + b * (BYTES);                           \
            if (r >= nr) { wt[r] = _mm256_setzero_si256(); continue; }               \
            dh[r] = (short)xi_rd16(blk);                                             \
            if (kind == 2 || kind == 4) mh[r] = (short)xi_rd16(blk + 2);             \
            wt[r] = kind == 0 ? _mm256_loadu_si256((const __m256i *)(blk + 2))       \
                  : kind == 3 ? xi_q5_codes(blk + 2, blk + 6)                        \
                  : kind == 4 ? xi_q5_codes(blk + 4, blk + 8)                        \
                              : nib32(blk + (kind == 1 ? 2 : 4));                    \
        }                                                                            \
        /* built in registers: a 16-byte load of 8 just-stored halves would stall store forwarding */ \
        const __m256 dw = _mm256_cvtph_ps(_mm_setr_epi16(dh[0], dh[1], dh[2], dh[3], dh[4], dh[5], dh[6], dh[7])); \
        const __m256 mw = kind == 2 || kind == 4                                    \
            ? _mm256_cvtph_ps(_mm_setr_epi16(mh[0], mh[1], mh[2], mh[3], mh[4], mh[5], mh[6], mh[7])) \
            : _mm256_setzero_ps();                                                   \
        for (int t = 0; t < TT; t++) {                                               \
            const long o = t * nb + b;                                               \
            const __m256i qx = _mm256_loadu_si256((const __m256i *)(q + o * 32));    \
            __m256i v[8];                                                            \
            for (int r = 0; r < 8; r++)                                              \
                v[r] = kind == 0 ? dot_signed(wt[r], qx) : dot_unsigned(wt[r], qx);  \
            __m256i S = hsum8x8(v);                                                  \
            if (kind == 1) S = _mm256_sub_epi32(S, _mm256_set1_epi32(8 * qsum[o]));  \
            if (kind == 3) S = _mm256_sub_epi32(S, _mm256_set1_epi32(16 * qsum[o])); \
            const __m256 ds = _mm256_mul_ps(dw, _mm256_set1_ps(d[o]));               \
            acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(ds, _mm256_cvtepi32_ps(S))); \
            if (kind == 2 || kind == 4)                                              \
                acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(mw, _mm256_set1_ps(s[o]))); \
        }                                                                            \
    }                                                                                \
    for (int t = 0; t < TT; t++) _mm256_storeu_ps(res + 8 * t, acc[t]);              \
}
#else
/* portable: the same integer sums and the same float operations, one row at a time */
#define XI_Q8_TILE(NAME, BYTES)                                                      \
static inline void                                                                   \
q8tile_##NAME(const uint8_t *w, long rb, int nr, long nb, const int8_t *q, const float *d, \
              const float *s, const int32_t *qsum, float *res, const int TT)        \
{                                                                                    \
    const int kind = XI_KIND_##NAME;                                                 \
    (void)qsum;                                                                      \
    for (int r = 0; r < nr; r++) {                                                   \
        float acc[XI_Q8_TT] = {0};                                                   \
        for (long b = 0; b < nb; b++) {                                              \
            const uint8_t *blk = w + r * rb + b * (BYTES);                           \
            const float dw = xi_h2f(xi_rd16(blk));                                   \
            const float mw = kind == 2 || kind == 4 ? xi_h2f(xi_rd16(blk + 2)) : 0.0f; \
            int32_t c[32];                                                           \
            for (int j = 0; j < 16; j++) {                                           \
                if (kind == 0) {                                                     \
                    c[j] = ((const int8_t *)(blk + 2))[j];                           \
                    c[j + 16] = ((const int8_t *)(blk + 2))[j + 16];                 \
                } else if (kind >= 3) {                                              \
                    const uint8_t *h5 = blk + (kind == 3 ? 2 : 4);                   \
                    const uint32_t qh = (uint32_t)h5[0] | (uint32_t)h5[1] << 8 | (uint32_t)h5[2] << 16 | (uint32_t)h5[3] << 24; \
                    const uint8_t u = h5[4 + j];                                     \
                    c[j] = ((u & 15) | (int)((qh >> j) & 1) << 4) - (kind == 3 ? 16 : 0); \
                    c[j + 16] = ((u >> 4) | (int)((qh >> (j + 16)) & 1) << 4) - (kind == 3 ? 16 : 0); \
                } else {                                                             \
                    const uint8_t u = blk[(kind == 1 ? 2 : 4) + j];                  \
                    c[j] = (u & 15) - (kind == 1 ? 8 : 0);                           \
                    c[j + 16] = (u >> 4) - (kind == 1 ? 8 : 0);                      \
                }                                                                    \
            }                                                                        \
            for (int t = 0; t < TT; t++) {                                           \
                const long o = t * nb + b;                                           \
                int32_t S = 0;                                                       \
                for (int j = 0; j < 32; j++) S += c[j] * q[o * 32 + j];              \
                acc[t] = acc[t] + (dw * d[o]) * (float)S;                            \
                if (kind == 2 || kind == 4) acc[t] = acc[t] + mw * s[o];             \
            }                                                                        \
        }                                                                            \
        for (int t = 0; t < TT; t++) res[8 * t + r] = acc[t];                        \
    }                                                                                \
}
#endif

XI_Q8_TILE(q5_0, XI_Q5_0_BYTES)
XI_Q8_TILE(q5_1, XI_Q5_1_BYTES)
XI_Q8_TILE(q8_0, XI_Q8_0_BYTES)
XI_Q8_TILE(q4_0, XI_Q4_0_BYTES)
XI_Q8_TILE(q4_1, XI_Q4_1_BYTES)

/* ------------------------------------------------------------------ */
/* the row-interleaved layout r8 (a load-time repack of the cpu backend; the GGUF bytes' size):
 * rows in groups of 8; group g's block b is 8 * BYTES bytes at g * 8 * rb + b * 8 * BYTES:
 *   the 8 rows' f16 scales (16 bytes), q4_1: then the 8 rows' f16 mins (16 bytes),
 *   then the codes in 32-byte chunks: chunk c holds 4 bytes of each row, row r at r * 4:
 *     q8_0: codes 4c..4c+3 (8 chunks);
 *     q4_0, q4_1: the GGUF block's qs bytes 4c..4c+3 (4 chunks): low nibbles elements 4c..4c+3,
 *     high nibbles elements 16+4c..16+4c+3;
 *     q5_0, q5_1: first 32 bytes of fifth bits, byte r * 4 + i holding in its bit c the fifth bit of
 *     row r's element 4c + i (c = 0..7), then the nibbles as q4_0's.
 * The N % 8 last rows follow at row * rb in the GGUF layout. One broadcast 4-byte activation chunk
 * meets 8 rows' codes in one vector, so a block's 8 integer sums land in the 8 lanes with no
 * horizontal sum. The integer sums are the same exact integers, so the results are the same bits. */

#if defined(__AVX2__) && defined(__F16C__)
static inline __m256i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

#define XI_R8_TILE(NAME, BYTES)                                                      \
static inline __attribute__((always_inline)) void                                   \
r8tile_##NAME(const uint8_t *g, long nb, const int8_t *q, const float *d, const float *s, \
              const int32_t *qsum, float *res, const int TT)                        \
{                                                                                    \
    const int kind = XI_KIND_##NAME;                                                 \
    __m256 acc[XI_Q8_TT];                                                            \
    for (int t = 0; t < XI_Q8_TT; t++) acc[t] = _mm256_setzero_ps();                 \
    for (long b = 0; b < nb; b++) {                                                  \
        const uint8_t *blk = g + b * 8 * (BYTES);                                    \
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));    \
        const int mins = kind == 2 || kind == 4;                                     \
        const __m256 mw = mins ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16))) \
                               : _mm256_setzero_ps();                                \
        const uint8_t *qs = blk + (mins ? 32 : 16) + (kind >= 3 ? 32 : 0);           \
        __m256i wt[8];                                                               \
        if (kind == 0) {                                                             \
            for (int c = 0; c < 8; c++) wt[c] = _mm256_loadu_si256((const __m256i *)(qs + 32 * c)); \
        } else {                                                                     \
            const __m256i m4 = _mm256_set1_epi8(15);                                 \
            for (int c = 0; c < 4; c++) {                                            \
                const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c)); \
                wt[c] = _mm256_and_si256(v, m4);                                     \
                wt[c + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);           \
            }                                                                        \
            if (kind >= 3) { /* bit c of each byte to 0x10 (a shift of 16-bit lanes: no bit that \
                                crosses a byte reaches bit 4) */                     \
                const __m256i H = _mm256_loadu_si256((const __m256i *)(qs - 32)), b4 = _mm256_set1_epi8(16); \
                wt[0] = _mm256_or_si256(wt[0], _mm256_and_si256(_mm256_slli_epi16(H, 4), b4)); \
                wt[1] = _mm256_or_si256(wt[1], _mm256_and_si256(_mm256_slli_epi16(H, 3), b4)); \
                wt[2] = _mm256_or_si256(wt[2], _mm256_and_si256(_mm256_slli_epi16(H, 2), b4)); \
                wt[3] = _mm256_or_si256(wt[3], _mm256_and_si256(_mm256_slli_epi16(H, 1), b4)); \
                wt[4] = _mm256_or_si256(wt[4], _mm256_and_si256(H, b4));             \
                wt[5] = _mm256_or_si256(wt[5], _mm256_and_si256(_mm256_srli_epi16(H, 1), b4)); \
                wt[6] = _mm256_or_si256(wt[6], _mm256_and_si256(_mm256_srli_epi16(H, 2), b4)); \
                wt[7] = _mm256_or_si256(wt[7], _mm256_and_si256(_mm256_srli_epi16(H, 3), b4)); \
            }                                                                        \
        }                                                                            \
        for (int t = 0; t < TT; t++) {                                               \
            const long o = t * nb + b;                                               \
            const int8_t *qb = q + o * 32;                                           \
            __m256i S;                                                               \
            if (kind == 0) {                                                         \
                S = _mm256_setzero_si256();                                          \
                for (int c = 0; c < 8; c++) S = _mm256_add_epi32(S, dot_signed(wt[c], bcast4(qb + 4 * c))); \
            } else if (kind <= 2) {                                                  \
                /* |sum of 8 maddubs lanes| <= 8 * 2 * 15 * 127 < 2^15: exact in int16 */ \
                __m256i p = _mm256_maddubs_epi16(wt[0], bcast4(qb));                 \
                for (int c = 1; c < 8; c++)                                          \
                    p = _mm256_add_epi16(p, _mm256_maddubs_epi16(wt[c], bcast4(qb + 4 * c))); \
                S = _mm256_madd_epi16(p, _mm256_set1_epi16(1));                      \
                if (kind == 1) S = _mm256_sub_epi32(S, _mm256_set1_epi32(8 * qsum[o])); \
            } else {                                                                 \
                /* 5-bit codes: 4 maddubs lanes at most, 4 * 2 * 31 * 127 < 2^15 */  \
                __m256i p = _mm256_maddubs_epi16(wt[0], bcast4(qb));                 \
                __m256i p2 = _mm256_maddubs_epi16(wt[4], bcast4(qb + 16));           \
                for (int c = 1; c < 4; c++) {                                        \
                    p = _mm256_add_epi16(p, _mm256_maddubs_epi16(wt[c], bcast4(qb + 4 * c))); \
                    p2 = _mm256_add_epi16(p2, _mm256_maddubs_epi16(wt[c + 4], bcast4(qb + 16 + 4 * c))); \
                }                                                                    \
                S = _mm256_add_epi32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)), _mm256_madd_epi16(p2, _mm256_set1_epi16(1))); \
                if (kind == 3) S = _mm256_sub_epi32(S, _mm256_set1_epi32(16 * qsum[o])); \
            }                                                                        \
            const __m256 ds = _mm256_mul_ps(dw, _mm256_set1_ps(d[o]));               \
            acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(ds, _mm256_cvtepi32_ps(S))); \
            if (mins)                                                                \
                acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(mw, _mm256_set1_ps(s[o]))); \
        }                                                                            \
    }                                                                                \
    for (int t = 0; t < TT; t++) _mm256_storeu_ps(res + 8 * t, acc[t]);              \
}
#else
/* portable: code j of row r read from the interleaved block; the same operations as above */
#define XI_R8_TILE(NAME, BYTES)                                                      \
static inline void                                                                   \
r8tile_##NAME(const uint8_t *g, long nb, const int8_t *q, const float *d, const float *s, \
              const int32_t *qsum, float *res, const int TT)                        \
{                                                                                    \
    const int kind = XI_KIND_##NAME;                                                 \
    (void)qsum;                                                                      \
    for (int r = 0; r < 8; r++) {                                                    \
        float acc[XI_Q8_TT] = {0};                                                   \
        for (long b = 0; b < nb; b++) {                                              \
            const uint8_t *blk = g + b * 8 * (BYTES);                                \
            const int mins = kind == 2 || kind == 4;                                 \
            const float dw = xi_h2f(xi_rd16(blk + 2 * r));                           \
            const float mw = mins ? xi_h2f(xi_rd16(blk + 16 + 2 * r)) : 0.0f;        \
            const uint8_t *qs = blk + (mins ? 32 : 16) + (kind >= 3 ? 32 : 0);       \
            int32_t c[32];                                                           \
            for (int j = 0; j < 32; j++) {                                           \
                if (kind == 0) {                                                     \
                    c[j] = (int8_t)qs[(j / 4) * 32 + r * 4 + j % 4];                 \
                } else {                                                             \
                    const uint8_t u = qs[((j & 15) / 4) * 32 + r * 4 + j % 4];       \
                    c[j] = j < 16 ? u & 15 : u >> 4;                                 \
                    if (kind >= 3) c[j] |= ((qs[-32 + r * 4 + j % 4] >> (j / 4)) & 1) << 4; \
                    c[j] -= kind == 1 ? 8 : kind == 3 ? 16 : 0;                      \
                }                                                                    \
            }                                                                        \
            for (int t = 0; t < TT; t++) {                                           \
                const long o = t * nb + b;                                           \
                int32_t S = 0;                                                       \
                for (int j = 0; j < 32; j++) S += c[j] * q[o * 32 + j];              \
                acc[t] = acc[t] + (dw * d[o]) * (float)S;                            \
                if (mins) acc[t] = acc[t] + mw * s[o];                               \
            }                                                                        \
        }                                                                            \
        for (int t = 0; t < TT; t++) res[8 * t + r] = acc[t];                        \
    }                                                                                \
}
#endif

XI_R8_TILE(q5_0, XI_Q5_0_BYTES)
XI_R8_TILE(q5_1, XI_Q5_1_BYTES)
XI_R8_TILE(q8_0, XI_Q8_0_BYTES)
XI_R8_TILE(q4_0, XI_Q4_0_BYTES)
XI_R8_TILE(q4_1, XI_Q4_1_BYTES)

/* GGUF rows (N, K) -> the r8 layout (same size); src and dst must not overlap */
#define XI_R8_REPACK(NAME, BYTES)                                                    \
XI_SHARED void xi_q8_repack_r8_##NAME(const uint8_t *src, uint8_t *dst, long N, long K) \
{                                                                                    \
    const int kind = XI_KIND_##NAME;                                                 \
    const long nb = K / 32, rb = nb * (BYTES), n8 = N / 8 * 8;                       \
    const int head = kind == 2 || kind == 4 ? 4 : 2, nqs = kind == 0 ? 32 : 16;      \
    const int h5 = kind >= 3 ? 4 : 0; /* qh bytes after the scales */                \
    for (long g = 0; g < n8; g += 8)                                                 \
        for (long b = 0; b < nb; b++) {                                              \
            uint8_t *o = dst + g * rb + b * 8 * (BYTES);                             \
            for (int r = 0; r < 8; r++) {                                            \
                const uint8_t *blk = src + (g + r) * rb + b * (BYTES);               \
                memcpy(o + 2 * r, blk, 2);                                           \
                if (head == 4) memcpy(o + 16 + 2 * r, blk + 2, 2);                   \
                for (int c = 0; c < nqs / 4; c++)                                    \
                    memcpy(o + 8 * (head + h5) + c * 32 + r * 4, blk + head + h5 + 4 * c, 4); \
                if (h5) {                                                            \
                    const uint8_t *qh = blk + head;                                  \
                    for (int i = 0; i < 4; i++) {                                    \
                        uint8_t v = 0;                                               \
                        for (int c = 0; c < 8; c++)                                  \
                            v |= (uint8_t)(((qh[(4 * c + i) / 8] >> ((4 * c + i) % 8)) & 1) << c); \
                        o[8 * head + r * 4 + i] = v;                                 \
                    }                                                                \
                }                                                                    \
            }                                                                        \
        }                                                                            \
    memcpy(dst + n8 * rb, src + n8 * rb, (size_t)((N - n8) * rb));                   \
}
XI_R8_REPACK(q5_0, XI_Q5_0_BYTES)
XI_R8_REPACK(q5_1, XI_Q5_1_BYTES)
XI_R8_REPACK(q8_0, XI_Q8_0_BYTES)
XI_R8_REPACK(q4_0, XI_Q4_0_BYTES)
XI_R8_REPACK(q4_1, XI_Q4_1_BYTES)

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
                           const int32_t *qsum, float *y, long T, long N, long K, int accum, int r8) \
{                                                                                    \
    const long nb = K / 32, rb = nb * (BYTES), n8 = r8 ? N / 8 * 8 : 0;              \
    const long nchunks = (N + XI_Q8_NCHUNK - 1) / XI_Q8_NCHUNK;                      \
    _Pragma("omp parallel for schedule(static) if (nchunks > 1 && N * K * T >= 4 * XI_OMP_MIN_WORK)") \
    for (long ch = 0; ch < nchunks; ch++) {                                          \
        const long n0 = ch * XI_Q8_NCHUNK;                                           \
        const long n1 = n0 + XI_Q8_NCHUNK < N ? n0 + XI_Q8_NCHUNK : N;               \
        for (long t0 = 0; t0 < T; t0 += XI_Q8_TT) {                                  \
            const long tt = T - t0 < XI_Q8_TT ? T - t0 : XI_Q8_TT;                   \
            const long o = t0 * nb;                                                  \
            for (long n = n0; n < n1; n += XI_Q8_NR) {                               \
                const int nr = n1 - n < XI_Q8_NR ? (int)(n1 - n) : XI_Q8_NR;         \
                float res[XI_Q8_TT * XI_Q8_NR];                                      \
                const uint8_t *wr = w + n * rb; /* a group of the r8 layout starts there too */ \
                if (n < n8) {                                                        \
                    switch (tt) {                                                    \
                    case 1: r8tile_##NAME(wr, nb, q + o * 32, d + o, s + o, qsum + o, res, 1); break; \
                    case 2: r8tile_##NAME(wr, nb, q + o * 32, d + o, s + o, qsum + o, res, 2); break; \
                    case 3: r8tile_##NAME(wr, nb, q + o * 32, d + o, s + o, qsum + o, res, 3); break; \
                    default: r8tile_##NAME(wr, nb, q + o * 32, d + o, s + o, qsum + o, res, 4); break; \
                    }                                                                \
                } else {                                                             \
                    switch (tt) {                                                    \
                    case 1: q8tile_##NAME(wr, rb, nr, nb, q + o * 32, d + o, s + o, qsum + o, res, 1); break; \
                    case 2: q8tile_##NAME(wr, rb, nr, nb, q + o * 32, d + o, s + o, qsum + o, res, 2); break; \
                    case 3: q8tile_##NAME(wr, rb, nr, nb, q + o * 32, d + o, s + o, qsum + o, res, 3); break; \
                    default: q8tile_##NAME(wr, rb, nr, nb, q + o * 32, d + o, s + o, qsum + o, res, 4); break; \
                    }                                                                \
                }                                                                    \
                for (long t = 0; t < tt; t++)                                        \
                    for (int r = 0; r < nr; r++) {                                   \
                        float *yp = y + (t0 + t) * N + n + r;                        \
                        *yp = accum ? *yp + res[8 * t + r] : res[8 * t + r];         \
                    }                                                                \
            }                                                                        \
        }                                                                            \
    }                                                                                \
}                                                                                    \
static void q8dot_##NAME(const uint8_t *w, const float *x, float *y, long T, long N, long K, \
                         int accumulate, int r8)                                     \
{                                                                                    \
    if (T <= 0 || N <= 0) return;                                                    \
    const long nb = K / 32;                                                          \
    const size_t row = (size_t)nb * (32 + 2 * sizeof(float) + sizeof(int32_t));     \
    void *buf = scratch((size_t)T * row + 1);                                        \
    if (buf) { /* all T rows quantized once, then every weight row against them */   \
        int8_t *q = (int8_t *)buf;                                                   \
        float *d = (float *)(q + T * K), *s = d + T * nb;                            \
        int32_t *qsum = (int32_t *)(s + T * nb);                                     \
        xi_q8_quantize_rows(x, T, K, q, d, s, qsum);                                 \
        q8_rows_##NAME(w, q, d, s, qsum, y, T, N, K, accumulate != 0, r8);           \
        return;                                                                      \
    }                                                                                \
    for (long t = 0; t < T; t++) { /* no scratch: one token at a time, the same bits */ \
        int8_t q[K > 0 ? K : 1];                                                     \
        float d[nb > 0 ? nb : 1], s[nb > 0 ? nb : 1];                                \
        int32_t qsum[nb > 0 ? nb : 1];                                               \
        xi_q8_quantize_rows(x + t * K, 1, K, q, d, s, qsum);                         \
        q8_rows_##NAME(w, q, d, s, qsum, y + t * N, 1, N, K, accumulate != 0, r8);   \
    }                                                                                \
}                                                                                    \
XI_SHARED void xi_q8dot_rows_##NAME(const uint8_t *w, const float *x, float *y, long T, long N, \
                                    long K, int accumulate)                          \
{                                                                                    \
    q8dot_##NAME(w, x, y, T, N, K, accumulate, 0);                                   \
}                                                                                    \
XI_SHARED void xi_q8dot_rows_##NAME##_r8(const uint8_t *w, const float *x, float *y, long T, long N, \
                                         long K, int accumulate)                     \
{                                                                                    \
    q8dot_##NAME(w, x, y, T, N, K, accumulate, 1);                                   \
}

XI_Q8_MATMUL(q5_0, XI_Q5_0_BYTES)
XI_Q8_MATMUL(q5_1, XI_Q5_1_BYTES)
XI_Q8_MATMUL(q8_0, XI_Q8_0_BYTES)
XI_Q8_MATMUL(q4_0, XI_Q4_0_BYTES)
XI_Q8_MATMUL(q4_1, XI_Q4_1_BYTES)
