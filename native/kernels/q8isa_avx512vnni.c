/* The AVX-512 VNNI path of the int8 dot products (xi_q8.h): EVEX vpdpbusd on 256-bit vectors (AVX512VL),
 * vpdpwssd on 512-bit ones for the K-quants (Cascade Lake and later Xeons, Ice Lake, Zen 4). */
#include "xi_q8.h"
#if XI_GCC_X86 >= 8
#pragma GCC target("avx2,f16c,fma,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")
#endif
#if defined(__AVX2__) && defined(__F16C__) && defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX512BW__)
#define XI_ISA XI_ISA_AVX512VNNI
#include "q8dot_tiles.h"
#include "q8kdot_tiles.h"
XI_Q8_REGISTER(XI_ISA_AVX512VNNI)
#endif
