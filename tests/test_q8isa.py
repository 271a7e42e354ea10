"""The int8 dot products' instruction-set paths (native/kernels/q8isa.c, xi_q8.h, q8dot_tiles.h,
q8kdot_tiles.h; xinfer_async/backends/cpu/_isa.py).

* Every path this cpu runs, forced in turn in the built module, gives the numpy model's bits
  (tests/_q8dot_model.py) for every weight type and layout, T = 1, 3, 8, an odd N; a path this cpu
  lacks is skipped with the reason ("cpu lacks avx_vnni").
* The VNNI paths' code, with its instructions emulated by exact AVX2 operations
  (tests/native/q8isa_emu.h), gives the same bits on this cpu, whatever it lacks.
* The build holds the VNNI code: the compiler emits vpdpbusd / vpdpwssd for the VNNI units both by
  their `#pragma GCC target` (-march=x86-64) and by an -march that has VNNI (sapphirerapids), and the
  built module holds them.
* XINFER_CPU_ISA: an unknown value or a path the cpu cannot run is a ValueError naming it.
"""
import os
import platform
import re
import shutil
import subprocess

import numpy as np
import pytest

from _q8dot_model import matmul_q8, matmul_q8k
from test_native_kernels import call, poison
from test_q8dot import _CDEF, _SRC, DTS, KDTS, _inputs, _k_inputs, _repack

from xinfer_async._native import lib
from xinfer_async.backends.cpu import _isa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS = os.path.join(ROOT, "native", "kernels")
CASES = [(T, "") for T in (1, 3, 8)] + [(T, "_r8") for T in (1, 3, 8)]


@pytest.fixture
def restore_isa():
    before = lib.xi_isa_selected()
    yield
    assert lib.xi_isa_select(before) == 0


def _q8_case(rng, dt, T, layout, N=45, K=576):
    """(weights in the layout, x, y0, the model's y of accumulate 0 and 1): rows of very different
    scales (f16 block scales zero, subnormal, normal), a NaN in token 0 when T > 1."""
    wq, _, x = _inputs(rng, dt, T, N, K)
    x[1:] *= np.geomspace(1e-7, 1e3, T - 1, dtype=np.float32)[:, None]
    if T > 1:
        x[0, 5] = np.nan
    y0 = rng.standard_normal((T, N)).astype(np.float32)
    w = _repack(wq, dt, N, K) if layout else wq
    return w, x, y0, [matmul_q8(wq, dt, x), matmul_q8(wq, dt, x, y0)]


def _k_case(rng, dt, T, N=37, K=512):
    wq, _, x = _k_inputs(rng, dt, T, N, K)
    if T > 1:
        x[0, 5] = np.nan
    y0 = rng.standard_normal((T, N)).astype(np.float32)
    return wq, x, y0, [matmul_q8k(wq, dt, x), matmul_q8k(wq, dt, x, y0)]


def _check(run, w, x, y0, models):
    """run(w, x, y, accumulate) for accumulate 0, 1: the model's bits"""
    for accumulate, model in enumerate(models):
        y = y0.copy() if accumulate else poison(*y0.shape)
        run(w, x, y, accumulate)
        np.testing.assert_array_equal(y.view(np.uint32), model.view(np.uint32))


def _kernel(name):
    def run(w, x, y, accumulate):
        T, K = x.shape
        assert call(name, [w, x, y], {"T": T, "N": y.shape[1], "K": K, "accumulate": accumulate}) == 0
    return run


@pytest.mark.parametrize("isa", _isa.PATHS)
@pytest.mark.parametrize("dt", DTS + KDTS)
def test_every_path_this_cpu_runs_gives_the_model_bits(rng, restore_isa, isa, dt):
    reason = _isa.why_not(isa)
    if reason is not None:
        pytest.skip(reason)
    assert _isa.select(isa) == isa
    if dt in KDTS:
        for T in (1, 3, 8):
            _check(_kernel(f"matmul_{dt}"), *_k_case(rng, dt, T))
        return
    for T, layout in CASES:
        _check(_kernel(f"matmul_{dt}{layout}"), *_q8_case(rng, dt, T, layout))


