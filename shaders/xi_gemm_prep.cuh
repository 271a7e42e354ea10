// The operands of the GEMM regime (xinfer_async/llm/_gemm.py): float16 weights and activations for a
// cuBLASLt f16 x f16 -> f32 GEMM, and the epilogues that undo the activations' per-row scale.
//
// Activations: row t of h (the matrix product's f32 input, after the rmsnorm where the kind fuses
// one) is stored as f16(h * s[t]), s[t] the largest power of two <= 1 with max|h[t]| * s[t] <= 2^15
// (XI_F16_ACT_LIMIT); inv_scale[t] = 1 / s[t]. f16 overflows above 65504; a power of two scales
// exactly, so the GEMM's f32 result times inv_scale[t] is the product of the unscaled f16-rounded
// row (the rounding happens at the scaled magnitude). Rows within the limit have s = 1.
#pragma once
#include "xi_quant.cuh"
#include "xi_kquant.cuh"
#include "xi_rmsnorm.cuh"

#define XI_F16_ACT_LIMIT 32768.0f

// f32 -> f16 bits: xi_f2h (xi_common.cuh, cvt.rn.f16.f32: round to nearest even)

// s (a power of two <= 1) for a row whose largest magnitude is amax; NaN: 1; inf: 2^-126
__device__ __forceinline__ float xi_f16_row_scale(float amax) {
    float s = 1.0f;
    for (int e = 0; e < 126 && amax * s > XI_F16_ACT_LIMIT; e++) s *= 0.5f;
    return s;
}

// dst (n) f16 bits = f16(elem(i)): a thread 8 consecutive elements, one 16-byte store (n is a
// multiple of the block size, so of 8); a dst not 16-byte aligned goes an element at a time.
template <typename Elem>
__device__ __forceinline__ void xi_store_f16(uint16_t *__restrict__ dst, long long n, Elem elem) {
    if ((((size_t_)dst) & 15) == 0 && (n & 7) == 0) {
        XI_FOR(j, n >> 3) {
            uint32_t p[4];
#pragma unroll
            for (int q = 0; q < 4; q++)
                p[q] = (uint32_t)xi_f2h(elem(8 * j + 2 * q)) | ((uint32_t)xi_f2h(elem(8 * j + 2 * q + 1)) << 16);
            reinterpret_cast<uint4 *>(dst)[j] = make_uint4(p[0], p[1], p[2], p[3]);
        }
    } else {
        XI_FOR(i, n) dst[i] = xi_f2h(elem(i));
    }
}

// src (n / 32 blocks) TYPE (xi_quant.cuh) -> dst (n) f16 bits: f16(the f32 value dequantize_DT gives)
template <int TYPE>
__device__ __forceinline__ void xi_dequantize_f16(const uint8_t *__restrict__ src, uint16_t *__restrict__ dst,
                                                  xi_dequantize_f16_c c) {
    xi_store_f16(dst, c.n, [&](long long i) { return XiQ<TYPE>::elem(src, (int)i); });
}

// the same for the types of xi_kquant.cuh
template <int TYPE>
__device__ __forceinline__ void xk_dequantize_f16(const uint8_t *__restrict__ src, uint16_t *__restrict__ dst,
                                                  xi_dequantize_f16_c c) {
    xi_store_f16(dst, c.n, [&](long long i) { return xk_elem<TYPE>(src, i); });
}

#define XI_DEQUANTIZE_F16(NAME, TYPE)                                                                           \
    extern "C" __global__ void __launch_bounds__(256) dequantize_f16_##NAME(                                   \
        const uint8_t *__restrict__ src, uint16_t *__restrict__ dst, xi_dequantize_f16_c c) {                   \
        xi_grid_begin();                                                                                        \
        xi_dequantize_f16<TYPE>(src, dst, c);                                                                   \
    }
#define XK_DEQUANTIZE_F16(NAME, TYPE)                                                                           \
    extern "C" __global__ void __launch_bounds__(256) dequantize_f16_##NAME(                                   \
        const uint8_t *__restrict__ src, uint16_t *__restrict__ dst, xi_dequantize_f16_c c) {                   \
        xi_grid_begin();                                                                                        \
        xk_dequantize_f16<TYPE>(src, dst, c);                                                                   \
    }

// float4s a thread of xi_rows_f16's register path holds: rows of dim <= 256 * 4 * XI_ROWS_F16_V4 (16384)
#define XI_ROWS_F16_V4 16

