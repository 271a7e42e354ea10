"""``Operator``: a vendor-library operation with the source's lifecycle
create -> compile -> initialize -> bind -> dispatch. ``Gemm`` is cuBLAS on cuda, numpy/BLAS on cpu."""

from __future__ import annotations

from typing import Any

from ..hal import Access, DType, ValidationError
from ..hal._commands import GemmCmd
from ..runtime._buffer import as_view
from ..runtime._device import Device


class Operator:
    """Lifecycle base: ``compile()`` builds the backend handle, ``initialize(cl)`` records any
    one-time setup, ``bind(...)`` checks the buffers, ``dispatch(cl)`` records the operation."""

    def __init__(self, device: Device):
        self.device = device
        self.handle: Any = None
        self._bound: list | None = None

    def compile(self) -> "Operator":
        raise NotImplementedError

    def initialize(self, executor: Any) -> None:
        """Record one-time setup (none needed for GEMM)."""
        if self.handle is None:
            raise ValidationError(f"{type(self).__name__}.initialize before compile()")

    def dispatch(self, executor: Any) -> None:
        raise NotImplementedError


class Gemm(Operator):
    """``C (m, n) = A (m, k) @ B``, ``B`` of shape ``(k, n)`` or ``(n, k)`` when ``trans_b``;
    row-major, all three of ``dtype`` (f32; f16 and bf16 accumulate in f32).

    Raises (create):
        ValueError: a non-positive dimension; TypeError: an unsupported dtype.
    """

    DTYPES = (DType.f32, DType.f16, DType.bf16)

    def __init__(self, device: Device, m: int, n: int, k: int, dtype: Any = "f32", trans_b: bool = False):
        super().__init__(device)
        self.dtype = DType.parse(dtype)
        if self.dtype not in self.DTYPES:
            raise TypeError(f"Gemm dtype={self.dtype.label} is not supported; choose f32, f16 or bf16")
        for name, v in (("m", m), ("n", n), ("k", k)):
            if int(v) <= 0:
                raise ValueError(f"Gemm {name}={v} must be > 0")
        self.m, self.n, self.k, self.trans_b = int(m), int(n), int(k), bool(trans_b)

    @classmethod
    def create(cls, device: Device, m: int, n: int, k: int, dtype: Any = "f32", trans_b: bool = False) -> "Gemm":
        return cls(device, m, n, k, dtype, trans_b)

    def compile(self) -> "Gemm":
        self.handle = self.device.backend.create_gemm(self.dtype, self.m, self.n, self.k, self.trans_b)
        return self

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    def bind(self, a: Any, b: Any, c: Any) -> None:
        """Raises: ValueError: a buffer smaller than its matrix (named)."""
        isz = self.dtype.block_nbytes
        need = {"a": self.m * self.k * isz, "b": self.k * self.n * isz, "c": self.m * self.n * isz}
        views = []
        for name, obj in (("a", a), ("b", b), ("c", c)):
            v = as_view(obj, self.device, name)
            if v.nbytes < need[name]:
                raise ValueError(f"Gemm binding {name!r} has {v.nbytes} bytes, needs {need[name]}")
            views.append(v.buffer.view(v.offset, need[name]))
        self._bound = views

    def dispatch(self, executor: Any) -> None:
        if self.handle is None:
            raise ValidationError("Gemm.dispatch before compile()")
        if self._bound is None:
            raise ValidationError("Gemm.dispatch before bind()")
        a, b, c = self._bound
        executor.record_operator(GemmCmd(self.handle, a.address, b.address, c.address),
                                 [(a, Access.READ, "a"), (b, Access.READ, "b"), (c, Access.WRITE, "c")])
