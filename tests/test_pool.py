"""runtime/_pool.py: CommandListPool under MockClock (no sleeps for timing)."""

import pytest
import trio
import trio.testing

from xinfer_async import open_device


@pytest.fixture
def dev():
    d = open_device("cpu", command_lists=4)
    yield d
    d.close()


async def test_100_tasks_share_4_lists(dev, autojump_clock):
    pool = dev.command_lists
    buf = dev.alloc(64, "f32")
    held = 0
    peak = 0

    async def task(i):
        nonlocal held, peak
        async with pool.acquire() as cl:
            held += 1
            peak = max(peak, held)
            cl.fill(buf.view(0, 4), float(i))
            await trio.sleep(0.001 * (i % 7))  # mock time: the tasks overlap
            await cl.submit_and_wait()
            held -= 1

    async with trio.open_nursery() as nursery:
        for i in range(100):
            nursery.start_soon(task, i)
    st = pool.statistics()
    assert peak == 4 and st.max_in_use == 4
    assert (st.size, st.free, st.in_use, st.waiting_tasks, st.acquired_total) == (4, 4, 0, 0, 100)


async def test_acquire_nowait_raises_would_block(dev):
    pool = dev.command_lists
    leases = [pool.acquire_nowait() for _ in range(4)]
    with pytest.raises(trio.WouldBlock):
        pool.acquire_nowait()
    with leases[0] as cl:
        assert cl.commands == ()
    with pool.acquire_nowait():
        pass
    for lease in leases[1:]:
        with lease:
            pass
    assert pool.statistics().free == 4


async def test_cancelled_mid_wait_leaves_pool_whole(dev, autojump_clock):
    pool = dev.command_lists
    leases = [pool.acquire_nowait() for _ in range(4)]
    with trio.move_on_after(1) as scope:
        async with pool.acquire():
            pytest.fail("no list was free")
    assert scope.cancelled_caught
    assert pool.statistics().waiting_tasks == 0
    for lease in leases:
        with lease:
            pass
    st = pool.statistics()
    assert (st.free, st.in_use) == (4, 0)
    async with pool.acquire() as cl:
        await cl.submit_and_wait()


async def test_list_still_executing_is_not_handed_out(dev):
    pool = dev.command_lists
    gate = dev.create_queue()
    dev.queue._backend.wait_for(gate._backend, 1)  # the default queue stalls until gate reaches 1
    submitted = []
    for _ in range(4):
        async with pool.acquire() as cl:
            cl.fill(dev.alloc(1, "f32"), 1.0)
            cl.submit()
            submitted.append(cl)
    # every list left its `async with`, none has completed: none may be handed out
    st = pool.statistics()
    assert (st.free, st.in_use) == (0, 4)
    with pytest.raises(trio.WouldBlock):
        pool.acquire_nowait()
    got = []

    async def late():
        async with pool.acquire() as cl:
            got.append(cl)
            assert cl.fence_value is None  # reset: its previous submission completed first

    async with trio.open_nursery() as nursery:
        nursery.start_soon(late)
        await trio.testing.wait_all_tasks_blocked(cushion=0.01)
        assert got == [] and pool.statistics().waiting_tasks == 1
        g = dev.executor(queue=gate)
        g.fill(dev.alloc(1, "f32"), 0.0)
        g.submit()
    assert len(got) == 1 and got[0] in submitted
    await dev.queue.wait_idle()
    await trio.testing.wait_all_tasks_blocked(cushion=0.01)
    st = pool.statistics()
    assert (st.free, st.in_use) == (4, 0)


async def test_a_returned_list_goes_to_the_waiting_task_not_to_acquire_nowait(dev):
    """A task that hands a list back and takes one with acquire_nowait at once (the pipelined
    greedy decode does) must not jump ahead of a task already waiting in acquire()."""
    pool = dev.command_lists
    leases = [pool.acquire_nowait() for _ in range(4)]
    for lease in leases:
        lease.__enter__()
    got = trio.Event()

    async def waiter():
        async with pool.acquire():
            got.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert pool.statistics().waiting_tasks == 1
        leases.pop().__exit__(None, None, None)  # the list is promised to the waiter ...
        with pytest.raises(trio.WouldBlock):
            pool.acquire_nowait()  # ... so the returning task cannot take it back
        with trio.fail_after(5):
            await got.wait()
    for lease in leases:
        lease.__exit__(None, None, None)
    st = pool.statistics()
    assert (st.free, st.in_use, st.waiting_tasks) == (4, 0, 0)
    with pool.acquire_nowait():  # nobody waits: a free list is taken at once
        pass
