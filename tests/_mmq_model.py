"""numpy model of the exact arithmetic of the cuda integer matrix kernels (shaders/xi_mmq.cuh, the
``_mmq`` and ``_q1`` entries of matmul_DT / rmsnorm_matmul_DT / rmsnorm_matmul_swiglu_DT for q4_0,
q4_1 and q8_0 weights), llama.cpp's MMQ numerics made order-exact:

- activations h (T, K) float32 (x, or with NORM its rmsnorm ``rmsnorm_h``) quantized per block of
  32 (``quantize_q8_1``): amax = max |h|, d = amax / 127, q = round-half-away-from-zero(h * (1 / d))
  (all float32, correctly rounded), s = d * float(sum q); amax == 0 gives q = 0, d = s = 0;
- per (token, row, block b): the exact integer sum isum of weight code * q (q4_0 codes q - 8, q4_1
  codes 0..15, q8_0 int8), then f_b = (dw * d) * float(isum), q4_1 adding mw * s (float32, each
  product and sum rounded once, no fused multiply-add);
- f_b summed in block order from 0 within segments of ``SEG_BLOCKS`` blocks, the segment sums in
  segment order from 0 (``matmul``); nothing depends on T or on the other rows and tokens.

The kernels must equal this bit for bit (tests/test_mmq.py); the silu of the fused SwiGLU kernel
uses the device's expf, so that one step is compared to ulps, not bits.

The decode kernel ``_pq`` (shaders/xi_mvq.cuh) uses the same quantized activations and, per block,
the terms of ``block_terms`` (the K-quants' codes and scales from ``kquant_codes``), summed in its
own order: lane l of a warp adds blocks l, l + 32, ... in order, then the warp sum (``mvq_matmul``)."""

from __future__ import annotations

import numpy as np
from _q8dot_model import BLOCK_BYTES, weight_codes  # the GGUF blocks' codes and scales, as the cpu int8 model reads them

F32 = np.float32
#: blocks of 32 a segment (XI_MMQ_SEG_BLOCKS in shaders/xi_mmq.cuh): K alone sets the segments
SEG_BLOCKS = 16


def round_half_away(v):
    """float32 array -> float64 integers, ties away from zero (CUDA's roundf), exact: in float64
    |v| + 0.5 is exact for every float32 |v| < 2^29."""
    a = np.abs(v.astype(np.float64))
    return np.copysign(np.floor(a + 0.5), v)


