"""Raw figures of the cuda backend (``xinfer-async bench cuda-raw``): launch and fence
round trips, host cost of ``cuLaunchKernel`` / ``cuGraphLaunch``, achieved GB/s of rmsnorm and
matmul_q4_1 on 4096x4096, cuBLAS GEMM TFLOP/s. Medians and the slow tail over timed repetitions
after warm-up; GPU times from CUDA events.

Columns: ``median``; ``slow 1%``: the 99th percentile of a time (us), the 1st percentile of a rate
(GB/s, TFLOP/s: the rate of the 99th-percentile time), so it is the slow side for both; ``unit``.
Needs a usable cuda device."""

from __future__ import annotations

import os
import select
import struct
import sys
import time

import numpy as np

from .. import _native
from ..backends.cuda import CUDABackend
from ..hal._commands import DispatchCmd, FillCmd, GemmCmd, ReplayCmd, TimestampCmd


def _us(xs):
    return [x * 1e6 for x in xs]


def _stats(xs):
    xs = np.sort(np.asarray(xs, np.float64))
    return float(np.median(xs)), float(xs[min(len(xs) - 1, int(0.99 * len(xs)))])


def main(argv=None) -> int:
    from xinfer_async.bench import parser

    parser("cuda-raw", __doc__).parse_args(sys.argv[1:] if argv is None else argv)  # --help: before any cuda call
    be = CUDABackend()
    q = be.create_queue()
    rows = []

    def row(what, med, p99, unit, note=""):
        rows.append((what, med, p99, unit, note))

    affine = be.load_kernel("affine")
    x = be.alloc(1 << 12)
    tiny = DispatchCmd(affine, (1, 1, 1), [x, x], struct.pack("<iff", 1, 1.0, 0.0))
    # launch + cuStreamSynchronize
    ts = []
    for i in range(2200):
        t = time.perf_counter()
        be._enqueue(q.stream, tiny)
        q.synchronize()
        ts.append(time.perf_counter() - t)
    row("launch + cuStreamSynchronize", *_stats(_us(ts[200:])), "us")
    # launch + host callback -> eventfd -> poll
    fd = os.eventfd(0, os.EFD_CLOEXEC)
    comp = _native.ffi.new("int64_t *", 0)
    p = select.poll()
    p.register(fd, select.POLLIN)
    ts = []
    for v in range(1, 2201):
        sig = _native.ffi.new("xi_signal *", {"fd": fd, "completed": comp, "value": v})
        t = time.perf_counter()
        q.execute([tiny], sig)
        p.poll()
        os.read(fd, 8)
        ts.append(time.perf_counter() - t)
    row("launch + host fn -> eventfd", *_stats(_us(ts[200:])), "us")
    # host cost of one cuLaunchKernel (via _enqueue, with arg packing)
    ts = []
    for i in range(5000):
        t = time.perf_counter()
        be._enqueue(q.stream, tiny)
        ts.append(time.perf_counter() - t)
    q.synchronize()
    row("host: dispatch (cuLaunchKernel)", *_stats(_us(ts[500:])), "us")
    # graph: host cost of cuGraphLaunch, GPU time per node
    n_nodes = 200
    g = be.capture([tiny] * n_nodes)
    gcmd = ReplayCmd(g)
    ts = []
    for i in range(600):
        t = time.perf_counter()
        be._enqueue(q.stream, gcmd)
        ts.append(time.perf_counter() - t)
        if i % 50 == 0:
            q.synchronize()
    q.synchronize()
    row(f"host: cuGraphLaunch ({n_nodes} nodes)", *_stats(_us(ts[100:])), "us")
    e0, e1 = be.create_timestamp(), be.create_timestamp()

    def gpu_ms(cmds, reps):
        out = []
        for _ in range(reps):
            be._enqueue(q.stream, TimestampCmd(e0))
            for c in cmds:
                be._enqueue(q.stream, c)
            be._enqueue(q.stream, TimestampCmd(e1))
            q.synchronize()
            out.append(be.elapsed_ms(e0, e1))
        return out[3:]

    ms = gpu_ms([gcmd], 53)
    med, p99 = _stats(ms)
    row("graph: GPU time per node", med * 1e3 / n_nodes, p99 * 1e3 / n_nodes, "us")
    be.destroy_graph(g)
    # rmsnorm 4096 x 4096
    n = 4096
    rms = be.load_kernel("rmsnorm")
    a, w, y = be.alloc(n * n * 4), be.alloc(n * 4), be.alloc(n * n * 4)
    be.write(a, np.random.default_rng(0).standard_normal(n * n).astype(np.float32).view(np.uint8))
    cmd = DispatchCmd(rms, (n, 1, 1), [a, w, y], struct.pack("<iif", n, n, 1e-5))
    ms = gpu_ms([cmd] * 10, 23)
    med, p99 = _stats(np.asarray(ms) / 10)
    nbytes = 2 * n * n * 4
    row("rmsnorm 4096x4096 f32", nbytes / med / 1e6, nbytes / p99 / 1e6, "GB/s", f"{med * 1e3:.1f} us median")
    def graph_ms(cmds, reps):
        # the dispatches replayed from one CUDA graph: enqueued one by one from Python (~10 us of host
        # time each) the GPU would wait on the host and the figure would be the host's
        g = be.capture(cmds)
        try:
            return gpu_ms([ReplayCmd(g)], reps)
        finally:
            be.destroy_graph(g)

    # matmul_DT: N=K=4096; 'cold': 16 distinct weights (>= 168 MB, past the 60 MB L2) in turn, one graph
    # (per-dispatch figures include the ~0.9 us graph node overhead)
    xv = be.alloc(8 * n * 4)
    yv = be.alloc(8 * n * 4)
    be._enqueue(q.stream, FillCmd(xv, 8 * n * 4, 0x3C000000))
    rng = np.random.default_rng(1)
    for dt, block, Ts in (("q4_1", 20, (1, 4, 8)), ("q4_0", 18, (1,)), ("q8_0", 34, (1,)), ("f16", 64, (1,))):
        mm = be.load_kernel(f"matmul_{dt}")
        wbytes = n * n // 32 * block
        raw = rng.integers(0, 256, wbytes, dtype=np.uint8)
        if dt != "f16":
            raw.reshape(-1, block)[:, 0:2] = np.array([0.01], np.float16).view(np.uint8)
        else:
            raw = rng.standard_normal(n * n).astype(np.float16).view(np.uint8)
        ws = [be.alloc(wbytes) for _ in range(16)]
        for p_ in ws:
            be.write(p_, raw)
        for T in Ts:
            grid = mm.launch_grid(dict(T=T, N=n, K=n, accumulate=0))
            cmds = [DispatchCmd(mm, grid, [p_, xv, yv], struct.pack("<iiii", T, n, n, 0)) for p_ in ws]
            ms = graph_ms(cmds, 23)
            med, p99 = _stats(np.asarray(ms) / len(ws))
            row(f"matmul_{dt} 4096x4096 T={T} (L2-cold)", wbytes / med / 1e6, wbytes / p99 / 1e6, "GB/s",
                f"{med * 1e3:.1f} us, {100 * wbytes / med / 1e6 / 4300:.0f}% of 4.3 TB/s")
        if dt == "q4_1":
            cmds = [DispatchCmd(mm, mm.launch_grid(dict(T=1, N=n, K=n, accumulate=0)), [ws[0], xv, yv],
                     struct.pack("<iiii", 1, n, n, 0))] * 16
            ms = graph_ms(cmds, 23)
            med, p99 = _stats(np.asarray(ms) / 16)
            row("matmul_q4_1 4096x4096 T=1 (L2-hot)", wbytes / med / 1e6, wbytes / p99 / 1e6, "GB/s", f"{med * 1e3:.1f} us")
        for p_ in ws:
            be.free(p_)
    # cuBLAS GEMM
    for dtype, size in (("bf16", 8192), ("f16", 8192), ("f32", 4096)):
        item = 4 if dtype == "f32" else 2
        one = {"bf16": 0x3F803F80, "f16": 0x3C003C00, "f32": 0x3F800000}[dtype]
        A, B, C = (be.alloc(size * size * item) for _ in range(3))
        be._enqueue(q.stream, FillCmd(A, size * size * item, one))
        be._enqueue(q.stream, FillCmd(B, size * size * item, one))
        gm = be.create_gemm(dtype, size, size, size, False)
        ms = gpu_ms([GemmCmd(gm, A, B, C)] * 5, 8)
        med, p99 = _stats(np.asarray(ms) / 5)
        flop = 2 * size**3
        row(f"gemm {dtype} {size}^3 (cuBLAS)", flop / med / 1e9, flop / p99 / 1e9, "TFLOP/s", "constant data")
        for p_ in (A, B, C):
            be.free(p_)
    print(f"\n{be.description}, driver {be.driver_version}")
    print(f"{'figure':44s} {'median':>10s} {'slow 1%':>10s}  unit")
    for what, med, p99, unit, note in rows:
        print(f"{what:44s} {med:10.2f} {p99:10.2f}  {unit:8s} {note}")
    be.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
