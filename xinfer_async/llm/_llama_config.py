"""What a GGUF file must hold to run as a decoder of a supported family: hyperparameters, tensors, tokenizer keys, finite weights.

``validate_model`` checks a parsed file (``_gguf_reader.GGUFFile``) whole, before any weight reaches a
device: every hyperparameter of the GGUF type and range the model needs (llama.cpp ``src/models/*.cpp``), every tensor present with the type and shape the hyperparameters give and no
tensor left over (llama.cpp fails on unused tensors too), the tokenizer keys consistent with the
vocabulary, and the weights finite (NaN/inf in a float tensor or in a quantized block's scale would
poison every logit). Each failure is a ``GGUFError`` naming the key or tensor and the value.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import numpy as np

from ..hal._errors import GGUFError
from ._arch import Architecture, architecture
from ._support import SUPPORTED_ARCHITECTURES, SUPPORTED_TYPES

__all__ = ["ModelConfig", "LlamaConfig", "SUPPORTED_ARCHITECTURES", "SUPPORTED_TYPES", "model_tensor_shapes",
           "llama_tensor_shapes", "validate_model", "validate_llama"]

INT32_MAX = 2**31 - 1  # sizes become int32 kernel constants
_INTS = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64")
_FLOATS = ("float32", "float64")
# bytes per block and the uint16 words of each block that are f16 scales (d; q4_1 also m)
_SCALES = {"Q8_0": (34, (0,)), "Q4_0": (18, (0,)), "Q4_1": (20, (0, 1)), "Q5_0": (22, (0,)), "Q5_1": (24, (0, 1)),
           "IQ4_NL": (18, (0,)), "Q2_K": (84, (40, 41)), "Q3_K": (110, (54,)), "Q4_K": (144, (0, 1)),
           "Q5_K": (176, (0, 1)), "Q6_K": (210, (104,)), "IQ4_XS": (136, (0,))}
_TOKEN_ID_KEYS = ("bos", "eos", "unknown", "separator", "padding", "eot", "eom")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Hyperparameters of a decoder of one of the families of ``_arch.ARCHITECTURES``, read from the
    GGUF ``{arch}.*`` metadata (``llama.*`` for a Llama).

    Attributes:
        n_layer: number of transformer blocks (``{arch}.block_count``, required).
        dim: model (embedding) width (``{arch}.embedding_length``, required).
        n_head: query heads (``{arch}.attention.head_count``, required).
        n_kv_head: key/value heads, GQA when < n_head (``{arch}.attention.head_count_kv``;
            default ``n_head``, i.e. plain multi-head attention).
        head_dim: width of one head (``{arch}.attention.key_length``, default ``dim // n_head``;
            ``value_length`` and ``rope.dimension_count`` must agree when present). Gemma 3 270M: 256
            with dim 640 and 4 heads, so the query width ``n_head * head_dim`` need not be ``dim``.
        ffn_dim: hidden width of the gated feed-forward (``{arch}.feed_forward_length``, required).
        vocab_size: vocabulary size (``{arch}.vocab_size``; default: number of tokenizer tokens).
        rope_theta: RoPE base frequency (``{arch}.rope.freq_base``; default 10000.0, the value of
            the original Llama); of the global layers when the model has local ones.
        rms_eps: RMSNorm epsilon (``{arch}.attention.layer_norm_rms_epsilon``; default 1e-5).
        context_length: trained context, tokens (``{arch}.context_length``; default 2048).
        tied_embeddings: True when the file has no ``output.weight`` and the output projection is
            ``token_embd.weight`` (default False, decided by the tensors present).
        arch: the family, a key of ``_arch.ARCHITECTURES`` (``general.architecture``).
        sliding_window: keys a local layer's query sees, itself included (``{arch}.attention.
            sliding_window``; 0: no local layers). Key ``j`` is visible from query ``i`` when
            ``0 <= i - j < sliding_window`` (llama.cpp ``is_masked_swa``, LLAMA_SWA_TYPE_STANDARD).
        swa_pattern: layer ``il`` is local when ``sliding_window > 0`` and ``il % swa_pattern <
            swa_pattern - 1`` (``{arch}.attention.sliding_window_pattern``, else the family's).
        rope_theta_swa: the rope base of local layers (``{arch}.rope.freq_base_swa``, else the family's).
        logit_softcap: ``c`` of the final ``c * tanh(logits / c)`` (``{arch}.final_logit_softcapping``;
            0: none).
        rope_freqs: the file has ``rope_freqs.weight`` (head_dim/2,): each rope pair's frequency divided
            by its factor (Llama 3.1+ rope scaling, written by llama.cpp's converter; families with
            ``Architecture.rope_freqs`` only).
    """

    n_layer: int
    dim: int
    n_head: int
    n_kv_head: int
    head_dim: int
    ffn_dim: int
    vocab_size: int
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    context_length: int = 2048
    tied_embeddings: bool = False
    arch: str = "llama"
    sliding_window: int = 0
    swa_pattern: int = 0
    rope_theta_swa: float = 10000.0
    logit_softcap: float = 0.0
    rope_freqs: bool = False

    @property
    def architecture(self) -> Architecture:
        """The family's declaration (``_arch.architecture(self.arch)``)."""
        return architecture(self.arch)

    @property
    def q_dim(self) -> int:
        """Query width, ``n_head * head_dim``."""
        return self.n_head * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Key (and value) width, ``n_kv_head * head_dim``."""
        return self.n_kv_head * self.head_dim

    def is_local(self, layer: int) -> bool:
        """Whether block ``layer`` attends through the sliding window."""
        return self.sliding_window > 0 and self.swa_pattern > 0 and layer % self.swa_pattern < self.swa_pattern - 1

    def layer_window(self, layer: int) -> int:
        """Keys block ``layer`` attends, at most (0: all of them)."""
        return self.sliding_window if self.is_local(layer) else 0

    def layer_rope_theta(self, layer: int) -> float:
        """The rope base of block ``layer``."""
        return self.rope_theta_swa if self.is_local(layer) else self.rope_theta


#: the earlier name of :class:`ModelConfig` (a Llama's hyperparameters are its special case)
LlamaConfig = ModelConfig


def model_tensor_shapes(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """GGUF tensor name -> numpy shape ((N, K) for a matrix of N rows of K) of a decoder of family
    ``c.arch`` (``Architecture.block_tensors``), in file order; no ``output.weight`` when
    ``c.tied_embeddings``."""
    out: dict[str, tuple[int, ...]] = {"token_embd.weight": (c.vocab_size, c.dim), "output_norm.weight": (c.dim,)}
    if not c.tied_embeddings:
        out["output.weight"] = (c.vocab_size, c.dim)
    if c.rope_freqs:
        out["rope_freqs.weight"] = (c.head_dim // 2,)
    block = c.architecture.block_tensors(c.q_dim, c.kv_dim, c.dim, c.ffn_dim, c.head_dim)
    for i in range(c.n_layer):
        out.update({f"blk.{i}.{k}": v for k, v in block.items()})
    return out


#: the earlier name of :func:`model_tensor_shapes`
llama_tensor_shapes = model_tensor_shapes


_REQUIRED = object()


class _Keys:
    """Typed, ranged reads of a file's metadata; messages name the file, the key and the value."""

    def __init__(self, f):
        self.path, self.meta, self.types = f.path, f.metadata, f.value_types

    def fail(self, msg: str) -> GGUFError:
        return GGUFError(f"{self.path}: {msg}")

    def _get(self, key: str, default: Any) -> Any:
        if key in self.meta:
            return self.meta[key]
        if default is _REQUIRED:
            raise self.fail(f"missing required metadata key {key!r}")
        if default is not None:
            warnings.warn(f"{self.path}: metadata key {key!r} missing, using default {default!r}", stacklevel=5)
        return default

    def _typed(self, key: str, allowed: tuple[str, ...], what: str) -> Any:
        t = self.types[key]
        if t not in allowed:
            v = self.meta[key]
            shown = f"{len(v)} elements" if t.startswith("array") else repr(v)
            raise self.fail(f"metadata key {key!r} must be {what}, got {t} {shown}")
        return self.meta[key]

    def int(self, key: str, default: Any = _REQUIRED, lo: int = 1, hi: int = INT32_MAX) -> Any:
        if key not in self.meta:
            return self._get(key, default)
        v = int(self._typed(key, _INTS, "an integer"))
        if not lo <= v <= hi:
            raise self.fail(f"metadata key {key!r} = {v} is out of range [{lo}, {hi}]")
        return v

    def positive_float(self, key: str, default: float) -> float:
        """A finite float > 0 that stays finite and > 0 in float32 (the kernels' constant type)."""
        if key not in self.meta:
            return self._get(key, default)
        v = float(self._typed(key, _FLOATS + _INTS, "a number"))
        with np.errstate(over="ignore", under="ignore"):
            v32 = float(np.float32(v))
        if not (math.isfinite(v32) and v32 > 0):
            raise self.fail(f"metadata key {key!r} = {v!r} must be finite and > 0 (in float32)")
        return v

    def string(self, key: str, default: Any = _REQUIRED) -> Any:
        if key not in self.meta:
            return self._get(key, default)
        return self._typed(key, ("string",), "a string")

    def bool(self, key: str) -> None:
        if key in self.meta:
            self._typed(key, ("bool",), "a bool")


