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


async def test_gemm_workspace_binding(rng):
    """Where the backend's algorithm needs workspace (cuda: a decode-bucket split-K GEMM), ``bind``
    takes one (or allocates the operator's own), refuses one too small, and the recorded command
    carries its address; the cpu backend, asked here to want 4 KiB, computes the same product."""
    import xinfer_async
    from xinfer_async.hal._commands import GemmCmd

    dev = xinfer_async.open_device("cpu")
    try:
        dev.backend.gemm_workspace_nbytes = lambda gemm: 4096
        with pytest.raises(ValidationError, match=r"^Gemm.bind before compile\(\)$"):
            Gemm(dev, 4, 8, 16, "f16", trans_b=True, out_dtype="f32").bind(None, None, None)
        op = Gemm(dev, 4, 8, 16, "f16", trans_b=True, out_dtype="f32").compile()
        assert op.workspace_nbytes == 4096
        a16 = rng.standard_normal((4, 16)).astype(np.float16)
        w16 = rng.standard_normal((8, 16)).astype(np.float16)
        a, b, c = dev.upload(a16), dev.upload(w16), dev.alloc((4, 8), "f32")
        with pytest.raises(ValueError, match=r"^Gemm binding 'workspace' has 1024 bytes, needs 4096$"):
            op.bind(a, b, c, dev.alloc(1024, "u8"))
        recorded = []
        for ws in (dev.alloc(8192, "u8"), None):
            op.bind(a, b, c, ws)
            ex = dev.executor()
            real = ex.record_operator
            ex.record_operator = lambda cmd, acc: (recorded.append((cmd, [n for _, _, n in acc])), real(cmd, acc))
            op.dispatch(ex)
            rb = ex.download(c)
            await ex.submit_and_wait()
            got = rb.numpy((4, 8), np.float32)
            np.testing.assert_allclose(got, a16.astype(np.float64) @ w16.astype(np.float64).T, rtol=1e-5, atol=1e-5)
            cmd, names = recorded[-1]
            assert isinstance(cmd, GemmCmd) and names == ["a", "b", "c", "workspace"]
            assert cmd.workspace == (ws.address if ws is not None else op._bound[3].address) != 0
        own = op._bound[3].address
        op.bind(a, b, c)
        assert op._bound[3].address == own  # the operator's own workspace, allocated once
        del dev.backend.gemm_workspace_nbytes
        plain = Gemm(dev, 4, 8, 16, "f16", trans_b=True, out_dtype="f32").compile()
        plain.bind(a, b, c, dev.alloc(16, "u8"))  # not needed: ignored
        assert plain.workspace_nbytes == 0 and len(plain._bound) == 3
    finally:
        dev.close()
