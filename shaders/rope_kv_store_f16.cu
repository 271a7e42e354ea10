#include "xi_rope.cuh"
// rope_kv_store_f16: rope_kv_store into an f16 cache (IEEE half bits, rounded to nearest even):
// xi_rope.cuh's rope_kv_store_body without frequency factors (see there).
extern "C" __global__ void __launch_bounds__(128) rope_kv_store_f16(float *__restrict__ qkv, const int32_t *__restrict__ pos,
                                                                    const int32_t *__restrict__ row,
                                                                    uint16_t *__restrict__ k_cache,
                                                                    uint16_t *__restrict__ v_cache, xi_rope_kv_store_c c) {
    xi_grid_begin();
    rope_kv_store_body(qkv, pos, row, k_cache, v_cache, nullptr, c);
}
