"""The decoder of every family of ``_arch`` built on the model layer (in the manner of gpt-fast's
~300-line Llama).

One ``ModelSession`` holds the weights (quantized ones stay quantized: the matrix kernels read them as
stored) and each slot's KV cache (persistent state). ``forward(T, logits)`` builds one fragment for
``T`` tokens; the family's declaration (``cfg.architecture``) switches the optional blocks ([...]):

    x = embed(tokens) [* sqrt(dim)]                     # (T, dim)
    for each block:
        qkv = rmsnorm(x) @ [Wq; Wk; Wv]^T [+ bias]      # rmsnorm_matmul a run of one type (bias_add): (T, q_dim + 2 * kv_dim)
        [q, k heads = rmsnorm(head) * q_norm / k_norm]  # qk_rmsnorm
        rope(q), rope(k) at pos; kv_cache[pos] = k, v   # rope_kv_store[_ff][_f16] (the block's base; pos < 0: padding)
        o = attention(q, k_cache, v_cache, pos) @ Wo^T  # attention (GQA, causal, [sliding window])
        x += o                 [x += rmsnorm(o) * post_attention_norm]      # matmul accumulate / rmsnorm_add
        act = act(rmsnorm(x) @ Wgate^T) * (rmsnorm(x) @ Wup^T)    # rmsnorm_matmul_swiglu / rmsnorm_matmul + geglu
        x += act @ Wdown^T     [x += rmsnorm(act @ Wdown^T) * post_ffw_norm]
    logits = rmsnorm(x[rows]) @ Wout^T [softcap]        # the last valid row, or every row

Tensor names and layouts: the GGUF conventions (``blk.N.attn_q.weight`` etc.). Llama's Q/K rows are
already permuted for the adjacent-pair rope (llama.cpp ``convert_hf_to_gguf.py``); for a "neox" family
(rotate_half: pairs ``(i, i + head_dim/2)``) the same permutation is applied here, at upload, to the q
and k rows of each head (and their biases and q/k norm weights), so one rope kernel serves both: a
dot product of q and k is unchanged when both are permuted alike, and v is left as it is.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Mapping

import numpy as np

from .._switches import env_switch
from ..hal import Access, GGUFError, TensorDesc
from ..model import Binding, Copy, Dispatch, Fill, IODesc, ModelContext, ModelSession
from ..ops._attention_split import SPLIT_T_MAX, count_ints, workspace_floats
from ._gemm import GemmLowering, lowers
from ._gemm import f16_weights as _policy_f16_weights
from ._gemm import gemm_min_t as _policy_min_t
from ._gemm import resident_f16
from ._gguf import GGUFModel, ModelConfig

F32 = 4
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
#: single-sequence prefill plans below the chunk: a short prompt runs the smallest that holds it
#: (at most 4x padding) instead of a whole chunk
PREFILL_BUCKETS = (16, 64, 256)
#: the default prompt tokens a prefill step takes, by device name (``prefill_chunk``): on cuda a
#: 512-token chunk dequantizes each weight once for 512 rows instead of 8 times (H200, 8B shape,
#: 512-token prompt: 3.1k tok/s at 64, 12.9k at 512; 1B: 15.6k -> 60.3k); cpu keeps 64
PREFILL_CHUNK = {"cuda": 512}
PREFILL_CHUNK_OTHER = 64
#: prompt rows a batched decode step carries beside its decode rows (``step_prompt_rows``): the
#: batched buckets reach ``batch_seqs`` + this, so it stays small whatever the prefill chunk
STEP_PROMPT_ROWS = 64
RW, W_ = Access.READ_WRITE, Access.WRITE

#: the KV-cache element types: bytes an element, and the suffix of the kernels that read and write them
KV_DTYPES = {"f32": (4, ""), "f16": (2, "_f16")}


def kv_cache_dtype(value: str | None = None, environ: Mapping[str, str] = os.environ) -> str:
    """The KV-cache element type: ``value``, else ``$XINFER_KV_CACHE``, else ``"f32"``.

    ``"f16"`` halves the cache's bytes (and the attention's reads at long contexts): k and v are
    rounded to the nearest f16 as they are stored, and read back exactly as f32; on cpu the attention
    rounds q and its probabilities to f16 before their products (llama.cpp's numerics with an F16
    cache), on cuda that arithmetic stays f32. Its accuracy against the f32 cache: tests/test_kv_f16.py.

    Raises:
        ValueError: a value other than ``"f32"`` / ``"f16"`` (named, with where it came from).
    """
    src = "kv_dtype" if value is not None else "XINFER_KV_CACHE"
    v = value if value is not None else (environ.get("XINFER_KV_CACHE", "").strip().lower() or "f32")
    if v not in KV_DTYPES:
        raise ValueError(f"{src}={v!r} is not a KV-cache type; use one of {', '.join(map(repr, KV_DTYPES))}")
    return v


def attention_quant_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """``XINFER_QATT`` unset or ``1``: where the o product takes its tokens quantized beforehand, the
    attention also writes its output quantized for it (``attention_quantize``, cuda; head_dim a
    multiple of 32) instead of a ``quantize_q8_1`` launch; ``0``: that launch (the A/B of the H200
    measurements). The bits are the same either way.

    Raises:
        ValueError: XINFER_QATT is set to something else than ``0`` / ``1``."""
    return env_switch(environ, "XINFER_QATT")


def qkv_rope_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """``XINFER_QROPE`` unset or ``1``: where a block's qkv product is one quantized launch (one type, or
    a pair) and nothing runs between it and the rope (no qkv bias, no q/k norm), that launch also
    rotates q and k and stores k and v into the caches (``qmatmul_rope_DT`` and its rms / pair
    forms) instead of a ``rope_kv_store`` launch; ``0``: that launch (the A/B of the H200
    measurements). The bits are the same either way.

    Raises:
        ValueError: XINFER_QROPE is set to something else than ``0`` / ``1``."""
    return env_switch(environ, "XINFER_QROPE")


def prefill_chunk(device_name: str, ctx: int) -> int:
    """The default prompt tokens of a prefill step on ``device_name``: ``PREFILL_CHUNK`` (cuda:
    512), else ``PREFILL_CHUNK_OTHER`` (64), at most ``ctx``."""
    return min(PREFILL_CHUNK.get(device_name, PREFILL_CHUNK_OTHER), ctx)


def positive_int(value: Any, what: str) -> int:
    """``value`` if it is an int >= 1 (not a bool).

    Raises:
        ValueError: anything else (the message names ``what`` and gives the value).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be an int >= 1, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class PlanSpec:
    """One plan of a prepared Llama: its input and output names, in the plan's order.

    The one place plan inputs and outputs are named (``forward`` orders its inputs by ``inputs``;
    ``llm/_runner.py`` calls plans by these names). Every input is int32:

    - ``tokens`` (T,): token ids; ``positions`` (T,): rope position of each row within its
      sequence (-1: a padding row, which touches no cache row);
    - batched plans only: ``rows`` (T,): the KV-cache row written (s*ctx + position),
      ``first_rows``, ``last_rows`` (T,): the cache rows attended (s*ctx .. the row), padding -1;
    - ``last`` (1,): the row whose logits come back (plans with last-row logits only).

    Outputs: ``logits`` float32 (T, vocab) when ``all_logits``, else (1, vocab); ``argmax`` int32
    (T,) or (1,): greedy sampling on the device.
    """

    tokens: int
    all_logits: bool
    batched: bool

    @property
    def inputs(self) -> tuple[str, ...]:
        rows = ("rows", "first_rows", "last_rows") if self.batched else ()
        last = () if self.batched and self.all_logits else ("last",)
        return ("tokens", "positions") + rows + last

    outputs = ("logits", "argmax")


