"""One launch each of the T > 8 matrix kernels of a batch-64 SmolLM2 decode step on random weights
(the register-tiled ``_t`` entries of shaders/xi_mvt.cuh, the tensor-core ``_tct`` ones of
shaders/xi_tc.cuh), for Nsight Compute: ``ncu --kernel-name regex:'_tc?t$' ... python3 .ci/ncu_tiled.py``."""

import numpy as np
import trio

from xinfer_async import open_device


async def main():
    dev = open_device("cuda")
    rng = np.random.default_rng(0)
    T = 64

    def q(n, k, bs):  # random GGUF blocks with small f16 scales
        raw = rng.integers(0, 256, (n * k // 32, bs), dtype=np.uint8)
        raw[:, 0:2] = np.full((1,), 0.01, np.float16).view(np.uint8)
        if bs == 20:
            raw[:, 2:4] = np.full((1,), -0.01, np.float16).view(np.uint8)
        return raw.reshape(-1)

    x = dev.upload(rng.standard_normal((T, 1536)).astype(np.float32))
    g = dev.upload(rng.standard_normal(1536).astype(np.float32))
    ex = dev.executor()
    for name, dt, n, k, bs, glu in [("rmsnorm_matmul_q8_0", "q8_0", 49152, 576, 34, False),
                                    ("rmsnorm_matmul_swiglu_q4_1", "q4_1", 1536, 576, 20, True),
                                    ("matmul_q4_1", "q4_1", 576, 1536, 20, False)]:
        rows = 2 * n if glu else n
        w = dev.upload(q(rows, k, bs), (rows, k), dt)
        y = dev.alloc((T, n), "f32")
        if name.startswith("matmul"):
            ex.dispatch(name, [w, x, y], {"T": T, "N": n, "K": k, "accumulate": 0})
        elif glu:
            ex.dispatch(name, [w, x, g, y], {"T": T, "N": n, "K": k, "eps": 1e-5})
        else:
            ex.dispatch(name, [w, x, g, y], {"T": T, "N": n, "K": k, "accumulate": 0, "eps": 1e-5})
    await ex.submit_and_wait()
    dev.close()


trio.run(main)
