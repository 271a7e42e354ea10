"""``--compare torch``: a hand-written PyTorch decode step of the same shape, for a ratio against ours.

What a strong user writes by hand (the step /work/shared/H200.md measures, gpt-fast style): bf16
weights, fused qkv and gate/up projections, ``F.rms_norm``, RoPE in float32 on adjacent pairs (the
GGUF layout), ``index_copy_`` of the new key/value into a static KV cache of 1024 positions,
``F.scaled_dot_product_attention(..., enable_gqa=True)`` over the cache with a position mask, tied
output projection, argmax sampling. On cuda the step (including feeding its token and position back
into its inputs) is captured once with ``torch.cuda.graph`` and replayed; on cpu it runs eager (no
graph), which is only good for checking that it runs.

Random N(0, 0.02) weights: speed does not depend on their values. torch is not a dependency of the
project; ``unavailable()`` says why a comparison cannot run.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from ._report import render_table

MAX_SEQ = 1024  # static KV cache positions, as H200.md's reference step


def unavailable(device: str = "cuda") -> str | None:
    """None when the comparison can run on ``device``, else the reason (torch or CUDA missing)."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if device.startswith("cuda") and not torch.cuda.is_available():
        return f"PyTorch {torch.__version__} sees no CUDA device"
    return None


