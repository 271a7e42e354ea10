/* affine, add, swiglu, geglu, bias_add, softcap, kv_store */
#include "xi_common.h"

int xi_k_affine(void *const *b, const void *c)
{
    XI_C(xi_affine_c);
    if (k->n < 0) return XI_EINVAL;
    const float *x = (const float *)b[0];
    float *y = (float *)b[1];
    const float a = k->a, bb = k->b;
    long n = k->n;
#pragma omp parallel for schedule(static) if (n >= 8 * XI_OMP_MIN_WORK)
    for (long i = 0; i < n; i++) y[i] = a * x[i] + bb;
    return XI_OK;
}

int xi_k_add(void *const *b, const void *c)
{
    XI_C(xi_add_c);
    if (k->n < 0) return XI_EINVAL;
    const float *x = (const float *)b[0], *z = (const float *)b[1];
    float *y = (float *)b[2];
    long n = k->n;
#pragma omp parallel for schedule(static) if (n >= 8 * XI_OMP_MIN_WORK)
    for (long i = 0; i < n; i++) y[i] = x[i] + z[i];
    return XI_OK;
}

/* exp for silu: expf, vectorized with AVX2 for |g| in the normal range. */
static inline float xi_silu(float g) { return g / (1.0f + expf(-g)); }

/* y (rows, n) = silu(gate) * up, gate and up rows in_stride floats apart. Shared by swiglu and
 * rmsnorm_matmul_swiglu. */
void xi_swiglu_rows(const float *gate, const float *up, float *y, long rows, long n, long st)
{
#pragma omp parallel for schedule(static) if (rows * n >= 2 * XI_OMP_MIN_WORK)
    for (long r = 0; r < rows; r++) {
        const float *g = gate + r * st, *u = up + r * st;
        float *o = y + r * n;
        for (long i = 0; i < n; i++) o[i] = xi_silu(g[i]) * u[i];
    }
}

int xi_k_swiglu(void *const *b, const void *c)
{
    XI_C(xi_swiglu_c);
    if (k->rows < 0 || k->n < 0 || k->in_stride < k->n) return XI_EINVAL;
    xi_swiglu_rows((const float *)b[0], (const float *)b[1], (float *)b[2], k->rows, k->n, k->in_stride);
    return XI_OK;
}

/* gelu, tanh approximation (ggml_gelu_f32 without ggml's float16 lookup table) */
static inline float xi_gelu_tanh(float g)
{
    const float s2pi = 0.79788456080286535587989211986876f, a = 0.044715f;
    return 0.5f * g * (1.0f + tanhf(s2pi * g * (1.0f + a * g * g)));
}

int xi_k_geglu(void *const *b, const void *c)
{
    XI_C(xi_geglu_c);
    if (k->rows < 0 || k->n < 0) return XI_EINVAL;
    const float *gu = (const float *)b[0];
    float *y = (float *)b[1];
    const long rows = k->rows, n = k->n;
#pragma omp parallel for schedule(static) if (rows * n >= 2 * XI_OMP_MIN_WORK)
    for (long r = 0; r < rows; r++) {
        const float *g = gu + r * 2 * n, *u = g + n;
        float *o = y + r * n;
        for (long i = 0; i < n; i++) o[i] = xi_gelu_tanh(g[i]) * u[i];
    }
    return XI_OK;
}

int xi_k_bias_add(void *const *b, const void *c)
{
    XI_C(xi_bias_add_c);
    if (k->rows < 0 || k->n < 0) return XI_EINVAL;
    float *y = (float *)b[0];
    const float *bias = (const float *)b[1];
    for (long r = 0; r < k->rows; r++)
        for (long i = 0; i < k->n; i++) y[r * k->n + i] += bias[i];
    return XI_OK;
}

int xi_k_softcap(void *const *b, const void *c)
{
    XI_C(xi_softcap_c);
    if (k->n < 0 || !(k->cap > 0.0f)) return XI_EINVAL;
    float *x = (float *)b[0];
    const float cap = k->cap;
    const long n = k->n;
#pragma omp parallel for schedule(static) if (n >= 8 * XI_OMP_MIN_WORK)
    for (long i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
    return XI_OK;
}

/* cache[pos[t], :] = src[t*src_stride : +width], in t order (a repeated row: the last t wins);
 * rows with pos outside [0, ctx) skipped. Shared by kv_store and rope_kv_store. */
void xi_kv_store_rows(const float *src, float *cache, const int32_t *pos, long T, long width, long ctx,
                      long src_stride)
{
    for (long t = 0; t < T; t++) {
        int32_t p = pos[t];
        if (p < 0 || p >= ctx) continue;
        memmove(cache + (long)p * width, src + t * src_stride, (size_t)width * sizeof(float));
    }
}

void xi_kv_store_rows_f16(const float *src, uint16_t *cache, const int32_t *pos, long T, long width, long ctx,
                          long src_stride)
{
    for (long t = 0; t < T; t++) {
        int32_t p = pos[t];
        if (p < 0 || p >= ctx) continue;
        const float *s = src + t * src_stride;
        uint16_t *d = cache + (long)p * width;
        for (long i = 0; i < width; i++) d[i] = xi_f2h(s[i]);
    }
}

int xi_k_kv_store(void *const *b, const void *c)
{
    XI_C(xi_kv_store_c);
    if (k->T < 0 || k->width < 0 || k->ctx < 0 || k->src_stride < k->width) return XI_EINVAL;
    xi_kv_store_rows((const float *)b[0], (float *)b[1], (const int32_t *)b[2], k->T, k->width, k->ctx,
                     k->src_stride);
    return XI_OK;
}
