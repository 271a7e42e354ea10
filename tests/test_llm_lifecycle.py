"""Closing a model: waiting requests end with an error (no hang), held slots are released after
their holders, a device opened by ``load`` is closed; stop strings keep real timings."""

import pytest
import trio

from _llm_fixtures import require_model

pytestmark = pytest.mark.model


async def _load(**kw):
    from xinfer_async import llm

    return await llm.load(require_model(), device="cpu", ctx=128, **kw)


async def test_aclose_ends_waiting_requests_without_hanging():
    model = await _load(slots=1)
    errors = []

    async def one(i):
        try:
            await model.complete("Once upon a time", max_tokens=64)
        except (trio.ClosedResourceError, Exception) as exc:  # noqa: B014 - any clean error will do
            errors.append(type(exc).__name__)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(one, i)
            while model.prepared.statistics().busy == 0:
                await trio.sleep(0.005)
            await model.aclose()
    # the two waiting requests end with an error; none is a use-after-free
    assert len(errors) >= 2 and "ValidationError" not in errors, errors
    assert model.device._closed


async def test_aclose_closes_a_device_load_opened_but_not_a_callers():
    import xinfer_async

    model = await _load(slots=1)
    assert model.owns_device
    await model.aclose()
    assert model.device._closed
    dev = xinfer_async.open_device("cpu")
    try:
        from xinfer_async import llm

        m2 = await llm.load(require_model(), device=dev, ctx=128, slots=1)
        assert not m2.owns_device
        await m2.aclose()
        assert not dev._closed
    finally:
        dev.close()


async def test_stop_string_keeps_real_timings():
    model = await _load(slots=1)
    try:
        r = await model.complete("The capital of France is", max_tokens=32, stop=["."])
        assert r.finish_reason == "stop" and "." not in r.text
        assert r.timings.time_to_first_token_s > 0 and r.timings.generated_tokens == len(r.token_ids)
    finally:
        await model.aclose()
