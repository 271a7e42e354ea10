"""Token sampling on the host: penalties, greedy, temperature, top-k, top-p (nucleus), min-p.

Order of operations as in llama.cpp's sampler chain and Hugging Face's logits processors:
penalties on the raw logits (``apply_penalties``: repetition, presence, frequency, over the last
``repeat_last_n`` tokens) -> ``softmax(logits / temperature)`` -> keep the ``top_k`` most likely ->
renormalize, keep the smallest prefix of the sorted distribution whose mass reaches ``top_p``
(Holtzman et al. 2019, "The Curious Case of Neural Text Degeneration") -> keep the tokens whose
probability is at least ``min_p`` times the largest (``min_p_filter``; Nguyen et al. 2024, "Turning
Up the Heat: Min-p Sampling"; after temperature, as Hugging Face's ``MinPLogitsWarper``) ->
renormalize -> draw.

Log-probabilities of generated tokens (``token_logprobs``, the OpenAI API's ``logprobs``) are those
of the raw logits (before the penalties and the temperature), as vLLM's default
``logprobs_mode`` (``raw_logprobs``) and llama-server's ``n_probs`` report them: a log-softmax in
float64 (``log_softmax``).
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np

__all__ = ["SamplingParams", "Sampler", "apply_penalties", "min_p_filter", "log_softmax", "token_logprobs",
           "TokenLogprobs", "MAX_TOP_LOGPROBS"]

#: the most alternatives ``token_logprobs`` gives a token (the OpenAI API's ``top_logprobs`` cap)
MAX_TOP_LOGPROBS = 20


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How to pick the next token.

    Attributes:
        temperature: 0.0 means greedy (argmax); otherwise logits are divided by it. Finite, >= 0.
        top_k: keep only the k most likely tokens; 0 turns it off. Integer >= 0.
        top_p: keep the smallest set of most likely tokens whose probability reaches top_p;
            1.0 turns it off. In (0, 1].
        seed: seed of the numpy ``Generator``; None draws fresh entropy.
        min_p: keep only tokens whose probability (after temperature) is at least ``min_p`` times
            the most likely token's; 0.0 turns it off. In [0, 1].
        repeat_penalty: repetition penalty of llama.cpp (``--repeat-penalty``) and Hugging Face
            (``repetition_penalty``, Keskar et al. 2019, CTRL): the logit of every token seen in
            the last ``repeat_last_n`` tokens is divided by it when positive, multiplied by it when
            negative; 1.0 turns it off. Finite, > 0.
        presence_penalty: OpenAI's presence penalty: subtracted once from the logit of every token
            seen in the last ``repeat_last_n`` tokens; 0.0 turns it off. Finite, in [-2, 2].
        frequency_penalty: OpenAI's frequency penalty: subtracted from a token's logit once per
            time it occurs in the last ``repeat_last_n`` tokens; 0.0 turns it off. Finite, in [-2, 2].
        repeat_last_n: how many of the latest tokens (prompt and generated) the three penalties
            look at; 0 turns them off, -1 means the whole context (as llama.cpp). Integer >= -1.

    Raises:
        ValueError: on construction, for a value outside the ranges above (the message names the
            argument and the value).
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_last_n: int = 64

    def __post_init__(self):
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {t!r}")
        k = self.top_k
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
            raise ValueError(f"top_k must be an integer >= 0, got {k!r}")
        p = self.top_p
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not (0.0 < p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {p!r}")
        s = self.seed
        if s is not None and (isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0):
            raise ValueError(f"seed must be None or an integer >= 0, got {s!r}")
        m = self.min_p
        if isinstance(m, bool) or not isinstance(m, numbers.Real) or not (0.0 <= m <= 1.0):
            raise ValueError(f"min_p must be in [0, 1], got {m!r}")
        r = self.repeat_penalty
        if isinstance(r, bool) or not isinstance(r, numbers.Real) or not math.isfinite(r) or r <= 0:
            raise ValueError(f"repeat_penalty must be a finite number > 0, got {r!r}")
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (-2.0 <= v <= 2.0):
                raise ValueError(f"{name} must be in [-2, 2], got {v!r}")
        n = self.repeat_last_n
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < -1:
            raise ValueError(f"repeat_last_n must be an integer >= -1, got {n!r}")

    @property
    def greedy(self) -> bool:
        """True when sampling is argmax (temperature 0)."""
        return self.temperature == 0.0

    @property
    def penalized(self) -> bool:
        """True when any of the repetition, presence or frequency penalties is on."""
        return self.repeat_last_n != 0 and (self.repeat_penalty != 1.0 or self.presence_penalty != 0.0
                                            or self.frequency_penalty != 0.0)


def apply_penalties(logits: np.ndarray, recent_ids, *, repeat_penalty: float = 1.0,
                    presence_penalty: float = 0.0, frequency_penalty: float = 0.0) -> np.ndarray:
    """Logits with the repetition, presence and frequency penalties applied (llama.cpp's
    ``llama_sampler_penalties``; repetition as Hugging Face's ``RepetitionPenaltyLogitsProcessor``,
    presence and frequency as OpenAI's API reference describes them).

    For each token id ``t`` occurring ``c[t] > 0`` times in ``recent_ids``:
    ``l[t] = l[t] / repeat_penalty`` if ``l[t] > 0`` else ``l[t] * repeat_penalty``, then
    ``l[t] -= c[t] * frequency_penalty + presence_penalty``. Other tokens are unchanged; ``-inf``
    stays ``-inf``.

    Args:
        logits: float (vocab,) raw logits.
        recent_ids: int token ids (any length, ids in ``[0, vocab)``): the window the penalties
            look at (the caller cuts it to the last ``repeat_last_n`` tokens).
        repeat_penalty: > 0; 1.0 is off.
        presence_penalty, frequency_penalty: 0.0 is off.

    Returns:
        a new float64 array (vocab,); ``logits`` is not modified.

    Raises:
        ValueError: ``logits`` is not a non-empty 1-D float array, or an id is outside
            ``[0, vocab)`` (the message names it).
    """
    x = np.array(logits, dtype=np.float64, copy=True)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"logits must be a non-empty 1-D array, got shape {x.shape}")
    ids = np.asarray(recent_ids, dtype=np.int64).reshape(-1)
    if ids.size == 0:
        return x
    bad = ids[(ids < 0) | (ids >= x.size)]
    if bad.size:
        raise ValueError(f"recent_ids holds token id {int(bad[0])}, outside the vocabulary [0, {x.size})")
    counts = np.bincount(ids, minlength=x.size)
    seen = np.flatnonzero(counts)
    v = x[seen]
    if repeat_penalty != 1.0:
        v = np.where(v > 0, v / repeat_penalty, v * repeat_penalty)
    v = v - (counts[seen] * frequency_penalty + presence_penalty)
    x[seen] = v
    return x


def min_p_filter(probs: np.ndarray, min_p: float) -> np.ndarray:
    """The distribution cut to the tokens with ``p >= min_p * max(p)``, renormalized.

    Args:
        probs: float (vocab,) probabilities (non-negative, not all zero; need not sum to 1).
        min_p: in [0, 1]; 0 keeps every token with ``p > 0``.

    Returns:
        float64 (vocab,) summing to 1, zero outside the kept set (the most likely token is always
        kept).

    Raises:
        ValueError: ``min_p`` outside [0, 1], or ``probs`` not a non-empty 1-D array with a positive
            entry.
    """
    if isinstance(min_p, bool) or not isinstance(min_p, numbers.Real) or not (0.0 <= min_p <= 1.0):
        raise ValueError(f"min_p must be in [0, 1], got {min_p!r}")
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1 or p.size == 0 or not (p.max() > 0):
        raise ValueError(f"probs must be a non-empty 1-D array with a positive entry, got shape {p.shape}")
    out = np.where(p >= min_p * p.max(), p, 0.0)
    return out / out.sum()


class Sampler:
    """Draws token ids from logits according to :class:`SamplingParams`.

    A sampler owns its random generator: two samplers built from equal params with a seed draw the
    same sequence for the same logits.
    """

    def __init__(self, params: SamplingParams | None = None):
        self.params = params if params is not None else SamplingParams()
        self._rng = np.random.default_rng(self.params.seed)

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        """The distribution ``sample`` draws from (after temperature, top-k, top-p, min-p; the
        penalties, which need the token history, are the caller's: ``apply_penalties``).

        Args:
            logits: float (vocab,), finite or -inf; temperature must be > 0.

        Returns:
            float64 (vocab,) summing to 1, zero outside the kept set.

        Raises:
            ValueError: logits not 1-D / empty, NaN or +inf, all -inf, or temperature == 0.
        """
        x = self._check(logits)
        if self.params.temperature == 0.0:
            raise ValueError("probabilities() needs temperature > 0, got 0.0 (greedy)")
        z = x / self.params.temperature
        z = z - z.max()
        p = np.exp(z)
        p /= p.sum()
        # order: descending probability, ties by lower index (stable sort on -p)
        order = np.argsort(-p, kind="stable")
        keep = np.count_nonzero(p)
        if self.params.top_k > 0:
            keep = min(keep, self.params.top_k)
        if self.params.top_p < 1.0:
            cum = np.cumsum(p[order[:keep]])
            cum /= cum[-1]  # top-p acts on the distribution renormalized after top-k
            # smallest prefix whose mass reaches top_p (1e-12 absorbs rounding in the cumsum)
            n = int(np.searchsorted(cum, self.params.top_p - 1e-12, side="left")) + 1
            keep = max(1, min(keep, n))
        out = np.zeros_like(p)
        kept = order[:keep]
        out[kept] = p[kept]
        out /= out.sum()
        if self.params.min_p > 0.0:
            out = min_p_filter(out, self.params.min_p)
        return out

    def sample(self, logits: np.ndarray) -> int:
        """Pick one token id.

        Args:
            logits: float32 (or any float) array of shape (vocab,); entries may be -inf (banned
                tokens) but not NaN or +inf.

        Returns:
            the token id, an int in ``[0, vocab)``. With temperature 0 the argmax, the lowest
            index on ties.

        Raises:
            ValueError: logits are not a non-empty 1-D array, contain NaN or +inf, or are all -inf.
        """
        x = self._check(logits)
        if self.params.temperature == 0.0:
            return int(np.argmax(x))  # first maximum on ties
        p = self.probabilities(x)
        kept = np.flatnonzero(p)
        if kept.size == 1:
            return int(kept[0])
        cdf = np.cumsum(p[kept])
        u = self._rng.random() * cdf[-1]
        i = int(np.searchsorted(cdf, u, side="right"))
        return int(kept[min(i, kept.size - 1)])

    @staticmethod
    def _check(logits) -> np.ndarray:
        x = np.asarray(logits)
        if x.ndim != 1 or x.size == 0:
            raise ValueError(f"logits must be a non-empty 1-D array, got shape {x.shape}")
        if not np.issubdtype(x.dtype, np.floating):
            raise ValueError(f"logits must be a float array, got dtype {x.dtype}")
        x = x.astype(np.float64)
        if np.isnan(x).any():
            raise ValueError(f"logits contain NaN (first at index {int(np.flatnonzero(np.isnan(x))[0])})")
        if np.isposinf(x).any():
            raise ValueError(f"logits contain +inf (first at index {int(np.flatnonzero(np.isposinf(x))[0])})")
        if np.isneginf(x).all():
            raise ValueError("logits are all -inf")
        return x


def _logsumexp(logits) -> tuple[np.ndarray, float]:
    """(logits as an array, ``log(sum(exp(logits)))`` in float64, the max subtracted first),
    checked in one pass (the max is NaN with a NaN, +inf with a +inf, -inf when all are -inf).

    Raises:
        ValueError: as ``log_softmax``.
    """
    x = np.asarray(logits)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"logits must be a non-empty 1-D array, got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.floating):
        raise ValueError(f"logits must be a float array, got dtype {x.dtype}")
    m = float(x.max())
    if math.isnan(m):
        raise ValueError(f"logits contain NaN (first at index {int(np.flatnonzero(np.isnan(x))[0])})")
    if m == math.inf:
        raise ValueError(f"logits contain +inf (first at index {int(np.flatnonzero(np.isposinf(x))[0])})")
    if m == -math.inf:
        raise ValueError("logits are all -inf")
    z = x.astype(np.float64)
    z -= m
    np.exp(z, out=z)
    return x, m + math.log(float(z.sum()))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """``log(softmax(logits))`` in float64, numerically stable: ``x - max(x) - log(sum(exp(x - max(x))))``.

    Args:
        logits: float (vocab,); entries may be -inf (probability 0: their result is -inf), not
            NaN or +inf.

    Returns:
        float64 (vocab,), every entry <= 0, ``logsumexp`` of the result 0.

    Raises:
        ValueError: not a non-empty 1-D float array, NaN or +inf, or all -inf.
    """
    x, lse = _logsumexp(logits)
    return x.astype(np.float64) - lse


@dataclasses.dataclass(frozen=True)
class TokenLogprobs:
    """The log-probabilities of one generated token (natural log, of the raw logits' softmax).

    Attributes:
        token_id: the generated token.
        logprob: its log-probability (<= 0; -inf when its logit was -inf).
        top: ``(token_id, logprob)`` of the most likely tokens, most likely first (equal ones: the
            lower id first; which of several tokens tied at the last place is kept is unspecified);
            as many as the request asked (0..``MAX_TOP_LOGPROBS``).
    """

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]


def token_logprobs(logits: np.ndarray, token_id: int, top: int) -> TokenLogprobs:
    """The ``TokenLogprobs`` of ``token_id`` under ``logits`` with the ``top`` most likely tokens:
    ``logits[i] - logsumexp(logits)`` in float64 (the log-softmax, computed for those tokens
    only), the top ones by ``np.argpartition`` of the logits (the log-softmax keeps their order),
    then sorted.

    Args:
        logits: float (vocab,) raw logits of the step that generated ``token_id``.
        token_id: int in ``[0, vocab)``.
        top: int in ``[0, MAX_TOP_LOGPROBS]``.

    Raises:
        ValueError: ``top`` or ``token_id`` out of range, or bad logits (as ``log_softmax``).
    """
    if isinstance(top, bool) or not isinstance(top, numbers.Integral) or not 0 <= top <= MAX_TOP_LOGPROBS:
        raise ValueError(f"top must be an integer in [0, {MAX_TOP_LOGPROBS}], got {top!r}")
    x, lse = _logsumexp(logits)
    if not 0 <= token_id < x.size:
        raise ValueError(f"token_id {token_id} is outside the vocabulary [0, {x.size})")
    best: tuple[tuple[int, float], ...] = ()
    if top:
        k = min(int(top), x.size)
        idx = np.argpartition(x, x.size - k)[x.size - k:]
        idx = idx[np.lexsort((idx, -x[idx]))]  # descending logit, ties by the lower id
        best = tuple((int(i), float(x[i]) - lse) for i in idx)
    return TokenLogprobs(int(token_id), float(x[token_id]) - lse, best)
