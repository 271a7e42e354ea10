"""cuBLAS GEMM through cffi in ABI mode: row-major f32 / f16 / bf16, fp32 accumulation.

Row-major ``C (m, n) = A (m, k) @ B`` is the column-major product ``C^T (n, m) = B^T @ A^T``, so the
operands are swapped and no data moves: ``cublasGemmEx(opB, N, n, m, k, B, A, C)``.
"""

from __future__ import annotations

import os
import threading

import cffi

from ...hal._errors import DeviceError
from ._libs import open_first

ffi = cffi.FFI()
ffi.cdef(
    """
typedef int cublasStatus_t;
typedef struct cublasContext *cublasHandle_t;
typedef struct CUstream_st *cudaStream_t;
cublasStatus_t cublasCreate_v2(cublasHandle_t *handle);
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle);
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId);
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t workspaceSizeInBytes);
const char *cublasGetStatusName(cublasStatus_t status);
cublasStatus_t cublasGemmEx(cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                            const void *alpha, const void *A, int Atype, int lda, const void *B, int Btype, int ldb,
                            const void *beta, void *C, int Ctype, int ldc, int computeType, int algo);
"""
)

CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1
#: cudaDataType of each dtype name
DATA_TYPES = {"f32": 0, "f16": 2, "bf16": 14}
_ALIASES = {"float32": "f32", "float": "f32", "f32": "f32", "float16": "f16", "half": "f16", "f16": "f16",
            "bfloat16": "bf16", "bf16": "bf16"}

_lib = None
_keep = []
_lock = threading.Lock()


def load():
    """Open cuBLAS (and cuBLASLt before it, from the same wheel) once.

    Raises:
        OSError: cuBLAS was not found.
    """
    global _lib
    with _lock:
        if _lib is None:
            _lib = open_first(ffi, "XINFER_CUBLAS", "libcublas", ("cu13", "cublas", "cu12"),
                              "cuBLAS not found (pip install nvidia-cublas, or set XINFER_CUBLAS)", _lt, _keep)
    return _lib


def _lt(path: str) -> list[str]:
    """cuBLASLt from the same wheel, when ``path`` is a file there and it exists beside it."""
    lt = path.replace("libcublas.so", "libcublasLt.so")
    return [lt] if lt != path and "/" in lt and os.path.exists(lt) else []


def dtype_name(dtype) -> str:
    """``"f32"``, ``"f16"`` or ``"bf16"`` for a dtype given as a name, a numpy dtype or a ``DType``.

    Raises:
        ValueError: another dtype.
    """
    raw = str(getattr(dtype, "name", dtype)).lower()
    raw = raw.rsplit(".", 1)[-1]
    if raw not in _ALIASES:
        raise ValueError(f"gemm dtype must be f32, f16 or bf16, got {dtype!r}")
    return _ALIASES[raw]


def check(status: int, what: str) -> None:
    if status != 0:
        name = ffi.string(load().cublasGetStatusName(status)).decode()
        raise DeviceError(f"{what} failed: {name}", name)


class CublasHandle:
    """One cuBLAS handle per device, with a fixed workspace (so GEMMs can be captured in graphs)."""

    def __init__(self, workspace: int, workspace_nbytes: int):
        lib = load()
        h = ffi.new("cublasHandle_t *")
        check(lib.cublasCreate_v2(h), "cublasCreate")
        self.handle = h[0]
        check(lib.cublasSetWorkspace_v2(self.handle, ffi.cast("void *", workspace), workspace_nbytes),
              "cublasSetWorkspace")
        self._alpha = ffi.new("float *", 1.0)
        self._beta = ffi.new("float *", 0.0)
        self._stream = None

    def gemm(self, stream: int, g: "Gemm", a: int, b: int, c: int) -> None:
        """Enqueue ``c = a @ b`` (row-major, see :class:`Gemm`) on ``stream`` (a ``CUstream`` as int)."""
        lib = _lib
        if stream != self._stream:
            check(lib.cublasSetStream_v2(self.handle, ffi.cast("cudaStream_t", stream)), "cublasSetStream")
            self._stream = stream
        t = g.dtype_code
        status = lib.cublasGemmEx(self.handle, g.op_b, CUBLAS_OP_N, g.n, g.m, g.k, self._alpha,
                                  ffi.cast("void *", b), t, g.ldb, ffi.cast("void *", a), t, g.k,
                                  self._beta, ffi.cast("void *", c), t, g.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
        if status:
            check(status, "cublasGemmEx")

    def close(self) -> None:
        if self.handle is not None:
            load().cublasDestroy_v2(self.handle)
            self.handle = None


class Gemm:
    """``C (m, n) = A (m, k) @ B``, ``B (k, n)`` or ``(n, k)`` when ``trans_b``; row-major, all in
    ``dtype`` (f32, f16 or bf16), accumulated in fp32."""

    def __init__(self, dtype, m: int, n: int, k: int, trans_b: bool):
        for arg, v in (("m", m), ("n", n), ("k", k)):
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"gemm {arg} must be a positive int, got {v!r}")
        self.dtype = dtype_name(dtype)
        self.dtype_code = DATA_TYPES[self.dtype]
        self.m, self.n, self.k, self.trans_b = m, n, k, bool(trans_b)
        # column-major view: B^T is (n, k) with ld n when B is (k, n); op T over ld k when B is (n, k)
        self.op_b = CUBLAS_OP_T if trans_b else CUBLAS_OP_N
        self.ldb = k if trans_b else n

    def __repr__(self) -> str:
        return f"Gemm({self.dtype}, m={self.m}, n={self.n}, k={self.k}, trans_b={self.trans_b})"
