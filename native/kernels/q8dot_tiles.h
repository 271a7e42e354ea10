/* q8dot.c's per-path part: the tiles and the row driver of y (T, N) (+)= w (N, K) @ x (T, K)^T from x
 * quantized per block of 32. Included by one unit per instruction-set path (xi_q8.h), which defines
 * XI_ISA first: every function here is static, so each unit holds its own copy, compiled for its
 * path. The numerics and the tiling are q8dot.c's (its header comment); a (row, token) result is the
 * same bits on every path.
 *
 * The integer sums, exact on every path:
 *   AVX2: vpmaddubsw (unsigned x signed bytes, pairs summed to int16 with saturation) then vpmaddwd
 *     (pairs to int32). Saturation never happens: signed q8_0 codes take the sign trick
 *     (|w| x sign(q, w), w = -128 included: a product is at most 128 * 127, a pair 32512 < 2^15;
 *     the quantizer's |q| <= 127); nibbles (<= 15) and
 *     5-bit codes (<= 31) against |q| <= 127 let 8 resp. 4 vpmaddubsw results (16 resp. 8 products)
 *     add up in int16: 8 * 2 * 15 * 127 = 30480 and 4 * 2 * 31 * 127 = 31496 < 2^15.
 *   VNNI (AVX-VNNI, AVX-512 VNNI): vpdpbusd multiplies unsigned x signed bytes and adds each group of
 *     4 products to an int32 lane with no intermediate rounding or saturation (the non-saturating
 *     form): exact while the sums fit int32, and a block's 32 products are at most 32 * 255 * 127.
 *     Signed q8_0 codes w go in as the unsigned w + 128 (w ^ 0x80), and 128 * sum(q) (qsum, exact
 *     from the quantizer) comes off the int32 sum: sum((w + 128) q) - 128 sum(q) = sum(w q).
 *   So every path has the same int32 S per (row, token, block), then the same float operations.
 * AVX-512 VNNI runs the 256-bit forms here (EVEX: 32 vector registers): a tile is 8 rows x 4 bytes,
 * exactly one 256-bit vector per activation chunk; a 512-bit form (two chunks a vector) needs the 8
 * rows' pairs interleaved or the activations permuted, and an 8-lane reduction a block, so it wins
 * only where 512-bit vpdpbusd issues twice as fast as 256-bit (not on Zen 4): not measured yet.
 */
#ifndef XI_ISA
#error "define XI_ISA (xi_q8.h) before including q8dot_tiles.h"
#endif
#include "xi_common.h"
#include "xi_q8.h"

#if XI_ISA == XI_ISA_AVX512VNNI
#define XI_DPBUSD(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#elif XI_ISA == XI_ISA_AVXVNNI
#define XI_DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#endif

/* ------------------------------------------------------------------ */
/* a tile: nr <= 8 weight rows (row stride rb bytes) x TT tokens -> res[t * 8 + r] */


#if XI_ISA >= XI_ISA_AVX2
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
#if XI_ISA >= XI_ISA_AVXVNNI
/* weight codes as vpdpbusd's unsigned operand: q8_0's signed codes + 128 (xor 0x80; 128 sum(q) comes
 * off the sum: XI_Q8_W_OFFSET), the unsigned nibbles and 5-bit codes as they are */
#define XI_Q8_W_OFFSET 128
static inline __m256i w_operand(int kind, __m256i w)
{
    return kind == XI_KIND_q8_0 ? _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)) : w;
}
static inline __m256i dot8(int kind, __m256i w, __m256i q)
{
    (void)kind;
    return XI_DPBUSD(_mm256_setzero_si256(), w, q);
}
#else
#define XI_Q8_W_OFFSET 0
static inline __m256i w_operand(int kind, __m256i w)
{
    (void)kind;
    return w;
}
static inline __m256i dot8(int kind, __m256i w, __m256i q)
{
    return kind == XI_KIND_q8_0 ? dot_signed(w, q) : dot_unsigned(w, q);
}
#endif
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
            wt[r] = w_operand(kind,                                                  \
                    kind == 0 ? _mm256_loadu_si256((const __m256i *)(blk + 2))       \
                  : kind == 3 ? xi_q5_codes(blk + 2, blk + 6)                        \
                  : kind == 4 ? xi_q5_codes(blk + 4, blk + 8)                        \
                              : nib32(blk + (kind == 1 ? 2 : 4)));                   \
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
                v[r] = dot8(kind, wt[r], qx);                                        \
            __m256i S = hsum8x8(v);                                                  \
            if (kind == 0 && XI_Q8_W_OFFSET)                                         \
                S = _mm256_sub_epi32(S, _mm256_set1_epi32(XI_Q8_W_OFFSET * qsum[o])); \
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

