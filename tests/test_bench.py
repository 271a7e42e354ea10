"""bench/_load.py, bench/_report.py, bench/_torch_ref.py, and ``bench model``'s --json/--plot/--compare,
at tiny sizes on the cpu with the tiny synthetic model."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from _child_env import child_env
from xinfer_async.bench import __main__ as bench_main
from xinfer_async.bench import _load, _report

HAVE_MPL = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XINFER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def test_arrival_times_are_a_poisson_process_of_the_rate():
    t = _load.arrival_times(4000, 50.0, seed=1)
    gaps = np.diff(t)
    assert t[0] == 0 and (gaps >= 0).all()
    assert abs(gaps.mean() - 1 / 50) < 0.002 and abs(gaps.std() - 1 / 50) < 0.002  # exponential: std == mean
    assert (_load.arrival_times(5, math.inf) == 0).all()
    assert np.array_equal(_load.arrival_times(9, 3.0, seed=4), _load.arrival_times(9, 3.0, seed=4))
    with pytest.raises(ValueError, match=r"^rate must be > 0 requests/s \(or inf\), got 0.0$"):
        _load.arrival_times(3, 0.0)


def test_percentiles_and_table():
    p = _report.percentiles([1.0, 2.0, 3.0, 4.0], (50, 99), scale=1e3, prefix="x_")
    assert p == {"x_p50": 2500.0, "x_p99": pytest.approx(3970.0), "x_mean": 2500.0}
    assert all(math.isnan(v) for v in _report.percentiles([]).values())
    text = _report.render_table([("a", "a", "d"), ("bee", "b", ".2f")], [{"a": 1, "b": 2.0}, {"a": 10, "b": math.nan}])
    assert text.splitlines() == [" a  bee", "-------", " 1 2.00", "10    -"]


def test_write_json_turns_nan_and_dataclasses_into_plain_json(tmp_path):
    from xinfer_async.llm._synthetic import SHAPES

    _report.write_json(str(tmp_path / "r.json"), {"x": math.nan, "c": SHAPES["tiny"], "n": np.int64(3)})
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["x"] is None and d["n"] == 3 and d["c"]["dim"] == 64


LOAD_KEYS = {"slots", "rate", "requests", "req_per_s", "out_tok_per_s", "output_tokens", "duration_s",
             "latency_s_p50", "latency_s_p90", "latency_s_p99", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50",
             "itl_ms_p99", "tpot_ms_p50", "queue_ms_p50", "queue_ms_p99", "busy_mean", "busy_max", "occupancy",
             "scheduler"}


def test_bench_load_runs_and_writes_json(tmp_path, capsys):
    out = tmp_path / "load.json"
    rc = bench_main.main(["load", "--model", "synthetic:tiny", "--device", "cpu", "--rate", "50,inf",
                          "--requests", "6", "--prompt-tokens", "8", "--max-tokens", "5", "--slots", "2",
                          "--sample-ms", "1", "--json", str(out)])
    assert rc == 0
    d = json.loads(out.read_text())
    assert d["benchmark"] == "load" and d["model"] == "synthetic:tiny" and d["device"].startswith("cpu")
    assert [(r["slots"], r["rate"]) for r in d["rows"]] == [(2, 50.0), (2, None)]  # inf is null in JSON
    for r in d["rows"]:
        assert LOAD_KEYS <= r.keys()
        assert r["output_tokens"] == 6 * 5 and r["req_per_s"] > 0 and 1 <= r["busy_max"] <= 2
        assert len(r["occupancy"]["t_s"]) == len(r["occupancy"]["running"]) > 0
        assert r["scheduler"]["completed"] >= 6 + 2  # the timed requests and the warm-up
        assert r["ttft_ms_p50"] <= 1e3 * r["latency_s_p50"]
    printed = capsys.readouterr().out
    assert "out tok/s" in printed and "itl p50 ms" in printed


def test_bench_load_rejects_a_bad_rate(capsys):
    with pytest.raises(SystemExit) as exc:
        _load.main(["--rate", "-1", "--model", "synthetic:tiny"])
    assert exc.value.code == 2
    assert "rate must be > 0 requests/s (or inf), got -1.0" in capsys.readouterr().err


def test_bench_model_runs_and_writes_json_with_the_comparison(tmp_path):
    out = tmp_path / "model.json"
    rc = bench_main.main(["model", "--model", "synthetic:tiny", "--device", "cpu", "--slots", "1,2",
                          "--max-tokens", "4", "--warmup-tokens", "2", "--prompt-tokens", "16", "--repeats", "1",
                          "--compare", "torch", "--compare-batches", "1", "--json", str(out)])
    assert rc == 0
    d = json.loads(out.read_text())
    assert d["ctx"] == 16 + 4 + 64  # the default: what the rows need, 64 to spare
    assert [r["slots"] for r in d["decode"]] == [1, 2]
    for r in d["decode"]:
        assert {"agg_tok_per_s", "step_ms_p50", "step_ms_p10", "step_ms_p90", "ttft_ms_p50"} <= r.keys()
        assert r["gpu_plan"] == "decode" and 0 < r["gpu_ms_per_step"] < r["step_ms_p50"] * 10
        assert r["f16_weight_bytes"] == 0 and r["gemm_min_t"] is None  # cpu: its kernels at every T
    one, two = d["decode"]
    assert 0.0 <= one["host_fraction"] < 1.0 and two["host_fraction"] is None  # unbatched N > 1: no share
    assert d["prefill"]["prefill_tok_per_s"] > 0 and d["config"]["n_layer"] == 2
    cmp = d["compare"]
    if cmp["available"]:  # PyTorch with CUDA
        assert cmp["rows"][0]["batch"] == 1 and cmp["rows"][0]["speedup"] > 0
    else:
        assert cmp["reason"] in ("PyTorch is not installed",) or cmp["reason"].endswith("sees no CUDA device")


def test_bench_model_ctx_sizes_the_cache_and_rejects_too_few_tokens(tmp_path, capsys):
    out = tmp_path / "model.json"
    rc = bench_main.main(["model", "--model", "synthetic:tiny", "--device", "cpu", "--slots", "1", "--ctx", "200",
                          "--max-tokens", "3", "--warmup-tokens", "2", "--prompt-tokens", "8", "--repeats", "1",
                          "--json", str(out)])
    assert rc == 0 and json.loads(out.read_text())["ctx"] == 200
    assert "KV cache 200 tokens a slot" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        bench_main.main(["model", "--model", "synthetic:tiny", "--device", "cpu", "--ctx", "100",
                         "--max-tokens", "3", "--prompt-tokens", "40"])
    assert exc.value.code == 2
    assert "--ctx must be >= 107 (the 40-token prompt + 3 tokens + 64), got 100" in capsys.readouterr().err


@pytest.mark.skipif(not HAVE_MPL, reason="matplotlib is not installed (the [plot] extra)")
def test_bench_load_plot(tmp_path):
    png = tmp_path / "load.png"
    assert bench_main.main(["load", "--model", "synthetic:tiny", "--device", "cpu", "--rate", "inf",
                            "--requests", "4", "--prompt-tokens", "4", "--max-tokens", "3", "--slots", "1,2",
                            "--no-progress", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(HAVE_MPL, reason="matplotlib is installed")
def test_plot_without_matplotlib_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        _load.main(["--model", "synthetic:tiny", "--plot", str(tmp_path / "x.png")])
    assert exc.value.code == 2
    assert "needs matplotlib, which is not installed: pip install 'xinfer_async[plot]'" in capsys.readouterr().err
    with pytest.raises(_report.PlotUnavailableError):
        _report.plot_concurrency(str(tmp_path / "x.png"), [], x="a", x_label="a", tok_per_s="b", latencies={}, title="")


def test_torch_step_runs_eager_on_cpu_at_a_tiny_shape():
    torch = pytest.importorskip("torch")
    from xinfer_async.bench import _torch_ref
    from xinfer_async.llm._synthetic import SHAPES

    c = SHAPES["tiny"]
    with torch.inference_mode():
        dec = _torch_ref.TorchDecoder(c, batch=3, device="cpu", dtype=torch.float32, max_seq=32)
        dec.tokens.copy_(torch.tensor([1, 2, 3]))
        first = dec.step()
        assert first.shape == (3,) and int(dec.pos) == 1 and ((0 <= first) & (first < c.vocab_size)).all()
        assert torch.equal(dec.tokens, first)  # fed back for the next step
        assert dec.k_cache[:, :, :, 0].abs().sum() > 0 and dec.k_cache[:, :, :, 1:].abs().sum() == 0
        dec.step()
        assert int(dec.pos) == 2 and dec.k_cache[:, :, :, 1].abs().sum() > 0
    r = _torch_ref.measure(c, 2, "cpu", steps=3, repeats=2, dtype=torch.float32)
    assert r["batch"] == 2 and r["torch_ms"] > 0 and r["torch_tok_per_s"] == pytest.approx(2e3 / r["torch_ms"])
    text = _torch_ref.render(_torch_ref.compare(c, [{"slots": 1, "step_ms_p50": 1.0}], batches=(1,), device="cpu",
                                                steps=2, repeats=1))
    assert "eager" in text and "torch/ours" in text


def test_torch_step_matches_a_float64_reference_of_one_layer():
    """The PyTorch step's math (rms_norm, adjacent-pair rope, GQA attention over the cache, swiglu,
    tied output) against numpy float64, two steps from position 0."""
    torch = pytest.importorskip("torch")
    from xinfer_async.bench import _torch_ref
    from xinfer_async.llm._gguf import LlamaConfig

    c = LlamaConfig(n_layer=1, dim=32, n_head=4, n_kv_head=2, head_dim=8, ffn_dim=48, vocab_size=50,
                    rope_theta=10000.0)
    dec = _torch_ref.TorchDecoder(c, batch=1, device="cpu", dtype=torch.float64, max_seq=8)
    L = {k: v.numpy() for k, v in dec.layers[0].items()}
    E = dec.embd.numpy()

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + c.rms_eps) * w

    def rope(x, pos):  # (h, hd), adjacent pairs
        inv = 1.0 / c.rope_theta ** (np.arange(0, 8, 2) / 8)
        cs, sn = np.cos(pos * inv), np.sin(pos * inv)
        x0, x1 = x[:, 0::2], x[:, 1::2]
        out = np.empty_like(x)
        out[:, 0::2], out[:, 1::2] = x0 * cs - x1 * sn, x0 * sn + x1 * cs
        return out

    ks, vs, tok = [], [], 7
    dec.tokens.fill_(tok)
    for pos in range(2):
        x = E[tok]
        qkv = L["wqkv"] @ rms(x, L["attn_norm"])
        q, k, v = rope(qkv[:32].reshape(4, 8), pos), rope(qkv[32:48].reshape(2, 8), pos), qkv[48:].reshape(2, 8)
        ks.append(k)
        vs.append(v)
        K, V = np.stack(ks, 1), np.stack(vs, 1)  # (2, t, 8)
        att = np.empty((4, 8))
        for h in range(4):
            s = K[h // 2] @ q[h] / np.sqrt(8)
            p = np.exp(s - s.max())
            att[h] = (p / p.sum()) @ V[h // 2]
        x = x + L["wo"] @ att.reshape(-1)
        gu = L["w13"] @ rms(x, L["ffn_norm"])
        g, u = gu[:48], gu[48:]
        x = x + L["w2"] @ (g / (1 + np.exp(-g)) * u)
        want = int(np.argmax(E @ rms(x, dec.out_norm.numpy())))
        with torch.inference_mode():
            got = int(dec.step()[0])
        assert got == want
        np.testing.assert_allclose(dec.k_cache[0, 0, :, pos].numpy(), k, rtol=1e-6, atol=1e-9)  # rope runs in float32
        tok = want


def test_bench_runtime_quick_on_cpu(tmp_path):
    """``bench runtime --quick`` runs end to end on the cpu backend: every row measured (finite,
    positive medians, p10 <= median <= p90), the matrix row over its weight copies, and --json."""
    out = tmp_path / "runtime.json"
    assert bench_main.main(["runtime", "--device", "cpu", "--quick", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    names = [r["name"] for r in data["rows"]]
    assert any(n.startswith("matmul_q4_1 4096x4096, 1 token, back to back") for n in names), names
    assert any(n.startswith("fence round-trip, trivial kernel: await") for n in names), names
    for r in data["rows"]:
        assert math.isfinite(r["median"]) and r["median"] > 0, r
        assert r["p10"] <= r["median"] <= r["p90"], r
    assert set(data["ratios"]) == {"await_over_blocking", "await_over_to_thread", "await_over_synchronize",
                                   "kernel_await_over_synchronize"}


def test_every_subcommand_names_a_module_function_of_the_package():
    """``SUBCOMMANDS`` points only into ``xinfer_async.bench`` (the gemv research tools that drive
    the cuda backend's private modules live in ``tools/``, outside the shipped package)."""
    import xinfer_async.bench as bench

    for name, target in bench.SUBCOMMANDS.items():
        module, _, fn = target.partition(":")
        assert module.startswith("xinfer_async.bench.") and fn, (name, target)
        assert importlib.util.find_spec(module) is not None, (name, target)
    assert not {"gemv-variants", "gemv-probes"} & set(bench.SUBCOMMANDS)
    with pytest.raises(ValueError, match=r"^unknown benchmark 'gemv-probes'; choose one of "):
        bench.resolve("gemv-probes")


def test_gemv_tools_outside_the_package_import_without_a_gpu(monkeypatch):
    """tools/gemv_variants.py and tools/gemv_probes.py import (cuda is touched only in ``main``), and
    the variants' q8_0 weights dequantize to d * q (the reference every variant is checked against);
    ``write_weight`` writes a type in the backend's device layout only where the backend keeps one."""
    tools = Path(__file__).resolve().parent.parent / "tools"
    monkeypatch.syspath_prepend(str(tools))
    import gemv_probes
    import gemv_variants

    assert gemv_probes.read_source is gemv_variants.read_source
    raw, vals = gemv_variants.make_weights(np.random.default_rng(3), "q8_0", 3, 64)
    blocks = raw.reshape(6, 34)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float64)
    q = blocks[:, 2:].view(np.int8).astype(np.float64)
    np.testing.assert_array_equal(vals.reshape(6, 32), d * q)
    assert vals.std() > 0
    # write_weight: GGUF's bytes in the backend's device layout of the type, where it keeps one
    from xinfer_async.hal._layout import to_device_layout

    class Recorder:
        def __init__(self, layouts):
            self.device_layouts, self.writes = frozenset(layouts), []

        def write(self, address, data):
            self.writes.append((address, np.array(data, np.uint8)))

    q6 = np.random.default_rng(4).integers(0, 256, 8 * 210, dtype=np.uint8)
    for layouts, want in (({"q6_k"}, to_device_layout("q6_k", q6, 0x1006)), ((), q6)):
        be = Recorder(layouts)
        gemv_variants.write_weight(be, 0x1006, "q6_k", q6)
        gemv_variants.write_weight(be, 0x2000, "q8_0", raw)
        assert [a for a, _ in be.writes] == [0x1006, 0x2000]
        np.testing.assert_array_equal(be.writes[0][1], want)
        np.testing.assert_array_equal(be.writes[1][1], raw)
    assert not np.array_equal(to_device_layout("q6_k", q6, 0x1006), q6)
    for m in ("gemv_probes", "gemv_variants"):
        sys.modules.pop(m, None)