def test_auto_is_the_best_path_this_cpu_runs(restore_isa):
    runs = [p for p in _isa.PATHS if _isa.supported(p)]
    assert runs[0] == "scalar" and _isa.compiled("scalar")
    assert _isa.select("auto") == runs[-1]


# ------------------------------------------------------------------ the VNNI code, emulated

@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """q8dot.c, q8kdot.c and q8isa.c with, in place of the real paths, the AVX-512 VNNI code (slot 0)
    and the AVX-VNNI code (slot 1) with their instructions emulated (tests/native/q8isa_emu.h)."""
    import importlib.util

    import cffi

    here = os.path.join(ROOT, "tests", "native")
    ffi = cffi.FFI()
    counters = "extern long xi_emu_calls_avxvnni[3]; extern long xi_emu_calls_avx512vnni[3];"
    ffi.cdef(_CDEF + "\n" + counters)
    ffi.set_source("_q8isa_emulated", _SRC + "\n" + counters,
                   sources=[os.path.join(KERNELS, f) for f in ("q8dot.c", "q8kdot.c", "q8isa.c")]
                   + [os.path.join(here, f"q8isa_emu_{p}.c") for p in ("avxvnni", "avx512vnni")],
                   include_dirs=[os.path.join(ROOT, "native"), KERNELS, here],
                   define_macros=[("XI_EMU_SLOT_AVX512VNNI", "0"), ("XI_EMU_SLOT_AVXVNNI", "1")],
                   extra_compile_args=["-O1", "-march=x86-64-v3", "-fopenmp", "-fno-math-errno",
                                       "-ffp-contract=off", "-std=gnu11"],
                   extra_link_args=["-fopenmp"])
    so = ffi.compile(tmpdir=str(tmp_path_factory.mktemp("q8isa_emulated")))
    spec = importlib.util.spec_from_file_location("_q8isa_emulated", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(not _isa.supported("avx2"), reason="cpu lacks avx2 (the emulation's instructions)")
@pytest.mark.parametrize("isa", ["avxvnni", "avx512vnni"])
@pytest.mark.parametrize("dt", DTS + KDTS)
def test_emulated_vnni_code_gives_the_model_bits(rng, emulated, isa, dt):
    lib_, ffi_ = emulated.lib, emulated.ffi
    assert lib_.xi_isa_select({"avx512vnni": 0, "avxvnni": 1}[isa]) == 0
    calls = getattr(lib_, f"xi_emu_calls_{isa}")
    before = [calls[i] for i in range(3)]

    def wrapper(name):
        def run(w, x, y, accumulate):
            getattr(lib_, name)(ffi_.from_buffer(w), ffi_.from_buffer(x), ffi_.from_buffer(y), x.shape[0],
                                y.shape[1], x.shape[1], accumulate)
        return run

    if dt in KDTS:
        for T in (1, 3, 8):
            _check(wrapper(f"k_{dt}"), *_k_case(rng, dt, T))
        # the K-quants take vpmaddubsw then vpdpwssd: 256-bit (AVX-VNNI) or 512-bit (AVX-512)
        assert calls[2 if isa == "avx512vnni" else 1] > before[2 if isa == "avx512vnni" else 1]
        return
    for T, layout in CASES:
        _check(wrapper(f"q8dot_{dt}{layout}"), *_q8_case(rng, dt, T, layout))
    assert calls[0] > before[0]  # the q8 types take vpdpbusd


# ------------------------------------------------------------------ the build holds the VNNI code

@pytest.mark.parametrize("march", ["x86-64", "sapphirerapids"])
@pytest.mark.parametrize("unit,instructions", [("q8isa_avx2.c", ["vpmaddubsw", "vpmaddwd"]),
                                               ("q8isa_avxvnni.c", ["vpdpbusd", "vpdpwssd"]),
                                               ("q8isa_avx512vnni.c", ["vpdpbusd", "vpdpwssd"])])
def test_compiler_emits_the_vnni_instructions(tmp_path, march, unit, instructions):
    """The unit compiled alone to assembly (-O1 for speed): its VNNI instructions are there, by its
    pragma (x86-64) or by the -march (sapphirerapids: the unit's #if sees the target's macros); the
    avx2 and avxvnni units hold no AVX-512 (no zmm, no EVEX-only ymm16-31) even where -march has it."""
    cc = shutil.which("gcc")
    if cc is None:
        pytest.skip("no gcc")
    out = tmp_path / "unit.s"
    subprocess.run([cc, "-S", "-O1", f"-march={march}", "-fopenmp", "-ffp-contract=off", "-std=gnu11",
                    "-I", os.path.join(ROOT, "native"), "-I", KERNELS, "-o", str(out),
                    os.path.join(KERNELS, unit)], check=True)
    asm = out.read_text()
    for ins in instructions:
        assert ins in asm, f"{unit} at -march={march}: no {ins}"
    if unit != "q8isa_avx512vnni.c":
        assert "zmm" not in asm and not re.search(r"ymm(1[6-9]|2[0-9]|3[01])\b", asm)
        assert unit != "q8isa_avx2.c" or "vpdpbusd" not in asm
    else:
        assert any("vpdpwssd" in line and "zmm" in line for line in asm.splitlines())  # 512-bit K tiles
        assert any("vpdpbusd" in line and "ymm" in line for line in asm.splitlines())  # 256-bit EVEX (VL)


def test_built_module_holds_every_path():
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip(f"{platform.machine()}: only the scalar path is built off x86")
    for p in _isa.PATHS:
        assert _isa.compiled(p), f"the built module lacks the {p} path"
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("no objdump to read the module's instructions")
    import xinfer_async._native as native

    dis = subprocess.run([objdump, "-d", native.__file__], check=True, capture_output=True, text=True).stdout
    assert "vpdpbusd" in dis and "vpdpwssd" in dis and "vpmaddubsw" in dis


# ------------------------------------------------------------------ XINFER_CPU_ISA

def test_unknown_path_is_an_error_naming_it(restore_isa, monkeypatch):
    before = _isa.selected()
    with pytest.raises(ValueError, match=r"^isa='avx9': 'avx9' is not one of auto, scalar, avx2, avxvnni, avx512vnni$"):
        _isa.select("avx9")
    monkeypatch.setattr(_isa, "_configured", False)
    with pytest.raises(ValueError, match=r"^XINFER_CPU_ISA='AVX2': 'AVX2' is not one of auto"):
        _isa.configure({"XINFER_CPU_ISA": "AVX2"})
    assert _isa.selected() == before and not _isa._configured  # nothing changed; read again next time


def test_path_this_cpu_lacks_is_an_error_naming_it(restore_isa, monkeypatch):
    lacking = [p for p in _isa.PATHS if not _isa.supported(p)]
    if not lacking:
        pytest.skip("this cpu runs every path")
    before = _isa.selected()
    monkeypatch.setattr(_isa, "_configured", False)
    with pytest.raises(ValueError, match=rf"^XINFER_CPU_ISA='{lacking[0]}': cpu lacks "):
        _isa.configure({"XINFER_CPU_ISA": lacking[0]})
    assert _isa.selected() == before


def test_env_forces_a_path_once_and_the_backend_says_which(restore_isa, monkeypatch):
    from xinfer_async.backends.cpu import CPUBackend

    monkeypatch.setattr(_isa, "_configured", False)
    monkeypatch.setenv("XINFER_CPU_ISA", "scalar")
    be = CPUBackend()
    assert _isa.selected() == "scalar"
    assert be.description.endswith("int8 dot products: scalar)")
    monkeypatch.setenv("XINFER_CPU_ISA", "avx9")  # read once: a later backend does not read it again
    assert CPUBackend().description.endswith("int8 dot products: scalar)")
