"""float64 numpy references shared by the kernel tests that go through the runtime
(tests/test_backend_kernels.py on every device, tests/test_cuda_backend.py on the GPU)."""

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
