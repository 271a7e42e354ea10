"""Upload, then ``rmsnorm`` from many trio tasks through the device's pool of command lists.

Each of ``--tasks`` tasks takes a command list from ``device.command_lists`` (at most
``--lists`` at once), uploads its own random rows x (rows, dim) f32, dispatches
``rmsnorm`` (y = x / sqrt(mean(x^2) + eps) * w, with one shared weight w (dim,)), downloads y,
awaits the fence and checks y against a numpy float64 reference.

Usage: ``python examples/hello_device.py [--device cpu|cuda|auto] [--tasks 64] [--lists 4]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import trio

import xinfer_async as xa


async def main(device: str, tasks: int, lists: int, rows: int = 8, dim: int = 576) -> float:
    eps = 1e-5
    rng = np.random.default_rng()
    with xa.open_device(device, command_lists=lists) as dev:
        w = rng.standard_normal(dim).astype(np.float32)
        w_buf = dev.upload(w)  # shared by every task: uploaded once
        worst = 0.0

        async def one(i: int) -> None:
            nonlocal worst
            x = rng.standard_normal((rows, dim)).astype(np.float32)
            x_buf, y_buf = dev.alloc((rows, dim), "f32"), dev.alloc((rows, dim), "f32")
            async with dev.command_lists.acquire() as cl:
                cl.upload(x_buf, x)
                cl.dispatch("rmsnorm", [x_buf, w_buf, y_buf], {"rows": rows, "dim": dim, "eps": eps})
                y = cl.download(y_buf)
                await cl.submit_and_wait()
            x64 = x.astype(np.float64)
            ref = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + eps) * w
            err = float(np.abs(y.numpy((rows, dim)) - ref).max() / np.abs(ref).max())
            worst = max(worst, err)
            x_buf.free()  # released once no submitted list uses it
            y_buf.free()

        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(tasks):
                nursery.start_soon(one, i)
        elapsed = time.perf_counter() - t0
        st = dev.command_lists.statistics()
        print(f"device: {dev.description}")
        print(f"{tasks} tasks, rmsnorm ({rows}x{dim} f32) each, through {st.size} pooled command lists "
              f"(at most {st.max_in_use} in use): {elapsed * 1e3:.1f} ms")
        print(f"max relative error vs numpy float64: {worst:.2e}")
        if worst > 1e-5:
            raise SystemExit(f"FAILED: error {worst:.2e} > 1e-5")
        print("OK")
        return worst


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto (default: $XINFER_DEVICE, else auto)")
    p.add_argument("--tasks", type=int, default=64)
    p.add_argument("--lists", type=int, default=4)
    args = p.parse_args()
    trio.run(main, args.device, args.tasks, args.lists)
