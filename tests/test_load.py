"""Tests of xinfer_async/llm/_load.py's "loading model" line (``load(progress=True)``)."""

from __future__ import annotations

import time

from xinfer_async.llm._load import _LoadProgress


def test_fast_load_prints_nothing(capsys):
    p = _LoadProgress("m.gguf")
    p.advance("building the tokenizer")
    p.close()
    time.sleep(_LoadProgress.DELAY_S + 0.3)
    assert capsys.readouterr().err == ""


def test_slow_load_shows_stage_and_elapsed(capsys, monkeypatch):
    monkeypatch.setattr(_LoadProgress, "DELAY_S", 0.0)
    p = _LoadProgress("m.gguf")
    p.advance("building the tokenizer")
    deadline = time.monotonic() + 10
    while "building the tokenizer" not in capsys.readouterr().err:  # the thread draws it
        assert time.monotonic() < deadline, "no progress line within 10 s"
        time.sleep(0.05)
    p.advance("uploading weights, building plans")
    p.close()
    err = capsys.readouterr().err
    assert "loading model m.gguf: uploading weights, building plans (2/3 stages done, 00:0" in err
