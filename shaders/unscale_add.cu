#include "xi_common.cuh"
// src (rows, n) f32, inv_scale (rows) f32 -> y (rows, y_stride):
// y[r*y_stride+i] = (accumulate ? y[r*y_stride+i] : 0) + src[r*n+i] * inv_scale[r]. Grid-stride; where
// rows * n < 2^31 the index arithmetic is 32-bit, and 4 elements a thread (float4) where n and y_stride
// are multiples of 4 and src, y 16-byte aligned (the same operations on each element: the same bits).
extern "C" __global__ void __launch_bounds__(256) unscale_add(const float *__restrict__ src,
                                                              const float *__restrict__ inv_scale, float *__restrict__ y,
                                                              xi_unscale_add_c c) {
    xi_grid_begin();
    const long long total = (long long)c.rows * c.n;
    if (total < (1LL << 31)) {
        const int n = c.n, stride = gridDim.x * blockDim.x;
        if (((n | c.y_stride) & 3) == 0 && ((((size_t_)src) | ((size_t_)y)) & 15) == 0) {
            const int n4 = n >> 2, tot4 = (int)(total >> 2);
            for (int q = blockIdx.x * blockDim.x + threadIdx.x; q < tot4; q += stride) {
                const int r = q / n4, i = (q - r * n4) << 2;
                const float s = inv_scale[r];
                const float4 v = reinterpret_cast<const float4 *>(src)[q];
                float4 *o = reinterpret_cast<float4 *>(y + (size_t_)r * c.y_stride + i);
                float4 out = make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
                if (c.accumulate) {
                    const float4 a = *o;
                    out = make_float4(a.x + out.x, a.y + out.y, a.z + out.z, a.w + out.w);
                }
                *o = out;
            }
        } else {
            for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < (int)total; idx += stride) {
                const int r = idx / n, i = idx - r * n;
                const float v = src[idx] * inv_scale[r];
                float *o = y + (size_t_)r * c.y_stride + i;
                *o = c.accumulate ? *o + v : v;
            }
        }
        return;
    }
    XI_FOR(idx, total) {
        const long long r = idx / c.n, i = idx % c.n;
        const float v = src[idx] * inv_scale[r];
        float *o = y + r * c.y_stride + i;
        *o = c.accumulate ? *o + v : v;
    }
}