/* the row-interleaved layout r8 (q8dot.c describes it): a tile is one group of 8 rows x TT tokens */

#if XI_ISA >= XI_ISA_AVX2
static inline __m256i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* a block's 8 rows' exact int32 sums S (one lane a row) against one token's codes qb (32 bytes);
 * qsum: the sum of qb; the codes of chunk c (wt[c], 4 bytes a row) meet q elements 4c..4c+3 */
#if XI_ISA >= XI_ISA_AVXVNNI
static inline __attribute__((always_inline)) __m256i r8_dot(int kind, const __m256i wt[8], const int8_t *qb,
                                                            int32_t qsum)
{
    /* two dependency chains of 4 vpdpbusd (its latency is several cycles) */
    __m256i a = XI_DPBUSD(_mm256_setzero_si256(), wt[0], bcast4(qb));
    __m256i b = XI_DPBUSD(_mm256_setzero_si256(), wt[1], bcast4(qb + 4));
    for (int c = 2; c < 8; c += 2) {
        a = XI_DPBUSD(a, wt[c], bcast4(qb + 4 * c));
        b = XI_DPBUSD(b, wt[c + 1], bcast4(qb + 4 * c + 4));
    }
    /* q8_0: the codes went in + 128; q4_0 / q5_0: the nibbles' - 8 / 5-bit codes' - 16 */
    const int off = kind == 0 ? XI_Q8_W_OFFSET : kind == 1 ? 8 : kind == 3 ? 16 : 0;
    const __m256i S = _mm256_add_epi32(a, b);
    return off ? _mm256_sub_epi32(S, _mm256_set1_epi32(off * qsum)) : S;
}
#else
static inline __attribute__((always_inline)) __m256i r8_dot(int kind, const __m256i wt[8], const int8_t *qb,
                                                            int32_t qsum)
{
    __m256i S;
    if (kind == 0) {
        S = _mm256_setzero_si256();
        for (int c = 0; c < 8; c++) S = _mm256_add_epi32(S, dot_signed(wt[c], bcast4(qb + 4 * c)));
    } else if (kind <= 2) {
        /* |sum of 8 maddubs lanes| <= 8 * 2 * 15 * 127 < 2^15: exact in int16 */
        __m256i p = _mm256_maddubs_epi16(wt[0], bcast4(qb));
        for (int c = 1; c < 8; c++)
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(wt[c], bcast4(qb + 4 * c)));
        S = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
        if (kind == 1) S = _mm256_sub_epi32(S, _mm256_set1_epi32(8 * qsum));
    } else {
        /* 5-bit codes: 4 maddubs lanes at most, 4 * 2 * 31 * 127 < 2^15 */
        __m256i p = _mm256_maddubs_epi16(wt[0], bcast4(qb));
        __m256i p2 = _mm256_maddubs_epi16(wt[4], bcast4(qb + 16));
        for (int c = 1; c < 4; c++) {
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(wt[c], bcast4(qb + 4 * c)));
            p2 = _mm256_add_epi16(p2, _mm256_maddubs_epi16(wt[c + 4], bcast4(qb + 16 + 4 * c)));
        }
        S = _mm256_add_epi32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)), _mm256_madd_epi16(p2, _mm256_set1_epi16(1)));
        if (kind == 3) S = _mm256_sub_epi32(S, _mm256_set1_epi32(16 * qsum));
    }
    return S;
}
#endif

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
            for (int c = 0; c < 8; c++)                                              \
                wt[c] = w_operand(kind, _mm256_loadu_si256((const __m256i *)(qs + 32 * c))); \
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
            const __m256i S = r8_dot(kind, wt, q + o * 32, qsum[o]);                  \
            const __m256 ds = _mm256_mul_ps(dw, _mm256_set1_ps(d[o]));               \
            acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(ds, _mm256_cvtepi32_ps(S))); \
            if (mins)                                                                \
                acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(mw, _mm256_set1_ps(s[o]))); \
        }                                                                            \
    }                                                                                \
    for (int t = 0; t < TT; t++) _mm256_storeu_ps(res + 8 * t, acc[t]);              \
}
#else
/* portable: a block's 8 rows' codes unpacked in element order (the chunks read in their byte order),
 * then per token the 8 rows' integer sums; the same operations as above, per (row, token) in the same
 * order (block after block) */
