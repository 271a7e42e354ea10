"""Backend-level tests of ``backends/cuda`` (skipped cleanly without a GPU).

Every shader against numpy float64 on fresh random inputs; quantized reads bit for bit against
``gguf.quants.dequantize``; cuBLAS GEMM; graph capture and replay; timestamps; and a fence stress
test (8 queues, 10,000 fences, a background thread in the driver, a slow kernel whose completion
flag must be visible when its fence reports).
"""

from __future__ import annotations

import os
import struct
import threading
import time

import numpy as np
import pytest

from xinfer_async.backends.cuda import CUDABackend, CUDAKernel

AVAILABLE, REASON = CUDABackend.is_available()
if not AVAILABLE:
    pytest.skip(f"no CUDA device: {REASON}", allow_module_level=True)

import trio  # noqa: E402

from _kernel_refs import activation_quantization_bound, att_workspace, attention_ref  # noqa: E402
from xinfer_async.hal import DeviceOutOfMemoryError, KernelCompileError  # noqa: E402
from xinfer_async.hal._commands import (CopyCmd, DispatchCmd, FillCmd, GemmCmd, ReplayCmd,  # noqa: E402
                                       TimestampCmd, UploadCmd)

FIELDS = {
    "affine": "n i, a f, b f", "add": "n i", "rmsnorm": "rows i, dim i, eps f",
    "rope": "rows i, n_head i, head_dim i, row_stride i, theta f", "swiglu": "rows i, n i, in_stride i",
    "softmax": "rows i, n i", "attention": "T i, n_head i, n_kv i, head_dim i, ctx i, q_stride i, scale f, window i",
    "kv_store": "T i, width i, ctx i, src_stride i", "get_rows": "T i, dim i, vocab i",
    "matmul": "T i, N i, K i, accumulate i", "dequantize": "n i", "argmax": "rows i, n i",
}
QTYPES = ("q8_0", "q4_0", "q4_1")
RNG = np.random.default_rng()


def pack(name: str, consts: dict) -> bytes:
    base = name if name in FIELDS else name.rsplit("_", 2 if name.endswith(("_0", "_1")) else 1)[0]
    fields = [f.split() for f in FIELDS[base].split(", ")]
    assert [f for f, _ in fields] == list(consts), (name, list(consts))
    return struct.pack("<" + "".join(t for _, t in fields), *(consts[f] for f, _ in fields))


@pytest.fixture(scope="module")
def be():
    b = CUDABackend()
    yield b
    b.close()


@pytest.fixture(scope="module")
def q(be):
    return be.create_queue()


def run(be, q, name, arrays, consts):
    """Upload ``arrays`` (bindings in order), dispatch ``name``, return every binding downloaded."""
    k = be.load_kernel(name)
    addrs = []
    for a in arrays:
        a = np.ascontiguousarray(a)
        p = be.alloc(max(a.nbytes, 4))
        be.write(p, a.view(np.uint8).reshape(-1))
        addrs.append(p)
    grid = k.launch_grid(consts)
    be._enqueue(q.stream, DispatchCmd(k, grid, addrs, pack(name, consts)))
    q.synchronize()
    out = []
    for a, p in zip(arrays, addrs):
        o = np.empty_like(np.ascontiguousarray(a))
        be.read(p, o.view(np.uint8).reshape(-1))
        be.free(p)
        out.append(o)
    return out


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---- elementwise -------------------------------------------------------------------------------
def test_affine_add_swiglu(be, q):
    n = 100_003
    x = f32(n)
    y = run(be, q, "affine", [x, np.zeros(n, np.float32)], dict(n=n, a=1.5, b=-0.25))[1]
    np.testing.assert_allclose(y, 1.5 * x.astype(np.float64) - 0.25, rtol=1e-5, atol=1e-7)
    a, b = f32(n), f32(n)
    y = run(be, q, "add", [a, b, np.zeros(n, np.float32)], dict(n=n))[2]
    np.testing.assert_allclose(y, a.astype(np.float64) + b, rtol=1e-5, atol=1e-7)
    rows, n, stride = 7, 300, 1000
    g, u = f32(rows, stride) * 4, f32(rows, stride)
    y = run(be, q, "swiglu", [g, u, np.zeros((rows, n), np.float32)], dict(rows=rows, n=n, in_stride=stride))[2]
    gd = g[:, :n].astype(np.float64)
    np.testing.assert_allclose(y, gd / (1 + np.exp(-gd)) * u[:, :n], rtol=1e-5, atol=1e-7)