# -- help texts and plots (issue #20, items 7 and 8) -----------------------------------------------

def _run_bench(*argv: str) -> tuple[int, str, str]:
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", "xinfer_async.cli", "bench", *argv], capture_output=True,
                          text=True, timeout=120, cwd=root, env=child_env())
    return proc.returncode, proc.stdout, proc.stderr


def test_bench_help_names_the_command_and_describes_every_subcommand():
    from xinfer_async.bench import SUBCOMMANDS

    rc, out, _ = _run_bench("--help")
    assert rc == 0
    assert out.startswith("usage: xinfer-async bench SUBCOMMAND [options]") and "python -m" not in out
    for name in SUBCOMMANDS:
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(name + " "))
        assert len(line.split(None, 1)[1]) > 20, line  # a description, not just the name


@pytest.mark.parametrize("name", ["runtime", "model-layer", "load", "model", "native", "cuda-raw", "cuda-matrix", "serve"])
def test_every_bench_help_prints_without_running_and_without_a_gpu(name):
    import time

    t = time.perf_counter()
    rc, out, err = _run_bench(name, "--help")
    assert rc == 0, err
    assert out.startswith(f"usage: xinfer-async bench {name}"), out[:200]
    assert time.perf_counter() - t < 30  # nothing was measured (`native` runs ~a minute here)
    assert "median us" not in out.split("\n\n", 1)[0]  # no benchmark row printed before the help
    first = out.split("\n\n")[1]  # the description's first paragraph: whole sentences
    assert first.rstrip().endswith((".", ":", ")")), first


