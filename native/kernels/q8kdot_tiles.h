/* q8kdot.c's per-path part: the K-quant tiles and row driver of y (T, N) (+)= w (N, K) @ x (T, K)^T
 * from x quantized per super-block of 256 (q8_K). Included by one unit per instruction-set path
 * (xi_q8.h) after it defines XI_ISA; every function is static. The numerics are q8kdot.c's.
 *
 * The exact integers S of a super-block, per path:
 *   AVX2: per group of 32 codes (4-, 5- or 6-bit, unsigned, <= 63) vpmaddubsw against the int8 codes q
 *     (a pair at most 2 * 63 * 127 = 16002 < 2^15: no saturation), then vpmaddwd by the group's
 *     scale (q4_k, q5_k: one 6-bit scale a group; q6_k: one int8 scale per 16, i.e. per 128-bit
 *     half) into int32, added up; |S| < 2^31 by far.
 *   VNNI: the same vpmaddubsw, then vpdpwssd: the vpmaddwd and the add in one instruction (int16
 *     pairs multiplied and added to the int32 lanes with no rounding or saturation: the same int32).
 *   AVX-512 VNNI: the same on 512-bit vectors, two groups a vector (64 codes of q, one load).
 * Then the same float operations in the same order on every path: the same bits.
 */
#ifndef XI_ISA
#error "define XI_ISA (xi_q8.h) before including q8kdot_tiles.h"
#endif
#include "xi_common.h"
#include "xi_q8.h"

/* ------------------------------------------------------------------ */
/* one super-block's scales: q4_k / q5_k 8 (scale, min) pairs; q6_k 16 int8 scales */

static inline void k_scales(int kind, const uint8_t *blk, int *sc, int *m)
{
    if (kind == XI_KIND_q6_k) {
        for (int k = 0; k < 16; k++) sc[k] = ((const int8_t *)(blk + 192))[k];
        return;
    }
    for (int g = 0; g < 8; g++) xi_scale_min_k4(g, blk + 4, &sc[g], &m[g]);
}

static inline float k_d(int kind, const uint8_t *blk) { return xi_h2f(xi_rd16(blk + (kind == XI_KIND_q6_k ? 208 : 0))); }

/* (float) M's integer: q4_k, q5_k only */
static inline int32_t k_mins(const int *m, const int32_t *bs)
{
    int32_t M = 0;
    for (int g = 0; g < 8; g++) M += m[g] * (bs[2 * g] + bs[2 * g + 1]);
    return M;
}

#if XI_ISA >= XI_ISA_AVX2
/* the super-block's 256 codes as 8 vectors of 32 (element order) */
static inline __attribute__((always_inline)) void k_codes(int kind, const uint8_t *blk, __m256i w[8])
{
    const __m256i m4 = _mm256_set1_epi8(15);
    if (kind == XI_KIND_q6_k) {
        const __m256i m2 = _mm256_set1_epi8(3);
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(blk + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32));
            const __m256i hb = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
            /* 16-bit lane shifts: the masks keep each byte's own bits */
            w[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4));
            w[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4));
            w[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4));
            w[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4));
        }
        return;
    }
    const uint8_t *qs = blk + (kind == XI_KIND_q5_k ? 48 : 16);
    for (int p = 0; p < 4; p++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * p));
        w[2 * p] = _mm256_and_si256(v, m4);
        w[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
    if (kind == XI_KIND_q5_k) { /* bit g of qh[l] is the fifth bit of group g's element l */
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 16)), one = _mm256_set1_epi8(1);
        for (int g = 0; g < 8; g++)
            w[g] = _mm256_or_si256(w[g], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, g), one), 4));
    }
}

static inline int32_t hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* a super-block's codes w (8 vectors of 32) and the int16 scale of each of their lanes sv, made ready
 * for k_dot once per super-block; k_dot: their exact int32 sum sum_j sc_j c_j q_j against one token's
 * 256 codes qb */
