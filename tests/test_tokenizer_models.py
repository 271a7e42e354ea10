"""Tests of xinfer_async/llm/_tokenizer_models.py: SentencePiece on a tiny hand-built GGUF vocabulary
(expected ids worked out by hand from llama.cpp's merge rule) and the BPE pre-tokenizers' splits
(worked out by hand from llama.cpp's regexes)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from xinfer_async.llm._gguf_reader import read_gguf
from xinfer_async.llm._tokenizer import Tokenizer, _token_bytes
from xinfer_async.llm._tokenizer_models import bpe_tokenizer, spm_merges

# id: (piece, score, type)  1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte
VOCAB = [
    ("<unk>", 0.0, 2),      # 0
    ("<s>", 0.0, 3),        # 1
    ("</s>", 0.0, 3),       # 2
    ("\u2581", -10.0, 1),   # 3  ▁
    ("a", -11.0, 1),        # 4
    ("b", -12.0, 1),        # 5
    ("c", -13.0, 1),        # 6
    ("\u2581a", -3.0, 1),   # 7  ▁a
    ("ab", -5.0, 1),        # 8
    ("bc", -2.0, 1),        # 9
    ("\u2581ab", -1.0, 1),  # 10 ▁ab
    ("<0xC3>", 0.0, 6),     # 11
    ("<0xA9>", 0.0, 6),     # 12
    ("xy", 0.0, 4),         # 13 user-defined
    ("cc", -4.0, 1),        # 14
]


def _write(path, add_space_prefix: bool | None) -> dict:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list([p for p, _, _ in VOCAB])
    w.add_token_scores([s for _, s, _ in VOCAB])
    w.add_token_types([t for _, _, t in VOCAB])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    if add_space_prefix is not None:
        w.add_add_space_prefix(add_space_prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return read_gguf(path).metadata


@pytest.fixture(params=[None, True, False], ids=["prefix-default", "prefix-on", "prefix-off"])
def spm(request, tmp_path) -> tuple[Tokenizer, bool]:
    tok = Tokenizer.from_gguf(_write(tmp_path / "spm.gguf", request.param))
    return tok, request.param is not False


def test_spm_flags(spm):
    tok, prefix = spm
    assert tok.encode("") == [] and tok.encode("", add_special=True) == [1]  # no lone space prefix
    assert (tok.model, tok.bos_id, tok.eos_id, tok.unk_id) == ("llama", 1, 2, 0)
    assert (tok.add_bos, tok.add_eos, tok.add_space_prefix) == (True, False, prefix)  # llama.cpp's SPM defaults


def test_spm_merges_by_score(spm):
    tok, prefix = spm
    # "abc": pairs ab (-5), bc (-2): bc first; then a+bc is no token -> [a, bc]
    # "▁abc": pairs ▁a (-3), ab (-5), bc (-2): bc, then ▁a -> [▁a, bc]
    assert tok.encode("abc") == ([7, 9] if prefix else [4, 9])
    # "▁ab": ▁a (-3) beats ab (-5), then ▁a+b = ▁ab (-1) -> [▁ab]; without the prefix: [ab]
    assert tok.encode("ab") == ([10] if prefix else [8])
    # " ab": the space is ▁; with the prefix "▁▁ab": ▁▁ is no token -> [▁, ▁ab]
    assert tok.encode(" ab") == ([3, 10] if prefix else [10])
    # "ccc": cc at 0 and at 1 tie on score: the leftmost merges -> [cc, c]
    assert tok.encode("ccc", add_special=True) == ([1, 3, 14, 6] if prefix else [1, 14, 6])


def test_spm_byte_fallback_and_unknown(spm):
    tok, prefix = spm
    p = [3] if prefix else []
    assert tok.encode("é") == p + [11, 12]  # é = C3 A9: both byte tokens exist
    # € = E2 82 AC: no byte tokens for it -> <unk> (llama.cpp itself would throw here)
    assert tok.encode("a€") == ([7] if prefix else [4]) + [0]
    assert tok.decode(p + [11, 12]) == "é"
    assert tok.decode([7, 9]) == ("abc" if prefix else " abc")  # the first token's prefix space is dropped


def test_spm_special_and_user_defined(spm):
    tok, prefix = spm
    # user-defined "xy" is matched in any text; the text after it is a new fragment (its own ▁)
    assert tok.encode("axyb") == ([7, 13, 3, 5] if prefix else [4, 13, 5])
    assert tok.encode("<s>a", special=True) == [1] + ([7] if prefix else [4])
    assert 1 not in tok.encode("<s>a")
    assert tok.decode([1, 7], skip_special=True) == " a"  # llama.cpp: only the first token's space goes
    assert tok.decode([1, 7]) == "<s> a"


def test_spm_merges_list():
    tokens = [p for p, _, _ in VOCAB]
    merges = spm_merges(tokens, [s for _, s, _ in VOCAB])
    # every split of a token into two tokens, by the token's score (highest first)
    assert merges == [("\u2581", "ab"), ("\u2581a", "b"), ("b", "c"), ("\u2581", "a"), ("c", "c"), ("a", "b")]


# -- BPE pre-tokenizers ------------------------------------------------------------------------

TEXT = "Hello world's 12345 x\n\n  y!!"
SPLITS = {
    "gpt2": ["Hello", " world", "'s", " 12345", " x", "\n\n ", " y", "!!"],
    "smollm": ["Hello", " world", "'s", " ", "1", "2", "3", "4", "5", " x", "\n\n ", " y", "!!"],
    "llama-bpe": ["Hello", " world", "'s", " ", "123", "45", " x", "\n\n", " ", " y", "!!"],
    "qwen2": ["Hello", " world", "'s", " ", "1", "2", "3", "4", "5", " x", "\n\n", " ", " y", "!!"],
    "default": ["Hello", " world", "'", "s", " ", "123", "45", " x", "\n\n ", " y", "!!"],
}


@pytest.mark.parametrize("pre", list(SPLITS))
def test_pre_tokenizer_splits(pre):
    tk = bpe_tokenizer(["a"], [], pre)
    pieces = [_token_bytes(p).decode() for p, _ in tk.pre_tokenizer.pre_tokenize_str(TEXT)]
    assert pieces == SPLITS[pre]


def test_llama_bpe_ignores_merges_for_whole_tokens():
    # "abc" is a token but no merge makes it: llama-bpe takes the whole piece (llama.cpp's ignore_merges)
    tokens = ["a", "b", "c", "ab", "abc"]
    assert Tokenizer(tokens, ["a b"], pre="llama-bpe").encode("abc") == [4]
    assert Tokenizer(tokens, ["a b"], pre="gpt2").encode("abc") == [3, 2]


def test_spm_merges_against_a_direct_loop():
    """spm_merges against a direct loop on random vocabularies (ties, repeats, long pieces)."""
    rng = np.random.default_rng(7)
    for _ in range(5):
        tokens = list({"".join(rng.choice(list("ab▁c"), size=rng.integers(1, 6))) for _ in range(60)})
        tokens.append(tokens[3])  # a repeated piece keeps its first id
        scores = rng.integers(-5, 0, size=len(tokens)).astype(float).tolist()
        first = {}
        for i, t in enumerate(tokens):
            first.setdefault(t, i)
        ref = []
        for t, i in first.items():
            for k in range(1, len(t)):
                if t[:k] in first and t[k:] in first:
                    ref.append((-scores[i], first[t[:k]], first[t[k:]]))
        ref.sort()
        assert spm_merges(tokens, scores) == [(tokens[a], tokens[b]) for _, a, b in ref]
