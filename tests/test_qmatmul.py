"""Tokens quantized once, then the integer decode kernel on them (cuda only): ``quantize_q8_1`` and
``rmsnorm_quantize_q8_1`` (the planar q8_1 layout), ``qmatmul_DT`` and ``qmatmul_swiglu_DT``
(shaders/xi_mvq.cuh, PRE), and the rule that sends a model's product there
(``_launch.quantized_activations``, ``Backend.quantized_activations``); a residual product that
quantizes the next product's tokens in its own launch (``qmatmul_normq_DT``) and the products that
read them (``qmatmul_rms_DT``, ``qmatmul_rms_swiglu_DT``: the rmsnorm after the sums), and its rule
(``_launch.normq_fits``).

On cpu: the rule against ``_pq``'s own (``matmul_launch``), its knob, the launch of the family and the
declarations' checks. On cuda, fresh random inputs, outputs poisoned first: the quantizers against the
numpy model (tests/_mmq_model.py) bit for bit; quantize + qmatmul against the ``_pq`` entry of the same
product bit for bit and against the model (which bounds the distance from float64,
tests/test_mvq_kernels.py); and a model's logits the same bits with the path on and off."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import trio
from _kernel_refs import launch_matrix_kind, upload_weight
from _mmq_model import (check_against_model, error_bound, mvq_matmul, normq_inv, normq_tokens, quantize_q8_1,
                        rms_matmul, rms_swiglu, rmsnorm_h, rmsnorm_inv_cta)
from test_8b_widths import BOUND
from test_mvq_kernels import EPS, KINDS, SHAPES, SHAPES_Q6K, TYPES, _force, _model, tokens, weights
from test_reference import _naive_forward

import xinfer_async
from xinfer_async.backends.cuda import _launch
from xinfer_async.llm._gguf import load_gguf
from xinfer_async.ops._kernels import KERNELS, QMATMUL_DTYPES, QMATMUL_PAIRS

F32 = np.float32
H200 = dict(sms=132, stage_max=_launch.stage_max_for(227 * 1024), cc=(9, 0), pq_max=_launch.PQ_STAGE_MAX)


# ---- the rule and the launch, on cpu ------------------------------------------------------------
def test_the_types_are_the_integer_kernels():
    assert tuple(d.label for d in QMATMUL_DTYPES) == _launch.MVQ_TYPES
    for dt in _launch.MVQ_TYPES:
        for name in (f"qmatmul_{dt}", f"qmatmul_swiglu_{dt}"):
            assert not KERNELS[name].cpu and KERNELS[name].cuda.family == "qmatmul"


#: devices by the shared bytes a block may opt in to: the H200 (227 KB), an A100 (163 KB), sm_86 / sm_89 (99 KB)
DEVICES = {"h200": H200,
           "a100": dict(sms=108, stage_max=_launch.stage_max_for(163 * 1024), cc=(8, 0),
                        pq_max=_launch.pq_stage_max_for(163 * 1024)),
           "sm89": dict(sms=128, stage_max=_launch.stage_max_for(99 * 1024), cc=(8, 9),
                        pq_max=_launch.pq_stage_max_for(99 * 1024))}


@pytest.mark.parametrize("device", sorted(DEVICES))
@pytest.mark.parametrize("kind", KINDS)
def test_the_rule_is_where_pq_runs_and_qmatmul_fits(monkeypatch, kind, device):
    """Only where ``matmul_launch`` picks ``_pq`` (T, size, type, K), and there wherever the qmatmul
    entry the rule sends the product to launches (its matmul-kind stages within the device's shared
    bytes): every product the rule takes launches; on the 99 KB device q6_k's output layer at K =
    4096 stays with ``_pq``; on the H200 every product of the 8B shapes that runs ``_pq`` takes the
    path; XINFER_PREQUANT=0 turns it off; an unknown value is an error."""
    for knob in ("XINFER_PREQUANT", "XINFER_PQ_MIN_BYTES", "XINFER_MVQ", "XINFER_MMQ"):
        monkeypatch.delenv(knob, raising=False)
    dev = DEVICES[device]
    seen, kept = set(), set()
    for dt in _launch.MVQ_TYPES + ("q5_1", "f16", "q3_k"):
        for n, k in [(4096, 4096), (6144, 4096), (4096, 14336), (576, 1536), (128256, 4096), (300, 4096 + 32),
                     (4096, 53248)]:
            for t in (1, 4, 8, 9, 64):
                pq = _launch.matmul_launch(dict(T=t, N=n, K=k, accumulate=0, eps=EPS), dt, kind,
                                           stage_max=dev["stage_max"], pq_max=dev["pq_max"], sms=dev["sms"],
                                           cc=dev["cc"])[3] == "_pq"
                got = _launch.quantized_activations(kind, dt, t, n, k, **dev)
                if got:
                    assert pq, (dt, n, k, t)
                    grid, _, shared, _ = _launch.qmatmul_launch(dict(T=t, N=n, K=k, accumulate=0), dt,
                                                                kind == "rmsnorm_matmul_swiglu", dev["sms"], dev["cc"],
                                                                dev["pq_max"])
                    assert shared <= dev["pq_max"] and grid[0] >= 1, (dt, n, k, t)
                elif pq:
                    kept.add((dt, n, k))
                seen.add(got)
    assert seen == {True, False}
    if device == "sm89" and kind == "rmsnorm_matmul":
        assert ("q6_k", 128256, 4096) in kept
    if device == "h200":
        assert not {p for p in kept if p[2] <= 14336}, "on the H200 every _pq product of the 8B shapes takes the path"
    monkeypatch.setenv("XINFER_PREQUANT", "0")
    assert not _launch.quantized_activations(kind, "q4_1", 1, 4096, 4096, **dev)
    monkeypatch.setenv("XINFER_PREQUANT", "yes")
    with pytest.raises(ValueError, match="XINFER_PREQUANT"):
        _launch.quantized_activations(kind, "q4_1", 1, 4096, 4096, **dev)


@pytest.mark.parametrize("glu", [False, True])
def test_the_launch_is_pqs_matmul_kind(glu):
    """qmatmul: the matmul kind's rows, stages and tokens a CTA (4; GLU: its own, 8), one entry."""
    fam = _launch.FAMILIES["qmatmul"]({"dt": "q4_1", "glu": "1" if glu else "0"}, sms=132,
                                      stage_max=H200["stage_max"], cc=(9, 0), pq_max=H200["pq_max"])
    assert fam.entries == ("",) and fam.opt_in == {"": _launch.PQ_STAGE_MAX}
    for t in (1, 4, 8):
        c = dict(T=t, N=4096, K=4096, accumulate=0)
        grid, block, shared, sfx = fam.launch(c)
        ref = _launch.mvq_launch(c, "q4_1", glu, 132, (9, 0), _launch.PQ_STAGE_MAX, norm=glu)
        assert (grid, block, shared, sfx) == ref[:3] + ("",)
        assert grid[1] == -(-t // (8 if glu else _launch.MVQ_MATMUL_TT))


def test_the_declarations_check_k():
    with pytest.raises(ValueError, match="K=4128 is not a multiple of 256"):
        KERNELS["qmatmul_q4_1"].pack(dict(T=1, N=8, K=4128, accumulate=0))
    with pytest.raises(ValueError, match="K=3072 is not a multiple of 2048"):
        KERNELS["qmatmul_swiglu_q6_k"].pack(dict(T=1, N=8, K=3072))
    with pytest.raises(ValueError, match="K=40 is not a multiple of 32"):
        KERNELS["rmsnorm_quantize_q8_1"].pack(dict(T=1, K=40, eps=EPS))
    assert KERNELS["quantize_q8_1"].bindings[1].nbytes(dict(T=3, K=512)) == 3 * 512 + 3 * 16 * 8


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_normq_is_one_launch_of_whole_blocks_at_every_t(monkeypatch, device):
    """``normq_launch``: N / 32 CTAs a token tile whatever an SM holds (N = 16384: 512, over a wave),
    each 8 warps of 4 rows (a q8_1 block of each token), at most 4 tokens a CTA; ``normq_fits`` gives
    one answer for every T (a row's bits do not depend on its batch): yes wherever one token's stages
    fit (on the H200 every type at the 8B and 70B widths), not for N = 4008 nor for a type without the
    integer kernel; XINFER_NORMQ=0 turns it off; an unknown value is an error."""
    monkeypatch.delenv("XINFER_NORMQ", raising=False)
    dev = DEVICES[device]
    args = dict(sms=dev["sms"], cc=dev["cc"], pq_max=dev["pq_max"])
    for dt in _launch.MVQ_TYPES:
        for n, k in [(4096, 4096), (4096, 14336), (8192, 28672), (16384, 4096), (2048, 2048)]:
            try:
                _launch.qmatmul_launch(dict(T=1, N=n, K=k, accumulate=0), dt, False, dev["sms"], dev["cc"],
                                       dev["pq_max"] - _launch.NORMQ_STATIC)
            except ValueError:  # one token's stages over the device's shared bytes
                assert device != "h200" and not _launch.normq_fits(dt, n, k, **args), (dt, n, k)
                continue
            assert _launch.normq_fits(dt, n, k, **args), (dt, n, k)
            for t in range(1, _launch.PQ_MAX_T + 1):
                grid, block, shared, _ = _launch.normq_launch(dict(T=t, N=n, K=k, accumulate=1), dt, **args)
                tt = -(-t // grid[1])
                assert grid[0] == n // 32 and block == (256, 1, 1) and tt <= _launch.MVQ_MATMUL_TT, (dt, n, k, t)
                assert shared + _launch.NORMQ_STATIC <= dev["pq_max"], (dt, n, k, t)
        assert not _launch.normq_fits(dt, 4008, 4096, **args)
        with pytest.raises(ValueError, match="N=4008 is not a multiple of 32"):
            _launch.normq_launch(dict(T=1, N=4008, K=4096, accumulate=1), dt, **args)
    assert not _launch.normq_fits("q5_1", 4096, 4096, **args)
    monkeypatch.setenv("XINFER_NORMQ", "0")
    assert not _launch.normq_fits("q4_1", 4096, 4096, **args)
    monkeypatch.setenv("XINFER_NORMQ", "yes")
    with pytest.raises(ValueError, match="XINFER_NORMQ"):
        _launch.normq_fits("q4_1", 4096, 4096, **args)


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_normq_k2_splits_k_where_its_16_warps_fit(monkeypatch, device):
    """``normq_launch(k2=True)`` (what the family passes unless XINFER_NORMQ_K2=0, read when the
    kernel loads) runs the ``_k2`` entry (512 threads, N / 32 CTAs, 16 warps' stages and the tokens within
    pq_max less both static arrays) where one token fits (``normq_k2_fits``) and its token tiles are
    no more than the 8-warp entry's (each streams the weight once), else the 8-warp entry (both
    give the same bits: the shaders sum K's halves apart in either); ``normq_split`` the first block
    of the second half; the family's entries and opt-in; an unknown value is an error."""
    dev = DEVICES[device]
    args = dict(sms=dev["sms"], cc=dev["cc"], pq_max=dev["pq_max"])
    fits, k2_at = {}, {}
    for dt in _launch.MVQ_TYPES:
        for n, k in [(4096, 4096), (4096, 14336), (8192, 28672), (256, 768)]:
            if not _launch.normq_fits(dt, n, k, **args) or (dt == "q6_k" and k % 2048):
                continue
            fits[dt, k] = _launch.normq_k2_fits(dt, k, dev["pq_max"])
            stages = _launch.mvq_shared(dt, k, 0, False, norm=False)
            for t in range(1, _launch.PQ_MAX_T + 1):
                c = dict(T=t, N=n, K=k, accumulate=1)
                one = _launch.normq_launch(c, dt, k2=False, **args)
                assert one[1] == (256, 1, 1) and one[3] == "" and one == _launch.normq_launch(c, dt, **args)
                grid, block, shared, entry = _launch.normq_launch(c, dt, k2=True, **args)
                tt = -(-t // grid[1])
                assert grid[0] == n // 32 and tt <= _launch.MVQ_MATMUL_TT, (dt, n, k, t)
                if entry:
                    assert fits[dt, k] and block == (512, 1, 1) and entry == "_k2", (dt, n, k, t)
                    assert grid[1] <= one[0][1], (dt, n, k, t)  # no more token tiles than the 8-warp entry's
                    x = (shared - 2 * stages) // (k + k // 32 * 8)  # the tokens a CTA the bytes hold
                    assert x in (1, 2, 4) and x >= tt and shared == 2 * stages + x * (k + k // 32 * 8), (dt, n, k, t)
                    assert shared + _launch.NORMQ_STATIC + _launch.NORMQ_K2_STATIC <= dev["pq_max"], (dt, n, k, t)
                    k2_at.setdefault((dt, k), []).append(t)
                else:
                    assert (grid, block, shared, entry) == one, (dt, n, k, t)
            if fits[dt, k]:
                assert 1 in k2_at[dt, k], (dt, k)  # one token: the same single tile either way
            cg = _launch.mvq_params(dt, False, norm=False)[2]
            cpt = -(-(k // 256) // cg)
            assert _launch.normq_split(dt, k) == -(-cpt // 2) * cg * 8 and _launch.normq_split(dt, k) % 32 == 0
    if device == "h200":  # the 8B's down (K = 14336): q4_1, q4_k, q8_0 split; q6_k's 16 warps' stages (215 KB) do not fit
        assert fits["q4_1", 14336] and fits["q4_k", 14336] and fits["q8_0", 14336] and not fits["q6_k", 14336]
        assert _launch.normq_split("q4_1", 14336) == 256 and _launch.normq_split("q4_1", 768) == 64  # 7 chunks: 4 + 3; 1: 1 + 0
        print("h200: T where _k2 runs:", {f"{dt} K={k}": v for (dt, k), v in sorted(k2_at.items())})
        # the 8B's o (K = 4096): as many token tiles at every T; its down: two tiles from T = 3 (the tokens a CTA halve)
        assert k2_at["q4_1", 4096] == list(range(1, _launch.PQ_MAX_T + 1)) and k2_at["q4_1", 14336] == [1, 2]
    family = _launch.FAMILIES["qmatmul"]
    for env, entry in [(None, "_k2"), ("", "_k2"), ("0", ""), ("1", "_k2")]:
        if env is None:
            monkeypatch.delenv("XINFER_NORMQ_K2", raising=False)
        else:
            monkeypatch.setenv("XINFER_NORMQ_K2", env)
        fam = family({"dt": "q4_1", "glu": "0", "normq": "1"}, sms=132, stage_max=0, cc=(9, 0))
        assert fam.entries == ("", "_k2") and set(fam.opt_in) == {"", "_k2"}
        assert fam.launch(dict(T=1, N=4096, K=14336, accumulate=1))[3] == entry
    monkeypatch.setenv("XINFER_NORMQ_K2", "yes")
    with pytest.raises(ValueError, match="XINFER_NORMQ_K2"):
        family({"dt": "q4_1", "glu": "0", "normq": "1"}, sms=132, stage_max=0, cc=(9, 0))


def test_the_normq_declarations():
    """qmatmul_normq's xqn: codes, pairs and block sums of squares; N a multiple of 32; the rms
    consumers read the same layout."""
    spec = KERNELS["qmatmul_normq_q4_1"]
    assert [b.name for b in spec.bindings] == ["w", "xq", "y", "norm", "xqn"]
    assert spec.bindings[4].nbytes(dict(T=3, N=4096, K=14336, accumulate=1)) == 3 * 4096 + 3 * 128 * 12
    with pytest.raises(ValueError, match="N=4008 is not a multiple of 32"):
        spec.pack(dict(T=1, N=4008, K=4096, accumulate=1))
    for name in ("qmatmul_rms_q6_k", "qmatmul_rms_swiglu_q4_k"):
        assert KERNELS[name].bindings[1].nbytes(dict(T=2, N=64, K=4096, eps=EPS, accumulate=0)) == 2 * 4096 + 2 * 128 * 12


def test_the_pair_launch_and_rule(monkeypatch):
    """qmatmul_pair: declared for ops/_kernels.py QMATMUL_PAIRS, which ``_launch.PAIR_TYPES`` repeats;
    the launch holds both products' CTAs (the second's at PAIR_R2 rows a warp), the larger shared bytes
    of the smaller tokens a CTA, and two CTAs an SM on the H200 for the 8B Q4_K_M qkv (the q6_k part at
    the matmul kind's 4 rows would take one); ``pair_fits`` only for a declared pair, XINFER_QPAIR=0 off,
    anything else an error."""
    monkeypatch.delenv("XINFER_QPAIR", raising=False)
    assert tuple((x.label, y.label) for x, y in QMATMUL_PAIRS) == _launch.PAIR_TYPES
    for a, b in _launch.PAIR_TYPES:
        for name in (f"qmatmul_pair_{a}_{b}", f"qmatmul_rms_pair_{a}_{b}"):
            assert not KERNELS[name].cpu and KERNELS[name].cuda.family == "qmatmul_pair"
            assert KERNELS[name].check(dict(T=1, N=64, N2=64, K=1024, eps=EPS))  # K % 2048
    sms, cc, pq = H200["sms"], H200["cc"], H200["pq_max"]
    for T in (1, 2, 3, 4, 5, 8):
        (gx, gy, _), block, shared, sfx = _launch.pair_launch(dict(T=T, N=5120, N2=1024, K=4096), "q4_k", "q6_k", sms, cc, pq)
        first = _launch.qmatmul_launch(dict(T=T, N=5120, K=4096, accumulate=0), "q4_k", False, sms, cc, pq)
        assert (gy, block, sfx) == (first[0][1], (256, 1, 1), "") and shared == first[2], T
        assert gx == first[0][0] + _launch._cdiv(_launch._cdiv(1024, _launch.PAIR_R2), 8), T
        assert _launch.mvp_ctas_per_sm(shared, cc) == 2, T
    assert _launch.pair_fits("q4_k", "q6_k", 5120, 1024, 4096, sms, cc, pq)
    assert not _launch.pair_fits("q6_k", "q4_k", 1024, 5120, 4096, sms, cc, pq)
    assert not _launch.pair_fits("q4_1", "q6_k", 5120, 1024, 4096, sms, cc, pq)
    monkeypatch.setenv("XINFER_QPAIR", "0")
    assert not _launch.pair_fits("q4_k", "q6_k", 5120, 1024, 4096, sms, cc, pq)
    monkeypatch.setenv("XINFER_QPAIR", "yes")
    with pytest.raises(ValueError, match="XINFER_QPAIR"):
        _launch.pair_fits("q4_k", "q6_k", 5120, 1024, 4096, sms, cc, pq)


# ---- cuda ---------------------------------------------------------------------------------------
def _planar(raw, T, K):
    """(codes int64 (T, K/32, 32), d (T, K/32), s (T, K/32)) of xq's bytes."""
    codes = raw[:T * K].view(np.int8).astype(np.int64).reshape(T, K // 32, 32)
    ds = raw[T * K:T * K + T * K // 32 * 8].view(F32).reshape(T, K // 32, 2)
    return codes, ds[..., 0], ds[..., 1]


async def _run(dev, steps, out):
    """Dispatch ``steps`` [(kernel, buffers, constants)] in order, download buffer ``out``."""
    ex = dev.executor()
    for name, bufs, consts in steps:
        ex.dispatch(name, bufs, consts)
    rb = ex.download(out)
    await ex.submit_and_wait()
    return rb


@pytest.mark.cuda
@pytest.mark.parametrize("norm_on", [False, True])
async def test_quantizers_equal_the_model(cuda_dev, rng, norm_on):
    """The codes and (d, s) of every block, bit for bit, as ``_pq`` quantizes its tokens (x or
    rmsnorm(x) * norm with its CTA's inv); several CTAs a token (K = 14336: 4), x unaligned once."""
    for T, K, xoff in [(1, 4096, 0), (3, 14336, 0), (8, 768, 1), (5, 256, 0)]:
        x = tokens(rng, T, K)
        norm = (rng.standard_normal(K) * 0.5 + 1).astype(F32)
        h = rmsnorm_h(x, norm, EPS, rmsnorm_inv_cta) if norm_on else x
        q, d, s = quantize_q8_1(h)
        nbytes = T * K + T * K // 32 * 8
        xb = cuda_dev.upload(np.concatenate([np.zeros(xoff, F32), x.reshape(-1)]))
        xv = xb.view(4 * xoff, 4 * T * K) if xoff else xb
        out = cuda_dev.upload(np.full(nbytes, 0xFF, np.uint8))  # codes -1, pairs NaN
        if norm_on:
            step = ("rmsnorm_quantize_q8_1", [xv, cuda_dev.upload(norm), out], dict(T=T, K=K, eps=EPS))
        else:
            step = ("quantize_q8_1", [xv, out], dict(T=T, K=K))
        raw = (await _run(cuda_dev, [step], out)).numpy((nbytes,), np.uint8)
        gq, gd, gs = _planar(raw, T, K)
        what = f"norm={norm_on} T={T} K={K} xoff={xoff}"
        assert np.array_equal(gq, q), what
        assert np.array_equal(gd.view(np.uint32), d.view(np.uint32)), what
        assert np.array_equal(gs.view(np.uint32), s.view(np.uint32)), what


@pytest.mark.cuda
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dt", TYPES)
async def test_qmatmul_equals_pq_and_the_model(cuda_dev, monkeypatch, rng, dt, kind):
    """quantize (rmsnorm_quantize for the fused kinds) then qmatmul_DT (qmatmul_swiglu_DT) equals the
    ``_pq`` entry of the same product bit for bit, and the model; T = 1, 3, 8 (several token tiles of
    the matmul kind's 4), accumulate off and on; token 0 and 7 of T = 8 alone."""
    _force(monkeypatch)
    glu = kind == "rmsnorm_matmul_swiglu"
    for N, K in SHAPES_Q6K if dt == "q6_k" else SHAPES:
        wq, _ = weights(rng, dt, 2 * N if glu else N, K)
        norm = (rng.standard_normal(K) * 0.5 + 1).astype(F32)
        xs = tokens(rng, 8, K)
        wbuf, nbuf = upload_weight(cuda_dev, wq, dt, K), cuda_dev.upload(norm)
        for T in (1, 3, 8):
            x = xs[:T]
            for y0 in [None] + ([] if glu else [rng.standard_normal((T, N)).astype(F32)]):
                what = f"q{kind}_{dt} N={N} K={K} T={T} accumulate={y0 is not None}"
                xq = cuda_dev.upload(np.full(T * K + T * K // 32 * 8, 0xFF, np.uint8))
                y = cuda_dev.upload(y0.copy() if y0 is not None else np.full((T, N), np.nan, F32))
                quant = ("quantize_q8_1", [cuda_dev.upload(x), xq], dict(T=T, K=K)) if kind == "matmul" else \
                    ("rmsnorm_quantize_q8_1", [cuda_dev.upload(x), nbuf, xq], dict(T=T, K=K, eps=EPS))
                prod = (f"qmatmul_swiglu_{dt}", [wbuf, xq, y], dict(T=T, N=N, K=K)) if glu else \
                    (f"qmatmul_{dt}", [wbuf, xq, y], dict(T=T, N=N, K=K, accumulate=int(y0 is not None)))
                got = (await _run(cuda_dev, [quant, prod], y)).numpy((T, N), F32)
                pq = await launch_matrix_kind(cuda_dev, kind, dt, wq, x, norm, N, y0)
                ref = _model(kind, dt, wq, x, norm, N, y0)[0]
                differ = lambda a: int((a.view(np.uint32) != ref.view(np.uint32)).sum())  # noqa: E731
                assert np.array_equal(got.view(np.uint32), pq.view(np.uint32)), \
                    f"{what}: not _pq's bits ({differ(got)} results differ from the model, _pq: {differ(pq)})"
                check_against_model(kind, got, ref, what)
                if T == 8 and y0 is None:
                    for t in (0, 7):
                        alone = await launch_matrix_kind(cuda_dev, kind, dt, wq, x[t:t + 1], norm, N)
                        assert np.array_equal(alone[0].view(np.uint32), got[t].view(np.uint32)), f"{what} token {t}"


def _planar_ss(raw, T, N):
    """``_planar`` of xqn, and its block sums of squares (T, N/32)."""
    q, d, s = _planar(raw, T, N)
    off = T * N + T * N // 32 * 8
    return q, d, s, raw[off:off + T * N // 32 * 4].view(F32).reshape(T, N // 32)


async def _normq_chain(dev, dt, wq, w2q, w3q, x, y0, norm, N, N2, acc=1, y20=None):
    """quantize_q8_1(x), qmatmul_normq (y = y0 + w . x, or with acc=0 y = w . x; its xqn), then
    qmatmul_rms (w2; y2 = y20 + ... where y20 is given) and qmatmul_rms_swiglu (w3) on xqn; outputs
    poisoned first. -> (y, xqn bytes, y2, y3)."""
    T, K = x.shape
    xq = dev.upload(np.full(T * K + T * K // 32 * 8, 0xFF, np.uint8))
    nbytes = T * N + T * N // 32 * 12
    y, xqn = dev.upload(y0.copy() if acc else np.full((T, N), np.nan, F32)), dev.upload(np.full(nbytes, 0xFF, np.uint8))
    y2 = dev.upload(y20.copy() if y20 is not None else np.full((T, N2), np.nan, F32))
    y3 = dev.upload(np.full((T, N2), np.nan, F32))
    ex = dev.executor()
    ex.dispatch("quantize_q8_1", [dev.upload(x), xq], dict(T=T, K=K))
    ex.dispatch(f"qmatmul_normq_{dt}", [upload_weight(dev, wq, dt, K), xq, y, dev.upload(norm), xqn],
                dict(T=T, N=N, K=K, accumulate=acc))
    ex.dispatch(f"qmatmul_rms_{dt}", [upload_weight(dev, w2q, dt, N), xqn, y2],
                dict(T=T, N=N2, K=N, accumulate=int(y20 is not None), eps=EPS))
    ex.dispatch(f"qmatmul_rms_swiglu_{dt}", [upload_weight(dev, w3q, dt, N), xqn, y3], dict(T=T, N=N2, K=N, eps=EPS))
    rb = [ex.download(b) for b in (y, xqn, y2, y3)]
    await ex.submit_and_wait()
    return (rb[0].numpy((T, N), F32), rb[1].numpy((nbytes,), np.uint8), rb[2].numpy((T, N2), F32),
            rb[3].numpy((T, N2), F32))


@pytest.mark.cuda
@pytest.mark.parametrize("k2", ["0", "1"])
@pytest.mark.parametrize("dt", TYPES)
async def test_normq_and_its_readers_equal_the_model(cuda_dev, monkeypatch, rng, dt, k2):
    """A residual product that quantizes the next product's tokens (qmatmul_normq_DT), then the two
    kinds that read them (qmatmul_rms_DT, qmatmul_rms_swiglu_DT), T = 1, 2, 3, 5, 8 (token tiles of
    1, 2, 4 and the last one short), accumulate on and off (T = 3: normq's off, qmatmul_rms's on): y as
    the split model (below) bit for bit; xqn's codes, pairs and block sums of squares as ``normq_tokens`` of that y;
    the readers as ``rms_matmul`` / ``rms_swiglu`` (ulps of the device's expf) with ``normq_inv`` of
    those sums; the reader's distance from float64 rmsnorm(y) * norm . w2 printed and bounded
    (``error_bound`` plus the roundings of inv and of the scaling); token 0 and 7 of T = 8 alone
    through the chain give the same bits. y's model is ``mvq_matmul(split=normq_split)`` with either
    entry (K's halves summed apart, then added: other last bits than the unsplit model's, checked at
    K = 14336; at K = 768 the second half is empty): XINFER_NORMQ_K2=0 the 8-warp entry at every T, the
    default ``_k2`` where ``normq_launch`` picks it (T = 8 then mixes them with its rows alone)."""
    _force(monkeypatch)
    monkeypatch.setenv("XINFER_NORMQ_K2", k2)
    be = cuda_dev.backend
    shapes = [(4096, 4096), (2048, 14336)] + ([] if dt == "q6_k" else [(256, 768)])
    for N, K in shapes:
        N2 = 96
        wq, _ = weights(rng, dt, N, K)
        w2q, w2 = weights(rng, dt, N2, N)
        w3q, _ = weights(rng, dt, 2 * N2, N)
        norm = (rng.standard_normal(N) * 0.5 + 1).astype(F32)
        xs, y0s = tokens(rng, 8, K), tokens(rng, 8, N)
        y20s = tokens(rng, 8, N2)
        for T in (1, 2, 3, 5, 8):
            acc, y20 = (0, y20s[:T]) if T == 3 else (1, None)
            what = f"normq_{dt} N={N} K={K} T={T} accumulate {acc}, {int(y20 is not None)}"
            y, raw, y2, y3 = await _normq_chain(cuda_dev, dt, wq, w2q, w3q, xs[:T], y0s[:T], norm, N, N2, acc, y20)
            entry = _launch.normq_launch(dict(T=T, N=N, K=K, accumulate=acc), dt, be.multiprocessors,
                                         be.compute_capability, be.pq_stage_max, k2=k2 == "1")[3]
            assert k2 == "1" or entry == "", what
            if k2 == "1" and T == 1:  # one token: _k2 wherever it fits
                assert entry == ("_k2" if _launch.normq_k2_fits(dt, K, be.pq_stage_max) else ""), what
            model = mvq_matmul(wq, dt, xs[:T], y0s[:T] if acc else None, split=_launch.normq_split(dt, K))
            check_against_model("matmul", y, model, what + f": y ({entry or 'one warp a tile'})")
            if K == 14336:  # the split's bits, not the unsplit sums'
                assert not np.array_equal(model, mvq_matmul(wq, dt, xs[:T], y0s[:T] if acc else None)), what
            q, d, s, ss = normq_tokens(y, norm)
            gq, gd, gs, gss = _planar_ss(raw, T, N)
            assert np.array_equal(gq, q), f"{what}: codes"
            for name, g, m in (("d", gd, d), ("s", gs, s), ("ss", gss, ss)):
                assert np.array_equal(g.view(np.uint32), m.view(np.uint32)), f"{what}: {name}"
            z, inv = (y * norm).astype(F32), normq_inv(ss, N, EPS)
            check_against_model("matmul", y2, rms_matmul(w2q, dt, z, inv, y20), what + ": qmatmul_rms")
            check_against_model("rmsnorm_matmul_swiglu", y3, rms_swiglu(w3q, dt, z, inv, N2), what + ": qmatmul_rms_swiglu")
            y64 = y.astype(np.float64)
            h64 = y64 / np.sqrt((y64 * y64).mean(1, keepdims=True) + EPS) * norm
            ref = h64 @ w2.T + (0 if y20 is None else y20.astype(np.float64))
            # error_bound, plus inv's roundings (the sums of squares, the mean, sqrt and reciprocal: within
            # (N / 1024 + 16) ulps) and the scaling's and accumulation's (2 more), on the products' magnitude
            bound = error_bound(w2q, dt, h64) + (np.abs(h64) @ np.abs(w2).T) * (N / 1024 + 18) * 2.0 ** -23
            if y20 is not None:
                bound = bound + np.abs(ref) * 2.0 ** -23
            dist = np.abs(y2 - ref)
            print(f"{what}: qmatmul_rms max |y - float64| {dist.max():.3g}, max / bound {(dist / bound).max():.3f}, "
                  f"relative to max |y| {dist.max() / np.abs(ref).max():.2e}")
            assert (dist <= bound).all(), what
            if T == 8:
                for t in (0, 7):
                    alone = await _normq_chain(cuda_dev, dt, wq, w2q, w3q, xs[t:t + 1], y0s[t:t + 1], norm, N, N2)
                    for name, a, b in zip(("y", "xqn", "y2", "y3"), alone,
                                          (y[t:t + 1], None, y2[t:t + 1], y3[t:t + 1])):
                        if b is not None:
                            assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), f"{what}: token {t} alone, {name}"


def _planar_bytes(q, d, s, ss=None):
    """The planar q8_1 bytes of ``quantize_q8_1``'s (q, d, s): codes int8 (T, K), (d, s) f32 pairs (T, K/32),
    then the block sums of squares ss f32 (T, K/32) where given (``qmatmul_normq_DT``'s xqn)."""
    parts = [q.astype(np.int8).reshape(-1).view(np.uint8), np.stack([d, s], -1).astype(F32).reshape(-1).view(np.uint8)]
    if ss is not None:
        parts.append(np.asarray(ss, F32).reshape(-1).view(np.uint8))
    return np.concatenate(parts)


@pytest.mark.cuda
@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("a,b", [(x.label, y.label) for x, y in QMATMUL_PAIRS])
async def test_a_pair_launch_equals_its_two_launches_and_the_model(cuda_dev, monkeypatch, rng, a, b, rms):
    """qmatmul_pair_A_B (qmatmul_rms_pair_A_B on normq's tokens with block sums of squares): y (T, N +
    N2) poisoned first, its columns [0, N) bit for bit the qmatmul_A (qmatmul_rms_A) launch's and
    [N, N + N2) the B launch's on the same tokens, and the model (``mvq_matmul`` / ``rms_matmul``);
    T = 1, 2, 3, 5, 8 (token tiles of 1, 2, 4, the last short); the 8B Q4_K_M qkv (5120 + 1024, 4096)
    and a small shape; the distance from float64 printed and bounded (``error_bound``) without rms."""
    _force(monkeypatch)
    for N, N2, K in [(5120, 1024, 4096), (512, 256, 2048)]:
        (wa, fa), (wb, fb) = weights(rng, a, N, K), weights(rng, b, N2, K)
        bufs = upload_weight(cuda_dev, wa, a, K), upload_weight(cuda_dev, wb, b, K)
        norm = (rng.standard_normal(K) * 0.5 + 1).astype(F32)
        pre, eps = ("qmatmul_rms_", dict(eps=EPS)) if rms else ("qmatmul_", {})
        for T in (1, 2, 3, 5, 8):
            x = tokens(rng, T, K)
            what = f"{pre}pair_{a}_{b} N={N} N2={N2} K={K} T={T}"
            if rms:
                q, d, s, ss = normq_tokens(x, norm)
                z, inv = (x * norm).astype(F32), normq_inv(ss, K, EPS)
                models = rms_matmul(wa, a, z, inv), rms_matmul(wb, b, z, inv)
                xq = cuda_dev.upload(_planar_bytes(q, d, s, ss))
            else:
                models = mvq_matmul(wa, a, x), mvq_matmul(wb, b, x)
                xq = cuda_dev.upload(_planar_bytes(*quantize_q8_1(x)))
            y, ya, yb = (cuda_dev.upload(np.full((T, n), np.nan, F32)) for n in (N + N2, N, N2))
            ex = cuda_dev.executor()
            ex.dispatch(f"{pre}pair_{a}_{b}", [bufs[0], bufs[1], xq, y], dict(T=T, N=N, N2=N2, K=K, **eps))
            ex.dispatch(f"{pre}{a}", [bufs[0], xq, ya], dict(T=T, N=N, K=K, accumulate=0, **eps))
            ex.dispatch(f"{pre}{b}", [bufs[1], xq, yb], dict(T=T, N=N2, K=K, accumulate=0, **eps))
            rbs = [ex.download(v) for v in (y, ya, yb)]
            await ex.submit_and_wait()
            got, ga, gb = (r.numpy((T, n), F32) for r, n in zip(rbs, (N + N2, N, N2)))
            for cols, single, ref, part in ((got[:, :N], ga, models[0], a), (got[:, N:], gb, models[1], b)):
                assert np.array_equal(cols.view(np.uint32), single.view(np.uint32)), f"{what}: not {pre}{part}'s bits"
                check_against_model("matmul", cols, ref, f"{what}: {part}")
            if not rms:
                x64 = x.astype(np.float64)
                for cols, wq, w64, part in ((got[:, :N], wa, fa, a), (got[:, N:], wb, fb, b)):
                    dist, bound = np.abs(cols - x64 @ w64.T), error_bound(wq, part, x64)
                    print(f"{what}: {part} max |y - float64| {dist.max():.3g}, max / bound {(dist / bound).max():.3f}")
                    assert (dist <= bound).all(), f"{what}: {part} beyond the bound"


@pytest.mark.cuda
@pytest.mark.parametrize("kv", ["f32", "f16"])
@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("dt", [d.label for d in QMATMUL_DTYPES] + [f"{a.label}+{b.label}" for a, b in QMATMUL_PAIRS])
async def test_the_rope_form_equals_the_product_then_rope_kv_store(cuda_dev, monkeypatch, rng, dt, rms, kv):
    """qmatmul[_rms]_rope_DT and qmatmul[_rms]_rope_pair_A_B (the qkv launch doing rope_kv_store's work):
    y, the k cache and the v cache bit for bit what the product (qmatmul[_rms]_DT / the pair) then
    rope_kv_store[_ff][_f16] leave -- every buffer poisoned first, the caches with old rows to keep --
    with and without freq factors (ones: the no-op the model binds), T = 1, 3, 8, a token at pos -1
    (not rotated) and one whose row is past the cache (not stored); heads 8 / 2 of 128, K 2048; a
    pair split as the 8B Q4_K_M qkv (q and k, then v) and after the q heads (k rotated and stored
    by the second product)."""
    _force(monkeypatch)
    nh, nkv, hd, K, ctx = 8, 2, 128, 2048, 40
    a, b = dt.split("+") if "+" in dt else (dt, None)
    width = (nh + 2 * nkv) * hd
    for N in ([width] if b is None else [(nh + nkv) * hd, nh * hd]):
        await _rope_form_case(cuda_dev, rng, a, b, N, width - N, rms, kv, nh, nkv, hd, K, ctx)


async def _rope_form_case(cuda_dev, rng, a, b, N, N2, rms, kv, nh, nkv, hd, K, ctx):
    """One split of ``test_the_rope_form_equals_the_product_then_rope_kv_store``."""
    width = N + N2
    wa = weights(rng, a, N, K)[0]
    wb = weights(rng, b, N2, K)[0] if b else None
    bufs = [upload_weight(cuda_dev, wa, a, K)] + ([upload_weight(cuda_dev, wb, b, K)] if b else [])
    norm = (rng.standard_normal(K) * 0.5 + 1).astype(F32)
    kvt = F32 if kv == "f32" else np.float16
    sfx = "" if kv == "f32" else "_f16"
    pre, eps = ("qmatmul_rms_", dict(eps=EPS)) if rms else ("qmatmul_", {})
    name = f"{pre}rope_{a}" if b is None else f"{pre}rope_pair_{a}_{b}"
    plain = f"{pre}{a}" if b is None else f"{pre}pair_{a}_{b}"
    for T in (1, 3, 8):
        x = tokens(rng, T, K)
        if rms:
            xq = cuda_dev.upload(_planar_bytes(*normq_tokens(x, norm)))
        else:
            xq = cuda_dev.upload(_planar_bytes(*quantize_q8_1(x)))
        pos = rng.integers(0, 5000, T).astype(np.int32)
        row = rng.permutation(ctx)[:T].astype(np.int32)
        if T > 1:
            pos[1], row[-1] = -1, ctx + 3  # not rotated; not stored
        pb, rb = cuda_dev.upload(pos), cuda_dev.upload(row)
        old = (rng.standard_normal((2, ctx, nkv * hd))).astype(kvt)
        for ff in (np.ones(hd // 2, F32), (rng.uniform(1, 40, hd // 2)).astype(F32)):
            ones = bool((ff == 1).all())
            ffb = cuda_dev.upload(ff)
            rope = dict(n_head=nh, n_kv=nkv, head_dim=hd, ctx=ctx, theta=500000.0)
            outs = []
            for fused in (False, True):
                y = cuda_dev.upload(np.full((T, width), np.nan, F32))
                kc, vc = cuda_dev.upload(old[0]), cuda_dev.upload(old[1])
                ex = cuda_dev.executor()
                if fused:
                    ex.dispatch(name, bufs + [xq, y, pb, rb, kc, vc, ffb],
                                dict(T=T, N=N, K=K, **({} if b is None else dict(N2=N2)), **eps, **rope,
                                     kv16=int(kv == "f16")))
                else:
                    ex.dispatch(plain, bufs + [xq, y], dict(T=T, N=N, K=K, **eps, **(
                        dict(accumulate=0) if b is None else dict(N2=N2))))
                    ex.dispatch(("rope_kv_store" if ones else "rope_kv_store_ff") + sfx,
                                [y, pb, rb, kc, vc] + ([] if ones else [ffb]), dict(T=T, row_stride=width, **rope))
                r = [ex.download(v) for v in (y, kc, vc)]
                await ex.submit_and_wait()
                outs.append([r[0].numpy((T, width), F32)] + [v.numpy((ctx, nkv * hd), kvt) for v in r[1:]])
            what = f"{name} N={N} N2={N2} T={T} ff={'ones' if ones else 'file'}"
            for got, ref, part in zip(outs[1], outs[0], ("y", "k cache", "v cache")):
                assert not np.isnan(ref).any(), f"{what}: the two launches left NaN in {part}"
                assert np.array_equal(got.view(np.uint8), ref.view(np.uint8)), f"{what}: {part} differs"
            stored = row[(row >= 0) & (row < ctx)]
            kept = np.setdiff1d(np.arange(ctx), stored)
            assert np.array_equal(outs[1][1][kept].view(np.uint8), old[0][kept].view(np.uint8)), f"{what}: old k rows"
            assert not np.array_equal(outs[1][1][stored], old[0][stored]), f"{what}: k not stored"


@pytest.mark.cuda
@pytest.mark.parametrize("kv", ["f32", "f16"])
@pytest.mark.parametrize("nh,nkv,hd", [(9, 3, 64), (32, 8, 128), (4, 2, 256)])
async def test_attention_quantize_equals_attention_then_quantize_and_the_model(cuda_dev, rng, kv, nh, nkv, hd):
    """attention_quantize[_f16] and attention_batched_quantize[_f16]: out bit for bit as attention's,
    and xq byte for byte as quantize_q8_1 on that out and as the numpy model of it; rows of one
    segment (in registers), of several (split-K, merged by the last block) and a zero row (pos -1:
    codes 0, d = s = 0); T = 6 and a token alone; xq poisoned first."""
    from _kernel_refs import att_workspace

    ctx, sfx = 2100, "" if kv == "f32" else "_f16"
    cache = lambda: (rng.standard_normal((ctx, nkv, hd)) * 0.5).astype(F32 if kv == "f32" else np.float16)  # noqa: E731
    k, v = cache(), cache()
    kb, vb = cuda_dev.upload(k), cuda_dev.upload(v)
    for pos in (np.array([2099, 513, 100, -1, 1500, 0], np.int32), np.array([777], np.int32)):
        T, Q = len(pos), nh * hd
        q = (rng.standard_normal((T, nh, hd)) * 2).astype(F32)
        nq = T * Q + T * Q // 32 * 8
        consts = dict(T=T, n_head=nh, n_kv=nkv, head_dim=hd, q_stride=Q, scale=float(1 / np.sqrt(hd)), window=0)
        first, last = np.zeros(T, np.int32), pos.copy()
        first[pos < 0] = -1
        for batched in (False, True):
            name = ("attention_batched" if batched else "attention") + "{}" + sfx
            lead = [cuda_dev.upload(q), kb, vb] + ([cuda_dev.upload(first), cuda_dev.upload(last)] if batched
                                                   else [cuda_dev.upload(pos)])
            c = dict(consts, rows=ctx) if batched else dict(consts, ctx=ctx)
            outs = []
            for fused in (False, True):
                out = cuda_dev.upload(np.full((T, nh, hd), np.nan, F32))
                ws = [cuda_dev.upload(a) for a in att_workspace(T, nh, hd)]
                xq = cuda_dev.upload(np.full(nq, 0xFF, np.uint8))
                ex = cuda_dev.executor()
                if fused:
                    ex.dispatch(name.format("_quantize"), lead + [out] + ws + [xq], c)
                else:
                    ex.dispatch(name.format(""), lead + [out] + ws, c)
                    ex.dispatch("quantize_q8_1", [out, xq], dict(T=T, K=Q))
                ro, rq = ex.download(out), ex.download(xq)
                await ex.submit_and_wait()
                outs.append((ro.numpy((T, Q), F32), rq.numpy((nq,), np.uint8)))
            what = f"{name.format('_quantize')} heads {nh}/{nkv} x {hd} T={T}"
            (ref_o, ref_q), (got_o, got_q) = outs
            assert np.array_equal(got_o.view(np.uint32), ref_o.view(np.uint32)), f"{what}: out"
            assert np.array_equal(got_q, ref_q), f"{what}: xq differs from quantize_q8_1's"
            mq, md, ms = quantize_q8_1(got_o)
            gq, gd, gs = _planar(got_q, T, Q)
            assert np.array_equal(gq, mq) and np.array_equal(gd.view(np.uint32), md.view(np.uint32)) and \
                np.array_equal(gs.view(np.uint32), ms.view(np.uint32)), f"{what}: xq is not the model's"
            if T > 1:
                assert not got_o[3].any() and not gq[3].any() and not gd[3].any(), f"{what}: the zero row"


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["q4_1", "q4_k_m"])
async def test_a_models_logits_are_the_same_bits_either_way(cuda_dev, monkeypatch, tmp_path, request, dtype):
    """A 2-layer model of the 8B shape's widths (its products over PQ_MIN_BYTES: ``_pq`` at T <= 8),
    teacher-forced 12 tokens 1 and 4 a step: with the tokens quantized once (XINFER_NORMQ=0: a
    quantizer launch before each product) and with XINFER_PREQUANT=0 (``_pq`` quantizes in every
    CTA), the same logits bit for bit; with the residual products quantizing the next product's
    tokens (the default: qmatmul_normq, the rmsnorm after the sums) the same logits 1 and 4 tokens a
    step, bit for bit, and as close to the float64 loops of tests/test_reference.py as the quantizer
    launch's (within test_8b_widths' BOUND, and within 1.5x its distance plus 0.01: both are roundings
    of the same activations, z's codes instead of h's; on the H200 the two paths differed by 0.013
    (q4_1) and 0.0045 (Q4_K_M) of the largest logit, the int8 rounding itself being 0.02-0.04); the
    first runs load the qmatmul kernels, the default's the normq ones and attention_quantize
    (XINFER_QATT, on throughout: the same bits as its quantizer launch) and the qkv launch's rope
    form (XINFER_QROPE), whose logits equal those of rope_kv_store's launch (XINFER_QROPE=0) bit for bit.
    XINFER_NORMQ_K2=0 (the residual products' 8-warp entry at every T, not ``_k2`` where it is faster):
    the default's bits (both sum K's halves apart)."""
    from xinfer_async import llm
    from xinfer_async.llm._synthetic import SHAPES as MODEL_SHAPES
    from xinfer_async.llm._synthetic import write_synthetic_gguf

    cfg = dataclasses.replace(MODEL_SHAPES["llama-3.1-8b"], n_layer=2, vocab_size=4096, context_length=128)
    path = write_synthetic_gguf(tmp_path / "m.gguf", cfg, dtype, seed=7, progress=False)
    ids = np.random.default_rng(3).integers(0, cfg.vocab_size, size=12).tolist()
    got = {}
    k2_dev = xinfer_async.open_device("cuda")
    request.addfinalizer(k2_dev.close)
    for on, normq, qrope, k2 in (("1", "0", "1", ""), ("0", "0", "1", ""), ("1", "1", "1", ""), ("1", "1", "0", ""),
                                 ("1", "1", "1", "0")):
        monkeypatch.setenv("XINFER_PREQUANT", on)
        monkeypatch.setenv("XINFER_NORMQ", normq)
        monkeypatch.setenv("XINFER_QROPE", qrope)
        monkeypatch.setenv("XINFER_NORMQ_K2", k2)
        # XINFER_NORMQ_K2 is read when a kernel loads, once a device: the K2=0 run on a device of its own
        dev = cuda_dev if k2 == "" else k2_dev
        for chunk in (4, 1):
            model = await llm.load(path, device=dev, slots=1, ctx=64, chunk=chunk, batching=False)
            try:
                got[on + normq + ("" if qrope == "1" else "r0") + ("k2off" if k2 == "0" else ""), chunk] = await model.logits(ids)
            finally:
                await model.aclose()
        if on == "1":
            assert any(n.startswith("qmatmul_") for n in cuda_dev._kernels), "the path did not run"
        if normq == "1" and qrope == "1":
            for fam in ("qmatmul_normq_", "qmatmul_rms_swiglu_", "qmatmul_rms_rope_", "attention_quantize"):
                assert any(n.startswith(fam) for n in cuda_dev._kernels), f"{fam} did not run"
    for chunk in (4, 1):
        a, b = got["10", chunk], got["00", chunk]
        assert not np.isnan(a).any() and np.array_equal(a.view(np.uint32), b.view(np.uint32)), f"{dtype} chunk {chunk}"
    assert np.array_equal(got["10", 4].view(np.uint32), got["10", 1].view(np.uint32))
    for chunk in (4, 1):  # the qkv launch's rope form (XINFER_QROPE) gives rope_kv_store's bits
        a, b = got["11", chunk], got["11r0", chunk]
        assert not np.isnan(a).any() and np.array_equal(a.view(np.uint32), b.view(np.uint32)), f"{dtype} qrope {chunk}"
    n4, n1, ref = got["11", 4], got["11", 1], got["10", 1]
    assert not np.isnan(n4).any() and np.array_equal(n4.view(np.uint32), n1.view(np.uint32)), f"{dtype} normq chunk"
    f64 = _naive_forward(load_gguf(path), np.asarray(ids))
    scale = np.abs(f64).max()
    d_nq, d_q = (np.abs(v.astype(np.float64) - f64).max() / scale for v in (n1, ref))
    rel = np.abs(n1 - ref).max() / np.abs(ref).max()
    report = (f"{dtype}: max |logits - float64| / max |float64|: normq {d_nq:.3g}, a quantizer launch {d_q:.3g}; "
              f"between them {rel:.3g}, top-1 equal at {(n1.argmax(-1) == ref.argmax(-1)).mean():.0%}")
    print(report)
    assert rel > 0, "normq gave the quantizer launch's bits: did it run?"
    assert d_nq <= BOUND and d_nq <= 1.5 * d_q + 0.01, report
    for chunk in (4, 1):  # the 8-warp entry alone (XINFER_NORMQ_K2=0): the default's bits
        a = got["11k2off", chunk]
        assert np.array_equal(a.view(np.uint32), n1.view(np.uint32)), f"{dtype} XINFER_NORMQ_K2=0 chunk {chunk}"


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["q4_1", "q4_k_m"])
async def test_batched_requests_are_the_same_bits_with_the_rope_form(cuda_dev, monkeypatch, tmp_path, dtype):
    """The batched forward's qkv launches in their rope form (XINFER_QROPE: pos, the sequences' rows, the
    batched caches) against rope_kv_store's launch (XINFER_QROPE=0): three concurrent greedy requests on a
    2-layer model of the 8B shape's widths, batched decode steps of 3 rows, each token's log-probabilities
    (float64 of the step's logits on the host, top 5) equal bit for bit, and the rope form ran."""
    from xinfer_async import llm
    from xinfer_async.llm._synthetic import SHAPES as MODEL_SHAPES
    from xinfer_async.llm._synthetic import write_synthetic_gguf

    cfg = dataclasses.replace(MODEL_SHAPES["llama-3.1-8b"], n_layer=2, vocab_size=4096, context_length=128)
    path = write_synthetic_gguf(tmp_path / "m.gguf", cfg, dtype, seed=5, progress=False)
    rng = np.random.default_rng(9)
    prompts = [rng.integers(0, cfg.vocab_size, size=n).tolist() for n in (5, 9, 3)]
    got = {}
    for qrope in ("1", "0"):
        monkeypatch.setenv("XINFER_QROPE", qrope)
        model = await llm.load(path, device=cuda_dev, slots=3, ctx=64, chunk=4, batching=True)
        try:
            results = [None] * len(prompts)

            async def one(i):
                results[i] = await model.complete(prompts[i], max_tokens=6, ignore_eos=True, logprobs=5)

            async with trio.open_nursery() as nursery:
                for i in range(len(prompts)):
                    nursery.start_soon(one, i)
            got[qrope] = [[(e.token_id, e.logprob, e.top) for e in r.logprobs] for r in results]
        finally:
            await model.aclose()
        if qrope == "1":
            assert any("_rope_" in n for n in cuda_dev._kernels), "the rope form did not run"
    assert got["1"] == got["0"], f"{dtype}: the batched requests differ with the rope form"


@pytest.mark.parametrize("dtype", ["q4_1", "q4_k_m"])
@pytest.mark.parametrize("normq,qatt,pair,qrope", [(True, True, True, True), (True, False, False, True),
                                                   (False, True, True, False), (False, False, False, True),
                                                   (True, True, True, False)])
def test_the_model_wiring_of_normq(monkeypatch, tmp_path, dtype, normq, qatt, pair, qrope):
    """``forward``'s dispatches (cpu, no kernel run) with the cuda decisions forced -- every product on
    1..8 tokens takes quantized tokens, ``normq_fits`` as given -- for a 3-block model, every plan
    (decode, prefill, score and the batched ones): each qmatmul_rms* reads xqn as the last qmatmul_normq
    left it, with nothing writing x in between; that normq's norm is the next product's (the block's
    ffn_norm after o, the next block's attn_norm after down: not after the last block's down); each
    qmatmul (plain or normq) reads xq after a quantizer (or attention_quantize, with XINFER_QATT) and
    after its input's last write; with normq off, no normq; with XINFER_QATT=0, no attention_quantize;
    with ``pair_fits`` (Q4_K_M's blocks of a Q6_K attn_v: two qkv parts of two types), one
    qmatmul[_rms]_pair launch for each such block's qkv, its tokens as above, into qkv itself; with
    XINFER_QROPE (``_rope_blocks``), each block's qkv launch of one type or a pair in its rope form
    (pos, the destination rows, the block's caches) and no rope_kv_store after it, where a block of
    two types without the pair keeps its rope_kv_store."""
    from xinfer_async.llm import _llama
    from xinfer_async.llm._gguf import load_gguf
    from xinfer_async.llm._synthetic import SHAPES as MODEL_SHAPES
    from xinfer_async.llm._synthetic import write_synthetic_gguf
    from xinfer_async.model import _session

    import xinfer_async

    cfg = dataclasses.replace(MODEL_SHAPES["llama-3.2-1b"], dim=256, n_layer=3, n_head=4, n_kv_head=2, head_dim=64,
                              ffn_dim=512, vocab_size=512, context_length=64)
    g = load_gguf(write_synthetic_gguf(tmp_path / "m.gguf", cfg, dtype, seed=1, progress=False), check_tokenizer=False)
    types = {d.label for d in QMATMUL_DTYPES}
    monkeypatch.setenv("XINFER_QATT", "1" if qatt else "0")
    monkeypatch.setenv("XINFER_QROPE", "1" if qrope else "0")
    with xinfer_async.open_device("cpu") as dev:
        be = type(dev.backend)
        monkeypatch.setattr(be, "quantized_activations",
                            lambda self, kind, dt, rows, n, k: rows <= 8 and dt.replace("_r8", "") in types)
        monkeypatch.setattr(be, "normq_fits", lambda self, dt, rows, n, k: normq)
        monkeypatch.setattr(be, "pair_fits", lambda self, dt, dt2, n, n2, k: pair)
        kernel = _session.ModelSession.kernel

        def lenient(self, name, *a, **kw):  # the cuda-only kernels: not on cpu, not needed to trace
            try:
                return kernel(self, name, *a, **kw)
            except Exception:
                return None
        monkeypatch.setattr(_session.ModelSession, "kernel", lenient)
        b = _llama.LlamaBuilder(g, dev, 64, 4, batch_seqs=2, slots=1, gemm_min_t=None)
        monkeypatch.setattr(_llama.LlamaBuilder, "_dispatch",
                            lambda self, name, binds, consts: (name, [x[0] if isinstance(x, tuple) else x for x in binds],
                                                              consts))
        b.definition = type("Frag", (), {"fragment": lambda self, cmds, ins, outs: cmds})()
        want_norms = []
        for i, blk in enumerate(b.blocks):
            want_norms += [blk.ffn_norm] + ([b.blocks[i + 1].attn_norm] if i + 1 < len(b.blocks) else [])
        plans = [(T, a, False) for T in b.plan_sizes for a in (False, True)] + \
                [(T, True, True) for T in b.batch_sizes if T in b.plan_sizes]
        for T, all_logits, batched in plans:
            L = b._layouts[T]
            last = {}  # buffer id -> step of its last write
            normqs, xqn_writer, x_last, readers, att_q, pairs, ropes, stores = [], None, -1, 0, 0, 0, [], 0
            for step, c in enumerate(b.forward(T, all_logits, batched=batched)):
                if not isinstance(c, tuple):
                    continue
                name, binds, consts = c
                what = f"{dtype} T={T} batched={batched} step {step} {name}"
                xi = 2 if "_pair_" in name else 1  # the tokens' binding
                if "_pair_" in name:
                    pairs += 1
                    assert binds[3] is L["qkv"], what
                if name.startswith("qmatmul_rms"):
                    readers += 1
                    assert binds[xi] is L["xqn"] and xqn_writer is not None and x_last == xqn_writer, what
                elif name.startswith("qmatmul_"):
                    q = last.get(id(binds[xi]))
                    assert binds[xi] is L["xq"] and q is not None and \
                        q[1].startswith(("quantize_q8_1", "rmsnorm_quantize", "attention")), what
                    if q[2] is not None:
                        assert last.get(id(q[2]), (-1,))[0] < q[0], f"{what}: its input changed after the quantizer"
                    if q[1].startswith("attention"):
                        assert any(binds[0] is blk.wo[0] for blk in b.blocks), f"{what}: not an o product"
                if name.startswith(("quantize_q8_1", "rmsnorm_quantize")):
                    last[id(binds[-1])] = (step, name, binds[0])
                if "_quantize" in name and name.startswith("attention"):
                    att_q += 1
                    last[id(binds[-1])] = (step, name, None)
                if name.startswith("qmatmul_normq"):
                    normqs.append(binds[3])
                    xqn_writer = step
                rope = "_rope_" in name
                if rope:  # y, then pos, the destination rows, the caches of the block, the freq factors
                    p, dst, kc, vc, ff = binds[xi + 2:xi + 7]
                    blk = next(k for k in b.blocks if binds[0] is k.wqkv[0].wd[0])
                    assert binds[xi + 1] is L["qkv"] and p is L["pos"], what
                    assert (dst, kc, vc) == ((L["row"], blk.bk_cache, blk.bv_cache) if batched else
                                             (L["pos"], blk.k_cache, blk.v_cache)), what
                    assert ff is b._rope_ff and ff is not None, what
                    assert consts["ctx"] == (b.batch_seqs * b.ctx if batched else b.ctx), what
                    assert consts["theta"] == blk.theta and consts["kv16"] == 0, what
                    assert (consts["n_head"], consts["n_kv"], consts["head_dim"]) == (
                        cfg.n_head, cfg.n_kv_head, cfg.head_dim), what
                    ropes.append(step)
                stores += name.startswith("rope_kv_store")
                out = binds[xi + 1] if rope else binds[2] if name.startswith("qmatmul_normq") else binds[-1]
                last[id(out)] = (step, name, None)
                if out is L["x"]:
                    x_last = step
            if T <= 8 and normq:
                assert len(normqs) == len(want_norms) and all(a is w for a, w in zip(normqs, want_norms)), (T, batched)
                assert readers >= len(want_norms), (T, batched)
            else:
                assert not normqs and not readers, (T, batched)
            assert att_q == (len(b.blocks) if T <= 8 and qatt else 0), (T, batched, att_q)
            two = sum(len(blk.wqkv) == 2 for blk in b.blocks)
            assert pairs == (two if T <= 8 and pair else 0), (T, batched, pairs, two)
            fused = len(b.blocks) - (0 if pair else two) if T <= 8 and qrope else 0
            assert len(ropes) == fused and stores == len(b.blocks) - fused, (T, batched, len(ropes), stores)
            if dtype == "q4_k_m":
                assert two > 0, "the mix has no block of two qkv types: the pair is not exercised"
