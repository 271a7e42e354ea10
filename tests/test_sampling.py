"""Tests of xinfer_async/llm/_sampling.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from xinfer_async.llm._sampling import Sampler, SamplingParams, log_softmax, token_logprobs

N_DRAWS = 20000


@pytest.fixture
def rng():
    return np.random.default_rng()


def _chi2_ok(counts: np.ndarray, probs: np.ndarray) -> bool:
    """Pearson chi-square against ``probs`` over the support; generous bound (dof + 8 sqrt(2 dof))."""
    support = probs > 0
    exp = probs[support] * counts.sum()
    chi2 = float((((counts[support] - exp) ** 2) / exp).sum())
    dof = max(1, int(support.sum()) - 1)
    return chi2 < dof + 8 * math.sqrt(2 * dof) + 10


def _draw(sampler: Sampler, logits: np.ndarray, n: int = N_DRAWS) -> np.ndarray:
    counts = np.zeros(logits.size, np.int64)
    for _ in range(n):
        counts[sampler.sample(logits)] += 1
    return counts


@pytest.mark.parametrize("kwargs,message", [
    (dict(temperature=-0.5), "temperature must be a finite number >= 0, got -0.5"),
    (dict(temperature=float("nan")), "temperature must be a finite number >= 0, got nan"),
    (dict(temperature=float("inf")), "temperature must be a finite number >= 0, got inf"),
    (dict(top_p=0.0), "top_p must be in (0, 1], got 0.0"),
    (dict(top_p=1.5), "top_p must be in (0, 1], got 1.5"),
    (dict(top_k=-1), "top_k must be an integer >= 0, got -1"),
    (dict(top_k=2.5), "top_k must be an integer >= 0, got 2.5"),
    (dict(seed=-3), "seed must be None or an integer >= 0, got -3"),
])
def test_params_validation(kwargs, message):
    with pytest.raises(ValueError) as info:
        SamplingParams(**kwargs)
    assert str(info.value) == message


def test_params_defaults_frozen():
    p = SamplingParams()
    assert (p.temperature, p.top_k, p.top_p, p.seed) == (0.0, 0, 1.0, None)
    assert p.greedy
    with pytest.raises(AttributeError):
        p.temperature = 1.0  # type: ignore[misc]


def test_greedy_argmax_random(rng):
    s = Sampler(SamplingParams())
    for _ in range(20):
        logits = rng.standard_normal(1000).astype(np.float32)
        assert s.sample(logits) == int(np.argmax(logits))


def test_greedy_ties_lowest_index_and_neg_inf(rng):
    s = Sampler()
    logits = np.full(50, -np.inf, np.float32)
    idx = np.sort(rng.choice(50, size=3, replace=False))
    logits[idx] = 2.5
    assert s.sample(logits) == idx[0]
    logits = np.zeros(10, np.float32)
    assert s.sample(logits) == 0


def test_nan_and_bad_logits():
    s = Sampler(SamplingParams(temperature=1.0))
    x = np.zeros(5, np.float32)
    x[3] = np.nan
    with pytest.raises(ValueError, match=r"^logits contain NaN \(first at index 3\)$"):
        s.sample(x)
    with pytest.raises(ValueError, match=r"^logits contain NaN \(first at index 3\)$"):
        Sampler().sample(x)
    with pytest.raises(ValueError, match=r"^logits are all -inf$"):
        s.sample(np.full(4, -np.inf, np.float32))
    with pytest.raises(ValueError, match=r"^logits contain \+inf \(first at index 0\)$"):
        s.sample(np.array([np.inf, 0.0], np.float32))
    with pytest.raises(ValueError, match=r"^logits must be a non-empty 1-D array, got shape \(2, 2\)$"):
        s.sample(np.zeros((2, 2), np.float32))
    with pytest.raises(ValueError, match=r"^logits must be a float array, got dtype int64$"):
        s.sample(np.zeros(3, np.int64))


def test_temperature_distribution_chi_square(rng):
    logits = rng.standard_normal(8).astype(np.float32)
    t = float(rng.uniform(0.5, 2.0))
    s = Sampler(SamplingParams(temperature=t, seed=int(rng.integers(2**31))))
    z = logits.astype(np.float64) / t
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    np.testing.assert_allclose(s.probabilities(logits), probs, rtol=1e-12)
    assert _chi2_ok(_draw(s, logits), probs)


def test_neg_inf_never_drawn(rng):
    logits = rng.standard_normal(6).astype(np.float32)
    logits[[1, 4]] = -np.inf
    counts = _draw(Sampler(SamplingParams(temperature=1.0)), logits, 5000)
    assert counts[1] == counts[4] == 0


def test_top_k(rng):
    logits = rng.standard_normal(30).astype(np.float32)
    while np.sort(logits)[-3] == np.sort(logits)[-4]:  # a tie at 3rd place: either token may be kept
        logits = rng.standard_normal(30).astype(np.float32)
    s = Sampler(SamplingParams(temperature=1.0, top_k=3))
    top3 = np.argsort(-logits)[:3]
    p = np.exp(logits[top3].astype(np.float64))
    probs = np.zeros(30)
    probs[top3] = p / p.sum()
    np.testing.assert_allclose(s.probabilities(logits), probs, rtol=1e-12)
    counts = _draw(s, logits)
    assert counts.sum() == counts[top3].sum()
    assert _chi2_ok(counts, probs)


def test_top_p_known_distribution():
    probs = np.array([0.1, 0.5, 0.05, 0.3, 0.05])
    logits = np.log(probs).astype(np.float32)
    # mass 0.5 (token 1) < 0.7; 0.5 + 0.3 = 0.8 >= 0.7: keep {1, 3}
    s = Sampler(SamplingParams(temperature=1.0, top_p=0.7))
    np.testing.assert_allclose(s.probabilities(logits), [0, 0.625, 0, 0.375, 0], atol=1e-6)
    # exactly reaching p: 0.5 + 0.3 == 0.8 keeps two, not three
    s = Sampler(SamplingParams(temperature=1.0, top_p=0.8))
    assert np.count_nonzero(s.probabilities(logits)) == 2
    # p below the top token's mass: always at least that one token
    s = Sampler(SamplingParams(temperature=1.0, top_p=0.01, seed=5))
    assert {s.sample(logits) for _ in range(200)} == {1}
    # a seeded sampler (the logits are fixed): with fresh entropy this chi-square (1 dof) exceeded
    # its bound about 2e-6 of the runs
    counts = _draw(Sampler(SamplingParams(temperature=1.0, top_p=0.7, seed=0)), logits)
    assert counts[[0, 2, 4]].sum() == 0
    assert _chi2_ok(counts, np.array([0, 0.625, 0, 0.375, 0]))


def test_top_k_then_top_p(rng):
    logits = rng.standard_normal(100).astype(np.float32) * 2
    s = Sampler(SamplingParams(temperature=0.8, top_k=10, top_p=0.9))
    p = s.probabilities(logits)
    kept = np.flatnonzero(p)
    assert 1 <= kept.size <= 10
    assert set(kept) <= set(np.argsort(-logits)[:10])
    z = logits.astype(np.float64) / 0.8
    full = np.exp(z - z.max())
    top10 = np.sort(full)[::-1][:10]
    top10 /= top10.sum()
    n = int(np.searchsorted(np.cumsum(top10), 0.9)) + 1
    assert kept.size == n
    assert p.sum() == pytest.approx(1.0)


def test_seed_reproducible(rng):
    logits = rng.standard_normal(500).astype(np.float32)
    seed = int(rng.integers(2**31))
    a = Sampler(SamplingParams(temperature=1.0, top_p=0.95, seed=seed))
    b = Sampler(SamplingParams(temperature=1.0, top_p=0.95, seed=seed))
    sa = [a.sample(logits) for _ in range(100)]
    assert sa == [b.sample(logits) for _ in range(100)]
    assert len(set(sa)) > 1


def test_tiny_temperature_is_finite(rng):
    logits = rng.standard_normal(100).astype(np.float32)
    s = Sampler(SamplingParams(temperature=1e-30))
    assert s.sample(logits) == int(np.argmax(logits))


# -- penalties and min-p (issue #20, item 6) -------------------------------------------------------

def _penalties_reference(logits, recent, rep, pres, freq):
    """Token by token, float64, as llama.cpp's llama_sampler_penalties writes it."""
    out = [float(v) for v in logits]
    counts: dict[int, int] = {}
    for t in recent:
        counts[int(t)] = counts.get(int(t), 0) + 1
    for t, c in counts.items():
        v = out[t]
        v = v * rep if v <= 0 else v / rep
        out[t] = v - (c * freq + pres)
    return np.array(out)


