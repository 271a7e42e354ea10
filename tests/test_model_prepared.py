"""``model/_prepared.py``: PreparedModel slots (concurrency bound, isolation, persistent state,
release after the fence)."""

import time

import numpy as np
import pytest
import trio
import trio.testing

from _model_fixtures import assert_close, build, f32
from xinfer_async.hal import Access, TensorDesc
from xinfer_async.model import Binding, Dispatch, Indices, IODesc, ModelContext, ModelSession


async def test_64_tasks_on_capacity_4(devices):
    m = build(devices)
    pm = m.prepare(4)
    results = {}

    async def one(i):
        x = m.sample()
        (z,) = await pm.run([x])
        results[i] = (z, m.reference(x))

    async with trio.open_nursery() as nursery:
        for i in range(64):
            nursery.start_soon(one, i)
    assert len(results) == 64
    for z, ref in results.values():
        assert_close(z, ref)
    st = pm.statistics()
    assert st.max_busy <= 4
    assert st.max_busy == 4  # 64 tasks keep every slot busy at some point
    assert (st.busy, st.waiting_tasks, st.runs, st.capacity) == (0, 0, 64, 4)
    pm.close()


async def test_slot_isolation_after_nan_poisoning(devices):
    m = build(devices, temporaries=True)
    pm = m.prepare(2, reuse=True)
    fresh = m.prepare(1, reuse=True)
    x1, x2 = m.sample(), m.sample()
    async with pm.slot() as s:
        await s.run([x1])
        await s.fill_private(float("nan"))
        (got,) = await s.run([x2])
    (want,) = await fresh.run([x2])
    assert not np.isnan(got).any()
    np.testing.assert_array_equal(got, want)
    assert_close(got, m.reference(x2))
    pm.close()
    fresh.close()


def _accumulator(devices, T=4, N=16, K=32):
    """state (T, N), persistent per slot: state += W @ x per run (matmul with accumulate=1)."""
    rng = np.random.default_rng()
    W = rng.standard_normal((N, K)).astype(np.float32)
    s = ModelSession(devices)
    w = s.weight(W, f32((N, K)))
    x = s.scratch(T * K * 4, name="x")
    st = s.scratch(T * N * 4, persistent=True, name="state")
    km = s.kernel("matmul_f32")
    d = s.freeze(ModelContext(devices))
    frag = d.fragment([Dispatch(km, [Binding(w), Binding(x), Binding(st, Access.READ_WRITE)], Indices(T, N, K, 1))],
                      [IODesc(x, f32((T, K)))], [IODesc(st, f32((T, N)))])
    return frag, W.astype(np.float64), lambda: rng.standard_normal((T, K)).astype(np.float32)


async def test_persistent_state_survives_runs_of_one_slot_only(devices):
    frag, W, sample = _accumulator(devices)
    pm = frag.prepare(2)
    assert [ga.kind for ga in pm.plans["default"].graph.allocs] == ["input", "state"]
    xa1, xa2, xb = sample(), sample(), sample()
    async with pm.slot() as a, pm.slot() as b:
        assert a is not b
        (s1,) = await a.run([xa1])
        assert_close(s1, xa1 @ W.T)
        (sb,) = await b.run([xb])
        assert_close(sb, xb @ W.T)  # b never sees a's state
        (s2,) = await a.run([xa2])
        assert_close(s2, (xa1 @ W.T) + (xa2 @ W.T))  # a's state survived its previous run
        await a.reset_state()
        (s3,) = await a.run([xb])
        assert_close(s3, xb @ W.T)
    pm.close()


async def test_cancelled_run_frees_its_slot_only_after_the_fence(devices, autojump_clock):
    m = build(devices)
    pm = m.prepare(1)
    # stall the model's queue until `gate` opens: work submitted behind it cannot complete
    gate_q = devices.create_queue()
    gate = gate_q.fence.submitted_value + 1
    devices.queue.wait_for(gate_q, gate)
    opened = False

    def open_gate():
        nonlocal opened
        if not opened:
            opened = True
            assert devices.executor(queue=gate_q).submit() == gate

    try:
        scope = trio.CancelScope()

        async def runner():
            with scope:
                await pm.run([m.sample()])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(runner)
            await trio.testing.wait_all_tasks_blocked()  # the run is submitted and awaits its fence
            assert pm.statistics().busy == 1 and pm.slots[0].busy()
            scope.cancel()
        assert scope.cancelled_caught
        await trio.testing.wait_all_tasks_blocked()
        # the task is gone but the device may still touch the slot: it stays taken
        assert pm.slots[0].busy()
        assert pm.statistics().busy == 1
        with pytest.raises(trio.WouldBlock):
            pm.slot_nowait()
        open_gate()
        await devices.queue.wait_idle()
        # the slot comes back when its reclaiming task wakes from the fence; on cuda the GPU's store
        # of the completed value can land before the host callback that wakes that task, so
        # wait_idle above may return first: give it real time (the autojump clock would not wait)
        for _ in range(200):
            if pm.statistics().busy == 0:
                break
            await trio.to_thread.run_sync(time.sleep, 0.005)
        assert pm.statistics().busy == 0
        x = m.sample()
        (z,) = await pm.run([x])  # the slot is usable again
        assert_close(z, m.reference(x))
    finally:
        open_gate()
        pm.close()


async def test_waiting_for_a_slot_is_cancellable(devices, autojump_clock):
    m = build(devices)
    pm = m.prepare(1)
    held = pm.slot_nowait()
    with trio.move_on_after(5) as scope:
        await pm.run([m.sample()])
    assert scope.cancelled_caught
    assert pm.statistics().waiting_tasks == 0 and pm.statistics().busy == 1
    pm.release(held)
    assert pm.statistics().busy == 0
    pm.close()


