"""Speed check of the cpu backend's matmul kernels at SmolLM2-135M shapes: ``xinfer-async bench native``.

Calls each ``xi_k_matmul_DT`` of the native C module directly (no runtime, no queue) on random
weights and prints one row per kernel and shape. Columns: ``T`` tokens (rows of x), ``N`` x ``K``
the weight's shape, ``median us`` the median time of one call in microseconds (warm-up left out),
``GB/s`` the weight bytes read per second, ``GFLOP/s`` 2 T N K per second. Then an estimate of the
matmul time of one decoded token: 30 layers x (q, k, v, o, gate, up, down) in Q4_1 plus the Q8_0
tied-embedding output projection (49152 x 576). The threads are the C module's (``OMP_NUM_THREADS``). Then every
weight type's matmul on one shape whose K is a multiple of 256 (the K-quants' super-block), its GB/s
and the ratio to q4_1's: a type's kernel reads its bytes in the same class per byte as q4_1's when
the ratio is near 1. Then Gemma 3 270M Q4_K_M's matrix shapes and types against q4_1 at each shape.
The q8_0, q4_0, q4_1, q5_0 and q5_1 kernels run on weights in the cpu backend's row-interleaved layout
(``matmul_DT_r8``, as a loaded model has them) unless ``XINFER_CPU_REPACK=0``. Last, a few of these
matmuls timed on each int8 dot-product path this cpu runs (``XINFER_CPU_ISA``: scalar, avx2, avxvnni,
avx512vnni), side by side; ``--isa`` prints only that table.
"""
import os
import sys
import time

import numpy as np

try:
    from xinfer_async._native import ffi, lib