@dataclasses.dataclass(frozen=True)
class _Part:
    """Rows ``[row0, row0 + n)`` of a stacked projection held as their own weight ``wd`` (region, dtype)."""

    wd: Any
    row0: int
    n: int


@dataclasses.dataclass
class _Block:
    attn_norm: Any
    wqkv: Any  # [_Part]: the (q_dim + 2 * kv_dim, dim) projection, one part a run of q, k, v of one type
    wo: Any
    ffn_norm: Any
    wgu: Any  # (region, dtype) of the (2 * ffn_dim, dim) gate and up rows
    wdown: Any
    k_cache: Any
    v_cache: Any
    theta: float  # rope base of this block
    window: int  # sliding window (0: none)
    bqkv: Any = None  # (q_dim + 2 * kv_dim,) biases
    q_norm: Any = None  # (head_dim,) each
    k_norm: Any = None
    post_attn_norm: Any = None  # (dim,) each
    post_ffw_norm: Any = None
    bk_cache: Any = None  # batched: (batch_seqs * ctx, kv_dim), sequence s owns rows [s*ctx, (s+1)*ctx)
    bv_cache: Any = None


def neox_rows(n_heads: int, head_dim: int) -> np.ndarray:
    """The row order that turns rotate_half rope into adjacent-pair rope: int64 (n_heads * head_dim,),
    new row ``h*hd + 2i`` is old row ``h*hd + i`` and new row ``h*hd + 2i + 1`` old row ``h*hd + i + hd/2``."""
    half = head_dim // 2
    one = np.empty(head_dim, dtype=np.int64)
    one[0::2] = np.arange(half)
    one[1::2] = np.arange(half) + half
    return (np.arange(n_heads)[:, None] * head_dim + one[None, :]).reshape(-1)


