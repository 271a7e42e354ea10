/* Which instruction-set path the int8 dot products run (xi_q8.h): the registry of the paths this
 * build holds, the cpu check, the selection (xinfer_native.h: xi_isa_*). */
#include <stdatomic.h>
#include <stddef.h>
#include "xi_common.h"
#include "xi_q8.h"

static const xi_q8_paths *xi_q8_table[XI_ISA_COUNT];
static _Atomic int xi_q8_selected = -1; /* -1: not chosen yet (the best supported at first use) */
static const char *const xi_q8_names[XI_ISA_COUNT] = {"scalar", "avx2", "avxvnni", "avx512vnni"};

void xi_q8_register(int isa, const xi_q8_paths *paths)
{
    if (isa >= 0 && isa < XI_ISA_COUNT) xi_q8_table[isa] = paths;
}

/* 1 when this cpu and its OS (the vector state enabled: libgcc's check reads XCR0) run path isa */
static int cpu_runs(int isa)
{
    if (isa == XI_ISA_SCALAR) return 1;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
    switch (isa) {
    case XI_ISA_AVX2:
        return avx2;
    case XI_ISA_AVXVNNI:
#if XI_GCC_X86 >= 11
        return avx2 && __builtin_cpu_supports("avxvnni");
#elif defined(__AVXVNNI__)
        return avx2; /* built only by the -march, which this module's cpu has */
#else
        return 0;
#endif
    case XI_ISA_AVX512VNNI:
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512vnni");
    }
#endif
    return 0;
}

const char *xi_isa_name(int isa)
{
    return isa >= 0 && isa < XI_ISA_COUNT ? xi_q8_names[isa] : NULL;
}

int xi_isa_compiled(int isa)
{
    return isa >= 0 && isa < XI_ISA_COUNT && xi_q8_table[isa] != NULL;
}

int xi_isa_supported(int isa)
{
    return xi_isa_compiled(isa) && cpu_runs(isa);
}

static int best(void)
{
    for (int isa = XI_ISA_COUNT - 1; isa > 0; isa--)
        if (xi_isa_supported(isa)) return isa;
    return XI_ISA_SCALAR;
}

int xi_isa_select(int isa)
{
    if (isa == -1) {
        atomic_store(&xi_q8_selected, best());
        return XI_OK;
    }
    if (!xi_isa_supported(isa)) return XI_EINVAL;
    atomic_store(&xi_q8_selected, isa);
    return XI_OK;
}

int xi_isa_selected(void)
{
    int isa = atomic_load(&xi_q8_selected);
    if (isa < 0) { /* first use: racing threads store the same answer */
        isa = best();
        atomic_store(&xi_q8_selected, isa);
    }
    return isa;
}

const xi_q8_paths *xi_q8_current(void)
{
    return xi_q8_table[xi_isa_selected()];
}
