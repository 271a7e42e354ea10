"""Chat templates: render a conversation into a prompt string.

Follows Hugging Face ``transformers`` (``PreTrainedTokenizerBase.apply_chat_template``): the template
(GGUF ``tokenizer.chat_template``) is a Jinja2 template rendered in an immutable sandbox with
``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols`` extension, a ``raise_exception(message)``
global, and a ``tojson`` filter that keeps non-ASCII text as is.
"""

from __future__ import annotations

import functools
import json
from typing import Any

__all__ = ["render_chat", "TemplateError"]


class TemplateError(ValueError):
    """The template called ``raise_exception`` or failed to render."""


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
    try:
        tmpl = _compile(template)
        return tmpl.render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                           bos_token=bos_token, eos_token=eos_token, **extra)
    except TemplateError:
        raise
    except jinja2.TemplateError as exc:
        raise TemplateError(f"chat template failed: {type(exc).__name__}: {exc}") from exc
