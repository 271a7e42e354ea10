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


def activation_quantization_bound(device_name, dt, x, exact):
    """Extra error of a matrix product whose activations the backend quantizes: the cpu backend's
    block-type products (q8_0, q4_0, q4_1, q5_0, q5_1: native/kernels/q8dot.c; q4_k, q5_k, q6_k:
    q8kdot.c; llama.cpp's numerics; their r8 layouts alike) round x (T, K) per block of 32 (256) to
    int8 codes, |x - d q| <= d / 2 = amax / 254 per element; with exact (N, K) the weights' float64
    values, a bound on the product's change, (T, N) float64. 0 where x stays float (f32 / f16 / the
    other types' weights; the cuda backend)."""
    from _q8dot_model import ACTIVATION_BLOCK, quantization_bound

    dt = dt.removesuffix("_r8")
    if device_name != "cpu" or dt not in ACTIVATION_BLOCK:
        return 0.0
    return quantization_bound(np.asarray(x, np.float32), exact, ACTIVATION_BLOCK[dt])
