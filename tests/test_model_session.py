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


def test_matrix_weight_takes_the_devices_layout(devices, rng):
    """``weight(..., matrix=True)`` stores a q4_1 matrix in ``matrix_dtype``: on cpu the
    row-interleaved q4_1_r8 (the bytes of tests/_q8dot_model.repack_r8, the same count), elsewhere
    the GGUF bytes; without ``matrix`` the bytes are kept."""
    import sys

    sys.path.insert(0, __import__("os").path.dirname(__file__))
    from _q8dot_model import repack_r8
    from test_native_kernels import encode

    N, K = 45, 64
    wq, _ = encode(rng.standard_normal((N, K)).astype(np.float32), "q4_1")
    s = ModelSession(devices)
    desc = TensorDesc((N, K), "q4_1")
    layout = s.matrix_dtype(desc)
    assert layout.label == ("q4_1_r8" if devices.backend.name == "cpu" else "q4_1")
    r = s.weight(wq, desc, name="w", matrix=True)
    assert r.nbytes == desc.nbytes
    got = np.frombuffer(devices.download(r.allocation.buffer), np.uint8)
    want = repack_r8(wq, "q4_1", N, K) if layout.label == "q4_1_r8" else np.ascontiguousarray(wq).view(np.uint8).ravel()
    np.testing.assert_array_equal(got, want)
    plain = s.weight(wq, desc, name="w2")
    np.testing.assert_array_equal(np.frombuffer(devices.download(plain.allocation.buffer), np.uint8),
                                  np.ascontiguousarray(wq).view(np.uint8).ravel())
    assert s.matrix_dtype(TensorDesc((N, K), "f32")).label == "f32"
    with pytest.raises(ValueError, match=r"data has 10 bytes but shape=\(45, 64\) dtype=q4_1 needs 1800"):
        s.weight(np.zeros(10, np.uint8), desc, matrix=True)


def test_cpu_repack_switch(monkeypatch):
    from xinfer_async.backends.cpu import CPUBackend
    from xinfer_async.hal import DType

    monkeypatch.delenv("XINFER_CPU_REPACK", raising=False)  # unset: repacked
    assert CPUBackend().matrix_dtype(DType.q4_1, (64, 64)) is DType.q4_1_r8
    monkeypatch.setenv("XINFER_CPU_REPACK", "0")
    assert CPUBackend().matrix_dtype(DType.q4_1, (64, 64)) is DType.q4_1
    monkeypatch.setenv("XINFER_CPU_REPACK", "1")
    b = CPUBackend()
    assert b.matrix_dtype(DType.q4_1, (64, 64)) is DType.q4_1_r8
    assert b.matrix_dtype(DType.q8_0, (64, 48)) is DType.q8_0  # K not a multiple of 32: kept
    assert b.matrix_dtype(DType.q6_k, (64, 256)) is DType.q6_k
    with pytest.raises(ValueError, match="cpu: no layout q8_0_r8 for a q4_1 matrix of shape"):
        b.repack(np.zeros(40, np.uint8), DType.q4_1, (2, 32), DType.q8_0_r8)
    monkeypatch.setenv("XINFER_CPU_REPACK", "yes")
    with pytest.raises(ValueError, match=r"XINFER_CPU_REPACK='yes' is not one of '', '0', '1'"):
        CPUBackend()
