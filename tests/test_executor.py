"""runtime/_executor.py: state tracking, the validation layer, lifecycle, host I/O, graphs."""

import numpy as np
import pytest

from xinfer_async import ResourceState, ValidationError, open_device

S = ResourceState
AFFINE = {"n": 16, "a": 2.0, "b": 1.0}


@pytest.fixture
def strict():
    dev = open_device("cpu")
    yield dev
    dev.close()


def test_ensure_state_records_only_changes(devices):
    buf = devices.alloc(16, "f32")
    ex = devices.executor()
    assert buf.state is S.COMMON
    assert ex.ensure_state(buf, S.SHADER_READ) is True
    assert ex.ensure_state(buf, S.SHADER_READ) is False
    assert ex.transition_count == 1
    assert ex.ensure_state(buf, S.UNORDERED_ACCESS) is True
    assert ex.transition_count == 2 and buf.state is S.UNORDERED_ACCESS


def test_repeated_reads_add_no_barrier(devices):
    x, y = devices.alloc(16, "f32"), devices.alloc(16, "f32")
    ex = devices.executor()
    ex.dispatch("affine", [x, y], AFFINE)
    first = (ex.transition_count, ex.uav_barrier_count)
    assert first == (2, 0)  # x -> SHADER_READ, y -> UNORDERED_ACCESS
    outs = [devices.alloc(16, "f32") for _ in range(10)]
    for o in outs:
        ex.dispatch("affine", [x, o], AFFINE)  # x read again and again
    assert ex.transition_count == 2 + len(outs)  # only the new outputs transition
    assert ex.uav_barrier_count == 0


def test_auto_barriers_order_write_after_write(devices):
    x, y = devices.alloc(16, "f32"), devices.alloc(16, "f32")
    ex = devices.executor()
    ex.dispatch("affine", [x, y], AFFINE)
    ex.dispatch("affine", [x, y], AFFINE)
    assert ex.uav_barrier_count == 1
    ex.dispatch("affine", [y, x], AFFINE)  # reads y (UAV, written) -> barrier; writes x -> transition
    assert ex.uav_barrier_count == 2


def test_validation_wrong_state(strict):
    x, y = strict.alloc(16, "f32"), strict.alloc(16, "f32")
    ex = strict.executor(auto_barriers=False)
    with pytest.raises(ValidationError, match=(
            r"^binding 0 \(x\): buffer #\d+ is in state COMMON but this command needs SHADER_READ; "
            r"record ensure_state\(buffer, ResourceState.SHADER_READ\) first$")):
        ex.dispatch("affine", [x, y], AFFINE)
    ex.ensure_state(x, S.SHADER_READ)
    ex.ensure_state(y, S.UNORDERED_ACCESS)
    ex.dispatch("affine", [x, y], AFFINE)
    with pytest.raises(ValidationError, match=r"^dst: buffer #\d+ is in state UNORDERED_ACCESS but this command needs COPY_DEST"):
        ex.fill(y, 0.0)


def test_validation_write_while_another_command_reads(strict):
    x, y, z = (strict.alloc(16, "f32") for _ in range(3))
    ex = strict.executor(auto_barriers=False)
    for b in (x, y, z):
        ex.ensure_state(b, S.UNORDERED_ACCESS)
    ex.dispatch("affine", [x, y], AFFINE)  # reads x (a UAV buffer may be read in place)
    with pytest.raises(ValidationError, match=(
            r"^binding 1 \(y\): bytes \[0:64\] of buffer #\d+ are written while command #0 reads "
            r"\[0:64\] without a barrier in between; record uav_barrier\(buffer\)$")):
        ex.dispatch("affine", [z, x], AFFINE)
    ex.uav_barrier(x)
    ex.dispatch("affine", [z, x], AFFINE)  # ordered now
    with pytest.raises(ValidationError, match=r"are read while command #1 writes \[0:64\]"):
        ex.dispatch("affine", [x, z], AFFINE)
    # disjoint ranges of one buffer need no barrier
    w, v = strict.alloc(16, "f32"), strict.alloc(8, "f32")
    ex.ensure_state(w, S.UNORDERED_ACCESS)
    ex.ensure_state(v, S.UNORDERED_ACCESS)
    half = {"n": 8, "a": 1.0, "b": 0.0}
    ex.dispatch("affine", [w.view(0, 32), w.view(32, 32)], half)
    ex.dispatch("affine", [w.view(0, 32), v], half)
    assert ex.uav_barrier_count == 1


