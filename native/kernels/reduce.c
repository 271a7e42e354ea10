/* softmax, argmax */
#include "xi_common.h"

int xi_k_softmax(void *const *b, const void *c)
{
    XI_C(xi_softmax_c);
    if (k->rows < 0 || k->n < 0) return XI_EINVAL;
    const float *x = (const float *)b[0];
    float *y = (float *)b[1];
    const long rows = k->rows, n = k->n;
#pragma omp parallel for schedule(static) if (rows > 1 && rows * n >= 4 * XI_OMP_MIN_WORK)
    for (long r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        float mx = -INFINITY;
        int nan = 0;
        for (long i = 0; i < n; i++) {
            float v = xr[i];
            if (v != v) nan = 1;
            mx = v > mx ? v : mx;
        }
        if (nan) { /* NaN in, NaN row out (as the max-subtracted formula gives) */
            for (long i = 0; i < n; i++) yr[i] = NAN;
            continue;
        }
        double sum = 0.0;
        for (long i = 0; i < n; i++) {
            float e = expf(xr[i] - mx); /* -inf - -inf = NaN: all -inf row -> NaN row */
            yr[i] = e;
            sum += e;
        }
        const float inv = (float)(1.0 / sum);
        for (long i = 0; i < n; i++) yr[i] *= inv;
    }
    return XI_OK;
}

int xi_k_argmax(void *const *b, const void *c)
{
    XI_C(xi_argmax_c);
    if (k->rows < 0 || k->n < 0) return XI_EINVAL;
    const float *x = (const float *)b[0];
    int32_t *out = (int32_t *)b[1];
    const long rows = k->rows, n = k->n;
    for (long r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        long best = 0;
        float bv = n > 0 ? xr[0] : 0.0f;
        if (bv == bv) {
            for (long i = 1; i < n; i++) {
                float v = xr[i];
                if (v > bv) { bv = v; best = i; }
                else if (v != v) { best = i; break; } /* NaN wins, like numpy */
            }
        }
        out[r] = (int32_t)best; /* n == 0: 0 */
    }
    return XI_OK;
}
