"""The fused kernels of native/KERNELS.md (``rmsnorm_matmul_DT``, ``rmsnorm_matmul_swiglu_DT``,
``rope_kv_store``) dispatched through the runtime on each device present:

* against a numpy float64 reference on fresh random inputs (outputs poisoned with NaN first, unless
  the kernel accumulates into them);
* against the sequence of unfused kernels each one replaces, on the same device: bit-identical for
  ``rope_kv_store``; for the matmul ones within 1e-5 of sum|w||h| (a GPU may sum in another order),
  and bit-identical on the cpu, whose fused kernels run the unfused kernels' row routines;
* bad constants raise what the unfused kernels raise (the runtime's check), and the C kernels
  return XI_EINVAL for them without touching memory (XI_ENOMEM for a scratch too large to allocate).
"""

import numpy as np
import pytest
from _kernel_refs import activation_quantization_bound, encode_weights, rmsnorm_ref, rope_ref, row_numerics

DTS = ["f32", "f16", "q8_0", "q4_0", "q4_1"]
BLOCK_DTS = ["q8_0", "q4_0", "q4_1"]
EPS32 = float(np.finfo(np.float32).eps)
EPS = 1e-5  # rmsnorm eps
#: (K, N): N odd in two of them (1: a single output column)
KN = [(32, 1), (576, 37), (1536, 96), (96, 8500)]  # N = 8500: q4_1/q8_0 on the tensor cores (cuda, H200)
POISON = 0x7FC01234  # a recognizable NaN


def nan(*shape):
    return np.full(shape, np.nan, np.float32)


def f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def activations(rng, T, K):
    """x (T, K), rows at different scales: 1, then 1e-3 (mean(x^2) ~ 1e-6 < eps: eps matters), 50,
    then random in [0.1, 10)."""
    scales = rng.uniform(0.1, 10.0, T)
    scales[:3] = [1.0, 1e-3, 50.0][:T]
    return (rng.standard_normal((T, K)) * scales[:, None]).astype(np.float32)


def upload_weights(dev, w, dt):
    """w float32 (rows, K) encoded as dt and uploaded; returns (buffer, exact float64 values)."""
    raw, exact = encode_weights(w, dt)
    buf = dev.upload(raw, w.shape, dt) if raw.dtype == np.uint8 else dev.upload(raw)
    return buf, exact


async def run(dev, steps, outs):
    """Dispatch ``steps`` ([(kernel, bindings, constants)]) in one list, then download ``outs``
    ([(buffer, shape, dtype)]); returns the downloaded arrays."""
    ex = dev.executor()
    for name, bindings, consts in steps:
        ex.dispatch(name, bindings, consts)
    rbs = [ex.download(buf) for buf, _, _ in outs]
    await ex.submit_and_wait()
    return [rb.numpy(shape, dtype) for rb, (_, shape, dtype) in zip(rbs, outs)]


def assert_within(got, ref, bound, what):
    assert np.isfinite(got).all(), f"{what}: non-finite values"
    err = np.abs(got.astype(np.float64) - ref)
    worst = np.unravel_index(np.argmax(err / bound), err.shape)
    assert (err <= bound).all(), (f"{what}: error {err[worst]:.3g} > bound {bound[worst]:.3g} at {worst} "
                                  f"(got {got[worst]!r}, want {ref[worst]!r})")


def assert_fused_equals_unfused(dev, fused, unfused, mag, what, quant=0.0):
    """Same device: within 1e-5 of ``mag`` (sum|w||h| and what it feeds) plus ``quant`` (twice the
    activation rounding's bound where cuda's integer decode entry quantizes h: the fused kernel's h
    and the rmsnorm kernel's may differ in a last bit, which can move an int8 code); bit for bit on
    the cpu, whose fused kernels run the unfused kernels' routines."""
    if dev.name == "cpu":
        np.testing.assert_array_equal(fused.view(np.uint32), unfused.view(np.uint32), err_msg=what)
    else:
        assert_within(fused, unfused.astype(np.float64), 1e-5 * mag + quant + 1e-30, what)


def silu(g):
    return g / (1.0 + np.exp(-g))