def test_runtime_table_names_the_slow_tail_of_rates_and_explains_the_ratios():
    from xinfer_async.bench import _runtime

    t = _runtime._Table()
    t.add("a time", "us", _runtime._stats([1e-6 * v for v in range(1, 101)], 1e6))
    t.add("a rate", "GB/s", _runtime._inverse(_runtime._stats([1e-3 * v for v in range(1, 101)], 1.0), 1.0))
    text = t.render()
    assert "slow 1%" in text.splitlines()[0] and "p99" not in text.splitlines()[0]
    rate = t.rows[1]
    # the rate's slow tail is below its median and its p10 (a rate's low percentiles are the slow side)
    assert rate["p1"] < rate["p10"] < rate["median"] < rate["p90"]
    assert rate["p1"] == pytest.approx(1.0 / np.percentile(np.arange(1, 101) * 1e-3, 99))
    lines = _runtime.ratio_lines({"await_over_blocking": 0.5, "await_over_to_thread": 2.0,
                                  "await_over_synchronize": 1.0, "kernel_await_over_synchronize": 1.1}, cuda=False)
    assert "Awaiting a fence in trio takes 0.50x the time of blocking the thread on it" in lines
    assert "goal: at most 1.5x, met" in lines and "goal: under 1x, NOT met" in lines and "this is the cpu" in lines


