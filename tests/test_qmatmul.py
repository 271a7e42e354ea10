"""Tokens quantized once, then the integer decode kernel on them (cuda only): ``quantize_q8_1`` and
``rmsnorm_quantize_q8_1`` (the planar q8_1 layout), ``qmatmul_DT`` and ``qmatmul_swiglu_DT``
(shaders/xi_mvq.cuh, PRE), and the rule that sends a model's product there
(``_launch.quantized_activations``, ``Backend.quantized_activations``).

On cpu: the rule against ``_pq``'s own (``matmul_launch``), its knob, the launch of the family and the
declarations' checks. On cuda, fresh random inputs, outputs poisoned first: the quantizers against the
numpy model (tests/_mmq_model.py) bit for bit; quantize + qmatmul against the ``_pq`` entry of the same
product bit for bit and against the model (which bounds the distance from float64,
tests/test_mvq_kernels.py); and a model's logits the same bits with the path on and off."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from _kernel_refs import launch_matrix_kind
from _mmq_model import check_against_model, quantize_q8_1, rmsnorm_h, rmsnorm_inv_cta
from test_mvq_kernels import EPS, KINDS, SHAPES, SHAPES_Q6K, TYPES, _force, _model, tokens, weights

from xinfer_async.backends.cuda import _launch
from xinfer_async.ops._kernels import KERNELS, QMATMUL_DTYPES

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
        wbuf, nbuf = cuda_dev.upload(wq), cuda_dev.upload(norm)
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


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["q4_1", "q4_k_m"])
async def test_a_models_logits_are_the_same_bits_either_way(cuda_dev, monkeypatch, tmp_path, dtype):
    """A 2-layer model of the 8B shape's widths (its products over PQ_MIN_BYTES: ``_pq`` at T <= 8),
    teacher-forced 12 tokens 1 and 4 a step: with the tokens quantized once (the default) and with
    XINFER_PREQUANT=0 (``_pq`` quantizes in every CTA), the same logits bit for bit; the first run
    loads the qmatmul kernels."""
    from xinfer_async import llm
    from xinfer_async.llm._synthetic import SHAPES as MODEL_SHAPES
    from xinfer_async.llm._synthetic import write_synthetic_gguf

    cfg = dataclasses.replace(MODEL_SHAPES["llama-3.1-8b"], n_layer=2, vocab_size=4096, context_length=128)
    path = write_synthetic_gguf(tmp_path / "m.gguf", cfg, dtype, seed=7, progress=False)
    ids = np.random.default_rng(3).integers(0, cfg.vocab_size, size=12).tolist()
    got = {}
    for on in ("1", "0"):
        monkeypatch.setenv("XINFER_PREQUANT", on)
        for chunk in (4, 1):
            model = await llm.load(path, device=cuda_dev, slots=1, ctx=64, chunk=chunk, batching=False)
            try:
                got[on, chunk] = await model.logits(ids)
            finally:
                await model.aclose()
        if on == "1":
            assert any(n.startswith("qmatmul_") for n in cuda_dev._kernels), "the path did not run"
    for chunk in (4, 1):
        a, b = got["1", chunk], got["0", chunk]
        assert not np.isnan(a).any() and np.array_equal(a.view(np.uint32), b.view(np.uint32)), f"{dtype} chunk {chunk}"
    assert np.array_equal(got["1", 4].view(np.uint32), got["1", 1].view(np.uint32))
