/* rmsnorm */
#include <stdlib.h>
#include "xi_common.h"

/* rows x dim rows of x -> y: y = x / sqrt(mean(x^2) + eps) * w. Shared by rmsnorm and the fused
 * rmsnorm_matmul kernels, so those normalize bit for bit as rmsnorm does. */
void xi_rmsnorm_rows(const float *x, const float *w, float *y, long rows, long dim, float eps_)
{
    const double eps = eps_;
#pragma omp parallel for schedule(static) if (rows > 1 && rows * dim >= 4 * XI_OMP_MIN_WORK)
    for (long r = 0; r < rows; r++) {
        const float *xr = x + r * dim;
        float *yr = y + r * dim;
        /* four double partial sums: exact enough, and not a serial chain */
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        long i = 0;
        for (; i + 4 <= dim; i += 4) {
            s0 += (double)xr[i] * xr[i];
            s1 += (double)xr[i + 1] * xr[i + 1];
            s2 += (double)xr[i + 2] * xr[i + 2];
            s3 += (double)xr[i + 3] * xr[i + 3];
        }
        for (; i < dim; i++) s0 += (double)xr[i] * xr[i];
        const double ms = dim > 0 ? (s0 + s1 + s2 + s3) / (double)dim : 0.0;
        const float scale = (float)(1.0 / sqrt(ms + eps));
        for (i = 0; i < dim; i++) yr[i] = xr[i] * scale * w[i];
    }
}

int xi_k_rmsnorm(void *const *b, const void *c)
{
    XI_C(xi_rmsnorm_c);
    if (k->rows < 0 || k->dim < 0) return XI_EINVAL;
    xi_rmsnorm_rows((const float *)b[0], (const float *)b[1], (float *)b[2], k->rows, k->dim, k->eps);
    return XI_OK;
}

/* Per-head q/k norm: in each of the T rows (row_stride floats apart), the n_head q heads and then the
 * n_kv k heads of head_dim floats normalized in place by xi_rmsnorm_rows (q heads by q_norm, k heads
 * by k_norm), so each head is bit for bit `rmsnorm` of that head. */
int xi_k_qk_rmsnorm(void *const *b, const void *c)
{
    XI_C(xi_qk_rmsnorm_c);
    if (k->T < 0 || k->n_head < 0 || k->n_kv < 0 || k->head_dim < 0 ||
        (long)k->row_stride < ((long)k->n_head + k->n_kv) * k->head_dim)
        return XI_EINVAL;
    float *qkv = (float *)b[0];
    const float *qn = (const float *)b[1], *kn = (const float *)b[2];
    const long T = k->T, nh = k->n_head, nkv = k->n_kv, hd = k->head_dim, st = k->row_stride;
    for (long t = 0; t < T; t++) {
        float *r = qkv + t * st;
        xi_rmsnorm_rows(r, qn, r, nh, hd, k->eps);
        xi_rmsnorm_rows(r + nh * hd, kn, r + nh * hd, nkv, hd, k->eps);
    }
    return XI_OK;
}

/* y += rmsnorm(x) * w, row by row: the normalized row goes through a row of scratch so each value is
 * bit for bit `rmsnorm`'s before the add. */
int xi_k_rmsnorm_add(void *const *b, const void *c)
{
    XI_C(xi_rmsnorm_add_c);
    if (k->rows < 0 || k->dim < 0) return XI_EINVAL;
    const float *x = (const float *)b[0], *w = (const float *)b[1];
    float *y = (float *)b[2];
    const long rows = k->rows, dim = k->dim;
    float *tmp = (float *)malloc((size_t)(dim > 0 ? dim : 1) * sizeof(float));
    if (!tmp) return XI_ENOMEM;
    for (long r = 0; r < rows; r++) {
        xi_rmsnorm_rows(x + r * dim, w, tmp, 1, dim, k->eps);
        float *yr = y + r * dim;
        for (long i = 0; i < dim; i++) yr[i] += tmp[i];
    }
    free(tmp);
    return XI_OK;
}