@pytest.mark.parametrize("rep,pres,freq", [(1.3, 0.0, 0.0), (0.8, 0.0, 0.0), (1.0, 0.7, 0.0),
                                           (1.0, 0.0, -0.4), (1.1, 0.5, 0.25)])
def test_apply_penalties_matches_reference(rng, rep, pres, freq):
    from xinfer_async.llm._sampling import apply_penalties

    vocab = 97
    logits = (rng.standard_normal(vocab) * 3).astype(np.float32)  # both signs
    recent = rng.integers(0, vocab, 40)  # with repeats
    got = apply_penalties(logits, recent, repeat_penalty=rep, presence_penalty=pres, frequency_penalty=freq)
    want = _penalties_reference(logits, recent, rep, pres, freq)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    untouched = np.setdiff1d(np.arange(vocab), recent)
    assert np.array_equal(got[untouched], logits[untouched].astype(np.float64))
    assert not np.array_equal(got, logits.astype(np.float64))  # something was penalized


def test_apply_penalties_keeps_input_neg_inf_and_rejects_bad_ids(rng):
    from xinfer_async.llm._sampling import apply_penalties

    logits = rng.standard_normal(10)
    logits[3] = -np.inf
    before = logits.copy()
    got = apply_penalties(logits, [3, 3, 4], repeat_penalty=1.5, frequency_penalty=0.5)
    assert np.array_equal(logits, before) and got[3] == -np.inf
    assert np.array_equal(apply_penalties(logits, [], repeat_penalty=2.0), logits)
    with pytest.raises(ValueError, match=r"recent_ids holds token id 10, outside the vocabulary \[0, 10\)"):
        apply_penalties(logits, [1, 10], repeat_penalty=1.2)


