"""cuBLASLt through cffi in ABI mode: the GEMM regime's ``C (m, n) f32 = A (m, k) f16 @ B (n, k)^T f16``,
fp32 accumulation, with one algorithm per ``(n, k)`` whatever ``m`` is.

Row-major ``C = A @ B^T`` is the column-major ``C^T (n, m) = op_T(B) @ A^T``: B is stored as a
column-major ``(k, n)`` matrix (ld k) taken transposed, A as ``(k, m)`` (ld k), C as ``(n, m)``
(ld n); no data moves.

Row independence (a row of C never depends on the other rows of its launch, nor on ``m``): the
algorithm is chosen once per ``(n, k)`` by ``cublasLtMatmulAlgoGetHeuristic`` at ``m =
ALGO_M`` with ``CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 0`` (no split-K: each output element is
summed over all of k by one CTA, in the order its tile configuration fixes) and no workspace (so no
algorithm keeps partial sums outside C: no split-K or stream-K fix-up), and reused for every
``m`` after ``cublasLtMatmulAlgoCheck`` accepts it. The same algorithm (tile, stages, cluster) sums
each element's k the same way for any m; ``tests/test_gemm_regime.py`` checks the rows bit for bit
on the GPU.
"""

from __future__ import annotations

import threading

import cffi

from ...hal._errors import DeviceError
from . import _cublas
from ._libs import open_first

ffi = cffi.FFI()
ffi.cdef(
    """
typedef int cublasStatus_t;
typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct { uint64_t data[32]; } cublasLtMatmulDescOpaque_t;
typedef cublasLtMatmulDescOpaque_t *cublasLtMatmulDesc_t;
typedef struct { uint64_t data[8]; } cublasLtMatrixLayoutOpaque_t;
typedef cublasLtMatrixLayoutOpaque_t *cublasLtMatrixLayout_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulPreferenceOpaque_t;
typedef cublasLtMatmulPreferenceOpaque_t *cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;
cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle);
const char *cublasLtGetStatusName(cublasStatus_t status);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, int computeType, int scaleType);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, int attr, const void *buf,
                                              size_t sizeInBytes);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, int type, uint64_t rows, uint64_t cols,
                                          int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref, int attr, const void *buf,
                                                    size_t sizeInBytes);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int *returnAlgoCount);
cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                       cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                       cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                       const cublasLtMatmulAlgo_t *algo, cublasLtMatmulHeuristicResult_t *result);
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t *algo, int attr, void *buf,
                                                    size_t sizeInBytes, size_t *sizeWritten);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspaceSizeInBytes, void *stream);
"""
)

# cublasLt.h (cuBLAS 12.x) enum values
CUBLASLT_MATMUL_DESC_TRANSA, CUBLASLT_MATMUL_DESC_TRANSB = 3, 4
CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1
CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3
CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_BYTES = (5, 6, 7, 8)  # A, B, C, D
CUBLASLT_ALGO_CONFIG_ID, CUBLASLT_ALGO_CONFIG_TILE_ID, CUBLASLT_ALGO_CONFIG_SPLITK_NUM = 0, 1, 2
CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_ALGO_CONFIG_STAGES_ID = 3, 6
CUDA_R_16F, CUDA_R_32F = 2, 0
#: the m the algorithm of an (n, k) is chosen at (prefill-sized; any m then runs it)
ALGO_M = 512
#: the pointer alignment the chosen algorithms may assume, bytes (the regime's buffers: 256)
ALIGN = 16

_lib = None
_lock = threading.Lock()


def load():
    """Open cuBLASLt once (from the cuBLAS wheel, or ``XINFER_CUBLASLT``).

    Raises:
        OSError: cuBLASLt was not found.
    """
    global _lib
    with _lock:
        if _lib is None:
            _lib = open_first(ffi, "XINFER_CUBLASLT", "libcublasLt", ("cu13", "cublas", "cu12"),
                              "cuBLASLt not found (pip install nvidia-cublas, or set XINFER_CUBLASLT)")
    return _lib


