"""``CUDABackend`` / ``CUDAQueue``: the primitives of ``runtime/_backend.py`` on the CUDA driver API.

Primitives only: memory is ``cuMemAlloc``, a queue is a non-blocking stream (plus one for its
signals), a dispatch is ``cuLaunchKernelEx`` of an NVRTC-compiled ``shaders/<name>.cu``, a GEMM is
cuBLAS, a timestamp is a CUDA event, a captured command list is a CUDA graph, and a fence signal is
the GPU's store of the value into a mapped counter (``cuStreamWriteValue64``) followed by the native C
function ``xi_fence_signal`` enqueued with ``cuLaunchHostFunc`` on the queue's signal stream (no
Python ever runs on a driver thread).
"""

from __future__ import annotations

import functools
import os
import threading
import time
import weakref
from typing import Any, Sequence

from ...hal._errors import DeviceError
from ...runtime._backend import Backend, BackendQueue, Command
from . import _driver
from ._driver import check, ffi
from ._launch import (ATTENTION, LAUNCH, MATMUL, attention_entries, attention_launch, matmul_entries, matmul_launch,
                      stage_max_for)
from ._pinned import MappedCounter, PinnedPool

_CUBLAS_WORKSPACE = 32 << 20
_MIN_DRIVER = 12000


def shader_dir() -> str:
    """Where ``<name>.cu`` files live: ``$XINFER_SHADERS``, else the repository's ``shaders/``, else the
    package's ``xinfer_async/shaders`` (package data)."""
    if os.environ.get("XINFER_SHADERS"):
        return os.environ["XINFER_SHADERS"]
    pkg = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for d in (os.path.join(os.path.dirname(pkg), "shaders"), os.path.join(pkg, "shaders")):
        if os.path.isdir(d):
            return d
    return os.path.join(os.path.dirname(pkg), "shaders")


def _fence_signal_fn():
    """``xi_fence_signal`` of ``xinfer_async._native`` as a ``CUhostFn``."""
    from ... import _native

    addr = int(_native.ffi.cast("uintptr_t", _native.ffi.addressof(_native.lib, "xi_fence_signal")))
    return ffi.cast("CUhostFn", addr)


def _address(signal: Any) -> int:
    if isinstance(signal, int):
        return signal
    try:
        return int(ffi.cast("uintptr_t", signal))
    except TypeError:
        from ... import _native

        return int(_native.ffi.cast("uintptr_t", signal))


class LaunchGrid(tuple):
    """A grid ``(x, y, z)`` (a plain tuple of ints) that also names the block size and the dynamic
    shared memory it is launched with."""

    def __new__(cls, grid, block=(1, 1, 1), shared_bytes=0, function=None):
        self = super().__new__(cls, (int(grid[0]), int(grid[1]), int(grid[2])))
        self.block, self.shared_bytes, self.function = block, shared_bytes, function
        return self


class CUDAKernel:
    """A loaded kernel: ``extern "C" <name>`` of ``shaders/<source>.cu``, launched with ``block``
    threads and ``shared_bytes`` of dynamic shared memory. A matrix kernel (``_launch.MATMUL``) has
    several entry points in its shader (``entries``: suffix -> CUfunction); ``launch`` (constants ->
    (grid, block, shared bytes, suffix), ``_launch.matmul_launch``) picks one for each launch.
    ``pdl``: every entry point waits for the previous kernel in-kernel (``xi_grid_begin``, true of
    all of ``shaders/``: tests/test_shaders_compile.py checks each entry's PTX), so the backend may
    launch it with programmatic dependent launch; a kernel that does not wait must keep it false,
    or it would run alongside the kernel before it."""

    def __init__(self, name: str, module, function, block: int, grid_fn, launch=None, entries=None,
                 pdl: bool = False):
        self.name, self.module, self.function, self.pdl = name, module, function, pdl
        self.block = (block, 1, 1)
        self.shared_bytes = 0
        self._grid_fn = grid_fn
        self._launch, self.entries = launch, entries or {"": function}

    def launch_grid(self, constants: dict) -> "LaunchGrid":
        """The grid ``(x, y, z)`` of blocks for the constants (a dict of the KERNELS.md fields), as
        the runtime puts it in ``("dispatch", ...)``; it also carries ``.block``, ``.shared_bytes``
        and ``.function``: the entry point these constants launch."""
        if self._launch is not None:
            grid, block, shared, suffix = self._launch(constants)
            return LaunchGrid(grid, block, shared, self.entries[suffix])
        return LaunchGrid(self._grid_fn(constants), self.block, self.shared_bytes, self.function)

    def launch_config(self, constants: dict) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
        """``(grid, block, shared_bytes)`` for the constants; ``grid`` is the ``LaunchGrid`` (it names
        the entry point, so the triple launches what ``launch_grid`` does)."""
        g = self.launch_grid(constants)
        return g, g.block, g.shared_bytes

    def __repr__(self) -> str:
        return f"CUDAKernel({self.name!r}, block={self.block[0]})"


