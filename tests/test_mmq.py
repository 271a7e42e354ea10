"""The integer matrix kernels (shaders/xi_mmq.cuh, opt-in with XINFER_MMQ): their numpy model
(tests/_mmq_model.py) against float64 and against itself on cpu; their launch rule; on cuda, every
entry against the model bit for bit (fresh random inputs, outputs poisoned first), at every T and
alone (batched == alone), and the one-token entry against the tiled one."""

from __future__ import annotations

import numpy as np
import pytest
from _kernel_refs import encode_weights
from _mmq_model import (SEG_BLOCKS, check_against_model, check_within_bound, dequantize, error_bound, matmul,
                        quantize_q8_1, rmsnorm_h, rmsnorm_inv, round_half_away, swiglu)

from xinfer_async.backends.cuda import _launch

F32 = np.float32
TYPES = ("q4_0", "q4_1", "q8_0")


def tokens(rng, T, K):
    """x (T, K) float32: normal values, each token at its own scale (e^-3 .. e^3), a few outliers."""
    x = rng.standard_normal((T, K)) * np.exp(rng.uniform(-3, 3, (T, 1)))
    x[rng.random((T, K)) < 0.002] *= 40
    return x.astype(F32)


def weights(rng, dt, N, K):
    """(GGUF bytes of a random (N, K) matrix of type dt, its exact float64 values)."""
    wq, w64 = encode_weights((rng.standard_normal((N, K)) * 0.05).astype(F32), dt)
    return wq, w64


# ---- the model on cpu ---------------------------------------------------------------------------
def test_round_half_away_from_zero():
    v = np.array([0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997, -0.49999997, 126.5, 3.0, -0.0], F32)
    assert round_half_away(v).tolist() == [1, -1, 2, -2, 3, -3, 0, 0, 127, 3, 0]


def test_quantize_q8_1(rng):
    h = tokens(rng, 5, 256)
    h[2, 32:64] = 0.0  # an all-zero block
    q, d, s = quantize_q8_1(h)
    hb = h.reshape(5, 8, 32).astype(np.float64)
    assert np.abs(q).max() == 127 and q.dtype == np.int64
    assert (np.abs(q).max(-1)[d > 0] == 127).all()  # the block's largest value maps to +-127
    assert (q[2, 1] == 0).all() and d[2, 1] == 0 and s[2, 1] == 0
    assert (np.abs(hb - d[..., None] * q) <= d[..., None] / 2 * (1 + 2.0 ** -20)).all()
    assert np.array_equal(s, (d * q.sum(-1).astype(F32)).astype(F32))


def test_rmsnorm_inv_matches_float64(rng):
    x = tokens(rng, 4, 576)
    inv = rmsnorm_inv(x, 1e-5)
    ref = 1 / np.sqrt((x.astype(np.float64) ** 2).mean(-1) + np.float64(F32(1e-5)))
    assert inv.dtype == F32 and np.allclose(inv, ref, rtol=2e-6, atol=0)


@pytest.mark.parametrize("dt", TYPES)
@pytest.mark.parametrize("norm", [False, True])
def test_model_is_within_its_bound_of_float64(rng, dt, norm):
    N, K, T = 37, 1056, 6
    wq, w64 = weights(rng, dt, N, K)
    x = tokens(rng, T, K)
    h = rmsnorm_h(x, (rng.standard_normal(K) + 1).astype(F32), 1e-5) if norm else x
    check_within_bound(matmul(wq, dt, h), wq, dt, h, w64, f"{dt} norm={norm}")
    assert np.allclose(dequantize(wq, dt, N, K)[0], w64)