def _hyperparameters(k: _Keys, names: set[str]) -> tuple[ModelConfig, list[str]]:
    arch_name = k.string("general.architecture")
    if arch_name not in SUPPORTED_ARCHITECTURES:
        raise k.fail(f"unsupported architecture {arch_name!r}; supported: {', '.join(SUPPORTED_ARCHITECTURES)}")
    arch = architecture(arch_name)
    p = arch_name + "."
    n_layer = k.int(p + "block_count")
    dim = k.int(p + "embedding_length")
    n_head = k.int(p + "attention.head_count")
    ffn_dim = k.int(p + "feed_forward_length")
    tokens = k.meta.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise k.fail("missing required metadata key 'tokenizer.ggml.tokens'")
    tokens = k._typed("tokenizer.ggml.tokens", ("array[string]",), "an array of strings")
    n_kv_head = k.int(p + "attention.head_count_kv", n_head)
    rope_theta = k.positive_float(p + "rope.freq_base", 10000.0)
    rms_eps = k.positive_float(p + "attention.layer_norm_rms_epsilon", 1e-5)
    context_length = k.int(p + "context_length", 2048)
    vocab_size = k.int(p + "vocab_size", None)
    rope_dim = k.int(p + "rope.dimension_count", None)
    key_length = k.int(p + "attention.key_length", None)
    value_length = k.int(p + "attention.value_length", None)

    if key_length is None and dim % n_head:
        raise k.fail(f"embedding_length {dim} is not divisible by head_count {n_head}")
    if n_head % n_kv_head:
        raise k.fail(f"head_count {n_head} is not divisible by head_count_kv {n_kv_head}")
    head_dim = dim // n_head if key_length is None else key_length
    if value_length is not None and value_length != head_dim:
        raise k.fail(f"attention.value_length {value_length} != head dim {head_dim} (not supported)")
    if head_dim % 2:
        source = (f"embedding_length {dim} / head_count {n_head}" if key_length is None
                  else f"{p}attention.key_length")
        raise k.fail(f"head dim {head_dim} ({source}) must be even for rope")
    if rope_dim is not None and rope_dim != head_dim:
        raise k.fail(f"rope.dimension_count {rope_dim} != head_dim {head_dim} (partial RoPE is not supported)")
    if n_head * head_dim > INT32_MAX:
        raise k.fail(f"head_count {n_head} * head dim {head_dim} is out of range")
    scaling = k.string(p + "rope.scaling.type", None)
    if scaling not in (None, "none"):
        raise k.fail(f"metadata key {p + 'rope.scaling.type'!r} = {scaling!r} is not supported (only 'none')")
    sliding_window = swa_pattern = 0
    rope_theta_swa = rope_theta
    if arch.swa_pattern:
        sliding_window = k.int(p + "attention.sliding_window", 0, lo=0)
        if sliding_window:
            # absent in Gemma 3 files: llama.cpp's built-in pattern for the family, no warning
            key = p + "attention.sliding_window_pattern"
            if key in k.meta and k.types[key].startswith("array"):
                raise k.fail(f"metadata key {key!r} as a per-layer array is not supported (an integer period is)")
            swa_pattern = k.int(key, None) or arch.swa_pattern
            if p + "rope.freq_base_swa" in k.meta:
                rope_theta_swa = k.positive_float(p + "rope.freq_base_swa", arch.rope_theta_swa)
            else:
                rope_theta_swa = arch.rope_theta_swa  # llama.cpp's built-in value for the family
    logit_softcap = 0.0
    if arch.logit_softcap and p + "final_logit_softcapping" in k.meta:
        v = float(k._typed(p + "final_logit_softcapping", _FLOATS + _INTS, "a number"))
        if not (math.isfinite(v) and v >= 0):
            raise k.fail(f"metadata key {p + 'final_logit_softcapping'!r} = {v!r} must be finite and >= 0")
        logit_softcap = v
    if vocab_size is None:
        vocab_size = len(tokens)
    if len(tokens) != vocab_size:
        raise k.fail(f"tokenizer has {len(tokens)} tokens but vocab_size is {vocab_size}")
    # the layer loops are bounded by the tensors present (themselves bounded by the file size), not by
    # a number in the file: a missing block tensor is then named by _check_tensors
    if n_layer > len(names):
        per_block = len(arch.block_tensors(1, 1, 1, 1, 1))
        raise k.fail(f"{p}block_count = {n_layer} but the file has only {len(names)} tensors ({per_block} per block)")
    if "token_embd.weight" not in names:
        raise k.fail("missing tensor 'token_embd.weight'")
    cfg = ModelConfig(n_layer=n_layer, dim=dim, n_head=n_head, n_kv_head=n_kv_head, head_dim=head_dim,
                      ffn_dim=ffn_dim, vocab_size=vocab_size, rope_theta=rope_theta, rms_eps=rms_eps,
                      context_length=context_length, tied_embeddings="output.weight" not in names,
                      arch=arch_name, sliding_window=sliding_window, swa_pattern=swa_pattern,
                      rope_theta_swa=rope_theta_swa if sliding_window else 10000.0, logit_softcap=logit_softcap,
                      rope_freqs=arch.rope_freqs and "rope_freqs.weight" in names)
    return cfg, tokens