async def test_recording_after_submit_raises(devices):
    buf = devices.alloc(16, "f32")
    ex = devices.executor()
    ex.fill(buf, 1.0)
    await ex.submit_and_wait()
    with pytest.raises(ValidationError, match=r"^command list was submitted: call reset\(\) before recording again$"):
        ex.fill(buf, 2.0)
    with pytest.raises(ValidationError, match=r"^command list was submitted"):
        ex.submit()
    ex.reset()
    ex.fill(buf, 2.0)
    await ex.submit_and_wait()
    np.testing.assert_array_equal(devices.download_numpy(buf), np.full(16, 2.0, np.float32))


async def test_reset_before_fence_completes_raises():
    dev = open_device("cpu")
    try:
        gate = dev.create_queue()
        dev.queue._backend.wait_for(gate._backend, 1)  # the default queue stalls until gate reaches 1
        ex = dev.executor()
        ex.fill(dev.alloc(4, "f32"), 1.0)
        value = ex.submit()
        assert not ex.is_complete()
        with pytest.raises(ValidationError, match=rf"^reset of a command list whose fence value {value} has not completed$"):
            ex.reset()
        g = dev.executor(queue=gate)
        g.fill(dev.alloc(4, "f32"), 0.0)
        g.submit()
        await ex.wait()
        ex.reset()
    finally:
        dev.close()


def test_reset_unsubmitted_restores_states(devices):
    buf = devices.alloc(4, "f32")
    ex = devices.executor()
    ex.fill(buf, 1.0)
    assert buf.state is S.COPY_DEST
    ex.reset()
    assert buf.state is S.COMMON


async def test_upload_copy_download_readback(devices, rng):
    a = rng.standard_normal(64).astype(np.float32)
    src, dst = devices.alloc(64, "f32"), devices.alloc(64, "f32")
    ex = devices.executor()
    ex.upload(src, a)
    ex.copy(dst, src)
    rb = ex.download(dst.view(16, 32))
    with pytest.raises(ValidationError, match=r"^readback is not ready: await the command list's fence first$"):
        rb.bytes()
    await ex.submit_and_wait()
    np.testing.assert_array_equal(rb.numpy(), a[4:12])
    ex.reset()  # still readable after the list is reused
    np.testing.assert_array_equal(rb.numpy((2, 4)), a[4:12].reshape(2, 4))


async def test_fill_dtypes(devices):
    bufs = {dt: devices.alloc(8, dt) for dt in ("f32", "f16", "i32", "u8")}
    ex = devices.executor()
    for b in bufs.values():
        ex.fill(b, 3)
    await ex.submit_and_wait()
    for dt, b in bufs.items():
        np.testing.assert_array_equal(devices.download_numpy(b), np.full(8, 3, b.dtype.numpy_type))


def test_bad_arguments(devices):
    a, b = devices.alloc(4, "f32"), devices.alloc(2, "f32")
    ex = devices.executor()
    with pytest.raises(ValueError, match=r"^copy of nbytes=16: src has 16 bytes, dst has 8$"):
        ex.copy(b, a)
    with pytest.raises(ValueError, match=r"^copy of nbytes=-1: src has 16 bytes, dst has 16$"):
        ex.copy(a, devices.alloc(4, "f32"), -1)
    with pytest.raises(ValueError, match=r"^copy: src and dst ranges overlap$"):
        ex.copy(a.view(0, 8), a.view(4, 8))
    with pytest.raises(ValueError, match=r"^fill: dst has 6 bytes, not a multiple of 4$"):
        ex.fill(devices.alloc(6, "u8"), 1)
    with pytest.raises(ValueError, match=r"^upload of 32 bytes into dst of 16 bytes$"):
        ex.upload(a, np.zeros(8, np.float32))
    with pytest.raises(ValueError, match=r"^download of nbytes=20 from src of 16 bytes$"):
        ex.download(a, 20)
    with pytest.raises(ValueError, match=r"^affine: binding 'y' has 8 bytes but the constants need 16$"):
        ex.dispatch("affine", [a, b], {"n": 4, "a": 1.0, "b": 0.0})
    with pytest.raises(ValueError, match=r"^affine: expected 2 bindings \(x, y\), got 1$"):
        ex.dispatch("affine", [a], {"n": 4, "a": 1.0, "b": 0.0})
    with pytest.raises(ValueError, match=r"^affine: constant 'b' is missing$"):
        ex.dispatch("affine", [a, a], {"n": 4, "a": 1.0})
    with pytest.raises(ValueError, match=r"^affine: constant n=-4 must be >= 0$"):
        ex.dispatch("affine", [a, b], {"n": -4, "a": 1.0, "b": 0.0})
    with pytest.raises(ValueError, match=r"^unknown kernel 'nope'; known kernels: add, affine"):
        ex.dispatch("nope", [a], {})
    with pytest.raises(ValidationError, match=r"^wait\(\): the command list was not submitted$"):
        ex.wait().send(None)


