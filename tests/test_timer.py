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


def test_bench_labels_a_matrix_kernel_with_its_shape():
    """bench model's timeline and kernel tables label a matrix kernel with the N x K of its launch (its
    packed constants, read by its declaration), so o and down, both matmul_q4_1/pq, get rows of their
    own; other kernels, undeclared names and constants of another size keep command_label's label."""
    import struct

    from xinfer_async.bench._model import _shaped_label
    from xinfer_async.hal._commands import CopyCmd, DispatchCmd

    class Grid(tuple):
        function = 12

    def kernel(name):
        return type("K", (), dict(name=name, function=11, entries={"": 11, "_pq": 12}))

    pq = Grid((1, 1, 1))
    o = DispatchCmd(kernel("matmul_q4_1"), pq, [], struct.pack("<iiii", 1, 4096, 4096, 1))
    down = DispatchCmd(kernel("matmul_q4_1"), pq, [], struct.pack("<iiii", 1, 4096, 14336, 1))
    glu = DispatchCmd(kernel("rmsnorm_matmul_swiglu_q4_k"), (1, 1, 1), [], struct.pack("<iiif", 1, 14336, 4096, 1e-5))
    assert _shaped_label(o) == "matmul_q4_1/pq 4096x4096"
    assert _shaped_label(down) == "matmul_q4_1/pq 4096x14336"
    assert _shaped_label(glu) == "rmsnorm_matmul_swiglu_q4_k 14336x4096"
    att = struct.pack("<iiiiiifi", 1, 32, 8, 128, 640, 6144, 0.088, 0)
    assert _shaped_label(DispatchCmd(kernel("attention"), (1, 1, 1), [], att)) == "attention"
    assert _shaped_label(DispatchCmd(kernel("matmul_q4_1"), pq, [], b"")) == "matmul_q4_1/pq"
    assert _shaped_label(DispatchCmd(kernel("no_such_kernel"), (1, 1, 1), [], b"\0" * 16)) == "no_such_kernel"
    assert _shaped_label(CopyCmd(1, 2, 3)) == "copy"


def test_timeline_step_rows_from_known_launches():
    """backends/cuda/_timeline.py step_rows: in-situ time = the next launch's go minus this one's (the
    step's last kernel: the next step's first go), lead = go - arrive; medians over the full steps."""
    from xinfer_async.backends.cuda._timeline import step_rows

    labels = ["a", "b", "a", "c"]
    busy = {0: [10.0, 20.0, 30.0, 40.0], 1: [12.0, 22.0, 32.0, 44.0], 2: [11.0, 21.0, 31.0, 90.0]}  # us, step -> kernel
    lead = [1.0, 0.0, 2.5, 0.5]
    go, t = [], 1_000_000.0
    for s in range(3):
        for i in range(4):
            go.append(t)
            t += busy[s][i] * 1e3
    go.append(t)  # a 4th step's first launch: steps 0..2 are full
    go += [t + 5e3, t + 6e3, t + 7e3]
    arrive = [g - 1e3 * lead[j % 4] for j, g in enumerate(go)]
    rec = np.array([arrive, go], dtype=np.int64).T
    r = step_rows(rec, labels)
    assert r["steps"] == 3 and r["resolution_ns"] == 500.0  # the smallest nonzero gap: c's lead
    assert r["step_us"] == pytest.approx(np.mean([sum(busy[s]) for s in range(3)]))
    rows = {k["label"]: k for k in r["kernels"]}
    assert {k: v["calls"] for k, v in rows.items()} == {"a": 2, "b": 1, "c": 1}
    assert rows["a"]["us"] == pytest.approx(np.mean([busy[s][0] + busy[s][2] for s in range(3)]))
    assert rows["c"]["us"] == pytest.approx(58.0) and rows["b"]["us"] == pytest.approx(21.0)
    assert rows["a"]["lead_us"] == pytest.approx(1.75) and rows["b"]["lead_us"] == pytest.approx(0.0)
    assert [k["label"] for k in r["kernels"]] == ["c", "a", "b"]  # largest first: 58, 42, 21
    assert [(o["label"], o["us"]) for o in r["order"]] == [("a", 11.0), ("b", 21.0), ("a", 31.0), ("c", 58.0)]
    with pytest.raises(ValueError, match=r"15 launches recorded for a plan of 4 kernels"):
        step_rows(rec[:15], labels)
    with pytest.raises(ValueError, match=r"4 launches recorded .* at least 2 replays"):
        step_rows(rec[:4], labels)
    with pytest.raises(ValueError, match="no kernels"):
        step_rows(rec, [])
    swapped = rec.copy()
    swapped[[5, 6]] = swapped[[6, 5]]
    with pytest.raises(ValueError, match="fall back at launch 6"):
        step_rows(swapped, labels)


