"""The integer decode matrix kernel (shaders/xi_mvq.cuh, entry ``_pq`` of matmul_DT, rmsnorm_matmul_DT and
rmsnorm_matmul_swiglu_DT; llama.cpp's numerics: activations quantized to q8_1, dp4a, scales after): on
cpu its numpy model (tests/_mmq_model.py ``mvq_matmul``; the K-quants' codes against gguf's dequantize,
the lane order against a plain loop, the distance from float64 within its bound) and its launch rule;
on cuda every type x kind x T x accumulate bit for bit against the model (fresh random inputs, outputs
poisoned with NaN first), batched == alone, odd N, K not a multiple of the chunk, the distance from
float64 printed and bounded."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from _kernel_refs import KQUANT_BLOCKS, encode_weights, launch_matrix_kind, random_blocks
from _mmq_model import (block_codes, block_terms, check_against_model, check_within_bound, dequantize, error_bound,
                        mvq_matmul, mvq_swiglu, rmsnorm_h, rmsnorm_inv_cta, rows_of, warp_sum)

from xinfer_async.backends.cuda import _launch
from xinfer_async.backends.cuda._kernel import shader_dir

F32 = np.float32
EPS = 1e-5
KINDS = ("matmul", "rmsnorm_matmul", "rmsnorm_matmul_swiglu")
TYPES = _launch.MVQ_TYPES
#: Llama-3.1-8B's products (kind, dt, N, K) of its q4_1 file and of its Q4_K_M mix
LLAMA8B = [("matmul", "q4_1", 4096, 4096), ("rmsnorm_matmul", "q4_1", 6144, 4096), ("matmul", "q4_1", 4096, 14336),
           ("rmsnorm_matmul_swiglu", "q4_1", 14336, 4096), ("rmsnorm_matmul", "q8_0", 128256, 4096),
           ("matmul", "q4_k", 4096, 4096), ("matmul", "q6_k", 4096, 14336), ("rmsnorm_matmul_swiglu", "q4_k", 14336, 4096),
           ("rmsnorm_matmul", "q6_k", 128256, 4096)]


def weights(rng, dt, rows, K):
    """(GGUF bytes (flat uint8), exact float64 values (rows, K)) of a random matrix: encoded normal
    weights (q4_0, q4_1, q8_0), or random block bytes with every field exercised and f16 scales of
    either sign (q5_0 and the K-quants: ``random_blocks``)."""
    if dt in KQUANT_BLOCKS:
        raw, w64 = random_blocks(rng, dt, rows, K)
        return raw.reshape(-1), w64
    wq, w64 = encode_weights((rng.standard_normal((rows, K)) * 0.05).astype(F32), dt)
    return np.asarray(wq).view(np.uint8).reshape(-1), w64


def tokens(rng, T, K):
    """x (T, K) float32: normal values, each token at its own scale (e^-3 .. e^3), a few outliers."""
    x = rng.standard_normal((T, K)) * np.exp(rng.uniform(-3, 3, (T, 1)))
    x[rng.random((T, K)) < 0.002] *= 40
    return x.astype(F32)


# ---- the model on cpu ---------------------------------------------------------------------------
@pytest.mark.parametrize("dt", TYPES)
def test_block_codes_reproduce_gguf_dequantize(rng, dt):
    """codes x scales (+ min) of ``block_codes``, rounded once to float32, are gguf's own dequantized
    weights bit for bit (the K-quants: random block bytes, every field exercised)."""
    import gguf

    N, K = 6, 512
    wq, w64 = weights(rng, dt, N, K)
    w, mag = dequantize(wq, dt, N, K)
    qt = gguf.GGMLQuantizationType[dt.upper()]
    ref = gguf.quants.dequantize(np.asarray(wq).view(np.uint8).reshape(N, -1), qt).reshape(N, K).astype(F32)
    assert np.array_equal(w.astype(F32).view(np.uint32), ref.view(np.uint32))
    assert (mag >= np.abs(w)).all() and np.abs(w).max() > 0
    codes, dw, mw, sc = block_codes(wq, dt, N, K)
    lo, hi = {"q4_0": (-8, 7), "q4_1": (0, 15), "q5_0": (-16, 15), "q8_0": (-128, 127), "q4_k": (0, 15),
              "q5_k": (0, 31), "q6_k": (-32, 31)}[dt]
    assert lo <= codes.min() and codes.max() <= hi
    assert (mw is not None) == (dt in ("q4_1", "q4_k", "q5_k")) and (sc is not None) == (dt == "q6_k")


def _plain_lanes(wq, dt, h, t, n):
    """One (token, row) result the plain way: the block terms, lane l adding blocks l, l + 32, ... one
    at a time as float32 scalars, then the xor butterfly on a list of 32 values."""
    raw = np.asarray(wq).view(np.uint8).reshape(rows_of(wq, dt, h.shape[1]), -1)
    f = block_terms(raw[n], dt, h[t:t + 1])[0, 0]
    lanes = [F32(0)] * 32
    for b, v in enumerate(f):
        lanes[b % 32] = F32(lanes[b % 32] + v)
    for o in (16, 8, 4, 2, 1):
        lanes = [F32(lanes[i] + lanes[i ^ o]) for i in range(32)]
    return lanes[0]


def test_warp_sum_is_the_xor_butterfly(rng):
    v = rng.standard_normal((3, 32)).astype(F32)
    for r in range(3):
        lanes = list(v[r])
        for o in (16, 8, 4, 2, 1):
            lanes = [F32(lanes[i] + lanes[i ^ o]) for i in range(32)]
        assert len({float(x) for x in lanes}) == 1 and warp_sum(v[r]) == lanes[0]


@pytest.mark.parametrize("K", [256, 2048, 4096 + 1024])
def test_rmsnorm_inv_cta_is_the_plain_loop_and_near_float64(rng, K):
    """``_pq``'s rmsnorm scale: 256 threads' sums of squares (float4s j, j + 256, ...), the warps'
    butterflies, the 8 warp sums in order; against the same in scalar float32 steps, and float64."""
    x = tokens(rng, 3, K)
    inv = rmsnorm_inv_cta(x, EPS)
    for t in range(3):
        thr = [F32(0)] * 256
        for i in range(K // 4):
            a, b, c, d = (F32(v) for v in x[t, 4 * i:4 * i + 4])
            thr[i % 256] = F32(thr[i % 256] + F32(F32(F32(a * a) + F32(b * b)) + F32(F32(c * c) + F32(d * d))))
        warps = []
        for w in range(8):
            lanes = thr[32 * w:32 * w + 32]
            for o in (16, 8, 4, 2, 1):
                lanes = [F32(lanes[i] + lanes[i ^ o]) for i in range(32)]
            warps.append(lanes[0])
        ss = warps[0]
        for v in warps[1:]:
            ss = F32(ss + v)
        assert inv[t] == F32(F32(1) / np.sqrt(F32(F32(ss / F32(K)) + F32(EPS))))
    ref = 1 / np.sqrt((x.astype(np.float64) ** 2).mean(-1) + np.float64(F32(EPS)))
    assert np.allclose(inv, ref, rtol=2e-6, atol=0)


@pytest.mark.parametrize("dt", TYPES)
def test_model_lane_order_is_the_plain_loop(rng, dt):
    N, K, T = 5, 2048 * 3 if dt == "q6_k" else 256 * 13, 3  # 192 / 104 blocks: lanes with 6 / 3 or 4 blocks
    wq, _ = weights(rng, dt, N, K)
    h = tokens(rng, T, K)
    y = mvq_matmul(wq, dt, h)
    for t, n in ((0, 0), (1, 3), (2, 4)):
        assert y[t, n].view(np.uint32) == _plain_lanes(wq, dt, h, t, n).view(np.uint32)


@pytest.mark.parametrize("dt", TYPES)
def test_model_split_is_two_plain_loops_added(rng, dt):
    """mvq_matmul(split=b) (qmatmul_normq_DT and its `_k2`): blocks [0, b) and [b, K/32) each the plain lanes and
    butterfly, the two totals added in that order, rounded once; a split at or past the row's end: the
    unsplit total plus 0; within the unsplit model's float64 bound; other bits than the unsplit model's."""
    N, K, T = 64, 2048 * 3 if dt == "q6_k" else 256 * 13, 3
    wq, w64 = weights(rng, dt, N, K)
    h = tokens(rng, T, K)
    raw = np.asarray(wq).view(np.uint8).reshape(N, -1)
    for split in (64, 96):
        y = mvq_matmul(wq, dt, h, split=split)
        for t, n in ((0, 0), (1, 3), (2, 4)):
            f = block_terms(raw[n], dt, h[t:t + 1])[0, 0]
            totals = []
            for part in (f[:split], f[split:]):
                lanes = [F32(0)] * 32
                for b, v in enumerate(part):
                    lanes[b % 32] = F32(lanes[b % 32] + v)  # split % 32 == 0: block split + b is lane b % 32
                for o in (16, 8, 4, 2, 1):
                    lanes = [F32(lanes[i] + lanes[i ^ o]) for i in range(32)]
                totals.append(lanes[0])
            assert y[t, n].view(np.uint32) == F32(totals[0] + totals[1]).view(np.uint32)
        check_within_bound(y, wq, dt, h, w64, f"{dt} split {split}")
        assert not np.array_equal(y, mvq_matmul(wq, dt, h)), "the split's sums round as the unsplit ones everywhere"
    y = mvq_matmul(wq, dt, h)
    past = 32 * (K // 1024 + 1)  # a multiple of 32 past the last block
    assert np.array_equal(mvq_matmul(wq, dt, h, split=past).view(np.uint32), (y + F32(0)).view(np.uint32))


@pytest.mark.parametrize("dt", TYPES)
@pytest.mark.parametrize("norm", [False, True])
def test_model_is_within_its_bound_of_float64(rng, dt, norm):
    N, K, T = 37, 2048 if dt == "q6_k" else 1280, 6
    wq, w64 = weights(rng, dt, N, K)
    x = tokens(rng, T, K)
    h = rmsnorm_h(x, (rng.standard_normal(K) + 1).astype(F32), EPS, rmsnorm_inv_cta) if norm else x
    check_within_bound(mvq_matmul(wq, dt, h), wq, dt, h, w64, f"{dt} norm={norm}")


@pytest.mark.parametrize("dt", ("q4_1", "q6_k"))
def test_model_rows_and_tokens_stand_alone(rng, dt):
    N, K, T = 11, 2048, 8
    wq, _ = weights(rng, dt, N, K)
    x = tokens(rng, T, K)
    y0 = rng.standard_normal((T, N)).astype(F32)
    y = mvq_matmul(wq, dt, x, y0, rows=4)  # 3 row chunks
    assert np.array_equal(mvq_matmul(wq, dt, x, y0).view(np.uint32), y.view(np.uint32))
    for t in (0, 5):
        assert np.array_equal(mvq_matmul(wq, dt, x[t:t + 1], y0[t:t + 1]).view(np.uint32), y[t:t + 1].view(np.uint32))


# ---- the launch rule (cpu) ----------------------------------------------------------------------
def _header_define(name: str) -> str:
    text = open(os.path.join(shader_dir(), "xi_mvq.cuh")).read()
    m = re.search(rf"^#define {re.escape(name)}(.*)$", text, re.M)
    assert m, f"#define {name} not in xi_mvq.cuh"
    return m.group(1).split("//")[0].strip()


def test_launch_constants_match_the_header():
    """_launch repeats xi_mvq.cuh's constants and default parameters (one rule, two languages)."""
    assert int(_header_define("XI_MVQ_WARPS")) == _launch._MVQ_WARPS == _launch._MVP_WARPS
    assert int(_header_define("XI_MVQ_TT")) == _launch._MVQ_TT == _launch.PQ_MAX_T
    assert _header_define("XI_MVQ_R(TYPE, NORM, GLU)") == "((GLU) ? 1 : !(NORM) || (TYPE) == XI_Q8_0 ? 4 : 2)"
    assert _header_define("XI_MVQ_S(TYPE, NORM, GLU)") == ("(!(NORM) && !(GLU) ? ((TYPE) == XI_Q8_0 ? 3 : 2) : (TYPE) == XI_Q6_K"
                                                          " || (TYPE) == XI_Q5_K || (TYPE) == XI_Q5_0 ? 2 : 3)")
    assert _header_define("XI_MVQ_CG(TYPE)") == "((TYPE) == XI_Q8_0 ? 4 : 8)"
    for dt in TYPES:
        slim = dt in ("q6_k", "q5_k", "q5_0")
        cg = 4 if dt == "q8_0" else 8
        assert _launch.mvq_params(dt, True) == (1, 2 if slim else 3, cg)  # SwiGLU
        assert _launch.mvq_params(dt, False) == (4 if dt == "q8_0" else 2, 2 if slim else 3, cg)  # rmsnorm_matmul
        assert _launch.mvq_params(dt, False, norm=False) == (4, 3 if dt == "q8_0" else 2, cg)  # matmul
        assert cg % 4 == 0 and cg * _launch.row_bytes(dt, 256) % 16 == 0  # 32 blocks a step, whole words
        for glu, norm in ((True, True), (False, True), (False, False)):
            # 8 tokens of K = 4096 (8B's q, k, v, gate, up and output; matmul: 4) fit the H200's 227 KB
            assert _launch.mvq_tokens(dt, 4096, 8, glu, _launch.PQ_STAGE_MAX, norm=norm) == (8 if norm else _launch.MVQ_MATMUL_TT)
            if dt != "q8_0" and (norm or not slim):  # and 100 KB, but for the wider stages of these
                assert _launch.mvq_tokens(dt, 4096, 8, glu, 100 * 1024, norm=norm) >= (4 if norm else 2)


