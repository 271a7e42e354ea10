"""Repetition / presence / frequency penalties and min_p through ``generate`` (xinfer_async/llm/_request.py,
_generate.py, _batch.py) on the real SmolLM2-135M (cpu), against an independent reference: a numpy
float64 loop over the model's teacher-forced ``logits()`` that applies llama.cpp's penalty rule
(``llama_sampler_penalties_apply``) token by token, written out here (not ``apply_penalties``).
"""

from __future__ import annotations

import numpy as np
import pytest
import trio

from _llm_fixtures import load_model_sync

pytestmark = pytest.mark.model

CTX = 128
TOKENS = 10
PROMPT = "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat"
CASES = [
    dict(repeat_penalty=1.3),  # repeat_last_n 64 (the default)
    dict(presence_penalty=1.5, frequency_penalty=1.5, repeat_last_n=-1),
    dict(repeat_penalty=1.1, frequency_penalty=0.3, repeat_last_n=8),
]


@pytest.fixture(scope="module")
def unbatched():
    m = load_model_sync(slots=1, ctx=CTX, batching=False)
    yield m
    trio.run(m.aclose)


@pytest.fixture(scope="module")
def batched():
    m = load_model_sync(slots=4, ctx=CTX, batching=True)
    yield m
    trio.run(m.aclose)


def _penalized(logits, window, repeat_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0):
    x = np.asarray(logits, np.float64).copy()
    for t in set(window):
        c = window.count(t)
        x[t] = x[t] * repeat_penalty if x[t] <= 0 else x[t] / repeat_penalty
        x[t] -= c * frequency_penalty + presence_penalty
    return x


async def _reference(model, prompt_ids, n, repeat_last_n=64, **pen) -> tuple[list[int], list[float]]:
    """Greedy tokens of the penalized logits, and each step's margin (top-1 minus top-2)."""
    ids, out, margins = list(prompt_ids), [], []
    for _ in range(n):
        logits = (await model.logits(ids))[-1]
        window = ids if repeat_last_n < 0 else ids[len(ids) - repeat_last_n:] if repeat_last_n else []
        x = _penalized(logits, window, **pen)
        top = np.sort(x)[-2:]
        t = int(np.argmax(x))
        out.append(t)
        margins.append(float(top[1] - top[0]))
        ids.append(t)
    return out, margins


def _agree_until_small_margin(got, want, margins, tol=1e-3, at_least=6):
    """Equal token by token until the reference's margin is below ``tol`` (a tie the float32
    decode and score plans may break differently); at least ``at_least`` tokens compared."""
    n = next((i for i, m in enumerate(margins) if m < tol), len(margins))
    assert n >= at_least, f"the reference has a near tie at token {n}: pick another prompt"
    assert got[:n] == want[:n], (got, want)


@pytest.mark.parametrize("pen", CASES)
async def test_greedy_with_penalties_matches_the_reference(unbatched, pen):
    ids = unbatched.tokenize(PROMPT)
    want, margins = await _reference(unbatched, ids, TOKENS, **pen)
    plain, _ = await _reference(unbatched, ids, TOKENS)
    assert want != plain  # the penalty does change this greedy continuation
    r = await unbatched.complete(ids, max_tokens=TOKENS, ignore_eos=True, **pen)
    _agree_until_small_margin(r.token_ids, want, margins)
    assert r.token_ids != plain


async def test_penalized_requests_batched_equal_each_alone(unbatched, batched):
    """Three penalized requests and a plain greedy one (device argmax) decode together on the
    batched model: each equals its run alone on the unbatched model."""
    ids = unbatched.tokenize(PROMPT)
    kinds = CASES + [dict()]
    alone = [(await unbatched.complete(ids, max_tokens=TOKENS, ignore_eos=True, **k)).token_ids for k in kinds]
    got = [None] * len(kinds)

    async def one(i):
        got[i] = (await batched.complete(ids, max_tokens=TOKENS, ignore_eos=True, **kinds[i])).token_ids

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            for i in range(len(kinds)):
                nursery.start_soon(one, i)
    assert got == alone
    assert batched.statistics()["scheduler"].max_active >= 2  # they did share steps


async def test_min_p_one_is_greedy_and_sampling_with_min_p_is_reproducible(unbatched, batched):
    """min_p=1 keeps only the most likely token: sampling at temperature 1 gives the greedy text.
    A seeded min_p request gives the same tokens alone and batched."""
    ids = unbatched.tokenize("Once upon a time")
    greedy = (await unbatched.complete(ids, max_tokens=TOKENS, ignore_eos=True)).token_ids
    r = await unbatched.complete(ids, max_tokens=TOKENS, ignore_eos=True, temperature=1.0, min_p=1.0, seed=1)
    assert r.token_ids == greedy
    kw = dict(max_tokens=TOKENS, ignore_eos=True, temperature=1.5, min_p=0.05, seed=7, repeat_penalty=1.2)
    a = (await unbatched.complete(ids, **kw)).token_ids
    b = (await batched.complete(ids, **kw)).token_ids
    assert a == b


@pytest.mark.parametrize("kwargs, msg", [
    (dict(repeat_penalty=0), "repeat_penalty must be a finite number > 0, got 0"),
    (dict(presence_penalty=3), "presence_penalty must be in [-2, 2], got 3"),
    (dict(frequency_penalty=-2.5), "frequency_penalty must be in [-2, 2], got -2.5"),
    (dict(min_p=1.5), "min_p must be in [0, 1], got 1.5"),
    (dict(repeat_last_n=-2), "repeat_last_n must be an integer >= -1, got -2"),
])
async def test_invalid_penalties_name_the_argument(unbatched, kwargs, msg):
    import re

    with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
        unbatched.generate("hello", **kwargs)
