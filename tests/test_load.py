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


async def test_chat_template_option():
    """synthetic:tiny has no chat template: chat says so; load(chat_template=) supplies one; an unknown
    name fails before the file is touched."""
    import pytest

    from xinfer_async import llm

    with pytest.raises(ValueError, match=r"^unknown chat template 'chatm1': give a built-in name \(chatml, gemma, "
                                         r"llama3\) or the path of a \.jinja file$"):
        await llm.load("synthetic:does-not-matter", chat_template="chatm1")
    msgs = [{"role": "user", "content": "hi"}]
    async with llm.open_model("synthetic:tiny", device="cpu", slots=1, ctx=64) as model:
        assert model.chat_template is None
        with pytest.raises(ValueError, match=r"^this model file has no chat template \(tokenizer.chat_template\): it "
                                             r"is probably a base \(not instruct\) model; give a template by name "
                                             r"\(chatml, gemma, llama3\) or as the path of a \.jinja file with "
                                             r"load\(\.\.\., chat_template=\.\.\.\) \(the command line's --chat-template\)$"):
            model.render_chat(msgs)
    async with llm.open_model("synthetic:tiny", device="cpu", slots=1, ctx=64, chat_template="chatml") as model:
        ids = model.render_chat(msgs)
        assert model.tokenizer.decode(ids) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        r = await model.chat(msgs, max_tokens=2)
        assert len(r.token_ids) == 2
