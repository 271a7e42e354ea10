"""The GGUF tokenizer: llama.cpp's ``gpt2`` (byte-level BPE) and ``llama`` (SentencePiece) models.

Built from the ``tokenizer.ggml.*`` metadata with the ``tokenizers`` library (the pipelines are
``_tokenizer_models``'s) and matched against llama.cpp (``llama-vocab.cpp``, commit 0c1e570):

- user-defined tokens (``token_type == 4``, e.g. Gemma's ``\n``, ``<start_of_image>``) are matched
  in any text; control and unknown tokens (types 3 and 2, e.g. ``<|im_start|>``, ``<bos>``) only when
  asked (``special=True``), as llama.cpp's ``parse_special``;
- ``add_special=True`` adds BOS (and EOS) when the file's ``add_bos_token`` (``add_eos_token``) says
  so, as llama.cpp's ``add_special``;
- decoding writes control tokens' text (unless ``skip_special``), user-defined tokens' text,
  byte tokens' byte, and normal tokens' text (SentencePiece: U+2581 as a space; BPE: through the
  GPT-2 byte table); with ``add_space_prefix`` the first token's leading space is dropped.
"""

from __future__ import annotations

import codecs
import threading
from typing import Any, Iterable, Sequence

from ..hal._errors import GGUFError
from ._tokenizer_models import WHITESPACE, bpe_tokenizer, canonical_pre, spm_tokenizer

__all__ = ["Tokenizer", "StreamDecoder"]

TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_UNKNOWN = 2
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4
TOKEN_TYPE_UNUSED = 5
TOKEN_TYPE_BYTE = 6

#: the ``tokenizer.ggml.model`` values built here
MODELS = ("gpt2", "llama")

