"""Chat templates: render a conversation into a prompt string.

Follows Hugging Face ``transformers`` (``PreTrainedTokenizerBase.apply_chat_template``): the template
(GGUF ``tokenizer.chat_template``) is a Jinja2 template rendered in an immutable sandbox with
``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols`` extension, a ``raise_exception(message)``
global, and a ``tojson`` filter that keeps non-ASCII text as is.

A file without a template (a base model) is given one by name (``_chat_templates.BUILTIN_TEMPLATES``:
chatml, gemma, llama3) or as a ``.jinja`` file: :func:`resolve_chat_template`.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from ._chat_templates import BUILTIN_TEMPLATES

__all__ = ["render_chat", "chat_prompt_ids", "resolve_chat_template", "TemplateError", "BUILTIN_TEMPLATES", "NO_TEMPLATE_HINT"]

#: what to do when a model file has no chat template (said by the library and the command line)
NO_TEMPLATE_HINT = (f"it is probably a base (not instruct) model; give a template by name "
                    f"({', '.join(BUILTIN_TEMPLATES)}) or as the path of a .jinja file")


class TemplateError(ValueError):
    """The template called ``raise_exception`` or failed to render."""


def resolve_chat_template(name_or_path: str | os.PathLike) -> str:
    """The Jinja2 source of a built-in template name or of a template file.

    Args:
        name_or_path: ``"chatml"``, ``"gemma"``, ``"llama3"`` (see ``BUILTIN_TEMPLATES``), or the path
            of a UTF-8 text file holding a Jinja2 chat template (e.g. ``my-template.jinja``).

    Returns:
        The template source (str).

    Raises:
        TypeError: ``name_or_path`` is not a str or path.
        ValueError: neither a built-in name nor an existing file (the message lists the built-ins),
            an empty file, or one that is not UTF-8 text.
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(f"chat_template must be a template name or a file path, got {type(name_or_path).__name__}")
    if isinstance(name_or_path, str) and name_or_path in BUILTIN_TEMPLATES:
        return BUILTIN_TEMPLATES[name_or_path]
    p = Path(name_or_path).expanduser()
    if not p.is_file():
        raise ValueError(f"unknown chat template {str(name_or_path)!r}: give a built-in name "
                         f"({', '.join(BUILTIN_TEMPLATES)}) or the path of a .jinja file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"chat template file {p} is not UTF-8 text: {exc}") from None
    if not text.strip():
        raise ValueError(f"chat template file {p} is empty")
    import jinja2

    try:
        _compile(text)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"chat template file {p} is not a valid Jinja2 template: line {exc.lineno}: {exc}") from None
    return text


def _raise_exception(message: str):
    raise TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators=None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


@functools.lru_cache(maxsize=16)
def _compile(template: str):
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    return env.from_string(template)


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, (list, tuple)):
        raise TypeError(f"messages must be a list of dicts, got {type(messages).__name__}")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise TypeError(f"messages[{i}] must be a dict, got {type(m).__name__}")
        for key in ("role", "content"):
            if key not in m:
                raise ValueError(f"messages[{i}] has no {key!r}")
            if not isinstance(m[key], str):
                raise ValueError(f"messages[{i}][{key!r}] must be a str, got {type(m[key]).__name__}")


def _split_space(text: str) -> tuple[str, str, str]:
    """(leading whitespace, the rest stripped, trailing whitespace) as Jinja's ``trim`` splits it."""
    core = text.strip()
    lead = text[:len(text) - len(text.lstrip())]
    return lead, core, text[len(lead) + len(core):]


def render_chat(template: str, messages: list[dict], add_generation_prompt: bool = True,
                bos_token: str = "<|im_start|>", eos_token: str = "<|im_end|>",
                **extra: Any) -> str:
    """Render ``messages`` with a chat template.

    Args:
        template: Jinja2 source, e.g. ``GGUFModel.metadata["tokenizer.chat_template"]``.
        messages: ``[{"role": "user", "content": "Hi"}, ...]``; every message needs a str
            ``role`` and a str ``content``.
        add_generation_prompt: end with the header that opens the assistant's turn.
        bos_token, eos_token: exposed to the template as ``bos_token`` / ``eos_token`` (pass the
            tokenizer's texts; the defaults are the ChatML markers of SmolLM2).
        **extra: further template variables (e.g. ``tools``).

    Returns:
        The prompt text. Tokenize it with ``Tokenizer.encode(text, special=True)``.

    Raises:
        TypeError: ``messages`` is not a list of dicts.
        ValueError: a message lacks ``role`` or ``content`` (message names the index), or they are
            not strings.
        TemplateError (a ValueError): the template raised via ``raise_exception`` or is invalid.
    """
    import jinja2

    _check_messages(messages)
    try:
        tmpl = _compile(template)
        return tmpl.render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                           bos_token=bos_token, eos_token=eos_token, **extra)
    except TemplateError:
        raise
    except jinja2.TemplateError as exc:
        raise TemplateError(f"chat template failed: {type(exc).__name__}: {exc}") from exc


def chat_prompt_ids(template: str, messages: list[dict], tokenizer: Any) -> list[int]:
    """Prompt ids of a chat: the template's text with special tokens parsed, each message's content
    as plain text (a ``<start_of_turn>`` typed by a user stays text).

    The template is rendered with a sentinel in place of each content (carrying the content's
    leading and trailing whitespace, so a template's ``| trim`` still applies), the text between
    sentinels is tokenized with ``special=True`` and each content with ``special=False``. The
    template sees the tokenizer's ``bos_token`` / ``eos_token`` texts; nothing else is added (a
    template that wants BOS writes it, as llama.cpp's chat path tokenizes with ``add_special=False``).

    Args:
        template: Jinja2 source.
        messages: ``[{"role": ..., "content": str}, ...]`` (checked as :func:`render_chat` does).
        tokenizer: a ``Tokenizer`` (``encode``, ``bos_token``, ``eos_token``).

    Returns:
        list of int token ids.

    Raises:
        TypeError, ValueError, TemplateError: as :func:`render_chat`.
    """
    _check_messages(messages)
    parts = [_split_space(m["content"]) for m in messages]  # (leading space, core, trailing space)
    sentinels = [f"\x00xi{i}\x00" for i in range(len(messages))]
    masked = [dict(m, content=lead + s + trail) for m, s, (lead, _, trail) in zip(messages, sentinels, parts)]
    text = render_chat(template, masked, add_generation_prompt=True,
                       bos_token=tokenizer.bos_token or "", eos_token=tokenizer.eos_token or "")
    ids: list[int] = []
    for s, (lead, core, trail) in zip(sentinels, parts):
        head, sep, rest = text.partition(s)
        if not sep:
            continue  # the template left this message out
        content = core
        if lead and head.endswith(lead):  # not trimmed: the whitespace stays with the content
            head, content = head[:-len(lead)], lead + content
        if trail and rest.startswith(trail):
            rest, content = rest[len(trail):], content + trail
        ids += tokenizer.encode(head, special=True) + tokenizer.encode(content)
        text = rest
    return ids + tokenizer.encode(text, special=True)
