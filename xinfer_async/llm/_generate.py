"""One request on one slot (the unbatched scheduler): ``generate`` -> ``prefill`` -> ``decode_greedy``
or ``decode_sampled``, in the manner of gpt-fast's ``generate`` -> ``prefill`` -> ``decode_n_tokens``.

The plans run through a ``Runner``; every generated token goes to ``Request.advance``, which
decides when the request ends.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import trio

from ._request import Request
from ._runner import Runner, StepRun


async def generate(runner: Runner, slot: Any, request: Request) -> None:
    """Run ``request`` (max_tokens >= 1) on ``slot`` to its end. Greedy requests without a penalty
    or log-probabilities (``request.greedy``) take the argmax on the device (4 bytes come back a
    step); the others download the logits (``decode_sampled``: ``request.sample`` penalizes them).

    Raises:
        trio.BrokenResourceError: the consumer closed its end of ``request.received``.
    """
    request.mark_started()
    output = "argmax" if request.greedy else "logits"
    out = await prefill(runner, slot, request.prompt_ids, output)
    request.mark_prefilled()
    if request.greedy:
        await decode_greedy(runner, slot, request, int(out))
    else:
        await decode_sampled(runner, slot, request, out)


async def prefill(runner: Runner, slot: Any, ids: Sequence[int], output: str) -> Any:
    """Run the prompt ``ids`` from position 0, a chunk a run; the ``output`` (``"argmax"``: an
    int32 id; ``"logits"``: float32 (vocab,)) after its last token."""
    out = None
    for start in range(0, len(ids), runner.chunk):
        chunk = ids[start:start + runner.chunk]
        out = await runner.run(slot, runner.prefill_plan(len(chunk)), tokens=chunk,
                               positions=range(start, start + len(chunk)), outputs=(output,))
    return out[output][0]


async def decode_sampled(runner: Runner, slot: Any, request: Request, logits: np.ndarray) -> None:
    """Sample from ``logits`` (after the prompt), one decode run a token, until the request ends
    (``request.sample``: the penalties over the tokens so far, then the sampler; greedy with a
    penalty is the argmax of the penalized logits; ``request.advance`` takes the raw logits too,
    for the token's log-probabilities when the request asks them)."""
    pos = len(request.prompt_ids)  # where the next sampled token is written
    while request.advance(token := request.sample(logits), logits) is None:
        out = await runner.run(slot, "decode", tokens=[token], positions=[pos], outputs=("logits",))
        logits = out["logits"][0]
        pos += 1


async def decode_greedy(runner: Runner, slot: Any, request: Request, token: int) -> None:
    """Greedy decode after the prefill: ``token`` (the prompt's argmax) sits at the position after
    the prompt.

    Pipelined: the step after token k is submitted before token k is read back; its input token
    is step k's argmax, copied on the device. The host's work for one token (reading it,
    streaming it, recording the next step) overlaps the device's next step, so a step costs the
    larger of the two instead of their sum. The step submitted past the end (a stop token, the
    length) is wasted work: it only writes the KV-cache row after the last token, and the slot is
    given back after its fence. The speculative step takes a command list only when one is free
    (never waits for a second one while holding one), else that step runs after the token is read.
    """
    pos = len(request.prompt_ids)
    inflight: list[StepRun] = []  # oldest first

    async def submit(tok: int | None, p: int) -> None:
        try:
            inflight.append(await runner.start(slot, "decode", tokens=None if tok is None else [tok], positions=[p],
                                               outputs=("argmax",), speculative=tok is None))
        except trio.WouldBlock:
            pass

    try:
        while request.advance(token) is None:
            if not inflight:
                await submit(token, pos)  # the first step: its token comes from the host
            if request.remaining() >= 2:
                await submit(None, pos + 1)  # speculative: the token after the one in flight
            token = int((await inflight.pop(0).result())["argmax"][0])
            pos += 1
    finally:
        for run in inflight:  # wasted steps: their lists go back after their fences
            await run.discard()
