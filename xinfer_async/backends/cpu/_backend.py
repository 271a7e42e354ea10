"""The cpu backend: host memory, a queue thread per queue, kernels in C (``native/``).

The queue thread runs each submitted list in order; native kernels release the GIL, so trio keeps
serving other tasks while the "device" works. After a list, the thread calls the native
``xi_fence_signal``, which stores the fence value and writes the fence's eventfd.
"""

from __future__ import annotations

import os
import queue as _queue
import threading
import time
import dataclasses
from typing import Any, Sequence

import numpy as np

from ... import _native, _omp
from ..._switches import env_switch
from ...hal import Backend, BackendQueue, DeviceError, DeviceOutOfMemoryError, DType
from ...hal._commands import (Command, CopyCmd, DispatchCmd, DownloadCmd, FillCmd, GemmCmd, ReplayCmd, TimestampCmd,
                              UploadCmd)
from ...ops._kernels import REPACKED_DTYPES
from . import _isa

ffi, lib = _native.ffi, _native.lib
_REPLAY_FORCED = _omp.replay_threads()  # XINFER_CPU_TEAM: a forced xi_replay mode, or None (chosen per step)
#: block type -> its row-interleaved layout (ops._kernels.REPACKED_DTYPES, inverted)
_REPACKED = {base: r8 for r8, base in REPACKED_DTYPES.items()}
_ALIGN = 256


def _host_view(address: int, nbytes: int) -> np.ndarray:
    return np.frombuffer(ffi.buffer(ffi.cast("char *", address), nbytes), np.uint8)


class _Kernel:
    __slots__ = ("name", "fn", "ptr", "share")

    def __init__(self, name: str, fn: Any):
        self.name = name
        self.fn = fn
        self.ptr = ffi.addressof(lib, f"xi_k_{name}")  # for xi_op.kernel
        self.share = lib.xi_share_of(name.encode())  # its share form (native/kernels/xi_common.h) or NULL

    def launch_grid(self, constants: dict) -> tuple:
        return (1, 1, 1)


class _Timestamp:
    __slots__ = ("ns",)

    def __init__(self):
        self.ns: int | None = None


class _Gemm:
    def __init__(self, dtype: DType, m: int, n: int, k: int, trans_b: bool, out_dtype: DType | None = None):
        self.dtype, self.m, self.n, self.k, self.trans_b = dtype, m, n, k, trans_b
        self.out_dtype = dtype if out_dtype is None else DType.parse(out_dtype)

    def _load(self, address: int, shape: tuple) -> np.ndarray:
        isz = self.dtype.block_nbytes
        raw = _host_view(address, shape[0] * shape[1] * isz)
        if self.dtype is DType.bf16:
            return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
        return raw.view(self.dtype.numpy_type).reshape(shape)

    def run(self, a: int, b: int, c: int) -> None:
        A = self._load(a, (self.m, self.k))
        B = self._load(b, (self.n, self.k) if self.trans_b else (self.k, self.n))
        if self.trans_b:
            B = B.T
        if self.dtype is DType.f32:
            np.matmul(A, B, out=self._load(c, (self.m, self.n)))
            return
        out = np.matmul(A.astype(np.float32), B.astype(np.float32))
        if self.out_dtype is DType.f32:  # f16 operands, f32 result (the GEMM regime)
            _host_view(c, out.size * 4).view(np.float32)[:] = out.reshape(-1)
            return
        if self.dtype is DType.bf16:
            bits = out.view(np.uint32)
            rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
            _host_view(c, out.size * 2).view(np.uint16)[:] = rounded.reshape(-1)
        else:
            _host_view(c, out.size * 2).view(np.float16)[:] = out.astype(np.float16).reshape(-1)


_XI_ENOMEM = 2  # native/xinfer_native.h (a literal: a module built from older sources lacks the name)


def _kernel_failed(kernel: _Kernel, rc: int) -> None:
    """Raise for a native kernel's nonzero return code."""
    if rc == _XI_ENOMEM:
        raise DeviceOutOfMemoryError(f"kernel {kernel.name}: no host memory for its scratch (XI_ENOMEM)", "XI_OOM")
    raise DeviceError(f"kernel {kernel.name} rejected its constants (XI_EINVAL)", "XI_EINVAL")


@dataclasses.dataclass(frozen=True)
class _PreparedRun:
    """Consecutive dispatches of a captured list as one native op list (``CPUBackend.capture``):
    ``plan`` (``xi_replay_prepare``'s, run by one ``xi_replay`` call), ``kernels`` (each op's
    ``_Kernel``, for errors), ``keep`` (the ``xi_op`` array and the argument arrays it points at)."""

    plan: Any
    kernels: tuple
    keep: tuple