def check(status: int, what: str) -> None:
    if status != 0:
        name = ffi.string(load().cublasLtGetStatusName(status)).decode()
        raise DeviceError(f"{what} failed: {name}", name)


def _attr(setter, obj, attr: int, ctype: str, value) -> None:
    v = ffi.new(f"{ctype} *", value)
    check(setter(obj, attr, v, ffi.sizeof(ctype)), f"set attribute {attr}")


class LtGemm:
    """``C (m, n) f32 = A (m, k) f16 @ B (n, k)^T f16`` (row-major) with ``algo`` (its ``(n, k)``'s).

    Raises:
        ValueError: a non-positive dimension.
    """

    def __init__(self, handle: "LtHandle", m: int, n: int, k: int):
        for arg, v in (("m", m), ("n", n), ("k", k)):
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"gemm {arg} must be a positive int, got {v!r}")
        self.m, self.n, self.k = m, n, k
        lib = load()
        self.desc, self.layouts = handle.describe(m, n, k)
        self.algo, _ = handle.algorithm(n, k)
        res = ffi.new("cublasLtMatmulHeuristicResult_t *")
        a, b, c = self.layouts
        status = lib.cublasLtMatmulAlgoCheck(handle.handle, self.desc, b, a, c, c, self.algo, res)
        if status:
            check(status, f"cublasLtMatmulAlgoCheck (the algorithm of n={n}, k={k} at m={m})")
        self.handle = handle

    def __repr__(self) -> str:
        return f"LtGemm(m={self.m}, n={self.n}, k={self.k})"


