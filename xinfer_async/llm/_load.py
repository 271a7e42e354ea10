"""``load``: a model name or GGUF path -> a ready ``LanguageModel``."""

from __future__ import annotations

import os
import threading
from typing import Any

import trio

from ..runtime import Device
from .._open import open_device
from ._engine import LanguageModel
from ._gguf import load_gguf
from ._llama import LlamaBuilder
from ._registry import resolve_model
from ._tokenizer import Tokenizer

DEFAULT_MODEL = "smollm2-135m"


async def load(name_or_path: str | os.PathLike = DEFAULT_MODEL, *, device: Any = None, slots: int = 4,
               ctx: int | None = None, chunk: int = 64, pull: bool = True,
               max_queued: int = 256, batching: bool = False, progress: bool = False) -> LanguageModel:
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
        progress: a "loading model" tqdm bar on stderr (stages: read and validate the file, build the
            tokenizer, upload the weights and build the plans), shown only once loading has taken
            more than 0.5 s. Off by default (a library call prints nothing); the CLI turns it on.

    The whole file is read and checked (``load_gguf``: format, hyperparameters, tensor types and
    shapes, finite weights, tokenizer) and the tokenizer built before any weight reaches the device.

    Raises:
        ValueError: an unknown model name (the message lists the known ones), bad sizes.
        GGUFError: a malformed, truncated or unsupported file, or one that is not a Llama this runs
            (see ``load_gguf``); the message names the key or tensor and the value.
        DeviceError: the device cannot be opened.
    """
    if slots < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")
    path = await trio.to_thread.run_sync(lambda: resolve_model(name_or_path, pull=pull))
    bar = _progress_bar(path) if progress else None
    try:
        gguf_model = await trio.to_thread.run_sync(load_gguf, path)
        _advance(bar, "building the tokenizer")
        tokenizer = await trio.to_thread.run_sync(Tokenizer.from_gguf, gguf_model.metadata)
        _advance(bar, "uploading weights, building plans")
        return await _on_device(path, gguf_model, tokenizer, device, slots, ctx, chunk, max_queued, batching)
    finally:
        if bar is not None:
            bar.stop.set()
            bar.close()


_PROGRESS_DELAY_S = 0.5


def _progress_bar(path: Any) -> Any:
    import sys

    from tqdm import tqdm

    bar = tqdm(total=3, file=sys.stderr, delay=_PROGRESS_DELAY_S, leave=False,
               bar_format="loading model {desc} ({n}/{total} stages done, {elapsed})")
    bar.name = os.path.basename(str(path))
    bar.set_description_str(f"{bar.name}: reading and checking the file", refresh=False)
    bar.stop = threading.Event()
    threading.Thread(target=_tick, args=(bar,), daemon=True, name="xinfer-load-progress").start()
    return bar


def _tick(bar: Any) -> None:
    """Redraw the bar twice a second once the delay has passed, so a long stage shows its elapsed
    time (a thread: the stages run in worker threads, and this needs no nursery in ``load``)."""
    if bar.stop.wait(_PROGRESS_DELAY_S):
        return
    while True:
        bar.refresh()
        if bar.stop.wait(0.5):
            return


def _advance(bar: Any, stage: str) -> None:
    if bar is not None:
        bar.set_description_str(f"{bar.name}: {stage}", refresh=False)
        bar.update(1)


async def _on_device(path, gguf_model, tokenizer, device, slots, ctx, chunk, max_queued, batching) -> LanguageModel:
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
                          batch_seqs=slots if batching else 0, tokenizer=tokenizer)
    model.owns_device = dev is not device  # opened here from a name: aclose() closes it
    return model