class LlamaBuilder:
    """Uploads a GGUF decoder's weights (any family of ``_arch``) and builds forward fragments over them.

    Args:
        gguf_model: from ``load_gguf``.
        device: the device to build on.
        ctx: KV-cache length per slot, tokens (<= the model's context length).
        chunk: prompt tokens per single-sequence prefill/score step (the T of the ``score`` plan and
            of the largest ``prefill{T}`` plan; smaller ones at ``PREFILL_BUCKETS`` below it), in
            [1, ctx]; ``load`` defaults it by device (``prefill_chunk``).
        batch_seqs: 0, or the sequences of the batched decode path: one more KV cache per layer of
            ``batch_seqs * ctx`` rows (sequence s owns rows ``[s*ctx, (s+1)*ctx)``) and the plans
            of ``prepare_batched``.
        step_prompt_rows: prompt tokens a batched decode step may carry beside its decode rows
            (``llm/_batch.py``); the batched buckets reach ``batch_seqs + step_prompt_rows``.
            Default: ``min(STEP_PROMPT_ROWS, chunk)`` (64).
        slots: the slots ``prepare`` will be called with (only counted by the resident-f16 memory
            rule: their KV caches).
        kv_dtype: the KV cache's element type, ``"f32"`` or ``"f16"`` (None: ``kv_cache_dtype()``,
            ``$XINFER_KV_CACHE``, else f32).
        gemm_min_t: the smallest T whose quantized matrix products run in the GEMM regime
            (``_gemm.py``); default: the policy ``gemm_min_t(device.name, dim=..., f16_resident=...)``
            (cuda: ``XINFER_GEMM_MIN_T``, else 5 from dim 2048 up when the f16 weights are resident,
            else 64; cpu: never); None: never; an int forces it (tests, on any device).
        f16_weights: keep an f16 copy of every matrix that lowers resident on the device (no
            dequantization per plan call; 2 bytes a weight more), made on the device after the
            upload: True / ``"1"``, False / ``"0"``, ``"auto"`` (``_gemm.resident_f16``: cuda, when
            the copies take <= 1/3 of the memory free after the weights and KV caches); default
            ``XINFER_F16_WEIGHTS`` (unset: auto). ``f16_weight_bytes`` says what was kept.

    Raises:
        GGUFError: a tensor is missing or has an unexpected shape.
        ValueError: ``ctx``, ``chunk``, ``step_prompt_rows``, ``slots`` or ``gemm_min_t`` out of
            range, an unknown ``kv_dtype`` or ``f16_weights`` (or ``XINFER_F16_WEIGHTS``); all
            checked before any weight is uploaded.
    """

    def __init__(self, gguf_model: GGUFModel, device: Any, ctx: int, chunk: int = 64, batch_seqs: int = 0,
                 kv_dtype: str | None = None, gemm_min_t: int | None | str = "policy",
                 f16_weights: bool | str | None = None, step_prompt_rows: int | None = None, slots: int = 1):
        cfg = gguf_model.config
        self.kv_dtype = kv_cache_dtype(kv_dtype)
        kv_bytes, self._kv_sfx = KV_DTYPES[self.kv_dtype]
        if not 1 <= ctx <= cfg.context_length:
            raise ValueError(f"ctx={ctx} must be in [1, {cfg.context_length}] (the model's context length)")
        if isinstance(chunk, bool) or not isinstance(chunk, int) or not 1 <= chunk <= ctx:
            raise ValueError(f"chunk={chunk!r} must be an int in [1, ctx={ctx}]")
        step_prompt_rows = min(STEP_PROMPT_ROWS, chunk) if step_prompt_rows is None else \
            positive_int(step_prompt_rows, "step_prompt_rows")
        positive_int(slots, "slots")
        if f16_weights is None:
            f16_weights = _policy_f16_weights()
        resident_f16(f16_weights, device.name, 0, None)  # an unknown setting fails here, before the upload
        policy_min_t = gemm_min_t == "policy"
        if policy_min_t:  # revised once resident f16 weights are decided (below)
            gemm_min_t = _policy_min_t(device.name, dim=cfg.dim)
        elif gemm_min_t is not None and (not isinstance(gemm_min_t, int) or gemm_min_t < 1):
            raise ValueError(f"gemm_min_t={gemm_min_t!r} must be a positive int, None or 'policy'")
        self.gemm_min_t = gemm_min_t
        self.chunk = chunk
        self.step_prompt_rows = step_prompt_rows
        # prefill buckets: a short prompt runs through a small plan instead of a padded chunk
        self.prefill_sizes = sorted(({b for b in PREFILL_BUCKETS if b < chunk} | {chunk}) - {1}) or [1]
        self.batch_seqs = batch_seqs
        #: batched step buckets: every bucket below batch_seqs + step_prompt_rows (a row for each
        #: sequence and the prompt rows: llm/_batch.py) and the smallest one that holds that many
        top = batch_seqs + step_prompt_rows
        self.batch_sizes = ([b for b in BATCH_BUCKETS if b < top] + [min([b for b in BATCH_BUCKETS if b >= top]
                                                                         or [top])]) if batch_seqs else []
        self.plan_sizes = sorted({1, *self.prefill_sizes, *self.batch_sizes})
        #: quantized weight region -> its resident f16 copy (``f16_weights`` with the GEMM regime on), or None
        self._resident: dict | None = None
        #: bytes of the resident f16 copies (0: none kept)
        self.f16_weight_bytes = 0
        self._matrices: list = []  # (region, dtype, (N, K), name) of every matrix product's weight
        self.cfg: ModelConfig = cfg
        self.ctx = ctx
        self.device = device
        self.kv_dim = cfg.n_kv_head * cfg.head_dim
        self._tensors = gguf_model.tensors
        s = self.session = ModelSession(device)
        # every kernel first: a weight type the device has no kernel for (cuda: the K-quants, for
        # now) fails here, before any weight is uploaded
        for name in sorted(self._kernel_names(batch_seqs)):
            s.kernel(name)
        # the table is the output matrix too when tied: then kept in the device's matrix layout
        self.embd, self.embd_dtype = self._weight("token_embd.weight", matrix=cfg.tied_embeddings)
        out_name = "token_embd.weight" if cfg.tied_embeddings else "output.weight"
        self.out, self.out_dtype = (self.embd, self.embd_dtype) if cfg.tied_embeddings else self._weight(out_name, True)
        self.out_norm, _ = self._weight("output_norm.weight")
        arch = cfg.architecture
        self._qkv_rows = self._qkv_order() if arch.rope == "neox" else None
        # Llama 3 rope scaling: pair i of a head (adjacent or, permuted, rotate-half) divides by factor i
        self.rope_ff = self._vector("rope_freqs.weight", ["rope_freqs.weight"]) if cfg.rope_freqs else None
        self.blocks = []
        for i in range(cfg.n_layer):
            p = f"blk.{i}."
            blk = _Block(
                self._weight(p + "attn_norm.weight")[0], self._stacked(p, self._qkv_parts(), self._qkv_rows),
                self._weight(p + "attn_output.weight", True), self._weight(p + "ffn_norm.weight")[0],
                self._fused(p, self._gu_parts()), self._weight(p + "ffn_down.weight", True),
                s.scratch(ctx * self.kv_dim * kv_bytes, persistent=True, name=f"{p}k_cache"),
                s.scratch(ctx * self.kv_dim * kv_bytes, persistent=True, name=f"{p}v_cache"),
                theta=cfg.layer_rope_theta(i), window=cfg.layer_window(i),
            )
            if arch.qkv_bias:
                blk.bqkv = self._vector(p + "qkv.bias", [p + f"attn_{w}.bias" for w in "qkv"], self._qkv_rows)
            if arch.qk_norm:
                head = neox_rows(1, cfg.head_dim) if arch.rope == "neox" else None
                blk.q_norm = self._vector(p + "attn_q_norm.weight", [p + "attn_q_norm.weight"], head)
                blk.k_norm = self._vector(p + "attn_k_norm.weight", [p + "attn_k_norm.weight"], head)
            if arch.post_norms:
                blk.post_attn_norm = self._weight(p + "post_attention_norm.weight")[0]
                blk.post_ffw_norm = self._weight(p + "post_ffw_norm.weight")[0]
            if batch_seqs:
                rows_bytes = batch_seqs * ctx * self.kv_dim * kv_bytes
                blk.bk_cache = s.scratch(rows_bytes, persistent=True, name=f"{p}bk_cache")
                blk.bv_cache = s.scratch(rows_bytes, persistent=True, name=f"{p}bv_cache")
            self.blocks.append(blk)
        self._keep_f16(f16_weights, slots + batch_seqs, kv_bytes)
        if policy_min_t and not self.f16_weight_bytes:  # the GEMM at small T pays only on resident f16 weights
            self.gemm_min_t = _policy_min_t(device.name, dim=cfg.dim, f16_resident=False)
        self._gemm = self._gemm_lowering()
        #: T -> the products whose tokens are quantized once beforehand (``_quantizes``), their kernels
        #: registered here, before freeze
        self._quantized = {T: self._quantized_products(T) for T in self.plan_sizes}
        #: T -> the residual products that also quantize the next product's tokens (``_normq_products``)
        self._normq = {T: self._normq_products(T) for T in self.plan_sizes}
        #: T -> the blocks whose qkv of two types runs as one launch (``_pair_blocks``)
        self._pairs = {T: self._pair_blocks(T) for T in self.plan_sizes}
        #: T -> the blocks whose qkv launch does the rope and the KV-cache stores (``_rope_blocks``)
        self._rope = {T: self._rope_blocks(T) for T in self.plan_sizes}
        #: rope_kv_store's freq factors for the rope launches: the file's, else ones (an exact no-op)
        self._rope_ff = self.rope_ff if self.rope_ff is not None or not any(self._rope.values()) else \
            self.session.weight(np.ones(cfg.head_dim // 2, np.float32), TensorDesc((cfg.head_dim // 2,), "f32"),
                                "rope_ones")
        #: whether the attention writes the o product's tokens itself (``attention_quantize``, where the o
        #: product takes quantized tokens: ``forward``), its kernels registered here
        self._qatt = attention_quant_enabled() and cfg.head_dim % 32 == 0 and not cfg.architecture.post_norms and \
            any(("matmul", b.wo[1], T, cfg.dim, cfg.q_dim) in self._quantized[T] for b in self.blocks
                for T in self.plan_sizes)
        if self._qatt:
            self.session.kernel("attention_quantize" + self._kv_sfx)
            if batch_seqs:
                self.session.kernel("attention_batched_quantize" + self._kv_sfx)
        self._layouts = {T: self._layout(T) for T in self.plan_sizes}
        self.definition = s.freeze(ModelContext(device))
        self._tensors = None  # the memory map is no longer needed

    # -- weights ---------------------------------------------------------------------------
    def _tensor(self, name: str):
        t = self._tensors.get(name)
        if t is None:
            raise GGUFError(f"tensor {name!r} is missing from the model file")
        return t

    def _weight(self, name: str, matrix: bool = False):
        """Upload tensor ``name``: ``(region, the dtype label its kernels are named after)``; ``matrix``:
        a matrix product's weight, kept in the device's matrix layout (``ModelSession.matrix_dtype``)
        and with its f16 copy where ``f16_weights`` asks for one."""
        t = self._tensor(name)
        if t.dtype in ("f32", "f16") and len(t.shape) == 1:
            data = np.asarray(t.data, dtype=np.float32)  # norms: f32 on the device
            return self.session.weight(data, TensorDesc(t.shape, "f32"), name), "f32"
        data = np.ascontiguousarray(t.data)
        desc = TensorDesc(t.shape, t.dtype)
        matrix = matrix and len(t.shape) == 2
        region = self.session.weight(data, desc, name, matrix=matrix)
        if not matrix:
            return region, t.dtype
        label = self.session.matrix_dtype(desc).label
        self._matrices.append((region, label, tuple(t.shape), name))
        return region, label

    def _matrix_dtype(self, name: str) -> str:
        """The dtype label of 2-D tensor ``name`` as ``_weight(name, matrix=True)`` uploads it."""
        t = self._tensor(name)
        return self.session.matrix_dtype(TensorDesc(t.shape, t.dtype)).label

    def _keep_f16(self, setting: bool | str, kv_seqs: int, kv_bytes: int) -> None:
        """Once every weight is uploaded: decide resident f16 weights (``resident_f16``, against the
        device memory free now less the KV caches of ``kv_seqs`` sequences still to come) and make the
        f16 copy of each matrix that lowers on the device (``dequantize_f16_DT``), one at a time."""
        if self.gemm_min_t is None or self.plan_sizes[-1] < self.gemm_min_t:
            return
        mats = [m for m in self._matrices if lowers(m[1], self.gemm_min_t, self.gemm_min_t)]
        nbytes = sum(2 * n * k for _, _, (n, k), _ in mats)
        memory_info = getattr(self.device.backend, "memory_info", None)  # cuda only
        free = None
        if memory_info is not None:
            kv = self.cfg.n_layer * 2 * kv_seqs * self.ctx * self.kv_dim * kv_bytes
            free = max(0, memory_info()[0] - kv)
        if not mats or not resident_f16(setting, self.device.name, nbytes, free):
            return
        self._resident = {}
        for region, dtype, (n, k), name in mats:
            self._resident[region] = self.session.derived_weight(
                f"dequantize_f16_{dtype}", region, TensorDesc((n, k), "f16"), dict(n=n * k), name + ".f16")
        self.f16_weight_bytes = nbytes

    def _qkv_parts(self) -> list[str]:
        return ["attn_qkv"] if self.cfg.architecture.fused_qkv else ["attn_q", "attn_k", "attn_v"]

    def _gu_parts(self) -> list[str]:
        return ["ffn_up"] if self.cfg.architecture.fused_gate_up else ["ffn_gate", "ffn_up"]

    def _qkv_order(self) -> np.ndarray:
        """Rows of the stacked q, k, v projection in upload order: q and k heads in adjacent-pair
        order (``neox_rows``), v as stored."""
        c = self.cfg
        return np.concatenate([neox_rows(c.n_head, c.head_dim), c.q_dim + neox_rows(c.n_kv_head, c.head_dim),
                               c.q_dim + c.kv_dim + np.arange(c.kv_dim)])

    def _kernel_names(self, batch_seqs: int) -> set[str]:
        """The kernels ``forward`` dispatches, from the family and the tensors' types (as ``_weight``
        and ``_fused`` choose them)."""
        cfg, arch, kv = self.cfg, self.cfg.architecture, self._kv_sfx
        dt = self._matrix_dtype
        embd = dt("token_embd.weight") if cfg.tied_embeddings else self._tensor("token_embd.weight").dtype
        names = {f"get_rows_{embd}", "get_rows_f32", ("rope_kv_store_ff" if cfg.rope_freqs else "rope_kv_store") + kv,
                 "attention" + kv, "argmax",
                 f"rmsnorm_matmul_{embd if cfg.tied_embeddings else dt('output.weight')}"}
        names |= {n for n, on in (("attention_batched" + kv, batch_seqs), ("affine", arch.embed_scale_sqrt_dim),
                                  ("bias_add", arch.qkv_bias), ("qk_rmsnorm", arch.qk_norm),
                                  ("rmsnorm_add", arch.post_norms), ("softcap", cfg.logit_softcap > 0),
                                  ("geglu", arch.activation == "gelu_tanh")) if on}
        ffn = "rmsnorm_matmul_swiglu_" if arch.activation == "silu" else "rmsnorm_matmul_"
        out_dt = embd if cfg.tied_embeddings else dt("output.weight")
        matrix_dtypes = {out_dt}
        for i in range(cfg.n_layer):
            p = f"blk.{i}."
            qkv = {self._fused_dtype(p, run) for run in self._type_runs(p, self._qkv_parts())}
            gu = self._fused_dtype(p, self._gu_parts())
            wo, wdown = dt(p + "attn_output.weight"), dt(p + "ffn_down.weight")
            names |= {f"rmsnorm_matmul_{q}" for q in qkv} | {ffn + gu, f"matmul_{wo}", f"matmul_{wdown}"}
            matrix_dtypes |= qkv | {gu, wo, wdown}
        if self.gemm_min_t is not None and self.plan_sizes[-1] >= self.gemm_min_t:
            names |= GemmLowering.kernel_names(matrix_dtypes, arch.activation == "silu")
        return names

    def _gemm_lowering(self) -> GemmLowering | None:
        """The GEMM regime's scratch, when a plan's T reaches ``gemm_min_t`` and a matrix lowers."""
        cfg = self.cfg
        if self.gemm_min_t is None or self.plan_sizes[-1] < self.gemm_min_t:
            return None
        mats = [(w, n, k) for b in self.blocks for w, n, k in [(p.wd, p.n, cfg.dim) for p in b.wqkv] + [
            (b.wo, cfg.dim, cfg.q_dim), (b.wgu, 2 * cfg.ffn_dim, cfg.dim), (b.wdown, cfg.dim, cfg.ffn_dim)]]
        if not any(lowers(w[1], self.gemm_min_t, self.gemm_min_t) for w, _, _ in mats) and \
                not lowers(self.out_dtype, self.gemm_min_t, self.gemm_min_t):
            return None
        return GemmLowering(self.session, sorted({(n, k) for _, n, k in mats}), cfg.dim, self._resident)

    def _products(self, T: int) -> list[tuple[str, str, int, int, int]]:
        """(kind, weight dtype, rows, n, k) of every matrix product of a T-token pass (the output
        layer at rows 1 and T: a plan takes the last row's logits or every row's)."""
        cfg, dim = self.cfg, self.cfg.dim
        silu = cfg.architecture.activation == "silu"
        out = []
        for b in self.blocks:
            out += [("rmsnorm_matmul", p.wd[1], T, p.n, dim) for p in b.wqkv]
            out += [("matmul", b.wo[1], T, dim, cfg.q_dim),
                    ("rmsnorm_matmul_swiglu", b.wgu[1], T, cfg.ffn_dim, dim) if silu else
                    ("rmsnorm_matmul", b.wgu[1], T, 2 * cfg.ffn_dim, dim),
                    ("matmul", b.wdown[1], T, dim, cfg.ffn_dim)]
        return out + [("rmsnorm_matmul", self.out_dtype, r, cfg.vocab_size, dim) for r in sorted({1, T})]

    def _quantizes(self, kind: str, dtype: str, rows: int, n: int, k: int) -> bool:
        """Whether ``_product`` gives this product its tokens quantized once beforehand: the device
        asks for it (``ModelSession.quantized_activations``: cuda, where the product would run the
        integer decode kernel) and the GEMM regime does not take it."""
        if self._gemm is not None and lowers(dtype, rows, self.gemm_min_t):
            return False
        return self.session.quantized_activations(kind, dtype, rows, n, k)

    def _quantized_products(self, T: int) -> set[tuple[str, str, int, int, int]]:
        """The products of ``_products(T)`` that ``_quantizes``, with their kernels registered
        (``quantize_q8_1`` / ``rmsnorm_quantize_q8_1``, ``qmatmul_DT`` / ``qmatmul_swiglu_DT``)."""
        out = {p for p in set(self._products(T)) if self._quantizes(*p)}
        for kind, dtype, _, _, _ in out:
            self.session.kernel("quantize_q8_1" if kind == "matmul" else "rmsnorm_quantize_q8_1")
            self.session.kernel(("qmatmul_swiglu_" if kind == "rmsnorm_matmul_swiglu" else "qmatmul_") + dtype)
        return out

    def _normq_products(self, T: int) -> set[tuple[str, int]]:
        """(``"o"`` or ``"down"``, block index) of the residual products of a T-token pass that write
        the next product's tokens in their own launch (``qmatmul_normq_DT``: rmsnorm(x) * norm
        quantized with block sums of squares, into the ``xqn`` scratch), and whose next product reads
        them (``qmatmul_rms_DT`` / ``qmatmul_rms_swiglu_DT``) instead of a ``rmsnorm_quantize_q8_1``
        launch: both products take quantized tokens (``_quantized``), the residual has no post-norm,
        the device's launch fits (``ModelSession.normq_fits``, XINFER_NORMQ); the o product feeds
        the FFN's, the down product the next block's qkv (every part; the last block's feeds the
        output layer, which reads one row: not fused). Their kernels registered here."""
        cfg, dim, q = self.cfg, self.cfg.dim, self._quantized[T]
        silu = cfg.architecture.activation == "silu"
        ffn_key = lambda b: (("rmsnorm_matmul_swiglu", b.wgu[1], T, cfg.ffn_dim, dim) if silu else  # noqa: E731
                             ("rmsnorm_matmul", b.wgu[1], T, 2 * cfg.ffn_dim, dim))
        out = set()
        for i, b in enumerate(self.blocks):
            fused = [("o", i, b.wo, cfg.q_dim, b.post_attn_norm, [ffn_key(b)])]
            if i + 1 < len(self.blocks):
                nxt = [("rmsnorm_matmul", p.wd[1], T, p.n, dim) for p in self.blocks[i + 1].wqkv]
                fused.append(("down", i, b.wdown, cfg.ffn_dim, b.post_ffw_norm, nxt))
            for name, j, wd, k, post, consumers in fused:
                if post is None and ("matmul", wd[1], T, dim, k) in q and all(c in q for c in consumers) and \
                        self.session.normq_fits(wd[1], T, dim, k):
                    out.add((name, j))
                    self.session.kernel(f"qmatmul_normq_{wd[1]}")
                    for kind, dtype, *_ in consumers:
                        self.session.kernel(("qmatmul_rms_swiglu_" if kind == "rmsnorm_matmul_swiglu" else
                                             "qmatmul_rms_") + dtype)
        return out

    def _pair_blocks(self, T: int) -> set[int]:
        """The blocks of a T-token pass whose qkv is two parts of two types (llama.cpp's Q4_K_M /
        Q5_K_M mixes: Q4_K q and k, Q6_K v on the ``use_more_bits`` layers), both taking quantized
        tokens (``_quantized``), run as one ``qmatmul_pair_A_B`` launch (``qmatmul_rms_pair_A_B`` on
        the previous down product's tokens, ``_normq_products``) where the device's launch fits
        (``ModelSession.pair_fits``, XINFER_QPAIR): each row the bits of its own type's launch, one
        launch's tail and wait instead of two. Their kernels registered here."""
        cfg, dim, q = self.cfg, self.cfg.dim, self._quantized[T]
        out = set()
        for i, b in enumerate(self.blocks):
            if len(b.wqkv) != 2:
                continue
            p0, p1 = b.wqkv
            if p0.row0 != 0 or p1.row0 != p0.n or any(("rmsnorm_matmul", p.wd[1], T, p.n, dim) not in q for p in b.wqkv):
                continue
            if self.session.pair_fits(p0.wd[1], p1.wd[1], p0.n, p1.n, dim):
                out.add(i)
                rms = i > 0 and ("down", i - 1) in self._normq[T]
                self.session.kernel(f"qmatmul_{'rms_' if rms else ''}pair_{p0.wd[1]}_{p1.wd[1]}")
        return out

    def _rope_blocks(self, T: int) -> set[int]:
        """The blocks of a T-token pass whose qkv launch also rotates q and k and stores k and v into the
        caches (``qmatmul_rope_DT``, ``qmatmul_rms_rope_DT``, ``qmatmul_[rms_]rope_pair_A_B``: XINFER_QROPE,
        ``qkv_rope_enabled``): the qkv is one quantized launch (one part, or a ``_pair_blocks`` pair) and
        no qkv bias or q/k norm runs between it and the rope. Their kernels registered here."""
        if not qkv_rope_enabled():
            return set()
        cfg, dim, q = self.cfg, self.cfg.dim, self._quantized[T]
        qkv_w = cfg.q_dim + 2 * self.kv_dim
        out = set()
        for i, b in enumerate(self.blocks):
            if b.bqkv is not None or b.q_norm is not None:
                continue
            rms = "rms_" if i > 0 and ("down", i - 1) in self._normq[T] else ""
            if i in self._pairs[T]:
                name = f"qmatmul_{rms}rope_pair_{b.wqkv[0].wd[1]}_{b.wqkv[1].wd[1]}"
            elif len(b.wqkv) == 1 and ("rmsnorm_matmul", b.wqkv[0].wd[1], T, qkv_w, dim) in q:
                name = f"qmatmul_{rms}rope_{b.wqkv[0].wd[1]}"
            else:
                continue
            out.add(i)
            self.session.kernel(name)
        return out

    def _fused_dtype(self, prefix: str, parts: list[str]) -> str:
        """The dtype of ``_fused``'s stacked weight: the parts' one dtype and K, else f32."""
        ts = [self._tensor(f"{prefix}{p}.weight") for p in parts]
        dts, ks = {t.dtype for t in ts}, {t.shape[1] for t in ts}
        if len(dts) != 1 or len(ks) != 1:
            return "f32"
        return self.session.matrix_dtype(TensorDesc((sum(t.shape[0] for t in ts), ks.pop()), dts.pop())).label

    def _type_runs(self, prefix: str, parts: list[str]) -> list[list[str]]:
        """``parts`` cut into runs of consecutive tensors of one dtype and K (llama.cpp's Q4_K_M gives
        attn_v Q6_K beside Q4_K attn_q and attn_k on its ``use_more_bits`` layers: two runs)."""
        runs: list[list[str]] = []
        for p in parts:
            t = self._tensor(f"{prefix}{p}.weight")
            last = self._tensor(f"{prefix}{runs[-1][-1]}.weight") if runs else None
            if last is not None and (last.dtype, last.shape[1]) == (t.dtype, t.shape[1]):
                runs[-1].append(p)
            else:
                runs.append([p])
        return runs

    def _stacked(self, prefix: str, parts: list[str], rows: np.ndarray | None = None) -> list[_Part]:
        """The rows of ``parts`` stacked, in the order ``rows``, as one weight a run of one type
        (``_type_runs``): each a matrix product of its own type, none dequantized (a mixed stack used
        to become one f32 weight, 7x a Q4_K one's bytes). ``rows`` must keep each run's rows within it.

        Raises:
            GGUFError: ``rows`` moves a row from one run to another (not the case for q, k, v)."""
        out, row0 = [], 0
        for run in self._type_runs(prefix, parts):
            n = sum(self._tensor(f"{prefix}{p}.weight").shape[0] for p in run)
            sub = None if rows is None else rows[row0:row0 + n] - row0
            if sub is not None and (sub.min() < 0 or sub.max() >= n):
                raise GGUFError(f"{prefix}{'+'.join(run)}: the row order moves rows across tensor types")
            out.append(_Part(self._fused(prefix, run, sub), row0, n))
            row0 += n
        return out

    def _fused(self, prefix: str, parts: list[str], rows: np.ndarray | None = None):
        """Rows of several matrices of one dtype and K stacked into one weight (one matmul), in the
        order ``rows`` (default: as stored); a row of a block type is its blocks, moved whole."""
        ts = [self._tensor(f"{prefix}{p}.weight") for p in parts]
        name = prefix + "+".join(parts)
        if len({t.dtype for t in ts}) != 1 or len({t.shape[1] for t in ts}) != 1:
            # mixed types (q, k, v are cut into runs of one type instead: ``_stacked``):
            # dequantize to f32 (correct, slower)
            data = np.concatenate([t.dequantize() for t in ts], axis=0)
            data = np.ascontiguousarray(data if rows is None else data[rows])
            return self.session.weight(data, TensorDesc(data.shape, "f32"), name), "f32"
        data = np.concatenate([np.asarray(t.data) for t in ts], axis=0)
        data = np.ascontiguousarray(data if rows is None else data[rows])
        dt = ts[0].dtype
        desc = TensorDesc((sum(t.shape[0] for t in ts), ts[0].shape[1]), dt)
        region = self.session.weight(data, desc, name, matrix=True)
        label = self.session.matrix_dtype(desc).label
        self._matrices.append((region, label, desc.shape, name))
        return region, label

    def _vector(self, name: str, parts: list[str], rows: np.ndarray | None = None):
        """Vectors (biases, norm weights) joined into one f32 weight, in the order ``rows``."""
        data = np.concatenate([np.asarray(self._tensor(p).data, dtype=np.float32).reshape(-1) for p in parts])
        data = np.ascontiguousarray(data if rows is None else data[rows])
        return self.session.weight(data, TensorDesc(data.shape, "f32"), name)

    def _layout(self, T: int) -> dict:
        """Private scratch of a T-token forward pass (declared before freeze)."""
        cfg, kvd, arch = self.cfg, self.kv_dim, self.cfg.architecture
        sizes = dict(tokens=T, pos=T, last=1, row=T, first=T, klast=T, x=T * cfg.dim, qkv=T * (cfg.q_dim + 2 * kvd),
                     att=T * cfg.q_dim, act=T * cfg.ffn_dim, hl=cfg.dim,
                     logits=T * cfg.vocab_size, logits_last=cfg.vocab_size, argmax=T,
                     att_part=max(1, workspace_floats(T, cfg.n_head, cfg.head_dim)),  # attention's split-K
                     att_count=max(1, count_ints(T, cfg.n_head)))  # workspace (ops/_attention_split.py)
        if arch.post_norms or arch.embed_scale_sqrt_dim:
            sizes["tmp"] = T * cfg.dim  # a projection's output before its post-norm; the unscaled embeddings
        if arch.activation == "gelu_tanh":
            sizes["gu"] = T * 2 * cfg.ffn_dim
        if T > 1 and any(len(b.wqkv) > 1 for b in self.blocks):  # qkv's parts before their rows are copied
            sizes["qkv_parts"] = T * (cfg.q_dim + 2 * kvd)
        if self._quantized[T]:  # the quantized tokens of the widest input (``_product``)
            kmax = max(k for *_, k in self._quantized[T])
            sizes["xq"] = -(-T * (kmax + kmax // 32 * 8) // F32)
        if self._normq[T]:  # the next product's tokens from a residual product (``_normq_products``)
            sizes["xqn"] = -(-T * (cfg.dim + cfg.dim // 32 * 12) // F32)
        if self._gemm is not None and T >= self.gemm_min_t:
            self._gemm.declare(T)
        return {k: self.session.scratch(n * F32, name=f"T{T}.{k}") for k, n in sizes.items()}

    def weight_bytes(self) -> int:
        """Bytes of the model's weights as the file stores them (what a decode step reads), without
        the resident f16 copies (``f16_weight_bytes``, read only by the GEMM regime's plans)."""
        return self.definition.weight_bytes() - self.f16_weight_bytes

    def streamed_weight_bytes(self) -> int:
        """Bytes of weights one decode step reads: ``weight_bytes`` less the token embedding table, of
        which a step reads only its tokens' rows (a gather; the rows are not counted), unless the table
        is also the output projection (tied embeddings), which reads all of it."""
        table = 0 if self.cfg.tied_embeddings else self.embd.nbytes
        return self.weight_bytes() - table

    # -- forward ---------------------------------------------------------------------------
    def forward(self, T: int, all_logits: bool, batched: bool = False):
        """A fragment running ``T`` tokens through the model.

        Inputs and outputs in the order and with the names of ``PlanSpec(T, all_logits, batched)``
        (a greedy step downloads ``argmax``, 4 bytes a row, instead of the logits).

        ``batched``: rows may belong to different sequences of the batched KV cache (see
        ``batch_seqs``).
        """
        cfg, arch = self.cfg, self.cfg.architecture
        dim, qd, kvd, ffn, V = cfg.dim, cfg.q_dim, self.kv_dim, cfg.ffn_dim, cfg.vocab_size
        qkv_w = qd + 2 * kvd
        d = self.definition
        L = self._layouts[T]
        tokens, pos, last, x, qkv, att, act = (L[k] for k in ("tokens", "pos", "last", "x", "qkv", "att", "act"))
        row, first, klast = L["row"], L["first"], L["klast"]
        part, count = L["att_part"], L["att_count"]  # count zeroed first; each attention launch leaves it zero
        tmp, gu = L.get("tmp"), L.get("gu")
        rows = self.batch_seqs * self.ctx
        if batched and not self.batch_seqs:
            raise ValueError("batched=True needs a builder made with batch_seqs > 0")
        n_out = T if all_logits else 1
        logits = L["logits"] if all_logits else L["logits_last"]
        get_rows = lambda dst: self._dispatch(  # noqa: E731
            f"get_rows_{self.embd_dtype}", [self.embd, tokens, (dst, W_)], dict(T=T, dim=dim, vocab=V))
        if arch.embed_scale_sqrt_dim:  # llama.cpp: ggml_scale in f32 after get_rows
            cmds = [get_rows(tmp), self._dispatch("affine", [tmp, (x, W_)], dict(n=T * dim, a=math.sqrt(dim), b=0.0))]
        else:
            cmds = [get_rows(x)]
        if T <= SPLIT_T_MAX:  # split-K attention's counters (cuda; above SPLIT_T_MAX tokens it never splits)
            cmds.insert(0, Fill(count, 0.0))
        qa = (self._quantized[T], L.get("xq"))  # the products given quantized tokens (``_product``)
        nq, xqn = self._normq[T], L.get("xqn")  # residual products that quantize the next one's tokens
        mm = lambda wd, src, dst, n, kk, acc, rows=T: self._product(  # noqa: E731
            "matmul", wd, src, None, dst, rows, n, kk, accumulate=acc, qa=qa)
        norm_mm = lambda wd, src, g, dst, n, rows=T: self._product(  # noqa: E731  rmsnorm(src) * g, then @ w^T
            "rmsnorm_matmul", wd, src, g, dst, rows, n, dim, qa=qa)
        ff = [] if self.rope_ff is None else [self.rope_ff]
        rope_kv = lambda b, dst_row, k_cache, v_cache, ctx: self._dispatch(  # noqa: E731
            ("rope_kv_store_ff" if ff else "rope_kv_store") + self._kv_sfx,
            [(qkv, RW), pos, dst_row, (k_cache, RW), (v_cache, RW)] + ff,
            dict(T=T, n_head=cfg.n_head, n_kv=cfg.n_kv_head, head_dim=cfg.head_dim, row_stride=qkv_w, ctx=ctx,
                 theta=b.theta))

        def residual(w, src, k, norm, next_norm=None, ready=None):
            """x += src @ w^T, or with a post-norm x += rmsnorm(src @ w^T) * norm; ``next_norm``: and
            the next product's tokens, rmsnorm(x) * next_norm, into xqn (``qmatmul_normq_DT``);
            ``ready``: src's tokens already quantized (``_product``: the attention wrote them)."""
            if norm is None:
                return self._product("matmul", w, src, None, x, T, dim, k, accumulate=1, qa=qa, ready=ready,
                                     normq=None if next_norm is None else (next_norm, xqn))
            return mm(w, src, tmp, dim, k, 0) + [
                self._dispatch("rmsnorm_add", [tmp, norm, (x, RW)], dict(rows=T, dim=dim, eps=cfg.rms_eps))]

        def qkv_product(b, ready, pair, rope=None):
            """qkv = rmsnorm(x) @ Wqkv^T, a product a part (``_Part``: a run of one type): a part alone
            straight into qkv; two parts with ``pair`` (``_pair_blocks``) in one launch straight into
            their columns; else several at T == 1 each into its columns, at T > 1 each into its (T, n)
            block of ``qkv_parts`` (part after part), then its T rows copied into their columns.
            ``ready``: the tokens already quantized (``_product``; the previous block's down product
            wrote them), else the first part that takes quantized tokens quantizes them for the rest.
            ``rope``: the block is one of ``_rope_blocks``, (bindings, constants) of ``rope_kv_store``'s work."""
            if pair:
                return self._product("rmsnorm_matmul", b.wqkv[0].wd, x, b.attn_norm, qkv, T, b.wqkv[0].n, dim, qa=qa,
                                     ready=ready, pair=b.wqkv[1], rope=rope)
            if len(b.wqkv) == 1:
                return self._product("rmsnorm_matmul", b.wqkv[0].wd, x, b.attn_norm, qkv, T, qkv_w, dim, qa=qa,
                                     ready=ready, rope=rope)
            out, off = [], 0
            for p in b.wqkv:
                blk = qkv.slice(F32 * p.row0, F32 * p.n) if T == 1 else L["qkv_parts"].slice(F32 * off, F32 * T * p.n)
                takes = ("rmsnorm_matmul", p.wd[1], T, p.n, dim) in self._quantized[T]
                out += self._product("rmsnorm_matmul", p.wd, x, b.attn_norm, blk, T, p.n, dim, qa=qa,
                                     ready=ready if takes else None)
                if ready is None and takes:
                    ready = (qa[1], False)
                if T == 1:
                    continue
                out += [Copy(qkv.slice(F32 * (t * qkv_w + p.row0), F32 * p.n), blk.slice(F32 * t * p.n, F32 * p.n))
                        for t in range(T)]
                off += T * p.n
            return out

        heads = dict(T=T, n_head=cfg.n_head, n_kv=cfg.n_kv_head, head_dim=cfg.head_dim, q_stride=qkv_w,
                     scale=1.0 / math.sqrt(cfg.head_dim))
        def rope_args(b, dst_row, k_cache, v_cache, ctx):
            """(bindings, constants) of the qkv launch's rope form (``_rope_blocks``): rope_kv's work."""
            return ([pos, dst_row, (k_cache, RW), (v_cache, RW), self._rope_ff],
                    dict(n_head=cfg.n_head, n_kv=cfg.n_kv_head, head_dim=cfg.head_dim, ctx=ctx,
                         kv16=int(self._kv_sfx == "_f16"), theta=b.theta))

        for i, b in enumerate(self.blocks):
            fused = i in self._rope[T]  # the qkv launch does rope_kv's work
            dst = (row, b.bk_cache, b.bv_cache, rows) if batched else (pos, b.k_cache, b.v_cache, self.ctx)
            cmds += qkv_product(b, (xqn, True) if ("down", i - 1) in nq else None, i in self._pairs[T],
                                rope_args(b, *dst) if fused else None)
            if b.bqkv is not None:
                cmds.append(self._dispatch("bias_add", [(qkv, RW), b.bqkv], dict(rows=T, n=qkv_w)))
            if b.q_norm is not None:
                cmds.append(self._dispatch("qk_rmsnorm", [(qkv, RW), b.q_norm, b.k_norm],
                                           dict(T=T, n_head=cfg.n_head, n_kv=cfg.n_kv_head, head_dim=cfg.head_dim,
                                                row_stride=qkv_w, eps=cfg.rms_eps)))
            # the attention writes the o product's tokens too, into xq (``attention_quantize``)
            att_q = self._qatt and b.post_attn_norm is None and ("matmul", b.wo[1], T, dim, qd) in self._quantized[T]
            aq, xq_out = ("_quantize", [(qa[1], W_)]) if att_q else ("", [])
            if not fused:
                cmds.append(rope_kv(b, *dst))
            if batched:
                cmds.append(self._dispatch("attention_batched" + aq + self._kv_sfx,
                                           [qkv, b.bk_cache, b.bv_cache, first, klast, (att, W_), (part, RW), (count, RW)]
                                           + xq_out, dict(heads, rows=rows, window=b.window)))
            else:
                cmds.append(self._dispatch("attention" + aq + self._kv_sfx,
                                           [qkv, b.k_cache, b.v_cache, pos, (att, W_), (part, RW), (count, RW)] + xq_out,
                                           dict(heads, ctx=self.ctx, window=b.window)))
            o_nq = ("o", i) in nq
            cmds += residual(b.wo, att, qd, b.post_attn_norm, b.ffn_norm if o_nq else None,
                             (qa[1], False) if att_q else None)
            ready = (xqn, True) if o_nq else None
            if arch.activation == "silu":
                cmds += self._product("rmsnorm_matmul_swiglu", b.wgu, x, b.ffn_norm, act, T, ffn, dim, qa=qa, ready=ready)
            else:
                cmds += self._product("rmsnorm_matmul", b.wgu, x, b.ffn_norm, gu, T, 2 * ffn, dim, qa=qa, ready=ready)
                cmds.append(self._dispatch("geglu", [gu, (act, W_)], dict(rows=T, n=ffn)))
            cmds += residual(b.wdown, act, ffn, b.post_ffw_norm,
                             self.blocks[i + 1].attn_norm if ("down", i) in nq else None)
        out = (self.out, self.out_dtype)
        if all_logits:
            cmds += norm_mm(out, x, self.out_norm, logits, V)
        else:
            hl = L["hl"]
            cmds.append(self._dispatch("get_rows_f32", [x, last, (hl, W_)], dict(T=1, dim=dim, vocab=T)))
            cmds += norm_mm(out, hl, self.out_norm, logits, V, rows=1)
        if cfg.logit_softcap > 0:
            cmds.append(self._dispatch("softcap", [(logits, RW)], dict(n=n_out * V, cap=cfg.logit_softcap)))
        ids = L["argmax"]
        cmds.append(self._dispatch("argmax", [logits, (ids, W_)], dict(rows=n_out, n=V)))
        i32 = lambda r, n: IODesc(r, TensorDesc((n,), "i32"))  # noqa: E731
        ins = dict(tokens=i32(tokens, T), positions=i32(pos, T), rows=i32(row, T), first_rows=i32(first, T),
                   last_rows=i32(klast, T), last=i32(last, 1))
        outs = dict(logits=IODesc(logits, TensorDesc((n_out, V), "f32")), argmax=i32(ids, n_out))
        spec = PlanSpec(T, all_logits, batched)
        return d.fragment(cmds, [ins[k] for k in spec.inputs], [outs[k] for k in spec.outputs])

    def _product(self, kind: str, wd, x, norm, y, rows: int, n: int, k: int, accumulate: int = 0,
                 qa: tuple | None = None, ready: tuple | None = None, normq: tuple | None = None,
                 pair: Any = None, rope: tuple | None = None) -> list:
        """The commands of one matrix product of ``kind`` (``matmul``, ``rmsnorm_matmul``,
        ``rmsnorm_matmul_swiglu``: the kernel families of ``ops/_kernels.py``) with weight ``wd``
        ((region, dtype), (n, k); swiglu: (2n, k)), input ``x`` (rows, k), output ``y`` (rows, n):
        the GEMM regime where the policy lowers it (``_gemm.py``); where ``qa`` (the pass's
        ``_quantized`` set and its layout's ``xq`` scratch) holds the product,
        ``rmsnorm_quantize_q8_1`` (``quantize_q8_1`` for matmul) into ``xq``, then ``qmatmul_DT``
        (``qmatmul_swiglu_DT``) -- where ``ready`` is (buffer, rms), the tokens are already there:
        with rms, ``qmatmul_normq_DT``'s (rmsnorm after the sums: ``qmatmul_rms_DT``,
        ``qmatmul_rms_swiglu_DT``), else the same x and norm just quantized; where ``normq`` is
        (norm, buffer), a matmul's launch also writes rmsnorm(y) * norm's tokens there
        (``qmatmul_normq_DT``, ``_normq_products``); where ``pair`` is a second ``_Part`` on the same
        tokens, both in one launch (``qmatmul_pair_A_B`` / ``qmatmul_rms_pair_A_B``, ``_pair_blocks``),
        y the (rows, n + its n) of both; where ``rope`` is (bindings, constants) of ``rope_kv_store``'s
        work, the qkv launch's rope form does it (``_rope_blocks``); else the kernel."""
        if (pair is not None or rope is not None) and (qa is None or (kind, wd[1], rows, n, k) not in qa[0]):
            # _pair_blocks and _rope_blocks ask only there (a gemm launch would drop the pair or the rope)
            what = "a pair launch" if pair is not None else "the rope form"
            raise RuntimeError(f"{kind} {wd[1]} ({n}, {k}) at T={rows}: {what}, but it takes no quantized tokens")
        if self._gemm is not None and lowers(wd[1], rows, self.gemm_min_t):
            return self._gemm.commands(self.definition.kernels, wd[0], wd[1], x, y, rows, n, k, norm=norm,
                                       eps=self.cfg.rms_eps, accumulate=accumulate,
                                       glu=kind == "rmsnorm_matmul_swiglu")
        if qa is not None and (kind, wd[1], rows, n, k) in qa[0]:
            xq, rms = ready if ready is not None else (qa[1], False)
            cmds = [] if ready is not None else [
                self._dispatch("quantize_q8_1", [x, (xq, W_)], dict(T=rows, K=k)) if norm is None else
                self._dispatch("rmsnorm_quantize_q8_1", [x, norm, (xq, W_)], dict(T=rows, K=k, eps=self.cfg.rms_eps))]
            eps = dict(eps=self.cfg.rms_eps) if rms else {}
            pre = "qmatmul_rms_" if rms else "qmatmul_"
            if rope is not None:
                rb, rc = rope
                if pair is not None:
                    return cmds + [self._dispatch(f"{pre}rope_pair_{wd[1]}_{pair.wd[1]}",
                                                  [wd[0], pair.wd[0], xq, (y, W_)] + rb,
                                                  dict(T=rows, N=n, N2=pair.n, K=k, **eps, **rc))]
                return cmds + [self._dispatch(f"{pre}rope_{wd[1]}", [wd[0], xq, (y, W_)] + rb,
                                              dict(T=rows, N=n, K=k, **eps, **rc))]
            if pair is not None:
                return cmds + [self._dispatch(f"{pre}pair_{wd[1]}_{pair.wd[1]}", [wd[0], pair.wd[0], xq, (y, W_)],
                                              dict(T=rows, N=n, N2=pair.n, K=k, **eps))]
            if kind == "rmsnorm_matmul_swiglu":
                return cmds + [self._dispatch(f"{pre}swiglu_{wd[1]}", [wd[0], xq, (y, W_)], dict(T=rows, N=n, K=k, **eps))]
            if normq is not None:
                return cmds + [self._dispatch(f"qmatmul_normq_{wd[1]}", [wd[0], xq, (y, RW), normq[0], (normq[1], W_)],
                                              dict(T=rows, N=n, K=k, accumulate=accumulate))]
            return cmds + [self._dispatch(f"{pre}{wd[1]}", [wd[0], xq, (y, RW)],
                                          dict(T=rows, N=n, K=k, accumulate=accumulate, **eps))]
        if normq is not None or ready is not None:  # their callers ask only where qa holds it
            raise RuntimeError(f"{kind} {wd[1]} ({n}, {k}) at T={rows}: tokens quantized for it, but it takes none")
        consts = dict(T=rows, N=n, K=k)
        if kind != "rmsnorm_matmul_swiglu":
            consts["accumulate"] = accumulate
        if kind != "matmul":
            consts["eps"] = self.cfg.rms_eps
        binds = [wd[0], x] + ([norm] if norm is not None else []) + [(y, W_ if kind == "rmsnorm_matmul_swiglu" else RW)]
        return [self._dispatch(f"{kind}_{wd[1]}", binds, consts)]

    def _dispatch(self, name: str, bindings: list, constants: dict) -> Dispatch:
        binds = [Binding(b[0], b[1]) if isinstance(b, tuple) else Binding(b) for b in bindings]
        return Dispatch(self.definition.kernels[name], binds, constants)

    def plan_specs(self, batched: bool = False) -> dict[str, PlanSpec]:
        """Plan name -> ``PlanSpec`` of ``prepare()`` (``decode``: T=1, last logits;
        ``prefill{T}`` for each prefill bucket, last logits; ``score``: T=chunk, every row's logits)
        or, ``batched``, of ``prepare_batched()`` (``batch{B}`` for each bucket B: rows of any
        sequences, every row's logits; ``prefill{T}``: rows of one sequence, last logits)."""
        if batched:
            return {**{f"batch{B}": PlanSpec(B, True, True) for B in self.batch_sizes},
                    **{f"prefill{T}": PlanSpec(T, False, True) for T in self.prefill_sizes}}
        return {"decode": PlanSpec(1, False, False), "score": PlanSpec(self.chunk, True, False),
                **{f"prefill{T}": PlanSpec(T, False, False) for T in self.prefill_sizes}}

    def _prepare(self, batched: bool, slots: int):
        plans = {}
        for name, spec in self.plan_specs(batched).items():
            frag = self.forward(spec.tokens, spec.all_logits, batched=batched).reuse_private_scratch()
            g = self.definition.graph()
            ins = [g.input(io.desc) for io in frag.inputs]
            plans[name] = (g, ins, frag.record(g, ins))
        return self.definition.prepare_plans(plans, slots)

    def prepare_batched(self):
        """A ``PreparedModel`` of capacity 1 over the batched KV cache (``batch_seqs`` sequences),
        with the plans of ``plan_specs(batched=True)``.

        Raises:
            ValueError: the builder was made without ``batch_seqs``.
        """
        if not self.batch_seqs:
            raise ValueError("prepare_batched needs a builder made with batch_seqs > 0")
        return self._prepare(True, 1)

    def prepare(self, slots: int):
        """A ``PreparedModel`` of ``slots`` slots with the plans of ``plan_specs()``, all sharing
        each slot's KV cache."""
        return self._prepare(False, slots)


#: the builder of every family (the name says where it began)
DecoderBuilder = LlamaBuilder
