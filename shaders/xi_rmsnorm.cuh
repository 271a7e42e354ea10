#pragma once
// The row body of rmsnorm.cu and rmsnorm_add.cu (and the inverse norm of rmsnorm_f16.cu): one block of 256 threads a row of x (dim) f32,
// inv = 1 / sqrt(mean(x^2) + eps) with the sum of squares in f32 (per-thread partial sums, then a tree
// reduction); out = x * inv * w stored into y (ADD false) or added to it (ADD true: a post-norm before
// the residual add). 16-byte aligned rows with dim % 4 == 0 go through float4s (a thread's partial sum
// adds a float4's four squares left to right), others element by element.
#include "xi_common.cuh"

// inv = 1 / sqrt(mean(x^2) + eps) of a row xr (dim) f32, the whole block taking part: per-thread partial
// sums (float4s, a float4's four squares added left to right, where vec: the caller's alignment test),
// then xi_block_sum's tree. The one copy of this sum for rmsnorm, rmsnorm_add and rmsnorm_f16.
__device__ __forceinline__ float xi_rmsnorm_inv(const float *__restrict__ xr, int dim, float eps, bool vec,
                                                float *scratch) {
    float ss = 0.0f;
    if (vec) {
        for (int i = threadIdx.x; i < (dim >> 2); i += blockDim.x) {
            const float4 v = reinterpret_cast<const float4 *>(xr)[i];
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
    } else {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
    }
    return 1.0f / sqrtf(xi_block_sum(ss, scratch) / (float)dim + eps);
}

template <bool ADD>
__device__ __forceinline__ void xi_rmsnorm_row(const float *__restrict__ xr, const float *__restrict__ w,
                                               float *__restrict__ yr, int dim, float eps, float *scratch) {
    const bool vec = ((((size_t_)xr) | ((size_t_)yr) | ((size_t_)w)) & 15) == 0 && (dim & 3) == 0;
    const float inv = xi_rmsnorm_inv(xr, dim, eps, vec, scratch);
    if (vec) {
        const int n4 = dim >> 2;
        for (int i = threadIdx.x; i < n4; i += blockDim.x) {
            const float4 v = reinterpret_cast<const float4 *>(xr)[i], g = reinterpret_cast<const float4 *>(w)[i];
            float4 o = make_float4(v.x * inv * g.x, v.y * inv * g.y, v.z * inv * g.z, v.w * inv * g.w);
            if (ADD) {
                const float4 y0 = reinterpret_cast<const float4 *>(yr)[i];
                o = make_float4(y0.x + o.x, y0.y + o.y, y0.z + o.z, y0.w + o.w);
            }
            reinterpret_cast<float4 *>(yr)[i] = o;
        }
    } else {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) {
            const float o = xr[i] * inv * w[i];
            yr[i] = ADD ? yr[i] + o : o;
        }
    }
}
