#include "xi_common.cuh"
// src (T, src_stride) f32 -> cache (ctx, width): cache[pos[t], :] = src[t*src_stride : +width];
// rows with pos outside [0, ctx) skipped. Grid: ceil(T*width/256) blocks of 256.
extern "C" __global__ void kv_store(const float *__restrict__ src, float *__restrict__ cache, const int32_t *__restrict__ pos,
                                    xi_kv_store_c c) {
    xi_grid_begin();
    XI_FOR(idx, (long long)c.T * c.width) {
        const long long t = idx / c.width, i = idx % c.width;
        const int p = pos[t];
        if (p < 0 || p >= c.ctx) continue;
        cache[(long long)p * c.width + i] = src[t * c.src_stride + i];
    }
}
