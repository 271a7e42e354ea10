"""The integer matrix kernels (shaders/xi_mmq.cuh, XINFER_MMQ) against today's, on the cuda backend:
``python tools/mmq_bench.py [--types q4_1,q8_0] [--ts 1,8,16,64,256,512] [--quick] [--e2e]``.

A research tool, not part of the package (it drives the cuda backend's private modules, like
tools/gemv_variants.py, whose L2-cold weight copies and graph timing it reuses); run it from the
repository root with ``PYTHONPATH=$PWD``.

Kernels: for each weight type, Llama-3.1-8B's matrix shapes (N x K: 4096x4096, 1024x4096,
14336x4096, the SwiGLU gate/up 2x14336x4096 through rmsnorm_matmul_swiglu, 4096x14336,
128256x4096) and Llama-3.2-1B's (2048x2048, 512x2048, 8192x2048, 2048x8192) at each T, every
variant launched as the backend would (``_launch.matmul_launch``): ``old`` (XINFER_MMQ off: today's
xi_mvc / xi_mvt / xi_tc / ``_p`` / ``_pq`` choice, XINFER_MVP and XINFER_MVQ as set), ``mmq`` (XINFER_MMQ=1), and forced ``q1`` (the one-token entry at
every T) and ``tile`` (the tiled entries at every T), so the thresholds of ``mmq_launch`` can be
read off. A figure is one launch's device time: a CUDA graph of 20 launches over L2-cold weight
copies, timed with CUDA events over 7 replays (the first 2 left out), median / 20. Columns: us,
TFLOP/s (2 N K T, twice N with GLU), GB/s of weight bytes, and new/old. Before timing, each shape's
``mmq`` output at T = 8 is compared with ``old``'s (relative max difference: the activation
rounding, ~1e-2; a broken kernel shows up as NaN or ~1).

``--e2e``: ``bench model`` on ``synthetic:llama-3.2-1b`` (q4_1) with and without XINFER_MMQ=1, each in
its own process: 64 requests batched (the ``dev ms`` column is the GPU time of one 64-row step) and
a 256-token prefill.
"""

from __future__ import annotations

import argparse
import math
import os
import struct
import subprocess
import sys

import numpy as np

from gemv_variants import graph_replay_ms, l2_cold_copies, wbytes_of
from xinfer_async.hal._commands import DispatchCmd

SHAPES_8B = [(4096, 4096, False), (1024, 4096, False), (14336, 4096, False), (14336, 4096, True),
             (4096, 14336, False), (128256, 4096, False)]
SHAPES_1B = [(2048, 2048, False), (512, 2048, False), (8192, 2048, False), (2048, 8192, False)]
LAUNCHES = 20


