"""The Llama decoder built on the model layer (in the manner of gpt-fast's ~300-line Llama).

One ``ModelSession`` holds the weights (quantized ones stay quantized: q4_1/q8_0 matrix-vector
kernels read them as stored) and each slot's KV cache (persistent state). ``forward(T, logits)``
builds one fragment for ``T`` tokens:

    x = embed(tokens)                                   # (T, dim)
    for each block:                                     # five kernels a block:
        qkv = rmsnorm(x) @ [Wq; Wk; Wv]^T               # rmsnorm_matmul: (T, dim + 2 * kv_dim)
        rope(q), rope(k) at pos; kv_cache[pos] = k, v   # rope_kv_store (GGUF adjacent pairs; pos < 0: padding)
        x += attention(q, k_cache, v_cache, pos) @ Wo^T # attention (grouped-query, causal), matmul accumulate
        act = swiglu(rmsnorm(x) @ [Wgate; Wup]^T)       # rmsnorm_matmul_swiglu: (T, ffn)
        x += act @ Wdown^T                              # matmul accumulate
    logits = rmsnorm(x[rows]) @ Wout^T                  # the last valid row, or every row

Tensor names and layouts: the GGUF llama convention (``blk.N.attn_q.weight`` etc.; Q/K already
permuted for the adjacent-pair rope, see llama.cpp ``convert_hf_to_gguf.py``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ..hal import Access, GGUFError, TensorDesc
from ..model import Binding, Dispatch, IODesc, ModelContext, ModelSession
from ._gguf import GGUFModel, LlamaConfig

F32 = 4
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
RW, W_ = Access.READ_WRITE, Access.WRITE


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


@dataclasses.dataclass
class _Block:
    attn_norm: Any
    wqkv: Any
    wo: Any
    ffn_norm: Any
    wgu: Any
    wdown: Any
    k_cache: Any
    v_cache: Any
    bk_cache: Any = None  # batched: (batch_seqs * ctx, kv_dim), sequence s owns rows [s*ctx, (s+1)*ctx)
    bv_cache: Any = None


class LlamaBuilder:
    """Uploads a GGUF Llama's weights and builds forward fragments over them.

    Args:
        gguf_model: from ``load_gguf``.
        device: the device to build on.
        ctx: KV-cache length per slot, tokens (<= the model's context length).
        chunk: tokens per prefill/score step (the T of those plans).
        batch_seqs: 0, or the sequences of the batched decode path: one more KV cache per layer of
            ``batch_seqs * ctx`` rows (sequence s owns rows ``[s*ctx, (s+1)*ctx)``) and the plans
            of ``prepare_batched``.

    Raises:
        GGUFError: a tensor is missing or has an unexpected shape.
        ValueError: ``ctx`` out of range.
    """

    def __init__(self, gguf_model: GGUFModel, device: Any, ctx: int, chunk: int = 64, batch_seqs: int = 0):
        cfg = gguf_model.config
        if not 1 <= ctx <= cfg.context_length:
            raise ValueError(f"ctx={ctx} must be in [1, {cfg.context_length}] (the model's context length)")
        self.cfg: LlamaConfig = cfg
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
        self.out, self.out_dtype = (self.embd, self.embd_dtype) if cfg.tied_embeddings else self._weight(out_name)
        self.out_norm, _ = self._weight("output_norm.weight")
        self.blocks = []
        for i in range(cfg.n_layer):
            p = f"blk.{i}."
            wqkv, qkv_dt = self._fused(p, ["attn_q", "attn_k", "attn_v"])
            wgu, gu_dt = self._fused(p, ["ffn_gate", "ffn_up"])
            wo, wo_dt = self._weight(p + "attn_output.weight")
            wdown, down_dt = self._weight(p + "ffn_down.weight")
            self.blocks.append(_Block(
                self._weight(p + "attn_norm.weight")[0], (wqkv, qkv_dt), (wo, wo_dt), self._weight(p + "ffn_norm.weight")[0],
                (wgu, gu_dt), (wdown, down_dt),
                s.scratch(ctx * self.kv_dim * F32, persistent=True, name=f"{p}k_cache"),
                s.scratch(ctx * self.kv_dim * F32, persistent=True, name=f"{p}v_cache"),
            ))
            if batch_seqs:
                self.blocks[-1].bk_cache = s.scratch(batch_seqs * ctx * self.kv_dim * F32, persistent=True, name=f"{p}bk_cache")
                self.blocks[-1].bv_cache = s.scratch(batch_seqs * ctx * self.kv_dim * F32, persistent=True, name=f"{p}bv_cache")
        if not 1 <= chunk <= ctx:
            raise ValueError(f"chunk={chunk} must be in [1, ctx={ctx}]")
        self.chunk = chunk
        # prefill buckets: a short prompt runs through a small plan instead of a padded chunk
        self.prefill_sizes = sorted({min(16, chunk), chunk} - {1}) or [1]
        self.batch_seqs = batch_seqs
        #: batched step buckets: every bucket below batch_seqs + chunk (a row for each sequence and a
        #: chunk of prompt rows: llm/_batch.py) and the smallest one that holds that many
        top = batch_seqs + chunk
        self.batch_sizes = ([b for b in BATCH_BUCKETS if b < top] + [min([b for b in BATCH_BUCKETS if b >= top]
                                                                         or [top])]) if batch_seqs else []
        self._layouts = {T: self._layout(T) for T in sorted({1, *self.prefill_sizes, *self.batch_sizes})}
        self.definition = s.freeze(ModelContext(device))
        self._tensors = None  # the memory map is no longer needed

    # -- weights ---------------------------------------------------------------------------
    def _tensor(self, name: str):
        t = self._tensors.get(name)
        if t is None:
            raise GGUFError(f"tensor {name!r} is missing from the model file")
        return t

    def _weight(self, name: str, matrix: bool = True):
        """Upload tensor ``name``: ``(region, the dtype label its kernels are named after)``; a 2-D
        tensor with ``matrix`` in the device's matrix layout (``ModelSession.matrix_dtype``)."""
        t = self._tensor(name)
        if t.dtype in ("f32", "f16") and len(t.shape) == 1:
            data = np.asarray(t.data, dtype=np.float32)  # norms: f32 on the device
            return self.session.weight(data, TensorDesc(t.shape, "f32"), name), "f32"
        desc = TensorDesc(t.shape, t.dtype)
        matrix = matrix and len(t.shape) == 2
        label = self.session.matrix_dtype(desc).label if matrix else t.dtype
        return self.session.weight(np.ascontiguousarray(t.data), desc, name, matrix=matrix), label

    def _matrix_dtype(self, name: str) -> str:
        """The dtype label of 2-D tensor ``name`` as ``_weight`` uploads it."""
        t = self._tensor(name)
        return self.session.matrix_dtype(TensorDesc(t.shape, t.dtype)).label

    def _kernel_names(self, batch_seqs: int) -> set[str]:
        """The kernels ``forward`` dispatches, from the tensors' types (as ``_weight`` and ``_fused``
        choose them)."""
        cfg = self.cfg
        dt = self._matrix_dtype
        embd = dt("token_embd.weight") if cfg.tied_embeddings else self._tensor("token_embd.weight").dtype
        names = {f"get_rows_{embd}", "get_rows_f32", "rope_kv_store", "attention", "argmax",
                 f"rmsnorm_matmul_{embd if cfg.tied_embeddings else dt('output.weight')}"}
        if batch_seqs:
            names.add("attention_batched")
        for i in range(cfg.n_layer):
            p = f"blk.{i}."
            names |= {f"rmsnorm_matmul_{self._fused_dtype(p, ['attn_q', 'attn_k', 'attn_v'])}",
                      f"rmsnorm_matmul_swiglu_{self._fused_dtype(p, ['ffn_gate', 'ffn_up'])}",
                      f"matmul_{dt(p + 'attn_output.weight')}", f"matmul_{dt(p + 'ffn_down.weight')}"}
        return names

    def _fused_dtype(self, prefix: str, parts: list[str]) -> str:
        """The dtype of ``_fused``'s stacked weight: the parts' one dtype and K, else f32."""
        ts = [self._tensor(f"{prefix}{p}.weight") for p in parts]
        dts, ks = {t.dtype for t in ts}, {t.shape[1] for t in ts}
        if len(dts) != 1 or len(ks) != 1:
            return "f32"
        return self.session.matrix_dtype(TensorDesc((sum(t.shape[0] for t in ts), ks.pop()), dts.pop())).label

    def _fused(self, prefix: str, parts: list[str]):
        """Rows of several matrices of one dtype and K stacked into one weight (one matmul)."""
        ts = [self._tensor(f"{prefix}{p}.weight") for p in parts]
        if len({t.dtype for t in ts}) != 1 or len({t.shape[1] for t in ts}) != 1:
            # mixed types (llama.cpp's Q4_K_M gives attn_v Q6_K beside Q4_K q, k on some layers):
            # dequantize to f32 (correct, slower)
            data = np.concatenate([t.dequantize() for t in ts], axis=0)
            return self.session.weight(data, TensorDesc(data.shape, "f32"), prefix + "+".join(parts)), "f32"
        data = np.ascontiguousarray(np.concatenate([np.asarray(t.data) for t in ts], axis=0))
        desc = TensorDesc((sum(t.shape[0] for t in ts), ts[0].shape[1]), ts[0].dtype)
        return (self.session.weight(data, desc, prefix + "+".join(parts), matrix=True),
                self.session.matrix_dtype(desc).label)

    def _layout(self, T: int) -> dict:
        """Private scratch of a T-token forward pass (declared before freeze)."""
        cfg, kvd = self.cfg, self.kv_dim
        sizes = dict(tokens=T, pos=T, last=1, row=T, first=T, klast=T, x=T * cfg.dim, qkv=T * (cfg.dim + 2 * kvd),
                     att=T * cfg.dim, act=T * cfg.ffn_dim, hl=cfg.dim,
                     logits=T * cfg.vocab_size, logits_last=cfg.vocab_size, argmax=T)
        return {k: self.session.scratch(n * F32, name=f"T{T}.{k}") for k, n in sizes.items()}

    def weight_bytes(self) -> int:
        return self.definition.weight_bytes()

    # -- forward ---------------------------------------------------------------------------
    def forward(self, T: int, all_logits: bool, batched: bool = False):
        """A fragment running ``T`` tokens through the model.

        Inputs and outputs in the order and with the names of ``PlanSpec(T, all_logits, batched)``
        (a greedy step downloads ``argmax``, 4 bytes a row, instead of the logits).

        ``batched``: rows may belong to different sequences of the batched KV cache (see
        ``batch_seqs``).
        """
        cfg = self.cfg
        dim, kvd, ffn, V = cfg.dim, self.kv_dim, cfg.ffn_dim, cfg.vocab_size
        qkv_w = dim + 2 * kvd
        d = self.definition
        L = self._layouts[T]
        tokens, pos, last, x, qkv, att, act = (L[k] for k in ("tokens", "pos", "last", "x", "qkv", "att", "act"))
        row, first, klast = L["row"], L["first"], L["klast"]
        rows = self.batch_seqs * self.ctx
        if batched and not self.batch_seqs:
            raise ValueError("batched=True needs a builder made with batch_seqs > 0")
        n_out = T if all_logits else 1
        logits = L["logits"] if all_logits else L["logits_last"]
        cmds = [self._dispatch(f"get_rows_{self.embd_dtype}", [self.embd, tokens, (x, W_)], dict(T=T, dim=dim, vocab=V))]
        mm = lambda wd, src, dst, n, kk, acc, rows=T: self._dispatch(  # noqa: E731
            f"matmul_{wd[1]}", [wd[0], src, (dst, RW)], dict(T=rows, N=n, K=kk, accumulate=acc))
        norm_mm = lambda wd, src, g, dst, n, rows=T: self._dispatch(  # noqa: E731  rmsnorm(src) * g, then @ w^T
            f"rmsnorm_matmul_{wd[1]}", [wd[0], src, g, (dst, RW)], dict(T=rows, N=n, K=dim, accumulate=0, eps=cfg.rms_eps))
        rope_kv = lambda b, dst_row, k_cache, v_cache, ctx: self._dispatch(  # noqa: E731
            "rope_kv_store", [(qkv, RW), pos, dst_row, (k_cache, RW), (v_cache, RW)],
            dict(T=T, n_head=cfg.n_head, n_kv=cfg.n_kv_head, head_dim=cfg.head_dim, row_stride=qkv_w, ctx=ctx,
                 theta=cfg.rope_theta))
        q_v = qkv
        for b in self.blocks:
            cmds.append(norm_mm(b.wqkv, x, b.attn_norm, qkv, qkv_w))
            if batched:
                cmds += [
                    rope_kv(b, row, b.bk_cache, b.bv_cache, rows),
                    self._dispatch("attention_batched", [q_v, b.bk_cache, b.bv_cache, first, klast, (att, W_)],
                                   dict(T=T, n_head=cfg.n_head, n_kv=cfg.n_kv_head, head_dim=cfg.head_dim, rows=rows,
                                        q_stride=qkv_w, scale=1.0 / math.sqrt(cfg.head_dim))),
                ]
            else:
                cmds += [
                    rope_kv(b, pos, b.k_cache, b.v_cache, self.ctx),
                    self._dispatch("attention", [q_v, b.k_cache, b.v_cache, pos, (att, W_)],
                                   dict(T=T, n_head=cfg.n_head, n_kv=cfg.n_kv_head, head_dim=cfg.head_dim, ctx=self.ctx,
                                        q_stride=qkv_w, scale=1.0 / math.sqrt(cfg.head_dim))),
                ]
            cmds += [
                mm(b.wo, att, x, dim, dim, 1),
                self._dispatch(f"rmsnorm_matmul_swiglu_{b.wgu[1]}", [b.wgu[0], x, b.ffn_norm, (act, W_)],
                               dict(T=T, N=ffn, K=dim, eps=cfg.rms_eps)),
                mm(b.wdown, act, x, dim, ffn, 1),
            ]
        out = (self.out, self.out_dtype)
        if all_logits:
            cmds.append(norm_mm(out, x, self.out_norm, logits, V))
        else:
            hl = L["hl"]
            cmds.append(self._dispatch("get_rows_f32", [x, last, (hl, W_)], dict(T=1, dim=dim, vocab=T)))
            cmds.append(norm_mm(out, hl, self.out_norm, logits, V, rows=1))
        ids = L["argmax"]
        cmds.append(self._dispatch("argmax", [logits, (ids, W_)], dict(rows=n_out, n=V)))
        i32 = lambda r, n: IODesc(r, TensorDesc((n,), "i32"))  # noqa: E731
        ins = dict(tokens=i32(tokens, T), positions=i32(pos, T), rows=i32(row, T), first_rows=i32(first, T),
                   last_rows=i32(klast, T), last=i32(last, 1))
        outs = dict(logits=IODesc(logits, TensorDesc((n_out, V), "f32")), argmax=i32(ids, n_out))
        spec = PlanSpec(T, all_logits, batched)
        return d.fragment(cmds, [ins[k] for k in spec.inputs], [outs[k] for k in spec.outputs])

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
