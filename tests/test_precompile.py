"""``backends/cuda/_precompile.py``: the shader list, the target and a parallel pre-compile into a
fresh cache (NVRTC for sm_90, no GPU needed)."""

import pytest
from _nvrtc_marks import needs_nvrtc

from xinfer_async.backends.cuda import _nvrtc
from xinfer_async.backends.cuda._kernel import compile_shader, shader_cache_path
from xinfer_async.backends.cuda._launch import FAMILIES
from xinfer_async.backends.cuda._precompile import ShaderTarget, precompile, shader_names
from xinfer_async.ops._kernels import KERNELS

H200 = ShaderTarget("sm_90", 102400)


def test_target_is_validated():
    with pytest.raises(ValueError, match=r"arch must be 'sm_<major><minor>' \(e.g. 'sm_90'\), got 'compute_90'"):
        ShaderTarget("compute_90", 0)
    with pytest.raises(ValueError, match="stage_max must be >= 0 bytes, got -1"):
        ShaderTarget("sm_90", -1)


def test_shader_names_are_every_declared_kernel_costliest_first():
    names = shader_names(H200)
    assert sorted(names) == sorted(s.source_name for s in KERNELS.values() if s.cuda is not None)
    assert len(names) == len(set(names))

    def entries(n):
        c = KERNELS[n].cuda
        return len(FAMILIES[c.family](dict(c.params), sms=1, stage_max=102400, cc=(9, 0)).entries) if c.family else 1

    counts = [entries(n) for n in names]
    assert counts == sorted(counts, reverse=True)
    # the matrix kernels of q4_0, q4_1, q8_0 lead (the integer mmq entries, the pipelined `_p` and the integer
    # decode `_pq`; q4_1 and q8_0 also tensor-core ones)
    assert counts[0] == 9 and counts[9] < counts[8]
    assert sorted(names[:9]) == sorted(f"{k}_{t}" for k in ("matmul", "rmsnorm_matmul", "rmsnorm_matmul_swiglu")
                                       for t in ("q4_0", "q4_1", "q8_0")), names[:9]


@needs_nvrtc
def test_precompile_fills_the_cache_once(tmp_path, monkeypatch):
    monkeypatch.setenv("XINFER_CACHE_DIR", str(tmp_path))
    names = ["affine", "add", "argmax"]
    first = precompile(H200, names, jobs=2)
    assert [(r.name, r.outcome) for r in first] == [(n, "compiled") for n in names]
    assert all(r.seconds > 0 for r in first)
    again = precompile(H200, names, jobs=2)
    assert [(r.name, r.outcome) for r in again] == [(n, "hit") for n in names]
    before = _nvrtc.statistics()
    for n in names:  # what a backend loads is what the pool compiled, read from the cache
        with open(shader_cache_path(n, "sm_90", 102400), "rb") as f:
            assert compile_shader(n, "sm_90", 102400) == f.read()
    assert _nvrtc.statistics().compiles == before.compiles
    other = precompile(ShaderTarget("sm_90", 49152), ["affine"], jobs=1)  # another stage_max: another cubin
    assert [r.outcome for r in other] == ["compiled"]


def test_precompile_refuses_bad_arguments(tmp_path, monkeypatch):
    monkeypatch.setenv("XINFER_CACHE_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="jobs must be >= 1, got 0"):
        precompile(H200, ["affine"], jobs=0)
    with pytest.raises(ValueError, match="no shader for kernel 'nope'"):
        precompile(H200, ["nope"], jobs=1)
