"""float64 numpy references shared by the kernel tests that go through the runtime
(tests/test_backend_kernels.py and tests/test_fused_kernels.py on every device,
tests/test_cuda_backend.py on the GPU)."""

import numpy as np


def attention_ref(q, k, v, pos, n_head, n_kv, hd, scale):
    """Causal grouped-query attention: query row t attends keys 0..pos[t]; head h reads kv head
    h // (n_head / n_kv); rows with pos < 0 are zero. q (T, n_head, hd), k and v (ctx, n_kv, hd);
    returns float64 (T, n_head, hd)."""
    T = len(pos)
    out = np.zeros((T, n_head, hd))
    for t in range(T):
        if pos[t] < 0:
            continue
        for h in range(n_head):
            kv = h // (n_head // n_kv)
            s = k[: pos[t] + 1, kv].astype(np.float64) @ q[t, h].astype(np.float64) * scale
            p = np.exp(s - s.max())
            out[t, h] = (p / p.sum()) @ v[: pos[t] + 1, kv]
    return out


def attention_f16_cache_ref(q, k16, v16, pos, n_head, n_kv, hd, scale, dots_exact=False):
    """The cpu attention over an f16 cache (llama.cpp's numerics: native/kernels/attention.c
    xi_att_row_f16) in float64, with a bound on the kernel's distance from it: (out, bound), float64
    (T, n_head, hd). q (T, n_head, hd) float32, k16 and v16 (ctx, n_kv, hd) float16, scale float32.

    The model: q16 = f16(q); s_j = q16 . k_j * scale; p_j = softmax(s)_j; out = sum_j f16(p_j) v_j.
    The kernel's q16 and v are exact; its s_j, e_j = exp(s_j - max) and p_j = e_j * (1 / sum) are f32:
    |ds_j| <= E = (hd + 2) 2^-24 max_j sum|q16 k_j| scale (an f32 dot of hd terms, times scale; with
    ``dots_exact``, inputs whose every partial sum is exact in f32 in any order, E = 2^-24 max|s|: the
    product by scale alone); e_j's relative error is at most eps_j = 2E + 2^-24 |s_j - max| + 2^-23
    (exp's argument, its subtraction, expf's ulp), the sum's at most sum_j p_j eps_j, so p_j's is at
    most delta_j = eps_j + sum_j p_j eps_j + 2^-22 (1 / sum and the product), 1 % added for the
    second-order terms. f16(p_j) is then f16 of a value within
    delta_j p_j of the model's p_j: it can differ from the model's f16(p_j) only by the step between
    f16(p_j (1 - delta_j)) and f16(p_j (1 + delta_j)) (zero unless p_j is that close to a rounding
    midpoint). The f32 sum over p + 1 keys adds gamma = 2 (p + 1) 2^-24 of sum_j f16(p_j)|v_j|.
    A kernel that kept q or p in f32 is off by ~2^-12 of p_j |v_j| at most keys, far past the bound."""
    T = len(pos)
    out, bound = np.zeros((T, n_head, hd)), np.zeros((T, n_head, hd))
    q16 = q.astype(np.float16).astype(np.float64)
    k, v = k16.astype(np.float64), v16.astype(np.float64)
    sc = float(scale)
    for t in range(T):
        if pos[t] < 0:
            continue
        n = pos[t] + 1
        for h in range(n_head):
            kv = h // (n_head // n_kv)
            kk, vv = k[:n, kv], v[:n, kv]
            s = kk @ q16[t, h] * sc
            e_s = 2.0**-24 * np.abs(s).max() if dots_exact else \
                (hd + 2) * 2.0**-24 * (np.abs(kk) @ np.abs(q16[t, h])).max() * sc
            p = np.exp(s - s.max())
            p /= p.sum()
            eps_e = 2 * e_s + 2.0**-24 * np.abs(s - s.max()) + 2.0**-23  # each e_j, relative
            delta = 1.01 * (eps_e + p @ eps_e + 2.0**-22)  # + the sum's (e-weighted), 1 / sum and the product's
            p16 = p.astype(np.float16).astype(np.float64)
            lo = (p * (1 - delta)).astype(np.float16).astype(np.float64)
            hi = (p * (1 + delta)).astype(np.float16).astype(np.float64)
            out[t, h] = p16 @ vv
            bound[t, h] = (hi - lo) @ np.abs(vv) + 2 * n * 2.0**-24 * (hi @ np.abs(vv))
    return out, bound


def att_workspace(T, n_head, head_dim):
    """The split-K workspace bindings of the attention kernels (ops/_attention_split.py): ``part``
    poisoned with NaN (a kernel writes what it reads), ``count`` zero (as a launch needs it)."""
    from xinfer_async.ops._attention_split import count_ints, workspace_floats

    return [np.full(max(1, workspace_floats(T, n_head, head_dim)), np.nan, np.float32),
            np.zeros(max(1, count_ints(T, n_head)), np.int32)]


