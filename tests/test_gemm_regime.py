"""The GEMM regime of the decoder's matrix products (``llm/_gemm.py``; issue #15's prefill-sized T):

* the policy: which T and weight types lower, ``XINFER_GEMM_MIN_T`` parsing and its error; which
  plans of a builder carry ``Gemm`` commands;
* the operand kernels (``dequantize_f16_DT``, ``to_f16``, ``rmsnorm_f16``, ``unscale_add``,
  ``swiglu_unscale``) on each device present, against numpy models: bit for bit (weights: gguf's
  dequantized values rounded to f16; activations: the row scale rule, then f16 rounding);
* the GEMM itself (cuda: cuBLASLt, here skipped): a row's f32 result is bit-identical for every T of
  a bucket of m (decode: 9, 16, 33, 64; prefill: 65, 128, 512) with the other rows random, and from
  one run to the next, and within a printed bound of float64;
* a tiny model through the builder with the regime forced, against the kernel path, and a score
  plan's row 0 unchanged (bit for bit) when the other rows change.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import xinfer_async
from xinfer_async.llm._gemm import GEMM_MIN_T, GEMM_MIN_T_ENV, GEMM_MIN_T_LARGE, gemm_min_t, lowers
from xinfer_async.model import Gemm as GemmCommand
from xinfer_async.ops import Gemm

F16_LIMIT = np.float32(32768.0)
BLOCK_DTS = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1"]  # the types gguf-py can quantize


# -- the policy ---------------------------------------------------------------------------------
def test_policy_default_env_and_cpu():
    assert gemm_min_t("cuda", {}) == GEMM_MIN_T == 64
    assert gemm_min_t("cuda", {}, dim=576) == gemm_min_t("cuda", {}, dim=2047) == 64  # SmolLM2's width
    assert gemm_min_t("cuda", {}, dim=2048) == gemm_min_t("cuda", {}, dim=4096) == GEMM_MIN_T_LARGE == 5
    assert gemm_min_t("cuda", {GEMM_MIN_T_ENV: "64"}, dim=4096) == 64  # the variable wins
    assert gemm_min_t("cuda", {}, dim=4096, f16_resident=False) == 64  # each call would dequantize
    assert gemm_min_t("cuda", {GEMM_MIN_T_ENV: "16"}, dim=4096, f16_resident=False) == 16
    assert gemm_min_t("cpu", {}, dim=4096) is None
    assert gemm_min_t("cuda", {GEMM_MIN_T_ENV: "128"}) == 128
    assert gemm_min_t("cuda", {GEMM_MIN_T_ENV: " 96 "}) == 96
    assert gemm_min_t("cuda", {GEMM_MIN_T_ENV: "off"}) is None
    assert gemm_min_t("cuda", {GEMM_MIN_T_ENV: "0"}) is None
    assert gemm_min_t("cpu", {GEMM_MIN_T_ENV: "8"}) is None  # cpu keeps its kernels


@pytest.mark.parametrize("raw", ["abc", "-3", "1.5", "64k"])
def test_policy_bad_value_names_the_variable(raw):
    with pytest.raises(ValueError, match=rf"XINFER_GEMM_MIN_T='{raw}' must be a positive integer"):
        gemm_min_t("cuda", {GEMM_MIN_T_ENV: raw})


def test_lowers_quantized_types_at_or_above_min_t():
    assert lowers("q4_1", 64, 64) and lowers("q4_k", 512, 64) and lowers("q8_0", 65, 64)
    assert not lowers("q4_1", 63, 64)
    assert not lowers("f32", 512, 64) and not lowers("f16", 512, 64) and not lowers("bf16", 512, 64)
    assert not lowers("q4_1", 512, None)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    from xinfer_async.llm._gguf import load_gguf
    from xinfer_async.llm._synthetic import write_synthetic_gguf

    p = write_synthetic_gguf(tmp_path_factory.mktemp("gemm") / "tiny.gguf", "tiny", "q4_1", seed=3)
    return load_gguf(p, check_tokenizer=False)


def _gemms(builder, T, all_logits, batched=False):
    return sum(isinstance(c, GemmCommand) for c in builder.forward(T, all_logits, batched).commands)


def test_which_plans_lower(tiny_gguf, monkeypatch):
    from xinfer_async.llm._llama import LlamaBuilder

    cfg = tiny_gguf.config
    dev = xinfer_async.open_device("cpu")  # repacked (the default): r8 matrices, which never lower
    try:
        default = LlamaBuilder(tiny_gguf, dev, ctx=128, chunk=64)
        assert default.gemm_min_t is None and default._gemm is None  # cpu: the policy says never
        assert _gemms(default, 64, True) == 0
        forced = LlamaBuilder(tiny_gguf, dev, ctx=128, chunk=64, gemm_min_t=64, f16_weights=True)
        assert forced.out_dtype.endswith("_r8") and forced._gemm is None and _gemms(forced, 64, True) == 0
        assert not forced._resident  # no f16 copy of a matrix that never lowers
    finally:
        dev.close()
    monkeypatch.setenv("XINFER_CPU_REPACK", "0")  # the GGUF layout, which the GEMM regime's dequantizers read
    dev = xinfer_async.open_device("cpu")
    try:
        b = LlamaBuilder(tiny_gguf, dev, ctx=128, chunk=64, batch_seqs=8, gemm_min_t=64)
        per_layer = 4  # qkv, o, gate+up, down
        out_chunks = -(-cfg.vocab_size // b._gemm.chunk_rows)
        assert _gemms(b, 64, True) == per_layer * cfg.n_layer + out_chunks  # score: every row's logits
        assert _gemms(b, 64, False) == per_layer * cfg.n_layer  # prefill64: the output layer has 1 row
        assert b.batch_sizes[-1] == 128
        assert _gemms(b, 128, True, batched=True) == per_layer * cfg.n_layer + out_chunks  # batch128
        assert _gemms(b, 16, False) == 0 and _gemms(b, 1, False) == 0  # prefill16, decode
        assert _gemms(b, 32, True, batched=True) == 0
    finally:
        dev.close()


def test_builder_asks_the_policy_again_without_resident_f16(tiny_gguf, monkeypatch):
    """The policy's threshold assumes resident f16 weights; where they are not kept, the builder
    asks again with f16_resident=False (cuda: 64 instead of 9), not where they are."""
    from xinfer_async.llm import _llama

    monkeypatch.setenv("XINFER_CPU_REPACK", "0")  # the GGUF layout: the matrices lower
    calls = []

    def policy(name, environ=None, *, dim=0, f16_resident=True):
        calls.append((name, dim, f16_resident))
        return 9 if f16_resident else 64

    monkeypatch.setattr(_llama, "_policy_min_t", policy)
    dev = xinfer_async.open_device("cpu")
    try:
        dim = tiny_gguf.config.dim
        on = _llama.LlamaBuilder(tiny_gguf, dev, ctx=128, chunk=64, f16_weights=True)
        assert on.f16_weight_bytes > 0 and on.gemm_min_t == 9 and calls == [("cpu", dim, True)]
        calls.clear()
        off = _llama.LlamaBuilder(tiny_gguf, dev, ctx=128, chunk=64, f16_weights=False)
        assert off.f16_weight_bytes == 0 and off.gemm_min_t == 64
        assert calls == [("cpu", dim, True), ("cpu", dim, False)]
    finally:
        dev.close()


@pytest.mark.parametrize("bad", [0, -1, 2.5, "64"])
def test_builder_rejects_bad_gemm_min_t(tiny_gguf, bad):
    from xinfer_async.llm._llama import LlamaBuilder

    dev = xinfer_async.open_device("cpu")
    try:
        with pytest.raises(ValueError, match=r"gemm_min_t=.* must be a positive int, None or 'policy'"):
            LlamaBuilder(tiny_gguf, dev, ctx=128, chunk=64, gemm_min_t=bad)
    finally:
        dev.close()


# -- the operand kernels against their numpy models -----------------------------------------------
def row_scale(h: np.ndarray) -> np.ndarray:
    """The model of the per-row scale s (float32 (rows,)): the largest power of two <= 1 with
    max|h| * s <= 2^15 (NaN elements aside)."""
    out = []
    for row in np.asarray(h, np.float32):
        amax, s = np.float32(np.nanmax(np.abs(row))) if row.size else np.float32(0), np.float32(1)
        for _ in range(126):
            if not amax * s > F16_LIMIT:
                break
            s = np.float32(s * np.float32(0.5))
        out.append(s)
    return np.array(out, np.float32)


def f16_rows(h: np.ndarray):
    """The model of to_f16 / rmsnorm_f16's outputs for f32 rows ``h``: (f16 bits, inv_scale)."""
    s = row_scale(h)
    return (h * s[:, None]).astype(np.float16).view(np.uint16), (np.float32(1) / s).astype(np.float32)


