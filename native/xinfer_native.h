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

/* ---- kernels: constants structs xi_NAME_c and int xi_k_NAME(b, c) -------
 * generated from the declarations in xinfer_async/ops/_kernels.py (build_native.py inlines this
 * include into the cdef) */
#include "xi_kernels.h"

#endif
