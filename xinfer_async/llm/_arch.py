"""The decoder families, as data: one ``Architecture`` a family over the shared blocks.

Every family here is a pre-norm decoder (``x += attention(norm(x)); x += ffn(norm(x))``); what differs
is declared, not coded: the builder (``_llama.py``), the numpy reference (``_reference.py``), the file
check (``_llama_config.py``) and the synthetic writer (``_synthetic.py``) all read these fields.
Sources: llama.cpp ``src/models/{llama,qwen2,qwen3,gemma3,phi3}.cpp`` and ``llama_model_rope_type``
(commit 0c1e570), gguf-py ``constants.py`` for the tensor and key names.

Adding a family: one ``_family(...)`` below (and, if it needs a block not listed, that block in the
four readers).
"""

from __future__ import annotations

import dataclasses

__all__ = ["Architecture", "ARCHITECTURES", "architecture"]


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What one GGUF ``general.architecture`` computes, beyond the shared pre-norm decoder.

    Attributes:
        name: the ``general.architecture`` value; metadata keys are ``{name}.block_count`` etc.
        rope: ``"norm"``: rotate adjacent pairs ``(2i, 2i+1)`` of a head (llama: the converter permuted
            q/k rows into that layout); ``"neox"``: rotate ``(i, i + head_dim/2)`` (HF's rotate_half).
        qkv_bias: ``attn_q.bias``, ``attn_k.bias``, ``attn_v.bias`` added after the projections.
        qk_norm: per-head RMSNorm of q and k (``attn_q_norm``, ``attn_k_norm``, (head_dim,)) before rope.
        post_norms: RMSNorm of the attention output (``post_attention_norm``) and of the FFN output
            (``post_ffw_norm``) before each residual add.
        activation: the gated FFN's ``act(gate) * up``: ``"silu"`` (SwiGLU) or ``"gelu_tanh"`` (GeGLU
            with the tanh approximation, ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``).
        fused_qkv: one ``attn_qkv`` tensor ((q_dim + 2 kv_dim), dim) instead of q, k, v.
        fused_gate_up: ``ffn_up`` holds gate rows then up rows ((2 ffn_dim), dim); no ``ffn_gate``.
        embed_scale_sqrt_dim: embeddings multiplied by ``sqrt(dim)`` (in float32, after the lookup).
        swa_pattern: when the file has ``{name}.attention.sliding_window`` > 0: layer ``il`` is local
            (sliding window) when ``il % swa_pattern < swa_pattern - 1`` (llama.cpp ``set_swa_pattern``);
            0: the family has no sliding window (the key, if present, is ignored, as llama.cpp does).
        rope_theta_swa: the rope base of local layers when ``{name}.rope.freq_base_swa`` is absent.
        rope_freqs: a ``rope_freqs.weight`` (head_dim/2,) tensor may divide each pair's frequency
            (Llama 3 rope scaling, written by the converter).
        logit_softcap: ``{name}.final_logit_softcapping`` is read (``c * tanh(logits / c)`` when > 0).
    """

    name: str
    rope: str = "norm"
    qkv_bias: bool = False
    qk_norm: bool = False
    post_norms: bool = False
    activation: str = "silu"
    fused_qkv: bool = False
    fused_gate_up: bool = False
    embed_scale_sqrt_dim: bool = False
    swa_pattern: int = 0
    rope_theta_swa: float = 10000.0
    rope_freqs: bool = False
    logit_softcap: bool = False

    def __post_init__(self):
        if self.rope not in ("norm", "neox"):
            raise ValueError(f"rope must be 'norm' or 'neox', got {self.rope!r}")
        if self.activation not in ("silu", "gelu_tanh"):
            raise ValueError(f"activation must be 'silu' or 'gelu_tanh', got {self.activation!r}")

    def block_tensors(self, q_dim: int, kv_dim: int, dim: int, ffn_dim: int, head_dim: int) -> dict[str, tuple[int, ...]]:
        """Tensor suffix (after ``blk.N.``) -> numpy shape of one block, in file order."""
        out: dict[str, tuple[int, ...]] = {"attn_norm.weight": (dim,)}
        if self.fused_qkv:
            out["attn_qkv.weight"] = (q_dim + 2 * kv_dim, dim)
        else:
            out.update({"attn_q.weight": (q_dim, dim), "attn_k.weight": (kv_dim, dim), "attn_v.weight": (kv_dim, dim)})
        if self.qkv_bias:
            out.update({"attn_q.bias": (q_dim,), "attn_k.bias": (kv_dim,), "attn_v.bias": (kv_dim,)})
        if self.qk_norm:
            out.update({"attn_q_norm.weight": (head_dim,), "attn_k_norm.weight": (head_dim,)})
        out["attn_output.weight"] = (dim, q_dim)
        if self.post_norms:
            out["post_attention_norm.weight"] = (dim,)
        out["ffn_norm.weight"] = (dim,)
        if self.fused_gate_up:
            out["ffn_up.weight"] = (2 * ffn_dim, dim)
        else:
            out.update({"ffn_gate.weight": (ffn_dim, dim), "ffn_up.weight": (ffn_dim, dim)})
        out["ffn_down.weight"] = (dim, ffn_dim)
        if self.post_norms:
            out["post_ffw_norm.weight"] = (dim,)
        return out


ARCHITECTURES: dict[str, Architecture] = {}


def _family(**fields) -> None:
    a = Architecture(**fields)
    ARCHITECTURES[a.name] = a


# Llama 2/3, Mistral, SmolLM: the plain pre-norm SwiGLU decoder; Llama 3.1+ rope scaling as rope_freqs
_family(name="llama", rope_freqs=True)
# Qwen 2 / 2.5: biases on q, k, v; rotate_half rope
_family(name="qwen2", rope="neox", qkv_bias=True)
# Qwen 3 (dense): per-head q/k RMSNorm before rope, no biases
_family(name="qwen3", rope="neox", qk_norm=True)
# Gemma 3: sqrt(dim)-scaled embeddings, q/k norm, post-attention and post-FFN norms, GeGLU, 5 local
# (sliding-window, rope base 10000) layers then a global one; the GGUF's norms already hold the +1
_family(name="gemma3", rope="neox", qk_norm=True, post_norms=True, activation="gelu_tanh",
        embed_scale_sqrt_dim=True, swa_pattern=6, rope_theta_swa=10000.0, logit_softcap=True)
# Phi-3: fused qkv and gate/up projections; llama.cpp disables its sliding window (the key is ignored)
_family(name="phi3", rope="neox", fused_qkv=True, fused_gate_up=True)


def architecture(name: str) -> Architecture:
    """The declaration of family ``name``.

    Raises:
        ValueError: an unknown family (the message lists the known ones).
    """
    try:
        return ARCHITECTURES[name]
    except KeyError:
        raise ValueError(f"unknown architecture {name!r}; supported: {', '.join(ARCHITECTURES)}") from None
