"""Tests of the cpu backend's C kernels (native/, contracts in native/KERNELS.md).

Every kernel is called the way the backend calls it: lib.xi_k_NAME(bindings, constants).
Inputs are fresh random data (the seed is printed: pytest shows it on failure);
outputs are poisoned with NaN first so an unwritten element fails.
"""
import importlib.util
import os
import select
import threading

import gguf
import numpy as np
import pytest
from _kernel_refs import att_workspace
from _q8dot_model import quantization_bound

try:
    from xinfer_async._native import ffi, lib
except ImportError:  # the package __init__ may be in flux: load the extension directly
    import glob

    _root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    _so = sorted(glob.glob(os.path.join(_root, "xinfer_async", "_native*.so")))
    if not _so:
        raise
    _spec = importlib.util.spec_from_file_location("xinfer_async._native", _so[0])
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
    ffi, lib = _mod.ffi, _mod.lib

QT = gguf.GGMLQuantizationType
BLOCK_TYPES = {"q8_0": QT.Q8_0, "q4_0": QT.Q4_0, "q4_1": QT.Q4_1}
ALL_TYPES = ["f32", "f16", "q8_0", "q4_0", "q4_1"]
F32_EPS = float(np.finfo(np.float32).eps)


@pytest.fixture
def rng():
    seed = int(np.random.SeedSequence().entropy % (2**63))
    print(f"rng seed = {seed}")
    return np.random.default_rng(seed)


def call(name, bufs, consts):
    keep = [ffi.from_buffer(np.ascontiguousarray(a) if not a.flags.c_contiguous else a) for a in bufs]
    b = ffi.new("void *[]", keep)
    c = ffi.new(f"xi_{name}_c *", consts)
    return getattr(lib, f"xi_k_{name}")(b, c)


def poison(*shape, dtype=np.float32):
    if dtype == np.int32:
        return np.full(shape, -12345, np.int32)
    return np.full(shape, np.nan, dtype)


def encode(w, dt):
    """float32 (N, K) -> the bytes of a GGUF tensor of type dt, and its exact float32 values."""
    if dt == "f32":
        return w.astype(np.float32), w.astype(np.float32)
    if dt == "f16":
        h = w.astype(np.float16)
        return h, h.astype(np.float32)
    q = gguf.quants.quantize(w.astype(np.float32), BLOCK_TYPES[dt])
    deq = gguf.quants.dequantize(q, BLOCK_TYPES[dt]).astype(np.float32)
    return np.ascontiguousarray(q), deq.reshape(w.shape)


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


# ------------------------------------------------------------------ elementwise

@pytest.mark.parametrize("n", [1, 7, 1000, 300_001])
def test_affine_add(rng, n):
    x = rng.standard_normal(n).astype(np.float32)
    z = rng.standard_normal(n).astype(np.float32)
    a, b = float(np.float32(rng.uniform(-3, 3))), float(np.float32(rng.uniform(-3, 3)))
    y = poison(n)
    assert call("affine", [x, y], {"n": n, "a": a, "b": b}) == 0
    ref = a * x.astype(np.float64) + b
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=2 * F32_EPS * (abs(a * x) + abs(b)).max())
    y = poison(n)
    assert call("add", [x, z, y], {"n": n}) == 0
    np.testing.assert_array_equal(y, x + z)  # one f32 rounding: exactly numpy's


@pytest.mark.parametrize("rows,n,extra", [(1, 1536, 0), (3, 17, 5), (64, 1536, 3072)])
def test_swiglu(rng, rows, n, extra):
    st = n + extra
    g = (rng.standard_normal(rows * st) * 6).astype(np.float32)
    u = rng.standard_normal(rows * st).astype(np.float32)
    g[:4] = [-100.0, 100.0, 0.5, -0.0]
    y = poison(rows, n)
    assert call("swiglu", [g, u, y], {"rows": rows, "n": n, "in_stride": st}) == 0
    g64 = g.reshape(rows, st)[:, :n].astype(np.float64)
    ref = g64 / (1 + np.exp(-g64)) * u.reshape(rows, st)[:, :n]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-30)


