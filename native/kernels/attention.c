/* attention: causal by position, GQA, max-subtracted softmax. */
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

/* One (query row, head): o (hd) = softmax(q . k[j] * scale) @ v[j] over keys j = 0..p of kh/vh
 * (rows kvs floats apart). Shared by attention and attention_batched, so a batched row is
 * bit-identical to the single-sequence kernel over the same keys. sc: scratch of p + 1 floats, or
 * NULL (scores recomputed). */
static void xi_att_row(const float *qh, const float *kh, const float *vh, long kvs, long p, long hd,
                       float scale, float *sc, float *o)
{
    for (long d = 0; d < hd; d++) o[d] = 0.0f;
    if (p < 0) return; /* zero row */
    float mx = -INFINITY;
    for (long j = 0; j <= p; j++) {
        float s = xi_dot(qh, kh + j * kvs, hd) * scale;
        if (sc) sc[j] = s;
        mx = s > mx ? s : mx;
    }
    double sum = 0.0;
    for (long j = 0; j <= p; j++) {
        float s = sc ? sc[j] : xi_dot(qh, kh + j * kvs, hd) * scale;
        float e = expf(s - mx);
        sum += e;
        const float *vj = vh + j * kvs;
        for (long d = 0; d < hd; d++) o[d] += e * vj[d];
    }
    const float inv = (float)(1.0 / sum);
    for (long d = 0; d < hd; d++) o[d] *= inv;
}

/* Every (query row t, head h) of T rows: row t attends keys start[t]..start[t]+last[t] of the cache
 * (last[t] < 0: a zero row), query head h reading kv head h / (n_head / n_kv). OpenMP over the
 * T * n_head rows once the work is large enough; each thread keeps one score buffer. */
static void xi_att_rows(const float *q, const float *kc, const float *vc, const long *start, const long *last,
                        long T, long nh, long nkv, long hd, long qs, float scale, float *out)
{
    const long group = nh / (nkv ? nkv : 1), kvs = nkv * hd;
    long work = 0, span = 0;
    for (long t = 0; t < T; t++) {
        work += last[t] + 1;
        span = last[t] + 1 > span ? last[t] + 1 : span;
    }
    work *= nh * hd;

#pragma omp parallel if (T * nh > 1 && work >= 2 * XI_OMP_MIN_WORK)
    {
        /* per-thread score buffer; without memory the scores are recomputed */
        float *sc = span > 0 ? (float *)malloc((size_t)span * sizeof(float)) : NULL;
#pragma omp for schedule(dynamic, 1)
        for (long th = 0; th < T * nh; th++) {
            const long t = th / nh, h = th % nh, g = h / group;
            const long base = last[t] < 0 ? 0 : start[t] * kvs;
            xi_att_row(q + t * qs + h * hd, kc + base + g * hd, vc + base + g * hd, kvs, last[t], hd, scale, sc,
                       out + (t * nh + h) * hd);
        }
        free(sc);
    }
}

/* Per-row key spans of T rows: start[t], and last[t] (the count minus one; -1 for none) in one
 * allocation; NULL when out of memory. */
static long *xi_att_spans(long T)
{
    return (long *)malloc((size_t)(2 * (T > 0 ? T : 1)) * sizeof(long));
}

int xi_k_attention(void *const *b, const void *c)
{
    XI_C(xi_attention_c);
    if (k->T < 0 || k->n_head < 0 || k->n_kv <= 0 || k->head_dim < 0 || k->ctx < 0 ||
        k->n_head % k->n_kv != 0 || k->q_stride < k->n_head * k->head_dim)
        return XI_EINVAL;
    const int32_t *pos = (const int32_t *)b[3];
    const long T = k->T, ctx = k->ctx;
    long *start = xi_att_spans(T);
    if (!start)
        return XI_ENOMEM;
    long *last = start + (T > 0 ? T : 1);
    for (long t = 0; t < T; t++) {
        long p = pos[t];
        if (p >= ctx) p = ctx - 1; /* keys past the cache do not exist */
        start[t] = 0;
        last[t] = p < 0 ? -1 : p;
    }
    xi_att_rows((const float *)b[0], (const float *)b[1], (const float *)b[2], start, last, T, k->n_head, k->n_kv,
                k->head_dim, k->q_stride, k->scale, (float *)b[4]);
    free(start);
    return XI_OK;
}