class TorchDecoder:
    """A Llama decoder's single-token step in PyTorch, batch ``batch``, static KV cache.

    Args:
        config: a ``LlamaConfig`` (n_layer, dim, n_head, n_kv_head, head_dim, ffn_dim, vocab_size,
            rope_theta, rms_eps).
        batch: sequences decoded together (B).
        device: ``"cuda"``, ``"cuda:N"`` or ``"cpu"``.
        dtype: weights and activations (default bf16; RoPE is computed in float32).
        max_seq: KV-cache positions (S).
        seed: of the random weights (drawn on ``device``).
        weights: another ``TorchDecoder`` of the same config, device and dtype whose weights this
            one shares (a batch sweep draws them once).
    """

    def __init__(self, config: Any, batch: int, device: str = "cuda", dtype: Any = None, max_seq: int = MAX_SEQ,
                 seed: int = 0, weights: "TorchDecoder | None" = None):
        import torch

        c = config
        self.c, self.B, self.S, self.device = c, batch, max_seq, torch.device(device)
        self.dtype = dtype or torch.bfloat16
        hd, H, KV = c.head_dim, c.n_head, c.n_kv_head
        if weights is not None:
            self.embd, self.layers, self.out_norm = weights.embd, weights.layers, weights.out_norm
        else:
            g = torch.Generator(device=self.device).manual_seed(seed)

            def w(*shape):  # N(0, 0.02)
                x = torch.randn(*shape, generator=g, device=self.device, dtype=torch.float32)
                return x.mul_(0.02).to(self.dtype)

            def ones():
                return torch.ones(c.dim, device=self.device, dtype=self.dtype)

            self.embd = w(c.vocab_size, c.dim)  # (V, dim), also the tied output projection
            self.layers = [dict(attn_norm=ones(), wqkv=w((H + 2 * KV) * hd, c.dim),  # (q | k | v rows, dim)
                                wo=w(c.dim, H * hd), ffn_norm=ones(),
                                w13=w(2 * c.ffn_dim, c.dim),  # (gate | up rows, dim)
                                w2=w(c.dim, c.ffn_dim))
                           for _ in range(c.n_layer)]
            self.out_norm = ones()
        # (L, B, KV, S, hd) caches
        self.k_cache = torch.zeros(c.n_layer, batch, KV, max_seq, hd, device=self.device, dtype=self.dtype)
        self.v_cache = torch.zeros_like(self.k_cache)
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))  # (hd/2,)
        ang = torch.arange(max_seq, dtype=torch.float64)[:, None] * inv[None, :]  # (S, hd/2)
        self.cos = ang.cos().to(self.device, torch.float32)
        self.sin = ang.sin().to(self.device, torch.float32)
        self.positions = torch.arange(max_seq, device=self.device)
        # static inputs: the tokens (B,) and the position (1,) of this step
        self.tokens = torch.zeros(batch, dtype=torch.long, device=self.device)
        self.pos = torch.zeros(1, dtype=torch.long, device=self.device)
        self.graph = None

    def _rope(self, x: Any, cos: Any, sin: Any) -> Any:
        """x (B, 1, h, hd) -> rotated adjacent pairs (x[2i], x[2i+1]), in float32, back to x's dtype."""
        import torch

        xf = x.float().unflatten(-1, (-1, 2))  # (B, 1, h, hd/2, 2)
        x0, x1 = xf[..., 0], xf[..., 1]
        out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
        return out.flatten(-2).to(x.dtype)

    def step(self) -> Any:
        """One decode step of ``self.tokens`` at ``self.pos``: writes the KV caches, returns the
        argmax next tokens (B,) int64 and feeds them (and pos + 1) back into the static inputs."""
        import torch
        import torch.nn.functional as F

        c, B = self.c, self.B
        hd, H, KV = c.head_dim, c.n_head, c.n_kv_head
        x = F.embedding(self.tokens, self.embd)[:, None, :]  # (B, 1, dim)
        cos = self.cos.index_select(0, self.pos)[:, None, :]  # (1, 1, hd/2): broadcast over (B, 1, h, hd/2)
        sin = self.sin.index_select(0, self.pos)[:, None, :]
        mask = (self.positions <= self.pos)[None, None, None, :]  # (1, 1, 1, S)
        for i, L in enumerate(self.layers):
            h = F.rms_norm(x, (c.dim,), L["attn_norm"], c.rms_eps)
            q, k, v = (h @ L["wqkv"].T).split([H * hd, KV * hd, KV * hd], dim=-1)
            q = self._rope(q.view(B, 1, H, hd), cos, sin).transpose(1, 2)  # (B, H, 1, hd)
            k = self._rope(k.view(B, 1, KV, hd), cos, sin).transpose(1, 2)  # (B, KV, 1, hd)
            v = v.view(B, 1, KV, hd).transpose(1, 2)
            self.k_cache[i].index_copy_(2, self.pos, k)
            self.v_cache[i].index_copy_(2, self.pos, v)
            a = F.scaled_dot_product_attention(q, self.k_cache[i], self.v_cache[i], attn_mask=mask,
                                               enable_gqa=True)  # (B, H, 1, hd)
            x = x + a.transpose(1, 2).reshape(B, 1, H * hd) @ L["wo"].T
            h = F.rms_norm(x, (c.dim,), L["ffn_norm"], c.rms_eps)
            gate, up = (h @ L["w13"].T).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ L["w2"].T
        logits = F.rms_norm(x, (c.dim,), self.out_norm, c.rms_eps)[:, 0] @ self.embd.T  # (B, V)
        nxt = logits.argmax(dim=-1)
        self.tokens.copy_(nxt)
        self.pos.add_(1)
        return nxt

    def capture(self, warmup: int = 3) -> None:
        """Capture ``step`` into a CUDA graph (after ``warmup`` eager steps on a side stream)."""
        import torch

        s = torch.cuda.Stream(self.device)
        s.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(s):
            for _ in range(warmup):
                self.step()
        torch.cuda.current_stream(self.device).wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.step()
        self.pos.zero_()

    def time_steps(self, steps: int) -> float:
        """Seconds per step over ``steps`` steps from position 0 (graph replays when captured),
        measured after the device is synchronized."""
        import torch

        cuda = self.device.type == "cuda"
        self.pos.zero_()
        if cuda:
            torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        for _ in range(steps):
            if self.graph is not None:
                self.graph.replay()
            else:
                self.step()
        if cuda:
            torch.cuda.synchronize(self.device)
        return (time.perf_counter() - t0) / steps


