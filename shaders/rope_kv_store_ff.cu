#include "xi_rope.cuh"
// rope_kv_store_ff: rope_kv_store (xi_rope.cuh's rope_kv_store_body) with pair i's angle divided by
// freq_factors[i] (head_dim/2 f32: llama.cpp's rope freq_factors, Llama 3 rope scaling).
extern "C" __global__ void __launch_bounds__(128) rope_kv_store_ff(float *__restrict__ qkv, const int32_t *__restrict__ pos,
                                                                   const int32_t *__restrict__ row, float *__restrict__ k_cache,
                                                                   float *__restrict__ v_cache,
                                                                   const float *__restrict__ freq_factors,
                                                                   xi_rope_kv_store_c c) {
    xi_grid_begin();
    rope_kv_store_body(qkv, pos, row, k_cache, v_cache, freq_factors, c);
}
