/* attention: causal by position (optionally within a sliding window), GQA, max-subtracted softmax. */
#include <stdlib.h>
#include "xi_common.h"

static inline float xi_dot(const float *a, const float *b, long n)
{
#ifdef __AVX2__
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    long i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s0 = _mm256_add_ps(s0, s1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float s = _mm_cvtss_f32(h);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
#else
    float s = 0.0f;
    for (long i = 0; i < n; i++) s += a[i] * b[i];
    return s;
#endif
}

/* kf (hd) = the f16 row kh converted to floats (exact) */
static void xi_att_k_f16(const uint16_t *kh, float *kf, long hd)
{
    for (long d = 0; d < hd; d++) kf[d] = xi_h2f(kh[d]);
}

/* One (query row, head) over an f32 cache: o (hd) = softmax(q . k[j] * scale) @ v[j] over keys
 * j = 0..p of kh/vh (rows kvs elements apart). sc: scratch of p + 1 floats, or NULL (scores
 * recomputed: the same bits). */
static void xi_att_row_f32(const float *qh, const float *kh, const float *vh, long kvs, long p, long hd,
                           float scale, float *sc, float *o)
{
#define XI_ATT_SCORE(j) (xi_dot(qh, kh + (j) * kvs, hd) * scale)
    float mx = -INFINITY;
    for (long j = 0; j <= p; j++) {
        float s = XI_ATT_SCORE(j);
        if (sc) sc[j] = s;
        mx = s > mx ? s : mx;
    }
    double sum = 0.0;
    for (long j = 0; j <= p; j++) {
        float s = sc ? sc[j] : XI_ATT_SCORE(j);
        float e = expf(s - mx);
        sum += e;
        const float *vj = vh + j * kvs;
        for (long d = 0; d < hd; d++) o[d] += e * vj[d];
    }
#undef XI_ATT_SCORE
    const float inv = (float)(1.0 / sum);
    for (long d = 0; d < hd; d++) o[d] *= inv;
}

/* One (query row, head) over an f16 cache, with llama.cpp's cpu numerics for an F16 K/V cache (flash
 * attention off: kq = mul_mat(k, q), softmax, kqv = mul_mat(v, kq), where ggml's f16 mul_mat converts
 * its f32 operand to f16): q rounded to f16, each score the f32 dot of it with the k row (converted
 * exactly into kf[0, hd)), the softmax in f32 (sum in double, then times 1/sum), each probability
 * rounded to f16, o = sum of them times the v rows, in f32. kf: 2 * hd floats (the k row, then the
 * rounded q). sc: scratch of p + 1 floats, or NULL (scores recomputed: the same bits). */
static void xi_att_row_f16(const float *qh, const uint16_t *kh, const uint16_t *vh, long kvs, long p, long hd,
                           float scale, float *sc, float *kf, float *o)
{
    float *q16 = kf + hd;
    for (long d = 0; d < hd; d++) q16[d] = xi_f16_round(qh[d]);
#define XI_ATT_SCORE(j) (xi_att_k_f16(kh + (j) * kvs, kf, hd), xi_dot(q16, kf, hd) * scale)
    float mx = -INFINITY;
    for (long j = 0; j <= p; j++) {
        float s = XI_ATT_SCORE(j);
        if (sc) sc[j] = s;
        mx = s > mx ? s : mx;
    }
    double sum = 0.0;
    for (long j = 0; j <= p; j++) {
        const float e = expf((sc ? sc[j] : XI_ATT_SCORE(j)) - mx);
        if (sc) sc[j] = e;
        sum += e;
    }
    const float inv = (float)(1.0 / sum);
    for (long j = 0; j <= p; j++) {
        const float pj = xi_f16_round((sc ? sc[j] : expf(XI_ATT_SCORE(j) - mx)) * inv);
        const uint16_t *vj = vh + j * kvs;
        for (long d = 0; d < hd; d++) o[d] += pj * xi_h2f(vj[d]);
    }
#undef XI_ATT_SCORE
}

/* One (query row, head): keys j = 0..p of kh/vh (f16: IEEE halves); o (hd) zero when p < 0. Shared by
 * attention and attention_batched, so a batched row is bit-identical to the single-sequence kernel over
 * the same keys. kf: 2 * hd floats where f16. */
static void xi_att_row(const float *qh, const void *kh, const void *vh, long kvs, long p, long hd,
                       float scale, int f16, float *sc, float *kf, float *o)
{
    for (long d = 0; d < hd; d++) o[d] = 0.0f;
    if (p < 0) return; /* zero row */
    if (f16)
        xi_att_row_f16(qh, (const uint16_t *)kh, (const uint16_t *)vh, kvs, p, hd, scale, sc, kf, o);
    else
        xi_att_row_f32(qh, (const float *)kh, (const float *)vh, kvs, p, hd, scale, sc, o);
}

/* Every (query row t, head h) of T rows: row t attends keys start[t]..start[t]+last[t] of the cache
 * (last[t] < 0: a zero row), query head h reading kv head h / (n_head / n_kv). OpenMP over the
 * T * n_head rows once the work is large enough; each thread keeps one score buffer (and, f16, a
 * converted k row). XI_ENOMEM where an f16 cache's row buffer cannot be had. */
static int xi_att_rows(const float *q, const void *kc, const void *vc, const long *start, const long *last,
                       long T, long nh, long nkv, long hd, long qs, float scale, int f16, float *out)
{
    const long group = nh / (nkv ? nkv : 1), kvs = nkv * hd, esize = f16 ? 2 : 4;
    long work = 0, span = 0;
    int failed = 0;
    for (long t = 0; t < T; t++) {
        work += last[t] + 1;
        span = last[t] + 1 > span ? last[t] + 1 : span;
    }
    work *= nh * hd;

#pragma omp parallel if (T * nh > 1 && work >= 2 * XI_OMP_MIN_WORK)
    {
        /* per-thread score buffer; without memory the scores are recomputed */
        float *sc = span > 0 ? (float *)malloc((size_t)span * sizeof(float)) : NULL;
        float *kf = f16 && span > 0 ? (float *)malloc((size_t)(hd > 0 ? 2 * hd : 1) * sizeof(float)) : NULL;
        if (f16 && span > 0 && !kf) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (long th = 0; th < T * nh; th++) {
            const long t = th / nh, h = th % nh, g = h / group;
            const long base = last[t] < 0 ? 0 : start[t] * kvs;
            if (f16 && !kf && last[t] >= 0) continue; /* XI_ENOMEM below */
            xi_att_row(q + t * qs + h * hd, (const char *)kc + (base + g * hd) * esize,
                       (const char *)vc + (base + g * hd) * esize, kvs, last[t], hd, scale, f16, sc, kf,
                       out + (t * nh + h) * hd);
        }
        free(sc);
        free(kf);
    }
    return failed ? XI_ENOMEM : XI_OK;
}

/* Per-row key spans of T rows: start[t], and last[t] (the count minus one; -1 for none) in one
 * allocation; NULL when out of memory. */
static long *xi_att_spans(long T)
{
    return (long *)malloc((size_t)(2 * (T > 0 ? T : 1)) * sizeof(long));
}

/* Row t's keys as attention (pos given: keys 0..pos[t], limit = ctx) or attention_batched (pos
 * NULL: keys first[t]..lastk[t], limit = rows) read them, a sliding window (window > 0) applied:
 * start, and last (the count minus one; -1 for none). The one rule of both kernels and their share
 * forms. */
static inline void xi_att_span(const int32_t *pos, const int32_t *first, const int32_t *lastk, long limit,
                               long window, long t, long *start, long *last)
{
    if (pos) {
        long p = pos[t];
        if (p >= limit) p = limit - 1; /* keys past the cache do not exist */
        /* sliding window: keys j with p - j < window, i.e. from p - window + 1 */
        const long s = (window > 0 && p >= window) ? p - window + 1 : 0;
        *start = s;
        *last = p < 0 ? -1 : p - s;
    } else {
        long f = first[t], l = lastk[t];
        if (l >= limit) l = limit - 1; /* keys past the cache do not exist */
        if (window > 0 && f >= 0 && l - f >= window) f = l - window + 1; /* sliding window */
        *start = f;
        *last = (f < 0 || l < f) ? -1 : l - f;
    }
}

static int xi_attention_bad(const xi_attention_c *k)
{
    return k->T < 0 || k->n_head < 0 || k->n_kv <= 0 || k->head_dim < 0 || k->ctx < 0 ||
           k->n_head % k->n_kv != 0 || k->q_stride < k->n_head * k->head_dim || k->window < 0;
}

static int xi_attention_batched_bad(const xi_attention_batched_c *k)
{
    return k->T < 0 || k->n_head < 0 || k->n_kv <= 0 || k->head_dim < 0 || k->rows < 0 ||
           k->n_head % k->n_kv != 0 || k->q_stride < k->n_head * k->head_dim || k->window < 0;
}

/* attention (pos given) or attention_batched (first, lastk) over an f32 (f16 = 0) or f16 cache */
static int xi_attention_any(const float *q, const void *kc, const void *vc, const int32_t *pos, const int32_t *first,
                            const int32_t *lastk, long limit, long T, long nh, long nkv, long hd, long qs, float scale,
                            long window, int f16, float *out)
{
    long *start = xi_att_spans(T);
    if (!start)
        return XI_ENOMEM;
    long *last = start + (T > 0 ? T : 1);
    for (long t = 0; t < T; t++) xi_att_span(pos, first, lastk, limit, window, t, &start[t], &last[t]);
    const int rc = xi_att_rows(q, kc, vc, start, last, T, nh, nkv, hd, qs, scale, f16, out);
    free(start);
    return rc;
}

/* attention over an f32 (f16 = 0) or f16 cache; the split-K workspace bindings (5, 6) are cuda's */
static int xi_attention_impl(void *const *b, const xi_attention_c *k, int f16)
{
    if (xi_attention_bad(k)) return XI_EINVAL;
    return xi_attention_any((const float *)b[0], b[1], b[2], (const int32_t *)b[3], NULL, NULL, k->ctx, k->T,
                            k->n_head, k->n_kv, k->head_dim, k->q_stride, k->scale, k->window, f16, (float *)b[4]);
}

int xi_k_attention(void *const *b, const void *c)
{
    XI_C(xi_attention_c);
    return xi_attention_impl(b, k, 0);
}

int xi_k_attention_f16(void *const *b, const void *c)
{
    XI_C(xi_attention_c); /* the family's one layout */
    return xi_attention_impl(b, k, 1);
}

/* attention_batched over an f32 (f16 = 0) or f16 cache; the workspace bindings (6, 7) are cuda's */
static int xi_attention_batched_impl(void *const *b, const xi_attention_batched_c *k, int f16)
{
    if (xi_attention_batched_bad(k)) return XI_EINVAL;
    return xi_attention_any((const float *)b[0], b[1], b[2], NULL, (const int32_t *)b[3], (const int32_t *)b[4],
                            k->rows, k->T, k->n_head, k->n_kv, k->head_dim, k->q_stride, k->scale, k->window, f16,
                            (float *)b[5]);
}

int xi_k_attention_batched(void *const *b, const void *c)
{
    XI_C(xi_attention_batched_c);
    return xi_attention_batched_impl(b, k, 0);
}

int xi_k_attention_batched_f16(void *const *b, const void *c)
{
    XI_C(xi_attention_batched_c);
    return xi_attention_batched_impl(b, k, 1);
}

/* ------------------------------------------------------------------ */
/* share forms (xi_common.h, "teams"): a unit a (query row, head) pair, as xi_att_rows computes it;
 * a thread keeps its scores in its own scratch (without memory they are recomputed: the same bits);
 * over an f16 cache each unit has its own 2 * hd floats of the team scratch (xi_att_row_f16's kf). */

/* pairs [u0, u1) of the T * nh (row, head) pairs */
static void xi_att_part(const float *q, const void *kc, const void *vc, const int32_t *pos, const int32_t *first,
                        const int32_t *lastk, long limit, long window, long nh, long nkv, long hd, long qs,
                        float scale, int f16, float *kf, float *out, long u0, long u1)
{
    const long group = nh / (nkv ? nkv : 1), kvs = nkv * hd, esize = f16 ? 2 : 4;
    long span = 0, start, last;
    for (long th = u0; th < u1; th++) {
        xi_att_span(pos, first, lastk, limit, window, th / nh, &start, &last);
        span = last + 1 > span ? last + 1 : span;
    }
    float *sc = span > 0 ? (float *)xi_thread_scratch(1, (size_t)span * sizeof(float)) : NULL;
    for (long th = u0; th < u1; th++) {
        const long t = th / nh, h = th % nh, g = h / group;
        xi_att_span(pos, first, lastk, limit, window, t, &start, &last);
        const long base = last < 0 ? 0 : start * kvs;
        xi_att_row(q + t * qs + h * hd, (const char *)kc + (base + g * hd) * esize,
                   (const char *)vc + (base + g * hd) * esize, kvs, last, hd, scale, f16, sc,
                   f16 ? kf + th * 2 * hd : NULL, out + (t * nh + h) * hd);
    }
}

static int xi_plan_att(long T, long nh, long hd, int f16, xi_plan *p)
{
    p->phases = 1;
    p->units[0] = T * nh;
    p->scratch = f16 ? (size_t)(T * nh * 2 * hd) * sizeof(float) : 0;
    return XI_OK;
}
static int xi_plan_attention(const void *c, xi_plan *p)
{
    XI_C(xi_attention_c);
    return xi_attention_bad(k) ? XI_EINVAL : xi_plan_att(k->T, k->n_head, k->head_dim, 0, p);
}
static int xi_plan_attention_f16(const void *c, xi_plan *p)
{
    XI_C(xi_attention_c);
    return xi_attention_bad(k) ? XI_EINVAL : xi_plan_att(k->T, k->n_head, k->head_dim, 1, p);
}
static void xi_run_att(void *const *b, const void *c, int f16, float *kf, long u0, long u1)
{
    XI_C(xi_attention_c);
    xi_att_part((const float *)b[0], b[1], b[2], (const int32_t *)b[3], NULL, NULL, k->ctx, k->window, k->n_head,
                k->n_kv, k->head_dim, k->q_stride, k->scale, f16, kf, (float *)b[4], u0, u1);
}
static void xi_run_attention(void *const *b, const void *c, void *scratch, int phase, long u0, long u1)
{
    (void)phase;
    xi_run_att(b, c, 0, (float *)scratch, u0, u1);
}
static void xi_run_attention_f16(void *const *b, const void *c, void *scratch, int phase, long u0, long u1)
{
    (void)phase;
    xi_run_att(b, c, 1, (float *)scratch, u0, u1);
}
XI_REGISTER_SHARE(attention)
XI_REGISTER_SHARE(attention_f16)

static int xi_plan_attention_batched(const void *c, xi_plan *p)
{
    XI_C(xi_attention_batched_c);
    return xi_attention_batched_bad(k) ? XI_EINVAL : xi_plan_att(k->T, k->n_head, k->head_dim, 0, p);
}
static int xi_plan_attention_batched_f16(const void *c, xi_plan *p)
{
    XI_C(xi_attention_batched_c);
    return xi_attention_batched_bad(k) ? XI_EINVAL : xi_plan_att(k->T, k->n_head, k->head_dim, 1, p);
}
static void xi_run_att_batched(void *const *b, const void *c, int f16, float *kf, long u0, long u1)
{
    XI_C(xi_attention_batched_c);
    xi_att_part((const float *)b[0], b[1], b[2], NULL, (const int32_t *)b[3], (const int32_t *)b[4], k->rows,
                k->window, k->n_head, k->n_kv, k->head_dim, k->q_stride, k->scale, f16, kf, (float *)b[5], u0, u1);
}
static void xi_run_attention_batched(void *const *b, const void *c, void *scratch, int phase, long u0, long u1)
{
    (void)phase;
    xi_run_att_batched(b, c, 0, (float *)scratch, u0, u1);
}
static void xi_run_attention_batched_f16(void *const *b, const void *c, void *scratch, int phase, long u0, long u1)
{
    (void)phase;
    xi_run_att_batched(b, c, 1, (float *)scratch, u0, u1);
}
XI_REGISTER_SHARE(attention_batched)
XI_REGISTER_SHARE(attention_batched_f16)
