"""``load``: a model name or GGUF path -> a ready ``LanguageModel``."""

from __future__ import annotations

import os
import threading
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import trio

from ..runtime import Device
from .._open import open_device
from ._engine import LanguageModel
from ._chat import resolve_chat_template
from ._gguf import load_gguf
from ._gemm import f16_weights as f16_weights_setting
from ._gemm import resident_f16
from ._llama import LlamaBuilder, kv_cache_dtype, positive_int, prefill_chunk
from ._registry import resolve_model
from ._tokenizer import Tokenizer

DEFAULT_MODEL = "smollm2-135m"


async def load(name_or_path: str | os.PathLike = DEFAULT_MODEL, *, device: Any = None, slots: int = 4,
               ctx: int | None = None, chunk: int | None = None, pull: bool = True,
               max_queued: int = 256, batching: bool | None = None, progress: bool = False,
               chat_template: str | os.PathLike | None = None, kv_dtype: str | None = None,
               step_prompt_rows: int | None = None, f16_weights: bool | str | None = None) -> LanguageModel:
    """Load a GGUF model of a supported family (``llm._arch``) onto a device, ready for concurrent requests.

    Args:
        name_or_path: a known model name (``"smollm2-135m"``, pulled into the cache when missing)
            or a path to a ``.gguf`` file.
        device: a ``Device``, a device name (``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"auto"``) or
            ``None`` (``XINFER_DEVICE``, else auto).
        slots: concurrent requests; each slot has its own KV cache.
        ctx: tokens per slot's KV cache (default: min(2048, the model's context length)).
        chunk: prompt tokens per prefill step of one sequence (the ``prefill{T}`` and ``score``
            plans' largest T; ``logits`` scores a chunk a run). None (default): by device
            (``_llama.prefill_chunk``): 512 on cuda (a 512-token 8B prompt on an H200: 12.9k tok/s,
            against 3.1k at 64, since every chunk dequantizes every weight once), 64 on cpu (its
            kernels read the quantized weights as they are: no per-chunk cost to spread);
            at most ``ctx``.
        step_prompt_rows: prompt tokens a batched decode step carries beside its decode rows (a
            long prompt joins the running requests' steps a piece at a time; ``_batch``). None
            (default): ``min(64, chunk)``; the batched plans then reach ``slots + 64`` rows,
            whatever ``chunk`` is.
        f16_weights: resident f16 copies of the matrices of the GEMM regime (cuda, prefill-sized
            T): True/``"1"``, False/``"0"`` or ``"auto"`` (on when they take <= 1/3 of the device
            memory free after the weights and KV caches: ``_gemm.resident_f16``). None (default):
            ``$XINFER_F16_WEIGHTS``, else auto. ``model.builder.f16_weight_bytes`` and ``repr``
            say what was kept.
        pull: download a known model that is not in the cache yet.
        max_queued: requests that may wait for a slot before ``generate`` applies back-pressure
            (with ``batching``, requests that may wait for a sequence).
        batching: None (default): on when ``slots > 1`` (batched steps were at least as fast as
            unbatched slots at every concurrency measured, cpu and cuda; one slot has nothing to
            batch); True or False forces it. True: decode all active requests in one batched step (``slots`` sequences in one
            batched KV cache, plans for batch buckets 1, 2, 4, ... up to ``slots``); each
            request's output is what it gives alone, bit for bit (on cuda where a weight row fits
            the matrix kernel's stage, shaders/xi_mvc.cuh, or runs the tensor-core kernel,
            shaders/xi_tc.cuh).
            ``logits`` runs unbatched on one slot of its own.
        progress: a "loading model" tqdm line on stderr (stages: read and validate the file, build
            the tokenizer, upload the weights and build the plans, with the elapsed time), shown only
            once loading has taken more than 1 s (SmolLM2 takes ~0.6 s of CPU time) and cleared when
            done. Off by default (a library call prints nothing); the CLI turns it on.
        chat_template: the chat template for ``chat`` / ``render_chat``: a built-in name
            (``"chatml"``, ``"gemma"``, ``"llama3"``) or the path of a ``.jinja`` file; it replaces
            the file's ``tokenizer.chat_template``. None (default): the file's (a base model such as
            Gemma 3 270M has none; ``chat`` then raises ``ValueError`` saying so).
        kv_dtype: the KV cache's element type, ``"f32"`` or ``"f16"`` (half the bytes; k and v
            rounded to f16 as stored; on cpu q and the attention probabilities rounded to f16 too, as
            llama.cpp does with an F16 cache; other arithmetic f32). None (default): ``$XINFER_KV_CACHE``, else
            ``"f32"`` (``_llama.kv_cache_dtype``).

    The whole file is read and checked (``load_gguf``: format, hyperparameters, tensor types and
    shapes, finite weights, tokenizer) and the tokenizer built before any weight reaches the device.

    Raises:
        ValueError: an unknown model name (the message lists the known ones), bad sizes (``slots``,
            ``chunk``, ``step_prompt_rows``), an unknown chat template name or an unreadable
            template file, an unknown ``kv_dtype`` or ``f16_weights`` (``XINFER_F16_WEIGHTS``)
            value (all checked before the file is read).
        GGUFError: a malformed, truncated or unsupported file, or one that is not a model this runs
            (see ``load_gguf``); the message names the key or tensor and the value.
        DeviceError: the device cannot be opened.
    """
    positive_int(slots, "slots")
    for name, value in (("chunk", chunk), ("step_prompt_rows", step_prompt_rows)):
        if value is not None:
            positive_int(value, name)
    if f16_weights is None:
        f16_weights = f16_weights_setting()
    resident_f16(f16_weights, "", 0, None)  # an unknown value fails now, not after reading the file
    if batching is None:
        batching = slots > 1
    template = resolve_chat_template(chat_template) if chat_template is not None else None
    kv_dtype = kv_cache_dtype(kv_dtype)
    path = await trio.to_thread.run_sync(lambda: resolve_model(name_or_path, pull=pull))
    bar = _LoadProgress(os.path.basename(str(path))) if progress else None
    try:
        gguf_model = await trio.to_thread.run_sync(load_gguf, path)
        _advance(bar, "building the tokenizer")
        tokenizer = await trio.to_thread.run_sync(Tokenizer.from_gguf, gguf_model.metadata)
        _advance(bar, "uploading weights, building plans")
        return await _on_device(path, gguf_model, tokenizer, device, slots, ctx, chunk, max_queued, batching, kv_dtype,
                                template, step_prompt_rows, f16_weights)
    finally:
        if bar is not None:
            bar.close()


