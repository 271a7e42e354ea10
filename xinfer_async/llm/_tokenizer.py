"""Byte-level BPE tokenizer built from GGUF ``tokenizer.ggml.*`` metadata.

Matches llama.cpp's ``gpt2`` tokenizer model (``llama-vocab.cpp``): BPE over the GPT-2 byte-to-unicode
alphabet, with the pre-tokenizer chosen by ``tokenizer.ggml.pre``. For ``smollm`` llama.cpp splits
every digit into its own piece (regex ``\\p{N}``) and then applies the GPT-2 regex; here that is the
``tokenizers`` pipeline ``Digits(individual_digits=True)`` -> ``ByteLevel(add_prefix_space=False,
use_regex=True)``, which is also what SmolLM2's own ``tokenizer.json`` uses.

Control tokens (``token_type == 3``, e.g. ``<|im_start|>``) are matched in the input text only when
asked (``special=True``), as llama.cpp does with ``parse_special``.
"""

from __future__ import annotations

import codecs
import threading
from typing import Any, Iterable

from ..hal._errors import GGUFError

__all__ = ["Tokenizer", "StreamDecoder"]

TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4

# tokenizer.ggml.pre values whose pre-tokenization is: each digit alone, then the GPT-2 regex.
_DIGIT_SPLIT_PRE = ("smollm",)
# tokenizer.ggml.pre values that are the plain GPT-2 regex.
_GPT2_PRE = ("default", "gpt2", "gpt-2")


