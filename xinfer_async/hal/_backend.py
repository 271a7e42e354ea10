"""The interface a backend implements (``Backend``, ``BackendQueue``): the primitives it supplies,
and nothing else. ``runtime.Device`` is built on one ``Backend``; code is typed against these classes.

Policy (validation, resource-state tracking, pooling, deferred frees, fences, scheduling, error
wrapping) lives in ``runtime/`` and ``model/``. A backend (``backends/cpu``, ``backends/cuda``)
implements the two abstract classes below over raw addresses and lowered commands.

Lowered commands, as handed to :meth:`BackendQueue.execute` and :meth:`Backend.capture`, are the
frozen records of ``hal/_commands.py``, one per kind (addresses are plain ``int``): ``CopyCmd``,
``FillCmd``, ``UploadCmd``, ``DownloadCmd``, ``DispatchCmd`` (``kernel`` from
:meth:`Backend.load_kernel`), ``GemmCmd`` (``gemm`` from :meth:`Backend.create_gemm`),
``TimestampCmd`` (``ts`` from :meth:`Backend.create_timestamp`) and ``ReplayCmd`` (a graph from
:meth:`Backend.capture`). A backend dispatches on the record's type.
"""

from __future__ import annotations

import abc
from typing import Any, Sequence

from ..hal._commands import Command as Command


class BackendQueue(abc.ABC):
    """One in-order queue (cpu: a queue thread; cuda: a stream)."""

    @abc.abstractmethod
    def execute(self, commands: Sequence[Command], signal: Any) -> None:
        """Enqueue ``commands`` and return at once.

        After the last command has completed on the device, the backend calls the native
        ``xi_fence_signal(signal)`` (cuda: as a ``cuLaunchHostFunc`` host callback). A command that
        fails sets ``self.error`` (a :class:`~xinfer_async.hal.DeviceError`) before the signal.
        """

    def wait_for(self, other: "BackendQueue", value: int) -> None:
        """Make later work on this queue wait until ``other``'s fence counter reaches ``value``
        (an ``int``), which may not be submitted yet: the wait holds until it is (cpu: the queue
        thread waits; cuda: ``cuStreamWaitValue64`` on the mapped counter, see
        :meth:`Backend.fence_counter`)."""

    def close(self) -> bool:
        """Stop accepting work; pending work completes first. Returns False when it gave up waiting
        for it (work stalled on a value that never comes): that work may still signal the fence."""