except ImportError:  # run from a checkout whose package __init__ is in flux
    import glob
    import importlib.util

    _so = glob.glob(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_native*.so"))
    _spec = importlib.util.spec_from_file_location("xinfer_async._native", _so[0])
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
    ffi, lib = _mod.ffi, _mod.lib

from xinfer_async.hal import DType  # noqa: E402
from xinfer_async.ops._kernels import WEIGHT_DTYPES  # noqa: E402

#: (N, K) of the per-type comparison: SmolLM2's FFN down projection widened to K = 1536 = 6 x 256
TYPE_SHAPE = (1536, 1536)
DIM, FFN, KV, LAYERS, VOCAB = 576, 1536, 192, 30, 49152
#: (tensor, type, N, K) of gemma-3-270m-q4_k_m.gguf's matrices (the tied output projection is Q8_0)
GEMMA_MATRICES = [("attn_q", "q5_0", 1024, 640), ("attn_k/v", "q5_0", 256, 640), ("attn_v", "q8_0", 256, 640),
                  ("attn_output", "q4_k", 640, 1024), ("ffn_gate/up", "q5_0", 2048, 640),
                  ("ffn_down", "q4_k", 640, 2048), ("ffn_down", "q6_k", 640, 2048), ("output", "q8_0", 262144, 640)]
LAYER = [("q", DIM, DIM), ("k", KV, DIM), ("v", KV, DIM), ("o", DIM, DIM),
         ("gate", FFN, DIM), ("up", FFN, DIM), ("down", DIM, FFN)]


def weight_bytes(dt, N, K):
    return DType.parse(dt).nbytes(N * K)


#: offsets of each block type's f16 scale fields (ggml-common.h)
_SCALES = {"q8_0": (0,), "q4_0": (0,), "q4_1": (0, 2), "q5_0": (0,), "q5_1": (0, 2), "iq4_nl": (0,),
           "q2_k": (80, 82), "q3_k": (108,), "q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,), "iq4_xs": (0,)}


def random_weights(rng, dt, N, K):
    """Random bytes with sane f16 scales (the kernels' speed does not depend on values)."""
    nbytes = weight_bytes(dt, N, K)
    if dt in ("f32", "f16"):
        return rng.standard_normal(N * K).astype(np.float32 if dt == "f32" else np.float16)
    if dt == "bf16":
        return rng.integers(0x3c00, 0x3f00, N * K, dtype=np.uint16)
    d = DType.parse(dt)
    w = rng.integers(0, 256, nbytes, dtype=np.uint8).reshape(N * K // d.block_size, d.block_nbytes)
    for off, v in zip(_SCALES[dt], (0.01, -0.05)):
        w[:, off:off + 2] = np.full((w.shape[0], 1), np.float16(v)).view(np.uint8)
    return w


def cpu_layout(dt, N, K):
    """The dtype label the cpu backend keeps an (N, K) ``dt`` matrix in (its row-interleaved ``*_r8``
    unless ``XINFER_CPU_REPACK=0``): the kernel a loaded model runs."""
    from xinfer_async.backends.cpu import CPUBackend

    return CPUBackend().matrix_dtype(DType.parse(dt), (N, K)).label


def time_matmul(dt, T, N, K, reps=None, rng=None, layout=None):
    """Median microseconds of one ``matmul`` call on random (N, K) ``dt`` weights, in ``layout`` (a
    dtype label: ``dt`` itself or its ``*_r8``), by default the one the cpu backend keeps them in
    (``cpu_layout``)."""
    rng = rng or np.random.default_rng(0)
    w = random_weights(rng, dt, N, K)
    layout = layout or cpu_layout(dt, N, K)
    if layout != dt:
        from xinfer_async.backends.cpu import CPUBackend

        w = CPUBackend().repack(w.view(np.uint8).reshape(-1), DType.parse(dt), (N, K), DType.parse(layout))
    x = rng.standard_normal((T, K)).astype(np.float32)
    y = np.zeros((T, N), np.float32)
    b = ffi.new("void *[]", [ffi.from_buffer(w), ffi.from_buffer(x), ffi.from_buffer(y)])
    c = ffi.new(f"xi_matmul_{layout}_c *", {"T": T, "N": N, "K": K, "accumulate": 0})
    fn = getattr(lib, f"xi_k_matmul_{layout}")
    if reps is None:
        reps = max(5, min(500, int(2e8 // max(1, N * K * T))))
    for _ in range(3):
        assert fn(b, c) == 0
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        fn(b, c)
        ts.append(time.perf_counter_ns() - t0)
    return float(np.median(ts)) / 1e3  # us


#: (weight type, layout, N, K) of the table of int8 dot-product paths: SmolLM2's 576 x 576 (q, o) in the
#: GGUF and the row-interleaved layouts, its FFN down projection's shape for the K-quants (K = 6 x 256)
ISA_ROWS = [("q4_1", "q4_1", DIM, DIM), ("q4_1", "q4_1_r8", DIM, DIM), ("q4_0", "q4_0_r8", DIM, DIM),
            ("q8_0", "q8_0_r8", DIM, DIM), ("q5_0", "q5_0_r8", DIM, DIM), ("q4_k", "q4_k", DIM, FFN),
            ("q6_k", "q6_k", DIM, FFN)]


def isa_table(rng):
    """The ISA_ROWS at T = 1 and 64 on every int8 dot-product path (``XINFER_CPU_ISA``), side by side:
    median microseconds of one call, "-" where this cpu lacks the path; then the fastest path's
    speed-up over avx2. The selected path is restored after."""
    from xinfer_async.backends.cpu import _isa

    before = _isa.selected()
    paths = [p for p in _isa.PATHS if _isa.supported(p)]
    print("int8 dot-product paths side by side (XINFER_CPU_ISA=...): median us of one call; '-': " +
          "; ".join(f"{p}: {_isa.why_not(p)}" for p in _isa.PATHS if p not in paths) if len(paths) < 4 else
          "int8 dot-product paths side by side (XINFER_CPU_ISA=...): median us of one call")
    print(f"{'kernel':<16}{'T':>4}{'N':>6}{'K':>6}" + "".join(f"{p:>12}" for p in _isa.PATHS) + f"{'best/avx2':>11}")
    try:
        for T in (1, 64):
            for dt, layout, N, K in ISA_ROWS:
                us = {}
                for p in paths:
                    _isa.select(p)
                    us[p] = time_matmul(dt, T, N, K, rng=rng, layout=layout)
                cells = "".join(f"{us[p]:>12.1f}" if p in us else f"{'-':>12}" for p in _isa.PATHS)
                gain = f"{us['avx2'] / min(us.values()):>11.2f}" if "avx2" in us else f"{'-':>11}"
                print(f"{'matmul_' + layout:<16}{T:>4}{N:>6}{K:>6}{cells}{gain}")
    finally:
        _isa.select(before)


def main(argv=None):
    from xinfer_async.backends.cpu import _isa
    from xinfer_async.bench import parser

    ap = parser("native", __doc__)
    ap.add_argument("--isa", action="store_true",
                    help="only the table of the int8 dot-product paths side by side (XINFER_CPU_ISA)")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    rng = np.random.default_rng(0)
    print(f"threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(default)')}, cpus={os.cpu_count()}")
    print(f"int8 dot products: {_isa.configure()} (XINFER_CPU_ISA={os.environ.get('XINFER_CPU_ISA', 'auto')}; "
          f"this cpu runs {', '.join(p for p in _isa.PATHS if _isa.supported(p))})")
    if args.isa:
        isa_table(rng)
        return 0
    print(f"{'kernel':<16}{'T':>4}{'N':>7}{'K':>6}{'median us':>12}{'GB/s':>8}{'GFLOP/s':>9}")
    est = {}
    for T in (1, 64):
        shapes = [("q4_1", N, K) for _, N, K in LAYER] + [("q8_0", VOCAB, DIM)]
        shapes += [("q4_0", DIM, DIM), ("f16", DIM, DIM), ("f32", DIM, DIM), ("q8_0", DIM, DIM)]
        seen = {}
        for dt, N, K in shapes:
            key = (dt, N, K)
            if key in seen:
                continue
            us = time_matmul(dt, T, N, K, rng=rng)
            seen[key] = us
            gbs = weight_bytes(dt, N, K) / (us * 1e-6) / 1e9
            gflops = 2.0 * T * N * K / (us * 1e-6) / 1e9
            print(f"{'matmul_' + cpu_layout(dt, N, K):<16}{T:>4}{N:>7}{K:>6}{us:>12.1f}{gbs:>8.1f}{gflops:>9.1f}")
        layer_us = sum(seen[("q4_1", N, K)] for _, N, K in LAYER)
        est[T] = (LAYERS * layer_us + seen[("q8_0", VOCAB, DIM)]) / 1e3
    print(f"estimated decode matmul time per token (T=1): {est[1]:.2f} ms "
          f"(30 x 7 Q4_1 + Q8_0 output; -> {1e3 / est[1]:.0f} tok/s matmul-bound)")
    print(f"estimated prompt matmul time per 64 tokens (T=64): {est[64]:.2f} ms "
          f"({est[64] / 64:.3f} ms per token)")
    N, K = TYPE_SHAPE
    print(f"every weight type, N={N} K={K}: GB/s of weight bytes and the ratio to q4_1's")
    print(f"{'kernel':<16}{'T':>4}{'bytes/w':>8}{'median us':>12}{'GB/s':>8}{'vs q4_1':>9}{'GFLOP/s':>9}")
    for T in (1, 4, 64):
        base = None
        for d in sorted(WEIGHT_DTYPES, key=lambda d: d.label != "q4_1"):
            us = time_matmul(d.label, T, N, K, rng=rng)
            gbs = weight_bytes(d.label, N, K) / (us * 1e-6) / 1e9
            base = base or gbs
            print(f"{'matmul_' + cpu_layout(d.label, N, K):<16}{T:>4}{d.block_nbytes / d.block_size:>8.3f}{us:>12.1f}{gbs:>8.1f}"
                  f"{gbs / base:>9.2f}{2.0 * T * N * K / (us * 1e-6) / 1e9:>9.1f}")
    print("Gemma 3 270M Q4_K_M's matrices (ffn_down is Q6_K in 9 layers, Q4_K in 9): GB/s and q4_1's at that shape")
    print(f"{'tensor':<12}{'kernel':<16}{'T':>4}{'N':>7}{'K':>6}{'median us':>12}{'GB/s':>8}{'vs q4_1':>9}{'GFLOP/s':>9}")
    for T in (1, 64):
        for name, dt, N, K in GEMMA_MATRICES:
            us = time_matmul(dt, T, N, K, rng=rng)
            base = time_matmul("q4_1", T, N, K, rng=rng)
            gbs, gbs1 = (weight_bytes(d, N, K) / (u * 1e-6) / 1e9 for d, u in ((dt, us), ("q4_1", base)))
            print(f"{name:<12}matmul_{cpu_layout(dt, N, K):<9}{T:>4}{N:>7}{K:>6}{us:>12.1f}{gbs:>8.1f}{gbs / gbs1:>9.2f}"
                  f"{2.0 * T * N * K / (us * 1e-6) / 1e9:>9.1f}")
    isa_table(rng)
    return 0


if __name__ == "__main__":
    sys.exit(main())
