"""The block-type matrix products of the cpu backend (native/kernels/q8dot.c, q8kdot.c: int8 activations,
exact integer dot products, llama.cpp's numerics) against their numpy model (tests/_q8dot_model.py)
bit for bit, and against float64 within the bound that quantizing x implies.

Bit for bit, not to the last rounding: the C and the model do the same float32 operations in the
same order (products of exact integers and float32 scales, mul and add rounded separately: the build
passes -ffp-contract=off and the AVX2 path uses no fma), so any difference is a defect.
The portable scalar path and the AVX2 path are both checked: q8dot.c is built here a second time
into small test modules with -march=x86-64 (no AVX2) and -march=x86-64-v3 (AVX2).
"""
import os
import subprocess
import sys

import numpy as np
import pytest

from _child_env import child_env
from _q8dot_model import BLOCK_BYTES, matmul_q8, matmul_q8k, quantization_bound, repack_r8
from test_native_kernels import F32_EPS, call, poison

from xinfer_async._native import ffi, lib

DTS = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1"]
MIN_DTS = ("q4_1", "q5_1")  # w = d c + m: the f16 block sum s enters (quantization_bound)
SHAPES = [(1, 576, 576), (1, 1536, 576), (1, 576, 1536), (3, 33, 96), (5, 200, 576), (64, 192, 576),
          (2, 1, 32), (7, 50, 4096)]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def encode(w, dt):
    """float32 (N, K) -> GGUF bytes of type dt (gguf-py's quantizer) and their float32 values."""
    import gguf

    qt = gguf.GGMLQuantizationType[dt.upper()]
    q = gguf.quants.quantize(w.astype(np.float32), qt)
    return np.ascontiguousarray(q), gguf.quants.dequantize(q, qt).astype(np.float32).reshape(w.shape)


def _inputs(rng, dt, T, N, K):
    w = (rng.standard_normal((N, K)) * 0.5).astype(np.float32)
    wq, deq = encode(w, dt)
    # rows of different scales, and some blocks with one large outlier (a wide block range)
    x = (rng.standard_normal((T, K)) * rng.uniform(0.01, 10, (T, 1))).astype(np.float32)
    x[rng.random((T, K)) < 0.01] *= 50
    return wq, deq, x


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("T,N,K", SHAPES)
@pytest.mark.parametrize("accumulate", [0, 1])
def test_matches_model_and_float64_bound(rng, dt, T, N, K, accumulate):
    wq, deq, x = _inputs(rng, dt, T, N, K)
    y0 = rng.standard_normal((T, N)).astype(np.float32)
    y = y0.copy() if accumulate else poison(T, N)
    assert call(f"matmul_{dt}", [wq, x, y], {"T": T, "N": N, "K": K, "accumulate": accumulate}) == 0
    model = matmul_q8(wq, dt, x, y0 if accumulate else None)
    np.testing.assert_array_equal(y.view(np.uint32), model.view(np.uint32))
    # distance from float64: quantizing x costs at most d/2 = amax/254 per element (a bound on
    # sum_b amax_b/254 * sum_j |w_j| per output), the float32 sums a few eps of sum|w x|
    ref = (y0.astype(np.float64) if accumulate else 0) + x.astype(np.float64) @ deq.T
    mag = np.abs(x).astype(np.float64) @ np.abs(deq).T + (np.abs(y0) if accumulate else 0)
    err = np.abs(y - ref)
    print(f"{dt} T={T} N={N} K={K}: max |y - f64| / sum|w x| = {np.max(err / mag):.2e}, "
          f"max err / quantization bound = {np.max(err / quantization_bound(x, deq, has_min=dt in MIN_DTS)):.2f}")
    assert (err <= quantization_bound(x, deq, has_min=dt in MIN_DTS) + 16 * F32_EPS * mag).all()


@pytest.mark.parametrize("dt", DTS)
def test_nonfinite_and_zero_blocks(rng, dt):
    """A NaN or inf in x makes that token's outputs NaN (as a float product would); an all-zero
    block contributes nothing; the other tokens are untouched."""
    T, N, K = 4, 24, 128
    wq, _, x = _inputs(rng, dt, T, N, K)
    x[1, 40] = np.nan
    x[2, 100] = np.inf
    x[3, 32:64] = 0.0
    y = poison(T, N)
    assert call(f"matmul_{dt}", [wq, x, y], {"T": T, "N": N, "K": K, "accumulate": 0}) == 0
    assert np.isnan(y[1]).all() and np.isnan(y[2]).all()
    model = matmul_q8(wq, dt, x)
    np.testing.assert_array_equal(y[[0, 3]].view(np.uint32), model[[0, 3]].view(np.uint32))


