"""The cpu kernels of native/kernels/kquant.c: dequantize / get_rows / matmul for q5_0, q5_1, iq4_nl,
the K-quants (q2_k, q3_k, q4_k, q5_k, q6_k), iq4_xs and bf16.

Dequantization is compared bit for bit with gguf-py's ``gguf.quants.dequantize`` on hand-built blocks
(every field set to chosen values: 6-bit scales and mins in both halves of their packing, high bits,
negative and extreme scales, f16 subnormals) and on random blocks; the matmuls against numpy float64
of the dequantized weights on fresh random inputs (outputs poisoned first; q5_0, q5_1, q4_k, q5_k
and q6_k within the bound of their activations' int8 rounding: their bits are tests/test_q8dot.py's),
and a row's result must not depend on T.
"""

import gguf
import numpy as np
import pytest

from _q8dot_model import ACTIVATION_BLOCK, quantization_bound
from test_native_kernels import F32_EPS, bits, call, poison, rng  # noqa: F401  (rng: fixture)

QT = gguf.GGMLQuantizationType
#: type -> (ggml type, elements a block, bytes a block, offsets of the block's f16 scale fields)
TYPES = {
    "q5_0": (QT.Q5_0, 32, 22, (0,)),
    "q5_1": (QT.Q5_1, 32, 24, (0, 2)),
    "iq4_nl": (QT.IQ4_NL, 32, 18, (0,)),
    "q2_k": (QT.Q2_K, 256, 84, (80, 82)),
    "q3_k": (QT.Q3_K, 256, 110, (108,)),
    "q4_k": (QT.Q4_K, 256, 144, (0, 2)),
    "q5_k": (QT.Q5_K, 256, 176, (0, 2)),
    "q6_k": (QT.Q6_K, 256, 210, (208,)),
    "iq4_xs": (QT.IQ4_XS, 256, 136, (0,)),
}


def random_blocks(rng, dt, nblocks, scale=(1e-3, 1e-1)):
    """Random bytes with each f16 scale field set to a finite value of random sign and magnitude in
    ``scale``: uint8 (nblocks, block bytes)."""
    _, _, nb, offs = TYPES[dt]
    raw = rng.integers(0, 256, (nblocks, nb), dtype=np.uint8)
    for off in offs:
        d = (rng.uniform(*scale, nblocks) * rng.choice([-1, 1], nblocks)).astype(np.float16)
        raw[:, off:off + 2] = d.view(np.uint8).reshape(nblocks, 2)
    return raw


def gguf_deq(raw, dt):
    return gguf.quants.dequantize(raw, TYPES[dt][0]).astype(np.float32).reshape(-1)


def dequantize(raw, dt):
    n = raw.shape[0] * TYPES[dt][1]
    out = poison(n)
    assert call(f"dequantize_{dt}", [np.ascontiguousarray(raw), out], {"n": n}) == 0
    return out


def _f16(*v):
    return np.array(v, np.float16).view(np.uint8)


def hand_blocks(dt):
    """Blocks whose every field takes chosen values: scale fields at a negative, the largest half,
    a subnormal and a plain value (one block each); quant fields cover every code; packed 6-bit
    scales/mins take 0, 63 and values whose high bits differ, in both halves of the packing."""
    _, qk, nb, offs = TYPES[dt]
    scales16 = [(-0.5, 0.25), (65504.0, -65504.0), (6e-8, 3e-5), (1.0, 2.0)]
    blocks = []
    for k, pair in enumerate(scales16):
        blk = np.zeros(nb, np.uint8)
        ramp = (np.arange(nb) * 37 + 11 * k).astype(np.uint8)  # every byte value mod 256, shifted per block
        blk[:] = ramp
        if dt in ("q4_k", "q5_k"):
            # 8 groups: (scale, min) = (63, 0), (0, 63), (1, 62), (32, 31) | (48, 17), (15, 60), (5, 10), (63, 63)
            sc = [63, 0, 1, 32, 48, 15, 5, 63][::1 if k % 2 == 0 else -1]
            mn = [0, 63, 62, 31, 17, 60, 10, 63][::1 if k % 2 == 0 else -1]
            s = np.zeros(12, np.uint8)
            for j in range(4):
                s[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6)
                s[j + 4] = (mn[j] & 63) | ((mn[j + 4] >> 4) << 6)
                s[j + 8] = (sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4)
            blk[4:16] = s
        for off, v in zip(offs, pair):
            blk[off:off + 2] = _f16(v)
        blocks.append(blk)
    return np.stack(blocks)


