"""Device time of each command of a captured graph: where a decode step's GPU time goes.

``await profile_graph(queue, graph)`` captures every kernel launch (and copy, fill, gemm) of
``graph`` on its own, ``reps`` times in a row, into a graph of its own, replays that between two
device timestamps and divides: the command's device time with the graph-node overhead it has in
the real graph, its inputs warm in L2 (a real step reads a layer's weights cold: per-kernel sums
come out a little under the whole graph's time).

The commands run again with the buffers they had at capture: a profile scribbles over the
activations and caches the graph uses, so run it only where their contents no longer matter (after
the benchmark, before the model serves a request again: the next request rewrites them).
"""

from __future__ import annotations

from collections import defaultdict

from ..hal._commands import Command, DispatchCmd, ReplayCmd, TimestampCmd
from ._executor import CapturedGraph
from ._queue import Queue


def command_label(cmd: Command) -> str:
    """``dispatch``: the kernel's name, plus ``/`` and the entry's suffix when its grid launches
    another entry point of the shader (the matrix kernels: ``/t`` the register-tiled kernel, ``/tc``
    and ``/tct`` the tensor-core one; attention's ``/d4``, ``/d8`` for wide heads; cuda
    ``CUDAKernel.entries``); other commands: their kind."""
    if isinstance(cmd, DispatchCmd):
        k, grid = cmd.kernel, cmd.grid
        name = getattr(k, "name", str(k))
        fn = getattr(grid, "function", None)
        suffix = next((s for s, f in getattr(k, "entries", {}).items() if f == fn), "")
        return name + ("/" + suffix.lstrip("_") if suffix else "")
    return cmd.kind


async def profile_graph(queue: Queue, graph: CapturedGraph, reps: int = 20) -> list[dict]:
    """Per command of ``graph`` (``CapturedGraph``), in graph order: ``{"index", "label", "us"}``
    (device microseconds of one run: the mean over ``reps`` back-to-back runs).

    Raises:
        ValueError: the graph holds no commands to profile (captured before ``commands`` were kept).
        DeviceError: capture or execution failed.
    """
    if not graph.commands:
        raise ValueError("profile_graph: the graph keeps no commands")
    be = queue.device.backend
    out = []
    for i, cmd in enumerate(graph.commands):
        handle = be.capture([cmd] * reps)
        t0, t1 = be.create_timestamp(), be.create_timestamp()
        try:
            value = queue.submit_lowered([TimestampCmd(t0), ReplayCmd(handle), TimestampCmd(t1)])
            await queue.fence.wait(value)
            out.append(dict(index=i, label=command_label(cmd), us=1e3 * be.elapsed_ms(t0, t1) / reps))
        finally:
            be.destroy_graph(handle)
            for ts in (t0, t1):
                if hasattr(be, "destroy_timestamp"):
                    be.destroy_timestamp(ts)
    return out


def by_label(rows: list[dict]) -> list[dict]:
    """``profile_graph`` rows summed by label, largest first: ``{"label", "calls", "us"}``."""
    acc: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for r in rows:
        a = acc[r["label"]]
        a[0] += 1
        a[1] += r["us"]
    return sorted((dict(label=k, calls=v[0], us=v[1]) for k, v in acc.items()), key=lambda r: -r["us"])
