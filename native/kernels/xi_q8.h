/* The int8 dot-product paths of the quantized matmuls (q8dot.c, q8kdot.c): private declarations.
 *
 * The integer inner products and their row drivers are compiled once per instruction-set path, each
 * in its own translation unit (q8isa_scalar.c, q8isa_avx2.c, q8isa_avxvnni.c, q8isa_avx512vnni.c, the
 * way numpy builds its *.dispatch.c sources): the unit sets XI_ISA, turns the path's instructions on
 * with `#pragma GCC target` (so a build on a cpu without VNNI still holds the VNNI path) and includes
 * q8dot_tiles.h and q8kdot_tiles.h, whose static row drivers it registers (a constructor) in a table
 * of this type. q8isa.c picks the table the kernels call: the best path this cpu runs, or the one
 * xi_isa_select forced (XINFER_CPU_ISA, xinfer_async/backends/cpu/_isa.py). Every path computes the
 * same exact integer sums and then the same float operations in the same order: the same bits.
 */
#ifndef XI_Q8_H
#define XI_Q8_H
#include <stdint.h>

#define XI_ISA_SCALAR 0     /* portable C */
#define XI_ISA_AVX2 1       /* AVX2 + F16C: vpmaddubsw / vpmaddwd */
#define XI_ISA_AVXVNNI 2    /* + AVX-VNNI: VEX vpdpbusd / vpdpwssd on 256-bit vectors */
#define XI_ISA_AVX512VNNI 3 /* + AVX-512 F/BW/DQ/VL/VNNI: EVEX vpdpbusd (256-bit), 512-bit K-quant tiles */
#define XI_ISA_COUNT 4

/* q8dot.c's block types: the index of a type's row driver in xi_q8_paths.q8 */
#define XI_KIND_q8_0 0 /* signed codes */
#define XI_KIND_q4_0 1 /* nibbles; -8 applied to the integer sum: sum((n - 8) q) = sum(n q) - 8 sum(q) */
#define XI_KIND_q4_1 2 /* nibbles; min term mw * s */
#define XI_KIND_q5_0 3 /* 5-bit codes; -16 applied to the integer sum */
#define XI_KIND_q5_1 4 /* 5-bit codes; min term mw * s */
/* q8kdot.c's: the index in xi_q8_paths.k */
#define XI_KIND_q4_k 0
#define XI_KIND_q5_k 1
#define XI_KIND_q6_k 2

#define XI_Q8_NCHUNK 16 /* weight rows per chunk (a multiple of XI_Q8_NR) */
#define XI_Q8_NR 8      /* weight rows per tile */
#define XI_Q8_TT 4      /* tokens per tile */
#define XI_QKK 256      /* the K-quants' super-block */
#define XI_K_NCHUNK 16
#define XI_K_TT 4

/* y (T, N) (+)= w (N, K) @ x^T from x quantized per block of 32 (q8dot.c's step 1: codes q (T, K),
 * d, s, qsum (T, K/32)); r8: w in the r8 layout (the N % 8 last rows in the GGUF one) */
typedef void (*xi_q8_rows_fn)(const uint8_t *w, const int8_t *q, const float *d, const float *s,
                              const int32_t *qsum, float *y, long T, long N, long K, int accum, int r8);
/* the same for the K-quants from x quantized per super-block (q8kdot.c: q (T, K), d (T, K/256),
 * bs (T, K/16)) */
typedef void (*xi_k_rows_fn)(const uint8_t *w, const int8_t *q, const float *d, const int32_t *bs, float *y,
                             long T, long N, long K, int accum);

typedef struct {
    xi_q8_rows_fn q8[5]; /* by XI_KIND_q8_0 .. XI_KIND_q5_1 */
    xi_k_rows_fn k[3];   /* by XI_KIND_q4_k .. XI_KIND_q6_k */
} xi_q8_paths;

/* called by each path's unit at load (a constructor), isa one of XI_ISA_* */
void xi_q8_register(int isa, const xi_q8_paths *paths) __attribute__((visibility("hidden")));
/* the selected path's table (never NULL: the scalar path is always built) */
const xi_q8_paths *xi_q8_current(void) __attribute__((visibility("hidden")));

#define XI_Q8_REGISTER(ISA)                                                          \
static const xi_q8_paths xi_q8_paths_here = {                                        \
    {q8_rows_q8_0, q8_rows_q4_0, q8_rows_q4_1, q8_rows_q5_0, q8_rows_q5_1},          \
    {k_rows_q4_k, k_rows_q5_k, k_rows_q6_k}};                                        \
static void __attribute__((constructor)) xi_q8_register_here(void) { xi_q8_register((ISA), &xi_q8_paths_here); }

/* `#pragma GCC target` turns a path's instructions on in its unit and defines their macros (GCC);
 * elsewhere (clang, other architectures) a path is built only where the -march target has it */
#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#define XI_GCC_X86 __GNUC__ /* the major version: avx512vnni targets since GCC 8, avxvnni since 11 */
#else
#define XI_GCC_X86 0
#endif

#endif
