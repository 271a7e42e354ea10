"""``LanguageModel``: a GGUF Llama on the runtime, shared by many trio tasks.

A request flows: caller -> ``GenerationStream`` (text) -> a ``Request`` (ids, sampling, limits)
-> ``JobQueue`` -> a free slot of the ``PreparedModel`` -> ``_generate.generate`` (prefill, then
decode: per step a ``Runner`` call of the slot's plan -> submit -> await the fence -> sample ->
``Request.advance``) -> the stream turns the tokens into text. With batching, the ``Batcher``
replaces the job queue and ``generate``, with the same ``Runner`` and ``Request``.
"""

from __future__ import annotations

import numbers
from collections import abc
from typing import Any, Sequence

import numpy as np
import trio

from ..runtime import JobCancelledError, JobQueue, JobStatistics
from ._batch import Batcher, BatchStatistics
from ._chat import NO_TEMPLATE_HINT, chat_prompt_ids
from ._generate import generate
from ._request import Request
from ._runner import Runner
from ._sampling import MAX_TOP_LOGPROBS, SamplingParams
from ._stream import CompletionResult, GenerationStream
from ._tokenizer import Tokenizer

#: the roles ``chat`` takes (those of the OpenAI chat API that a text chat template renders)
CHAT_ROLES = ("system", "user", "assistant")


