"""The pipelined matrix kernel (shaders/xi_mvp.cuh, entry ``_p`` of matmul_DT, rmsnorm_matmul_DT and
rmsnorm_matmul_swiglu_DT): its launch rule (cpu) and, on cuda, its results bit for bit against the
entry it replaces (``""``: xi_mv1 at T == 1, the staged xi_mvc at T <= 8), which sums every row in
the same order, so a batched decode step still equals the rows run alone; and against float64.
Fresh random inputs, outputs poisoned with NaN first (or accumulated into)."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from _kernel_refs import KQUANT_BLOCKS, encode_weights, launch_matrix_kind, random_blocks

from xinfer_async.backends.cuda import _launch
from xinfer_async.backends.cuda._kernel import shader_dir

F32 = np.float32
KINDS = ("matmul", "rmsnorm_matmul", "rmsnorm_matmul_swiglu")
EPS = 1e-5
#: Llama-3.1-8B's products (kind, dt, N, K): wo, qkv, down, gate + up, output; then those of its Q4_K_M
#: file (llama.cpp's mix: q4_k, q6_k for the output and for ffn_down on the use_more_bits layers)
LLAMA8B = [("matmul", "q4_1", 4096, 4096), ("rmsnorm_matmul", "q4_1", 6144, 4096), ("matmul", "q4_1", 4096, 14336),
           ("rmsnorm_matmul_swiglu", "q4_1", 14336, 4096), ("rmsnorm_matmul", "q8_0", 128256, 4096),
           ("matmul", "q4_k", 4096, 4096), ("rmsnorm_matmul", "q4_k", 6144, 4096), ("matmul", "q4_k", 4096, 14336),
           ("matmul", "q6_k", 4096, 14336), ("rmsnorm_matmul_swiglu", "q4_k", 14336, 4096),
           ("rmsnorm_matmul", "q6_k", 128256, 4096)]


# ---- the launch rule (cpu) -----------------------------------------------------------------------
def _header_define(name: str) -> str:
    text = open(os.path.join(shader_dir(), "xi_mvp.cuh")).read()
    m = re.search(rf"^#define {re.escape(name)}(.*)$", text, re.M)
    assert m, f"#define {name} not in xi_mvp.cuh"
    return m.group(1).split("//")[0].strip()


def test_launch_constants_match_the_header():
    """_launch repeats xi_mvp.cuh's constants and default parameters (one rule, two languages)."""
    assert int(_header_define("XI_MVP_WARPS")) == _launch._MVP_WARPS
    assert int(_header_define("XI_MVP_XK")) == _launch._MVP_XK
    assert int(_header_define("XI_MVP_TT")) == _launch._MVP_TT
    assert int(_header_define("XI_MVP_S")) == _launch.mvp_params("q4_1", False)[1] == _launch.mvp_params("q8_0", True)[1]
    assert _header_define("XI_MVP_R(TYPE, GLU)") == "((GLU) ? 1 : 2)"
    assert [_launch.mvp_params(dt, g)[0] for dt in _launch.MVP_TYPES for g in (False, True)] == [2, 1] * len(_launch.MVP_TYPES)
    cg = _header_define("XI_MVP_CG(TYPE)")
    assert cg == "((TYPE) == XI_Q8_0 ? 4 : (TYPE) == XI_F16 ? 2 : (TYPE) == XI_F32 ? 1 : 8)"
    assert {dt: _launch.mvp_params(dt, False)[2] for dt in _launch.MVP_TYPES} == {
        "f16": 2, "q8_0": 4, "q4_0": 8, "q4_1": 8, "q4_k": 8, "q5_k": 8, "q6_k": 8, "q5_0": 8}
    # 256 elements: 8 blocks of 32 (f16 64 bytes a block, q8_0 34, q4_0 18, q4_1 20, q5_0 22) or a super-block
    assert _launch._MVP_GROUP == {"f16": 512, "q8_0": 272, "q4_0": 144, "q4_1": 160, "q4_k": 144, "q5_k": 176,
                                  "q6_k": 210, "q5_0": 176}
    for dt in _launch.MVP_TYPES:  # a chunk is whole 16-byte words (the cp.async copies)
        _, _, cg = _launch.mvp_params(dt, False)
        assert cg * _launch._MVP_GROUP[dt] % 16 == 0


