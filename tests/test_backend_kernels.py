"""Every kernel of native/KERNELS.md dispatched through the runtime (Executor.dispatch) on each
device present, against a numpy float64 reference on fresh random inputs; outputs poisoned with
NaN first. Also the source's lab test ``buffer_roundtrip``."""

import numpy as np
import pytest
from _kernel_refs import activation_quantization_bound, att_workspace, attention_ref, encode_weights as encode
from _kernel_refs import random_blocks

RTOL = 1e-5


@pytest.mark.parametrize("dtype", ["u8", "f16", "f32", "i32"])
@pytest.mark.parametrize("nbytes", [1, 4, 1000, 4096 * 3 + 4, 64 << 20])
def test_buffer_roundtrip(devices, rng, dtype, nbytes):
    item = {"u8": 1, "f16": 2, "f32": 4, "i32": 4}[dtype]
    n = max(1, nbytes // item)
    data = rng.integers(0, 256, size=n * item, dtype=np.uint8).view({"u8": np.uint8, "f16": np.float16,
                                                                       "f32": np.float32, "i32": np.int32}[dtype])
    buf = devices.upload(data)
    assert buf.size_in_bytes == n * item
    assert devices.download(buf) == data.tobytes()
    buf.free()


async def run(dev, name, inputs, outputs, consts):
    """Upload ``inputs`` (in binding order, None marks an output), dispatch, download outputs."""
    bufs = []
    for arr in inputs:
        bufs.append(dev.upload(arr))
    ex = dev.executor()
    ex.dispatch(name, bufs, consts)
    rbs = [ex.download(bufs[i]) for i in outputs]
    await ex.submit_and_wait()
    return [rb.numpy(inputs[i].shape, inputs[i].dtype) for rb, i in zip(rbs, outputs)]


def nan(*shape):
    return np.full(shape, np.nan, np.float32)


def f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


async def test_affine_and_add(devices, rng):
    n = 1000
    x, z = f32(rng, n), f32(rng, n)
    (y,) = await run(devices, "affine", [x, nan(n)], [1], {"n": n, "a": 1.5, "b": -0.25})
    np.testing.assert_allclose(y, 1.5 * x.astype(np.float64) - 0.25, rtol=RTOL, atol=1e-6)
    (y,) = await run(devices, "add", [x, z, nan(n)], [2], {"n": n})
    np.testing.assert_allclose(y, x.astype(np.float64) + z, rtol=RTOL, atol=1e-6)


async def test_rmsnorm(devices, rng):
    rows, dim, eps = 5, 576, 1e-5
    x, w = f32(rng, rows, dim, scale=3.0), f32(rng, dim)
    (y,) = await run(devices, "rmsnorm", [x, w, nan(rows, dim)], [2], {"rows": rows, "dim": dim, "eps": eps})
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + eps) * w
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=1e-6)


async def test_rope(devices, rng):
    rows, nh, hd, theta, stride = 4, 3, 16, 10000.0, 3 * 16 + 8
    x = f32(rng, rows, stride)
    pos = np.array([0, 5, -1, 1000], np.int32)
    (y,) = await run(devices, "rope", [x, pos], [0],
                     {"rows": rows, "n_head": nh, "head_dim": hd, "row_stride": stride, "theta": theta})
    ref = x.astype(np.float64).copy()
    freqs = theta ** (-np.arange(0, hd, 2) / hd)
    for r in range(rows):
        if pos[r] < 0:
            continue
        ang = pos[r] * freqs
        c, s = np.cos(ang), np.sin(ang)
        for h in range(nh):
            a, b = ref[r, h * hd:(h + 1) * hd:2].copy(), ref[r, h * hd + 1:(h + 1) * hd:2].copy()
            ref[r, h * hd:(h + 1) * hd:2] = a * c - b * s
            ref[r, h * hd + 1:(h + 1) * hd:2] = a * s + b * c
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=1e-4)  # angles up to 1e3 rad in f32
    np.testing.assert_array_equal(y[2], x[2])
    np.testing.assert_array_equal(y[:, nh * hd:], x[:, nh * hd:])


