"""What the loader runs: architectures, tokenizer models, tensor types; one up-front check.

The check reads only the header (metadata and tensor infos), so a file the code cannot run is refused
before any weight is read, with one message that lists everything unsupported in it.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from ..hal._errors import GGUFError
from ..ops._kernels import WEIGHT_DTYPES
from ._tokenizer import MODELS as _TOKENIZER_MODELS
from ._arch import ARCHITECTURES

__all__ = ["SUPPORTED_ARCHITECTURES", "SUPPORTED_TOKENIZERS", "SUPPORTED_TYPES", "SUPPORTED_ROPE_SCALING", "NORM_TYPES",
           "unsupported_items", "check_supported"]

#: ``general.architecture`` values: the families declared in ``_arch``
SUPPORTED_ARCHITECTURES = tuple(ARCHITECTURES)
#: ``tokenizer.ggml.model`` values the tokenizer implements (llm/_tokenizer.py)
SUPPORTED_TOKENIZERS = _TOKENIZER_MODELS
#: ggml type name -> our dtype label: the weight types of the matrix kernels (``ops.WEIGHT_DTYPES``)
SUPPORTED_TYPES = {d.label.upper(): d.label for d in WEIGHT_DTYPES}
#: the types a norm or a bias (a vector) may have: it is converted to f32 on the host
NORM_TYPES = ("F32", "F16")


#: ``{arch}.rope.scaling.type`` values the rope runs (Llama 3's scaling is a tensor, ``rope_freqs``)
SUPPORTED_ROPE_SCALING = ("none",)


def unsupported_items(architecture: str | None, tokenizer_model: str | None,
                      tensor_types: Iterable[tuple[str, str, int]], rope_scaling: str | None = None) -> list[str]:
    """Everything in a file's header that the loader cannot run, one phrase an item.

    Args:
        architecture: ``general.architecture`` (``None``: missing; reported elsewhere).
        tokenizer_model: ``tokenizer.ggml.model`` (``None``: missing, the ``gpt2`` default).
        tensor_types: ``(tensor name, ggml type name, n_dims)`` of each tensor.
        rope_scaling: ``{architecture}.rope.scaling.type`` (``None``: absent).

    Returns:
        e.g. ``["architecture 'gemma3' (supported: llama)", "tokenizer.ggml.model 'bert' (supported:
        gpt2, llama)", "3 tensors of type TQ2_0 (e.g. 'blk.0.attn_q.weight')"]``; empty when all is supported.
    """
    items = []
    if architecture is not None and architecture not in SUPPORTED_ARCHITECTURES:
        items.append(f"architecture {architecture!r} (supported: {', '.join(SUPPORTED_ARCHITECTURES)})")
    if rope_scaling is not None and rope_scaling not in SUPPORTED_ROPE_SCALING:
        items.append(f"rope scaling {rope_scaling!r} (supported: {', '.join(SUPPORTED_ROPE_SCALING)})")
    if tokenizer_model is not None and tokenizer_model not in SUPPORTED_TOKENIZERS:
        items.append(f"tokenizer.ggml.model {tokenizer_model!r} (supported: {', '.join(SUPPORTED_TOKENIZERS)})")
    bad, first = Counter(), {}
    norms = Counter()
    for name, tname, ndim in tensor_types:
        if tname not in SUPPORTED_TYPES:
            bad[tname] += 1
            first.setdefault(tname, name)
        elif ndim == 1 and tname not in NORM_TYPES:
            norms[tname] += 1
            first.setdefault("norm " + tname, name)
    for tname, n in sorted(bad.items()):
        items.append(f"{n} tensor{'s' if n > 1 else ''} of type {tname} (e.g. {first[tname]!r})")
    for tname, n in sorted(norms.items()):
        items.append(f"{n} vector{'s' if n > 1 else ''} of type {tname} (e.g. {first['norm ' + tname]!r}; "
                     f"a norm must be {' or '.join(NORM_TYPES)})")
    return items


def check_supported(path, architecture: str | None, tokenizer_model: str | None,
                    tensor_types: Iterable[tuple[str, str, int]], rope_scaling: str | None = None) -> None:
    """Refuse a file with anything unsupported, listing all of it (see :func:`unsupported_items`).

    Raises:
        GGUFError: ``"<path>: unsupported: <item>; <item>; ..."``, ending ``"; supported tensor
            types: F32, ..."`` when a tensor type is among the items.
    """
    items = unsupported_items(architecture, tokenizer_model, tensor_types, rope_scaling)
    if items:
        types = any(" of type " in i for i in items)
        raise GGUFError(f"{path}: unsupported: {'; '.join(items)}"
                        + (f"; supported tensor types: {', '.join(SUPPORTED_TYPES)}" if types else ""))
