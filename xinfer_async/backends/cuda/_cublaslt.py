"""cuBLASLt through cffi in ABI mode: the GEMM regime's ``C (m, n) f32 = A (m, k) f16 @ B (n, k)^T f16``,
fp32 accumulation, with one algorithm per ``(n, k)`` and bucket of m.

Row-major ``C = A @ B^T`` is the column-major ``C^T (n, m) = op_T(B) @ A^T``: B is stored as a
column-major ``(k, n)`` matrix (ld k) taken transposed, A as ``(k, m)`` (ld k), C as ``(n, m)``
(ld n); no data moves.

Buckets of m (``buckets()``): ``decode`` (m <= ``DECODE_M_MAX``: the batched decode steps) and
``prefill`` (larger m: prompt chunks). Each ``(n, k)`` runs one algorithm per bucket, chosen once.
One algorithm for every m (until 2026-12-02) cost the decode steps most: the H200's best tiles at
m = 64 and at m = 512 differ, and the best for both was up to 1.6x slower at 64 (Llama-3.1-8B
gate/up, n = 28672: 100 us where a small-m tile takes 64; ``tools/gemm_regime_bench.py --algos``).

Row independence (a row of C never depends on the other rows of its launch, nor on m within a
bucket): the algorithm of a bucket is reused for every m of it after ``cublasLtMatmulAlgoCheck``
accepts it, and it sums each element's k the same way for any m: its tile configuration fixes the
order, and a split-K algorithm (``decode`` only, with up to ``workspace_nbytes`` of workspace) splits
k into its fixed ``splitk`` parts whatever m is, writes each part's sums to the workspace and adds
them in a separate pass (reduction scheme ``COMPUTE_TYPE`` or ``OUTPUT_TYPE``; ``INPLACE``, which adds
the parts into C in a sequence its workspace counters enforce, is left out: never measured, never
checked). A split-K-free algorithm that asks for workspace at a tuning m (a fix-up whose split might
follow m) is left out of the decode candidates too. Some split-K-free tiles the H200 chooses for
prefill ask 4 bytes of workspace at some m (8B gate/up, n = 28672, at every m; n = 6144's at m =
576): they are given it (``WORKSPACE_ASKED_MAX``) rather than refused, since that gate/up has no
other algorithm; ``tests/test_gemm_regime.py`` checks rows bit for bit on the GPU across the m of
each bucket (that gate/up shape included) and across runs, and forces the decode bucket's split-K
candidates through the same checks. The workspace of a recorded GEMM belongs to the slot that runs
it (``model/_prepared.py``). A row's result may differ between buckets (different tiles sum in
different orders), as it does between the GEMM and the matrix kernels of smaller T: a batched decode
step that carries prompt rows (more than 64 rows) runs the prefill bucket's algorithm.

The candidates of a bucket: ``cublasLtMatmulAlgoGetHeuristic``'s first ``CANDIDATES`` at each m of
its ``tune_ms``, split-K free and workspace free, plus (``decode``) those with a workspace-reduced
split-K within its workspace; all valid at every m of ``tune_ms``. The choice
(``LtHandle.algorithm``): with a timer (the cuda backend gives one: ``_gemm_tune.time_launches``),
each candidate is timed on the device at every m of ``tune_ms`` and the one with the least
``sum(weights[i] * t_i / best_i)`` wins (its time relative to the fastest candidate at that m);
without one, the heuristic's first at the bucket's last m.
"""

from __future__ import annotations