async def test_swiglu(devices, rng):
    rows, n, stride = 3, 100, 130
    g, u = f32(rng, rows, stride, scale=4.0), f32(rng, rows, stride)
    (y,) = await run(devices, "swiglu", [g, u, nan(rows, n)], [2], {"rows": rows, "n": n, "in_stride": stride})
    g64 = g[:, :n].astype(np.float64)
    np.testing.assert_allclose(y, g64 / (1 + np.exp(-g64)) * u[:, :n], rtol=RTOL, atol=1e-6)


async def test_softmax(devices, rng):
    rows, n = 4, 300
    x = f32(rng, rows, n, scale=5.0)
    x[1] += 1e4  # no overflow: the max is subtracted
    (y,) = await run(devices, "softmax", [x, nan(rows, n)], [1], {"rows": rows, "n": n})
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=RTOL, atol=1e-7)


async def test_attention_gqa(devices, rng):
    T, nh, nkv, hd, ctx = 4, 8, 2, 32, 16
    q, k, v = f32(rng, T, nh, hd), f32(rng, ctx, nkv, hd), f32(rng, ctx, nkv, hd)
    q[1] *= 300.0  # scores ~1e4 on this row
    k[:4] *= 10.0
    k[0, 0] = q[1, 0] / 30.0  # one key along row 1's first head: a score > 1e3 whatever the seed
    pos = np.array([3, 7, -1, 15], np.int32)
    scale = 1.0 / np.sqrt(hd)
    consts = {"T": T, "n_head": nh, "n_kv": nkv, "head_dim": hd, "ctx": ctx, "q_stride": nh * hd, "scale": scale, "window": 0}
    (out,) = await run(devices, "attention", [q, k, v, pos, nan(T, nh, hd), *att_workspace(T, nh, hd)], [4], consts)
    ref = attention_ref(q, k, v, pos, nh, nkv, hd, np.float32(scale))
    s_max = np.abs(k[: pos[1] + 1, 0].astype(np.float64) @ q[1, 0].astype(np.float64) * scale).max()
    assert s_max > 1e3
    assert np.isfinite(out).all()
    normal = [0, 3]
    np.testing.assert_allclose(out[normal], ref[normal], rtol=RTOL, atol=2e-5)
    # the row with scores ~1e4: float32 scores carry an absolute error ~|s| * eps32, which moves
    # the softmax weights by that much relatively; bound the output by it (first order, x4)
    eps32 = np.finfo(np.float32).eps
    np.testing.assert_allclose(out[1], ref[1], rtol=RTOL, atol=4 * s_max * eps32 * np.abs(v).max())
    np.testing.assert_array_equal(out[2], 0.0)


async def _check_batched_row(dev, row, qt, k, v, first, last, seq_ctx, nh, nkv, hd, scale):
    """Row ``row`` of ``attention_batched`` (query ``qt``, keys first..last of the stacked cache): float64
    within tolerance, and bit-identical to ``attention`` of that token alone over its own rows."""
    kt, vt = np.ascontiguousarray(k[first:first + seq_ctx]), np.ascontiguousarray(v[first:first + seq_ctx])
    p = last - first
    ref = attention_ref(qt[None], kt, vt, np.array([p]), nh, nkv, hd, np.float32(scale))
    np.testing.assert_allclose(row, ref[0], rtol=RTOL, atol=2e-5)
    c1 = {"T": 1, "n_head": nh, "n_kv": nkv, "head_dim": hd, "ctx": seq_ctx, "q_stride": nh * hd, "scale": scale, "window": 0}
    (single,) = await run(dev, "attention", [np.ascontiguousarray(qt[None]), kt, vt, np.array([p], np.int32),
                                             nan(1, nh, hd), *att_workspace(1, nh, hd)], [4], c1)
    np.testing.assert_array_equal(row, single[0])


