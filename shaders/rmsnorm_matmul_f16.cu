#include "xi_mvc.cuh"
// w (N, K) f16, x (T, K) f32, norm (K) f32 -> y (T, N) f32 RW: matmul of rmsnorm(x) * norm (xi_mvc.cuh).
extern "C" __global__ void __launch_bounds__(256, 4) rmsnorm_matmul_f16(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                                                  const float *__restrict__ norm, float *__restrict__ y,
                                                                  xi_rmsnorm_matmul_c c) {
    const XiMvcArgs a{w, x, norm, y, c.T, c.N, c.K, c.accumulate, c.eps};
    xi_mvc_kernel<XI_F16, true, false>(a);
}