def test_shared_bytes():
    # 8 warps x 3 stages x 2 rows x 8 groups of 160 bytes; 8 tokens' codes (K bytes each), (d, s) pairs
    assert _launch.mvq_shared("q4_1", 4096, 8, False) == 8 * 3 * 2 * 8 * 160 + 8 * 4096 + 8 * 128 * 8 == 100 * 1024
    assert _launch.mvq_shared("q8_0", 4096, 1, True) == 8 * 3 * 2 * 4 * 272 + 4096 + 128 * 8
    assert _launch.mvq_shared("q6_k", 4096, 1, False) == 8 * 2 * 2 * 8 * 210 + 4096 + 128 * 8
    assert _launch.mvq_shared("q6_k", 2048, 2, False, (4, 2, 8)) == 8 * 2 * 4 * 8 * 210 + 2 * 2048 + 2 * 64 * 8


def test_tokens_a_cta():
    assert [_launch.mvq_tokens("q4_1", 4096, t, False, 100 * 1024) for t in range(1, 10)] == [1, 2, 4, 4, 8, 8, 8, 8, 8]
    assert _launch.mvq_tokens("q4_1", 4096, 8, False, 100 * 1024 - 1) == 4
    # K = 14336 (8B's down): 8 tokens' codes do not fit beside the stages in 100 KB, nor 4; 2 do
    assert _launch.mvq_tokens("q4_1", 14336, 8, False, 100 * 1024) == 2
    assert _launch.mvq_tokens("q4_1", 14336, 8, False, 200 * 1024) == 8
    assert _launch.mvq_tokens("q4_1", 4096, 1, False, 1024) == 0
    with pytest.raises(ValueError, match=r"^_pq of q4_1 with K=4096: one token needs 66560 shared bytes, over stage_max=1024$"):
        _launch.mvq_launch(dict(T=1, N=64, K=4096), "q4_1", False, 132, stage_max=1024)
    # the default limit is _pq's (PQ_STAGE_MAX, as matmul_launch's pq_max), not the tiled kernels' 100 KB
    assert _launch.mvq_launch(dict(T=8, N=4096, K=14336), "q4_1", False, 132)[0][1] == 1


