"""Tests of xinfer_async/cli.py: ``xinfer_async.cli.main([...])`` in process."""

from __future__ import annotations

import re

import pytest

from _llm_fixtures import require_model
from xinfer_async.cli import main

TEXT = ("The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step. "
        "All that glitters is not gold. Actions speak louder than words. Where there is a will, there is a way. ")


@pytest.mark.model
def test_generate_streams_text(capsys):
    rc = main(["generate", "-m", str(require_model()), "--device", "cpu", "--ctx", "64", "-p", "The sky is", "-n", "8"])
    out, err = capsys.readouterr()
    assert rc == 0
    assert out.strip()
    assert re.search(r"\[8 tokens, finish: length; prompt 3 tokens at [\d.]+ tok/s, decode [\d.]+ tok/s", err)


@pytest.mark.model
def test_generate_sampling_and_stop(capsys):
    args = ["generate", "-m", str(require_model()), "--device", "cpu", "--ctx", "64", "-p", "Once upon a time",
            "-n", "16", "--temperature", "0.8", "--top-p", "0.9", "--top-k", "40", "--seed", "3"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0
    assert capsys.readouterr().out == first and first.strip()


@pytest.mark.model
def test_generate_chunk_option_gives_the_same_text(capsys, monkeypatch):
    """--chunk reaches load: a 5-token prefill chunk (prefill plans of 5 rows) gives the same greedy
    text as the default chunk (rows do not depend on the other rows of their step)."""
    from xinfer_async import llm

    chunks, load = [], llm.load

    async def spy(*args, **kwargs):
        model = await load(*args, **kwargs)
        chunks.append(model.chunk)
        return model

    monkeypatch.setattr(llm, "load", spy)
    prompt = "The quick brown fox jumps over the lazy dog because"
    base = ["generate", "-m", str(require_model()), "--device", "cpu", "--ctx", "64", "-p", prompt, "-n", "6"]
    assert main(base) == 0
    want = capsys.readouterr().out
    assert main(base + ["--chunk", "5"]) == 0
    assert capsys.readouterr().out == want and want.strip()
    assert chunks == [64, 5]


def test_bench_help_lists_the_benchmarks(capsys):
    # `bench -h` reaches the bench runner (argparse's own -h for the subcommand listed nothing)
    assert main(["bench", "-h"]) == 0
    assert "runtime" in capsys.readouterr().out


def test_devices(capsys):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^cpu: available \(\d+ cores", out, re.M)
    assert re.search(r"^cuda: (available|not available)", out, re.M)


def test_unknown_model_lists_the_known_ones(capsys):
    rc = main(["generate", "-m", "no-such-model", "-p", "hello"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("xinfer-async generate: error: -m no-such-model: unknown model 'no-such-model'; "
                          "known models: ")
    assert "smollm2-135m" in err


def test_missing_model_file(capsys, tmp_path):
    rc = main(["generate", "-m", str(tmp_path / "missing.gguf"), "-p", "hello"])
    assert rc == 2
    assert f"-m {tmp_path / 'missing.gguf'}: model file not found" in capsys.readouterr().err


@pytest.mark.model
def test_perplexity_small_file(capsys, tmp_path):
    f = tmp_path / "text.txt"
    f.write_text(TEXT * 2)
    rc = main(["perplexity", "-m", str(require_model()), "--device", "cpu", "-f", str(f), "--ctx", "32", "-q"])
    out = capsys.readouterr().out
    assert rc == 0
    m = re.search(r"^perplexity ([\d.]+) over (\d+) predicted tokens \((\d+) chunks of 32;", out, re.M)
    assert m, out
    ppl, count, chunks = float(m[1]), int(m[2]), int(m[3])
    assert 1.0 < ppl < 1000.0 and chunks >= 2 and count == chunks * 31


@pytest.mark.model
def test_generate_on_an_instruct_model_says_why_it_ended_and_chat_applies_the_template(capsys):
    # issue #20 item 2: the plain prompt ends the instruct model's turn at once; say so, point to
    # `chat` and --chat; with --chat the template is applied and the model answers
    base = ["generate", "-m", str(require_model()), "--device", "cpu", "-p", "What is gravity?", "-n", "12"]
    assert main(base) == 0
    out, err = capsys.readouterr()
    assert re.search(r"\[(0 tokens|1 token), finish: stop;.*(no decode step|decode [\d.]+ tok/s)", err), err
    assert "Add --chat to wrap the prompt in the model's chat template, or talk to it with `xinfer-async chat`" in err
    assert main(base + ["--chat"]) == 0
    out, err = capsys.readouterr()
    assert "[12 tokens, finish: length;" in err and "--chat" not in err
    assert len(out.split()) >= 5, out


@pytest.mark.model
def test_generate_penalty_flags_reach_the_model(capsys):
    import trio

    from xinfer_async import llm

    prompt = "The cat sat on the mat. The cat sat on the mat. The cat"
    args = ["generate", "-m", str(require_model()), "--device", "cpu", "--ctx", "64", "-p", prompt, "-n", "10"]
    assert main(args) == 0
    plain = capsys.readouterr().out
    assert main(args + ["--repeat-penalty", "1.3", "--repeat-last-n", "-1", "--min-p", "0.05"]) == 0
    penalized = capsys.readouterr().out

    async def library():
        async with llm.open_model(require_model(), device="cpu", ctx=64, slots=1) as m:
            return (await m.complete(prompt, max_tokens=10, repeat_penalty=1.3, repeat_last_n=-1, min_p=0.05)).text

    assert penalized == trio.run(library) + "\n" != plain
