"""Model-layer benchmark: runs per second of a small prepared model (rmsnorm then matmul, two
fragments in one graph) at several capacities, and the host overhead of ``PreparedModel.run``
against the bare executor paths.

Rows:
- ``prepared``: ``capacity`` slots driven by ``4 x capacity`` trio tasks; latency is per ``run``
  call (slot wait included), runs/s over the wall time of all tasks.
- ``executor``: one task records upload + 2 dispatches + download into a fresh ``Executor`` and
  ``submit_and_wait``s it, each run.
- ``replay``: one task records upload + ``replay`` of a captured graph + download each run.
- ``prepared``, 1 task, capacity 1: the same sequential loop through ``PreparedModel.run``.

The overhead line is the median of the sequential ``prepared`` row minus each bare path's median.
Warm-up runs are left out; every latency is measured after the fence is awaited.

Usage: ``xinfer-async bench model-layer [--device auto] [--runs 400] [--capacities 1,4,16]``
"""

from __future__ import annotations

import time

import numpy as np
import trio
from . import parser as bench_parser

from .._open import open_device
from ..hal import Access, TensorDesc
from ..model import Binding, Dispatch, Indices, IODesc, ModelContext, ModelSession

EPS = 1e-5


def _build(dev, rows: int, dim: int, n: int, rng):
    w_norm = rng.standard_normal(dim).astype(np.float32)
    W = rng.standard_normal((n, dim)).astype(np.float32)
    s = ModelSession(dev)
    wn = s.weight(w_norm, TensorDesc((dim,), "f32"))
    wm = s.weight(W, TensorDesc((n, dim), "f32"))
    x, y, z = s.scratch(rows * dim * 4), s.scratch(rows * dim * 4), s.scratch(rows * n * 4)
    kn, km = s.kernel("rmsnorm"), s.kernel("matmul_f32")
    d = s.freeze(ModelContext(dev))
    act = TensorDesc((rows, dim), "f32")
    norm_c = {"rows": rows, "dim": dim, "eps": EPS}
    mm_c = Indices(rows, n, dim, 0)
    f1 = d.fragment([Dispatch(kn, [Binding(x), Binding(wn), Binding(y, Access.WRITE)], norm_c)], [IODesc(x, act)], [IODesc(y, act)])
    f2 = d.fragment([Dispatch(km, [Binding(wm), Binding(y), Binding(z, Access.READ_WRITE)], mm_c)],
                    [IODesc(y, act)], [IODesc(z, TensorDesc((rows, n), "f32"))])
    g = d.graph()
    inp = g.input(act)
    (h,) = f1.record(g, [inp])
    (out,) = f2.record(g, [h])
    ref = lambda xin: (lambda xd: (xd / np.sqrt((xd ** 2).mean(-1, keepdims=True) + EPS) * w_norm) @ W.T.astype(np.float64))(xin.astype(np.float64))  # noqa: E731
    return d, g, inp, out, (wn, wm), ref


def _stats(lat_s: list[float], wall_s: float) -> tuple[float, float, float, float]:
    a = np.array(lat_s) * 1e3
    return float(np.median(a)), float(np.percentile(a, 10)), float(np.percentile(a, 90)), len(a) / wall_s


async def _prepared(g, inp, out, capacity: int, tasks: int, runs: int, warmup: int, rng, ref) -> tuple:
    pm = g.prepare([inp], [out], capacity)
    xs = [rng.standard_normal(inp.desc.shape).astype(np.float32) for _ in range(8)]
    for i in range(warmup):
        (z,) = await pm.run([xs[i % 8]])
    assert np.abs(z - ref(xs[(warmup - 1) % 8])).max() < 1e-3
    lat: list[float] = []
    left = [runs]

    async def worker(k: int) -> None:
        i = k
        while left[0] > 0:
            left[0] -= 1
            t0 = time.perf_counter()
            await pm.run([xs[i % 8]])
            lat.append(time.perf_counter() - t0)
            i += 1

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for k in range(tasks):
            nursery.start_soon(worker, k)
    wall = time.perf_counter() - t0
    st = pm.statistics()
    pm.close()
    return _stats(lat, wall), st.max_busy