async def _run(dev, steps, outs):
    ex = dev.executor()
    for name, bindings, consts in steps:
        ex.dispatch(name, bindings, consts)
    rbs = [ex.download(buf) for buf, _, _ in outs]
    await ex.submit_and_wait()
    return [rb.numpy(shape, dtype) for rb, (_, shape, dtype) in zip(rbs, outs)]


@pytest.mark.parametrize("dt", BLOCK_DTS)
async def test_dequantize_f16_is_gguf_rounded_to_f16(devices, rng, dt):
    import gguf

    qt = getattr(gguf.GGMLQuantizationType, dt.upper())
    N, K = 137, 512  # 70,144 values: several of the C kernel's chunks of 16,384, the last partial
    w = (rng.standard_normal((N, K)) * rng.uniform(0.01, 100, (N, 1))).astype(np.float32)
    q = np.ascontiguousarray(gguf.quants.quantize(w, qt))
    want = gguf.quants.dequantize(q, qt).reshape(N, K).astype(np.float16).view(np.uint16)
    src = devices.upload(q.reshape(-1).view(np.uint8), (N, K), dt)
    dst = devices.alloc(N * K, "f16")
    (got,) = await _run(devices, [(f"dequantize_f16_{dt}", [src, dst], dict(n=N * K))], [(dst, (N, K), np.uint16)])
    np.testing.assert_array_equal(got, want)


