"""The command line's checks before loading: every option that can be judged without the weights.

Loading a model takes seconds; a bad ``--top-p`` or an empty prompt must not wait for it. The
ranges are the library's (``SamplingParams``, ``generate``): the messages here only say them in
the command line's terms (``--top-p``, ``-n``, ``--ctx``). What needs the model's metadata (its
context length, its tokenizer, its chat template) is read with ``llm._gguf_reader.read_gguf`` (no
weight is read), in one place: ``_metadata``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

__all__ = ["UsageError", "Preflight", "check_before_load", "check_pull_name", "no_template_error"]

# flag of each SamplingParams field, for messages in command-line terms
_FLAGS = {"temperature": "--temperature", "top_p": "--top-p", "top_k": "--top-k", "seed": "--seed",
          "min_p": "--min-p", "repeat_penalty": "--repeat-penalty", "presence_penalty": "--presence-penalty",
          "frequency_penalty": "--frequency-penalty", "repeat_last_n": "--repeat-last-n"}
_DEFAULT_CTX_CAP = 2048  # llm.load's default: min(2048, the model's context length)


class UsageError(ValueError):
    """A bad command-line option; the message names the flag and the value."""


@dataclasses.dataclass
class Preflight:
    """What the checks learned and the command can reuse.

    Attributes:
        path: the model file when it is on disk already (None: a known model still to pull, or a
            synthetic one).
        metadata: the keys read (possibly only the first few), or None when none was needed.
        text_ids: perplexity only: the token ids of the file (no BOS), when the tokenizer was
            built to count them; None otherwise.
        chat_template: the source of ``--chat-template`` (None when not given).
    """

    path: Path | None = None
    metadata: dict | None = None
    text_ids: list[int] | None = None
    chat_template: str | None = None


def check_pull_name(name: str) -> None:
    """``pull NAME``: a known model name, else a ``UsageError`` listing the known ones."""
    from .llm._registry import MODELS

    if name not in MODELS:
        raise UsageError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))}. "
                         f"`pull` fetches only these; to run your own .gguf file, pass it to "
                         f"generate, chat or perplexity with -m PATH")


def check_before_load(args: Any) -> Preflight:
    """Check the options of ``generate``, ``chat`` or ``perplexity`` before any weight is read.

    Raises:
        UsageError: a sampling value out of range, ``-n`` < 1, ``--ctx`` too small, an unknown or
            unusable ``--device`` (cuda without a usable GPU), a ``-m`` that is a directory, a
            missing file or an unknown name, an empty prompt or one longer than the context,
            ``chat`` or ``--chat`` on a model without a chat template and no ``--chat-template``, an
            unknown ``--chat-template`` name or a bad template file, ``--chat-template`` given to
            ``generate`` without ``--chat``, a ``perplexity -f`` file that is missing or shorter than
            one chunk of ``--ctx`` tokens.
    """
    if hasattr(args, "temperature"):
        _check_sampling(args)
    if hasattr(args, "n_predict") and args.n_predict < 1:
        raise UsageError(f"-n must be >= 1 (the number of tokens to generate at most), got {args.n_predict}")
    low = 2 if args.command == "perplexity" else 1
    if args.ctx is not None and args.ctx < low:
        raise UsageError(f"--ctx must be >= {low}, got {args.ctx}")
    _check_device(args.device)
    pre = Preflight(path=_model_path(args.model))
    if getattr(args, "chat_template", None) is not None:
        if args.command == "generate" and not args.chat:
            raise UsageError(f"--chat-template {args.chat_template} is used with --chat (add --chat to wrap the "
                             f"prompt in it)")
        from .llm._chat import resolve_chat_template

        try:
            pre.chat_template = resolve_chat_template(args.chat_template)
        except ValueError as exc:
            raise UsageError(f"--chat-template: {exc}") from None
    if args.command == "generate":
        _check_prompt(args, pre)
    elif args.command == "chat":
        _check_template(pre, "chat", CHAT_HINT)
    elif args.command == "perplexity":
        _check_text_file(args, pre)
    return pre


def _check_sampling(args: Any) -> None:
    from .llm._sampling import SamplingParams

    try:
        SamplingParams(**{k: getattr(args, k) for k in _FLAGS})
    except ValueError as exc:
        msg = str(exc)
        field = msg.split(" ", 1)[0]
        raise UsageError(_FLAGS.get(field, field) + msg[len(field):]) from None


def _check_device(flag: str | None) -> None:
    from ._open import cuda_status

    given = f"--device {flag}" if flag is not None else f"XINFER_DEVICE={os.environ.get('XINFER_DEVICE')}"
    name = flag if flag is not None else os.environ.get("XINFER_DEVICE") or "auto"
    name = name.strip().lower()
    if name in ("auto", "cpu"):
        return
    if not re.fullmatch(r"cuda(:\d+)?", name):
        raise UsageError(f"{given}: not a device; choose cpu, cuda, cuda:N or auto")
    ok, reason = cuda_status()
    if not ok:
        raise UsageError(f"{given}: cuda is not usable here: {reason}. Run on the cpu with --device cpu")


def _model_path(model: str) -> Path | None:
    from .llm._registry import MODELS, model_path

    p = Path(model).expanduser()
    if p.is_dir():
        found = sorted(p.glob("*.gguf"))
        hint = f", e.g. -m {found[0]}" if found else " (this one holds no .gguf file)"
        raise UsageError(f"-m {model}: is a directory; give a .gguf file{hint}")
    if p.is_file():
        return p
    if model.startswith("synthetic:"):
        return None
    if model in MODELS:
        cached = model_path(model)
        return cached if cached.is_file() else None  # pulled by load
    if model.endswith(".gguf") or os.sep in model:
        raise UsageError(f"-m {model}: model file not found")
    raise UsageError(f"-m {model}: unknown model {model!r}; known models: {', '.join(sorted(MODELS))} "
                     f"(fetch one with `xinfer-async pull NAME`), or give the path of a .gguf file")


def _metadata(pre: Preflight) -> dict | None:
    """The model's metadata (``read_gguf``: header, keys and tensor infos, bounded and checked, no
    weight read; ~0.1 s for SmolLM2); None when the file is not on disk yet. The one place that
    reads it."""
    from .llm._gguf_reader import read_gguf

    if pre.path is None:
        return None
    if pre.metadata is None:
        pre.metadata = read_gguf(pre.path).metadata
    return pre.metadata


def _context(args: Any, pre: Preflight) -> int | None:
    """The context length ``load`` will give (``--ctx``, else min(2048, the model's)); None if unknown."""
    if args.ctx is not None:
        return args.ctx
    meta = _metadata(pre)
    if meta is None:
        return None
    arch = meta.get("general.architecture", "llama")
    return min(_DEFAULT_CTX_CAP, int(meta.get(f"{arch}.context_length", _DEFAULT_CTX_CAP)))


def _tokenizer(pre: Preflight):
    from .llm._tokenizer import Tokenizer

    return Tokenizer.from_gguf(_metadata(pre))


def no_template_error(what: str, path: Any, hint: str) -> UsageError:
    """The error of ``chat`` / ``--chat`` (``what``) on a model file without a chat template."""
    from .llm._chat import BUILTIN_TEMPLATES

    return UsageError(f"{what}: the model file {path} has no chat template (tokenizer.chat_template): it is "
                      f"probably a base (not instruct) model; give one with --chat-template NAME|FILE "
                      f"({', '.join(BUILTIN_TEMPLATES)}, or a .jinja file), or {hint}")


#: what ``chat`` on a model without a template suggests besides --chat-template
CHAT_HINT = "use generate -p TEXT with it"


def _check_template(pre: Preflight, what: str, hint: str) -> None:
    meta = _metadata(pre)
    if pre.chat_template is None and meta is not None and not meta.get("tokenizer.chat_template"):
        raise no_template_error(what, pre.path, hint)


def _check_prompt(args: Any, pre: Preflight) -> None:
    if args.prompt == "":
        raise UsageError('-p is empty: give a prompt of at least one token of text, e.g. -p "The sky is"')
    if getattr(args, "chat", False):
        _check_template(pre, "--chat", "leave --chat out")
    ctx = _context(args, pre)
    if ctx is None:
        return
    # every token but a SentencePiece space prefix covers at least one byte, so a prompt of b bytes
    # is at most b + 1 tokens (+1 for BOS, +1 for EOS); the tokenizer (seconds for a large
    # vocabulary) is built only when that bound does not settle it
    nbytes = len(args.prompt.encode("utf-8"))
    if nbytes + 3 <= ctx and not getattr(args, "chat", False):
        return
    n = _prompt_tokens(args, pre)
    with_template = " in the chat template" if getattr(args, "chat", False) else ""
    if n > ctx:
        raise UsageError(f"-p has {n} tokens{with_template} but the context holds {ctx}: shorten the prompt or "
                         f"give a larger --ctx (at most the model's context length)")


def _prompt_tokens(args: Any, pre: Preflight) -> int:
    """Tokens of the prompt as ``generate`` will run it (with the chat template under --chat)."""
    meta = _metadata(pre)
    tok = _tokenizer(pre)
    if getattr(args, "chat", False):
        from .llm._chat import chat_prompt_ids

        template = pre.chat_template or meta["tokenizer.chat_template"]
        return len(chat_prompt_ids(template, [{"role": "user", "content": args.prompt}], tok))
    return len(tok.encode(args.prompt, special=args.special, add_special=True))


def _check_text_file(args: Any, pre: Preflight) -> None:
    f = Path(args.file)
    if not f.is_file():
        raise UsageError(f"-f {args.file}: " + ("is a directory" if f.is_dir() else "no such file"))
    text = f.read_text(encoding="utf-8", errors="replace")
    nbytes = len(text.encode("utf-8"))
    if nbytes < args.ctx:  # fewer bytes than --ctx: surely fewer tokens than one chunk
        raise UsageError(f"-f {args.file} has {nbytes} bytes, fewer than one chunk of --ctx {args.ctx} "
                         f"tokens: give a longer file or a smaller --ctx")
    if pre.path is None:
        return
    ids = _tokenizer(pre).encode(text)
    if len(ids) < args.ctx:
        raise UsageError(f"-f {args.file} has {len(ids)} tokens, fewer than one chunk of --ctx {args.ctx}: "
                         f"give a longer file or a smaller --ctx")
    pre.text_ids = ids