def kernels_e2e(argv_model: str) -> int:
    """Run ``bench model`` with and without XINFER_MMQ=1 (a process each); print both outputs."""
    cmd = [sys.executable, "-m", "xinfer_async.bench", "model", "--model", argv_model, "--device", "cuda",
           "--slots", "64", "--batching", "--max-tokens", "32", "--prompt-tokens", "256", "--repeats", "3"]
    rc = 0
    for label, mmq in (("today's kernels", "0"), ("XINFER_MMQ=1", "1")):
        env = dict(os.environ, XINFER_MMQ=mmq)
        print(f"\n==== {label}: {' '.join(cmd[1:])}", flush=True)
        rc |= subprocess.call(cmd, env=env)
    return rc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--types", default="q4_1", help="weight types, comma-separated (default: q4_1)")
    ap.add_argument("--ts", default="1,8,16,64,256,512", help="token counts (default: 1,8,16,64,256,512)")
    ap.add_argument("--quick", action="store_true", help="8B shapes 4096x4096 and 14336x4096 GLU only")
    ap.add_argument("--e2e", action="store_true", help="also the end-to-end bench model rows (synthetic llama-3.2-1b)")
    ap.add_argument("--e2e-only", action="store_true", help="only the end-to-end rows")
    ap.add_argument("--model", default="synthetic:llama-3.2-1b", help="model of --e2e")
    args = ap.parse_args(argv)
    if args.e2e_only:
        return kernels_e2e(args.model)

    from xinfer_async.backends.cuda import CUDABackend
    from xinfer_async.backends.cuda import _launch
    from xinfer_async.backends.cuda._kernel import LaunchGrid

    be = CUDABackend()
    q = be.create_queue()
    rng = np.random.default_rng(2026)
    ts = [int(t) for t in args.ts.split(",")]
    shapes = [("8B", *s) for s in SHAPES_8B] + [("1B", *s) for s in SHAPES_1B]
    if args.quick:
        shapes = [("8B", 4096, 4096, False), ("8B", 14336, 4096, True)]
    tmax = max(ts)
    kmax = max(s[2] for s in shapes)
    nmax = max(s[1] for s in shapes)
    px, py, pn = be.alloc(tmax * kmax * 4), be.alloc(tmax * nmax * 4), be.alloc(kmax * 4)
    be.write(px, rng.standard_normal(tmax * kmax).astype(np.float32).view(np.uint8))
    be.write(pn, (1 + 0.1 * rng.standard_normal(kmax)).astype(np.float32).view(np.uint8))
    e0, e1 = be.create_timestamp(), be.create_timestamp()
    print(f"device {getattr(be, 'description', '')}, {be.multiprocessors} SMs, cc {be.compute_capability}; "
          f"a figure: one launch's device time, median of 5 graph replays of {LAUNCHES} launches (L2-cold copies)")

    def grid(kernel, dt, kind, c, mode):
        g, block, shared, suffix = _launch.matmul_launch(c, dt, kind, stage_max=be.stage_max, sms=be.multiprocessors,
                                                         cc=be.compute_capability, mmq=mode, mvp=_launch.mvp_enabled(),
                                                         mvq=_launch.mvq_enabled(), pq_max=be.pq_stage_max)
        return LaunchGrid(g, block, shared, kernel.entries[suffix]), suffix

    def dispatch(kernel, lg, kind, w, T, N, K):
        if kind == "matmul":
            return DispatchCmd(kernel, lg, [w, px, py], struct.pack("<iiii", T, N, K, 0))
        return DispatchCmd(kernel, lg, [w, px, pn, py], struct.pack("<iiif", T, N, K, 1e-5))

    variants = [("old", ""), ("mmq", "auto"), ("q1", "q1"), ("tile", "tile")]
    rc = 0
    for dt in args.types.split(","):
        kern = {k: be.load_kernel(f"{k}_{dt}") for k in ("matmul", "rmsnorm_matmul_swiglu")}
        print(f"\n{dt}: {'model':>3} {'N':>6} {'K':>6} {'glu':>3} {'T':>4} "
              + " ".join(f"{v:>25}" for v, _ in variants) + f" {'mmq/old':>7}  (us  TFLOP/s  GB/s; entry)")
        for model, N, K, glu in shapes:
            kind = "rmsnorm_matmul_swiglu" if glu else "matmul"
            k = kern[kind]
            rows = 2 * N if glu else N
            wb = wbytes_of(dt, rows, K)
            big, stride, copies = l2_cold_copies(be, q, rng, dt, rows, K, LAUNCHES)
            # sanity: mmq against old at T = 8
            outs = {}
            for label, mode in (("old", ""), ("mmq", "auto")):
                c = dict(T=8, N=N, K=K, accumulate=0, eps=1e-5)
                lg, _ = grid(k, dt, kind, c, mode)
                be._enqueue(q.stream, dispatch(k, lg, kind, big, 8, N, K))
                q.synchronize()
                y = np.empty(8 * N, np.float32)
                be.read(py, y.view(np.uint8))
                outs[label] = y
            diff = float(np.max(np.abs(outs["mmq"] - outs["old"])) / max(1e-30, float(np.max(np.abs(outs["old"])))))
            if not math.isfinite(diff) or diff > 0.1:
                rc = 1
            print(f"  {model} {N}x{K}{' glu' if glu else ''}: mmq vs old at T=8, max |diff| / max |old| = {diff:.2e}")
            for T in ts:
                c = dict(T=T, N=N, K=K, accumulate=0, eps=1e-5)
                flop = 2.0 * rows * K * T
                cells, us_of = [], {}
                for label, mode in variants:
                    lg, suffix = grid(k, dt, kind, c, mode)
                    cmds = [dispatch(k, lg, kind, big + (i % copies) * stride, T, N, K) for i in range(LAUNCHES)]
                    us = graph_replay_ms(be, q, (e0, e1), cmds, reps=7) * 1e3 / LAUNCHES
                    us_of[label] = us
                    cells.append(f"{us:8.1f} {flop / us / 1e6:5.1f} {wb / us / 1e3:5.0f}{suffix or '-':>5}")
                print(f"      {model:>3} {N:>6} {K:>6} {'y' if glu else 'n':>3} {T:>4} " + " ".join(cells)
                      + f" {us_of['mmq'] / us_of['old']:7.2f}", flush=True)
            be.free(big)
    for p in (px, py, pn):
        be.free(p)
    if args.e2e:
        rc |= kernels_e2e(args.model)
    return rc


if __name__ == "__main__":
    sys.exit(main())
