/* The AVX-VNNI path of the int8 dot products (xi_q8.h): VEX vpdpbusd / vpdpwssd on 256-bit vectors
 * (Alder Lake and later cores, Sapphire Rapids, Zen 5). */
#include "xi_q8.h"
#if XI_GCC_X86 >= 11
#pragma GCC target("avx2,f16c,fma,avxvnni,no-avx512f") /* VEX only, as on a client core */
#endif
#if defined(__AVX2__) && defined(__F16C__) && defined(__AVXVNNI__)
#define XI_ISA XI_ISA_AVXVNNI
#include "q8dot_tiles.h"
#include "q8kdot_tiles.h"
XI_Q8_REGISTER(XI_ISA_AVXVNNI)
#endif
