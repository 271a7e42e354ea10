"""``generate(logprobs=k)`` (xinfer_async/llm/_request.py, _generate.py, _batch.py, _stream.py) on the
real SmolLM2-135M (cpu), against an independent reference: a numpy float64 log-softmax
(``np.logaddexp.reduce``) of the model's teacher-forced ``logits()`` of prompt + generated tokens.
"""

from __future__ import annotations

import numpy as np
import pytest
import trio

from _llm_fixtures import load_model_sync

pytestmark = pytest.mark.model

CTX = 128
TOKENS = 10
PROMPT = "The cat sat on the mat. The cat"


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


async def _reference(model, prompt_ids: list[int], token_ids: list[int]) -> np.ndarray:
    """float64 (len(token_ids), vocab): log-softmax of the logits each token was generated from."""
    rows = (await model.logits(prompt_ids + token_ids[:-1])).astype(np.float64)[len(prompt_ids) - 1:]
    return rows - np.logaddexp.reduce(rows, axis=1, keepdims=True)


def _check(result, ref: np.ndarray, k: int) -> None:
    assert len(result.logprobs) == len(result.token_ids)
    for j, (t, e) in enumerate(zip(result.token_ids, result.logprobs)):
        assert e.token_id == t
        assert e.logprob == pytest.approx(ref[j, t], abs=1e-9, rel=0)
        best = np.argsort(-ref[j], kind="stable")[:k]
        assert [i for i, _ in e.top] == best.tolist()
        assert [v for _, v in e.top] == pytest.approx(ref[j, best], abs=1e-9, rel=0)


@pytest.mark.parametrize("which", ["unbatched", "batched"])
async def test_greedy_logprobs_equal_the_reference_and_keep_the_tokens(which, unbatched, batched):
    model = unbatched if which == "unbatched" else batched
    ids = model.tokenize(PROMPT)
    plain = await model.complete(ids, max_tokens=TOKENS, ignore_eos=True)
    r = await model.complete(ids, max_tokens=TOKENS, ignore_eos=True, logprobs=5)
    assert r.token_ids == plain.token_ids and r.text == plain.text and plain.logprobs is None
    _check(r, await _reference(model, ids, r.token_ids), 5)
    assert all(e.top[0][0] == e.token_id for e in r.logprobs)  # greedy: the chosen is the most likely
    assert r.text_offsets[0] == 0 and r.text_offsets == sorted(r.text_offsets)


async def test_logprobs_are_of_the_raw_logits_with_penalties_and_sampling(batched):
    ids = batched.tokenize(PROMPT)
    kw = dict(max_tokens=TOKENS, ignore_eos=True, temperature=1.3, seed=11, repeat_penalty=1.3)
    plain = await batched.complete(ids, **kw)
    r = await batched.complete(ids, logprobs=0, **kw)
    assert r.token_ids == plain.token_ids  # the same draws: logprobs change nothing
    _check(r, await _reference(batched, ids, r.token_ids), 0)
    assert all(e.top == () for e in r.logprobs)


async def test_a_logprobs_request_batched_beside_plain_ones(batched):
    """One request with logprobs makes its steps download logits; the greedy requests beside it
    get the tokens they get alone."""
    prompts = [batched.tokenize(p) for p in (PROMPT, "Once upon a time", "1, 2, 3, 4,")]
    alone = [(await batched.complete(p, max_tokens=TOKENS, ignore_eos=True)).token_ids for p in prompts]
    results = [None] * 3

    async def one(i):
        results[i] = await batched.complete(prompts[i], max_tokens=TOKENS, ignore_eos=True,
                                            logprobs=3 if i == 0 else None)

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(one, i)
    assert [r.token_ids for r in results] == alone
    _check(results[0], await _reference(batched, prompts[0], results[0].token_ids), 3)


async def test_a_stop_string_keeps_the_logprobs_of_the_kept_tokens(batched):
    ids = batched.tokenize(PROMPT)
    full = await batched.complete(ids, max_tokens=TOKENS, ignore_eos=True)
    stop = full.text[len(full.text) // 2:][:3]
    stream = batched.generate(ids, max_tokens=TOKENS, ignore_eos=True, stop=[stop], logprobs=1)
    async for _ in stream:
        pass
    r = stream.result
    assert r.finish_reason == "stop" and len(r.logprobs) == len(r.token_ids) == len(r.text_offsets)
    assert [e.token_id for e in r.logprobs] == r.token_ids == full.token_ids[:len(r.token_ids)]


@pytest.mark.parametrize("bad", [-1, 21, 2.0, True, "3"])
async def test_invalid_logprobs_name_the_argument(unbatched, bad):
    import re

    with pytest.raises(ValueError, match=f"^logprobs must be None or an int in \\[0, 20\\], got {re.escape(repr(bad))}$"):
        unbatched.generate("hello", logprobs=bad)
