#include "xi_common.cuh"
// x (rows, n) f32 -> out (rows) i32: index of the largest value, the lowest index on ties (NaN ignored).
// One block of 1024 per row; float4 loads, four in flight a thread, where the row is 16-byte aligned.
__device__ __forceinline__ void xi_better(float &v, int &i, float v2, int i2) {
    if (v2 > v || (v2 == v && i2 < i)) { v = v2; i = i2; }
}
extern "C" __global__ void __launch_bounds__(1024) argmax(const float *__restrict__ x, int32_t *__restrict__ out, xi_argmax_c c) {
    xi_grid_begin();
    __shared__ float sv[32];
    __shared__ int si[32];
    const int r = blockIdx.x;
    if (r >= c.rows) return;
    const float *xr = x + (size_t_)r * c.n;
    float v = -XI_INF;
    int idx = 0x7fffffff;
    int i0 = 0;
    if ((((size_t_)xr) & 15) == 0) {
        const int n4 = c.n >> 2, step = blockDim.x;
        const float4 *x4 = reinterpret_cast<const float4 *>(xr);
        int j = threadIdx.x;
        for (; j + 3 * step < n4; j += 4 * step) {
            float4 u[4];
#pragma unroll
            for (int k = 0; k < 4; k++) u[k] = __ldg(x4 + j + k * step);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int e = 4 * (j + k * step);
                xi_better(v, idx, u[k].x, e); xi_better(v, idx, u[k].y, e + 1);
                xi_better(v, idx, u[k].z, e + 2); xi_better(v, idx, u[k].w, e + 3);
            }
        }
        for (; j < n4; j += step) {
            const float4 u = __ldg(x4 + j);
            xi_better(v, idx, u.x, 4 * j); xi_better(v, idx, u.y, 4 * j + 1);
            xi_better(v, idx, u.z, 4 * j + 2); xi_better(v, idx, u.w, 4 * j + 3);
        }
        i0 = 4 * n4;
    }
    for (int i = i0 + threadIdx.x; i < c.n; i += blockDim.x) xi_better(v, idx, xr[i], i);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
        const int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
        xi_better(v, idx, v2, i2);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { sv[warp] = v; si[warp] = idx; }
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? sv[lane] : -XI_INF;
        idx = lane < (int)(blockDim.x >> 5) ? si[lane] : 0x7fffffff;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
            const int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
            xi_better(v, idx, v2, i2);
        }
        if (lane == 0) out[r] = idx == 0x7fffffff ? 0 : idx;
    }
}
