/* The operands of the GEMM regime (xinfer_async/llm/_gemm.py), the cpu side of
 * shaders/xi_gemm_prep.cuh, unscale_add.cu and swiglu_unscale.cu: the same values (the cuda GEMM
 * itself is cuBLASLt; on cpu the Gemm operator is numpy, fed these operands).
 *
 * Activations: row r of h (f32) becomes f16(h * s[r]), s[r] the largest power of two <= 1 with
 * max|h[r]| * s[r] <= 2^15 (NaN elements aside); inv_scale[r] = 1 / s[r]. Weights: f16 of
 * dequantize_DT's f32 values. Every f32 -> f16 conversion rounds to nearest even. */
#include <stdlib.h>
#include "xi_common.h"

#define XI_F16_ACT_LIMIT 32768.0f

/* f32 -> f16 bits: xi_f2h (xi_common.h), round to nearest even */

static inline float xi_f16_row_scale(float amax)
{
    float s = 1.0f;
    for (int e = 0; e < 126 && amax * s > XI_F16_ACT_LIMIT; e++) s *= 0.5f;
    return s;
}

static void xi_rows_to_f16(const float *h, uint16_t *y, float *inv_scale, long rows, long dim)
{
#pragma omp parallel for schedule(static) if (rows > 1 && rows * dim >= XI_OMP_MIN_WORK)
    for (long r = 0; r < rows; r++) {
        const float *hr = h + r * dim;
        float amax = 0.0f;
        for (long i = 0; i < dim; i++) amax = fmaxf(amax, fabsf(hr[i]));
        const float s = xi_f16_row_scale(amax);
        for (long i = 0; i < dim; i++) y[r * dim + i] = xi_f2h(hr[i] * s);
        inv_scale[r] = 1.0f / s;
    }
}

int xi_k_to_f16(void *const *b, const void *c)
{
    XI_C(xi_to_f16_c);
    if (k->rows < 0 || k->dim < 0) return XI_EINVAL;
    xi_rows_to_f16((const float *)b[0], (uint16_t *)b[1], (float *)b[2], k->rows, k->dim);
    return XI_OK;
}

int xi_k_rmsnorm_f16(void *const *b, const void *c)
{
    XI_C(xi_rmsnorm_f16_c);
    if (k->rows < 0 || k->dim < 0) return XI_EINVAL;
    float *h = malloc(sizeof(float) * ((size_t)k->rows * k->dim + 1));
    if (!h) return XI_ENOMEM;
    xi_rmsnorm_rows((const float *)b[0], (const float *)b[1], h, k->rows, k->dim, k->eps); /* `rmsnorm` exactly */
    xi_rows_to_f16(h, (uint16_t *)b[2], (float *)b[3], k->rows, k->dim);
    free(h);
    return XI_OK;
}

int xi_k_unscale_add(void *const *b, const void *c)
{
    XI_C(xi_unscale_add_c);
    if (k->rows < 0 || k->n < 0 || (k->rows > 1 && k->y_stride < k->n)) return XI_EINVAL;
    const float *src = (const float *)b[0], *inv = (const float *)b[1];
    float *y = (float *)b[2];
    const long n = k->n, ys = k->y_stride;
#pragma omp parallel for schedule(static) if ((long)k->rows * n >= XI_OMP_MIN_WORK)
    for (long r = 0; r < k->rows; r++)
        for (long i = 0; i < n; i++) {
            const float v = src[r * n + i] * inv[r];
            y[r * ys + i] = k->accumulate ? y[r * ys + i] + v : v;
        }
    return XI_OK;
}

int xi_k_swiglu_unscale(void *const *b, const void *c)
{
    XI_C(xi_swiglu_unscale_c);
    if (k->rows < 0 || k->n < 0) return XI_EINVAL;
    const float *gu = (const float *)b[0], *inv = (const float *)b[1];
    const long rows = k->rows, n = k->n;
    float *t = malloc(sizeof(float) * ((size_t)rows * 2 * n + 1));
    if (!t) return XI_ENOMEM;
    for (long i = 0; i < rows * 2 * n; i++) t[i] = gu[i] * inv[i / (2 * n)];
    xi_swiglu_rows(t, t + n, (float *)b[2], rows, n, 2 * n); /* `swiglu` exactly */
    free(t);
    return XI_OK;
}

/* dequantize_f16_DT: dequantize_DT (exact gguf values) a chunk at a time, then rounded to f16; the
 * chunks in parallel (each dequantize_DT call is below its own threading threshold) */
#define XI_DEQUANTIZE_F16(NAME, BLOCK, BYTES)                                                       \
int xi_k_dequantize_f16_##NAME(void *const *b, const void *c)                                     \
{                                                                                                   \
    XI_C(xi_dequantize_f16_##NAME##_c);                                                             \
    if (k->n < 0 || k->n % (BLOCK) != 0) return XI_EINVAL;                                          \
    enum { CHUNK = 1 << 14 };                                                                       \
    const uint8_t *src = (const uint8_t *)b[0];                                                     \
    uint16_t *dst = (uint16_t *)b[1];                                                               \
    const long n = k->n, chunks = (n + CHUNK - 1) / CHUNK;                                          \
    int status = XI_OK;                                                                             \
    _Pragma("omp parallel for schedule(static) if (chunks > 1)")                                    \
    for (long ci = 0; ci < chunks; ci++) {                                                          \
        float tmp[CHUNK];                                                                           \
        const long i0 = ci * CHUNK, m = n - i0 < CHUNK ? n - i0 : CHUNK;                            \
        xi_dequantize_##NAME##_c sub = {(int32_t)m};                                                \
        void *bind[2] = {(void *)(src + i0 / (BLOCK) * (BYTES)), tmp};                              \
        if (xi_k_dequantize_##NAME(bind, &sub) != XI_OK) {                                          \
            _Pragma("omp atomic write")                                                             \
            status = XI_EINVAL;                                                                     \
            continue;                                                                               \
        }                                                                                           \
        for (long i = 0; i < m; i++) dst[i0 + i] = xi_f2h(tmp[i]);                                  \
    }                                                                                               \
    return status;                                                                                  \
}

XI_DEQUANTIZE_F16(q8_0, 32, 34)
XI_DEQUANTIZE_F16(q4_0, 32, 18)
XI_DEQUANTIZE_F16(q4_1, 32, 20)
XI_DEQUANTIZE_F16(q5_0, 32, 22)
XI_DEQUANTIZE_F16(q5_1, 32, 24)
XI_DEQUANTIZE_F16(q2_k, 256, 84)
XI_DEQUANTIZE_F16(q3_k, 256, 110)
XI_DEQUANTIZE_F16(q4_k, 256, 144)
XI_DEQUANTIZE_F16(q5_k, 256, 176)
XI_DEQUANTIZE_F16(q6_k, 256, 210)
XI_DEQUANTIZE_F16(iq4_nl, 32, 18)
XI_DEQUANTIZE_F16(iq4_xs, 256, 136)