@pytest.mark.parametrize("T,width,ctx,extra", [(1, 192, 8, 0), (6, 64, 10, 32)])
def test_kv_store(rng, T, width, ctx, extra):
    st = width + extra
    src = rng.standard_normal(T * st).astype(np.float32)
    cache = rng.standard_normal((ctx, width)).astype(np.float32)
    before = cache.copy()
    pos = rng.permutation(ctx)[:T].astype(np.int32)
    if T > 3:
        pos[1], pos[2] = -1, ctx  # skipped
    assert call("kv_store", [src, cache, pos], {"T": T, "width": width, "ctx": ctx, "src_stride": st}) == 0
    ref = before.copy()
    for t in range(T):
        if 0 <= pos[t] < ctx:
            ref[pos[t]] = src[t * st: t * st + width]
    np.testing.assert_array_equal(cache, ref)


# ------------------------------------------------------------------ norm / rope

@pytest.mark.parametrize("rows,dim", [(1, 576), (3, 33), (64, 576), (200, 2048)])
def test_rmsnorm(rng, rows, dim):
    x = (rng.standard_normal((rows, dim)) * rng.uniform(0.01, 100)).astype(np.float32)
    w = rng.standard_normal(dim).astype(np.float32)
    eps = 1e-5
    y = poison(rows, dim)
    assert call("rmsnorm", [x, w, y], {"rows": rows, "dim": dim, "eps": eps}) == 0
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt((x64 ** 2).mean(axis=1, keepdims=True) + np.float64(np.float32(eps))) * w
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-30)


@pytest.mark.parametrize("rows,n_head,hd,extra", [(1, 9, 64, 0), (5, 3, 64, 192), (64, 4, 32, 7), (2, 1, 2, 0)])
def test_rope(rng, rows, n_head, hd, extra):
    st = n_head * hd + extra
    theta = 10000.0
    x = rng.standard_normal(rows * st).astype(np.float32)
    pos = rng.integers(0, 5000, rows).astype(np.int32)
    pos[0] = 4095
    if rows > 2:
        pos[1] = -1  # untouched
        pos[2] = 0
    x0 = x.copy()
    assert call("rope", [x, pos], {"rows": rows, "n_head": n_head, "head_dim": hd,
                                   "row_stride": st, "theta": theta}) == 0
    ref = x0.astype(np.float64).copy()
    i = np.arange(hd // 2)
    for r in range(rows):
        if pos[r] < 0:
            continue
        ang = pos[r] * theta ** (-2.0 * i / hd)
        c, s = np.cos(ang), np.sin(ang)
        for h in range(n_head):
            v = ref[r * st + h * hd: r * st + (h + 1) * hd]
            a, b = v[0::2].copy(), v[1::2].copy()
            v[0::2], v[1::2] = a * c - b * s, a * s + b * c
    # float32 rotation of float64-exact angles: a few ulps of |a| + |b|
    np.testing.assert_allclose(x, ref, rtol=0, atol=8 * F32_EPS * np.abs(x0).max())
    for r in range(rows):  # padding and pos < 0 rows bit-identical
        row0, row = x0[r * st:(r + 1) * st], x[r * st:(r + 1) * st]
        if pos[r] < 0:
            assert np.array_equal(bits(row), bits(row0))
        assert np.array_equal(bits(row[n_head * hd:]), bits(row0[n_head * hd:]))


# ------------------------------------------------------------------ reduce

@pytest.mark.parametrize("rows,n", [(1, 49152), (5, 3), (64, 257), (1, 1)])
def test_softmax(rng, rows, n):
    x = (rng.standard_normal((rows, n)) * 5).astype(np.float32)
    x[0] += 1e4  # large values: max subtracted first, no overflow
    y = poison(rows, n)
    assert call("softmax", [x, y], {"rows": rows, "n": n}) == 0
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6 * ref.max())
    if rows > 1:
        x[1, n // 2] = np.nan
        y = poison(rows, n)
        assert call("softmax", [x, y], {"rows": rows, "n": n}) == 0
        assert np.isnan(y[1]).all() and np.isfinite(y[0]).all()


@pytest.mark.parametrize("rows,n", [(1, 49152), (7, 100), (3, 1)])
def test_argmax(rng, rows, n):
    x = rng.standard_normal((rows, n)).astype(np.float32)
    for r in range(rows):
        if n > 3:  # ties -> lowest index
            i, j = sorted(rng.choice(n, 2, replace=False))
            x[r, i] = x[r, j] = x[r].max() + 1
    out = poison(rows, dtype=np.int32)
    assert call("argmax", [x, out], {"rows": rows, "n": n}) == 0
    np.testing.assert_array_equal(out, np.argmax(x, axis=1))
    if rows > 1 and n > 5:  # a NaN row: index of the first NaN, like numpy
        x[1, 5] = np.nan
        assert call("argmax", [x, out], {"rows": rows, "n": n}) == 0
        np.testing.assert_array_equal(out, np.argmax(x, axis=1))


# ------------------------------------------------------------------ attention

def attention_ref(q, k, v, pos, T, nh, nkv, hd, ctx, qs, scale):
    out = np.zeros((T, nh, hd))
    q64, k64, v64 = q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)
    for t in range(T):
        p = min(int(pos[t]), ctx - 1)  # this implementation: keys past ctx do not exist
        if p < 0:
            continue
        for h in range(nh):
            g = h // (nh // nkv)
            qh = q64[t * qs + h * hd: t * qs + (h + 1) * hd]
            s = k64[:p + 1, g] @ qh * scale
            e = np.exp(s - s.max())
            out[t, h] = e @ v64[:p + 1, g] / e.sum()
    return out


