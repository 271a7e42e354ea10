"""runtime/_jobs.py: JobQueue via open_job_queue, under MockClock."""

import random

import pytest
import trio
import trio.testing

from xinfer_async import JobCancelledError, open_device, open_job_queue


@pytest.fixture
def dev():
    d = open_device("cpu", command_lists=4)
    yield d
    d.close()


async def test_result_and_exception_reach_the_submitter(dev, autojump_clock):
    async with open_job_queue(dev.command_lists.acquire, workers=2) as q:
        async def ok(cl):
            await cl.submit_and_wait()
            return "done"

        async def bad(cl):
            raise KeyError("boom")

        assert await q.submit(ok) == "done"
        with pytest.raises(KeyError, match="boom"):
            await q.submit(bad)
        handle = await q.submit_handle(bad)
        for _ in range(2):  # readable more than once
            with pytest.raises(KeyError):
                await handle.result()
    st = q.statistics()
    assert (st.submitted, st.completed, st.failed, st.cancelled) == (3, 1, 2, 0)


async def test_back_pressure_and_submit_nowait(dev, autojump_clock):
    gate = trio.Event()

    async def blocked(cl):
        await gate.wait()

    async with open_job_queue(dev.command_lists.acquire, workers=1, max_queued=2) as q:
        async with trio.open_nursery() as nursery:
            h1 = q.submit_nowait(blocked)
            await trio.testing.wait_all_tasks_blocked()  # the worker took job 1
            q.submit_nowait(blocked)
            q.submit_nowait(blocked)
            with pytest.raises(trio.WouldBlock):
                q.submit_nowait(blocked)
            entered = []

            async def waits_for_room():
                await q.submit_handle(blocked)
                entered.append(trio.current_time())

            nursery.start_soon(waits_for_room)
            await trio.testing.wait_all_tasks_blocked()
            assert entered == [] and q.statistics().queued == 2
            gate.set()
        await h1.result()
    st = q.statistics()
    assert entered and st.completed == 4 and st.max_queued == 2


async def test_cancelled_while_queued_is_removed(dev, autojump_clock):
    gate = trio.Event()
    ran = []

    async def blocked(cl):
        await gate.wait()

    async def job(cl):
        ran.append(1)

    async with open_job_queue(dev.command_lists.acquire, workers=1) as q:
        q.submit_nowait(blocked)
        await trio.testing.wait_all_tasks_blocked()
        with trio.move_on_after(1):
            await q.submit(job)
        assert q.statistics().queued == 0 and q.statistics().cancelled == 1
        handle = q.submit_nowait(job)
        handle.cancel()
        with pytest.raises(JobCancelledError, match=r"^job was cancelled before it ran$"):
            await handle.result()
        gate.set()
    assert ran == []
    st = q.statistics()
    assert (st.submitted, st.completed, st.cancelled) == (3, 1, 2)


async def test_cancelled_in_flight_releases_list_at_fence(dev):
    pool = dev.command_lists
    gate = dev.create_queue()
    dev.queue._backend.wait_for(gate._backend, 1)  # the default queue stalls until gate reaches 1

    async def job(cl):
        cl.fill(dev.alloc(1, "f32"), 1.0)
        await cl.submit_and_wait()  # never completes until the gate opens

    async with open_job_queue(pool.acquire, workers=1) as q:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(q.submit, job)
                await trio.testing.wait_all_tasks_blocked(cushion=0.01)
                assert q.statistics().running == 1
                scope.cancel()
        await trio.testing.wait_all_tasks_blocked(cushion=0.01)
        st = pool.statistics()
        assert st.in_use == 1 and st.free == 3  # still executing: not back yet
        assert q.statistics().cancelled == 1 and q.statistics().running == 0
        g = dev.executor(queue=gate)
        g.fill(dev.alloc(1, "f32"), 0.0)
        g.submit()
        await dev.queue.wait_idle()
        await trio.testing.wait_all_tasks_blocked(cushion=0.01)
        assert pool.statistics().free == 4


@pytest.mark.parametrize("seed", [0, 1, 2])
async def test_1000_jobs_random_cancellations_add_up(dev, autojump_clock, seed):
    r = random.Random(seed)
    buf = dev.alloc(1024, "f32")
    outcomes = {"ok": 0, "failed": 0, "cancelled": 0}

    async def job(cl, i, delay, fail):
        await trio.sleep(delay)
        cl.fill(buf.view(4 * (i % 1024), 4), float(i))
        await cl.submit_and_wait()
        if fail:
            raise ValueError(i)
        return i

    async with open_job_queue(dev.command_lists.acquire, workers=4, max_queued=16) as q:
        async def submitter(i):
            delay, fail, cancel_after = r.random() * 0.01, r.random() < 0.1, r.random() * 0.05
            with trio.move_on_after(cancel_after if r.random() < 0.3 else 1e9):
                try:
                    assert await q.submit(lambda cl: job(cl, i, delay, fail)) == i
                    outcomes["ok"] += 1
                except ValueError:
                    outcomes["failed"] += 1
                return
            outcomes["cancelled"] += 1

        async with trio.open_nursery() as nursery:
            for i in range(1000):
                nursery.start_soon(submitter, i)
    st = q.statistics()
    assert st.queued == 0 and st.running == 0
    assert st.submitted == st.completed + st.failed + st.cancelled
    assert st.completed == outcomes["ok"] and st.failed == outcomes["failed"]
    # a submitter cancelled while still waiting for room never submitted
    assert st.cancelled <= outcomes["cancelled"]
    assert st.submitted == 1000 - (outcomes["cancelled"] - st.cancelled)
    assert 0 <= st.wait_p50_s <= st.wait_p90_s <= st.wait_p99_s
    await dev.queue.wait_idle()  # lists of jobs cancelled in flight come back after their fence
    await trio.testing.wait_all_tasks_blocked()
    ps = dev.command_lists.statistics()
    assert (ps.free, ps.in_use) == (4, 0)