def test_timeline_build_is_its_own_cubin_and_repeats_the_header(monkeypatch):
    """XINFER_TIMELINE=1 adds -DXI_TIMELINE to every shader's compile options (part of the cubin cache's
    key: its own cubins; unset: the options of before), and _timeline.SLOTS is shaders/xi_common.cuh's
    XI_TL_SLOTS."""
    import os
    import re

    from xinfer_async.backends.cuda import _kernel, _timeline

    assert _timeline.compile_options({}) == () and _timeline.compile_options({"XINFER_TIMELINE": "0"}) == ()
    assert _timeline.compile_options({"XINFER_TIMELINE": "1"}) == ("-DXI_TIMELINE",)
    monkeypatch.delenv("XINFER_TIMELINE", raising=False)
    plain = _kernel._shader_inputs("rope_kv_store", 102400)[3]
    monkeypatch.setenv("XINFER_TIMELINE", "1")
    timed = _kernel._shader_inputs("rope_kv_store", 102400)[3]
    monkeypatch.delenv("XINFER_TIMELINE")
    assert plain == ("-DXI_MVT_STAGE_MAX=102400",) and timed == plain + ("-DXI_TIMELINE",)
    assert _kernel._shader_inputs("rope_kv_store", 102400)[3] == plain
    text = open(os.path.join(_kernel.shader_dir(), "xi_common.cuh")).read()
    assert int(re.search(r"^#define XI_TL_SLOTS (\d+)", text, re.M).group(1)) == _timeline.SLOTS


_TIMELINE_CHILD = """
import json, sys
import numpy as np
import trio
import xinfer_async

async def main():
    dev = xinfer_async.open_device("cuda")
    tl = dev.backend.timeline
    n = 1 << 20
    x = dev.upload(np.random.default_rng(int(sys.argv[1])).standard_normal(n).astype(np.float32))
    y = dev.alloc((n,), "f32")
    ex = dev.executor()
    ex.dispatch("affine", [x, y], {"n": n, "a": 2.0, "b": 1.0})
    ex.dispatch("add", [y, x, y], {"n": n})
    ex.dispatch("affine", [x, y], {"n": n, "a": 3.0, "b": 0.0})
    graph = ex.capture()
    tl.reset()
    ex2 = dev.executor()
    for _ in range(5):
        ex2.replay(graph)
    await ex2.submit_and_wait()
    print(json.dumps(dict(records=tl.read().tolist(), slots=tl.slots)))
    graph.destroy()
    dev.close()

trio.run(main)
"""


