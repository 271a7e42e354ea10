"""Tests of xinfer_async/llm/_tokenizer.py against llama.cpp's tokenization (golden file)."""

from __future__ import annotations

import functools

import pytest

from _llm_fixtures import golden, require_model
from xinfer_async.hal._errors import GGUFError
from xinfer_async.llm._tokenizer import StreamDecoder, Tokenizer

pytestmark = pytest.mark.model


@functools.lru_cache(maxsize=1)
def _tokenizer_cached(path) -> Tokenizer:
    from xinfer_async.llm._gguf import load_gguf

    return Tokenizer.from_gguf(load_gguf(path).metadata)


@pytest.fixture
def tok() -> Tokenizer:
    return _tokenizer_cached(require_model())


def _cases():
    try:
        return golden()["tokenizer"]
    except BaseException:  # skip raised outside a test: no golden file
        return []


@pytest.mark.parametrize("case", _cases(), ids=lambda c: repr(c["text"])[:30])
def test_golden_ids(tok, case):
    text = case["text"]
    ids = tok.encode(text)
    ids_special = tok.encode(text, special=True)
    assert ids == case["ids"]
    assert ids_special == case["ids_special"]
    assert tok.decode(ids) == text
    assert tok.decode(ids_special) == text


def test_golden_prompts_and_generations(tok):
    for g in golden()["generations"]:
        assert tok.encode(g["prompt"], special=True) == g["prompt_ids"]
        assert tok.decode(g["greedy_ids"], skip_special=True) == g["text"]


def test_attributes(tok):
    assert (tok.bos_id, tok.eos_id, tok.im_end_id, tok.vocab_size) == (1, 2, 2, 49152)
    assert tok.add_bos is False
    assert tok.encode("<|im_start|>", special=True) == [1]
    assert tok.encode("<|endoftext|>", special=True) == [0]
    assert len(tok.encode("<|im_start|>")) > 1
    assert tok.decode([1, 2], skip_special=True) == ""


def test_stream_decoder_emoji_split_across_tokens(tok):
    text = "emoji 🦙 and 中文字符"
    ids = tok.encode(text)
    llama = tok.encode("🦙")
    assert len(llama) > 1  # the emoji really is split over several byte tokens
    sd = tok.stream_decoder()
    pieces = [sd.push(i) for i in ids]
    pieces.append(sd.flush())
    assert "".join(pieces) == text
    assert pieces.count("🦙") == 1
    assert all("\ufffd" not in p for p in pieces)
    # the tokens carrying only the first bytes of the emoji emit nothing
    sd = StreamDecoder(tok)
    assert [sd.push(i) for i in llama] == [""] * (len(llama) - 1) + ["🦙"]
    assert sd.flush() == ""


def test_stream_decoder_flush_incomplete(tok):
    first = tok.encode("🦙")[0]
    sd = tok.stream_decoder()
    assert sd.push(first) == ""
    assert sd.flush() == "\ufffd"


def test_stream_matches_decode_on_generations(tok):
    for g in golden()["generations"]:
        sd = tok.stream_decoder(skip_special=True)
        assert "".join(sd.push(i) for i in g["greedy_ids"]) + sd.flush() == g["text"]


def test_bad_ids(tok):
    with pytest.raises(ValueError, match=r"^token_id must be in \[0, 49152\), got 49152$"):
        tok.decode([49152])
    with pytest.raises(ValueError, match=r"^token_id must be in \[0, 49152\), got -1$"):
        tok.stream_decoder().push(-1)
    with pytest.raises(TypeError, match="^text must be a str, got bytes$"):
        tok.encode(b"abc")


def test_unsupported_pre(tok):
    with pytest.raises(GGUFError, match=r"^unsupported tokenizer.ggml.pre 'qwen2'; supported: smollm, default, gpt2, gpt-2$"):
        Tokenizer(["a", "b"], [], pre="qwen2")
    with pytest.raises(GGUFError, match=r"^missing required metadata key 'tokenizer.ggml.merges'$"):
        Tokenizer.from_gguf({"tokenizer.ggml.tokens": ["a"]})
    with pytest.raises(GGUFError, match=r"^unsupported tokenizer.ggml.model 'llama'; supported: gpt2$"):
        Tokenizer.from_gguf({"tokenizer.ggml.model": "llama"})