#define XI_R8_TILE(NAME, BYTES)                                                      \
static inline void                                                                   \
r8tile_##NAME(const uint8_t *g, long nb, const int8_t *q, const float *d, const float *s, \
              const int32_t *qsum, float *res, const int TT)                        \
{                                                                                    \
    const int kind = XI_KIND_##NAME;                                                 \
    const int mins = kind == 2 || kind == 4;                                         \
    (void)qsum;                                                                      \
    float acc[XI_Q8_TT][8] = {{0}};                                                  \
    for (long b = 0; b < nb; b++) {                                                  \
        const uint8_t *blk = g + b * 8 * (BYTES);                                    \
        const uint8_t *qs = blk + (mins ? 32 : 16) + (kind >= 3 ? 32 : 0);           \
        int32_t c[8][32];                                                            \
        if (kind == 0) {                                                             \
            for (int ch = 0; ch < 8; ch++)                                           \
                for (int r = 0; r < 8; r++)                                          \
                    for (int i = 0; i < 4; i++) c[r][4 * ch + i] = (int8_t)qs[32 * ch + 4 * r + i]; \
        } else {                                                                     \
            const int off = kind == 1 ? 8 : kind == 3 ? 16 : 0;                      \
            for (int ch = 0; ch < 4; ch++)                                           \
                for (int r = 0; r < 8; r++)                                          \
                    for (int i = 0; i < 4; i++) {                                    \
                        const uint8_t u = qs[32 * ch + 4 * r + i];                   \
                        c[r][4 * ch + i] = u & 15;                                   \
                        c[r][16 + 4 * ch + i] = u >> 4;                              \
                    }                                                                \
            for (int r = 0; r < 8; r++)                                              \
                for (int i = 0; i < 4; i++) {                                        \
                    const int h = kind >= 3 ? qs[-32 + 4 * r + i] : 0; /* bit ch: element 4 ch + i */ \
                    for (int ch = 0; ch < 8; ch++)                                   \
                        c[r][4 * ch + i] = (c[r][4 * ch + i] | ((h >> ch) & 1) << 4) - off; \
                }                                                                    \
        }                                                                            \
        float dw[8], mw[8];                                                          \
        for (int r = 0; r < 8; r++) {                                                \
            dw[r] = xi_h2f(xi_rd16(blk + 2 * r));                                    \
            mw[r] = mins ? xi_h2f(xi_rd16(blk + 16 + 2 * r)) : 0.0f;                 \
        }                                                                            \
        for (int t = 0; t < TT; t++) {                                               \
            const long o = t * nb + b;                                               \
            for (int r = 0; r < 8; r++) {                                            \
                int32_t S = 0;                                                       \
                for (int j = 0; j < 32; j++) S += c[r][j] * q[o * 32 + j];           \
                acc[t][r] = acc[t][r] + (dw[r] * d[o]) * (float)S;                   \
                if (mins) acc[t][r] = acc[t][r] + mw[r] * s[o];                      \
            }                                                                        \
        }                                                                            \
    }                                                                                \
    for (int t = 0; t < TT; t++)                                                     \
        for (int r = 0; r < 8; r++) res[8 * t + r] = acc[t][r];                      \
}
#endif

XI_R8_TILE(q5_0, XI_Q5_0_BYTES)
XI_R8_TILE(q5_1, XI_Q5_1_BYTES)
XI_R8_TILE(q8_0, XI_Q8_0_BYTES)
XI_R8_TILE(q4_0, XI_Q4_0_BYTES)
XI_R8_TILE(q4_1, XI_Q4_1_BYTES)

/* ------------------------------------------------------------------ */
/* the row driver: q8_rows_DT, xi_q8_rows_fn (xi_q8.h)                  */

#define XI_Q8_ROWS(NAME, BYTES)                                                      \
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
}

XI_Q8_ROWS(q5_0, XI_Q5_0_BYTES)
XI_Q8_ROWS(q5_1, XI_Q5_1_BYTES)
XI_Q8_ROWS(q8_0, XI_Q8_0_BYTES)
XI_Q8_ROWS(q4_0, XI_Q4_0_BYTES)
XI_Q8_ROWS(q4_1, XI_Q4_1_BYTES)
