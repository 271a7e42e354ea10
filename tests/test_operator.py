"""ops/_operator.py: the Gemm operator's lifecycle create / compile / initialize / bind / dispatch."""

import numpy as np
import pytest

from xinfer_async import DType, Gemm, ValidationError


def bf16_bits(x):
    """float32 -> bf16 bits (uint16), round to nearest even."""
    b = x.astype(np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("trans_b", [False, True])
async def test_gemm_vs_numpy(devices, rng, dtype, trans_b):
    m, n, k = 7, 33, 64
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    if dtype == "bf16":
        ah, bh = bf16_bits(a), bf16_bits(b)
        a64, b64 = from_bf16(ah).astype(np.float64), from_bf16(bh).astype(np.float64)
        ab, bb = devices.upload(ah, ah.shape, "bf16"), devices.upload(bh, bh.shape, "bf16")
        c = devices.upload(np.full((m, n), 0x7FC0, np.uint16), (m, n), "bf16")  # NaN
    else:
        npt = DType.parse(dtype).numpy_type
        a64, b64 = a.astype(npt).astype(np.float64), b.astype(npt).astype(np.float64)
        ab, bb = devices.upload(a.astype(npt)), devices.upload(b.astype(npt))
        c = devices.upload(np.full((m, n), np.nan, npt))
    op = Gemm.create(devices, m, n, k, dtype, trans_b=trans_b)
    with pytest.raises(ValidationError, match=r"^Gemm.initialize before compile\(\)$"):
        op.initialize(devices.executor())
    with pytest.raises(ValidationError, match=r"^Gemm.dispatch before compile\(\)$"):
        op.dispatch(devices.executor())
    assert op.compile() is op
    ex = devices.executor()
    op.initialize(ex)
    with pytest.raises(ValidationError, match=r"^Gemm.dispatch before bind\(\)$"):
        op.dispatch(ex)
    op.bind(ab, bb, c)
    op.dispatch(ex)
    await ex.submit_and_wait()
    ref = a64 @ (b64.T if trans_b else b64)
    got = devices.download_numpy(c)
    if dtype == "bf16":
        got = from_bf16(got.view(np.uint16).reshape(m, n))
    rtol = {"f32": 1e-5, "f16": 2e-3, "bf16": 1e-2}[dtype]
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=rtol, atol=rtol * np.abs(ref).max())
    assert op.flops == 2 * m * n * k


def test_gemm_create_and_bind_errors(devices):
    with pytest.raises(ValueError, match=r"^Gemm k=0 must be > 0$"):
        Gemm(devices, 2, 2, 0)
    with pytest.raises(TypeError, match=r"^Gemm dtype=i32 is not supported; choose f32, f16 or bf16$"):
        Gemm(devices, 2, 2, 2, "i32")
    op = Gemm(devices, 4, 8, 16).compile()
    a, b, c = devices.alloc((4, 16), "f32"), devices.alloc((16, 8), "f32"), devices.alloc((4, 8), "f32")
    with pytest.raises(ValueError, match=r"^Gemm binding 'b' has 256 bytes, needs 512$"):
        op.bind(a, devices.alloc((8, 8), "f32"), c)
    with pytest.raises(ValueError, match=r"^Gemm binding 'c' has 64 bytes, needs 128$"):
        op.bind(a, b, devices.alloc((4, 4), "f32"))
    with pytest.raises(TypeError, match=r"^a must be a DeviceBuffer or BufferView, got ndarray$"):
        op.bind(np.zeros((4, 16), np.float32), b, c)
    op.bind(a, b, c)
