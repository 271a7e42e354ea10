"""The ``tokenizers`` pipelines of llama.cpp's two GGUF tokenizer models (``llama-vocab.cpp``).

- ``gpt2`` (byte-level BPE): the file's merges; the pre-tokenizer is chosen by ``tokenizer.ggml.pre``
  from :data:`PRE_TOKENIZERS` (llama.cpp's regexes per pre-type, applied one after the other, each
  match and each gap a piece: ``Split(behavior="isolated")``), then the GPT-2 byte-to-unicode map
  (``ByteLevel``). ``llama-bpe`` also sets llama.cpp's ``ignore_merges`` (a piece that is itself a
  token is that token).
- ``llama`` (SentencePiece, as Llama 2, Mistral and Gemma files store it): llama.cpp's SPM tokenizer
  starts from the UTF-8 characters of the text (spaces written as U+2581, with one prepended when
  ``add_space_prefix``) and repeatedly merges the adjacent pair whose concatenation is the token of
  highest score (leftmost on a tie); a character left that is not a token becomes its ``<0xNN>`` byte
  tokens. That is a BPE whose merges are every split ``(left, right)`` of every token into two tokens,
  ranked by the token's score: what transformers' ``SentencePieceExtractor`` derives for its GGUF
  loader. Built as ``BPE(byte_fallback=True)`` with the normalizers ``Prepend("▁")`` (per text
  fragment between special tokens, as llama.cpp's per-fragment prefix) and ``Replace(" ", "▁")``.

Special and user-defined tokens are not added here (``Tokenizer`` adds them).
"""

from __future__ import annotations

import warnings
from itertools import repeat
from typing import Any, Sequence

import numpy as np

from ..hal._errors import GGUFError

__all__ = ["PRE_TOKENIZERS", "PRE_ALIASES", "canonical_pre", "bpe_tokenizer", "spm_tokenizer", "spm_merges"]

_GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3_RE = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_RE = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

#: pre-tokenizer name -> (llama.cpp's regexes, applied in order; ignore_merges), from llama-vocab.cpp
PRE_TOKENIZERS: dict[str, tuple[tuple[str, ...], bool]] = {
    "default": ((r"[\p{P}\$\+<=>\^~\|]+", _GPT2_RE, r"\p{N}+", r"[0-9][0-9][0-9]"), False),
    "gpt2": ((_GPT2_RE,), False),
    "smollm": ((r"\p{N}", _GPT2_RE), False),
    "llama-bpe": ((_LLAMA3_RE,), True),
    "qwen2": ((_QWEN2_RE,), False),
}
#: other ``tokenizer.ggml.pre`` names llama.cpp gives the same pre-tokenizer
PRE_ALIASES = {"gpt-2": "gpt2", "llama3": "llama-bpe", "llama-v3": "llama-bpe", "deepseek-r1-qwen": "qwen2"}

WHITESPACE = "\u2581"  # SentencePiece's escaped space


def canonical_pre(pre: str | None) -> str:
    """The :data:`PRE_TOKENIZERS` key of a ``tokenizer.ggml.pre`` value.

    A missing (None or empty) or unknown name gives ``"default"`` with a ``UserWarning`` naming it
    (llama.cpp's rule for a missing one; llama.cpp refuses an unknown one, here it runs, warned).
    """
    if pre in PRE_TOKENIZERS:
        return pre
    if pre in PRE_ALIASES:
        return PRE_ALIASES[pre]
    known = ", ".join(list(PRE_TOKENIZERS) + list(PRE_ALIASES))
    what = "missing tokenizer.ggml.pre" if not pre else f"unknown tokenizer.ggml.pre {pre!r}"
    warnings.warn(f"{what}: using the 'default' pre-tokenizer (known: {known}); the tokenization may "
                  f"differ from the model's own", UserWarning, stacklevel=3)
    return "default"


def _new_bpe(vocab: dict[str, int], merges: list[tuple[str, str]], **kwargs: Any) -> Any:
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models

    try:
        return HFTokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, **kwargs))
    except Exception as exc:  # tokenizers raises a bare Exception, e.g. a merge of unknown tokens
        raise GGUFError(f"tokenizer.ggml.tokens/merges do not make a BPE model: {exc}") from exc


def _vocab(tokens: Sequence[str]) -> dict[str, int]:
    """piece -> id; a repeated piece keeps its first id (inserted last, from the end)."""
    return dict(zip(reversed(tokens), range(len(tokens) - 1, -1, -1)))


