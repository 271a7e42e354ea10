"""Achieved GB/s of the cuda matrix kernels (``xinfer-async bench cuda-matrix``) per weight type, at
Gemma 3 270M's and Llama-3.1-8B's shapes, at T = 1 (decode) and T = 8 (batched decode) by default,
each type beside q4_1 (the reference: the issue's bar is "the same class per byte as q4_1").

A figure is the weight's bytes over the kernel's median GPU time: L2-cold (as many copies of the
weight as fill 256 MB, at least 2, run in turn), the dispatches replayed from one CUDA graph (from
Python each dispatch would cost ~10 us of host time, more than most kernels), GPU time from CUDA
events, medians over 20 repetitions after 3 of warm-up. The figure includes the ~0.9 us graph node
overhead, which dominates the small shapes. Weights are random bytes with their f16 scales set to
0.01 (so no value is NaN or infinite), x is 0.0078 everywhere. ``vs q4_1`` is the type's GB/s over
q4_1's at the same shape and T. The entry each launch runs is printed (``""``: shaders/xi_mvc.cuh,
``_t``: xi_mvt.cuh, ``_tc``: the tensor-core xi_tc.cuh).

Columns: ``type``, ``N x K`` (output rows x row length), ``T``, ``entry``, ``us`` (a launch, median),
``GB/s`` (median), ``slow 1%`` (the GB/s of the 99th-percentile time), ``vs q4_1``.
Needs a usable cuda device."""

from __future__ import annotations

import struct
import sys

import numpy as np

from ..hal._commands import DispatchCmd, FillCmd, ReplayCmd, TimestampCmd
from ..hal._layout import write_in_device_layout

#: type -> (elements, bytes, offsets of the f16 scale fields) of a block; None: f16 / bf16 / f32 values
BLOCKS = {"q4_0": (32, 18, (0,)), "q4_1": (32, 20, (0, 2)), "q8_0": (32, 34, (0,)), "q5_0": (32, 22, (0,)),
          "q5_1": (32, 24, (0, 2)), "iq4_nl": (32, 18, (0,)), "q2_k": (256, 84, (80, 82)), "q3_k": (256, 110, (108,)),
          "q4_k": (256, 144, (0, 2)), "q5_k": (256, 176, (0, 2)), "q6_k": (256, 210, (208,)),
          "iq4_xs": (256, 136, (0,)), "f16": (1, 2, None), "bf16": (1, 2, None), "f32": (1, 4, None)}
DEFAULT_TYPES = "q4_1,q8_0,q4_k,q6_k,q5_k,q5_0"
#: Gemma 3 270M (down, gate/up, output layer) and Llama-3.1-8B (attention, gate/up, down), N x K
DEFAULT_SHAPES = "640x2048,2048x640,262144x640,4096x4096,14336x4096,4096x14336"
COLD_BYTES = 256 << 20


def _stats(xs):
    xs = np.sort(np.asarray(xs, np.float64))
    return float(np.median(xs)), float(xs[min(len(xs) - 1, int(0.99 * len(xs)))])