class LanguageModel:
    """A loaded model (``await xinfer_async.llm.load(...)``, or ``async with llm.open_model(...)``).

    An async context manager: ``async with model:`` closes it at the block's end (``aclose``).

    Attributes:
        config: the ``ModelConfig`` (``LlamaConfig``, its earlier name).
        tokenizer: the ``Tokenizer`` from the file's metadata.
        device: the device it runs on.
        slots: concurrent requests (each a slot with its own KV cache of ``ctx`` tokens; with
            batching, a sequence of the batched cache).
        ctx: context length per request, tokens.
        batching: generation requests decode together, one batched step for all (see ``_batch``);
            ``logits`` still runs on ``prepared`` (one slot).
        runner: the ``Runner`` of ``prepared``'s plans; ``batched_runner``: of ``batched``'s (or None).
    """

    def __init__(self, path: Any, gguf_model: Any, builder: Any, prepared: Any, *, max_queued: int = 256,
                 batched: Any = None, batch_seqs: int = 0, tokenizer: Tokenizer | None = None,
                 chat_template: str | None = None):
        self.path = path
        #: whether ``aclose`` closes the device (``load`` opened it from a name)
        self.owns_device = False
        self.config = gguf_model.config
        self.metadata = {k: v for k, v in gguf_model.metadata.items() if not k.startswith("tokenizer.ggml.")}
        self.tokenizer = tokenizer if tokenizer is not None else Tokenizer.from_gguf(gguf_model.metadata)
        #: the Jinja2 chat template: the one given (``load(chat_template=)``), else the file's, else None
        self.chat_template = chat_template or gguf_model.metadata.get("tokenizer.chat_template")
        self.add_bos = self.tokenizer.add_bos
        self.builder = builder
        self.prepared = prepared
        self.device = builder.device
        self.ctx = builder.ctx
        self.chunk = builder.chunk
        self.slots = batch_seqs if batched is not None else prepared.capacity
        self.batching = batched is not None
        self.batched = batched
        self.runner = Runner(builder.plan_specs(), self.ctx, self.chunk)
        self.batched_runner = Runner(builder.plan_specs(batched=True), self.ctx, self.chunk) if batched else None
        self._batch: Any = None
        self._batch_token: Any = None
        self.stop_ids = set(self.tokenizer.eog_ids)  # llama.cpp's end-of-generation set
        self._max_queued = max_queued
        self._jobs: JobQueue | None = None
        self._jobs_token: Any = None  # the trio run whose system tasks serve ``_jobs``
        self._closed = False

    # -- text ------------------------------------------------------------------------------
    def tokenize(self, text: str, special: bool = False) -> list[int]:
        """Token ids of ``text``; special tokens (``<|im_start|>``...) only when ``special``."""
        return self.tokenizer.encode(text, special=special)

    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (a sequence of int token ids, possibly empty).

        Raises:
            TypeError: ``ids`` is not a sequence of ints (the message names ``ids``).
            ValueError: an id outside the vocabulary.
        """
        return self.tokenizer.decode(self._token_ids(ids, "ids"))

    def _token_ids(self, ids: Any, what: str) -> list[int]:
        """``ids`` as a list of int token ids in the vocabulary (``what`` names it in the errors).

        Raises:
            TypeError: not a sequence (list, tuple, 1-D integer array) of ints: bytes, a str, a
                float, a bool, None..., or an element that is not an int.
            ValueError: an id outside ``[0, vocab_size)``.
        """
        kind = "a str or a sequence of int token ids" if what == "prompt" else "a sequence of int token ids"
        if isinstance(ids, np.ndarray) and (ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer)):
            raise TypeError(f"{what} must be {kind}, got an array of shape {ids.shape} and dtype {ids.dtype}")
        if isinstance(ids, (str, bytes, bytearray, memoryview)) or not isinstance(ids, (abc.Sequence, np.ndarray)):
            raise TypeError(f"{what} must be {kind}, got {type(ids).__name__} {ids!r:.60}")
        for k, i in enumerate(ids):
            if isinstance(i, (bool, np.bool_)) or not isinstance(i, numbers.Integral):
                raise TypeError(f"{what}[{k}] must be an int token id, got {type(i).__name__} {i!r:.40}")
        out = [int(i) for i in ids]
        bad = [i for i in out if not 0 <= i < self.config.vocab_size]
        if bad:
            raise ValueError(f"{what} holds token id {bad[0]}, outside the vocabulary [0, {self.config.vocab_size})")
        return out

    def _prompt_ids(self, prompt: str | Sequence[int], special: bool, what: str = "prompt") -> list[int]:
        """Validated ids of a text or id prompt (``what`` names it in the errors).

        Raises:
            TypeError: neither a str nor a sequence (list, tuple, 1-D integer array) of int ids
                (bytes, a float, a bool, None...), or an id that is not an int.
            ValueError: empty, longer than the context, or an id outside the vocabulary.
        """
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt, special=special, add_special=True)  # BOS/EOS as the file says
        else:
            ids = self._token_ids(prompt, what)
        if not ids:
            hint = "give at least one token of text" if what == "prompt" else "give at least one token"
            raise ValueError(f"{what} is empty: {hint}")
        if len(ids) > self.ctx:
            raise ValueError(f"{what} has {len(ids)} tokens but the context holds {self.ctx} (load with a larger ctx=)")
        return ids

    def render_chat(self, messages: list[dict]) -> list[int]:
        """Prompt ids of a chat: the template's markers as special tokens, message contents as
        plain text (a ``<|im_start|>`` typed by a user stays text).

        Args:
            messages: a non-empty list of ``{"role": r, "content": text}`` with ``r`` one of
                ``CHAT_ROLES`` (system, user, assistant).

        Raises:
            TypeError: ``messages`` is not a list, or a message not a dict.
            ValueError: the model has no chat template, ``messages`` is empty, a message lacks a
                str ``content``, or its role is not one of ``CHAT_ROLES`` (the message names the
                index and the value).
        """
        if not isinstance(messages, (list, tuple)):
            raise TypeError(f"messages must be a list of {{'role', 'content'}} dicts, got "
                            f"{type(messages).__name__} {messages!r:.60}")
        if not messages:
            raise ValueError("messages is empty: give at least one message, e.g. [{'role': 'user', 'content': 'Hi'}]")
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                raise TypeError(f"messages[{i}] must be a dict with 'role' and 'content', got {type(m).__name__}")
            if m.get("role") not in CHAT_ROLES:
                raise ValueError(f"messages[{i}]['role'] must be one of {', '.join(CHAT_ROLES)}, got {m.get('role')!r}")
            if not isinstance(m.get("content"), str):
                raise ValueError(f"messages[{i}]['content'] must be a str, got {m.get('content')!r:.60}")
        if not self.chat_template:
            raise ValueError(f"this model file has no chat template (tokenizer.chat_template): {NO_TEMPLATE_HINT} "
                             f"with load(..., chat_template=...) (the command line's --chat-template)")
        return chat_prompt_ids(self.chat_template, messages, self.tokenizer)

    # -- requests --------------------------------------------------------------------------
    def generate(self, prompt: str | Sequence[int], *, max_tokens: int = 256, temperature: float = 0.0,
                 top_p: float = 1.0, top_k: int = 0, seed: int | None = None, stop: Sequence[str] = (),
                 special: bool = False, ignore_eos: bool = False, min_p: float = 0.0, repeat_penalty: float = 1.0,
                 presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                 repeat_last_n: int = 64, logprobs: int | None = None) -> GenerationStream:
        """Stream the continuation of ``prompt`` as text pieces: ``async for piece in model.generate(...)``.

        Args:
            prompt: text (str), or token ids (a list, tuple or 1-D integer array of ints).
            max_tokens: generated tokens at most; 0 returns at once with no text (finish_reason
                ``"length"``; the prompt is validated but not run; every ``Timings`` time is 0.0).
                Generation also stops when the context (``ctx``) is full (finish_reason ``"length"``).
            temperature, top_p, top_k, seed, min_p: see ``SamplingParams`` (temperature 0 is greedy).
            repeat_penalty, presence_penalty, frequency_penalty, repeat_last_n: the penalties of
                ``SamplingParams``, over the last ``repeat_last_n`` tokens of the prompt and the
                generated text (llama.cpp's window; -1: all of them). A request with a penalty
                takes its tokens from the logits on the host (greedy: the argmax of the penalized
                logits), not from the device's argmax.
            stop: strings that end the generation (not included in the text).
            special: parse special-token markers in a text prompt.
            ignore_eos: keep generating past end-of-sequence ids (they stay in the text's ids), to
                ``max_tokens`` or the context's end: fixed-length requests, as serving benchmarks
                run them.
            logprobs: None (the default), or an int k in [0, 20]: record each generated token's
                log-probability and the k most likely tokens' (``TokenLogprobs``: natural log of
                the softmax of the step's raw logits, before penalties and temperature, computed
                in float64 on the host), in ``stream.logprobs`` as they come and
                ``result.logprobs``. Such a request takes its tokens from the logits on the host
                (one row of logits comes back a step, as sampling does), greedy or not.

        Raises:
            TypeError: a prompt that is neither a str nor a sequence of int ids (bytes, a float, a
                bool...).
            ValueError: an empty prompt, one longer than the context, a negative max_tokens,
                ``logprobs`` not None or an int in [0, 20], or invalid sampling values (raised
                here, before anything runs; the message names the argument).
        """
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise ValueError(f"max_tokens must be an int >= 0, got {max_tokens!r}")
        if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)
                                     or not 0 <= logprobs <= MAX_TOP_LOGPROBS):
            raise ValueError(f"logprobs must be None or an int in [0, {MAX_TOP_LOGPROBS}], got {logprobs!r}")
        if isinstance(stop, str):
            stop = [stop]
        if stop is None:
            stop = []
        if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) for s in stop):
            raise TypeError(f"stop must be a str or a list of str, got {stop!r:.60}")
        params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, min_p=min_p,
                                repeat_penalty=repeat_penalty, presence_penalty=presence_penalty,
                                frequency_penalty=frequency_penalty, repeat_last_n=repeat_last_n)
        ids = self._prompt_ids(prompt, special)
        request = Request(ids, params, max_tokens, self.ctx, frozenset() if ignore_eos else frozenset(self.stop_ids),
                          top_logprobs=logprobs)
        return GenerationStream(request, self.tokenizer.stream_decoder(skip_special=True), stop, self._submit)

    async def complete(self, prompt: str | Sequence[int], **kwargs: Any) -> CompletionResult:
        """Run ``generate`` to the end; returns text, token ids, finish reason and timings."""
        stream = self.generate(prompt, **kwargs)
        async for _ in stream:
            pass
        return stream.result

    def chat_stream(self, messages: list[dict], **kwargs: Any) -> GenerationStream:
        """Stream the reply to a chat (``[{"role": "user", "content": "..."}]``, rendered with the
        model's template: ``render_chat``) as text pieces, as ``generate`` does:
        ``async for piece in model.chat_stream(messages)``; ``stream.result`` after the last piece.
        ``kwargs`` are ``generate``'s.

        Raises:
            TypeError, ValueError: as ``render_chat`` and ``generate``.
        """
        return self.generate(self.render_chat(messages), **kwargs)

    async def chat(self, messages: list[dict], **kwargs: Any) -> CompletionResult:
        """Complete a chat (``[{"role": "user", "content": "..."}]``) with the model's template;
        the whole reply (``chat_stream`` streams it). ``kwargs`` are ``generate``'s.

        Raises:
            TypeError, ValueError: as ``render_chat`` and ``generate``.
        """
        return await self.complete(self.render_chat(messages), **kwargs)

    async def logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """Teacher-forced logits from position 0.

        Returns:
            float32 array (T, vocab): row t scores the token after ``token_ids[t]``.

        Raises:
            TypeError: ``token_ids`` is not a sequence of ints (a str, bytes, None...).
            ValueError: empty, longer than the context, or an id outside the vocabulary.
        """
        ids = self._prompt_ids(self._token_ids(token_ids, "token_ids"), False, what="token_ids")

        async def job(slot: Any) -> np.ndarray:
            rows = []
            for start in range(0, len(ids), self.chunk):
                chunk = ids[start:start + self.chunk]
                out = await self.runner.run(slot, "score", tokens=chunk, positions=range(start, start + len(chunk)),
                                            outputs=("logits",))
                rows.append(out["logits"][:len(chunk)])
            return np.concatenate(rows)

        return await (await self._job_queue()).submit(job)

    async def _submit(self, request: Request) -> Any:
        """Queue ``request`` (the stream's ``submit``): to the batched scheduler, or as a job on a
        free slot. Returns its handle (``cancel()``, ``await result()``)."""
        if self.batching:
            return await (await self._batcher()).submit(request)

        async def job(slot: Any) -> None:
            try:
                await generate(self.runner, slot, request)
            except trio.BrokenResourceError:
                pass  # the consumer closed the stream: nothing more to do
            finally:
                request.close()

        handle = await (await self._job_queue()).submit_handle(job)
        # a job that ends without running (no slot: the model closed) still ends the stream
        handle.add_done_callback(request.close)
        return _JobRequest(self, handle)

    async def _job_queue(self) -> JobQueue:
        """The job queue of the current ``trio.run``.

        Its workers are system tasks, which end with the run that spawned them, so a model used
        from a later ``trio.run`` (loaded in one, used in the next) gets a fresh queue.

        Raises:
            trio.ClosedResourceError: the model was closed (``aclose``).
        """
        if self._closed:
            raise trio.ClosedResourceError("language model is closed")
        token = trio.lowlevel.current_trio_token()
        if self._jobs is None or self._jobs_token is not token:
            q = JobQueue(self.prepared.slot, workers=self.slots, max_queued=self._max_queued)
            q.spawn_system_workers("xinfer_async.llm-worker")
            self._jobs, self._jobs_token = q, token
        await trio.lowlevel.checkpoint()
        return self._jobs

    async def _batcher(self) -> Any:
        """The batched-decode scheduler of the current ``trio.run`` (a system task, like the job
        queue's workers; a later ``trio.run`` gets a fresh one on the same slot).

        Raises:
            trio.ClosedResourceError: the model was closed (``aclose``).
        """
        if self._closed:
            raise trio.ClosedResourceError("language model is closed")
        token = trio.lowlevel.current_trio_token()
        if self._batch is None or self._batch_token is not token:
            b = Batcher(self.batched_runner, self.batched.slots[0], self.slots, self._max_queued)
            trio.lowlevel.spawn_system_task(b.run, name="xinfer_async.llm-batcher")
            self._batch, self._batch_token = b, token
        await trio.lowlevel.checkpoint()
        return self._batch

    def statistics(self) -> dict:
        """One record of the generation scheduler, the same keys with or without batching:

        - ``"batching"``: whether requests decode in batched steps;
        - ``"capacity"``: requests that run at once (``slots``);
        - ``"running"``: generation requests holding a slot now (with batching, a sequence of the
          batched cache); a request that ended or was cancelled stops counting once its slot is
          free again;
        - ``"waiting"``: generation requests submitted and waiting for one;
        - ``"max_running"``: the most requests that decoded at once so far;
        - ``"scheduler"``: the scheduler's own figures since the model's first request (zeros
          before it): with batching the ``Batcher``'s ``BatchStatistics`` (steps, rows, ...),
          without it the ``JobQueue``'s ``JobStatistics`` (submitted, completed, queue waits...).

        ``logits`` requests run on a slot of their own beside a batched model's sequences and
        are not counted here.
        """
        st: dict[str, Any] = {"batching": self.batching, "capacity": self.slots}
        if self.batching:
            b = self._batch.statistics() if self._batch else BatchStatistics(0, 0, 0, 0, 0)
            st.update(running=b.busy, waiting=b.waiting, max_running=b.max_active, scheduler=b)
        else:
            j = self._jobs.statistics() if self._jobs else JobStatistics(0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0)
            slots = self.prepared.statistics()
            st.update(running=slots.busy, waiting=j.queued, max_running=slots.max_busy, scheduler=j)
        return st

    async def aclose(self) -> None:
        """Stop taking requests, cancel the queued and running ones, and release the slots after
        their fences; a device that ``load`` opened is closed once nothing runs on it any more.

        A request in flight (queued or running, with or without batching) then raises
        ``trio.ClosedResourceError`` to its consumer (from its stream's iteration, ``complete``
        or ``chat``), as does a new ``generate`` submitted afterwards. ``async with model:``
        calls this at the block's end."""
        self._closed = True
        if self._jobs is not None:
            self._jobs.cancel_all()
            self._jobs.close()
        batch, same_run = self._batch, self._batch_token is trio.lowlevel.current_trio_token()
        if batch is not None:
            batch.close()
            if same_run:  # its scheduler ends after its current step's fence
                await batch.stopped.wait()
        if self._jobs_token is trio.lowlevel.current_trio_token():
            await self.prepared.wait_idle()  # running jobs give their slots back after the fence
        self.prepared.close()
        if self.batched is not None:
            self.batched.close()
        if self.owns_device:  # opened by load() from a name: nobody else can close it
            await self.device.queue.wait_idle()
            self.device.close()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> "LanguageModel":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        c = self.config
        return (f"<LanguageModel {self.path.name if hasattr(self.path, 'name') else self.path}: {c.n_layer} layers, "
                f"dim {c.dim}, on {self.device.name}, {self.slots} slots x {self.ctx} tokens>")


class _JobRequest:
    """The handle of an unbatched request (its job on the queue), as the stream uses it: a job
    cancelled because the model was closed (``aclose``) raises ``trio.ClosedResourceError``, as
    the batched scheduler's requests do."""

    def __init__(self, model: LanguageModel, handle: Any):
        self._model = model
        self._handle = handle

    def cancel(self) -> None:
        self._handle.cancel()

    async def result(self) -> Any:
        try:
            return await self._handle.result()
        except JobCancelledError as exc:
            if self._model._closed:
                raise trio.ClosedResourceError("language model is closed") from exc
            raise
