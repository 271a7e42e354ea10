"""``model/_session.py``: ModelSession (weights, scratch, kernels, freeze) and ModelContext."""

import numpy as np
import pytest

import xinfer_async
from xinfer_async.hal import TensorDesc, ValidationError
from xinfer_async.model import ModelContext, ModelDefinition, ModelSession, Placement


def test_weight_is_uploaded_once_and_immutable(devices):
    rng = np.random.default_rng()
    data = rng.standard_normal((16, 32)).astype(np.float32)
    before = devices.allocated_bytes
    s = ModelSession(devices)
    r = s.weight(data, TensorDesc((16, 32), "f32"), name="w")
    assert r.allocation.is_weight and r.nbytes == data.nbytes
    assert devices.allocated_bytes - before == data.nbytes  # 2048 bytes: a multiple of the 256-byte alignment
    np.testing.assert_array_equal(devices.download_numpy(r.allocation.buffer), data)


def test_weight_byte_count_must_match(devices):
    s = ModelSession(devices)
    with pytest.raises(ValueError, match=r"data has 128 bytes but shape=\(16,\) dtype=f32 needs 64"):
        s.weight(np.ones(32, np.float32), TensorDesc((16,), "f32"))
    with pytest.raises(TypeError, match="desc must be a TensorDesc, got tuple"):
        s.weight(np.ones(4, np.float32), (4,))


def test_scratch_is_a_size_only(devices):
    before = devices.allocated_bytes
    s = ModelSession(devices)
    r = s.scratch(1024, Placement.SHARED, name="io")
    st = s.scratch(512, persistent=True)
    assert devices.allocated_bytes == before  # slots allocate their own
    assert r.allocation.buffer is None and not r.allocation.is_weight
    assert r.allocation.placement is Placement.SHARED and st.nbytes == 512
    for bad in (0, -4, 1.5):
        with pytest.raises(ValueError, match=f"nbytes must be a positive int, got {bad!r}"):
            s.scratch(bad)


def test_kernel_registration(devices):
    s = ModelSession(devices)
    k = s.kernel("rmsnorm")
    assert s.kernel("rmsnorm") is k and k.name == "rmsnorm"
    with pytest.raises(ValueError, match="unknown kernel 'no_such_kernel'; known kernels: "):
        s.kernel("no_such_kernel")


def test_freeze_returns_definition_and_closes_session(devices):
    s = ModelSession(devices)
    s.weight(np.ones(8, np.float32), TensorDesc((8,), "f32"))
    d = s.freeze(ModelContext(devices))
    assert isinstance(d, ModelDefinition) and d.device is devices and d.weight_bytes() == 32
    with pytest.raises(ValidationError, match="the session was frozen; build a new ModelSession"):
        s.scratch(64)
    with pytest.raises(ValidationError, match="the session was frozen"):
        s.freeze(ModelContext(devices))


def test_freeze_refuses_a_context_on_another_device(devices):
    other = xinfer_async.open_device("cpu")  # two cpu devices are two devices
    try:
        s = ModelSession(devices)
        s.weight(np.ones(8, np.float32), TensorDesc((8,), "f32"))
        with pytest.raises(ValueError, match=r"freeze: context is on another device \(<CPUDevice cpu> at 0x[0-9a-f]+\) "
                                             r"than the session's weights"):
            s.freeze(ModelContext(other))
        s.freeze(ModelContext(devices))  # the session is still usable after the refusal
    finally:
        other.close()


def test_context_refuses_a_queue_of_another_device(devices):
    other = xinfer_async.open_device("cpu")
    try:
        with pytest.raises(ValueError, match=r"queue is a queue of another device"):
            ModelContext(devices, other.queue)
        q = devices.create_queue()
        assert ModelContext(devices, q).queue is q
        assert ModelContext(devices).queue is devices.queue
    finally:
        other.close()