import dataclasses
import functools
import os
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
#: COMPUTE_TYPE | OUTPUT_TYPE: split-K parts summed from the workspace by a separate pass, in a fixed
#: order (the decode bucket's split-K algorithms; see the module docstring)
REDUCTION_SCHEME_WORKSPACE = 6
REDUCTION_SCHEME_INPLACE = 1
CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_BYTES = (5, 6, 7, 8)  # A, B, C, D
CUBLASLT_ALGO_CONFIG_ID, CUBLASLT_ALGO_CONFIG_TILE_ID, CUBLASLT_ALGO_CONFIG_SPLITK_NUM = 0, 1, 2
CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_ALGO_CONFIG_STAGES_ID = 3, 6
CUDA_R_16F, CUDA_R_32F = 2, 0
#: the largest m of the ``decode`` bucket (batched decode steps of up to 64 streams)
DECODE_M_MAX = 64
#: the most workspace a decode-bucket algorithm may use, MiB (``WORKSPACE_ENV`` overrides; 0: no
#: split-K). An 8B step's largest need at m = 64 is a few MiB (splitk x m x n x 4 B).
WORKSPACE_MIB = 32
WORKSPACE_ENV = "XINFER_GEMM_WORKSPACE_MIB"
#: the workspace any chosen algorithm may be given where ``cublasLtMatmulAlgoCheck`` asks for it at its
#: m (the H200's split-K-free prefill tiles ask 4 bytes at some m: 8B gate/up at m = 512), bytes
WORKSPACE_ASKED_MAX = 1 << 20
#: heuristic results asked for at each m of a bucket's ``tune_ms``
CANDIDATES = 8
#: the pointer alignment the chosen algorithms may assume, bytes (the regime's buffers: 256)
ALIGN = 16


@dataclasses.dataclass(frozen=True)
class Bucket:
    """A range of m whose GEMMs of one ``(n, k)`` run one algorithm.

    Attributes:
        name: ``"decode"`` or ``"prefill"``.
        m_max: the largest m of the bucket (None: no limit); it starts above the previous bucket's.
        tune_ms: the m values its algorithm is timed at and must be valid at.
        weights: the weight of each m of ``tune_ms`` in the choice (``weighted_choice``).
        workspace_nbytes: the most workspace its algorithms may use (0: split-K free, no workspace).
    """

    name: str
    m_max: int | None
    tune_ms: tuple[int, ...]
    weights: tuple[float, ...]
    workspace_nbytes: int = 0


def buckets(environ: Mapping[str, str] = os.environ) -> tuple[Bucket, Bucket]:
    """The buckets of m: ``decode`` (m <= ``DECODE_M_MAX``, timed at 16 and 64 equally, split-K
    within ``$XINFER_GEMM_WORKSPACE_MIB`` MiB of workspace, default ``WORKSPACE_MIB``) and
    ``prefill`` (timed at 128 and 512, 512 weighing 3/4; split-K free).

    Raises:
        ValueError: ``XINFER_GEMM_WORKSPACE_MIB`` is not an integer in 0..1024 (the message names it).
    """
    raw = environ.get(WORKSPACE_ENV, "").strip()
    try:
        mib = WORKSPACE_MIB if raw == "" else int(raw)
        if not 0 <= mib <= 1024:
            raise ValueError
    except ValueError:
        raise ValueError(f"{WORKSPACE_ENV} must be an integer number of MiB in 0..1024, got {raw!r}") from None
    return (Bucket("decode", DECODE_M_MAX, (16, DECODE_M_MAX), (0.5, 0.5), mib << 20),
            Bucket("prefill", None, (128, 512), (0.25, 0.75), 0))


def bucket_of(m: int, of: Sequence[Bucket]) -> Bucket:
    """The bucket of ``of`` (in increasing ``m_max``) that holds ``m``."""
    for b in of:
        if b.m_max is None or m <= b.m_max:
            return b
    raise ValueError(f"no bucket holds m={m} (buckets end at {of[-1].m_max})")


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