def swiglu_mag(gate, up, mag_g, mag_u):
    """First-order bound on |d(silu(g) * u)| for errors e_g <= mag_g, e_u <= mag_u (|silu'| < 1.1)."""
    return 1.1 * mag_g * np.abs(up) + np.abs(silu(gate)) * mag_u


# ------------------------------------------------------------------ rmsnorm_matmul_DT

@pytest.mark.parametrize("K,N", KN)
@pytest.mark.parametrize("T", [1, 3, 64])
@pytest.mark.parametrize("accumulate", [0, 1])
@pytest.mark.parametrize("dt", DTS)
async def test_rmsnorm_matmul(devices, rng, dt, accumulate, T, K, N):
    """vs float64, and vs rmsnorm then matmul_DT in the same list."""
    x, norm, w = activations(rng, T, K), f32(rng, K), f32(rng, N, K, scale=0.5)
    y0 = f32(rng, T, N) if accumulate else nan(T, N)
    wb, exact = upload_weights(devices, w, dt)
    xb, nb = devices.upload(x), devices.upload(norm)
    y1, y2, hb = devices.upload(y0), devices.upload(y0), devices.upload(nan(T, K))
    fused, unfused, h = await run(devices, [
        (f"rmsnorm_matmul_{dt}", [wb, xb, nb, y1], {"T": T, "N": N, "K": K, "accumulate": accumulate, "eps": EPS}),
        ("rmsnorm", [xb, nb, hb], {"rows": T, "dim": K, "eps": EPS}),
        (f"matmul_{dt}", [wb, hb, y2], {"T": T, "N": N, "K": K, "accumulate": accumulate}),
    ], [(y1, (T, N), np.float32), (y2, (T, N), np.float32), (hb, (T, K), np.float32)])

    h64 = rmsnorm_ref(x, norm, EPS)
    base = y0.astype(np.float64) if accumulate else 0.0
    ref = base + h64 @ exact.T
    # float32 h (a few ulps each) and a float32 sum over K: error ~ eps32 * sum|w||h|; on the cpu
    # the block types also round h to int8 per block of 32 (activation_quantization_bound)
    mag = np.abs(h64) @ np.abs(exact).T + np.abs(base)
    qb = activation_quantization_bound(devices.name, dt, h, exact)
    assert_within(fused, ref, 1e-5 * np.abs(ref) + 32 * EPS32 * mag + qb, f"rmsnorm_matmul_{dt} vs float64")

    assert np.isfinite(unfused).all()
    mag = np.abs(h.astype(np.float64)) @ np.abs(exact).T + np.abs(base)
    assert_fused_equals_unfused(devices, fused, unfused, mag, f"rmsnorm_matmul_{dt} vs rmsnorm + matmul_{dt}",
                                0.0 if devices.name == "cpu" else 2 * qb)


# ------------------------------------------------------------------ rmsnorm_matmul_swiglu_DT

