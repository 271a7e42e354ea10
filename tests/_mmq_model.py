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
uses the device's expf, so that one step is compared to ulps, not bits."""

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


def rmsnorm_h(x, norm, eps):
    """h = (x * inv) * norm float32 (T, K), inv = ``rmsnorm_inv``."""
    inv = rmsnorm_inv(x, eps)
    return ((np.asarray(x, F32) * inv[:, None]).astype(F32) * np.asarray(norm, F32)[None, :]).astype(F32)


def matmul(wq, dt, h, y=None):
    """The kernels' result, modelled: y (T, N) float32 = (y if given else 0) + w (N, K) . h (T, K),
    w the GGUF bytes of type dt (q8_0, q4_0, q4_1), h float32 (T, K) the activations as the kernel
    quantizes them (x, or ``rmsnorm_h`` with NORM)."""
    h = np.asarray(h, F32)
    T, K = h.shape
    nb = K // 32
    N = np.asarray(wq).view(np.uint8).size // (nb * BLOCK_BYTES[dt])
    q, d, s = quantize_q8_1(h)
    codes, dw, mw = weight_codes(wq, dt, N, K)
    isum = np.einsum("nbj,tbj->tnb", codes, q)  # (T, N, nb), exact
    total, seg = np.zeros((T, N), F32), np.zeros((T, N), F32)
    for b in range(nb):
        f = ((dw[None, :, b] * d[:, None, b]).astype(F32) * isum[..., b].astype(F32)).astype(F32)
        if mw is not None:
            f = (f + (mw[None, :, b] * s[:, None, b]).astype(F32)).astype(F32)
        seg = (seg + f).astype(F32)
        if (b + 1) % SEG_BLOCKS == 0 or b + 1 == nb:
            total = (total + seg).astype(F32)
            seg = np.zeros((T, N), F32)
    return total if y is None else (np.asarray(y, F32) + total).astype(F32)


def swiglu(wq, dt, h, N):
    """silu(gate) * up float32 (T, N) of w (2N, K) (gate rows, then up rows): g / (1 + exp(-g)) * u
    with numpy's exp (the kernel's expf may differ in the last bits of that step only)."""
    gu = matmul(wq, dt, h)
    g, u = gu[:, :N], gu[:, N:]
    with np.errstate(over="ignore"):
        return ((g / (F32(1) + np.exp(-g).astype(F32))).astype(F32) * u).astype(F32)


def dequantize(wq, dt, N, K):
    """GGUF block bytes -> (the weights' exact float64 values (N, K), the float64 magnitudes
    |dw * code| + |mw| (N, K) that bound each block term's parts before they cancel)."""
    codes, dw, mw = weight_codes(wq, dt, N, K)
    w = dw[..., None].astype(np.float64) * codes
    mag = np.abs(w)
    if mw is not None:
        w = w + mw[..., None]
        mag = mag + np.abs(mw[..., None].astype(np.float64))
    return w.reshape(N, K), mag.reshape(N, K)


def error_bound(wq, dt, h):
    """Bound (T, N) float64 on |the model - w . h| with w's exact values: per element
    |h - d q| <= d / 2 = amax / 254 (times 1 + 2^-20 for the rounding of h * (1 / d)), plus the
    float32 roundings of the block terms and of their sums: 2^-23 of the term magnitudes times
    nb + 4 (at most nb + 3 roundings lie on any term's path to the result)."""
    h64 = np.asarray(h, np.float64)
    T, K = h64.shape
    nb = K // 32
    N = np.asarray(wq).view(np.uint8).size // (nb * BLOCK_BYTES[dt])
    _, mag = dequantize(wq, dt, N, K)
    amax = np.abs(h64).reshape(T, nb, 32).max(-1)  # (T, nb)
    quant = (amax / 254 * (1 + 2.0 ** -20)) @ mag.reshape(N, nb, 32).sum(-1).T
    return quant + (np.abs(h64) @ mag.T + quant) * (nb + 4) * 2.0 ** -23
