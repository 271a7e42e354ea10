"""``Request``: one generation request's record and rules, written once for every scheduler.

A scheduler (``_generate.generate`` on a slot, or the batched ``Batcher``) feeds each generated
token to ``Request.advance``, which records it, hands it to the consumer (the stream) and decides
whether the request is done (an end-of-sequence id, ``max_tokens``, the context full). The stream
ends a request on a stop string with ``stop``. ``timings()`` builds the ``Timings``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Sequence

import numpy as np
import trio

from ._sampling import Sampler, SamplingParams, TokenLogprobs, apply_penalties, token_logprobs


@dataclasses.dataclass(frozen=True)
class Timings:
    """Seconds and rates of one request (prefill: the prompt; decode: generated tokens).

    Attributes:
        queue_wait_s: submission to the start of its prefill (a slot or a sequence taken).
        time_to_first_token_s: submission to the first generated token (queue wait included).
        prefill_s: the prompt's run.
        decode_s: the first generated token to the finish.
        prompt_tokens, generated_tokens: token counts.

    A stage the request never reached counts 0.0 seconds: ``max_tokens=0`` (nothing runs) gives
    all four times 0.0; a request cancelled while waiting has only ``queue_wait_s``, one cancelled
    before its first token no ``time_to_first_token_s`` (0.0) and no ``decode_s``.
    """

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


class Request:
    """A generation request: prompt, sampling, limits, stop ids, the generated tokens, the
    finish reason and the clock readings for ``Timings``.

    Args:
        prompt_ids: the validated prompt (1 <= len <= ctx).
        params: sampling parameters (``params.greedy``: argmax on the device).
        max_tokens: generated tokens at most (>= 0).
        ctx: the context length, tokens: token k (1-based) is written at position
            ``len(prompt_ids) + k - 1``, which must be < ``ctx`` for a token k + 1 to follow.
        stop_ids: ids that end the request (included in ``tokens``); empty for ``ignore_eos``.
        top_logprobs: None, or record each generated token's ``TokenLogprobs`` with this many
            (0..20) most likely alternatives: the scheduler then takes every token from the logits
            on the host (``greedy`` is False) and hands them to ``advance``.

    Attributes:
        tokens: the generated ids so far (list of int).
        logprobs: with ``top_logprobs``, one ``TokenLogprobs`` per token of ``tokens`` (list);
            else empty.
        greedy: see the property of that name (fixed at construction).
        finish_reason: None while running, then ``"stop"`` or ``"length"``.
        received: the consumer's end of the token channel (ints); it ends when the scheduler is
            done with the request (``close``).
    """

    def __init__(self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, ctx: int,
                 stop_ids: frozenset[int] = frozenset(), top_logprobs: int | None = None):
        self.prompt_ids = list(prompt_ids)
        self.params = params
        self.max_tokens = max_tokens
        self.ctx = ctx
        self.stop_ids = frozenset(stop_ids)
        self.top_logprobs = top_logprobs
        #: True when the next token is the argmax of the raw logits, so a scheduler may take it
        #: on the device (4 bytes back a step): temperature 0, no penalty and no log-probabilities.
        #: Otherwise the logits come back and ``sample`` picks the token (greedy with a penalty:
        #: the argmax of the penalized logits). An attribute, read per token by the schedulers.
        self.greedy = params.greedy and not params.penalized and top_logprobs is None
        #: generated tokens at most: ``max_tokens`` and the context's end
        self._limit = min(max_tokens, ctx - len(self.prompt_ids) + 1)
        self.tokens: list[int] = []
        self.logprobs: list[TokenLogprobs] = []
        self.finish_reason: str | None = None
        self._sampler: Sampler | None = None
        self._send, self.received = trio.open_memory_channel(math.inf)
        #: the scheduler is done with the request (``close``): no token follows those in ``received``
        self.closed = False
        #: clock readings (``time.perf_counter``), None until the stage is reached
        self.submitted_at: float | None = None
        self.started_at: float | None = None
        self.prefilled_at: float | None = None
        self.ended_at: float | None = None

    def penalty_window(self) -> list[int]:
        """The token ids the penalties look at for the next token: the last ``repeat_last_n``
        (``-1``: all) of the prompt followed by the generated tokens, as llama.cpp (its
        ``llama-cli`` and server accept the prompt's tokens into the sampler before generating)."""
        history = self.prompt_ids + self.tokens
        n = self.params.repeat_last_n
        return history if n < 0 else history[len(history) - n:] if n > 0 else []

    def sample(self, logits: np.ndarray) -> int:
        """A token from ``logits`` (vocab,) float32: the penalties over ``penalty_window()``
        (``apply_penalties``), then the request's sampling parameters (its own seeded generator;
        temperature 0: the argmax)."""
        if self._sampler is None:
            self._sampler = Sampler(self.params)
        p = self.params
        if p.penalized:
            logits = apply_penalties(logits, self.penalty_window(), repeat_penalty=p.repeat_penalty,
                                     presence_penalty=p.presence_penalty, frequency_penalty=p.frequency_penalty)
        return self._sampler.sample(logits)

    def remaining(self) -> int:
        """Tokens this request may still generate (``max_tokens`` and the context's end)."""
        return self._limit - len(self.tokens)

    # -- the clock -------------------------------------------------------------------------
    def mark_submitted(self) -> None:
        self.submitted_at = time.perf_counter()

    def mark_started(self) -> None:
        """A scheduler took the request (a slot or a sequence): the prefill starts."""
        self.started_at = time.perf_counter()

    def mark_prefilled(self) -> None:
        """The prompt has all run: the first token follows from its logits."""
        self.prefilled_at = time.perf_counter()

    # -- the rules -------------------------------------------------------------------------
    def advance(self, token: int, logits: np.ndarray | None = None) -> str | None:
        """Record the next generated ``token``, hand it to the consumer, and return the finish
        reason when the request is done with it (also when it had ended already: a stop string),
        else None.

        Args:
            token: the generated id.
            logits: float (vocab,) raw logits of the step that generated it (before penalties):
                needed with ``top_logprobs`` (its ``TokenLogprobs`` is recorded from them), else
                ignored.

        Raises:
            trio.BrokenResourceError: the consumer closed its end (the token is recorded).
            ValueError: ``top_logprobs`` is set and ``logits`` is None.
        """
        if self.finish_reason is not None:
            return self.finish_reason
        token = int(token)
        if self.top_logprobs is not None:
            if logits is None:
                raise ValueError("advance: a request with top_logprobs needs the step's logits")
            self.logprobs.append(token_logprobs(logits, token, self.top_logprobs))
        self.tokens.append(token)
        if token in self.stop_ids:
            self._finish("stop")
        elif len(self.tokens) >= self._limit:
            self._finish("length")
        self._send.send_nowait(token)
        return self.finish_reason

    def _finish(self, reason: str) -> None:
        self.finish_reason = reason
        self.ended_at = time.perf_counter()

    def stop(self, keep: int, reason: str = "stop") -> None:
        """The consumer ends the request after its first ``keep`` generated tokens (a stop string
        found in their text; ``max_tokens`` 0: ``stop(0, "length")``): the finish reason becomes
        ``reason`` whatever the scheduler decided for later tokens, which are dropped. The
        scheduler sees it at its next ``advance``."""
        if self.finish_reason is None:
            self._finish(reason)
        self.finish_reason = reason
        del self.tokens[keep:]
        del self.logprobs[keep:]

    def close(self) -> None:
        """The scheduler is done with the request (finished, cancelled or failed): the consumer's
        ``received`` ends after the tokens it holds. Idempotent."""
        self.closed = True
        self._send.close()

    def timings(self) -> Timings:
        """The ``Timings`` (decode up to the finish, or to now while running; a stage not reached
        counts 0.0, see ``Timings``)."""
        end = self.ended_at if self.ended_at is not None else time.perf_counter()
        sub, start, pre = self.submitted_at, self.started_at, self.prefilled_at
        if sub is None:  # never submitted (max_tokens 0): nothing ran
            return Timings(0.0, 0.0, 0.0, 0.0, len(self.prompt_ids), len(self.tokens))
        queue = (start if start is not None else end) - sub
        prefill = (pre if pre is not None else end) - start if start is not None else 0.0
        first = pre - sub if pre is not None and self.tokens else 0.0
        decode = end - pre if pre is not None and self.tokens else 0.0
        return Timings(queue, first, prefill, decode, len(self.prompt_ids), len(self.tokens))