def _activations(rng, T, K):
    """Rows at scales 1, 1e-3, 1e5 (beyond f16: scaled), 3e38 (near f32's max), then random."""
    scales = rng.uniform(0.1, 10.0, T)
    scales[:4] = [1.0, 1e-3, 1e5, 3e37]
    return (rng.standard_normal((T, K)) * scales[:, None]).astype(np.float32)


async def test_to_f16_model(devices, rng):
    T, K = 9, 1000
    x = _activations(rng, T, K)
    xb, y, inv = devices.upload(x), devices.alloc((T, K), "f16"), devices.alloc(T, "f32")
    got, got_inv = await _run(devices, [("to_f16", [xb, y, inv], dict(rows=T, dim=K))],
                              [(y, (T, K), np.uint16), (inv, (T,), np.float32)])
    want, want_inv = f16_rows(x)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_inv, want_inv)
    assert want_inv[2] > 1 and want_inv[0] == 1  # the 1e5 row was scaled, the unit row not
    assert np.isfinite(got.view(np.float16)).all()


@pytest.mark.parametrize("K", [1024, 999])  # 999: rmsnorm's scalar path
async def test_rmsnorm_f16_is_rmsnorm_then_the_model(devices, rng, K):
    T = 7
    x = _activations(rng, T, K)
    x[3] = x[0] * 3  # no f32 overflow in the sum of squares
    w = (rng.standard_normal(K) * 50).astype(np.float32)  # gains to 50: rows beyond f16 after the norm
    xb, wb = devices.upload(x), devices.upload(w)
    h, y, inv = devices.alloc((T, K), "f32"), devices.alloc((T, K), "f16"), devices.alloc(T, "f32")
    c = dict(rows=T, dim=K, eps=1e-5)
    got_h, got, got_inv = await _run(devices, [("rmsnorm", [xb, wb, h], c), ("rmsnorm_f16", [xb, wb, y, inv], c)],
                                     [(h, (T, K), np.float32), (y, (T, K), np.uint16), (inv, (T,), np.float32)])
    want, want_inv = f16_rows(got_h)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_inv, want_inv)


@pytest.mark.parametrize("N, stride", [(300, 700), (301, 703)])  # cuda: 4 elements a thread; 1 a thread
async def test_unscale_add_and_swiglu_unscale(devices, rng, N, stride):
    T = 5
    src = (rng.standard_normal((T, 2 * N)) * 40).astype(np.float32)
    inv = np.array([1, 2, 4, 1024, 0.5], np.float32)
    y0 = rng.standard_normal((T, stride)).astype(np.float32)
    sb, ib = devices.upload(src), devices.upload(inv)
    yb, ab, gb = devices.upload(y0), devices.alloc((T, N), "f32"), devices.alloc((T, N), "f32")
    sub = devices.upload(np.ascontiguousarray(src[:, :N]))
    scaled = devices.upload((src * inv[:, None]).astype(np.float32))
    got_y, got_a, ref_a = await _run(devices, [
        ("unscale_add", [sub, ib, yb], dict(rows=T, n=N, y_stride=stride, accumulate=1)),
        ("swiglu_unscale", [sb, ib, ab], dict(rows=T, n=N)),
        ("swiglu", [scaled, scaled.view(4 * N, 4 * N * (2 * T - 1)), gb], dict(rows=T, n=N, in_stride=2 * N)),
    ], [(yb, (T, stride), np.float32), (ab, (T, N), np.float32), (gb, (T, N), np.float32)])
    want_y = y0.copy()
    want_y[:, :N] = y0[:, :N] + src[:, :N] * inv[:, None]  # a power of two: the product is exact
    np.testing.assert_array_equal(got_y, want_y)
    np.testing.assert_array_equal(got_a, ref_a)  # `swiglu` of the unscaled values, bit for bit


