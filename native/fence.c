/* xi_fence_signal: the CUDA host callback (CUhostFn) and what the cpu queue
 * thread calls after each command list. Runs no Python, never blocks. */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>
#include "xinfer_native.h"

/* *p = max(*p, v), atomically; p may be NULL */
static void store_max(int64_t *p, int64_t v)
{
    if (!p) return;
    int64_t old = __atomic_load_n(p, __ATOMIC_ACQUIRE);
    while (old < v &&
           !__atomic_compare_exchange_n(p, &old, v, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        /* old reloaded by the failed CAS */
    }
}

void xi_fence_signal(void *p)
{
    xi_signal *s = (xi_signal *)p;
    if (!s) return;
    /* Read every field before the stores: once the value is in *signalled the owner may release
     * the struct, so it must not be touched after that. */
    const int fd = s->fd;
    const int64_t value = s->value;
    int64_t *completed = s->completed, *signalled = s->signalled;
    store_max(completed, value);
    /* the release point: the owner frees the struct once *signalled reaches its value */
    store_max(signalled, value);
    if (fd >= 0) {
        uint64_t one = 1;
        ssize_t r;
        do {
            r = write(fd, &one, sizeof one);
        } while (r < 0 && errno == EINTR);
        /* EAGAIN (counter at its maximum) means the fd is readable anyway. */
    }
}
