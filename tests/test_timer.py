"""runtime/_timer.py: GpuTimer on device timestamps."""

import math

import numpy as np
import pytest

from xinfer_async import Gemm, ValidationError


async def _time_gemm(dev, rng, m):
    a = dev.upload(rng.standard_normal((m, m)).astype(np.float32))
    b = dev.upload(rng.standard_normal((m, m)).astype(np.float32))
    c = dev.alloc((m, m), "f32")
    gemm = Gemm(dev, m, m, m).compile()
    gemm.bind(a, b, c)
    ex = dev.executor()
    timer = dev.timer()
    timer.begin(ex)
    for _ in range(4):
        gemm.dispatch(ex)
    timer.end(ex)
    with pytest.raises(ValidationError, match=r"^GpuTimer: the command list's fence has not completed$"):
        timer.elapsed_ms()
    await ex.submit_and_wait()
    ex.reset()  # the timer stays readable after its list is reused
    return timer.elapsed_ms()


async def test_gpu_timer_reports_nonnegative(devices, rng):
    # the large product must outlast what other processes sharing the GPU add to the small one: under
    # the 16-worker GPU suite a 512^3 product (four: ~0.09 ms on the H200) once timed below 16^3's
    # (0.11 ms); 2048^3 x 4 takes ~1 ms there
    n = 2048 if devices.name == "cuda" else 512
    small = min([await _time_gemm(devices, rng, 16) for _ in range(3)])
    large = min([await _time_gemm(devices, rng, n) for _ in range(3)])
    for t in (small, large):
        assert math.isfinite(t) and t >= 0.0
    assert large > small  # 2e6x (cuda) or 32768x (cpu) the flops


def test_timer_misuse(devices):
    timer = devices.timer()
    with pytest.raises(ValidationError, match=r"^GpuTimer.end\(\) before begin\(\)$"):
        timer.end(devices.executor())
    with pytest.raises(ValidationError, match=r"^GpuTimer: record begin\(\) and end\(\) first$"):
        timer.elapsed_ms()


async def test_profile_graph_times_each_command(devices, rng):
    """runtime/_profile.py: a row per command of a captured graph, in order, labelled by kernel."""
    from xinfer_async.runtime._profile import by_label, profile_graph

    n = 1 << 16
    x = devices.upload(rng.standard_normal(n).astype(np.float32))
    y = devices.alloc((n,), "f32")
    ex = devices.executor()
    ex.dispatch("affine", [x, y], {"n": n, "a": 2.0, "b": 1.0})
    ex.dispatch("add", [y, x, y], {"n": n})
    ex.dispatch("affine", [x, y], {"n": n, "a": 3.0, "b": 0.0})
    graph = ex.capture()
    rows = await profile_graph(devices.queue, graph, reps=3)
    assert [r["label"] for r in rows] == ["affine", "add", "affine"] and [r["index"] for r in rows] == [0, 1, 2]
    assert all(r["us"] >= 0 and math.isfinite(r["us"]) for r in rows)
    summed = by_label(rows)
    assert {s["label"]: s["calls"] for s in summed} == {"affine": 2, "add": 1}
    graph.destroy()


def test_command_label_names_the_entry_point():
    """A dispatch's label is its kernel's name, plus the suffix of the entry point its grid launches
    (cuda matrix kernels: `/t`, `/tc`, `/tct`), so a profile keeps the tensor-core launches apart."""
    from xinfer_async.hal._commands import CopyCmd, DispatchCmd, ReplayCmd
    from xinfer_async.runtime._profile import command_label

    class Kernel:
        name, function, entries = "matmul_q4_1", 11, {"": 11, "_t": 12, "_tc": 13, "_tct": 14}

    class Grid(tuple):
        function = None

    for fn, label in [(11, "matmul_q4_1"), (12, "matmul_q4_1/t"), (14, "matmul_q4_1/tct"), (None, "matmul_q4_1")]:
        g = Grid((1, 1, 1))
        g.function = fn
        assert command_label(DispatchCmd(Kernel, g, [], b"")) == label
    assert command_label(DispatchCmd(Kernel, (1, 1, 1), [], b"")) == "matmul_q4_1"
    assert command_label(CopyCmd(1, 2, 3)) == "copy"
    assert command_label(ReplayCmd(None)) == "graph"