@pytest.mark.parametrize("kind,dt,N,K", LLAMA8B)
@pytest.mark.parametrize("T", [1, 2, 3, 8, 9])
def test_llama_8b_products_run_it(kind, dt, N, K, T):
    """Every 8B product of T <= PQ_MAX_T runs _pq on the H200 (227 KB of shared memory a CTA), with the
    kind's parameters (mvq_params) and as many tokens a CTA as fit."""
    c = dict(T=T, N=N, K=K, accumulate=0, eps=EPS)
    glu, norm, smem = kind.endswith("swiglu"), kind != "matmul", _launch.PQ_STAGE_MAX
    grid, block, shared, suffix = _launch.matmul_launch(c, dt, kind, stage_max=100 * 1024, sms=132, cc=(9, 0),
                                                        pq_max=smem)
    if T > _launch.PQ_MAX_T:
        assert suffix != "_pq"
        return
    assert suffix == "_pq" and block == (256, 1, 1)
    tt = _launch.mvq_tokens(dt, K, T, glu, smem, norm=norm)
    most = 8 if norm else _launch.MVQ_MATMUL_TT
    assert tt >= min(T, most, 2 if K > 4096 else 8) and shared == _launch.mvq_shared(dt, K, tt, glu, norm=norm) <= smem
    assert grid[1] == -(-T // tt)
    per_sm = _launch.mvp_ctas_per_sm(shared, (9, 0))
    r = _launch.mvq_params(dt, glu, norm)[0]
    assert grid[0] == min(-(-N // (8 * r)), 132 * per_sm)  # at most one wave: the warps stride over the tiles


@pytest.mark.parametrize("dt,N,K,T,glu,why", [
    ("q4_1", 4096, 4000, 1, False, "K % 256"), ("q4_1", 4096, 4096, 9, False, "T > PQ_MAX_T"),
    ("q4_1", 4096, 4096, 0, False, "T = 0"), ("q4_1", 1536, 576, 1, True, "K % 256 (SmolLM2)"),
    ("f16", 4096, 4096, 1, False, "f16"), ("q2_k", 4096, 4096, 1, False, "q2_k: not a type of _pq"),
    ("q5_1", 4096, 4096, 1, False, "q5_1: not a type of _pq"),
    ("q6_k", 4096, 10752, 1, False, "q6_k rows of 8820 bytes: not whole 16-byte words"),
    ("q4_1", 4096, 4096, 1, False, "cc 7.5: no cp.async"),
    ("q4_1", 576, 1536, 1, False, "0.55 MB < PQ_MIN_BYTES (SmolLM2's down)"),
    ("q4_1", 512, 2048, 1, True, "2 x 512 rows of 1280 bytes < PQ_MIN_BYTES")])
def test_where_it_does_not_run(dt, N, K, T, glu, why):
    cc = (7, 5) if "cc 7.5" in why else (9, 0)
    assert not _launch.mvq_weight(dt, N, K, T, glu, 100 * 1024, cc), why


def test_xinfer_mvq_switch(monkeypatch):
    assert _launch.mvq_enabled({}) and _launch.mvq_enabled({"XINFER_MVQ": "1"})
    assert not _launch.mvq_enabled({"XINFER_MVQ": "0"})
    with pytest.raises(ValueError, match="XINFER_MVQ='on' is not one of '', '0', '1'"):
        _launch.mvq_enabled({"XINFER_MVQ": "on"})
    for T, env, suffix in ((1, "1", "_pq"), (1, "", "_pq"), (8, "1", "_pq"), (1, "0", "_p"), (8, "0", ""), (9, "1", "_t")):
        monkeypatch.setenv("XINFER_MVQ", env)
        fam = _launch.FAMILIES["matmul"]({"dt": "q4_1", "kind": "matmul"}, sms=132, stage_max=100 * 1024, cc=(9, 0))
        assert fam.launch(dict(T=T, N=4096, K=4096, accumulate=0))[3] == suffix, (T, env)
    monkeypatch.setenv("XINFER_MVQ", "x")
    with pytest.raises(ValueError, match="XINFER_MVQ"):
        _launch.FAMILIES["matmul"]({"dt": "q4_1", "kind": "matmul"}, sms=132, stage_max=100 * 1024, cc=(9, 0))


def test_pq_min_bytes(monkeypatch):
    """Weights under PQ_MIN_BYTES (both halves with GLU) keep the f32 entries at every T; the rule reads
    PQ_MIN_BYTES at the call; XINFER_PQ_MIN_BYTES overrides it when the kernel is loaded."""
    rb = _launch.row_bytes("q4_1", 2048)
    monkeypatch.setattr(_launch, "PQ_MIN_BYTES", 1000 * rb)
    for T in (1, 8):
        assert _launch.mvq_weight("q4_1", 1000, 2048, T, False, 100 * 1024, (9, 0))
        assert not _launch.mvq_weight("q4_1", 999, 2048, T, False, 100 * 1024, (9, 0))
        assert _launch.mvq_weight("q4_1", 500, 2048, T, True, 100 * 1024, (9, 0))
        assert not _launch.mvq_weight("q4_1", 499, 2048, T, True, 100 * 1024, (9, 0))
        assert _launch.mvq_weight("q4_1", 999, 2048, T, False, 100 * 1024, (9, 0), min_bytes=999 * rb)
    assert _launch.pq_min_bytes({}) is None and _launch.pq_min_bytes({"XINFER_PQ_MIN_BYTES": "0"}) == 0
    for bad in ("-1", "2MB", "1e6"):
        with pytest.raises(ValueError, match="XINFER_PQ_MIN_BYTES"):
            _launch.pq_min_bytes({"XINFER_PQ_MIN_BYTES": bad})
    c = dict(T=1, N=999, K=2048, accumulate=0)
    for env, suffix in (("", ""), (str(999 * rb), "_pq"), (str(999 * rb + 1), "")):
        monkeypatch.setenv("XINFER_PQ_MIN_BYTES", env)
        fam = _launch.FAMILIES["matmul"]({"dt": "q4_1", "kind": "matmul"}, sms=132, stage_max=100 * 1024, cc=(9, 0))
        assert fam.launch(c)[3] == suffix, env


def test_entries():
    for dt in TYPES:
        assert "_pq" in _launch.matmul_entries(dt)
    for dt in ("f32", "f16", "q5_1", "q2_k", "iq4_xs"):
        assert "_pq" not in _launch.matmul_entries(dt)
    fam = _launch.FAMILIES["matmul"]({"dt": "q6_k", "kind": "matmul"}, sms=132, stage_max=100 * 1024, cc=(9, 0))
    assert fam.opt_in["_pq"] == _launch.PQ_STAGE_MAX and "_pq" in fam.entries  # the H200's opt-in, not stage_max
    assert _launch.pq_stage_max_for(227 * 1024) == _launch.PQ_STAGE_MAX


def test_every_type_declares_the_entries():
    for dt in TYPES:
        for kind, macro in (("matmul", "XI_MVQ_ENTRIES"), ("rmsnorm_matmul", "XI_MVQ_NORM_ENTRIES"),
                            ("rmsnorm_matmul_swiglu", "XI_MVQ_SWIGLU_ENTRIES")):
            text = open(os.path.join(shader_dir(), f"{kind}_{dt}.cu")).read()
            assert f"{macro}({dt}, XI_{dt.upper()})" in text and '#include "xi_mvq.cuh"' in text


# ---- the kernel on cuda ------------------------------------------------------------------------------
#: (N, K): one row; odd N, K = 3 groups (a part of a chunk of 8); N past a wave of tiles (264 CTAs x 16
#: rows); K = 14336 (8 tokens do not fit: 2 a CTA); the q6_k shapes (K % 2048 == 0)
SHAPES = [(1, 256), (37, 768), (300, 4096), (4500, 512), (64, 14336)]
SHAPES_Q6K = [(1, 2048), (37, 2048), (300, 4096), (4500, 2048), (64, 14336)]
TS = (1, 2, 3, 8)


def _force(monkeypatch, max_t=_launch.PQ_MAX_T):
    """``_pq`` wherever its rule lets it, at any size (the tensor-core kernel never: it would take some
    q4_1 / q8_0 weights first); max_t: PQ_MAX_T for the launch (above 8: several token tiles of 8)."""
    monkeypatch.setenv("XINFER_MVQ", "1")
    monkeypatch.setattr(_launch, "tc_weight", lambda *a, **k: False)
    monkeypatch.setattr(_launch, "PQ_MIN_BYTES", 0)
    monkeypatch.delenv("XINFER_PQ_MIN_BYTES", raising=False)
    monkeypatch.setattr(_launch, "PQ_MAX_T", max_t)


def _model(kind, dt, wq, x, norm, N, y0=None):
    h = x if kind == "matmul" else rmsnorm_h(x, norm, EPS, rmsnorm_inv_cta)
    if kind == "rmsnorm_matmul_swiglu":
        return mvq_swiglu(wq, dt, h, N), h
    return mvq_matmul(wq, dt, h, y0), h


@pytest.mark.cuda
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dt", TYPES)
async def test_mvq_equals_the_model_alone_and_float64(cuda_dev, monkeypatch, rng, dt, kind):
    """At T in TS, accumulate off and on (x unaligned once): the model's bits; each token of the widest
    launch equals it alone; within the model's bound of float64 (printed)."""
    _force(monkeypatch)
    glu = kind == "rmsnorm_matmul_swiglu"
    worst = 0.0
    for N, K in SHAPES_Q6K if dt == "q6_k" else SHAPES:
        assert _launch.matmul_launch(dict(T=1, N=N, K=K, accumulate=0, eps=EPS), dt, kind)[3] == "_pq"
        wq, w64 = weights(rng, dt, 2 * N if glu else N, K)
        norm = (rng.standard_normal(K) * 0.5 + 1).astype(F32)
        xs = tokens(rng, max(TS), K)
        for T in TS:
            x = xs[:T]
            for y0, xoff in [(None, 0)] + ([] if glu else [(rng.standard_normal((T, N)).astype(F32), 0)]) + [(None, 1)]:
                what = f"{kind}_{dt} N={N} K={K} T={T} accumulate={y0 is not None} xoff={xoff}"
                got = await launch_matrix_kind(cuda_dev, kind, dt, wq, x, norm, N, y0, xoff)
                ref, h = _model(kind, dt, wq, x, norm, N, y0)
                check_against_model(kind, got, ref, what)
                if not glu:
                    exact = h.astype(np.float64) @ w64.T + (0 if y0 is None else y0.astype(np.float64))
                    dist, bound = np.abs(got - exact), error_bound(wq, dt, h) + (0 if y0 is None else np.abs(exact) * 2.0 ** -23)
                    assert (dist <= bound).all(), f"{what}: max dist / bound {(dist / bound).max():.3g}"
                    worst = max(worst, float((dist / bound).max()))
        full = await launch_matrix_kind(cuda_dev, kind, dt, wq, xs, norm, N)
        for t in (0, max(TS) - 1):
            alone = await launch_matrix_kind(cuda_dev, kind, dt, wq, xs[t:t + 1], norm, N)
            assert np.array_equal(alone[0].view(np.uint32), full[t].view(np.uint32)), f"{kind}_{dt} N={N} K={K} token {t}"
    print(f"{kind}_{dt}: max |kernel - float64| / bound {worst:.3f}")


@pytest.mark.cuda
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dt", ("q4_1", "q8_0", "q4_k", "q6_k"))
async def test_several_token_tiles_equal_one(cuda_dev, monkeypatch, rng, dt, kind):
    """The entry takes any T: with PQ_MAX_T raised, T = 13 and 24 run 2 and 3 tiles of 8 tokens (grid.y; the
    matmul kind 4 and 6 tiles of 4);
    every token equals its own T = 1 launch bit for bit, and the model."""
    _force(monkeypatch, max_t=24)
    N, K = 77, 2048
    glu = kind == "rmsnorm_matmul_swiglu"
    wq, _ = weights(rng, dt, 2 * N if glu else N, K)
    norm = (rng.standard_normal(K) * 0.5 + 1).astype(F32)
    xs = tokens(rng, 24, K)
    for T in (13, 24):
        most = 8 if kind != "matmul" else _launch.MVQ_MATMUL_TT  # tokens a CTA (mvq_tokens)
        assert _launch.matmul_launch(dict(T=T, N=N, K=K, accumulate=0, eps=EPS), dt, kind)[0][1] == -(-T // most)
        got = await launch_matrix_kind(cuda_dev, kind, dt, wq, xs[:T], norm, N)
        check_against_model(kind, got, _model(kind, dt, wq, xs[:T], norm, N)[0], f"{kind}_{dt} T={T}")
        for t in (0, 8, T - 1):
            alone = await launch_matrix_kind(cuda_dev, kind, dt, wq, xs[t:t + 1], norm, N)
            assert np.array_equal(alone[0].view(np.uint32), got[t].view(np.uint32)), f"{kind}_{dt} T={T} token {t}"


@pytest.mark.cuda
@pytest.mark.parametrize("kind,dt,N,K", LLAMA8B)
async def test_llama_8b_products_equal_the_model(cuda_dev, monkeypatch, rng, kind, dt, N, K):
    """The backend's own choice on Llama-3.1-8B's weights at T = 1 and 8 (``_pq``: its rule, above):
    a sample of rows against the model bit for bit; token 0 of T = 8 equals T = 1."""
    monkeypatch.setenv("XINFER_MVQ", "1")
    monkeypatch.setattr(_launch, "tc_weight", lambda *a, **k: False)
    glu = kind == "rmsnorm_matmul_swiglu"
    rows = 2 * N if glu else N
    if dt in KQUANT_BLOCKS:
        wq = random_blocks(rng, dt, rows, K, exact=False)[0].reshape(-1)
    else:  # random bytes, finite f16 scales and mins
        bs = {"q8_0": 34, "q4_1": 20}[dt]
        nb = rows * K // 32
        raw = rng.integers(0, 256, (nb, bs), dtype=np.uint8)
        raw[:, 0:2] = (rng.uniform(0.002, 0.02, nb) * rng.choice([-1, 1], nb)).astype(np.float16).view(np.uint8).reshape(nb, 2)
        if dt == "q4_1":
            raw[:, 2:4] = rng.uniform(-0.1, 0.1, nb).astype(np.float16).view(np.uint8).reshape(nb, 2)
        wq = raw.reshape(-1)
    norm = (rng.standard_normal(K) * 0.5 + 1).astype(F32)
    x = tokens(rng, 8, K)
    ys = {T: await launch_matrix_kind(cuda_dev, kind, dt, wq, x[:T], norm, N) for T in (1, 8)}
    assert np.array_equal(ys[1].view(np.uint32), ys[8][:1].view(np.uint32)), f"{kind}_{dt}: token 0 of T=8 vs alone"
    rb = wq.size // rows
    sample = np.r_[0:64, N - 64:N]
    w2 = wq.reshape(rows, rb)
    sel = np.concatenate([w2[sample], w2[N + sample]]) if glu else w2[sample]
    ref = _model(kind, dt, sel.reshape(-1), x, norm, len(sample))[0]
    check_against_model(kind, ys[8][:, sample], ref, f"{kind}_{dt} N={N} K={K} T=8, rows {sample[0]}.. and ..{sample[-1]}")
