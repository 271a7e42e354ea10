/* Private helpers shared by native/kernels/ C files (not part of the cdef). */
#ifndef XI_COMMON_H
#define XI_COMMON_H
#include <stdint.h>
#include <string.h>
#include <math.h>
#include "xinfer_native.h"
#if defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif

#define XI_QK 32
#define XI_Q8_0_BYTES 34
#define XI_Q4_0_BYTES 18
#define XI_Q4_1_BYTES 20
#define XI_Q5_0_BYTES 22
#define XI_Q5_1_BYTES 24

/* Exact IEEE half -> float (subnormals, inf, nan); portable bit conversion. */
static inline float xi_h2f_bits(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400u));
            man &= 0x3ffu;
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13); /* inf / nan (payload kept) */
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline float xi_h2f(uint16_t h)
{
#ifdef __F16C__
    return _cvtsh_ss(h); /* exact: every half is a float */
#else
    return xi_h2f_bits(h);
#endif
}

/* float -> IEEE half bits, rounded to nearest even (numpy's astype(float16)); portable bit conversion. */
static inline uint16_t xi_f2h_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); /* nan: quiet */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* inf, or rounds to it (>= 65520) */
    if (ax < 0x38800000u) { /* below 2^-14: a subnormal half (or zero), ulp 2^-24; the scaling is exact */
        float a;
        memcpy(&a, &ax, 4);
        return (uint16_t)(sign | (uint32_t)nearbyintf(a * 16777216.0f));
    }
    const uint32_t rem = ax & 0x1fffu;
    uint32_t h = ((((ax >> 23) - 112u) << 10) | ((ax >> 13) & 0x3ffu));
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry into the exponent is right */
    return (uint16_t)(sign | h);
}

static inline uint16_t xi_f2h(float f)
{
#ifdef __F16C__
    return (uint16_t)_cvtss_sh(f, 0); /* 0: round to nearest even */
#else
    return xi_f2h_bits(f);
#endif
}

/* x rounded to the nearest IEEE half (ties to even; overflow -> inf, NaN kept), as a float: what
 * llama.cpp's GGML_CPU_FP32_TO_FP16 then FP16_TO_FP32 give. */
static inline float xi_f16_round(float x)
{
    return xi_h2f(xi_f2h(x));
}

static inline uint16_t xi_rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

#if defined(__AVX2__)
/* q5_0 / q5_1: the 32 high bits to bytes (bit j -> 0x10 in byte j), or'ed into the nibbles */
static inline __m256i xi_q5_codes(const uint8_t *qh, const uint8_t *qs)
{
    uint32_t bits;
    memcpy(&bits, qh, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    b = _mm256_cmpeq_epi8(_mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfeLL)), _mm256_set1_epi64x(-1));
    const __m128i v = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(15);
    const __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
    return _mm256_or_si256(nib, _mm256_and_si256(b, _mm256_set1_epi8(16)));
}

#endif

/* the 6-bit scale and min of group j (0..7) of q4_K / q5_K's 12 scale bytes */
static inline void xi_scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 2) & 0x30);
        *m = (q[j + 4] >> 4) | ((q[j] >> 2) & 0x30);
    }
}

#define XI_C(type) const type *k = (const type *)c
#define XI_OMP_MIN_WORK 32768L  /* below this much work, stay single-threaded */

/* Row routines shared between kernels (a fused kernel calls the routines of the kernels it fuses,
 * so it computes what they compute). Constants are checked by the caller. Hidden: not exported
 * from the module. Never inlined: every caller runs the one compiled copy, so no caller gets its
 * own vectorization (GCC's SLP vectorizer forms fmaddsub even under -ffp-contract=off, see rope.c). */
#define XI_SHARED __attribute__((visibility("hidden"), noinline))
XI_SHARED void xi_rmsnorm_rows(const float *x, const float *w, float *y, long rows, long dim, float eps);
XI_SHARED void xi_swiglu_rows(const float *gate, const float *up, float *y, long rows, long n, long in_stride);
XI_SHARED void xi_kv_store_rows(const float *src, float *cache, const int32_t *pos, long T, long width, long ctx,
                                long src_stride);
