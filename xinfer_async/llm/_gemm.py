"""The GEMM regime of a decoder's matrix products: prefill-sized T on tensor cores through cuBLASLt.

Where a plan's matrix product has ``T >= min_t`` token rows (``gemm_min_t``: ``XINFER_GEMM_MIN_T``,
else ``GEMM_MIN_T_LARGE`` for models of ``dim >= GEMM_LARGE_DIM`` with resident f16 weights, else
``GEMM_MIN_T``), its weights are of a block-quantized type (``GEMM_WEIGHT_DTYPES``) and the
device is cuda, the product (kinds ``matmul``, ``rmsnorm_matmul``, ``rmsnorm_matmul_swiglu``, the
output layer too) lowers to (``GemmLowering.commands``)::

    a16, inv = rmsnorm_f16(x, norm) | to_f16(x)       # (T, K) f16, (T,) f32: the activations, scaled
    for each chunk of <= chunk_rows weight rows [n0, n0 + nc):
        w16 = dequantize_f16_DT(w[n0 : n0 + nc])      # (nc, K) f16 in one scratch shared by the plan
        tmp = a16 @ w16^T                              # (T, nc) f32: Gemm (cuBLASLt, fp32 accumulation)
        y[:, n0 : n0 + nc] (+)= tmp * inv              # unscale_add; or y = swiglu_unscale(tmp, inv)

The f16 range: f16 overflows above 65504, and activations can exceed it (residual-stream outliers;
the down projection's input after SwiGLU). Each row is therefore multiplied by a power of two
``s <= 1`` chosen from its largest magnitude (``max|h| * s <= 2^15``) before rounding to f16, and
the GEMM's f32 result by ``1 / s`` after: exact scalings, so a row within range (s = 1, nearly all)
is the plain f16 product, and a row with outliers keeps f16's relative precision instead of
overflowing. bf16 was the alternative: no overflow, but 8 mantissa bits instead of 11 on every
activation. The weights are f16 of the exact gguf value (within 2^-11 relative; quantized codes
times f16 scales stay far inside f16's range).

Row independence (issue #15's rule): every kernel here treats rows alone, and the GEMM runs one
cuBLASLt algorithm per ``(n, K)`` and bucket of T (decode steps: T <= 64, split-K with a workspace
reduction allowed; prefill: larger T, split-K free; ``backends/cuda/_cublaslt.py``), so a row's result
never depends on the other rows of its launch, nor on T within a bucket; ``tests/test_gemm_regime.py``
checks it on the GPU. A split-K GEMM's workspace belongs to the slot (``model/_prepared.py``).

Memory: one weight scratch per slot (a persistent allocation: every plan of a slot shares it), of
the largest block matrix's ``N * K`` f16 values (Llama-3.1-8B: 2 x 14336 x 4096 x 2 B = 235 MB); the
output layer (vocab x dim) goes through it in chunks of as many rows as fit. Per plan: the f16
activations (T x K_max x 2 B), the row scales and the f32 product (T x chunk rows x 4 B).

Resident f16 weights (``XINFER_F16_WEIGHTS``: ``auto``, the default, decides by free memory on cuda,
``resident_f16``; ``1`` on; ``0`` off): every matrix that lowers is also kept as f16 on the device,
converted once at load on the device by the same ``dequantize_f16_DT`` kernel, one matrix at a time
(no host copy: the 8B shape's 15 GB would take ~30 s of the host C kernel on 2 cores), so no plan
dequantizes: memory for speed, 2 bytes a weight beside the quantized copy (Llama-3.1-8B: +15 GB over
its 5.5 GB of q4_1) and no weight scratch. The numbers are the same either way.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from ..hal import Access, DType
from ..model import Binding, Dispatch, Gemm, Region
from ..ops._kernels import GEMM_WEIGHT_DTYPES

#: the smallest T that lowers to the GEMM regime (cuda) for models narrower than ``GEMM_LARGE_DIM``;
#: below it the matrix kernels of xi_mvq/xi_mvt
GEMM_MIN_T = 64
#: the smallest T that lowers for models of ``dim >= GEMM_LARGE_DIM``: T <= 4 keeps the integer
#: decode kernel (``_pq``), every larger T runs the GEMM. Measured on the H200 (batched decode steps
#: with 512-token prompts, device ms a step, ``bench model --slots 2,4,5,6,8,16 --batching`` with
#: ``XINFER_GEMM_MIN_T`` 9 / 5, 2026-12-02, decode GEMM algorithms tuned per bucket of T):
#: Llama-3.1-8B shape T = 4: 5.43 / 5.44 (``_pq`` both), T = 5: 9.24 / 5.81, T = 6: 9.21 / 5.66,
#: T = 8: 9.24 / 5.79, T = 16: 5.78 / 5.84 (GEMM both); Llama-3.2-1B shape T = 4: 1.47 / 1.47,
#: T = 5: 2.10 / 1.50, T = 8: 2.11 / 1.50, T = 16: 1.63 / 1.61. ``_pq`` reads the weights once per
#: launch but decodes them for every token, so its step grows with T (8B T = 2: 3.4 ms, T = 4: 5.4);
#: the GEMM reads the resident f16 weights once at any T <= 64 (about 5.8 ms on 8B), so from T = 5
#: on it is ahead, and at T = 4 the two are even.
GEMM_MIN_T_LARGE = 5
#: the model width from which ``GEMM_MIN_T_LARGE`` applies. Below (SmolLM2-135M, dim 576) the
#: kernels stay ahead up to T = 32 (T = 8: 1.21 / 1.60 ms, T = 16: 1.38 / 1.61, T = 32: 1.71 / 1.76):
#: its matrices are too small for either to be bound by their bytes. Widths between 576 and 2048
#: were not measured and keep ``GEMM_MIN_T``, as before.
GEMM_LARGE_DIM = 2048
#: the environment variable that overrides the policy's threshold (``GEMM_MIN_T`` or
#: ``GEMM_MIN_T_LARGE``; ``off`` or ``0``: never)
GEMM_MIN_T_ENV = "XINFER_GEMM_MIN_T"
_GEMM_LABELS = frozenset(d.label for d in GEMM_WEIGHT_DTYPES)
RW, W_ = Access.READ_WRITE, Access.WRITE


def gemm_min_t(device_name: str, environ: Mapping[str, str] = os.environ, *, dim: int = 0,
               f16_resident: bool = True) -> int | None:
    """The policy: the smallest T whose quantized matrix products run as GEMMs on ``device_name``,
    or None (never), for a model of width ``dim`` (its embedding length) whose f16 weights are
    resident or not (``f16_resident``; without them every plan call dequantizes its weights first,
    which the measurements behind ``GEMM_MIN_T_LARGE`` did not pay). cpu: None (its kernels stay);
    cuda: ``XINFER_GEMM_MIN_T`` if set, else ``GEMM_MIN_T_LARGE`` (5) where ``dim >= GEMM_LARGE_DIM``
    (2048) and ``f16_resident``, else ``GEMM_MIN_T`` (64).

    Raises:
        ValueError: ``XINFER_GEMM_MIN_T`` is not a positive integer, ``0`` or ``off`` (the message
            gives the value).
    """
    if device_name != "cuda":
        return None
    raw = environ.get(GEMM_MIN_T_ENV)
    if raw is None or raw.strip() == "":
        return GEMM_MIN_T_LARGE if dim >= GEMM_LARGE_DIM and f16_resident else GEMM_MIN_T
    text = raw.strip().lower()
    if text in ("off", "0"):
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 1:
        raise ValueError(f"{GEMM_MIN_T_ENV}={raw!r} must be a positive integer (the smallest T of the GEMM "
                         "regime), 0 or 'off'")
    return value


#: the environment variable of resident f16 weights: ``auto`` (unset: the default), ``1`` on, ``0`` off
F16_WEIGHTS_ENV = "XINFER_F16_WEIGHTS"
#: ``auto`` keeps f16 copies resident when their bytes are at most this fraction of the device memory
#: still free once the quantized weights and the KV caches are placed (see ``resident_f16``)
F16_AUTO_FRACTION = 1 / 3


def f16_weights(environ: Mapping[str, str] = os.environ) -> str:
    """The setting of resident f16 weights: ``XINFER_F16_WEIGHTS``, ``"auto"`` (unset or empty:
    the default; ``resident_f16`` decides per device and model), ``"1"`` (on) or ``"0"`` (off).

    Raises:
        ValueError: another value (the message names the variable and gives the value).
    """
    raw = environ.get(F16_WEIGHTS_ENV, "")
    text = raw.strip().lower() or "auto"
    if text not in ("auto", "0", "1"):
        raise ValueError(f"{F16_WEIGHTS_ENV}={raw!r} must be auto (the default), 1 (keep f16 weights resident) or 0")
    return text


def resident_f16(setting: str | bool, device_name: str, f16_nbytes: int, free_nbytes: int | None) -> bool:
    """Whether a model keeps resident f16 copies of its matrices that lower to the GEMM regime.

    ``setting`` ``"1"``/True: on; ``"0"``/False: off; ``"auto"``: on only on cuda when the copies
    (``f16_nbytes``) take at most ``F16_AUTO_FRACTION`` (1/3) of ``free_nbytes``, the device memory
    still free after the quantized weights and every KV cache. The fraction leaves two thirds of that
    memory for what is allocated later or elsewhere (each plan's scratch arena, e.g. an 8B score plan's
    512 x 128256 f32 logits = 263 MB a slot; CUDA graphs; cuBLASLt; other processes) and for
    fragmentation, since the copies buy speed only, never capacity. On an H200 (139 GiB) the
    Llama-3.1-8B shape's 15 GB of copies fit beside 64 sequences x 2048 f32 KV rows (34 GB), but not
    beside 96 x 4096 (103 GB); on a 24 GB card they never do, and the model keeps its memory for the KV cache.
    cpu (``free_nbytes`` None): its kernels read the quantized weights directly; off.

    Raises:
        ValueError: an unknown ``setting`` (named with its value).
    """
    if setting is True or setting == "1":
        return True
    if setting is False or setting == "0":
        return False
    if setting != "auto":
        raise ValueError(f"f16_weights={setting!r} must be 'auto', '1', '0', True or False")
    return device_name == "cuda" and free_nbytes is not None and f16_nbytes <= free_nbytes * F16_AUTO_FRACTION


def lowers(weight_dtype: str, rows: int, min_t: int | None) -> bool:
    """Whether a matrix product of ``rows`` token rows with weights of ``weight_dtype`` (a label)
    runs in the GEMM regime, given the policy's ``min_t``."""
    return min_t is not None and rows >= min_t and weight_dtype in _GEMM_LABELS


