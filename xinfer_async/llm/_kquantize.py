"""Quantizers for the GGUF types ``gguf.quants.quantize`` lacks (q4_k, q5_k, q6_k, iq4_nl), for
synthetic test data only.

They write valid blocks in ggml's layouts (``ggml-common.h``: ``block_q4_K``, ``block_q5_K``,
``block_q6_K``, ``block_iq4_nl``) with plain round-to-nearest scales: not llama.cpp's rounding search
(``make_qkx2_quants``, ``make_qx_quants``), so the bytes differ from ``llama-quantize``'s, but any
reader (ggml, gguf-py, our kernels) decodes them the same way, which is all a synthetic model needs.
Every function takes float32 (n, K) with K a multiple of the block size and returns uint8
(n, K / block * block bytes).
"""

from __future__ import annotations

import numpy as np

__all__ = ["quantize_q4_k", "quantize_q5_k", "quantize_q6_k", "quantize_iq4_nl", "QUANTIZERS"]

QK_K = 256
_IQ4 = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)


def _f16(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x rounded to float16 as float32, its two bytes) for (n, 1) x."""
    h = x.astype(np.float16)
    return h.astype(np.float32), h.view(np.uint8).reshape(len(x), 2)


def _safe_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.divide(a, b, out=np.zeros(np.broadcast_shapes(a.shape, b.shape), np.float32), where=b != 0)


def _pack_scales_k4(sc: np.ndarray, mn: np.ndarray) -> np.ndarray:
    """8 6-bit scales and 8 6-bit mins a super-block -> its 12 bytes (inverse of gguf's
    ``Q4_K.get_scale_min``): uint8 (n, 8) x 2 -> (n, 12)."""
    out = np.empty((len(sc), 12), np.uint8)
    out[:, 0:4] = (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6)
    out[:, 4:8] = (mn[:, :4] & 63) | ((mn[:, 4:] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:] & 15) | ((mn[:, 4:] & 15) << 4)
    return out


def _k_min_quant(x: np.ndarray, levels: int):
    """Affine (scale, min) quantization of 8 groups of 32 a super-block: x (n, 8, 32) ->
    (d, dmin bytes, packed scales, codes (n, 8, 32) in [0, levels])."""
    lo = np.minimum(x.min(-1), 0.0)
    scale = (x.max(-1) - lo) / np.float32(levels)  # (n, 8)
    mins = -lo
    d, d_b = _f16(scale.max(-1, keepdims=True) / np.float32(63))
    dm, dm_b = _f16(mins.max(-1, keepdims=True) / np.float32(63))
    sc = np.clip(np.rint(_safe_div(scale, d)), 0, 63).astype(np.uint8)
    mn = np.clip(np.rint(_safe_div(mins, dm)), 0, 63).astype(np.uint8)
    dl = (d * sc.astype(np.float32))[..., None]
    ml = (dm * mn.astype(np.float32))[..., None]
    q = np.clip(np.rint(_safe_div(x + ml, dl)), 0, levels).astype(np.uint8)
    return d_b, dm_b, _pack_scales_k4(sc, mn), q


def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    """float32 (n, K) -> block_q4_K bytes (n, K / 256 * 144)."""
    n = x.shape[0]
    b = x.reshape(-1, 8, 32).astype(np.float32)
    d_b, dm_b, scales, q = _k_min_quant(b, 15)
    q = q.reshape(-1, 4, 2, 32)
    qs = (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(-1, 128)
    return np.concatenate([d_b, dm_b, scales, qs], axis=1).reshape(n, -1)


def quantize_q5_k(x: np.ndarray) -> np.ndarray:
    """float32 (n, K) -> block_q5_K bytes (n, K / 256 * 176)."""
    n = x.shape[0]
    b = x.reshape(-1, 8, 32).astype(np.float32)
    d_b, dm_b, scales, q = _k_min_quant(b, 31)
    qh = ((q >> 4) << np.arange(8, dtype=np.uint8)[None, :, None]).sum(1, dtype=np.uint8)  # bit g of qh[l]
    lo = (q & 15).reshape(-1, 4, 2, 32)
    qs = (lo[:, :, 0] | (lo[:, :, 1] << 4)).reshape(-1, 128)
    return np.concatenate([d_b, dm_b, scales, qh, qs], axis=1).reshape(n, -1)


def quantize_q6_k(x: np.ndarray) -> np.ndarray:
    """float32 (n, K) -> block_q6_K bytes (n, K / 256 * 210)."""
    n = x.shape[0]
    b = x.reshape(-1, 16, 16).astype(np.float32)
    s = np.abs(b).max(-1) / np.float32(31)  # (m, 16) group scales, codes in [-31, 31]
    d, d_b = _f16(s.max(-1, keepdims=True) / np.float32(127))
    sc = np.clip(np.rint(_safe_div(s, d)), -128, 127).astype(np.int8)
    dl = (d * sc.astype(np.float32))[..., None]
    q = (np.clip(np.rint(_safe_div(b, dl)), -32, 31) + 32).astype(np.uint8).reshape(-1, 2, 4, 32)  # [h, j, l]
    lo, hi = q & 15, q >> 4
    ql = np.empty((len(q), 2, 64), np.uint8)
    ql[:, :, :32] = lo[:, :, 0] | (lo[:, :, 2] << 4)
    ql[:, :, 32:] = lo[:, :, 1] | (lo[:, :, 3] << 4)
    qh = hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)  # (m, 2, 32)
    return np.concatenate([ql.reshape(-1, 128), qh.reshape(-1, 64), sc.view(np.uint8), d_b], axis=1).reshape(n, -1)


def quantize_iq4_nl(x: np.ndarray) -> np.ndarray:
    """float32 (n, K) -> block_iq4_nl bytes (n, K / 32 * 18): d = max|x| / 127, each value the
    nearest of the 16 non-linear levels."""
    n = x.shape[0]
    b = x.reshape(-1, 32).astype(np.float32)
    d, d_b = _f16(np.abs(b).max(-1, keepdims=True) / np.float32(127))
    q = np.abs(_safe_div(b, d)[..., None] - _IQ4).argmin(-1).astype(np.uint8)
    return np.concatenate([d_b, q[:, :16] | (q[:, 16:] << 4)], axis=1).reshape(n, -1)


#: our dtype label -> quantizer
QUANTIZERS = {"q4_k": quantize_q4_k, "q5_k": quantize_q5_k, "q6_k": quantize_q6_k, "iq4_nl": quantize_iq4_nl}
