/* rmsnorm */
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
