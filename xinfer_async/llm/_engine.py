"""``LanguageModel``: a GGUF Llama on the runtime, shared by many trio tasks.

A request flows: caller -> ``JobQueue`` -> a free slot of the ``PreparedModel`` -> per step a
command list from the pool (upload token ids and positions, replay the slot's prefill or decode
plan, download logits) -> submit -> await the fence -> sample -> stream the text -> next step.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import trio

from ..runtime import JobQueue
from ._chat import render_chat
from ._sampling import SamplingParams
from ._stream import CompletionResult, GenerationStream
from ._tokenizer import Tokenizer


class LanguageModel:
    """A loaded model (``await xinfer_async.llm.load(...)``).

    Attributes:
        config: the ``LlamaConfig``.
        tokenizer: the ``Tokenizer`` from the file's metadata.
        device: the device it runs on.
        slots: concurrent requests (each a slot with its own KV cache of ``ctx`` tokens; with
            batching, a sequence of the batched cache).
        ctx: context length per request, tokens.
        batching: generation requests decode together, one batched step for all (see ``_batch``);
            ``logits`` still runs on ``prepared`` (one slot).
    """

    def __init__(self, path: Any, gguf_model: Any, builder: Any, prepared: Any, *, max_queued: int = 256,
                 batched: Any = None, batch_seqs: int = 0, tokenizer: Tokenizer | None = None):
        self.path = path
        #: whether ``aclose`` closes the device (``load`` opened it from a name)
        self.owns_device = False
        self.config = gguf_model.config
        self.metadata = {k: v for k, v in gguf_model.metadata.items() if not k.startswith("tokenizer.ggml.")}
        self.tokenizer = tokenizer if tokenizer is not None else Tokenizer.from_gguf(gguf_model.metadata)
        self.chat_template = gguf_model.metadata.get("tokenizer.chat_template")
        self.add_bos = bool(gguf_model.metadata.get("tokenizer.ggml.add_bos_token", False))
        self.builder = builder
        self.prepared = prepared
        self.device = builder.device
        self.ctx = builder.ctx
        self.chunk = builder.chunk
        self.slots = batch_seqs if batched is not None else prepared.capacity
        self.batching = batched is not None
        self.batched = batched
        self._batch: Any = None
        self._batch_token: Any = None
        self.stop_ids = {i for i in (self.tokenizer.eos_id, self.tokenizer.im_end_id) if i is not None}
        self._max_queued = max_queued
        self._jobs: JobQueue | None = None
        self._jobs_token: Any = None  # the trio run whose system tasks serve ``_jobs``
        self._closed = False

    # -- text ------------------------------------------------------------------------------
    def tokenize(self, text: str, special: bool = False) -> list[int]:
        """Token ids of ``text``; special tokens (``<|im_start|>``...) only when ``special``."""
        return self.tokenizer.encode(text, special=special)

    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of ``ids``.

        Raises:
            ValueError: an id outside the vocabulary.
        """
        return self.tokenizer.decode(ids)

    def _prompt_ids(self, prompt: str | Sequence[int], special: bool, what: str = "prompt") -> list[int]:
        """Validated ids of a text or id prompt (``what`` names it in the errors)."""
        if isinstance(prompt, str):
            ids = self.tokenize(prompt, special=special)
            if self.add_bos and self.tokenizer.bos_id is not None:
                ids = [self.tokenizer.bos_id] + ids
        else:
            ids = [int(i) for i in prompt]
            bad = [i for i in ids if not 0 <= i < self.config.vocab_size]
            if bad:
                raise ValueError(f"token id {bad[0]} is outside the vocabulary [0, {self.config.vocab_size})")
        if not ids:
            hint = "give at least one token of text" if what == "prompt" else "give at least one token"
            raise ValueError(f"{what} is empty: {hint}")
        if len(ids) > self.ctx:
            raise ValueError(f"{what} has {len(ids)} tokens but the context holds {self.ctx} (load with a larger ctx=)")
        return ids

    def render_chat(self, messages: list[dict]) -> list[int]:
        """Prompt ids of a chat: the template's markers as special tokens, message contents as
        plain text (a ``<|im_start|>`` typed by a user stays text).

        Raises:
            ValueError: the model has no chat template, or a malformed message.
        """
        if not self.chat_template:
            raise ValueError("this model file has no tokenizer.chat_template")
        sentinels = [f"\x00xi{i}\x00" for i in range(len(messages))]
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("content"), str):
                raise ValueError(f"message {i} must be a dict with a str 'content'")
        masked = [dict(m, content=s) for m, s in zip(messages, sentinels)]
        text = render_chat(self.chat_template, masked, add_generation_prompt=True)
        ids: list[int] = []
        for i, s in enumerate(sentinels):
            head, sep, text = text.partition(s)
            ids += self.tokenize(head, special=True)
            if sep:
                ids += self.tokenize(messages[i]["content"], special=False)
        ids += self.tokenize(text, special=True)
        return ids

    # -- requests --------------------------------------------------------------------------
    def generate(self, prompt: str | Sequence[int], *, max_tokens: int = 256, temperature: float = 0.0,
                 top_p: float = 1.0, top_k: int = 0, seed: int | None = None, stop: Sequence[str] = (),
                 special: bool = False, ignore_eos: bool = False) -> GenerationStream:
        """Stream the continuation of ``prompt`` as text pieces: ``async for piece in model.generate(...)``.

        Args:
            prompt: text, or token ids.
            max_tokens: generated tokens at most; 0 returns at once with no text (finish_reason
                ``"length"``; the prompt is validated but not run). Generation also
                stops when the context (``ctx``) is full (finish_reason ``"length"``).
            temperature, top_p, top_k, seed: see ``SamplingParams`` (temperature 0 is greedy).
            stop: strings that end the generation (not included in the text).
            special: parse special-token markers in a text prompt.
            ignore_eos: keep generating past end-of-sequence ids (they stay in the text's ids), to
                ``max_tokens`` or the context's end: fixed-length requests, as serving benchmarks
                run them.

        Raises:
            ValueError: an empty prompt, one longer than the context, a negative max_tokens, or
                invalid sampling values (raised here, before anything runs).
        """
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise ValueError(f"max_tokens must be an int >= 0, got {max_tokens!r}")
        if isinstance(stop, str):
            stop = [stop]
        params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        ids = self._prompt_ids(prompt, special)
        return GenerationStream(self, ids, params, max_tokens, stop, ignore_eos=bool(ignore_eos))

    async def complete(self, prompt: str | Sequence[int], **kwargs: Any) -> CompletionResult:
        """Run ``generate`` to the end; returns text, token ids, finish reason and timings."""
        stream = self.generate(prompt, **kwargs)
        async for _ in stream:
            pass
        return stream.result

    async def chat(self, messages: list[dict], **kwargs: Any) -> CompletionResult:
        """Complete a chat (``[{"role": "user", "content": "..."}]``) with the model's template."""
        return await self.complete(self.render_chat(messages), **kwargs)

    async def logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """Teacher-forced logits from position 0.

        Returns:
            float32 array (T, vocab): row t scores the token after ``token_ids[t]``.

        Raises:
            ValueError: empty, longer than the context, or an id outside the vocabulary.
        """
        ids = self._prompt_ids(list(token_ids), False, what="token_ids")

        async def job(slot: Any) -> np.ndarray:
            rows = []
            for start in range(0, len(ids), self.chunk):
                chunk = ids[start:start + self.chunk]
                out = await self._run(slot, "score", chunk, start, last=len(chunk) - 1)
                rows.append(out[:len(chunk)])
            return np.concatenate(rows)

        return await (await self._job_queue()).submit(job)

    # -- steps -----------------------------------------------------------------------------
    async def _run(self, slot: Any, plan: str, tokens: Sequence[int], start: int, last: int,
                   output: int = 0) -> np.ndarray:
        """Run ``tokens`` at positions ``start...`` through ``plan``; download output ``output``
        (0: logits, 1: their argmax)."""
        T = self.builder.plan_tokens[plan]
        tok = np.zeros(T, np.int32)
        tok[:len(tokens)] = tokens
        pos = np.full(T, -1, np.int32)
        pos[:len(tokens)] = np.arange(start, start + len(tokens))
        (out,) = await slot.run([tok, pos, np.array([last], np.int32)], plan=plan, outputs=[output])
        return out

    async def _step(self, slot: Any, plan: str, tokens: Sequence[int], start: int, greedy: bool = False):
        """After ``tokens`` at positions ``start...``: the greedy next token (``int``, sampled on
        the device) when ``greedy``, else the logits (vocab,) float32."""
        out = await self._run(slot, plan, tokens, start, last=len(tokens) - 1, output=1 if greedy else 0)
        return int(out[0]) if greedy else out[0]

    async def _decode_greedy(self, slot: Any, token: int, pos: int, max_tokens: int, emit: Any,
                             stop_ids: Any = None) -> tuple[str, int]:
        """Greedy decode after the prefill: ``token`` (sampled from the prompt) sits at ``pos``.
        Emits each token as ``emit(("token", id))`` and returns (finish reason, tokens emitted).

        Pipelined: the step after token k is submitted before token k is read back; its input
        token is step k's argmax, copied on the device. The host's work for one token (reading it,
        streaming it, recording the next step) overlaps the device's next step, so a step costs
        the larger of the two instead of their sum. The step submitted past the end (a stop token,
        the length) is wasted work: it only writes the KV-cache row after the last token, and the
        slot is given back after its fence. The speculative step takes a command list only when
        one is free (never waits for a second one while holding one), else that step runs after
        the token is read.
        """
        i32 = np.int32
        last = np.zeros(1, i32)
        argmax = slot.output_view(1, "decode")
        inflight: list[Any] = []  # PendingRuns, oldest first

        async def submit(tok: int | None, p: int) -> bool:
            # speculative (tok None): only with a free command list; a task that holds one must
            # not wait for a second (the pool's other holders could be waiting for this one)
            try:
                inflight.append(await slot.start_run(
                    [np.array([tok or 0], i32), np.array([p], i32), last], "decode", outputs=[1],
                    device_inputs=None if tok is not None else {0: argmax}, wait_for_list=tok is not None))
            except trio.WouldBlock:
                return False
            return True

        finish, n = "length", 0
        stop_ids = self.stop_ids if stop_ids is None else stop_ids
        try:
            while True:
                n += 1
                emit(("token", token))
                if token in stop_ids:
                    finish = "stop"
                    break
                if n >= max_tokens or pos >= self.ctx:
                    break
                if not inflight:
                    await submit(token, pos)  # the first step: its token comes from the host
                if n + 1 < max_tokens and pos + 1 < self.ctx:
                    await submit(None, pos + 1)  # speculative: the token after the one in flight
                (ids,) = await inflight.pop(0).result()
                token = int(ids[0])
                pos += 1
        finally:
            for run in inflight:  # wasted steps: their lists go back after their fences
                await run.discard()
        return finish, n

    def _prefill_plan(self, n: int) -> str:
        """The smallest plan that takes ``n`` (<= chunk) prompt tokens in one run."""
        if n == 1:
            return "decode"
        return f"prefill{min(T for T in self.builder.prefill_sizes if T >= n)}"

    async def _prefill(self, slot: Any, ids: list[int], greedy: bool = False) -> tuple[Any, int]:
        nxt = None
        for start in range(0, len(ids), self.chunk):
            chunk = ids[start:start + self.chunk]
            nxt = await self._step(slot, self._prefill_plan(len(chunk)), chunk, start, greedy)
        return nxt, len(ids)

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
        from ._batch import Batcher

        if self._closed:
            raise trio.ClosedResourceError("language model is closed")
        token = trio.lowlevel.current_trio_token()
        if self._batch is None or self._batch_token is not token:
            b = Batcher(self, self.batched.slots[0], self.slots, self._max_queued)
            trio.lowlevel.spawn_system_task(b.run, name="xinfer_async.llm-batcher")
            self._batch, self._batch_token = b, token
        await trio.lowlevel.checkpoint()
        return self._batch

    def statistics(self) -> dict:
        """The job queue's and the slots' statistics (and the batcher's, with batching)."""
        st = {"jobs": self._jobs.statistics() if self._jobs else None, "slots": self.prepared.statistics()}
        if self.batching:
            st["batch"] = self._batch.statistics() if self._batch else None
        return st

    async def aclose(self) -> None:
        """Stop taking requests, cancel the queued and running ones (their callers get an
        error), and release the slots after their fences; a device that ``load`` opened is
        closed once nothing runs on it any more."""
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

    def __repr__(self) -> str:
        c = self.config
        return (f"<LanguageModel {self.path.name if hasattr(self.path, 'name') else self.path}: {c.n_layer} layers, "
                f"dim {c.dim}, on {self.device.name}, {self.slots} slots x {self.ctx} tokens>")
