"""``Device``: the policy every backend shares (validation, deferred frees, queues, pools)."""

from __future__ import annotations

import collections
import threading
import warnings
from typing import Any, Callable

import numpy as np

from ..hal import Backend, DeviceError, DType, FenceTimeoutError, TensorDesc
from ..hal._layout import check_whole_blocks, enclosing_blocks, gguf_span, write_in_device_layout
from ._allocator import CachingAllocator, size_class
from ._buffer import BufferView, DeviceBuffer, as_view, host_bytes
from ._executor import Executor
from ._pool import CommandListPool
from ._queue import Queue, abandon
from ._timer import GpuTimer

#: ``(device, name) -> kernel``: what ``Device.kernel`` builds a kernel with (``ops.ComputeKernel``)
KernelFactory = Callable[["Device", str], Any]


class Device:
    """A device: memory, queues with timeline fences, a pool of command lists, kernels, timers.

    Backends subclass it only to pick their ``Backend`` and hand it the kernels (``CPUDevice``,
    ``CUDADevice``); everything here is backend-neutral.

    Args:
        backend: the primitives (a ``hal.Backend``).
        kernels: ``(device, name) -> kernel``, what ``kernel(name)`` builds a kernel with (the
            backends' devices pass ``ops.ComputeKernel``; ``ops`` builds on this layer, so this layer
            does not import it).
        command_lists: size of the ``command_lists`` pool.
        validate: run the validation layer on recorded commands (state, lifetime, hazards).

    Raises:
        TypeError: ``backend`` is not a ``hal.Backend`` or ``kernels`` is not callable.
    """

    def __init__(self, backend: Backend, *, kernels: KernelFactory, command_lists: int = 8, validate: bool = True):
        if not isinstance(backend, Backend):
            raise TypeError(f"backend must be a hal.Backend, got {type(backend).__name__}")
        if not callable(kernels):
            raise TypeError(f"kernels must be a callable (device, name) -> kernel, got {type(kernels).__name__}")
        self.backend = backend
        self.kernel_factory = kernels
        self.allocator = CachingAllocator(backend)
        self.name = backend.name
        self.description = getattr(backend, "description", backend.name)
        self.validate = validate
        self._lost: DeviceError | None = None
        self._deferred: list[tuple[int, int, dict]] = []  # (address, nbytes, last_use) of freed buffers
        self._dropped: collections.deque = collections.deque()  # from finalizers, any thread
        self._mem_lock = threading.RLock()
        #: bumped by every DeviceBuffer.free(): a command list or graph whose buffers were all
        #: live at an epoch still current skips its per-buffer use-after-free checks (frees come
        #: from the trio thread; one on another thread racing a replay could slip past them)
        self.free_epoch = 0
        self._kernels: dict[str, Any] = {}
        self._pool = None
        self._pool_size = command_lists
        self.allocated_bytes = 0
        self.peak_allocated_bytes = 0
        #: address -> bytes of every block a buffer holds (allocated, not yet back in the allocator):
        #: ``close`` frees those still held, so memory a model never freed goes back with the device
        self._live: dict[int, int] = {}
        self._queues: list[Queue] = []
        self.queue = self.create_queue()
        self._closed = False

    # -- lifetime --------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise DeviceError(f"device {self.name} is closed")

    def _check_alive(self) -> None:
        self._check_open()
        if self._lost is not None:
            raise self._lost
        for q in self._queues:
            err = q._error()
            if err is not None and getattr(err, "sticky", True):
                self._lost = err
                raise err

    def close(self, timeout_s: float = 30.0) -> None:
        """Wait for all work, free everything, and release the device. Idempotent.

        Args:
            timeout_s: how long to wait for submitted work. Work still pending then (a queue
                waiting on a fence value that never comes) keeps its memory and the backend's
                context: they are leaked with a ``ResourceWarning`` rather than freed under the
                device's feet.
        """
        if self._closed:
            return
        stuck = False
        try:
            self.synchronize(timeout_s)
        except FenceTimeoutError:
            stuck = True
            warnings.warn(f"{self.name}: work still pending after {timeout_s} s at close; its memory is leaked",
                          ResourceWarning, stacklevel=2)
        except Exception:
            pass  # a device error: the work is over either way
        if not stuck:
            with self._mem_lock:
                self._closed = True  # from here a free() or a dropped buffer touches nothing
                try:
                    self._reap_locked(force=True)
                    for address, nbytes in self._live.items():  # buffers still held: a model's weights
                        self.allocator.free(address, nbytes)
                    self.allocator.release_all()
                except DeviceError:
                    pass  # a lost device refuses frees: what is left goes with its context
                self._live.clear()
                self._deferred.clear()
                self._dropped.clear()
                self.allocated_bytes = 0
        try:
            for q in self._queues:
                if stuck and q.fence.completed_value < q.fence.submitted_value:
                    # its work is still pending: closing would wait on it (cpu: a 10 s thread join)
                    # and free the fence's eventfd and counter that work will still signal; the
                    # queue is leaked with that work's memory, for the life of the process
                    abandon(q)
                    continue
                q.close()
        finally:
            self._closed = True
            if not stuck:
                self.backend.close()

    def __enter__(self) -> "Device":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def synchronize(self, timeout_s: float | None = None) -> None:
        """Block until every queue has completed everything submitted."""
        for q in self._queues:
            q.fence.wait_blocking(q.fence.submitted_value, timeout_s)
        self._reap()

    # -- queues and pools ------------------------------------------------------------------
    def create_queue(self) -> Queue:
        """A new in-order queue with its own fence (cuda: a stream)."""
        q = Queue(self, self.backend.create_queue(), len(self._queues))
        q.fence.add_listener(self._reap)
        self._queues.append(q)
        return q

    @property
    def command_lists(self):
        """The device's ``CommandListPool`` (created on first use)."""
        if self._pool is None:
            self._pool = CommandListPool(self, self._pool_size)
        return self._pool

    def executor(self, **kwargs) -> Executor:
        """A new one-shot command list (``Executor``); see its arguments."""
        return Executor(self, **kwargs)

    def timer(self) -> GpuTimer:
        """A ``GpuTimer`` for this device."""
        return GpuTimer(self)

    def kernel(self, name: str) -> Any:
        """The ``ComputeKernel`` ``name`` (see ``native/KERNELS.md``), compiled once per device.

        Raises:
            ValueError: no kernel has that name.
            KernelCompileError: its source does not compile.
        """
        k = self._kernels.get(name)
        if k is None:
            k = self._kernels[name] = self.kernel_factory(self, name)
        return k

    # -- memory ----------------------------------------------------------------------------
    def alloc(self, shape, dtype) -> DeviceBuffer:
        """Allocate an uninitialized buffer.

        Args:
            shape: int or tuple of non-negative ints.
            dtype: a ``DType``, its label or a numpy dtype.

        Raises:
            ValueError / TypeError: a bad shape or dtype (named in the message).
            DeviceOutOfMemoryError: no room, even after releasing completed deferred frees.
        """
        desc = TensorDesc(shape, dtype)
        return self._alloc_desc(desc)

    def _alloc_desc(self, desc: TensorDesc) -> DeviceBuffer:
        self._check_alive()
        with self._mem_lock:
            self._check_open()  # a close() on another thread since the check above
            self._reap()
            nbytes = size_class(desc.nbytes)
            address = self.allocator.alloc(desc.nbytes)
            self._live[address] = desc.nbytes
            self.allocated_bytes += nbytes
            self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)
        return DeviceBuffer(self, address, desc)

    def upload(self, data: Any, shape=None, dtype=None) -> DeviceBuffer:
        """Allocate a buffer and copy host data into it (synchronous). Block types the backend keeps
        in a layout of its own (``Backend.device_layouts``) are converted on the way: ``data`` is in
        GGUF's layout, as ``download`` gives it back.

        Args:
            data: a numpy array or a bytes-like object.
            shape, dtype: the buffer's description; default: the array's own. For bytes-like data
                or block-quantized dtypes both must be given and the byte count must match.

        Raises:
            ValueError: the byte count of ``data`` differs from ``shape`` x ``dtype``.
            TypeError: an unsupported dtype, ``data`` is not array-like, or ``data`` is a numpy
                array of another element type than ``dtype`` (raw ``uint8`` bytes are accepted for
                any dtype, ``uint16`` for bf16).
        """
        host = host_bytes(data)
        if shape is None and dtype is None and isinstance(data, np.ndarray):
            desc = TensorDesc(data.shape, DType.parse(data.dtype))
        elif shape is None or dtype is None:
            if isinstance(data, np.ndarray):
                desc = TensorDesc(data.shape if shape is None else shape, data.dtype if dtype is None else dtype)
            else:
                raise ValueError("upload of bytes-like data needs both shape and dtype")
        else:
            desc = TensorDesc(shape, dtype)
        if isinstance(data, np.ndarray) and data.dtype != np.uint8:
            want = desc.dtype.numpy_type
            raw_ok = want is None and desc.dtype.block_nbytes == data.dtype.itemsize and desc.dtype.block_size == 1
            if (want is not None and data.dtype != np.dtype(want)) or (want is None and not raw_ok):
                raise TypeError(
                    f"data has dtype {data.dtype} but dtype={desc.dtype.label}; convert it first "
                    f"(or pass raw uint8 bytes)"
                )
        if host.nbytes != desc.nbytes:
            raise ValueError(f"data has {host.nbytes} bytes but shape={desc.shape} dtype={desc.dtype.label} needs {desc.nbytes}")
        buf = self._alloc_desc(desc)
        if host.nbytes:
            write_in_device_layout(self.backend, desc.dtype.label, buf.address, host)
        return buf

    def write(self, buffer: DeviceBuffer, data: Any, offset: int = 0) -> None:
        """Synchronously copy host bytes into ``buffer`` (a buffer or view) at byte ``offset``, after
        any submitted work that uses the buffer has completed. For a dtype the backend keeps in a
        layout of its own (``Backend.device_layouts``) the bytes are GGUF's and converted here.

        Raises:
            ValueError: the bytes run past the buffer; or the buffer's dtype has a device layout and
                the bytes are not whole blocks starting at a block boundary of the buffer.
            DeviceError: the device is closed (its memory went back with it).
        """
        self._check_open()
        view = as_view(buffer, self, "buffer")
        host = host_bytes(data)
        if offset < 0 or offset + host.nbytes > view.nbytes:
            raise ValueError(f"write of {host.nbytes} bytes at offset={offset} runs past {view.nbytes} bytes")
        label = view.buffer.dtype.label
        if host.nbytes and label in self.backend.device_layouts:
            check_whole_blocks(label, view.offset + offset, host.nbytes, "write")
        self._wait_unused(view.buffer)
        write_in_device_layout(self.backend, label, view.address + offset, host)

    def download(self, buffer: DeviceBuffer | BufferView) -> bytes:
        """The buffer's (or view's) bytes, after any submitted work that uses it has completed; for
        a dtype the backend keeps in a layout of its own (``Backend.device_layouts``), GGUF's bytes
        (a view of part of a block reads the whole blocks around it and converts them).

        Raises:
            ValidationError: the buffer was freed.
            ValueError: it belongs to another device.
            DeviceError: the device is closed (its memory went back with it).
        """
        self._check_open()
        view = as_view(buffer, self, "buffer")
        self._wait_unused(view.buffer)
        label = view.buffer.dtype.label
        if view.nbytes and label in self.backend.device_layouts:
            lo, hi = enclosing_blocks(label, view.offset, view.nbytes)
            raw = np.empty(hi - lo, np.uint8)
            self.backend.read(view.buffer.address + lo, memoryview(raw))
            return gguf_span(label, raw, view.buffer.address + lo, view.offset - lo, view.nbytes).tobytes()
        out = bytearray(view.nbytes)
        if view.nbytes:
            self.backend.read(view.address, memoryview(out))
        return bytes(out)

    def download_numpy(self, buffer: DeviceBuffer) -> np.ndarray:
        """The buffer as a numpy array of its shape and dtype (raw ``uint8`` for block types, bf16
        and ``BufferView``s).

        Raises: as ``download``.
        """
        raw = self.download(buffer)
        dt = getattr(buffer, "dtype", None)  # a BufferView has bytes, not a dtype
        if dt is None or dt.numpy_type is None:
            return np.frombuffer(raw, np.uint8).copy()
        return np.frombuffer(raw, dt.numpy_type).reshape(buffer.shape).copy()

    def _wait_unused(self, buf: DeviceBuffer) -> None:
        for q, v in list(buf.last_use.items()):
            q.fence.wait_blocking(v)

    def _free_buffer(self, buf: DeviceBuffer) -> None:
        with self._mem_lock:
            if self._closed:  # close() gave the block back already (or leaked it with the stuck work)
                return
            self._deferred.append((buf.address, buf.nbytes, buf.last_use))
            self._reap()

    def _free_dropped(self, address: int, nbytes: int, last_use: dict) -> None:
        """Finalizer of a buffer dropped without ``free()``; may run on any thread, so it only
        queues the block (deque appends are atomic) for the next ``_reap``."""
        if not self._closed:
            self._dropped.append((address, nbytes, last_use))

    def _reap(self, force: bool = False) -> None:
        """Free deferred buffers whose every use has completed. Memory bookkeeping may be reached
        from several threads (a fence's progress listeners run on whichever thread waits; ``load``
        builds in a worker thread), so it holds ``_mem_lock``."""
        with self._mem_lock:
            self._reap_locked(force)

    def _reap_locked(self, force: bool) -> None:
        while self._dropped:
            self._deferred.append(self._dropped.popleft())
        if not self._deferred:
            return
        keep = []
        for entry in self._deferred:
            address, nbytes, last_use = entry
            if not force and any(q.fence.completed_value < v for q, v in list(last_use.items())):
                keep.append(entry)
                continue
            if self._live.pop(address, None) is None:
                continue  # close() freed it already
            self.allocator.free(address, nbytes)
            self.allocated_bytes -= size_class(nbytes)
        self._deferred = keep

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"
