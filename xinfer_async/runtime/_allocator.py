"""``CachingAllocator``: freed device blocks kept by size class for reuse.

A block enters the cache only from ``Device._reap``, i.e. after every fence of every queue that
used its buffer has completed, so a reused block is never still read or written by the device.
Size classes: four per power of two (at most 25% slack), 256-byte granularity below 4 KiB.
"""

from __future__ import annotations

from ..hal import Backend, DeviceOutOfMemoryError


def size_class(nbytes: int) -> int:
    """The block size an allocation of ``nbytes`` gets (>= nbytes, a multiple of 256)."""
    n = max(256, -(-nbytes // 256) * 256)
    if n <= 4096:
        return n
    step = 1 << max(8, n.bit_length() - 3)
    return -(-n // step) * step


class CachingAllocator:
    """Backend allocations with a cache of completed frees.

    Args:
        backend: supplies ``alloc``/``free``.
        limit_bytes: the most bytes the cache holds; larger frees go back to the backend.

    Attributes:
        cached_bytes, hits, misses: for ``statistics``.
    """

    def __init__(self, backend: Backend, limit_bytes: int = 1 << 30):
        self.backend = backend
        self.limit_bytes = limit_bytes
        self._blocks: dict[int, list[int]] = {}
        self.cached_bytes = 0
        self.hits = 0
        self.misses = 0

    def alloc(self, nbytes: int) -> int:
        """An address of a block of ``size_class(nbytes)`` bytes.

        Raises:
            DeviceOutOfMemoryError: no room even after returning the cache to the backend.
        """
        size = size_class(nbytes)
        blocks = self._blocks.get(size)
        if blocks:
            self.hits += 1
            self.cached_bytes -= size
            return blocks.pop()
        self.misses += 1
        try:
            return self.backend.alloc(size)
        except DeviceOutOfMemoryError:
            if not self.cached_bytes:
                raise
            self.release_all()
            return self.backend.alloc(size)

    def free(self, address: int, nbytes: int) -> None:
        """Take back a block whose every use has completed."""
        size = size_class(nbytes)
        if self.cached_bytes + size > self.limit_bytes:
            self.backend.free(address)
            return
        self._blocks.setdefault(size, []).append(address)
        self.cached_bytes += size

    def release_all(self) -> None:
        """Return every cached block to the backend."""
        for blocks in self._blocks.values():
            for address in blocks:
                self.backend.free(address)
        self._blocks.clear()
        self.cached_bytes = 0
