#include "xi_rope.cuh"
// rope_kv_store_ff_f16: rope_kv_store_ff into an f16 cache (IEEE half bits, rounded to nearest even).
extern "C" __global__ void __launch_bounds__(128) rope_kv_store_ff_f16(float *__restrict__ qkv,
                                                                       const int32_t *__restrict__ pos,
                                                                       const int32_t *__restrict__ row,
                                                                       uint16_t *__restrict__ k_cache,
                                                                       uint16_t *__restrict__ v_cache,
                                                                       const float *__restrict__ freq_factors,
                                                                       xi_rope_kv_store_c c) {
    xi_grid_begin();
    rope_kv_store_body(qkv, pos, row, k_cache, v_cache, freq_factors, c);
}