def _bytes_to_unicode() -> dict[int, str]:
    """The GPT-2 byte -> printable unicode char table (openai/gpt-2 ``encoder.py``)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1)
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


_BYTE_DECODER = {c: b for b, c in _bytes_to_unicode().items()}


def _token_bytes(piece: str) -> bytes:
    """Bytes of a byte-level BPE vocabulary entry (chars outside the table pass through as UTF-8)."""
    out = bytearray()
    for ch in piece:
        b = _BYTE_DECODER.get(ch)
        if b is None:
            out += ch.encode("utf-8")
        else:
            out.append(b)
    return bytes(out)


class Tokenizer:
    """A GGUF byte-level BPE tokenizer (llama.cpp ``gpt2`` model).

    Attributes:
        vocab_size: number of tokens.
        bos_id: ``tokenizer.ggml.bos_token_id`` (None if absent).
        eos_id: ``tokenizer.ggml.eos_token_id`` (None if absent).
        im_end_id: id of ``<|im_end|>`` if the vocabulary has it, else None.
        add_bos: ``tokenizer.ggml.add_bos_token`` (default False); ``encode`` never adds it itself.
        special_ids: ids of the control tokens.
    """

    def __init__(self, tokens: list[str], merges: list[str], token_types: list[int] | None = None,
                 *, pre: str = "default", bos_id: int | None = None, eos_id: int | None = None,
                 add_bos: bool = False):
        """Build the tokenizer from vocabulary lists.

        Args:
            tokens: the vocabulary, byte-level encoded strings, index = token id.
            merges: BPE merges, each ``"left right"``, highest priority first.
            token_types: llama.cpp token types per id (1 normal, 3 control, 4 user-defined,
                ...); None means all normal.
            pre: the ``tokenizer.ggml.pre`` name ('smollm' splits digits; 'default'/'gpt2' do not).
            bos_id, eos_id: special ids.
            add_bos: recorded only (callers prepend ``bos_id`` when True).

        Raises:
            GGUFError: ``pre`` is not a supported pre-tokenizer, a merge is malformed, or the
                token type list does not match the vocabulary.
        """
        from tokenizers import AddedToken, Regex
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers

        if token_types is None:
            token_types = [TOKEN_TYPE_NORMAL] * len(tokens)
        if len(token_types) != len(tokens):
            raise GGUFError(
                f"tokenizer.ggml.token_type has {len(token_types)} entries for {len(tokens)} tokens"
            )
        # a repeated piece keeps its first id (inserted last, from the end)
        vocab = dict(zip(reversed(tokens), range(len(tokens) - 1, -1, -1)))
        split = [m.split(" ") for m in merges]
        if any(len(p) != 2 for p in split):
            i = next(i for i, p in enumerate(split) if len(p) != 2)
            raise GGUFError(f"tokenizer.ggml.merges[{i}] = {merges[i]!r} is not 'left right'")
        pairs = list(map(tuple, split))

        if pre in _DIGIT_SPLIT_PRE:
            pre_tok = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ])
        elif pre in _GPT2_PRE:
            pre_tok = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        else:
            raise GGUFError(
                f"unsupported tokenizer.ggml.pre {pre!r}; supported: "
                f"{', '.join(_DIGIT_SPLIT_PRE + _GPT2_PRE)}"
            )

        def make() -> Any:
            try:
                tk = HFTokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
            except Exception as exc:  # tokenizers raises a bare Exception, e.g. a merge of unknown tokens
                raise GGUFError(f"tokenizer.ggml.tokens/merges do not make a BPE model: {exc}") from exc
            tk.pre_tokenizer = pre_tok
            tk.decoder = decoders.ByteLevel()
            return tk

        self._tokens = list(tokens)
        self._types = list(token_types)
        self.vocab_size = len(tokens)
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.add_bos = bool(add_bos)
        self.special_ids = frozenset(i for i, t in enumerate(self._types) if t == TOKEN_TYPE_CONTROL)
        user_ids = [i for i, t in enumerate(self._types) if t == TOKEN_TYPE_USER_DEFINED]
        self.im_end_id = vocab.get("<|im_end|>")

        user = [AddedToken(tokens[i], special=False, normalized=False) for i in user_ids]
        control = [AddedToken(tokens[i], special=True, normalized=False) for i in sorted(self.special_ids)]

        def with_added(special: bool) -> Any:
            tk = make()
            if user:
                tk.add_tokens(user)
            if special and control:
                tk.add_special_tokens(control)
            return tk

        # Plain text: control tokens are not matched; user-defined tokens always are (llama.cpp).
        self._plain = with_added(False)
        # With special=True: control tokens are matched too. Built on first use (~45 ms for a 49k
        # vocabulary, a share of a cold start that a plain prompt never needs).
        self._special: Any = None
        self._make_special = lambda: with_added(True)
        self._special_lock = threading.Lock()
        # Bytes of each token, for decoding, computed on first use (a whole vocabulary takes ~0.3 s):
        # byte-level pieces map back through the GPT-2 table; control and user-defined tokens are
        # their text in UTF-8.
        self._bytes: list[bytes | None] = [None] * len(tokens)

    @classmethod
    def from_gguf(cls, metadata: dict[str, Any]) -> "Tokenizer":
        """Build from GGUF metadata (``GGUFModel.metadata``).

        Args:
            metadata: needs ``tokenizer.ggml.tokens`` and ``tokenizer.ggml.merges``; uses
                ``tokenizer.ggml.token_type``, ``.pre`` (default 'default'), ``.bos_token_id``,
                ``.eos_token_id``, ``.add_bos_token`` when present.

        Raises:
            GGUFError: a required key is missing, ``tokenizer.ggml.model`` is not 'gpt2', or the
                pre-tokenizer is unsupported.
        """
        model = metadata.get("tokenizer.ggml.model", "gpt2")
        if model != "gpt2":
            raise GGUFError(f"unsupported tokenizer.ggml.model {model!r}; supported: gpt2")
        for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
            if key not in metadata:
                raise GGUFError(f"missing required metadata key {key!r}")
        return cls(
            metadata["tokenizer.ggml.tokens"],
            metadata["tokenizer.ggml.merges"],
            metadata.get("tokenizer.ggml.token_type"),
            pre=metadata.get("tokenizer.ggml.pre", "default"),
            bos_id=metadata.get("tokenizer.ggml.bos_token_id"),
            eos_id=metadata.get("tokenizer.ggml.eos_token_id"),
            add_bos=metadata.get("tokenizer.ggml.add_bos_token", False),
        )

    def encode(self, text: str, special: bool = False) -> list[int]:
        """Text -> token ids.

        Args:
            text: any string (may be empty).
            special: when True, control-token text such as ``<|im_start|>`` maps to its id; when
                False it is tokenized as ordinary text.

        Returns:
            list of int token ids (no BOS added).

        Raises:
            TypeError: ``text`` is not a str.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        tk = self._special_tokenizer() if special else self._plain
        return tk.encode(text, add_special_tokens=False).ids

    def _special_tokenizer(self) -> Any:
        if self._special is None:
            with self._special_lock:
                if self._special is None:
                    self._special = self._make_special()
        return self._special

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes one token stands for (control tokens: their text).

        Raises:
            ValueError: ``token_id`` outside ``[0, vocab_size)``.
        """
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token_id must be in [0, {self.vocab_size}), got {token_id}")
        b = self._bytes[token_id]
        if b is None:
            t = self._tokens[token_id]
            b = t.encode("utf-8") if self._types[token_id] in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED) \
                else _token_bytes(t)
            self._bytes[token_id] = b
        return b

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Token ids -> text. Invalid UTF-8 becomes U+FFFD.

        Args:
            ids: token ids.
            skip_special: leave control tokens out instead of writing their text.

        Raises:
            ValueError: an id outside ``[0, vocab_size)``.
        """
        out = bytearray()
        for i in ids:
            i = int(i)
            if skip_special and i in self.special_ids:
                continue
            out += self.token_bytes(i)
        return out.decode("utf-8", errors="replace")

    def stream_decoder(self, skip_special: bool = False) -> "StreamDecoder":
        """A fresh :class:`StreamDecoder` over this tokenizer."""
        return StreamDecoder(self, skip_special=skip_special)


class StreamDecoder:
    """Incremental detokenizer for streamed generation.

    ``push(id)`` returns the text completed by that token; a UTF-8 multi-byte sequence split
    across tokens (emoji, CJK) is held back until its last byte arrives, so each character is
    emitted exactly once and whole. Bytes that can never form valid UTF-8 become U+FFFD.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False):
        self._tok = tokenizer
        self._skip = skip_special
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """Feed one token id; returns newly completed text (possibly '').

        Raises:
            ValueError: ``token_id`` outside the vocabulary.
        """
        token_id = int(token_id)
        b = self._tok.token_bytes(token_id)
        if self._skip and token_id in self._tok.special_ids:
            return ""
        return self._dec.decode(b, final=False)

    def flush(self) -> str:
        """End of stream: returns held-back bytes (an incomplete sequence becomes U+FFFD)."""
        out = self._dec.decode(b"", final=True)
        self._dec.reset()
        return out