def weight_bytes(dt: str, n: int, k: int) -> int:
    """Bytes of an (n, k) weight of ``dt``."""
    qk, nb, _ = BLOCKS[dt]
    return n * (k // qk) * nb


def random_weight(rng, dt: str, n: int, k: int) -> np.ndarray:
    """uint8 bytes of an (n, k) weight of ``dt``: random, each block's f16 scales 0.01 (f16 / bf16:
    random normal values, f32 likewise)."""
    qk, nb, offs = BLOCKS[dt]
    if offs is None:
        v = rng.standard_normal(n * k).astype(np.float32)
        if dt == "f16":
            return v.astype(np.float16).view(np.uint8)
        return (v.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8) if dt == "bf16" else v.view(np.uint8)
    raw = rng.integers(0, 256, (n * (k // qk), nb), dtype=np.uint8)
    for off in offs:
        raw[:, off:off + 2] = np.array([0.01], np.float16).view(np.uint8)
    return raw.reshape(-1)


def main(argv=None) -> int:
    from xinfer_async.bench import parser

    p = parser("cuda-matrix", __doc__)
    p.add_argument("--types", default=DEFAULT_TYPES, help=f"comma-separated weight types (default {DEFAULT_TYPES}; "
                   f"q4_1 is always run); any of {', '.join(BLOCKS)}")
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help=f"comma-separated NxK (default {DEFAULT_SHAPES})")
    p.add_argument("--tokens", default="1,8", help="comma-separated T (default 1,8)")
    p.add_argument("--kind", default="matmul", choices=["matmul", "rmsnorm_matmul", "rmsnorm_matmul_swiglu"],
                   help="the kernel (swiglu: the weight is 2N x K, gate and up)")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    types = ["q4_1"] + [t for t in a.types.split(",") if t and t != "q4_1"]
    bad = [t for t in types if t not in BLOCKS]
    if bad:
        p.error(f"--types: unknown {', '.join(bad)}; choose from {', '.join(BLOCKS)}")
    try:
        shapes = [tuple(int(v) for v in s.lower().split("x")) for s in a.shapes.split(",") if s]
        tokens = [int(t) for t in a.tokens.split(",") if t]
    except ValueError:
        p.error(f"--shapes must be NxK,... and --tokens T,...: got {a.shapes!r}, {a.tokens!r}")
    if any(len(s) != 2 or min(s) < 1 for s in shapes) or any(t < 1 for t in tokens):
        p.error(f"--shapes must be NxK with N, K >= 1 and --tokens >= 1: got {a.shapes!r}, {a.tokens!r}")

    from ..backends.cuda import CUDABackend

    be = CUDABackend()
    q = be.create_queue()
    e0, e1 = be.create_timestamp(), be.create_timestamp()
    glu = a.kind == "rmsnorm_matmul_swiglu"

    def graph_ms(cmds, reps=23):
        g = be.capture(cmds)
        try:
            out = []
            for _ in range(reps):
                be._enqueue(q.stream, TimestampCmd(e0))
                be._enqueue(q.stream, ReplayCmd(g))
                be._enqueue(q.stream, TimestampCmd(e1))
                q.synchronize()
                out.append(be.elapsed_ms(e0, e1))
            return out[3:]
        finally:
            be.destroy_graph(g)

    rng = np.random.default_rng(0)
    kmax, nmax, tmax = max(k for _, k in shapes), max(n for n, _ in shapes), max(tokens)
    xv, yv, normv = be.alloc(tmax * kmax * 4), be.alloc(tmax * nmax * 4), be.alloc(kmax * 4)
    be._enqueue(q.stream, FillCmd(xv, tmax * kmax * 4, 0x3C000000))
    be._enqueue(q.stream, FillCmd(normv, kmax * 4, 0x3F800000))
    rows, ref = [], {}
    for n, k in shapes:
        for dt in types:
            qk = BLOCKS[dt][0]
            if k % qk:
                rows.append((dt, n, k, None, "-", 0, 0, 0, f"K not a multiple of {qk}"))
                continue
            kern = be.load_kernel(f"{a.kind}_{dt}")
            wb = weight_bytes(dt, (2 if glu else 1) * n, k)
            copies = max(2, -(-COLD_BYTES // wb))
            raw = random_weight(rng, dt, (2 if glu else 1) * n, k)
            ws = [be.alloc(wb) for _ in range(copies)]
            for w in ws:  # GGUF's bytes in the backend's device layout of dt, if it keeps one (q6_k on cuda)
                write_in_device_layout(be, dt, w, raw)
            for t in tokens:
                consts = {"T": t, "N": n, "K": k}
                if not glu:
                    consts["accumulate"] = 0
                if a.kind != "matmul":
                    consts["eps"] = 1e-5
                grid = kern.launch_grid(consts)
                if a.kind == "matmul":
                    packed, binds = struct.pack("<iiii", t, n, k, 0), lambda w: [w, xv, yv]
                elif not glu:
                    packed, binds = struct.pack("<iiiif", t, n, k, 0, 1e-5), lambda w: [w, xv, normv, yv]
                else:
                    packed, binds = struct.pack("<iiif", t, n, k, 1e-5), lambda w: [w, xv, normv, yv]
                entry = next((s for s, f in kern.entries.items() if f == grid.function), "?")
                ms = graph_ms([DispatchCmd(kern, grid, binds(w), packed) for w in ws])
                med, p99 = _stats(np.asarray(ms) / copies)
                gbs = wb / med / 1e6
                if dt == "q4_1":
                    ref[(n, k, t)] = gbs
                rows.append((dt, n, k, t, entry or '""', med * 1e3, gbs, wb / p99 / 1e6, ""))
            for w in ws:
                be.free(w)
    print(f"\n{be.description}, driver {be.driver_version}; {a.kind}, L2-cold, graph-replayed")
    print(f"{'type':8s} {'N x K':>14s} {'T':>3s} {'entry':>6s} {'us':>9s} {'GB/s':>8s} {'slow 1%':>8s} {'vs q4_1':>8s}")
    for dt, n, k, t, entry, us, gbs, slow, note in rows:
        if t is None:
            print(f"{dt:8s} {f'{n}x{k}':>14s}   -  {note}")
            continue
        r = ref.get((n, k, t))
        print(f"{dt:8s} {f'{n}x{k}':>14s} {t:3d} {entry:>6s} {us:9.2f} {gbs:8.1f} {slow:8.1f} "
              f"{(f'{gbs / r:.2f}' if r else '-'):>8s}")
    be.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
