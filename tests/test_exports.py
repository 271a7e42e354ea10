"""xinfer_async/__init__.py: the public surface is a list of re-exports."""

import xinfer_async

PUBLIC = {
    "Access", "Buffer", "BufferView", "CapturedGraph", "CommandListPool", "ComputeKernel", "Device",
    "DeviceBuffer", "DeviceError", "DeviceOutOfMemoryError", "DeviceProtocol", "DType", "Executor",
    "Fence", "FenceTimeoutError", "Gemm", "GGUFError", "GpuTimer", "JobCancelledError", "JobQueue",
    "KernelCompileError", "Operator", "Queue", "ResourceState", "TensorDesc", "ValidationError",
    "XinferError", "open_device", "open_job_queue",
}


def test_public_names_are_exported():
    missing = sorted(n for n in PUBLIC if not hasattr(xinfer_async, n))
    assert missing == []


def test_no_private_module_leaks_its_name():
    for name in PUBLIC:
        obj = getattr(xinfer_async, name)
        assert not getattr(obj, "__name__", name).startswith("_")


def test_errors_hierarchy():
    e = xinfer_async
    assert issubclass(e.DeviceOutOfMemoryError, e.DeviceError) and issubclass(e.DeviceOutOfMemoryError, MemoryError)
    assert issubclass(e.DeviceError, e.XinferError) and issubclass(e.ValidationError, e.XinferError)
    import trio

    assert issubclass(e.FenceTimeoutError, trio.TooSlowError)


def test_the_list_is_exactly_the_public_names():
    """Adding or dropping a re-export in ``__init__.py`` means updating ``PUBLIC`` (and the README)."""
    import inspect

    names = {n for n in dir(xinfer_async) if not n.startswith("_") and not inspect.ismodule(getattr(xinfer_async, n))}
    assert names == PUBLIC
    assert set(getattr(xinfer_async, "__all__", PUBLIC)) == PUBLIC