@pytest.mark.parametrize("dt", DTS)
def test_row_does_not_depend_on_T(rng, dt):
    """A token's row is the same bits alone (T=1), among 5 and among 64 tokens."""
    N, K = 45, 576
    wq, _, x = _inputs(rng, dt, 64, N, K)
    outs = {}
    for T in (1, 5, 64):
        y = poison(T, N)
        assert call(f"matmul_{dt}", [wq, np.ascontiguousarray(x[:T]), y],
                    {"T": T, "N": N, "K": K, "accumulate": 0}) == 0
        outs[T] = y
    np.testing.assert_array_equal(outs[1].view(np.uint32), outs[64][:1].view(np.uint32))
    np.testing.assert_array_equal(outs[5].view(np.uint32), outs[64][:5].view(np.uint32))
    for t in (17, 63):
        alone = poison(1, N)
        assert call(f"matmul_{dt}", [wq, np.ascontiguousarray(x[t:t + 1]), alone],
                    {"T": 1, "N": N, "K": K, "accumulate": 0}) == 0
        np.testing.assert_array_equal(alone.view(np.uint32), outs[64][t:t + 1].view(np.uint32))


_THREADS_SCRIPT = """
import sys
import numpy as np
sys.path.insert(0, {tests!r})
from test_native_kernels import call
d = np.load(sys.argv[1])
out = {{}}
for dt in {dts!r}:
    x, wq = d["x"], d["w_" + dt]
    T, K = x.shape
    N = wq.size // (K // 32 * {{"q8_0": 34, "q4_0": 18, "q4_1": 20, "q5_0": 22, "q5_1": 24}}[dt])
    y = np.full((T, N), np.nan, np.float32)
    assert call("matmul_" + dt, [wq, x, y], {{"T": T, "N": N, "K": K, "accumulate": 0}}) == 0
    out[dt] = y
np.savez(sys.argv[2], **out)
"""


def test_same_bits_with_any_thread_count(rng, tmp_path):
    T, N, K = 64, 1536, 576  # large enough to run on several OpenMP threads
    data = {"x": _inputs(rng, "q8_0", T, N, K)[2]}
    for dt in DTS:
        data["w_" + dt] = _inputs(rng, dt, 1, N, K)[0]
    np.savez(tmp_path / "in.npz", **data)
    script = tmp_path / "run.py"
    script.write_text(_THREADS_SCRIPT.format(tests=os.path.join(ROOT, "tests"), dts=DTS))
    results = []
    for threads in (1, 2, 3):
        env = child_env(OMP_NUM_THREADS=str(threads))
        out = tmp_path / f"out{threads}.npz"
        subprocess.run([sys.executable, str(script), str(tmp_path / "in.npz"), str(out)], env=env, check=True)
        results.append(np.load(out))
    for dt in DTS:
        model = matmul_q8(data["w_" + dt], dt, data["x"])
        for r in results:
            np.testing.assert_array_equal(r[dt].view(np.uint32), model.view(np.uint32))


# ------------------------------------------------------------------ both code paths

_WRAPPED = [("q8dot_" + dt + r, f"xi_q8dot_rows_{dt}{r}") for dt in DTS for r in ("", "_r8")]
_WRAPPED += [("k_" + dt, f"xi_q8dot_rows_{dt}") for dt in ("q4_k", "q5_k", "q6_k")]
_CDEF = "\n".join(f"void {name}(void *w, void *x, void *y, long T, long N, long K, int acc);"
                  for name, _ in _WRAPPED) + "\nint xi_isa_select(int isa);"
_SRC = '#include "xi_common.h"\n' + "\n".join(
    f"void {name}(void *w, void *x, void *y, long T, long N, long K, int acc)"
    f" {{ {fn}(w, x, y, T, N, K, acc); }}" for name, fn in _WRAPPED)


