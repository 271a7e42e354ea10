"""Closing a model: waiting requests end with an error (no hang), held slots are released after
their holders, a device opened by ``load`` is closed; stop strings keep real timings;
``GenerationStream.read_nowait`` drains what was delivered and ``at_end`` says when that was all."""

import pytest
import trio

from _llm_fixtures import require_model

pytestmark = pytest.mark.model


async def _load(**kw):
    from xinfer_async import llm

    return await llm.load(require_model(), device="cpu", ctx=128, **kw)


async def _close_while_three_requests_run(model, running) -> list[Exception]:
    """Start three requests, ``aclose`` the model once ``running()`` says one runs; the errors."""
    errors = []

    async def one():
        try:
            await model.complete("Once upon a time", max_tokens=64)
        except Exception as exc:
            errors.append(exc)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(one)
            while not running():
                await trio.sleep(0.005)
            await model.aclose()
    return errors


async def test_aclose_cancels_running_and_waiting_requests_then_closes_the_device():
    from xinfer_async import JobCancelledError

    model = await _load(slots=1, batching=False)
    errors = await _close_while_three_requests_run(model, lambda: model.statistics()["running"] > 0)
    # the running request and the two waiting ones end with the one documented error, as batched
    assert len(errors) == 3 and all(isinstance(e, trio.ClosedResourceError) for e in errors), errors
    assert all(str(e) == "language model is closed" for e in errors)
    causes = sorted(str(e.__cause__) for e in errors)  # the job queue's own record stays as the cause
    assert all(isinstance(e.__cause__, JobCancelledError) for e in errors)
    assert causes == ["job was cancelled before it ran"] * 2 + ["job was cancelled while it ran"]
    # the slot came back after its fence, before the device closed: nothing leaked into a closed device
    assert model.device._closed and model.device.allocator.cached_bytes == 0


async def test_aclose_closes_a_device_load_opened_but_not_a_callers():
    import xinfer_async

    model = await _load(slots=1)
    assert model.owns_device and model.device.allocated_bytes > 0
    await model.aclose()
    assert model.device._closed
    # every byte went back with it, the weights the builder still references too
    assert model.device.allocated_bytes == 0 and not model.device.backend._arrays
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


async def test_aclose_of_a_batched_model_ends_its_requests():
    model = await _load(slots=2, batching=True)
    errors = await _close_while_three_requests_run(
        model, lambda: model.statistics()["scheduler"].steps > 0)
    assert len(errors) == 3 and all(isinstance(e, trio.ClosedResourceError) for e in errors), errors
    assert all(str(e) == "language model is closed" for e in errors)
    assert model.device._closed and model.device.allocator.cached_bytes == 0


async def test_read_nowait_returns_the_tokens_already_delivered_and_leaves_the_end_to_anext(tmp_path):
    from xinfer_async import llm
    from xinfer_async.llm._synthetic import write_synthetic_gguf

    path = write_synthetic_gguf(tmp_path / "tiny.gguf", "tiny")
    model = await llm.load(str(path), device="cpu", ctx=128, slots=2, batching=True)
    try:
        ref = await model.complete("once upon a time", max_tokens=20, ignore_eos=True)
        stream = model.generate("once upon a time", max_tokens=20, ignore_eos=True)
        assert stream.read_nowait() == ""  # not started: nothing, no error
        parts, bunched = [], 0
        async for piece in stream:
            await trio.sleep(0.02)  # let several steps deliver their tokens meanwhile
            counted = stream.token_count
            rest = stream.read_nowait()
            bunched = max(bunched, stream.token_count - counted)
            parts.append(piece + rest)
        assert "".join(parts) == ref.text and stream.result.token_ids == ref.token_ids
        assert bunched >= 1 and stream.read_nowait() == ""  # some tokens came meanwhile; after the end nothing
    finally:
        await model.aclose()


async def test_at_end_says_when_every_token_is_read_and_the_next_anext_ends(tmp_path):
    from xinfer_async import llm
    from xinfer_async.llm._synthetic import write_synthetic_gguf

    path = write_synthetic_gguf(tmp_path / "tiny.gguf", "tiny")
    model = await llm.load(str(path), device="cpu", ctx=128, slots=2, batching=True)
    try:
        ref = await model.complete("once upon a time", max_tokens=6, ignore_eos=True)
        stream = model.generate("once upon a time", max_tokens=6, ignore_eos=True)
        assert not stream.at_end()  # not started
        text = await stream.__anext__()
        while not stream.at_end():  # the scheduler delivers the rest and closes the request
            await trio.sleep(0.01)
            text += stream.read_nowait()
        assert stream.token_count == 6 and stream.result is None  # read, the end not seen yet
        with trio.fail_after(1):
            async for piece in stream:  # at once: the held-back text, if any, then the end
                text += piece
        assert text == ref.text and stream.result.token_ids == ref.token_ids
    finally:
        await model.aclose()
