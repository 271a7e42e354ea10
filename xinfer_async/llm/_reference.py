"""A plain numpy float32 forward pass of every family of ``_arch``: the independent reference for
kernel tests.

No KV cache, no batching, no cleverness: every call runs the whole sequence from position 0.
Follows llama.cpp's graphs (``src/models/{llama,qwen2,qwen3,gemma3,phi3}.cpp``) for a GGUF file,
switching on the family's declaration (``config.architecture``); optional steps in [...]:

- ``x = token_embd[ids]`` [``* sqrt(dim)``]
- per block: ``q, k, v = split(rmsnorm(x) * attn_norm @ Wqkv.T [+ bias])``, [per-head
  ``rmsnorm(q) * q_norm``, ``rmsnorm(k) * k_norm``], rope of q and k (the block's base), causal GQA
  attention scaled by ``1 / sqrt(head_dim)`` [keys within the sliding window], ``o = attn @ Wo.T``,
  ``h = x + o`` [``x + rmsnorm(o) * post_attention_norm``], ``f = down(act(gate(n)) * up(n))`` with
  ``n = rmsnorm(h) * ffn_norm``, ``x = h + f`` [``h + rmsnorm(f) * post_ffw_norm``]
- ``logits = (rmsnorm(x) * output_norm) @ output.T`` (``output`` = ``token_embd`` when tied) [softcap].

RoPE: "norm" families rotate adjacent pairs ``(2i, 2i+1)`` of each head, "neox" families the pairs
``(i, i + head_dim/2)``, both by ``pos * theta ** (-2i / head_dim)`` (divided by ``rope_freqs[i]``
when the file has that tensor: Llama 3 rope scaling). Query head ``h`` reads kv head
``h // (n_head // n_kv_head)``.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref

import numpy as np

from ._gguf import GGUFModel, ModelConfig

__all__ = ["ReferenceLlama", "reference_logits", "rmsnorm", "rope", "rope_neox", "rope_tables", "gelu_tanh",
           "quantize_q8_blocks"]

#: weight type -> the block of llama.cpp's activation quantization for its cpu dot product
_ACT_BLOCK = {"q8_0": 32, "q4_0": 32, "q4_1": 32, "q5_0": 32, "q5_1": 32, "q4_k": 256, "q5_k": 256, "q6_k": 256}


def quantize_q8_blocks(x: np.ndarray, block: int = 32) -> np.ndarray:
    """Round activations as llama.cpp's CPU matmul does before a quantized dot product.

    ggml converts the activation row to the weight type's ``vec_dot_type``: Q8_0 (Q8_0, Q4_0, Q5_0
    weights) or Q8_1 (Q4_1, Q5_1): blocks of 32 values share a scale ``d = max|x| / 127`` stored as
    float16; Q8_K (the K-quants): blocks of 256, ``d`` kept float32; each value becomes
    ``round(x / d)`` in int8. This returns the dequantized result.

    Args:
        x: float32 (..., K), K a multiple of ``block``.
        block: 32 (Q8_0 / Q8_1) or 256 (Q8_K).

    Returns:
        float32 (..., K).
    """
    b = x.reshape(-1, block).astype(np.float32)  # (blocks, block)
    amax = np.abs(b).max(axis=1, keepdims=True)
    d = amax / np.float32(127.0)
    safe = np.where(d > 0, d, np.float32(1.0))
    q = np.round(b / safe)
    if block == 32:
        d = d.astype(np.float16).astype(np.float32)
    return (q * d).reshape(x.shape).astype(np.float32)


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm (Zhang & Sennrich 2019): ``x / sqrt(mean(x**2, -1) + eps) * weight``.

    Args:
        x: float32 (..., dim).
        weight: float32 (dim,).
        eps: added to the mean square.

    Returns:
        float32 (..., dim).
    """
    ms = np.mean(np.square(x, dtype=np.float32), axis=-1, keepdims=True)
    return (x / np.sqrt(ms + np.float32(eps))).astype(np.float32) * weight