@pytest.mark.skipif(not HAVE_MPL, reason="matplotlib is not installed (the [plot] extra)")
def test_concurrency_plot_starts_at_zero_with_integer_slot_ticks_and_labelled_points():
    import matplotlib.pyplot as plt

    from xinfer_async.bench._model import plot_title

    rows = [{"slots": s, "tok": 100.0 - 1.4 * (s > 1), "lat": 10.0 + s} for s in (1, 2, 3)]
    fig = _report.concurrency_figure(rows, x="slots", x_label="slots", tok_per_s="tok", latencies={"p50": "lat"},
                                     title=plot_title({"model": "m", "device": "cpu", "batching": False,
                                                       "max_tokens": 64}),
                                     integer_x=True, point_label=lambda r: f"{r['slots']} slots")
    try:
        a1, a2 = fig.axes
        assert a1.get_ylim()[0] == 0 and a2.get_ylim()[0] == 0
        for a in (a1, a2):
            ticks = list(a.get_xticks())
            assert ticks == [1, 2, 3], ticks
        assert sorted(t.get_text() for t in a1.texts) == ["1 slots", "2 slots", "3 slots"]
        title = fig._suptitle.get_text()
        assert "batching off" in title and "64 tokens a request" in title
    finally:
        plt.close(fig)


