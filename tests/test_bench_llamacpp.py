"""bench/_llamacpp.py and ``bench model --compare llama.cpp``: with fake ``llama-bench`` /
``llama-batched-bench`` programs that print the real ones' output formats (field names taken from
llama.cpp 0c1e570's output), and once with the real build when ``$XINFER_LLAMA_BENCH`` names it."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap

import pytest

from xinfer_async import _omp
from xinfer_async.bench import __main__ as bench_main
from xinfer_async.bench import _llamacpp

# one test of ``llama-bench -o json`` as llama.cpp 0c1e570 prints it (cpu build, SmolLM2-135M Q4_1)
REAL_TEST = {
    "build_commit": "0c1e570", "build_number": 1, "cpu_info": "AMD EPYC", "gpu_info": "", "backends": "CPU",
    "model_filename": "/x/smollm2.gguf", "model_type": "llama ?B Q4_1", "model_size": 94003200,
    "model_n_params": 134515008, "n_batch": 2048, "n_ubatch": 512, "n_threads": 2, "cpu_mask": "0x0",
    "cpu_strict": False, "poll": 50, "type_k": "f16", "type_v": "f16", "n_gpu_layers": 0, "n_cpu_moe": 0,
    "split_mode": "layer", "main_gpu": 0, "no_kv_offload": False, "flash_attn": -1, "devices": "auto",
    "tensor_split": "0.00", "tensor_buft_overrides": "none", "load_mode": "mmap", "lazy_mode": "none",
    "embeddings": False, "no_op_offload": 0, "no_host": False, "repack": True, "fit_target": 1024,
    "fit_min_ctx": 4096, "n_prompt": 0, "n_gen": 128, "n_depth": 0, "test_time": "2026-12-01T18:00:00Z",
    "avg_ns": 2000000000, "stddev_ns": 0, "avg_ts": 64.0, "stddev_ts": 0.0, "samples_ns": [2000000000],
    "samples_ts": [64.0],
}

FAKE_BENCH = textwrap.dedent('''\
    #!{python}
    # a fake llama-bench: parses -p -n -t -o, prints one test in llama-bench's JSON format, logs its call
    import json, os, sys
    a = sys.argv[1:]
    opt = dict(zip(a[::2], a[1::2]))
    with open({log!r}, "a") as f:
        f.write(json.dumps(dict(argv=sys.argv, omp=os.environ.get("OMP_WAIT_POLICY"))) + "\\n")
    t = dict({test!r})
    t.update(n_prompt=int(opt["-p"]), n_gen=int(opt["-n"]), n_threads=int(opt["-t"]), model_filename=opt["-m"])
    t["avg_ts"] = t["samples_ts"][0] = 200.0 if t["n_prompt"] else 100.0
    print("[", json.dumps(t, indent=4), "]", sep="\\n")
    print("llama_perf stuff on stderr", file=sys.stderr)
''')

FAKE_BATCHED = textwrap.dedent('''\
    #!{python}
    # a fake llama-batched-bench: log lines, then one JSON line a -npl value, as --output-format jsonl prints
    import json, sys
    a = sys.argv[1:]
    opt = dict(zip(a[::2], a[1::2]))
    with open({log!r}, "a") as f:
        f.write(json.dumps(dict(argv=sys.argv)) + "\\n")
    print("main: n_kv_max = 1000, n_batch = 2048")
    for pl in opt["-npl"].split(","):
        print(json.dumps(dict(n_kv_max=int(opt["-c"]), n_batch=2048, n_ubatch=512, flash_attn=-1, is_pp_shared=0,
                              n_gpu_layers=0, n_threads=int(opt["-t"]), n_threads_batch=int(opt["-tb"]),
                              pp=int(opt["-npp"]), tg=int(opt["-ntg"]), pl=int(pl), n_kv=100, t_pp=0.1,
                              speed_pp=320.0, t_tg=1.0, speed_tg=50.0 * int(pl), t=1.1, speed=400.0)))
''')


def _write(path, text, mode=0o755):
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.fixture
def fakes(tmp_path):
    log = tmp_path / "calls.jsonl"
    bench = _write(tmp_path / "llama-bench", FAKE_BENCH.format(python=sys.executable, log=str(log), test=REAL_TEST))
    _write(tmp_path / "llama-batched-bench", FAKE_BATCHED.format(python=sys.executable, log=str(log)))
    return bench, log


def test_parse_llama_bench_reads_the_real_format():
    text = json.dumps([REAL_TEST, dict(REAL_TEST, n_prompt=512, n_gen=0, avg_ts=150.5)], indent=4)
    tg, pp = _llamacpp.parse_llama_bench(text)
    assert (tg["test"], tg["avg_ts"], tg["n_threads"]) == ("tg128", 64.0, 2)
    assert (pp["test"], pp["avg_ts"]) == ("pp512", 150.5)


@pytest.mark.parametrize("text, message", [
    ("error: failed to load model", "llama-bench printed no JSON"),
    ('{"a": 1}', "llama-bench JSON is not a list of tests"),
    ('[{"n_prompt": 512, "n_gen": 0}]', "llama-bench test lacks avg_ts"),
])
def test_parse_llama_bench_refuses_other_output(text, message):
    with pytest.raises(_llamacpp.LlamaCppError, match=message):
        _llamacpp.parse_llama_bench(text)


def test_parse_batched_bench_skips_log_lines():
    text = ('main: n_kv_max = 2048\n{"not": "a row"}\n{"pl": 4, "pp": 32, "tg": 128, "speed_tg": 123.5, "speed_pp": 9.0}\n'
            "llama_perf_context_print: total time\n")
    (row,) = _llamacpp.parse_batched_bench(text)
    assert (row["pl"], row["speed_tg"]) == (4, 123.5)
    with pytest.raises(_llamacpp.LlamaCppError, match="llama-batched-bench printed no result line"):
        _llamacpp.parse_batched_bench("main: error\n")


def test_check_binary_errors_name_the_option_and_path(tmp_path):
    with pytest.raises(ValueError, match=r"--compare llama.cpp needs --llama-bench PATH \(or \$XINFER_LLAMA_BENCH\)"):
        _llamacpp.check_binary(None)
    missing = tmp_path / "nope"
    with pytest.raises(ValueError, match=f"--llama-bench: no such file: '{missing}'"):
        _llamacpp.check_binary(missing)
    with pytest.raises(ValueError, match=f"--llama-bench: not a file: '{tmp_path}'"):
        _llamacpp.check_binary(tmp_path)
    plain = _write(tmp_path / "llama-bench", "#!/bin/sh\n", mode=0o644)
    with pytest.raises(ValueError, match=f"--llama-batched-bench: not executable: '{plain}'"):
        _llamacpp.check_binary(plain, "--llama-batched-bench")
    plain.chmod(plain.stat().st_mode | stat.S_IXUSR)
    assert _llamacpp.check_binary(str(plain)) == plain


def test_argv_cpu_and_cuda():
    cpu = _llamacpp.llama_bench_argv("/b/llama-bench", "/m.gguf", n_prompt=512, n_gen=0, threads=2, cuda=False)
    assert cpu == ["/b/llama-bench", "-m", "/m.gguf", "-p", "512", "-n", "0", "-r", "1", "-t", "2", "-o", "json",
                   "-ngl", "0"]
    cuda = _llamacpp.llama_bench_argv("lb", "m", n_prompt=0, n_gen=128, threads=16, cuda=True)
    assert cuda[-4:] == ["-ngl", "99", "-fa", "1"]
    b = _llamacpp.batched_bench_argv("bb", "m", streams=[8, 64], n_gen=128, threads=2, cuda=True)
    assert b[b.index("-npl") + 1] == "8,64" and b[b.index("-c") + 1] == str(64 * (32 + 128) + 64)
    assert b[-4:] == ["-ngl", "99", "-fa", "on"] and b[b.index("--output-format") + 1] == "jsonl"


def test_run_reports_a_failing_program(tmp_path):
    bad = _write(tmp_path / "llama-bench", "#!/bin/sh\necho 'error: unknown argument: -x' >&2\nexit 1\n")
    with pytest.raises(_llamacpp.LlamaCppError, match="exited with status 1:\nerror: unknown argument: -x"):
        _llamacpp.run([str(bad), "-x"])


def test_peer_env_drops_only_the_packages_own_omp_defaults(monkeypatch):
    monkeypatch.setattr(_omp, "_DEFAULTED", {"OMP_WAIT_POLICY"})
    env = _llamacpp.peer_env({"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "2", "PATH": "/bin"})
    assert env == {"OMP_NUM_THREADS": "2", "PATH": "/bin"}


def test_comparison_row_and_render():
    row = _llamacpp.comparison_row("decode 1 stream (tg128)", 1, [40.0, 44.0, 50.0], [60.0, 55.0, 62.0], 1000.0)
    assert (row["ours_tok_per_s"], row["ours_min"], row["ours_max"]) == (44.0, 40.0, 50.0)
    assert row["llamacpp_tok_per_s"] == 60.0 and row["ratio"] == pytest.approx(44.0 / 60.0)
    assert row["torch_ratio"] == pytest.approx(0.044)
    text = _llamacpp.render(dict(rows=[row], cuda=False, threads=2, repetitions=3, build_commit="0c1e570",
                                 loadavg=(0.5, 1.0, 1.5)))
    head, cols, _, line = text.splitlines()
    assert "llama.cpp (build 0c1e570)" in head and "2 threads each" in head and "load average 0.50 1.00 1.50" in head
    assert "ours/llama.cpp" in cols and "torch tok/s" in cols
    assert line.split()[-4:] == ["62.0", "0.73", "1000", "0.04"]


def test_bench_model_compare_llamacpp_interleaves_with_fake_binaries(fakes, tmp_path, capsys):
    bench, log = fakes
    out = tmp_path / "model.json"
    rc = bench_main.main(["model", "--model", "synthetic:tiny", "--device", "cpu", "--slots", "1,2",
                          "--max-tokens", "6", "--warmup-tokens", "2", "--prompt-tokens", "16", "--repeats", "2",
                          "--compare", "llama.cpp", "--llama-bench", str(bench), "--json", str(out)])
    assert rc == 0
    d = json.loads(out.read_text())
    lc = d["llamacpp"]
    assert lc["threads"] == int(os.environ["OMP_NUM_THREADS"]) and lc["repetitions"] == 2 and not lc["cuda"]
    assert lc["build_commit"] == "0c1e570" and lc["model_path"].endswith(".gguf") and d["model"] == lc["model_path"]
    one, two, pre = lc["rows"]
    assert (one["batch"], two["batch"], pre["batch"]) == (1, 2, None)
    assert one["llamacpp"] == [100.0, 100.0] and two["llamacpp"] == [100.0, 100.0] and pre["llamacpp"] == [200.0] * 2
    for r, theirs in ((one, 100.0), (two, 100.0), (pre, 200.0)):
        assert len(r["ours"]) == 2 and all(x > 0 for x in r["ours"])
        assert r["ratio"] == pytest.approx(sum(r["ours"]) / 2 / theirs)  # the median of two: their mean
    assert d["prefill"]["prefill_tok_per_s"] == pytest.approx(pre["ours_tok_per_s"])
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    names = [os.path.basename(c["argv"][0]) for c in calls]
    # two tg runs (slot row 1), two batched runs (slot row 2), two pp runs, in that order
    assert names == ["llama-bench"] * 2 + ["llama-batched-bench"] * 2 + ["llama-bench"] * 2
    a = calls[0]["argv"]
    assert a[a.index("-m") + 1] == lc["model_path"] and a[a.index("-t") + 1] == str(lc["threads"])
    assert (a[a.index("-p") + 1], a[a.index("-n") + 1]) == ("0", "6")
    assert (calls[4]["argv"][calls[4]["argv"].index("-p") + 1]) == "16"
    assert calls[2]["argv"][calls[2]["argv"].index("-npl") + 1] == "2"
    if "OMP_WAIT_POLICY" in _omp.defaulted():
        assert calls[0]["omp"] is None  # llama.cpp keeps its own OpenMP defaults
    printed = capsys.readouterr().out
    assert "ours/llama.cpp" in printed and "decode 1 stream (tg6)" in printed and "prefill 16 tokens (pp16)" in printed


@pytest.mark.parametrize("extra, message", [
    ([], "--compare llama.cpp needs --llama-bench PATH"),
    (["--llama-bench", "/no/such/llama-bench"], "--llama-bench: no such file: '/no/such/llama-bench'"),
])
def test_bench_model_compare_llamacpp_refuses_a_missing_binary_before_loading(extra, message, monkeypatch, capsys):
    monkeypatch.delenv(_llamacpp.ENV_LLAMA_BENCH, raising=False)
    import xinfer_async.llm as llm

    monkeypatch.setattr(llm, "resolve_model", lambda *a, **k: pytest.fail("resolved the model"))
    monkeypatch.setattr(llm, "load", lambda *a, **k: pytest.fail("loaded the model"))
    with pytest.raises(SystemExit) as exc:
        bench_main.main(["model", "--model", "synthetic:tiny", "--device", "cpu", "--compare", "llama.cpp"] + extra)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_bench_model_compare_llamacpp_needs_batched_bench_for_several_slots(tmp_path, capsys):
    bench = _write(tmp_path / "llama-bench", "#!/bin/sh\n")
    with pytest.raises(SystemExit) as exc:
        bench_main.main(["model", "--model", "synthetic:tiny", "--device", "cpu", "--slots", "1,4",
                         "--compare", "llama.cpp", "--llama-bench", str(bench)])
    assert exc.value.code == 2
    assert f"--slots 1,4 needs llama-batched-bench for the rows of more than one slot: none beside '{bench}'" in \
        capsys.readouterr().err


@pytest.mark.skipif(not os.environ.get(_llamacpp.ENV_LLAMA_BENCH),
                    reason="$XINFER_LLAMA_BENCH is not set (a llama.cpp build's llama-bench: ../shared/vendor/README.md)")
def test_bench_model_compare_llamacpp_with_the_real_build(tmp_path):
    out = tmp_path / "model.json"
    rc = bench_main.main(["model", "--model", "synthetic:tiny", "--device", "cpu", "--slots", "1,2",
                          "--max-tokens", "8", "--warmup-tokens", "2", "--prompt-tokens", "32", "--repeats", "1",
                          "--compare", "llama.cpp", "--json", str(out)])
    assert rc == 0
    rows = json.loads(out.read_text())["llamacpp"]["rows"]
    assert [r["batch"] for r in rows] == [1, 2, None]
    assert all(r["llamacpp_tok_per_s"] > 0 and r["ratio"] > 0 for r in rows)