async def test_attention_batched(devices, rng):
    """Sequences stacked in one cache (sequence s owns rows s*seq_ctx...): float64 reference, and
    bit-identity with ``attention`` over each sequence's own rows (same device, same math)."""
    T, nh, nkv, hd, seq_ctx = 5, 9, 3, 64, 40
    rows = 4 * seq_ctx
    q, k, v = f32(rng, T, nh, hd), f32(rng, rows, nkv, hd), f32(rng, rows, nkv, hd)
    q[1] *= 40.0  # large scores on this row
    first = np.array([2, 0, 1, -1, 3], np.int32) * seq_ctx
    last = first + np.array([seq_ctx - 1, 0, 17, 0, 5], np.int32)
    last[3] = -1  # padding: zero row
    scale = 1.0 / np.sqrt(hd)
    consts = {"T": T, "n_head": nh, "n_kv": nkv, "head_dim": hd, "rows": rows, "q_stride": nh * hd, "scale": scale, "window": 0}
    (out,) = await run(devices, "attention_batched", [q, k, v, first, last, nan(T, nh, hd), *att_workspace(T, nh, hd)], [5], consts)
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out[3], 0.0)
    for t in (0, 1, 2, 4):
        await _check_batched_row(devices, out[t], q[t], k, v, int(first[t]), int(last[t]), seq_ctx, nh, nkv, hd, scale)