def rope_tables(positions: np.ndarray, head_dim: int, theta: float,
                freq_factors: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin tables for RoPE.

    Args:
        positions: int (T,) token positions.
        head_dim: even head width.
        theta: base frequency (``rope_theta``).
        freq_factors: float (head_dim // 2,) divisors of each pair's frequency (``rope_freqs.weight``,
            Llama 3 rope scaling; llama.cpp's ``freq_factors``), or None.

    Returns:
        (cos, sin), each float32 (T, head_dim // 2); column i is for pair i, at angle
        ``pos * theta ** (-2i / head_dim) / freq_factors[i]`` (computed in float64, then rounded).
    """
    i = np.arange(head_dim // 2, dtype=np.float64)
    freq = theta ** (-2.0 * i / head_dim)  # (head_dim/2,)
    if freq_factors is not None:
        freq = freq / np.asarray(freq_factors, dtype=np.float64)
    ang = np.asarray(positions, dtype=np.float64)[:, None] * freq[None, :]  # (T, head_dim/2)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate adjacent pairs (GGUF "normal" layout).

    Args:
        x: float32 (T, n_heads, head_dim).
        cos, sin: float32 (T, head_dim // 2) from :func:`rope_tables`.

    Returns:
        float32 (T, n_heads, head_dim): ``(x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos)`` for
        every pair ``(x[..., 2i], x[..., 2i+1])``.
    """
    x0 = x[..., 0::2]  # (T, H, hd/2)
    x1 = x[..., 1::2]
    c = cos[:, None, :]
    s = sin[:, None, :]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def rope_neox(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate the pairs ``(x[..., i], x[..., i + head_dim/2])`` (rotate_half, llama.cpp's NEOX rope).

    Args:
        x: float32 (T, n_heads, head_dim).
        cos, sin: float32 (T, head_dim // 2) from :func:`rope_tables`.

    Returns:
        float32 (T, n_heads, head_dim).
    """
    half = x.shape[-1] // 2
    x0, x1 = x[..., :half], x[..., half:]
    c = cos[:, None, :]
    s = sin[:, None, :]
    return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``; float32 in and out."""
    x = x.astype(np.float32, copy=False)
    c = np.float32(np.sqrt(2.0 / np.pi))
    return (np.float32(0.5) * x * (np.float32(1.0) + np.tanh(c * (x + np.float32(0.044715) * x * x * x)))).astype(np.float32)


@dataclasses.dataclass
class _Layer:
    attn_norm: np.ndarray  # (dim,)
    wq: np.ndarray  # (n_head * head_dim, dim)
    wk: np.ndarray  # (n_kv_head * head_dim, dim)
    wv: np.ndarray  # (n_kv_head * head_dim, dim)
    wo: np.ndarray  # (dim, n_head * head_dim)
    ffn_norm: np.ndarray  # (dim,)
    w_gate: np.ndarray  # (ffn_dim, dim)
    w_up: np.ndarray  # (ffn_dim, dim)
    w_down: np.ndarray  # (dim, ffn_dim)
    bq: np.ndarray | None = None  # (n_head * head_dim,), bk, bv (n_kv_head * head_dim,): qwen2
    bk: np.ndarray | None = None
    bv: np.ndarray | None = None
    q_norm: np.ndarray | None = None  # (head_dim,): qwen3, gemma3
    k_norm: np.ndarray | None = None
    post_attn_norm: np.ndarray | None = None  # (dim,): gemma3
    post_ffw_norm: np.ndarray | None = None


class ReferenceLlama:
    """Dequantized float32 weights of a GGUF decoder (any family of ``_arch``) and its forward pass.

    Dequantizing SmolLM2-135M takes about two seconds and ~550 MB of host memory.

    Args:
        model: from :func:`~xinfer_async.llm._gguf.load_gguf`.
        quantize_activations: round the input of every matmul with a quantized weight first, as
            llama.cpp's CPU backend does for that weight's type (:func:`quantize_q8_blocks`: Q8_0 /
            Q8_1 blocks of 32 with an f16 scale, Q8_K blocks of 256 for the K-quants). Off by
            default: the plain float32 reference. On, it tracks llama.cpp's greedy choices more
            closely where the top-1 margin is small.

    Attributes:
        config: the model's :class:`ModelConfig`.
    """

    def __init__(self, model: GGUFModel, quantize_activations: bool = False):
        cfg = model.config
        arch = cfg.architecture
        t = model.tensors
        self.config: ModelConfig = cfg
        self.quantize_activations = bool(quantize_activations)
        self.token_embd = t["token_embd.weight"].dequantize()  # (vocab, dim)
        self.output_norm = t["output_norm.weight"].dequantize()  # (dim,)
        self.output = self.token_embd if cfg.tied_embeddings else t["output.weight"].dequantize()
        #: id of a dequantized matrix -> the block its activations are rounded to (quantize_activations)
        self._act_block: dict[int, int] = {}
        self._note(self.output, t["token_embd.weight" if cfg.tied_embeddings else "output.weight"].dtype)
        self.rope_freqs = t["rope_freqs.weight"].dequantize() if cfg.rope_freqs else None  # (head_dim/2,)
        self.layers: list[_Layer] = []
        q, kv, ffn = cfg.q_dim, cfg.kv_dim, cfg.ffn_dim
        opt = lambda name: t[name].dequantize() if name in t else None  # noqa: E731
        for i in range(cfg.n_layer):
            b = f"blk.{i}."
            if arch.fused_qkv:
                wqkv = t[b + "attn_qkv.weight"].dequantize()
                wq, wk, wv = wqkv[:q], wqkv[q:q + kv], wqkv[q + kv:]
            else:
                wq, wk, wv = (t[b + f"attn_{n}.weight"].dequantize() for n in "qkv")
            if arch.fused_gate_up:
                wgu = t[b + "ffn_up.weight"].dequantize()
                w_gate, w_up = wgu[:ffn], wgu[ffn:]
            else:
                w_gate, w_up = t[b + "ffn_gate.weight"].dequantize(), t[b + "ffn_up.weight"].dequantize()
            for w, n in ((wq, "attn_qkv" if arch.fused_qkv else "attn_q"), (wk, "attn_qkv" if arch.fused_qkv else "attn_k"),
                         (wv, "attn_qkv" if arch.fused_qkv else "attn_v"),
                         (w_gate, "ffn_up" if arch.fused_gate_up else "ffn_gate"), (w_up, "ffn_up")):
                self._note(w, t[b + n + ".weight"].dtype)
            self.layers.append(_Layer(
                attn_norm=t[b + "attn_norm.weight"].dequantize(), wq=wq, wk=wk, wv=wv,
                wo=t[b + "attn_output.weight"].dequantize(), ffn_norm=t[b + "ffn_norm.weight"].dequantize(),
                w_gate=w_gate, w_up=w_up, w_down=t[b + "ffn_down.weight"].dequantize(),
                bq=opt(b + "attn_q.bias"), bk=opt(b + "attn_k.bias"), bv=opt(b + "attn_v.bias"),
                q_norm=opt(b + "attn_q_norm.weight"), k_norm=opt(b + "attn_k_norm.weight"),
                post_attn_norm=opt(b + "post_attention_norm.weight"), post_ffw_norm=opt(b + "post_ffw_norm.weight"),
            ))
            self._note(self.layers[-1].wo, t[b + "attn_output.weight"].dtype)
            self._note(self.layers[-1].w_down, t[b + "ffn_down.weight"].dtype)

    def _note(self, w: np.ndarray, dtype: str) -> None:
        if self.quantize_activations and dtype in _ACT_BLOCK:
            self._act_block[id(w)] = _ACT_BLOCK[dtype]

    def _mm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        """x (T, K) @ w (N, K).T -> (T, N), activations rounded as llama.cpp's cpu does for w's
        type when asked (``quantize_activations``)."""
        block = self._act_block.get(id(w))
        if block:
            x = quantize_q8_blocks(x, block)
        return x @ w.T

    def _attention(self, x: np.ndarray, layer: _Layer, il: int) -> np.ndarray:
        cfg = self.config
        T = x.shape[0]
        hd, H, KV = cfg.head_dim, cfg.n_head, cfg.n_kv_head
        q = self._mm(x, layer.wq)  # (T, H*hd)
        k = self._mm(x, layer.wk)  # (T, KV*hd)
        v = self._mm(x, layer.wv)  # (T, KV*hd)
        if layer.bq is not None:
            q, k, v = q + layer.bq, k + layer.bk, v + layer.bv
        q, k, v = q.reshape(T, H, hd), k.reshape(T, KV, hd), v.reshape(T, KV, hd)
        if layer.q_norm is not None:  # per-head RMSNorm before rope
            q = rmsnorm(q, layer.q_norm, cfg.rms_eps)
            k = rmsnorm(k, layer.k_norm, cfg.rms_eps)
        cos, sin = rope_tables(np.arange(T), hd, cfg.layer_rope_theta(il), self.rope_freqs)
        rot = rope_neox if cfg.architecture.rope == "neox" else rope
        q = rot(q, cos, sin)
        k = rot(k, cos, sin)
        group = H // KV
        q = q.transpose(1, 0, 2).reshape(KV, group * T, hd)  # (KV, group*T, hd), head h = kv*group + g
        kt = k.transpose(1, 2, 0)  # (KV, hd, T)
        scores = (q @ kt).reshape(KV, group, T, T) * np.float32(1.0 / np.sqrt(hd))  # (KV, g, Tq, Tk)
        diff = np.arange(T)[:, None] - np.arange(T)[None, :]  # query pos - key pos
        mask = diff < 0
        window = cfg.layer_window(il)
        if window:
            mask |= diff >= window  # llama.cpp is_masked_swa: p1 - p0 >= n_swa
        scores[..., mask] = -np.inf
        scores -= scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=-1, keepdims=True)
        o = p.reshape(KV, group * T, T) @ v.transpose(1, 0, 2)  # (KV, group*T, hd)
        o = o.reshape(H, T, hd).transpose(1, 0, 2).reshape(T, H * hd)  # (T, H*hd)
        return self._mm(o, layer.wo)  # (T, dim)

    def hidden(self, token_ids) -> np.ndarray:
        """Final hidden states (after ``output_norm``).

        Args:
            token_ids: int sequence (T,), T >= 1, each in ``[0, vocab_size)``.

        Returns:
            float32 (T, dim).

        Raises:
            ValueError: empty sequence, not 1-D, or an id out of range.
        """
        cfg = self.config
        ids = np.asarray(token_ids)
        if ids.ndim != 1 or ids.size == 0:
            raise ValueError(f"token_ids must be a non-empty 1-D sequence, got shape {ids.shape}")
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"token_ids must be integers, got dtype {ids.dtype}")
        if ids.min() < 0 or ids.max() >= cfg.vocab_size:
            bad = int(ids[(ids < 0) | (ids >= cfg.vocab_size)][0])
            raise ValueError(f"token id {bad} outside [0, {cfg.vocab_size})")
        arch = cfg.architecture
        x = self.token_embd[ids]  # (T, dim)
        if arch.embed_scale_sqrt_dim:
            x = x * np.float32(np.sqrt(cfg.dim))
        act = gelu_tanh if arch.activation == "gelu_tanh" else (lambda g: g / (np.float32(1.0) + np.exp(-g)))
        for il, layer in enumerate(self.layers):
            o = self._attention(rmsnorm(x, layer.attn_norm, cfg.rms_eps), layer, il)
            if layer.post_attn_norm is not None:
                o = rmsnorm(o, layer.post_attn_norm, cfg.rms_eps)
            h = x + o
            n = rmsnorm(h, layer.ffn_norm, cfg.rms_eps)
            g = self._mm(n, layer.w_gate)  # (T, ffn)
            u = self._mm(n, layer.w_up)  # (T, ffn)
            f = self._mm(act(g) * u, layer.w_down)  # (T, dim)
            if layer.post_ffw_norm is not None:
                f = rmsnorm(f, layer.post_ffw_norm, cfg.rms_eps)
            x = h + f
        return rmsnorm(x, self.output_norm, cfg.rms_eps)

    def logits(self, token_ids) -> np.ndarray:
        """Logits for every position (teacher forcing).

        Args:
            token_ids: int sequence (T,).

        Returns:
            float32 (T, vocab_size); row t is the distribution of token t+1.

        Raises:
            ValueError: see :meth:`hidden`.
        """
        out = self._mm(self.hidden(token_ids), self.output).astype(np.float32, copy=False)
        cap = self.config.logit_softcap
        if cap > 0:
            out = (np.float32(cap) * np.tanh(out / np.float32(cap))).astype(np.float32)
        return out

    __call__ = logits


_cache: dict[int, tuple[weakref.ref, ReferenceLlama]] = {}
_cache_lock = threading.Lock()


def _reference_for(model: GGUFModel) -> ReferenceLlama:
    with _cache_lock:
        hit = _cache.get(id(model))
        if hit is not None and hit[0]() is model:
            return hit[1]
        for key in [k for k, (ref, _) in _cache.items() if ref() is None]:
            del _cache[key]
    ref = ReferenceLlama(model)
    with _cache_lock:
        _cache.clear()  # one model at a time: the weights are large
        _cache[id(model)] = (weakref.ref(model), ref)
    return ref


def reference_logits(model: GGUFModel, token_ids) -> np.ndarray:
    """Reference logits of ``model`` for ``token_ids`` (weights dequantized once, then cached).

    Args:
        model: from :func:`~xinfer_async.llm._gguf.load_gguf`.
        token_ids: int sequence (T,), T >= 1.

    Returns:
        float32 (T, vocab_size); row t scores the token at position t+1.

    Raises:
        ValueError: empty ``token_ids`` or an id outside the vocabulary.
    """
    return _reference_for(model).logits(token_ids)
