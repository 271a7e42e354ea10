"""A request's text stream (``GenerationStream``) and its result (``CompletionResult``).

The stream only consumes: it submits its ``Request`` once (through the function the model hands
it), turns the tokens the scheduler delivers into text, holds back what could still become a stop
string, and tells the request when a stop string ended it (``Request.stop``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Awaitable, Callable, Sequence

import trio

from ._request import Request, Timings
from ._sampling import TokenLogprobs


@dataclasses.dataclass(frozen=True)
class CompletionResult:
    """A finished request.

    Attributes:
        text: the generated text (a stop string, if one ended it, is not included).
        token_ids: the generated ids (an end-of-sequence id that ended it is included).
        finish_reason: ``"stop"`` (end-of-sequence id or stop string), ``"length"`` (max_tokens
            or the context filled up).
        timings: see ``Timings``.
        logprobs: with ``generate(logprobs=k)``, one ``TokenLogprobs`` per id of ``token_ids``;
            else None.
        text_offsets: the offset in ``text`` (characters) where each token's text begins, one per
            id of ``token_ids`` (a token whose bytes end in the middle of a character has the
            offset of the text before that character; tokens after a stop string's start have
            offsets past it).
    """

    text: str
    token_ids: list[int]
    finish_reason: str
    timings: Timings
    logprobs: list[TokenLogprobs] | None = None
    text_offsets: list[int] = dataclasses.field(default_factory=list)


class GenerationStream:
    """An async iterator of text pieces for one request (from ``LanguageModel.generate``).

    Leaving the loop early (``break`` then ``await stream.aclose()``, or a cancellation or error
    while the loop waits for a piece) cancels the request; its slot goes back once the device is
    done with it. After the last piece, ``result`` holds the ``CompletionResult``.

    Args:
        request: the ``Request`` (not yet submitted).
        decoder: a ``StreamDecoder`` (ids -> text, incrementally).
        stop: strings that end the generation (not included in the text).
        submit: ``await submit(request)`` queues the request and returns its handle
            (``cancel()``, ``await result()``).
    """

    def __init__(self, request: Request, decoder: Any, stop: Sequence[str],
                 submit: Callable[[Request], Awaitable[Any]]):
        self.request = request
        self._submit = submit
        self._stop = [s for s in stop if s]
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self._handle: Any = None
        self._decoder = decoder
        self._text = ""
        self._emitted = 0
        self._consumed = 0  # tokens turned into text
        self._offsets: list[int] = []  # per consumed token: len(text) before it
        self.result: CompletionResult | None = None

    @property
    def token_count(self) -> int:
        """Generated tokens turned into text so far (those the returned pieces come from, and
        any held back while they could still begin a stop string)."""
        return self._consumed

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
        req = self.request
        if self._handle is None:
            if req.max_tokens == 0:  # nothing to generate: no job, no prefill
                req.stop(0, "length")
                self._finish_text()
                raise StopAsyncIteration
            req.mark_submitted()
            self._handle = await self._submit(req)
        while True:
            if self.result is not None:
                raise StopAsyncIteration
            try:
                token = await req.received.receive()
            except trio.EndOfChannel:
                await self._handle.result()  # re-raises the job's error, if any
                piece = self._finish_text()
                if piece:
                    return piece
                raise StopAsyncIteration from None
            self._consumed += 1
            self._offsets.append(len(self._text))
            self._text += self._decoder.push(token)
            piece = self._release()
            if piece:
                return piece
            if self.result is not None:
                raise StopAsyncIteration

    def read_nowait(self) -> str:
        """The text of every token already delivered, without waiting: ``""`` when none is (or
        the stream has ended or not started). For a consumer that wakes once per several tokens
        (a server writing one event per interval): ``await anext(stream)`` for the first piece,
        then this for the rest that came meanwhile. The end of the stream (and the request's
        error, if any) is left to the next ``anext``.
        """
        if self._handle is None or self.result is not None:
            return ""
        received = self.request.received
        if not self._stop:  # nothing held back: the tokens' text as it comes, one string at the end
            push, offsets, n, parts = self._decoder.push, self._offsets, len(self._text), []
            while True:
                try:
                    token = received.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break
                offsets.append(n)
                parts.append(push(token))
                n += len(parts[-1])
            if not parts:
                return ""
            self._consumed += len(parts)
            text = "".join(parts)
            self._text += text
            self._emitted = n
            return text
        pieces = []
        while self.result is None:
            try:
                token = received.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            self._consumed += 1
            self._offsets.append(len(self._text))
            self._text += self._decoder.push(token)
            piece = self._release()
            if piece:
                pieces.append(piece)
        return "".join(pieces)

    def at_end(self) -> bool:
        """True when the scheduler is done with the request and every token it delivered has been
        read: the next ``anext`` returns at once, with the last text held back (if any) or the end
        (or the request's error). A consumer that writes one event per wake-up (a server) asks
        this after ``read_nowait`` to send its last piece and the end together."""
        if self._handle is None or not self.request.closed:
            return False
        return self.request.received.statistics().current_buffer_used == 0

    def _release(self) -> str:
        for s in self._stop:
            at = self._text.find(s, max(0, self._emitted - len(s)))
            if at >= 0:
                self._text = self._text[:at]
                self.request.stop(self._consumed)
                self._handle.cancel()
                return self._finish_text()
        upto = max(self._emitted, len(self._text) - self._hold)
        piece, self._emitted = self._text[self._emitted:upto], upto
        return piece

    def _finish_text(self) -> str:
        if self.result is not None:
            return ""
        req = self.request
        if req.finish_reason != "stop" or not self._stop:
            self._text += self._decoder.flush()
        piece = self._text[self._emitted:]
        self._emitted = len(self._text)
        n = len(req.tokens)
        self.result = CompletionResult(self._text, list(req.tokens), req.finish_reason or "stop", req.timings(),
                                       list(req.logprobs[:n]) if req.top_logprobs is not None else None,
                                       self._offsets[:n])
        return piece

    @property
    def logprobs(self) -> list[TokenLogprobs]:
        """The ``TokenLogprobs`` of the generated tokens so far (with ``generate(logprobs=k)``; else
        empty): entry i is that of token i, ``logprobs[:token_count]`` those of the tokens whose
        text was returned or is held back. Read-only view: do not modify."""
        return self.request.logprobs

    @property
    def text_offsets(self) -> list[int]:
        """Per token turned into text so far (``token_count`` of them): the offset in the text, in
        characters, where its text begins. Read-only view: do not modify."""
        return self._offsets

    @property
    def prompt_tokens(self) -> int:
        """Tokens of the prompt (after tokenization and BOS), known as soon as ``generate`` returns."""
        return len(self.request.prompt_ids)

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
        await self.request.received.aclose()

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle is not None and self.result is None:
            try:
                handle.cancel()
            except Exception:
                pass