# -- the GEMM (cuda: cuBLASLt) ---------------------------------------------------------------------
@pytest.fixture
def cuda_usable():
    """Skips, with the reason, where the cuda backend cannot run (a sync fixture: a skip raised inside
    the trio test would reach the report without its message)."""
    from xinfer_async._open import cuda_status

    ok, reason = cuda_status()
    if not ok:
        pytest.skip(f"cuda backend not usable here: {reason}")


# (N, K): 8B's k (or v), qkv, down, a logits chunk, gate/up (whose prefill tile asks 4 bytes of workspace)
SHAPES = [(1024, 4096), (6144, 4096), (4096, 14336), (13568, 4096), (28672, 4096)]


async def _gemm(dev, a16, b, N, K):
    T = a16.shape[0]
    ab, cb = dev.upload(a16), dev.alloc((T, N), "f32")
    op = Gemm.create(dev, T, N, K, "f16", trans_b=True, out_dtype="f32").compile()
    op.bind(ab, b, cb)
    ex = dev.executor()
    op.dispatch(ex)
    rb = ex.download(cb)
    await ex.submit_and_wait()
    return rb.numpy((T, N), np.float32)


async def _check_rows(dev, rng, w16, b, Ts, label):
    """Rows 0 and T - 1 of a launch of each T of ``Ts[1:]`` (random other rows) equal, bit for bit,
    rows 0 and 7 of a ``Ts[0]``-row launch, which repeats bit for bit and is within the float64 bound."""
    N, K = w16.shape
    big = (rng.standard_normal((Ts[0], K)) * 3).astype(np.float16)
    full = await _gemm(dev, big, b, N, K)
    again = await _gemm(dev, big, b, N, K)
    np.testing.assert_array_equal(again.view(np.uint32), full.view(np.uint32), err_msg=f"{label} T={Ts[0]} run twice")
    ref = big[:8].astype(np.float64) @ w16.astype(np.float64).T
    # f16 products are exact in f32; the sum: K additions of <= 2 units of 2^-24 (tensor cores may
    # truncate where IEEE rounds; a split-K part's sum is one more f32 addition)
    bound = 2 * K * 2.0 ** -24 * (np.abs(big[:8]).astype(np.float64) @ np.abs(w16).astype(np.float64).T)
    err = np.abs(full[:8] - ref)
    print(f"{label} T={Ts[0]}: max |gemm - float64| {err.max():.3g}, max ratio to 2K*2^-24*sum|a||b| "
          f"{(err / bound).max():.3g}")
    assert (err <= bound).all()
    for T in Ts[1:]:
        a = (rng.standard_normal((T, K)) * 3).astype(np.float16)
        a[T - 1], a[0] = big[7], big[0]  # at T = 1 the one row is big[0]
        got = await _gemm(dev, a, b, N, K)
        np.testing.assert_array_equal(got[0].view(np.uint32), full[0].view(np.uint32), err_msg=f"{label} T={T} row 0")
        if T > 1:
            np.testing.assert_array_equal(got[T - 1].view(np.uint32), full[7].view(np.uint32),
                                          err_msg=f"{label} T={T} row {T - 1}")


@pytest.mark.parametrize("N,K", SHAPES)
@pytest.mark.cuda
async def test_gemm_rows_do_not_depend_on_T_or_other_rows(cuda_usable, rng, N, K):
    """Within each bucket of m, rows 0 and T - 1 of a launch (random other rows) equal, bit for bit,
    the same rows of the bucket's largest launch, which is run twice (split-K reductions included)."""
    dev = xinfer_async.open_device("cuda")
    try:
        w16 = (rng.standard_normal((N, K)) * 0.05).astype(np.float16)
        b = dev.upload(w16)
        for Ts in ((64, 1, 5, 9, 16, 33, 63), (512, 65, 128, 576)):
            await _check_rows(dev, rng, w16, b, Ts, f"N={N} K={K} ({dev.backend.cublaslt().config(N, K, Ts[0])})")
    finally:
        dev.close()


@pytest.mark.cuda
def test_a_bad_workspace_setting_fails_at_open(cuda_usable, monkeypatch):
    """XINFER_GEMM_WORKSPACE_MIB is read when the cuda device opens, before any weight is uploaded."""
    monkeypatch.setenv("XINFER_GEMM_WORKSPACE_MIB", "lots")
    with pytest.raises(ValueError, match=r"^XINFER_GEMM_WORKSPACE_MIB must be an integer number of MiB"):
        xinfer_async.open_device("cuda")
    monkeypatch.setenv("XINFER_GEMM_WORKSPACE_MIB", "0")
    dev = xinfer_async.open_device("cuda")
    try:
        assert [b.workspace_nbytes for b in dev.backend.gemm_buckets] == [0, 0]
    finally:
        dev.close()


