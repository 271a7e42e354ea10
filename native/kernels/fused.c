/* Fused kernels: rmsnorm_matmul_DT, rmsnorm_matmul_swiglu_DT. Each runs the row routines of the
 * kernels it replaces (xi_common.h) on a scratch buffer, so on the cpu it equals rmsnorm then
 * matmul_DT (then swiglu) bit for bit; what it saves is the dispatches and the trips of h through
 * a device buffer. (rope_kv_store lives in rope.c, next to the rope row routine.) */
#include <stdlib.h>
#include "xi_common.h"

/* h (T, K) = rmsnorm(x) into scratch; y (T, N) = (accumulate ? y : 0) + w @ h^T */
/* BLOCKED: K must be a multiple of it (0: any K) */
#define XI_RMSNORM_MATMUL(NAME, BLOCKED)                                             \
int xi_k_rmsnorm_matmul_##NAME(void *const *b, const void *c)                         \
{                                                                                    \
    XI_C(xi_rmsnorm_matmul_##NAME##_c);                                              \
    if (k->T < 0 || k->N < 0 || k->K < 0 || ((BLOCKED) > 1 && k->K % ((BLOCKED) > 1 ? (BLOCKED) : 1) != 0))           \
        return XI_EINVAL;                                                            \
    const long T = k->T, N = k->N, K = k->K;                                         \
    if (T == 0 || N == 0) return XI_OK;                                              \
    float *h = (float *)malloc((size_t)(T * K > 0 ? T * K : 1) * sizeof(float));     \
    if (!h) return XI_ENOMEM;                                                        \
    xi_rmsnorm_rows((const float *)b[1], (const float *)b[2], h, T, K, k->eps);      \
    xi_matmul_rows_##NAME((const uint8_t *)b[0], h, (float *)b[3], T, N, K, k->accumulate); \
    free(h);                                                                         \
    return XI_OK;                                                                    \
}

/* h = rmsnorm(x); g (T, 2N) = w (2N, K) @ h^T (gate columns [0, N), up [N, 2N));
 * y (T, N) = silu(gate) * up */
#define XI_RMSNORM_MATMUL_SWIGLU(NAME, BLOCKED)                                      \
int xi_k_rmsnorm_matmul_swiglu_##NAME(void *const *b, const void *c)                  \
{                                                                                    \
    XI_C(xi_rmsnorm_matmul_swiglu_##NAME##_c);                                       \
    if (k->T < 0 || k->N < 0 || k->K < 0 || ((BLOCKED) > 1 && k->K % ((BLOCKED) > 1 ? (BLOCKED) : 1) != 0))           \
        return XI_EINVAL;                                                            \
    const long T = k->T, N = k->N, K = k->K;                                         \
    if (T == 0 || N == 0) return XI_OK;                                              \
    float *h = (float *)malloc((size_t)(T * K + T * 2 * N) * sizeof(float));         \
    if (!h) return XI_ENOMEM;                                                        \
    float *g = h + T * K;                                                            \
    xi_rmsnorm_rows((const float *)b[1], (const float *)b[2], h, T, K, k->eps);      \
    xi_matmul_rows_##NAME((const uint8_t *)b[0], h, g, T, 2 * N, K, 0);              \
    xi_swiglu_rows(g, g + N, (float *)b[3], T, N, 2 * N);                            \
    free(h);                                                                         \
    return XI_OK;                                                                    \
}

XI_RMSNORM_MATMUL(f32, 0)
XI_RMSNORM_MATMUL(f16, 0)
XI_RMSNORM_MATMUL(q8_0, 32)
XI_RMSNORM_MATMUL(q4_0, 32)
XI_RMSNORM_MATMUL(q4_1, 32)
XI_RMSNORM_MATMUL(q5_0, 32)
XI_RMSNORM_MATMUL(q5_1, 32)
XI_RMSNORM_MATMUL(q2_k, 256)
XI_RMSNORM_MATMUL(q3_k, 256)
XI_RMSNORM_MATMUL(q4_k, 256)
XI_RMSNORM_MATMUL(q5_k, 256)
XI_RMSNORM_MATMUL(q6_k, 256)
XI_RMSNORM_MATMUL(iq4_nl, 32)
XI_RMSNORM_MATMUL(iq4_xs, 256)
XI_RMSNORM_MATMUL(bf16, 0)
XI_RMSNORM_MATMUL(q8_0_r8, 32)
XI_RMSNORM_MATMUL(q4_0_r8, 32)
XI_RMSNORM_MATMUL(q4_1_r8, 32)
XI_RMSNORM_MATMUL(q5_0_r8, 32)
XI_RMSNORM_MATMUL(q5_1_r8, 32)
XI_RMSNORM_MATMUL_SWIGLU(f32, 0)
XI_RMSNORM_MATMUL_SWIGLU(f16, 0)
XI_RMSNORM_MATMUL_SWIGLU(q8_0, 32)
XI_RMSNORM_MATMUL_SWIGLU(q4_0, 32)
XI_RMSNORM_MATMUL_SWIGLU(q4_1, 32)
XI_RMSNORM_MATMUL_SWIGLU(q5_0, 32)
XI_RMSNORM_MATMUL_SWIGLU(q5_1, 32)
XI_RMSNORM_MATMUL_SWIGLU(q2_k, 256)
XI_RMSNORM_MATMUL_SWIGLU(q3_k, 256)
XI_RMSNORM_MATMUL_SWIGLU(q4_k, 256)
XI_RMSNORM_MATMUL_SWIGLU(q5_k, 256)
XI_RMSNORM_MATMUL_SWIGLU(q6_k, 256)
XI_RMSNORM_MATMUL_SWIGLU(iq4_nl, 32)
XI_RMSNORM_MATMUL_SWIGLU(iq4_xs, 256)
XI_RMSNORM_MATMUL_SWIGLU(bf16, 0)
XI_RMSNORM_MATMUL_SWIGLU(q8_0_r8, 32)
XI_RMSNORM_MATMUL_SWIGLU(q4_0_r8, 32)
XI_RMSNORM_MATMUL_SWIGLU(q4_1_r8, 32)
XI_RMSNORM_MATMUL_SWIGLU(q5_0_r8, 32)
XI_RMSNORM_MATMUL_SWIGLU(q5_1_r8, 32)