// x (rows, dim) f32 [, w (dim) f32] -> y (rows, dim) f16 bits, inv_scale (rows) f32: one block of 256
// threads a row. NORM: h = x * inv * w with inv = 1 / sqrt(mean(x^2) + eps), the f32 operations and
// reduction order of rmsnorm.cu (so h is rmsnorm's output bit for bit); else h = x. NaN elements do not
// count in the max.
// Register path (x, w 16-byte aligned, y 8-byte aligned, dim % 4 == 0, dim <= 4 * 256 * XI_ROWS_F16_V4): each
// thread loads its float4s i = tid, tid + 256, ... of x once, all in flight together, and keeps them (the
// sum of squares in xi_rmsnorm_inv's order and expression, so the same inv), then h, the max and the
// stores from registers. Else h is computed twice from memory (once for the row's max, once to store it).
// The max is exact in any order, so both paths give the same bits.
template <bool NORM>
__device__ __forceinline__ void xi_rows_f16(const float *__restrict__ x, const float *__restrict__ w,
                                            uint16_t *__restrict__ y, float *__restrict__ inv_scale, int rows, int dim,
                                            float eps) {
    __shared__ float scratch[32];
    const int r = blockIdx.x;
    if (r >= rows) return;
    const float *xr = x + (size_t_)r * dim;
    uint16_t *yr = y + (size_t_)r * dim;
    const int n4 = dim >> 2;
    const bool regs = ((((size_t_)xr) | (NORM ? (size_t_)w : (size_t_)0)) & 15) == 0 && (((size_t_)yr) & 7) == 0 &&
                      (dim & 3) == 0 && n4 <= (int)blockDim.x * XI_ROWS_F16_V4;
    if (regs) {
        float4 v[XI_ROWS_F16_V4];
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < XI_ROWS_F16_V4; k++) {
            const int i = threadIdx.x + k * blockDim.x;
            if (i < n4) v[k] = reinterpret_cast<const float4 *>(xr)[i];
        }
        float inv = 1.0f;
        if (NORM) {
#pragma unroll
            for (int k = 0; k < XI_ROWS_F16_V4; k++) {
                if (threadIdx.x + k * (int)blockDim.x < n4) {
                    const float4 u = v[k];
                    ss += u.x * u.x + u.y * u.y + u.z * u.z + u.w * u.w;  // xi_rmsnorm_inv's vec expression
                }
            }
            inv = 1.0f / sqrtf(xi_block_sum(ss, scratch) / (float)dim + eps);
        }
        float amax = 0.0f;
#pragma unroll
        for (int k = 0; k < XI_ROWS_F16_V4; k++) {
            const int i = threadIdx.x + k * blockDim.x;
            if (i < n4) {
                if (NORM) {
                    const float4 g = reinterpret_cast<const float4 *>(w)[i];
                    v[k] = make_float4(v[k].x * inv * g.x, v[k].y * inv * g.y, v[k].z * inv * g.z, v[k].w * inv * g.w);
                }
                amax = fmaxf(fmaxf(fmaxf(fmaxf(amax, fabsf(v[k].x)), fabsf(v[k].y)), fabsf(v[k].z)), fabsf(v[k].w));
            }
        }
        const float s = xi_f16_row_scale(xi_block_max(amax, scratch));
#pragma unroll
        for (int k = 0; k < XI_ROWS_F16_V4; k++) {
            const int i = threadIdx.x + k * blockDim.x;
            if (i < n4) {
                const uint32_t lo = (uint32_t)xi_f2h(v[k].x * s) | ((uint32_t)xi_f2h(v[k].y * s) << 16);
                const uint32_t hi = (uint32_t)xi_f2h(v[k].z * s) | ((uint32_t)xi_f2h(v[k].w * s) << 16);
                reinterpret_cast<uint2 *>(yr)[i] = make_uint2(lo, hi);
            }
        }
        if (threadIdx.x == 0) inv_scale[r] = 1.0f / s;
        return;
    }
    float inv = 1.0f;
    if (NORM) {
        // rmsnorm.cu's sum (xi_rmsnorm.cuh); its vec test without y's alignment (y is f16 here)
        const bool vec = ((((size_t_)xr) | ((size_t_)w)) & 15) == 0 && (dim & 3) == 0;
        inv = xi_rmsnorm_inv(xr, dim, eps, vec, scratch);
    }
    float amax = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const float h = NORM ? xr[i] * inv * w[i] : xr[i];
        amax = fmaxf(amax, fabsf(h));  // fmaxf drops a NaN: a NaN row keeps s = 1 only if all are NaN
    }
    const float s = xi_f16_row_scale(xi_block_max(amax, scratch));
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const float h = NORM ? xr[i] * inv * w[i] : xr[i];
        yr[i] = xi_f2h(h * s);
    }
    if (threadIdx.x == 0) inv_scale[r] = 1.0f / s;
}
