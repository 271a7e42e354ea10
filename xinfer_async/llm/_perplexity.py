"""Perplexity over fixed-size chunks.

The text's token ids are cut into consecutive, non-overlapping chunks of ``ctx`` tokens; the
remainder shorter than ``ctx`` is dropped by default, as llama.cpp's ``llama-perplexity`` does. Each
chunk is evaluated on its own from position 0, and every position that has a successor inside the
chunk is scored: the chunk's first token is context only, so a chunk contributes ctx - 1
predictions. (``llama-perplexity`` scores only the second half of each chunk; the figures differ
slightly.)
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

__all__ = ["perplexity"]


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    z -= z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def perplexity(logits_fn: Callable[[np.ndarray], np.ndarray], ids: Sequence[int], ctx: int,
               drop_last: bool = True) -> tuple[float, int]:
    """``exp(mean negative log-likelihood)`` of ``ids`` under ``logits_fn``.

    Args:
        logits_fn: maps int64 token ids (n,) to logits (n, vocab) (any float dtype), row t
            scoring token t+1, evaluated from position 0 (e.g. ``ReferenceLlama.logits``).
        ids: the token ids of the text.
        ctx: chunk length in tokens, >= 2.
        drop_last: leave out a final chunk shorter than ``ctx`` (default, as llama.cpp does); when
            False it is scored too if it has at least 2 tokens.

    Returns:
        ``(ppl, count)``: the perplexity (float) and the number of scored positions (int).

    Raises:
        ValueError: ``ctx`` < 2, fewer than 2 tokens to score, or ``logits_fn`` returned the wrong
            number of rows.
    """
    if isinstance(ctx, bool) or not isinstance(ctx, (int, np.integer)) or ctx < 2:
        raise ValueError(f"ctx must be an integer >= 2, got {ctx!r}")
    ids = np.asarray(ids, dtype=np.int64)
    nll = 0.0
    count = 0
    for start in range(0, ids.size, ctx):
        chunk = ids[start:start + ctx]
        if chunk.size < 2 or (drop_last and chunk.size < ctx):
            continue
        logits = np.asarray(logits_fn(chunk))
        if logits.ndim != 2 or logits.shape[0] != chunk.size:
            raise ValueError(
                f"logits_fn returned shape {logits.shape} for {chunk.size} tokens, expected ({chunk.size}, vocab)"
            )
        lp = _log_softmax(logits[:-1])  # (n-1, vocab)
        nll -= float(lp[np.arange(chunk.size - 1), chunk[1:]].sum())
        count += chunk.size - 1
    if count == 0:
        raise ValueError(f"nothing to score: {ids.size} tokens with ctx={ctx}")
    return float(np.exp(nll / count)), count
