"""Tests of xinfer_async/llm/_perplexity.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from _llm_fixtures import require_model
from xinfer_async.llm._perplexity import perplexity


def test_known_distribution():
    """A model that always predicts the same distribution q: ppl = exp(mean(-log q[next]))."""
    rng = np.random.default_rng()
    vocab = 7
    logits_row = rng.standard_normal(vocab)
    logq = logits_row - np.log(np.exp(logits_row).sum())
    ids = rng.integers(0, vocab, size=53)
    calls = []

    def fn(chunk):
        calls.append(chunk.copy())
        return np.tile(logits_row.astype(np.float32), (chunk.size, 1))

    ppl, n = perplexity(fn, ids, ctx=10)
    # 5 full chunks of 10 (the last 3 tokens dropped), first token of each chunk is context only
    assert n == 5 * 9 and len(calls) == 5
    scored = np.concatenate([ids[s + 1:s + 10] for s in range(0, 50, 10)])
    assert ppl == pytest.approx(np.exp(-logq[scored].mean()), rel=1e-5)
    ppl_all, n_all = perplexity(fn, ids, ctx=10, drop_last=False)
    assert n_all == 5 * 9 + 2
    # a perfect model has perplexity 1
    onehot = lambda chunk: np.where(np.arange(vocab)[None, :] == np.append(chunk[1:], 0)[:, None], 0.0, -1e9)
    assert perplexity(onehot, ids, ctx=10) == (pytest.approx(1.0), 45)


def test_errors():
    fn = lambda c: np.zeros((c.size, 3))
    with pytest.raises(ValueError, match=r"^ctx must be an integer >= 2, got 1$"):
        perplexity(fn, [1, 2, 3], ctx=1)
    with pytest.raises(ValueError, match=r"^nothing to score: 3 tokens with ctx=4$"):
        perplexity(fn, [1, 2, 3], ctx=4)
    with pytest.raises(ValueError, match=r"^logits_fn returned shape \(2, 3\) for 3 tokens, expected \(3, vocab\)$"):
        perplexity(lambda c: np.zeros((2, 3)), [1, 2, 0], ctx=3)


LICENSE = Path("/usr/share/common-licenses/Apache-2.0")


@pytest.mark.model
@pytest.mark.slow
def test_reference_perplexity_apache_license():
    if not LICENSE.is_file():
        pytest.skip(f"{LICENSE} not found")
    from xinfer_async.llm._gguf import load_gguf
    from xinfer_async.llm._reference import ReferenceLlama
    from xinfer_async.llm._tokenizer import Tokenizer

    model = load_gguf(require_model())
    ids = Tokenizer.from_gguf(model.metadata).encode(LICENSE.read_text())
    ppl, n = perplexity(ReferenceLlama(model).logits, ids, ctx=256)
    print(f"\nreference perplexity of {LICENSE} at ctx 256: {ppl:.4f} over {n} predictions "
          f"({len(ids)} tokens; llama.cpp: 23.80)")
    assert n == (len(ids) // 256) * 255
    assert ppl == pytest.approx(23.74, rel=0.01)