def rmsnorm_ref(x, w, eps):
    """x (rows, dim) / sqrt(mean(x^2) + eps) * w in float64 (eps rounded to float32 first, as the
    kernels receive it)."""
    x64 = x.astype(np.float64)
    return x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + np.float64(np.float32(eps))) * w


def rope_ref(x, pos, n_head, hd, theta):
    """float64 copy of x (rows, row_stride) with the first n_head heads of hd values of row r rotated
    by pos[r] (GGUF adjacent pairs, angle pos * theta^(-2i/hd)); rows with pos < 0 untouched."""
    ref = x.astype(np.float64)
    freqs = float(theta) ** (-np.arange(0, hd, 2) / hd)
    for r in range(len(pos)):
        if pos[r] < 0:
            continue
        c, s = np.cos(pos[r] * freqs), np.sin(pos[r] * freqs)
        for h in range(n_head):
            a, b = ref[r, h * hd:(h + 1) * hd:2].copy(), ref[r, h * hd + 1:(h + 1) * hd:2].copy()
            ref[r, h * hd:(h + 1) * hd:2] = a * c - b * s
            ref[r, h * hd + 1:(h + 1) * hd:2] = a * s + b * c
    return ref


def encode_weights(w, dt):
    """float32 (N, K) -> (the array to upload as a GGUF tensor of type dt, its exact float64 values)."""
    import gguf

    if dt == "f32":
        return w, w.astype(np.float64)
    if dt == "f16":
        h = w.astype(np.float16)
        return h, h.astype(np.float64)
    qt = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0,
          "q4_1": gguf.GGMLQuantizationType.Q4_1}[dt]
    q = np.ascontiguousarray(gguf.quants.quantize(w, qt))
    return q, gguf.quants.dequantize(q, qt).astype(np.float64).reshape(w.shape)


def _kquant_blocks() -> dict:
    import gguf

    qt = gguf.GGMLQuantizationType
    return {"q5_0": (qt.Q5_0, 32, 22, (0,)), "q5_1": (qt.Q5_1, 32, 24, (0, 2)), "iq4_nl": (qt.IQ4_NL, 32, 18, (0,)),
            "q2_k": (qt.Q2_K, 256, 84, (80, 82)), "q3_k": (qt.Q3_K, 256, 110, (108,)),
            "q4_k": (qt.Q4_K, 256, 144, (0, 2)), "q5_k": (qt.Q5_K, 256, 176, (0, 2)),
            "q6_k": (qt.Q6_K, 256, 210, (208,)), "iq4_xs": (qt.IQ4_XS, 256, 136, (0,)), "bf16": (qt.BF16, 1, 2, ())}


#: the types of shaders/xi_kquant.cuh: type -> (ggml type, elements a block, bytes a block, offsets of
#: the block's f16 scale fields)
KQUANT_BLOCKS = _kquant_blocks()


