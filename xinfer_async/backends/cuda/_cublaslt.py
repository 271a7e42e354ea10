"""cuBLASLt through cffi in ABI mode: the GEMM regime's ``C (m, n) f32 = A (m, k) f16 @ B (n, k)^T f16``,
fp32 accumulation, with one algorithm per ``(n, k)`` whatever ``m`` is.

Row-major ``C = A @ B^T`` is the column-major ``C^T (n, m) = op_T(B) @ A^T``: B is stored as a
column-major ``(k, n)`` matrix (ld k) taken transposed, A as ``(k, m)`` (ld k), C as ``(n, m)``
(ld n); no data moves.

Row independence (a row of C never depends on the other rows of its launch, nor on ``m``): the
algorithm is chosen once per ``(n, k)`` among split-K-free candidates and reused for every ``m``
after ``cublasLtMatmulAlgoCheck`` accepts it. The candidates: ``cublasLtMatmulAlgoGetHeuristic``'s
first ``CANDIDATES`` at each ``m`` of ``TUNE_MS`` (the batched decode step's 64 rows, a 512-token
prefill chunk) with ``CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 0`` (no split-K: each output
element is summed over all of k by one CTA, in the order its tile configuration fixes) and no
workspace (so no algorithm keeps partial sums outside C: no split-K or stream-K fix-up), a split-K
count above 1 refused, and valid at every ``m`` of ``TUNE_MS``. The same algorithm (tile, stages,
cluster) sums each element's k the same way for any m; ``tests/test_gemm_regime.py`` checks the
rows bit for bit on the GPU, and that every ``m`` of an ``(n, k)`` runs the one algorithm.

The choice (``LtHandle.algorithm``): with a timer (the cuda backend gives one:
``_gemm_tune.time_launches``), each candidate is timed on the device once per ``(n, k)`` at every
``m`` of ``TUNE_MS`` and the one with the least ``sum(TUNE_WEIGHTS[i] * t_i / best_i)`` wins (its
time relative to the fastest candidate at that m; the decode step's m weighs 3/4, since it runs every
step); without one, the heuristic's first at ``m = 64`` that is valid at 512 too. Picking at
``m = 512`` alone (until issue #15's H200 profile) left the 64-row steps a poor tile: an 8B step's
GEMMs took 9 ms where reading the f16 weights once takes 3.7 ms.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Mapping, Sequence

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
#: cublasLtReductionScheme_t: INPLACE | COMPUTE_TYPE | OUTPUT_TYPE (research listings only)
REDUCTION_SCHEME_ANY = 7
CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_BYTES = (5, 6, 7, 8)  # A, B, C, D
CUBLASLT_ALGO_CONFIG_ID, CUBLASLT_ALGO_CONFIG_TILE_ID, CUBLASLT_ALGO_CONFIG_SPLITK_NUM = 0, 1, 2
CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_ALGO_CONFIG_STAGES_ID = 3, 6
CUDA_R_16F, CUDA_R_32F = 2, 0
#: the m values the algorithm of an (n, k) is chosen at and must be valid at (any m then runs it)
TUNE_MS = (64, 512)
#: the weight of each m of ``TUNE_MS`` in the choice (see the module docstring)
TUNE_WEIGHTS = (0.75, 0.25)
#: heuristic results asked for at each m of ``TUNE_MS``
CANDIDATES = 8
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


def _config_attr(algo, attr: int) -> int:
    v, written = ffi.new("uint32_t *"), ffi.new("size_t *")
    check(load().cublasLtMatmulAlgoConfigGetAttribute(algo, attr, v, 4, written),
          f"cublasLtMatmulAlgoConfigGetAttribute({attr})")
    return int(v[0])


def _config(algo) -> dict[str, int]:
    """An algorithm's id, tile, split-K, reduction scheme and stages (for reports)."""
    return {name: _config_attr(algo, attr) for name, attr in (
        ("id", CUBLASLT_ALGO_CONFIG_ID), ("tile", CUBLASLT_ALGO_CONFIG_TILE_ID),
        ("splitk", CUBLASLT_ALGO_CONFIG_SPLITK_NUM), ("reduction", CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
        ("stages", CUBLASLT_ALGO_CONFIG_STAGES_ID))}


def weighted_choice(times: Sequence[Mapping[int, float]], weights: Sequence[float] = TUNE_WEIGHTS,
                    ms: Sequence[int] = TUNE_MS) -> int:
    """The index of the candidate with the least ``sum(weights[i] * t[ms[i]] / best[ms[i]])``:
    ``times[j][m]`` is candidate j's ms at m, ``best[m]`` the least of them (ties: the first, the
    heuristic's order).

    Raises:
        ValueError: no candidates, or a time that is not > 0.
    """
    if not times:
        raise ValueError("weighted_choice: no candidates")
    if any(not t[m] > 0 for t in times for m in ms):
        raise ValueError(f"weighted_choice: times must be > 0, got {list(times)}")
    fastest = {m: min(t[m] for t in times) for m in ms}
    cost = [sum(w * t[m] / fastest[m] for w, m in zip(weights, ms)) for t in times]
    return min(range(len(times)), key=cost.__getitem__)


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
    """One cuBLASLt handle per device; algorithms chosen and cached per ``(n, k)``; no workspace (see
    the module docstring).

    Args:
        timer: ``timer(nbytes, launches) -> ms``: the device ms of one run of each ``launch(stream,
            a, b, c)`` on buffers of ``nbytes`` (a, b, c) (``_gemm_tune.time_launches``); None: the
            heuristic's order decides.
    """

    def __init__(self, timer: Callable[[tuple[int, int, int], Sequence[Callable]], list[float]] | None = None):
        lib = load()
        self._timer = timer
        #: ``(n, k)`` -> [(config, {m: ms}), ...] of the candidates timed, the chosen one first
        self.tuning: dict[tuple[int, int], list[tuple[dict, dict]]] = {}
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

    def _first_at(self, m: int, n: int, k: int) -> list:
        """``[the heuristic's first split-K-free algorithm of (m, n, k)]``, or ``[]``."""
        lib = load()
        desc, (a, b, c) = self.describe(m, n, k)
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
            return []
        algo = ffi.new("cublasLtMatmulAlgo_t *", res[0].algo)
        return [algo] if _config_attr(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) <= 1 else []

    def candidates(self, n: int, k: int, ms: Sequence[int] = TUNE_MS, count: int = CANDIDATES,
                   workspace_nbytes: int = 0) -> list:
        """The split-K-free algorithms (``cublasLtMatmulAlgo_t *``) of ``(n, k)`` valid at every m of
        ``ms`` (default ``TUNE_MS``), among the heuristic's first ``count`` (default ``CANDIDATES``) at
        each m, in the heuristic's order at the first m, then the others' new ones.

        ``workspace_nbytes`` > 0 (research: ``tools/gemm_regime_bench.py --algos --splitk``, never
        load): any reduction scheme and up to that workspace instead, split-K algorithms included;
        they run only with a workspace of their own (``timings(workspace=)``).

        Raises:
            DeviceError: a cuBLASLt call failed.
        """
        lib = load()
        found: dict[bytes, Any] = {}
        checks = [self.describe(m, n, k) for m in ms]
        for desc, (a, b, c) in checks:
            p = ffi.new("cublasLtMatmulPreference_t *")
            check(lib.cublasLtMatmulPreferenceCreate(p), "cublasLtMatmulPreferenceCreate")
            pref = p[0]
            try:
                set_pref = lib.cublasLtMatmulPreferenceSetAttribute
                _attr(set_pref, pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, "uint64_t",
                      workspace_nbytes or self.workspace_nbytes)
                _attr(set_pref, pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, "uint32_t",
                      REDUCTION_SCHEME_ANY if workspace_nbytes else 0)
                for attr in CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_BYTES:
                    _attr(set_pref, pref, attr, "uint32_t", ALIGN)
                res = ffi.new(f"cublasLtMatmulHeuristicResult_t[{count}]")
                got = ffi.new("int *")
                check(lib.cublasLtMatmulAlgoGetHeuristic(self.handle, desc, b, a, c, c, pref, count, res, got),
                      f"cublasLtMatmulAlgoGetHeuristic(n={n}, k={k})")
            finally:
                lib.cublasLtMatmulPreferenceDestroy(pref)
            for i in range(got[0]):
                algo = ffi.new("cublasLtMatmulAlgo_t *", res[i].algo)
                key = bytes(ffi.buffer(algo))
                if key in found or res[i].state != 0 or res[i].workspaceSize > workspace_nbytes or \
                        (not workspace_nbytes and _config_attr(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1):
                    continue
                found[key] = algo
        out = []
        check_res = ffi.new("cublasLtMatmulHeuristicResult_t *")
        for algo in found.values():
            if all(lib.cublasLtMatmulAlgoCheck(self.handle, desc, b, a, c, c, algo, check_res) == 0
                   and check_res.workspaceSize <= workspace_nbytes for desc, (a, b, c) in checks):
                out.append(algo)
        return out

    def timings(self, n: int, k: int, ms: Sequence[int] = TUNE_MS, algos: Sequence | None = None,
                workspace: tuple[int, int] = (0, 0)) -> list[dict]:
        """Device ms of each of ``algos`` (default: ``candidates(n, k)``) at each m of ``ms``:
        ``[{m: ms, ...}, ...]`` in the order of ``algos``; ``workspace``: ``(address, nbytes)`` of a
        device buffer the launches may use (algorithms from ``candidates(workspace_nbytes=)``).

        Raises:
            ValueError: the handle has no timer.
            DeviceError: a cuBLASLt or driver call failed.
        """
        if self._timer is None:
            raise ValueError("timings: this LtHandle has no timer")
        algos = self.candidates(n, k) if algos is None else algos
        descs = {m: self.describe(m, n, k) for m in ms}
        launches = [functools.partial(self._launch, descs[m], algo, workspace=workspace) for algo in algos for m in ms]
        t = self._timer((2 * max(ms) * k, 2 * n * k, 4 * max(ms) * n), launches)
        return [dict(zip(ms, t[i * len(ms):(i + 1) * len(ms)])) for i in range(len(algos))]

    def _launch(self, described, algo, stream: int, a: int, b: int, c: int, workspace: tuple[int, int] = (0, 0)) -> None:
        desc, (la, lb, lc) = described
        ws, ws_nbytes = workspace
        status = _lib.cublasLtMatmul(self.handle, desc, self._alpha, ffi.cast("void *", b), lb, ffi.cast("void *", a),
                                     la, self._beta, ffi.cast("void *", c), lc, ffi.cast("void *", c), lc, algo,
                                     ffi.cast("void *", ws) if ws_nbytes else ffi.NULL, ws_nbytes,
                                     ffi.cast("void *", stream))
        if status:
            check(status, "cublasLtMatmul (timing a candidate)")

    def algorithm(self, n: int, k: int):
        """The algorithm of ``(n, k)`` and its workspace bytes (0), chosen once (see the module
        docstring); ``tuning[(n, k)]`` keeps the candidates' times when they were timed.

        Raises:
            DeviceError: no split-K-free algorithm valid at every m of ``TUNE_MS`` (the message names
                n and k), or a cuBLASLt call failed.
        """
        key = (n, k)
        if key not in self._algos:
            algos = self.candidates(n, k)
            if not algos:  # none passes the checks at every m of TUNE_MS (8B gate/up, n=28672, on the
                # H200): the heuristic's first at m = 512, split-K free, as chosen before the tuning
                algos = self._first_at(TUNE_MS[-1], n, k)
            if not algos:
                raise DeviceError(f"cuBLASLt has no f16 GEMM algorithm without split-K for n={n}, k={k}",
                                  "CUBLAS_STATUS_NOT_SUPPORTED")
            best = 0
            if self._timer is not None and len(algos) > 1:
                times = self.timings(n, k, TUNE_MS, algos)
                best = weighted_choice(times)
                order = [best] + [i for i in range(len(algos)) if i != best]
                self.tuning[key] = [(_config(algos[i]), times[i]) for i in order]
            self._algos[key] = (algos[best], 0)
        return self._algos[key]

    def config(self, n: int, k: int) -> dict[str, int]:
        """The chosen algorithm's id, tile, split-K, reduction scheme and stages (for reports)."""
        return _config(self.algorithm(n, k)[0])

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
