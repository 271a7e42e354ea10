#include "xi_quantize.cuh"
// x (T, K) f32, norm (K) f32 -> xq of h = rmsnorm(x) * norm: codes int8 (T, K), then (d, s) f32 pairs
// (T, K / 32) (xi_quantize.cuh; h as `_pq` computes it).
extern "C" __global__ void __launch_bounds__(256) rmsnorm_quantize_q8_1(const float *__restrict__ x,
                                                                        const float *__restrict__ norm,
                                                                        uint8_t *__restrict__ xq,
                                                                        xi_rmsnorm_quantize_q8_1_c c) {
    xi_quantize_q8_1<true>(x, norm, xq, c.T, c.K, c.eps);
}