@pytest.mark.parametrize("dt", TYPES)
def test_model_batched_equals_alone(rng, dt):
    N, K, T = 23, 544, 9
    wq, _ = weights(rng, dt, N, K)
    x = tokens(rng, T, K)
    y0 = rng.standard_normal((T, N)).astype(F32)
    y = matmul(wq, dt, x, y0)
    rb = (K // 32) * {"q4_0": 18, "q4_1": 20, "q8_0": 34}[dt]
    raw = np.asarray(wq).view(np.uint8).reshape(-1)
    for t in (0, 4, T - 1):
        assert np.array_equal(matmul(wq, dt, x[t:t + 1], y0[t:t + 1])[0], y[t])
    rows = raw[5 * rb:12 * rb]  # rows 5..11 alone
    assert np.array_equal(matmul(rows, dt, x, y0[:, 5:12]), y[:, 5:12])


def _segment_parallel(wq, dt, h):
    """The same sums computed the other way: every f_b first, then each segment's blocks added in
    order, then the segment sums in order (what a segment-parallel kernel computes)."""
    T, K = h.shape
    nb = K // 32
    from _q8dot_model import weight_codes

    N = np.asarray(wq).view(np.uint8).size // (nb * {"q4_0": 18, "q4_1": 20, "q8_0": 34}[dt])
    q, d, s = quantize_q8_1(h)
    codes, dw, mw = weight_codes(wq, dt, N, K)
    isum = np.einsum("nbj,tbj->tnb", codes, q)
    f = (dw[None] * d[:, None]).astype(F32) * isum.astype(F32)
    f = f.astype(F32)
    if mw is not None:
        f = (f + (mw[None] * s[:, None]).astype(F32)).astype(F32)
    segs = []
    for b0 in range(0, nb, SEG_BLOCKS):
        acc = np.zeros((T, N), F32)
        for b in range(b0, min(nb, b0 + SEG_BLOCKS)):
            acc = (acc + f[..., b]).astype(F32)
        segs.append(acc)
    tot = np.zeros((T, N), F32)
    for sg in segs:
        tot = (tot + sg).astype(F32)
    return tot


@pytest.mark.parametrize("dt", TYPES)
def test_model_order_is_the_segment_parallel_one(rng, dt):
    N, K, T = 19, 4000 // 32 * 32, 3  # 125 blocks: 7 full segments and a short one
    wq, _ = weights(rng, dt, N, K)
    x = tokens(rng, T, K)
    assert np.array_equal(matmul(wq, dt, x), _segment_parallel(wq, dt, x))


# ---- the launch rule ----------------------------------------------------------------------------
def test_mmq_mode_reads_xinfer_mmq():
    assert _launch.mmq_mode({}) == "" and _launch.mmq_mode({"XINFER_MMQ": "0"}) == ""
    assert _launch.mmq_mode({"XINFER_MMQ": "1"}) == "auto" and _launch.mmq_mode({"XINFER_MMQ": "tile"}) == "tile"
    with pytest.raises(ValueError, match=r"XINFER_MMQ='yes' is not one of"):
        _launch.mmq_mode({"XINFER_MMQ": "yes"})


def test_mmq_launch_geometry():
    c = dict(T=64, N=4096, K=4096, accumulate=0)
    # shared: 2 stages of (64 rows x 11 chunks of 16 bytes, 64 tokens x 272 code bytes, 8 x 64 (d, s)) + 64 scales
    assert _launch.mmq_shared("q4_1", 64) == 2 * (64 * 176 + 64 * 272 + 8 * 64 * 8) + 256 == 65792
    assert _launch.mmq_slot16("q8_0") == 19 and _launch.mmq_slot16("q4_0") == 11
    # 64 tokens a CTA where that grid has 2 CTAs an SM, else 16
    wide = dict(c, N=32768)  # 512 CTAs of 64 rows
    assert _launch.matmul_launch(wide, "q4_1", "matmul", mmq="auto") == ((512, 1, 1), (128, 1, 1), 65792, "_mmq")
    assert _launch.matmul_launch(c, "q4_1", "matmul", mmq="auto") == ((64, 4, 1), (128, 1, 1),
                                                                      _launch.mmq_shared("q4_1", 16), "_mmqs")
    assert _launch.matmul_launch(c, "q4_1", "matmul", sms=32, mmq="auto")[3] == "_mmq"
    assert _launch.matmul_launch(dict(wide, T=9), "q8_0", "matmul", mmq="auto")[3] == "_mmqs"
    g = _launch.matmul_launch(dict(c, T=100, N=14336), "q4_0", "rmsnorm_matmul_swiglu", mmq="auto")
    assert g[0] == (448, 2, 1) and g[3] == "_mmq"  # 32 output rows a CTA with GLU
    assert _launch.matmul_launch(dict(c, T=3), "q4_1", "matmul", mmq="auto") == ((256, 3, 1), (256, 1, 1),
                                                                                   40 * 128 + 16, "_q1")
    assert _launch.matmul_launch(dict(c, T=3, N=1000), "q4_1", "matmul", mmq="auto")[0] == (125, 3, 1)
    assert _launch.matmul_launch(dict(c, T=64), "q4_1", "matmul", mmq="q1")[3] == "_q1"
    assert _launch.matmul_launch(dict(c, T=1, K=40960), "q4_1", "matmul", mmq="q1")[3] == "_mmqs"  # too long a row
    assert _launch.matmul_launch(dict(c, T=1), "q4_1", "matmul", mmq="tile")[3] == "_mmqs"
    # off, or a type / device without them: today's kernels
    assert _launch.matmul_launch(c, "q4_1", "matmul")[3] == "_t"
    assert _launch.matmul_launch(c, "f16", "matmul", mmq="auto")[3] == "_t"
    assert _launch.matmul_launch(c, "q4_1", "matmul", cc=(7, 5), mmq="auto")[3] == "_t"
    assert "_q1" in _launch.matmul_entries("q4_0") and "_mmq" not in _launch.matmul_entries("q5_0")


# ---- the kernels on cuda ------------------------------------------------------------------------
KINDS = ("matmul", "rmsnorm_matmul", "rmsnorm_matmul_swiglu")
SHAPES = [(67, 96), (200, 800), (64, 4096), (130, 2080)]  # (N, K): K % 256 != 0, N % 64 != 0, 8 segments
TS = (1, 2, 7, 8, 9, 31, 64, 100, 256)


@pytest.fixture
def cuda_usable():
    """Skips, with the reason, where the cuda backend cannot run (a sync fixture: a skip raised inside
    the trio test itself would reach the report without its message)."""
    from xinfer_async._open import cuda_status

    ok, reason = cuda_status()
    if not ok:
        pytest.skip(f"cuda backend not usable here: {reason}")


def _open_cuda(monkeypatch, mode):
    from xinfer_async._open import cuda_status
    import xinfer_async

    ok, reason = cuda_status()
    if not ok:
        pytest.skip(f"cuda backend not usable here: {reason}")
    monkeypatch.setenv("XINFER_MMQ", mode)
    return xinfer_async.open_device("cuda")


async def _run(dev, name, inputs, out, consts):
    bufs = [dev.upload(a) for a in inputs]
    ex = dev.executor()
    ex.dispatch(name, bufs, consts)
    rb = ex.download(bufs[out])
    await ex.submit_and_wait()
    y = rb.numpy(inputs[out].shape, inputs[out].dtype)
    for b in bufs:
        b.free()
    return y


async def _kernel(dev, kind, dt, wq, x, norm, N, y0=None, eps=1e-5):
    """The kernel's y (T, N); y0: accumulate into it (else y starts as NaN)."""
    T, K = x.shape
    y = y0.copy() if y0 is not None else np.full((T, N), np.nan, F32)
    if kind == "matmul":
        return await _run(dev, f"matmul_{dt}", [wq, x, y], 2, dict(T=T, N=N, K=K, accumulate=int(y0 is not None)))
    consts = dict(T=T, N=N, K=K, eps=eps)
    if kind == "rmsnorm_matmul":
        consts["accumulate"] = int(y0 is not None)
    return await _run(dev, f"{kind}_{dt}", [wq, x, norm, y], 3, consts)


def _model(kind, dt, wq, x, norm, N, y0=None, eps=1e-5):
    h = x if kind == "matmul" else rmsnorm_h(x, norm, eps)
    if kind == "rmsnorm_matmul_swiglu":
        return swiglu(wq, dt, h, N)
    return matmul(wq, dt, h, y0)


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["auto", "tile", "q1"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dt", TYPES)
async def test_mmq_kernels_equal_the_model(cuda_usable, monkeypatch, rng, dt, kind, mode):
    dev = _open_cuda(monkeypatch, mode)
    try:
        for N, K in SHAPES:
            rows = 2 * N if kind == "rmsnorm_matmul_swiglu" else N
            wq, w64 = weights(rng, dt, rows, K)
            xs = tokens(rng, max(TS), K)
            norm = (rng.standard_normal(K) + 1).astype(F32)
            full = None
            for T in TS:
                x = xs[:T]
                y = await _kernel(dev, kind, dt, wq, x, norm, N)
                ref = _model(kind, dt, wq, x, norm, N)
                check_against_model(kind, y, ref, f"{dt} {kind} {mode} N={N} K={K} T={T}")
                if kind != "rmsnorm_matmul_swiglu":
                    h = x if kind == "matmul" else rmsnorm_h(x, norm, 1e-5)
                    dist = np.abs(y - h.astype(np.float64) @ w64.T)
                    assert (dist <= error_bound(wq, dt, h)).all()
                full = y
            # batched == alone: the first and last tokens of the widest launch, one at a time
            for t in (0, max(TS) - 1):
                y1 = await _kernel(dev, kind, dt, wq, xs[t:t + 1], norm, N)
                assert np.array_equal(y1[0].view(np.uint32), full[t].view(np.uint32)), f"{dt} {kind} {mode} token {t}"
            if kind != "rmsnorm_matmul_swiglu":  # accumulate
                y0 = rng.standard_normal((9, N)).astype(F32)
                y = await _kernel(dev, kind, dt, wq, xs[:9], norm, N, y0)
                check_against_model(kind, y, _model(kind, dt, wq, xs[:9], norm, N, y0), f"{dt} {kind} {mode} accumulate")
    finally:
        dev.close()


@pytest.mark.cuda
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dt", TYPES)
async def test_one_token_entry_equals_the_tiled_one(cuda_usable, monkeypatch, rng, dt, kind):
    """The same launch through ``_q1`` and through ``_mmqs`` / ``_mmq``: the same bits (SwiGLU's too)."""
    N, K = 300, 2848
    rows = 2 * N if kind == "rmsnorm_matmul_swiglu" else N
    wq, _ = weights(rng, dt, rows, K)
    norm = (rng.standard_normal(K) + 1).astype(F32)
    out = {}
    for mode in ("q1", "tile"):
        dev = _open_cuda(monkeypatch, mode)
        try:
            out[mode] = [await _kernel(dev, kind, dt, wq, tokens(np.random.default_rng(T), T, K), norm, N)
                         for T in (1, 5, 40)]
        finally:
            dev.close()
    for a, b in zip(out["q1"], out["tile"]):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