@pytest.fixture(scope="module")
def q8dot_builds(tmp_path_factory):
    """q8dot.c, q8kdot.c and the dot-product paths (q8isa*.c) compiled on their own with -march=x86-64 (the
    portable quantizer, the portable dot products forced) and -march=x86-64-v3 (the AVX2 quantizer,
    the AVX2 dot products forced), the flags of native/build_native.py otherwise."""
    import importlib.util

    import cffi

    native = os.path.join(ROOT, "native")
    mods = {}
    for march in ("x86-64", "x86-64-v3"):
        name = "_q8dot_" + march.replace("-", "_")
        ffi = cffi.FFI()
        ffi.cdef(_CDEF)
        kernels = os.path.join(native, "kernels")
        sources = [os.path.join(kernels, f) for f in sorted(os.listdir(kernels))
                   if f in ("q8dot.c", "q8kdot.c") or (f.startswith("q8isa") and f.endswith(".c"))]
        ffi.set_source(name, _SRC, sources=sources,
                       include_dirs=[native, os.path.join(native, "kernels")],
                       extra_compile_args=["-O3", f"-march={march}", "-fopenmp", "-fno-math-errno",
                                           "-ffp-contract=off", "-std=gnu11"],
                       extra_link_args=["-fopenmp"])
        so = ffi.compile(tmpdir=str(tmp_path_factory.mktemp(name)))
        spec = importlib.util.spec_from_file_location(name, so)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        assert mod.lib.xi_isa_select(0 if march == "x86-64" else 1) == 0  # scalar / avx2
        mods[march] = mod
    return mods


@pytest.mark.parametrize("march", ["x86-64", "x86-64-v3"])
@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("T,N,K", [(1, 96, 576), (6, 40, 160), (64, 33, 1536)])
@pytest.mark.parametrize("layout", ["", "_r8"])
def test_portable_and_avx2_paths_match_model(rng, q8dot_builds, march, dt, T, N, K, layout):
    mod = q8dot_builds[march]
    wq, _, x = _inputs(rng, dt, T, N, K)
    w = _repack(wq, dt, N, K) if layout else wq
    x[0, 5] = np.nan if T > 1 else x[0, 5]
    # rows from 1e-7 to 1e3 times: the f16 scale d = f16(amax / 127) zero, subnormal and normal
    x[1:] *= np.geomspace(1e-7, 1e3, T - 1, dtype=np.float32)[:, None]
    for accumulate in (0, 1):
        y0 = rng.standard_normal((T, N)).astype(np.float32)
        y = y0.copy() if accumulate else poison(T, N)
        getattr(mod.lib, f"q8dot_{dt}{layout}")(mod.ffi.from_buffer(w), mod.ffi.from_buffer(x),
                                                 mod.ffi.from_buffer(y), T, N, K, accumulate)
        model = matmul_q8(wq, dt, x, y0 if accumulate else None)
        np.testing.assert_array_equal(y.view(np.uint32), model.view(np.uint32))


# ------------------------------------------------------------------ the row-interleaved r8 layout

def _repack(wq, dt, N, K):
    out = np.empty(np.asarray(wq).view(np.uint8).size, np.uint8)
    src = np.ascontiguousarray(wq).view(np.uint8)
    assert getattr(lib, f"xi_repack_{dt}_r8")(ffi.from_buffer(src), ffi.from_buffer(out), N, K) == 0
    return out


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("N,K", [(8, 32), (45, 576), (1536, 576), (3, 64)])
def test_repack_matches_model(rng, dt, N, K):
    wq = _inputs(rng, dt, 1, N, K)[0]
    rp = _repack(wq, dt, N, K)
    np.testing.assert_array_equal(rp, repack_r8(wq, dt, N, K))
    if N >= 8:  # the layout differs from the GGUF one where there is a group
        assert (rp != np.ascontiguousarray(wq).view(np.uint8).reshape(-1)).any()


@pytest.mark.parametrize("dt", DTS)
def test_repack_rejects_bad_arguments(dt):
    a = np.zeros(BLOCK_BYTES[dt] * 8, np.uint8)
    b = np.zeros_like(a)
    for N, K in [(-1, 32), (8, 33), (8, -32)]:
        assert getattr(lib, f"xi_repack_{dt}_r8")(ffi.from_buffer(a), ffi.from_buffer(b), N, K) == 1  # XI_EINVAL
    assert getattr(lib, f"xi_repack_{dt}_r8")(ffi.from_buffer(a), ffi.from_buffer(a), 8, 32) == 1  # in place


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("T,N,K", [(1, 576, 576), (1, 45, 576), (5, 200, 576), (64, 192, 576), (7, 50, 4096),
                                   (2, 3, 32), (9, 1536, 576)])
