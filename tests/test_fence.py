"""runtime/_fence.py: awaitable timeline fences."""

import pytest
import trio
import trio.testing

from xinfer_async import FenceTimeoutError


@pytest.fixture
def dev(devices):
    """cpu, and cuda where usable: there a list is signalled by the GPU's counter store alone and a
    waiter that sleeps asks for its wake-up first (CUDAQueue.arm_wakeup)."""
    return devices


def _stall(dev):
    """Make the default queue wait on a second queue's value 1; returns a function releasing it."""
    gate = dev.create_queue()
    dev.queue._backend.wait_for(gate._backend, 1)

    def release():
        g = dev.executor(queue=gate)
        g.fill(dev.alloc(1, "f32"), 0.0)
        g.submit()

    return release


async def test_await_and_completed_value(dev):
    ex = dev.executor()
    assert dev.queue.fence.completed_value == 0
    v = ex.submit()
    assert dev.queue.fence.submitted_value == v == 1
    await dev.queue.fence.wait(v)
    assert dev.queue.fence.completed_value >= v and dev.queue.fence.is_complete(v)
    await dev.queue.fence.wait(v)  # already reached: returns at once


def test_blocking_wait(dev):
    v = dev.executor().submit()
    dev.queue.fence.wait_blocking(v, timeout_s=30)
    assert dev.queue.fence.completed_value >= v


def test_blocking_wait_timeout(dev):
    fence = dev.queue.fence
    with pytest.raises(FenceTimeoutError, match=rf"^{dev.name} queue 0: fence value 5 not reached within 0.0 s \(completed 0, submitted 0\)$"):
        fence.wait_blocking(5, timeout_s=0.0)


async def test_never_signalled_times_out(dev, autojump_clock):
    fence = dev.queue.fence
    with pytest.raises(FenceTimeoutError, match=r"fence value 1 not reached within 5 s") as info:
        await fence.wait(1, timeout_s=5)
    assert isinstance(info.value, trio.TooSlowError)
    with pytest.raises(trio.TooSlowError):
        with trio.fail_after(5):
            await fence.wait(1)


async def test_many_concurrent_waiters_no_busy_loop(dev):
    release = _stall(dev)
    values = [dev.executor().submit() for _ in range(5)]
    fence = dev.queue.fence
    done = []

    async def waiter(v):
        await fence.wait(v)
        done.append(v)

    async with trio.open_nursery() as nursery:
        for i in range(100):
            nursery.start_soon(waiter, values[i % 5])
        # every waiter is parked (eventfd or event), none is spinning: this returns
        with trio.fail_after(10):
            await trio.testing.wait_all_tasks_blocked(cushion=0.01)
        assert done == [] and fence.completed_value == 0
        release()
    assert sorted(done) == sorted(values[i % 5] for i in range(100))
    assert fence.completed_value == values[-1]


async def test_cancelled_reader_hands_over_the_fd(dev):
    release = _stall(dev)
    v = dev.executor().submit()
    fence = dev.queue.fence
    reader = trio.CancelScope()
    finished = []

    async def first():  # parks on the eventfd: the reader
        with reader:
            await fence.wait(v)

    async def second():  # parks on the wake-up event behind it
        await fence.wait(v)
        finished.append(v)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await trio.testing.wait_all_tasks_blocked(cushion=0.01)
        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked(cushion=0.01)
        reader.cancel()
        await trio.testing.wait_all_tasks_blocked(cushion=0.01)
        release()
    assert reader.cancelled_caught and finished == [v]


async def test_wait_is_a_checkpoint_when_the_spin_sees_completion(dev):
    """A short list completes during the sched_yield spin; the await must still be a checkpoint:
    a cancelled waiter raises Cancelled (and a loop of such waits lets other tasks run)."""
    buf = dev.alloc(16, "f32")
    for _ in range(200):
        ex = dev.executor()
        ex.fill(buf, 1.0)
        value = ex.submit()
        with trio.CancelScope() as scope:
            scope.cancel()
            await dev.queue.fence.wait(value)
        assert scope.cancelled_caught
        await dev.queue.fence.wait(value)
    buf.free()