@pytest.mark.parametrize("T,nh,nkv,hd,ctx,qextra", [
    (1, 8, 2, 64, 40, 0),
    (6, 8, 2, 16, 12, 24),     # q_stride > n_head * hd
    (4, 9, 3, 64, 300, 384),   # SmolLM2 heads, q inside a fused qkv row
    (3, 4, 4, 8, 5, 0),
])
def test_attention(rng, T, nh, nkv, hd, ctx, qextra):
    qs = nh * hd + qextra
    q = rng.standard_normal(T * qs).astype(np.float32)
    k = rng.standard_normal((ctx, nkv, hd)).astype(np.float32)
    v = rng.standard_normal((ctx, nkv, hd)).astype(np.float32)
    pos = np.sort(rng.integers(0, ctx, T)).astype(np.int32)
    if T > 2:
        pos[0] = -1          # zero row
        pos[-1] = ctx + 5    # clamped to the last key
    scale = 1.0 / np.sqrt(hd)
    if T > 1:  # a query row whose scores are ~1e4: it picks one key, no overflow
        t, p = 1, int(pos[1])
        pick = int(rng.integers(0, p + 1))
        for h in range(nh):
            g = h // (nh // nkv)
            kk = k[pick, g].astype(np.float64)
            # key j scores 1e4 (k_j . kk) / (kk . kk): negate any other key within half of the pick's
            # score, so that no key nearly ties it (a near tie blends two keys, and float32 scores
            # ~1e4 carry errors ~1e-3 that move such a blend past the tolerance: ~2e-4 of seeds did)
            for j in range(p + 1):
                if j != pick and k[j, g].astype(np.float64) @ kk > 0.5 * (kk @ kk):
                    k[j, g] = -k[j, g]
            q[t * qs + h * hd: t * qs + (h + 1) * hd] = kk * (1e4 / scale / (kk @ kk))
    out = poison(T, nh, hd)
    consts = {"T": T, "n_head": nh, "n_kv": nkv, "head_dim": hd, "ctx": ctx, "q_stride": qs, "scale": scale, "window": 0}
    assert call("attention", [q, k, v, pos, out, *att_workspace(T, nh, hd)], consts) == 0
    ref = attention_ref(q, k, v, pos, T, nh, nkv, hd, ctx, qs, scale)
    assert np.isfinite(out).all()
    # scores are O(1): f32 dot and exp errors ~ 1e-6 relative, values O(1)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=2e-5)
    if T > 2:
        assert np.array_equal(out[0], np.zeros((nh, hd), np.float32))


