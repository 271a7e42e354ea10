#include "xi_quant.cuh"
// src (n / 32 blocks) q8_0 -> dst (n) f32 (see xi_quant.cuh).
extern "C" __global__ void __launch_bounds__(256) dequantize_q8_0(const uint8_t *__restrict__ src, float *__restrict__ dst,
                                                                xi_dequantize_c c) {
    xi_grid_begin();
    xi_dequantize<XI_Q8_0>(src, dst, c);
}
