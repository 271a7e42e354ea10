"""GGUF loading for the decoder families of ``_arch``: read, validate, hand over memory-mapped tensors.

The file format is the GGUF v2/v3 container of ggml (spec:
https://github.com/ggml-org/ggml/blob/master/docs/gguf.md). ``_gguf_reader`` parses it with every
count, length and offset bounded by the file size and maps the tensor data (nothing is copied until
``GGUFTensor.dequantize()`` or a device upload); ``_llama_config`` checks the whole file as a model of its family
(hyperparameters, tensor types and shapes, tokenizer keys, finite weights). Everything that can be
wrong with a file becomes a :class:`~xinfer_async.hal._errors.GGUFError` naming the key or tensor
and the value. The ``gguf`` package is not imported here (it takes ~0.6 s to import and its reader is
slow and unbounded on bad input); it writes our synthetic files and is the reference of the tests.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..hal._errors import GGUFError
from ._gguf_reader import read_gguf
from ._llama_config import LlamaConfig, ModelConfig, validate_model
from ._support import SUPPORTED_ARCHITECTURES, SUPPORTED_TYPES, check_supported

__all__ = ["GGUFModel", "GGUFTensor", "LlamaConfig", "ModelConfig", "load_gguf", "SUPPORTED_ARCHITECTURES"]


@dataclasses.dataclass(frozen=True, eq=False)  # identity equality: data is a large array
class GGUFTensor:
    """One tensor of a GGUF file, still in its on-disk encoding.

    Attributes:
        name: GGUF tensor name, e.g. ``"blk.0.attn_q.weight"``.
        dtype: one of ``'f32', 'f16', 'q8_0', 'q4_0', 'q4_1'``.
        shape: logical shape in numpy (row-major) order: ``(N, K)`` for a matrix of N rows of K
            elements (GGUF stores ``ne = [K, N]``), ``(n,)`` for a vector.
        data: the raw memory-mapped array (not a copy): float32/float16 of ``shape`` for float
            tensors, uint8 of ``(N, bytes_per_row)`` for quantized ones.
        nbytes: size of ``data`` in bytes.
        ggml_type: the ggml type name (``"Q4_1"``, ...).
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    data: np.ndarray
    nbytes: int
    ggml_type: str

    def dequantize(self) -> np.ndarray:
        """Decode the tensor to float32.

        Returns:
            float32 ndarray of ``self.shape`` (a fresh array; the file is not modified).
        """
        import gguf  # slow to import: only here, off the load path

        out = gguf.quants.dequantize(np.asarray(self.data), gguf.GGMLQuantizationType[self.ggml_type])
        return np.ascontiguousarray(out, dtype=np.float32).reshape(self.shape)


@dataclasses.dataclass(frozen=True, eq=False)  # identity equality and hash
class GGUFModel:
    """A parsed GGUF file.

    Attributes:
        path: the file.
        config: the hyperparameters (:class:`ModelConfig`, with the family in ``config.arch``).
        tensors: name -> :class:`GGUFTensor`, in file order.
        metadata: key -> plain Python value (str, int, float, bool, list), e.g.
            ``metadata["tokenizer.ggml.tokens"]`` is a ``list[str]``.
    """

    path: Path
    config: ModelConfig
    tensors: dict[str, GGUFTensor]
    metadata: dict[str, Any]


def _plain(value: Any) -> Any:
    """A reader value as plain Python (numpy arrays as lists)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, list) and value and isinstance(value[0], (list, np.ndarray)):
        return [_plain(v) for v in value]
    return value


def load_gguf(path: str | os.PathLike, *, check_tokenizer: bool = True) -> GGUFModel:
    """Open and validate a GGUF file of a supported family (``_arch.ARCHITECTURES``), memory-mapped.

    Args:
        path: the ``.gguf`` file.
        check_tokenizer: refuse a ``tokenizer.ggml.model`` the tokenizer does not implement (default).
            False: leave it out of the up-front check, for a caller that gives token ids itself
            (scoring golden ids, ``ReferenceLlama``); its other ``tokenizer.ggml.*`` keys are still checked.

    Returns:
        A :class:`GGUFModel`; tensor data stays memory-mapped (nothing is copied or decoded).

    Raises:
        GGUFError: the file is missing, unreadable or not a well-formed GGUF v2/v3 file (see
            ``_gguf_reader.read_gguf``: counts, lengths and offsets past the end, unknown type ids,
            a bad alignment, tensors not aligned or not packed); or it holds anything unsupported
            (``_support.check_supported``, on the header alone, before any weight is read: the
            architecture, the tokenizer model, the rope scaling type, each tensor type not in
            ``SUPPORTED_TYPES`` with a count, a norm not F32/F16, all listed in one message); or it is not a model we can run (see
            ``_llama_config.validate_model``: missing or mistyped keys, hyperparameters out of range,
            tensors missing, left over, of an unsupported type or shape, NaN/inf weights, tokenizer
            keys inconsistent with the vocabulary). The message names the file, the key or tensor and
            the value.

    Warns:
        UserWarning: an optional key is missing and its default is used (see :class:`ModelConfig`).
    """
    path = Path(path)
    if path.exists() and not path.is_file():
        raise GGUFError(f"{path}: not a regular file")
    f = read_gguf(path)
    text = lambda key: f.metadata[key] if isinstance(f.metadata.get(key), str) else None  # noqa: E731
    arch = text("general.architecture")
    check_supported(path, arch, text("tokenizer.ggml.model") if check_tokenizer else None,
                    [(t.name, t.type_name, len(t.shape)) for t in f.tensors],
                    rope_scaling=text(f"{arch}.rope.scaling.type") if arch else None)
    config = validate_model(f)
    tensors = {
        t.name: GGUFTensor(name=t.name, dtype=SUPPORTED_TYPES[t.type_name], shape=t.shape, data=t.data,
                           nbytes=t.nbytes, ggml_type=t.type_name)
        for t in f.tensors
    }
    metadata = {k: _plain(v) for k, v in f.metadata.items()}
    return GGUFModel(path=path, config=config, tensors=tensors, metadata=metadata)
