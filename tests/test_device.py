"""runtime/_device.py and _open.py: memory, upload/download, bad input, device names."""

import re

import numpy as np
import pytest

import xinfer_async
from xinfer_async import DeviceError, DType, ValidationError, open_device
from xinfer_async._open import cuda_status


def test_alloc_upload_download(devices, rng):
    a = rng.standard_normal((3, 5)).astype(np.float32)
    buf = devices.upload(a)
    assert (buf.shape, buf.dtype, buf.size_in_bytes) == ((3, 5), DType.f32, 60)
    assert isinstance(buf, xinfer_async.Buffer)
    assert devices.download(buf) == a.tobytes()
    np.testing.assert_array_equal(devices.download_numpy(buf), a)
    empty = devices.alloc((2, 0), "f16")
    assert empty.size_in_bytes == 0 and devices.download(empty) == b""


def test_upload_bytes_needs_shape_and_dtype(devices):
    raw = bytes(range(68))  # two q8_0 blocks of 34 bytes
    buf = devices.upload(raw, (2, 32), "q8_0")
    assert devices.download(buf) == raw
    assert devices.download_numpy(buf).dtype == np.uint8
    with pytest.raises(ValueError, match=r"^upload of bytes-like data needs both shape and dtype$"):
        devices.upload(raw)


def test_upload_wrong_dtype(devices):
    with pytest.raises(TypeError, match=r"^data has dtype float32 but dtype=i32; convert it first"):
        devices.upload(np.ones(4, np.float32), (4,), "i32")
    with pytest.raises(TypeError, match=r"dtype=dtype\('float64'\) is not supported; choose one of"):
        devices.upload(np.ones(4))
    with pytest.raises(TypeError, match=r"^data must be a numpy array or bytes-like, got list$"):
        devices.upload([1.0, 2.0], (2,), "f32")
    bf = devices.upload(np.ones(4, np.uint16), (4,), "bf16")  # raw bf16 bits are accepted
    assert bf.dtype is DType.bf16


def test_upload_wrong_shape_or_byte_count(devices):
    with pytest.raises(ValueError, match=r"^data has 16 bytes but shape=\(5,\) dtype=f32 needs 20$"):
        devices.upload(np.ones(4, np.float32), (5,), "f32")
    with pytest.raises(ValueError, match=r"^data has 10 bytes but shape=\(32,\) dtype=q4_0 needs 18$"):
        devices.upload(bytes(10), (32,), "q4_0")


def test_negative_sizes(devices):
    with pytest.raises(ValueError, match=r"^shape=\(-4,\) has a negative dimension$"):
        devices.alloc(-4, "f32")
    buf = devices.alloc(8, "f32")
    with pytest.raises(ValueError, match=r"^view\(offset=-4, nbytes=8\) is outside buffer #\d+ of 32 bytes$"):
        buf.view(-4, 8)
    with pytest.raises(ValueError, match=r"^write of 4 bytes at offset=-1 runs past 32 bytes$"):
        devices.write(buf, b"abcd", offset=-1)


def test_buffer_from_another_device(devices):
    other = open_device("cpu")
    try:
        foreign = other.alloc(4, "f32")
        with pytest.raises(ValueError, match=rf"^buffer is a buffer of device 'cpu', not of '{devices.name}'$"):
            devices.download(foreign)
        ex = devices.executor()
        with pytest.raises(ValueError, match=r"^dst is a buffer of device"):
            ex.fill(foreign, 1.0)
    finally:
        other.close()


def test_freed_buffer(devices):
    buf = devices.alloc(4, "f32")
    buf.free()
    buf.free()  # idempotent
    with pytest.raises(ValidationError, match=r"^buffer: buffer #\d+ was freed \(use after free\)$"):
        devices.download(buf)
    with pytest.raises(TypeError, match=r"^buffer must be a DeviceBuffer or BufferView, got ndarray$"):
        devices.download(np.zeros(4))


def test_write_then_download(devices):
    buf = devices.upload(np.zeros(4, np.float32))
    devices.write(buf, np.float32([7.0]), offset=8)
    np.testing.assert_array_equal(devices.download_numpy(buf), [0, 0, 7, 0])
    with pytest.raises(ValueError, match=r"^write of 8 bytes at offset=12 runs past 16 bytes$"):
        devices.write(buf, np.float32([1, 2]), offset=12)


