"""runtime/_completion.py: the one "complete at fence value v" type, and the classes built on it
(``Readback``, ``GpuTimer``'s, the model layer's ``PendingRun``, ``JobHandle``'s same interface)."""

import numpy as np
import pytest
import trio

from xinfer_async import FenceTimeoutError, ValidationError, open_device, open_job_queue
from xinfer_async.model import Completion as ModelCompletion
from xinfer_async.model import PendingRun
from xinfer_async.runtime import Completion, Readback

AFFINE = {"n": 16, "a": 2.0, "b": 1.0}


def test_model_and_runtime_name_one_type():
    assert ModelCompletion is Completion
    assert issubclass(Readback, Completion) and issubclass(PendingRun, Completion)


async def test_unbound_is_not_done_and_waiting_on_it_raises():
    c = Completion()
    assert not c.done() and not c.is_complete()
    with pytest.raises(ValidationError, match=r"^the work was not submitted: submit its command list before waiting on it$"):
        await c.wait()
    with pytest.raises(ValidationError, match=r"^the work was not submitted"):
        c.wait_blocking()
    with pytest.raises(ValueError, match=r"^Completion needs both a queue and a fence value, or neither; got value=None$"):
        Completion(object())
    assert "not submitted" in repr(c)


async def test_submission_completion_readback_and_tracked_completion_share_the_fence_value(devices):
    x, y = devices.alloc(16, "f32"), devices.alloc(16, "f32")
    data = np.random.default_rng(5).standard_normal(16).astype(np.float32)
    ex = devices.executor()
    with pytest.raises(ValidationError, match=r"^completion\(\): the command list was not submitted$"):
        ex.completion()
    ex.upload(x, data)
    tracked = ex._track_completion()
    ex.dispatch("affine", [x, y], AFFINE)
    rb = ex.download(y)
    assert not rb.done() and not tracked.done()
    value = ex.submit()
    c = ex.completion()
    for each in (c, rb, tracked):
        assert (each.queue, each.value) == (devices.queue, value)
    await c.wait(timeout_s=30)
    assert c.done() and rb.done() and rb.ready() and tracked.done()
    np.testing.assert_allclose(rb.numpy(), 2.0 * data.astype(np.float64) + 1.0, rtol=1e-6)
    ex.reset()
    assert tracked.done()  # stays valid after the list is reset
    c.wait_blocking(timeout_s=30)
    assert f"value {value} done" in repr(c)


async def test_a_completion_past_its_timeout_raises_fence_timeout():
    dev = open_device("cpu")
    try:
        ex = dev.executor()
        ex.fill(dev.alloc(4, "f32"), 1.0)
        ex.submit()
        c = ex.completion()
        await c.wait(timeout_s=30)
        pending = Completion(dev.queue, dev.queue.fence.submitted_value + 1)  # never submitted
        with pytest.raises(FenceTimeoutError, match=rf"fence value {pending.value} not reached within 0.05 s"):
            await pending.wait(timeout_s=0.05)
    finally:
        dev.close()


async def test_job_handle_answers_done_and_wait():
    dev = open_device("cpu", command_lists=2)
    try:
        gate = trio.Event()
        async with open_job_queue(dev.command_lists.acquire, workers=1) as q:
            async def job(cl):
                await gate.wait()
                raise KeyError("boom")

            handle = await q.submit_handle(job)
            assert not handle.done()
            gate.set()
            await handle.wait()  # does not raise the job's exception
            assert handle.done()
            with pytest.raises(KeyError):
                await handle.result()
    finally:
        dev.close()