@pytest.mark.cuda
def test_timeline_records_each_launch_once_in_order(rng):
    """Under XINFER_TIMELINE=1 (a child process: the variable is read when the backend opens and when
    each shader compiles) 5 replays of a 3-kernel graph record 15 launches, in launch order (go rising),
    each go after its arrive and after the previous kernel's go."""
    from xinfer_async._open import cuda_status

    ok, reason = cuda_status()
    if not ok:
        pytest.skip(f"cuda backend not usable here: {reason}")
    import json
    import subprocess
    import sys

    from _child_env import child_env

    proc = subprocess.run([sys.executable, "-c", _TIMELINE_CHILD, str(int(rng.integers(1 << 30)))], capture_output=True,
                          text=True, timeout=300, env=child_env(XINFER_TIMELINE="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    rec = np.array(out["records"], dtype=np.int64)
    assert rec.shape == (15, 2), rec.shape
    arrive, go = rec[:, 0], rec[:, 1]
    assert (go >= arrive).all() and (np.diff(go) > 0).all()
    assert (go - arrive < 1_000_000_000).all()  # under a second: readings of one clock
    from xinfer_async.backends.cuda._timeline import step_rows

    r = step_rows(rec, ["affine", "add", "affine"])
    assert r["steps"] == 4 and r["step_us"] > 0


class _HostMemory:
    """A stand-in for the cuda backend's memory calls (alloc, write, read, synchronize) over host bytes."""

    def __init__(self):
        self.mem, self.syncs = {}, 0

    def alloc(self, n):
        base = 4096 * (len(self.mem) + 1) << 20
        self.mem[base] = bytearray(n)
        return base

    def _at(self, address):
        base = max(b for b in self.mem if b <= address)
        return self.mem[base], address - base

    def write(self, address, data):
        buf, off = self._at(address)
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        buf[off:off + raw.size] = raw.tobytes()

    def read(self, address, out):
        buf, off = self._at(address)
        raw = out.view(np.uint8).reshape(-1)
        raw[:] = np.frombuffer(bytes(buf[off:off + raw.size]), np.uint8)

    def synchronize(self):
        self.syncs += 1


def test_timeline_buffer_reset_read_and_overflow():
    """_timeline.Timeline over host bytes: reset zeroes the count (and synchronizes: a pageable copy may
    land late), read returns the recorded (arrive, go) pairs in order, and a count past SLOTS is refused."""
    from xinfer_async.backends.cuda._timeline import SLOTS, Timeline

    mem = _HostMemory()
    tl = Timeline(mem)
    assert tl.read().shape == (0, 2) and mem.syncs == 1
    pairs = np.array([[10, 15], [14, 40], [39, 41]], np.uint64)
    mem.write(tl.address, np.array([3, 0], np.uint64))  # what three kernels' first threads leave
    mem.write(tl.address + 16, pairs)
    got = tl.read()
    assert got.dtype == np.int64 and np.array_equal(got, pairs.astype(np.int64))
    tl.reset()
    assert tl.read().shape == (0, 2) and mem.syncs == 2
    mem.write(tl.address, np.array([SLOTS + 1, 0], np.uint64))
    with pytest.raises(RuntimeError, match=f"counted {SLOTS + 1} launches; its buffer holds {SLOTS}"):
        tl.read()


def test_render_timeline_names_every_kernel_and_the_first_launches():
    from xinfer_async.bench._model import _render_timeline

    t = dict(plan="decode", slots=1, steps=7, step_us=2900.0, resolution_ns=32.0,
             kernels=[dict(label="rmsnorm_matmul_swiglu_q4_1/pq", calls=32, us=900.0, lead_us=0.5),
                      dict(label="attention/d4", calls=32, us=280.0, lead_us=2.25)],
             order=[dict(label="get_rows_q4_1", us=3.0, lead_us=0.0), dict(label="attention/d4", us=8.75, lead_us=2.25)])
    text = _render_timeline(t, dict(kernels=[dict(label="attention/d4", calls=32, us=265.0)]), first=1)
    lines = text.strip().splitlines()
    assert "2.900 ms a step" in lines[0] and "timer steps 32 ns" in lines[0]
    swiglu = next(ln for ln in lines if ln.startswith("rmsnorm_matmul_swiglu_q4_1/pq"))
    assert swiglu.split()[1:5] == ["32", "900.0", "31.0%", "0.50"] and swiglu.split()[5] == "nan"  # not timed alone
    att = next(ln for ln in lines if ln.startswith("attention/d4"))
    assert att.split()[-1] == "265.0"
    assert lines[-2] == "the step's first 1 launches (us in situ, lead us):" and "get_rows_q4_1" in lines[-1]
