/* K-quant matrix products with int8 activations: llama.cpp's numerics (ggml-cpu quants.c:
 * quantize_row_q8_K, ggml_vec_dot_q4_K_q8_K / q5_K / q6_K), our code.
 *
 * y (T, N) = (accumulate ? y : 0) + w (N, K) @ x (T, K)^T for w of type q4_k, q5_k or q6_k, K a
 * multiple of 256.
 *
 * 1. Each x row is quantized once per call, per super-block b of 256 (q8_K):
 *      amax = max |x_j|;  id = 127 / amax;  q_j = rint(x_j * id)  (nearest, ties even);  d_b = 1 / id
 *      (quantize_row_q8_K_ref's d = 1 / iscale; its codes have the sign of -max: the same products);
 *      and the codes' sums over each 16 elements, bs_b[k] (k = 0..15);
 *    amax == 0 gives d = 0, q = 0; a NaN or inf in the super-block gives d = NaN (the token's
 *    results are NaN). d stays float32.
 * 2. Per weight row n, token t, super-block b, exact integers (int32):
 *      q4_k, q5_k (8 groups g of 32, 6-bit scale sc_g and min m_g, codes c in 0..15 or 0..31):
 *        S = sum_g sc_g * sum_{j in g} c_j q_j,   M = sum_g m_g * (bs[2g] + bs[2g+1]);
 *      q6_k (16 groups k of 16, int8 scale sc_k, codes c in 0..63):
 *        S = sum_k sc_k * (sum_{j in k} c_j q_j - 32 * bs[k]),  M = 0;
 *    then in float32, super-block after super-block, mul and add rounded separately (no fma):
 *      acc = acc + (dw_b * d_b) * (float)S;   q4_k, q5_k then:  acc = acc - (dmin_b * d_b) * (float)M
 *    from acc = 0; the result is acc. dw, dmin: the super-block's f16 fields (exact in f32).
 * Every instruction-set path of step 2 (portable C, AVX2, AVX-VNNI, AVX-512 VNNI: q8kdot_tiles.h,
 * compiled once per path, the path chosen at run time: xi_q8.h) computes exactly these operations
 * (the same bits); a (row, token) result depends on that row and token alone.
 * tests/_q8dot_model.py holds the numpy model.
 *
 * Tiling: rows in chunks of 16 over the OpenMP threads; a tile is one weight row x up to 4 tokens:
 * a super-block's codes are unpacked once for the 4 tokens (8 vectors of 32 codes).
 */
#include <stdlib.h>
#include "xi_common.h"
#include "xi_q8.h"

/* ------------------------------------------------------------------ */
/* activations: one super-block of 256 floats -> 256 codes, d, 16 sums of 16 codes */

static inline void quantize_k_block(const float *x, int8_t *q, float *d, int32_t *bs)
{
    float amax = 0.0f;
    int bad = 0;
#if defined(__AVX2__)
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 mx = _mm256_setzero_ps(), nf = _mm256_setzero_ps();
    for (int j = 0; j < 256; j += 8) {
        const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j));
        mx = _mm256_max_ps(mx, a);
        nf = _mm256_or_ps(nf, _mm256_cmp_ps(a, _mm256_set1_ps(INFINITY), _CMP_NLT_UQ));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    amax = _mm_cvtss_f32(m4);
    bad = _mm256_movemask_ps(nf) != 0;
#else
    for (int j = 0; j < 256; j++) {
        const float a = fabsf(x[j]);
        bad |= !(a < INFINITY);
        amax = a > amax ? a : amax;
    }
#endif
    if (bad || amax == 0.0f) {
        memset(q, 0, 256);
        memset(bs, 0, 16 * sizeof(int32_t));
        *d = bad ? NAN : 0.0f;
        return;
    }
    const float id = 127.0f / amax;
#if defined(__AVX2__)
    const __m256 vid = _mm256_set1_ps(id);
    for (int c = 0; c < 8; c++) { /* 32 elements: two groups of 16 */
        __m256i i[4];
        for (int j = 0; j < 4; j++)
            i[j] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * c + 8 * j), vid),
                                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        for (int h = 0; h < 2; h++) {
            const __m256i s8 = _mm256_add_epi32(i[2 * h], i[2 * h + 1]);
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
            s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
            bs[2 * c + h] = _mm_cvtsi128_si32(s4);
        }
        __m256i p8 = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(q + 32 * c), p8);
    }
#else
    for (int k = 0; k < 16; k++) {
        int32_t sum = 0;
        for (int j = 16 * k; j < 16 * k + 16; j++) {
            q[j] = (int8_t)(int32_t)rintf(x[j] * id);
            sum += q[j];
        }
        bs[k] = sum;
    }
#endif
    *d = 1.0f / id; /* llama.cpp's 1 / iscale (its iscale = -127 / max carries the sign of the codes) */
}

static void quantize_k_rows(const float *x, long T, long K, int8_t *q, float *d, int32_t *bs)
{
    const long nb = K / XI_QKK;
    _Pragma("omp parallel for schedule(static) if (T * K >= 4 * XI_OMP_MIN_WORK)")
    for (long r = 0; r < T * nb; r++) quantize_k_block(x + r * XI_QKK, q + r * XI_QKK, d + r, bs + 16 * r);
}

/* ------------------------------------------------------------------ */
/* scratch for the quantized activations: per calling thread, grown, kept */

static __thread void *xi_k_scratch;
static __thread size_t xi_k_scratch_bytes;

static void *k_scratch(size_t nbytes)
{
    if (nbytes > xi_k_scratch_bytes) {
        void *p = realloc(xi_k_scratch, nbytes);
        if (!p) return NULL;
        xi_k_scratch = p;
        xi_k_scratch_bytes = nbytes;
    }
    return xi_k_scratch;
}

#define XI_K_MATMUL(NAME, BYTES)                                                     \
XI_SHARED void xi_q8dot_rows_##NAME(const uint8_t *w, const float *x, float *y, long T, long N, \
                                    long K, int accumulate)                          \
{                                                                                    \
    if (T <= 0 || N <= 0) return;                                                    \
    const long nb = K / XI_QKK;                                                      \
    const size_t row = (size_t)nb * (XI_QKK + sizeof(float) + 16 * sizeof(int32_t)); \
    void *buf = k_scratch((size_t)T * row + 1);                                      \
    if (buf) {                                                                       \
        int8_t *q = (int8_t *)buf;                                                   \
        float *d = (float *)(q + T * K);                                             \
        int32_t *bs = (int32_t *)(d + T * nb);                                       \
        quantize_k_rows(x, T, K, q, d, bs);                                          \
        xi_q8_current()->k[XI_KIND_##NAME](w, q, d, bs, y, T, N, K, accumulate != 0); \
        return;                                                                      \
    }                                                                                \
    for (long t = 0; t < T; t++) { /* no scratch: one token at a time, the same bits */ \
        int8_t q[K > 0 ? K : 1];                                                     \
        float d[nb > 0 ? nb : 1];                                                    \
        int32_t bs[nb > 0 ? 16 * nb : 1];                                            \
        quantize_k_rows(x + t * K, 1, K, q, d, bs);                                  \
        xi_q8_current()->k[XI_KIND_##NAME](w, q, d, bs, y + t * N, 1, N, K, accumulate != 0); \
    }                                                                                \
}

XI_K_MATMUL(q4_k, 144)
XI_K_MATMUL(q5_k, 176)
XI_K_MATMUL(q6_k, 210)