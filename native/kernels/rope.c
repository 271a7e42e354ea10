/* rope, GGUF "normal" layout: adjacent pairs (x[2i], x[2i+1]) of each head; rope_kv_store. */
#include <stdlib.h>
#include "xi_common.h"

/* The nh heads of hd floats at xr rotated by position p (ltheta = log(theta)). Shared by rope and
 * rope_kv_store. Not bit-identical per head whatever nh is: GCC (12, -O3 -march=native) vectorizes
 * the head loop with vfmaddsub, a fused multiply-add, despite -ffp-contract=off, and the heads left
 * to the scalar remainder round twice; so a head's result depends on nh and its index. rope_kv_store
 * therefore calls this one (noinline) copy with the same (xr, nh) as the two rope calls it replaces. */
static __attribute__((noinline)) void xi_rope_row(float *xr, int32_t p, long nh, long hd, double ltheta,
                                                   const float *ff)
{
    const long half = hd / 2;
    for (long i = 0; i < half; i++) {
        /* angle in double: pos * theta^(-2i/hd) loses nothing for large pos; ff: divided by ff[i] */
        double ang = (double)p * exp(-ltheta * (double)(2 * i) / (double)hd);
        if (ff) ang /= (double)ff[i];
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
        if (pos[r] >= 0) xi_rope_row(x + r * st, pos[r], nh, hd, ltheta, NULL);
    }
    return XI_OK;
}

/* rope of the q heads and of the k heads of each qkv row (two calls of the row routine, as rope on
 * q and rope on k make), then kv_store of its k and v parts at row[t]: bit for bit rope(q) +
 * rope(k) + kv_store(k) + kv_store(v). The stores run after every row is rotated, in t order. */
/* rope_kv_store and rope_kv_store_ff (freq factors ff, or NULL); f16: the caches hold IEEE halves.
 * Split in three for the share forms below: the constants' check, the rotation of rows [t0, t1), the
 * stores (all rows, in t order). */
static int xi_rope_kv_store_bad(const xi_rope_kv_store_c *k)
{
    return k->T < 0 || k->n_head < 0 || k->n_kv < 0 || k->head_dim < 0 || (k->head_dim & 1) || k->ctx < 0 ||
           (long)k->row_stride < ((long)k->n_head + 2L * k->n_kv) * k->head_dim || !(k->theta > 0.0f);
}

static void xi_rope_kv_store_rotate(void *const *b, const xi_rope_kv_store_c *k, const float *ff, long t0, long t1)
{
    float *qkv = (float *)b[0];
    const int32_t *pos = (const int32_t *)b[1];
    const long nh = k->n_head, nkv = k->n_kv, hd = k->head_dim, st = k->row_stride;
    const double ltheta = log((double)k->theta);
    for (long t = t0; t < t1; t++) {
        if (pos[t] >= 0) {
            xi_rope_row(qkv + t * st, pos[t], nh, hd, ltheta, ff);
            xi_rope_row(qkv + t * st + nh * hd, pos[t], nkv, hd, ltheta, ff);
        }
    }
}

static void xi_rope_kv_store_stores(void *const *b, const xi_rope_kv_store_c *k, int f16)
{
    const float *qkv = (const float *)b[0];
    const int32_t *row = (const int32_t *)b[2];
    const long T = k->T, nh = k->n_head, nkv = k->n_kv, hd = k->head_dim, st = k->row_stride;
    if (f16) {
        xi_kv_store_rows_f16(qkv + nh * hd, (uint16_t *)b[3], row, T, nkv * hd, k->ctx, st);
        xi_kv_store_rows_f16(qkv + (nh + nkv) * hd, (uint16_t *)b[4], row, T, nkv * hd, k->ctx, st);
    } else {
        xi_kv_store_rows(qkv + nh * hd, (float *)b[3], row, T, nkv * hd, k->ctx, st);
        xi_kv_store_rows(qkv + (nh + nkv) * hd, (float *)b[4], row, T, nkv * hd, k->ctx, st);
    }
}

static int xi_rope_kv_store_impl(void *const *b, const xi_rope_kv_store_c *k, const float *ff, int f16)
{
    if (xi_rope_kv_store_bad(k)) return XI_EINVAL;
    const long T = k->T;
#pragma omp parallel for schedule(static) if (T > 1 && T * (k->n_head + k->n_kv) * k->head_dim >= 4 * XI_OMP_MIN_WORK)
    for (long t = 0; t < T; t++) xi_rope_kv_store_rotate(b, k, ff, t, t + 1);
    xi_rope_kv_store_stores(b, k, f16);
    return XI_OK;
}

int xi_k_rope_kv_store(void *const *b, const void *c)
{
    XI_C(xi_rope_kv_store_c);
    return xi_rope_kv_store_impl(b, k, NULL, 0);
}