@pytest.mark.parametrize("T,nh,nkv,hd,seq_ctx,qextra", [
    (4, 8, 2, 64, 40, 0),
    (5, 9, 3, 64, 300, 384),   # SmolLM2 heads, q inside a fused qkv row
    (3, 4, 4, 8, 5, 0),
])
def test_attention_batched(rng, T, nh, nkv, hd, seq_ctx, qextra):
    """Several sequences' caches stacked in one allocation (sequence s owns rows s*seq_ctx...):
    each row matches float64 and is bit-identical to ``attention`` over its own sequence."""
    qs, n_seq = nh * hd + qextra, T + 1
    rows = n_seq * seq_ctx
    q = rng.standard_normal(T * qs).astype(np.float32)
    k = rng.standard_normal((rows, nkv, hd)).astype(np.float32)
    v = rng.standard_normal((rows, nkv, hd)).astype(np.float32)
    seqs = rng.permutation(n_seq)[:T]
    first = (seqs * seq_ctx).astype(np.int32)
    last = (first + rng.integers(0, seq_ctx, T)).astype(np.int32)
    last[0] = first[0]            # a single key
    if T > 2:
        last[1] = -1              # padding: zero row
        first[2], last[2] = 7, 3  # last < first: zero row
    scale = 1.0 / np.sqrt(hd)
    out = poison(T, nh, hd)
    consts = {"T": T, "n_head": nh, "n_kv": nkv, "head_dim": hd, "rows": rows, "q_stride": qs, "scale": scale, "window": 0}
    assert call("attention_batched", [q, k, v, first, last, out, *att_workspace(T, nh, hd)], consts) == 0
    assert np.isfinite(out).all()
    for t in range(T):
        p = int(last[t]) - int(first[t])
        if last[t] < 0 or p < 0:
            assert np.array_equal(out[t], np.zeros((nh, hd), np.float32))
            continue
        f = int(first[t])
        qt = np.ascontiguousarray(q[t * qs: t * qs + nh * hd])
        kt, vt = np.ascontiguousarray(k[f:f + seq_ctx]), np.ascontiguousarray(v[f:f + seq_ctx])
        ref = attention_ref(qt, kt, vt, np.array([p]), 1, nh, nkv, hd, seq_ctx, nh * hd, scale)
        np.testing.assert_allclose(out[t], ref[0], rtol=1e-5, atol=2e-5)
        single = poison(1, nh, hd)
        c1 = {"T": 1, "n_head": nh, "n_kv": nkv, "head_dim": hd, "ctx": seq_ctx, "q_stride": nh * hd, "scale": scale, "window": 0}
        assert call("attention", [qt, kt, vt, np.array([p], np.int32), single, *att_workspace(1, nh, hd)], c1) == 0
        assert np.array_equal(out[t], single[0]), f"row {t} differs from attention on its own sequence"


# ------------------------------------------------------------------ quantized data

def hand_q4_1_block():
    d, m = np.float16(0.5), np.float16(-1.25)
    qs = np.array([(j & 15) | ((15 - j) << 4) for j in range(16)], np.uint8)
    blk = np.concatenate([np.array([d]).view(np.uint8), np.array([m]).view(np.uint8), qs])
    expect = np.array([0.5 * j - 1.25 for j in range(16)] + [0.5 * (15 - j) - 1.25 for j in range(16)], np.float32)
    return blk, expect


