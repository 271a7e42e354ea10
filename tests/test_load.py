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


# -- prefill chunk, batched prompt rows, resident f16 weights (issue #15) ---------------------------
def test_prefill_chunk_policy():
    from xinfer_async.llm._llama import prefill_chunk

    assert prefill_chunk("cuda", 2048) == 512 and prefill_chunk("cuda", 300) == 300  # bounded by ctx
    assert prefill_chunk("cpu", 2048) == 64 and prefill_chunk("cpu", 40) == 40


async def test_bad_load_options_fail_before_the_file_is_read(monkeypatch):
    """Each bad value names its argument (or variable) and value; "synthetic:does-not-matter" would
    fail if it were read."""
    import pytest

    from xinfer_async import llm

    for kwargs, msg in ((dict(chunk=0), "chunk must be an int >= 1, got 0"),
                        (dict(chunk=True), "chunk must be an int >= 1, got True"),
                        (dict(chunk="512"), "chunk must be an int >= 1, got '512'"),
                        (dict(step_prompt_rows=-1), "step_prompt_rows must be an int >= 1, got -1"),
                        (dict(f16_weights="on"), "f16_weights='on' must be 'auto', '1', '0', True or False")):
        with pytest.raises(ValueError, match="^" + msg.replace("(", r"\(").replace(")", r"\)") + "$"):
            await llm.load("synthetic:does-not-matter", **kwargs)
    monkeypatch.setenv("XINFER_F16_WEIGHTS", "2")
    with pytest.raises(ValueError, match=r"^XINFER_F16_WEIGHTS='2' must be auto \(the default\), 1 "):
        await llm.load("synthetic:does-not-matter")


async def test_chunk_and_step_rows_reach_the_plans():
    """cpu: chunk 64 by default, the batched buckets reach slots + 64; a chunk of 256 gives prefill
    plans 16, 64, 256 and a 256-row score plan while the batched buckets stay at slots + 64
    (step_prompt_rows); f16 weights are not resident on cpu (auto). (synthetic:tiny: 256 tokens of
    context.)"""
    from xinfer_async import llm

    async with llm.open_model("synthetic:tiny", device="cpu", slots=4, ctx=256) as model:
        b = model.builder
        assert model.chunk == b.chunk == 64 and b.step_prompt_rows == 64 and b.prefill_sizes == [16, 64]
        assert b.batch_sizes == [1, 2, 4, 8, 16, 32, 64, 128]  # 4 + 64 rows
        assert b.f16_weight_bytes == 0 and b._resident is None
        assert "prefill chunk 64, f16 weights not resident>" in repr(model)
    async with llm.open_model("synthetic:tiny", device="cpu", slots=4, ctx=256, chunk=256) as model:
        b = model.builder
        assert b.chunk == 256 and b.prefill_sizes == [16, 64, 256] and b.plan_specs()["score"].tokens == 256
        assert b.step_prompt_rows == 64 and b.batch_sizes[-1] == 128
        assert model.batched_runner.step_prompt_rows == 64 and model.batched_runner.chunk == 256
        r = await model.complete(list(range(3, 200)), max_tokens=2)  # 197 prompt tokens: one prefill256
        assert len(r.token_ids) == 2
    async with llm.open_model("synthetic:tiny", device="cpu", slots=2, ctx=100, chunk=512, step_prompt_rows=8,
                              batching=True) as model:
        assert model.chunk == 100 and model.builder.prefill_sizes == [16, 64, 100]  # chunk bounded by ctx
        assert model.builder.batch_sizes == [1, 2, 4, 8, 16]  # 2 + 8 rows


async def test_a_decode_step_streams_every_weight_but_an_untied_embedding_table(tmp_path):
    """``streamed_weight_bytes`` (bench model's GB/s): ``weight_bytes`` less the token embedding
    table where it is not the output projection (a step gathers its tokens' rows), the whole of it
    where tied; the table's bytes from the file's type and shape (q8_0: 34 bytes a block of 32)."""
    import dataclasses

    from xinfer_async import llm
    from xinfer_async.llm._synthetic import SHAPES, write_synthetic_gguf

    tied = SHAPES["tiny"]
    untied = dataclasses.replace(tied, tied_embeddings=False)
    for cfg in (tied, untied):
        path = write_synthetic_gguf(tmp_path / f"m{int(cfg.tied_embeddings)}.gguf", cfg, "q4_1")
        async with llm.open_model(str(path), device="cpu", slots=1, ctx=64) as model:
            b = model.builder
            table = cfg.vocab_size * cfg.dim // 32 * 34  # token_embd q8_0 in a pure q4_1 file
            assert b.embd.nbytes == table
            assert b.streamed_weight_bytes() == b.weight_bytes() - (0 if cfg.tied_embeddings else table)
            assert 0 < b.streamed_weight_bytes() <= b.weight_bytes()
