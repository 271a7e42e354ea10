"""Page-locked host memory of the cuda backend: the staging arrays of ``upload``/``download``
commands (``Backend.host_array``) and the mapped fence counters (``Backend.fence_counter``).

Staging arrays come from a pool of ``cuMemHostAlloc`` blocks in power-of-two size classes (4 KiB
up); a block goes back to its class's free list when the numpy array over it (and every view of
it) is garbage-collected (``weakref.finalize`` on the base array), so a steady decode loop
allocates no pinned memory after its first steps.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from ._driver import CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, check, ffi

_MIN_CLASS = 12  # 4 KiB
#: free blocks kept per size class; more are returned to the driver
_KEEP_PER_CLASS = 8


class PinnedPool:
    """Size-classed pool of page-locked host blocks (``cuMemHostAlloc``, portable).

    Args:
        lib: the driver library (``_driver.load()``); the caller makes the context current.
    """

    def __init__(self, lib):
        self._lib = lib
        self._free: dict[int, list[int]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.allocated_nbytes = 0  # pinned bytes held from the driver, free or in use

    def array(self, nbytes: int) -> np.ndarray:
        """A writable ``uint8`` array of ``nbytes`` over pinned memory (``nbytes`` may be 0).

        Raises:
            DeviceOutOfMemoryError: ``cuMemHostAlloc`` found no room.
        """
        if nbytes <= 0:
            return np.empty(0, np.uint8)
        cls = max(_MIN_CLASS, (nbytes - 1).bit_length())
        with self._lock:
            free = self._free.get(cls)
            ptr = free.pop() if free else None
        if ptr is None:
            p = ffi.new("void **")
            check(self._lib.cuMemHostAlloc(p, 1 << cls, CU_MEMHOSTALLOC_PORTABLE), f"cuMemHostAlloc({1 << cls})")
            ptr = int(ffi.cast("uintptr_t", p[0]))
            self.allocated_nbytes += 1 << cls
        base = np.frombuffer(ffi.buffer(ffi.cast("char *", ptr), 1 << cls), np.uint8)
        weakref.finalize(base, self._recycle, cls, ptr)
        return base[:nbytes]

    def _recycle(self, cls: int, ptr: int) -> None:
        # runs on whichever thread drops the last reference: no driver call unless over the cap.
        # After close() nothing is freed: the context's release frees the memory, and the same
        # address may already belong to a later context (freeing it would unmap that one's memory)
        with self._lock:
            if self._closed:
                return
            free = self._free.setdefault(cls, [])
            if len(free) < _KEEP_PER_CLASS:
                free.append(ptr)
                return
        self._lib.cuMemFreeHost(ffi.cast("void *", ptr))  # status ignored: context may be gone
        self.allocated_nbytes -= 1 << cls

    def close(self) -> None:
        """Free every pooled block; blocks still in use are freed when their arrays go."""
        with self._lock:
            self._closed = True
            blocks = [(c, p) for c, ps in self._free.items() for p in ps]
            self._free.clear()
        for cls, ptr in blocks:
            self._lib.cuMemFreeHost(ffi.cast("void *", ptr))
            self.allocated_nbytes -= 1 << cls


class MappedCounter:
    """One zero-initialized ``int64`` in mapped pinned memory (``CU_MEMHOSTALLOC_DEVICEMAP``):
    the host writes it (``xi_fence_signal``), the GPU reads it at ``device_ptr``
    (``cuStreamWaitValue64``).

    Attributes:
        host_ptr: its host address (``int``).
        device_ptr: its device address (``CUdeviceptr`` as ``int``).
    """

    _SIZE = 64  # a cache line of its own

    def __init__(self, lib):
        self._lib = lib
        p = ffi.new("void **")
        check(lib.cuMemHostAlloc(p, self._SIZE, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
              "cuMemHostAlloc(DEVICEMAP)")
        self.host_ptr = int(ffi.cast("uintptr_t", p[0]))
        ffi.memmove(p[0], b"\0" * self._SIZE, self._SIZE)
        d = ffi.new("CUdeviceptr *")
        try:
            check(lib.cuMemHostGetDevicePointer_v2(d, p[0], 0), "cuMemHostGetDevicePointer")
        except BaseException:
            lib.cuMemFreeHost(p[0])
            raise
        self.device_ptr = int(d[0])
        self._finalizer = weakref.finalize(self, lib.cuMemFreeHost, p[0])

    def free(self) -> None:
        """Free it now (``CUDABackend.close``, before the context goes): a finalizer running later
        could free the same address reused by a later context."""
        self._finalizer()

    def native_pointer(self):
        """The counter as an ``int64_t *`` of ``xinfer_async._native``'s ffi."""
        from ... import _native

        return _native.ffi.cast("int64_t *", self.host_ptr)

    @property
    def value(self) -> int:
        return int(ffi.cast("int64_t *", self.host_ptr)[0])