def test_kv_store(be, q):
    T, width, ctx, stride = 5, 96, 16, 200
    src, cache = f32(T, stride), f32(ctx, width)
    pos = np.array([3, -1, 15, 16, 0], np.int32)
    out = run(be, q, "kv_store", [src, cache, pos], dict(T=T, width=width, ctx=ctx, src_stride=stride))[1]
    ref = cache.copy()
    for t, p in enumerate(pos):
        if 0 <= p < ctx:
            ref[p] = src[t, :width]
    np.testing.assert_array_equal(out, ref)


# ---- reductions --------------------------------------------------------------------------------
@pytest.mark.parametrize("dim", [4096, 1001])
def test_rmsnorm(be, q, dim):
    rows = 9
    x, w = f32(rows, dim), f32(dim)
    y = run(be, q, "rmsnorm", [x, w, np.zeros_like(x)], dict(rows=rows, dim=dim, eps=1e-5))[2]
    xd = x.astype(np.float64)
    ref = xd / np.sqrt((xd**2).mean(1, keepdims=True) + 1e-5) * w
    # f32 tree sum of squares: relative error ~ log2(dim) * 2^-24, well below 1e-5
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_softmax_argmax(be, q):
    rows, n = 6, 49_157
    x = f32(rows, n) * 5
    y = run(be, q, "softmax", [x, np.zeros_like(x)], dict(rows=rows, n=n))[1]
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-12)
    x[2, 17] = x[2, 40_000] = x[2].max() + 1  # a tie: lowest index wins
    idx = run(be, q, "argmax", [x, np.zeros(rows, np.int32)], dict(rows=rows, n=n))[1]
    np.testing.assert_array_equal(idx, x.argmax(1))
    assert idx[2] == 17


