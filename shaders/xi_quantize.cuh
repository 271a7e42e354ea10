// The tokens of the integer decode kernel quantized once, in a kernel of their own (the model runs it
// before the qmatmul entries of xi_mvq.cuh where Backend.quantized_activations says so).
#pragma once
#include "xi_mvq.cuh"

// quantize_q8_1 and rmsnorm_quantize_q8_1 (quantize_q8_1.cu, rmsnorm_quantize_q8_1.cu): x (T, K) f32 (NORM: h = (x * inv) *
// norm, inv = xi_mvq_inv's CTA of 256 threads, tests/_mmq_model.py rmsnorm_inv_cta) -> xq: codes
// int8 (T, K) then (d, s) f32 pairs (T, K / 32) at byte T K, each block of 32 as xi_mmq_quant
// quantizes it (amax / 127, codes rounded half away from zero, s = d * sum(codes)): the bits `_pq`
// computes for its tokens in shared memory. Grid (ceil(K / 32 / 128), T): a CTA 128 blocks of a
// token (each CTA of a NORM launch computes the token's inv over the whole row).
template <bool NORM>
__device__ __forceinline__ void xi_quantize_q8_1(const float *x, const float *norm, uint8_t *xq, int T, int K, float eps) {
    xi_grid_begin();
    const int t = blockIdx.y, nb = K >> 5, kb0 = blockIdx.x * 128;
    if (t >= T || kb0 >= nb) return;
    const XiMvcArgs a{nullptr, x, norm, nullptr, T, 0, K, 0, eps};
    __shared__ float inv[1];
    if (NORM) xi_mvq_inv<1>(a, t, 1, inv);
    float2 *ds = reinterpret_cast<float2 *>(xq + (size_t_)T * K) + (size_t_)t * nb + kb0;
    xi_mmq_quant<NORM, 4, true>(a, inv, t, 1, kb0, nb - kb0 < 128 ? nb - kb0 : 128, xq + (size_t_)t * K + 32 * kb0, K, ds,
                                XI_MVQ_WARPS * 32);
}