#if XI_ISA == XI_ISA_AVX512VNNI
typedef struct { __m512i w[4], sv[4]; } k_prep; /* groups 2i, 2i + 1 in the halves of vector i */
static inline __attribute__((always_inline)) void k_prepare(k_prep *p, const __m256i w[8], const __m256i sv[8])
{
    for (int i = 0; i < 4; i++) {
        p->w[i] = _mm512_inserti64x4(_mm512_castsi256_si512(w[2 * i]), w[2 * i + 1], 1);
        p->sv[i] = _mm512_inserti64x4(_mm512_castsi256_si512(sv[2 * i]), sv[2 * i + 1], 1);
    }
}
static inline __attribute__((always_inline)) int32_t k_dot(const k_prep *p, const int8_t *qb)
{
    __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512(); /* two dependency chains */
    for (int i = 0; i < 4; i += 2) {
        a = _mm512_dpwssd_epi32(a, _mm512_maddubs_epi16(p->w[i], _mm512_loadu_si512((const void *)(qb + 64 * i))), p->sv[i]);
        b = _mm512_dpwssd_epi32(b, _mm512_maddubs_epi16(p->w[i + 1], _mm512_loadu_si512((const void *)(qb + 64 * i + 64))),
                                p->sv[i + 1]);
    }
    return _mm512_reduce_add_epi32(_mm512_add_epi32(a, b));
}
#else
typedef struct { __m256i w[8], sv[8]; } k_prep;
static inline __attribute__((always_inline)) void k_prepare(k_prep *p, const __m256i w[8], const __m256i sv[8])
{
    for (int g = 0; g < 8; g++) {
        p->w[g] = w[g];
        p->sv[g] = sv[g];
    }
}
static inline __attribute__((always_inline)) int32_t k_dot(const k_prep *p, const int8_t *qb)
{
#if XI_ISA == XI_ISA_AVXVNNI
    __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256(); /* two dependency chains */
    for (int g = 0; g < 8; g += 2) {
        a = _mm256_dpwssd_avx_epi32(a, _mm256_maddubs_epi16(p->w[g], _mm256_loadu_si256((const __m256i *)(qb + 32 * g))),
                                    p->sv[g]);
        b = _mm256_dpwssd_avx_epi32(b, _mm256_maddubs_epi16(p->w[g + 1], _mm256_loadu_si256((const __m256i *)(qb + 32 * g + 32))),
                                    p->sv[g + 1]);
    }
    return hsum_i32(_mm256_add_epi32(a, b));
#else
    __m256i a = _mm256_setzero_si256();
    for (int g = 0; g < 8; g++) {
        const __m256i pr = _mm256_maddubs_epi16(p->w[g], _mm256_loadu_si256((const __m256i *)(qb + 32 * g)));
        a = _mm256_add_epi32(a, _mm256_madd_epi16(pr, p->sv[g]));
    }
    return hsum_i32(a);
#endif
}
#endif

#define XI_K_TILE(NAME, BYTES)                                                       \
static inline __attribute__((always_inline)) void                                   \
ktile_##NAME(const uint8_t *wr, long nb, const int8_t *q, const float *d, const int32_t *bs, \
             float *res, const int TT)                                               \
{                                                                                    \
    const int kind = XI_KIND_##NAME;                                                 \
    float acc[XI_K_TT] = {0};                                                        \
    for (long b = 0; b < nb; b++) {                                                  \
        const uint8_t *blk = wr + b * (BYTES);                                       \
        int sc[16], m[8];                                                            \
        k_scales(kind, blk, sc, m);                                                  \
        const float dw = k_d(kind, blk);                                             \
        const float dmin = kind == XI_KIND_q6_k ? 0.0f : xi_h2f(xi_rd16(blk + 2));   \
        __m256i w[8], sv[8];                                                         \
        k_codes(kind, blk, w);                                                       \
        for (int g = 0; g < 8; g++) /* the int16 lanes of a vector of 32 codes: 16 a group of 16 */ \
            sv[g] = kind == XI_KIND_q6_k ? _mm256_set_m128i(_mm_set1_epi16((short)sc[2 * g + 1]), _mm_set1_epi16((short)sc[2 * g])) \
                                         : _mm256_set1_epi16((short)sc[g]);          \
        k_prep kp;                                                                   \
        k_prepare(&kp, w, sv);                                                       \
        for (int t = 0; t < TT; t++) {                                               \
            const long o = t * nb + b;                                               \
            int32_t S = k_dot(&kp, q + o * XI_QKK);                                  \
            const int32_t *bo = bs + 16 * o;                                         \
            if (kind == XI_KIND_q6_k) {                                              \
                int32_t off = 0;                                                     \
                for (int k = 0; k < 16; k++) off += sc[k] * bo[k];                   \
                S -= 32 * off;                                                       \
            }                                                                        \
            acc[t] = acc[t] + (dw * d[o]) * (float)S;                                \
            if (kind != XI_KIND_q6_k) acc[t] = acc[t] - (dmin * d[o]) * (float)k_mins(m, bo); \
        }                                                                            \
    }                                                                                \
    for (int t = 0; t < TT; t++) res[t] = acc[t];                                    \
}
#else
/* portable: the codes in element order, the same integers and float operations */
static inline void k_codes_scalar(int kind, const uint8_t *blk, int32_t *c)
{
    if (kind == XI_KIND_q6_k) {
        const uint8_t *ql = blk, *qh = blk + 128;
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const uint8_t a = ql[64 * h + l], b = ql[64 * h + 32 + l], e = qh[32 * h + l];
                c[128 * h + l] = (a & 15) | ((e & 3) << 4);
                c[128 * h + 32 + l] = (b & 15) | (((e >> 2) & 3) << 4);
                c[128 * h + 64 + l] = (a >> 4) | (((e >> 4) & 3) << 4);
                c[128 * h + 96 + l] = (b >> 4) | (((e >> 6) & 3) << 4);
            }
        return;
    }
    const uint8_t *qs = blk + (kind == XI_KIND_q5_k ? 48 : 16);
    for (int g = 0; g < 8; g++)
        for (int l = 0; l < 32; l++) {
            c[32 * g + l] = (qs[32 * (g / 2) + l] >> (4 * (g % 2))) & 15;
            if (kind == XI_KIND_q5_k) c[32 * g + l] |= ((blk[16 + l] >> g) & 1) << 4;
        }
}