async def test_run_input_validation(devices):
    m = build(devices)
    pm = m.prepare(1)
    with pytest.raises(ValueError, match=r"plan 'default' takes 1 inputs, got 2"):
        await pm.run([m.sample(), m.sample()])
    with pytest.raises(ValueError, match=r"input 0: shape \(4, 64\) does not match \(8, 64\)"):
        await pm.run([np.ones((4, 64), np.float32)])
    with pytest.raises(ValueError, match=r"input 0: dtype float64 does not match f32"):
        await pm.run([m.sample().astype(np.float64)])
    with pytest.raises(ValueError, match=r"plan='decode' is not one of \['default'\]"):
        await pm.run([m.sample()], plan="decode")
    assert pm.statistics().busy == 0  # failed runs gave their slot back
    x = m.sample()
    (z,) = await pm.run([x.tobytes()])  # raw bytes of the right size are accepted
    assert_close(z, m.reference(x))
    pm.close()


async def test_closed_model_refuses_runs(devices):
    m = build(devices)
    pm = m.prepare(1)
    pm.close()
    with pytest.raises(trio.ClosedResourceError, match="prepared model is closed"):
        await pm.run([m.sample()])
    with pytest.raises(trio.ClosedResourceError, match="prepared model is closed"):
        pm.slot_nowait()


def test_capacity_must_be_positive(devices):
    m = build(devices)
    g, inp, out, _ = m.graph()
    for bad in (0, -1, 2.0):
        with pytest.raises(ValueError, match=f"capacity must be a positive int, got {bad!r}"):
            g.prepare([inp], [out], bad)


async def test_submit_returns_device_tensors(devices):
    m = build(devices)
    pm = m.prepare(1)
    x = m.sample()
    async with pm.slot() as s:
        (t,) = s.submit([x])
        assert t.desc == TensorDesc((m.rows, m.n), "f32")
        await t.completion.wait()
        assert t.completion.is_complete()
        got = np.frombuffer(devices.download(t.view), np.float32).reshape(m.rows, m.n)
        assert_close(got, m.reference(x))
    pm.close()


async def test_device_inputs_chain_runs_without_the_host(devices):
    """record_run(device_inputs=...): run 2 takes run 1's output as its input by a device copy, so
    both can be submitted before either is read back (the pipelined greedy decode does this)."""
    rng = np.random.default_rng()
    T, N = 4, 32
    W = (rng.standard_normal((N, N)) / np.sqrt(N)).astype(np.float32)
    s = ModelSession(devices)
    w = s.weight(W, f32((N, N)))
    x, y = s.scratch(T * N * 4, name="x"), s.scratch(T * N * 4, name="y")
    km = s.kernel("matmul_f32")
    d = s.freeze(ModelContext(devices))
    frag = d.fragment([Dispatch(km, [Binding(w), Binding(x), Binding(y, Access.READ_WRITE)], Indices(T, N, N, 0))],
                      [IODesc(x, f32((T, N)))], [IODesc(y, f32((T, N)))])
    pm = frag.prepare(1)
    x0 = rng.standard_normal((T, N)).astype(np.float32)
    async with pm.slot() as slot:
        out = slot.output_view(0)
        async with devices.command_lists.acquire(pm.queue) as ex:
            slot.record_run(ex, [x0], download=False)
            (rb,) = slot.record_run(ex, [np.full((T, N), np.nan, np.float32)], device_inputs={0: out})
            await ex.queue.fence.wait(slot.submit_recorded(ex))
        got = rb.numpy((T, N))
        want = (x0.astype(np.float64) @ W.T.astype(np.float64)) @ W.T.astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        async with devices.command_lists.acquire(pm.queue) as ex:
            with pytest.raises(ValueError, match=r"^input 0: a device input of 4 bytes for 512$"):
                slot.record_run(ex, [x0], device_inputs={0: out.buffer.view(0, 4)})
    pm.close()


async def test_start_run_submits_before_other_tasks_run(devices):
    """With a command list free, start_run submits before its schedule point: a task that becomes
    runnable first already sees the run submitted (the device starts before the yield lets that task
    run). A call cancelled on entry takes no list."""
    m = build(devices)
    pm = m.prepare(1)
    x = m.sample()
    fence, seen = pm.queue.fence, []

    async def peek():
        seen.append(fence.submitted_value)

    async with pm.slot() as s:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(peek)
            before = fence.submitted_value
            pending = await s.start_run([x])
        assert seen == [before + 1]
        assert_close((await pending.result())[0], m.reference(x))
        free = devices.command_lists.statistics().free
        with trio.CancelScope() as scope:
            scope.cancel()
            await s.start_run([x])
        assert scope.cancelled_caught and devices.command_lists.statistics().free == free
        assert fence.submitted_value == before + 1
    pm.close()


async def test_start_run_returns_before_the_result_and_never_waits_for_a_second_list(devices):
    m = build(devices)
    pm = m.prepare(1)
    x = m.sample()
    async with pm.slot() as s:
        pending = await s.start_run([x])
        held = [devices.command_lists.acquire_nowait() for _ in range(devices.command_lists.statistics().free)]
        for lease in held:
            lease.__enter__()
        with pytest.raises(trio.WouldBlock):
            await s.start_run([x], wait_for_list=False)
        (z,) = await pending.result()
        assert_close(z, m.reference(x))
        for lease in held:
            lease.__exit__(None, None, None)
        await pending.settle()  # idempotent after result()
    st = devices.command_lists.statistics()
    assert st.in_use == 0
    pm.close()
