"""GGUF loading for Llama-architecture models.

The file format is the GGUF v2/v3 container of ggml (spec:
https://github.com/ggml-org/ggml/blob/master/docs/gguf.md). Parsing is done by the ``gguf``
package (``gguf.GGUFReader``), which memory-maps the file: tensor data is never copied until
``GGUFTensor.dequantize()`` is called. Everything that can be wrong with a file (missing, not GGUF,
truncated, unknown tensor type, missing or inconsistent hyperparameters) becomes a
:class:`~xinfer_async.hal._errors.GGUFError` with a message naming the culprit.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ..hal._errors import GGUFError
from ._support import SUPPORTED_ARCHITECTURES, SUPPORTED_TYPES, check_supported

__all__ = ["GGUFModel", "GGUFTensor", "LlamaConfig", "load_gguf", "SUPPORTED_ARCHITECTURES"]

GGUF_MAGIC = b"GGUF"


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Hyperparameters of a Llama-architecture decoder, read from GGUF ``llama.*`` metadata.

    Attributes:
        n_layer: number of transformer blocks (``llama.block_count``, required).
        dim: model (embedding) width (``llama.embedding_length``, required).
        n_head: query heads (``llama.attention.head_count``, required).
        n_kv_head: key/value heads, GQA when < n_head (``llama.attention.head_count_kv``;
            default ``n_head``, i.e. plain multi-head attention).
        head_dim: width of one head, ``dim // n_head`` (``llama.rope.dimension_count`` must agree
            when present).
        ffn_dim: hidden width of the SwiGLU feed-forward (``llama.feed_forward_length``, required).
        vocab_size: vocabulary size (``llama.vocab_size``; default: number of tokenizer tokens,
            else the rows of ``token_embd.weight``).
        rope_theta: RoPE base frequency (``llama.rope.freq_base``; default 10000.0, the value of
            the original Llama).
        rms_eps: RMSNorm epsilon (``llama.attention.layer_norm_rms_epsilon``; default 1e-5).
        context_length: trained context, tokens (``llama.context_length``; default 2048).
        tied_embeddings: True when the file has no ``output.weight`` and the output projection is
            ``token_embd.weight`` (default False, decided by the tensors present).
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


@dataclasses.dataclass(frozen=True, eq=False)  # identity equality: data is a large array
class GGUFTensor:
    """One tensor of a GGUF file, still in its on-disk encoding.

    Attributes:
        name: GGUF tensor name, e.g. ``"blk.0.attn_q.weight"``.
        dtype: a label of ``_support.SUPPORTED_TYPES`` (``'f32'``, ``'f16'``, ``'bf16'``, ``'q8_0'``,
            ``'q4_0'``, ``'q4_1'``, ``'q5_0'``, ``'q5_1'``, ``'q2_k'`` ... ``'q6_k'``, ``'iq4_nl'``,
            ``'iq4_xs'``).
        shape: logical shape in numpy (row-major) order: ``(N, K)`` for a matrix of N rows of K
            elements (GGUF stores ``ne = [K, N]``), ``(n,)`` for a vector.
        data: the raw memory-mapped array (not a copy): float32/float16 of ``shape`` for float
            tensors, uint8 of ``(N, bytes_per_row)`` for quantized ones.
        nbytes: size of ``data`` in bytes.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    data: np.ndarray
    nbytes: int
    _qtype: Any = dataclasses.field(repr=False, compare=False, default=None)

    def dequantize(self) -> np.ndarray:
        """Decode the tensor to float32.

        Returns:
            float32 ndarray of ``self.shape`` (a fresh array; the file is not modified).
        """
        import gguf

        out = gguf.quants.dequantize(np.asarray(self.data), self._qtype)
        return np.ascontiguousarray(out, dtype=np.float32).reshape(self.shape)