int xi_k_attention_batched(void *const *b, const void *c)
{
    XI_C(xi_attention_batched_c);
    if (k->T < 0 || k->n_head < 0 || k->n_kv <= 0 || k->head_dim < 0 || k->rows < 0 ||
        k->n_head % k->n_kv != 0 || k->q_stride < k->n_head * k->head_dim)
        return XI_EINVAL;
    const int32_t *first = (const int32_t *)b[3], *lastk = (const int32_t *)b[4];
    const long T = k->T, rows = k->rows;
    long *start = xi_att_spans(T);
    if (!start)
        return XI_ENOMEM;
    long *last = start + (T > 0 ? T : 1);
    for (long t = 0; t < T; t++) {
        long f = first[t], l = lastk[t];
        if (l >= rows) l = rows - 1; /* keys past the cache do not exist */
        start[t] = f;
        last[t] = (f < 0 || l < f) ? -1 : l - f;
    }
    xi_att_rows((const float *)b[0], (const float *)b[1], (const float *)b[2], start, last, T, k->n_head, k->n_kv,
                k->head_dim, k->q_stride, k->scale, (float *)b[5]);
    free(start);
    return XI_OK;
}

/* ------------------------------------------------------------------ */
/* share forms (xi_common.h, "teams"): a unit a (query row, head) pair, as xi_att_rows computes it;
 * a thread keeps its scores in its own scratch (without memory they are recomputed: the same bits). */

/* row t's keys: start and last (last < 0: none), as xi_k_attention (pos, limit = ctx) or
 * xi_k_attention_batched (first, lastk, limit = rows) compute them */
static inline void xi_att_span(const int32_t *pos, const int32_t *first, const int32_t *lastk, long limit, long t,
                               long *start, long *last)
{
    if (pos) {
        long p = pos[t];
        if (p >= limit) p = limit - 1; /* keys past the cache do not exist */
        *start = 0;
        *last = p < 0 ? -1 : p;
    } else {
        long f = first[t], l = lastk[t];
        if (l >= limit) l = limit - 1;
        *start = f;
        *last = (f < 0 || l < f) ? -1 : l - f;
    }
}

/* pairs [u0, u1) of the T * nh (row, head) pairs */
static void xi_att_part(const float *q, const float *kc, const float *vc, const int32_t *pos, const int32_t *first,
                        const int32_t *lastk, long limit, long nh, long nkv, long hd, long qs, float scale, float *out,
                        long u0, long u1)
{
    const long group = nh / (nkv ? nkv : 1), kvs = nkv * hd;
    long span = 0, start, last;
    for (long th = u0; th < u1; th++) {
        xi_att_span(pos, first, lastk, limit, th / nh, &start, &last);
        span = last + 1 > span ? last + 1 : span;
    }
    float *sc = span > 0 ? (float *)xi_thread_scratch(1, (size_t)span * sizeof(float)) : NULL;
    for (long th = u0; th < u1; th++) {
        const long t = th / nh, h = th % nh, g = h / group;
        xi_att_span(pos, first, lastk, limit, t, &start, &last);
        const long base = last < 0 ? 0 : start * kvs;
        xi_att_row(q + t * qs + h * hd, kc + base + g * hd, vc + base + g * hd, kvs, last, hd, scale, sc,
                   out + (t * nh + h) * hd);
    }
}

static int xi_plan_attention(const void *c, xi_plan *p)
{
    XI_C(xi_attention_c);
    if (k->T < 0 || k->n_head < 0 || k->n_kv <= 0 || k->head_dim < 0 || k->ctx < 0 ||
        k->n_head % k->n_kv != 0 || k->q_stride < k->n_head * k->head_dim)
        return XI_EINVAL;
    p->phases = 1;
    p->units[0] = (long)k->T * k->n_head;
    return XI_OK;
}
static void xi_run_attention(void *const *b, const void *c, void *scratch, int phase, long u0, long u1)
{
    XI_C(xi_attention_c);
    (void)scratch, (void)phase;
    xi_att_part((const float *)b[0], (const float *)b[1], (const float *)b[2], (const int32_t *)b[3], NULL, NULL,
                k->ctx, k->n_head, k->n_kv, k->head_dim, k->q_stride, k->scale, (float *)b[4], u0, u1);
}
XI_REGISTER_SHARE(attention)

static int xi_plan_attention_batched(const void *c, xi_plan *p)
{
    XI_C(xi_attention_batched_c);
    if (k->T < 0 || k->n_head < 0 || k->n_kv <= 0 || k->head_dim < 0 || k->rows < 0 ||
        k->n_head % k->n_kv != 0 || k->q_stride < k->n_head * k->head_dim)
        return XI_EINVAL;
    p->phases = 1;
    p->units[0] = (long)k->T * k->n_head;
    return XI_OK;
}
static void xi_run_attention_batched(void *const *b, const void *c, void *scratch, int phase, long u0, long u1)
{
    XI_C(xi_attention_batched_c);
    (void)scratch, (void)phase;
    xi_att_part((const float *)b[0], (const float *)b[1], (const float *)b[2], NULL, (const int32_t *)b[3],
                (const int32_t *)b[4], k->rows, k->n_head, k->n_kv, k->head_dim, k->q_stride, k->scale, (float *)b[5],
                u0, u1);
}
XI_REGISTER_SHARE(attention_batched)