def test_shared_bytes():
    # 8 warps x 3 stages x 2 rows x 8 groups of 160 bytes, and the staged token: 4096 floats + 512 block sums
    assert _launch.mvp_shared("q4_1", 4096, 1, False) == 8 * 3 * 2 * 8 * 160 + 4096 * 4 + 2048
    assert _launch.mvp_shared("q4_1", 4096, 2, False) == 8 * 3 * 2 * 8 * 160  # T > 1: no staged token
    assert _launch.mvp_shared("q4_1", 16384, 1, False) == 8 * 3 * 2 * 8 * 160  # K > 8192: not staged
    assert _launch.mvp_shared("q8_0", 4096, 1, True) == 8 * 3 * 2 * 4 * 272 + 4096 * 4 + 2048  # GLU: a gate and an up row
    assert _launch.mvp_shared("q4_1", 4096, 1, False, (4, 2, 8)) == 8 * 2 * 4 * 8 * 160 + 4096 * 4 + 2048
    assert _launch.mvp_shared("q6_k", 4096, 1, False) == 8 * 3 * 2 * 8 * 210 + 4096 * 4 + 2048  # 8 super-blocks


@pytest.mark.parametrize("kind,dt,N,K", LLAMA8B)
@pytest.mark.parametrize("T", [1, 2, 8])
def test_llama_8b_products_run_it_in_one_wave(kind, dt, N, K, T):
    c = dict(T=T, N=N, K=K, accumulate=0, eps=EPS)
    grid, block, shared, suffix = _launch.matmul_launch(c, dt, kind, stage_max=100 * 1024, sms=132, cc=(9, 0),
                                                        mvq=False)  # _pq's rule: tests/test_mvq_kernels.py
    if T > _launch.MVP_MAX_T:  # measured slower than xi_mvc there (the comment on MVP_MAX_T)
        assert suffix != "_p"
        return
    assert suffix == "_p" and block == (256, 1, 1) and grid[1] == 1
    assert shared == _launch.mvp_shared(dt, K, T, kind.endswith("swiglu")) <= 100 * 1024
    per_sm = _launch.mvp_ctas_per_sm(shared, (9, 0))
    assert per_sm == 2 and grid[0] <= 132 * per_sm  # at most one wave: the warps stride over the tiles
    r = _launch.mvp_params(dt, kind.endswith("swiglu"))[0]
    assert grid[0] == min(-(-N // (8 * r)), 264)


@pytest.mark.parametrize("dt,N,K,T,glu,why", [
    ("q4_1", 4096, 4000, 1, False, "K % 256"), ("q4_1", 4096, 4096, _launch.MVP_MAX_T + 1, False, "T > MVP_MAX_T"),
    ("q4_1", 576, 1536, 1, False, "SmolLM2-135M's down: below MVP_MIN_BYTES"), ("q4_1", 1536, 576, 1, True, "K % 256"),
    ("f32", 4096, 4096, 1, False, "f32"), ("q2_k", 4096, 4096, 1, False, "q2_k: not a type of _p"),
    ("q6_k", 4096, 10752, 1, False, "q6_k rows of 8820 bytes: not whole 16-byte words"),
    ("q4_1", 4096, 4096, 1, False, "cc 7.5: no cp.async")])
def test_where_it_does_not_run(dt, N, K, T, glu, why):
    cc = (7, 5) if "cc 7.5" in why else (9, 0)
    assert not _launch.mvp_weight(dt, N, K, T, glu, 100 * 1024, cc), why


def test_xinfer_mvp_switch(monkeypatch):
    assert _launch.mvp_enabled({}) and _launch.mvp_enabled({"XINFER_MVP": "1"})
    assert not _launch.mvp_enabled({"XINFER_MVP": "0"})
    with pytest.raises(ValueError, match="XINFER_MVP='yes' is not one of '', '0', '1'"):
        _launch.mvp_enabled({"XINFER_MVP": "yes"})
    c = dict(T=1, N=4096, K=4096, accumulate=0)
    monkeypatch.setenv("XINFER_MVQ", "0")  # the integer kernel (_pq) would take this weight first
    for env, suffix in (("1", "_p"), ("0", "")):
        monkeypatch.setenv("XINFER_MVP", env)
        fam = _launch.FAMILIES["matmul"]({"dt": "q4_1", "kind": "matmul"}, sms=132, stage_max=100 * 1024, cc=(9, 0))
        assert fam.launch(c)[3] == suffix


def test_entries():
    for dt in _launch.MVP_TYPES:
        assert "_p" in _launch.matmul_entries(dt)
    assert "_p" not in _launch.matmul_entries("f32")
    fam = _launch.FAMILIES["matmul"]({"dt": "q4_1", "kind": "matmul"}, sms=132, stage_max=100 * 1024, cc=(9, 0))
    assert fam.opt_in["_p"] == 100 * 1024 and "_p" in fam.entries


# ---- the kernel on cuda ------------------------------------------------------------------------------
#: (N, K): one row; odd N; K = 256 (one chunk); K % 256 != 0 (the kernel's xi_mv1 fallback when forced);
#: K = 9216 (> XI_MVP_XK: the token read from global memory at T == 1); N past a wave of tiles
SHAPES = [(1, 256), (37, 512), (300, 2048), (45, 800), (70, 9216), (5000, 256)]
#: the same for the 256-element K-quants: K = 2048 (one chunk of 8 super-blocks), 4096 (two), 2560 (a
#: chunk and a part: q6_k's rows of 2100 bytes are not whole 16-byte words, so its xi_mv1 fallback,
#: as at K = 256 and 512), 10240 (> XI_MVP_XK)
SHAPES_256 = [(1, 2048), (37, 512), (300, 4096), (45, 2560), (70, 10240), (5000, 256)]
TS = (1, 2, 5, 8)


def _force(monkeypatch, mvp: bool):
    """Launch ``_p`` wherever its shared memory fits (mvp) or never; the tensor-core kernel and the
    integer one (``_pq``) never (they would take some weights from both)."""
    monkeypatch.setattr(_launch, "tc_weight", lambda *a, **k: False)
    monkeypatch.setattr(_launch, "mvq_weight", lambda *a, **k: False)
    monkeypatch.setattr(_launch, "mvp_weight", (lambda dt, n, k, t, glu, stage_max, cc: dt in _launch.MVP_TYPES and t <= 8
                                                and _launch.mvp_shared(dt, k, t, glu) <= stage_max) if mvp
                        else (lambda *a, **k: False))


def _weights(rng, dt, rows, K, exact=True):
    """(bytes to upload, float64 values or None): GGUF-encoded random weights (KQUANT_BLOCKS types:
    random block bytes, every field exercised, f16 scales of either sign); exact=False: random block
    bytes with finite scales (large weights; no float64 copy)."""
    if dt in KQUANT_BLOCKS:
        raw, w64 = random_blocks(rng, dt, rows, K, exact)
        return raw.reshape(-1), w64
    if exact or dt == "f16":
        wq, w64 = encode_weights((rng.standard_normal((rows, K)) * 0.05).astype(F32), dt)
        return wq, (w64 if exact else None)
    bs = {"q8_0": 34, "q4_0": 18, "q4_1": 20}[dt]
    nb = rows * K // 32
    raw = rng.integers(0, 256, (nb, bs), dtype=np.uint8)
    raw[:, 0:2] = (rng.uniform(0.002, 0.02, nb) * rng.choice([-1, 1], nb)).astype(np.float16).view(np.uint8).reshape(nb, 2)
    if dt == "q4_1":
        raw[:, 2:4] = rng.uniform(-0.1, 0.1, nb).astype(np.float16).view(np.uint8).reshape(nb, 2)
    return raw.reshape(-1), None


def _reference(kind, w64, x, norm, N, y0):
    """float64 y and a bound on a float32 kernel's distance from it (1e-5 of the sum of magnitudes)."""
    h = x.astype(np.float64)
    if kind != "matmul":
        h = h / np.sqrt((h ** 2).mean(1, keepdims=True) + EPS) * norm.astype(np.float64)
    if kind == "rmsnorm_matmul_swiglu":
        g, u = h @ w64[:N].T, h @ w64[N:].T
        mg, mu = np.abs(h) @ np.abs(w64[:N]).T, np.abs(h) @ np.abs(w64[N:]).T
        return g / (1 + np.exp(-g)) * u, 1e-5 * (1.1 * mg * np.abs(u) + np.abs(g) * mu) + 1e-30
    y0 = 0.0 if y0 is None else y0.astype(np.float64)
    return h @ w64.T + y0, 1e-5 * (np.abs(h) @ np.abs(w64).T + np.abs(y0)) + 1e-30


def _same_bits(a, b, what):
    bad = np.argwhere(a.view(np.uint32) != b.view(np.uint32))
    assert not len(bad), f"{what}: {len(bad)} values differ, first {tuple(bad[0])}: {a[tuple(bad[0])]!r} vs {b[tuple(bad[0])]!r}"


@pytest.mark.cuda
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dt", _launch.MVP_TYPES)
async def test_mvp_equals_the_old_entry_alone_and_float64(cuda_dev, monkeypatch, rng, dt, kind):
    """At every T of TS, accumulate on and off, ``_p`` gives each token the bits the old entry gives it
    alone (T == 1: xi_mv1, whose order every vector path keeps; x unaligned (xoff 1): both take the
    element-by-element path), and where the old entry at that T sums in the same order (its stage
    holds a row), its bits at that T too; all within 1e-5 of sum |w| |h| of float64."""
    glu = kind == "rmsnorm_matmul_swiglu"
    for N, K in SHAPES_256 if dt in KQUANT_BLOCKS and KQUANT_BLOCKS[dt][1] == 256 else SHAPES:
        wq, w64 = _weights(rng, dt, 2 * N if glu else N, K)
        norm = (rng.standard_normal(K) * 0.5 + 1).astype(F32)
        for T in TS:
            x = (rng.standard_normal((T, K)) * rng.uniform(0.1, 10, (T, 1))).astype(F32)
            for y0, xoff in [(None, 0)] + ([] if glu else [(rng.standard_normal((T, N)).astype(F32), 0)]) + [(None, 1)]:
                what = f"{kind}_{dt} N={N} K={K} T={T} accumulate={y0 is not None} xoff={xoff}"
                _force(monkeypatch, True)
                got = await launch_matrix_kind(cuda_dev, kind, dt, wq, x, norm, N, y0, xoff)
                assert np.isfinite(got).all(), f"{what}: non-finite (NaN left: a row not written)"
                _force(monkeypatch, False)
                alone = np.concatenate([await launch_matrix_kind(cuda_dev, kind, dt, wq, x[t:t + 1], norm, N,
                                                           None if y0 is None else y0[t:t + 1], xoff) for t in range(T)])
                _same_bits(got, alone, f"{what}: _p vs the old entry a token at a time")
                if T > 1 and _launch.mvc_rows(dt, N, K, T, glu) > 0:
                    same_t = await launch_matrix_kind(cuda_dev, kind, dt, wq, x, norm, N, y0, xoff)
                    _same_bits(got, same_t, f"{what}: _p vs the old entry at T={T}")
                ref, bound = _reference(kind, w64, x, norm, N, y0)
                err = np.abs(got - ref)
                assert (err <= bound).all(), f"{what}: max err / bound {(err / bound).max():.3g}"


@pytest.mark.cuda
@pytest.mark.parametrize("kind,dt,N,K", LLAMA8B)
async def test_llama_8b_products_equal_the_old_entry(cuda_dev, monkeypatch, rng, kind, dt, N, K):
    """The backend's own choice (``_p``, tests above: its rule) on Llama-3.1-8B's weights, at T = 1 and
    8, bit for bit against the old entry; and each token of the T = 8 launch equals it alone."""
    glu = kind == "rmsnorm_matmul_swiglu"
    wq, _ = _weights(rng, dt, 2 * N if glu else N, K, exact=False)
    norm = (rng.standard_normal(K) * 0.5 + 1).astype(F32)
    x = (rng.standard_normal((8, K)) * rng.uniform(0.1, 10, (8, 1))).astype(F32)
    monkeypatch.setattr(_launch, "tc_weight", lambda *a, **k: False)
    monkeypatch.setattr(_launch, "mvq_weight", lambda *a, **k: False)  # other numerics: tests/test_mvq_kernels.py
    ys = {T: await launch_matrix_kind(cuda_dev, kind, dt, wq, x[:T], norm, N) for T in (1, 8)}
    monkeypatch.setattr(_launch, "mvp_weight", lambda *a, **k: False)
    for T in (1, 8):
        old = await launch_matrix_kind(cuda_dev, kind, dt, wq, x[:T], norm, N)
        assert np.isfinite(ys[T]).all()
        _same_bits(ys[T], old, f"{kind}_{dt} N={N} K={K} T={T}: _p vs the old entry")
    _same_bits(ys[8][:1], ys[1], f"{kind}_{dt}: token 0 of T=8 vs alone")
