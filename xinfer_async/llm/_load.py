"""``load``: a model name or GGUF path -> a ready ``LanguageModel``."""

from __future__ import annotations

import os
from typing import Any

import trio

from ..runtime import Device
from .._open import open_device
from ._engine import LanguageModel
from ._gguf import load_gguf
from ._llama import LlamaBuilder
from ._registry import resolve_model

DEFAULT_MODEL = "smollm2-135m"


async def load(name_or_path: str | os.PathLike = DEFAULT_MODEL, *, device: Any = None, slots: int = 4,
               ctx: int | None = None, chunk: int = 64, pull: bool = True,
               max_queued: int = 256, batching: bool = False) -> LanguageModel:
    """Load a Llama-architecture GGUF model onto a device, ready for concurrent requests.

    Args:
        name_or_path: a known model name (``"smollm2-135m"``, pulled into the cache when missing)
            or a path to a ``.gguf`` file.
        device: a ``Device``, a device name (``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"auto"``) or
            ``None`` (``XINFER_DEVICE``, else auto).
        slots: concurrent requests; each slot has its own KV cache.
        ctx: tokens per slot's KV cache (default: min(2048, the model's context length)).
        chunk: prompt tokens per prefill step.
        pull: download a known model that is not in the cache yet.
        max_queued: requests that may wait for a slot before ``generate`` applies back-pressure
            (with ``batching``, requests that may wait for a sequence).
        batching: decode all active requests in one batched step (``slots`` sequences in one
            batched KV cache, plans for batch buckets 1, 2, 4, ... up to ``slots``); each
            request's output is what it gives alone, bit for bit (on cuda where a weight row fits
            the matrix kernel's stage, shaders/xi_mvc.cuh, or runs the tensor-core kernel,
            shaders/xi_tc.cuh).
            ``logits`` runs unbatched on one slot of its own.

    Raises:
        ValueError: an unknown model name (the message lists the known ones), bad sizes.
        GGUFError: a malformed, truncated or unsupported file.
        DeviceError: the device cannot be opened.
    """
    if slots < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")
    path = await trio.to_thread.run_sync(lambda: resolve_model(name_or_path, pull=pull))
    gguf_model = await trio.to_thread.run_sync(load_gguf, path)
    dev = device if isinstance(device, Device) else open_device(device)
    if ctx is None:
        ctx = min(2048, gguf_model.config.context_length)
    chunk = min(chunk, ctx)

    def build():
        if batching:
            builder = LlamaBuilder(gguf_model, dev, ctx, chunk, batch_seqs=slots)
            return builder, builder.prepare(1), builder.prepare_batched()
        builder = LlamaBuilder(gguf_model, dev, ctx, chunk)
        return builder, builder.prepare(slots), None

    try:
        builder, prepared, batched = await trio.to_thread.run_sync(build)
    except BaseException:
        if dev is not device:
            dev.close()
        raise
    model = LanguageModel(path, gguf_model, builder, prepared, max_queued=max_queued, batched=batched,
                          batch_seqs=slots if batching else 0)
    model.owns_device = dev is not device  # opened here from a name: aclose() closes it
    return model