@pytest.mark.parametrize("K,N", KN)
@pytest.mark.parametrize("T", [1, 3, 64])
@pytest.mark.parametrize("dt", DTS)
async def test_rmsnorm_matmul_swiglu(devices, rng, dt, T, K, N):
    """vs float64, and vs rmsnorm, matmul_DT into (T, 2N), swiglu (in_stride 2N) in the same list."""
    x, norm = activations(rng, T, K), f32(rng, K)
    w = f32(rng, 2 * N, K, scale=0.5)
    w[:N] *= 4.0  # gates over silu's curved range
    wb, exact = upload_weights(devices, w, dt)
    xb, nb = devices.upload(x), devices.upload(norm)
    y1, y2 = devices.upload(nan(T, N)), devices.upload(nan(T, N))
    hb, gu = devices.upload(nan(T, K)), devices.upload(nan(T, 2 * N))
    fused, unfused, h, g = await run(devices, [
        (f"rmsnorm_matmul_swiglu_{dt}", [wb, xb, nb, y1], {"T": T, "N": N, "K": K, "eps": EPS}),
        ("rmsnorm", [xb, nb, hb], {"rows": T, "dim": K, "eps": EPS}),
        (f"matmul_{dt}", [wb, hb, gu], {"T": T, "N": 2 * N, "K": K, "accumulate": 0}),
        ("swiglu", [gu, gu.view(4 * N), y2], {"rows": T, "n": N, "in_stride": 2 * N}),
    ], [(y1, (T, N), np.float32), (y2, (T, N), np.float32), (hb, (T, K), np.float32), (gu, (T, 2 * N), np.float32)])

    h64 = rmsnorm_ref(x, norm, EPS)
    gate, up = h64 @ exact[:N].T, h64 @ exact[N:].T
    ref = silu(gate) * up
    # gate and up each within 32 eps32 sum|w||h| (+ on the cpu's block types, h's int8 rounding)
    qg, qu = activation_quantization_bound(devices.name, dt, h, exact[:N]), activation_quantization_bound(devices.name, dt, h, exact[N:])
    err_g = 32 * EPS32 * (np.abs(h64) @ np.abs(exact[:N]).T) + qg
    err_u = 32 * EPS32 * (np.abs(h64) @ np.abs(exact[N:]).T) + qu
    # first order in the errors, plus their product (the int8 rounding is not small enough to drop it)
    bound = 1e-5 * np.abs(ref) + swiglu_mag(gate, up, err_g, err_u) + 1.1 * err_g * err_u
    assert_within(fused, ref, bound, f"rmsnorm_matmul_swiglu_{dt} vs float64")

    assert np.isfinite(unfused).all()
    ah = np.abs(h.astype(np.float64))
    mag = swiglu_mag(g[:, :N].astype(np.float64), g[:, N:].astype(np.float64),
                     ah @ np.abs(exact[:N]).T, ah @ np.abs(exact[N:]).T)
    assert_fused_equals_unfused(devices, fused, unfused, mag,
                                f"rmsnorm_matmul_swiglu_{dt} vs rmsnorm + matmul_{dt} + swiglu",
                                0.0 if devices.name == "cpu" else 2 * (swiglu_mag(gate, up, qg, qu) + 1.1 * qg * qu))


# ------------------------------------------------------------------ a row does not depend on T

#: token counts each run of a kernel sees: T == 1 (cuda: xi_mv1), 2 <= T <= 8 (the staged xi_mvc),
#: T > 8 (the `_t` entries of xi_mvt.cuh), with a partial last group of 8 tokens; on the weights
#: that run xi_tc.cuh's tensor-core kernel, its `_tc` entry at T <= 8 and its `_tct` entry above
T_RUNS = [1, 5, 8, 13, 21, 64]


#: (K, N, x offset in floats): xi_mvt.cuh's narrow (2 rows a warp, 1 + 1 with GLU, at 8 < T <= 16)
#: and wide (4, 2 + 2: from 2048 weight rows, or T > 16) paths, odd N; K = 3584: tokens too large
#: to stage in shared memory; x offset 1: unaligned, every T's element-by-element path. q4_1 and
#: q8_0 run xi_tc.cuh's tensor-core kernel with GLU, and at N = 8500 (4 row tiles an SM on the H200);
#: K = 2304: its 72 blocks in 15 segments of 5, the last of 2; (576, 8500, 1): its one-token body
#: (xi_tc_one) without GLU over 5 segments, x unaligned
ROW_KN = [(576, 37, 0), (1536, 70, 0), (576, 1030, 0), (96, 2049, 0), (96, 8500, 0), (2304, 37, 0), (3584, 37, 0),
          (576, 37, 1), (576, 8500, 1)]