async def _bare(dev, g, weights, inp, out, runs: int, warmup: int, rng, replay: bool) -> tuple:
    """The same commands without the model layer: fresh Executor per run, submit_and_wait."""
    rows, dim = inp.desc.shape
    n = out.desc.shape[1]
    wn, wm = (w.allocation.buffer for w in weights)
    xb, yb, zb = dev.alloc((rows, dim), "f32"), dev.alloc((rows, dim), "f32"), dev.alloc((rows, n), "f32")
    consts = [g.commands[0].constants, g.commands[1].constants]  # the constants the fragments recorded

    def record_body(ex) -> None:
        ex.dispatch("rmsnorm", [xb, wn, yb], consts[0])
        ex.dispatch("matmul_f32", [wm, yb, zb], consts[1])

    graph = None
    if replay:
        cap = dev.executor()
        record_body(cap)
        graph = cap.capture()
    xs = [rng.standard_normal((rows, dim)).astype(np.float32) for _ in range(8)]
    lat: list[float] = []
    t_start = None
    for i in range(warmup + runs):
        if i == warmup:
            t_start = time.perf_counter()
        t0 = time.perf_counter()
        ex = dev.executor()
        ex.upload(xb, xs[i % 8])
        if graph is not None:
            ex.replay(graph)
        else:
            record_body(ex)
        rb = ex.download(zb)
        await ex.submit_and_wait()
        rb.numpy((rows, n))
        if i >= warmup:
            lat.append(time.perf_counter() - t0)
    wall = time.perf_counter() - t_start
    if graph is not None:
        graph.destroy()
    for b in (xb, yb, zb):
        b.free()
    return _stats(lat, wall)


async def _main(args) -> None:
    rng = np.random.default_rng(0)
    caps = [int(c) for c in args.capacities.split(",")]
    with open_device(args.device, command_lists=max(8, 4 * max(caps))) as dev:
        d, g, inp, out, weights, ref = _build(dev, args.rows, args.dim, args.n, rng)
        print(f"model-layer on {dev.description}: rmsnorm ({args.rows}x{args.dim}) -> matmul_f32 (N={args.n}), "
              f"{args.runs} timed runs per row after {args.warmup} warm-up, weights {d.weight_bytes()} B")
        rows = []
        for c in caps:
            (med, p10, p90, rps), max_busy = await _prepared(g, inp, out, c, 4 * c, args.runs, args.warmup, rng, ref)
            rows.append(("prepared.run", c, 4 * c, med, p10, p90, rps, max_busy))
        seq_row, _ = await _prepared(g, inp, out, 1, 1, args.runs, args.warmup, rng, ref)
        rows.append(("prepared.run (seq)", 1, 1, *seq_row, 1))
        ex_row = await _bare(dev, g, weights, inp, out, args.runs, args.warmup, rng, replay=False)
        rows.append(("executor (seq)", "-", 1, *ex_row, "-"))
        rp_row = await _bare(dev, g, weights, inp, out, args.runs, args.warmup, rng, replay=True)
        rows.append(("replay (seq)", "-", 1, *rp_row, "-"))
        print(f"{'path':<20} {'capacity':>8} {'tasks':>5} {'median ms':>10} {'p10-p90 ms':>15} {'runs/s':>9} {'max busy':>8}")
        for name, c, t, med, p10, p90, rps, mb in rows:
            print(f"{name:<20} {c!s:>8} {t:>5} {med:>10.3f} {f'{p10:.3f}-{p90:.3f}':>15} {rps:>9.0f} {mb!s:>8}")
        print(f"host overhead of prepared.run per run: {1e3 * (seq_row[0] - rp_row[0]):+.1f} us vs replay, "
              f"{1e3 * (seq_row[0] - ex_row[0]):+.1f} us vs executor (medians, sequential)")


def main(argv: list[str] | None = None) -> int:
    p = bench_parser("model-layer", __doc__)
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: auto)")
    p.add_argument("--runs", type=int, default=400, help="timed runs per row (default: 400)")
    p.add_argument("--warmup", type=int, default=20, help="untimed runs before each row (default: 20)")
    p.add_argument("--capacities", default="1,4,16", help="comma-separated slot counts (default: 1,4,16)")
    p.add_argument("--rows", type=int, default=8, help="rows (tokens) of the input a run (default: 8)")
    p.add_argument("--dim", type=int, default=64, help="width of the rmsnorm and K of the matmul (default: 64)")
    p.add_argument("--n", type=int, default=32, help="output width N of the matmul (default: 32)")
    args = p.parse_args(argv)
    trio.run(_main, args)
    return 0