def test_rope(be, q):
    rows, n_head, hd, stride, theta = 4, 3, 64, 3 * 64 + 32, 10000.0
    x = f32(rows, stride)
    pos = np.array([0, 7, -1, 8191], np.int32)
    y = run(be, q, "rope", [x, pos], dict(rows=rows, n_head=n_head, head_dim=hd, row_stride=stride, theta=theta))[0]
    ref = x.astype(np.float64).copy()
    i = np.arange(hd // 2)
    for r, p in enumerate(pos):
        if p < 0:
            continue
        ang = p * theta ** (-2.0 * i / hd)
        c, s = np.cos(ang), np.sin(ang)
        for h in range(n_head):
            a, b = ref[r, h * hd:(h + 1) * hd:2].copy(), ref[r, h * hd + 1:(h + 1) * hd:2].copy()
            ref[r, h * hd:(h + 1) * hd:2], ref[r, h * hd + 1:(h + 1) * hd:2] = a * c - b * s, a * s + b * c
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(y[2], x[2])  # pos < 0: untouched
    np.testing.assert_array_equal(y[:, n_head * hd:], x[:, n_head * hd:])  # past the heads: untouched


@pytest.mark.parametrize("n_head,n_kv,hd,ctx,pos", [
    (9, 3, 64, 64, [0, 5, 63, -1]),
    (32, 8, 128, 8192, [8191, 4000]),
])
def test_attention(be, q, n_head, n_kv, hd, ctx, pos):
    T = len(pos)
    qm, k, v = f32(T, n_head, hd), f32(ctx, n_kv, hd), f32(ctx, n_kv, hd)
    pos = np.array(pos, np.int32)
    scale = 1 / np.sqrt(hd)
    out = run(be, q, "attention", [qm, k, v, pos, np.full((T, n_head, hd), 7, np.float32), *att_workspace(T, n_head, hd)],
              dict(T=T, n_head=n_head, n_kv=n_kv, head_dim=hd, ctx=ctx, q_stride=n_head * hd, scale=scale, window=0))[4]
    # online softmax over up to 8192 keys in f32: each rescale adds ~2^-24, the sums ~sqrt(ctx) * 2^-24
    np.testing.assert_allclose(out, attention_ref(qm, k, v, pos, n_head, n_kv, hd, scale), rtol=1e-4, atol=1e-5)


# ---- quantized formats -------------------------------------------------------------------------
def quantized(qtype: str, rows: int, k: int) -> np.ndarray:
    """Random GGUF blocks (rows, k/32 * bytes) uint8 with finite f16 scales."""
    import gguf

    t = getattr(gguf.GGMLQuantizationType, qtype.upper())
    bsize, tsize = gguf.GGML_QUANT_SIZES[t]
    raw = RNG.integers(0, 256, (rows, k // bsize * tsize), dtype=np.uint8)
    blocks = raw.reshape(rows, k // bsize, tsize)
    blocks[..., 0:2] = (RNG.random((rows, k // bsize, 1)) * 0.1).astype(np.float16).view(np.uint8)
    if qtype == "q4_1":
        blocks[..., 2:4] = (RNG.standard_normal((rows, k // bsize, 1)) * 0.1).astype(np.float16).view(np.uint8)
    return raw


def gguf_dequantize(qtype: str, raw: np.ndarray) -> np.ndarray:
    import gguf

    return gguf.quants.dequantize(raw, getattr(gguf.GGMLQuantizationType, qtype.upper())).astype(np.float32)


def hand_block(qtype: str) -> np.ndarray:
    d = np.array([0.5], np.float16).view(np.uint8)
    m = np.array([-1.25], np.float16).view(np.uint8)
    if qtype == "q8_0":
        return np.concatenate([d, np.arange(-16, 16, dtype=np.int8).view(np.uint8)])[None]
    qs = (np.arange(16, dtype=np.uint8) | (np.arange(15, -1, -1, dtype=np.uint8) << 4))
    return np.concatenate([d, m, qs] if qtype == "q4_1" else [d, qs])[None]


@pytest.mark.parametrize("qtype", QTYPES)
def test_dequantize_bit_exact(be, q, qtype):
    hb = hand_block(qtype)
    y = run(be, q, f"dequantize_{qtype}", [hb, np.zeros(32, np.float32)], dict(n=32))[1]
    ref = gguf_dequantize(qtype, hb).reshape(-1)
    if qtype == "q4_1":  # element j: d*(qs[j]&15)+m; j+16: d*(qs[j]>>4)+m
        np.testing.assert_array_equal(ref[:16], 0.5 * np.arange(16) - 1.25)
    np.testing.assert_array_equal(y.view(np.uint32), ref.view(np.uint32))
    raw = quantized(qtype, 37, 4096)
    n = 37 * 4096
    y = run(be, q, f"dequantize_{qtype}", [raw, np.zeros(n, np.float32)], dict(n=n))[1]
    np.testing.assert_array_equal(y.view(np.uint32), gguf_dequantize(qtype, raw).reshape(-1).view(np.uint32))


def table(dtype: str, vocab: int, dim: int):
    """(raw table bytes, float32 values)"""
    if dtype == "f32":
        t = f32(vocab, dim)
        return t, t
    if dtype == "f16":
        t = f32(vocab, dim).astype(np.float16)
        return t, t.astype(np.float32)
    raw = quantized(dtype, vocab, dim)
    return raw, gguf_dequantize(dtype, raw)


@pytest.mark.parametrize("dtype", ("f32", "f16") + QTYPES)
def test_get_rows_bit_exact(be, q, dtype):
    vocab, dim = 300, 576
    raw, vals = table(dtype, vocab, dim)
    ids = np.array([5, 299, 0, -1, 300, 5], np.int32)
    out = run(be, q, f"get_rows_{dtype}", [raw, ids, np.zeros((len(ids), dim), np.float32)],
              dict(T=len(ids), dim=dim, vocab=vocab))[2]
    for t, i in enumerate(ids):
        if 0 <= i < vocab:
            np.testing.assert_array_equal(out[t].view(np.uint32), vals[i].view(np.uint32))
        else:
            assert np.isnan(out[t]).all()


@pytest.mark.parametrize("dtype", ("f32", "f16") + QTYPES)
@pytest.mark.parametrize("T,N,K,accumulate", [(1, 257, 4096, 0), (1, 2049, 576, 1), (3, 64, 576, 1), (6, 100, 1536, 0)])
def test_matmul(be, q, dtype, T, N, K, accumulate):
    raw, w = table(dtype, N, K)
    x, y0 = f32(T, K), f32(T, N)
    y = run(be, q, f"matmul_{dtype}", [raw, x, y0], dict(T=T, N=N, K=K, accumulate=accumulate))[2]
    wd, xd = w.astype(np.float64), x.astype(np.float64)
    ref = xd @ wd.T + (y0 if accumulate else 0)
    # f32 accumulation of K products: error bounded by ~K * 2^-24 * sum|w x|; observed ~sqrt(K); where the
    # integer decode entry _pq runs (T <= 8, K % 256 == 0), also its int8 rounding of x per block of 32
    bound = 1e-5 * (np.abs(xd) @ np.abs(wd).T) + 1e-6 + activation_quantization_bound("cuda", dtype, x, wd)
    assert (np.abs(y - ref) <= bound).all(), np.abs(y - ref).max()


def test_matmul_unaligned_k(be, q):
    T, N, K = 2, 33, 45  # K not a multiple of 32: the scalar path
    w, x = f32(N, K), f32(T, K)
    y = run(be, q, "matmul_f32", [w, x, np.zeros((T, N), np.float32)], dict(T=T, N=N, K=K, accumulate=0))[2]
    np.testing.assert_allclose(y, x.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-5)


# ---- gemm --------------------------------------------------------------------------------------
def to_bf16(a):
    return (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def from_bf16(a):
    return (a.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("trans_b", [False, True])
def test_gemm(be, q, dtype, trans_b):
    m, n, k = 65, 130, 96
    a, b = f32(m, k), f32(n, k) if trans_b else f32(k, n)
    enc = {"f32": lambda v: v, "f16": lambda v: v.astype(np.float16), "bf16": to_bf16}[dtype]
    dec = {"f32": lambda v: v, "f16": lambda v: v.astype(np.float32), "bf16": from_bf16}[dtype]
    ea, eb = enc(a), enc(b)
    pa, pb, pc = be.alloc(ea.nbytes), be.alloc(eb.nbytes), be.alloc(m * n * ea.itemsize)
    be.write(pa, ea.view(np.uint8).reshape(-1))
    be.write(pb, eb.view(np.uint8).reshape(-1))
    g = be.create_gemm(dtype, m, n, k, trans_b)
    be._enqueue(q.stream, GemmCmd(g, pa, pb, pc))
    q.synchronize()
    c = np.empty((m, n), ea.dtype)
    be.read(pc, c.view(np.uint8).reshape(-1))
    for p in (pa, pb, pc):
        be.free(p)
    ad, bd = dec(ea).astype(np.float64), dec(eb).astype(np.float64)
    ref = ad @ (bd.T if trans_b else bd)
    scale = np.abs(ad) @ np.abs(bd.T if trans_b else bd)
    # f32 accumulation, output rounded to dtype: 2^-24 (f32), 2^-11 (f16), 2^-8 (bf16) relative
    tol = {"f32": 1e-5, "f16": 1e-3, "bf16": 8e-3}[dtype]
    assert (np.abs(dec(c) - ref) <= tol * scale + 1e-6).all()


# ---- graphs, timestamps, errors ----------------------------------------------------------------
def test_graph_capture_replay(be, q):
    n = 4096
    x, y = be.alloc(n * 4), be.alloc(n * 4)
    affine = be.load_kernel("affine")
    g = be.create_gemm("f32", 64, 64, 64, False)
    a, c = be.alloc(64 * 64 * 4), be.alloc(64 * 64 * 4)
    be._enqueue(q.stream, GemmCmd(g, a, a, c))  # warm-up outside capture (cuBLAS loads its kernels)
    q.synchronize()
    graph = be.capture([
        FillCmd(x, n * 4, 0x3F800000),  # 1.0f
        DispatchCmd(affine, affine.launch_grid(dict(n=n)), [x, y], pack("affine", dict(n=n, a=2.0, b=0.5))),
        CopyCmd(x, y, n * 4),
        GemmCmd(g, a, a, c),
    ])
    av = f32(64, 64)
    be.write(a, av.view(np.uint8).reshape(-1))
    for _ in range(2):
        be._enqueue(q.stream, ReplayCmd(graph))
    q.synchronize()
    out = np.empty(n, np.float32)
    be.read(x, out.view(np.uint8))
    np.testing.assert_array_equal(out, 2.5)  # the fill resets x each replay
    cv = np.empty((64, 64), np.float32)
    be.read(c, cv.view(np.uint8).reshape(-1))
    np.testing.assert_allclose(cv, av.astype(np.float64) @ av, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="cannot be captured"):
        be.capture([UploadCmd(x, np.zeros(4, np.uint8))])
    be.destroy_graph(graph)
    for p in (x, y, a, c):
        be.free(p)


def test_dependent_kernels_keep_stream_order(be, q):
    """With programmatic dependent launch (``be.pdl``, on from compute capability 9.0) a kernel may
    start while the one before it still runs; every shader waits in-kernel (xi_grid_begin). A chain
    of 64 kernels, each reading what the previous wrote and overwriting what the one before read,
    ends bit-identical to float32 numpy, enqueued and as a captured graph; and a matmul whose weights
    a kernel has just copied in reads the new weights (its L2 prefetch before the wait sees no stale
    bytes): bit-identical to the same matmul run alone on them."""
    assert be.pdl == (be.compute_capability >= (9, 0) and os.environ.get("XINFER_CUDA_PDL", "1") != "0")
    n, steps = 1 << 20, 64
    coef = np.stack([RNG.uniform(0.9, 1.1, steps), RNG.uniform(-0.1, 0.1, steps)], 1).astype(np.float32)
    affine = be.load_kernel("affine")
    bufs = [be.alloc(n * 4), be.alloc(n * 4)]
    chain = [DispatchCmd(affine, affine.launch_grid(dict(n=n)), [bufs[i % 2], bufs[1 - i % 2]],
              pack("affine", dict(n=n, a=float(a), b=float(b)))) for i, (a, b) in enumerate(coef)]
    nr, k = 4096, 4096
    w_new, w_stale = quantized("q4_1", nr, k), quantized("q4_1", nr, k)
    rb = w_new.shape[1]
    w_src, w_dst, ids = be.alloc(w_new.nbytes), be.alloc(w_new.nbytes), be.alloc(nr * 4)
    xm, ym = be.alloc(k * 4), be.alloc(nr * 4)
    be.write(w_src, w_new.reshape(-1))
    be.write(ids, np.arange(nr, dtype=np.int32).view(np.uint8))
    be.write(xm, f32(k).view(np.uint8))
    get_rows, matmul = be.load_kernel("get_rows_f32"), be.load_kernel("matmul_q4_1")
    mm = DispatchCmd(matmul, matmul.launch_grid(dict(T=1, N=nr, K=k, accumulate=0)), [w_dst, xm, ym],
          pack("matmul_q4_1", dict(T=1, N=nr, K=k, accumulate=0)))
    copy_in = DispatchCmd(get_rows, get_rows.launch_grid(dict(T=nr, dim=rb // 4, vocab=nr)), [w_src, ids, w_dst],
               pack("get_rows_f32", dict(T=nr, dim=rb // 4, vocab=nr)))
    be.write(w_dst, w_new.reshape(-1))
    be._enqueue(q.stream, mm)  # the reference: the same kernel on the new weights, alone
    q.synchronize()
    y_ref = np.empty(nr, np.float32)
    be.read(ym, y_ref.view(np.uint8))
    ref = RNG.standard_normal(n).astype(np.float32)
    x0 = ref.copy()
    for a, b in coef:
        ref = ref * a + b  # float32 products and sums, rounded as the kernel's __fmul_rn / __fadd_rn
    graph = be.capture(chain + [copy_in, mm])
    for mode in ("enqueued", "graph"):
        be.write(bufs[0], x0.view(np.uint8))
        be._enqueue(q.stream, FillCmd(bufs[1], n * 4, 0x7FC00000))  # NaN
        be.write(w_dst, w_stale.reshape(-1))
        be._enqueue(q.stream, FillCmd(ym, nr * 4, 0x7FC00000))
        if mode == "graph":
            be._enqueue(q.stream, ReplayCmd(graph))
        else:
            for cmd in chain + [copy_in, mm]:
                be._enqueue(q.stream, cmd)
        q.synchronize()
        out, y = np.empty(n, np.float32), np.empty(nr, np.float32)
        be.read(bufs[steps % 2], out.view(np.uint8))
        be.read(ym, y.view(np.uint8))
        np.testing.assert_array_equal(out.view(np.uint32), ref.view(np.uint32), err_msg=mode)
        np.testing.assert_array_equal(y.view(np.uint32), y_ref.view(np.uint32), err_msg=mode)
    be.destroy_graph(graph)
    for p in (*bufs, w_src, w_dst, ids, xm, ym):
        be.free(p)


def test_a_write_has_landed_when_it_returns(be):
    """``write`` (every ``Device.upload``) returns only once its bytes are in device memory: cuMemcpyHtoD
    from pageable memory returns once they are staged, with the DMA possibly still in flight on the
    legacy stream, which the queues' non-blocking streams do not wait for (a kernel submitted right
    after read old bytes: seen on the H200 with 16 test processes). Right after each write, of
    sizes under and over the driver's staging chunk, the legacy stream has nothing in flight."""
    from xinfer_async.backends.cuda._driver import CUDA_SUCCESS, ffi

    for nbytes in (16 << 10, 60 << 10, 4 << 20):
        p = be.alloc(nbytes)
        try:
            for i in range(32):
                be.write(p, RNG.integers(0, 256, nbytes, dtype=np.uint8))
                assert be._lib.cuStreamQuery(ffi.NULL) == CUDA_SUCCESS, f"{nbytes} bytes, write {i}: copy in flight"
        finally:
            be.free(p)


def test_timestamps(be, q):
    t0, t1 = be.create_timestamp(), be.create_timestamp()
    n = 1 << 24
    p = be.alloc(n * 4)
    be._enqueue(q.stream, TimestampCmd(t0))
    be._enqueue(q.stream, FillCmd(p, n * 4, 7))
    be._enqueue(q.stream, TimestampCmd(t1))
    q.synchronize()
    assert 0 < be.elapsed_ms(t0, t1) < 1000
    be.free(p)


def test_errors(be):
    with pytest.raises(DeviceOutOfMemoryError) as info:
        be.alloc(1 << 50)
    assert info.value.status == "CUDA_ERROR_OUT_OF_MEMORY"
    from xinfer_async.backends.cuda import _nvrtc

    with pytest.raises(KernelCompileError) as info:
        _nvrtc.compile_cubin("extern \"C\" __global__ void k() { nope; }", "bad.cu", be.arch)
    assert "nope" in info.value.log
    assert "affine" in be.load_kernel("affine").name
    mm = be.load_kernel("matmul_q4_1")
    # T <= 8, a weight under _launch.MVP_MIN_BYTES and K % 256 != 0 (no `_pq`, no `_p`): the staged kernel
    # (shaders/xi_mvc.cuh): 2 rows (N spread over ~2 blocks an SM) and 8 tokens a block
    grid, block, shared = mm.launch_config(dict(T=6, N=512, K=4064, accumulate=0))
    assert grid == (256, 1, 1) and block == (256, 1, 1) and shared == 0
    g = mm.launch_grid(dict(T=6, N=512, K=4064, accumulate=0))
    assert g == (256, 1, 1) and g.block == (256, 1, 1) and g.function == mm.function
    from xinfer_async.backends.cuda._launch import mvq_enabled

    if mvq_enabled():  # the default: K % 256 == 0 at 1..8 tokens runs the integer decode entry matmul_q4_1_pq
        # (shaders/xi_mvq.cuh, the matmul kind's parameters: _launch.mvq_params): 4 rows a warp, at most a
        # wave, 2 stages of 4 x 8 groups of 160 bytes a warp and the tokens' codes and (d, s) pairs (4096 +
        # 1024 bytes a token; at most _launch.MVQ_MATMUL_TT = 4 tokens a block: 2 token tiles at T = 6)
        g = mm.launch_grid(dict(T=1, N=4096, K=4096, accumulate=0))
        assert g.function == mm.entries["_pq"] and g == (min(128, 2 * be.multiprocessors), 1, 1)
        assert g.block == (256, 1, 1) and g.shared_bytes == 8 * 2 * 4 * 8 * 160 + 4096 + 1024
        g = mm.launch_grid(dict(T=6, N=4096, K=4096, accumulate=0))
        assert g.function == mm.entries["_pq"] and g.shared_bytes == 8 * 2 * 4 * 8 * 160 + 4 * (4096 + 1024)
        assert g == (min(128, 2 * be.multiprocessors), 2, 1)
    else:  # XINFER_MVQ=0: one token runs the pipelined entry matmul_q4_1_p (shaders/xi_mvp.cuh;
        # _launch.MVP_MAX_T == 1), 2 rows a warp, at most 2 blocks an SM, 3 stages of 2 x 8 groups of 160
        # bytes a warp and the staged token (4096 floats and 512 block sums); 6 tokens the staged kernel
        g = mm.launch_grid(dict(T=1, N=4096, K=4096, accumulate=0))
        assert g.function == mm.entries["_p"] and g == (min(256, 2 * be.multiprocessors), 1, 1)
        assert g.block == (256, 1, 1) and g.shared_bytes == 8 * 3 * 2 * 8 * 160 + 4096 * 4 + 2048
        assert mm.launch_grid(dict(T=6, N=4096, K=4096, accumulate=0)).function == mm.function
    # T > 8: the register-tiled entry matmul_q4_1_t (shaders/xi_mvt.cuh): 32 rows and 8 tokens a block
    g = mm.launch_grid(dict(T=12, N=4096, K=4096, accumulate=0))
    assert g == (128, 2, 1) and g.block == (256, 1, 1) and g.function == mm.entries["_t"] != mm.function
    # the tensor-core entries (shaders/xi_tc.cuh) at every T for the weights _launch.tc_weight gives them
    # on this device (on the H200: SwiGLU's 1536 x 576 gate/up, the 49152 x 576 output layer): 18 blocks
    # in 5 K segments, a warp each, over a tile of 16 rows; 8 tokens a block at T <= 8, 32 (16 with GLU) above
    from xinfer_async.backends.cuda._launch import tc_weight

    for name, N, glu in [("rmsnorm_matmul_swiglu_q4_1", 1536, True), ("matmul_q8_0", 49152, False)]:
        k = be.load_kernel(name)
        if not tc_weight(name[-4:], N, 576, glu, be.multiprocessors, be.compute_capability):
            assert k.launch_grid(dict(T=64, N=N, K=576, accumulate=0, eps=1e-5)).function in (k.function, k.entries["_t"])
            continue
        tok = 16 if glu else 32
        for T, entry, tiles in [(1, "_tc", 1), (64, "_tct", tok // 8)]:
            g = k.launch_grid(dict(T=T, N=N, K=576, accumulate=0, eps=1e-5))
            assert g == (N // 16, -(-T // (8 if T <= 8 else tok)), 1) and g.block == (5 * 32, 1, 1)
            assert g.function == k.entries[entry]
            regions = 2 if glu else 1
            if T == 1:  # the one-token body: h's hi and lo (256 bytes a block), the segment sums, the block sums
                assert g.shared_bytes == 18 * 256 + 5 * regions * 64 + 18 * 4
            else:  # the segment sums: segments x regions x tiles
                assert g.shared_bytes == 5 * regions * tiles * 512
    out = be.load_kernel("matmul_q8_0")
    assert out.launch_grid(dict(T=64, N=960, K=576, accumulate=0)).function == out.entries["_t"]  # narrow: xi_mvt
    # attention: a head a block while T * n_kv < the SMs; past that, the kv head's query heads (up to 4) a
    # block; the entry by head_dim (xi_attention.cuh's XI_ATT_ENTRIES)
    att = be.load_kernel("attention_batched")
    few, many = be.multiprocessors // 3 - 1, be.multiprocessors // 3 + 1
    g = att.launch_grid(dict(T=few, n_head=9, n_kv=3, head_dim=64, rows=64, window=0))
    assert g == (few, 3, 3) and g.block == (256, 1, 1) and g.function == att.entries[""]
    assert att.launch_grid(dict(T=many, n_head=9, n_kv=3, head_dim=64, rows=64, window=0)) == (many, 3, 1)
    g = att.launch_grid(dict(T=many, n_head=28, n_kv=4, head_dim=128, rows=64, window=0))
    assert g == (many, 4, 2) and g.function == att.entries["_d4"] != att.function
    assert att.launch_grid(dict(T=1, n_head=8, n_kv=8, head_dim=256, rows=64, window=0)).function == att.entries["_d8"]
    # decode-sized launches (T <= SPLIT_T_MAX) take the decode entries where the head_dim has one
    for T, hd, entry in [(1, 128, "_d4s"), (8, 64, "_s"), (9, 128, "_d4"), (8, 256, "_d8")]:
        assert att.launch_grid(dict(T=T, n_head=32, n_kv=8, head_dim=hd, rows=640, window=0)).function == att.entries[entry]


# ---- fences ------------------------------------------------------------------------------------
SPIN = r"""
struct spin_c { unsigned int cycles; int value; };
extern "C" __global__ void spin(int *flag, spin_c c) {
    long long start = clock64();
    while (clock64() - start < (long long)c.cycles) { }
    __threadfence();
    *flag = c.value;
}
"""


def spin_kernel(be):
    from xinfer_async.backends.cuda import _driver, _nvrtc

    cubin = _nvrtc.compile_cubin(SPIN, "spin.cu", be.arch)
    ffi, lib = _driver.ffi, _driver.load()
    mod, fn = ffi.new("CUmodule *"), ffi.new("CUfunction *")
    _driver.check(lib.cuModuleLoadData(mod, cubin), "cuModuleLoadData")
    _driver.check(lib.cuModuleGetFunction(fn, mod[0], b"spin"), "cuModuleGetFunction")
    return CUDAKernel("spin", mod[0], fn[0], 1, lambda c: (1, 1, 1))


async def wait_fence(fd, completed, value):
    """Wait until ``*completed >= value`` by reading the eventfd (never busy-looping)."""
    while completed[0] < value:
        await trio.lowlevel.wait_readable(fd)
        try:
            os.read(fd, 8)
        except BlockingIOError:
            pass


async def run_workers_with_driver_calls(n: int, worker, driver_call) -> int:
    """Run ``worker(i)`` for i < n in a nursery under a 60 s watchdog while another thread makes
    ``driver_call()`` in a loop; returns how many calls it made."""
    stop, calls = threading.Event(), [0]

    def background():
        while not stop.is_set():
            driver_call()
            calls[0] += 1

    t = threading.Thread(target=background, daemon=True)
    t.start()
    try:
        with trio.fail_after(60):  # the watchdog
            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(worker, i)
    finally:
        stop.set()
        t.join(10)
    return calls[0]


async def test_fence_stress(be):
    from xinfer_async import _native

    nffi = _native.ffi
    n_queues, total, window = 8, 10_000, 64
    per = total // n_queues
    spin = spin_kernel(be)
    queues = [be.create_queue() for _ in range(n_queues)]
    flags = [be.alloc(4) for _ in range(n_queues)]
    fds = [os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) for _ in range(n_queues)]
    completed = [nffi.new("int64_t *", 0) for _ in range(n_queues)]
    keep: list = []
    checked = [0]

    async def worker(i):
        qi, fd, comp = queues[i], fds[i], completed[i]
        for v in range(1, per + 1):
            slow = v % 125 == 0
            cmds = [DispatchCmd(spin, (1, 1, 1), [flags[i]], struct.pack("<Ii", 2_000_000, v))] if slow else []
            sig = nffi.new("xi_signal *", {"fd": fd, "completed": comp, "value": v})
            keep.append(sig)
            qi.execute(cmds, sig)
            if slow or v % window == 0 or v == per:
                await wait_fence(fd, comp, v)
                if slow:  # the spin kernel's flag is written at its very end: no early fence
                    got = np.empty(1, np.int32)
                    be.read(flags[i], got.view(np.uint8))
                    assert got[0] == v, (i, v, got[0])
                    checked[0] += 1
            else:
                await trio.lowlevel.checkpoint()

    start = time.perf_counter()
    calls = await run_workers_with_driver_calls(n_queues, worker, be.memory_info)
    elapsed = time.perf_counter() - start
    assert all(c[0] == per for c in completed)
    assert checked[0] == n_queues * (per // 125)
    assert calls > 0 and all(qi.error is None for qi in queues)
    print(f"\nfence stress: {n_queues * per} fences in {elapsed:.2f} s, {calls} cuMemGetInfo calls meanwhile")
    for qi in queues:
        qi.close()
    for f in flags:
        be.free(f)
    for fd in fds:
        os.close(fd)


async def test_fence_stress_runtime():
    """The runtime's fences on cuda (Queue, Executor, Fence): 8 queues, 10,000 submissions, driver
    calls from another thread; slow lists (16 fills of 512 MB) are awaited by three tasks at once for
    different values, and each checks the fill's last element through a readback of the same list:
    no fence completes early. A hang fails the 60 s watchdog."""
    from xinfer_async import open_device

    dev = open_device("cuda")
    try:
        n_queues, per = 8, 1250
        queues = [dev.create_queue() for _ in range(n_queues)]
        big = [dev.alloc(128 << 20, "f32") for _ in range(n_queues)]  # 512 MB: ~0.13 ms a fill
        checked = [0]

        async def worker(i):
            q = queues[i]
            for v in range(1, per + 1):
                ex = dev.executor(queue=q)
                slow = v % 25 == 0
                if slow:
                    for _ in range(16):  # ~2 ms of fills: its waiters poll past their spin, then sleep
                        ex.fill(big[i], float(v))
                    rb = ex.download(big[i].view((128 << 20) * 4 - 4, 4))
                value = ex.submit()
                if slow:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(q.fence.wait, value)
                        nursery.start_soon(q.fence.wait, value - 1)
                        await q.fence.wait(value)
                    assert rb.numpy((1,), np.float32)[0] == v, (i, v)
                    checked[0] += 1
                elif v % 64 == 0:
                    await q.fence.wait(value)
                else:
                    await trio.lowlevel.checkpoint()
            await q.fence.wait(q.fence.submitted_value)

        calls = await run_workers_with_driver_calls(n_queues, worker, dev.backend.memory_info)
        assert checked[0] == n_queues * (per // 25)
        assert calls > 0
        assert [q.fence.completed_value for q in queues] == [per] * n_queues
        assert all(q.fence.error is None for q in queues)
        for b in big:
            b.free()
    finally:
        dev.close()


# ---- pinned host memory, mapped fence counters ---------------------------------------------------
def test_host_array_is_pooled_and_recycled(be):
    import gc

    a = be.host_array(1000)
    assert a.dtype == np.uint8 and a.nbytes == 1000 and a.flags.writeable and a.flags.c_contiguous
    addr = a.ctypes.data
    held = be._pinned.allocated_nbytes
    del a
    gc.collect()
    b = be.host_array(900)  # same size class: the same block comes back, no new cuMemHostAlloc
    assert b.ctypes.data == addr and be._pinned.allocated_nbytes == held


def test_wait_for_a_value_not_yet_submitted_stalls_the_stream(be):
    from xinfer_async import _native

    waiter, gate = be.create_queue(), be.create_queue()
    counters = [be.fence_counter(q_) for q_ in (waiter, gate)]
    mode = "cuStreamWaitValue64" if be.stream_wait_value else "event fallback"
    p = be.alloc(4)
    waiter.wait_for(gate, 1)  # gate has nothing enqueued yet
    sig = _native.ffi.new("xi_signal *", {"fd": -1, "completed": counters[0][0], "value": 1})
    waiter.execute([FillCmd(p, 4, 7)], sig)
    time.sleep(0.05)
    if not be.stream_wait_value:
        pytest.skip(f"no 64-bit stream memory ops on this device ({mode})")
    assert counters[0][0][0] == 0  # still stalled behind the gate
    gsig = _native.ffi.new("xi_signal *", {"fd": -1, "completed": counters[1][0], "value": 1})
    gate.execute([], gsig)
    waiter.synchronize()
    assert counters[0][0][0] == 1 and counters[1][0][0] == 1
    out = np.zeros(1, np.uint32)
    be.read(p, out.view(np.uint8))
    assert out[0] == 7
    be.free(p)