def _non_finite(t) -> bool:
    """Whether a tensor's floats (or a quantized block's f16 scales) hold NaN or inf (strided views, no copy)."""
    if t.type_name == "F32":
        return not np.isfinite(t.data).all()
    words = t.data.reshape(-1).view("<u2")
    if t.type_name == "F16":
        return bool(((words & 0x7C00) == 0x7C00).any())
    if t.type_name == "BF16":
        return bool(((words & 0x7F80) == 0x7F80).any())
    block, scales = _SCALES[t.type_name]
    stride = block // 2
    return any(bool(((words[s::stride] & 0x7C00) == 0x7C00).any()) for s in scales)


def _check_tensors(k: _Keys, cfg: ModelConfig, tensors: dict) -> None:
    expected = model_tensor_shapes(cfg)
    for name, shape in expected.items():
        t = tensors.get(name)
        if t is None:
            raise k.fail(f"missing tensor {name!r}")
        if t.type_name not in SUPPORTED_TYPES:
            raise k.fail(f"tensor {name!r} has unsupported type {t.type_name}; supported: {', '.join(SUPPORTED_TYPES)}")
        if len(shape) == 1 and t.type_name not in ("F32", "F16"):
            raise k.fail(f"tensor {name!r} has type {t.type_name}, a norm or bias must be F32 or F16")
        if t.shape != shape:
            raise k.fail(f"tensor {name!r} has shape {t.shape}, expected {shape}")
    for name in tensors:
        if name not in expected:
            raise k.fail(f"unexpected tensor {name!r} (not part of a {cfg.arch} of block_count {cfg.n_layer})")
    for name in expected:
        if _non_finite(tensors[name]):
            raise k.fail(f"tensor {name!r} holds NaN or inf" + (
                "" if tensors[name].type_name in ("F32", "F16") else " in its block scales"))


