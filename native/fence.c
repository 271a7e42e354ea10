/* xi_fence_signal: the CUDA host callback (CUhostFn) and what the cpu queue
 * thread calls after each command list. Runs no Python, never blocks. */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>
#include "xinfer_native.h"

void xi_fence_signal(void *p)
{
    xi_signal *s = (xi_signal *)p;
    if (!s) return;
    /* Read every field before the store: once a waiter sees the value it may release the
     * signal struct, so the struct must not be touched after the store. */
    const int fd = s->fd;
    const int64_t value = s->value;
    int64_t *completed = s->completed;
    if (completed) {
        int64_t old = __atomic_load_n(completed, __ATOMIC_ACQUIRE);
        while (old < value &&
               !__atomic_compare_exchange_n(completed, &old, value, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            /* old reloaded by the failed CAS */
        }
    }
    if (fd >= 0) {
        uint64_t one = 1;
        ssize_t r;
        do {
            r = write(fd, &one, sizeof one);
        } while (r < 0 && errno == EINTR);
        /* EAGAIN (counter at its maximum) means the fd is readable anyway. */
    }
}
