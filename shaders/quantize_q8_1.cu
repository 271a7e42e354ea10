#include "xi_quantize.cuh"
// x (T, K) f32 -> xq: codes int8 (T, K), then (d, s) f32 pairs (T, K / 32) (xi_quantize.cuh).
extern "C" __global__ void __launch_bounds__(256) quantize_q8_1(const float *__restrict__ x, uint8_t *__restrict__ xq,
                                                                xi_quantize_q8_1_c c) {
    xi_quantize_q8_1<false>(x, nullptr, xq, c.T, c.K, 0.0f);
}