@pytest.mark.parametrize("K,N,xoff", ROW_KN)
@pytest.mark.parametrize("kind", ["matmul", "rmsnorm_matmul", "rmsnorm_matmul_swiglu"])
@pytest.mark.parametrize("dt", DTS)
async def test_row_result_does_not_depend_on_T(devices, rng, dt, kind, K, N, xoff):
    """Token t's output row is bit-identical whether it runs alone (T == 1) or with 4, 7, 12, 20 or
    63 others: a batched decode step equals each request's step alone (issue: batched decode). Where
    cuda runs the integer decode entry at T <= 8 (``row_numerics`` "pq": other bits than the f32
    entries above 8 tokens), the runs of up to 8 tokens are held against 8-token runs over all 64
    tokens (windows 0..7, 8..15, ...) instead of the 64-token run."""
    T = max(T_RUNS)
    x, norm = activations(rng, T, K), f32(rng, K)
    x = np.concatenate([f32(rng, xoff), x.reshape(-1)])  # xoff floats before token 0
    w = f32(rng, (2 if kind.endswith("swiglu") else 1) * N, K, scale=0.5)
    wb, _ = upload_weights(devices, w, dt)
    xb, nb = devices.upload(x), devices.upload(norm)
    steps, outs = [], []
    for t_run in T_RUNS:  # tokens [0, t_run) in one dispatch
        for start in ([0] if t_run > 1 else [0, 4, 9, 63]):  # T == 1: a few single tokens
            yb = devices.upload(nan(t_run, N))
            consts = {"T": t_run, "N": N, "K": K}
            if kind != "rmsnorm_matmul_swiglu":
                consts["accumulate"] = 0
            if kind != "matmul":
                consts["eps"] = EPS
            xv = xb.view((xoff + start * K) * 4, t_run * K * 4)
            bind = [wb, xv, yb] if kind == "matmul" else [wb, xv, nb, yb]
            steps.append((f"{kind}_{dt}", bind, consts))
            outs.append((yb, (t_run, N), np.float32))
    pq = {t: row_numerics(devices.name, kind, dt, N, K, t) == "pq" for t in T_RUNS}
    windows = list(range(0, T, 8)) if any(pq.values()) else []
    assert not pq[T] and all(pq[t] == pq[8] for t in T_RUNS if t <= 8)
    for start in windows:  # the integer entry's full result: 8 tokens at a time
        yb = devices.upload(nan(8, N))
        consts = {"T": 8, "N": N, "K": K}
        if kind != "rmsnorm_matmul_swiglu":
            consts["accumulate"] = 0
        if kind != "matmul":
            consts["eps"] = EPS
        xv = xb.view((xoff + start * K) * 4, 8 * K * 4)
        steps.append((f"{kind}_{dt}", [wb, xv, yb] if kind == "matmul" else [wb, xv, nb, yb], consts))
        outs.append((yb, (8, N), np.float32))
    got = await run(devices, steps, outs)
    full = got[T_RUNS.index(T) + 3]  # the T == 64 run (three more T == 1 runs come first)
    full_pq = np.concatenate(got[len(got) - len(windows):]) if windows else None
    assert np.isfinite(full).all() and (full_pq is None or np.isfinite(full_pq).all())
    i = 0
    for t_run in T_RUNS:
        for start in ([0] if t_run > 1 else [0, 4, 9, 63]):
            ref = full_pq if pq[t_run] else full
            np.testing.assert_array_equal(got[i].view(np.uint32), ref[start:start + t_run].view(np.uint32),
                                          err_msg=f"{kind}_{dt}: tokens {start}..{start + t_run - 1} run with T={t_run}")
            i += 1


# ------------------------------------------------------------------ rope_kv_store

#: (n_head, n_kv, head_dim, extra floats at the end of a qkv row); 9 + 3 heads: the cpu rope rounds
#: a head differently by its index and n_head (see native/kernels/rope.c), so rope_kv_store must
#: rotate q and k the way two rope calls do
HEADS = [(9, 3, 64, 0), (4, 2, 16, 8), (2, 2, 2, 3)]
THETA = 10000.0


def _caches(ctx, width):
    c = np.empty((ctx, width), np.float32)
    c.view(np.uint32)[:] = POISON
    return c