def _prepare_run(dispatches: Sequence[DispatchCmd]) -> _PreparedRun:
    ops = ffi.new("xi_op[]", len(dispatches))
    keep = []
    for op, cmd in zip(ops, dispatches):
        argv = ffi.new("void *[]", [ffi.cast("void *", a) for a in cmd.addresses] or [ffi.NULL])
        consts = ffi.new("char[]", bytes(cmd.constants) or b"\0")
        keep += (argv, consts)
        op.kernel, op.b, op.c, op.share = cmd.kernel.ptr, argv, consts, cmd.kernel.share
    plan = lib.xi_replay_prepare(ops, len(dispatches))
    if plan == ffi.NULL:
        raise DeviceOutOfMemoryError(f"cpu: no host memory to plan a replay of {len(dispatches)} kernels", "XI_OOM")
    return _PreparedRun(ffi.gc(plan, lib.xi_replay_free), tuple(cmd.kernel for cmd in dispatches), (ops, *keep))


@dataclasses.dataclass(frozen=True)
class _Wait:
    """A queue-thread item: wait until ``other`` has completed ``value`` (``CPUQueue.wait_for``)."""

    other: "CPUQueue"
    value: int


class CPUQueue(BackendQueue):
    """A queue thread that executes lowered command lists in order."""

    def __init__(self, backend: "CPUBackend", index: int):
        self.backend = backend
        self.error: DeviceError | None = None
        self._items: _queue.SimpleQueue = _queue.SimpleQueue()
        self._done = 0
        self._cond = threading.Condition()
        self._modes = _omp.ReplayModes(_REPLAY_FORCED)  # xi_replay's mode a captured step (_omp.py)
        self._thread = threading.Thread(target=self._run, name=f"xinfer-cpu-queue-{index}", daemon=True)
        self._thread.start()

    def execute(self, commands: Sequence[Command], signal: Any) -> None:
        self._items.put((commands, signal))

    def wait_for(self, other: BackendQueue, value: int) -> None:
        self._items.put(_Wait(other, value))

    def close(self) -> bool:
        self._items.put(None)
        self._thread.join(timeout=10)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            item = self._items.get()
            if item is None:
                return
            if type(item) is _Wait:
                other, value = item.other, item.value
                with other._cond:
                    other._cond.wait_for(lambda: other._done >= value or other.error is not None)
                continue
            commands, signal = item
            if self.error is None:
                try:
                    self._execute(commands)
                except DeviceError as exc:
                    self.error = exc
                except Exception as exc:  # a backend bug must not kill the queue thread silently
                    self.error = DeviceError(f"cpu queue: {type(exc).__name__}: {exc}", "XI_INTERNAL")
            with self._cond:
                self._done = int(signal.value)
                self._cond.notify_all()
            lib.xi_fence_signal(signal)

    def _execute(self, commands: Sequence[Any]) -> None:
        for cmd in commands:
            kind = type(cmd)
            if kind is DispatchCmd:
                kernel = cmd.kernel
                rc = kernel.fn(ffi.new("void *[]", [ffi.cast("void *", a) for a in cmd.addresses]),
                               ffi.from_buffer(cmd.constants))
                if rc:
                    _kernel_failed(kernel, rc)
            elif kind is _PreparedRun:
                failed = ffi.new("int *")
                mode = self._modes.pick(id(cmd))
                t0 = time.perf_counter()
                rc = lib.xi_replay(cmd.plan, mode, failed)  # GIL released for the whole list
                self._modes.record(id(cmd), mode, time.perf_counter() - t0)
                if rc:
                    _kernel_failed(cmd.kernels[failed[0]], rc)
            elif kind is ReplayCmd:
                self._execute(cmd.graph)
            elif kind is CopyCmd:
                if cmd.nbytes:
                    np.copyto(_host_view(cmd.dst, cmd.nbytes), _host_view(cmd.src, cmd.nbytes))
            elif kind is FillCmd:
                if cmd.nbytes:
                    _host_view(cmd.dst, cmd.nbytes).view(np.uint32).fill(cmd.pattern)
            elif kind is UploadCmd:
                host = cmd.host
                if host.nbytes:
                    np.copyto(_host_view(cmd.dst, host.nbytes), host)
            elif kind is DownloadCmd:
                host = cmd.host
                if host.nbytes:
                    np.copyto(host, _host_view(cmd.src, host.nbytes))
            elif kind is GemmCmd:
                cmd.gemm.run(cmd.a, cmd.b, cmd.c)
            elif kind is TimestampCmd:
                cmd.ts.ns = time.perf_counter_ns()
            else:
                raise DeviceError(f"cpu queue: unknown command {cmd!r}", "XI_INTERNAL")