def test_hand_built_blocks():
    blk, expect = hand_q4_1_block()
    assert blk.size == 20
    out = poison(32)
    assert call("dequantize_q4_1", [blk, out], {"n": 32}) == 0
    np.testing.assert_array_equal(out, expect)
    np.testing.assert_array_equal(gguf.quants.dequantize(blk.reshape(1, 20), QT.Q4_1).reshape(-1), expect)
    out = poison(1, 32)
    assert call("get_rows_q4_1", [blk, np.array([0], np.int32), out], {"T": 1, "dim": 32, "vocab": 1}) == 0
    np.testing.assert_array_equal(out[0], expect)
    # matmul against a one-hot x of 127/128 reads single weights (times 127/128): x's int8 scale
    # d = 2^-7 and block sum s = 127 d are exact halves (q8_1's f16 fields), so every step is exact
    for j in (0, 5, 16, 31):
        x = np.zeros((1, 32), np.float32)
        x[0, j] = 127 / 128
        y = poison(1, 1)
        assert call("matmul_q4_1", [blk, x, y], {"T": 1, "N": 1, "K": 32, "accumulate": 0}) == 0
        assert y[0, 0] == np.float64(expect[j]) * 127 / 128
    # q8_0: d = 2^-3, qs = -128..127 step 8; q4_0: d = -2, nibbles j, 15 - j
    q8 = np.concatenate([np.array([np.float16(0.125)]).view(np.uint8),
                         np.arange(-128, 128, 8).astype(np.int8).view(np.uint8)])
    out = poison(32)
    assert call("dequantize_q8_0", [q8, out], {"n": 32}) == 0
    np.testing.assert_array_equal(out, np.arange(-128, 128, 8) * 0.125)
    q4 = np.concatenate([np.array([np.float16(-2)]).view(np.uint8),
                         np.array([j | ((15 - j) << 4) for j in range(16)], np.uint8)])
    assert call("dequantize_q4_0", [q4, out], {"n": 32}) == 0
    np.testing.assert_array_equal(out, -2.0 * (np.r_[np.arange(16), 15 - np.arange(16)] - 8))


@pytest.mark.parametrize("dt", ["q8_0", "q4_0", "q4_1"])
@pytest.mark.parametrize("n", [32, 576 * 7, 32 * 40_000])
def test_dequantize(rng, dt, n):
    w = (rng.standard_normal(n) * rng.uniform(0.01, 10)).astype(np.float32)
    w[:8] = [0, 1e-7, -1e-7, 65504, -3e4, 1e-5, 6e-5, 0]  # f16 subnormal / large scales
    q, deq = encode(w.reshape(-1, 32), dt)
    out = poison(n)
    assert call(f"dequantize_{dt}", [q, out], {"n": n}) == 0
    assert np.array_equal(bits(out), bits(deq.reshape(-1)))


@pytest.mark.parametrize("dt", ALL_TYPES)
@pytest.mark.parametrize("T,vocab,dim", [(1, 100, 576), (9, 50, 64), (300, 2000, 576)])
def test_get_rows(rng, dt, T, vocab, dim):
    w = (rng.standard_normal((vocab, dim)) * 0.3).astype(np.float32)
    table, deq = encode(w, dt)
    ids = rng.integers(0, vocab, T).astype(np.int32)
    if T > 3:
        ids[0], ids[2], ids[3] = -1, vocab, 2**31 - 1
    out = poison(T, dim)
    assert call(f"get_rows_{dt}", [table, ids, out], {"T": T, "dim": dim, "vocab": vocab}) == 0
    for t in range(T):
        if 0 <= ids[t] < vocab:
            assert np.array_equal(bits(out[t]), bits(deq[ids[t]])), t
        else:
            assert np.isnan(out[t]).all()


def test_f16_all_halves():
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(2048, 32)
    ids = np.arange(2048, dtype=np.int32)
    out = poison(2048, 32)
    assert call("get_rows_f16", [h, ids, out], {"T": 2048, "dim": 32, "vocab": 2048}) == 0
    assert np.array_equal(bits(out), bits(h.astype(np.float32)))
    # and the F16C / vector path of matmul_f16 (one-hot x picks each weight)
    w = h[:, :].reshape(-1)[np.isfinite(h.reshape(-1))].reshape(-1, 32)[:, :32]
    n = w.shape[0]
    for j in (0, 9, 31):
        x = np.zeros((1, 32), np.float32)
        x[0, j] = 1.0
        y = poison(1, n)
        assert call("matmul_f16", [np.ascontiguousarray(w), x, y], {"T": 1, "N": n, "K": 32, "accumulate": 0}) == 0
        assert np.array_equal(bits(y[0]), bits(w[:, j].astype(np.float32) + np.float32(0)))


# ------------------------------------------------------------------ matmul

MM_SHAPES = [(1, 576, 576), (1, 1536, 576), (1, 576, 1536), (1, 64, 32), (3, 33, 96),
             (5, 200, 576), (64, 192, 576), (2, 1, 64), (0, 8, 32)]


@pytest.mark.parametrize("dt,T,N,K", [(dt, *s) for dt in ALL_TYPES for s in MM_SHAPES] +
                         [(dt, *s) for dt in ("f32", "f16") for s in [(3, 17, 70), (1, 5, 7)]])
