"""numpy model of the block-type matrix products of the cpu backend (native/kernels/q8dot.c,
q8kdot.c): x quantized per block of 32 (256 for the K-quants) to int8 as llama.cpp does (q8_0 / q8_1
with f16 scales, q8_K with a float32 scale), exact integer dot products in int64, then the scales applied in float32 in the
C's order; and the cpu backend's row-interleaved r8 weight layout. Shared by the kernel tests
(tests/test_q8dot.py) and the float64 bound of tests/test_native_kernels.py."""

import numpy as np

F32 = np.float32
BLOCK_BYTES = {"q8_0": 34, "q4_0": 18, "q4_1": 20, "q5_0": 22, "q5_1": 24}


def _codes(x, block):
    """x float32 (T, K) -> (codes int64 (T, K/block, block), amax float32, id = 127 / amax float32,
    bad (a NaN or inf in the block), ok (amax > 0 and not bad)), per block of ``block``."""
    T, K = x.shape
    xb = x.reshape(T, K // block, block).astype(F32)
    with np.errstate(all="ignore"):
        a = np.abs(xb)
        bad = ~(a < F32(np.inf)).all(-1)
        amax = np.where(bad, F32(0), a.max(-1)).astype(F32)
        ok = (amax > 0) & ~bad
        inv = np.where(ok, F32(127) / np.where(ok, amax, F32(1)), F32(0)).astype(F32)
        q = np.rint((xb * inv[..., None]).astype(F32)).astype(np.int64)
    q[~ok] = 0
    return q, amax, inv, bad, ok


def f16_round(v):
    """float32 values rounded to the nearest IEEE half (ties to even, overflow to inf), as float32."""
    with np.errstate(all="ignore"):
        return np.asarray(v, F32).astype(np.float16).astype(F32)


def quantize_q8(x):
    """x float32 (T, K), K % 32 == 0 -> (codes int64 (T, K/32, 32), d float32 (T, K/32), s float32
    (T, K/32)): llama.cpp's q8_0 / q8_1 (quantize_row_q8_0 / q8_1): amax = max|x|,
    q = rint(x * (127 / amax)) (ties to even), d = f16(amax / 127), s = f16((amax / 127) * sum(q)),
    f16() the rounding to a half (``f16_round``); amax == 0 -> zeros; a NaN or inf in the block ->
    d = s = NaN, q = 0."""
    q, amax, _, bad, _ = _codes(x, 32)
    with np.errstate(all="ignore"):
        d32 = (amax / F32(127)).astype(F32)
        d, s = f16_round(d32), f16_round(d32 * q.sum(-1).astype(F32))
    d[bad] = s[bad] = np.nan
    return q, d, s


def weight_codes(wq, dt, N, K):
    """GGUF block bytes of an (N, K) matrix -> (codes int64 (N, K/32, 32) in element order,
    scale float32 (N, K/32), min float32 (N, K/32) or None); q5_0 / q5_1: nibble | fifth bit << 4
    (minus 16 for q5_0)."""
    blk = np.ascontiguousarray(wq).view(np.uint8).reshape(N, K // 32, BLOCK_BYTES[dt])
    dw = blk[..., 0:2].copy().view(np.float16)[..., 0].astype(F32)
    if dt == "q8_0":
        return blk[..., 2:].copy().view(np.int8).astype(np.int64), dw, None
    if dt in ("q5_0", "q5_1"):
        h = 2 if dt == "q5_0" else 4
        qh = blk[..., h:h + 4].copy().view("<u4")[..., 0].astype(np.int64)  # (N, nb)
        nib = blk[..., h + 4:h + 20].astype(np.int64)
        fifth = (qh[..., None] >> np.arange(32)) & 1
        codes = np.concatenate([nib & 15, nib >> 4], -1) | (fifth << 4)
        if dt == "q5_0":
            return codes - 16, dw, None
        return codes, dw, blk[..., 2:4].copy().view(np.float16)[..., 0].astype(F32)
    nib = blk[..., 2:18] if dt == "q4_0" else blk[..., 4:20]
    codes = np.concatenate([nib & 15, nib >> 4], -1).astype(np.int64)
    if dt == "q4_0":
        return codes - 8, dw, None
    return codes, dw, blk[..., 2:4].copy().view(np.float16)[..., 0].astype(F32)


def matmul_q8(wq, dt, x, y=None):
    """The C result, modelled: y (T, N) float32 = (y if given else 0) + w (N, K) @ x (T, K)^T,
    w the GGUF bytes of type dt (q8_0, q4_0, q4_1, q5_0, q5_1).

    Per (token, row), block after block from acc = 0: acc = acc + (dw * d) * float(S), S the exact
    integer dot product of the block's weight codes and x codes; q4_1, q5_1 then acc = acc + mw * s."""
    T, K = x.shape
    N = np.asarray(wq).view(np.uint8).size // (K // 32 * BLOCK_BYTES[dt])
    q, d, s = quantize_q8(x)
    codes, dw, mw = weight_codes(wq, dt, N, K)
    S = np.einsum("nbj,tbj->tnb", codes, q)  # (T, N, K/32) exact
    acc = np.zeros((T, N), F32)
    with np.errstate(all="ignore"):
        for b in range(K // 32):
            ds = (dw[None, :, b] * d[:, None, b]).astype(F32)
            acc = (acc + (ds * S[..., b].astype(F32)).astype(F32)).astype(F32)
            if mw is not None:
                acc = (acc + (mw[None, :, b] * s[:, None, b]).astype(F32)).astype(F32)
        return acc if y is None else (y.astype(F32) + acc).astype(F32)


#: the weight types whose cpu products quantize x, and the block of that quantization
ACTIVATION_BLOCK = {"q8_0": 32, "q4_0": 32, "q4_1": 32, "q5_0": 32, "q5_1": 32, "q4_k": 256, "q5_k": 256, "q6_k": 256}


def quantization_bound(x, deq, block=32, has_min=False):
    """Bound on |w @ x - (the int8 product)| from quantizing x (T, K) per block of ``block``:
    (T, N) float64, with deq (N, K) the weights' values. Per block (d32 = amax / 127 in float32):
    sum_j w_j (x_j - d32 q_j) <= amax / 254 * sum_j |w_j| (plus the float32 rounding of x * id); with
    block 32 the scale is d = f16(d32) (``quantize_q8``), adding (d32 - d) * dw * S <= 127 |d32 - d|
    * sum_j |dw c_j|; ``has_min`` (q4_1, q5_1: w_j = dw c_j + m) adds m (d32 sum(q) - s), s the
    f16 block sum, and |dw c_j| <= |w_j| + |m|, with m the block's smallest value (gguf's and
    llama.cpp's quantizers give the smallest element code 0, so m is one of deq's values)."""
    T, K = x.shape
    nb = K // block
    amax = np.abs(x.astype(np.float64)).reshape(T, nb, block).max(-1)  # (T, nb)
    wabs = np.abs(deq.astype(np.float64)).reshape(deq.shape[0], nb, block).sum(-1)  # (N, nb)
    bound = (amax / 254 * (1 + 1e-6)) @ wabs.T
    if block != 32:
        return bound
    q, d, s = quantize_q8(np.asarray(x, F32))
    d32 = (amax.astype(F32) / F32(127)).astype(np.float64)
    dd = np.abs(d32 - d)  # (T, nb): the f16 rounding of the scale
    bound = bound + (127 * dd) @ wabs.T
    if has_min:
        m = np.abs(deq.astype(np.float64).reshape(deq.shape[0], nb, block).min(-1))  # (N, nb)
        es = np.abs(d32 * q.sum(-1) - s.astype(np.float64))  # (T, nb): s's roundings, exact
        bound = bound + (127 * block * dd + es) @ m.T
    return bound


def repack_r8(wq, dt, N, K):
    """GGUF block bytes of an (N, K) matrix -> the cpu backend's row-interleaved r8 layout (uint8,
    the same size; native/kernels/q8dot.c): rows in groups of 8, a group's block b holds the 8 rows'
    f16 scales, (q4_1, q5_1) their f16 mins, (q5_0, q5_1) 32 bytes of fifth bits, then the codes in
    32-byte chunks of 4 bytes a row; the N % 8 last rows stay GGUF rows."""
    bpb = BLOCK_BYTES[dt]
    head = 4 if dt in ("q4_1", "q5_1") else 2
    h5 = 4 if dt in ("q5_0", "q5_1") else 0
    blk = np.ascontiguousarray(wq).view(np.uint8).reshape(N, K // 32, bpb)
    n8, G, nb = N // 8 * 8, N // 8, K // 32
    g = blk[:n8].reshape(G, 8, nb, bpb).transpose(0, 2, 1, 3)  # (group, block, row, byte)
    scales = g[..., :head].reshape(G, nb, 8, head // 2, 2).transpose(0, 1, 3, 2, 4)  # d rows, then m rows
    codes = g[..., head + h5:].reshape(G, nb, 8, (bpb - head - h5) // 4, 4).transpose(0, 1, 3, 2, 4)  # chunk, row
    parts = [scales.reshape(G, nb, 8 * head)]
    if h5:  # byte r * 4 + i, bit c: the fifth bit of row r's element 4c + i
        qh = g[..., head:head + 4].copy().view("<u4")[..., 0].astype(np.int64)  # (G, nb, 8)
        j = 4 * np.arange(8)[None, :] + np.arange(4)[:, None]  # (i, c) -> element
        bits = (qh[..., None, None] >> j) & 1  # (G, nb, 8, 4, 8)
        parts.append((bits << np.arange(8)).sum(-1).astype(np.uint8).reshape(G, nb, 32))
    parts.append(codes.reshape(G, nb, 8 * (bpb - head - h5)))
    out = np.concatenate(parts, -1)
    return np.concatenate([out.reshape(-1), blk[n8:].reshape(-1)])


# ------------------------------------------------------------------ the K-quants (native/kernels/q8kdot.c)

K_BLOCK_BYTES = {"q4_k": 144, "q5_k": 176, "q6_k": 210}


def quantize_q8k(x):
    """x float32 (T, K), K % 256 == 0 -> (codes int64 (T, K/256, 256), d float32 (T, K/256), sums of
    each 16 codes int64 (T, K/256, 16)): llama.cpp's q8_K (quantize_row_q8_K_ref): codes as
    ``quantize_q8``'s over a super-block of 256, d = 1 / (127 / amax) in float32 (not rounded)."""
    T, K = x.shape
    q, _, inv, bad, ok = _codes(x, 256)
    with np.errstate(all="ignore"):
        d = np.where(ok, F32(1) / np.where(ok, inv, F32(1)), F32(0)).astype(F32)
    d[bad] = np.nan
    return q, d, q.reshape(T, K // 256, 16, 16).sum(-1)


def _scale_min_k4(sc12):
    """The 12 scale bytes of q4_k / q5_k (..., 12) uint8 -> 6-bit (scales, mins) int64 (..., 8)."""
    q = sc12.astype(np.int64)
    sc = np.concatenate([q[..., 0:4] & 63, (q[..., 8:12] & 15) | ((q[..., 0:4] >> 2) & 0x30)], -1)
    m = np.concatenate([q[..., 4:8] & 63, (q[..., 8:12] >> 4) | ((q[..., 4:8] >> 2) & 0x30)], -1)
    return sc, m


def k_weight_codes(wq, dt, N, K):
    """GGUF super-blocks of an (N, K) K-quant matrix -> (codes int64 (N, nb, 256) in element order,
    scales int64 (N, nb, 8 or 16), mins int64 (N, nb, 8) or None, d float32 (N, nb), dmin float32
    (N, nb) or None): ggml-common.h's block_q4_K / q5_K / q6_K."""
    nb = K // 256
    blk = np.ascontiguousarray(wq).view(np.uint8).reshape(N, nb, K_BLOCK_BYTES[dt])
    f16 = lambda o: blk[..., o:o + 2].copy().view(np.float16)[..., 0].astype(F32)  # noqa: E731
    if dt == "q6_k":
        ql, qh = blk[..., :128].astype(np.int64), blk[..., 128:192].astype(np.int64)
        halves = []
        for h in range(2):
            a, b, e = ql[..., 64 * h:64 * h + 32], ql[..., 64 * h + 32:64 * h + 64], qh[..., 32 * h:32 * h + 32]
            halves += [(a & 15) | ((e & 3) << 4), (b & 15) | (((e >> 2) & 3) << 4),
                       (a >> 4) | (((e >> 4) & 3) << 4), (b >> 4) | (((e >> 6) & 3) << 4)]
        return np.concatenate(halves, -1), blk[..., 192:208].view(np.int8).astype(np.int64), None, f16(208), None
    sc, m = _scale_min_k4(blk[..., 4:16])
    qs = blk[..., 48:176] if dt == "q5_k" else blk[..., 16:144]
    groups = []
    for g in range(8):
        c = (qs[..., 32 * (g // 2):32 * (g // 2) + 32].astype(np.int64) >> (4 * (g % 2))) & 15
        if dt == "q5_k":
            c |= ((blk[..., 16:48].astype(np.int64) >> g) & 1) << 4
        groups.append(c)
    return np.concatenate(groups, -1), sc, m, f16(0), f16(2)


def matmul_q8k(wq, dt, x, y=None):
    """The C result of a K-quant product, modelled: y (T, N) float32 = (y if given else 0) + w @ x^T.

    Per (token, row), super-block after super-block from acc = 0: acc = acc + (dw * d) * float(S);
    q4_k, q5_k then acc = acc - (dmin * d) * float(M); S, M the exact integers of q8kdot.c's
    header (scales applied to the integer group sums; q6_k's codes offset by 32 via the sums of 16)."""
    T, K = x.shape
    nb = K // 256
    N = np.asarray(wq).view(np.uint8).size // (nb * K_BLOCK_BYTES[dt])
    q, d, bs = quantize_q8k(x)
    codes, sc, mins, dw, dmin = k_weight_codes(wq, dt, N, K)
    gs = 16 if dt == "q6_k" else 32
    G = codes.reshape(N, nb, 256 // gs, gs)
    P = np.einsum("nbgj,tbgj->tnbg", G, q.reshape(T, nb, 256 // gs, gs))  # (T, N, nb, groups) exact
    if dt == "q6_k":
        P = P - 32 * bs[:, None]
    S = (P * sc[None]).sum(-1)  # (T, N, nb)
    M = None if mins is None else (mins[None] * bs.reshape(T, 1, nb, 8, 2).sum(-1)).sum(-1)
    acc = np.zeros((T, N), F32)
    with np.errstate(all="ignore"):
        for b in range(nb):
            acc = (acc + ((dw[None, :, b] * d[:, None, b]).astype(F32) * S[..., b].astype(F32)).astype(F32)).astype(F32)
            if M is not None:
                acc = (acc - ((dmin[None, :, b] * d[:, None, b]).astype(F32) * M[..., b].astype(F32)).astype(F32)).astype(F32)
        return acc if y is None else (y.astype(F32) + acc).astype(F32)
