"""``ModelSession`` (build a model) and ``ModelContext`` (where it runs)."""

from __future__ import annotations

from typing import Any

from ..hal import DType, TensorDesc, ValidationError
from ..runtime import CommandListPool, Device, Queue
from ..runtime._buffer import host_bytes
from ..ops import kernel_spec
from ._definition import ModelDefinition
from ._region import Allocation, AllocationKind, KernelId, Placement, Region


class ModelContext:
    """The shared scheduling and allocation domain of prepared models: a device, its queue and its
    command-list pool.

    Args:
        device: from ``open_device``.
        queue: the queue prepared slots submit to (default: the device's).
    """

    def __init__(self, device: Device, queue: Queue | None = None):
        """Raises: ValueError: ``queue`` belongs to another device."""
        if queue is not None and queue.device is not device:
            raise ValueError(f"queue is a queue of another device ({queue.device!r}), not of {device!r}")
        self.device = device
        self.queue = queue if queue is not None else device.queue

    @property
    def command_lists(self) -> CommandListPool:
        return self.device.command_lists


class ModelSession:
    """Builds a model: immutable weights (uploaded at once), private scratch sizes, kernels.

    ``freeze(context)`` turns it into a ``ModelDefinition``; the session cannot be used after.
    """

    def __init__(self, device: Device):
        self.device = device
        self._token = object()
        self._allocations: list[Allocation] = []
        self._kernels: dict[str, KernelId] = {}
        self._frozen = False

    def _check_open(self) -> None:
        if self._frozen:
            raise ValidationError("the session was frozen; build a new ModelSession")

    def matrix_dtype(self, desc: TensorDesc) -> DType:
        """The dtype a matrix weight ``desc`` (shape ``(N, K)``) has on this device once uploaded
        with ``weight(..., matrix=True)``: ``desc.dtype``, or the backend's own layout of it (the
        cpu backend's row-interleaved ``q8_0_r8``, ``q4_0_r8``, ``q4_1_r8``). Kernels are named
        after it (``matmul_<dtype>``)."""
        return self.device.backend.matrix_dtype(desc.dtype, desc.shape)

    def quantized_activations(self, kind: str, dtype: str, rows: int, n: int, k: int) -> bool:
        """Whether the device wants the tokens of a ``kind`` product with an ``(n, k)`` weight of
        ``dtype`` (a label of ``matrix_dtype``) on ``rows`` tokens quantized once beforehand
        (``Backend.quantized_activations``: then ``quantize_q8_1`` / ``rmsnorm_quantize_q8_1`` and
        ``qmatmul_DT`` / ``qmatmul_swiglu_DT``, the same bits)."""
        return self.device.backend.quantized_activations(kind, dtype, rows, n, k)

    def normq_fits(self, dtype: str, rows: int, n: int, k: int) -> bool:
        """Whether a residual product may quantize the next product's tokens in its own launch
        (``Backend.normq_fits``: ``qmatmul_normq_DT``, read by ``qmatmul_rms_DT``)."""
        return self.device.backend.normq_fits(dtype, rows, n, k)

    def pair_fits(self, dtype: str, dtype2: str, n: int, n2: int, k: int) -> bool:
        """Whether two products on the same quantized tokens run as one launch (``Backend.pair_fits``:
        ``qmatmul_pair_A_B``)."""
        return self.device.backend.pair_fits(dtype, dtype2, n, n2, k)

    def weight(self, data: Any, desc: TensorDesc, name: str = "", *, matrix: bool = False) -> Region:
        """Upload an immutable weight (once; every plan and slot shares it).

        Args:
            data: numpy array or bytes of exactly ``desc.nbytes`` bytes (raw blocks for q8_0/q4_0/q4_1).
            desc: its shape and dtype.
            matrix: it is a matrix ``(N, K)`` that kernels read as ``matrix_dtype(desc)`` (a backend
                may repack it into a layout of its own, the same byte count).

        Raises:
            ValueError: the byte count differs from ``desc``.
        """
        self._check_open()
        if not isinstance(desc, TensorDesc):
            raise TypeError(f"desc must be a TensorDesc, got {type(desc).__name__}")
        if matrix:
            layout = self.matrix_dtype(desc)
            if layout is not desc.dtype:
                host = host_bytes(data)
                if host.nbytes != desc.nbytes:
                    raise ValueError(f"data has {host.nbytes} bytes but shape={desc.shape} dtype={desc.dtype.label} "
                                     f"needs {desc.nbytes}")
                data = self.device.backend.repack(host, desc.dtype, desc.shape, layout)
                desc = TensorDesc(desc.shape, layout)
        buf = self.device.upload(data, desc.shape, desc.dtype)
        alloc = Allocation(self._token, AllocationKind.WEIGHT, desc.nbytes, Placement.DEVICE, desc, name)
        alloc.buffer = buf
        self._allocations.append(alloc)
        return alloc.region()

    def derived_weight(self, kernel: str, source: Region, desc: TensorDesc, constants: dict, name: str = "") -> Region:
        """An immutable weight computed once on the device from a weight of this session: ``kernel``
        (bindings: ``source``, the new weight of ``desc``) is launched with ``constants`` and
        awaited before this returns, so no host copy is made (the resident f16 copy of a quantized
        matrix: ``dequantize_f16_DT``).

        Raises:
            ValueError: ``source`` is not a weight of this session, or ``kernel`` rejects the
                bindings or constants (its message names them).
            DeviceOutOfMemoryError: no room for the new weight.
        """
        self._check_open()
        src = source.allocation
        if src.owner is not self._token or not src.is_weight:
            raise ValueError(f"derived_weight: source {src!r} is not a weight of this session")
        self.kernel(kernel)
        buf = self.device.alloc(desc.shape, desc.dtype)
        ex = self.device.executor()
        ex.dispatch(kernel, [src.buffer.view(source.offset, source.nbytes), buf], constants)
        ex.submit()
        self.device.synchronize()  # done before the next one: a device error surfaces here, at its weight
        alloc = Allocation(self._token, AllocationKind.WEIGHT, desc.nbytes, Placement.DEVICE, desc, name)
        alloc.buffer = buf
        self._allocations.append(alloc)
        return alloc.region()

    def scratch(self, nbytes: int, placement: Placement = Placement.DEVICE, *, persistent: bool = False,
                name: str = "") -> Region:
        """Declare private scratch of ``nbytes``: each prepared slot allocates its own.

        ``persistent=True`` makes it slot state that survives between runs of that slot (a KV
        cache); otherwise it holds temporaries and IO.

        Raises:
            ValueError: ``nbytes`` is not positive.
        """
        self._check_open()
        if not isinstance(nbytes, int) or nbytes <= 0:
            raise ValueError(f"nbytes must be a positive int, got {nbytes!r}")
        kind = AllocationKind.STATE if persistent else AllocationKind.SCRATCH
        alloc = Allocation(self._token, kind, nbytes, Placement(placement), None, name)
        self._allocations.append(alloc)
        return alloc.region()

    def kernel(self, name: str) -> KernelId:
        """Register kernel ``name`` (``native/KERNELS.md``) and compile it for the device.

        Raises:
            ValueError: no such kernel.
            KernelCompileError: it does not compile.
        """
        self._check_open()
        kernel_spec(name)
        kid = self._kernels.get(name)
        if kid is None:
            self.device.kernel(name)
            kid = self._kernels[name] = KernelId(self._token, name)
        return kid

    def synchronize(self) -> None:
        """Block until every upload has reached the device."""
        self.device.synchronize()

    def freeze(self, context: ModelContext):
        """Finish building: drain uploads, adopt weights, keep scratch as sizes only.

        Raises:
            ValueError: ``context`` is on another device.
        """
        self._check_open()
        if context.device is not self.device:
            raise ValueError(
                f"freeze: context is on another device ({context.device!r} at {id(context.device):#x}) than the "
                f"session's weights ({self.device!r} at {id(self.device):#x})"
            )
        self.synchronize()
        self._frozen = True
        return ModelDefinition(self._token, context, list(self._allocations), dict(self._kernels))
