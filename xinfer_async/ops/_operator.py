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
    row-major, all three of ``dtype`` (f32; f16 and bf16 accumulate in f32), or ``C`` of ``out_dtype``
    f32 with f16 ``A`` and ``B`` and ``trans_b`` (the GEMM regime of ``llm/_gemm.py``: on cuda one
    cuBLASLt algorithm per ``(n, k)`` and bucket of m, so a row of C never depends on the other rows,
    nor on ``m`` within a bucket).

    ``workspace_nbytes`` (after ``compile``): the device workspace the backend's algorithm needs (a
    split-K GEMM of the decode bucket on cuda; else 0). ``bind`` takes it as ``workspace`` (a slot
    shares one among its GEMMs, which run one after another), or allocates one for this operator
    (once: later binds reuse it).

    Raises (create):
        ValueError: a non-positive dimension; TypeError: an unsupported dtype or dtype pair.
    """

    DTYPES = (DType.f32, DType.f16, DType.bf16)

    def __init__(self, device: Device, m: int, n: int, k: int, dtype: Any = "f32", trans_b: bool = False,
                 out_dtype: Any = None):
        super().__init__(device)
        self.dtype = DType.parse(dtype)
        if self.dtype not in self.DTYPES:
            raise TypeError(f"Gemm dtype={self.dtype.label} is not supported; choose f32, f16 or bf16")
        self.out_dtype = self.dtype if out_dtype is None else DType.parse(out_dtype)
        if self.out_dtype is not self.dtype and (self.dtype, self.out_dtype, bool(trans_b)) != (DType.f16, DType.f32, True):
            raise TypeError(f"Gemm out_dtype={self.out_dtype.label} with dtype={self.dtype.label}, trans_b={trans_b}: "
                            "only f16 operands with trans_b=True may give f32")
        for name, v in (("m", m), ("n", n), ("k", k)):
            if int(v) <= 0:
                raise ValueError(f"Gemm {name}={v} must be > 0")
        self.m, self.n, self.k, self.trans_b = int(m), int(n), int(k), bool(trans_b)
        self.workspace_nbytes = 0
        self._own_workspace: Any = None

    @classmethod
    def create(cls, device: Device, m: int, n: int, k: int, dtype: Any = "f32", trans_b: bool = False,
               out_dtype: Any = None) -> "Gemm":
        return cls(device, m, n, k, dtype, trans_b, out_dtype)

    def compile(self) -> "Gemm":
        be = self.device.backend
        if self.out_dtype is self.dtype:
            self.handle = be.create_gemm(self.dtype, self.m, self.n, self.k, self.trans_b)
        else:
            self.handle = be.create_gemm(self.dtype, self.m, self.n, self.k, self.trans_b, out_dtype=self.out_dtype)
        self.workspace_nbytes = int(be.gemm_workspace_nbytes(self.handle))
        return self

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    def bind(self, a: Any, b: Any, c: Any, workspace: Any = None) -> None:
        """Bind the matrices and, where ``workspace_nbytes`` > 0, the workspace (default: one of this
        operator's own, allocated here; ignored where none is needed).

        Raises:
            ValidationError: before ``compile()``.
            ValueError: a buffer smaller than its matrix or than ``workspace_nbytes`` (named).
        """
        if self.handle is None:
            raise ValidationError("Gemm.bind before compile()")
        isz = self.dtype.block_nbytes
        need = {"a": self.m * self.k * isz, "b": self.k * self.n * isz, "c": self.m * self.n * self.out_dtype.block_nbytes,
                "workspace": self.workspace_nbytes}
        views = []
        for name, obj in (("a", a), ("b", b), ("c", c), ("workspace", workspace)):
            if name == "workspace":
                if not self.workspace_nbytes:
                    break
                if obj is None:
                    if self._own_workspace is None:
                        self._own_workspace = self.device.alloc(self.workspace_nbytes, "u8")
                    obj = self._own_workspace
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
        a, b, c, *ws = self._bound
        accesses = [(a, Access.READ, "a"), (b, Access.READ, "b"), (c, Access.WRITE, "c")]
        accesses += [(w, Access.READ_WRITE, "workspace") for w in ws]
        executor.record_operator(GemmCmd(self.handle, a.address, b.address, c.address, ws[0].address if ws else 0),
                                 accesses)
