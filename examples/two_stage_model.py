"""Two fragments recorded into one graph, prepared as 4 inference slots, driven by 64 trio tasks.

Stage 1 is ``rmsnorm`` (x (rows, dim) f32, weight w (dim,) -> y (rows, dim)), stage 2 a ``matmul_f32``
(W (n, dim) @ y -> z (rows, n)). ``ModelFragment.record`` binds stage 2's input to stage 1's output
in place (no copy); ``Graph.prepare(capacity=4)`` gives 4 fixed-address slots that share the two
weights. Every task runs its own random input and checks the result against a numpy float64
reference; ``statistics().max_busy`` shows that no more than 4 slots were ever busy.

Usage: ``python examples/two_stage_model.py [--device cpu|cuda|auto] [--tasks 64] [--capacity 4]``
"""

from __future__ import annotations

import argparse

import numpy as np
import trio

import xinfer_async as xa
from xinfer_async.hal import Access, TensorDesc
from xinfer_async.model import Binding, Dispatch, Indices, IODesc, ModelContext, ModelSession

EPS = 1e-5


def reference(x: np.ndarray, w_norm: np.ndarray, W: np.ndarray) -> np.ndarray:
    """rmsnorm then matmul in float64: (rows, dim) -> (rows, n)."""
    xd = x.astype(np.float64)
    h = xd / np.sqrt((xd ** 2).mean(-1, keepdims=True) + EPS) * w_norm
    return h @ W.T.astype(np.float64)


async def run(device_name: str, tasks: int, capacity: int, rows: int = 8, dim: int = 64, n: int = 32) -> dict:
    """Build, prepare and drive the model; returns the summary (runs, max_busy, max_abs_error)."""
    rng = np.random.default_rng()
    w_norm = rng.standard_normal(dim).astype(np.float32)  # (dim,)
    W = rng.standard_normal((n, dim)).astype(np.float32)  # (n, dim)
    with xa.open_device(device_name) as dev:
        s = ModelSession(dev)
        wn = s.weight(w_norm, TensorDesc((dim,), "f32"))
        wm = s.weight(W, TensorDesc((n, dim), "f32"))
        x, y, z = s.scratch(rows * dim * 4), s.scratch(rows * dim * 4), s.scratch(rows * n * 4)
        kn, km = s.kernel("rmsnorm"), s.kernel("matmul_f32")
        d = s.freeze(ModelContext(dev))

        act = TensorDesc((rows, dim), "f32")
        norm = d.fragment([Dispatch(kn, [Binding(x), Binding(wn), Binding(y, Access.WRITE)],
                                    {"rows": rows, "dim": dim, "eps": EPS})],
                          [IODesc(x, act)], [IODesc(y, act)])
        proj = d.fragment([Dispatch(km, [Binding(wm), Binding(y), Binding(z, Access.READ_WRITE)],
                                    Indices(rows, n, dim, 0))],
                          [IODesc(y, act)], [IODesc(z, TensorDesc((rows, n), "f32"))])

        g = d.graph()
        inp = g.input(act)
        (h,) = norm.record(g, [inp])
        (out,) = proj.record(g, [h])
        prepared = g.prepare([inp], [out], capacity=capacity)

        errors: list[float] = []

        async def one() -> None:
            xin = rng.standard_normal((rows, dim)).astype(np.float32)
            (res,) = await prepared.run([xin])
            errors.append(float(np.abs(res - reference(xin, w_norm, W)).max()))

        async with trio.open_nursery() as nursery:
            for _ in range(tasks):
                nursery.start_soon(one)
        st = prepared.statistics()
        prepared.close()
        return {"device": dev.name, "runs": st.runs, "capacity": st.capacity, "max_busy": st.max_busy,
                "max_abs_error": max(errors), "weight_bytes": st.weight_bytes,
                "private_bytes_per_slot": st.private_bytes_per_slot}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: auto)")
    p.add_argument("--tasks", type=int, default=64, help="concurrent trio tasks, one run each (default: 64)")
    p.add_argument("--capacity", type=int, default=4, help="inference slots (default: 4)")
    args = p.parse_args(argv)
    summary = trio.run(run, args.device, args.tasks, args.capacity)
    print(f"device {summary['device']}: {summary['runs']} runs on {summary['capacity']} slots, "
          f"max slots busy {summary['max_busy']}, max abs error {summary['max_abs_error']:.2e} "
          f"(weights {summary['weight_bytes']} B shared, {summary['private_bytes_per_slot']} B private per slot)")
    if summary["max_abs_error"] > 1e-3 or summary["max_busy"] > summary["capacity"]:
        raise SystemExit("two_stage_model: FAILED")
    return summary


if __name__ == "__main__":
    main()