int xi_k_rope_kv_store_f16(void *const *b, const void *c)
{
    XI_C(xi_rope_kv_store_c); /* the family's one layout */
    return xi_rope_kv_store_impl(b, k, NULL, 1);
}

int xi_k_rope_kv_store_ff_f16(void *const *b, const void *c)
{
    XI_C(xi_rope_kv_store_c);
    return xi_rope_kv_store_impl(b, k, (const float *)b[5], 1);
}

int xi_k_rope_kv_store_ff(void *const *b, const void *c)
{
    XI_C(xi_rope_kv_store_c);
    return xi_rope_kv_store_impl(b, k, (const float *)b[5], 0);
}

/* ------------------------------------------------------------------ */
/* share forms (xi_common.h, "teams"): a unit a row; rope_kv_store's stores are a second phase of
 * one unit (in t order, as alone), or with few rows the whole kernel is one unit (a decode step's
 * one row: not worth a wait between two phases). The four rope_kv_store kernels share one plan. */
#define XI_ROPE_SPLIT 16384L /* floats rotated: below it, rope_kv_store is one unit */

static int xi_plan_rope(const void *c, xi_plan *p)
{
    XI_C(xi_rope_c);
    if (k->rows < 0 || k->n_head < 0 || k->head_dim < 0 || (k->head_dim & 1) ||
        k->row_stride < k->n_head * k->head_dim || !(k->theta > 0.0f))
        return XI_EINVAL;
    p->phases = 1;
    p->units[0] = k->rows;
    return XI_OK;
}
static void xi_run_rope(void *const *b, const void *c, void *scratch, int phase, long u0, long u1)
{
    XI_C(xi_rope_c);
    float *x = (float *)b[0];
    const int32_t *pos = (const int32_t *)b[1];
    const double ltheta = log((double)k->theta);
    (void)scratch, (void)phase;
    for (long r = u0; r < u1; r++)
        if (pos[r] >= 0) xi_rope_row(x + r * k->row_stride, pos[r], k->n_head, k->head_dim, ltheta, NULL);
}
XI_REGISTER_SHARE(rope)

static int xi_rope_kv_store_split(const xi_rope_kv_store_c *k)
{
    return (long)k->T * (k->n_head + k->n_kv) * k->head_dim >= XI_ROPE_SPLIT;
}

static int xi_plan_rope_kv_store(const void *c, xi_plan *p)
{
    XI_C(xi_rope_kv_store_c);
    if (xi_rope_kv_store_bad(k)) return XI_EINVAL;
    const int split = xi_rope_kv_store_split(k);
    p->phases = split ? 2 : 1;
    p->units[0] = split ? k->T : 1;
    p->units[1] = 1;
    return XI_OK;
}

static void xi_run_rope_kv_store_any(void *const *b, const void *c, int phase, long u0, long u1, const float *ff,
                                     int f16)
{
    XI_C(xi_rope_kv_store_c);
    const int split = xi_rope_kv_store_split(k);
    if (!split) u0 = 0, u1 = k->T; /* the one unit: rows, then stores */
    if (phase == 0) xi_rope_kv_store_rotate(b, k, ff, u0, u1);
    if (phase == 1 || !split) xi_rope_kv_store_stores(b, k, f16);
}
static void xi_run_rope_kv_store(void *const *b, const void *c, void *scratch, int phase, long u0, long u1)
{
    (void)scratch;
    xi_run_rope_kv_store_any(b, c, phase, u0, u1, NULL, 0);
}
static void xi_run_rope_kv_store_f16(void *const *b, const void *c, void *scratch, int phase, long u0, long u1)
{
    (void)scratch;
    xi_run_rope_kv_store_any(b, c, phase, u0, u1, NULL, 1);
}
static void xi_run_rope_kv_store_ff(void *const *b, const void *c, void *scratch, int phase, long u0, long u1)
{
    (void)scratch;
    xi_run_rope_kv_store_any(b, c, phase, u0, u1, (const float *)b[5], 0);
}
static void xi_run_rope_kv_store_ff_f16(void *const *b, const void *c, void *scratch, int phase, long u0, long u1)
{
    (void)scratch;
    xi_run_rope_kv_store_any(b, c, phase, u0, u1, (const float *)b[5], 1);
}
#define xi_plan_rope_kv_store_f16 xi_plan_rope_kv_store
#define xi_plan_rope_kv_store_ff xi_plan_rope_kv_store
#define xi_plan_rope_kv_store_ff_f16 xi_plan_rope_kv_store
XI_REGISTER_SHARE(rope_kv_store)
XI_REGISTER_SHARE(rope_kv_store_f16)
XI_REGISTER_SHARE(rope_kv_store_ff)
XI_REGISTER_SHARE(rope_kv_store_ff_f16)