def measure(config: Any, batch: int, device: str = "cuda", *, steps: int = 100, repeats: int = 5,
            graph: bool | None = None, dtype: Any = None, weights: TorchDecoder | None = None) -> dict[str, float]:
    """Milliseconds per decode step of ``TorchDecoder`` at ``batch``: median and min-max of
    ``repeats`` windows of ``steps`` steps (positions 0..steps-1), after warm-up.

    Args:
        graph: capture a CUDA graph (default: on cuda).
        weights: a decoder whose weights to share (see ``TorchDecoder``).

    Raises:
        ValueError: ``steps`` > the KV cache's 1024 positions.
    """
    import torch

    if steps >= MAX_SEQ:
        raise ValueError(f"steps must be < {MAX_SEQ} (the static KV cache), got {steps}")
    with torch.inference_mode():
        dec = TorchDecoder(config, batch, device, dtype=dtype, weights=weights)
        if graph if graph is not None else dec.device.type == "cuda":
            dec.capture()
        dec.time_steps(min(steps, 10))  # warm-up
        ms = [1e3 * dec.time_steps(steps) for _ in range(repeats)]
        del dec
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    med = float(np.median(ms))
    return dict(batch=batch, torch_ms=med, torch_ms_min=float(min(ms)), torch_ms_max=float(max(ms)),
                torch_tok_per_s=batch * 1e3 / med)


def compare(config: Any, ours: Sequence[dict[str, Any]] = (), batches: Sequence[int] = (1, 8, 64),
            device: str = "cuda", *, steps: int = 100, repeats: int = 5) -> dict[str, Any]:
    """Run the PyTorch step at each batch and set it against our rows.

    Args:
        config: the model's ``LlamaConfig``.
        ours: rows of ``bench model`` (keys ``slots``, ``step_ms_p50``, optional
            ``steady_step_ms``): ours at batch B is the row with B slots, if any, at its steady
            step time (all B requests decoding: the like of a batch-B step) where it has one.
        batches: PyTorch batch sizes.
        device: where PyTorch runs.

    Returns:
        ``{"available": False, "reason": ...}`` when torch or CUDA is missing (nothing runs), else
        ``{"available": True, "torch": version, "graph": bool, "rows": [...]}``, each row with
        ``torch_ms``, ``torch_tok_per_s``, ``ours_ms``, ``ours_tok_per_s`` and ``speedup``
        (torch ms / our ms: > 1 means we are faster).
    """
    reason = unavailable(device)
    if reason is not None:
        return dict(available=False, reason=reason)
    import torch

    by_slots = {r["slots"]: r for r in ours}
    rows = []
    with torch.inference_mode():
        weights = TorchDecoder(config, 1, device, max_seq=1)
    for b in batches:
        row = measure(config, b, device, steps=steps, repeats=repeats, weights=weights)
        mine = by_slots.get(b)
        if mine is not None:
            ms = mine.get("steady_step_ms") or mine["step_ms_p50"]
            row.update(ours_ms=ms, ours_tok_per_s=b * 1e3 / ms, speedup=row["torch_ms"] / ms)
        rows.append(row)
    return dict(available=True, torch=torch.__version__, device=device, graph=device.startswith("cuda"),
                max_seq=MAX_SEQ, steps=steps, repeats=repeats, rows=rows)


COLUMNS = [("batch", "batch", "d"), ("torch ms", "torch_ms", ".3f"), ("min", "torch_ms_min", ".3f"),
           ("max", "torch_ms_max", ".3f"), ("torch tok/s", "torch_tok_per_s", ".0f"), ("ours ms", "ours_ms", ".3f"),
           ("ours tok/s", "ours_tok_per_s", ".0f"), ("torch/ours", "speedup", ".2f")]


def render(result: dict[str, Any]) -> str:
    """The comparison as text (or the reason it did not run)."""
    if not result.get("available"):
        return f"--compare torch skipped: {result.get('reason')}"
    how = "CUDA graph replay" if result["graph"] else "eager"
    head = (f"PyTorch {result['torch']} reference decode step ({how}, bf16, static KV cache of {result['max_seq']}), "
            f"median of {result['repeats']} x {result['steps']} steps; torch/ours > 1: ours is faster")
    return head + "\n" + render_table(COLUMNS, result["rows"])
