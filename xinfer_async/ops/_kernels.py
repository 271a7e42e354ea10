"""The kernel declarations: one ``KernelSpec`` a kernel, written once for every backend.

Each declaration gives the kernel's bindings (order, access, byte size as a function of the
constants, shape for the docs), its constants (struct order and kind), their checks, its cuda launch
geometry and its one-line contract. The C and CUDA constants structs, the C prototypes and the table
of ``native/KERNELS.md`` are generated from here (``python -m xinfer_async.ops._codegen``); the
bodies are ``native/kernels/*.c`` (``xi_k_<name>``) and ``shaders/<name>.cu``.

Adding a kernel: one ``_declare(...)`` below, its C body, its ``.cu`` file, then run the generator.

The weights of the matrix kernels (``w``, ``w2``): on cuda the integer decode entries (the ``_pq``
entries of ``matmul_DT``, ``rmsnorm_matmul_DT`` and ``rmsnorm_matmul_swiglu_DT``, and every
``qmatmul_*``) start reading them before the kernel dispatched just before them in the stream has
ended (programmatic dependent launch: shaders/xi_common.cuh, xi_mvq.cuh), so a buffer bound there must
not be written by that kernel. A model's weights never are: they are uploaded by copies, and
``ModelSession.derived_weight`` awaits the kernel that computes one.
"""

from __future__ import annotations

import dataclasses

from typing import Callable

from ..hal import Access, DType
from ._attention_split import count_ints, workspace_floats
from ._spec import BindingSpec, Consts, CudaLaunch, KernelSpec, cdiv, flat, per_row

R, W, RW = Access.READ, Access.WRITE, Access.READ_WRITE


def _f32(expr: Callable[[Consts], int]) -> Callable[[Consts], int]:
    return lambda c: 4 * max(0, expr(c))


