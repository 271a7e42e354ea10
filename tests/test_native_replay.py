"""native/kernels/team.c and the share forms (share.c, attention.c, rope.c): ``xi_replay`` runs a
kernel list in one native call, the kernels with a share form split over a team of threads.

* Every share form gives its standalone kernel's bits, at team sizes 1, 2, 3 and 5, on fresh
  random inputs of shapes that leave partial units (N not a multiple of 16, T not of 4).
* A list of dependent kernels gives what the kernels give called one by one.
* A failing kernel stops the list there: its status and index come back, the kernels before it
  ran, none after it did.
* The kernels a decode step is made of have share forms (else they would run on one thread).
"""

import numpy as np
import pytest
from test_native_kernels import encode, ffi, lib, poison

TEAMS = [1, 2, 3, 5]
DTS = ["f32", "f16", "q8_0", "q4_0", "q4_1", "q4_1_r8", "q8_0_r8"]


def encode_any(w, dt):
    """``encode`` (test_native_kernels), and the cpu backend's r8 repack of its bytes for *_r8."""
    if not dt.endswith("_r8"):
        return encode(w, dt)
    raw, deq = encode(w, dt[:-3])
    out = np.empty_like(raw)
    assert getattr(lib, f"xi_repack_{dt}")(ffi.from_buffer(raw), ffi.from_buffer(out), w.shape[0], w.shape[1]) == 0
    return out, deq


@pytest.fixture
def rng():
    seed = int(np.random.SeedSequence().entropy % (2**63))
    print(f"rng seed = {seed}")
    return np.random.default_rng(seed)


def _op(op, name, bufs, consts, keep):
    arrays = [ffi.from_buffer(a) for a in bufs]
    b = ffi.new("void *[]", arrays or [ffi.NULL])
    c = ffi.new(f"xi_{name}_c *", consts)
    keep += [arrays, b, c]
    op.kernel = ffi.addressof(lib, f"xi_k_{name}")
    op.b, op.c, op.share = b, c, lib.xi_share_of(name.encode())


def replay(steps, nthreads):
    """Run ``steps`` ([(kernel name, [arrays], constants dict)]) with one xi_replay call;
    returns (status, failed op index)."""
    keep = []
    ops = ffi.new("xi_op[]", len(steps))
    for op, (name, bufs, consts) in zip(ops, steps):
        _op(op, name, bufs, consts, keep)
    plan = lib.xi_replay_prepare(ops, len(steps))
    assert plan != ffi.NULL
    try:
        failed = ffi.new("int *", -1)
        return lib.xi_replay(plan, nthreads, failed), failed[0]
    finally:
        lib.xi_replay_free(plan)


def alone(name, bufs, consts):
    keep = [ffi.from_buffer(a) for a in bufs]
    return getattr(lib, f"xi_k_{name}")(ffi.new("void *[]", keep or [ffi.NULL]), ffi.new(f"xi_{name}_c *", consts))


def same_bits(a, b, what):
    np.testing.assert_array_equal(np.ascontiguousarray(a).view(np.uint32), np.ascontiguousarray(b).view(np.uint32),
                                  err_msg=what)


def check_share(name, make, out_index, consts):
    """``make()`` -> fresh arrays (the same values each call); the share form at every team size
    writes what the standalone kernel writes into array ``out_index``."""
    ref = make()
    assert alone(name, ref, consts) == 0
    for n in TEAMS:
        bufs = make()
        assert replay([(name, bufs, consts)], n) == (0, -1)
        for i in ([out_index] if isinstance(out_index, int) else out_index):
            same_bits(bufs[i], ref[i], f"{name} {consts}, team of {n}: binding {i}")