class CPUBackend(Backend):
    """Host memory and queue threads; kernels from the native module."""

    def __init__(self, memory_limit_bytes: int | None = None):
        """Raises: ValueError: ``XINFER_CPU_REPACK`` is set to something other than '', 0 or 1 (``env_switch``), or
        ``XINFER_CPU_ISA`` names no path or one this cpu cannot run (``_isa.configure``)."""
        self.name = "cpu"
        repack = env_switch(os.environ, "XINFER_CPU_REPACK")
        isa = _isa.configure()
        #: matrix weights of q8_0 / q4_0 / q4_1 are repacked at load into the row-interleaved *_r8
        #: layouts (native/kernels/q8dot.c), unless XINFER_CPU_REPACK=0
        self.repack_weights = repack
        self.description = f"cpu ({os.cpu_count()} cores, native C kernels, int8 dot products: {isa})"
        self._arrays: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()
        self._queues: list[CPUQueue] = []
        self._allocated = 0
        self.memory_limit_bytes = memory_limit_bytes

    def alloc(self, nbytes: int) -> int:
        if self.memory_limit_bytes is not None and self._allocated + nbytes > self.memory_limit_bytes:
            raise DeviceOutOfMemoryError(
                f"cpu: allocation of {nbytes} bytes exceeds the memory limit of {self.memory_limit_bytes}", "XI_OOM")
        try:
            arr = np.empty(nbytes + _ALIGN, np.uint8)
        except MemoryError:
            raise DeviceOutOfMemoryError(f"cpu: no room for {nbytes} bytes", "XI_OOM") from None
        base = arr.ctypes.data
        address = base + (-base % _ALIGN)
        with self._lock:
            self._arrays[address] = arr
            self._allocated += nbytes
        return address

    def free(self, address: int) -> None:
        with self._lock:
            arr = self._arrays.pop(address)
            self._allocated -= arr.nbytes - _ALIGN

    def write(self, address: int, data: memoryview) -> None:
        src = np.frombuffer(data, np.uint8)
        np.copyto(_host_view(address, src.nbytes), src)

    def read(self, address: int, out: memoryview) -> None:
        dst = np.frombuffer(out, np.uint8)
        np.copyto(dst, _host_view(address, dst.nbytes))

    def matrix_dtype(self, dtype: DType, shape: tuple) -> DType:
        if self.repack_weights and len(shape) == 2 and shape[1] % 32 == 0:
            return _REPACKED.get(dtype, dtype)
        return dtype

    def repack(self, data: np.ndarray, dtype: DType, shape: tuple, layout: DType) -> np.ndarray:
        if _REPACKED.get(dtype) is not layout or len(shape) != 2:
            raise ValueError(f"cpu: no layout {layout.label} for a {dtype.label} matrix of shape {shape}")
        N, K = shape
        src = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if src.nbytes != dtype.nbytes(N * K):
            raise ValueError(f"data has {src.nbytes} bytes but shape={shape} dtype={dtype.label} needs {dtype.nbytes(N * K)}")
        out = np.empty_like(src)
        rc = getattr(lib, f"xi_repack_{dtype.label}_r8")(ffi.from_buffer(src), ffi.from_buffer(out), N, K)
        if rc:
            raise ValueError(f"cpu: xi_repack_{dtype.label}_r8 rejected shape={shape}")
        return out

    def create_queue(self) -> CPUQueue:
        q = CPUQueue(self, len(self._queues))
        self._queues.append(q)
        return q

    def load_kernel(self, spec: Any) -> _Kernel:
        if not getattr(spec, "cpu", True):
            raise DeviceError(f"cpu: kernel {spec.name!r} runs on cuda only (native/KERNELS.md)", "XI_NO_KERNEL")
        fn = getattr(lib, f"xi_k_{spec.name}", None)
        if fn is None:
            raise DeviceError(f"cpu: the native module has no kernel xi_k_{spec.name} (built from older "
                              "sources? rebuild it: pip install -e .)", "XI_NO_KERNEL")
        return _Kernel(spec.name, fn)

    def create_gemm(self, dtype: Any, m: int, n: int, k: int, trans_b: bool, out_dtype: Any = None) -> _Gemm:
        return _Gemm(dtype, m, n, k, trans_b, out_dtype)

    def create_timestamp(self) -> _Timestamp:
        return _Timestamp()

    def elapsed_ms(self, start: _Timestamp, end: _Timestamp) -> float:
        return (end.ns - start.ns) / 1e6

    def capture(self, commands: Sequence[Command]) -> tuple:
        """The cpu "graph": each run of consecutive dispatches becomes a native op list that one
        ``xi_replay`` call runs (native/kernels/team.c); other commands are kept as they are."""
        out: list[Any] = []
        run: list[DispatchCmd] = []
        for cmd in commands:
            if type(cmd) is DispatchCmd:
                run.append(cmd)
                continue
            if run:
                out.append(_prepare_run(run))
                run = []
            out.append(cmd)
        if run:
            out.append(_prepare_run(run))
        return tuple(out)

    def close(self) -> None:
        for q in self._queues:
            q.close()