def bpe_tokenizer(tokens: Sequence[str], merges: Sequence[str], pre: str) -> Any:
    """A ``tokenizers.Tokenizer`` for llama.cpp's ``gpt2`` model.

    Args:
        tokens: the vocabulary (byte-level encoded strings), index = token id.
        merges: ``"left right"`` strings, highest priority first.
        pre: a :data:`PRE_TOKENIZERS` key (see :func:`canonical_pre`).

    Raises:
        GGUFError: a merge is not two space-separated pieces, or names a piece not in the vocabulary.
    """
    from tokenizers import Regex, decoders, pre_tokenizers

    split = [m.split(" ") for m in merges]
    if any(len(p) != 2 for p in split):
        i = next(i for i, p in enumerate(split) if len(p) != 2)
        raise GGUFError(f"tokenizer.ggml.merges[{i}] = {merges[i]!r} is not 'left right'")
    regexes, ignore_merges = PRE_TOKENIZERS[pre]
    tk = _new_bpe(_vocab(tokens), list(map(tuple, split)), byte_fallback=False, ignore_merges=ignore_merges)
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in regexes]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    return tk


def spm_merges(tokens: Sequence[str], scores: Sequence[float]) -> list[tuple[str, str]]:
    """BPE merges equivalent to SentencePiece's score-driven merging.

    Every ``(left, right)`` such that ``left``, ``right`` and ``left + right`` are all tokens, ordered
    by the score of ``left + right``, highest first (ties: by the ids of left, then right).

    Args:
        tokens: the vocabulary, index = token id (a repeated piece counts with its first id).
        scores: float per token (``tokenizer.ggml.scores``).

    Returns:
        list of ``(left, right)`` piece pairs, highest priority first.
    """
    vocab = _vocab(tokens)
    vget = vocab.get
    n = len(tokens)
    lens = np.fromiter(map(len, tokens), dtype=np.int64, count=n)
    lefts, rights, merged = [], [], []
    first = np.fromiter(map(vget, tokens), dtype=np.int64, count=n) == np.arange(n)  # a repeat adds nothing
    ids = np.nonzero((lens > 1) & first)[0]
    k = 1
    while len(ids):  # split every token of more than k characters after its k-th
        pieces = [tokens[i] for i in ids.tolist()]
        a = np.fromiter(map(vget, [p[:k] for p in pieces], repeat(-1)), dtype=np.int64, count=len(pieces))
        hit = np.nonzero(a >= 0)[0]
        if len(hit):
            b = np.fromiter(map(vget, [pieces[i][k:] for i in hit.tolist()], repeat(-1)), dtype=np.int64,
                            count=len(hit))
            ok = b >= 0
            lefts.append(a[hit][ok])
            rights.append(b[ok])
            merged.append(ids[hit][ok])
        k += 1
        ids = ids[lens[ids] > k]
    if not lefts:
        return []
    left, right, whole = np.concatenate(lefts), np.concatenate(rights), np.concatenate(merged)
    score = np.asarray(scores, dtype=np.float64)[whole]
    order = np.lexsort((right, left, -score))
    pieces = np.array(tokens, dtype=object)
    return list(zip(pieces[left[order]].tolist(), pieces[right[order]].tolist()))


def spm_tokenizer(tokens: Sequence[str], scores: Sequence[float], unk_id: int | None,
                  add_space_prefix: bool) -> Any:
    """A ``tokenizers.Tokenizer`` for llama.cpp's ``llama`` (SentencePiece) model.

    Args:
        tokens: the vocabulary (spaces as U+2581; bytes as ``<0xNN>``), index = token id.
        scores: float per token.
        unk_id: the unknown token (used for a character that is neither a token nor has byte
            tokens), or None.
        add_space_prefix: prepend U+2581 to the text and to each fragment after a special token.
    """
    from tokenizers import normalizers

    unk = tokens[unk_id] if unk_id is not None else None
    tk = _new_bpe(_vocab(tokens), spm_merges(tokens, scores), byte_fallback=True, unk_token=unk)
    steps = [normalizers.Prepend(WHITESPACE)] if add_space_prefix else []
    tk.normalizer = normalizers.Sequence(steps + [normalizers.Replace(" ", WHITESPACE)])
    return tk