MM = [(1, 576, 576), (1, 600, 64), (1, 37, 96), (2, 100, 64), (3, 33, 96), (9, 200, 64), (5, 1, 32), (0, 8, 32)]


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("T,N,K", MM)
@pytest.mark.parametrize("accumulate", [0, 1])
def test_matmul(rng, dt, T, N, K, accumulate):
    wq, _ = encode_any((rng.standard_normal((N, K)) * 0.5).astype(np.float32), dt)
    x = rng.standard_normal((T, K)).astype(np.float32)
    y = rng.standard_normal((T, N)).astype(np.float32) if accumulate else poison(T, N)
    check_share(f"matmul_{dt}", lambda: [wq, x, y.copy()], 2, {"T": T, "N": N, "K": K, "accumulate": accumulate})


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("T,N,K", [(1, 576, 576), (1, 37, 96), (6, 70, 64), (0, 4, 32)])
def test_rmsnorm_matmul(rng, dt, T, N, K):
    wq, _ = encode_any((rng.standard_normal((N, K)) * 0.5).astype(np.float32), dt)
    x = (rng.standard_normal((T, K)) * rng.uniform(0.1, 10, (T, 1))).astype(np.float32)
    nw = rng.uniform(0.5, 1.5, K).astype(np.float32)
    y = rng.standard_normal((T, N)).astype(np.float32)
    for acc in (0, 1):
        check_share(f"rmsnorm_matmul_{dt}", lambda: [wq, x, nw, y.copy()], 3,
                    {"T": T, "N": N, "K": K, "accumulate": acc, "eps": 1e-5})


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("T,N,K", [(1, 1536, 576), (1, 45, 64), (7, 40, 96)])
def test_rmsnorm_matmul_swiglu(rng, dt, T, N, K):
    wq, _ = encode_any((rng.standard_normal((2 * N, K)) * 0.5).astype(np.float32), dt)
    x = rng.standard_normal((T, K)).astype(np.float32)
    nw = rng.uniform(0.5, 1.5, K).astype(np.float32)
    check_share(f"rmsnorm_matmul_swiglu_{dt}", lambda: [wq, x, nw, poison(T, N)], 3,
                {"T": T, "N": N, "K": K, "eps": 1e-5})


@pytest.mark.parametrize("rows,dim", [(1, 576), (13, 64), (0, 8)])
def test_rmsnorm_swiglu_add(rng, rows, dim):
    x = rng.standard_normal((rows, dim)).astype(np.float32)
    w = rng.standard_normal(dim).astype(np.float32)
    check_share("rmsnorm", lambda: [x, w, poison(rows, dim)], 2, {"rows": rows, "dim": dim, "eps": 1e-5})
    g = rng.standard_normal((rows, 2 * dim)).astype(np.float32)
    check_share("swiglu", lambda: [g, g.reshape(-1)[dim:] if rows else g, poison(rows, dim)], 2,
                {"rows": rows, "n": dim, "in_stride": 2 * dim})
    n = rows * dim * 7 + 3
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    check_share("add", lambda: [a, b, poison(n)], 2, {"n": n})