@pytest.mark.cuda
async def test_split_k_decode_algorithms_keep_rows_independent_of_m_and_runs(cuda_usable, rng):
    """The decode bucket may choose a split-K algorithm (parts summed from the workspace). None won
    the tuning for the 8B shapes on the H200 (2026-12-02), so this forces up to three split-K
    candidates of the down projection (n 4096, k 14336) in turn: rows 0 and T - 1 equal the T = 64
    launch's bit for bit at T = 1, 5, 9, 16, 33 and 63, the T = 64 launch repeats bit for bit, and it
    stays within the float64 bound."""
    from xinfer_async.backends.cuda._cublaslt import REDUCTION_SCHEME_WORKSPACE, _config

    N, K = 4096, 14336
    dev = xinfer_async.open_device("cuda")
    try:
        lt = dev.backend.cublaslt()
        dec = lt.buckets[0]
        assert dec.name == "decode" and dec.workspace_nbytes > 0
        cands = [a for a in lt.candidates(N, K, dec.tune_ms, workspace_nbytes=dec.workspace_nbytes,
                                          mask=REDUCTION_SCHEME_WORKSPACE) if _config(a)["splitk"] > 1]
        assert cands, "cuBLASLt offered no split-K algorithm with a workspace reduction for n=4096, k=14336"
        w16 = (rng.standard_normal((N, K)) * 0.05).astype(np.float16)
        b = dev.upload(w16)
        for algo in cands[:3]:
            cfg = _config(algo)
            assert cfg["reduction"] & REDUCTION_SCHEME_WORKSPACE, cfg
            lt._algos[(N, K, "decode")] = (algo, dec.workspace_nbytes)  # forced: every m of the bucket runs it
            for m in (1, 5, 9, 16, 33, 63, 64):
                lt._gemms.pop((m, N, K), None)
            await _check_rows(dev, rng, w16, b, (64, 1, 5, 9, 16, 33, 63), f"{cfg}")
            assert lt.gemm_for(64, N, K).algo is algo and lt.gemm_for(64, N, K).workspace_nbytes > 0
    finally:
        dev.close()


def test_tuning_cycles_enough_copies_of_the_weights_to_miss_l2():
    from xinfer_async.backends.cuda._gemm_tune import COLD_BYTES, MAX_COPIES, b_copies

    mib = 1 << 20
    assert b_copies(4096 * 4096 * 2) == 4  # an 8B layer's o projection, 32 MiB: 128 MiB in all
    assert b_copies(28672 * 4096 * 2) == 1  # gate/up, 224 MiB: alone larger than the L2
    assert b_copies(COLD_BYTES) == 1 and b_copies(COLD_BYTES - 1) == 2
    assert b_copies(1 * mib) == MAX_COPIES == 16 and b_copies(3, cold_bytes=10, most=99) == 4
    with pytest.raises(ValueError, match=r"^b_nbytes must be > 0, got 0$"):
        b_copies(0)


@pytest.mark.cuda
def test_tuning_reads_a_different_copy_of_the_weights_each_run(cuda_usable):
    """time_launches hands run r copy r % b_copies of operand b (L2-cold timing), a and c fixed."""
    from xinfer_async.backends.cuda._gemm_tune import b_copies, time_launches

    dev = xinfer_async.open_device("cuda")
    try:
        seen: list[tuple[int, int, int]] = []
        nbytes = (64 * 4096 * 2, 4096 * 4096 * 2, 64 * 4096 * 4)
        ms = time_launches(dev.backend, nbytes, [lambda s, a, b, c, ws: seen.append((a, b, c))], warmup=2, repeats=5)
        assert len(ms) == 1 and ms[0] >= 0 and len(seen) == 7
        copies = b_copies(nbytes[1])
        bs = [b for _, b, _ in seen]
        assert copies == 4 and len(set(bs)) == copies and all(bs[i] != bs[i + 1] for i in range(6))
        assert len({(a, c) for a, _, c in seen}) == 1
    finally:
        dev.close()