@asynccontextmanager
async def open_model(name_or_path: str | os.PathLike = DEFAULT_MODEL, **kwargs: Any) -> AsyncIterator[LanguageModel]:
    """``async with llm.open_model(...) as model:``: ``load`` (same arguments) for the block, then
    ``aclose`` (requests still in flight end with ``trio.ClosedResourceError``), as trio's
    ``open_*`` context managers. ``async with await llm.load(...) as model:`` does the same."""
    model = await load(name_or_path, **kwargs)
    async with model:
        yield model


class _LoadProgress:
    """The "loading model" line: a tqdm bar on stderr, created (tqdm imported) only once loading has
    taken ``DELAY_S``, then redrawn twice a second by a thread (the stages run in worker threads), so
    a long stage shows its elapsed time and a fast load prints and imports nothing."""

    DELAY_S = 1.0
    STAGES = 3

    def __init__(self, name: str):
        self._name = name
        self._stage = "reading and checking the file"
        self._done = 0
        self._bar: Any = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._t0 = time.time()  # tqdm's clock
        threading.Thread(target=self._run, daemon=True, name="xinfer-load-progress").start()

    def advance(self, stage: str) -> None:
        with self._lock:
            self._stage, self._done = stage, self._done + 1
            self._draw()

    def _draw(self) -> None:
        if self._bar is not None:
            self._bar.n = self._done
            self._bar.set_description_str(f"{self._name}: {self._stage}", refresh=False)
            self._bar.refresh()

    def _run(self) -> None:
        if self._stop.wait(self.DELAY_S):
            return
        import sys

        from tqdm import tqdm

        with self._lock:
            if self._stop.is_set():
                return
            self._bar = tqdm(total=self.STAGES, file=sys.stderr, leave=False, initial=self._done,
                             desc=f"{self._name}: {self._stage}",
                             bar_format="loading model {desc} ({n}/{total} stages done, {elapsed})")
            self._bar.start_t = self._t0  # elapsed since load began, not since the line appeared
            self._draw()
        while not self._stop.wait(0.5):
            with self._lock:
                self._draw()

    def close(self) -> None:
        with self._lock:
            self._stop.set()
            if self._bar is not None:
                self._bar.close()


def _advance(bar: _LoadProgress | None, stage: str) -> None:
    if bar is not None:
        bar.advance(stage)


async def _on_device(path, gguf_model, tokenizer, device, slots, ctx, chunk, max_queued, batching, kv_dtype,
                     chat_template, step_prompt_rows, f16_weights) -> LanguageModel:
    dev = device if isinstance(device, Device) else open_device(device)
    if ctx is None:
        ctx = min(2048, gguf_model.config.context_length)
    chunk = prefill_chunk(dev.name, ctx) if chunk is None else min(chunk, ctx)
    common = dict(kv_dtype=kv_dtype, f16_weights=f16_weights, step_prompt_rows=step_prompt_rows)

    def build():
        if batching:
            builder = LlamaBuilder(gguf_model, dev, ctx, chunk, batch_seqs=slots, slots=1, **common)
            return builder, builder.prepare(1), builder.prepare_batched()
        builder = LlamaBuilder(gguf_model, dev, ctx, chunk, slots=slots, **common)
        return builder, builder.prepare(slots), None

    try:
        builder, prepared, batched = await trio.to_thread.run_sync(build)
    except BaseException:
        if dev is not device:
            dev.close()
        raise
    model = LanguageModel(path, gguf_model, builder, prepared, max_queued=max_queued, batched=batched,
                          batch_seqs=slots if batching else 0, tokenizer=tokenizer, chat_template=chat_template)
    model.owns_device = dev is not device  # opened here from a name: aclose() closes it
    return model