class LtHandle:
    """One cuBLASLt handle per device; algorithms cached per ``(n, k)``; no workspace (see the module
    docstring)."""

    def __init__(self):
        lib = load()
        h = ffi.new("cublasLtHandle_t *")
        check(lib.cublasLtCreate(h), "cublasLtCreate")
        self.handle = h[0]
        self.workspace_nbytes = 0
        self._alpha = ffi.new("float *", 1.0)
        self._beta = ffi.new("float *", 0.0)
        self._algos: dict[tuple[int, int], tuple] = {}
        self._gemms: dict[tuple[int, int, int], LtGemm] = {}
        self._owned: list = []  # descriptors and layouts, destroyed on close

    def gemm_for(self, m: int, n: int, k: int) -> LtGemm:
        """The ``LtGemm`` of ``(m, n, k)``, made once (its descriptors and algorithm check reused by every
        plan and slot that records it)."""
        key = (m, n, k)
        if key not in self._gemms:
            self._gemms[key] = LtGemm(self, m, n, k)
        return self._gemms[key]

    def describe(self, m: int, n: int, k: int):
        """A matmul descriptor and the layouts ``(a, b, c)`` of ``C (m, n) f32 = A (m, k) @ B (n, k)^T``
        in column-major terms (see the module docstring)."""
        lib = load()
        d = ffi.new("cublasLtMatmulDesc_t *")
        check(lib.cublasLtMatmulDescCreate(d, _cublas.CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate")
        desc = d[0]
        self._owned.append((lib.cublasLtMatmulDescDestroy, desc))
        _attr(lib.cublasLtMatmulDescSetAttribute, desc, CUBLASLT_MATMUL_DESC_TRANSA, "int32_t", _cublas.CUBLAS_OP_T)
        _attr(lib.cublasLtMatmulDescSetAttribute, desc, CUBLASLT_MATMUL_DESC_TRANSB, "int32_t", _cublas.CUBLAS_OP_N)
        layouts = []
        for dtype, rows, cols, ld in ((CUDA_R_16F, k, m, k), (CUDA_R_16F, k, n, k), (CUDA_R_32F, n, m, n)):
            lay = ffi.new("cublasLtMatrixLayout_t *")
            check(lib.cublasLtMatrixLayoutCreate(lay, dtype, rows, cols, ld), "cublasLtMatrixLayoutCreate")
            self._owned.append((lib.cublasLtMatrixLayoutDestroy, lay[0]))
            layouts.append(lay[0])
        return desc, tuple(layouts)

    def algorithm(self, n: int, k: int):
        """The algorithm of ``(n, k)`` and its workspace bytes: the heuristic's first at ``m = ALGO_M``
        among those with no split-K reduction, chosen once.

        Raises:
            DeviceError: no such algorithm (the message names n and k).
        """
        key = (n, k)
        if key not in self._algos:
            lib = load()
            desc, (a, b, c) = self.describe(ALGO_M, n, k)
            p = ffi.new("cublasLtMatmulPreference_t *")
            check(lib.cublasLtMatmulPreferenceCreate(p), "cublasLtMatmulPreferenceCreate")
            pref = p[0]
            try:
                set_pref = lib.cublasLtMatmulPreferenceSetAttribute
                _attr(set_pref, pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, "uint64_t", self.workspace_nbytes)
                _attr(set_pref, pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, "uint32_t", 0)
                for attr in CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_BYTES:
                    _attr(set_pref, pref, attr, "uint32_t", ALIGN)
                res = ffi.new("cublasLtMatmulHeuristicResult_t[1]")
                count = ffi.new("int *")
                check(lib.cublasLtMatmulAlgoGetHeuristic(self.handle, desc, b, a, c, c, pref, 1, res, count),
                      f"cublasLtMatmulAlgoGetHeuristic(n={n}, k={k})")
            finally:
                lib.cublasLtMatmulPreferenceDestroy(pref)
            if count[0] < 1:
                raise DeviceError(f"cuBLASLt has no f16 GEMM algorithm without split-K for n={n}, k={k}",
                                  "CUBLAS_STATUS_NOT_SUPPORTED")
            algo = ffi.new("cublasLtMatmulAlgo_t *", res[0].algo)
            split = ffi.new("uint32_t *")
            written = ffi.new("size_t *")
            check(lib.cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, split, 4, written),
                  "cublasLtMatmulAlgoConfigGetAttribute(SPLITK_NUM)")
            if split[0] > 1:
                raise DeviceError(f"cuBLASLt chose split-K {split[0]} for n={n}, k={k} despite the preference",
                                  "CUBLAS_STATUS_NOT_SUPPORTED")
            self._algos[key] = (algo, int(res[0].workspaceSize))
        return self._algos[key]

    def config(self, n: int, k: int) -> dict[str, int]:
        """The chosen algorithm's id, tile, split-K, reduction scheme and stages (for reports)."""
        algo, _ = self.algorithm(n, k)
        out = {}
        for name, attr in (("id", CUBLASLT_ALGO_CONFIG_ID), ("tile", CUBLASLT_ALGO_CONFIG_TILE_ID),
                           ("splitk", CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                           ("reduction", CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), ("stages", CUBLASLT_ALGO_CONFIG_STAGES_ID)):
            v, written = ffi.new("uint32_t *"), ffi.new("size_t *")
            load().cublasLtMatmulAlgoConfigGetAttribute(algo, attr, v, 4, written)
            out[name] = int(v[0])
        return out

    def gemm(self, stream: int, g: LtGemm, a: int, b: int, c: int) -> None:
        """Enqueue ``c = a @ b^T`` (see :class:`LtGemm`) on ``stream`` (a ``CUstream`` as int).

        Raises:
            ValueError: an address not ``ALIGN``-aligned.
        """
        if (a | b | c) % ALIGN:
            raise ValueError(f"gemm operands must be {ALIGN}-byte aligned, got a={a:#x}, b={b:#x}, c={c:#x}")
        la, lb, lc = g.layouts
        status = _lib.cublasLtMatmul(self.handle, g.desc, self._alpha, ffi.cast("void *", b), lb, ffi.cast("void *", a),
                                     la, self._beta, ffi.cast("void *", c), lc, ffi.cast("void *", c), lc, g.algo,
                                     ffi.NULL, 0, ffi.cast("void *", stream))
        if status:
            check(status, f"cublasLtMatmul({g!r})")

    def close(self) -> None:
        if self.handle is not None:
            lib = load()
            for destroy, obj in reversed(self._owned):
                destroy(obj)
            self._owned.clear()
            lib.cublasLtDestroy(self.handle)
            self.handle = None
