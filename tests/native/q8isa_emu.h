/* Tests only (tests/test_q8isa.py): the VNNI paths' instructions emulated with exact AVX2 operations,
 * so that a cpu without VNNI runs the VNNI paths' code (native/kernels/q8dot_tiles.h, q8kdot_tiles.h
 * with XI_ISA = XI_ISA_AVXVNNI or XI_ISA_AVX512VNNI) and the tests compare it with the numpy model.
 * A unit includes this, defines XI_ISA, includes the two tile headers and registers the table in the
 * slot this cpu runs (XI_EMU_SLOT_*, -D flags of the test build). 512-bit vectors: pairs of 256-bit ones. */
#pragma GCC target("avx2,f16c,fma")
#include <immintrin.h>
#include "xi_q8.h"

/* calls of the emulated instructions: [0] vpdpbusd, [1] vpdpwssd (256-bit), [2] 512-bit vpdpwssd (a
 * unit names its own array XI_EMU_CALLS: the test reads it to see which code ran) */
long XI_EMU_CALLS[3];
#define XI_EMU_COUNT(i) __atomic_fetch_add(&XI_EMU_CALLS[i], 1, __ATOMIC_RELAXED)

/* vpdpbusd: acc + the sums of 4 products of unsigned x signed bytes, each int32 lane, exact: the
 * bytes widened to int16 (even and odd bytes apart) and vpmaddwd's exact int32 pair sums */
static inline __m256i emu_dpbusd(__m256i acc, __m256i u, __m256i s)
{
    XI_EMU_COUNT(0);
    const __m256i lo8 = _mm256_set1_epi16(0x00ff);
    const __m256i ue = _mm256_and_si256(u, lo8), uo = _mm256_srli_epi16(u, 8);
    const __m256i se = _mm256_srai_epi16(_mm256_slli_epi16(s, 8), 8), so = _mm256_srai_epi16(s, 8);
    return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(ue, se), _mm256_madd_epi16(uo, so)));
}
/* vpdpwssd: acc + the sums of 2 products of int16, each int32 lane */
static inline __m256i emu_dpwssd(__m256i acc, __m256i a, __m256i b)
{
    XI_EMU_COUNT(1);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
}
#undef _mm256_dpbusd_avx_epi32
#undef _mm256_dpwssd_avx_epi32
#undef _mm256_dpbusd_epi32
#define _mm256_dpbusd_avx_epi32 emu_dpbusd
#define _mm256_dpwssd_avx_epi32 emu_dpwssd
#define _mm256_dpbusd_epi32 emu_dpbusd

typedef struct { __m256i lo, hi; } emu_m512i;
#define __m512i emu_m512i
static inline emu_m512i emu512_castsi256_si512(__m256i a) { return (emu_m512i){a, _mm256_setzero_si256()}; }
static inline emu_m512i emu512_inserti64x4(emu_m512i a, __m256i b, int i)
{
    if (i) a.hi = b;
    else a.lo = b;
    return a;
}
static inline emu_m512i emu512_setzero_si512(void) { return (emu_m512i){_mm256_setzero_si256(), _mm256_setzero_si256()}; }
static inline emu_m512i emu512_loadu_si512(const void *p)
{
    return (emu_m512i){_mm256_loadu_si256((const __m256i *)p), _mm256_loadu_si256((const __m256i *)p + 1)};
}
static inline emu_m512i emu512_maddubs_epi16(emu_m512i a, emu_m512i b)
{
    return (emu_m512i){_mm256_maddubs_epi16(a.lo, b.lo), _mm256_maddubs_epi16(a.hi, b.hi)};
}
static inline emu_m512i emu512_dpwssd_epi32(emu_m512i acc, emu_m512i a, emu_m512i b)
{
    XI_EMU_COUNT(2);
    return (emu_m512i){_mm256_add_epi32(acc.lo, _mm256_madd_epi16(a.lo, b.lo)),
                       _mm256_add_epi32(acc.hi, _mm256_madd_epi16(a.hi, b.hi))};
}
static inline emu_m512i emu512_add_epi32(emu_m512i a, emu_m512i b)
{
    return (emu_m512i){_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi)};
}
static inline int emu512_reduce_add_epi32(emu_m512i a)
{
    int32_t v[8];
    _mm256_storeu_si256((__m256i *)v, _mm256_add_epi32(a.lo, a.hi));
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}
#define _mm512_castsi256_si512 emu512_castsi256_si512
#define _mm512_inserti64x4 emu512_inserti64x4
#define _mm512_setzero_si512 emu512_setzero_si512
#define _mm512_loadu_si512 emu512_loadu_si512
#define _mm512_maddubs_epi16 emu512_maddubs_epi16
#define _mm512_dpwssd_epi32 emu512_dpwssd_epi32
#define _mm512_add_epi32 emu512_add_epi32
#define _mm512_reduce_add_epi32 emu512_reduce_add_epi32
