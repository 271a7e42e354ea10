"""The matrix kernels (``matmul_DT``, ``rmsnorm_matmul_DT``, ``rmsnorm_matmul_swiglu_DT``) of the
types of shaders/xi_kquant.cuh (q5_0, q5_1, iq4_nl, the K-quants, iq4_xs, bf16), which on cuda run
the tuned kernels of shaders/xi_mvc.cuh and xi_mvt.cuh through their decoders, on each device present:

* against numpy float64 of the gguf-dequantized weights on fresh random blocks and inputs (outputs
  poisoned with NaN first), at T = 1 (cuda: the staged kernel), 3 and 8 (staged), 17 and 64 (the
  ``_t`` entries), within a bound that grows with the length of the longest f32 sum;
* a token's output row is bit-identical whatever T (alone, or among 3, 8, 17 or 64 tokens);
* rows too long for the staged kernel's stage (cuda: ``_launch.mvc_rows`` == 0) take its fallbacks
  (xi_mv1 at T == 1, xi_quant.cuh's warp-per-row kernel or the element-by-element one at
  1 < T <= 8, the ``_t`` entry above) and still match float64; T == 1 and T == 17 agree bit for bit.
"""

import numpy as np
import pytest
from _kernel_refs import KQUANT_BLOCKS as TYPES  # type -> (ggml type, elements, bytes a block, f16 scale offsets)
from _kernel_refs import activation_quantization_bound, row_numerics
from _kernel_refs import random_blocks as weights  # (uint8 (rows, row bytes), float64 gguf-dequantized)

from xinfer_async.backends.cuda._launch import STAGED1_TYPES, mvc_rows

KINDS = ["matmul", "rmsnorm_matmul", "rmsnorm_matmul_swiglu"]
T_RUNS = [1, 3, 8, 17, 64]
EPS32 = float(np.finfo(np.float32).eps)
EPS = 1e-5  # rmsnorm eps


def nan(*shape):
    return np.full(shape, np.nan, np.float32)


def reference(kind, x, norm, exact, N, device_name, dt):
    """(float64 (T, N) result, float64 (T, N) bound on its f32 error): the bound is (K / 32 + 48) eps
    of sum |w h| -- the longest chain of f32 roundings any of the kernels has (a lane's running sum
    over K / 32 elements, then a warp sum), plus the rmsnorm scale's -- plus, where the cpu backend
    quantizes h to int8 blocks (q5_0, q5_1, q4_k, q5_k, q6_k: llama.cpp's numerics),
    ``activation_quantization_bound``, and through silu(g) * u for SwiGLU (|silu'| < 1.1)."""
    K = x.shape[1]
    x64 = x.astype(np.float64)
    h = x64 if kind == "matmul" else x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + np.float64(np.float32(EPS))) * norm
    gamma = (K / 32 + 48) * EPS32
    ref, mag = h @ exact.T, gamma * (np.abs(h) @ np.abs(exact).T) + 1e-30
    mag = mag + activation_quantization_bound(device_name, dt, h.astype(np.float32), exact)
    if kind != "rmsnorm_matmul_swiglu":
        return ref, mag
    g, u, mg, mu = ref[:, :N], ref[:, N:], mag[:, :N], mag[:, N:]
    with np.errstate(over="ignore"):  # silu of a large negative gate: exp overflows, the product is -0
        silu = g / (1.0 + np.exp(-g))
    return silu * u, 1.1 * mg * (np.abs(u) + mu) + np.abs(silu) * mu + 1e-30


async def run_all(dev, kind, dt, raw, x, norm, N, t_runs):
    """``kind`` of the (rows, K) weight ``raw`` over the first T tokens of x for each T of
    ``t_runs``, all in one dispatch list; returns the (T, N) outputs."""
    K = x.shape[1]
    wb = dev.upload(raw, (raw.shape[0], K), dt)
    xb, nb = dev.upload(x), dev.upload(norm)
    ex = dev.executor()
    outs = []
    for t in t_runs:
        yb = dev.upload(nan(t, N))
        consts = {"T": t, "N": N, "K": K}
        if kind != "rmsnorm_matmul_swiglu":
            consts["accumulate"] = 0
        if kind != "matmul":
            consts["eps"] = EPS
        xv = xb.view(0, t * K * 4)
        ex.dispatch(f"{kind}_{dt}", [wb, xv, yb] if kind == "matmul" else [wb, xv, nb, yb], consts)
        outs.append((ex.download(yb), t))
    await ex.submit_and_wait()
    return [rb.numpy((t, N), np.float32) for rb, t in outs]


def check(got, ref, bound, what):
    assert np.isfinite(got).all(), f"{what}: non-finite values"
    err = np.abs(got.astype(np.float64) - ref)
    worst = np.unravel_index(np.argmax(err / bound), err.shape)
    assert (err <= bound).all(), f"{what}: error {err[worst]:.3g} > bound {bound[worst]:.3g} at {worst}"


