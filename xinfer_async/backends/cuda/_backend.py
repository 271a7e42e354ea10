"""``CUDABackend``: the primitives of ``hal.Backend`` on the CUDA driver API.

Primitives only: memory is ``cuMemAlloc``, a queue is a non-blocking stream (plus one for its
signals, ``_queue.py``, which holds the fence-signal protocol), a dispatch is ``cuLaunchKernelEx`` of
an NVRTC-compiled ``shaders/<name>.cu`` (``_kernel.py`` loads it, ``_launch.py`` holds the launcher
families), a GEMM is cuBLAS, a timestamp is a CUDA event, a captured command list is a CUDA graph
(``_graph.py``). ``_enqueue`` lowers one command onto a stream.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Sequence

from ...hal import Backend, DeviceError
from ...hal._commands import Command, CopyCmd, DispatchCmd, DownloadCmd, FillCmd, GemmCmd, ReplayCmd, TimestampCmd, UploadCmd
from . import _driver, _launch, _timeline
from ._driver import check, ffi
from ._cublaslt import LtGemm
from ._graph import CUDAGraph, GraphCapture
from ._kernel import CUDAKernel, LaunchGrid, load_kernel, shader_dir
from ._launch import pq_stage_max_for, stage_max_for
from ._pinned import MappedCounter, PinnedPool
from ._queue import CUDAQueue, fence_signal_fn

_CUBLAS_WORKSPACE = 32 << 20
#: importable from here too (bench/ and tests/ did): the kernel loader's names
__all__ = ["CUDABackend", "CUDAKernel", "CUDAQueue", "CUDATimestamp", "LaunchGrid", "shader_dir"]


class CUDATimestamp:
    """A CUDA event recorded by ``TimestampCmd``."""

    def __init__(self, event):
        self.event = event


class CUDABackend(Backend):
    """One CUDA device (its primary context).

    Args:
        ordinal: the device index.

    Raises:
        DeviceError: the driver failed to initialize or the device does not exist.
        OSError: ``libcuda.so.1`` is missing.
        ValueError: ``XINFER_GEMM_WORKSPACE_MIB`` is not an integer in 0..1024.
    """

    name = "cuda"
    #: q6_k super-blocks rotated so ql / qh start 16-byte aligned (hal/_layout.py), as shaders/ read them
    device_layouts = frozenset({"q6_k"})

    def __init__(self, ordinal: int = 0):
        from ._cublaslt import buckets

        #: the GEMM regime's buckets of m (``_cublaslt.buckets``): ``XINFER_GEMM_WORKSPACE_MIB`` is
        #: checked here, at open (before the context is retained, before any weight is uploaded)
        self.gemm_buckets = buckets()
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
        optin = self._attr(_driver.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        self.stage_max = stage_max_for(optin)
        #: dynamic shared bytes the integer decode entry ``_pq`` may use: all a block may opt in to, less 1 KB
        self.pq_stage_max = pq_stage_max_for(optin)
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
        self._cublaslt = None
        self._graphs = GraphCapture(lib, self._enqueue)
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
        #: the launch timeline's buffer (``_timeline.py``) under XINFER_TIMELINE=1 on compute capability
        #: 9.0+ (each kernel module loaded is pointed at it), else None
        self.timeline = _timeline.Timeline(self) if _timeline.enabled() and self.compute_capability >= (9, 0) else None

    # -- availability -----------------------------------------------------------------------------
    @staticmethod
    def is_available() -> tuple[bool, str]:
        """``(True, description)`` when a CUDA device can be opened, else ``(False, reason)``."""
        return _driver.availability()

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
        """Copy host bytes to ``address``; returns once they are in device memory.

        cuMemcpyHtoD from pageable memory returns once the bytes are staged, before the DMA to the
        device has completed (CUDA Driver API, "API synchronization behavior"), and the queues'
        streams are non-blocking (no implicit order with the legacy stream): without the
        synchronize below, a kernel submitted right after an upload could read the old bytes
        (seen on the H200 under load, tests/test_cuda_backend.py)."""
        self.make_current()
        buf = ffi.from_buffer(data)
        check(self._lib.cuMemcpyHtoD_v2(address, buf, len(buf)), "cuMemcpyHtoD")
        check(self._lib.cuStreamSynchronize(ffi.NULL), "cuStreamSynchronize")  # the legacy stream: the copy landed

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
            self._host_fn = fence_signal_fn()
        q = CUDAQueue(self)
        self._queues.append(q)
        return q

    def _enqueue(self, stream, cmd: Command) -> None:
        """Enqueue one lowered command on ``stream`` (a ``CUstream``)."""
        lib, kind = self._lib, type(cmd)
        if kind is DispatchCmd:
            kernel, grid, addresses, constants = cmd.kernel, cmd.grid, cmd.addresses, cmd.constants
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
        elif kind is CopyCmd:
            check(lib.cuMemcpyDtoDAsync_v2(cmd.dst, cmd.src, cmd.nbytes, stream), "cuMemcpyDtoDAsync")
        elif kind is FillCmd:
            check(lib.cuMemsetD32Async(cmd.dst, cmd.pattern & 0xFFFFFFFF, cmd.nbytes // 4, stream), "cuMemsetD32Async")
        elif kind is UploadCmd:
            host = cmd.host
            check(lib.cuMemcpyHtoDAsync_v2(cmd.dst, ffi.from_buffer(host), host.nbytes, stream), "cuMemcpyHtoDAsync")
        elif kind is DownloadCmd:
            host = cmd.host
            # host_array gives pinned memory: asynchronous (pageable memory would block this thread)
            check(lib.cuMemcpyDtoHAsync_v2(ffi.from_buffer(host, require_writable=True), cmd.src, host.nbytes, stream),
                  "cuMemcpyDtoHAsync")
        elif kind is GemmCmd:
            g = cmd.gemm
            if isinstance(g, LtGemm):
                g.handle.gemm(int(ffi.cast("uintptr_t", stream)), g, cmd.a, cmd.b, cmd.c, cmd.workspace)
            else:
                self._gemm_handle().gemm(int(ffi.cast("uintptr_t", stream)), g, cmd.a, cmd.b, cmd.c)
        elif kind is TimestampCmd:
            check(lib.cuEventRecord(cmd.ts.event, stream), "cuEventRecord")
        elif kind is ReplayCmd:
            check(lib.cuGraphLaunch(cmd.graph.exec, stream), "cuGraphLaunch")
        else:
            raise ValueError(f"unknown command {cmd!r}")

    # -- kernels ----------------------------------------------------------------------------------
    def quantized_activations(self, kind: str, dtype: str, rows: int, n: int, k: int) -> bool:
        """Where the product would run ``_pq`` (``_launch.quantized_activations``: XINFER_PREQUANT=0
        turns it off)."""
        return _launch.quantized_activations(kind, dtype, rows, n, k, self.multiprocessors, self.stage_max,
                                             self.compute_capability, self.pq_stage_max)

    def normq_fits(self, dtype: str, rows: int, n: int, k: int) -> bool:
        """``_launch.normq_fits`` on this device (XINFER_NORMQ=0 turns it off)."""
        return _launch.normq_fits(dtype, n, k, self.multiprocessors, self.compute_capability, self.pq_stage_max)

    def pair_fits(self, dtype: str, dtype2: str, n: int, n2: int, k: int) -> bool:
        """``_launch.pair_fits`` on this device (XINFER_QPAIR=0 turns it off)."""
        return _launch.pair_fits(dtype, dtype2, n, n2, k, self.multiprocessors, self.compute_capability,
                                 self.pq_stage_max)

    def load_kernel(self, spec: Any) -> CUDAKernel:
        """The kernel ``spec`` (an ``ops.KernelSpec``, or its name) compiled for this device, once
        (``_kernel.load_kernel``: NVRTC, entry points, launch geometry from the declaration).

        Raises:
            KernelCompileError: NVRTC rejected the source (``.log`` has the log).
            ValueError: an unknown kernel, no launch configuration or no shader file for it.
        """
        name = spec if isinstance(spec, str) else spec.name
        if name not in self._kernels:
            self._kernels[name] = load_kernel(self, spec)
        return self._kernels[name]

    # -- gemm -------------------------------------------------------------------------------------
    def _gemm_handle(self):
        if self._cublas is None:
            from ._cublas import CublasHandle

            ws = self.alloc(_CUBLAS_WORKSPACE)
            self._cublas = CublasHandle(ws, _CUBLAS_WORKSPACE)
            self._cublas_ws = ws
        return self._cublas

    def cublaslt(self):
        """The device's ``LtHandle`` (made on first use), its algorithms timed on this device
        (``_gemm_tune.time_launches``)."""
        if self._cublaslt is None:
            from ._cublaslt import LtHandle
            from ._gemm_tune import time_launches

            self.make_current()
            self._cublaslt = LtHandle(timer=lambda nbytes, launches: time_launches(self, nbytes, launches),
                                      of_buckets=self.gemm_buckets)
        return self._cublaslt

    def create_gemm(self, dtype: Any, m: int, n: int, k: int, trans_b: bool, out_dtype: Any = None):
        """cuBLAS (``out_dtype`` None or ``dtype``), or, for f16 operands with ``trans_b`` and an f32
        ``out_dtype``, cuBLASLt with one algorithm per ``(n, k)`` and bucket of m (``_cublaslt.py``).

        Raises:
            ValueError: another combination of dtypes.
        """
        from ._cublas import Gemm, dtype_name

        self.make_current()
        if out_dtype is not None and dtype_name(out_dtype) != dtype_name(dtype):
            if (dtype_name(dtype), dtype_name(out_dtype), trans_b) != ("f16", "f32", True):
                raise ValueError(f"gemm out_dtype={out_dtype!r} with dtype={dtype!r}, trans_b={trans_b}: only f16 "
                                 "operands with trans_b may give f32")
            return self.cublaslt().gemm_for(m, n, k)
        g = Gemm(dtype, m, n, k, trans_b)
        self._gemm_handle()
        return g

    def gemm_workspace_nbytes(self, gemm: Any) -> int:
        """The workspace a cuBLASLt GEMM's algorithm needs at its m (a decode-bucket split-K one); 0
        for the others."""
        return gemm.workspace_nbytes if isinstance(gemm, LtGemm) else 0

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
        """Capture ``commands`` (copy, fill, dispatch, gemm) into an instantiated CUDA graph (``_graph.py``).

        Raises:
            ValueError: a command that cannot be captured (upload, download, timestamp, graph).
            DeviceError: capture or instantiation failed.
        """
        GraphCapture.validate(commands)
        self.make_current()
        return self._graphs.capture(commands)

    def destroy_graph(self, graph: CUDAGraph) -> None:
        self.make_current()
        self._graphs.destroy(graph)

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
        if self._cublaslt is not None:
            self._cublaslt.close()
        if self._cublas is not None:
            self._cublas.close()
            lib.cuMemFree_v2(self._cublas_ws)
        for k in self._kernels.values():
            lib.cuModuleUnload(k.module)
        if self.timeline is not None:
            self.timeline.close()
        self._kernels.clear()
        self._graphs.close()
        self._pinned.close()
        for c in list(self._counters):  # the fences copied their last values (Fence.close)
            c.free()
        lib.cuDevicePrimaryCtxRelease_v2(self.device)