@pytest.mark.parametrize("N,K", [(6144, 4096), (28672, 4096)])
@pytest.mark.cuda
def test_gemm_algorithm_is_one_object_for_every_m_of_a_bucket(cuda_usable, N, K):
    """Every m of a bucket of an (n, k) runs the one algorithm chosen for it (the bit contract of
    _cublaslt.py): the same cublasLtMatmulAlgo_t object, timed against the other candidates; the
    prefill bucket's split-K free, the decode bucket's split-K only with a workspace reduction."""
    from xinfer_async.backends.cuda._cublaslt import REDUCTION_SCHEME_WORKSPACE

    dev = xinfer_async.open_device("cuda")
    try:
        lt = dev.backend.cublaslt()
        for bucket, ms in zip(lt.buckets, ((1, 9, 16, 33, 64), (65, 128, 512, 576))):
            gemms = [lt.gemm_for(m, N, K) for m in ms]
            assert all(g.algo is gemms[0].algo and g.bucket is bucket for g in gemms)
            cfg = lt.config(N, K, ms[0])
            if bucket.workspace_nbytes == 0:  # split-K free (a few bytes of workspace may be asked at some m)
                assert cfg["splitk"] <= 1 and cfg["reduction"] == 0, cfg
            elif cfg["splitk"] > 1:
                assert cfg["reduction"] & REDUCTION_SCHEME_WORKSPACE, cfg
            tuning = lt.tuning.get((N, K, bucket.name))
            print(f"N={N} K={K} {bucket.name}: chosen {cfg}, workspace {[g.workspace_nbytes for g in gemms]}; "
                  f"tuning {tuning}")
            n_cands = len(lt.candidates(N, K, bucket.tune_ms, workspace_nbytes=bucket.workspace_nbytes,
                                        mask=REDUCTION_SCHEME_WORKSPACE))
            if n_cands > 1:  # timed: the chosen one first, every candidate at every m of the bucket
                assert tuning is not None and tuning[0][0] == cfg and len(tuning) == n_cands
                assert all(set(t) == set(bucket.tune_ms) and min(t.values()) > 0 for _, t in tuning)
    finally:
        dev.close()


@pytest.mark.cuda
async def test_gemm_regime_chain_matches_numpy_model(cuda_usable, rng):
    """rmsnorm_f16 -> dequantize_f16_q4_1 -> Gemm -> unscale_add (accumulate) on cuda against float64
    of the model's operands (gguf's weights rounded to f16; the activations by the row-scale rule)."""
    import gguf

    dev = xinfer_async.open_device("cuda")
    try:
        T, N, K = 96, 2048, 4096
        w = rng.standard_normal((N, K)).astype(np.float32) * 0.02
        q = np.ascontiguousarray(gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q4_1))
        w16 = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q4_1).reshape(N, K).astype(np.float16)
        x = _activations(rng, T, K)
        x[3] = x[0] * 7
        g = (rng.standard_normal(K) + 1).astype(np.float32)
        y0 = rng.standard_normal((T, N)).astype(np.float32)
        xb, gb, qb, yb = dev.upload(x), dev.upload(g), dev.upload(q.reshape(-1).view(np.uint8), (N, K), "q4_1"), dev.upload(y0)
        h, a16, inv = dev.alloc((T, K), "f32"), dev.alloc((T, K), "f16"), dev.alloc(T, "f32")
        wb, tmp = dev.alloc((N, K), "f16"), dev.alloc((T, N), "f32")
        ex = dev.executor()
        ex.dispatch("rmsnorm", [xb, gb, h], dict(rows=T, dim=K, eps=1e-5))
        ex.dispatch("rmsnorm_f16", [xb, gb, a16, inv], dict(rows=T, dim=K, eps=1e-5))
        ex.dispatch("dequantize_f16_q4_1", [qb, wb], dict(n=N * K))
        op = Gemm.create(dev, T, N, K, "f16", trans_b=True, out_dtype="f32").compile()
        op.bind(a16, wb, tmp)
        op.dispatch(ex)
        ex.dispatch("unscale_add", [tmp, inv, yb], dict(rows=T, n=N, y_stride=N, accumulate=1))
        rbs = [ex.download(v) for v in (h, a16, inv, wb, yb)]
        await ex.submit_and_wait()
        got_h, got_a, got_inv, got_w, got_y = (rb.numpy(s, d) for rb, s, d in zip(
            rbs, [(T, K), (T, K), (T,), (N, K), (T, N)], [np.float32, np.uint16, np.float32, np.uint16, np.float32]))
        want_a, want_inv = f16_rows(got_h)
        np.testing.assert_array_equal(got_a, want_a)
        np.testing.assert_array_equal(got_inv, want_inv)
        np.testing.assert_array_equal(got_w, w16.view(np.uint16))
        a64 = want_a.view(np.float16).astype(np.float64)
        ref = y0 + (a64 @ w16.astype(np.float64).T) * want_inv[:, None]
        bound = (2 * K * 2.0 ** -24 * (np.abs(a64) @ np.abs(w16).astype(np.float64).T) * want_inv[:, None]
                 + 2.0 ** -23 * np.abs(ref))
        err = np.abs(got_y - ref)
        print(f"GEMM regime chain: max |y - float64 model| {err.max():.3g}, max ratio to bound {(err / bound).max():.3g}")
        assert (err <= bound).all()
    finally:
        dev.close()