@pytest.mark.parametrize("accumulate", [0, 1])
def test_r8_matches_model(rng, dt, T, N, K, accumulate):
    """matmul_DT_r8 over the repacked bytes gives the numpy model's bits of the GGUF bytes (the same
    integer sums, the same float operations), the rows past the last group of 8 included."""
    wq, deq, x = _inputs(rng, dt, T, N, K)
    y0 = rng.standard_normal((T, N)).astype(np.float32)
    y = y0.copy() if accumulate else poison(T, N)
    rp = _repack(wq, dt, N, K)
    assert call(f"matmul_{dt}_r8", [rp, x, y], {"T": T, "N": N, "K": K, "accumulate": accumulate}) == 0
    model = matmul_q8(wq, dt, x, y0 if accumulate else None)
    np.testing.assert_array_equal(y.view(np.uint32), model.view(np.uint32))
    ref = (y0.astype(np.float64) if accumulate else 0) + x.astype(np.float64) @ deq.T
    mag = np.abs(x).astype(np.float64) @ np.abs(deq).T + (np.abs(y0) if accumulate else 0)
    err = np.abs(y - ref)
    print(f"{dt}_r8 T={T} N={N} K={K}: max err / quantization bound = {np.max(err / quantization_bound(x, deq, has_min=dt in MIN_DTS)):.2f}")
    assert (err <= quantization_bound(x, deq, has_min=dt in MIN_DTS) + 16 * F32_EPS * mag).all()


@pytest.mark.parametrize("dt", DTS)
def test_r8_batched_equals_alone(rng, dt):
    """A (token, row) result of matmul_DT_r8 is the same bits alone (T=1) and among 64 tokens, and
    the same as the GGUF-layout kernel's: it depends on neither the other tokens nor the layout."""
    N, K, T = 77, 576, 64
    wq, _, x = _inputs(rng, dt, T, N, K)
    rp = _repack(wq, dt, N, K)
    batched, plain = poison(T, N), poison(T, N)
    assert call(f"matmul_{dt}_r8", [rp, x, batched], {"T": T, "N": N, "K": K, "accumulate": 0}) == 0
    assert call(f"matmul_{dt}", [wq, x, plain], {"T": T, "N": N, "K": K, "accumulate": 0}) == 0
    np.testing.assert_array_equal(batched.view(np.uint32), plain.view(np.uint32))
    for t in (0, 5, 33, 63):
        alone = poison(1, N)
        assert call(f"matmul_{dt}_r8", [rp, np.ascontiguousarray(x[t:t + 1]), alone],
                    {"T": 1, "N": N, "K": K, "accumulate": 0}) == 0
        np.testing.assert_array_equal(alone.view(np.uint32), batched[t:t + 1].view(np.uint32))


@pytest.mark.parametrize("dt", DTS)
def test_r8_get_rows_and_fused_equal_the_gguf_kernels(rng, dt):
    """get_rows_DT_r8, rmsnorm_matmul_DT_r8 and rmsnorm_matmul_swiglu_DT_r8 over the repacked bytes
    give the bits their GGUF-layout kernels give (rows past the last group of 8 included)."""
    T, N, K = 6, 45, 576
    wq, _, x = _inputs(rng, dt, T, 2 * N, K)
    rp = _repack(wq, dt, 2 * N, K)
    ids = np.array([0, 7, 8, 44, 89, 88, 90, -1], np.int32)  # 90, -1: outside, NaN rows
    got, want = poison(len(ids), K), poison(len(ids), K)
    consts = {"T": len(ids), "dim": K, "vocab": 2 * N}
    assert call(f"get_rows_{dt}_r8", [rp, ids, got], consts) == 0
    assert call(f"get_rows_{dt}", [wq, ids, want], consts) == 0
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.isnan(got[-2:]).all() and np.isfinite(got[:-2]).all()
    norm = rng.uniform(0.5, 2, K).astype(np.float32)
    got, want = poison(T, 2 * N), poison(T, 2 * N)
    consts = {"T": T, "N": 2 * N, "K": K, "accumulate": 0, "eps": 1e-5}
    assert call(f"rmsnorm_matmul_{dt}_r8", [rp, x, norm, got], consts) == 0
    assert call(f"rmsnorm_matmul_{dt}", [wq, x, norm, want], consts) == 0
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    got, want = poison(T, N), poison(T, N)
    consts = {"T": T, "N": N, "K": K, "eps": 1e-5}
    assert call(f"rmsnorm_matmul_swiglu_{dt}_r8", [rp, x, norm, got], consts) == 0
    assert call(f"rmsnorm_matmul_swiglu_{dt}", [wq, x, norm, want], consts) == 0
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.isfinite(got).all()


