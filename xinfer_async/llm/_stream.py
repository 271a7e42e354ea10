"""A request's text stream (``GenerationStream``), its result (``CompletionResult``) and its
``Timings``. The stream runs as a job on a slot (``_job``), or through the batched scheduler."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import TYPE_CHECKING, Any, Sequence

import trio

from ._sampling import Sampler, SamplingParams

if TYPE_CHECKING:
    from ._engine import LanguageModel


@dataclasses.dataclass(frozen=True)
class Timings:
    """Seconds and rates of one request (prefill: the prompt; decode: generated tokens)."""

    queue_wait_s: float
    time_to_first_token_s: float
    prefill_s: float
    decode_s: float
    prompt_tokens: int
    generated_tokens: int

    @property
    def prefill_tok_per_s(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tok_per_s(self) -> float:
        n = self.generated_tokens - 1  # the first token comes from the prefill's logits
        return n / self.decode_s if self.decode_s > 0 and n > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class CompletionResult:
    """A finished request.

    Attributes:
        text: the generated text (a stop string, if one ended it, is not included).
        token_ids: the generated ids (an end-of-sequence id that ended it is included).
        finish_reason: ``"stop"`` (end-of-sequence id or stop string), ``"length"`` (max_tokens
            or the context filled up).
        timings: see ``Timings``.
    """

    text: str
    token_ids: list[int]
    finish_reason: str
    timings: Timings


class GenerationStream:
    """An async iterator of text pieces for one request (from ``LanguageModel.generate``).

    Leaving the loop early (``break`` then ``await stream.aclose()``, or a cancellation or error
    while the loop waits for a piece) cancels the request; its slot goes back once the device is
    done with it. After the last piece, ``result`` holds the
    ``CompletionResult``.
    """

    def __init__(self, model: "LanguageModel", ids: list[int], params: SamplingParams, max_tokens: int,
                 stop: Sequence[str], ignore_eos: bool = False):
        self._model = model
        #: ids that end the generation (none with ignore_eos)
        self._stop_ids = frozenset() if ignore_eos else frozenset(model.stop_ids)
        self._ids = ids
        self._params = params
        self._max_tokens = max_tokens
        self._stop = [s for s in stop if s]
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self._send, self._recv = trio.open_memory_channel(math.inf)
        self._handle = None
        self._decoder = model.tokenizer.stream_decoder(skip_special=True)
        self._text = ""
        self._emitted = 0
        self._tokens: list[int] = []
        self._finish: str | None = None
        self._timings: Timings | None = None
        self._submitted_at = 0.0
        self._first_at = 0.0
        self.result: CompletionResult | None = None

    def __aiter__(self) -> "GenerationStream":
        return self

    async def __anext__(self) -> str:
        try:
            return await self._next()
        except StopAsyncIteration:
            raise
        except BaseException:
            # the consumer was cancelled (a cancel scope around the loop or around ``complete``)
            # or failed: the request must not keep generating on its slot for no one
            if self._handle is not None:
                self._handle.cancel()
            raise

    async def _next(self) -> str:
        if self._handle is None:
            if self._max_tokens == 0:  # nothing to generate: no job, no prefill
                self._finish = "length"
                self._finish_text()
                raise StopAsyncIteration
            self._submitted_at = time.perf_counter()
            if self._model.batching:
                self._handle = await (await self._model._batcher()).submit(self)
            else:
                jobs = await self._model._job_queue()
                self._handle = await jobs.submit_handle(self._job)
                # a job that ends without running (no slot: the model closed) still ends the stream
                self._handle.add_done_callback(self._send.close)
        while True:
            if self.result is not None:
                raise StopAsyncIteration
            try:
                kind, value = await self._recv.receive()
            except trio.EndOfChannel:
                await self._handle.result()  # re-raises the job's error, if any
                piece = self._finish_text()
                if piece:
                    return piece
                raise StopAsyncIteration from None
            if kind == "token":
                if not self._tokens:
                    self._first_at = time.perf_counter()
                self._tokens.append(value)
                self._text += self._decoder.push(value)
                piece = self._release(final=False)
                if piece:
                    return piece
                if self.result is not None:
                    raise StopAsyncIteration
            elif kind == "done":
                self._finish, self._timings = value

    def _release(self, final: bool) -> str:
        for s in self._stop:
            at = self._text.find(s, max(0, self._emitted - len(s)))
            if at >= 0:
                self._text = self._text[:at]
                self._finish = "stop"
                self._handle.cancel()
                return self._finish_text()
        upto = len(self._text) if final else max(self._emitted, len(self._text) - self._hold)
        piece, self._emitted = self._text[self._emitted:upto], upto
        return piece

    def _finish_text(self) -> str:
        if self.result is not None:
            return ""
        if self._finish != "stop" or not self._stop:
            self._text += self._decoder.flush()
        piece = self._text[self._emitted:]
        self._emitted = len(self._text)
        t = self._timings
        if t is None:  # a stop string ended it before the job's figures arrived: the consumer's own
            now = time.perf_counter()
            first = self._first_at or now
            t = Timings(0.0, first - self._submitted_at, first - self._submitted_at, now - first,
                        len(self._ids), len(self._tokens))
        self.result = CompletionResult(self._text, list(self._tokens), self._finish or "stop", t)
        return piece

    async def _job(self, slot: Any) -> None:
        started = time.perf_counter()
        try:
            await self._generate(slot, started)
        except trio.BrokenResourceError:
            pass  # the consumer closed the stream: nothing more to do

    async def _generate(self, slot: Any, started: float) -> None:
        m = self._model
        async with self._send:
            greedy = self._params.greedy  # greedy: argmax on the device, 4 bytes come back a step
            nxt, pos = await m._prefill(slot, self._ids, greedy)
            first = time.perf_counter()
            if greedy:
                finish, n = await m._decode_greedy(slot, nxt, pos, self._max_tokens, self._send.send_nowait,
                                                   self._stop_ids)
            else:
                sampler = Sampler(self._params)
                finish, n = "length", 0
                while n < self._max_tokens:
                    token = sampler.sample(nxt)
                    n += 1
                    self._send.send_nowait(("token", token))
                    if token in self._stop_ids:
                        finish = "stop"
                        break
                    if n >= self._max_tokens or pos >= m.ctx:
                        break
                    nxt = await m._step(slot, "decode", [token], pos)
                    pos += 1
            end = time.perf_counter()
            timings = Timings(started - self._submitted_at, first - self._submitted_at, first - started, end - first,
                              len(self._ids), n)
            self._send.send_nowait(("done", (finish, timings)))

    @property
    def prompt_tokens(self) -> int:
        """Tokens of the prompt (after tokenization and BOS), known as soon as ``generate`` returns."""
        return len(self._ids)

    @property
    def generated_tokens(self) -> int:
        """Tokens generated so far (the pieces read so far hold them; a piece can hold several
        tokens, e.g. the bytes of one character, or none, while a stop string may still match)."""
        return len(self._tokens)

    async def wait_released(self) -> None:
        """Wait until the request has let go of its slot: it ended, or was cancelled (``aclose``)
        and stopped at the next step boundary. With batching its sequence is free when this
        returns; without, its job has ended and the slot goes back after the fence of its last
        step (at once when that has passed). Returns at once for a request that never started;
        never raises the request's error (iterating does). A server awaits this after its client
        went away, to measure the time until the slot is free.
        """
        if self._handle is None:
            await trio.lowlevel.checkpoint()
            return
        try:
            await self._handle.result()
        except Exception:
            pass

    async def aclose(self) -> None:
        """Cancel the request (if still running) and stop the stream."""
        if self._handle is not None:
            self._handle.cancel()
        await self._recv.aclose()

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle is not None and self.result is None:
            try:
                handle.cancel()
            except Exception:
                pass
