#include "xi_quant.cuh"
// table (vocab, dim) f32, ids (T) i32 -> out (T, dim) f32 (see xi_quant.cuh).
extern "C" __global__ void __launch_bounds__(256) get_rows_f32(const uint8_t *__restrict__ table, const int32_t *__restrict__ ids,
                                                              float *__restrict__ out, xi_get_rows_c c) {
    xi_grid_begin();
    xi_get_rows<XI_F32>(table, ids, out, c);
}