def quantize_q8_1(h):
    """h float32 (T, K), K % 32 == 0 -> (q int64 (T, K/32, 32), d float32 (T, K/32), s float32
    (T, K/32)) as the kernels quantize a token tile (finite h assumed)."""
    T, K = h.shape
    hb = np.asarray(h, F32).reshape(T, K // 32, 32)
    amax = np.abs(hb).max(-1).astype(F32)
    d = (amax / F32(127)).astype(F32)
    with np.errstate(divide="ignore"):
        inv = np.where(d > 0, (F32(1) / d).astype(F32), F32(0)).astype(F32)
    q = round_half_away((hb * inv[..., None]).astype(F32)).astype(np.int64)
    s = (d * q.sum(-1).astype(F32)).astype(F32)
    return q, d, s


def warp_sum(v):
    """The xor-butterfly warp sum (offsets 16, 8, 4, 2, 1) of v (..., 32) float32: pairs (i, i + 16)
    first, then (i, i + 8), ...; every lane of the warp gets this value."""
    v = np.asarray(v, F32)
    for o in (16, 8, 4, 2, 1):
        v = (v[..., :o] + v[..., o:2 * o]).astype(F32)
    return v[..., 0]


def rmsnorm_inv(x, eps):
    """1 / sqrt(mean(x^2) + eps) of each row of x float32 (T, K), K % 4 == 0, as xi_mmq_inv: lane l
    of a warp adds ((a*a + b*b) + (c*c + d*d)) of float4s l, l + 32, ... in order, then a warp sum,
    then ss / K + eps, sqrt, 1 / . (each operation rounded to float32)."""
    T, K = x.shape
    x4 = np.asarray(x, F32).reshape(T, K // 4, 4)
    sq = (x4 * x4).astype(F32)
    quad = ((sq[..., 0] + sq[..., 1]).astype(F32) + (sq[..., 2] + sq[..., 3]).astype(F32)).astype(F32)  # (T, K/4)
    lanes = np.zeros((T, 32), F32)
    for i in range(K // 4):
        lanes[:, i % 32] = (lanes[:, i % 32] + quad[:, i]).astype(F32)
    ss = warp_sum(lanes)
    mean = (ss / F32(K)).astype(F32)
    return (F32(1) / np.sqrt((mean + F32(eps)).astype(F32))).astype(F32)


def rmsnorm_inv_cta(x, eps):
    """1 / sqrt(mean(x^2) + eps) of each row of x float32 (T, K), K % 4 == 0, as the ``_pq`` kernel's
    CTA of 256 threads (xi_mvq_inv): thread j adds ((a*a + b*b) + (c*c + d*d)) of float4s j, j + 256,
    ... in order, then each warp's ``warp_sum``, then the 8 warp sums in warp order, then ss / K +
    eps, sqrt, 1 / . (each operation rounded to float32)."""
    T, K = x.shape
    x4 = np.asarray(x, F32).reshape(T, K // 4, 4)
    sq = (x4 * x4).astype(F32)
    quad = ((sq[..., 0] + sq[..., 1]).astype(F32) + (sq[..., 2] + sq[..., 3]).astype(F32)).astype(F32)
    thr = np.zeros((T, 256), F32)
    for i0 in range(0, K // 4, 256):
        part = quad[:, i0:i0 + 256]
        thr[:, :part.shape[1]] = (thr[:, :part.shape[1]] + part).astype(F32)
    warps = warp_sum(thr.reshape(T, 8, 32))  # (T, 8)
    ss = warps[:, 0]
    for w in range(1, 8):
        ss = (ss + warps[:, w]).astype(F32)
    mean = (ss / F32(K)).astype(F32)
    return (F32(1) / np.sqrt((mean + F32(eps)).astype(F32))).astype(F32)


def rmsnorm_h(x, norm, eps, inv_of=rmsnorm_inv):
    """h = (x * inv) * norm float32 (T, K), inv = ``inv_of(x, eps)`` (``rmsnorm_inv``: the ``_mmq`` /
    ``_q1`` kernels'; ``rmsnorm_inv_cta``: ``_pq``'s)."""
    inv = inv_of(x, eps)
    return ((np.asarray(x, F32) * inv[:, None]).astype(F32) * np.asarray(norm, F32)[None, :]).astype(F32)


#: bytes of a 256-element super-block of the K-quants (GGUF layout)
KQUANT_BYTES = {"q4_k": 144, "q5_k": 176, "q6_k": 210}
#: bytes a row of 32 elements of each block type (rows of K elements: K / 32 times this, the K-quants' / 8)
ROW_BYTES_32 = {**BLOCK_BYTES, **{k: v / 8 for k, v in KQUANT_BYTES.items()}}


def _scale_min_k4(sc12):
    """The 6-bit sub-block scales and mins (..., 8) of the K-quants' 12 packed bytes (..., 12)
    (llama.cpp get_scale_min_k4): j < 4: s[j] & 63, s[j + 4] & 63; else (s[j + 4] & 15) | (s[j - 4]
    >> 6) << 4 and (s[j + 4] >> 4) | (s[j] >> 6) << 4."""
    s = sc12.astype(np.int64)
    sc = np.concatenate([s[..., 0:4] & 63, (s[..., 8:12] & 15) | ((s[..., 0:4] >> 6) << 4)], -1)
    mn = np.concatenate([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], -1)
    return sc, mn


def kquant_codes(wq, dt, N, K):
    """GGUF bytes of an (N, K) q4_k / q5_k / q6_k matrix -> (codes int64 (N, K/32, 32) in element
    order, dw float32 (N, K/32), mw float32 (N, K/32) or None, sub-block scales int64 (N, K/32, 2) or
    None) as the ``_pq`` kernel decodes a block j of a super-block: q4_k, q5_k: codes 0..15 (0..31),
    dw = d * sc_j, mw = -(dmin * m_j) (exact in float32); q6_k: codes q - 32, dw = d, scales (sc of
    elements 0..15, sc of 16..31) int8. The weight is dw * code + mw (q6_k: dw * sc * code)."""
    blk = np.ascontiguousarray(wq).view(np.uint8).reshape(N, K // 256, KQUANT_BYTES[dt])
    nsb = K // 256
    if dt in ("q4_k", "q5_k"):
        d = blk[..., 0:2].copy().view(np.float16)[..., 0].astype(F32)
        dmin = blk[..., 2:4].copy().view(np.float16)[..., 0].astype(F32)
        sc, mn = _scale_min_k4(blk[..., 4:16])  # (N, nsb, 8)
        qs = blk[..., 16:144] if dt == "q4_k" else blk[..., 48:176]
        qs = qs.reshape(N, nsb, 4, 32).astype(np.int64)  # pair p: sub-blocks 2p (low nibbles), 2p + 1 (high)
        codes = np.stack([qs & 15, qs >> 4], 3).reshape(N, nsb, 8, 32)
        if dt == "q5_k":
            qh = blk[..., 16:48].astype(np.int64)  # (N, nsb, 32): bit j of byte e is element e of sub-block j
            codes = codes | (((qh[:, :, None, :] >> np.arange(8)[None, None, :, None]) & 1) << 4)
        dw = (d[..., None] * sc.astype(F32)).astype(F32)
        mw = (-(dmin[..., None] * mn.astype(F32))).astype(F32)
        return codes.reshape(N, K // 32, 32), dw.reshape(N, -1), mw.reshape(N, -1), None
    assert dt == "q6_k", dt
    ql = blk[..., 0:128].reshape(N, nsb, 2, 2, 32).astype(np.int64)  # (half, k4 & 1, element)
    qh = blk[..., 128:192].reshape(N, nsb, 2, 32).astype(np.int64)  # (half, element)
    scales = blk[..., 192:208].copy().view(np.int8).astype(np.int64).reshape(N, nsb, 2, 4, 2)  # (half, k4, lo/hi)
    d = blk[..., 208:210].copy().view(np.float16)[..., 0].astype(F32)
    codes = np.empty((N, nsb, 2, 4, 32), np.int64)
    for k4 in range(4):
        codes[:, :, :, k4] = (((ql[:, :, :, k4 & 1] >> (4 * (k4 >> 1))) & 15) | (((qh >> (2 * k4)) & 3) << 4)) - 32
    dw = np.repeat(d, 8, axis=-1)
    return codes.reshape(N, K // 32, 32), dw.reshape(N, -1), None, scales.reshape(N, K // 32, 2)


def block_codes(wq, dt, N, K):
    """(codes int64 (N, K/32, 32), dw float32 (N, K/32), mw float32 or None, q6_k's scales or None) of
    any type the integer kernels take: q4_0, q4_1, q5_0, q8_0 (``weight_codes``) and ``kquant_codes``."""
    if dt in KQUANT_BYTES:
        return kquant_codes(wq, dt, N, K)
    codes, dw, mw = weight_codes(wq, dt, N, K)
    return codes, dw, mw, None


def rows_of(wq, dt, K):
    """Rows of a matrix of GGUF bytes wq, K elements a row."""
    return int(round(np.asarray(wq).view(np.uint8).size / (K // 32 * ROW_BYTES_32[dt])))


def block_terms(wq, dt, h):
    """f (T, N, K/32) float32: the term of each (token, row, block): f = (dw * d) * float(isum), plus
    mw * s where the type has a min (q4_1, q4_k, q5_k); q6_k: isum = sc_lo * isum(elements 0..15) +
    sc_hi * isum(16..31); isum exact (int64), each float operation rounded once to float32."""
    h = np.asarray(h, F32)
    T, K = h.shape
    N = rows_of(wq, dt, K)
    q, d, s = quantize_q8_1(h)
    codes, dw, mw, sc = block_codes(wq, dt, N, K)
    if sc is None:
        isum = np.einsum("nbj,tbj->tnb", codes, q)  # (T, N, nb), exact
    else:
        lo = np.einsum("nbj,tbj->tnb", codes[..., :16], q[..., :16])
        hi = np.einsum("nbj,tbj->tnb", codes[..., 16:], q[..., 16:])
        isum = sc[None, ..., 0] * lo + sc[None, ..., 1] * hi
    assert np.abs(isum).max(initial=0) < 2 ** 24  # exact as float32
    f = ((dw[None] * d[:, None]).astype(F32) * isum.astype(F32)).astype(F32)
    if mw is not None:
        f = (f + (mw[None] * s[:, None]).astype(F32)).astype(F32)
    return f


def mvq_matmul(wq, dt, h, y=None, rows=4096, split=None):
    """The ``_pq`` kernel's result, modelled: y (T, N) float32 = (y if given else 0) + w . h: lane l
    of 32 adds ``block_terms`` of blocks l, l + 32, l + 64, ... in order from 0, then ``warp_sum``;
    y + total rounded once. ``rows`` at a time (memory only: rows are independent). ``split`` (a
    multiple of 32; ``qmatmul_normq_DT`` and its ``_k2``, ``_launch.normq_split``): blocks [0, split) and [split,
    K/32) summed so apart (lanes, then ``warp_sum``), total = first + second, rounded once."""
    h = np.asarray(h, F32)
    T, K = h.shape
    nb, N = K // 32, rows_of(wq, dt, K)
    assert split is None or split % 32 == 0
    raw = np.ascontiguousarray(wq).view(np.uint8).reshape(N, -1)
    out = np.empty((T, N), F32)
    for n0 in range(0, N, rows):
        f = block_terms(raw[n0:n0 + rows], dt, h)
        parts = [(0, nb)] if split is None else [(0, min(split, nb)), (min(split, nb), nb)]
        total = None
        for b0, b1 in parts:
            acc = np.zeros(f.shape[:2] + (32,), F32)
            for b in range(b0, b1):
                acc[..., b % 32] = (acc[..., b % 32] + f[..., b]).astype(F32)
            total = warp_sum(acc) if total is None else (total + warp_sum(acc)).astype(F32)
        out[:, n0:n0 + rows] = total
    return out if y is None else (np.asarray(y, F32) + out).astype(F32)


def normq_tokens(y, norm):
    """What ``qmatmul_normq_DT`` writes for the next product from the rows y (T, N) float32 it wrote:
    z = y * norm (float32, rounded once) quantized per block (``quantize_q8_1``: q, d, s) and ss
    (T, N/32) float32, the ``warp_sum`` of y * y over each block's 32 values."""
    y = np.asarray(y, F32)
    T, N = y.shape
    q, d, s = quantize_q8_1((y * np.asarray(norm, F32)).astype(F32))
    return q, d, s, warp_sum((y * y).astype(F32).reshape(T, N // 32, 32))


def normq_inv(ss, K, eps):
    """The rmsnorm scale (T,) float32 a ``qmatmul_rms_DT`` CTA computes from ``normq_tokens``' ss
    (T, K/32): lane l adds ss[l], ss[l + 32], ... in order from 0, then ``warp_sum``; then
    1 / sqrt(total / K + eps), each operation rounded once."""
    ss = np.asarray(ss, F32)
    T, nb = ss.shape
    acc = np.zeros((T, 32), F32)
    for b in range(nb):
        acc[:, b % 32] = (acc[:, b % 32] + ss[:, b]).astype(F32)
    total = warp_sum(acc)
    return (F32(1) / np.sqrt(((total / F32(K)).astype(F32) + F32(eps)).astype(F32)).astype(F32)).astype(F32)


def rms_matmul(wq, dt, z, inv, y=None):
    """``qmatmul_rms_DT``'s result: the ``mvq_matmul`` totals over the tokens z (their q8_1 codes),
    each times its token's inv (rounded once), added to y where given (rounded once)."""
    out = (mvq_matmul(wq, dt, z) * np.asarray(inv, F32)[:, None]).astype(F32)
    return out if y is None else (np.asarray(y, F32) + out).astype(F32)


def rms_swiglu(wq, dt, z, inv, N):
    """``qmatmul_rms_swiglu_DT``'s result: ``silu_mul`` of the gate and up totals, each times inv."""
    gu = (mvq_matmul(wq, dt, z) * np.asarray(inv, F32)[:, None]).astype(F32)
    return silu_mul(gu[:, :N], gu[:, N:])


def silu_mul(g, u):
    """g / (1 + exp(-g)) * u float32, numpy's exp (the kernels' expf may differ in the last bits)."""
    with np.errstate(over="ignore"):
        return ((g / (F32(1) + np.exp(-g).astype(F32))).astype(F32) * u).astype(F32)


def mvq_swiglu(wq, dt, h, N):
    """``silu_mul`` of the gate and up totals of ``mvq_matmul`` over w (2N, K)."""
    gu = mvq_matmul(wq, dt, h)
    return silu_mul(gu[:, :N], gu[:, N:])


def matmul(wq, dt, h, y=None):
    """The kernels' result, modelled: y (T, N) float32 = (y if given else 0) + w (N, K) . h (T, K),
    w the GGUF bytes of type dt (q8_0, q4_0, q4_1), h float32 (T, K) the activations as the kernel
    quantizes them (x, or ``rmsnorm_h`` with NORM)."""
    h = np.asarray(h, F32)
    T, K = h.shape
    nb = K // 32
    N = np.asarray(wq).view(np.uint8).size // (nb * BLOCK_BYTES[dt])
    fb = block_terms(wq, dt, h)
    total, seg = np.zeros((T, N), F32), np.zeros((T, N), F32)
    for b in range(nb):
        f = fb[..., b]
        seg = (seg + f).astype(F32)
        if (b + 1) % SEG_BLOCKS == 0 or b + 1 == nb:
            total = (total + seg).astype(F32)
            seg = np.zeros((T, N), F32)
    return total if y is None else (np.asarray(y, F32) + total).astype(F32)


def swiglu(wq, dt, h, N):
    """silu(gate) * up float32 (T, N) of w (2N, K) (gate rows, then up rows): g / (1 + exp(-g)) * u
    with numpy's exp (the kernel's expf may differ in the last bits of that step only)."""
    gu = matmul(wq, dt, h)
    return silu_mul(gu[:, :N], gu[:, N:])


def dequantize(wq, dt, N, K):
    """GGUF block bytes of any ``block_codes`` type -> (the weights' exact float64 values (N, K),
    the float64 magnitudes |dw * code| + |mw| (N, K) that bound each block term's parts before they
    cancel)."""
    codes, dw, mw, sc = block_codes(wq, dt, N, K)
    scale = dw[..., None].astype(np.float64)
    if sc is not None:  # q6_k: the sub-block scale of elements 0..15, then of 16..31
        scale = scale * np.repeat(sc, 16, axis=-1)
    w = scale * codes
    mag = np.abs(w)
    if mw is not None:
        w = w + mw[..., None]
        mag = mag + np.abs(mw[..., None].astype(np.float64))
    return w.reshape(N, K), mag.reshape(N, K)


def error_bound(wq, dt, h):
    """Bound (T, N) float64 on |the model - w . h| with w's exact values: per element
    |h - d q| <= d / 2 = amax / 254 (times 1 + 2^-20 for the rounding of h * (1 / d)), plus the
    float32 roundings of the block terms and of their sums: 2^-23 of the term magnitudes times
    nb + 4 (at most nb + 3 roundings lie on any term's path to the result, in ``matmul``'s order and
    in ``mvq_matmul``'s: nb / 32 + 5 sums and 3 or 4 roundings of a term)."""
    h64 = np.asarray(h, np.float64)
    T, K = h64.shape
    nb = K // 32
    N = rows_of(wq, dt, K)
    _, mag = dequantize(wq, dt, N, K)
    amax = np.abs(h64).reshape(T, nb, 32).max(-1)  # (T, nb)
    quant = (amax / 254 * (1 + 2.0 ** -20)) @ mag.reshape(N, nb, 32).sum(-1).T
    return quant + (np.abs(h64) @ mag.T + quant) * (nb + 4) * 2.0 ** -23


def check_within_bound(y, wq, dt, h, w64, what):
    """The model's y (T, N) against float64 w64 . h: printed (max distance, its ratio to ``error_bound``,
    relative to max |y|), within the bound everywhere, and not equal to it (the activations are rounded,
    so a model that returned the float64 product would be wrong)."""
    ref = np.asarray(h, np.float64) @ w64.T
    bound = error_bound(wq, dt, h)
    dist = np.abs(y - ref)
    print(f"{what}: max |model - float64| {dist.max():.3g}, max / bound {(dist / bound).max():.3f}, "
          f"relative to max |y| {dist.max() / np.abs(ref).max():.2e}")
    assert (dist <= bound).all()
    assert dist.max() > 0  # the activations are rounded: the model is not the float64 product


def check_against_model(kind, y, ref, what):
    """A kernel's y (T, N) f32 against this model's ref: no NaN left (the outputs are poisoned first), bit
    for bit, except the SwiGLU kind's silu, which uses the device's expf (rtol 2e-6)."""
    assert not np.isnan(y).any(), f"{what}: NaN left in y (a poisoned output never written)"
    if kind == "rmsnorm_matmul_swiglu":  # the device's expf: the last bits of silu only
        np.testing.assert_allclose(y, ref, rtol=2e-6, atol=1e-30, err_msg=what)
    else:
        bad = np.argwhere(y.view(np.uint32) != ref.view(np.uint32))
        assert not len(bad), f"{what}: {len(bad)} results differ from the model, first {bad[:3].tolist()}: " \
                             f"{y[tuple(bad[0])]!r} vs {ref[tuple(bad[0])]!r}"
