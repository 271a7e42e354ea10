"""The caching allocator: size classes, reuse only of completed frees, cache release on OOM."""

import pytest

from xinfer_async import DeviceOutOfMemoryError
from xinfer_async.backends.cpu import CPUDevice
from xinfer_async.runtime._allocator import size_class


@pytest.mark.parametrize("n", [1, 255, 256, 257, 4096, 4097, 10_000, 1 << 20, (1 << 20) + 1, 123_456_789])
def test_size_class_bounds(n):
    s = size_class(n)
    assert s >= n and s % 256 == 0
    assert s <= max(256, 1.25 * n + 256)


def test_size_class_is_monotonic():
    sizes = [size_class(n) for n in range(1, 200_000, 97)]
    assert sizes == sorted(sizes)


def test_freed_block_is_reused_for_the_same_class():
    with CPUDevice() as dev:
        a = dev.alloc(1000, "f32")
        addr = a.address
        a.free()  # never used by a submission: released at once
        assert dev.allocator.cached_bytes == size_class(4000)
        b = dev.alloc(990, "f32")  # same size class
        assert b.address == addr and dev.allocator.hits == 1
        c = dev.alloc(5000, "f32")  # another class: a new block
        assert c.address != addr


def test_out_of_memory_returns_the_cache_and_retries():
    with CPUDevice(memory_limit_bytes=1 << 20) as dev:
        a = dev.alloc(600_000 // 4, "f32")
        a.free()  # cached: the backend still counts it
        b = dev.alloc(700_000 // 4, "f32")  # another class; fits only once the cache is returned
        assert b.size_in_bytes == 700_000 and dev.allocator.cached_bytes == 0
        with pytest.raises(DeviceOutOfMemoryError, match="exceeds the memory limit"):
            dev.alloc(800_000 // 4, "f32")