@pytest.mark.parametrize("accumulate", [0, 1])
def test_matmul(rng, dt, T, N, K, accumulate):
    # (block types with K % 32 != 0 are EINVAL: test_einval)
    w = (rng.standard_normal((N, K)) * 0.5).astype(np.float32)
    wq, deq = encode(w, dt)
    x = rng.standard_normal((T, K)).astype(np.float32)
    if accumulate:
        y = rng.standard_normal((T, N)).astype(np.float32)
    else:
        y = poison(T, N)
    y0 = y.astype(np.float64) if accumulate else 0.0
    assert call(f"matmul_{dt}", [wq, x, y], {"T": T, "N": N, "K": K, "accumulate": accumulate}) == 0
    ref = y0 + x.astype(np.float64) @ deq.astype(np.float64).T
    # float32 accumulation over K: the error of a sum is ~eps * sum|w x| (many partial sums in
    # the vector lanes keep it well below). The block types round x to int8 per block of 32
    # first (llama.cpp's numerics, q8dot.c; bit-exact model in tests/test_q8dot.py): |x - d q|
    # <= amax / 254 per element and the f16 scales add quantization_bound.
    mag = np.abs(x).astype(np.float64) @ np.abs(deq).astype(np.float64).T + (np.abs(y0) if accumulate else 0)
    assert np.isfinite(y).all()
    err = np.abs(y - ref)
    bound = 1e-5 * np.abs(ref) + 8 * F32_EPS * mag + 1e-30
    if dt in BLOCK_TYPES and T > 0:
        bound = bound + quantization_bound(x, deq, has_min=dt == "q4_1")
    assert (err <= bound).all(), f"max err/bound {np.max(err / bound)}"


@pytest.mark.parametrize("dt", ["f32", "f16", "q8_0", "q4_0", "q4_1"])
@pytest.mark.parametrize("K", [32 * 7, 32 * 130, 576])
def test_matmul_row_does_not_depend_on_T(rng, dt, K):
    """A token's output row is bit-identical whether it runs alone (T=1) or in a batch (any T):
    batched decode equals decode alone."""
    N, T = 37, 9
    wq, _ = encode((rng.standard_normal((N, K)) * 0.5).astype(np.float32), dt)
    x = rng.standard_normal((T, K)).astype(np.float32)
    batched = poison(T, N)
    assert call(f"matmul_{dt}", [wq, x, batched], {"T": T, "N": N, "K": K, "accumulate": 0}) == 0
    for t in range(T):
        alone = poison(1, N)
        assert call(f"matmul_{dt}", [wq, np.ascontiguousarray(x[t:t + 1]), alone],
                    {"T": 1, "N": N, "K": K, "accumulate": 0}) == 0
        np.testing.assert_array_equal(alone[0].view(np.uint32), batched[t].view(np.uint32))


# ------------------------------------------------------------------ invalid constants