def _q8_1_bytes(t: int, k: int) -> int:
    """Bytes of the planar q8_1 activations of t tokens of k: int8 codes (t, k), then (d, s) f32 pairs (t, k / 32)."""
    return max(0, t) * (k + k // 32 * 8)


def _strided(rows: str, stride: str, width: Callable[[Consts], int]) -> Callable[[Consts], int]:
    return _f32(lambda c: (c[rows] - 1) * c[stride] + width(c) if c[rows] > 0 else 0)


def _stride_ok(rows: str, stride: str, width: Callable[[Consts], int]):
    return lambda c: (f"{stride}={c[stride]} is smaller than the row width {width(c)}"
                      if c[rows] > 1 and c[stride] < width(c) else None)


def _all(*checks):
    def run(c):
        for chk in checks:
            m = chk(c)
            if m:
                return m
        return None

    return run


KERNELS: dict[str, KernelSpec] = {}


def _declare(name: str, bindings, constants, *, cuda: CudaLaunch, doc: str, check=lambda c: None,
             struct: str = "", cpu: bool = True) -> None:
    """Declare kernel ``name``: ``bindings`` as ``(name, access, shape, nbytes)``, ``constants`` as
    ``"field"`` (int32) or ``"field:f32"`` (float), in struct order; ``cpu=False``: cuda only."""
    if name in KERNELS:
        raise ValueError(f"kernel {name!r} is declared twice")
    consts = tuple((f[:-4], "f") if f.endswith(":f32") else (f, "i") for f in constants)
    KERNELS[name] = KernelSpec(name, tuple(BindingSpec(n, a, nb, shape) for n, a, shape, nb in bindings), consts,
                               check, struct, cuda, doc, cpu)


_declare("affine", [("x", R, "(n)", _f32(lambda c: c["n"])), ("y", W, "(n)", _f32(lambda c: c["n"]))],
         ["n", "a:f32", "b:f32"], cuda=flat(lambda c: c["n"]), doc="y = a*x + b")
_declare("add", [("a", R, "(n)", _f32(lambda c: c["n"])), ("b", R, "(n)", _f32(lambda c: c["n"])),
                 ("y", W, "(n)", _f32(lambda c: c["n"]))],
         ["n"], cuda=flat(lambda c: c["n"]), doc="y = a + b")
_declare("rmsnorm", [("x", R, "(rows, dim)", _f32(lambda c: c["rows"] * c["dim"])),
                     ("w", R, "(dim)", _f32(lambda c: c["dim"])),
                     ("y", W, "(rows, dim)", _f32(lambda c: c["rows"] * c["dim"]))],
         ["rows", "dim", "eps:f32"], cuda=per_row("rows"), doc="y = x / sqrt(mean(x^2) + eps) * w")
_rope_width = lambda c: c["n_head"] * c["head_dim"]  # noqa: E731
_declare("rope", [("x", RW, "(rows, n_head, head_dim)", _strided("rows", "row_stride", _rope_width)),
                  ("pos", R, "(rows) i32", _f32(lambda c: c["rows"]))],
         ["rows", "n_head", "head_dim", "row_stride", "theta:f32"],
         check=_all(_stride_ok("rows", "row_stride", _rope_width),
                    lambda c: f"head_dim={c['head_dim']} must be even" if c["head_dim"] % 2 else None),
         cuda=flat(lambda c: c["rows"] * c["n_head"] * (c["head_dim"] // 2)),
         doc="adjacent pairs (x[2i], x[2i+1]) of each head rotated by pos[r] * theta^(-2i/head_dim) (GGUF "
             "\"normal\" layout); row r starts at r*row_stride; rows with pos < 0 untouched")
_declare("swiglu", [("gate", R, "", _strided("rows", "in_stride", lambda c: c["n"])),
                    ("up", R, "", _strided("rows", "in_stride", lambda c: c["n"])),
                    ("y", W, "(rows, n)", _f32(lambda c: c["rows"] * c["n"]))],
         ["rows", "n", "in_stride"], check=_stride_ok("rows", "in_stride", lambda c: c["n"]),
         cuda=flat(lambda c: c["rows"] * c["n"]), doc="y[r,i] = silu(gate[r*in_stride+i]) * up[r*in_stride+i]")
_declare("softmax", [("x", R, "(rows, n)", _f32(lambda c: c["rows"] * c["n"])),
                     ("y", W, "(rows, n)", _f32(lambda c: c["rows"] * c["n"]))],
         ["rows", "n"], cuda=per_row("rows"), doc="row-wise, max subtracted first")
_q_width = lambda c: c["n_head"] * c["head_dim"]  # noqa: E731
_kv = _f32(lambda c: c["ctx"] * c["n_kv"] * c["head_dim"])
_gqa_ok = lambda c: (f"n_head={c['n_head']} is not a multiple of n_kv={c['n_kv']}"  # noqa: E731
                     if c["n_kv"] == 0 or c["n_head"] % c["n_kv"] else None)
_ATTENTION = CudaLaunch(family="attention")
_window_ok = lambda c: f"window={c['window']} must be >= 0" if c["window"] < 0 else None  # noqa: E731
_part = _f32(lambda c: workspace_floats(c["T"], c["n_head"], c["head_dim"]))
_count = _f32(lambda c: count_ints(c["T"], c["n_head"]))
#: the split-K workspace of the attention kernels (ops/_attention_split.py; the cpu kernels leave it be)
_SPLIT = [("part", RW, "(T, n_head, 32, hd + 2) workspace (T <= 8, else none)", _part),
          ("count", RW, "(T, n_head) i32 (T <= 8, else none), zero before the launch", _count)]
_SPLIT_DOC = ("; part and count: the cuda split-K workspace (ops/_attention_split.py: count zero before the launch "
              "and after it; the result does not depend on it); `_f16`: k and v f16, converted exactly to f32 as read; on cpu with llama.cpp's numerics for an F16 cache: q and the softmax probabilities (after the division by their sum) rounded to f16 before their products (cuda: q and the probabilities f32)")
_KV_DTYPES = (DType.f32, DType.f16)  # the KV-cache types (``kv_dtype`` of llm/_llama.py)


def _kv_bytes(dt: DType, rows: str):
    return lambda c: dt.nbytes(max(0, c[rows] * c["n_kv"] * c["head_dim"]))


def _declare_attention(dt: DType) -> None:
    """attention[_f16] and attention_batched[_f16]: the cache of ``dt`` (f16: converted to f32 as loaded; on
    cpu q and the probabilities rounded to f16 as llama.cpp does, native/kernels/attention.c); and their
    ``_quantize`` twins (cuda only), which also write the output as the next product's q8_1 tokens."""
    sfx, kvd = ("" if dt is DType.f32 else f"_{dt.label}"), f"{dt.label} " if dt is not DType.f32 else ""
    plain = [("q", R, "(T, n_head, hd)", _strided("T", "q_stride", _q_width)),
             ("k", R, f"(ctx, n_kv, hd) {kvd}".strip(), _kv_bytes(dt, "ctx")),
             ("v", R, f"(ctx, n_kv, hd) {kvd}".strip(), _kv_bytes(dt, "ctx")),
             ("pos", R, "(T) i32", _f32(lambda c: c["T"])),
             ("out", W, "(T, n_head, hd)", _f32(lambda c: c["T"] * _q_width(c)))] + _SPLIT
    consts = ["T", "n_head", "n_kv", "head_dim", "ctx", "q_stride", "scale:f32", "window"]
    check = _all(_stride_ok("T", "q_stride", _q_width), _gqa_ok, _window_ok)
    doc = ("query row t (starting at t*q_stride) attends keys 0..pos[t] inclusive (window > 0: only keys j with "
           "pos[t] - j < window, a sliding window); query head h reads kv head h / (n_head / n_kv); softmax with "
           "max subtracted; pos[t] < 0 gives a zero row" + _SPLIT_DOC)
    batched = [("q", R, "(T, n_head, hd)", _strided("T", "q_stride", _q_width)),
               ("k", R, f"(rows, n_kv, hd) {kvd}".strip(), _kv_bytes(dt, "rows")),
               ("v", R, f"(rows, n_kv, hd) {kvd}".strip(), _kv_bytes(dt, "rows")),
               ("first", R, "(T) i32", _f32(lambda c: c["T"])),
               ("last", R, "(T) i32", _f32(lambda c: c["T"])),
               ("out", W, "(T, n_head, hd)", _f32(lambda c: c["T"] * _q_width(c)))] + _SPLIT
    bconsts = ["T", "n_head", "n_kv", "head_dim", "rows", "q_stride", "scale:f32", "window"]
    bdoc = ("query row t attends key rows first[t]..last[t] inclusive (last clamped to rows - 1; window > 0: first "
            "raised to last - window + 1); first[t] < 0 or last[t] < first[t] gives a zero row; otherwise the math and accumulation order of `attention` with "
            "pos = last - first over the cache starting at row first[t] (bit-identical): one launch serves several "
            "sequences' caches stacked in one allocation" + _SPLIT_DOC)
    _declare("attention" + sfx, plain, consts, struct="attention", check=check, cuda=_ATTENTION, doc=doc)
    _declare("attention_batched" + sfx, batched, bconsts, struct="attention_batched", check=check, cuda=_ATTENTION,
             doc=bdoc)
    xq = ("xq", W, "(T, n_head hd) q8_1 planar", lambda c: _q8_1_bytes(c["T"], _q_width(c)))
    hd32 = lambda c: f"head_dim={c['head_dim']} is not a multiple of 32" if c["head_dim"] % 32 else None  # noqa: E731
    qdoc = ("; and xq = out quantized per block of 32 (32 dims of a head) as `quantize_q8_1` does, its bits (K of xq: "
            "n_head * head_dim; a warp's values are a block: xi_attention.cuh QOUT); head_dim a multiple of 32; "
            "cuda only")
    _declare("attention_quantize" + sfx, plain + [xq], consts, struct="attention_quantize", check=_all(check, hd32),
             cuda=_ATTENTION, cpu=False, doc="`attention" + sfx + "`" + qdoc)
    _declare("attention_batched_quantize" + sfx, batched + [xq], bconsts, struct="attention_batched_quantize",
             check=_all(check, hd32), cuda=_ATTENTION, cpu=False, doc="`attention_batched" + sfx + "`" + qdoc)


_declare_attention(DType.f32)
_declare("kv_store", [("src", R, "(T, width)", _strided("T", "src_stride", lambda c: c["width"])),
                      ("cache", RW, "(ctx, width)", _f32(lambda c: c["ctx"] * c["width"])),
                      ("pos", R, "(T) i32", _f32(lambda c: c["T"]))],
         ["T", "width", "ctx", "src_stride"], check=_stride_ok("T", "src_stride", lambda c: c["width"]),
         cuda=flat(lambda c: c["T"] * c["width"]),
         doc="cache[pos[t], :] = src[t*src_stride : t*src_stride+width]; rows with pos outside [0, ctx) skipped")
#: the weight types of the ``_DT`` kernel families (``dequantize_DT``: the block types among them)
WEIGHT_DTYPES = (DType.f32, DType.f16, DType.q8_0, DType.q4_0, DType.q4_1,
                 DType.q5_0, DType.q5_1, DType.q2_k, DType.q3_k, DType.q4_k, DType.q5_k, DType.q6_k,
                 DType.iq4_nl, DType.iq4_xs, DType.bf16)


def _matrix_launch(dt: DType, kind: str) -> CudaLaunch:
    """The ``matmul`` launcher family of ``backends/cuda/_launch.py`` (shaders/xi_mvc.cuh, xi_mvt.cuh,
    xi_tc.cuh; the formats of shaders/xi_kquant.cuh through their decoders there), every weight type."""
    return CudaLaunch(family="matmul", params=(("dt", dt.label), ("kind", kind)))


def _blocks(dt: DType, key: str):
    return lambda c: (f"{key}={c[key]} is not a multiple of {dt.label}'s block size {dt.block_size}"
                      if c[key] % dt.block_size else None)


def _matrix(dt: DType, rows: int = 1):
    """Bytes of a (rows * N, K) matrix of ``dt``."""
    return lambda c: dt.nbytes(rows * c["N"] * c["K"])


_K32 = "; K a multiple of the block size (32, or 256 for the K-quants and iq4_xs) for block types"
# A family a loop. The declaration order is the order of the generated structs, the order the
# hand-written headers had (so the text the compilers see is unchanged): declare new kernels last.
def _declare_get_rows(_dt: DType) -> None:
    _d = _dt.label
    _declare(f"get_rows_{_d}", [("table", R, "(vocab, dim) DT", (lambda d: lambda c: d.nbytes(c["vocab"] * c["dim"]))(_dt)),
                                ("ids", R, "(T) i32", _f32(lambda c: c["T"])),
                                ("out", W, "(T, dim)", _f32(lambda c: c["T"] * c["dim"]))],
             ["T", "dim", "vocab"], check=_blocks(_dt, "dim"), struct="get_rows", cuda=per_row("T"),
             doc="out[t] = dequantize(table[ids[t]]); an id outside [0, vocab) gives a NaN row")


def _declare_matmul(_dt: DType) -> None:
    _d = _dt.label
    _declare(f"matmul_{_d}", [("w", R, "(N, K) DT", _matrix(_dt)), ("x", R, "(T, K)", _f32(lambda c: c["T"] * c["K"])),
                              ("y", RW, "(T, N)", _f32(lambda c: c["T"] * c["N"]))],
             ["T", "N", "K", "accumulate"], check=_blocks(_dt, "K"), struct="matmul",
             cuda=_matrix_launch(_dt, "matmul"),
             doc="y[t,n] = (accumulate ? y[t,n] : 0) + sum_k w[n,k] * x[t,k]" + _K32)


def _declare_rmsnorm_matmul(_dt: DType) -> None:
    _d = _dt.label
    _declare(f"rmsnorm_matmul_{_d}", [("w", R, "(N, K) DT", _matrix(_dt)),
                                      ("x", R, "(T, K)", _f32(lambda c: c["T"] * c["K"])),
                                      ("norm", R, "(K)", _f32(lambda c: c["K"])),
                                      ("y", RW, "(T, N)", _f32(lambda c: c["T"] * c["N"]))],
             ["T", "N", "K", "accumulate", "eps:f32"], check=_blocks(_dt, "K"), struct="rmsnorm_matmul",
             cuda=_matrix_launch(_dt, "rmsnorm_matmul"),
             doc="y[t,n] = (accumulate ? y[t,n] : 0) + sum_k w[n,k] * h[t,k] with h = `rmsnorm`(x, norm, eps): "
                 "`rmsnorm` then `matmul_DT` in one kernel" + _K32)


def _declare_rmsnorm_matmul_swiglu(_dt: DType) -> None:
    _d = _dt.label
    _declare(f"rmsnorm_matmul_swiglu_{_d}", [("w", R, "(2N, K) DT", _matrix(_dt, 2)),
                                             ("x", R, "(T, K)", _f32(lambda c: c["T"] * c["K"])),
                                             ("norm", R, "(K)", _f32(lambda c: c["K"])),
                                             ("y", W, "(T, N)", _f32(lambda c: c["T"] * c["N"]))],
             ["T", "N", "K", "eps:f32"], check=_blocks(_dt, "K"), struct="rmsnorm_matmul_swiglu",
             cuda=_matrix_launch(_dt, "rmsnorm_matmul_swiglu"),
             doc="h = `rmsnorm`(x, norm, eps); gate[t,n] = sum_k w[n,k] * h[t,k], up[t,n] = sum_k w[N+n,k] * h[t,k] "
                 "(rows [0, N) of w the gate matrix, [N, 2N) the up matrix); y = silu(gate) * up: `rmsnorm`, "
                 "`matmul_DT` into (T, 2N), then `swiglu` with in_stride = 2N" + _K32)


for _dt in WEIGHT_DTYPES:
    _declare_get_rows(_dt)
for _dt in WEIGHT_DTYPES:
    _declare_matmul(_dt)
for _dt in [d for d in WEIGHT_DTYPES if d.is_quantized]:
    _declare(f"dequantize_{_dt.label}", [("src", R, "(n / block)", (lambda d: lambda c: d.nbytes(c["n"]))(_dt)),
                                         ("dst", W, "(n)", _f32(lambda c: c["n"]))],
             ["n"], check=_blocks(_dt, "n"), struct="dequantize", cuda=flat(lambda c: c["n"]),
             doc="float32 values of a block-quantized array")
for _dt in WEIGHT_DTYPES:
    _declare_rmsnorm_matmul(_dt)
for _dt in WEIGHT_DTYPES:
    _declare_rmsnorm_matmul_swiglu(_dt)

_qkv_width = lambda c: (c["n_head"] + 2 * c["n_kv"]) * c["head_dim"]  # noqa: E731  q, k and v heads of a row
_kv_cache = _f32(lambda c: c["ctx"] * c["n_kv"] * c["head_dim"])
_declare("rope_kv_store", [("qkv", RW, "(T, row_stride)", _strided("T", "row_stride", _qkv_width)),
                           ("pos", R, "(T) i32", _f32(lambda c: c["T"])), ("row", R, "(T) i32", _f32(lambda c: c["T"])),
                           ("k_cache", RW, "(ctx, n_kv*hd)", _kv_cache), ("v_cache", RW, "(ctx, n_kv*hd)", _kv_cache)],
         ["T", "n_head", "n_kv", "head_dim", "row_stride", "ctx", "theta:f32"],
         check=_all(_stride_ok("T", "row_stride", _qkv_width),
                    lambda c: f"head_dim={c['head_dim']} must be even" if c["head_dim"] % 2 else None),
         # a block a token; 128 threads, a thread a rotated pair (or a v pair) of its q, k and v heads
         cuda=CudaLaunch(128, lambda c, sms: (max(1, c["T"]), cdiv((c["n_head"] + 2 * c["n_kv"]) * (c["head_dim"] // 2), 128), 1)),
         doc="row t starts at t*row_stride and holds n_head q heads, n_kv k heads, n_kv v heads; if pos[t] >= 0 its q "
             "and k heads are rotated as `rope` does by pos[t]; then, rows with row[t] outside [0, ctx) skipped, "
             "k_cache[row[t]] = its (rotated) k heads and v_cache[row[t]] = its v heads: bit-identical to `rope` "
             "(q, n_head) + `rope` (k, n_kv) + `kv_store` (k) + `kv_store` (v) with pos = row; `_f16`: the caches f16, the "
             "stored values rounded to nearest even")
_declare("rope_kv_store_ff", [("qkv", RW, "(T, row_stride)", _strided("T", "row_stride", _qkv_width)),
                              ("pos", R, "(T) i32", _f32(lambda c: c["T"])), ("row", R, "(T) i32", _f32(lambda c: c["T"])),
                              ("k_cache", RW, "(ctx, n_kv*hd)", _kv_cache), ("v_cache", RW, "(ctx, n_kv*hd)", _kv_cache),
                              ("freq_factors", R, "(head_dim/2)", _f32(lambda c: c["head_dim"] // 2))],
         ["T", "n_head", "n_kv", "head_dim", "row_stride", "ctx", "theta:f32"], struct="rope_kv_store",
         check=_all(_stride_ok("T", "row_stride", _qkv_width),
                    lambda c: f"head_dim={c['head_dim']} must be even" if c["head_dim"] % 2 else None),
         cuda=CudaLaunch(128, lambda c, sms: (max(1, c["T"]), cdiv((c["n_head"] + 2 * c["n_kv"]) * (c["head_dim"] // 2), 128), 1)),
         doc="`rope_kv_store` with pair i's angle divided by freq_factors[i] (llama.cpp's rope freq_factors: "
             "Llama 3 rope scaling, the file's `rope_freqs.weight`)")
_declare("argmax", [("x", R, "(rows, n)", _f32(lambda c: c["rows"] * c["n"])),
                    ("out", W, "(rows) i32", _f32(lambda c: c["rows"]))],
         ["rows", "n"], check=lambda c: "n must be >= 1" if c["n"] < 1 and c["rows"] else None,
         cuda=per_row("rows", block=1024), doc="index of the largest value; the lowest index on ties")

# -- the blocks of the other decoder families (llm/_arch.py) ---------------------------------------
_qk_width = lambda c: (c["n_head"] + c["n_kv"]) * c["head_dim"]  # noqa: E731
_declare("qk_rmsnorm", [("qkv", RW, "(T, row_stride)", _strided("T", "row_stride", _qk_width)),
                        ("q_norm", R, "(head_dim)", _f32(lambda c: c["head_dim"])),
                        ("k_norm", R, "(head_dim)", _f32(lambda c: c["head_dim"]))],
         ["T", "n_head", "n_kv", "head_dim", "row_stride", "eps:f32"],
         check=_stride_ok("T", "row_stride", _qk_width),
         cuda=CudaLaunch(256, lambda c, sms: (max(1, c["T"]), cdiv(c["n_head"] + c["n_kv"], 8), 1)),
         doc="row t starts at t*row_stride and holds n_head q heads then n_kv k heads of head_dim: each q head "
             "becomes `rmsnorm`(head, q_norm, eps), each k head `rmsnorm`(head, k_norm, eps) (per-head q/k norm)")
_declare("rmsnorm_add", [("x", R, "(rows, dim)", _f32(lambda c: c["rows"] * c["dim"])),
                         ("w", R, "(dim)", _f32(lambda c: c["dim"])),
                         ("y", RW, "(rows, dim)", _f32(lambda c: c["rows"] * c["dim"]))],
         ["rows", "dim", "eps:f32"], cuda=per_row("rows"),
         doc="y += `rmsnorm`(x, w, eps), row by row (a post-norm before the residual add)")
_declare("geglu", [("gu", R, "(rows, 2n)", _f32(lambda c: c["rows"] * 2 * c["n"])),
                   ("y", W, "(rows, n)", _f32(lambda c: c["rows"] * c["n"]))],
         ["rows", "n"], cuda=flat(lambda c: c["rows"] * c["n"]),
         doc="y[r,i] = gelu(gu[r,i]) * gu[r,n+i] (gate columns then up columns of a row), gelu(g) = 0.5 g (1 + "
             "tanh(sqrt(2/pi) g (1 + 0.044715 g^2))) (the tanh approximation)")
_declare("bias_add", [("y", RW, "(rows, n)", _f32(lambda c: c["rows"] * c["n"])),
                      ("b", R, "(n)", _f32(lambda c: c["n"]))],
         ["rows", "n"], cuda=flat(lambda c: c["rows"] * c["n"]), doc="y[r,i] += b[i]")
_declare("softcap", [("x", RW, "(n)", _f32(lambda c: c["n"]))], ["n", "cap:f32"],
         check=lambda c: f"cap={c['cap']} must be > 0" if not c["cap"] > 0 else None,
         cuda=flat(lambda c: c["n"]), doc="x = cap * tanh(x / cap)")

#: the cpu backend's row-interleaved layouts -> the block type whose bytes they rearrange
#: (``CPUBackend.matrix_dtype`` picks them at load; native/kernels/q8dot.c): the same numerics, so
#: the same bits. Only the cpu backend has their kernels (cuda keeps the GGUF layout).
REPACKED_DTYPES = {DType.q8_0_r8: DType.q8_0, DType.q4_0_r8: DType.q4_0, DType.q4_1_r8: DType.q4_1,
                   DType.q5_0_r8: DType.q5_0, DType.q5_1_r8: DType.q5_1}
for _dt in REPACKED_DTYPES:
    _declare_get_rows(_dt)
    _declare_matmul(_dt)
    _declare_rmsnorm_matmul(_dt)
    _declare_rmsnorm_matmul_swiglu(_dt)
for _name in [n for n in KERNELS if n.endswith(tuple(f"_{d.label}" for d in REPACKED_DTYPES))]:
    KERNELS[_name] = dataclasses.replace(KERNELS[_name], cuda=None)  # cpu only: no shader, no cuda launch


# -- the f16 KV cache (``kv_dtype="f16"`` of llm/_llama.py): its attention and its stores ---------------
_declare_attention(DType.f16)
for _ff in (False, True):
    _kv16 = (lambda c: DType.f16.nbytes(c["ctx"] * c["n_kv"] * c["head_dim"]))
    _declare("rope_kv_store_ff_f16" if _ff else "rope_kv_store_f16",
             [("qkv", RW, "(T, row_stride)", _strided("T", "row_stride", _qkv_width)),
              ("pos", R, "(T) i32", _f32(lambda c: c["T"])), ("row", R, "(T) i32", _f32(lambda c: c["T"])),
              ("k_cache", RW, "(ctx, n_kv*hd) f16", _kv16), ("v_cache", RW, "(ctx, n_kv*hd) f16", _kv16)]
             + ([("freq_factors", R, "(head_dim/2)", _f32(lambda c: c["head_dim"] // 2))] if _ff else []),
             ["T", "n_head", "n_kv", "head_dim", "row_stride", "ctx", "theta:f32"], struct="rope_kv_store",
             check=_all(_stride_ok("T", "row_stride", _qkv_width),
                        lambda c: f"head_dim={c['head_dim']} must be even" if c["head_dim"] % 2 else None),
             cuda=CudaLaunch(128, lambda c, sms: (max(1, c["T"]), cdiv((c["n_head"] + 2 * c["n_kv"]) * (c["head_dim"] // 2), 128), 1)),
             doc=("`rope_kv_store_ff`" if _ff else "`rope_kv_store`") + " into f16 caches: the stored k and v rounded to "
                 "the nearest f16 (ties to even, numpy's astype(float16)); q and the qkv row as the f32 kernel leaves them")

# -- the GEMM regime's operands (llm/_gemm.py: a cuBLASLt f16 x f16 -> f32 GEMM; shaders/xi_gemm_prep.cuh) --
#: the weight types the GEMM regime dequantizes to f16 (``dequantize_f16_DT``)
GEMM_WEIGHT_DTYPES = tuple(d for d in WEIGHT_DTYPES if d.is_quantized)
_F16_SCALE = ("; the row's f16 values are h * s[r], s[r] the largest power of two <= 1 with max|h[r]| * s[r] <= "
              "2^15 (NaN elements aside), inv_scale[r] = 1 / s[r]")
for _dt in GEMM_WEIGHT_DTYPES:
    _declare(f"dequantize_f16_{_dt.label}", [("src", R, "(n / block)", (lambda d: lambda c: d.nbytes(c["n"]))(_dt)),
                                             ("dst", W, "(n) f16", lambda c: 2 * max(0, c["n"]))],
             ["n"], check=_blocks(_dt, "n"), struct="dequantize_f16", cuda=flat(lambda c: c["n"] // 8),
             doc="float16 (round to nearest even) of the float32 values `dequantize_DT` gives")
_declare("to_f16", [("x", R, "(rows, dim)", _f32(lambda c: c["rows"] * c["dim"])),
                    ("y", W, "(rows, dim) f16", lambda c: 2 * c["rows"] * c["dim"]),
                    ("inv_scale", W, "(rows)", _f32(lambda c: c["rows"]))],
         ["rows", "dim"], cuda=per_row("rows"), doc="y = f16(h * s[r]) with h = x" + _F16_SCALE)
_declare("rmsnorm_f16", [("x", R, "(rows, dim)", _f32(lambda c: c["rows"] * c["dim"])),
                         ("w", R, "(dim)", _f32(lambda c: c["dim"])),
                         ("y", W, "(rows, dim) f16", lambda c: 2 * c["rows"] * c["dim"]),
                         ("inv_scale", W, "(rows)", _f32(lambda c: c["rows"]))],
         ["rows", "dim", "eps:f32"], cuda=per_row("rows"),
         doc="y = f16(h * s[r]) with h = `rmsnorm`(x, w, eps) (bit-identical to it)" + _F16_SCALE)
_declare("unscale_add", [("src", R, "(rows, n)", _f32(lambda c: c["rows"] * c["n"])),
                         ("inv_scale", R, "(rows)", _f32(lambda c: c["rows"])),
                         ("y", RW, "(rows, y_stride)", _strided("rows", "y_stride", lambda c: c["n"]))],
         ["rows", "n", "y_stride", "accumulate"], check=_stride_ok("rows", "y_stride", lambda c: c["n"]),
         cuda=flat(lambda c: c["rows"] * c["n"]),
         doc="y[r*y_stride+i] = (accumulate ? y[r*y_stride+i] : 0) + src[r*n+i] * inv_scale[r]")
_declare("swiglu_unscale", [("gu", R, "(rows, 2n)", _f32(lambda c: c["rows"] * 2 * c["n"])),
                            ("inv_scale", R, "(rows)", _f32(lambda c: c["rows"])),
                            ("y", W, "(rows, n)", _f32(lambda c: c["rows"] * c["n"]))],
         ["rows", "n"], cuda=flat(lambda c: c["rows"] * c["n"]),
         doc="y[r,i] = silu(g) * u with g = gu[r,i] * inv_scale[r], u = gu[r,n+i] * inv_scale[r] (`swiglu`'s "
             "arithmetic)")


# -- activations quantized once for the cuda integer decode kernel (cuda only: cpu=False) ---------------
#: the weight types of ``qmatmul_DT`` / ``qmatmul_swiglu_DT`` (backends/cuda/_launch.py MVQ_TYPES)
QMATMUL_DTYPES = (DType.q4_0, DType.q4_1, DType.q5_0, DType.q8_0, DType.q4_k, DType.q5_k, DType.q6_k)
#: bytes of the planar q8_1 activations of T tokens of K: int8 codes (T, K), then (d, s) f32 pairs (T, K / 32)
_q8_1 = lambda c: _q8_1_bytes(c["T"], c["K"])  # noqa: E731
#: ... and with the block sums of squares after the pairs, f32 (T, K / 32) (`qmatmul_normq_DT`'s xqn)
_q8_1ss = lambda c, k="K": max(0, c["T"]) * (c[k] + c[k] // 32 * 12)  # noqa: E731
_RMS_DOC = ("xq is `qmatmul_normq_DT`'s xqn (codes of z = x * norm with block sums of squares ss of x), and each "
            "total is scaled by inv = 1 / sqrt(sum(ss) / K + eps) (lane l adds ss[l], ss[l+32], ... in order from 0, "
            "then the xor-butterfly warp sum; each float operation rounded once) before it is used: the rmsnorm "
            "folded in after the products (tests/_mmq_model.py normq_inv); cuda only")
_K256 = lambda c: f"K={c['K']} is not a multiple of 256" if c["K"] % 256 else None  # noqa: E731
_K32 = lambda c: f"K={c['K']} is not a multiple of 32" if c["K"] % 32 else None  # noqa: E731
_K2048 = lambda c: (f"K={c['K']} is not a multiple of 2048 (q6_k rows of whole 16-byte words)"  # noqa: E731
                    if c["K"] % 2048 else None)
_Q8_1_DOC = ("xq: the planar q8_1 layout, int8 codes (T, K) then (d, s) f32 pairs (T, K/32) at byte T*K; a block "
             "of 32 quantized as llama.cpp's q8_1 with f32 scales: d = amax / 127, codes round(h / d) half away "
             "from zero (d = 0: codes 0), s = d * sum(codes) (tests/_mmq_model.py quantize_q8_1); cuda only")
_QUANT_GRID = CudaLaunch(256, lambda c, sms: (cdiv(c["K"] // 32, 128), max(1, c["T"]), 1))
_declare("quantize_q8_1", [("x", R, "(T, K)", _f32(lambda c: c["T"] * c["K"])), ("xq", W, "(T, K) q8_1 planar", _q8_1)],
         ["T", "K"], check=_K32,
         cuda=_QUANT_GRID, cpu=False, doc="xq = x quantized per block of 32; " + _Q8_1_DOC)
_declare("rmsnorm_quantize_q8_1", [("x", R, "(T, K)", _f32(lambda c: c["T"] * c["K"])),
                                   ("norm", R, "(K)", _f32(lambda c: c["K"])),
                                   ("xq", W, "(T, K) q8_1 planar", _q8_1)],
         ["T", "K", "eps:f32"], check=_K32,
         cuda=_QUANT_GRID, cpu=False,
         doc="xq = h quantized per block of 32, h = (x * inv) * norm with inv = 1 / sqrt(mean(x^2) + eps) summed as "
             "the cuda `_pq` entries do (tests/_mmq_model.py rmsnorm_inv_cta): their tokens' bits; " + _Q8_1_DOC)
for _dt in QMATMUL_DTYPES:
    _qk = _K2048 if _dt.label == "q6_k" else _K256  # rows of whole 16-byte words (xi_mvq.cuh)
    _declare(f"qmatmul_{_dt.label}", [("w", R, "(N, K) DT", _matrix(_dt)), ("xq", R, "(T, K) q8_1 planar", _q8_1),
                                      ("y", RW, "(T, N)", _f32(lambda c: c["T"] * c["N"]))],
             ["T", "N", "K", "accumulate"], check=_qk, struct="qmatmul", cpu=False,
             cuda=CudaLaunch(family="qmatmul", params=(("dt", _dt.label), ("glu", "0"))),
             doc="y[t,n] = (accumulate ? y[t,n] : 0) + w[n] . h[t] with h the tokens of xq (`quantize_q8_1`), "
                 "llama.cpp's integer numerics: the cuda `_pq` entry of `matmul_DT` on those tokens, bit for bit "
                 "(shaders/xi_mvq.cuh); K a multiple of 256 (q6_k: 2048); xq 16-byte aligned (cp.async; else NaN "
                 "rows); cuda only")
    _declare(f"qmatmul_normq_{_dt.label}", [("w", R, "(N, K) DT", _matrix(_dt)),
                                            ("xq", R, "(T, K) q8_1 planar", _q8_1),
                                            ("y", RW, "(T, N)", _f32(lambda c: c["T"] * c["N"])),
                                            ("norm", R, "(N)", _f32(lambda c: c["N"])),
                                            ("xqn", W, "(T, N) q8_1 planar + ss", lambda c: _q8_1ss(c, "N"))],
             ["T", "N", "K", "accumulate"],
             check=_all(_qk,
                        lambda c: f"N={c['N']} is not a multiple of 32" if c["N"] % 32 else None),
             struct="qmatmul_normq", cpu=False,
             cuda=CudaLaunch(family="qmatmul", params=(("dt", _dt.label), ("glu", "0"), ("normq", "1"))),
             doc="`qmatmul_DT`'s product with K's halves summed apart and added (other last bits: tests/_mmq_model.py "
                 "mvq_matmul's split), then xqn: the next product's tokens h = rmsnorm(y) * norm for `qmatmul_rms_DT` / "
                 "`qmatmul_rms_swiglu_DT` -- codes int8 (T, N) and (d, s) pairs (T, N/32) of z = y * norm quantized per block "
                 "of 32 as `quantize_q8_1`, then ss f32 (T, N/32): the xor-butterfly warp sum of y * y over each "
                 "block (shaders/xi_mvq.cuh XiMvqOut); N / 32 CTAs a token tile (backends/cuda/_launch.py "
                 "normq_launch; another grid: NaN rows and scales; the `_k2` entry where it fits and is faster, 16 warps, "
                 "K's chunks split between two warps a tile, the same bits; XINFER_NORMQ_K2=0: never `_k2`); cuda only")
    _declare(f"qmatmul_swiglu_{_dt.label}", [("w", R, "(2N, K) DT", _matrix(_dt, 2)),
                                             ("xq", R, "(T, K) q8_1 planar", _q8_1),
                                             ("y", W, "(T, N)", _f32(lambda c: c["T"] * c["N"]))],
             ["T", "N", "K"], check=_qk, struct="qmatmul_swiglu", cpu=False,
             cuda=CudaLaunch(family="qmatmul", params=(("dt", _dt.label), ("glu", "1"))),
             doc="y = silu(gate) * up, gate and up the `qmatmul_DT` rows [0, N) and [N, 2N) of w on the tokens of xq: "
                 "the cuda `_pq` entry of `rmsnorm_matmul_swiglu_DT` on those tokens, bit for bit; cuda only")
    _declare(f"qmatmul_rms_{_dt.label}", [("w", R, "(N, K) DT", _matrix(_dt)),
                                          ("xq", R, "(T, K) q8_1 planar + ss", _q8_1ss),
                                          ("y", RW, "(T, N)", _f32(lambda c: c["T"] * c["N"]))],
             ["T", "N", "K", "accumulate", "eps:f32"], check=_qk,
             struct="qmatmul_rms", cpu=False,
             cuda=CudaLaunch(family="qmatmul", params=(("dt", _dt.label), ("glu", "0"))),
             doc="y[t,n] = (accumulate ? y[t,n] : 0) + inv[t] * (w[n] . z[t]) as `qmatmul_DT` sums it, where " + _RMS_DOC)
    _declare(f"qmatmul_rms_swiglu_{_dt.label}", [("w", R, "(2N, K) DT", _matrix(_dt, 2)),
                                                 ("xq", R, "(T, K) q8_1 planar + ss", _q8_1ss),
                                                 ("y", W, "(T, N)", _f32(lambda c: c["T"] * c["N"]))],
             ["T", "N", "K", "eps:f32"], check=_qk,
             struct="qmatmul_rms_swiglu", cpu=False,
             cuda=CudaLaunch(family="qmatmul", params=(("dt", _dt.label), ("glu", "1"))),
             doc="y = silu(g) * u with g = inv * gate total, u = inv * up total (`qmatmul_swiglu_DT`'s sums), where "
                 + _RMS_DOC)

#: the (first, second) weight types of ``qmatmul_pair_A_B`` / ``qmatmul_rms_pair_A_B``: a layer's q, k, v in
#: two types as llama.cpp's Q4_K_M / Q5_K_M mixes give them (attn_v Q6_K on the ``use_more_bits`` layers)
QMATMUL_PAIRS = ((DType.q4_k, DType.q6_k), (DType.q5_k, DType.q6_k))
_PAIR_DOC = ("two products on the same tokens in one launch: w (N, K) A into y's columns [0, N), w2 (N2, K) B into "
             "[N, N + N2) (y rows N + N2 apart), each row bit for bit what {single}_A` / {single}_B` give it (shaders/"
             "xi_mvq.cuh xi_qmatmul_pair: each product the CTAs for a tile a warp where the grid holds both, else split in proportion to the weights' bytes); K a multiple of 2048; "
             "cuda only")
for _a, _b in QMATMUL_PAIRS:
    _pair = f"{_a.label}_{_b.label}"
    _w2 = (lambda dt: lambda c: dt.nbytes(c["N2"] * c["K"]))(_b)
    _y2 = _f32(lambda c: c["T"] * (c["N"] + c["N2"]))
    _declare(f"qmatmul_pair_{_pair}", [("w", R, "(N, K) A", _matrix(_a)), ("w2", R, "(N2, K) B", _w2),
                                         ("xq", R, "(T, K) q8_1 planar", _q8_1), ("y", W, "(T, N + N2)", _y2)],
             ["T", "N", "N2", "K"], check=_K2048, struct="qmatmul_pair", cpu=False,
             cuda=CudaLaunch(family="qmatmul_pair", params=(("dt", _a.label), ("dt2", _b.label))),
             doc=_PAIR_DOC.format(single="`qmatmul"))
    _declare(f"qmatmul_rms_pair_{_pair}", [("w", R, "(N, K) A", _matrix(_a)), ("w2", R, "(N2, K) B", _w2),
                                             ("xq", R, "(T, K) q8_1 planar + ss", _q8_1ss),
                                             ("y", W, "(T, N + N2)", _y2)],
             ["T", "N", "N2", "K", "eps:f32"], check=_K2048, struct="qmatmul_rms_pair", cpu=False,
             cuda=CudaLaunch(family="qmatmul_pair", params=(("dt", _a.label), ("dt2", _b.label))),
             doc=_PAIR_DOC.format(single="`qmatmul_rms") + "; " + _RMS_DOC)


# -- a layer's qkv product with rope_kv_store in its epilogue (shaders/xi_mvq.cuh XiRope: one launch fewer) --
_kv_cache_any = lambda c: (2 if c["kv16"] else 4) * max(0, c["ctx"] * c["n_kv"] * c["head_dim"])  # noqa: E731
_ROPE_BINDINGS = [("pos", R, "(T) i32", _f32(lambda c: c["T"])), ("row", R, "(T) i32", _f32(lambda c: c["T"])),
                  ("k_cache", RW, "(ctx, n_kv*hd) f32 or f16", _kv_cache_any),
                  ("v_cache", RW, "(ctx, n_kv*hd) f32 or f16", _kv_cache_any),
                  ("freq_factors", R, "(head_dim/2)", _f32(lambda c: c["head_dim"] // 2))]
_ROPE_CONSTS = ["n_head", "n_kv", "head_dim", "ctx", "kv16", "theta:f32"]


def _rope_ok(width: str):
    """The rope entries' checks: the product's rows are a whole qkv row, head_dim even, kv16 0 or 1; a
    pair's first product whole heads (its pairs then never straddle the two products)."""
    def check(c):
        n = c["N"] + c.get("N2", 0)
        if n != _qkv_width(c):
            return f"{width}={n} is not (n_head + 2 n_kv) * head_dim = {_qkv_width(c)}"
        if c["head_dim"] % 2:
            return f"head_dim={c['head_dim']} must be even"
        if "N2" in c and c["head_dim"] and c["N"] % c["head_dim"]:
            return f"N={c['N']} is not whole heads of head_dim={c['head_dim']}"
        if c["kv16"] not in (0, 1):
            return f"kv16={c['kv16']} must be 0 or 1"
        return None
    return check


_ROPE_DOC = ("; then, as `rope_kv_store` (`_f16` where kv16) on those rows with row_stride N (+ N2): each adjacent "
             "pair of a q or k head rotated by pos[t] (pair i's angle divided by freq_factors[i]: ones where the model "
             "has none, an exact no-op), k and v stored at row[t] of the caches -- the same bits as the two launches, "
             "in one (shaders/xi_mvq.cuh XiRope); cuda only")
for _dt in QMATMUL_DTYPES:
    _qk = _K2048 if _dt.label == "q6_k" else _K256
    for _rms in (False, True):
        _declare(f"qmatmul_{'rms_' if _rms else ''}rope_{_dt.label}",
                 [("w", R, "(N, K) DT", _matrix(_dt)),
                  ("xq", R, "(T, K) q8_1 planar" + (" + ss" if _rms else ""), _q8_1ss if _rms else _q8_1),
                  ("y", W, "(T, N)", _f32(lambda c: c["T"] * c["N"]))] + _ROPE_BINDINGS,
                 ["T", "N", "K"] + (["eps:f32"] if _rms else []) + _ROPE_CONSTS, check=_all(_qk, _rope_ok("N")),
                 struct=f"qmatmul_{'rms_' if _rms else ''}rope", cpu=False,
                 cuda=CudaLaunch(family="qmatmul", params=(("dt", _dt.label), ("glu", "0"))),
                 doc=("`qmatmul_rms_DT` (" + _RMS_DOC.split("; cuda only")[0] + ")" if _rms else "`qmatmul_DT`")
                 + " with accumulate 0" + _ROPE_DOC)
for _a, _b in QMATMUL_PAIRS:
    _pair = f"{_a.label}_{_b.label}"
    _w2 = (lambda dt: lambda c: dt.nbytes(c["N2"] * c["K"]))(_b)
    _y2 = _f32(lambda c: c["T"] * (c["N"] + c["N2"]))
    for _rms in (False, True):
        _declare(f"qmatmul_{'rms_' if _rms else ''}rope_pair_{_pair}",
                 [("w", R, "(N, K) A", _matrix(_a)), ("w2", R, "(N2, K) B", _w2),
                  ("xq", R, "(T, K) q8_1 planar" + (" + ss" if _rms else ""), _q8_1ss if _rms else _q8_1),
                  ("y", W, "(T, N + N2)", _y2)] + _ROPE_BINDINGS,
                 ["T", "N", "N2", "K"] + (["eps:f32"] if _rms else []) + _ROPE_CONSTS,
                 check=_all(_K2048, _rope_ok("N + N2")), struct=f"qmatmul_{'rms_' if _rms else ''}rope_pair", cpu=False,
                 cuda=CudaLaunch(family="qmatmul_pair", params=(("dt", _a.label), ("dt2", _b.label))),
                 doc=f"`qmatmul_{'rms_' if _rms else ''}pair_{_pair}`" + _ROPE_DOC)


def kernel_spec(name: str) -> KernelSpec:
    """The declaration of kernel ``name``.

    Raises:
        ValueError: no such kernel (the message lists them).
    """
    try:
        return KERNELS[name]
    except KeyError:
        raise ValueError(f"unknown kernel {name!r}; known kernels: {', '.join(sorted(KERNELS))}") from None