class CUDAGraph:
    """A captured, instantiated CUDA graph; ``("graph", g)`` launches it."""

    def __init__(self, graph, exec_):
        self.graph, self.exec = graph, exec_


class CUDATimestamp:
    """A CUDA event recorded by ``("timestamp", ts)``."""

    def __init__(self, event):
        self.event = event


class CUDABackend(Backend):
    """One CUDA device (its primary context).

    Args:
        ordinal: the device index.

    Raises:
        DeviceError: the driver failed to initialize or the device does not exist.
        OSError: ``libcuda.so.1`` is missing.
    """

    name = "cuda"

    def __init__(self, ordinal: int = 0):
        self._lib = lib = _driver.load()
        check(lib.cuInit(0), "cuInit")
        dev = ffi.new("CUdevice *")
        check(lib.cuDeviceGet(dev, ordinal), f"cuDeviceGet({ordinal})")
        self.device = dev[0]
        ctx = ffi.new("CUcontext *")
        check(lib.cuDevicePrimaryCtxRetain(ctx, self.device), "cuDevicePrimaryCtxRetain")
        self._ctx = ctx[0]
        self._tls = threading.local()
        self.make_current()
        self.compute_capability = (self._attr(_driver.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                                   self._attr(_driver.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
        self.arch = "sm_%d%d" % self.compute_capability
        self.multiprocessors = self._attr(_driver.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        #: dynamic shared bytes the tiled matrix kernels may stage tokens in (XI_MVT_STAGE_MAX, set at
        #: compile time): 100 KB (two blocks an SM on an H200), less where a block may opt in to less
        self.stage_max = stage_max_for(self._attr(_driver.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN))
        name = ffi.new("char[]", 256)
        check(lib.cuDeviceGetName(name, 256, self.device), "cuDeviceGetName")
        total = ffi.new("size_t *")
        check(lib.cuDeviceTotalMem_v2(total, self.device), "cuDeviceTotalMem")
        self.total_nbytes = total[0]
        ver = ffi.new("int *")
        check(lib.cuDriverGetVersion(ver), "cuDriverGetVersion")
        self.driver_version = ver[0]
        self.description = f"{ffi.string(name).decode()} ({self.arch}, {self.total_nbytes / 2**30:.0f} GiB)"
        self._kernels: dict[str, CUDAKernel] = {}
        self._queues: list[CUDAQueue] = []
        self._host_fn = None
        self._cublas = None
        self._capture_stream = None
        self._closed = False
        self._pinned = PinnedPool(lib)
        self._counters: "weakref.WeakSet[MappedCounter]" = weakref.WeakSet()
        # cuStreamWaitValue64 on mapped host counters (cross-queue waits on values not yet submitted);
        # without 64-bit stream memory ops, wait_for falls back to an event on the other stream's tail
        try:
            self.stream_wait_value = bool(self._attr(_driver.CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS))
        except DeviceError:  # an older driver that does not know the attribute
            self.stream_wait_value = False
        #: programmatic dependent launch (compute capability 9.0+, cuLaunchKernelEx): each kernel may
        #: start while the previous one of its stream ends; the shaders wait for it in-kernel
        #: (xi_grid_begin, shaders/xi_common.cuh). XINFER_CUDA_PDL=0 turns it off.
        self.pdl = (self.compute_capability >= (9, 0) and os.environ.get("XINFER_CUDA_PDL", "1") != "0"
                    and self.driver_version >= 12030 and hasattr(lib, "cuLaunchKernelEx"))  # 12.3: in graphs too
        self._pdl_attr = ffi.new("CUlaunchAttribute[1]")
        self._pdl_attr[0].id = _driver.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        self._pdl_attr[0].value[0] = 1  # programmaticStreamSerializationAllowed

    # -- availability -----------------------------------------------------------------------------
    @staticmethod
    def is_available() -> tuple[bool, str]:
        """``(True, description)`` when a CUDA device can be opened, else ``(False, reason)``."""
        try:
            lib = _driver.load()
        except OSError as e:
            why = str(e).split("  Additionally")[0].rsplit("libcuda.so.1: ", 1)[-1].rstrip(". ")
            return False, f"the NVIDIA driver library libcuda.so.1 cannot be loaded ({why})"
        status = lib.cuInit(0)
        if status:
            return False, f"cuInit failed: {_driver.error_name(status)}"
        ver, count = ffi.new("int *"), ffi.new("int *")
        if lib.cuDriverGetVersion(ver) or ver[0] < _MIN_DRIVER:
            return False, f"CUDA driver too old: version {ver[0]}, need {_MIN_DRIVER}"
        if lib.cuDeviceGetCount(count) or count[0] == 0:
            return False, "no CUDA device"
        return True, f"{count[0]} CUDA device(s), driver {ver[0]}"

    # -- helpers ----------------------------------------------------------------------------------
    def make_current(self) -> None:
        """Make this device's context current on the calling thread (done once per thread)."""
        if getattr(self._tls, "ctx", False):
            return
        check(self._lib.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")
        self._tls.ctx = True

    def _attr(self, attr: int) -> int:
        v = ffi.new("int *")
        check(self._lib.cuDeviceGetAttribute(v, attr, self.device), "cuDeviceGetAttribute")
        return v[0]

    def memory_info(self) -> tuple[int, int]:
        """``(free_nbytes, total_nbytes)`` of device memory (``cuMemGetInfo``)."""
        self.make_current()
        free, total = ffi.new("size_t *"), ffi.new("size_t *")
        check(self._lib.cuMemGetInfo_v2(free, total), "cuMemGetInfo")
        return free[0], total[0]

    # -- memory -----------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        if nbytes <= 0:
            raise ValueError(f"nbytes must be > 0, got {nbytes}")
        self.make_current()
        p = ffi.new("CUdeviceptr *")
        check(self._lib.cuMemAlloc_v2(p, nbytes), f"cuMemAlloc({nbytes})")
        return int(p[0])

    def free(self, address: int) -> None:
        self.make_current()
        check(self._lib.cuMemFree_v2(address), "cuMemFree")

    def write(self, address: int, data) -> None:
        self.make_current()
        buf = ffi.from_buffer(data)
        check(self._lib.cuMemcpyHtoD_v2(address, buf, len(buf)), "cuMemcpyHtoD")

    def read(self, address: int, out) -> None:
        self.make_current()
        buf = ffi.from_buffer(out, require_writable=True)
        check(self._lib.cuMemcpyDtoH_v2(buf, address, len(buf)), "cuMemcpyDtoH")

    def host_array(self, nbytes: int):
        """A ``uint8`` array of ``nbytes`` over pooled page-locked memory (see ``_pinned.py``)."""
        self.make_current()
        return self._pinned.array(nbytes)

    def fence_counter(self, queue: "CUDAQueue"):
        """A mapped pinned counter (``MappedCounter``) that ``queue``'s fence completes into; other
        queues' ``wait_for`` read it on the GPU."""
        self.make_current()
        counter = MappedCounter(self._lib)
        queue.counter = counter
        self._counters.add(counter)
        return counter.native_pointer(), counter

    # -- queues -----------------------------------------------------------------------------------
    def create_queue(self) -> "CUDAQueue":
        self.make_current()
        if self._host_fn is None:
            self._host_fn = _fence_signal_fn()
        q = CUDAQueue(self)
        self._queues.append(q)
        return q

    def _enqueue(self, stream, cmd: Command) -> None:
        """Enqueue one lowered command on ``stream`` (a ``CUstream``)."""
        lib, kind = self._lib, cmd[0]
        if kind == "dispatch":
            _, kernel, grid, addresses, constants = cmd
            if len(grid) == 3 and isinstance(grid[0], tuple):  # (grid, block, shared) from launch_grid
                grid = grid[0]
            n = len(addresses)
            ptrs = ffi.new("CUdeviceptr[]", addresses)
            params = ffi.new("void *[]", n + 1)
            for i in range(n):
                params[i] = ptrs + i
            params[n] = ffi.from_buffer(constants)
            fn = getattr(grid, "function", None)
            if fn is None:  # a plain (x, y, z): the kernel's first entry point
                fn, b, shared = kernel.function, kernel.block, kernel.shared_bytes
            else:
                b, shared = grid.block, grid.shared_bytes
            if self.pdl and kernel.pdl:
                cfg = ffi.new("CUlaunchConfig *", (grid[0], grid[1], grid[2], b[0], b[1], b[2], shared,
                                                   stream, self._pdl_attr, 1))
                status = lib.cuLaunchKernelEx(cfg, fn, params, ffi.NULL)
            else:
                status = lib.cuLaunchKernel(fn, grid[0], grid[1], grid[2], b[0], b[1], b[2],
                                            shared, stream, params, ffi.NULL)
            if status:
                check(status, f"cuLaunchKernel({kernel.name}, grid={tuple(grid)})")
        elif kind == "copy":
            check(lib.cuMemcpyDtoDAsync_v2(cmd[1], cmd[2], cmd[3], stream), "cuMemcpyDtoDAsync")
        elif kind == "fill":
            check(lib.cuMemsetD32Async(cmd[1], cmd[3] & 0xFFFFFFFF, cmd[2] // 4, stream), "cuMemsetD32Async")
        elif kind == "upload":
            host = cmd[2]
            check(lib.cuMemcpyHtoDAsync_v2(cmd[1], ffi.from_buffer(host), host.nbytes, stream), "cuMemcpyHtoDAsync")
        elif kind == "download":
            host = cmd[2]
            # host_array gives pinned memory: asynchronous (pageable memory would block this thread)
            check(lib.cuMemcpyDtoHAsync_v2(ffi.from_buffer(host, require_writable=True), cmd[1], host.nbytes, stream),
                  "cuMemcpyDtoHAsync")
        elif kind == "gemm":
            self._gemm_handle().gemm(int(ffi.cast("uintptr_t", stream)), cmd[1], cmd[2], cmd[3], cmd[4])
        elif kind == "timestamp":
            check(lib.cuEventRecord(cmd[1].event, stream), "cuEventRecord")
        elif kind == "graph":
            check(lib.cuGraphLaunch(cmd[1].exec, stream), "cuGraphLaunch")
        else:
            raise ValueError(f"unknown command {kind!r}")

    # -- kernels ----------------------------------------------------------------------------------
    def load_kernel(self, spec: Any) -> CUDAKernel:
        """Compile ``shaders/<source>.cu`` (``source`` = ``spec.source_name`` if set, else ``spec.name``;
        ``spec`` may also be the name itself) and look up ``extern "C" <spec.name>``.

        Raises:
            KernelCompileError: NVRTC rejected the source (``.log`` has the log).
            ValueError: no launch configuration or no shader file for the name.
        """
        from . import _nvrtc

        name = spec if isinstance(spec, str) else spec.name
        if name in self._kernels:
            return self._kernels[name]
        if name not in LAUNCH and name not in MATMUL and name not in ATTENTION:
            raise ValueError(f"no CUDA launch configuration for kernel {name!r}")
        source_name = (None if isinstance(spec, str) else getattr(spec, "source_name", None)) or name
        d = shader_dir()
        path = os.path.join(d, f"{source_name}.cu")
        try:
            with open(path) as f:
                source = f.read()
        except OSError as e:
            raise ValueError(f"no shader for kernel {name!r}: {e}") from None
        headers = {}
        for h in sorted(os.listdir(d)):
            if h.endswith(".cuh"):
                with open(os.path.join(d, h)) as f:
                    headers[h] = f.read()
        cubin = _nvrtc.compile_cubin(source, f"{source_name}.cu", self.arch, headers,
                                     options=(f"-DXI_MVT_STAGE_MAX={self.stage_max}",),
                                     driver_version=self.driver_version)
        self.make_current()
        mod, fn = ffi.new("CUmodule *"), ffi.new("CUfunction *")
        check(self._lib.cuModuleLoadData(mod, cubin), f"cuModuleLoadData({source_name}.cu)")
        check(self._lib.cuModuleGetFunction(fn, mod[0], name.encode()), f"cuModuleGetFunction({name})")
        if name in MATMUL:
            dt, kind = MATMUL[name]
            entries = self._entries(mod[0], name, matmul_entries(dt))
            if self.stage_max > 48 * 1024:  # the `_t` entry's token stage: dynamic shared memory past 48 KB is opt-in
                check(self._lib.cuFuncSetAttribute(entries["_t"], _driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                   self.stage_max), f"cuFuncSetAttribute({name}_t)")
            launch = functools.partial(matmul_launch, dt=dt, kind=kind, stage_max=self.stage_max,
                                       sms=self.multiprocessors, cc=self.compute_capability)
            k = self._kernels[name] = CUDAKernel(name, mod[0], entries[""], 256, None, launch, entries, pdl=True)
        elif name in ATTENTION:
            entries = self._entries(mod[0], name, attention_entries())
            launch = functools.partial(attention_launch, sms=self.multiprocessors)
            k = self._kernels[name] = CUDAKernel(name, mod[0], entries[""], 256, None, launch, entries, pdl=True)
        else:
            block, grid_fn = LAUNCH[name]
            k = self._kernels[name] = CUDAKernel(name, mod[0], fn[0], block,
                                                 functools.partial(grid_fn, sms=self.multiprocessors), pdl=True)
        return k

    def _entries(self, module, name: str, suffixes) -> dict:
        """suffix -> CUfunction of ``name + suffix`` in ``module``, for each suffix."""
        out = {}
        for suffix in suffixes:
            fn = ffi.new("CUfunction *")
            check(self._lib.cuModuleGetFunction(fn, module, (name + suffix).encode()), f"cuModuleGetFunction({name + suffix})")
            out[suffix] = fn[0]
        return out

    # -- gemm -------------------------------------------------------------------------------------
    def _gemm_handle(self):
        if self._cublas is None:
            from ._cublas import CublasHandle

            ws = self.alloc(_CUBLAS_WORKSPACE)
            self._cublas = CublasHandle(ws, _CUBLAS_WORKSPACE)
            self._cublas_ws = ws
        return self._cublas

    def create_gemm(self, dtype: Any, m: int, n: int, k: int, trans_b: bool):
        from ._cublas import Gemm

        self.make_current()
        g = Gemm(dtype, m, n, k, trans_b)
        self._gemm_handle()
        return g

    # -- timestamps -------------------------------------------------------------------------------
    def create_timestamp(self) -> CUDATimestamp:
        self.make_current()
        ev = ffi.new("CUevent *")
        check(self._lib.cuEventCreate(ev, 0), "cuEventCreate")
        return CUDATimestamp(ev[0])

    def destroy_timestamp(self, ts: CUDATimestamp) -> None:
        check(self._lib.cuEventDestroy_v2(ts.event), "cuEventDestroy")

    def elapsed_ms(self, start: CUDATimestamp, end: CUDATimestamp) -> float:
        self.make_current()
        ms = ffi.new("float *")
        check(self._lib.cuEventElapsedTime(ms, start.event, end.event), "cuEventElapsedTime")
        return float(ms[0])

    # -- graphs -----------------------------------------------------------------------------------
    def capture(self, commands: Sequence[Command]) -> CUDAGraph:
        """Capture ``commands`` (copy, fill, dispatch, gemm) into an instantiated CUDA graph.

        Raises:
            ValueError: a command that cannot be captured (upload, download, timestamp, graph).
            DeviceError: capture or instantiation failed.
        """
        for cmd in commands:
            if cmd[0] not in ("copy", "fill", "dispatch", "gemm"):
                raise ValueError(f"command {cmd[0]!r} cannot be captured into a graph")
        self.make_current()
        lib = self._lib
        if self._capture_stream is None:
            s = ffi.new("CUstream *")
            check(lib.cuStreamCreate(s, _driver.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
            self._capture_stream = s[0]
        stream = self._capture_stream
        check(lib.cuStreamBeginCapture_v2(stream, _driver.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture")
        graph = ffi.new("CUgraph *")
        try:
            for cmd in commands:
                self._enqueue(stream, cmd)
        except BaseException:
            if lib.cuStreamEndCapture(stream, graph) == 0 and graph[0] != ffi.NULL:
                lib.cuGraphDestroy(graph[0])
            raise
        check(lib.cuStreamEndCapture(stream, graph), "cuStreamEndCapture")
        exe = ffi.new("CUgraphExec *")
        status = lib.cuGraphInstantiateWithFlags(exe, graph[0], 0)
        if status:
            lib.cuGraphDestroy(graph[0])
            check(status, "cuGraphInstantiate")
        return CUDAGraph(graph[0], exe[0])

    def destroy_graph(self, graph: CUDAGraph) -> None:
        self.make_current()
        check(self._lib.cuGraphExecDestroy(graph.exec), "cuGraphExecDestroy")
        check(self._lib.cuGraphDestroy(graph.graph), "cuGraphDestroy")

    # -- lifetime ---------------------------------------------------------------------------------
    def synchronize(self) -> None:
        self.make_current()
        check(self._lib.cuCtxSynchronize(), "cuCtxSynchronize")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.make_current()
        lib = self._lib
        if _driver.lost is None:
            lib.cuCtxSynchronize()
        for q in self._queues:
            q.close()
        if self._cublas is not None:
            self._cublas.close()
            lib.cuMemFree_v2(self._cublas_ws)
        for k in self._kernels.values():
            lib.cuModuleUnload(k.module)
        self._kernels.clear()
        if self._capture_stream is not None:
            lib.cuStreamDestroy_v2(self._capture_stream)
        self._pinned.close()
        for c in list(self._counters):  # the fences copied their last values (Fence.close)
            c.free()
        lib.cuDevicePrimaryCtxRelease_v2(self.device)


class CUDAQueue(BackendQueue):
    """A non-blocking CUDA stream (``stream``) for the work, and a second one (``signal_stream``)
    for the fence's host callbacks: after each list the work stream records ``_done`` (an event)
    and the signal stream waits for it, then runs ``xi_fence_signal``. So the work stream never
    waits for a host callback (the driver's callback thread takes 25-60 us to run one, which would
    sit between consecutive lists, e.g. the steps of a pipelined decode), while the callbacks still
    run in order, each after its own list. ``error`` holds the first :class:`DeviceError` a command
    raised."""

    def __init__(self, backend: CUDABackend):
        self._backend = backend
        self._lib = backend._lib
        s, s2, ev = ffi.new("CUstream *"), ffi.new("CUstream *"), ffi.new("CUevent *")
        check(self._lib.cuStreamCreate(s, _driver.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
        self.stream = s[0]
        try:
            check(self._lib.cuStreamCreate(s2, _driver.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
            try:
                check(self._lib.cuEventCreate(ev, _driver.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
            except DeviceError:
                self._lib.cuStreamDestroy_v2(s2[0])
                raise
        except DeviceError:
            self._lib.cuStreamDestroy_v2(self.stream)
            raise
        self.signal_stream, self._done = s2[0], ev[0]
        self.error: DeviceError | None = None
        self.counter: MappedCounter | None = None  # set by CUDABackend.fence_counter
        self._closed = False

    def execute(self, commands: Sequence[Command], signal: Any) -> None:
        backend = self._backend
        backend.make_current()
        try:
            for cmd in commands:
                backend._enqueue(self.stream, cmd)
        except DeviceError as e:
            if self.error is None:
                self.error = e
        finally:
            if self.error is None and backend.stream_wait_value and self.counter is not None:
                # the GPU itself stores the value into the mapped fence counter right after the
                # list (a few us), so a polling waiter sees completion long before the host
                # callback below (25-60 us) wakes sleeping waiters through the eventfd
                status = self._lib.cuStreamWriteValue64_v2(self.stream, self.counter.device_ptr, int(signal.value), 0)
                if status and self.error is None:
                    try:
                        check(status, "cuStreamWriteValue64")
                    except DeviceError as e:
                        self.error = e
            # the signal follows everything enqueued so far (the signal stream waits for the work
            # stream's event; a wait captures the event's latest record, so one event serves every
            # list); if that fails, signal now from this thread (the C function, not Python), so
            # no waiter hangs
            ptr = ffi.cast("void *", _address(signal))
            lib, status, what = self._lib, 0, ""
            for what, call, args in (("cuEventRecord", lib.cuEventRecord, (self._done, self.stream)),
                                     ("cuStreamWaitEvent", lib.cuStreamWaitEvent, (self.signal_stream, self._done, 0)),
                                     ("cuLaunchHostFunc", lib.cuLaunchHostFunc, (self.signal_stream, backend._host_fn, ptr))):
                status = call(*args)
                if status:
                    break
            if status:
                # the callbacks already queued run first (or never, in a lost context, whose
                # driver drops them), so signalling here frees no struct a callback will still read
                lib.cuStreamSynchronize(self.stream)
                lib.cuStreamSynchronize(self.signal_stream)
                if self.error is None:
                    try:
                        check(status, what)
                    except DeviceError as e:
                        self.error = e
                backend._host_fn(ptr)

    def wait_for(self, other: "CUDAQueue", value: int) -> None:
        """Later work on this stream waits until ``other``'s fence counter reaches ``value``:
        ``cuStreamWaitValue64(GEQ)`` on the counter's mapped device address, so a value not yet
        submitted on ``other`` stalls this stream until it is signalled. Fallback (no 64-bit stream
        memory ops, or no mapped counter): an event recorded on ``other``'s tail, which covers only
        what ``other`` has enqueued so far."""
        self._backend.make_current()
        lib = self._lib
        if self._backend.stream_wait_value and other.counter is not None:
            check(lib.cuStreamWaitValue64_v2(self.stream, other.counter.device_ptr, int(value),
                                             _driver.CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue64")
            return
        ev = ffi.new("CUevent *")
        check(lib.cuEventCreate(ev, _driver.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        try:
            check(lib.cuEventRecord(ev[0], other.stream), "cuEventRecord")
            check(lib.cuStreamWaitEvent(self.stream, ev[0], 0), "cuStreamWaitEvent")
        finally:
            lib.cuEventDestroy_v2(ev[0])

    def synchronize(self) -> None:
        """Block until this queue is idle: its work, and the host callbacks that signal it."""
        self._backend.make_current()
        check(self._lib.cuStreamSynchronize(self.stream), "cuStreamSynchronize")
        check(self._lib.cuStreamSynchronize(self.signal_stream), "cuStreamSynchronize")

    def close(self) -> bool:
        if not self._closed:
            self._closed = True
            self._backend.make_current()
            if _driver.lost is None:
                # a wait on a fence value that is never signalled would block forever: give up
                # after 10 s, as the cpu queue thread's join does (the streams are left alone)
                deadline = time.monotonic() + 10.0
                for stream in (self.stream, self.signal_stream):  # the callbacks touch the fence
                    while self._lib.cuStreamQuery(stream) == _driver.CUDA_ERROR_NOT_READY:
                        if time.monotonic() > deadline:
                            return False
                        time.sleep(1e-4)
            self._lib.cuStreamDestroy_v2(self.stream)
            self._lib.cuStreamDestroy_v2(self.signal_stream)
            self._lib.cuEventDestroy_v2(self._done)
        return True