# -- a model through the builder -------------------------------------------------------------------
async def _score(builder, prepared, ids):
    from xinfer_async.llm._runner import Runner

    r = Runner(builder.plan_specs(), builder.ctx, builder.chunk)
    out = await r.run(prepared.slots[0], "score", tokens=list(ids), positions=range(len(ids)), outputs=("logits",))
    return out["logits"]


@contextlib.contextmanager
def _gguf_layout(devices, monkeypatch):
    """``devices``, or on cpu another cpu device that keeps the GGUF layout (``XINFER_CPU_REPACK=0``):
    the GEMM regime's dequantizers read that layout, so the cpu's repacked r8 matrices never lower."""
    if devices.name != "cpu":
        yield devices
        return
    monkeypatch.setenv("XINFER_CPU_REPACK", "0")
    dev = xinfer_async.open_device("cpu")
    try:
        yield dev
    finally:
        dev.close()


async def test_builder_gemm_regime_matches_kernels_and_rows_stand_alone(devices, tiny_gguf, rng, monkeypatch):
    with _gguf_layout(devices, monkeypatch) as dev:
        await _gemm_regime_matches_kernels(dev, tiny_gguf, rng)


async def test_a_slot_gives_its_gemms_one_workspace(tiny_gguf, rng, monkeypatch):
    """Where GEMMs need workspace (here the cpu backend is asked to want 4 KiB for every GEMM), each
    slot allocates one, counted in its private bytes, and every GEMM it records uses it; slots do not
    share one (a slot's runs may be recorded into any command list); the logits are the
    workspace-free ones."""
    from xinfer_async.llm._llama import LlamaBuilder
    from xinfer_async.ops import _operator

    V, T = tiny_gguf.config.vocab_size, 16
    ids = rng.integers(0, V, T)
    monkeypatch.setenv("XINFER_CPU_REPACK", "0")  # the GEMM regime's dequantizers read the GGUF layout
    with contextlib.closing(xinfer_async.open_device("cpu")) as dev:
        gemm = LlamaBuilder(tiny_gguf, dev, ctx=64, chunk=T, gemm_min_t=T)
        want = await _score(gemm, gemm.prepare(1), ids)
        plain_bytes = gemm.prepare(1).slots[0].private_bytes
        seen = []
        dispatch = _operator.Gemm.dispatch

        def spy(op, ex):
            seen.append(op._bound[3].address if len(op._bound) > 3 else None)
            dispatch(op, ex)

        monkeypatch.setattr(dev.backend, "gemm_workspace_nbytes", lambda g: 4096, raising=False)
        monkeypatch.setattr(_operator.Gemm, "dispatch", spy)
        prepared = gemm.prepare(2)
        per_slot = [s._workspace.address for s in prepared.slots]
        assert len(set(per_slot)) == 2 and all(s._workspace.size_in_bytes == 4096 for s in prepared.slots)
        assert prepared.slots[0].private_bytes == plain_bytes + 4096
        half = len(seen) // 2
        assert half > 0 and seen[:half] == [per_slot[0]] * half and seen[half:] == [per_slot[1]] * half
        got = await _score(gemm, prepared, ids)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


async def _gemm_regime_matches_kernels(devices, tiny_gguf, rng):
    from xinfer_async.llm._llama import LlamaBuilder

    V, T = tiny_gguf.config.vocab_size, 64
    ids = rng.integers(0, V, T)
    other = rng.integers(0, V, T)
    other[0] = ids[0]
    kern = LlamaBuilder(tiny_gguf, devices, ctx=128, chunk=T, gemm_min_t=None)
    want = await _score(kern, kern.prepare(1), ids)
    gemm = LlamaBuilder(tiny_gguf, devices, ctx=128, chunk=T, gemm_min_t=T)
    assert gemm._gemm is not None
    prepared = gemm.prepare(1)
    got = await _score(gemm, prepared, ids)
    diff = np.abs(got - want).max()
    print(f"{devices.name}: GEMM regime vs kernels, max |logit diff| {diff:.3g} (max |logit| {np.abs(want).max():.3g})")
    assert diff <= 0.02 * np.abs(want).max()  # f16 operands: ~2^-11 relative per term
    assert (got.argmax(1) == want.argmax(1)).mean() >= 0.9
    again = await _score(gemm, prepared, other)
    np.testing.assert_array_equal(again[0].view(np.uint32), got[0].view(np.uint32))  # row 0 alone


# -- resident f16 weights (XINFER_F16_WEIGHTS) -------------------------------------------------------
def test_f16_weights_setting():
    from xinfer_async.llm._gemm import F16_WEIGHTS_ENV, f16_weights

    assert f16_weights({}) == "auto" and f16_weights({F16_WEIGHTS_ENV: " "}) == "auto"
    assert f16_weights({F16_WEIGHTS_ENV: " AUTO "}) == "auto"
    assert f16_weights({F16_WEIGHTS_ENV: "0"}) == "0" and f16_weights({F16_WEIGHTS_ENV: "1"}) == "1"
    with pytest.raises(ValueError, match=r"^XINFER_F16_WEIGHTS='yes' must be auto \(the default\), 1 \(keep f16 "
                                         r"weights resident\) or 0$"):
        f16_weights({F16_WEIGHTS_ENV: "yes"})