class GemmLowering:
    """The GEMM regime's scratch and commands for one model (declared before ``freeze``).

    Args:
        session: the ``ModelSession`` (weights uploaded, not frozen yet).
        matrices: ``(N, K)`` of every block matrix that may lower (the output layer is chunked).
        chunk_k: K of the output layer.
        resident: weight region -> its resident f16 copy (``f16_weights``); a weight found there is
            not dequantized, and with ``resident`` given no weight scratch is made.

    The weight scratch holds ``max(N * K)`` f16 values; ``chunk_rows`` = that // ``chunk_k`` rows
    of the output layer go through it at a time.
    """

    def __init__(self, session: Any, matrices: list[tuple[int, int]], chunk_k: int,
                 resident: Mapping[Region, Region] | None = None):
        self.session = session
        self.scratch_elems = max(n * k for n, k in matrices)
        self.max_k = max([k for _, k in matrices] + [chunk_k])
        self.max_n = max(n for n, _ in matrices)
        self.chunk_rows = max(1, self.scratch_elems // chunk_k)
        self.resident = resident
        self.w16 = None if resident is not None else session.scratch(2 * self.scratch_elems, persistent=True,
                                                                     name="gemm.w16")
        self._rows: dict[int, dict[str, Region]] = {}

    @staticmethod
    def kernel_names(dtypes: set[str], glu: bool) -> set[str]:
        """The kernels ``commands`` dispatches for weights of ``dtypes`` (labels of the GEMM types)."""
        names = {"to_f16", "rmsnorm_f16", "unscale_add"} | {f"dequantize_f16_{d}" for d in dtypes if d in _GEMM_LABELS}
        return names | ({"swiglu_unscale"} if glu else set())

    def declare(self, T: int) -> None:
        """Private scratch of a T-row plan: f16 activations, row scales, the f32 product."""
        s = self.session
        tmp_n = max(self.max_n, self.chunk_rows)
        self._rows[T] = dict(a16=s.scratch(2 * T * self.max_k, name=f"T{T}.gemm.a16"),
                             inv=s.scratch(4 * T, name=f"T{T}.gemm.inv"),
                             tmp=s.scratch(4 * T * tmp_n, name=f"T{T}.gemm.tmp"))

    def commands(self, kernels: Mapping[str, Any], w: Region, dtype: str, x: Region, y: Region, T: int, N: int,
                 K: int, *, norm: Region | None = None, eps: float = 0.0, accumulate: int = 0,
                 glu: bool = False) -> list:
        """The commands of ``y (+)= act(rmsnorm(x) @ w^T)`` for ``T`` rows (see the module docstring).

        Args:
            kernels: the definition's kernels by name.
            w: the (N, K) weight of type ``dtype`` (glu: (2N, K), gate rows then up rows).
            x: (T, K) f32; ``norm`` (K) f32 or None (no rmsnorm); y: (T, N) f32.
            accumulate: 1 adds to y (not with ``glu``).

        Raises:
            ValueError: T was not declared, or ``glu`` with more weight rows than a chunk holds.
        """
        if T not in self._rows:
            raise ValueError(f"T={T} has no GEMM scratch (declare(T) before freeze)")
        L = self._rows[T]
        a16, inv, tmp = L["a16"], L["inv"], L["tmp"]
        d = lambda name, binds, consts: Dispatch(  # noqa: E731
            kernels[name], [Binding(b[0], b[1]) if isinstance(b, tuple) else Binding(b) for b in binds], consts)
        if norm is None:
            cmds = [d("to_f16", [x, (a16, W_), (inv, W_)], dict(rows=T, dim=K))]
        else:
            cmds = [d("rmsnorm_f16", [x, norm, (a16, W_), (inv, W_)], dict(rows=T, dim=K, eps=eps))]
        rows = 2 * N if glu else N
        step = rows if glu else self.chunk_rows
        if glu and rows * K > self.scratch_elems:
            raise ValueError(f"glu weight of {rows} x {K} exceeds the GEMM weight scratch ({self.scratch_elems} values)")
        row_bytes = DType.parse(dtype).nbytes(K)
        w16 = None if self.resident is None else self.resident.get(w)
        if w16 is None and self.w16 is None:
            raise ValueError(f"weight {w!r} has no resident f16 copy and the lowering no weight scratch")
        for n0 in range(0, rows, step):
            nc = min(step, rows - n0)
            if w16 is not None:
                cmds.append(Gemm(a16, w16.slice(2 * n0 * K, 2 * nc * K), tmp, T, nc, K))
            else:
                cmds += [d(f"dequantize_f16_{dtype}", [w.slice(n0 * row_bytes, nc * row_bytes), (self.w16, W_)],
                           dict(n=nc * K)),
                         Gemm(a16, self.w16, tmp, T, nc, K)]
            if glu:
                cmds.append(d("swiglu_unscale", [tmp, inv, (y, W_)], dict(rows=T, n=N)))
            else:
                cmds.append(d("unscale_add", [tmp, inv, (y.slice(4 * n0, y.nbytes - 4 * n0), RW)],
                              dict(rows=T, n=nc, y_stride=N, accumulate=accumulate)))
        return cmds
