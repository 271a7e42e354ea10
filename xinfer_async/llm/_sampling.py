"""Token sampling on the host: greedy, temperature, top-k, top-p (nucleus).

Order of operations as in llama.cpp's sampler chain and Hugging Face's logits warpers:
``softmax(logits / temperature)`` -> keep the ``top_k`` most likely -> renormalize, keep the
smallest prefix of the sorted distribution whose mass reaches ``top_p`` (Holtzman et al. 2019, "The Curious Case of
Neural Text Degeneration") -> renormalize -> draw.
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np

__all__ = ["SamplingParams", "Sampler"]


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How to pick the next token.

    Attributes:
        temperature: 0.0 means greedy (argmax); otherwise logits are divided by it. Finite, >= 0.
        top_k: keep only the k most likely tokens; 0 turns it off. Integer >= 0.
        top_p: keep the smallest set of most likely tokens whose probability reaches top_p;
            1.0 turns it off. In (0, 1].
        seed: seed of the numpy ``Generator``; None draws fresh entropy.

    Raises:
        ValueError: on construction, for a value outside the ranges above (the message names the
            argument and the value).
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

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

    @property
    def greedy(self) -> bool:
        """True when sampling is argmax (temperature 0)."""
        return self.temperature == 0.0


class Sampler:
    """Draws token ids from logits according to :class:`SamplingParams`.

    A sampler owns its random generator: two samplers built from equal params with a seed draw the
    same sequence for the same logits.
    """

    def __init__(self, params: SamplingParams | None = None):
        self.params = params if params is not None else SamplingParams()
        self._rng = np.random.default_rng(self.params.seed)

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        """The distribution ``sample`` draws from (after temperature, top-k, top-p).

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