def random_blocks(rng, dt, rows, K, exact=True):
    """Random blocks of a KQUANT_BLOCKS type (every byte random, so every field of the block is
    exercised, then the f16 scale fields set to either sign, 1e-3..1e-1; bf16: random values) for a
    (rows, K) matrix: (uint8 (rows, row bytes), float64 (rows, K) from gguf.quants.dequantize, or None
    where not ``exact``: large matrices)."""
    import gguf

    qt, qk, nb, offs = KQUANT_BLOCKS[dt]
    if dt == "bf16":
        raw = gguf.quants.quantize(rng.standard_normal((rows, K)).astype(np.float32) * 0.5, qt).reshape(rows, -1)
    else:
        raw = rng.integers(0, 256, (rows * K // qk, nb), dtype=np.uint8)
        for off in offs:
            d = (rng.uniform(1e-3, 1e-1, len(raw)) * rng.choice([-1, 1], len(raw))).astype(np.float16)
            raw[:, off:off + 2] = d.view(np.uint8).reshape(-1, 2)
        raw = raw.reshape(rows, -1)
    return raw, (gguf.quants.dequantize(raw, qt).astype(np.float64).reshape(rows, K) if exact else None)


def _pq_min(_launch):
    """The smallest weight of ``_pq`` as the backend's kernel families read it: XINFER_PQ_MIN_BYTES
    where set, else ``_launch.PQ_MIN_BYTES`` (as a test may have patched it)."""
    m = _launch.pq_min_bytes()
    return _launch.PQ_MIN_BYTES if m is None else m


def activation_quantization_bound(device_name, dt, x, exact):
    """Extra error of a matrix product whose activations the backend quantizes: the cpu backend's
    block-type products (q8_0, q4_0, q4_1, q5_0, q5_1: native/kernels/q8dot.c; q4_k, q5_k, q6_k:
    q8kdot.c; llama.cpp's numerics; their r8 layouts alike) round x (T, K) per block of 32 (256) to
    int8 codes (``_q8dot_model.quantization_bound``: d / 2 = amax / 254 per element, the f16 scales); with exact (N, K) the weights' float64
    values, a bound on the product's change, (T, N) float64. On cuda the integer decode kernel
    (``_pq``, shaders/xi_mvq.cuh) does the same per block of 32 with float32 scales where
    ``_launch.mvq_weight``'s type, shape and size rules and XINFER_MVQ let it run (T <= PQ_MAX_T): amax / 254
    per element, as ``_mmq_model.error_bound`` bounds it. 0 where x stays float (f32 / f16 / the
    other types' weights; the other cuda kernels)."""
    from _q8dot_model import ACTIVATION_BLOCK, quantization_bound

    dt = dt.removesuffix("_r8")
    if device_name == "cuda":
        from xinfer_async.backends.cuda import _launch

        T, K = np.shape(x)
        # the weight's bytes as a GLU launch's (both halves: exact is one of them), so never under
        # the bound of a launch that ran ``_pq``
        if not (_launch.mvq_enabled() and dt in _launch.MVQ_TYPES and 1 <= T <= _launch.PQ_MAX_T
                and _launch.staged_rows(dt, K) and 2 * len(exact) * _launch.row_bytes(dt, K) >= _pq_min(_launch)):
            return 0.0
        amax = np.abs(np.asarray(x, np.float64)).reshape(T, K // 32, 32).max(-1)
        wabs = np.abs(np.asarray(exact, np.float64)).reshape(len(exact), K // 32, 32).sum(-1)
        return (amax / 254 * (1 + 2.0 ** -20)) @ wabs.T
    if device_name != "cpu" or dt not in ACTIVATION_BLOCK:
        return 0.0
    return quantization_bound(np.asarray(x, np.float32), exact, ACTIVATION_BLOCK[dt], has_min=dt in ("q4_1", "q5_1"))


def row_numerics(device_name, kind, dt, N, K, T):
    """Which arithmetic the matrix kernel ``kind``_``dt`` gives an (N, K) weight's rows at T tokens:
    ``"pq"`` where cuda runs the integer decode entry ``_pq`` (shaders/xi_mvq.cuh: q8_1 activations,
    T <= PQ_MAX_T; ``_launch.matmul_launch`` with the H200's constants and XINFER_MVQ / XINFER_MMQ as
    set now), else ``"f32"``: every other entry gives a row the same bits whatever T (the cpu
    backend's too). A row is bit-identical across runs of the same arithmetic, not across the two."""
    if device_name != "cuda":
        return "f32"
    from xinfer_async.backends.cuda import _launch

    c = dict(T=T, N=N, K=K, accumulate=0, eps=1e-5)
    suffix = _launch.matmul_launch(c, dt, kind, mmq=_launch.mmq_mode(), mvq=_launch.mvq_enabled(),
                                   pq_min=_launch.pq_min_bytes())[3]
    return "pq" if suffix == "_pq" else "f32"


def upload_weight(dev, wq, dt, K):
    """A (rows, K) weight of type ``dt`` on ``dev`` from ``wq``: its GGUF bytes (uint8), uploaded with
    its dtype so a backend that keeps ``dt`` in a device layout of its own (``Backend.device_layouts``:
    q6_k rotated on cuda, hal/_layout.py) gets them converted; an f32 / f16 array as it is."""
    if wq.dtype != np.uint8:
        return dev.upload(wq)
    from xinfer_async.hal import DType

    return dev.upload(wq, (wq.nbytes // DType.parse(dt).nbytes(K), K), dt)


async def launch_matrix_kind(dev, kind, dt, wq, x, norm, N, y0=None, xoff=0, eps=1e-5):
    """y (T, N) f32 of the matrix kernel ``kind``_``dt`` (matmul, rmsnorm_matmul, rmsnorm_matmul_swiglu) on
    ``dev`` for weights ``wq`` (raw GGUF bytes), x (T, K) f32 and ``norm`` (K) f32 (the fused kinds);
    y0: accumulated into (else y starts as NaN); xoff: x starts that many floats into its buffer
    (xoff % 4 != 0: unaligned, the element-by-element path); eps: the rmsnorm's."""
    T, K = x.shape
    y = y0.copy() if y0 is not None else np.full((T, N), np.nan, np.float32)
    xbuf = dev.upload(np.concatenate([np.zeros(xoff, np.float32), x.reshape(-1)]))
    bufs = [upload_weight(dev, wq, dt, K), xbuf.view(4 * xoff, 4 * T * K) if xoff else xbuf]
    if kind != "matmul":
        bufs.append(dev.upload(norm))
    bufs.append(dev.upload(y))
    consts = dict(T=T, N=N, K=K)
    if kind != "rmsnorm_matmul_swiglu":
        consts["accumulate"] = int(y0 is not None)
    if kind != "matmul":
        consts["eps"] = eps
    ex = dev.executor()
    ex.dispatch(f"{kind}_{dt}", bufs, consts)
    rb = ex.download(bufs[-1])
    await ex.submit_and_wait()
    out = rb.numpy((T, N), np.float32)
    for b in {id(b.buffer): b.buffer for b in bufs}.values():
        b.free()
    return out
