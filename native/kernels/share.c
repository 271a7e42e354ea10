/* Share forms (xi_common.h, "teams") of the kernels a decode or prefill step is made of: every
 * matmul_DT, rmsnorm_matmul_DT, rmsnorm_matmul_swiglu_DT, and rmsnorm, swiglu, add. The
 * standalone kernels (quant.c, kquant.c, fused.c, norm.c, elementwise.c) are unchanged; these run
 * the same row routines on a part of the rows, so a replay gives their bits whatever the team.
 *
 * A matrix product's unit is XI_SHARE_ROWS output rows. This relies on the row routines' contract
 * (xi_common.h): a (row, token) result does not depend on which other rows or tokens are in the
 * call. A row routine that can do better as a team (activations quantized once for the team in a
 * phase of their own, then rows) gets its own plan and run next to it (XI_REGISTER_SHARE) and
 * leaves the list at the end of this file.
 */
#include "xi_common.h"

#define XI_SHARE_ROWS 16 /* output rows a unit: both row drivers' chunk (XI_NCHUNK, XI_Q8_NCHUNK) */
#define XI_SHARE_GEMM_GRAIN 8 /* units a claim at T > 1: a q8 row routine quantizes all of x a call */
#define XI_SHARE_ELEMS 4096L  /* elements a unit of the elementwise kernels */

typedef void (*xi_rows_fn)(const uint8_t *w, const float *x, float *y, long T, long N, long K, int accumulate);

static inline long ceil_div(long a, long b) { return (a + b - 1) / b; }

/* rows [lo, hi) of y (T, N) = (accumulate ? y : 0) + w (N, K) @ x (T, K)^T, weight rows rb bytes.
 * At T > 1 the row routine writes its rows into a private (T, hi - lo) buffer (it writes rows
 * N apart), added to y as the routine adds: y + s, or s. */
static void matmul_part(xi_rows_fn rows, long rb, const uint8_t *w, const float *x, float *y, long T, long N,
                        long K, int accumulate, long lo, long hi)
{
    if (hi > N) hi = N;
    const long n = hi - lo;
    if (n <= 0) return;
    if (n == N) {
        rows(w, x, y, T, N, K, accumulate);
        return;
    }
    float *tmp = T > 1 ? (float *)xi_thread_scratch(0, (size_t)(T * n) * sizeof(float)) : NULL;
    if (!tmp) { /* one token at a time: the same bits (a row's result does not depend on T) */
        for (long t = 0; t < T; t++) rows(w + lo * rb, x + t * K, y + t * N + lo, 1, n, K, accumulate);
        return;
    }
    rows(w + lo * rb, x, tmp, T, n, K, 0);
    for (long t = 0; t < T; t++) {
        float *yr = y + t * N + lo;
        const float *s = tmp + t * n;
        if (accumulate)
            for (long i = 0; i < n; i++) yr[i] = yr[i] + s[i];
        else
            memcpy(yr, s, (size_t)n * sizeof(float));
    }
}

/* a phase of matrix-product units: N rows */
static void plan_rows(xi_plan *p, int phase, long T, long N)
{
    p->units[phase] = ceil_div(N, XI_SHARE_ROWS);
    p->grain[phase] = T > 1 ? XI_SHARE_GEMM_GRAIN : 1;
}

/* BLOCKED: K must be a multiple of it (0: any K); ROWBYTES: bytes of a weight row (of K).
 * matmul: one phase of row units. rmsnorm_matmul: h (T, K) = rmsnorm(x) in scratch (a unit a
 * token), then row units. rmsnorm_matmul_swiglu: h, then g (T, 2N) = w @ h^T in scratch (row
 * units), then y = silu(g[:, :N]) * g[:, N:] (units of XI_SHARE_ROWS columns of every token). */