def test_allocated_bytes_accounting():
    dev = open_device("cpu")
    try:
        before = dev.allocated_bytes
        buf = dev.alloc(1000, "u8")
        assert dev.allocated_bytes == before + 1024  # 256-byte granules
        buf.free()
        assert dev.allocated_bytes == before
    finally:
        dev.close()


def test_memory_limit_raises_oom():
    from xinfer_async.backends.cpu import CPUDevice

    dev = CPUDevice(memory_limit_bytes=4096)
    try:
        with pytest.raises(xinfer_async.DeviceOutOfMemoryError, match=r"exceeds the memory limit of 4096") as info:
            dev.alloc(8192, "u8")
        assert isinstance(info.value, MemoryError) and info.value.status == "XI_OOM"
    finally:
        dev.close()


def test_closed_device_raises():
    dev = open_device("cpu")
    dev.close()
    dev.close()  # idempotent
    with pytest.raises(DeviceError, match=r"^device cpu is closed$"):
        dev.alloc(4, "f32")


def test_close_frees_the_buffers_still_held():
    """close() gives back every block, also those of buffers still referenced (a model's weights):
    on cuda the primary context outlives the device once cuBLAS has used it, so nothing else would
    free them. A free() or a dropped buffer after close touches nothing."""
    dev = open_device("cpu")
    freed: list[int] = []
    real_free = dev.backend.free
    dev.backend.free = lambda address: (freed.append(address), real_free(address))[1]
    held = [dev.alloc((1000 + 64 * i,), "f32") for i in range(3)]
    gone = dev.alloc((5000,), "f32")
    gone.free()  # back in the allocator's cache, not to the backend yet
    addresses = {b.address for b in held} | {gone.address}
    assert dev.allocated_bytes > 0 and not freed
    dev.close()
    assert sorted(freed) == sorted(addresses)  # each block exactly once
    assert dev.allocated_bytes == 0 and dev.allocator.cached_bytes == 0 and not dev.backend._arrays
    held[0].free()
    del held[1]
    import gc

    gc.collect()
    assert sorted(freed) == sorted(addresses)


def test_a_held_buffer_after_close_raises_instead_of_touching_freed_memory():
    dev = open_device("cpu")
    buf = dev.upload(np.arange(6, dtype=np.float32))
    dev.close()
    for call in (lambda: dev.download(buf), lambda: dev.download_numpy(buf), lambda: dev.write(buf, b"\0" * 4)):
        with pytest.raises(DeviceError, match=r"^device cpu is closed$"):
            call()


def test_a_free_racing_close_is_not_freed_twice():
    """A free() that lands while close() gives the blocks back (another thread, a fence listener):
    each block goes back exactly once."""
    dev = open_device("cpu")
    bufs = [dev.alloc((256,), "f32") for _ in range(4)]
    freed: list[int] = []
    real_free, real_release = dev.backend.free, dev.allocator.release_all
    dev.backend.free = lambda address: (freed.append(address), real_free(address))[1]

    def release_all():  # inside close(), under its lock: the other buffers' free() comes now
        for b in bufs[1:]:
            b.free()
        real_release()

    dev.allocator.release_all = release_all
    bufs[0].free()
    dev.close()
    assert sorted(freed) == sorted(b.address for b in bufs) and dev.allocated_bytes == 0


def test_close_of_a_device_that_refuses_frees_still_closes():
    """A lost device: its frees fail; close() still closes the queues and the backend, once."""
    dev = open_device("cpu")
    dev.alloc((64,), "f32")
    calls = []

    def refuse(address):
        calls.append(address)
        raise DeviceError("the device is lost", "LOST")

    dev.backend.free = refuse
    dev.close()
    assert dev._closed and len(calls) == 1 and dev.allocated_bytes == 0 and not dev._live
    dev.close()  # idempotent: nothing is freed again
    assert len(calls) == 1


# -- open_device ---------------------------------------------------------------------------

def test_open_device_names(monkeypatch):
    monkeypatch.delenv("XINFER_DEVICE", raising=False)
    with open_device("cpu") as dev:
        assert dev.name == "cpu" and isinstance(dev, xinfer_async.DeviceProtocol)
    with open_device(" CPU ") as dev:
        assert dev.name == "cpu"
    with open_device("auto") as dev:
        assert dev.name == ("cuda" if cuda_status()[0] else "cpu")


