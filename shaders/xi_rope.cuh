// Rotary embedding of one adjacent pair (e[0], e[1]) by pos * theta^(-2i/head_dim), GGUF "normal"
// layout; the angle in f64 (pos * freq reaches thousands of radians). rope.cu and rope_kv_store.cu
// share it, so the fused kernel's values are bit-identical to rope's.
#pragma once
#include "xi_common.cuh"

__device__ __forceinline__ void xi_rope_pair(float *e, int p, int i, int head_dim, float theta) {
    const double ang = (double)p * pow((double)theta, -2.0 * i / (double)head_dim);
    double s, co;
    sincos(ang, &s, &co);
    const float a = e[0], b = e[1];
    e[0] = (float)(a * co - b * s);
    e[1] = (float)(a * s + b * co);
}