def _min_p_reference(probs, min_p):
    p = [float(v) for v in probs]
    top = max(p)
    kept = [v if v >= min_p * top else 0.0 for v in p]
    s = sum(kept)
    return np.array([v / s for v in kept])


@pytest.mark.parametrize("min_p", [0.0, 0.05, 0.3, 1.0])
def test_min_p_filter_matches_reference(rng, min_p):
    from xinfer_async.llm._sampling import min_p_filter

    z = rng.standard_normal(200) * 2
    top = int(np.argmax(z))
    z[(top + 1) % 200] = z[top] - 0.5  # a runner-up every min_p < 0.6 keeps (p ratio e^-0.5)
    z[(top + 2) % 200] = z[top] - 5.0  # and a token every min_p > 0.007 drops
    probs = np.exp(z) / np.exp(z).sum()
    got = min_p_filter(probs, min_p)
    want = _min_p_reference(probs, min_p)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    assert got[np.argmax(probs)] > 0
    if 0 < min_p < 1:
        assert 1 < np.count_nonzero(got) < probs.size


def test_sampler_applies_min_p_after_temperature(rng):
    logits = rng.standard_normal(64) * 2
    T, m = 0.7, 0.2
    s = Sampler(SamplingParams(temperature=T, min_p=m, seed=1))
    z = logits / T
    p = np.exp(z - z.max())
    p /= p.sum()
    np.testing.assert_allclose(s.probabilities(logits), _min_p_reference(p, m), rtol=1e-12, atol=1e-15)
    kept = np.flatnonzero(_min_p_reference(p, m))
    assert set(np.flatnonzero(_draw(s, logits, 2000))) <= set(kept)