def test_open_device_unknown_name_lists_choices():
    with pytest.raises(ValueError, match=re.escape("device='tpu' is not a device name; choose one of auto, cpu, cuda, cuda:N")):
        open_device("tpu")
    with pytest.raises(TypeError, match=r"^name must be a str, got int$"):
        open_device(0)


@pytest.mark.skipif(cuda_status()[0], reason="a usable cuda device is present")
@pytest.mark.parametrize("name", ["cuda", "cuda:1"])
def test_open_device_cuda_missing_says_why(name):
    reason = cuda_status()[1]
    assert reason
    with pytest.raises(DeviceError, match=re.escape(f"device {name!r} is not available: {reason}")) as info:
        open_device(name)
    assert info.value.status == "CUDA_UNAVAILABLE"


def test_env_var_picks_device(monkeypatch):
    monkeypatch.setenv("XINFER_DEVICE", "cpu")
    with open_device() as dev:
        assert dev.name == "cpu"
    monkeypatch.setenv("XINFER_DEVICE", "npu")
    with pytest.raises(ValueError, match=r"device='npu' is not a device name"):
        open_device()
    monkeypatch.setenv("XINFER_DEVICE", "")
    with open_device() as dev:  # empty: auto
        assert dev.name in ("cpu", "cuda")


def _device_with_stuck_work():
    """A cpu device whose default queue waits on a value of ``gate`` that never comes, with a
    submitted fill behind it; returns (device, gate)."""
    dev = xinfer_async.open_device("cpu")
    gate = dev.create_queue()
    dev.queue.wait_for(gate, 1)  # never signalled
    ex = dev.executor()
    ex.fill(dev.alloc(16, "f32"), 1.0)
    ex.submit()
    return dev, gate


def test_close_with_work_that_never_completes_warns_and_returns():
    """A queue waiting on a fence value that never comes: close gives up after its timeout,
    leaks that memory with a ResourceWarning instead of freeing it under the device, and returns."""
    dev, _ = _device_with_stuck_work()
    with pytest.warns(ResourceWarning, match="work still pending after 0.2 s at close"):
        dev.close(timeout_s=0.2)


def test_close_with_work_that_never_completes_returns_within_its_timeout():
    """The stuck queue is leaked, not closed: closing it would wait for its work (the cpu queue
    thread's join takes 10 s) and free the fence that work still signals."""
    import time

    dev, gate = _device_with_stuck_work()
    t0 = time.monotonic()
    with pytest.warns(ResourceWarning, match="work still pending"):
        dev.close(timeout_s=0.2)
    assert time.monotonic() - t0 < 5.0
    assert not dev.queue.fence._closed  # its pending work may still signal it
    assert gate.fence._closed  # the idle queue is closed as usual


# -- the kernels a device is handed --------------------------------------------------------

def test_device_builds_kernels_with_the_factory_it_is_handed():
    from xinfer_async.backends.cpu._backend import CPUBackend
    from xinfer_async.ops import ComputeKernel
    from xinfer_async.runtime import Device

    made = []

    def factory(device, name):
        made.append(name)
        return ComputeKernel(device, name)

    with Device(CPUBackend(), kernels=factory) as dev:
        k = dev.kernel("affine")
        assert dev.kernel("affine") is k and made == ["affine"]  # built once per device
        assert k.name == "affine" and k.device is dev
        with pytest.raises(ValueError, match=r"^unknown kernel 'nope'; known kernels: add, affine, "):
            dev.kernel("nope")


def test_device_checks_its_backend_and_kernels():
    from xinfer_async.backends.cpu._backend import CPUBackend
    from xinfer_async.runtime import Device

    with pytest.raises(TypeError, match=r"^kernels must be a callable \(device, name\) -> kernel, got str$"):
        Device(CPUBackend(), kernels="affine")
    with pytest.raises(TypeError, match=r"^backend must be a hal.Backend, got object$"):
        Device(object(), kernels=lambda d, n: None)
    with pytest.raises(TypeError, match="kernels"):
        Device(CPUBackend())  # handed explicitly, never installed by an import
