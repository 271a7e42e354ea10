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
 * Every instruction-set path of step 2 (portable C, AVX2, AVX-VNNI, AVX-512 VNNI: q8dot_tiles.h,
 * compiled once per path, the path chosen at run time: xi_q8.h) computes exactly these operations,
 * so they give the same bits; a (row, token) result depends on that row and token alone: not on T,
 * on how tokens and rows are tiled, on the thread count or on the path. tests/test_q8dot.py holds
 * the numpy model.
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
#include "xi_q8.h"

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
/* the matrix product: x quantized here, then the selected path's row driver (q8dot_tiles.h) */

#define XI_Q8_MATMUL(NAME, BYTES)                                                    \
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
        xi_q8_current()->q8[XI_KIND_##NAME](w, q, d, s, qsum, y, T, N, K, accumulate != 0, r8); \
        return;                                                                      \
    }                                                                                \
    for (long t = 0; t < T; t++) { /* no scratch: one token at a time, the same bits */ \
        int8_t q[K > 0 ? K : 1];                                                     \
        float d[nb > 0 ? nb : 1], s[nb > 0 ? nb : 1];                                \
        int32_t qsum[nb > 0 ? nb : 1];                                               \
        xi_q8_quantize_rows(x + t * K, 1, K, q, d, s, qsum);                         \
        xi_q8_current()->q8[XI_KIND_##NAME](w, q, d, s, qsum, y + t * N, 1, N, K, accumulate != 0, r8); \
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