def weighted_choice(times: Sequence[Mapping[int, float]], weights: Sequence[float], ms: Sequence[int]) -> int:
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
    """``C (m, n) f32 = A (m, k) f16 @ B (n, k)^T f16`` (row-major) with ``algo``, the algorithm of
    ``(n, k)`` in m's bucket; ``workspace_nbytes``: the device workspace it needs at this m (0: none;
    ``LtHandle.gemm`` must then be given that many bytes: split-K parts, or the few bytes some
    split-K-free tiles ask for at some m).

    Raises:
        ValueError: a non-positive dimension.
        DeviceError: the bucket's algorithm is not valid at this m, or needs more workspace than
            ``max(bucket.workspace_nbytes, WORKSPACE_ASKED_MAX)``.
    """

    def __init__(self, handle: "LtHandle", m: int, n: int, k: int):
        for arg, v in (("m", m), ("n", n), ("k", k)):
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"gemm {arg} must be a positive int, got {v!r}")
        self.m, self.n, self.k = m, n, k
        lib = load()
        self.desc, self.layouts = handle.describe(m, n, k)
        self.bucket = bucket_of(m, handle.buckets)
        self.algo, _ = handle.algorithm(n, k, m)
        res = ffi.new("cublasLtMatmulHeuristicResult_t *")
        a, b, c = self.layouts
        status = lib.cublasLtMatmulAlgoCheck(handle.handle, self.desc, b, a, c, c, self.algo, res)
        if status:
            check(status, f"cublasLtMatmulAlgoCheck (the {self.bucket.name} algorithm of n={n}, k={k} at m={m})")
        self.workspace_nbytes = int(res.workspaceSize)
        allowed = max(self.bucket.workspace_nbytes, WORKSPACE_ASKED_MAX)
        if self.workspace_nbytes > allowed:
            raise DeviceError(f"the {self.bucket.name} algorithm of n={n}, k={k} needs {self.workspace_nbytes} bytes "
                              f"of workspace at m={m}; at most {allowed} are given", "CUBLAS_STATUS_NOT_SUPPORTED")
        self.handle = handle

    def __repr__(self) -> str:
        return f"LtGemm(m={self.m}, n={self.n}, k={self.k})"