#define XI_SHARE_MATMUL(NAME, BLOCKED, ROWBYTES)                                     \
static int xi_plan_matmul_##NAME(const void *c, xi_plan *p)                          \
{                                                                                    \
    XI_C(xi_matmul_##NAME##_c);                                                      \
    if (k->T < 0 || k->N < 0 || k->K < 0 || ((BLOCKED) && k->K % ((BLOCKED) ? (BLOCKED) : 1) != 0)) \
        return XI_EINVAL;                                                            \
    p->phases = 1;                                                                   \
    plan_rows(p, 0, k->T, k->T > 0 ? k->N : 0);                                      \
    return XI_OK;                                                                    \
}                                                                                    \
static void xi_run_matmul_##NAME(void *const *b, const void *c, void *scratch, int phase, long u0, long u1) \
{                                                                                    \
    XI_C(xi_matmul_##NAME##_c);                                                      \
    const long K = k->K;                                                             \
    (void)scratch, (void)phase;                                                      \
    matmul_part(xi_matmul_rows_##NAME, (ROWBYTES), (const uint8_t *)b[0], (const float *)b[1], (float *)b[2], \
                k->T, k->N, K, k->accumulate, u0 * XI_SHARE_ROWS, u1 * XI_SHARE_ROWS); \
}                                                                                    \
XI_REGISTER_SHARE(matmul_##NAME)                                                     \
static int xi_plan_rmsnorm_matmul_##NAME(const void *c, xi_plan *p)                  \
{                                                                                    \
    XI_C(xi_rmsnorm_matmul_##NAME##_c);                                              \
    if (k->T < 0 || k->N < 0 || k->K < 0 || ((BLOCKED) && k->K % ((BLOCKED) ? (BLOCKED) : 1) != 0)) \
        return XI_EINVAL;                                                            \
    const long T = k->T, N = k->N, K = k->K;                                         \
    p->phases = 2;                                                                   \
    if (T == 0 || N == 0) return XI_OK; /* nothing to do */                          \
    p->units[0] = T;                                                                 \
    plan_rows(p, 1, T, N);                                                           \
    p->scratch = (size_t)(T * K) * sizeof(float);                                    \
    return XI_OK;                                                                    \
}                                                                                    \
static void xi_run_rmsnorm_matmul_##NAME(void *const *b, const void *c, void *scratch, int phase, long u0, long u1) \
{                                                                                    \
    XI_C(xi_rmsnorm_matmul_##NAME##_c);                                              \
    const long K = k->K;                                                             \
    float *h = (float *)scratch;                                                     \
    if (phase == 0)                                                                  \
        xi_rmsnorm_rows((const float *)b[1] + u0 * K, (const float *)b[2], h + u0 * K, u1 - u0, K, k->eps); \
    else                                                                             \
        matmul_part(xi_matmul_rows_##NAME, (ROWBYTES), (const uint8_t *)b[0], h, (float *)b[3], k->T, k->N, K, \
                    k->accumulate, u0 * XI_SHARE_ROWS, u1 * XI_SHARE_ROWS);           \
}                                                                                    \
XI_REGISTER_SHARE(rmsnorm_matmul_##NAME)                                             \
static int xi_plan_rmsnorm_matmul_swiglu_##NAME(const void *c, xi_plan *p)           \
{                                                                                    \
    XI_C(xi_rmsnorm_matmul_swiglu_##NAME##_c);                                       \
    if (k->T < 0 || k->N < 0 || k->K < 0 || ((BLOCKED) && k->K % ((BLOCKED) ? (BLOCKED) : 1) != 0)) \
        return XI_EINVAL;                                                            \
    const long T = k->T, N = k->N, K = k->K;                                         \
    p->phases = 3;                                                                   \
    if (T == 0 || N == 0) return XI_OK;                                              \
    p->units[0] = T;                                                                 \
    plan_rows(p, 1, T, 2 * N);                                                       \
    p->units[2] = ceil_div(N, XI_SHARE_ROWS);                                        \
    p->scratch = (size_t)(T * K + T * 2 * N) * sizeof(float);                        \
    return XI_OK;                                                                    \
}                                                                                    \
static void xi_run_rmsnorm_matmul_swiglu_##NAME(void *const *b, const void *c, void *scratch, int phase, long u0, \
                                                long u1)                             \
{                                                                                    \
    XI_C(xi_rmsnorm_matmul_swiglu_##NAME##_c);                                       \
    const long T = k->T, N = k->N, K = k->K;                                         \
    float *h = (float *)scratch, *g = h + T * K;                                     \
    if (phase == 0) {                                                                \
        xi_rmsnorm_rows((const float *)b[1] + u0 * K, (const float *)b[2], h + u0 * K, u1 - u0, K, k->eps); \
    } else if (phase == 1) {                                                         \
        matmul_part(xi_matmul_rows_##NAME, (ROWBYTES), (const uint8_t *)b[0], h, g, T, 2 * N, K, 0, \
                    u0 * XI_SHARE_ROWS, u1 * XI_SHARE_ROWS);                          \
    } else {                                                                         \
        const long lo = u0 * XI_SHARE_ROWS, hi = u1 * XI_SHARE_ROWS < N ? u1 * XI_SHARE_ROWS : N; \
        for (long t = 0; t < T; t++) /* elementwise: any split gives the same bits */ \
            xi_swiglu_rows(g + t * 2 * N + lo, g + t * 2 * N + N + lo, (float *)b[3] + t * N + lo, 1, hi - lo, 2 * N); \
    }                                                                                \
}                                                                                    \
XI_REGISTER_SHARE(rmsnorm_matmul_swiglu_##NAME)

XI_SHARE_MATMUL(f32, 0, K * 4)
XI_SHARE_MATMUL(f16, 0, K * 2)
XI_SHARE_MATMUL(bf16, 0, K * 2)
XI_SHARE_MATMUL(q8_0, 32, K / 32 * 34)
XI_SHARE_MATMUL(q4_0, 32, K / 32 * 18)
XI_SHARE_MATMUL(q4_1, 32, K / 32 * 20)
XI_SHARE_MATMUL(q5_0, 32, K / 32 * 22)
XI_SHARE_MATMUL(q5_1, 32, K / 32 * 24)
XI_SHARE_MATMUL(iq4_nl, 32, K / 32 * 18)
XI_SHARE_MATMUL(q2_k, 256, K / 256 * 84)
XI_SHARE_MATMUL(q3_k, 256, K / 256 * 110)
XI_SHARE_MATMUL(q4_k, 256, K / 256 * 144)
XI_SHARE_MATMUL(q5_k, 256, K / 256 * 176)
XI_SHARE_MATMUL(q6_k, 256, K / 256 * 210)
XI_SHARE_MATMUL(iq4_xs, 256, K / 256 * 136)
/* the r8 layout (q8dot.c): groups of 8 rows contiguous at g * 8 * rb, the N % 8 last rows GGUF rows
 * at row * rb; units of XI_SHARE_ROWS (a multiple of 8) rows start at a group, and the last unit
 * ends with the same N % 8 GGUF rows, so a row range is a smaller r8 matrix at w + lo * rb */
XI_SHARE_MATMUL(q8_0_r8, 32, K / 32 * 34)
XI_SHARE_MATMUL(q4_0_r8, 32, K / 32 * 18)
XI_SHARE_MATMUL(q4_1_r8, 32, K / 32 * 20)
XI_SHARE_MATMUL(q5_0_r8, 32, K / 32 * 22)
XI_SHARE_MATMUL(q5_1_r8, 32, K / 32 * 24)

/* ------------------------------------------------------------------ */
/* row-wise and elementwise kernels: a unit a row (rmsnorm, swiglu) or XI_SHARE_ELEMS elements (add) */

static int xi_plan_rmsnorm(const void *c, xi_plan *p)
{
    XI_C(xi_rmsnorm_c);
    if (k->rows < 0 || k->dim < 0) return XI_EINVAL;
    p->phases = 1;
    p->units[0] = k->rows;
    return XI_OK;
}
static void xi_run_rmsnorm(void *const *b, const void *c, void *scratch, int phase, long u0, long u1)
{
    XI_C(xi_rmsnorm_c);
    const long dim = k->dim;
    (void)scratch, (void)phase;
    xi_rmsnorm_rows((const float *)b[0] + u0 * dim, (const float *)b[1], (float *)b[2] + u0 * dim, u1 - u0, dim,
                    k->eps);
}
XI_REGISTER_SHARE(rmsnorm)

static int xi_plan_swiglu(const void *c, xi_plan *p)
{
    XI_C(xi_swiglu_c);
    if (k->rows < 0 || k->n < 0 || k->in_stride < k->n) return XI_EINVAL;
    p->phases = 1;
    p->units[0] = k->rows;
    return XI_OK;
}
static void xi_run_swiglu(void *const *b, const void *c, void *scratch, int phase, long u0, long u1)
{
    XI_C(xi_swiglu_c);
    const long n = k->n, st = k->in_stride;
    (void)scratch, (void)phase;
    xi_swiglu_rows((const float *)b[0] + u0 * st, (const float *)b[1] + u0 * st, (float *)b[2] + u0 * n, u1 - u0, n,
                   st);
}
XI_REGISTER_SHARE(swiglu)

static int xi_plan_add(const void *c, xi_plan *p)
{
    XI_C(xi_add_c);
    if (k->n < 0) return XI_EINVAL;
    p->phases = 1;
    p->units[0] = ceil_div(k->n, XI_SHARE_ELEMS);
    return XI_OK;
}
static void xi_run_add(void *const *b, const void *c, void *scratch, int phase, long u0, long u1)
{
    XI_C(xi_add_c);
    const float *x = (const float *)b[0], *z = (const float *)b[1];
    float *y = (float *)b[2];
    const long hi = u1 * XI_SHARE_ELEMS < k->n ? u1 * XI_SHARE_ELEMS : k->n;
    (void)scratch, (void)phase;
    for (long i = u0 * XI_SHARE_ELEMS; i < hi; i++) y[i] = x[i] + z[i];
}
XI_REGISTER_SHARE(add)