/* the same into an f16 cache (IEEE half bits, xi_f2h: rounded to nearest even) */
XI_SHARED void xi_kv_store_rows_f16(const float *src, uint16_t *cache, const int32_t *pos, long T, long width,
                                    long ctx, long src_stride);
/* y (T, N) = (accumulate ? y : 0) + w (N, K) @ x (T, K)^T, w of type DT: the body of matmul_DT */
XI_SHARED void xi_matmul_rows_f32(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_matmul_rows_f16(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_matmul_rows_q8_0(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_matmul_rows_q4_0(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_matmul_rows_q4_1(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
/* kquant.c */
XI_SHARED void xi_matmul_rows_q5_0(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_matmul_rows_q5_1(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_matmul_rows_q2_k(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_matmul_rows_q3_k(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_matmul_rows_q4_k(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_matmul_rows_q5_k(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_matmul_rows_q6_k(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_matmul_rows_iq4_nl(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_matmul_rows_iq4_xs(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_matmul_rows_bf16(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
/* quant.c: the block types' r8 layout (q8dot.c) */
XI_SHARED void xi_matmul_rows_q8_0_r8(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_matmul_rows_q4_0_r8(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_matmul_rows_q4_1_r8(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_matmul_rows_q5_0_r8(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_matmul_rows_q5_1_r8(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
/* the same for the block types through int8 activations (q8dot.c: llama.cpp's numerics); x (T, K)
 * quantized per block of 32 into codes q (T, K) int8, scales d (T, K/32), s = d * sum(codes) (T, K/32)
 * and sum(codes) qsum (T, K/32) */
XI_SHARED void xi_q8_quantize_rows(const float *x, long T, long K, int8_t *q, float *d, float *s, int32_t *qsum);
XI_SHARED void xi_q8dot_rows_q8_0(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_q8dot_rows_q4_0(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_q8dot_rows_q4_1(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
/* the same over weights in the row-interleaved r8 layout (q8dot.c), and the load-time repack
 * GGUF rows (N, K) -> r8 (the same byte count; src and dst do not overlap) */
XI_SHARED void xi_q8dot_rows_q8_0_r8(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_q8dot_rows_q4_0_r8(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_q8dot_rows_q4_1_r8(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_q8_repack_r8_q8_0(const uint8_t *src, uint8_t *dst, long N, long K);
XI_SHARED void xi_q8_repack_r8_q4_0(const uint8_t *src, uint8_t *dst, long N, long K);
XI_SHARED void xi_q8_repack_r8_q4_1(const uint8_t *src, uint8_t *dst, long N, long K);
XI_SHARED void xi_q8dot_rows_q5_0(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_q8dot_rows_q5_1(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_q8dot_rows_q5_0_r8(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_q8dot_rows_q5_1_r8(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_q8_repack_r8_q5_0(const uint8_t *src, uint8_t *dst, long N, long K);
XI_SHARED void xi_q8_repack_r8_q5_1(const uint8_t *src, uint8_t *dst, long N, long K);
/* q8kdot.c: the K-quants through int8 activations quantized per block of 256 (K a multiple of 256) */
XI_SHARED void xi_q8dot_rows_q4_k(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_q8dot_rows_q5_k(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);
XI_SHARED void xi_q8dot_rows_q6_k(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);

/* ---- teams: a kernel's work split over threads (native/kernels/team.c) --------------------------
 *
 * A decode step replays ~200 kernels (xi_replay, xinfer_native.h) in ONE OpenMP parallel region:
 * no Python between kernels, no fork/join per kernel. A kernel takes part as a team when it has a
 * share form: its work described as phases of independent units, which the threads claim
 * dynamically (an atomic counter, a few units a claim) and run:
 *
 *   static int xi_plan_NAME(const void *c, xi_plan *p);
 *       From the constants alone: XI_OK and the plan (phases, units a phase, minimum units a claim,
 *       bytes of team scratch), or XI_EINVAL exactly where xi_k_NAME rejects the constants.
 *   static void xi_run_NAME(void *const *b, const void *c, void *scratch, int phase, long u0, long u1);
 *       Units [u0, u1) of the phase. Called from any thread of the team, any number of times a
 *       phase; every unit of a phase completes before any unit of the next phase (or op) starts.
 *       scratch: the plan's bytes (64-byte aligned, one buffer for all the op's phases, contents
 *       kept between them, not between ops).
 *   XI_REGISTER_SHARE(NAME)      (file scope, after both: xi_replay finds it by name)
 *
 * Rules: the result is bit for bit xi_k_NAME's whatever the thread count and the order and size of
 * the claims, so a unit computes outputs no other unit touches (output rows, (token, head) rows),
 * never a reduction across units; a unit runs no OpenMP region of its own (nested regions inside a
 * team run on one thread) and allocates nothing per call where xi_thread_scratch serves.
 * Dynamic claims are what make a team degrade gracefully on shared cores: a thread that the OS
 * preempts holds up only the units it claimed, the others take the rest.
 * A kernel without a share form runs whole, on one thread of the team, in its op's turn.
 */
#define XI_MAX_PHASES 4
typedef struct {
    int phases;                 /* 1..XI_MAX_PHASES */
    long units[XI_MAX_PHASES];  /* independent units of each phase (0: nothing to do) */
    long grain[XI_MAX_PHASES];  /* at least this many units a claim (>= 1; 0 reads as 1) */
    size_t scratch;             /* bytes of team scratch */
} xi_plan;
typedef int (*xi_plan_fn)(const void *c, xi_plan *p);
typedef void (*xi_run_fn)(void *const *b, const void *c, void *scratch, int phase, long u0, long u1);

/* This thread's own buffer of at least nbytes (grown and kept), NULL when out of memory; slot
 * 0 or 1 (two independent buffers); valid until this thread's next call with the same slot. */
XI_SHARED void *xi_thread_scratch(int slot, size_t nbytes);
XI_SHARED void xi_register_share(const char *name, xi_plan_fn plan, xi_run_fn run);

#define XI_REGISTER_SHARE(NAME)                                                      \
static void __attribute__((constructor)) xi_register_##NAME(void)                    \
{                                                                                    \
    xi_register_share(#NAME, xi_plan_##NAME, xi_run_##NAME);                         \
}

/* The row driver of the float-path matmuls (quant.c: f32, f16; kquant.c: the K-quants, q5, iq4, bf16):
 * weight rows in chunks of XI_NCHUNK (threads split the chunks), x in tiles of up to 4 tokens;
 * TILE##_##NAME(wr, nb, xt, K, res, tt) gives one weight row's dot products with a tile (nb blocks of QK);
 * ROWBYTES: bytes of one weight row (may use K and nb); BLOCKED: K must be a multiple of QK;
 * TAIL(row, i): weight i of the K % QK tail (float types only). A row's sums do not depend on T. */
#define XI_NCHUNK 16 /* weight rows per chunk: x tiles stay in L1 across a chunk */
#define XI_MATMUL_DRIVER(NAME, TILE, QK, ROWBYTES, BLOCKED, TAIL)                   \
void xi_matmul_rows_##NAME(const uint8_t *w, const float *x, float *y, long T, long N, long K, \
                           int accumulate)                                           \
{                                                                                    \
    const long nb = K / (QK), kt = nb * (QK);                                        \
    const long rb = ROWBYTES;                                                        \
    const int accum = accumulate != 0;                                               \
    const long nchunks = (N + XI_NCHUNK - 1) / XI_NCHUNK;                            \
    _Pragma("omp parallel for schedule(static) if (nchunks > 1 && N * K * T >= 4 * XI_OMP_MIN_WORK)") \
    for (long ch = 0; ch < nchunks; ch++) {                                          \
        const long n0 = ch * XI_NCHUNK;                                              \
        const long n1 = n0 + XI_NCHUNK < N ? n0 + XI_NCHUNK : N;                     \
        for (long t0 = 0; t0 < T; t0 += 4) {                                         \
            const long tt = T - t0 < 4 ? T - t0 : 4;                                 \
            const float *xt = x + t0 * K;                                            \
            for (long n = n0; n < n1; n++) {                                         \
                const uint8_t *wr = w + n * rb;                                      \
                float res[4];                                                        \
                switch (tt) {                                                        \
                case 1: TILE##_##NAME(wr, nb, xt, K, res, 1); break;                 \
                case 2: TILE##_##NAME(wr, nb, xt, K, res, 2); break;                 \
                case 3: TILE##_##NAME(wr, nb, xt, K, res, 3); break;                 \
                default: TILE##_##NAME(wr, nb, xt, K, res, 4); break;                \
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

/* get_rows of every weight type (quant.c, kquant.c): table (vocab, dim) of rows of
 * dim * ESIZE_NUM / ESIZE_DEN bytes, ids (T) -> out (T, dim) f32; DEQ turns `row` into `o`
 * (dim floats); an id outside [0, vocab) gives a NaN row; dim a multiple of BLOCK. */
#define XI_GET_ROWS(NAME, ESIZE_NUM, ESIZE_DEN, BLOCK, DEQ)                         \
int xi_k_get_rows_##NAME(void *const *b, const void *c)                              \
{                                                                                    \
    XI_C(xi_get_rows_##NAME##_c);                                                    \
    if (k->T < 0 || k->dim < 0 || k->vocab < 0 || k->dim % (BLOCK) != 0)             \
        return XI_EINVAL;                                                            \
    const uint8_t *table = (const uint8_t *)b[0];                                    \
    const int32_t *ids = (const int32_t *)b[1];                                      \
    float *out = (float *)b[2];                                                      \
    const long T = k->T, dim = k->dim, vocab = k->vocab;                             \
    const long rowbytes = dim * (ESIZE_NUM) / (ESIZE_DEN);                           \
    _Pragma("omp parallel for schedule(static) if (T > 1 && T * dim >= 4 * XI_OMP_MIN_WORK)") \
    for (long t = 0; t < T; t++) {                                                   \
        float *o = out + t * dim;                                                    \
        const long id = ids[t];                                                      \
        if (id < 0 || id >= vocab) {                                                 \
            for (long i = 0; i < dim; i++) o[i] = NAN;                               \
            continue;                                                                \
        }                                                                            \
        const uint8_t *row = table + id * rowbytes;                                  \
        DEQ                                                                          \
    }                                                                                \
    return XI_OK;                                                                    \
}

/* matmul_DT of a block type through int8 activations (q8dot.c, q8kdot.c): xi_matmul_rows_DT,
 * xi_k_matmul_DT; K a multiple of QK */
#define XI_MATMUL_Q8(NAME, QK)                                                       \
void xi_matmul_rows_##NAME(const uint8_t *w, const float *x, float *y, long T, long N, long K, \
                           int accumulate)                                           \
{                                                                                    \
    xi_q8dot_rows_##NAME(w, x, y, T, N, K, accumulate);                              \
}                                                                                    \
int xi_k_matmul_##NAME(void *const *b, const void *c)                                \
{                                                                                    \
    XI_C(xi_matmul_##NAME##_c);                                                      \
    if (k->T < 0 || k->N < 0 || k->K < 0 || k->K % (QK) != 0) return XI_EINVAL;      \
    xi_matmul_rows_##NAME((const uint8_t *)b[0], (const float *)b[1], (float *)b[2], \
                          k->T, k->N, k->K, k->accumulate);                          \
    return XI_OK;                                                                    \
}
#endif