def test_resident_f16_rule():
    from xinfer_async.llm._gemm import resident_f16

    GB = 10**9
    # auto: cuda, and the copies take at most a third of what is free after the weights and KV caches
    assert resident_f16("auto", "cuda", 15 * GB, 100 * GB)  # 8B shape, 64 x 2048 f32 KV on an H200
    assert resident_f16("auto", "cuda", 15 * GB, 45 * GB)  # exactly a third
    assert not resident_f16("auto", "cuda", 15 * GB, 45 * GB - 1)
    assert not resident_f16("auto", "cuda", 15 * GB, 17 * GB)  # 8B on a 24 GB card
    assert not resident_f16("auto", "cpu", 1, None) and not resident_f16("auto", "cuda", 1, None)
    # forced, whatever the memory
    assert resident_f16("1", "cuda", 15 * GB, 0) and resident_f16(True, "cpu", 1, None)
    assert not resident_f16("0", "cuda", 1, 100 * GB) and not resident_f16(False, "cuda", 1, 100 * GB)
    for bad in ("on", 1, None, "yes"):
        with pytest.raises(ValueError, match=rf"^f16_weights={bad!r} must be 'auto', '1', '0', True or False$"):
            resident_f16(bad, "cuda", 1, 1)


async def test_resident_f16_weights_give_the_same_logits(devices, tiny_gguf, rng, monkeypatch):
    with _gguf_layout(devices, monkeypatch) as dev:
        await _resident_f16_weights_same_logits(dev, tiny_gguf, rng)


async def _resident_f16_weights_same_logits(devices, tiny_gguf, rng):
    from xinfer_async.llm._llama import LlamaBuilder

    T = 64
    ids = rng.integers(0, tiny_gguf.config.vocab_size, T)
    per_call = LlamaBuilder(tiny_gguf, devices, ctx=128, chunk=T, gemm_min_t=T, f16_weights=False)
    resident = LlamaBuilder(tiny_gguf, devices, ctx=128, chunk=T, gemm_min_t=T, f16_weights=True)
    assert resident._gemm.w16 is None and len(resident._resident) == 4 * tiny_gguf.config.n_layer + 1
    names = {c.kernel.name for c in resident.forward(T, True).commands if hasattr(c, "kernel")}
    assert not any(n.startswith("dequantize_f16_") for n in names)  # no per-call dequantization
    want = await _score(per_call, per_call.prepare(1), ids)
    got = await _score(resident, resident.prepare(1), ids)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))  # the same f16 weights


def test_resident_f16_bytes_and_auto_on_cpu(tiny_gguf, monkeypatch):
    """auto keeps nothing on cpu (even with the GEMM regime forced); forced on, the copies are every
    lowering matrix's N x K f16 values, made on the device (no host copy). In the GGUF layout
    (``XINFER_CPU_REPACK=0``): the cpu's repacked r8 matrices never lower."""
    from xinfer_async.llm._llama import LlamaBuilder

    monkeypatch.setenv("XINFER_CPU_REPACK", "0")
    cfg = tiny_gguf.config
    dev = xinfer_async.open_device("cpu")
    try:
        auto = LlamaBuilder(tiny_gguf, dev, ctx=128, chunk=64, gemm_min_t=64, f16_weights="auto")
        assert auto._resident is None and auto.f16_weight_bytes == 0 and auto._gemm.w16 is not None
        on = LlamaBuilder(tiny_gguf, dev, ctx=128, chunk=64, gemm_min_t=64, f16_weights="1")
        per_layer = (cfg.q_dim + 2 * cfg.n_kv_head * cfg.head_dim) * cfg.dim + cfg.dim * cfg.q_dim + \
            2 * cfg.ffn_dim * cfg.dim + cfg.dim * cfg.ffn_dim
        assert on.f16_weight_bytes == 2 * (cfg.n_layer * per_layer + cfg.vocab_size * cfg.dim)
        assert on.weight_bytes() == auto.weight_bytes()  # the file's weights; the copies apart
        assert on.definition.weight_bytes() == auto.definition.weight_bytes() + on.f16_weight_bytes
        with pytest.raises(ValueError, match=r"^f16_weights='yes' must be 'auto', '1', '0', True or False$"):
            LlamaBuilder(tiny_gguf, dev, ctx=128, chunk=64, f16_weights="yes")
    finally:
        dev.close()