@pytest.mark.parametrize("n_head,n_kv,hd,extra", HEADS)
@pytest.mark.parametrize("T", [1, 3, 64])
async def test_rope_kv_store(devices, rng, T, n_head, n_kv, hd, extra):
    """vs float64, and bit for bit vs rope (q) + rope (k) + kv_store (k) + kv_store (v, pos = row)."""
    stride, ctx, kvw = (n_head + 2 * n_kv) * hd + extra, T + 6, n_kv * hd
    qkv = f32(rng, T, stride)
    pos = rng.integers(0, 5000, T).astype(np.int32)
    pos[0] = 4095
    row = rng.permutation(ctx)[:T].astype(np.int32)  # distinct: a repeated row is a race on a GPU
    if T >= 3:
        pos[1] = -1            # stored, not rotated
        row[2] = -1            # rotated, not stored
        pos[T - 1] = 0         # angle 0
    if T >= 4:
        row[3] = ctx           # past the cache: not stored
    q1, k1, v1 = devices.upload(qkv), devices.upload(_caches(ctx, kvw)), devices.upload(_caches(ctx, kvw))
    q2, k2, v2 = devices.upload(qkv), devices.upload(_caches(ctx, kvw)), devices.upload(_caches(ctx, kvw))
    pb, rb = devices.upload(pos), devices.upload(row)
    koff, voff = 4 * n_head * hd, 4 * (n_head + n_kv) * hd
    rope = lambda n: {"rows": T, "n_head": n, "head_dim": hd, "row_stride": stride, "theta": THETA}  # noqa: E731
    store = {"T": T, "width": kvw, "ctx": ctx, "src_stride": stride}
    got = await run(devices, [
        ("rope_kv_store", [q1, pb, rb, k1, v1],
         {"T": T, "n_head": n_head, "n_kv": n_kv, "head_dim": hd, "row_stride": stride, "ctx": ctx, "theta": THETA}),
        ("rope", [q2, pb], rope(n_head)),
        ("rope", [q2.view(koff), pb], rope(n_kv)),
        ("kv_store", [q2.view(koff), k2, rb], store),
        ("kv_store", [q2.view(voff), v2, rb], store),
    ], [(q1, (T, stride), np.float32), (k1, (ctx, kvw), np.float32), (v1, (ctx, kvw), np.float32),
        (q2, (T, stride), np.float32), (k2, (ctx, kvw), np.float32), (v2, (ctx, kvw), np.float32)])
    out, kc, vc = got[:3]

    qk = (n_head + n_kv) * hd
    ref = rope_ref(qkv, pos, n_head + n_kv, hd, THETA)  # the k heads follow the q heads
    # float32 rotation of float64-exact angles: a few ulps of |a| + |b|
    np.testing.assert_allclose(out[:, :qk], ref[:, :qk], rtol=0, atol=8 * EPS32 * np.abs(qkv).max())
    np.testing.assert_array_equal(out[:, qk:].view(np.uint32), qkv[:, qk:].view(np.uint32))  # v and padding
    for t in range(T):
        if pos[t] < 0:
            np.testing.assert_array_equal(out[t].view(np.uint32), qkv[t].view(np.uint32))
    stored = {int(r): t for t, r in enumerate(row) if 0 <= r < ctx}
    for r in range(ctx):
        if r in stored:
            t = stored[r]
            np.testing.assert_array_equal(kc[r].view(np.uint32), out[t, n_head * hd:qk].view(np.uint32))
            np.testing.assert_array_equal(vc[r].view(np.uint32), qkv[t, qk:qk + kvw].view(np.uint32))
        else:  # untouched
            assert (kc[r].view(np.uint32) == POISON).all() and (vc[r].view(np.uint32) == POISON).all(), r

    for name, fused, unfused in zip(("qkv", "k_cache", "v_cache"), got[:3], got[3:]):
        np.testing.assert_array_equal(fused.view(np.uint32), unfused.view(np.uint32),
                                      err_msg=f"rope_kv_store vs rope + rope + kv_store + kv_store: {name}")


