/* The AVX2 path of the int8 dot products (xi_q8.h): vpmaddubsw / vpmaddwd, F16C scales. */
#include "xi_q8.h"
#if XI_GCC_X86
#pragma GCC target("avx2,f16c,fma,no-avx512f") /* no AVX-512 even where -march has it */
#endif
#if defined(__AVX2__) && defined(__F16C__)
#define XI_ISA XI_ISA_AVX2
#include "q8dot_tiles.h"
#include "q8kdot_tiles.h"
XI_Q8_REGISTER(XI_ISA_AVX2)
#endif