def _check_tokenizer(k: _Keys, n_tokens: int) -> None:
    """Types, lengths and ids of the ``tokenizer.ggml.*`` keys (parsing merges is ``Tokenizer``'s)."""
    t = "tokenizer.ggml."
    k.string(t + "model", None)
    k.string(t + "pre", None)
    k.string("tokenizer.chat_template", None)
    for key, kinds in ((t + "token_type", tuple(f"array[{i}]" for i in _INTS)),
                       (t + "scores", tuple(f"array[{f}]" for f in _FLOATS)),
                       (t + "merges", ("array[string]",))):
        if key in k.meta:
            v = k._typed(key, kinds, "an " + ("array of strings" if "merges" in key else
                                              "array of " + ("integers" if "type" in key else "floats")))
            if "merges" not in key and len(v) != n_tokens:
                raise k.fail(f"metadata key {key!r} has {len(v)} entries for {n_tokens} tokens")
    for name in _TOKEN_ID_KEYS:
        k.int(f"{t}{name}_token_id", None, lo=0, hi=n_tokens - 1)
    k.bool(t + "add_bos_token")
    k.bool(t + "add_eos_token")
    k.bool(t + "add_space_prefix")


def validate_model(f) -> ModelConfig:
    """Check a parsed GGUF file whole as a decoder of one of ``_arch.ARCHITECTURES`` and return its
    hyperparameters.

    Args:
        f: a ``GGUFFile`` from ``_gguf_reader.read_gguf``.

    Returns:
        The :class:`ModelConfig`.

    Raises:
        GGUFError: ``general.architecture`` is missing or not a supported family; a required key is
            missing (``{arch}.block_count``, ``.embedding_length``, ``.attention.head_count``,
            ``.feed_forward_length``, ``tokenizer.ggml.tokens``); a key has the wrong GGUF type
            (a size given as a string, array or float, ...); a size is outside ``[1, 2**31 - 1]``;
            ``rope.freq_base`` or ``layer_norm_rms_epsilon`` is not finite and > 0 in float32;
            ``head_count % head_count_kv`` is not 0, ``embedding_length % head_count`` is not 0 without
            ``attention.key_length``, ``value_length`` differs from ``key_length``, the head dim is odd;
            ``rope.dimension_count`` is not the head dim; ``rope.scaling.type`` is set (not ``none``); the vocabulary size disagrees with
            the tokens; ``block_count`` asks for more blocks than the tensors hold; a tensor is missing,
            left over (the family's list: ``model_tensor_shapes``), of an unsupported type (norms and
            biases F32/F16 only)
            or of another shape; a weight (or a quantized block's scale) is NaN or inf;
            ``tokenizer.ggml.token_type``/``scores`` do not have one entry per token; a
            ``tokenizer.ggml.*_token_id`` is outside the vocabulary.

    Warns:
        UserWarning: an optional key is missing and its default is used (see :class:`ModelConfig`).
    """
    k = _Keys(f)
    tensors = {t.name: t for t in f.tensors}
    cfg, tokens = _hyperparameters(k, set(tensors))
    _check_tokenizer(k, len(tokens))
    _check_tensors(k, cfg, tensors)
    return cfg


#: the earlier name of :func:`validate_model`
validate_llama = validate_model
