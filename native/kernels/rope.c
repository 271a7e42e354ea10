/* rope, GGUF "normal" layout: adjacent pairs (x[2i], x[2i+1]) of each head. */
#include <stdlib.h>
#include "xi_common.h"

/* The nh heads of hd floats at xr rotated by position p (ltheta = log(theta)). Shared by rope and
 * rope_kv_store. Not bit-identical per head whatever nh is: GCC (12, -O3 -march=native) vectorizes
 * the head loop with vfmaddsub, a fused multiply-add, despite -ffp-contract=off, and the heads left
 * to the scalar remainder round twice; so a head's result depends on nh and its index. rope_kv_store
 * therefore calls this one (noinline) copy with the same (xr, nh) as the two rope calls it replaces. */
static __attribute__((noinline)) void xi_rope_row(float *xr, int32_t p, long nh, long hd, double ltheta)
{
    const long half = hd / 2;
    for (long i = 0; i < half; i++) {
        /* angle in double: pos * theta^(-2i/hd) loses nothing for large pos */
        const double ang = (double)p * exp(-ltheta * (double)(2 * i) / (double)hd);
        const float cs = (float)cos(ang), sn = (float)sin(ang);
        for (long h = 0; h < nh; h++) {
            float *v = xr + h * hd + 2 * i;
            const float a = v[0], bb = v[1];
            v[0] = a * cs - bb * sn;
            v[1] = a * sn + bb * cs;
        }
    }
}

int xi_k_rope(void *const *b, const void *c)
{
    XI_C(xi_rope_c);
    if (k->rows < 0 || k->n_head < 0 || k->head_dim < 0 || (k->head_dim & 1) ||
        k->row_stride < k->n_head * k->head_dim || !(k->theta > 0.0f))
        return XI_EINVAL;
    float *x = (float *)b[0];
    const int32_t *pos = (const int32_t *)b[1];
    const long rows = k->rows, nh = k->n_head, hd = k->head_dim, st = k->row_stride;
    const double ltheta = log((double)k->theta);
#pragma omp parallel for schedule(static) if (rows > 1 && rows * nh * hd >= 4 * XI_OMP_MIN_WORK)
    for (long r = 0; r < rows; r++) {
        if (pos[r] >= 0) xi_rope_row(x + r * st, pos[r], nh, hd, ltheta);
    }
    return XI_OK;
}