@pytest.mark.parametrize("n_head,n_kv,hd,extra", HEADS[:2])
async def test_rope_kv_store_ff(devices, rng, n_head, n_kv, hd, extra):
    """Frequency factors (Llama 3 rope scaling): pair i rotated by pos * theta^(-2i/hd) / ff[i], vs
    float64; all-ones factors give rope_kv_store's bits."""
    T = 5
    stride, ctx, kvw = (n_head + 2 * n_kv) * hd + extra, T + 2, n_kv * hd
    qkv = f32(rng, T, stride)
    pos = np.array([4095, -1, 17, 0, 900], np.int32)
    row = np.arange(T, dtype=np.int32)
    ff = rng.uniform(1.0, 8.0, hd // 2).astype(np.float32)
    consts = {"T": T, "n_head": n_head, "n_kv": n_kv, "head_dim": hd, "row_stride": stride, "ctx": ctx, "theta": THETA}
    bufs = [devices.upload(qkv), devices.upload(pos), devices.upload(row), devices.upload(_caches(ctx, kvw)),
            devices.upload(_caches(ctx, kvw)), devices.upload(ff)]
    ones = [devices.upload(qkv), bufs[1], bufs[2], devices.upload(_caches(ctx, kvw)), devices.upload(_caches(ctx, kvw)),
            devices.upload(np.ones(hd // 2, np.float32))]
    plain = [devices.upload(qkv), bufs[1], bufs[2], devices.upload(_caches(ctx, kvw)), devices.upload(_caches(ctx, kvw))]
    out, k1, o_ones, o_plain = await run(devices, [
        ("rope_kv_store_ff", bufs, consts), ("rope_kv_store_ff", ones, consts), ("rope_kv_store", plain, consts),
    ], [(bufs[0], (T, stride), np.float32), (bufs[3], (ctx, kvw), np.float32),
        (ones[0], (T, stride), np.float32), (plain[0], (T, stride), np.float32)])
    qk = (n_head + n_kv) * hd
    ref = qkv.astype(np.float64)
    freqs = THETA ** (-np.arange(0, hd, 2) / hd) / ff.astype(np.float64)
    for t in range(T):
        if pos[t] < 0:
            continue
        c, s_ = np.cos(pos[t] * freqs), np.sin(pos[t] * freqs)
        for h in range(n_head + n_kv):
            a, b = ref[t, h * hd:(h + 1) * hd:2].copy(), ref[t, h * hd + 1:(h + 1) * hd:2].copy()
            ref[t, h * hd:(h + 1) * hd:2] = a * c - b * s_
            ref[t, h * hd + 1:(h + 1) * hd:2] = a * s_ + b * c
    np.testing.assert_allclose(out[:, :qk], ref[:, :qk], rtol=0, atol=8 * EPS32 * np.abs(qkv).max())
    np.testing.assert_array_equal(k1[2].view(np.uint32), out[2, n_head * hd:qk].view(np.uint32))
    assert not np.array_equal(out, o_plain)  # the factors matter
    np.testing.assert_array_equal(o_ones.view(np.uint32), o_plain.view(np.uint32))


# ------------------------------------------------------------------ bad constants

def _dispatch_error(dev, name, bindings, consts):
    with pytest.raises(ValueError) as err:
        dev.executor().dispatch(name, bindings, consts)
    return str(err.value)


@pytest.mark.parametrize("dt", BLOCK_DTS)
def test_rmsnorm_matmul_bad_K(devices, dt):
    """K not a multiple of the block size: the error matmul_DT raises, under the fused name."""
    big = devices.upload(np.zeros(4096, np.float32))
    want = _dispatch_error(devices, f"matmul_{dt}", [big, big, big], {"T": 1, "N": 2, "K": 48, "accumulate": 0})
    assert "K=48 is not a multiple" in want
    for fused, consts in ((f"rmsnorm_matmul_{dt}", {"T": 1, "N": 2, "K": 48, "accumulate": 0, "eps": EPS}),
                          (f"rmsnorm_matmul_swiglu_{dt}", {"T": 1, "N": 2, "K": 48, "eps": EPS})):
        got = _dispatch_error(devices, fused, [big] * 4, consts)
        assert got == want.replace(f"matmul_{dt}", fused)


def test_rope_kv_store_bad_constants(devices):
    """An odd head_dim or a row_stride narrower than the q, k and v heads: rope's errors."""
    big = devices.upload(np.zeros(4096, np.float32))
    want = _dispatch_error(devices, "rope", [big, big],
                           {"rows": 2, "n_head": 1, "head_dim": 3, "row_stride": 8, "theta": THETA})
    got = _dispatch_error(devices, "rope_kv_store", [big] * 5, {"T": 2, "n_head": 1, "n_kv": 1, "head_dim": 3,
                                                                "row_stride": 16, "ctx": 4, "theta": THETA})
    assert got == want.replace("rope", "rope_kv_store") == "rope_kv_store: head_dim=3 must be even"
    want = _dispatch_error(devices, "rope", [big, big],
                           {"rows": 2, "n_head": 2, "head_dim": 4, "row_stride": 6, "theta": THETA})
    got = _dispatch_error(devices, "rope_kv_store", [big] * 5, {"T": 2, "n_head": 2, "n_kv": 1, "head_dim": 4,
                                                                "row_stride": 14, "ctx": 4, "theta": THETA})
    assert want == "rope: row_stride=6 is smaller than the row width 8"
    assert got == "rope_kv_store: row_stride=14 is smaller than the row width 16"  # 2 q + 1 k + 1 v heads of 4


def _einval_cases():
    cases = []
    for dt in DTS:
        cases += [(f"rmsnorm_matmul_{dt}", {"T": 1, "N": -1, "K": 32, "accumulate": 0, "eps": EPS}),
                  (f"rmsnorm_matmul_swiglu_{dt}", {"T": -1, "N": 1, "K": 32, "eps": EPS})]
    for dt in BLOCK_DTS:
        cases += [(f"rmsnorm_matmul_{dt}", {"T": 1, "N": 1, "K": 48, "accumulate": 0, "eps": EPS}),
                  (f"rmsnorm_matmul_swiglu_{dt}", {"T": 1, "N": 1, "K": 48, "eps": EPS})]
    rkv = {"T": 1, "n_head": 1, "n_kv": 1, "head_dim": 4, "row_stride": 12, "ctx": 4, "theta": THETA}
    cases += [("rope_kv_store", {**rkv, "head_dim": 3, "row_stride": 9}),
              ("rope_kv_store", {**rkv, "row_stride": 11}),  # even with T = 1 (the runtime checks T > 1 only)
              ("rope_kv_store", {**rkv, "theta": 0.0}),
              ("rope_kv_store", {**rkv, "ctx": -1})]
    return cases


@pytest.mark.parametrize("name,consts", _einval_cases())
def test_native_einval(name, consts):
    """The C kernels (cpu backend) reject the constants with XI_EINVAL and write nothing."""
    from xinfer_async._native import ffi, lib

    bufs = [np.empty(256, np.float32) for _ in range(5)]
    for b in bufs:
        b.view(np.uint32)[:] = POISON
    keep = [ffi.from_buffer(b) for b in bufs]
    assert getattr(lib, f"xi_k_{name}")(ffi.new("void *[]", keep), ffi.new(f"xi_{name}_c *", consts)) == lib.XI_EINVAL
    for b in bufs:
        assert (b.view(np.uint32) == POISON).all()


@pytest.mark.parametrize("name", ["rmsnorm_matmul_f32", "rmsnorm_matmul_swiglu_f32"])
def test_native_scratch_enomem(name):
    """A scratch the host cannot allocate (2^62 bytes): XI_ENOMEM, nothing read or written; the cpu
    backend raises it as DeviceOutOfMemoryError (XI_EINVAL as DeviceError)."""
    from xinfer_async._native import ffi, lib
    from xinfer_async.backends.cpu._backend import _Kernel, _kernel_failed
    from xinfer_async.hal import DeviceError, DeviceOutOfMemoryError

    consts = {"T": 2**30, "N": 1, "K": 2**30, "eps": EPS} | ({"accumulate": 0} if "swiglu" not in name else {})
    bufs = [np.empty(16, np.float32) for _ in range(4)]
    for b in bufs:
        b.view(np.uint32)[:] = POISON
    keep = [ffi.from_buffer(b) for b in bufs]
    rc = getattr(lib, f"xi_k_{name}")(ffi.new("void *[]", keep), ffi.new(f"xi_{name}_c *", consts))
    assert rc == lib.XI_ENOMEM == 2
    for b in bufs:
        assert (b.view(np.uint32) == POISON).all()
    with pytest.raises(DeviceOutOfMemoryError, match=f"kernel {name}: no host memory"):
        _kernel_failed(_Kernel(name, None), rc)
    with pytest.raises(DeviceError, match=f"kernel {name} rejected its constants") as err:
        _kernel_failed(_Kernel(name, None), lib.XI_EINVAL)
    assert not isinstance(err.value, DeviceOutOfMemoryError)