@pytest.mark.parametrize("dt", sorted(TYPES))
def test_hand_built_blocks(dt):
    raw = hand_blocks(dt)
    want = gguf_deq(raw, dt)
    got = dequantize(raw, dt)
    assert np.array_equal(bits(got), bits(want))
    # the blocks reach the extremes of their codes: every block has distinct values, signs of both kinds
    assert np.isfinite(want).any() and (want > 0).any() and (want < 0).any()
    out = poison(len(raw), TYPES[dt][1])
    ids = np.arange(len(raw), dtype=np.int32)[::-1].copy()
    assert call(f"get_rows_{dt}", [raw, ids, out], {"T": len(raw), "dim": TYPES[dt][1], "vocab": len(raw)}) == 0
    assert np.array_equal(bits(out), bits(want.reshape(len(raw), -1)[ids]))


def test_q4_k_scale_packing():
    """The 6-bit scales and mins of q4_k's 12 bytes, element by element against ggml's
    get_scale_min_k4 (ggml-quants.c) written out: group j < 4 from the low 6 bits of bytes j, j + 4;
    j >= 4 from the nibbles of byte j + 4 and the top 2 bits of bytes j - 4, j."""
    raw = hand_blocks("q4_k")[:1]
    q = raw[0, 4:16]
    d, dmin = np.float32(-0.5), np.float32(0.25)
    qs = raw[0, 16:]
    want = np.empty(256, np.float32)
    for j in range(8):
        if j < 4:
            sc, m = q[j] & 63, q[j + 4] & 63
        else:
            sc, m = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)
        for l in range(32):
            nib = (qs[32 * (j // 2) + l] >> (4 * (j % 2))) & 15
            want[32 * j + l] = np.float32(d * np.float32(sc)) * np.float32(nib) - np.float32(dmin * np.float32(m))
    assert sorted({int(q[j] & 63) for j in range(4)}) == [0, 1, 32, 63]  # chosen values reached
    assert np.array_equal(bits(dequantize(raw, "q4_k")), bits(want))


@pytest.mark.parametrize("dt", sorted(TYPES))
@pytest.mark.parametrize("nblocks", [1, 37, 5000])
def test_random_blocks(rng, dt, nblocks):
    raw = random_blocks(rng, dt, nblocks, scale=(1e-7, 6e4))
    assert np.array_equal(bits(dequantize(raw, dt)), bits(gguf_deq(raw, dt)))


def test_bf16_all_values():
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16).reshape(2048, 32)
    want = gguf.quants.dequantize(h.view(np.uint8), QT.BF16).astype(np.float32)
    out = poison(2048, 32)
    ids = np.arange(2048, dtype=np.int32)
    assert call("get_rows_bf16", [h, ids, out], {"T": 2048, "dim": 32, "vocab": 2048}) == 0
    assert np.array_equal(bits(out), bits(want.reshape(2048, 32)))


def weights(rng, dt, N, K):
    """(raw weights to pass the kernel, their float64 values)."""
    if dt == "bf16":
        w = (rng.standard_normal((N, K)) * 0.5).astype(np.float32)
        raw = gguf.quants.quantize(w, QT.BF16).view(np.uint16).reshape(N, K)
        return raw, gguf.quants.dequantize(raw.view(np.uint8), QT.BF16).astype(np.float64).reshape(N, K)
    qk = TYPES[dt][1]
    raw = random_blocks(rng, dt, N * K // qk).reshape(N, -1)
    return raw, gguf_deq(raw.reshape(-1, TYPES[dt][2]), dt).astype(np.float64).reshape(N, K)


MM_TYPES = sorted(TYPES) + ["bf16"]


@pytest.mark.parametrize("dt", MM_TYPES)
@pytest.mark.parametrize("T,N,K", [(1, 64, 256), (3, 33, 512), (5, 100, 1536), (64, 48, 768), (0, 8, 256)])
@pytest.mark.parametrize("accumulate", [0, 1])
def test_matmul(rng, dt, T, N, K, accumulate):
    wq, deq = weights(rng, dt, N, K)
    x = rng.standard_normal((T, K)).astype(np.float32)
    y = rng.standard_normal((T, N)).astype(np.float32) if accumulate else poison(T, N)
    y0 = y.astype(np.float64) if accumulate else 0.0
    assert call(f"matmul_{dt}", [wq, x, y], {"T": T, "N": N, "K": K, "accumulate": accumulate}) == 0
    ref = y0 + x.astype(np.float64) @ deq.T
    mag = np.abs(x).astype(np.float64) @ np.abs(deq).T + (np.abs(y0) if accumulate else 0)
    assert np.isfinite(y).all()
    err = np.abs(y - ref)
    bound = 8 * F32_EPS * mag + 1e-30
    if dt in ACTIVATION_BLOCK:  # x rounded to int8 per block first (q8dot.c, q8kdot.c; bit-exact: test_q8dot.py)
        bound = bound + quantization_bound(x, deq, ACTIVATION_BLOCK[dt])
    if T:
        print(f"{dt} T={T} N={N} K={K}: max |err| {err.max():.3g}, max err/bound {np.max(err / bound):.3g}")
    assert (err <= bound).all(), f"max err/bound {np.max(err / bound)}"


@pytest.mark.parametrize("dt", MM_TYPES)
def test_matmul_tail_and_fused(rng, dt):
    """rmsnorm_matmul_DT equals rmsnorm then matmul_DT bit for bit; bf16 takes any K."""
    T, N, K = 3, 20, (TYPES[dt][1] * 2 if dt in TYPES else 70)
    wq, _ = weights(rng, dt, N, K) if dt in TYPES else (None, None)
    if dt == "bf16":
        w = (rng.standard_normal((N, K)) * 0.5).astype(np.float32)
        wq = gguf.quants.quantize(w, QT.BF16).view(np.uint16).reshape(N, K)
    x = rng.standard_normal((T, K)).astype(np.float32)
    norm = rng.standard_normal(K).astype(np.float32)
    h = poison(T, K)
    assert call("rmsnorm", [x, norm, h], {"rows": T, "dim": K, "eps": 1e-5}) == 0
    y1, y2 = poison(T, N), poison(T, N)
    assert call(f"matmul_{dt}", [wq, h, y1], {"T": T, "N": N, "K": K, "accumulate": 0}) == 0
    assert call(f"rmsnorm_matmul_{dt}", [wq, x, norm, y2], {"T": T, "N": N, "K": K, "accumulate": 0, "eps": 1e-5}) == 0
    assert np.array_equal(bits(y1), bits(y2))


@pytest.mark.parametrize("dt", MM_TYPES)
def test_matmul_row_does_not_depend_on_T(rng, dt):
    N, T, K = 37, 9, 768
    wq, _ = weights(rng, dt, N, K)
    x = rng.standard_normal((T, K)).astype(np.float32)
    batched = poison(T, N)
    assert call(f"matmul_{dt}", [wq, x, batched], {"T": T, "N": N, "K": K, "accumulate": 0}) == 0
    for t in range(T):
        alone = poison(1, N)
        assert call(f"matmul_{dt}", [wq, np.ascontiguousarray(x[t:t + 1]), alone],
                    {"T": 1, "N": N, "K": K, "accumulate": 0}) == 0
        assert np.array_equal(bits(alone[0]), bits(batched[t]))


@pytest.mark.parametrize("dt", sorted(TYPES))
def test_block_size_is_checked(dt):
    qk, nb = TYPES[dt][1], TYPES[dt][2]
    raw = np.zeros((1, nb), np.uint8)
    x, y = np.zeros((1, qk), np.float32), poison(1, 1)
    for K in (qk // 2, qk + 16):  # XI_EINVAL
        assert call(f"matmul_{dt}", [raw, x, y], {"T": 1, "N": 1, "K": K, "accumulate": 0}) == 1
        assert call(f"rmsnorm_matmul_{dt}", [raw, x, np.ones(qk, np.float32), y],
                    {"T": 1, "N": 1, "K": K, "accumulate": 0, "eps": 1e-5}) == 1
        assert call(f"dequantize_{dt}", [raw, poison(2 * qk)], {"n": K}) == 1
        assert call(f"get_rows_{dt}", [raw, np.zeros(1, np.int32), poison(2 * qk)], {"T": 1, "dim": K, "vocab": 1}) == 1