def _einval_cases():
    f = np.zeros(64, np.float32)
    return [
        ("affine", 2, {"n": -1, "a": 1.0, "b": 0.0}),
        ("add", 3, {"n": -1}),
        ("rmsnorm", 3, {"rows": -1, "dim": 4, "eps": 1e-5}),
        ("rope", 2, {"rows": 1, "n_head": 1, "head_dim": 3, "row_stride": 3, "theta": 1e4}),
        ("rope", 2, {"rows": 2, "n_head": 2, "head_dim": 4, "row_stride": 4, "theta": 1e4}),
        ("swiglu", 3, {"rows": 1, "n": 8, "in_stride": 4}),
        ("softmax", 2, {"rows": 1, "n": -5}),
        ("attention", 7, {"T": 1, "n_head": 3, "n_kv": 2, "head_dim": 4, "ctx": 4, "q_stride": 12, "scale": 1.0, "window": 0}),
        ("attention", 7, {"T": 1, "n_head": 2, "n_kv": 0, "head_dim": 4, "ctx": 4, "q_stride": 8, "scale": 1.0, "window": 0}),
        ("attention", 7, {"T": 2, "n_head": 2, "n_kv": 1, "head_dim": 4, "ctx": 4, "q_stride": 4, "scale": 1.0, "window": 0}),
        ("attention_batched", 8, {"T": 1, "n_head": 3, "n_kv": 2, "head_dim": 4, "rows": 4, "q_stride": 12, "scale": 1.0, "window": 0}),
        ("attention_batched", 8, {"T": 2, "n_head": 2, "n_kv": 1, "head_dim": 4, "rows": 4, "q_stride": 4, "scale": 1.0, "window": 0}),
        ("attention", 7, {"T": 1, "n_head": 2, "n_kv": 1, "head_dim": 4, "ctx": 4, "q_stride": 8, "scale": 1.0, "window": -1}),
        ("attention_batched", 8, {"T": 1, "n_head": 2, "n_kv": 1, "head_dim": 4, "rows": 4, "q_stride": 8, "scale": 1.0,
                                  "window": -1}),
        ("kv_store", 3, {"T": 1, "width": -4, "ctx": 4, "src_stride": 4}),
        ("argmax", 2, {"rows": 1, "n": -1}),
        ("qk_rmsnorm", 3, {"T": 1, "n_head": 2, "n_kv": 1, "head_dim": 4, "row_stride": 8, "eps": 1e-6}),
        ("rmsnorm_add", 3, {"rows": -1, "dim": 4, "eps": 1e-6}),
        ("geglu", 2, {"rows": 1, "n": -1}),
        ("bias_add", 2, {"rows": -1, "n": 4}),
        ("softcap", 1, {"n": 4, "cap": 0.0}),
        ("rope_kv_store_ff", 6, {"T": 1, "n_head": 1, "n_kv": 1, "head_dim": 3, "row_stride": 9, "ctx": 1, "theta": 1e4}),
    ] + [
        (f"get_rows_{dt}", 3, {"T": 1, "dim": 48, "vocab": 1}) for dt in BLOCK_TYPES
    ] + [
        (f"get_rows_{dt}", 3, {"T": -1, "dim": 4, "vocab": 1}) for dt in ALL_TYPES
    ] + [
        (f"matmul_{dt}", 3, {"T": 1, "N": 1, "K": 48, "accumulate": 0}) for dt in BLOCK_TYPES
    ] + [
        (f"matmul_{dt}", 3, {"T": 1, "N": -1, "K": 32, "accumulate": 0}) for dt in ALL_TYPES
    ] + [
        (f"dequantize_{dt}", 2, {"n": 40}) for dt in BLOCK_TYPES
    ]


@pytest.mark.parametrize("name,nb,consts", _einval_cases())
def test_einval(name, nb, consts):
    bufs = [np.full(256, np.nan, np.float32) for _ in range(nb)]
    for b in bufs[1:]:
        b.view(np.uint32)[:] = 0x7FC01234  # recognizable NaN everywhere, incl. "int" bindings
    before = [b.copy() for b in bufs]
    assert call(name, bufs, consts) == lib.XI_EINVAL == 1
    for b, b0 in zip(bufs, before):
        assert np.array_equal(b.view(np.uint32), b0.view(np.uint32))


# ------------------------------------------------------------------ fence

def test_fence_signal():
    fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    try:
        completed = ffi.new("int64_t *", 5)
        sig = ffi.new("xi_signal *", {"fd": fd, "completed": completed, "value": 3})
        assert select.select([fd], [], [], 0)[0] == []
        lib.xi_fence_signal(sig)
        assert completed[0] == 5  # max(old, value)
        assert select.select([fd], [], [], 0)[0] == [fd]
        assert os.eventfd_read(fd) == 1
        sig.value = 9
        lib.xi_fence_signal(sig)
        lib.xi_fence_signal(sig)
        assert completed[0] == 9
        assert os.eventfd_read(fd) == 2
        # concurrent signallers (the GIL is released): the max wins
        sigs = [ffi.new("xi_signal *", {"fd": fd, "completed": completed, "value": v}) for v in range(10, 400)]
        threads = [threading.Thread(target=lambda ss=sigs[i::4]: [lib.xi_fence_signal(s) for s in ss])
                   for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert completed[0] == 399
        assert os.eventfd_read(fd) == 390
    finally:
        os.close(fd)
