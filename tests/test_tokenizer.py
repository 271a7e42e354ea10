"""Tests of xinfer_async/llm/_tokenizer.py against llama.cpp's tokenization (golden file)."""

from __future__ import annotations

import functools

import pytest

from _llm_fixtures import gemma_tokenizer, golden, golden_named, require_model
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


def test_unsupported_model_and_missing_keys():
    with pytest.raises(GGUFError, match=r"^missing required metadata key 'tokenizer.ggml.merges'$"):
        Tokenizer.from_gguf({"tokenizer.ggml.tokens": ["a"]})
    with pytest.raises(GGUFError, match=r"^missing required metadata key 'tokenizer.ggml.scores'$"):
        Tokenizer.from_gguf({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a"]})
    with pytest.raises(GGUFError, match=r"^unsupported tokenizer.ggml.model 'bert'; supported: gpt2, llama$"):
        Tokenizer.from_gguf({"tokenizer.ggml.model": "bert"})
    with pytest.raises(GGUFError, match=r"^tokenizer.ggml.scores has 1 entries for 2 tokens$"):
        Tokenizer(["a", "b"], model="llama", scores=[0.0])


def test_unknown_pre_warns_and_uses_default():
    with pytest.warns(UserWarning, match=r"^unknown tokenizer.ggml.pre 'qwen9': using the 'default' pre-tokenizer"):
        t = Tokenizer(["a", "b"], [], pre="qwen9")
    assert t.pre == "default"
    with pytest.warns(UserWarning, match=r"^missing tokenizer.ggml.pre: using the 'default' pre-tokenizer"):
        assert Tokenizer(["a", "b"], [], pre=None).pre == "default"
    assert Tokenizer(["a"], [], pre="llama3").pre == "llama-bpe"


def _four_variants(tok: Tokenizer, case: dict) -> None:
    """ids / ids_special / ids_add_bos / ids_add_bos_special exact, and the text back from ids."""
    text = case["text"]
    assert tok.encode(text) == case["ids"]
    assert tok.encode(text, special=True) == case["ids_special"]
    assert tok.encode(text, add_special=True) == case["ids_add_bos"]
    assert tok.encode(text, special=True, add_special=True) == case["ids_add_bos_special"]
    assert case["detokenize_roundtrip"] is True
    assert tok.decode(case["ids"]) == text


def _extra_cases():
    try:
        return golden_named("smollm2_llamacpp_extra.json")["tokenizer"]
    except BaseException:
        return []


@pytest.mark.parametrize("case", _extra_cases(), ids=lambda c: c["id"])
def test_golden_extra_ids(tok, case):
    _four_variants(tok, case)


# -- Gemma 3 270M (SentencePiece, 262,144 tokens), from the metadata alone ----------------------

@pytest.fixture
def gemma() -> Tokenizer:
    return gemma_tokenizer()


def _gemma_cases():
    try:
        return golden_named("gemma3_llamacpp.json")["tokenizer"]
    except BaseException:
        return []


@pytest.mark.parametrize("case", _gemma_cases(), ids=lambda c: c["id"])
def test_gemma_golden_ids(gemma, case):
    _four_variants(gemma, case)
    assert gemma.decode(case["ids_special"]) == case["text"]


def test_golden_special_tokens(tok, gemma):
    for t, name in ((tok, "smollm2_llamacpp_extra.json"), (gemma, "gemma3_llamacpp.json")):
        ref = golden_named(name)["special_tokens"]
        assert sorted(t.eog_ids) == ref["eog_ids"]
        assert (t.bos_id, t.eos_id, t.add_bos, t.add_eos, t.vocab_size) == (
            ref["bos"], ref["eos"], ref["add_bos"], ref["add_eos"], ref["n_vocab"])


def test_gemma_attributes(gemma):
    g = gemma
    assert (g.model, g.pre, g.vocab_size, g.bos_id, g.eos_id, g.unk_id) == ("llama", None, 262144, 2, 1, 3)
    assert (g.add_bos, g.add_eos, g.add_space_prefix) == (True, False, False)
    assert g.encode("") == [] and g.encode("", add_special=True) == [2]
    assert g.encode("<start_of_turn>", special=True) == [105]
    assert 105 not in g.encode("<start_of_turn>")
    assert g.encode("\n") == [107]  # a user-defined token: matched without special too
    assert g.encode("<bos>Hello", special=True, add_special=True)[:2] == [2, 2]  # as llama.cpp (it warns)
    assert g.decode([2, 105], skip_special=True) == ""
    # "</s>" (212) is user-defined in the file; llama.cpp makes it a control token (end of generation)
    assert g.encode("</s>", special=True) == [212] and 212 not in g.encode("</s>")
    assert g.decode([212]) == "</s>" and g.decode([212], skip_special=True) == ""


def test_gemma_byte_fallback_and_stream(gemma):
    text = "\u0b95\u0bbe \U0001f999 \x07 x"  # rare script, an emoji, a control character
    ids = gemma.encode(text)
    assert gemma.decode(ids) == text
    sd = gemma.stream_decoder()
    assert "".join(sd.push(i) for i in ids) + sd.flush() == text


def test_gemma_chat_cases_tokenize(gemma):
    for conv in golden_named("gemma3_llamacpp.json")["chat_template"]["conversations"]:
        assert gemma.encode(conv["rendered"], special=True) == conv["ids"]