@dataclasses.dataclass(frozen=True, eq=False)  # identity equality and hash
class GGUFModel:
    """A parsed GGUF file.

    Attributes:
        path: the file.
        config: the Llama hyperparameters.
        tensors: name -> :class:`GGUFTensor`, in file order.
        metadata: key -> plain Python value (str, int, float, bool, list), e.g.
            ``metadata["tokenizer.ggml.tokens"]`` is a ``list[str]``.
    """

    path: Path
    config: LlamaConfig
    tensors: dict[str, GGUFTensor]
    metadata: dict[str, Any]


def _field_value(field) -> Any:
    """Plain Python value of a ``gguf.ReaderField`` (strings decoded, arrays as lists)."""
    from gguf import GGUFValueType

    types = field.types
    if not types:
        return None
    if types[0] == GGUFValueType.ARRAY:
        sub = types[-1]
        if sub == GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]
        if sub == GGUFValueType.ARRAY:  # nested arrays: rare, not used by Llama files
            return field.contents()
        # numeric arrays: one numpy part per element; pull them out in one go
        if not field.data:
            return []
        vals = np.concatenate([field.parts[i] for i in field.data])
        return vals.tolist()
    if types[0] == GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8", errors="replace")
    val = field.parts[field.data[0]]
    return val.tolist()[0] if hasattr(val, "tolist") else val


def _check_tensor_extents(path: Path, reader, file_size: int) -> None:
    """Raise GGUFError naming the first tensor whose data runs past the end of the file."""
    for t in reader.tensors:
        end = int(t.data_offset) + int(t.n_bytes)
        if end > file_size:
            raise GGUFError(
                f"{path}: truncated file: tensor {t.name!r} needs bytes [{int(t.data_offset)}, {end})"
                f" but the file has {file_size} bytes"
            )


def _diagnose(path: Path, file_size: int) -> str | None:
    """Walk the GGUF header ourselves to explain why ``GGUFReader`` failed.

    Used only after ``GGUFReader`` raised. Returns a message for an unknown tensor type or for the
    first tensor whose data does not fit in the file (or for a header cut short), or None when the
    header is unreadable for another reason.
    Layout per the GGUF spec: magic, u32 version, u64 n_tensors, u64 n_kv, kv pairs, tensor infos
    (name, u32 n_dims, u64 dims[n_dims], u32 type, u64 offset), padding to ``general.alignment``.
    """
    import struct

    import gguf

    try:
        with open(path, "rb") as f:
            buf = f.read()
        off = 8
        n_tensors, n_kv = struct.unpack_from("<QQ", buf, off)
        off += 16
        scalar = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
        alignment = 32

        def read_str(o):
            (n,) = struct.unpack_from("<Q", buf, o)
            if o + 8 + n > len(buf):
                raise struct.error("string past end of file")
            return buf[o + 8 : o + 8 + n].decode("utf-8", errors="replace"), o + 8 + n

        def skip_value(o, vt):
            if vt == 8:
                return read_str(o)[1]
            if vt == 9:
                sub, n = struct.unpack_from("<IQ", buf, o)
                o += 12
                if sub in scalar:
                    return o + n * scalar[sub]
                for _ in range(n):
                    o = skip_value(o, sub)
                return o
            return o + scalar[vt]

        for _ in range(n_kv):
            key, off = read_str(off)
            (vt,) = struct.unpack_from("<I", buf, off)
            off += 4
            if key == "general.alignment" and vt == 4:
                (alignment,) = struct.unpack_from("<I", buf, off)
            off = skip_value(off, vt)
        infos = []
        for _ in range(n_tensors):
            name, off = read_str(off)
            (n_dims,) = struct.unpack_from("<I", buf, off)
            off += 4
            dims = struct.unpack_from(f"<{n_dims}Q", buf, off)
            off += 8 * n_dims
            ttype, rel = struct.unpack_from("<IQ", buf, off)
            off += 12
            infos.append((name, dims, ttype, rel))
    except struct.error:
        return f"truncated file: the header (metadata and tensor infos) runs past the end ({file_size} bytes)"
    except (KeyError, RecursionError, OSError):
        return None
    data_start = (off + alignment - 1) // alignment * alignment
    for name, dims, ttype, rel in infos:
        try:
            qtype = gguf.GGMLQuantizationType(ttype)
        except ValueError:
            return f"tensor {name!r} has unknown ggml type id {ttype}"
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        n = int(np.prod(dims, dtype=np.int64)) if dims else 1
        end = data_start + rel + n // block * type_size
        if end > file_size:
            return (f"truncated file: tensor {name!r} needs bytes [{data_start + rel}, {end}) "
                    f"but the file has {file_size} bytes")
    return None