@pytest.mark.parametrize("kwargs,message", [
    (dict(min_p=-0.1), "min_p must be in [0, 1], got -0.1"),
    (dict(min_p=1.5), "min_p must be in [0, 1], got 1.5"),
    (dict(repeat_penalty=0.0), "repeat_penalty must be a finite number > 0, got 0.0"),
    (dict(repeat_penalty=float("nan")), "repeat_penalty must be a finite number > 0, got nan"),
    (dict(presence_penalty=2.5), "presence_penalty must be in [-2, 2], got 2.5"),
    (dict(frequency_penalty=-3), "frequency_penalty must be in [-2, 2], got -3"),
    (dict(repeat_last_n=-2), "repeat_last_n must be an integer >= -1, got -2"),
    (dict(repeat_last_n=1.5), "repeat_last_n must be an integer >= -1, got 1.5"),
])
def test_penalty_params_validation(kwargs, message):
    with pytest.raises(ValueError) as info:
        SamplingParams(**kwargs)
    assert str(info.value) == message


def test_penalties_default_off():
    p = SamplingParams()
    assert (p.min_p, p.repeat_penalty, p.presence_penalty, p.frequency_penalty) == (0.0, 1.0, 0.0, 0.0)
    assert not p.penalized
    assert SamplingParams(repeat_penalty=1.1).penalized
    assert not SamplingParams(repeat_penalty=1.1, repeat_last_n=0).penalized


def test_log_softmax_matches_a_float64_logsumexp(rng):
    x = (rng.standard_normal(4096) * 8).astype(np.float32)
    x[7] = 300.0  # exp(300) overflows float64 unless the max is subtracted first
    others = np.delete(np.arange(4096), 7)  # 50 masked ids, never the 300.0
    x[rng.choice(others, 50, replace=False)] = -np.inf
    got = log_softmax(x)
    ref = x.astype(np.float64) - np.logaddexp.reduce(x.astype(np.float64))
    assert got.dtype == np.float64 and np.isneginf(got).sum() == 50
    finite = np.isfinite(ref)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=0, atol=1e-12)
    assert np.logaddexp.reduce(got) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="logits contain NaN"):
        log_softmax(np.array([0.0, np.nan]))


def test_token_logprobs_top_sorted_with_the_chosen(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    while np.unique(x).size < x.size:  # distinct: of tokens tied at the 20th place either may be kept
        x = rng.standard_normal(1000).astype(np.float32)
    x[[11, 12]] = x.max() + 1.0  # a tie at the top: the lower id first
    ref = x.astype(np.float64) - np.logaddexp.reduce(x.astype(np.float64))
    e = token_logprobs(x, 500, 20)
    assert e.token_id == 500 and e.logprob == pytest.approx(ref[500], abs=1e-12)
    order = sorted(range(1000), key=lambda i: (-ref[i], i))[:20]
    assert [i for i, _ in e.top] == order and [i for i, _ in e.top][:2] == [11, 12]
    assert [v for _, v in e.top] == pytest.approx(ref[order], abs=1e-12)
    assert token_logprobs(x, 3, 0).top == ()
    with pytest.raises(ValueError, match=r"top must be an integer in \[0, 20\], got 21"):
        token_logprobs(x, 3, 21)
    with pytest.raises(ValueError, match=r"token_id 1000 is outside the vocabulary \[0, 1000\)"):
        token_logprobs(x, 1000, 2)