def _streams(rng, rate_tok_s: float, n: int, tokens: int, interval_s: float, ttft_spread_s: float) -> list[dict]:
    """``n`` simulated streams, each generating ``tokens`` tokens at ``rate_tok_s`` after a first
    token at a random time in ``[0, ttft_spread_s)``, delivered as a server with a stream interval
    sends them: the first token at once, then the tokens so far every ``interval_s`` (random phase),
    the rest with the last token (``interval_s`` below one token's time: one arrival a token)."""
    out = []
    for _ in range(n):
        t0 = rng.uniform(0, ttft_spread_s)
        made = t0 + np.arange(tokens) / rate_tok_s  # token k is generated at made[k]
        if interval_s * rate_tok_s < 1:
            arrivals = list(made)
        else:
            arrivals = [t0, *np.arange(t0 + rng.uniform(0, interval_s), made[-1], interval_s), made[-1]]
        out.append(dict(times=[(float(t), int(np.searchsorted(made, t, side="right"))) for t in arrivals]))
    return out


@pytest.mark.parametrize("rate_tok_s", [470.0, 262.0])  # a stream's rate at 64 streams: SmolLM2, the 1B shape
def test_steady_rate_is_unbiased_when_tokens_arrive_grouped_in_events(rate_tok_s):
    """64 streams of 128 tokens, events 63 ms apart (the server's default interval at 64 streams):
    the estimate holds the true aggregate rate (a count between each request's first and last
    arrival inside the window read 0.76 / 0.86 of it here, as bench serve did on the H200; a count
    of the arrivals in the window 0.90 / 0.95)."""
    from xinfer_async.bench._model import steady_rate

    rng = np.random.default_rng(7)
    true = 64 * rate_tok_s
    grouped = [steady_rate(_streams(rng, rate_tok_s, 64, 128, 0.063, 0.02))[0] / true for _ in range(20)]
    per_token = [steady_rate(_streams(rng, rate_tok_s, 64, 128, 0.0, 0.02))[0] / true for _ in range(5)]
    assert abs(np.mean(grouped) - 1) < 0.03 and min(grouped) > 0.9, grouped
    assert all(abs(r - 1) < 0.03 for r in per_token), per_token