def _get(meta: dict, key: str, path: Path) -> Any:
    if key not in meta:
        raise GGUFError(f"{path}: missing required metadata key {key!r}")
    return meta[key]


def _get_opt(meta: dict, key: str, default: Any, path: Path) -> Any:
    if key not in meta:
        warnings.warn(f"{path}: metadata key {key!r} missing, using default {default!r}", stacklevel=3)
        return default
    return meta[key]


def _build_config(path: Path, meta: dict, tensors: dict[str, GGUFTensor]) -> LlamaConfig:
    arch = meta.get("general.architecture")
    if arch is None:
        raise GGUFError(f"{path}: missing required metadata key 'general.architecture'")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise GGUFError(
            f"{path}: unsupported architecture {arch!r}; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    p = arch + "."
    n_layer = int(_get(meta, p + "block_count", path))
    dim = int(_get(meta, p + "embedding_length", path))
    n_head = int(_get(meta, p + "attention.head_count", path))
    ffn_dim = int(_get(meta, p + "feed_forward_length", path))
    tokens = _get(meta, "tokenizer.ggml.tokens", path)
    n_kv_head = int(_get_opt(meta, p + "attention.head_count_kv", n_head, path))
    rope_theta = float(_get_opt(meta, p + "rope.freq_base", 10000.0, path))
    rms_eps = float(_get_opt(meta, p + "attention.layer_norm_rms_epsilon", 1e-5, path))
    context_length = int(_get_opt(meta, p + "context_length", 2048, path))

    for name, v in (("block_count", n_layer), ("embedding_length", dim), ("attention.head_count", n_head),
                    ("attention.head_count_kv", n_kv_head), ("feed_forward_length", ffn_dim)):
        if v <= 0:
            raise GGUFError(f"{path}: {p}{name} must be positive, got {v}")
    if dim % n_head != 0:
        raise GGUFError(f"{path}: embedding_length {dim} is not divisible by head_count {n_head}")
    if n_head % n_kv_head != 0:
        raise GGUFError(f"{path}: head_count {n_head} is not divisible by head_count_kv {n_kv_head}")
    head_dim = dim // n_head
    rope_dim = meta.get(p + "rope.dimension_count")
    if rope_dim is not None and int(rope_dim) != head_dim:
        raise GGUFError(
            f"{path}: rope.dimension_count {rope_dim} != head_dim {head_dim} (partial RoPE is not supported)"
        )

    if "token_embd.weight" not in tensors:
        raise GGUFError(f"{path}: missing tensor 'token_embd.weight'")
    vocab_size = int(meta.get(p + "vocab_size", len(tokens)))
    if len(tokens) != vocab_size:
        raise GGUFError(f"{path}: tokenizer has {len(tokens)} tokens but vocab_size is {vocab_size}")
    tied = "output.weight" not in tensors
    kv_dim = n_kv_head * head_dim
    expected = {"token_embd.weight": (vocab_size, dim), "output_norm.weight": (dim,)}
    if not tied:
        expected["output.weight"] = (vocab_size, dim)
    for i in range(n_layer):
        b = f"blk.{i}."
        expected.update({
            b + "attn_norm.weight": (dim,),
            b + "attn_q.weight": (dim, dim),
            b + "attn_k.weight": (kv_dim, dim),
            b + "attn_v.weight": (kv_dim, dim),
            b + "attn_output.weight": (dim, dim),
            b + "ffn_norm.weight": (dim,),
            b + "ffn_gate.weight": (ffn_dim, dim),
            b + "ffn_up.weight": (ffn_dim, dim),
            b + "ffn_down.weight": (dim, ffn_dim),
        })
    for name, shape in expected.items():
        t = tensors.get(name)
        if t is None:
            raise GGUFError(f"{path}: missing tensor {name!r}")
        if tuple(t.shape) != shape:
            raise GGUFError(f"{path}: tensor {name!r} has shape {tuple(t.shape)}, expected {shape}")
    return LlamaConfig(
        n_layer=n_layer, dim=dim, n_head=n_head, n_kv_head=n_kv_head, head_dim=head_dim,
        ffn_dim=ffn_dim, vocab_size=vocab_size, rope_theta=rope_theta, rms_eps=rms_eps,
        context_length=context_length, tied_embeddings=tied,
    )


def load_gguf(path: str | os.PathLike) -> GGUFModel:
    """Open a Llama-architecture GGUF file, memory-mapped.

    Args:
        path: the ``.gguf`` file.

    Returns:
        A :class:`GGUFModel`; tensor data stays memory-mapped (nothing is copied or decoded).

    Raises:
        GGUFError: the file is missing or unreadable; it does not start with the ``GGUF`` magic;
            it is truncated (the message names the first tensor whose data does not fit); anything
            unsupported (``_support.check_supported``: the architecture, the tokenizer model, each
            tensor type not in ``SUPPORTED_TYPES`` with a count, a norm not F32/F16), all listed in
            one message, before any weight is read; a
            required key is missing (``llama.block_count``, ``llama.embedding_length``,
            ``llama.attention.head_count``, ``llama.feed_forward_length``,
            ``tokenizer.ggml.tokens``); the architecture is not ``llama``; tensor shapes do not match
            the hyperparameters, a block tensor is missing, or ``dim % n_head != 0``.

    Warns:
        UserWarning: an optional key is missing and its default is used (see :class:`LlamaConfig`).
    """
    import gguf

    path = Path(path)
    if not path.exists():
        raise GGUFError(f"{path}: no such file")
    if not path.is_file():
        raise GGUFError(f"{path}: not a regular file")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
        file_size = path.stat().st_size
    except OSError as exc:
        raise GGUFError(f"{path}: cannot read: {exc}") from exc
    if magic != GGUF_MAGIC:
        raise GGUFError(f"{path}: not a GGUF file (magic {magic!r}, expected {GGUF_MAGIC!r})")

    try:
        reader = gguf.GGUFReader(path, "r")
    except Exception as exc:  # noqa: BLE001 - re-raised as ours, with a diagnosis
        why = _diagnose(path, file_size)
        if why is None:
            why = f"cannot parse GGUF file: {type(exc).__name__}: {exc}"
        raise GGUFError(f"{path}: {why}") from exc
    _check_tensor_extents(path, reader, file_size)

    metadata: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        metadata[key] = _field_value(field)

    check_supported(path, metadata.get("general.architecture"), metadata.get("tokenizer.ggml.model"),
                    [(t.name, t.tensor_type.name, len(t.shape)) for t in reader.tensors])
    tensors: dict[str, GGUFTensor] = {}
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        tensors[t.name] = GGUFTensor(
            name=t.name, dtype=SUPPORTED_TYPES[t.tensor_type.name], shape=shape, data=t.data,
            nbytes=int(t.n_bytes), _qtype=t.tensor_type,
        )
    config = _build_config(path, metadata, tensors)
    return GGUFModel(path=path, config=config, tensors=tensors, metadata=metadata)