@pytest.mark.parametrize("T,nh,nkv,hd", [(1, 9, 3, 64), (5, 4, 2, 16), (3, 2, 1, 8), (40, 4, 2, 128)])
@pytest.mark.parametrize("ff", [False, True])  # rope_kv_store_ff: frequency factors (binding 5)
@pytest.mark.parametrize("f16", [False, True])  # the f16 KV cache's kernels
def test_rope_kv_store_and_rope(rng, T, nh, nkv, hd, ff, f16):
    st, ctx = (nh + 2 * nkv) * hd + 4, T + 12  # (40, 4, 2, 128): above XI_ROPE_SPLIT, two phases
    qkv = rng.standard_normal((T, st)).astype(np.float32)
    pos = rng.integers(-1, 40, T).astype(np.int32)
    row = rng.permutation(ctx)[:T].astype(np.int32)
    cdt = np.float16 if f16 else np.float32
    kc, vc = rng.standard_normal((ctx, nkv * hd)).astype(cdt), rng.standard_normal((ctx, nkv * hd)).astype(cdt)
    freq = rng.uniform(1.0, 8.0, hd // 2).astype(np.float32)
    name = "rope_kv_store" + ("_ff" if ff else "") + ("_f16" if f16 else "")
    check_share(name, lambda: [qkv.copy(), pos, row, kc.copy(), vc.copy()] + ([freq] if ff else []), [0, 3, 4],
                {"T": T, "n_head": nh, "n_kv": nkv, "head_dim": hd, "row_stride": st, "ctx": ctx, "theta": 1e4})
    check_share("rope", lambda: [qkv.copy(), pos], 0,
                {"rows": T, "n_head": nh, "head_dim": hd, "row_stride": st, "theta": 1e4})


@pytest.mark.parametrize("T,nh,nkv,hd,ctx", [(1, 9, 3, 64, 300), (6, 4, 2, 16, 20), (2, 2, 2, 8, 5)])
@pytest.mark.parametrize("window", [0, 4])  # 4: a sliding window shorter than most rows' keys
@pytest.mark.parametrize("f16", [False, True])
def test_attention(rng, T, nh, nkv, hd, ctx, window, f16):
    qs = nh * hd + 3
    q = rng.standard_normal((T, qs)).astype(np.float32)
    cdt = np.float16 if f16 else np.float32
    kc, vc = rng.standard_normal((ctx, nkv * hd)).astype(cdt), rng.standard_normal((ctx, nkv * hd)).astype(cdt)
    pos = rng.integers(-1, ctx + 3, T).astype(np.int32)  # a row with no keys, one past the cache
    sfx = "_f16" if f16 else ""
    check_share("attention" + sfx, lambda: [q, kc, vc, pos, poison(T, nh * hd)], 4,
                {"T": T, "n_head": nh, "n_kv": nkv, "head_dim": hd, "ctx": ctx, "q_stride": qs, "scale": 0.125,
                 "window": window})
    first = rng.integers(-1, ctx, T).astype(np.int32)
    last = (first + rng.integers(-2, ctx, T)).astype(np.int32)
    check_share("attention_batched" + sfx, lambda: [q, kc, vc, first, last, poison(T, nh * hd)], 5,
                {"T": T, "n_head": nh, "n_kv": nkv, "head_dim": hd, "rows": ctx, "q_stride": qs, "scale": 0.125,
                 "window": window})


def _layer(rng, T=3, K=64, N=96):
    """A chain of dependent kernels, one of them (argmax) without a share form: (steps, outputs)."""
    w1, _ = encode((rng.standard_normal((K, K)) * 0.3).astype(np.float32), "q4_1")
    w2, _ = encode((rng.standard_normal((2 * N, K)) * 0.3).astype(np.float32), "q8_0")
    w3, _ = encode((rng.standard_normal((K, N)) * 0.3).astype(np.float32), "f16")
    x = rng.standard_normal((T, K)).astype(np.float32)
    nw = rng.uniform(0.5, 1.5, K).astype(np.float32)
    h, g, ids = poison(T, K), poison(T, N), poison(T, dtype=np.int32)
    steps = [
        ("rmsnorm_matmul_q4_1", [w1, x, nw, h], {"T": T, "N": K, "K": K, "accumulate": 0, "eps": 1e-5}),
        ("add", [h, x, h], {"n": T * K}),
        ("rmsnorm_matmul_swiglu_q8_0", [w2, h, nw, g], {"T": T, "N": N, "K": K, "eps": 1e-5}),
        ("matmul_f16", [w3, g, h], {"T": T, "N": K, "K": N, "accumulate": 1}),
        ("argmax", [h, ids], {"rows": T, "n": K}),
        ("rmsnorm", [h, nw, x], {"rows": T, "dim": K, "eps": 1e-5}),
    ]
    return steps, [h, g, ids, x]


@pytest.mark.parametrize("n", TEAMS + [-1])  # -1: each kernel alone, in order (the backend's default)
def test_chain_equals_kernels_one_by_one(rng, n):
    seed = int(rng.integers(1 << 62))
    steps, outs = _layer(np.random.default_rng(seed))
    for name, bufs, consts in steps:
        assert alone(name, bufs, consts) == 0
    steps2, outs2 = _layer(np.random.default_rng(seed))
    assert replay(steps2, n) == (0, -1)
    for a, b in zip(outs, outs2):
        same_bits(a, b, f"team of {n}")


@pytest.mark.parametrize("n", TEAMS + [-1])
@pytest.mark.parametrize("bad", [2, 4])  # a share form's constants (plan), a kernel without one
def test_failure_stops_the_list(rng, n, bad):
    steps, (h, g, ids, x) = _layer(rng)
    name, bufs, consts = steps[bad]
    steps[bad] = (name, bufs, dict(consts, **({"N": -1} if name.startswith("rmsnorm") else {"n": -1})))
    x0 = x.copy()
    ids0 = ids.copy()
    assert replay(steps, n) == (lib.XI_EINVAL, bad)
    assert np.isfinite(h).all()  # ran before the failure
    if bad == 2:
        assert np.isnan(g).all()  # the failing kernel and those after it did not run
    same_bits(x, x0, "rmsnorm after the failure ran")
    np.testing.assert_array_equal(ids, ids0)


def test_empty_list_and_no_share_forms():
    assert replay([], 2) == (0, -1)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    ids = poison(3, dtype=np.int32)
    assert replay([("argmax", [x, ids], {"rows": 3, "n": 4})], 2) == (0, -1)
    np.testing.assert_array_equal(ids, [3, 3, 3])


DECODE_FAMILIES = ["matmul_", "rmsnorm_matmul_", "rmsnorm_matmul_swiglu_"]


def test_decode_kernels_have_share_forms():
    from xinfer_async.ops._kernels import KERNELS
    names = [k for k in KERNELS
             if any(k.startswith(f) for f in DECODE_FAMILIES)] + [
        "attention", "attention_batched", "attention_f16", "attention_batched_f16", "rope_kv_store",
        "rope_kv_store_ff", "rope_kv_store_f16", "rope_kv_store_ff_f16", "rope", "rmsnorm", "swiglu", "add"]
    missing = [k for k in names if lib.xi_share_of(k.encode()) == ffi.NULL]
    assert not missing and len(names) > 40, missing
    assert lib.xi_share_of(b"argmax") == ffi.NULL


async def test_trio_thread_runs_while_a_replay_runs(rng):
    """A captured list replays on the cpu queue thread in one native call with the GIL released:
    a trio task keeps ticking while it runs (with the GIL held it could not run at all)."""
    import math
    import time

    import trio

    from xinfer_async import open_device

    dev = open_device("cpu")
    try:
        N, K = 4096, 1024  # 4M multiply-adds a kernel; a replay of the list: ~40 ms on 2 cores
        w = dev.upload(rng.standard_normal((N, K)).astype(np.float32))
        x = dev.upload(rng.standard_normal((1, K)).astype(np.float32))
        y = dev.upload(poison(1, N))
        rec = dev.executor()
        for _ in range(64):
            rec.dispatch("matmul_f32", [w, x, y], {"T": 1, "N": N, "K": K, "accumulate": 1})
        graph = rec.capture()
        ex = dev.executor()
        ex.replay(graph)
        t = time.perf_counter()
        await ex.submit_and_wait()  # this machine's time for one replay (and a warm-up)
        one = time.perf_counter() - t
        # replays for ~0.3 s whatever the machine (2 took 0.07-0.09 s on 2 cores; on many
        # cores they could end within the 0.02 s below, and a short replay leaves little room for
        # a loaded machine's scheduling delays in the gap it allows)
        ex = dev.executor()
        for _ in range(min(100, max(2, math.ceil(0.3 / max(one, 1e-6))))):
            ex.replay(graph)
        ticks = []

        async def ticker(cancel):
            while True:
                ticks.append(time.perf_counter())
                await trio.sleep(0.002)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker, None)
            await trio.sleep(0.01)
            t0 = time.perf_counter()
            await ex.submit_and_wait()
            t1 = time.perf_counter()
            nursery.cancel_scope.cancel()
        during = [t0] + [t for t in ticks if t0 < t < t1] + [t1]
        assert t1 - t0 > 0.02, f"the replay took {t1 - t0:.3f} s: too short to tell"
        # a tick every 2 ms when the trio thread runs freely (fewer on a loaded machine); with the
        # GIL held through the replay there would be none inside it: one gap as long as the replay
        gap = max(b - a for a, b in zip(during, during[1:]))
        assert len(during) >= 5 and gap < (t1 - t0) / 2, (len(during) - 2, gap, t1 - t0)
        graph.destroy()
    finally:
        dev.close()