def test_steady_rate_counts_arrivals_in_the_window_exactly():
    """Hand-made: two requests; the window is [1.0, 3.0]. Request A's count interpolated: at 1.0,
    between (0.5, 2) and (1.5, 6): 4; at 3.0, between (2.5, 10) and (3.5, 12): 11; so 7 tokens. B's:
    9 - 1 = 8 (its arrivals open and close the window). 15 tokens / 2 s. Every gap inside is 1 s
    for 4 tokens: 250 ms a token."""
    from xinfer_async.bench._model import steady_rate

    a = dict(times=[(0.0, 1), (0.5, 2), (1.5, 6), (2.5, 10), (3.5, 12)])
    b = dict(times=[(1.0, 1), (2.0, 5), (3.0, 9)])
    rate, step_ms = steady_rate([a, b])
    assert rate == pytest.approx(7.5) and step_ms == pytest.approx(250.0)
    assert steady_rate([a, dict(times=[(1.0, 1), (3.0, 2)])]) == (None, None)  # under 4 steps a request


def test_native_isa_table_times_every_path_this_cpu_runs(capsys):
    """`bench native --isa`: one row per ISA_ROWS entry and T (1, 64), a time in the column of each
    path this cpu runs and "-" in the others; the selected path is the same after."""
    from xinfer_async.backends.cpu import _isa
    from xinfer_async.bench import _native_bench as nb

    before = _isa.selected()
    assert nb.main(["--isa"]) == 0
    out = capsys.readouterr().out
    assert f"int8 dot products: {before} " in out
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("matmul_")]
    assert [(r[0], int(r[1])) for r in rows] == [("matmul_" + lay, T) for T in (1, 64) for _, lay, _, _ in nb.ISA_ROWS]
    for r in rows:
        cells = r[4:4 + len(_isa.PATHS)]
        for p, cell in zip(_isa.PATHS, cells):
            assert (cell != "-") == _isa.supported(p), (r, p)
            assert cell == "-" or float(cell) > 0
    assert _isa.selected() == before


