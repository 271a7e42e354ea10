"""runtime/_fence.py: awaitable timeline fences."""

import pytest
import trio
import trio.testing

from xinfer_async import FenceTimeoutError


@pytest.fixture
def dev(devices):
    """cpu, and cuda where usable."""
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


async def test_a_wait_for_a_later_value_does_not_hold_back_an_earlier_one(dev):
    """A task sleeps on a value not submitted yet; a slow list submitted after it, awaited by another
    task, completes on time (a wake-up for a later value must not hold back an earlier one's)."""
    fence = dev.queue.fence
    big = dev.alloc(64 << 20, "f32")  # 256 MB: four fills of it outlast a waiter's poll
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fence.wait, fence.submitted_value + 2)  # never submitted in this test
        await trio.testing.wait_all_tasks_blocked(cushion=0.01)
        ex = dev.executor()
        for _ in range(4):
            ex.fill(big, 1.0)
        v = ex.submit()
        with trio.fail_after(10):
            await fence.wait(v)
        nursery.cancel_scope.cancel()
    big.free()


async def test_close_with_a_sleeper_on_a_value_never_submitted(dev):
    """A waiter for a value never submitted slept and was cancelled; closing the device does not hang
    and the fence keeps its real completed value."""
    fence = dev.queue.fence
    dev.executor().submit()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fence.wait, fence.submitted_value + 5)
        await trio.testing.wait_all_tasks_blocked(cushion=0.01)
        nursery.cancel_scope.cancel()
    dev.close()
    assert fence.completed_value == fence.submitted_value == 1


async def test_waiters_of_a_closed_fence_get_closed_resource_error():
    """Closing a fence wakes its waiters with ClosedResourceError: the one reading its eventfd, and
    the ones parked behind it (which must not go on to wait on the closed fd's number)."""
    from xinfer_async.runtime._fence import Fence

    fence = Fence("test fence")
    got = []

    async def waiter():
        with pytest.raises(trio.ClosedResourceError):
            await fence.wait(1)
        got.append(1)

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked(cushion=0.01)
        with trio.fail_after(5):
            fence.close()
            while len(got) < 3:
                await trio.sleep(0.01)
    assert got == [1, 1, 1]


def test_a_signal_is_kept_until_its_callback_has_run():
    """On cuda the GPU stores a completed value before the host callback of that list has read its
    signal struct (the callback runs later, on the queue's signal stream), so a fence frees a
    signal only once ``xi_fence_signal`` has passed its release point, whatever the completed
    value says; the callbacks of earlier values free theirs as they run."""
    from xinfer_async import _native
    from xinfer_async.runtime._fence import Fence

    fence = Fence("test fence")
    try:
        sigs = [fence._next_signal()[1] for _ in range(3)]
        fence._completed[0] = 3  # what cuStreamWriteValue64 does: every list done on the GPU
        fence._progress()
        assert sorted(fence._pending) == [1, 2, 3]  # no callback has run: nothing may be freed
        _native.lib.xi_fence_signal(sigs[0])
        _native.lib.xi_fence_signal(sigs[1])
        fence._progress()
        assert sorted(fence._pending) == [3]
        _native.lib.xi_fence_signal(sigs[2])
        fence._progress()
        assert fence._pending == {} and fence.completed_value == 3
    finally:
        fence.close()