# ------------------------------------------------------------------ the K-quants (q8kdot.c)

KDTS = ["q4_k", "q5_k", "q6_k"]


def _k_inputs(rng, dt, T, N, K):
    from test_kquant_kernels import weights

    wq, deq = weights(rng, dt, N, K)
    x = (rng.standard_normal((T, K)) * rng.uniform(0.01, 10, (T, 1))).astype(np.float32)
    x[rng.random((T, K)) < 0.01] *= 50
    return wq, deq, x


@pytest.mark.parametrize("dt", KDTS)
@pytest.mark.parametrize("T,N,K", [(1, 64, 256), (5, 33, 512), (9, 20, 1536), (64, 17, 768)])
@pytest.mark.parametrize("accumulate", [0, 1])
def test_k_matches_model_and_float64_bound(rng, dt, T, N, K, accumulate):
    wq, deq, x = _k_inputs(rng, dt, T, N, K)
    y0 = rng.standard_normal((T, N)).astype(np.float32)
    y = y0.copy() if accumulate else poison(T, N)
    assert call(f"matmul_{dt}", [wq, x, y], {"T": T, "N": N, "K": K, "accumulate": accumulate}) == 0
    model = matmul_q8k(wq, dt, x, y0 if accumulate else None)
    np.testing.assert_array_equal(y.view(np.uint32), model.view(np.uint32))
    ref = (y0.astype(np.float64) if accumulate else 0) + x.astype(np.float64) @ deq.T
    mag = np.abs(x).astype(np.float64) @ np.abs(deq).T + (np.abs(y0) if accumulate else 0)
    err, qb = np.abs(y - ref), quantization_bound(x, deq, 256)
    print(f"{dt} T={T} N={N} K={K}: max |y - f64| / sum|w x| = {np.max(err / mag):.2e}, "
          f"max err / quantization bound = {np.max(err / qb):.2f}")
    assert (err <= qb + 16 * F32_EPS * mag).all()


@pytest.mark.parametrize("dt", KDTS)
def test_k_nonfinite_and_zero_blocks(rng, dt):
    T, N, K = 4, 24, 512
    wq, _, x = _k_inputs(rng, dt, T, N, K)
    x[1, 40] = np.nan
    x[2, 300] = -np.inf
    x[3, 256:] = 0.0
    y = poison(T, N)
    assert call(f"matmul_{dt}", [wq, x, y], {"T": T, "N": N, "K": K, "accumulate": 0}) == 0
    assert np.isnan(y[1]).all() and np.isnan(y[2]).all()
    np.testing.assert_array_equal(y[[0, 3]].view(np.uint32), matmul_q8k(wq, dt, x)[[0, 3]].view(np.uint32))


@pytest.mark.parametrize("march", ["x86-64", "x86-64-v3"])
@pytest.mark.parametrize("dt", KDTS)
@pytest.mark.parametrize("T,N,K", [(1, 40, 256), (6, 17, 768)])
def test_k_portable_and_avx2_paths_match_model(rng, q8dot_builds, march, dt, T, N, K):
    mod = q8dot_builds[march]
    wq, _, x = _k_inputs(rng, dt, T, N, K)
    x[0, 5] = np.nan if T > 1 else x[0, 5]
    for accumulate in (0, 1):
        y0 = rng.standard_normal((T, N)).astype(np.float32)
        y = y0.copy() if accumulate else poison(T, N)
        getattr(mod.lib, f"k_{dt}")(mod.ffi.from_buffer(wq), mod.ffi.from_buffer(x), mod.ffi.from_buffer(y),
                                     T, N, K, accumulate)
        np.testing.assert_array_equal(y.view(np.uint32), matmul_q8k(wq, dt, x, y0 if accumulate else None).view(np.uint32))