class LtHandle:
    """One cuBLASLt handle per device; algorithms chosen and cached per ``(n, k)`` and bucket of m
    (see the module docstring).

    Args:
        timer: ``timer(nbytes, launches) -> ms``: the device ms of one run of each ``launch(stream,
            a, b, c, workspace)`` on buffers of ``nbytes`` (a, b, c, workspace; addresses as int, a
            workspace of 0 bytes at address 0) (``_gemm_tune.time_launches``); None: the heuristic's
            order decides.
        of_buckets: the buckets of m (default ``buckets()``, from the environment).
    """

    def __init__(self, timer: Callable[[tuple[int, int, int, int], Sequence[Callable]], list[float]] | None = None,
                 of_buckets: Sequence[Bucket] | None = None):
        lib = load()
        self._timer = timer
        self.buckets = tuple(buckets() if of_buckets is None else of_buckets)
        #: ``(n, k, bucket name)`` -> [(config, {m: ms}), ...] of the candidates timed, the chosen one first
        self.tuning: dict[tuple[int, int, str], list[tuple[dict, dict]]] = {}
        h = ffi.new("cublasLtHandle_t *")
        check(lib.cublasLtCreate(h), "cublasLtCreate")
        self.handle = h[0]
        self._alpha = ffi.new("float *", 1.0)
        self._beta = ffi.new("float *", 0.0)
        self._algos: dict[tuple[int, int, str], tuple] = {}
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

    def _heuristic(self, described, n: int, k: int, count: int, workspace_nbytes: int, mask: int):
        """The heuristic's first ``count`` results at one described m: a cffi array and its length."""
        lib = load()
        desc, (a, b, c) = described
        p = ffi.new("cublasLtMatmulPreference_t *")
        check(lib.cublasLtMatmulPreferenceCreate(p), "cublasLtMatmulPreferenceCreate")
        pref = p[0]
        try:
            set_pref = lib.cublasLtMatmulPreferenceSetAttribute
            _attr(set_pref, pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, "uint64_t", workspace_nbytes)
            _attr(set_pref, pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, "uint32_t", mask)
            for attr in CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_BYTES:
                _attr(set_pref, pref, attr, "uint32_t", ALIGN)
            res = ffi.new(f"cublasLtMatmulHeuristicResult_t[{count}]")
            got = ffi.new("int *")
            check(lib.cublasLtMatmulAlgoGetHeuristic(self.handle, desc, b, a, c, c, pref, count, res, got),
                  f"cublasLtMatmulAlgoGetHeuristic(n={n}, k={k})")
        finally:
            lib.cublasLtMatmulPreferenceDestroy(pref)
        return res, got[0]

    def candidates(self, n: int, k: int, ms: Sequence[int], count: int = CANDIDATES, workspace_nbytes: int = 0,
                   mask: int | None = None) -> list:
        """The algorithms (``cublasLtMatmulAlgo_t *``) of ``(n, k)`` valid at every m of ``ms``, among
        the heuristic's first ``count`` (default ``CANDIDATES``) at each m: in the heuristic's order at
        the first m, then the others' new ones.

        Without ``workspace_nbytes``: split-K free and workspace free. With it: also the split-K
        algorithms needing up to that workspace, of the reduction schemes in ``mask`` (default
        ``REDUCTION_SCHEME_ANY``: the research listing, ``tools/gemm_regime_bench.py --algos --splitk``,
        which keeps everything; the decode bucket asks ``REDUCTION_SCHEME_WORKSPACE`` and drops a
        split-K-free algorithm that asks for workspace anyway, a fix-up whose split may follow m).

        Raises:
            DeviceError: a cuBLASLt call failed.
        """
        lib = load()
        mask = (REDUCTION_SCHEME_ANY if mask is None else mask) if workspace_nbytes else 0
        found: dict[bytes, Any] = {}
        checks = [self.describe(m, n, k) for m in ms]
        queries = [(0, 0)] + ([(workspace_nbytes, mask)] if workspace_nbytes else [])
        for described in checks:
            for ws, msk in queries:
                res, got = self._heuristic(described, n, k, count, ws, msk)
                for i in range(got):
                    algo = ffi.new("cublasLtMatmulAlgo_t *", res[i].algo)
                    key = bytes(ffi.buffer(algo))
                    if key in found or res[i].state != 0 or res[i].workspaceSize > ws:
                        continue
                    splitk = _config_attr(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM)
                    if splitk > 1 and not (_config_attr(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) & msk):
                        continue
                    if splitk <= 1 and res[i].workspaceSize and msk != REDUCTION_SCHEME_ANY:
                        continue  # no split-K yet a workspace: a fix-up whose split may follow m
                    found[key] = algo
        out = []
        check_res = ffi.new("cublasLtMatmulHeuristicResult_t *")
        for algo in found.values():
            # no workspace without split-K (as above), here at every m of ms
            free_needs_none = mask != REDUCTION_SCHEME_ANY and _config_attr(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) <= 1
            if all(lib.cublasLtMatmulAlgoCheck(self.handle, desc, b, a, c, c, algo, check_res) == 0
                   and check_res.workspaceSize <= (0 if free_needs_none else workspace_nbytes)
                   for desc, (a, b, c) in checks):
                out.append(algo)
        return out

    def timings(self, n: int, k: int, ms: Sequence[int], algos: Sequence, workspace_nbytes: int = 0) -> list[dict]:
        """Device ms of each of ``algos`` at each m of ``ms``: ``[{m: ms, ...}, ...]`` in the order of
        ``algos``; ``workspace_nbytes``: the workspace the timer gives the launches (algorithms from
        ``candidates(workspace_nbytes=)``).

        Raises:
            ValueError: the handle has no timer.
            DeviceError: a cuBLASLt or driver call failed.
        """
        if self._timer is None:
            raise ValueError("timings: this LtHandle has no timer")
        descs = {m: self.describe(m, n, k) for m in ms}
        launches = [functools.partial(self._launch, descs[m], algo, workspace_nbytes) for algo in algos for m in ms]
        t = self._timer((2 * max(ms) * k, 2 * n * k, 4 * max(ms) * n, workspace_nbytes), launches)
        return [dict(zip(ms, t[i * len(ms):(i + 1) * len(ms)])) for i in range(len(algos))]

    def _launch(self, described, algo, ws_nbytes: int, stream: int, a: int, b: int, c: int, ws: int) -> None:
        desc, (la, lb, lc) = described
        status = _lib.cublasLtMatmul(self.handle, desc, self._alpha, ffi.cast("void *", b), lb, ffi.cast("void *", a),
                                     la, self._beta, ffi.cast("void *", c), lc, ffi.cast("void *", c), lc, algo,
                                     ffi.cast("void *", ws) if ws_nbytes else ffi.NULL, ws_nbytes,
                                     ffi.cast("void *", stream))
        if status:
            check(status, "cublasLtMatmul (timing a candidate)")

    def algorithm(self, n: int, k: int, m: int = DECODE_M_MAX):
        """The algorithm of ``(n, k)`` in m's bucket and the workspace bytes its bucket allows, chosen
        once (see the module docstring); ``tuning[(n, k, bucket name)]`` keeps the candidates' times
        when they were timed.

        Raises:
            DeviceError: no algorithm valid at every m of the bucket's ``tune_ms`` (the message names
                n and k), or a cuBLASLt call failed.
        """
        bucket = bucket_of(m, self.buckets)
        key = (n, k, bucket.name)
        if key not in self._algos:
            ws = bucket.workspace_nbytes
            algos = self.candidates(n, k, bucket.tune_ms, workspace_nbytes=ws, mask=REDUCTION_SCHEME_WORKSPACE)
            if not algos:  # none passes the checks at every m of tune_ms (8B gate/up, n=28672, at (64, 512)
                # on the H200): the heuristic's first at the bucket's last m, split-K free
                algos = self._first_at(bucket.tune_ms[-1], n, k)
            if not algos:
                raise DeviceError(f"cuBLASLt has no f16 GEMM algorithm for n={n}, k={k} at m={bucket.tune_ms}",
                                  "CUBLAS_STATUS_NOT_SUPPORTED")
            best = 0
            if self._timer is not None and len(algos) > 1:
                times = self.timings(n, k, bucket.tune_ms, algos, ws)
                best = weighted_choice(times, bucket.weights, bucket.tune_ms)
                order = [best] + [i for i in range(len(algos)) if i != best]
                self.tuning[key] = [(_config(algos[i]), times[i]) for i in order]
            self._algos[key] = (algos[best], ws)
        return self._algos[key]

    def _first_at(self, m: int, n: int, k: int) -> list:
        """``[the heuristic's first split-K-free, workspace-free algorithm of (m, n, k)]``, or ``[]``."""
        res, got = self._heuristic(self.describe(m, n, k), n, k, 1, 0, 0)
        if got < 1:
            return []
        algo = ffi.new("cublasLtMatmulAlgo_t *", res[0].algo)
        return [algo] if _config_attr(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) <= 1 else []

    def config(self, n: int, k: int, m: int = DECODE_M_MAX) -> dict[str, int]:
        """The chosen algorithm's id, tile, split-K, reduction scheme and stages in m's bucket (for reports)."""
        return _config(self.algorithm(n, k, m)[0])

    def gemm(self, stream: int, g: LtGemm, a: int, b: int, c: int, workspace: int = 0) -> None:
        """Enqueue ``c = a @ b^T`` (see :class:`LtGemm`) on ``stream`` (a ``CUstream`` as int), with
        ``g.workspace_nbytes`` of device workspace at ``workspace`` (no GEMM that may run at the same
        time may use it).

        Raises:
            ValueError: an address not ``ALIGN``-aligned, or no workspace for a GEMM that needs one.
        """
        if (a | b | c | workspace) % ALIGN:
            raise ValueError(f"gemm operands must be {ALIGN}-byte aligned, got a={a:#x}, b={b:#x}, c={c:#x}, "
                             f"workspace={workspace:#x}")
        if g.workspace_nbytes and not workspace:
            raise ValueError(f"{g!r} needs {g.workspace_nbytes} bytes of workspace; none was given")
        la, lb, lc = g.layouts
        status = _lib.cublasLtMatmul(self.handle, g.desc, self._alpha, ffi.cast("void *", b), lb, ffi.cast("void *", a),
                                     la, self._beta, ffi.cast("void *", c), lc, ffi.cast("void *", c), lc, g.algo,
                                     ffi.cast("void *", workspace) if g.workspace_nbytes else ffi.NULL,
                                     g.workspace_nbytes, ffi.cast("void *", stream))
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