async def test_capture_and_replay(devices, rng):
    x = devices.upload(rng.standard_normal(16).astype(np.float32))
    y, z = devices.alloc(16, "f32"), devices.alloc(16, "f32")
    ex = devices.executor()
    ex.dispatch("affine", [x, y], AFFINE)
    ex.dispatch("affine", [y, z], {"n": 16, "a": -1.0, "b": 0.5})
    graph = ex.capture()
    assert ex.commands == () and x.state is S.COMMON  # capture executes nothing
    with pytest.raises(ValidationError, match=r"^capture: uploads, downloads and timestamps cannot be captured"):
        ex.upload(x, np.zeros(16, np.float32))
        ex.capture()
    ex.reset()
    for value in (1.0, 4.0):
        ex.reset()
        ex.upload(x, np.full(16, value, np.float32))
        ex.replay(graph)
        rb = ex.download(z)
        await ex.submit_and_wait()
        np.testing.assert_allclose(rb.numpy(), np.full(16, -(2 * value + 1) + 0.5), rtol=1e-6)
    ex.reset()
    y.free()
    with pytest.raises(ValidationError, match=r"^replay: buffer #\d+ used by the graph was freed after capture$"):
        ex.replay(graph)
    graph.destroy()
    with pytest.raises(ValidationError, match=r"^replay of a destroyed graph$"):
        ex.replay(graph)


async def test_use_after_free_is_caught_after_clean_replays(devices, rng):
    """The replay and submit checks skip their per-buffer scans while no buffer was freed
    (Device.free_epoch): a free between two replays must still be caught by both."""
    x = devices.upload(rng.standard_normal(16).astype(np.float32))
    y = devices.alloc(16, "f32")
    ex = devices.executor()
    ex.dispatch("affine", [x, y], AFFINE)
    graph = ex.capture()
    for _ in range(2):
        ex.reset()
        ex.replay(graph)
        await ex.submit_and_wait()
    ex.reset()
    ex.replay(graph)  # recorded while y is live ...
    y.free()  # ... freed before submit
    with pytest.raises(ValidationError, match=r"^submit: buffer #\d+ was freed after it was recorded \(use after free\)$"):
        ex.submit()
    ex.reset()
    with pytest.raises(ValidationError, match=r"^replay: buffer #\d+ used by the graph was freed after capture$"):
        ex.replay(graph)
    graph.destroy()


def test_recording_lowers_to_typed_commands(devices):
    """Each command kind lowers to its frozen record of hal/_commands.py, addresses as ``int``."""
    import dataclasses

    from xinfer_async.hal._commands import (CAPTURABLE, CopyCmd, DispatchCmd, DownloadCmd, FillCmd, ReplayCmd,
                                            TimestampCmd, UploadCmd)

    x, y = devices.alloc(16, "f32"), devices.alloc(16, "f32")
    rec = devices.executor()
    rec.dispatch("affine", [x, y], AFFINE)
    graph = rec.capture()
    ex = devices.executor()
    ex.upload(x, np.arange(16, dtype=np.float32))
    ex.fill(y, 1.0)
    ex.copy(y, x)
    ex.dispatch("affine", [x, y], AFFINE)
    ex.replay(graph)
    ts = ex.timestamp()
    ex.download(y)
    kinds = [CopyCmd, DispatchCmd, DownloadCmd, FillCmd, ReplayCmd, TimestampCmd, UploadCmd]
    assert [type(c) for c in ex.commands] == [UploadCmd, FillCmd, CopyCmd, DispatchCmd, ReplayCmd, TimestampCmd, DownloadCmd]
    assert [c.kind for c in ex.commands] == ["upload", "fill", "copy", "dispatch", "graph", "timestamp", "download"]
    up, fill, copy, disp, replay, stamp, down = ex.commands
    assert (up.dst, fill.dst, fill.nbytes, fill.pattern) == (x.address, y.address, 64, 0x3F800000)
    assert (copy.dst, copy.src, copy.nbytes) == (y.address, x.address, 64)
    assert disp.addresses == [x.address, y.address] and replay.graph is graph.handle and stamp.ts is ts
    assert down.src == y.address and down.host.nbytes == 64
    assert {t for t in kinds if issubclass(t, CAPTURABLE)} == {CopyCmd, DispatchCmd, FillCmd}
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.nbytes = 4
    ex.reset()
    graph.destroy()
