/* xinfer_async native (cpu backend) ABI: see native/KERNELS.md.
 *
 * This header is also the cffi cdef: native/build_native.py inlines xi_kernels.h and
 * strips every line starting with '#', so keep the declarations below plain C that
 * cffi parses (no macros used inside declarations).
 */
#ifndef XINFER_NATIVE_H
#define XINFER_NATIVE_H
#include <stdint.h>

enum { XI_OK = 0, XI_EINVAL = 1, XI_ENOMEM = 2 };

/* ---- fence ------------------------------------------------------------ */
typedef struct {
    int fd;               /* eventfd, written with 1 after the stores */
    int64_t *completed;   /* *completed = max(*completed, value), atomically */
    int64_t value;
    int64_t *signalled;   /* then *signalled = max(*signalled, value): from here on the struct is
                             not touched, so its owner may free it (NULL: no such store) */
} xi_signal;

void xi_fence_signal(void *s);

/* ---- replay: a captured kernel list run by one native call (native/kernels/team.c) ------
 * One op per kernel dispatch, in order: kernel (xi_k_NAME), its bindings b and constants c, and
 * share = xi_share_of("NAME") (its share form, NULL when it has none). xi_replay_prepare plans
 * the list once (ops must outlive the plan; NULL when out of memory; xi_replay_free releases it).
 * xi_replay runs it: nthreads < 0: each kernel called alone in order (each opens its own OpenMP
 * region); else in one OpenMP parallel region of nthreads threads (0: omp_get_max_threads(); 1: no
 * region): share forms split over the team, other kernels whole on one thread, each kernel after
 * the previous one has completed. Returns 0, or the first failing kernel's status with its
 * op index in *failed (failed may be NULL); no op after a failing one runs. */
typedef struct {
    int (*kernel)(void *const *b, const void *c);
    void *const *b;
    const void *c;
    void *share;
} xi_op;

void *xi_replay_prepare(const xi_op *ops, int n);
void xi_replay_free(void *plan);
int xi_replay(const void *plan, int nthreads, int *failed);
/* the share form registered for kernel NAME (xi_k_NAME), or NULL */
void *xi_share_of(const char *name);

/* ---- kernels: constants structs xi_NAME_c and int xi_k_NAME(b, c) -------
 * generated from the declarations in xinfer_async/ops/_kernels.py (build_native.py inlines this
 * include into the cdef) */
#include "xi_kernels.h"

/* ---- the cpu backend's load-time weight repack --------------------------
 * src (N, K) GGUF blocks of q8_0 / q4_0 / q4_1 / q5_0 / q5_1 -> dst in the row-interleaved r8 layout (the same
 * byte count; native/kernels/q8dot.c describes it), which the kernels of the *_r8 types read.
 * XI_EINVAL: N < 0, K < 0 or not a multiple of 32, a NULL pointer, or src == dst. */
int xi_repack_q8_0_r8(const void *src, void *dst, int64_t N, int64_t K);
int xi_repack_q4_0_r8(const void *src, void *dst, int64_t N, int64_t K);
int xi_repack_q4_1_r8(const void *src, void *dst, int64_t N, int64_t K);
int xi_repack_q5_0_r8(const void *src, void *dst, int64_t N, int64_t K);
int xi_repack_q5_1_r8(const void *src, void *dst, int64_t N, int64_t K);

/* ---- the int8 dot products' instruction-set paths (native/kernels/q8isa.c, xi_q8.h) ------------
 * The quantized matmuls (q8_0, q4_0, q4_1, q5_0, q5_1, their *_r8 layouts, q4_k, q5_k, q6_k) run
 * their integer inner products on one of these paths, all giving the same bits: isa 0 "scalar"
 * (portable C), 1 "avx2" (vpmaddubsw / vpmaddwd), 2 "avxvnni" (VEX vpdpbusd / vpdpwssd), 3
 * "avx512vnni" (EVEX vpdpbusd, AVX512VL + VNNI; 512-bit K-quant tiles). A build holds every path
 * its compiler can target (GCC 11 or later on x86: all four), whatever -march says.
 * xi_isa_name: the path's name, NULL when isa is not 0..3. xi_isa_compiled: 1 when this build holds
 * it. xi_isa_supported: 1 when held and this cpu (and OS) runs it. xi_isa_select: isa -1 picks the
 * best supported one (the default at first use), else forces isa: XI_OK, or XI_EINVAL (not held or
 * not supported; nothing changes). xi_isa_selected: the path the kernels run now. */
const char *xi_isa_name(int isa);
int xi_isa_compiled(int isa);
int xi_isa_supported(int isa);
int xi_isa_select(int isa);
int xi_isa_selected(void);

#endif