@pytest.mark.parametrize("nh,nkv,hd", [(9, 3, 64), (28, 4, 128), (14, 2, 200), (6, 6, 32), (10, 2, 66)])
async def test_attention_batched_wide_matches_single(devices, rng, nh, nkv, hd):
    """Enough tokens that a GPU runs several query heads of a kv head in one block (cuda: T * n_kv >= its
    SMs; group sizes 3, 7 (blocks of 4 + 3), 7 at head_dim 200 (a head at a time), 1, 5 at head_dim 66
    (k read a float at a time)): every row still equals ``attention`` of that token alone (a head a
    block) bit for bit, and float64 within tolerance."""
    T, seq_ctx = max(8, -(-160 // nkv)), 24
    rows = T * seq_ctx
    q, k, v = f32(rng, T, nh, hd), f32(rng, rows, nkv, hd), f32(rng, rows, nkv, hd)
    first = np.arange(T, dtype=np.int32) * seq_ctx
    last = first + rng.integers(0, seq_ctx, size=T).astype(np.int32)
    scale = 1.0 / np.sqrt(hd)
    consts = {"T": T, "n_head": nh, "n_kv": nkv, "head_dim": hd, "rows": rows, "q_stride": nh * hd, "scale": scale, "window": 0}
    (out,) = await run(devices, "attention_batched", [q, k, v, first, last, nan(T, nh, hd), *att_workspace(T, nh, hd)], [5], consts)
    assert np.isfinite(out).all()
    for t in rng.choice(T, size=4, replace=False):
        await _check_batched_row(devices, out[t], q[t], k, v, int(first[t]), int(last[t]), seq_ctx, nh, nkv, hd, scale)


async def test_kv_store(devices, rng):
    T, width, ctx, stride = 3, 24, 8, 30
    src = f32(rng, T, stride)
    cache = f32(rng, ctx, width)
    pos = np.array([2, 9, 0], np.int32)  # 9 is outside: skipped
    (got,) = await run(devices, "kv_store", [src, cache, pos], [1], {"T": T, "width": width, "ctx": ctx, "src_stride": stride})
    ref = cache.copy()
    ref[2], ref[0] = src[0, :width], src[2, :width]
    np.testing.assert_array_equal(got, ref)


async def test_argmax(devices, rng):
    rows, n = 3, 1000
    x = f32(rng, rows, n)
    x[2, 10] = x[2, 20] = x[2].max() + 1  # ties: the lowest index
    (out,) = await run(devices, "argmax", [x, np.full(rows, -7, np.int32)], [1], {"rows": rows, "n": n})
    np.testing.assert_array_equal(out, [x[0].argmax(), x[1].argmax(), 10])


@pytest.mark.parametrize("dt", ["f32", "f16", "q8_0", "q4_0", "q4_1"])
async def test_matmul_and_get_rows(devices, rng, dt):
    T, N, K = 3, 40, 128
    w = f32(rng, N, K)
    raw, exact = encode(w, dt)
    wbuf = devices.upload(raw, (N, K), dt) if raw.dtype == np.uint8 else devices.upload(raw)
    x = f32(rng, T, K)
    y0 = f32(rng, T, N)
    xb, yb = devices.upload(x), devices.upload(y0)
    ids = np.array([5, 0, 39, 40], np.int32)
    idb, out = devices.upload(ids), devices.upload(nan(4, K))
    ex = devices.executor()
    ex.dispatch(f"matmul_{dt}", [wbuf, xb, yb], {"T": T, "N": N, "K": K, "accumulate": 1})
    ex.dispatch(f"get_rows_{dt}", [wbuf, idb, out], {"T": 4, "dim": K, "vocab": N})
    ry, ro = ex.download(yb), ex.download(out)
    await ex.submit_and_wait()
    ref = y0 + x.astype(np.float64) @ exact.T
    # the cpu's block-type products round x to int8 per block of 32: its bound on top
    got = ry.numpy((T, N))
    bound = RTOL * np.abs(ref) + 1e-5 * np.abs(ref).max() + activation_quantization_bound(devices.name, dt, x, exact)
    assert (np.abs(got - ref) <= bound).all(), f"max err / bound {np.max(np.abs(got - ref) / bound)}"
    rows = ro.numpy((4, K))
    np.testing.assert_array_equal(rows[:3], exact[ids[:3]].astype(np.float32))
    assert np.isnan(rows[3]).all()  # id outside [0, vocab)


@pytest.mark.parametrize("dt", ["q8_0", "q4_0", "q4_1"])
async def test_dequantize(devices, rng, dt):
    n = 32 * 50
    raw, exact = encode(f32(rng, 1, n), dt)
    src = devices.upload(raw, (n,), dt)
    dst = devices.upload(nan(n))
    ex = devices.executor()
    ex.dispatch(f"dequantize_{dt}", [src, dst], {"n": n})
    rb = ex.download(dst)
    await ex.submit_and_wait()
    np.testing.assert_array_equal(rb.numpy(), exact.reshape(-1).astype(np.float32))


#: the types of native/kernels/kquant.c and shaders/xi_kquant.cuh: (ggml type, block elements, block
#: bytes, offsets of the block's f16 scales)
@pytest.mark.parametrize("dt", ["q5_0", "q5_1", "iq4_nl", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_xs", "bf16"])
async def test_kquant_kernels(devices, rng, dt):
    """get_rows / dequantize bit-exact with gguf; matmul, rmsnorm_matmul, rmsnorm_matmul_swiglu against
    float64 within 8 eps of sum |w h| (f32 sums); a row alone equals the row among T = 6."""
    T, N, K = 6, 40, 512
    raw, exact = random_blocks(rng, dt, 2 * N, K)
    wbuf = devices.upload(raw, (2 * N, K), dt)
    x, norm, y0 = f32(rng, T, K), f32(rng, K), f32(rng, T, 2 * N)
    xb, nb_, yb = devices.upload(x), devices.upload(norm), devices.upload(y0)
    x1b, y1b = devices.upload(np.ascontiguousarray(x[2:3])), devices.upload(nan(1, 2 * N))
    ids = np.array([5, 0, 79, 80], np.int32)
    idb, rows_b = devices.upload(ids), devices.upload(nan(4, K))
    hb, gb, yzb = devices.upload(nan(T, 2 * N)), devices.upload(nan(T, N)), devices.upload(nan(T, 2 * N))
    ex = devices.executor()
    ex.dispatch(f"matmul_{dt}", [wbuf, xb, yb], {"T": T, "N": 2 * N, "K": K, "accumulate": 1})
    ex.dispatch(f"matmul_{dt}", [wbuf, xb, yzb], {"T": T, "N": 2 * N, "K": K, "accumulate": 0})
    ex.dispatch(f"matmul_{dt}", [wbuf, x1b, y1b], {"T": 1, "N": 2 * N, "K": K, "accumulate": 0})
    ex.dispatch(f"get_rows_{dt}", [wbuf, idb, rows_b], {"T": 4, "dim": K, "vocab": 2 * N})
    ex.dispatch(f"rmsnorm_matmul_{dt}", [wbuf, xb, nb_, hb], {"T": T, "N": 2 * N, "K": K, "accumulate": 0, "eps": 1e-5})
    ex.dispatch(f"rmsnorm_matmul_swiglu_{dt}", [wbuf, xb, nb_, gb], {"T": T, "N": N, "K": K, "eps": 1e-5})
    outs = [ex.download(b) for b in (yb, y1b, rows_b, hb, gb, yzb)]
    deq = None
    if dt != "bf16":
        src, dst = devices.upload(raw, (2 * N, K), dt), devices.upload(nan(2 * N * K))
        ex.dispatch(f"dequantize_{dt}", [src, dst], {"n": 2 * N * K})
        deq = ex.download(dst)
    await ex.submit_and_wait()
    y, y1, rows, h, g, yz = (o.numpy() for o in outs)
    eps = np.finfo(np.float32).eps
    x64 = x.astype(np.float64)
    ref = y0 + x64 @ exact.T
    # + on the cpu's int8-activation types (q5_0, q5_1, q4_k, q5_k, q6_k) x's rounding per block
    bound = 8 * eps * (np.abs(x64) @ np.abs(exact).T + np.abs(y0)) + activation_quantization_bound(devices.name, dt, x, exact)
    err = np.abs(y.reshape(T, 2 * N) - ref)
    print(f"{devices.name} matmul_{dt}: max |err| {err.max():.3g}, max err/bound {(err / bound).max():.3g}")
    assert (err <= bound).all()
    assert np.array_equal(y1.reshape(-1).view(np.uint32), yz.reshape(T, 2 * N)[2].view(np.uint32))  # alone == batched
    rows = rows.reshape(4, K)
    np.testing.assert_array_equal(rows[:3], exact[ids[:3]].astype(np.float32))
    assert np.isnan(rows[3]).all()
    if deq is not None:
        np.testing.assert_array_equal(deq.numpy(), exact.reshape(-1).astype(np.float32))
    hn = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + np.float64(np.float32(1e-5))) * norm
    href = hn @ exact.T
    qb = activation_quantization_bound(devices.name, dt, hn.astype(np.float32), exact)
    hbound = 16 * eps * (np.abs(hn) @ np.abs(exact).T) + 1e-6 * np.abs(href).max() + qb
    assert (np.abs(h.reshape(T, 2 * N) - href) <= hbound).all(), np.abs(h.reshape(T, 2 * N) - href).max()
    gate, up = href[:, :N], href[:, N:]
    with np.errstate(over="ignore"):  # silu of a large negative gate: exp overflows, the product is -0
        gref = gate / (1 + np.exp(-gate)) * up
    if np.max(qb) == 0:
        np.testing.assert_allclose(g.reshape(T, N), gref, rtol=1e-4, atol=1e-5 * np.abs(gref).max())
    else:  # gate and up each off by up to hbound: |d silu| <= 1.1 |d gate|, first order plus the product
        dg, du = hbound[:, :N], hbound[:, N:]
        with np.errstate(over="ignore"):
            sg = np.abs(gate / (1 + np.exp(-gate)))
        gb = 1e-4 * np.abs(gref) + 1.1 * dg * np.abs(up) + sg * du + 1.1 * dg * du
        assert (np.abs(g.reshape(T, N) - gref) <= gb).all(), np.max(np.abs(g.reshape(T, N) - gref) / gb)


# -- the blocks of the other decoder families (llm/_arch.py) -----------------------------------------
@pytest.mark.parametrize("window", [1, 3, 6])
async def test_attention_sliding_window(devices, rng, window):
    """Keys j with pos - j < window only (llama.cpp is_masked_swa): the float64 reference over the
    window's keys alone; a window as large as the context is plain causal attention, bit for bit."""
    T, nh, nkv, hd, ctx = 5, 4, 2, 32, 16
    q, k, v = f32(rng, T, nh, hd), f32(rng, ctx, nkv, hd), f32(rng, ctx, nkv, hd)
    pos = np.array([0, 2, 7, -1, 15], np.int32)
    scale = 1.0 / np.sqrt(hd)
    consts = {"T": T, "n_head": nh, "n_kv": nkv, "head_dim": hd, "ctx": ctx, "q_stride": nh * hd, "scale": scale}
    (out,) = await run(devices, "attention", [q, k, v, pos, nan(T, nh, hd), *att_workspace(T, nh, hd)], [4], dict(consts, window=window))
    for t in (0, 1, 2, 4):
        s = max(0, int(pos[t]) - window + 1)
        ref = attention_ref(q[t:t + 1], k[s:], v[s:], np.array([pos[t] - s]), nh, nkv, hd, np.float32(scale))
        np.testing.assert_allclose(out[t], ref[0], rtol=RTOL, atol=2e-5)
    np.testing.assert_array_equal(out[3], 0.0)
    (full,) = await run(devices, "attention", [q, k, v, pos, nan(T, nh, hd), *att_workspace(T, nh, hd)], [4], dict(consts, window=ctx))
    (none,) = await run(devices, "attention", [q, k, v, pos, nan(T, nh, hd), *att_workspace(T, nh, hd)], [4], dict(consts, window=0))
    np.testing.assert_array_equal(full, none)
    # the batched kernel over the same keys (one sequence at rows 0..ctx-1): bit-identical
    first, last = np.where(pos < 0, -1, 0).astype(np.int32), pos.copy()
    cb = dict(consts, rows=ctx, window=window)
    del cb["ctx"]
    (bat,) = await run(devices, "attention_batched", [q, k, v, first, last, nan(T, nh, hd), *att_workspace(T, nh, hd)], [5], cb)
    np.testing.assert_array_equal(bat, out)


async def test_qk_rmsnorm(devices, rng):
    T, nh, nkv, hd, eps = 3, 4, 2, 32, 1e-6
    stride = (nh + 2 * nkv) * hd + 5  # q, k, v heads and padding: v and the padding untouched
    x, qn, kn = f32(rng, T, stride, scale=3.0), f32(rng, hd), f32(rng, hd)
    (y,) = await run(devices, "qk_rmsnorm", [x, qn, kn], [0],
                     {"T": T, "n_head": nh, "n_kv": nkv, "head_dim": hd, "row_stride": stride, "eps": eps})
    heads = x[:, :(nh + nkv) * hd].astype(np.float64).reshape(T, nh + nkv, hd)
    ref = heads / np.sqrt((heads ** 2).mean(-1, keepdims=True) + np.float64(np.float32(eps)))
    ref[:, :nh] *= qn
    ref[:, nh:] *= kn
    np.testing.assert_allclose(y[:, :(nh + nkv) * hd].reshape(T, nh + nkv, hd), ref, rtol=RTOL, atol=1e-6)
    np.testing.assert_array_equal(y[:, (nh + nkv) * hd:], x[:, (nh + nkv) * hd:])


async def test_rmsnorm_add(devices, rng):
    rows, dim, eps = 4, 640, 1e-6
    x, w, y0 = f32(rng, rows, dim, scale=5.0), f32(rng, dim), f32(rng, rows, dim)
    (y,) = await run(devices, "rmsnorm_add", [x, w, y0.copy()], [2], {"rows": rows, "dim": dim, "eps": eps})
    x64 = x.astype(np.float64)
    ref = y0 + x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + np.float64(np.float32(eps))) * w
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=1e-5)


async def test_geglu(devices, rng):
    rows, n = 3, 100
    gu = f32(rng, rows, 2 * n, scale=3.0)
    gu[0, :4] = [-12.0, 12.0, 0.0, -0.5]  # the tails of the tanh
    (y,) = await run(devices, "geglu", [gu, nan(rows, n)], [1], {"rows": rows, "n": n})
    g = gu[:, :n].astype(np.float64)
    gelu = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))
    np.testing.assert_allclose(y, gelu * gu[:, n:], rtol=RTOL, atol=1e-6)


async def test_bias_add(devices, rng):
    rows, n = 5, 97
    y0, b = f32(rng, rows, n), f32(rng, n)
    (y,) = await run(devices, "bias_add", [y0.copy(), b], [0], {"rows": rows, "n": n})
    np.testing.assert_allclose(y, y0.astype(np.float64) + b, rtol=RTOL, atol=1e-6)


async def test_softcap(devices, rng):
    n, cap = 1000, 30.0
    x = f32(rng, n, scale=50.0)
    (y,) = await run(devices, "softcap", [x], [0], {"n": n, "cap": cap})
    np.testing.assert_allclose(y, cap * np.tanh(x.astype(np.float64) / cap), rtol=RTOL, atol=1e-5)