#define XI_K_TILE(NAME, BYTES)                                                       \
static inline void                                                                   \
ktile_##NAME(const uint8_t *wr, long nb, const int8_t *q, const float *d, const int32_t *bs, \
             float *res, const int TT)                                               \
{                                                                                    \
    const int kind = XI_KIND_##NAME;                                                 \
    float acc[XI_K_TT] = {0};                                                        \
    for (long b = 0; b < nb; b++) {                                                  \
        const uint8_t *blk = wr + b * (BYTES);                                       \
        int sc[16], m[8];                                                            \
        int32_t c[256];                                                              \
        k_scales(kind, blk, sc, m);                                                  \
        k_codes_scalar(kind, blk, c);                                                \
        const float dw = k_d(kind, blk);                                             \
        const float dmin = kind == XI_KIND_q6_k ? 0.0f : xi_h2f(xi_rd16(blk + 2));   \
        const int gs = kind == XI_KIND_q6_k ? 16 : 32; /* elements a scale */        \
        for (int t = 0; t < TT; t++) {                                               \
            const long o = t * nb + b;                                               \
            const int8_t *qb = q + o * XI_QKK;                                       \
            const int32_t *bo = bs + 16 * o;                                         \
            int32_t S = 0;                                                           \
            for (int g = 0; g < 256 / gs; g++) {                                     \
                int32_t s = 0;                                                       \
                for (int j = g * gs; j < (g + 1) * gs; j++) s += c[j] * qb[j];       \
                if (kind == XI_KIND_q6_k) s -= 32 * bo[g];                           \
                S += sc[g] * s;                                                      \
            }                                                                        \
            acc[t] = acc[t] + (dw * d[o]) * (float)S;                                \
            if (kind != XI_KIND_q6_k) acc[t] = acc[t] - (dmin * d[o]) * (float)k_mins(m, bo); \
        }                                                                            \
    }                                                                                \
    for (int t = 0; t < TT; t++) res[t] = acc[t];                                    \
}
#endif

XI_K_TILE(q4_k, 144)
XI_K_TILE(q5_k, 176)
XI_K_TILE(q6_k, 210)

/* ------------------------------------------------------------------ */
/* the row driver: k_rows_DT, xi_k_rows_fn (xi_q8.h)                    */

#define XI_K_ROWS(NAME, BYTES)                                                       \
static void k_rows_##NAME(const uint8_t *w, const int8_t *q, const float *d, const int32_t *bs, \
                          float *y, long T, long N, long K, int accum)               \
{                                                                                    \
    const long nb = K / XI_QKK, rb = nb * (BYTES);                                   \
    const long nchunks = (N + XI_K_NCHUNK - 1) / XI_K_NCHUNK;                        \
    _Pragma("omp parallel for schedule(static) if (nchunks > 1 && N * K * T >= 4 * XI_OMP_MIN_WORK)") \
    for (long ch = 0; ch < nchunks; ch++) {                                          \
        const long n0 = ch * XI_K_NCHUNK;                                            \
        const long n1 = n0 + XI_K_NCHUNK < N ? n0 + XI_K_NCHUNK : N;                 \
        for (long t0 = 0; t0 < T; t0 += XI_K_TT) {                                   \
            const long tt = T - t0 < XI_K_TT ? T - t0 : XI_K_TT;                     \
            const long o = t0 * nb;                                                  \
            for (long n = n0; n < n1; n++) {                                         \
                float res[XI_K_TT];                                                  \
                const uint8_t *wr = w + n * rb;                                      \
                switch (tt) {                                                        \
                case 1: ktile_##NAME(wr, nb, q + o * XI_QKK, d + o, bs + 16 * o, res, 1); break; \
                case 2: ktile_##NAME(wr, nb, q + o * XI_QKK, d + o, bs + 16 * o, res, 2); break; \
                case 3: ktile_##NAME(wr, nb, q + o * XI_QKK, d + o, bs + 16 * o, res, 3); break; \
                default: ktile_##NAME(wr, nb, q + o * XI_QKK, d + o, bs + 16 * o, res, 4); break; \
                }                                                                    \
                for (long t = 0; t < tt; t++) {                                      \
                    float *yp = y + (t0 + t) * N + n;                                \
                    *yp = accum ? *yp + res[t] : res[t];                             \
                }                                                                    \
            }                                                                        \
        }                                                                            \
    }                                                                                \
}

XI_K_ROWS(q4_k, 144)
XI_K_ROWS(q5_k, 176)
XI_K_ROWS(q6_k, 210)