def activations(rng, T, K):
    """x (T, K), rows at scales from 0.1 to 10 (the first three 1, 1e-3, 50)."""
    scales = rng.uniform(0.1, 10.0, T)
    scales[:3] = [1.0, 1e-3, 50.0]
    return (rng.standard_normal((T, K)) * scales[:, None]).astype(np.float32)


#: (K, N): K of 3 super-blocks and odd N (a partial last CTA); 9 super-blocks over 70 rows
SHAPES = [(768, 37), (2304, 70)]


@pytest.mark.parametrize("K,N", SHAPES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dt", list(TYPES))
async def test_matrix_kernels_vs_float64_and_T(devices, rng, dt, kind, K, N):
    """Every T of T_RUNS within ``reference``'s bound of float64, and each token's row bit-identical
    to the same token's row at T = 64 (a batched decode step equals each request's step alone)."""
    T = max(T_RUNS)
    rows = 2 * N if kind == "rmsnorm_matmul_swiglu" else N
    raw, exact = weights(rng, dt, rows, K)
    x, norm = activations(rng, T, K), rng.standard_normal(K).astype(np.float32)
    got = await run_all(devices, kind, dt, raw, x, norm, N, T_RUNS)
    # each run against the widest run of the same arithmetic (cuda's integer decode entry at T <= 8:
    # ``row_numerics``; the T = 8 run then); the bound of float64 of each run's own T (its activations
    # quantized or not: ``activation_quantization_bound``)
    num = [row_numerics(devices.name, kind, dt, N, K, t) for t in T_RUNS]
    for t, y, n in zip(T_RUNS, got, num):
        ref, bound = reference(kind, x[:t], norm, exact, N, devices.name, dt)
        check(y, ref, bound, f"{devices.name} {kind}_{dt} T={t}")
        w = max(i for i, m in enumerate(num) if m == n)
        assert T_RUNS[w] >= 8  # the widest of its kind: 8 or 64 tokens
        np.testing.assert_array_equal(y.view(np.uint32), got[w][:t].view(np.uint32),
                                      err_msg=f"{devices.name} {kind}_{dt}: tokens 0..{t - 1} at T={t} vs T={T_RUNS[w]}")


def long_k(dt, glu):
    """The shortest K (a multiple of the block and of 32, for the vector paths) whose row does not fit
    the staged kernel's stage (half of it with GLU: one row of each region must fit)."""
    _, qk, nb, _ = TYPES[dt]
    step = max(qk, 32)
    stage = (32768 >> int(glu)) - 32
    return (stage // (nb * step // qk) + 1) * step


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dt", list(TYPES))
async def test_rows_past_the_stage(devices, rng, dt, kind):
    """Rows longer than the staged kernel's stage: T = 1, 3, 17 within the bound of float64 (the
    fallback kernels), T = 1 and 17 bit for bit (xi_mv1 and the ``_t`` entry sum in one order)."""
    glu = kind == "rmsnorm_matmul_swiglu"
    K, N = long_k(dt, glu), 9
    assert dt in STAGED1_TYPES and mvc_rows(dt, N, K, 1, glu) == 0 and mvc_rows(dt, N, K, 3, glu) == 0
    assert mvc_rows(dt, N, K - max(TYPES[dt][1], 32), 1, glu) > 0  # a step less fits: K is the limit
    raw, exact = weights(rng, dt, 2 * N if glu else N, K)
    x, norm = activations(rng, 17, K), rng.standard_normal(K).astype(np.float32)
    got = await run_all(devices, kind, dt, raw, x, norm, N, [1, 3, 17])
    for t, y in zip([1, 3, 17], got):
        ref, bound = reference(kind, x[:t], norm, exact, N, devices.name, dt)
        check(y, ref, bound, f"{devices.name} {kind}_{dt} K={K} T={t}")
    # T = 17 where T = 1 runs the f32 kernels; T = 3 where it runs cuda's integer decode entry (row_numerics)
    w = 1 if row_numerics(devices.name, kind, dt, N, K, 1) == "pq" else 2
    np.testing.assert_array_equal(got[0].view(np.uint32), got[w][:1].view(np.uint32),
                                  err_msg=f"{devices.name} {kind}_{dt} K={K}: token 0 at T=1 vs T={[1, 3, 17][w]}")


@pytest.mark.parametrize("kind", ["matmul", "rmsnorm_matmul"])
@pytest.mark.parametrize("dt", list(TYPES))
async def test_one_token_wide_weight(devices, rng, dt, kind):
    """N >= 16384 (an output layer): at T == 1 the staged kernel takes up to 32 rows a block (cuda:
    32 for most types at K = 1280, 16 for q6_k, 8 for bf16); within the bound of float64 at T = 1 and
    2, and token 0 bit-identical in both."""
    K, N = 1280, 16391
    raw, exact = weights(rng, dt, N, K)
    x, norm = activations(rng, 3, K)[:2], rng.standard_normal(K).astype(np.float32)
    got = await run_all(devices, kind, dt, raw, x, norm, N, [1, 2])
    ref, bound = reference(kind, x, norm, exact, N, devices.name, dt)
    for t, y in zip([1, 2], got):
        check(y, ref[:t], bound[:t], f"{devices.name} {kind}_{dt} N={N} T={t}")
    np.testing.assert_array_equal(got[0].view(np.uint32), got[1][:1].view(np.uint32),
                                  err_msg=f"{devices.name} {kind}_{dt} N={N}: token 0 at T=1 vs T=2")


@pytest.mark.parametrize("kind", ["matmul", "rmsnorm_matmul_swiglu"])
@pytest.mark.parametrize("dt", ["q4_k", "q6_k", "q5_0"])
async def test_tiled_entry_from_two_tokens(devices, rng, dt, kind, monkeypatch):
    """XINFER_KQ_TILED_MIN_T=1 (cuda: the ``_t`` entry at every T > 1, read when the kernel loads):
    the same float64 bound and the same bits whatever T as the default launch policy."""
    monkeypatch.setenv("XINFER_KQ_TILED_MIN_T", "1")
    K, N, T = 768, 37, 8
    raw, exact = weights(rng, dt, 2 * N if kind == "rmsnorm_matmul_swiglu" else N, K)
    x, norm = activations(rng, T, K), rng.standard_normal(K).astype(np.float32)
    got = await run_all(devices, kind, dt, raw, x, norm, N, [1, 2, 5, 8])
    ref, bound = reference(kind, x, norm, exact, N, devices.name, dt)
    for t, y in zip([1, 2, 5, 8], got):
        check(y, ref[:t], bound[:t], f"{devices.name} {kind}_{dt} T={t}")
        np.testing.assert_array_equal(y.view(np.uint32), got[-1][:t].view(np.uint32),
                                      err_msg=f"{devices.name} {kind}_{dt}: T={t} vs T=8")


def test_launch_policy_of_the_kquant_types():
    """Pure launch arithmetic (no device): the staged entry at T == 1 with up to 32 rows a block where
    N >= 16384, 8 at T > 1; rows past the stage at T == 1 take xi_mv1's grid (a row a warp); the
    tiled entry above 8 tokens, or above XINFER_KQ_TILED_MIN_T; a bad value is refused by name."""
    from xinfer_async.backends.cuda._launch import kq_tiled_min_t, matmul_launch

    c = {"T": 1, "N": 262144, "K": 640, "accumulate": 0}
    assert matmul_launch(c, "q6_k", "matmul") == ((262144 // 32, 1, 1), (256, 1, 1), 0, "")
    assert matmul_launch(c, "q4_1", "matmul")[0] == (262144 // 16, 1, 1)  # xi_mv1: 2 rows a warp
    assert matmul_launch(dict(c, T=5), "q6_k", "matmul")[0] == (262144 // 8, 1, 1)
    long_row = dict(c, N=100, K=long_k("q4_k", False))  # 2 MB and more: the pipelined `_p` by default
    # a device whose blocks opt in to 100 KB: a token's codes beside _pq's stages do not fit
    assert matmul_launch(long_row, "q4_k", "matmul", mvp=False, pq_max=100 * 1024)[0] == (13, 1, 1)
    assert matmul_launch(long_row, "q4_k", "matmul", pq_max=100 * 1024)[3] == "_p"
    assert matmul_launch(long_row, "q4_k", "matmul")[3] == "_pq"  # the H200's 226 KB: they do
    assert matmul_launch(dict(c, K=4096), "q4_k", "matmul")[3] == "_pq"  # the integer decode entry (T <= 8)
    assert matmul_launch(dict(c, T=9), "q4_k", "matmul")[3] == "_t"
    assert matmul_launch(dict(c, T=2), "q4_k", "matmul")[3] == ""
    assert matmul_launch(dict(c, T=2), "q4_k", "matmul", kq_min_t=1)[3] == "_t"
    assert matmul_launch(dict(c, T=2), "q4_1", "matmul", kq_min_t=1)[3] == ""  # the knob is the K types'
    assert kq_tiled_min_t({}) == 8 and kq_tiled_min_t({"XINFER_KQ_TILED_MIN_T": " 3 "}) == 3
    for bad in ("0", "9", "x", "-1"):
        with pytest.raises(ValueError, match=f"XINFER_KQ_TILED_MIN_T='{bad}' is not an integer from 1 to 8"):
            kq_tiled_min_t({"XINFER_KQ_TILED_MIN_T": bad})
