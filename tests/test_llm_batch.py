"""Tests of xinfer_async/llm/_batch.py: batched decode (``llm.load(..., batching=True)``) on the real
SmolLM2-135M (cpu; ``XINFER_TEST_DEVICE=cuda`` runs it on the GPU).

Exactness: a request alone on the batched model runs the same kernels as on the unbatched one
(batch1 = a T=1 step; attention_batched is bit-identical to attention), so its tokens are equal. A
request among others runs its decode rows inside a T=B matmul. A matmul row is bit-identical
whatever T is on both backends (cpu: native/kernels/quant.c, tested in test_native_kernels.py; cuda:
the staged kernel of shaders/xi_mvc.cuh sums a row in an order set by K alone), so concurrent
requests equal each alone exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import trio

from _llm_fixtures import cancel_generation_after, load_model_sync

pytestmark = pytest.mark.model

SLOTS = 8
CTX = 256
TOKENS = 16
PROMPTS = ["The sky is", "Once upon a time", "def fibonacci(n):", "The capital of Japan is",
           "1, 2, 3, 4,", "Water boils at", "My favourite food is", "In 1969, the first"]


@pytest.fixture(scope="module")
def model():
    m = load_model_sync(slots=SLOTS, ctx=CTX, batching=True)
    yield m
    trio.run(m.aclose)


@pytest.fixture(scope="module")
def unbatched():
    m = load_model_sync(slots=1, ctx=CTX)
    yield m
    trio.run(m.aclose)


@pytest.fixture(scope="module")
def alone(unbatched):
    """Greedy results of ``PROMPTS`` on the unbatched model, one request at a time."""

    async def run():
        return [await unbatched.complete(p, max_tokens=TOKENS) for p in PROMPTS]

    return trio.run(run)


async def _idle(model, timeout_s: float = 30.0) -> None:
    with trio.fail_after(timeout_s):
        while model._batch is not None and (model._batch.statistics().active or model._batch.statistics().waiting):
            await trio.sleep(0.01)


def test_batched_model_shape(model):
    assert model.batching and model.slots == SLOTS
    assert model.builder.batch_sizes == [1, 2, 4, 8, 16, 32, 64, 128]  # up to SLOTS + chunk rows
    assert sorted(model.batched.plans) == sorted([f"batch{b}" for b in model.builder.batch_sizes] + ["prefill16", "prefill64"])
    assert model.prepared.capacity == 1  # logits: one unbatched slot


async def test_alone_equals_unbatched_exactly(model, alone):
    for i in (0, 2):
        r = await model.complete(PROMPTS[i], max_tokens=TOKENS)
        assert (r.token_ids, r.text, r.finish_reason) == (alone[i].token_ids, alone[i].text, alone[i].finish_reason)


async def test_concurrent_requests_equal_each_alone(model, unbatched, alone):
    results = [None] * len(PROMPTS)

    async def one(i):
        results[i] = await model.complete(PROMPTS[i], max_tokens=TOKENS)

    await model.complete(PROMPTS[0], max_tokens=1)  # this trio run's scheduler exists from here
    batcher = model._batch
    before = batcher.statistics()
    async with trio.open_nursery() as nursery:
        for i in range(len(PROMPTS)):
            nursery.start_soon(one, i)
    for p, r, a in zip(PROMPTS, results, alone):
        assert r.token_ids == a.token_ids, p  # row results do not depend on the batch size: exact
    assert model._batch is batcher
    st = batcher.statistics()
    assert st.max_active == SLOTS
    steps = st.steps - before.steps
    assert 0 < steps < len(PROMPTS) * TOKENS / 2  # decoded together, not one request at a time
    # steps ran pipelined (submitted before the previous step's tokens were read) once the batch's
    # composition held still (not while prompts joined it), and the tokens above are still exactly
    # each request's alone
    assert st.pipelined - before.pipelined >= steps // 5
    # the prompts of the requests admitted while others decoded (all but the first one) ran in the
    # decode steps' free rows, not in prefill plans between steps, and their tokens are exact too
    lengths = [len(model.tokenize(p)) for p in PROMPTS]
    assert st.prompt_rows - before.prompt_rows >= sum(lengths) - max(lengths)
    await _idle(model)


async def test_requests_ending_one_after_another_equal_each_alone_and_stay_pipelined(model, unbatched):
    """Staggered lengths: a request ends every few steps while the others decode. Every request's
    tokens are its alone result, and the steps between the ends stay pipelined."""
    lengths = [40 - 3 * k for k in range(len(PROMPTS))]  # 40, 37, ..., 19
    alone = [await unbatched.complete(p, max_tokens=n, ignore_eos=True) for p, n in zip(PROMPTS, lengths)]
    results = [None] * len(PROMPTS)

    async def one(i):
        results[i] = await model.complete(PROMPTS[i], max_tokens=lengths[i], ignore_eos=True)

    await model.complete(PROMPTS[0], max_tokens=1)
    before = model._batch.statistics()
    async with trio.open_nursery() as nursery:
        for i in range(len(PROMPTS)):
            nursery.start_soon(one, i)
    for i, r in enumerate(results):
        assert (r.token_ids, r.finish_reason) == (alone[i].token_ids, "length"), PROMPTS[i]
    st = model._batch.statistics()
    steps, pipelined = st.steps - before.steps, st.pipelined - before.pipelined
    # not pipelined: the steps while the prompts join (a few), and one step per end (the one after
    # it: its rows changed)
    assert pipelined >= steps - 6 - len(PROMPTS), (steps, pipelined)
    await _idle(model)


async def test_more_requests_than_sequences_wait(model, unbatched, alone):
    n = SLOTS + 4
    results = [None] * n

    async def one(i):
        results[i] = await model.complete(PROMPTS[i % len(PROMPTS)], max_tokens=6)

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(one, i)
    for i, r in enumerate(results):
        a = alone[i % len(PROMPTS)].token_ids[:6]
        assert r.token_ids == a, i
    await _idle(model)
    assert sorted(model._batch._free) == list(range(SLOTS))


async def test_cancelled_request_frees_its_sequence(model, alone):
    await model.complete(PROMPTS[0], max_tokens=1)  # this trio run's scheduler
    # a cancel scope around the loop, cancelled in the middle of the generation
    await cancel_generation_after(model, PROMPTS[1])
    # leaving the async for early, then aclose
    stream = model.generate(PROMPTS[3], max_tokens=200)
    async for _ in stream:
        break
    await stream.aclose()
    # a cancel scope around complete, with another request running beside it
    other = {}

    async def keep():
        other["r"] = await model.complete(PROMPTS[2], max_tokens=TOKENS)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep)
        async with trio.open_nursery() as inner:
            inner.start_soon(lambda: model.complete(PROMPTS[4], max_tokens=200))
            with trio.fail_after(60):
                while model._batch.statistics().active < 2:
                    await trio.sleep(0.005)
            inner.cancel_scope.cancel()
    await _idle(model)
    assert sorted(model._batch._free) == list(range(SLOTS))
    assert other["r"].finish_reason == "length" and len(other["r"].token_ids) == TOKENS
    r = await model.complete(PROMPTS[3], max_tokens=TOKENS)
    assert r.token_ids == alone[3].token_ids


async def test_stop_string_and_max_tokens(model, alone):
    a = alone[1]
    word = a.text.split()[1]
    r = await model.complete(PROMPTS[1], max_tokens=TOKENS, stop=[word])
    assert r.finish_reason == "stop" and word not in r.text
    assert a.text.startswith(r.text)
    r = await model.complete(PROMPTS[1], max_tokens=3)
    assert r.finish_reason == "length" and r.token_ids == a.token_ids[:3]
    r = await model.complete(PROMPTS[1], max_tokens=0)
    assert r.finish_reason == "length" and r.token_ids == []
    await _idle(model)


async def test_sampling_beside_greedy(model, unbatched):
    kw = dict(max_tokens=8, temperature=0.8, top_p=0.9, seed=1234)
    want = (await unbatched.complete(PROMPTS[5], **kw)).token_ids
    assert (await model.complete(PROMPTS[5], **kw)).token_ids == want  # alone: exact
    results = {}

    async def sampled():
        results["s"] = await model.complete(PROMPTS[5], **kw)

    async def greedy():
        results["g"] = await model.complete(PROMPTS[6], max_tokens=8)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sampled)
        nursery.start_soon(greedy)
    assert len(results["s"].token_ids) == 8 and len(results["g"].token_ids) == 8
    await _idle(model)


async def test_a_sampler_error_ends_its_request_only(model, alone, monkeypatch):
    """A sampler that raises while the scheduler hands out a step's tokens ends that request with
    the error; the greedy request beside it finishes, exact, and the scheduler keeps running."""
    from xinfer_async.llm import _sampling

    def broken(self, logits):
        raise ValueError("sampler broke")

    monkeypatch.setattr(_sampling.Sampler, "sample", broken)
    results = {}

    async def sampled():
        with pytest.raises(ValueError, match="sampler broke"):
            await model.complete(PROMPTS[5], max_tokens=8, temperature=0.8, seed=1)

    async def greedy():
        results["g"] = await model.complete(PROMPTS[2], max_tokens=TOKENS)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(greedy)
        nursery.start_soon(sampled)
    assert results["g"].token_ids == alone[2].token_ids
    monkeypatch.undo()
    assert len((await model.complete(PROMPTS[5], max_tokens=3, temperature=0.8, seed=1)).token_ids) == 3
    await _idle(model)
    assert sorted(model._batch._free) == list(range(SLOTS))


async def test_logits_and_chat_still_work(model, unbatched):
    ids = model.tokenize(PROMPTS[0])
    np.testing.assert_array_equal(await model.logits(ids), await unbatched.logits(ids))
    r = await model.chat([{"role": "user", "content": "Say hi."}], max_tokens=4)
    assert len(r.token_ids) == 4 or r.finish_reason == "stop"


async def test_long_prefill_is_interleaved_with_decode_steps(model):
    """While a long prompt runs chunk by chunk, the active requests keep decoding: between two
    prompt chunks of B there is a decode step of A."""
    await _idle(model)
    long_prompt = " ".join(["The quick brown fox jumps over the lazy dog."] * 16)  # ~3 chunks of 64
    assert len(model.tokenize(long_prompt)) > 2 * model.chunk
    a_tokens_before_b = []
    b_started = trio.Event()
    b_first = trio.Event()

    async def run_a():
        stream = model.generate(PROMPTS[1], max_tokens=40)
        n = 0
        async for _ in stream:
            n += 1
            if n == 2:
                b_started.set()
            if b_started.is_set() and not b_first.is_set():
                a_tokens_before_b.append(n)

    async def run_b():
        await b_started.wait()
        async for _ in model.generate(long_prompt, max_tokens=2):
            b_first.set()

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_a)
            nursery.start_soon(run_b)
    # B's prompt needed >= 3 chunks; A decoded at least 2 tokens while it ran
    assert len(a_tokens_before_b) >= 3, a_tokens_before_b
    await _idle(model)


async def test_ignore_eos_runs_past_the_end_of_sequence(model, unbatched):
    """``ignore_eos``: a chat reply that ends with end-of-sequence after n tokens keeps going to
    max_tokens, its first n ids unchanged (EOS among them); batched and unbatched alike."""
    msgs = [{"role": "user", "content": "Say hi."}]
    base = await unbatched.chat(msgs, max_tokens=40)
    assert base.finish_reason == "stop" and base.token_ids[-1] in unbatched.stop_ids
    n = len(base.token_ids)
    for m in (unbatched, model):
        r = await m.chat(msgs, max_tokens=n + 5, ignore_eos=True)
        assert r.finish_reason == "length" and len(r.token_ids) == n + 5
        assert r.token_ids[:n] == base.token_ids
    await _idle(model)


async def test_request_cancelled_while_its_prompt_runs_in_decode_steps(model, alone):
    """A request cancelled after some of its prompt ran in the decode steps' rows (admitted, not yet
    decoding) ends, frees its sequence, and leaves the request beside it exact."""
    await model.complete(PROMPTS[0], max_tokens=1)  # this trio run's scheduler
    long_prompt = " ".join(["The quick brown fox jumps over the lazy dog."] * 16)  # several chunks
    result = {}

    async def keep():
        result["a"] = await model.complete(PROMPTS[2], max_tokens=TOKENS)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep)
        with trio.fail_after(60):
            while model._batch.statistics().active < 1:
                await trio.sleep(0.001)
        async with trio.open_nursery() as inner:
            inner.start_soon(lambda: model.complete(long_prompt, max_tokens=4))
            with trio.fail_after(60):  # part of the long prompt has run inside a decode step
                while not any(0 < r.pos < len(r.request.prompt_ids) for r in model._batch._admitted):
                    await trio.sleep(0.001)
            inner.cancel_scope.cancel()
    await _idle(model)
    assert sorted(model._batch._free) == list(range(SLOTS)) and not model._batch._admitted
    assert result["a"].token_ids == alone[2].token_ids