@pytest.mark.parametrize("tool", sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "tools").glob("*.py")))
def test_every_research_tool_prints_its_help_without_a_gpu(tool):
    """``python tools/NAME.py --help`` exits 0 with text and touches no driver: a newcomer without a
    GPU can read what each tool does (gemv_variants, gemv_mvq and gemv_probes loaded libcuda first)."""
    root = Path(__file__).resolve().parents[1]
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "tools"), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, str(root / "tools" / f"{tool}.py"), "--help"], capture_output=True,
                          text=True, timeout=60, cwd=root, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(proc.stdout.split()) > 10 and "Traceback" not in proc.stderr, proc.stdout[:300]


def test_mvq_ablations_still_apply_to_the_kernel(tmp_path):
    """tools/mvq_ablate.py patches shaders/xi_mvq.cuh by text: every ablation finds its text in
    today's header (a kernel change that breaks one fails here, not on the GPU machine), changes it,
    and an unknown name or a changed header is refused."""
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("mvq_ablate", root / "tools" / "mvq_ablate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = (root / "shaders" / "xi_mvq.cuh").read_text()
    mmq = (root / "shaders" / "xi_mmq.cuh").read_text()
    for name in mod.NAMES:
        out, out_mmq = mod.ablate(text, [name], mmq)
        assert (out, out_mmq) != (text, mmq) and len(out.splitlines()) > 300, name
    assert "xi_mmq_quant<NORM, 16, true>" in mod.ablate(text, ["uq16"])
    assert "#pragma unroll 4" in mod.ablate(text, ["qunroll"], mmq)[1]
    with pytest.raises(ValueError, match="qunroll: xi_mmq.cuh no longer has"):
        mod.ablate(text, ["qunroll"])
    assert "xi_mmq_quant<NORM" not in mod.ablate(text, ["noquant"])
    q1, q1r = mod.ablate(text, ["quant1"]), mod.ablate(text, ["quant1roll"])
    for q in (q1, q1r):  # the one-pass function, declared before the body that calls it for one token
        assert q.index("void xi_mvq_quant1(") < q.index("xi_mvq_quant1<NORM, XI_MVQ_Q1(NORM)>(a, tg0, xq, ds);")
        assert "QUANT_LOOP" not in q and q.count("xi_mmq_quant<NORM, 4, true>") == 1
    assert "const float4 w = v[u];" in q1 and "for (int j = 0; j + 1 < U; j++) v[j] = v[j + 1];" in q1r
    assert "xi_mmq_quant<NORM, 16, true>" in mod.ablate(text, ["quant1", "uq16"])  # uq16: the T > 1 path
    assert mod.ablate(text, ["qouter", "unroll2"]).count("#pragma unroll 2\n") == 1
    with pytest.raises(ValueError, match="unknown ablation 'fast'"):
        mod.ablate(text, ["fast"])
    with pytest.raises(ValueError, match=r"noquant: xi_mvq.cuh no longer has"):
        mod.ablate(text.replace("xi_mvq_inv<TT>(a, tg0, tn, inv);", "xi_mvq_inv<TT>(a, tg0, tn, inv); "), ["noquant"])
    assert mod.main([str(tmp_path / "sh"), "noquant+unroll2"]) == 0
    assert (tmp_path / "sh" / "matmul_q4_1.cu").exists()
    assert "#pragma unroll 2" in (tmp_path / "sh" / "xi_mvq.cuh").read_text()