#: token texts llama.cpp makes end-of-generation (and control-type, whatever the file says): its
#: EOG list and its FIM pad / repo / file-separator texts (``llama-vocab.cpp``, ``special_eog_ids``)
EOG_TEXTS = frozenset((
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[",
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>",
))


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
    """A GGUF tokenizer (llama.cpp's ``gpt2`` or ``llama`` model).

    Attributes:
        model: ``"gpt2"`` (byte-level BPE) or ``"llama"`` (SentencePiece).
        pre: the pre-tokenizer used (``gpt2`` model only; None for ``llama``).
        vocab_size: number of tokens.
        bos_id, eos_id, unk_id: ``tokenizer.ggml.{bos,eos,unknown}_token_id`` (None if absent).
        bos_token, eos_token: the text of BOS / EOS (None if absent), as chat templates use it.
        im_end_id: id of ``<|im_end|>`` if the vocabulary has it, else None.
        add_bos, add_eos: whether ``encode(..., add_special=True)`` adds BOS / EOS
            (``tokenizer.ggml.add_bos_token`` / ``add_eos_token``; llama.cpp's defaults when absent:
            BOS for ``llama`` and ``llama-bpe``, no EOS).
        add_space_prefix: SentencePiece: a space is prepended to the text (and after each special
            token), and dropped from the first token when decoding.
        special_ids: ids of the control and unknown tokens (types 3 and 2, and the tokens of
            ``EOG_TEXTS``, which llama.cpp makes control tokens whatever their type).
        eog_ids: the ids that end a generation, as llama.cpp's ``llama_vocab_is_eog``: EOS, the
            ``eot``/``eom`` ids of the file, and every token whose text is in ``EOG_TEXTS``.
    """

    def __init__(self, tokens: Sequence[str], merges: Sequence[str] | None = None,
                 token_types: Sequence[int] | None = None, *, model: str = "gpt2",
                 scores: Sequence[float] | None = None, pre: str | None = "default",
                 bos_id: int | None = None, eos_id: int | None = None, unk_id: int | None = None,
                 add_bos: bool | None = None, add_eos: bool = False, add_space_prefix: bool | None = None,
                 eot_id: int | None = None, eom_id: int | None = None):
        """Build the tokenizer from vocabulary lists.

        Args:
            tokens: the vocabulary, index = token id (``gpt2``: byte-level encoded strings;
                ``llama``: SentencePiece pieces, spaces as U+2581, bytes as ``<0xNN>``).
            merges: ``gpt2`` only: BPE merges, each ``"left right"``, highest priority first.
            token_types: llama.cpp token types per id (1 normal, 2 unknown, 3 control,
                4 user-defined, 5 unused, 6 byte); None means all normal.
            model: ``"gpt2"`` or ``"llama"`` (``tokenizer.ggml.model``).
            scores: ``llama`` only: float per token, the merge priority (higher first).
            pre: ``gpt2`` only: the ``tokenizer.ggml.pre`` name (``_tokenizer_models.PRE_TOKENIZERS``
                and aliases); None or an unknown name warns and uses ``"default"``.
            bos_id, eos_id, unk_id: special ids.
            add_bos, add_eos: what ``encode(..., add_special=True)`` adds (None: llama.cpp's default).
            add_space_prefix: ``llama`` only (None: llama.cpp's default, True).
            eot_id, eom_id: end-of-turn / end-of-message ids (``tokenizer.ggml.eot_token_id``...),
                added to ``eog_ids``.

        Raises:
            GGUFError: an unknown ``model``; ``merges`` missing or malformed (``gpt2``); ``scores``
                missing (``llama``); the token type or score list does not match the vocabulary.

        Warns:
            UserWarning: ``pre`` missing or unknown (the default pre-tokenizer is used).
        """
        if model not in MODELS:
            raise GGUFError(f"unsupported tokenizer.ggml.model {model!r}; supported: {', '.join(MODELS)}")
        n = len(tokens)
        token_types = [TOKEN_TYPE_NORMAL] * n if token_types is None else [int(t) for t in token_types]
        if len(token_types) != n:
            raise GGUFError(f"tokenizer.ggml.token_type has {len(token_types)} entries for {n} tokens")
        eog_texts = [i for i, t in enumerate(tokens) if t in EOG_TEXTS]
        for i in eog_texts:
            if token_types[i] != TOKEN_TYPE_CONTROL:
                token_types[i] = TOKEN_TYPE_CONTROL  # llama.cpp overrides the type (it logs it)
        self.model = model
        if model == "gpt2":
            if merges is None:
                raise GGUFError("missing required metadata key 'tokenizer.ggml.merges'")
            self.pre = canonical_pre(pre)
            tk = bpe_tokenizer(tokens, merges, self.pre)
            default_bos = self.pre == "llama-bpe"
            self.add_space_prefix = False
        else:
            if scores is None:
                raise GGUFError("missing required metadata key 'tokenizer.ggml.scores'")
            if len(scores) != n:
                raise GGUFError(f"tokenizer.ggml.scores has {len(scores)} entries for {n} tokens")
            self.pre = None
            self.add_space_prefix = True if add_space_prefix is None else bool(add_space_prefix)
            tk = spm_tokenizer(tokens, scores, unk_id, self.add_space_prefix)
            default_bos = True
        self._tokens = list(tokens)
        self._types = token_types
        self.vocab_size = n
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.unk_id = unk_id
        self.bos_token = tokens[bos_id] if bos_id is not None and 0 <= bos_id < n else None
        self.eos_token = tokens[eos_id] if eos_id is not None and 0 <= eos_id < n else None
        self.add_bos = default_bos if add_bos is None else bool(add_bos)
        self.add_eos = bool(add_eos)
        self.special_ids = frozenset(i for i, t in enumerate(token_types)
                                     if t in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_UNKNOWN))
        self.im_end_id = next((i for i, t in enumerate(self._tokens) if t == "<|im_end|>"), None)
        self.eog_ids = frozenset(eog_texts) | {i for i in (eos_id, eot_id, eom_id) if i is not None}

        from tokenizers import AddedToken

        user = [AddedToken(tokens[i], special=False, normalized=False)
                for i, t in enumerate(token_types) if t == TOKEN_TYPE_USER_DEFINED]
        control = [AddedToken(tokens[i], special=True, normalized=False) for i in sorted(self.special_ids)]
        if user:
            tk.add_tokens(user)  # matched in any text (llama.cpp)
        if control:
            tk.add_special_tokens(control)  # matched only with special=True: see encode
        self._hf = tk
        self._lock = threading.Lock()  # encode_special_tokens is a setting of the shared tokenizer
        # Bytes of each token, for decoding, computed on first use (a whole vocabulary takes ~0.3 s).
        self._bytes: list[bytes | None] = [None] * n

    @classmethod
    def from_gguf(cls, metadata: dict[str, Any]) -> "Tokenizer":
        """Build from GGUF metadata (``GGUFModel.metadata``, or ``read_gguf(path).metadata``).

        Args:
            metadata: needs ``tokenizer.ggml.tokens`` and, for ``tokenizer.ggml.model`` ``gpt2``
                (the default), ``tokenizer.ggml.merges``, for ``llama``, ``tokenizer.ggml.scores``;
                uses ``.token_type``, ``.pre``, ``.bos_token_id``, ``.eos_token_id``,
                ``.unknown_token_id``, ``.eot_token_id``, ``.eom_token_id``, ``.add_bos_token``,
                ``.add_eos_token``, ``.add_space_prefix`` when present.

        Raises:
            GGUFError: a required key is missing, or the model is neither ``gpt2`` nor ``llama``.

        Warns:
            UserWarning: ``tokenizer.ggml.pre`` missing or unknown (``gpt2`` model).
        """
        t = "tokenizer.ggml."
        model = metadata.get(t + "model", "gpt2")
        if model not in MODELS:
            raise GGUFError(f"unsupported tokenizer.ggml.model {model!r}; supported: {', '.join(MODELS)}")
        need = (t + "tokens", t + ("merges" if model == "gpt2" else "scores"))
        for key in need:
            if key not in metadata:
                raise GGUFError(f"missing required metadata key {key!r}")
        return cls(
            metadata[t + "tokens"],
            metadata.get(t + "merges"),
            metadata.get(t + "token_type"),
            model=model,
            scores=metadata.get(t + "scores"),
            pre=metadata.get(t + "pre"),
            bos_id=metadata.get(t + "bos_token_id"),
            eos_id=metadata.get(t + "eos_token_id"),
            unk_id=metadata.get(t + "unknown_token_id"),
            add_bos=metadata.get(t + "add_bos_token"),
            add_eos=metadata.get(t + "add_eos_token", False),
            add_space_prefix=metadata.get(t + "add_space_prefix"),
            eot_id=metadata.get(t + "eot_token_id"),
            eom_id=metadata.get(t + "eom_token_id"),
        )

    def encode(self, text: str, special: bool = False, add_special: bool = False) -> list[int]:
        """Text -> token ids.

        Args:
            text: any string (may be empty).
            special: when True, control-token text such as ``<|im_start|>`` maps to its id; when
                False it is tokenized as ordinary text (user-defined tokens map to their id either way).
            add_special: prepend BOS when ``add_bos`` and append EOS when ``add_eos`` (llama.cpp's
                ``add_special``; an empty text then gives ``[bos]``).

        Returns:
            list of int token ids.

        Raises:
            TypeError: ``text`` is not a str.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        with self._lock:
            self._hf.encode_special_tokens = not special
            ids = self._hf.encode(text, add_special_tokens=False).ids
        if add_special:
            if self.add_bos and self.bos_id is not None:
                ids.insert(0, self.bos_id)
            if self.add_eos and self.eos_id is not None:
                ids.append(self.eos_id)
        return ids

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes one token stands for (control and user-defined tokens: their text; unused
        tokens of a SentencePiece vocabulary: nothing, as llama.cpp).

        Raises:
            ValueError: ``token_id`` outside ``[0, vocab_size)``.
        """
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token_id must be in [0, {self.vocab_size}), got {token_id}")
        b = self._bytes[token_id]
        if b is None:
            t, kind = self._tokens[token_id], self._types[token_id]
            if kind in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED, TOKEN_TYPE_UNKNOWN):
                b = t.encode("utf-8")
            elif self.model == "gpt2":
                b = _token_bytes(t)
            elif kind == TOKEN_TYPE_BYTE:
                b = _byte_token(t)
            elif kind == TOKEN_TYPE_NORMAL:
                b = t.replace(WHITESPACE, " ").encode("utf-8")
            else:
                b = b""
            self._bytes[token_id] = b
        return b

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Token ids -> text (llama.cpp's ``detokenize``). Invalid UTF-8 becomes U+FFFD.

        Args:
            ids: token ids.
            skip_special: leave control and unknown tokens out instead of writing their text.

        Raises:
            ValueError: an id outside ``[0, vocab_size)``.
        """
        out = bytearray()
        for k, i in enumerate(ids):
            i = int(i)
            b = self.token_bytes(i)
            if skip_special and i in self.special_ids:
                continue
            if k == 0 and self.add_space_prefix and b[:1] == b" ":
                b = b[1:]  # the space the encoder prepended
            out += b
        return out.decode("utf-8", errors="replace")

    def stream_decoder(self, skip_special: bool = False) -> "StreamDecoder":
        """A fresh :class:`StreamDecoder` over this tokenizer."""
        return StreamDecoder(self, skip_special=skip_special)


def _byte_token(piece: str) -> bytes:
    """The byte of a SentencePiece byte token ``<0xNN>``.

    Raises:
        GGUFError: ``piece`` is not of that form.
    """
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        try:
            return bytes([int(piece[3:5], 16)])
        except ValueError:
            pass
    raise GGUFError(f"byte token {piece!r} is not of the form <0xNN>")


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