class Backend(abc.ABC):
    """Memory, queues, kernels and timestamps of one device."""

    name: str
    #: human-readable device description, e.g. "NVIDIA H200 (sm_90, 139 GiB)"
    description: str
    #: the dtype labels whose device bytes this backend keeps in a layout of ``hal/_layout.py``
    #: (``"q6_k"``: super-blocks rotated to 16-byte aligned ``ql``/``qh``) rather than GGUF's; the
    #: runtime converts at every host/device boundary, so users see GGUF's bytes either way
    device_layouts: frozenset[str] = frozenset()

    @abc.abstractmethod
    def alloc(self, nbytes: int) -> int:
        """Allocate ``nbytes`` (> 0) of device memory, 256-byte aligned; returns its address.

        Raises:
            DeviceOutOfMemoryError: the device has no room.
        """

    @abc.abstractmethod
    def free(self, address: int) -> None:
        """Free an allocation; the runtime calls it only after every fence that used it completed."""

    @abc.abstractmethod
    def write(self, address: int, data: memoryview) -> None:
        """Synchronously copy host bytes to device memory no queued work is touching."""

    @abc.abstractmethod
    def read(self, address: int, out: memoryview) -> None:
        """Synchronously copy device bytes into the writable host buffer ``out``."""

    def host_array(self, nbytes: int):
        """A writable C-contiguous ``numpy.uint8`` array of ``nbytes`` for ``upload``/``download``
        commands. cuda returns page-locked (pinned) memory so the copies are truly asynchronous;
        the runtime keeps the array alive until the list's fence completes."""
        import numpy as np

        return np.empty(nbytes, np.uint8)

    def fence_counter(self, queue: BackendQueue) -> tuple[Any, Any]:
        """The completed-value counter of ``queue``'s ``Fence``: ``(int64_t *, keepalive)``, the
        pointer a cdata of ``xinfer_async._native``'s ffi, zero-initialized, which
        ``xi_fence_signal`` stores into atomically; ``keepalive`` owns the memory and is held as
        long as the fence. The default is ordinary host memory. cuda returns mapped pinned memory
        that the GPU can read too, so ``BackendQueue.wait_for`` can wait on a value that is not
        submitted yet (``cuStreamWaitValue64``, as a D3D12 queue waits on a fence).
        """
        from .. import _native

        p = _native.ffi.new("int64_t *", 0)
        return p, p

    def matrix_dtype(self, dtype: Any, shape: tuple) -> Any:
        """The ``DType`` this backend keeps a matrix weight of ``dtype`` (a ``DType``) and ``shape``
        ``(N, K)`` in: ``dtype`` itself (the default), or a layout of its own with the same byte
        count that its kernels read faster (the cpu backend's row-interleaved ``*_r8``), made by
        ``repack`` at load."""
        return dtype

    def quantized_activations(self, kind: str, dtype: str, rows: int, n: int, k: int) -> bool:
        """Whether a matrix product of ``kind`` (``matmul``, ``rmsnorm_matmul``,
        ``rmsnorm_matmul_swiglu``: ops/_kernels.py) with an ``(n, k)`` weight of matrix dtype label
        ``dtype`` on ``rows`` tokens should be given its tokens quantized once beforehand: the model
        then runs ``quantize_q8_1`` (or ``rmsnorm_quantize_q8_1``) and ``qmatmul_DT`` (or
        ``qmatmul_swiglu_DT``), which give the product's own bits. False by default (the cpu
        backend: its kernels quantize inside, and it has no ``qmatmul``)."""
        return False

    def normq_fits(self, dtype: str, rows: int, n: int, k: int) -> bool:
        """Whether a residual ``matmul`` product with an ``(n, k)`` weight of matrix dtype label
        ``dtype`` on ``rows`` tokens, its tokens quantized beforehand (``quantized_activations``), may
        also write the next product's tokens -- rmsnorm(y) * norm, quantized with block sums of
        squares -- in the same launch (``qmatmul_normq_DT``), for ``qmatmul_rms_DT`` /
        ``qmatmul_rms_swiglu_DT`` to read; the same answer for every ``rows`` of 1..8 (a row's bits
        do not depend on its batch). False by default (the cpu backend has no ``qmatmul``)."""
        return False

    def pair_fits(self, dtype: str, dtype2: str, n: int, n2: int, k: int) -> bool:
        """Whether two products on the same quantized tokens -- ``(n, k)`` of ``dtype`` and ``(n2, k)``
        of ``dtype2``, each taking its tokens quantized (``quantized_activations``) -- run as one
        launch (``qmatmul_pair_A_B``, a row the bits of its own type's launch). False by default
        (the cpu backend has no ``qmatmul``)."""
        return False

    def repack(self, data: Any, dtype: Any, shape: tuple, layout: Any) -> Any:
        """The bytes of the ``(N, K)`` matrix ``data`` (``numpy.uint8``, ``dtype``'s layout) in
        ``layout`` (what ``matrix_dtype`` answered): a new ``numpy.uint8`` array of the same size.

        Raises:
            ValueError: this backend has no such layout for ``dtype``.
        """
        raise ValueError(f"{self.name}: no layout {layout!r} for {dtype!r}")

    @abc.abstractmethod
    def create_queue(self) -> BackendQueue:
        """A new in-order queue."""

    @abc.abstractmethod
    def load_kernel(self, spec: Any) -> Any:
        """Compile or look up the kernel ``spec`` (its declaration, an ``ops.KernelSpec``: the cpu
        backend finds ``xi_k_<name>``, cuda compiles ``shaders/<name>.cu`` and takes the launch
        geometry from ``spec.cuda``); returns a handle for ``DispatchCmd`` commands.

        Raises:
            KernelCompileError: the source does not compile (carries the log).
        """

    @abc.abstractmethod
    def create_gemm(self, dtype: Any, m: int, n: int, k: int, trans_b: bool, out_dtype: Any = None) -> Any:
        """A GEMM handle: ``C (m, n) f32|dtype = A (m, k) @ B`` with ``B (k, n)``, or ``(n, k)``
        transposed when ``trans_b``; row-major, all three of ``dtype`` (f32, f16 or bf16), or ``C`` of
        ``out_dtype`` f32 for f16 operands with ``trans_b`` (the GEMM regime: cuda pins one
        algorithm per ``(n, k)`` and bucket of m, so a row of C never depends on the other rows, nor on
        ``m`` within a bucket)."""

    def gemm_workspace_nbytes(self, gemm: Any) -> int:
        """The device workspace bytes a ``GemmCmd`` of ``gemm`` (from ``create_gemm``) must be given
        (``GemmCmd.workspace``); 0 (the default) where it needs none."""
        return 0

    @abc.abstractmethod
    def create_timestamp(self) -> Any:
        """A timestamp slot for ``TimestampCmd`` commands."""

    @abc.abstractmethod
    def elapsed_ms(self, start: Any, end: Any) -> float:
        """Milliseconds between two recorded, completed timestamps."""

    def capture(self, commands: Sequence[Command]) -> Any:
        """Capture ``commands`` (no upload/download/timestamp) once for replay; the cpu backend
        keeps the list itself, cuda builds a CUDA graph."""
        return tuple(commands)

    def destroy_graph(self, graph: Any) -> None:
        """Release a captured graph."""

    def synchronize(self) -> None:
        """Block until every queue of this device is idle."""

    def close(self) -> None:
        """Release the device; no further calls follow."""
